//! With the `opentelemetry` feature: the scheduling span's OpenTelemetry span context, read
//! through the application's tracing-opentelemetry layer, and the W3C text it is stored as.

use std::str::FromStr;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The span context of the span that scheduled a timer or a task; `None` when there was no
/// valid one (no span, or no tracing-opentelemetry layer behind it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Origin(Option<SpanContext>);

/// The only `traceparent` version written and read.
const VERSION: &str = "00";

impl Origin {
    /// No context.
    #[cfg(feature = "redis")] // the durable mode's record
    pub(crate) fn none() -> Self {
        Origin(None)
    }

    /// The current span's context.
    pub(crate) fn current() -> Self {
        let span = tracing::Span::current();
        if span.is_none() {
            return Origin(None);
        }
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        Origin(sc.is_valid().then_some(sc))
    }

    /// Whether there is a context to keep.
    pub(crate) fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// `<traceparent>` or `<traceparent> <tracestate>` (see the module's docs); `""` for none.
    #[cfg(feature = "redis")] // the durable mode's record
    pub(crate) fn to_text(&self) -> String {
        let Some(sc) = &self.0 else { return String::new() };
        let mut text = format!("{VERSION}-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8() & 1);
        let state = sc.trace_state().header();
        // A valid trace state is printable ASCII; anything else is left out rather than let
        // a newline split the call's list.
        if !state.is_empty() && state.bytes().all(|b| (b' '..=b'~').contains(&b)) {
            text.push(' ');
            text.push_str(&state);
        }
        text
    }

    /// The context `to_text` wrote; none for text that does not read as one.
    #[cfg(feature = "redis")] // the durable mode's record
    pub(crate) fn from_text(text: &str) -> Self {
        let (parent, state) = text.split_once(' ').unwrap_or((text, ""));
        let mut parts = parent.split('-');
        let (Some(VERSION), Some(trace), Some(span), Some(flags), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Origin(None);
        };
        let (Ok(trace), Ok(span), Ok(flags)) = (
            hex(trace, 32).and_then(|t| TraceId::from_hex(t).map_err(|_| ())),
            hex(span, 16).and_then(|s| SpanId::from_hex(s).map_err(|_| ())),
            hex(flags, 2).and_then(|f| u8::from_str_radix(f, 16).map_err(|_| ())),
        ) else {
            return Origin(None);
        };
        let state = TraceState::from_str(state).unwrap_or_default();
        let sc = SpanContext::new(trace, span, TraceFlags::new(flags), true, state);
        Origin(sc.is_valid().then_some(sc))
    }

    /// Makes `span` follow the origin: a link to it, or with `parent`, the span's parent (which
    /// only a span not yet entered takes).
    pub(crate) fn follow(&self, span: &tracing::Span, parent: bool) {
        let Some(sc) = &self.0 else { return };
        if parent {
            let _ = span.set_parent(Context::new().with_remote_span_context(sc.clone()));
        } else {
            span.add_link(sc.clone());
        }
    }
}

/// `text` if it is `len` lowercase hex digits, as the W3C format has them.
fn hex(text: &str, len: usize) -> Result<&str, ()> {
    let ok = text.len() == len && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        Ok(text)
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(state: &str) -> Origin {
        let trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        let span = SpanId::from_hex("00f067aa0ba902b7").unwrap();
        let state = TraceState::from_str(state).unwrap();
        Origin(Some(SpanContext::new(trace, span, TraceFlags::SAMPLED, true, state)))
    }

    #[test]
    fn the_text_is_the_w3c_headers() {
        assert_eq!(context("").to_text(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(
            context("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7").to_text(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
        );
        assert_eq!(Origin(None).to_text(), "");
    }

    #[test]
    fn the_text_reads_back() {
        for origin in [context(""), context("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")] {
            assert_eq!(Origin::from_text(&origin.to_text()), origin);
        }
        let unsampled = Origin::from_text("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.0.unwrap().is_sampled());
    }

    #[test]
    fn text_that_is_no_context_reads_as_none() {
        for bad in [
            "",
            "garbage",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(Origin::from_text(bad), Origin(None), "{bad:?}");
        }
    }

    #[test]
    fn a_list_has_a_line_per_origin_and_is_empty_when_none_has_a_context() {
        let none = [Origin(None), Origin(None)];
        assert_eq!(super::super::joined(none.iter()), "");
        let some = [Origin(None), context("")];
        assert_eq!(super::super::joined(some.iter()), "\n00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    }
}
