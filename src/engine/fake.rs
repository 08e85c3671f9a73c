//! The `fake` engine: `corral-fake-engine`, a scripted stand-in that tests and demos run on.
//!
//! It is called exactly like codex and answers in codex's `exec --json` format, so this adapter
//! is the codex adapter under another [`EngineKind`]: the argv comes from
//! [`codex::exec_argv`] and the lines are read by [`codex::parse_exec_line`]. The kind matters
//! to the retry policy, which applies codex's thread rules to the fake engine too
//! ([`super::classify_failure`]).

use std::ffi::OsString;

use super::codex;
use super::{Engine, EngineEvent, EngineKind, RunSpec};

/// The `fake` adapter.
pub struct Fake;

impl Engine for Fake {
    fn kind(&self) -> EngineKind {
        EngineKind::Fake
    }

    fn argv(&self, spec: &RunSpec) -> Vec<OsString> {
        codex::exec_argv(spec)
    }

    fn parse_line(&self, line: &str) -> Vec<EngineEvent> {
        codex::parse_exec_line(line)
    }

    fn stdin(&self, spec: &RunSpec) -> Option<String> {
        codex::exec_stdin(spec)
    }

    fn final_line(&self) -> Option<&'static str> {
        Some(codex::FINAL_LINE)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::engine::Policy;

    fn strings(argv: Vec<OsString>) -> Vec<String> {
        argv.into_iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn called_like_codex() {
        let spec = RunSpec {
            program: PathBuf::from("/opt/corral/corral-fake-engine"),
            prompt: "Continue".into(),
            images: vec!["/data/a.png".into()],
            thread_id: Some("thread-id".into()),
            model: Some("fake-model".into()),
            reasoning_effort: Some("low".into()),
            policy: Policy::WorkspaceWrite,
            template: Vec::new(),
            ..Default::default()
        };
        assert_eq!(
            strings(Fake.argv(&spec)),
            [
                "/opt/corral/corral-fake-engine",
                "--model",
                "fake-model",
                "--config",
                "model_reasoning_effort=\"low\"",
                "--sandbox",
                "workspace-write",
                "--ask-for-approval",
                "never",
                "exec",
                "--json",
                "--skip-git-repo-check",
                "resume",
                "--image",
                "/data/a.png",
                "thread-id",
                "--",
                "-",
            ]
        );
        assert_eq!(Fake.kind(), EngineKind::Fake);
    }

    #[test]
    fn speaks_codex_exec_json() {
        let lines = [
            r#"{"type":"thread.started","thread_id":"fake-1"}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"done"}}"#,
            r#"{"type":"turn.failed","error":{"message":"scripted failure"}}"#,
            "not json",
        ];
        let events: Vec<EngineEvent> = lines
            .iter()
            .flat_map(|line| Fake.parse_line(line))
            .collect();
        assert_eq!(
            events,
            [
                EngineEvent::ThreadStarted {
                    thread_id: "fake-1".into()
                },
                EngineEvent::TurnStarted,
                EngineEvent::Message {
                    text: "done".into()
                },
                EngineEvent::failed("scripted failure"),
                EngineEvent::Raw {
                    line: "not json".into()
                },
            ]
        );
    }
}
