//! The person in the loop, timed (issue 32, Performance): a detached daemon, project `c` on
//! the fake engine in claude's form (which asks through claude's stream-json control protocol)
//! under the policy `ask`.
//!
//! ROUNDS times, one after the other: a prompt whose engine asks to write a file; the request
//! is taken from the session's event stream, `approvals.list` and `GET /api/v1/approvals`, then
//! approved over the socket, and the engine writes the file.
//!
//! - **asked → event**: from the engine's request (its `fake_asked_at_us`, written just before
//!   the request line) to `approval.requested` read from an `events.subscribe` stream — what
//!   the dashboard's WebSocket and `send --wait` see;
//! - **asked → approvals.list**, **asked → HTTP**: to the request in a list call's answer
//!   (the call made once the event came, so its own round trip is inside);
//! - **approve → tool runs**: from the `approvals.answer` call's start to the engine's tool
//!   running (the tool result's `fake_ran_at_us`);
//! - **engine turn**: the run's own time (`run.started` → `run.exited`) without the wait for
//!   the person, side by side.
//!
//! Then PLAIN prompts that ask nothing, alternating between a session under `ask` and one
//! under `workspace-write`: `prompt.send` → `prompt.done` on the stream, to show that asking
//! nothing costs nothing.
//!
//! Run: `cargo build --release && cargo build --release --examples &&
//!       target/release/examples/approval_bench [ROUNDS [PLAIN]]` (defaults 50 40).

mod common;

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use common::binaries;
use common::daemon::{Conn, Daemon};
use serde_json::{json, Value};

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// The next `events.event` notification's event on a subscribed connection.
fn next_event(conn: &mut Conn) -> Value {
    let mut line = String::new();
    loop {
        line.clear();
        let read = conn.reader.read_line(&mut line).expect("the stream");
        assert!(read > 0, "the daemon closed the stream");
        let message: Value = serde_json::from_str(&line).expect("a JSON line");
        if message["method"] == "events.event" {
            let params = &message["params"];
            return params
                .get("event")
                .cloned()
                .unwrap_or_else(|| params.clone());
        }
    }
}

/// One GET on a connection of its own: the body.
fn http_get(listen: &str, path: &str, token: &str) -> String {
    let mut stream = TcpStream::connect(listen).expect("the HTTP server");
    stream.set_nodelay(true).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {listen}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn percentiles(label: &str, mut values: Vec<u64>) {
    values.sort_unstable();
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    println!(
        "{label:<28} p50 {:>8.2} ms   p90 {:>8.2} ms   max {:>8.2} ms   (n={})",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(*values.last().unwrap()),
        values.len()
    );
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(50, |n| n.parse().expect("ROUNDS"));
    let plain: usize = args.next().map_or(40, |n| n.parse().expect("PLAIN"));
    let (corral, fake) = binaries();
    let home = tempfile::tempdir().expect("a home");
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let work = home.path().join("c");
    let other = home.path().join("w");
    let out = home.path().join("out");
    for dir in [&work, &other, &out] {
        std::fs::create_dir(dir).unwrap();
    }
    let (daemon, _) = Daemon::start(&corral, home.path());
    let mut conn = Conn::open(&daemon.socket());
    conn.call("initialize", json!({ "protocol": 1 }));
    conn.call(
        "settings.set",
        json!({ "name": "engines.claude.path", "value": fake.to_str().unwrap() }),
    );
    for (name, dir, policy) in [("c", &work, "ask"), ("w", &other, "workspace-write")] {
        conn.call(
            "project.add",
            json!({ "name": name, "path": dir.to_str().unwrap(), "engine": "claude", "policy": policy }),
        );
    }
    let session = conn.call("session.new", json!({ "project": "c", "title": "asks" }))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let status = conn.call("status", json!({}));
    let listen = status["http"]["listen"].as_str().map(str::to_string);
    let token = std::fs::read_to_string(home.path().join("http.token")).unwrap_or_default();
    let mut stream = Conn::open(&daemon.socket());
    stream.call("initialize", json!({ "protocol": 1 }));
    stream.call("events.subscribe", json!({ "session": session }));
    println!(
        "daemon pid {} ({}); {rounds} prompts that ask, {plain} that do not",
        daemon.pid,
        corral.display()
    );

    let (mut to_event, mut to_list, mut to_http, mut to_tool, mut turn) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds + 2 {
        let target = out.join(format!("{round}.txt"));
        let text = format!("@fake ask=Write:{}\n@fake answer=ok\ngo", target.display());
        conn.call("prompt.send", json!({ "session": session, "text": text }));
        let mut started = 0i64;
        let asked = loop {
            let event = next_event(&mut stream);
            match event["kind"].as_str() {
                Some("run.started") => started = event["at"].as_i64().unwrap(),
                Some("approval.requested") => break event,
                _ => {}
            }
        };
        let seen = now_us();
        let approval = &asked["payload"]["approval"];
        let asked_at = approval["input"]["fake_asked_at_us"]
            .as_u64()
            .expect("the fake's time");
        let id = approval["id"].as_str().unwrap().to_string();
        let listed = conn.call("approvals.list", json!({}));
        let listed_at = now_us();
        assert!(listed
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == id.as_str()));
        let http_at = listen.as_ref().map(|listen| {
            let body = http_get(listen, "/api/v1/approvals", token.trim());
            assert!(body.contains(&id), "{body}");
            now_us()
        });
        let answered_at = now_us();
        conn.call(
            "approvals.answer",
            json!({ "approval": id, "decision": "approve" }),
        );
        let (mut exited, mut ran_at) = (0i64, 0u64);
        loop {
            let event = next_event(&mut stream);
            match event["kind"].as_str() {
                Some("tool") if event["payload"]["detail"]["fake_ran_at_us"].is_u64() => {
                    ran_at = event["payload"]["detail"]["fake_ran_at_us"]
                        .as_u64()
                        .unwrap();
                }
                Some("run.exited") => exited = event["at"].as_i64().unwrap(),
                Some("prompt.done") => break,
                Some("prompt.failed") => panic!("the prompt failed: {event}"),
                _ => {}
            }
        }
        assert!(target.exists(), "the engine wrote the file");
        if round < 2 {
            continue; // warm-up
        }
        to_event.push(seen.saturating_sub(asked_at));
        to_list.push(listed_at.saturating_sub(asked_at));
        if let Some(at) = http_at {
            to_http.push(at.saturating_sub(asked_at));
        }
        to_tool.push(ran_at.saturating_sub(answered_at));
        let waited_ms = (answered_at.saturating_sub(asked_at)) / 1000;
        turn.push((((exited - started).max(0) as u64).saturating_sub(waited_ms)) * 1000);
    }
    percentiles("asked → event (stream)", to_event);
    percentiles("asked → approvals.list", to_list);
    if !to_http.is_empty() {
        percentiles("asked → GET /api/v1/approvals", to_http);
    }
    percentiles("approve → tool runs", to_tool);
    percentiles("engine turn (no person)", turn);

    // Prompts that ask nothing, under ask and under workspace-write, alternating.
    let quiet = conn.call("session.new", json!({ "project": "w", "title": "plain" }))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut quiet_stream = Conn::open(&daemon.socket());
    quiet_stream.call("initialize", json!({ "protocol": 1 }));
    quiet_stream.call("events.subscribe", json!({ "session": quiet }));
    let round_trip = |conn: &mut Conn, events: &mut Conn, session: &str| -> u64 {
        let started = Instant::now();
        conn.call(
            "prompt.send",
            json!({ "session": session, "text": "@fake answer=ok\ngo" }),
        );
        loop {
            let event = next_event(events);
            if event["kind"] == "prompt.done" {
                return started.elapsed().as_micros() as u64;
            }
        }
    };
    let (mut asking, mut writing) = (Vec::new(), Vec::new());
    for round in 0..plain + 2 {
        let (a, w);
        if round % 2 == 0 {
            a = round_trip(&mut conn, &mut stream, &session);
            w = round_trip(&mut conn, &mut quiet_stream, &quiet);
        } else {
            w = round_trip(&mut conn, &mut quiet_stream, &quiet);
            a = round_trip(&mut conn, &mut stream, &session);
        }
        if round >= 2 {
            asking.push(a);
            writing.push(w);
        }
    }
    let median = |values: &mut Vec<u64>| {
        values.sort_unstable();
        values[values.len() / 2]
    };
    let (a, w) = (median(&mut asking.clone()), median(&mut writing.clone()));
    percentiles("prompt, ask, asks nothing", asking);
    percentiles("prompt, workspace-write", writing);
    println!(
        "ask vs workspace-write (median):  {:+.1} %",
        (a as f64 - w as f64) / w as f64 * 100.0
    );
    daemon.stop();
}
