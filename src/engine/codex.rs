//! The `codex` engine: OpenAI's Codex CLI, one turn per process with `codex exec --json`.
//!
//! The argv (measured against codex-cli 0.171.0; `tests/it/real_codex.rs` keeps it true):
//!
//! ```text
//! codex [--model M] [--config model_reasoning_effort="E"] SANDBOX
//!       exec --json --skip-git-repo-check [resume [--image F]… THREAD | [--image F]…] -- - < PROMPT
//! ```
//!
//! - SANDBOX is `--sandbox workspace-write --ask-for-approval never`, `--sandbox read-only
//!   --ask-for-approval never` or `--dangerously-bypass-approvals-and-sandbox`: nobody is there
//!   to approve anything, so codex must never ask.
//! - `--skip-git-repo-check`: a project need not be a git repository (without it codex exits 1
//!   with an empty stdout).
//! - The prompt is written to stdin (`-`), byte for byte: an argv string cannot hold more than
//!   128 KiB, and nothing in it can be read as a flag. `--` before the `-` ends the top-level
//!   `--image` list, which takes several values per flag; under `resume`, `--image` takes
//!   exactly one value, so it may precede the thread id.
//! - The effort goes through `--config` as a TOML string (`model_reasoning_effort="high"`), which
//!   codex parses as TOML; quotes and backslashes in it are escaped.
//! - An empty model, effort or thread id is treated as absent: none of them can mean anything.
//!
//! The output is one JSON object per stdout line ([`parse_exec_line`]). `error` lines are only
//! notices: codex prints `Reconnecting... 1/5 (…)` in turns that then succeed, and only
//! `turn.failed` fails a turn. A resume of an unknown thread prints nothing on stdout at all (its
//! message is on stderr, which [`super::judge`] falls back to).
//!
//! The [`super::fake`] engine speaks the same format and reuses [`exec_argv`] and
//! [`parse_exec_line`].

use std::ffi::OsString;

use serde_json::Value;

use super::{
    non_empty, raw, str_field, Engine, EngineEvent, EngineKind, FailureClass, Policy, RunSpec,
};

/// The `codex` adapter.
pub struct Codex;

impl Engine for Codex {
    fn kind(&self) -> EngineKind {
        EngineKind::Codex
    }

    fn argv(&self, spec: &RunSpec) -> Vec<OsString> {
        exec_argv(spec)
    }

    fn parse_line(&self, line: &str) -> Vec<EngineEvent> {
        parse_exec_line(line)
    }

    fn stdin(&self, spec: &RunSpec) -> Option<String> {
        exec_stdin(spec)
    }

    fn final_line(&self) -> Option<&'static str> {
        Some(FINAL_LINE)
    }
}

/// What a complete `codex exec --json` run ends with.
pub const FINAL_LINE: &str = "its final `turn.completed` line";

/// The class of a `turn.failed` message. codex reports a provider's rate limit only in words
/// of its own making (`exceeded retry limit, last status: 429 Too Many Requests`, `rate limit
/// exceeded: …`), never as a status field, so these phrases are its structured error; a usage
/// limit or a quota also comes as a 429 and is not retried.
pub fn failure_class(message: &str) -> Option<FailureClass> {
    let lower = message.to_ascii_lowercase();
    if lower.contains("usage limit") || lower.contains("quota") {
        return Some(FailureClass::Other);
    }
    if lower.contains("last status: 429") || lower.starts_with("rate limit exceeded") {
        return Some(FailureClass::RateLimit);
    }
    None
}

/// The argv of one `codex exec --json` turn (see the module documentation).
pub fn exec_argv(spec: &RunSpec) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![spec.program.clone().into_os_string()];
    if let Some(model) = non_empty(&spec.model) {
        argv.push("--model".into());
        argv.push(model.into());
    }
    if let Some(effort) = non_empty(&spec.reasoning_effort) {
        argv.push("--config".into());
        argv.push(format!("model_reasoning_effort={}", toml_string(effort)).into());
    }
    // `ask` is refused for codex exec before a prompt is queued (`EngineKind::cannot_ask`);
    // one queued before its session's engine changed runs as workspace-write.
    let sandbox: &[&str] = match spec.policy {
        Policy::WorkspaceWrite | Policy::Ask => &[
            "--sandbox",
            "workspace-write",
            "--ask-for-approval",
            "never",
        ],
        Policy::ReadOnly => &["--sandbox", "read-only", "--ask-for-approval", "never"],
        Policy::Full => &["--dangerously-bypass-approvals-and-sandbox"],
    };
    argv.extend(sandbox.iter().map(OsString::from));
    argv.extend(["exec", "--json", "--skip-git-repo-check"].map(OsString::from));
    let images = spec
        .images
        .iter()
        .flat_map(|image| [OsString::from("--image"), image.clone().into_os_string()]);
    match non_empty(&spec.thread_id) {
        Some(thread_id) => {
            argv.push("resume".into());
            argv.extend(images);
            argv.push(thread_id.into());
        }
        None => argv.extend(images),
    }
    // The prompt itself comes on stdin ([`exec_stdin`]); `--` ends an `--image` list.
    argv.push("--".into());
    argv.push("-".into());
    argv
}

/// What `codex exec … -` reads on stdin: the prompt, byte for byte (a positional could not
/// hold more than 128 KiB).
pub fn exec_stdin(spec: &RunSpec) -> Option<String> {
    Some(spec.prompt.clone())
}

/// The events of one line of `codex exec --json` stdout.
///
/// A line that is not a JSON object, has an unknown `type`, or lacks the field its type is
/// about (a `thread.started` without a thread id…) is kept as [`EngineEvent::Raw`]; a blank line
/// says nothing.
pub fn parse_exec_line(line: &str) -> Vec<EngineEvent> {
    if line.trim().is_empty() {
        return Vec::new();
    }
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(line) else {
        return raw(line);
    };
    let events = match object.get("type").and_then(Value::as_str) {
        Some("thread.started") => str_field(&object, "thread_id").map(|thread_id| {
            vec![EngineEvent::ThreadStarted {
                thread_id: thread_id.to_string(),
            }]
        }),
        Some("turn.started") => Some(vec![EngineEvent::TurnStarted]),
        Some("item.completed") => object.get("item").and_then(completed_item),
        Some("item.started" | "item.updated") => object.get("item").and_then(progressing_item),
        Some("turn.completed") => {
            let mut events = Vec::new();
            if let Some(usage) = object.get("usage").filter(|usage| !usage.is_null()) {
                events.push(EngineEvent::Usage {
                    usage: usage.clone(),
                });
            }
            events.push(EngineEvent::TurnCompleted);
            Some(events)
        }
        // A failed turn is a failure even if its message is missing: the verdict must not
        // depend on the message's shape.
        Some("turn.failed") => {
            let message = object
                .get("error")
                .and_then(|error| error.get("message"))
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| match object.get("error") {
                    Some(error) if !error.is_null() => error.to_string(),
                    _ => "codex reported a failed turn without a message".to_string(),
                });
            Some(vec![EngineEvent::TurnFailed {
                class: failure_class(&message),
                retry_after_ms: super::try_again_in(&message).map(|d| d.as_millis() as u64),
                message,
            }])
        }
        Some("error") => str_field(&object, "message").map(|message| {
            vec![EngineEvent::Notice {
                message: message.to_string(),
            }]
        }),
        _ => None,
    };
    events.unwrap_or_else(|| raw(line))
}

/// An `item.completed`: the agent's message, a non-fatal error item, or a tool call of any kind
/// (command_execution, file_change, mcp_tool_call, web_search, reasoning, todo_list…).
fn completed_item(item: &Value) -> Option<Vec<EngineEvent>> {
    let item_object = item.as_object()?;
    let event = match str_field(item_object, "type")? {
        "agent_message" => EngineEvent::Message {
            text: str_field(item_object, "text")?.to_string(),
        },
        // Codex reports e.g. unknown model metadata as an error item in a turn that goes on.
        "error" => EngineEvent::Notice {
            message: str_field(item_object, "message")?.to_string(),
        },
        other => EngineEvent::Tool {
            name: other.to_string(),
            detail: item.clone(),
        },
    };
    Some(vec![event])
}

/// An `item.started`/`item.updated`: only a running command is worth showing before it
/// completes (a long build or test run); the other items are reported once completed.
fn progressing_item(item: &Value) -> Option<Vec<EngineEvent>> {
    match str_field(item.as_object()?, "type")? {
        "command_execution" => Some(vec![EngineEvent::Tool {
            name: "command_execution".to_string(),
            detail: item.clone(),
        }]),
        _ => Some(Vec::new()),
    }
}

/// A TOML basic string: codex reads `--config` values as TOML.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for character in text.chars() {
        match character {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            // TOML basic strings cannot hold raw control characters.
            control if control.is_control() => {
                quoted.push_str(&format!("\\u{:04X}", u32::from(control)))
            }
            other => quoted.push(other),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::engine::{classify_failure, judge, FailureClass, RunVerdict};

    fn spec(prompt: &str) -> RunSpec {
        RunSpec {
            program: PathBuf::from("codex"),
            prompt: prompt.to_string(),
            images: Vec::new(),
            thread_id: None,
            model: None,
            reasoning_effort: None,
            policy: Policy::WorkspaceWrite,
            template: Vec::new(),
            ..Default::default()
        }
    }

    fn strings(argv: Vec<OsString>) -> Vec<String> {
        argv.into_iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn new_thread_without_images() {
        assert_eq!(
            strings(Codex.argv(&spec("Modify app.py"))),
            [
                "codex",
                "--sandbox",
                "workspace-write",
                "--ask-for-approval",
                "never",
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--",
                "-",
            ]
        );
    }

    #[test]
    fn new_thread_with_images() {
        let mut spec = spec("Inspect");
        spec.images = vec!["/data/a.png".into(), "/data/b.jpg".into()];
        assert_eq!(
            strings(Codex.argv(&spec)),
            [
                "codex",
                "--sandbox",
                "workspace-write",
                "--ask-for-approval",
                "never",
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--image",
                "/data/a.png",
                "--image",
                "/data/b.jpg",
                "--",
                "-",
            ]
        );
    }

    #[test]
    fn resumed_thread_with_an_image() {
        let mut spec = spec("Continue");
        spec.thread_id = Some("thread-id".into());
        spec.images = vec!["/data/a.png".into()];
        assert_eq!(
            strings(Codex.argv(&spec)),
            [
                "codex",
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
    }

    #[test]
    fn resumed_thread_without_images() {
        let mut spec = spec("Continue");
        spec.thread_id = Some("thread-id".into());
        assert_eq!(
            strings(Codex.argv(&spec))[8..],
            ["resume", "thread-id", "--", "-"]
        );
    }

    #[test]
    fn an_empty_thread_id_starts_a_new_thread() {
        let mut spec = spec("Go");
        spec.thread_id = Some(String::new());
        let argv = strings(Codex.argv(&spec));
        assert!(!argv.contains(&"resume".to_string()), "{argv:?}");
    }

    #[test]
    fn full_access_bypasses_the_sandbox() {
        let mut spec = spec("Run task");
        spec.policy = Policy::for_prompt(true, false, false);
        assert_eq!(
            strings(Codex.argv(&spec)),
            [
                "codex",
                "--dangerously-bypass-approvals-and-sandbox",
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--",
                "-",
            ]
        );
    }

    #[test]
    fn read_only_prompts_and_remote_projects_are_read_only() {
        let expected = [
            "codex",
            "--sandbox",
            "read-only",
            "--ask-for-approval",
            "never",
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--",
            "-",
        ];
        // A read-only prompt, and a remote project even with full access granted.
        for sandbox in [
            Policy::for_prompt(false, false, true),
            Policy::for_prompt(true, true, false),
        ] {
            let mut spec = spec("Answer only");
            spec.policy = sandbox;
            assert_eq!(strings(Codex.argv(&spec)), expected);
        }
    }

    #[test]
    fn model_and_reasoning_effort_come_first() {
        let mut spec = spec("Go");
        spec.model = Some("gpt-5.6-sol".into());
        spec.reasoning_effort = Some("high".into());
        assert_eq!(
            strings(Codex.argv(&spec))[..5],
            [
                "codex",
                "--model",
                "gpt-5.6-sol",
                "--config",
                "model_reasoning_effort=\"high\"",
            ]
        );
    }

    #[test]
    fn effort_is_a_toml_string() {
        let mut spec = spec("Go");
        spec.reasoning_effort = Some("a\"b\\c".into());
        assert_eq!(
            strings(Codex.argv(&spec))[2],
            r#"model_reasoning_effort="a\"b\\c""#
        );
    }

    #[test]
    fn the_prompt_goes_on_stdin_whatever_it_starts_with() {
        for prompt in [
            "--help me",
            "a \"b c\"\nline two ünï",
            &"x".repeat(200 * 1024),
        ] {
            let spec = spec(prompt);
            let argv = strings(Codex.argv(&spec));
            assert_eq!(argv[argv.len() - 2..], ["--", "-"]);
            assert_eq!(Codex.stdin(&spec).as_deref(), Some(prompt));
        }
    }

    /// One captured run of codex 0.171.0: stdout, stderr and `exit_code=` from the `.meta`.
    struct Sample {
        name: &'static str,
        stdout: &'static str,
        stderr: &'static str,
        meta: &'static str,
    }

    macro_rules! sample {
        ($name:literal) => {
            Sample {
                name: $name,
                stdout: include_str!(concat!(
                    "../../tests/data/codex-0.171.0-samples/",
                    $name,
                    ".jsonl"
                )),
                stderr: include_str!(concat!(
                    "../../tests/data/codex-0.171.0-samples/",
                    $name,
                    ".stderr"
                )),
                meta: include_str!(concat!(
                    "../../tests/data/codex-0.171.0-samples/",
                    $name,
                    ".meta"
                )),
            }
        };
    }

    struct Outcome {
        events: Vec<EngineEvent>,
        verdict: RunVerdict,
        stderr: Vec<String>,
    }

    impl Sample {
        fn run(&self) -> Outcome {
            let events: Vec<EngineEvent> = self.stdout.lines().flat_map(parse_exec_line).collect();
            let exit_code = self
                .meta
                .split_whitespace()
                .find_map(|word| word.strip_prefix("exit_code="))
                .and_then(|code| code.parse().ok());
            assert!(exit_code.is_some(), "{}: no exit code in meta", self.name);
            let stderr: Vec<String> = self.stderr.lines().map(str::to_string).collect();
            let verdict = judge(&events, exit_code, None, &stderr, Codex.final_line());
            Outcome {
                events,
                verdict,
                stderr,
            }
        }
    }

    fn thread_ids(events: &[EngineEvent]) -> Vec<&str> {
        events
            .iter()
            .filter_map(|event| match event {
                EngineEvent::ThreadStarted { thread_id } => Some(thread_id.as_str()),
                _ => None,
            })
            .collect()
    }

    fn messages(events: &[EngineEvent]) -> Vec<&str> {
        events
            .iter()
            .filter_map(|event| match event {
                EngineEvent::Message { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn notices(events: &[EngineEvent]) -> Vec<&str> {
        events
            .iter()
            .filter_map(|event| match event {
                EngineEvent::Notice { message } => Some(message.as_str()),
                _ => None,
            })
            .collect()
    }

    const ALL_SAMPLES: [Sample; 17] = [
        sample!("exec_429_no_retry_after"),
        sample!("exec_429_retries_0"),
        sample!("exec_429_retry_after_1_stream_retries_2"),
        sample!("exec_429_then_ok"),
        sample!("exec_connection_refused"),
        sample!("exec_connection_refused_unbounded_default"),
        sample!("exec_http500"),
        sample!("exec_missing_api_key"),
        sample!("exec_no_git_check"),
        sample!("exec_quota"),
        sample!("exec_resume"),
        sample!("exec_resume_missing"),
        sample!("exec_sse_failed_rate_limit"),
        sample!("exec_stall_mid_idle_timeout"),
        sample!("exec_stall_pre_headers"),
        sample!("exec_success"),
        sample!("exec_usage_limit"),
    ];

    #[test]
    fn every_sample_line_is_understood() {
        for sample in &ALL_SAMPLES {
            for line in sample.stdout.lines() {
                let events = parse_exec_line(line);
                assert!(!events.is_empty(), "{}: {line}", sample.name);
                assert!(
                    !events
                        .iter()
                        .any(|event| matches!(event, EngineEvent::Raw { .. })),
                    "{}: {line} -> {events:?}",
                    sample.name
                );
            }
        }
    }

    #[test]
    fn success_sample_gives_every_event() {
        let outcome = sample!("exec_success").run();
        assert_eq!(
            outcome.events,
            [
                EngineEvent::ThreadStarted {
                    thread_id: "01a22b24-301e-7153-9e5e-4985c236c940".into()
                },
                EngineEvent::TurnStarted,
                EngineEvent::Message { text: "hi".into() },
                EngineEvent::Usage {
                    usage: json!({
                        "input_tokens": 5491,
                        "cached_input_tokens": 0,
                        "cache_write_input_tokens": 0,
                        "output_tokens": 1,
                        "reasoning_output_tokens": 0
                    })
                },
                EngineEvent::TurnCompleted,
            ]
        );
        assert_eq!(outcome.verdict, RunVerdict::Succeeded);
    }

    #[test]
    fn succeeded_samples() {
        for (sample, thread_id, message) in [
            (
                sample!("exec_success"),
                "01a22b24-301e-7153-9e5e-4985c236c940",
                "hi",
            ),
            (
                sample!("exec_resume"),
                "01a22b24-301e-7153-9e5e-4985c236c940",
                "you said: next",
            ),
            (
                sample!("exec_429_then_ok"),
                "01a22b24-3cea-7650-afbe-ec877629a1a2",
                "recovered",
            ),
            (
                sample!("exec_stall_pre_headers"),
                "01a22b24-5610-7a42-aac0-e68e2c2bcf19",
                "hi",
            ),
        ] {
            let outcome = sample.run();
            assert_eq!(thread_ids(&outcome.events), [thread_id], "{}", sample.name);
            assert_eq!(messages(&outcome.events).last(), Some(&message));
            assert_eq!(outcome.verdict, RunVerdict::Succeeded, "{}", sample.name);
            assert_eq!(outcome.events.last(), Some(&EngineEvent::TurnCompleted));
        }
    }

    #[test]
    fn a_retry_notice_does_not_fail_a_turn_that_recovers() {
        let outcome = sample!("exec_429_then_ok").run();
        assert_eq!(
            notices(&outcome.events),
            ["Reconnecting... 1/2 (exceeded retry limit, last status: 429 Too Many Requests)"]
        );
        assert_eq!(outcome.verdict, RunVerdict::Succeeded);
    }

    #[test]
    fn failed_samples() {
        const TOO_MANY: &str = "exceeded retry limit, last status: 429 Too Many Requests";
        for (sample, thread_id, message, class) in [
            (
                sample!("exec_429_no_retry_after"),
                "01a22b24-3b6b-7883-9a70-6b5354aa1b64",
                TOO_MANY,
                FailureClass::RateLimit,
            ),
            (
                sample!("exec_429_retries_0"),
                "01a22b24-3c27-79f1-8716-487f9863ef55",
                TOO_MANY,
                FailureClass::RateLimit,
            ),
            (
                sample!("exec_429_retry_after_1_stream_retries_2"),
                "01a22b24-32c0-7143-b3e3-90250aac0df2",
                TOO_MANY,
                FailureClass::RateLimit,
            ),
            (
                sample!("exec_sse_failed_rate_limit"),
                "01a22b24-41b7-7702-b133-1823ce5e4768",
                "rate limit exceeded: Rate limit reached for mock-model. Please try again in 1.5s.",
                FailureClass::RateLimit,
            ),
            (
                sample!("exec_quota"),
                "01a22b24-494a-76b3-9472-fe225252b7bf",
                "Quota exceeded. Check your plan and billing details.",
                FailureClass::Other,
            ),
            (
                sample!("exec_usage_limit"),
                "01a22b24-4878-71b0-ba14-2092e192000f",
                "You\u{2019}ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), \
                 visit https://chatgpt.com/settings/usage to purchase more credits or try again at \
                 7:28 AM.",
                FailureClass::Other,
            ),
            (
                sample!("exec_http500"),
                "01a22b24-4a17-78f1-b9d8-92c4f10d0f68",
                "We\u{2019}re currently experiencing high demand, which may cause temporary errors.",
                FailureClass::Other,
            ),
            (
                sample!("exec_stall_mid_idle_timeout"),
                "01a22b24-4d60-7bf3-8456-c692aaee5a94",
                "stream disconnected before completion: idle timeout waiting for SSE",
                FailureClass::Other,
            ),
            (
                sample!("exec_connection_refused"),
                "01a22b24-6365-7a01-8803-8647416e30e5",
                "Connection failed: error sending request",
                FailureClass::Other,
            ),
            (
                sample!("exec_missing_api_key"),
                "01a22b24-6298-7d20-9b3a-2b7623a09c0e",
                "Missing environment variable: `MOCK_API_KEY`.",
                FailureClass::Other,
            ),
        ] {
            let outcome = sample.run();
            assert_eq!(thread_ids(&outcome.events), [thread_id], "{}", sample.name);
            assert!(messages(&outcome.events).is_empty(), "{}", sample.name);
            let Some(EngineEvent::TurnFailed {
                message: said,
                class: structured,
                ..
            }) = outcome.events.last()
            else {
                panic!("{}: {:?}", sample.name, outcome.events.last());
            };
            assert_eq!(said, message, "{}", sample.name);
            // What the structured error says agrees with the words, where it says anything.
            assert!(
                structured.is_none_or(|structured| structured == class),
                "{}: {structured:?}",
                sample.name
            );
            assert_eq!(
                outcome.verdict,
                RunVerdict::Failed {
                    message: message.into()
                },
                "{}",
                sample.name
            );
            // A new thread (no thread id) and a resumed one classify alike here.
            for thread in [None, Some(thread_id)] {
                assert_eq!(
                    classify_failure(EngineKind::Codex, thread, &[message]),
                    class,
                    "{}",
                    sample.name
                );
            }
        }
    }

    #[test]
    fn retries_exhausted_leave_their_notices() {
        let outcome = sample!("exec_429_retry_after_1_stream_retries_2").run();
        assert_eq!(
            notices(&outcome.events),
            [
                "Reconnecting... 1/2 (exceeded retry limit, last status: 429 Too Many Requests)",
                "Reconnecting... 2/2 (exceeded retry limit, last status: 429 Too Many Requests)",
                "exceeded retry limit, last status: 429 Too Many Requests",
            ]
        );
    }

    #[test]
    fn a_run_killed_while_waiting_for_the_network_fails() {
        let outcome = sample!("exec_connection_refused_unbounded_default").run();
        let waiting =
            "Reconnecting... waiting for network (Connection failed: error sending request)";
        assert_eq!(
            outcome.events,
            [
                EngineEvent::ThreadStarted {
                    thread_id: "01a22b24-6455-7e72-b204-9c488a1b8f63".into()
                },
                EngineEvent::TurnStarted,
                EngineEvent::Notice {
                    message: waiting.into()
                },
                EngineEvent::Notice {
                    message: waiting.into()
                },
            ]
        );
        // No terminal line and exit 124 (killed by `timeout`): a failure, whatever its words.
        assert!(matches!(outcome.verdict, RunVerdict::Failed { .. }));
    }

    #[test]
    fn an_empty_stdout_is_judged_by_stderr() {
        let outcome = sample!("exec_no_git_check").run();
        assert!(outcome.events.is_empty());
        let message = "Not inside a trusted directory and --skip-git-repo-check was not specified.";
        assert_eq!(
            outcome.verdict,
            RunVerdict::Failed {
                message: message.into()
            }
        );
        assert_eq!(
            classify_failure(EngineKind::Codex, None, &[message]),
            FailureClass::Other
        );
    }

    #[test]
    fn a_missing_rollout_is_classified_from_stderr() {
        let outcome = sample!("exec_resume_missing").run();
        assert!(outcome.events.is_empty());
        let thread_id = "00000000-0000-4000-8000-000000000000";
        let last_line = outcome.stderr.last().map(String::as_str).unwrap_or("");
        assert_eq!(
            last_line,
            format!(
                "Error: thread/resume: thread/resume failed: no rollout found for thread id \
                 {thread_id} (code -32600)"
            )
        );
        assert_eq!(
            outcome.verdict,
            RunVerdict::Failed {
                message: last_line.to_string()
            }
        );
        for engine in [EngineKind::Codex, EngineKind::Fake] {
            assert_eq!(
                classify_failure(engine, Some(thread_id), &[last_line]),
                FailureClass::MissingRollout
            );
        }
        assert_eq!(
            classify_failure(EngineKind::Codex, None, &[last_line]),
            FailureClass::Other
        );
    }

    #[test]
    fn items_of_every_kind() {
        // From codex.md §2: the non-fatal error item of an unknown model slug.
        let error_item = r#"{"type":"item.completed","item":{"id":"item_0","type":"error","message":"Model metadata for `mock-model` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."}}"#;
        assert_eq!(
            parse_exec_line(error_item),
            [EngineEvent::Notice {
                message: "Model metadata for `mock-model` not found. Defaulting to fallback \
                          metadata; this can degrade performance and cause issues."
                    .into()
            }]
        );

        let command = json!({"id": "item_1", "type": "command_execution",
            "command": "cargo test", "aggregated_output": "", "status": "in_progress"});
        for kind in ["item.started", "item.updated", "item.completed"] {
            let line = json!({"type": kind, "item": command}).to_string();
            assert_eq!(
                parse_exec_line(&line),
                [EngineEvent::Tool {
                    name: "command_execution".into(),
                    detail: command.clone()
                }],
                "{kind}"
            );
        }

        for item_type in [
            "file_change",
            "mcp_tool_call",
            "web_search",
            "reasoning",
            "todo_list",
        ] {
            let item = json!({"id": "item_2", "type": item_type});
            let completed = json!({"type": "item.completed", "item": item}).to_string();
            assert_eq!(
                parse_exec_line(&completed),
                [EngineEvent::Tool {
                    name: item_type.into(),
                    detail: item.clone()
                }]
            );
            // Only a running command is reported before it completes.
            let started = json!({"type": "item.started", "item": item}).to_string();
            assert_eq!(parse_exec_line(&started), []);
        }
    }

    #[test]
    fn a_turn_without_usage_still_completes() {
        assert_eq!(
            parse_exec_line(r#"{"type":"turn.completed"}"#),
            [EngineEvent::TurnCompleted]
        );
        assert_eq!(
            parse_exec_line(r#"{"type":"turn.completed","usage":null}"#),
            [EngineEvent::TurnCompleted]
        );
    }

    #[test]
    fn a_failed_turn_without_a_message_still_fails() {
        assert_eq!(
            parse_exec_line(r#"{"type":"turn.failed"}"#),
            [EngineEvent::failed(
                "codex reported a failed turn without a message"
            )]
        );
        assert_eq!(
            parse_exec_line(r#"{"type":"turn.failed","error":{"code":7}}"#),
            [EngineEvent::failed(r#"{"code":7}"#)]
        );
    }

    #[test]
    fn anything_else_is_raw() {
        for line in [
            "Reading additional input from stdin...",
            "{\"type\":",
            "[1,2]",
            "\"thread.started\"",
            "42",
            "null",
            "{}",
            r#"{"type":"thread.forked","thread_id":"t"}"#,
            r#"{"type":7}"#,
            r#"{"type":"thread.started"}"#,
            r#"{"type":"thread.started","thread_id":5}"#,
            r#"{"type":"item.completed"}"#,
            r#"{"type":"item.completed","item":"text"}"#,
            r#"{"type":"item.completed","item":{"type":"agent_message"}}"#,
            r#"{"type":"item.started","item":{}}"#,
            r#"{"type":"error"}"#,
        ] {
            assert_eq!(
                parse_exec_line(line),
                [EngineEvent::Raw { line: line.into() }],
                "{line}"
            );
        }
        assert_eq!(parse_exec_line(""), []);
        assert_eq!(parse_exec_line("  \t"), []);
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(line in ".*") {
            let _ = parse_exec_line(&line);
        }

        #[test]
        fn never_panics_on_any_json(
            kind in prop::sample::select(vec![
                "thread.started", "turn.started", "item.started", "item.updated",
                "item.completed", "turn.completed", "turn.failed", "error",
            ]),
            value in any::<Option<i64>>().prop_map(|n| n.map_or(Value::Null, Value::from)),
            item_type in ".*",
        ) {
            for line in [
                json!({"type": kind, "item": {"type": item_type, "text": value}}),
                json!({"type": kind, "item": value, "thread_id": value, "error": value,
                       "message": value, "usage": value}),
            ] {
                let _ = parse_exec_line(&line.to_string());
            }
        }
    }
}
