//! Several daemons, each with a home of its own, on one PostgreSQL store (issue 14), driven
//! through the CLI and the socket as a user would (`tests/it/common/cluster.rs`):
//!
//! - the harness itself: n daemons on one database, each answering `status` as itself;
//! - claims: 300 prompts sent round-robin through three daemons run once each, a session's
//!   runs never overlap, and more than one daemon does the work;
//! - leases: a daemon killed with `kill -9` has its engine ended by its lease guard and its
//!   prompt rerun by the other after the lease; a daemon paused past its lease loses its
//!   engine, is fenced out (its stale writes refused, counted), and works again once resumed;
//! - serving: a prompt of a project whose directory no daemon has waits, and `status` says
//!   who serves what; it runs once the directory is back;
//! - events: a session's events stream live on another daemon (`corral watch --follow`), and
//!   the all-sessions feed of a third daemon has every feed number once, in order.
//!
//! They run in both passes and need a PostgreSQL server (`CORRAL_TEST_POSTGRES_URL`; `.ci/run` starts one);
//! without one they print why they skip, except in CI.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use common::cluster::{run_processes, wait_for, Cluster, LEASE_MS, PROJECT};
use common::daemon::{alive, kill, lines_of};
use common::store::quoted;

/// The lease, as a duration.
const LEASE: Duration = Duration::from_millis(LEASE_MS);

/// The text of a column value (a number as its digits).
fn text(value: &Value) -> String {
    value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string())
}

/// The runs of `prompt`, in start order: `(id, node_id, status, pid, pgid)`.
fn runs_of(cluster: &Cluster, prompt: &str) -> Vec<(String, Option<String>, String, Value, Value)> {
    cluster
        .sql(&format!(
            "SELECT id, node_id, status, pid, pgid FROM runs WHERE prompt_id = {} \
             ORDER BY started_at, attempt",
            quoted(prompt)
        ))
        .into_iter()
        .map(|row| {
            (
                text(&row[0]),
                row[1].as_str().map(str::to_string),
                text(&row[2]),
                row[3].clone(),
                row[4].clone(),
            )
        })
        .collect()
}

/// Waits until run `run`'s turn has started (its `turn.started` event is stored).
fn wait_turn_started(cluster: &Cluster, run: &str) {
    cluster.wait_for("the turn started", Duration::from_secs(10), || {
        cluster.count(&format!(
            "SELECT count(*) FROM events WHERE run_id = {} AND kind = 'turn.started'",
            quoted(run)
        )) == 1
    });
}

/// A codex-app-server project `name` (the fake engine's app-server mode) every daemon
/// serves.
fn app_server_project(cluster: &Cluster, name: &str) {
    cluster.ok(
        0,
        &[
            "config",
            "set",
            "engines.codex-app-server.path",
            common::cluster::FAKE,
        ],
    );
    let dir = cluster.dir().join(name);
    std::fs::create_dir_all(&dir).expect("a project directory");
    let dir = dir.to_str().expect("temporary paths are UTF-8");
    cluster.ok(
        0,
        &["project", "add", name, dir, "--engine", "codex-app-server"],
    );
}

/// Waits until `prompt` has a run with a recorded pid: that run's `(id, node_id, pgid)`.
fn running_run(cluster: &Cluster, prompt: &str) -> (String, String, i32) {
    let mut found = None;
    wait_for(
        "the prompt's run has a pid",
        Duration::from_secs(30),
        || {
            found = runs_of(cluster, prompt)
                .into_iter()
                .find(|run| run.2 == "running" && run.3.is_i64());
            found.is_some()
        },
    );
    let (id, node, _, _, pgid) = found.expect("found above");
    let node = node.unwrap_or_else(|| panic!("run {id} names no node"));
    let pgid = pgid.as_i64().map_or(0, |pgid| pgid as i32);
    (id, node, pgid)
}

/// Milliseconds since the epoch, as the store's timestamps count them.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// The daemons `status --json` lists, by node id.
fn daemons_of(status: &Value) -> Vec<Value> {
    status["daemons"]
        .as_array()
        .unwrap_or_else(|| panic!("status lists no daemons: {status}"))
        .clone()
}

/// The names a listed daemon serves.
fn serves(daemon: &Value) -> Vec<String> {
    daemon["serves"]
        .as_array()
        .unwrap_or_else(|| panic!("a daemon without serves: {daemon}"))
        .iter()
        .map(text)
        .collect()
}

#[test]
fn the_cluster_starts_three_daemons_on_one_store() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let mut pids = BTreeSet::new();
    let mut stores = BTreeSet::new();
    for index in 0..3 {
        let status = cluster.status(index);
        let home = cluster.home(index).path().to_string_lossy().into_owned();
        assert_eq!(status["daemon"]["home"], home, "{status}");
        assert_eq!(status["store"]["kind"], "postgres", "{status}");
        stores.insert(text(&status["store"]["at"]));
        pids.insert(cluster.daemon_pid(index).expect("a daemon pid"));
        assert!(
            !cluster.home(index).path().join("corral.db").exists(),
            "home {index} made a SQLite store"
        );
    }
    assert_eq!(pids.len(), 3, "three daemons: {pids:?}");
    assert_eq!(stores.len(), 1, "one store: {stores:?}");
    // And one project, seen through every daemon.
    for index in 0..3 {
        let listed = cluster.ok(index, &["project", "list"]);
        assert!(listed.contains(PROJECT), "home {index}: {listed}");
    }
}

#[test]
fn three_daemons_claim_each_prompt_once() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    // Ten projects of three sessions: the sessions of one project run one at a time across
    // the daemons (shared isolation), so the projects are what spreads the work.
    for project in 0..10 {
        cluster.add_project(&format!("w{project}"));
    }
    let sessions: Vec<String> = (0..30)
        .map(|index| cluster.session_of(&format!("w{}", index % 10), &format!("s{index}")))
        .collect();
    // Prompt k goes to session k % 30 through home (k + k / 30) % 3: every session gets
    // prompts through every daemon. One sender per home, all at once.
    std::thread::scope(|scope| {
        for home in 0..3 {
            let (cluster, sessions) = (&cluster, &sessions);
            scope.spawn(move || {
                for k in (0..300).filter(|k| (k + k / 30) % 3 == home) {
                    cluster.send(home, &sessions[k % 30], &format!("@fake answer=a{k}\np{k}"));
                }
            });
        }
    });
    assert_eq!(cluster.count("SELECT count(*) FROM prompts"), 300);
    cluster.wait_for("every prompt ended", Duration::from_secs(180), || {
        cluster.count(
            "SELECT count(*) FROM prompts WHERE status NOT IN ('done', 'failed', 'cancelled')",
        ) == 0
    });
    let statuses = cluster.sql("SELECT status, count(*) FROM prompts GROUP BY status");
    assert_eq!(
        cluster.count("SELECT count(*) FROM prompts WHERE status = 'done'"),
        300,
        "{statuses:?}"
    );
    // Exactly one succeeded run per prompt.
    let not_once = cluster.sql(
        "SELECT p.id, (SELECT count(*) FROM runs r WHERE r.prompt_id = p.id \
                       AND r.status = 'succeeded') AS n \
         FROM prompts p \
         WHERE (SELECT count(*) FROM runs r WHERE r.prompt_id = p.id \
                AND r.status = 'succeeded') <> 1",
    );
    assert!(
        not_once.is_empty(),
        "prompts not run exactly once: {not_once:?}"
    );
    // Every run ended, and no two runs of one session overlap.
    assert_eq!(
        cluster.count("SELECT count(*) FROM runs WHERE ended_at IS NULL"),
        0
    );
    let overlapping = cluster.sql(
        "SELECT a.id, b.id, a.session_id FROM runs a JOIN runs b \
         ON a.session_id = b.session_id AND a.id < b.id \
         WHERE a.started_at < b.ended_at AND b.started_at < a.ended_at",
    );
    assert!(
        overlapping.is_empty(),
        "runs of one session overlap: {overlapping:?}"
    );
    // The work was shared.
    let nodes = cluster.sql("SELECT node_id, count(*) FROM runs GROUP BY node_id");
    assert!(
        nodes.iter().all(|row| row[0].is_string()),
        "a run without a node: {nodes:?}"
    );
    let homes: Vec<String> = (0..3).map(|index| cluster.node_id(index)).collect();
    assert!(
        nodes.len() >= 2,
        "one daemon did everything: {nodes:?} (the homes' nodes: {homes:?})"
    );
}

#[test]
fn kill_9_of_the_lease_holder_hands_its_prompts_over() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("killed");
    let run_length = Duration::from_secs(6);
    let prompt = cluster.send(0, &session, "@fake delay=6000\nslow");
    let (first, node, pgid) = running_run(&cluster, &prompt);
    assert_eq!(node, cluster.node_id(0), "A claimed what was sent to it");
    assert!(!run_processes(&first).is_empty(), "the engine runs");
    let a = cluster.daemon_pid(0).expect("A's pid");
    kill(a, libc::SIGKILL);
    let killed = Instant::now();
    cluster.wait_for("A is gone", Duration::from_secs(2), || !alive(a));
    // The guard ends A's engine once the pipe from A closed.
    cluster.wait_for(
        "A's engine is gone",
        Duration::from_secs(2).saturating_sub(killed.elapsed()),
        || run_processes(&first).is_empty() && (pgid <= 0 || !corral::process::group_exists(pgid)),
    );
    // B reruns it once A's lease ran out.
    let limit = LEASE + Duration::from_secs(2) + run_length;
    cluster.wait_for(
        "the prompt is done",
        limit.saturating_sub(killed.elapsed()),
        || cluster.prompt_status(&prompt) == "done",
    );
    let runs = runs_of(&cluster, &prompt);
    assert!(runs.len() >= 2, "{runs:?}");
    assert_eq!(runs[0].0, first, "{runs:?}");
    assert_eq!(runs[0].2, "interrupted", "A's run is closed: {runs:?}");
    let b = cluster.node_id(1);
    let succeeded: Vec<_> = runs.iter().filter(|run| run.2 == "succeeded").collect();
    assert_eq!(succeeded.len(), 1, "{runs:?}");
    assert_eq!(succeeded[0].1.as_deref(), Some(b.as_str()), "{runs:?}");
}

/// A prompt whose daemons die under it (kill -9, here; an engine that takes its host down,
/// in life) is run again on another daemon twice; the third time its lease runs out under it,
/// it fails with why instead of taking the next daemon down, and its session goes on.
#[test]
fn a_prompt_whose_daemons_keep_dying_fails_the_third_time() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("poison");
    let prompt = cluster.send(0, &session, "@fake delay=60000\npoison");
    let mut killed = 0;
    for round in 1..=3 {
        let (_, node, _) = running_run(&cluster, &prompt);
        let index = cluster
            .home_of_node(&node)
            .unwrap_or_else(|| panic!("run on an unknown node {node}"));
        let pid = cluster.daemon_pid(index).expect("the runner's pid");
        kill(pid, libc::SIGKILL);
        cluster.wait_for("the runner is gone", Duration::from_secs(2), || !alive(pid));
        killed = index;
        if round == 3 {
            break;
        }
        // The other daemon runs it again once the lease ran out; then the killed one comes
        // back (after the rescue: before it, its boot would take its own prompt back).
        cluster.wait_for(
            "another daemon runs it again",
            LEASE + Duration::from_secs(8),
            || {
                let runs = runs_of(&cluster, &prompt);
                runs.len() == round + 1 && runs[round].2 == "running"
            },
        );
        cluster.start_daemon(index);
    }
    cluster.wait_for("the prompt failed", LEASE + Duration::from_secs(8), || {
        cluster.prompt_status(&prompt) == "failed"
    });
    let runs = runs_of(&cluster, &prompt);
    assert_eq!(runs.len(), 3, "{runs:?}");
    assert!(runs.iter().all(|run| run.2 == "interrupted"), "{runs:?}");
    let error = text(&cluster.value(&format!(
        "SELECT error FROM prompts WHERE id = {}",
        quoted(&prompt)
    )));
    assert!(error.contains("died 3 times"), "{error}");
    // The session takes its next prompt, the last killed daemon back.
    cluster.start_daemon(killed);
    let next = cluster.send(0, &session, "@fake\nafter");
    cluster.wait_for("the next prompt is done", Duration::from_secs(20), || {
        cluster.prompt_status(&next) == "done"
    });
}

#[test]
fn a_paused_daemon_is_fenced_out_and_ends_its_stale_runs() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("paused");
    let prompt = cluster.send(0, &session, "@fake delay=8000\npaused");
    let (first, node, pgid) = running_run(&cluster, &prompt);
    assert_eq!(node, cluster.node_id(0), "A claimed what was sent to it");
    assert!(!run_processes(&first).is_empty(), "the engine runs");
    let before = cluster.status(0);
    let epoch = before["lease"]["epoch"]
        .as_i64()
        .unwrap_or_else(|| panic!("A's status names its epoch: {before}"));
    assert_eq!(before["lease"]["state"], "held", "{before}");
    let a = cluster.daemon_pid(0).expect("A's pid");
    kill(a, libc::SIGSTOP);
    let paused = Instant::now();
    let pause = LEASE + Duration::from_millis(1500);
    // The guard ends A's engine at A's lease deadline, A being frozen.
    cluster.wait_for("A's engine is gone", pause, || {
        run_processes(&first).is_empty() && (pgid <= 0 || !corral::process::group_exists(pgid))
    });
    // The pause itself is what the test is about: A stays frozen for all of it.
    std::thread::sleep(pause.saturating_sub(paused.elapsed()));
    kill(a, libc::SIGCONT);
    // B reruns the prompt.
    let b = cluster.node_id(1);
    let mut second = None;
    cluster.wait_for("B reruns the prompt", Duration::from_secs(10), || {
        second = runs_of(&cluster, &prompt)
            .into_iter()
            .find(|run| run.1.as_deref() == Some(b.as_str()));
        second.is_some()
    });
    let (second, _, _, _, _) = second.expect("found above");
    // B's rerun ends; meanwhile A, woken, has found its engine ended and its lease lost, and
    // what it tried to write about its old claim was refused.
    cluster.wait_for("the prompt is done", Duration::from_secs(30), || {
        cluster.prompt_status(&prompt) == "done"
    });
    let mut after = Value::Null;
    cluster.wait_for(
        "A was fenced or registered again",
        Duration::from_secs(10),
        || {
            after = cluster.status(0);
            after["lease"]["fenced_writes"].as_i64().unwrap_or(0) >= 1
                || after["lease"]["epoch"]
                    .as_i64()
                    .is_some_and(|now| now > epoch)
        },
    );
    assert!(
        after["lease"]["fenced_writes"].as_i64().unwrap_or(0) >= 1,
        "A's stale writes were fenced: {after}"
    );
    // Nothing of A about this prompt after B's claim: A's one run is the one B closed, and
    // every event since B's run started is B's run's or the prompt's own.
    let a_node = cluster.node_id(0);
    let runs = runs_of(&cluster, &prompt);
    let of_a: Vec<_> = runs
        .iter()
        .filter(|run| run.1.as_deref() == Some(a_node.as_str()))
        .collect();
    assert_eq!(of_a.len(), 1, "{runs:?}");
    assert_eq!(of_a[0].0, first, "{runs:?}");
    assert_eq!(of_a[0].2, "interrupted", "closed by B's rescue: {runs:?}");
    let succeeded: Vec<_> = runs.iter().filter(|run| run.2 == "succeeded").collect();
    assert_eq!(succeeded.len(), 1, "{runs:?}");
    assert_eq!(succeeded[0].0, second, "{runs:?}");
    let started_at = cluster.count(&format!(
        "SELECT started_at FROM runs WHERE id = {}",
        quoted(&second)
    ));
    let from_seq = cluster.count(&format!(
        "SELECT coalesce(min(seq), 0) FROM events WHERE run_id = {}",
        quoted(&second)
    ));
    assert!(from_seq > 0, "B's run has events");
    let stale = cluster.sql(&format!(
        "SELECT seq, kind, run_id FROM events WHERE prompt_id = {} \
         AND (seq >= {from_seq} OR at >= {started_at}) \
         AND run_id IS NOT NULL AND run_id <> {} ORDER BY seq",
        quoted(&prompt),
        quoted(&second)
    ));
    assert!(stale.is_empty(), "events of A after B's claim: {stale:?}");
    let ends = cluster.count(&format!(
        "SELECT count(*) FROM events WHERE prompt_id = {} AND kind IN ('prompt.done', 'prompt.failed', 'prompt.cancelled')",
        quoted(&prompt)
    ));
    assert_eq!(ends, 1, "the prompt ended once");
    // A works again: a prompt sent through it completes, and it holds a lease.
    let next = cluster.send(0, &session, "@fake answer=again\nagain");
    cluster.wait_for("the next prompt is done", Duration::from_secs(20), || {
        cluster.prompt_status(&next) == "done"
    });
    let now = cluster.status(0);
    assert_eq!(now["lease"]["state"], "held", "{now}");
}

#[test]
fn a_project_nobody_serves_waits_and_says_so() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let dir = cluster.dir().join("away");
    std::fs::create_dir(&dir).expect("the project directory");
    let shown = dir.to_str().expect("temporary paths are UTF-8");
    cluster.ok(0, &["project", "add", "away", shown, "--engine", "fake"]);
    let session = cluster.session_of("away", "unserved");
    let gone = cluster.dir().join("away.gone");
    std::fs::rename(&dir, &gone).expect("the directory is moved away");
    // Both daemons notice at their next heartbeat (a third of the lease).
    let mut status = Value::Null;
    cluster.wait_for("no daemon serves the project", LEASE * 3, || {
        status = cluster.status(0);
        let daemons = daemons_of(&status);
        daemons.len() == 2
            && daemons
                .iter()
                .all(|daemon| !serves(daemon).iter().any(|name| name == "away"))
    });
    for daemon in daemons_of(&status) {
        assert!(
            serves(&daemon).iter().any(|name| name == PROJECT),
            "{PROJECT} is still served: {status}"
        );
    }
    let prompt = cluster.send(0, &session, "@fake answer=here\nwhere");
    // It waits: queued, no run, for 2 s.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        assert_eq!(cluster.prompt_status(&prompt), "queued");
        assert!(runs_of(&cluster, &prompt).is_empty(), "a run started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = cluster.status(1);
    assert_eq!(daemons_of(&status).len(), 2, "{status}");
    for daemon in daemons_of(&status) {
        assert!(
            !serves(&daemon).iter().any(|name| name == "away"),
            "{status}"
        );
    }
    std::fs::rename(&gone, &dir).expect("the directory is back");
    cluster.wait_for("the prompt is done", Duration::from_secs(5), || {
        cluster.prompt_status(&prompt) == "done"
    });
}

/// A prompt for later sent through one daemon that stops before its time: the other daemon's
/// timer heard of it (the send's notice to every daemon) and starts it then.
#[test]
fn a_prompt_for_later_starts_on_another_daemon_when_its_sender_is_gone() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("later");
    let sent = cluster.ok(
        1,
        &[
            "send",
            &session,
            "--in",
            "3s",
            "@fake answer=on time\nlater",
        ],
    );
    let prompt = sent.split_whitespace().next().unwrap().to_string();
    cluster.ok(1, &["daemon", "stop"]);
    cluster.wait_for("the other daemon runs it", Duration::from_secs(30), || {
        cluster.prompt_status(&prompt) == "done"
    });
    let runs = runs_of(&cluster, &prompt);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let node = runs[0].1.clone().expect("the run names its daemon");
    assert_eq!(cluster.home_of_node(&node), Some(0), "{runs:?}");
}

/// A schedule on a shared store: every daemon's timer knows it (its notice), one of them takes
/// each firing (under the store's write lock), so each time sends one prompt; and it goes on
/// firing when the daemon it was added through is gone.
#[test]
fn a_schedule_fires_once_each_time_across_daemons_and_outlives_its_daemon() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("scheduled");
    let added = cluster.json(
        1,
        &[
            "schedule",
            "add",
            &session,
            "* * * * * *",
            "@fake answer=on time\nevery second",
            "--json",
        ],
    );
    let id = added["id"].as_str().unwrap().to_string();
    let sent = |cluster: &Cluster| {
        cluster.count(&format!(
            "SELECT count(*) FROM schedule_firings WHERE schedule_id = '{id}' \
              AND outcome = 'sent'"
        ))
    };
    cluster.wait_for("three firings are sent", Duration::from_secs(30), || {
        sent(&cluster) >= 3
    });
    cluster.ok(1, &["daemon", "stop"]);
    let before = sent(&cluster);
    cluster.wait_for(
        "the other daemon fires it on",
        Duration::from_secs(30),
        || sent(&cluster) >= before + 3,
    );
    cluster.ok(0, &["schedule", "pause", &id]);
    // One prompt for each firing sent: no time was taken by both daemons.
    let prompts = cluster.count(&format!(
        "SELECT count(*) FROM prompts WHERE session_id = '{session}'"
    ));
    assert_eq!(prompts, sent(&cluster), "{}", cluster.logs());
}

/// `/proc/PID/stat`'s start time (clock ticks since boot): with the pid, what names a
/// process in `kept_processes`.
fn start_time(pid: u32) -> i64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(19).unwrap().parse().unwrap()
}

fn kept_pids(cluster: &Cluster, index: usize) -> Vec<i64> {
    cluster.status(index)["kept"]
        .as_array()
        .expect("status lists kept processes")
        .iter()
        .filter_map(|kept| kept["pid"].as_i64())
        .collect()
}

// A kept background process (`keep_background`) lives on its daemon's host: only that daemon
// looks whether it lives (another host's pid means nothing here), lists it in `status`, and
// forgets it once dead. The row a daemon of node 1 kept names a live process of this machine
// (the test's `sleep`), as a pid of another host may name one here.
#[test]
fn a_kept_process_is_looked_at_only_by_the_daemon_of_its_host() {
    let Some(cluster) = Cluster::start_on_hosts(2) else {
        return;
    };
    let mut sleep = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = sleep.id();
    let row = |node: &str| {
        format!(
            "INSERT INTO kept_processes \
             (pid, pid_start, run_id, session_id, project_id, command, kept_at, node_id) \
             VALUES ({pid}, {}, 'run', 'session', NULL, 'sleep 60', 1, {})",
            start_time(pid),
            quoted(node)
        )
    };
    common::store::execute(cluster.url(), &row(&cluster.node_id(1)));
    assert!(
        kept_pids(&cluster, 1).contains(&(pid as i64)),
        "its own host lists it"
    );
    assert!(
        !kept_pids(&cluster, 0).contains(&(pid as i64)),
        "another host's daemon listed it"
    );
    // Dead now: the other daemon's boot leaves the row to its host's, whose boot forgets it.
    sleep.kill().unwrap();
    sleep.wait().unwrap();
    let recorded = || {
        cluster.value(&format!(
            "SELECT count(*) FROM kept_processes WHERE pid = {pid}"
        ))
    };
    cluster.home(0).stop_daemon();
    cluster.start_daemon(0);
    assert_eq!(recorded(), json!(1), "another host's daemon forgot it");
    cluster.home(1).stop_daemon();
    cluster.start_daemon(1);
    assert_eq!(recorded(), json!(0), "its host's daemon did not forget it");
}

#[test]
fn status_names_the_projects_of_every_daemon() {
    let Some(cluster) = Cluster::start_on_hosts(2) else {
        return;
    };
    let status = cluster.status(0);
    let daemons = daemons_of(&status);
    let nodes: BTreeSet<String> = daemons
        .iter()
        .map(|daemon| text(&daemon["node_id"]))
        .collect();
    let expected: BTreeSet<String> = [cluster.node_id(0), cluster.node_id(1)].into();
    assert_eq!(nodes, expected, "{status}");
    for daemon in &daemons {
        assert_eq!(daemon["live"], true, "{daemon}");
        assert!(
            serves(daemon).iter().any(|name| name == PROJECT),
            "{daemon}"
        );
        let index = cluster
            .home_of_node(&text(&daemon["node_id"]))
            .expect("a node of the cluster");
        let host = format!("host-{}", (b'a' + index as u8) as char);
        assert_eq!(daemon["host"], host.as_str(), "{daemon}");
        let home = cluster.home(index).path().to_string_lossy().into_owned();
        assert_eq!(daemon["home"], home, "{daemon}");
        assert_eq!(
            daemon["pid"].as_i64(),
            cluster.daemon_pid(index).map(i64::from),
            "{daemon}"
        );
        assert_eq!(daemon["this"], index == 0, "{daemon}");
    }
    let this: Vec<_> = daemons
        .iter()
        .filter(|daemon| daemon["this"] == true)
        .collect();
    assert_eq!(this.len(), 1, "{status}");
    assert_eq!(text(&this[0]["node_id"]), cluster.node_id(0), "{status}");
    assert_eq!(
        status["lease"]["node_id"],
        cluster.node_id(0).as_str(),
        "{status}"
    );
}

#[test]
fn events_of_a_session_on_a_stream_live_on_b() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("live");
    let mut watch = cluster
        .command(1, &["watch", &session, "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("corral watch starts");
    let lines = lines_of(watch.stdout.take().expect("watch's stdout"));
    let prompt = cluster.send(0, &session, "@fake deltas=20\n@fake interval=100\nstream");
    // Each event B prints, with when it came.
    let mut seen: Vec<(Value, i64)> = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            kill(-(watch.id() as i32), libc::SIGKILL);
            let _ = watch.wait();
            panic!("watch on B printed no end of the prompt: {seen:?}");
        };
        let event: Value = serde_json::from_str(&line)
            .unwrap_or_else(|error| panic!("watch printed no JSON ({error}): {line}"));
        let end = event["kind"] == "prompt.done" && event["prompt_id"] == prompt.as_str();
        seen.push((event, now_ms()));
        if end {
            break;
        }
    }
    kill(-(watch.id() as i32), libc::SIGTERM);
    let _ = watch.wait();
    // The run was A's: B printed what another daemon stored.
    let runs = runs_of(&cluster, &prompt);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].1.as_deref(), Some(cluster.node_id(0).as_str()));
    // All of them, each once, in order: what the store has up to the end.
    let seqs: Vec<i64> = seen
        .iter()
        .map(|(event, _)| event["seq"].as_i64().expect("an event's seq"))
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
    let stored: Vec<(i64, String)> = cluster
        .sql(&format!(
            "SELECT seq, kind FROM events WHERE session_id = {} AND seq <= {} ORDER BY seq",
            quoted(&session),
            seqs.len()
        ))
        .into_iter()
        .map(|row| (row[0].as_i64().unwrap_or(0), text(&row[1])))
        .collect();
    let printed: Vec<(i64, String)> = seen
        .iter()
        .map(|(event, _)| (event["seq"].as_i64().unwrap_or(0), text(&event["kind"])))
        .collect();
    assert_eq!(printed, stored);
    // Live: the first output came while the prompt still ran (its 20 lines take 2 s).
    let finished = cluster.count(&format!(
        "SELECT finished_at FROM prompts WHERE id = {}",
        quoted(&prompt)
    ));
    let (_, first_output) = seen
        .iter()
        .find(|(event, _)| event["kind"] == "tool")
        .unwrap_or_else(|| panic!("no output event: {printed:?}"));
    assert!(
        *first_output < finished - 1000,
        "the first output came at {first_output}, the prompt ended at {finished}"
    );
}

#[test]
fn the_all_sessions_feed_has_no_gap_across_daemons() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    let feed = cluster.feed(2);
    for project in 0..20 {
        cluster.add_project(&format!("f{project}"));
    }
    let sessions: Vec<String> = (0..20)
        .map(|index| cluster.session_of(&format!("f{index}"), &format!("f{index}")))
        .collect();
    let prompts: Vec<String> = std::thread::scope(|scope| {
        let senders: Vec<_> = (0..2)
            .map(|home| {
                let (cluster, sessions) = (&cluster, &sessions);
                scope.spawn(move || {
                    (0..10)
                        .map(|index| {
                            let session = &sessions[home * 10 + index];
                            let text = format!("@fake deltas=40\n@fake interval=5\nf{index}");
                            cluster.send(home, session, &text)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        senders
            .into_iter()
            .flat_map(|sender| sender.join().expect("a sender"))
            .collect()
    });
    let listed = prompts
        .iter()
        .map(|id| quoted(id))
        .collect::<Vec<_>>()
        .join(", ");
    cluster.wait_for("every prompt is done", Duration::from_secs(120), || {
        cluster.count(&format!(
            "SELECT count(*) FROM prompts WHERE id IN ({listed}) AND status = 'done'"
        )) == 20
    });
    let nodes = cluster.count("SELECT count(DISTINCT node_id) FROM runs");
    assert!(nodes >= 2, "both daemons wrote");
    let total = cluster.count("SELECT count(*) FROM events");
    let mut numbers = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while numbers.last().copied().unwrap_or(0) < total {
        let left = until.saturating_duration_since(Instant::now());
        let Some(event) = feed.next(left) else {
            panic!(
                "C's feed stopped at {} of {total} events ({} seen)",
                numbers.last().copied().unwrap_or(0),
                numbers.len()
            );
        };
        numbers.push(event["feed_seq"].as_i64().expect("an event's feed_seq"));
    }
    assert_eq!(
        numbers,
        (1..=total).collect::<Vec<_>>(),
        "C saw every feed number once"
    );
}

/// The most runs of `query`'s rows (each `started_at, ended_at`) that overlapped at once.
fn most_at_once(cluster: &Cluster, query: &str) -> usize {
    let mut edges: Vec<(i64, i32)> = Vec::new();
    for row in cluster.sql(query) {
        let (start, end) = (
            row[0].as_i64().unwrap_or(0),
            row[1].as_i64().unwrap_or(i64::MAX),
        );
        edges.push((start, 1));
        edges.push((end, -1));
    }
    // An end before a start at the same millisecond: back to back is not at once.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

#[test]
fn one_shared_project_runs_one_session_at_a_time_across_daemons() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    // Project `p` has shared isolation (a plain directory): its sessions take turns, on
    // whichever daemon.
    let sessions: Vec<String> = (0..4)
        .map(|index| cluster.session(&format!("turns{index}")))
        .collect();
    let prompts: Vec<String> = (0..8)
        .map(|k| cluster.send(k % 2, &sessions[k % 4], "@fake delay=300\nturn"))
        .collect();
    cluster.wait_for("every prompt is done", Duration::from_secs(60), || {
        prompts
            .iter()
            .all(|prompt| cluster.prompt_status(prompt) == "done")
    });
    let at_once = most_at_once(
        &cluster,
        "SELECT started_at, ended_at FROM runs WHERE status = 'succeeded'",
    );
    assert_eq!(at_once, 1, "two sessions of one shared project ran at once");
}

/// The prompts, in the order their succeeded runs started.
fn start_order(cluster: &Cluster, prompts: &[String]) -> Vec<String> {
    let ids: Vec<String> = prompts.iter().map(|prompt| quoted(prompt)).collect();
    cluster
        .sql(&format!(
            "SELECT prompt_id FROM runs WHERE status = 'succeeded' AND prompt_id IN ({}) \
             ORDER BY started_at, id",
            ids.join(", ")
        ))
        .into_iter()
        .map(|row| text(&row[0]))
        .collect()
}

/// Session `first` (through A) runs a prompt; `other` (through B) queues one meanwhile, then
/// `first` two more: the lock they share is granted in the order they were queued, `other`
/// second. (The daemon holding the lock used to take its session's next prompt at each end,
/// and `other` waited for all of them.)
fn turns_are_first_come(cluster: &Cluster, first: &str, other: &str) {
    let one = cluster.send(0, first, "@fake delay=700\nfirst 1");
    running_run(cluster, &one);
    let waiting = cluster.send(1, other, "@fake delay=200\nother");
    let two = cluster.send(0, first, "@fake delay=200\nfirst 2");
    let three = cluster.send(0, first, "@fake delay=200\nfirst 3");
    let prompts = [one.clone(), waiting.clone(), two.clone(), three.clone()];
    cluster.wait_for("every prompt is done", Duration::from_secs(60), || {
        prompts
            .iter()
            .all(|prompt| cluster.prompt_status(prompt) == "done")
    });
    assert_eq!(
        start_order(cluster, &prompts),
        prompts.to_vec(),
        "[first 1, other, first 2, first 3]"
    );
    let at_once = most_at_once(
        cluster,
        "SELECT started_at, ended_at FROM runs WHERE status = 'succeeded'",
    );
    assert_eq!(at_once, 1, "two holders of one lock ran at once");
}

#[test]
fn a_shared_project_grants_its_turns_first_come_across_daemons() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let first = cluster.session("first");
    let other = cluster.session("other");
    turns_are_first_come(&cluster, &first, &other);
}

#[test]
fn a_locking_group_runs_one_project_at_a_time_first_come_across_daemons() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    // Two projects in one (new, so locking) execution group, each its own directory.
    for name in ["g1", "g2"] {
        let dir = cluster.dir().join(name);
        std::fs::create_dir_all(&dir).expect("a project directory");
        let dir = dir.to_str().expect("temporary paths are UTF-8");
        cluster.ok(
            0,
            &[
                "project", "add", name, dir, "--engine", "fake", "--group", "deploy",
            ],
        );
    }
    let first = cluster.session_of("g1", "first");
    let other = cluster.session_of("g2", "other");
    turns_are_first_come(&cluster, &first, &other);
}

/// `git ARGS` in `dir`, which must succeed.
fn git(dir: &std::path::Path, args: &[&str]) {
    let output = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=corral test",
            "-c",
            "user.email=test@corral.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A worktree is on the host of the daemon that made it: that daemon runs the session's
/// prompts (sent through another, which has room and serves the project), and only it
/// archives the worktree; another refuses in one line.
#[test]
fn a_worktree_sessions_prompts_run_where_its_worktree_is() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let repo = cluster.dir().join("repo");
    std::fs::create_dir_all(&repo).expect("a repository directory");
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "hello\n").expect("a file");
    git(&repo, &["add", "README.md"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let dir = repo.to_str().expect("temporary paths are UTF-8");
    cluster.ok(
        0,
        &[
            "project",
            "add",
            "w",
            dir,
            "--engine",
            "fake",
            "--isolation",
            "worktree",
        ],
    );
    // Opened through B: B's host has the worktree.
    let session = cluster.json(1, &["session", "new", "w", "--title", "pinned", "--json"]);
    let session = text(&session["id"]);
    assert_eq!(
        cluster.value(&format!(
            "SELECT worktree_node FROM sessions WHERE id = {}",
            quoted(&session)
        )),
        cluster.node_id(1).as_str()
    );
    let prompts: Vec<String> = (0..3)
        .map(|k| cluster.send(0, &session, &format!("@fake delay=100\npinned {k}")))
        .collect();
    cluster.wait_for("every prompt is done", Duration::from_secs(30), || {
        prompts
            .iter()
            .all(|prompt| cluster.prompt_status(prompt) == "done")
    });
    for prompt in &prompts {
        let nodes: Vec<Option<String>> = runs_of(&cluster, prompt)
            .into_iter()
            .map(|run| run.1)
            .collect();
        assert_eq!(nodes, vec![Some(cluster.node_id(1))], "{prompt}");
    }
    let refused = cluster.run(0, &["session", "archive", &session]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("worktree is on host"), "{stderr}");
    cluster.ok(1, &["session", "archive", &session]);
}

/// Sets `slots.total` through the first daemon; returns once every daemon has it in effect
/// (each hears of the change from the store: no restart).
fn set_total(cluster: &Cluster, total: usize) {
    cluster.ok(0, &["config", "set", "slots.total", &total.to_string()]);
    for index in 0..cluster.len() {
        cluster.wait_for("the new total in effect", Duration::from_secs(10), || {
            cluster.status(index)["slots"]["limits"]["total"] == total
        });
    }
}

// A setting changed through one daemon is in effect on the others at once, not at their
// restart: `slots.total` holds across them, so they must agree on it.
#[test]
fn a_setting_changed_on_one_daemon_is_in_effect_on_the_others() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    assert_eq!(cluster.status(1)["slots"]["limits"]["total"], Value::Null);
    let pid = cluster.home(1).daemon_pid();
    set_total(&cluster, 3);
    cluster.ok(1, &["config", "set", "slots.fake", "5"]);
    cluster.wait_for("B's engine limit on A", Duration::from_secs(10), || {
        cluster.status(0)["slots"]["limits"]["per_engine"]["fake"] == 5
    });
    cluster.ok(1, &["config", "unset", "slots.total"]);
    cluster.wait_for("the total unset on A", Duration::from_secs(10), || {
        cluster.status(0)["slots"]["limits"]["total"].is_null()
    });
    assert_eq!(cluster.home(1).daemon_pid(), pid, "no restart");
}

#[test]
fn the_total_holds_across_daemons() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    set_total(&cluster, 2);
    let mut prompts = Vec::new();
    for index in 0..6 {
        let project = format!("t{index}");
        cluster.add_project(&project);
        let session = cluster.session_of(&project, &project);
        prompts.push(cluster.send(index % 2, &session, "@fake delay=600\ncounted"));
    }
    cluster.wait_for("every prompt is done", Duration::from_secs(60), || {
        prompts
            .iter()
            .all(|prompt| cluster.prompt_status(prompt) == "done")
    });
    let at_once = most_at_once(
        &cluster,
        "SELECT started_at, ended_at FROM runs WHERE status = 'succeeded'",
    );
    assert!(
        (1..=2).contains(&at_once),
        "{at_once} runs at once across the daemons, with slots.total 2"
    );
}

/// `slots.total` across daemons is granted first come, first served: with one slot in all, a
/// prompt queued through B while A runs goes before A's session's later prompts (A used to
/// take its session's next prompt at each end, and B's waited for all of them).
#[test]
fn the_total_is_granted_first_come_across_daemons() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    set_total(&cluster, 1);
    // Two projects, so that no project lock orders them: only the total does.
    for name in ["t1", "t2"] {
        cluster.add_project(name);
    }
    let first = cluster.session_of("t1", "first");
    let other = cluster.session_of("t2", "other");
    turns_are_first_come(&cluster, &first, &other);
}

#[test]
fn cancel_reaches_the_daemon_that_runs_the_prompt() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("cancelled elsewhere");
    let prompt = cluster.send(0, &session, "@fake delay=30000\nlong");
    let (run, node, _) = running_run(&cluster, &prompt);
    assert_eq!(node, cluster.node_id(0));
    // Asked of B; A runs it.
    cluster.ok(1, &["cancel", &prompt]);
    cluster.wait_for("the prompt is cancelled", Duration::from_secs(10), || {
        cluster.prompt_status(&prompt) == "cancelled"
    });
    cluster.wait_for("its engine is gone", Duration::from_secs(5), || {
        run_processes(&run).is_empty()
    });
}

// A cancel asked while the daemon that runs the prompt is dead reaches nobody at once; it is
// kept on the prompt's row, so the daemon that takes the prompt back ends it as cancelled
// instead of running it again. (Also what a runner whose listener was reconnecting reads.)
#[test]
fn a_prompt_cancelled_while_its_daemon_is_dead_is_not_run_again() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("cancelled while dead");
    let prompt = cluster.send(0, &session, "@fake delay=60000\nlong");
    let (_, node, _) = running_run(&cluster, &prompt);
    let index = cluster.home_of_node(&node).expect("a known node");
    let pid = cluster.daemon_pid(index).expect("the runner's pid");
    kill(pid, libc::SIGKILL);
    cluster.wait_for("the runner is gone", Duration::from_secs(2), || !alive(pid));
    let other = 1 - index;
    let said = cluster.ok(other, &["cancel", &prompt]);
    // Restarted, the daemon asked forgets the cancel (the store alone keeps it) before the
    // dead one's lease runs out and it takes the prompt back.
    cluster.home(other).stop_daemon();
    cluster.start_daemon(other);
    cluster.wait_for(
        "the prompt is cancelled",
        LEASE + Duration::from_secs(8),
        || cluster.prompt_status(&prompt) == "cancelled",
    );
    let runs = runs_of(&cluster, &prompt);
    assert_eq!(runs.len(), 1, "never run again ({said}): {runs:?}");
    assert_eq!(runs[0].2, "interrupted", "{runs:?}");
    // The session takes its next prompt on the live daemon.
    let next = cluster.send(other, &session, "@fake\nafter");
    cluster.wait_for("the next prompt is done", Duration::from_secs(20), || {
        cluster.prompt_status(&next) == "done"
    });
}

// A cancel asked while the runner is shutting down (its engine ignores SIGTERM, so it waits
// out the cancel grace) reaches a daemon that has already chosen to put the prompt back: the
// row's cancel is read when it does, and the prompt ends cancelled instead of queued for the
// other daemon to run again.
#[test]
fn a_prompt_cancelled_while_its_daemon_shuts_down_is_not_run_again() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    // No grace to finish, a long one between SIGTERM and SIGKILL: the window of the cancel.
    cluster.ok(0, &["config", "set", "daemon.shutdown_grace_ms", "0"]);
    cluster.ok(0, &["config", "set", "cancel.grace_ms", "3000"]);
    let session = cluster.session("cancelled while stopping");
    let prompt = cluster.send(0, &session, "@fake ignore-sigterm\n@fake hang\nlong");
    let (run, node, _) = running_run(&cluster, &prompt);
    let index = cluster.home_of_node(&node).expect("a known node");
    let other = 1 - index;
    let pid = cluster.daemon_pid(index).expect("the runner's pid");
    kill(pid, libc::SIGTERM);
    // With no grace, stopping (the engine told to end) follows at once; the runner still
    // answers while it waits out its engine, and says it is shutting down.
    cluster.wait_for("the runner shuts down", Duration::from_secs(5), || {
        cluster.status(index)["daemon"]["shutting_down"] == true
    });
    cluster.ok(other, &["cancel", &prompt]);
    // Restarted, the daemon asked forgets the cancel: only the store keeps it.
    cluster.home(other).stop_daemon();
    cluster.start_daemon(other);
    assert!(
        alive(pid) && !run_processes(&run).is_empty(),
        "the cancel was asked while the runner waited out its engine's grace"
    );
    cluster.wait_for("the runner exits", Duration::from_secs(15), || !alive(pid));
    cluster.wait_for("the prompt is cancelled", Duration::from_secs(5), || {
        cluster.prompt_status(&prompt) == "cancelled"
    });
    // Still so once the live daemon has had its chance to claim it.
    let next = cluster.send(other, &session, "@fake\nafter");
    cluster.wait_for("the next prompt is done", Duration::from_secs(20), || {
        cluster.prompt_status(&next) == "done"
    });
    assert_eq!(cluster.prompt_status(&prompt), "cancelled");
    let runs = runs_of(&cluster, &prompt);
    assert_eq!(runs.len(), 1, "never run again: {runs:?}");
}

// A codex app-server child serves a project, not a run: no run lists it with the lease
// guard. It carries the guard's mark like every child, so a daemon killed mid-turn takes it
// and what its turn started with it at once, as it takes its engines, instead of leaving
// them to that home's next boot while another daemon runs the prompt again.
#[test]
fn an_app_server_child_and_its_turn_end_with_their_daemon() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    app_server_project(&cluster, "apps");
    let session = cluster.session_of("apps", "app-server turn");
    let prompt = cluster.send(0, &session, "@fake run=sleep 300\nlong");
    let (_, node, _) = running_run(&cluster, &prompt);
    let index = cluster.home_of_node(&node).expect("a known node");
    let home = cluster.home(index).path().to_path_buf();
    let pid = cluster.daemon_pid(index).expect("the runner's pid");
    let children = || -> Vec<i32> {
        common::daemon::processes_of(&home)
            .into_iter()
            .filter(|&child| child != pid)
            .filter(|child| {
                let comm = std::fs::read_to_string(format!("/proc/{child}/comm"));
                comm.is_ok_and(|comm| comm.trim() != "corral")
            })
            .collect()
    };
    wait_for("the turn's command runs", Duration::from_secs(20), || {
        children().into_iter().any(|child| {
            std::fs::read_to_string(format!("/proc/{child}/comm"))
                .is_ok_and(|comm| comm.trim() == "sleep")
        })
    });
    kill(pid, libc::SIGKILL);
    // Well before the lease (LEASE_MS) runs out: the guard acts on the daemon's end.
    wait_for(
        "the app-server child and its turn's command are gone",
        Duration::from_millis(LEASE_MS / 2),
        || children().is_empty(),
    );
}

// A kill -9 between an engine's spawn and its listing with the lease guard (the test point
// `run.spawned`): the engine carries the guard's mark from its first instruction, so the
// guard ends it with its daemon all the same.
#[test]
fn an_engine_not_yet_listed_with_the_guard_ends_with_its_daemon() {
    let Some(cluster) = Cluster::start(1) else {
        return;
    };
    cluster.home(0).stop_daemon();
    let started = cluster
        .command(0, &["daemon", "--detach"])
        .env(corral::env::TEST_KILL_AT, "run.spawned")
        .output()
        .expect("corral daemon --detach");
    assert!(started.status.success(), "{started:?}");
    let pid = cluster
        .daemon_pid(0)
        .expect("a started daemon wrote its pid");
    // The command engine: `sh -c` neither reads its stdin nor writes its stdout, so the
    // daemon's pipes closing with it do not end it.
    let dir = cluster.dir().join("commands");
    std::fs::create_dir_all(&dir).expect("a project directory");
    let dir = dir.to_str().expect("temporary paths are UTF-8");
    cluster.ok(
        0,
        &["project", "add", "commands", dir, "--engine", "command"],
    );
    let session = cluster.session_of("commands", "killed at the spawn");
    // The daemon may be killed before its answer reaches the `send`: whether it failed is
    // not what this test looks at.
    let _ = cluster
        .command(0, &["send", &session, "sleep 300"])
        .output()
        .expect("corral send");
    cluster.wait_for(
        "the daemon is killed at the spawn",
        Duration::from_secs(10),
        || !alive(pid),
    );
    let home = cluster.home(0).path().to_path_buf();
    wait_for(
        "the engine it spawned is gone",
        Duration::from_millis(LEASE_MS / 2),
        || common::daemon::processes_of(&home).is_empty(),
    );
}

/// A codex-app-server project (the fake engine's app-server mode) every daemon serves, and a
/// session of it whose thread was opened by a first prompt: (session, the node that ran it).
fn app_server_session(cluster: &Cluster, title: &str) -> (String, String) {
    let name = format!("apps-{title}");
    app_server_project(cluster, &name);
    let session = cluster.session_of(&name, title);
    let first = cluster.send(0, &session, "@fake answer=opened\nopen the thread");
    cluster.wait_for("the first prompt is done", Duration::from_secs(20), || {
        cluster.prompt_status(&first) == "done"
    });
    let node = runs_of(cluster, &first)[0]
        .1
        .clone()
        .expect("the run names its node");
    (session, node)
}

// A steer asked of a daemon that does not run the session's turn goes to the one that does
// (its app-server child holds the turn), and the answer comes back.
#[test]
fn a_steer_asked_of_another_daemon_reaches_the_running_turn() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let (session, _) = app_server_session(&cluster, "steered");
    let hanging = cluster.send(0, &session, "@fake hang\nwork");
    let (run, node, _) = running_run(&cluster, &hanging);
    wait_turn_started(&cluster, &run);
    let other = 1 - cluster.home_of_node(&node).expect("a known node");
    let said = cluster.ok(other, &["steer", &session, "also", "update", "the", "docs"]);
    assert!(said.contains("steered"), "{said}");
    cluster.wait_for("the steered turn is done", Duration::from_secs(20), || {
        cluster.prompt_status(&hanging) == "done"
    });
    let answer = cluster.value(&format!(
        "SELECT answer FROM prompts WHERE id = {}",
        quoted(&hanging)
    ));
    assert_eq!(answer, json!("steered: also update the docs"));
    assert_eq!(
        cluster.count("SELECT count(*) FROM asks"),
        0,
        "the ask's row is taken away"
    );
}

// A compact asked of another daemon is done where the thread's files are (the daemon that
// ran the session last): asked elsewhere it would find no rollout and reset the thread.
// With that daemon stopped, it is refused in one line, the thread kept.
#[test]
fn a_compact_is_done_by_the_daemon_that_holds_the_thread() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let (session, node) = app_server_session(&cluster, "compacted");
    let thread_of = || {
        cluster.value(&format!(
            "SELECT thread_id FROM sessions WHERE id = {}",
            quoted(&session)
        ))
    };
    let thread = thread_of();
    assert!(thread.is_string(), "the first prompt opened a thread");
    let holder = cluster.home_of_node(&node).expect("a known node");
    let other = 1 - holder;
    let compacted = cluster.json(other, &["compact", &session, "--json"]);
    assert_eq!(compacted["thread_reset"], false, "{compacted}");
    assert_eq!(compacted["compacted"]["messages"], 1, "{compacted}");
    assert_eq!(thread_of(), thread, "the thread is kept");
    cluster.home(holder).stop_daemon();
    let refused = cluster.run(other, &["compact", &session]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("not running") && said.lines().count() == 1,
        "{said}"
    );
    assert_eq!(thread_of(), thread, "the thread is kept");
}

/// Cuts the proxy between daemon 0 and the database, and waits until its `status` says the
/// store is unreachable (asked over the socket: a `corral` command opens the store itself,
/// and says it cannot).
fn cut_until_unreachable(cluster: &Cluster) {
    let mut socket = common::rpc::Rpc::connect(cluster.home(0).path());
    cluster.proxy().cut();
    cluster.wait_for(
        "status says the store is unreachable",
        Duration::from_secs(6),
        || {
            let status = socket.call("status", json!({})).expect("status answers");
            status["lease"]["state"] == "store unreachable"
        },
    );
}

#[test]
fn a_daemon_whose_database_went_away_stops_when_asked_without_waiting_for_it() {
    let Some(cluster) = Cluster::start_through_proxy(1) else {
        return;
    };
    // Short graces; the store's wait (`store.lock_timeout_ms`) is left at its 60 s: a stop
    // that waited for the store gone would take that long.
    cluster.ok(0, &["config", "set", "daemon.shutdown_grace_ms", "1000"]);
    cluster.ok(0, &["config", "set", "cancel.grace_ms", "500"]);
    let session = cluster.session("cut, then stopped");
    let prompt = cluster.send(0, &session, "@fake delay=60000\nrun through the stop");
    let (run, _, _) = running_run(&cluster, &prompt);
    wait_turn_started(&cluster, &run);
    cut_until_unreachable(&cluster);
    let pid = cluster.daemon_pid(0).expect("the daemon's pid");
    let asked = Instant::now();
    kill(pid, libc::SIGTERM);
    cluster.wait_for("the daemon exits", Duration::from_secs(90), || !alive(pid));
    let took = asked.elapsed();
    // Its grace (1 s), its engine's end (0.5 s) and the lease guard's: nothing for the store.
    assert!(
        took < Duration::from_secs(15),
        "the daemon took {took:?} to stop: it waited for the store\n{}",
        cluster.logs()
    );
    assert!(run_processes(&run).is_empty(), "its engine ended with it");
    // Nothing is lost: back with the store, the next daemon runs the prompt again.
    cluster.proxy().restore();
    cluster.start_daemon(0);
    cluster.wait_for(
        "a second run of the prompt",
        Duration::from_secs(20),
        || runs_of(&cluster, &prompt).len() == 2,
    );
    let runs = runs_of(&cluster, &prompt);
    assert_eq!(runs[0].2, "interrupted", "{runs:?}");
}

#[test]
fn the_database_going_away_keeps_runs_under_the_lease() {
    let Some(cluster) = Cluster::start_through_proxy(1) else {
        return;
    };
    // A lease well past the cut; the daemon takes the new length at its next renewal.
    cluster.ok(0, &["config", "set", "store.lease_ms", "9000"]);
    cluster.wait_for("the longer lease", Duration::from_secs(5), || {
        cluster.status(0)["lease"]["lease_ms"] == 9000
    });
    // ... and renewed with it: the guard's deadline is that far now.
    cluster.wait_for("a renewal of 9 s", Duration::from_secs(5), || {
        daemons_of(&cluster.status(0))[0]["lease_left_ms"]
            .as_i64()
            .is_some_and(|left| left > 4000)
    });
    let session = cluster.session("through a cut");
    let prompt = cluster.send(0, &session, "@fake delay=5000\nwait it out");
    let (run, _, _) = running_run(&cluster, &prompt);
    // Cut in the run's quiet part, once its first events are stored (a batch cut off midway
    // is made again: tests/it/store_pg.rs).
    wait_turn_started(&cluster, &run);
    let cut = Instant::now();
    // The daemon says so; its engine runs on.
    cut_until_unreachable(&cluster);
    let refused = cluster.command(0, &["status", "--json"]).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && said.contains("cannot be reached") && !said.contains("devpw"),
        "a command says the store cannot be reached, in one line: {said}"
    );
    assert!(
        !run_processes(&run).is_empty(),
        "the engine runs on under the lease"
    );
    std::thread::sleep(Duration::from_secs(4).saturating_sub(cut.elapsed()));
    cluster.proxy().restore();
    cluster.wait_for("the prompt is done", Duration::from_secs(20), || {
        cluster.prompt_status(&prompt) == "done"
    });
    let runs = runs_of(&cluster, &prompt);
    assert_eq!(runs.len(), 1, "one run, never ended by the cut: {runs:?}");
    assert_eq!(runs[0].2, "succeeded", "{runs:?}");
    cluster.wait_for("the lease is held again", Duration::from_secs(10), || {
        cluster.status(0)["lease"]["state"] == "held"
    });
}

/// An approval answered through another daemon than the one whose run asked reaches that run
/// (the store tells every daemon, `p:<approval id>` on `corral_work`): the engine, the fake
/// engine's claude form under `ask` on A, writes once B's person approves.
#[test]
fn an_approval_answered_on_another_daemon_reaches_the_run_that_asked() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let fake = env!("CARGO_BIN_EXE_corral-fake-engine");
    cluster.ok(0, &["config", "set", "engines.claude.path", fake]);
    let dir = cluster.dir().join("c");
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    cluster.ok(0, &["project", "add", "c", dir, "--engine", "claude"]);
    cluster.ok(0, &["project", "set", "c", "--policy", "ask"]);
    let session = cluster.session_of("c", "asks");
    let target = cluster.dir().join("approved.txt");
    let prompt = cluster.send(
        0,
        &session,
        &format!("@fake ask=Write:{}\ngo", target.display()),
    );
    let (_, node, _) = running_run(&cluster, &prompt);
    let mut pending = Value::Null;
    cluster.wait_for("the approval is asked", Duration::from_secs(30), || {
        pending = cluster.json(1, &["approvals", "--json"]);
        pending.as_array().is_some_and(|listed| !listed.is_empty())
    });
    let id = pending[0]["id"].as_str().unwrap().to_string();
    // Answered on the daemon that does not run it.
    let runs_here = cluster.home_of_node(&node).expect("the run's daemon");
    let other = 1 - runs_here;
    cluster.ok(other, &["approve", &id]);
    cluster.wait_for("the prompt is done", Duration::from_secs(30), || {
        cluster.prompt_status(&prompt) == "done"
    });
    assert_eq!(
        std::fs::read_to_string(&target).ok().as_deref(),
        Some("approved\n")
    );
}

/// A pause made through one daemon holds every daemon of the store (#35): no daemon claims the
/// paused project's prompts, a `--now` made on one daemon interrupts the run another daemon
/// runs (told by the `corral_work` notice), and a resume through either lets the queue go on.
#[test]
fn a_pause_made_on_one_daemon_holds_the_others() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session_of(PROJECT, "held");
    let hanging = cluster.send(0, &session, "@fake hang\nforever");
    cluster.wait_for("the hanging prompt runs", Duration::from_secs(10), || {
        runs_of(&cluster, &hanging)
            .first()
            .is_some_and(|run| run.3.is_i64())
    });
    let runner = runs_of(&cluster, &hanging)[0].1.clone().expect("a node");
    let other = (0..2)
        .find(|&index| cluster.node_id(index) != runner)
        .expect("a daemon that does not run it");
    cluster.ok(other, &["pause", "--project", PROJECT, "--now"]);
    cluster.wait_for("the run is interrupted", Duration::from_secs(10), || {
        cluster.prompt_status(&hanging) == "queued"
    });
    assert_eq!(runs_of(&cluster, &hanging)[0].2, "interrupted");
    let later: Vec<String> = (0..2)
        .map(|home| cluster.send(home, &session, &format!("@fake answer=a{home}\nlater")))
        .collect();
    // Held for 2 s on both daemons (their claimers wake at each send and heartbeat).
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        for prompt in later.iter().chain([&hanging]) {
            assert_eq!(cluster.prompt_status(prompt), "queued", "{prompt}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        runs_of(&cluster, &hanging).len(),
        1,
        "not run again while paused"
    );
    cluster.ok(1 - other, &["resume", "--project", PROJECT]);
    cluster.wait_for(
        "the hanging prompt runs again",
        Duration::from_secs(10),
        || runs_of(&cluster, &hanging).len() == 2,
    );
    cluster.ok(0, &["cancel", &hanging]);
    cluster.wait_for(
        "the later prompts are done",
        Duration::from_secs(20),
        || {
            later
                .iter()
                .all(|prompt| cluster.prompt_status(prompt) == "done")
        },
    );
}
