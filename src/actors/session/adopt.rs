//! A run taken over from the daemon before (live restore): its engine went on under its shim
//! while no daemon followed it (`process::shim`, `--spool`), and this daemon follows it from
//! its spool to its end, then judges it as if nothing had happened.
//!
//! ```text
//!  boot: run left running, its shim alive, its spool whole ─► the prompt's worker adopts it
//!  SIGUSR2 to the shim (again every half orphan timeout: the shim's timeout starts over)
//!  HOME/runs/<run>/stdout, stderr from the stored mark ─(inotify: appended)─► lines ─► events
//!  the shim's end (pidfd) ─► the files read to their end ─► HOME/runs/<run>/exit ─► judged
//! ```
//!
//! The spool holds the run's output from its first byte (the daemon before kept every byte it
//! read there, `spool.rs`, and the shim appended the rest), and the store says how far the
//! stored events cover it (`runs.stdout_stored`, written with them). The lines up to there
//! are read again only to know what the engine said (its final line, its answer may be among
//! them), storing nothing; the lines past it are stored. So no line is stored twice or lost,
//! whether that daemon handed the run over or was killed.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch};

use super::child::{read_lines, Line, Stream, Transcript};
use super::{Exit, RunOutcome, Stop, While, Worker};
use crate::events::{Payload, RunReadopted};
use crate::process::shim;
use crate::store::prompts::Prompt;
use crate::store::runs::Run;
use crate::store::settings::Settings;

impl Worker {
    /// Follows `run` (left running by the daemon before, its shim alive) to its end from its
    /// spool. Returns its outcome and the thread the engine reported.
    pub(super) async fn adopt_run(
        &mut self,
        prompt: &Prompt,
        run: &Run,
        known_thread: Option<&str>,
        keep_background: bool,
        settings: &Settings,
    ) -> (RunOutcome, Option<String>) {
        let dir = shim::spool_dir(&self.shared.home, &run.id);
        let shim_pid = run.pid.unwrap_or(0) as i32;
        let _ = adopt(shim_pid);
        let stored = match self
            .shared
            .readers
            .read(|connection| crate::store::runs::stored_through(connection, &run.id))
        {
            Ok(stored) => stored,
            Err(error) => {
                return (
                    RunOutcome::failed(format!("the run's stored mark cannot be read: {error}")),
                    None,
                )
            }
        };
        let (mut lines, ended) = match follow(&dir, shim_pid) {
            Ok(followed) => followed,
            Err(error) => {
                return (
                    RunOutcome::failed(format!("the run's spool cannot be followed: {error}")),
                    None,
                )
            }
        };
        let unattended_ms = crate::store::now_ms() - run.started_at;
        let told = RunReadopted {
            shim_pid: shim_pid as u32,
            since_start_ms: unattended_ms.max(0),
        };
        let mut batch = vec![self.new_event(prompt, &run.id, Payload::RunReadopted(told))];
        let mut transcript = Transcript::new(run.engine, known_thread);
        // The shim's orphan timeout starts over at each adoption: told again while followed.
        let mut heartbeat =
            tokio::time::interval((settings.orphan_timeout / 2).max(Duration::from_millis(100)));
        heartbeat.tick().await;
        let mut stop: Option<Stop> = None;
        loop {
            tokio::select! {
                line = lines.recv() => {
                    let Some(line) = line else { break };
                    let covered = match line.stream {
                        Stream::Stdout => stored.stdout,
                        Stream::Stderr => stored.stderr,
                    };
                    if line.end <= covered {
                        // Stored already: read again for what it says, not stored again (nor
                        // asked again: a request it made was answered or denied then).
                        let mut stored_already = Vec::new();
                        self.take_line(prompt, &run.id, line, &mut transcript, &mut stored_already).await;
                        transcript.asks.clear();
                        continue;
                    }
                    let new_thread = self.take_line(prompt, &run.id, line, &mut transcript, &mut batch).await;
                    if let Some(error) = self.store_lines(&run.id, new_thread, &mut batch, lines.is_empty(), &transcript).await {
                        tracing::warn!(%error, "the adopted run's events are kept to be stored later");
                    }
                }
                _ = heartbeat.tick() => {
                    let _ = adopt(shim_pid);
                }
                asked = self.stops.stopped(&self.session_id, &prompt.id, While::Running), if stop.is_none() => {
                    if asked == Stop::Shutdown && self.shared.life.is_handing_over() {
                        // Left to its shim again, for the next daemon: what was read of the
                        // spool is stored, with how far; the rest is read again from there.
                        let _ = self.store_lines(&run.id, None, &mut batch, true, &transcript).await;
                        super::spool::mark(&dir, shim::HANDED_OVER);
                        return (RunOutcome::HandedOver, transcript.new_thread());
                    }
                    // Ended as a live run is, its whole group; its end still comes through the
                    // spool.
                    super::spool::mark(&dir, shim::STOPPED);
                    crate::process::end_marked(&[run_mark(run)], settings.cancel_grace, None).await;
                    stop = Some(asked);
                }
            }
        }
        let status = ended.await.ok().flatten();
        // What the engine left is ended with the run, as a live run's is (or kept, where its
        // project keeps background processes: they outlive the run on purpose).
        if !keep_background {
            crate::process::end_marked(&[run_mark(run)], settings.cancel_grace, None).await;
        }
        let reported = transcript.new_thread();
        self.denied += std::mem::take(&mut transcript.denied);
        if let Some(stop) = stop {
            let _ = self.try_store_events(std::mem::take(&mut batch)).await;
            super::spool::remove(&dir);
            return (RunOutcome::Stopped(stop, Exit::of(status)), reported);
        }
        let outcome = self.end_exited(prompt, &run.id, transcript, status, batch);
        super::spool::remove(&dir);
        (outcome, reported)
    }
}

/// An adopted run's processes: its shim's group, and whatever carries its run id.
fn run_mark(run: &Run) -> crate::process::Mark {
    crate::process::Mark::of_leader(
        run.pid.map(|pid| pid as i32),
        run.pid_start.map(|start| start as u64),
        crate::env::RUN_ID,
        &run.id,
    )
}

/// Tells the shim a daemon follows it: its orphan timeout starts over.
fn adopt(shim_pid: i32) -> nix::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(shim_pid), shim::ADOPTED)
}

/// Follows a run's spool: its lines from the start of `DIR/stdout` and `DIR/stderr` and as they
/// are appended, until the shim (`shim_pid`) is gone and both are read to their end; then the
/// engine's end as `DIR/exit` records it (`None`: not recorded, the shim died first).
fn follow(
    dir: &Path,
    shim_pid: i32,
) -> std::io::Result<(
    mpsc::Receiver<Line>,
    oneshot::Receiver<Option<std::process::ExitStatus>>,
)> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    inotify.add_watch(
        dir,
        AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
    )?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, shim_pid, 0) };
    // A shim gone already (no descriptor) is seen gone at the first look.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd as i32) });
    let (changed, _) = watch::channel(0u64);
    let (gone_tx, gone) = watch::channel(false);
    let (ended, status) = oneshot::channel();
    let (lines_tx, lines) = mpsc::channel::<Line>(super::child::LINE_BUFFER);
    let mut copies = Vec::new();
    for (name, stream) in [
        (shim::SPOOLED_STDOUT, Stream::Stdout),
        (shim::SPOOLED_STDERR, Stream::Stderr),
    ] {
        let (writer, reader) = tokio::io::duplex(64 * 1024);
        tokio::spawn(read_lines(reader, stream, 0, lines_tx.clone(), None));
        copies.push(tokio::spawn(copy(
            dir.join(name),
            writer,
            changed.subscribe(),
            gone.clone(),
        )));
    }
    let dir = dir.to_path_buf();
    tokio::spawn(async move {
        watch_spool(inotify, pidfd, &changed).await;
        let _ = gone_tx.send(true);
        changed.send_modify(|count| *count += 1);
        for copy in copies {
            let _ = copy.await;
        }
        let _ = ended.send(exit_status(&dir));
    });
    Ok((lines, status))
}

/// Wakes the copies at each change of the spool, until the shim is gone.
async fn watch_spool(inotify: Inotify, pidfd: Option<OwnedFd>, changed: &watch::Sender<u64>) {
    let Some(pidfd) = pidfd else {
        return;
    };
    let raw = inotify.as_fd().as_raw_fd();
    // SAFETY: `raw` is the inotify descriptor, open and the same for as long as `inotify`
    // lives, which outlives `notified` (both end with this function, `notified` first).
    let notified = unsafe { AsyncFd::register(raw) };
    // SAFETY: the pidfd is owned by the `AsyncFd` that registers it.
    let shim = unsafe { AsyncFd::register(pidfd) };
    let (Ok(notified), Ok(shim)) = (notified, shim) else {
        return;
    };
    loop {
        tokio::select! {
            ready = notified.readable() => {
                let Ok(mut ready) = ready else { return };
                // Drained, whatever they say: the copies read the files again.
                while inotify.read_events().is_ok_and(|events| !events.is_empty()) {}
                ready.clear_ready();
                changed.send_modify(|count| *count += 1);
            }
            _ = shim.readable() => return,
        }
    }
}

/// Copies `file` into `writer` from its start, and what is appended to it, until `gone` says
/// the shim is gone and the file is read to its end.
async fn copy(
    file: PathBuf,
    mut writer: tokio::io::DuplexStream,
    mut changed: watch::Receiver<u64>,
    gone: watch::Receiver<bool>,
) {
    use std::io::Read;
    let mut opened: Option<std::fs::File> = None;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        changed.borrow_and_update();
        let last = *gone.borrow();
        if opened.is_none() {
            // Made by the first byte the engine printed: not there yet, or never.
            opened = std::fs::File::open(&file).ok();
        }
        // A regular file: a read never waits.
        while let Some(reading) = opened.as_mut() {
            match reading.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => {
                    if writer.write_all(&buffer[..read]).await.is_err() {
                        return;
                    }
                }
            }
        }
        if last || changed.changed().await.is_err() {
            return;
        }
    }
}

/// The engine's end as the shim recorded it (`code N` or `signal NAME`).
fn exit_status(dir: &Path) -> Option<std::process::ExitStatus> {
    let record = std::fs::read_to_string(dir.join(shim::EXIT_FILE)).ok()?;
    let first = record.lines().next()?;
    if let Some(code) = first.strip_prefix("code ") {
        let code: i32 = code.trim().parse().ok()?;
        return Some(std::process::ExitStatus::from_raw((code & 0xff) << 8));
    }
    let name = first.strip_prefix("signal ")?.trim();
    let signal: nix::sys::signal::Signal = name.parse().ok()?;
    Some(std::process::ExitStatus::from_raw(signal as i32))
}
