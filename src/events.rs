//! The kinds of a session's events: one enum for the code that emits them (the session worker)
//! and the code that reads them (`watch`, `send --wait`, `corral connect`, the demo, the
//! library's waiters).
//!
//! On the wire and in the store a kind is its dotted name (`prompt.done`); a name this build
//! does not know (a newer daemon's) reads as [`EventKind::Other`] and is shown as it is, so an
//! old client never fails on a new event.
//!
//! Each kind's payload has its type ([`Payload`], `payload.rs`): emitters build it, readers
//! match on it; stored and sent it is the same JSON object as before.

use std::fmt;

mod payload;
pub use payload::*;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! event_kinds {
    ($($(#[$doc:meta])* $variant:ident => $name:literal,)*) => {
        /// What a session event says happened.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum EventKind {
            $($(#[$doc])* $variant,)*
            /// A kind this build does not know, kept by its name.
            Other(String),
        }

        impl EventKind {
            /// Every kind this build emits.
            pub const KNOWN: &'static [EventKind] = &[$(EventKind::$variant,)*];

            /// The dotted name, as stored and sent.
            pub fn as_str(&self) -> &str {
                match self {
                    $(EventKind::$variant => $name,)*
                    EventKind::Other(name) => name,
                }
            }

            /// The kind of a dotted name (an unknown name is [`EventKind::Other`]).
            pub fn parse(name: &str) -> EventKind {
                match name {
                    $($name => EventKind::$variant,)*
                    other => EventKind::Other(other.to_string()),
                }
            }
        }
    };
}

event_kinds! {
    /// A prompt began (its text and images).
    PromptStarted => "prompt.started",
    /// A prompt ended with an answer.
    PromptDone => "prompt.done",
    /// A prompt ended with an error.
    PromptFailed => "prompt.failed",
    /// A prompt was cancelled.
    PromptCancelled => "prompt.cancelled",
    /// A prompt went back to the queue (daemon shutdown or crash recovery).
    PromptRequeued => "prompt.requeued",
    /// The prompt waits: on a shared store, no live daemon serves its project (its path is
    /// a directory on no live daemon's host).
    PromptUnserved => "prompt.unserved",
    /// The prompt waits for a slot (and what holds it).
    SlotWaiting => "slot.waiting",
    /// The slot it waited for was granted.
    SlotGranted => "slot.granted",
    /// An engine child (or app-server turn) started.
    RunStarted => "run.started",
    /// A run ended (exit status, signal, or what ended it).
    RunExited => "run.exited",
    /// A run the daemon before left running to its shim is followed by this daemon (live
    /// restore): how long ago it started, and its shim.
    RunReadopted => "run.readopted",
    /// A failed run is retried after a delay.
    RetryScheduled => "retry.scheduled",
    /// The prompt waits for its project's app-server child.
    AppServerUnavailable => "app_server.unavailable",
    /// The engine named a new conversation (thread/session id).
    ThreadStarted => "thread.started",
    TurnStarted => "turn.started",
    TurnCompleted => "turn.completed",
    TurnFailed => "turn.failed",
    /// A complete message of the agent.
    Message => "message",
    /// A piece of the answer as it streams.
    MessageDelta => "message.delta",
    /// A tool call or command the agent ran.
    Tool => "tool",
    /// A tool use the engine refused under the session's permissions (`tool`, `target`,
    /// `reason`); the prompt's end carries how many (`denied`).
    ToolDenied => "tool.denied",
    /// Under `ask`, the engine asks a person before a tool use (`approval`: the stored
    /// request, `corral approvals`); the engine waits for the answer.
    ApprovalRequested => "approval.requested",
    /// An approval was answered (`approval`: with its `status`, who answered and why): by a
    /// person, by a decision the person kept for the session, by `approvals.timeout_s`, or
    /// as denied because its run ended.
    ApprovalAnswered => "approval.answered",
    Usage => "usage",
    /// A non-fatal error line of the engine.
    Notice => "notice",
    /// A stdout line that is not the engine's structured output.
    Raw => "raw",
    /// A stderr line of the engine.
    Stderr => "stderr",
    /// A title was generated for the session.
    TitleGenerated => "title.generated",
    /// An app-server child asked something of its client (answered by the project's policy).
    ServerRequest => "server.request",
    /// An app-server child's transport closed before its turn completed.
    TransportClosed => "transport.closed",
    /// A request from inside one of the session's runs was refused: it would have widened
    /// what the agent may do (`method`, `what`, `found_by`, `peer_pid`).
    RequestRefused => "request.refused",
    /// The session's git worktree was made (`path`, `branch`, `base_commit`).
    WorktreeCreated => "worktree.created",
    /// The session's worktree was removed at archive (`path`, `kept_branch`).
    WorktreeRemoved => "worktree.removed",
    /// The project's setup command began in a new worktree (`command`).
    SetupStarted => "setup.started",
    /// A line the setup command wrote (`line`, `stream`).
    SetupOutput => "setup.output",
    /// The setup command ended (`code`, `signal`).
    SetupExited => "setup.exited",
    /// The session's branch was merged (`into`, `commit`, `squash`).
    SessionMerged => "session.merged",
}

impl EventKind {
    /// Whether this kind ends a prompt (`prompt.done`, `prompt.failed`, `prompt.cancelled`).
    pub fn ends_prompt(&self) -> bool {
        matches!(
            self,
            EventKind::PromptDone | EventKind::PromptFailed | EventKind::PromptCancelled
        )
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for EventKind {
    fn from(name: &str) -> EventKind {
        EventKind::parse(name)
    }
}

impl PartialEq<&str> for EventKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for EventKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(deserializer)?;
        Ok(EventKind::parse(&name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_kind_reads_back_as_itself() {
        for kind in EventKind::KNOWN {
            assert_eq!(&EventKind::parse(kind.as_str()), kind);
            let json = serde_json::to_string(kind).unwrap();
            assert_eq!(&serde_json::from_str::<EventKind>(&json).unwrap(), kind);
        }
        let names: std::collections::HashSet<&str> =
            EventKind::KNOWN.iter().map(EventKind::as_str).collect();
        assert_eq!(names.len(), EventKind::KNOWN.len(), "names are unique");
    }

    #[test]
    fn an_unknown_kind_is_kept_by_name() {
        let kind: EventKind = serde_json::from_str("\"worktree.exploded\"").unwrap();
        assert_eq!(kind, EventKind::Other("worktree.exploded".into()));
        assert_eq!(
            serde_json::to_string(&kind).unwrap(),
            "\"worktree.exploded\""
        );
        assert!(!kind.ends_prompt());
        assert!(EventKind::PromptCancelled.ends_prompt());
    }
}
