//! `Scheduler::debounce` in process, on Tokio's paused clock: one run a burst, `quiet` after its
//! last call and never later than `max_wait` after its first, running the last call's job.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_timewheel::{Error, Scheduler};

const TICK: Duration = Duration::from_millis(10);

/// What ran: (the job's label, when, from the test's start).
type Ran = Arc<Mutex<Vec<(String, Duration)>>>;

fn job(ran: &Ran, start: Instant, label: String) -> impl FnOnce(String) -> std::future::Ready<()> + Send + 'static {
    let ran = ran.clone();
    move |_key| {
        ran.lock().unwrap().push((label, start.elapsed()));
        std::future::ready(())
    }
}

/// A call every 400 ms for 10 s, debounced at 2 s with a 3 s cap: a run at each cap while the
/// calls go on, with the last job before it, and one 2 s after the last call.
#[tokio::test(start_paused = true)]
async fn a_burst_runs_its_last_job_at_the_cap_or_after_the_quiet_period() {
    let timer = Scheduler::builder().tick(TICK).start().unwrap();
    let (start, ran) = (Instant::now(), Ran::default());
    let (quiet, cap) = (Duration::from_secs(2), Duration::from_secs(3));
    let mut opened = Vec::new();
    for i in 0..25 {
        opened.push(timer.debounce("digest", quiet, cap, job(&ran, start, format!("change {i}"))).await.unwrap());
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let got = ran.lock().unwrap().clone();
    let labels: Vec<&str> = got.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["change 7", "change 15", "change 23", "change 24"], "{got:?}");
    let firsts: Vec<usize> = opened.iter().enumerate().filter(|(_, o)| **o).map(|(i, _)| i).collect();
    assert_eq!(firsts, [0, 8, 16, 24]);
    let times: Vec<Duration> = got.iter().map(|(_, at)| *at).collect();
    // 0 + 3 s, 3.2 + 3 s, 6.4 + 3 s, then 9.6 + 2 s: on the tick, never early.
    for (at, want) in times.iter().zip([3000, 6200, 9400, 11600]) {
        let want = Duration::from_millis(want);
        assert!(*at >= want && *at <= want + TICK, "{at:?} for {want:?}: {got:?}");
    }
    assert_eq!(timer.stats().fired, 4);
}

/// A cancel ends a burst; a key scheduled another way joins; bad input is refused.
#[tokio::test(start_paused = true)]
async fn cancel_ends_a_burst_and_bad_input_is_refused() {
    let timer = Scheduler::builder().tick(TICK).start().unwrap();
    let (start, ran) = (Instant::now(), Ran::default());
    let s = Duration::from_secs(1);
    assert!(timer.debounce("k", s, s * 5, job(&ran, start, "a".into())).await.unwrap());
    assert!(!timer.debounce("k", s, s * 5, job(&ran, start, "b".into())).await.unwrap());
    assert!(timer.cancel("k").await);
    assert!(timer.debounce("k", s, s * 5, job(&ran, start, "c".into())).await.unwrap(), "a new burst");
    // A timer scheduled another way: the debounce opens a burst on it and its job is replaced.
    timer.schedule("plain", s * 60, job(&ran, start, "plain".into())).await.unwrap();
    assert!(timer.debounce("plain", s, s, job(&ran, start, "debounced".into())).await.unwrap());
    tokio::time::sleep(s * 3).await;
    // Both are due on the same tick, whose timers fire in no set order.
    let mut labels: Vec<String> = ran.lock().unwrap().iter().map(|(l, _)| l.clone()).collect();
    labels.sort();
    assert_eq!(labels, ["c", "debounced"]);

    let bad = timer.debounce("x", s * 2, s, job(&ran, start, "x".into())).await;
    assert!(matches!(bad, Err(Error::Invalid(ref why)) if why.contains("max_wait")), "{bad:?}");
    assert!(matches!(timer.debounce("", s, s, job(&ran, start, "x".into())).await, Err(Error::Invalid(_))));
    timer.schedule_repeating("tick", s, tokio_timewheel::Repeat::Forever, |_| async {}).await.unwrap();
    let on_repeating = timer.debounce("tick", s, s, job(&ran, start, "x".into())).await;
    assert!(matches!(on_repeating, Err(Error::Invalid(_))), "{on_repeating:?}");
    timer.stop().await;
    assert!(matches!(timer.debounce("late", s, s, job(&ran, start, "x".into())).await, Err(Error::Stopped)));
}

/// A burst opened while the last burst's job still runs: its timer fires on time, and its job
/// waits for the running one to end, so the jobs of one key never overlap.
#[tokio::test(start_paused = true)]
async fn a_burst_s_job_waits_for_the_running_one() {
    let timer = Scheduler::builder().tick(TICK).start().unwrap();
    let start = Instant::now();
    let spans = Arc::new(Mutex::new(Vec::<(String, Duration, Duration)>::new()));
    let job = |label: &'static str| {
        let spans = spans.clone();
        move |_key: String| async move {
            let began = start.elapsed();
            tokio::time::sleep(Duration::from_secs(5)).await;
            spans.lock().unwrap().push((label.to_owned(), began, start.elapsed()));
        }
    };
    let s = Duration::from_secs(1);
    assert!(timer.debounce("k", s, s, job("first")).await.unwrap());
    tokio::time::sleep(Duration::from_secs(2)).await; // the first job runs from 1 s to 6 s
    assert!(timer.debounce("k", s, s, job("second")).await.unwrap(), "a new burst");
    tokio::time::sleep(Duration::from_secs(15)).await;
    let got = spans.lock().unwrap().clone();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[1].1 >= got[0].2, "the second job began before the first ended: {got:?}");
    assert!(got[1].1 <= got[0].2 + TICK, "{got:?}");
    assert_eq!(timer.stats().fired, 2);
}
