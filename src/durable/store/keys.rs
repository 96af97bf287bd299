//! The Redis keys of a wheel: the one place their names are written. The Lua scripts get them
//! from here too (the loader generates their `keys` include from these constants), and so do the
//! tests.

/// The names of the Redis keys of one durable wheel, for operators and tools that look at a
/// wheel with `redis-cli` or a monitor.
///
/// Every key of the wheel `orders` starts with `tw:{orders}:`; the braces are a hash tag, so a
/// Redis Cluster keeps them all on one slot. The [module docs](crate::durable#redis-layout) describe what
/// each key holds.
///
/// # Examples
/// ```
/// use tokio_timewheel::durable::WheelKeys;
///
/// let keys = WheelKeys::new("orders");
/// assert_eq!(keys.prefix(), "tw:{orders}:");
/// assert_eq!(keys.tasks(), "tw:{orders}:tasks");
/// assert_eq!(keys.ready(), "tw:{orders}:ready");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelKeys {
    prefix: String,
}

/// The wheel's fixed keys, in the order every script gets them as `KEYS[1..]`: `(Lua name,
/// suffix after the prefix)`. A script binds each to a local of the upper-cased name (`READY`,
/// ...). A call's own keys (its retry record, a claim's records) follow them.
pub(crate) const FIXED: &[(&str, &str)] = &[
    ("meta", "meta"),
    ("cursor", "cursor"),
    ("tasks", "tasks"),
    ("ring", "ring"),
    ("far", "far"),
    ("ready", "ready"),
    ("leased", "leased"),
    ("dead", "dead"),
    ("dead_tasks", "dead_tasks"),
    ("leader", "leader"),
    ("epoch", "epoch"),
    ("seq", "seq"),
    ("wake", "wake"),
    ("lead", "lead"),
    ("figures", "figures"),
    ("upserts", "upserts"),
    ("cancelling", "cancelling"),
    ("cancels", "cancels"),
    ("claimed", "claimed"),
    ("claims", "claims"),
    ("history", "history"),
    ("limits", "limits"),
];

const SLOT: &str = "slot:";
const REQUEST: &str = "req:";
const CLAIM: &str = "claim:";

impl WheelKeys {
    /// The keys of the wheel `name` (a name the builder accepts: no braces, colons or spaces).
    pub fn new(name: &str) -> Self {
        WheelKeys { prefix: format!("tw:{{{name}}}:") }
    }

    /// The keys of partition `index` of the wheel `name` split into `count` partitions, or the
    /// wheel's own keys when it has one partition.
    ///
    /// A partition's hash tag is `{<name>:<index>~<salt>}` (a name holds no colon, so no other
    /// wheel's tag is the same), with the smallest salt that puts its Redis Cluster hash slot in
    /// the `index`-th of `count` equal ranges of the 16,384 slots: a cluster whose primaries hold
    /// equal runs of slots (as `redis-cli --cluster create` makes them) then holds an even share
    /// of the partitions, where tags left to chance put two of two partitions on one of three
    /// primaries a third of the time. Every node computes the same tags.
    pub fn for_partition(name: &str, index: usize, count: usize) -> Self {
        if count <= 1 {
            return Self::new(name);
        }
        let (from, to) = (CLUSTER_SLOTS * index / count, CLUSTER_SLOTS * (index + 1) / count);
        let tag = (0u32..)
            .map(|salt| format!("{name}:{index}~{salt}"))
            .find(|tag| (from..to).contains(&usize::from(hash_slot(tag.as_bytes()))))
            .expect("some salt lands in every range of at least one slot");
        WheelKeys { prefix: format!("tw:{{{tag}}}:") }
    }

    /// `tw:{<name>}:`, the start of every key of the wheel.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn fixed(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    /// The hash of the wheel's settings (`tick_ms`, `slots`) and counters.
    pub fn meta(&self) -> String {
        self.fixed("meta")
    }

    /// The hash of the wheel-wide figures a minute (handed out, acknowledged, failed, dead, and
    /// how late deliveries were claimed), kept for two hours: [`DurableScheduler::figures`](crate::durable::DurableScheduler::figures).
    pub fn figures(&self) -> String {
        self.fixed("figures")
    }

    /// The last tick the leader processed.
    pub fn cursor(&self) -> String {
        self.fixed("cursor")
    }

    /// The hash of the pending tasks (waiting, ready or running) by key: each one's record.
    pub fn tasks(&self) -> String {
        self.fixed("tasks")
    }

    /// How many entries the ring's slots hold together (a cancelled task's entry stays in its
    /// slot until the cursor passes it).
    pub fn ring(&self) -> String {
        self.fixed("ring")
    }

    /// The list of slot `i`: keys of the tasks due at a tick `t` with `t % slots == i`, for `t`
    /// in `cursor+1 ..= cursor+slots`.
    pub fn slot(&self, i: u64) -> String {
        format!("{}{SLOT}{i}", self.prefix)
    }

    /// The sorted set of the waiting tasks beyond the ring's revolution, by due ms.
    pub fn far(&self) -> String {
        self.fixed("far")
    }

    /// The sorted set of the due tasks waiting for a worker, by due ms.
    pub fn ready(&self) -> String {
        self.fixed("ready")
    }

    /// The sorted set of the claimed (running) tasks, by lease expiry in ms.
    pub fn leased(&self) -> String {
        self.fixed("leased")
    }

    /// The sorted set of the dead letters' keys, by when they died.
    pub fn dead(&self) -> String {
        self.fixed("dead")
    }

    /// The hash of the dead letters by key: each one's deliveries, last error and payload.
    pub fn dead_tasks(&self) -> String {
        self.fixed("dead_tasks")
    }

    /// The fencing token of the node that leads, expiring with its lease.
    pub fn leader(&self) -> String {
        self.fixed("leader")
    }

    /// How many leaderships there have been: the fencing tokens' counter.
    pub fn epoch(&self) -> String {
        self.fixed("epoch")
    }

    /// How many claim tokens have been handed out.
    pub fn seq(&self) -> String {
        self.fixed("seq")
    }

    /// The list of wake-up tokens idle workers wait on.
    pub fn wake(&self) -> String {
        self.fixed("wake")
    }

    /// The list a leader that gives up the lead pushes a token on.
    pub fn lead(&self) -> String {
        self.fixed("lead")
    }

    /// The hash of the upserts queued behind a running run: a task's key, the record that takes
    /// its series' place when the run ends.
    pub fn upserts(&self) -> String {
        self.fixed("upserts")
    }

    /// The hash of the running tasks whose cancel was requested (`cancel_running`), by key: the
    /// claim token of the delivery to cancel. An entry goes when that delivery's outcome lands
    /// (the task then ends as cancelled) or its lease runs out.
    pub fn cancelling(&self) -> String {
        self.fixed("cancelling")
    }

    /// The stream of cancel requests (`key`, `token` fields) that every worker reads, so that a
    /// handler's token is cancelled at once, whichever node holds it. Capped at about 1,000
    /// entries.
    pub fn cancels(&self) -> String {
        self.fixed("cancels")
    }

    /// The sorted set of the running tasks' keys by claim token: the order in which they were
    /// claimed, and in which they are listed.
    pub fn claimed(&self) -> String {
        self.fixed("claimed")
    }

    /// The sorted set of the claim calls that running tasks came from, by first claim token:
    /// `<first token>:<tasks>:<claimed ms>:<node id>` each (a call's tokens are consecutive), the
    /// node whose worker claimed them as [`workers`](Self::workers) names it.
    pub fn claims(&self) -> String {
        self.fixed("claims")
    }

    /// The list of the finished tasks' runs, oldest first: one entry a run that ended
    /// (acknowledged, dead or cancelled), with when it ended, its outcome, key, due time,
    /// attempts, when its handler started and how long it took. Bounded by count and age
    /// ([`DurableBuilder::history_limit`](crate::durable::DurableBuilder::history_limit),
    /// [`history_age`](crate::durable::DurableBuilder::history_age)); listed by
    /// [`list`](crate::durable::DurableScheduler::list) as [`Finished`](crate::durable::TaskState::Finished).
    pub fn history(&self) -> String {
        self.fixed("history")
    }

    /// The hash of the limits by key prefix
    /// ([`DurableScheduler::set_limit`](crate::durable::DurableScheduler::set_limit)): each prefix's
    /// limit as `<rate>/<window ms>/<running>`, and, under fields that start with a `\0`, `\1` or
    /// `\2` byte, when a running limit last gained room, which tasks run under it, and a rate
    /// limit's next free start.
    pub fn limits(&self) -> String {
        self.fixed("limits")
    }

    /// The sorted set of the workers that run: their node ids, scored by when each last said so
    /// (ms on Redis's clock as the node estimates it). No script touches it.
    pub fn workers(&self) -> String {
        self.fixed("workers")
    }

    /// What the call `id` answered, kept a while so that its retry gets the same answer.
    pub fn request(&self, id: &str) -> String {
        format!("{}{REQUEST}{id}", self.prefix)
    }

    /// The list of what claim `id` took, kept for its retries.
    pub fn claim(&self, id: &str) -> String {
        format!("{}{CLAIM}{id}", self.prefix)
    }

    /// Every fixed key, in the order of [`FIXED`]: a script's first `KEYS`.
    pub(crate) fn all_fixed(&self) -> impl Iterator<Item = String> + '_ {
        FIXED.iter().map(|(_, suffix)| self.fixed(suffix))
    }
}

/// The hash slots of a Redis Cluster.
const CLUSTER_SLOTS: usize = 16_384;

/// The Redis Cluster hash slot of a hash tag: CRC16 (XMODEM: polynomial 0x1021, initial value 0)
/// modulo 16,384, as Redis computes it.
fn hash_slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % CLUSTER_SLOTS as u16
}

/// The Lua that binds the key names for a script, on one line: one local per fixed key
/// (`READY = KEYS[6]`, ...); `CALL_KEY` and `PREVIOUS_KEY`, the call's own keys after them (nil
/// when the call has none); `FIXED_KEYS`, how many fixed keys there are; and
/// `declared_slots(from, indices)`, the slot keys declared from `KEYS[from]` on, as a map from
/// slot index to key name. `indices` is the argument that [`declare_slots`] packed beside them:
/// those keys' slot indices, in their order, as a MessagePack array, which Redis's `cmsgpack`
/// reads into numbers at once, far cheaper than parsing every key name. A script touches only
/// the slot keys its caller declared.
///
/// [`declare_slots`]: super::scripts::declare_slots
pub(crate) fn lua_bindings() -> String {
    let names: Vec<String> = FIXED.iter().map(|(name, _)| name.to_uppercase()).collect();
    let slots: Vec<String> = (1..=FIXED.len()).map(|i| format!("KEYS[{i}]")).collect();
    format!(
        "local {} = {} local CALL_KEY, PREVIOUS_KEY = KEYS[{n1}], KEYS[{n2}] local FIXED_KEYS = {n} \
         local function declared_slots(from, indices) local map = {{}} \
           if indices and #indices > 0 then local idx = cmsgpack.unpack(indices) \
             for j = 1, #idx do map[idx[j]] = KEYS[from + j - 1] end end \
           return map end",
        names.join(", "),
        slots.join(", "),
        n = FIXED.len(),
        n1 = FIXED.len() + 1,
        n2 = FIXED.len() + 2
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fixed_key_has_its_method() {
        let keys = WheelKeys::new("w");
        let methods = [
            keys.meta(),
            keys.cursor(),
            keys.tasks(),
            keys.ring(),
            keys.far(),
            keys.ready(),
            keys.leased(),
            keys.dead(),
            keys.dead_tasks(),
            keys.leader(),
            keys.epoch(),
            keys.seq(),
            keys.wake(),
            keys.lead(),
            keys.figures(),
            keys.upserts(),
            keys.cancelling(),
            keys.cancels(),
            keys.claimed(),
            keys.claims(),
            keys.history(),
            keys.limits(),
        ];
        let table: Vec<String> = FIXED.iter().map(|(_, suffix)| format!("tw:{{w}}:{suffix}")).collect();
        assert_eq!(methods.to_vec(), table);
        assert_eq!(keys.all_fixed().collect::<Vec<_>>(), table);
        assert_eq!(
            [keys.slot(3), keys.request("r"), keys.claim("c")],
            ["tw:{w}:slot:3", "tw:{w}:req:r", "tw:{w}:claim:c"]
        );
    }

    /// Redis's own figures: `CLUSTER KEYSLOT` of these keys.
    #[test]
    fn hash_slots_are_redis_cluster_slots() {
        assert_eq!(hash_slot(b"123456789"), 0x31c3 % CLUSTER_SLOTS as u16);
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"bar"), 5061);
    }

    /// Partition `i` of `n` lands in the `i`-th of `n` equal slot ranges, under a tag of its own.
    #[test]
    fn partitions_spread_over_the_slot_ranges() {
        for n in [2, 3, 8, 64] {
            let mut prefixes = std::collections::HashSet::new();
            for i in 0..n {
                let keys = WheelKeys::for_partition("orders", i, n);
                let tag = keys.prefix().trim_start_matches("tw:{").trim_end_matches("}:");
                assert!(tag.starts_with(&format!("orders:{i}~")), "{tag}");
                let slot = usize::from(hash_slot(tag.as_bytes()));
                assert!((CLUSTER_SLOTS * i / n..CLUSTER_SLOTS * (i + 1) / n).contains(&slot), "{n}: {i} -> {slot}");
                assert!(prefixes.insert(keys.prefix().to_string()));
            }
        }
        assert_eq!(WheelKeys::for_partition("orders", 0, 1), WheelKeys::new("orders"));
    }

    #[test]
    fn the_lua_bindings_are_one_line() {
        let lua = lua_bindings();
        assert!(!lua.contains('\n'));
        assert!(lua.starts_with("local META, CURSOR, TASKS, RING, FAR, READY, "), "{lua}");
        assert!(lua.contains("= KEYS[1], KEYS[2], KEYS[3]"), "{lua}");
        assert!(lua.contains("local CALL_KEY, PREVIOUS_KEY = KEYS[23], KEYS[24] local FIXED_KEYS = 22"), "{lua}");
        assert!(lua.contains("local function declared_slots(from, indices)"), "{lua}");
    }
}
