//! Live restore: a run goes on under its shim while the daemon is restarted or killed, and
//! the next daemon adopts it from its spool and judges it, instead of ending it and running
//! its prompt again.

use crate::common;

use common::daemon::{wait_until, DaemonHome};
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// The session's events, as `watch --json` gives them.
fn events(home: &DaemonHome) -> Vec<Value> {
    home.ok(&["watch", "s", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn history(home: &DaemonHome) -> Value {
    home.json(&["history", "s", "--json"])
}

/// The fake engine's steps stored so far (its `tool` events' payloads), in order.
fn steps(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|event| event["kind"] == "tool")
        .map(|event| event["payload"].to_string())
        .collect()
}

/// Kills the home's daemon with SIGKILL and waits until it is gone.
fn kill_daemon(home: &DaemonHome) {
    let pid = home.daemon_pid().expect("a daemon");
    common::daemon::kill(pid, libc::SIGKILL);
    wait_until("the daemon is gone", || !common::daemon::alive(pid));
}

/// The session's events are numbered without a hole, and steps 1…`count` were stored once
/// each, in order.
fn assert_whole(events: &[Value], count: usize) {
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no hole");
    let steps = steps(events);
    assert_eq!(steps.len(), count, "every step once: {steps:?}");
    for (index, step) in steps.iter().enumerate() {
        assert!(
            step.contains(&format!("step {}\"", index + 1)),
            "step {} in its place: {step}",
            index + 1
        );
    }
}

/// `corral daemon restart` in the middle of a turn: the engine is not ended, the new daemon
/// takes the run over, every line the engine printed is stored once, in order, and the prompt
/// ends done with one run — the turn is not redone.
#[test]
fn a_turn_goes_on_through_a_daemon_restart_and_is_not_redone() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    home.ok(&[
        "send",
        "s",
        "@fake deltas=8\n@fake interval=250\n@fake answer=Survived the restart.\nwork on",
    ]);
    wait_until("the engine has printed a step", || {
        events(&home).iter().any(|event| {
            event["kind"] == "message.delta"
                || event["kind"] == "tool"
                || event["kind"] == "reasoning"
        })
    });
    let before = history(&home);
    let shim = before["runs"][0]["pid"].as_i64().expect("the run's shim");
    let old = home.daemon_pid().unwrap();
    let said = home.ok(&["daemon", "restart"]);
    assert!(said.contains("corral daemon started"), "{said}");
    assert_ne!(home.daemon_pid(), Some(old));
    // While it runs, `status` lists the run as taken over.
    let status = home.json(&["status", "--json"]);
    assert_eq!(
        status["taken_over"][0]["run_id"], before["runs"][0]["id"],
        "{status}"
    );
    assert_eq!(status["taken_over"][0]["shim_pid"], shim, "{status}");
    let shown = home.ok(&["status"]);
    assert!(shown.contains("taken over: run "), "{shown}");
    wait_until("the prompt is done", || {
        history(&home)["prompts"][0]["status"] != "running"
    });
    let after = history(&home);
    let status = home.json(&["status", "--json"]);
    assert_eq!(
        status["taken_over"],
        serde_json::json!([]),
        "ended: {status}"
    );
    assert_eq!(after["prompts"][0]["status"], "done", "{after}");
    assert_eq!(
        after["prompts"][0]["answer"], "Survived the restart.",
        "{after}"
    );
    let runs = after["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one run, not redone: {after}");
    assert_eq!(runs[0]["pid"], shim, "{after}");
    assert_eq!(runs[0]["status"], "succeeded", "{after}");
    let events = events(&home);
    assert_whole(&events, 8);
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"run.readopted"), "{kinds:?}");
    assert!(!kinds.contains(&"prompt.requeued"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|kind| **kind == "run.started").count(),
        1,
        "{kinds:?}"
    );
    assert!(!home
        .path()
        .join("runs")
        .join(runs[0]["id"].as_str().unwrap())
        .exists());
    home.stop_daemon();
}

/// The daemon killed with -9 in the middle of a turn, its events half stored: the shim keeps
/// the engine going, the next daemon takes the run over from how far the stored events cover
/// its output, and every line the engine printed is stored once, in order — none lost with
/// the dead daemon's buffers, none stored twice — and the turn is not redone.
#[test]
fn a_turn_goes_on_through_a_daemon_killed_with_9_and_no_line_is_lost_or_doubled() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    // A line every 15 ms: some are in flight when the daemon dies.
    home.ok(&[
        "send",
        "s",
        "@fake deltas=300\n@fake interval=15\n@fake answer=Survived the kill.\nwork on",
    ]);
    wait_until("the engine has printed some steps", || {
        steps(&events(&home)).len() >= 20
    });
    let before = history(&home);
    let shim = before["runs"][0]["pid"].as_i64().expect("the run's shim");
    kill_daemon(&home);
    assert!(
        common::daemon::alive(shim as i32),
        "the shim outlives its daemon"
    );
    home.start_daemon();
    wait_until("the prompt is done", || {
        history(&home)["prompts"][0]["status"] != "running"
    });
    let after = history(&home);
    assert_eq!(after["prompts"][0]["status"], "done", "{after}");
    assert_eq!(
        after["prompts"][0]["answer"], "Survived the kill.",
        "{after}"
    );
    let runs = after["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "one run, not redone: {after}");
    assert_eq!(runs[0]["pid"], shim, "{after}");
    let events = events(&home);
    assert_whole(&events, 300);
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"run.readopted"), "{kinds:?}");
    assert!(!kinds.contains(&"prompt.requeued"), "{kinds:?}");
    home.stop_daemon();
}

/// The daemon killed with -9 (the test point `run.lines_unstored`) while it holds lines it
/// read and did not store: they were kept in the spool before they were lines, so the next
/// daemon, taking the run over from how far the stored events cover its output, stores each
/// line once, in order, and the run is judged once.
#[test]
fn lines_a_killed_daemon_read_and_did_not_store_are_taken_from_the_spool() {
    let home = DaemonHome::new();
    let started = home
        .corral(&["daemon", "--detach"])
        .env(corral::env::TEST_KILL_AT, "run.lines_unstored")
        .output()
        .expect("corral daemon --detach");
    assert!(started.status.success(), "{started:?}");
    let old = home.daemon_pid().expect("a started daemon wrote its pid");
    home.add_project("shell", &home.work(), "command");
    home.new_session(&["shell", "--title", "s"]);
    home.ok(&[
        "send",
        "s",
        "seq -f 'line %g' 1 400; sleep 4; seq -f 'line %g' 401 450",
    ]);
    wait_until("the daemon is killed at its test point", || {
        !common::daemon::alive(old)
    });
    home.start_daemon();
    wait_until("the prompt is done", || {
        history(&home)["prompts"][0]["status"] != "running"
    });
    let after = history(&home);
    assert_eq!(after["prompts"][0]["status"], "done", "{after}");
    assert_eq!(
        after["runs"].as_array().unwrap().len(),
        1,
        "not redone: {after}"
    );
    let events = events(&home);
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"run.readopted"), "{kinds:?}");
    let printed: Vec<String> = events
        .iter()
        .filter_map(|event| event["payload"]["text"].as_str())
        .filter(|line| line.starts_with("line "))
        .map(str::to_string)
        .collect();
    let expected: Vec<String> = (1..=450).map(|i| format!("line {i}")).collect();
    assert_eq!(printed, expected, "every line once, in order");
    home.stop_daemon();
}

/// A run followed to its end, or stopped, by the daemon that started it leaves no spool behind.
#[test]
fn a_run_judged_by_its_daemon_leaves_no_spool() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    home.ok(&["send", "s", "@fake deltas=3\nwork", "--wait"]);
    home.ok(&["send", "s", "@fake hang\nwork"]);
    wait_until("the second run hangs", || {
        history(&home)["runs"]
            .as_array()
            .is_some_and(|runs| runs.len() == 2 && runs[1]["pid"].is_i64())
    });
    home.ok(&["cancel", "s"]);
    wait_until("the second run is cancelled", || {
        history(&home)["prompts"][1]["status"] == "cancelled"
    });
    let left: Vec<_> = std::fs::read_dir(home.path().join("runs"))
        .map(|dir| dir.flatten().map(|entry| entry.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "spools left: {left:?}");
    home.stop_daemon();
}

/// A spool cut short while no daemon ran (truncated by hand, a disk's fault): the next daemon
/// does not take the run over from it (lines would be missing), says why in one line, and
/// ends the run and runs its prompt again, as for any run it cannot take over.
#[test]
fn a_spool_cut_short_is_not_taken_over_and_its_prompt_runs_again() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    home.ok(&[
        "send",
        "s",
        "@fake deltas=20\n@fake interval=100\n@fake answer=Again.\nwork on",
    ]);
    wait_until("a few steps are stored", || {
        steps(&events(&home)).len() >= 3
    });
    let run = history(&home)["runs"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    kill_daemon(&home);
    let stdout = home.path().join("runs").join(&run).join("stdout");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&stdout)
        .unwrap()
        .set_len(10)
        .unwrap();
    home.start_daemon();
    wait_until("the prompt is done", || {
        history(&home)["prompts"][0]["status"] == "done"
    });
    let after = history(&home);
    let runs = after["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "run again: {after}");
    assert_eq!(runs[0]["status"], "interrupted", "{after}");
    let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap();
    let said: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("spool is shorter than what its stored events cover"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(said[0].contains(&run), "{}", said[0]);
    home.stop_daemon();
}
