//! `corral daemon`: the supervisor as a service on a Unix socket.
//!
//! Layout: this file owns the daemon's life (one per home, the socket, signals, shutdown);
//! [`server`] serves connections (framing, handshake, peer check, subscriptions); [`methods`]
//! turns each request into calls on the [`Corral`] handle.
//!
//! Life of a daemon:
//! 1. take an exclusive `flock` on `$CORRAL_HOME/daemon.lock` (a second daemon reads the
//!    holder's pid from it and says so); holding it is what makes any socket file at the path
//!    stale, so it is replaced — a live daemon's socket is never stolen;
//! 2. bind `$CORRAL_HOME/corral.sock`, mode 0600; start the supervisor (boot reconciliation
//!    resumes what a killed daemon left);
//! 3. serve until SIGTERM/SIGINT: stop accepting, let running prompts finish for
//!    `daemon.shutdown_grace_ms`, then end their process groups and requeue them; a second
//!    signal skips the grace; remove the socket; exit 0.

pub mod confine;
pub mod events;
pub mod http;
pub mod methods;
pub mod origin;
pub mod server;
pub mod shutdown;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::UnixListener;

use shutdown::Phase;
use tokio::sync::mpsc;

use crate::{Corral, CorralOptions};

/// Where a detached daemon writes its pid.
pub const PID_FILE: &str = "daemon.pid";
/// Where a detached daemon's stdout and stderr go.
pub const LOG_FILE: &str = "daemon.log";

/// The line a daemon started with [`crate::env::DAEMON_NOTIFY`] prints on stdout once it serves.
pub const READY_LINE: &str = "corral daemon ready";

/// The socket's file name in the home.
pub const SOCKET_FILE: &str = "corral.sock";

/// The socket path of a home.
pub fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET_FILE)
}

/// Checks that a socket path fits in `sun_path`.
pub fn check_socket_path(path: &Path) -> Result<(), String> {
    crate::socket::check_path(path).map_err(|error| format!("{error} (use a shorter CORRAL_HOME)"))
}

/// What the daemon needs to start.
pub struct DaemonOptions {
    pub home: PathBuf,
    /// The daemon's own exec id (the default parent of the agents' commands).
    pub exec_id: Option<String>,
}

/// Runs a daemon in the foreground until it is told to stop. Needs a running actix system.
pub async fn run(options: DaemonOptions) -> Result<(), String> {
    let begun = Instant::now();
    let home = options.home;
    let socket = socket_path(&home);
    check_socket_path(&socket)?;
    let lock = crate::home::DaemonLock::acquire(&home)?;
    // We hold the lock: whatever socket file is there belongs to a dead daemon.
    match std::fs::remove_file(&socket) {
        Ok(()) => tracing::info!(path = %socket.display(), "replaced a stale socket"),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(format!(
                "cannot remove the stale socket {}: {error}",
                socket.display()
            ))
        }
    }
    // Mode 0600 from the moment the path exists (src/socket.rs).
    let listener = crate::socket::bind_private(&socket).map_err(|error| error.to_string())?;
    let bound = begun.elapsed();

    // The supervisor holds the home's lock from now on, as long as it lives (past the socket's
    // removal below).
    let corral = Corral::start_holding(
        lock,
        CorralOptions {
            home: home.clone(),
            exec_id: options.exec_id,
            // `corral daemon` inspected the store before its own exec was recorded in it.
            store_checked: true,
        },
    )
    .await
    .map_err(|error| error.to_string())?;

    let signals = watch_signals()?;
    // Ready once boot has ended what a dead daemon left and closed its runs: the resumed
    // prompts' workers start in steps while the daemon serves (`supervisor::resume`).
    if std::env::var_os(crate::env::DAEMON_NOTIFY).is_some() {
        announce_ready(&home);
    }
    tracing::info!(
        since_exec_ms = since_exec_ms(),
        lock_and_socket_ms = bound.as_millis() as u64,
        supervisor_ms = (begun.elapsed() - bound).as_millis() as u64,
        resumed = corral.recovered().sessions.len(),
        "ready"
    );
    let started = Instant::now();
    let context = Rc::new(server::DaemonContext::new(corral.clone(), home.clone()));
    // The HTTP API (`http.listen`); a failure to serve it leaves the socket serving.
    let http = crate::daemon::http::start(context.clone());
    service_manager(&context);
    let outcome = serve_until_signal(listener, context.clone(), signals, &corral).await;
    http.stopped().await;
    let _ = std::fs::remove_file(&socket);
    // The pid file names a live daemon only; remove it if it is ours.
    let pid_file = home.join(PID_FILE);
    if std::fs::read_to_string(&pid_file)
        .is_ok_and(|pid| pid.trim() == std::process::id().to_string())
    {
        let _ = std::fs::remove_file(&pid_file);
    }
    tracing::info!(uptime_s = started.elapsed().as_secs(), "daemon stopped");
    outcome
}

/// How long ago this process was started (exec'd), as `/proc` says (10 ms resolution): with
/// the phases after it, where a daemon's start goes.
fn since_exec_ms() -> Option<u64> {
    let started = procfs::process::Process::myself()
        .ok()?
        .stat()
        .ok()?
        .starttime;
    let uptime = <procfs::Uptime as procfs::Current>::current().ok()?.uptime;
    let ticks = procfs::ticks_per_second() as f64;
    Some(((uptime - started as f64 / ticks) * 1000.0).max(0.0) as u64)
}

/// The clients a daemon serves at once, unless `CORRAL_MAX_CONNECTIONS` says otherwise:
/// three quarters of its descriptor limit (`RLIMIT_NOFILE`), so that the supervisor keeps
/// descriptors for its store and its engines' pipes however many clients come. A client over
/// the limit is told so and closed.
pub fn connection_limit() -> usize {
    if let Some(limit) = std::env::var(crate::env::MAX_CONNECTIONS)
        .ok()
        .and_then(|limit| limit.parse().ok())
    {
        return limit;
    }
    let descriptors =
        match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
            Ok((soft, _)) if soft != nix::sys::resource::RLIM_INFINITY => {
                soft.min(1 << 20) as usize
            }
            _ => 1 << 20,
        };
    (descriptors / 4 * 3).max(1)
}

/// The first wait after a failed `accept`; each further failure doubles it, up to
/// [`ACCEPT_BACKOFF_MAX`]; an accepted connection resets it.
pub const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Failed accepts are logged at most once per period (with how many there were).
pub const ACCEPT_LOG_PERIOD: Duration = Duration::from_secs(10);

/// The accept loop's answer to failures (at the descriptor limit, `accept` fails with EMFILE
/// or ENFILE as long as the limit holds, and the pending connection keeps the listener ready):
/// wait a short, growing delay instead of spinning, and log once per period.
#[derive(Debug, Default)]
pub struct AcceptBackoff {
    delay: Duration,
    failures: u64,
    since: Option<Instant>,
    logged: Option<Instant>,
}

impl AcceptBackoff {
    /// A failed accept at `now`: how long to wait before the next one.
    pub fn failed(&mut self, error: &std::io::Error, now: Instant) -> Duration {
        self.failures += 1;
        let since = *self.since.get_or_insert(now);
        if self
            .logged
            .is_none_or(|logged| now.duration_since(logged) >= ACCEPT_LOG_PERIOD)
        {
            self.logged = Some(now);
            let at_limit = matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
            tracing::warn!(
                %error,
                failures = self.failures,
                for_ms = now.duration_since(since).as_millis() as u64,
                "accept failed{}; retrying after {} ms to {} ms (logged once per {} s)",
                if at_limit { " at the descriptor limit" } else { "" },
                ACCEPT_BACKOFF_MIN.as_millis(),
                ACCEPT_BACKOFF_MAX.as_millis(),
                ACCEPT_LOG_PERIOD.as_secs(),
            );
        }
        let delay = self.delay.clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
        self.delay = (delay * 2).min(ACCEPT_BACKOFF_MAX);
        delay
    }

    /// An accepted connection at `now`: back to a quick retry. (The log period goes on: a
    /// limit reached again and again is still logged once per period.)
    pub fn succeeded(&mut self, now: Instant) {
        if let Some(since) = self.since.take() {
            if self.logged.is_some_and(|logged| logged >= since) {
                tracing::info!(
                    failures = self.failures,
                    for_ms = now.duration_since(since).as_millis() as u64,
                    "accepting again"
                );
            }
        }
        self.delay = Duration::ZERO;
        self.failures = 0;
    }
}

/// Failures of `accept` that say nothing about the daemon (the client left before it was
/// accepted): accept the next one at once.
fn transient(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ECONNABORTED | libc::EINTR | libc::EAGAIN | libc::EPROTO)
    )
}

async fn serve_until_signal(
    listener: UnixListener,
    context: Rc<server::DaemonContext>,
    mut signals: mpsc::UnboundedReceiver<i32>,
    corral: &Corral,
) -> Result<(), String> {
    // Every signal is an ask to stop: the first drains, the next stops at once.
    let shutdown = context.shutdown.clone();
    let asking = shutdown.clone();
    actix::spawn(async move {
        while let Some(signal) = signals.recv().await {
            tracing::info!(signal, "asked to stop");
            // SIGHUP hands the runs over, as `corral daemon restart` does.
            match signal {
                libc::SIGHUP => asking.request_handover(),
                _ => asking.request(),
            }
        }
    });
    let limit = connection_limit();
    let served = Arc::new(tokio::sync::Semaphore::new(limit));
    let mut backoff = AcceptBackoff::default();
    tracing::info!(connections = limit, "serving");
    tokio::select! {
        never = accept(&listener, &context, &served, limit, &mut backoff) => match never {},
        _ = shutdown.reached(Phase::Draining) => {}
    }
    tracing::info!("shutting down");
    // Clients are still taken while running prompts have their grace: `status` says the
    // daemon is shutting down, and a send, refused, waits for it to end instead of being told
    // that no daemon runs, or that another holds the home.
    let grace = corral.settings().shutdown_grace;
    let stopping = async {
        if shutdown.is_handover() {
            return corral.hand_over().await;
        }
        tokio::select! {
            _ = corral.shutdown(grace) => {}
            _ = shutdown.reached(Phase::Stopping) => {
                // A second ask: no more grace (or a hand-over asked meanwhile).
                if shutdown.is_handover() {
                    corral.hand_over().await;
                } else {
                    corral.shutdown(Duration::ZERO).await;
                }
            }
        }
    };
    tokio::select! {
        never = accept(&listener, &context, &served, limit, &mut backoff) => match never {},
        () = stopping => {}
    }
    // Stop accepting: new clients get "connection refused" and may start another daemon only
    // after this one released its lock.
    drop(listener);
    Ok(())
}

/// Takes clients for as long as it is polled: each served on a task of its own, past `limit`
/// at once refused as busy; a failing `accept` (out of descriptors) waits a backoff.
async fn accept(
    listener: &UnixListener,
    context: &Rc<server::DaemonContext>,
    served: &Arc<tokio::sync::Semaphore>,
    limit: usize,
    backoff: &mut AcceptBackoff,
) -> std::convert::Infallible {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                backoff.succeeded(Instant::now());
                match served.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let context = context.clone();
                        actix::spawn(async move {
                            server::serve(stream, context).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        let error = crate::protocol::RpcError::new(
                            crate::protocol::code::BUSY,
                            format!(
                                "refused: the daemon already serves {limit} connections, \
                                 the most it takes at once; try again when some close"
                            ),
                        );
                        server::refuse(stream, &server::refusal_line(error));
                    }
                }
            }
            Err(error) if transient(&error) => {}
            Err(error) => tokio::time::sleep(backoff.failed(&error, Instant::now())).await,
        }
    }
}

/// SIGTERM and SIGINT, delivered as messages: tokio's signal handling, as everywhere in corral
/// (the CLI's commands use the same), read by a task of the daemon's own thread.
fn watch_signals() -> Result<mpsc::UnboundedReceiver<i32>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let watch =
        |kind: SignalKind| signal(kind).map_err(|error| format!("cannot watch signals: {error}"));
    let mut terminate = watch(SignalKind::terminate())?;
    let mut interrupt = watch(SignalKind::interrupt())?;
    let mut hangup = watch(SignalKind::hangup())?;
    let (sender, receiver) = mpsc::unbounded_channel();
    actix::spawn(async move {
        loop {
            let signal = tokio::select! {
                Some(()) = terminate.recv() => libc::SIGTERM,
                Some(()) = interrupt.recv() => libc::SIGINT,
                Some(()) = hangup.recv() => libc::SIGHUP,
                else => return,
            };
            if sender.send(signal).is_err() {
                return;
            }
        }
    });
    Ok(receiver)
}

/// Tells a service manager that waits for it (systemd's `Type=notify`, `NOTIFY_SOCKET`) that
/// the daemon serves (`READY=1`), and later that it stops (`STOPPING=1`).
fn service_manager(context: &Rc<server::DaemonContext>) {
    if std::env::var_os(crate::env::NOTIFY_SOCKET).is_none() {
        return;
    }
    sd_notify(&format!("READY=1\nMAINPID={}", std::process::id()));
    let shutdown = context.shutdown.clone();
    actix::spawn(async move {
        shutdown.reached(Phase::Draining).await;
        sd_notify("STOPPING=1");
    });
}

/// One datagram to `NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace).
fn sd_notify(state: &str) {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(target) = std::env::var_os(crate::env::NOTIFY_SOCKET) else {
        return;
    };
    let sent = UnixDatagram::unbound().and_then(|socket| {
        let address = match target.to_str().and_then(|name| name.strip_prefix('@')) {
            Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
            None => SocketAddr::from_pathname(&target)?,
        };
        socket.send_to_addr(state.as_bytes(), &address)
    });
    if let Err(error) = sent {
        tracing::warn!(%error, "the service manager was not told {state:?}");
    }
}

/// Tells the `--detach` parent that the socket serves, then sends stdout to the log.
fn announce_ready(home: &Path) {
    println!("{READY_LINE} {}", std::process::id());
    let _ = std::io::stdout().flush();
    if let Ok(log) = crate::home::private_file()
        .create(true)
        .append(true)
        .open(home.join(LOG_FILE))
    {
        // The log file stays open in stdout's place.
        let _ = nix::unistd::dup2_stdout(&log);
    }
}

/// The exec that starts a daemon (`corral daemon --detach`, or a command's auto-start): the
/// daemon's own exec row is recorded as its child, in its trace.
#[derive(Debug, Clone, Default)]
pub struct Starter {
    pub exec_id: Option<String>,
    pub trace_id: Option<String>,
}

/// Starts a daemon for `home` in the background (its own session, output to the log file),
/// waits until it serves, and returns its pid. Used by `corral daemon --detach` and by the
/// CLI's auto-start; `starter` is the exec that asks for it.
pub fn spawn_detached(home: &Path, starter: &Starter) -> Result<u32, String> {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let exe =
        std::env::current_exe().map_err(|error| format!("cannot find corral itself: {error}"))?;
    let log = crate::home::private_file()
        .create(true)
        .append(true)
        .open(home.join(LOG_FILE))
        .map_err(|error| format!("cannot open the daemon log: {error}"))?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("--home")
        .arg(home)
        .arg("daemon")
        .env(crate::env::DAEMON_NOTIFY, "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log);
    // Its parent is the starter, not whatever the starter's own environment names.
    let inherit = [
        (crate::env::PARENT_EXEC, &starter.exec_id),
        (crate::env::TRACE_ID, &starter.trace_id),
    ];
    for (name, value) in inherit {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from our terminal and group.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()?;
            Ok(())
        });
    }
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot start a daemon: {error}"))?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or("no pipe to the daemon")?;
    let mut line = String::new();
    // The daemon prints the ready line once it serves, or exits (its reason is in the log).
    let read = std::io::BufReader::new(stdout).read_line(&mut line);
    if read.is_err() || !line.starts_with(READY_LINE) {
        let status = child.wait().ok();
        let log = std::fs::read_to_string(home.join(LOG_FILE)).unwrap_or_default();
        let reason = log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no reason logged");
        // Its last line is its own error, `corral: …`: ours says `corral:` once.
        let reason = reason.strip_prefix("corral: ").unwrap_or(reason);
        return Err(format!(
            "the daemon did not start ({}): {reason}",
            status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "unknown status".into())
        ));
    }
    let _ = crate::home::write_private(&home.join(PID_FILE), &format!("{pid}\n"));
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_backoff_grows_from_10_ms_to_1_s_and_resets_on_success() {
        let error = std::io::Error::from_raw_os_error(libc::EMFILE);
        let mut backoff = AcceptBackoff::default();
        let now = Instant::now();
        let delays: Vec<u128> = (0..10)
            .map(|_| backoff.failed(&error, now).as_millis())
            .collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        backoff.succeeded(now);
        assert_eq!(backoff.failed(&error, now), ACCEPT_BACKOFF_MIN);
    }

    #[test]
    fn accept_failures_are_logged_once_per_period() {
        let error = std::io::Error::from_raw_os_error(libc::EMFILE);
        let mut backoff = AcceptBackoff::default();
        let start = Instant::now();
        backoff.failed(&error, start);
        assert_eq!(backoff.logged, Some(start));
        backoff.failed(&error, start + Duration::from_secs(3));
        backoff.succeeded(start + Duration::from_secs(4));
        backoff.failed(&error, start + Duration::from_secs(5));
        assert_eq!(
            backoff.logged,
            Some(start),
            "logged again within the period"
        );
        let later = start + ACCEPT_LOG_PERIOD;
        backoff.failed(&error, later);
        assert_eq!(backoff.logged, Some(later));
    }
}
