//! The daemon's HTTP API and dashboard, served on loopback (issue 12; `docs/http.md`).
//!
//! Map of the module:
//! - this file: [`start`] (the daemon's boot calls it; the server stops when the daemon
//!   drains), [`HttpStatus`] (what `status` says of the server), and the [`Bridge`] that carries each
//!   API call to the daemon's main thread;
//! - [`routes`]: the route table, in one place: it builds the actix-web app and answers
//!   `/describe`;
//! - [`api`]: the handlers (pages, assets, the JSON routes, their errors);
//! - [`access`]: the token file, login sessions, the cookie, CSRF, the Host and Origin checks;
//! - [`peer`]: the process behind a loopback TCP peer (procfs), for the requests that may
//!   widen (writes), drivers' and those naming an exec (`X-Corral-Exec`);
//! - [`uploads`]: images a browser sends with a prompt, written to `HOME/uploads/`;
//! - [`ws`]: the WebSocket of events.
//!
//! Threading. The daemon's methods run on its main actix thread and hold `Rc` state
//! ([`DaemonContext`]); actix-web runs [`WORKERS`] workers, each a thread with an actix
//! system of its own. So a handler never calls a method itself: it sends a [`Call`] (method,
//! params, the peer's pid when the request may widen) through the [`Bridge`], a `Send` channel
//! whose receiving task, spawned on the main thread, builds a [`Caller`] with
//! [`Transport::Http`] and runs `methods::call`, each call a task of its own; the answer
//! comes back on a oneshot. What is `Send` and cheap (the store's readers through
//! [`Corral::read`], the event broadcast) the workers use directly.

pub mod access;
mod api;
pub mod peer;
pub mod routes;
pub mod uploads;
mod ws;

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::daemon::methods::{self, Caller, Transport};
use crate::daemon::server::{CatchUnwind, DaemonContext};
use crate::daemon::shutdown::Phase;
use crate::protocol::status::HttpServing;
use crate::protocol::{code, RpcError};
use crate::Corral;

/// actix-web's workers: two threads answer HTTP (a loopback API for one person; the methods
/// themselves run on the daemon's main thread anyway).
pub const WORKERS: usize = 2;

/// The largest request body taken, in bytes: a prompt with its images fits.
pub const MAX_BODY: usize = 16 << 20;

/// The connections one worker serves at once: a third of the descriptors the socket's limit
/// leaves to the supervisor, shared by the workers (1,666 in all with 20,000 descriptors; at
/// least 64 a worker).
fn max_connections() -> usize {
    let socket = crate::daemon::connection_limit();
    (socket / 3 / 3 / WORKERS).max(64)
}

/// Calls waiting for the main thread at once; a handler past it waits for room.
const BRIDGE_QUEUE: usize = 1024;

/// One API call handed to the daemon's main thread.
pub struct Call {
    pub method: &'static str,
    pub params: Value,
    /// The process behind the TCP peer, looked up when the request started (before its body
    /// was read) for a write, a driver's request or one naming an exec; else `None`.
    pub peer_pid: Option<i32>,
    /// The exec the client names (`X-Corral-Exec`), the driver of what it sends.
    pub exec_id: Option<String>,
    pub reply: oneshot::Sender<Result<Value, RpcError>>,
}

/// The `Send` end of the way to the daemon's main thread.
#[derive(Clone)]
pub struct Bridge {
    calls: mpsc::Sender<Call>,
}

impl Bridge {
    /// Runs `method` on the main thread and waits for its answer.
    pub async fn call(
        &self,
        method: &'static str,
        params: Value,
        peer_pid: Option<i32>,
        exec_id: Option<String>,
    ) -> Result<Value, RpcError> {
        let (reply, answer) = oneshot::channel();
        let call = Call {
            method,
            params,
            peer_pid,
            exec_id,
            reply,
        };
        if self.calls.send(call).await.is_err() {
            return Err(stopping());
        }
        answer.await.unwrap_or_else(|_| Err(stopping()))
    }
}

fn stopping() -> RpcError {
    RpcError::new(code::BUSY, "the daemon is stopping")
}

/// The main thread's side of the [`Bridge`]: each call a task, as the socket's requests.
fn serve_calls(context: Rc<DaemonContext>, mut calls: mpsc::Receiver<Call>) {
    actix::spawn(async move {
        while let Some(call) = calls.recv().await {
            let context = context.clone();
            actix::spawn(async move {
                let caller = Caller::new(context, call.peer_pid, Transport::Http);
                *caller.exec_id.borrow_mut() = call.exec_id;
                let method = call.method;
                let mut reply = call.reply;
                let answer = CatchUnwind(Box::pin(methods::call(&caller, method, &call.params)));
                // A client that left stops waiting (`prompt.wait`); writes already handed to
                // the ledger commit anyway.
                let result = tokio::select! {
                    result = answer => result.unwrap_or_else(|()| {
                        tracing::error!(method, "an HTTP request panicked; answered with an internal error");
                        Err(RpcError::new(
                            code::INTERNAL,
                            format!("internal error: the daemon hit a bug in {method}; it goes on serving"),
                        ))
                    }),
                    () = reply.closed(), if method == "prompt.wait" => return,
                };
                let _ = reply.send(result);
            });
        }
    });
}

/// What the daemon's HTTP server is doing, as `status` says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpStatus {
    /// `http.listen` is `off`.
    Off,
    Serving {
        listen: SocketAddr,
    },
    /// It could not start (the port is taken, the token file is not ours); the socket serves.
    Failed {
        error: String,
    },
}

impl HttpStatus {
    /// `status`'s `http`: where it serves, why it does not, or `None` when off.
    pub fn serving(&self) -> Option<HttpServing> {
        match self {
            HttpStatus::Off => None,
            HttpStatus::Serving { listen } => Some(HttpServing::Serving {
                listen: listen.to_string(),
                url: format!("http://{listen}/"),
            }),
            HttpStatus::Failed { error } => Some(HttpServing::Failed {
                error: error.clone(),
            }),
        }
    }
}

/// What every worker shares.
pub struct HttpContext {
    pub bridge: Bridge,
    pub access: access::Access,
    pub corral: Corral,
    /// The address served (its real port).
    pub listen: SocketAddr,
    /// The daemon's home (uploads go in it).
    pub home: std::path::PathBuf,
}

/// What this process's daemon says of its HTTP server (one daemon per process; `Off` until
/// [`start`] ran, and in a program that only embeds the supervisor).
static STATUS: std::sync::Mutex<HttpStatus> = std::sync::Mutex::new(HttpStatus::Off);

/// The HTTP server's status, as `status` gives it (`http`).
pub fn status() -> HttpStatus {
    STATUS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

/// Starts the HTTP server as `http.listen` says, on the daemon's main thread, and stops it
/// when the daemon starts draining (as the socket stops accepting then): requests in flight
/// get a second to end, WebSockets are closed. A failure to start is logged in one line and
/// told by the status: the daemon serves its socket anyway. The daemon awaits
/// [`Serving::stopped`] before it exits, so that an answer in flight (`shutdown`'s own) is
/// written, not cut off by the process's exit.
pub fn start(context: Rc<DaemonContext>) -> Serving {
    let (status, stopping) = start_serving(context);
    *STATUS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = status;
    Serving { stopping }
}

/// The HTTP server, as the daemon holds it.
pub struct Serving {
    /// The task that stops the server when the daemon drains; `None` when none serves.
    stopping: Option<tokio::task::JoinHandle<()>>,
}

impl Serving {
    /// Once the server has stopped (its graceful stop ended).
    pub async fn stopped(self) {
        if let Some(stopping) = self.stopping {
            let _ = stopping.await;
        }
    }
}

/// Where the port a daemon chose is kept for the next one (`HOME/http.port`).
pub const PORT_FILE: &str = "http.port";

fn start_serving(context: Rc<DaemonContext>) -> (HttpStatus, Option<tokio::task::JoinHandle<()>>) {
    let Some(address) = context.corral.settings().http_listen else {
        return (HttpStatus::Off, None);
    };
    match bind(context.clone(), address) {
        Ok((handle, listen)) => {
            tracing::info!(%listen, "http: serving");
            let shutdown = context.shutdown.clone();
            let stopping = actix::spawn(async move {
                shutdown.reached(Phase::Draining).await;
                handle.stop(true).await;
                tracing::info!("http: stopped");
            });
            (HttpStatus::Serving { listen }, Some(stopping))
        }
        Err(error) => {
            tracing::error!("http: not serving: {error}");
            (HttpStatus::Failed { error }, None)
        }
    }
}

fn bind(
    context: Rc<DaemonContext>,
    address: SocketAddr,
) -> Result<(actix_web::dev::ServerHandle, SocketAddr), String> {
    let access = access::Access::open(&context.home)?;
    // No port set (`:0`): the one a daemon of this home chose before, while it is free, so that
    // a restarted daemon serves the same URL and an open page reconnects by itself.
    let chosen = context.home.join(PORT_FILE);
    let remembered = (address.port() == 0)
        .then(|| std::fs::read_to_string(&chosen).ok())
        .flatten()
        .and_then(|port| port.trim().parse::<u16>().ok())
        .filter(|&port| port != 0);
    let listener = match remembered {
        Some(port) => std::net::TcpListener::bind(SocketAddr::new(address.ip(), port))
            .or_else(|_| std::net::TcpListener::bind(address)),
        None => std::net::TcpListener::bind(address),
    }
    .map_err(|error| format!("cannot listen on {address} (http.listen): {error}"))?;
    let listen = listener
        .local_addr()
        .map_err(|error| format!("cannot read the address listened on: {error}"))?;
    if address.port() == 0 && remembered != Some(listen.port()) {
        if let Err(error) = crate::home::write_private(&chosen, &format!("{}\n", listen.port())) {
            tracing::warn!(%error, "http: the port chosen was not kept for the next daemon");
        }
    }
    let (calls, received) = mpsc::channel(BRIDGE_QUEUE);
    let shared = Arc::new(HttpContext {
        bridge: Bridge { calls },
        access,
        corral: context.corral.clone(),
        listen,
        home: context.home.clone(),
    });
    let data = actix_web::web::Data::from(shared);
    let server = actix_web::HttpServer::new(move || routes::app(data.clone()))
        .workers(WORKERS)
        // A share of the descriptors the socket leaves (`daemon::connection_limit` takes three
        // quarters): past it a worker stops accepting until connections close.
        .max_connections(max_connections())
        // The daemon handles its signals itself (`daemon::watch_signals`).
        .disable_signals()
        .shutdown_timeout(1)
        .listen(listener)
        .map_err(|error| format!("cannot serve on {listen}: {error}"))?
        .run();
    let handle = server.handle();
    actix::spawn(async move {
        if let Err(error) = server.await {
            tracing::error!(%error, "http: the server stopped");
        }
    });
    serve_calls(context, received);
    Ok((handle, listen))
}
