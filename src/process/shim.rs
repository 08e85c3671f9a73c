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
//! child as it always has. The shim keeps no write end of the engine's pipes open: the
//! engine's exit closes them.
//!
//! With `--spool DIR --pipes-of PID:OUT:ERR:LIFE` (live restore) a run can outlive its daemon.
//! The shim then opens, through `/proc/PID/fd`, its own read ends of the engine's stdout and
//! stderr pipes (which the daemon reads too) and of the daemon's *lifeline* (a pipe nobody
//! writes, whose end is the daemon's exit, or its hand-over of the run). While the daemon
//! lives the shim only waits on the lifeline: the daemon reads the pipes, and keeps every
//! byte it reads in `DIR/stdout` and `DIR/stderr` first. Once it is gone the shim appends
//! the rest there, so the spool holds the whole output, whatever way the daemon ended:
//!
//! ```text
//!  daemon lives ──lifeline ends──► orphaned: pipes → DIR/stdout, DIR/stderr (appended)
//!                                     │  SIGUSR2 (a daemon follows it): the timeout starts over
//!                                     │  no adoption within --orphan-timeout-ms: SIGTERM to
//!                                     │  the group, SIGKILL 5 s later
//!                                     ▼
//!                                  engine ends ─► pipes drained (2 s at most) ─► DIR/exit
//! ```
//!
//! An engine that ends while its daemon lives ends the shim at once (the daemon holds the
//! pipes and waits for the shim); nothing is spooled or recorded then. Signals are read from
//! a signalfd in the shim's one `poll` loop; the engine starts with none blocked.
//!
//! Kept small and boring, because it runs once per run: no runtime, no store, no policy, no
//! allocation while it waits. A program embedding corral that ships no `corral-shim` beside
//! itself (and names none in `CORRAL_SHIM`) runs its engines without one, saying so once in
//! its log.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{self, SigHandler, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
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

/// What the shim was told before the program (`corral-shim [--spool DIR --pipes-of
/// PID:OUT:ERR:LIFE] [--orphan-timeout-ms N] PROGRAM ARGS…`).
struct Options {
    /// Live restore: the run's spool directory, and where the shim opens its own read ends of
    /// the engine's stdout and stderr pipes (which the daemon reads) and of the daemon's
    /// lifeline (a pipe nobody writes: it ends when the daemon does).
    spool: Option<(PathBuf, Pipes)>,
    /// How long an orphaned engine runs on without a daemon adopting it ([`ADOPTED`]).
    orphan_timeout: Duration,
}

/// The daemon's descriptors of a run's pipes, which the shim opens again for reading through
/// `/proc/PID/fd` (a pipe opened there is the same pipe). So the daemon hands nothing over
/// at the spawn, which then needs no hook between fork and exec: the spawn stays a
/// `posix_spawn`, not a fork of the whole daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pipes {
    pub pid: u32,
    pub stdout: i32,
    pub stderr: i32,
    pub lifeline: i32,
}

impl Pipes {
    fn parse(text: &str) -> Option<Pipes> {
        let mut parts = text.split(':').map(str::parse::<i64>);
        let mut next = || parts.next()?.ok();
        let (pid, stdout, stderr, lifeline) = (next()?, next()?, next()?, next()?);
        Some(Pipes {
            pid: u32::try_from(pid).ok()?,
            stdout: i32::try_from(stdout).ok()?,
            stderr: i32::try_from(stderr).ok()?,
            lifeline: i32::try_from(lifeline).ok()?,
        })
    }

    fn arg(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.pid, self.stdout, self.stderr, self.lifeline
        )
    }

    /// Opens descriptor `fd` of the daemon for reading, without waiting.
    fn open(&self, fd: i32) -> std::io::Result<OwnedFd> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(format!("/proc/{}/fd/{fd}", self.pid))?;
        Ok(file.into())
    }
}

/// The signal a daemon sends a shim it adopted: someone follows its spool, so the orphan
/// timeout starts over. The daemon sends it again at least once per half timeout.
pub const ADOPTED: Signal = Signal::SIGUSR2;

/// Written into the run's directory by a daemon that handed the run over (`corral daemon
/// restart`) rather than died: the next daemon says which it was.
pub const HANDED_OVER: &str = "handed-over";

/// Written into the run's directory by a daemon that ends the run itself (a cancel, a
/// timeout, a stop that is not a hand-over), before it signals the run's processes: the run
/// is not to be taken over, whatever its shim records of the engine's end.
pub const STOPPED: &str = "stopped";

/// Written into the run's directory by a daemon that could not keep what it read in the
/// spool (a full disk): the spool misses a part of the output, and the run cannot be taken
/// over; a daemon that finds it ends the run and runs its prompt again.
pub const INCOMPLETE: &str = "incomplete";

/// The spool's files in the run's directory.
pub const SPOOLED_STDOUT: &str = "stdout";
pub const SPOOLED_STDERR: &str = "stderr";
/// The engine's end, once spooled: `code N` or `signal NAME`, then `at MS` (ms since the
/// epoch), a line each; written whole (renamed into place).
pub const EXIT_FILE: &str = "exit";

/// The spool's files are the home's: its owner's alone (the daemon made their directory 0700).
const SPOOL_FILE_MODE: u32 = 0o600;

/// The most the shim spools while no daemon follows: past it the shim stops reading, and the
/// engine blocks on its full pipe until a daemon takes the run over (or the orphan timeout
/// ends it). A daemon that follows reads the spool as it grows: the limit is then the disk's.
const SPOOL_LIMIT: u64 = 256 << 20;

/// How long an orphaned shim reads what its engine left in the pipes once it exited (a
/// process that escaped with them open must not hold the run's end).
const DRAIN: Duration = Duration::from_secs(2);

/// How soon bytes that could not be written to the spool (a full disk) are tried again.
const SPOOL_RETRY: Duration = Duration::from_millis(500);

/// How long an engine ended for its orphan timeout has after SIGTERM before SIGKILL.
const ORPHAN_GRACE: Duration = Duration::from_secs(5);

/// The spool's format this corral writes and reads, given to the shim (`--spool-format N`)
/// and kept in the engine's recorded end: 1, the daemon keeps every byte it reads of the run
/// in the spool and the store says how far its events cover it. Format 0 (corral before it,
/// a shim without the option) spooled only what its daemon had not stored, and only at a
/// hand-over. A daemon reads the format of a run it may take over from the shim's command
/// line, or from the recorded end once the shim is gone.
pub const SPOOL_FORMAT: u32 = 1;

/// How the engine ended.
#[derive(Clone, Copy)]
enum End {
    Code(i32),
    Signal(Signal),
}

impl End {
    fn record(self) -> String {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis());
        let format = SPOOL_FORMAT;
        match self {
            End::Code(code) => format!("code {code}\nat {at}\nformat {format}\n"),
            End::Signal(signal) => {
                format!("signal {}\nat {at}\nformat {format}\n", signal.as_str())
            }
        }
    }
}

fn parse(args: &[OsString]) -> Result<(Options, &[OsString]), String> {
    let mut options = Options {
        spool: None,
        orphan_timeout: Duration::from_secs(600),
    };
    let mut dir = None;
    let mut pipes = None;
    let mut rest = args;
    loop {
        match rest.first().and_then(|word| word.to_str()) {
            Some("--spool") => {
                dir = Some(PathBuf::from(
                    rest.get(1).ok_or("--spool needs a directory")?,
                ));
                rest = &rest[2..];
            }
            Some("--pipes-of") => {
                let given = rest.get(1).and_then(|given| given.to_str());
                pipes = Some(
                    given
                        .and_then(Pipes::parse)
                        .ok_or("--pipes-of needs PID:OUT:ERR:LIFE")?,
                );
                rest = &rest[2..];
            }
            Some("--spool-format") => {
                let format: u32 = rest
                    .get(1)
                    .and_then(|format| format.to_str())
                    .and_then(|format| format.parse().ok())
                    .ok_or("--spool-format needs a number")?;
                if format != SPOOL_FORMAT {
                    return Err(format!(
                        "--spool-format {format}: this shim writes format {SPOOL_FORMAT}"
                    ));
                }
                rest = &rest[2..];
            }
            Some("--orphan-timeout-ms") => {
                let ms = rest
                    .get(1)
                    .and_then(|ms| ms.to_str())
                    .and_then(|ms| ms.parse().ok())
                    .ok_or("--orphan-timeout-ms needs a number of milliseconds")?;
                options.orphan_timeout = Duration::from_millis(ms);
                rest = &rest[2..];
            }
            Some(word) => {
                options.spool = match (dir, pipes) {
                    (Some(dir), Some(pipes)) => Some((dir, pipes)),
                    (None, None) => None,
                    _ => return Err("--spool and --pipes-of go together".into()),
                };
                return Ok((options, if word == "--" { &rest[1..] } else { rest }));
            }
            None => return Ok((options, rest)),
        }
    }
}

/// The shim's process: runs `args` (program first) and ends as it did. Returns the exit code
/// (a signal is re-raised instead).
pub fn main(args: Vec<OsString>) -> i32 {
    let usage = || {
        say!("usage: {PROGRAM} [--spool DIR] [--orphan-timeout-ms N] PROGRAM [ARGS…]");
        2
    };
    let Ok((options, words)) = parse(&args) else {
        return usage();
    };
    let Some((program, rest)) = words.split_first() else {
        return usage();
    };
    if let Err(error) = nix::sys::prctl::set_child_subreaper(true) {
        say!("{PROGRAM}: cannot adopt what the engine leaves: {error}");
        return 126;
    }
    // Every signal the shim acts on is read from a descriptor, in its one loop: a child's end,
    // the asks to end (SIGTERM, SIGINT, SIGHUP: the daemon signals the whole group), and a
    // daemon's adoption.
    let mut watched = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        ADOPTED,
    ] {
        watched.add(signal);
    }
    let signals = match watched.thread_block().and_then(|()| {
        SignalFd::with_flags(&watched, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
    }) {
        Ok(signals) => signals,
        Err(error) => {
            say!("{PROGRAM}: cannot watch signals: {error}");
            return 126;
        }
    };
    let mut spool = match &options.spool {
        Some((dir, pipes)) => match Spool::open(dir, *pipes, options.orphan_timeout) {
            Ok(spool) => Some(spool),
            Err(error) => {
                say!("{PROGRAM}: cannot spool into {}: {error}", dir.display());
                return 126;
            }
        },
        None => None,
    };
    let shim = unistd::getpid();
    let mut command = std::process::Command::new(program);
    command.args(rest);
    // SAFETY: `dies_with` and the mask's reset are async-signal-safe, as the time between fork
    // and exec needs: the engine starts with no signal blocked, whatever the shim blocks.
    unsafe {
        command.pre_exec(move || {
            super::dies_with(shim)?;
            SigSet::empty()
                .thread_set_mask()
                .map_err(std::io::Error::from)
        });
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
    let mut end: Option<End> = None;
    loop {
        if let Some(ended) = end {
            match spool.as_mut() {
                // Its daemon reads the pipes, and waits for the shim: ending as the engine
                // did tells it how.
                None => break,
                Some(spool) if !spool.orphaned() => break,
                Some(spool) => {
                    if spool.drained() {
                        spool.record(ended);
                        break;
                    }
                }
            }
        }
        let deadline = spool
            .as_ref()
            .and_then(|spool| spool.deadline(end.is_some()));
        let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        if let Some(spool) = &spool {
            spool.watch(&mut fds);
        }
        let timeout = match deadline {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now()).as_millis();
                PollTimeout::try_from(left.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(error) => {
                say!("{PROGRAM}: {error}");
                break;
            }
        }
        let ready: Vec<bool> = fds.iter().map(|fd| fd.any().unwrap_or(false)).collect();
        drop(fds);
        while let Ok(Some(info)) = signals.read_signal() {
            match Signal::try_from(info.ssi_signo as i32) {
                Ok(Signal::SIGCHLD) => {
                    if let Some(ended) = reap(engine) {
                        end = Some(ended);
                    }
                }
                Ok(signal) if signal == ADOPTED => {
                    if let Some(spool) = spool.as_mut() {
                        spool.adopted();
                    }
                }
                // Told to end: what escaped the group goes now; the engine ends by the
                // daemon's signal, sent to the whole group.
                Ok(_) => {
                    if let Some(ended) = end_escaped(group, &marks, engine) {
                        end = Some(ended);
                    }
                }
                Err(_) => {}
            }
        }
        if let Some(spool) = spool.as_mut() {
            spool.serve(&ready[1..], end.is_some(), group);
        }
    }
    // The engine's end is known: what is reaped now is what it left.
    let _ = end_escaped(group, &marks, engine);
    match end {
        Some(End::Code(code)) => code,
        Some(End::Signal(signal)) => die_of(signal),
        None => 1,
    }
}

/// Reaps every child that ended; the engine's end, if it is among them.
fn reap(engine: Pid) -> Option<End> {
    let mut ended = None;
    loop {
        match wait::waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == engine => ended = Some(End::Code(code)),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == engine => {
                ended = Some(End::Signal(signal))
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return ended,
            // An adopted process, reaped.
            Ok(_) => {}
        }
    }
}

/// A spooling shim's state (see [`Options::spool`]): while its daemon lives it only waits on
/// the lifeline; once the daemon is gone it reads the engine's pipes into the spool files,
/// records the engine's end there, and ends the engine when no daemon adopts it in time.
struct Spool {
    dir: PathBuf,
    streams: [Stream; 2],
    lifeline: Option<OwnedFd>,
    orphan_timeout: Duration,
    /// When the daemon went away, or when a daemon that follows the spool last said so: the
    /// orphan timeout runs from then.
    orphaned_at: Option<Instant>,
    /// When the orphan timeout sent SIGTERM to the group; SIGKILL follows its grace.
    ending_since: Option<Instant>,
    /// When the engine's end was first seen, while orphaned: the drain runs from then.
    ended_at: Option<Instant>,
    /// A daemon took the run over ([`ADOPTED`]): it reads the spool as it grows.
    followed: bool,
}

/// One of the engine's output pipes and its spool file.
struct Stream {
    pipe: Option<OwnedFd>,
    /// Its spool file, opened when there is something to keep (a run its daemon follows to
    /// the end costs no file).
    path: PathBuf,
    file: Option<std::fs::File>,
    written: u64,
    /// Read from the pipe and not yet in the file (a full disk): the pipe is not read again
    /// until they are, so the engine blocks on its full pipe rather than lose output.
    pending: Vec<u8>,
    /// The file could not be written the last time (said once, until it can again).
    stalled: bool,
}

impl Spool {
    fn open(
        dir: &std::path::Path,
        pipes: Pipes,
        orphan_timeout: Duration,
    ) -> std::io::Result<Spool> {
        let stream = |fd: i32, name: &str| -> std::io::Result<Stream> {
            Ok(Stream {
                pipe: Some(pipes.open(fd)?),
                path: dir.join(name),
                file: None,
                written: 0,
                pending: Vec::new(),
                stalled: false,
            })
        };
        let streams = [
            stream(pipes.stdout, SPOOLED_STDOUT)?,
            stream(pipes.stderr, SPOOLED_STDERR)?,
        ];
        // The lifeline's write end, opened for reading: the same pipe, read here.
        let lifeline = pipes.open(pipes.lifeline)?;
        Ok(Spool {
            dir: dir.to_path_buf(),
            streams,
            lifeline: Some(lifeline),
            orphan_timeout,
            orphaned_at: None,
            ending_since: None,
            ended_at: None,
            followed: false,
        })
    }

    fn orphaned(&self) -> bool {
        self.lifeline.is_none()
    }

    /// A daemon follows the spool: the orphan timeout starts over (the daemon says so again
    /// before it runs out, for as long as it follows).
    fn adopted(&mut self) {
        if self.lifeline.is_none() && self.ending_since.is_none() {
            self.orphaned_at = Some(Instant::now());
            self.followed = true;
        }
    }

    /// The descriptors to wait on, after the signals': the lifeline while the daemon lives,
    /// else the pipes not at their end (nor past the spool's limit).
    fn watch<'a>(&'a self, fds: &mut Vec<PollFd<'a>>) {
        if let Some(lifeline) = &self.lifeline {
            fds.push(PollFd::new(lifeline.as_fd(), PollFlags::POLLIN));
            return;
        }
        for stream in &self.streams {
            if let Some(pipe) = stream
                .pipe
                .as_ref()
                .filter(|_| stream.watched(self.followed))
            {
                fds.push(PollFd::new(pipe.as_fd(), PollFlags::POLLIN));
            }
        }
    }

    /// When the loop must wake without a descriptor: the end of the drain, of the orphan
    /// timeout, or of the grace it gave.
    fn deadline(&self, engine_ended: bool) -> Option<Instant> {
        let due = if engine_ended {
            self.ended_at.map(|at| at + DRAIN).or(Some(Instant::now()))
        } else if let Some(since) = self.ending_since {
            Some(since + ORPHAN_GRACE)
        } else {
            self.orphaned_at.map(|at| at + self.orphan_timeout)
        };
        // Bytes that could not be kept yet (a full disk) are tried again a while later.
        if self.streams.iter().any(|stream| !stream.pending.is_empty()) {
            let retry = Instant::now() + SPOOL_RETRY;
            return Some(due.map_or(retry, |due| due.min(retry)));
        }
        due
    }

    /// Acts on what the poll found (`ready`: the descriptors [`Spool::watch`] gave, in order).
    fn serve(&mut self, ready: &[bool], engine_ended: bool, group: Pid) {
        if let Some(lifeline) = &self.lifeline {
            // The daemon's end of it closed (it exited, or handed the run over): nothing is
            // ever written to it, so readable means its end.
            if ready.first() == Some(&true) || engine_ended && lifeline_ended(lifeline) {
                self.lifeline = None;
                self.orphaned_at = Some(Instant::now());
            }
            return;
        }
        if engine_ended && self.ended_at.is_none() {
            self.ended_at = Some(Instant::now());
        }
        let mut polled = ready.iter();
        let followed = self.followed;
        for stream in &mut self.streams {
            let watched = stream.pipe.is_some() && stream.watched(followed);
            if !stream.pending.is_empty() {
                stream.keep();
            } else if watched && polled.next() == Some(&true) {
                stream.take();
            }
        }
        if engine_ended {
            return;
        }
        let now = Instant::now();
        match (self.orphaned_at, self.ending_since) {
            (Some(orphaned), None) if now >= orphaned + self.orphan_timeout => {
                let _ = signal::killpg(group, Signal::SIGTERM);
                self.ending_since = Some(now);
            }
            (_, Some(since)) if now >= since + ORPHAN_GRACE => {
                let _ = signal::killpg(group, Signal::SIGKILL);
            }
            _ => {}
        }
    }

    /// Whether what the engine left in its pipes is spooled: both at their end, or the drain
    /// is over.
    fn drained(&mut self) -> bool {
        let ended_at = *self.ended_at.get_or_insert_with(Instant::now);
        let read = self.streams.iter().all(|stream| stream.pipe.is_none());
        let kept = self.streams.iter().all(|stream| stream.pending.is_empty());
        (read && kept) || ended_at.elapsed() >= DRAIN
    }

    /// Records the engine's end in the spool, whole: written beside, then renamed into place.
    fn record(&self, end: End) {
        let written = (|| {
            use std::io::Write;
            let beside = self.dir.join(format!("{EXIT_FILE}.new"));
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(SPOOL_FILE_MODE)
                .open(&beside)?;
            file.write_all(end.record().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&beside, self.dir.join(EXIT_FILE))
        })();
        if let Err(error) = written {
            say!("{PROGRAM}: the engine's end was not recorded: {error}");
        }
    }
}

impl Stream {
    /// The spool file, opened on first use and appended to: the daemon kept there every byte
    /// it read of the pipe, and the shim goes on after it.
    fn file(&mut self) -> std::io::Result<&mut std::fs::File> {
        if self.file.is_none() {
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(SPOOL_FILE_MODE)
                .open(&self.path)?;
            self.file = Some(file);
        }
        Ok(self.file.as_mut().expect("just opened"))
    }

    /// Whether its pipe is read now: nothing waiting for room, and not past the spool's limit
    /// unless a daemon follows the spool.
    fn watched(&self, followed: bool) -> bool {
        self.pending.is_empty() && (followed || self.written < SPOOL_LIMIT)
    }

    /// Reads what the pipe holds now into the spool file; the pipe's end closes it.
    fn take(&mut self) {
        let Some(pipe) = &self.pipe else {
            return;
        };
        let mut buffer = [0u8; 64 * 1024];
        match unistd::read(pipe, &mut buffer) {
            Ok(0) => self.pipe = None,
            Ok(read) => {
                self.pending.extend_from_slice(&buffer[..read]);
                self.keep();
            }
            Err(Errno::EINTR | Errno::EAGAIN) => {}
            Err(_) => self.pipe = None,
        }
    }

    /// Writes the bytes read and not yet kept into the file, as far as it can. A full disk
    /// keeps the rest for the next try (said once); nothing is dropped.
    fn keep(&mut self) {
        use std::io::Write;
        let mut pending = std::mem::take(&mut self.pending);
        let mut done = 0;
        let mut failed = None;
        while done < pending.len() {
            match self.file().and_then(|file| file.write(&pending[done..])) {
                Ok(0) => break,
                Ok(wrote) => done += wrote,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => {
                    failed = Some(error);
                    break;
                }
            }
        }
        self.written += done as u64;
        pending.drain(..done);
        self.pending = pending;
        match failed {
            Some(error) if !self.stalled => {
                say!("{PROGRAM}: the spool waits for room ({error}): the engine's output is held");
                self.stalled = true;
            }
            None if self.pending.is_empty() => self.stalled = false,
            _ => {}
        }
    }
}

/// Whether the lifeline's other end is closed now (looked at without waiting).
fn lifeline_ended(lifeline: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(lifeline.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
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
/// are adopted in turn. The engine is spared: it ends by the daemon's signals. Returns the
/// engine's end if it was among the children reaped.
fn end_escaped(group: Pid, marks: &[(&OsStr, OsString)], engine: Pid) -> Option<End> {
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
    // Whatever else ended meanwhile: the engine among them, whose end is the shim's to tell
    // (reaped here, it would be waited for in vain).
    reap(engine)
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

/// The spool format of the run whose spool is `dir` and whose shim is `pid` (alive: checked
/// by the caller): its shim's `--spool-format` (0 without one), or once the shim is gone, the
/// one its recorded end names (0 without one); `None` when neither can be read.
pub fn spool_format(dir: &std::path::Path, pid: Option<u32>) -> Option<u32> {
    if let Some(pid) = pid {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        return Some(format_in_cmdline(&cmdline));
    }
    let record = std::fs::read_to_string(dir.join(EXIT_FILE)).ok()?;
    Some(
        record
            .lines()
            .find_map(|line| line.strip_prefix("format ")?.trim().parse().ok())
            .unwrap_or(0),
    )
}

/// The `--spool-format` of a shim's command line (NUL-separated words), 0 without one.
fn format_in_cmdline(cmdline: &[u8]) -> u32 {
    let mut words = cmdline.split(|byte| *byte == 0);
    while let Some(word) = words.next() {
        if word == b"--" {
            break;
        }
        if word == b"--spool-format" {
            return words
                .next()
                .and_then(|format| std::str::from_utf8(format).ok()?.parse().ok())
                .unwrap_or(0);
        }
    }
    0
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

/// The spool directory of run `run_id` in `home` (`HOME/runs/<run id>`).
pub fn spool_dir(home: &std::path::Path, run_id: &str) -> PathBuf {
    home.join("runs").join(run_id)
}

/// A run's side of a spooling shim (see [`Options::spool`]): the read ends of its engine's
/// stdout and stderr pipes, and the lifeline's write end, which the daemon holds for as long
/// as it follows the run (dropping it hands the run to the shim).
pub struct SpooledPipes {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub lifeline: OwnedFd,
}

/// `program` under a spooling shim in a process group of its own: the shim spools into `dir`
/// once the daemon is gone, and ends an engine no daemon adopts within `orphan_timeout`. Its
/// stdout and stderr are pipes whose read ends are returned (the shim opens its own); `None`
/// when there is no shim to run under.
pub fn spooling_command(
    program: impl AsRef<OsStr>,
    dir: &std::path::Path,
    orphan_timeout: Duration,
) -> std::io::Result<Option<(tokio::process::Command, SpooledPipes)>> {
    let Some(shim) = self::program() else {
        return Ok(None);
    };
    let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
    let (stdout, stdout_write) = unistd::pipe2(cloexec)?;
    let (stderr, stderr_write) = unistd::pipe2(cloexec)?;
    // Only the write end is kept: the shim opens its read end through /proc.
    let (_, lifeline) = unistd::pipe2(cloexec)?;
    let pipes = Pipes {
        pid: std::process::id(),
        stdout: stdout.as_raw_fd(),
        stderr: stderr.as_raw_fd(),
        lifeline: lifeline.as_raw_fd(),
    };
    let mut command = tokio::process::Command::new(shim);
    command
        .arg("--spool")
        .arg(dir)
        .arg("--pipes-of")
        .arg(pipes.arg())
        .arg("--spool-format")
        .arg(SPOOL_FORMAT.to_string())
        .arg("--orphan-timeout-ms")
        .arg(orphan_timeout.as_millis().to_string())
        .arg("--")
        .arg(program)
        .stdout(std::process::Stdio::from(stdout_write))
        .stderr(std::process::Stdio::from(stderr_write))
        .process_group(0);
    Ok(Some((
        command,
        SpooledPipes {
            stdout,
            stderr,
            lifeline,
        },
    )))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shims_spool_format_is_read_from_its_command_line_up_to_its_program() {
        let words = |words: &[&str]| words.join("\0").into_bytes();
        let now = words(&[
            "corral-shim",
            "--spool",
            "d",
            "--spool-format",
            "1",
            "--",
            "x",
        ]);
        assert_eq!(format_in_cmdline(&now), 1);
        let before = words(&[
            "corral-shim",
            "--spool",
            "d",
            "--",
            "x",
            "--spool-format",
            "7",
        ]);
        assert_eq!(format_in_cmdline(&before), 0, "the program's own words");
        assert_eq!(
            format_in_cmdline(&words(&["corral-shim", "--spool-format"])),
            0
        );
        assert_eq!(format_in_cmdline(&words(&["x", "--spool-format", "2"])), 2);
    }

    #[test]
    fn a_recorded_end_names_its_spool_format_and_an_older_one_reads_as_0() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(spool_format(dir.path(), None), None, "nothing recorded");
        std::fs::write(dir.path().join(EXIT_FILE), End::Code(3).record()).unwrap();
        assert_eq!(spool_format(dir.path(), None), Some(SPOOL_FORMAT));
        std::fs::write(dir.path().join(EXIT_FILE), "code 0\nat 1\n").unwrap();
        assert_eq!(spool_format(dir.path(), None), Some(0));
        let this = std::process::id();
        assert_eq!(spool_format(dir.path(), Some(this)), Some(0), "no option");
    }

    #[test]
    fn past_the_spool_limit_a_pipe_is_read_only_while_a_daemon_follows_and_never_while_output_waits(
    ) {
        let (read, _write) = unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut stream = Stream {
            pipe: Some(read),
            path: PathBuf::from("unused"),
            file: None,
            written: SPOOL_LIMIT - 1,
            pending: Vec::new(),
            stalled: false,
        };
        assert!(stream.watched(false));
        stream.written = SPOOL_LIMIT;
        assert!(
            !stream.watched(false),
            "no daemon follows: the engine blocks"
        );
        assert!(stream.watched(true), "a daemon reads the spool as it grows");
        stream.pending = vec![b'x'];
        assert!(
            !stream.watched(true),
            "bytes wait for room: nothing more is read"
        );
    }

    #[test]
    fn a_shim_refuses_a_spool_format_it_does_not_write() {
        let args: Vec<OsString> = ["--spool-format", "9", "true"]
            .into_iter()
            .map(OsString::from)
            .collect();
        assert!(parse(&args).is_err());
        let args: Vec<OsString> = ["--spool-format", "1", "true"]
            .into_iter()
            .map(OsString::from)
            .collect();
        assert!(parse(&args).is_ok());
    }
}
