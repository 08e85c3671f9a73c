//! Execs a client asks the daemon to record: `exec.start` (the caller's own exec, checked as
//! `prompt.send`'s `exec` is) and `exec.end` (the end of the exec this connection started).
//! `corral run` uses them when a daemon answers, so that a short command opens no store: the
//! store's open, its schema's parse and the first write are most of what `run` costs beyond
//! its command (docs/cli_cost.md). Socket only: over HTTP no `initialize` names an exec.

use serde::{Deserialize, Serialize};

use super::method;
use super::prompts::ExecRecord;
use crate::store::exec::Outcome;

method! {
    /// Records the start of the caller's own exec (once per connection).
    ExecStart = "exec.start": ExecStartParams => ExecRecorded,
    /// Records the end of the exec this connection's `exec.start` recorded; answered once
    /// the end is committed.
    ExecEnd = "exec.end": ExecEndParams => ExecRecorded,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecStartParams {
    pub exec: ExecRecord,
}

/// How the exec ended (the store's `ExecCompletion` on the wire).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecEndParams {
    pub id: String,
    /// Milliseconds since the epoch, taken by the process when its command ended.
    pub completed_at: i64,
    pub exit_code: i32,
    pub outcome: Outcome,
    /// The name of a signal that really ended the command (`SIGKILL`), never a guess.
    #[serde(default)]
    pub signal: Option<String>,
}

/// The exec recorded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecRecorded {
    pub id: String,
}
