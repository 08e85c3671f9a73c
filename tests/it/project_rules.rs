//! What a project's state and place on disk mean for its sessions (issue 11, item 5), through
//! the CLI against a real daemon: an archived project takes no new session and no prompt, and
//! projects on one working tree (the same directory, or one inside another) share the project
//! lock, so their runs never overlap, while a project elsewhere runs beside them.

use crate::common;

use std::process::Stdio;

use serde_json::Value;

use common::daemon::{lines_of, next_line, DaemonHome};

/// The fake engine with short grace periods, and a project `p` on the `work` directory.
fn fake_home() -> DaemonHome {
    let home = DaemonHome::new();
    home.config(&[
        (
            "engines.fake.path",
            env!("CARGO_BIN_EXE_corral-fake-engine"),
        ),
        ("daemon.shutdown_grace_ms", "500"),
        ("cancel.grace_ms", "500"),
    ]);
    home.add_project("p", &home.work(), "fake");
    home
}

#[test]
fn an_archived_project_refuses_new_sessions_and_prompts() {
    let home = fake_home();
    let session = home.new_session(&["p", "--title", "before"]);
    home.ok(&["send", &session, "hello", "--wait"]);
    home.ok(&["project", "archive", "p"]);

    // The same refusal as an archived session's: one line, exit 1.
    let refused = home.fails(&["session", "new", "p", "--title", "after"], 1);
    assert!(refused.contains("project 'p' is archived"), "{refused}");
    assert_eq!(refused.trim().lines().count(), 1, "{refused}");
    let refused = home.fails(&["send", &session, "again"], 1);
    assert!(refused.contains("project 'p' is archived"), "{refused}");
    // Nothing was queued; what was stored stays readable.
    let history = home.json(&["history", &session, "--json"]);
    let prompts = history["prompts"].as_array().expect("prompts");
    assert_eq!(prompts.len(), 1, "{history}");
    assert_eq!(prompts[0]["status"], "done");
    home.stop_daemon();
}

/// The sessions `status` shows waiting for a slot, and those running.
fn slot_sessions(home: &DaemonHome, which: &str) -> Vec<String> {
    let status = home.json(&["status", "--json"]);
    status["slots"][which]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| entry["owner"]["session"].as_str().map(String::from))
        .collect()
}

#[test]
fn projects_on_one_working_tree_share_the_project_lock() {
    let home = fake_home();
    let inner = home.work().join("inner");
    std::fs::create_dir(&inner).unwrap();
    let elsewhere = home.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    // `same` on p's directory, `nested` inside it, `apart` beside it.
    home.add_project("same", &home.work(), "fake");
    home.add_project("nested", &inner, "fake");
    home.add_project("apart", &elsewhere, "fake");
    let holder = home.new_session(&["p", "--title", "holder"]);
    let same = home.new_session(&["same", "--title", "same"]);
    let nested = home.new_session(&["nested", "--title", "nested"]);
    let apart = home.new_session(&["apart", "--title", "apart"]);

    home.ok(&["send", &holder, "@fake hang\nhold the tree"]);
    // Followed before they are sent, so that no event is missed.
    let mut watches = Vec::new();
    for session in [&same, &nested] {
        let mut watch = home
            .corral(&["watch", session, "--follow", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("watch starts");
        let lines = lines_of(watch.stdout.take().unwrap());
        watches.push((watch, lines));
    }
    home.ok(&["send", &same, "on the same directory"]);
    home.ok(&["send", &nested, "inside it"]);
    // A project elsewhere is not held back: it runs and ends while the holder hangs.
    let answer = home.ok(&["send", &apart, "beside it", "--wait"]);
    assert!(answer.contains("fake answer"), "{answer}");

    // Both wait for the lock the holder's run holds, and say so.
    for (_, lines) in &watches {
        let waiting = next_line(lines, |line| {
            let event: Value = serde_json::from_str(line).ok()?;
            (event["kind"] == "slot.waiting").then_some(event)
        });
        let (event, _) = waiting.unwrap_or_else(|seen| panic!("no slot.waiting in {seen:?}"));
        let held_by = &event["payload"]["held_by"];
        assert_eq!(held_by["reason"], "project_lock", "{event}");
        assert_eq!(held_by["holder"]["session"], holder.as_str(), "{event}");
    }
    assert_eq!(slot_sessions(&home, "running"), vec![holder.clone()]);
    let mut waiting = slot_sessions(&home, "waiting");
    waiting.sort();
    let mut expected = vec![same.clone(), nested.clone()];
    expected.sort();
    assert_eq!(waiting, expected);

    // Once the holder's prompt is cancelled, the two run one after the other.
    home.ok(&["cancel", &holder]);
    for (mut watch, lines) in watches {
        let done = next_line(&lines, |line| {
            let event: Value = serde_json::from_str(line).ok()?;
            (event["kind"] == "prompt.done").then_some(event)
        });
        done.unwrap_or_else(|seen| panic!("no prompt.done in {seen:?}"));
        let _ = watch.kill();
        let _ = watch.wait();
    }
    let run_of = |session: &str| {
        let history = home.json(&["history", session, "--json"]);
        let run = &history["runs"][0];
        (
            run["started_at"].as_i64().expect("started_at"),
            run["ended_at"].as_i64().expect("ended_at"),
        )
    };
    let (a, b) = (run_of(&same), run_of(&nested));
    assert!(a.1 <= b.0 || b.1 <= a.0, "the runs overlap: {a:?} {b:?}");
    home.stop_daemon();
}

/// The next `slot.waiting` event on a `watch --follow --json` of `session`.
fn waits_for(home: &DaemonHome, session: &str, send: &str) -> Value {
    let mut watch = home
        .corral(&["watch", session, "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("watch starts");
    let lines = lines_of(watch.stdout.take().unwrap());
    home.ok(&["send", session, send]);
    let waiting = next_line(&lines, |line| {
        let event: Value = serde_json::from_str(line).ok()?;
        (event["kind"] == "slot.waiting").then_some(event)
    });
    let _ = watch.kill();
    let _ = watch.wait();
    waiting
        .unwrap_or_else(|seen| panic!("{session} did not wait: {seen:?}"))
        .0
}

#[test]
fn a_project_added_or_archived_while_an_overlapping_one_runs_still_waits_for_it() {
    let home = fake_home();
    let holder_of = |waiting: &Value| waiting["payload"]["held_by"]["holder"]["session"].clone();

    // An inner project runs before any project holds its directory; one added above it now
    // waits for it.
    let tree = home.path().join("tree");
    std::fs::create_dir_all(tree.join("inner")).unwrap();
    home.add_project("inner", &tree.join("inner"), "fake");
    let inner = home.new_session(&["inner", "--title", "inner first"]);
    home.ok(&["send", &inner, "@fake hang\nhold the inner tree"]);
    home.add_project("outer", &tree, "fake");
    let outer = home.new_session(&["outer", "--title", "outer later"]);
    let waiting = waits_for(&home, &outer, "the whole tree");
    assert_eq!(
        waiting["payload"]["held_by"]["reason"], "project_lock",
        "{waiting}"
    );
    assert_eq!(holder_of(&waiting), inner.as_str(), "{waiting}");

    // An outer project runs, then is archived: a project inside it still waits for its run.
    let other = home.path().join("other");
    std::fs::create_dir_all(other.join("sub")).unwrap();
    home.add_project("top", &other, "fake");
    let top = home.new_session(&["top", "--title", "top first"]);
    home.ok(&["send", &top, "@fake hang\nhold the other tree"]);
    home.add_project("sub", &other.join("sub"), "fake");
    let sub = home.new_session(&["sub", "--title", "sub later"]);
    home.ok(&["project", "archive", "top"]);
    let waiting = waits_for(&home, &sub, "inside the archived one");
    assert_eq!(holder_of(&waiting), top.as_str(), "{waiting}");

    let mut running = slot_sessions(&home, "running");
    running.sort();
    let mut expected = vec![inner.clone(), top.clone()];
    expected.sort();
    assert_eq!(running, expected);
    home.ok(&["cancel", &inner]);
    home.ok(&["cancel", &top]);
    home.stop_daemon();
}
