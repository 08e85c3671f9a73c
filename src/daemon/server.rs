//! One connection to the daemon: framing, the handshake, the peer check, per-peer bounds,
//! subscriptions.
//!
//! Reading: lines of at most [`MAX_LINE`] bytes; a longer one is answered with an error and
//! skipped to its end (never buffered); invalid UTF-8 or JSON is a parse error; an `id` that is
//! not a string, a number or null is an invalid request; nothing a client sends stops the
//! daemon or the other connections. A client must `initialize` within [`HANDSHAKE_TIMEOUT`]
//! (a connection that sends nothing holds nothing for long).
//!
//! The handshake is decided in line order: the reader handles `initialize` itself before it
//! reads the next line, and refuses any other request read while the connection is not
//! initialized, so nothing sent before a successful `initialize` ever runs, however the lines
//! were split into writes.
//!
//! Bounds per connection, so that a client that writes and never reads holds a few MiB of the
//! daemon and no more: requests run as tasks of their own (a long `prompt.wait` does not hold
//! the others), but at most [`IN_FLIGHT_BYTES`] of them at once, each counted for its line's
//! length and at least [`REQUEST_COST`]; when that budget is spent the reader stops reading
//! the socket until answers drain (the kernel's buffer then fills and the client's writes
//! wait). Every answer and notification goes through one queue of at most [`OUTBOUND_BYTES`]
//! drained by a writer task; a task whose answer does not fit waits, holding its permit. At
//! most [`MAX_SUBSCRIPTIONS`] subscriptions.
//!
//! A subscription forwards one session's events, or every session's, to the client's queue:
//! the stored ones after its cursor, then the supervisor's broadcast (a bounded buffer the
//! sessions publish into without ever waiting), through `daemon::events::event_stream`, the
//! stream every transport serves. A client that falls more than that buffer behind gets an
//! `events.lagged` notice with the cursor to resume from, and the subscription ends — a slow
//! reader never blocks a session.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::events::{event_stream, EventStream, Scope, StreamItem};
use super::methods::{self, Caller, Transport};
use crate::protocol::{
    code, Id, InitializeResult, Notification, Request, Response, RpcError, MAX_LINE,
    PROTOCOL_VERSION,
};
use crate::Corral;

/// How long a new connection may take to send `initialize`.
/// `CORRAL_HANDSHAKE_TIMEOUT_MS` overrides it (tests).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The budget of one connection's requests in flight (read, not yet answered into the
/// outbound queue), in bytes of their lines.
pub const IN_FLIGHT_BYTES: usize = 4 << 20;

/// What a request counts for at least (its task, its parsed params, its answer): so a
/// connection has at most 64 small requests in flight, or 4 of [`MAX_LINE`].
pub const REQUEST_COST: usize = 64 << 10;

/// Bytes of lines waiting to be written to one client. A line longer than that (a long
/// history) waits for the queue to be empty and then holds it alone.
pub const OUTBOUND_BYTES: usize = 1 << 20;

/// What a queued line counts for besides its bytes (its place in the queue).
const LINE_OVERHEAD: usize = 64;

/// Subscriptions one connection may hold at once.
pub const MAX_SUBSCRIPTIONS: usize = 64;

/// The writer's buffer: answers written in one burst leave in few syscalls.
const WRITE_BUFFER: usize = 64 << 10;

/// What every connection shares.
pub struct DaemonContext {
    pub corral: Corral,
    pub home: PathBuf,
    /// The daemon's phase: the accept loop, the methods and whoever asks for a stop share it.
    pub shutdown: super::shutdown::Shutdown,
    next_subscription: Cell<u64>,
}

impl DaemonContext {
    pub fn new(corral: Corral, home: PathBuf) -> Self {
        DaemonContext {
            corral,
            home,
            shutdown: super::shutdown::Shutdown::new(),
            next_subscription: Cell::new(1),
        }
    }

    /// Whether the daemon is draining or stopping (no new prompts).
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.phase() != super::shutdown::Phase::Running
    }
}

/// What one connection knows about its client: the [`Caller`] the methods see (its peer
/// pid from `SO_PEERCRED`, its exec from `initialize`), and the connection's own state.
pub struct Connection {
    pub caller: Caller,
    /// Set by a successful `initialize`.
    pub initialized: Cell<bool>,
    out: Outbound,
    subscriptions: RefCell<HashMap<u64, tokio::task::JoinHandle<()>>>,
}

/// A connection reads as its caller (`connection.context`, `connection.peer_pid`).
impl std::ops::Deref for Connection {
    type Target = Caller;

    fn deref(&self) -> &Caller {
        &self.caller
    }
}

impl Connection {
    async fn respond(&self, response: Response) {
        let line = serde_json::to_string(&response).expect("responses serialize");
        self.out.send(line).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        for (_, task) in self.subscriptions.borrow_mut().drain() {
            task.abort();
        }
    }
}

/// The queue of lines to one client, bounded in bytes ([`OUTBOUND_BYTES`]): a sender waits
/// for room; the writer gives the room back once a line is written.
#[derive(Clone)]
struct Outbound {
    lines: mpsc::UnboundedSender<(String, OwnedSemaphorePermit)>,
    room: Arc<Semaphore>,
}

impl Outbound {
    fn cost(line: &str) -> u32 {
        (line.len() + LINE_OVERHEAD).min(OUTBOUND_BYTES) as u32
    }

    /// Queues a line, waiting for room; `false` when the client is gone.
    async fn send(&self, line: String) -> bool {
        match self
            .room
            .clone()
            .acquire_many_owned(Self::cost(&line))
            .await
        {
            Ok(permit) => self.lines.send((line, permit)).is_ok(),
            Err(_) => false,
        }
    }

    /// Queues a line if there is room now; `false` otherwise.
    fn try_send(&self, line: String) -> bool {
        match self.room.clone().try_acquire_many_owned(Self::cost(&line)) {
            Ok(permit) => self.lines.send((line, permit)).is_ok(),
            Err(_) => false,
        }
    }
}

fn handshake_timeout() -> Duration {
    std::env::var(crate::env::HANDSHAKE_TIMEOUT_MS)
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

/// The members of a request, each kept as its JSON text until it is checked.
#[derive(Deserialize)]
#[serde(expecting = "a JSON-RPC request object")]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<&'a RawValue>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
}

/// A member that is there, even as `null` (`Option`'s own impl reads null as absent).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// What a JSON value is, for error messages (never the value itself when it is long).
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() <= 32 => format!("the string {value}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// Reads a line as a request: `Err` is the answer to give instead (with the id to give it,
/// null when the line's id could not be read or is not a string, a number or null).
fn parse_request(bytes: &[u8]) -> Result<Request, (Id, RpcError)> {
    let invalid = |id: Id, message: String| (id, RpcError::new(code::INVALID_REQUEST, message));
    // Syntax first, over the whole line: text that is not JSON is a parse error.
    let raw: &RawValue = serde_json::from_slice(bytes).map_err(|error| {
        (
            Id::null(),
            RpcError::new(code::PARSE_ERROR, format!("not JSON: {error}")),
        )
    })?;
    if !raw.get().starts_with('{') {
        let what = if raw.get().starts_with('[') {
            "an array (batches are not supported)"
        } else {
            "not an object"
        };
        return Err(invalid(
            Id::null(),
            format!("not a request: a request is a JSON object; this is {what}"),
        ));
    }
    let envelope: Envelope = serde_json::from_str(raw.get())
        .map_err(|error| invalid(Id::null(), format!("not a request: {error}")))?;
    let id = match envelope.id {
        None => None,
        Some(raw) => {
            let id = Id::from(raw.to_owned());
            if !id.is_valid() {
                let kind = serde_json::from_str::<Value>(raw.get())
                    .map(|value| describe(&value))
                    .unwrap_or_default();
                return Err(invalid(
                    Id::null(),
                    format!("id must be a string, a number or null, not {kind}"),
                ));
            }
            Some(id)
        }
    };
    let answer_id = || id.clone().unwrap_or_else(Id::null);
    let text =
        |raw: Option<&RawValue>| raw.and_then(|raw| serde_json::from_str::<String>(raw.get()).ok());
    if text(envelope.jsonrpc).as_deref() != Some("2.0") {
        return Err(invalid(answer_id(), "jsonrpc must be \"2.0\"".into()));
    }
    let method = match (envelope.method, text(envelope.method)) {
        (_, Some(method)) => method,
        (None, _) => {
            return Err(invalid(
                answer_id(),
                "not a request: missing field `method`".into(),
            ))
        }
        (Some(_), None) => return Err(invalid(answer_id(), "method must be a string".into())),
    };
    let params = match envelope.params {
        None => Value::Null,
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|error| invalid(answer_id(), format!("params: {error}")))?,
    };
    if !matches!(params, Value::Null | Value::Object(_) | Value::Array(_)) {
        return Err(invalid(
            answer_id(),
            format!(
                "params must be an object (or an array), not {}",
                describe(&params)
            ),
        ));
    }
    Ok(Request {
        jsonrpc: "2.0".into(),
        id,
        method,
        params,
    })
}

/// Why a peer is refused before anything is read from it, if it is: `peer_uid` is its uid
/// from `SO_PEERCRED`, or why that could not be read.
pub fn peer_refusal(own_uid: u32, peer_uid: &std::io::Result<u32>) -> Option<RpcError> {
    match peer_uid {
        Ok(uid) if *uid == own_uid => None,
        Ok(uid) => Some(
            RpcError::new(
                code::PEER_REFUSED,
                format!(
                    "refused: this daemon serves uid {own_uid} only, and this connection is uid {uid}"
                ),
            )
            .with_data(json!({ "uid": uid, "daemon_uid": own_uid })),
        ),
        Err(error) => Some(RpcError::new(
            code::PEER_REFUSED,
            format!("refused: the daemon cannot read this connection's credentials ({error})"),
        )),
    }
}

/// The line that tells a client why it is not served, then the connection closes.
pub fn refusal_line(error: RpcError) -> String {
    let mut line =
        serde_json::to_string(&Response::err(Id::null(), error)).expect("responses serialize");
    line.push('\n');
    line
}

/// Writes `line` to a client the daemon will not serve, without waiting for it (the line is
/// far smaller than a socket buffer), and closes the connection.
pub fn refuse(stream: UnixStream, line: &str) {
    let _ = stream.try_write(line.as_bytes());
    if let Ok(stream) = stream.into_std() {
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
}

/// What the reader does after a line.
enum Next {
    Read,
    Stop,
}

/// Serves one connection until the client leaves.
pub async fn serve(stream: UnixStream, context: Rc<DaemonContext>) {
    // SO_PEERCRED: only our own user may drive our agents.
    let peer = match crate::socket::check_peer(&stream) {
        Ok(peer) => peer,
        Err(refusal) => {
            match &refusal {
                crate::socket::Refusal::OtherUser { uid, pid, .. } => {
                    tracing::warn!(peer_uid = uid, pid = ?pid, "refused a client of another user")
                }
                crate::socket::Refusal::Unreadable(error) => {
                    tracing::warn!(%error, "refused a client whose credentials cannot be read")
                }
            }
            let error = peer_refusal(refusal.own_uid(), &refusal.peer_uid())
                .expect("a refused peer is refused");
            refuse(stream, &refusal_line(error));
            return;
        }
    };
    let (read, write) = stream.into_split();
    let (lines, mut queued) = mpsc::unbounded_channel::<(String, OwnedSemaphorePermit)>();
    let room = Arc::new(Semaphore::new(OUTBOUND_BYTES));
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT_BYTES));
    let writer = {
        let (room, in_flight) = (room.clone(), in_flight.clone());
        actix::spawn(async move {
            let mut write = BufWriter::with_capacity(WRITE_BUFFER, write);
            while let Some((line, permit)) = queued.recv().await {
                let written = async {
                    write.write_all(line.as_bytes()).await?;
                    write.write_all(b"\n").await?;
                    if queued.is_empty() {
                        write.flush().await?;
                    }
                    std::io::Result::Ok(())
                };
                if written.await.is_err() {
                    break;
                }
                drop(permit);
            }
            // The client is gone (or every sender is): whoever waits for room or for a
            // request permit stops waiting.
            room.close();
            in_flight.close();
        })
    };
    let connection = Rc::new(Connection {
        caller: Caller::new(context, peer.pid(), Transport::Socket),
        initialized: Cell::new(false),
        out: Outbound { lines, room },
        subscriptions: RefCell::new(HashMap::new()),
    });
    let mut reader = BufReader::new(read);
    let handshake_deadline = tokio::time::Instant::now() + handshake_timeout();
    let mut timed_out = false;
    loop {
        let step = serve_line(&connection, &mut reader, &in_flight);
        let next = if connection.initialized.get() {
            step.await
        } else {
            // One deadline from the accept, over reading and answering alike: talking
            // without initializing does not extend it, nor does not reading the answers.
            match tokio::time::timeout_at(handshake_deadline, step).await {
                Ok(next) => next,
                Err(_) => {
                    let error = RpcError::new(
                        code::INVALID_REQUEST,
                        "no initialize within the handshake timeout; closing",
                    );
                    let line = serde_json::to_string(&Response::err(Id::null(), error))
                        .expect("responses serialize");
                    connection.out.try_send(line);
                    timed_out = true;
                    Next::Stop
                }
            }
        };
        if let Next::Stop = next {
            break;
        }
    }
    drop(reader);
    drop(connection);
    // The writer ends when the last queued line is written and every sender is gone. A
    // client that never initialized gets a moment to read why it is closed, no more: one that
    // does not read at all would hold the writer, and the connection, forever.
    let mut writer = writer;
    if timed_out {
        if tokio::time::timeout(CLOSING_GRACE, &mut writer)
            .await
            .is_err()
        {
            writer.abort();
        }
    } else {
        let _ = writer.await;
    }
}

/// How long a client closed for not initializing has to read what was written to it.
const CLOSING_GRACE: Duration = Duration::from_secs(1);

/// Reads one line and answers it, or starts its task.
async fn serve_line<R: AsyncBufReadExt + Unpin>(
    connection: &Rc<Connection>,
    reader: &mut R,
    in_flight: &Arc<Semaphore>,
) -> Next {
    // The least a request counts for, taken before reading: with the budget spent, the
    // socket is not read at all until an answer drains.
    let mut permit = match in_flight
        .clone()
        .acquire_many_owned(REQUEST_COST as u32)
        .await
    {
        Ok(permit) => permit,
        Err(_) => return Next::Stop,
    };
    let bytes = match read_line(reader).await {
        Ok(Line::Text(bytes)) => bytes,
        Ok(Line::TooLong) => {
            let error = RpcError::new(
                code::INVALID_REQUEST,
                format!("line longer than {MAX_LINE} bytes; ignored"),
            );
            connection.respond(Response::err(Id::null(), error)).await;
            return Next::Read;
        }
        Ok(Line::Closed) | Err(_) => return Next::Stop,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Next::Read;
    }
    let extra = bytes.len().saturating_sub(REQUEST_COST);
    let request = match parse_request(&bytes) {
        Ok(request) => request,
        Err((id, error)) => {
            connection.respond(Response::err(id, error)).await;
            return Next::Read;
        }
    };
    drop(bytes);
    if request.method == "initialize" {
        // Here, not in a task: the next line is read knowing whether the handshake is done.
        let result = initialize(connection, &request.params);
        if let Some(id) = request.id {
            connection.respond(Response::from_result(id, result)).await;
        }
        return Next::Read;
    }
    if !connection.initialized.get() {
        // Decided now, in line order: a request read before `initialize` succeeded never
        // runs, whatever `initialize` does later. A notification gets no answer.
        if let Some(id) = request.id {
            let error = RpcError::new(
                code::VERSION_MISMATCH,
                "call initialize first (the version handshake)",
            );
            connection.respond(Response::err(id, error)).await;
        }
        return Next::Read;
    }
    if extra > 0 {
        match in_flight.clone().acquire_many_owned(extra as u32).await {
            Ok(more) => permit.merge(more),
            Err(_) => return Next::Stop,
        }
    }
    let connection = connection.clone();
    actix::spawn(async move {
        let Request {
            id, method, params, ..
        } = request;
        let result = match CatchUnwind(Box::pin(handle(&connection, &method, &params))).await {
            Ok(result) => result,
            Err(()) => {
                tracing::error!(%method, "a request panicked; answered with an internal error");
                Err(RpcError::new(
                    code::INTERNAL,
                    format!("internal error: the daemon hit a bug in {method}; it goes on serving"),
                ))
            }
        };
        // The request is done with: only its answer waits for room in the queue.
        drop(params);
        // Notifications (no id) get no answer, as JSON-RPC says.
        if let Some(id) = id {
            connection.respond(Response::from_result(id, result)).await;
        }
        drop(permit);
    });
    Next::Read
}

/// A request's future, with a panic turned into `Err(())` (the panic hook has logged it):
/// a method's bug ends its request, never the connection or the daemon. The HTTP bridge
/// wraps its calls in it too.
pub(crate) struct CatchUnwind<F>(pub(crate) Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

/// `initialize {protocol, client, exec_id}`: the version handshake. A refused one leaves the
/// connection as it was; the client may try again.
fn initialize(connection: &Connection, params: &Value) -> Result<Value, RpcError> {
    let speaks = format!(
        "this daemon speaks {PROTOCOL_VERSION} (corral {})",
        env!("CARGO_PKG_VERSION")
    );
    let refused = |code: i64, message: String| {
        RpcError::new(code, message).with_data(json!({ "protocol": PROTOCOL_VERSION }))
    };
    let empty = Map::new();
    let params = match params {
        Value::Object(params) => params,
        Value::Null => &empty,
        other => {
            return Err(refused(
                code::INVALID_PARAMS,
                format!(
                    "initialize takes an object ({{\"protocol\": {PROTOCOL_VERSION}, …}}), not {}; {speaks}",
                    describe(other)
                ),
            ))
        }
    };
    match params.get("protocol") {
        None | Some(Value::Null) => {
            return Err(refused(
                code::INVALID_PARAMS,
                format!("protocol is required: the integer version the client speaks; {speaks}"),
            ))
        }
        Some(Value::Number(n)) if n.as_u64() == Some(PROTOCOL_VERSION as u64) => {}
        Some(Value::Number(n)) => {
            return Err(refused(
                code::VERSION_MISMATCH,
                format!("protocol version {n} is not supported; {speaks}"),
            ))
        }
        Some(other) => {
            return Err(refused(
                code::INVALID_PARAMS,
                format!(
                    "protocol must be an integer, not {}; {speaks}",
                    describe(other)
                ),
            ))
        }
    }
    let text = |name: &str, limit: usize| -> Result<Option<String>, RpcError> {
        match params.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if text.len() <= limit => Ok(Some(text.clone())),
            Some(Value::String(_)) => Err(RpcError::new(
                code::INVALID_PARAMS,
                format!("{name} is at most {limit} bytes"),
            )),
            Some(other) => Err(RpcError::new(
                code::INVALID_PARAMS,
                format!("{name} must be a string, not {}", describe(other)),
            )),
        }
    };
    text("client", MAX_INITIALIZE_TEXT)?;
    let exec_id = text("exec_id", MAX_INITIALIZE_TEXT)?;
    *connection.exec_id.borrow_mut() = exec_id;
    connection.initialized.set(true);
    let result = InitializeResult {
        protocol: PROTOCOL_VERSION,
        corral_version: env!("CARGO_PKG_VERSION").into(),
        daemon_pid: std::process::id(),
        home: connection.context.home.to_string_lossy().into_owned(),
        // `prompt.send` takes the caller's `exec` and records it (a compatible addition).
        records_execs: true,
        shutting_down: connection.context.is_shutting_down(),
    };
    serde_json::to_value(result).map_err(|error| RpcError::new(code::INTERNAL, error.to_string()))
}

/// The longest `client` and `exec_id` `initialize` takes (an exec id is 36 characters).
const MAX_INITIALIZE_TEXT: usize = 256;

/// One request past the handshake: subscriptions here, everything else in [`methods`].
async fn handle(
    connection: &Rc<Connection>,
    method: &str,
    params: &Value,
) -> Result<Value, RpcError> {
    match method {
        "events.subscribe" => {
            methods::check_named(params)?;
            super::confine::confine(&connection.caller, method, params).await?;
            subscribe(connection, params).await
        }
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
        method => methods::call(&connection.caller, method, params).await,
    }
}

/// `events.subscribe {session?, after}`: replays the stored events after `after`, then streams
/// live ones, in order, with no gap and no repeat (`events::event_stream`). With `session`,
/// that session's events and `after` is its `seq`; without, every session's and `after` is
/// the daemon-wide `feed_seq`.
async fn subscribe(connection: &Rc<Connection>, params: &Value) -> Result<Value, RpcError> {
    methods::check_named(params)?;
    let selector = match params.get("session") {
        None | Some(Value::Null) => None,
        Some(Value::String(selector)) => Some(selector.as_str()),
        Some(other) => {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                format!(
                    "session must be a session selector (a string), or absent for every \
                     session's events; not {other}"
                ),
            ))
        }
    };
    let after = match params.get("after") {
        None | Some(Value::Null) => 0,
        Some(after) => after.as_i64().filter(|after| *after >= 0).ok_or_else(|| {
            RpcError::new(
                code::INVALID_PARAMS,
                format!("after must be an event sequence number (an integer >= 0), not {after}"),
            )
        })?,
    };
    let scope = match selector {
        Some(selector) => {
            Scope::Session(methods::resolve_session(&connection.context.corral, selector)?.id)
        }
        None => Scope::All,
    };
    if connection.subscriptions.borrow().len() >= MAX_SUBSCRIPTIONS {
        return Err(RpcError::new(
            code::BUSY,
            format!(
                "this connection holds {MAX_SUBSCRIPTIONS} subscriptions, the most it may; \
                 unsubscribe one first"
            ),
        ));
    }
    let id = connection.context.next_subscription.get();
    connection.context.next_subscription.set(id + 1);
    // Subscribed to the live broadcast here, before the answer: nothing committed after it is
    // missed.
    let stream = event_stream(connection.context.corral.clone(), scope.clone(), after);
    let forwarding = forward(stream, connection.out.clone(), id);
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
    Ok(json!({ "subscription": id, "session": scope.session(), "after": after }))
}

/// Writes a stream's items to the client as `events.event` and `events.lagged`
/// notifications. Waiting for room in the client's queue holds only this subscription: the
/// sessions publish into the broadcast buffer and never wait for it.
async fn forward(mut stream: EventStream, out: Outbound, subscription: u64) {
    while let Some(item) = stream.next().await {
        let line = match item {
            // The event's JSON text is made once for every subscriber (see `Published`).
            StreamItem::Event(event) => format!(
                r#"{{"jsonrpc":"2.0","method":"events.event","params":{{"subscription":{subscription},"event":{}}}}}"#,
                event.json()
            ),
            StreamItem::Lagged { resume_after } => serde_json::to_string(&Notification::new(
                "events.lagged",
                json!({
                    "subscription": subscription,
                    "session": stream.scope().session(),
                    "resume_after": resume_after,
                }),
            ))
            .expect("notices serialize"),
        };
        if !out.send(line).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(line: &str) -> Result<Option<String>, (String, i64)> {
        parse_request(line.as_bytes())
            .map(|request| request.id.map(|id| id.text().to_string()))
            .map_err(|(id, error)| (id.text().to_string(), error.code))
    }

    #[test]
    fn ids_are_kept_as_written() {
        for id in [
            r#""x""#,
            r#""""#,
            r#""\u00e9\n""#,
            "0",
            "-1",
            "18446744073709551617",
            "-9223372036854775809",
            "1.50",
            "1e400",
            "null",
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"status"}}"#);
            assert_eq!(id_of(&line), Ok(Some(id.to_string())), "{line}");
            let response = serde_json::to_string(&Response::ok(
                parse_request(line.as_bytes()).unwrap().id.unwrap(),
                json!(1),
            ))
            .unwrap();
            assert_eq!(
                response,
                format!(r#"{{"jsonrpc":"2.0","id":{id},"result":1}}"#)
            );
        }
        // Whitespace around the id is not part of it.
        assert_eq!(
            id_of("{\"jsonrpc\":\"2.0\",\"id\":\n 7 ,\"method\":\"status\"}"),
            Ok(Some("7".into()))
        );
        // No id member: a notification.
        assert_eq!(id_of(r#"{"jsonrpc":"2.0","method":"status"}"#), Ok(None));
    }

    #[test]
    fn ids_of_other_types_are_invalid_requests_answered_with_a_null_id() {
        for id in ["{}", r#"{"a":1}"#, "[]", "[1]", "true", "false"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"status"}}"#);
            assert_eq!(
                id_of(&line),
                Err(("null".into(), code::INVALID_REQUEST)),
                "{line}"
            );
        }
        // Two ids: which one would the answer carry?
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"status"}"#),
            Err(("null".into(), code::INVALID_REQUEST))
        );
    }

    #[test]
    fn lines_that_are_not_requests() {
        let cases = [
            // Not JSON.
            (r#"{"jsonrpc":"2.0","id":1"#, "null", code::PARSE_ERROR),
            ("[1,", "null", code::PARSE_ERROR),
            // JSON, but not a request object.
            ("5", "null", code::INVALID_REQUEST),
            (r#""status""#, "null", code::INVALID_REQUEST),
            (
                r#"[{"jsonrpc":"2.0","id":1,"method":"status"}]"#,
                "null",
                code::INVALID_REQUEST,
            ),
            // A request object with a bad member: answered with its id.
            (
                r#"{"jsonrpc":"1.0","id":3,"method":"status"}"#,
                "3",
                code::INVALID_REQUEST,
            ),
            (r#"{"id":3,"method":"status"}"#, "3", code::INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":3}"#, "3", code::INVALID_REQUEST),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":7}"#,
                "3",
                code::INVALID_REQUEST,
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"status","params":5}"#,
                "3",
                code::INVALID_REQUEST,
            ),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"status","params":"x"}"#,
                "3",
                code::INVALID_REQUEST,
            ),
        ];
        for (line, id, expected) in cases {
            assert_eq!(id_of(line), Err((id.to_string(), expected)), "{line}");
        }
        // Params may be absent, null, an object or an array.
        for params in [
            "",
            r#","params":null"#,
            r#","params":{}"#,
            r#","params":[1]"#,
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"status"{params}}}"#);
            assert!(parse_request(line.as_bytes()).is_ok(), "{line}");
        }
    }

    #[test]
    fn a_peer_of_another_uid_is_told_why_in_one_line() {
        assert!(peer_refusal(1000, &Ok(1000)).is_none());
        let line = refusal_line(peer_refusal(1000, &Ok(65534)).expect("refused"));
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line:?}"
        );
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["id"], Value::Null);
        assert_eq!(answer["error"]["code"], code::PEER_REFUSED);
        assert_eq!(
            answer["error"]["message"],
            "refused: this daemon serves uid 1000 only, and this connection is uid 65534"
        );
        let unreadable = Err(std::io::Error::other("no credentials"));
        let answer = peer_refusal(1000, &unreadable).expect("refused");
        assert!(
            answer.message.contains("no credentials"),
            "{}",
            answer.message
        );
    }
}
