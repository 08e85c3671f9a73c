//! A home is safe from corral itself: a store that is not ours is never opened by any command,
//! the daemon or the library (issue 10, item 6); commands that only look never start a daemon
//! (item 7); and a program embedding corral cannot start a second supervisor on a home a
//! daemon serves, nor a daemon on a home a program serves (item 8). Every test runs the built
//! binary in a temporary `CORRAL_HOME`.

use crate::common;

use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::Value;

use common::daemon::{processes_of, wait_until, DaemonHome};
use common::{stderr, stdout, Home};
use corral::{Corral, CorralOptions};
use rusqlite::Connection;

const UNAVAILABLE: &str = "Exec history unavailable: no compatible process ledger";

/// What an inspection exits with when it could not do all it was asked because no daemon runs.
const NO_DAEMON: i32 = 3;

/// Files that are not a corral store this binary may use, WAL-mode ones among them (a
/// reader's connection to those would leave `-wal` and `-shm` beside them).
fn foreign_stores(scratch: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let mut files = vec![("not SQLite", b"retained incompatible store".to_vec())];
    for (name, pragmas) in [
        ("another program's SQLite", "PRAGMA application_id = 1234"),
        (
            "another program's SQLite in WAL mode",
            "PRAGMA application_id = 1234; PRAGMA journal_mode = WAL",
        ),
        (
            "a SQLite file with tables and no id",
            "PRAGMA user_version = 0",
        ),
        (
            "a WAL-mode SQLite file with no id",
            "PRAGMA journal_mode = WAL",
        ),
        (
            "a newer corral schema",
            "PRAGMA application_id = 1129468492; PRAGMA user_version = 999",
        ),
        (
            "a newer corral schema in WAL mode",
            "PRAGMA application_id = 1129468492; PRAGMA user_version = 999; \
             PRAGMA journal_mode = WAL",
        ),
    ] {
        let path = scratch.join(format!("{}.db", files.len()));
        let connection = Connection::open(&path).unwrap();
        connection
            .execute_batch(&format!(
                "CREATE TABLE t(x); INSERT INTO t VALUES (1); {pragmas};"
            ))
            .unwrap();
        drop(connection);
        assert!(!scratch.join(format!("{}.db-wal", files.len())).exists());
        files.push((name, std::fs::read(&path).unwrap()));
    }
    files
}

/// The names in a directory, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every command a user may run on a home, with arguments that would work on a real store.
fn every_command(project_dir: &str, socket: &str) -> Vec<Vec<String>> {
    let add = ["project", "add", "p", project_dir];
    let connect = ["connect", "s", "--socket", socket];
    let commands: Vec<&[&str]> = vec![
        &["session", "list"],
        &["session", "list", "--json"],
        &["session", "show", "s"],
        &["session", "new", "p"],
        &["session", "rename", "s", "title"],
        &["session", "archive", "s"],
        &add,
        &["project", "list"],
        &["project", "show", "p"],
        &["project", "set", "p", "--model", "m"],
        &["project", "archive", "p"],
        &["config", "get", "slots.total"],
        &["config", "list"],
        &["config", "set", "slots.total", "2"],
        &["config", "unset", "slots.total"],
        &["status"],
        &["status", "--json"],
        &["history", "s"],
        &["watch", "s"],
        &["watch", "s", "--follow"],
        &["send", "s", "hello"],
        &["send", "s", "hello", "--wait"],
        &["cancel", "s"],
        &["attach", "s"],
        &["steer", "s", "more"],
        &["compact", "s"],
        &connect,
        &["monitor"],
        &["monitor", "list"],
        &["monitor", "show", "0190"],
        &["monitor", "prune", "--dry-run"],
        &["daemon"],
        &["daemon", "--detach"],
        &["--no-spawn", "session", "new", "p"],
    ];
    commands
        .into_iter()
        .map(|args| args.iter().map(|arg| arg.to_string()).collect())
        .collect()
}

fn run_in(home: &Home, args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = home
        .corral(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::daemon::finish(child)
}

#[test]
fn every_command_refuses_a_foreign_store_in_one_line_and_leaves_it_as_it_is() {
    let scratch = tempfile::tempdir().unwrap();
    let project_dir = scratch.path().join("project");
    std::fs::create_dir(&project_dir).unwrap();
    let socket = scratch.path().join("native.sock");
    let commands = every_command(project_dir.to_str().unwrap(), socket.to_str().unwrap());
    for (kind, bytes) in foreign_stores(scratch.path()) {
        let home = Home::new();
        std::fs::write(home.db_path(), &bytes).unwrap();
        for args in &commands {
            let output = run_in(&home, args);
            let said = stderr(&output);
            assert_eq!(
                output.status.code(),
                Some(1),
                "{kind}: {args:?}: {output:?}"
            );
            assert_eq!(said.lines().count(), 1, "{kind}: {args:?}: {said}");
            assert!(said.contains(UNAVAILABLE), "{kind}: {args:?}: {said}");
            assert!(
                said.contains(&home.db_path().display().to_string()),
                "{kind}: {args:?}: the line names the file: {said}"
            );
            assert_eq!(
                std::fs::read(home.db_path()).unwrap(),
                bytes,
                "{kind}: {args:?} changed the file"
            );
            assert_eq!(
                entries(home.path()),
                ["corral.db"],
                "{kind}: {args:?} left files beside the store"
            );
            assert!(!socket.exists(), "{kind}: {args:?}");
        }
        assert!(
            processes_of(home.path()).is_empty(),
            "{kind}: a process is left"
        );
    }
}

#[test]
fn commands_that_need_no_store_run_unrecorded_beside_a_foreign_one() {
    let scratch = tempfile::tempdir().unwrap();
    for (kind, bytes) in foreign_stores(scratch.path()) {
        let home = Home::new();
        std::fs::write(home.db_path(), &bytes).unwrap();
        let output = home.run(&["run", "--", "sh", "-c", "exit 7"]);
        assert_eq!(output.status.code(), Some(7), "{kind}: {output:?}");
        assert_eq!(stderr(&output).lines().count(), 1, "{kind}: {output:?}");
        assert!(stderr(&output).contains(UNAVAILABLE), "{kind}: {output:?}");
        let output = home.run(&["completions", "bash"]);
        assert_eq!(output.status.code(), Some(0), "{kind}: {output:?}");
        assert!(!output.stdout.is_empty());
        assert_eq!(std::fs::read(home.db_path()).unwrap(), bytes, "{kind}");
        assert_eq!(entries(home.path()), ["corral.db"], "{kind}");
    }
}

#[test]
fn the_library_refuses_a_foreign_store_and_touches_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    for (kind, bytes) in foreign_stores(scratch.path()) {
        let home = Home::new();
        std::fs::write(home.db_path(), &bytes).unwrap();
        let refused = actix::System::new()
            .block_on(Corral::start(CorralOptions::new(home.path())))
            .err()
            .unwrap_or_else(|| panic!("{kind}: the library started on a foreign store"));
        let message = refused.to_string();
        assert!(message.contains(UNAVAILABLE), "{kind}: {message}");
        assert_eq!(message.lines().count(), 1, "{kind}: {message}");
        assert_eq!(std::fs::read(home.db_path()).unwrap(), bytes, "{kind}");
        // Nothing beside the store. Only a file whose header looks like a store created but
        // never migrated is refused by its first (read) connection, after the home's lock was
        // taken (the lock comes before the ledger opens the store, so that no supervisor's
        // migration runs under another's): its lock file stays, corral's own.
        let mut expected = vec!["corral.db"];
        if kind == "a SQLite file with tables and no id" {
            expected.push("daemon.lock");
        }
        assert_eq!(entries(home.path()), expected, "{kind}");
    }
}

// ---------------------------------------------------------------------------------------------
// Inspection does not start work

/// A home with a project `p`, a session `s` whose one prompt is done, and no daemon (the one
/// that did the work was stopped).
fn home_with_history() -> DaemonHome {
    let home = DaemonHome::new();
    home.config(&[
        (
            "engines.fake.path",
            env!("CARGO_BIN_EXE_corral-fake-engine"),
        ),
        ("daemon.shutdown_grace_ms", "500"),
        ("slots.fake", "2"),
    ]);
    home.add_project("p", &home.work(), "fake");
    home.new_session(&["p", "--title", "s"]);
    let answer = home.ok(&["send", "s", "@fake answer=all done\nwork", "--wait"]);
    assert!(answer.contains("all done"), "{answer}");
    home.stop_daemon();
    assert_no_daemon(&home, "after the setup");
    home
}

fn assert_no_daemon(home: &DaemonHome, after: &str) {
    assert!(
        !home.path().join("daemon.pid").exists(),
        "{after}: daemon.pid exists"
    );
    assert!(
        !home.path().join("corral.sock").exists(),
        "{after}: corral.sock exists"
    );
    let left = processes_of(home.path());
    assert!(
        left.is_empty(),
        "{after}: processes of the home run: {left:?}"
    );
}

/// The inspections, and what each exits with on a home no daemon serves.
const INSPECTIONS: &[(&[&str], i32)] = &[
    (&["session", "list"], 0),
    (&["session", "list", "--json"], 0),
    (&["session", "list", "--all", "--project", "p"], 0),
    (&["session", "show", "s"], 0),
    (&["session", "show", "s", "--json"], 0),
    (&["history", "s"], 0),
    (&["history", "s", "--json"], 0),
    (&["watch", "s"], 0),
    (&["watch", "s", "--json"], 0),
    (&["watch", "s", "--follow"], NO_DAEMON),
    (&["status"], NO_DAEMON),
    (&["status", "--json"], NO_DAEMON),
    (&["project", "list"], 0),
    (&["project", "list", "--json"], 0),
    (&["project", "show", "p"], 0),
    (&["project", "show", "p", "--json"], 0),
    (&["config", "get", "slots.fake"], 0),
    (&["config", "get", "slots.fake", "--json"], 0),
    (&["config", "list"], 0),
    (&["config", "list", "--json"], 0),
    (&["monitor"], 0),
    (&["monitor", "list", "--all"], 0),
    (&["monitor", "list", "--all", "--json"], 0),
];

#[test]
fn inspections_read_the_store_and_never_start_a_daemon() {
    let home = home_with_history();
    let log = home.path().join("daemon.log");
    let log_before = std::fs::metadata(&log).unwrap().len();
    for (args, code) in INSPECTIONS {
        let output = home.run(args);
        assert_eq!(output.status.code(), Some(*code), "{args:?}: {output:?}");
        assert!(!output.stdout.is_empty(), "{args:?}: {output:?}");
        assert!(
            !stderr(&output).contains("started one"),
            "{args:?}: {output:?}"
        );
        assert_no_daemon(&home, &format!("after {args:?}"));
        if args.contains(&"--json") {
            let text = stdout(&output);
            let documents: Vec<&str> = if args[0] == "watch" {
                text.lines().collect()
            } else {
                vec![&text]
            };
            for document in documents {
                serde_json::from_str::<Value>(document)
                    .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {text}"));
            }
        }
    }
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        log_before,
        "the daemon's log was written: a daemon started"
    );
}

#[test]
fn inspections_without_a_daemon_say_what_they_found() {
    let home = home_with_history();
    let list = home.ok(&["session", "list"]);
    assert!(list.contains(" s") && list.contains("p "), "{list}");
    let history = home.ok(&["history", "s"]);
    assert!(history.contains("all done"), "{history}");
    let watched = home.ok(&["watch", "s"]);
    assert!(watched.contains("prompt.done"), "{watched}");
    // --follow: the stored events, then one line that says why it stops.
    let output = home.run(&["watch", "s", "--follow"]);
    assert_eq!(stdout(&output), watched);
    let said = stderr(&output);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("no daemon runs for"), "{said}");
    // status: one line, exit 3; --json: the store's view, daemon null.
    let output = home.run(&["status"]);
    assert_eq!(output.status.code(), Some(NO_DAEMON), "{output:?}");
    assert_eq!(stdout(&output).lines().count(), 1, "{output:?}");
    assert!(stdout(&output).contains("no daemon runs for"), "{output:?}");
    assert!(stderr(&output).is_empty(), "{output:?}");
    let output = home.run(&["status", "--json"]);
    assert_eq!(output.status.code(), Some(NO_DAEMON), "{output:?}");
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["daemon"], Value::Null, "{status}");
    assert_eq!(status["sessions"], 1, "{status}");
    // Selectors and names are checked as the daemon checks them.
    let said = home.fails(&["session", "show", "nope"], 1);
    assert!(said.contains("No session matches 'nope'"), "{said}");
    let said = home.fails(&["config", "get", "no.such.setting"], 2);
    assert!(said.contains("unknown setting"), "{said}");
    assert_eq!(home.ok(&["config", "get", "slots.fake"]).trim(), "2");
    assert_no_daemon(&home, "after the inspections");
    // A change starts one, as before.
    let output = home.run(&["session", "new", "p", "--title", "t"]);
    assert!(output.status.success(), "{output:?}");
    assert!(stderr(&output).contains("started one"), "{output:?}");
    assert!(home.daemon_pid().is_some());
    home.stop_daemon();
}

#[test]
fn an_inspection_on_a_new_home_starts_no_daemon() {
    for args in [
        &["session", "list"][..],
        &["project", "list"],
        &["config", "list"],
        &["status"],
    ] {
        let home = DaemonHome::new();
        let output = home.run(args);
        let code = if args[0] == "status" { NO_DAEMON } else { 0 };
        assert_eq!(output.status.code(), Some(code), "{args:?}: {output:?}");
        assert_no_daemon(&home, &format!("after {args:?}"));
        assert!(!home.path().join("daemon.log").exists(), "{args:?}");
    }
}

#[test]
fn inspections_read_the_same_through_the_daemon_and_from_the_store() {
    let home = home_with_history();
    home.start_daemon();
    let session = home.json(&["session", "show", "s", "--json"]);
    let prompt = session["prompts"][0]["id"].as_str().unwrap().to_string();
    let reads: Vec<Vec<&str>> = vec![
        vec!["session", "list", "--json"],
        vec!["session", "list", "--all", "--project", "p", "--json"],
        vec!["session", "show", "s", "--json"],
        vec!["history", "s", "--json"],
        vec!["project", "list", "--all", "--json"],
        vec!["project", "show", "p", "--json"],
        vec!["config", "get", "slots.fake", "--json"],
        vec!["config", "get", "slots.total", "--json"],
        vec!["config", "list", "--json"],
        vec!["watch", "s", "--json"],
        vec!["watch", "s", "--after", "2"],
        vec!["session", "list"],
        vec!["history", "s"],
    ];
    let through_daemon: Vec<String> = reads.iter().map(|args| home.ok(args)).collect();
    home.stop_daemon();
    for (args, expected) in reads.iter().zip(&through_daemon) {
        assert_eq!(&home.ok(args), expected, "{args:?}");
    }
    assert!(through_daemon[3].contains(&prompt));
    assert_no_daemon(&home, "after the reads");
}

// ---------------------------------------------------------------------------------------------
// One supervisor per home

/// The runs of the home's one prompt: (status, pid).
fn runs(home: &DaemonHome) -> Vec<(String, Option<i64>)> {
    let history = home.json(&["history", "s", "--json"]);
    history["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            (
                run["status"].as_str().unwrap().to_string(),
                run["pid"].as_i64(),
            )
        })
        .collect()
}

#[test]
fn the_library_is_refused_on_a_home_a_daemon_serves_and_its_prompt_runs_on() {
    let home = DaemonHome::new();
    home.config(&[
        (
            "engines.fake.path",
            env!("CARGO_BIN_EXE_corral-fake-engine"),
        ),
        ("daemon.shutdown_grace_ms", "500"),
    ]);
    home.add_project("p", &home.work(), "fake");
    home.new_session(&["p", "--title", "s"]);
    let daemon = home.daemon_pid().expect("a daemon was started");
    home.ok(&["send", "s", "@fake delay=5000\n@fake answer=survived\nwork"]);
    wait_until(
        "the prompt's engine runs",
        || matches!(runs(&home).as_slice(), [(status, Some(_))] if status == "running"),
    );
    let engine = runs(&home)[0].1.unwrap() as i32;

    let refused = actix::System::new()
        .block_on(Corral::start(CorralOptions::new(home.path())))
        .err()
        .expect("a second supervisor started on a home a daemon serves");
    let message = refused.to_string();
    assert!(
        message.contains(&format!("pid {daemon}")) && message.contains("daemon.lock"),
        "the error does not name the daemon: {message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");

    // The daemon's run was not touched: same run, same engine, alive, and it ends well.
    assert_eq!(runs(&home), [("running".to_string(), Some(engine as i64))]);
    assert!(
        common::daemon::alive(engine),
        "the daemon's engine was ended"
    );
    let answer = home.ok(&["send", "s", "@fake answer=next\nnext", "--wait"]);
    assert!(answer.contains("next"), "{answer}");
    let history = home.json(&["history", "s", "--json"]);
    let prompts = history["prompts"].as_array().unwrap();
    assert_eq!(prompts[0]["status"], "done", "{history}");
    assert!(
        prompts[0]["answer"].as_str().unwrap().contains("survived"),
        "{history}"
    );
    let first_runs: Vec<&Value> = history["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|run| run["prompt_id"] == prompts[0]["id"])
        .collect();
    assert_eq!(first_runs.len(), 1, "the prompt ran again: {history}");
    assert_eq!(first_runs[0]["status"], "succeeded", "{history}");
    assert_eq!(home.daemon_pid(), Some(daemon));
    home.stop_daemon();
}

#[test]
fn a_daemon_is_refused_on_a_home_a_program_serves() {
    let home = DaemonHome::new();
    let work = home.work().to_string_lossy().into_owned();
    let me = std::process::id();
    actix::System::new().block_on(async {
        let corral = Corral::start(CorralOptions::new(home.path()))
            .await
            .unwrap();
        corral
            .add_project(corral::store::projects::NewProject {
                name: "embedded".into(),
                path: work.clone(),
                ..Default::default()
            })
            .await
            .unwrap();

        // A second supervisor in the same program is refused too.
        let again = Corral::start(CorralOptions::new(home.path()))
            .await
            .err()
            .expect("a second supervisor in one program");
        assert!(again.to_string().contains(&format!("pid {me}")), "{again}");

        // `corral daemon`, in the foreground and detached: refused, naming this program.
        for args in [&["daemon"][..], &["daemon", "--detach"]] {
            let said = home.fails(args, 1);
            assert!(
                said.contains(&format!("pid {me}")) && said.contains("already"),
                "{args:?}: {said}"
            );
        }
        // A change would start a daemon: it fails instead of starting a second supervisor.
        let said = home.fails(&["config", "set", "slots.total", "2"], 1);
        assert!(said.contains(&format!("pid {me}")), "{said}");
        // An inspection reads the store the program writes.
        let projects = home.json(&["project", "list", "--json"]);
        assert_eq!(projects[0]["name"], "embedded", "{projects}");
        assert!(home.daemon_pid().is_none());
        assert!(processes_of(home.path()).is_empty());
    });
    // The program's supervisor is gone: a daemon may serve the home now.
    home.start_daemon();
    let projects = home.json(&["project", "list", "--json"]);
    assert_eq!(projects[0]["name"], "embedded", "{projects}");
    home.stop_daemon();
}

/// A daemon checks its SQLite store as it starts (`PRAGMA quick_check`): `status` says what it
/// found, and a store with a damaged page is refused in one line naming the repair, before
/// anything runs on it (its first failing write would fail every prompt of a session).
#[test]
fn a_damaged_store_is_refused_at_the_daemons_start_in_one_line() {
    let home = DaemonHome::new();
    if home.store_url().is_some() {
        println!("skipping: about the SQLite file");
        return;
    }
    home.start_daemon();
    let status = home.json(&["status", "--json"]);
    let checked = status["store"]["checked"].as_str().unwrap_or_default();
    assert!(checked.starts_with("sound"), "{status}");
    assert!(home.ok(&["status"]).contains("sound (quick_check in"));
    home.stop_daemon();

    // Every page in the main file, then the root page of the events table overwritten (one
    // that the command starting the daemon does not touch).
    let db = home.db();
    db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let root: i64 = db
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = 'events'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    let page_size: i64 = db
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap();
    drop(db);
    let path = home.path().join("corral.db");
    let mut bytes = std::fs::read(&path).unwrap();
    let at = ((root - 1) * page_size) as usize;
    bytes[at..at + 64].fill(0xa5);
    std::fs::write(&path, &bytes).unwrap();

    let line = home.fails(&["daemon", "start"], 1);
    assert_eq!(line.trim_end().lines().count(), 1, "{line}");
    assert!(line.contains("is damaged"), "{line}");
    assert!(line.contains(".recover"), "{line}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "left untouched");
    assert!(home
        .daemon_pid()
        .is_none_or(|pid| !common::daemon::alive(pid)));

    // A command whose own write meets the damage says so, and how to repair it.
    let db = home.db();
    let root: i64 = db
        .query_row(
            "SELECT rootpage FROM sqlite_master WHERE name = 'execs'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    drop(db);
    let at = ((root - 1) * page_size) as usize;
    bytes[at..at + 64].fill(0xa5);
    std::fs::write(&path, &bytes).unwrap();
    let line = home.fails(&["session", "list"], 1);
    assert_eq!(line.trim_end().lines().count(), 1, "{line}");
    assert!(line.contains("the store is damaged"), "{line}");
    assert!(line.contains(".recover"), "{line}");
}
