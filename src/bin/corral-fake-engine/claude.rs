//! The claude form: print mode's `stream-json` lines, and under `--permission-prompt-tool
//! stdio` its control protocol.

use super::*;

/// The claude stream of one turn.
struct Claude {
    out: Out,
    session_id: String,
    model: String,
    started: Instant,
}

impl Claude {
    fn uuid() -> String {
        uuid::Uuid::new_v4().to_string()
    }

    /// A random 20-hex-digit suffix for message, request and tool ids.
    fn token() -> String {
        uuid::Uuid::new_v4().simple().to_string()[..20].to_string()
    }

    fn usage(input: u64, output: u64) -> J {
        obj! {
            "input_tokens" => input,
            "output_tokens" => output,
            "cache_creation_input_tokens" => 0u64,
            "cache_read_input_tokens" => 0u64,
        }
    }

    fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn init(&mut self, mode: &str) {
        let cwd = std::env::current_dir()
            .map(|dir| dir.to_string_lossy().into_owned())
            .unwrap_or_default();
        let line = obj! {
            "type" => "system",
            "subtype" => "init",
            "cwd" => cwd,
            "session_id" => &self.session_id,
            "tools" => arr!["Bash", "Edit", "Read", "Write"],
            "mcp_servers" => arr![],
            "model" => &self.model,
            "permissionMode" => mode,
            "slash_commands" => arr![],
            "apiKeySource" => "none",
            "claude_code_version" => CLAUDE_VERSION,
            "output_style" => "default",
            "agents" => arr![],
            "skills" => arr![],
            "plugins" => arr![],
            "uuid" => Self::uuid(),
            "fast_mode_state" => "off",
        };
        self.out.line(&line);
    }

    /// An `assistant` line with these content blocks.
    fn assistant(&self, content: J) -> J {
        obj! {
            "type" => "assistant",
            "message" => obj! {
                "id" => format!("msg_fake_{}", Self::token()),
                "type" => "message",
                "role" => "assistant",
                "model" => &self.model,
                "content" => content,
                "stop_reason" => J::null(),
                "stop_sequence" => J::null(),
                "usage" => Self::usage(100, 10),
                "context_management" => J::null(),
            },
            "parent_tool_use_id" => J::null(),
            "session_id" => &self.session_id,
            "uuid" => Self::uuid(),
            "request_id" => format!("req_fake_{}", Self::token()),
        }
    }

    fn text_line(&self, text: &str) -> J {
        self.assistant(arr![obj! {"type" => "text", "text" => text}])
    }

    /// A failed turn as claude reports API errors: a synthetic assistant line, then an error
    /// result (whose subtype is still `success`).
    fn fail(&mut self, message: &str, error: &str, status: Option<u64>) {
        let assistant = obj! {
            "type" => "assistant",
            "message" => obj! {
                "id" => Self::uuid(),
                "container" => J::null(),
                "model" => "<synthetic>",
                "role" => "assistant",
                "stop_details" => J::null(),
                "stop_reason" => "stop_sequence",
                "stop_sequence" => "",
                "type" => "message",
                "usage" => Self::usage(0, 0),
                "content" => arr![obj! {"type" => "text", "text" => message}],
                "context_management" => J::null(),
            },
            "parent_tool_use_id" => J::null(),
            "session_id" => &self.session_id,
            "uuid" => Self::uuid(),
            "error" => error,
            "request_id" => format!("req_fake_{}", Self::token()),
        };
        self.out.line(&assistant);
        let result = obj! {
            "type" => "result",
            "subtype" => "success",
            "is_error" => true,
            "api_error_status" => status,
            "duration_ms" => self.elapsed_ms(),
            "duration_api_ms" => 0u64,
            "num_turns" => 1u64,
            "result" => message,
            "stop_reason" => "stop_sequence",
            "session_id" => &self.session_id,
            "total_cost_usd" => 0u64,
            "usage" => Self::usage(0, 0),
            "modelUsage" => obj! {},
            "permission_denials" => arr![],
            "terminal_reason" => "completed",
            "fast_mode_state" => "off",
            "uuid" => Self::uuid(),
        };
        self.out.line(&result);
    }

    fn tool(&mut self, command: &str) {
        let id = format!("toolu_fake_{}", Self::token());
        let call = self.assistant(arr![obj! {
            "type" => "tool_use",
            "id" => &id,
            "name" => "Bash",
            "input" => obj! {"command" => command, "description" => "Run a command"},
        }]);
        self.out.line(&call);
        let (output, code) = run_command(command, None, &[]);
        let result = self.tool_result(&id, &output, code != 0, None);
        self.out.line(&result);
    }

    /// The `user` line carrying a tool's result (with when it ran, for the asking form).
    fn tool_result(&self, id: &str, content: &str, is_error: bool, ran_at: Option<u64>) -> J {
        let block = match ran_at {
            Some(ran_at) => obj! {
                "tool_use_id" => id,
                "type" => "tool_result",
                "content" => content,
                "is_error" => is_error,
                "fake_ran_at_us" => ran_at,
            },
            None => obj! {
                "tool_use_id" => id,
                "type" => "tool_result",
                "content" => content,
                "is_error" => is_error,
            },
        };
        obj! {
            "type" => "user",
            "message" => obj! { "role" => "user", "content" => arr![block] },
            "parent_tool_use_id" => J::null(),
            "session_id" => &self.session_id,
            "uuid" => Self::uuid(),
        }
    }

    /// A `control_request` of `subtype` with `fields`, then stdin read up to its
    /// `control_response`: the response (`None`: stdin ended first).
    fn control(&mut self, subtype: &str, fields: serde_json::Value) -> Option<serde_json::Value> {
        let request_id = format!("req_fake_{}", Self::token());
        let mut request = fields;
        request["subtype"] = subtype.into();
        let line = obj! {
            "type" => "control_request",
            "request_id" => &request_id,
            "request" => &request,
        };
        self.out.line(&line);
        while let Some(line) = stdin_line() {
            let Ok(answer) = serde_json::from_str::<serde_json::Value>(line.trim_end()) else {
                eprintln!("fake-engine: stdin line is not JSON: {}", line.trim_end());
                continue;
            };
            let response = &answer["response"];
            if answer["type"] == "control_response" && response["request_id"] == request_id.as_str()
            {
                return Some(response.clone());
            }
            eprintln!("fake-engine: unexpected stdin line: {}", line.trim_end());
        }
        None
    }

    /// The model calls `tool` on `target`, asking first when `converses`. Returns the
    /// target when the call was refused.
    fn asked_tool(&mut self, tool: &str, target: &str, converses: bool) -> Option<String> {
        use serde_json::json;
        let id = format!("toolu_fake_{}", Self::token());
        let mut input = match tool {
            "Bash" => json!({ "command": target, "description": "Run a command" }),
            _ => json!({ "file_path": target, "content": "approved\n" }),
        };
        // When it asked, for `examples/approval_bench.rs` (microseconds since the epoch).
        if converses {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            input["fake_asked_at_us"] = (now.as_micros() as u64).into();
        }
        let call = self.assistant(arr![obj! {
            "type" => "tool_use",
            "id" => &id,
            "name" => tool,
            "input" => &input,
        }]);
        self.out.line(&call);
        let answer = if converses {
            self.control(
                "can_use_tool",
                json!({
                    "tool_name": tool,
                    "input": input,
                    "tool_use_id": id,
                    "decision_reason": "fake engine asks",
                }),
            )
        } else {
            None
        };
        let inner = answer.as_ref().map(|response| &response["response"]);
        let allowed = inner.is_some_and(|inner| inner["behavior"] == "allow");
        let (content, is_error) = if allowed {
            let given = &inner.expect("allowed")["updatedInput"];
            let input = if given.is_object() { given } else { &input };
            match tool {
                "Bash" => {
                    let command = input["command"].as_str().unwrap_or_default();
                    let (output, code) = run_command(command, None, &[]);
                    (output, code != 0)
                }
                _ => {
                    let path = input["file_path"].as_str().unwrap_or_default();
                    let content = input["content"].as_str().unwrap_or_default();
                    match std::fs::write(path, content) {
                        Ok(()) => (format!("File created successfully at: {path}"), false),
                        Err(error) => (format!("{path}: {error}"), true),
                    }
                }
            }
        } else {
            let message = inner.and_then(|inner| inner["message"].as_str()).unwrap_or(
                "Claude requested permissions to use this tool, but you haven't granted it yet.",
            );
            (message.to_string(), true)
        };
        // When the tool ran, for `examples/approval_bench.rs` (microseconds since the epoch).
        let ran_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        let result = self.tool_result(&id, &content, is_error, Some(ran_at));
        self.out.line(&result);
        (!allowed).then(|| target.to_string())
    }

    fn result(&self, answer: &str, denials: &[(String, String)]) -> J {
        let elapsed = self.elapsed_ms();
        let denials = J::list(denials.iter().map(|(tool, target)| {
            obj! {
                "tool_name" => tool,
                "tool_use_id" => format!("toolu_fake_{}", Self::uuid()),
                "tool_input" => obj! { "file_path" => target },
            }
        }));
        obj! {
            "type" => "result",
            "subtype" => "success",
            "is_error" => false,
            "api_error_status" => J::null(),
            "duration_ms" => elapsed,
            "duration_api_ms" => elapsed,
            "num_turns" => 1u64,
            "result" => answer,
            "stop_reason" => "end_turn",
            "session_id" => &self.session_id,
            "total_cost_usd" => 0u64,
            "usage" => Self::usage(100, 10),
            "modelUsage" => obj! {},
            "permission_denials" => denials,
            "terminal_reason" => "completed",
            "fast_mode_state" => "off",
            "uuid" => Self::uuid(),
        }
    }
}

pub(crate) fn claude(
    script: &Script,
    prompt: &str,
    resume: Option<&str>,
    model: Option<&str>,
    permission_mode: &str,
    converses: bool,
    attempt: u64,
) -> ! {
    let mut claude = Claude {
        out: Out {
            stdout: std::io::stdout(),
        },
        session_id: resume.map_or_else(Claude::uuid, str::to_string),
        model: model.unwrap_or("fake-model").to_string(),
        started: Instant::now(),
    };
    claude.init(permission_mode);
    spawn_background(script);
    sleep_ms(script.delay_ms);
    if attempt <= script.rate_limit {
        claude.fail(CLAUDE_RATE_LIMIT, "rate_limit", Some(429));
        exit(script, 1);
    }
    if let Some(message) = &script.fail {
        claude.fail(message, "unknown", None);
        exit(script, 1);
    }
    if let Some(command) = &script.run {
        claude.tool(command);
    }
    if script.unknown_control && converses {
        claude.control("fake_unknown", serde_json::json!({}));
    }
    let mut denials = script.denials.clone();
    for (tool, target) in &script.asks {
        if let Some(refused) = claude.asked_tool(tool, target, converses) {
            denials.push((tool.clone(), refused));
        }
    }
    for step in 1..=script.deltas {
        let line = claude.text_line(&format!("step {step}"));
        claude.out.line(&line);
        sleep_ms(script.interval_ms);
    }
    if script.garbage {
        claude.out.garbage();
    }
    if script.hang {
        sleep_forever();
    }
    let answer = answer_text(script, prompt);
    let line = claude.text_line(&answer);
    if script.crash {
        claude.out.crash(&line);
    }
    claude.out.line(&line);
    let result = claude.result(&answer, &denials);
    claude.out.last_line(&result, script.partial);
    // As claude with stream-json input: the process ends when its stdin does.
    if converses {
        while stdin_line().is_some() {}
    }
    exit(script, 0)
}
