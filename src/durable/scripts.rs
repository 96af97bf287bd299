//! The Lua scripts, each prefixed with `lua/common.lua` and loaded once per process.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($file:literal) => {
        Script::new(concat!(include_str!("lua/common.lua"), include_str!(concat!("lua/", $file))))
    };
}

/// Every script of the wheel; see each `.lua` file's header for its KEYS, ARGV and reply.
pub(crate) struct Scripts {
    pub(crate) open: Script,
    pub(crate) schedule: Script,
    pub(crate) cancel: Script,
    pub(crate) reschedule: Script,
    pub(crate) tick: Script,
    pub(crate) claim: Script,
    pub(crate) ack: Script,
    pub(crate) fail: Script,
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) stats: Script,
    pub(crate) dead_letters: Script,
    pub(crate) requeue_dead: Script,
}

/// The scripts, hashed once; `redis::Script` loads a script again after `NOSCRIPT`.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    open: script!("open.lua"),
    schedule: script!("schedule.lua"),
    cancel: script!("cancel.lua"),
    reschedule: script!("reschedule.lua"),
    tick: script!("tick.lua"),
    claim: script!("claim.lua"),
    ack: script!("ack.lua"),
    fail: script!("fail.lua"),
    acquire: script!("acquire.lua"),
    release: script!("release.lua"),
    stats: script!("stats.lua"),
    dead_letters: script!("dead_letters.lua"),
    requeue_dead: script!("requeue_dead.lua"),
});
