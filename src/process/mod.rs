//! Processes corral starts or looks at: process groups, how they are ended, and how a pid is
//! told apart from a recycled one.
//!
//! A run's processes are recognised by a [`Mark`]: its engine's process group (when that group
//! is still the run's) and its `CORRAL_RUN_ID` in the environment, which finds what left the
//! group (`setsid`, a double fork) and an engine whose pid was never recorded. [`members`]
//! looks them up in one pass over `/proc` ([`members_async`]: lookups made together share
//! a pass, on a thread of their own); [`end_marked`] ends them all (SIGTERM, SIGKILL
//! after the grace) and says when each mark's last process was gone. [`kill_point`] is the
//! tests' kill -9 at a named moment.
//!
//! Every child corral starts is the leader of its own process group (an engine, an app-server
//! child or a setup command through its [`shim`], which leads the group and adopts what the
//! child detaches), so that ending it ends everything it started (a shell's children, an
//! engine's tool calls) and a terminal's Ctrl-C reaches corral, which decides, rather than
//! the child directly. The one exception is a
//! command `corral run` starts from a terminal's foreground: [`Foreground`] lends it the
//! terminal, as a shell does, so that it can read it (and Ctrl-C and Ctrl-Z reach it).

pub mod shim;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::IsTerminal;
use std::time::Duration;

use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{self, WaitPidFlag, WaitStatus};
use nix::unistd::{self, Pid};
use procfs::process::Process;
use procfs::{Current, CurrentSI};
use serde::{Deserialize, Serialize};
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

/// What the process that was `pid`, started at `start`, runs now: `Some(None)` while it
/// lives without a command line to show (a kernel thread, or one between an `exec`'s
/// teardown and its new program), `None` once it is gone.
pub fn command_now(pid: u32, start: u64) -> Option<Option<String>> {
    let pid = i32::try_from(pid).ok().filter(|&pid| pid > 0)?;
    let process = Process::new(pid).ok()?;
    let stat = process.stat().ok()?;
    if stat.state == ZOMBIE || stat.starttime != start {
        return None;
    }
    Some(
        process
            .cmdline()
            .ok()
            .filter(|argv| !argv.is_empty())
            .map(|argv| argv.join(" ")),
    )
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
pub fn signal_group(pgid: i32, signal: Signal) {
    if pgid > 0 {
        // ESRCH (no such group) is expected and ignored.
        let _ = signal::killpg(Pid::from_raw(pgid), signal);
    }
}

/// Ends the process group led by `child`: SIGTERM to the whole group, then SIGKILL to whatever
/// is left when `grace` runs out. Returns once the leader is reaped and the group is empty (a
/// bounded wait after SIGKILL, which cannot be ignored). Returns how the leader ended.
pub async fn end_group(
    child: &mut Child,
    pgid: i32,
    grace: Duration,
) -> Option<std::process::ExitStatus> {
    signal_group(pgid, Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    let _ = tokio::time::timeout_at(deadline, child.wait()).await;
    while group_exists(pgid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
    signal_group(pgid, Signal::SIGKILL);
    let status = child.wait().await.ok();
    let reaped_by = tokio::time::Instant::now() + KILL_SETTLE;
    while group_exists(pgid) && tokio::time::Instant::now() < reaped_by {
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
    status
}

/// How long processes sent SIGKILL are waited for before they are given up on (the kernel
/// ends them at once; this only bounds a process stuck in uninterruptible sleep).
const KILL_SETTLE: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------------
// A run's processes: its group and whatever carries its id in the environment.

/// How the processes of one run (or one app-server child) are recognised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Its process group, when that group is known to be its: the leader is alive with the
    /// recorded start time, or the leader's pid names no process at all (a group's id is not
    /// handed to a new process while the group has members).
    pub group: Option<i32>,
    /// `(name, value)`: a process whose environment has `name=value` is the run's, wherever it
    /// went (`setsid`, a double fork). Only our own user's environments can be read.
    pub env: Option<(String, String)>,
    /// The leader's start time, when known: only processes started since then can have
    /// inherited the run's environment, so only theirs is read (a scan then reads a handful
    /// of environments, not every process's).
    pub since: Option<u64>,
    /// Where the leader stands in the cycle pids are handed out in, when it was noted at its
    /// spawn: every process of the mark was forked after it, so a pass reads only the pids
    /// handed out since (see [`Birth`]) instead of every process's `stat`.
    pub born: Option<Birth>,
    /// The run was started by this process, so its processes were born in this process's
    /// session (or made sessions of their own since): a pass then skips reading the
    /// environments of sessions older than the run (see `Sessions`). Not so for a run another
    /// process started (a previous daemon's, the lease guard's daemon's).
    pub spawned_here: bool,
}

impl Mark {
    /// The mark of a run whose leader was `pid` started at `start` (`None`: pid never
    /// recorded), carrying `name=value`: its group only when that group is still its own.
    pub fn of_leader(pid: Option<i32>, start: Option<u64>, name: &str, value: &str) -> Mark {
        let group = pid
            // Not 1 either: `killpg(1)` is `kill(-1)`, every process this user may signal.
            .filter(|&pid| pid > 1)
            .filter(|&pid| match stat_of(pid as u32) {
                // No such process: a live group of that id can only be the one it led.
                None => true,
                Some(stat) => start.is_none_or(|start| stat.starttime == start),
            });
        Mark {
            group,
            env: Some((name.to_string(), value.to_string())),
            since: start,
            born: None,
            spawned_here: false,
        }
    }

    /// Whether process `pid` can be one of this mark's, as far as its pid tells.
    fn may_hold(&self, pid: i32, now: Option<&PidNow>) -> bool {
        match (self.born, now) {
            (Some(born), Some(now)) => now.handed_out_since(born, pid),
            _ => true,
        }
    }
}

/// The kernel's pid counters just before a spawn, to make a [`Birth`] of the child's pid.
///
/// Linux hands pids out in a cycle: each new task (a thread too) takes the next free pid after
/// the last one handed out, up to `pid_max`, then from 300 again. So a process forked after a
/// run's engine has a pid after the engine's and at most the last one handed out, until the
/// cycle has come round to the engine's pid again. It cannot have done so while fewer pids
/// were handed out than the cycle is long, less the taken pids it skipped (at most the tasks
/// alive when the engine was spawned). These counters bound both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidClock {
    /// Tasks forked on the machine so far (`/proc/stat`'s `processes`): at least the pids
    /// handed out, in any namespace.
    forks: u64,
    /// Tasks alive (`/proc/loadavg`'s fourth field, after the slash).
    alive: u64,
    /// `/proc/sys/kernel/pid_max`: it can be changed while the run lasts.
    pid_max: u64,
}

impl PidClock {
    /// The counters now; `None` where `/proc` does not tell them, or tells them for another
    /// pid namespace than the one this process's pids are in.
    pub fn read() -> Option<PidClock> {
        if !proc_is_ours() {
            return None;
        }
        Some(PidClock {
            forks: fork_count()?,
            alive: read_loadavg()?.0,
            pid_max: read_pid_max()?,
        })
    }
}

/// A spawned leader's pid with the [`PidClock`] read just before it was forked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Birth {
    pid: i32,
    before: PidClock,
}

impl Birth {
    /// The birth of the child `pid`, spawned right after `before` was read.
    pub fn new(pid: u32, before: PidClock) -> Option<Birth> {
        let pid = i32::try_from(pid).ok().filter(|&pid| pid > 0)?;
        Some(Birth { pid, before })
    }
}

/// The pid counters at a pass, read after its listing of `/proc`.
struct PidNow {
    /// The last pid handed out: every listed process's pid was handed out by then.
    last: i32,
    forks: u64,
    pid_max: u64,
}

/// The pids below this are never handed out again once the cycle has come round
/// (`RESERVED_PIDS` in the kernel).
const RESERVED_PIDS: u64 = 300;

impl PidNow {
    fn read() -> Option<PidNow> {
        if !proc_is_ours() {
            return None;
        }
        Some(PidNow {
            last: read_loadavg()?.1,
            forks: fork_count()?,
            pid_max: read_pid_max()?,
        })
    }

    /// Whether `pid` was handed out after `born`'s (or is it): in the cycle's order from the
    /// leader's pid to the last one, when the cycle cannot have come round since. When it
    /// might have, every pid might be.
    fn handed_out_since(&self, born: Birth, pid: i32) -> bool {
        let cycle = self
            .pid_max
            .min(born.before.pid_max)
            .saturating_sub(RESERVED_PIDS);
        let handed_out = self.forks.saturating_sub(born.before.forks);
        if handed_out.saturating_add(born.before.alive) >= cycle {
            return true;
        }
        let (first, last) = (born.pid, self.last);
        if first <= last {
            (first..=last).contains(&pid)
        } else {
            pid >= first || pid <= last
        }
    }
}

/// Whether `/proc` lists this process's pid namespace (it is another's in some containers,
/// and then its pids and counters do not tell about ours).
fn proc_is_ours() -> bool {
    static OURS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OURS.get_or_init(|| {
        Process::myself().is_ok_and(|me| u32::try_from(me.pid) == Ok(std::process::id()))
    })
}

/// `/proc/stat`'s `processes`: tasks forked since boot.
fn fork_count() -> Option<u64> {
    Some(procfs::KernelStats::current().ok()?.processes)
}

/// `/proc/loadavg`'s tasks alive and last pid handed out (`0.00 0.01 0.05 1/84 32423`).
fn read_loadavg() -> Option<(u64, i32)> {
    let load = procfs::LoadAverage::current().ok()?;
    Some((u64::from(load.max), i32::try_from(load.latest_pid).ok()?))
}

/// `/proc/sys/kernel/pid_max`.
fn read_pid_max() -> Option<u64> {
    u64::try_from(procfs::sys::kernel::pid_max().ok()?).ok()
}

/// A live process found by [`members`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub pid: i32,
    /// Its start time (clock ticks since boot): pid and start name it for good.
    pub start: u64,
    pub pgrp: i32,
    /// Its command line, space-joined (its name in brackets when it has none), for `status`.
    pub command: String,
}

/// One pass over `/proc`: for each mark, its live processes (zombies do not count). A process
/// matches a mark by its group or by its environment; this process itself never does.
pub fn members(marks: &[Mark]) -> Vec<Vec<Member>> {
    let mut found: Vec<Vec<Member>> = vec![Vec::new(); marks.len()];
    if marks.is_empty() {
        return found;
    }
    let Ok(listing) = std::fs::read_dir("/proc") else {
        return found;
    };
    let pids: Vec<i32> = listing
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // Read after the listing: every pid listed was handed out by then.
    let now = marks
        .iter()
        .any(|mark| mark.born.is_some())
        .then(PidNow::read)
        .flatten();
    let ours = std::process::id() as i32;
    let uid = unistd::getuid().as_raw();
    let by_env = marks.iter().any(|mark| mark.env.is_some());
    let mut sessions = Sessions::new(marks);
    for pid in pids {
        if pid == ours || !marks.iter().any(|mark| mark.may_hold(pid, now.as_ref())) {
            continue;
        }
        let Ok(process) = Process::new(pid) else {
            continue;
        };
        let Ok(stat) = process.stat() else { continue };
        if stat.state == ZOMBIE {
            continue;
        }
        // Another user's environment cannot be read; one older than every mark's run cannot
        // hold a run's id.
        let wanted = by_env
            && marks.iter().any(|mark| {
                mark.env.is_some() && mark.since.is_none_or(|since| stat.starttime >= since)
            });
        let environment = if wanted
            && process.uid().is_ok_and(|owner| owner == uid)
            && !sessions.older_than_every_run(stat.session)
        {
            process.environ().ok()
        } else {
            None
        };
        for (index, mark) in marks.iter().enumerate() {
            // Group 0 is no group (kernel threads have it): never a run's.
            let in_group = mark
                .group
                .is_some_and(|group| group > 0 && group == stat.pgrp);
            let young = mark.since.is_none_or(|since| stat.starttime >= since);
            let carries = young
                && mark.env.as_ref().is_some_and(|(name, value)| {
                    environment.as_ref().is_some_and(|environment| {
                        environment
                            .get(OsStr::new(name))
                            .is_some_and(|found| found == value.as_str())
                    })
                });
            if in_group || carries {
                found[index].push(Member {
                    pid: stat.pid,
                    start: stat.starttime,
                    pgrp: stat.pgrp,
                    command: command_of(&process, &stat.comm),
                });
            }
        }
    }
    found
}

/// Which sessions no run of the marks can have a process in, when this process started every
/// one of them ([`Mark::spawned_here`]), so that their processes' environments need not be
/// read (the costly part of a pass: the kernel copies another process's memory). A process is born in its parent's session and leaves it only by
/// `setsid`, which makes a new session led by itself; so a process carrying a run's variable
/// is in this daemon's session, or in a session led by a process started since the run
/// began, or one whose leader is gone. A session led by a live process older than every
/// marked run — another daemon's, a person's shell — holds none of them. (Several daemons on
/// one host each read only their own processes' environments, not each other's engines'.)
struct Sessions {
    /// This process's session: always looked in.
    ours: Option<i32>,
    /// The oldest start time of the runs looked for by environment; `None`: some run's is not
    /// known, or was not started by this process, so every session is looked in.
    since: Option<u64>,
    /// Sessions already judged: whether the leader is alive and older than `since`.
    judged: HashMap<i32, bool>,
}

impl Sessions {
    fn new(marks: &[Mark]) -> Self {
        // Only when every run looked for by environment was started here.
        let since = marks
            .iter()
            .filter(|mark| mark.env.is_some())
            .map(|mark| mark.since.filter(|_| mark.spawned_here))
            .try_fold(u64::MAX, |oldest, since| Some(oldest.min(since?)));
        Sessions {
            ours: unistd::getsid(None).ok().map(|session| session.as_raw()),
            since,
            judged: HashMap::new(),
        }
    }

    fn older_than_every_run(&mut self, session: i32) -> bool {
        let Some(since) = self.since else {
            return false;
        };
        if session <= 1 || Some(session) == self.ours {
            return false;
        }
        *self.judged.entry(session).or_insert_with(|| {
            stat_of(session as u32).is_some_and(|leader| leader.starttime < since)
        })
    }
}

/// A process's command line for people (`[name]` when it has none, as `ps` shows it).
fn command_of(process: &Process, name: &str) -> String {
    match process.cmdline() {
        Ok(argv) if !argv.is_empty() => argv.join(" "),
        _ => format!("[{name}]"),
    }
}

/// [`members`] off the actors' thread, in a pass shared with the other lookups asked for
/// meanwhile. A pass reads every process's `stat` (about 12 µs each, nearly all of it the
/// kernel's) whatever the marks, so runs that end together (a slot limit's worth) cost one or
/// two passes instead of one each. Every lookup is answered by a pass that began after it
/// was asked, so it sees what it would have seen alone.
pub async fn members_async(marks: &[Mark]) -> Vec<Vec<Member>> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let first = {
        let mut queue = SCANS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        queue.waiting.push((marks.to_vec(), sender));
        !std::mem::replace(&mut queue.running, true)
    };
    if !first {
        // The thread may be idle, waiting for a lookup.
        SCAN_WANTED.notify_one();
    }
    // A plain thread, not the blocking pool: the passes serve every runtime of the process
    // (tests run several), and one that shuts down must not take a queued pass with it.
    if first
        && std::thread::Builder::new()
            .name("corral-scan".into())
            .spawn(|| run_scans(SCAN_THREAD_IDLE))
            .is_err()
    {
        // No thread to be had: this lookup runs the passes itself, on the blocking pool,
        // which it leaves as soon as none is waiting (a runtime's end waits for it).
        let _ = tokio::task::spawn_blocking(|| run_scans(Duration::ZERO)).await;
    }
    receiver
        .await
        .unwrap_or_else(|_| vec![Vec::new(); marks.len()])
}

/// A lookup waiting for a pass: its marks, and where their members go.
type Lookup = (Vec<Mark>, tokio::sync::oneshot::Sender<Vec<Vec<Member>>>);

/// The lookups waiting for the next pass over `/proc`, and whether a thread runs passes.
struct Scans {
    waiting: Vec<Lookup>,
    running: bool,
}

static SCANS: std::sync::Mutex<Scans> = std::sync::Mutex::new(Scans {
    waiting: Vec::new(),
    running: false,
});

/// Wakes the scan thread idle in [`run_scans`] when a lookup is queued.
static SCAN_WANTED: std::sync::Condvar = std::sync::Condvar::new();

/// How long the scan thread waits for the next lookup before it ends. Runs end every few
/// milliseconds on a busy daemon: a thread made for each pass cost its creation and teardown
/// (a stack mapped and unmapped) each time.
const SCAN_THREAD_IDLE: Duration = Duration::from_secs(10);

/// Runs passes until no lookup has waited for `idle`; each pass answers every lookup queued
/// before it began.
fn run_scans(idle: Duration) {
    // A pass that panics must not leave `running` set: no thread would serve the lookups
    // queued after it, and every run's end would wait forever.
    struct Unwinding;
    impl Drop for Unwinding {
        fn drop(&mut self) {
            if std::thread::panicking() {
                SCANS
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .running = false;
            }
        }
    }
    let _unwinding = Unwinding;
    loop {
        let batch = {
            let queue = SCANS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (mut queue, _) = SCAN_WANTED
                .wait_timeout_while(queue, idle, |queue| queue.waiting.is_empty())
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if queue.waiting.is_empty() {
                queue.running = false;
                return;
            }
            std::mem::take(&mut queue.waiting)
        };
        let all: Vec<Mark> = batch
            .iter()
            .flat_map(|(marks, _)| marks.iter().cloned())
            .collect();
        let mut found = members(&all).into_iter();
        for (marks, sender) in batch {
            let _ = sender.send(found.by_ref().take(marks.len()).collect());
        }
    }
}

/// Ends every process of every mark: SIGTERM to each group and each member, SIGKILL to
/// whatever is left when `grace` runs out (looked up again, so that what they started in the
/// meantime goes too), and waits until they are gone. Returns, for each mark, when its last
/// process was seen gone (ms since the epoch; the first look for a mark found empty).
///
/// `point` is a test's [`kill_point`], reached once the first signals are sent.
pub async fn end_marked(marks: &[Mark], grace: Duration, mut point: Option<&str>) -> Vec<i64> {
    let mut gone_at: Vec<Option<i64>> = vec![None; marks.len()];
    // The marks looked for, each with the index of the caller's mark it belongs to: the
    // caller's, then the groups their members led (a member that called setsid takes its
    // group with it, and what that group holds is the run's too, environment or not).
    let mut looked_for: Vec<(usize, Mark)> = marks.iter().cloned().enumerate().collect();
    let deadline = tokio::time::Instant::now() + grace;
    let settle = deadline + KILL_SETTLE;
    let mut signal = Signal::SIGTERM;
    loop {
        let scan: Vec<Mark> = looked_for.iter().map(|(_, mark)| mark.clone()).collect();
        let found = members_async(&scan).await;
        let now = crate::clock::now_ms();
        let mut left = vec![false; marks.len()];
        for ((owner, _), members) in looked_for.iter().zip(&found) {
            left[*owner] |= !members.is_empty();
        }
        for (index, left) in left.iter().enumerate() {
            if *left {
                // Something came back (a member forked after the first look): not gone yet.
                gone_at[index] = None;
            } else {
                gone_at[index].get_or_insert(now);
            }
        }
        if !left.contains(&true) || tokio::time::Instant::now() >= settle {
            break;
        }
        if signal == Signal::SIGTERM && tokio::time::Instant::now() >= deadline {
            signal = Signal::SIGKILL;
        }
        let mut led = Vec::new();
        for ((owner, mark), members) in looked_for.iter().zip(&found) {
            if members.is_empty() {
                continue;
            }
            // killpg(0) would signal our own group.
            if let Some(group) = mark.group.filter(|&group| group > 0) {
                let _ = signal::killpg(Pid::from_raw(group), signal);
            }
            for member in members {
                if member.pgrp == member.pid {
                    let _ = signal::killpg(Pid::from_raw(member.pgrp), signal);
                    led.push((*owner, member.pgrp, mark.since, mark.born));
                }
                let _ = signal::kill(Pid::from_raw(member.pid), signal);
            }
        }
        for (owner, group, since, born) in led {
            if !looked_for.iter().any(|(_, mark)| mark.group == Some(group)) {
                // Its leader was forked after the mark's, and what its group holds after it.
                let mark = Mark {
                    group: Some(group),
                    env: None,
                    since,
                    born,
                    spawned_here: false,
                };
                looked_for.push((owner, mark));
            }
        }
        if let Some(point) = point.take() {
            kill_point(point);
        }
        tokio::time::sleep(STRAGGLER_POLL).await;
    }
    let now = crate::clock::now_ms();
    gone_at.into_iter().map(|at| at.unwrap_or(now)).collect()
}

/// Ends a process group that is not our child (left by a supervisor that died): SIGTERM,
/// then SIGKILL to whatever is left when `grace` runs out. Returns when the group is empty.
pub async fn end_orphan_group(pgid: i32, grace: Duration) {
    let mark = Mark {
        group: Some(pgid),
        env: None,
        since: None,
        born: None,
        spawned_here: false,
    };
    end_marked(&[mark], grace, None).await;
}

/// The processes whose environment holds `name=value` (read from `/proc/PID/environ`, which
/// only our own processes let us read). Finds a child whose pid was never recorded: a
/// supervisor killed between spawning it and writing its pid.
#[cfg(any(test, feature = "testkit"))]
pub fn find_by_env(name: &str, value: &str) -> Vec<i32> {
    let mark = Mark {
        group: None,
        env: Some((name.to_string(), value.to_string())),
        since: None,
        born: None,
        spawned_here: false,
    };
    members(&[mark])
        .into_iter()
        .flatten()
        .map(|member| member.pid)
        .collect()
}

/// Kills this process with SIGKILL if [`crate::env::TEST_KILL_AT`] names `point` (a test's kill -9 at a
/// moment random timing cannot hit). Costs one look at a cached value otherwise.
pub fn kill_point(point: &str) {
    static POINTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let points = POINTS.get_or_init(|| {
        std::env::var(crate::env::TEST_KILL_AT)
            .map(|points| {
                points
                    .split(',')
                    .map(|point| point.trim().to_string())
                    .collect()
            })
            .unwrap_or_default()
    });
    if points.iter().any(|named| named == point) {
        tracing::warn!(point, "killed at a test point");
        let _ = signal::kill(unistd::getpid(), Signal::SIGKILL);
    }
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

/// A live run as the daemon's origin rules (`daemon/origin.rs`) match a request's peer
/// against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRun {
    pub run_id: String,
    /// `None` for an app-server child, which serves many sessions.
    pub session_id: Option<String>,
    /// The pid of the run's shim, which leads its process group (0 while it is not stored
    /// yet: the run is then found by its id in an environment only).
    pub pid: i32,
}

/// Waits until process `pid` is gone (its exit, not its reaping), `limit` at most, woken by
/// the kernel through a pidfd rather than by looking again; `false` if it still runs. A pid
/// that names no process is gone.
pub fn wait_gone(pid: i32, limit: Duration) -> bool {
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        // ESRCH: no such process. Anything else (an old kernel): its /proc entry says.
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            || !is_alive(pid as u32, None);
    }
    // SAFETY: a descriptor pidfd_open just returned, owned here alone.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout =
            nix::poll::PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32)
                .unwrap_or(nix::poll::PollTimeout::MAX);
        let mut fds = [nix::poll::PollFd::new(
            fd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, timeout) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return !is_alive(pid as u32, None),
        }
    }
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

/// Makes `command`'s child die (SIGKILL) when this process does, so a daemon killed -9 leaves
/// no git or setup shell behind. The kernel's "parent" is the spawning thread: the daemon
/// spawns these from its main thread, which lives as long as the process.
pub fn dies_with_this_process(command: &mut tokio::process::Command) {
    let parent = unistd::getpid();
    // SAFETY: the hook calls only prctl and getppid, async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(move || dies_with(parent));
    }
}

/// Between fork and exec: makes this child die (SIGKILL) with `parent`, or fails if `parent`
/// is gone already. Calls only prctl and getppid, which are async-signal-safe.
pub(crate) fn dies_with(parent: Pid) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    // Dead between fork and prctl: no signal will ever come.
    if unistd::getppid() != parent {
        return Err(std::io::Error::other("the parent is gone"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    use super::*;

    /// `sh -c SCRIPT` in a group of its own with `CORRAL_RUN_ID=run`; returns it and the
    /// first line it prints.
    fn engine(script: &str, run: &str) -> (std::process::Child, String) {
        let mut child = Command::new("sh")
            .args(["-c", script])
            .env("CORRAL_RUN_ID", run)
            .process_group(0)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (child, line.trim().to_string())
    }

    fn clock(forks: u64, alive: u64, pid_max: u64) -> PidClock {
        PidClock {
            forks,
            alive,
            pid_max,
        }
    }

    #[test]
    fn the_pid_counters_read_from_proc_count_a_spawn() {
        let before = PidClock::read().expect("this process's /proc");
        assert!(
            before.alive > 0 && before.pid_max > RESERVED_PIDS,
            "{before:?}"
        );
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let now = PidNow::read().expect("this process's /proc");
        assert!(
            now.forks > before.forks,
            "{} then {}",
            before.forks,
            now.forks
        );
        let born = Birth::new(pid, before).unwrap();
        assert!(
            now.handed_out_since(born, pid as i32),
            "the child's own pid"
        );
        assert!(
            now.handed_out_since(born, now.last),
            "the last pid handed out"
        );
    }

    #[test]
    fn a_pid_is_the_marks_only_if_handed_out_after_its_leader() {
        let born = Birth::new(1000, clock(50_000, 100, 32_768)).unwrap();
        let now = PidNow {
            last: 1200,
            forks: 50_150,
            pid_max: 32_768,
        };
        assert!(now.handed_out_since(born, 1000), "the leader itself");
        assert!(now.handed_out_since(born, 1100));
        assert!(now.handed_out_since(born, 1200));
        assert!(
            !now.handed_out_since(born, 999),
            "handed out before the leader"
        );
        assert!(
            !now.handed_out_since(born, 1201),
            "not handed out yet: an old one"
        );
        // The cycle came round past pid_max since the leader: from it to the top, then from
        // the bottom to the last.
        let wrapped = PidNow { last: 400, ..now };
        let late = Birth::new(32_700, clock(50_000, 100, 32_768)).unwrap();
        assert!(wrapped.handed_out_since(late, 32_767));
        assert!(wrapped.handed_out_since(late, 350));
        assert!(!wrapped.handed_out_since(late, 401));
        assert!(!wrapped.handed_out_since(late, 32_699));
        // So many pids handed out (with the taken ones it skipped) that the cycle may have
        // come round to the leader again: every pid may be the mark's.
        let round = PidNow {
            forks: 50_000 + 32_768 - 300 - 100,
            ..now
        };
        assert!(round.handed_out_since(born, 5));
        assert!(round.handed_out_since(born, 20_000));
        // A pid_max lowered since the spawn makes the cycle shorter.
        let lowered = PidNow {
            forks: 50_000 + 2_000,
            pid_max: 2_000,
            ..now
        };
        assert!(lowered.handed_out_since(born, 20_000));
    }

    #[test]
    fn a_mark_with_its_birth_finds_what_its_run_started_and_not_an_older_process() {
        // An older process carrying the same id (it cannot have inherited it from the run).
        // The mark has no start time, so only the birth tells it apart.
        let (mut older, _) = engine("echo ready; exec sleep 30", "run-born");
        let before = PidClock::read().expect("this machine's /proc tells the pid counters");
        let (mut leader, pids) = engine(
            "sleep 30 & (exec setsid sleep 30) & echo $! $(( $! )); wait",
            "run-born",
        );
        let setsid: i32 = pids.split(' ').next().unwrap().parse().unwrap();
        let pgid = leader.id() as i32;
        let mut mark = Mark::of_leader(Some(pgid), None, "CORRAL_RUN_ID", "run-born");
        let without_birth = members(std::slice::from_ref(&mark)).remove(0);
        assert!(
            without_birth.iter().any(|m| m.pid == older.id() as i32),
            "without a birth the older process is found: {without_birth:?}"
        );
        mark.born = Birth::new(leader.id(), before);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = members(std::slice::from_ref(&mark)).remove(0);
            let escaped = found
                .iter()
                .any(|m| m.pid == setsid && m.command == "sleep 30");
            if escaped || std::time::Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        for child in [&mut older, &mut leader] {
            let _ = signal::killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        }
        let _ = signal::killpg(Pid::from_raw(setsid), Signal::SIGKILL);
        let _ = older.wait();
        let _ = leader.wait();
        assert!(found.iter().any(|m| m.pid == pgid), "{found:?}");
        assert!(
            found.iter().any(|m| m.pid == setsid),
            "the setsid'd one, found by its id: {found:?}"
        );
        assert!(
            !found.iter().any(|m| m.pid == older.id() as i32),
            "a process older than the leader is not read: {found:?}"
        );
    }

    #[test]
    fn a_runs_members_are_its_group_and_what_carries_its_id() {
        // A member of the group, and one that left it with setsid (same pid: sh is not a
        // group leader there, so setsid does not fork).
        let (mut leader, pids) = engine(
            "sleep 30 & (exec setsid sleep 30) & echo $! $(( $! )); wait",
            "run-members",
        );
        let setsid: i32 = pids.split(' ').next().unwrap().parse().unwrap();
        let pgid = leader.id() as i32;
        let mark = Mark::of_leader(
            Some(pgid),
            start_time(leader.id()),
            "CORRAL_RUN_ID",
            "run-members",
        );
        assert_eq!(mark.group, Some(pgid));
        // The shell says the pids before its children have exec'd: look until they have.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = members(std::slice::from_ref(&mark)).remove(0);
            let in_group = found
                .iter()
                .any(|m| m.pgrp == pgid && m.command == "sleep 30");
            let escaped = found
                .iter()
                .any(|m| m.pid == setsid && m.pgrp == setsid && m.command == "sleep 30");
            if (in_group && escaped) || std::time::Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let found_pids: Vec<i32> = found.iter().map(|member| member.pid).collect();
        assert!(found_pids.contains(&pgid), "{found:?}");
        assert!(
            found.iter().any(|m| m.pid == setsid && m.pgrp == setsid),
            "the setsid'd process (own group, found by its environment): {found:?}"
        );
        assert!(
            found
                .iter()
                .any(|m| m.pgrp == pgid && m.command == "sleep 30"),
            "{found:?}"
        );
        // Another run's id finds nothing of it.
        let other = Mark {
            group: None,
            env: Some(("CORRAL_RUN_ID".into(), "another-run".into())),
            since: None,
            born: None,
            spawned_here: false,
        };
        assert!(members(&[other])[0].is_empty());

        let gone = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(end_marked(
                std::slice::from_ref(&mark),
                Duration::from_millis(200),
                None,
            ));
        assert_eq!(gone.len(), 1);
        let _ = leader.wait();
        assert!(
            members(&[mark])[0].is_empty(),
            "something of the run is left"
        );
        assert!(!is_alive(setsid as u32, None));
    }

    /// For a run started here, environments are read only in sessions its processes can be
    /// in: a process carrying the run's variable in a session led by a process older than the
    /// run (another daemon's, a shell's) is not looked at — no process of the run can enter
    /// such a session — while one that made a session of its own after the run began is
    /// found. A run another process started is looked for everywhere.
    #[test]
    fn a_session_led_by_a_process_older_than_the_run_is_not_read() {
        let mut old = Command::new("setsid")
            .args([
                "sh",
                "-c",
                "read _; CORRAL_RUN_ID=run-s sleep 30 & echo $!; wait",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Start times count in clock ticks (10 ms): the run begins well after that session.
        std::thread::sleep(Duration::from_millis(60));
        let mut leader = Command::new("sleep").arg("30").spawn().unwrap();
        let since = stat_of(leader.id()).unwrap().starttime;
        std::thread::sleep(Duration::from_millis(30));
        std::io::Write::write_all(old.stdin.as_mut().unwrap(), b"go\n").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(old.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let in_old: i32 = line.trim().parse().unwrap();
        let mut young = Command::new("setsid")
            .args(["sleep", "30"])
            .env("CORRAL_RUN_ID", "run-s")
            .spawn()
            .unwrap();
        let young_pid = young.id() as i32;
        // setsid exec's sleep once its session is made.
        let made = std::time::Instant::now();
        while stat_of(young_pid as u32).is_none_or(|stat| stat.session != young_pid)
            && made.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mark = Mark {
            group: None,
            env: Some(("CORRAL_RUN_ID".into(), "run-s".into())),
            since: Some(since),
            born: None,
            spawned_here: true,
        };
        let found: Vec<i32> = members(std::slice::from_ref(&mark))
            .remove(0)
            .iter()
            .map(|m| m.pid)
            .collect();
        // A run another process started may have processes in any session: all are read.
        let elsewhere = Mark {
            spawned_here: false,
            ..mark
        };
        let found_elsewhere: Vec<i32> = members(&[elsewhere])
            .remove(0)
            .iter()
            .map(|m| m.pid)
            .collect();
        for pid in [in_old, young_pid, old.id() as i32] {
            let _ = signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = leader.kill();
        let _ = leader.wait();
        let _ = young.wait();
        let _ = old.wait();
        assert!(
            found.contains(&young_pid),
            "a young session is read: {found:?}"
        );
        assert!(
            !found.contains(&in_old),
            "an older session is not: {found:?}"
        );
        assert!(
            found_elsewhere.contains(&in_old) && found_elsewhere.contains(&young_pid),
            "{found_elsewhere:?}"
        );
    }

    #[test]
    fn a_group_a_member_led_is_ended_with_what_it_holds_without_the_runs_id() {
        // The engine's member calls setsid (so it leads a group of its own) and starts, in
        // that group, a process without the run's id (`env -i`) that ignores SIGTERM.
        let (mut leader, stubborn) = engine(
            "setsid sh -c 'env -i sh -c \"trap \\\"\\\" TERM; exec sleep 30\" & echo $!; wait' & wait",
            "run-led",
        );
        let stubborn: i32 = stubborn.parse().unwrap();
        let mark = Mark::of_leader(
            Some(leader.id() as i32),
            start_time(leader.id()),
            "CORRAL_RUN_ID",
            "run-led",
        );
        // The trap is set before `sleep` is exec'd: look until it has been.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while stat_of(stubborn as u32).is_some_and(|stat| stat.comm != "sleep")
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(end_marked(&[mark], Duration::from_millis(200), None));
        let _ = leader.wait();
        let survived = is_alive(stubborn as u32, None);
        if survived {
            let _ = signal::kill(Pid::from_raw(stubborn), Signal::SIGKILL);
        }
        assert!(
            !survived,
            "a process of the group a member led outlived the run"
        );
    }

    #[test]
    fn a_process_that_ignores_sigterm_is_killed_after_the_grace() {
        let (mut leader, _) = engine("trap '' TERM; echo ready; exec sleep 30", "run-stubborn");
        let mark = Mark::of_leader(
            Some(leader.id() as i32),
            start_time(leader.id()),
            "CORRAL_RUN_ID",
            "run-stubborn",
        );
        let signalled = crate::clock::now_ms();
        let gone = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(end_marked(&[mark], Duration::from_millis(300), None));
        let _ = leader.wait();
        // Its end is when it was gone, after the grace, not when it was signalled.
        assert!(gone[0] >= signalled + 300, "{} ms", gone[0] - signalled);
    }

    #[test]
    fn lookups_made_together_share_a_pass_and_each_gets_its_own_answer() {
        let (mut one, _) = engine("echo ready; exec sleep 30", "run-shared-1");
        let (mut two, _) = engine("echo ready; exec sleep 30", "run-shared-2");
        let mark = |child: &std::process::Child, run: &str| {
            Mark::of_leader(
                Some(child.id() as i32),
                start_time(child.id()),
                "CORRAL_RUN_ID",
                run,
            )
        };
        let marks = [
            mark(&one, "run-shared-1"),
            mark(&two, "run-shared-2"),
            Mark {
                group: None,
                env: Some(("CORRAL_RUN_ID".into(), "run-shared-none".into())),
                since: None,
                born: None,
                spawned_here: false,
            },
        ];
        let found = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                // Many at once, as runs ending together ask; two-mark lookups among them.
                let lookups = (0..24).map(|index| {
                    let marks = &marks;
                    async move {
                        let asked = if index % 4 == 3 {
                            vec![marks[1].clone(), marks[0].clone()]
                        } else {
                            vec![marks[index % 3].clone()]
                        };
                        (asked.clone(), members_async(&asked).await)
                    }
                });
                futures::future::join_all(lookups).await
            });
        let pids = |members: &[Member]| members.iter().map(|m| m.pid).collect::<Vec<_>>();
        for (asked, answer) in found {
            assert_eq!(answer.len(), asked.len());
            for (mark, members) in asked.iter().zip(&answer) {
                match mark.group {
                    Some(group) => assert_eq!(pids(members), [group], "{mark:?}: {members:?}"),
                    None => assert!(members.is_empty(), "{members:?}"),
                }
            }
        }
        for child in [&mut one, &mut two] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    #[test]
    fn a_recycled_leader_pid_does_not_name_its_group() {
        // Our own pid with another start time: a pid reused by some other process.
        let me = std::process::id();
        let start = start_time(me).unwrap();
        let mark = Mark::of_leader(Some(me as i32), Some(start + 1), "CORRAL_RUN_ID", "r");
        assert_eq!(mark.group, None);
        let mark = Mark::of_leader(Some(me as i32), Some(start), "CORRAL_RUN_ID", "r");
        assert_eq!(mark.group, Some(me as i32));
        // No pid recorded: only the environment can tell.
        assert_eq!(
            Mark::of_leader(None, None, "CORRAL_RUN_ID", "r").group,
            None
        );
    }
}
