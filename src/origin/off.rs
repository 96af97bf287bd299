//! Without the `opentelemetry` feature: no trace context, in a type of no size.

/// Where a timer or a task came from: without the feature, nowhere that is kept. Not `Copy`, so
/// that code written for both builds clones it as it must the real one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Origin;

impl Origin {
    /// No context.
    #[cfg(feature = "redis")] // the durable mode's record
    #[inline(always)]
    pub(crate) fn none() -> Self {
        Origin
    }

    /// Nothing is taken.
    #[inline(always)]
    pub(crate) fn current() -> Self {
        Origin
    }

    /// Never a context.
    #[inline(always)]
    pub(crate) fn is_some(&self) -> bool {
        false
    }

    /// No text: nothing is stored.
    #[cfg(feature = "redis")] // the durable mode's record
    #[inline(always)]
    pub(crate) fn to_text(&self) -> String {
        String::new()
    }

    /// A stored context (which a node with the feature wrote) is read past and left unused.
    #[cfg(feature = "redis")] // the durable mode's record
    #[inline(always)]
    pub(crate) fn from_text(_text: &str) -> Self {
        Origin
    }

    /// Nothing to follow.
    #[inline(always)]
    pub(crate) fn follow(&self, _span: &tracing::Span, _parent: bool) {}
}
