//! Configuration of the service.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::actor;
use super::clock::Clock;
use super::config::{Advance, WheelKind, DEFAULT_CHANNEL_CAPACITY, DEFAULT_SLOTS, DEFAULT_TICK};
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
        }
    }
}

impl Builder {
    /// The wheel's resolution: deadlines round up to a tick (default [`DEFAULT_TICK`]).
    pub fn tick(mut self, tick: Duration) -> Self {
        self.tick = tick;
        self
    }

    /// For the hierarchical wheel (at least 2), how many times longer each level's tick is than
    /// the one below; each level has twice as many buckets. For the rounds wheel (at least 1),
    /// the buckets in the ring. Default [`DEFAULT_SLOTS`]; powers of two are fastest.
    pub fn slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// Which wheel to use (default [`WheelKind::Hierarchical`]).
    pub fn wheel(mut self, wheel: WheelKind) -> Self {
        self.wheel = wheel;
        self
    }

    /// How the wheel is driven (default [`Advance::NextDeadline`]).
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
    /// touched.
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
    /// is complete when its call returns (see the README's "Design in one paragraph").
    pub fn channel_capacity(mut self, capacity: usize) -> Self {
        self.channel_capacity = capacity;
        self
    }

    /// Checks the settings and spawns the actor on the current Tokio runtime.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a zero tick, a slot count the wheel refuses, a zero `max_pending`
    /// or channel capacity, a `capacity` that cannot be allocated, or when called outside a
    /// Tokio runtime.
    pub fn start(self) -> Result<Scheduler, Error> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::invalid("Builder::start must be called from inside a Tokio runtime"))?;
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
        let shared = Arc::new(Shared::new(self.wheel, self.slots, self.max_pending, self.capacity)?);
        let (tx, rx) = mpsc::channel(self.channel_capacity);
        let config = actor::Config { clock, advance: self.advance, tick: self.tick };
        runtime.spawn(actor::run(rx, shared.clone(), config));
        Ok(Scheduler::new(tx, shared, clock))
    }
}
