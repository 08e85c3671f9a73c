//! `corral run -- CMD [ARGS…]`: runs CMD as the leader of its own process group with
//! stdin/stdout/stderr passed through, exits with CMD's status, and records it.
//!
//! SIGINT or SIGTERM to corral ends CMD's whole group first (SIGTERM, then SIGKILL after
//! `cancel.grace_ms`), then corral exits 130 or 143 as `interrupted`. Processes CMD leaves
//! running in its group after it exits on its own are left alone: backgrounding is its call.
//!
//! From a terminal's foreground, CMD gets the terminal while it runs (see
//! `process::Foreground`), so it can read it; the terminal's Ctrl-C then goes to CMD, as
//! under a shell, and its exit says what it did. When CMD stops (Ctrl-Z), corral takes the
//! terminal back and stops too, so the shell sees the job stop; when the shell continues corral
//! (`fg`), corral lends the terminal again and continues CMD.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::Ordering;

use tokio::signal::unix::{signal, SignalKind};

use super::invocation::OWNED_GROUP;
use super::{CliError, Context, Exit};
use crate::process;
use crate::store::exec::Outcome;
use crate::store::settings;

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

pub async fn execute(context: &Context, args: &RunArgs) -> Result<Exit, CliError> {
    // Listen before spawning, so a signal that arrives at once is not lost.
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|error| CliError::failure(format!("cannot watch SIGINT: {error}")))?;
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|error| CliError::failure(format!("cannot watch SIGTERM: {error}")))?;
    // A child that stops (Ctrl-Z) says so with SIGCHLD; a shell's `fg` continues corral with
    // SIGCONT.
    let mut children = signal(SignalKind::child())
        .map_err(|error| CliError::failure(format!("cannot watch SIGCHLD: {error}")))?;
    let mut continued = signal(SignalKind::from_raw(libc::SIGCONT))
        .map_err(|error| CliError::failure(format!("cannot watch SIGCONT: {error}")))?;

    let program = &args.command[0];
    let mut command = tokio::process::Command::new(program);
    command
        .args(&args.command[1..])
        .process_group(0)
        .envs(context.invocation.child_env())
        .env("CORRAL_HOME", &context.home);
    let mut child = command.spawn().map_err(|error| CliError {
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

    let stop = loop {
        tokio::select! {
            status = child.wait() => {
                drop(foreground);
                OWNED_GROUP.store(0, Ordering::SeqCst);
                let status = status.map_err(|error| {
                    CliError::failure(format!("waiting for the command: {error}"))
                })?;
                return Ok(exit_of(status));
            }
            _ = children.recv(), if foreground.is_some() => {
                if let Some(foreground) = foreground.as_ref().filter(|_| process::child_stopped(pid)) {
                    // The job stops as a whole, as under a shell; it goes on when we do.
                    foreground.take_back();
                    // Stops corral's whole process group (pid 0: the shell's job, a pipeline's
                    // other members too), as a stopped program does; it returns once continued.
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(0),
                        nix::sys::signal::Signal::SIGTSTP,
                    );
                    foreground.lend_again();
                }
            }
            // After a `bg` corral runs on without the terminal; the `fg` that follows continues
            // it, and the command gets the terminal back.
            _ = continued.recv(), if foreground.is_some() => {
                if let Some(foreground) = foreground.as_ref() {
                    foreground.lend_again();
                }
            }
            _ = interrupt.recv() => break libc::SIGINT,
            _ = terminate.recv() => break libc::SIGTERM,
        }
    };
    // The command is ended while it still has the terminal: its handlers may restore the
    // terminal's modes, which a background group cannot do.
    let grace = settings::cancel_grace(context.reader().ok().as_ref());
    process::end_group(&mut child, pgid, grace).await;
    drop(foreground);
    OWNED_GROUP.store(0, Ordering::SeqCst);
    Ok(Exit::interrupted(stop))
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
