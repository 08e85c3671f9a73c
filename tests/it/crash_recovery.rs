//! kill -9 of the daemon at any moment: mid-turn, during its successor's boot (at random and
//! at each named point of the reconciliation), between an engine's spawn and the commit of
//! its pid, in the middle of a migration. The next daemon ends every leftover process first —
//! each run's group, whatever carries its run id (`setsid`), the app-server children — and
//! only then closes the runs, at the moment their processes were gone; their prompts then
//! complete. No prompt lost, none run twice at once (checked live from `/proc`), nothing left
//! behind, the store sound; the app-server's status after the restart is the truth and its
//! history survives.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;

use crate::common::crash_loop;

use common::daemon::{alive, kill, wait_until, DaemonHome};
use common::store::{number_or_null, quoted};

const CORRAL: &str = env!("CARGO_BIN_EXE_corral");
const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

#[test]
fn kill_9_at_random_moments_loses_no_prompt_runs_none_twice_and_leaves_nothing() {
    let seed = std::env::var("CORRAL_CRASH_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or(0x5eed);
    println!("seed {seed} (set CORRAL_CRASH_SEED to replay)");
    // A home on the store of the test pass; SQLite's file is checked whole at the end, a
    // PostgreSQL store (which has no such check) must have been the only one.
    let home = DaemonHome::new();
    let mut figures = crash_loop::run_in(Path::new(CORRAL), Path::new(FAKE), home.path(), 20, seed);
    figures.integrity = if home.store().is_postgres() {
        assert!(
            !home.path().join("corral.db").exists(),
            "a SQLite store beside the PostgreSQL one of HOME/config"
        );
        println!("integrity: PRAGMA integrity_check is SQLite's; the store is PostgreSQL");
        "ok".to_string()
    } else {
        home.sql("PRAGMA integrity_check")[0][0]
            .as_str()
            .expect("integrity_check's answer")
            .to_string()
    };
    // Every session's events numbered without a hole, and no turn's end stored twice (a run
    // taken over reads its spool from how far its stored events cover it).
    let holes = home.sql(
        "SELECT session_id FROM events GROUP BY session_id HAVING count(*) <> max(seq) OR min(seq) <> 1",
    );
    assert_eq!(
        holes,
        Vec::<Vec<serde_json::Value>>::new(),
        "sessions whose events have holes"
    );
    let doubled = home.sql(
        "SELECT run_id FROM events WHERE kind = 'turn.completed' GROUP BY run_id HAVING count(*) > 1",
    );
    assert_eq!(
        doubled,
        Vec::<Vec<serde_json::Value>>::new(),
        "turns whose end is stored twice"
    );
    let taken_over = home.sql("SELECT count(*) FROM events WHERE kind = 'run.readopted'");
    println!(
        "kills {:?}, {} prompts, {} lost, {} not once, {} turns redone, {} runs taken over, {} live overlaps in {} scans, {} left, integrity {}, {:?}",
        figures.kills,
        figures.prompts,
        figures.lost,
        figures.not_once,
        figures.redone,
        taken_over[0][0],
        figures.live_overlaps.len(),
        figures.scans,
        figures.left_behind.len(),
        figures.integrity,
        figures.wall
    );
    assert_eq!(figures.prompts, 3 * figures.rounds);
    assert_eq!(figures.lost, 0, "prompts lost");
    assert_eq!(
        figures.not_once, 0,
        "prompts that did not succeed exactly once"
    );
    assert!(figures.scans > 100, "the /proc monitor barely ran");
    assert!(
        figures.live_overlaps.is_empty(),
        "two runs of one session alive at once ({} pairs), e.g. {:?}",
        figures.live_overlaps.len(),
        &figures.live_overlaps[..figures.live_overlaps.len().min(3)]
    );
    assert_eq!(figures.store_overlaps, Vec::<String>::new());
    assert_eq!(figures.left_behind, Vec::<String>::new(), "processes left");
    assert_eq!(figures.integrity, "ok");
    // With the default seed every kind of kill happens: a change that stops one from
    // happening (a boot point no longer reached) must show.
    if seed == 0x5eed {
        assert!(
            figures.kills.iter().all(|&kills| kills > 0),
            "{:?}",
            figures.kills
        );
    }
}

/// A leftover engine: in a group of its own, carrying `CORRAL_HOME` and the run's id, and
/// ignoring SIGTERM (as `sleep` does after `trap '' TERM`), so only SIGKILL ends it.
fn leftover_engine(home: &Path, run_id: &str, session_id: &str) -> Child {
    let mut child = Command::new("sh")
        .args(["-c", "trap '' TERM; echo ready; exec sleep 60"])
        .env("CORRAL_HOME", home)
        .env("CORRAL_RUN_ID", run_id)
        .env("CORRAL_SESSION_ID", session_id)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Ready once its environment and its disposition are in place.
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    child
}

/// A store as corral 6 left it, with two prompts whose runs a dead daemon left running: one
/// with its engine's pid recorded, one killed between the run's row and its pid.
fn store_at_version_6(home: &DaemonHome, recorded: &Child) -> [(String, String); 2] {
    home.store().migrate_to(6);
    let now = corral::store::now_ms();
    home.execute(&format!(
        "INSERT INTO projects (id, name, path, engine, created_at) VALUES ('p', 'p', {}, 'fake', {now})",
        quoted(home.work().to_str().unwrap())
    ));
    for (name, value) in [("engines.fake.path", FAKE), ("cancel.grace_ms", "300")] {
        home.execute(&format!(
            "INSERT INTO settings (name, value, updated_at) VALUES ({}, {}, {now})",
            quoted(name),
            quoted(value)
        ));
    }
    let pid = recorded.id() as i64;
    let start = corral::process::start_time(recorded.id()).map(|start| start as i64);
    let runs = [
        ("s1", "q1", "r1", Some(pid), start),
        ("s2", "q2", "r2", None, None),
    ];
    for (session, prompt, run, pid, start) in runs {
        home.execute(&format!(
            "INSERT INTO sessions (id, project_id, engine, title, created_at) \
             VALUES ('{session}', 'p', 'fake', '{session}', {now})"
        ));
        home.execute(&format!(
            "INSERT INTO prompts (id, session_id, text, status, attempts, created_at, started_at) \
             VALUES ('{prompt}', '{session}', '@fake delay=10\nrerun me', 'running', 1, {now}, {now})"
        ));
        let (pid, start) = (number_or_null(pid), number_or_null(start));
        home.execute(&format!(
            "INSERT INTO runs (id, prompt_id, session_id, attempt, engine, argv, started_at, pid, pid_start, pgid) \
             VALUES ('{run}', '{prompt}', '{session}', 1, 'fake', '[]', {now}, {pid}, {start}, {pid})"
        ));
    }
    [("s1".into(), "r1".into()), ("s2".into(), "r2".into())]
}

#[test]
fn a_daemon_killed_mid_migration_leaves_the_leftovers_to_the_next_one_which_ends_them_first() {
    let home = DaemonHome::new();
    let mut recorded = leftover_engine(home.path(), "r1", "s1");
    let mut unrecorded = leftover_engine(home.path(), "r2", "s2");
    let runs = store_at_version_6(&home, &recorded);

    // Killed in the middle of migration 7: nothing of it is committed, nothing is touched.
    let killed = home
        .corral(&["daemon", "--detach"])
        .env("CORRAL_TEST_KILL_AT", "migration")
        .output()
        .unwrap();
    assert!(!killed.status.success(), "{killed:?}");
    assert_eq!(home.store().schema_version(), 6);
    assert!(alive(recorded.id() as i32) && alive(unrecorded.id() as i32));

    // The next one migrates, ends both engines (SIGKILL after the grace: they ignore
    // SIGTERM) before anything else, and closes their runs when they were gone.
    let before = corral::store::now_ms();
    home.start_daemon();
    assert!(
        !alive(recorded.id() as i32),
        "the recorded engine still runs"
    );
    assert!(
        !alive(unrecorded.id() as i32),
        "the engine without a pid still runs"
    );
    let _ = (recorded.wait(), unrecorded.wait());
    for (session, run) in &runs {
        let closed = home.sql(&format!(
            "SELECT status, ended_at FROM runs WHERE id = {}",
            quoted(run)
        ));
        let (status, ended_at) = match closed.first().map(|row| &row[..]) {
            Some([status, ended_at]) => (
                status.clone(),
                ended_at
                    .as_i64()
                    .unwrap_or_else(|| panic!("run {run} not ended: {closed:?}")),
            ),
            _ => panic!("run {run} is not in the store: {closed:?}"),
        };
        assert_eq!(status, "interrupted");
        // Not stamped before the kill: the engine ignored SIGTERM for the whole grace.
        assert!(
            ended_at >= before + 300,
            "run {run} ended at {ended_at}, {} ms after the start",
            ended_at - before
        );
        let rerun_started = home.sql(&format!(
            "SELECT min(started_at) FROM runs WHERE session_id = {} AND id != {}",
            quoted(session),
            quoted(run)
        ))[0][0]
            .as_i64()
            .unwrap_or(i64::MAX);
        assert!(
            rerun_started >= ended_at,
            "a rerun started before {run} ended"
        );
    }
    let mut rpc = common::rpc::Rpc::connect(home.path());
    for prompt in ["q1", "q2"] {
        let done = rpc
            .call("prompt.wait", json!({ "prompt": prompt }))
            .unwrap();
        assert_eq!(done["status"], "done", "{done}");
    }
    let events = home.ok(&["watch", "s2", "--json"]);
    assert!(
        events.contains("\"ended_by\":\"recovery\"") && events.contains("prompt.requeued"),
        "{events}"
    );
}

/// The app-server entry of `status --json`.
fn app_server_status(home: &DaemonHome) -> Value {
    let status = home.json(&["status", "--json"]);
    status["app_servers"]
        .as_array()
        .and_then(|servers| servers.first())
        .cloned()
        .unwrap_or_else(|| panic!("no app-server in {status}"))
}

#[test]
fn after_a_kill_9_the_app_servers_status_is_the_truth_and_its_restarts_are_kept() {
    let home = DaemonHome::new();
    home.config(&[("engines.codex-app-server.path", FAKE)]);
    home.add_project("a", &home.work(), "codex-app-server");
    let session = home.new_session(&["a", "--title", "served"]);
    home.ok(&["send", &session, "first", "--wait"]);
    let first = app_server_status(&home);
    assert_eq!(first["status"], "running", "{first}");
    let first_pid = first["pid"].as_i64().unwrap() as i32;

    // The child dies; the next prompt restarts it (a restart in the window).
    kill(first_pid, libc::SIGKILL);
    wait_until("the first child is gone", || !alive(first_pid));
    home.ok(&["send", &session, "second", "--wait"]);
    let second = app_server_status(&home);
    assert_eq!(second["status"], "running", "{second}");
    assert_eq!(second["generation"], 2, "{second}");
    assert_eq!(second["restarts"].as_array().unwrap().len(), 1, "{second}");
    let second_pid = second["pid"].as_i64().unwrap() as i32;

    // kill -9 of the daemon, and a new one: its status says the child is stopped, why,
    // and keeps what happened before.
    let daemon = home.daemon_pid().unwrap();
    kill(daemon, libc::SIGKILL);
    wait_until("the daemon is gone", || !alive(daemon));
    home.start_daemon();
    assert!(
        !alive(second_pid),
        "the dead daemon's app-server child still runs"
    );
    let after = app_server_status(&home);
    assert_eq!(after["status"], "stopped", "{after}");
    assert!(
        after["pid"].is_null(),
        "a dead child's pid is shown: {after}"
    );
    assert_eq!(after["last_exit"]["close_source"], "recovery", "{after}");
    assert_eq!(after["last_exit"]["pid"], second_pid, "{after}");
    assert_eq!(after["generation"], 2, "{after}");
    assert_eq!(after["restarts"].as_array().unwrap().len(), 1, "{after}");
    let kinds: Vec<&str> = after["recent"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|event| event["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"restarting") && kinds.last() == Some(&"recovered"),
        "{kinds:?}"
    );
    let text = home.ok(&["status"]);
    assert!(
        text.contains("stopped, generation 2, 1 restarts in the last minute"),
        "{text}"
    );

    // The next prompt starts generation 3 (not counted as a crash restart), its history
    // still there.
    let started = Instant::now();
    home.ok(&["send", &session, "third", "--wait"]);
    let third = app_server_status(&home);
    assert_eq!(third["status"], "running", "{third}");
    assert_eq!(third["generation"], 3, "{third}");
    assert_eq!(third["restarts"].as_array().unwrap().len(), 1, "{third}");
    assert_ne!(third["pid"], second["pid"], "{third}");
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_daemon_stopped_by_sigterm_leaves_its_app_server_stopped_by_the_shutdown() {
    let home = DaemonHome::new();
    home.config(&[("engines.codex-app-server.path", FAKE)]);
    home.add_project("a", &home.work(), "codex-app-server");
    let session = home.new_session(&["a", "--title", "served"]);
    home.ok(&["send", &session, "first", "--wait"]);
    let running = app_server_status(&home);
    assert_eq!(running["status"], "running", "{running}");
    let pid = running["pid"].as_i64().unwrap() as i32;

    home.stop_daemon();
    assert!(!alive(pid), "the app-server child outlived its daemon");
    // What the store keeps is the truth: stopped by the shutdown, not a child that died.
    let state = home.sql(
        "SELECT state FROM app_servers WHERE project_id = (SELECT id FROM projects WHERE name = 'a')",
    );
    let stored: Value = match state.first().map(|row| &row[..]) {
        Some([Value::String(state)]) => serde_json::from_str(state).unwrap(),
        _ => panic!("the app-server's state in the store: {state:?}"),
    };
    assert_eq!(stored["status"], "stopped", "{stored}");
    assert_eq!(
        stored["last_exit"]["close_source"], "daemon shutdown",
        "{stored}"
    );
    assert_eq!(stored["last_exit"]["pid"], pid, "{stored}");

    // The next daemon has nothing to recover and says so.
    home.start_daemon();
    let after = app_server_status(&home);
    assert_eq!(after["status"], "stopped", "{after}");
    assert_eq!(
        after["last_exit"]["close_source"], "daemon shutdown",
        "{after}"
    );
}
