//! One payload type per event kind: what the emitters build and the readers match on.
//!
//! The stored and sent form is unchanged: an event's `kind` beside its `payload` as JSON. Each
//! type here writes exactly the keys its emitter wrote as a `json!` object (the tests hold the
//! old objects), `null` where that wrote `null` and nothing where it left a key out. Reading
//! never fails: a payload that is not its kind's type (an old store's, a newer daemon's) or a
//! kind this build does not know reads as [`Payload::Other`], kept whole for the reader to
//! show as it is. Fields a reader may miss in an old event take their default.
//!
//! Data of the layers above (an approval row, what holds a slot, an engine's own item) stays
//! JSON here.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::EventKind;
use crate::engine::{EngineEvent, FailureClass};

/// A key written even as `null` reads back as `Some` (`Some(None)`, `Some(Value::Null)`), so
/// that a payload that had the key writes it again and one without it still leaves it out.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// `prompt.started`: the prompt's text and images.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptStarted {
    pub text: String,
    pub images: Vec<String>,
}

/// `prompt.done`, `prompt.failed`, `prompt.cancelled`: how the prompt ended (the three ends
/// say the same things, so they share a type).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptEnded {
    pub error: Option<String>,
    pub answer: Option<String>,
    /// How many tool uses the engine refused; left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub denied: Option<u64>,
}

/// `prompt.requeued`: why the prompt went back to the queue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptRequeued {
    pub reason: String,
}

/// `prompt.unserved`: no live daemon serves the prompt's project.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptUnserved {
    pub project: String,
    pub path: String,
    pub reason: String,
}

/// `slot.waiting`: the prompt waits for a slot of its engine (and its project's groups).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlotWaiting {
    pub engine: String,
    pub project: String,
    pub groups: Vec<String>,
    /// What holds the slot (the slot manager's blocker), `null` when nothing is known.
    pub held_by: Value,
    /// The blocker in words, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// `slot.granted`: how long the prompt waited.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SlotGranted {
    pub waited_ms: u64,
}

/// `run.started`: an engine child (with its argv) or an app-server turn (with its thread and
/// turn).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunStarted {
    pub pid: u32,
    pub engine: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
}

/// `run.exited`: how a run ended. Its emitters say different things (a child's exit, an
/// app-server turn's status, a recovery or an expired lease), so every key is one that some
/// emitter leaves out; `exit_code`, `signal` and `error` are `Some(None)` where the emitter
/// wrote `null`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunExited {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<Option<i32>>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub signal: Option<Option<String>>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub error: Option<Option<String>>,
    /// `succeeded` or `failed`, when the run finished by itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// Why it was closed by someone else (recovery, an expired lease).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_server_pid: Option<u32>,
    /// The app-server turn's status (`completed`, `failed`, `interrupted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// `run.readopted`: a run the daemon before left running (a restart, a crash) is followed by
/// this daemon from its shim's spool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunReadopted {
    /// The shim that kept the run while no daemon followed it.
    pub shim_pid: u32,
    /// How long ago the run started.
    pub since_start_ms: i64,
}

/// `retry.scheduled`: a failed run is tried again after a delay.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RetryScheduled {
    /// The failure's class (`rate_limit` …).
    pub reason: String,
    pub attempt: i64,
    pub next_attempt: i64,
    pub delay_ms: u64,
    /// This retry's number and how many the policy allows (an older daemon's event has
    /// neither).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<u64>,
    pub retry_after_ms: Option<u64>,
    pub new_thread: bool,
    #[serde(rename = "continue")]
    pub continues: bool,
    pub message: String,
}

/// `app_server.unavailable`: the prompt waits for its project's app-server child.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppServerUnavailable {
    pub reason: String,
    pub retry_in_ms: u64,
}

/// `thread.started`: the engine's new conversation (on an app-server, its child and
/// generation).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadStarted {
    pub thread_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_server_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
}

/// `turn.started`, `turn.completed`: nothing more than the kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Turn {}

/// `turn.failed`: the engine's message, and its failure's class when the engine says it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TurnFailed {
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<FailureClass>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// `message`, `message.delta`: text of the agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Text {
    pub text: String,
}

/// `tool`: a tool call or command (`name`: the tool or item type; `detail`: the engine's own
/// description of it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tool {
    pub name: String,
    pub detail: Value,
}

/// `tool.denied`: a tool use the engine refused, and what it would have touched.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolDenied {
    pub tool: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `approval.requested`, `approval.answered`: the stored approval (`store::approvals`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ApprovalTold {
    pub approval: Value,
}

/// `usage`: the turn's token usage as the engine reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub usage: Value,
}

/// `notice`: a non-fatal error line; an app-server's `error` notification adds whether codex
/// retries and its error's class (each as codex sent it, `null` when it did not).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Notice {
    pub message: Option<String>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub will_retry: Option<Value>,
    #[serde(deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub codex_error_info: Option<Value>,
}

impl Notice {
    /// A notice of corral's own.
    pub fn new(message: impl Into<String>) -> Notice {
        Notice {
            message: Some(message.into()),
            ..Notice::default()
        }
    }
}

/// `raw`, `stderr`: a line of the engine's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OutputLine {
    pub line: String,
}

/// `title.generated`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TitleGenerated {
    pub title: String,
}

/// `server.request`: what an app-server child asked (`request`: its params), and the answer
/// the project's policy gave.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ServerRequest {
    pub method: String,
    pub answer: Value,
    pub request: Value,
}

/// `transport.closed`: the app-server child's end as its actor tells it (`close_source`,
/// `pid`, `exit_code` …), kept as that object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TransportClosed {
    pub details: Value,
}

/// `request.refused`: a request from inside a run that would have widened what the agent may
/// do.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestRefused {
    pub method: String,
    pub what: String,
    pub run_id: String,
    pub found_by: String,
    pub peer_pid: i32,
}

/// `worktree.created`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorktreeCreated {
    pub path: String,
    pub branch: String,
    pub base_commit: String,
}

/// `worktree.removed`: its branch is kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorktreeRemoved {
    pub path: String,
    pub kept_branch: String,
}

/// `setup.started`: the project's setup command and where it runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SetupStarted {
    pub command: String,
    pub cwd: String,
}

/// `setup.output`: a line of the setup command (`cut` when it was too long).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SetupOutput {
    pub line: String,
    pub stream: String,
    #[serde(skip_serializing_if = "is_false")]
    pub cut: bool,
}

/// `setup.exited`: its exit (`null`s and an `error` when it could not start).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SetupExited {
    pub code: Option<i32>,
    pub signal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `session.merged`: the session's branch went into `into` as `commit`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionMerged {
    pub into: String,
    pub commit: String,
    pub squash: bool,
}

macro_rules! payloads {
    ($($variant:ident($type:ty),)*) => {
        /// A session event's payload, typed by its kind.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Payload {
            $($variant($type),)*
            /// A kind this build does not know, or a payload that is not its kind's type:
            /// kept as it was.
            Other(EventKind, Value),
        }

        impl Payload {
            /// The kind this payload is told as.
            pub fn kind(&self) -> EventKind {
                match self {
                    $(Payload::$variant(_) => EventKind::$variant,)*
                    Payload::Other(kind, _) => kind.clone(),
                }
            }

            /// The payload as stored and sent.
            pub fn to_value(&self) -> Value {
                match self {
                    // A struct of named fields always serializes.
                    $(Payload::$variant(payload) => {
                        serde_json::to_value(payload).unwrap_or_default()
                    })*
                    Payload::Other(_, value) => value.clone(),
                }
            }

            /// The payload of an event of `kind`; never fails (see the module's
            /// documentation).
            pub fn read(kind: &EventKind, value: &Value) -> Payload {
                match kind {
                    $(EventKind::$variant => {
                        if let Ok(payload) = <$type>::deserialize(value) {
                            return Payload::$variant(payload);
                        }
                    })*
                    _ => {}
                }
                Payload::Other(kind.clone(), value.clone())
            }
        }
    };
}

payloads! {
    PromptStarted(PromptStarted),
    PromptDone(PromptEnded),
    PromptFailed(PromptEnded),
    PromptCancelled(PromptEnded),
    PromptRequeued(PromptRequeued),
    PromptUnserved(PromptUnserved),
    SlotWaiting(SlotWaiting),
    SlotGranted(SlotGranted),
    RunStarted(RunStarted),
    RunExited(RunExited),
    RunReadopted(RunReadopted),
    RetryScheduled(RetryScheduled),
    AppServerUnavailable(AppServerUnavailable),
    ThreadStarted(ThreadStarted),
    TurnStarted(Turn),
    TurnCompleted(Turn),
    TurnFailed(TurnFailed),
    Message(Text),
    MessageDelta(Text),
    Tool(Tool),
    ToolDenied(ToolDenied),
    ApprovalRequested(ApprovalTold),
    ApprovalAnswered(ApprovalTold),
    Usage(Usage),
    Notice(Notice),
    Raw(OutputLine),
    Stderr(OutputLine),
    TitleGenerated(TitleGenerated),
    ServerRequest(ServerRequest),
    TransportClosed(TransportClosed),
    RequestRefused(RequestRefused),
    WorktreeCreated(WorktreeCreated),
    WorktreeRemoved(WorktreeRemoved),
    SetupStarted(SetupStarted),
    SetupOutput(SetupOutput),
    SetupExited(SetupExited),
    SessionMerged(SessionMerged),
}

impl From<EngineEvent> for Payload {
    /// The event an engine's line is stored as. The requests and resume points the session
    /// worker keeps for itself never come here; if one did, it is stored as it always was
    /// (the engine event's own fields).
    fn from(event: EngineEvent) -> Payload {
        match event {
            EngineEvent::ThreadStarted { thread_id } => Payload::ThreadStarted(ThreadStarted {
                thread_id,
                ..ThreadStarted::default()
            }),
            EngineEvent::TurnStarted => Payload::TurnStarted(Turn {}),
            EngineEvent::MessageDelta { text } => Payload::MessageDelta(Text { text }),
            EngineEvent::Message { text } => Payload::Message(Text { text }),
            EngineEvent::Tool { name, detail } => Payload::Tool(Tool { name, detail }),
            EngineEvent::Denied {
                tool,
                target,
                reason,
            } => Payload::ToolDenied(ToolDenied {
                tool,
                target,
                reason,
            }),
            EngineEvent::Usage { usage } => Payload::Usage(Usage { usage }),
            EngineEvent::Notice { message } => Payload::Notice(Notice::new(message)),
            EngineEvent::TurnCompleted => Payload::TurnCompleted(Turn {}),
            EngineEvent::TurnFailed {
                message,
                class,
                retry_after_ms,
            } => Payload::TurnFailed(TurnFailed {
                message,
                class,
                retry_after_ms,
            }),
            EngineEvent::Raw { line } => Payload::Raw(OutputLine { line }),
            kept @ (EngineEvent::Asks { .. }
            | EngineEvent::AsksUnknown { .. }
            | EngineEvent::ResumePoint { .. }) => {
                let kind = match kept {
                    EngineEvent::Asks { .. } => EventKind::ApprovalRequested,
                    EngineEvent::AsksUnknown { .. } => EventKind::Notice,
                    _ => EventKind::Other("resume_point".into()),
                };
                let mut value = serde_json::to_value(&kept).unwrap_or_default();
                if let Some(object) = value.as_object_mut() {
                    object.remove("kind");
                }
                Payload::Other(kind, value)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Each emitter's payload as it was written with `json!` before the types (the contract
    /// with old stores and the dashboard), beside the typed payload that must write it.
    fn samples() -> Vec<(Payload, Value)> {
        let ended = |error: Option<&str>, answer: Option<&str>, denied| PromptEnded {
            error: error.map(str::to_string),
            answer: answer.map(str::to_string),
            denied,
        };
        vec![
            (
                Payload::PromptStarted(PromptStarted {
                    text: "fix it".into(),
                    images: vec!["/tmp/a.png".into()],
                }),
                json!({ "text": "fix it", "images": ["/tmp/a.png"] }),
            ),
            (
                Payload::PromptDone(ended(None, Some("done"), None)),
                json!({ "error": null, "answer": "done" }),
            ),
            (
                Payload::PromptDone(ended(None, Some("done"), Some(2))),
                json!({ "error": null, "answer": "done", "denied": 2 }),
            ),
            (
                Payload::PromptFailed(ended(Some("boom"), None, None)),
                json!({ "error": "boom", "answer": null }),
            ),
            (
                Payload::PromptCancelled(ended(Some("cancelled while queued"), None, None)),
                json!({ "error": "cancelled while queued", "answer": null }),
            ),
            (
                Payload::PromptRequeued(PromptRequeued {
                    reason: "daemon shutdown".into(),
                }),
                json!({ "reason": "daemon shutdown" }),
            ),
            (
                Payload::PromptUnserved(PromptUnserved {
                    project: "api".into(),
                    path: "/src/api".into(),
                    reason: "no live daemon".into(),
                }),
                json!({ "project": "api", "path": "/src/api", "reason": "no live daemon" }),
            ),
            (
                Payload::SlotWaiting(SlotWaiting {
                    engine: "codex".into(),
                    project: "api".into(),
                    groups: vec!["deploy".into()],
                    held_by: Value::Null,
                    why: None,
                }),
                json!({ "engine": "codex", "project": "api", "groups": ["deploy"], "held_by": null }),
            ),
            (
                Payload::SlotWaiting(SlotWaiting {
                    engine: "codex".into(),
                    project: "api".into(),
                    groups: vec![],
                    held_by: json!({ "kind": "project", "session": "s1" }),
                    why: Some("project api locked".into()),
                }),
                json!({
                    "engine": "codex", "project": "api", "groups": [],
                    "held_by": { "kind": "project", "session": "s1" },
                    "why": "project api locked",
                }),
            ),
            (
                Payload::SlotGranted(SlotGranted { waited_ms: 1200 }),
                json!({ "waited_ms": 1200 }),
            ),
            (
                Payload::RunStarted(RunStarted {
                    pid: 42,
                    engine: "claude".into(),
                    argv: Some(vec!["claude".into(), "-p".into()]),
                    ..RunStarted::default()
                }),
                json!({ "pid": 42, "engine": "claude", "argv": ["claude", "-p"] }),
            ),
            (
                Payload::RunStarted(RunStarted {
                    pid: 42,
                    engine: "codex-app-server".into(),
                    argv: None,
                    thread_id: Some("t1".into()),
                    turn_id: Some("u1".into()),
                }),
                json!({ "pid": 42, "engine": "codex-app-server", "thread_id": "t1", "turn_id": "u1" }),
            ),
            (
                Payload::RunReadopted(RunReadopted {
                    shim_pid: 4242,
                    since_start_ms: 15_300,
                }),
                json!({ "shim_pid": 4242, "since_start_ms": 15_300 }),
            ),
            // A child stopped, then one that finished.
            (
                Payload::RunExited(RunExited {
                    ended_by: Some("cancelled".into()),
                    exit_code: Some(None),
                    signal: Some(Some("SIGTERM".into())),
                    error: Some(None),
                    ..RunExited::default()
                }),
                json!({ "ended_by": "cancelled", "exit_code": null, "signal": "SIGTERM", "error": null }),
            ),
            (
                Payload::RunExited(RunExited {
                    exit_code: Some(Some(0)),
                    signal: Some(None),
                    verdict: Some("succeeded".into()),
                    ..RunExited::default()
                }),
                json!({ "exit_code": 0, "signal": null, "verdict": "succeeded" }),
            ),
            // An app-server turn, a recovery.
            (
                Payload::RunExited(RunExited {
                    turn_id: Some("u1".into()),
                    app_server_pid: Some(7),
                    ended_by: Some("timed out".into()),
                    status: Some("interrupted".into()),
                    ..RunExited::default()
                }),
                json!({ "turn_id": "u1", "app_server_pid": 7, "ended_by": "timed out", "status": "interrupted" }),
            ),
            (
                Payload::RunExited(RunExited {
                    ended_by: Some("recovery".into()),
                    reason: Some("the daemon that ran it died".into()),
                    ..RunExited::default()
                }),
                json!({ "ended_by": "recovery", "reason": "the daemon that ran it died" }),
            ),
            (
                Payload::RetryScheduled(RetryScheduled {
                    reason: "rate_limit".into(),
                    attempt: 1,
                    next_attempt: 2,
                    delay_ms: 45_000,
                    retry: Some(1),
                    retries: Some(3),
                    retry_after_ms: None,
                    new_thread: false,
                    continues: true,
                    message: "429".into(),
                }),
                json!({
                    "reason": "rate_limit", "attempt": 1, "next_attempt": 2, "delay_ms": 45_000,
                    "retry": 1, "retries": 3, "retry_after_ms": null, "new_thread": false,
                    "continue": true, "message": "429",
                }),
            ),
            (
                Payload::AppServerUnavailable(AppServerUnavailable {
                    reason: "starting".into(),
                    retry_in_ms: 500,
                }),
                json!({ "reason": "starting", "retry_in_ms": 500 }),
            ),
            (
                Payload::ThreadStarted(ThreadStarted {
                    thread_id: "t1".into(),
                    ..ThreadStarted::default()
                }),
                json!({ "thread_id": "t1" }),
            ),
            (
                Payload::ThreadStarted(ThreadStarted {
                    thread_id: "t1".into(),
                    app_server_pid: Some(7),
                    generation: Some(2),
                }),
                json!({ "thread_id": "t1", "app_server_pid": 7, "generation": 2 }),
            ),
            (Payload::TurnStarted(Turn {}), json!({})),
            (Payload::TurnCompleted(Turn {}), json!({})),
            (
                Payload::TurnFailed(TurnFailed {
                    message: "overloaded".into(),
                    class: Some(FailureClass::RateLimit),
                    retry_after_ms: Some(3000),
                }),
                json!({ "message": "overloaded", "class": "rate_limit", "retry_after_ms": 3000 }),
            ),
            (
                Payload::Message(Text { text: "hi".into() }),
                json!({ "text": "hi" }),
            ),
            (
                Payload::MessageDelta(Text { text: "h".into() }),
                json!({ "text": "h" }),
            ),
            (
                Payload::Tool(Tool {
                    name: "Bash".into(),
                    detail: json!({ "command": "ls" }),
                }),
                json!({ "name": "Bash", "detail": { "command": "ls" } }),
            ),
            (
                Payload::ToolDenied(ToolDenied {
                    tool: "Write".into(),
                    target: Some("/etc/passwd".into()),
                    reason: None,
                }),
                json!({ "tool": "Write", "target": "/etc/passwd" }),
            ),
            (
                Payload::ApprovalRequested(ApprovalTold {
                    approval: json!({ "id": "a1", "status": "pending" }),
                }),
                json!({ "approval": { "id": "a1", "status": "pending" } }),
            ),
            (
                Payload::ApprovalAnswered(ApprovalTold {
                    approval: json!({ "id": "a1", "status": "allowed" }),
                }),
                json!({ "approval": { "id": "a1", "status": "allowed" } }),
            ),
            (
                Payload::Usage(Usage {
                    usage: json!({ "input_tokens": 3 }),
                }),
                json!({ "usage": { "input_tokens": 3 } }),
            ),
            (
                Payload::Notice(Notice::new("Reconnecting... 1/5")),
                json!({ "message": "Reconnecting... 1/5" }),
            ),
            (
                Payload::Notice(Notice {
                    message: Some("stream error".into()),
                    will_retry: Some(json!(true)),
                    codex_error_info: Some(Value::Null),
                }),
                json!({ "message": "stream error", "will_retry": true, "codex_error_info": null }),
            ),
            (
                Payload::Raw(OutputLine { line: "x".into() }),
                json!({ "line": "x" }),
            ),
            (
                Payload::Stderr(OutputLine {
                    line: "warn".into(),
                }),
                json!({ "line": "warn" }),
            ),
            (
                Payload::TitleGenerated(TitleGenerated {
                    title: "Fix the client".into(),
                }),
                json!({ "title": "Fix the client" }),
            ),
            (
                Payload::ServerRequest(ServerRequest {
                    method: "item/tool/requestUserInput".into(),
                    answer: json!({ "code": -32601 }),
                    request: json!({ "threadId": "t1" }),
                }),
                json!({
                    "method": "item/tool/requestUserInput",
                    "answer": { "code": -32601 },
                    "request": { "threadId": "t1" },
                }),
            ),
            (
                Payload::TransportClosed(TransportClosed {
                    details: json!({ "close_source": "not running", "turn_status": "notStarted" }),
                }),
                json!({ "close_source": "not running", "turn_status": "notStarted" }),
            ),
            (
                Payload::RequestRefused(RequestRefused {
                    method: "project.set".into(),
                    what: "full access".into(),
                    run_id: "r1".into(),
                    found_by: "ancestry".into(),
                    peer_pid: 4242,
                }),
                json!({
                    "method": "project.set", "what": "full access", "run_id": "r1",
                    "found_by": "ancestry", "peer_pid": 4242,
                }),
            ),
            (
                Payload::WorktreeCreated(WorktreeCreated {
                    path: "/w/s1".into(),
                    branch: "corral/s1".into(),
                    base_commit: "abc".into(),
                }),
                json!({ "path": "/w/s1", "branch": "corral/s1", "base_commit": "abc" }),
            ),
            (
                Payload::WorktreeRemoved(WorktreeRemoved {
                    path: "/w/s1".into(),
                    kept_branch: "corral/s1".into(),
                }),
                json!({ "path": "/w/s1", "kept_branch": "corral/s1" }),
            ),
            (
                Payload::SetupStarted(SetupStarted {
                    command: "npm ci".into(),
                    cwd: "/w/s1".into(),
                }),
                json!({ "command": "npm ci", "cwd": "/w/s1" }),
            ),
            (
                Payload::SetupOutput(SetupOutput {
                    line: "ok".into(),
                    stream: "stdout".into(),
                    cut: false,
                }),
                json!({ "line": "ok", "stream": "stdout" }),
            ),
            (
                Payload::SetupOutput(SetupOutput {
                    line: "xxx".into(),
                    stream: "stderr".into(),
                    cut: true,
                }),
                json!({ "line": "xxx", "stream": "stderr", "cut": true }),
            ),
            (
                Payload::SetupExited(SetupExited {
                    code: Some(1),
                    ..SetupExited::default()
                }),
                json!({ "code": 1, "signal": null }),
            ),
            (
                Payload::SetupExited(SetupExited {
                    signal: Some("SIGKILL".into()),
                    ended_by: Some("timed out".into()),
                    ..SetupExited::default()
                }),
                json!({ "code": null, "signal": "SIGKILL", "ended_by": "timed out" }),
            ),
            (
                Payload::SetupExited(SetupExited {
                    error: Some("could not start".into()),
                    ..SetupExited::default()
                }),
                json!({ "code": null, "signal": null, "error": "could not start" }),
            ),
            (
                Payload::SessionMerged(SessionMerged {
                    into: "main".into(),
                    commit: "def".into(),
                    squash: true,
                }),
                json!({ "into": "main", "commit": "def", "squash": true }),
            ),
        ]
    }

    #[test]
    fn each_payload_writes_the_json_its_emitter_wrote_and_reads_it_back() {
        let samples = samples();
        for (payload, old) in &samples {
            let kind = payload.kind();
            assert_eq!(&payload.to_value(), old, "{kind}");
            // The same bytes as stored.
            assert_eq!(payload.to_value().to_string(), old.to_string(), "{kind}");
            assert_eq!(&Payload::read(&kind, old), payload, "{kind}");
        }
        let told: std::collections::HashSet<EventKind> =
            samples.iter().map(|(payload, _)| payload.kind()).collect();
        for kind in EventKind::KNOWN {
            assert!(told.contains(kind), "no sample of {kind}");
        }
    }

    #[test]
    fn an_unknown_kind_or_a_payload_not_of_its_kind_is_kept_whole() {
        let newer = EventKind::parse("worktree.exploded");
        let value = json!({ "path": "/w" });
        let read = Payload::read(&newer, &value);
        assert_eq!(read, Payload::Other(newer.clone(), value.clone()));
        assert_eq!(read.kind(), newer);
        assert_eq!(read.to_value(), value);
        // A payload stored as text (not JSON), and one whose fields are not its kind's.
        for malformed in [json!("not json"), json!({ "text": 5 }), json!(null)] {
            assert_eq!(
                Payload::read(&EventKind::Message, &malformed),
                Payload::Other(EventKind::Message, malformed.clone())
            );
        }
        assert_eq!(
            Payload::read(&EventKind::SlotGranted, &json!({ "waited_ms": "soon" })),
            Payload::Other(EventKind::SlotGranted, json!({ "waited_ms": "soon" }))
        );
    }

    #[test]
    fn an_old_event_without_the_newer_keys_reads_as_its_kind() {
        // A daemon older than `retry`/`retries` told a retry without them.
        let old =
            json!({ "reason": "rate_limit", "attempt": 1, "next_attempt": 2, "delay_ms": 10 });
        let Payload::RetryScheduled(retry) = Payload::read(&EventKind::RetryScheduled, &old) else {
            panic!("not read as a retry");
        };
        assert_eq!(
            (retry.retry, retry.retries, retry.delay_ms),
            (None, None, 10)
        );
    }

    #[test]
    fn an_engine_event_is_stored_as_its_fields() {
        let events = [
            EngineEvent::Message { text: "hi".into() },
            EngineEvent::TurnCompleted,
            EngineEvent::Denied {
                tool: "Write".into(),
                target: None,
                reason: Some("policy".into()),
            },
            EngineEvent::TurnFailed {
                message: "no".into(),
                class: None,
                retry_after_ms: None,
            },
            EngineEvent::ResumePoint { id: "u9".into() },
        ];
        for event in events {
            let mut old = serde_json::to_value(&event).unwrap();
            old.as_object_mut().unwrap().remove("kind");
            assert_eq!(Payload::from(event.clone()).to_value(), old, "{event:?}");
        }
    }
}
