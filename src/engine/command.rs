//! The `command` engine: any program, started from an argv template, whose output is plain text.
//!
//! The argv is `spec.template` with every `{prompt}` inside each element replaced by the prompt
//! (so `["my-agent", "--ask={prompt}"]` works as well as a bare `{prompt}` element). The template's
//! first element is the program; `spec.program` is used only when the template is empty, which
//! means `sh -c PROMPT` (the prompt is a shell command line). The prompt is substituted as one
//! argv element and never through a shell, so it needs no quoting.
//!
//! There is no structured output: every non-blank stdout line is a whole
//! [`EngineEvent::Message`], and the run is judged by its exit status alone ([`super::judge`]
//! finds neither a completed nor a failed turn).

use std::ffi::OsString;

use super::{Engine, EngineEvent, EngineKind, RunSpec};

/// The placeholder replaced by the prompt in each template element.
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";

/// The `command` adapter.
pub struct Command;

impl Engine for Command {
    fn kind(&self) -> EngineKind {
        EngineKind::Command
    }

    fn argv(&self, spec: &RunSpec) -> Vec<OsString> {
        if spec.template.is_empty() {
            return vec![
                spec.program.clone().into_os_string(),
                "-c".into(),
                spec.prompt.clone().into(),
            ];
        }
        spec.template
            .iter()
            .map(|element| OsString::from(element.replace(PROMPT_PLACEHOLDER, &spec.prompt)))
            .collect()
    }

    fn parse_line(&self, line: &str) -> Vec<EngineEvent> {
        if line.trim().is_empty() {
            return Vec::new();
        }
        vec![EngineEvent::Message {
            text: line.to_string(),
        }]
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::engine::{judge, Policy, RunVerdict};

    fn spec(template: &[&str], prompt: &str) -> RunSpec {
        RunSpec {
            program: PathBuf::from("sh"),
            prompt: prompt.to_string(),
            images: Vec::new(),
            thread_id: None,
            model: None,
            reasoning_effort: None,
            policy: Policy::WorkspaceWrite,
            template: template.iter().map(|element| element.to_string()).collect(),
            ..Default::default()
        }
    }

    fn strings(argv: Vec<OsString>) -> Vec<String> {
        argv.into_iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn an_empty_template_is_sh_c_prompt() {
        let mut spec = spec(&[], "echo 'a b' | wc -c");
        spec.program = PathBuf::from("/bin/dash");
        assert_eq!(
            strings(Command.argv(&spec)),
            ["/bin/dash", "-c", "echo 'a b' | wc -c"]
        );
    }

    #[test]
    fn the_prompt_replaces_every_placeholder_in_every_element() {
        let spec = spec(
            &[
                "my-agent",
                "--ask={prompt}",
                "{prompt}",
                "{prompt}/{prompt}",
                "--verbose",
            ],
            "fix it",
        );
        assert_eq!(
            strings(Command.argv(&spec)),
            [
                "my-agent",
                "--ask=fix it",
                "fix it",
                "fix it/fix it",
                "--verbose"
            ]
        );
    }

    #[test]
    fn the_template_names_its_own_program() {
        // `spec.program` ("sh") is not used when the template has elements.
        let spec = spec(&["python3", "-c", "print(1)"], "ignored");
        assert_eq!(strings(Command.argv(&spec)), ["python3", "-c", "print(1)"]);
    }

    #[test]
    fn a_prompt_holding_the_placeholder_is_not_substituted_twice() {
        let spec = spec(&["echo", "{prompt}"], "say {prompt}");
        assert_eq!(strings(Command.argv(&spec)), ["echo", "say {prompt}"]);
    }

    #[test]
    fn every_non_blank_line_is_a_message() {
        for line in [
            "hello",
            "{\"type\":\"turn.completed\"}",
            "  indented",
            "[1]",
        ] {
            assert_eq!(
                Command.parse_line(line),
                [EngineEvent::Message { text: line.into() }]
            );
        }
        assert_eq!(Command.parse_line(""), []);
        assert_eq!(Command.parse_line("   "), []);
    }

    #[test]
    fn judged_by_the_exit_status() {
        let events = Command.parse_line("done");
        assert_eq!(
            judge(&events, Some(0), None, &[], None),
            RunVerdict::Succeeded
        );
        assert_eq!(
            judge(&events, Some(2), None, &["boom".into()], None),
            RunVerdict::Failed {
                message: "boom".into()
            }
        );
    }
}
