//! `corral connect SESSION --socket PATH`: serve codex's app-server protocol on a Unix socket,
//! so that a person's own Codex client can attach to a supervised session's thread.
//!
//! The socket speaks what `codex app-server` speaks on stdio (codex
//! 0.171.0): one JSON object per line, no `"jsonrpc"` field, `{"id":N,"result":…}` answers,
//! `{"error":{…},"id":N}` refusals and notifications with `"emittedAtMs"`. Behind it is the
//! daemon: each native connection is an exec of its own (a row in the ledger whose parent is
//! this process's exec, completed when the connection closes), with its own daemon client
//! initialized as that exec, so each connection is a driver identity of its own.
//!
//! - Every connection, once initialized, receives the thread's notifications: the session's
//!   events (`events.subscribe` from the session's end; after `events.lagged` the stream
//!   resubscribes, nothing lost) translated by [`Translator`]. The turn id is the corral
//!   prompt id, the thread id the session's thread (the session id until it has one).
//! - Writes (`turn/start`, `turn/steer`, `turn/interrupt`) need the session's driver claim:
//!   a connection claims it (never taking it over) before its first write. While another live
//!   exec drives, the write is refused naming that exec; once the claim was taken over
//!   (`superseded`), every later write is refused naming the new driver, and the connection
//!   goes on receiving notifications.
//! - SIGINT/SIGTERM: stop accepting, close every connection (releasing its claim, completing
//!   its exec), remove the socket, exit 130/143.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};

use super::remote::{self, EventStream, Interrupts};
use super::{CliError, Context, Exit};
use crate::actors::ledger::{CompleteExec, RecordExec};
use crate::client::{Client, ClientError};
use crate::events::EventKind;
use crate::protocol::{
    code, CancelParams, ClaimParams, DriverClaim, DriverShow, History, Method, ProjectSelector,
    ProjectShow, PromptCancel, PromptSend, RpcError, SendParams, SessionSelector, SessionShow,
    SessionSteer, SteerParams, MAX_LINE,
};
use crate::store::events::Event;
use crate::store::exec::{ExecCompletion, NewExec, Outcome};
use crate::store::now_ms;

#[derive(Debug, clap::Args)]
pub struct ConnectArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// The Unix socket to serve the app-server protocol on (created with mode 0600).
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
}

/// Lines read from a native client and not yet handled.
const INCOMING: usize = 16;

/// How long a connection may take to close (release, complete its exec) at shutdown.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

pub async fn execute(context: &Context, args: &ConnectArgs) -> Result<Exit, CliError> {
    check_path(&args.socket)?;
    let mut interrupts = Interrupts::watch();
    let mut client = tokio::select! {
        client = remote::connect(context) => client?,
        signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
    };
    let session = tokio::select! {
        session = remote::session(&mut client, &args.session) => session?,
        signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
    };
    drop(client);
    let listener = bind(&args.socket)?;
    // Only the socket file this process made is removed at the end.
    let identity = std::fs::symlink_metadata(&args.socket)
        .map(|meta| (meta.dev(), meta.ino()))
        .ok();
    let shown = std::path::absolute(&args.socket).unwrap_or_else(|_| args.socket.clone());
    println!(
        "corral: serving session {} on {} (codex app-server protocol; Ctrl-C to stop)",
        session.id,
        shown.display()
    );
    let cwd = std::env::current_dir().ok();
    let shared = Rc::new(ServedSession {
        context: copy_context(context, &context.invocation.id),
        selector: args.session.clone(),
        session_id: session.id.clone(),
        cwd: cwd.as_ref().map(|dir| dir.to_string_lossy().into_owned()),
        repo: cwd.as_deref().and_then(crate::repo::toplevel_text),
    });
    let (stop, stopped) = watch::channel(false);
    let mut connections: Vec<tokio::task::JoinHandle<()>> = Vec::new();
    let mut number = 0u64;
    let signal = loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    if !same_user(&stream) {
                        continue;
                    }
                    number += 1;
                    connections.retain(|task| !task.is_finished());
                    connections.push(tokio::task::spawn_local(connection(
                        shared.clone(),
                        number,
                        stream,
                        stopped.clone(),
                    )));
                }
                Err(error) => {
                    say!("corral: accepting on {}: {error}", shown.display());
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            },
            signal = interrupts.recv() => break signal,
        }
    };
    drop(listener);
    let _ = stop.send(true);
    let closing = async {
        for task in connections {
            let _ = task.await;
        }
    };
    if tokio::time::timeout(CLOSE_GRACE, closing).await.is_err() {
        say!("corral: some native connections did not close in time");
    }
    let still_ours = std::fs::symlink_metadata(&args.socket)
        .map(|meta| Some((meta.dev(), meta.ino())) == identity)
        .unwrap_or(false);
    if still_ours {
        let _ = std::fs::remove_file(&args.socket);
    }
    Ok(Exit::interrupted(signal))
}

/// Refuses a path that does not fit in `sun_path`.
fn check_path(path: &Path) -> Result<(), CliError> {
    crate::socket::check_path(path)
        .map_err(|error| CliError::failure(format!("{error} (choose a shorter path)")))?;
    if path.as_os_str().is_empty() {
        return Err(CliError::usage("the socket path is empty"));
    }
    Ok(())
}

/// Binds the socket (mode 0600). A socket file nobody listens on is replaced; a live one, or
/// a file that is not a socket, is never touched.
fn bind(path: &Path) -> Result<UnixListener, CliError> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(CliError::failure(format!(
                "{} exists and is not a socket; not replacing it",
                path.display()
            )));
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(CliError::failure(format!(
                    "another process listens on {}; not taking it over",
                    path.display()
                )))
            }
            Err(_) => std::fs::remove_file(path).map_err(|error| {
                CliError::failure(format!(
                    "cannot remove the stale socket {}: {error}",
                    path.display()
                ))
            })?,
        }
    }
    // Mode 0600 from the moment the path exists, without touching the umask (src/socket.rs).
    crate::socket::bind_private(path).map_err(|error| CliError::failure(error.to_string()))
}

/// SO_PEERCRED: only our own user may drive our agents.
fn same_user(stream: &UnixStream) -> bool {
    match crate::socket::check_peer(stream) {
        Ok(_) => true,
        Err(refusal) => {
            say!("corral: refused native {refusal}");
            false
        }
    }
}

/// What every connection shares.
struct ServedSession {
    /// This process's context (its exec id is the parent of the connections' execs).
    context: Context,
    /// The session as the user named it (the connections' recorded argv).
    selector: String,
    session_id: String,
    cwd: Option<String>,
    repo: Option<String>,
}

/// A context like `context`, with `exec_id` as the invocation's id: what `remote::connect`
/// and `EventStream::open` initialize their daemon clients with.
fn copy_context(context: &Context, exec_id: &str) -> Context {
    let mut invocation = context.invocation.clone();
    invocation.id = exec_id.to_string();
    Context {
        home: context.home.clone(),
        location: context.location.clone(),
        store_path: context.store_path.clone(),
        ledger: context.ledger.clone(),
        invocation,
        no_spawn: context.no_spawn,
    }
}

/// One native connection, from accept to close: its exec row, its daemon client, the
/// protocol, and on every way out the claim released and the exec completed.
async fn connection(
    shared: Rc<ServedSession>,
    number: u64,
    stream: UnixStream,
    mut stopped: watch::Receiver<bool>,
) {
    let exec_id = uuid::Uuid::now_v7().to_string();
    let recorded = match &shared.context.ledger {
        Some(ledger) => match ledger
            .write(RecordExec(connection_exec(&shared, &exec_id, number)))
            .await
        {
            Ok(()) => true,
            Err(error) => {
                say!("corral: native connection {number}: cannot record its exec: {error}");
                return;
            }
        },
        None => false,
    };
    let context = copy_context(&shared.context, &exec_id);
    let (read, writer) = stream.into_split();
    let (sender, mut incoming) = mpsc::channel(INCOMING);
    let reader = tokio::task::spawn_local(read_lines(read, sender));
    let mut exit_code = 0;
    match remote::connect(&context).await {
        Ok(client) => {
            let mut native = Native {
                shared: shared.clone(),
                context,
                exec_id: exec_id.clone(),
                client,
                writer,
                initialized: false,
                events: None,
                claim: Claim::Unclaimed,
                info: ThreadInfo::default(),
                translator: Translator::new(&shared.session_id),
                broken: false,
            };
            tokio::select! {
                _ = native.serve(&mut incoming) => {}
                _ = stopped.wait_for(|stop| *stop) => {}
            }
            // Dropping the connection's halves closes it for the native client.
            drop(native);
        }
        Err(error) => {
            say!(
                "corral: native connection {number}: {}",
                error.message.unwrap_or_default()
            );
            exit_code = 1;
        }
    }
    reader.abort();
    release(&shared, &exec_id).await;
    if recorded {
        if let Some(ledger) = &shared.context.ledger {
            let completion = ExecCompletion {
                completed_at: now_ms(),
                exit_code,
                outcome: Outcome::of_exit_code(exit_code),
                signal: None,
            };
            if let Err(error) = ledger
                .write(CompleteExec {
                    id: exec_id,
                    completion,
                })
                .await
            {
                say!("corral: native connection {number}: cannot complete its exec: {error}");
            }
        }
    }
}

/// The exec row of native connection `number`.
fn connection_exec(shared: &ServedSession, exec_id: &str, number: u64) -> NewExec {
    let pid = std::process::id();
    NewExec {
        id: exec_id.to_string(),
        trace_id: shared.context.invocation.trace_id.clone(),
        parent_exec_id: Some(shared.context.invocation.id.clone()),
        caller_session_id: None,
        via_agent: false,
        argv: vec![
            "corral".into(),
            "connect".into(),
            shared.selector.clone(),
            "--native-connection".into(),
            number.to_string(),
        ],
        cwd: shared.cwd.clone(),
        repo: shared.repo.clone(),
        pid,
        pid_start: crate::process::start_time(pid),
        started_at: now_ms(),
        completion: None,
    }
}

/// Releases whatever claim `exec_id` holds on the session, on a fresh daemon connection (the
/// connection's own client may have been cut mid-call).
async fn release(shared: &ServedSession, exec_id: &str) {
    let Ok(mut client) = Client::connect(&shared.context.home, Some(exec_id)).await else {
        return;
    };
    let Ok(claim) = client
        .call_json::<DriverShow>(&SessionSelector::new(&shared.session_id))
        .await
    else {
        return;
    };
    if claim.get("exec_id").and_then(Value::as_str) == Some(exec_id) {
        if let Some(generation) = claim.get("generation").and_then(Value::as_i64) {
            remote::release(&mut client, &shared.session_id, generation).await;
        }
    }
}

/// What the reader of a native connection hands over.
enum Incoming {
    Line(Vec<u8>),
    TooLong,
}

/// Reads a native client's lines (at most [`MAX_LINE`] bytes each; a final line without a
/// newline counts) until it closes.
async fn read_lines(read: OwnedReadHalf, sender: mpsc::Sender<Incoming>) {
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = MAX_LINE as u64 + 1;
        let Ok(count) = (&mut reader).take(limit).read_until(b'\n', &mut line).await else {
            return;
        };
        if count == 0 {
            return;
        }
        let item = if line.last() == Some(&b'\n') || line.len() <= MAX_LINE {
            Incoming::Line(std::mem::take(&mut line))
        } else {
            // Skip the rest of the line.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                match (&mut reader)
                    .take(1 << 16)
                    .read_until(b'\n', &mut rest)
                    .await
                {
                    Ok(0) | Err(_) => return,
                    Ok(_) if rest.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
            Incoming::TooLong
        };
        if sender.send(item).await.is_err() {
            return;
        }
    }
}

/// Where a connection stands with the session's driver claim.
enum Claim {
    /// Never claimed (or refused: the next write tries again).
    Unclaimed,
    /// Holds the claim of this generation.
    Held(i64),
    /// Was taken over; the text names the driver that took it.
    Superseded(String),
}

/// What a thread object says about the session, refreshed by `thread/start`, `thread/resume`
/// and `initialize`.
#[derive(Default)]
struct ThreadInfo {
    engine: String,
    model: Option<String>,
    reasoning_effort: Option<String>,
    title: Option<String>,
    created_at: i64,
    cwd: Option<String>,
    full_access: bool,
    remote: bool,
    /// A prompt runs or waits.
    active: bool,
}

/// A native connection past its daemon handshake.
struct Native {
    shared: Rc<ServedSession>,
    /// The context as this connection's exec.
    context: Context,
    exec_id: String,
    client: Client,
    writer: OwnedWriteHalf,
    initialized: bool,
    events: Option<EventStream>,
    claim: Claim,
    info: ThreadInfo,
    translator: Translator,
    /// The daemon connection broke: the native connection ends.
    broken: bool,
}

/// Resolves with the next event, or never when there is no stream yet.
async fn next_event(events: &mut Option<EventStream>) -> Result<Event, CliError> {
    match events {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

impl Native {
    async fn serve(&mut self, incoming: &mut mpsc::Receiver<Incoming>) {
        loop {
            if self.broken {
                return;
            }
            let written = tokio::select! {
                item = incoming.recv() => match item {
                    None => return,
                    Some(Incoming::TooLong) => {
                        let refusal = error_reply(
                            &Value::Null,
                            &RpcError::new(
                                code::INVALID_REQUEST,
                                format!("line longer than {MAX_LINE} bytes; ignored"),
                            ),
                        );
                        self.send(&refusal).await
                    }
                    Some(Incoming::Line(line)) => self.handle_line(&line).await,
                },
                event = next_event(&mut self.events) => match event {
                    Ok(event) => {
                        let notifications = self.translator.translate(&event);
                        let mut written = Ok(());
                        for notification in notifications {
                            written = self.send(&notification).await;
                            if written.is_err() {
                                break;
                            }
                        }
                        written
                    }
                    Err(error) => {
                        say!(
                            "corral: a native connection's event stream ended: {}",
                            error.message.unwrap_or_default()
                        );
                        return;
                    }
                },
            };
            if written.is_err() {
                return;
            }
        }
    }

    async fn send(&mut self, message: &Value) -> std::io::Result<()> {
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await
    }

    async fn handle_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let message: Value = match serde_json::from_slice(line) {
            Ok(message) => message,
            Err(error) => {
                let refusal = RpcError::new(code::PARSE_ERROR, format!("Parse error: {error}"));
                return self.send(&error_reply(&Value::Null, &refusal)).await;
            }
        };
        let Some(object) = message.as_object() else {
            let refusal = RpcError::new(code::INVALID_REQUEST, "Invalid request: not an object");
            return self.send(&error_reply(&Value::Null, &refusal)).await;
        };
        let id = object.get("id").cloned();
        let Some(method) = object.get("method").and_then(Value::as_str) else {
            // An answer to a server request: corral connect sends none, so it is ignored.
            if object.contains_key("result") || object.contains_key("error") {
                return Ok(());
            }
            let refusal = RpcError::new(
                code::INVALID_REQUEST,
                "Invalid request: missing field `method`",
            );
            return self
                .send(&error_reply(id.as_ref().unwrap_or(&Value::Null), &refusal))
                .await;
        };
        let params = object.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = id.filter(|id| !id.is_null()) else {
            // Notifications (`initialized`, …) are accepted and need nothing.
            return Ok(());
        };
        let answer = self.request(method, &params).await;
        let reply = match answer {
            Ok(result) => json!({ "id": id, "result": result }),
            Err(error) => error_reply(&id, &error),
        };
        self.send(&reply).await
    }

    async fn request(&mut self, method: &str, params: &Value) -> Result<Value, RpcError> {
        if method == "initialize" {
            return self.initialize().await;
        }
        if !self.initialized {
            return Err(RpcError::new(code::INVALID_REQUEST, "Not initialized"));
        }
        match method {
            "thread/start" | "thread/resume" => {
                self.refresh().await?;
                Ok(self.thread_result(json!([])))
            }
            "thread/read" => {
                self.refresh().await?;
                let include = params
                    .get("includeTurns")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let turns = if include {
                    self.turns().await?
                } else {
                    json!([])
                };
                Ok(json!({ "thread": self.thread_object(turns) }))
            }
            "thread/list" => {
                self.refresh().await?;
                Ok(json!({ "data": [self.thread_object(json!([]))], "nextCursor": null }))
            }
            "turn/start" => self.turn_start(params).await,
            "turn/steer" => self.turn_steer(params).await,
            "turn/interrupt" => self.turn_interrupt(params).await,
            other => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("{other} is not served by corral connect"),
            )),
        }
    }

    async fn initialize(&mut self) -> Result<Value, RpcError> {
        if self.initialized {
            return Err(RpcError::new(code::INVALID_REQUEST, "Already initialized"));
        }
        let after = self.refresh().await?;
        let events = EventStream::open(&self.context, &self.shared.session_id, after)
            .await
            .map_err(|error| {
                RpcError::new(
                    code::INTERNAL,
                    format!(
                        "cannot follow the session's events: {}",
                        error.message.unwrap_or_default()
                    ),
                )
            })?;
        self.events = Some(events);
        self.initialized = true;
        Ok(json!({
            "userAgent": format!("corral-connect/{}", env!("CARGO_PKG_VERSION")),
            "codexHome": self.shared.context.home.to_string_lossy(),
            "platformFamily": std::env::consts::FAMILY,
            "platformOs": std::env::consts::OS,
        }))
    }

    /// A daemon call; a broken daemon connection ends the native connection too.
    async fn call<M: Method>(&mut self, params: &M::Params) -> Result<Value, RpcError> {
        match self.client.call_json::<M>(params).await {
            Ok(value) => Ok(value),
            Err(ClientError::Rpc(error)) => Err(error),
            Err(other) => {
                self.broken = true;
                Err(RpcError::new(
                    code::INTERNAL,
                    format!(
                        "the daemon connection broke: {}",
                        remote::one_line(&other.to_string())
                    ),
                ))
            }
        }
    }

    /// Reads the session and its project into `info`; returns the session's last event.
    async fn refresh(&mut self) -> Result<i64, RpcError> {
        let shown = self
            .call::<SessionShow>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        let session = &shown["session"];
        let text = |value: &Value| value.as_str().map(str::to_string);
        let active = shown["prompts"].as_array().is_some_and(|prompts| {
            prompts
                .iter()
                .any(|prompt| matches!(prompt["status"].as_str(), Some("running" | "queued")))
        });
        let mut info = ThreadInfo {
            engine: session["engine"].as_str().unwrap_or_default().to_string(),
            model: text(&session["model"]),
            reasoning_effort: text(&session["reasoning_effort"]),
            title: text(&session["title"]),
            created_at: session["created_at"].as_i64().unwrap_or_default(),
            active,
            ..ThreadInfo::default()
        };
        if let Some(project) = session["project_id"].as_str().map(str::to_string) {
            let project = self
                .call::<ProjectShow>(&ProjectSelector::new(project))
                .await?;
            info.cwd = text(&project["path"]);
            info.model = info.model.or_else(|| text(&project["model"]));
            info.full_access = project["full_access"].as_bool().unwrap_or(false);
            info.remote = project["kind"].as_str() == Some("remote");
        }
        self.info = info;
        if let Some(thread) = session["thread_id"].as_str() {
            self.translator.thread_id = Some(thread.to_string());
        }
        Ok(session["last_event_seq"].as_i64().unwrap_or(0))
    }

    fn thread_object(&self, turns: Value) -> Value {
        let info = &self.info;
        let id = self.translator.thread();
        let status = if info.active {
            json!({ "type": "active", "activeFlags": [] })
        } else {
            json!({ "type": "idle" })
        };
        json!({
            "id": id,
            "sessionId": id,
            "preview": info.title.clone().unwrap_or_default(),
            "ephemeral": false,
            "modelProvider": info.engine,
            "model": info.model,
            "reasoningEffort": info.reasoning_effort,
            "createdAt": info.created_at / 1000,
            "updatedAt": now_ms() / 1000,
            "status": status,
            "path": null,
            "cwd": info.cwd,
            "cliVersion": env!("CARGO_PKG_VERSION"),
            "source": "corral",
            "name": info.title,
            "turns": turns,
        })
    }

    fn thread_result(&self, turns: Value) -> Value {
        let info = &self.info;
        let sandbox = if info.full_access {
            json!({ "type": "dangerFullAccess" })
        } else if info.remote {
            json!({ "type": "readOnly", "networkAccess": false })
        } else {
            json!({ "type": "workspaceWrite", "writableRoots": [info.cwd], "networkAccess": false })
        };
        json!({
            "thread": self.thread_object(turns),
            "model": info.model,
            "modelProvider": info.engine,
            "cwd": info.cwd,
            "approvalPolicy": "never",
            "sandbox": sandbox,
            "reasoningEffort": info.reasoning_effort,
        })
    }

    /// The session's prompts as turns (for `thread/read` with `includeTurns`).
    async fn turns(&mut self) -> Result<Value, RpcError> {
        let history = self
            .call::<History>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        let prompts = history["prompts"].as_array().cloned().unwrap_or_default();
        let turns: Vec<Value> = prompts
            .iter()
            .map(|prompt| {
                let id = prompt["id"].as_str().unwrap_or_default();
                let mut items = vec![json!({
                    "type": "userMessage",
                    "id": format!("{id}-user"),
                    "content": [{ "type": "text", "text": prompt["text"], "text_elements": [] }],
                })];
                if let Some(answer) = prompt["answer"].as_str() {
                    items.push(json!({
                        "type": "agentMessage",
                        "id": format!("{id}-answer"),
                        "text": answer,
                    }));
                }
                let status = match prompt["status"].as_str() {
                    Some("done") => "completed",
                    Some("failed") => "failed",
                    Some("cancelled") => "interrupted",
                    _ => "inProgress",
                };
                let error = prompt["error"]
                    .as_str()
                    .map(|message| json!({ "message": message, "codexErrorInfo": null }))
                    .unwrap_or(Value::Null);
                let mut turn = turn_object(
                    id,
                    status,
                    error,
                    prompt["started_at"].as_i64(),
                    prompt["finished_at"].as_i64(),
                );
                turn["items"] = Value::Array(items);
                turn["itemsView"] = json!("full");
                turn
            })
            .collect();
        Ok(Value::Array(turns))
    }

    async fn turn_start(&mut self, params: &Value) -> Result<Value, RpcError> {
        let (text, images) = input(params)?;
        let generation = self.claim().await?;
        let sent = self
            .call::<PromptSend>(&SendParams {
                session: self.shared.session_id.clone(),
                text,
                images,
                generation: Some(generation),
                ..SendParams::default()
            })
            .await;
        match sent {
            Ok(prompt) => {
                let id = prompt["id"].as_str().unwrap_or_default();
                Ok(json!({ "turn": turn_object(id, "inProgress", Value::Null, None, None) }))
            }
            Err(error) if error.code == code::SUPERSEDED => {
                let driver = error
                    .data
                    .as_ref()
                    .map(|data| describe_driver(&data["driver"]))
                    .unwrap_or_else(|| error.message.clone());
                Err(self.superseded(driver))
            }
            Err(error) => Err(error),
        }
    }

    async fn turn_steer(&mut self, params: &Value) -> Result<Value, RpcError> {
        let (text, images) = input(params)?;
        if !images.is_empty() {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "corral connect steers with text only",
            ));
        }
        let generation = self.claim().await?;
        self.verify(generation).await?;
        let running = self.running_prompt().await?;
        let expected = params.get("expectedTurnId").and_then(Value::as_str);
        let Some(running) = running else {
            return Err(RpcError::new(
                code::INVALID_REQUEST,
                "no active turn to steer",
            ));
        };
        if let Some(expected) = expected.filter(|expected| *expected != running) {
            return Err(RpcError::new(
                code::INVALID_REQUEST,
                format!("expected active turn id {expected} but found {running}"),
            ));
        }
        self.call::<SessionSteer>(&SteerParams {
            session: self.shared.session_id.clone(),
            text,
        })
        .await?;
        Ok(json!({ "turnId": running }))
    }

    async fn turn_interrupt(&mut self, params: &Value) -> Result<Value, RpcError> {
        let turn = params
            .get("turnId")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "turnId is required"))?
            .to_string();
        let generation = self.claim().await?;
        self.verify(generation).await?;
        // Only a prompt of this session, named exactly (a session selector would cancel
        // everything queued on it).
        let shown = self
            .call::<SessionShow>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        let known = shown["prompts"].as_array().is_some_and(|prompts| {
            prompts
                .iter()
                .any(|prompt| prompt["id"].as_str() == Some(turn.as_str()))
        });
        if !known {
            return Err(RpcError::new(
                code::INVALID_REQUEST,
                format!("no turn {turn} in this thread"),
            ));
        }
        self.call::<PromptCancel>(&CancelParams { target: turn })
            .await?;
        Ok(json!({}))
    }

    /// The claim's generation, claiming it first when this connection never held it.
    async fn claim(&mut self) -> Result<i64, RpcError> {
        match &self.claim {
            Claim::Held(generation) => return Ok(*generation),
            Claim::Superseded(driver) => return Err(self.superseded(driver.clone())),
            Claim::Unclaimed => {}
        }
        let claimed = self
            .call::<DriverClaim>(&ClaimParams {
                session: self.shared.session_id.clone(),
                take_over: false,
            })
            .await;
        match claimed {
            Ok(claim) => {
                let generation = claim["generation"].as_i64().ok_or_else(|| {
                    RpcError::new(
                        code::INTERNAL,
                        "the daemon answered a claim without a generation",
                    )
                })?;
                self.claim = Claim::Held(generation);
                Ok(generation)
            }
            Err(error) if error.code == code::CLAIMED => {
                let driver = error
                    .data
                    .as_ref()
                    .and_then(|data| data["driver"].as_str())
                    .unwrap_or("?")
                    .to_string();
                Err(RpcError::new(
                    code::CLAIMED,
                    format!(
                        "the session is driven by exec {driver}; this connection receives the \
                         thread's notifications but cannot write while that exec drives"
                    ),
                )
                .with_data(json!({ "driver": driver })))
            }
            Err(error) => Err(error),
        }
    }

    /// Checks with the daemon that this connection still holds the claim of `generation`
    /// (steer and interrupt carry no generation of their own).
    async fn verify(&mut self, generation: i64) -> Result<(), RpcError> {
        let claim = self
            .call::<DriverShow>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        let holder = claim["exec_id"].as_str();
        if holder == Some(self.exec_id.as_str()) && claim["generation"].as_i64() == Some(generation)
        {
            return Ok(());
        }
        Err(self.superseded(describe_driver(&claim)))
    }

    /// Marks the claim lost to `driver`; the refusal every later write gets.
    fn superseded(&mut self, driver: String) -> RpcError {
        let refusal = RpcError::new(
            code::SUPERSEDED,
            format!(
                "superseded by {driver}: this connection lost the session's driver claim; it \
                 keeps receiving the thread's notifications but can no longer write"
            ),
        )
        .with_data(json!({ "driver": driver }));
        self.claim = Claim::Superseded(driver);
        refusal
    }

    /// The session's running prompt, if any.
    async fn running_prompt(&mut self) -> Result<Option<String>, RpcError> {
        let shown = self
            .call::<SessionShow>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        Ok(shown["prompts"].as_array().and_then(|prompts| {
            prompts
                .iter()
                .find(|prompt| prompt["status"].as_str() == Some("running"))
                .and_then(|prompt| prompt["id"].as_str().map(str::to_string))
        }))
    }
}

/// A claim as words naming its driver: `exec X`, or `exec X (since released)`.
fn describe_driver(claim: &Value) -> String {
    match (claim["exec_id"].as_str(), claim["last_exec_id"].as_str()) {
        (Some(exec), _) => format!("exec {exec}"),
        (None, Some(last)) => format!("exec {last} (since released)"),
        (None, None) => "another driver".into(),
    }
}

/// An error answer, shaped as the app-server writes them.
fn error_reply(id: &Value, error: &RpcError) -> Value {
    json!({ "error": error, "id": id })
}

/// A turn's `input` as corral's prompt: the text items joined by newlines, the local images'
/// paths (made absolute).
fn input(params: &Value) -> Result<(String, Vec<String>), RpcError> {
    let items = params
        .get("input")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "input must be an array"))?;
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("text") => texts.push(
                item["text"]
                    .as_str()
                    .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "a text item needs text"))?
                    .to_string(),
            ),
            Some("localImage") => {
                let path = item["path"].as_str().ok_or_else(|| {
                    RpcError::new(code::INVALID_PARAMS, "a localImage item needs a path")
                })?;
                let absolute = std::path::absolute(path).map_err(|error| {
                    RpcError::new(code::INVALID_PARAMS, format!("{path}: {error}"))
                })?;
                images.push(absolute.to_string_lossy().into_owned());
            }
            other => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!(
                        "input items of type {} are not served by corral connect (text and \
                         localImage are)",
                        other.unwrap_or("?")
                    ),
                ))
            }
        }
    }
    let text = texts.join("\n");
    if text.trim().is_empty() && images.is_empty() {
        return Err(RpcError::new(code::INVALID_PARAMS, "the input is empty"));
    }
    Ok((text, images))
}

/// A turn object as the app-server shows it (times in seconds, durations in milliseconds).
fn turn_object(
    id: &str,
    status: &str,
    error: Value,
    started_ms: Option<i64>,
    completed_ms: Option<i64>,
) -> Value {
    let duration = match (started_ms, completed_ms) {
        (Some(start), Some(end)) => json!(end - start),
        _ => Value::Null,
    };
    json!({
        "id": id,
        "rootTurnId": id,
        "items": [],
        "itemsView": "notLoaded",
        "status": status,
        "error": error,
        "startedAt": started_ms.map(|ms| ms / 1000),
        "completedAt": completed_ms.map(|ms| ms / 1000),
        "durationMs": duration,
    })
}

/// A turn as one connection has shown it so far.
#[derive(Default)]
struct TurnView {
    /// `turn/started` was sent, at this time (ms).
    started_at: Option<i64>,
    /// Agent messages completed in this turn (item ids are numbered by it).
    messages: u32,
    /// The agent message being streamed: its item id and text so far.
    open: Option<(String, String)>,
    /// The last failed attempt's message (a retry notice names it).
    failure: Option<String>,
    /// Tool items without an id of their own.
    tools: u32,
}

/// Turns corral's session events into app-server notifications, for one connection.
///
/// | corral event | notifications |
/// |---|---|
/// | `thread.started` (a new thread id) | `thread/started {thread}` |
/// | `prompt.started` | `thread/status/changed {active}` |
/// | `turn.started` (first of the prompt) | `turn/started {threadId, turn}` |
/// | `message.delta` | `item/started` (first of a message), `item/agentMessage/delta` |
/// | `message` | `item/completed {item: agentMessage}` |
/// | `tool` | `item/started` (in progress) or `item/completed`, the engine's item |
/// | `usage` | `thread/tokenUsage/updated` |
/// | `notice` | `error {error, willRetry}` |
/// | `retry.scheduled` | `error {…, willRetry: true}` |
/// | `prompt.requeued` | `error {…, willRetry: true}` |
/// | `prompt.done` | `thread/status/changed {idle}`, `turn/completed {completed}` |
/// | `prompt.failed` | `error {willRetry: false}`, idle, `turn/completed {failed, error}` |
/// | `prompt.cancelled` | idle, `turn/completed {interrupted}` |
///
/// A turn's notifications are always preceded by its `turn/started`, even for a prompt that
/// began before the connection subscribed.
struct Translator {
    session_id: String,
    /// The session's thread, once known.
    thread_id: Option<String>,
    turns: HashMap<String, TurnView>,
}

impl Translator {
    fn new(session_id: &str) -> Self {
        Translator {
            session_id: session_id.to_string(),
            thread_id: None,
            turns: HashMap::new(),
        }
    }

    /// The thread id to show: the session's thread, else the session id as a placeholder.
    fn thread(&self) -> String {
        self.thread_id
            .clone()
            .unwrap_or_else(|| self.session_id.clone())
    }

    fn translate(&mut self, event: &Event) -> Vec<Value> {
        let at = event.at;
        let payload = &event.payload;
        let mut out = Vec::new();
        if event.kind == EventKind::ThreadStarted {
            if let Some(thread) = payload["thread_id"].as_str() {
                if self.thread_id.as_deref() != Some(thread) {
                    self.thread_id = Some(thread.to_string());
                    let thread = json!({
                        "id": thread,
                        "sessionId": thread,
                        "ephemeral": false,
                        "status": { "type": "active", "activeFlags": [] },
                        "source": "corral",
                        "turns": [],
                    });
                    out.push(notification(
                        "thread/started",
                        json!({ "thread": thread }),
                        at,
                    ));
                }
            }
            return out;
        }
        let Some(turn) = event.prompt_id.clone() else {
            return out;
        };
        let thread = self.thread();
        let text = |name: &str| payload[name].as_str().unwrap_or_default().to_string();
        match &event.kind {
            EventKind::PromptStarted => {
                out.push(notification(
                    "thread/status/changed",
                    json!({ "threadId": thread, "status": { "type": "active", "activeFlags": [] } }),
                    at,
                ));
            }
            EventKind::TurnStarted => self.ensure_started(&turn, at, &mut out),
            EventKind::MessageDelta => {
                self.ensure_started(&turn, at, &mut out);
                let delta = text("text");
                let item = self.open_message(&turn, at, &mut out);
                if let Some((_, so_far)) = self.view(&turn).open.as_mut() {
                    so_far.push_str(&delta);
                }
                out.push(notification(
                    "item/agentMessage/delta",
                    json!({ "threadId": thread, "turnId": turn, "itemId": item, "delta": delta }),
                    at,
                ));
            }
            EventKind::Message => {
                self.ensure_started(&turn, at, &mut out);
                self.complete_message(&turn, text("text"), at, &mut out);
            }
            EventKind::Tool => {
                self.ensure_started(&turn, at, &mut out);
                let view = self.view(&turn);
                let mut item = engine_item(&payload["detail"], payload["name"].as_str());
                if item.get("id").is_none_or(Value::is_null) {
                    view.tools += 1;
                    item["id"] = json!(format!("{turn}-tool-{}", view.tools));
                }
                let method = if item["status"].as_str() == Some("inProgress") {
                    "item/started"
                } else {
                    "item/completed"
                };
                out.push(notification(
                    method,
                    json!({ "item": item, "threadId": thread, "turnId": turn }),
                    at,
                ));
            }
            EventKind::Usage => {
                self.ensure_started(&turn, at, &mut out);
                out.push(notification(
                    "thread/tokenUsage/updated",
                    json!({ "threadId": thread, "turnId": turn, "tokenUsage": token_usage(&payload["usage"]) }),
                    at,
                ));
            }
            EventKind::Notice => {
                self.ensure_started(&turn, at, &mut out);
                // Nothing is final before the prompt ends: corral may still retry.
                let will_retry = payload["will_retry"].as_bool().unwrap_or(true);
                out.push(error_notification(
                    &thread,
                    &turn,
                    json!({
                        "message": payload["message"],
                        "codexErrorInfo": payload.get("codex_error_info").cloned().unwrap_or(Value::Null),
                        "additionalDetails": null,
                    }),
                    will_retry,
                    at,
                ));
            }
            EventKind::TurnFailed => {
                self.view(&turn).failure = Some(text("message"));
            }
            EventKind::RetryScheduled => {
                self.ensure_started(&turn, at, &mut out);
                let view = self.view(&turn);
                // A new attempt streams its own message.
                view.open = None;
                let message = payload["message"]
                    .as_str()
                    .filter(|message| !message.is_empty())
                    .map(str::to_string)
                    .or_else(|| view.failure.clone())
                    .unwrap_or_else(|| text("reason"));
                let delay = payload["delay_ms"].as_i64().unwrap_or(0) as f64 / 1000.0;
                let details = format!(
                    "corral retries ({}): attempt {} in {delay}s",
                    text("reason"),
                    payload["next_attempt"]
                        .as_i64()
                        .map(|n| n.to_string())
                        .unwrap_or_else(|| "?".into())
                );
                out.push(error_notification(
                    &thread,
                    &turn,
                    json!({ "message": message, "codexErrorInfo": null, "additionalDetails": details }),
                    true,
                    at,
                ));
            }
            EventKind::PromptRequeued => {
                self.ensure_started(&turn, at, &mut out);
                out.push(error_notification(
                    &thread,
                    &turn,
                    json!({
                        "message": "the daemon stopped; the prompt is queued again and runs when a daemon starts",
                        "codexErrorInfo": null,
                        "additionalDetails": null,
                    }),
                    true,
                    at,
                ));
            }
            EventKind::PromptDone | EventKind::PromptFailed | EventKind::PromptCancelled => {
                self.ensure_started(&turn, at, &mut out);
                let answer = payload["answer"].as_str().map(str::to_string);
                let view = self.view(&turn);
                let streamed = view.open.is_some();
                if event.kind == EventKind::PromptDone && (streamed || view.messages == 0) {
                    // The answer was streamed but never completed, or never shown at all.
                    let text = answer
                        .or_else(|| view.open.as_ref().map(|(_, text)| text.clone()))
                        .unwrap_or_default();
                    if streamed || !text.is_empty() {
                        self.complete_message(&turn, text, at, &mut out);
                    }
                }
                let (status, error) = match &event.kind {
                    EventKind::PromptDone => ("completed", Value::Null),
                    EventKind::PromptFailed => {
                        let error = json!({
                            "message": payload["error"].as_str().unwrap_or("the turn failed"),
                            "codexErrorInfo": null,
                            "additionalDetails": null,
                        });
                        out.push(error_notification(&thread, &turn, error.clone(), false, at));
                        ("failed", error)
                    }
                    _ => ("interrupted", Value::Null),
                };
                out.push(notification(
                    "thread/status/changed",
                    json!({ "threadId": thread, "status": { "type": "idle" } }),
                    at,
                ));
                let started = self.turns.remove(&turn).and_then(|view| view.started_at);
                out.push(notification(
                    "turn/completed",
                    json!({ "threadId": thread, "turn": turn_object(&turn, status, error, started, Some(at)) }),
                    at,
                ));
            }
            _ => {}
        }
        out
    }

    fn view(&mut self, turn: &str) -> &mut TurnView {
        self.turns.entry(turn.to_string()).or_default()
    }

    /// Sends `turn/started` once per turn.
    fn ensure_started(&mut self, turn: &str, at: i64, out: &mut Vec<Value>) {
        let thread = self.thread();
        let view = self.view(turn);
        if view.started_at.is_some() {
            return;
        }
        view.started_at = Some(at);
        out.push(notification(
            "turn/started",
            json!({ "threadId": thread, "turn": turn_object(turn, "inProgress", Value::Null, Some(at), None) }),
            at,
        ));
    }

    /// The item id of the agent message being streamed, starting one (`item/started`).
    fn open_message(&mut self, turn: &str, at: i64, out: &mut Vec<Value>) -> String {
        let thread = self.thread();
        let view = self.view(turn);
        if let Some((item, _)) = &view.open {
            return item.clone();
        }
        let item = format!("{turn}-msg-{}", view.messages + 1);
        view.open = Some((item.clone(), String::new()));
        out.push(notification(
            "item/started",
            json!({
                "item": { "type": "agentMessage", "id": item, "text": "", "phase": null },
                "threadId": thread,
                "turnId": turn,
            }),
            at,
        ));
        item
    }

    fn complete_message(&mut self, turn: &str, text: String, at: i64, out: &mut Vec<Value>) {
        let thread = self.thread();
        let item = self.open_message(turn, at, out);
        let view = self.view(turn);
        view.open = None;
        view.messages += 1;
        out.push(notification(
            "item/completed",
            json!({
                "item": { "type": "agentMessage", "id": item, "text": text, "phase": null },
                "threadId": thread,
                "turnId": turn,
            }),
            at,
        ));
    }
}

fn notification(method: &str, params: Value, at: i64) -> Value {
    json!({ "method": method, "params": params, "emittedAtMs": at })
}

fn error_notification(thread: &str, turn: &str, error: Value, will_retry: bool, at: i64) -> Value {
    notification(
        "error",
        json!({ "error": error, "willRetry": will_retry, "threadId": thread, "turnId": turn }),
        at,
    )
}

/// A tool event's item as the app-server shows items: the engine's own item, its names in
/// camelCase (an app-server item is already; `codex exec`'s `command_execution` with
/// `exit_code` becomes `commandExecution` with `exitCode`).
fn engine_item(detail: &Value, name: Option<&str>) -> Value {
    let mut item = match detail {
        Value::Object(map) => {
            let mut converted = serde_json::Map::new();
            for (key, value) in map {
                converted.insert(camel(key), value.clone());
            }
            Value::Object(converted)
        }
        Value::Null => json!({}),
        other => json!({ "detail": other }),
    };
    let kind = item["type"]
        .as_str()
        .map(str::to_string)
        .or_else(|| name.map(str::to_string))
        .unwrap_or_else(|| "tool".into());
    item["type"] = json!(camel(&kind));
    if let Some(status) = item["status"].as_str().map(camel) {
        item["status"] = json!(status);
    }
    item
}

/// `snake_case` → `camelCase`; other text as it is.
fn camel(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut upper = false;
    for character in text.chars() {
        if character == '_' && !out.is_empty() {
            upper = true;
        } else if upper {
            out.extend(character.to_uppercase());
            upper = false;
        } else {
            out.push(character);
        }
    }
    out
}

/// Usage as `thread/tokenUsage/updated` shows it: an app-server's `tokenUsage` as it is; an
/// exec engine's counts as `total` and `last`.
fn token_usage(usage: &Value) -> Value {
    if usage.get("total").is_some() || usage.get("last").is_some() {
        return usage.clone();
    }
    let count = |name: &str| usage[name].as_i64().unwrap_or(0);
    let input = count("input_tokens");
    let output = count("output_tokens");
    let breakdown = json!({
        "totalTokens": input + output,
        "inputTokens": input,
        "cachedInputTokens": count("cached_input_tokens"),
        "cacheWriteInputTokens": count("cache_write_input_tokens"),
        "outputTokens": output,
        "reasoningOutputTokens": count("reasoning_output_tokens"),
    });
    json!({ "total": breakdown, "last": breakdown, "modelContextWindow": null })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, kind: &str, prompt: Option<&str>, payload: Value) -> Event {
        Event {
            session_id: "ses".into(),
            seq,
            feed_seq: seq,
            prompt_id: prompt.map(str::to_string),
            run_id: None,
            at: 1_000_000 + seq,
            kind: kind.into(),
            payload,
        }
    }

    fn methods(notifications: &[Value]) -> Vec<String> {
        notifications
            .iter()
            .map(|n| n["method"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_streamed_turn_becomes_the_app_servers_notifications() {
        let mut translator = Translator::new("ses");
        assert_eq!(translator.thread(), "ses");
        let mut all = Vec::new();
        for item in [
            event(1, "prompt.started", Some("p1"), json!({ "text": "hi" })),
            event(
                2,
                "thread.started",
                Some("p1"),
                json!({ "thread_id": "thr" }),
            ),
            event(3, "turn.started", Some("p1"), json!({})),
            event(4, "message.delta", Some("p1"), json!({ "text": "hel" })),
            event(5, "message.delta", Some("p1"), json!({ "text": "lo" })),
            event(6, "message", Some("p1"), json!({ "text": "hello" })),
            event(
                7,
                "usage",
                Some("p1"),
                json!({ "usage": { "input_tokens": 3, "output_tokens": 2 } }),
            ),
            event(8, "turn.completed", Some("p1"), json!({})),
            event(
                9,
                "prompt.done",
                Some("p1"),
                json!({ "answer": "hello", "error": null }),
            ),
        ] {
            all.extend(translator.translate(&item));
        }
        assert_eq!(
            methods(&all),
            [
                "thread/status/changed",
                "thread/started",
                "turn/started",
                "item/started",
                "item/agentMessage/delta",
                "item/agentMessage/delta",
                "item/completed",
                "thread/tokenUsage/updated",
                "thread/status/changed",
                "turn/completed",
            ]
        );
        let started = &all[2]["params"];
        assert_eq!(started["threadId"], "thr");
        assert_eq!(started["turn"]["id"], "p1");
        assert_eq!(started["turn"]["status"], "inProgress");
        assert_eq!(all[4]["params"]["itemId"], all[6]["params"]["item"]["id"]);
        assert_eq!(all[4]["params"]["delta"], "hel");
        assert_eq!(all[6]["params"]["item"]["text"], "hello");
        assert_eq!(all[6]["params"]["item"]["type"], "agentMessage");
        assert_eq!(all[7]["params"]["tokenUsage"]["total"]["totalTokens"], 5);
        assert_eq!(all[9]["params"]["turn"]["status"], "completed");
        assert_eq!(all[9]["params"]["turn"]["durationMs"], 6);
        assert!(all.iter().all(|n| n["emittedAtMs"].is_i64()));
    }

    #[test]
    fn failures_retries_and_cancels_end_turns_as_the_app_server_does() {
        let mut translator = Translator::new("ses");
        let mut all = Vec::new();
        for item in [
            event(1, "turn.started", Some("p1"), json!({})),
            event(
                2,
                "notice",
                Some("p1"),
                json!({ "message": "Reconnecting... 1/2" }),
            ),
            event(3, "turn.failed", Some("p1"), json!({ "message": "429" })),
            event(
                4,
                "retry.scheduled",
                Some("p1"),
                json!({ "reason": "rate_limit", "delay_ms": 50, "next_attempt": 2 }),
            ),
            event(5, "turn.started", Some("p1"), json!({})),
            event(6, "prompt.failed", Some("p1"), json!({ "error": "boom" })),
            event(7, "prompt.cancelled", Some("p2"), json!({})),
        ] {
            all.extend(translator.translate(&item));
        }
        assert_eq!(
            methods(&all),
            [
                "turn/started",
                "error",
                "error",
                "error",
                "thread/status/changed",
                "turn/completed",
                "turn/started",
                "thread/status/changed",
                "turn/completed",
            ]
        );
        assert_eq!(all[1]["params"]["willRetry"], true);
        assert_eq!(all[2]["params"]["error"]["message"], "429");
        assert_eq!(all[2]["params"]["willRetry"], true);
        assert_eq!(all[3]["params"]["willRetry"], false);
        assert_eq!(all[5]["params"]["turn"]["status"], "failed");
        assert_eq!(all[5]["params"]["turn"]["error"]["message"], "boom");
        assert_eq!(all[8]["params"]["turn"]["id"], "p2");
        assert_eq!(all[8]["params"]["turn"]["status"], "interrupted");
    }

    #[test]
    fn tool_items_keep_the_engines_item_in_camel_case() {
        let exec_item = json!({ "id": "item_1", "type": "command_execution", "command": "ls",
                                "aggregated_output": "", "exit_code": 0, "status": "in_progress" });
        let item = engine_item(&exec_item, Some("command_execution"));
        assert_eq!(item["type"], "commandExecution");
        assert_eq!(item["exitCode"], 0);
        assert_eq!(item["status"], "inProgress");
        let app_item = json!({ "id": "c1", "type": "commandExecution", "exitCode": 1 });
        assert_eq!(engine_item(&app_item, Some("commandExecution")), app_item);
    }

    #[test]
    fn input_joins_text_and_takes_local_images() {
        let (text, images) = input(&json!({ "input": [
            { "type": "text", "text": "one" },
            { "type": "localImage", "path": "/tmp/a.png" },
            { "type": "text", "text": "two" },
        ]}))
        .unwrap();
        assert_eq!(text, "one\ntwo");
        assert_eq!(images, ["/tmp/a.png"]);
        assert!(input(&json!({ "input": [] })).is_err());
        assert!(input(&json!({ "input": [{ "type": "image", "url": "x" }] })).is_err());
        assert!(input(&json!({})).is_err());
    }
}
