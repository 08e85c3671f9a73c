//! The shim: the small process every engine child runs under (the `corral-shim` binary:
//! `corral-shim PROGRAM ARGS…`), the leader of the child's process group and its parent.
//!
//! It is the *child subreaper* (`PR_SET_CHILD_SUBREAPER`) of everything its engine starts. A
//! process that double-forks or calls `setsid` to leave its run, and drops `CORRAL_RUN_ID`
//! with `env -i`, is reparented to the shim rather than to init, so:
//! - it stays a descendant of the process the daemon recorded for the run, and the origin
//!   rules (`daemon/origin.rs`) find its run by ancestry: an agent cannot shed its run to
//!   act as a person;
//! - it ends with the run: when the engine exits, or the shim is told to end (SIGTERM,
//!   SIGINT, SIGHUP: the daemon signals the whole group), the shim kills (SIGKILL) every
//!   process it adopted that left both the run's group and the run's mark in the
//!   environment. What stayed in either is the daemon's to end or keep, as before.
//!
//! The engine dies with its shim (`PR_SET_PDEATHSIG`), and the shim ends as its engine did
//! (the same exit code, or the same signal), so the daemon reads the engine's end from its own
//! child as it always has. The shim keeps none of the engine's pipes open: the engine's exit
//! closes them.
//!
//! Kept small and boring, because it runs once per run: no runtime, no store, no policy, no
//! allocation while it waits. A program embedding corral that ships no `corral-shim` beside
//! itself (and names none in `CORRAL_SHIM`) runs its engines without one, saying so once in
//! its log.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{self, WaitPidFlag, WaitStatus};
use nix::unistd::{self, Pid};

/// The shim's binary, installed beside `corral`.
pub const PROGRAM: &str = "corral-shim";

/// The variables whose value marks a run's processes (the shim's own value of each, as the
/// daemon gave it): a process carrying one is the daemon's to end, wherever it went.
const MARKS: [&str; 2] = [crate::env::RUN_ID, crate::env::SETUP_SESSION];

/// How many times the shim lists and kills what it adopted before it gives up (each round
/// kills one generation: a killed process's children are adopted in turn).
const MAX_ROUNDS: usize = 64;

/// Set by the signals that tell the shim to end.
static ENDING: AtomicBool = AtomicBool::new(false);

extern "C" fn note_ending(_: libc::c_int) {
    ENDING.store(true, Ordering::SeqCst);
}

/// How the engine ended.
enum End {
    Code(i32),
    Signal(Signal),
}

/// The shim's process: runs `args` (program first) and ends as it did. Returns the exit code
/// (a signal is re-raised instead).
pub fn main(args: Vec<OsString>) -> i32 {
    let Some((program, rest)) = args.split_first() else {
        say!("usage: {PROGRAM} PROGRAM [ARGS…]");
        return 2;
    };
    if let Err(error) = nix::sys::prctl::set_child_subreaper(true) {
        say!("{PROGRAM}: cannot adopt what the engine leaves: {error}");
        return 126;
    }
    // Not SA_RESTART: a signal interrupts the wait, and the shim ends what it adopted.
    let ending = SigAction::new(
        SigHandler::Handler(note_ending),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        if let Err(error) = unsafe { signal::sigaction(signal, &ending) } {
            say!("{PROGRAM}: cannot handle {signal}: {error}");
            return 126;
        }
    }
    let shim = unistd::getpid();
    let mut command = std::process::Command::new(program);
    command.args(rest);
    // SAFETY: `dies_with` is async-signal-safe, as the time between fork and exec needs.
    unsafe {
        command.pre_exec(move || super::dies_with(shim));
    }
    let engine = match command.spawn() {
        Ok(child) => Pid::from_raw(child.id() as i32),
        Err(error) => {
            say!(
                "{PROGRAM}: the engine could not start ({}): {error}",
                program.to_string_lossy()
            );
            return if error.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    release_pipes();
    let group = unistd::getpgrp();
    let marks: Vec<(&OsStr, OsString)> = MARKS
        .iter()
        .filter_map(|name| Some((OsStr::new(*name), std::env::var_os(name)?)))
        .collect();
    let end = loop {
        match wait::waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == engine => break End::Code(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == engine => break End::Signal(signal),
            // An adopted process, reaped.
            Ok(_) => {}
            Err(Errno::EINTR) => {
                if ENDING.load(Ordering::SeqCst) {
                    end_escaped(group, &marks, engine);
                }
            }
            // The engine is our child: nothing else can reap it.
            Err(_) => break End::Code(1),
        }
    };
    end_escaped(group, &marks, engine);
    match end {
        End::Code(code) => code,
        End::Signal(signal) => die_of(signal),
    }
}

/// Points the shim's own stdin, stdout and stderr at `/dev/null`: the pipes are the
/// engine's, and its exit must close them (a reader waits for that end of file).
fn release_pipes() {
    let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    else {
        return;
    };
    for fd in 0..=2 {
        // SAFETY: dup2 onto the standard descriptors, which nothing else in the shim holds.
        unsafe { libc::dup2(null.as_raw_fd(), fd) };
    }
}

/// Kills (SIGKILL) and reaps every child the shim adopted that is neither in the run's
/// `group` nor carries one of its `marks`, round after round, as the children of the killed
/// are adopted in turn. The engine is spared: it ends by the daemon's signals.
fn end_escaped(group: Pid, marks: &[(&OsStr, OsString)], engine: Pid) {
    for _ in 0..MAX_ROUNDS {
        let escaped: Vec<Pid> = children()
            .into_iter()
            .filter(|&pid| pid != engine && escaped(pid, group, marks))
            .collect();
        if escaped.is_empty() {
            break;
        }
        for &pid in &escaped {
            let _ = signal::kill(pid, Signal::SIGKILL);
        }
        for pid in escaped {
            let _ = wait::waitpid(pid, None);
        }
    }
    // Whatever else ended meanwhile.
    while let Ok(status) = wait::waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Whether child `pid` left both the run's `group` and its `marks`.
fn escaped(pid: Pid, group: Pid, marks: &[(&OsStr, OsString)]) -> bool {
    let Ok(process) = procfs::process::Process::new(pid.as_raw()) else {
        return false;
    };
    let Ok(stat) = process.stat() else {
        return false;
    };
    if stat.pgrp == group.as_raw() {
        return false;
    }
    // An environment we cannot read is not ours to judge.
    let Ok(environment) = process.environ() else {
        return false;
    };
    !marks
        .iter()
        .any(|(name, value)| environment.get(*name) == Some(value))
}

/// The shim's children now (its own and the adopted).
fn children() -> Vec<Pid> {
    let me = unistd::getpid();
    let listed = std::fs::read_to_string(format!("/proc/self/task/{me}/children"));
    if let Ok(listed) = listed {
        return listed
            .split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .map(Pid::from_raw)
            .collect();
    }
    // A kernel without the children list: every process's parent, read.
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.filter_map(Result::ok)
        .filter_map(|process| process.stat().ok())
        .filter(|stat| stat.ppid == me.as_raw())
        .map(|stat| Pid::from_raw(stat.pid))
        .collect()
}

/// Ends the shim by `signal`, as its engine ended (no core file of the shim's own).
fn die_of(signal: Signal) -> i32 {
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    // SAFETY: the default disposition.
    let _ = unsafe { signal::signal(signal, SigHandler::SigDfl) };
    let mut unblock = SigSet::empty();
    unblock.add(signal);
    let _ = unblock.thread_unblock();
    let _ = signal::raise(signal);
    // A signal whose default is not to end the process (never an engine's end).
    128 + signal as i32
}

/// Where the daemon finds the shim: `CORRAL_SHIM`, else `corral-shim` beside the running
/// binary; `None` (said once in the log) when there is none.
pub fn program() -> Option<&'static PathBuf> {
    static PROGRAM_PATH: OnceLock<Option<PathBuf>> = OnceLock::new();
    PROGRAM_PATH
        .get_or_init(|| {
            let found = std::env::var_os(crate::env::SHIM)
                .filter(|path| !path.is_empty())
                .map(PathBuf::from)
                .or_else(|| {
                    let beside = std::env::current_exe().ok()?.with_file_name(PROGRAM);
                    beside.is_file().then_some(beside)
                });
            if found.is_none() {
                tracing::warn!(
                    "no {PROGRAM} beside this program (set {}): engines run without a shim, and a process an agent detaches from its run is neither attributed to it nor ended with it",
                    crate::env::SHIM
                );
            }
            found
        })
        .as_ref()
}

/// A command that runs `program` under the shim (or alone, without one), in a process group
/// of its own led by the shim.
pub fn command(program: impl AsRef<OsStr>) -> tokio::process::Command {
    let mut command = match self::program() {
        Some(shim) => {
            let mut command = tokio::process::Command::new(shim);
            command.arg(program);
            command
        }
        None => tokio::process::Command::new(program),
    };
    command.process_group(0);
    command
}
