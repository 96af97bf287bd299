//! Typed payloads of the durable mode (feature `serde`), on the store the run selects
//! (`support/store.rs`: a real `redis-server` started for each test, or a SQLite file of the
//! embedded store): a struct through the store and back, and what a payload that is not the JSON
//! of the type asked for comes to.
//!
//! Run with `cargo test --features redis,serde --test durable_json` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature.
#![cfg(all(feature = "redis", feature = "serde"))]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use support::TestStore;
use tokio_timewheel::durable::{DurableBuilder, Error, Json, Task};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Review {
    order: u64,
    customer: String,
    items: Vec<String>,
    note: Option<String>,
}

/// The tests' settings (`support::durable::builder`) with a lease of 5 s.
fn builder(url: &str, name: &str) -> DurableBuilder {
    support::durable::builder(url, name).lease(Duration::from_secs(5))
}

/// A struct scheduled as `Json(&value)` reaches the handler as the same struct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_struct_round_trips_through_redis() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "json").connect().await.expect("connect");
    let sent = Review {
        order: 42,
        customer: "Zoë \"quotes\" \u{1F600}".into(),
        items: vec!["book".into(), "lamp".into()],
        note: None,
    };
    timers.schedule("order-42:review", Duration::from_millis(50), Json(&sent)).await.expect("schedule");
    assert_eq!(
        timers.schedule("order-42:review", Duration::ZERO, Json(&sent)).await,
        Err(Error::DuplicateKey("order-42:review".into())),
        "a JSON payload answers as any payload does"
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let worker = timers.run(move |task: Task| {
        let tx = tx.clone();
        async move {
            let review: Review = task.json()?;
            let _ = tx.send((task.key().to_string(), review));
            Ok::<(), Error>(())
        }
    });
    let (key, got) = tokio::time::timeout(Duration::from_secs(3), rx.recv()).await.expect("never handled").unwrap();
    assert_eq!(key, "order-42:review");
    assert_eq!(got, sent);
    worker.shutdown().await;
    assert!(!timers.contains("order-42:review").await.unwrap(), "not acknowledged");

    // A value serde_json cannot write (a map whose keys are not strings) is refused before
    // anything reaches Redis.
    let unwritable: BTreeMap<Vec<u8>, u8> = [(vec![1u8], 1u8)].into();
    let refused = timers.schedule("bad", Duration::ZERO, Json(&unwritable)).await;
    let Err(Error::Payload(why)) = &refused else { panic!("{refused:?}") };
    assert!(why.contains("\"bad\"") && why.contains("JSON"), "{why}");
    assert!(!timers.contains("bad").await.unwrap());
}

/// A payload that is not the JSON of the type asked for is an `Error::Payload` that names the
/// task and the type, never a panic; returned from the handler it fails the delivery like any
/// error, and the dead letter reads the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_of_another_shape_is_a_payload_error() {
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "json-bad").max_attempts(1).connect().await.expect("connect");
    timers.schedule("raw", Duration::ZERO, b"not json at all".to_vec()).await.unwrap();
    timers.schedule("other", Duration::ZERO, Json(&[1, 2, 3])).await.unwrap();
    let worker = timers.run(|task: Task| async move { task.json::<Review>().map(drop) });
    let mut dead = Vec::new();
    for _ in 0..300 {
        dead = timers.dead_letters(10).await.unwrap();
        if dead.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    worker.shutdown().await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    for d in &dead {
        assert!(d.last_error().contains("is not the JSON of a") && d.last_error().contains("Review"), "{d:?}");
        assert!(d.last_error().contains(&format!("{:?}", d.key())), "{d:?}");
        let again = d.json::<Review>();
        assert!(matches!(again, Err(Error::Payload(_))), "{again:?}");
    }
    let other = dead.iter().find(|d| d.key() == "other").unwrap();
    assert_eq!(other.json::<Vec<u32>>(), Ok(vec![1, 2, 3]), "a dead letter's payload reads as its own type");
    let shown = dead[0].json::<Review>().unwrap_err().to_string();
    assert!(shown.contains("Json("), "the error says what to do: {shown}");
}
