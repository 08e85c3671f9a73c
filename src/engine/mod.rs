//! Engine adapters: how to start an engine child for a prompt, and how to read its output.
//!
//! One file per engine ([`codex`], [`claude`], [`opencode`], [`command`], [`fake`]). Each
//! adapter is a value implementing [`Engine`]:
//! - [`Engine::argv`] builds the child's exact argv from a [`RunSpec`] (the program first);
//! - [`Engine::parse_line`] turns one line of the child's stdout into normalized
//!   [`EngineEvent`]s (a line that is not the engine's JSON becomes [`EngineEvent::Raw`]).
//!
//! What the supervisor learns from the engines (measured on the real CLIs): start them with
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

/// The engines corral knows. The default is the engine of a project that names none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum EngineKind {
    #[default]
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

/// What an agent may do without asking (docs/permissions.md has each engine's mapping).
/// Declared from the narrowest to the widest: `a < b` means `b` allows more.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Read the tree; no writes, no command that changes anything.
    ReadOnly,
    /// Edit files inside the session's working tree and run commands there (the default).
    #[default]
    WorkspaceWrite,
    /// What `workspace-write` allows; anything beyond goes to a person as an approval.
    Ask,
    /// No sandbox, no approvals: only by a person's grant to the project.
    Full,
}

impl Policy {
    pub const ALL: [Policy; 4] = [
        Policy::ReadOnly,
        Policy::WorkspaceWrite,
        Policy::Ask,
        Policy::Full,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Policy::ReadOnly => "read-only",
            Policy::WorkspaceWrite => "workspace-write",
            Policy::Ask => "ask",
            Policy::Full => "full",
        }
    }

    /// The policy a prompt runs under. Read-only wins over everything (`send --read-only`,
    /// a remote project); then the prompt's own policy, the session's, the project's. `full`
    /// holds only where the project grants it (`granted`): a session or prompt that names it
    /// without the grant runs `workspace-write` (they are refused when set; this is the rule
    /// for one set before the grant was taken back).
    pub fn effective(
        project: Policy,
        granted: bool,
        session: Option<Policy>,
        prompt: Option<Policy>,
        read_only: bool,
        remote: bool,
    ) -> Policy {
        if read_only || remote {
            return Policy::ReadOnly;
        }
        match prompt.or(session).unwrap_or(project) {
            Policy::Full if !granted => Policy::WorkspaceWrite,
            policy => policy,
        }
    }

    /// The policy of a prompt under the project's settings alone (no session or prompt
    /// policy): a project with `full_access` runs `full`.
    pub fn for_prompt(full_access: bool, remote: bool, read_only: bool) -> Policy {
        let project = if full_access {
            Policy::Full
        } else {
            Policy::WorkspaceWrite
        };
        Policy::effective(project, full_access, None, None, read_only, remote)
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Policy {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        Policy::ALL
            .into_iter()
            .find(|policy| policy.as_str() == text)
            .ok_or_else(|| {
                format!("unknown policy '{text}' (one of: read-only, workspace-write, ask, full)")
            })
    }
}

impl EngineKind {
    /// Whether the engine can ask a person mid-turn, so that `ask` can be honoured: claude
    /// (its stream-json control protocol; the fake engine in claude's form is run as claude)
    /// and the codex app-server (its approval requests under `approvalPolicy: on-request`). `None`: it can; `Some(why)`: one line saying what
    /// it can do instead.
    pub fn cannot_ask(self) -> Option<&'static str> {
        match self {
            EngineKind::Claude | EngineKind::CodexAppServer => None,
            EngineKind::Codex => Some(
                "codex exec cannot ask a person mid-turn: use the codex-app-server engine for \
                 'ask', or choose workspace-write, read-only or full",
            ),
            EngineKind::Opencode => Some(
                "opencode's run mode rejects every ask and ends the turn: choose \
                 workspace-write, read-only or full",
            ),
            EngineKind::Command => Some(
                "a command engine has no tools to ask about: choose workspace-write, read-only \
                 or full",
            ),
            EngineKind::Fake => Some(
                "the fake engine speaks codex exec, which cannot ask: choose workspace-write, \
                 read-only or full",
            ),
        }
    }
}

/// Everything an adapter needs to build one run's argv and stdin.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// The engine's executable (resolved from `engines.<name>.path` or `PATH`).
    pub program: PathBuf,
    /// The prompt text as the engine receives it (project instructions already added).
    pub prompt: String,
    /// Image files attached to the prompt.
    pub images: Vec<PathBuf>,
    /// The directory the engine runs in (the project's); engines that key their
    /// conversations by directory are told it explicitly.
    pub cwd: PathBuf,
    /// The engine's own thread/session id to continue, if any.
    pub thread_id: Option<String>,
    /// Where in that thread to continue from (the engine's id of the last message of the
    /// last turn that succeeded), when a retry must not see the failed turn: claude's
    /// `--resume-session-at`.
    pub resume_at: Option<String>,
    /// A title for a new conversation, where the engine would otherwise ask its model for one
    /// (opencode's `--title`).
    pub title: Option<String>,
    pub model: Option<String>,
    pub reasoning_effort: Option<String>,
    pub policy: Policy,
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
    /// A tool use the engine refused under its permissions (claude's `permission_denials`,
    /// a declined approval, a rejected permission): the tool, and what it would have touched
    /// (a path, a command) when the engine says. The turn goes on; the prompt's end counts
    /// these, so that a refused write is never a silent success.
    Denied {
        tool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Under `ask`, the engine asks before a tool use and waits for the answer
    /// ([`Engine::reply`] on its stdin): the tool, what it would touch, why, and its input.
    Asks {
        request_id: String,
        tool: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        input: serde_json::Value,
    },
    /// The engine asked something corral does not handle (an unknown control request): it
    /// is answered at once with an error ([`Reply::Unsupported`]), so the engine never waits
    /// on it.
    AsksUnknown {
        request_id: String,
        what: String,
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
    /// Where the conversation stands after this line: the engine's id of its latest message,
    /// from where a later retry can continue (claude's assistant `uuid`). Not stored as an
    /// event: the worker keeps the last one of a run that succeeded.
    ResumePoint {
        id: String,
    },
    /// The turn failed with the engine's own message.
    TurnFailed {
        message: String,
        /// The failure's class when the engine's structured error says it (an HTTP status,
        /// an error type or code); `None`: read from the words by [`classify_failure`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        class: Option<FailureClass>,
        /// How long the provider asked to wait before trying again (`Retry-After`), when the
        /// engine reports it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
    /// A line that is not the engine's JSON (kept as it was, lossily decoded).
    Raw {
        line: String,
    },
}

impl EngineEvent {
    /// A failed turn that says nothing but its message.
    pub fn failed(message: impl Into<String>) -> EngineEvent {
        EngineEvent::TurnFailed {
            message: message.into(),
            class: None,
            retry_after_ms: None,
        }
    }
}

/// An engine adapter.
pub trait Engine: Send + Sync {
    fn kind(&self) -> EngineKind;
    /// The child's argv, program first.
    fn argv(&self, spec: &RunSpec) -> Vec<OsString>;
    /// What the child reads on stdin, which is then closed (`None`: stdin is /dev/null). An
    /// engine that reads its prompt there gets it byte for byte, whatever it starts with and
    /// however long it is (Linux refuses one argv string over 128 KiB).
    fn stdin(&self, _spec: &RunSpec) -> Option<String> {
        None
    }
    /// The events one stdout line carries (possibly none).
    fn parse_line(&self, line: &str) -> Vec<EngineEvent>;
    /// Variables the child gets unless corral's own environment sets them (a person's
    /// choice wins).
    fn env(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// Variables this run's child gets whatever the daemon's environment says: where an engine
    /// reads its permissions from its environment (opencode's `OPENCODE_CONFIG_CONTENT`), the
    /// sandbox corral chose must win over anything inherited.
    fn run_env(&self, _spec: &RunSpec) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Whether this run's stdin stays open after its first input ([`Engine::stdin`]): under
    /// `ask` the engine asks a person through it, and its answers go there
    /// ([`Engine::reply`]). The worker closes it after the engine's final line.
    fn converses(&self, _spec: &RunSpec) -> bool {
        false
    }
    /// The line (without its newline) that answers the engine's request `request_id` on its
    /// stdin; `None` where the engine cannot be answered.
    fn reply(&self, _request_id: &str, _reply: Reply<'_>) -> Option<String> {
        None
    }
    /// What a complete run's output ends with, in words for an error (`None`: the engine has
    /// no structured output and its exit status decides, as for `command`). A run that exits
    /// without it did not finish its turn, whatever its exit code.
    fn final_line(&self) -> Option<&'static str> {
        None
    }
}

/// An answer to an engine's request ([`EngineEvent::Asks`], [`EngineEvent::AsksUnknown`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reply<'a> {
    /// Go ahead, with the tool's input as asked.
    Allow { input: &'a serde_json::Value },
    /// Refused, with the words the model is told.
    Deny { message: &'a str },
    /// A request corral does not handle.
    Unsupported { message: &'a str },
}

/// The executable of an engine: `engines.<name>.path`, else the default program found on
/// `PATH` (for `fake`, first the `corral-fake-engine` beside the running binary). A path that
/// does not exist or is not an executable file is refused, naming it.
pub fn resolve_program(
    kind: EngineKind,
    paths: &std::collections::HashMap<String, PathBuf>,
) -> Result<PathBuf, String> {
    if let Some(path) = paths.get(kind.as_str()) {
        check_executable(path)
            .map_err(|why| format!("engine '{kind}': {why} (engines.{kind}.path)"))?;
        return Ok(path.clone());
    }
    let name = kind.default_program();
    if kind == EngineKind::Fake {
        if let Some(beside) = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
            .filter(|path| path.is_file())
        {
            return Ok(beside);
        }
    }
    let search = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&search)
        .map(|dir| dir.join(name))
        .find(|path| check_executable(path).is_ok())
        .ok_or_else(|| {
            format!(
                "engine '{kind}' not found: {name} is not on PATH ({}); set engines.{kind}.path",
                search.to_string_lossy()
            )
        })
}

/// Whether `path` is a file this process may execute; else why not, naming it.
pub fn check_executable(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    let metadata = std::fs::metadata(path).map_err(|_| format!("{shown} does not exist"))?;
    if !metadata.is_file() {
        return Err(format!("{shown} is not a file"));
    }
    if metadata.permissions().mode() & 0o111 == 0 {
        return Err(format!("{shown} is not executable"));
    }
    Ok(())
}

/// Why an engine cannot run a prompt with these settings, if it cannot: the `command` engine
/// runs a program as it is told, with no sandbox, model or image input, and its template must
/// say where the prompt goes.
pub fn unsupported(
    kind: EngineKind,
    images: bool,
    model: Option<&str>,
    read_only: bool,
    template: &[String],
) -> Option<String> {
    if kind != EngineKind::Command {
        return None;
    }
    if images {
        return Some("the command engine takes no images".into());
    }
    if let Some(model) = model.filter(|model| !model.is_empty()) {
        return Some(format!(
            "the command engine takes no model (this one: {model})"
        ));
    }
    if read_only {
        return Some("the command engine has no sandbox: it cannot run read-only".into());
    }
    if !template
        .iter()
        .any(|element| element.contains(command::PROMPT_PLACEHOLDER))
    {
        return Some(format!(
            "engines.command.template has no {}: the prompt would go nowhere",
            command::PROMPT_PLACEHOLDER
        ));
    }
    None
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
/// failure with its message. With neither, an engine with structured output (`final_line`)
/// failed — its turn did not finish, even on exit 0 (claude reads a prompt `-v please` as its
/// own flags and exits 0 with no result) — and an engine without (`command`) succeeds on exit
/// 0. A failure without the engine's words names the last stderr line or the exit status.
pub fn judge(
    events: &[EngineEvent],
    exit_code: Option<i32>,
    signal: Option<&str>,
    stderr_tail: &[String],
    final_line: Option<&str>,
) -> RunVerdict {
    for event in events.iter().rev() {
        match event {
            EngineEvent::TurnCompleted => return RunVerdict::Succeeded,
            EngineEvent::TurnFailed { message, .. } => {
                return RunVerdict::Failed {
                    message: message.clone(),
                }
            }
            _ => {}
        }
    }
    let last_stderr = stderr_tail
        .iter()
        .rev()
        .find(|line| !line.trim().is_empty())
        .map(|line| line.trim().to_string());
    let status = match (exit_code, signal) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by {signal}"),
        (None, None) => "ended".to_string(),
    };
    match final_line {
        None if exit_code == Some(0) => RunVerdict::Succeeded,
        None => RunVerdict::Failed {
            message: last_stderr.unwrap_or_else(|| format!("the engine {status}")),
        },
        // A failing exit with words on stderr: those words are the clearest reason.
        Some(_) if exit_code != Some(0) && last_stderr.is_some() => RunVerdict::Failed {
            message: last_stderr.unwrap_or_default(),
        },
        Some(final_line) => {
            let mut message = format!("the engine {status} without {final_line}");
            if let Some(line) = last_stderr {
                message.push_str(": ");
                message.push_str(&line);
            }
            RunVerdict::Failed { message }
        }
    }
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

    /// The class [`as_str`](Self::as_str) names (as the store keeps it).
    pub fn parse(text: &str) -> Option<FailureClass> {
        [
            FailureClass::RateLimit,
            FailureClass::WriterConflict,
            FailureClass::MissingRollout,
            FailureClass::Overloaded,
            FailureClass::TransportClosed,
            FailureClass::Other,
        ]
        .into_iter()
        .find(|class| class.as_str() == text)
    }
}

impl FailureClass {
    /// The class of an HTTP status a provider answered (as an engine's structured error
    /// reports it): 429 is a rate limit, 503 and Anthropic's 529 an overloaded server.
    pub fn from_http_status(status: u64) -> Option<FailureClass> {
        match status {
            429 => Some(FailureClass::RateLimit),
            503 | 529 => Some(FailureClass::Overloaded),
            _ => None,
        }
    }
}

/// The words that say a request was rate limited, lower-cased. Only whole phrases count: the
/// digits `429` inside a message (`cannot open report_14290.txt`) say nothing.
const RATE_LIMIT_PHRASES: &[&str] = &[
    "rate limit",
    "rate_limit",
    "ratelimit",
    "too many requests",
    "last status: 429",
    "http 429",
    "status 429",
    "status code 429",
    "(429)",
];

/// Quotas and usage limits read like rate limits but waiting does not lift them.
const NOT_A_RATE_LIMIT: &[&str] = &["usage limit", "quota", "insufficient_quota"];

/// Classifies a failure from its words, for engines whose errors say no more than text:
/// `texts` are the failure's message, then the run's notices and stderr lines (codex says a
/// writer conflict on stderr, or in an `error` line on stdout). The thread rules apply to
/// codex only, and only when the run resumed a thread (a new thread cannot conflict or lose
/// its rollout).
pub fn classify_failure(
    engine: EngineKind,
    thread_id: Option<&str>,
    texts: &[&str],
) -> FailureClass {
    let lower: Vec<String> = texts.iter().map(|text| text.to_ascii_lowercase()).collect();
    let any = |needle: &str| lower.iter().any(|text| text.contains(needle));
    let codex_like = matches!(
        engine,
        EngineKind::Codex | EngineKind::Fake | EngineKind::CodexAppServer
    );
    if codex_like && thread_id.is_some() {
        if any("no rollout found for thread id") {
            return FailureClass::MissingRollout;
        }
        if any("already has an active writer") {
            return FailureClass::WriterConflict;
        }
    }
    // The failure's own message decides whether it is a rate limit (a notice of an earlier,
    // recovered retry does not).
    let message = lower.first().map(String::as_str).unwrap_or_default();
    if NOT_A_RATE_LIMIT
        .iter()
        .any(|phrase| message.contains(phrase))
    {
        return FailureClass::Other;
    }
    if RATE_LIMIT_PHRASES
        .iter()
        .any(|phrase| message.contains(phrase))
    {
        return FailureClass::RateLimit;
    }
    FailureClass::Other
}

/// A provider's "try again in 1.5s" (codex's rate-limit message), as a delay.
pub fn try_again_in(message: &str) -> Option<std::time::Duration> {
    let lower = message.to_ascii_lowercase();
    let rest = &lower[lower.find("try again in ")? + "try again in ".len()..];
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let value: f64 = number.parse().ok()?;
    let unit = rest[number.len()..].trim_start();
    let seconds = if unit.starts_with("ms") {
        value / 1000.0
    } else if unit.starts_with('s') {
        value
    } else if unit.starts_with('m') {
        value * 60.0
    } else {
        return None;
    };
    (seconds.is_finite() && seconds >= 0.0).then(|| std::time::Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_follows_the_design_table() {
        let rollout = "thread/resume failed: no rollout found for thread id 01a1 (code -32600)";
        assert_eq!(
            classify_failure(EngineKind::Codex, Some("t"), &[rollout]),
            FailureClass::MissingRollout
        );
        assert_eq!(
            classify_failure(EngineKind::Codex, None, &[rollout]),
            FailureClass::Other
        );
        assert_eq!(
            classify_failure(EngineKind::Claude, Some("t"), &[rollout]),
            FailureClass::Other
        );
        let writer = "thread-store conflict: thread abc already has an active writer";
        assert_eq!(
            classify_failure(EngineKind::Codex, Some("abc"), &[writer]),
            FailureClass::WriterConflict
        );
        assert_eq!(
            classify_failure(EngineKind::Codex, None, &[writer]),
            FailureClass::Other
        );
        for message in [
            "exceeded retry limit, last status: 429 Too Many Requests",
            "rate limit exceeded: Rate limit reached for mock-model.",
            "HTTP 429",
        ] {
            assert_eq!(
                classify_failure(EngineKind::Claude, None, &[message]),
                FailureClass::RateLimit
            );
        }
        assert_eq!(
            classify_failure(EngineKind::Codex, None, &["Authentication failed"]),
            FailureClass::Other
        );
        // Digits in a file name are not an HTTP status.
        assert_eq!(
            classify_failure(EngineKind::Claude, None, &["cannot open report_14290.txt"]),
            FailureClass::Other
        );
        // A writer conflict said on stderr (or a JSON error line), not in the failure.
        assert_eq!(
            classify_failure(
                EngineKind::Codex,
                Some("abc"),
                &[
                    "the engine exited with status 1 without `turn.completed`",
                    writer
                ]
            ),
            FailureClass::WriterConflict
        );
        // A recovered retry's notice does not make a later failure a rate limit.
        assert_eq!(
            classify_failure(
                EngineKind::Codex,
                None,
                &[
                    "Authentication failed",
                    "Reconnecting... 1/2 (rate limit exceeded)"
                ]
            ),
            FailureClass::Other
        );
        // Usage limits and quotas are not rate limits: retrying cannot help.
        assert_eq!(
            classify_failure(
                EngineKind::Codex,
                None,
                &["Quota exceeded. Check your plan and billing details."]
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
                &[],
                None
            ),
            RunVerdict::Succeeded
        );
        let failed = EngineEvent::failed("quota");
        assert_eq!(
            judge(&[failed], Some(0), None, &[], None),
            RunVerdict::Failed {
                message: "quota".into()
            }
        );
        assert_eq!(
            judge(
                &[],
                Some(1),
                None,
                &["Error: no rollout found".into(), "".into()],
                None
            ),
            RunVerdict::Failed {
                message: "Error: no rollout found".into()
            }
        );
        assert_eq!(judge(&[], Some(0), None, &[], None), RunVerdict::Succeeded);
        assert_eq!(
            judge(&[], None, Some("SIGKILL"), &[], None),
            RunVerdict::Failed {
                message: "the engine was killed by SIGKILL".into()
            }
        );
    }

    #[test]
    fn an_engine_with_structured_output_must_end_its_turn() {
        let final_line = Some("a `result` line");
        assert_eq!(
            judge(&[], Some(0), None, &[], final_line),
            RunVerdict::Failed {
                message: "the engine exited with status 0 without a `result` line".into()
            }
        );
        assert_eq!(
            judge(
                &[],
                Some(0),
                None,
                &["error: unknown option '-v'".into()],
                final_line
            ),
            RunVerdict::Failed {
                message: "the engine exited with status 0 without a `result` line: \
                          error: unknown option '-v'"
                    .into()
            }
        );
        assert_eq!(
            judge(
                &[EngineEvent::TurnCompleted],
                Some(0),
                None,
                &[],
                final_line
            ),
            RunVerdict::Succeeded
        );
    }

    #[test]
    fn try_again_in_reads_the_providers_delay() {
        let message =
            "rate limit exceeded: Rate limit reached for mock-model. Please try again in 1.5s.";
        assert_eq!(
            try_again_in(message),
            Some(std::time::Duration::from_millis(1500))
        );
        assert_eq!(
            try_again_in("Please try again in 250ms"),
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(try_again_in("try again at 7:28 AM"), None);
        assert_eq!(try_again_in("no advice"), None);
        assert_eq!(
            FailureClass::from_http_status(429),
            Some(FailureClass::RateLimit)
        );
        assert_eq!(
            FailureClass::from_http_status(529),
            Some(FailureClass::Overloaded)
        );
        assert_eq!(FailureClass::from_http_status(401), None);
    }

    #[test]
    fn sandbox_rules() {
        assert_eq!(
            Policy::for_prompt(false, false, false),
            Policy::WorkspaceWrite
        );
        assert_eq!(Policy::for_prompt(true, false, false), Policy::Full);
        assert_eq!(Policy::for_prompt(true, true, false), Policy::ReadOnly);
        assert_eq!(Policy::for_prompt(true, false, true), Policy::ReadOnly);
    }
}
