//! Traces from an in-process `schedule` to its job: with the `opentelemetry` feature, a job's
//! span `timer` is linked to the span that scheduled the timer, in a trace of its own, and each
//! run of a repeating timer in a trace of its own too.
//!
//! The spans go through the tracing-opentelemetry layer to an in-memory exporter; each test
//! installs its subscriber on its own thread, which runs the whole (current-thread) runtime.
#![cfg(feature = "opentelemetry")]

use std::time::Duration;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tokio_timewheel::{Repeat, Scheduler};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

/// An exporter of this thread's spans, the jobs' `DEBUG` spans included, while the guard lives.
fn traced() -> (InMemorySpanExporter, tracing::subscriber::DefaultGuard) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::EnvFilter::new("info,tokio_timewheel::job=debug"))
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("traces")));
    (exporter, tracing::subscriber::set_default(subscriber))
}

/// The finished `timer` spans of the key `key`, once there are `n` of them (waiting up to 10 s).
async fn runs_of(exporter: &InMemorySpanExporter, key: &str, n: usize) -> Vec<SpanData> {
    let find = || -> Vec<SpanData> {
        let spans = exporter.get_finished_spans().unwrap();
        let of_key = |s: &SpanData| s.attributes.iter().any(|a| a.key.as_str() == "key" && a.value.as_str() == key);
        spans.into_iter().filter(|s| s.name == "timer" && of_key(s)).collect()
    };
    let started = std::time::Instant::now();
    while find().len() < n {
        assert!(started.elapsed() < Duration::from_secs(10), "{} runs of {key} finished, not {n}", find().len());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    find()
}

fn context_of(span: &tracing::Span) -> SpanContext {
    span.context().span().span_context().clone()
}

fn linked_to(run: &SpanData, origin: &SpanContext) -> bool {
    run.links
        .links
        .iter()
        .any(|l| l.span_context.trace_id() == origin.trace_id() && l.span_context.span_id() == origin.span_id())
}

#[tokio::test]
async fn a_jobs_span_is_linked_to_the_scheduling_span_in_a_trace_of_its_own() {
    let (exporter, _guard) = traced();
    let timer = Scheduler::builder().name("sessions").start().unwrap();
    let login = tracing::info_span!("login");
    let origin = context_of(&login);
    assert!(origin.is_valid(), "the subscriber gives the test's span a context");
    // The context is the span current when `schedule` is called.
    let done = login.in_scope(|| timer.schedule("session-7", Duration::from_millis(1), |_| async {})).await.unwrap();
    let plain = timer.schedule("session-8", Duration::from_millis(1), |_| async {}).await.unwrap();
    done.await.unwrap();
    plain.await.unwrap();

    let run = &runs_of(&exporter, "session-7", 1).await[0];
    assert!(linked_to(run, &origin), "no link to the scheduling span: {:?}", run.links);
    assert_ne!(run.span_context.trace_id(), origin.trace_id(), "a run is a trace of its own");
    assert_eq!(run.parent_span_id, SpanId::INVALID, "a root span");
    let plain = &runs_of(&exporter, "session-8", 1).await[0];
    assert!(plain.links.links.is_empty(), "a timer scheduled outside a span has no link: {:?}", plain.links);
}

#[tokio::test]
async fn every_run_of_a_repeating_timer_starts_a_trace_of_its_own_linked_to_the_schedule() {
    let (exporter, _guard) = traced();
    let timer = Scheduler::builder().start().unwrap();
    let setup = tracing::info_span!("setup");
    let origin = context_of(&setup);
    let every = Duration::from_millis(5);
    let _series =
        setup.in_scope(|| timer.schedule_repeating("heartbeat", every, Repeat::Times(3), |_| async {})).await.unwrap();

    let runs = runs_of(&exporter, "heartbeat", 3).await;
    let mut traces: Vec<_> = runs.iter().map(|r| r.span_context.trace_id().to_bytes()).collect();
    traces.sort_unstable();
    traces.dedup();
    assert_eq!(traces.len(), runs.len(), "every run has a trace of its own");
    for run in &runs {
        assert_ne!(run.span_context.trace_id(), origin.trace_id());
        assert!(linked_to(run, &origin), "a run is linked to the schedule: {:?}", run.links);
    }
}
