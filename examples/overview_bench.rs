//! The cost of the daemon's `overview` with many sessions (issue 12: ≤ 20 ms server time with
//! 1,000 sessions).
//!
//! A daemon (`corral daemon --detach`) on a temporary home with the fake engine and one
//! project. Through its socket: SESSIONS sessions, each given PROMPTS prompts that the fake
//! engine answers with 8 KiB (waited for), then HANGING sessions whose prompt hangs (active, holding
//! the engine's slots) and as many again whose prompt waits for a slot. Then CALLS `overview`
//! requests, one at a time: the round trip from writing the request line to having read the
//! whole answer line (not parsed), p50 and p90, and the answer's size. The `monitor`
//! read of the same store (`store::overview::sessions` on a reader of this process) is timed
//! beside it, to tell the store's part from the socket's and the JSON's.
//!
//! Run: `cargo build --release --bin corral --bin corral-fake-engine --example overview_bench
//! && target/release/examples/overview_bench [SESSIONS [PROMPTS [CALLS]]]` (defaults 1000 1
//! 200).

mod common;

use std::io::BufRead;
use std::time::{Duration, Instant};

use common::binaries;
use common::daemon::{Conn, Daemon};
use serde_json::{json, Value};

/// Sessions whose prompt hangs (they hold the fake engine's slots).
const HANGING: usize = 3;

/// The length of each answer, in bytes (the answer is one line: the worst case of a reason).
const ANSWER: usize = 8 << 10;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|value| value.parse().expect("a number"))
        .collect();
    let arg = |index: usize, default: usize| args.get(index).copied().unwrap_or(default);
    let (sessions, prompts, calls) = (arg(0, 1_000), arg(1, 1), arg(2, 200).max(1));
    let (corral, fake) = binaries();
    let home = tempfile::tempdir().expect("a temporary home");
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let (daemon, _) = Daemon::start(&corral, home.path());
    let mut conn = Conn::open(&daemon.socket());
    conn.call(
        "initialize",
        json!({ "protocol": 1, "client": "overview_bench" }),
    );
    conn.call(
        "settings.set",
        json!({ "name": "engines.fake.path", "value": fake }),
    );
    conn.call(
        "settings.set",
        json!({ "name": "slots.fake", "value": HANGING.to_string() }),
    );
    conn.call(
        "project.add",
        json!({ "name": "p", "path": work, "engine": "fake" }),
    );

    let filled = Instant::now();
    let mut sent = Vec::new();
    for index in 0..sessions {
        let session = conn.call(
            "session.new",
            json!({ "project": "p", "title": format!("session {index}") }),
        );
        for prompt in 0..prompts {
            // Answers of a few KiB, as agents give: their first line is what the overview
            // shows, and the rest must cost it nothing.
            let answer = format!(
                "answer {index}.{prompt}: {}",
                "words of the answer ".repeat(ANSWER / 20)
            );
            let text = format!("@fake answer={answer}\nprompt {prompt}");
            sent.push(
                conn.call(
                    "prompt.send",
                    json!({ "session": session["id"], "text": text }),
                )["id"]
                    .clone(),
            );
        }
    }
    for prompt in &sent {
        conn.call("prompt.wait", json!({ "prompt": prompt }));
    }
    // Active sessions, and sessions whose prompt waits for a slot they hold.
    for index in 0..HANGING * 2 {
        let session = conn.call(
            "session.new",
            json!({ "project": "p", "title": format!("hanging {index}") }),
        );
        conn.call(
            "prompt.send",
            json!({ "session": session["id"], "text": "@fake hang\nhang" }),
        );
    }
    let total = sessions + HANGING * 2;
    println!(
        "{total} sessions, {} prompts answered, made in {:.1} s",
        sent.len(),
        filled.elapsed().as_secs_f64()
    );

    // Warm up, and check what is measured.
    let answer = conn.call("overview", json!({}));
    let listed = answer["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(listed, total, "overview lists every session");
    let states = count_states(&answer);
    let mut times = Vec::with_capacity(calls);
    let mut bytes = 0;
    let mut line = String::new();
    for id in 0..calls {
        let request = json!({ "jsonrpc": "2.0", "id": 1_000_000 + id, "method": "overview" });
        let started = Instant::now();
        conn.send(&request);
        line.clear();
        conn.reader.read_line(&mut line).expect("an answer");
        times.push(started.elapsed());
        bytes = line.len();
    }
    times.sort();
    let at = |quantile: f64| times[((times.len() - 1) as f64 * quantile).round() as usize];

    // The store's part alone: the sessions' query on a reader of this process.
    let reader = corral::store::sql::Conn::from(
        corral::store::open_reader(&home.path().join("corral.db")).expect("a reader"),
    );
    let mut reads = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let items = corral::store::overview::sessions(&reader).expect("the sessions' read");
        reads.push(started.elapsed());
        assert_eq!(items.len(), total);
    }
    reads.sort();
    let read_at = |quantile: f64| reads[((reads.len() - 1) as f64 * quantile).round() as usize];

    println!("states: {states}");
    println!(
        "overview round trip over {calls} calls: p50 {} p90 {} max {} ({} KiB per answer)  \
         (goal: <= 20 ms with 1,000 sessions)",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(*times.last().unwrap()),
        bytes / 1024
    );
    println!(
        "the sessions' query alone (store::overview::sessions, same store): p50 {} p90 {}",
        ms(read_at(0.5)),
        ms(read_at(0.9))
    );
    // (The hanging engines end with the daemon.)
    daemon.stop();
}

fn count_states(answer: &Value) -> String {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for item in answer["sessions"].as_array().into_iter().flatten() {
        *counts
            .entry(item["state"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
    }
    counts
        .iter()
        .map(|(state, count)| format!("{state} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}
