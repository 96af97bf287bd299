//! `loom` models of the synchronisation between handles and the actor: every interleaving of two
//! threads, one a handle and one the actor, each running the service's own code on a `Shared`.
//!
//! Run them by building this crate's unit tests with `--cfg loom` for this crate alone (a global
//! `RUSTFLAGS` would also switch dependencies that know the flag to loom builds of their own):
//! `cargo rustc --profile test --lib -- --cfg loom`, then the test binary it names, with the
//! filter `loom` (`.ci/run` does this). Each model is shown to fail on a planted bug: add
//! `--cfg tw_mutant="NAME"`, with the name in the model's docs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Wake as WakeTrait, Waker};

use ::loom::thread;

use super::*;
use crate::service::job::Wake;
use crate::service::key::Key;

/// Two shards (the fewest `locate` allows), so that the actor's look at every shard is modelled.
fn shared() -> Arc<Shared> {
    Arc::new(Shared::with_shards(WheelKind::Hierarchical, 4, usize::MAX, 0, 1, clock(), "loom").unwrap())
}

fn clock() -> Clock {
    Clock::new(std::time::Duration::from_millis(1)).unwrap()
}

/// A key that lands in shard 0, so that the models know which shard to advance.
fn key(shared: &Shared) -> Key {
    let name = (0..).map(|i| format!("k-{i}")).find(|k| shared.locate(k.as_bytes()).0 == 0).unwrap();
    Key::from(name.as_str())
}

fn timer(key: &Key) -> Timer {
    Timer::new(key.clone(), Run::Once(Box::new(Wake)))
}

fn one_shot_job(key: &Key) -> Timer {
    Timer::new(key.clone(), Run::Once(Box::new(crate::service::job::Once(|_key: String| async {}))))
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = ::loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

/// A timer placed while the actor decides how long to sleep is never left behind: the actor
/// either sees it when it looks at the wheels after publishing its wake-up, or the handle sees
/// the new wake-up and leaves a permit for the actor.
/// Mutant `publish_late`: the actor looks before it publishes.
#[test]
fn a_schedule_racing_the_actor_going_to_sleep_is_never_left_behind() {
    model(|| {
        let shared = shared();
        // The actor's last wake-up was published at tick 3; the new timer is due at 5.
        shared.will_wake_at(3);
        let key = key(&shared);
        let handle = {
            let shared = shared.clone();
            thread::spawn(move || shared.add(timer(&key), Due { deadline: 5, set_at: 0 }, false).unwrap())
        };
        // The actor: clears its signal, advances (nothing due yet), then goes to sleep until 10.
        shared.clear_signal();
        let missed = shared.will_wake_at(10);
        handle.join().unwrap();
        assert!(missed || shared.wake.take_permit(), "a timer due at 5 waits for a wake-up at 10");
    });
}

/// A timer moved earlier by its handle while the actor decides how long to sleep is never left
/// behind either, although a move later checks nothing: the earlier move wakes the actor or the
/// actor sees it.
/// Mutant `move_no_wake`: no move checks whether the actor must wake.
#[test]
fn a_move_earlier_racing_the_actor_going_to_sleep_is_never_left_behind() {
    model(|| {
        let shared = shared();
        shared.will_wake_at(3);
        let key = key(&shared);
        let ticket = shared.add(timer(&key), Due { deadline: 50, set_at: 0 }, false).unwrap();
        let handle = {
            let shared = shared.clone();
            thread::spawn(move || {
                // Later first (no check), then earlier than the actor's next wake-up.
                shared.move_ticket(&key, ticket, Instant::now(), 60, 0).unwrap();
                shared.move_ticket(&key, ticket, Instant::now(), 5, 0).unwrap();
            })
        };
        // The actor: clears its signal, then goes to sleep until 10 (its wheels said 50).
        shared.clear_signal();
        let missed = shared.will_wake_at(10);
        handle.join().unwrap();
        assert!(missed || shared.wake.take_permit(), "a timer moved to 5 waits for a wake-up at 10");
    });
}

/// A cancel racing the firing ends the timer once: the job runs exactly when the cancel
/// returned `false`, and the counters agree.
/// Mutant `no_sweep`: the actor advances a wheel without sweeping the cancelled entries first.
#[test]
fn a_cancel_racing_the_firing_ends_the_timer_once() {
    model(|| {
        let shared = shared();
        let key = key(&shared);
        shared.add(one_shot_job(&key), Due { deadline: 5, set_at: 0 }, false).unwrap();
        let canceller = {
            let shared = shared.clone();
            let key = key.clone();
            thread::spawn(move || shared.cancel(key.as_bytes(), None))
        };
        let clock = clock();
        let mut fired = Fired::default();
        shared.fire(0, clock.instant(10).unwrap(), &clock, &mut fired);
        let cancelled = canceller.join().unwrap();
        assert_eq!(fired.jobs.len(), usize::from(!cancelled), "the job runs iff the cancel returned false");
        let stats = shared.stats();
        assert_eq!((stats.pending, stats.fired + stats.cancelled), (0, 1), "{stats:?}");
    });
}

/// Dropping a `Scheduled` while its timer ends leaks nothing and records nothing: no outcome
/// stays in the watchers for a future that is gone.
/// Mutant `unwatch_keeps`: a drop that finds its timer ended leaves the recorded outcome.
#[test]
fn a_scheduled_dropped_while_its_timer_ends_leaves_nothing() {
    model(|| {
        let shared = shared();
        let key = key(&shared);
        let ticket = shared.add(timer(&key), Due { deadline: 5, set_at: 0 }, true).unwrap();
        let dropper = {
            let shared = shared.clone();
            let key = key.clone();
            thread::spawn(move || shared.unwatch(key.as_bytes(), ticket, false))
        };
        let clock = clock();
        shared.fire(0, clock.instant(10).unwrap(), &clock, &mut Fired::default());
        dropper.join().unwrap();
        assert_eq!(shared.lock(0).watchers.len(), 0, "an outcome was kept for a dropped future");
        assert_eq!(shared.stats().fired, 1);
    });
}

/// A polled `Scheduled` racing its timer's end is woken or sees the outcome: never both missed.
/// Mutant `drop_waker`: the timer's end loses the parked waker.
#[test]
fn a_polled_scheduled_racing_its_timer_is_woken_or_ready() {
    struct Flag(::loom::sync::atomic::AtomicBool);
    impl WakeTrait for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::Release);
        }
    }
    model(|| {
        let shared = shared();
        let key = key(&shared);
        let ticket = shared.add(timer(&key), Due { deadline: 5, set_at: 0 }, true).unwrap();
        let flag = Arc::new(Flag(::loom::sync::atomic::AtomicBool::new(false)));
        let poller = {
            let shared = shared.clone();
            let waker = Waker::from(flag.clone());
            thread::spawn(move || shared.poll_outcome(ticket.shard, ticket.serial, &waker))
        };
        let clock = clock();
        let mut fired = Fired::default();
        shared.fire(0, clock.instant(10).unwrap(), &clock, &mut fired);
        fired.wakers.drain(..).for_each(Waker::wake);
        let polled = poller.join().unwrap();
        if polled.is_none() {
            assert!(flag.0.load(Ordering::Acquire), "pending, and never woken");
            let again = Waker::from(flag.clone());
            assert_eq!(shared.poll_outcome(ticket.shard, ticket.serial, &again), Some(Ok(())));
        }
    });
}

/// `stop` racing a schedule either refuses the timer or accepts it and then ends it as
/// stopped: no timer is left that nobody will fire.
/// Mutant `claim_after_close`: a closed shard still takes timers.
#[test]
fn stop_racing_a_schedule_refuses_or_accepts_then_stops() {
    model(|| {
        let shared = shared();
        let key = key(&shared);
        let scheduler = {
            let shared = shared.clone();
            thread::spawn(move || shared.add(timer(&key), Due { deadline: 5, set_at: 0 }, false))
        };
        let stopped: usize = (0..shared.shard_count()).map(|s| shared.close(s)).sum();
        let added = scheduler.join().unwrap();
        let stats = shared.stats();
        match added {
            Ok(_) => assert_eq!((stopped, stats.stopped), (1, 1), "accepted, so ended by the stop"),
            Err(Error::Stopped) => assert_eq!(stats.scheduled, 0),
            Err(other) => panic!("unexpected {other:?}"),
        }
        assert_eq!(stats.pending, 0, "no timer outlives the stop");
    });
}
