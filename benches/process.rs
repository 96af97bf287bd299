//! What the process itself has used so far: CPU time and resident memory, read from the kernel
//! (Linux). Shared by the benchmarks that measure the service in their own process.

/// CPU time of the whole process so far (user and system, all threads), in nanoseconds.
pub fn cpu_ns() -> u64 {
    // SAFETY: `getrusage` only writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, &mut usage), 0);
        usage
    };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    ns(usage.ru_utime) + ns(usage.ru_stime)
}

/// The resident set (VmRSS) of the process in bytes; `None` where `/proc/self/status` does not
/// say (not Linux).
pub fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
