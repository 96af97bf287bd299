//! A web page of a durable wheel (feature `dashboard`), as an [axum](https://docs.rs/axum)
//! router to mount in the application's own server.
//!
//! The page refreshes itself every 1.5 s and shows: the counts by state and the counters
//! ([`DurableScheduler::stats`]); how late this process's workers claimed their deliveries
//! ([`DurableScheduler::lateness`]), as a histogram; the dead letters with their last error; a
//! search by key; what falls due over the next hour; the leader and the workers. Everything it
//! needs (its HTML, script, styles and plots) is in the crate: it fetches nothing from anywhere
//! else, so it works where the network is closed, and its `Content-Security-Policy` allows
//! nothing else.
//!
//! It is read-only unless the mounting code enables the actions ([`Dashboard::actions`]): then
//! each dead letter has a button that puts it back ([`DurableScheduler::requeue_dead`]).
//!
//! # Examples
//! ```no_run
//! use tokio_timewheel::durable::{dashboard, DurableScheduler};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let timers = DurableScheduler::builder("redis://127.0.0.1:6379/", "orders").connect().await?;
//! // Read-only, under /timers of the application's router (axum serves the page at /timers):
//! let app: axum::Router = axum::Router::new().nest("/timers", dashboard::router(timers.clone()));
//! // Or with the actions, for operators:
//! let ops: axum::Router = dashboard::Dashboard::new(timers).actions(true).router();
//! # let _ = (app, ops);
//! # Ok(()) }
//! ```
//! Serve it with `axum::serve` (axum's `tokio` and `http1` features), behind the application's
//! own authentication: the dashboard has none of its own, and shows keys and error texts.
//!
//! # What it answers
//! Paths are relative to where it is mounted; every answer is JSON but the page's own files.
//!
//! | method and path | answer |
//! |---|---|
//! | `GET /` | the page (also `app.js`, `style.css`) |
//! | `GET api/info` | the wheel's name, whether the actions are on |
//! | `GET api/stats` | the counts by state and the counters |
//! | `GET api/lateness` | p50, p99, max and the histogram of how late deliveries were claimed |
//! | `GET api/dead?limit=n` | the oldest `n` dead letters (default 50, at most 500): key, attempts, last error, when it died |
//! | `GET api/task?key=k` | the task under `k`, pending or dead: its state, due time, deliveries, payload size and last error |
//! | `GET api/due` | what falls due over the next hour, a count a minute |
//! | `GET api/nodes` | the node that leads each partition, and the workers heard from |
//! | `POST api/dead/requeue` | `{"key": k}`: puts the dead letter back; 404 if there is none, 409 if a task under `k` is pending |
//! | `POST api/dead/delete` | `{"key": k}`: deletes the dead letter; 404 if there is none |
//!
//! A failed Redis call answers `503` when it is worth trying again (the page does, at its next
//! refresh) and `500` otherwise, with `{"error": "..."}`.
//!
//! # Actions and cross-site requests
//! A `POST` is refused with `403` when the actions are off, and also unless it carries the header
//! `X-Timewheel-Action` (any value) and comes from the dashboard's own page: its
//! `Sec-Fetch-Site` is `same-origin`, or, from a client that does not send that header, its
//! `Origin` names the request's `Host`. A page on another site cannot send such a request
//! through a visitor's browser (a form cannot set the header; a script that tries is stopped by
//! the browser, which asks this server first and is never told yes). A script outside a browser
//! sends both headers itself:
//! `curl -H 'X-Timewheel-Action: 1' -H 'Origin: http://127.0.0.1:8080' -H 'Content-Type: application/json' -d '{"key":"k"}' http://127.0.0.1:8080/api/dead/requeue`.

mod guard;
mod sections;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{OriginalUri, Query, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::DurableScheduler;
use crate::Error;

/// The page, its script and its styles, in the crate.
const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// Nothing but the page's own files and calls: no other site, no inline script, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'self'; form-action 'none'; frame-ancestors 'none'";

/// How many dead letters the page lists, unless it asks for another number.
const DEAD_LETTERS_SHOWN: usize = 50;
/// The most dead letters one `api/dead` call lists.
const DEAD_LETTERS_MAX: usize = 500;
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

/// The dashboard's settings: which wheel, and whether the page may act on it. Made by
/// [`Dashboard::new`], turned into a router by [`router`](Self::router).
///
/// # Examples
/// ```no_run
/// # use tokio_timewheel::durable::{dashboard::Dashboard, DurableScheduler};
/// # fn run(timers: DurableScheduler) {
/// let ops = Dashboard::new(timers).actions(true).router();
/// # let _ = ops;
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a Dashboard does nothing until turned into a router with .router()"]
pub struct Dashboard {
    timers: DurableScheduler,
    actions: bool,
}

impl Dashboard {
    /// The read-only dashboard of `timers`.
    pub fn new(timers: DurableScheduler) -> Self {
        Dashboard { timers, actions: false }
    }

    /// Lets the page act on the wheel: requeue a dead letter (off by default). Each action is a
    /// `POST` guarded against cross-site requests (see the [module docs](self)); mount a
    /// dashboard with actions behind the application's authentication.
    pub fn actions(mut self, enabled: bool) -> Self {
        self.actions = enabled;
        self
    }

    /// The router that serves the page and its JSON, to mount where the application likes
    /// (`Router::nest`), or serve as it is.
    pub fn router(self) -> Router {
        Router::new()
            .route("/", get(index))
            .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
            .route("/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }))
            .route("/api/info", get(info))
            .route("/api/stats", get(stats))
            .route("/api/lateness", get(lateness))
            .route("/api/dead", get(dead_letters))
            .route("/api/task", get(find_task))
            .route("/api/due", get(due_plot))
            .route("/api/nodes", get(nodes))
            .route("/api/dead/requeue", post(requeue))
            .route("/api/dead/delete", post(delete_dead))
            .layer(axum::middleware::map_response(secure))
            .with_state(Arc::new(self))
    }
}

/// The dashboard as mounted, which every handler reads.
type Mounted = State<Arc<Dashboard>>;

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

async fn info(State(d): Mounted) -> Response {
    Json(json!({
        "wheel": d.timers.wheel.name(),
        "actions": d.actions,
        "delete": d.actions,
        "refresh_ms": REFRESH_MS,
        "dead_letters_shown": DEAD_LETTERS_SHOWN,
    }))
    .into_response()
}

async fn stats(State(d): Mounted) -> Response {
    answer(sections::counts(&d.timers).await)
}

async fn lateness(State(d): Mounted) -> Response {
    Json(sections::lateness(&d.timers)).into_response()
}

async fn dead_letters(State(d): Mounted, Query(query): Query<HashMap<String, String>>) -> Response {
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None => DEAD_LETTERS_SHOWN,
        Some(Ok(limit)) if limit <= DEAD_LETTERS_MAX => limit,
        Some(_) => return bad_request(&format!("limit must be a number from 0 to {DEAD_LETTERS_MAX}")),
    };
    answer(sections::dead_letters(&d.timers, limit).await)
}

async fn find_task(State(d): Mounted, Query(query): Query<HashMap<String, String>>) -> Response {
    match query.get("key").filter(|k| !k.is_empty()) {
        Some(key) => answer(sections::find_task(&d.timers, key).await),
        None => bad_request("give the key to look for: api/task?key=..."),
    }
}

async fn due_plot(State(d): Mounted) -> Response {
    answer(sections::due_plot(&d.timers).await)
}

async fn nodes(State(d): Mounted) -> Response {
    answer(sections::leader_and_workers(&d.timers).await)
}

async fn requeue(State(d): Mounted, headers: HeaderMap, body: Bytes) -> Response {
    match action_key(&d, &headers, &body) {
        Ok(key) => acted(sections::requeue(&d.timers, &key).await),
        Err(refused) => refused.into_response(),
    }
}

async fn delete_dead(State(d): Mounted, headers: HeaderMap, body: Bytes) -> Response {
    match action_key(&d, &headers, &body) {
        Ok(key) => acted(sections::delete_dead_letter(&d.timers, &key).await),
        Err(refused) => refused.into_response(),
    }
}

fn acted(result: Result<sections::Done, Error>) -> Response {
    match result {
        Ok((status, body)) => (status, Json(body)).into_response(),
        Err(e) => failed(&e),
    }
}

/// Checks an action (enabled, from the dashboard's own page, with a JSON body) and reads the
/// key it names: the answer to send back otherwise.
fn action_key(d: &Dashboard, headers: &HeaderMap, body: &[u8]) -> Result<String, (StatusCode, Json<Value>)> {
    let refuse = |status, why: &str| (status, Json(json!({ "error": why })));
    if !d.actions {
        let why = "the dashboard is read-only: the mounting code enables actions with Dashboard::actions";
        return Err(refuse(StatusCode::FORBIDDEN, why));
    }
    if let Some(why) = guard::refuse_cross_site(headers) {
        return Err(refuse(StatusCode::FORBIDDEN, why));
    }
    let json_body = headers
        .get(CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json")));
    let send_json = "send the key as JSON: Content-Type: application/json, {\"key\": \"...\"}";
    if !json_body {
        return Err(refuse(StatusCode::UNSUPPORTED_MEDIA_TYPE, send_json));
    }
    match serde_json::from_slice::<Value>(body).ok().as_ref().and_then(|v| v.get("key")).and_then(Value::as_str) {
        Some(key) if !key.is_empty() => Ok(key.to_owned()),
        _ => Err(refuse(StatusCode::BAD_REQUEST, send_json)),
    }
}
