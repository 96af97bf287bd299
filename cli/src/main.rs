//! `timewheel`: reads and administers a tokio-timewheel durable wheel, in Redis or in a SQLite
//! file, from a terminal, through the library's public API only (what it shows, a program could
//! read).
//!
//! ```text
//! timewheel --url redis://127.0.0.1:6379/ --wheel orders stats
//! timewheel --url sqlite:data/orders.db --wheel orders stats
//! timewheel --wheel orders list ready --limit 20 --json
//! timewheel --wheel orders dead --requeue-all
//! timewheel --wheel orders get report:nightly
//! timewheel --wheel orders run-now report:nightly
//! timewheel --wheel orders set-limit api: --rate 20 --per 1s --running 5
//! timewheel --wheel orders limits
//! ```
//!
//! With `--json` it prints what the library's types serialise to (their `serde` form, feature
//! `serde`): `stats` a `DurableStats` with the wheel's name beside its fields, `get` a `TaskInfo`
//! (or `null`), `list` and `due-next` a `ListPage` (`{"tasks": [..], "next": cursor}`), `dead`
//! an array of `DeadTask`s, `watch` a `DurableStats` a line with the rates, the counts due soon
//! and the wheel-wide `Figures`; `limits` an array of `{"prefix", "rate", "per_ms", "running"}`
//! (`null` for a part a limit does not have); the actions print `{"done": bool}` (`set-limit`
//! with `replaced`: whether the prefix had a limit before).
//!
//! A SQLite file is read beside the processes that run its wheel (SQLite lets several processes
//! of one host share a file); the command line never creates one: a path with no file, or
//! `sqlite::memory:` (the memory of the process that opened it), is refused.
//!
//! Exit codes: 0 done; 1 nothing to act on (no such task, not pending, not running, already
//! running, no such dead letter, no limit to clear); 2 a usage error; 3 the store (Redis, or
//! the SQLite file) could not be reached or failed; 4 refused (no wheel of that name, no such
//! file, a bad setting, a limit the library refuses).

mod show;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};
use serde_json::json;
use tokio_timewheel::durable::{DurableScheduler, Limit, ListCursor, TaskState};
use tokio_timewheel::Error;

/// Read and administer a tokio-timewheel durable wheel, in Redis or in a SQLite file.
#[derive(Parser, Debug)]
#[command(name = "timewheel", version, about, after_help = EXIT_CODES)]
struct Cli {
    /// The wheel's store: a Redis (redis:// or rediss://, credentials in the URL), or the SQLite
    /// file its nodes share (sqlite:PATH, as they were given it); with --sentinel, the
    /// sentinels; with --cluster, seed nodes. Repeat it, or separate URLs with commas.
    #[arg(long, env = "TIMEWHEEL_URL", default_value = "redis://127.0.0.1:6379/", value_delimiter = ',')]
    url: Vec<String>,

    /// The wheel's name, as the services pass it to `DurableScheduler::builder`.
    #[arg(long, env = "TIMEWHEEL_WHEEL")]
    wheel: String,

    /// A PEM file of the certificate authority that signed the server's certificate (rediss://).
    #[arg(long, value_name = "PEM")]
    tls_ca: Option<PathBuf>,

    /// The --url addresses are Redis Sentinels, watching the primary of this name.
    #[arg(long, value_name = "MASTER", conflicts_with = "cluster")]
    sentinel: Option<String>,

    /// The --url addresses are seed nodes of a Redis Cluster.
    #[arg(long)]
    cluster: bool,

    /// Print JSON (one document, or one line per refresh with `watch`) instead of tables.
    #[arg(long, global = true)]
    json: bool,

    /// How long to try to reach the store (Redis, or the SQLite file when another process holds
    /// its lock), in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0)]
    connect_timeout: f64,

    #[command(subcommand)]
    command: Command,
}

const EXIT_CODES: &str = "Exit codes: 0 done; 1 nothing to act on (no such task, not pending, not running, already \
                          running, no such dead letter, no limit to clear); 2 usage; 3 the store (Redis, or the \
                          SQLite file) unreachable or failing; 4 refused (no such wheel, no such file, a bad setting).";

/// What `set-limit` says without a limit to set.
const NO_LIMIT: &str = "set-limit needs a limit: --rate N --per DURATION, --running N, or both";

#[derive(Subcommand, Debug)]
enum Command {
    /// The wheel's counts: pending by state, dead letters, cursor lag, and its counters; and
    /// its limits by key prefix, if it has any.
    Stats,
    /// One task, pending or dead, with its payload; for a run of a series, its recurrence (cron
    /// expression and zone, or period) and its next run, in UTC and in the series' zone.
    Get {
        /// The task's key.
        key: String,
    },
    /// The tasks in one state, a page at a time: waiting and ready by due time, running by
    /// claim (with the worker that holds each), dead by when they died, and the finished runs
    /// the wheel's history keeps, newest first (with their outcome and handler time).
    List {
        /// waiting, ready, running, dead or finished.
        #[arg(value_parser = str::parse::<TaskState>)]
        state: TaskState,
        /// How many a page (at most 1,000).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Start after this cursor (printed at the end of the previous page).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        /// Every page, not only the first (still read a page at a time).
        #[arg(long)]
        all: bool,
    },
    /// The tasks due next, waiting or ready, oldest due first (overdue ones say so), a page at a
    /// time.
    DueNext {
        /// How many a page (at most 1,000).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Start after this cursor (printed at the end of the previous page, or by `list waiting`).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
    },
    /// The dead letters, oldest first; or requeue or delete them.
    Dead {
        /// How many to list.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Schedule this dead letter again, due now, with its attempts reset.
        #[arg(long, value_name = "KEY", group = "action")]
        requeue: Option<String>,
        /// Delete this dead letter.
        #[arg(long, value_name = "KEY", group = "action")]
        delete: Option<String>,
        /// Requeue every dead letter there is when the command starts.
        #[arg(long, group = "action")]
        requeue_all: bool,
    },
    /// Make a waiting task due now, as the dashboard's "run now" does: the next tick hands it to
    /// a worker. For a series, its next run moves to now, and the runs after it follow its
    /// recurrence (a fixed rate counts its periods from this run). A running task is left alone.
    RunNow {
        /// The task's key.
        key: String,
    },
    /// Cancel a pending task (not one a worker runs: see cancel-running).
    Cancel {
        /// The task's key.
        key: String,
    },
    /// Ask the handler of a running task to stop: its cancellation token is cancelled, and
    /// whatever it returns, the task ends as cancelled.
    CancelRunning {
        /// The task's key.
        key: String,
    },
    /// Stop handing out tasks (they still fall due and wait, ready) until `resume`.
    Pause,
    /// Hand out tasks again, at once.
    Resume,
    /// The limits by key prefix that every worker obeys, one a line: the prefix, then its limit
    /// (handler starts per window, handlers running at once, or both).
    Limits,
    /// Limit the handlers of the tasks whose keys start with a prefix, on every node: at most so
    /// many starts per window (--rate with --per), at most so many running at once (--running),
    /// or both. Replaces the prefix's limit if it had one; the tasks it holds back wait, ready,
    /// until it has room.
    SetLimit {
        /// The key prefix, such as "api:".
        prefix: String,
        /// At most this many handler starts in any window of --per.
        #[arg(long, value_name = "N", requires = "per")]
        rate: Option<u32>,
        /// The window of --rate: 500ms, 1s, 1.5s, 5m or 1h (at most a day).
        #[arg(long, value_name = "DURATION", requires = "rate", value_parser = duration)]
        per: Option<Duration>,
        /// At most this many handlers running at once.
        #[arg(long, value_name = "N")]
        running: Option<u32>,
    },
    /// Clear the limit on a prefix: its tasks start as fast as the workers take them.
    ClearLimit {
        /// The key prefix the limit was set on.
        prefix: String,
    },
    /// Watch the counts and the rates of handing out and acknowledging, refreshed.
    Watch {
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
}

/// How a command ended, as its exit code says.
enum Ended {
    Done,
    NothingToActOn,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::SetLimit { rate: None, running: None, .. } = cli.command {
        // A usage error (2), said before anything is opened.
        let mut command = Cli::command();
        command.build();
        let set_limit = command.find_subcommand_mut("set-limit").expect("the set-limit subcommand");
        set_limit.error(ErrorKind::MissingRequiredArgument, NO_LIMIT).exit();
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: could not start the async runtime: {e}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(run(&cli)) {
        Ok(Ended::Done) => ExitCode::SUCCESS,
        Ok(Ended::NothingToActOn) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            let code = match e {
                Failure::Wheel(Error::Redis(_)) => {
                    if sqlite_url(&cli).is_some() {
                        eprintln!("(check --url: the SQLite file the wheel's nodes use)");
                    } else {
                        eprintln!(
                            "(check --url, and --tls-ca for rediss://, --sentinel or --cluster for those deployments)"
                        );
                    }
                    3
                }
                _ => 4,
            };
            ExitCode::from(code)
        }
    }
}

/// What stopped a command.
#[derive(Debug)]
enum Failure {
    Wheel(Error),
    Setting(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Wheel(e) => write!(f, "{e}"),
            Failure::Setting(s) => f.write_str(s),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Wheel(e)
    }
}

/// The `sqlite:` URL that `--url` gives, whole (a path may hold the commas that `--url` splits
/// URLs at); `None` for Redis.
fn sqlite_url(cli: &Cli) -> Option<String> {
    let first = cli.url.first()?;
    (first.starts_with("sqlite:") && cli.sentinel.is_none() && !cli.cluster).then(|| cli.url.join(","))
}

/// Checks a `sqlite:` URL before the library opens it, which would create a missing file: the
/// command line reads a wheel that nodes run, so a path with no file is a mistake to report, as
/// is `sqlite::memory:` (the memory of whichever process opens it: always empty here).
fn check_sqlite(url: &str, wheel: &str) -> Result<(), Failure> {
    let rest = url.strip_prefix("sqlite:").unwrap_or(url);
    if rest == ":memory:" {
        return Err(Failure::Setting(
            "--url sqlite::memory: names the memory of the process that opens it, which is empty in this one: \
             give the SQLite file the wheel's nodes use (sqlite:PATH)"
                .to_string(),
        ));
    }
    let path = std::path::Path::new(rest.strip_prefix("//").unwrap_or(rest));
    if !path.as_os_str().is_empty() && !path.exists() {
        return Err(Failure::Setting(format!(
            "--url {url}: there is no file {} (seen from {}), so no wheel {wheel:?} either: give the path the wheel's \
             nodes were given (a relative one is from their working directory)",
            path.display(),
            std::env::current_dir().map_or_else(|_| "here".to_string(), |d| d.display().to_string()),
        )));
    }
    Ok(())
}

/// Opens the wheel that `cli` names, as it is recorded in its store.
async fn open(cli: &Cli) -> Result<DurableScheduler, Failure> {
    let mut builder = if let Some(url) = sqlite_url(cli) {
        if cli.tls_ca.is_some() {
            return Err(Failure::Setting(format!("--tls-ca is for rediss:// URLs, not {url}")));
        }
        check_sqlite(&url, &cli.wheel)?;
        DurableScheduler::builder(url, &cli.wheel)
    } else if let Some(master) = &cli.sentinel {
        DurableScheduler::sentinel(&cli.url, master, &cli.wheel)
    } else if cli.cluster {
        DurableScheduler::cluster(&cli.url, &cli.wheel)
    } else {
        match cli.url.as_slice() {
            [url] => DurableScheduler::builder(url, &cli.wheel),
            urls => {
                return Err(Failure::Setting(format!(
                    "{} URLs given: name one Redis, or add --sentinel MASTER or --cluster for several",
                    urls.len()
                )))
            }
        }
    };
    if let Some(path) = &cli.tls_ca {
        let pem = std::fs::read(path)
            .map_err(|e| Failure::Setting(format!("cannot read the CA certificate {}: {e}", path.display())))?;
        builder = builder.tls_root_ca(pem);
    }
    let timeout = Duration::try_from_secs_f64(cli.connect_timeout).ok().filter(|t| !t.is_zero()).ok_or_else(|| {
        Failure::Setting(format!("--connect-timeout {}: give a positive number of seconds", cli.connect_timeout))
    })?;
    Ok(builder.connect_timeout(timeout).only_existing().connect().await?)
}

async fn run(cli: &Cli) -> Result<Ended, Failure> {
    let timers = open(cli).await?;
    let json = cli.json;
    let now = SystemTime::now();
    match &cli.command {
        Command::Stats => {
            let stats = timers.stats().await?;
            if json {
                println!("{}", show::object_with(&stats, [("wheel", json!(cli.wheel))]));
            } else {
                print!("{}", show::stats_text(&cli.wheel, &stats));
                if let Some(line) = show::limits_line(&timers.limits().await?) {
                    println!("{line}");
                }
            }
        }
        Command::Get { key } => {
            let Some(task) = timers.get(key).await? else {
                if json {
                    println!("null");
                }
                eprintln!("no task {key:?} in wheel {:?} (neither pending nor dead)", cli.wheel);
                return Ok(Ended::NothingToActOn);
            };
            if json {
                println!("{}", json!(task));
            } else {
                print!("{}", show::task_text(&task, now));
            }
        }
        Command::DueNext { limit, after } => {
            let after = after.as_deref().map(cursor).transpose()?;
            let page = timers.due_next(after.as_ref(), *limit).await?;
            if json {
                println!("{}", json!(page));
            } else {
                let rows: Vec<Vec<String>> = page
                    .tasks()
                    .iter()
                    .map(|t| {
                        vec![
                            t.key().to_string(),
                            t.state().to_string(),
                            show::due(t.due(), now),
                            t.attempt().to_string(),
                            show::payload_short(t.payload(), 60),
                        ]
                    })
                    .collect();
                print!("{}", show::table(&["KEY", "STATE", "DUE", "ATTEMPTS", "PAYLOAD"], &rows));
                if let Some(next) = page.next() {
                    println!("(more: --after {next})");
                }
            }
        }
        Command::Dead { limit, requeue, delete, requeue_all } => {
            return dead(cli, &timers, *limit, requeue.as_deref(), delete.as_deref(), *requeue_all).await;
        }
        Command::List { state, limit, after, all } => {
            return list(cli, &timers, *state, *limit, after.as_deref(), *all).await;
        }
        Command::CancelRunning { key } => {
            let done = timers.cancel_running(key).await?;
            return Ok(said(
                json,
                done,
                &format!("asked the handler of {key:?} to stop; the task ends as cancelled"),
                &format!("{key:?} is not running"),
            ));
        }
        Command::Pause => {
            timers.pause().await?;
            return Ok(said(json, true, &format!("paused {:?}: no worker claims until resume", cli.wheel), ""));
        }
        Command::Resume => {
            timers.resume().await?;
            return Ok(said(json, true, &format!("resumed {:?}", cli.wheel), ""));
        }
        Command::RunNow { key } => return run_now(cli, &timers, key).await,
        Command::Limits => {
            let limits = timers.limits().await?;
            if json {
                println!("{}", show::limits_json(&limits));
            } else {
                print!("{}", show::limits_text(&limits));
            }
        }
        Command::SetLimit { prefix, rate, per, running } => {
            // A rate comes with its window (clap sees to it); `main` refused neither part.
            let rate = rate.zip(*per).map(|(n, per)| Limit::rate(n, per));
            let Some(limit) = rate.into_iter().chain(running.map(Limit::running)).reduce(Limit::and) else {
                return Err(Failure::Setting(NO_LIMIT.to_string()));
            };
            let new = timers.set_limit(prefix, limit).await?;
            if json {
                println!("{}", json!({ "done": true, "replaced": !new }));
            } else {
                let before = if new { "" } else { " (in place of its previous limit)" };
                println!("limited {prefix:?} to {limit}{before}: every worker obeys it from its next claim");
            }
        }
        Command::ClearLimit { prefix } => {
            let cleared = timers.clear_limit(prefix).await?;
            return Ok(said(
                json,
                cleared,
                &format!("cleared the limit on {prefix:?}"),
                &format!("no limit on {prefix:?}"),
            ));
        }
        Command::Cancel { key } => {
            let cancelled = timers.cancel(key).await?;
            return Ok(said(
                json,
                cancelled,
                &format!("cancelled {key:?}"),
                &format!("{key:?} was not pending (or a worker holds it)"),
            ));
        }
        Command::Watch { interval, count } => watch(cli, &timers, *interval, *count).await?,
    }
    Ok(Ended::Done)
}

/// Prints what a yes-or-no action did (`{"done": bool}` with --json) and ends accordingly.
fn said(json: bool, done: bool, yes: &str, no: &str) -> Ended {
    if json {
        println!("{}", json!({ "done": done }));
    } else if done {
        println!("{yes}");
    } else {
        eprintln!("{no}");
    }
    if done {
        Ended::Done
    } else {
        Ended::NothingToActOn
    }
}

/// Makes the waiting or ready task `key` due now (`reschedule` to now, as the dashboard's "run
/// now"); when there is none, says why: running, a dead letter, or no such task.
async fn run_now(cli: &Cli, timers: &DurableScheduler, key: &str) -> Result<Ended, Failure> {
    let (reason, message) = match timers.reschedule(key, Duration::ZERO).await {
        Ok(()) => {
            let due = timers.deadline(key).await?;
            if cli.json {
                println!("{}", json!({ "done": true, "due_unix_ms": due.map(show::unix_ms) }));
            } else {
                let when = due.map(|d| format!(" ({})", show::utc(d))).unwrap_or_default();
                println!("{key:?} is due now{when}: the next tick hands it to a worker");
            }
            return Ok(Ended::Done);
        }
        Err(Error::NotFound) => match timers.get(key).await?.map(|t| t.state()) {
            Some(TaskState::Running) => (
                "running",
                format!("{key:?} is running: its handler runs now (cancel-running asks it to stop); nothing moved"),
            ),
            Some(TaskState::Dead) => {
                ("dead", format!("{key:?} is a dead letter: `dead --requeue {key}` puts it back, due now"))
            }
            // Nothing under the key (or a task that ended between the two calls).
            _ => ("missing", format!("no task {key:?} waiting in wheel {:?} (not pending, nor dead)", cli.wheel)),
        },
        Err(e) => return Err(e.into()),
    };
    if cli.json {
        println!("{}", json!({ "done": false, "reason": reason }));
    }
    eprintln!("{message}");
    Ok(Ended::NothingToActOn)
}

/// The cursor `--after` gives, as `list` and `due-next` print it.
fn cursor(text: &str) -> Result<ListCursor, Failure> {
    text.parse().map_err(|e| {
        Failure::Setting(format!("--after {text:?}: not a cursor that `list` or `due-next` printed ({e})"))
    })
}

/// A duration as `--per` takes it: a number and its unit, `500ms`, `1s`, `1.5s`, `5m` or `1h`.
fn duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let nanos_per_unit: u128 = match unit {
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(format!("{text:?} is no duration: give a number and its unit, ms, s, m or h (500ms, 1s, 5m)")),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |d: &str| d.chars().all(|c| c.is_ascii_digit());
    if whole.is_empty() || !digits(fraction) || fraction.len() > 9 {
        return Err(format!("{text:?}: the number before the unit is not one (500ms, 1s, 1.5s)"));
    }
    let whole: u128 = whole.parse().map_err(|_| format!("{text:?} is too long a duration"))?;
    let fraction = fraction.parse::<u128>().unwrap_or(0) * nanos_per_unit / 10u128.pow(fraction.len() as u32);
    let nanos = whole.checked_mul(nanos_per_unit).and_then(|n| n.checked_add(fraction));
    let nanos = nanos.and_then(|n| u64::try_from(n).ok()).ok_or_else(|| format!("{text:?} is too long a duration"))?;
    Ok(Duration::from_nanos(nanos))
}

/// Prints a page (or, with `all`, every page) of the tasks in `state`.
async fn list(
    cli: &Cli,
    timers: &DurableScheduler,
    state: TaskState,
    limit: usize,
    after: Option<&str>,
    all: bool,
) -> Result<Ended, Failure> {
    let mut cursor = after.map(cursor).transpose()?;
    let now = SystemTime::now();
    let mut tasks = Vec::new();
    loop {
        let page = timers.list(state, cursor.as_ref(), limit).await?;
        let (got, next) = page.into_parts();
        tasks.extend(got);
        cursor = next;
        if !all || cursor.is_none() {
            break;
        }
    }
    if cli.json {
        // A page as `ListPage` serialises, the pages of `--all` together.
        println!("{}", json!({ "tasks": tasks, "next": cursor }));
    } else if state == TaskState::Finished {
        let rows: Vec<Vec<String>> = tasks
            .iter()
            .filter_map(|t| Some((t, t.finished()?)))
            .map(|(t, run)| {
                vec![
                    t.key().to_string(),
                    show::utc(t.due()),
                    t.attempt().to_string(),
                    run.outcome().to_string(),
                    run.started_at().map(show::utc).unwrap_or_default(),
                    run.handler_duration().map(show::span).unwrap_or_default(),
                    show::relative(run.finished_at(), now),
                    show::clip(t.last_error().unwrap_or(""), 40),
                ]
            })
            .collect();
        let heads = ["KEY", "DUE", "ATTEMPTS", "OUTCOME", "STARTED", "HANDLER", "FINISHED", "LAST ERROR"];
        print!("{}", show::table(&heads, &rows));
        if let Some(next) = &cursor {
            println!("(more: --after {next})");
        }
    } else {
        // The series' columns only when the page holds a series.
        let series = tasks.iter().any(|t| t.is_recurring());
        let rows: Vec<Vec<String>> = tasks
            .iter()
            .map(|t| {
                let mut row = vec![t.key().to_string(), show::due(t.due(), now)];
                if series {
                    row.extend(show::series_cells(t));
                }
                row.extend([
                    t.attempt().to_string(),
                    t.worker().unwrap_or("").to_string(),
                    t.claimed_at().map(|c| show::relative(c, now)).unwrap_or_default(),
                    show::clip(t.last_error().unwrap_or(""), 40),
                    show::payload_short(t.payload(), 40),
                ]);
                row
            })
            .collect();
        let mut heads = vec!["KEY", "DUE"];
        if series {
            heads.extend(["RECURRENCE", "NEXT RUN"]);
        }
        heads.extend(["ATTEMPTS", "WORKER", "CLAIMED", "LAST ERROR", "PAYLOAD"]);
        print!("{}", show::table(&heads, &rows));
        if let Some(next) = &cursor {
            println!("(more: --after {next})");
        }
    }
    Ok(Ended::Done)
}

async fn dead(
    cli: &Cli,
    timers: &DurableScheduler,
    limit: usize,
    requeue: Option<&str>,
    delete: Option<&str>,
    requeue_all: bool,
) -> Result<Ended, Failure> {
    let json = cli.json;
    if let Some(key) = requeue {
        let done = timers.requeue_dead(key).await?;
        return Ok(said(json, done, &format!("requeued {key:?}, due now"), &format!("no dead letter {key:?}")));
    }
    if let Some(key) = delete {
        let done = timers.delete_dead(key).await?;
        return Ok(said(json, done, &format!("deleted the dead letter {key:?}"), &format!("no dead letter {key:?}")));
    }
    if requeue_all {
        // Those there when the command starts: letters that die meanwhile are left for the next run.
        let mut left = timers.stats().await?.dead;
        let mut requeued = 0usize;
        while left > 0 {
            let page = timers.dead_letters(left.min(500)).await?;
            if page.is_empty() {
                break;
            }
            for letter in &page {
                requeued += usize::from(timers.requeue_dead(letter.key()).await?);
            }
            left = left.saturating_sub(page.len());
        }
        if json {
            println!("{}", json!({ "requeued": requeued }));
        } else {
            println!("requeued {requeued} dead letter(s)");
        }
        return Ok(if requeued > 0 { Ended::Done } else { Ended::NothingToActOn });
    }
    let letters = timers.dead_letters(limit).await?;
    if json {
        println!("{}", json!(letters));
    } else {
        let now = SystemTime::now();
        let rows: Vec<Vec<String>> = letters
            .iter()
            .map(|d| {
                vec![
                    d.key().to_string(),
                    d.attempts().to_string(),
                    show::relative(d.died(), now),
                    show::clip(d.last_error(), 60),
                ]
            })
            .collect();
        print!("{}", show::table(&["KEY", "ATTEMPTS", "DIED", "LAST ERROR"], &rows));
    }
    Ok(Ended::Done)
}

/// How many minutes of wheel-wide figures `watch` shows.
const WATCH_MINUTES: usize = 10;

/// Prints the counts every `interval` seconds, with the rates since the last refresh, until
/// interrupted or `count` refreshes have been printed.
async fn watch(cli: &Cli, timers: &DurableScheduler, interval: f64, count: Option<u64>) -> Result<(), Failure> {
    let every = Duration::try_from_secs_f64(interval)
        .ok()
        .filter(|d| *d >= Duration::from_millis(100))
        .ok_or_else(|| Failure::Setting(format!("--interval {interval}: give at least 0.1 seconds")))?;
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(tokio::time::Instant, tokio_timewheel::durable::DurableStats)> = None;
    let mut shown = 0u64;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = &mut ctrl_c => return Ok(()),
        }
        let stats = timers.stats().await?;
        let at = tokio::time::Instant::now();
        let (handed, acked) = match &last {
            Some((then, before)) => {
                let secs = at.duration_since(*then).as_secs_f64().max(1e-3);
                (
                    stats.handed_out.saturating_sub(before.handed_out) as f64 / secs,
                    stats.acked.saturating_sub(before.acked) as f64 / secs,
                )
            }
            None => (0.0, 0.0),
        };
        let due_soon = timers.due_counts(SystemTime::now(), Duration::from_secs(10), 6).await?;
        let figures = timers.figures(WATCH_MINUTES).await?;
        if cli.json {
            let line = show::object_with(
                &stats,
                [
                    ("wheel", json!(cli.wheel)),
                    ("handed_out_per_s", json!(handed)),
                    ("acked_per_s", json!(acked)),
                    ("due_per_10s_next_minute", json!(due_soon)),
                    ("figures", json!(figures)),
                ],
            );
            println!("{line}");
        } else {
            // Clear the screen and go home, as `watch(1)` does.
            print!("\x1b[2J\x1b[H");
            print!("{}", show::stats_text(&cli.wheel, &stats));
            println!("  handed out {handed:>9.1}/s   acknowledged {acked:>9.1}/s   (since the last refresh)");
            println!("  due in the next minute, per 10 s: {due_soon:?}");
            let late = |q: f64| {
                figures.lateness_quantile(q).map_or_else(|| "-".to_string(), |d| format!("< {}", show::span(d)))
            };
            println!(
                "\n  every node, the last {WATCH_MINUTES} minutes (lateness of claims: p50 {}, p99 {})",
                late(0.5),
                late(0.99)
            );
            print!("{}", show::minutes_table(figures.minutes()));
            println!("\n(every {}; Ctrl-C to stop)", show::span(every));
        }
        last = Some((at, stats));
        shown += 1;
        if count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_with_their_unit() {
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(duration("0.003s"), Ok(Duration::from_millis(3)));
        assert_eq!(duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(duration("0ms"), Ok(Duration::ZERO));
        for bad in ["", "1", "s", "1x", "1 s", "-1s", "1.s.5", ".5s", "1.2.3s", "99999999999999999999h"] {
            assert!(duration(bad).is_err(), "{bad:?}");
        }
    }
}
