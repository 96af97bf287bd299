//! Without the `metrics` feature: the service's metrics calls, doing nothing, in a type of no size.

use crate::lateness;
use crate::Stats;

pub(crate) struct ServiceMetrics;

impl ServiceMetrics {
    #[inline(always)]
    pub(crate) fn new(_wheel: &str) -> Self {
        ServiceMetrics
    }

    #[inline(always)]
    pub(crate) fn publish(&self, _stats: &Stats) {}

    #[inline(always)]
    pub(crate) fn lateness(&self, _late: &lateness::Histogram) {}
}
