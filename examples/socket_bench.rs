//! The daemon's socket under load, measured from outside as a client sees it. Starts its own
//! daemon (`corral daemon --detach`) on a temporary home with the fake engine, and stops it at
//! the end.
//!
//! 1. `status` round trip on one connection: CALLS calls after a warm-up, p50 / p99 / max
//!    (goal: p50 ≤ 200 µs).
//! 2. `corral send SESSION PROMPT` as a whole process, the daemon running: wall clock of the
//!    process, median of SENDS runs (goal ≤ 10 ms), to an idle session (the prompt starts at
//!    once on the fake engine, while the process is still recording its own exit) and to a
//!    busy one (the prompt is queued); `corral status` as the floor of any corral process.
//! 3. One session streaming EVENTS events (`@fake deltas=N`) to WATCHERS clients subscribed
//!    over the socket, each on its own connection and thread: every watcher must receive
//!    every event exactly once and in order (checked by sequence number); a watcher told
//!    `events.lagged` subscribes again from `resume_after` (counted and reported). "None
//!    blocked": the same prompt is first run with no watcher, and the session's own rate
//!    (first to last event's commit time) is compared.
//!
//! Run: `cargo build --release && cargo run --release --example socket_bench [CALLS [SENDS [EVENTS [WATCHERS]]]]`
//! (defaults 2000 50 100000 10). It uses `corral` and `corral-fake-engine` from the directory
//! above its own (target/release).

mod common;

use common::binaries;
use common::daemon::{Conn, Daemon};

use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Events a `@fake deltas=N` prompt stores besides its N progress items.
const OTHER_EVENTS: u64 = 9;

fn main() {
    let arg = |index: usize, default: u64| -> u64 {
        std::env::args()
            .nth(index)
            .map(|value| value.parse().expect("a number"))
            .unwrap_or(default)
    };
    let calls = arg(1, 2_000) as usize;
    let sends = arg(2, 50) as usize;
    let events = arg(3, 100_000);
    let watchers = arg(4, 10) as usize;

    let (corral, fake) = binaries();
    let home = tempfile::tempdir().expect("a temporary home");
    let (daemon, _) = Daemon::start(&corral, home.path());
    println!(
        "daemon pid {} ({}), home {}",
        daemon.pid,
        corral.display(),
        home.path().display()
    );

    let mut conn = Conn::open(&daemon.socket());
    conn.call(
        "initialize",
        json!({ "protocol": 1, "client": "socket_bench" }),
    );
    conn.call(
        "settings.set",
        json!({ "name": "engines.fake.path", "value": fake }),
    );
    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    conn.call(
        "project.add",
        json!({ "name": "bench", "path": project, "engine": "fake" }),
    );

    status_round_trips(&mut conn, calls);
    send_processes(&corral, &daemon, &mut conn, sends);
    streaming(&daemon, &mut conn, events, watchers);

    drop(conn);
    let stopped = daemon.stop();
    println!("daemon stopped in {}", ms(stopped));
}

// ---------------------------------------------------------------------------------------------

fn status_round_trips(conn: &mut Conn, calls: usize) {
    for _ in 0..calls / 10 + 50 {
        conn.call("status", Value::Null);
    }
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        conn.call("status", Value::Null);
        times.push(started.elapsed());
    }
    times.sort();
    println!(
        "status round trip over the socket, {calls} calls on one connection: p50 {} p90 {} \
         p99 {} max {} (goal p50 <= 200 us)",
        us(percentile(&times, 50.0)),
        us(percentile(&times, 90.0)),
        us(percentile(&times, 99.0)),
        us(*times.last().unwrap())
    );
}

fn send_processes(corral: &Path, daemon: &Daemon, conn: &mut Conn, sends: usize) {
    let help = Command::new(corral)
        .args(["send", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("corral runs");
    if !help.success() {
        println!("corral send: not in this build of corral; skipped");
        return;
    }
    let run = |args: &[&str]| {
        let started = Instant::now();
        let mut command = Command::new(corral);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CORRAL_") {
                command.env_remove(key);
            }
        }
        let output = command
            .arg("--home")
            .arg(&daemon.home)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("corral runs");
        let took = started.elapsed();
        assert!(
            output.status.success(),
            "corral {args:?} failed: {output:?}"
        );
        took
    };
    // Each run on its own: a short pause (not counted) lets the previous prompt end.
    let measure = |args: &[&str]| {
        for _ in 0..3 {
            run(args);
        }
        let mut times: Vec<Duration> = (0..sends)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(20));
                run(args)
            })
            .collect();
        times.sort();
        times
    };
    let report = |what: &str, times: &[Duration]| {
        println!(
            "{what}, {sends} runs: median {} p90 {} min {} max {}",
            ms(percentile(times, 50.0)),
            ms(percentile(times, 90.0)),
            ms(times[0]),
            ms(*times.last().unwrap())
        );
    };

    // Any corral command pays for its exec record (store opened, exec row written twice).
    report(
        "corral status (whole process, for comparison)",
        &measure(&["status"]),
    );

    let idle = conn.call(
        "session.new",
        json!({ "project": "bench", "title": "idle" }),
    );
    let idle = idle["id"].as_str().unwrap().to_string();
    report(
        "corral send to an idle session (the prompt starts at once) (goal median <= 10 ms)",
        &measure(&["send", &idle, "say", "hello"]),
    );

    let busy = conn.call(
        "session.new",
        json!({ "project": "bench", "title": "busy" }),
    );
    let busy = busy["id"].as_str().unwrap().to_string();
    conn.call(
        "prompt.send",
        json!({ "session": busy, "text": "@fake hang\nhold the session" }),
    );
    report(
        "corral send to a busy session (the prompt is queued)",
        &measure(&["send", &busy, "say", "hello"]),
    );
    conn.call("prompt.cancel", json!({ "target": busy }));

    // Let every prompt end before the next measurement.
    for session in [&idle, &busy] {
        let shown = conn.call("session.show", json!({ "session": session }));
        if let Some(last) = shown["prompts"].as_array().and_then(|p| p.last()) {
            conn.call("prompt.wait", json!({ "prompt": last["id"] }));
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// What one watcher saw.
struct Watched {
    events: u64,
    lagged: u64,
    /// From the prompt's send to this watcher's `prompt.done`.
    finished: Duration,
    error: Option<String>,
}

fn streaming(daemon: &Daemon, conn: &mut Conn, events: u64, watchers: usize) {
    let text = format!("@fake deltas={events}\nstream");
    let expected = events + OTHER_EVENTS;

    // Alone: the session's own pace, nobody watching.
    let alone = conn.call(
        "session.new",
        json!({ "project": "bench", "title": "alone" }),
    );
    let cpu = cpu_time(daemon.pid);
    let threads_before = thread_times(daemon.pid);
    let started = Instant::now();
    let prompt = conn.call(
        "prompt.send",
        json!({ "session": alone["id"], "text": text }),
    );
    conn.call("prompt.wait", json!({ "prompt": prompt["id"] }));
    let alone_wall = started.elapsed();
    let alone_cpu = cpu_time(daemon.pid) - cpu;
    let alone_threads = busiest_threads(&threads_before, &thread_times(daemon.pid));
    let alone_span = event_span(conn, alone["id"].as_str().unwrap());

    // Watched.
    let session = conn.call(
        "session.new",
        json!({ "project": "bench", "title": "watched" }),
    );
    let session_id = session["id"].as_str().unwrap().to_string();
    let ready = Arc::new(Barrier::new(watchers + 1));
    let go = Arc::new(Barrier::new(watchers + 1));
    let send_time = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let threads: Vec<_> = (0..watchers)
        .map(|_| {
            let socket = daemon.socket();
            let session_id = session_id.clone();
            let ready = ready.clone();
            let go = go.clone();
            let send_time = send_time.clone();
            std::thread::spawn(move || {
                watch(&socket, &session_id, expected, &ready, &go, &send_time)
            })
        })
        .collect();
    ready.wait();
    let cpu = cpu_time(daemon.pid);
    let threads_before = thread_times(daemon.pid);
    let started = Instant::now();
    *send_time.lock().unwrap() = Some(started);
    let prompt = conn.call(
        "prompt.send",
        json!({ "session": session_id, "text": text }),
    );
    go.wait();
    conn.call("prompt.wait", json!({ "prompt": prompt["id"] }));
    let watched_wall = started.elapsed();
    let watched_span = event_span(conn, &session_id);
    let seen: Vec<Watched> = threads
        .into_iter()
        .map(|thread| thread.join().expect("a watcher thread"))
        .collect();
    let watched_cpu = cpu_time(daemon.pid) - cpu;
    let watched_threads = busiest_threads(&threads_before, &thread_times(daemon.pid));

    let all_wall = seen.iter().map(|w| w.finished).max().unwrap_or_default();
    let complete = seen
        .iter()
        .filter(|w| w.error.is_none() && w.events == expected)
        .count();
    let lagged: u64 = seen.iter().map(|w| w.lagged).sum();
    for (index, watched) in seen.iter().enumerate() {
        if let Some(error) = &watched.error {
            println!("  watcher {index}: {error}");
        }
    }
    println!(
        "streaming {expected} events of one session ({events} deltas + {OTHER_EVENTS}):\n  \
         alone: prompt {}, events stored at {:.0} events/s, daemon CPU {} ({alone_threads})\n  \
         with {watchers} watchers: prompt {}, events stored at {:.0} events/s, daemon CPU {} \
         ({watched_threads}); every watcher done after {} -> {:.0} events/s delivered to each, \
         {:.0} events/s in all\n  \
         {complete}/{watchers} watchers got all {expected} events in order, none missed or \
         repeated; events.lagged notices: {lagged}",
        ms(alone_wall),
        expected as f64 / alone_span.as_secs_f64(),
        ms(alone_cpu),
        ms(watched_wall),
        expected as f64 / watched_span.as_secs_f64(),
        ms(watched_cpu),
        ms(all_wall),
        expected as f64 / all_wall.as_secs_f64(),
        (expected * watchers as u64) as f64 / all_wall.as_secs_f64(),
    );
}

/// The time between a session's first and last event, from their commit times.
fn event_span(conn: &mut Conn, session: &str) -> Duration {
    let history = conn.call("history", json!({ "session": session }));
    let prompt = &history["prompts"][0];
    let from = prompt["started_at"].as_i64().unwrap();
    let to = prompt["finished_at"].as_i64().unwrap();
    Duration::from_millis((to - from).max(1) as u64)
}

/// One watcher: subscribes, then reads until `prompt.done`, checking that sequence numbers
/// go 1, 2, 3… with nothing missed or repeated.
fn watch(
    socket: &Path,
    session: &str,
    expected: u64,
    ready: &Barrier,
    go: &Barrier,
    send_time: &std::sync::Mutex<Option<Instant>>,
) -> Watched {
    let mut conn = Conn::open(socket);
    conn.call(
        "initialize",
        json!({ "protocol": 1, "client": "socket_bench watcher" }),
    );
    conn.call(
        "events.subscribe",
        json!({ "session": session, "after": 0 }),
    );
    ready.wait();
    go.wait();
    let started = send_time.lock().unwrap().expect("the send time");
    let mut watched = Watched {
        events: 0,
        lagged: 0,
        finished: Duration::ZERO,
        error: None,
    };
    let mut last = 0u64;
    let mut line = Vec::with_capacity(512);
    loop {
        line.clear();
        match conn.reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => {
                watched.error = Some(format!("connection lost after event {last}"));
                break;
            }
            Ok(_) => {}
        }
        let text = std::str::from_utf8(&line).unwrap_or("");
        if text.contains(r#""method":"events.lagged""#) {
            let notice: Value = serde_json::from_str(text).unwrap();
            let resume = notice["params"]["resume_after"].as_u64().unwrap();
            if resume != last {
                watched.error = Some(format!("lagged at {resume}, but the last event was {last}"));
                break;
            }
            watched.lagged += 1;
            conn.send(&json!({
                "jsonrpc": "2.0", "id": 100 + watched.lagged, "method": "events.subscribe",
                "params": { "session": session, "after": last }
            }));
            continue;
        }
        if !text.contains(r#""method":"events.event""#) {
            continue; // an answer (to a new subscribe)
        }
        let Some(seq) = field_number(text, r#""seq":"#) else {
            watched.error = Some(format!("an event without seq: {text}"));
            break;
        };
        if seq != last + 1 {
            watched.error = Some(format!("event {seq} after {last}"));
            break;
        }
        last = seq;
        watched.events += 1;
        if text.contains(r#""kind":"prompt.done""#) {
            watched.finished = started.elapsed();
            if last != expected {
                watched.error = Some(format!("prompt.done at {last}, expected {expected}"));
            }
            break;
        }
    }
    watched
}

/// The number after the last occurrence of `key` in a line (the event's `seq` comes after its
/// payload: the keys are in alphabetical order).
fn field_number(line: &str, key: &str) -> Option<u64> {
    let start = line.rfind(key)? + key.len();
    let digits: String = line[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

// ---------------------------------------------------------------------------------------------

/// CPU time (user + system) a process has used so far.
fn cpu_time(pid: i32) -> Duration {
    stat_cpu(&format!("/proc/{pid}/stat"))
}

/// CPU time per thread of a process: (thread id, name, time).
fn thread_times(pid: i32) -> Vec<(String, String, Duration)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .map(|task| {
            let tid = task.file_name().to_string_lossy().into_owned();
            let name = if tid == pid.to_string() {
                "main thread".to_string()
            } else {
                let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                format!("thread {tid} ({})", name.trim())
            };
            let time = stat_cpu(&task.path().join("stat").to_string_lossy());
            (tid, name, time)
        })
        .collect()
}

/// The busiest threads between two `thread_times` snapshots, as text.
fn busiest_threads(
    before: &[(String, String, Duration)],
    after: &[(String, String, Duration)],
) -> String {
    let mut used: Vec<(String, Duration)> = after
        .iter()
        .map(|(tid, name, time)| {
            let earlier = before
                .iter()
                .find(|(id, _, _)| id == tid)
                .map(|(_, _, time)| *time)
                .unwrap_or_default();
            (name.clone(), time.saturating_sub(earlier))
        })
        .filter(|(_, time)| !time.is_zero())
        .collect();
    used.sort_by_key(|(_, time)| std::cmp::Reverse(*time));
    let parts: Vec<String> = used
        .iter()
        .take(4)
        .map(|(name, time)| format!("{name} {}", ms(*time)))
        .collect();
    parts.join(", ")
}

fn stat_cpu(path: &str) -> Duration {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let rest = stat.rfind(')').map(|end| &stat[end + 2..]).unwrap_or("");
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|field| field.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Duration::from_secs_f64(ticks as f64 / per_second)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p / 100.0).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn us(duration: Duration) -> String {
    format!("{:.0} us", duration.as_secs_f64() * 1e6)
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}
