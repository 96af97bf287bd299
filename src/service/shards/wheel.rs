//! A shard's wheel: one of the two pure wheels, chosen by the builder, behind the few calls a
//! shard makes of it.

use super::super::config::WheelKind;
use super::super::timer::Timer;
use crate::wheel::{EntryId, Expired, HierarchicalWheel, RoundsWheel, Wheel};
use crate::Error;

/// A cache line: a shard's wheel entries are aligned to one. An entry holding a [`Timer`] is 64
/// bytes, so each sits in one line rather than straddling two (a large slab's allocation starts
/// 16 bytes into a line), and a push-back, a cancel or a firing touches one line of it, not two.
#[repr(align(64))]
pub(super) struct CacheLine;

/// A shard's wheel, of the kind the builder chose.
pub(super) enum ShardWheel {
    Hierarchical(HierarchicalWheel<Timer, CacheLine>),
    Rounds(RoundsWheel<Timer, CacheLine>),
}

impl ShardWheel {
    pub fn new(kind: WheelKind, slots: usize, capacity: usize) -> Result<Self, Error> {
        Ok(match kind {
            WheelKind::Hierarchical => {
                let mut wheel = HierarchicalWheel::with_alignment(slots)?;
                wheel.try_reserve(capacity)?;
                ShardWheel::Hierarchical(wheel)
            }
            WheelKind::Rounds => {
                let mut wheel = RoundsWheel::with_alignment(slots)?;
                wheel.try_reserve(capacity)?;
                ShardWheel::Rounds(wheel)
            }
        })
    }

    /// The pending timer in slab slot `index`; the key map names no other.
    pub fn at(&self, index: u32) -> (EntryId, &Timer) {
        self.try_at(index).expect("the key map names pending timers only")
    }

    /// The pending or cancelled timer in slab slot `index`, if any.
    pub fn try_at(&self, index: u32) -> Option<(EntryId, &Timer)> {
        match self {
            ShardWheel::Hierarchical(w) => w.at(index),
            ShardWheel::Rounds(w) => w.at(index),
        }
    }

    pub fn at_mut(&mut self, index: u32) -> &mut Timer {
        match self {
            ShardWheel::Hierarchical(w) => w.at_mut(index),
            ShardWheel::Rounds(w) => w.at_mut(index),
        }
        .expect("the key map names pending timers only")
    }

    pub fn insert(&mut self, deadline: u64, timer: Timer) -> EntryId {
        match self {
            ShardWheel::Hierarchical(w) => w.insert(deadline, timer),
            ShardWheel::Rounds(w) => w.insert(deadline, timer),
        }
    }

    pub fn remove(&mut self, id: EntryId) -> Option<Timer> {
        match self {
            ShardWheel::Hierarchical(w) => w.remove(id),
            ShardWheel::Rounds(w) => w.remove(id),
        }
    }

    /// Moves entry `id` to `deadline`, in the same slab slot (see [`Wheel::reschedule`]).
    pub fn reschedule(&mut self, id: EntryId, deadline: u64) {
        let kept = match self {
            ShardWheel::Hierarchical(w) => w.reschedule(id, deadline),
            ShardWheel::Rounds(w) => w.reschedule(id, deadline),
        };
        debug_assert_eq!(kept, Some(id), "a pending timer keeps its entry when it moves");
    }

    pub fn advance(&mut self, now: u64, expired: impl FnMut(Expired<Timer>)) {
        match self {
            ShardWheel::Hierarchical(w) => w.advance(now, expired),
            ShardWheel::Rounds(w) => w.advance(now, expired),
        }
    }

    pub fn deadline(&self, id: EntryId) -> Option<u64> {
        match self {
            ShardWheel::Hierarchical(w) => w.deadline(id),
            ShardWheel::Rounds(w) => w.deadline(id),
        }
    }

    /// The entries the wheel has room for before it grows.
    pub fn room(&self) -> usize {
        match self {
            ShardWheel::Hierarchical(w) => w.room(),
            ShardWheel::Rounds(w) => w.room(),
        }
    }

    /// Every pending timer's deadline and timer, consuming the wheel.
    pub fn into_entries(self) -> Box<dyn Iterator<Item = (u64, Timer)>> {
        match self {
            ShardWheel::Hierarchical(w) => Box::new(w.into_entries()),
            ShardWheel::Rounds(w) => Box::new(w.into_entries()),
        }
    }

    /// The wheel's clock.
    pub fn now(&self) -> u64 {
        match self {
            ShardWheel::Hierarchical(w) => w.now(),
            ShardWheel::Rounds(w) => w.now(),
        }
    }

    /// A new, empty wheel of the same kind and slots, at this one's clock, with room for
    /// `capacity` entries.
    pub fn fresh(&self, capacity: usize) -> Result<Self, Error> {
        let mut wheel = match self {
            ShardWheel::Hierarchical(w) => ShardWheel::new(WheelKind::Hierarchical, w.slots(), capacity)?,
            ShardWheel::Rounds(w) => ShardWheel::new(WheelKind::Rounds, w.slots(), capacity)?,
        };
        wheel.advance(self.now(), |_| unreachable!("a new wheel is empty"));
        Ok(wheel)
    }

    /// The earliest deadline of the timers `wanted` accepts (see the wheels' `earliest_where`).
    pub fn earliest_where(&self, wanted: impl FnMut(&Timer) -> bool) -> Option<u64> {
        match self {
            ShardWheel::Hierarchical(w) => w.earliest_where(wanted),
            ShardWheel::Rounds(w) => w.earliest_where(wanted),
        }
    }

    pub fn next_deadline(&self) -> Option<u64> {
        match self {
            ShardWheel::Hierarchical(w) => w.next_deadline(),
            ShardWheel::Rounds(w) => w.next_deadline(),
        }
    }

    /// The tick by which the actor must advance this wheel for a timer just placed at
    /// `deadline`: the deadline, or earlier if placing it made a bucket busy enough to drain
    /// ahead of its start (see the hierarchical wheel's docs).
    pub fn wake_by(&mut self, deadline: u64) -> u64 {
        match self {
            ShardWheel::Hierarchical(w) => w.take_armed_drain().map_or(deadline, |t| t.min(deadline)),
            ShardWheel::Rounds(_) => deadline,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ShardWheel::Hierarchical(w) => w.len(),
            ShardWheel::Rounds(w) => w.len(),
        }
    }
}
