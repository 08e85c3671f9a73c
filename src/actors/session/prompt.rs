//! One prompt, attempt after attempt: what its attempts share ([`PromptRun`]) and the steps
//! of each one, in the order [`Worker::run_prompt`] takes them:
//!
//! ```text
//! prepare ─► ready_worktree ─► (app-server child up) ─► acquire_slot ─► start_run ─► child
//!  (a session's own worktree:        ▲                                         / app turn
//!   made, set up, or gone)           │                                              │
//!                                    └──── sleep the delay (cancellable) ◄── settle ◄┘
//!                                                                              └─► done / failed / stopped
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};
use tracing::Instrument;

use super::app_turn::AppTurn;
use super::child::{ChildEnv, ChildRun};
use super::retry::{self, Before, Decision, Failure, Policy, Resend, Retries};
use super::{jitter, Exit, Place, PromptEnd, RunOutcome, Stop, While, Worker, SLOT_NOTICE};
use crate::actors::ledger::{SetThread, StartRun};
use crate::actors::slots::{SlotGuard, SlotOwner, SlotRequest};
use crate::actors::worktree;
use crate::engine::{self, EngineKind, FailureClass, RunSpec, RunVerdict};
use crate::events::{Notice, Payload, PromptStarted, RetryScheduled, SlotGranted, SlotWaiting};
use crate::framing;
use crate::store::projects::Project;
use crate::store::prompts::{Prompt, PromptStatus};
use crate::store::runs::{RunEnd, RunStatus};
use crate::store::sessions::Session;
use crate::store::settings::Settings;
use crate::store::{projects, runs, sessions};

/// What a prompt's attempts share: read once when it starts, moved on by each retry.
pub(super) struct PromptRun {
    pub(super) prompt: Prompt,
    session: Session,
    project: Project,
    /// The project's groups that lock (a label-only group holds nothing).
    locking_groups: Vec<String>,
    /// The projects whose working trees overlap this one's (`projects::overlapping_trees`): their
    /// locks are taken beside the project's own.
    overlapping: Vec<String>,
    kind: EngineKind,
    /// Where the engine runs: the project's path, or for a session with its own worktree the
    /// same place inside that worktree ([`worktree::working_dir`]).
    cwd: String,
    /// The project's instructions, given when a conversation begins (the engine keeps them
    /// in its history from then on); never to the `command` engine.
    instructions: Option<String>,
    /// The session has no title: the first prompt asks the agent for one.
    ask_title: bool,
    /// The project's variables with the session's over them, for its engine children.
    env: crate::store::environment::Environment,
    policy: engine::Policy,
    /// A title for a new conversation, sparing an engine's own title call.
    new_title: Option<String>,
    /// The attempt under way (the prompt's earlier attempts, from before a restart, count).
    attempt: i64,
    retries: Retries,
    /// Where the conversation stood when the prompt began: a retry goes on from here.
    before: Before,
    /// The session's engine thread now.
    thread_id: Option<String>,
    /// Where in the thread the next attempt resumes (claude), when not after its last message.
    resume_at: Option<String>,
    /// The conversation holds the prompt already: the next attempt continues it.
    continuing: bool,
}

impl PromptRun {
    /// The text the engine receives: the person's, with the project's instructions first when
    /// this attempt begins a conversation and a title request for an untitled session; the
    /// `command` engine gets the person's text as it is (a shell command line has no room
    /// for either).
    fn text(&self) -> String {
        if self.kind == EngineKind::Command {
            return self.prompt.text.clone();
        }
        let instructions = self
            .instructions
            .as_deref()
            .filter(|_| self.thread_id.is_none());
        framing::frame(&self.prompt.text, instructions, self.ask_title)
    }

    /// What the attempt asks the slot manager for. The project lock is the working tree the
    /// engine writes: the project's canonical directory (with the locks of the projects whose
    /// trees overlap it), or for a session with its own worktree `worktree:<session id>`,
    /// which nobody else takes, so the sessions of a worktree project run side by side.
    ///
    /// The locking groups are the project's in both cases, and each session counts against
    /// them: a locking group holds one run at a time, whatever project or worktree it comes
    /// from (a group that serializes projects also serializes the sessions of a worktree
    /// project in it).
    fn slot_request(&self) -> SlotRequest {
        match &self.session.worktree {
            Some(_) => SlotRequest::new(
                self.kind.as_str(),
                format!("worktree:{}", self.session.id),
                self.locking_groups.clone(),
            ),
            None => SlotRequest::new(
                self.kind.as_str(),
                self.project.path.clone(),
                self.locking_groups.clone(),
            )
            .overlapping(self.overlapping.clone()),
        }
    }

    /// The engine's invocation for the attempt under way.
    fn spec(&self, program: PathBuf, settings: &Settings) -> RunSpec {
        RunSpec {
            program,
            prompt: if self.continuing {
                retry::CONTINUATION.to_string()
            } else {
                self.text()
            },
            images: if self.continuing {
                Vec::new()
            } else {
                self.prompt.images.iter().map(PathBuf::from).collect()
            },
            cwd: PathBuf::from(&self.cwd),
            thread_id: self.thread_id.clone(),
            resume_at: self.resume_at.clone(),
            title: self.new_title.clone(),
            model: self
                .session
                .model
                .clone()
                .or_else(|| self.project.model.clone()),
            reasoning_effort: self.session.reasoning_effort.clone(),
            policy: self.policy,
            template: settings.command_template.clone(),
        }
    }
}

/// A run's end with its exit and nothing failed yet.
fn run_end(run_id: &str, ended_at: i64, exit: &Exit, status: RunStatus) -> RunEnd {
    RunEnd {
        run_id: run_id.to_string(),
        ended_at: Some(ended_at),
        exit_code: exit.code,
        signal: exit.signal.clone(),
        status,
        failure_class: None,
        retry_decision: None,
        error: None,
    }
}

impl Worker {
    /// Runs `prompt` to its end: attempts, and the retries the policy grants between them.
    pub(super) async fn run_prompt(&mut self, prompt: Prompt) -> PromptEnd {
        let mut run = match self.prepare(prompt).await {
            Ok(run) => run,
            Err(end) => return end,
        };
        match self
            .ready_worktree(&run.prompt, &run.session, &run.project)
            .await
        {
            Ok(Some(session)) => run.session = session,
            Ok(None) => {}
            Err(end) => return end,
        }
        // A run the daemon before left running to its shim is followed, not started again
        // (looked for only where a run was started: not on a new prompt's way to its engine).
        let mut left_running = (run.prompt.attempts > 0)
            .then(|| {
                self.shared
                    .readers
                    .read(|connection| runs::left_running(connection, &run.prompt.id))
                    .ok()
                    .flatten()
            })
            .flatten()
            .filter(|left| left.engine == run.kind && left.pid.is_some());
        if left_running.is_some() {
            // Started already, under the daemon before: not told again.
            let prompt_id = run.prompt.id.clone();
            self.deferred.retain(|event| {
                !(matches!(event.payload(), Payload::PromptStarted(_))
                    && event.prompt_id.as_deref() == Some(prompt_id.as_str()))
            });
        }
        loop {
            if self.is_cancelled(&run.prompt.id) && left_running.is_none() {
                return PromptEnd::stopped(Stop::Cancel);
            }
            if self.stops.is_shutting_down() {
                return PromptEnd::stopped(Stop::Shutdown);
            }
            if left_running.is_none()
                && self
                    .stops
                    .pause(&self.session_id, While::Starting)
                    .is_some()
            {
                return PromptEnd::stopped(Stop::Pause);
            }
            let settings = self.shared.settings();
            if let Some(left) = left_running.take() {
                run.attempt = left.attempt;
                // Under way already: only a pause made `--now` stops it.
                let slot = match self.acquire_slot(&run, While::Running).await {
                    Ok(slot) => slot,
                    Err(end) => return end,
                };
                let run_span = tracing::info_span!("run", id = %left.id, attempt = left.attempt);
                let known = run.thread_id.clone();
                let (outcome, reported_thread) = self
                    .adopt_run(
                        &run.prompt,
                        &left,
                        known.as_deref(),
                        run.project.keep_background,
                        &settings,
                    )
                    .instrument(run_span)
                    .await;
                let ended = Attempted {
                    run_id: &left.id,
                    thread: left.thread_id.clone(),
                    outcome,
                    reported_thread,
                };
                if let Err(end) = self.after_attempt(&mut run, ended, slot, &settings).await {
                    return end;
                }
                continue;
            }
            run.attempt += 1;
            let program = match engine::resolve_program(run.kind, &settings.engine_paths) {
                Ok(program) => program,
                Err(message) => return PromptEnd::failed(message),
            };
            // An app-server's child must be up before a slot is taken: a prompt waiting out a
            // failed child holds no slot that other sessions could use.
            let server = if run.kind == EngineKind::CodexAppServer {
                let server = self.shared.app_servers.of(
                    &run.project,
                    &program,
                    self.shared.settings().app_server_init_timeout,
                );
                if let Err(stop) = self.wait_app_server(&server, &run.prompt.id).await {
                    return stop;
                }
                Some(server)
            } else {
                None
            };
            let slot = match self.acquire_slot(&run, While::Starting).await {
                Ok(slot) => slot,
                Err(end) => return end,
            };
            // An app-server's child is asked again now that the slot is held: it may have been
            // restarted (or lost) during the wait.
            let serving = match &server {
                Some(server) => match server.serving().await {
                    Some(serving) => Some(serving),
                    // Lost since: wait for it again (a restart, maybe), without the slot.
                    None => {
                        drop(slot);
                        run.attempt -= 1;
                        continue;
                    }
                },
                None => None,
            };
            let spec = run.spec(program, &settings);
            let adapter = run.kind.adapter();
            let argv = adapter.argv(&spec);
            let run_id = uuid::Uuid::now_v7().to_string();
            let driver = match self.start_run(&run, &run_id, &argv, serving).await {
                Ok(driver) => driver,
                Err(end) => return end,
            };
            let exec_id = driver.as_ref().map(|driver| driver.exec_id.as_str());
            let trace_id = driver
                .as_ref()
                .and_then(|driver| driver.trace_id.as_deref());
            // Every line the daemon logs about this run names it, within its session's and
            // its prompt's spans.
            let run_span = tracing::info_span!("run", id = %run_id, attempt = run.attempt);
            let (outcome, reported_thread) = match (&server, serving) {
                (Some(server), Some((generation, pid))) => {
                    let turn = AppTurn {
                        prompt: &run.prompt,
                        run_id: &run_id,
                        thread_id: spec.thread_id.as_deref(),
                        text: &spec.prompt,
                        continuing: run.continuing,
                        model: spec.model.as_deref(),
                        policy: run.policy,
                        effort: spec.reasoning_effort.as_deref(),
                        cwd: &run.cwd,
                        driver_exec: exec_id,
                        generation,
                        pid,
                    };
                    self.run_app_turn(server, turn, &settings)
                        .instrument(run_span)
                        .await
                }
                _ => {
                    let shared = self.shared.clone();
                    let stdin = adapter.stdin(&spec);
                    let run_env = adapter.run_env(&spec);
                    let child = ChildRun {
                        prompt: &run.prompt,
                        run_id: &run_id,
                        argv: &argv,
                        stdin: stdin.as_deref(),
                        converses: adapter.converses(&spec),
                        run_env: &run_env,
                        cwd: &run.cwd,
                        environment: ChildEnv {
                            home: &shared.home,
                            extra: &run.env,
                            session_id: &self.session_id.clone(),
                            exec_id,
                            trace_id,
                            attempt: run.attempt,
                            guard_mark: shared.coordination.guard_mark(),
                        },
                        kind: run.kind,
                        known_thread: run.thread_id.as_deref(),
                        keep_background: run.project.keep_background,
                        project_id: &run.project.id,
                    };
                    self.run_child(child, &settings).instrument(run_span).await
                }
            };
            let attempted = spec.thread_id.clone();
            let ended = Attempted {
                run_id: &run_id,
                thread: attempted,
                outcome,
                reported_thread,
            };
            if let Err(end) = self.after_attempt(&mut run, ended, slot, &settings).await {
                return end;
            }
        }
    }

    /// What follows a run's end: its outcome settled (the prompt's end, or a retry after a
    /// delay, slept out here unless the prompt is stopped meanwhile). The slot goes first:
    /// other sessions run while this one sleeps.
    async fn after_attempt(
        &mut self,
        run: &mut PromptRun,
        ended: Attempted<'_>,
        slot: SlotGuard,
        settings: &Settings,
    ) -> Result<(), PromptEnd> {
        if let RunOutcome::HandedOver = ended.outcome {
            return Err(PromptEnd::handed_over());
        }
        let ended_at = crate::store::now_ms();
        drop(slot);
        // A new thread was stored the moment the run reported it.
        if let Some(reported) = ended.reported_thread {
            run.thread_id = Some(reported);
        }
        let delay = self
            .settle(
                run,
                ended.run_id,
                ended_at,
                ended.thread,
                ended.outcome,
                settings,
            )
            .await?;
        tokio::select! {
            _ = tokio::time::sleep(delay) => Ok(()),
            stop = self.stops.stopped(&self.session_id, &run.prompt.id, While::Starting) => {
                Err(PromptEnd::stopped(stop))
            }
        }
    }

    /// Reads the session and its project, frames the text, and defers `prompt.started`.
    async fn prepare(&mut self, prompt: Prompt) -> Result<PromptRun, PromptEnd> {
        // Two round trips (four reads were four on PostgreSQL).
        let read = self.shared.readers.read(|connection| {
            let Some((session, Some(project))) =
                sessions::session_and_project(connection, &self.session_id)?
            else {
                return Ok(None);
            };
            // A session in a worktree of its own shares no working tree with anyone.
            let shares_tree = session.worktree.is_none();
            let (locking_groups, overlapping) =
                projects::locks_beside(connection, &project, shares_tree)?;
            Ok(Some((session, project, locking_groups, overlapping)))
        });
        let (session, project, locking_groups, overlapping) = match read {
            Ok(Some(read)) => read,
            Ok(None) => {
                return Err(PromptEnd::failed(
                    "the session or its project no longer exists",
                ))
            }
            Err(error) => return Err(PromptEnd::failed(format!("store: {error}"))),
        };
        // A pause of its project or one of its groups holds it from now on.
        self.stops.place = Some(Place {
            project_id: project.id.clone(),
            groups: project.groups.clone(),
            told: crate::actors::notifier::Place {
                session: crate::actors::notifier::Named {
                    id: session.id.clone(),
                    name: session.title.clone(),
                },
                project: crate::actors::notifier::Named {
                    id: project.id.clone(),
                    name: Some(project.name.clone()),
                },
                project_kinds: project.notify.clone(),
            },
        });
        let kind = session.engine;
        // A command's title is its first line, set now: it asks its engine for nothing.
        let ask_title = session.title.is_none() && kind != EngineKind::Command;
        if kind == EngineKind::Command && session.title.is_none() {
            if let Some(title) = framing::command_title(&prompt.text) {
                let mut events = Vec::new();
                self.set_title(&prompt, None, &title, &mut events).await;
                self.deferred.append(&mut events);
            }
        }
        let mut policy = project.policy_for(session.policy, prompt.policy, prompt.read_only);
        // Refused when sent (`Corral::send`); a prompt queued before its session's engine
        // changed runs as workspace-write, saying so.
        if let (engine::Policy::Ask, Some(why)) = (policy, kind.cannot_ask()) {
            policy = engine::Policy::WorkspaceWrite;
            let notice = self.session_event(
                Some(&prompt.id),
                None,
                Payload::Notice(Notice::new(format!("runs as workspace-write: {why}"))),
            );
            self.deferred.push(notice);
        }
        let new_title = session
            .title
            .clone()
            .or_else(|| framing::command_title(&prompt.text))
            .map(|title| title.chars().take(60).collect::<String>());
        // Stored with the run's row (or with whatever is written first).
        let started = self.session_event(
            Some(&prompt.id),
            None,
            Payload::PromptStarted(PromptStarted {
                text: prompt.text.clone(),
                images: prompt.images.clone(),
            }),
        );
        self.deferred.push(started);
        let env = project.env.under(&session.env);
        Ok(PromptRun {
            attempt: prompt.attempts,
            before: Before {
                thread: session.thread_id.clone(),
                resume_point: session.resume_point.clone(),
            },
            thread_id: session.thread_id.clone(),
            cwd: worktree::working_dir(&session, &project)
                .to_string_lossy()
                .into_owned(),
            prompt,
            session,
            locking_groups,
            overlapping,
            kind,
            instructions: project.instructions.clone(),
            ask_title,
            env,
            project,
            policy,
            new_title,
            retries: Retries::default(),
            resume_at: None,
            continuing: false,
        })
    }

    /// A slot: engine permit + project lock + locking group locks. A wait longer than
    /// [`SLOT_NOTICE`] is announced with what holds the slot.
    async fn acquire_slot(
        &mut self,
        run: &PromptRun,
        doing: While,
    ) -> Result<SlotGuard, PromptEnd> {
        let waited = Instant::now();
        let request = run.slot_request();
        let slots = self.shared.slots.clone();
        // Named as its owner, so that whoever waits behind this session is told who holds.
        let owner = SlotOwner::new(self.session_id.clone(), run.session.title.clone());
        let acquire = slots.acquire_for(request, owner);
        tokio::pin!(acquire);
        let mut notice = std::pin::pin!(tokio::time::sleep(SLOT_NOTICE));
        let mut noticed = false;
        let slot = loop {
            tokio::select! {
                slot = &mut acquire => match slot {
                    Ok(slot) => break slot,
                    Err(error) => return Err(PromptEnd::failed(format!("slot: {error}"))),
                },
                _ = &mut notice, if !noticed => {
                    noticed = true;
                    // What holds the slot (an engine limit, a project or group lock, by whom)
                    // is filled in by the announcer, which stores the waits announced at once
                    // together (a boot resuming thousands of waiting sessions).
                    let waiting = self.session_event(
                        Some(&run.prompt.id),
                        None,
                        Payload::SlotWaiting(SlotWaiting {
                            engine: run.kind.as_str().to_string(),
                            project: run.project.name.clone(),
                            groups: run.locking_groups.clone(),
                            ..SlotWaiting::default()
                        }),
                    );
                    let events = self.take_deferred(vec![waiting]);
                    if let Err(kept) = self.shared.publisher.announce_waiting(events).await {
                        tracing::warn!(session = self.session_id, "events kept for the next write");
                        self.keep_deferred(kept);
                    }
                }
                stop = self.stops.stopped(&self.session_id, &run.prompt.id, doing) => {
                    return Err(PromptEnd::stopped(stop))
                }
            }
        };
        // Granted at the moment a pause came: the pause wins, the slot goes back.
        if doing == While::Starting && self.stops.pause(&self.session_id, doing).is_some() {
            return Err(PromptEnd::stopped(Stop::Pause));
        }
        if noticed {
            self.event(
                Some(&run.prompt.id),
                None,
                Payload::SlotGranted(SlotGranted {
                    waited_ms: waited.elapsed().as_millis() as u64,
                }),
            )
            .await;
        }
        Ok(slot)
    }

    /// The run's row and the driver's exec in one transaction, with the deferred events: the
    /// current driver's exec is the parent of what the agent runs (without one, the exec
    /// hosting the supervisor). Returns that exec and its trace.
    async fn start_run(
        &mut self,
        run: &PromptRun,
        run_id: &str,
        argv: &[std::ffi::OsString],
        serving: Option<(u64, u32)>,
    ) -> Result<Option<runs::RunDriver>, PromptEnd> {
        let row = runs::NewRun {
            id: run_id.to_string(),
            prompt_id: run.prompt.id.clone(),
            session_id: self.session_id.clone(),
            attempt: run.attempt,
            engine: run.kind,
            argv: argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            thread_id: run.thread_id.clone(),
            exec_id: self.shared.exec_id.clone(),
            child: serving.map(|(_, pid)| (pid, crate::process::start_time(pid))),
            node_id: self.claim.as_ref().map(|claim| claim.node_id.clone()),
        };
        // Not stored, the deferred events stay to go with the prompt's end.
        self.write_events(StartRun { run: row }, Vec::new())
            .await
            .map_err(|unwritten| PromptEnd::failed(format!("store: {}", unwritten.error)))
    }

    /// Closes the run by its outcome and decides what follows: the prompt's end (`Err`), or
    /// a retry after the delay returned, set up by the policy (`retry::resend`: what the next
    /// attempt sends, on which thread) and announced with `retry.scheduled`.
    async fn settle(
        &mut self,
        run: &mut PromptRun,
        run_id: &str,
        ended_at: i64,
        attempted_thread: Option<String>,
        outcome: RunOutcome,
        settings: &Settings,
    ) -> Result<Duration, PromptEnd> {
        let (exit, message, class, retry_after, context) = match outcome {
            // Returned before it is settled (`run_prompt`).
            RunOutcome::HandedOver => return Err(PromptEnd::handed_over()),
            RunOutcome::Stopped(Stop::Cancel, exit) => {
                self.end_run(run_end(run_id, ended_at, &exit, RunStatus::Cancelled))
                    .await;
                return Err(PromptEnd::stopped(Stop::Cancel));
            }
            RunOutcome::Stopped(stop @ (Stop::Shutdown | Stop::Pause), exit) => {
                let mut end = run_end(run_id, ended_at, &exit, RunStatus::Interrupted);
                end.retry_decision = Some("requeued".into());
                self.end_run(end).await;
                return Err(PromptEnd::stopped(stop));
            }
            RunOutcome::TimedOut(exit) => {
                let message = format!(
                    "the engine ran longer than run.timeout_s ({} s) and was ended",
                    settings.run_timeout.as_secs()
                );
                let mut end = run_end(run_id, ended_at, &exit, RunStatus::Failed);
                end.failure_class = Some(FailureClass::Other);
                end.retry_decision = Some("fail".into());
                end.error = Some(message.clone());
                self.end_run(end).await;
                return Err(PromptEnd::failed(message));
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
            } => {
                let exit = Exit {
                    code: exit_code,
                    signal,
                };
                match verdict {
                    RunVerdict::Succeeded => {
                        if let Some(point) = resume_point {
                            self.pending_thread = Some(SetThread {
                                session_id: self.session_id.clone(),
                                thread_id: run.thread_id.clone(),
                                resume_point: Some(point),
                            });
                        }
                        self.end_run(run_end(run_id, ended_at, &exit, RunStatus::Succeeded))
                            .await;
                        return Err(PromptEnd {
                            status: PromptStatus::Done,
                            error: None,
                            answer,
                            requeue: None,
                            handed_over: false,
                        });
                    }
                    RunVerdict::Failed { message } => (exit, message, class, retry_after, context),
                }
            }
        };
        // The thread the failed run resumed decides the codex thread rules.
        let class = class.unwrap_or_else(|| {
            let mut texts = vec![message.as_str()];
            texts.extend(context.iter().map(String::as_str));
            engine::classify_failure(run.kind, attempted_thread.as_deref(), &texts)
        });
        let policy = Policy {
            rate_limit_delays: settings.rate_limit_delays.clone(),
            writer_conflict_delays: settings.writer_conflict_delays.clone(),
        };
        let decision = run
            .retries
            .decide(&policy, &Failure { class, retry_after }, jitter());
        let mut end = run_end(run_id, ended_at, &exit, RunStatus::Failed);
        end.failure_class = Some(class);
        end.retry_decision = Some(decision.describe());
        end.error = Some(message.clone());
        self.end_run(end).await;
        let retry = match decision {
            Decision::Retry(retry) => retry,
            Decision::Fail { why: Some(why) } => {
                return Err(PromptEnd::failed(format!("{message} ({why})")))
            }
            Decision::Fail { why: None } => return Err(PromptEnd::failed(message)),
        };
        // A retry follows: this run's end is history now.
        self.flush_end().await;
        let next = if retry.new_thread {
            Resend::Prompt {
                thread: None,
                resume_at: None,
            }
        } else {
            retry::resend(run.kind, class, &run.before, run.thread_id.as_deref())
        };
        self.resend(run, next).await;
        self.event(
            Some(&run.prompt.id),
            Some(run_id),
            Payload::RetryScheduled(RetryScheduled {
                reason: class.as_str().to_string(),
                attempt: run.attempt,
                next_attempt: run.attempt + 1,
                delay_ms: retry.delay.as_millis() as u64,
                retry: Some(retry.number as u64),
                retries: Some(retry.of as u64),
                retry_after_ms: retry_after.map(|after| after.as_millis() as u64),
                new_thread: retry.new_thread || run.thread_id.is_none(),
                continues: run.continuing,
                message,
            }),
        )
        .await;
        Ok(retry.delay)
    }

    /// Sets up the next attempt as `next` says: continue the failed turn, or send the prompt
    /// on a thread (moving the session back to where its conversation stood, or to none).
    async fn resend(&mut self, run: &mut PromptRun, next: Resend) {
        match next {
            Resend::Continue => run.continuing = true,
            Resend::Prompt { thread, resume_at } => {
                run.continuing = false;
                run.resume_at = resume_at;
                if thread != run.thread_id {
                    let resume_point = (thread == run.before.thread)
                        .then(|| run.before.resume_point.clone())
                        .flatten();
                    run.thread_id = thread.clone();
                    // The rerun after a daemon's death resumes what the store says: it must
                    // not be left saying the old thread because the store was locked.
                    let set = SetThread {
                        session_id: self.session_id.clone(),
                        thread_id: thread,
                        resume_point,
                    };
                    let stored = self
                        .shared
                        .ledger
                        .write_until_stored(self.fence(set), &self.shared.life.shutdown_signal())
                        .await;
                    if let Err(error) = stored {
                        tracing::error!(%error, "the retry's thread was not stored");
                    }
                }
            }
        }
    }

    /// Closes a run: kept to be written with the prompt's end (see `pending_end`), unless a
    /// retry follows (`flush_end`).
    async fn end_run(&mut self, end: RunEnd) {
        self.flush_end().await;
        self.pending_end = Some(end);
    }
}

/// How one attempt of a prompt ended, for [`Worker::after_attempt`].
struct Attempted<'a> {
    run_id: &'a str,
    /// The thread the attempt ran on (the session's before it).
    thread: Option<String>,
    outcome: RunOutcome,
    /// A thread the engine reported that was new to the session.
    reported_thread: Option<String>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::actors::worktree::working_dir;
    use crate::store::projects::Isolation;
    use crate::store::sessions::{SessionWorktree, WorktreeState};

    fn project(path: &str, repo_root: Option<&str>) -> Project {
        Project {
            id: "p1".into(),
            name: "app".into(),
            path: path.into(),
            engine: None,
            model: None,
            full_access: false,
            kind: "local".into(),
            groups: vec!["deploys".into()],
            instructions: None,
            created_at: 0,
            archived_at: None,
            keep_background: false,
            pause_on_failure: false,
            notify: None,
            env: Default::default(),
            isolation: Isolation::Worktree,
            worktrees_dir: None,
            setup: None,
            repo_root: repo_root.map(str::to_string),
            policy: Default::default(),
            agents_scope: Default::default(),
        }
    }

    fn session(worktree: Option<&str>) -> Session {
        Session {
            env: Default::default(),
            id: "0190-s1".into(),
            project_id: Some("p1".into()),
            engine: crate::engine::EngineKind::Command,
            model: None,
            reasoning_effort: None,
            thread_id: None,
            resume_point: None,
            title: None,
            title_source: None,
            status: crate::store::sessions::SessionStatus::Idle,
            task: None,
            wave_id: None,
            created_at: 0,
            archived_at: None,
            last_event_seq: 0,
            compacted_message_count: None,
            compacted_character_count: None,
            compacted_at: None,
            worktree: worktree.map(|path| SessionWorktree {
                path: path.into(),
                branch: "corral/fix-1234abcd".into(),
                base: "HEAD".into(),
                base_commit: "abc".into(),
                state: WorktreeState::Ready,
            }),
            policy: Default::default(),
        }
    }

    fn prompt_run(session: Session, project: Project) -> PromptRun {
        PromptRun {
            env: Default::default(),
            prompt: Prompt {
                id: "q1".into(),
                session_id: session.id.clone(),
                text: "pwd".into(),
                images: Vec::new(),
                read_only: false,
                status: PromptStatus::Running,
                attempts: 0,
                error: None,
                answer: None,
                created_at: 0,
                started_at: None,
                finished_at: None,
                claim: None,
                denied: 0,
                policy: Default::default(),
                after: Vec::new(),
                after_any: false,
                due_at: None,
            },
            cwd: working_dir(&session, &project)
                .to_string_lossy()
                .into_owned(),
            locking_groups: project.groups.clone(),
            overlapping: vec!["/repo".into()],
            kind: EngineKind::Command,
            instructions: None,
            ask_title: false,
            policy: engine::Policy::WorkspaceWrite,
            new_title: None,
            attempt: 0,
            retries: Retries::default(),
            before: Before::default(),
            thread_id: None,
            resume_at: None,
            continuing: false,
            session,
            project,
        }
    }

    #[test]
    fn a_session_without_a_worktree_runs_in_its_project_path() {
        let project = project("/repo/web", Some("/repo"));
        assert_eq!(
            working_dir(&session(None), &project),
            Path::new("/repo/web")
        );
    }

    #[test]
    fn a_worktree_session_runs_at_the_project_path_s_place_in_its_worktree() {
        let worktree = Some("/w/app/fix-1234abcd");
        // The project is the repository's top level.
        let top = project("/repo", Some("/repo"));
        assert_eq!(
            working_dir(&session(worktree), &top),
            Path::new("/w/app/fix-1234abcd")
        );
        // A subdirectory of it.
        let sub = project("/repo/services/web", Some("/repo"));
        assert_eq!(
            working_dir(&session(worktree), &sub),
            Path::new("/w/app/fix-1234abcd/services/web")
        );
        // No repository recorded, or a path outside it: the worktree's root.
        for project in [project("/repo", None), project("/elsewhere", Some("/repo"))] {
            assert_eq!(
                working_dir(&session(worktree), &project),
                Path::new("/w/app/fix-1234abcd")
            );
        }
    }

    #[test]
    fn a_worktree_session_locks_its_own_worktree_and_its_project_s_groups() {
        let run = prompt_run(
            session(Some("/w/app/fix-1234abcd")),
            project("/repo", Some("/repo")),
        );
        let request = run.slot_request();
        assert_eq!(request.project, "worktree:0190-s1");
        assert!(request.overlapping.is_empty());
        assert_eq!(request.groups, vec!["deploys".to_string()]);
        assert_eq!(request.engine, "command");
        assert_eq!(
            run.spec(PathBuf::from("sh"), &Settings::default()).cwd,
            Path::new("/w/app/fix-1234abcd")
        );
    }

    #[test]
    fn a_session_without_a_worktree_locks_its_project_tree_as_before() {
        let run = prompt_run(session(None), project("/repo", Some("/repo")));
        let request = run.slot_request();
        assert_eq!(request.project, "/repo");
        assert_eq!(request.overlapping, vec!["/repo".to_string()]);
        assert_eq!(request.groups, vec!["deploys".to_string()]);
        assert_eq!(
            run.spec(PathBuf::from("sh"), &Settings::default()).cwd,
            Path::new("/repo")
        );
    }
}
