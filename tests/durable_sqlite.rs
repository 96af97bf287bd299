//! The durable wheel on the embedded SQLite store (feature `sqlite`): no server. A task hours
//! away on paused time (`sqlite::memory:` follows Tokio's clock) runs once, in seconds;
//! a file keeps what was scheduled across a reopen; the fire path hands every task out once;
//! bad URLs and files (not a wheel's, read-only, in a folder that cannot be made) are refused
//! with what to do, and a full disk fails the call that meets it and loses nothing accepted.
//!
//! Run with `cargo test --features sqlite --test durable_sqlite`.
#![cfg(feature = "sqlite")]

mod support;

use std::time::{Duration, Instant, SystemTime};

use support::durable::Log;
use tokio_timewheel::durable::{DurableScheduler, Task};
use tokio_timewheel::Error;

/// A task due in 48 hours, on Tokio's paused clock: it runs once as soon as the runtime is idle,
/// with its due time read on that clock and no lateness to speak of, in well under a second of
/// real time: the leader of a store in this process sleeps until the next due time.
#[tokio::test(start_paused = true)]
async fn a_task_hours_away_runs_once_on_paused_time() {
    let real = Instant::now();
    let timers = DurableScheduler::builder("sqlite::memory:", "orders").connect().await.expect("connect");
    let log = Log::default();
    let worker = log.worker(&timers);
    let scheduled_at = SystemTime::now();
    let later = Duration::from_secs(48 * 3600);
    timers.schedule("order-42:review", later, "42").await.unwrap();
    tokio::time::sleep(later + Duration::from_secs(5)).await;
    worker.shutdown().await;
    let runs = log.of("order-42:review");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    // The store's clock is Tokio's from the wall-clock time it opened at: the real time the
    // connect took stands still on it, so the due time is 48 hours from the call within that.
    let due_at = run.due.duration_since(scheduled_at - Duration::from_secs(1)).unwrap_or_default();
    assert!(due_at >= later && due_at < later + Duration::from_secs(2), "due {due_at:?} after the call, less 1 s");
    let late = run.claimed.duration_since(run.due).unwrap_or_default();
    assert!(late <= Duration::from_secs(2), "claimed {late:?} after its due time (a tick is 1 s)");
    assert_eq!(timers.stats().await.unwrap().acked, 1);
    let took = real.elapsed();
    eprintln!("48 hours of paused time took {took:?} of real time");
    assert!(took < Duration::from_secs(1), "{took:?}");
}

/// A file keeps the wheel: scheduled tasks and counters are there after the handle is dropped
/// and the file opened again, and a worker then hands each task out once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_keeps_the_wheel_and_every_task_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("data/orders.db").display());
    {
        let timers = DurableScheduler::builder(&url, "orders").connect().await.expect("created with its folder");
        for i in 0..200u64 {
            timers.schedule(format!("order-{i}"), Duration::from_millis(200 + i * 3), "p").await.unwrap();
        }
        assert!(timers.cancel("order-7").await.unwrap());
        assert_eq!(timers.len().await.unwrap(), 199);
    }
    let timers = DurableScheduler::builder(&url, "orders").connect().await.expect("reopen");
    assert_eq!(timers.len().await.unwrap(), 199, "kept across the reopen");
    let log = Log::default();
    let worker = log.worker(&timers);
    let deadline = Instant::now() + Duration::from_secs(20);
    while log.len() < 199 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    support::durable::assert_once(&log);
    assert_eq!(log.distinct_keys().len(), 199);
    assert!(!log.distinct_keys().contains("order-7"), "a cancelled task never ran");
    for h in log.all() {
        assert!(h.at >= h.due, "{h:?} early");
    }
    let stats = timers.stats().await.unwrap();
    assert_eq!((stats.scheduled, stats.acked, stats.cancelled, stats.pending), (200, 199, 1, 0), "{stats:?}");
}

/// Bad URLs and files are errors that say what to do; nothing panics.
#[tokio::test]
async fn bad_urls_and_files_are_refused_with_what_to_do() {
    let invalid = |r: Result<DurableScheduler, Error>| match r {
        Err(Error::Invalid(why)) => why,
        Err(other) => panic!("expected Error::Invalid, got {other:?}"),
        Ok(_) => panic!("expected Error::Invalid, got a wheel"),
    };
    let why = invalid(DurableScheduler::builder("sqlite:", "w").connect().await);
    assert!(why.contains("sqlite::memory:"), "{why}");
    let why = invalid(DurableScheduler::builder("mysql://127.0.0.1/db", "w").connect().await);
    assert!(why.contains("sqlite"), "the schemes it takes: {why}");

    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all, just some text that is long enough").unwrap();
    let why = invalid(DurableScheduler::builder(format!("sqlite:{}", text.display()), "w").connect().await);
    assert!(why.contains("notes.txt"), "names the file: {why}");
    let under_a_file = text.join("wheel.db");
    let why = invalid(DurableScheduler::builder(format!("sqlite:{}", under_a_file.display()), "w").connect().await);
    assert!(why.contains("wheel.db"), "{why}");
}

/// A handler on the embedded store gets what it gets on Redis: payload, attempt, due time.
#[tokio::test(start_paused = true)]
async fn a_failed_task_is_retried_then_dead_on_the_embedded_store() {
    let timers = DurableScheduler::builder("sqlite::memory:", "retries")
        .max_attempts(2)
        .backoff(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect");
    timers.schedule("flaky", Duration::from_secs(10), "p").await.unwrap();
    let worker = timers.run(|task: Task| async move { Err::<(), _>(format!("attempt {} failed", task.attempt())) });
    tokio::time::sleep(Duration::from_secs(60)).await;
    worker.shutdown().await;
    let dead = timers.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].key(), dead[0].attempts(), dead[0].last_error()), ("flaky", 2, "attempt 2 failed"));
}

// ---------------------------------------------------------------------------------------------
// Bad files, in processes of their own: a read-only file or folder (as an unprivileged user: root
// writes through any mode), and a full disk (a file-size limit on the process, `RLIMIT_FSIZE`,
// which is what a full disk does to SQLite's writes: each write past it fails). Each is a clear
// `Error` that says what to do, never a panic, and what was accepted before is all there after.

/// The role of this test binary's process when run again by a test below (`support/node.rs`).
const ENV_CHILD: &str = "TIMEWHEEL_SQLITE_CHILD";
/// The directory the child works in.
const ENV_DIR: &str = "TIMEWHEEL_SQLITE_DIR";

/// The body of a child process: does nothing unless started by a test below.
#[test]
fn node_process() {
    let (Some(role), Some(dir)) = (support::node::setting(ENV_CHILD), support::node::setting(ENV_DIR)) else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    match role.as_str() {
        "read-only" => read_only_child(&dir),
        "full-disk" => full_disk_child(&dir),
        "full-tmpfs" => full_tmpfs_child(&dir),
        other => panic!("no child role {other:?}"),
    }
}

/// Runs a child in `role` on `dir` and checks that it passed (its panics are on the test's stderr).
fn run_child(role: &str, dir: &std::path::Path) {
    let mut child =
        support::node::NodeProcess::spawn([(ENV_CHILD, role.to_owned()), (ENV_DIR, dir.display().to_string())]);
    let status =
        child.join(Duration::from_secs(120)).unwrap_or_else(|| panic!("the {role} child did not end within 2 minutes"));
    assert!(status.success(), "the {role} child failed ({status}): its panic is above");
}

/// The `Error::Invalid` text of a `connect` that must be refused.
async fn refused(url: &str) -> String {
    match DurableScheduler::builder(url, "orders").connect().await {
        Err(Error::Invalid(why)) => why,
        Err(other) => panic!("{url}: expected Error::Invalid, got {other:?}"),
        Ok(_) => panic!("{url}: expected Error::Invalid, got a wheel"),
    }
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Drops root's privileges (to `nobody`), so that file modes hold; nothing for another user.
/// `false` (with a note) where root may not.
fn unprivileged() -> bool {
    // SAFETY: plain system calls on this process's credentials (glibc applies them to every
    // thread), before anything that depends on them.
    let dropped = unsafe {
        libc::geteuid() != 0
            || (libc::setgroups(0, std::ptr::null()) == 0 && libc::setgid(65534) == 0 && libc::setuid(65534) == 0)
    };
    if !dropped {
        note(&format!("skipped: root could not become nobody ({})", std::io::Error::last_os_error()));
    }
    dropped
}

/// A wheel file this process cannot write, a writable file in a folder it cannot write (where
/// SQLite's write-ahead log goes), a new file there, and a folder it cannot make: each refused
/// with what to do, the file untouched.
#[test]
fn a_read_only_file_or_folder_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    set_mode(dir.path(), 0o755);
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let wheel = ro.join("orders.db");
    let url = format!("sqlite:{}", wheel.display());
    runtime.block_on(async {
        let timers = DurableScheduler::builder(&url, "orders").connect().await.expect("create the wheel");
        for i in 0..3 {
            timers.schedule(format!("order-{i}"), Duration::from_secs(3600), "p").await.unwrap();
        }
        let other = DurableScheduler::builder(format!("sqlite:{}", ro.join("writable.db").display()), "orders");
        other.connect().await.expect("create a second wheel");
    });
    set_mode(&wheel, 0o444);
    set_mode(&ro.join("writable.db"), 0o666);
    set_mode(&ro, 0o555);
    run_child("read-only", dir.path());
    set_mode(&ro, 0o755);
    set_mode(&wheel, 0o644);
    runtime.block_on(async {
        let timers = DurableScheduler::builder(&url, "orders").connect().await.expect("writable again");
        assert_eq!(timers.len().await.unwrap(), 3, "the refused opens changed nothing");
    });
}

fn read_only_child(dir: &std::path::Path) {
    if !unprivileged() {
        return;
    }
    let ro = dir.join("ro");
    if let Err(e) = std::fs::metadata(&ro) {
        // A temp dir under a folder that nobody may enter (TMPDIR=/root/tmp, say).
        note(&format!("skipped: this user cannot reach {} ({e})", ro.display()));
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let why = refused(&format!("sqlite:{}", ro.join("orders.db").display())).await;
        eprintln!("a read-only file: {why}");
        assert!(why.contains("orders.db") && why.contains("read-only") && why.contains("writable"), "{why}");
        let why = refused(&format!("sqlite:{}", ro.join("writable.db").display())).await;
        eprintln!("a writable file in a read-only folder: {why}");
        assert!(why.contains("writable.db-wal") && why.contains(&format!("make {} writable", ro.display())), "{why}");
        let why = refused(&format!("sqlite:{}", ro.join("new.db").display())).await;
        eprintln!("a new file in a read-only folder: {why}");
        assert!(why.contains("cannot create") && why.contains(&format!("make {} writable", ro.display())), "{why}");
        let why = refused(&format!("sqlite:{}", ro.join("sub/new.db").display())).await;
        eprintln!("a folder that cannot be made: {why}");
        assert!(why.contains("sub") && why.contains("folder"), "{why}");
    });
}

/// An empty SQLite database of one 4 KiB page whose header holds `application_id` and
/// `user_version`, as another application (or a later version of this crate) would leave one.
fn sqlite_database(application_id: u32, user_version: u32) -> Vec<u8> {
    let mut page = vec![0u8; 4096];
    page[..16].copy_from_slice(b"SQLite format 3\0");
    page[16..18].copy_from_slice(&4096u16.to_be_bytes());
    page[18..24].copy_from_slice(&[1, 1, 0, 64, 32, 32]);
    page[24..28].copy_from_slice(&1u32.to_be_bytes()); // file change counter
    page[28..32].copy_from_slice(&1u32.to_be_bytes()); // pages
    page[44..48].copy_from_slice(&4u32.to_be_bytes()); // schema format
    page[56..60].copy_from_slice(&1u32.to_be_bytes()); // UTF-8
    page[60..64].copy_from_slice(&user_version.to_be_bytes());
    page[68..72].copy_from_slice(&application_id.to_be_bytes());
    page[92..96].copy_from_slice(&1u32.to_be_bytes()); // valid for change 1
    page[96..100].copy_from_slice(&3_046_000u32.to_be_bytes());
    // Page 1's b-tree: an empty table leaf (the schema table, with no tables in it).
    page[100] = 0x0d;
    page[105..107].copy_from_slice(&4096u16.to_be_bytes());
    page
}

/// SQLite files that are not a wheel's: another application's database, a keyspace of a later
/// layout, and one whose tables are gone. Each is refused, named, with what to do, and left as it
/// was.
#[tokio::test]
async fn a_database_that_is_not_a_wheels_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("other.db", 0x4d59_4150, 0, "another application's SQLite database (application id 0x4d594150"),
        ("newer.db", 0x5457_4b53, 99, "a keyspace of a newer tokio-timewheel (layout 99"),
        ("damaged.db", 0x5457_4b53, 1, "a damaged keyspace (layout 1, no tables;"),
    ];
    for (name, application_id, user_version, said) in cases {
        let path = dir.path().join(name);
        let bytes = sqlite_database(application_id, user_version);
        std::fs::write(&path, &bytes).unwrap();
        let why = refused(&format!("sqlite:{}", path.display())).await;
        assert!(why.contains(said) && why.contains(name), "{name}: {why}");
        assert!(why.contains("give the store") || why.contains("open it with"), "says what to do: {why}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name} was changed");
    }
}

/// A full disk, as a file-size limit on a child process (`RLIMIT_FSIZE`, which anyone may set:
/// each write past it fails with `EFBIG`, which SQLite reports as a disk I/O error). A `schedule`
/// that meets it fails with an error that says what to do, and nothing of it is kept; every task
/// accepted before it is there, and once there is room again a worker (which kept trying
/// meanwhile) runs each once.
#[test]
fn a_full_disk_fails_the_call_that_meets_it_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    run_child("full-disk", dir.path());
}

/// The same on a disk that is full for real: a 2 MiB tmpfs, mounted in a mount namespace of the
/// child's own (`ENOSPC`: SQLite's "database or disk is full"), where the child may mount one
/// (as root); elsewhere it says so and checks nothing.
#[test]
fn a_full_tmpfs_fails_the_call_that_meets_it_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    run_child("full-tmpfs", dir.path());
}

/// Writes a line to stderr, whatever happens to it: a child's stderr may be a file that the
/// limit of [`file_size_limit`] stops growing.
fn note(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Limits the size of the files this process writes to `bytes` (`None`: lifts the limit).
fn file_size_limit(bytes: Option<u64>) {
    // SAFETY: plain system calls on this process's limits and signal disposition.
    unsafe {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        assert_eq!(libc::getrlimit(libc::RLIMIT_FSIZE, &mut limit), 0);
        limit.rlim_cur = bytes.map_or(limit.rlim_max, |b| b as libc::rlim_t);
        // A write past the limit fails with EFBIG instead of killing the process.
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &limit), 0, "setrlimit");
    }
}

fn full_disk_child(dir: &std::path::Path) {
    let file = dir.join("orders.db");
    fill_the_disk(&file, || file_size_limit(Some(512 << 10)), || file_size_limit(None));
}

/// Mounts a 2 MiB tmpfs at `dir/disk`, in a mount namespace of this process's own, which goes
/// with it; `false` (with a note) where this process may not.
fn mount_small_tmpfs(dir: &std::path::Path) -> bool {
    use std::ffi::CString;
    let disk = dir.join("disk");
    std::fs::create_dir(&disk).unwrap();
    let target = CString::new(disk.display().to_string()).unwrap();
    // SAFETY: system calls with valid C strings; this thread has started no other yet (the test
    // harness's own threads keep the namespace they had).
    let failed = unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            Some("unshare(CLONE_NEWNS)")
        } else if libc::mount(
            c"none".as_ptr(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            Some("making the mounts private")
        } else if libc::mount(c"tmpfs".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), 0, c"size=2m".as_ptr().cast()) != 0
        {
            Some("mount -t tmpfs")
        } else {
            None
        }
    };
    if let Some(what) = failed {
        note(&format!("skipped: {what} failed ({}): this needs root", std::io::Error::last_os_error()));
    }
    failed.is_none()
}

fn full_tmpfs_child(dir: &std::path::Path) {
    if !mount_small_tmpfs(dir) {
        return;
    }
    let disk = dir.join("disk");
    let ballast = disk.join("ballast");
    let fill = || std::fs::write(&ballast, vec![0u8; 768 << 10]).unwrap();
    let make_room = || std::fs::remove_file(&ballast).unwrap();
    fill_the_disk(&disk.join("orders.db"), fill, make_room);
}

/// Schedules tasks in the wheel at `file` after `fill` until a `schedule` fails, runs a worker
/// for a while on the full disk, calls `make_room`, and checks that the failure said what to do
/// and that every task accepted ran once.
fn fill_the_disk(file: &std::path::Path, fill: impl FnOnce(), make_room: impl FnOnce()) {
    let url = format!("sqlite:{}", file.display());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let timers = DurableScheduler::builder(&url, "orders").tick(Duration::from_millis(50)).connect().await.unwrap();
        fill();
        let payload = vec![b'x'; 2000];
        let mut accepted = Vec::new();
        let error = loop {
            let key = format!("order-{}", accepted.len());
            match timers.schedule(&key, Duration::from_millis(500), payload.clone()).await {
                Ok(()) => accepted.push(key),
                Err(e) => break e,
            }
            if accepted.len() > 100_000 {
                make_room();
                panic!("the disk was never full");
            }
        };
        let refused_key = format!("order-{}", accepted.len());
        // Reads still answer on the full disk; a worker's claims fail, and it keeps trying.
        let len_when_full = timers.len().await;
        let refused_kept = timers.contains(&refused_key).await;
        let log = Log::default();
        let worker = log.worker(&timers);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let ran_when_full = log.len();
        make_room();
        note(&format!("the disk was full after {} tasks: {error:?}\n  shown as: {error}", accepted.len()));
        let text = error.to_string();
        assert!(text.contains("full") && text.contains("free space") && text.contains("orders.db"), "{text}");
        assert!(!error.is_retryable(), "{error:?}");
        assert_eq!(len_when_full.unwrap(), accepted.len(), "every accepted task, and no more");
        assert!(!refused_kept.unwrap(), "nothing of the refused call is kept");
        assert_eq!(ran_when_full, 0, "a task ran on the full disk: its claim was written");
        let done =
            support::durable::wait_until(Duration::from_secs(60), || log.distinct_keys().len() >= accepted.len()).await;
        worker.shutdown().await;
        assert!(done, "{} of {} accepted tasks ran", log.distinct_keys().len(), accepted.len());
        support::durable::assert_once(&log);
        let stats = timers.stats().await.unwrap();
        assert_eq!((stats.acked, stats.pending, stats.dead), (accepted.len() as u64, 0, 0), "{stats:?}");
        timers.schedule(&refused_key, Duration::ZERO, "p").await.expect("room again");
    });
}
