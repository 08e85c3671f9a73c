//! The HTTP API's `GET /api/v1/status` round trip beside the socket's `status`, in the same
//! run on the same daemon (goal: HTTP p50 ≤ 300 µs; the socket's is ~30 µs).
//!
//! Starts its own daemon (`corral daemon --detach`) on a temporary home, reads the address
//! from `status` and the token from `HOME/http.token`, then, after a warm-up, times CALLS
//! round trips each way, alternating in rounds of 100 so that both see the same machine:
//! - HTTP: one keep-alive connection, `Authorization: Bearer`, the response read to the end
//!   of its `Content-Length`;
//! - the socket: one connection, one JSON-RPC `status` at a time.
//!
//! Prints p50 / p90 / p99 / max of each. Run:
//! `cargo build --release --examples && cargo run --release --example http_bench [CALLS]`
//! (default 5000). It uses `corral` from the directory above its own (target/release).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::binaries;
use common::daemon::{Conn, Daemon};
use serde_json::json;

/// A keep-alive HTTP/1.1 connection that sends one GET at a time.
struct Http {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    request: Vec<u8>,
}

impl Http {
    fn open(listen: &str, path: &str, token: &str) -> Http {
        let stream = TcpStream::connect(listen).expect("the HTTP server listens");
        stream.set_nodelay(true).unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {listen}\r\nAuthorization: Bearer {token}\r\n\r\n"
        )
        .into_bytes();
        Http {
            reader: BufReader::with_capacity(1 << 16, stream.try_clone().unwrap()),
            writer: stream,
            request,
        }
    }

    /// One round trip: the body's length.
    fn get(&mut self) -> usize {
        self.writer.write_all(&self.request).unwrap();
        let mut line = String::new();
        let mut length = None;
        let mut first = true;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            if first {
                assert!(line.starts_with("HTTP/1.1 200"), "{line}");
                first = false;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().ok();
                }
            }
        }
        let length = length.expect("a sized body");
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        length
    }
}

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    println!(
        "{name:<28} n={:<6} p50 {:>7.1} µs  p90 {:>7.1} µs  p99 {:>7.1} µs  max {:>8.1} µs",
        samples.len(),
        at(0.50).as_secs_f64() * 1e6,
        at(0.90).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6,
        samples.last().unwrap().as_secs_f64() * 1e6,
    );
}

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("a number of calls"))
        .unwrap_or(5_000);
    let (corral, _fake) = binaries();
    let home = tempfile::tempdir().expect("a temporary home");
    let (daemon, _) = Daemon::start(&corral, home.path());
    let mut socket = Conn::open(&daemon.socket());
    socket.call("initialize", json!({ "protocol": 1 }));
    let status = socket.call("status", json!({}));
    let listen = status["http"]["listen"]
        .as_str()
        .unwrap_or_else(|| panic!("the daemon serves no HTTP: {}", status["http"]))
        .to_string();
    let token = std::fs::read_to_string(home.path().join("http.token")).expect("the token");
    let mut http = Http::open(&listen, "/api/v1/status", token.trim());
    println!(
        "daemon pid {} ({}), HTTP on {listen}; {calls} calls each way",
        daemon.pid,
        corral.display()
    );

    for _ in 0..500 {
        http.get();
        socket.call("status", json!({}));
    }
    let mut over_http = Vec::with_capacity(calls);
    let mut over_socket = Vec::with_capacity(calls);
    let mut bytes = 0;
    while over_http.len() < calls {
        for _ in 0..100 {
            let started = Instant::now();
            bytes = http.get();
            over_http.push(started.elapsed());
        }
        for _ in 0..100 {
            let started = Instant::now();
            socket.call("status", json!({}));
            over_socket.push(started.elapsed());
        }
    }
    println!("status body: {bytes} bytes");
    percentiles("HTTP GET /api/v1/status", over_http);
    percentiles("socket status", over_socket);
    daemon.stop();
}
