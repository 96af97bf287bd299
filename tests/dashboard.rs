//! The dashboard's router, driven in memory (no browser, no socket) against a wheel on the store
//! the run selects (`support/store.rs`: a real `redis-server`, or with
//! `TIMEWHEEL_TEST_STORE=sqlite` a SQLite file of the embedded store): the page and its files,
//! each JSON section against the wheel's own calls, and the guard of the actions.
//!
//! Run with `cargo test --features dashboard --test dashboard` (on Redis), or with
//! `TIMEWHEEL_TEST_STORE=sqlite` and the `sqlite` feature. Without a `redis-server` the tests on
//! Redis print a skip note and pass, except under `CI=true`, where they fail.

mod support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use serde_json::Value;
use support::TestStore;
use tokio_timewheel::durable::dashboard::{self, Dashboard};
use tokio_timewheel::durable::{DurableScheduler, Task};
use tower::ServiceExt;

/// A wheel with three tasks waiting an hour out and two dead letters (`dead-0`, `dead-1`), its
/// worker stopped, so that nothing moves while a test reads it.
async fn wheel(store: &TestStore) -> DurableScheduler {
    let timers = DurableScheduler::builder(store.url(), "dash")
        .tick(Duration::from_millis(50))
        .max_attempts(1)
        .connect()
        .await
        .expect("connect");
    for i in 0..3 {
        timers.schedule(format!("later-{i}"), Duration::from_secs(3600), Vec::new()).await.expect("schedule");
    }
    for i in 0..2 {
        timers.schedule(format!("dead-{i}"), Duration::ZERO, Vec::new()).await.expect("schedule");
    }
    let worker = timers.run(|task: Task| async move { Err(format!("{} is broken <b>here</b>", task.key())) });
    let probe = timers.clone();
    let mut dead = 0;
    for _ in 0..500 {
        dead = probe.stats().await.expect("stats").dead;
        if dead == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(dead, 2, "both failing tasks died");
    worker.shutdown().await;
    timers
}

/// Milliseconds since the Unix epoch.
fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

async fn send(router: &Router, request: Request<Body>) -> Reply {
    let response = router.clone().oneshot(request).await.expect("the router answers");
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
    Reply { status, headers, body: String::from_utf8(body.to_vec()).expect("UTF-8") }
}

async fn get(router: &Router, path: &str) -> Reply {
    send(router, Request::get(path).body(Body::empty()).unwrap()).await
}

/// A POST of `{"key": key}` to `path` with `headers`.
async fn post(router: &Router, path: &str, key: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = Request::post(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = serde_json::json!({ "key": key }).to_string();
    send(router, request.body(Body::from(body)).unwrap()).await
}

/// What the dashboard's own page sends with an action.
const SAME_ORIGIN: &[(&str, &str)] =
    &[("content-type", "application/json"), ("x-timewheel-action", "1"), ("sec-fetch-site", "same-origin")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_files_come_from_the_router_with_a_strict_policy() {
    let Some(store) = TestStore::start() else { return };
    let timers = wheel(&store).await;
    let page = get(&dashboard::router(timers.clone()), "/").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.headers["content-type"].to_str().unwrap().starts_with("text/html"));
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"), "{csp}");
    assert!(page.body.contains(r#"<base href="/">"#), "{}", page.body);
    assert!(!page.body.contains("http://") && !page.body.contains("https://"), "the page names no other site");

    // Mounted under a prefix, the page's paths resolve there: with mount, at the prefix with
    // and without the final slash; with axum's nest, without it (axum routes nothing to a
    // nested router at the prefix and a slash).
    let app = dashboard::mount(Router::new(), "/ops/timers", dashboard::router(timers.clone()));
    for path in ["/ops/timers", "/ops/timers/"] {
        let page = get(&app, path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert!(page.body.contains(r#"<base href="/ops/timers/">"#), "{path}: {}", page.body);
    }
    assert_eq!(get(&app, "/ops/timers/api/info").await.json()["wheel"], "dash");
    let nested = Router::new().nest("/admin/timers", dashboard::router(timers.clone()));
    let page = get(&nested, "/admin/timers").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains(r#"<base href="/admin/timers/">"#), "{}", page.body);
    // A trailing slash in mount's path is the same mount.
    let app = dashboard::mount(Router::new(), "/ops/timers/", dashboard::router(timers));
    assert_eq!(get(&app, "/ops/timers/").await.status, StatusCode::OK);
    assert_eq!(get(&app, "/ops/timers").await.status, StatusCode::OK);
    for (path, kind) in [("/ops/timers/app.js", "text/javascript"), ("/ops/timers/style.css", "text/css")] {
        let file = get(&app, path).await;
        assert_eq!(file.status, StatusCode::OK, "{path}");
        assert!(file.headers["content-type"].to_str().unwrap().starts_with(kind), "{path}");
        // The SVG namespace is a name, not an address: nothing else names another site.
        let rest = file.body.replace("http://www.w3.org/2000/svg", "");
        assert!(!rest.contains("http://") && !rest.contains("https://"), "{path} fetches nothing outside");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_section_answers_what_the_wheel_says() {
    let Some(store) = TestStore::start() else { return };
    let timers = wheel(&store).await;
    let router = dashboard::router(timers.clone());

    let info = get(&router, "/api/info").await.json();
    assert_eq!(info["wheel"], "dash");
    assert_eq!(info["actions"], false);

    let stats = timers.stats().await.unwrap();
    let shown = get(&router, "/api/stats").await.json();
    for (field, value) in [
        ("waiting", stats.waiting as u64),
        ("ready", stats.ready as u64),
        ("running", stats.in_flight as u64),
        ("dead", stats.dead as u64),
        ("pending", stats.pending as u64),
        ("scheduled", stats.scheduled),
        ("handed_out", stats.handed_out),
        ("acked", stats.acked),
        ("retried", stats.retried),
        ("dead_lettered", stats.dead_lettered),
        ("cancelled", stats.cancelled),
    ] {
        assert_eq!(shown[field].as_u64(), Some(value), "{field} in {shown}");
    }
    // The stats' own JSON, every field of it (the cursor lag grows while no leader ticks).
    let mut want = serde_json::to_value(stats).unwrap();
    want["cursor_lag_ticks"] = shown["cursor_lag_ticks"].clone();
    assert_eq!(shown, want, "api/stats is DurableStats' JSON");
    assert_eq!((stats.waiting, stats.dead), (3, 2));
    assert_eq!(shown["paused"], false, "{shown}");
    timers.pause().await.unwrap();
    assert_eq!(get(&router, "/api/stats").await.json()["paused"], true, "a paused wheel says so");
    timers.resume().await.unwrap();

    let dead = get(&router, "/api/dead").await.json();
    let letters = dead["letters"].as_array().unwrap();
    assert_eq!(letters.len(), 2, "{dead}");
    let letter = letters.iter().find(|l| l["key"] == "dead-0").expect("dead-0 is listed");
    assert_eq!(letter["last_error"], "dead-0 is broken <b>here</b>", "the error text as it was");
    assert_eq!(letter["attempts"], 1);
    let died = timers.dead_letters(10).await.unwrap().into_iter().find(|d| d.key() == "dead-0").unwrap().died();
    assert_eq!(letter["died_unix_ms"].as_u64(), Some(unix_ms(died)), "{letter}");
    assert!(letter.get("payload").is_none() && letter["payload_bytes"] == 0, "payloads left out: {letter}");
    assert_eq!(get(&router, "/api/dead?limit=1").await.json()["letters"].as_array().unwrap().len(), 1);

    let late = get(&router, "/api/lateness").await.json();
    assert_eq!(late["count"], 2, "the two deliveries this process's worker claimed: {late}");
    // What any caller reads from the public call, and nothing more; read back from its JSON text
    // as the answer was (serde_json parses a float to within a unit of its last place, so 10.239
    // can come back from "10.238999999999999").
    let public = timers.lateness();
    let ms = |d: Duration| serde_json::json!(d.as_secs_f64() * 1e3);
    let expected = serde_json::json!({
        "count": public.count, "p50_ms": ms(public.p50), "p99_ms": ms(public.p99), "max_ms": ms(public.max),
        "window_s": tokio_timewheel::LATENESS_WINDOW.as_secs(),
    });
    let expected: Value = serde_json::from_str(&expected.to_string()).unwrap();
    assert_eq!(late, expected, "the answer is DurableScheduler::lateness's");

    // Every node's figures of the last hour: the two deliveries handed out and failed.
    let figures = get(&router, "/api/figures").await.json();
    let minutes = figures["minutes"].as_array().unwrap();
    assert_eq!(minutes.len(), 60, "{figures}");
    let sum = |field: &str| minutes.iter().map(|m| m[field].as_u64().unwrap()).sum::<u64>();
    assert_eq!((sum("handed_out"), sum("acked"), sum("failed"), sum("dead")), (2, 0, 2, 2), "{figures}");
    assert!(minutes.windows(2).all(|m| m[1]["start_unix_ms"].as_u64() > m[0]["start_unix_ms"].as_u64()));
    let lateness = &figures["lateness"];
    let buckets: u64 = lateness["buckets"].as_array().unwrap().iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!((buckets, lateness["claimed"].as_u64()), (2, Some(2)), "{figures}");
    assert!(lateness["p99_below_ms"].is_number(), "{figures}");

    let later = get(&router, "/api/task?key=later-1").await.json();
    assert_eq!(later["pending"], true);
    assert_eq!(later["detail"]["state"], "waiting", "{later}");
    assert_eq!(later["detail"]["attempt"], 0, "{later}");
    assert_eq!(later["detail"]["overdue_ms"], serde_json::Value::Null, "not yet due: {later}");
    let due_ms = later["detail"]["due_unix_ms"].as_u64().unwrap();
    let want = timers.deadline("later-1").await.unwrap().unwrap();
    assert_eq!(due_ms as u128, want.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis());
    let nobody = get(&router, "/api/task?key=nobody").await.json();
    assert_eq!((&nobody["pending"], &nobody["detail"]), (&serde_json::json!(false), &serde_json::Value::Null));
    let dead = get(&router, "/api/task?key=dead-0").await.json();
    assert_eq!(dead["pending"], false);
    assert_eq!(dead["detail"]["state"], "dead", "{dead}");
    assert_eq!(dead["detail"]["last_error"], "dead-0 is broken <b>here</b>", "{dead}");
    // The task's own JSON, its payload left out.
    let mut want = serde_json::to_value(timers.get("dead-0").await.unwrap().unwrap()).unwrap();
    want.as_object_mut().unwrap().remove("payload");
    assert_eq!(dead["detail"], want);
    // Keys are any text: one with spaces and symbols, percent-encoded.
    timers.schedule("a key/with ?&=#", Duration::from_secs(60), Vec::new()).await.unwrap();
    assert_eq!(get(&router, "/api/task?key=a%20key%2Fwith%20%3F%26%3D%23").await.json()["pending"], true);

    // What falls due in the next hour, a bar a minute: the three waiting tasks, as due_counts
    // says; and who leads (no worker runs here: nobody).
    let due = get(&router, "/api/due").await.json();
    let counts: Vec<u64> = due["counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    assert_eq!(counts.len(), 60, "{due}");
    assert_eq!(counts.iter().sum::<u64>(), 3 + 1, "the three waiting and the one scheduled above: {due}");
    let nodes = get(&router, "/api/nodes").await.json();
    assert_eq!(nodes["leaders"].as_array().unwrap().len(), 1, "{nodes}");

    // Bad input is a 400 with a reason, never a panic.
    for path in ["/api/task", "/api/task?key=", "/api/dead?limit=x", "/api/dead?limit=501", "/api/dead?limit=-1"] {
        let reply = get(&router, path).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}: {}", reply.body);
        assert!(reply.json()["error"].is_string(), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_show_in_api_limits_and_on_the_page() {
    use tokio_timewheel::durable::Limit;

    let Some(store) = TestStore::start() else { return };
    let timers = wheel(&store).await;
    let emails = second_wheel(&store, 1).await;
    let router = Dashboard::new(timers.clone()).wheel(emails.clone()).actions(true).router();

    // None yet.
    assert_eq!(get(&router, "/api/limits").await.json(), serde_json::json!({ "limits": [] }));

    // Two limits on `dash`, none on `emails`: each wheel's own, in the prefixes' order.
    timers.set_limit("report:", Limit::running(1)).await.unwrap();
    timers.set_limit("api:", Limit::rate(20, Duration::from_secs(1)).and(Limit::running(5))).await.unwrap();
    let want = serde_json::json!({ "limits": [
        { "prefix": "api:", "limit": "20 starts per 1s, 5 running", "rate": 20, "per_ms": 1000, "running": 5 },
        { "prefix": "report:", "limit": "1 running", "rate": null, "per_ms": null, "running": 1 },
    ] });
    for path in ["/api/limits", "/api/w/dash/limits"] {
        let reply = get(&router, path).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.body);
        assert_eq!(reply.json(), want, "{path}");
    }
    // What the library lists, as its Display says it.
    let listed = timers.limits().await.unwrap();
    let shown = get(&router, "/api/limits").await.json();
    for ((prefix, limit), row) in listed.iter().zip(shown["limits"].as_array().unwrap()) {
        assert_eq!((row["prefix"].as_str(), row["limit"].as_str()), (Some(prefix.as_str()), Some(&*limit.to_string())));
    }
    assert_eq!(get(&router, "/api/w/emails/limits").await.json(), serde_json::json!({ "limits": [] }));
    assert_eq!(get(&router, "/api/w/nobody/limits").await.status, StatusCode::NOT_FOUND);
    // The stats stay DurableStats' own JSON.
    assert!(get(&router, "/api/stats").await.json().get("limits").is_none());

    // A limit replaced, then one cleared.
    timers.set_limit("api:", Limit::rate(3, Duration::from_millis(1500))).await.unwrap();
    timers.clear_limit("report:").await.unwrap();
    assert_eq!(
        get(&router, "/api/limits").await.json(),
        serde_json::json!({ "limits": [
            { "prefix": "api:", "limit": "3 starts per 1.5s", "rate": 3, "per_ms": 1500, "running": null },
        ] })
    );

    // Read-only, even with the actions on: nothing sets or clears a limit.
    let reply = post(&router, "/api/w/dash/limits", "api:", SAME_ORIGIN).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{}", reply.body);
    assert_eq!(timers.limits().await.unwrap().len(), 1);

    // The page has the section, beside the counts, and its script reads it every refresh.
    let page = get(&router, "/").await;
    assert!(page.body.contains(r#"<h3 id="limits-title">Limits</h3>"#), "{}", page.body);
    assert!(page.body.contains(r#"<dl id="limits""#) && page.body.contains(r#"id="limits-none""#), "{}", page.body);
    let script = get(&router, "/app.js").await;
    assert!(script.body.contains(r#"getJson(api("limits"))"#) && script.body.contains("function showLimits"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_to_be_enabled_and_to_come_from_the_page() {
    let Some(store) = TestStore::start() else { return };
    let timers = wheel(&store).await;
    let still_dead = || async {
        let dead = timers.dead_letters(10).await.unwrap();
        dead.iter().any(|d| d.key() == "dead-0")
    };

    let read_only = dashboard::router(timers.clone());
    let reply = post(&read_only, "/api/dead/requeue", "dead-0", SAME_ORIGIN).await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "{}", reply.body);
    assert!(still_dead().await);

    let router = Dashboard::new(timers.clone()).actions(true).router();
    assert_eq!(get(&router, "/api/info").await.json()["actions"], true);
    let json = ("content-type", "application/json");
    let refused: &[(&[(&str, &str)], StatusCode)] = &[
        // A form or a no-cors fetch from another site: no custom header.
        (&[json, ("sec-fetch-site", "same-origin")], StatusCode::FORBIDDEN),
        (
            &[("content-type", "text/plain"), ("origin", "http://evil.example"), ("host", "127.0.0.1")],
            StatusCode::FORBIDDEN,
        ),
        // With the header, but not from the page.
        (&[json, ("x-timewheel-action", "1"), ("sec-fetch-site", "cross-site")], StatusCode::FORBIDDEN),
        (
            &[json, ("x-timewheel-action", "1"), ("origin", "http://evil.example"), ("host", "127.0.0.1:9")],
            StatusCode::FORBIDDEN,
        ),
        (&[json, ("x-timewheel-action", "1")], StatusCode::FORBIDDEN),
        // From the page, but not JSON.
        (&[("x-timewheel-action", "1"), ("sec-fetch-site", "same-origin")], StatusCode::UNSUPPORTED_MEDIA_TYPE),
    ];
    for (headers, status) in refused {
        let reply = post(&router, "/api/dead/requeue", "dead-0", headers).await;
        assert_eq!(reply.status, *status, "{headers:?}: {}", reply.body);
        assert!(still_dead().await, "{headers:?} requeued it");
    }
    let reply = send(
        &router,
        Request::post("/api/dead/requeue")
            .header("content-type", "application/json")
            .header("x-timewheel-action", "1")
            .header("sec-fetch-site", "same-origin")
            .body(Body::from("{not json"))
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);

    // From the page: requeued, due at once (no worker runs, so it stays ready).
    let reply = post(&router, "/api/dead/requeue", "dead-0", SAME_ORIGIN).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json()["requeued"], true);
    assert!(!still_dead().await);
    assert!(timers.contains("dead-0").await.unwrap());
    // A client outside a browser that names its origin is let through too.
    let origin = [json, ("x-timewheel-action", "1"), ("origin", "http://127.0.0.1:8080"), ("host", "127.0.0.1:8080")];
    let reply = post(&router, "/api/dead/requeue", "dead-0", &origin).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "no dead letter left under the key: {}", reply.body);
    let reply = post(&router, "/api/dead/requeue", "dead-1", &origin).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);

    // Deleting: refused from elsewhere, done from the page, and a second time finds nothing.
    assert_eq!(get(&router, "/api/info").await.json()["delete"], true);
    timers.schedule_at("doomed", std::time::UNIX_EPOCH, Vec::new()).await.unwrap();
    let fail = timers.run(|_: tokio_timewheel::durable::Task| async { Err::<(), _>(std::io::Error::other("no")) });
    for _ in 0..200 {
        if timers.get("doomed").await.unwrap().is_some_and(|t| t.state() == tokio_timewheel::durable::TaskState::Dead) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fail.shutdown().await;
    let cross = [json, ("origin", "http://evil.example"), ("host", "127.0.0.1")];
    assert_eq!(post(&router, "/api/dead/delete", "doomed", &cross).await.status, StatusCode::FORBIDDEN);
    let reply = post(&router, "/api/dead/delete", "doomed", SAME_ORIGIN).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(timers.get("doomed").await.unwrap(), None, "the dead letter is still there");
    let reply = post(&router, "/api/dead/delete", "doomed", SAME_ORIGIN).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.body);
}

/// A second wheel on the same store: `n` tasks waiting, under `wait-0000` ...
async fn second_wheel(store: &TestStore, n: usize) -> DurableScheduler {
    let timers = DurableScheduler::builder(store.url(), "emails")
        .tick(Duration::from_millis(50))
        .connect()
        .await
        .expect("connect");
    let tasks = (0..n).map(|i| (format!("wait-{i:04}"), Duration::from_secs(600 + (i as u64 % 7)), Vec::new()));
    for r in timers.schedule_many(tasks).await.expect("schedule_many") {
        r.expect("scheduled");
    }
    timers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_wheels_each_paged_by_state() {
    let Some(store) = TestStore::start() else { return };
    let dash = wheel(&store).await;
    let emails = second_wheel(&store, 130).await;
    let router = Dashboard::new(dash.clone()).wheel(emails.clone()).router();

    let info = get(&router, "/api/info").await.json();
    assert_eq!(info["wheels"], serde_json::json!(["dash", "emails"]));
    let overview = get(&router, "/api/overview").await.json();
    let wheels = overview["wheels"].as_array().unwrap();
    assert_eq!(
        (wheels[0]["wheel"].as_str(), wheels[0]["waiting"].as_u64(), wheels[0]["dead"].as_u64()),
        (Some("dash"), Some(3), Some(2))
    );
    assert_eq!(
        (wheels[1]["wheel"].as_str(), wheels[1]["waiting"].as_u64(), wheels[1]["paused"].as_bool()),
        (Some("emails"), Some(130), Some(false))
    );
    assert_eq!(wheels[0]["cancelled"], 0, "each wheel's stats, all of them: {overview}");
    assert_eq!(get(&router, "/api/w/emails/stats").await.json()["waiting"], 130);
    assert_eq!(get(&router, "/api/stats").await.json()["waiting"], 3, "api/.. is the first wheel");
    let unknown = get(&router, "/api/w/nowhere/stats").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND, "{}", unknown.body);

    // The waiting tasks, 50 a page: each key once, in list's order, and the cursor opaque.
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let page = get(&router, &format!("/api/w/emails/tasks?state=waiting&limit=50&after={after}")).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let page = page.json();
        seen.extend(page["tasks"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => {
                assert!(next.bytes().all(|b| b.is_ascii_hexdigit()), "{next}");
                after = next.to_owned();
            }
            None => break,
        }
        assert!(seen.len() <= 130, "paging goes on past the end");
    }
    let mut want: Vec<String> = (0..130).map(|i| format!("wait-{i:04}")).collect();
    let mut sorted = seen.clone();
    sorted.sort();
    want.sort();
    assert_eq!(sorted, want, "each waiting key once");
    let listed: Vec<String> = emails
        .list(tokio_timewheel::durable::TaskState::Waiting, None, 130)
        .await
        .unwrap()
        .tasks()
        .iter()
        .map(|t| t.key().to_owned())
        .collect();
    assert_eq!(seen, listed, "in list's order");

    // The dead letters of the first wheel, with their error; a state's page does not take
    // another state's cursor.
    let dead = get(&router, "/api/w/dash/tasks?state=dead").await.json();
    let rows = dead["tasks"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{dead}");
    let row = rows.iter().find(|r| r["key"] == "dead-0").expect("dead-0 is listed");
    assert_eq!(row["last_error"], "dead-0 is broken <b>here</b>");

    // The finished runs of the first wheel, from its history, newest first, a page of one at a
    // time: the two that died, each with its outcome, attempts, handler time and end.
    let (mut finished, mut after_run) = (Vec::new(), String::new());
    loop {
        let page = get(&router, &format!("/api/w/dash/tasks?state=finished&limit=1&after={after_run}")).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let page = page.json();
        assert_eq!(page["state"], "finished");
        finished.extend(page["tasks"].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(next) => after_run = next.to_owned(),
            None => break,
        }
        assert!(finished.len() <= 2, "paging goes on past the end: {finished:?}");
    }
    let mut keys: Vec<&str> = finished.iter().map(|r| r["key"].as_str().unwrap()).collect();
    keys.sort();
    assert_eq!(keys, ["dead-0", "dead-1"], "{finished:?}");
    let end = |row: &Value| row["finished"]["finished_unix_ms"].as_u64();
    assert!(end(&finished[0]) >= end(&finished[1]), "newest first");
    for row in &finished {
        let run = &row["finished"];
        assert_eq!((run["outcome"].as_str(), row["attempt"].as_u64()), (Some("dead"), Some(1)), "{row}");
        assert_eq!(row["last_error"], format!("{} is broken <b>here</b>", row["key"].as_str().unwrap()));
        assert!(run["started_unix_ms"].as_u64().is_some() && run["handler_ms"].as_f64().is_some(), "{row}");
    }
    let waiting = get(&router, "/api/w/dash/tasks?state=waiting").await.json();
    assert!(waiting["tasks"].as_array().unwrap().iter().all(|t| t["finished"].is_null()), "{waiting}");
    for path in [
        "/api/w/dash/tasks",
        "/api/w/dash/tasks?state=gone",
        &format!("/api/w/dash/tasks?state=dead&after={after_run}"),
        "/api/w/dash/tasks?state=dead&limit=0",
        "/api/w/dash/tasks?state=dead&limit=201",
        "/api/w/dash/tasks?state=dead&after=zz",
        &format!("/api/w/emails/tasks?state=dead&after={after}"),
    ] {
        let reply = get(&router, path).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{path}: {}", reply.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_shows_as_json_text_or_hex() {
    let Some(store) = TestStore::start() else { return };
    let timers = wheel(&store).await;
    let router = dashboard::router(timers.clone());
    let hour = Duration::from_secs(3600);
    timers.schedule("json", hour, br#"{"order":42,"lines":["a","b"]}"#.to_vec()).await.unwrap();
    timers.schedule("text", hour, b"plain <b>words</b>".to_vec()).await.unwrap();
    timers.schedule("bytes", hour, vec![0, 159, 146, 150]).await.unwrap();
    let json = get(&router, "/api/payload?key=json").await.json();
    assert_eq!((json["payload_encoding"].as_str(), json["state"].as_str()), (Some("json"), Some("waiting")), "{json}");
    assert!(json["shown"].as_str().unwrap().contains("\n  \"order\": 42"), "{json}");
    assert_eq!((json["payload_bytes"].as_u64(), &json["truncated"]), (Some(30), &Value::Bool(false)), "{json}");
    let text = get(&router, "/api/w/dash/payload?key=text").await.json();
    assert_eq!((text["payload_encoding"].as_str(), text["shown"].as_str()), (Some("text"), Some("plain <b>words</b>")));
    let bytes = get(&router, "/api/payload?key=bytes").await.json();
    assert_eq!(bytes["payload_encoding"], "hex", "{bytes}");
    assert!(bytes["shown"].as_str().unwrap().starts_with("00000000  00 9f 92 96"), "{bytes}");
    assert_eq!(get(&router, "/api/payload?key=nobody").await.json()["found"], false);
    assert_eq!(get(&router, "/api/payload").await.status, StatusCode::BAD_REQUEST);
}

/// A run of a series shows its recurrence (cadence, period or expression and zone, end,
/// missed-run policy, runs left, next run) where the page shows a task: the search, the
/// detail, and a page of ready or running tasks; a one-shot task shows none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_series_shows_its_recurrence() {
    use tokio_timewheel::{MissedRuns, Recurrence};

    let Some(store) = TestStore::start() else { return };
    let timers = wheel(&store).await;
    let router = dashboard::router(timers.clone());
    let every = Recurrence::every(Duration::from_secs(20)).limit(5).missed(MissedRuns::Burst);
    timers.schedule_recurring("every", every, Vec::new()).await.unwrap();
    let found = get(&router, "/api/task?key=every").await.json();
    let r = &found["detail"]["recurrence"];
    assert_eq!(r["cadence"], "every 20s", "{found}");
    assert_eq!((r["period_ms"].as_u64(), r["runs_left"].as_u64()), (Some(20_000), Some(5)), "{found}");
    assert_eq!(
        (r["missed"].as_str(), &r["expression"], &r["end_unix_ms"]),
        (Some("burst"), &Value::Null, &Value::Null)
    );
    assert_eq!(r["next_run_unix_ms"], found["detail"]["due_unix_ms"], "a waiting series runs next at its due time");
    assert_eq!(get(&router, "/api/payload?key=every").await.json()["recurrence"], *r);
    assert_eq!(get(&router, "/api/task?key=later-0").await.json()["detail"]["recurrence"], Value::Null);

    // A page of ready tasks: a series whose first run is long past.
    let past = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let overdue = Recurrence::every(Duration::from_secs(60)).starting(past);
    timers.schedule_recurring("overdue", overdue, Vec::new()).await.unwrap();
    let page = get(&router, "/api/tasks?state=ready").await.json();
    let listed = page["tasks"].as_array().unwrap().iter().find(|t| t["key"] == "overdue").expect("listed");
    assert_eq!(listed["recurrence"]["period_ms"], 60_000, "{page}");

    #[cfg(feature = "cron")]
    {
        let nightly = Recurrence::cron("0 3 * * *").unwrap().in_tz("Europe/Berlin").unwrap();
        timers.schedule_recurring("nightly", nightly, Vec::new()).await.unwrap();
        let found = get(&router, "/api/task?key=nightly").await.json();
        let r = &found["detail"]["recurrence"];
        assert_eq!(r["cadence"], "cron \"0 3 * * *\" in Europe/Berlin", "{found}");
        assert_eq!((r["expression"].as_str(), r["zone"].as_str()), (Some("0 3 * * *"), Some("Europe/Berlin")));
        let local = r["next_run_local"].as_str().unwrap();
        assert!(local.contains("T03:00:00.000+01:00 CET") || local.contains("T03:00:00.000+02:00 CEST"), "{local}");
        assert_eq!(
            (r["missed"].as_str(), &r["period_ms"], &r["runs_left"]),
            (Some("skip"), &Value::Null, &Value::Null)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_action_does_what_the_library_call_does() {
    let Some(store) = TestStore::start() else { return };
    let timers = wheel(&store).await;
    let router = Dashboard::new(timers.clone()).actions(true).router();
    let read_only = dashboard::router(timers.clone());
    let w = "/api/w/dash";

    // Run now: due at once, so it is overdue or ready rather than an hour out.
    let reply = post(&router, &format!("{w}/run-now"), "later-0", SAME_ORIGIN).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let due = timers.deadline("later-0").await.unwrap().unwrap();
    assert!(due <= std::time::SystemTime::now() + Duration::from_secs(1), "{due:?}");
    assert_eq!(post(&router, &format!("{w}/run-now"), "nobody", SAME_ORIGIN).await.status, StatusCode::NOT_FOUND);
    // Cancel.
    assert_eq!(post(&router, &format!("{w}/cancel"), "later-1", SAME_ORIGIN).await.status, StatusCode::OK);
    assert!(!timers.contains("later-1").await.unwrap());
    assert_eq!(post(&router, &format!("{w}/cancel"), "later-1", SAME_ORIGIN).await.status, StatusCode::NOT_FOUND);
    // Cancel running: nothing runs here.
    assert_eq!(
        post(&router, &format!("{w}/cancel-running"), "later-2", SAME_ORIGIN).await.status,
        StatusCode::NOT_FOUND
    );
    // Pause and resume, each refused read-only.
    assert_eq!(post(&read_only, &format!("{w}/pause"), "", SAME_ORIGIN).await.status, StatusCode::FORBIDDEN);
    assert_eq!(post(&router, &format!("{w}/pause"), "", SAME_ORIGIN).await.status, StatusCode::OK);
    assert!(timers.is_paused().await.unwrap());
    assert_eq!(get(&router, "/api/overview").await.json()["wheels"][0]["paused"], true);
    assert_eq!(post(&router, &format!("{w}/resume"), "", SAME_ORIGIN).await.status, StatusCode::OK);
    assert!(!timers.is_paused().await.unwrap());

    // Bulk: requeue one of the two dead letters and a missing key, then delete the other.
    let bulk = |path: String, keys: serde_json::Value| {
        let router = router.clone();
        async move {
            let mut request = Request::post(path);
            for (name, value) in SAME_ORIGIN {
                request = request.header(*name, *value);
            }
            send(&router, request.body(Body::from(serde_json::json!({ "keys": keys }).to_string())).unwrap()).await
        }
    };
    let reply = bulk(format!("{w}/dead/requeue"), serde_json::json!(["dead-0", "nobody"])).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json()["requeued"], serde_json::json!(["dead-0"]));
    assert_eq!(reply.json()["missing"], serde_json::json!(["nobody"]));
    let reply = bulk(format!("{w}/dead/delete"), serde_json::json!(["dead-1"])).await;
    assert_eq!(reply.json()["deleted"], serde_json::json!(["dead-1"]), "{}", reply.body);
    assert_eq!(timers.stats().await.unwrap().dead, 0);
    let too_many: Vec<String> = (0..501).map(|i| format!("k{i}")).collect();
    assert_eq!(bulk(format!("{w}/dead/requeue"), serde_json::json!(too_many)).await.status, StatusCode::BAD_REQUEST);
    assert_eq!(bulk(format!("{w}/dead/requeue"), serde_json::json!([])).await.status, StatusCode::BAD_REQUEST);
    let reply = post(&router, &format!("{w}/dead/requeue-all"), "", SAME_ORIGIN).await;
    assert_eq!((reply.status, reply.json()["left"].as_u64()), (StatusCode::OK, Some(0)), "{}", reply.body);
    // Every action is guarded alike.
    let cross = [("content-type", "application/json"), ("x-timewheel-action", "1"), ("sec-fetch-site", "cross-site")];
    for path in
        ["run-now", "cancel", "cancel-running", "pause", "resume", "dead/requeue", "dead/delete", "dead/requeue-all"]
    {
        let reply = post(&router, &format!("{w}/{path}"), "later-2", &cross).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{path}: {}", reply.body);
    }
    assert!(timers.contains("later-2").await.unwrap());
}
