//! The lease guard: a process of its own that ends a daemon's engine runs once the daemon can
//! no longer be trusted to (#14).
//!
//! With several daemons on one store, another daemon takes over a dead daemon's prompts once
//! its lease expires, and runs them again. Engines lead process groups of their own, so they
//! outlive a daemon killed with `kill -9`; a daemon stopped with SIGSTOP, or cut off from the
//! database, keeps its engines running. Either way a prompt would run twice at once. The
//! guard (`corral __lease-guard`, hidden) ends them: at once when the daemon's pipe to it
//! closes (the daemon is gone), and when the lease deadline the daemon last wrote passes.
//!
//! What it ends: each run listed with it (its group, and what carries its id), and every
//! process that carries the guard's mark ([`crate::env::LEASE_GUARD`]), which the daemon gives each child
//! it starts: an engine spawned but not listed yet (a kill -9 between the two), and the
//! children no run lists, a codex app-server's and a worktree setup command's. A clean
//! shutdown that ended its runs clears the list, and then nothing is swept either.
//!
//! Map of this file:
//! - [`Line`]: the protocol, one line each on the guard's stdin (parsed and rendered here);
//! - [`Watch`]: what the guard knows (the deadline, the listed runs) and what a line or the
//!   clock makes it end, without any I/O (unit-tested);
//! - [`main`]: the guard process: `poll(2)` on stdin until the deadline, then ends runs;
//! - [`Guard`]: the daemon's side: starts the process and writes the lines.
//!
//! Deadlines are CLOCK_BOOTTIME milliseconds: the clock is system-wide on Linux, so the
//! daemon and its guard agree on it; it never jumps with the wall clock, and unlike
//! CLOCK_MONOTONIC it goes on while the host is suspended, as the database's clock does (a
//! laptop woken after an hour finds its deadline long passed, its runs taken over).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{self, SigHandler, Signal};
use nix::sys::time::TimeSpec;
use nix::time::ClockId;

use crate::process::{self, Mark};

/// The hidden subcommand that makes `corral` the guard (dispatched first in `cli::main`).
pub const ARG: &str = "__lease-guard";

/// The longest line the guard keeps reading; a longer one is no line of ours and is dropped.
const MAX_LINE: usize = 4096;

/// How the guard's log lines start (its stderr is the daemon's).
const LOG: &str = "corral lease guard";

/// One line of the daemon's pipe to its guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// `deadline <ms>`: the lease ends at this CLOCK_BOOTTIME millisecond.
    Deadline(u64),
    /// `run + <run_id> <pgid> <pid_start or ->`: a run started; its engine leads group `pgid`
    /// and started at `start` (clock ticks since boot, when known).
    RunStarted(Listed),
    /// `run - <run_id>`: a run ended; nothing of it is left to end.
    RunEnded(String),
    /// `runs clear`: forget every run without ending it (a clean shutdown whose runs ended).
    RunsClear,
    /// `keep <pid> <start>`: a process a run left that its project keeps: never swept.
    Kept { pid: i32, start: u64 },
}

/// A run the guard would end: what `process::Mark::of_leader` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub run_id: String,
    /// The process group its engine leads. Never 0 or 1: `killpg(1)` is `kill(-1)`, every
    /// process we may signal.
    pub pgid: i32,
    /// The leader's start time: a recycled pid's group is not the run's.
    pub start: Option<u64>,
}

impl Line {
    /// The line `text` (without its newline), or `None` when it is not one of ours.
    pub fn parse(text: &str) -> Option<Line> {
        let words: Vec<&str> = text.split_ascii_whitespace().collect();
        match words.as_slice() {
            ["deadline", ms] => ms.parse().ok().map(Line::Deadline),
            ["run", "+", run_id, pgid, start] => {
                let pgid = pgid.parse::<i32>().ok().filter(|&pgid| pgid > 1)?;
                let start = match *start {
                    "-" => None,
                    start => Some(start.parse::<u64>().ok()?),
                };
                Some(Line::RunStarted(Listed {
                    run_id: run_id.to_string(),
                    pgid,
                    start,
                }))
            }
            ["run", "-", run_id] => Some(Line::RunEnded(run_id.to_string())),
            ["runs", "clear"] => Some(Line::RunsClear),
            ["keep", pid, start] => Some(Line::Kept {
                pid: pid.parse::<i32>().ok().filter(|&pid| pid > 1)?,
                start: start.parse().ok()?,
            }),
            _ => None,
        }
    }

    /// The line as written to the pipe, newline included.
    pub fn render(&self) -> String {
        match self {
            Line::Deadline(ms) => format!("deadline {ms}\n"),
            Line::RunStarted(run) => {
                let start = run
                    .start
                    .map_or_else(|| "-".to_string(), |start| start.to_string());
                format!("run + {} {} {start}\n", run.run_id, run.pgid)
            }
            Line::RunEnded(run_id) => format!("run - {run_id}\n"),
            Line::RunsClear => "runs clear\n".to_string(),
            Line::Kept { pid, start } => format!("keep {pid} {start}\n"),
        }
    }
}

/// Whether `run_id` survives a line: one word of printable characters (a run's id is a UUID).
fn is_word(run_id: &str) -> bool {
    !run_id.is_empty() && run_id.chars().all(|c| c.is_ascii_graphic())
}

/// What the guard knows, and what ends when. Times are CLOCK_BOOTTIME ms.
#[derive(Debug, Default)]
pub struct Watch {
    /// The lease's end as last written; `None` until the first `deadline` line: no deadline,
    /// only the pipe's end ends runs.
    deadline: Option<u64>,
    /// The runs listed and not ended, by id.
    runs: BTreeMap<String, Listed>,
    /// The passed deadline's sweep of the marked processes is done: the next one is due
    /// only after a new deadline.
    swept: bool,
    /// A clean shutdown cleared the list: what carries the mark now is meant to outlive the
    /// daemon (a project's kept background processes), until a run is listed again.
    cleared: bool,
    /// The kept processes (pid, start): a sweep leaves them, as a run's end did.
    kept: std::collections::BTreeSet<(i32, u64)>,
}

/// What a line, the clock or the pipe's end makes the guard end.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Ending {
    /// The listed runs.
    pub runs: Vec<Listed>,
    /// Also every process that carries the guard's mark.
    pub sweep: bool,
}

impl Ending {
    fn runs(runs: Vec<Listed>) -> Ending {
        Ending { runs, sweep: false }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && !self.sweep
    }
}

impl Watch {
    /// Whether the deadline has passed at `now` (and no later one came since).
    pub fn passed(&self, now: u64) -> bool {
        self.deadline.is_some_and(|deadline| now >= deadline)
    }

    /// Takes `line` in at `now`; returns what to end at once.
    pub fn apply(&mut self, line: Line, now: u64) -> Ending {
        match line {
            Line::Deadline(deadline) => {
                self.deadline = Some(deadline);
                self.swept = false;
                self.expire(now)
            }
            // The lease is gone: whatever the daemon starts now must not run.
            Line::RunStarted(run) if self.passed(now) => Ending::runs(vec![run]),
            Line::RunStarted(run) => {
                self.cleared = false;
                self.runs.insert(run.run_id.clone(), run);
                Ending::default()
            }
            Line::RunEnded(run_id) => {
                self.runs.remove(&run_id);
                Ending::default()
            }
            Line::RunsClear => {
                self.runs.clear();
                self.cleared = true;
                Ending::default()
            }
            Line::Kept { pid, start } => {
                self.kept.insert((pid, start));
                Ending::default()
            }
        }
    }

    /// Whether the process `pid` started at `start` was kept.
    pub fn is_kept(&self, pid: i32, start: u64) -> bool {
        self.kept.contains(&(pid, start))
    }

    /// What to end because the deadline has passed at `now` (the runs are forgotten, the
    /// sweep done once).
    pub fn expire(&mut self, now: u64) -> Ending {
        if !self.passed(now) {
            return Ending::default();
        }
        let runs = std::mem::take(&mut self.runs).into_values().collect();
        let sweep = !self.swept && !self.cleared;
        self.swept = true;
        Ending { runs, sweep }
    }

    /// Everything, forgotten: the daemon is gone.
    pub fn take_all(&mut self) -> Ending {
        Ending {
            runs: std::mem::take(&mut self.runs).into_values().collect(),
            sweep: !self.cleared,
        }
    }

    /// How long to wait for the next line at `now`, in ms: until the deadline, or forever
    /// (`None`) when there is none or it has passed (nothing is left to end before a line).
    pub fn timeout(&self, now: u64) -> Option<u64> {
        self.deadline
            .filter(|&deadline| deadline > now)
            .map(|deadline| deadline - now)
    }
}

/// CLOCK_BOOTTIME now, in nanoseconds: monotonic, and counting a suspend.
fn monotonic_ns() -> u64 {
    // It fails only for an unknown clock; CLOCK_BOOTTIME exists on Linux since 2.6.39 (a zero
    // would only make deadlines pass early, the safe side).
    let now = ClockId::CLOCK_BOOTTIME
        .now()
        .unwrap_or_else(|_| TimeSpec::new(0, 0));
    (now.tv_sec() as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec() as u64)
}

/// CLOCK_BOOTTIME now, in milliseconds: the clock of `deadline` lines.
pub fn monotonic_ms() -> u64 {
    monotonic_ns() / 1_000_000
}

/// `at` (an `Instant`) on CLOCK_BOOTTIME, in milliseconds, by its distance from now (rounded
/// down: a guard acting a little early is safe, a little late is not).
pub fn monotonic_ms_at(at: Instant) -> u64 {
    let now = Instant::now();
    let clock = monotonic_ns();
    let ns = |duration: Duration| u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    let at = if at >= now {
        clock.saturating_add(ns(at - now))
    } else {
        clock.saturating_sub(ns(now - at))
    };
    at / 1_000_000
}

/// The guard process (`corral __lease-guard MARK`): reads lines from stdin until it ends,
/// ending runs as they come due; on the pipe's end it ends every listed run and what carries
/// `MARK`, and exits 0.
pub fn main() -> i32 {
    // A terminal's Ctrl-C or hangup meant for the daemon must not end its guard (it is in a
    // session of its own, but a signal can be sent to it by mistake); SIGTERM stays, so an
    // operator can end it, and is set back in case the daemon ignored it.
    // SAFETY: these install no handler, only the kernel's ignore or default disposition.
    unsafe {
        for ignored in [Signal::SIGINT, Signal::SIGHUP] {
            let _ = signal::signal(ignored, SigHandler::SigIgn);
        }
        let _ = signal::signal(Signal::SIGTERM, SigHandler::SigDfl);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            say!("{LOG}: no runtime: {error}");
            return 1;
        }
    };
    // A plain file on fd 0: std's Stdin buffers, and a line in its buffer would be invisible
    // to poll.
    let mut input = match io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => File::from(fd),
        Err(error) => {
            say!("{LOG}: no stdin: {error}");
            return 1;
        }
    };
    let sweep = Sweep::of_this_guard();
    let mut watch = Watch::default();
    let mut pending: Vec<u8> = Vec::new();
    // Within a line too long to be ours: its bytes are dropped until its newline.
    let mut overlong = false;
    let mut chunk = [0u8; 4096];
    loop {
        let ending = watch.expire(monotonic_ms());
        end(
            &runtime,
            &sweep,
            &watch,
            ending,
            "the lease deadline passed",
        );
        match readable(&input, watch.timeout(monotonic_ms())) {
            Ok(true) => {}
            // The deadline came: the loop's top ends the runs.
            Ok(false) => continue,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                say!("{LOG}: cannot wait for the daemon's pipe: {error}");
                break;
            }
        }
        let read = match input.read(&mut chunk) {
            // The daemon is gone (or closed the pipe to stop us).
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                say!("{LOG}: cannot read the daemon's pipe: {error}");
                break;
            }
        };
        pending.extend_from_slice(&chunk[..read]);
        while let Some(newline) = pending.iter().position(|&byte| byte == b'\n') {
            let bytes: Vec<u8> = pending.drain(..=newline).collect();
            if std::mem::replace(&mut overlong, false) {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes[..newline]);
            match Line::parse(&text) {
                Some(line) => {
                    let ending = watch.apply(line, monotonic_ms());
                    end(
                        &runtime,
                        &sweep,
                        &watch,
                        ending,
                        "the lease deadline has passed",
                    );
                }
                None => say!("{LOG}: ignored a line that is none of ours: {text:?}"),
            }
        }
        if pending.len() > MAX_LINE {
            say!("{LOG}: ignored a line longer than {MAX_LINE} bytes");
            pending.clear();
            overlong = true;
        }
    }
    let ending = watch.take_all();
    end(&runtime, &sweep, &watch, ending, "the daemon is gone");
    0
}

/// What a sweep looks for: the guard's mark, on processes started since the guard (the
/// daemon starts its guard before any child).
struct Sweep {
    /// `None` when the guard was started without one (nothing is swept).
    mark: Option<String>,
    since: Option<u64>,
}

impl Sweep {
    fn of_this_guard() -> Sweep {
        let mark = std::env::args().nth(2).filter(|mark| is_word(mark));
        if mark.is_none() {
            say!("{LOG}: started without a mark: only listed runs are ended");
        }
        Sweep {
            mark,
            since: process::start_time(std::process::id()),
        }
    }

    fn mark(&self) -> Option<Mark> {
        Some(Mark {
            group: None,
            env: Some((crate::env::LEASE_GUARD.to_string(), self.mark.clone()?)),
            since: self.since,
            born: None,
            spawned_here: false,
        })
    }

    /// SIGKILLs what carries the mark, but what `watch` says was kept, and the groups they
    /// lead; looked at again until none has been seen for [`SWEEP_QUIET`] (what they forked
    /// meanwhile goes too, and a child the daemon forked just before it died carries the
    /// mark only once it has exec'd) or [`SWEEP_SETTLE`] has passed. Returns how many it
    /// signalled.
    fn run(&self, watch: &Watch) -> usize {
        let Some(mark) = self.mark() else {
            return 0;
        };
        let until = Instant::now() + SWEEP_SETTLE;
        let mut quiet_since = Instant::now();
        let mut signalled = std::collections::BTreeSet::new();
        loop {
            let found: Vec<process::Member> = process::members(std::slice::from_ref(&mark))
                .remove(0)
                .into_iter()
                .filter(|member| !watch.is_kept(member.pid, member.start))
                .collect();
            let now = Instant::now();
            if now >= until || found.is_empty() && now >= quiet_since + SWEEP_QUIET {
                return signalled.len();
            }
            if !found.is_empty() {
                quiet_since = now;
            }
            for member in found {
                if member.pgrp == member.pid {
                    process::signal_group(member.pgrp, nix::sys::signal::Signal::SIGKILL);
                }
                let _ = signal::kill(nix::unistd::Pid::from_raw(member.pid), Signal::SIGKILL);
                signalled.insert((member.pid, member.start));
            }
            // Nothing tells the guard of a process's end or exec: the next look does.
            std::thread::sleep(SWEEP_LOOK);
        }
    }
}

/// How long a sweep goes on looking for what carries the mark after its first SIGKILLs.
const SWEEP_SETTLE: Duration = Duration::from_secs(2);

/// How long a sweep looks on after it last found something: a child forked before the
/// daemon died execs (and shows the mark) within it.
const SWEEP_QUIET: Duration = Duration::from_millis(200);

/// Between a sweep's looks.
const SWEEP_LOOK: Duration = Duration::from_millis(5);

/// Waits until `input` has something to read (a line, its end, an error: `true`), at most
/// `timeout` ms (`None`: forever; `false` when it ran out).
fn readable(input: &File, timeout: Option<u64>) -> io::Result<bool> {
    let mut wanted = [PollFd::new(input.as_fd(), PollFlags::POLLIN)];
    // poll rounds its timeout up, never down: it cannot wake before the deadline and spin.
    let timeout = timeout.map_or(PollTimeout::NONE, |ms| {
        PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
    });
    let ready = poll(&mut wanted, timeout).map_err(io::Error::from)?;
    Ok(ready > 0)
}

/// Ends what `ending` names at once: SIGKILL, no grace (the lease is gone, or the daemon
/// is), to each run's group and whatever carries its id, and with a sweep to whatever
/// carries the guard's mark; returns when they are gone.
fn end(runtime: &tokio::runtime::Runtime, sweep: &Sweep, watch: &Watch, ending: Ending, why: &str) {
    if ending.is_empty() {
        return;
    }
    let ids: Vec<&str> = ending.runs.iter().map(|run| run.run_id.as_str()).collect();
    if !ids.is_empty() {
        say!("{LOG}: {why}: ending run(s) {}", ids.join(", "));
    }
    // The marks are made now, not when listed: the leader's identity is checked at the end.
    let marks: Vec<Mark> = ending
        .runs
        .iter()
        .map(|run| Mark::of_leader(Some(run.pgid), run.start, crate::env::RUN_ID, &run.run_id))
        .collect();
    runtime.block_on(process::end_marked(&marks, Duration::ZERO, None));
    if ending.sweep {
        let swept = sweep.run(watch);
        if swept > 0 {
            say!("{LOG}: {why}: ended {swept} other process(es) of the daemon's children");
        }
    }
}

/// The daemon's handle on its guard process. Methods take `&self` and cost a pipe write of a
/// few dozen bytes (atomic, and in practice never blocking), so async code may call them.
///
/// Dropping it closes the pipe, which makes the guard end every run still listed and exit:
/// a daemon whose runs all ended calls [`Guard::forget_all`] before a clean shutdown drops it.
pub struct Guard {
    inner: Mutex<Inner>,
    /// The guard's pid (for logs and tests).
    pid: u32,
    /// What every child of the daemon carries in [`crate::env::LEASE_GUARD`].
    mark: String,
}

struct Inner {
    /// `None` only once `Drop` has handed it to a reaper.
    child: Option<Child>,
    /// The pipe; `None` once a write failed (the guard is gone: logged once).
    pipe: Option<ChildStdin>,
}

impl Guard {
    /// Starts `program __lease-guard` (the daemon passes its own `current_exe()`): stdin a
    /// pipe from us, stdout nowhere, stderr ours (its log lines), in a session of its own so
    /// that a signal to the daemon's group or terminal does not reach it. It gets no
    /// parent-death signal: it must outlive the daemon to do its job.
    pub fn start(program: &Path) -> io::Result<Guard> {
        let mark = uuid::Uuid::new_v4().to_string();
        let mut command = Command::new(program);
        command
            .arg(ARG)
            .arg(&mark)
            // A daemon started from inside another daemon's run carries that guard's mark:
            // this guard is not that run's (its children are, as they are that run's).
            .env_remove(crate::env::LEASE_GUARD)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            // A daemon started from inside a run carries that run's id: its guard must not
            // count as one of that run's processes.
            .env_remove(crate::env::RUN_ID)
            // Holds no directory of anyone's (a worktree to remove, a mount).
            .current_dir("/");
        // SAFETY: setsid is async-signal-safe; the child is no group leader, so it succeeds.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()?;
                Ok(())
            });
        }
        let mut child = command.spawn()?;
        let pid = child.id();
        let Some(pipe) = child.stdin.take() else {
            // Cannot happen with a piped stdin; a guard without a pipe would guard nothing.
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::other("the lease guard has no pipe"));
        };
        Ok(Guard {
            inner: Mutex::new(Inner {
                child: Some(child),
                pipe: Some(pipe),
            }),
            pid,
            mark,
        })
    }

    /// The guard process's pid.
    #[cfg(any(test, feature = "testkit"))]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The value of [`crate::env::LEASE_GUARD`] in every child the daemon starts.
    pub fn mark(&self) -> &str {
        &self.mark
    }

    /// The lease now ends at `deadline`: runs still listed then are ended.
    pub fn set_deadline(&self, deadline: Instant) {
        self.send(&Line::Deadline(monotonic_ms_at(deadline)));
    }

    /// Run `run_id` started; its engine leads group `pgid`, started at `pid_start`.
    pub fn run_started(&self, run_id: &str, pgid: i32, pid_start: Option<u64>) {
        if !is_word(run_id) || pgid <= 1 {
            tracing::warn!(
                run_id,
                pgid,
                "not listed with the lease guard: no run id or group of ours"
            );
            return;
        }
        self.send(&Line::RunStarted(Listed {
            run_id: run_id.to_string(),
            pgid,
            start: pid_start,
        }));
    }

    /// Run `run_id` ended: the guard forgets it.
    pub fn run_ended(&self, run_id: &str) {
        if is_word(run_id) {
            self.send(&Line::RunEnded(run_id.to_string()));
        }
    }

    /// Process `pid` started at `start` is kept (a run's leftover its project keeps): no
    /// sweep ends it.
    pub fn kept(&self, pid: i32, start: u64) {
        if pid > 1 {
            self.send(&Line::Kept { pid, start });
        }
    }

    /// Forget every run without ending it: before a clean shutdown drops the guard.
    #[cfg(any(test, feature = "testkit"))]
    pub fn forget_all(&self) {
        self.send(&Line::RunsClear);
    }

    /// Whether the guard process runs and takes our lines.
    #[cfg(any(test, feature = "testkit"))]
    pub fn is_alive(&self) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.pipe.is_none() {
            return false;
        }
        inner
            .child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    fn send(&self, line: &Line) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(pipe) = inner.pipe.as_mut() else {
            return;
        };
        if let Err(error) = pipe.write_all(line.render().as_bytes()) {
            tracing::warn!(%error, pid = self.pid, "the lease guard is gone: its pipe refused a line");
            inner.pipe = None;
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        // The pipe's end: the guard ends what is still listed and exits.
        inner.pipe = None;
        if let Some(mut child) = inner.child.take() {
            if matches!(child.try_wait(), Ok(None)) {
                // Reaped off this thread: ending runs can take the guard a moment.
                let _ = std::thread::Builder::new()
                    .name("corral-guard-reap".into())
                    .spawn(move || {
                        let _ = child.wait();
                    });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(run_id: &str, pgid: i32, start: Option<u64>) -> Listed {
        Listed {
            run_id: run_id.to_string(),
            pgid,
            start,
        }
    }

    #[test]
    fn lines_parse_as_rendered() {
        let lines = [
            Line::Deadline(123_456),
            Line::RunStarted(listed("0190-run", 4242, Some(987))),
            Line::RunStarted(listed("r2", 77, None)),
            Line::RunEnded("0190-run".to_string()),
            Line::RunsClear,
            Line::Kept {
                pid: 4243,
                start: 99,
            },
        ];
        for line in lines {
            let text = line.render();
            assert!(text.ends_with('\n'), "{text:?}");
            assert_eq!(Line::parse(text.trim_end_matches('\n')), Some(line));
        }
        assert_eq!(
            Line::parse("run + r 10 -"),
            Some(Line::RunStarted(listed("r", 10, None)))
        );
        assert_eq!(Line::parse("  deadline   5\r"), Some(Line::Deadline(5)));
    }

    #[test]
    fn lines_that_are_not_ours_are_refused() {
        for text in [
            "",
            "deadline",
            "deadline -5",
            "deadline 5 6",
            "deadline soon",
            "run + r 10",
            "run + r 10 - extra",
            "run + r x -",
            "run + r 10 nine",
            // Group 0 is our own, 1 would be every process (`kill(-1)`), negative is a pid.
            "run + r 0 -",
            "run + r 1 -",
            "run + r -5 -",
            "run - ",
            "run * r",
            "runs",
            "runs clear now",
            "keep 1 5",
            "keep 0 5",
            "keep x 5",
            "keep 5",
            "keep 5 -",
            "hello",
        ] {
            assert_eq!(Line::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_run_id_must_be_one_word() {
        assert!(is_word("0190a6f2-7c1d-7e4b-9a55-3c2e1f0d9b8a"));
        for bad in ["", "a b", "a\nb", "a\tb", "é"] {
            assert!(!is_word(bad), "{bad:?}");
        }
    }

    #[test]
    fn without_a_deadline_nothing_ends_before_the_pipe() {
        let mut watch = Watch::default();
        assert!(watch
            .apply(Line::RunStarted(listed("a", 10, None)), u64::MAX)
            .is_empty());
        assert!(watch.expire(u64::MAX).is_empty());
        assert_eq!(watch.timeout(0), None);
        assert_eq!(
            watch.take_all(),
            Ending {
                runs: vec![listed("a", 10, None)],
                sweep: true
            }
        );
    }

    #[test]
    fn the_deadline_ends_the_listed_runs_and_later_ones_at_once() {
        let mut watch = Watch::default();
        assert!(watch.apply(Line::Deadline(1000), 0).is_empty());
        watch.apply(Line::RunStarted(listed("a", 10, Some(1))), 0);
        watch.apply(Line::RunStarted(listed("b", 11, None)), 0);
        watch.apply(Line::RunStarted(listed("c", 12, None)), 0);
        watch.apply(Line::RunEnded("c".to_string()), 0);
        assert_eq!(watch.timeout(400), Some(600));
        assert!(watch.expire(999).is_empty());
        assert_eq!(
            watch.expire(1000),
            Ending {
                runs: vec![listed("a", 10, Some(1)), listed("b", 11, None)],
                sweep: true
            }
        );
        // Forgotten once ended; the passed deadline waits for a line, not the clock.
        assert!(watch.expire(2000).is_empty());
        assert_eq!(watch.timeout(2000), None);
        // Started while the lease is gone: ended at once, never listed.
        assert_eq!(
            watch.apply(Line::RunStarted(listed("d", 13, None)), 2000),
            Ending::runs(vec![listed("d", 13, None)])
        );
        assert!(watch.take_all().runs.is_empty());
        // A new lease lets a new run live.
        assert!(watch.apply(Line::Deadline(5000), 2000).is_empty());
        assert!(watch
            .apply(Line::RunStarted(listed("e", 14, None)), 2000)
            .is_empty());
        assert_eq!(watch.take_all().runs, vec![listed("e", 14, None)]);
    }

    #[test]
    fn a_deadline_already_past_ends_the_runs_when_it_comes() {
        let mut watch = Watch::default();
        watch.apply(Line::Deadline(1000), 0);
        watch.apply(Line::RunStarted(listed("a", 10, None)), 0);
        assert_eq!(
            watch.apply(Line::Deadline(500), 700),
            Ending {
                runs: vec![listed("a", 10, None)],
                sweep: true
            }
        );
    }

    #[test]
    fn a_renewed_deadline_keeps_the_runs_and_clear_forgets_them() {
        let mut watch = Watch::default();
        watch.apply(Line::Deadline(300), 0);
        watch.apply(Line::RunStarted(listed("a", 10, None)), 0);
        for now in (100..1000).step_by(100) {
            assert!(watch.apply(Line::Deadline(now + 300), now).is_empty());
            assert!(watch.expire(now + 299).is_empty());
        }
        watch.apply(Line::RunsClear, 1000);
        assert!(watch.expire(5000).is_empty());
        assert!(watch.take_all().is_empty());
    }

    // The marked processes go with the runs: once for each deadline that passes, and when
    // the daemon is gone, unless a clean shutdown cleared the list.
    #[test]
    fn the_mark_is_swept_once_a_deadline_and_not_after_a_clear() {
        let mut watch = Watch::default();
        // Nothing listed, nothing past: no sweep until the deadline passes.
        watch.apply(Line::Deadline(1000), 0);
        assert!(watch.expire(999).is_empty());
        assert_eq!(
            watch.expire(1000),
            Ending {
                runs: Vec::new(),
                sweep: true
            }
        );
        assert!(watch.expire(1500).is_empty(), "swept once");
        // A new deadline, passed again: swept again.
        watch.apply(Line::Deadline(2000), 1500);
        assert!(watch.expire(2000).sweep);
        // A clean shutdown's clear: what is left is meant to stay.
        watch.apply(Line::Deadline(9000), 2000);
        watch.apply(Line::RunsClear, 2500);
        assert!(watch.take_all().is_empty());
        assert!(watch.apply(Line::Deadline(2600), 2700).is_empty());
        // A run listed after it: the daemon goes on, and so do the sweeps.
        watch.apply(Line::Deadline(9000), 2700);
        watch.apply(Line::RunStarted(listed("f", 15, None)), 2800);
        assert!(watch.take_all().sweep);
    }

    #[test]
    fn an_instant_maps_onto_the_monotonic_clock() {
        let now = Instant::now();
        let clock = monotonic_ms();
        let later = monotonic_ms_at(now + Duration::from_secs(3));
        assert!(
            (clock + 2990..=clock + 3010).contains(&later),
            "{clock} {later}"
        );
        let earlier = monotonic_ms_at(now - Duration::from_millis(500));
        assert!(
            (clock.saturating_sub(510)..=clock.saturating_sub(490)).contains(&earlier),
            "{clock} {earlier}"
        );
    }
}
