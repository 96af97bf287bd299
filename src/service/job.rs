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

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tracing::Instrument;

/// A started job: the future its closure returned.
pub(crate) type JobFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A repeating timer's job: the actor can start it any number of times (once per run).
pub(crate) trait Job: Send + Sync + 'static {
    /// Calls the user's closure with the key. A closure that panics before returning its
    /// future is reported and does not unwind into the actor.
    fn call(&self, key: String) -> Option<JobFuture>;
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

/// Calls `f`, catching a panic before it returns its future.
fn guarded<Fut: Future<Output = ()> + Send + 'static>(f: impl FnOnce() -> Fut) -> Option<JobFuture> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(future) => Some(Box::pin(future)),
        Err(_) => {
            tracing::error!("a timer job panicked before returning its future");
            None
        }
    }
}

impl<F, Fut> Job for F
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    fn call(&self, key: String) -> Option<JobFuture> {
        guarded(|| self(key))
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
        guarded(|| (self.0)(key))
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// A due timer's job, as the actor takes it out of the timer's shard: a one-shot timer's job
/// leaves with the timer, a repeating timer's is shared with the timer waiting for its next run.
pub(crate) enum JobRef {
    Owned(Box<dyn OnceJob>),
    Shared(Arc<dyn Job>),
}

impl JobRef {
    /// Calls the job with the key.
    pub fn call(self, key: String) -> Option<JobFuture> {
        match self {
            JobRef::Owned(job) => job.call_once(key),
            JobRef::Shared(job) => job.call(key),
        }
    }
}

/// The jobs due in one advance, to be started together.
#[derive(Default)]
pub(crate) struct Starts {
    futures: Vec<JobFuture>,
}

impl Starts {
    /// Calls the job of the timer `key` of the service `wheel`, inside a `tracing` span at the
    /// `DEBUG` level (target `tokio_timewheel::job`) that carries both and goes with the
    /// job's future. A span that no subscriber wants costs one check of the level, and the job
    /// is kept as it is: at a million firings a second, a span each is not free, so it is
    /// there for whoever asks for it.
    pub fn push(&mut self, job: JobRef, key: String, wheel: &str) {
        let span = tracing::debug_span!(target: "tokio_timewheel::job", "timer", wheel, key = key.as_str());
        if span.is_disabled() {
            self.futures.extend(job.call(key));
            return;
        }
        let future = span.in_scope(|| job.call(key));
        self.futures.extend(future.map(|future| Box::pin(future.instrument(span)) as JobFuture));
    }

    /// Gives back the room of the list.
    pub fn shrink_to_fit(&mut self) {
        self.futures.shrink_to_fit();
    }

    /// Spawns one task that starts every collected job.
    pub fn spawn(&mut self) {
        if !self.futures.is_empty() {
            drop(tokio::spawn(StartAll(std::mem::take(&mut self.futures))));
        }
    }
}

/// Polls each job once; those still pending go on as tasks of their own.
struct StartAll(Vec<JobFuture>);

impl Future for StartAll {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        for mut future in self.0.drain(..) {
            // The waker a pending job registers here is this task's, which is finished by the
            // time it fires; the job's own task polls it again first and registers its own.
            match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
                Ok(Poll::Ready(())) => {}
                Ok(Poll::Pending) => drop(tokio::spawn(future)),
                Err(_) => tracing::error!("a timer job panicked"),
            }
        }
        Poll::Ready(())
    }
}
