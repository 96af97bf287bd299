//! A web page of one or several durable wheels (feature `dashboard`), as an
//! [axum](https://docs.rs/axum) router to mount in the application's own server.
//!
//! The page refreshes itself every 1.5 s. It opens on an overview of every wheel it was given
//! (the counts by state, and whether each is paused), then shows one wheel, chosen in its
//! selector, in two views:
//! - **Overview**: the counts by state and the counters ([`DurableScheduler::stats`]), and the
//!   limits by key prefix that the workers obey ([`DurableScheduler::limits`]); every
//!   node's deliveries handed out, acknowledged and failed a minute over the last hour, and how
//!   late they were claimed ([`DurableScheduler::figures`]), beside the lateness this process's
//!   workers saw lately ([`DurableScheduler::lateness`]); what falls due over the next hour; the
//!   leader and the workers; a search by key; the oldest dead letters with their last error.
//! - **Tasks**: the waiting, ready, running or dead tasks, a page at a time in their state's
//!   order ([`DurableScheduler::list`]): key, due time or how long overdue, deliveries, the
//!   worker that runs it and since when, the last error. A click on a key shows the task and its
//!   payload, as pretty JSON, text or hex, and for a run of a series its recurrence and next
//!   run, in UTC and in the series' zone. The finished runs the wheel's history keeps
//!   ([`DurableBuilder::history_limit`](super::DurableBuilder::history_limit)) page the same
//!   way, newest first: key, due time, outcome, attempts, when the handler started and how long
//!   it took, when the run ended, the error a dead one died of.
//!
//! Every view reads a bounded amount (a page of at most [`PAGE_MAX`] tasks, the
//! [`DEAD_LETTERS_MAX`] oldest dead letters, a payload's first [`PAYLOAD_SHOWN`] bytes), so the page
//! stays quick on a wheel of millions of tasks. Everything it needs (its HTML, script, styles
//! and plots) is in the crate: it fetches nothing from anywhere else, so it works where the
//! network is closed, and its `Content-Security-Policy` allows nothing else.
//!
//! It is read-only unless the mounting code enables the actions ([`Dashboard::actions`]): then
//! it can run a task now, cancel it, stop its running handler, pause and resume the wheel, and
//! requeue or delete dead letters one at a time, the selected ones, or all of them.
//!
//! # Examples
//! ```no_run
//! use tokio_timewheel::durable::{dashboard, DurableScheduler};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let orders = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders").connect().await?;
//! let emails = DurableScheduler::builder("redis://127.0.0.1:6379/", "emails").connect().await?;
//! // Read-only, one wheel, under /timers of the application's router:
//! let app: axum::Router = dashboard::mount(axum::Router::new(), "/timers", dashboard::router(orders.clone()));
//! // Both wheels on one page, with the actions, for operators:
//! let ops = dashboard::Dashboard::new(orders).wheel(emails).actions(true).router();
//! let app = dashboard::mount(app, "/admin/timers", ops);
//! # let _ = app;
//! # Ok(()) }
//! ```
//! Serve it with `axum::serve` (axum's `tokio` and `http1` features), behind the application's
//! own authentication: the dashboard has none of its own, and shows keys, payloads and error
//! texts.
//!
//! # Mounting under a path
//! [`mount`] nests the dashboard under a path so that both `/admin/timers` and
//! `/admin/timers/` serve the page. With axum's own `Router::nest("/admin/timers", ..)` the
//! page is served at `/admin/timers` only: axum routes nothing to a nested router at
//! `/admin/timers/` (everything else works the same).
//!
//! # What it answers
//! Paths are relative to where it is mounted; every answer is JSON but the page's own files.
//! `{wheel}` is a wheel's name as [`Dashboard::wheel`] took it, percent-encoded; the paths
//! under `api/` without `w/{wheel}/` (`api/stats`, `api/dead/requeue`, ...) name the first wheel.
//! What the wheel reads is sent as its own JSON, the `Serialize` form of
//! [`DurableStats`](super::DurableStats), [`TaskInfo`](super::TaskInfo),
//! [`DeadTask`](super::DeadTask), [`ListPage`](super::ListPage) and [`Figures`](super::Figures)
//! (times as `*_unix_ms`, durations as `*_ms`), the tasks' and dead letters' payloads left out
//! but in `api/payload`.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /` | the page (also `app.js`, `style.css`) |
//! | `GET api/info` | the wheels' names, whether the actions are on, the page's limits |
//! | `GET api/overview` | `{"wheels": [..]}`: each wheel's `DurableStats`, its name as `wheel` (or `{"wheel", "error"}` for one that could not be read) |
//! | `GET api/w/{wheel}/stats` | the wheel's `DurableStats`: the counts by state, the counters (`cancelled` too) and whether it is paused |
//! | `GET api/w/{wheel}/limits` | `{"limits": [..]}`: the limits by key prefix ([`DurableScheduler::limits`]), each `{"prefix", "limit", "rate", "per_ms", "running"}`: the limit as its `Display` says it (`20 starts per 1s, 5 running`), the starts per window and the window (ms), the handlers at once (`null` for a part it does not have) |
//! | `GET api/w/{wheel}/lateness` | how many deliveries this process's workers claimed lately, and p50, p99 and max of how late ([`DurableScheduler::lateness`]) |
//! | `GET api/w/{wheel}/figures` | every node's `Figures` of the last hour ([`DurableScheduler::figures`]): handed out, acknowledged, failed and dead-lettered a minute, and how late deliveries were claimed, in buckets of doubling width |
//! | `GET api/w/{wheel}/tasks?state=s&after=c&limit=n` | a `ListPage` of the tasks in state `s` (`waiting`, `ready`, `running`, `dead`, or `finished`: the runs the history keeps, newest first), `n` of them (default 50, at most 200), after the cursor `c` (the `next` of the page before, here an opaque text), with `state` and `limit`: each task's key, due time, how long overdue, deliveries, worker and claim time, last error, the series a ready or running task is a run of (`recurrence`), and for a finished run how it went (`finished`: outcome, handler start and duration, end) |
//! | `GET api/w/{wheel}/dead?limit=n` | `{"limit", "letters"}`: the oldest `n` dead letters (default 50, at most 500), each a `DeadTask`: key, attempts, last error, when it was due and when it died |
//! | `GET api/w/{wheel}/task?key=k` | `{"key", "pending", "detail"}`: the `TaskInfo` under `k`, pending or dead (`null` if none): its state, due time, deliveries, payload size and encoding, last error, and for a run of a series its `recurrence`: cadence, period (ms) or cron expression and zone, end, missed-run policy, runs left and next run ([`TaskInfo::recurrence`](super::TaskInfo::recurrence)) |
//! | `GET api/w/{wheel}/payload?key=k` | the `TaskInfo` under `k` with `found`, and its payload as `shown`: pretty JSON, text or a hex dump, as its `payload_encoding` says, of its first 64 KiB (`truncated` if it is longer) |
//! | `GET api/w/{wheel}/due` | what falls due over the next hour, a count a minute |
//! | `GET api/w/{wheel}/nodes` | the node that leads each partition, and the workers heard from |
//! | `POST api/w/{wheel}/run-now` | `{"key": k}`: makes the waiting task due now ([`DurableScheduler::reschedule`]); 404 if none is waiting or ready |
//! | `POST api/w/{wheel}/cancel` | `{"key": k}`: cancels the waiting or ready task; 404 if there is none |
//! | `POST api/w/{wheel}/cancel-running` | `{"key": k}`: tells the running handler to stop ([`DurableScheduler::cancel_running`]); 404 if it is not running |
//! | `POST api/w/{wheel}/pause`, `POST api/w/{wheel}/resume` | `{}`: pauses or resumes the wheel |
//! | `POST api/w/{wheel}/dead/requeue` | `{"key": k}`: puts the dead letter back; 404 if there is none, 409 if a task under `k` is pending. `{"keys": [..]}` (at most 500): each of them, answering which were requeued, missing or pending |
//! | `POST api/w/{wheel}/dead/delete` | `{"key": k}` or `{"keys": [..]}`: deletes the dead letters, as requeue does |
//! | `POST api/w/{wheel}/dead/requeue-all` | `{}`: requeues the oldest 500 dead letters, and says how many are left (the page repeats it until none is) |
//!
//! A failed Redis call answers `503` when it is worth trying again (the page does, at its next
//! refresh) and `500` otherwise, with `{"error": "..."}`; a wheel the dashboard was not given
//! answers `404`.
//!
//! # Actions and cross-site requests
//! A `POST` is refused with `403` when the actions are off, and also unless it carries the header
//! `X-Timewheel-Action` (any value) and comes from the dashboard's own page: its
//! `Sec-Fetch-Site` is `same-origin`, or, from a client that does not send that header, its
//! `Origin` names the request's `Host`. A page on another site cannot send such a request
//! through a visitor's browser (a form cannot set the header; a script that tries is stopped by
//! the browser, which asks this server first and is never told yes). A script outside a browser
//! sends both headers itself:
//! `curl -H 'X-Timewheel-Action: 1' -H 'Origin: http://127.0.0.1:8080' -H 'Content-Type: application/json' -d '{"key":"k"}' http://127.0.0.1:8080/api/w/orders/dead/requeue`.

mod actions;
mod guard;
mod sections;

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRequestParts, OriginalUri, Query, RawPathParams, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::{DurableScheduler, TaskState};
use crate::Error;

/// The page, its script and its styles, in the crate.
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// Nothing but the page's own files and calls: no other site, no inline script, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'";

/// How many dead letters `api/dead` lists, unless it is asked for another number.
const DEAD_LETTERS_SHOWN: usize = 50;
/// How many dead letters the page's overview lists (the tasks view pages through them all).
const OVERVIEW_DEAD_LETTERS: usize = 10;
/// The most dead letters one `api/dead` call lists.
pub const DEAD_LETTERS_MAX: usize = 500;
/// How many tasks a page of `api/tasks` holds, unless it asks for another number.
const PAGE_SIZE: usize = 50;
/// The most tasks one `api/tasks` page holds.
pub const PAGE_MAX: usize = 200;
/// The most keys one bulk action (`{"keys": [..]}`, `requeue-all`) acts on.
pub const BULK_MAX: usize = 500;
/// How much of a payload `api/payload` shows: 64 KiB.
pub const PAYLOAD_SHOWN: usize = 64 * 1024;
/// How often the page reads the wheel again.
const REFRESH_MS: u64 = 1500;

/// The dashboard of `timers`, read-only: the shortcut for `Dashboard::new(timers).router()`.
///
/// # Examples
/// ```no_run
/// # use tokio_timewheel::durable::{dashboard, DurableScheduler};
/// # async fn run(timers: DurableScheduler) -> std::io::Result<()> {
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, dashboard::router(timers)).await
/// # }
/// ```
pub fn router(timers: DurableScheduler) -> Router {
    Dashboard::new(timers).router()
}

/// Nests `dashboard` (a [`router`] or [`Dashboard::router`]) in `app` under `path`, so that
/// the page answers at `path` and at `path/` alike, which axum's `Router::nest` does not do
/// (it routes nothing to a nested router at `path/`). Everything under `path/` goes to the
/// dashboard.
///
/// # Examples
/// ```no_run
/// # use tokio_timewheel::durable::{dashboard, DurableScheduler};
/// # fn run(timers: DurableScheduler) {
/// let app: axum::Router = axum::Router::new().route("/", axum::routing::get(|| async { "the shop" }));
/// let app = dashboard::mount(app, "/admin/timers", dashboard::router(timers));
/// # let _ = app;
/// # }
/// ```
///
/// # Panics
/// As `Router::nest_service`: if `path` is empty or `/`, or clashes with a route of `app`.
pub fn mount<S>(app: Router<S>, path: &str, dashboard: Router) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    app.nest_service(path.trim_end_matches('/'), dashboard)
}

/// The dashboard's settings: which wheels, and whether the page may act on them. Made by
/// [`Dashboard::new`] or [`Dashboard::wheels`], turned into a router by
/// [`router`](Self::router).
///
/// # Examples
/// ```no_run
/// # use tokio_timewheel::durable::{dashboard::Dashboard, DurableScheduler};
/// # fn run(orders: DurableScheduler, emails: DurableScheduler) {
/// let ops = Dashboard::new(orders).wheel(emails).actions(true).router();
/// # let _ = ops;
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Dashboard does nothing until turned into a router with .router()"]
pub struct Dashboard {
    /// The wheels shown, in the order given, each under a name no other has.
    wheels: Vec<(String, DurableScheduler)>,
    actions: bool,
}

impl Dashboard {
    /// The read-only dashboard of `timers`.
    pub fn new(timers: DurableScheduler) -> Self {
        Dashboard { wheels: Vec::new(), actions: false }.wheel(timers)
    }

    /// The read-only dashboard of several wheels, shown in this order (the first is the one the
    /// page opens on).
    ///
    /// # Examples
    /// ```no_run
    /// # use tokio_timewheel::durable::{dashboard::Dashboard, DurableScheduler};
    /// # fn run(orders: DurableScheduler, emails: DurableScheduler) {
    /// let page = Dashboard::wheels([orders, emails]).router();
    /// # let _ = page;
    /// # }
    /// ```
    ///
    /// # Panics
    /// As [`wheel`](Self::wheel), if two wheels have the same name.
    pub fn wheels(wheels: impl IntoIterator<Item = DurableScheduler>) -> Self {
        wheels.into_iter().fold(Dashboard { wheels: Vec::new(), actions: false }, Dashboard::wheel)
    }

    /// Shows `timers` too, under its wheel's name.
    ///
    /// # Panics
    /// If a wheel of the same name is shown already (two wheels of one name on two Redis
    /// deployments): give one another name with [`wheel_named`](Self::wheel_named).
    pub fn wheel(self, timers: DurableScheduler) -> Self {
        let name = timers.name().to_owned();
        self.wheel_named(name, timers)
    }

    /// Shows `timers` too, under `name` rather than its wheel's name.
    ///
    /// # Panics
    /// If a wheel is shown under `name` already, or `name` is empty.
    pub fn wheel_named(mut self, name: impl Into<String>, timers: DurableScheduler) -> Self {
        let name = name.into();
        assert!(!name.is_empty(), "a wheel on the dashboard needs a name");
        assert!(
            self.wheels.iter().all(|(shown, _)| *shown != name),
            "the dashboard shows a wheel named {name:?} already: give this one another name with Dashboard::wheel_named"
        );
        self.wheels.push((name, timers));
        self
    }

    /// Lets the page act on the wheels (off by default): run a task now, cancel it, stop its
    /// handler, pause and resume, requeue and delete dead letters. Each action is a `POST`
    /// guarded against cross-site requests (see the [module docs](self)); mount a dashboard with
    /// actions behind the application's authentication.
    pub fn actions(mut self, enabled: bool) -> Self {
        self.actions = enabled;
        self
    }

    /// The router that serves the page and its JSON, to mount where the application likes
    /// ([`mount`], or `Router::nest`), or serve as it is.
    pub fn router(self) -> Router {
        let one_wheel = || {
            Router::new()
                .route("/stats", get(stats))
                .route("/limits", get(limits))
                .route("/lateness", get(lateness))
                .route("/figures", get(figures))
                .route("/tasks", get(tasks))
                .route("/dead", get(dead_letters))
                .route("/task", get(find_task))
                .route("/payload", get(payload))
                .route("/due", get(due_plot))
                .route("/nodes", get(nodes))
                .route("/run-now", post(actions::run_now))
                .route("/cancel", post(actions::cancel))
                .route("/cancel-running", post(actions::cancel_running))
                .route("/pause", post(actions::pause))
                .route("/resume", post(actions::resume))
                .route("/dead/requeue", post(actions::requeue))
                .route("/dead/delete", post(actions::delete))
                .route("/dead/requeue-all", post(actions::requeue_all))
        };
        Router::new()
            .route("/", get(index))
            .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
            .route("/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }))
            .route("/api/info", get(info))
            .route("/api/overview", get(overview))
            .nest("/api/w/{wheel}", one_wheel())
            .nest("/api", one_wheel())
            .layer(axum::middleware::map_response(secure))
            .with_state(Arc::new(self))
    }
}

/// The dashboard as mounted, which every handler reads.
type Mounted = State<Arc<Dashboard>>;

/// The wheel a request names (`api/w/{wheel}/..`), or the first (`api/..`); a `404` for a name
/// the dashboard was not given.
struct ShownWheel {
    timers: DurableScheduler,
    actions: bool,
}

impl FromRequestParts<Arc<Dashboard>> for ShownWheel {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, d: &Arc<Dashboard>) -> Result<Self, Response> {
        let params = RawPathParams::from_request_parts(parts, d).await.ok();
        let named = params.as_ref().and_then(|p| p.iter().find(|(name, _)| *name == "wheel").map(|(_, v)| v));
        let found = match named {
            Some(name) => d.wheels.iter().find(|(shown, _)| shown == name),
            None => d.wheels.first(),
        };
        match found {
            Some((_, timers)) => Ok(ShownWheel { timers: timers.clone(), actions: d.actions }),
            None => {
                let why = format!("no wheel named {:?} on this dashboard", named.unwrap_or_default());
                Err((StatusCode::NOT_FOUND, Json(json!({ "error": why }))).into_response())
            }
        }
    }
}

/// Headers every answer carries: the policy that keeps the page to its own files, and no
/// caching (the figures change every moment).
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The page, with its base set to where the router is mounted, so that its relative paths
/// (`app.js`, `api/stats`) resolve there whether or not the address ends in `/`.
async fn index(OriginalUri(uri): OriginalUri) -> Response {
    let mut base = html_escape(uri.path());
    if !base.ends_with('/') {
        base.push('/');
    }
    let page = INDEX_HTML.replacen(r#"<base href="/">"#, &format!(r#"<base href="{base}">"#), 1);
    ([(CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
}

/// `text` safe in an HTML attribute.
fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(CONTENT_TYPE, content_type)], body).into_response()
}

/// The JSON of a section, or the Redis error as `503` (retryable) or `500`.
fn answer(result: Result<Value, Error>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(e) => failed(&e),
    }
}

fn failed(e: &Error) -> Response {
    let status = if e.is_retryable() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::INTERNAL_SERVER_ERROR };
    (status, Json(json!({ "error": e.to_string() }))).into_response()
}

fn bad_request(why: &str) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "error": why }))).into_response()
}

type Params = Query<HashMap<String, String>>;

async fn info(State(d): Mounted) -> Response {
    let names: Vec<&str> = d.wheels.iter().map(|(name, _)| name.as_str()).collect();
    Json(json!({
        "wheels": names,
        "wheel": names.first(),
        "actions": d.actions,
        "delete": d.actions,
        "refresh_ms": REFRESH_MS,
        "dead_letters_shown": OVERVIEW_DEAD_LETTERS,
        "page_size": PAGE_SIZE,
        "page_max": PAGE_MAX,
        "bulk_max": BULK_MAX,
    }))
    .into_response()
}

async fn overview(State(d): Mounted) -> Response {
    Json(sections::overview(&d.wheels).await).into_response()
}

async fn stats(w: ShownWheel) -> Response {
    answer(w.timers.stats().await.map(|stats| json!(stats)))
}

async fn limits(w: ShownWheel) -> Response {
    answer(sections::limits(&w.timers).await)
}

async fn lateness(w: ShownWheel) -> Response {
    Json(sections::lateness(&w.timers)).into_response()
}

async fn figures(w: ShownWheel) -> Response {
    answer(sections::figures(&w.timers).await)
}

/// `n` from `limit=n`, `default` without it, or the `400` to answer.
fn limit(
    query: &HashMap<String, String>,
    default: usize,
    max: usize,
    least: usize,
) -> Result<usize, (StatusCode, Json<Value>)> {
    match query.get("limit").map(|l| l.parse::<usize>()) {
        None => Ok(default),
        Some(Ok(limit)) if (least..=max).contains(&limit) => Ok(limit),
        Some(_) => Err((
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": format!("limit must be a number from {least} to {max}") })),
        )),
    }
}

async fn tasks(w: ShownWheel, Query(query): Params) -> Response {
    let Some(state) = query.get("state").and_then(|s| s.parse::<TaskState>().ok()) else {
        return bad_request("state must be waiting, ready, running, dead or finished");
    };
    let limit = match limit(&query, PAGE_SIZE, PAGE_MAX, 1) {
        Ok(limit) => limit,
        Err(refused) => return refused.into_response(),
    };
    let after = match query.get("after").filter(|a| !a.is_empty()).map(|a| sections::decode_cursor(a)) {
        None => None,
        Some(Some(cursor)) if cursor.state() == state => Some(cursor),
        Some(_) => return bad_request("after must be the `next` of a page of the same state"),
    };
    answer(sections::tasks(&w.timers, state, after.as_ref(), limit).await)
}

async fn dead_letters(w: ShownWheel, Query(query): Params) -> Response {
    match limit(&query, DEAD_LETTERS_SHOWN, DEAD_LETTERS_MAX, 0) {
        Ok(limit) => answer(sections::dead_letters(&w.timers, limit).await),
        Err(refused) => refused.into_response(),
    }
}

async fn find_task(w: ShownWheel, Query(query): Params) -> Response {
    match query.get("key").filter(|k| !k.is_empty()) {
        Some(key) => answer(sections::find_task(&w.timers, key).await),
        None => bad_request("give the key to look for: api/task?key=..."),
    }
}

async fn payload(w: ShownWheel, Query(query): Params) -> Response {
    match query.get("key").filter(|k| !k.is_empty()) {
        Some(key) => answer(sections::payload(&w.timers, key).await),
        None => bad_request("give the task's key: api/payload?key=..."),
    }
}

async fn due_plot(w: ShownWheel) -> Response {
    answer(sections::due_plot(&w.timers).await)
}

async fn nodes(w: ShownWheel) -> Response {
    answer(sections::leader_and_workers(&w.timers).await)
}
