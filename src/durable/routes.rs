//! [`Routes`]: one worker's handlers by the kind of task, told by a prefix of its key, as
//! asynq's `ServeMux` routes by task type. [`DurableScheduler::run_routes`](super::DurableScheduler::run_routes)
//! runs them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::Task;

/// A handler's future, boxed so that routes of different handlers share one type.
type Run = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
type Route = Arc<dyn Fn(Task) -> Run + Send + Sync>;

/// Handlers by key prefix, for a worker that runs several kinds of task: each task goes to the
/// handler of the longest prefix of its key, or to the fallback. A task that matches no route
/// and finds no fallback fails with an error that names it (it is retried, then dead-lettered,
/// as any failure), so that a kind no handler knows is seen in the dead letters, not dropped.
/// A kind whose tasks need retry settings of their own gets them where they are scheduled, from a
/// handle made by [`with_options`](super::DurableScheduler::with_options).
///
/// # Examples
/// ```no_run
/// use tokio_timewheel::durable::{DurableScheduler, Routes, Task};
///
/// # async fn run(timers: DurableScheduler) {
/// let routes = Routes::new()
///     .on("order:", |task: Task| async move {
///         println!("review {}", task.key());
///         Ok::<(), std::io::Error>(())
///     })
///     .on("email:", |task: Task| async move {
///         println!("send {} bytes", task.payload().len());
///         Ok::<(), std::io::Error>(())
///     });
/// let worker = timers.run_routes(routes);
/// # worker.shutdown().await;
/// # }
/// ```
#[derive(Clone, Default)]
#[must_use = "routes do nothing until a worker runs them: DurableScheduler::run_routes"]
pub struct Routes {
    /// Longest prefix first.
    routes: Vec<(String, Route)>,
    fallback: Option<Route>,
}

impl fmt::Debug for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Routes")
            .field("prefixes", &self.routes.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>())
            .field("fallback", &self.fallback.is_some())
            .finish()
    }
}

impl Routes {
    /// No routes yet.
    pub fn new() -> Self {
        Routes::default()
    }

    /// Runs `handler` on the tasks whose key starts with `prefix` (unless a longer prefix has a
    /// route of its own). A second route for the same prefix replaces the first.
    pub fn on<F, Fut, E>(mut self, prefix: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        let prefix = prefix.into();
        self.routes.retain(|(p, _)| *p != prefix);
        self.routes.push((prefix, boxed(handler)));
        self.routes.sort_by(|(a, _), (b, _)| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self
    }

    /// Runs `handler` on the tasks that no prefix matches.
    pub fn fallback<F, Fut, E>(mut self, handler: F) -> Self
    where
        F: Fn(Task) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: fmt::Display,
    {
        self.fallback = Some(boxed(handler));
        self
    }

    /// The one handler a worker runs: each task to its route.
    pub(crate) fn into_handler(self) -> impl Fn(Task) -> Run + Send + Sync + 'static {
        let routes = Arc::new(self);
        move |task: Task| {
            let route = routes
                .routes
                .iter()
                .find(|(prefix, _)| task.key().starts_with(prefix.as_str()))
                .map(|(_, route)| route)
                .or(routes.fallback.as_ref());
            match route {
                Some(route) => route(task),
                None => {
                    let prefixes: Vec<&str> = routes.routes.iter().map(|(p, _)| p.as_str()).collect();
                    let why = format!(
                        "no route for the task {:?}: its key starts with none of {prefixes:?}; add Routes::on(prefix, ..) \
                         or Routes::fallback",
                        task.key()
                    );
                    Box::pin(std::future::ready(Err(why)))
                }
            }
        }
    }
}

fn boxed<F, Fut, E>(handler: F) -> Route
where
    F: Fn(Task) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: fmt::Display,
{
    Arc::new(move |task| {
        let run = handler(task);
        Box::pin(async move { run.await.map_err(|e| e.to_string()) })
    })
}
