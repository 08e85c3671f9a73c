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
    wait_until("the prompt is done", || {
        history(&home)["prompts"][0]["status"] != "running"
    });
    let after = history(&home);
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
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no hole");
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"run.readopted"), "{kinds:?}");
    assert!(!kinds.contains(&"prompt.requeued"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|kind| **kind == "run.started").count(),
        1,
        "{kinds:?}"
    );
    let steps: Vec<String> = events
        .iter()
        .filter(|event| event["kind"] == "tool")
        .map(|event| event["payload"].to_string())
        .collect();
    let expected: Vec<String> = (1..=8).map(|i| format!("step {i}")).collect();
    assert_eq!(steps.len(), 8, "every step once: {steps:?}");
    for (step, expected) in steps.iter().zip(&expected) {
        assert!(
            step.contains(&format!("{expected}\"")),
            "in order: {steps:?}"
        );
    }
    assert!(!home
        .path()
        .join("runs")
        .join(runs[0]["id"].as_str().unwrap())
        .exists());
    home.stop_daemon();
}
