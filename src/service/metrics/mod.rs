//! The in-process service's metrics (the crate's `metrics` module lists them): `on.rs` records
//! them through the `metrics` facade; without the feature, `off.rs` has the same calls doing
//! nothing, in types of no size.

#[cfg(not(feature = "metrics"))]
mod off;
#[cfg(feature = "metrics")]
mod on;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::ServiceMetrics;
#[cfg(feature = "metrics")]
pub(crate) use on::ServiceMetrics;
