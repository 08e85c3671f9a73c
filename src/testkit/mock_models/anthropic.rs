//! A loopback mock of the Anthropic Messages API, enough for Claude Code 2.1.197
//! (its requests as measured). Point `ANTHROPIC_BASE_URL` at
//! [`MockAnthropic::base_url`]; Claude Code appends `/v1/messages?beta=true`.
//!
//! - `POST /v1/messages` is a model call, answered from the script: with `"stream": true` an
//!   SSE stream `message_start`, `content_block_start`, `ping`, one `content_block_delta`
//!   (`text_delta`) per word, `content_block_stop`, `message_delta` (`stop_reason: end_turn`,
//!   usage), `message_stop`; without it one JSON message (Claude Code's fallback after stream
//!   errors). Any role is accepted in `messages` (Claude Code sends `system` ones there).
//! - A 429 is `rate_limit_error` with `anthropic-ratelimit-requests-remaining: 0` and the
//!   retry hints asked for; overloaded is HTTP 529 `overloaded_error`; 500 is `api_error`.
//! - `POST /v1/messages/count_tokens` answers a fixed count; `GET /v1/models` one model.

use serde_json::{json, Value};

use super::http::{http_json, http_sse, next_id, pieces, sse_event, Reply, Request};
use super::{Answer, Api, CallKind, MockServer, Shared, INPUT_TOKENS, OUTPUT_TOKENS};

/// The model id `GET /v1/models` lists (a call's own `model` is echoed in its answer).
pub const MODEL: &str = "claude-mock-1";

/// The running mock; its model calls are `POST /v1/messages`. Dropping it stops accepting
/// and ends every hang.
pub type MockAnthropic = MockServer<Anthropic>;

/// The Anthropic Messages API, as [`MockAnthropic`] speaks it.
pub enum Anthropic {}

impl Api for Anthropic {
    const NAME: &'static str = "mock-anthropic";
    /// `ANTHROPIC_BASE_URL` has no `/v1`: the client adds it.
    const BASE_PATH: &'static str = "";
    const ANSWER: fn(&Shared, &Request) -> Reply = answer;
}

fn kind_of(request: &Request) -> CallKind {
    match (request.method.as_str(), request.route()) {
        ("POST", "/v1/messages") => CallKind::Model,
        ("POST", "/v1/messages/count_tokens") => CallKind::CountTokens,
        ("GET", "/v1/models") => CallKind::Models,
        _ => CallKind::Other,
    }
}

fn answer(shared: &Shared, request: &Request) -> Reply {
    let kind = kind_of(request);
    let answer = shared.take(request, kind);
    let body = request.json();
    match (kind, answer) {
        (CallKind::Model, Some(Answer::Hang)) => Reply::Hang,
        (CallKind::Model, Some(answer)) => Reply::Send(render(&answer, &body)),
        (CallKind::Model, None) => Reply::Send(error(
            400,
            &[],
            "invalid_request_error",
            "mock: no scripted answer left",
        )),
        (CallKind::CountTokens, _) => Reply::Send(http_json(
            200,
            &[],
            &json!({ "input_tokens": INPUT_TOKENS }),
        )),
        (CallKind::Models, _) => Reply::Send(http_json(
            200,
            &[],
            &json!({
                "data": [{
                    "type": "model",
                    "id": MODEL,
                    "display_name": "Claude Mock",
                    "created_at": "2026-01-01T00:00:00Z",
                }],
                "has_more": false,
                "first_id": MODEL,
                "last_id": MODEL,
            }),
        )),
        _ => Reply::Send(error(404, &[], "not_found_error", "mock: unknown path")),
    }
}

/// An Anthropic error response.
fn error(status: u16, extra: &[(&str, String)], kind: &str, message: &str) -> Vec<u8> {
    let mut headers = vec![("request-id", format!("req_mock_{}", next_id()))];
    headers.extend(extra.iter().cloned());
    http_json(
        status,
        &headers,
        &json!({ "type": "error", "error": { "type": kind, "message": message } }),
    )
}

/// The response for a scripted answer to the call whose body is `body`.
fn render(answer: &Answer, body: &Value) -> Vec<u8> {
    match answer {
        Answer::Text(text) => {
            let model = body["model"].as_str().unwrap_or(MODEL);
            let id = format!("msg_mock_{}", next_id());
            let request_id = [("request-id", format!("req_mock_{}", next_id()))];
            if body["stream"] == true {
                http_sse(&request_id, &sse_message(text, model, &id))
            } else {
                http_json(200, &request_id, &json_message(text, model, &id))
            }
        }
        Answer::RateLimited { .. } => {
            let mut headers = vec![("anthropic-ratelimit-requests-remaining", "0".to_string())];
            headers.extend(answer.retry_headers());
            error(
                429,
                &headers,
                "rate_limit_error",
                "mock: Number of request tokens has exceeded your per-minute rate limit",
            )
        }
        Answer::ToolUse { name, input } => {
            let model = body["model"].as_str().unwrap_or(MODEL);
            let id = format!("msg_mock_{}", next_id());
            let tool_id = format!("toolu_mock_{}", next_id());
            let request_id = [("request-id", format!("req_mock_{}", next_id()))];
            if body["stream"] == true {
                http_sse(
                    &request_id,
                    &sse_tool_use(name, input, &tool_id, model, &id),
                )
            } else {
                let mut message = json_message("", model, &id);
                message["content"] = json!([
                    { "type": "tool_use", "id": tool_id, "name": name, "input": input }
                ]);
                message["stop_reason"] = json!("tool_use");
                http_json(200, &request_id, &message)
            }
        }
        Answer::Overloaded => error(529, &[], "overloaded_error", "Overloaded"),
        Answer::ServerError => error(500, &[], "api_error", "mock: Internal server error"),
        Answer::Hang => unreachable!("a hang is served by the core, not rendered"),
    }
}

/// The non-streamed message answering `text`.
fn json_message(text: &str, model: &str, id: &str) -> Value {
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{ "type": "text", "text": text }],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {
            "input_tokens": INPUT_TOKENS,
            "output_tokens": OUTPUT_TOKENS,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    })
}

/// The SSE stream of a message that calls the tool `name` with `input`: the input streamed as
/// `input_json_delta` pieces, and `stop_reason: tool_use`.
fn sse_tool_use(name: &str, input: &Value, tool_id: &str, model: &str, id: &str) -> String {
    let mut stream = sse_start(model, id);
    stream.push_str(&sse_event(&json!({
        "type": "content_block_start",
        "index": 0,
        "content_block": { "type": "tool_use", "id": tool_id, "name": name, "input": {} },
    })));
    let json = input.to_string();
    let middle = json.len() / 2;
    let middle = (middle..json.len())
        .find(|at| json.is_char_boundary(*at))
        .unwrap_or(json.len());
    for piece in [&json[..middle], &json[middle..]] {
        stream.push_str(&sse_event(&json!({
            "type": "content_block_delta",
            "index": 0,
            "delta": { "type": "input_json_delta", "partial_json": piece },
        })));
    }
    stream.push_str(&sse_event(
        &json!({ "type": "content_block_stop", "index": 0 }),
    ));
    stream.push_str(&sse_event(&json!({
        "type": "message_delta",
        "delta": { "stop_reason": "tool_use", "stop_sequence": null },
        "usage": { "output_tokens": OUTPUT_TOKENS },
    })));
    stream.push_str(&sse_event(&json!({ "type": "message_stop" })));
    stream
}

/// The stream's first event, `message_start`.
fn sse_start(model: &str, id: &str) -> String {
    sse_event(&json!({
        "type": "message_start",
        "message": {
            "id": id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {
                "input_tokens": INPUT_TOKENS,
                "output_tokens": 1,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        },
    }))
}

/// The SSE stream of a message answering `text`.
fn sse_message(text: &str, model: &str, id: &str) -> String {
    let mut stream = sse_start(model, id);
    stream.push_str(&sse_event(&json!({
        "type": "content_block_start",
        "index": 0,
        "content_block": { "type": "text", "text": "" },
    })));
    stream.push_str(&sse_event(&json!({ "type": "ping" })));
    for piece in pieces(text) {
        stream.push_str(&sse_event(&json!({
            "type": "content_block_delta",
            "index": 0,
            "delta": { "type": "text_delta", "text": piece },
        })));
    }
    stream.push_str(&sse_event(
        &json!({ "type": "content_block_stop", "index": 0 }),
    ));
    stream.push_str(&sse_event(&json!({
        "type": "message_delta",
        "delta": { "stop_reason": "end_turn", "stop_sequence": null },
        "usage": { "output_tokens": OUTPUT_TOKENS },
    })));
    stream.push_str(&sse_event(&json!({ "type": "message_stop" })));
    stream
}

#[cfg(test)]
mod tests {
    use super::super::http::client::{
        assert_hangs_until, body, exchange, open, post, sse_names, sse_payloads, status,
        wait_for_a_hang,
    };
    use super::*;

    fn messages(stream: bool) -> String {
        json!({
            "model": "claude-opus-4-8",
            "stream": stream,
            "system": [{ "type": "text", "text": "You are Claude Code." }],
            "messages": [
                { "role": "user", "content": [{ "type": "text", "text": "say hi" }] },
                { "role": "system", "content": "a mid-conversation note" },
            ],
        })
        .to_string()
    }

    #[test]
    fn a_streamed_text_answer_is_the_messages_sse_sequence() {
        let mock = MockAnthropic::start();
        mock.script([Answer::text("hello there")]);
        let response = exchange(
            mock.address(),
            &post("/v1/messages?beta=true", &messages(true)),
        );
        assert_eq!(status(&response), 200, "{response}");
        assert!(response.contains("content-type: text/event-stream\r\n"));
        assert!(response.contains("request-id: req_mock_"), "{response}");
        assert_eq!(
            sse_names(&response),
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let events = sse_payloads(&response);
        assert_eq!(events[0]["message"]["model"], "claude-opus-4-8");
        let text: String = events
            .iter()
            .filter_map(|event| event["delta"]["text"].as_str())
            .collect();
        assert_eq!(text, "hello there");
        assert_eq!(events[6]["delta"]["stop_reason"], "end_turn");
        assert_eq!(events[6]["usage"]["output_tokens"], OUTPUT_TOKENS);
        let calls = mock.model_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].path(), "/v1/messages?beta=true");
        assert!(calls[0].stream());
        assert_eq!(calls[0].system(), "You are Claude Code.");
        assert_eq!(
            calls[0].conversation(),
            [
                ("user".to_string(), "say hi".to_string()),
                ("system".to_string(), "a mid-conversation note".to_string()),
            ]
        );
        assert_eq!(mock.unused_answers(), 0);
    }

    #[test]
    fn a_non_streamed_answer_is_one_json_message() {
        let mock = MockAnthropic::start();
        mock.script([Answer::text("fallback")]);
        let response = exchange(mock.address(), &post("/v1/messages", &messages(false)));
        assert_eq!(status(&response), 200, "{response}");
        let message: Value = serde_json::from_str(body(&response)).unwrap();
        assert_eq!(message["content"][0]["text"], "fallback");
        assert_eq!(message["stop_reason"], "end_turn");
        assert_eq!(message["usage"]["input_tokens"], INPUT_TOKENS);
    }

    #[test]
    fn errors_follow_the_script_and_other_routes_are_answered_apart() {
        let mock = MockAnthropic::start();
        mock.script([
            Answer::rate_limited(),
            Answer::rate_limited_s(3),
            Answer::Overloaded,
            Answer::ServerError,
        ]);
        let call = || exchange(mock.address(), &post("/v1/messages", &messages(true)));
        let first = call();
        assert_eq!(status(&first), 429, "{first}");
        assert!(first.contains("rate_limit_error"));
        assert!(first.contains("anthropic-ratelimit-requests-remaining: 0\r\n"));
        assert!(!first.contains("retry-after"));
        let second = call();
        assert!(second.contains("retry-after: 3\r\n"), "{second}");
        let overloaded = call();
        assert_eq!(status(&overloaded), 529);
        assert!(overloaded.contains("overloaded_error"));
        assert_eq!(status(&call()), 500);
        let unscripted = call();
        assert_eq!(status(&unscripted), 400);
        assert!(unscripted.contains("no scripted answer left"));

        let counted = exchange(
            mock.address(),
            &post("/v1/messages/count_tokens", &messages(false)),
        );
        assert_eq!(status(&counted), 200);
        assert!(body(&counted).contains(&INPUT_TOKENS.to_string()));
        let models = exchange(
            mock.address(),
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert!(body(&models).contains(MODEL), "{models}");
        let answers: Vec<&str> = mock.calls().iter().map(|call| call.answer).collect();
        assert_eq!(
            answers,
            [
                "429",
                "429",
                "overloaded",
                "500",
                "unscripted",
                "count_tokens",
                "models"
            ]
        );
        assert_eq!(mock.model_calls().len(), 5);
    }

    #[test]
    fn a_hang_holds_the_connection_until_the_mock_is_dropped() {
        let mock = MockAnthropic::start();
        mock.script([Answer::Hang]);
        let stream = open(mock.address(), &post("/v1/messages", &messages(true)));
        wait_for_a_hang(|| mock.hanging());
        assert_eq!(mock.hanging(), 1);
        assert_eq!(mock.model_calls()[0].answer, "hang");
        assert_hangs_until(stream, move || drop(mock));
    }
}
