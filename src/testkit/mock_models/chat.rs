//! A loopback mock of the OpenAI Chat Completions API, enough for OpenCode 1.18.33 through its
//! bundled `@ai-sdk/openai-compatible` provider. Name [`MockChat::base_url`] as the provider's `baseURL`; it POSTs to
//! `{baseURL}/chat/completions`.
//!
//! - `POST /v1/chat/completions` with `"stream": true` is answered with
//!   `chat.completion.chunk` events: the role, one content delta per word, a final chunk with
//!   `finish_reason: "stop"` and usage, then `data: [DONE]`; without a stream, one
//!   `chat.completion` JSON object.
//! - OpenCode asks for a title on a new session with a separate call whose system prompt
//!   starts "You are a title generator". Such a call is recorded as [`CallKind::Title`] and
//!   answered from the title script, else with [`DEFAULT_TITLE`], never from the main script:
//!   a test's script holds only the answers of the calls it cares about, whatever the order in
//!   which OpenCode's two calls arrive.
//! - A 429 carries the retry hints asked for (`retry-after`, `retry-after-ms`); overloaded is
//!   HTTP 503; 500 is a `server_error`.
//! - `GET /v1/models` lists [`MODEL`].

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::http::{http_json, http_sse, next_id, pieces, sse_data, Reply, Request};
use super::{
    text_blocks, Answer, Api, Call, CallKind, MockServer, Shared, INPUT_TOKENS, OUTPUT_TOKENS,
};

/// The model id `GET /v1/models` lists (a call's own `model` is echoed in its answer).
pub const MODEL: &str = "mock-model";

/// How a title call's system prompt starts (OpenCode 1.18.33).
pub const TITLE_SYSTEM_PREFIX: &str = "You are a title generator";

/// The answer of a title call when the title script is empty.
pub const DEFAULT_TITLE: &str = "Mock title";

/// The running mock; its model calls are `POST /v1/chat/completions`, with OpenCode's title
/// calls answered apart. Dropping it stops accepting and ends every hang.
pub type MockChat = MockServer<Chat>;

/// The OpenAI Chat Completions API, as [`MockChat`] speaks it.
pub enum Chat {}

impl Api for Chat {
    const NAME: &'static str = "mock-chat";
    /// The provider's `baseURL` is `…/v1`.
    const BASE_PATH: &'static str = "/v1";
    const ANSWER: fn(&Shared, &Request) -> Reply = answer;
}

impl MockChat {
    /// Queues answers for the next title calls, in order (then [`DEFAULT_TITLE`] again).
    pub fn title_script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.shared.lock().titles.extend(answers);
    }

    /// The title calls received so far, in arrival order.
    pub fn title_calls(&self) -> Vec<Call> {
        self.of_kind(CallKind::Title)
    }
}

/// Whether a chat body is a title generator's call: a system message that starts so.
fn is_title_call(body: &Value) -> bool {
    body["messages"].as_array().is_some_and(|messages| {
        messages.iter().any(|message| {
            message["role"] == "system"
                && text_blocks(message.get("content"))
                    .concat()
                    .starts_with(TITLE_SYSTEM_PREFIX)
        })
    })
}

fn answer(shared: &Shared, request: &Request) -> Reply {
    let body = request.json();
    let kind = match (request.method.as_str(), request.route()) {
        ("POST", "/v1/chat/completions") if is_title_call(&body) => CallKind::Title,
        ("POST", "/v1/chat/completions") => CallKind::Model,
        ("GET", "/v1/models") => CallKind::Models,
        _ => CallKind::Other,
    };
    let answer = shared.take(request, kind);
    match (kind, answer) {
        (CallKind::Model | CallKind::Title, Some(Answer::Hang)) => Reply::Hang,
        (CallKind::Model | CallKind::Title, Some(answer)) => Reply::Send(render(&answer, &body)),
        (CallKind::Title, None) => Reply::Send(render(&Answer::text(DEFAULT_TITLE), &body)),
        (CallKind::Model, None) => Reply::Send(error(
            400,
            &[],
            "mock: no scripted answer left",
            "invalid_request_error",
            None,
        )),
        (CallKind::Models, _) => Reply::Send(http_json(
            200,
            &[],
            &json!({
                "object": "list",
                "data": [{ "id": MODEL, "object": "model", "created": 0, "owned_by": "mock" }],
            }),
        )),
        _ => Reply::Send(error(
            404,
            &[],
            "mock: unknown path",
            "invalid_request_error",
            None,
        )),
    }
}

/// An OpenAI error response.
fn error(
    status: u16,
    extra: &[(&str, String)],
    message: &str,
    kind: &str,
    code: Option<&str>,
) -> Vec<u8> {
    http_json(
        status,
        extra,
        &json!({ "error": { "message": message, "type": kind, "param": null, "code": code } }),
    )
}

/// The response for a scripted answer to the call whose body is `body`.
fn render(answer: &Answer, body: &Value) -> Vec<u8> {
    match answer {
        Answer::Text(text) => {
            let model = body["model"].as_str().unwrap_or(MODEL);
            let id = format!("chatcmpl-mock-{}", next_id());
            if body["stream"] == true {
                http_sse(&[], &sse_completion(text, model, &id))
            } else {
                http_json(200, &[], &json_completion(text, model, &id))
            }
        }
        Answer::RateLimited { .. } => error(
            429,
            &answer.retry_headers(),
            "mock: Rate limit reached for requests",
            "requests",
            Some("rate_limit_exceeded"),
        ),
        Answer::ToolUse { name, input } => {
            let model = body["model"].as_str().unwrap_or(MODEL);
            let id = format!("chatcmpl-mock-{}", next_id());
            let call_id = format!("call_mock_{}", next_id());
            if body["stream"] == true {
                http_sse(&[], &sse_tool_call(name, input, &call_id, model, &id))
            } else {
                let mut completion = json_completion("", model, &id);
                completion["choices"][0]["message"] = json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": call_id,
                        "type": "function",
                        "function": { "name": name, "arguments": input.to_string() },
                    }],
                });
                completion["choices"][0]["finish_reason"] = json!("tool_calls");
                http_json(200, &[], &completion)
            }
        }
        Answer::Overloaded => error(
            503,
            &[],
            "mock: The server is overloaded or not ready yet.",
            "server_error",
            Some("overloaded"),
        ),
        Answer::ServerError => error(
            500,
            &[],
            "mock: The server had an error while processing your request.",
            "server_error",
            None,
        ),
        Answer::Hang => unreachable!("a hang is served by the core, not rendered"),
    }
}

fn created() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

fn usage() -> Value {
    json!({
        "prompt_tokens": INPUT_TOKENS,
        "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
    })
}

/// The non-streamed completion answering `text`.
fn json_completion(text: &str, model: &str, id: &str) -> Value {
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": text },
            "finish_reason": "stop",
        }],
        "usage": usage(),
    })
}

/// One SSE chunk of a streamed completion.
fn sse_chunk(
    id: &str,
    model: &str,
    delta: Value,
    finish_reason: Value,
    usage: Option<Value>,
) -> String {
    let mut chunk = json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created(),
        "model": model,
        "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
    });
    if let Some(usage) = usage {
        chunk["usage"] = usage;
    }
    sse_data(&chunk.to_string())
}

/// The SSE chunks of a completion that calls the tool `name` with `input` (its arguments in
/// two pieces), ending `finish_reason: tool_calls` and `[DONE]`.
fn sse_tool_call(name: &str, input: &Value, call_id: &str, model: &str, id: &str) -> String {
    let chunk = |delta, finish_reason, usage| sse_chunk(id, model, delta, finish_reason, usage);
    let arguments = input.to_string();
    let middle = (arguments.len() / 2..arguments.len())
        .find(|at| arguments.is_char_boundary(*at))
        .unwrap_or(arguments.len());
    let mut stream = chunk(
        json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": { "name": name, "arguments": &arguments[..middle] },
            }],
        }),
        Value::Null,
        None,
    );
    stream.push_str(&chunk(
        json!({ "tool_calls": [{ "index": 0, "function": { "arguments": &arguments[middle..] } }] }),
        Value::Null,
        None,
    ));
    stream.push_str(&chunk(json!({}), json!("tool_calls"), Some(usage())));
    stream.push_str(&sse_data("[DONE]"));
    stream
}

/// The SSE chunks of a completion answering `text`, ending with `[DONE]`.
fn sse_completion(text: &str, model: &str, id: &str) -> String {
    let chunk = |delta, finish_reason, usage| sse_chunk(id, model, delta, finish_reason, usage);
    let mut stream = chunk(
        json!({ "role": "assistant", "content": "" }),
        Value::Null,
        None,
    );
    for piece in pieces(text) {
        stream.push_str(&chunk(json!({ "content": piece }), Value::Null, None));
    }
    stream.push_str(&chunk(json!({}), json!("stop"), Some(usage())));
    stream.push_str(&sse_data("[DONE]"));
    stream
}

#[cfg(test)]
mod tests {
    use super::super::http::client::{
        assert_hangs_until, body, exchange, open, post, sse_payloads, status, wait_for_a_hang,
    };
    use super::*;

    fn completion(system: &str, user: &str) -> String {
        json!({
            "model": "mock-model",
            "stream": true,
            "messages": [
                { "role": "system", "content": system },
                { "role": "user", "content": [{ "type": "text", "text": user }] },
            ],
        })
        .to_string()
    }

    #[test]
    fn a_streamed_answer_is_chunks_then_done_and_titles_are_answered_apart() {
        let mock = MockChat::start();
        mock.script([Answer::text("hello there")]);
        let title = exchange(
            mock.address(),
            &post(
                "/v1/chat/completions",
                &completion(
                    "You are a title generator. You output ONLY a thread title.",
                    "hi",
                ),
            ),
        );
        assert_eq!(status(&title), 200, "{title}");
        let title_text: String = sse_payloads(&title)
            .iter()
            .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(title_text, DEFAULT_TITLE);
        assert_eq!(
            mock.unused_answers(),
            1,
            "a title call leaves the script alone"
        );

        let response = exchange(
            mock.address(),
            &post(
                "/v1/chat/completions",
                &completion("You are opencode.", "say hi"),
            ),
        );
        assert_eq!(status(&response), 200, "{response}");
        assert!(response.contains("content-type: text/event-stream\r\n"));
        let chunks = sse_payloads(&response);
        assert_eq!(chunks.last(), Some(&Value::String("[DONE]".into())));
        let text: String = chunks
            .iter()
            .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "hello there");
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let last = &chunks[chunks.len() - 2];
        assert_eq!(last["choices"][0]["finish_reason"], "stop");
        assert_eq!(last["usage"]["prompt_tokens"], INPUT_TOKENS);
        assert_eq!(last["object"], "chat.completion.chunk");

        assert_eq!(mock.title_calls().len(), 1);
        let calls = mock.model_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].system(), "You are opencode.");
        assert_eq!(calls[0].user_texts(), ["say hi"]);
        assert_eq!(mock.unused_answers(), 0);
    }

    #[test]
    fn a_non_streamed_answer_is_one_completion() {
        let mock = MockChat::start();
        mock.script([Answer::text("plain")]);
        let request = json!({
            "model": "m",
            "messages": [{ "role": "user", "content": "hi" }],
        });
        let response = exchange(
            mock.address(),
            &post("/v1/chat/completions", &request.to_string()),
        );
        let completion: Value = serde_json::from_str(body(&response)).unwrap();
        assert_eq!(completion["choices"][0]["message"]["content"], "plain");
        assert_eq!(completion["choices"][0]["finish_reason"], "stop");
        assert_eq!(completion["model"], "m");
    }

    #[test]
    fn errors_follow_the_script_with_their_retry_hints() {
        let mock = MockChat::start();
        mock.script([
            Answer::rate_limited(),
            Answer::rate_limited_ms(20),
            Answer::rate_limited_s(2),
            Answer::Overloaded,
            Answer::ServerError,
        ]);
        let call = || {
            exchange(
                mock.address(),
                &post(
                    "/v1/chat/completions",
                    &completion("You are opencode.", "x"),
                ),
            )
        };
        let plain = call();
        assert_eq!(status(&plain), 429, "{plain}");
        assert!(plain.contains("rate_limit_exceeded"));
        assert!(!plain.contains("retry-after"));
        let ms = call();
        assert!(ms.contains("retry-after-ms: 20\r\n"), "{ms}");
        assert!(!ms.contains("retry-after:"), "{ms}");
        assert!(call().contains("retry-after: 2\r\n"));
        assert_eq!(status(&call()), 503);
        assert_eq!(status(&call()), 500);
        let unscripted = call();
        assert_eq!(status(&unscripted), 400);
        assert!(unscripted.contains("no scripted answer left"));
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
                "429",
                "overloaded",
                "500",
                "unscripted",
                "models"
            ]
        );
    }

    #[test]
    fn a_hang_holds_the_connection_until_the_mock_is_dropped() {
        let mock = MockChat::start();
        mock.script([Answer::Hang]);
        let stream = open(
            mock.address(),
            &post(
                "/v1/chat/completions",
                &completion("You are opencode.", "x"),
            ),
        );
        wait_for_a_hang(|| mock.hanging());
        assert_eq!(mock.hanging(), 1);
        assert_hangs_until(stream, move || drop(mock));
    }
}
