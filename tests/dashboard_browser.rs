//! The dashboard in a real browser: headless Chromium loads the page of a live wheel and a
//! test checks what a person would see. The counts shown are `stats()`'s, a scheduled key is
//! found by the search box, and a click on a dead letter's Requeue button puts it back (seen
//! through the wheel's own calls). It saves a screenshot to `docs/dashboard.png`, the one the
//! README shows.
//!
//! Run with `cargo test --features dashboard --test dashboard_browser`. It needs a
//! `redis-server` and Chromium (Debian's `chromium`); without either it prints a skip note and
//! passes, except under `CI=true`, where it fails.

mod support;

#[path = "support/browser.rs"]
mod browser;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use browser::Chromium;
use serde_json::Value;
use support::redis_server::RedisServer;
use tokio_timewheel::durable::dashboard::Dashboard;
use tokio_timewheel::durable::{DurableScheduler, DurableStats, Task};

/// How long the page may take to show what is asked of it.
const SHOWN_WITHIN: Duration = Duration::from_secs(15);

/// The counts the page shows, by their `data-stat` names, as numbers.
const READ_COUNTS: &str = r#"(() => {
  if (!document.body || !document.body.dataset.refreshes) return null;
  const out = {};
  for (const node of document.querySelectorAll("[data-stat]")) {
    out[node.dataset.stat] = Number(node.textContent.replace(/,/g, ""));
  }
  return out;
})()"#;

fn expected_counts(s: &DurableStats) -> Value {
    serde_json::json!({
        "waiting": s.waiting, "ready": s.ready, "running": s.in_flight, "dead": s.dead, "pending": s.pending,
        "scheduled": s.scheduled, "handed_out": s.handed_out, "acked": s.acked, "retried": s.retried,
        "dead_lettered": s.dead_lettered,
    })
}

/// The shown counts without the cursor's lag, which moves with every tick.
fn without_lag(mut shown: Value) -> Value {
    if let Some(map) = shown.as_object_mut() {
        map.remove("cursor_lag_ticks");
    }
    shown
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_sees_the_wheel_finds_a_key_and_requeues_a_dead_letter() {
    let started = Instant::now();
    let Some(binary) = Chromium::find() else { return };
    let Some(server) = RedisServer::start() else { return };
    let timers = DurableScheduler::builder(server.url(), "orders")
        .tick(Duration::from_millis(100))
        .max_attempts(1)
        .connect()
        .await
        .expect("connect");

    // A small live wheel: reminders spread over the next hour, reviews that run now, and
    // payments whose handler fails until told otherwise (each dies at its first failure).
    for i in 0..40u64 {
        let delay = Duration::from_secs(90 + i * 85);
        timers.schedule(format!("invoice-{i}:remind"), delay, Vec::new()).await.expect("schedule");
    }
    let reviews = (0..30u64).map(|i| (format!("order-{i}:review"), Duration::from_millis(i * 20), Vec::new()));
    timers.schedule_many(reviews).await.expect("schedule_many").into_iter().for_each(|r| r.expect("scheduled"));
    for i in 0..3 {
        timers.schedule(format!("payment-{i}:capture"), Duration::ZERO, Vec::new()).await.expect("schedule");
    }
    let failing = Arc::new(AtomicBool::new(true));
    let handled = Arc::new(Mutex::new(Vec::<String>::new()));
    let worker = {
        let (failing, handled) = (failing.clone(), handled.clone());
        timers.run(move |task: Task| {
            handled.lock().unwrap().push(task.key().to_owned());
            let fail = task.key().starts_with("payment-") && failing.load(Ordering::SeqCst);
            async move {
                match fail {
                    true => Err("card declined: the issuer answered 05 (do not honour)".to_string()),
                    false => Ok(()),
                }
            }
        })
    };
    let settled = async {
        loop {
            let s = timers.stats().await.expect("stats");
            if s.acked == 30 && s.dead == 3 {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(20), settled).await.expect("the reviews ran and the payments died");

    // The dashboard, with its actions, on a free port of 127.0.0.1.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let address = listener.local_addr().unwrap();
    let router = Dashboard::new(timers.clone()).actions(true).router();
    let serving = tokio::spawn(async move { axum::serve(listener, router).await });

    let mut chromium = Chromium::launch(&binary, 1280, 900).await;
    chromium.goto(&format!("http://{address}/")).await;

    // The counts shown are stats()'s (nothing is due meanwhile, so they hold still; the page
    // may show an earlier read for a refresh, hence the wait for them to agree).
    let stats = timers.stats().await.expect("stats");
    let expected = expected_counts(&stats);
    let mut shown = Value::Null;
    let deadline = Instant::now() + SHOWN_WITHIN;
    while Instant::now() < deadline {
        shown = chromium.wait_for(READ_COUNTS, SHOWN_WITHIN).await.map(without_lag).unwrap_or(Value::Null);
        if shown == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(shown, expected, "the page's counts against stats(); Chromium's log:\n{}", chromium.log_tail());
    assert_eq!((stats.waiting, stats.dead), (40, 3));
    let wheel = chromium.eval("document.getElementById('wheel').textContent").await;
    assert_eq!(wheel, "orders");

    // The lateness plot has the deliveries this process's worker claimed.
    let note = chromium
        .wait_for("document.getElementById('late-note').textContent.includes('33 deliveries') || null", SHOWN_WITHIN)
        .await;
    assert!(
        note.is_some(),
        "the lateness note: {}",
        chromium.eval("document.getElementById('late-note').textContent").await
    );
    let bars = chromium.eval("document.querySelectorAll('#late-plot rect.bar').length").await;
    assert!(bars.as_u64().is_some_and(|n| n >= 8), "lateness bars: {bars}");
    // What falls due over the next hour: the 40 waiting tasks, as due_counts counts them.
    let in_hour: u64 = timers
        .due_counts(std::time::SystemTime::now(), Duration::from_secs(60), 60)
        .await
        .expect("due_counts")
        .iter()
        .sum();
    assert_eq!(in_hour, 40);
    let due = chromium
        .wait_for("document.getElementById('due-note').textContent.includes('40 tasks fall due') || null", SHOWN_WITHIN)
        .await;
    assert!(due.is_some(), "{}", chromium.eval("document.getElementById('due-note').textContent").await);

    // The leader and the workers: this process's worker runs and leads.
    let nodes = chromium
        .wait_for(
            "(() => { const t = document.getElementById('nodes').textContent; \
             return t.includes('led by') && t.includes('worker ') ? t : null; })()",
            SHOWN_WITHIN,
        )
        .await;
    assert!(nodes.is_some(), "{}", chromium.eval("document.getElementById('nodes').textContent").await);

    // The search box finds a scheduled key, and not one that is not pending.
    for (key, found) in [("invoice-7:remind", "true"), ("order-3:review", "false")] {
        let search = format!(
            "document.getElementById('search-key').value = {key:?}; \
             document.getElementById('search').requestSubmit(); true"
        );
        chromium.eval(&search).await;
        let result = format!(
            "(() => {{ const p = document.querySelector('#search-result [data-found]'); \
             return p && p.querySelector('.key').textContent === {key:?} ? p.dataset.found : null; }})()"
        );
        let shown = chromium.wait_for(&result, SHOWN_WITHIN).await;
        assert_eq!(shown, Some(Value::from(found)), "searching {key}");
    }
    // A task found shows its state, due time and deliveries (from `get`).
    let detail = chromium.eval("document.querySelector('#search-result [data-found]').textContent").await;
    assert!(detail.as_str().is_some_and(|t| t.contains("not pending")), "{detail}");
    // The dead letters are listed with their last error and a Requeue button each.
    let listed = chromium
        .wait_for("document.querySelectorAll('#dead-letters button[data-requeue]').length === 3 || null", SHOWN_WITHIN)
        .await;
    assert!(listed.is_some(), "three Requeue buttons");
    let error = chromium.eval("document.querySelector('#dead-letters td.error').textContent").await;
    assert_eq!(error, "card declined: the issuer answered 05 (do not honour)");

    // The screenshot the README shows: the search found, the dead letters listed.
    chromium.eval("document.getElementById('search-key').value = 'invoice-7:remind'; document.getElementById('search').requestSubmit(); true").await;
    chromium.wait_for("document.querySelector('#search-result [data-found=\"true\"]')", SHOWN_WITHIN).await;
    let detail = chromium.eval("document.querySelector('#search-result [data-found]').textContent").await;
    assert!(detail.as_str().is_some_and(|t| t.contains("invoice-7:remind is waiting, due ")), "{detail}");
    let png = chromium.screenshot().await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/dashboard.png");
    std::fs::write(path, &png).expect("write docs/dashboard.png");

    // A click on Requeue puts the dead letter back: its handler now succeeds, so it runs once
    // more and is acknowledged; the wheel's own calls show it.
    failing.store(false, Ordering::SeqCst);
    let runs_before = handled.lock().unwrap().iter().filter(|k| *k == "payment-1:capture").count();
    let clicked = chromium
        .eval("(() => { const b = document.querySelector('button[data-requeue=\"payment-1:capture\"]'); if (!b) return false; b.click(); return true; })()")
        .await;
    assert_eq!(clicked, Value::Bool(true), "the button is there");
    let requeued = async {
        loop {
            let dead = timers.dead_letters(10).await.expect("dead_letters");
            let runs = handled.lock().unwrap().iter().filter(|k| *k == "payment-1:capture").count();
            if !dead.iter().any(|d| d.key() == "payment-1:capture") && runs > runs_before {
                return dead.len();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let left =
        tokio::time::timeout(SHOWN_WITHIN, requeued).await.expect("the click requeued payment-1 and it ran again");
    assert_eq!(left, 2);
    let gone = chromium
        .wait_for(
            "(!document.querySelector('tr[data-key=\"payment-1:capture\"]') && \
             document.querySelector('[data-stat=dead]').textContent === '2') || null",
            SHOWN_WITHIN,
        )
        .await;
    assert!(gone.is_some(), "the page shows the dead letter gone");
    let flash = chromium.eval("document.getElementById('status').textContent").await;
    assert!(flash.as_str().is_some_and(|t| t.contains("requeued") || t.starts_with("live")), "{flash}");

    drop(chromium);
    serving.abort();
    worker.shutdown().await;
    eprintln!("the browser test took {:.1} s", started.elapsed().as_secs_f64());
}
