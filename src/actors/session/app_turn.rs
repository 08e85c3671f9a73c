//! A run as a turn of the project's `codex app-server` child (see `crate::actors::app_server`):
//! resume or start the thread, `turn/start`, follow the thread's notifications until
//! `turn/completed` or the transport closes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::asking::Talk;
use super::{Exit, PromptEnd, RunOutcome, Stop, While, Worker, EVENT_BATCH};
use crate::actors::app_server::{self, AppServerHandle};
use crate::actors::ledger::SetThread;
use crate::engine::{self, EngineEvent, EngineKind, FailureClass, Policy, RunVerdict};
use crate::events::{
    AppServerUnavailable, Notice, OutputLine, Payload, RunExited, RunStarted, ServerRequest,
    ThreadStarted, TransportClosed,
};
use crate::framing;
use crate::store::events::NewEvent;
use crate::store::prompts::Prompt;

/// How long a turn's events may wait to be stored with the next ones.
const FLUSH_AFTER: Duration = Duration::from_millis(20);

/// One turn on an app-server.
pub(super) struct AppTurn<'a> {
    pub(super) prompt: &'a Prompt,
    pub(super) run_id: &'a str,
    pub(super) thread_id: Option<&'a str>,
    pub(super) text: &'a str,
    /// The thread holds the prompt from a failed turn: `text` continues it, without images.
    pub(super) continuing: bool,
    pub(super) model: Option<&'a str>,
    pub(super) policy: Policy,
    /// The session's reasoning effort (`turn/start`'s `effort`).
    pub(super) effort: Option<&'a str>,
    pub(super) cwd: &'a str,
    /// The exec that drives this turn: the parent of the commands the agent runs in it.
    pub(super) driver_exec: Option<&'a str>,
    /// The generation and pid of the child serving the turn (already recorded on the run).
    pub(super) generation: u64,
    pub(super) pid: u32,
}

/// Where the exec driving a session's current turn is written for an app-server's agent: the
/// child is long-lived and serves many sessions, so its environment cannot say it; the
/// thread's commands get this file's path instead (`CORRAL_DRIVER_FILE`), and a `corral` run
/// there reads its parent from it.
pub fn driver_file(home: &Path, session_id: &str) -> PathBuf {
    home.join("drivers").join(session_id)
}

/// Writes the driver file atomically (a temporary file renamed over it).
fn write_driver_file(home: &Path, session_id: &str, exec_id: Option<&str>) -> std::io::Result<()> {
    let path = driver_file(home, session_id);
    if let Some(dir) = path.parent() {
        crate::home::create_private_dir(dir, false)?;
    }
    let temporary = path.with_extension("tmp");
    // Private like every file of the home; not fsynced: it only matters while the daemon lives.
    let mut file = crate::home::private_file()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&temporary)?;
    std::io::Write::write_all(&mut file, exec_id.unwrap_or("").as_bytes())?;
    std::fs::rename(temporary, path)
}

impl Worker {
    /// Waits until the project's app-server child runs. A child that hit the restart limit is
    /// waited for, not failed: the prompt stays this worker's (nothing is lost) until restarts
    /// are allowed again, or it is cancelled.
    pub(super) async fn wait_app_server(
        &mut self,
        server: &AppServerHandle,
        prompt_id: &str,
    ) -> Result<(), PromptEnd> {
        let mut announced = false;
        loop {
            let reason = match server.ensure_running().await {
                Ok(_) => return Ok(()),
                Err(reason) => reason,
            };
            let Some(wait) = server.retry_after().await else {
                return Err(PromptEnd::failed(reason));
            };
            if !announced {
                announced = true;
                self.event(
                    Some(prompt_id),
                    None,
                    Payload::AppServerUnavailable(AppServerUnavailable {
                        reason: reason.to_string(),
                        retry_in_ms: wait.as_millis() as u64,
                    }),
                )
                .await;
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                stop = self.stops.stopped(&self.session_id, prompt_id, While::Starting) => {
                    return Err(PromptEnd::stopped(stop));
                }
            }
        }
    }

    /// Runs one prompt as a turn of the project's app-server: resume or start the thread,
    /// `turn/start`, follow the thread's notifications until `turn/completed` (or the transport
    /// closes). Cancel is `turn/interrupt` first; a turn that does not end within the grace
    /// period gets its child restarted. Returns the run's outcome and its thread, once known.
    pub(super) async fn run_app_turn(
        &mut self,
        server: &AppServerHandle,
        turn: AppTurn<'_>,
        settings: &crate::store::settings::Settings,
    ) -> (RunOutcome, Option<String>) {
        let server = Server(server);
        let thread_id = match self.open_thread(&server, &turn).await {
            Ok(thread_id) => thread_id,
            Err(failed) => return (failed, None),
        };
        if turn.thread_id.is_none() {
            self.store_new_thread(&turn, &thread_id).await;
        }
        let (sender, notifications) = app_server::turn_channel();
        server
            .0
            .watch_thread(thread_id.clone(), sender, turn.policy == Policy::Ask);
        self.note_driver(turn.driver_exec);
        let turn_id = match start_turn(&server, &turn, &thread_id).await {
            Ok(turn_id) => turn_id,
            Err(failed) => {
                server.unwatch(&thread_id);
                return (failed, Some(thread_id));
            }
        };
        // The run started: a turn of the serving child (its pid), as a child run's start is
        // told; it rides with the turn's first events.
        let started = self.new_event(
            turn.prompt,
            turn.run_id,
            Payload::RunStarted(RunStarted {
                pid: turn.pid,
                engine: EngineKind::CodexAppServer.as_str().to_string(),
                argv: None,
                thread_id: Some(thread_id.clone()),
                turn_id: Some(turn_id.clone()),
            }),
        );
        let mut following = Following {
            thread_id: &thread_id,
            turn_id: &turn_id,
            batch: vec![started],
            answer: None,
            stop: None,
            asks: Vec::new(),
            file_paths: std::collections::HashMap::new(),
        };
        // A person's answers go to the child that asked, as JSON-RPC responses.
        let (answers, mut outgoing) = tokio::sync::mpsc::unbounded_channel::<String>();
        let (actor, generation) = (server.0.clone(), turn.generation);
        tokio::spawn(async move {
            while let Some(line) = outgoing.recv().await {
                actor.respond(line, generation);
            }
        });
        let mut talk = Talk::new(Some(answers));
        let outcome = self
            .follow_turn(
                &server,
                &turn,
                &mut following,
                &mut talk,
                notifications,
                settings,
            )
            .await;
        let why = match &outcome {
            RunOutcome::Stopped(stop, _) => format!("its turn was {}", stop.ended_by()),
            RunOutcome::TimedOut(_) => "its turn timed out".to_string(),
            RunOutcome::Finished { .. } => "its turn ended".to_string(),
            RunOutcome::HandedOver => "its turn was handed over".to_string(),
        };
        self.end_asking(turn.run_id, &mut talk, &why).await;
        server.unwatch(&thread_id);
        let mut batch = std::mem::take(&mut following.batch);
        batch.push(self.new_event(
            turn.prompt,
            turn.run_id,
            Payload::RunExited(turn_exited(&outcome, &turn_id, turn.pid)),
        ));
        // Stored with the run's end (one commit with the prompt's end for a last run).
        self.deferred.append(&mut batch);
        (outcome, Some(thread_id))
    }

    /// The turn's thread: the session's, resumed, or a new one started with the project's
    /// policy.
    async fn open_thread(
        &self,
        server: &Server<'_>,
        turn: &AppTurn<'_>,
    ) -> Result<String, RunOutcome> {
        if let Some(thread) = turn.thread_id {
            server
                .call("thread/resume", json!({ "threadId": thread }))
                .await?;
            return Ok(thread.to_string());
        }
        let sandbox = match turn.policy {
            Policy::ReadOnly => "read-only",
            Policy::WorkspaceWrite | Policy::Ask => "workspace-write",
            Policy::Full => "danger-full-access",
        };
        // The commands the agent runs in this thread learn their session and where to read
        // the exec driving the current turn (codex's shell environment policy).
        let driver_file = driver_file(&self.shared.home, &self.session_id);
        let mut params = json!({
            "cwd": turn.cwd,
            "sandbox": sandbox,
            "approvalPolicy": approval_policy(turn.policy),
            "config": { "shell_environment_policy.set": {
                crate::env::HOME: self.shared.home.to_string_lossy(),
                crate::env::SESSION_ID: self.session_id,
                crate::env::DRIVER_FILE: driver_file.to_string_lossy(),
            } },
        });
        if let Some(model) = turn.model {
            params["model"] = json!(model);
        }
        let started = server.call("thread/start", params).await?;
        started["thread"]["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| RunOutcome::failed("thread/start answered no thread id".into()))
    }

    /// Stores a new thread the moment it exists, with its event, so that a daemon killed
    /// during this turn resumes it on the rerun (a resumed one is not told again).
    async fn store_new_thread(&mut self, turn: &AppTurn<'_>, thread_id: &str) {
        let started = self.new_event(
            turn.prompt,
            turn.run_id,
            Payload::ThreadStarted(ThreadStarted {
                thread_id: thread_id.to_string(),
                app_server_pid: Some(turn.pid),
                generation: Some(turn.generation),
            }),
        );
        let set = SetThread {
            session_id: self.session_id.clone(),
            thread_id: Some(thread_id.to_string()),
            resume_point: None,
        };
        // Not stored (the store stayed locked), the events stay deferred, in order.
        if let Err(unwritten) = self.write_events(set, vec![started]).await {
            tracing::error!(error = %unwritten.error, "the app-server thread was not stored yet");
            // Kept: stored with the prompt's end, which waits out the lock.
            if let Some(set) = unwritten.write {
                self.pending_thread = Some(set);
            }
        }
    }

    /// Writes the driver file when the exec driving the session's turns changed.
    fn note_driver(&mut self, driver_exec: Option<&str>) {
        let driver = driver_exec.map(str::to_string);
        if self.driver_written.as_ref() == Some(&driver) {
            return;
        }
        match write_driver_file(&self.shared.home, &self.session_id, driver_exec) {
            Ok(()) => self.driver_written = Some(driver),
            Err(error) => tracing::warn!(%error, "the driver file was not written"),
        }
    }

    /// Follows the turn until it ends: its notifications become events, stored when a batch
    /// is full or has waited [`FLUSH_AFTER`] (a quick turn costs one commit with the run's
    /// end, a long one streams with a short delay); a cancel or the shutdown interrupts it,
    /// and so does its timeout.
    async fn follow_turn(
        &mut self,
        server: &Server<'_>,
        turn: &AppTurn<'_>,
        following: &mut Following<'_>,
        talk: &mut Talk,
        mut notifications: tokio::sync::mpsc::Receiver<app_server::TurnEvent>,
        settings: &crate::store::settings::Settings,
    ) -> RunOutcome {
        let deadline = tokio::time::sleep(settings.run_timeout);
        tokio::pin!(deadline);
        // The oldest approval's `approvals.timeout_s`, when one waits and it is set.
        let approval_timer = tokio::time::sleep(Duration::from_secs(u32::MAX as u64));
        tokio::pin!(approval_timer);
        let adapter = engine::app_server::AppServer;
        let flush = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(flush);
        let mut flush_armed = false;
        loop {
            let approval_due = talk.next_timeout(settings.approval_timeout);
            if let Some(due) = approval_due {
                approval_timer.as_mut().reset(due);
            }
            tokio::select! {
                answered = self.answers.recv(), if talk.waits() => {
                    if let Some(answered) = answered {
                        self.take_answer(&adapter, talk, answered);
                    }
                    if let Some(paused) = talk.resume() {
                        let at = deadline.deadline() + paused;
                        deadline.as_mut().reset(at);
                    }
                }
                _ = &mut approval_timer, if approval_due.is_some() => {
                    if let Some(timeout) = settings.approval_timeout {
                        self.time_out(&adapter, talk, timeout).await;
                    }
                    if let Some(paused) = talk.resume() {
                        let at = deadline.deadline() + paused;
                        deadline.as_mut().reset(at);
                    }
                }
                _ = &mut flush, if flush_armed => {
                    flush_armed = false;
                    if let Some(failed) = self.flush_turn(server, following).await {
                        return failed;
                    }
                }
                next = notifications.recv() => {
                    let Some(next) = next else {
                        return RunOutcome::failed_as(
                            "the app-server stopped routing this turn".into(),
                            FailureClass::TransportClosed,
                        );
                    };
                    if let Some(ended) = self.take_turn_event(server, turn, following, next).await {
                        return ended;
                    }
                    for asked in std::mem::take(&mut following.asks) {
                        let kind = EngineKind::CodexAppServer;
                        if let Some(error) = self
                            .ask_person(turn.prompt, turn.run_id, kind, &adapter, asked, talk, &mut following.batch)
                            .await
                        {
                            server.interrupt(following).await;
                            return RunOutcome::failed_as(
                                format!("{error}; the turn was interrupted"),
                                FailureClass::Other,
                            );
                        }
                    }
                    if following.batch.len() >= EVENT_BATCH {
                        flush_armed = false;
                        if let Some(failed) = self.flush_turn(server, following).await {
                            return failed;
                        }
                    } else if !following.batch.is_empty() && !flush_armed {
                        flush_armed = true;
                        flush.as_mut().reset(tokio::time::Instant::now() + FLUSH_AFTER);
                    }
                }
                stopped = self.stops.stopped(&self.session_id, &turn.prompt.id, While::Running), if following.stop.is_none() => {
                    following.stop = Some(stopped);
                    server.interrupt(following).await;
                    // The turn has the grace period to end; then its child is restarted.
                    deadline.as_mut().reset(tokio::time::Instant::now() + settings.cancel_grace);
                }
                // A turn that waits for a person is not timed out (its clock stands still);
                // a stopping one has its grace period all the same.
                _ = &mut deadline, if following.stop.is_some() || !talk.waits() => {
                    if let Some(stop) = following.stop {
                        // The turn ignored turn/interrupt: restart the child.
                        server.0.kill_child();
                        return RunOutcome::Stopped(stop, Exit::default());
                    }
                    server.interrupt(following).await;
                    return RunOutcome::TimedOut(Exit::default());
                }
            }
        }
    }

    /// Stores the turn's events now. Past `store.lock_timeout_ms` the turn is interrupted
    /// and fails, as a child run is ended.
    async fn flush_turn(
        &mut self,
        server: &Server<'_>,
        following: &mut Following<'_>,
    ) -> Option<RunOutcome> {
        let batch = std::mem::take(&mut following.batch);
        let error = self.try_store_events(batch).await.err()?;
        server.interrupt(following).await;
        Some(RunOutcome::failed_as(
            format!("{error}; the turn was interrupted"),
            FailureClass::Other,
        ))
    }

    /// Takes one of the turn's events: what it says goes on the batch; returns how the run
    /// ended when this ends it.
    async fn take_turn_event(
        &mut self,
        server: &Server<'_>,
        turn: &AppTurn<'_>,
        following: &mut Following<'_>,
        event: app_server::TurnEvent,
    ) -> Option<RunOutcome> {
        match event {
            app_server::TurnEvent::Notification { method, params } => {
                self.take_notification(turn, following, &method, &params)
                    .await;
                let ours = params["turn"]["id"]
                    .as_str()
                    .is_none_or(|id| id == following.turn_id);
                (method == "turn/completed" && ours).then(|| following.completed(&params["turn"]))
            }
            app_server::TurnEvent::Request { id, method, params } => {
                let item = params["itemId"].as_str().unwrap_or_default();
                let paths = following.file_paths.get(item).map(String::as_str);
                if let Some(asked) =
                    engine::app_server::approval_request(&id, &method, &params, paths)
                {
                    following.asks.push(asked);
                }
                None
            }
            app_server::TurnEvent::Invalid { line } => {
                let raw =
                    self.new_event(turn.prompt, turn.run_id, Payload::Raw(OutputLine { line }));
                following.batch.push(raw);
                None
            }
            app_server::TurnEvent::Overflowed => {
                server.interrupt(following).await;
                Some(RunOutcome::failed_as(
                    format!(
                        "the store stayed locked while {} of the turn's notifications waited: the turn was interrupted",
                        app_server::TURN_BACKLOG
                    ),
                    FailureClass::Other,
                ))
            }
            app_server::TurnEvent::Closed { details } => {
                let closed = self.new_event(
                    turn.prompt,
                    turn.run_id,
                    Payload::TransportClosed(TransportClosed {
                        details: details.clone(),
                    }),
                );
                following.batch.push(closed);
                Some(match following.stop {
                    Some(stop) => RunOutcome::Stopped(stop, Exit::default()),
                    None => RunOutcome::failed_as(
                        format!(
                            "the app-server closed before turn/completed ({})",
                            details["close_source"].as_str().unwrap_or("?")
                        ),
                        FailureClass::TransportClosed,
                    ),
                })
            }
        }
    }

    /// One notification of the turn's thread, as events on the batch. The agent's message
    /// gives the session its title (when it names one) and the prompt its answer.
    async fn take_notification(
        &mut self,
        turn: &AppTurn<'_>,
        following: &mut Following<'_>,
        method: &str,
        params: &serde_json::Value,
    ) {
        let (prompt, run_id) = (turn.prompt, turn.run_id);
        match method {
            "item/started" if params["item"]["type"] == "fileChange" => {
                if let (Some(item), Some(paths)) = (
                    params["item"]["id"].as_str(),
                    engine::app_server::file_change_paths(&params["item"]),
                ) {
                    following.file_paths.insert(item.to_string(), paths);
                }
            }
            "corral/serverRequest" => {
                let told = ServerRequest {
                    method: params["method"].as_str().unwrap_or_default().to_string(),
                    answer: params["answer"].clone(),
                    request: params["request"].clone(),
                };
                let request = self.new_event(prompt, run_id, Payload::ServerRequest(told));
                following.batch.push(request);
            }
            // willRetry: true keeps the turn in progress: an event, not a failure.
            "error" => {
                let notice = self.new_event(
                    prompt,
                    run_id,
                    Payload::Notice(Notice {
                        message: params["error"]["message"].as_str().map(str::to_string),
                        will_retry: Some(params["willRetry"].clone()),
                        codex_error_info: Some(params["error"]["codexErrorInfo"].clone()),
                    }),
                );
                following.batch.push(notice);
            }
            _ => {
                for event in engine::app_server::notification_events(method, params) {
                    let event = match event {
                        EngineEvent::Message { text } => {
                            let (title, visible) = framing::extract_title(&text);
                            if let Some(title) = title {
                                self.set_title(prompt, Some(run_id), &title, &mut following.batch)
                                    .await;
                            }
                            following.answer = Some(visible.clone());
                            EngineEvent::Message { text: visible }
                        }
                        denied @ EngineEvent::Denied { .. } => {
                            self.denied += 1;
                            denied
                        }
                        other => other,
                    };
                    let event = self.new_event(prompt, run_id, event);
                    following.batch.push(event);
                }
            }
        }
    }
}

/// `turn/start` on the thread: the prompt's text, and its images unless the turn continues a
/// failed one (the thread has them). Answers the turn's id.
async fn start_turn(
    server: &Server<'_>,
    turn: &AppTurn<'_>,
    thread_id: &str,
) -> Result<String, RunOutcome> {
    let mut input = vec![json!({ "type": "text", "text": turn.text })];
    if !turn.continuing {
        for image in &turn.prompt.images {
            input.push(json!({ "type": "localImage", "path": image }));
        }
    }
    // The turn's own sandbox, whatever the thread was started with: a `--read-only` prompt, or
    // a project made remote since, on a thread that began writable must not write.
    let mut params = json!({
        "threadId": thread_id,
        "input": input,
        "sandboxPolicy": sandbox_policy(turn.policy),
        "approvalPolicy": approval_policy(turn.policy),
    });
    if let Some(effort) = turn.effort.filter(|effort| !effort.is_empty()) {
        params["effort"] = json!(effort);
    }
    let started = server.call("turn/start", params).await?;
    Ok(started["turn"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// `run.exited` of a turn: its verdict (or what ended it) and the turn's status, as a child
/// run's exit is told; the turn has no process of its own, so no exit code.
fn turn_exited(outcome: &RunOutcome, turn_id: &str, pid: u32) -> RunExited {
    let (verdict, ended_by, status) = match outcome {
        RunOutcome::Finished { verdict, .. } => match verdict {
            RunVerdict::Succeeded => (Some("succeeded"), None, "completed"),
            RunVerdict::Failed { .. } => (Some("failed"), None, "failed"),
        },
        RunOutcome::Stopped(stop, _) => (None, Some(stop.ended_by()), "interrupted"),
        RunOutcome::TimedOut(_) => (None, Some("timed out"), "interrupted"),
        RunOutcome::HandedOver => (None, Some("handed over"), "interrupted"),
    };
    RunExited {
        turn_id: Some(turn_id.to_string()),
        app_server_pid: Some(pid),
        verdict: verdict.map(str::to_string),
        ended_by: ended_by.map(str::to_string),
        status: Some(status.to_string()),
        ..RunExited::default()
    }
}

/// `turn/start`'s `sandboxPolicy` for a sandbox (codex 0.171.0's object form; the thread's
/// own `sandbox` at `thread/start` is its kebab-case name).
fn sandbox_policy(policy: Policy) -> serde_json::Value {
    match policy {
        Policy::ReadOnly => json!({ "type": "readOnly" }),
        Policy::WorkspaceWrite | Policy::Ask => json!({ "type": "workspaceWrite" }),
        Policy::Full => json!({ "type": "dangerFullAccess" }),
    }
}

/// codex's `approvalPolicy` for a policy: under `ask` codex asks (corral routes each request
/// to a person); otherwise it never asks, and refuses what its sandbox does not allow.
fn approval_policy(policy: Policy) -> &'static str {
    match policy {
        Policy::Ask => "on-request",
        _ => "never",
    }
}

/// The project's app-server, as a turn talks to it.
struct Server<'a>(&'a AppServerHandle);

impl Server<'_> {
    /// Sends a request; an error answer (or an app-server gone) is the run's failure, in the
    /// class the error's code and message say.
    async fn call(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, RunOutcome> {
        self.0.call(method, params).await.map_err(|error| {
            let class = engine::app_server::classify_rpc_error(error.code, &error.message);
            RunOutcome::failed_as(error.message, class)
        })
    }

    /// Stops routing the thread's notifications to this turn.
    fn unwatch(&self, thread_id: &str) {
        self.0.unwatch_thread(thread_id.to_string());
    }

    /// Asks the turn to stop. Its answer does not matter: the turn's end (or its absence)
    /// says what happened.
    async fn interrupt(&self, following: &Following<'_>) {
        let params = json!({ "threadId": following.thread_id, "turnId": following.turn_id });
        let _ = self.call("turn/interrupt", params).await;
    }
}

/// What following a turn keeps between its events.
struct Following<'t> {
    thread_id: &'t str,
    turn_id: &'t str,
    /// Events not stored yet.
    batch: Vec<NewEvent>,
    /// The agent's last message: the prompt's answer.
    answer: Option<String>,
    /// Set once the turn was asked to stop (a cancel, the shutdown): its end is then a stop.
    stop: Option<Stop>,
    /// Approval requests the server made, for the worker to ask a person (`asking.rs`).
    asks: Vec<EngineEvent>,
    /// The paths each `fileChange` item names (its approval request names none).
    file_paths: std::collections::HashMap<String, String>,
}

impl Following<'_> {
    /// The run's outcome from `turn/completed`'s turn.
    fn completed(&self, turn: &serde_json::Value) -> RunOutcome {
        match (turn["status"].as_str().unwrap_or_default(), self.stop) {
            ("completed", _) => RunOutcome::Finished {
                verdict: RunVerdict::Succeeded,
                exit_code: None,
                signal: None,
                answer: self.answer.clone(),
                class: None,
                retry_after: None,
                context: Vec::new(),
                resume_point: None,
            },
            // A turn has no process of its own: its exit is the turn's.
            (_, Some(stop)) => RunOutcome::Stopped(stop, Exit::default()),
            ("interrupted", None) => RunOutcome::failed("the turn was interrupted".into()),
            _ => RunOutcome::failed_as(
                turn["error"]["message"]
                    .as_str()
                    .unwrap_or("the turn failed")
                    .to_string(),
                engine::app_server::classify_error(&turn["error"]),
            ),
        }
    }
}

impl RunOutcome {
    /// A run that failed in `class` before it could end otherwise.
    fn failed_as(message: String, class: FailureClass) -> RunOutcome {
        RunOutcome::Finished {
            verdict: RunVerdict::Failed { message },
            exit_code: None,
            signal: None,
            answer: None,
            class: Some(class),
            retry_after: None,
            context: Vec::new(),
            resume_point: None,
        }
    }
}
