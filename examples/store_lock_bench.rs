//! A store locked by another program while an engine floods its output: the daemon's memory
//! must stay flat (the worker stops reading the engine's pipe, the engine blocks on it) and
//! no event may be lost.
//!
//! A daemon in a temporary home runs one prompt on the fake engine that prints STEPS tool
//! lines as fast as it can (about 90 bytes each). As soon as its first events are stored, a
//! `sqlite3` shell takes the store's write lock (`BEGIN IMMEDIATE`) and holds it for
//! LOCK_SECONDS (under `store.lock_timeout_ms`, 60 s by default). Printed: the daemon's RSS
//! before the lock and its peak during it (sampled every 50 ms from `/proc`), how long the
//! engine was seen blocked writing to its full pipe, how many events were stored before and
//! after, and whether their numbers have a hole.
//!
//! Run with `cargo build --release && cargo build --release --examples &&
//! target/release/examples/store_lock_bench [STEPS] [LOCK_SECONDS]` (defaults 300000 and 10).
//! It uses `corral` and `corral-fake-engine` from the directory above its own, and `sqlite3`
//! from PATH.

mod common;

use common::binaries;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let steps: u64 = args.next().map_or(300_000, |n| n.parse().expect("STEPS"));
    let lock_for = Duration::from_secs(args.next().map_or(10, |n| n.parse().expect("SECONDS")));
    let (corral, fake) = binaries();
    let home = tempfile::tempdir().expect("a temporary home");
    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let run = |args: &[&str]| -> String {
        let output = Command::new(&corral)
            .args(args)
            .env("CORRAL_HOME", home.path())
            .env_remove("CORRAL_SESSION_ID")
            .stdin(Stdio::null())
            .output()
            .expect("corral runs");
        assert!(output.status.success(), "{args:?}: {output:?}");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    run(&["config", "set", "engines.fake.path", fake.to_str().unwrap()]);
    run(&[
        "project",
        "add",
        "p",
        work.to_str().unwrap(),
        "--engine",
        "fake",
    ]);
    let session: serde_json::Value =
        serde_json::from_str(&run(&["session", "new", "p", "--title", "flood", "--json"])).unwrap();
    let session = session["id"].as_str().unwrap().to_string();
    let daemon: i32 = std::fs::read_to_string(home.path().join("daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let db = home.path().join("corral.db");
    let reader = rusqlite::Connection::open(&db).unwrap();
    let count = || -> i64 {
        reader
            .query_row(
                "SELECT count(*) FROM events WHERE session_id = ?1 AND kind = 'tool'",
                [&session],
                |row| row.get(0),
            )
            .unwrap()
    };

    let started = Instant::now();
    run(&[
        "send",
        &session,
        &format!("@fake deltas={steps}\n@fake interval=0\nflood"),
    ]);
    while count() == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let engine: i32 = reader
        .query_row(
            "SELECT pid FROM runs WHERE session_id = ?1 AND status = 'running'",
            [&session],
            |row| row.get(0),
        )
        .expect("the engine's pid");
    let rss_before = rss_kib(daemon);

    let mut shell = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sqlite3 starts");
    let mut stdin = shell.stdin.take().unwrap();
    writeln!(stdin, ".timeout 10000\nBEGIN IMMEDIATE;\nSELECT 'locked';").unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(shell.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    let locked = Instant::now();
    let stored_at_lock = count();
    let mut peak = rss_before;
    let mut blocked = Duration::ZERO;
    let mut first_blocked: Option<Duration> = None;
    while locked.elapsed() < lock_for {
        let sample = Instant::now();
        peak = peak.max(rss_kib(daemon));
        let wchan = std::fs::read_to_string(format!("/proc/{engine}/wchan")).unwrap_or_default();
        std::thread::sleep(Duration::from_millis(50));
        if wchan.contains("pipe_write") {
            first_blocked.get_or_insert(locked.elapsed());
            blocked += sample.elapsed();
        }
    }
    let stored_in_lock = count() - stored_at_lock;
    writeln!(stdin, "COMMIT;").unwrap();
    drop(stdin);
    shell.wait().unwrap();
    let released = Instant::now();

    let mut seen_done = false;
    while !seen_done {
        std::thread::sleep(Duration::from_millis(20));
        seen_done = reader
            .query_row(
                "SELECT count(*) FROM prompts WHERE session_id = ?1 AND status = 'done'",
                [&session],
                |row| row.get::<_, i64>(0),
            )
            .unwrap()
            == 1;
    }
    let drained = released.elapsed();
    let (events, last): (i64, i64) = reader
        .query_row(
            "SELECT count(*), max(seq) FROM events WHERE session_id = ?1",
            [&session],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    let tools = count();
    // SIGTERM: the daemon drains and exits; the home is removed after it.
    let _ = nix_kill(daemon);
    let until = Instant::now() + Duration::from_secs(20);
    while Path::new(&format!("/proc/{daemon}")).exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }

    println!(
        "store locked {} s by sqlite3 while the fake engine floods {steps} tool lines",
        lock_for.as_secs()
    );
    println!("  daemon RSS before the lock: {} KiB", rss_before);
    println!(
        "  daemon RSS peak during the lock: {} KiB (growth {} KiB)",
        peak,
        peak.saturating_sub(rss_before)
    );
    println!(
        "  engine blocked on its full pipe: from {:.2} s into the lock, {:.1} s of {:.1} s",
        first_blocked.unwrap_or_default().as_secs_f64(),
        blocked.as_secs_f64(),
        lock_for.as_secs_f64()
    );
    println!("  events stored before the lock: {stored_at_lock}, during it: {stored_in_lock}");
    println!(
        "  after the lock: {tools} of {steps} tool events stored, {events} events, last seq {last} ({}), drained in {:.2} s; whole run {:.1} s",
        if events == last { "no hole" } else { "HOLES" },
        drained.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let clean = tools == steps as i64 && events == last && stored_in_lock == 0;
    std::process::exit(if clean { 0 } else { 1 });
}

/// The resident set of `pid`, KiB.
fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// SIGTERM to the daemon.
fn nix_kill(pid: i32) -> nix::Result<()> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
}
