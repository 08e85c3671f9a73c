//! `corral daemon`: runs the supervisor as a service on the home's socket, in the foreground
//! or `--detach`ed, and its front door: `start`, `stop [--now]`, `restart`, `status`.
//!
//! `stop` asks the daemon to shut down as SIGTERM does (it starts no new prompt, gives the
//! running ones `daemon.shutdown_grace_ms` to end, puts what has not ended back at the head
//! of its session's queue, and exits; `--now` skips the grace) and waits for its process to
//! be gone, woken by the kernel (a pidfd), not by looking again. `restart` is `stop` then
//! `start`: the binary on disk serves next, so an upgrade is `cargo install` then `corral
//! daemon restart`. Each says what it did in one line; `status` exits 3 when no daemon
//! serves the home, as `corral status` does.

use std::time::Duration;

use super::{CliError, Context, Exit};
use crate::client::{Client, ClientError};
use crate::daemon::{self, DaemonOptions};
use crate::protocol::status::{Shutdown, ShutdownParams, Status, StatusParams};

#[derive(Debug, clap::Args)]
pub struct DaemonArgs {
    /// Run in the background (its own session; output to HOME/daemon.log; pid in
    /// HOME/daemon.pid) and return once it serves.
    #[arg(long)]
    pub detach: bool,
    #[command(subcommand)]
    pub action: Option<DaemonAction>,
}

#[derive(Debug, clap::Subcommand)]
pub enum DaemonAction {
    /// Start a daemon in the background (as `--detach`); says so when one serves already.
    Start,
    /// Stop the home's daemon and wait until it is gone: a running prompt gets the shutdown
    /// grace to end, then goes back to the head of its queue and runs again when a daemon
    /// serves the home.
    Stop {
        /// Skip the grace running prompts get to end (`daemon.shutdown_grace_ms`).
        #[arg(long)]
        now: bool,
    },
    /// Start the binary on disk in the daemon's place (an upgrade) without ending its runs:
    /// they go on under their shims, and the new daemon takes them over.
    Restart,
    /// Whether a daemon serves the home: its pid, version and socket (exit 3 when none).
    Status,
}

/// How long `stop` waits for the daemon's process past its shutdown grace.
const STOP_PATIENCE: Duration = Duration::from_secs(30);

pub async fn execute(context: &Context, args: &DaemonArgs) -> Result<Exit, CliError> {
    if context.ledger.is_none() {
        return Err(CliError::silent(1));
    }
    match &args.action {
        Some(DaemonAction::Start) => return start(context).await,
        Some(DaemonAction::Stop { now: false }) => return stop(context, Stopping::Grace).await,
        Some(DaemonAction::Stop { now: true }) => return stop(context, Stopping::Now).await,
        Some(DaemonAction::Restart) => {
            stop(context, Stopping::HandOver).await?;
            return start(context).await;
        }
        Some(DaemonAction::Status) => return status(context).await,
        None => {}
    }
    if args.detach {
        return detach(context).await;
    }
    init_logging();
    let served = daemon::run(DaemonOptions {
        home: context.home.clone(),
        exec_id: Some(context.invocation.id.clone()),
    })
    .await;
    // The daemon was asked to stop: its exec's end gets one attempt, not the store's wait
    // (`store.lock_timeout_ms`), which a store gone away (maybe why it was stopped) would
    // spend in full. An end not written is left for `monitor prune`.
    if let Some(ledger) = &context.ledger {
        ledger.stop_waiting();
    }
    served.map_err(CliError::failure)?;
    Ok(Exit::success())
}

/// The daemon logs to stderr (which `--detach` sends to HOME/daemon.log): refused peers,
/// restarts, shutdowns. `CORRAL_LOG` filters it as `RUST_LOG` is written: a level (error,
/// warn, info, debug, trace), or levels per module (`corral::actors=debug,info`).
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // `info`, or per module as `RUST_LOG` is written: `corral::actors=debug,info`. What does
    // not parse is said once, and `info` stands.
    let given = std::env::var(crate::env::LOG).ok();
    let filter = given
        .as_deref()
        .map(str::parse::<tracing_subscriber::filter::Targets>)
        .transpose();
    let (filter, refused) = match filter {
        Ok(Some(filter)) => (filter, None),
        Ok(None) => (default_filter(), None),
        Err(error) => (default_filter(), Some(error)),
    };
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(|| Log::new(std::io::stderr()))
                .with_ansi(false),
        )
        .with(filter)
        .try_init();
    if let Some(error) = refused {
        tracing::warn!(%error, value = given.as_deref().unwrap_or(""), "CORRAL_LOG was not understood; logging at info");
    }
}

fn default_filter() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO)
}

/// How many log lines could not be written since the last one that was (a full disk under
/// `HOME/daemon.log`, a closed stderr): said in the next line that gets through.
static DROPPED_LINES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The daemon's log writer: a line that cannot be written is counted and dropped, never an
/// error (a full disk must not end the daemon and its agents), and the count is said before
/// the next line that can be written. Each log line is one `write` (tracing formats it whole).
struct Log<W: std::io::Write> {
    inner: W,
}

impl<W: std::io::Write> Log<W> {
    fn new(inner: W) -> Self {
        Log { inner }
    }
}

impl<W: std::io::Write> std::io::Write for Log<W> {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        use std::sync::atomic::Ordering;
        let dropped = DROPPED_LINES.load(Ordering::Relaxed);
        if dropped > 0 {
            let note = format!(
                "corral: {dropped} log line(s) could not be written (a full disk?) and were \
                 dropped\n"
            );
            if self.inner.write_all(note.as_bytes()).is_ok() {
                DROPPED_LINES.fetch_sub(dropped, Ordering::Relaxed);
            }
        }
        if self.inner.write_all(line).is_err() {
            DROPPED_LINES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.inner.flush();
        Ok(())
    }
}

/// The home's daemon as this exec, or `None` when none answers.
async fn running(context: &Context) -> Result<Option<Client>, CliError> {
    match Client::connect(&context.home, Some(&context.invocation.id)).await {
        Ok(client) => Ok(Some(client)),
        Err(ClientError::NoDaemon(_)) => Ok(None),
        Err(error) => Err(super::remote::failure(error)),
    }
}

/// What `initialize` said of the daemon: its pid and version.
fn pid_and_version(client: &Client) -> (i32, String) {
    let pid = client.daemon["daemon_pid"].as_i64().unwrap_or(0) as i32;
    let version = client.daemon["corral_version"]
        .as_str()
        .unwrap_or("?")
        .to_string();
    (pid, version)
}

async fn start(context: &Context) -> Result<Exit, CliError> {
    if let Some(client) = running(context).await? {
        let (pid, _) = pid_and_version(&client);
        println!("corral daemon already runs (pid {pid})");
        return Ok(Exit::success());
    }
    detach(context).await
}

/// A daemon in the background, started from this exec (its parent), once it serves; a home
/// served already refuses it, naming the pid that serves.
async fn detach(context: &Context) -> Result<Exit, CliError> {
    let home = context.home.clone();
    let starter = daemon::Starter {
        exec_id: Some(context.invocation.id.clone()),
        trace_id: Some(context.invocation.trace_id.clone()),
    };
    let pid = tokio::task::spawn_blocking(move || daemon::spawn_detached(&home, &starter))
        .await
        .map_err(|error| CliError::failure(error.to_string()))?
        .map_err(CliError::failure)?;
    println!(
        "corral daemon started (pid {pid}), socket {}",
        daemon::socket_path(&context.home).display()
    );
    Ok(Exit::success())
}

/// How `stop` stops the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopping {
    /// Running prompts have the grace to end, then go back to their queues.
    Grace,
    /// As `Grace`, with no grace.
    Now,
    /// At once, the runs left running to their shims for the next daemon to adopt.
    HandOver,
}

async fn stop(context: &Context, how: Stopping) -> Result<Exit, CliError> {
    let now = how != Stopping::Grace;
    let Some(mut client) = running(context).await? else {
        println!("no daemon runs for {}", context.home.display());
        return Ok(Exit::success());
    };
    let (pid, _) = pid_and_version(&client);
    // Each session that works has one prompt running or waiting for its slot.
    let working = client
        .call::<Status>(&StatusParams { waiters: Some(0) })
        .await
        .map(|status| status.working)
        .unwrap_or(0);
    // A second ask skips the grace, as a second SIGTERM does.
    let asks = if how == Stopping::Now { 2 } else { 1 };
    let params = ShutdownParams {
        handover: how == Stopping::HandOver,
    };
    for _ in 0..asks {
        client
            .call::<Shutdown>(&params)
            .await
            .map_err(super::remote::failure)?;
    }
    drop(client);
    let grace = if now {
        Duration::ZERO
    } else {
        context
            .reader()
            .ok()
            .and_then(|connection| crate::store::settings::Settings::load(&connection).ok())
            .map_or(Duration::from_secs(10), |settings| settings.shutdown_grace)
    };
    let when = if grace.is_zero() {
        "at once".to_string()
    } else {
        format!("if it has not ended within {}", grace_words(grace))
    };
    match working {
        0 => {}
        1 if how == Stopping::HandOver => say!(
            "corral: 1 session works: its run goes on, and the next daemon takes it over"
        ),
        n if how == Stopping::HandOver => say!(
            "corral: {n} sessions work: their runs go on, and the next daemon takes them over"
        ),
        1 => say!(
            "corral: 1 session works: its prompt goes back to the head of its queue {when}, to run again when a daemon serves this home"
        ),
        n => say!(
            "corral: {n} sessions work: each prompt goes back to the head of its queue {when}, to run again when a daemon serves this home"
        ),
    }
    let gone =
        tokio::task::spawn_blocking(move || crate::process::wait_gone(pid, grace + STOP_PATIENCE))
            .await
            .map_err(|error| CliError::failure(error.to_string()))?;
    if !gone {
        return Err(CliError::failure(format!(
            "the daemon (pid {pid}) is still stopping after {} s; `corral daemon stop --now` ends its runs at once",
            (grace + STOP_PATIENCE).as_secs()
        )));
    }
    println!("corral daemon stopped (pid {pid})");
    Ok(Exit::success())
}

async fn status(context: &Context) -> Result<Exit, CliError> {
    let Some(client) = running(context).await? else {
        println!("{}", super::remote::no_daemon_line(context));
        return Ok(Exit::code(super::remote::NO_DAEMON));
    };
    let (pid, version) = pid_and_version(&client);
    println!(
        "corral daemon runs: pid {pid}, version {version}, socket {}",
        daemon::socket_path(&context.home).display()
    );
    Ok(Exit::success())
}

/// `10 s`, `1.5 s`, `300 ms`.
fn grace_words(grace: Duration) -> String {
    if grace < Duration::from_secs(1) {
        format!("{} ms", grace.as_millis())
    } else {
        format!("{} s", grace.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A writer that fails while `full` is set, and keeps what it was given.
    struct Disk<'a> {
        full: &'a std::cell::Cell<bool>,
        written: &'a std::cell::RefCell<Vec<u8>>,
    }

    impl Write for Disk<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.full.get() {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            self.written.borrow_mut().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_lines_that_cannot_be_written_are_counted_and_said_when_one_can() {
        let full = std::cell::Cell::new(false);
        let written = std::cell::RefCell::new(Vec::new());
        let mut log = Log::new(Disk {
            full: &full,
            written: &written,
        });
        log.write_all(b"one\n").unwrap();
        full.set(true);
        for _ in 0..3 {
            // Never an error: the daemon goes on.
            log.write_all(b"lost\n").unwrap();
        }
        full.set(false);
        log.write_all(b"two\n").unwrap();
        log.write_all(b"three\n").unwrap();
        let text = String::from_utf8(written.take()).unwrap();
        assert_eq!(
            text,
            "one\ncorral: 3 log line(s) could not be written (a full disk?) and were dropped\n\
             two\nthree\n"
        );
    }
}
