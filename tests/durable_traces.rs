//! Traces from a durable `schedule` to its run: with the `opentelemetry` feature the task keeps
//! the scheduling span's trace context, and the handler's span `task` is linked to it (a trace
//! of its own), or with `trace_parent(true)` its child; every run of a series starts a trace of
//! its own. Without the feature the record holds no context.
//!
//! The spans go through the tracing-opentelemetry layer to an in-memory exporter. The runs' spans
//! are checked on the store the run selects (`support/store.rs`: a real `redis-server`, or with
//! `TIMEWHEEL_TEST_STORE=sqlite` a SQLite file of the embedded store); the record itself is read
//! in Redis, on Redis only. Without a `redis-server` the tests on Redis print a skip note and
//! pass, except under `CI=true`, where they fail.
#![cfg(feature = "redis")]

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
#[cfg(feature = "opentelemetry")]
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use support::durable::{builder, keys};
#[cfg(feature = "opentelemetry")]
use support::durable::{wait_until, Log};
use support::RedisServer;
#[cfg(feature = "opentelemetry")]
use support::TestStore;

/// The spans this test binary finished, exported in memory; installs the subscriber (for every
/// thread: the workers run on the runtime's) on first use.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::EnvFilter::new("info"))
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("durable_traces")));
        tracing::subscriber::set_global_default(subscriber).unwrap();
        exporter
    })
}

/// The finished `task` spans of the key `key`.
#[cfg(feature = "opentelemetry")]
fn runs_of(key: &str) -> Vec<SpanData> {
    let spans = exporter().get_finished_spans().unwrap();
    spans
        .into_iter()
        .filter(|s| s.name == "task" && s.attributes.iter().any(|a| a.key.as_str() == "key" && a.value.as_str() == key))
        .collect()
}

/// The span context of `span` as OpenTelemetry sees it.
fn context_of(span: &tracing::Span) -> SpanContext {
    span.context().span().span_context().clone()
}

/// Waits up to 10 s for `n` finished runs of `key`.
#[cfg(feature = "opentelemetry")]
async fn wait_for_runs(key: &str, n: usize) -> Vec<SpanData> {
    let done = wait_until(Duration::from_secs(10), || runs_of(key).len() >= n).await;
    assert!(done, "{} runs of {key} finished, not {n}", runs_of(key).len());
    runs_of(key)
}

/// Whether `run` has a link to exactly the span `origin`.
#[cfg(feature = "opentelemetry")]
fn linked_to(run: &SpanData, origin: &SpanContext) -> bool {
    run.links
        .links
        .iter()
        .any(|l| l.span_context.trace_id() == origin.trace_id() && l.span_context.span_id() == origin.span_id())
}

#[cfg(feature = "opentelemetry")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_span_is_linked_to_the_scheduling_span_in_a_trace_of_its_own() {
    exporter();
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "linked").connect().await.unwrap();
    let checkout = tracing::info_span!("checkout");
    let origin = context_of(&checkout);
    assert!(origin.is_valid(), "the subscriber gives the test's span a context");
    timers.schedule("order-1", Duration::ZERO, "x").instrument(checkout).await.unwrap();
    // Scheduled outside any span: nothing to link to.
    timers.schedule("order-2", Duration::ZERO, "x").await.unwrap();
    let log = Log::default();
    let worker = log.worker(&timers);

    let run = &wait_for_runs("order-1", 1).await[0];
    assert!(linked_to(run, &origin), "no link to the scheduling span: {:?}", run.links);
    assert_ne!(run.span_context.trace_id(), origin.trace_id(), "a run is a trace of its own by default");
    assert_eq!(run.parent_span_id, opentelemetry::trace::SpanId::INVALID, "a root span");
    let plain = &wait_for_runs("order-2", 1).await[0];
    assert!(plain.links.links.is_empty(), "a task scheduled outside a span has no link: {:?}", plain.links);
    worker.shutdown().await;
}

#[cfg(feature = "opentelemetry")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_trace_parent_a_handlers_span_is_a_child_of_the_scheduling_span() {
    exporter();
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "parented").trace_parent(true).connect().await.unwrap();
    let checkout = tracing::info_span!("checkout");
    let origin = context_of(&checkout);
    // The batch calls keep the context too, each task its own.
    let items = [("order-3", Duration::ZERO, b"x".to_vec())];
    let results = timers.schedule_many(items).instrument(checkout).await.unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let worker = Log::default().worker(&timers);

    let run = &wait_for_runs("order-3", 1).await[0];
    assert_eq!(run.span_context.trace_id(), origin.trace_id(), "the run is in the scheduling trace");
    assert_eq!(run.parent_span_id, origin.span_id(), "the run's parent is the scheduling span");
    worker.shutdown().await;
}

/// Each run of a series is a trace of its own, linked to the span that scheduled the series,
/// even with `trace_parent(true)`: a fixed rate moved on in Lua (`schedule_repeating`), and an
/// upserted series with an end, whose next runs the node works out.
#[cfg(feature = "opentelemetry")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_of_a_series_starts_a_trace_of_its_own_linked_to_the_schedule() {
    use tokio_timewheel::{Recurrence, Repeat};

    exporter();
    let Some(store) = TestStore::start() else { return };
    let timers = builder(&store.url(), "series").trace_parent(true).connect().await.unwrap();
    let setup = tracing::info_span!("setup");
    let origin = context_of(&setup);
    async {
        let period = Duration::from_millis(150);
        timers.schedule_repeating("report", period, Repeat::Times(3), "r").await.unwrap();
        let until = std::time::SystemTime::now() + Duration::from_secs(30);
        timers.upsert_recurring("digest", Recurrence::every(period).until(until), "d").await.unwrap();
    }
    .instrument(setup)
    .await;
    let worker = Log::default().worker(&timers);

    for key in ["report", "digest"] {
        let runs = wait_for_runs(key, 3).await;
        let mut traces: Vec<_> = runs.iter().map(|r| r.span_context.trace_id()).collect();
        traces.sort_unstable_by_key(|t| t.to_bytes());
        traces.dedup();
        assert_eq!(traces.len(), runs.len(), "{key}: every run has a trace of its own");
        for run in &runs {
            assert_ne!(run.span_context.trace_id(), origin.trace_id(), "{key}: a run is not in the schedule's trace");
            assert!(linked_to(run, &origin), "{key}: a run is linked to the schedule: {:?}", run.links);
        }
    }
    worker.shutdown().await;
}

/// The record holds the scheduling span's `traceparent` with the feature, and nothing of it
/// without (the span has a context either way: this binary's subscriber gives it one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_holds_the_trace_context_only_with_the_feature() {
    exporter();
    let Some(server) = RedisServer::start() else { return };
    let timers = builder(&server.url(), "stored").connect().await.unwrap();
    let checkout = tracing::info_span!("checkout");
    let origin = context_of(&checkout);
    assert!(origin.is_valid());
    timers.schedule("order-4", Duration::from_secs(600), "payload").instrument(checkout).await.unwrap();

    let record = server.command(&["HGET", &keys("stored").tasks(), "order-4"]);
    let record = record.as_str().expect("the task's record");
    let traceparent = format!("00-{}-{}-01", origin.trace_id(), origin.span_id());
    if cfg!(feature = "opentelemetry") {
        let field = format!("t{}:{traceparent}", traceparent.len());
        assert!(record.contains(&field), "no {field:?} in the record {record:?}");
    } else {
        assert!(!record.contains(&origin.trace_id().to_string()), "a context is stored: {record:?}");
        assert!(record.ends_with(":0:0:0:0:0:0:payload"), "the record has a field more: {record:?}");
    }
    // The task reads as it did.
    let info = timers.get("order-4").await.unwrap().expect("the task");
    assert_eq!(info.payload(), b"payload");
}
