//! corral's session events as codex app-server notifications, for one connection of
//! `corral connect`.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::events::{EventKind, Payload, Text};
use crate::store::events::Event;

/// A turn as one connection has shown it so far.
#[derive(Default)]
struct TurnView {
    /// `turn/started` was sent, at this time (ms).
    started_at: Option<i64>,
    /// Agent messages completed in this turn (item ids are numbered by it).
    messages: u32,
    /// The agent message being streamed: its item id and text so far.
    open: Option<(String, String)>,
    /// The last failed attempt's message (a retry notice names it).
    failure: Option<String>,
    /// Tool items without an id of their own.
    tools: u32,
}

/// Turns corral's session events into app-server notifications, for one connection.
///
/// | corral event | notifications |
/// |---|---|
/// | `thread.started` (a new thread id) | `thread/started {thread}` |
/// | `prompt.started` | `thread/status/changed {active}` |
/// | `turn.started` (first of the prompt) | `turn/started {threadId, turn}` |
/// | `message.delta` | `item/started` (first of a message), `item/agentMessage/delta` |
/// | `message` | `item/completed {item: agentMessage}` |
/// | `tool` | `item/started` (in progress) or `item/completed`, the engine's item |
/// | `usage` | `thread/tokenUsage/updated` |
/// | `notice` | `error {error, willRetry}` |
/// | `retry.scheduled` | `error {…, willRetry: true}` |
/// | `prompt.requeued` | `error {…, willRetry: true}` |
/// | `prompt.done` | `thread/status/changed {idle}`, `turn/completed {completed}` |
/// | `prompt.failed` | `error {willRetry: false}`, idle, `turn/completed {failed, error}` |
/// | `prompt.cancelled` | idle, `turn/completed {interrupted}` |
///
/// A turn's notifications are always preceded by its `turn/started`, even for a prompt that
/// began before the connection subscribed.
pub(super) struct Translator {
    session_id: String,
    /// The session's thread, once known.
    pub(super) thread_id: Option<String>,
    turns: HashMap<String, TurnView>,
}

impl Translator {
    pub(super) fn new(session_id: &str) -> Self {
        Translator {
            session_id: session_id.to_string(),
            thread_id: None,
            turns: HashMap::new(),
        }
    }

    /// The thread id to show: the session's thread, else the session id as a placeholder.
    pub(super) fn thread(&self) -> String {
        self.thread_id
            .clone()
            .unwrap_or_else(|| self.session_id.clone())
    }

    pub(super) fn translate(&mut self, event: &Event) -> Vec<Value> {
        let at = event.at;
        let payload = event.payload();
        let mut out = Vec::new();
        if let Payload::ThreadStarted(started) = &payload {
            let thread = started.thread_id.as_str();
            if !thread.is_empty() && self.thread_id.as_deref() != Some(thread) {
                self.thread_id = Some(thread.to_string());
                let thread = json!({
                    "id": thread,
                    "sessionId": thread,
                    "ephemeral": false,
                    "status": { "type": "active", "activeFlags": [] },
                    "source": "corral",
                    "turns": [],
                });
                out.push(notification(
                    "thread/started",
                    json!({ "thread": thread }),
                    at,
                ));
            }
            return out;
        }
        let Some(turn) = event.prompt_id.clone() else {
            return out;
        };
        let thread = self.thread();
        match payload {
            Payload::PromptStarted(_) => {
                out.push(notification(
                    "thread/status/changed",
                    json!({ "threadId": thread, "status": { "type": "active", "activeFlags": [] } }),
                    at,
                ));
            }
            Payload::TurnStarted(_) => self.ensure_started(&turn, at, &mut out),
            Payload::MessageDelta(Text { text: delta }) => {
                self.ensure_started(&turn, at, &mut out);
                let item = self.open_message(&turn, at, &mut out);
                if let Some((_, so_far)) = self.view(&turn).open.as_mut() {
                    so_far.push_str(&delta);
                }
                out.push(notification(
                    "item/agentMessage/delta",
                    json!({ "threadId": thread, "turnId": turn, "itemId": item, "delta": delta }),
                    at,
                ));
            }
            Payload::Message(message) => {
                self.ensure_started(&turn, at, &mut out);
                self.complete_message(&turn, message.text, at, &mut out);
            }
            Payload::Tool(tool) => {
                self.ensure_started(&turn, at, &mut out);
                let view = self.view(&turn);
                let name = Some(tool.name.as_str()).filter(|name| !name.is_empty());
                let mut item = engine_item(&tool.detail, name);
                if item.get("id").is_none_or(Value::is_null) {
                    view.tools += 1;
                    item["id"] = json!(format!("{turn}-tool-{}", view.tools));
                }
                let method = if item["status"].as_str() == Some("inProgress") {
                    "item/started"
                } else {
                    "item/completed"
                };
                out.push(notification(
                    method,
                    json!({ "item": item, "threadId": thread, "turnId": turn }),
                    at,
                ));
            }
            Payload::Usage(usage) => {
                self.ensure_started(&turn, at, &mut out);
                out.push(notification(
                    "thread/tokenUsage/updated",
                    json!({ "threadId": thread, "turnId": turn, "tokenUsage": token_usage(&usage.usage) }),
                    at,
                ));
            }
            Payload::Notice(notice) => {
                self.ensure_started(&turn, at, &mut out);
                // Nothing is final before the prompt ends: corral may still retry.
                let will_retry = notice.will_retry.as_ref().and_then(Value::as_bool);
                out.push(error_notification(
                    &thread,
                    &turn,
                    json!({
                        "message": notice.message,
                        "codexErrorInfo": notice.codex_error_info.unwrap_or(Value::Null),
                        "additionalDetails": null,
                    }),
                    will_retry.unwrap_or(true),
                    at,
                ));
            }
            Payload::TurnFailed(failed) => {
                self.view(&turn).failure = Some(failed.message);
            }
            Payload::RetryScheduled(retry) => {
                self.ensure_started(&turn, at, &mut out);
                let view = self.view(&turn);
                // A new attempt streams its own message.
                view.open = None;
                let message = Some(retry.message)
                    .filter(|message| !message.is_empty())
                    .or_else(|| view.failure.clone())
                    .unwrap_or_else(|| retry.reason.clone());
                let delay = retry.delay_ms as f64 / 1000.0;
                let details = format!(
                    "corral retries ({}): attempt {} in {delay}s",
                    retry.reason, retry.next_attempt
                );
                out.push(error_notification(
                    &thread,
                    &turn,
                    json!({ "message": message, "codexErrorInfo": null, "additionalDetails": details }),
                    true,
                    at,
                ));
            }
            Payload::PromptRequeued(_) => {
                self.ensure_started(&turn, at, &mut out);
                out.push(error_notification(
                    &thread,
                    &turn,
                    json!({
                        "message": "the daemon stopped; the prompt is queued again and runs when a daemon starts",
                        "codexErrorInfo": null,
                        "additionalDetails": null,
                    }),
                    true,
                    at,
                ));
            }
            Payload::PromptDone(ended)
            | Payload::PromptFailed(ended)
            | Payload::PromptCancelled(ended) => {
                self.ensure_started(&turn, at, &mut out);
                let answer = ended.answer;
                let view = self.view(&turn);
                let streamed = view.open.is_some();
                if event.kind == EventKind::PromptDone && (streamed || view.messages == 0) {
                    // The answer was streamed but never completed, or never shown at all.
                    let text = answer
                        .or_else(|| view.open.as_ref().map(|(_, text)| text.clone()))
                        .unwrap_or_default();
                    if streamed || !text.is_empty() {
                        self.complete_message(&turn, text, at, &mut out);
                    }
                }
                let (status, error) = match &event.kind {
                    EventKind::PromptDone => ("completed", Value::Null),
                    EventKind::PromptFailed => {
                        let error = json!({
                            "message": ended.error.as_deref().unwrap_or("the turn failed"),
                            "codexErrorInfo": null,
                            "additionalDetails": null,
                        });
                        out.push(error_notification(&thread, &turn, error.clone(), false, at));
                        ("failed", error)
                    }
                    _ => ("interrupted", Value::Null),
                };
                out.push(notification(
                    "thread/status/changed",
                    json!({ "threadId": thread, "status": { "type": "idle" } }),
                    at,
                ));
                let started = self.turns.remove(&turn).and_then(|view| view.started_at);
                out.push(notification(
                    "turn/completed",
                    json!({ "threadId": thread, "turn": turn_object(&turn, status, error, started, Some(at)) }),
                    at,
                ));
            }
            _ => {}
        }
        out
    }

    fn view(&mut self, turn: &str) -> &mut TurnView {
        self.turns.entry(turn.to_string()).or_default()
    }

    /// Sends `turn/started` once per turn.
    fn ensure_started(&mut self, turn: &str, at: i64, out: &mut Vec<Value>) {
        let thread = self.thread();
        let view = self.view(turn);
        if view.started_at.is_some() {
            return;
        }
        view.started_at = Some(at);
        out.push(notification(
            "turn/started",
            json!({ "threadId": thread, "turn": turn_object(turn, "inProgress", Value::Null, Some(at), None) }),
            at,
        ));
    }

    /// The item id of the agent message being streamed, starting one (`item/started`).
    fn open_message(&mut self, turn: &str, at: i64, out: &mut Vec<Value>) -> String {
        let thread = self.thread();
        let view = self.view(turn);
        if let Some((item, _)) = &view.open {
            return item.clone();
        }
        let item = format!("{turn}-msg-{}", view.messages + 1);
        view.open = Some((item.clone(), String::new()));
        out.push(notification(
            "item/started",
            json!({
                "item": { "type": "agentMessage", "id": item, "text": "", "phase": null },
                "threadId": thread,
                "turnId": turn,
            }),
            at,
        ));
        item
    }

    fn complete_message(&mut self, turn: &str, text: String, at: i64, out: &mut Vec<Value>) {
        let thread = self.thread();
        let item = self.open_message(turn, at, out);
        let view = self.view(turn);
        view.open = None;
        view.messages += 1;
        out.push(notification(
            "item/completed",
            json!({
                "item": { "type": "agentMessage", "id": item, "text": text, "phase": null },
                "threadId": thread,
                "turnId": turn,
            }),
            at,
        ));
    }
}

fn notification(method: &str, params: Value, at: i64) -> Value {
    json!({ "method": method, "params": params, "emittedAtMs": at })
}

fn error_notification(thread: &str, turn: &str, error: Value, will_retry: bool, at: i64) -> Value {
    notification(
        "error",
        json!({ "error": error, "willRetry": will_retry, "threadId": thread, "turnId": turn }),
        at,
    )
}

/// A tool event's item as the app-server shows items: the engine's own item, its names in
/// camelCase (an app-server item is already; `codex exec`'s `command_execution` with
/// `exit_code` becomes `commandExecution` with `exitCode`).
fn engine_item(detail: &Value, name: Option<&str>) -> Value {
    let mut item = match detail {
        Value::Object(map) => {
            let mut converted = serde_json::Map::new();
            for (key, value) in map {
                converted.insert(camel(key), value.clone());
            }
            Value::Object(converted)
        }
        Value::Null => json!({}),
        other => json!({ "detail": other }),
    };
    let kind = item["type"]
        .as_str()
        .map(str::to_string)
        .or_else(|| name.map(str::to_string))
        .unwrap_or_else(|| "tool".into());
    item["type"] = json!(camel(&kind));
    if let Some(status) = item["status"].as_str().map(camel) {
        item["status"] = json!(status);
    }
    item
}

/// `snake_case` → `camelCase`; other text as it is.
fn camel(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut upper = false;
    for character in text.chars() {
        if character == '_' && !out.is_empty() {
            upper = true;
        } else if upper {
            out.extend(character.to_uppercase());
            upper = false;
        } else {
            out.push(character);
        }
    }
    out
}

/// Usage as `thread/tokenUsage/updated` shows it: an app-server's `tokenUsage` as it is; an
/// exec engine's counts as `total` and `last`.
fn token_usage(usage: &Value) -> Value {
    if usage.get("total").is_some() || usage.get("last").is_some() {
        return usage.clone();
    }
    let count = |name: &str| usage[name].as_i64().unwrap_or(0);
    let input = count("input_tokens");
    let output = count("output_tokens");
    let breakdown = json!({
        "totalTokens": input + output,
        "inputTokens": input,
        "cachedInputTokens": count("cached_input_tokens"),
        "cacheWriteInputTokens": count("cache_write_input_tokens"),
        "outputTokens": output,
        "reasoningOutputTokens": count("reasoning_output_tokens"),
    });
    json!({ "total": breakdown, "last": breakdown, "modelContextWindow": null })
}

/// A turn object as the app-server shows it (times in seconds, durations in milliseconds).
pub(super) fn turn_object(
    id: &str,
    status: &str,
    error: Value,
    started_ms: Option<i64>,
    completed_ms: Option<i64>,
) -> Value {
    let duration = match (started_ms, completed_ms) {
        (Some(start), Some(end)) => json!(end - start),
        _ => Value::Null,
    };
    json!({
        "id": id,
        "rootTurnId": id,
        "items": [],
        "itemsView": "notLoaded",
        "status": status,
        "error": error,
        "startedAt": started_ms.map(|ms| ms / 1000),
        "completedAt": completed_ms.map(|ms| ms / 1000),
        "durationMs": duration,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, kind: &str, prompt: Option<&str>, payload: Value) -> Event {
        Event {
            session_id: "ses".into(),
            seq,
            feed_seq: seq,
            prompt_id: prompt.map(str::to_string),
            run_id: None,
            at: 1_000_000 + seq,
            kind: kind.into(),
            payload,
        }
    }

    fn methods(notifications: &[Value]) -> Vec<String> {
        notifications
            .iter()
            .map(|n| n["method"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_streamed_turn_becomes_the_app_servers_notifications() {
        let mut translator = Translator::new("ses");
        assert_eq!(translator.thread(), "ses");
        let mut all = Vec::new();
        for item in [
            event(1, "prompt.started", Some("p1"), json!({ "text": "hi" })),
            event(
                2,
                "thread.started",
                Some("p1"),
                json!({ "thread_id": "thr" }),
            ),
            event(3, "turn.started", Some("p1"), json!({})),
            event(4, "message.delta", Some("p1"), json!({ "text": "hel" })),
            event(5, "message.delta", Some("p1"), json!({ "text": "lo" })),
            event(6, "message", Some("p1"), json!({ "text": "hello" })),
            event(
                7,
                "usage",
                Some("p1"),
                json!({ "usage": { "input_tokens": 3, "output_tokens": 2 } }),
            ),
            event(8, "turn.completed", Some("p1"), json!({})),
            event(
                9,
                "prompt.done",
                Some("p1"),
                json!({ "answer": "hello", "error": null }),
            ),
        ] {
            all.extend(translator.translate(&item));
        }
        assert_eq!(
            methods(&all),
            [
                "thread/status/changed",
                "thread/started",
                "turn/started",
                "item/started",
                "item/agentMessage/delta",
                "item/agentMessage/delta",
                "item/completed",
                "thread/tokenUsage/updated",
                "thread/status/changed",
                "turn/completed",
            ]
        );
        let started = &all[2]["params"];
        assert_eq!(started["threadId"], "thr");
        assert_eq!(started["turn"]["id"], "p1");
        assert_eq!(started["turn"]["status"], "inProgress");
        assert_eq!(all[4]["params"]["itemId"], all[6]["params"]["item"]["id"]);
        assert_eq!(all[4]["params"]["delta"], "hel");
        assert_eq!(all[6]["params"]["item"]["text"], "hello");
        assert_eq!(all[6]["params"]["item"]["type"], "agentMessage");
        assert_eq!(all[7]["params"]["tokenUsage"]["total"]["totalTokens"], 5);
        assert_eq!(all[9]["params"]["turn"]["status"], "completed");
        assert_eq!(all[9]["params"]["turn"]["durationMs"], 6);
        assert!(all.iter().all(|n| n["emittedAtMs"].is_i64()));
    }

    #[test]
    fn failures_retries_and_cancels_end_turns_as_the_app_server_does() {
        let mut translator = Translator::new("ses");
        let mut all = Vec::new();
        for item in [
            event(1, "turn.started", Some("p1"), json!({})),
            event(
                2,
                "notice",
                Some("p1"),
                json!({ "message": "Reconnecting... 1/2" }),
            ),
            event(3, "turn.failed", Some("p1"), json!({ "message": "429" })),
            event(
                4,
                "retry.scheduled",
                Some("p1"),
                json!({ "reason": "rate_limit", "delay_ms": 50, "next_attempt": 2 }),
            ),
            event(5, "turn.started", Some("p1"), json!({})),
            event(6, "prompt.failed", Some("p1"), json!({ "error": "boom" })),
            event(7, "prompt.cancelled", Some("p2"), json!({})),
        ] {
            all.extend(translator.translate(&item));
        }
        assert_eq!(
            methods(&all),
            [
                "turn/started",
                "error",
                "error",
                "error",
                "thread/status/changed",
                "turn/completed",
                "turn/started",
                "thread/status/changed",
                "turn/completed",
            ]
        );
        assert_eq!(all[1]["params"]["willRetry"], true);
        assert_eq!(all[2]["params"]["error"]["message"], "429");
        assert_eq!(all[2]["params"]["willRetry"], true);
        assert_eq!(all[3]["params"]["willRetry"], false);
        assert_eq!(all[5]["params"]["turn"]["status"], "failed");
        assert_eq!(all[5]["params"]["turn"]["error"]["message"], "boom");
        assert_eq!(all[8]["params"]["turn"]["id"], "p2");
        assert_eq!(all[8]["params"]["turn"]["status"], "interrupted");
    }

    #[test]
    fn tool_items_keep_the_engines_item_in_camel_case() {
        let exec_item = json!({ "id": "item_1", "type": "command_execution", "command": "ls",
                                "aggregated_output": "", "exit_code": 0, "status": "in_progress" });
        let item = engine_item(&exec_item, Some("command_execution"));
        assert_eq!(item["type"], "commandExecution");
        assert_eq!(item["exitCode"], 0);
        assert_eq!(item["status"], "inProgress");
        let app_item = json!({ "id": "c1", "type": "commandExecution", "exitCode": 1 });
        assert_eq!(engine_item(&app_item, Some("commandExecution")), app_item);
    }
}
