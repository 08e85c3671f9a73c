//! The app-server actor: one long-lived `codex app-server` child per project, supervised.
//!
//! One per project (not one per daemon): a project's threads share its working directory and
//! sandbox policy, and a child that dies takes only that project's turns with it.
//!
//! The actor owns the child (its own process group, stdin/stdout piped, stderr kept as log
//! events) and multiplexes JSON-RPC over it: [`Call`] sends a request and answers with the
//! response; notifications are routed by `threadId` to the turn that watches the thread
//! ([`WatchThread`]); server requests (approvals) are answered by the project's policy — deny
//! by default, approve under full access — and unknown ones get an error reply, never silence.
//!
//! Supervision, as an OTP supervisor would: when stdout ends or the child exits, every turn in
//! progress gets [`TurnEvent::Closed`] with what is known of the death (pid, exit code, signal,
//! whether a trailing partial line was flushed, the close source); no turn is reported
//! completed that the child did not complete. The next [`EnsureRunning`] restarts the child
//! after a backoff; more than [`MAX_RESTARTS`] restarts within [`RESTART_WINDOW`] stop the
//! restarts, fail the turns that ask, and show in `status` until the window has passed.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use crate::process;
use crate::protocol::RpcError;
use crate::store::now_ms;
pub use crate::store::processes::{AppServerState, ServerStatus};

/// More restarts than this within [`RESTART_WINDOW`] and the actor stops restarting.
pub const MAX_RESTARTS: usize = 5;
/// The window of the restart-intensity limit.
pub const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// The first restart backoff; doubled for every restart in the window, at most 5 s.
const RESTART_BACKOFF: Duration = Duration::from_millis(100);
/// How many recent events the actor keeps for `status` (and the store).
pub const RECENT_EVENTS: usize = 50;

/// How long after one half of a death (stdout end, exit) the other is awaited before the
/// turns are told with what is known.
const DEATH_SETTLE: Duration = Duration::from_millis(500);

/// What a turn watching a thread receives.
#[derive(Debug, Clone)]
pub enum TurnEvent {
    /// A notification about the thread (`turn/started`, `item/…`, `error`, `turn/completed`…).
    Notification { method: String, params: Value },
    /// A line that was not JSON.
    Invalid { line: String },
    /// The transport closed before the turn completed.
    Closed { details: Value },
    /// An approval request of the server for a turn that asks a person (its thread was
    /// watched with `asks`): the turn answers it ([`Respond`]).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// The turn stopped reading (its worker waits for a store another program locks) while
    /// [`TURN_BACKLOG`] notifications waited: its thread is routed no more. The last event.
    Overflowed,
}

/// How many notifications may wait for a turn that does not read them. The reader serves
/// every thread and every call of the child, so it never waits for one turn (a cancel's
/// `turn/interrupt` answer comes through it); a turn that falls this far behind is given up
/// instead of growing the daemon's memory.
pub const TURN_BACKLOG: usize = 4096;

/// A turn's channel: bounded, with one slot kept for [`TurnEvent::Overflowed`] or
/// [`TurnEvent::Closed`].
pub fn turn_channel() -> (mpsc::Sender<TurnEvent>, mpsc::Receiver<TurnEvent>) {
    mpsc::channel(TURN_BACKLOG + 1)
}

/// Hands `event` to the turn watching `thread`, if one does, never waiting: a turn whose
/// channel has only its last slot left gets [`TurnEvent::Overflowed`] there and is dropped.
fn deliver(turns: &mut HashMap<String, mpsc::Sender<TurnEvent>>, thread: &str, event: TurnEvent) {
    let Some(turn) = turns.get(thread) else {
        return;
    };
    // This actor is the only sender: the capacity only grows between the check and the send.
    if turn.capacity() > 1 {
        let _ = turn.try_send(event);
        return;
    }
    let _ = turn.try_send(TurnEvent::Overflowed);
    tracing::warn!(
        thread,
        backlog = TURN_BACKLOG,
        "a turn fell behind its notifications: it is given up"
    );
    turns.remove(thread);
}

impl AppServerState {
    /// With the node whose child it is, on a shared store.
    pub fn of_node(mut self, node_id: Option<&str>) -> Self {
        self.node_id = node_id.map(str::to_string);
        self
    }
}

/// The live child of one generation.
struct Live {
    pid: u32,
    pid_start: Option<u64>,
    /// The executable it runs (`engines.codex-app-server.path` when it was started).
    program: PathBuf,
    /// The project's own variables it was started with.
    env: crate::store::environment::Environment,
    generation: u64,
    /// Lines to write to its stdin.
    stdin: mpsc::UnboundedSender<String>,
    initialized: bool,
    /// Its handshake was given up on (no `initialize` answer in time; it is being killed):
    /// whoever asks for a child from then on waits for the next one.
    abandoned: bool,
    /// What is known of its death so far.
    death: Option<Death>,
    /// Threads this child has started or resumed: resuming one again is answered without a
    /// round trip (a session's every turn would otherwise resume its thread first).
    loaded: std::collections::HashSet<String>,
    /// Each thread's turn in progress (`turn/start`'s answer, `turn/started`), until
    /// `turn/completed`: what `turn/steer` names as its `expectedTurnId`.
    running_turns: HashMap<String, String>,
}

#[derive(Debug, Clone, Default)]
struct Death {
    source: Option<&'static str>,
    stdout_ended: bool,
    partial_len: Option<usize>,
    exit_code: Option<i32>,
    signal: Option<String>,
    exited: bool,
}

/// The actor. Private: talk to it through its `Addr` and the messages below.
pub struct AppServerActor {
    project_id: String,
    program: PathBuf,
    cwd: String,
    home: PathBuf,
    full_access: bool,
    /// How long a new child may take to answer `initialize` before it is killed (the attempt
    /// counts toward the restart limit): the `app_server.init_timeout_ms` setting.
    init_timeout: Duration,
    /// The lease guard's mark its children carry (shared store): no run lists the child, so
    /// this is how the guard finds it when the daemon dies.
    guard_mark: Option<String>,
    /// The project's own variables (`store::environment`), as they were when the actor
    /// started: a change reaches the child that a restart makes.
    env: crate::store::environment::Environment,
    child: Option<Live>,
    generation: u64,
    status: ServerStatus,
    next_id: u64,
    pending: HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>,
    /// Requests that load a thread when they succeed (`thread/start`: `None`, the id is in the
    /// answer; `thread/resume`: the id asked for).
    loading: HashMap<u64, Option<String>>,
    /// `turn/start` requests in flight, by id: their thread (the answer names the turn).
    starting: HashMap<u64, String>,
    /// Each thread's last `thread/tokenUsage/updated` total: an update that repeats it (an
    /// interrupted turn repeats the previous turn's figures) spent nothing and is not passed
    /// on, so adding a session's usage events never counts a turn twice.
    usage_totals: HashMap<String, Value>,
    turns: HashMap<String, mpsc::Sender<TurnEvent>>,
    /// The watched threads whose turn asks a person (policy `ask`): their approval requests
    /// go to the turn, not answered here.
    asking: std::collections::HashSet<String>,
    /// `EnsureRunning` callers waiting for the handshake.
    waiting: Vec<oneshot::Sender<Result<(u64, u32), String>>>,
    restarts: VecDeque<Instant>,
    /// This actor has spawned a child: the next spawn is a restart. A daemon's first child
    /// after a restart is not (the old one ended with its daemon, not on its own), though its
    /// generation and restarts go on from the store.
    spawned_here: bool,
    /// The daemon is shutting down ([`StopChild`]): no child is started any more.
    stopping: bool,
    last_exit: Option<Value>,
    recent: VecDeque<Value>,
    /// Called with the state after every change worth keeping (persisted by the owner).
    on_change: Option<Box<dyn Fn(AppServerState)>>,
}

impl AppServerActor {
    pub fn new(
        project_id: String,
        program: PathBuf,
        cwd: String,
        home: PathBuf,
        full_access: bool,
    ) -> Self {
        AppServerActor {
            project_id,
            program,
            cwd,
            home,
            full_access,
            init_timeout: Duration::from_secs(20),
            guard_mark: None,
            env: Default::default(),
            child: None,
            generation: 0,
            status: ServerStatus::Stopped,
            next_id: 1,
            pending: HashMap::new(),
            loading: HashMap::new(),
            starting: HashMap::new(),
            usage_totals: HashMap::new(),
            turns: HashMap::new(),
            asking: std::collections::HashSet::new(),
            waiting: Vec::new(),
            restarts: VecDeque::new(),
            spawned_here: false,
            stopping: false,
            last_exit: None,
            recent: VecDeque::new(),
            on_change: None,
        }
    }

    /// A new child not answering `initialize` within `timeout` is killed.
    pub fn init_timeout(mut self, timeout: Duration) -> Self {
        self.init_timeout = timeout;
        self
    }

    /// Its children get the project's own variables.
    pub fn with_env(mut self, env: crate::store::environment::Environment) -> Self {
        self.env = env;
        self
    }

    /// Its children carry the lease guard's `mark` (see [`crate::env::LEASE_GUARD`]).
    pub fn guarded_by(mut self, mark: Option<&str>) -> Self {
        self.guard_mark = mark.map(str::to_string);
        self
    }

    /// Carries on from the state a previous daemon stored for this project: its generation,
    /// last exit, recent events and restarts go on (the child itself is not: the boot that
    /// followed that daemon's death ended it and stored it as stopped).
    pub fn resume_from(mut self, state: AppServerState) -> Self {
        self.generation = state.generation;
        self.last_exit = state.last_exit;
        let skip = state.recent.len().saturating_sub(RECENT_EVENTS);
        self.recent = state.recent.into_iter().skip(skip).collect();
        let now = now_ms();
        self.restarts = state
            .restarts
            .into_iter()
            .filter_map(|at| {
                let ago = Duration::from_millis(now.saturating_sub(at).max(0) as u64);
                (ago <= RESTART_WINDOW)
                    .then(|| Instant::now().checked_sub(ago))
                    .flatten()
            })
            .collect();
        self
    }

    /// Persists each state change through `callback`.
    pub fn on_change(mut self, callback: impl Fn(AppServerState) + 'static) -> Self {
        self.on_change = Some(Box::new(callback));
        self
    }

    fn state(&self) -> AppServerState {
        AppServerState {
            project_id: self.project_id.clone(),
            pid: self.child.as_ref().map(|live| live.pid),
            pid_start: self.child.as_ref().and_then(|live| live.pid_start),
            generation: self.generation,
            status: self.status.clone(),
            last_exit: self.last_exit.clone(),
            recent: self.recent.iter().cloned().collect(),
            restarts: self
                .restarts
                .iter()
                .map(|at| now_ms() - at.elapsed().as_millis() as i64)
                .collect(),
            node_id: None,
        }
    }

    fn changed(&self) {
        if let Some(callback) = &self.on_change {
            callback(self.state());
        }
    }

    fn remember(&mut self, kind: &str, detail: Value) {
        if self.recent.len() == RECENT_EVENTS {
            self.recent.pop_front();
        }
        self.recent
            .push_back(json!({ "at": now_ms(), "kind": kind, "detail": detail }));
    }

    fn write(&self, message: &Value) -> bool {
        match &self.child {
            Some(live) => live.stdin.send(message.to_string()).is_ok(),
            None => false,
        }
    }

    /// Spawns a new generation of the child and starts the handshake.
    fn spawn_child(&mut self, ctx: &mut Context<Self>) {
        self.generation += 1;
        self.spawned_here = true;
        let generation = self.generation;
        self.status = ServerStatus::Starting;
        // Under the shim, a missing program is the shim's failure: told here first, as before.
        let mut command = process::shim::command(&self.program);
        command
            .arg("app-server")
            .current_dir(&self.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The project's own variables (never corral's: `store::environment`).
            .envs(&self.env.0)
            .env(crate::env::HOME, &self.home)
            // What it starts carries it too: a daemon that died is found out by it at boot.
            .env(crate::env::APP_SERVER_PROJECT, &self.project_id)
            // One child serves every session of the project: no session's identity belongs
            // in its environment (each thread gets its own, see `session::driver_file`).
            .env_remove(crate::env::PARENT_EXEC)
            .env_remove(crate::env::SESSION_ID)
            .env_remove(crate::env::TRACE_ID)
            .env_remove(crate::env::TEST_KILL_AT)
            .env("RUST_BACKTRACE", "0");
        crate::actors::session::guard_mark(&mut command, self.guard_mark.as_deref());
        let spawned = crate::engine::check_executable(&self.program)
            .map_err(std::io::Error::other)
            .and_then(|()| command.spawn());
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => {
                let reason = format!(
                    "engine 'codex-app-server' not found: {} ({error})",
                    self.program.display()
                );
                self.status = ServerStatus::Stopped;
                self.remember("spawn_failed", json!({ "error": reason }));
                for waiter in self.waiting.drain(..) {
                    let _ = waiter.send(Err(reason.clone()));
                }
                self.changed();
                return;
            }
        };
        let pid = child.id().unwrap_or(0);
        let (stdin_tx, mut stdin_rx) = mpsc::unbounded_channel::<String>();
        if let Some(mut stdin) = child.stdin.take() {
            actix::spawn(async move {
                while let Some(mut line) = stdin_rx.recv().await {
                    line.push('\n');
                    if stdin.write_all(line.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
        let me = ctx.address();
        if let Some(stdout) = child.stdout.take() {
            actix::spawn(read_stdout(stdout, generation, me.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            actix::spawn(read_stderr(stderr, generation, me.clone()));
        }
        actix::spawn(async move {
            let status = child.wait().await.ok();
            me.do_send(Exited { generation, status });
        });
        self.child = Some(Live {
            pid,
            pid_start: process::start_time(pid),
            program: self.program.clone(),
            env: self.env.clone(),
            generation,
            stdin: stdin_tx,
            initialized: false,
            abandoned: false,
            death: None,
            loaded: std::collections::HashSet::new(),
            running_turns: HashMap::new(),
        });
        self.remember("spawned", json!({ "pid": pid, "generation": generation }));
        // The handshake: `initialize`, then the `initialized` notification.
        let id = self.next_id;
        self.next_id += 1;
        let (sender, receiver) = oneshot::channel();
        self.pending.insert(id, sender);
        self.write(&json!({
            "id": id,
            "method": "initialize",
            "params": { "clientInfo": { "name": "corral", "title": "corral", "version": env!("CARGO_PKG_VERSION") } }
        }));
        let timeout = self.init_timeout;
        ctx.run_later(timeout, move |actor, _| {
            let Some(live) = actor.child.as_mut().filter(|live| live.generation == generation) else {
                return;
            };
            if live.initialized {
                return;
            }
            live.abandoned = true;
            let pid = live.pid;
            let reason = format!(
                "the app-server did not answer initialize within {} ms; it was killed (the next turn restarts it)",
                timeout.as_millis()
            );
            actor.remember("initialize_timeout", json!({ "pid": pid, "timeout_ms": timeout.as_millis() as u64 }));
            for waiter in actor.waiting.drain(..) {
                let _ = waiter.send(Err(reason.clone()));
            }
            process::signal_group(pid as i32, nix::sys::signal::Signal::SIGKILL);
        });
        ctx.spawn(receiver.into_actor(self).map(move |answer, actor, _| {
            // The answer of a child that is gone or was given up on says nothing to whoever
            // waits now: they wait for the next child (its death, or the timeout, told the
            // ones who waited for this one).
            if !actor
                .child
                .as_ref()
                .is_some_and(|live| live.generation == generation && !live.abandoned)
            {
                return;
            }
            let ready = matches!(answer, Ok(Ok(_)));
            if ready {
                actor.write(&json!({ "method": "initialized" }));
                if let Some(live) = actor
                    .child
                    .as_mut()
                    .filter(|live| live.generation == generation)
                {
                    live.initialized = true;
                }
                actor.status = ServerStatus::Running;
            }
            let result = if ready {
                Ok((generation, pid))
            } else {
                Err(format!("the app-server did not initialize: {answer:?}"))
            };
            for waiter in actor.waiting.drain(..) {
                let _ = waiter.send(result.clone());
            }
            actor.changed();
        }));
        self.changed();
    }

    /// A server request: an approval request of a turn that asks a person goes to that turn;
    /// other approvals are answered by the project's policy, anything else refused.
    fn answer_server_request(&mut self, id: Value, method: &str, params: &Value) {
        let thread = params["threadId"].as_str().unwrap_or_default().to_string();
        if self.asking.contains(&thread)
            && matches!(
                method,
                "item/commandExecution/requestApproval" | "item/fileChange/requestApproval"
            )
        {
            self.remember(
                "server_request",
                json!({ "method": method, "answer": "asked a person" }),
            );
            let event = TurnEvent::Request {
                id,
                method: method.to_string(),
                params: params.clone(),
            };
            deliver(&mut self.turns, &thread, event);
            return;
        }
        let decision = if self.full_access {
            "accept"
        } else {
            "decline"
        };
        let legacy = if self.full_access {
            "approved"
        } else {
            "denied"
        };
        let reply = match method {
            "item/commandExecution/requestApproval"
            | "item/fileChange/requestApproval"
            | "item/permissions/requestApproval" => {
                json!({ "id": id, "result": { "decision": decision } })
            }
            "execCommandApproval" | "applyPatchApproval" => {
                json!({ "id": id, "result": { "decision": legacy } })
            }
            other => json!({
                "id": id,
                "error": { "code": -32601, "message": format!("corral does not handle the server request '{other}'") }
            }),
        };
        let answered = reply
            .get("result")
            .cloned()
            .unwrap_or_else(|| reply["error"].clone());
        self.write(&reply);
        self.remember(
            "server_request",
            json!({ "method": method, "answer": answered }),
        );
        if let Some(thread) = params["threadId"].as_str() {
            let event = TurnEvent::Notification {
                method: "corral/serverRequest".into(),
                params: json!({ "method": method, "answer": answered, "request": params }),
            };
            deliver(&mut self.turns, thread, event);
        }
    }

    /// Tells every turn in progress and every pending call that the transport closed.
    fn report_death(&mut self, ctx: &mut Context<Self>) {
        let Some(live) = self.child.take() else {
            return;
        };
        // Callers still waiting asked for a running child after this one was served (or given
        // up on): they get the next one, not this one's failure.
        let served = live.initialized || live.abandoned;
        let death = live.death.unwrap_or_default();
        let details = json!({
            "pid": live.pid,
            "generation": live.generation,
            "exit_code": death.exit_code,
            "signal": death.signal,
            "status": if death.exited { "exited" } else { "unknown" },
            "partial_line_flushed": death.partial_len.is_some(),
            "partial_line_length": death.partial_len.unwrap_or(0),
            "close_source": death.source.unwrap_or("unknown"),
            "turn_status": "inProgress",
        });
        // Each channel has its last slot free (`deliver`).
        for (_, turn) in self.turns.drain() {
            let _ = turn.try_send(TurnEvent::Closed {
                details: details.clone(),
            });
        }
        self.loading.clear();
        self.starting.clear();
        for (_, call) in self.pending.drain() {
            let _ = call.send(Err(RpcError::new(
                -32603,
                "the app-server transport closed",
            )));
        }
        self.last_exit = Some(details.clone());
        self.remember("closed", details);
        self.status = ServerStatus::Stopped;
        if served {
            // Callers that asked while this child was dying asked for a running child: start
            // one (a restart, counted toward the limit).
            if !self.waiting.is_empty() {
                self.start_for_waiters(ctx);
            }
        } else {
            for waiter in self.waiting.drain(..) {
                let _ = waiter.send(Err("the app-server exited during its handshake".into()));
            }
        }
        self.changed();
    }

    /// Starts a child for the waiting callers, unless one is starting: at once the first time,
    /// after a backoff for a restart, or not at all past the restart limit (the waiters are
    /// then told why).
    fn start_for_waiters(&mut self, ctx: &mut Context<Self>) {
        if self.stopping {
            for waiter in self.waiting.drain(..) {
                let _ = waiter.send(Err("the daemon is shutting down".into()));
            }
            return;
        }
        // `Starting` without a child: a restart is already scheduled.
        if self.child.is_none() && self.status != ServerStatus::Starting {
            let restarts = self.recent_restarts();
            if self.generation > 0 && restarts >= MAX_RESTARTS {
                let reason = format!(
                "the app-server restarted {restarts} times within {} s; not restarting (try again later)",
                RESTART_WINDOW.as_secs()
            );
                self.status = ServerStatus::Failed {
                    reason: reason.clone(),
                };
                for waiter in self.waiting.drain(..) {
                    let _ = waiter.send(Err(reason.clone()));
                }
                self.changed();
            } else if self.spawned_here {
                // A restart: back off, doubling with each restart in the window.
                self.restarts.push_back(Instant::now());
                let backoff =
                    (RESTART_BACKOFF * 2u32.pow(restarts as u32)).min(Duration::from_secs(5));
                // `Starting` makes concurrent callers wait instead of scheduling twice.
                self.status = ServerStatus::Starting;
                ctx.run_later(backoff, |actor, ctx| actor.spawn_child(ctx));
                self.remember(
                    "restarting",
                    json!({ "backoff_ms": backoff.as_millis() as u64 }),
                );
            } else {
                self.spawn_child(ctx);
            }
        }
    }

    /// Restarts in the window; drops the ones older than it.
    fn recent_restarts(&mut self) -> usize {
        let now = Instant::now();
        while self
            .restarts
            .front()
            .is_some_and(|at| now.duration_since(*at) > RESTART_WINDOW)
        {
            self.restarts.pop_front();
        }
        self.restarts.len()
    }
}

impl Actor for AppServerActor {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        if let Some(live) = &self.child {
            process::signal_group(live.pid as i32, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

async fn read_stdout(pipe: impl AsyncRead + Unpin, generation: u64, actor: Addr<AppServerActor>) {
    let mut reader = BufReader::new(pipe);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer).await {
            Ok(0) | Err(_) => {
                actor.do_send(StdoutEnded {
                    generation,
                    partial_len: None,
                });
                return;
            }
            Ok(_) => {
                let complete = buffer.last() == Some(&b'\n');
                let line = String::from_utf8_lossy(&buffer).trim_end().to_string();
                let length = buffer.len();
                actor.do_send(StdoutLine { generation, line });
                if !complete {
                    // The last line had no newline: it was still parsed; say so at the close.
                    actor.do_send(StdoutEnded {
                        generation,
                        partial_len: Some(length),
                    });
                    return;
                }
            }
        }
    }
}

async fn read_stderr(pipe: impl AsyncRead + Unpin, generation: u64, actor: Addr<AppServerActor>) {
    let mut lines = BufReader::new(pipe).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        actor.do_send(StderrLine { generation, line });
    }
}

// ---------------------------------------------------------------------------------------------
// Messages.

/// The cloneable way to reach a project's app-server actor ([`AppServers::of`] starts it).
/// Needs a running actix system. Once the actor is gone (it stops only with the daemon)
/// every call answers as if its child were not running.
///
/// [`AppServers::of`]: super::app_servers::AppServers::of
#[derive(Clone)]
pub struct AppServerHandle(Addr<AppServerActor>);

impl AppServerHandle {
    /// Starts `actor`.
    pub fn start(actor: AppServerActor) -> AppServerHandle {
        AppServerHandle(actor.start())
    }

    /// Whether the actor still runs.
    pub fn connected(&self) -> bool {
        self.0.connected()
    }

    /// Starts the child unless it runs or is starting, and waits until it serves: its
    /// generation and pid, or why it does not run.
    pub async fn ensure_running(&self) -> Result<(u64, u32), String> {
        self.0
            .send(EnsureRunning)
            .await
            .unwrap_or_else(|error| Err(error.to_string()))
    }

    /// The child's generation and pid if it serves now.
    pub async fn serving(&self) -> Option<(u64, u32)> {
        self.0.send(Serving).await.ok().flatten()
    }

    /// How long until a child that hit its restart limit may be started again.
    pub async fn retry_after(&self) -> Option<Duration> {
        self.0.send(RetryAfter).await.ok().flatten()
    }

    /// A JSON-RPC request to the child: its result, or its error.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let call = Call {
            method: method.to_string(),
            params,
        };
        self.0
            .send(call)
            .await
            .unwrap_or_else(|error| Err(RpcError::new(-32603, error.to_string())))
    }

    /// Routes thread `thread_id`'s notifications (and, with `asks`, its approval requests) to
    /// `sender`.
    pub fn watch_thread(&self, thread_id: String, sender: mpsc::Sender<TurnEvent>, asks: bool) {
        self.0.do_send(WatchThread {
            thread_id,
            sender,
            asks,
        });
    }

    /// Stops routing thread `thread_id`'s notifications.
    pub fn unwatch_thread(&self, thread_id: String) {
        self.0.do_send(UnwatchThread(thread_id));
    }

    /// Answers a request of the child of `generation` (a newer child never gets it).
    pub fn respond(&self, line: String, generation: u64) {
        self.0.do_send(Respond { line, generation });
    }

    /// The engine path and the project's variables the next child starts with.
    pub fn use_program(&self, program: PathBuf, env: crate::store::environment::Environment) {
        self.0.do_send(UseProgram(program, env));
    }

    /// Kills the child's process group (it is restarted on demand).
    pub fn kill_child(&self) {
        self.0.do_send(KillChild);
    }

    /// Stops the child (SIGTERM, SIGKILL after `grace`): its state once it is gone.
    pub async fn stop_child(&self, grace: Duration) -> Option<AppServerState> {
        self.0.send(StopChild { grace }).await.ok()
    }

    /// The actor's state, for `status`.
    pub async fn snapshot(&self) -> Option<AppServerState> {
        self.0.send(Snapshot).await.ok()
    }
}

/// Starts the child if it is not running; answers `(generation, pid)` once it serves.
#[derive(Message)]
#[rtype(result = "Result<(u64, u32), String>")]
struct EnsureRunning;

impl Handler<EnsureRunning> for AppServerActor {
    type Result = ResponseFuture<Result<(u64, u32), String>>;

    fn handle(&mut self, _: EnsureRunning, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(live) = self
            .child
            .as_ref()
            .filter(|live| live.initialized && live.death.is_none())
        {
            let ready = Ok((live.generation, live.pid));
            return Box::pin(async move { ready });
        }
        let (sender, receiver) = oneshot::channel();
        self.waiting.push(sender);
        self.start_for_waiters(ctx);
        Box::pin(async move {
            receiver
                .await
                .unwrap_or_else(|_| Err("the app-server actor stopped".into()))
        })
    }
}

/// The child serving now, `(generation, pid)`, if one is running and initialized. Unlike
/// [`EnsureRunning`] it never starts one: a worker holding a slot asks this, so that it never
/// waits for a (re)start with the slot.
#[derive(Message)]
#[rtype(result = "Option<(u64, u32)>")]
struct Serving;

impl Handler<Serving> for AppServerActor {
    type Result = Option<(u64, u32)>;

    fn handle(&mut self, _: Serving, _: &mut Context<Self>) -> Option<(u64, u32)> {
        self.child
            .as_ref()
            .filter(|live| live.initialized && live.death.is_none())
            .map(|live| (live.generation, live.pid))
    }
}

/// When the actor has stopped restarting (the intensity limit): how long until a restart is
/// allowed again. `None` when it is not in that state.
#[derive(Message)]
#[rtype(result = "Option<Duration>")]
struct RetryAfter;

impl Handler<RetryAfter> for AppServerActor {
    type Result = Option<Duration>;

    fn handle(&mut self, _: RetryAfter, _: &mut Context<Self>) -> Option<Duration> {
        if !matches!(self.status, ServerStatus::Failed { .. }) {
            return None;
        }
        self.recent_restarts();
        let oldest = self.restarts.front()?;
        Some(RESTART_WINDOW.saturating_sub(oldest.elapsed()) + Duration::from_millis(10))
    }
}

/// Sends a request and answers with its result (or its error object).
#[derive(Message)]
#[rtype(result = "Result<Value, RpcError>")]
struct Call {
    pub method: String,
    pub params: Value,
}

impl Handler<Call> for AppServerActor {
    type Result = ResponseFuture<Result<Value, RpcError>>;

    fn handle(&mut self, mut call: Call, _: &mut Context<Self>) -> Self::Result {
        if call.method == "thread/resume" {
            let thread = call.params["threadId"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let loaded = self
                .child
                .as_ref()
                .is_some_and(|live| live.loaded.contains(&thread));
            if loaded {
                let answer = json!({ "thread": { "id": thread }, "alreadyLoaded": true });
                return Box::pin(async move { Ok(answer) });
            }
        }
        if call.method == "turn/steer" && call.params.get("expectedTurnId").is_none() {
            // codex takes a steer only for the turn it names: the one running on the thread.
            let thread = call.params["threadId"].as_str().unwrap_or_default();
            let running = self
                .child
                .as_ref()
                .and_then(|live| live.running_turns.get(thread).cloned());
            match running {
                Some(turn) => call.params["expectedTurnId"] = json!(turn),
                None => {
                    let message =
                        format!("no turn is running on thread {thread}: nothing to steer");
                    return Box::pin(async move { Err(RpcError::new(-32602, message)) });
                }
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        match call.method.as_str() {
            "thread/start" => {
                self.loading.insert(id, None);
            }
            "thread/resume" => {
                let thread = call.params["threadId"].as_str().map(str::to_string);
                self.loading.insert(id, thread);
            }
            "turn/start" => {
                if let Some(thread) = call.params["threadId"].as_str() {
                    self.starting.insert(id, thread.to_string());
                }
            }
            _ => {}
        }
        let (sender, receiver) = oneshot::channel();
        let sent = self.write(&json!({ "id": id, "method": call.method, "params": call.params }));
        if !sent {
            return Box::pin(async { Err(RpcError::new(-32603, "the app-server is not running")) });
        }
        self.pending.insert(id, sender);
        Box::pin(async move {
            receiver
                .await
                .unwrap_or_else(|_| Err(RpcError::new(-32603, "the app-server transport closed")))
        })
    }
}

/// Routes a thread's notifications to a turn (replacing any earlier watcher of the thread).
#[derive(Message)]
#[rtype(result = "()")]
struct WatchThread {
    pub thread_id: String,
    /// From [`turn_channel`].
    pub sender: mpsc::Sender<TurnEvent>,
    /// The turn asks a person (policy `ask`): its approval requests are routed to it.
    pub asks: bool,
}

impl Handler<WatchThread> for AppServerActor {
    type Result = ();

    fn handle(&mut self, watch: WatchThread, _: &mut Context<Self>) {
        if self.child.is_none() {
            let _ = watch.sender.try_send(TurnEvent::Closed {
                details: json!({ "close_source": "not running", "turn_status": "notStarted" }),
            });
            return;
        }
        if watch.asks {
            self.asking.insert(watch.thread_id.clone());
        } else {
            self.asking.remove(&watch.thread_id);
        }
        self.turns.insert(watch.thread_id, watch.sender);
    }
}

/// A turn's answer to a server request ([`TurnEvent::Request`]): one JSON-RPC response line,
/// written to the child that asked (a child restarted since never gets it).
#[derive(Message)]
#[rtype(result = "()")]
struct Respond {
    pub line: String,
    pub generation: u64,
}

impl Handler<Respond> for AppServerActor {
    type Result = ();

    fn handle(&mut self, respond: Respond, _: &mut Context<Self>) {
        let Ok(response) = serde_json::from_str::<Value>(&respond.line) else {
            return;
        };
        if self
            .child
            .as_ref()
            .is_some_and(|live| live.generation == respond.generation)
        {
            self.write(&response);
        }
    }
}

/// Stops routing a thread's notifications.
#[derive(Message)]
#[rtype(result = "()")]
struct UnwatchThread(String);

impl Handler<UnwatchThread> for AppServerActor {
    type Result = ();

    fn handle(&mut self, UnwatchThread(thread): UnwatchThread, _: &mut Context<Self>) {
        self.asking.remove(&thread);
        self.turns.remove(&thread);
    }
}

/// The engine's path as the settings say it now, and the project's variables (read at every
/// turn): the next child runs with them. A child that runs with others and serves nothing is
/// ended at once (its close says `program changed`), so that the next turn gets one of the new
/// path or variables without a daemon restart, and without counting as a crash; a busy one
/// finishes its turns and is replaced at a later turn's ask.
#[derive(Message)]
#[rtype(result = "()")]
struct UseProgram(PathBuf, crate::store::environment::Environment);

impl Handler<UseProgram> for AppServerActor {
    type Result = ();

    fn handle(&mut self, UseProgram(program, env): UseProgram, _: &mut Context<Self>) {
        if program != self.program {
            self.remember(
                "program_changed",
                json!({ "from": self.program, "to": program }),
            );
            self.program = program;
        }
        self.env = env;
        let idle = self.turns.is_empty() && self.pending.is_empty() && self.waiting.is_empty();
        let Some(live) = self.child.as_mut().filter(|live| {
            (live.program != self.program || live.env != self.env) && live.death.is_none()
        }) else {
            return;
        };
        if !idle || !live.initialized {
            return;
        }
        // Not handed out from now on (`EnsureRunning`, `Serving`); its death is reported as
        // any other, and the next child starts at once, not as a restart.
        live.death = Some(Death {
            source: Some("program changed"),
            ..Death::default()
        });
        self.spawned_here = false;
        process::signal_group(live.pid as i32, nix::sys::signal::Signal::SIGTERM);
    }
}

/// Ends the child's process group (a turn that ignores `turn/interrupt`); the next
/// `EnsureRunning` starts a new one.
#[derive(Message)]
#[rtype(result = "()")]
struct KillChild;

impl Handler<KillChild> for AppServerActor {
    type Result = ();

    fn handle(&mut self, _: KillChild, _: &mut Context<Self>) {
        if let Some(pid) = self.child.as_ref().map(|live| live.pid) {
            self.remember(
                "killed",
                json!({ "pid": pid, "reason": "a turn did not end after turn/interrupt" }),
            );
            process::signal_group(pid as i32, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Ends the child for the daemon's shutdown, once no turn runs: SIGTERM to its group, SIGKILL
/// after `grace`. Replies with the state it leaves (stopped, the ended child in `last_exit`
/// with `close_source: "daemon shutdown"`), which the caller stores: the next daemon must not
/// take a child stopped with its daemon for one that died with it.
#[derive(Message)]
#[rtype(result = "AppServerState")]
struct StopChild {
    pub grace: Duration,
}

impl Handler<StopChild> for AppServerActor {
    type Result = ResponseActFuture<Self, AppServerState>;

    fn handle(&mut self, StopChild { grace }: StopChild, _: &mut Context<Self>) -> Self::Result {
        self.stopping = true;
        let pid = self.child.as_ref().map(|live| live.pid);
        Box::pin(
            async move {
                if let Some(pid) = pid {
                    process::end_orphan_group(pid as i32, grace).await;
                }
                pid
            }
            .into_actor(self)
            .map(|pid, actor, ctx| {
                if let Some(pid) = pid {
                    // Its exit may not have been read yet: it is gone all the same.
                    if actor.child.is_some() {
                        actor.report_death(ctx);
                    }
                    if let Some(exit) = actor.last_exit.as_mut().filter(|exit| exit["pid"] == pid) {
                        exit["close_source"] = json!("daemon shutdown");
                    }
                    actor.remember(
                        "stopped",
                        json!({ "pid": pid, "reason": "daemon shutdown" }),
                    );
                }
                actor.status = ServerStatus::Stopped;
                actor.changed();
                actor.state()
            }),
        )
    }
}

/// The state for `status`.
#[derive(Message)]
#[rtype(result = "AppServerState")]
struct Snapshot;

impl Handler<Snapshot> for AppServerActor {
    type Result = MessageResult<Snapshot>;

    fn handle(&mut self, _: Snapshot, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.state())
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct StdoutLine {
    generation: u64,
    line: String,
}

impl Handler<StdoutLine> for AppServerActor {
    type Result = ();

    fn handle(&mut self, message: StdoutLine, _: &mut Context<Self>) {
        if self.child.as_ref().map(|live| live.generation) != Some(message.generation) {
            return;
        }
        let value: Value = match serde_json::from_str(&message.line) {
            Ok(value @ Value::Object(_)) => value,
            _ => {
                // An invalid line is an event, never a crash.
                let line = message.line;
                self.remember("invalid_line", json!({ "line": line }));
                let threads: Vec<String> = self.turns.keys().cloned().collect();
                for thread in threads {
                    let event = TurnEvent::Invalid { line: line.clone() };
                    deliver(&mut self.turns, &thread, event);
                }
                return;
            }
        };
        let method = value
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string);
        match (value.get("id").cloned(), method) {
            (Some(id), Some(method)) => {
                let params = value.get("params").cloned().unwrap_or(Value::Null);
                self.answer_server_request(id, &method, &params);
            }
            (Some(id), None) => {
                let Some(id) = id.as_u64() else { return };
                if let (Some(thread), Some(turn), Some(live)) = (
                    self.starting.remove(&id),
                    value["result"]["turn"]["id"].as_str(),
                    self.child.as_mut(),
                ) {
                    live.running_turns.insert(thread, turn.to_string());
                }
                let loads = self.loading.remove(&id);
                if let (Some(loads), None) = (loads, value.get("error")) {
                    let thread = loads
                        .or_else(|| value["result"]["thread"]["id"].as_str().map(str::to_string));
                    if let (Some(thread), Some(live)) = (thread, self.child.as_mut()) {
                        live.loaded.insert(thread);
                    }
                }
                if let Some(call) = self.pending.remove(&id) {
                    let answer = match value.get("error") {
                        Some(error) => Err(serde_json::from_value(error.clone())
                            .unwrap_or_else(|_| RpcError::new(-32603, error.to_string()))),
                        None => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
                    };
                    let _ = call.send(answer);
                }
            }
            (None, Some(method)) => {
                let params = value.get("params").cloned().unwrap_or(Value::Null);
                let thread = params["threadId"]
                    .as_str()
                    .or_else(|| params["thread"]["id"].as_str())
                    .map(str::to_string);
                if matches!(
                    method.as_str(),
                    "error" | "turn/completed" | "thread/started"
                ) {
                    self.remember(&method, params.clone());
                }
                if let (Some(thread), "thread/tokenUsage/updated") = (&thread, method.as_str()) {
                    let total = &params["tokenUsage"]["total"];
                    if !total.is_null() {
                        if self.usage_totals.get(thread) == Some(total) {
                            return;
                        }
                        self.usage_totals.insert(thread.clone(), total.clone());
                    }
                }
                if let (Some(thread), Some(live)) = (&thread, self.child.as_mut()) {
                    match method.as_str() {
                        "turn/started" => {
                            if let Some(turn) = params["turn"]["id"].as_str() {
                                live.running_turns.insert(thread.clone(), turn.to_string());
                            }
                        }
                        "turn/completed" => {
                            live.running_turns.remove(thread);
                        }
                        _ => {}
                    }
                }
                if let Some(thread) = thread {
                    deliver(
                        &mut self.turns,
                        &thread,
                        TurnEvent::Notification { method, params },
                    );
                }
            }
            (None, None) => {}
        }
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct StderrLine {
    generation: u64,
    line: String,
}

impl Handler<StderrLine> for AppServerActor {
    type Result = ();

    fn handle(&mut self, message: StderrLine, _: &mut Context<Self>) {
        tracing::debug!(
            generation = message.generation,
            line = message.line,
            "app-server stderr"
        );
        self.remember("stderr", json!({ "line": message.line }));
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct StdoutEnded {
    generation: u64,
    partial_len: Option<usize>,
}

impl Handler<StdoutEnded> for AppServerActor {
    type Result = ();

    fn handle(&mut self, message: StdoutEnded, ctx: &mut Context<Self>) {
        let Some(live) = self
            .child
            .as_mut()
            .filter(|live| live.generation == message.generation)
        else {
            return;
        };
        let death = live.death.get_or_insert_with(Death::default);
        death.source.get_or_insert("stdout.end");
        death.stdout_ended = true;
        death.partial_len = message.partial_len;
        if death.exited {
            self.report_death(ctx);
            return;
        }
        // Without stdout the child is useless: end it, and report once it is gone.
        process::signal_group(live.pid as i32, nix::sys::signal::Signal::SIGTERM);
        let generation = message.generation;
        ctx.run_later(DEATH_SETTLE, move |actor, ctx| {
            if actor
                .child
                .as_ref()
                .is_some_and(|live| live.generation == generation)
            {
                if let Some(live) = &actor.child {
                    process::signal_group(live.pid as i32, nix::sys::signal::Signal::SIGKILL);
                }
                actor.report_death(ctx);
            }
        });
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Exited {
    generation: u64,
    status: Option<std::process::ExitStatus>,
}

impl Handler<Exited> for AppServerActor {
    type Result = ();

    fn handle(&mut self, message: Exited, ctx: &mut Context<Self>) {
        let Some(live) = self
            .child
            .as_mut()
            .filter(|live| live.generation == message.generation)
        else {
            return;
        };
        let death = live.death.get_or_insert_with(Death::default);
        death.source.get_or_insert("exit");
        death.exited = true;
        death.exit_code = message.status.and_then(|status| status.code());
        death.signal = message
            .status
            .and_then(|status| std::os::unix::process::ExitStatusExt::signal(&status))
            .map(process::signal_name);
        if death.stdout_ended {
            self.report_death(ctx);
            return;
        }
        // The reader may still hold the last lines: give it a moment to flush them.
        let generation = message.generation;
        ctx.run_later(DEATH_SETTLE, move |actor, ctx| {
            if actor
                .child
                .as_ref()
                .is_some_and(|live| live.generation == generation)
            {
                actor.report_death(ctx);
            }
        });
    }
}
