//! The `opencode` engine: the OpenCode CLI, one turn per process with `opencode run`.
//!
//! The argv (measured against opencode 1.18.33; `tests/it/real_engines.rs` keeps it true):
//!
//! ```text
//! opencode run --format json [--model M] [--variant E] [--session ID | --title T] --dir CWD [--file F]… < PROMPT
//! ```
//!
//! - The prompt always goes on stdin, then stdin is closed: as positionals, opencode joins the
//!   words and wraps every word with a space in double quotes (the model receives `"say hi"`),
//!   and `--file`, a yargs array option, would swallow them (opencode issues 40304 and 45501).
//!   On stdin it arrives byte for byte, whatever its length.
//! - `--dir` always: a session resumed from another directory hangs for ever.
//! - `--title` on a new session: otherwise opencode makes a model call of its own to invent one.
//! - The sandbox is opencode's permission configuration, passed in `OPENCODE_CONFIG_CONTENT`
//!   ([`Opencode::run_env`]), and `--auto` for full access. A refused tool call is a `tool_use`
//!   part in error with opencode's words for a refusal: [`EngineEvent::Denied`].
//! - The session's reasoning effort is `--variant E`.
//!
//! The output is one JSON object per line, each naming the session (`sessionID`): `step_start`,
//! `text`, `tool_use`, `step_finish` and, on failure, one `error` line ([`Opencode::parse_line`]).
//! There is no init or result line: the session is taken from `step_start`, and a turn is
//! complete when a step finishes with reason `stop`.

use std::ffi::OsString;

use serde_json::{Map, Value};

use super::{non_empty, raw, str_field, Engine, EngineEvent, EngineKind, Policy, RunSpec};

/// Where opencode reads a configuration laid over its own files.
pub const CONFIG_ENV: &str = "OPENCODE_CONFIG_CONTENT";

/// opencode's permission rules for a sandbox (measured on 1.18.33 in `run` mode,
/// docs/permissions.md). A `deny` takes the tool away or refuses the call, and the turn goes
/// on; `ask` would be rejected at once *and end the turn* in `run` mode, so corral never leaves
/// one. `external_directory` is opencode's rule for paths outside the project (its own
/// default is `ask`): a check of the paths a call names, not a sandbox.
/// - read-only: no edits, no commands, no fetches, nothing outside;
/// - workspace-write: nothing outside the project (inside, opencode's own rules);
/// - full access: `--auto` (argv) approves what would ask.
fn permission_rules(policy: Policy) -> Option<Value> {
    // `ask` is refused for opencode before a prompt is queued (`EngineKind::cannot_ask`); one
    // queued before its session's engine changed runs as workspace-write.
    match policy {
        Policy::ReadOnly => Some(serde_json::json!({
            "edit": "deny",
            "bash": "deny",
            "webfetch": "deny",
            "external_directory": "deny",
        })),
        Policy::WorkspaceWrite | Policy::Ask => {
            Some(serde_json::json!({ "external_directory": "deny" }))
        }
        Policy::Full => None,
    }
}

/// The `opencode` adapter.
pub struct Opencode;

impl Engine for Opencode {
    fn kind(&self) -> EngineKind {
        EngineKind::Opencode
    }

    fn final_line(&self) -> Option<&'static str> {
        Some(FINAL_LINE)
    }

    fn argv(&self, spec: &RunSpec) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![spec.program.clone().into_os_string()];
        argv.extend(["run", "--format", "json"].map(OsString::from));
        if let Some(model) = non_empty(&spec.model) {
            argv.push("--model".into());
            argv.push(model.into());
        }
        // The model's variant: `reasoning_effort` in the request, for a model opencode knows
        // to reason (others drop it silently).
        if let Some(effort) = non_empty(&spec.reasoning_effort) {
            argv.push("--variant".into());
            argv.push(effort.into());
        }
        match non_empty(&spec.thread_id) {
            Some(session_id) => {
                argv.push("--session".into());
                argv.push(session_id.into());
            }
            // A title of our own spares the model call opencode makes to invent one.
            None => {
                if let Some(title) = non_empty(&spec.title) {
                    argv.push("--title".into());
                    argv.push(title.into());
                }
            }
        }
        // A session resumed from another directory hangs for ever: name it always.
        if !spec.cwd.as_os_str().is_empty() {
            argv.push("--dir".into());
            argv.push(spec.cwd.clone().into_os_string());
        }
        for image in &spec.images {
            argv.push("--file".into());
            argv.push(image.clone().into_os_string());
        }
        if spec.policy == Policy::Full {
            argv.push("--auto".into());
        }
        argv
    }

    /// The sandbox's permission rules, laid over any configuration the daemon's own
    /// `OPENCODE_CONFIG_CONTENT` holds (its other keys kept; its `permission` replaced by
    /// corral's: what the agent may do is the session's policy, not the environment's).
    fn run_env(&self, spec: &RunSpec) -> Vec<(&'static str, String)> {
        let Some(rules) = permission_rules(spec.policy) else {
            return Vec::new();
        };
        let mut config = std::env::var(CONFIG_ENV)
            .ok()
            .and_then(|text| serde_json::from_str::<Map<String, Value>>(&text).ok())
            .unwrap_or_default();
        config.insert("permission".into(), rules);
        vec![(CONFIG_ENV, Value::Object(config).to_string())]
    }

    /// Always on stdin: as positionals, opencode joins the words and wraps any with a space in
    /// double quotes (the model gets `"say hi"`, quotes and all).
    fn stdin(&self, spec: &RunSpec) -> Option<String> {
        Some(spec.prompt.clone())
    }

    fn parse_line(&self, line: &str) -> Vec<EngineEvent> {
        if line.trim().is_empty() {
            return Vec::new();
        }
        let Ok(Value::Object(object)) = serde_json::from_str::<Value>(line) else {
            return raw(line);
        };
        let part = object.get("part").and_then(Value::as_object);
        let events = match str_field(&object, "type") {
            Some("step_start") => str_field(&object, "sessionID")
                .or_else(|| part.and_then(|part| str_field(part, "sessionID")))
                .map(|session_id| {
                    vec![EngineEvent::ThreadStarted {
                        thread_id: session_id.to_string(),
                    }]
                }),
            Some("text") => part.and_then(|part| str_field(part, "text")).map(|text| {
                vec![EngineEvent::Message {
                    text: text.to_string(),
                }]
            }),
            Some("tool_use" | "tool") => part.map(|part| {
                let mut events = vec![EngineEvent::Tool {
                    name: str_field(part, "tool").unwrap_or("tool").to_string(),
                    detail: Value::Object(part.clone()),
                }];
                events.extend(denial(part));
                events
            }),
            Some("step_finish") => part.map(step_finish),
            // An error line fails the run even if its shape is unexpected.
            // A failed first call prints no `step_start`: the error line names the session.
            Some("error") => {
                let mut events: Vec<EngineEvent> = str_field(&object, "sessionID")
                    .map(|session_id| EngineEvent::ThreadStarted {
                        thread_id: session_id.to_string(),
                    })
                    .into_iter()
                    .collect();
                events.push(error_event(object.get("error")));
                Some(events)
            }
            _ => None,
        };
        events.unwrap_or_else(|| raw(line))
    }
}

/// A tool call opencode refused under its permission rules: its part ends in error with
/// opencode's own words for a rule (`deny`) or a rejected request (`ask`, which `run` mode
/// rejects at once). No other event says so.
fn denial(part: &Map<String, Value>) -> Option<EngineEvent> {
    let state = part.get("state")?;
    if str_field(part, "tool") == Some("invalid") {
        return taken_away(state);
    }
    if state.get("status").and_then(Value::as_str) != Some("error") {
        return None;
    }
    let error = state.get("error").and_then(Value::as_str)?;
    let refused = [
        "rule which prevents you from using this specific tool call",
        "rejected permission to use this specific tool call",
    ];
    if !refused.iter().any(|words| error.contains(words)) {
        return None;
    }
    let input = state.get("input");
    let target = ["filePath", "path", "command", "url", "pattern"]
        .iter()
        .find_map(|key| input?.get(key)?.as_str())
        .map(str::to_string);
    Some(EngineEvent::Denied {
        tool: str_field(part, "tool").unwrap_or("tool").to_string(),
        target,
        reason: Some(error.lines().next().unwrap_or(error).to_string()),
    })
}

/// The tools a `deny` rule takes away from the model altogether (read-only's `edit`, `bash`
/// and `webfetch`).
const DENIABLE_TOOLS: &[&str] = &["write", "edit", "multiedit", "patch", "bash", "webfetch"];

/// A call of a tool a `deny` rule took away: opencode answers it as its `invalid` tool,
/// without the call's arguments, so the denial names the tool but no target.
fn taken_away(state: &Value) -> Option<EngineEvent> {
    let input = state.get("input")?;
    let tool = input.get("tool").and_then(Value::as_str)?;
    let error = input
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !DENIABLE_TOOLS.contains(&tool) || !error.contains("unavailable tool") {
        return None;
    }
    Some(EngineEvent::Denied {
        tool: tool.to_string(),
        target: None,
        reason: Some(format!(
            "{tool} is not available under the session's sandbox"
        )),
    })
}

/// A finished step reports its tokens; only reason `stop` ends the turn (`tool-calls` means
/// another step follows).
fn step_finish(part: &Map<String, Value>) -> Vec<EngineEvent> {
    let mut events = Vec::new();
    if let Some(tokens) = part.get("tokens").filter(|tokens| !tokens.is_null()) {
        events.push(EngineEvent::Usage {
            usage: tokens.clone(),
        });
    }
    if str_field(part, "reason") == Some("stop") {
        events.push(EngineEvent::TurnCompleted);
    }
    events
}

/// What a complete run ends with: opencode prints no result line, its last step says `stop`.
pub const FINAL_LINE: &str = "a final `step_finish` with reason `stop`";

/// An `error` line: its words, and from its `data` the HTTP status (a 429 is a rate limit,
/// unless its body says the quota is spent) and the provider's `retry-after-ms` or
/// `retry-after` header.
fn error_event(error: Option<&Value>) -> EngineEvent {
    let data = error.and_then(|error| error.get("data"));
    let status = data
        .and_then(|data| data.get("statusCode"))
        .and_then(Value::as_u64);
    let body = data
        .and_then(|data| data.get("responseBody"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let class = if body.contains("insufficient_quota") {
        Some(super::FailureClass::Other)
    } else {
        status.and_then(super::FailureClass::from_http_status)
    };
    let headers = data.and_then(|data| data.get("responseHeaders"));
    let header = |name: &str| -> Option<f64> {
        let value = headers?.get(name)?;
        value
            .as_str()
            .and_then(|text| text.trim().parse().ok())
            .or_else(|| value.as_f64())
    };
    let retry_after_ms = header("retry-after-ms")
        .or_else(|| header("retry-after").map(|seconds| seconds * 1000.0))
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
        .map(|ms| ms as u64);
    EngineEvent::TurnFailed {
        message: error_message(error),
        class,
        retry_after_ms,
    }
}

/// `error.data.message` (else the error's name), with ` (HTTP <statusCode>)` appended so the
/// retry classifier sees a 429 whatever the provider's words.
fn error_message(error: Option<&Value>) -> String {
    let data = error.and_then(|error| error.get("data"));
    let mut message = data
        .and_then(|data| data.get("message"))
        .and_then(Value::as_str)
        .or_else(|| {
            error
                .and_then(|error| error.get("name"))
                .and_then(Value::as_str)
        })
        .unwrap_or("opencode reported an error")
        .to_string();
    if let Some(status) = data
        .and_then(|data| data.get("statusCode"))
        .and_then(Value::as_u64)
    {
        message.push_str(&format!(" (HTTP {status})"));
    }
    message
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::engine::{classify_failure, judge, FailureClass, Policy, RunVerdict};

    fn spec(prompt: &str) -> RunSpec {
        RunSpec {
            program: PathBuf::from("opencode"),
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
    fn new_session() {
        let mut spec = spec("say hi");
        spec.cwd = "/src/app".into();
        spec.title = Some("Say hi".into());
        assert_eq!(
            strings(Opencode.argv(&spec)),
            ["opencode", "run", "--format", "json", "--title", "Say hi", "--dir", "/src/app"]
        );
        assert_eq!(Opencode.stdin(&spec).as_deref(), Some("say hi"));
    }

    /// Each sandbox is opencode's permission rules in its environment (never an `ask`,
    /// which `run` mode rejects by ending the turn), and full access is `--auto`.
    #[test]
    fn the_sandbox_is_opencodes_permission_rules() {
        let rules = |sandbox| {
            let mut spec = spec("x");
            spec.policy = sandbox;
            let env = Opencode.run_env(&spec);
            let auto = strings(Opencode.argv(&spec)).contains(&"--auto".to_string());
            let rules = env
                .iter()
                .find(|(name, _)| *name == CONFIG_ENV)
                .map(|(_, text)| {
                    serde_json::from_str::<Value>(text).unwrap()["permission"].clone()
                });
            (rules, auto)
        };
        let (read_only, auto) = rules(Policy::ReadOnly);
        assert!(!auto);
        let read_only = read_only.unwrap();
        for tool in ["edit", "bash", "webfetch", "external_directory"] {
            assert_eq!(read_only[tool], "deny", "{read_only}");
        }
        let (workspace, auto) = rules(Policy::WorkspaceWrite);
        assert!(!auto);
        assert_eq!(workspace.unwrap(), json!({ "external_directory": "deny" }));
        assert_eq!(rules(Policy::Full), (None, true));
        for sandbox in [Policy::ReadOnly, Policy::WorkspaceWrite] {
            let text = rules(sandbox).0.unwrap().to_string();
            assert!(!text.contains("ask"), "{text}");
        }
    }

    /// A call refused by a rule, or a request `run` mode rejected, is a denial naming its
    /// target; a tool that merely failed is not.
    #[test]
    fn refused_tool_calls_are_denials() {
        let line = |status: &str, error: &str| {
            json!({"type": "tool_use", "sessionID": "s", "part": {"type": "tool", "tool": "write",
                "callID": "c", "state": {"status": status, "input": {"filePath": "/var/tmp/x.txt",
                "content": "x"}, "error": error}}})
            .to_string()
        };
        let denied = |line: String| -> Vec<EngineEvent> {
            Opencode
                .parse_line(&line)
                .into_iter()
                .filter(|event| matches!(event, EngineEvent::Denied { .. }))
                .collect()
        };
        let rule = "The user has specified a rule which prevents you from using this specific \
                    tool call. Here are some of the relevant rules [...]";
        assert_eq!(
            denied(line("error", rule)),
            [EngineEvent::Denied {
                tool: "write".into(),
                target: Some("/var/tmp/x.txt".into()),
                reason: Some(rule.into()),
            }]
        );
        let rejected = "The user rejected permission to use this specific tool call.";
        assert_eq!(denied(line("error", rejected)).len(), 1);
        assert!(denied(line("error", "ENOENT: no such file")).is_empty());
        assert!(denied(line("completed", rule)).is_empty());
        // A tool the rules took away is answered as opencode's `invalid` tool, without the
        // call's arguments; a tool no rule takes away (a name the model made up) is not a
        // denial.
        let invalid = |tool: &str| {
            json!({"type": "tool_use", "part": {"type": "tool", "tool": "invalid",
                "state": {"status": "completed", "input": {"tool": tool, "error":
                format!("Model tried to call unavailable tool '{tool}'. Available tools: read")},
                "output": "The arguments provided to the tool are invalid"}}})
            .to_string()
        };
        assert_eq!(
            denied(invalid("write")),
            [EngineEvent::Denied {
                tool: "write".into(),
                target: None,
                reason: Some("write is not available under the session's sandbox".into()),
            }]
        );
        assert!(denied(invalid("teleport")).is_empty());
    }

    #[test]
    fn images_are_files_after_the_options() {
        let mut spec = spec("Inspect");
        spec.images = vec!["/tmp/screen.png".into()];
        assert_eq!(
            strings(Opencode.argv(&spec)),
            [
                "opencode",
                "run",
                "--format",
                "json",
                "--file",
                "/tmp/screen.png"
            ]
        );
    }

    #[test]
    fn resumed_session_with_model_and_images() {
        let mut spec = spec("second prompt");
        spec.thread_id = Some("ses_dd4e01c14ffevwLggtl2DM0ex0".into());
        spec.title = Some("not for a resumed session".into());
        spec.cwd = "/src/app".into();
        spec.model = Some("mock/mock-model".into());
        spec.reasoning_effort = Some("high".into());
        spec.images = vec!["/data/a.png".into(), "/data/b.jpg".into()];
        assert_eq!(
            strings(Opencode.argv(&spec)),
            [
                "opencode",
                "run",
                "--format",
                "json",
                "--model",
                "mock/mock-model",
                "--variant",
                "high",
                "--session",
                "ses_dd4e01c14ffevwLggtl2DM0ex0",
                "--dir",
                "/src/app",
                "--file",
                "/data/a.png",
                "--file",
                "/data/b.jpg",
            ]
        );
    }

    #[test]
    fn the_prompt_goes_on_stdin_as_written_whatever_the_sandbox() {
        for (sandbox, auto) in [
            (Policy::for_prompt(false, false, true), false),
            (Policy::for_prompt(true, true, false), false),
            (Policy::Full, true),
        ] {
            let mut spec = spec("-v please \"quoted words\"\nünï");
            spec.policy = sandbox;
            let mut argv = vec!["opencode", "run", "--format", "json"];
            if auto {
                argv.push("--auto");
            }
            assert_eq!(strings(Opencode.argv(&spec)), argv);
            assert_eq!(
                Opencode.stdin(&spec).as_deref(),
                Some("-v please \"quoted words\"\nünï")
            );
        }
    }

    // §2.3 and §2.4, verbatim.
    const SUCCESS: [&str; 3] = [
        r#"{"type":"step_start","timestamp":1796019842633,"sessionID":"ses_dd4e01c14ffevwLggtl2DM0ex0","part":{"id":"prt_22b1fee29001YV2t59VKcauO4W","messageID":"msg_22b1fe8bb001tgGj2pblH5jxvl","sessionID":"ses_dd4e01c14ffevwLggtl2DM0ex0","type":"step-start"}}"#,
        r#"{"type":"text","timestamp":1796019842634,"sessionID":"ses_dd4e01c14ffevwLggtl2DM0ex0","part":{"id":"prt_22b1fee2d001JSIz3YE7uDSBPq","messageID":"msg_22b1fe8bb001tgGj2pblH5jxvl","sessionID":"ses_dd4e01c14ffevwLggtl2DM0ex0","type":"text","text":"Hello from openai mock (call 2, 2 messages in request).","time":{"start":1796019842605,"end":1796019842609}}}"#,
        r#"{"type":"step_finish","timestamp":1796019842634,"sessionID":"ses_dd4e01c14ffevwLggtl2DM0ex0","part":{"id":"prt_22b1fee350010DGezCPTAcQVND","reason":"stop","messageID":"msg_22b1fe8bb001tgGj2pblH5jxvl","sessionID":"ses_dd4e01c14ffevwLggtl2DM0ex0","type":"step-finish","tokens":{"total":2452,"input":2439,"output":13,"reasoning":0,"cache":{"write":0,"read":0}},"cost":0}}"#,
    ];

    const RATE_LIMITED: &str = r#"{"type":"error","timestamp":1796019926507,"sessionID":"ses_dd4dfd16bffePpM1bJI6mByRZD","error":{"name":"APIError","data":{"message":"mock: Rate limit reached for requests","statusCode":429,"isRetryable":true,"responseHeaders":{"content-length":"129","content-type":"application/json","date":"Mon, 30 Nov 2026 06:25:26 GMT","server":"BaseHTTP/0.6 Python/3.11.7"},"responseBody":"{\"error\": {\"message\": \"mock: Rate limit reached for requests\", \"type\": \"requests\", \"param\": null, \"code\": \"rate_limit_exceeded\"}}","metadata":{"url":"http://127.0.0.1:34425/v1/chat/completions"}}}}"#;

    #[test]
    fn success() {
        let events: Vec<EngineEvent> = SUCCESS
            .iter()
            .flat_map(|line| Opencode.parse_line(line))
            .collect();
        assert_eq!(
            events,
            [
                EngineEvent::ThreadStarted {
                    thread_id: "ses_dd4e01c14ffevwLggtl2DM0ex0".into()
                },
                EngineEvent::Message {
                    text: "Hello from openai mock (call 2, 2 messages in request).".into()
                },
                EngineEvent::Usage {
                    usage: json!({"total": 2452, "input": 2439, "output": 13, "reasoning": 0,
                                  "cache": {"write": 0, "read": 0}})
                },
                EngineEvent::TurnCompleted,
            ]
        );
        assert_eq!(
            judge(&events, Some(0), None, &[], None),
            RunVerdict::Succeeded
        );
    }

    #[test]
    fn the_providers_retry_after_and_quota_are_read_from_the_error() {
        let line = |headers: &str, body: &str| {
            format!(
                r#"{{"type":"error","sessionID":"ses_1","error":{{"name":"APIError","data":{{"message":"slow down","statusCode":429,"isRetryable":true,"responseHeaders":{headers},"responseBody":{body}}}}}}}"#
            )
        };
        let failure = |line: String| match Opencode.parse_line(&line).pop() {
            Some(EngineEvent::TurnFailed {
                class,
                retry_after_ms,
                ..
            }) => (class, retry_after_ms),
            other => panic!("{other:?}"),
        };
        let rate_limit = Some(crate::engine::FailureClass::RateLimit);
        assert_eq!(
            failure(line(r#"{"retry-after-ms":"1500"}"#, r#""{}""#)),
            (rate_limit, Some(1500))
        );
        assert_eq!(
            failure(line(r#"{"retry-after":"30"}"#, r#""{}""#)),
            (rate_limit, Some(30_000))
        );
        assert_eq!(failure(line("{}", r#""{}""#)), (rate_limit, None));
        assert_eq!(
            failure(line(
                "{}",
                r#""{\"error\":{\"code\":\"insufficient_quota\"}}""#
            )),
            (Some(crate::engine::FailureClass::Other), None)
        );
    }

    #[test]
    fn a_rate_limit_fails_with_its_status() {
        let events = Opencode.parse_line(RATE_LIMITED);
        let message = "mock: Rate limit reached for requests (HTTP 429)";
        assert_eq!(
            events,
            [
                // A first call that fails prints no step_start: the session is named here.
                EngineEvent::ThreadStarted {
                    thread_id: "ses_dd4dfd16bffePpM1bJI6mByRZD".into()
                },
                EngineEvent::TurnFailed {
                    message: message.into(),
                    class: Some(crate::engine::FailureClass::RateLimit),
                    retry_after_ms: None
                }
            ]
        );
        assert_eq!(
            judge(&events, Some(1), None, &[], None),
            RunVerdict::Failed {
                message: message.into()
            }
        );
        assert_eq!(
            classify_failure(EngineKind::Opencode, None, &[message]),
            FailureClass::RateLimit
        );
    }

    #[test]
    fn an_error_after_a_finished_step_fails_the_run() {
        let mut events: Vec<EngineEvent> = SUCCESS
            .iter()
            .flat_map(|line| Opencode.parse_line(line))
            .collect();
        events.extend(Opencode.parse_line(
            r#"{"type":"error","sessionID":"s","error":{"name":"ProviderAuthError","data":{"message":"bad key"}}}"#,
        ));
        assert_eq!(
            judge(&events, Some(1), None, &[], None),
            RunVerdict::Failed {
                message: "bad key".into()
            }
        );
    }

    #[test]
    fn errors_of_other_shapes_still_fail() {
        for (line, message) in [
            (
                r#"{"type":"error","error":{"name":"MessageAbortedError"}}"#,
                "MessageAbortedError",
            ),
            (r#"{"type":"error"}"#, "opencode reported an error"),
            (
                r#"{"type":"error","error":{"name":"APIError","data":{"message":"boom","statusCode":"500"}}}"#,
                "boom",
            ),
        ] {
            assert_eq!(
                Opencode.parse_line(line),
                [EngineEvent::failed(message)],
                "{line}"
            );
        }
    }

    #[test]
    fn tools_and_intermediate_steps() {
        let part = json!({"id": "prt_1", "sessionID": "s", "type": "tool", "tool": "bash",
            "state": {"status": "completed", "input": {"command": "ls"}, "output": "a\n"}});
        let line = json!({"type": "tool_use", "sessionID": "s", "part": part}).to_string();
        assert_eq!(
            Opencode.parse_line(&line),
            [EngineEvent::Tool {
                name: "bash".into(),
                detail: part.clone()
            }]
        );
        // A step that ends in tool calls reports its tokens but does not end the turn.
        let step = r#"{"type":"step_finish","sessionID":"s","part":{"reason":"tool-calls","tokens":{"total":3}}}"#;
        assert_eq!(
            Opencode.parse_line(step),
            [EngineEvent::Usage {
                usage: json!({"total": 3})
            }]
        );
        let bare_stop = r#"{"type":"step_finish","part":{"reason":"stop"}}"#;
        assert_eq!(Opencode.parse_line(bare_stop), [EngineEvent::TurnCompleted]);
    }

    #[test]
    fn anything_else_is_raw() {
        for line in [
            "\u{1b}[91m\u{1b}[1mError: \u{1b}[0mSession not found",
            r#"{"type":"text""#,
            "[{}]",
            "true",
            "{}",
            r#"{"type":"session.created","sessionID":"s"}"#,
            r#"{"type":"step_start"}"#,
            r#"{"type":"text","part":{"type":"text"}}"#,
            r#"{"type":"tool_use"}"#,
            r#"{"type":"step_finish","part":7}"#,
        ] {
            assert_eq!(
                Opencode.parse_line(line),
                [EngineEvent::Raw { line: line.into() }],
                "{line}"
            );
        }
        assert_eq!(Opencode.parse_line(""), []);
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(line in ".*") {
            let _ = Opencode.parse_line(&line);
        }

        #[test]
        fn never_panics_on_any_json(
            kind in prop::sample::select(vec![
                "step_start", "text", "tool_use", "tool", "step_finish", "error",
            ]),
            value in any::<Option<i64>>().prop_map(|n| n.map_or(Value::Null, Value::from)),
        ) {
            for line in [
                json!({"type": kind, "sessionID": value, "part": {"text": value, "tool": value,
                       "reason": value, "tokens": value, "sessionID": value},
                       "error": {"name": value, "data": {"message": value, "statusCode": value}}}),
                json!({"type": kind, "part": value, "error": {"data": value}}),
            ] {
                let _ = Opencode.parse_line(&line.to_string());
            }
        }
    }
}
