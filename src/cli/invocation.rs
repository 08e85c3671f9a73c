//! This process as an exec: the row written when it starts and completed when it ends,
//! whichever way it ends (success, user error, engine failure, interrupt, panic).

use std::ffi::OsString;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::actors::ledger::{CompleteExec, LedgerHandle, RecordExec, RecordWholeExec};
use crate::process;
use crate::protocol::ExecRecord;
use crate::store::exec::{ExecCompletion, NewExec};
use crate::store::now_ms;

use super::{CliError, Exit};

/// The process group of the child `corral run` owns now (0: none), so that a panic still ends
/// it before the process goes.
pub static OWNED_GROUP: AtomicI32 = AtomicI32::new(0);

/// Everything about this process that its exec row records.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub id: String,
    pub trace_id: String,
    pub parent_exec_id: Option<String>,
    pub caller_session_id: Option<String>,
    argv: Vec<String>,
    cwd: Option<String>,
    repo: Option<String>,
    started_at: i64,
}

/// The parent named by [`crate::env::DRIVER_FILE`], if any.
fn driver_from_file() -> Option<String> {
    let path = env_value(crate::env::DRIVER_FILE)?;
    let exec = std::fs::read_to_string(path).ok()?;
    Some(exec.trim().to_string()).filter(|exec| !exec.is_empty())
}

fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

impl Invocation {
    /// Reads this process's identity from its argv, working directory and environment.
    pub fn capture(argv: Vec<OsString>) -> Self {
        let id = uuid::Uuid::now_v7().to_string();
        let cwd = std::env::current_dir().ok();
        Invocation {
            trace_id: env_value(crate::env::TRACE_ID).unwrap_or_else(|| id.clone()),
            id,
            parent_exec_id: env_value(crate::env::PARENT_EXEC).or_else(driver_from_file),
            caller_session_id: env_value(crate::env::SESSION_ID),
            argv: argv
                .into_iter()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect(),
            repo: cwd.as_deref().and_then(crate::repo::toplevel_text),
            cwd: cwd.map(|dir| dir.to_string_lossy().into_owned()),
            started_at: now_ms(),
        }
    }

    /// The exec as a record the daemon can write for this process (`prompt.send`'s `exec`),
    /// the same row this process would write itself.
    pub fn record(&self) -> ExecRecord {
        let pid = std::process::id();
        ExecRecord {
            id: self.id.clone(),
            trace_id: self.trace_id.clone(),
            parent_exec_id: self.parent_exec_id.clone(),
            caller_session_id: self.caller_session_id.clone(),
            argv: self.argv.clone(),
            cwd: self.cwd.clone(),
            repo: self.repo.clone(),
            pid,
            pid_start: process::start_time(pid),
            started_at: self.started_at,
        }
    }

    fn row(&self, completion: Option<ExecCompletion>) -> NewExec {
        self.record().into_new_exec(completion)
    }

    /// Writes the exec's start. `Ok(false)` when there is no ledger to write to.
    pub async fn record_start(
        &self,
        ledger: Option<&LedgerHandle>,
    ) -> Result<bool, crate::actors::ledger::LedgerError> {
        let Some(ledger) = ledger else {
            return Ok(false);
        };
        ledger.write(RecordExec(self.row(None))).await?;
        Ok(true)
    }

    /// Writes the exec's end.
    pub async fn record_end(
        &self,
        ledger: Option<&LedgerHandle>,
        exit: &Exit,
    ) -> Result<(), CliError> {
        if let Some(ledger) = ledger {
            ledger.write(complete(&self.id, exit)).await?;
        }
        Ok(())
    }

    /// Writes start and end at once (early commands know their exit before recording).
    pub async fn record_whole(&self, ledger: &LedgerHandle, exit: &Exit) -> Result<(), CliError> {
        ledger
            .write(RecordWholeExec(self.row(Some(completion(exit)))))
            .await?;
        Ok(())
    }

    /// The environment a child of this exec gets, so that its own `corral` calls are recorded
    /// as children of this one, in the same trace.
    pub fn child_env(&self) -> [(&'static str, &str); 2] {
        [
            (crate::env::PARENT_EXEC, self.id.as_str()),
            (crate::env::TRACE_ID, self.trace_id.as_str()),
        ]
    }
}

/// How an exec that ended with `exit` is recorded.
pub fn completion(exit: &Exit) -> ExecCompletion {
    ExecCompletion {
        completed_at: now_ms(),
        exit_code: exit.code,
        outcome: exit.outcome,
        signal: exit.signal.clone(),
    }
}

fn complete(id: &str, exit: &Exit) -> CompleteExec {
    CompleteExec {
        id: id.to_string(),
        completion: completion(exit),
    }
}

/// The exit status of a command that panicked (Rust's own panic status).
pub const PANIC_EXIT: i32 = 101;

/// Whether a panic is std's `print!` family failing on a closed pipe (`corral history S |
/// head -1`): the reader has all it wanted, and the command ends quietly, as every Unix tool
/// does. (std ignores SIGPIPE, so a write to a closed pipe fails with EPIPE, and `println!`
/// panics with "failed printing to stdout: … (os error 32)".)
pub fn is_closed_pipe(payload: &(dyn std::any::Any + Send)) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied());
    text.is_some_and(|text| {
        text.starts_with("failed printing to std")
            && text.ends_with(&format!("(os error {})", libc::EPIPE))
    })
}

/// On a panic: say so in one line (no backtrace) and end the child group this process owns,
/// which nothing else would end once the panicking task drops it. The exec is completed by
/// the caller, which sees the task fail. Output to a closed pipe is no error: nothing is said.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let group = OWNED_GROUP.load(Ordering::SeqCst);
        if is_closed_pipe(info.payload()) {
            if group > 0 {
                process::signal_group(group, nix::sys::signal::Signal::SIGKILL);
            }
            return;
        }
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|text| text.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        let place = info
            .location()
            .map(|at| format!(" at {}:{}", at.file(), at.line()))
            .unwrap_or_default();
        say!("corral: internal error: {message}{place}");
        if group > 0 {
            process::signal_group(group, nix::sys::signal::Signal::SIGKILL);
        }
    }));
}
