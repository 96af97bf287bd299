//! Configuration of the service.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::actor;
use super::clock::Clock;
use super::config::{
    Advance, WheelKind, DEFAULT_CHANNEL_CAPACITY, DEFAULT_LAG_WARNING, DEFAULT_NAME, DEFAULT_SLOTS, DEFAULT_TICK,
    MIN_TICK,
};
use super::scheduler::Scheduler;
use super::shards::Shared;
use crate::wheel::{HierarchicalWheel, RoundsWheel};
use crate::Error;

impl Scheduler {
    /// A [`Builder`] with the defaults: 1 ms tick, 64 slots, hierarchical wheel, next-deadline
    /// advance, no cap on pending timers.
    pub fn builder() -> Builder {
        Builder::default()
    }
}

/// Configures and starts a [`Scheduler`]. Made by [`Scheduler::builder`].
///
/// The defaults suit most services: a 1 ms tick, a [hierarchical](WheelKind::Hierarchical) wheel
/// of 64 slots per level, an actor that sleeps to the [next deadline](Advance::NextDeadline), no
/// cap on pending timers and no room reserved in advance.
///
/// Every shard of the service (four per core, between 4 and 64) has a wheel of its own, so the
/// memory of the buckets described in [`slots`](Self::slots) is that many times larger.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use tokio_timewheel::{Advance, Scheduler, WheelKind};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tokio_timewheel::Error> {
/// // Game buffs of up to a minute, at a 10 ms resolution, in one ring that covers them all.
/// let timer = Scheduler::builder()
///     .tick(Duration::from_millis(10))
///     .wheel(WheelKind::Rounds)
///     .slots(8_192)
///     .advance(Advance::NextDeadline)
///     .max_pending(1_000_000)
///     .start()?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Builder does nothing until .start() is called"]
pub struct Builder {
    pub(crate) tick: Duration,
    pub(crate) slots: usize,
    pub(crate) wheel: WheelKind,
    pub(crate) advance: Advance,
    pub(crate) max_pending: usize,
    pub(crate) capacity: usize,
    pub(crate) channel_capacity: usize,
    pub(crate) lag_warning: u64,
    pub(crate) name: String,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            tick: DEFAULT_TICK,
            slots: DEFAULT_SLOTS,
            wheel: WheelKind::default(),
            advance: Advance::default(),
            max_pending: usize::MAX,
            capacity: 0,
            channel_capacity: DEFAULT_CHANNEL_CAPACITY,
            lag_warning: DEFAULT_LAG_WARNING,
            name: DEFAULT_NAME.to_owned(),
        }
    }
}

impl Builder {
    /// The wheel's resolution: deadlines round up to a tick (default [`DEFAULT_TICK`]).
    ///
    /// At least [`MIN_TICK`] (1 ms): Tokio's timer has a resolution of 1 ms, so the service
    /// cannot wake more often than that, and with a shorter tick every timer would be counted
    /// late by many ticks (an idle service at a 1 ns tick would warn that it fires millions of
    /// ticks late). [`start`](Self::start) refuses a shorter tick with [`Error::Invalid`].
    ///
    /// # Examples
    /// ```
    /// # use std::time::Duration;
    /// # use tokio_timewheel::{Error, Scheduler, MIN_TICK};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().tick(Duration::from_millis(10)).start()?;
    /// assert!(matches!(Scheduler::builder().tick(MIN_TICK / 2).start(), Err(Error::Invalid(_))));
    /// # Ok(()) }
    /// ```
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// For the hierarchical wheel (at least 2), how many times longer each level's tick is than
    /// the one below; each level has twice as many buckets. For the rounds wheel (at least 1),
    /// the buckets in the ring. Default [`DEFAULT_SLOTS`]; powers of two are fastest.
    ///
    /// The default suits the hierarchical wheel whatever the delays: its busy buckets are drained
    /// ahead of time, so a burst of a million timers fires as punctually at 64 slots as at 4,096,
    /// and a small service stays small. More slots cost memory in every shard: at 64 slots about
    /// 5 KiB per level of each shard; at 4,096, 320 KiB per level as deadlines reach it. Fewer
    /// slots cost wake-ups while a busy far bucket drains. For the rounds wheel, choose enough
    /// slots that `slots * tick` covers nearly every delay; its ring is allocated at
    /// [`start`](Self::start) in every shard (160 KiB per shard at 4,096). The
    /// [`wheel`](crate::wheel) module explains both wheels, draining, and the costs in detail.
    /// A count the wheel refuses makes [`start`](Self::start) return [`Error::Invalid`].
    pub fn slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// Which wheel to use (default [`WheelKind::Hierarchical`]).
    ///
    /// The hierarchical wheel reaches any deadline and suits mixed delays, far deadlines and
    /// idle periods: almost always. The rounds wheel never demotes, but touches every timer in a
    /// bucket each time the cursor passes it, so it suits services whose delays nearly all fit
    /// in one revolution of `slots` ticks.
    pub fn wheel(mut self, wheel: WheelKind) -> Self {
        self.wheel = wheel;
        self
    }

    /// How the wheel is driven (default [`Advance::NextDeadline`]).
    ///
    /// With `NextDeadline` the actor sleeps until the wheels' next due bucket and is woken early
    /// only by a timer due before it: idle costs nothing and timers fire on their tick. With
    /// `Interval` it wakes on every tick, like the classic ticker loop, which you may want for
    /// the regular rhythm (to batch firings per tick) if you can pay a wake-up per tick while
    /// idle. Either way the current tick is read from the clock at every wake-up, so a late
    /// wake-up catches up in one advance and the wheels never drift.
    pub fn advance(mut self, advance: Advance) -> Self {
        self.advance = advance;
        self
    }

    /// The most timers pending at once; past it, scheduling fails with [`Error::Full`].
    /// Unlimited by default.
    pub fn max_pending(mut self, max_pending: usize) -> Self {
        self.max_pending = max_pending;
        self
    }

    /// Room for this many pending timers (at most `max_pending`), allocated at
    /// [`start`](Self::start); by default none, and the room grows as timers come. A burst into
    /// the reserved room then pays no growing of a shard's key map and wheel, which moves every
    /// timer of the shard under its lock and holds up the timers due meanwhile (for a few
    /// milliseconds per shard at a million). It costs the memory of that many timers (about 88
    /// bytes each) from the start: the key maps' part (8 bytes a slot, 11 to 21 bytes a timer)
    /// is written at once, the rest only as far as the system hands out memory before it is
    /// touched. At most 2^28 timers (some 24 GB); more is an [`Error::Invalid`] at `start`,
    /// before anything is allocated. What it does to the lateness of a burst is measured in
    /// [BENCHMARKS.md](https://github.com/tokio-timewheel/tokio-timewheel/blob/main/BENCHMARKS.md).
    ///
    /// # Examples
    /// ```
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let timer = Scheduler::builder().capacity(100_000).start()?;
    /// # Ok(()) }
    /// ```
    pub fn capacity(mut self, timers: usize) -> Self {
        self.capacity = timers;
        self
    }

    /// How many [`flush`](Scheduler::flush) and [`stop`](Scheduler::stop) requests may queue
    /// for the actor before their senders wait (default [`DEFAULT_CHANNEL_CAPACITY`]). Schedules,
    /// reschedules and cancels do not go through this channel and never wait for the actor: each
    /// is complete when its call returns.
    pub fn channel_capacity(mut self, capacity: usize) -> Self {
        self.channel_capacity = capacity;
        self
    }

    /// Logs a `tracing` warning, at most once every 10 s, when the service fires timers more than
    /// this many ticks after their deadline: a sign that the runtime is too busy for it (default
    /// [`DEFAULT_LAG_WARNING`]; `u64::MAX` never warns). [`Scheduler::lateness`] gives the
    /// figures at any time.
    pub fn lag_warning(mut self, ticks: u64) -> Self {
        self.lag_warning = ticks;
        self
    }

    /// The service's name (default [`DEFAULT_NAME`]): the `wheel` label of its [metrics] and a
    /// field of the `tracing` span its jobs run in. Give each service of a process a name of its
    /// own.
    ///
    /// [metrics]: https://docs.rs/tokio-timewheel/latest/tokio_timewheel/metrics/index.html
    ///
    /// # Examples
    /// ```
    /// # use tokio_timewheel::{Error, Scheduler};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Error> {
    /// let idle_timeouts = Scheduler::builder().name("idle-timeouts").start()?;
    /// assert_eq!(idle_timeouts.name(), "idle-timeouts");
    /// # Ok(()) }
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Checks the settings and spawns the actor on the current Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a tick shorter than [`MIN_TICK`], a slot count the wheel refuses, a zero `max_pending`
    /// or channel capacity, a `capacity` that cannot be allocated, or when called outside a
    /// Tokio runtime or on one built without its time driver (`enable_time()`). The check for
    /// the time driver makes a `tokio::time::sleep` and catches its panic, so the default panic
    /// hook prints that panic's message (which says the same) before the error is returned.
    pub fn start(self) -> Result<Scheduler, Error> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("Builder::start must be called from inside a Tokio runtime"))?;
        // Tokio offers no way to ask whether the time driver is on but to use it: a sleep made
        // on a runtime without it panics at once (before any state is touched).
        if std::panic::catch_unwind(|| drop(tokio::time::sleep(Duration::ZERO))).is_err() {
            return Err(Error::invalid(
                "the Tokio runtime has no time driver: build it with `enable_time()` (or `enable_all()`), \
                 as #[tokio::main] and #[tokio::test] do",
            ));
        }
        if self.tick < MIN_TICK {
            return Err(Error::invalid(format!(
                "the tick must be at least {MIN_TICK:?}, the resolution of Tokio's timer, got {:?}: the service \
                 cannot wake more often than that, so a shorter tick only counts every timer late; use a tick of \
                 1 ms or more",
                self.tick
            )));
        }
        if self.max_pending == 0 {
            return Err(Error::invalid("max_pending must be at least 1"));
        }
        if !(1..=tokio::sync::Semaphore::MAX_PERMITS).contains(&self.channel_capacity) {
            return Err(Error::invalid(format!(
                "channel_capacity must be between 1 and {}, got {}",
                tokio::sync::Semaphore::MAX_PERMITS,
                self.channel_capacity
            )));
        }
        // Check the slot count with the wheel that will use it, before anything is spawned.
        match self.wheel {
            WheelKind::Hierarchical => drop(HierarchicalWheel::<()>::new(self.slots)?),
            WheelKind::Rounds => drop(RoundsWheel::<()>::new(self.slots)?),
        }
        let clock = Clock::new(self.tick)?;
        let shared = Arc::new(Shared::new(self.wheel, self.slots, self.max_pending, self.capacity, clock, &self.name)?);
        let (tx, rx) = mpsc::channel(self.channel_capacity);
        let config = actor::Config { clock, advance: self.advance, tick: self.tick, lag_warning: self.lag_warning };
        actor::spawn(&runtime, rx, shared.clone(), config);
        #[cfg(feature = "metrics")]
        super::publish::spawn(&runtime, &shared);
        Ok(Scheduler::new(tx, shared, clock))
    }
}
