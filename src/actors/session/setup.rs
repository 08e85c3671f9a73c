//! A session's own worktree made usable before a prompt's first attempt ([`Worker::ready_worktree`]),
//! and the project's setup command run in it ([`Worker::run_setup`]).
//!
//! ```text
//! creating ─► worktree::make (finish or redo) ─► setup ─► sh -c SETUP ─► exit 0 ─► ready
//!                                                  ▲            └─ else: the prompt fails,
//!                                                  └──────────── the next prompt tries again
//! setup / ready, directory gone ─► the prompt fails: recreate it
//! ```
//!
//! The setup command is not a run (no row, no slot: it installs, the engine has not started):
//! it is a child of the session like an engine, in a process group of its own, with the
//! session's environment (`ChildEnv::apply_common`) and [`crate::env::SETUP_SESSION`] naming the session; its
//! lines are the session's `setup.output` events between `setup.started` and `setup.exited`,
//! stored in batches as an engine's are. A cancel, the daemon's shutdown or `run.timeout_s`
//! end its group and whatever carries its mark (SIGTERM, SIGKILL after `cancel.grace_ms`), and
//! so does its own exit (what it started in the background ends with it). A daemon killed -9
//! meanwhile: the shell gets SIGKILL from the kernel (`PR_SET_PDEATHSIG`), and what it started
//! is ended by the next boot's reconciliation, found by [`crate::env::SETUP_SESSION`] for each session whose
//! worktree is still `setup` (no pid is stored: a setup is no run); the prompt, resumed at
//! boot, then runs the setup again.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use super::child::{read_output, ChildEnv, Line};
use super::{Exit, PromptEnd, Stop, While, Worker, EVENT_BATCH};
use crate::actors::ledger::{LedgerError, SetWorktreeState};
use crate::events::{Payload, SetupExited, SetupOutput, SetupStarted};
use crate::process;
use crate::store::events::NewEvent;
use crate::store::projects::Project;
use crate::store::prompts::Prompt;
use crate::store::sessions::{Session, WorktreeState};

/// How long the setup's pipes may stay open once it has exited and its group was ended (a
/// process that left the group with them open must not hold the prompt).
const DRAIN_MAX: Duration = Duration::from_secs(2);

/// Why a setup command stopped before it ended on its own.
enum Ended {
    Stopped(Stop),
    TimedOut,
    /// Its lines could not be stored (the store stayed locked past `store.lock_timeout_ms`).
    Unstored(LedgerError),
    /// Its exit could not be waited for.
    Lost(String),
}

impl Worker {
    /// Makes the session's worktree usable for `prompt`: a worktree still `creating` is made
    /// (or finished), one in `setup` gets the project's setup command, and one whose directory
    /// is gone fails the prompt. Returns the session as stored when this changed it; `Ok(None)`
    /// for a session without a worktree, or one ready as it was.
    pub(super) async fn ready_worktree(
        &mut self,
        prompt: &Prompt,
        session: &Session,
        project: &Project,
    ) -> Result<Option<Session>, PromptEnd> {
        let Some(worktree) = &session.worktree else {
            return Ok(None);
        };
        let made = match worktree.state {
            WorktreeState::Ready | WorktreeState::Setup => {
                if !Path::new(&worktree.path).is_dir() {
                    return Err(PromptEnd::failed(gone(&worktree.path, &session.id)));
                }
                None
            }
            WorktreeState::Creating => Some(self.make_worktree(prompt, session, project).await?),
            // Archived: `send` refuses it, so only a prompt queued before the archive gets here.
            WorktreeState::Removed | WorktreeState::Kept => {
                return Err(PromptEnd::failed(format!(
                    "session '{}' is archived: its worktree was {}",
                    session.id,
                    worktree.state.as_str()
                )))
            }
        };
        let current = made.as_ref().unwrap_or(session);
        if current.worktree.as_ref().map(|w| w.state) != Some(WorktreeState::Setup) {
            return Ok(made);
        }
        let ready = match project.setup.as_deref().filter(|c| !c.trim().is_empty()) {
            Some(command) => {
                let cwd = crate::actors::worktree::working_dir(current, project);
                let env = project.env.under(&current.env);
                self.run_setup(prompt, command, &cwd, &env).await?
            }
            // The project's setup was cleared since the worktree was made: nothing to run.
            None => self.set_ready(Vec::new()).await?,
        };
        Ok(Some(ready))
    }

    /// `worktree::make` for a worktree left `creating` (a daemon killed while it made it, or
    /// a session made without it). Cancellable: git's children end with the dropped call, and
    /// the worktree stays `creating` for the next prompt. The prompt's deferred events are
    /// stored first, so that `worktree.created` follows `prompt.started`.
    async fn make_worktree(
        &mut self,
        prompt: &Prompt,
        session: &Session,
        project: &Project,
    ) -> Result<Session, PromptEnd> {
        self.store_now().await?;
        let git = self
            .shared
            .git
            .find()
            .await
            .map_err(|error| PromptEnd::failed(error.to_string()))?;
        let worktrees = self.shared.worktrees();
        let make = crate::actors::worktree::make(&git, &worktrees, session, project);
        tokio::select! {
            made = make => made.map_err(|error| PromptEnd::failed(error.to_string())),
            stop = self.stops.stopped(&self.session_id, &prompt.id, While::Running) => {
                Err(PromptEnd::stopped(stop))
            }
        }
    }

    /// Stores the deferred events now (`prompt.started`): what follows is told live.
    async fn store_now(&mut self) -> Result<(), PromptEnd> {
        self.try_store_events(Vec::new())
            .await
            .map_err(|error| PromptEnd::failed(format!("store: {error}")))
    }

    /// Records the worktree `ready` with `events` (`setup.exited`) in one commit.
    async fn set_ready(&mut self, events: Vec<NewEvent>) -> Result<Session, PromptEnd> {
        let write = SetWorktreeState {
            session_id: self.session_id.clone(),
            state: WorktreeState::Ready,
        };
        match self.write_events(write, events).await {
            Ok(Some(session)) => Ok(session),
            Ok(None) => Err(PromptEnd::failed("the session no longer exists")),
            Err(unwritten) => Err(PromptEnd::failed(format!("store: {}", unwritten.error))),
        }
    }

    /// Runs `sh -c command` in `cwd` (see the module doc): `Ok` with the session once it
    /// exited 0 and the worktree is recorded `ready`; else the prompt's end, the worktree left
    /// in `setup`.
    pub(super) async fn run_setup(
        &mut self,
        prompt: &Prompt,
        command: &str,
        cwd: &Path,
        env: &crate::store::environment::Environment,
    ) -> Result<Session, PromptEnd> {
        if self.is_cancelled(&prompt.id) {
            return Err(PromptEnd::stopped(Stop::Cancel));
        }
        let settings = self.shared.settings();
        let started = self.setup_event(
            prompt,
            Payload::SetupStarted(SetupStarted {
                command: command.to_string(),
                cwd: cwd.to_string_lossy().into_owned(),
            }),
        );
        if let Err(error) = self.try_store_events(vec![started]).await {
            return Err(PromptEnd::failed(format!("store: {error}")));
        }
        let mut child = match self.spawn_setup(command, cwd, env) {
            Ok(child) => child,
            Err(error) => {
                let message = format!(
                    "the setup command could not start in {}: {error}",
                    cwd.display()
                );
                let exited = self.setup_event(
                    prompt,
                    Payload::SetupExited(SetupExited {
                        error: Some(message.clone()),
                        ..SetupExited::default()
                    }),
                );
                self.deferred.push(exited);
                return Err(PromptEnd::failed(message));
            }
        };
        let pid = child.id().unwrap_or(0);
        let mark = process::Mark {
            group: Some(pid as i32),
            env: Some((
                crate::env::SETUP_SESSION.to_string(),
                self.session_id.clone(),
            )),
            since: process::start_time(pid),
            born: None,
            spawned_here: true,
        };
        let mut lines = read_output(&mut child);
        let mut batch: Vec<NewEvent> = Vec::new();
        let mut last: Option<String> = None;
        let deadline = tokio::time::sleep(settings.run_timeout);
        tokio::pin!(deadline);
        let drain = tokio::time::sleep(Duration::from_secs(u32::MAX as u64));
        tokio::pin!(drain);
        let mut streams_open = true;
        let mut status: Option<std::process::ExitStatus> = None;
        let ended = loop {
            tokio::select! {
                line = lines.recv(), if streams_open => {
                    let Some(line) = line else {
                        streams_open = false;
                        if status.is_some() {
                            break None;
                        }
                        continue;
                    };
                    self.take_setup_line(prompt, line, &mut last, &mut batch);
                    if batch.len() >= EVENT_BATCH || lines.is_empty() {
                        if let Err(error) = self.try_store_events(std::mem::take(&mut batch)).await {
                            break Some(Ended::Unstored(error));
                        }
                    }
                }
                exit = child.wait(), if status.is_none() => {
                    match exit {
                        Ok(exit) => status = Some(exit),
                        Err(error) => break Some(Ended::Lost(error.to_string())),
                    }
                    // What it started in the background ends with it.
                    process::end_marked(std::slice::from_ref(&mark), settings.cancel_grace, None).await;
                    if !streams_open {
                        break None;
                    }
                    drain.as_mut().reset(tokio::time::Instant::now() + DRAIN_MAX);
                }
                _ = &mut drain, if status.is_some() => break None,
                stop = self.stops.stopped(&self.session_id, &prompt.id, While::Running), if status.is_none() => {
                    break Some(Ended::Stopped(stop));
                }
                _ = &mut deadline, if status.is_none() => break Some(Ended::TimedOut),
            }
        };
        let exit = match &ended {
            None => Exit::of(status),
            Some(_) => {
                process::end_marked(std::slice::from_ref(&mark), settings.cancel_grace, None).await;
                Exit::of(child.wait().await.ok())
            }
        };
        // What it printed before it ended still belongs to it.
        while let Ok(line) = lines.try_recv() {
            self.take_setup_line(prompt, line, &mut last, &mut batch);
        }
        let failure = match ended {
            None if exit.code == Some(0) => None,
            None => Some(setup_failed(&exit, last.as_deref())),
            Some(Ended::Stopped(stop)) => {
                batch.push(self.exited_event(prompt, &exit, Some(stop.ended_by())));
                self.deferred.append(&mut batch);
                return Err(PromptEnd::stopped(stop));
            }
            Some(Ended::TimedOut) => Some(format!(
                "the setup command ran longer than run.timeout_s ({} s) and was ended",
                settings.run_timeout.as_secs()
            )),
            Some(Ended::Unstored(error)) => Some(format!("{error}; the setup command was ended")),
            Some(Ended::Lost(error)) => Some(format!(
                "the setup command could not be waited for: {error}"
            )),
        };
        batch.push(self.exited_event(prompt, &exit, None));
        match failure {
            None => self.set_ready(batch).await,
            Some(message) => {
                // Stored with the prompt's end.
                self.deferred.append(&mut batch);
                Err(PromptEnd::failed(message))
            }
        }
    }

    /// `sh -c command` in `cwd`: a process group of its own, stdin closed, stdout and stderr
    /// piped, the session's environment and [`crate::env::SETUP_SESSION`], SIGKILL when the daemon dies.
    fn spawn_setup(
        &self,
        command: &str,
        cwd: &Path,
        env: &crate::store::environment::Environment,
    ) -> std::io::Result<tokio::process::Child> {
        let mut shell = crate::process::shim::command("sh");
        shell
            .arg("-c")
            .arg(command)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let environment = ChildEnv {
            home: &self.shared.home,
            extra: env,
            session_id: &self.session_id,
            exec_id: self.shared.exec_id.as_deref(),
            trace_id: None,
            attempt: 0,
            guard_mark: self.shared.coordination.guard_mark(),
        };
        environment.apply_common(&mut shell);
        shell.env(crate::env::SETUP_SESSION, &self.session_id);
        crate::process::dies_with_this_process(&mut shell);
        shell.spawn()
    }

    /// One line of the setup's output as a `setup.output` event; the last non-empty one is
    /// kept for the failure's message.
    fn take_setup_line(
        &self,
        prompt: &Prompt,
        line: Line,
        last: &mut Option<String>,
        batch: &mut Vec<NewEvent>,
    ) {
        if !line.text.trim().is_empty() {
            *last = Some(line.text.clone());
        }
        let output = SetupOutput {
            line: line.text.clone(),
            stream: line.stream.as_str().to_string(),
            cut: line.cut,
        };
        batch.push(self.setup_event(prompt, Payload::SetupOutput(output)));
    }

    fn exited_event(&self, prompt: &Prompt, exit: &Exit, ended_by: Option<&str>) -> NewEvent {
        let exited = SetupExited {
            code: exit.code,
            signal: exit.signal.clone(),
            ended_by: ended_by.map(str::to_string),
            error: None,
        };
        self.setup_event(prompt, Payload::SetupExited(exited))
    }

    /// An event of the setup, told as the prompt's (it has no run).
    fn setup_event(&self, prompt: &Prompt, payload: Payload) -> NewEvent {
        self.session_event(Some(&prompt.id), None, payload)
    }
}

/// The prompt's error for a worktree whose directory is gone.
fn gone(path: &str, session_id: &str) -> String {
    format!(
        "worktree {path} is gone (removed by hand?): recreate it with \
         `corral session recreate {session_id}`"
    )
}

/// The prompt's error for a setup command that exited unsuccessfully.
fn setup_failed(exit: &Exit, last: Option<&str>) -> String {
    let how = match (&exit.code, &exit.signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by {signal}"),
        (None, None) => "no exit status".to_string(),
    };
    match last {
        Some(line) => format!("setup command failed ({how}): {line}"),
        None => format!("setup command failed ({how})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_setup_says_how_it_ended_and_its_last_line() {
        let exit = Exit {
            code: Some(3),
            signal: None,
        };
        assert_eq!(
            setup_failed(&exit, Some("npm ERR! missing")),
            "setup command failed (exit 3): npm ERR! missing"
        );
        assert_eq!(setup_failed(&exit, None), "setup command failed (exit 3)");
        let killed = Exit {
            code: None,
            signal: Some("SIGKILL".into()),
        };
        assert_eq!(
            setup_failed(&killed, Some("x")),
            "setup command failed (killed by SIGKILL): x"
        );
    }

    #[test]
    fn a_gone_worktree_says_how_to_recreate_it() {
        assert_eq!(
            gone("/w/p/fix-1234abcd", "0190"),
            "worktree /w/p/fix-1234abcd is gone (removed by hand?): recreate it with \
             `corral session recreate 0190`"
        );
    }
}
