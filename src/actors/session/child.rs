//! A run as a child process: spawn it in its own process group (stdin closed, or carrying the
//! prompt), read its stdout and stderr line by line into events, and wait for it to end, to be
//! cancelled, or to time out.
//!
//! A run ends with all of its processes, however it ends: what the engine left in its group
//! (`sleep 30 &`, a dev server) and what left the group but carries the run's id in its
//! environment (`setsid`) get SIGTERM, then SIGKILL after `cancel.grace_ms`, and the run ends
//! once they are gone. A project with `keep_background` keeps what is left when the engine
//! exits on its own (recorded, listed by `status`); a cancel, a timeout or a shutdown still
//! end everything.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

use super::asking::{stdin_writer, Talk};
use super::spool::RunSpool;
use super::{Exit, RunOutcome, Stop, While, Worker, EVENT_BATCH};
use crate::actors::ledger::{Both, KeepProcesses, MarkStored, RunSpawned, SetThread};
use crate::actors::shared::Shared;
use crate::engine::{self, EngineEvent, EngineKind, FailureClass, RunVerdict};
use crate::events::{Notice, OutputLine, Payload, RunExited, RunStarted};
use crate::framing;
use crate::process;
use crate::store::events::NewEvent;
use crate::store::processes::KeptProcess;
use crate::store::prompts::Prompt;
use crate::store::runs::StoredThrough;

/// How many stderr lines (and notices) a run keeps to explain a failure with no structured
/// message.
const STDERR_TAIL: usize = 20;

/// Lines in flight between a child's pipes and the worker. When the ledger falls behind, the
/// readers stop reading and the child blocks on its pipe: memory stays bounded.
pub(super) const LINE_BUFFER: usize = 256;

/// The longest output line kept whole. The rest of a longer line is read and dropped (the
/// line is marked cut), so an engine printing a 1 GiB line costs the daemon this much at most
/// per line in flight.
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// How much of its output the `command` engine's answer keeps: the last 64 KiB.
const COMMAND_ANSWER: usize = 64 * 1024;

/// One run to start as a child.
pub(super) struct ChildRun<'a> {
    pub(super) prompt: &'a Prompt,
    pub(super) run_id: &'a str,
    pub(super) argv: &'a [OsString],
    /// Written to the child's stdin, which is then closed (`None`: stdin is /dev/null),
    /// unless the engine `converses`.
    pub(super) stdin: Option<&'a str>,
    /// The engine asks a person through its stdin ([`engine::Engine::converses`]): stdin stays
    /// open for the answers until the engine's final line.
    pub(super) converses: bool,
    /// Variables set over everything else ([`engine::Engine::run_env`]: the sandbox, where
    /// the engine reads it from its environment).
    pub(super) run_env: &'a [(&'static str, String)],
    pub(super) cwd: &'a str,
    pub(super) environment: ChildEnv<'a>,
    pub(super) kind: EngineKind,
    /// The session's thread before this run: a thread the engine reports that differs from it
    /// is new and stored at once.
    pub(super) known_thread: Option<&'a str>,
    /// The project's `keep_background` and id: what the engine leaves behind when it exits
    /// on its own is kept (and recorded for `status`) instead of ended.
    pub(super) keep_background: bool,
    pub(super) project_id: &'a str,
}

impl Worker {
    /// Spawns the child, streams its output into events, and waits for it to end, to be
    /// cancelled, or to time out. Returns the outcome and the thread the engine reported.
    pub(super) async fn run_child(
        &mut self,
        run: ChildRun<'_>,
        settings: &crate::store::settings::Settings,
    ) -> (RunOutcome, Option<String>) {
        let ChildRun {
            prompt,
            run_id,
            argv,
            stdin,
            converses,
            run_env,
            cwd,
            environment,
            kind,
            known_thread,
            keep_background,
            project_id,
        } = run;
        // Read just before the spawn: the run's end then reads only the pids handed out since.
        let clock = process::PidClock::read();
        let (mut child, conversation, output) = match spawn(
            argv,
            stdin,
            converses,
            run_env,
            cwd,
            &environment,
            run_id,
            kind,
            settings.orphan_timeout,
        ) {
            Ok(spawned) => spawned,
            Err(message) => return (RunOutcome::failed(message), None),
        };
        let mut talk = Talk::new(conversation);
        let pid = child.id().unwrap_or(0);
        let pgid = pid as i32;
        let pid_start = process::start_time(pid);
        // What the engine leaves when it exits on its own, to end or keep.
        let left = Left {
            pgid,
            since: pid_start,
            born: clock.and_then(|clock| process::Birth::new(pid, clock)),
            run_id: run_id.to_string(),
            session_id: self.session_id.clone(),
            project_id: project_id.to_string(),
            keep: keep_background,
        };
        // On a shared store the lease guard ends the engine if the lease runs out (or the
        // daemon dies) before the run ends.
        let _guarded = self.shared.coordination.guard_run(run_id, pgid, pid_start);
        // A store that stays locked past `store.lock_timeout_ms` ends the run at once (the
        // event waits, deferred, for the run's end).
        tracing::info!(pid, engine = %kind, "engine started");
        let mut unstored = self
            .record_spawn(prompt, run_id, argv, kind, pid, pid_start)
            .await;

        let Output {
            mut lines,
            mut spool,
        } = output;
        let mut transcript = Transcript::new(kind, known_thread);
        let mut batch: Vec<NewEvent> = Vec::new();
        let deadline = tokio::time::sleep(settings.run_timeout);
        tokio::pin!(deadline);
        // The oldest approval's `approvals.timeout_s`, when one waits and it is set.
        let approval_timer = tokio::time::sleep(Duration::from_secs(u32::MAX as u64));
        tokio::pin!(approval_timer);
        let mut streams_open = true;
        let mut status: Option<std::process::ExitStatus> = None;
        // Once the engine has exited: what it left is ended (or kept), then the pipes are
        // given a moment to close (something that escaped with them open must not hold the
        // run).
        let mut leftovers: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>> = None;
        let mut leftovers_done = false;
        let drain = tokio::time::sleep(Duration::from_secs(u32::MAX as u64));
        tokio::pin!(drain);
        let mut drain_cap = tokio::time::Instant::now();
        let stop = loop {
            if let Some(error) = unstored.take() {
                // At a shutdown the ledger gives a locked write up at once: the run is
                // stopped by the shutdown (its events spilled, its prompt requeued).
                if self.stops.is_shutting_down() && error.is_transient() {
                    break Some(Ended::Stopped(Stop::Shutdown));
                }
                break Some(Ended::Unstored(error));
            }
            let approval_due = talk.next_timeout(settings.approval_timeout);
            if let Some(due) = approval_due {
                approval_timer.as_mut().reset(due);
            }
            // While a write waits for the store, nothing here reads the lines: the readers
            // stop at LINE_BUFFER lines and the engine blocks on its full pipe.
            tokio::select! {
                line = lines.recv(), if streams_open => {
                    let Some(line) = line else {
                        // Both pipes closed; the exit status may already be in.
                        streams_open = false;
                        if status.is_some() && leftovers_done {
                            break None;
                        }
                        continue;
                    };
                    let new_thread = self.take_line(prompt, run_id, line, &mut transcript, &mut batch).await;
                    // The turn is over: an engine that reads its stdin for more exits now
                    // (before this line's events are stored: its exit need not wait for that).
                    if transcript.terminal.is_some() {
                        talk.close();
                    }
                    unstored = self.store_lines(run_id, new_thread, &mut batch, lines.is_empty(), &transcript).await;
                    for asked in std::mem::take(&mut transcript.asks) {
                        let refused = self
                            .ask_person(prompt, run_id, kind, &*transcript.adapter, asked, &mut talk, &mut batch)
                            .await;
                        unstored = unstored.or(refused);
                    }
                }
                answered = self.answers.recv(), if talk.waits() => {
                    if let Some(answered) = answered {
                        self.take_answer(&*transcript.adapter, &mut talk, answered);
                    }
                    if let Some(paused) = talk.resume() {
                        let at = deadline.deadline() + paused;
                        deadline.as_mut().reset(at);
                    }
                }
                _ = &mut approval_timer, if approval_due.is_some() => {
                    if let Some(timeout) = settings.approval_timeout {
                        self.time_out(&*transcript.adapter, &mut talk, timeout).await;
                    }
                    if let Some(paused) = talk.resume() {
                        let at = deadline.deadline() + paused;
                        deadline.as_mut().reset(at);
                    }
                }
                exit = child.wait(), if status.is_none() => {
                    match exit {
                        Ok(exit) => status = Some(exit),
                        Err(error) => {
                            // Ended as a stopped run is: its whole group and what carries
                            // its id, then it fails saying why.
                            tracing::error!(%error, "waiting for the engine");
                            break Some(Ended::Lost(error.to_string()));
                        }
                    }
                    leftovers = Some(Box::pin(end_leftovers(
                        self.shared.clone(),
                        left.clone(),
                        settings.cancel_grace,
                    )));
                }
                _ = async { leftovers.as_mut().expect("armed").await }, if leftovers.is_some() && !leftovers_done => {
                    leftovers_done = true;
                    let now = tokio::time::Instant::now();
                    drain.as_mut().reset(now + STREAM_DRAIN);
                    drain_cap = now + STREAM_DRAIN_MAX;
                }
                // Lines still buffered are read first (a write that waited may have let the
                // drain run out meanwhile); then the pipes' time is up, or at the latest.
                _ = &mut drain, if leftovers_done && streams_open => {
                    let now = tokio::time::Instant::now();
                    if lines.is_empty() || now >= drain_cap {
                        break None;
                    }
                    drain.as_mut().reset(now + STREAM_DRAIN);
                }
                // Once the engine has exited on its own, the run ends as an exit.
                stop = self.stops.stopped(&self.session_id, &prompt.id, While::Running), if status.is_none() => {
                    // A hand-over leaves a spooled run to its shim, running.
                    let handing_over = stop == Stop::Shutdown
                        && spool.is_some()
                        && self.shared.life.is_handing_over();
                    break Some(if handing_over { Ended::HandedOver } else { Ended::Stopped(stop) })
                }
                // A run that waits for a person is not timed out: its clock stands still.
                _ = &mut deadline, if status.is_none() && !talk.waits() => break Some(Ended::TimedOut),
            }
            if status.is_some() && leftovers_done && !streams_open {
                break None;
            }
        };
        // (The spool is taken only for a hand-over: any other end keeps the lifeline until the
        // run is judged, so the shim never reads the pipes beside this daemon.)
        if let Some(mut spool) = spool.take_if(|_| matches!(stop, Some(Ended::HandedOver))) {
            // What was read and not delivered is in the spool already; the lines delivered
            // are stored now, with how far they cover, so the next daemon goes on from the
            // line after them.
            spool.stop_reading().await;
            while let Ok(line) = lines.try_recv() {
                self.take_line(prompt, run_id, line, &mut transcript, &mut batch)
                    .await;
            }
            if let Some(error) = self
                .store_lines(run_id, None, &mut batch, true, &transcript)
                .await
            {
                tracing::warn!(%error, "the run's last events are kept to be stored later");
            }
            spool.hand_over();
            tracing::info!("the run is handed over to its shim");
            return (RunOutcome::HandedOver, transcript.new_thread());
        }
        let why = match &stop {
            Some(Ended::Stopped(stop)) => format!("its run was {}", stop.ended_by()),
            Some(Ended::TimedOut) => "its run timed out".to_string(),
            Some(Ended::HandedOver) => "its run was handed over".to_string(),
            Some(_) => "its run failed".to_string(),
            None => "its engine exited".to_string(),
        };
        self.end_asking(run_id, &mut talk, &why).await;
        let reported = transcript.new_thread();
        self.denied += std::mem::take(&mut transcript.denied);
        let outcome = match stop {
            Some(ended) => {
                tracing::info!(why = ?ended, "engine stopped");
                if let Some(spool) = &spool {
                    spool.mark_stopped();
                }
                let mark = left.mark();
                self.end_stopped(prompt, run_id, ended, child, mark, lines, batch, settings)
                    .await
            }
            None => {
                // What the engine printed before it exited and the drain ended still
                // belongs to the run (its final line among it, maybe).
                while let Ok(line) = lines.try_recv() {
                    self.take_line(prompt, run_id, line, &mut transcript, &mut batch)
                        .await;
                }
                let status = status.or_else(|| child.try_wait().ok().flatten());
                tracing::info!(status = ?status, "engine exited");
                self.denied += transcript.denied;
                self.end_exited(prompt, run_id, transcript, status, batch)
            }
        };
        // Followed to its end here: the run's spool (empty) goes, and with it the lifeline.
        if let Some(spool) = spool {
            spool.remove();
        }
        (outcome, reported)
    }

    /// Records the engine's start: its `run.started` event, and its pid on the run's row.
    /// Returns why that could not be stored, if it could not (the event then waits, deferred,
    /// for the run's end).
    async fn record_spawn(
        &mut self,
        prompt: &Prompt,
        run_id: &str,
        argv: &[OsString],
        kind: EngineKind,
        pid: u32,
        pid_start: Option<u64>,
    ) -> Option<crate::actors::ledger::LedgerError> {
        // A test's kill -9 between the run's two commits (its row, then its pid).
        process::kill_point("run.spawned");
        let started = self.new_event(
            prompt,
            run_id,
            Payload::RunStarted(RunStarted {
                pid,
                engine: kind.as_str().to_string(),
                argv: Some(
                    argv.iter()
                        .map(|a| a.to_string_lossy().into_owned())
                        .collect(),
                ),
                ..RunStarted::default()
            }),
        );
        let spawned = RunSpawned {
            run_id: run_id.to_string(),
            pid,
            pid_start,
        };
        self.write_events(spawned, vec![started])
            .await
            .err()
            .map(|unwritten| unwritten.error)
    }

    /// Stores the events of the lines taken so far (with how far they cover the run's
    /// output, in one commit) once the batch is full or no line waits, or at once with a
    /// thread the engine named that is new to the session. Returns why they could not be
    /// stored (they stay deferred, for the next write).
    pub(super) async fn store_lines(
        &mut self,
        run_id: &str,
        new_thread: Option<String>,
        batch: &mut Vec<NewEvent>,
        no_line_waits: bool,
        transcript: &Transcript,
    ) -> Option<crate::actors::ledger::LedgerError> {
        let mark = MarkStored {
            run_id: run_id.to_string(),
            through: transcript.read,
        };
        if let Some(thread_id) = new_thread {
            let set = SetThread {
                session_id: self.session_id.clone(),
                thread_id: Some(thread_id),
                resume_point: None,
            };
            let unwritten = match self
                .write_events(Both(set, mark), std::mem::take(batch))
                .await
            {
                Ok(_) => return None,
                Err(unwritten) => unwritten,
            };
            tracing::error!(error = %unwritten.error, run_id, "the engine's thread was not stored yet");
            // Kept: stored with the prompt's end, which waits out the lock.
            if let Some(Both(set, _)) = unwritten.write {
                self.pending_thread = Some(set);
            }
            return Some(unwritten.error);
        }
        // Lines that made no event need no write: read again by a daemon taking the run
        // over, they make none again.
        if batch.is_empty() && !self.has_deferred() {
            return None;
        }
        if batch.len() < EVENT_BATCH && !no_line_waits {
            // A test's kill -9 while lines are read and not stored.
            if batch.len() >= EVENT_BATCH / 2 {
                process::kill_point("run.lines_unstored");
            }
            return None;
        }
        self.write_events(mark, std::mem::take(batch))
            .await
            .err()
            .map(|unwritten| unwritten.error)
    }

    /// Turns one output line into events (pushed on `batch`), keeping in `transcript` what
    /// judges the run. Returns a thread the engine named that is new to the session.
    pub(super) async fn take_line(
        &self,
        prompt: &Prompt,
        run_id: &str,
        line: Line,
        transcript: &mut Transcript,
        batch: &mut Vec<NewEvent>,
    ) -> Option<String> {
        match line.stream {
            Stream::Stdout => transcript.read.stdout = line.end,
            Stream::Stderr => transcript.read.stderr = line.end,
        }
        if line.cut {
            batch.push(self.new_event(
                prompt,
                run_id,
                Payload::Notice(Notice::new(format!(
                    "an output line longer than {MAX_LINE} bytes was cut"
                ))),
            ));
        }
        let events = match line.stream {
            Stream::Stdout => transcript.adapter.parse_line(&line.text),
            Stream::Stderr => {
                keep_last(&mut transcript.stderr_tail, line.text.clone());
                batch.push(self.new_event(
                    prompt,
                    run_id,
                    Payload::Stderr(OutputLine {
                        line: line.text.clone(),
                    }),
                ));
                vec![]
            }
        };
        let mut new_thread = None;
        for event in events {
            let event = match event {
                EngineEvent::Message { text } => {
                    let (title, visible) = framing::extract_title(&text);
                    if let Some(title) = title {
                        self.set_title(prompt, Some(run_id), &title, batch).await;
                    }
                    transcript.answer.push(&visible);
                    EngineEvent::Message { text: visible }
                }
                // A thread is told once: when it is new to the session.
                EngineEvent::ThreadStarted { ref thread_id } => {
                    if transcript.thread.as_deref() == Some(thread_id.as_str()) {
                        continue;
                    }
                    transcript.thread = Some(thread_id.clone());
                    new_thread = Some(thread_id.clone());
                    event
                }
                EngineEvent::Notice { ref message } => {
                    keep_last(&mut transcript.notices, message.clone());
                    event
                }
                EngineEvent::Denied { .. } => {
                    transcript.denied += 1;
                    event
                }
                // Stored as approvals by the worker (`asking.rs`), not as plain events.
                asks @ (EngineEvent::Asks { .. } | EngineEvent::AsksUnknown { .. }) => {
                    transcript.asks.push(asks);
                    continue;
                }
                // Kept, not stored: where a later retry may resume from.
                EngineEvent::ResumePoint { id } => {
                    transcript.resume_point = Some(id);
                    continue;
                }
                other => other,
            };
            if matches!(
                event,
                EngineEvent::TurnCompleted | EngineEvent::TurnFailed { .. }
            ) {
                transcript.terminal = Some(event.clone());
            }
            batch.push(self.new_event(prompt, run_id, event));
        }
        new_thread
    }

    /// Ends a run stopped before it ended on its own (cancel, shutdown, timeout, a store
    /// that stayed locked): its whole group and whatever carries its id, kept or not.
    #[allow(clippy::too_many_arguments)]
    async fn end_stopped(
        &mut self,
        prompt: &Prompt,
        run_id: &str,
        ended: Ended,
        mut child: tokio::process::Child,
        mark: process::Mark,
        mut lines: mpsc::Receiver<Line>,
        mut batch: Vec<NewEvent>,
        settings: &crate::store::settings::Settings,
    ) -> RunOutcome {
        process::end_marked(&[mark], settings.cancel_grace, None).await;
        let exit = Exit::of(child.wait().await.ok());
        // What the child printed before it ended still belongs to the run.
        while let Ok(line) = lines.try_recv() {
            batch.push(self.new_event(
                prompt,
                run_id,
                Payload::Raw(OutputLine { line: line.text }),
            ));
        }
        let reason = match ended {
            Ended::Stopped(stop) => stop.ended_by(),
            Ended::HandedOver => "handed over",
            Ended::TimedOut => "timed out",
            Ended::Unstored(_) => "store unavailable",
            Ended::Lost(_) => "lost",
        };
        let error = match &ended {
            Ended::Unstored(error) => Some(format!("{error}; the run was ended")),
            Ended::Lost(error) => Some(format!("the engine could not be waited for: {error}")),
            _ => None,
        };
        batch.push(self.new_event(
            prompt,
            run_id,
            Payload::RunExited(RunExited {
                ended_by: Some(reason.to_string()),
                exit_code: Some(exit.code),
                signal: Some(exit.signal.clone()),
                error: Some(error.clone()),
                ..RunExited::default()
            }),
        ));
        // Stored with the run's end.
        self.deferred.append(&mut batch);
        match ended {
            Ended::Stopped(stop) => RunOutcome::Stopped(stop, exit),
            Ended::HandedOver => RunOutcome::HandedOver,
            Ended::TimedOut => RunOutcome::TimedOut(exit),
            Ended::Unstored(_) | Ended::Lost(_) => RunOutcome::Finished {
                verdict: RunVerdict::Failed {
                    message: error.unwrap_or_default(),
                },
                exit_code: exit.code,
                signal: exit.signal,
                answer: None,
                // Not the engine's failure: no retry would help while the store is locked.
                class: Some(FailureClass::Other),
                retry_after: None,
                context: Vec::new(),
                resume_point: None,
            },
        }
    }

    /// Judges a run whose engine exited on its own, from its structured output and exit.
    pub(super) fn end_exited(
        &mut self,
        prompt: &Prompt,
        run_id: &str,
        transcript: Transcript,
        status: Option<std::process::ExitStatus>,
        mut batch: Vec<NewEvent>,
    ) -> RunOutcome {
        let exit = Exit::of(status);
        let tail: Vec<String> = transcript.stderr_tail.into_iter().collect();
        let verdict = engine::judge(
            transcript.terminal.as_slice(),
            exit.code,
            exit.signal.as_deref(),
            &tail,
            transcript.adapter.final_line(),
        );
        let verdict_name = match &verdict {
            RunVerdict::Succeeded => "succeeded",
            RunVerdict::Failed { .. } => "failed",
        };
        batch.push(self.new_event(
            prompt,
            run_id,
            Payload::RunExited(RunExited {
                exit_code: Some(exit.code),
                signal: Some(exit.signal.clone()),
                verdict: Some(verdict_name.to_string()),
                ..RunExited::default()
            }),
        ));
        // Stored with the run's end (one commit with the prompt's end for a last run).
        self.deferred.append(&mut batch);
        let (class, retry_after) = match transcript.terminal {
            Some(EngineEvent::TurnFailed {
                class,
                retry_after_ms,
                ..
            }) => (class, retry_after_ms.map(Duration::from_millis)),
            _ => (None::<FailureClass>, None),
        };
        RunOutcome::Finished {
            verdict,
            exit_code: exit.code,
            signal: exit.signal,
            answer: transcript.answer.into_text(),
            class,
            retry_after,
            context: transcript.notices.into_iter().chain(tail).collect(),
            resume_point: transcript.resume_point,
        }
    }
}

/// Spawns a run's engine under its shim (`process::shim`), the leader of a process group of
/// their own, with stdout and stderr
/// piped and the prompt (if any) written to its stdin. `Err` is the run's failure message.
#[allow(clippy::too_many_arguments)]
fn spawn(
    argv: &[OsString],
    stdin: Option<&str>,
    converses: bool,
    run_env: &[(&'static str, String)],
    cwd: &str,
    environment: &ChildEnv<'_>,
    run_id: &str,
    kind: EngineKind,
    orphan_timeout: Duration,
) -> Result<Spawned, String> {
    // Under a shim, the run can outlive this daemon (`process::shim`, live restore): its
    // output pipes are made here, their read ends handed to the shim too.
    let dir = process::shim::spool_dir(environment.home, run_id);
    let spooling = process::shim::program().is_some();
    if spooling {
        crate::home::create_private_dir(&dir, true)
            .map_err(|error| format!("cannot make the run's spool {}: {error}", dir.display()))?;
    }
    let (mut command, pipes) = match spooling
        .then(|| process::shim::spooling_command(&argv[0], &dir, orphan_timeout))
        .transpose()
        .map_err(|error| format!("cannot make the run's pipes: {error}"))?
        .flatten()
    {
        Some((command, pipes)) => (command, Some(pipes)),
        None => {
            let mut command = process::shim::command(&argv[0]);
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
            (command, None)
        }
    };
    command
        .args(&argv[1..])
        .current_dir(cwd)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    environment.apply(&mut command, run_id, kind);
    command.envs(run_env.iter().map(|(name, value)| (name, value)));
    let spawned = command.spawn();
    if spawned.is_err() && spooling {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut child = spawned.map_err(|error| {
        if error.kind() == std::io::ErrorKind::NotFound {
            format!("engine '{kind}' not found: {}", argv[0].to_string_lossy())
        } else {
            format!(
                "engine '{kind}' could not start ({}): {error}",
                argv[0].to_string_lossy()
            )
        }
    })?;
    // The prompt goes in from a task of its own: a child that prints before it has read all
    // of a large prompt must not wait on us while we wait on it.
    let lines = match pipes {
        Some(pipes) => {
            let (spool, lines) = RunSpool::follow(dir, pipes.stdout, pipes.stderr, pipes.lifeline)
                .map_err(|error| format!("cannot read the run's pipes: {error}"))?;
            Output {
                lines,
                spool: Some(spool),
            }
        }
        None => Output {
            lines: read_output(&mut child),
            spool: None,
        },
    };
    if converses {
        let conversation = match (stdin, child.stdin.take()) {
            (Some(text), Some(pipe)) => Some(stdin_writer(pipe, text.to_string())),
            _ => None,
        };
        return Ok((child, conversation, lines));
    }
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let text = text.to_string();
        tokio::spawn(async move {
            // A child that exits without reading it all closes the pipe: not our error.
            let _ = pipe.write_all(text.as_bytes()).await;
            let _ = pipe.shutdown().await;
        });
    }
    Ok((child, None, lines))
}

/// A spawned run: its child, the writer of its stdin when it converses, and its output.
type Spawned = (
    tokio::process::Child,
    Option<mpsc::UnboundedSender<String>>,
    Output,
);

/// What a run's engine prints, as lines, and its spool when the run can outlive the daemon.
pub(super) struct Output {
    pub(super) lines: mpsc::Receiver<Line>,
    pub(super) spool: Option<RunSpool>,
}

/// Reads the child's stdout and stderr on tasks of their own into one bounded channel of
/// lines (at most [`LINE_BUFFER`] in flight). A worktree's setup command is read the same way.
pub(super) fn read_output(child: &mut tokio::process::Child) -> mpsc::Receiver<Line> {
    let (lines_tx, lines) = mpsc::channel::<Line>(LINE_BUFFER);
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(read_lines(
            stdout,
            Stream::Stdout,
            0,
            lines_tx.clone(),
            None,
        ));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(read_lines(stderr, Stream::Stderr, 0, lines_tx, None));
    }
    lines
}

/// What a run's output said so far that decides its outcome.
pub(super) struct Transcript {
    adapter: Box<dyn engine::Engine>,
    /// Only the last terminal line decides a run (see `engine::judge`): keeping that one, not
    /// every event, keeps a long run's memory flat.
    terminal: Option<EngineEvent>,
    stderr_tail: VecDeque<String>,
    notices: VecDeque<String>,
    answer: Answer,
    /// The session's thread before the run, then the one the engine names.
    known_thread: Option<String>,
    thread: Option<String>,
    /// Where a later retry may resume from (claude's last good assistant message).
    resume_point: Option<String>,
    /// Tool uses the engine refused (`tool.denied`), counted into the worker's after the run.
    pub(super) denied: u64,
    /// Requests the engine made on the line just read, for the worker to ask a person.
    pub(super) asks: Vec<EngineEvent>,
    /// How far the lines taken cover the run's output.
    pub(super) read: StoredThrough,
}

impl Transcript {
    pub(super) fn new(kind: EngineKind, known_thread: Option<&str>) -> Transcript {
        Transcript {
            adapter: kind.adapter(),
            terminal: None,
            stderr_tail: VecDeque::with_capacity(STDERR_TAIL),
            notices: VecDeque::with_capacity(STDERR_TAIL),
            answer: Answer::for_engine(kind),
            known_thread: known_thread.map(str::to_string),
            thread: known_thread.map(str::to_string),
            resume_point: None,
            denied: 0,
            asks: Vec::new(),
            read: StoredThrough::default(),
        }
    }

    /// The thread the engine reported, if it is not the one the session had.
    pub(super) fn new_thread(&self) -> Option<String> {
        self.thread
            .clone()
            .filter(|thread| Some(thread) != self.known_thread.as_ref())
    }
}

/// How long the pipes may stay open once the engine has exited and what it left was ended
/// (or kept): a process that escaped with them (or a kept one) must not hold the run.
const STREAM_DRAIN: Duration = Duration::from_millis(200);

/// The most the pipes may stay open once the engine has exited and what it left was ended
/// or kept, however much is still coming: a kept process that keeps writing does not hold
/// the run.
const STREAM_DRAIN_MAX: Duration = Duration::from_secs(2);

/// What an engine that exited on its own left behind, to end or keep.
#[derive(Clone)]
struct Left {
    pgid: i32,
    /// The engine's start time (see [`process::Mark::since`]).
    since: Option<u64>,
    /// Where its pid stands (see [`process::Mark::born`]).
    born: Option<process::Birth>,
    run_id: String,
    session_id: String,
    project_id: String,
    keep: bool,
}

/// Ends what the engine left in its group and what carries the run's id (SIGTERM, SIGKILL
/// after `grace`), or, for a project that keeps them, records them for `status`.
impl Left {
    /// The run's processes: its group, and whatever carries its id and was born since.
    fn mark(&self) -> process::Mark {
        process::Mark {
            group: Some(self.pgid),
            env: Some((crate::env::RUN_ID.to_string(), self.run_id.clone())),
            since: self.since,
            born: self.born,
            spawned_here: true,
        }
    }
}

async fn end_leftovers(shared: std::sync::Arc<Shared>, left: Left, grace: Duration) {
    let mark = left.mark();
    if !left.keep {
        process::end_marked(&[mark], grace, None).await;
        return;
    }
    let found = process::members_async(&[mark]).await;
    for member in found.iter().flatten() {
        shared.coordination.keep(member.pid, member.start);
    }
    let kept_at = crate::store::now_ms();
    let kept: Vec<KeptProcess> = found
        .into_iter()
        .flatten()
        .map(|member| KeptProcess {
            pid: member.pid as i64,
            pid_start: member.start as i64,
            run_id: left.run_id.clone(),
            session_id: left.session_id.clone(),
            project_id: Some(left.project_id.clone()),
            command: member.command,
            kept_at,
            node_id: shared.coordination.node_id().map(str::to_string),
        })
        .collect();
    // The ones recorded before and gone since are forgotten in the same write.
    let forget: Vec<(i64, i64)> = shared
        .readers
        .read(|connection| {
            crate::store::processes::kept_processes(connection, shared.coordination.node_id())
        })
        .unwrap_or_default()
        .into_iter()
        .filter(|process| !process::is_alive(process.pid as u32, Some(process.pid_start as u64)))
        .map(|process| (process.pid, process.pid_start))
        .collect();
    if kept.is_empty() && forget.is_empty() {
        return;
    }
    let write = KeepProcesses { kept, forget };
    if let Err(error) = shared
        .ledger
        .write_until_stored(write, &shared.life.shutdown_signal())
        .await
    {
        tracing::error!(%error, "the kept processes were not recorded");
    }
}

/// What stopped a run before it ended on its own.
#[derive(Debug)]
enum Ended {
    Stopped(Stop),
    TimedOut,
    /// Left to its shim, running, at a hand-over.
    HandedOver,
    /// Its events could not be stored: the store stayed locked past `store.lock_timeout_ms`
    /// (or failed). They are kept and stored with the run's end; the run fails.
    Unstored(crate::actors::ledger::LedgerError),
    /// Its exit could not be waited for (an error from the kernel): ended and failed.
    Lost(String),
}

fn keep_last(lines: &mut VecDeque<String>, line: String) {
    if lines.len() == STDERR_TAIL {
        lines.pop_front();
    }
    lines.push_back(line);
}

/// A run's answer: the agent's last message; for the `command` engine, whose every output
/// line is a message, the whole output (its last [`COMMAND_ANSWER`] bytes).
enum Answer {
    Last(Option<String>),
    Whole(String),
}

impl Answer {
    fn for_engine(kind: EngineKind) -> Answer {
        match kind {
            EngineKind::Command => Answer::Whole(String::new()),
            _ => Answer::Last(None),
        }
    }

    fn push(&mut self, text: &str) {
        match self {
            Answer::Last(last) => *last = Some(text.to_string()),
            Answer::Whole(whole) => {
                if !whole.is_empty() {
                    whole.push('\n');
                }
                whole.push_str(text);
                if whole.len() > 2 * COMMAND_ANSWER {
                    let mut cut = whole.len() - COMMAND_ANSWER;
                    while !whole.is_char_boundary(cut) {
                        cut += 1;
                    }
                    whole.drain(..cut);
                }
            }
        }
    }

    fn into_text(self) -> Option<String> {
        match self {
            Answer::Last(last) => last,
            Answer::Whole(whole) if whole.is_empty() => None,
            Answer::Whole(mut whole) => {
                if whole.len() > COMMAND_ANSWER {
                    let mut cut = whole.len() - COMMAND_ANSWER;
                    while !whole.is_char_boundary(cut) {
                        cut += 1;
                    }
                    whole.drain(..cut);
                }
                Some(whole)
            }
        }
    }
}

/// The environment every engine child gets, on top of the daemon's own.
pub(super) struct ChildEnv<'a> {
    pub(super) home: &'a Path,
    /// The project's and the session's own variables (`store::environment`): set over the
    /// daemon's environment and the engine's defaults; never one of corral's own.
    pub(super) extra: &'a crate::store::environment::Environment,
    pub(super) session_id: &'a str,
    /// The exec that drives the session now: the agent's own `corral` calls become its children.
    pub(super) exec_id: Option<&'a str>,
    /// That exec's trace: the agent's own `corral` calls belong to it.
    pub(super) trace_id: Option<&'a str>,
    pub(super) attempt: i64,
    /// The lease guard's mark (shared store): a child killed with its daemon before it was
    /// listed with the guard is still found by it.
    pub(super) guard_mark: Option<&'a str>,
}

use crate::env::DAEMON_ONLY;

impl ChildEnv<'_> {
    /// Sets the variables a child of run `run_id` gets, on top of the daemon's environment
    /// minus [`DAEMON_ONLY`]: who it is (`CORRAL_HOME`, `CORRAL_SESSION_ID`, `CORRAL_RUN_ID`,
    /// `CORRAL_RUN_ATTEMPT`), who drives it (`CORRAL_PARENT_EXEC`, `CORRAL_TRACE_ID`),
    /// `RUST_BACKTRACE=0`, and the engine's own defaults ([`engine::Engine::env`]) unless the
    /// daemon's environment sets them. README's "Environment" lists the same.
    fn apply(&self, command: &mut tokio::process::Command, run_id: &str, kind: EngineKind) {
        self.apply_common(command);
        command
            .env(crate::env::RUN_ATTEMPT, self.attempt.to_string())
            .env(crate::env::RUN_ID, run_id);
        for (name, value) in kind.adapter().env() {
            if std::env::var_os(name).is_none() && !self.extra.0.contains_key(name) {
                command.env(name, value);
            }
        }
    }

    /// What every child of a session gets, a run's engine or a worktree's setup command (which
    /// is no run: it gets neither `CORRAL_RUN_ID` nor `CORRAL_RUN_ATTEMPT`, not even the
    /// daemon's own).
    pub(super) fn apply_common(&self, command: &mut tokio::process::Command) {
        for name in DAEMON_ONLY {
            command.env_remove(name);
        }
        command
            .env_remove(crate::env::RUN_ID)
            .env_remove(crate::env::RUN_ATTEMPT)
            .env(crate::env::HOME, self.home)
            .env(crate::env::SESSION_ID, self.session_id)
            // Engines' own backtraces are noise in a supervised run's error message.
            .env("RUST_BACKTRACE", "0");
        match self.exec_id {
            Some(exec_id) => command.env(crate::env::PARENT_EXEC, exec_id),
            None => command.env_remove(crate::env::PARENT_EXEC),
        };
        match self.trace_id {
            Some(trace_id) => command.env(crate::env::TRACE_ID, trace_id),
            None => command.env_remove(crate::env::TRACE_ID),
        };
        guard_mark(command, self.guard_mark);
        command.envs(&self.extra.0);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// Its name in events (`setup.output`'s `stream`).
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

pub(super) struct Line {
    pub(super) stream: Stream,
    pub(super) text: String,
    /// The line was longer than [`MAX_LINE`] and only its start is kept.
    pub(super) cut: bool,
    /// Where its stream stands just past it (its newline), in bytes from the stream's start:
    /// what the run's stored events cover once this line's are stored (live restore).
    pub(super) end: u64,
}

/// Reads `pipe` line by line as bytes: invalid UTF-8 is decoded lossily, a last line without a
/// newline is delivered when the pipe closes, and a line longer than [`MAX_LINE`] keeps only
/// its start (the rest is read and dropped). `from`: where in its stream the pipe begins (a
/// spool read from the middle). Told to `stop` (a run handed over to its shim), it returns at
/// once: what it read and did not deliver is in the run's spool already (see `spool::Tee`).
pub(super) async fn read_lines(
    pipe: impl AsyncRead + Unpin,
    stream: Stream,
    from: u64,
    lines: mpsc::Sender<Line>,
    mut stop: Option<watch::Receiver<bool>>,
) {
    let mut reader = BufReader::new(pipe);
    let mut buffer = Vec::new();
    let mut at = from;
    loop {
        buffer.clear();
        let mut cut = false;
        let mut ended = false;
        loop {
            let filled = tokio::select! {
                biased;
                () = stopped(&mut stop) => return,
                filled = reader.fill_buf() => filled.map(|available| available.len()),
            };
            let available = match filled {
                Ok(0) | Err(_) => {
                    ended = true;
                    break;
                }
                Ok(_) => reader.buffer(),
            };
            let (take, newline) = match available.iter().position(|&b| b == b'\n') {
                Some(at) => (at + 1, true),
                None => (available.len(), false),
            };
            let room = MAX_LINE.saturating_sub(buffer.len());
            if take > room {
                cut = true;
            }
            buffer.extend_from_slice(&available[..take.min(room)]);
            reader.consume(take);
            at += take as u64;
            if newline {
                break;
            }
        }
        if ended && buffer.is_empty() {
            return;
        }
        let permit = tokio::select! {
            biased;
            () = stopped(&mut stop) => return,
            permit = lines.reserve() => permit,
        };
        while matches!(buffer.last(), Some(b'\n' | b'\r')) {
            buffer.pop();
        }
        let text = String::from_utf8_lossy(&buffer).into_owned();
        match permit {
            Ok(permit) => permit.send(Line {
                stream,
                text,
                cut,
                end: at,
            }),
            Err(_) => {
                // The run is over, but a process it kept still writes here: read and drop
                // what it writes rather than break its pipe.
                let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
                return;
            }
        }
        if ended {
            return;
        }
    }
}

/// Resolves once `stop` turns true; never without one.
async fn stopped(stop: &mut Option<watch::Receiver<bool>>) {
    match stop {
        Some(stop) => {
            if stop.wait_for(|stop| *stop).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Gives a child this daemon's lease-guard mark, or none (a daemon started inside another
/// one's run must not hand that one's mark on).
pub(crate) fn guard_mark(command: &mut tokio::process::Command, mark: Option<&str>) {
    match mark {
        Some(mark) => command.env(crate::env::LEASE_GUARD, mark),
        None => command.env_remove(crate::env::LEASE_GUARD),
    };
}
