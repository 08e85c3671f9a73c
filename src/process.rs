//! Processes corral starts or looks at: process groups, how they are ended, and how a pid is
//! told apart from a recycled one.
//!
//! Every child corral starts is the leader of its own process group, so that ending it ends
//! everything it started (a shell's children, an engine's tool calls) and a terminal's Ctrl-C
//! reaches corral, which decides, rather than the child directly. The one exception is a
//! command `corral run` starts from a terminal's foreground: [`Foreground`] lends it the
//! terminal, as a shell does, so that it can read it (and Ctrl-C and Ctrl-Z reach it).

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::time::Duration;

use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{self, WaitPidFlag, WaitStatus};
use nix::unistd::{self, Pid};
use procfs::process::Process;
use tokio::process::Child;

/// How often [`end_group`] looks for group members that outlive the leader. They are not our
/// children, so no notification tells us when they exit; this poll only runs during the grace
/// period of an ending group, never in steady state.
const STRAGGLER_POLL: Duration = Duration::from_millis(20);

/// The start time of process `pid` in clock ticks since boot (field 22 of `/proc/PID/stat`).
/// Together with the pid it names one process for good: a recycled pid has another start time.
pub fn start_time(pid: u32) -> Option<u64> {
    Some(stat_of(pid)?.starttime)
}

/// Whether the process that was `pid`, started at `start` (when known), still runs.
/// A zombie counts as gone: it will never do anything again.
pub fn is_alive(pid: u32, start: Option<u64>) -> bool {
    // corral targets Linux: a process without a /proc entry does not exist.
    let Some(stat) = stat_of(pid) else {
        return false;
    };
    stat.state != ZOMBIE && start.is_none_or(|start| stat.starttime == start)
}

/// `/proc/PID/stat` of process `pid`, if it exists (pid 0 and pids beyond `i32` never do).
fn stat_of(pid: u32) -> Option<procfs::process::Stat> {
    let pid = i32::try_from(pid).ok().filter(|&pid| pid > 0)?;
    Process::new(pid).ok()?.stat().ok()
}

/// The state letter of a zombie in `/proc/PID/stat`.
const ZOMBIE: char = 'Z';

/// Whether any live process is left in group `pgid`. Zombies do not count: they will never
/// run again, and an orphan's zombie lingers until init (which may be slow, or in a container
/// may never) reaps it.
pub fn group_exists(pgid: i32) -> bool {
    // No signal (`None`) sends nothing; it only asks whether the group has members.
    if signal::killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    let Ok(processes) = procfs::process::all_processes() else {
        return true;
    };
    processes.filter_map(Result::ok).any(|process| {
        process
            .stat()
            .is_ok_and(|stat| stat.state != ZOMBIE && stat.pgrp == pgid)
    })
}

/// Sends `signal` to every process of group `pgid`. A group already gone is not an error.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // ESRCH (no such group) is expected and ignored; so is a number that names no signal.
        if let Ok(signal) = Signal::try_from(signal) {
            let _ = signal::killpg(Pid::from_raw(pgid), signal);
        }
    }
}

/// Ends the process group led by `child`: SIGTERM to the whole group, then SIGKILL to whatever
/// is left when `grace` runs out. Returns once the leader is reaped and the group is empty (or
/// has been sent SIGKILL, which cannot be ignored). Returns how the leader ended.
pub async fn end_group(
    child: &mut Child,
    pgid: i32,
    grace: Duration,
) -> Option<std::process::ExitStatus> {
    signal_group(pgid, Signal::SIGTERM as i32);
    let deadline = tokio::time::Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    while group_exists(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
    signal_group(pgid, Signal::SIGKILL as i32);
    child.wait().await.ok()
}

/// Ends a process group that is not our child (left by a supervisor that died): SIGTERM,
/// then SIGKILL to whatever is left when `grace` runs out. Returns when the group is empty.
pub async fn end_orphan_group(pgid: i32, grace: Duration) {
    signal_group(pgid, Signal::SIGTERM as i32);
    let deadline = tokio::time::Instant::now() + grace;
    while group_exists(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
    signal_group(pgid, Signal::SIGKILL as i32);
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
    let Ok(processes) = procfs::process::all_processes() else {
        return Vec::new();
    };
    processes
        .filter_map(Result::ok)
        .filter(|process| {
            process.environ().is_ok_and(|environment| {
                environment
                    .get(OsStr::new(name))
                    .is_some_and(|found| found == value)
            })
        })
        .map(|process| process.pid())
        .collect()
}

/// The conventional name of a signal number (`SIGKILL`), for the ledger's `signal` column;
/// `SIG` and the number for one without a name (a real-time signal).
pub fn signal_name(signal: i32) -> String {
    match Signal::try_from(signal) {
        Ok(signal) => signal.as_str().to_string(),
        Err(_) => format!("SIG{signal}"),
    }
}

/// The foreground of the terminal on stdin, lent to a child's process group while it runs.
///
/// A process group that is not the terminal's foreground is stopped (SIGTTIN, SIGTTOU) when
/// it reads the terminal or changes its modes: an editor `git commit` opens, a password
/// prompt. corral runs its command in a group of its own, so when corral itself is in the
/// foreground it hands the terminal to that group and takes it back when the command ends or
/// stops. Dropping the value takes the terminal back.
pub struct Foreground {
    /// corral's own process group, the terminal's foreground before.
    ours: Pid,
    /// The child's process group.
    lent_to: Pid,
}

impl Foreground {
    /// Lends the terminal on stdin to group `pgid` when corral is in its foreground and its
    /// stdin and stdout are that terminal; `None` otherwise: no terminal, corral in the
    /// background, or corral inside a pipeline (`corral run -- git log | less`), whose other
    /// members need the terminal to stay their group's.
    pub fn lend(pgid: i32) -> Option<Foreground> {
        if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
            return None;
        }
        let ours = unistd::getpgrp();
        if unistd::tcgetpgrp(std::io::stdin()) != Ok(ours) {
            return None;
        }
        let foreground = Foreground {
            ours,
            lent_to: Pid::from_raw(pgid),
        };
        foreground.give();
        Some(foreground)
    }

    /// Gives the terminal back to corral's group if the command's group has it.
    pub fn take_back(&self) {
        if unistd::tcgetpgrp(std::io::stdin()) == Ok(self.lent_to) {
            set_terminal_foreground(self.ours);
        }
    }

    /// Lends the terminal to the command again if it came back to corral's group (a shell's
    /// `fg`), and continues the command. After a `bg` corral is in the background: the command
    /// is only continued.
    pub fn lend_again(&self) {
        if unistd::tcgetpgrp(std::io::stdin()) == Ok(self.ours) {
            self.give();
        } else {
            let _ = signal::killpg(self.lent_to, Signal::SIGCONT);
        }
    }

    /// Makes the command's group the terminal's foreground, and continues it: it may have
    /// touched the terminal before it was its own, and been stopped for it (nothing happens to
    /// a running group).
    fn give(&self) {
        set_terminal_foreground(self.lent_to);
        let _ = signal::killpg(self.lent_to, Signal::SIGCONT);
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        self.take_back();
    }
}

/// Makes `pgid` the terminal's foreground. Called from a background group (taking the terminal
/// back), `tcsetpgrp` would stop the caller with SIGTTOU unless the signal is blocked, so it is
/// blocked on this thread for the call.
fn set_terminal_foreground(pgid: Pid) {
    let mut block = SigSet::empty();
    block.add(Signal::SIGTTOU);
    let mut previous = SigSet::empty();
    if signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&block), Some(&mut previous)).is_err() {
        return;
    }
    let _ = unistd::tcsetpgrp(std::io::stdin(), pgid);
    let _ = signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&previous), None);
}

/// Whether child `pid` has stopped (Ctrl-Z, SIGTTIN, …) since this was last asked. Only stops
/// are consumed: the child's exit stays for whoever waits for it.
pub fn child_stopped(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // WNOHANG never blocks; without WEXITED no exit is reaped.
    let stopped = wait::waitid(
        wait::Id::Pid(Pid::from_raw(pid)),
        WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG,
    );
    matches!(stopped, Ok(status) if status != WaitStatus::StillAlive)
}
