//! One connection to the daemon: framing, the handshake, the peer check, subscriptions.
//!
//! Reading: lines of at most [`MAX_LINE`] bytes; a longer one is answered with an error and
//! skipped to its end; invalid UTF-8 or JSON is a parse error; nothing a client sends stops the
//! daemon or the other connections. A client must `initialize` within [`HANDSHAKE_TIMEOUT`]
//! (a connection that sends nothing holds nothing for long).
//!
//! Writing: every response and notification goes through one bounded queue drained by a writer
//! task. Requests run as tasks of their own, so a long `prompt.wait` does not hold the others.
//! A subscription forwards events from the supervisor's broadcast (a bounded buffer the
//! sessions publish into without ever waiting) to the client's queue. A client that falls more
//! than that buffer behind gets an `events.lagged` notice with the sequence to resume from, and
//! the subscription ends — a slow reader never blocks a session.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{broadcast, mpsc};

use super::methods;
use crate::protocol::{
    code, Notification, Request, Response, RpcError, MAX_LINE, PROTOCOL_VERSION,
};
use crate::store::work;
use crate::Corral;

/// How long a new connection may take to send `initialize`.
/// `CORRAL_HANDSHAKE_TIMEOUT_MS` overrides it (tests).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Lines waiting to be written to one client.
const OUTBOUND: usize = 1024;

/// Stored events replayed per read when a subscription catches up.
const REPLAY_PAGE: usize = 512;

/// What every connection shares.
pub struct DaemonContext {
    pub corral: Corral,
    pub home: PathBuf,
    shutting_down: Cell<bool>,
    next_subscription: Cell<u64>,
}

impl DaemonContext {
    pub fn new(corral: Corral, home: PathBuf) -> Self {
        DaemonContext {
            corral,
            home,
            shutting_down: Cell::new(false),
            next_subscription: Cell::new(1),
        }
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.set(true);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.get()
    }
}

/// What one connection knows about its client.
pub struct Connection {
    pub context: Rc<DaemonContext>,
    /// Set by `initialize`.
    pub initialized: Cell<bool>,
    /// The client's exec (the driver of what it sends), from `initialize`.
    pub exec_id: RefCell<Option<String>>,
    /// The client's pid (SO_PEERCRED) when the connection was accepted: where its requests
    /// come from (`origin::find`).
    pub peer_pid: Option<i32>,
    out: mpsc::Sender<String>,
    subscriptions: RefCell<HashMap<u64, tokio::task::JoinHandle<()>>>,
}

impl Connection {
    /// Queues a line for the client; `false` when the client is gone.
    async fn send_line(&self, line: String) -> bool {
        self.out.send(line).await.is_ok()
    }

    async fn respond(&self, response: Response) {
        let line = serde_json::to_string(&response).expect("responses serialize");
        self.send_line(line).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        for (_, task) in self.subscriptions.borrow_mut().drain() {
            task.abort();
        }
    }
}

fn handshake_timeout() -> Duration {
    std::env::var("CORRAL_HANDSHAKE_TIMEOUT_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
        .unwrap_or(HANDSHAKE_TIMEOUT)
}

/// One line read from a client.
enum Line {
    Text(Vec<u8>),
    /// Longer than [`MAX_LINE`]; its bytes were skipped.
    TooLong,
    Closed,
}

/// Reads one line, never buffering more than [`MAX_LINE`] bytes of it.
async fn read_line<R: AsyncBufReadExt + Unpin>(reader: &mut R) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if line.is_empty() {
                Line::Closed
            } else {
                Line::Text(line)
            });
        }
        let (chunk, found) = match buffer.iter().position(|&byte| byte == b'\n') {
            Some(end) => (&buffer[..end], Some(end + 1)),
            None => (buffer, None),
        };
        if !too_long {
            if line.len() + chunk.len() > MAX_LINE {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let consumed = found.unwrap_or(buffer.len());
        reader.consume(consumed);
        if found.is_some() {
            return Ok(if too_long {
                Line::TooLong
            } else {
                Line::Text(line)
            });
        }
    }
}

/// Serves one connection until the client leaves.
pub async fn serve(stream: UnixStream, context: Rc<DaemonContext>) {
    // SO_PEERCRED: only our own user may drive our agents.
    let own_uid = unsafe { libc::geteuid() };
    let peer_pid = match stream.peer_cred() {
        Ok(peer) if peer.uid() == own_uid => peer.pid(),
        Ok(peer) => {
            tracing::warn!(peer_uid = peer.uid(), pid = ?peer.pid(), "refused a client of another user");
            return;
        }
        Err(error) => {
            tracing::warn!(%error, "refused a client whose credentials cannot be read");
            return;
        }
    };
    let (read, mut write) = stream.into_split();
    let (out, mut outbound) = mpsc::channel::<String>(OUTBOUND);
    let writer = actix::spawn(async move {
        while let Some(mut line) = outbound.recv().await {
            line.push('\n');
            if write.write_all(line.as_bytes()).await.is_err() {
                return;
            }
        }
    });
    let connection = Rc::new(Connection {
        context,
        initialized: Cell::new(false),
        exec_id: RefCell::new(None),
        peer_pid,
        out,
        subscriptions: RefCell::new(HashMap::new()),
    });
    let mut reader = BufReader::new(read);
    let handshake_deadline = tokio::time::Instant::now() + handshake_timeout();
    loop {
        let next = if connection.initialized.get() {
            read_line(&mut reader).await
        } else {
            // One deadline from the accept: talking without initializing does not extend it.
            match tokio::time::timeout_at(handshake_deadline, read_line(&mut reader)).await {
                Ok(line) => line,
                Err(_) => {
                    let error = RpcError::new(
                        code::INVALID_REQUEST,
                        "no initialize within the handshake timeout; closing",
                    );
                    connection.respond(Response::err(Value::Null, error)).await;
                    break;
                }
            }
        };
        let bytes = match next {
            Ok(Line::Text(bytes)) => bytes,
            Ok(Line::TooLong) => {
                let error = RpcError::new(
                    code::INVALID_REQUEST,
                    format!("line longer than {MAX_LINE} bytes; ignored"),
                );
                connection.respond(Response::err(Value::Null, error)).await;
                continue;
            }
            Ok(Line::Closed) | Err(_) => break,
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let request: Request = match serde_json::from_slice::<Value>(&bytes) {
            Err(error) => {
                let error = RpcError::new(code::PARSE_ERROR, format!("not JSON: {error}"));
                connection.respond(Response::err(Value::Null, error)).await;
                continue;
            }
            Ok(value) => {
                let id = value.get("id").cloned().unwrap_or(Value::Null);
                match serde_json::from_value::<Request>(value) {
                    Ok(request) if request.jsonrpc == "2.0" => request,
                    Ok(_) => {
                        let error = RpcError::new(code::INVALID_REQUEST, "jsonrpc must be \"2.0\"");
                        connection.respond(Response::err(id, error)).await;
                        continue;
                    }
                    Err(error) => {
                        let error =
                            RpcError::new(code::INVALID_REQUEST, format!("not a request: {error}"));
                        connection.respond(Response::err(id, error)).await;
                        continue;
                    }
                }
            }
        };
        if request.method == "initialize" {
            // Inline, so that the next line is read knowing whether the handshake is done.
            let result = handle(&connection, &request).await;
            if let Some(id) = request.id.clone() {
                let response = match result {
                    Ok(value) => Response::ok(id, value),
                    Err(error) => Response::err(id, error),
                };
                connection.respond(response).await;
            }
            continue;
        }
        let connection = connection.clone();
        actix::spawn(async move {
            let id = request.id.clone();
            let result = handle(&connection, &request).await;
            // Notifications (no id) get no answer, as JSON-RPC says.
            if let Some(id) = id {
                let response = match result {
                    Ok(value) => Response::ok(id, value),
                    Err(error) => Response::err(id, error),
                };
                connection.respond(response).await;
            }
        });
    }
    drop(connection);
    // The writer ends when the last queued line is written and every sender is gone.
    let _ = writer.await;
}

/// One request: the handshake and subscriptions here, everything else in [`methods`].
async fn handle(connection: &Rc<Connection>, request: &Request) -> Result<Value, RpcError> {
    let params = &request.params;
    match request.method.as_str() {
        "initialize" => {
            let protocol = params.get("protocol").and_then(Value::as_u64);
            if protocol != Some(PROTOCOL_VERSION as u64) {
                return Err(RpcError::new(
                    code::VERSION_MISMATCH,
                    format!(
                        "protocol version {} is not supported; this daemon speaks {PROTOCOL_VERSION} (corral {})",
                        protocol.map(|v| v.to_string()).unwrap_or_else(|| "(none)".into()),
                        env!("CARGO_PKG_VERSION")
                    ),
                )
                .with_data(json!({ "protocol": PROTOCOL_VERSION })));
            }
            *connection.exec_id.borrow_mut() = params
                .get("exec_id")
                .and_then(Value::as_str)
                .map(str::to_string);
            connection.initialized.set(true);
            Ok(json!({
                "protocol": PROTOCOL_VERSION,
                "corral_version": env!("CARGO_PKG_VERSION"),
                "daemon_pid": std::process::id(),
                "home": connection.context.home.to_string_lossy(),
            }))
        }
        _ if !connection.initialized.get() => Err(RpcError::new(
            code::VERSION_MISMATCH,
            "call initialize first (the version handshake)",
        )),
        "events.subscribe" => subscribe(connection, params).await,
        "events.unsubscribe" => {
            let id = params
                .get("subscription")
                .and_then(Value::as_u64)
                .ok_or_else(|| {
                    RpcError::new(
                        code::INVALID_PARAMS,
                        "subscription is required (the number events.subscribe answered)",
                    )
                })?;
            match connection.subscriptions.borrow_mut().remove(&id) {
                Some(task) => {
                    task.abort();
                    Ok(json!({ "unsubscribed": id }))
                }
                None => Err(RpcError::new(
                    code::NOT_FOUND,
                    format!("no subscription {id}"),
                )),
            }
        }
        method => methods::call(connection, method, params).await,
    }
}

/// `events.subscribe {session, after}`: replays the stored events after `after`, then streams
/// live ones, in order, with no gap and no repeat.
async fn subscribe(connection: &Rc<Connection>, params: &Value) -> Result<Value, RpcError> {
    let selector = params
        .get("session")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "session is required"))?;
    let after = match params.get("after") {
        None | Some(Value::Null) => 0,
        Some(after) => after.as_i64().filter(|after| *after >= 0).ok_or_else(|| {
            RpcError::new(
                code::INVALID_PARAMS,
                format!("after must be an event sequence number (an integer >= 0), not {after}"),
            )
        })?,
    };
    let session = methods::resolve_session(&connection.context.corral, selector)?;
    let id = connection.context.next_subscription.get();
    connection.context.next_subscription.set(id + 1);
    // Listen before reading the store: an event committed in between is seen twice at most,
    // and the sequence numbers drop the repeat.
    let live = connection.context.corral.subscribe();
    let forwarding = forward(
        connection.context.corral.clone(),
        connection.out.clone(),
        live,
        session.id.clone(),
        id,
        after,
    );
    // A subscription that ends by itself (lagged, the client gone) leaves the connection's
    // table: `events.unsubscribe` then says it is unknown, and nothing is kept for it.
    let owner = Rc::downgrade(connection);
    let task = actix::spawn(async move {
        forwarding.await;
        if let Some(connection) = owner.upgrade() {
            connection.subscriptions.borrow_mut().remove(&id);
        }
    });
    // (The task has not run yet: it is spawned on this thread, which has not yielded.)
    connection.subscriptions.borrow_mut().insert(id, task);
    Ok(json!({ "subscription": id, "session": session.id, "after": after }))
}

async fn forward(
    corral: Corral,
    out: mpsc::Sender<String>,
    mut live: broadcast::Receiver<std::sync::Arc<crate::actors::supervisor::Published>>,
    session_id: String,
    subscription: u64,
    after: i64,
) {
    // The event's JSON text is made once for every subscriber (see `Published`).
    let notify_json = |event: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"events.event","params":{{"subscription":{subscription},"event":{event}}}}}"#
        )
    };
    let notify =
        |event: &work::Event| notify_json(&serde_json::to_string(event).expect("events serialize"));
    let lagged = |resume_after: i64| {
        serde_json::to_string(&Notification::new(
            "events.lagged",
            json!({ "subscription": subscription, "session": session_id, "resume_after": resume_after }),
        ))
        .expect("notices serialize")
    };
    let mut last = after;
    // Replay what is stored.
    loop {
        let page = match corral.read(|c| work::events_after(c, &session_id, last, REPLAY_PAGE)) {
            Ok(page) => page,
            Err(_) => return,
        };
        for event in &page {
            if out.send(notify(event)).await.is_err() {
                return;
            }
            last = event.seq;
        }
        if page.len() < REPLAY_PAGE {
            break;
        }
    }
    // Then what happens.
    loop {
        match live.recv().await {
            Ok(event) if event.session_id == session_id && event.seq > last => {
                // Waiting here holds only this subscription: the session publishes into the
                // broadcast buffer and never waits for us.
                if out.send(notify_json(event.json())).await.is_err() {
                    return;
                }
                last = event.seq;
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => {
                let _ = out.send(lagged(last)).await;
                return;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}
