//! Engine adapters: how to start an engine child for a prompt, and how to read its output.
//!
//! One file per engine ([`codex`], [`claude`], [`opencode`], [`command`], [`fake`]). Each
//! adapter is a value implementing [`Engine`]:
//! - [`Engine::argv`] builds the child's exact argv from a [`RunSpec`] (the program first);
//! - [`Engine::parse_line`] turns one line of the child's stdout into normalized
//!   [`EngineEvent`]s (a line that is not the engine's JSON becomes [`EngineEvent::Raw`]).
//!
//! What the supervisor learns from the engines (see `../shared/reference/`): start them with
//! stdin closed, judge a run by its last structured line and not by its exit code alone
//! ([`RunVerdict`]), and classify failures for the retry policy ([`classify_failure`]).

pub mod app_server;
pub mod claude;
pub mod codex;
pub mod command;
pub mod fake;
pub mod opencode;

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The engines corral knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    Codex,
    Claude,
    Opencode,
    /// Any argv template with `{prompt}`; every output line is a message.
    Command,
    /// `corral-fake-engine`, speaking codex's `exec --json` format.
    Fake,
    /// One long-lived `codex app-server` child per project, speaking JSON-RPC over stdio.
    CodexAppServer,
}

impl EngineKind {
    pub const ALL: [EngineKind; 6] = [
        EngineKind::Codex,
        EngineKind::Claude,
        EngineKind::Opencode,
        EngineKind::Command,
        EngineKind::Fake,
        EngineKind::CodexAppServer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Codex => "codex",
            EngineKind::Claude => "claude",
            EngineKind::Opencode => "opencode",
            EngineKind::Command => "command",
            EngineKind::Fake => "fake",
            EngineKind::CodexAppServer => "codex-app-server",
        }
    }

    /// The executable looked up on `PATH` when `engines.<name>.path` is not set.
    pub fn default_program(self) -> &'static str {
        match self {
            EngineKind::Codex => "codex",
            EngineKind::Claude => "claude",
            EngineKind::Opencode => "opencode",
            EngineKind::Command => "sh",
            EngineKind::Fake => "corral-fake-engine",
            EngineKind::CodexAppServer => "codex",
        }
    }

    /// The adapter for this engine.
    pub fn adapter(self) -> Box<dyn Engine> {
        match self {
            EngineKind::Codex => Box::new(codex::Codex),
            EngineKind::Claude => Box::new(claude::Claude),
            EngineKind::Opencode => Box::new(opencode::Opencode),
            EngineKind::Command => Box::new(command::Command),
            EngineKind::Fake => Box::new(fake::Fake),
            EngineKind::CodexAppServer => Box::new(app_server::AppServer),
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EngineKind {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        EngineKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = EngineKind::ALL.iter().map(|kind| kind.as_str()).collect();
                format!("unknown engine '{text}' (one of: {})", names.join(", "))
            })
    }
}

/// How much the engine may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sandbox {
    /// Read only: read-only prompts, and every prompt of a remote project.
    ReadOnly,
    /// Write inside the working tree, never ask for approval (the default).
    WorkspaceWrite,
    /// No sandbox, no approvals: only with the project's explicit `full_access`.
    FullAccess,
}

impl Sandbox {
    /// The sandbox of a prompt: read-only wins over everything, then a remote project is
    /// read-only even with full access, then full access is used only when granted.
    pub fn for_prompt(full_access: bool, remote: bool, read_only: bool) -> Sandbox {
        if read_only || remote {
            Sandbox::ReadOnly
        } else if full_access {
            Sandbox::FullAccess
        } else {
            Sandbox::WorkspaceWrite
        }
    }
}

/// Everything an adapter needs to build one run's argv.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The engine's executable (resolved from `engines.<name>.path` or `PATH`).
    pub program: PathBuf,
    /// The prompt text as the engine receives it (project instructions already added).
    pub prompt: String,
    /// Image files attached to the prompt.
    pub images: Vec<PathBuf>,
    /// The engine's own thread/session id to continue, if any.
    pub thread_id: Option<String>,
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    pub sandbox: Sandbox,
    /// The argv template of the `command` engine; `{prompt}` is replaced by the prompt.
    pub template: Vec<String>,
}

/// One normalized thing an engine's output said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EngineEvent {
    /// The engine's thread/session id (new or resumed).
    ThreadStarted {
        thread_id: String,
    },
    TurnStarted,
    /// A piece of the answer as it streams.
    MessageDelta {
        text: String,
    },
    /// A complete message of the agent.
    Message {
        text: String,
    },
    /// A tool call or command the agent ran (`name`: the tool or item type; `detail`: the
    /// engine's own description of it).
    Tool {
        name: String,
        detail: serde_json::Value,
    },
    /// Token usage of the turn, as the engine reports it.
    Usage {
        usage: serde_json::Value,
    },
    /// A non-fatal error line (codex prints `Reconnecting... 1/5` in turns that succeed).
    Notice {
        message: String,
    },
    /// The turn completed: the run succeeded, whatever came before.
    TurnCompleted,
    /// The turn failed with the engine's own message.
    TurnFailed {
        message: String,
    },
    /// A line that is not the engine's JSON (kept as it was, lossily decoded).
    Raw {
        line: String,
    },
}

/// An engine adapter.
pub trait Engine: Send + Sync {
    fn kind(&self) -> EngineKind;
    /// The child's argv, program first.
    fn argv(&self, spec: &RunSpec) -> Vec<OsString>;
    /// The events one stdout line carries (possibly none).
    fn parse_line(&self, line: &str) -> Vec<EngineEvent>;
    /// Variables the child gets unless corral's own environment sets them (a person's
    /// choice wins).
    fn env(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
}

// Small helpers the output parsers share.

/// A string field of a JSON object.
pub(crate) fn str_field<'a>(
    object: &'a serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Option<&'a str> {
    object.get(key).and_then(serde_json::Value::as_str)
}

/// A line kept as it was: not the engine's JSON, or a shape the parser does not know.
pub(crate) fn raw(line: &str) -> Vec<EngineEvent> {
    vec![EngineEvent::Raw {
        line: line.to_string(),
    }]
}

/// An optional setting that counts only when it says something.
pub(crate) fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|value| !value.is_empty())
}

/// How a run ended, judged from its last structured line first and its exit status second.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunVerdict {
    Succeeded,
    /// Failed with this message (the engine's own words where it gave any).
    Failed {
        message: String,
    },
}

/// Judges a finished run: a `TurnCompleted` after the last `TurnFailed` is a success whatever
/// the exit code (codex prints `error` lines in turns that succeed); a `TurnFailed` is a
/// failure with its message; with neither, exit code 0 succeeds (`command`), anything else fails
/// with the last stderr line or the exit status.
pub fn judge(
    events: &[EngineEvent],
    exit_code: Option<i32>,
    signal: Option<&str>,
    stderr_tail: &[String],
) -> RunVerdict {
    for event in events.iter().rev() {
        match event {
            EngineEvent::TurnCompleted => return RunVerdict::Succeeded,
            EngineEvent::TurnFailed { message } => {
                return RunVerdict::Failed {
                    message: message.clone(),
                }
            }
            _ => {}
        }
    }
    if exit_code == Some(0) {
        return RunVerdict::Succeeded;
    }
    let message = stderr_tail
        .iter()
        .rev()
        .find(|line| !line.trim().is_empty())
        .map(|line| line.trim().to_string())
        .unwrap_or_else(|| match (exit_code, signal) {
            (Some(code), _) => format!("the engine exited with status {code}"),
            (None, Some(signal)) => format!("the engine was killed by {signal}"),
            (None, None) => "the engine ended without a result".to_string(),
        });
    RunVerdict::Failed { message }
}

/// Why a run failed, as the retry policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// `429`, `rate limit`, `Too Many Requests`: wait 15/45/120 s, then fail.
    RateLimit,
    /// codex with a thread: `already has an active writer`: wait 2/5/15/30 s, same thread.
    WriterConflict,
    /// codex with a thread: `no rollout found for thread id`: new thread, replay at once.
    MissingRollout,
    /// app-server `serverOverloaded` or JSON-RPC error -32001: back off with jitter.
    Overloaded,
    /// app-server: the child's stdout ended or it exited before `turn/completed`.
    TransportClosed,
    /// Anything else: fail with the engine's message.
    Other,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::RateLimit => "rate_limit",
            FailureClass::WriterConflict => "writer_conflict",
            FailureClass::MissingRollout => "missing_rollout",
            FailureClass::Overloaded => "overloaded",
            FailureClass::TransportClosed => "transport_closed_before_turn_completed",
            FailureClass::Other => "other",
        }
    }
}

/// Classifies a failure message. The thread rules apply to codex only, and only when the run
/// resumed a thread (a new thread cannot conflict or lose its rollout).
pub fn classify_failure(
    engine: EngineKind,
    thread_id: Option<&str>,
    message: &str,
) -> FailureClass {
    let lower = message.to_ascii_lowercase();
    let codex_like = matches!(
        engine,
        EngineKind::Codex | EngineKind::Fake | EngineKind::CodexAppServer
    );
    if codex_like && thread_id.is_some() {
        if lower.contains("no rollout found for thread id") {
            return FailureClass::MissingRollout;
        }
        if lower.contains("already has an active writer") {
            return FailureClass::WriterConflict;
        }
    }
    if lower.contains("429") || lower.contains("rate limit") || lower.contains("too many requests")
    {
        return FailureClass::RateLimit;
    }
    FailureClass::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_the_design_table() {
        let rollout = "thread/resume failed: no rollout found for thread id 01a1 (code -32600)";
        assert_eq!(
            classify_failure(EngineKind::Codex, Some("t"), rollout),
            FailureClass::MissingRollout
        );
        assert_eq!(
            classify_failure(EngineKind::Codex, None, rollout),
            FailureClass::Other
        );
        assert_eq!(
            classify_failure(EngineKind::Claude, Some("t"), rollout),
            FailureClass::Other
        );
        let writer = "thread-store conflict: thread abc already has an active writer";
        assert_eq!(
            classify_failure(EngineKind::Codex, Some("abc"), writer),
            FailureClass::WriterConflict
        );
        assert_eq!(
            classify_failure(EngineKind::Codex, None, writer),
            FailureClass::Other
        );
        for message in [
            "exceeded retry limit, last status: 429 Too Many Requests",
            "rate limit exceeded: Rate limit reached for mock-model.",
            "HTTP 429",
        ] {
            assert_eq!(
                classify_failure(EngineKind::Claude, None, message),
                FailureClass::RateLimit
            );
        }
        assert_eq!(
            classify_failure(EngineKind::Codex, None, "Authentication failed"),
            FailureClass::Other
        );
        // Usage limits and quotas are not rate limits: retrying cannot help.
        assert_eq!(
            classify_failure(
                EngineKind::Codex,
                None,
                "Quota exceeded. Check your plan and billing details."
            ),
            FailureClass::Other
        );
    }

    #[test]
    fn the_last_structured_line_decides() {
        let notice = EngineEvent::Notice {
            message: "Reconnecting... 1/2".into(),
        };
        assert_eq!(
            judge(
                &[notice.clone(), EngineEvent::TurnCompleted],
                Some(1),
                None,
                &[]
            ),
            RunVerdict::Succeeded
        );
        let failed = EngineEvent::TurnFailed {
            message: "quota".into(),
        };
        assert_eq!(
            judge(&[failed], Some(0), None, &[]),
            RunVerdict::Failed {
                message: "quota".into()
            }
        );
        assert_eq!(
            judge(
                &[],
                Some(1),
                None,
                &["Error: no rollout found".into(), "".into()]
            ),
            RunVerdict::Failed {
                message: "Error: no rollout found".into()
            }
        );
        assert_eq!(judge(&[], Some(0), None, &[]), RunVerdict::Succeeded);
        assert_eq!(
            judge(&[], None, Some("SIGKILL"), &[]),
            RunVerdict::Failed {
                message: "the engine was killed by SIGKILL".into()
            }
        );
    }

    #[test]
    fn sandbox_rules() {
        assert_eq!(
            Sandbox::for_prompt(false, false, false),
            Sandbox::WorkspaceWrite
        );
        assert_eq!(Sandbox::for_prompt(true, false, false), Sandbox::FullAccess);
        assert_eq!(Sandbox::for_prompt(true, true, false), Sandbox::ReadOnly);
        assert_eq!(Sandbox::for_prompt(true, false, true), Sandbox::ReadOnly);
    }
}
