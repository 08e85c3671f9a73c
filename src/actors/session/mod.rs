//! The session actor: one per session with work. It owns the session's engine children.
//!
//! The actor itself only takes messages ([`StartWork`], [`CancelPrompt`]); the work is a
//! *worker* future spawned on the actor's context, which runs the session's prompts one after
//! the other:
//!
//! ```text
//! prompt ─► ask the slot manager ─► spawn the engine (own process group, stdin closed)
//!    ▲          (cancellable)          │ stdout/stderr line by line ─► events (ledger)
//!    │                                 ▼
//!    │                       judge the run (last structured line, then exit status)
//!    │                                 │ failed: classify ─► retry policy
//!    │       release the slot, sleep the delay (cancellable) ◄┘      │
//!    └─ finish the prompt and claim the next one, in one transaction ◄┘ done / failed
//! ```
//!
//! Cancelling the running prompt wakes whatever the worker waits on at once: the slot, the
//! retry delay, or the child, whose whole process group is ended (SIGTERM, then SIGKILL after
//! `cancel.grace_ms`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde_json::json;
use tokio::sync::watch;

mod app_turn;
mod child;
pub mod retry;

use super::app_server;
use super::ledger::{
    Both, EndRun, FinishPrompt, RequeuePrompt, SetGeneratedTitle, SetThread, StartRun,
};
use super::slots::{SlotOwner, SlotRequest};
use super::supervisor::Shared;
use crate::engine::{self, EngineEvent, EngineKind, FailureClass, RunSpec, RunVerdict, Sandbox};
use crate::events::EventKind;
use crate::framing;
use crate::store::work::{self, NewEvent, Prompt, PromptStatus, RunEnd};
pub use app_turn::driver_file;
use app_turn::AppTurn;
use child::{ChildEnv, ChildRun};
use retry::{Before, Decision, Failure, Policy, Resend, Retries};

/// A wait for a slot longer than this is announced with a `slot.waiting` event (a grant that
/// comes at once, the common case, costs no event).
const SLOT_NOTICE: Duration = Duration::from_millis(20);

/// Events gathered before they are handed to the ledger in one write.
const EVENT_BATCH: usize = 256;

/// The actor. Private: the supervisor starts it and talks to it through its `Addr`.
pub struct SessionActor {
    session_id: String,
    shared: Arc<Shared>,
    /// The id of the prompt whose cancellation was asked last; the worker ends its current
    /// prompt when this names it.
    cancel: watch::Sender<Option<String>>,
    /// Whether a worker future is running.
    working: bool,
    /// A prompt handed over while the worker was finishing: the worker's last transaction
    /// found nothing queued, then a send claimed this one before the worker future ended.
    /// It starts as soon as that future ends.
    pending: Option<Prompt>,
}

impl SessionActor {
    pub fn new(session_id: String, shared: Arc<Shared>) -> Self {
        SessionActor {
            session_id,
            shared,
            cancel: watch::channel(None).0,
            working: false,
            pending: None,
        }
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;
}

/// Runs `prompt` (already `running` in the store) and then the session's queued prompts.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StartWork(pub Prompt);

impl Handler<StartWork> for SessionActor {
    type Result = ();

    fn handle(&mut self, StartWork(prompt): StartWork, ctx: &mut Context<Self>) {
        if self.working {
            self.pending = Some(prompt);
            return;
        }
        self.start_worker(prompt, ctx);
    }
}

impl SessionActor {
    fn start_worker(&mut self, prompt: Prompt, ctx: &mut Context<Self>) {
        self.working = true;
        let worker = Worker {
            session_id: self.session_id.clone(),
            shared: self.shared.clone(),
            cancel: self.cancel.subscribe(),
            shutdown: self.shared.shutdown_signal(),
            driver_written: None,
            pending_end: None,
            pending_thread: None,
            deferred: Vec::new(),
        };
        ctx.spawn(worker.run(prompt).into_actor(self).map(|_, actor, ctx| {
            actor.working = false;
            if let Some(prompt) = actor.pending.take() {
                actor.start_worker(prompt, ctx);
            }
        }));
    }
}

/// Ends the running prompt `prompt_id` if this session runs it now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelPrompt(pub String);

impl Handler<CancelPrompt> for SessionActor {
    type Result = ();

    fn handle(&mut self, CancelPrompt(prompt_id): CancelPrompt, _: &mut Context<Self>) {
        self.cancel.send_replace(Some(prompt_id));
    }
}

/// Whether the actor has a worker running.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct IsWorking;

impl Handler<IsWorking> for SessionActor {
    type Result = bool;

    fn handle(&mut self, _: IsWorking, _: &mut Context<Self>) -> bool {
        self.working
    }
}

// ---------------------------------------------------------------------------------------------
// The worker.

struct Worker {
    session_id: String,
    shared: Arc<Shared>,
    cancel: watch::Receiver<Option<String>>,
    /// Set when the daemon shuts down: the current prompt is requeued, not cancelled.
    shutdown: watch::Receiver<bool>,
    /// What this worker last wrote to the session's driver file (app-server turns), so that
    /// an unchanged driver costs no file write.
    driver_written: Option<Option<String>>,
    /// The end of the prompt's last run, written with the prompt's end (one commit); a run
    /// followed by a retry is written at once instead.
    pending_end: Option<RunEnd>,
    /// Where the session's thread stands after a successful run (its resume point), written
    /// with the prompt's end.
    pending_thread: Option<SetThread>,
    /// Events not stored yet, in order: they go with the next write (the run's row, the
    /// prompt's end), so that a quick turn costs three commits in all — its prompt queued, its
    /// run started, its prompt ended — however many events it has. Every write of events
    /// takes these first, so the order of a session's events is kept.
    deferred: Vec<NewEvent>,
}

/// Why the worker stopped waiting for a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The prompt was cancelled.
    Cancel,
    /// The daemon shuts down: the prompt goes back to the queue.
    Shutdown,
}

/// How a prompt ended.
struct PromptEnd {
    status: PromptStatus,
    error: Option<String>,
    answer: Option<String>,
    /// Stopped by a shutdown: back to the queue rather than ended.
    requeue: bool,
}

impl PromptEnd {
    fn failed(message: impl Into<String>) -> Self {
        PromptEnd {
            status: PromptStatus::Failed,
            error: Some(message.into()),
            answer: None,
            requeue: false,
        }
    }

    fn stopped(stop: Stop) -> Self {
        PromptEnd {
            status: PromptStatus::Cancelled,
            error: None,
            answer: None,
            requeue: stop == Stop::Shutdown,
        }
    }
}

/// How one run ended, before the policy decides.
enum RunOutcome {
    Finished {
        verdict: RunVerdict,
        exit_code: Option<i32>,
        signal: Option<String>,
        answer: Option<String>,
        /// The class when the engine said it in a structured way (an HTTP status, app-server's
        /// `codexErrorInfo`, a closed transport); else it is read from the words.
        class: Option<FailureClass>,
        /// The provider's Retry-After, when the engine reported it.
        retry_after: Option<Duration>,
        /// The run's other words about its failure (notices, the stderr tail), which may name
        /// a writer conflict or a lost rollout when the failure itself does not.
        context: Vec<String>,
        /// Where the conversation stands after a successful run, if the engine says.
        resume_point: Option<String>,
    },
    /// Cancelled or stopped by a shutdown; how the engine's process ended, if it had one.
    Stopped(Stop, Exit),
    TimedOut(Exit),
}

impl RunOutcome {
    /// A run that failed before the engine could say anything.
    fn failed(message: String) -> RunOutcome {
        RunOutcome::Finished {
            verdict: RunVerdict::Failed { message },
            exit_code: None,
            signal: None,
            answer: None,
            class: None,
            retry_after: None,
            context: Vec::new(),
            resume_point: None,
        }
    }
}

/// How an engine's process ended: its exit code, or the signal that killed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Exit {
    code: Option<i32>,
    signal: Option<String>,
}

impl Exit {
    fn of(status: Option<std::process::ExitStatus>) -> Exit {
        Exit {
            code: status.and_then(|status| status.code()),
            signal: status
                .and_then(|status| std::os::unix::process::ExitStatusExt::signal(&status))
                .map(crate::process::signal_name),
        }
    }
}

impl Worker {
    async fn run(mut self, first: Prompt) {
        let mut next = Some(first);
        while let Some(prompt) = next {
            let prompt_id = prompt.id.clone();
            let end = if *self.shutdown.borrow() || self.shared.is_draining() {
                PromptEnd::stopped(Stop::Shutdown)
            } else {
                self.run_prompt(prompt).await
            };
            if end.requeue {
                self.flush_end().await;
                let _ = self
                    .shared
                    .ledger
                    .write(RequeuePrompt {
                        prompt_id: prompt_id.clone(),
                    })
                    .await;
                self.event(
                    Some(&prompt_id),
                    None,
                    EventKind::PromptRequeued,
                    json!({ "reason": "daemon shutdown" }),
                )
                .await;
                return;
            }
            // The prompt's end is committed before its event is published, so that whoever
            // reacts to the event reads the final state.
            let ended = self.session_event(
                Some(&prompt_id),
                None,
                EventKind::prompt_end(end.status),
                json!({ "error": end.error, "answer": end.answer }),
            );
            let finish = FinishPrompt {
                prompt_id: prompt_id.clone(),
                status: end.status,
                error: end.error.clone(),
                answer: end.answer.clone(),
            };
            // One commit for the last run's end, the prompt's end, its events and the ones
            // still deferred; the events are published after it.
            let last_run = self.pending_end.take().map(|end| EndRun { end });
            let thread = self.pending_thread.take();
            let mut events = std::mem::take(&mut self.deferred);
            events.push(ended);
            let finished = self
                .shared
                .write_with_events(Both(Both(last_run, finish), thread), events)
                .await
                .map(|((_, next), _)| next);
            next = match finished {
                Ok(next) => next,
                Err(error) => {
                    tracing::error!(%error, prompt_id, "could not finish the prompt");
                    None
                }
            };
        }
    }

    fn is_cancelled(&self, prompt_id: &str) -> bool {
        self.cancel.borrow().as_deref() == Some(prompt_id)
    }

    /// Resolves when `prompt_id` is cancelled or the daemon shuts down.
    async fn stopped(
        cancel: &mut watch::Receiver<Option<String>>,
        shutdown: &mut watch::Receiver<bool>,
        prompt_id: &str,
    ) -> Stop {
        let cancelled = async {
            loop {
                if cancel.borrow_and_update().as_deref() == Some(prompt_id) {
                    return Stop::Cancel;
                }
                if cancel.changed().await.is_err() {
                    // The actor is gone: nobody can cancel any more.
                    std::future::pending::<()>().await;
                }
            }
        };
        let shutting_down = async {
            loop {
                if *shutdown.borrow_and_update() {
                    return Stop::Shutdown;
                }
                if shutdown.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            stop = cancelled => stop,
            stop = shutting_down => stop,
        }
    }

    /// Stores one event now (with the deferred ones before it) and publishes it.
    async fn event(
        &mut self,
        prompt_id: Option<&str>,
        run_id: Option<&str>,
        kind: EventKind,
        payload: serde_json::Value,
    ) {
        let event = self.session_event(prompt_id, run_id, kind, payload);
        self.store_events(vec![event]).await;
    }

    /// An event of this session.
    fn session_event(
        &self,
        prompt_id: Option<&str>,
        run_id: Option<&str>,
        kind: EventKind,
        payload: serde_json::Value,
    ) -> NewEvent {
        NewEvent {
            session_id: self.session_id.clone(),
            prompt_id: prompt_id.map(str::to_string),
            run_id: run_id.map(str::to_string),
            kind,
            payload,
        }
    }

    /// Stores `events` now, after the deferred ones.
    async fn store_events(&mut self, events: Vec<NewEvent>) {
        let events = self.take_deferred(events);
        self.shared.append_events(events).await;
    }

    /// The deferred events followed by `events`, to go with a write made now.
    fn take_deferred(&mut self, mut events: Vec<NewEvent>) -> Vec<NewEvent> {
        if self.deferred.is_empty() {
            return events;
        }
        let mut all = std::mem::take(&mut self.deferred);
        all.append(&mut events);
        all
    }

    async fn run_prompt(&mut self, prompt: Prompt) -> PromptEnd {
        let (session, project) = match self.shared.readers.read(|connection| {
            let session = work::session(connection, &self.session_id)?;
            let project = match session.as_ref().and_then(|s| s.project_id.clone()) {
                Some(id) => work::project(connection, &id)?,
                None => None,
            };
            let groups = work::execution_groups(connection)?;
            Ok((session, project, groups))
        }) {
            Ok((Some(session), Some(project), groups)) => {
                let locking: Vec<String> = project
                    .groups
                    .iter()
                    .filter(|name| {
                        groups
                            .iter()
                            .find(|group| &group.name == *name)
                            .is_none_or(|group| group.locking)
                    })
                    .cloned()
                    .collect();
                (session, (project, locking))
            }
            Ok(_) => return PromptEnd::failed("the session or its project no longer exists"),
            Err(error) => return PromptEnd::failed(format!("store: {error}")),
        };
        let (project, locking_groups) = project;
        let kind: EngineKind = match session.engine.parse() {
            Ok(kind) => kind,
            Err(error) => return PromptEnd::failed(error),
        };
        let adapter = kind.adapter();
        let mut thread_id = session.thread_id.clone();
        // The command engine gets the person's text as it is: a shell command line has no
        // room for instructions or a title request; its title is its first line.
        let text = if kind == EngineKind::Command {
            if session.title.is_none() {
                if let Some(title) = framing::command_title(&prompt.text) {
                    let mut events = Vec::new();
                    self.set_title(&prompt, None, &title, &mut events).await;
                    self.deferred.append(&mut events);
                }
            }
            prompt.text.clone()
        } else {
            let ask_title = session.title.is_none();
            framing::frame(&prompt.text, project.instructions.as_deref(), ask_title)
        };
        let sandbox = Sandbox::for_prompt(
            project.full_access,
            project.kind == "remote",
            prompt.read_only,
        );
        let mut attempt = prompt.attempts;
        let mut retries = Retries::default();
        // Where the conversation stood: a retry goes on from here (see `retry::resend`).
        let before = Before {
            thread: session.thread_id.clone(),
            resume_point: session.resume_point.clone(),
        };
        let mut resume_at: Option<String> = None;
        // The conversation holds the prompt already: the next attempt continues it.
        let mut continuing = false;
        // A new conversation is titled by us, sparing an engine's own title call.
        let new_title = session
            .title
            .clone()
            .or_else(|| framing::command_title(&prompt.text))
            .map(|title| title.chars().take(60).collect::<String>());
        // Stored with the run's row (or with whatever is written first).
        let started = self.session_event(
            Some(&prompt.id),
            None,
            EventKind::PromptStarted,
            json!({ "text": prompt.text, "images": prompt.images }),
        );
        self.deferred.push(started);

        loop {
            if self.is_cancelled(&prompt.id) {
                return PromptEnd::stopped(Stop::Cancel);
            }
            if *self.shutdown.borrow() {
                return PromptEnd::stopped(Stop::Shutdown);
            }
            attempt += 1;
            let settings = self.shared.settings();
            let program = match engine::resolve_program(kind, &settings.engine_paths) {
                Ok(program) => program,
                Err(message) => return PromptEnd::failed(message),
            };
            // An app-server's child must be up before a slot is taken: a prompt waiting out a
            // failed child holds no slot that other sessions could use.
            let server = if kind == EngineKind::CodexAppServer {
                let server = self.shared.app_server(&project, &program);
                if let Err(stop) = self.wait_app_server(&server, &prompt.id).await {
                    return stop;
                }
                Some(server)
            } else {
                None
            };

            // 1. A slot: engine permit + project lock + locking group locks.
            let waited = Instant::now();
            let request = SlotRequest {
                engine: kind.as_str().to_string(),
                project: project.id.clone(),
                groups: locking_groups.clone(),
            };
            let slots = self.shared.slots.clone();
            // Named as its owner, so that whoever waits behind this session is told who holds.
            let owner = SlotOwner::new(self.session_id.clone(), session.title.clone());
            let acquire = slots.acquire_for(request, owner);
            tokio::pin!(acquire);
            let mut notice = std::pin::pin!(tokio::time::sleep(SLOT_NOTICE));
            let mut noticed = false;
            let slot = loop {
                tokio::select! {
                    slot = &mut acquire => match slot {
                        Ok(slot) => break slot,
                        Err(error) => return PromptEnd::failed(format!("slot: {error}")),
                    },
                    _ = &mut notice, if !noticed => {
                        noticed = true;
                        // What holds the slot: an engine limit, a project or group lock, by whom.
                        let held_by = slots.blocker(&self.session_id).await.ok().flatten();
                        self.event(
                            Some(&prompt.id),
                            None,
                            EventKind::SlotWaiting,
                            json!({
                                "engine": kind.as_str(),
                                "project": project.name,
                                "groups": locking_groups,
                                "held_by": held_by,
                            }),
                        )
                        .await;
                    }
                    stop = Self::stopped(&mut self.cancel, &mut self.shutdown, &prompt.id) => {
                        return PromptEnd::stopped(stop)
                    }
                }
            };
            if noticed {
                self.event(
                    Some(&prompt.id),
                    None,
                    EventKind::SlotGranted,
                    json!({ "waited_ms": waited.elapsed().as_millis() as u64 }),
                )
                .await;
            }

            // 2. The run's row, then the child. An app-server's child is asked again now that
            // the slot is held: it may have been restarted (or lost) during the wait.
            let serving = match &server {
                Some(server) => match server.send(app_server::Serving).await {
                    Ok(Some(serving)) => Some(serving),
                    // Lost since: wait for it again (a restart, maybe), without the slot.
                    Ok(None) => {
                        drop(slot);
                        attempt -= 1;
                        continue;
                    }
                    Err(error) => return PromptEnd::failed(error.to_string()),
                },
                None => None,
            };
            let spec = RunSpec {
                program: program.clone(),
                prompt: if continuing {
                    retry::CONTINUATION.to_string()
                } else {
                    text.clone()
                },
                images: if continuing {
                    Vec::new()
                } else {
                    prompt.images.iter().map(PathBuf::from).collect()
                },
                cwd: PathBuf::from(&project.path),
                thread_id: thread_id.clone(),
                resume_at: resume_at.clone(),
                title: new_title.clone(),
                model: session.model.clone().or_else(|| project.model.clone()),
                reasoning_effort: session.reasoning_effort.clone(),
                sandbox,
                template: settings.command_template.clone(),
            };
            let argv = adapter.argv(&spec);
            let stdin = adapter.stdin(&spec);
            let run_id = uuid::Uuid::now_v7().to_string();
            // The run's row and the driver's exec in one transaction: the current driver's
            // exec is the parent of what the agent runs; without one, the exec hosting the
            // supervisor.
            let started = self
                .shared
                .write_with_events(
                    StartRun {
                        run: work::NewRun {
                            id: run_id.clone(),
                            prompt_id: prompt.id.clone(),
                            session_id: self.session_id.clone(),
                            attempt,
                            engine: kind.as_str().to_string(),
                            argv: argv
                                .iter()
                                .map(|a| a.to_string_lossy().into_owned())
                                .collect(),
                            thread_id: thread_id.clone(),
                            exec_id: self.shared.exec_id.clone(),
                            child: serving.map(|(_, pid)| (pid, crate::process::start_time(pid))),
                        },
                    },
                    std::mem::take(&mut self.deferred),
                )
                .await;
            let exec_id = match started {
                Ok(exec_id) => exec_id,
                Err(error) => return PromptEnd::failed(format!("store: {error}")),
            };
            let shared = self.shared.clone();
            let session_id = self.session_id.clone();
            let environment = ChildEnv {
                home: &shared.home,
                session_id: &session_id,
                exec_id: exec_id.as_deref(),
                attempt,
            };
            let (outcome, reported_thread) =
                if let (Some(server), Some((generation, pid))) = (&server, serving) {
                    let turn = AppTurn {
                        prompt: &prompt,
                        run_id: &run_id,
                        thread_id: spec.thread_id.as_deref(),
                        text: &spec.prompt,
                        continuing,
                        model: spec.model.as_deref(),
                        sandbox,
                        cwd: &project.path,
                        driver_exec: exec_id.as_deref(),
                        generation,
                        pid,
                    };
                    self.run_app_turn(server, turn, &settings).await
                } else {
                    let run = ChildRun {
                        prompt: &prompt,
                        run_id: &run_id,
                        argv: &argv,
                        stdin: stdin.as_deref(),
                        cwd: &project.path,
                        environment,
                        kind,
                        known_thread: thread_id.as_deref(),
                    };
                    self.run_child(run, &settings).await
                };
            let ended_at = crate::store::now_ms();
            drop(slot);

            // 3. The engine's thread: a new one was stored the moment the run reported it.
            if let Some(reported) = reported_thread {
                thread_id = Some(reported);
            }

            // 4. Judge and decide.
            let (verdict, exit_code, signal, answer, structured) = match outcome {
                RunOutcome::Stopped(Stop::Cancel, exit) => {
                    self.end_run(
                        &run_id,
                        ended_at,
                        exit.code,
                        exit.signal.as_deref(),
                        "cancelled",
                        None,
                        None,
                        None,
                    )
                    .await;
                    return PromptEnd::stopped(Stop::Cancel);
                }
                RunOutcome::Stopped(Stop::Shutdown, exit) => {
                    self.end_run(
                        &run_id,
                        ended_at,
                        exit.code,
                        exit.signal.as_deref(),
                        "interrupted",
                        None,
                        Some("requeued"),
                        None,
                    )
                    .await;
                    return PromptEnd::stopped(Stop::Shutdown);
                }
                RunOutcome::TimedOut(exit) => {
                    let message = format!(
                        "the engine ran longer than run.timeout_s ({} s) and was ended",
                        settings.run_timeout.as_secs()
                    );
                    self.end_run(
                        &run_id,
                        ended_at,
                        exit.code,
                        exit.signal.as_deref(),
                        "failed",
                        Some("other"),
                        Some("fail"),
                        Some(&message),
                    )
                    .await;
                    return PromptEnd::failed(message);
                }
                RunOutcome::Finished {
                    verdict,
                    exit_code,
                    signal,
                    answer,
                    class,
                    retry_after,
                    context,
                    resume_point,
                } => (
                    verdict,
                    exit_code,
                    signal,
                    answer,
                    (class, retry_after, context, resume_point),
                ),
            };
            let message = match verdict {
                RunVerdict::Succeeded => {
                    if let Some(point) = structured.3 {
                        self.pending_thread = Some(SetThread {
                            session_id: self.session_id.clone(),
                            thread_id: thread_id.clone(),
                            resume_point: Some(point),
                        });
                    }
                    self.end_run(
                        &run_id,
                        ended_at,
                        exit_code,
                        signal.as_deref(),
                        "succeeded",
                        None,
                        None,
                        None,
                    )
                    .await;
                    return PromptEnd {
                        status: PromptStatus::Done,
                        error: None,
                        answer,
                        requeue: false,
                    };
                }
                RunVerdict::Failed { message } => message,
            };
            let (class, retry_after, context, _) = structured;
            let class = class.unwrap_or_else(|| {
                let mut texts = vec![message.as_str()];
                texts.extend(context.iter().map(String::as_str));
                engine::classify_failure(kind, spec.thread_id.as_deref(), &texts)
            });
            let policy = Policy {
                rate_limit_delays: settings.rate_limit_delays.clone(),
                writer_conflict_delays: settings.writer_conflict_delays.clone(),
            };
            let failure = Failure { class, retry_after };
            let decision = retries.decide(&policy, &failure, jitter());
            self.end_run(
                &run_id,
                ended_at,
                exit_code,
                signal.as_deref(),
                "failed",
                Some(class.as_str()),
                Some(&decision.describe()),
                Some(&message),
            )
            .await;
            let retry = match decision {
                Decision::Retry(retry) => retry,
                Decision::Fail { why: Some(why) } => {
                    return PromptEnd::failed(format!("{message} ({why})"))
                }
                Decision::Fail { why: None } => return PromptEnd::failed(message),
            };
            // A retry follows: this run's end is history now.
            self.flush_end().await;
            let next = if retry.new_thread {
                Resend::Prompt {
                    thread: None,
                    resume_at: None,
                }
            } else {
                retry::resend(kind, class, &before, thread_id.as_deref())
            };
            match next {
                Resend::Continue => continuing = true,
                Resend::Prompt {
                    thread,
                    resume_at: at,
                } => {
                    continuing = false;
                    resume_at = at;
                    if thread != thread_id {
                        // Back to where the conversation stood (or a new one).
                        let resume_point = (thread == before.thread)
                            .then(|| before.resume_point.clone())
                            .flatten();
                        thread_id = thread.clone();
                        let _ = self
                            .shared
                            .ledger
                            .write(SetThread {
                                session_id: self.session_id.clone(),
                                thread_id: thread,
                                resume_point,
                            })
                            .await;
                    }
                }
            }
            self.event(
                Some(&prompt.id),
                Some(&run_id),
                EventKind::RetryScheduled,
                json!({
                    "reason": class.as_str(),
                    "attempt": attempt,
                    "next_attempt": attempt + 1,
                    "delay_ms": retry.delay.as_millis() as u64,
                    "retry": retry.number,
                    "retries": retry.of,
                    "retry_after_ms": retry_after.map(|after| after.as_millis() as u64),
                    "new_thread": retry.new_thread || thread_id.is_none(),
                    "continue": continuing,
                    "message": message,
                }),
            )
            .await;
            let delay = retry.delay;
            // The slot was released above: other sessions run while this one sleeps.
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                stop = Self::stopped(&mut self.cancel, &mut self.shutdown, &prompt.id) => {
                    return PromptEnd::stopped(stop)
                }
            }
        }
    }

    /// Closes a run: kept to be written with the prompt's end (see `pending_end`), unless a
    /// retry follows (`flush_end`).
    #[allow(clippy::too_many_arguments)]
    async fn end_run(
        &mut self,
        run_id: &str,
        ended_at: i64,
        exit_code: Option<i32>,
        signal: Option<&str>,
        status: &str,
        class: Option<&str>,
        decision: Option<&str>,
        error: Option<&str>,
    ) {
        let end = RunEnd {
            run_id: run_id.to_string(),
            ended_at: Some(ended_at),
            exit_code,
            signal: signal.map(str::to_string),
            status: status.to_string(),
            failure_class: class.map(str::to_string),
            retry_decision: decision.map(str::to_string),
            error: error.map(str::to_string),
        };
        self.flush_end().await;
        self.pending_end = Some(end);
    }

    /// Writes a run's end that waits for its prompt's end now, with the deferred events.
    async fn flush_end(&mut self) {
        if let Some(end) = self.pending_end.take() {
            let run_id = end.run_id.clone();
            let events = std::mem::take(&mut self.deferred);
            if let Err(error) = self.shared.write_with_events(EndRun { end }, events).await {
                tracing::error!(%error, run_id, "could not close the run");
            }
        }
    }

    fn new_event(
        &self,
        prompt: &Prompt,
        run_id: &str,
        kind: EventKind,
        payload: serde_json::Value,
    ) -> NewEvent {
        self.session_event(Some(&prompt.id), Some(run_id), kind, payload)
    }

    async fn set_title(
        &self,
        prompt: &Prompt,
        run_id: Option<&str>,
        title: &str,
        batch: &mut Vec<NewEvent>,
    ) {
        let set = self
            .shared
            .ledger
            .write(SetGeneratedTitle {
                session_id: self.session_id.clone(),
                title: title.to_string(),
            })
            .await;
        if matches!(set, Ok(true)) {
            batch.push(self.session_event(
                Some(&prompt.id),
                run_id,
                EventKind::TitleGenerated,
                json!({ "title": title }),
            ));
        }
    }
}

/// A jitter factor in `[0.8, 1.2]`, from the clock's nanoseconds (no randomness crate for one
/// jitter).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    0.8 + 0.4 * (nanos % 1000) as f64 / 1000.0
}

/// The event kind of an engine event.
fn event_kind(event: &EngineEvent) -> EventKind {
    match event {
        EngineEvent::ThreadStarted { .. } => EventKind::ThreadStarted,
        EngineEvent::TurnStarted => EventKind::TurnStarted,
        EngineEvent::MessageDelta { .. } => EventKind::MessageDelta,
        EngineEvent::Message { .. } => EventKind::Message,
        EngineEvent::Tool { .. } => EventKind::Tool,
        EngineEvent::Usage { .. } => EventKind::Usage,
        EngineEvent::Notice { .. } => EventKind::Notice,
        EngineEvent::TurnCompleted => EventKind::TurnCompleted,
        EngineEvent::TurnFailed { .. } => EventKind::TurnFailed,
        EngineEvent::Raw { .. } => EventKind::Raw,
        // The worker keeps resume points; none is ever stored as an event.
        EngineEvent::ResumePoint { .. } => EventKind::Other("resume_point".into()),
    }
}

fn event_payload(event: &EngineEvent) -> serde_json::Value {
    let mut value = serde_json::to_value(event).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        object.remove("kind");
    }
    value
}
