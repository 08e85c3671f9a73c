//! The HTTP/1.1 and server-sent-events core that every loopback mock model server of the
//! tests shares: the OpenAI Responses mock (`src/testkit/mock_responses/`), the Anthropic Messages
//! mock and the OpenAI Chat Completions mock (`src/testkit/mock_models/`). Written once here; each
//! mock only says how it answers a request.
//!
//! - [`Server::start`] listens on `127.0.0.1:0` (a free port, loopback only) and serves each
//!   connection on its own thread with plain `std::net`, so it needs no async runtime and works
//!   the same whether or not the test runs inside an actix system.
//! - One request per connection: the handler's [`Reply`] is sent with `Connection: close` and
//!   the connection is closed after it, so a client never reuses one and there is no keep-alive
//!   state to get wrong. A connection that closes before its request line (a client's
//!   preconnect it never used, the drop's wake-up) is ignored.
//! - The body is read by `Content-Length`, or decoded from chunked transfer encoding.
//! - A [`Reply::Hang`] sends nothing and holds the connection open until the server is
//!   dropped, the peer hangs up (its process died), or [`HANG_LIMIT`] has passed; then it is
//!   closed with no response. [`Server::hanging`] counts the connections held that way, so a
//!   test can see the client go away.
//! - Dropping the server stops accepting, joins the accept thread and ends every hang.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a connection may sit idle mid-request before the mock gives up on it: long
/// enough for any real client, short enough that a stuck one does not outlive the test.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest a [`Reply::Hang`] holds its connection (dropping the server ends it sooner).
pub const HANG_LIMIT: Duration = Duration::from_secs(20);

/// The largest request body accepted (a long conversation is a few hundred KB).
const MAX_BODY: usize = 16 * 1024 * 1024;

/// One request as a mock received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The request target as sent, query included (`/v1/messages?beta=true`).
    pub path: String,
    /// Header names lower-cased, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked when it came chunked.
    pub body: Vec<u8>,
    /// When it was received (for the gaps between a client's retries).
    pub at: Instant,
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

    /// The path without its query (`/v1/messages` for `/v1/messages?beta=true`).
    pub fn route(&self) -> &str {
        self.path.split('?').next().unwrap_or("")
    }
}

/// What a mock does with one request.
pub enum Reply {
    /// These bytes, a whole HTTP response (see [`http`]), then the connection is closed.
    Send(Vec<u8>),
    /// Nothing at all: the connection is held open and silent (see the module doc).
    Hang,
}

/// A handler: called once per request, on the connection's thread.
pub type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// A running loopback server. Dropping it stops accepting and ends every hang.
pub struct Server {
    address: SocketAddr,
    stopping: Arc<AtomicBool>,
    hanging: Arc<AtomicUsize>,
    acceptor: Option<JoinHandle<()>>,
}

impl Server {
    /// Starts a server on a free loopback port; `name` names its threads.
    pub fn start(name: &str, handler: Arc<Handler>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let address = listener.local_addr().expect("the mock's address");
        let stopping = Arc::new(AtomicBool::new(false));
        let hanging = Arc::new(AtomicUsize::new(0));
        let acceptor = {
            let shared = Shared {
                name: name.to_string(),
                handler,
                stopping: stopping.clone(),
                hanging: hanging.clone(),
            };
            std::thread::Builder::new()
                .name(name.to_string())
                .spawn(move || accept_loop(listener, shared))
                .expect("spawn the mock's accept thread")
        };
        Server {
            address,
            stopping,
            hanging,
            acceptor: Some(acceptor),
        }
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// How many connections a [`Reply::Hang`] holds open right now.
    pub fn hanging(&self) -> usize {
        self.hanging.load(Ordering::SeqCst)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocking accept() so it sees the flag.
        let _ = TcpStream::connect(self.address);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// What the accept loop hands every connection thread.
#[derive(Clone)]
struct Shared {
    name: String,
    handler: Arc<Handler>,
    stopping: Arc<AtomicBool>,
    hanging: Arc<AtomicUsize>,
}

fn accept_loop(listener: TcpListener, shared: Shared) {
    for stream in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        // Connection threads are not joined: each ends when its peer is answered, hangs up or
        // times out, or (a hang) when the server stops.
        let _ = std::thread::Builder::new()
            .name(format!("{}-conn", shared.name))
            .spawn(move || {
                if let Err(error) = serve(stream, &shared) {
                    eprintln!("{}: connection error: {error}", shared.name);
                }
            });
    }
}

/// Reads one request, lets the handler answer it, and closes the connection.
fn serve(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let Some(request) = read_request(&mut reader)? else {
        // Closed before a request line (the drop's wake-up, or an unused preconnect).
        return Ok(());
    };
    match (shared.handler)(&request) {
        Reply::Hang => {
            shared.hanging.fetch_add(1, Ordering::SeqCst);
            hang(&stream, &shared.stopping);
            shared.hanging.fetch_sub(1, Ordering::SeqCst);
            Ok(())
        }
        Reply::Send(response) => {
            let mut stream = stream;
            stream.write_all(&response)?;
            stream.flush()?;
            // Half-close first so the client reads the whole answer before it sees the end.
            let _ = stream.shutdown(Shutdown::Write);
            Ok(())
        }
    }
}

/// Holds `stream` open and silent until the server stops, the peer hangs up, or
/// [`HANG_LIMIT`] has passed; then closes it with no response.
fn hang(stream: &TcpStream, stopping: &AtomicBool) {
    let deadline = Instant::now() + HANG_LIMIT;
    // A short read timeout doubles as the polling interval; a read of 0 bytes is the peer
    // closing (an interrupted turn drops its request, a killed process its sockets).
    let _ = stream.set_read_timeout(Some(Duration::from_millis(50)));
    let mut byte = [0u8; 1];
    let mut reader = stream;
    while !stopping.load(Ordering::SeqCst) && Instant::now() < deadline {
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
pub fn next_id() -> u64 {
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
pub fn read_request(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
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
        at: Instant::now(),
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

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Unknown",
    }
}

/// A whole response with a `Content-Length` and `Connection: close`.
pub fn http(status: u16, content_type: &str, extra: &[(&str, String)], body: &[u8]) -> Vec<u8> {
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

/// A JSON response.
pub fn http_json(status: u16, extra: &[(&str, String)], body: &Value) -> Vec<u8> {
    http(
        status,
        "application/json",
        extra,
        body.to_string().as_bytes(),
    )
}

/// A 200 server-sent-event stream (the whole stream at once; the client reads it as it
/// would read a slow one).
pub fn http_sse(extra: &[(&str, String)], stream: &str) -> Vec<u8> {
    let mut headers = vec![("cache-control", "no-cache".to_string())];
    headers.extend(extra.iter().cloned());
    http(200, "text/event-stream", &headers, stream.as_bytes())
}

/// One named SSE event: `event:` names it and `data:` repeats the name as `type`, as the
/// OpenAI Responses and Anthropic Messages APIs do (clients dispatch on the data's `type`).
pub fn sse_event(data: &Value) -> String {
    let kind = data["type"].as_str().unwrap_or("message").to_string();
    format!("event: {kind}\ndata: {data}\n\n")
}

/// One unnamed SSE event (`data:` only), as the OpenAI Chat Completions API sends its chunks.
pub fn sse_data(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// The text split into the pieces a stream sends it in: one per word, the separators kept,
/// so the pieces add up to the text.
pub fn pieces(text: &str) -> Vec<&str> {
    text.split_inclusive(' ').collect()
}

/// Test helpers: a hand-written client of these servers.
#[cfg(test)]
pub mod client {
    use super::*;

    /// Sends raw request bytes and returns the whole raw response (the mock closes after it).
    pub fn exchange(address: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request).unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    /// A POST of a JSON body to `path`.
    pub fn post(path: &str, body: &str) -> Vec<u8> {
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    /// The status code of a raw response.
    pub fn status(response: &str) -> u16 {
        response
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0)
    }

    /// The body of a raw response.
    pub fn body(response: &str) -> &str {
        &response[response
            .find("\r\n\r\n")
            .map_or(response.len(), |at| at + 4)..]
    }

    /// The `data:` payloads of an SSE body, in order (`[DONE]` kept as a string).
    pub fn sse_payloads(response: &str) -> Vec<Value> {
        body(response)
            .lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| {
                serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.to_string()))
            })
            .collect()
    }

    /// The `event:` names of an SSE body, in order.
    pub fn sse_names(response: &str) -> Vec<String> {
        body(response)
            .lines()
            .filter_map(|line| line.strip_prefix("event: "))
            .map(str::to_string)
            .collect()
    }

    /// Connects, sends `request`, and returns the stream without reading (for hangs).
    pub fn open(address: SocketAddr, request: &[u8]) -> TcpStream {
        let mut stream = TcpStream::connect(address).unwrap();
        stream.write_all(request).unwrap();
        stream
    }

    /// Waits, at most 5 s, until a request hangs: `hanging` says how many hang now.
    pub fn wait_for_a_hang(hanging: impl Fn() -> usize) {
        let until = Instant::now() + Duration::from_secs(5);
        while hanging() == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Asserts that `stream` gets nothing for a while, then that it is closed, with no
    /// response, once `release` has run.
    pub fn assert_hangs_until(mut stream: TcpStream, release: impl FnOnce()) {
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
        let started = Instant::now();
        release();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty(), "closed without a response");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::client::*;
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_chunked_body_is_decoded_and_a_hang_counts_until_the_peer_leaves() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = {
            let seen = seen.clone();
            Arc::new(move |request: &Request| {
                seen.lock().unwrap().push(request.clone());
                if request.route() == "/hang" {
                    Reply::Hang
                } else {
                    Reply::Send(http_json(200, &[], &serde_json::json!({ "ok": true })))
                }
            })
        };
        let server = Server::start("mock-http-test", handler);
        let chunked =
            b"POST /x?beta=true HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
            5;ext=1\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\n\r\n";
        let response = exchange(server.address(), chunked);
        assert_eq!(status(&response), 200, "{response}");
        assert!(response.contains("connection: close\r\n"));
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen[0].body, b"{\"a\": 1}");
            assert_eq!(seen[0].json()["a"], 1);
            assert_eq!(seen[0].route(), "/x");
            assert_eq!(seen[0].path, "/x?beta=true");
        }

        let stream = open(server.address(), &post("/hang", "{}"));
        wait_for_a_hang(|| server.hanging());
        assert_eq!(server.hanging(), 1);
        drop(stream);
        let until = Instant::now() + Duration::from_secs(5);
        while server.hanging() == 1 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(server.hanging(), 0, "the peer hanging up ends the hang");
    }
}
