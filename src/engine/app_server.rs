//! `codex app-server`: one long-lived child per project speaking JSON-RPC over stdio (as
//! measured on codex 0.171.0; `tests/it/real_codex.rs` keeps it true). The child itself is owned by the app-server actor
//! (`crate::actors::app_server`); this file holds what is engine knowledge rather than
//! process management: the argv, how notifications become normalized events, and how a
//! failed turn's `codexErrorInfo` maps to the retry policy's classes.

use std::ffi::OsString;

use serde_json::Value;

use super::{Engine, EngineEvent, EngineKind, FailureClass, Reply, RunSpec};

/// The adapter. Its `parse_line` is unused: the actor routes whole JSON-RPC messages.
pub struct AppServer;

impl Engine for AppServer {
    fn kind(&self) -> EngineKind {
        EngineKind::CodexAppServer
    }

    fn argv(&self, spec: &RunSpec) -> Vec<OsString> {
        vec![spec.program.clone().into_os_string(), "app-server".into()]
    }

    fn parse_line(&self, line: &str) -> Vec<EngineEvent> {
        vec![EngineEvent::Raw {
            line: line.to_string(),
        }]
    }

    /// The JSON-RPC response to the server's request `request_id` (its id as JSON text):
    /// `accept` or `decline` for an approval request (codex 0.171.0's
    /// `CommandExecutionApprovalDecision` / `FileChangeApprovalDecision`), an error for one
    /// corral does not handle.
    fn reply(&self, request_id: &str, reply: Reply<'_>) -> Option<String> {
        let id: Value = serde_json::from_str(request_id).ok()?;
        let answer = match reply {
            Reply::Allow { .. } => {
                serde_json::json!({ "id": id, "result": { "decision": "accept" } })
            }
            Reply::Deny { .. } => {
                serde_json::json!({ "id": id, "result": { "decision": "decline" } })
            }
            Reply::Unsupported { message } => serde_json::json!({
                "id": id,
                "error": { "code": -32601, "message": message },
            }),
        };
        Some(answer.to_string())
    }
}

/// What an approval request of the server asks, as corral stores it: the tool (the item's
/// kind), its target (the command; for a file change, the paths its `item/started` named,
/// `paths`) and the stated reason. `None`: not an approval request.
pub fn approval_request(
    request_id: &Value,
    method: &str,
    params: &Value,
    paths: Option<&str>,
) -> Option<EngineEvent> {
    let tool = match method {
        "item/commandExecution/requestApproval" => "commandExecution",
        "item/fileChange/requestApproval" => "fileChange",
        _ => return None,
    };
    let target = match tool {
        "commandExecution" => params["command"].as_str().map(str::to_string),
        _ => paths
            .map(str::to_string)
            .or_else(|| params["grantRoot"].as_str().map(str::to_string)),
    };
    Some(EngineEvent::Asks {
        request_id: request_id.to_string(),
        tool: tool.to_string(),
        target,
        reason: params["reason"].as_str().map(str::to_string),
        input: params.clone(),
    })
}

/// The paths a `fileChange` item's `item/started` names (its approval request names none).
pub fn file_change_paths(item: &Value) -> Option<String> {
    let paths: Vec<&str> = item["changes"]
        .as_array()?
        .iter()
        .filter_map(|change| change["path"].as_str())
        .collect();
    (!paths.is_empty()).then(|| paths.join(", "))
}

/// The events one server notification carries, for the session's event stream.
pub fn notification_events(method: &str, params: &Value) -> Vec<EngineEvent> {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    match method {
        "thread/started" => vec![EngineEvent::ThreadStarted {
            thread_id: text(&params["thread"]["id"]),
        }],
        "turn/started" => vec![EngineEvent::TurnStarted],
        "item/agentMessage/delta" => vec![EngineEvent::MessageDelta {
            text: text(&params["delta"]),
        }],
        "item/completed" => {
            let item = &params["item"];
            match item["type"].as_str() {
                Some("agentMessage") => vec![EngineEvent::Message {
                    text: text(&item["text"]),
                }],
                Some("userMessage") => vec![],
                Some(kind) => {
                    let mut events = vec![EngineEvent::Tool {
                        name: kind.to_string(),
                        detail: item.clone(),
                    }];
                    // A command or change that was not approved (a person's or codex's own
                    // decline): a refusal, told as claude's are.
                    if item["status"] == "declined" {
                        events.push(EngineEvent::Denied {
                            tool: kind.to_string(),
                            target: item["command"]
                                .as_str()
                                .map(str::to_string)
                                .or_else(|| file_change_paths(item)),
                            reason: Some("declined".into()),
                        });
                    }
                    events
                }
                None => vec![],
            }
        }
        "thread/tokenUsage/updated" => vec![EngineEvent::Usage {
            usage: params
                .get("tokenUsage")
                .cloned()
                .unwrap_or_else(|| params.clone()),
        }],
        "error" => vec![EngineEvent::Notice {
            message: text(&params["error"]["message"]),
        }],
        "turn/completed" => match params["turn"]["status"].as_str() {
            Some("completed") => vec![EngineEvent::TurnCompleted],
            Some("failed") => vec![EngineEvent::failed(text(
                &params["turn"]["error"]["message"],
            ))],
            _ => vec![],
        },
        _ => vec![],
    }
}

/// The retry class of a failed turn, from its error's `codexErrorInfo` (a string, or an
/// object keyed by the variant with an `httpStatusCode`).
pub fn classify_error(error: &Value) -> FailureClass {
    let info = &error["codexErrorInfo"];
    let status_429 = |variant: &str| info[variant]["httpStatusCode"].as_u64() == Some(429);
    match info.as_str() {
        Some("rateLimitExceeded") => FailureClass::RateLimit,
        Some("serverOverloaded") => FailureClass::Overloaded,
        // A usage limit resets at a time the message states: retrying cannot help.
        Some("usageLimitExceeded") => FailureClass::Other,
        _ if status_429("responseTooManyFailedAttempts")
            || status_429("responseStreamDisconnected")
            || status_429("httpConnectionFailed") =>
        {
            FailureClass::RateLimit
        }
        _ => FailureClass::Other,
    }
}

/// The retry class of a JSON-RPC error answered to a request (`thread/resume`, `turn/start`).
pub fn classify_rpc_error(code: i64, message: &str) -> FailureClass {
    let lower = message.to_ascii_lowercase();
    if lower.contains("no rollout found for thread id") {
        FailureClass::MissingRollout
    } else if lower.contains("already has an active writer") {
        FailureClass::WriterConflict
    } else if code == -32001 {
        FailureClass::Overloaded
    } else {
        super::classify_failure(EngineKind::CodexAppServer, None, &[message])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The verbatim samples of codex-cli 0.171.0's app-server.
    const SAMPLES: [(&str, &str); 4] = [
        (
            "appserver_429.txt",
            include_str!("../../tests/data/codex-0.171.0-samples/appserver_429.txt"),
        ),
        (
            "appserver_quota.txt",
            include_str!("../../tests/data/codex-0.171.0-samples/appserver_quota.txt"),
        ),
        (
            "appserver_usage_limit.txt",
            include_str!("../../tests/data/codex-0.171.0-samples/appserver_usage_limit.txt"),
        ),
        (
            "appserver_failed_ratelimit.txt",
            include_str!("../../tests/data/codex-0.171.0-samples/appserver_failed_ratelimit.txt"),
        ),
    ];

    /// The last `error` notification with `willRetry: false` of a transcript.
    fn final_error(transcript: &str) -> Value {
        transcript
            .lines()
            .filter_map(|line| line.strip_prefix("< "))
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .rfind(|message| {
                message["method"] == "error" && message["params"]["willRetry"] == false
            })
            .map(|message| message["params"]["error"].clone())
            .expect("a final error")
    }

    #[test]
    fn failed_turns_of_the_samples_are_classified() {
        let expected = [
            FailureClass::RateLimit,
            FailureClass::Other,
            FailureClass::Other,
            FailureClass::RateLimit,
        ];
        for ((name, transcript), class) in SAMPLES.iter().zip(expected) {
            assert_eq!(classify_error(&final_error(transcript)), class, "{name}");
        }
        assert_eq!(
            classify_error(&json!({"codexErrorInfo": "serverOverloaded"})),
            FailureClass::Overloaded
        );
    }

    #[test]
    fn rpc_errors_are_classified() {
        assert_eq!(
            classify_rpc_error(
                -32600,
                "no rollout found for thread id 00000000-0000-4000-8000-000000000000"
            ),
            FailureClass::MissingRollout
        );
        assert_eq!(
            classify_rpc_error(-32600, "thread abc already has an active writer"),
            FailureClass::WriterConflict
        );
        assert_eq!(
            classify_rpc_error(-32001, "server overloaded"),
            FailureClass::Overloaded
        );
        assert_eq!(
            classify_rpc_error(-32600, "Not initialized"),
            FailureClass::Other
        );
    }

    #[test]
    fn notifications_of_a_successful_turn_become_events() {
        let transcript = include_str!("../../tests/data/codex-0.171.0-samples/appserver_ok.txt");
        let events: Vec<EngineEvent> = transcript
            .lines()
            .filter_map(|line| line.strip_prefix("< "))
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|message| {
                Some((
                    message["method"].as_str()?.to_string(),
                    message["params"].clone(),
                ))
            })
            .flat_map(|(method, params)| notification_events(&method, &params))
            .collect();
        assert!(events.contains(&EngineEvent::MessageDelta {
            text: "hello".into()
        }));
        assert!(events.contains(&EngineEvent::Message {
            text: "hello from mock".into()
        }));
        assert_eq!(
            events
                .iter()
                .filter(|event| **event == EngineEvent::TurnCompleted)
                .count(),
            2,
            "two turns completed"
        );
    }
}
