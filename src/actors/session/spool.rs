//! A run's spool, this daemon's side (live restore): `HOME/runs/<run id>/stdout` and `stderr`
//! hold the engine's output from its first byte, so that a daemon taking the run over finds
//! there what no stored event covers yet, however the daemon before it ended.
//!
//! ```text
//!  engine ─pipe─► reader: Tee ─► appended to HOME/runs/<run>/stdout ─► lines ─► events
//!                                                    │      stored with how far they cover
//!                                                    │      (runs.stdout_stored, one commit)
//!  this daemon gone (kill -9, or a hand-over):       │
//!  the shim appends the rest of the pipe ────────────┘
//!  the next daemon reads the spool from runs.stdout_stored on (adopt.rs)
//! ```
//!
//! Every byte a reader takes from the pipe is in the spool before it is a line, so a daemon
//! killed with -9 loses nothing: what it read and did not store lies past the stored mark.
//! The spool keeps the whole output, not only what is not stored yet: a daemon taking the run
//! over reads the start again to know what the engine said (its final line may be stored
//! already), storing nothing of it. So a running turn's output is on the disk twice (its
//! events hold it too) until the turn ends and its spool goes. A spool that cannot be written
//! (a full disk) is marked incomplete, and the run goes on here, but cannot be taken over.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{mpsc, watch};

use super::child::{read_lines, Line, Stream, LINE_BUFFER};
use crate::process::shim;

/// A run's spool and the lifeline its shim waits on: held while this daemon follows the run;
/// [`RunSpool::hand_over`] (or this daemon's end) hands the run to the shim.
pub(super) struct RunSpool {
    pub(super) dir: PathBuf,
    lifeline: OwnedFd,
    readers: Readers,
}

impl RunSpool {
    /// Reads the run's pipes into one bounded channel of lines (at most [`LINE_BUFFER`] in
    /// flight), keeping every byte in the spool in `dir` first.
    pub(super) fn follow(
        dir: PathBuf,
        stdout: OwnedFd,
        stderr: OwnedFd,
        lifeline: OwnedFd,
    ) -> std::io::Result<(RunSpool, mpsc::Receiver<Line>)> {
        use tokio::net::unix::pipe::Receiver;
        let (lines_tx, lines) = mpsc::channel::<Line>(LINE_BUFFER);
        let (stop, told) = watch::channel(false);
        let mut tasks = Vec::new();
        for (pipe, stream) in [(stdout, Stream::Stdout), (stderr, Stream::Stderr)] {
            let tee = Tee {
                pipe: Receiver::from_owned_fd(pipe)?,
                file: SpoolFile::new(&dir, stream),
            };
            tasks.push(tokio::spawn(read_lines(
                tee,
                stream,
                0,
                lines_tx.clone(),
                Some(told.clone()),
            )));
        }
        let spool = RunSpool {
            dir,
            lifeline,
            readers: Readers { stop, tasks },
        };
        Ok((spool, lines))
    }

    /// This daemon ends the run itself (said before its processes are signalled): no daemon
    /// after it takes the run over, whatever its shim records.
    pub(super) fn mark_stopped(&self) {
        mark(&self.dir, shim::STOPPED);
    }

    /// The run was judged here: its spool goes, and with it the lifeline.
    pub(super) fn remove(self) {
        remove(&self.dir);
    }

    /// Stops reading the run's pipes, once each reader has kept what it read in the spool:
    /// the shim appends after it. The lines already delivered are the caller's to store.
    pub(super) async fn stop_reading(&mut self) {
        let _ = self.readers.stop.send(true);
        for task in std::mem::take(&mut self.readers.tasks) {
            let _ = task.await;
        }
    }

    /// Hands the run to its shim, once the readers are stopped and what they delivered is
    /// stored: the lifeline ends, and the shim spools the rest. The next daemon takes the run
    /// over from the stored mark.
    pub(super) fn hand_over(self) {
        mark(&self.dir, shim::HANDED_OVER);
        drop(self.lifeline);
    }
}

/// Removes a run's spool `dir`, once the run is judged.
pub(super) fn remove(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// Leaves the empty file `name` in a run's spool `dir` (a marker; one that cannot be made is
/// said in the log).
pub(super) fn mark(dir: &Path, name: &str) {
    let made = crate::home::private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.join(name));
    if let Err(error) = made {
        tracing::warn!(%error, spool = %dir.display(), marker = name, "a run's spool could not be marked");
    }
}

/// The readers of a run's pipes.
struct Readers {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// A pipe whose every byte read is first appended to the run's spool.
struct Tee<R> {
    pipe: R,
    file: SpoolFile,
}

impl<R: AsyncRead + Unpin> AsyncRead for Tee<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buffer.filled().len();
        let polled = Pin::new(&mut this.pipe).poll_read(context, buffer);
        if let Poll::Ready(Ok(())) = polled {
            // A write into the page cache: it does not wait on the pipe's writer.
            this.file.keep(&buffer.filled()[before..]);
        }
        polled
    }
}

/// One stream's spool file, opened at its first byte.
struct SpoolFile {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// It could not be written: it misses output from then on, and is kept no more.
    broken: bool,
}

impl SpoolFile {
    fn new(dir: &Path, stream: Stream) -> SpoolFile {
        let name = match stream {
            Stream::Stdout => shim::SPOOLED_STDOUT,
            Stream::Stderr => shim::SPOOLED_STDERR,
        };
        SpoolFile {
            path: dir.join(name),
            file: None,
            broken: false,
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        use std::io::Write;
        if self.broken || bytes.is_empty() {
            return;
        }
        if self.file.is_none() {
            match crate::home::private_file()
                .append(true)
                .create(true)
                .open(&self.path)
            {
                Ok(file) => self.file = Some(file),
                Err(error) => return self.break_off(error),
            }
        }
        let file = self.file.as_mut().expect("just opened");
        if let Err(error) = file.write_all(bytes) {
            self.break_off(error);
        }
    }

    /// The spool misses output from now on: said once, and marked, so that no daemon takes
    /// the run over from it. The run goes on here.
    fn break_off(&mut self, error: std::io::Error) {
        tracing::error!(
            %error,
            spool = %self.path.display(),
            "the run's output cannot be kept in its spool: the run cannot be taken over if this daemon stops"
        );
        self.broken = true;
        self.file = None;
        if let Some(dir) = self.path.parent() {
            mark(dir, shim::INCOMPLETE);
        }
    }
}
