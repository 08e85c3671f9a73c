//! The store as users meet it: early commands, files that are not ours, migrations, locks,
//! homes that cannot be used, and a panic that still completes its exec.

use crate::common;

use common::{stderr, Home};
use corral::store::migrations;
use rusqlite::Connection;
use std::process::Output;

const UNAVAILABLE: &str = "Exec history unavailable: no compatible process ledger";

const EARLY: [(&[&str], i32); 3] = [
    (&["--help"], 0),
    (&["--version"], 0),
    (&["monitor", "list", "--definitely-not-a-flag"], 2),
];

/// Three kinds of file that are not a corral store.
fn foreign_stores(path: &std::path::Path) -> Vec<(&'static str, Vec<u8>)> {
    let mut files = vec![("not SQLite", b"retained incompatible store".to_vec())];
    for (name, pragma) in [
        ("a SQLite file with no id", "PRAGMA user_version = 0"),
        ("another program's SQLite", "PRAGMA application_id = 1234"),
        (
            "a newer corral schema",
            "PRAGMA application_id = 1129468492; PRAGMA user_version = 999",
        ),
    ] {
        let _ = std::fs::remove_file(path);
        let connection = Connection::open(path).unwrap();
        connection
            .execute_batch(&format!(
                "CREATE TABLE t(x); INSERT INTO t VALUES (1); {pragma};"
            ))
            .unwrap();
        drop(connection);
        files.push((name, std::fs::read(path).unwrap()));
    }
    let _ = std::fs::remove_file(path);
    files
}

#[test]
fn early_commands_leave_a_foreign_store_byte_identical() {
    let scratch = tempfile::tempdir().unwrap();
    for (kind, bytes) in foreign_stores(&scratch.path().join("x.db")) {
        for (args, code) in EARLY {
            let home = Home::new();
            std::fs::write(home.db_path(), &bytes).unwrap();
            let output = home.corral(args).env("PATH", "").output().unwrap();
            assert_eq!(
                output.status.code(),
                Some(code),
                "{kind} {args:?} {output:?}"
            );
            assert!(stderr(&output).contains(UNAVAILABLE), "{kind} {output:?}");
            if code == 0 {
                assert!(!output.stdout.is_empty());
            } else {
                assert!(
                    stderr(&output).contains("unexpected argument"),
                    "{output:?}"
                );
            }
            assert_eq!(
                std::fs::read(home.db_path()).unwrap(),
                bytes,
                "{kind} {args:?}"
            );
            let files = std::fs::read_dir(home.path()).unwrap().count();
            assert_eq!(files, 1, "{kind} {args:?}: new files beside the store");
        }
    }
}

#[test]
fn normal_commands_run_without_recording_into_a_foreign_store() {
    let scratch = tempfile::tempdir().unwrap();
    for (kind, bytes) in foreign_stores(&scratch.path().join("x.db")) {
        let home = Home::new();
        std::fs::write(home.db_path(), &bytes).unwrap();
        let output = home.run(&["run", "--", "sh", "-c", "exit 7"]);
        assert_eq!(output.status.code(), Some(7), "{kind} {output:?}");
        assert!(stderr(&output).contains(UNAVAILABLE), "{kind} {output:?}");
        let monitor = home.run(&["monitor", "list"]);
        assert_eq!(monitor.status.code(), Some(1), "{kind} {monitor:?}");
        assert_eq!(stderr(&monitor).lines().count(), 1, "{monitor:?}");
        assert_eq!(std::fs::read(home.db_path()).unwrap(), bytes, "{kind}");
        assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 1, "{kind}");
    }
}

/// A store emptied to 0 bytes (no WAL left) in a home a daemon served is refused in one line
/// naming the repair, and left as it is; it is not silently begun again as an empty store. An
/// empty file in a home nothing served yet is a store SQLite just created, and is used.
#[test]
fn an_emptied_store_is_refused_and_a_new_empty_one_is_used() {
    let home = Home::new();
    home.init_store();
    assert!(home.run(&["run", "--", "true"]).status.success());
    // A daemon ran here: its lock and log stay in the home.
    std::fs::write(home.path().join("daemon.log"), "").unwrap();
    for beside in ["corral.db-wal", "corral.db-shm"] {
        let _ = std::fs::remove_file(home.path().join(beside));
    }
    std::fs::write(home.db_path(), b"").unwrap();
    // A looking command fails; `run` runs its command all the same, unrecorded (as with any
    // store it cannot use), and says why.
    for (args, fails) in [
        (&["session", "list"][..], true),
        (&["status"], true),
        (&["run", "--", "true"], false),
    ] {
        let output = home.run(args);
        assert_eq!(!output.status.success(), fails, "{args:?} {output:?}");
        let said = stderr(&output);
        assert!(said.contains("empty (0 bytes, no WAL)"), "{args:?} {said}");
        assert!(said.contains("restore it from a backup"), "{args:?} {said}");
        assert_eq!(
            std::fs::metadata(home.db_path()).unwrap().len(),
            0,
            "{args:?}"
        );
        assert!(!home.path().join("corral.db-wal").exists(), "{args:?}");
    }

    let fresh = Home::new();
    std::fs::write(fresh.db_path(), b"").unwrap();
    let output = fresh.run(&["run", "--", "true"]);
    assert!(output.status.success(), "{output:?}");
    let recorded = fresh.json(&["monitor", "list", "--json"]);
    let entries = recorded["entries"].as_array().map(Vec::len);
    assert_eq!(entries, Some(2), "the run and the list: {recorded}");
}

#[test]
fn early_commands_never_create_a_store() {
    for (args, code) in EARLY {
        let home = Home::new();
        let output = home.run(args);
        assert_eq!(output.status.code(), Some(code), "{output:?}");
        assert!(!stderr(&output).contains(UNAVAILABLE), "{output:?}");
        assert_eq!(
            std::fs::read_dir(home.path()).unwrap().count(),
            0,
            "{args:?}"
        );
    }
}

#[test]
fn early_commands_record_exact_exits_without_migrating() {
    let home = Home::new();
    home.init_store();
    let schema = home.schema();
    home.db().execute("DELETE FROM execs", []).unwrap();
    for (args, code) in EARLY {
        let output = home.corral(args).env("PATH", "").output().unwrap();
        assert_eq!(output.status.code(), Some(code), "{output:?}");
        assert!(
            !stderr(&output).contains("Exec history unavailable"),
            "{output:?}"
        );
    }
    let rows: Vec<(i32, String, bool)> = home
        .db()
        .prepare("SELECT exit_code, outcome, completed_at IS NOT NULL FROM execs ORDER BY started_at, rowid")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        rows,
        [
            (0, "succeeded".into(), true),
            (0, "succeeded".into(), true),
            (2, "failed".into(), true)
        ]
    );
    assert_eq!(home.schema(), schema);
}

#[test]
fn early_commands_do_not_migrate_an_older_store() {
    let home = Home::new();
    let mut connection = Connection::open(home.db_path()).unwrap();
    connection
        .pragma_update(None, "journal_mode", "WAL")
        .unwrap();
    migrations::migrate_to(&mut connection, 1).unwrap();
    drop(connection);
    let schema = home.schema();
    let output = home.run(&["--version"]);
    assert!(output.status.success());
    assert_eq!(home.schema(), schema);
    let version: u32 = home
        .db()
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, 1);
    let recorded: i64 = home
        .db()
        .query_row(
            "SELECT count(*) FROM execs WHERE outcome = 'succeeded'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(recorded, 1);
}

#[test]
fn migration_upgrades_a_filled_older_store_without_losing_a_row() {
    let home = Home::new();
    let mut connection = Connection::open(home.db_path()).unwrap();
    connection
        .pragma_update(None, "journal_mode", "WAL")
        .unwrap();
    assert_eq!(migrations::migrate_to(&mut connection, 1).unwrap(), 1);
    let transaction = connection.transaction().unwrap();
    for index in 0..500 {
        transaction
            .execute(
                "INSERT INTO execs(id, trace_id, command, started_at, completed_at, exit_code, outcome) \
                 VALUES (?1, ?1, ?2, ?3, ?3, 0, 'succeeded')",
                rusqlite::params![
                    format!("old-{index:04}"),
                    format!("[\"corral\",\"old\",\"{index}\"]"),
                    index
                ],
            )
            .unwrap();
    }
    transaction.commit().unwrap();
    drop(connection);

    let page = home.json(&[
        "monitor",
        "list",
        "--all",
        "--search",
        "old 42",
        "--outcome",
        "succeeded",
        "--json",
    ]);
    let found: Vec<&str> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        found,
        [
            "old-0429", "old-0428", "old-0427", "old-0426", "old-0425", "old-0424", "old-0423",
            "old-0422", "old-0421", "old-0420", "old-0042"
        ]
    );
    let db = home.db();
    let version: u32 = db
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, migrations::SCHEMA_VERSION);
    let old: i64 = db
        .query_row(
            "SELECT count(*) FROM execs WHERE id LIKE 'old-%'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(old, 500);
    let sessions: i64 = db
        .query_row("SELECT count(*) FROM sessions", [], |row| row.get(0))
        .unwrap();
    assert_eq!(sessions, 0, "migration 2 ran");
}

#[test]
fn a_locked_store_waits_then_fails_with_one_line() {
    let home = Home::new();
    home.init_store();
    // The writer retries a locked store for `store.lock_timeout_ms` (default 60 s) first.
    home.db()
        .execute(
            "INSERT INTO settings (name, value, updated_at) VALUES ('store.lock_timeout_ms', '1000', 0)",
            [],
        )
        .unwrap();
    let before: i64 = home
        .db()
        .query_row("SELECT count(*) FROM execs", [], |row| row.get(0))
        .unwrap();
    let holder = home.db();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let output = home
        .corral(&["run", "--", "true"])
        .env("CORRAL_BUSY_TIMEOUT_MS", "200")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let message = stderr(&output);
    assert!(message.contains("locked by another writer"), "{message}");
    assert!(message.contains("waited 1 s"), "{message}");
    assert!(message.contains("store.lock_timeout_ms"), "{message}");
    assert_eq!(message.lines().count(), 1, "{message}");
    holder.execute_batch("ROLLBACK").unwrap();
    let after: i64 = home
        .db()
        .query_row("SELECT count(*) FROM execs", [], |row| row.get(0))
        .unwrap();
    assert_eq!(after, before);
}

#[test]
fn unusable_homes_fail_with_one_line() {
    let scratch = tempfile::tempdir().unwrap();
    let missing = scratch.path().join("missing");
    let file = scratch.path().join("a-file");
    std::fs::write(&file, "not a directory").unwrap();
    for home in [&missing, &file] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
            .args(["monitor", "list"])
            .env("CORRAL_HOME", home)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        assert_eq!(stderr(&output).lines().count(), 1, "{output:?}");
    }
    assert!(!missing.exists());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a directory");
    // --home takes precedence over CORRAL_HOME.
    let home = Home::new();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["--home"])
        .arg(home.path())
        .args(["monitor", "list"])
        .env("CORRAL_HOME", &missing)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(home.db_path().exists());
}

#[test]
fn a_panic_completes_its_exec_as_failed() {
    let home = Home::new();
    home.init_store();
    let output = home.run(&["__panic"]);
    assert_eq!(output.status.code(), Some(101), "{output:?}");
    let message = stderr(&output);
    assert!(message.starts_with("corral: internal error"), "{message}");
    let row: (i32, String) = home
        .db()
        .query_row(
            "SELECT exit_code, outcome FROM execs WHERE command LIKE '%__panic%'",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .unwrap();
    assert_eq!(row, (101, "failed".into()));
}

#[test]
fn a_home_on_a_read_only_filesystem_fails_with_one_line() {
    let scratch = tempfile::tempdir().unwrap();
    let mount_point = scratch.path().join("ro");
    std::fs::create_dir(&mount_point).unwrap();
    let mounted = std::process::Command::new("mount")
        // Private, as corral makes a home (a tmpfs's root is 1777 otherwise: refused before
        // the store is tried).
        .args(["-t", "tmpfs", "-o", "ro,size=1m,mode=0700", "none"])
        .arg(&mount_point)
        .output();
    match mounted {
        Ok(output) if output.status.success() => {}
        other => {
            println!("skipping: cannot mount a read-only tmpfs here ({other:?})");
            return;
        }
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_corral"))
        .args(["run", "--", "true"])
        .env("CORRAL_HOME", &mount_point)
        .output()
        .unwrap();
    let _ = std::process::Command::new("umount")
        .arg(&mount_point)
        .output();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let message = stderr(&output);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("cannot open the store"), "{message}");
}

/// A store on a filesystem remounted read-only still answers the commands that only look
/// (`status`, `session list`, `monitor list`): each says in one line that it is not recorded,
/// and reads.
#[test]
fn looking_commands_read_a_store_on_a_read_only_filesystem() {
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m,mode=0700", "none"])
        .arg(&home)
        .output();
    match mounted {
        Ok(output) if output.status.success() => {}
        other => {
            println!("skipping: cannot mount a tmpfs here ({other:?})");
            return;
        }
    }
    let corral = |args: &[&str]| common::corral_in(&home, args).output().unwrap();
    let ran = corral(&["run", "--", "true"]);
    let remounted = std::process::Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&home)
        .output()
        .unwrap();
    let looked: Vec<(&str, Output)> = ["status", "session list", "monitor list"]
        .into_iter()
        .map(|args| (args, corral(&args.split(' ').collect::<Vec<_>>())))
        .collect();
    let _ = std::process::Command::new("umount").arg(&home).output();
    assert!(ran.status.success(), "{ran:?}");
    assert!(remounted.status.success(), "{remounted:?}");
    for (args, output) in looked {
        let expected = if args == "status" { 3 } else { 0 };
        assert_eq!(output.status.code(), Some(expected), "{args}: {output:?}");
        let said = stderr(&output);
        assert_eq!(said.lines().count(), 1, "{args}: {said}");
        assert!(
            said.contains("this command is not recorded"),
            "{args}: {said}"
        );
        if args == "monitor list" {
            assert!(
                common::stdout(&output).contains("run -- true"),
                "{output:?}"
            );
        }
    }
}

/// The heads of the queue as the store keeps them (`queue_heads`) and as the prompts say
/// they are (each session's oldest queued prompt), both sorted.
fn heads_kept_and_computed(
    store: &common::store::HomeStore<'_>,
) -> (Vec<Vec<serde_json::Value>>, Vec<Vec<serde_json::Value>>) {
    let kept =
        store.sql("SELECT session_id, prompt_id, created_at FROM queue_heads ORDER BY session_id");
    let computed = store.sql(
        "SELECT p.session_id, p.id, p.created_at FROM prompts p \
          WHERE p.status = 'queued' \
            AND NOT EXISTS (SELECT 1 FROM prompts o \
                             WHERE o.session_id = p.session_id AND o.status = 'queued' \
                               AND (o.created_at, o.id) < (p.created_at, p.id)) \
          ORDER BY p.session_id",
    );
    (kept, computed)
}

#[test]
fn the_queue_heads_follow_every_change_of_a_prompts_status() {
    // What the daemons' claims walk on a shared store: each session's oldest queued prompt.
    // Prompts are queued (some at the same millisecond, the id then decides), claimed,
    // ended, cancelled wherever they stand in their queue, and taken back into the queue (as
    // from a dead daemon), in a fixed pseudo-random order; after each change the heads kept
    // are the heads the prompts give.
    let home = common::daemon::DaemonHome::new();
    home.add_project("p", &home.work(), "fake");
    let sessions: Vec<String> = (0..3).map(|_| home.new_session(&["p"])).collect();
    // Nothing runs them but the test.
    home.stop_daemon();
    let store = home.store();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |below: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % below
    };
    let ids_where = |condition: &str| -> Vec<String> {
        store
            .sql(&format!(
                "SELECT id FROM prompts WHERE {condition} ORDER BY id"
            ))
            .into_iter()
            .map(|row| row[0].as_str().unwrap().to_string())
            .collect()
    };
    let mut made = 0;
    let mut changes = std::collections::BTreeMap::<&str, usize>::new();
    for step in 0..240 {
        let session = &sessions[next(sessions.len())];
        let change = match next(6) {
            0 | 1 => {
                made += 1;
                store.execute(&format!(
                    "INSERT INTO prompts (id, session_id, text, status, created_at) \
                     VALUES ('q{:03}', '{session}', 'x', 'queued', {})",
                    // Two at each millisecond, and the ids out of time order.
                    (made * 7) % 1000,
                    made / 2
                ));
                "queued"
            }
            2 => {
                let running =
                    ids_where(&format!("session_id = '{session}' AND status = 'running'"));
                let (_, computed) = heads_kept_and_computed(&store);
                let head = computed
                    .iter()
                    .find(|row| row[0] == serde_json::json!(session));
                match (running.is_empty(), head) {
                    (true, Some(head)) => {
                        store.execute(&format!(
                            "UPDATE prompts SET status = 'running' WHERE id = {}",
                            common::store::quoted(head[1].as_str().unwrap())
                        ));
                        "claimed"
                    }
                    _ => continue,
                }
            }
            3 => {
                let Some(id) = ids_where("status = 'running'").pop() else {
                    continue;
                };
                store.execute(&format!(
                    "UPDATE prompts SET status = 'done' WHERE id = '{id}'"
                ));
                "ended"
            }
            4 => {
                let queued = ids_where("status = 'queued'");
                if queued.is_empty() {
                    continue;
                }
                let id = &queued[next(queued.len())];
                store.execute(&format!(
                    "UPDATE prompts SET status = 'cancelled' WHERE id = '{id}'"
                ));
                "cancelled"
            }
            _ => {
                let Some(id) = ids_where("status = 'running'").first().cloned() else {
                    continue;
                };
                store.execute(&format!(
                    "UPDATE prompts SET status = 'queued' WHERE id = '{id}'"
                ));
                "taken back"
            }
        };
        *changes.entry(change).or_default() += 1;
        let (kept, computed) = heads_kept_and_computed(&store);
        assert_eq!(kept, computed, "after step {step} ({change})");
    }
    // Every kind of change happened, several times.
    assert_eq!(changes.len(), 5, "{changes:?}");
    assert!(changes.values().all(|count| *count >= 5), "{changes:?}");
}

#[test]
fn a_store_migrated_with_prompts_queued_has_their_heads() {
    if common::store::skip_sqlite_only("migrating a SQLite file from step 12") {
        return;
    }
    let home = Home::new();
    let mut connection = Connection::open(home.db_path()).unwrap();
    migrations::migrate_to(&mut connection, 12).unwrap();
    connection
        .execute_batch(
            "INSERT INTO projects(id, name, path, created_at) VALUES ('p', 'p', '/tmp', 1);
             INSERT INTO sessions(id, project_id, engine, created_at) VALUES
               ('a', 'p', 'fake', 1), ('b', 'p', 'fake', 1), ('c', 'p', 'fake', 1);
             INSERT INTO prompts(id, session_id, text, status, created_at) VALUES
               ('a1', 'a', 'x', 'done', 1), ('a2', 'a', 'x', 'queued', 5),
               ('a3', 'a', 'x', 'queued', 4), ('b2', 'b', 'x', 'queued', 3),
               ('b1', 'b', 'x', 'queued', 3), ('c1', 'c', 'x', 'running', 2);",
        )
        .unwrap();
    migrations::migrate(&mut connection).unwrap();
    let mut heads = connection
        .prepare("SELECT session_id, prompt_id FROM queue_heads ORDER BY session_id")
        .unwrap();
    let heads: Vec<(String, String)> = heads
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        heads,
        [
            ("a".to_string(), "a3".to_string()),
            ("b".into(), "b1".into())
        ]
    );
}
