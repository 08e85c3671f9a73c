//! kill -9 of the daemon while prompts run, again and again: the next daemon ends the
//! leftover process groups, closes their runs as interrupted, requeues their prompts, and they
//! complete. No prompt lost, none run twice at the same time, the store stays sound.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

mod common;

use common::rpc::Rpc;

const CORRAL: &str = env!("CARGO_BIN_EXE_corral");
const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// Starts a daemon in the background and returns its pid.
fn start_daemon(home: &Path) -> i32 {
    let output = Command::new(CORRAL)
        .arg("--home")
        .arg(home)
        .args(["daemon", "--detach"])
        .env_remove("CORRAL_HOME")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    std::fs::read_to_string(home.join("daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn alive(pid: i32) -> bool {
    corral::process::is_alive(pid as u32, None)
}

fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!alive(pid), "pid {pid} did not exit");
}

/// A small deterministic generator (no extra crate for randomness in one test).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

#[test]
fn kill_9_of_the_daemon_loses_no_prompt_and_runs_none_twice_at_once() {
    let home = tempfile::tempdir().unwrap();
    let projects = tempfile::tempdir().unwrap();
    let mut daemon = start_daemon(home.path());
    let mut rpc = Rpc::connect(home.path());
    for (name, value) in [("engines.fake.path", FAKE), ("cancel.grace_ms", "200")] {
        rpc.call("settings.set", json!({ "name": name, "value": value }))
            .unwrap();
    }
    let mut sessions = Vec::new();
    for index in 0..3 {
        let path: PathBuf = projects.path().join(format!("p{index}"));
        std::fs::create_dir_all(&path).unwrap();
        rpc.call(
            "project.add",
            json!({ "name": format!("p{index}"), "path": path }),
        )
        .unwrap();
        let session = rpc
            .call(
                "session.new",
                json!({ "project": format!("p{index}"), "engine": "fake" }),
            )
            .unwrap();
        sessions.push(session["id"].as_str().unwrap().to_string());
    }
    let seed = std::env::var("CORRAL_CRASH_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(0x5eed);
    println!("seed {seed} (set CORRAL_CRASH_SEED to replay)");
    let mut random = Lcg(seed);
    let mut prompts = Vec::new();
    for round in 0..20 {
        for session in &sessions {
            let delay = 20 + random.next(300);
            let sent = rpc
                .call(
                    "prompt.send",
                    json!({ "session": session, "text": format!("@fake delay={delay}\nround {round}") }),
                )
                .unwrap();
            prompts.push(sent["id"].as_str().unwrap().to_string());
        }
        std::thread::sleep(Duration::from_millis(random.next(250)));
        // SAFETY: kill on a pid we started.
        unsafe { libc::kill(daemon, libc::SIGKILL) };
        wait_gone(daemon);
        daemon = start_daemon(home.path());
        rpc = Rpc::connect(home.path());
    }

    // Every prompt completes.
    for prompt in &prompts {
        let done = rpc
            .call("prompt.wait", json!({ "prompt": prompt }))
            .unwrap();
        assert_eq!(done["status"], "done", "{done}");
    }
    // No run of a session overlapped another, and each prompt succeeded exactly once.
    for session in &sessions {
        let history = rpc.call("history", json!({ "session": session })).unwrap();
        let runs = history["runs"].as_array().unwrap();
        for prompt in history["prompts"].as_array().unwrap() {
            let succeeded = runs
                .iter()
                .filter(|run| run["prompt_id"] == prompt["id"] && run["status"] == "succeeded")
                .count();
            assert_eq!(
                succeeded, 1,
                "prompt {} succeeded {succeeded} times",
                prompt["id"]
            );
        }
        for (index, run) in runs.iter().enumerate() {
            assert_ne!(run["status"], "running", "{run}");
            for later in &runs[index + 1..] {
                let (a_start, a_end) = (
                    run["started_at"].as_i64().unwrap(),
                    run["ended_at"].as_i64().unwrap(),
                );
                let b_start = later["started_at"].as_i64().unwrap();
                // An interrupted run's end is when the next daemon closed it, after its child
                // was ended: the next run of the session starts only then.
                assert!(
                    a_end <= b_start || b_start < a_start,
                    "overlap: {run} and {later}"
                );
            }
        }
    }

    // The store is sound, and no engine child is left.
    // SAFETY: kill on a pid we started.
    unsafe { libc::kill(daemon, libc::SIGTERM) };
    wait_gone(daemon);
    let db = rusqlite::Connection::open(home.path().join("corral.db")).unwrap();
    let integrity: String = db
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let pids: Vec<i64> = db
        .prepare("SELECT pid FROM runs WHERE pid IS NOT NULL")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for pid in pids {
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(pid as i32) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(pid as i32), "engine pid {pid} was left running");
    }
}
