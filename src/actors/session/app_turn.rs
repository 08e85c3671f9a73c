//! A run as a turn of the project's `codex app-server` child (see `crate::actors::app_server`):
//! resume or start the thread, `turn/start`, follow the thread's notifications until
//! `turn/completed` or the transport closes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use actix::prelude::*;
use serde_json::json;

use super::{event_kind, event_payload, Exit, PromptEnd, RunOutcome, Stop, Worker, EVENT_BATCH};
use crate::actors::app_server::{self, AppServerActor};
use crate::actors::ledger::SetThread;
use crate::engine::{self, EngineEvent, FailureClass, RunVerdict, Sandbox};
use crate::events::EventKind;
use crate::framing;
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
    pub(super) sandbox: Sandbox,
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
        std::fs::create_dir_all(dir)?;
    }
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, exec_id.unwrap_or(""))?;
    std::fs::rename(temporary, path)
}

impl Worker {
    /// Waits until the project's app-server child runs. A child that hit the restart limit is
    /// waited for, not failed: the prompt stays this worker's (nothing is lost) until restarts
    /// are allowed again, or it is cancelled.
    pub(super) async fn wait_app_server(
        &mut self,
        server: &Addr<AppServerActor>,
        prompt_id: &str,
    ) -> Result<(), PromptEnd> {
        let mut announced = false;
        loop {
            let reason = match server.send(app_server::EnsureRunning).await {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(reason)) => reason,
                Err(error) => return Err(PromptEnd::failed(error.to_string())),
            };
            let Ok(Some(wait)) = server.send(app_server::RetryAfter).await else {
                return Err(PromptEnd::failed(reason));
            };
            if !announced {
                announced = true;
                self.event(
                    Some(prompt_id),
                    None,
                    EventKind::AppServerUnavailable,
                    json!({ "reason": reason, "retry_in_ms": wait.as_millis() as u64 }),
                )
                .await;
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                stop = Self::stopped(&mut self.cancel, &mut self.shutdown, prompt_id) => {
                    return Err(PromptEnd::stopped(stop));
                }
            }
        }
    }

    /// Runs one prompt as a turn of the project's app-server: resume or start the thread,
    /// `turn/start`, follow the thread's notifications until `turn/completed` (or the transport
    /// closes). Cancel is `turn/interrupt` first; a turn that does not end within the grace
    /// period gets its child restarted.
    pub(super) async fn run_app_turn(
        &mut self,
        server: &Addr<AppServerActor>,
        turn: AppTurn<'_>,
        settings: &crate::store::settings::Settings,
    ) -> (RunOutcome, Option<String>) {
        let failed = |message: String, class: Option<FailureClass>| RunOutcome::Finished {
            verdict: RunVerdict::Failed { message },
            exit_code: None,
            signal: None,
            answer: None,
            class,
            retry_after: None,
            context: Vec::new(),
            resume_point: None,
        };
        let call = |method: &str, params: serde_json::Value| {
            server.send(app_server::Call {
                method: method.to_string(),
                params,
            })
        };
        let (generation, pid) = (turn.generation, turn.pid);
        // The thread: resume the known one, or start one with the project's policy.
        let thread_id = match turn.thread_id {
            Some(thread) => match call("thread/resume", json!({ "threadId": thread })).await {
                Ok(Ok(_)) => thread.to_string(),
                Ok(Err(error)) => {
                    let class = engine::app_server::classify_rpc_error(error.code, &error.message);
                    return (failed(error.message, Some(class)), None);
                }
                Err(error) => return (failed(error.to_string(), None), None),
            },
            None => {
                let sandbox = match turn.sandbox {
                    Sandbox::ReadOnly => "read-only",
                    Sandbox::WorkspaceWrite => "workspace-write",
                    Sandbox::FullAccess => "danger-full-access",
                };
                // The commands the agent runs in this thread learn their session and where to
                // read the exec driving the current turn (codex's shell environment policy).
                let driver_file = driver_file(&self.shared.home, &self.session_id);
                let mut params = json!({
                    "cwd": turn.cwd,
                    "sandbox": sandbox,
                    "approvalPolicy": "never",
                    "config": { "shell_environment_policy.set": {
                        "CORRAL_HOME": self.shared.home.to_string_lossy(),
                        "CORRAL_SESSION_ID": self.session_id,
                        "CORRAL_DRIVER_FILE": driver_file.to_string_lossy(),
                    } },
                });
                if let Some(model) = turn.model {
                    params["model"] = json!(model);
                }
                match call("thread/start", params).await {
                    Ok(Ok(started)) => match started["thread"]["id"].as_str() {
                        Some(id) => id.to_string(),
                        None => {
                            return (
                                failed("thread/start answered no thread id".into(), None),
                                None,
                            )
                        }
                    },
                    Ok(Err(error)) => {
                        let class =
                            engine::app_server::classify_rpc_error(error.code, &error.message);
                        return (failed(error.message, Some(class)), None);
                    }
                    Err(error) => return (failed(error.to_string(), None), None),
                }
            }
        };
        // A new thread is stored the moment it exists, with its event, so that a daemon
        // killed during this turn resumes it on the rerun; a resumed one is not told again.
        let mut batch = Vec::new();
        if turn.thread_id.is_none() {
            let started = self.new_event(
                turn.prompt,
                turn.run_id,
                EventKind::ThreadStarted,
                json!({ "thread_id": thread_id, "app_server_pid": pid, "generation": generation }),
            );
            let set = SetThread {
                session_id: self.session_id.clone(),
                thread_id: Some(thread_id.clone()),
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
        let (sender, mut notifications) = app_server::turn_channel();
        server.do_send(app_server::WatchThread {
            thread_id: thread_id.clone(),
            sender,
        });
        let driver = turn.driver_exec.map(str::to_string);
        if self.driver_written.as_ref() != Some(&driver) {
            match write_driver_file(&self.shared.home, &self.session_id, turn.driver_exec) {
                Ok(()) => self.driver_written = Some(driver),
                Err(error) => tracing::warn!(%error, "the driver file was not written"),
            }
        }
        let mut input = vec![json!({ "type": "text", "text": turn.text })];
        let images = if turn.continuing {
            &[][..]
        } else {
            &turn.prompt.images[..]
        };
        for image in images {
            input.push(json!({ "type": "localImage", "path": image }));
        }
        let turn_id = match call(
            "turn/start",
            json!({ "threadId": thread_id, "input": input }),
        )
        .await
        {
            Ok(Ok(started)) => started["turn"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            Ok(Err(error)) => {
                server.do_send(app_server::UnwatchThread(thread_id.clone()));
                let class = engine::app_server::classify_rpc_error(error.code, &error.message);
                return (failed(error.message, Some(class)), Some(thread_id));
            }
            Err(error) => return (failed(error.to_string(), None), Some(thread_id)),
        };
        let mut answer = None;
        let deadline = tokio::time::sleep(settings.run_timeout);
        tokio::pin!(deadline);
        // Events are stored when a batch is full or has waited FLUSH_AFTER, and at the turn's
        // end: a quick turn costs one commit, a long one streams with a short delay.
        let flush = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(flush);
        let mut flush_armed = false;
        let mut stop: Option<Stop> = None;
        let outcome = loop {
            tokio::select! {
                _ = &mut flush, if flush_armed => {
                    flush_armed = false;
                    if let Err(error) = self.try_store_events(std::mem::take(&mut batch)).await {
                        // Past `store.lock_timeout_ms`, as a child run is: ended.
                        let _ = call("turn/interrupt", json!({ "threadId": thread_id, "turnId": turn_id })).await;
                        break failed(format!("{error}; the turn was interrupted"), Some(FailureClass::Other));
                    }
                }
                next = notifications.recv() => {
                    let Some(next) = next else {
                        break failed("the app-server stopped routing this turn".into(), Some(FailureClass::TransportClosed));
                    };
                    match next {
                        app_server::TurnEvent::Notification { method, params } => {
                            if method == "corral/serverRequest" {
                                batch.push(self.new_event(turn.prompt, turn.run_id, EventKind::ServerRequest, params.clone()));
                            } else if method == "error" {
                                // willRetry: true keeps the turn in progress: an event, not a failure.
                                batch.push(self.new_event(turn.prompt, turn.run_id, EventKind::Notice, json!({
                                    "message": params["error"]["message"],
                                    "will_retry": params["willRetry"],
                                    "codex_error_info": params["error"]["codexErrorInfo"],
                                })));
                            } else {
                                for event in engine::app_server::notification_events(&method, &params) {
                                    let event = match event {
                                        EngineEvent::Message { text } => {
                                            let (title, visible) = framing::extract_title(&text);
                                            if let Some(title) = title {
                                                self.set_title(turn.prompt, Some(turn.run_id), &title, &mut batch).await;
                                            }
                                            answer = Some(visible.clone());
                                            EngineEvent::Message { text: visible }
                                        }
                                        other => other,
                                    };
                                    batch.push(self.new_event(turn.prompt, turn.run_id, event_kind(&event), event_payload(&event)));
                                }
                            }
                            if method == "turn/completed" && params["turn"]["id"].as_str().is_none_or(|id| id == turn_id) {
                                let status = params["turn"]["status"].as_str().unwrap_or_default();
                                let error = &params["turn"]["error"];
                                break match (status, stop) {
                                    ("completed", _) => RunOutcome::Finished {
                                        verdict: RunVerdict::Succeeded,
                                        exit_code: None,
                                        signal: None,
                                        answer: answer.clone(),
                                        class: None,
                                        retry_after: None,
                                        context: Vec::new(),
                                        resume_point: None,
                                    },
                                    // A turn has no process of its own: its exit is the turn's.
                                    (_, Some(stop)) => RunOutcome::Stopped(stop, Exit::default()),
                                    ("interrupted", None) => failed("the turn was interrupted".into(), None),
                                    _ => failed(
                                        error["message"].as_str().unwrap_or("the turn failed").to_string(),
                                        Some(engine::app_server::classify_error(error)),
                                    ),
                                };
                            }
                        }
                        app_server::TurnEvent::Invalid { line } => {
                            batch.push(self.new_event(turn.prompt, turn.run_id, EventKind::Raw, json!({ "line": line })));
                        }
                        app_server::TurnEvent::Overflowed => {
                            let _ = call("turn/interrupt", json!({ "threadId": thread_id, "turnId": turn_id })).await;
                            break failed(
                                format!(
                                    "the store stayed locked while {} of the turn's notifications waited: the turn was interrupted",
                                    app_server::TURN_BACKLOG
                                ),
                                Some(FailureClass::Other),
                            );
                        }
                        app_server::TurnEvent::Closed { details } => {
                            batch.push(self.new_event(turn.prompt, turn.run_id, EventKind::TransportClosed, details.clone()));
                            break match stop {
                                Some(stop) => RunOutcome::Stopped(stop, Exit::default()),
                                None => failed(
                                    format!("the app-server closed before turn/completed ({})", details["close_source"].as_str().unwrap_or("?")),
                                    Some(FailureClass::TransportClosed),
                                ),
                            };
                        }
                    }
                    if batch.len() >= EVENT_BATCH {
                        flush_armed = false;
                        if let Err(error) = self.try_store_events(std::mem::take(&mut batch)).await {
                            // Past `store.lock_timeout_ms`, as a child run is: ended.
                        let _ = call("turn/interrupt", json!({ "threadId": thread_id, "turnId": turn_id })).await;
                        break failed(format!("{error}; the turn was interrupted"), Some(FailureClass::Other));
                        }
                    } else if !batch.is_empty() && !flush_armed {
                        flush_armed = true;
                        flush.as_mut().reset(tokio::time::Instant::now() + FLUSH_AFTER);
                    }
                }
                stopped = Self::stopped(&mut self.cancel, &mut self.shutdown, &turn.prompt.id), if stop.is_none() => {
                    stop = Some(stopped);
                    let _ = call("turn/interrupt", json!({ "threadId": thread_id, "turnId": turn_id })).await;
                    // The turn has the grace period to end; then its child is restarted.
                    deadline.as_mut().reset(tokio::time::Instant::now() + settings.cancel_grace);
                }
                _ = &mut deadline => {
                    if let Some(stop) = stop {
                        // The turn ignored turn/interrupt: restart the child.
                        server.do_send(app_server::KillChild);
                        break RunOutcome::Stopped(stop, Exit::default());
                    }
                    let _ = call("turn/interrupt", json!({ "threadId": thread_id, "turnId": turn_id })).await;
                    break RunOutcome::TimedOut(Exit::default());
                }
            }
        };
        server.do_send(app_server::UnwatchThread(thread_id.clone()));
        batch.push(self.new_event(
            turn.prompt,
            turn.run_id,
            EventKind::RunExited,
            json!({ "turn_id": turn_id, "app_server_pid": pid }),
        ));
        // Stored with the run's end (one commit with the prompt's end for a last run).
        self.deferred.append(&mut batch);
        (outcome, Some(thread_id))
    }
}
