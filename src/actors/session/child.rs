//! A run as a child process: spawn it in its own process group with stdin closed, read its
//! stdout and stderr line by line into events, and wait for it to end, to be cancelled (its
//! whole group is ended), or to time out.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

use super::{event_kind, event_payload, RunOutcome, Stop, Worker, EVENT_BATCH};
use crate::actors::ledger::RunSpawned;
use crate::engine::{self, EngineEvent, EngineKind, RunVerdict};
use crate::events::EventKind;
use crate::framing;
use crate::process;
use crate::store::work::{NewEvent, Prompt};

/// How many stderr lines a run keeps to explain a failure with no structured message.
const STDERR_TAIL: usize = 20;

/// Lines in flight between a child's pipes and the worker. When the ledger falls behind, the
/// readers stop reading and the child blocks on its pipe: memory stays bounded.
const LINE_BUFFER: usize = 256;

impl Worker {
    /// Spawns the child, streams its output into events, and waits for it to end, to be
    /// cancelled, or to time out.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_child(
        &mut self,
        prompt: &Prompt,
        run_id: &str,
        argv: &[OsString],
        cwd: &str,
        environment: ChildEnv<'_>,
        kind: EngineKind,
        settings: &crate::store::settings::Settings,
    ) -> (RunOutcome, Option<String>) {
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .current_dir(cwd)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("CORRAL_HOME", environment.home)
            .env("CORRAL_SESSION_ID", environment.session_id)
            .env("CORRAL_RUN_ATTEMPT", environment.attempt.to_string())
            .env(crate::actors::supervisor::RUN_ID_ENV, run_id)
            // Engines' own backtraces are noise in a supervised run's error message.
            .env("RUST_BACKTRACE", "0");
        match environment.exec_id {
            Some(exec_id) => command.env("CORRAL_PARENT_EXEC", exec_id),
            None => command.env_remove("CORRAL_PARENT_EXEC"),
        };
        for (name, value) in kind.adapter().env() {
            if std::env::var_os(name).is_none() {
                command.env(name, value);
            }
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => {
                let message = if error.kind() == std::io::ErrorKind::NotFound {
                    format!("engine '{kind}' not found: {}", argv[0].to_string_lossy())
                } else {
                    format!(
                        "engine '{kind}' could not start ({}): {error}",
                        argv[0].to_string_lossy()
                    )
                };
                let verdict = RunVerdict::Failed { message };
                let outcome = RunOutcome::Finished {
                    verdict,
                    exit_code: None,
                    signal: None,
                    answer: None,
                    class: None,
                };
                return (outcome, None);
            }
        };
        let pid = child.id().unwrap_or(0);
        let pgid = pid as i32;
        let started = self.new_event(
            prompt,
            run_id,
            EventKind::RunStarted,
            json!({
                "pid": pid,
                "engine": kind.as_str(),
                "argv": argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            }),
        );
        let spawned = RunSpawned {
            run_id: run_id.to_string(),
            pid,
            pid_start: process::start_time(pid),
        };
        if let Err(error) = self.shared.write_with_events(spawned, vec![started]).await {
            tracing::error!(%error, run_id, "the run's pid was not recorded");
        }

        let (lines_tx, mut lines) = mpsc::channel::<Line>(LINE_BUFFER);
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(read_lines(stdout, Stream::Stdout, lines_tx.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(read_lines(stderr, Stream::Stderr, lines_tx.clone()));
        }
        drop(lines_tx);

        let adapter = kind.adapter();
        // Only the last terminal line decides a run (see `engine::judge`): keeping that one,
        // not every event, keeps a long run's memory flat.
        let mut terminal: Option<EngineEvent> = None;
        let mut stderr_tail: VecDeque<String> = VecDeque::with_capacity(STDERR_TAIL);
        let mut batch: Vec<NewEvent> = Vec::new();
        let mut answer: Option<String> = None;
        let mut reported_thread: Option<String> = None;
        let deadline = tokio::time::sleep(settings.run_timeout);
        tokio::pin!(deadline);
        let mut streams_open = true;
        let mut status: Option<std::process::ExitStatus> = None;
        let stop = loop {
            tokio::select! {
                line = lines.recv(), if streams_open => {
                    let Some(line) = line else {
                        // Both pipes closed; the exit status may already be in.
                        streams_open = false;
                        if status.is_some() {
                            break None;
                        }
                        continue;
                    };
                    let events = match line.stream {
                        Stream::Stdout => adapter.parse_line(&line.text),
                        Stream::Stderr => {
                            if stderr_tail.len() == STDERR_TAIL {
                                stderr_tail.pop_front();
                            }
                            stderr_tail.push_back(line.text.clone());
                            vec![]
                        }
                    };
                    if line.stream == Stream::Stderr {
                        batch.push(self.new_event(prompt, run_id, EventKind::Stderr, json!({ "line": line.text })));
                    }
                    for event in events {
                        let event = match event {
                            EngineEvent::Message { text } => {
                                let (title, visible) = framing::extract_title(&text);
                                if let Some(title) = title {
                                    self.set_title(prompt, run_id, &title, &mut batch).await;
                                }
                                answer = Some(visible.clone());
                                EngineEvent::Message { text: visible }
                            }
                            EngineEvent::ThreadStarted { ref thread_id } => {
                                reported_thread = Some(thread_id.clone());
                                event
                            }
                            other => other,
                        };
                        batch.push(self.new_event(prompt, run_id, event_kind(&event), event_payload(&event)));
                        if matches!(event, EngineEvent::TurnCompleted | EngineEvent::TurnFailed { .. }) {
                            terminal = Some(event);
                        }
                    }
                    if batch.len() >= EVENT_BATCH || lines.is_empty() {
                        self.store_events(std::mem::take(&mut batch)).await;
                    }
                }
                exit = child.wait(), if status.is_none() => {
                    match exit {
                        Ok(exit) => status = Some(exit),
                        Err(error) => {
                            tracing::error!(%error, "waiting for the engine");
                            break None;
                        }
                    }
                }
                stop = Self::stopped(&mut self.cancel, &mut self.shutdown, &prompt.id) => {
                    break Some(RunOutcome::Stopped(stop))
                }
                _ = &mut deadline => break Some(RunOutcome::TimedOut),
            }
            if status.is_some() && !streams_open {
                break None;
            }
        };
        if let Some(stop) = stop {
            process::end_group(&mut child, pgid, settings.cancel_grace).await;
            // What the child printed before it ended still belongs to the run.
            while let Ok(line) = lines.try_recv() {
                batch.push(self.new_event(
                    prompt,
                    run_id,
                    EventKind::Raw,
                    json!({ "line": line.text }),
                ));
            }
            let reason = match stop {
                RunOutcome::Stopped(Stop::Cancel) => "cancelled",
                RunOutcome::Stopped(Stop::Shutdown) => "daemon shutdown",
                _ => "timed out",
            };
            batch.push(self.new_event(
                prompt,
                run_id,
                EventKind::RunExited,
                json!({ "ended_by": reason }),
            ));
            // Stored with the run's end.
            self.deferred.append(&mut batch);
            return (stop, reported_thread);
        }
        let status = status.or_else(|| child.try_wait().ok().flatten());
        let exit_code = status.and_then(|status| status.code());
        let signal = status
            .and_then(|status| std::os::unix::process::ExitStatusExt::signal(&status))
            .map(process::signal_name);
        let tail: Vec<String> = stderr_tail.into_iter().collect();
        let verdict = engine::judge(terminal.as_slice(), exit_code, signal.as_deref(), &tail);
        batch.push(self.new_event(
            prompt,
            run_id,
            EventKind::RunExited,
            json!({
                "exit_code": exit_code,
                "signal": signal,
                "verdict": match &verdict { RunVerdict::Succeeded => "succeeded", RunVerdict::Failed { .. } => "failed" },
            }),
        ));
        // Stored with the run's end (one commit with the prompt's end for a last run).
        self.deferred.append(&mut batch);
        let outcome = RunOutcome::Finished {
            verdict,
            exit_code,
            signal,
            answer,
            class: None,
        };
        (outcome, reported_thread)
    }
}

/// The environment every engine child gets.
pub(super) struct ChildEnv<'a> {
    pub(super) home: &'a Path,
    pub(super) session_id: &'a str,
    /// The exec that drives the session now: the agent's own `corral` calls become its children.
    pub(super) exec_id: Option<&'a str>,
    pub(super) attempt: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

struct Line {
    stream: Stream,
    text: String,
}

/// Reads `pipe` line by line as bytes: invalid UTF-8 is decoded lossily, and a last line
/// without a newline is delivered when the pipe closes.
async fn read_lines(pipe: impl AsyncRead + Unpin, stream: Stream, lines: mpsc::Sender<Line>) {
    let mut reader = BufReader::new(pipe);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        match reader.read_until(b'\n', &mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                while matches!(buffer.last(), Some(b'\n' | b'\r')) {
                    buffer.pop();
                }
                let text = String::from_utf8_lossy(&buffer).into_owned();
                if lines.send(Line { stream, text }).await.is_err() {
                    return;
                }
            }
        }
    }
}
