//! What corral hands an engine and what it makes of what comes back, through the CLI and a
//! real daemon: the `command` engine runs the command it is given (no framing, no title
//! request; its title is its first line, its answer the whole output), settings an engine
//! cannot honour are refused with one line, and engines that exit without their final
//! structured line, print garbage, or never exit are failed with the reason.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::daemon::{beside_the_daemon, DaemonHome};

/// An executable script in `dir` with this body.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A home with `settings`, quick cancellation, and a project `p` on `engine`.
fn project_on(engine: &str, settings: &[(&str, &str)]) -> DaemonHome {
    let home = DaemonHome::new();
    home.config(settings);
    home.config(&[
        ("cancel.grace_ms", "300"),
        ("daemon.shutdown_grace_ms", "300"),
    ]);
    home.add_project("p", &home.work(), engine);
    home
}

/// A home with a project `p` on `engine`, quick cancellation, and one untitled session: its id.
fn home_on(engine: &str) -> (DaemonHome, String) {
    let home = project_on(engine, &[]);
    let id = home.new_session(&["p"]);
    (home, id)
}

/// The session's stored events, as `watch --json` prints them (one object per line).
fn events_of(home: &DaemonHome, session: &str) -> Vec<serde_json::Value> {
    home.ok(&["watch", session, "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).expect("one event per line"))
        .collect()
}

#[test]
fn the_command_engine_runs_the_command_as_given_and_answers_with_all_its_output() {
    let (home, session) = home_on("command");
    // Backticks, quotes and several lines: a shell command line exactly as the person wrote it.
    let command = "echo \"one `echo two`\"\nprintf 'three\\nfour\\n'";
    let answer = home.ok(&["send", &session, command, "--wait"]);
    assert_eq!(answer.trim_end(), "one two\nthree\nfour");

    let shown = home.json(&["session", "show", &session, "--json"]);
    assert_eq!(
        shown["session"]["title"], "echo \"one `echo two`\"",
        "{shown}"
    );
    let events = events_of(&home, &session);
    let started = events
        .iter()
        .find(|event| event["kind"] == "run.started")
        .expect("a run started");
    // The argv carries the command alone: no instructions, no title request.
    let argv: Vec<&str> = started["payload"]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(argv, ["sh", "-c", command]);
    assert_eq!(beside_the_daemon(&home), Vec::<i32>::new());
}

#[test]
fn the_command_engine_refuses_what_it_cannot_honour() {
    let (home, session) = home_on("command");
    let image = home.path().join("a.png");
    std::fs::write(&image, b"png").unwrap();
    let refused = home.fails(
        &["send", &session, "ls", "--image", image.to_str().unwrap()],
        1,
    );
    assert!(
        refused.contains("the command engine takes no images"),
        "{refused}"
    );
    let refused = home.fails(&["send", &session, "ls", "--read-only"], 1);
    assert!(refused.contains("cannot run read-only"), "{refused}");
    let refused = home.fails(&["session", "new", "p", "--model", "gpt-9"], 1);
    assert!(refused.contains("takes no model"), "{refused}");
    let refused = home.fails(
        &[
            "config",
            "set",
            "engines.command.template",
            r#"["sh","-c","ls"]"#,
        ],
        2,
    );
    assert!(refused.contains("must contain {prompt}"), "{refused}");
    assert_eq!(refused.trim().lines().count(), 1, "{refused}");
    // Nothing was queued by any of them.
    let history = home.json(&["history", &session, "--json"]);
    assert!(
        history["prompts"].as_array().is_none_or(|p| p.is_empty()),
        "{history}"
    );
}

#[test]
fn an_engine_path_that_cannot_run_is_refused_at_config_set_and_at_send() {
    let (home, session) = home_on("claude");
    let refused = home.fails(
        &[
            "config",
            "set",
            "engines.claude.path",
            "/nonexistent/claude",
        ],
        2,
    );
    assert!(
        refused.contains("/nonexistent/claude does not exist"),
        "{refused}"
    );
    let plain = home.path().join("claude-plain");
    std::fs::write(&plain, "not a program").unwrap();
    let refused = home.fails(
        &[
            "config",
            "set",
            "engines.claude.path",
            plain.to_str().unwrap(),
        ],
        2,
    );
    assert!(refused.contains("is not executable"), "{refused}");

    let gone = script(home.path(), "claude-gone", "exit 0");
    home.config(&[("engines.claude.path", gone.to_str().unwrap())]);
    std::fs::remove_file(&gone).unwrap();
    let refused = home.fails(&["send", &session, "hello"], 1);
    assert!(
        refused.contains(&format!("{} does not exist", gone.display())),
        "{refused}"
    );
}

#[test]
fn an_engine_that_exits_0_without_its_final_line_has_failed() {
    let (home, session) = home_on("claude");
    let dir = home.path();
    // Garbage and no result line.
    let garbage = script(dir, "claude-garbage", "echo 'this is not JSON {'; exit 0");
    home.config(&[("engines.claude.path", garbage.to_str().unwrap())]);
    let failed = home.fails(&["send", &session, "hello", "--wait"], 1);
    assert!(
        failed.contains("without its final `result` line"),
        "{failed}"
    );
    // Nothing at all.
    let silent = script(dir, "claude-silent", "exit 0");
    home.config(&[("engines.claude.path", silent.to_str().unwrap())]);
    let failed = home.fails(&["send", &session, "again", "--wait"], 1);
    assert!(
        failed.contains("exited with status 0 without its final `result` line"),
        "{failed}"
    );
    // The first prompt is still stored, failed, with its error: nothing was lost.
    let history = home.json(&["history", &session, "--json"]);
    let prompts = history["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 2, "{history}");
    assert!(prompts.iter().all(|p| p["status"] == "failed"), "{history}");
    // The garbage is kept as raw output, not taken for an answer.
    let events = events_of(&home, &session);
    assert!(events.iter().any(|e| e["kind"] == "raw"));
    assert!(!events.iter().any(|e| e["kind"] == "message"));
}

#[test]
fn an_engine_that_never_exits_is_ended_by_the_run_timeout() {
    let (home, session) = home_on("claude");
    let sleeper = script(home.path(), "claude-sleeps", "sleep 300 & sleep 300");
    home.config(&[
        ("engines.claude.path", sleeper.to_str().unwrap()),
        ("run.timeout_s", "1"),
    ]);
    let failed = home.fails(&["send", &session, "hello", "--wait"], 1);
    assert!(
        failed.contains("longer than run.timeout_s (1 s)"),
        "{failed}"
    );
    // Its whole group is gone, the background sleep too.
    let left = beside_the_daemon(&home);
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_daemon_killed_during_a_first_prompt_resumes_its_thread_on_the_rerun() {
    let home = project_on(
        "fake",
        &[(
            "engines.fake.path",
            env!("CARGO_BIN_EXE_corral-fake-engine"),
        )],
    );
    let session = home.new_session(&["p", "--title", "crash"]);
    home.ok(&["send", &session, "@fake hang\nfirst"]);
    // The thread is stored the moment the engine names it, while the run still hangs.
    let mut thread = String::new();
    common::daemon::wait_until("the session has the engine's thread", || {
        let shown = home.json(&["session", "show", &session, "--json"]);
        thread = shown["session"]["thread_id"]
            .as_str()
            .unwrap_or("")
            .to_string();
        !thread.is_empty()
    });
    let daemon = home.daemon_pid().unwrap();
    let shim = home.json(&["history", &session, "--json"])["runs"][0]["pid"]
        .as_i64()
        .expect("the run's shim") as i32;
    // The daemon and its run's shim (as a crash of the machine would leave it): no run to take
    // over (the engine dies with its shim), so the prompt runs again.
    common::daemon::kill(daemon, libc::SIGKILL);
    common::daemon::kill(shim, libc::SIGKILL);
    common::daemon::wait_until("the daemon is gone", || !common::daemon::alive(daemon));

    // The next daemon runs the prompt again, on the same thread.
    home.start_daemon();
    let mut runs = Vec::new();
    common::daemon::wait_until("the prompt runs again", || {
        runs = home.json(&["history", &session, "--json"])["runs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        runs.len() == 2 && runs[1]["status"] == "running" && runs[1]["pid"].is_i64()
    });
    let argv: Vec<&str> = runs[1]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(
        argv.windows(2).any(|w| w == ["resume", thread.as_str()]),
        "the rerun resumes {thread}: {argv:?}"
    );
    assert_eq!(runs[1]["thread_id"], thread.as_str());

    // Cancelled, the run records how its engine ended.
    let prompt = home.json(&["history", &session, "--json"])["prompts"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    home.ok(&["cancel", &prompt]);
    common::daemon::wait_until("the run is closed", || {
        let history = home.json(&["history", &session, "--json"]);
        history["runs"][1]["status"] == "cancelled"
    });
    let history = home.json(&["history", &session, "--json"]);
    let cancelled = &history["runs"][1];
    assert!(
        cancelled["signal"] == "SIGTERM" || cancelled["exit_code"].is_i64(),
        "how it ended is recorded: {cancelled}"
    );
    // What the crash did is told, as after a SIGTERM: the first run ended by recovery, the
    // prompt queued again.
    let events = events_of(&home, &session);
    let first_run = history["runs"][0]["id"].as_str().unwrap().to_string();
    assert!(
        events.iter().any(|e| e["kind"] == "run.exited"
            && e["run_id"] == first_run.as_str()
            && e["payload"]["ended_by"] == "recovery"),
        "{events:#?}"
    );
    assert!(
        events.iter().any(|e| e["kind"] == "prompt.requeued"
            && e["payload"]["reason"]
                .as_str()
                .is_some_and(|reason| reason.contains("recovery"))),
        "{events:#?}"
    );
    // One thread, told once.
    let told = events_of(&home, &session)
        .iter()
        .filter(|event| event["kind"] == "thread.started")
        .count();
    assert_eq!(told, 1, "thread.started once per new thread");
    home.stop_daemon();
}

#[test]
fn an_engine_child_gets_its_trace_and_none_of_the_daemons_own_variables() {
    let home = DaemonHome::new();
    let session = home.fake_session(env!("CARGO_BIN_EXE_corral-fake-engine"), "env", &[]);
    // The daemon was started (by the first command) with its readiness variable set.
    let answer = home.ok(&["send", &session, "@fake echo-env\nwhat do I get", "--wait"]);
    let env: serde_json::Value = serde_json::from_str(answer.trim()).expect("a JSON answer");
    assert_eq!(
        env["CORRAL_DAEMON_NOTIFY"],
        serde_json::Value::Null,
        "{env}"
    );
    assert_eq!(env["CORRAL_SESSION_ID"], session.as_str(), "{env}");
    assert!(env["CORRAL_RUN_ID"].is_string(), "{env}");
    // The driver (this `send --wait`) started its own trace: the agent's calls join it.
    let parent = env["CORRAL_PARENT_EXEC"].as_str().expect("a parent exec");
    let shown = home.json(&["monitor", "show", parent, "--json"]);
    assert_eq!(env["CORRAL_TRACE_ID"], shown["trace_id"], "{env} {shown}");
    home.stop_daemon();
}
