//! The batch API: one lock per shard per call, one result per item.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_timewheel::{Error, Scheduler, MAX_KEY_LEN};

fn recorder(
    log: &Arc<Mutex<Vec<String>>>,
) -> impl Fn(String) -> std::future::Ready<()> + Send + Sync + Clone + 'static {
    let log = log.clone();
    move |key| {
        log.lock().unwrap().push(key);
        std::future::ready(())
    }
}

/// On a current-thread runtime the service runs only when the caller's task yields: each batch
/// call gives it a turn (a spawned task stands in for it here), so a run of batches does not hold
/// up the timers due meanwhile.
#[tokio::test(start_paused = true)]
async fn each_batch_call_gives_the_service_its_turn() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    // What the stand-in sees when it gets its turn: whether timer "a" is pending.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let other_task = || {
        let (seen, timer) = (seen.clone(), timer.clone());
        drop(tokio::spawn(async move { seen.lock().unwrap().push(timer.contains("a")) }));
    };
    other_task();
    let results = timer.schedule_many([("a", Duration::from_secs(1), recorder(&log))]).await;
    assert_eq!(results, [Ok(())]);
    assert_eq!(*seen.lock().unwrap(), [false], "schedule_many gave way, before scheduling");
    other_task();
    assert_eq!(timer.cancel_many(["a", "b"]).await, [true, false]);
    assert_eq!(*seen.lock().unwrap(), [false, false], "cancel_many gave way, after cancelling");
}

#[tokio::test(start_paused = true)]
async fn a_batch_fails_item_by_item() {
    let timer = Scheduler::builder().max_pending(5).start().unwrap();
    let log = Arc::default();
    let job = recorder(&log);
    timer.schedule("pending", Duration::from_secs(1), job.clone()).await.unwrap();
    let ms = Duration::from_millis;
    let results = timer
        .schedule_many([
            ("a".to_string(), ms(10), job.clone()),
            ("a".to_string(), ms(20), job.clone()), // duplicate inside the batch
            ("pending".to_string(), ms(20), job.clone()), // duplicate of a pending timer
            (String::new(), ms(20), job.clone()),   // empty key
            ("b".repeat(MAX_KEY_LEN + 1), ms(20), job.clone()), // a key over MAX_KEY_LEN
            ("c".to_string(), ms(30), job.clone()),
            ("d".to_string(), ms(40), job.clone()),
            ("e".to_string(), ms(50), job.clone()),
            ("f".to_string(), ms(60), job.clone()), // over max_pending
        ])
        .await;
    assert_eq!(results[0], Ok(()));
    assert_eq!(results[1], Err(Error::DuplicateKey("a".into())));
    assert_eq!(results[2], Err(Error::DuplicateKey("pending".into())));
    assert!(matches!(results[3], Err(Error::Invalid(_))));
    assert!(matches!(results[4], Err(Error::Invalid(_))));
    assert_eq!(&results[5..8], [Ok(()), Ok(()), Ok(())]);
    assert_eq!(results[8], Err(Error::Full(5)));
    assert_eq!(timer.len(), 5);

    tokio::time::sleep(ms(100)).await;
    let mut fired = log.lock().unwrap().clone();
    fired.sort();
    assert_eq!(fired, ["a", "c", "d", "e"], "the accepted items fired, each once");
    assert_eq!(timer.stats().fired, 4);
}

#[tokio::test(start_paused = true)]
async fn cancel_many_reports_each_key() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Arc::default();
    let job = recorder(&log);
    let keys: Vec<String> = (0..1000).map(|i| format!("conn-{i}")).collect();
    let results = timer.schedule_many(keys.iter().map(|k| (k.clone(), Duration::from_millis(50), job.clone()))).await;
    assert!(results.iter().all(Result::is_ok));
    timer.flush().await;

    // Cancel the even ones, plus keys that were never scheduled and one twice.
    let mut to_cancel: Vec<String> = keys.iter().step_by(2).cloned().collect();
    to_cancel.push("missing".into());
    to_cancel.push("conn-0".into());
    let cancelled = timer.cancel_many(&to_cancel).await;
    assert_eq!(cancelled.len(), 502);
    assert!(cancelled[..500].iter().all(|&c| c));
    assert_eq!(&cancelled[500..], [false, false], "a missing key and a second cancel find nothing");
    assert_eq!(timer.len(), 500);

    tokio::time::sleep(Duration::from_millis(100)).await;
    let fired = log.lock().unwrap().clone();
    assert_eq!(fired.len(), 500);
    assert!(fired.iter().all(|k| k[5..].parse::<u32>().unwrap() % 2 == 1), "no cancelled timer ran");
    let stats = timer.stats();
    assert_eq!((stats.fired, stats.cancelled, stats.pending), (500, 500, 0));
}

#[tokio::test(start_paused = true)]
async fn a_batch_on_a_stopped_service_is_refused_whole() {
    let timer = Scheduler::builder().start().unwrap();
    timer.stop().await;
    let job = |_key: String| async {};
    let results = timer.schedule_many([("x", Duration::from_secs(1), job), ("y", Duration::from_secs(1), job)]).await;
    assert_eq!(results, [Err(Error::Stopped), Err(Error::Stopped)]);
    assert!(timer.is_empty());
    assert_eq!(timer.cancel_many(["x"]).await, [false]);
}

#[tokio::test(start_paused = true)]
async fn stop_counts_batched_timers() {
    let timer = Scheduler::builder().start().unwrap();
    let job = |_key: String| async {};
    let results = timer.schedule_many((0..100).map(|i| (format!("k{i}"), Duration::from_secs(60), job))).await;
    assert_eq!(results.len(), 100);
    assert_eq!(timer.stop().await, 100);
    assert_eq!(timer.stats().stopped, 100);
}

/// Without a cap the batch is claimed shard by shard under one lock each: duplicates inside the
/// batch and against pending timers must still fail alone, and the first of a pair must win.
#[tokio::test(start_paused = true)]
async fn duplicates_fail_alone_when_claimed_shard_by_shard() {
    let timer = Scheduler::builder().start().unwrap();
    let log = Arc::default();
    let job = recorder(&log);
    timer.schedule("k7", Duration::from_secs(1), job.clone()).await.unwrap();
    // 200 distinct keys over every shard, each twice in a row, plus the pending "k7".
    let items: Vec<(String, Duration, _)> =
        (0..200).flat_map(|i| [i, i]).map(|i| (format!("k{i}"), Duration::from_millis(10 + i), job.clone())).collect();
    let results = timer.schedule_many(items).await;
    for (n, result) in results.iter().enumerate() {
        let key = format!("k{}", n / 2);
        let expected = if n % 2 == 1 || key == "k7" { Err(Error::DuplicateKey(key)) } else { Ok(()) };
        assert_eq!(*result, expected, "item {n}");
    }
    assert_eq!(timer.len(), 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(log.lock().unwrap().len(), 199, "every accepted item fired once (k7 waits for its own 1 s)");
    assert_eq!(timer.stats().scheduled, 200);
}
