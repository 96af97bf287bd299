//! Without the `metrics` feature: the durable wheel's metrics calls, doing nothing, in types of
//! no size.

use std::time::Duration;

use crate::durable::DurableStats;

pub(crate) struct WheelMetrics;

impl WheelMetrics {
    #[inline(always)]
    pub(crate) fn new(_wheel: &str, _partitions: usize) -> Self {
        WheelMetrics
    }

    #[inline(always)]
    pub(crate) fn partition(&self, _index: usize) -> &PartitionMetrics {
        &PartitionMetrics
    }
}

pub(crate) struct PartitionMetrics;

impl PartitionMetrics {
    #[inline(always)]
    pub(crate) fn scheduled(&self, _tasks: u64) {}

    #[inline(always)]
    pub(crate) fn cancelled(&self, _tasks: u64) {}

    #[inline(always)]
    pub(crate) fn fired(&self, _late: Duration) {}

    #[inline(always)]
    pub(crate) fn handled(&self, _run: Duration, _ok: bool) {}

    #[inline(always)]
    pub(crate) fn retried(&self) {}

    #[inline(always)]
    pub(crate) fn dead(&self) {}

    #[inline(always)]
    pub(crate) fn snoozed(&self) {}

    #[inline(always)]
    pub(crate) fn gauges(&self, _stats: &DurableStats) {}
}
