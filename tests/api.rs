//! The calls users reach for, with Tokio's semantics: deadlines fixed at the call, one-shot jobs
//! that own what they need, deadlines you can read, an atomic keep-alive, synchronous and guard
//! cancels, pull-style delivery, a clear error without the time driver, and lateness you can see.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{advance, Instant};
use tokio_timewheel::{Error, Recurrence, Repeat, Scheduler, MAX_KEY_LEN};

const MS: Duration = Duration::from_millis(1);

/// Each method that takes a delay fixes its deadline when it is called: the future is created,
/// time moves on 301 ms, and only then is it polled. The timer fires at the first tick after
/// that poll (the deadline is past), not 300 ms after it (as it did when the deadline was taken
/// at the first poll).
#[tokio::test(start_paused = true)]
async fn every_delay_counts_from_the_call_not_the_first_poll() {
    let timer = Scheduler::builder().start().unwrap();
    let fired: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let record = |fired: &Arc<Mutex<Vec<(String, Instant)>>>| {
        let fired = fired.clone();
        move |key: String| {
            fired.lock().unwrap().push((key, Instant::now()));
            async {}
        }
    };
    let start = Instant::now();
    let sleep = timer.sleep_keyed("sleep", 300 * MS);
    let schedule = timer.schedule("schedule", 300 * MS, record(&fired));
    let repeating = timer.schedule_repeating("repeating", 300 * MS, Repeat::Times(1), {
        let fired = fired.clone();
        move |key: String| {
            fired.lock().unwrap().push((key, Instant::now()));
            async {}
        }
    });
    let many = timer.schedule_many([("many", 300 * MS, record(&fired))]);
    let upsert = timer.schedule_or_reset("upsert", 300 * MS, record(&fired));
    advance(301 * MS).await;
    schedule.await.unwrap();
    repeating.await.unwrap();
    assert_eq!(many.await, [Ok(())]);
    assert!(upsert.await.unwrap());
    sleep.await.unwrap();
    let woke = Instant::now();
    assert!(woke - start <= 303 * MS, "the keyed sleep ended {:?} after the call", woke - start);
    timer.flush().await;
    let fired = fired.lock().unwrap();
    assert_eq!(fired.len(), 4, "{fired:?}");
    for (key, at) in fired.iter() {
        assert!(*at - start <= 303 * MS, "{key} fired {:?} after the call", *at - start);
    }
}

/// A reschedule's new deadline, too, counts from the call.
#[tokio::test(start_paused = true)]
async fn a_reschedule_counts_from_the_call() {
    let timer = Scheduler::builder().start().unwrap();
    timer.schedule("k", Duration::from_secs(60), |_| async {}).await.unwrap();
    let start = Instant::now();
    let moved = timer.reschedule("k", 100 * MS);
    advance(150 * MS).await;
    moved.await.unwrap();
    assert_eq!(timer.deadline("k"), Some(start + 100 * MS));
}

/// A one-shot job may own a value that is not `Clone` or `Sync`, such as a `oneshot::Sender`.
#[tokio::test(start_paused = true)]
async fn a_one_shot_job_can_move_a_oneshot_sender() {
    let timer = Scheduler::builder().start().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let not_sync = std::cell::Cell::new(5u32);
    timer
        .schedule("answer", 10 * MS, move |key| async move {
            let _ = tx.send((key, not_sync.get()));
        })
        .await
        .unwrap();
    assert_eq!(rx.await.unwrap(), ("answer".to_string(), 5));
}

#[tokio::test(start_paused = true)]
async fn deadline_reads_when_a_pending_timer_is_due() {
    let timer = Scheduler::builder().start().unwrap();
    let start = Instant::now();
    assert_eq!(timer.deadline("cooldown"), None);
    let done = timer.schedule("cooldown", Duration::from_secs(5), |_| async {}).await.unwrap();
    assert_eq!(timer.deadline("cooldown"), Some(start + Duration::from_secs(5)));
    timer.schedule_repeating("regen", Duration::from_secs(2), Repeat::Forever, |_| async {}).await.unwrap();
    advance(Duration::from_secs(3)).await;
    timer.flush().await;
    assert_eq!(timer.deadline("regen"), Some(start + Duration::from_secs(4)), "a repeating timer's next run");
    done.await.unwrap();
    assert_eq!(timer.deadline("cooldown"), None, "fired: no longer pending");
    assert!(timer.cancel("regen").await);
    assert_eq!(timer.deadline("regen"), None);
}

#[tokio::test(start_paused = true)]
async fn reschedule_at_moves_to_an_absolute_deadline() {
    let timer = Scheduler::builder().start().unwrap();
    let start = Instant::now();
    let done = timer.schedule("order-42", Duration::from_secs(3600), |_| async {}).await.unwrap();
    timer.reschedule_at("order-42", start + Duration::from_secs(60)).await.unwrap();
    assert_eq!(timer.deadline("order-42"), Some(start + Duration::from_secs(60)));
    done.await.unwrap();
    let late = Instant::now() - (start + Duration::from_secs(60));
    assert!(late <= 2 * MS, "fired {late:?} after the new deadline");
    assert_eq!(timer.reschedule_at("order-42", start).await, Err(Error::NotFound));
}

/// The keep-alive upsert: the first call schedules, later ones move the timer and drop their
/// own job, and the key is never free in between.
#[tokio::test(start_paused = true)]
async fn schedule_or_reset_arms_then_pushes_back() {
    let timer = Scheduler::builder().start().unwrap();
    let fired = Arc::new(Mutex::new(Vec::new()));
    let job = |n: u32| {
        let fired = fired.clone();
        move |_key: String| {
            fired.lock().unwrap().push(n);
            async {}
        }
    };
    assert!(timer.schedule_or_reset("idle", 100 * MS, job(1)).await.unwrap());
    advance(80 * MS).await;
    assert!(!timer.schedule_or_reset("idle", 100 * MS, job(2)).await.unwrap());
    let reset_at = Instant::now();
    advance(90 * MS).await;
    timer.flush().await;
    assert!(fired.lock().unwrap().is_empty(), "pushed back: not due yet");
    advance(20 * MS).await;
    timer.flush().await;
    assert_eq!(*fired.lock().unwrap(), [1], "the first job runs, once, at the moved deadline");
    assert!(Instant::now() - reset_at >= 100 * MS);
    assert!(timer.schedule_or_reset("idle", 100 * MS, job(3)).await.unwrap(), "fired: armed anew");
}

/// Many tasks on a multi-thread runtime keep one key alive at once: none ever sees the key
/// taken (`DuplicateKey`) or lost, and exactly one timer is pending at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schedule_or_reset_races_without_a_gap() {
    let timer = Scheduler::builder().start().unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let timer = timer.clone();
        tasks.push(tokio::spawn(async move {
            let mut scheduled = 0;
            for _ in 0..2_000 {
                if timer.schedule_or_reset("conn-1", Duration::from_secs(30), |_| async {}).await.unwrap() {
                    scheduled += 1;
                }
                // Another task trying plain `schedule` in the gap would see the key taken.
                assert!(matches!(
                    timer.schedule("conn-1", Duration::from_secs(30), |_| async {}).await,
                    Err(Error::DuplicateKey(_))
                ));
            }
            scheduled
        }));
    }
    let mut scheduled = 0;
    for task in tasks {
        scheduled += task.await.unwrap();
    }
    assert_eq!(scheduled, 1, "only the first call of all schedules");
    assert_eq!(timer.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cancel_now_cancels_from_synchronous_code() {
    struct Connection {
        timer: Scheduler,
    }
    impl Drop for Connection {
        fn drop(&mut self) {
            assert!(self.timer.cancel_now("idle:conn-7"));
        }
    }
    let timer = Scheduler::builder().start().unwrap();
    let done = timer.schedule("idle:conn-7", Duration::from_secs(30), |_| async {}).await.unwrap();
    drop(Connection { timer: timer.clone() });
    assert_eq!(done.await, Err(Error::Cancelled));
    assert!(!timer.cancel_now("idle:conn-7"));
    assert_eq!(timer.stats().cancelled, 1);
}

#[tokio::test(start_paused = true)]
async fn a_guard_cancels_its_own_timer_when_dropped_and_no_later_one() {
    let timer = Scheduler::builder().start().unwrap();
    let guard = timer.schedule("req-9", Duration::from_secs(5), |_| async {}).await.unwrap().cancel_on_drop();
    assert_eq!(guard.key(), "req-9");
    drop(guard);
    assert!(!timer.contains("req-9"));
    assert_eq!(timer.stats().cancelled, 1);

    // A guard whose timer fired cancels nothing, not even a new timer under its key.
    let guard = timer.schedule("req-9", 10 * MS, |_| async {}).await.unwrap().cancel_on_drop();
    advance(20 * MS).await;
    timer.flush().await;
    timer.schedule("req-9", Duration::from_secs(5), |_| async {}).await.unwrap();
    drop(guard);
    assert!(timer.contains("req-9"), "the later timer under the same key is untouched");

    // Awaited, it resolves as its timer ends; disarmed, it cancels nothing.
    let guard = timer.schedule("req-10", 10 * MS, |_| async {}).await.unwrap().cancel_on_drop();
    assert_eq!(guard.await, Ok(()));
    let kept = timer.schedule("req-11", 10 * MS, |_| async {}).await.unwrap().cancel_on_drop().disarm();
    assert!(timer.contains("req-11"));
    assert_eq!(kept.await, Ok(()));
}

/// Timers that carry values come out of a stream; any clone of the queue cancels them by key,
/// from another task, and a cancelled one's value never arrives. (A queue's keys are its own:
/// the scheduler's `cancel` does not reach them, see
/// `each_queue_has_a_key_space_of_its_own`.)
#[tokio::test(start_paused = true)]
async fn a_queue_delivers_values_and_any_handle_cancels_by_key() {
    use futures::StreamExt;
    let timer = Scheduler::builder().start().unwrap();
    let (timeouts, mut expired) = timer.queue::<(u64, String)>();
    let other = timeouts.clone();
    tokio::spawn(async move {
        for id in 0..10u64 {
            other.schedule(format!("conn-{id}"), MS * (100 + id) as u32, (id, format!("peer-{id}"))).await.unwrap();
        }
    })
    .await
    .unwrap();
    let canceller = timeouts.clone();
    tokio::spawn(async move {
        for id in (0..10).step_by(2) {
            assert!(canceller.cancel(&format!("conn-{id}")).await);
        }
    })
    .await
    .unwrap();
    assert!(!timeouts.schedule_or_reset("conn-1", 500 * MS, (99, "ignored".into())).await.unwrap());
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(expired.next().await.unwrap());
    }
    assert_eq!(
        got,
        (3..10).step_by(2).map(|id: u64| (format!("conn-{id}"), (id, format!("peer-{id}")))).collect::<Vec<_>>()
    );
    assert_eq!(expired.recv().await, Some(("conn-1".into(), (1, "peer-1".into()))), "moved, with its own value");
    drop(timeouts);
    assert_eq!(expired.recv().await, None, "every handle gone and every timer ended: the stream ends");
}

/// A consumer slower than the firing loses nothing: due items wait in the stream.
#[tokio::test(start_paused = true)]
async fn a_slow_consumer_finds_every_item_waiting() {
    let timer = Scheduler::builder().start().unwrap();
    let (timeouts, mut expired) = timer.queue::<u32>();
    for i in 0..1_000 {
        timeouts.schedule(format!("k-{i}"), MS * (1 + i % 50), i).await.unwrap();
    }
    advance(100 * MS).await;
    timer.flush().await;
    assert_eq!(expired.len(), 1_000);
    let mut seen: Vec<u32> = Vec::new();
    while let Ok(Some((_, v))) = tokio::time::timeout(Duration::ZERO, expired.recv()).await {
        seen.push(v);
    }
    seen.sort();
    assert_eq!(seen, (0..1_000).collect::<Vec<_>>());
}

#[test]
fn start_without_the_time_driver_is_an_error() {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let result = runtime.block_on(async { Scheduler::builder().start() });
    let Err(Error::Invalid(why)) = result else { panic!("expected Invalid, got {result:?}") };
    assert!(why.contains("enable_time"), "{why}");
    assert!(matches!(Scheduler::builder().start(), Err(Error::Invalid(_))), "outside a runtime");
}

#[tokio::test(start_paused = true)]
async fn lateness_reports_how_late_timers_fired() {
    let timer = Scheduler::builder().start().unwrap();
    assert_eq!(timer.lateness().count, 0);
    for i in 0..100u64 {
        timer.schedule(format!("t-{i}"), MS * (i as u32 + 1), |_| async {}).await.unwrap();
    }
    advance(200 * MS).await;
    timer.flush().await;
    let late = timer.lateness();
    assert_eq!(late.count, 100);
    // The actor woke once, 200 ms in: timer i was due at i + 1 ms, so 100 to 199 ms late, and
    // the median (150 ms) is reported as its bucket's upper bound, at most 12.5 % above.
    assert!(late.max >= 198 * MS && late.max <= 200 * MS, "{late:?}");
    assert!(late.p50 >= 149 * MS && late.p50 <= 169 * MS, "{late:?}");
    assert!(late.p99 >= late.p50 && late.p99 <= late.max, "{late:?}");
}

/// A service that falls behind says so through `tracing`, once per ten seconds at most.
#[test]
fn falling_behind_logs_a_warning() {
    use tracing_subscriber::fmt::MakeWriter;
    #[derive(Clone, Default)]
    struct Log(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Log {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl<'a> MakeWriter<'a> for Log {
        type Writer = Log;
        fn make_writer(&'a self) -> Log {
            self.clone()
        }
    }
    let log = Log::default();
    let subscriber = tracing_subscriber::fmt().with_writer(log.clone()).with_ansi(false).finish();
    tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let timer = Scheduler::builder().lag_warning(50).start().unwrap();
            for round in 0..3u64 {
                timer.schedule(format!("late-{round}"), 10 * MS, |_| async {}).await.unwrap();
                // The clock jumps past the deadline before the service can run: 190 ticks late.
                advance(200 * MS).await;
                timer.flush().await;
            }
            // Within a timer fired on time, nothing more is said.
            timer.sleep_keyed("on-time", 10 * MS).await.unwrap();
        });
    });
    let text = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert_eq!(text.matches("WARN").count(), 1, "one warning in 10 s, not one per late wake-up:\n{text}");
    assert!(text.contains("ticks late"), "{text}");
}

/// A repeating timer's period is at least 1 ms: a service woken at most once a millisecond could
/// never make up the runs of a period of nanoseconds, and would spend all its time trying.
#[tokio::test(start_paused = true)]
async fn a_period_under_a_millisecond_is_refused() {
    let timer = Scheduler::builder().start().unwrap();
    for period in [Duration::from_nanos(1), Duration::from_micros(999)] {
        let r = timer.schedule_repeating("spin", period, Repeat::Forever, |_| async {}).await;
        assert!(matches!(r, Err(Error::Invalid(_))), "{period:?}: {r:?}");
    }
    timer.schedule_repeating("ok", MS, Repeat::Times(3), |_| async {}).await.unwrap().await.unwrap();
}

/// The stream ends as soon as every queue handle is gone and every timer they scheduled has
/// ended, a cancelled one included: a cancel releases what the timer held (here the queue's
/// sender) at once. (It used to hold it until the cancelled entry was swept, when the service
/// next ran: here an hour later.)
#[tokio::test(start_paused = true)]
async fn the_stream_ends_when_its_last_timer_is_cancelled() {
    let timer = Scheduler::builder().start().unwrap();
    let (timeouts, mut expired) = timer.queue::<u32>();
    timeouts.schedule("conn-1", Duration::from_secs(3600), 1).await.unwrap();
    timer.flush().await;
    assert_eq!(timeouts.remove("conn-1"), Some(1), "the value comes back");
    drop(timeouts);
    let ended = tokio::time::timeout(Duration::from_secs(1), expired.recv()).await;
    assert_eq!(ended, Ok(None), "the stream ended at the cancel, not when the service next ran");
}

/// Each queue has a key space of its own, apart from other queues and from the scheduler's own
/// keys; its handle moves, looks up, counts and removes its timers, and a removed timer's value
/// comes back.
#[tokio::test(start_paused = true)]
async fn each_queue_has_a_key_space_of_its_own() {
    let timer = Scheduler::builder().start().unwrap();
    let (a, mut a_out) = timer.queue::<u32>();
    let (b, mut b_out) = timer.queue::<&'static str>();
    a.schedule("conn-1", 30 * MS, 1).await.unwrap();
    b.schedule("conn-1", 20 * MS, "b").await.unwrap();
    timer.schedule("conn-1", 10 * MS, |_| async {}).await.unwrap();
    assert_eq!(a.schedule("conn-1", MS, 2).await, Err(Error::DuplicateKey("conn-1".into())));
    assert_eq!((a.len(), b.len(), timer.len()), (1, 1, 3));
    assert!(a.contains("conn-1") && b.contains("conn-1") && timer.contains("conn-1"));
    let at = Instant::now() + 40 * MS;
    a.reschedule_at("conn-1", at).await.unwrap();
    assert_eq!(a.deadline("conn-1"), Some(at));
    assert_eq!(b.deadline("conn-1"), Some(Instant::now() + 20 * MS), "queue b's timer did not move");
    assert_eq!(a.reschedule("conn-2", MS).await, Err(Error::NotFound));
    assert!(timer.cancel("conn-1").await, "the scheduler's own conn-1");
    assert!(a.contains("conn-1") && b.contains("conn-1"), "the queues' timers are not the scheduler's");
    assert_eq!(b_out.recv().await, Some(("conn-1".to_string(), "b")));
    assert_eq!(b.remove("conn-1"), None, "delivered already");
    assert_eq!(a.remove("conn-1"), Some(1));
    assert!(a.is_empty() && !a.contains("conn-1"));
    drop(a);
    assert_eq!(a_out.recv().await, None);
}

/// A keyed sleep's key is claimed when `sleep_keyed` returns, as its deadline is fixed then:
/// before the future is first polled, the key is pending and can be moved or cancelled by key,
/// and the sleep follows. (It used to be claimed at the first poll: before it, `contains` was
/// false, `reschedule` was `NotFound` and `cancel` false, and the sleep still fired.) The
/// same holds for the other `schedule*` calls but `schedule_many`.
#[tokio::test(start_paused = true)]
async fn a_keyed_sleep_is_claimed_at_the_call_so_it_can_be_moved_or_cancelled_before_its_first_poll() {
    let timer = Scheduler::builder().start().unwrap();
    let start = Instant::now();
    let moved = timer.sleep_keyed("idle:conn-1", 100 * MS);
    let cancelled = timer.sleep_keyed("idle:conn-2", 100 * MS);
    assert!(timer.contains("idle:conn-1") && timer.contains("idle:conn-2"), "claimed at the call");
    timer.reschedule("idle:conn-1", 300 * MS).await.unwrap();
    assert!(timer.cancel("idle:conn-2").await);
    assert_eq!(cancelled.await, Err(Error::Cancelled));
    assert_eq!(moved.await, Ok(()));
    let slept = Instant::now() - start;
    assert!((300 * MS..=302 * MS).contains(&slept), "the moved sleep ended after {slept:?}");

    let scheduled = timer.schedule("job", 100 * MS, |_| async {});
    assert_eq!(timer.schedule("job", MS, |_| async {}).await.unwrap_err(), Error::DuplicateKey("job".into()));
    drop(scheduled);
    assert!(!timer.contains("job"), "a schedule future dropped unpolled cancels its timer");
    let (queue, _out) = timer.queue::<u8>();
    let queued = queue.schedule("q", 100 * MS, 1);
    assert!(queue.contains("q"));
    drop(queued);
    assert!(!queue.contains("q") && queue.is_empty());
    // schedule_many alone claims when first polled, after giving the service its turn (see
    // tests/batch.rs): dropped unpolled, it schedules nothing.
    drop(timer.schedule_many([("m", 100 * MS, |_: String| async {})]));
    assert!(!timer.contains("m"));
    let upsert = timer.schedule_or_reset("u", 100 * MS, |_| async {});
    drop(upsert);
    assert!(timer.contains("u"), "schedule_or_reset's arm stands when its future is dropped");
}

/// A handle moves its own timer with no key lookup, later (lazily) and earlier, and never
/// reaches a later timer that took the key.
#[tokio::test(start_paused = true)]
async fn a_handle_moves_and_cancels_its_own_timer_only() {
    let timer = Scheduler::builder().start().unwrap();
    let fired: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let record = {
        let fired = fired.clone();
        move |_: String| {
            fired.lock().unwrap().push(Instant::now());
            async {}
        }
    };
    let start = Instant::now();
    let handle = timer.schedule_or_reset_handle("idle", 30 * MS, record.clone()).await.unwrap();
    for _ in 0..5 {
        advance(20 * MS).await;
        handle.reschedule(30 * MS).unwrap();
    }
    assert_eq!(handle.deadline(), Some(Instant::now() + 30 * MS));
    assert!(fired.lock().unwrap().is_empty(), "pushed back each time before it was due");
    handle.reschedule(5 * MS).unwrap();
    tokio::time::sleep(10 * MS).await;
    timer.flush().await;
    assert_eq!(*fired.lock().unwrap(), [start + 105 * MS], "moved earlier, fired once");
    assert!(!handle.is_pending());
    assert_eq!(handle.reschedule(MS), Err(Error::NotFound));
    let again = timer.schedule_or_reset_handle("idle", 30 * MS, record).await.unwrap();
    assert!(!handle.cancel(), "the old handle does not reach the new timer");
    assert!(again.is_pending());
    let guard = again.cancel_on_drop();
    drop(guard);
    assert!(!timer.contains("idle"));
}

/// A queue's next deadline is its earliest pending timer's, whatever else is pending: it follows
/// a cancel or a removal of the earliest, a move later (by key or by handle) or earlier, and a
/// firing, and ignores the timers of another queue and of the scheduler, even earlier ones.
#[tokio::test(start_paused = true)]
async fn a_queue_knows_its_next_deadline() {
    let timer = Scheduler::builder().start().unwrap();
    let (queue, mut expired) = timer.queue::<u32>();
    let (other, _other_expired) = timer.queue::<u32>();
    let s = Duration::from_secs(1);
    let start = Instant::now();
    assert_eq!(queue.next_deadline(), None);
    other.schedule("a", s, 0).await.unwrap();
    timer.schedule("a", s, |_| async {}).await.unwrap();
    assert_eq!(queue.next_deadline(), None, "others' timers are not the queue's");
    assert_eq!(other.next_deadline(), Some(start + s));
    queue.schedule("a", 30 * s, 1).await.unwrap();
    let b = queue.schedule_or_reset_handle("b", 60 * s, 2).await.unwrap();
    queue.schedule("c", 90 * s, 3).await.unwrap();
    assert_eq!(queue.next_deadline(), Some(start + 30 * s));
    assert!(queue.cancel("a").await, "the earliest goes");
    assert_eq!(queue.next_deadline(), Some(start + 60 * s));
    b.reschedule(120 * s).unwrap(); // the earliest moves later, lazily in the wheel
    assert_eq!(queue.next_deadline(), Some(start + 90 * s));
    queue.reschedule("c", 200 * s).await.unwrap();
    assert_eq!(queue.next_deadline(), Some(start + 120 * s));
    queue.reschedule("c", 10 * s).await.unwrap(); // and one moves earlier
    assert_eq!(queue.next_deadline(), Some(start + 10 * s));
    assert_eq!(expired.recv().await, Some(("c".to_string(), 3)));
    assert_eq!(queue.next_deadline(), Some(start + 120 * s), "after the earliest fired");
    assert_eq!(queue.next_deadline(), queue.deadline("b"));
    assert!(b.cancel());
    assert_eq!(queue.next_deadline(), None);
    assert_eq!(other.next_deadline(), None, "its timer fired at 1 s");
}

/// One rule for keys in every call that takes one: an empty key, or one of more than
/// `MAX_KEY_LEN` bytes, is `Error::Invalid` in every call that returns a `Result` (the queue's
/// calls included, and after a stop too), and reads as a key with nothing under it in every call
/// that does not; a key of exactly `MAX_KEY_LEN` bytes is a key like any other.
#[tokio::test(start_paused = true)]
async fn every_call_that_takes_a_key_applies_one_rule() {
    let timer = Scheduler::builder().start().unwrap();
    let (queue, _expired) = timer.queue::<u32>();
    let job = |_: String| async {};
    let s = Duration::from_secs(1);
    let every = || Recurrence::every(s);
    let longest = "k".repeat(MAX_KEY_LEN);
    let too_long = "k".repeat(MAX_KEY_LEN + 1);
    for stopped in [false, true] {
        if stopped {
            timer.stop().await;
        }
        for key in ["", too_long.as_str()] {
            let at = Instant::now() + s;
            let invalid = |r: Result<(), Error>, call: &str| {
                let len = key.len();
                assert!(
                    matches!(r, Err(Error::Invalid(_))),
                    "{call} with a key of {len} bytes (stopped: {stopped}): {r:?}"
                );
            };
            invalid(timer.schedule(key, s, job).await.map(drop), "schedule");
            invalid(timer.schedule_at(key, at, job).await.map(drop), "schedule_at");
            invalid(timer.schedule_repeating(key, s, Repeat::Forever, job).await.map(drop), "schedule_repeating");
            let skip = tokio_timewheel::MissedRuns::Skip;
            invalid(timer.schedule_repeating_with(key, s, Repeat::Forever, skip, job).await.map(drop), "…_with");
            invalid(timer.schedule_recurring(key, every(), job).await.map(drop), "schedule_recurring");
            invalid(timer.upsert_recurring(key, every(), job).await.map(drop), "upsert_recurring");
            invalid(timer.sleep_keyed(key, s).await, "sleep_keyed");
            invalid(timer.schedule_many([(key, s, job)]).await.remove(0), "schedule_many");
            invalid(timer.schedule_or_reset(key, s, job).await.map(drop), "schedule_or_reset");
            invalid(timer.schedule_or_reset_handle(key, s, job).await.map(drop), "schedule_or_reset_handle");
            invalid(timer.reschedule(key, s).await, "reschedule");
            invalid(timer.reschedule_at(key, at).await, "reschedule_at");
            invalid(timer.pause(key).await.map(drop), "pause");
            invalid(timer.resume(key).await.map(drop), "resume");
            invalid(queue.schedule(key, s, 1).await, "TimerQueue::schedule");
            invalid(queue.schedule_at(key, at, 1).await, "TimerQueue::schedule_at");
            invalid(queue.schedule_or_reset(key, s, 1).await.map(drop), "TimerQueue::schedule_or_reset");
            invalid(queue.schedule_or_reset_handle(key, s, 1).await.map(drop), "TimerQueue::schedule_or_reset_handle");
            invalid(queue.reschedule(key, s).await, "TimerQueue::reschedule");
            invalid(queue.reschedule_at(key, at).await, "TimerQueue::reschedule_at");
            // The calls that answer without a `Result` answer as for a key with nothing under it.
            assert!(!timer.cancel(key).await);
            assert!(!timer.cancel_now(key));
            assert_eq!(timer.cancel_many([key]).await, [false]);
            assert!(!timer.contains(key));
            assert_eq!(timer.deadline(key), None);
            assert!(!queue.cancel(key).await);
            assert_eq!(queue.remove(key), None);
            assert!(!queue.contains(key));
            assert_eq!(queue.deadline(key), None);
        }
    }
    // The longest key works in every call.
    let timer = Scheduler::builder().start().unwrap();
    let (queue, _expired) = timer.queue::<u32>();
    let key = longest.as_str();
    timer.schedule(key, s, job).await.unwrap();
    assert!(timer.contains(key));
    assert_eq!(timer.deadline(key), Some(Instant::now() + s));
    timer.reschedule(key, 2 * s).await.unwrap();
    timer.reschedule_at(key, Instant::now() + s).await.unwrap();
    assert_eq!(timer.pause(key).await, Ok(s));
    assert_eq!(timer.resume(key).await, Ok(s));
    assert!(!timer.schedule_or_reset(key, s, job).await.unwrap());
    assert_eq!(timer.schedule_or_reset_handle(key, s, job).await.unwrap().key(), key);
    assert!(!timer.upsert_recurring(key, every(), job).await.unwrap(), "replaced");
    assert!(timer.cancel(key).await);
    assert_eq!(timer.schedule_many([(key, s, job)]).await, [Ok(())]);
    assert!(timer.cancel_now(key));
    timer.schedule_repeating(key, s, Repeat::Times(1), job).await.unwrap();
    assert_eq!(timer.cancel_many([key]).await, [true]);
    let sleep = timer.sleep_keyed(key, s);
    assert!(timer.contains(key));
    assert_eq!(sleep.await, Ok(()));
    queue.schedule(key, s, 1).await.unwrap();
    queue.reschedule(key, 2 * s).await.unwrap();
    queue.reschedule_at(key, Instant::now() + s).await.unwrap();
    assert!(queue.contains(key) && queue.deadline(key).is_some());
    assert!(!queue.schedule_or_reset(key, s, 2).await.unwrap());
    assert_eq!(queue.remove(key), Some(1));
    queue.schedule_at(key, Instant::now() + s, 3).await.unwrap();
    assert!(queue.cancel(key).await);
}
