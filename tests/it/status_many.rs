//! `status` with a backlog (issue 11): it counts every slot waiter and lists only the first
//! few with what they wait for, and its `working` count (kept by the workers, not asked of
//! every session actor) follows prompts as they start and end. The CLI drives a real daemon
//! on the fake engine, one slot, one project: the first prompt runs, the others wait.

use crate::common;

use serde_json::Value;

use common::daemon::{wait_until, DaemonHome};

/// A home with the fake engine at one slot, a quick shutdown and a project `p` on it.
fn home() -> DaemonHome {
    let home = DaemonHome::new();
    home.config(&[
        (
            "engines.fake.path",
            env!("CARGO_BIN_EXE_corral-fake-engine"),
        ),
        ("slots.fake", "1"),
        ("daemon.shutdown_grace_ms", "200"),
        ("cancel.grace_ms", "200"),
    ]);
    home.add_project("p", &home.work(), "fake");
    home
}

/// Sends `text` to a new session titled `title`: the prompt's id.
fn send(home: &DaemonHome, title: &str, text: &str) -> String {
    home.new_session(&["p", "--title", title]);
    let sent = home.ok(&["send", title, text]);
    sent.split_whitespace()
        .next()
        .expect("a prompt id")
        .to_string()
}

fn status(home: &DaemonHome, args: &[&str]) -> Value {
    let mut command = vec!["status", "--json"];
    command.extend(args);
    home.json(&command)
}

#[test]
fn status_counts_every_slot_waiter_and_lists_the_first_ones_with_their_blockers() {
    let home = home();
    let sessions = 26;
    let mut titles = Vec::new();
    for n in 0..sessions {
        let title = format!("s{n:02}");
        send(&home, &title, "@fake hang\nwork");
        titles.push(title);
    }
    wait_until("every other session waits for the slot", || {
        status(&home, &[])["slots"]["waiting_count"] == sessions - 1
    });
    let status_now = status(&home, &[]);
    let slots = &status_now["slots"];
    let running = slots["running"].as_array().expect("running");
    assert_eq!(running.len(), 1, "{slots}");
    let holder = running[0]["owner"]["session"].as_str().expect("an owner");

    // The first 20, in the order they are served, each with what it waits for.
    let waiting = slots["waiting"].as_array().expect("waiting");
    assert_eq!(waiting.len(), 20, "{slots}");
    let tickets: Vec<u64> = waiting
        .iter()
        .map(|w| w["ticket"].as_u64().unwrap())
        .collect();
    assert!(tickets.windows(2).all(|t| t[0] < t[1]), "{tickets:?}");
    for waiter in waiting {
        assert_eq!(waiter["blocker"]["reason"], "project_lock", "{waiter}");
        assert_eq!(waiter["blocker"]["holder"]["session"], holder, "{waiter}");
        assert_ne!(waiter["owner"]["session"], holder, "{waiter}");
    }
    // Every session has a worker: one runs, the others wait in theirs.
    assert_eq!(status_now["working"], sessions, "{status_now}");

    // As many as asked for; none when none is asked for; the count stays whole.
    let five = status(&home, &["--waiters", "5"]);
    assert_eq!(five["slots"]["waiting"].as_array().unwrap().len(), 5);
    assert_eq!(five["slots"]["waiting"][0], waiting[0]);
    assert_eq!(five["slots"]["waiting_count"], sessions - 1);
    let none = status(&home, &["--waiters", "0"]);
    assert_eq!(none["slots"]["waiting"], serde_json::json!([]));
    assert_eq!(none["slots"]["waiting_count"], sessions - 1);

    // The text: the count, the first waiters with their blockers, and how many more.
    let text = home.ok(&["status", "--waiters", "3"]);
    assert!(
        text.contains(&format!("{} waiting", sessions - 1)),
        "{text}"
    );
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("waiting:"))
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert!(lines[0].contains("project lock held by session"), "{text}");
    assert!(
        text.contains(&format!("and {} more waiting", sessions - 1 - 3)),
        "{text}"
    );
    home.stop_daemon();
}

#[test]
fn working_counts_workers_as_their_prompts_start_and_end() {
    let home = home();
    let working = || status(&home, &[])["working"].as_u64().expect("working");
    let first = send(&home, "a", "@fake hang\none");
    let second = send(&home, "b", "@fake hang\ntwo");
    let third = send(&home, "c", "@fake hang\nthree");
    wait_until("three workers", || working() == 3);

    // A waiter cancelled, then the running one: each worker's end is counted.
    home.ok(&["cancel", &third]);
    wait_until("two workers", || working() == 2);
    home.ok(&["cancel", &first]);
    wait_until("one worker", || working() == 1);
    // The slot went to the last one, which runs now.
    wait_until("b runs", || {
        status(&home, &[])["slots"]["running"]
            .as_array()
            .is_some_and(|running| running.len() == 1)
    });
    home.ok(&["cancel", &second]);
    wait_until("no worker", || working() == 0);

    // A prompt that ends by itself: counted while it runs, not after.
    home.ok(&["send", "a", "quick", "--wait"]);
    wait_until("no worker after the prompt's end", || working() == 0);
    home.stop_daemon();
}
