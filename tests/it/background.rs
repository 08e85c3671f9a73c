//! A run ends with all of its processes: what an engine leaves in its process group (a
//! `sleep 30 &`), and what left the group (`setsid`) but carries the run's id, are gone when
//! the run ends — on a normal exit, on cancel, on the daemon's SIGTERM. A project with
//! `keep_background` keeps them, `status` lists them, and an agent cannot turn it on.
//!
//! The engine is the fake engine's `spawn=` directive: the background command writes its
//! pid to a file and then becomes the process that lingers (`exec`), so the test knows it.

use crate::common;

use std::path::{Path, PathBuf};

use common::daemon::{alive, kill, wait_until, DaemonHome};
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// A `spawn=` directive whose process writes its pid to `pidfile`, then becomes `command`.
fn spawn(pidfile: &Path, command: &str) -> String {
    format!(
        "@fake spawn=echo $$ > '{}.tmp' && mv '{0}.tmp' '{0}' && exec {command}",
        pidfile.display()
    )
}

/// The pid a `spawn=` process wrote, once it is there.
fn pid_in(pidfile: &Path) -> i32 {
    wait_until("the background process says its pid", || pidfile.exists());
    std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The pid of the shell the fake engine's last `spawn=` started in `session`, from the
/// engine's own `fake-engine: spawned PID` line. For a process the run's end may kill before
/// it could write a pid file (which is the point: it was left behind and must be gone).
fn spawned_pid(home: &DaemonHome, session: &str) -> i32 {
    let selector = session.replace('\'', "''");
    let lines: Vec<String> = home
        .sql(&format!(
            "SELECT events.payload FROM events \
             JOIN sessions ON sessions.id = events.session_id \
             WHERE (sessions.id = '{selector}' OR sessions.title = '{selector}') \
               AND events.kind = 'stderr' \
             ORDER BY events.seq DESC"
        ))
        .into_iter()
        .filter_map(|row| {
            let payload: Value = serde_json::from_str(row[0].as_str()?).ok()?;
            Some(payload["line"].as_str()?.to_string())
        })
        .collect();
    lines
        .iter()
        .find_map(|line| line.strip_prefix("fake-engine: spawned "))
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `spawned` line in {lines:?}"))
}

/// The last prompt of `session`, waited for: its JSON.
fn wait_prompt(home: &DaemonHome, session: &str) -> Value {
    let shown = home.json(&["session", "show", session, "--json"]);
    let prompt = shown["prompts"]
        .as_array()
        .and_then(|prompts| prompts.last())
        .and_then(|prompt| prompt["id"].as_str())
        .expect("a prompt")
        .to_string();
    let mut rpc = common::rpc::Rpc::connect(home.path());
    rpc.call("prompt.wait", serde_json::json!({ "prompt": prompt }))
        .unwrap()
}

fn pidfile(home: &DaemonHome, name: &str) -> PathBuf {
    home.path().join(format!("{name}.pid"))
}

#[test]
fn a_process_left_in_the_group_is_gone_when_the_run_ends_on_its_own() {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "leaves sleep", &[("cancel.grace_ms", "300")]);
    let file = pidfile(&home, "left");
    let prompt = format!("{}\nleave a sleep behind", spawn(&file, "sleep 30"));
    home.ok(&["send", &session, &prompt, "--wait"]);
    let pid = spawned_pid(&home, &session);
    // Gone by the time the prompt is done: the run's end waited for it.
    assert!(!alive(pid), "the engine's `sleep 30` outlived its run");
    let runs = home.json(&["history", &session, "--json"]);
    assert_eq!(runs["runs"][0]["status"], "succeeded", "{runs}");
}

#[test]
fn a_process_that_left_the_group_but_carries_the_run_id_is_found() {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "setsid", &[("cancel.grace_ms", "300")]);
    let file = pidfile(&home, "setsid");
    // `setsid` (not a group leader: no fork) makes the shell's process a session and group of
    // its own before it becomes `sleep`; the delay lets the test see that it did.
    let prompt = format!(
        "{}\n@fake delay=1500\nleave a setsid sleep",
        spawn(&file, "setsid sleep 30")
    );
    home.corral(&["send", &session, &prompt]).output().unwrap();
    let pid = pid_in(&file);
    wait_until("the process has left the engine's group", || {
        let stat = procfs::process::Process::new(pid).and_then(|p| p.stat());
        stat.is_ok_and(|stat| stat.pgrp == pid && stat.session == pid)
    });
    let done = wait_prompt(&home, &session);
    assert_eq!(done["status"], "done", "{done}");
    assert!(
        !alive(pid),
        "a setsid'd child with the run's id outlived its run"
    );
}

#[test]
fn a_cancelled_run_ends_its_background_processes() {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "cancel", &[("cancel.grace_ms", "300")]);
    let (inside, outside) = (pidfile(&home, "inside"), pidfile(&home, "outside"));
    // The group's process starts one that calls setsid; both say their pids.
    let escapes = format!(
        "sh -c 'echo $$ > \"{0}.tmp\" && mv \"{0}.tmp\" \"{0}\" && exec setsid sleep 30' & exec sleep 30",
        outside.display()
    );
    let spawned = format!("{}\n@fake hang\nhang", spawn(&inside, &escapes));
    home.corral(&["send", &session, &spawned]).output().unwrap();
    let (inside, outside) = (pid_in(&inside), pid_in(&outside));
    home.ok(&["cancel", &session]);
    let done = wait_prompt(&home, &session);
    assert_eq!(done["status"], "cancelled", "{done}");
    assert!(!alive(inside), "a process of the group outlived the cancel");
    assert!(!alive(outside), "a setsid'd process outlived the cancel");
}

#[test]
fn the_daemons_sigterm_ends_the_background_processes_of_its_runs() {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "sigterm", &[("cancel.grace_ms", "300")]);
    let file = pidfile(&home, "term");
    let prompt = format!("{}\n@fake hang\nhang", spawn(&file, "sleep 30"));
    home.corral(&["send", &session, &prompt]).output().unwrap();
    let pid = pid_in(&file);
    let daemon = home.daemon_pid().expect("the send started a daemon");
    kill(daemon, libc::SIGTERM);
    wait_until("the daemon exits", || !alive(daemon));
    assert!(
        !alive(pid),
        "the engine's `sleep 30` outlived the daemon's SIGTERM"
    );
}

#[test]
fn a_background_process_holding_the_engines_stdout_does_not_hold_the_run() {
    // The command engine is `sh -c TEXT`: `sleep 30 &` keeps its stdout open.
    let home = DaemonHome::new();
    home.config(&[("cancel.grace_ms", "300")]);
    home.add_project("c", &home.work(), "command");
    let session = home.new_session(&["c", "--title", "pipe"]);
    let started = std::time::Instant::now();
    let answer = home.ok(&["send", &session, "sleep 30 & echo $!", "--wait"]);
    let pid: i32 = answer
        .lines()
        .find_map(|line| line.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in the answer: {answer}"));
    assert!(!alive(pid), "`sleep 30 &` outlived its run");
    // Not a timing figure: only that the run did not wait for the sleep.
    assert!(started.elapsed() < std::time::Duration::from_secs(25));
}

#[test]
fn keep_background_keeps_them_and_status_lists_them() {
    let home = DaemonHome::new();
    home.config(&[("engines.fake.path", FAKE)]);
    let work = home.work();
    home.ok(&[
        "project",
        "add",
        "k",
        work.to_str().unwrap(),
        "--engine",
        "fake",
        "--keep-background",
    ]);
    let project = home.json(&["project", "show", "k", "--json"]);
    assert_eq!(project["keep_background"], true, "{project}");
    let session = home.new_session(&["k", "--title", "dev server"]);
    let file = pidfile(&home, "kept");
    let prompt = format!("{}\nstart a dev server", spawn(&file, "sleep 30"));
    home.ok(&["send", &session, &prompt, "--wait"]);
    let pid = pid_in(&file);
    assert!(alive(pid), "keep_background did not keep the process");
    // It said its pid before its `exec`: status shows what it runs now, once it runs it.
    wait_until("the kept shell becomes `sleep 30`", || {
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|argv| argv == b"sleep\x0030\x00")
    });
    let status = home.json(&["status", "--json"]);
    let kept = status["kept"]
        .as_array()
        .expect("status lists kept processes");
    let listed = kept
        .iter()
        .find(|kept| kept["pid"] == pid)
        .unwrap_or_else(|| panic!("{pid} not in {status}"));
    assert_eq!(listed["session_id"], session.as_str(), "{listed}");
    assert_eq!(listed["command"], "sleep 30", "{listed}");
    let text = home.ok(&["status"]);
    assert!(text.contains(&format!("kept:     pid {pid} ")), "{text}");
    // Turned off, the next run ends what it leaves again.
    home.ok(&["project", "set", "k", "--keep-background", "false"]);
    kill(pid, libc::SIGKILL);
    wait_until("the kept process is killed", || !alive(pid));
    let status = home.json(&["status", "--json"]);
    assert!(
        !status["kept"]
            .as_array()
            .unwrap()
            .iter()
            .any(|kept| kept["pid"] == pid),
        "a dead process is still listed: {status}"
    );
    let file = pidfile(&home, "not-kept");
    let prompt = format!("{}\nagain", spawn(&file, "sleep 30"));
    home.ok(&["send", &session, &prompt, "--wait"]);
    assert!(
        !alive(spawned_pid(&home, &session)),
        "keep_background off, the process was kept"
    );
    // The next daemon forgets the dead one it kept.
    let recorded = |home: &DaemonHome| -> i64 {
        home.sql("SELECT count(*) FROM kept_processes")[0][0]
            .as_i64()
            .expect("a count")
    };
    // The kept shell, and whatever it ran at that moment (its `mv`, kept too and gone now).
    assert!(recorded(&home) >= 1, "the kept process was not recorded");
    home.stop_daemon();
    home.start_daemon();
    assert_eq!(recorded(&home), 0, "a dead kept process is still recorded");
}

#[test]
fn an_agent_cannot_turn_keep_background_on_for_itself() {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "agent", &[]);
    let corral = env!("CARGO_BIN_EXE_corral");
    let prompt = format!(
        "@fake run='{corral}' project set p --keep-background true 2>&1\ntry to keep my processes"
    );
    home.ok(&["send", &session, &prompt, "--wait"]);
    let project = home.json(&["project", "show", "p", "--json"]);
    assert_eq!(project["keep_background"], false, "{project}");
    let watched = home.ok(&["watch", &session, "--json"]);
    assert!(
        watched.contains("request.refused")
            && watched.contains("letting background processes outlive their runs"),
        "{watched}"
    );
    // A person may.
    home.ok(&["project", "set", "p", "--keep-background", "true"]);
    let project = home.json(&["project", "show", "p", "--json"]);
    assert_eq!(project["keep_background"], true, "{project}");
}
