//! A loopback mock of the OpenAI Responses API (`POST /v1/responses`), for tests that drive the
//! real Codex CLI without any network or credentials.
//!
//! Codex speaks only the Responses API over HTTP/1.1 and reads the answer as server-sent
//! events (`../shared/reference/codex.md` §2–3). This mock is just enough of that:
//!
//! - It listens on `127.0.0.1:0` (a free port, loopback only) and serves each connection on
//!   its own thread with plain `std::net`, so it needs no async runtime and works the same
//!   whether or not the test runs inside an actix system.
//! - Every request is answered from a script, a queue of [`Answer`]s taken one per request in
//!   arrival order: a text turn (SSE), an HTTP 429 (with or without `Retry-After`) or an HTTP
//!   500. A request that finds the queue empty gets a 500 saying so, so an unexpected extra
//!   request fails the turn visibly instead of hanging it.
//! - Every request is recorded (method, path, headers, body) for the test's assertions, even
//!   one to a path other than `/v1/responses` (answered 404), so a test can also check that
//!   codex asked for nothing else.
//! - A [`Answer::Hang`] takes the request and sends nothing back, holding the connection
//!   open until the mock is dropped or [`HANG_LIMIT`] has passed: a turn that waits on the
//!   model, for interrupt tests.
//! - The request body is read by `Content-Length`, or decoded from chunked transfer encoding.
//!   Each answer says `Connection: close` and the connection is closed after it: a client then
//!   never reuses a connection, so there is no keep-alive state to get wrong.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

/// How long a connection may sit idle mid-request before the mock gives up on it: long
/// enough for any real client, short enough that a stuck one does not outlive the test.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest a [`Answer::Hang`] holds its connection (the mock's drop ends it sooner).
pub const HANG_LIMIT: Duration = Duration::from_secs(20);

/// The largest request body accepted (codex sends ~21–40 KB; a history grows it).
const MAX_BODY: usize = 16 * 1024 * 1024;

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
    /// No answer at all: the request is read and the connection held open, silent, until the
    /// mock is dropped or [`HANG_LIMIT`] has passed; then it is closed without a response.
    Hang,
}

impl Answer {
    pub fn text(text: impl Into<String>) -> Answer {
        Answer::Text(text.into())
    }
}

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked when it came chunked.
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON (`Value::Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

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

/// The running mock. Dropping it stops accepting and joins the accept thread.
pub struct MockResponses {
    address: SocketAddr,
    state: Arc<Mutex<State>>,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl MockResponses {
    /// Starts the mock on a free loopback port.
    pub fn start() -> MockResponses {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("the mock's address");
        let state = Arc::new(Mutex::new(State::default()));
        let stopping = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let state = state.clone();
            let stopping = stopping.clone();
            std::thread::Builder::new()
                .name("mock-responses".into())
                .spawn(move || accept_loop(listener, state, stopping))
                .expect("spawn the mock's accept thread")
        };
        MockResponses {
            address,
            state,
            stopping,
            acceptor: Some(acceptor),
        }
    }

    /// The provider's `base_url` (codex POSTs to `{base_url}/responses`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// Queues answers for the next requests, in order.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.lock().script.extend(answers);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.lock().requests.clone()
    }

    /// How many scripted answers no request has taken yet.
    pub fn unused_answers(&self) -> usize {
        self.lock().script.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panicking connection thread must not hide what was recorded before it.
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

impl Drop for MockResponses {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept() so it sees the flag.
        let _ = TcpStream::connect(self.address);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: TcpListener, state: Arc<Mutex<State>>, stopping: Arc<AtomicBool>) {
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let state = state.clone();
        let stopping = stopping.clone();
        // Connection threads are not joined: each ends when its peer is answered or times out.
        let _ = std::thread::Builder::new()
            .name("mock-responses-conn".into())
            .spawn(move || {
                if let Err(error) = serve(stream, &state, &stopping) {
                    eprintln!("mock responses: connection error: {error}");
                }
            });
    }
}

/// Reads one request, records it, answers it, and closes the connection.
fn serve(stream: TcpStream, state: &Mutex<State>, stopping: &AtomicBool) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let Some(request) = read_request(&mut reader)? else {
        // Closed before a request line (the Drop wake-up, or a probe).
        return Ok(());
    };
    let answer = {
        let mut state = state.lock().unwrap_or_else(|poison| poison.into_inner());
        let answer = if request.method == "POST" && request.path == "/v1/responses" {
            Some(state.script.pop_front())
        } else {
            None
        };
        state.requests.push(request);
        answer
    };
    let response = match answer {
        Some(Some(Answer::Hang)) => {
            hang(&stream, stopping);
            return Ok(());
        }
        Some(Some(answer)) => render(&answer, next_id()),
        Some(None) => http_json(
            500,
            &[],
            &error_body("mock: no scripted answer left", "server_error", None),
        ),
        None => http_json(
            404,
            &[],
            &error_body("mock: unknown path", "invalid_request_error", None),
        ),
    };
    let mut stream = stream;
    stream.write_all(&response)?;
    stream.flush()?;
    // Half-close first so the client reads the whole answer before it sees the end.
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

/// Holds `stream` open and silent until the mock stops, the peer hangs up, or [`HANG_LIMIT`]
/// has passed; then closes it with no response.
fn hang(stream: &TcpStream, stopping: &AtomicBool) {
    let deadline = std::time::Instant::now() + HANG_LIMIT;
    // A short read timeout doubles as the polling interval; a read of 0 bytes is the peer
    // closing (an interrupted turn drops its request).
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut byte = [0u8; 1];
    let mut reader = stream;
    while !stopping.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
        match reader.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// A number for response and item ids, unique within the test process.
fn next_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

fn invalid(message: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.into())
}

/// One line of the head, without its CRLF. `None` at end of stream.
fn read_line(reader: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line)? == 0 {
        return Ok(None);
    }
    while matches!(line.last(), Some(b'\n' | b'\r')) {
        line.pop();
    }
    String::from_utf8(line)
        .map(Some)
        .map_err(|_| invalid("a request head line is not UTF-8"))
}

/// Parses an HTTP/1.1 request: request line, headers, then the body by `Content-Length` or
/// chunked transfer encoding. `None` when the peer closed before sending anything.
fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
    let Some(request_line) = read_line(reader)? else {
        return Ok(None);
    };
    let mut parts = request_line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(invalid(format!("bad request line: {request_line:?}")));
    };
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader)?.ok_or_else(|| invalid("the head ended early"))?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line: {line:?}")))?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let mut request = Request {
        method: method.to_string(),
        path: path.to_string(),
        headers,
        body: Vec::new(),
    };
    let chunked = request
        .header("transfer-encoding")
        .is_some_and(|value| value.to_ascii_lowercase().contains("chunked"));
    request.body = if chunked {
        read_chunked(reader)?
    } else {
        let length = match request.header("content-length") {
            Some(value) => value
                .parse::<usize>()
                .map_err(|_| invalid(format!("bad content-length: {value:?}")))?,
            None => 0,
        };
        if length > MAX_BODY {
            return Err(invalid(format!("body of {length} bytes is too large")));
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    Ok(Some(request))
}

/// A chunked body: `SIZE[;ext]CRLF DATA CRLF`… until a zero size, then trailers up to a blank
/// line.
fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(reader)?.ok_or_else(|| invalid("the chunked body ended early"))?;
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| invalid(format!("bad chunk size: {line:?}")))?;
        if size == 0 {
            // Trailers (usually none), then the blank line.
            while let Some(trailer) = read_line(reader)? {
                if trailer.is_empty() {
                    break;
                }
            }
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(invalid("chunked body is too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        reader.read_exact(&mut crlf)?;
        if &crlf != b"\r\n" {
            return Err(invalid("a chunk does not end with CRLF"));
        }
    }
}

/// The bytes of the HTTP response for `answer`.
fn render(answer: &Answer, id: u64) -> Vec<u8> {
    match answer {
        Answer::Text(text) => http(
            200,
            "text/event-stream",
            &[("cache-control", "no-cache".to_string())],
            sse_text_turn(text, id).as_bytes(),
        ),
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
        Answer::Hang => unreachable!("a hang is served by `hang`, not rendered"),
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

fn http_json(status: u16, extra: &[(&str, String)], body: &Value) -> Vec<u8> {
    http(
        status,
        "application/json",
        extra,
        body.to_string().as_bytes(),
    )
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Unknown",
    }
}

/// A whole response with a `Content-Length` and `Connection: close`.
fn http(status: u16, content_type: &str, extra: &[(&str, String)], body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n",
        reason(status),
        body.len()
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// One SSE event: `event:` names it and `data:` repeats the name as `type`, as the real API
/// does (codex dispatches on the data's `type`).
fn sse_event(data: Value) -> String {
    let kind = data["type"].as_str().unwrap_or("message").to_string();
    format!("event: {kind}\ndata: {data}\n\n")
}

/// The SSE stream of a completed turn answering `text`.
fn sse_text_turn(text: &str, id: u64) -> String {
    let response_id = format!("resp_mock_{id}");
    let item_id = format!("msg_mock_{id}");
    let mut stream = sse_event(json!({
        "type": "response.created",
        "response": { "id": response_id },
    }));
    // The item opens before its deltas, as in the real API: codex attaches deltas to the
    // open item and logs "OutputTextDelta without active item" otherwise.
    stream.push_str(&sse_event(json!({
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
    // One delta per word, the separators kept, so the deltas add up to the text.
    for word in text.split_inclusive(' ') {
        stream.push_str(&sse_event(json!({
            "type": "response.output_text.delta",
            "item_id": item_id,
            "output_index": 0,
            "content_index": 0,
            "delta": word,
        })));
    }
    stream.push_str(&sse_event(json!({
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
    stream.push_str(&sse_event(json!({
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
    })));
    stream
}

/// The mock against a hand-written client, so its HTTP and SSE are checked even where the
/// real codex binary is not installed.
#[cfg(test)]
mod tests {
    use super::*;

    /// Sends raw request bytes and returns the whole raw response (the mock closes after it).
    fn exchange(mock: &MockResponses, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(mock.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    fn post(body: &str) -> Vec<u8> {
        format!(
            "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    /// The `data:` payloads of an SSE body, in order.
    fn sse_data(response: &str) -> Vec<Value> {
        let body = &response[response.find("\r\n\r\n").unwrap() + 4..];
        body.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap())
            .collect()
    }

    #[test]
    fn a_text_answer_is_an_sse_turn_and_the_request_is_recorded() {
        let mock = MockResponses::start();
        mock.script([Answer::text("hello there")]);
        let response = exchange(&mock, &post(r#"{"model":"m","input":[]}"#));
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.contains("content-type: text/event-stream\r\n"));
        assert!(response.contains("connection: close\r\n"));
        let events = sse_data(&response);
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
        let first = exchange(&mock, &post("{}"));
        assert!(
            first.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{first}"
        );
        assert!(!first.to_ascii_lowercase().contains("retry-after"));
        assert!(first.contains("rate_limit_exceeded"));
        let second = exchange(&mock, &post("{}"));
        assert!(second.contains("retry-after: 3\r\n"), "{second}");
        assert!(exchange(&mock, &post("{}")).starts_with("HTTP/1.1 500 "));
        let unscripted = exchange(&mock, &post("{}"));
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
        let mut stream = TcpStream::connect(mock.address).unwrap();
        stream.write_all(&post("{}")).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buffer = [0u8; 16];
        let silent = stream.read(&mut buffer).unwrap_err();
        assert!(
            matches!(
                silent.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{silent:?}"
        );
        assert_eq!(mock.requests().len(), 1, "the hung request is recorded");
        let started = std::time::Instant::now();
        drop(mock);
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "closed without a response");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_chunked_body_is_decoded_and_another_path_is_a_404() {
        let mock = MockResponses::start();
        mock.script([Answer::text("ok")]);
        let chunked =
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
            5;ext=1\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\n\r\n";
        let response = exchange(&mock, chunked);
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        let missing = exchange(&mock, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(missing.starts_with("HTTP/1.1 404 "), "{missing}");
        let requests = mock.requests();
        assert_eq!(requests[0].body, b"{\"a\": 1}");
        assert_eq!(requests[0].json()["a"], 1);
        assert_eq!(
            (requests[1].method.as_str(), requests[1].path.as_str()),
            ("GET", "/v1/models")
        );
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
