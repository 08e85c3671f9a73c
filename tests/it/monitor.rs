//! `corral monitor`: list (filters, paging), show, prune and the overview, on the built binary;
//! and each exec's host (`CORRAL_HOST` simulates several hosts on one store), on either store.

use crate::common;

use common::daemon::{succeeded, DaemonHome};
use common::store::quoted;
use common::{stderr, stdout, Home};
use rusqlite::params;
use serde_json::Value;

/// A random id: rows made in one millisecond by the ledger would share a long prefix, and
/// these tests need 20-character prefixes to be unique.
fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn ids(page: &Value) -> Vec<String> {
    page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|entry| entry["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn paged_filtered_search_show_and_caller() {
    let home = Home::new();
    home.init_store();
    let db = home.db();
    let parent = new_id();
    db.execute(
        "INSERT INTO execs(id, trace_id, started_at) VALUES (?1, ?1, 1)",
        [&parent],
    )
    .unwrap();
    let argv = serde_json::to_string(&["corral", "pr", "land", "--strict", "%_ literal"]).unwrap();
    let children = [new_id(), new_id(), new_id()];
    for (index, id) in children.iter().enumerate() {
        db.execute(
            "INSERT INTO execs(id, trace_id, parent_exec_id, via_agent, caller_session_id, \
             command, started_at) VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                id,
                parent,
                index != 0,
                (index != 0).then_some("caller-session"),
                argv,
                10 - index as i64
            ],
        )
        .unwrap();
    }
    // The third child completed: the `unknown` outcome filter must leave it out.
    db.execute(
        "UPDATE execs SET completed_at = 20, exit_code = 0, outcome = 'succeeded' WHERE id = ?1",
        [&children[2]],
    )
    .unwrap();
    // A near miss: `%` and `_` as LIKE wildcards would match this one.
    db.execute(
        "INSERT INTO execs(id, trace_id, parent_exec_id, command, started_at) \
         VALUES (?1, ?1, ?2, '[\"corral\",\"PR\",\"land\",\"--strict\",\"xy literal\"]', 11)",
        params![new_id(), parent],
    )
    .unwrap();

    let search = [
        "monitor",
        "list",
        "--all",
        "--parent",
        &parent,
        "--search",
        "PR LAND --strict %_",
        "--outcome",
        "unknown",
        "--limit",
        "1",
        "--json",
    ];
    let first = home.json(&search);
    assert_eq!(ids(&first), [children[0].as_str()]);
    let entry = &first["entries"][0];
    assert_eq!(entry["via_agent"], false);
    assert_eq!(entry["outcome"], Value::Null);
    assert_eq!(
        entry["command"],
        serde_json::json!(["corral", "pr", "land", "--strict", "%_ literal"])
    );
    let cursor = serde_json::to_string(&first["next"]).unwrap();
    assert!(first["next"].is_string(), "{first}");

    let mut more = search.to_vec();
    more.extend(["--after", &cursor]);
    let second = home.json(&more);
    assert_eq!(ids(&second), [children[1].as_str()]);
    assert_eq!(second["entries"][0]["caller_session_id"], "caller-session");
    assert_eq!(second["entries"][0]["via_agent"], true);
    assert_eq!(second["next"], Value::Null);

    // The bare cursor works as well as its JSON form.
    let bare = first["next"].as_str().unwrap().to_string();
    let mut again = search.to_vec();
    again.extend(["--after", &bare]);
    assert_eq!(ids(&home.json(&again)), [children[1].as_str()]);

    let detail = home.json(&["monitor", "show", &children[1][..20], "--json"]);
    assert_eq!(detail, second["entries"][0]);

    let caller = home.json(&[
        "monitor",
        "list",
        "--all",
        "--caller",
        "caller-session",
        "--json",
    ]);
    assert_eq!(ids(&caller), [children[1].as_str(), children[2].as_str()]);

    let text = home.run(&["monitor", "show", &children[1][..20]]);
    assert!(text.status.success(), "{text:?}");
    assert!(stdout(&text).contains(&children[1]), "{text:?}");
}

#[test]
fn task_and_wave_filters_join_through_sessions() {
    let home = Home::new();
    home.init_store();
    let repos = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let tops: Vec<String> = repos
        .iter()
        .map(|repo| {
            std::fs::create_dir(repo.path().join(".git")).unwrap();
            repo.path()
                .canonicalize()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let db = home.db();
    let (wave_a, wave_b) = (new_id(), new_id());
    db.execute(
        "INSERT INTO waves(id, name, repo, created_at) VALUES (?1, 'nightly', ?2, 1), \
         (?3, 'nightly', ?4, 1)",
        params![wave_a, tops[0], wave_b, tops[1]],
    )
    .unwrap();
    db.execute(
        "INSERT INTO sessions(id, engine, task, wave_id, created_at) VALUES \
         ('session-a', 'fake', 'PROJ-12', ?1, 1), ('session-b', 'fake', NULL, ?2, 1)",
        params![wave_a, wave_b],
    )
    .unwrap();
    let (exec_a, exec_b, exec_other) = (new_id(), new_id(), new_id());
    db.execute(
        "INSERT INTO execs(id, trace_id, caller_session_id, repo, command, started_at) VALUES \
         (?1, ?1, 'session-a', ?2, '[\"a\"]', 5), (?3, ?3, 'session-b', ?4, '[\"b\"]', 6), \
         (?5, ?5, NULL, ?2, '[\"c\"]', 7)",
        params![exec_a, tops[0], exec_b, tops[1], exec_other],
    )
    .unwrap();

    let by_task = home.json(&["monitor", "list", "--all", "--task", "PROJ-12", "--json"]);
    assert_eq!(ids(&by_task), [exec_a.as_str()]);

    // Inside a repository the wave name resolves to that repository's wave.
    for (repo, expected) in repos.iter().zip([&exec_a, &exec_b]) {
        let output = home
            .corral(&["monitor", "list", "--wave", "nightly", "--json"])
            .current_dir(repo.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        let page: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(ids(&page), [expected.as_str()]);
    }
    let ambiguous = home.run(&["monitor", "list", "--all", "--wave", "nightly", "--json"]);
    assert_eq!(ambiguous.status.code(), Some(1), "{ambiguous:?}");
    assert!(stderr(&ambiguous).contains("Ambiguous Work selector"));
    let by_id = home.json(&["monitor", "list", "--all", "--wave", &wave_b, "--json"]);
    assert_eq!(ids(&by_id), [exec_b.as_str()]);

    // Without --all the list is scoped to the current repository.
    let output = home
        .corral(&["monitor", "list", "--json"])
        .current_dir(repos[0].path())
        .output()
        .unwrap();
    let page: Value = serde_json::from_slice(&output.stdout).unwrap();
    let scoped = ids(&page);
    assert!(
        scoped.contains(&exec_other) && scoped.contains(&exec_a),
        "{page}"
    );
    assert!(!scoped.contains(&exec_b), "{page}");
    // --repo names another repository (the wave loop above ran a command there too).
    let elsewhere = ids(&home.json(&["monitor", "list", "--repo", &tops[1], "--json"]));
    assert!(elsewhere.contains(&exec_b), "{elsewhere:?}");
    assert!(!elsewhere.contains(&exec_a) && !elsewhere.contains(&exec_other));
}

#[test]
fn limit_zero_unknown_outcome_and_bad_cursor_are_usage_errors() {
    let home = Home::new();
    home.init_store();
    for args in [
        &["monitor", "list", "--limit", "0"][..],
        &["monitor", "list", "--outcome", "weird"],
        &["monitor", "list", "--after", "not-a-cursor"],
    ] {
        let output = home.run(args);
        assert_eq!(output.status.code(), Some(2), "{args:?} {output:?}");
        assert!(!stderr(&output).contains("panicked"), "{output:?}");
    }
}

#[test]
fn show_reports_missing_and_ambiguous_prefixes() {
    let home = Home::new();
    home.init_store();
    let db = home.db();
    db.execute(
        "INSERT INTO execs(id, trace_id, command, started_at) VALUES \
         ('abc-1', 'abc-1', '[\"one\"]', 1), ('abc-2', 'abc-2', '[\"two\"]', 2)",
        [],
    )
    .unwrap();
    let missing = home.run(&["monitor", "show", "zzz"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("No exec matches 'zzz'"),
        "{missing:?}"
    );
    let ambiguous = home.run(&["monitor", "show", "abc"]);
    assert_eq!(ambiguous.status.code(), Some(1));
    let message = stderr(&ambiguous);
    assert!(message.contains("Ambiguous exec prefix 'abc'"), "{message}");
    assert!(
        message.contains("abc-1") && message.contains("abc-2"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");
    let exact = home.json(&["monitor", "show", "abc-2", "--json"]);
    assert_eq!(exact["command"], serde_json::json!(["two"]));
}

#[test]
fn prune_closes_lost_execs_in_text_and_json() {
    for json in [false, true] {
        let home = Home::new();
        home.init_store();
        let db = home.db();
        let lost = new_id();
        // A pid above any pid_max: no such process.
        db.execute(
            "INSERT INTO execs(id, trace_id, command, pid, started_at) \
             VALUES (?1, ?1, '[\"lost\"]', 2147483647, 1)",
            [&lost],
        )
        .unwrap();
        // This test process is alive, but with another start time it is a recycled pid.
        let recycled = new_id();
        db.execute(
            "INSERT INTO execs(id, trace_id, command, pid, pid_start, started_at) \
             VALUES (?1, ?1, '[\"recycled\"]', ?2, 1, 2)",
            params![recycled, std::process::id()],
        )
        .unwrap();
        // Alive with no start time known: not pruned.
        let alive = new_id();
        db.execute(
            "INSERT INTO execs(id, trace_id, command, pid, started_at) \
             VALUES (?1, ?1, '[\"alive\"]', ?2, 3)",
            params![alive, std::process::id()],
        )
        .unwrap();
        let outcome = |id: &str| -> Option<String> {
            db.query_row("SELECT outcome FROM execs WHERE id = ?1", [id], |row| {
                row.get(0)
            })
            .unwrap()
        };
        for dry_run in [true, false] {
            let mut args = vec!["mon", "prune"];
            if dry_run {
                args.push("--dry-run");
            }
            if json {
                args.push("--json");
            }
            let output = home.run(&args);
            assert!(output.status.success(), "{output:?}");
            if json {
                let report: Value = serde_json::from_slice(&output.stdout).unwrap();
                assert_eq!(report["dry_run"], dry_run);
                assert_eq!(report["pruned"], if dry_run { 0 } else { 2 });
                let candidates: Vec<&str> = report["candidates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|exec| exec["id"].as_str().unwrap())
                    .collect();
                assert_eq!(candidates.len(), 2, "{report}");
                assert!(candidates.contains(&lost.as_str()));
                assert!(candidates.contains(&recycled.as_str()));
            } else {
                let action = if dry_run { "WOULD PRUNE" } else { "PRUNED" };
                let text = stdout(&output);
                assert!(text.contains(&format!("{action} {lost}")), "{text}");
                assert!(text.contains(&format!("{action} {recycled}")), "{text}");
                assert!(!text.contains(&alive), "{text}");
            }
            let expected = (!dry_run).then(|| "lost".to_string());
            assert_eq!(outcome(&lost), expected);
            assert_eq!(outcome(&recycled), expected);
            assert_eq!(outcome(&alive), None);
        }
    }
}

#[test]
fn overview_shows_running_gaps_and_recent_commands() {
    let home = Home::new();
    home.init_store();
    let gap = new_id();
    home.db()
        .execute(
            "INSERT INTO execs(id, trace_id, command, pid, started_at) \
             VALUES (?1, ?1, '[\"gone\"]', 2147483647, 1)",
            [&gap],
        )
        .unwrap();
    let overview = home.json(&["monitor", "--all", "--json"]);
    assert!(overview["items"].is_array());
    assert!(overview["active"]["gaps"].is_array());
    let gaps: Vec<&str> = overview["active"]["lost_execs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|exec| exec["id"].as_str().unwrap())
        .collect();
    assert_eq!(gaps, [gap.as_str()]);
    // The overview's own exec is running while it looks.
    let running = overview["active"]["execs"].as_array().unwrap();
    assert_eq!(running.len(), 1, "{overview}");
    assert!(running[0]["command"].to_string().contains("monitor"));
    assert!(
        overview["recent_commands"]["entries"]
            .as_array()
            .unwrap()
            .len()
            >= 2
    );
    for alias in ["ps", "top", "mon"] {
        let help = home.run(&[alias, "--help"]);
        assert!(help.status.success(), "{help:?}");
        assert!(stdout(&help).contains("monitor"), "{help:?}");
    }
    let text = home.run(&["top", "--all"]);
    assert!(text.status.success());
    assert!(stdout(&text).contains("RECENT COMMANDS"), "{text:?}");
}

#[test]
fn overview_lists_sessions_by_state_and_runs_whose_engine_is_gone() {
    let home = Home::new();
    home.init_store();
    let db = home.db();
    db.execute_batch(
        "INSERT INTO projects(id, name, path, created_at) VALUES ('p', 'proj', '/tmp', 1);
         INSERT INTO sessions(id, project_id, engine, created_at) VALUES
           ('s-waiting', 'p', 'fake', 1), ('s-failed', 'p', 'fake', 2),
           ('s-unknown', 'p', 'fake', 3), ('s-active', 'p', 'fake', 4),
           ('s-cancelled', 'p', 'fake', 7);
         INSERT INTO sessions(id, project_id, engine, created_at, archived_at)
           VALUES ('s-finished', 'p', 'fake', 5, 6);
         INSERT INTO prompts(id, session_id, text, status, answer, created_at, finished_at) VALUES
           ('q1', 's-waiting', 'hi', 'done', 'Review the API
more', 1, 2);
         INSERT INTO prompts(id, session_id, text, status, error, created_at, finished_at) VALUES
           ('q2', 's-failed', 'hi', 'failed', 'quota exceeded', 1, 2);
         INSERT INTO prompts(id, session_id, text, status, created_at) VALUES
           ('q3', 's-active', 'long job', 'running', 1);
         INSERT INTO prompts(id, session_id, text, status, created_at, finished_at) VALUES
           ('q4', 's-cancelled', 'runaway task', 'cancelled', 1, 2);
         INSERT INTO runs(id, prompt_id, session_id, attempt, engine, argv, pid, started_at)
           VALUES ('r-gone', 'q3', 's-active', 1, 'fake', '[]', 2147483647, 1);",
    )
    .unwrap();
    let overview = home.json(&["monitor", "--all", "--json"]);
    let items = overview["items"].as_array().unwrap();
    for (id, state, reason, action) in [
        (
            "s-waiting",
            "idle",
            "answered: Review the API",
            "corral attach s-waiting",
        ),
        (
            "s-failed",
            "failed",
            "quota exceeded",
            "corral history s-failed",
        ),
        (
            "s-unknown",
            "idle",
            "no prompt yet",
            "corral attach s-unknown",
        ),
        (
            "s-active",
            "working",
            "running: long job",
            "corral watch s-active",
        ),
        (
            "s-finished",
            "archived",
            "archived",
            "corral history s-finished",
        ),
    ] {
        let item = items.iter().find(|item| item["id"] == id).unwrap();
        assert_eq!(item["state"], state, "{item}");
        assert_eq!(item["reason"], reason, "{item}");
        assert_eq!(item["next_action"], action, "{item}");
    }
    let gaps: Vec<&str> = overview["active"]["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| run["id"].as_str().unwrap())
        .collect();
    assert_eq!(gaps, ["r-gone"]);
}

/// `corral ARGS…` in `home` as if run on host `host`; it must succeed. Its stdout.
fn on_host(home: &DaemonHome, host: &str, args: &[&str]) -> String {
    let output = home
        .corral(args)
        .env("CORRAL_HOST", host)
        .output()
        .expect("corral runs");
    succeeded(args, &output)
}

/// The entries of `monitor list --all --json` run on `host`.
fn entries_seen_from(home: &DaemonHome, host: &str) -> Vec<Value> {
    let args = ["monitor", "list", "--all", "--json"];
    let page: Value = serde_json::from_str(&on_host(home, host, &args)).unwrap();
    page["entries"].as_array().expect("entries").clone()
}

#[test]
fn execs_record_their_host() {
    let home = DaemonHome::new();
    on_host(&home, "alpha", &["monitor", "list", "--all"]);
    // An early command records whole, through the other insert.
    on_host(&home, "alpha", &["--version"]);
    let entries = entries_seen_from(&home, "alpha");
    // The two above and the listing itself, still open while it lists.
    assert_eq!(entries.len(), 3, "{entries:?}");
    for entry in &entries {
        assert_eq!(entry["host"], "alpha", "{entry}");
    }
    let id = entries[1]["id"].as_str().unwrap();
    let shown: Value =
        serde_json::from_str(&on_host(&home, "alpha", &["monitor", "show", id, "--json"])).unwrap();
    assert_eq!(shown["host"], "alpha");
    let text = on_host(&home, "alpha", &["monitor", "show", id]);
    assert!(text.contains("host:      alpha"), "{text}");
    // A row from before hosts were recorded has the key, null.
    home.execute(&format!(
        "INSERT INTO execs(id, trace_id, started_at) VALUES ({0}, {0}, 1)",
        quoted("old-row")
    ));
    let old = entries_seen_from(&home, "alpha")
        .into_iter()
        .find(|entry| entry["id"] == "old-row")
        .expect("the old row is listed");
    assert_eq!(old.get("host"), Some(&Value::Null), "{old}");
}

#[test]
fn monitor_shows_a_host_column_with_more_than_one_host() {
    let home = DaemonHome::new();
    on_host(&home, "alpha", &["monitor", "list", "--all"]);
    let header = |text: &str| text.lines().next().unwrap_or_default().to_string();
    let one_host = on_host(&home, "alpha", &["monitor", "list", "--all"]);
    assert!(header(&one_host).starts_with("ID "), "{one_host}");
    assert!(!header(&one_host).contains("HOST"), "{one_host}");
    assert!(!one_host.contains("alpha"), "{one_host}");

    on_host(&home, "beta", &["monitor", "list", "--all"]);
    let two_hosts = on_host(&home, "alpha", &["monitor", "list", "--all"]);
    let columns = header(&two_hosts);
    assert_eq!(
        columns.split_whitespace().nth(1),
        Some("HOST"),
        "{two_hosts}"
    );
    let hosts: Vec<&str> = two_hosts
        .lines()
        .skip(1)
        .filter_map(|row| row.split_whitespace().nth(1))
        .collect();
    assert!(
        hosts.contains(&"alpha") && hosts.contains(&"beta"),
        "{two_hosts}"
    );
    // The overview's recent commands too.
    let overview = on_host(&home, "beta", &["monitor", "--all"]);
    let recent = overview
        .split("RECENT COMMANDS\n")
        .nth(1)
        .expect("a recent commands table");
    assert!(
        header(recent).split_whitespace().nth(1) == Some("HOST"),
        "{overview}"
    );
}

#[test]
fn monitor_prune_closes_only_its_own_hosts_lost_execs() {
    // Hosts matter on a store several share: PostgreSQL.
    let Some(home) = DaemonHome::on_postgres() else {
        return;
    };
    on_host(&home, "alpha", &["monitor", "list", "--all"]);
    // A pid above any pid_max: no such process, on whichever host.
    for (id, host) in [
        ("lost-on-alpha", "'alpha'"),
        ("lost-on-beta", "'beta'"),
        ("lost-before-hosts", "NULL"),
    ] {
        home.execute(&format!(
            "INSERT INTO execs(id, trace_id, command, pid, started_at, host) \
             VALUES ({0}, {0}, '[\"lost\"]', 2147483647, 1, {host})",
            quoted(id)
        ));
    }
    let outcome = |id: &str| {
        home.store().value(&format!(
            "SELECT outcome FROM execs WHERE id = {}",
            quoted(id)
        ))
    };
    // Seen from alpha, beta's open exec is not judged: it counts as running, not lost.
    let overview: Value =
        serde_json::from_str(&on_host(&home, "alpha", &["monitor", "--all", "--json"])).unwrap();
    let ids = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|exec| exec["id"].as_str().unwrap().to_string())
            .collect()
    };
    let lost = ids(&overview["active"]["lost_execs"]);
    assert!(lost.contains(&"lost-on-alpha".to_string()), "{overview}");
    assert!(
        lost.contains(&"lost-before-hosts".to_string()),
        "{overview}"
    );
    assert!(!lost.contains(&"lost-on-beta".to_string()), "{overview}");
    assert!(ids(&overview["active"]["execs"]).contains(&"lost-on-beta".to_string()));

    let report: Value =
        serde_json::from_str(&on_host(&home, "alpha", &["monitor", "prune", "--json"])).unwrap();
    assert_eq!(report["pruned"], 2, "{report}");
    let mut candidates = ids(&report["candidates"]);
    candidates.sort();
    assert_eq!(
        candidates,
        ["lost-before-hosts", "lost-on-alpha"],
        "{report}"
    );
    assert_eq!(outcome("lost-on-alpha"), "lost");
    assert_eq!(outcome("lost-before-hosts"), "lost");
    assert_eq!(outcome("lost-on-beta"), Value::Null);

    // Beta's own prune closes it.
    let report: Value =
        serde_json::from_str(&on_host(&home, "beta", &["monitor", "prune", "--json"])).unwrap();
    assert_eq!(ids(&report["candidates"]), ["lost-on-beta"], "{report}");
    assert_eq!(outcome("lost-on-beta"), "lost");
}

#[test]
fn on_a_sqlite_store_every_exec_is_this_hosts() {
    // One host's file, whatever name the host had when an exec ran (a container's changes).
    let home = DaemonHome::new();
    if home.store_url().is_some() {
        return;
    }
    on_host(&home, "alpha", &["monitor", "list", "--all"]);
    home.execute(
        "INSERT INTO execs(id, trace_id, command, pid, started_at, host) \
         VALUES ('lost-on-old-name', 'lost-on-old-name', '[\"lost\"]', 2147483647, 1, 'old-name')",
    );
    let report: Value =
        serde_json::from_str(&on_host(&home, "alpha", &["monitor", "prune", "--json"])).unwrap();
    assert_eq!(report["pruned"], 1, "{report}");
    assert_eq!(
        home.store()
            .value("SELECT outcome FROM execs WHERE id = 'lost-on-old-name'"),
        "lost"
    );
}

/// An early command on a store made before hosts were recorded still records, without a host
/// and without migrating the store; once migrated, its rows name the host.
fn early_command_records_into_a_store_before_hosts(home: &DaemonHome) {
    let before_hosts = corral::store::exec::HOST_SINCE - 1;
    home.store().migrate_to(before_hosts);
    on_host(home, "alpha", &["--version"]);
    let store = home.store();
    assert_eq!(store.schema_version(), before_hosts);
    assert!(!store.columns("execs").contains(&"host".to_string()));
    let outcomes = store.sql("SELECT outcome FROM execs");
    assert_eq!(outcomes, [[Value::from("succeeded")]]);

    // A command that is not early migrates; an early one then records its host.
    on_host(home, "alpha", &["monitor", "list", "--all"]);
    on_host(home, "alpha", &["--version"]);
    let hosts = store.sql("SELECT host FROM execs ORDER BY started_at, id");
    assert_eq!(
        hosts,
        [
            [Value::Null],
            [Value::from("alpha")],
            [Value::from("alpha")]
        ]
    );
}

#[test]
fn early_commands_record_into_a_store_older_than_hosts() {
    early_command_records_into_a_store_before_hosts(&DaemonHome::new());
    // PostgreSQL reads the version with another statement: there too, whatever the pass.
    if let Some(home) = DaemonHome::on_postgres() {
        early_command_records_into_a_store_before_hosts(&home);
    }
}
