//! The `claude` engine: Anthropic's Claude Code CLI in print mode with streamed JSON output.
//!
//! The argv (measured against Claude Code 2.1.197; `tests/it/real_engines.rs` keeps it true):
//!
//! ```text
//! claude -p --verbose --output-format stream-json [--model M] [--effort E]
//!        [--resume ID [--resume-session-at UUID]]
//!        (--permission-mode default|acceptEdits | --dangerously-skip-permissions) < PROMPT
//! ```
//!
//! - The prompt is written to stdin, which is then closed: claude reads it byte for byte there,
//!   while a positional `-v please` would be its `--version` (exit 0, no answer) and one argv
//!   string cannot exceed 128 KiB.
//! - `--resume-session-at UUID` (a hidden flag the Agent SDK uses) continues the session from
//!   its message UUID, leaving later messages out: a retry after a failed turn continues from
//!   the last assistant message of the last turn that succeeded, so the model sees the prompt
//!   once ([`EngineEvent::ResumePoint`] is each assistant line's `uuid`).
//! - `--verbose` is required: `-p` with `stream-json` refuses to run without it.
//! - The sandbox is claude's permission mode ([`permission_flags`]): read-only keeps claude's
//!   `default` mode, in which print mode refuses every write; workspace-write is `acceptEdits`
//!   (edits inside the working directory); `--dangerously-skip-permissions` only with
//!   [`Policy::Full`]. What claude refused is listed in its `result` line
//!   (`permission_denials`) and becomes [`EngineEvent::Denied`].
//! - Claude has no image flag: each image is referenced from the prompt text itself, appended as
//!   `@/path/to/img.png`, one per line after the prompt text (claude reads `@path` references as
//!   files to attach). The path is kept as the OS gave it, not re-encoded.
//! - The session's reasoning effort is `--effort E` (`low`, `medium`, `high`, `xhigh`, `max`).
//!
//! - `CLAUDE_CODE_MAX_RETRIES` is [`MAX_RETRIES`] unless set in corral's environment: claude
//!   retries an API error 10 times by default (up to 32 s apart), and corral's retry policy
//!   comes after that, so each corral retry would stack a minute of claude's own on top.
//!   A couple of quick ones ride over a blip; longer waits are corral's (`retry.*` settings).
//!
//! The output is one JSON object per line ([`Claude::parse_line`]): `system/init` (the session
//! id), `assistant` and `user` messages, and a final `result`. The `result`'s `is_error` decides
//! the turn, not its `subtype`: an API error (429, 529, 500, a timeout) is `"subtype":"success"`
//! with `"is_error":true`. A failed result's message gets ` (HTTP <status>)` appended when claude
//! reports an `api_error_status`, so the retry classifier sees `429` whatever the text says.

use std::ffi::OsString;

use serde_json::{Map, Value};

use super::{
    non_empty, raw, str_field, Engine, EngineEvent, EngineKind, FailureClass, Policy, Reply,
    RunSpec,
};

/// The `claude` adapter.
pub struct Claude;

/// The retries claude makes of its own before it reports an API error (its default: 10).
pub const MAX_RETRIES: &str = "2";

/// claude's flags for a sandbox (measured on 2.1.197 in print mode, docs/permissions.md):
/// - read-only: `default`, in which print mode refuses every write and every command that is
///   not read-only (each refusal listed in `permission_denials`, so reported);
/// - workspace-write: `acceptEdits`, which allows edits inside the working directory and the
///   file commands claude recognises there (`touch`, `mkdir`, `rm`, a redirect), and still
///   refuses writes outside it and other commands (reported);
/// - full access: `--dangerously-skip-permissions` (as root claude also wants `IS_SANDBOX=1`).
/// - ask: what workspace-write allows, and whatever claude would refuse there is asked of
///   corral instead (`--permission-prompt-tool stdio`: a `control_request` `can_use_tool`
///   on stdout, answered by a `control_response` on stdin, which then takes stream-json
///   input and stays open for the turn).
pub fn permission_flags(policy: Policy) -> &'static [&'static str] {
    match policy {
        Policy::ReadOnly => &["--permission-mode", "default"],
        Policy::WorkspaceWrite => &["--permission-mode", "acceptEdits"],
        Policy::Ask => &[
            "--permission-mode",
            "acceptEdits",
            "--input-format",
            "stream-json",
            "--permission-prompt-tool",
            "stdio",
        ],
        Policy::Full => &["--dangerously-skip-permissions"],
    }
}

impl Engine for Claude {
    fn kind(&self) -> EngineKind {
        EngineKind::Claude
    }

    fn env(&self) -> Vec<(&'static str, &'static str)> {
        vec![("CLAUDE_CODE_MAX_RETRIES", MAX_RETRIES)]
    }

    fn final_line(&self) -> Option<&'static str> {
        Some("its final `result` line")
    }

    fn argv(&self, spec: &RunSpec) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![spec.program.clone().into_os_string()];
        argv.extend(["-p", "--verbose", "--output-format", "stream-json"].map(OsString::from));
        if let Some(model) = non_empty(&spec.model) {
            argv.push("--model".into());
            argv.push(model.into());
        }
        // The request then carries `output_config.effort` (claude's own default: high).
        if let Some(effort) = non_empty(&spec.reasoning_effort) {
            argv.push("--effort".into());
            argv.push(effort.into());
        }
        if let Some(session_id) = non_empty(&spec.thread_id) {
            argv.push("--resume".into());
            argv.push(session_id.into());
            if let Some(point) = non_empty(&spec.resume_at) {
                argv.push("--resume-session-at".into());
                argv.push(point.into());
            }
        }
        argv.extend(permission_flags(spec.policy).iter().map(OsString::from));
        argv
    }

    /// The prompt goes on stdin, byte for byte: a positional starting with `-` is read as
    /// claude's own flags (`-v please` prints the version and exits 0), and one argv string
    /// cannot hold more than 128 KiB.
    ///
    /// Under `ask` stdin carries stream-json instead: the prompt is the first user message
    /// (its text still byte for byte, inside a JSON string), and the line stays open for the
    /// answers ([`Claude::reply`]).
    fn stdin(&self, spec: &RunSpec) -> Option<String> {
        let mut prompt = spec.prompt.clone();
        for image in &spec.images {
            prompt.push_str("\n@");
            prompt.push_str(&image.to_string_lossy());
        }
        if self.converses(spec) {
            let message = serde_json::json!({
                "type": "user",
                "message": { "role": "user", "content": prompt },
            });
            return Some(format!("{message}\n"));
        }
        Some(prompt)
    }

    fn converses(&self, spec: &RunSpec) -> bool {
        spec.policy == Policy::Ask
    }

    /// A `control_response` for the request: `allow` with the tool's input as asked, `deny`
    /// with the words the model is told, or an error for a request corral does not handle.
    fn reply(&self, request_id: &str, reply: Reply<'_>) -> Option<String> {
        let response = match reply {
            Reply::Allow { input } => serde_json::json!({
                "subtype": "success",
                "request_id": request_id,
                "response": { "behavior": "allow", "updatedInput": input },
            }),
            Reply::Deny { message } => serde_json::json!({
                "subtype": "success",
                "request_id": request_id,
                "response": { "behavior": "deny", "message": message },
            }),
            Reply::Unsupported { message } => serde_json::json!({
                "subtype": "error",
                "request_id": request_id,
                "error": message,
            }),
        };
        Some(serde_json::json!({ "type": "control_response", "response": response }).to_string())
    }

    fn parse_line(&self, line: &str) -> Vec<EngineEvent> {
        if line.trim().is_empty() {
            return Vec::new();
        }
        let Ok(Value::Object(object)) = serde_json::from_str::<Value>(line) else {
            return raw(line);
        };
        let events = match str_field(&object, "type") {
            Some("system") => system(&object),
            // An API error comes as a synthetic assistant message (`"error": "rate_limit"`,
            // model `<synthetic>`): the failure's words, not the agent's.
            Some("assistant") if object.get("error").is_some_and(|e| !e.is_null()) => {
                Some(vec![EngineEvent::Notice {
                    message: content_blocks(&object)
                        .map(assistant_blocks)
                        .into_iter()
                        .flatten()
                        .filter_map(|event| match event {
                            EngineEvent::Message { text } => Some(text),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                }])
            }
            Some("assistant") => content_blocks(&object).map(|blocks| {
                let mut events = assistant_blocks(blocks);
                if let Some(id) = str_field(&object, "uuid") {
                    events.push(EngineEvent::ResumePoint { id: id.to_string() });
                }
                events
            }),
            Some("user") => Some(user_blocks(&object)),
            Some("result") => Some(result(&object)),
            Some("control_request") => Some(control_request(&object)),
            // Answers to requests corral never makes, and a request claude takes back (the
            // worker's answer to it is then ignored by claude).
            Some("control_response") | Some("control_cancel_request") => Some(Vec::new()),
            Some("stream_event") => object.get("event").and_then(stream_event),
            _ => None,
        };
        events.unwrap_or_else(|| raw(line))
    }
}

/// `system` lines: `init` names the session; `api_retry` announces a retry of the API call.
/// Other subtypes (`status`…) are kept raw.
fn system(object: &Map<String, Value>) -> Option<Vec<EngineEvent>> {
    match str_field(object, "subtype")? {
        "init" => Some(vec![EngineEvent::ThreadStarted {
            thread_id: str_field(object, "session_id")?.to_string(),
        }]),
        "api_retry" => {
            let mut message = String::from("API retry");
            if let Some(attempt) = object.get("attempt").and_then(Value::as_u64) {
                message.push_str(&format!(" {attempt}"));
                if let Some(max) = object.get("max_retries").and_then(Value::as_u64) {
                    message.push_str(&format!("/{max}"));
                }
            }
            if let Some(error) = str_field(object, "error") {
                message.push_str(&format!(": {error}"));
            }
            if let Some(status) = object.get("error_status").and_then(Value::as_u64) {
                message.push_str(&format!(" (HTTP {status})"));
            }
            Some(vec![EngineEvent::Notice { message }])
        }
        _ => None,
    }
}

/// The `message.content` blocks of an `assistant` or `user` line.
fn content_blocks(object: &Map<String, Value>) -> Option<&[Value]> {
    object
        .get("message")?
        .get("content")?
        .as_array()
        .map(Vec::as_slice)
}

/// The assistant's text blocks are messages and its `tool_use` blocks tool calls; thinking and
/// other blocks say nothing the supervisor uses.
fn assistant_blocks(blocks: &[Value]) -> Vec<EngineEvent> {
    blocks
        .iter()
        .filter_map(|block| match block.get("type").and_then(Value::as_str)? {
            "text" => Some(EngineEvent::Message {
                text: block.get("text")?.as_str()?.to_string(),
            }),
            "tool_use" => Some(EngineEvent::Tool {
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("tool_use")
                    .to_string(),
                detail: block.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// A `user` line carries the results of the agent's tool calls (its content may also be the
/// prompt as plain text, which says nothing new).
fn user_blocks(object: &Map<String, Value>) -> Vec<EngineEvent> {
    content_blocks(object)
        .into_iter()
        .flatten()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|block| EngineEvent::Tool {
            name: "tool_result".to_string(),
            detail: block.clone(),
        })
        .collect()
}

/// A `control_request` (under `ask`): `can_use_tool` asks a person before a tool use; any
/// other request is answered at once as one corral does not handle, and one without an id
/// cannot be answered at all (kept raw, and claude's own turn decides).
fn control_request(object: &Map<String, Value>) -> Vec<EngineEvent> {
    let Some(request_id) = str_field(object, "request_id") else {
        return vec![EngineEvent::Notice {
            message: "claude sent a control request without an id: it cannot be answered".into(),
        }];
    };
    let request = object.get("request").and_then(Value::as_object);
    let subtype = request.and_then(|request| str_field(request, "subtype"));
    let tool = request.and_then(|request| str_field(request, "tool_name"));
    match (subtype, tool, request) {
        (Some("can_use_tool"), Some(tool), Some(request)) => {
            let input = request.get("input").cloned().unwrap_or(Value::Null);
            let reason = ["decision_reason", "description", "title"]
                .iter()
                .find_map(|key| str_field(request, key))
                .map(str::to_string);
            vec![EngineEvent::Asks {
                request_id: request_id.to_string(),
                tool: tool.to_string(),
                target: str_field(request, "blocked_path")
                    .map(str::to_string)
                    .or_else(|| tool_target(&input)),
                reason,
                input,
            }]
        }
        _ => vec![EngineEvent::AsksUnknown {
            request_id: request_id.to_string(),
            what: subtype.unwrap_or("(no subtype)").to_string(),
        }],
    }
}

/// The final `result` line.
fn result(object: &Map<String, Value>) -> Vec<EngineEvent> {
    let subtype = str_field(object, "subtype");
    // `is_error` decides; only if it is missing does the subtype stand in for it.
    let is_error = object
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(subtype != Some("success"));
    let mut events = denials(object);
    if is_error {
        let status = object.get("api_error_status").and_then(Value::as_u64);
        events.push(EngineEvent::TurnFailed {
            message: failure_message(object, subtype),
            class: status.and_then(FailureClass::from_http_status),
            retry_after_ms: None,
        });
        return events;
    }
    // The session id again: a resumed session keeps its id, so this repeats the init's.
    if let Some(session_id) = str_field(object, "session_id") {
        events.push(EngineEvent::ThreadStarted {
            thread_id: session_id.to_string(),
        });
    }
    if let Some(usage) = object.get("usage").filter(|usage| !usage.is_null()) {
        events.push(EngineEvent::Usage {
            usage: usage.clone(),
        });
    }
    events.push(EngineEvent::TurnCompleted);
    events
}

/// The tool uses claude refused in the turn, as its `result` line lists them
/// (`permission_denials`: `tool_name`, `tool_use_id`, `tool_input`): the model was told "you
/// haven't granted it yet" and went on, so without these the turn reads as a plain success.
fn denials(object: &Map<String, Value>) -> Vec<EngineEvent> {
    object
        .get("permission_denials")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|denial| EngineEvent::Denied {
            tool: denial
                .get("tool_name")
                .and_then(Value::as_str)
                .unwrap_or("tool")
                .to_string(),
            target: denial.get("tool_input").and_then(tool_target),
            reason: None,
        })
        .collect()
}

/// What a claude tool call would touch: its path, command, URL or pattern.
pub fn tool_target(input: &Value) -> Option<String> {
    [
        "file_path",
        "notebook_path",
        "path",
        "command",
        "url",
        "pattern",
    ]
    .iter()
    .find_map(|key| input.get(key).and_then(Value::as_str))
    .map(str::to_string)
}

/// The words of a failed result: its `result` text, else its `errors`, else its subtype.
fn failure_message(object: &Map<String, Value>, subtype: Option<&str>) -> String {
    let errors: Vec<&str> = object
        .get("errors")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut message = match str_field(object, "result").filter(|text| !text.trim().is_empty()) {
        Some(text) => text.to_string(),
        None if !errors.is_empty() => errors.join("; "),
        None => format!(
            "claude reported an error ({})",
            subtype.unwrap_or("no subtype")
        ),
    };
    if let Some(status) = object.get("api_error_status").and_then(Value::as_u64) {
        message.push_str(&format!(" (HTTP {status})"));
    }
    message
}

/// `stream_event` lines (with `--include-partial-messages`) wrap the raw API stream; only text
/// deltas matter, the complete message follows as an `assistant` line anyway.
fn stream_event(event: &Value) -> Option<Vec<EngineEvent>> {
    let event = event.as_object()?;
    if str_field(event, "type")? != "content_block_delta" {
        return Some(Vec::new());
    }
    let delta = event.get("delta")?;
    if delta.get("type").and_then(Value::as_str) != Some("text_delta") {
        return Some(Vec::new());
    }
    Some(vec![EngineEvent::MessageDelta {
        text: delta.get("text")?.as_str()?.to_string(),
    }])
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
            program: PathBuf::from("claude"),
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

    /// The reference elides parts of some lines as `{...}`, `[...]` or `,...}`; these become
    /// empty values so the lines parse, everything else stays verbatim.
    fn unelide(line: &str) -> String {
        line.replace("{...}", "{}")
            .replace("[...]", "[]")
            .replace(",...}", "}")
    }

    fn parse(lines: &[&str]) -> Vec<EngineEvent> {
        lines
            .iter()
            .flat_map(|line| Claude.parse_line(&unelide(line)))
            .collect()
    }

    /// Each refusal in the `result` line is a `Denied` event with what it would have
    /// touched, before the turn's end: the turn succeeded, but not everything was done.
    #[test]
    fn permission_denials_are_told_before_the_turn_ends() {
        let line = r#"{"type":"result","subtype":"success","is_error":false,"result":"I could not write it.","session_id":"s-1","permission_denials":[{"tool_name":"Write","tool_use_id":"toolu_1","tool_input":{"file_path":"/tmp/x/notes.txt","content":"hi"}},{"tool_name":"Bash","tool_use_id":"toolu_2","tool_input":{"command":"touch made","description":"make"}},{"tool_name":"Mystery","tool_use_id":"toolu_3","tool_input":{}}]}"#;
        let events = Claude.parse_line(line);
        let denied: Vec<(String, Option<String>)> = events
            .iter()
            .filter_map(|event| match event {
                EngineEvent::Denied { tool, target, .. } => Some((tool.clone(), target.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            denied,
            [
                ("Write".to_string(), Some("/tmp/x/notes.txt".to_string())),
                ("Bash".to_string(), Some("touch made".to_string())),
                ("Mystery".to_string(), None),
            ]
        );
        assert_eq!(events.last(), Some(&EngineEvent::TurnCompleted));
        // A failed turn tells its refusals too.
        let failed = line.replace(r#""is_error":false"#, r#""is_error":true"#);
        let events = Claude.parse_line(&failed);
        assert_eq!(events.len(), 4, "{events:?}");
        assert!(matches!(events[3], EngineEvent::TurnFailed { .. }));
    }

    #[test]
    fn new_session() {
        assert_eq!(
            strings(Claude.argv(&spec("say hi"))),
            [
                "claude",
                "-p",
                "--verbose",
                "--output-format",
                "stream-json",
                "--permission-mode",
                "acceptEdits",
            ]
        );
        let mut read_only = spec("look");
        read_only.policy = Policy::ReadOnly;
        let argv = strings(Claude.argv(&read_only));
        assert_eq!(argv[argv.len() - 2..], ["--permission-mode", "default"]);
        // Whatever it starts with: `-v please` as a positional would be claude's --version.
        for prompt in ["say hi", "-v please", "a \"b\"\nünï"] {
            assert_eq!(Claude.stdin(&spec(prompt)).as_deref(), Some(prompt));
        }
    }

    #[test]
    fn resumed_session_with_model_and_full_access() {
        let mut spec = spec("Build");
        spec.thread_id = Some("session-1".into());
        spec.model = Some("sonnet".into());
        spec.reasoning_effort = Some("high".into());
        spec.policy = Policy::Full;
        assert_eq!(
            strings(Claude.argv(&spec)),
            [
                "claude",
                "-p",
                "--verbose",
                "--output-format",
                "stream-json",
                "--model",
                "sonnet",
                "--effort",
                "high",
                "--resume",
                "session-1",
                "--dangerously-skip-permissions",
            ]
        );
        // A retry continues from the last good message.
        spec.resume_at = Some("0d97c49c".into());
        let argv = strings(Claude.argv(&spec));
        assert_eq!(
            argv[9..13],
            ["--resume", "session-1", "--resume-session-at", "0d97c49c"]
        );
    }

    #[test]
    fn read_only_and_remote_never_skip_permissions() {
        for (sandbox, mode) in [
            (Policy::for_prompt(false, false, true), "default"),
            (Policy::for_prompt(true, true, false), "default"),
            (Policy::WorkspaceWrite, "acceptEdits"),
        ] {
            let mut spec = spec("Answer only");
            spec.policy = sandbox;
            assert_eq!(
                strings(Claude.argv(&spec)),
                [
                    "claude",
                    "-p",
                    "--verbose",
                    "--output-format",
                    "stream-json",
                    "--permission-mode",
                    mode,
                ],
                "{sandbox:?}"
            );
        }
    }

    #[test]
    fn images_are_referenced_from_the_prompt() {
        let mut spec = spec("Inspect these");
        spec.images = vec!["/data/a.png".into(), "/data/b c.jpg".into()];
        assert_eq!(Claude.argv(&spec).len(), 7);
        assert_eq!(
            Claude.stdin(&spec).as_deref(),
            Some("Inspect these\n@/data/a.png\n@/data/b c.jpg")
        );
    }

    // §1.3, verbatim (elisions aside).
    const SUCCESS: [&str; 3] = [
        r#"{"type":"system","subtype":"init","cwd":"work","session_id":"ef3fc258-f353-4258-9be7-7769c52e6396","tools":["Task","Bash","CronCreate","CronDelete","CronList","Edit","EnterWorktree","ExitWorktree","NotebookEdit","Read","ReportFindings","ScheduleWakeup","SendMessage","Skill","TaskCreate","TaskGet","TaskList","TaskOutput","TaskStop","TaskUpdate","WebFetch","WebSearch","Workflow","Write"],"mcp_servers":[],"model":"claude-opus-4-8[1m]","permissionMode":"default","slash_commands":[...],"apiKeySource":"ANTHROPIC_API_KEY","claude_code_version":"2.1.197","output_style":"default","agents":["claude","Explore","general-purpose","Plan","statusline-setup"],"skills":[...],"plugins":[],"analytics_disabled":true,"product_feedback_disabled":true,"uuid":"451043a4-20b4-4089-9c96-50c95b7fb62a","memory_paths":{"auto":"home/.claude/projects/-tmp-claude-probe-work/memory/"},"fast_mode_state":"off"}"#,
        r#"{"type":"assistant","message":{"id":"msg_mock_0cf0e459716a47fa92e6","type":"message","role":"assistant","model":"claude-opus-4-8","content":[{"type":"text","text":"Hello from mock (call 2, 2 messages in request)."}],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1667,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0},"context_management":null},"parent_tool_use_id":null,"session_id":"ef3fc258-f353-4258-9be7-7769c52e6396","uuid":"0d97c49c-07c9-4a1c-bae0-d2621d874a8e","request_id":"req_mock_db26cb3355ee458d"}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"duration_ms":120,"duration_api_ms":27,"ttft_ms":115,"ttft_stream_ms":109,"time_to_request_ms":96,"num_turns":1,"result":"Hello from mock (call 2, 2 messages in request).","stop_reason":"end_turn","session_id":"ef3fc258-f353-4258-9be7-7769c52e6396","total_cost_usd":0.008635,"usage":{...},"modelUsage":{"claude-opus-4-8[1m]":{...}},"permission_denials":[],"terminal_reason":"completed","fast_mode_state":"off","uuid":"39107a78-358f-4355-8dc2-f0ffce93c8db"}"#,
    ];

    // §1.4, verbatim (elisions aside).
    const RATE_LIMITED: [&str; 4] = [
        r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":2,"retry_delay_ms":514.3904643213388,"error_status":429,"error":"rate_limit","session_id":"69da34e0-2d2a-4890-95b6-531e625fa1b6","uuid":"74a0fd8c-7dcb-4090-94fa-41fa6836f940"}"#,
        r#"{"type":"system","subtype":"api_retry","attempt":2,"max_retries":2,"retry_delay_ms":1048.3207152040259,"error_status":429,"error":"rate_limit","session_id":"69da34e0-2d2a-4890-95b6-531e625fa1b6","uuid":"c1fb09cb-1262-4efc-8244-6f711423af9b"}"#,
        r#"{"type":"assistant","message":{"id":"5cd72857-865a-4da8-8d13-319d1726a4fa","container":null,"model":"<synthetic>","role":"assistant","stop_details":null,"stop_reason":"stop_sequence","stop_sequence":"","type":"message","usage":{"input_tokens":0,"output_tokens":0,...},"content":[{"type":"text","text":"API Error: Request rejected (429) · mock: Number of request tokens has exceeded your per-minute rate limit"}],"context_management":null},"parent_tool_use_id":null,"session_id":"69da34e0-2d2a-4890-95b6-531e625fa1b6","uuid":"9500dcf9-a245-469f-ade6-3e05b63d4eb3","error":"rate_limit","request_id":"req_mock_aaddf04c6a2143cf"}"#,
        r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"duration_ms":1671,"duration_api_ms":0,"num_turns":1,"result":"API Error: Request rejected (429) · mock: Number of request tokens has exceeded your per-minute rate limit","stop_reason":"stop_sequence","session_id":"69da34e0-2d2a-4890-95b6-531e625fa1b6","total_cost_usd":0,"usage":{...},"modelUsage":{},"permission_denials":[],"terminal_reason":"completed","fast_mode_state":"off","uuid":"60b898ac-576e-4a80-ab49-5ff8d3173a22"}"#,
    ];

    // §1.5, verbatim (elisions aside).
    const UNKNOWN_RESUME_ID: &str = r#"{"type":"result","subtype":"error_during_execution","duration_ms":0,"duration_api_ms":0,"is_error":true,"num_turns":0,"stop_reason":null,"session_id":"00000000-0000-4000-8000-000000000000","total_cost_usd":0,"usage":{...},"modelUsage":{},"permission_denials":[],"uuid":"4c78bdd6-5c5a-4e63-ba98-fcafe42a1504","errors":["No conversation found with session ID: 00000000-0000-4000-8000-000000000000"]}"#;

    #[test]
    fn the_reference_lines_parse_once_unelided() {
        for line in SUCCESS
            .iter()
            .chain(&RATE_LIMITED)
            .chain([&UNKNOWN_RESUME_ID])
        {
            assert!(
                serde_json::from_str::<Value>(&unelide(line)).is_ok(),
                "{line}"
            );
        }
    }

    #[test]
    fn success() {
        let session = "ef3fc258-f353-4258-9be7-7769c52e6396";
        let events = parse(&SUCCESS);
        assert_eq!(
            events,
            [
                EngineEvent::ThreadStarted {
                    thread_id: session.into()
                },
                EngineEvent::Message {
                    text: "Hello from mock (call 2, 2 messages in request).".into()
                },
                EngineEvent::ResumePoint {
                    id: "0d97c49c-07c9-4a1c-bae0-d2621d874a8e".into()
                },
                EngineEvent::ThreadStarted {
                    thread_id: session.into()
                },
                EngineEvent::Usage { usage: json!({}) },
                EngineEvent::TurnCompleted,
            ]
        );
        assert_eq!(
            judge(&events, Some(0), None, &[], None),
            RunVerdict::Succeeded
        );
    }

    #[test]
    fn a_rate_limit_is_a_failure_despite_its_success_subtype() {
        let events = parse(&RATE_LIMITED);
        let text = "API Error: Request rejected (429) · mock: Number of request tokens has \
                    exceeded your per-minute rate limit";
        let failure = format!("{text} (HTTP 429)");
        assert_eq!(
            events,
            [
                EngineEvent::Notice {
                    message: "API retry 1/2: rate_limit (HTTP 429)".into()
                },
                EngineEvent::Notice {
                    message: "API retry 2/2: rate_limit (HTTP 429)".into()
                },
                // The synthetic assistant line is the failure's words, not an answer.
                EngineEvent::Notice {
                    message: text.into()
                },
                EngineEvent::TurnFailed {
                    message: failure.clone(),
                    class: Some(FailureClass::RateLimit),
                    retry_after_ms: None
                },
            ]
        );
        assert_eq!(
            judge(&events, Some(1), None, &[], None),
            RunVerdict::Failed {
                message: failure.clone()
            }
        );
        assert_eq!(
            classify_failure(EngineKind::Claude, None, &[&failure]),
            FailureClass::RateLimit
        );
    }

    #[test]
    fn the_status_alone_makes_a_rate_limit() {
        // A 429 whose text does not say so is still classified as a rate limit.
        let line = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: try later"}"#;
        let events = Claude.parse_line(line);
        assert_eq!(
            events,
            [EngineEvent::TurnFailed {
                message: "API Error: try later (HTTP 429)".into(),
                class: Some(FailureClass::RateLimit),
                retry_after_ms: None
            }]
        );
        // A timeout has no status: nothing is appended.
        let timeout = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"result":"Request timed out"}"#;
        assert_eq!(
            Claude.parse_line(timeout),
            [EngineEvent::failed("Request timed out")]
        );
        assert_eq!(
            classify_failure(EngineKind::Claude, None, &["Request timed out"]),
            FailureClass::Other
        );
    }

    #[test]
    fn an_unknown_resume_id_fails_with_its_errors() {
        let events = parse(&[UNKNOWN_RESUME_ID]);
        let message = "No conversation found with session ID: 00000000-0000-4000-8000-000000000000";
        // No ThreadStarted: the id names no session.
        assert_eq!(events, [EngineEvent::failed(message)]);
        assert_eq!(
            judge(
                &events,
                Some(1),
                None,
                &[message.into()],
                Claude.final_line()
            ),
            RunVerdict::Failed {
                message: message.into()
            }
        );
        assert_eq!(
            classify_failure(EngineKind::Claude, Some("00000000"), &[message]),
            FailureClass::Other
        );
    }

    #[test]
    fn errors_are_joined_and_a_bare_failure_names_its_subtype() {
        let line = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":"","errors":["first","second"]}"#;
        assert_eq!(
            Claude.parse_line(line),
            [EngineEvent::failed("first; second")]
        );
        let bare = r#"{"type":"result","subtype":"error_max_turns"}"#;
        assert_eq!(
            Claude.parse_line(bare),
            [EngineEvent::failed(
                "claude reported an error (error_max_turns)"
            )]
        );
    }

    #[test]
    fn tool_calls_and_results() {
        let tool_use = json!({"type": "tool_use", "id": "toolu_1", "name": "Bash",
            "input": {"command": "ls"}});
        let assistant = json!({"type": "assistant", "message": {"role": "assistant",
            "content": [{"type": "thinking", "thinking": "hmm"},
                        {"type": "text", "text": "Listing."}, tool_use]}});
        assert_eq!(
            Claude.parse_line(&assistant.to_string()),
            [
                EngineEvent::Message {
                    text: "Listing.".into()
                },
                EngineEvent::Tool {
                    name: "Bash".into(),
                    detail: tool_use.clone()
                },
            ]
        );
        let tool_result = json!({"type": "tool_result", "tool_use_id": "toolu_1",
            "content": "Bash was blocked", "is_error": true});
        let user = json!({"type": "user", "message": {"role": "user",
            "content": [tool_result]}});
        assert_eq!(
            Claude.parse_line(&user.to_string()),
            [EngineEvent::Tool {
                name: "tool_result".into(),
                detail: tool_result.clone()
            }]
        );
        let prompt = json!({"type": "user", "message": {"role": "user", "content": "say hi"}});
        assert_eq!(Claude.parse_line(&prompt.to_string()), []);
    }

    #[test]
    fn text_deltas_stream() {
        let delta = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}},"session_id":"s"}"#;
        assert_eq!(
            Claude.parse_line(delta),
            [EngineEvent::MessageDelta { text: "Hel".into() }]
        );
        let start = r#"{"type":"stream_event","event":{"type":"message_start","message":{}}}"#;
        assert_eq!(Claude.parse_line(start), []);
        let json_delta = r#"{"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":"{"}}}"#;
        assert_eq!(Claude.parse_line(json_delta), []);
    }

    #[test]
    fn anything_else_is_raw() {
        for line in [
            "Error: When using --print, --output-format=stream-json requires --verbose",
            r#"{"type":"system","subtype":"init""#,
            "[]",
            "\"result\"",
            "3.5",
            "{}",
            r#"{"type":"system","subtype":"status","status":"requesting"}"#,
            r#"{"type":"system","subtype":"init"}"#,
            r#"{"type":"assistant"}"#,
            r#"{"type":"assistant","message":{"content":"text"}}"#,
            r#"{"type":"stream_event"}"#,
            r#"{"type":"rate_limit_event"}"#,
        ] {
            assert_eq!(
                Claude.parse_line(line),
                [EngineEvent::Raw { line: line.into() }],
                "{line}"
            );
        }
        assert_eq!(Claude.parse_line(""), []);
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(line in ".*") {
            let _ = Claude.parse_line(&line);
        }

        #[test]
        fn never_panics_on_any_json(
            kind in prop::sample::select(vec![
                "system", "assistant", "user", "result", "stream_event",
            ]),
            subtype in prop::sample::select(vec!["init", "api_retry", "success", "x"]),
            value in any::<Option<i64>>().prop_map(|n| n.map_or(Value::Null, Value::from)),
        ) {
            for line in [
                json!({"type": kind, "subtype": subtype, "session_id": value, "is_error": value,
                       "errors": [value], "api_error_status": value, "attempt": value,
                       "message": {"content": [{"type": "text", "text": value},
                                               {"type": "tool_use", "name": value}]},
                       "event": {"type": "content_block_delta", "delta": value}}),
                json!({"type": kind, "subtype": subtype, "message": value, "event": value}),
            ] {
                let _ = Claude.parse_line(&line.to_string());
            }
        }
    }
}
