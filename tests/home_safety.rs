//! A home is safe from corral itself: a store that is not ours is never opened by any command,
//! the daemon or the library (issue 10, item 6). Every test runs the built binary in a
//! temporary `CORRAL_HOME`.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};

use common::daemon::processes_of;
use common::{stderr, Home};
use corral::{Corral, CorralOptions};
use rusqlite::Connection;

const UNAVAILABLE: &str = "Exec history unavailable: no compatible process ledger";

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
        assert_eq!(entries(home.path()), ["corral.db"], "{kind}");
    }
}
