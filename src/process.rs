//! Processes corral starts or looks at: process groups, how they are ended, and how a pid is
//! told apart from a recycled one.
//!
//! Every child corral starts is the leader of its own process group, so that ending it ends
//! everything it started (a shell's children, an engine's tool calls) and a terminal's Ctrl-C
//! reaches corral, which decides, rather than the child directly.

use std::time::Duration;

use tokio::process::Child;

/// How often [`end_group`] looks for group members that outlive the leader. They are not our
/// children, so no notification tells us when they exit; this poll only runs during the grace
/// period of an ending group, never in steady state.
const STRAGGLER_POLL: Duration = Duration::from_millis(20);

/// The start time of process `pid` in clock ticks since boot (field 22 of `/proc/PID/stat`).
/// Together with the pid it names one process for good: a recycled pid has another start time.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    let after_name = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3, so start time (field 22) is the 20th from here.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that was `pid`, started at `start` (when known), still runs.
/// A zombie counts as gone: it will never do anything again.
pub fn is_alive(pid: u32, start: Option<u64>) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // corral targets Linux: a process without a /proc entry does not exist.
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(after_name) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
        return false;
    };
    let mut fields = after_name.split_whitespace();
    if fields.next() == Some("Z") {
        return false;
    }
    match start {
        Some(start) => fields.nth(18).and_then(|field| field.parse::<u64>().ok()) == Some(start),
        None => true,
    }
}

/// Whether any live process is left in group `pgid`. Zombies do not count: they will never
/// run again, and an orphan's zombie lingers until init (which may be slow, or in a container
/// may never) reaps it.
pub fn group_exists(pgid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only asks whether the group has members.
    if unsafe { libc::killpg(pgid, 0) } != 0 {
        return false;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .any(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some(after_name) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
                return false;
            };
            let mut fields = after_name.split_whitespace();
            let state = fields.next();
            // Fields after the name: state, ppid, pgrp.
            let group = fields.nth(1).and_then(|field| field.parse::<i32>().ok());
            state != Some("Z") && group == Some(pgid)
        })
}

/// Sends `signal` to every process of group `pgid`. A group already gone is not an error.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: killpg has no memory effects; ESRCH (no such group) is expected and ignored.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// Ends the process group led by `child`: SIGTERM to the whole group, then SIGKILL to whatever
/// is left when `grace` runs out. Returns once the leader is reaped and the group is empty (or
/// has been sent SIGKILL, which cannot be ignored).
pub async fn end_group(child: &mut Child, pgid: i32, grace: Duration) {
    signal_group(pgid, libc::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    while group_exists(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
    signal_group(pgid, libc::SIGKILL);
    let _ = child.wait().await;
}

/// Ends a process group that is not our child (left by a supervisor that died): SIGTERM,
/// then SIGKILL to whatever is left when `grace` runs out. Returns when the group is empty.
pub async fn end_orphan_group(pgid: i32, grace: Duration) {
    signal_group(pgid, libc::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    while group_exists(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
    signal_group(pgid, libc::SIGKILL);
    // SIGKILL cannot be ignored; the members disappear as soon as the kernel reaps them.
    let reaped_by = tokio::time::Instant::now() + Duration::from_secs(2);
    while group_exists(pgid) && tokio::time::Instant::now() < reaped_by {
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
}

/// The processes whose environment holds `name=value` (read from `/proc/PID/environ`, which
/// only our own processes let us read). Finds a child whose pid was never recorded: a
/// supervisor killed between spawning it and writing its pid.
pub fn find_by_env(name: &str, value: &str) -> Vec<i32> {
    let needle = format!("{name}={value}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|environ| {
                    environ
                        .split(|&byte| byte == 0)
                        .any(|var| var == needle.as_bytes())
                })
                .unwrap_or(false)
        })
        .collect()
}

/// The conventional name of a signal number (`SIGKILL`), for the ledger's `signal` column.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return format!("SIG{signal}"),
    };
    name.to_string()
}
