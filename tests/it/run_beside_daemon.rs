//! `corral run` beside a daemon: the daemon records the exec (`exec.start`, `exec.end`) and
//! the process opens no store; a daemon gone mid-command leaves the end to the store; the
//! daemon records only the caller's own exec, and ends only the one it started.

use crate::common;

use std::io::Write;
use std::process::{Child, Stdio};

use common::daemon::{finish, lines_of, next_line, wait_until, DaemonHome};
use common::rpc::Rpc;
use common::store::quoted;
use serde_json::json;

/// (outcome, exit code, completed)
type Row = (Option<String>, Option<i32>, bool);

fn exec_of(home: &DaemonHome, needle: &str) -> Row {
    let row = home.store().row(&format!(
        "SELECT outcome, exit_code, completed_at IS NOT NULL FROM execs \
         WHERE command LIKE {} AND command LIKE '%run%'",
        quoted(&format!("%{needle}%"))
    ));
    (
        row[0].as_str().map(str::to_string),
        row[1].as_i64().map(|code| code as i32),
        // SQLite answers the comparison with 0 or 1, PostgreSQL with a boolean.
        row[2] == true || row[2] == 1,
    )
}

/// Whether process `pid` has the store open: the SQLite file (or its WAL), or a connection
/// to the PostgreSQL server.
fn holds_the_store(pid: u32, home: &DaemonHome) -> bool {
    let targets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .collect();
    match home.store_url() {
        None => {
            let store = home.path().join("corral.db").to_string_lossy().into_owned();
            targets.iter().any(|target| target.starts_with(&store))
        }
        Some(url) => {
            let port = server_port(url);
            let sockets: Vec<&str> = targets
                .iter()
                .filter_map(|target| target.strip_prefix("socket:["))
                .filter_map(|rest| rest.strip_suffix(']'))
                .collect();
            tcp_inodes_to(port)
                .iter()
                .any(|inode| sockets.contains(&inode.as_str()))
        }
    }
}

/// The port of a `postgres://` URL's server (5432 when it names none).
fn server_port(url: &str) -> u16 {
    let after_login = url.rsplit_once('@').map_or(url, |(_, rest)| rest);
    let host_port = after_login.split(['/', '?']).next().unwrap_or_default();
    host_port
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(5432)
}

/// The socket inodes of this machine's TCP connections to `port` (`/proc/net/tcp{,6}`:
/// the remote address is the third field, `ADDR:PORT` in hex; the inode the tenth).
fn tcp_inodes_to(port: u16) -> Vec<String> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let remote = fields.get(2)?.rsplit_once(':')?.1;
                    (u16::from_str_radix(remote, 16).ok()? == port)
                        .then(|| fields.get(9).map(|inode| inode.to_string()))
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect()
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
        home.store()
            .value(&format!(
                "SELECT count(*) FROM execs WHERE command LIKE {}",
                quoted(&format!("%{tag}%"))
            ))
            .as_i64()
            .is_some_and(|count| count > 0)
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
    let held = holds_the_store(alone.id(), &home);
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
    let held = holds_the_store(beside.id(), &home);
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
    let outer = home.store().row(
        "SELECT id, trace_id FROM execs WHERE command LIKE '%nested%' AND command LIKE '%sh%'",
    );
    let inner = home.store().row(
        "SELECT parent_exec_id, trace_id FROM execs WHERE command LIKE '%\"inner\"%' \
         AND command NOT LIKE '%nested%'",
    );
    assert_eq!(
        inner[0], outer[0],
        "the inner exec's parent is the outer one"
    );
    assert_eq!(inner[1], outer[1], "one trace");
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
    let stored = home
        .store()
        .value("SELECT count(*) FROM execs WHERE id = 'someone-else'");
    assert_eq!(stored, 0);
}
