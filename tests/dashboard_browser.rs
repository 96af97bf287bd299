//! The dashboard in a real browser: headless Chromium loads the page of two live wheels and a
//! test checks what a person would see and do. The wheel's worker runs in another OS process
//! (this test binary run again, see `support/node.rs`), and the page is served from handles with
//! no worker, as an admin process would: so the chart of every node's deliveries a minute and
//! the wheel-wide lateness it shows can only come from Redis. The counts shown are `stats()`'s;
//! the tasks view pages through 1,000 waiting tasks and sees each once; a running task shows
//! the worker of the other process; a payload shows as JSON; clicks run a task now, cancel one,
//! stop a running handler (whose run the history then lists as cancelled), pause and resume the
//! wheel, and requeue 50 dead letters at once, each seen through the wheel's own calls. The page is mounted under `/admin/timers` and served with and without the final
//! slash. It saves the screenshots the README shows: `docs/dashboard.png` (the overview),
//! `docs/dashboard-tasks.png` (a page of tasks and a payload), `docs/dashboard-finished.png` (the
//! history of finished runs) and `docs/dashboard-phone.png`.
//!
//! Run with `cargo test --features dashboard --test dashboard_browser`. It needs a
//! `redis-server` and Chromium (Debian's `chromium`); without either it prints a skip note and
//! passes, except under `CI=true`, where it fails.

mod support;

#[path = "support/browser.rs"]
mod browser;

use std::collections::HashSet;
use std::future::Future;
use std::time::{Duration, Instant};

use browser::Chromium;
use serde_json::Value;
use support::node::{self, NodeProcess};
use support::redis_server::RedisServer;
use tokio_timewheel::durable::dashboard::{self, Dashboard};
use tokio_timewheel::durable::{DurableBuilder, DurableScheduler, DurableStats, Outcome, Task, TaskState};

/// How long the page, or the wheel, may take to show what is asked of it: generous, for a
/// loaded machine of two cores.
const SHOWN_WITHIN: Duration = Duration::from_secs(20);
/// How long the node's process may take to start, lead the wheel and handle what is due.
const NODE_SETTLES_WITHIN: Duration = Duration::from_secs(60);

/// The node process's setting: the Redis it works on (`orders`' worker).
const ENV_URL: &str = "TIMEWHEEL_DASHBOARD_NODE_URL";
/// The list the node appends the key of each delivery to, as its handler starts.
const HANDLED: &str = "test:handled";
/// Set by the test when the payments and refunds should succeed (until then they fail).
const SUCCEED: &str = "test:succeed";
/// Set by the node when the export's handler saw its cancel and stopped.
const STOPPED: &str = "test:stopped";
/// `<pid> <node id>` of each worker the node's process runs, once it runs.
const NODE_WORKERS: &str = "test:node-workers";
/// Set by the test when the node should shut down.
const STOP: &str = "test:stop";
/// The node stops by itself after this long, should the test be gone.
const NODE_LIFETIME: Duration = Duration::from_secs(600);

/// The orders wheel's settings, the same in the test and in the node.
fn orders(url: &str) -> DurableBuilder {
    DurableScheduler::builder(url, "orders").tick(Duration::from_millis(100)).max_attempts(1)
}

/// The body of the node process: a worker of `orders`, whose handler records each delivery in
/// Redis; an export runs until its cancel comes; payments and refunds fail until the test sets
/// [`SUCCEED`]. Does nothing unless started by the test below.
#[test]
fn node_process() {
    let Some(url) = node::setting(ENV_URL) else { return };
    node::runtime().block_on(async move {
        let orders = orders(&url).connect().await.expect("node: connect");
        let client = redis::Client::open(url.as_str()).expect("node: redis url");
        let mut conn = client.get_multiplexed_async_connection().await.expect("node: connect for the log");
        let log = conn.clone();
        let worker = orders.run(move |task: Task| {
            let mut conn = log.clone();
            let key = task.key().to_owned();
            let may_fail = key.starts_with("payment-") || key.starts_with("refund-");
            let export = key.starts_with("export-").then(|| task.cancel_token());
            async move {
                redis::cmd("RPUSH")
                    .arg(HANDLED)
                    .arg(&key)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                if let Some(token) = export {
                    token.cancelled().await;
                    redis::cmd("SET")
                        .arg(STOPPED)
                        .arg(1)
                        .query_async::<()>(&mut conn)
                        .await
                        .map_err(|e| e.to_string())?;
                    return Ok(());
                }
                let succeed: i64 =
                    redis::cmd("EXISTS").arg(SUCCEED).query_async(&mut conn).await.map_err(|e| e.to_string())?;
                match may_fail && succeed == 0 {
                    true => Err("card declined: the issuer answered 05 (do not honour)".to_string()),
                    false => Ok(()),
                }
            }
        });
        // Which worker runs here, as the wheel names it (no other process runs one).
        worker.ready().await;
        let ids = loop {
            let ids = orders.workers().await.expect("node: workers");
            if !ids.is_empty() {
                break ids;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for id in ids {
            let line = format!("{} {id}", std::process::id());
            redis::cmd("RPUSH").arg(NODE_WORKERS).arg(line).query_async::<()>(&mut conn).await.expect("node: record");
        }
        node::until_told_to_stop(&mut conn, STOP, Duration::from_millis(50), NODE_LIFETIME).await;
        worker.shutdown().await;
    });
}

/// The keys the node's handler was given, in order.
fn handled(server: &RedisServer) -> Vec<String> {
    let list = server.command(&["LRANGE", HANDLED, "0", "-1"]);
    list.as_array().iter().filter_map(|r| r.as_str()).map(str::to_owned).collect()
}

fn is_set(server: &RedisServer, key: &str) -> bool {
    server.command(&["EXISTS", key]).as_int() == Some(1)
}

/// The counts the page shows, by their `data-stat` names, as numbers.
const READ_COUNTS: &str = r#"(() => {
  if (!document.body || !document.body.dataset.refreshes) return null;
  const out = {};
  for (const node of document.querySelectorAll("[data-stat]")) {
    out[node.dataset.stat] = Number(node.textContent.replace(/,/g, ""));
  }
  delete out.cursor_lag_ticks;
  return out;
})()"#;

fn expected_counts(s: &DurableStats) -> Value {
    serde_json::json!({
        "waiting": s.waiting, "ready": s.ready, "running": s.in_flight, "dead": s.dead, "pending": s.pending,
        "scheduled": s.scheduled, "handed_out": s.handed_out, "acked": s.acked, "retried": s.retried,
        "dead_lettered": s.dead_lettered, "cancelled": s.cancelled,
    })
}

/// Waits until `check` gives `Some`, polling the wheel every 20 ms; panics with `what` after
/// [`SHOWN_WITHIN`].
async fn until<T, F: Future<Output = Option<T>>>(what: &str, check: impl FnMut() -> F) -> T {
    until_within(SHOWN_WITHIN, what, check).await
}

/// [`until`], with a deadline of `within`.
async fn until_within<T, F: Future<Output = Option<T>>>(
    within: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Clicks the element `selector` once it is there; panics if it does not come.
async fn click(chromium: &mut Chromium, selector: &str) {
    let script = format!(
        "(() => {{ const b = document.querySelector({selector:?}); if (!b || b.disabled) return null; b.click(); return true; }})()"
    );
    let clicked = chromium.wait_for(&script, SHOWN_WITHIN).await;
    assert!(clicked.is_some(), "{selector} is not there to click; Chromium's log:\n{}", chromium.log_tail());
}

/// Waits until `expression` holds in the page; panics with what `shown` reads then.
async fn see(chromium: &mut Chromium, expression: &str, shown: &str) -> Value {
    match chromium.wait_for(expression, SHOWN_WITHIN).await {
        Some(value) => value,
        None => panic!("the page does not show {expression}: {}", chromium.eval(shown).await),
    }
}

async fn save_screenshot(chromium: &mut Chromium, name: &str) {
    let png = chromium.screenshot().await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::write(&path, &png).unwrap_or_else(|e| panic!("write {path}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_sees_two_wheels_pages_their_tasks_and_acts_on_them() {
    let started = Instant::now();
    let Some(binary) = Chromium::find() else { return };
    let Some(server) = RedisServer::start() else { return };
    // This process's handles schedule and check; no worker runs here.
    let orders = orders(&server.url()).connect().await.expect("connect");
    let emails = DurableScheduler::builder(server.url(), "emails").connect().await.expect("connect");

    // Orders: reminders spread over the next hour (the first with a JSON payload), reviews that
    // run now, an export whose handler runs until told to stop, and payments and refunds whose
    // handler fails until told otherwise (each dies at its first failure).
    for i in 0..40u64 {
        let payload =
            if i == 0 { br#"{"invoice":0,"customer":"ACME","total":[129.5,"EUR"]}"#.to_vec() } else { Vec::new() };
        orders
            .schedule(format!("invoice-{i}:remind"), Duration::from_secs(90 + i * 85), payload)
            .await
            .expect("schedule");
    }
    let reviews = (0..30u64).map(|i| (format!("order-{i}:review"), Duration::from_millis(i * 20), Vec::new()));
    orders.schedule_many(reviews).await.expect("schedule_many").into_iter().for_each(|r| r.expect("scheduled"));
    let failing_keys = (0..3)
        .map(|i| format!("payment-{i}:capture"))
        .chain((0..50).map(|i| format!("refund-{i:02}:a-long-key-that-would-wrap-onto-three-lines-of-a-narrow-table")));
    let failing_keys: Vec<String> = failing_keys.collect();
    for key in &failing_keys {
        orders.schedule(key.clone(), Duration::ZERO, Vec::new()).await.expect("schedule");
    }
    orders.schedule("export-1:run", Duration::ZERO, Vec::new()).await.expect("schedule");
    // Emails: 1,000 waiting an hour or two out, which no worker runs.
    let mails = (0..1000u64).map(|i| (format!("mail-{i:04}"), Duration::from_secs(3600 + i * 7), Vec::new()));
    emails.schedule_many(mails).await.expect("schedule_many").into_iter().for_each(|r| r.expect("scheduled"));

    // The worker, in a process of its own.
    let mut node = NodeProcess::spawn([(ENV_URL, server.url())]);
    let settled = until_within(
        NODE_SETTLES_WITHIN,
        "the node's worker ran the reviews, runs the export, and the payments and refunds died",
        || async {
            let s = orders.stats().await.expect("stats");
            (s.acked == 30 && s.dead == 53 && s.in_flight == 1).then_some(s)
        },
    )
    .await;
    assert_eq!(settled.waiting, 40);
    // The node's process, and the worker it runs, as the wheel names it.
    let node_workers = until("the node said which worker it runs", || async {
        let lines = server.command(&["LRANGE", NODE_WORKERS, "0", "-1"]);
        let lines: Vec<String> = lines.as_array().iter().filter_map(|r| r.as_str()).map(str::to_owned).collect();
        (!lines.is_empty()).then_some(lines)
    })
    .await;
    let node_workers: Vec<&str> = node_workers
        .iter()
        .map(|line| {
            let (pid, id) = line.split_once(' ').expect("<pid> <id>");
            assert_eq!(pid, node.id().to_string(), "a worker of another process: {line}");
            id
        })
        .collect();
    assert_ne!(node.id(), std::process::id());

    // The dashboard of both wheels, with its actions, under /admin/timers of an application.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "the shop" }));
    // As an admin process would: handles of its own, opened as the wheels are recorded, with no
    // worker, so that every figure the page shows comes from Redis, not from this handle's
    // workers.
    let admin = |name: &'static str| DurableScheduler::builder(server.url(), name).only_existing().connect();
    let (admin_orders, admin_emails) = (admin("orders").await.expect("admin"), admin("emails").await.expect("admin"));
    let admin_orders_view = admin_orders.clone();
    let app =
        dashboard::mount(app, "/admin/timers", Dashboard::new(admin_orders).wheel(admin_emails).actions(true).router());
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });

    let mut chromium = Chromium::launch(&binary, 1280, 900).await;
    // Both addresses serve the page; the wheels are listed, each with its counts.
    for url in [format!("http://{address}/admin/timers"), format!("http://{address}/admin/timers/")] {
        chromium.goto(&url).await;
        let listed = see(
            &mut chromium,
            "(() => { const r = document.querySelectorAll('#wheels tr[data-wheel]'); \
             return r.length === 2 ? Array.from(r).map((t) => t.dataset.wheel).join(',') : null; })()",
            "document.getElementById('wheels').textContent",
        )
        .await;
        assert_eq!(listed, "orders,emails", "at {url}");
        // The page keeps its place in the fragment, and the path as it was loaded (a relative
        // "#..." would resolve against its <base> and add the slash).
        let shown = chromium.eval("location.href.split('#')[0]").await;
        assert_eq!(shown, Value::String(url.clone()), "the address the page shows");
    }
    see(
        &mut chromium,
        "document.querySelector('#wheels tr[data-wheel=\"emails\"] td[data-count=waiting]').textContent === '1,000' || null",
        "document.getElementById('wheels').textContent",
    )
    .await;

    // The counts shown are stats()'s (nothing moves meanwhile: the export runs on, the rest is
    // an hour out).
    let expected = expected_counts(&orders.stats().await.expect("stats"));
    let deadline = Instant::now() + SHOWN_WITHIN;
    let mut shown = Value::Null;
    while shown != expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        shown = chromium.eval(READ_COUNTS).await;
    }
    assert_eq!(shown, expected);
    assert_eq!(chromium.eval("document.getElementById('wheel').textContent").await, "orders");
    // The overview's plots and lists.
    see(
        &mut chromium,
        "document.getElementById('due-note').textContent.includes('40 tasks fall due') || null",
        "document.getElementById('due-note').textContent",
    )
    .await;
    see(
        &mut chromium,
        "document.getElementById('late-note').textContent.includes('deliveries claimed') || null",
        "document.getElementById('late-note').textContent",
    )
    .await;
    see(
        &mut chromium,
        "document.getElementById('nodes').textContent.includes('led by') || null",
        "document.getElementById('nodes').textContent",
    )
    .await;
    // Every node's figures of the last hour, as figures() reads them: the chart's three lines
    // and its sums, and the wheel-wide lateness.
    let hour = orders.figures(60).await.expect("figures");
    let acked: u64 = hour.minutes().iter().map(|m| m.acked).sum();
    let claimed: u64 = hour.lateness().iter().map(|&(_, n)| n).sum();
    assert_eq!((acked, claimed), (30, 84), "{hour:?}");
    // This process claimed nothing (its handles run no worker): what the page shows of the
    // deliveries is what the node's process wrote to Redis.
    for handle in [&orders, &admin_orders_view] {
        assert_eq!(handle.lateness().count, 0, "a worker in the test's process");
    }
    see(
        &mut chromium,
        "document.getElementById('rates-note').textContent.includes('84 handed out, 30 acknowledged, 53 failed') && \
         document.querySelectorAll('#rates-plot polyline').length === 3 || null",
        "document.getElementById('rates-note').textContent",
    )
    .await;
    see(
        &mut chromium,
        "document.getElementById('late-note').textContent.includes('84 deliveries claimed in the last hour') || null",
        "document.getElementById('late-note').textContent",
    )
    .await;
    // Drawn, not only written: the lateness bars hold the 84 deliveries, and each of the
    // chart's lines (84 handed out, 30 acknowledged, 53 failed) rises off its baseline.
    see(
        &mut chromium,
        "(() => { const bars = Array.from(document.querySelectorAll('#late-plot rect.bar title')); \
         const n = bars.reduce((a, t) => a + Number(t.textContent.split(': ').pop().split(' ')[0].replace(/,/g, '')), 0); \
         return n === 84 || null; })()",
        "Array.from(document.querySelectorAll('#late-plot rect.bar title')).map((t) => t.textContent).join('; ')",
    )
    .await;
    see(
        &mut chromium,
        "(() => { const lines = Array.from(document.querySelectorAll('#rates-plot polyline')); \
         return lines.length === 3 && lines.every((l) => new Set(l.getAttribute('points').split(' ').map((p) => p.split(',')[1])).size > 1) || null; })()",
        "Array.from(document.querySelectorAll('#rates-plot polyline')).map((l) => l.getAttribute('points')).join(' | ')",
    )
    .await;
    // The note's part about this process says it claimed nothing.
    see(
        &mut chromium,
        "document.getElementById('late-note').textContent.includes(\"This process's workers claimed nothing\") || null",
        "document.getElementById('late-note').textContent",
    )
    .await;
    see(
        &mut chromium,
        "document.querySelectorAll('#dead-letters button[data-requeue]').length === 10 || null",
        "document.getElementById('dead-note').textContent",
    )
    .await;
    // A long dead-letter key stays on one line, cut: its button is as high as a wheel's name.
    let heights = chromium
        .eval(
            "(() => { const key = document.querySelector('#dead-letters tr[data-key^=\"refund-\"] td.key button'); \
             const name = document.querySelector('#wheels td.key button'); \
             return [key.getBoundingClientRect().height, name.getBoundingClientRect().height, key.scrollWidth > key.clientWidth]; })()",
        )
        .await;
    let (long, short) = (heights[0].as_f64().unwrap(), heights[1].as_f64().unwrap());
    assert!(long <= short + 1.0, "a long key is {long} px high, a wheel's name {short}");
    assert_eq!(heights[2], Value::Bool(true), "the long key is cut with an ellipsis");
    save_screenshot(&mut chromium, "dashboard.png").await;
    chromium.eval("window.confirm = () => true; true").await;

    // Pause: the banner shows, the wheel is paused; resume: both undone.
    click(&mut chromium, "#pause").await;
    until("the click paused the wheel", || async { orders.is_paused().await.expect("is_paused").then_some(()) }).await;
    see(&mut chromium, "!document.getElementById('paused-banner').hidden || null", "document.body.dataset.paused")
        .await;
    see(
        &mut chromium,
        "document.querySelector('#wheels tr[data-wheel=\"orders\"] td.paused-tag') || null",
        "document.getElementById('wheels').textContent",
    )
    .await;
    click(&mut chromium, "#resume").await;
    until("the click resumed the wheel", || async { (!orders.is_paused().await.expect("is_paused")).then_some(()) })
        .await;
    see(&mut chromium, "document.getElementById('paused-banner').hidden || null", "document.body.dataset.paused").await;

    // The tasks view: the waiting reminders, and a payload as JSON.
    click(&mut chromium, "button.view[data-view=tasks]").await;
    click(&mut chromium, "button.state[data-state=waiting]").await;
    see(
        &mut chromium,
        "document.querySelectorAll('#tasks tr[data-key]').length === 40 || null",
        "document.getElementById('tasks').textContent",
    )
    .await;
    click(&mut chromium, "#tasks button[data-open=\"invoice-0:remind\"]").await;
    let payload = see(
        &mut chromium,
        "document.getElementById('payload').dataset.format === 'json' ? document.getElementById('payload').textContent : null",
        "document.getElementById('detail-line').textContent",
    )
    .await;
    assert!(payload.as_str().is_some_and(|p| p.contains("\"customer\": \"ACME\"") && p.contains('\n')), "{payload}");
    chromium.resize(1280, 900, false).await;
    save_screenshot(&mut chromium, "dashboard-tasks.png").await;

    // Run now: the last reminder, an hour out, runs at once; cancel: the one before it goes.
    click(&mut chromium, "#tasks button[data-act=run-now][data-key=\"invoice-39:remind\"]").await;
    until("run now ran invoice-39", || async {
        handled(&server).iter().any(|k| k == "invoice-39:remind").then_some(())
    })
    .await;
    click(&mut chromium, "#tasks button[data-act=cancel][data-key=\"invoice-38:remind\"]").await;
    until("cancel took invoice-38 out", || async {
        (!orders.contains("invoice-38:remind").await.expect("contains")).then_some(())
    })
    .await;
    see(
        &mut chromium,
        "document.querySelectorAll('#tasks tr[data-key]').length === 38 || null",
        "document.getElementById('tasks').textContent",
    )
    .await;

    // The running export, with the worker that holds it; cancel running stops its handler.
    click(&mut chromium, "button.state[data-state=running]").await;
    let running = orders.list(TaskState::Running, None, 10).await.expect("list");
    let holder = running
        .tasks()
        .iter()
        .find(|t| t.key() == "export-1:run")
        .and_then(|t| t.worker())
        .expect("a worker")
        .to_owned();
    let shown = see(
        &mut chromium,
        "(() => { const c = document.querySelector('#tasks tr[data-key=\"export-1:run\"] td.worker'); \
         return c && c.dataset.worker ? c.textContent : null; })()",
        "document.getElementById('tasks').textContent",
    )
    .await;
    assert!(node_workers.contains(&holder.as_str()), "{holder} is not the node's worker: {node_workers:?}");
    assert!(shown.as_str().is_some_and(|t| t.starts_with(&holder) && t.contains(" · since ")), "{shown} for {holder}");
    click(&mut chromium, "#tasks button[data-act=cancel-running][data-key=\"export-1:run\"]").await;
    until("cancel running stopped the export", || async {
        let gone = orders.get("export-1:run").await.expect("get").is_none();
        (is_set(&server, STOPPED) && gone).then_some(())
    })
    .await;

    // The history: the export's run, just ended as cancelled, and the acknowledged runs before
    // it, as `list(Finished)` reads them; the row shows the outcome and when it ended.
    click(&mut chromium, "button.state[data-state=finished]").await;
    let finished = orders.list(TaskState::Finished, None, 100).await.expect("list finished");
    let export = finished.tasks().iter().find(|t| t.key() == "export-1:run").and_then(|t| t.finished());
    assert_eq!(export.map(|run| run.outcome()), Some(Outcome::Cancelled), "the export's run in the history");
    let acknowledged =
        finished.tasks().iter().filter(|t| t.finished().is_some_and(|r| r.outcome() == Outcome::Acknowledged));
    assert!(acknowledged.count() >= 30, "the 30 acknowledged runs: {:?}", finished.tasks());
    let shown = see(
        &mut chromium,
        "(() => { const c = document.querySelector('#tasks tr[data-key=\"export-1:run\"] td.run'); \
         return c && c.dataset.outcome === 'cancelled' ? c.textContent : null; })()",
        "document.getElementById('tasks').textContent",
    )
    .await;
    assert!(shown.as_str().is_some_and(|t| t.starts_with("cancelled") && t.contains(" · ended ")), "{shown}");
    save_screenshot(&mut chromium, "dashboard-finished.png").await;

    // Bulk: the first page of dead letters selected (50 of 53), requeued with one click; their
    // handler now succeeds.
    server.command(&["SET", SUCCEED, "1"]);
    click(&mut chromium, "button.state[data-state=dead]").await;
    see(
        &mut chromium,
        "document.querySelectorAll('#tasks input[data-pick]').length === 50 || null",
        "document.getElementById('tasks').textContent",
    )
    .await;
    let picked = chromium
        .eval(
            "(() => { const all = document.getElementById('pick-page'); all.click(); \
             return Array.from(document.querySelectorAll('#tasks input[data-pick]')).filter((c) => c.checked).map((c) => c.dataset.pick); })()",
        )
        .await;
    let picked: HashSet<String> = picked.as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_owned()).collect();
    assert_eq!(picked.len(), 50);
    assert!(picked.iter().all(|k| failing_keys.contains(k)), "{picked:?}");
    see(
        &mut chromium,
        "document.getElementById('selected-count').textContent === '50 selected' || null",
        "document.getElementById('selected-count').textContent",
    )
    .await;
    click(&mut chromium, "#requeue-selected").await;
    let left = until("the 50 selected were requeued and ran", || async {
        let dead = orders.dead_letters(100).await.expect("dead_letters");
        let ran = handled(&server).iter().filter(|k| picked.contains(*k)).count();
        (dead.iter().all(|d| !picked.contains(d.key())) && ran >= 100).then_some(dead.len())
    })
    .await;
    assert_eq!(left, 3, "the three not selected stay dead");
    see(
        &mut chromium,
        "document.querySelectorAll('#tasks tr[data-key]').length === 3 || null",
        "document.getElementById('tasks').textContent",
    )
    .await;

    // The emails wheel, chosen in the selector: its 1,000 waiting tasks, 50 a page, each once.
    chromium
        .eval("(() => { const s = document.getElementById('wheel-select'); s.value = 'emails'; s.dispatchEvent(new Event('change')); return true; })()")
        .await;
    click(&mut chromium, "button.state[data-state=waiting]").await;
    let mut seen = Vec::new();
    for page in 0..25 {
        let keys = see(
            &mut chromium,
            &format!(
                "(() => {{ const t = document.getElementById('tasks'); \
                 if (t.dataset.loaded !== 'waiting:{page}' || document.getElementById('wheel').textContent !== 'emails') return null; \
                 return Array.from(t.querySelectorAll('tr[data-key]')).map((r) => r.dataset.key); }})()"
            ),
            "document.getElementById('page-note').textContent",
        )
        .await;
        seen.extend(keys.as_array().unwrap().iter().map(|k| k.as_str().unwrap().to_owned()));
        if chromium.eval("document.getElementById('page-next').disabled").await == Value::Bool(true) {
            break;
        }
        click(&mut chromium, "#page-next").await;
    }
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!((seen.len(), distinct.len()), (1000, 1000), "each of the 1,000 keys once");
    assert!((0..1000).all(|i| distinct.contains(&format!("mail-{i:04}"))));

    // A phone's width: the overview of orders, readable.
    chromium
        .eval("(() => { const s = document.getElementById('wheel-select'); s.value = 'orders'; s.dispatchEvent(new Event('change')); return true; })()")
        .await;
    click(&mut chromium, "button.view[data-view=overview]").await;
    chromium.resize(390, 844, true).await;
    see(&mut chromium, "document.documentElement.clientWidth <= 400 || null", "document.documentElement.clientWidth")
        .await;
    see(
        &mut chromium,
        "document.body.dataset.view === 'overview' && document.getElementById('wheel').textContent === 'orders' && \
         document.querySelectorAll('#dead-letters tr[data-key]').length === 3 && \
         document.getElementById('rates-plot').getAttribute('viewBox') === '0 0 600 260' || null",
        "document.body.dataset.view",
    )
    .await;
    let wide = chromium.eval("document.documentElement.scrollWidth").await;
    assert!(wide.as_u64().is_some_and(|w| w <= 400), "the page is {wide} px wide on a phone");
    save_screenshot(&mut chromium, "dashboard-phone.png").await;

    drop(chromium);
    serving.abort();
    server.command(&["SET", STOP, "1"]);
    let ended = tokio::task::block_in_place(|| node.join(SHOWN_WITHIN));
    assert!(ended.is_some_and(|status| status.success()), "the node did not shut down cleanly: {ended:?}");
    let took = started.elapsed();
    eprintln!("the browser test took {:.1} s", took.as_secs_f64());
}
