//! The floor under D1: what a scheduled task costs Redis at the least, beside what tokio-timewheel's schedule
//! costs it, in calls of the same size on the same server settings.
//!
//! ```text
//! cargo bench -p tokio-timewheel-benches --bench durable_floor                # calls of 32 and 64, 3 repetitions
//! options: --reps=R --n=N --batch=B[,B...]
//! ```
//!
//! Three subjects schedule the durable benchmark's D1 (the same `order-{i}` keys, 32-byte payload and delays
//! U[1 s, 3600 s]), N = 100,000 by default, each on a fresh `redis-server` (the durable benchmark's: AOF
//! everysec), in calls of B tasks with two calls on the wire, as D1's coalesced calls go:
//! - `tokio-timewheel`: `DurableScheduler::schedule_many` with B tasks (its calls carry at most 64);
//! - `bare`: a Lua script that does only what a schedule cannot do without: the retry record read first and
//!   written last (`GET`, `SET ... PX`), one `HMGET` for the duplicate check, one `HSET` of the records (the due
//!   time, the fields a record has, the payload), and one `RPUSH` of each task's key to its ring slot. The caller
//!   computes the due times and names one slot key a task, so Redis reads no clock and chooses nothing;
//! - `empty`: a script that returns at once, given the same keys and arguments as `bare`: what a call costs
//!   Redis before any work (reading the request, the script call, the answer, the event loop around it).
//!
//! Each prints its Redis CPU per task (`INFO cpu`, `used_cpu_sys + used_cpu_user` over the phase, / N) and its
//! throughput; the end prints the medians and each against tokio-timewheel. The repetitions interleave the
//! subjects, their order turned each time. BENCHMARKS.md ("The floor") says what the figures showed.

#[allow(dead_code)]
#[path = "compare/inputs.rs"]
mod compare_inputs;
#[allow(dead_code)]
#[path = "durable/inputs.rs"]
mod inputs;
#[allow(dead_code)]
#[path = "../tests/support/redis_server.rs"]
mod redis_server;
#[allow(dead_code)]
#[path = "durable/server.rs"]
mod server;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use tokio_timewheel::durable::DurableScheduler;

use inputs::{Inputs, PAYLOAD};
use server::RedisServer;

/// One measurement's numbers, by field name (what `server` reports in).
pub type Fields = Vec<(&'static str, f64)>;

/// Calls on the wire at once: as D1's coalesced calls.
const ON_THE_WIRE: usize = 2;
/// tokio-timewheel's wheel in the durable benchmark: a 100 ms tick and an hour of slots.
const TICK_MS: u64 = 100;
const SLOTS: u64 = 36_000;
/// How long `bare` keeps a call's answer, as tokio-timewheel's default.
const ANSWER_TTL_MS: u64 = 60_000;

const BARE: &str = r"
local kept = redis.call('GET', KEYS[2])
if kept then return kept end
local names = {}
for i = 2, #ARGV, 3 do names[#names + 1] = ARGV[i] end
local pending = redis.call('HMGET', KEYS[1], unpack(names))
local fresh, out = {}, {}
for j, k in ipairs(names) do
  if pending[j] then
    out[j] = '0'
  else
    fresh[#fresh + 1] = k
    fresh[#fresh + 1] = ARGV[3 * j + 1] .. ':0:0:0:0:0:0:' .. ARGV[3 * j]
    redis.call('RPUSH', KEYS[2 + j], k)
    out[j] = '1'
  end
end
if #fresh > 0 then redis.call('HSET', KEYS[1], unpack(fresh)) end
local answer = table.concat(out)
redis.call('SET', KEYS[2], answer, 'PX', ARGV[1])
return answer
";

const EMPTY: &str = "return '1'";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Subject {
    Timewheel,
    Bare,
    Empty,
}

impl Subject {
    const ALL: [Subject; 3] = [Subject::Timewheel, Subject::Bare, Subject::Empty];

    fn name(self) -> &'static str {
        match self {
            Subject::Timewheel => "tokio-timewheel",
            Subject::Bare => "bare",
            Subject::Empty => "empty",
        }
    }
}

struct Options {
    reps: usize,
    n: usize,
    batches: Vec<usize>,
}

fn options() -> Options {
    let mut o = Options { reps: 3, n: 100_000, batches: vec![32, 64] };
    for arg in std::env::args().skip(1) {
        let (flag, value) = arg.split_once('=').unwrap_or((&arg, ""));
        let number =
            |v: &str| v.replace('_', "").parse::<usize>().ok().filter(|&x| x > 0).unwrap_or_else(|| fail(&arg));
        match flag {
            "--reps" => o.reps = number(value),
            "--n" => o.n = number(value),
            "--batch" => o.batches = value.split(',').map(number).collect(),
            // cargo bench adds --bench; other flags are not ours either.
            _ => {}
        }
    }
    o
}

fn fail(arg: &str) -> ! {
    eprintln!("durable_floor: bad {arg}");
    std::process::exit(2)
}

/// Schedules the inputs through `subject` in calls of `batch` on a fresh server: (tasks/s, Redis CPU µs/task).
fn measure(subject: Subject, inputs: &'static Inputs, batch: usize) -> (f64, f64) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let server = server::start();
    let out = rt.block_on(async move {
        tokio::spawn(async move {
            match subject {
                Subject::Timewheel => timewheel(&server, inputs, batch).await,
                Subject::Bare | Subject::Empty => script(&server, inputs, batch, subject).await,
            }
        })
        .await
        .expect("the measurement panicked")
    });
    rt.shutdown_timeout(Duration::from_secs(5));
    out
}

/// The phase's throughput and Redis CPU per task, from a reading taken before it.
fn figures(server: &RedisServer, cpu_before: f64, started: Instant, n: usize) -> (f64, f64) {
    let secs = started.elapsed().as_secs_f64();
    let cpu = server::cpu_seconds(server) - cpu_before;
    (n as f64 / secs, cpu * 1e6 / n as f64)
}

/// The keys of call `c` in calls of `batch`.
fn chunk(inputs: &'static Inputs, batch: usize, c: usize) -> &'static [String] {
    &inputs.keys[c * batch..inputs.n.min((c + 1) * batch)]
}

async fn timewheel(server: &RedisServer, inputs: &'static Inputs, batch: usize) -> (f64, f64) {
    let timers = DurableScheduler::builder(server.url(), "floor")
        .tick(Duration::from_millis(TICK_MS))
        .slots(SLOTS as usize)
        .connect()
        .await
        .expect("tokio-timewheel connect");
    let cpu = server::cpu_seconds(server);
    let started = Instant::now();
    let calls = (0..inputs.n.div_ceil(batch)).map(|c| {
        let (timers, keys) = (&timers, chunk(inputs, batch, c));
        async move {
            let items = keys.iter().enumerate().map(|(j, key)| {
                (key.as_str(), Duration::from_millis(inputs.d1_delays_ms[c * batch + j]), PAYLOAD.as_bytes())
            });
            let results = timers.schedule_many(items).await.expect("schedule_many");
            assert!(results.iter().all(Result::is_ok), "tokio-timewheel: a task was refused");
        }
    });
    futures::stream::iter(calls).buffer_unordered(ON_THE_WIRE).collect::<()>().await;
    figures(server, cpu, started, inputs.n)
}

async fn script(server: &RedisServer, inputs: &'static Inputs, batch: usize, subject: Subject) -> (f64, f64) {
    let client = redis::Client::open(server.url()).expect("client");
    let conn = client.get_multiplexed_async_connection().await.expect("connect");
    let script = redis::Script::new(if subject == Subject::Bare { BARE } else { EMPTY });
    // Loaded before the phase, as tokio-timewheel's scripts are when it connects.
    script.prepare_invoke().load_async(&mut conn.clone()).await.expect("SCRIPT LOAD");
    let cpu = server::cpu_seconds(server);
    let started = Instant::now();
    let calls = (0..inputs.n.div_ceil(batch)).map(|c| {
        let (script, mut conn, keys) = (&script, conn.clone(), chunk(inputs, batch, c));
        async move {
            let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_millis() as u64;
            let mut inv = script.prepare_invoke();
            inv.key("floor:{f}:tasks").key(format!("floor:{{f}}:req:{c}")).arg(ANSWER_TTL_MS);
            for (j, key) in keys.iter().enumerate() {
                let due = now_ms + inputs.d1_delays_ms[c * batch + j];
                inv.key(format!("floor:{{f}}:slot:{}", due.div_ceil(TICK_MS) % SLOTS));
                inv.arg(key).arg(PAYLOAD).arg(due);
            }
            let answer: String = inv.invoke_async(&mut conn).await.expect("EVALSHA");
            if subject == Subject::Bare {
                assert_eq!(answer, "1".repeat(keys.len()), "bare: a task was refused");
            }
        }
    });
    futures::stream::iter(calls).buffer_unordered(ON_THE_WIRE).collect::<()>().await;
    figures(server, cpu, started, inputs.n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if !redis_server::installed() {
        eprintln!("durable_floor: redis-server is not installed (apt-get install -y redis-server)");
        std::process::exit(2);
    }
    let o = options();
    let inputs: &'static Inputs = Box::leak(Box::new(Inputs::new(o.n)));
    let mut table = Vec::new();
    for &batch in &o.batches {
        let mut got: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); Subject::ALL.len()];
        for rep in 0..o.reps {
            for k in 0..Subject::ALL.len() {
                let s = (k + rep) % Subject::ALL.len();
                let subject = Subject::ALL[s];
                let (per_s, cpu) = measure(subject, inputs, batch);
                println!(
                    "{{\"subject\":\"{}\",\"batch\":{batch},\"n\":{},\"tasks_per_s\":{per_s:.0},\"redis_cpu_us_per_task\":{cpu:.3}}}",
                    subject.name(),
                    o.n
                );
                got[s].0.push(per_s);
                got[s].1.push(cpu);
            }
        }
        let cpu: Vec<f64> = got.iter().map(|(_, c)| median(c.clone())).collect();
        for (s, subject) in Subject::ALL.iter().enumerate() {
            table.push(format!(
                "| {batch} | {} | {:.0} | {:.2} ({:.2}x) | {:.1} |",
                subject.name(),
                median(got[s].0.clone()),
                cpu[s],
                cpu[s] / cpu[0],
                cpu[s] * batch as f64
            ));
        }
    }
    println!("\nMedians of {} repetitions, N = {}, two calls on the wire:\n", o.reps, o.n);
    println!("| tasks a call | subject | tasks/s | Redis CPU µs/task (vs tokio-timewheel) | Redis CPU µs/call |");
    println!("|---|---|---|---|---|");
    for line in table {
        println!("{line}");
    }
}
