//! What each step of the fire path costs Redis, in instructions per task: the tick that makes
//! tasks ready, the claims, a renewal round and the acknowledgements, each run alone on seeded
//! keys with Redis's counters zeroed before and dumped after (`callgrind_control`). Instruction
//! counts repeat to within a percent whatever else the machine does, where CPU time on a shared
//! machine does not. A measurement, not a check: ignored unless asked for, and it prints.
//!
//! ```sh
//! mkdir -p /tmp/cg && cat > /tmp/cg/redis-server <<'EOF'
//! #!/bin/sh
//! exec valgrind --tool=callgrind --callgrind-out-file=/tmp/cg/redis.%p /usr/bin/redis-server "$@"
//! EOF
//! chmod +x /tmp/cg/redis-server
//! TIMEWHEEL_REDIS_SERVER=/tmp/cg/redis-server CALLGRIND_DIR=/tmp/cg \
//!   cargo test --features redis --lib fire_path_instructions -- --ignored --nocapture
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::{redis_now_ms, wheel_keeping, TICK_MS};
use crate::durable::store::scripts::{self, NewTask, TickReply};
use crate::durable::store::shared_conn::Window;
use crate::durable::time::When;

/// Tasks per measurement.
const N: usize = 2_048;

/// Tasks that stay claimed while the worker's cycle is measured (a multiple of 64).
const STANDING: usize = 512;

/// Redis's instructions since the last zeroing: a dump of the callgrind run `pid` (the server is
/// valgrind's process), read back from `dir`.
fn dump(pid: &str, dir: &PathBuf) -> u64 {
    let status = Command::new("callgrind_control").arg("--dump").arg(pid).status().expect("callgrind_control");
    assert!(status.success(), "callgrind_control --dump {pid}");
    let prefix = format!("redis.{pid}.");
    let newest = std::fs::read_dir(dir)
        .expect("CALLGRIND_DIR")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| Some((name.strip_prefix(&prefix)?.parse::<u32>().ok()?, name)))
        .max()
        .expect("a dump")
        .1;
    let text = std::fs::read_to_string(dir.join(newest)).expect("read the dump");
    let line = text.lines().find(|l| l.starts_with("summary:") || l.starts_with("totals:")).expect("totals");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a count")
}

/// The acknowledgement of a delivery as a worker sends it: its handler's start (a time of today
/// in ms) and duration (µs), which the history keeps.
fn ran(key: &str, token: &str) -> scripts::Ack {
    let run = scripts::Ack::run(key, 1_767_225_600_000, 1, Some((1_767_225_600_123, 1_234)));
    scripts::Ack { run, ..scripts::Ack::plain(key, token) }
}

fn zero(pid: &str) {
    let status = Command::new("callgrind_control").arg("--zero").arg(pid).status().expect("callgrind_control");
    assert!(status.success());
}

#[tokio::test]
#[ignore = "a measurement: run against a callgrind-wrapped redis-server (see the module docs)"]
async fn fire_path_instructions_per_task() {
    let Some(dir) = std::env::var_os("CALLGRIND_DIR").map(PathBuf::from) else {
        eprintln!("set CALLGRIND_DIR and TIMEWHEEL_REDIS_SERVER (see src/durable/tests/costs.rs)");
        return;
    };
    // The default history, and none (what the history costs is the difference).
    for (batch, history) in
        [(4, crate::durable::DEFAULT_HISTORY_LIMIT), (64, crate::durable::DEFAULT_HISTORY_LIMIT), (64, 0)]
    {
        let Some((server, timers)) = wheel_keeping(&format!("costs-{batch}-{history}"), history).await else { return };
        let (w, keys) = (&timers.wheel, &timers.wheel.base);
        let pid = server.redis().expect("a measurement of Redis").info("server")["process_id"].clone();
        server.command(&["SET", &keys.leader(), "me:1"]);
        // Every task due at one tick a little ahead, in its slot.
        let due_tick = redis_now_ms(&server) / TICK_MS + 3;
        let tasks: Vec<NewTask> =
            (0..N).map(|i| NewTask::new(format!("order-{i}"), When::At(due_tick * TICK_MS), vec![b'p'; 32])).collect();
        for (c, chunk) in tasks.chunks(512).enumerate() {
            scripts::schedule(w, keys, &format!("s{c}"), chunk, false, None).await.unwrap();
        }
        while redis_now_ms(&server) < (due_tick + 1) * TICK_MS {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut costs = Vec::new();

        zero(&pid);
        let mut calls = 0;
        loop {
            calls += 1;
            let from = due_tick.saturating_sub(4);
            let reply = scripts::tick(w, keys, "me:1", 256, from..=due_tick + 4, 1).await.unwrap();
            assert_ne!(reply, TickReply::Refused, "the leader key ran out: the test took longer than a lease");
            if matches!(reply, TickReply::Done { .. }) {
                break;
            }
        }
        costs.push(("tick", calls, dump(&pid, &dir)));

        zero(&pid);
        let (mut held, mut previous, mut calls) = (Vec::new(), String::new(), 0);
        loop {
            let id = format!("k{calls}");
            let got = scripts::claim(w, keys, batch, &id, false, &previous).await.unwrap();
            calls += 1;
            previous = id;
            if got.is_empty() {
                break;
            }
            held.extend(got.into_iter().map(|c| (c.task.key, c.token)));
        }
        assert_eq!(held.len(), N);
        costs.push(("claim", calls, dump(&pid, &dir)));

        zero(&pid);
        let pairs: Vec<(&str, &str)> = held.iter().map(|(k, t)| (k.as_str(), t.as_str())).collect();
        for chunk in pairs.chunks(128) {
            scripts::renew(w, keys, chunk, 60_000, Window::Default).await.unwrap();
        }
        costs.push(("renew (128 a call)", N.div_ceil(128), dump(&pid, &dir)));

        zero(&pid);
        let acks: Vec<scripts::Ack> = held.iter().map(|(k, t)| ran(k, t)).collect();
        for chunk in acks.chunks(batch) {
            let acked = scripts::ack(w, keys, chunk, Window::Default).await.unwrap();
            assert!(acked.iter().all(|&a| a));
        }
        costs.push(("ack", N.div_ceil(batch), dump(&pid, &dir)));

        // The same tasks again, through the worker's cycle: each claim acknowledges the last one's.
        // Beside them, STANDING tasks stay claimed throughout, as a busy wheel's running and
        // buffered tasks are: `leased` and the claim index then have a busy wheel's size (and
        // Redis's encoding for it, a skip list past 128 entries) rather than one call's.
        server.command(&["SET", &keys.leader(), "me:1"]);
        let due_tick = redis_now_ms(&server) / TICK_MS + 3;
        let again: Vec<NewTask> = (0..N + STANDING)
            .map(|i| NewTask::new(format!("order-{i}"), When::At(due_tick * TICK_MS), vec![b'p'; 32]))
            .collect();
        for (c, chunk) in again.chunks(512).enumerate() {
            scripts::schedule(w, keys, &format!("t{c}"), chunk, false, None).await.unwrap();
        }
        while redis_now_ms(&server) < (due_tick + 1) * TICK_MS {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        loop {
            let reply =
                scripts::tick(w, keys, "me:1", 256, due_tick.saturating_sub(4)..=due_tick + 4, 1).await.unwrap();
            assert_ne!(reply, TickReply::Refused, "the leader key ran out: the test took longer than a lease");
            if matches!(reply, TickReply::Done { .. }) {
                break;
            }
        }
        let mut standing = 0;
        while standing < STANDING {
            let id = format!("standing{standing}");
            standing += scripts::claim(w, keys, 64, &id, false, "").await.unwrap().len();
        }
        zero(&pid);
        let (mut last, mut previous, mut calls, mut acked) = (Vec::<(String, String)>::new(), String::new(), 0, 0);
        loop {
            let id = format!("c{calls}");
            let pairs: Vec<scripts::Ack> = last.iter().map(|(k, t)| ran(k, t)).collect();
            let call = scripts::Claim {
                n: batch,
                claim_id: &id,
                replay_only: false,
                previous: &previous,
                node: "test-node",
                acks: &pairs,
            };
            let reply = scripts::claim_and_ack(w, keys, &call, Window::Default).await.unwrap();
            calls += 1;
            acked += reply.acked.iter().filter(|&&a| a).count();
            previous = id;
            if pairs.is_empty() && reply.claimed.is_empty() {
                break;
            }
            last = reply.claimed.into_iter().map(|c| (c.task.key, c.token)).collect();
        }
        assert_eq!(acked, N);
        costs.push(("cycle, 512 leased", calls, dump(&pid, &dir)));

        for (step, calls, instructions) in costs {
            println!(
                "batch {batch:>3}, history {history:>5}: {step:<20} {calls:>5} calls, {:>8} instructions a task, {:>8} a call",
                instructions / N as u64,
                instructions / calls as u64
            );
        }
    }
}
