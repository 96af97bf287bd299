//! The wheel's Lua scripts run in-process, as Redis runs them: `SCRIPT LOAD` and `EVALSHA` on a
//! Lua 5.1 (Redis's version) whose scripts see the globals Redis gives them, with every
//! `redis.call` going to the keyspace of the store.
//!
//! What a script sees, and how values cross, follows Redis 7.0's scripting (`script_lua.c`,
//! `eval.c`), so a script behaves here as on a server, its errors worded the same:
//! - **Globals**: `KEYS` and `ARGV` (fresh for each call, their bytes as they came), `redis`
//!   (`call`, `pcall`, `error_reply`, `status_reply`), `cmsgpack.unpack`, the `string`,
//!   `table` and `math` libraries, and the base functions a script uses (`tonumber`,
//!   `tostring`, `type`, `pairs`, `ipairs`, `select`, `unpack`, `error`, `assert`, `pcall`,
//!   `xpcall`, `next`, `rawget`, `rawset`, `rawequal`, `setmetatable`, `getmetatable`).
//!   Reading a global that does not exist, or writing one, is an error, as on Redis: nothing a
//!   script does is left behind for the next.
//! - **Arguments of `redis.call`**: strings as they are; numbers printed as Redis 7.0 prints
//!   them (`%.17g`: `3` is `"3"`, `2.5` is `"2.5"`, `1e17` is `"1e+17"`); anything else is an
//!   error.
//! - **Replies to Lua**: an integer is a number, a bulk string a string, nil `false`, a status
//!   `{ok = ...}`, an array a table, an error `{err = ...}`, which `redis.call` raises (ending
//!   the script with that error, its line appended) and `redis.pcall` returns.
//! - **A script's value to a reply**: a number is an integer (truncated), a string a bulk
//!   string, `true` 1, `false` and nil nil, `{err = ...}` an error, `{ok = ...}` a status, any
//!   other table an array up to its first nil.
//!
//! Not there, as the wheel's scripts do not use them: `cjson`, `struct`, `bit`,
//! `cmsgpack.pack`, `redis.log`, `redis.sha1hex`, `redis.setresp` (replies are RESP2's),
//! `redis.set_repl`, script flags (`#!lua`), Redis's own `math.random`, the busy-script time
//! limit, and the read-only guard on the library tables (a script may change `string`, which
//! then stays changed).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use mlua::chunk::ChunkMode;
use mlua::{Function, Lua, LuaOptions, LuaString, MultiValue, StdLib, Table, Value as LuaValue, Variadic};
use redis::Value;

use super::keyspace::CommandError;

/// The chunk name Redis gives every script: its errors read `user_script:3: ...`, and a failed
/// call names `@user_script:3`.
const SCRIPT_CHUNK: &str = "@user_script";

/// The chunk name of the runner's own Lua ([`PRELUDE`]), whose frames a failure's line skips.
const PRELUDE_CHUNK: &str = "=redis";

/// Redis's answer to `EVALSHA` of a script it does not have; the redis crate then loads the
/// script and calls again.
const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

/// How deep a reply may nest, each way, before the rest is cut: a table can hold itself (Redis
/// stops at its Lua stack's limit). The redis crate reads no reply nested deeper than 100 levels
/// anyway.
const MAX_NESTING: usize = 100;

/// The globals of the base library that a script sees (the rest, `load`, `setfenv` and the
/// like, stay out, as on Redis).
const BASE_GLOBALS: &[&str] = &[
    "assert",
    "error",
    "getmetatable",
    "ipairs",
    "next",
    "pairs",
    "rawequal",
    "rawget",
    "rawset",
    "select",
    "setmetatable",
    "tonumber",
    "tostring",
    "type",
    "unpack",
    "xpcall",
    "_VERSION",
    "string",
    "table",
    "math",
];

/// The runner's own Lua, run once: fills `env`, the globals of every script, from the standard
/// globals `std`, and makes the `redis` table (whose `call` and `pcall` each call sets, as they
/// go to that call's keyspace). `redis.call`, `redis.pcall` and `cmsgpack.unpack` are Rust
/// functions, as they are C functions on Redis: a Lua function in their place would lose the
/// script's line when a script tail-calls it (`return redis.call(...)`).
const PRELUDE: &str = r#"
local env, std, redis, unpack_msgpack, error_reply, caught, names = ...
local error, pcall, select, type, unpack, tostring = std.error, std.pcall, std.select, std.type, std.unpack, std.tostring
for _, name in std.ipairs(names) do env[name] = std[name] end
env._G = env

local function pack(...) return select('#', ...), {...} end

-- Redis's pcall: a failed redis.call is caught as its error's text.
env.pcall = function(...)
  local n, r = pack(pcall(...))
  if r[1] then return unpack(r, 1, n) end
  local e = r[2]
  if type(e) == 'userdata' then
    e = caught(e)
  elseif type(e) == 'table' then
    local text = e.err
    if type(text) == 'string' or type(text) == 'number' then e = text end
  end
  return false, e
end

redis.error_reply = error_reply
function redis.status_reply(...)
  if select('#', ...) ~= 1 or type((...)) ~= 'string' then
    return {err = 'ERR wrong number or type of arguments'}
  end
  return {ok = (...)}
end
env.redis = redis
env.cmsgpack = {unpack = unpack_msgpack}

std.setmetatable(env, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
  __newindex = function() error('Attempt to modify a readonly table', 2) end,
})
"#;

/// Where a script's `redis.call`s go during one call: a command's words in, its reply (or error
/// reply) out.
type Commands<'a> = dyn FnMut(&[Vec<u8>]) -> Result<Value, CommandError> + 'a;

/// A Lua state that keeps scripts by their SHA1 and runs them against a keyspace.
pub(crate) struct LuaRunner {
    lua: Lua,
    /// The globals of every script (its environment): the libraries, `redis`, `cmsgpack`, and
    /// `KEYS` and `ARGV`, set anew for each call. Reading a name it lacks, or writing any, fails.
    env: Table,
    /// The scripts' `redis`: its `call` and `pcall` are the functions of the call under way
    /// (none between calls).
    redis: Table,
    /// Lua's `xpcall`, which runs a script under [`on_error`].
    xpcall: Function,
    /// Turns whatever a script raised into Redis's error table, with the script's line.
    on_error: Function,
    /// The compiled scripts by SHA1 (lower-case hex). A `Function` holds its own reference in
    /// the Lua state, so a call neither compiles nor looks in the registry.
    scripts: HashMap<String, Function>,
}

impl LuaRunner {
    /// A Lua state with Redis's scripting globals and no scripts.
    ///
    /// # Errors
    /// The reason Lua did not start (it runs out of memory, at most).
    pub(crate) fn new() -> Result<LuaRunner, String> {
        let lua = Lua::new_with(StdLib::TABLE | StdLib::STRING | StdLib::MATH, LuaOptions::default())
            .map_err(|e| e.to_string())?;
        Self::with(lua).map_err(|e| e.to_string())
    }

    fn with(lua: Lua) -> mlua::Result<LuaRunner> {
        let env = lua.create_table()?;
        let redis = lua.create_table()?;
        let unpack_msgpack = lua.create_function(|lua, args: MultiValue| msgpack_unpack(lua, args))?;
        let error_reply = lua.create_function(|lua, args: MultiValue| error_reply(lua, args))?;
        let caught = lua.create_function(|lua, error: LuaValue| caught(lua, error))?;
        lua.load(PRELUDE).set_name(PRELUDE_CHUNK).set_mode(ChunkMode::Text).call::<()>((
            &env,
            lua.globals(),
            &redis,
            unpack_msgpack,
            error_reply,
            caught,
            BASE_GLOBALS.to_vec(),
        ))?;
        let tostring: Function = lua.globals().get("tostring")?;
        let on_error = lua.create_function(move |lua, error: LuaValue| on_error(lua, error, &tostring))?;
        let xpcall = lua.globals().get("xpcall")?;
        Ok(LuaRunner { lua, env, redis, xpcall, on_error, scripts: HashMap::new() })
    }

    /// `SCRIPT LOAD`: compiles `source` and keeps it under its SHA1, which it returns (loading a
    /// script it has already is only the SHA1).
    ///
    /// # Errors
    /// `ERR Error compiling script (new function): user_script:<line>: ...` for Lua that does
    /// not compile (or is not UTF-8, which a script of the redis crate always is).
    pub(crate) fn load(&mut self, source: &[u8]) -> Result<String, CommandError> {
        let text = std::str::from_utf8(source).map_err(|_| {
            CommandError(
                "ERR Error compiling script (new function): the embedded store takes UTF-8 scripts only".into(),
            )
        })?;
        let sha = redis::Script::new(text).get_hash().to_string();
        if !self.scripts.contains_key(&sha) {
            let function = self
                .lua
                .load(source)
                .set_name(SCRIPT_CHUNK)
                .set_mode(ChunkMode::Text)
                .set_environment(self.env.clone())
                .into_function()
                .map_err(|e| {
                    let message = match e {
                        mlua::Error::SyntaxError { message, .. } => message,
                        other => other.to_string(),
                    };
                    CommandError(one_line(&format!("ERR Error compiling script (new function): {message}")))
                })?;
            self.scripts.insert(sha.clone(), function);
        }
        Ok(sha)
    }

    /// `EVALSHA`: runs the script `sha` with `keys` as `KEYS` and `args` as `ARGV`, each
    /// `redis.call` and `redis.pcall` answered by `call`, and converts what it returns.
    ///
    /// # Errors
    /// [`NOSCRIPT`] for a script not loaded; the error a script returned or raised, as Redis
    /// words it (a raised one ends in `script: <sha>, on @user_script:<line>.`).
    pub(crate) fn eval_sha(
        &mut self,
        sha: &str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        call: &mut Commands<'_>,
    ) -> Result<Value, CommandError> {
        let sha = sha.to_ascii_lowercase();
        let Some(script) = self.scripts.get(&sha) else {
            return Err(CommandError(NOSCRIPT.into()));
        };
        let (ok, value) =
            self.run(script, keys, args, call).map_err(|e| CommandError(one_line(&format!("ERR {e}"))))?;
        if !ok {
            return Err(CommandError(failure(&self.lua, &sha, &value)));
        }
        match &value {
            LuaValue::Table(t) => match error_field(t) {
                Some(text) => Err(CommandError(text)),
                None => Ok(reply_of(&value, 0)),
            },
            _ => Ok(reply_of(&value, 0)),
        }
    }

    /// Runs `script` under `xpcall`: `(true, its value)` or `(false, the error table)`.
    fn run(
        &self,
        script: &Function,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        call: &mut Commands<'_>,
    ) -> mlua::Result<(bool, LuaValue)> {
        self.env.raw_set("KEYS", strings(&self.lua, keys)?)?;
        self.env.raw_set("ARGV", strings(&self.lua, args)?)?;
        let call = RefCell::new(call);
        self.lua.scope(|scope| {
            let raising =
                scope.create_function(|lua, argv: MultiValue| match command(lua, argv, &mut **call.borrow_mut())? {
                    Ok(reply) => Ok(reply),
                    Err(error) => Err(mlua::Error::external(Raised::Reply(error))),
                })?;
            let returning =
                scope.create_function(|lua, argv: MultiValue| match command(lua, argv, &mut **call.borrow_mut())? {
                    Ok(reply) => Ok(reply),
                    Err(error) => Ok(LuaValue::Table(error.table(lua)?)),
                })?;
            self.redis.raw_set("call", raising)?;
            self.redis.raw_set("pcall", returning)?;
            let outcome = self.xpcall.call::<(bool, LuaValue)>((script, &self.on_error));
            self.redis.raw_set("call", LuaValue::Nil)?;
            self.redis.raw_set("pcall", LuaValue::Nil)?;
            outcome
        })
    }
}

/// An error reply as a script receives it: `text` worded by `luaPushErrorBuff` (`CODE
/// message`), and whether a command answered it (Redis then marks it
/// `ignore_error_stats_update`) or the runner did (a call with no or bad arguments).
#[derive(Debug, Clone)]
struct ErrorReply {
    text: Vec<u8>,
    from_command: bool,
}

impl ErrorReply {
    /// A command's error reply, `reply` without its leading `-`.
    fn of_command(reply: &[u8]) -> ErrorReply {
        ErrorReply { text: error_text(&dashed(reply)), from_command: true }
    }

    /// The runner's own complaint (coded `ERR`).
    fn of_runner(message: &[u8]) -> ErrorReply {
        ErrorReply { text: error_text(message), from_command: false }
    }

    /// The Lua table Redis makes of it: `{err = text}`.
    fn table(&self, lua: &Lua) -> mlua::Result<Table> {
        let table = single_field(lua, "err", &self.text)?;
        if self.from_command {
            table.raw_set("ignore_error_stats_update", true)?;
        }
        Ok(table)
    }
}

/// What the runner's Rust functions raise, as Redis's C functions raise it: `redis.call`'s error
/// reply (a table on Redis), or a message that already names the script's line (a string on
/// Redis, from `luaL_error`).
#[derive(Debug)]
enum Raised {
    Reply(ErrorReply),
    Message(String),
}

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Raised::Reply(reply) => f.write_str(&String::from_utf8_lossy(&reply.text)),
            Raised::Message(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for Raised {}

/// What `pcall` hands a script for an error a Rust function raised: its text, as Redis's
/// `pcall` gives it (any other value as it is).
fn caught(lua: &Lua, error: LuaValue) -> mlua::Result<LuaValue> {
    let LuaValue::Error(error) = error else { return Ok(error) };
    let text = match error.downcast_ref::<Raised>() {
        Some(Raised::Reply(reply)) => reply.text.clone(),
        Some(Raised::Message(message)) => message.clone().into_bytes(),
        None => error.to_string().into_bytes(),
    };
    Ok(LuaValue::String(lua.create_string(text)?))
}

/// Where a Rust function was called from, as `luaL_where(L, 1)` writes it for an error message:
/// `user_script:3: `, or nothing when the caller is no Lua function.
fn caller_position(lua: &Lua) -> String {
    lua.inspect_stack(1, |frame| match (frame.source().short_src, frame.current_line()) {
        (Some(source), Some(line)) => format!("{source}:{line}: "),
        _ => String::new(),
    })
    .unwrap_or_default()
}

/// A Lua array of byte strings (`KEYS`, `ARGV`).
fn strings(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}

/// `redis.call` and `redis.pcall`: `argv` to the keyspace as bytes, and its reply back as Lua,
/// or the error reply for `redis.call` to raise and `redis.pcall` to return.
fn command(lua: &Lua, argv: MultiValue, call: &mut Commands<'_>) -> mlua::Result<Result<LuaValue, ErrorReply>> {
    if argv.is_empty() {
        return Ok(Err(ErrorReply::of_runner(b"Please specify at least one argument for this redis lib call")));
    }
    let mut words = Vec::with_capacity(argv.len());
    for arg in argv {
        words.push(match arg {
            LuaValue::String(s) => s.as_bytes().to_vec(),
            LuaValue::Integer(i) => number_argument(i as f64).into_bytes(),
            LuaValue::Number(n) => number_argument(n).into_bytes(),
            _ => return Ok(Err(ErrorReply::of_runner(b"Lua redis lib command arguments must be strings or integers"))),
        });
    }
    Ok(match call(&words) {
        Ok(Value::ServerError(e)) => Err(ErrorReply::of_command(&reply_error_text(&e))),
        Ok(reply) => Ok(lua_of(lua, reply, 0)?),
        Err(CommandError(text)) => Err(ErrorReply::of_command(text.as_bytes())),
    })
}

/// A number as Redis 7.0 passes it to a command: C's `%.17g`. (Redis 7.2 and Valkey print an
/// integer up to 2^62 in full and any other number in its shortest form, `0.1` where 7.0 writes
/// `0.10000000000000001`; the two agree on every integer below 10^17, which is all the wheel's
/// scripts pass.)
fn number_argument(n: f64) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "inf" } else { "-inf" }.into();
    }
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    const PRECISION: i32 = 17;
    let scientific = format!("{:.*e}", (PRECISION - 1) as usize, n);
    let (mantissa, exponent) = scientific.split_once('e').expect("Rust's {:e} writes an exponent");
    let exponent: i32 = exponent.parse().expect("Rust's {:e} writes a whole exponent");
    if !(-4..PRECISION).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", without_trailing_zeros(mantissa), exponent.abs())
    } else {
        let decimals = usize::try_from(PRECISION - 1 - exponent).expect("the exponent is below the precision");
        without_trailing_zeros(&format!("{n:.decimals$}")).to_string()
    }
}

/// `%g`'s trimming: the zeros after a decimal point, and the point if nothing is left after it.
fn without_trailing_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

/// A reply as Lua sees it (RESP2's forms: a keyspace answers no others, and the rest are read
/// as a RESP2 connection would carry them).
fn lua_of(lua: &Lua, reply: Value, depth: usize) -> mlua::Result<LuaValue> {
    if depth > MAX_NESTING {
        return Ok(LuaValue::Table(ErrorReply::of_runner(b"reached lua stack limit").table(lua)?));
    }
    Ok(match reply {
        Value::Nil => LuaValue::Boolean(false),
        Value::Int(i) => LuaValue::Number(i as f64),
        Value::BulkString(bytes) => LuaValue::String(lua.create_string(bytes)?),
        Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
            let table = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                table.raw_set(i + 1, lua_of(lua, item, depth + 1)?)?;
            }
            LuaValue::Table(table)
        }
        Value::Map(pairs) => {
            let table = lua.create_table_with_capacity(2 * pairs.len(), 0)?;
            for (i, (k, v)) in pairs.into_iter().enumerate() {
                table.raw_set(2 * i + 1, lua_of(lua, k, depth + 1)?)?;
                table.raw_set(2 * i + 2, lua_of(lua, v, depth + 1)?)?;
            }
            LuaValue::Table(table)
        }
        Value::SimpleString(text) => LuaValue::Table(single_field(lua, "ok", text.as_bytes())?),
        Value::Okay => LuaValue::Table(single_field(lua, "ok", b"OK")?),
        Value::ServerError(e) => LuaValue::Table(ErrorReply::of_command(&reply_error_text(&e)).table(lua)?),
        Value::Double(d) => LuaValue::String(lua.create_string(number_argument(d))?),
        Value::Boolean(b) => LuaValue::Number(if b { 1.0 } else { 0.0 }),
        Value::VerbatimString { text, .. } => LuaValue::String(lua.create_string(text)?),
        Value::Attribute { data, .. } => lua_of(lua, *data, depth)?,
        // RESP3's big numbers, and whatever the redis crate adds: no command of the keyspace
        // answers them.
        _ => LuaValue::Boolean(false),
    })
}

/// A table `{[field] = text}`.
fn single_field(lua: &Lua, field: &str, text: &[u8]) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(0, 1)?;
    table.raw_set(field, lua.create_string(text)?)?;
    Ok(table)
}

/// `luaPushErrorBuff`'s wording: `-CODE message` is `CODE message`, `-message` (no space) and
/// `message` are `ERR message`; the message is trimmed of line breaks.
fn error_text(text: &[u8]) -> Vec<u8> {
    let (code, message): (&[u8], &[u8]) = match text.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(space) => (&rest[..space], &rest[space + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", text),
    };
    let is_break = |b: &u8| *b == b'\r' || *b == b'\n';
    let start = message.iter().position(|b| !is_break(b)).unwrap_or(message.len());
    let end = message.iter().rposition(|b| !is_break(b)).map_or(start, |i| i + 1);
    let mut out = code.to_vec();
    out.push(b' ');
    out.extend_from_slice(&message[start..end]);
    out
}

/// `text` with the leading `-` of an error reply.
fn dashed(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 1);
    out.push(b'-');
    out.extend_from_slice(text);
    out
}

/// A server error value as the error reply it was: `CODE detail`.
fn reply_error_text(e: &redis::ServerError) -> Vec<u8> {
    match e.details() {
        Some(detail) => format!("{} {detail}", e.code()).into_bytes(),
        None => e.code().as_bytes().to_vec(),
    }
}

/// `redis.error_reply(text)`: `{err = text}` worded as an error reply, a leading `-` added when
/// missing.
fn error_reply(lua: &Lua, args: MultiValue) -> mlua::Result<Table> {
    let reply = match args.iter().collect::<Vec<_>>().as_slice() {
        [LuaValue::String(text)] if text.as_bytes().starts_with(b"-") => ErrorReply::of_runner(&text.as_bytes()),
        [LuaValue::String(text)] => ErrorReply::of_runner(&dashed(&text.as_bytes())),
        _ => ErrorReply::of_runner(b"wrong number or type of arguments"),
    };
    reply.table(lua)
}

/// The text of a table's `err` field, when it is a string: the table is an error reply, its
/// text as Redis sends it (line breaks made spaces).
fn error_field(table: &Table) -> Option<String> {
    match table.raw_get::<LuaValue>("err").ok()? {
        LuaValue::String(text) => Some(one_line(&String::from_utf8_lossy(&text.as_bytes()))),
        _ => None,
    }
}

/// `text` on one line, as an error or status reply must be: trimmed of line breaks at its ends,
/// those inside made spaces.
fn one_line(text: &str) -> String {
    text.trim_matches(['\r', '\n']).replace(['\r', '\n'], " ")
}

/// What a script returned, as a reply (`luaReplyToRedisReply`, for a RESP2 caller).
fn reply_of(value: &LuaValue, depth: usize) -> Value {
    match value {
        LuaValue::String(s) => Value::BulkString(s.as_bytes().to_vec()),
        LuaValue::Boolean(true) => Value::Int(1),
        LuaValue::Integer(i) => Value::Int(*i),
        LuaValue::Number(n) => Value::Int(integer_of(*n)),
        LuaValue::Table(_) if depth > MAX_NESTING => server_error("ERR reached lua stack limit"),
        LuaValue::Table(table) => table_reply(table, depth),
        _ => Value::Nil,
    }
}

/// A table a script returned: an error, a status, one of RESP3's forms that a RESP2 caller
/// reads (`double`, `big_number`, `verbatim_string`, `map`, `set`), or an array up to the
/// first nil. Redis looks at the fields in this order and without metamethods.
fn table_reply(table: &Table, depth: usize) -> Value {
    if let Some(text) = error_field(table) {
        return server_error(&text);
    }
    let field = |name: &str| table.raw_get::<LuaValue>(name).unwrap_or(LuaValue::Nil);
    if let LuaValue::String(ok) = field("ok") {
        return status(&one_line(&String::from_utf8_lossy(&ok.as_bytes())));
    }
    match field("double") {
        LuaValue::Number(d) => return Value::BulkString(number_argument(d).into_bytes()),
        LuaValue::Integer(i) => return Value::BulkString(number_argument(i as f64).into_bytes()),
        _ => {}
    }
    if let LuaValue::String(big) = field("big_number") {
        return Value::BulkString(one_line(&String::from_utf8_lossy(&big.as_bytes())).into_bytes());
    }
    if let LuaValue::Table(verbatim) = field("verbatim_string") {
        if let (Ok(LuaValue::String(_)), Ok(LuaValue::String(text))) =
            (verbatim.raw_get::<LuaValue>("format"), verbatim.raw_get::<LuaValue>("string"))
        {
            return Value::BulkString(text.as_bytes().to_vec());
        }
    }
    if let LuaValue::Table(map) = field("map") {
        let mut items = Vec::new();
        for (k, v) in map.pairs::<LuaValue, LuaValue>().flatten() {
            items.push(reply_of(&k, depth + 1));
            items.push(reply_of(&v, depth + 1));
        }
        return Value::Array(items);
    }
    if let LuaValue::Table(set) = field("set") {
        let items = set.pairs::<LuaValue, LuaValue>().flatten().map(|(k, _)| reply_of(&k, depth + 1)).collect();
        return Value::Array(items);
    }
    let mut items = Vec::new();
    for i in 1.. {
        match table.raw_get::<LuaValue>(i) {
            Ok(LuaValue::Nil) | Err(_) => break,
            Ok(item) => items.push(reply_of(&item, depth + 1)),
        }
    }
    Value::Array(items)
}

/// A Lua number as Redis's integer reply: C's `(long long)` cast, truncating toward zero; a
/// number out of range (or NaN) is what x86-64 makes of it, the least integer.
fn integer_of(n: f64) -> i64 {
    const TWO_TO_63: f64 = 9_223_372_036_854_775_808.0;
    if n.is_nan() || !(-TWO_TO_63..TWO_TO_63).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

/// A status reply, read as the redis crate reads one (`+OK` is [`Value::Okay`]).
fn status(text: &str) -> Value {
    if text == "OK" {
        Value::Okay
    } else {
        Value::SimpleString(text.to_string())
    }
}

/// An error reply inside an array, read as the redis crate reads one.
fn server_error(text: &str) -> Value {
    match redis::parse_redis_value(format!("-{text}\r\n").as_bytes()) {
        Ok(value @ Value::ServerError(_)) => value,
        _ => Value::SimpleString(text.to_string()),
    }
}

/// The message handler a script runs under (Redis's `__redis__err__handler`): what was raised
/// becomes `{err = ...}` (an error reply of `redis.call` as it is, a string or any other value as
/// `ERR <it>`), with the script's source and line where it was raised.
fn on_error(lua: &Lua, error: LuaValue, tostring: &Function) -> mlua::Result<Table> {
    let table = match error {
        LuaValue::Table(table) => table,
        LuaValue::Error(error) => match error.downcast_ref::<Raised>() {
            Some(Raised::Reply(reply)) => reply.table(lua)?,
            Some(Raised::Message(message)) => single_field(lua, "err", format!("ERR {message}").as_bytes())?,
            None => single_field(lua, "err", format!("ERR {error}").as_bytes())?,
        },
        other => {
            let text: LuaString = tostring.call(other)?;
            single_field(lua, "err", &[&b"ERR "[..], &text.as_bytes()].concat())?
        }
    };
    if let Some((source, line)) = script_frame(lua) {
        table.raw_set("source", source)?;
        table.raw_set("line", line)?;
    }
    Ok(table)
}

/// The source and line of the script's frame nearest the error: the first frame, from the
/// handler up, that is neither a C function (`error`, a library's) nor the runner's own Lua.
fn script_frame(lua: &Lua) -> Option<(String, usize)> {
    for level in 1.. {
        let (what, source, line) = lua.inspect_stack(level, |frame| {
            let source = frame.source();
            (source.what, source.source.map(|s| s.into_owned()), frame.current_line())
        })?;
        match (what, source, line) {
            ("C" | "tail", ..) => continue,
            (_, Some(source), _) if source == PRELUDE_CHUNK => continue,
            (_, Some(source), Some(line)) => return Some((source, line)),
            _ => return None,
        }
    }
    None
}

/// The error reply of a script that raised `error` (the table [`on_error`] made): its text, and
/// where it was raised, `... script: <sha>, on @user_script:<line>.`.
fn failure(lua: &Lua, sha: &str, error: &LuaValue) -> String {
    let LuaValue::Table(table) = error else {
        let text = match error {
            LuaValue::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            _ => "execution failure".into(),
        };
        return one_line(&format!("ERR Error running script {sha}, {text}"));
    };
    // Redis takes any `err` that Lua reads as a string (a number too, in Lua's own form).
    let text = match table.get::<LuaValue>("err") {
        Ok(err @ (LuaValue::String(_) | LuaValue::Number(_) | LuaValue::Integer(_))) => match lua.coerce_string(err) {
            Ok(Some(s)) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            _ => "ERR unknown error".into(),
        },
        _ => "ERR unknown error".into(),
    };
    let source = table.get::<Option<String>>("source").ok().flatten();
    let line = table.get::<Option<i64>>("line").ok().flatten();
    match (source, line) {
        (Some(source), Some(line)) => one_line(&format!("{text} script: {sha}, on {source}:{line}.")),
        _ => one_line(&text),
    }
}

/// `cmsgpack.unpack(bytes)`: every MessagePack object in `bytes`, as Lua values (arrays and maps
/// as tables, integers and floats as numbers, strings and binaries as strings).
fn msgpack_unpack(lua: &Lua, args: MultiValue) -> mlua::Result<Variadic<LuaValue>> {
    let raise =
        |message: &str| Err(mlua::Error::external(Raised::Message(format!("{}{message}", caller_position(lua)))));
    // `luaL_checklstring`: a string, or a number in Lua's own form.
    let bytes = match args.front() {
        Some(LuaValue::String(s)) => s.as_bytes().to_vec(),
        Some(number @ (LuaValue::Integer(_) | LuaValue::Number(_))) => match lua.coerce_string(number.clone())? {
            Some(s) => s.as_bytes().to_vec(),
            None => Vec::new(),
        },
        other => {
            let got = other.map_or("no value", LuaValue::type_name);
            return raise(&format!("bad argument #1 to 'unpack' (string expected, got {got})"));
        }
    };
    let mut reader = MsgpackReader { bytes: &bytes, at: 0 };
    let mut values = Vec::new();
    while reader.at < bytes.len() {
        match reader.value(lua, 0)? {
            Ok(value) => values.push(value),
            Err(message) => return raise(message),
        }
    }
    Ok(Variadic::from(values))
}

/// Reads MessagePack from `bytes`, as Redis's `lua_cmsgpack` decodes it.
struct MsgpackReader<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// `lua_cmsgpack`'s errors.
const MISSING_BYTES: &str = "Missing bytes in input.";
const BAD_FORMAT: &str = "Bad data format in input.";

impl MsgpackReader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], &'static str> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len()).ok_or(MISSING_BYTES)?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn uint(&mut self, width: usize) -> Result<u64, &'static str> {
        Ok(self.take(width)?.iter().fold(0, |n, &b| (n << 8) | u64::from(b)))
    }

    /// The next object: `Ok(Err(message))` for input `lua_cmsgpack` refuses.
    fn value(&mut self, lua: &Lua, depth: usize) -> mlua::Result<Result<LuaValue, &'static str>> {
        if depth > MAX_NESTING {
            return Ok(Err(BAD_FORMAT));
        }
        let tag = match self.take(1) {
            Ok(tag) => tag[0],
            Err(e) => return Ok(Err(e)),
        };
        let number = |n: f64| Ok(Ok(LuaValue::Number(n)));
        macro_rules! read {
            ($e:expr) => {
                match $e {
                    Ok(v) => v,
                    Err(e) => return Ok(Err(e)),
                }
            };
        }
        match tag {
            0x00..=0x7f => number(f64::from(tag)),
            0xe0..=0xff => number(f64::from(tag as i8)),
            0x80..=0x8f => self.map(lua, usize::from(tag & 0x0f), depth),
            0x90..=0x9f => self.array(lua, usize::from(tag & 0x0f), depth),
            0xa0..=0xbf => self.string(lua, usize::from(tag & 0x1f)),
            0xc0 => Ok(Ok(LuaValue::Nil)),
            0xc2 => Ok(Ok(LuaValue::Boolean(false))),
            0xc3 => Ok(Ok(LuaValue::Boolean(true))),
            0xc4 | 0xd9 => {
                let n = read!(self.uint(1));
                self.string(lua, n as usize)
            }
            0xc5 | 0xda => {
                let n = read!(self.uint(2));
                self.string(lua, n as usize)
            }
            0xc6 | 0xdb => {
                let n = read!(self.uint(4));
                self.string(lua, n as usize)
            }
            0xca => number(f64::from(f32::from_bits(read!(self.uint(4)) as u32))),
            0xcb => number(f64::from_bits(read!(self.uint(8)))),
            0xcc => number(read!(self.uint(1)) as f64),
            0xcd => number(read!(self.uint(2)) as f64),
            0xce => number(read!(self.uint(4)) as f64),
            0xcf => number(read!(self.uint(8)) as f64),
            0xd0 => number(f64::from(read!(self.uint(1)) as u8 as i8)),
            0xd1 => number(f64::from(read!(self.uint(2)) as u16 as i16)),
            0xd2 => number(f64::from(read!(self.uint(4)) as u32 as i32)),
            0xd3 => number(read!(self.uint(8)) as i64 as f64),
            0xdc => {
                let n = read!(self.uint(2));
                self.array(lua, n as usize, depth)
            }
            0xdd => {
                let n = read!(self.uint(4));
                self.array(lua, n as usize, depth)
            }
            0xde => {
                let n = read!(self.uint(2));
                self.map(lua, n as usize, depth)
            }
            0xdf => {
                let n = read!(self.uint(4));
                self.map(lua, n as usize, depth)
            }
            _ => Ok(Err(BAD_FORMAT)),
        }
    }

    fn string(&mut self, lua: &Lua, len: usize) -> mlua::Result<Result<LuaValue, &'static str>> {
        match self.take(len) {
            Ok(bytes) => Ok(Ok(LuaValue::String(lua.create_string(bytes)?))),
            Err(e) => Ok(Err(e)),
        }
    }

    fn array(&mut self, lua: &Lua, len: usize, depth: usize) -> mlua::Result<Result<LuaValue, &'static str>> {
        // Each element takes a byte at least: a length beyond what is left is cut input.
        let table = lua.create_table_with_capacity(len.min(self.bytes.len() - self.at), 0)?;
        for i in 1..=len {
            match self.value(lua, depth + 1)? {
                Ok(value) => table.raw_set(i, value)?,
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(LuaValue::Table(table)))
    }

    fn map(&mut self, lua: &Lua, len: usize, depth: usize) -> mlua::Result<Result<LuaValue, &'static str>> {
        let table = lua.create_table_with_capacity(0, len.min(self.bytes.len() - self.at))?;
        for _ in 0..len {
            let key = match self.value(lua, depth + 1)? {
                Ok(key) => key,
                Err(e) => return Ok(Err(e)),
            };
            let value = match self.value(lua, depth + 1)? {
                Ok(value) => value,
                Err(e) => return Ok(Err(e)),
            };
            match key {
                LuaValue::Nil => return Ok(Err("table index is nil")),
                LuaValue::Number(n) if n.is_nan() => return Ok(Err("table index is NaN")),
                key => table.raw_set(key, value)?,
            }
        }
        Ok(Ok(LuaValue::Table(table)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::durable::store::scripts::{assemble, packed};

    /// A keyspace of strings, hashes and lists in memory, for the commands these tests' scripts
    /// use, answered and worded as Redis 7 answers a script.
    #[derive(Default)]
    struct Fixture {
        data: HashMap<Vec<u8>, Entry>,
    }

    enum Entry {
        Text(Vec<u8>),
        Hash(Vec<(Vec<u8>, Vec<u8>)>),
        List(Vec<Vec<u8>>),
    }

    fn error(text: &str) -> CommandError {
        CommandError(text.into())
    }

    const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
    const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";

    /// A whole number as Redis reads one (`string2ll`: no sign but `-`, no leading zero).
    fn integer(bytes: &[u8]) -> Result<i64, CommandError> {
        let text = std::str::from_utf8(bytes).map_err(|_| error(NOT_AN_INTEGER))?;
        let digits = text.strip_prefix('-').unwrap_or(text);
        let canonical = text == "0" || digits.starts_with(|c: char| ('1'..='9').contains(&c));
        if !canonical || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(error(NOT_AN_INTEGER));
        }
        text.parse().map_err(|_| error(NOT_AN_INTEGER))
    }

    impl Fixture {
        fn command(&mut self, argv: &[Vec<u8>]) -> Result<Value, CommandError> {
            let name = argv[0].to_ascii_uppercase();
            let arity = match name.as_slice() {
                b"ECHO" | b"GET" => argv.len() == 2,
                b"SET" | b"INCRBY" | b"HGET" => argv.len() == 3,
                b"LRANGE" => argv.len() == 4,
                b"HSET" => argv.len() >= 4 && argv.len().is_multiple_of(2),
                b"RPUSH" => argv.len() >= 3,
                _ => return Err(error("ERR Unknown Redis command called from script")),
            };
            if !arity {
                return Err(error("ERR Wrong number of args calling Redis command from script"));
            }
            let key = argv[1].clone();
            match name.as_slice() {
                b"ECHO" => Ok(Value::BulkString(key)),
                b"GET" => match self.data.get(&key) {
                    None => Ok(Value::Nil),
                    Some(Entry::Text(v)) => Ok(Value::BulkString(v.clone())),
                    Some(_) => Err(error(WRONGTYPE)),
                },
                b"SET" => {
                    self.data.insert(key, Entry::Text(argv[2].clone()));
                    Ok(Value::Okay)
                }
                b"INCRBY" => {
                    let by = integer(&argv[2])?;
                    let now = match self.data.get(&key) {
                        None => 0,
                        Some(Entry::Text(v)) => integer(v)?,
                        Some(_) => return Err(error(WRONGTYPE)),
                    };
                    let next = now.checked_add(by).ok_or_else(|| error("ERR increment or decrement would overflow"))?;
                    self.data.insert(key, Entry::Text(next.to_string().into_bytes()));
                    Ok(Value::Int(next))
                }
                b"HSET" => {
                    let Entry::Hash(fields) = self.data.entry(key).or_insert_with(|| Entry::Hash(Vec::new())) else {
                        return Err(error(WRONGTYPE));
                    };
                    let mut added = 0;
                    for pair in argv[2..].chunks(2) {
                        match fields.iter_mut().find(|(f, _)| *f == pair[0]) {
                            Some((_, v)) => *v = pair[1].clone(),
                            None => {
                                fields.push((pair[0].clone(), pair[1].clone()));
                                added += 1;
                            }
                        }
                    }
                    Ok(Value::Int(added))
                }
                b"HGET" => match self.data.get(&key) {
                    None => Ok(Value::Nil),
                    Some(Entry::Hash(fields)) => Ok(fields
                        .iter()
                        .find(|(f, _)| *f == argv[2])
                        .map_or(Value::Nil, |(_, v)| Value::BulkString(v.clone()))),
                    Some(_) => Err(error(WRONGTYPE)),
                },
                b"RPUSH" => {
                    let Entry::List(items) = self.data.entry(key).or_insert_with(|| Entry::List(Vec::new())) else {
                        return Err(error(WRONGTYPE));
                    };
                    items.extend(argv[2..].iter().cloned());
                    Ok(Value::Int(items.len() as i64))
                }
                b"LRANGE" => {
                    let (start, stop) = (integer(&argv[2])?, integer(&argv[3])?);
                    let items = match self.data.get(&key) {
                        None => return Ok(Value::Array(Vec::new())),
                        Some(Entry::List(items)) => items,
                        Some(_) => return Err(error(WRONGTYPE)),
                    };
                    let len = items.len() as i64;
                    let at = |i: i64| if i < 0 { (len + i).max(0) } else { i };
                    let (start, stop) = (at(start), at(stop).min(len - 1));
                    if start > stop {
                        return Ok(Value::Array(Vec::new()));
                    }
                    let range = start as usize..=stop as usize;
                    Ok(Value::Array(items[range].iter().cloned().map(Value::BulkString).collect()))
                }
                _ => unreachable!("refused above"),
            }
        }
    }

    /// `script` loaded into `runner` and run on `fixture`, an error as its text.
    fn run_on(
        runner: &mut LuaRunner,
        fixture: &mut Fixture,
        script: &str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<Value, String> {
        let sha = runner.load(script.as_bytes()).map_err(|e| e.0)?;
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        runner.eval_sha(&sha, &keys, &args, &mut |argv| fixture.command(argv)).map_err(|e| e.0)
    }

    /// `script` run on a fresh runner and an empty fixture.
    fn run(script: &str, keys: &[&str], args: &[&[u8]]) -> Result<Value, String> {
        run_on(&mut LuaRunner::new().unwrap(), &mut Fixture::default(), script, keys, args)
    }

    fn sha(script: &str) -> String {
        redis::Script::new(script).get_hash().to_string()
    }

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    /// The Lua the crate's own tests put before every script (`KEYS_CHECK`, private to the
    /// scripts module), read from its source: a Rust string continued over lines with `\`.
    fn keys_check() -> String {
        let source = include_str!("../scripts/mod.rs");
        let opening = "const KEYS_CHECK: &str = \"";
        let start = source.find(opening).expect("scripts/mod.rs defines KEYS_CHECK") + opening.len();
        let end = start + source[start..].find("\";").expect("KEYS_CHECK ends");
        let mut parts = source[start..end].split("\\\n");
        let mut text = parts.next().unwrap_or_default().to_string();
        parts.for_each(|part| text.push_str(part.trim_start()));
        assert!(text.starts_with("local redis = ") && !text.contains('\n'), "{text}");
        text
    }

    /// Every script of the crate, assembled as it is loaded (the file name, the Lua).
    fn crate_scripts() -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/durable/store/lua");
        let mut scripts: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "lua"))
            .map(|path| {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, assemble(&std::fs::read_to_string(&path).unwrap()))
            })
            .collect();
        scripts.sort();
        scripts
    }

    #[test]
    fn every_script_of_the_crate_compiles() {
        let mut runner = LuaRunner::new().unwrap();
        let scripts = crate_scripts();
        assert!(scripts.len() >= 20, "{} scripts in src/durable/store/lua", scripts.len());
        for (name, script) in &scripts {
            for text in [script.clone(), format!("{} {script}", keys_check())] {
                let loaded = runner.load(text.as_bytes()).unwrap_or_else(|e| panic!("{name}: {}", e.0));
                assert_eq!(loaded, sha(&text), "{name}");
            }
        }
        assert_eq!(runner.scripts.len(), 2 * scripts.len());
    }

    #[test]
    fn a_script_is_compiled_once_by_its_sha() {
        let mut runner = LuaRunner::new().unwrap();
        let first = runner.load(b"return 1").unwrap();
        assert_eq!(runner.load(b"return 1").unwrap(), first);
        assert_eq!(runner.scripts.len(), 1);
        assert_eq!(first, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }

    #[test]
    fn a_script_that_does_not_compile_is_refused() {
        let e = LuaRunner::new().unwrap().load(b"return (").unwrap_err();
        assert_eq!(e.0, "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'");
        let e = LuaRunner::new().unwrap().load(b"\x1bLua binary").unwrap_err();
        assert!(e.0.starts_with("ERR Error compiling script (new function): "), "{}", e.0);
    }

    #[test]
    fn an_unknown_sha_is_noscript() {
        let mut runner = LuaRunner::new().unwrap();
        let mut never = |_: &[Vec<u8>]| -> Result<Value, CommandError> { panic!("no command runs") };
        let e = runner.eval_sha(&sha("return 1"), &[], &[], &mut never).unwrap_err();
        assert_eq!(e.0, "NOSCRIPT No matching script. Please use EVAL.");
        let loaded = runner.load(b"return 1").unwrap();
        assert_eq!(runner.eval_sha(&loaded.to_ascii_uppercase(), &[], &[], &mut never), Ok(Value::Int(1)));
    }

    /// Each kind of reply, as the script sees it.
    #[test]
    fn replies_reach_lua_as_redis_gives_them() {
        let mut runner = LuaRunner::new().unwrap();
        let script = "local function show(v) \
              if type(v) ~= 'table' then return type(v) .. ':' .. tostring(v) end \
              if v.ok then return 'ok:' .. v.ok end \
              if v.err then return 'err:' .. v.err end \
              local parts = {} for i = 1, #v do parts[i] = show(v[i]) end \
              return '[' .. table.concat(parts, ',') .. ']' end \
            local out = {} \
            for i, name in ipairs(ARGV) do out[i] = show(redis.call(name)) end \
            return out";
        let sha = runner.load(script.as_bytes()).unwrap();
        let names = ["INT", "BULK", "NIL", "STATUS", "OKAY", "ARRAY", "NESTED", "MAP", "DOUBLE", "TRUE"];
        let mut canned = |argv: &[Vec<u8>]| -> Result<Value, CommandError> {
            Ok(match argv[0].as_slice() {
                b"INT" => Value::Int(-7),
                b"BULK" => Value::BulkString(b"a\0b".to_vec()),
                b"NIL" => Value::Nil,
                b"STATUS" => Value::SimpleString("QUEUED".into()),
                b"OKAY" => Value::Okay,
                b"ARRAY" => Value::Array(vec![Value::Int(1), Value::Nil, Value::Array(vec![bulk("x")])]),
                b"NESTED" => Value::Array(vec![server_error("WRONGTYPE inside")]),
                b"MAP" => Value::Map(vec![(bulk("k"), Value::Int(2))]),
                b"DOUBLE" => Value::Double(2.5),
                b"TRUE" => Value::Boolean(true),
                other => panic!("{other:?}"),
            })
        };
        let args: Vec<Vec<u8>> = names.iter().map(|n| n.as_bytes().to_vec()).collect();
        let reply = runner.eval_sha(&sha, &[], &args, &mut canned).unwrap();
        let expected = [
            "number:-7",
            "string:a\0b",
            "boolean:false",
            "ok:QUEUED",
            "ok:OK",
            "[number:1,boolean:false,[string:x]]",
            "[err:WRONGTYPE inside]",
            "[string:k,number:2]",
            "string:2.5",
            "number:1",
        ];
        assert_eq!(reply, Value::Array(expected.iter().map(|e| bulk(e)).collect()));
    }

    /// What a script returns, as the reply Redis makes of it.
    #[test]
    fn script_values_become_replies_as_redis_makes_them() {
        let reply = run(
            "return {1, 2.9, -2.9, 'a', true, false, {ok = 'fine'}, {ok = 'OK'}, {err = 'bad news'}, {}, {7}, \
             1e300, -1e300, 0/0, 2^62, {err = 5}, nil, 'after the nil'}",
            &[],
            &[],
        );
        let expected = Value::Array(vec![
            Value::Int(1),
            Value::Int(2),
            Value::Int(-2),
            bulk("a"),
            Value::Int(1),
            Value::Nil,
            Value::SimpleString("fine".into()),
            Value::Okay,
            server_error("bad news"),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(7)]),
            Value::Int(i64::MIN),
            Value::Int(i64::MIN),
            Value::Int(i64::MIN),
            Value::Int(1 << 62),
            Value::Array(vec![]),
        ]);
        assert_eq!(reply, Ok(expected));
        assert_eq!(run("return", &[], &[]), Ok(Value::Nil));
        assert_eq!(run("return nil", &[], &[]), Ok(Value::Nil));
        assert_eq!(run("return 'one', 'two'", &[], &[]), Ok(bulk("one")));
        assert_eq!(run("return {ok = 'a\\r\\nb'}", &[], &[]), Ok(Value::SimpleString("a  b".into())));
        assert_eq!(run("return {err = 'plain'}", &[], &[]), Err("plain".into()));
        assert_eq!(run("return redis.status_reply('x y')", &[], &[]), Ok(Value::SimpleString("x y".into())));
        assert_eq!(run("return {double = 0.5}", &[], &[]), Ok(bulk("0.5")));
        assert_eq!(run("return ARGV[1]", &[], &[b"\0\xff\n"]), Ok(Value::BulkString(b"\0\xff\n".to_vec())));
    }

    #[test]
    fn error_replies_are_worded_as_redis_words_them() {
        let cases = [
            ("return redis.error_reply('boom')", "ERR boom"),
            ("return redis.error_reply('boom bar')", "boom bar"),
            ("return redis.error_reply('-X y')", "X y"),
            ("return redis.error_reply('-X')", "ERR X"),
            ("return redis.error_reply(1)", "ERR wrong number or type of arguments"),
            ("return redis.status_reply()", "ERR wrong number or type of arguments"),
        ];
        for (script, expected) in cases {
            assert_eq!(run(script, &[], &[]), Err(expected.to_string()), "{script}");
        }
    }

    /// `redis.call` ends the script with a command's error, its line appended; `redis.pcall`
    /// hands the error to the script, and so does `pcall`, as its text.
    #[test]
    fn call_raises_what_pcall_returns() {
        let raising = "redis.call('SET', KEYS[1], 'x')\nreturn redis.call('INCRBY', KEYS[1], 1)";
        let expected = format!("{NOT_AN_INTEGER} script: {}, on @user_script:2.", sha(raising));
        assert_eq!(run(raising, &["k"], &[]), Err(expected));

        let caught = "local r = redis.pcall('INCRBY', KEYS[1], 'x') \
                      return {type(r), r.err, tostring(r.ignore_error_stats_update)}";
        let reply = Value::Array(vec![bulk("table"), bulk(NOT_AN_INTEGER), bulk("true")]);
        assert_eq!(run(caught, &["k"], &[]), Ok(reply));
        assert_eq!(run("return redis.pcall('INCRBY', KEYS[1], 'x')", &["k"], &[]), Err(NOT_AN_INTEGER.into()));

        let pcall = "local ok, e = pcall(redis.call, 'INCRBY', KEYS[1], 'x') return {tostring(ok), e}";
        assert_eq!(run(pcall, &["k"], &[]), Ok(Value::Array(vec![bulk("false"), bulk(NOT_AN_INTEGER)])));
        let plain = "local ok, e = pcall(error, 'x') local fine = {pcall(function() return 1, 2 end)} \
                     return {tostring(ok), e, #fine}";
        assert_eq!(run(plain, &[], &[]), Ok(Value::Array(vec![bulk("false"), bulk("x"), Value::Int(3)])));

        let nested = "local function deeper()\n  return redis.call('INCRBY', KEYS[1], 'x')\nend\nreturn deeper()";
        let expected = format!("{NOT_AN_INTEGER} script: {}, on @user_script:2.", sha(nested));
        assert_eq!(run(nested, &["k"], &[]), Err(expected));

        let wrong = "return redis.call('GET', KEYS[1], 'extra')";
        let expected = format!(
            "ERR Wrong number of args calling Redis command from script script: {}, on @user_script:1.",
            sha(wrong)
        );
        assert_eq!(run(wrong, &["k"], &[]), Err(expected));
    }

    #[test]
    fn a_raised_error_names_the_script_and_line() {
        let cases = [
            ("error('boom')", "ERR user_script:1: boom"),
            ("error(12)", "ERR user_script:1: 12"),
            ("error()", "ERR nil"),
            ("error('x', 0)", "ERR x"),
            ("error(redis.error_reply('x y'))", "x y"),
            ("error({err = 5})", "5"),
            ("\n\nlocal t = nil return t.x", "ERR user_script:3: attempt to index local 't' (a nil value)"),
            ("x = 1 return 1", "ERR user_script:1: Attempt to modify a readonly table"),
            ("return y", "ERR user_script:1: Script attempted to access nonexistent global variable 'y'"),
            ("return redis.call()", "ERR Please specify at least one argument for this redis lib call"),
            ("return redis.call('ECHO', {})", "ERR Lua redis lib command arguments must be strings or integers"),
            ("return redis.call('NOPE')", "ERR Unknown Redis command called from script"),
            (
                "return cmsgpack.unpack()",
                "ERR user_script:1: bad argument #1 to 'unpack' (string expected, got no value)",
            ),
        ];
        for (script, text) in cases {
            let line = script.matches('\n').count() + 1;
            let expected = format!("{text} script: {}, on @user_script:{line}.", sha(script));
            assert_eq!(run(script, &[], &[]), Err(expected), "{script}");
        }
    }

    /// A number goes to a command as Redis 7.0 prints it (`%.17g`).
    #[test]
    fn numbers_go_to_commands_as_redis_prints_them() {
        let cases = [
            ("3", "3"),
            ("-7", "-7"),
            ("2.5", "2.5"),
            ("0.1", "0.10000000000000001"),
            ("1e15", "1000000000000000"),
            ("1e16", "10000000000000000"),
            ("1e17", "1e+17"),
            ("123456789012345678", "1.2345678901234568e+17"),
            ("2^53 + 1", "9007199254740992"),
            ("1e-5", "1.0000000000000001e-05"),
            ("1e-4", "0.0001"),
            ("1e300", "1.0000000000000001e+300"),
            ("-0.0", "-0"),
            ("1/0", "inf"),
            ("-1/0", "-inf"),
            ("0/0", "-nan"),
        ];
        for (lua, printed) in cases {
            let script = format!("return redis.call('ECHO', {lua})");
            assert_eq!(run(&script, &[], &[]), Ok(bulk(printed)), "{lua}");
        }
        assert_eq!(number_argument(f64::MAX), "1.7976931348623157e+308");
        assert_eq!(number_argument(5e-324), "4.9406564584124654e-324");
        assert_eq!(number_argument(123.456), "123.456");
        assert_eq!(number_argument(-1.5e-7), "-1.4999999999999999e-07");
    }

    /// `KEYS` and `ARGV` are each call's own, and no global a script tries to leave survives it.
    #[test]
    fn each_call_sees_only_its_own_keys_and_args() {
        let mut runner = LuaRunner::new().unwrap();
        let mut fixture = Fixture::default();
        let script = "return {#KEYS, #ARGV, KEYS[1] or '-', ARGV[2] or '-'}";
        let first = run_on(&mut runner, &mut fixture, script, &["a", "b"], &[b"1", b"2", b"3"]);
        assert_eq!(first, Ok(Value::Array(vec![Value::Int(2), Value::Int(3), bulk("a"), bulk("2")])));
        let second = run_on(&mut runner, &mut fixture, script, &[], &[b"x"]);
        assert_eq!(second, Ok(Value::Array(vec![Value::Int(0), Value::Int(1), bulk("-"), bulk("-")])));

        assert!(run_on(&mut runner, &mut fixture, "leaked = 1", &[], &[]).is_err());
        assert!(run_on(&mut runner, &mut fixture, "rawset(_G, 'KEYS', nil) return 1", &[], &[]).is_ok());
        let after = run_on(&mut runner, &mut fixture, "return {type(leaked), #KEYS}", &["k"], &[]);
        assert!(after.unwrap_err().contains("nonexistent global variable 'leaked'"));
        let keys = run_on(&mut runner, &mut fixture, "return #KEYS", &["k"], &[]);
        assert_eq!(keys, Ok(Value::Int(1)));

        // The call's command function is the one of that call.
        let writes = "return redis.call('INCRBY', KEYS[1], 1)";
        assert_eq!(run_on(&mut runner, &mut fixture, writes, &["n"], &[]), Ok(Value::Int(1)));
        let mut other = Fixture::default();
        assert_eq!(run_on(&mut runner, &mut other, writes, &["n"], &[]), Ok(Value::Int(1)));
        assert_eq!(run_on(&mut runner, &mut fixture, writes, &["n"], &[]), Ok(Value::Int(2)));
    }

    /// A script that fails, however it fails, leaves the runner as it was for the next.
    #[test]
    fn a_failed_call_leaves_the_runner_usable() {
        let mut runner = LuaRunner::new().unwrap();
        let mut fixture = Fixture::default();
        for _ in 0..3 {
            assert!(run_on(&mut runner, &mut fixture, "error('x')", &[], &[]).is_err());
            assert!(run_on(&mut runner, &mut fixture, "return redis.call('NOPE')", &[], &[]).is_err());
            assert_eq!(run_on(&mut runner, &mut fixture, "return redis.call('ECHO', 'y')", &[], &[]), Ok(bulk("y")));
        }
    }

    #[test]
    fn a_table_that_holds_itself_is_cut() {
        let Ok(mut reply) = run("local t = {} t[1] = t return t", &[], &[]) else { panic!("a reply") };
        let mut depth = 0;
        while let Value::Array(mut items) = reply {
            assert_eq!(items.len(), 1);
            reply = items.pop().unwrap();
            depth += 1;
        }
        assert_eq!(depth, MAX_NESTING + 1);
        assert_eq!(reply, server_error("ERR reached lua stack limit"));
    }

    /// The script of the scripts module's test `packed_numbers_read_back_in_a_script`.
    const READ_PACKED: &str = "local t = cmsgpack.unpack(ARGV[1]) local out = {} \
        for j = 1, #t do out[j] = string.format('%d', t[j]) end return {#t, table.concat(out, ',')}";

    fn packed_cases() -> Vec<Vec<u64>> {
        let edges = [0, 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x1_0000, 0xffff_ffff, 0x1_0000_0000];
        let max = crate::durable::time::MAX_DUE_MS - 1;
        [0, 1, 15, 16, 0xffff, 0x1_0000]
            .into_iter()
            .map(|len| edges.iter().copied().chain([max]).cycle().take(len).collect())
            .collect()
    }

    #[test]
    fn cmsgpack_reads_what_packed_writes() {
        let mut runner = LuaRunner::new().unwrap();
        let mut fixture = Fixture::default();
        for values in packed_cases() {
            let bytes = packed(values.iter().copied());
            let reply = run_on(&mut runner, &mut fixture, READ_PACKED, &[], &[&bytes]).unwrap();
            let Value::Array(parts) = reply else { panic!("{reply:?}") };
            assert_eq!(parts[0], Value::Int(values.len() as i64));
            let Value::BulkString(text) = &parts[1] else { panic!("{parts:?}") };
            let back: Vec<u64> = std::str::from_utf8(text)
                .unwrap()
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            assert_eq!(back, values, "{} values", values.len());
        }
    }

    #[test]
    fn cmsgpack_reads_every_kind_of_value() {
        let mut bytes = vec![0x9f, 0xc0, 0xc2, 0xc3, 0xff, 0xd0, 0x80, 0xd1, 0x80, 0x00, 0xd2, 0xff, 0xff, 0xff, 0xfe];
        bytes.extend([0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfd]);
        bytes.extend([0xca, 0x3f, 0xc0, 0x00, 0x00]); // 1.5f32
        bytes.extend([0xcb]);
        bytes.extend(0.25f64.to_be_bytes());
        bytes.extend([0xa2, b'h', b'i', 0xd9, 1, b'x', 0xda, 0, 1, b'y', 0xc4, 2, 0, 0xff]);
        bytes.extend([0x82, 0xa1, b'k', 7, 1, 0xa1, b'v']); // {k = 7, [1] = 'v'}
        bytes.extend([0xde, 0, 0, 0xdc, 0, 1, 0x05]); // {}, {5}
        let script = "local t = cmsgpack.unpack(ARGV[1]) local out = {} \
            for i = 1, 15 do local v = t[i] \
              if type(v) == 'table' then local keys = {} \
                for k, x in pairs(v) do keys[#keys + 1] = tostring(k) .. '=' .. tostring(x) end \
                table.sort(keys) v = '{' .. table.concat(keys, ',') .. '}' end \
              out[i] = type(v) .. ':' .. tostring(v) end \
            return out";
        let expected = [
            "nil:nil",
            "boolean:false",
            "boolean:true",
            "number:-1",
            "number:-128",
            "number:-32768",
            "number:-2",
            "number:-3",
            "number:1.5",
            "number:0.25",
            "string:hi",
            "string:x",
            "string:y",
            "string:\0\u{ff}",
            "string:{1=v,k=7}",
        ];
        let reply = run(script, &[], &[&bytes]).unwrap();
        let Value::Array(items) = reply else { panic!("{reply:?}") };
        let texts: Vec<String> = items
            .iter()
            .map(|v| match v {
                Value::BulkString(b) => b.iter().map(|&c| char::from(c)).collect(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(texts, expected);

        let many = run("return {cmsgpack.unpack(ARGV[1])}", &[], &[b"\x01\x02\xc0\x03"]);
        assert_eq!(many, Ok(Value::Array(vec![Value::Int(1), Value::Int(2)])));
        for (bytes, message) in [(&b"\xcd\x01"[..], MISSING_BYTES), (b"\x92\x01", MISSING_BYTES), (b"\xc1", BAD_FORMAT)]
        {
            let script = "return cmsgpack.unpack(ARGV[1])";
            let expected = format!("ERR user_script:1: {message} script: {}, on @user_script:1.", sha(script));
            assert_eq!(run(script, &[], &[bytes]), Err(expected));
        }
    }

    /// The crate's tests run every script behind `KEYS_CHECK`; it refuses here as on Redis.
    #[test]
    fn the_keys_check_of_the_crates_tests_works_here() {
        let check = keys_check();
        let refused = format!("{check} redis.call('SET', KEYS[1], 1)\nreturn redis.call('GET', KEYS[1] .. 'x')");
        let expected = format!("undeclared key kx in GET script: {}, on @user_script:1.", sha(&refused));
        assert_eq!(run(&refused, &["k"], &[]), Err(expected));
        let fine = format!("{check} redis.call('SET', KEYS[1], 1)\nreturn redis.call('GET', KEYS[1])");
        assert_eq!(run(&fine, &["k"], &[]), Ok(bulk("1")));
        let caught = format!("{check} return redis.pcall('GET', 'other')");
        assert_eq!(run(&caught, &["k"], &[]), Err("undeclared key other in GET".into()));
    }

    /// Scripts whose reply is the same on every Redis the crate is tested on (7.0, and 7.2's
    /// heirs, which print a number argument differently: see [`number_argument`]).
    const SAME_ON_EVERY_SERVER: &[&str] = &[
        "local out = {} \
         for i, n in ipairs({3, -7, 2.5, -0.75, 1024.125, 1e15, 1e16, 2^53, 2^53 + 1, 1/0, -1/0}) do \
           out[i] = redis.call('ECHO', n) end \
         out[#out + 1] = redis.call('ECHO', 0/0) return out",
        "redis.call('SET', KEYS[1], 10) return redis.call('INCRBY', KEYS[1], 5)",
        "redis.call('SET', KEYS[1], 10)\nreturn redis.call('INCRBY', KEYS[1], 2.5)",
        "redis.call('SET', KEYS[1], 'x') return redis.call('INCRBY', KEYS[1], 1)",
        "return redis.pcall('INCRBY', KEYS[1], 'x')",
        "local r = redis.pcall('INCRBY', KEYS[1], 'x') return {type(r), r.err, tostring(r.ignore_error_stats_update)}",
        "local ok, e = pcall(redis.call, 'INCRBY', KEYS[1], 'x') return {tostring(ok), e}",
        "redis.call('RPUSH', KEYS[1], 1, 2.5, 'x', ARGV[1]) return redis.call('LRANGE', KEYS[1], 0, -1)",
        "redis.call('RPUSH', KEYS[1], 'a', 'b', 'c') return {redis.call('LRANGE', KEYS[1], -2, 10), redis.call('LRANGE', KEYS[1], 2, 1)}",
        "redis.call('HSET', KEYS[1], 'f', 0.5, 7, 'seven') \
         return {redis.call('HGET', KEYS[1], 'f'), redis.call('HGET', KEYS[1], 7), redis.call('HGET', KEYS[1], 'nope')}",
        "redis.call('HSET', KEYS[1], 'f', 1) return redis.call('GET', KEYS[1])",
        "local r = redis.call('SET', KEYS[1], 'v') return {type(r), r.ok}",
        "return redis.call('SET', KEYS[1], 'v')",
        "return redis.call('GET', KEYS[1])",
        "return {redis.call('GET', KEYS[1]) == false, #ARGV, ARGV[1]}",
        "return {1, 2.9, -2.9, 'a', true, false, {ok = 'fine'}, {err = 'bad'}, nil, 5}",
        "return {1e300, -1e300, 0/0, 3.99, -3.99, 2^62, {err = 5}}",
        "return {ok = 'a\\r\\nb'}",
        "return {err = 'plain'}",
        "return redis.error_reply('boom')",
        "return redis.error_reply('boom bar')",
        "return redis.error_reply('-X y')",
        "return redis.error_reply('-X')",
        "return redis.error_reply(1)",
        "return redis.status_reply('x y')",
        "return redis.status_reply()",
        "error('boom')",
        "error(12)",
        "error()",
        "error('x', 0)",
        "error(redis.error_reply('x y'))",
        "error({err = 5})",
        "x = 1 return 1",
        "return y",
        "local t = nil\nreturn t.x",
        "local a = 1\nlocal b = 2\nreturn redis.call('INCRBY', KEYS[1], 'x')",
        "local function deeper()\n  return redis.call('INCRBY', KEYS[1], 'x')\nend\nreturn deeper()",
        "return redis.call()",
        "return redis.call('ECHO', {})",
        "return redis.call('ECHO', true)",
        "return redis.call('ECHO', 'a', 'b')",
        "return string.format('%d %s %s %d', 2^53, 0.1, 1e15, -3.7)",
        "return {tostring(0.1), tostring(1e15), tostring(2^53), 7 .. ''}",
        "return (",
        "return unpack({1, 2, 3})",
        "return {cmsgpack.unpack(ARGV[1])}",
        "return cmsgpack.unpack(string.sub(ARGV[1], 1, 1))",
        "return cmsgpack.unpack()",
        "return #KEYS + #ARGV",
    ];

    /// The same scripts only Redis 7.0 answers as the runner does.
    const SAME_ON_REDIS_7_0: &[&str] = &["local out = {} \
         for i, n in ipairs({0.1, 1/3, 1e17, 123456789012345678, 2^63, 1e-5, 1e300, -0.0}) do \
           out[i] = redis.call('ECHO', n) end return out"];

    /// An error reply of the server as [`CommandError`] words it.
    fn server_text(e: &redis::RedisError) -> String {
        match (e.code(), e.detail()) {
            (Some(code), Some(detail)) => format!("{code} {detail}"),
            (Some(code), None) => code.to_string(),
            _ => panic!("not an error reply: {e}"),
        }
    }

    /// A reply as the redis crate hands it to a caller, which makes an error inside an array the
    /// answer (as [`on_server`] gets it).
    fn as_the_client_reads(reply: Result<Value, String>) -> Result<Value, String> {
        reply.and_then(|value| value.extract_error().map_err(|e| server_text(&e)))
    }

    async fn on_server(
        conn: &mut redis::aio::MultiplexedConnection,
        script: &str,
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<Value, String> {
        redis::cmd("FLUSHALL").query_async::<()>(conn).await.unwrap();
        let mut eval = redis::cmd("EVAL");
        eval.arg(script).arg(keys.len()).arg(keys).arg(args);
        eval.query_async::<Value>(conn).await.map_err(|e| server_text(&e))
    }

    /// Small scripts run on a real server with `EVAL` and on the runner with the fixture
    /// answer the same, errors and all.
    #[tokio::test]
    async fn scripts_answer_as_on_redis() {
        let Some(server) = crate::durable::tests::start_server() else { return };
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await.unwrap();
        let is_7_0 = info.lines().any(|l| l.starts_with("redis_version:7.0."));
        let packed_bytes = packed([1, 300, 70_000].into_iter());
        let args: [&[u8]; 2] = [&packed_bytes, b"\0\xff"];
        let scripts = SAME_ON_EVERY_SERVER.iter().chain(if is_7_0 { SAME_ON_REDIS_7_0 } else { &[] });
        for script in scripts {
            let expected = on_server(&mut conn, script, &["k"], &args).await;
            assert_eq!(as_the_client_reads(run(script, &["k"], &args)), expected, "{script}");
        }
        let check = keys_check();
        for body in [
            "redis.call('SET', KEYS[1], 1)\nreturn redis.call('GET', KEYS[1] .. 'x')",
            "return redis.pcall('GET', 'x')",
        ] {
            let script = format!("{check} {body}");
            let expected = on_server(&mut conn, &script, &["k"], &[]).await;
            assert_eq!(as_the_client_reads(run(&script, &["k"], &[])), expected, "{body}");
        }
    }

    /// `cmsgpack.unpack` of what `packed` writes, at every width, reads as on Redis.
    #[tokio::test]
    async fn packed_numbers_read_back_as_on_redis() {
        let Some(server) = crate::durable::tests::start_server() else { return };
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut runner = LuaRunner::new().unwrap();
        let mut fixture = Fixture::default();
        for values in packed_cases() {
            let bytes = packed(values.iter().copied());
            let expected = on_server(&mut conn, READ_PACKED, &[], &[&bytes]).await;
            assert_eq!(
                run_on(&mut runner, &mut fixture, READ_PACKED, &[], &[&bytes]),
                expected,
                "{} values",
                values.len()
            );
        }
    }
}
