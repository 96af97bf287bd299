//! Where a timer or a task came from, for traces: the trace context of the span that scheduled
//! it, taken when it is scheduled and kept with it, and the span of each of its runs made to
//! follow it (an OpenTelemetry link, or with the durable mode's
//! `DurableBuilder::trace_parent`, a parent). Both modes use it; with the `opentelemetry`
//! feature it is `on.rs`, without it `off.rs`: a type of no size whose calls do nothing, so a
//! build without the feature takes, stores and sends nothing.
//!
//! The durable mode keeps the context in the task's record as text, the W3C trace context's
//! own: the `traceparent` header's value, then, if the span's trace state is not empty, a space
//! and the `tracestate` header's value. Neither holds a newline, so a script call carries the
//! texts of many tasks in one argument, joined by newlines (see [`joined`]).

#[cfg(feature = "opentelemetry")]
mod on;
#[cfg(feature = "opentelemetry")]
pub(crate) use on::Origin;

#[cfg(not(feature = "opentelemetry"))]
mod off;
#[cfg(not(feature = "opentelemetry"))]
pub(crate) use off::Origin;

/// The texts of `origins` joined by newlines, one line per origin (an empty line for one with
/// no context); `""` when none has a context, which is also the whole cost without the feature.
#[cfg(feature = "redis")]
pub(crate) fn joined<'a>(origins: impl Iterator<Item = &'a Origin> + Clone) -> String {
    if !origins.clone().any(Origin::is_some) {
        return String::new();
    }
    let texts: Vec<String> = origins.map(Origin::to_text).collect();
    texts.join("\n")
}
