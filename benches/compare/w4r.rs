//! W4R, push-backs: N connections (default 100,000) each get a 30 s idle timeout, which every
//! connection's traffic pushes back 10 times (round by round, connections in a shuffled order),
//! then each connection closes and its timeout is cancelled. The figure is the wall time of the
//! push-back rounds divided by the push-backs (N * 10); arming and closing are not timed. No
//! timeout comes due during the run.
//!
//! Every implementation runs in this one process, one after the other in an order rotated per
//! repetition, each on a fresh runtime; `run` prints each run's figure and then the medians, with
//! the ratios against the better of the two rivals a user would otherwise pick.
//!
//! ```text
//! cargo bench --bench compare -- w4r [N] [--reps=R] [--only=NAME]
//! ```
//!
//! `--only=NAME[,NAME..]` runs the implementations whose name contains a NAME, alone (for a profiler:
//! `valgrind --tool=callgrind` on one implementation's push-backs).

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::{mpsc, Notify};
use tokio::time::Sleep;
use tokio_timewheel::{Scheduler, TimerHandle};
use tokio_util::time::DelayQueue;

use crate::inputs::{self, SplitMix64};
use crate::measure::Rt;

const IDLE: Duration = Duration::from_secs(30);
const PUSHES: usize = 10;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Imp {
    ServiceHandle,
    ServiceReschedule,
    ServiceUpsert,
    QueueUpsert,
    TaskCurrent,
    TaskMulti,
    DelayQueueChannel,
    DelayQueueDirect,
    DelayQueueLocked,
    SleepFloor,
}

const ALL: [Imp; 10] = [
    Imp::ServiceHandle,
    Imp::ServiceReschedule,
    Imp::ServiceUpsert,
    Imp::QueueUpsert,
    Imp::TaskCurrent,
    Imp::TaskMulti,
    Imp::DelayQueueChannel,
    Imp::DelayQueueDirect,
    Imp::DelayQueueLocked,
    Imp::SleepFloor,
];

impl Imp {
    fn name(self) -> &'static str {
        match self {
            Imp::ServiceHandle => "service TimerHandle::reschedule",
            Imp::ServiceReschedule => "service reschedule(key)",
            Imp::ServiceUpsert => "service schedule_or_reset",
            Imp::QueueUpsert => "service TimerQueue::schedule_or_reset",
            Imp::TaskCurrent => "tokio task + Sleep::reset (current_thread)",
            Imp::TaskMulti => "tokio task + Sleep::reset (multi_thread, 2)",
            Imp::DelayQueueChannel => "DelayQueue, owner fed by a channel",
            Imp::DelayQueueDirect => "DelayQueue, driven directly",
            Imp::DelayQueueLocked => "reference: DelayQueue driven directly, behind a Mutex",
            Imp::SleepFloor => "floor: Sleep::reset, caller-owned",
        }
    }

    /// Measures one run: ns per push-back.
    fn run(self, n: usize, order: Arc<Vec<u32>>) -> f64 {
        let rt = if self == Imp::TaskMulti { Rt::Multi } else { Rt::Current };
        let runtime = rt.build();
        runtime.block_on(async move {
            tokio::spawn(async move {
                match self {
                    Imp::ServiceHandle | Imp::ServiceReschedule | Imp::ServiceUpsert => service(self, n, &order).await,
                    Imp::QueueUpsert => queue(n, &order).await,
                    Imp::TaskCurrent | Imp::TaskMulti => tasks(n, &order).await,
                    Imp::DelayQueueChannel => delay_queue_channel(n, &order).await,
                    Imp::DelayQueueDirect => delay_queue_direct(n, &order).await,
                    Imp::DelayQueueLocked => delay_queue_locked(n, &order).await,
                    Imp::SleepFloor => sleep_floor(n, &order).await,
                }
            })
            .await
            .expect("measuring task")
        })
    }
}

fn per_push(started: Instant, n: usize) -> f64 {
    started.elapsed().as_nanos() as f64 / (n * PUSHES) as f64
}

async fn service(imp: Imp, n: usize, order: &[u32]) -> f64 {
    let timer = Scheduler::builder().start().unwrap();
    let keys = inputs::keys(n);
    let job = |_key: String| async {};
    let mut handles: Vec<TimerHandle> = Vec::with_capacity(n);
    for key in &keys {
        handles.push(timer.schedule_or_reset_handle(key, IDLE, job).await.unwrap());
    }
    let started = Instant::now();
    for _ in 0..PUSHES {
        for &i in order {
            let i = i as usize;
            match imp {
                Imp::ServiceHandle => handles[i].reschedule(IDLE).unwrap(),
                Imp::ServiceReschedule => timer.reschedule(&keys[i], IDLE).await.unwrap(),
                _ => assert!(!timer.schedule_or_reset(&keys[i], IDLE, job).await.unwrap()),
            }
        }
    }
    let ns = per_push(started, n);
    for handle in handles {
        assert!(handle.cancel());
    }
    timer.stop().await;
    ns
}

async fn queue(n: usize, order: &[u32]) -> f64 {
    let timer = Scheduler::builder().start().unwrap();
    let (idle, _expired) = timer.queue::<u32>();
    let keys = inputs::keys(n);
    for (i, key) in keys.iter().enumerate() {
        assert!(idle.schedule_or_reset(key, IDLE, i as u32).await.unwrap());
    }
    let started = Instant::now();
    for _ in 0..PUSHES {
        for &i in order {
            assert!(!idle.schedule_or_reset(&keys[i as usize], IDLE, i).await.unwrap());
        }
    }
    let ns = per_push(started, n);
    for key in &keys {
        assert!(idle.remove(key).is_some());
    }
    timer.stop().await;
    ns
}

/// One task per connection, owning its `Sleep`; traffic is a `Notify` the task waits on beside
/// its sleep, and each push-back is done once the task has reset its sleep (a counter).
async fn tasks(n: usize, order: &[u32]) -> f64 {
    let done = Arc::new((AtomicUsize::new(0), Notify::new()));
    let mut traffic = Vec::with_capacity(n);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let wake = Arc::new(Notify::new());
        let (wake2, done) = (wake.clone(), done.clone());
        traffic.push(wake);
        tasks.push(tokio::spawn(async move {
            let sleep = tokio::time::sleep(IDLE);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    () = &mut sleep => return,
                    () = wake2.notified() => {
                        sleep.as_mut().reset(tokio::time::Instant::now() + IDLE);
                        // The last push-back of a round tells the driver.
                        if (done.0.fetch_add(1, Relaxed) + 1) % n == 0 {
                            done.1.notify_one();
                        }
                    }
                }
            }
        }));
    }
    tokio::task::yield_now().await;
    let started = Instant::now();
    for round in 1..=PUSHES {
        for &i in order {
            traffic[i as usize].notify_one();
        }
        while done.0.load(Relaxed) < round * n {
            done.1.notified().await;
        }
    }
    let ns = per_push(started, n);
    for task in tasks {
        task.abort();
    }
    ns
}

async fn delay_queue_channel(n: usize, order: &[u32]) -> f64 {
    let (tx, mut rx) = mpsc::unbounded_channel::<u32>();
    let done = Arc::new((AtomicUsize::new(0), Notify::new()));
    let owner_done = done.clone();
    let owner = tokio::spawn(async move {
        let mut queue = DelayQueue::new();
        let keys: Vec<_> = (0..n as u32).map(|i| queue.insert(i, IDLE)).collect();
        let mut batch = Vec::with_capacity(256);
        loop {
            tokio::select! {
                got = rx.recv_many(&mut batch, 256) => {
                    if got == 0 {
                        return;
                    }
                    for i in batch.drain(..) {
                        queue.reset(&keys[i as usize], IDLE);
                    }
                    owner_done.0.fetch_add(got, Relaxed);
                    owner_done.1.notify_one();
                }
                Some(_) = queue.next() => {}
            }
        }
    });
    tokio::task::yield_now().await;
    let started = Instant::now();
    for round in 1..=PUSHES {
        for &i in order {
            tx.send(i).unwrap();
        }
        while done.0.load(Relaxed) < round * n {
            done.1.notified().await;
        }
    }
    let ns = per_push(started, n);
    drop(tx);
    owner.await.unwrap();
    ns
}

async fn delay_queue_direct(n: usize, order: &[u32]) -> f64 {
    let mut queue = DelayQueue::new();
    let keys: Vec<_> = (0..n as u32).map(|i| queue.insert(i, IDLE)).collect();
    let started = Instant::now();
    for _ in 0..PUSHES {
        for &i in order {
            queue.reset(&keys[i as usize], IDLE);
        }
    }
    let ns = per_push(started, n);
    for key in &keys {
        queue.remove(key);
    }
    ns
}

/// As [`delay_queue_direct`], with the queue behind a `std::sync::Mutex` locked for each
/// push-back, as a queue shared between tasks would be: not a rival (the direct queue is its
/// better form), but what one uncontended lock per push-back costs on this workload (the
/// service's push-back takes its shard's lock).
async fn delay_queue_locked(n: usize, order: &[u32]) -> f64 {
    let queue = std::sync::Mutex::new(DelayQueue::new());
    let keys: Vec<_> = (0..n as u32).map(|i| queue.lock().unwrap().insert(i, IDLE)).collect();
    let started = Instant::now();
    for _ in 0..PUSHES {
        for &i in order {
            queue.lock().unwrap().reset(&keys[i as usize], IDLE);
        }
    }
    let ns = per_push(started, n);
    let mut queue = queue.into_inner().unwrap();
    for key in &keys {
        queue.remove(key);
    }
    ns
}

async fn sleep_floor(n: usize, order: &[u32]) -> f64 {
    let mut sleeps: Vec<Pin<Box<Sleep>>> = (0..n).map(|_| Box::pin(tokio::time::sleep(IDLE))).collect();
    // Registered with the time driver by a first poll, as an awaited sleep would be.
    for sleep in &mut sleeps {
        assert!(futures::poll!(sleep.as_mut()).is_pending());
    }
    let started = Instant::now();
    for _ in 0..PUSHES {
        for &i in order {
            sleeps[i as usize].as_mut().reset(tokio::time::Instant::now() + IDLE);
        }
    }
    per_push(started, n)
}

/// A shuffled order of the connections (Fisher-Yates, SplitMix64), drawn once for every run.
fn shuffled(n: usize) -> Vec<u32> {
    let mut rng = SplitMix64::new(inputs::SEED ^ 0x4A);
    let mut order: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order
}

/// The median, NaN for an implementation not run.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn run(n: usize, reps: usize, only: Option<&str>) {
    let order = Arc::new(shuffled(n));
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); ALL.len()];
    for rep in 0..reps {
        let mut imps: Vec<usize> =
            (0..ALL.len()).filter(|&i| only.is_none_or(|o| o.split(',').any(|o| ALL[i].name().contains(o)))).collect();
        let len = imps.len().max(1);
        imps.rotate_left(rep % len);
        for i in imps {
            let ns = ALL[i].run(n, order.clone());
            eprintln!("rep {}/{reps} {:<48} {ns:>8.1} ns/push", rep + 1, ALL[i].name());
            println!(r#"{{"impl":"{}","workload":"W4R","n":{n},"ns_per_push":{ns:.1}}}"#, ALL[i].name());
            figures[i].push(ns);
        }
    }
    let medians: Vec<f64> = figures.into_iter().map(median).collect();
    let of = |imp: Imp| medians[ALL.iter().position(|&i| i == imp).unwrap()];
    let task = of(Imp::TaskCurrent).min(of(Imp::TaskMulti));
    let dq = of(Imp::DelayQueueChannel).min(of(Imp::DelayQueueDirect));
    let rival = task.min(dq);
    println!("\nW4R, N = {n}, {PUSHES} push-backs each, medians of {reps}:");
    println!("| implementation | ns per push-back | ratio to the better rival ({rival:.1} ns) |");
    println!("|---|---|---|");
    for (imp, m) in ALL.iter().zip(&medians).filter(|(_, m)| !m.is_nan()) {
        println!("| {} | {m:.1} | {:.2}x |", imp.name(), m / rival);
    }
    println!("(better task baseline {task:.1} ns, better DelayQueue {dq:.1} ns)");
}
