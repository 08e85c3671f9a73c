//! `corral run -- CMD [ARGS…]`: runs CMD as the leader of its own process group with
//! stdin/stdout/stderr passed through, exits with CMD's status, and records it.
//!
//! SIGINT or SIGTERM to corral ends CMD's whole group first (SIGTERM, then SIGKILL after
//! `cancel.grace_ms`), then corral exits 130 or 143 as `interrupted`. Processes CMD leaves
//! running in its group after it exits on its own are left alone: backgrounding is its call.
//!
//! The command is spawned as soon as the arguments are parsed, before the store is open.
//! When a daemon answers, it records the exec ([`DaemonExec`]: `exec.start` while the
//! command runs, `exec.end` once it ended) and corral opens no store at all; else
//! `cli::run_first` opens the store and writes the exec's start while the command runs
//! (start and end in one write when the command is quicker than the store).
//!
//! From a terminal's foreground, CMD gets the terminal while it runs (see
//! `process::Foreground`), so it can read it; the terminal's Ctrl-C then goes to CMD, as
//! under a shell, and its exit says what it did. When CMD stops (Ctrl-Z), corral takes the
//! terminal back and stops too, so the shell sees the job stop; when the shell continues corral
//! (`fg`), corral lends the terminal again and continues CMD.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::atomic::Ordering;

use tokio::signal::unix::{signal, Signal, SignalKind};

use super::invocation::{self, Invocation, OWNED_GROUP};
use super::{CliError, Context, Exit};
use crate::client::{Client, ClientError};
use crate::process;
use crate::protocol::{ExecEnd, ExecEndParams, ExecStart, ExecStartParams};
use crate::store::exec::Outcome;
use crate::store::{self, settings};

/// The exit status of a command that could not be started, as shells use it.
pub const CANNOT_START: i32 = 127;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The command to run and its arguments (put them after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// The command, spawned, with the signals it is watched for.
pub struct Running {
    child: tokio::process::Child,
    pid: u32,
    pgid: i32,
    foreground: Option<process::Foreground>,
    interrupt: Signal,
    terminate: Signal,
    children: Signal,
    continued: Signal,
}

/// How the command's wait ended.
pub enum Ended {
    /// On its own (or it could not be waited for).
    Exited(Result<Exit, CliError>),
    /// corral was told to stop: the command's group is still to be ended, see
    /// [`Interrupted::end`] (after the store is open, so that its grace is the store's).
    Interrupted(Interrupted),
}

/// The command, running still, after SIGINT or SIGTERM to corral.
pub struct Interrupted {
    child: tokio::process::Child,
    pgid: i32,
    foreground: Option<process::Foreground>,
    signal: i32,
}

fn watch(kind: SignalKind, name: &str) -> Result<Signal, CliError> {
    signal(kind).map_err(|error| CliError::failure(format!("cannot watch {name}: {error}")))
}

/// Spawns the command as the leader of its own group, with this exec as its parent (it needs
/// only the exec's id and the home, not the store: the store opens while it runs).
pub fn spawn(home: &Path, invocation: &Invocation, args: &RunArgs) -> Result<Running, CliError> {
    // Listen before spawning, so a signal that arrives at once is not lost.
    let interrupt = watch(SignalKind::interrupt(), "SIGINT")?;
    let terminate = watch(SignalKind::terminate(), "SIGTERM")?;
    // A child that stops (Ctrl-Z) says so with SIGCHLD; a shell's `fg` continues corral with
    // SIGCONT.
    let children = watch(SignalKind::child(), "SIGCHLD")?;
    let continued = watch(SignalKind::from_raw(libc::SIGCONT), "SIGCONT")?;

    let program = &args.command[0];
    let mut command = tokio::process::Command::new(program);
    command
        .args(&args.command[1..])
        .process_group(0)
        .envs(invocation.child_env())
        .env(crate::env::HOME, home);
    let child = command.spawn().map_err(|error| CliError {
        code: CANNOT_START,
        message: Some(format!(
            "cannot start '{}': {error}",
            program.to_string_lossy()
        )),
    })?;
    let pid = child.id().unwrap_or(0);
    let pgid = pid as i32;
    OWNED_GROUP.store(pgid, Ordering::SeqCst);
    let foreground = process::Foreground::lend(pgid);
    Ok(Running {
        child,
        pid,
        pgid,
        foreground,
        interrupt,
        terminate,
        children,
        continued,
    })
}

impl Running {
    /// Waits for the command to end, or for corral to be told to stop.
    pub async fn wait(self) -> Ended {
        let Running {
            mut child,
            pid,
            pgid,
            foreground,
            mut interrupt,
            mut terminate,
            mut children,
            mut continued,
        } = self;
        let signal = loop {
            tokio::select! {
                status = child.wait() => {
                    drop(foreground);
                    OWNED_GROUP.store(0, Ordering::SeqCst);
                    return Ended::Exited(match status {
                        Ok(status) => Ok(exit_of(status)),
                        Err(error) => Err(CliError::failure(format!(
                            "waiting for the command: {error}"
                        ))),
                    });
                }
                _ = children.recv(), if foreground.is_some() => {
                    if let Some(foreground) = foreground.as_ref().filter(|_| process::child_stopped(pid)) {
                        // The job stops as a whole, as under a shell; it goes on when we do.
                        foreground.take_back();
                        // Stops corral's whole process group (pid 0: the shell's job, a
                        // pipeline's other members too), as a stopped program does; it returns
                        // once continued.
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(0),
                            nix::sys::signal::Signal::SIGTSTP,
                        );
                        foreground.lend_again();
                    }
                }
                // After a `bg` corral runs on without the terminal; the `fg` that follows
                // continues it, and the command gets the terminal back.
                _ = continued.recv(), if foreground.is_some() => {
                    if let Some(foreground) = foreground.as_ref() {
                        foreground.lend_again();
                    }
                }
                _ = interrupt.recv() => break libc::SIGINT,
                _ = terminate.recv() => break libc::SIGTERM,
            }
        };
        Ended::Interrupted(Interrupted {
            child,
            pgid,
            foreground,
            signal,
        })
    }
}

impl Interrupted {
    /// Ends the command's group (SIGTERM, then SIGKILL after `grace`): corral exits 130 or
    /// 143 as `interrupted`. The command is ended while it still has the terminal: its
    /// handlers may restore the terminal's modes, which a background group cannot do.
    pub async fn end(mut self, grace: std::time::Duration) -> Exit {
        process::end_group(&mut self.child, self.pgid, grace).await;
        drop(self.foreground);
        OWNED_GROUP.store(0, Ordering::SeqCst);
        Exit::interrupted(self.signal)
    }
}

/// Runs the command with the store already open (`cli::run_first` does not wait for it).
pub async fn execute(context: &Context, args: &RunArgs) -> Result<Exit, CliError> {
    let running = spawn(&context.home, &context.invocation, args)?;
    conclude(running.wait().await, Some(context)).await
}

/// How the command ended, its group ended first when corral was told to stop (with the
/// store's `cancel.grace_ms` when the store is ours and open).
pub async fn conclude(ended: Ended, context: Option<&Context>) -> Result<Exit, CliError> {
    match ended {
        Ended::Exited(exit) => exit,
        Ended::Interrupted(interrupted) => {
            let reader = context.and_then(|context| context.reader().ok());
            Ok(interrupted
                .end(settings::cancel_grace(reader.as_ref()))
                .await)
        }
    }
}

/// [`conclude`] beside a daemon that records the exec: no store is open, so an interrupted
/// command's grace is read from a reader opened for it (the rare path).
pub async fn conclude_in(ended: Ended, home: &Path) -> Result<Exit, CliError> {
    match ended {
        Ended::Exited(exit) => exit,
        Ended::Interrupted(interrupted) => {
            let reader = store::location::locate(home)
                .ok()
                .and_then(|location| store::open_read(&location).ok());
            Ok(interrupted
                .end(settings::cancel_grace(reader.as_ref()))
                .await)
        }
    }
}

/// The daemon recording this exec: its start is committed (`exec.start`), its end is to be
/// (`exec.end`), both on this connection (the daemon checks that the exec is the one the
/// connection's `initialize` named, run by the connected process).
pub struct DaemonExec {
    client: Client,
}

impl DaemonExec {
    /// Connects and has the exec's start recorded. `None` when no daemon answers, it does
    /// not know `exec.start`, or it refused or could not record it: the store records the
    /// exec instead (its write is an upsert, so a start the daemon did commit is no harm).
    pub async fn start(home: &Path, invocation: &Invocation) -> Option<DaemonExec> {
        let record = invocation.record();
        record.check().ok()?;
        let params = ExecStartParams { exec: record };
        let (client, answer) =
            Client::connect_and_call::<ExecStart>(home, Some(&invocation.id), &params)
                .await
                .ok()?;
        answer.ok()?;
        Some(DaemonExec { client })
    }

    /// Has the exec's end recorded; answered once it is committed, so that a command run
    /// after this one finds the row complete.
    pub async fn end(mut self, invocation: &Invocation, exit: &Exit) -> Result<(), ClientError> {
        let completion = invocation::completion(exit);
        let params = ExecEndParams {
            id: invocation.id.clone(),
            completed_at: completion.completed_at,
            exit_code: completion.exit_code,
            outcome: completion.outcome,
            signal: completion.signal,
        };
        self.client.call::<ExecEnd>(&params).await.map(drop)
    }
}

/// corral's exit for a command that ended on its own: its code, or 128 + the signal that
/// killed it, with that signal's name recorded.
fn exit_of(status: std::process::ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::code(code),
        (None, Some(signal)) => Exit {
            code: 128 + signal,
            outcome: Outcome::Failed,
            signal: Some(process::signal_name(signal)),
        },
        (None, None) => Exit::code(1),
    }
}
