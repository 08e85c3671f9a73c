//! `corral run` beside a daemon: the daemon records the exec (`exec.start`, `exec.end`) and
//! the process opens no store; a daemon gone mid-command leaves the end to the store; the
//! daemon records only the caller's own exec, and ends only the one it started.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Stdio};

use common::daemon::{finish, lines_of, next_line, wait_until, DaemonHome};
use common::rpc::Rpc;
use serde_json::json;

/// (outcome, exit code, completed)
type Row = (Option<String>, Option<i32>, bool);

fn exec_of(home: &DaemonHome, needle: &str) -> Row {
    home.db()
        .query_row(
            "SELECT outcome, exit_code, completed_at IS NOT NULL FROM execs \
             WHERE command LIKE ?1 AND command LIKE '%run%'",
            [format!("%{needle}%")],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap()
}

/// Whether process `pid` has the store (or its WAL) open.
fn holds_the_store(pid: u32, home: &Path) -> bool {
    let store = home.join("corral.db").to_string_lossy().into_owned();
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .any(|target| target.to_string_lossy().starts_with(&store))
}

/// `corral run` of a command that says `ready`, waits for a line on its stdin, then runs
/// `then`; returned once its exec's start is stored (by corral itself, beside its command, or
/// by the daemon), so that a store still opening is not mistaken for none.
fn run_waiting(home: &DaemonHome, then: &str, tag: &str) -> Child {
    let script = format!("echo ready; read _; {then} # {tag}");
    let mut child = home
        .corral(&["run", "--", "sh", "-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    next_line(&lines, |line| (line == "ready").then_some(()))
        .unwrap_or_else(|seen| panic!("the command never said ready: {seen:?}"));
    wait_until("the exec's start is stored", || {
        home.db()
            .query_row(
                "SELECT count(*) FROM execs WHERE command LIKE ?1",
                [format!("%{tag}%")],
                |row| row.get::<_, i64>(0),
            )
            .unwrap()
            > 0
    });
    child
}

/// Lets the waiting command go on.
fn go(child: &mut Child) {
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
}

#[test]
fn beside_a_daemon_run_opens_no_store_and_the_daemon_records_the_exec() {
    let home = DaemonHome::new();
    // Without a daemon (`run` never starts one), corral holds the store while its command
    // runs: the comparison that shows the check below can see an open store. (The first run
    // makes the store, which the test then reads.)
    assert!(home.run(&["run", "--", "true"]).status.success());
    let mut alone = run_waiting(&home, "exit 5", "alone");
    let held = holds_the_store(alone.id(), home.path());
    go(&mut alone);
    let output = finish(alone);
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert!(held, "a run without a daemon opens the store");
    assert_eq!(
        exec_of(&home, "alone"),
        (Some("failed".into()), Some(5), true)
    );

    home.start_daemon();
    let mut beside = run_waiting(&home, "exit 5", "beside");
    let held = holds_the_store(beside.id(), home.path());
    go(&mut beside);
    let output = finish(beside);
    assert_eq!(output.status.code(), Some(5), "{output:?}");
    assert!(!held, "beside a daemon, run opens no store");
    assert_eq!(
        exec_of(&home, "beside"),
        (Some("failed".into()), Some(5), true)
    );

    // The row is the same as the one corral writes itself: its parent and trace reach the
    // command's own corral calls.
    let corral = env!("CARGO_BIN_EXE_corral");
    let script = format!("'{corral}' run -- true inner # nested");
    let output = home.run(&["run", "--", "sh", "-c", &script]);
    assert!(output.status.success(), "{output:?}");
    let (outer, outer_trace): (String, String) = home
        .db()
        .query_row(
            "SELECT id, trace_id FROM execs WHERE command LIKE '%nested%' AND command LIKE '%sh%'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    let (parent, trace): (Option<String>, String) = home
        .db()
        .query_row(
            "SELECT parent_exec_id, trace_id FROM execs WHERE command LIKE '%\"inner\"%' \
             AND command NOT LIKE '%nested%'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(parent.as_deref(), Some(outer.as_str()));
    assert_eq!(trace, outer_trace);
}

#[test]
fn a_daemon_killed_mid_command_leaves_the_end_to_the_store() {
    let home = DaemonHome::new();
    home.start_daemon();
    let daemon = home.daemon_pid().expect("the daemon's pid");
    // Its start is the daemon's; the daemon is gone before its end.
    let mut child = run_waiting(&home, &format!("kill -9 {daemon}; exit 4"), "killed");
    go(&mut child);
    let output = finish(child);
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    assert_eq!(
        exec_of(&home, "killed"),
        (Some("failed".into()), Some(4), true)
    );
}

#[test]
fn the_daemon_records_only_the_callers_own_exec() {
    let home = DaemonHome::new();
    home.start_daemon();
    let mut rpc = Rpc::connect(home.path());
    // No exec.start on this connection: nothing to end.
    let refused = rpc
        .call(
            "exec.end",
            json!({"id": "x", "completed_at": 1, "exit_code": 0, "outcome": "succeeded"}),
        )
        .unwrap_err();
    assert_eq!(refused["code"], -32602, "{refused}");
    // An exec that is not the one this connection's initialize named.
    let record = json!({
        "id": "someone-else", "trace_id": "t", "argv": ["corral"], "pid": std::process::id(),
        "started_at": 1,
    });
    let refused = rpc
        .call("exec.start", json!({ "exec": record }))
        .unwrap_err();
    assert_eq!(refused["code"], -32602, "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("initialize"),
        "{refused}"
    );
    let stored: i64 = home
        .db()
        .query_row(
            "SELECT count(*) FROM execs WHERE id = 'someone-else'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(stored, 0);
}
