//! The pace of a wheel on a store in this process alone (`sqlite::memory:`), counted in store
//! calls rather than timed: an idle wheel sleeps until its next due time, whatever was scheduled,
//! moved or cancelled meanwhile, and wakes for each change.
#![cfg(feature = "sqlite")]

use std::time::Duration;

use crate::durable::{DurableScheduler, Task};

fn calls(timers: &DurableScheduler) -> u64 {
    timers.wheel.conn.store_calls().expect("an embedded store")
}

/// Two days of paused time with tasks due within a revolution (which on Redis would sit in the
/// ring and keep the leader ticking every tick until due) and one cancelled (whose ring entry
/// would stay): a few hundred calls in all, about ten every two hours, not one a tick.
#[tokio::test(start_paused = true)]
async fn an_idle_wheel_in_memory_calls_its_store_a_few_times_an_hour() {
    let timers = DurableScheduler::builder("sqlite::memory:", "paced").connect().await.unwrap();
    let worker = timers.run(|_: Task| async { Ok::<(), std::io::Error>(()) });
    worker.ready().await;
    let before = calls(&timers);
    timers.schedule("half-an-hour", Duration::from_secs(1800), "").await.unwrap();
    timers.schedule("dropped", Duration::from_secs(600), "").await.unwrap();
    assert!(timers.cancel("dropped").await.unwrap());
    timers.schedule("moved", Duration::from_secs(3000), "").await.unwrap();
    timers.reschedule("moved", Duration::from_secs(900)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(48 * 3600)).await;
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.acked, stats.cancelled, stats.pending), (2, 1, 0), "{stats:?}");
    let made = calls(&timers) - before;
    // 24 rounds of two hours, about ten calls each (the leader's tick, a heartbeat, the gauges,
    // the idle worker's wake-up waits and its cancel follower's), and the runs themselves; a
    // leader that ticked every second for half an hour would make 1,800 more.
    assert!(made < 500, "{made} store calls in 48 idle hours");
    worker.shutdown().await;
}
