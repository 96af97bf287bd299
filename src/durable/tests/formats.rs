//! The stored formats held to one codec in both languages (`formats.rs` and
//! `store/lua/includes/record.lua`, `history.lua`), on a real server: what Lua decodes and writes back
//! is what Rust reads and writes, a tag Lua does not know included, and what a worker packs for
//! the history reads back after a script joined it.

use super::{dump, redis_now_ms, seed_lease, wheel};
use crate::durable::store::formats::{Ended, HistoryRun, Record};
use crate::durable::store::scripts::{self, Ack};
use crate::durable::store::shared_conn::Window;
use crate::durable::TaskOptions;

const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// record.lua's `decode`, then its `encode`, of `ARGV[1]`: the text it writes back, then each
/// field as Lua holds it.
const ROUND_TRIP: &str = "-- @include record
local t = decode(ARGV[1])
return {encode(t), tostring(t.due), tostring(t.a), t.tok, tostring(t.every), tostring(t.runs), t.missed,
  t.spec, t.trace, t.retry, t.extra, t.err, t.p}";

#[tokio::test]
async fn lua_and_rust_read_and_write_a_record_alike() {
    let Some(server) = super::start_server() else { return };
    let mut conn = server.connection().await;
    let script = redis::Script::new(&scripts::assemble(ROUND_TRIP));
    let spec = "1700000000000 cron Europe/Berlin 0 3 * * *";
    let records = [
        "5:0:0:0:0:0:0:x".to_string(),
        "1000:1:0:250:-1:0:0:".to_string(),
        format!("1000:2:77:0:-1:2:c{}:{spec}t{}:{TRACE}r5:3/2504:boompay:load", spec.len(), TRACE.len()),
        // Another order, and a tag a later version wrote: read past, and kept.
        format!("1000:2:77:0:3:1:r2:/9z4:newct{}:{TRACE}0:p", TRACE.len()),
        "9:1:0:0:0:2:c3:a:b0:colons:in:payload".to_string(),
    ];
    for text in &records {
        let lua: Vec<Vec<u8>> = script.arg(text.as_str()).invoke_async(&mut conn).await.unwrap();
        let r = Record::read(text.as_bytes()).unwrap_or_else(|| panic!("Rust reads {text}"));
        let or_empty = |f: Option<&[u8]>| f.unwrap_or_default().to_vec();
        let unknown: Vec<u8> = r
            .unknown
            .iter()
            .flat_map(|(tag, v)| [&[*tag][..], v.len().to_string().as_bytes(), b":", v].concat())
            .collect();
        let rust = vec![
            r.write(),
            r.due_ms.to_string().into_bytes(),
            r.deliveries.to_string().into_bytes(),
            r.token.to_vec(),
            r.every_ms.to_string().into_bytes(),
            r.runs.to_string().into_bytes(),
            vec![r.missed],
            or_empty(r.spec),
            or_empty(r.trace),
            or_empty(r.retry),
            unknown,
            r.error.to_vec(),
            r.payload.to_vec(),
        ];
        let show = |v: &[Vec<u8>]| v.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect::<Vec<_>>();
        assert_eq!(show(&rust), show(&lua), "{text}");
    }
}

/// The run a worker packs goes into the history joined by the script that ends it, and reads
/// back whole: its key (with a colon) and, for a dead one, its error.
#[tokio::test]
async fn a_packed_run_reads_back_from_the_history() {
    let Some((server, timers)) = wheel("f-history").await else { return };
    let (w, keys) = (&timers.wheel, &timers.wheel.base);
    let now = redis_now_ms(&server);
    server.command(&["HSET", &keys.tasks(), "order:42", &format!("{}:2:7:0:0:0:0:p", now - 100)]);
    seed_lease(&server, keys, "order:42", 7, now + 60_000);
    let ack = Ack {
        key: "order:42".into(),
        token: "7".into(),
        next_due: String::new(),
        run: Ack::run("order:42", now - 100, 2, Some((now - 50, 1234))),
        options: TaskOptions::new(),
    };
    assert_eq!(scripts::ack(w, keys, &[ack], Window::Default).await.unwrap(), [true]);
    let history = dump(&server, keys)["history"].clone();
    let run = HistoryRun::read(history.as_bytes()).unwrap_or_else(|| panic!("reads {history}"));
    assert_eq!((run.outcome, run.due_ms, run.attempts), (Ended::Acknowledged, now - 100, 2));
    assert_eq!((run.handler, run.key, run.error), (Some((now - 50, 1234)), &b"order:42"[..], &b""[..]));
    assert!(run.ended_ms >= now, "{history}");
}
