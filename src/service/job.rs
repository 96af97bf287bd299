//! Type erasure for user jobs, and how due jobs are started.
//!
//! # One task per tick, not one per job
//! The actor calls each due job's closure (cheap: it only builds a future) and collects the
//! futures of one advance in a [`Starts`]. It then spawns one task that polls each future
//! once: most timer jobs (log, bump a counter, send on a channel, close a connection) finish
//! in that first poll and cost no task at all; a job that has to wait is moved to a Tokio
//! task of its own there and then. Spawning a task per job measured about three times the CPU
//! of the whole fire path. The wheel never waits for a job either way; what the jobs of one
//! tick share is the first step of each, so a job that blocks its thread (it should use
//! `spawn_blocking`) delays the others due with it.

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tracing::Instrument;

use super::key::Key;
use crate::origin::Origin;

/// A started job: the future its closure returned.
pub(crate) type JobFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A repeating timer's job: the actor can start it any number of times (once per run).
pub(crate) trait Job: Send + Sync + 'static {
    /// Calls the user's closure with the key. It may panic: [`Starts::push`] catches and
    /// reports that, so it never unwinds into the actor.
    fn call(&self, key: String) -> Option<JobFuture>;

    /// Makes the span of a run follow the span that scheduled the timer, if the job keeps it.
    fn follow(&self, _span: &tracing::Span) {}
}

/// A one-shot timer's job: started at most once, so it may own what it needs (a
/// `oneshot::Sender`, a value to deliver) and need not be `Sync`.
pub(crate) trait OnceJob: Send + 'static {
    /// Calls the user's closure with the key, as [`Job::call`] does.
    fn call_once(self: Box<Self>, key: String) -> Option<JobFuture>;

    /// Whether firing only wakes the timer's waiter, with nothing to call.
    fn only_wakes(&self) -> bool {
        false
    }

    /// The job as `Any`, for a queue to take back the value of a timer it removes.
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;

    /// As [`Job::follow`].
    fn follow(&self, _span: &tracing::Span) {}

    /// The deadline tick of the debounce burst this job ends ([`Debounced`]); `None` for a job
    /// that no debounce made.
    fn burst_cap(&self) -> Option<u64> {
        None
    }
}

/// The job of a debounced timer (`Scheduler::debounce`): the last call's job, and the deadline
/// tick its burst may not pass.
pub(crate) struct Debounced {
    pub cap: u64,
    pub job: Box<dyn OnceJob>,
}

impl OnceJob for Debounced {
    fn call_once(self: Box<Self>, key: String) -> Option<JobFuture> {
        self.job.call_once(key)
    }

    fn only_wakes(&self) -> bool {
        self.job.only_wakes()
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self.job.into_any()
    }

    fn follow(&self, span: &tracing::Span) {
        self.job.follow(span);
    }

    fn burst_cap(&self) -> Option<u64> {
        Some(self.cap)
    }
}

/// The job of a keyed sleep: its firing wakes the sleeper and starts nothing. A unit struct, so
/// boxing it allocates nothing.
pub(crate) struct Wake;

impl OnceJob for Wake {
    fn call_once(self: Box<Self>, _key: String) -> Option<JobFuture> {
        None
    }

    fn only_wakes(&self) -> bool {
        true
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

impl<F, Fut> Job for F
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn call(&self, key: String) -> Option<JobFuture> {
        Some(Box::pin(self(key)))
    }
}

/// A one-shot job given as a closure.
pub(crate) struct Once<F>(pub F);

impl<F, Fut> OnceJob for Once<F>
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn call_once(self: Box<Self>, key: String) -> Option<JobFuture> {
        Some(Box::pin((self.0)(key)))
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// The one-shot job `job`, its runs following `origin`: kept inside the job's box, which grows by
/// the span context, and only when there is one (never without the `opentelemetry` feature), so a
/// timer stays its 40 bytes.
pub(crate) fn once<F, Fut>(job: F, origin: &Origin) -> Box<dyn OnceJob>
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if origin.is_some() {
        return Box::new(Following { job: Once(job), origin: origin.clone() });
    }
    Box::new(Once(job))
}

/// The repeating job `job`, each run following `origin`, as [`once`] keeps it.
pub(crate) fn shared<F, Fut>(job: F, origin: &Origin) -> Arc<dyn Job>
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if origin.is_some() {
        return Arc::new(Following { job, origin: origin.clone() });
    }
    Arc::new(job)
}

/// A job with the trace context of the span that scheduled it.
struct Following<J> {
    job: J,
    origin: Origin,
}

impl<F, Fut> OnceJob for Following<Once<F>>
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn call_once(self: Box<Self>, key: String) -> Option<JobFuture> {
        Some(Box::pin((self.job.0)(key)))
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }

    fn follow(&self, span: &tracing::Span) {
        self.origin.follow(span, false);
    }
}

impl<F, Fut> Job for Following<F>
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn call(&self, key: String) -> Option<JobFuture> {
        Some(Box::pin((self.job)(key)))
    }

    fn follow(&self, span: &tracing::Span) {
        self.origin.follow(span, false);
    }
}

/// A due timer's job, as the actor takes it out of the timer's shard: a one-shot timer's job
/// leaves with the timer, a repeating timer's is shared with the timer waiting for its next run.
pub(crate) enum JobRef {
    Owned(Box<dyn OnceJob>),
    Shared(Arc<dyn Job>),
}

impl JobRef {
    /// Makes `span` follow the span that scheduled the timer (a link), if the job keeps it.
    fn follow(&self, span: &tracing::Span) {
        match self {
            JobRef::Owned(job) => job.follow(span),
            JobRef::Shared(job) => job.follow(span),
        }
    }

    /// Calls the job with the key.
    pub fn call(self, key: String) -> Option<JobFuture> {
        match self {
            JobRef::Owned(job) => job.call_once(key),
            JobRef::Shared(job) => job.call(key),
        }
    }
}

/// The jobs due in one advance, to be started together, each with its timer's key (which a
/// job's panic is reported with).
pub(crate) struct Starts {
    futures: Vec<(JobFuture, Key)>,
    /// The service's name, for the jobs' spans and the report of a panic.
    wheel: Arc<str>,
}

impl Starts {
    /// An empty list for the jobs of the service `wheel`.
    pub fn new(wheel: &str) -> Self {
        Starts { futures: Vec::new(), wheel: wheel.into() }
    }

    /// Calls the job of the timer `key` inside a `tracing` span at the `DEBUG` level (target
    /// `tokio_timewheel::job`) that carries the service's name and the key and goes with the
    /// job's future. A span that no subscriber wants costs one check of the level, and the job
    /// is kept as it is: at a million firings a second, a span each is not free, so it is there
    /// for whoever asks for it. With the `opentelemetry` feature, an enabled span is linked to
    /// the span that scheduled the timer (each run of a repeating one too: each is a trace of
    /// its own). A closure that panics is reported (see [`report`]) and does not unwind into
    /// the actor.
    pub fn push(&mut self, job: JobRef, key: Key) {
        let span =
            tracing::debug_span!(target: "tokio_timewheel::job", "timer", wheel = &*self.wheel, key = key.as_str());
        if !span.is_disabled() {
            job.follow(&span);
        }
        let call = || catch_unwind(AssertUnwindSafe(|| job.call(key.as_str().to_owned())));
        let (started, span) = if span.is_disabled() { (call(), None) } else { (span.in_scope(call), Some(span)) };
        match (started, span) {
            (Ok(Some(future)), None) => self.futures.push((future, key)),
            (Ok(Some(future)), Some(span)) => self.futures.push((Box::pin(future.instrument(span)), key)),
            (Ok(None), _) => {}
            (Err(panic), _) => report(&self.wheel, &key, &*panic),
        }
    }

    /// Gives back the room of the list.
    pub fn shrink_to_fit(&mut self) {
        self.futures.shrink_to_fit();
    }

    /// Spawns one task that starts every collected job.
    pub fn spawn(&mut self) {
        if !self.futures.is_empty() {
            drop(tokio::spawn(StartAll { futures: std::mem::take(&mut self.futures), wheel: self.wheel.clone() }));
        }
    }
}

/// Logs that the job of timer `key` of the service `wheel` panicked, at `ERROR` (target
/// `tokio_timewheel::job`), with the panic's message: whatever the level of the jobs' spans,
/// the line says which timer it was and why.
fn report(wheel: &str, key: &Key, panic: &(dyn Any + Send)) {
    let key = key.as_str();
    let message = panic_message(panic);
    tracing::error!(
        target: "tokio_timewheel::job",
        wheel,
        key,
        panic = message,
        "the job of timer {key:?} panicked: {message} (the timer counts as fired; the service goes on)"
    );
}

/// The message of a panic: its payload as text, as `panic!` makes it (`&str` or `String`).
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => message,
        (None, Some(message)) => message,
        (None, None) => "non-string panic payload",
    }
}

/// Polls each job once; those still pending go on as tasks of their own.
struct StartAll {
    futures: Vec<(JobFuture, Key)>,
    wheel: Arc<str>,
}

impl Future for StartAll {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        for (mut future, key) in this.futures.drain(..) {
            // The waker a pending job registers here is this task's, which is finished by the
            // time it fires; the job's own task polls it again first and registers its own.
            match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
                Ok(Poll::Ready(())) => {}
                Ok(Poll::Pending) => drop(tokio::spawn(Reported { future, key, wheel: this.wheel.clone() })),
                Err(panic) => report(&this.wheel, &key, &*panic),
            }
        }
        Poll::Ready(())
    }
}

/// A job that went on as a task of its own: a panic in a later poll is reported the same way.
struct Reported {
    future: JobFuture,
    key: Key,
    wheel: Arc<str>,
}

impl Future for Reported {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match catch_unwind(AssertUnwindSafe(|| self.future.as_mut().poll(cx))) {
            Ok(poll) => poll,
            Err(panic) => {
                report(&self.wheel, &self.key, &*panic);
                Poll::Ready(())
            }
        }
    }
}
