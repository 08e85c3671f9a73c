//! Prompts: `prompt.send` (with the sender's exec, [`ExecRecord`], for the daemon to record),
//! `prompt.cancel`, `prompt.wait`, `prompt.retry`, `prompt.edit`.

use serde::{Deserialize, Serialize};

use super::{method, named_params};
use crate::store::prompts;
use crate::store::prompts::PromptStatus;

method! {
    /// Queues a prompt on a session; answers the prompt as queued (or running).
    PromptSend = "prompt.send": SendParams => Prompt,
    /// A prompt, or a session: its running prompt and everything queued on it.
    PromptCancel = "prompt.cancel": CancelParams => CancelResult,
    /// Waits for a prompt to end; answers it as it ended.
    PromptWait = "prompt.wait": PromptSelector => Prompt,
    /// Runs a failed or cancelled prompt again in place (optionally with a new text);
    /// answers it queued again (or running).
    PromptRetry = "prompt.retry": RetryParams => Prompt,
    /// Replaces a queued prompt's text; answers the prompt.
    PromptEdit = "prompt.edit": EditParams => Prompt,
}

/// `prompt.retry`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RetryParams {
    pub prompt: String,
    /// A new text for it (absent: the one it had).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `prompt.edit`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EditParams {
    pub prompt: String,
    pub text: String,
}

/// A prompt on the wire (`prompts::Prompt`'s keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    pub id: String,
    pub session_id: String,
    pub text: String,
    pub images: Vec<String>,
    pub read_only: bool,
    pub status: PromptStatus,
    pub attempts: i64,
    pub error: Option<String>,
    /// The agent's final answer (title line removed).
    pub answer: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    /// How many tool uses the engine refused in its runs: a `done` prompt with refusals is
    /// not the whole job.
    #[serde(default)]
    pub denied: i64,
    /// The prompts it runs after (`send --after`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Whether it runs after them however they ended (`--after-any`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_any: bool,
    /// Not to start before this time (ms; `send --at/--in`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<i64>,
}

impl From<&prompts::Prompt> for Prompt {
    fn from(p: &prompts::Prompt) -> Self {
        Prompt {
            id: p.id.clone(),
            session_id: p.session_id.clone(),
            text: p.text.clone(),
            images: p.images.clone(),
            read_only: p.read_only,
            status: p.status,
            attempts: p.attempts,
            error: p.error.clone(),
            answer: p.answer.clone(),
            created_at: p.created_at,
            started_at: p.started_at,
            finished_at: p.finished_at,
            denied: p.denied,
            after: p.after.clone(),
            after_any: p.after_any,
            due_at: p.due_at,
        }
    }
}

/// `prompt.cancel {target}`: a prompt's selector (its id or a unique prefix), or a session's.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CancelParams {
    pub target: String,
}
named_params!(CancelParams { target: string });

/// A prompt by its id or a unique id prefix.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PromptSelector {
    pub prompt: String,
}
named_params!(PromptSelector { prompt: string });

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CancelResult {
    pub cancelled: Vec<Cancelled>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cancelled {
    pub prompt: String,
    pub found: CancelFound,
}

/// What cancelling a prompt found (`prompts::CancelFound` on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cancel", rename_all = "snake_case")]
pub enum CancelFound {
    /// It was queued: it is now cancelled and will never run.
    Dequeued { session_id: String },
    /// It is running: its session's worker ends it.
    Running { session_id: String },
    /// It had already ended.
    Finished { status: PromptStatus },
}

impl From<&prompts::CancelFound> for CancelFound {
    fn from(found: &prompts::CancelFound) -> Self {
        match found {
            prompts::CancelFound::Dequeued { session_id } => CancelFound::Dequeued {
                session_id: session_id.clone(),
            },
            prompts::CancelFound::Running { session_id } => CancelFound::Running {
                session_id: session_id.clone(),
            },
            prompts::CancelFound::Finished { status } => CancelFound::Finished { status: *status },
        }
    }
}

/// `prompt.send`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SendParams {
    pub session: String,
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    #[serde(default)]
    pub read_only: bool,
    /// The policy this prompt runs under, over the session's (a wider one is a widening;
    /// `full` only where the project grants it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<crate::engine::Policy>,
    /// The driver claim the sender holds (`send --wait`, `attach`): refused with
    /// `code::SUPERSEDED` once another driver took the session over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The prompts (ids or unique prefixes, in any session) it runs after: it stays queued
    /// until they have ended, and fails if one fails or is cancelled, unless `after_any`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Runs after `after` however they ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_any: bool,
    /// Not to start before this time (ms since the epoch; `send --at/--in`); refused when it
    /// is in the past.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<i64>,
    /// The caller's own exec, recorded by the daemon (a compatible addition; a daemon whose
    /// `initialize` answers `records_execs: true` honours it): its start before the prompt is
    /// queued, its end with this request's answer (exit 0 for a prompt, 1 for an error).
    /// Read before the other params, so that a refused send is recorded too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecRecord>,
}

/// The longest id (an exec's, a trace's, a session's) an [`ExecRecord`] carries.
pub const MAX_EXEC_ID: usize = 256;

/// The longest path (`cwd`, `repo`) an [`ExecRecord`] carries (Linux's `PATH_MAX`).
pub const MAX_EXEC_PATH: usize = 4096;

/// A `corral` process as an exec row, sent by the process itself for the daemon to record
/// (`prompt.send`'s `exec`): what `cli::invocation` would write into the store, field for
/// field, so that the row is the same whoever writes it. The daemon records nothing a peer
/// of the same uid could not record by running `corral` itself; it checks sizes and that the
/// pid is the peer's, and that the id is the one the connection's `initialize` named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRecord {
    pub id: String,
    pub trace_id: String,
    #[serde(default)]
    pub parent_exec_id: Option<String>,
    #[serde(default)]
    pub caller_session_id: Option<String>,
    pub argv: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub repo: Option<String>,
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/PID/stat`), which tells the
    /// process from a later one with the same pid.
    #[serde(default)]
    pub pid_start: Option<u64>,
    /// Milliseconds since the epoch, taken by the process when it started.
    pub started_at: i64,
}

impl ExecRecord {
    /// The row of an exec as its process describes itself (`cli::invocation` builds one for
    /// its own store write, the daemon from what a client sent): an exec made for a session
    /// was made by its agent, not by a person.
    pub fn into_new_exec(
        self,
        completion: Option<crate::store::exec::ExecCompletion>,
    ) -> crate::store::exec::NewExec {
        crate::store::exec::NewExec {
            via_agent: self.caller_session_id.is_some(),
            id: self.id,
            trace_id: self.trace_id,
            parent_exec_id: self.parent_exec_id,
            caller_session_id: self.caller_session_id,
            argv: self.argv,
            cwd: self.cwd,
            repo: self.repo,
            pid: self.pid,
            pid_start: self.pid_start,
            started_at: self.started_at,
            completion,
        }
    }

    /// Checks the record's sizes and fields; the client checks before it sends (a record that
    /// fails here is written by the client itself), the daemon before it writes.
    pub fn check(&self) -> Result<(), String> {
        let id = |name: &str, value: &str| {
            if value.is_empty() || value.len() > MAX_EXEC_ID {
                Err(format!("exec.{name} must be 1 to {MAX_EXEC_ID} bytes"))
            } else {
                Ok(())
            }
        };
        id("id", &self.id)?;
        id("trace_id", &self.trace_id)?;
        if let Some(parent) = &self.parent_exec_id {
            id("parent_exec_id", parent)?;
        }
        if let Some(session) = &self.caller_session_id {
            id("caller_session_id", session)?;
        }
        for (name, path) in [("cwd", &self.cwd), ("repo", &self.repo)] {
            if path.as_ref().is_some_and(|path| path.len() > MAX_EXEC_PATH) {
                return Err(format!("exec.{name} is at most {MAX_EXEC_PATH} bytes"));
            }
        }
        if self.argv.is_empty() {
            return Err("exec.argv must name the program".into());
        }
        if self.pid == 0 || self.pid > i32::MAX as u32 {
            return Err("exec.pid must be a process id".into());
        }
        if self.started_at <= 0 {
            return Err("exec.started_at must be milliseconds since the epoch".into());
        }
        Ok(())
    }
}
