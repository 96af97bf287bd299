//! Jobs and handlers run inside a `tracing` span that says which timer or delivery they are:
//! what they log carries the span's fields.
//!
//! The durable test (feature `redis`) runs on the store the run selects (`support/store.rs`: a
//! `redis-server`, or with `TIMEWHEEL_TEST_STORE=sqlite` a SQLite file of the embedded store);
//! without a `redis-server` it prints a skip note and passes, except under `CI=true`, where it
//! fails.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use support::logs::Captured;

use tokio_timewheel::Scheduler;

/// The lines logged so far, installing the subscriber (every level, no colours) on first use.
fn logged() -> String {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    let captured = CAPTURED.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    });
    captured.text()
}

#[tokio::test]
async fn a_job_logs_inside_a_span_with_the_services_name_and_the_key() {
    logged();
    let timer = Scheduler::builder().name("sessions").start().unwrap();
    let done = timer
        .schedule("session-7", Duration::from_millis(1), |key| async move {
            tracing::info!("idle timeout of {key}");
        })
        .await
        .unwrap();
    done.await.unwrap();
    let line = logged().lines().find(|l| l.contains("idle timeout of session-7")).map(str::to_owned);
    let line = line.expect("the job logged");
    assert!(line.contains("timer{wheel=\"sessions\" key=\"session-7\"}"), "{line}");
}

/// A job that panics is logged at `ERROR` with its timer's key and the panic's message, with the
/// jobs' `DEBUG` spans off (this test's subscriber takes `INFO` and up, on this thread, which
/// runs the whole runtime): a closure that panics before it returns its future, a future that
/// panics in its first poll, one that panics once it goes on as a task of its own, and a payload
/// that is not text.
#[tokio::test]
async fn a_panicking_job_is_logged_at_error_with_its_key_and_message() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _on_this_thread = tracing::subscriber::set_default(subscriber);
    let timer = Scheduler::builder().start().unwrap();
    let soon = Duration::from_millis(1);
    let done = [
        timer.schedule("conn-1", soon, |_| -> std::future::Ready<()> { panic!("closure broke") }).await,
        timer.schedule("conn-2", soon, |key| async move { panic!("future of {key} broke") }).await,
        timer
            .schedule("conn-3", soon, |_| async {
                tokio::task::yield_now().await;
                panic!("later poll broke")
            })
            .await,
        timer.schedule("conn-4", soon, |_| async { std::panic::panic_any(42u32) }).await,
    ];
    for done in done {
        assert_eq!(done.unwrap().await, Ok(()), "a job that panics counts as fired");
    }
    let expected = [
        ("\"conn-1\"", "closure broke"),
        ("\"conn-2\"", "future of conn-2 broke"),
        ("\"conn-3\"", "later poll broke"),
        ("\"conn-4\"", "non-string panic payload"),
    ];
    // The outcome is known when the timer fires; its job starts just after.
    let started = std::time::Instant::now();
    loop {
        let text = captured.text();
        let found = |(key, message): &(&str, &str)| {
            text.lines().any(|l| l.contains("ERROR") && l.contains(key) && l.contains(message))
        };
        if expected.iter().all(found) {
            break;
        }
        let missing: Vec<_> = expected.iter().filter(|e| !found(e)).collect();
        assert!(started.elapsed() < Duration::from_secs(10), "no ERROR line for {missing:?} in:\n{text}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_logs_inside_a_span_with_the_key_and_the_attempt() {
    use tokio_timewheel::durable::{DurableScheduler, Task};

    logged();
    let Some(store) = support::TestStore::start() else { return };
    let timers = DurableScheduler::builder(store.url(), "spans")
        .tick(Duration::from_millis(20))
        .backoff(Duration::from_millis(20))
        .connect()
        .await
        .unwrap();
    let worker = timers.run(|task: Task| async move {
        tracing::info!("reviewing {}", task.key());
        if task.attempt() == 1 {
            Err("not yet")
        } else {
            Ok(())
        }
    });
    timers.schedule("order-42", Duration::ZERO, Vec::new()).await.unwrap();
    let second = "task{wheel=\"spans\" partition=0 key=\"order-42\" attempt=2}";
    let seen = support::durable::wait_until(Duration::from_secs(10), || {
        logged().lines().any(|l| l.contains("reviewing order-42") && l.contains(second))
    })
    .await;
    worker.shutdown().await;
    let lines: Vec<String> = logged().lines().filter(|l| l.contains("reviewing order-42")).map(str::to_owned).collect();
    assert!(seen, "the retry's line carries its span: {lines:#?}");
    assert!(lines[0].contains("task{wheel=\"spans\" partition=0 key=\"order-42\" attempt=1}"), "{lines:#?}");
}
