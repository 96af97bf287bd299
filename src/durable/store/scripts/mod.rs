//! Every Redis call of the wheel: the Lua scripts and the one Rust function that calls each (its
//! arguments named and in their order, its reply read into a type), and the few plain commands
//! beside them (`inspect.rs`'s reads, the workers' `registry.rs`, the wake-up lists of
//! `wake.rs`, the pause of `control.rs`, the server's checks in `server.rs`). Nothing else in the crate builds a call or
//! parses its reply.
//!
//! Each script in `lua/` opens with a header naming its `KEYS`, `ARGV`, output and the keys it
//! touches, then the shared helpers it uses as `-- @include <name>` lines. [`assemble`] puts
//! each helper (`lua/includes/<name>.lua`, and the helpers it includes in turn, each once) on
//! that one line, its comments dropped, so a Redis error's line number is the script file's own.
//! Two includes are made here from Rust: `keys`, the key names of [`WheelKeys`](crate::durable::WheelKeys)
//! bound as Lua locals, and `constants`, the numbers the Lua and the Rust code share.

pub(crate) mod control;
mod inspect;
mod leader;
pub(crate) mod registry;
mod server;
mod tasks;
pub(crate) mod wake;
mod worker;

use std::collections::HashSet;
use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};

use super::keys::{self, WheelKeys};

pub(crate) use inspect::{
    contains, cursor, dead_letters, delete_dead, due_counts, due_next, figures, get, history, leader, list, recorded,
    stats,
};
pub(crate) use leader::{acquire, open, release, tick, Bid, Opened, TickReply};
pub(crate) use server::{config_value, server_version};
#[cfg(test)]
pub(crate) use tasks::schedule_in;
pub(crate) use tasks::{
    cancel, debounce, requeue_dead, reschedule, schedule, upsert, Cancelled, Moved, NewTask, Requeued, ScheduleAnswer,
    Upserted,
};
#[cfg(test)]
pub(crate) use worker::claim;
#[cfg(test)]
pub(crate) use worker::ClaimReply;
pub(crate) use worker::Failed;
pub(crate) use worker::{ack, claim_and_ack, fail, renew, snooze, Ack, Claim, Claimed, Renewal};

/// How many wake-up tokens wait on `wake` at most: a burst leaves only a few wake-ups with nothing
/// to claim behind it.
pub(crate) const WAKE_TOKENS: usize = 8;

/// How many arguments each delivery to acknowledge takes in `ack.lua` and `claim.lua` (see
/// [`Ack`]): key, claim token, next due, its run for the history.
pub(crate) const ACK_FIELDS: usize = 4;

/// The shared helpers, by include name.
const INCLUDES: &[(&str, &str)] = &[
    ("clock", include_str!("../lua/includes/clock.lua")),
    ("record", include_str!("../lua/includes/record.lua")),
    ("request", include_str!("../lua/includes/request.lua")),
    ("due_tick", include_str!("../lua/includes/due_tick.lua")),
    ("due_times", include_str!("../lua/includes/due_times.lua")),
    ("place", include_str!("../lua/includes/place.lua")),
    ("wheel_now", include_str!("../lua/includes/wheel_now.lua")),
    ("zadd_all", include_str!("../lua/includes/zadd_all.lua")),
    ("rpush_all", include_str!("../lua/includes/rpush_all.lua")),
    ("zrem_all", include_str!("../lua/includes/zrem_all.lua")),
    ("hash_all", include_str!("../lua/includes/hash_all.lua")),
    ("wake", include_str!("../lua/includes/wake.lua")),
    ("bury", include_str!("../lua/includes/bury.lua")),
    ("advance", include_str!("../lua/includes/advance.lua")),
    ("figures", include_str!("../lua/includes/figures.lua")),
    ("acknowledge", include_str!("../lua/includes/acknowledge.lua")),
    ("queued", include_str!("../lua/includes/queued.lua")),
    ("claims", include_str!("../lua/includes/claims.lua")),
    ("zpage", include_str!("../lua/includes/zpage.lua")),
    ("cancelled", include_str!("../lua/includes/cancelled.lua")),
    ("history", include_str!("../lua/includes/history.lua")),
    ("limits", include_str!("../lua/includes/limits.lua")),
];

/// The Lua of the include `name`: a helper file, or one of the two made from Rust.
fn include(name: &str) -> String {
    match name {
        "keys" => keys::lua_bindings(),
        "constants" => format!(
            "local WAKE_TOKENS, MAX_BURST, ACK_FIELDS = {WAKE_TOKENS}, {}, {ACK_FIELDS}",
            crate::durable::series::MAX_BURST
        ),
        _ => match INCLUDES.iter().find(|(n, _)| *n == name) {
            Some((_, lua)) => lua.to_string(),
            None => panic!("a durable script includes {name:?}, which lua/includes/ does not have"),
        },
    }
}

/// `source` with each `-- @include <name>` line replaced by that helper on one line.
pub(crate) fn assemble(source: &str) -> String {
    let mut seen = HashSet::new();
    source
        .lines()
        .map(|line| match include_name(line) {
            Some(name) => expand(name, &mut seen),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A script as loaded into Redis: assembled, and in the crate's own tests preceded (on its first
/// line, so line numbers stay) by [`KEYS_CHECK`].
fn loaded(source: &str) -> String {
    let script = assemble(source);
    if cfg!(test) {
        format!("{KEYS_CHECK} {script}")
    } else {
        script
    }
}

/// Lua that shadows `redis` with a twin whose `call` and `pcall` refuse a key the script was not
/// given in `KEYS` (every command the scripts use takes its key first, but `TIME`, which takes
/// none, and `OBJECT`, whose key follows its subcommand). The crate's tests run every script
/// this way, so a key built inside a script and not declared fails them, as it would fail on a
/// server that enforces declarations.
const KEYS_CHECK: &str = "local redis = (function(real) \
    local declared = {} for _, k in ipairs(KEYS) do declared[k] = true end \
    local function check(cmd, first, second) \
      local key = first if cmd == 'OBJECT' then key = second end \
      if cmd ~= 'TIME' and not declared[key] then \
        return real.error_reply('undeclared key ' .. tostring(key) .. ' in ' .. cmd) end end \
    return setmetatable({ \
      call = function(cmd, ...) local e = check(cmd, ...) if e then error(e) end return real.call(cmd, ...) end, \
      pcall = function(cmd, ...) local e = check(cmd, ...) if e then return e end return real.pcall(cmd, ...) end, \
    }, {__index = real}) end)(redis)";

fn include_name(line: &str) -> Option<&str> {
    line.strip_prefix("-- @include ").map(str::trim)
}

/// The helper `name` and the helpers it includes, those not `seen` yet, as one line of Lua.
fn expand(name: &str, seen: &mut HashSet<String>) -> String {
    if !seen.insert(name.to_string()) {
        return String::new();
    }
    let mut parts = Vec::new();
    for line in include(name).lines() {
        if let Some(inner) = include_name(line) {
            parts.push(expand(inner, seen));
        } else {
            let code = strip_comment(line).trim();
            if !code.is_empty() {
                parts.push(code.to_string());
            }
        }
    }
    parts.retain(|p| !p.is_empty());
    parts.join(" ")
}

/// `line` without a trailing `-- comment` (a `--` inside a quoted string is kept).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if b == b'-' && bytes.get(i + 1) == Some(&b'-') => return &line[..i],
            None => {}
        }
    }
    line
}

/// Every script of the wheel, named once: `Scripts` holds each one assembled and hashed once
/// per process (`redis::Script` loads a script again after `NOSCRIPT`), and `SOURCES` the files
/// as written, for the tests.
macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        struct Scripts {
            $($name: Script,)*
        }

        static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: Script::new(&loaded(include_str!(concat!("../lua/", stringify!($name), ".lua")))),)*
        });

        /// Every script as loaded (the text whose SHA1 its `EVALSHA` names).
        fn all_loaded() -> Vec<String> {
            vec![$(loaded(include_str!(concat!("../lua/", stringify!($name), ".lua")))),*]
        }

        #[cfg(test)]
        const SOURCES: &[(&str, &str)] =
            &[$((concat!(stringify!($name), ".lua"), include_str!(concat!("../lua/", stringify!($name), ".lua")))),*];
    };
}

scripts!(
    open,
    schedule,
    upsert,
    cancel,
    reschedule,
    tick,
    claim,
    ack,
    fail,
    renew,
    acquire,
    release,
    stats,
    dead_letters,
    requeue_dead,
    get,
    delete_dead,
    due_next,
    due_counts,
    cancel_running,
    list,
    finished,
    limit,
    debounce,
);

/// Loads every script into the server (`SCRIPT LOAD`, one pipeline, on one node or Sentinel's
/// primary), so that no call pays the round trips of a first `NOSCRIPT` (an `EVALSHA` refused,
/// then the script sent): on a link of hundreds of ms each way, a node's first acknowledgement
/// would otherwise take three round trips, and could land after a short lease. A failure only
/// leaves each script to load on its first use, as it would anyway after a restart of Redis.
pub(crate) async fn preload(wheel: &crate::durable::store::client::WheelClient) {
    if !wheel.conn.preloads_scripts() {
        return;
    }
    let Some(mut conn) = wheel.conn.shared().await else { return };
    let mut pipe = redis::pipe();
    for script in all_loaded() {
        pipe.cmd("SCRIPT").arg("LOAD").arg(script).ignore();
    }
    if let Err(e) = pipe.query_async::<()>(&mut conn).await {
        tracing::debug!(wheel = %wheel.name(), error = %e, "could not load the scripts ahead; each loads on first use");
    }
}

/// The SHA1 of the tick script, as `EVALSHA` names it.
pub(crate) fn tick_sha() -> &'static str {
    SCRIPTS.tick.get_hash()
}

/// A call of `script` on the (partition of the) wheel whose keys are `keys`, with every fixed
/// key declared as its first `KEYS` (so the call is routed by the wheel's hash tag and is correct
/// on servers that refuse undeclared keys). A call's own keys follow, added by the caller.
fn invoke<'a>(keys: &WheelKeys, script: &'a Script) -> ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    for key in keys.all_fixed() {
        inv.key(key);
    }
    inv
}

/// Declares the ring slots `indices` (each once) to a placing script: their keys go into `KEYS`
/// after those already there, and the returned argument lists their indices in the same order
/// (see [`packed`]), from which the script's `declared_slots` maps each index to its key.
pub(crate) fn declare_slots(inv: &mut ScriptInvocation<'_>, keys: &WheelKeys, indices: &[u64]) -> Vec<u8> {
    for &i in indices {
        inv.key(keys.slot(i));
    }
    packed(indices.iter().copied())
}

/// Whole numbers as one MessagePack array, which a script reads with `cmsgpack.unpack` into Lua
/// numbers in one call: far cheaper for Redis than an argument each read with `tonumber`
/// (BENCHMARKS.md has the counts). Every number the scripts take this way is below
/// [`MAX_DUE_MS`], exact in Lua's doubles.
///
/// [`MAX_DUE_MS`]: crate::durable::time::MAX_DUE_MS
pub(crate) fn packed(values: impl ExactSizeIterator<Item = u64>) -> Vec<u8> {
    let n = values.len();
    let mut out = Vec::with_capacity(5 + 9 * n);
    match n {
        0..=15 => out.push(0x90 | n as u8),
        16..=0xffff => {
            out.push(0xdc);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        _ => {
            out.push(0xdd);
            out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes());
        }
    }
    for v in values {
        match v {
            0..=0x7f => out.push(v as u8),
            0x80..=0xff => out.extend_from_slice(&[0xcc, v as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                out.extend_from_slice(&(v as u16).to_be_bytes());
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                out.extend_from_slice(&(v as u32).to_be_bytes());
            }
            _ => {
                out.push(0xcf);
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
    }
    out
}

/// Bytes from Redis as text (lossy: keys and errors were text when they went in).
fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Bytes from Redis as a whole number (0 if it is none).
fn number(b: &[u8]) -> u64 {
    std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Redis error names a line of the assembled script: it must be the same line of the file.
    #[test]
    fn assembling_keeps_every_line_where_it_is() {
        for (file, source) in SOURCES {
            let assembled = assemble(source);
            let (a, s): (Vec<&str>, Vec<&str>) = (assembled.lines().collect(), source.lines().collect());
            assert_eq!(a.len(), s.len(), "{file}");
            for (i, (a, s)) in a.iter().zip(&s).enumerate() {
                if include_name(s).is_none() {
                    assert_eq!(a, s, "{file}:{}", i + 1);
                }
            }
        }
    }

    /// Each helper comes once, before the code that uses it, whatever order the includes name
    /// them in; the keys come before the helpers that use them.
    #[test]
    fn includes_come_once_with_what_they_include() {
        let script = assemble("-- @include place\n-- @include due_tick\n-- @include keys\nreturn 1");
        let lines: Vec<&str> = script.lines().collect();
        assert_eq!(lines.len(), 4);
        let first = lines[0];
        assert_eq!(first.matches("local function due_tick(").count(), 1);
        assert!(first.find("local META, ").unwrap() < first.find("local function place(").unwrap());
        assert!(first.find("local function due_tick(").unwrap() < first.find("local function place(").unwrap());
        assert_eq!((lines[1], lines[2], lines[3]), ("", "", "return 1"));
        assert!(!first.contains("--"), "comments stay out of a one-line include: {first}");
    }

    /// The check itself: a key a script builds instead of taking from `KEYS` is refused.
    #[tokio::test]
    async fn an_undeclared_key_is_refused_in_tests() {
        let Some(server) = crate::durable::tests::start_server() else { return };
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let script = Script::new(&loaded("redis.call('SET', KEYS[1], 1)\nreturn redis.call('GET', KEYS[1] .. 'x')"));
        let err = script.key("k").invoke_async::<Option<String>>(&mut conn).await.unwrap_err();
        assert!(err.to_string().contains("undeclared") && err.to_string().contains("key kx in GET"), "{err}");
        let ok = Script::new(&loaded("redis.call('SET', KEYS[1], 1)\nreturn redis.call('GET', KEYS[1])"));
        assert_eq!(ok.key("k").invoke_async::<Option<String>>(&mut conn).await.unwrap().as_deref(), Some("1"));
    }

    /// What [`packed`] writes is what Redis's `cmsgpack` reads, at every width of a number and of
    /// an array's length.
    #[tokio::test]
    async fn packed_numbers_read_back_in_a_script() {
        let Some(server) = crate::durable::tests::start_server() else { return };
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let edges = [0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x1_0000, 0xffff_ffff, 0x1_0000_0000];
        let max = crate::durable::time::MAX_DUE_MS - 1;
        let script = Script::new(
            "local t = cmsgpack.unpack(ARGV[1]) local out = {} \
             for j = 1, #t do out[j] = string.format('%d', t[j]) end return {#t, table.concat(out, ',')}",
        );
        for len in [0, 1, 15, 16, 0xffff, 0x1_0000] {
            let values: Vec<u64> = edges.iter().copied().chain([max]).cycle().take(len).collect();
            let (n, text): (usize, String) =
                script.arg(packed(values.iter().copied())).invoke_async(&mut conn).await.unwrap();
            assert_eq!(n, len);
            let back: Vec<u64> = text.split(',').filter(|s| !s.is_empty()).map(|s| s.parse().unwrap()).collect();
            assert_eq!(back, values, "{len} values");
        }
    }

    #[test]
    fn comments_are_cut_outside_strings_only() {
        assert_eq!(strip_comment("local a = 1 -- one"), "local a = 1 ");
        assert_eq!(strip_comment("local s = '--' -- dashes"), "local s = '--' ");
        assert_eq!(strip_comment("-- all of it"), "");
    }

    #[test]
    #[should_panic(expected = "lua/includes/ does not have")]
    fn an_unknown_include_is_refused() {
        assemble("-- @include nothing_by_this_name");
    }
}
