//! Processes corral starts or looks at: process groups, how they are ended, and how a pid is
//! told apart from a recycled one.
//!
//! Every child corral starts is the leader of its own process group, so that ending it ends
//! everything it started (a shell's children, an engine's tool calls) and a terminal's Ctrl-C
//! reaches corral, which decides, rather than the child directly. The one exception is a
//! command `corral run` starts from a terminal's foreground: [`Foreground`] lends it the
//! terminal, as a shell does, so that it can read it (and Ctrl-C and Ctrl-Z reach it).

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
/// has been sent SIGKILL, which cannot be ignored). Returns how the leader ended.
pub async fn end_group(
    child: &mut Child,
    pgid: i32,
    grace: Duration,
) -> Option<std::process::ExitStatus> {
    signal_group(pgid, libc::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    while group_exists(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
    signal_group(pgid, libc::SIGKILL);
    child.wait().await.ok()
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

/// The foreground of the terminal on stdin, lent to a child's process group while it runs.
///
/// A process group that is not the terminal's foreground is stopped (SIGTTIN, SIGTTOU) when
/// it reads the terminal or changes its modes: an editor `git commit` opens, a password
/// prompt. corral runs its command in a group of its own, so when corral itself is in the
/// foreground it hands the terminal to that group and takes it back when the command ends or
/// stops. Dropping the value takes the terminal back.
pub struct Foreground {
    /// corral's own process group, the terminal's foreground before.
    ours: libc::pid_t,
    /// The child's process group.
    lent_to: libc::pid_t,
}

impl Foreground {
    /// Lends the terminal on stdin to group `pgid` when corral is in its foreground and its
    /// stdin and stdout are that terminal; `None` otherwise: no terminal, corral in the
    /// background, or corral inside a pipeline (`corral run -- git log | less`), whose other
    /// members need the terminal to stay their group's.
    pub fn lend(pgid: i32) -> Option<Foreground> {
        // SAFETY: queries of this process and of fds 0 and 1, which may not be terminals.
        let ours = unsafe {
            if libc::isatty(0) != 1 || libc::isatty(1) != 1 {
                return None;
            }
            let ours = libc::getpgrp();
            if libc::tcgetpgrp(0) != ours {
                return None;
            }
            ours
        };
        let foreground = Foreground {
            ours,
            lent_to: pgid,
        };
        foreground.give();
        Some(foreground)
    }

    /// Gives the terminal back to corral's group if the command's group has it.
    pub fn take_back(&self) {
        // SAFETY: a query of fd 0.
        if unsafe { libc::tcgetpgrp(0) } == self.lent_to {
            set_terminal_foreground(self.ours);
        }
    }

    /// Lends the terminal to the command again if it came back to corral's group (a shell's
    /// `fg`), and continues the command. After a `bg` corral is in the background: the command
    /// is only continued.
    pub fn lend_again(&self) {
        // SAFETY: a query of fd 0.
        if unsafe { libc::tcgetpgrp(0) } == self.ours {
            self.give();
        } else {
            // SAFETY: a signal to the group corral started.
            unsafe { libc::killpg(self.lent_to, libc::SIGCONT) };
        }
    }

    /// Makes the command's group the terminal's foreground, and continues it: it may have
    /// touched the terminal before it was its own, and been stopped for it (nothing happens to
    /// a running group).
    fn give(&self) {
        set_terminal_foreground(self.lent_to);
        // SAFETY: a signal to a group corral started.
        unsafe { libc::killpg(self.lent_to, libc::SIGCONT) };
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
fn set_terminal_foreground(pgid: libc::pid_t) {
    // SAFETY: the signal sets are initialized by sigemptyset before use; the mask is restored.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &block, &mut previous);
        libc::tcsetpgrp(0, pgid);
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
    }
}

/// Whether child `pid` has stopped (Ctrl-Z, SIGTTIN, …) since this was last asked. Only stops
/// are consumed: the child's exit stays for whoever waits for it.
pub fn child_stopped(pid: u32) -> bool {
    // SAFETY: waitid fills the zeroed siginfo; WNOHANG never blocks; without WEXITED no exit
    // is reaped.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let found = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WSTOPPED | libc::WNOHANG,
        );
        found == 0 && info.si_pid() != 0
    }
}
