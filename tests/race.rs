//! Races on shared keys, on a multi-thread runtime in real time: several tasks schedule, cancel,
//! reschedule and schedule again the same few keys. Whatever the interleaving, each accepted
//! timer ends exactly once, and a generation whose `Scheduled` says it was cancelled never runs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_timewheel::{Advance, Error, Repeat, Scheduler, WheelKind};

const TASKS: u64 = 4;
const ROUNDS: u64 = 2_000;
const KEYS: u64 = 3;

async fn hammer(wheel: WheelKind, advance: Advance) {
    let timer = Scheduler::builder().wheel(wheel).advance(advance).start().unwrap();
    let ran: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let generation = Arc::new(AtomicU64::new(0));
    let cancels_won = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (timer, ran, generation, cancels_won) =
            (timer.clone(), ran.clone(), generation.clone(), cancels_won.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ task;
            let mut next = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let mut accepted = Vec::new();
            for _ in 0..ROUNDS {
                let key = format!("shared-{}", next(KEYS));
                match next(5) {
                    0 | 1 => {
                        let g = generation.fetch_add(1, Ordering::Relaxed);
                        let ran = ran.clone();
                        // Recorded in the closure body: on the actor, at the moment it starts the job.
                        let job = move |_key: String| {
                            *ran.lock().unwrap().entry(g).or_insert(0) += 1;
                            std::future::ready(())
                        };
                        let delay = Duration::from_micros(next(3_000));
                        let repeating = next(4) == 0;
                        let scheduled = if repeating {
                            timer
                                .schedule_repeating(key.as_str(), Duration::from_millis(1), Repeat::Times(2), job)
                                .await
                        } else {
                            timer.schedule(key.as_str(), delay, job).await
                        };
                        match scheduled {
                            Ok(done) => accepted.push((g, repeating, done)),
                            Err(Error::DuplicateKey(k)) => assert_eq!(k, key),
                            Err(e) => panic!("unexpected {e}"),
                        }
                    }
                    2 | 3 => {
                        if timer.cancel(&key).await {
                            cancels_won.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    _ => match timer.reschedule(&key, Duration::from_micros(next(2_000))).await {
                        Ok(()) | Err(Error::NotFound) => {}
                        Err(e) => panic!("unexpected {e}"),
                    },
                }
                // Now and then let time pass, so that timers fire as well as get cancelled.
                match next(64) {
                    0 => tokio::time::sleep(Duration::from_millis(2)).await,
                    1..=8 => tokio::task::yield_now().await,
                    _ => {}
                }
            }
            accepted
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        for (g, repeating, done) in task.await.unwrap() {
            let outcome = tokio::time::timeout(Duration::from_secs(30), done).await.expect("every timer ends");
            outcomes.push((g, repeating, outcome));
        }
    }
    // Every job the actor started has been started once flush returns.
    timer.flush().await;
    let ran = ran.lock().unwrap().clone();
    let mut cancelled = 0;
    for (g, repeating, outcome) in &outcomes {
        let runs = ran.get(g).copied().unwrap_or(0);
        // A repeating timer runs twice in full; a cancel may stop it after its first run.
        let (full, before_cancel) = if *repeating { (2, 0..=1) } else { (1, 0..=0) };
        match outcome {
            Ok(()) => assert_eq!(runs, full, "generation {g} (repeating: {repeating}) fired"),
            Err(Error::Cancelled) => {
                cancelled += 1;
                assert!(
                    before_cancel.contains(&runs),
                    "cancelled generation {g} (repeating: {repeating}) ran {runs} times"
                );
            }
            Err(e) => panic!("generation {g} ended with {e}"),
        }
    }
    let stats = timer.stats();
    assert_eq!(stats.scheduled as usize, outcomes.len());
    assert_eq!(stats.cancelled, cancelled);
    assert_eq!(cancels_won.load(Ordering::Relaxed), cancelled, "each successful cancel ended one timer");
    assert_eq!(stats.pending, 0);
    assert!(cancelled > 0 && (outcomes.len() as u64) > cancelled, "the race exercised both endings");
    assert_eq!(timer.stop().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_on_one_key_hierarchical_next_deadline() {
    hammer(WheelKind::Hierarchical, Advance::NextDeadline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_on_one_key_hierarchical_interval() {
    hammer(WheelKind::Hierarchical, Advance::Interval).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_on_one_key_rounds_next_deadline() {
    hammer(WheelKind::Rounds, Advance::NextDeadline).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_on_one_key_rounds_interval() {
    hammer(WheelKind::Rounds, Advance::Interval).await;
}

/// The actor sleeps until the earliest deadline it knows, and a request wakes it only when it
/// cannot wait for that. Timers due far sooner, scheduled from several threads while the actor is
/// asleep or busy, must each wake it in time: one that did not would wait for the hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timers_due_before_the_actors_wake_up_wake_it_from_any_thread() {
    let timer = Scheduler::builder().start().unwrap();
    timer.schedule("an-hour-away", Duration::from_secs(3600), |_| async {}).await.unwrap();
    timer.flush().await; // the actor now sleeps for the hour
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let timer = timer.clone();
        tasks.push(tokio::spawn(async move {
            // One at a time, so that the wheels often hold nothing but the far timer.
            for i in 0..25u64 {
                let delay = Duration::from_micros((i * 7919 + task * 104_729) % 3_000);
                let done = timer.schedule(format!("soon-{task}-{i}"), delay, |_| async {}).await.unwrap();
                let outcome = tokio::time::timeout(Duration::from_secs(10), done).await;
                assert_eq!(outcome.expect("a timer due within 3 ms fired within 10 s"), Ok(()));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(timer.len(), 1, "only the far timer is left");
}

/// Threads that schedule and cancel without pause, with timers due at once so the actor fires on
/// every tick too, while `flush` and `stop` come over the channel: both are answered (the timers
/// that keep arriving wake the actor, and it answers the channel between its advances), and every
/// accepted timer ends exactly once, fired, cancelled or stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_and_stop_are_answered_while_threads_stream_requests() {
    const THREADS: u64 = 6;
    let timer = Scheduler::builder().start().unwrap();
    // Producers on threads of their own, so they keep placing timers while the actor works.
    let producers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let timer = timer.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
                runtime.block_on(async move {
                    let mut accepted = 0u64;
                    for i in 0u64.. {
                        // Due at once: the actor has timers to fire on every tick as well.
                        let key = format!("stream-{thread}-{i}");
                        match timer.schedule(key.as_str(), Duration::ZERO, |_| async {}).await {
                            Ok(_) => accepted += 1,
                            Err(Error::Stopped) => return accepted,
                            Err(other) => panic!("unexpected {other}"),
                        }
                        if i % 2 == 0 {
                            timer.cancel(&key).await;
                        }
                    }
                    unreachable!()
                })
            })
        })
        .collect();
    let streaming = async {
        while timer.stats().scheduled < 10_000 {
            assert!(!producers.iter().any(|p| p.is_finished()), "a producer stopped early");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), streaming).await.expect("the producers got going");
    let before = timer.stats().scheduled;
    for _ in 0..20 {
        let flushed = tokio::time::timeout(Duration::from_secs(10), timer.flush()).await;
        flushed.expect("flush answered while requests stream in");
    }
    assert!(timer.stats().scheduled > before, "the stream went on while the flushes were answered");
    let stopped = tokio::time::timeout(Duration::from_secs(10), timer.stop()).await;
    let dropped = stopped.expect("stop answered while requests stream in");
    let accepted: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    let stats = timer.stats();
    assert_eq!(stats.scheduled, accepted);
    assert_eq!(stats.pending, 0);
    assert_eq!(stats.fired + stats.cancelled + stats.stopped, accepted, "{stats:?}");
    assert_eq!(stats.stopped, dropped as u64);
    assert!(stats.fired > 0 && stats.cancelled > 0, "both ways of ending were exercised: {stats:?}");
}

/// `len()` (and `stats().pending`) never reads above `max_pending`, whatever the interleaving:
/// eight tasks on four worker threads schedule, cancel and read the count of the same keys, spread
/// over every shard, at once, while the timers also fire. A count summed shard by shard while
/// other threads move timers between shards once read 41 with `max_pending(40)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn len_never_reads_above_max_pending() {
    const MAX: usize = 40;
    const TASKS: u64 = 8;
    const ROUNDS: u64 = 80_000;
    const KEYS: u64 = 400;
    let timer = Scheduler::builder().max_pending(MAX).start().unwrap();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let timer = timer.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = 0x2545_F491_4F6C_DD1Du64 ^ (task + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let mut next = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let (mut highest, mut full) = (0, 0u64);
            for _ in 0..ROUNDS {
                let key = format!("k{}", next(KEYS));
                match next(8) {
                    0..=2 => match timer.schedule(key.as_str(), Duration::from_micros(next(3_000)), |_| async {}).await
                    {
                        Ok(_) | Err(Error::DuplicateKey(_)) => {}
                        Err(Error::Full(max)) => {
                            assert_eq!(max, MAX);
                            full += 1;
                        }
                        Err(e) => panic!("unexpected {e}"),
                    },
                    3..=4 => drop(timer.cancel_now(&key)),
                    5 => {
                        let pending = timer.stats().pending;
                        assert!(pending <= MAX, "stats().pending read {pending} with max_pending({MAX})");
                    }
                    _ => {
                        let len = timer.len();
                        assert!(len <= MAX, "len() read {len} with max_pending({MAX})");
                        highest = highest.max(len);
                    }
                }
                if next(256) == 0 {
                    tokio::task::yield_now().await;
                }
            }
            (highest, full)
        }));
    }
    let (mut highest, mut full) = (0, 0);
    for task in tasks {
        let (h, f) = task.await.unwrap();
        highest = highest.max(h);
        full += f;
    }
    // The bound was pressed on: schedules were refused as Full, and len() reached it.
    assert!(full > 0 && highest == MAX, "the race never filled the service: highest {highest}, {full} refused");
    assert!(timer.len() <= MAX);
}
