//! A loopback mock of the OpenAI Responses API (`POST /v1/responses`), for tests that drive the
//! real Codex CLI without any network or credentials.
//!
//! Codex speaks only the Responses API over HTTP/1.1 and reads the answer as server-sent
//! events. This mock is just enough of that:
//!
//! - Its HTTP is the core every mock model server of the tests shares
//!   (`src/testkit/mock_models/http.rs`): a free loopback port, one thread per connection, one
//!   request per connection (`Connection: close`), bodies by `Content-Length` or chunked.
//! - Every request is answered from a script, a queue of [`Answer`]s taken one per request in
//!   arrival order: a text turn (SSE), an HTTP 429 (with or without `Retry-After`) or an HTTP
//!   500. A request that finds the queue empty gets a 500 saying so, so an unexpected extra
//!   request fails the turn visibly instead of hanging it.
//! - Every request is recorded (method, path, headers, body) for the test's assertions, even
//!   one to a path other than `/v1/responses` (answered 404), so a test can also check that
//!   codex asked for nothing else.
//! - A [`Answer::Hang`] takes the request and sends nothing back, holding the connection
//!   open until the mock is dropped, codex hangs up, or [`HANG_LIMIT`] has passed: a turn that
//!   waits on the model, for interrupt tests.
//!
//! [`HANG_LIMIT`]: crate::testkit::mock_models::http::HANG_LIMIT

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

// The HTTP/1.1 and SSE core, shared with the other mock model servers.
pub use crate::testkit::mock_models::http::Request;
use crate::testkit::mock_models::http::{
    http_json, http_sse, next_id, pieces, sse_event, Reply, Server,
};

/// The token counts every text answer reports in `response.completed`, so a test can see them
/// come out of the engine's own `turn.completed` usage.
pub const INPUT_TOKENS: u64 = 42;
pub const OUTPUT_TOKENS: u64 = 7;

/// One scripted answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A completed assistant turn whose message is this text: one `response.output_text.delta`
    /// per word, then `response.output_item.done` and `response.completed` with usage.
    Text(String),
    /// HTTP 429 with an OpenAI-style `rate_limit_exceeded` body. Codex retries a 429 itself
    /// only when `Retry-After` is present; without it the turn fails at once.
    RateLimited { retry_after_s: Option<u64> },
    /// HTTP 500 with an OpenAI-style `server_error` body.
    ServerError,
    /// A completed turn whose output is one call of the tool `name` with these arguments
    /// (`response.output_item.done` of a `function_call`): codex runs the tool and calls the
    /// model again with its output. (Not every test binary that includes the mock calls.)
    #[allow(dead_code)]
    Call { name: String, arguments: Value },
    /// A call of a freeform tool (`response.output_item.done` of a `custom_tool_call`, its
    /// `input` raw text): codex's `apply_patch` is one.
    #[allow(dead_code)]
    Custom { name: String, input: String },
    /// No answer at all: the request is read and the connection held open, silent, until the
    /// mock is dropped, codex hangs up, or [`HANG_LIMIT`] has passed; then it is closed
    /// without a response.
    ///
    /// [`HANG_LIMIT`]: crate::testkit::mock_models::http::HANG_LIMIT
    Hang,
}

impl Answer {
    pub fn text(text: impl Into<String>) -> Answer {
        Answer::Text(text.into())
    }
}

impl Request {
    /// The conversation in the body's `input`: `(role, text)` of every message item, its text
    /// parts joined. This is where a resumed thread's replayed history shows.
    pub fn messages(&self) -> Vec<(String, String)> {
        let body = self.json();
        let Some(input) = body.get("input").and_then(Value::as_array) else {
            return Vec::new();
        };
        input
            .iter()
            .filter(|item| item.get("type").and_then(Value::as_str) == Some("message"))
            .map(|item| {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                let text = match item.get("content") {
                    Some(Value::String(text)) => text.clone(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|part| part.get("text").and_then(Value::as_str))
                        .collect::<Vec<_>>()
                        .join(""),
                    _ => String::new(),
                };
                (role.to_string(), text)
            })
            .collect()
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Answer>,
    requests: Vec<Request>,
}

/// The running mock. Dropping it stops accepting and ends every hang.
pub struct MockResponses {
    state: Arc<Mutex<State>>,
    server: Server,
}

impl MockResponses {
    /// Starts the mock on a free loopback port.
    pub fn start() -> MockResponses {
        let state = Arc::new(Mutex::new(State::default()));
        let handler = {
            let state = state.clone();
            Arc::new(move |request: &Request| answer(&state, request))
        };
        MockResponses {
            state,
            server: Server::start("mock-responses", handler),
        }
    }

    /// The provider's `base_url` (codex POSTs to `{base_url}/responses`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.address())
    }

    pub fn address(&self) -> SocketAddr {
        self.server.address()
    }

    /// Queues answers for the next requests, in order.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        lock(&self.state).script.extend(answers);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        lock(&self.state).requests.clone()
    }

    /// How many scripted answers no request has taken yet.
    pub fn unused_answers(&self) -> usize {
        lock(&self.state).script.len()
    }

    /// How many connections a [`Answer::Hang`] holds open right now.
    pub fn hanging(&self) -> usize {
        self.server.hanging()
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    // A panicking connection thread must not hide what was recorded before it.
    state.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// Records the request and answers it from the script.
fn answer(state: &Mutex<State>, request: &Request) -> Reply {
    let answer = {
        let mut state = lock(state);
        let answer = if request.method == "POST" && request.path == "/v1/responses" {
            Some(state.script.pop_front())
        } else {
            None
        };
        state.requests.push(request.clone());
        answer
    };
    match answer {
        Some(Some(Answer::Hang)) => Reply::Hang,
        Some(Some(answer)) => Reply::Send(render(&answer, next_id())),
        Some(None) => Reply::Send(http_json(
            500,
            &[],
            &error_body("mock: no scripted answer left", "server_error", None),
        )),
        None => Reply::Send(http_json(
            404,
            &[],
            &error_body("mock: unknown path", "invalid_request_error", None),
        )),
    }
}

/// The bytes of the HTTP response for `answer`.
fn render(answer: &Answer, id: u64) -> Vec<u8> {
    match answer {
        Answer::Text(text) => http_sse(&[], &sse_text_turn(text, id)),
        Answer::RateLimited { retry_after_s } => {
            let extra: Vec<(&str, String)> = retry_after_s
                .map(|seconds| ("retry-after", seconds.to_string()))
                .into_iter()
                .collect();
            http_json(
                429,
                &extra,
                &error_body(
                    "Rate limit reached for mock-model (mock).",
                    "requests",
                    Some("rate_limit_exceeded"),
                ),
            )
        }
        Answer::Hang => unreachable!("a hang is served by the core, not rendered"),
        Answer::Call { name, arguments } => http_sse(
            &[],
            &sse_call_turn(
                "function_call",
                name,
                ("arguments", Value::String(arguments.to_string())),
                id,
            ),
        ),
        Answer::Custom { name, input } => http_sse(
            &[],
            &sse_call_turn(
                "custom_tool_call",
                name,
                ("input", Value::String(input.clone())),
                id,
            ),
        ),
        Answer::ServerError => http_json(
            500,
            &[],
            &error_body("mock: internal server error", "server_error", None),
        ),
    }
}

fn error_body(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({ "error": { "message": message, "type": kind, "param": null, "code": code } })
}

/// The SSE stream of a completed turn whose one output item calls tool `name`: a `kind`
/// item (`function_call`, `custom_tool_call`) carrying its input as `field`.
fn sse_call_turn(kind: &str, name: &str, field: (&str, Value), id: u64) -> String {
    let response_id = format!("resp_mock_{id}");
    let mut item = json!({
        "id": format!("call_item_mock_{id}"),
        "type": kind,
        "status": "completed",
        "name": name,
        "call_id": format!("call_mock_{id}"),
    });
    item[field.0] = field.1;
    let mut stream = sse_event(&json!({
        "type": "response.created",
        "response": { "id": response_id },
    }));
    stream.push_str(&sse_event(&json!({
        "type": "response.output_item.done",
        "output_index": 0,
        "item": item,
    })));
    stream.push_str(&sse_completed(&response_id));
    stream
}

/// The `response.completed` event of a turn, with the usage every answer reports.
fn sse_completed(response_id: &str) -> String {
    sse_event(&json!({
        "type": "response.completed",
        "response": {
            "id": response_id,
            "usage": {
                "input_tokens": INPUT_TOKENS,
                "input_tokens_details": { "cached_tokens": 0 },
                "output_tokens": OUTPUT_TOKENS,
                "output_tokens_details": { "reasoning_tokens": 0 },
                "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
            },
        },
    }))
}

/// The SSE stream of a completed turn answering `text`.
fn sse_text_turn(text: &str, id: u64) -> String {
    let response_id = format!("resp_mock_{id}");
    let item_id = format!("msg_mock_{id}");
    let mut stream = sse_event(&json!({
        "type": "response.created",
        "response": { "id": response_id },
    }));
    // The item opens before its deltas, as in the real API: codex attaches deltas to the
    // open item and logs "OutputTextDelta without active item" otherwise.
    stream.push_str(&sse_event(&json!({
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        },
    })));
    for word in pieces(text) {
        stream.push_str(&sse_event(&json!({
            "type": "response.output_text.delta",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "delta": word,
        })));
    }
    stream.push_str(&sse_event(&json!({
        "type": "response.output_item.done",
        "output_index": 0,
        "item": {
            "id": item_id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{ "type": "output_text", "text": text, "annotations": [] }],
        },
    })));
    stream.push_str(&sse_completed(&response_id));
    stream
}

/// The mock against a hand-written client, so its HTTP and SSE are checked even where the
/// real codex binary is not installed.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::mock_models::http::client::{
        assert_hangs_until, exchange, open, post, sse_payloads, wait_for_a_hang,
    };

    #[test]
    fn a_text_answer_is_an_sse_turn_and_the_request_is_recorded() {
        let mock = MockResponses::start();
        mock.script([Answer::text("hello there")]);
        let response = exchange(
            mock.address(),
            &post("/v1/responses", r#"{"model":"m","input":[]}"#),
        );
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.contains("content-type: text/event-stream\r\n"));
        assert!(response.contains("connection: close\r\n"));
        let events = sse_payloads(&response);
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.output_item.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_item.done",
                "response.completed"
            ]
        );
        let deltas: String = events.iter().filter_map(|e| e["delta"].as_str()).collect();
        assert_eq!(deltas, "hello there");
        assert_eq!(events[4]["item"]["content"][0]["text"], "hello there");
        assert_eq!(events[5]["response"]["usage"]["input_tokens"], INPUT_TOKENS);
        let requests = mock.requests();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].path, "/v1/responses");
        assert_eq!(requests[0].header("Content-Type"), Some("application/json"));
        assert_eq!(requests[0].json()["model"], "m");
        assert_eq!(mock.unused_answers(), 0);
    }

    #[test]
    fn answers_follow_the_script_and_an_empty_script_is_a_500() {
        let mock = MockResponses::start();
        mock.script([
            Answer::RateLimited {
                retry_after_s: None,
            },
            Answer::RateLimited {
                retry_after_s: Some(3),
            },
            Answer::ServerError,
        ]);
        let post = || post("/v1/responses", "{}");
        let first = exchange(mock.address(), &post());
        assert!(
            first.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{first}"
        );
        assert!(!first.to_ascii_lowercase().contains("retry-after"));
        assert!(first.contains("rate_limit_exceeded"));
        let second = exchange(mock.address(), &post());
        assert!(second.contains("retry-after: 3\r\n"), "{second}");
        assert!(exchange(mock.address(), &post()).starts_with("HTTP/1.1 500 "));
        let unscripted = exchange(mock.address(), &post());
        assert!(
            unscripted.contains("no scripted answer left"),
            "{unscripted}"
        );
        assert_eq!(mock.requests().len(), 4);
    }

    #[test]
    fn a_hang_sends_nothing_until_the_mock_is_dropped() {
        let mock = MockResponses::start();
        mock.script([Answer::Hang]);
        let stream = open(mock.address(), &post("/v1/responses", "{}"));
        wait_for_a_hang(|| mock.hanging());
        assert_eq!(mock.requests().len(), 1, "the hung request is recorded");
        assert_hangs_until(stream, move || drop(mock));
    }

    #[test]
    fn another_path_is_a_404() {
        let mock = MockResponses::start();
        let missing = exchange(
            mock.address(),
            b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
        );
        assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
        let requests = mock.requests();
        assert_eq!(
            (requests[0].method.as_str(), requests[0].path.as_str()),
            ("GET", "/v1/models")
        );
        assert_eq!(mock.unused_answers(), 0);
    }

    #[test]
    fn the_conversation_is_read_from_the_input() {
        let body = json!({ "input": [
            { "type": "message", "role": "developer", "content": [{ "type": "input_text", "text": "rules" }] },
            { "type": "message", "role": "user", "content": [{ "type": "input_text", "text": "say " }, { "type": "input_text", "text": "hi" }] },
            { "type": "reasoning", "summary": [] },
            { "type": "message", "role": "assistant", "content": [{ "type": "output_text", "text": "hello" }] },
        ]});
        let request = Request {
            method: "POST".into(),
            path: "/v1/responses".into(),
            headers: Vec::new(),
            body: body.to_string().into_bytes(),
            at: std::time::Instant::now(),
        };
        assert_eq!(
            request.messages(),
            [
                ("developer".to_string(), "rules".to_string()),
                ("user".to_string(), "say hi".to_string()),
                ("assistant".to_string(), "hello".to_string()),
            ]
        );
    }
}
