//! A worktree project's setup command (issue 13), through the built binary against a real
//! daemon and real git (isolated from the person's: `common::git`): it runs in the session's
//! worktree before the session's first prompt, its lines are the session's `setup.output`
//! events, a failure fails the prompt and the next prompt tries again, a cancel ends its whole
//! process group, and the engine then runs in the worktree (the `command` engine's prompt is a
//! shell command line: `pwd > where.txt`). Also the worker's other duties to a worktree: a
//! worktree deleted by hand or left `creating` with its path taken fails the prompt and touches
//! nothing, and the sessions of a worktree project still count against its locking group.

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use common::daemon::{alive, wait_until};
use common::git::{same_path, GitHome};

/// A home whose command engine has short grace periods.
fn command_home() -> GitHome {
    let home = GitHome::new();
    home.config(&[
        ("cancel.grace_ms", "300"),
        ("daemon.shutdown_grace_ms", "300"),
    ]);
    home
}

/// A repository `repo` in the home, a worktree project `app` on `dir` (the repository or a
/// directory in it) with `setup`, and a session of it: (repository, session id).
fn worktree_session(home: &GitHome, sub: Option<&str>, setup: &str) -> (PathBuf, String) {
    let repo = home.repo("repo");
    let dir = match sub {
        Some(sub) => {
            home.commit_file(&repo, &format!("{sub}/keep.txt"), "k\n", "a subdirectory");
            repo.join(sub)
        }
        None => repo.clone(),
    };
    home.add_project("app", &dir, &["--isolation", "worktree", "--setup", setup]);
    let session = home.new_session(&["app", "--title", "setup test"]);
    (repo, session)
}

/// The session's events as (kind, payload), in order.
fn events(home: &GitHome, session: &str) -> Vec<(String, Value)> {
    home.home
        .sql(&format!(
            "SELECT kind, payload FROM events WHERE session_id = {} ORDER BY seq",
            common::store::quoted(session)
        ))
        .into_iter()
        .map(|row| {
            let kind = row[0].as_str().expect("a kind").to_string();
            (
                kind,
                serde_json::from_str(row[1].as_str().expect("a payload")).unwrap(),
            )
        })
        .collect()
}

fn count(events: &[(String, Value)], kind: &str) -> usize {
    events.iter().filter(|(k, _)| k == kind).count()
}

fn position(events: &[(String, Value)], kind: &str) -> usize {
    events
        .iter()
        .position(|(k, _)| k == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:#?}"))
}

/// `send S PROMPT --wait`, which must fail: its stderr.
fn prompt_fails(home: &GitHome, session: &str, prompt: &str) -> String {
    let output = home.run(&["send", session, prompt, "--wait"]);
    assert!(
        !output.status.success(),
        "{prompt:?} succeeded: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .trim()
        .to_string()
}

#[test]
fn the_setup_runs_in_the_worktree_before_the_first_prompt_and_the_engine_runs_there_too() {
    let home = command_home();
    let (repo, session) = worktree_session(&home, None, "echo hi; touch setup-ran");
    let worktree = home.worktree_of(&session);
    // The prompt sees what the setup made, in its own working directory.
    home.prompt(&session, "test -f setup-ran && pwd > where.txt");
    assert!(worktree.join("setup-ran").is_file());
    assert!(
        same_path(Path::new(&read(&worktree.join("where.txt"))), &worktree),
        "the engine ran in {}, not in the worktree {}",
        read(&worktree.join("where.txt")),
        worktree.display()
    );
    // Nothing in the person's checkout.
    assert!(!repo.join("setup-ran").exists());
    assert!(!repo.join("where.txt").exists());
    assert_eq!(home.session(&session)["worktree_state"], "ready");

    let seen = events(&home, &session);
    let started = position(&seen, "setup.started");
    assert_eq!(seen[started].1["command"], "echo hi; touch setup-ran");
    let output: Vec<&Value> = seen
        .iter()
        .filter(|(kind, _)| kind == "setup.output")
        .map(|(_, payload)| payload)
        .collect();
    assert_eq!(output.len(), 1, "{seen:#?}");
    assert_eq!(output[0]["line"], "hi");
    assert_eq!(output[0]["stream"], "stdout");
    let exited = position(&seen, "setup.exited");
    assert_eq!(seen[exited].1["code"], 0);
    assert!(seen[exited].1["signal"].is_null());
    // In order: the prompt started, the setup, then the engine's run.
    assert!(position(&seen, "prompt.started") < started);
    assert!(started < position(&seen, "setup.output"));
    assert!(position(&seen, "setup.output") < exited);
    assert!(exited < position(&seen, "run.started"));

    // Set up once: the next prompt runs straight away.
    home.prompt(&session, "true");
    assert_eq!(count(&events(&home, &session), "setup.started"), 1);
}

#[test]
fn a_failing_setup_fails_the_prompt_and_runs_again_on_the_next() {
    let home = command_home();
    let allow = home.path().join("allow");
    let setup = format!(
        "echo checking; if [ -f '{}' ]; then touch ok; else echo 'no allow file' >&2; exit 3; fi",
        allow.display()
    );
    let (_, session) = worktree_session(&home, None, &setup);
    let worktree = home.worktree_of(&session);

    let stderr = prompt_fails(&home, &session, "touch engine-ran");
    assert!(
        stderr.contains("setup command failed (exit 3): no allow file"),
        "{stderr}"
    );
    // The engine never ran, and the worktree waits for its setup still.
    assert!(!worktree.join("engine-ran").exists());
    assert_eq!(home.session(&session)["worktree_state"], "setup");
    let seen = events(&home, &session);
    assert_eq!(count(&seen, "run.started"), 0, "{seen:#?}");
    let exited = position(&seen, "setup.exited");
    assert_eq!(seen[exited].1["code"], 3);
    let stderr_line = seen
        .iter()
        .find(|(kind, payload)| kind == "setup.output" && payload["stream"] == "stderr")
        .unwrap_or_else(|| panic!("no stderr line in {seen:#?}"));
    assert_eq!(stderr_line.1["line"], "no allow file");
    assert_eq!(seen.last().unwrap().0, "prompt.failed");

    // Fixed: the next prompt runs the setup again, then the engine.
    std::fs::write(&allow, "").unwrap();
    home.prompt(&session, "touch engine-ran");
    assert!(worktree.join("ok").is_file());
    assert!(worktree.join("engine-ran").is_file());
    assert_eq!(home.session(&session)["worktree_state"], "ready");
    assert_eq!(count(&events(&home, &session), "setup.started"), 2);
}

#[test]
fn a_project_in_a_subdirectory_runs_its_setup_and_engine_at_that_place_in_the_worktree() {
    let home = command_home();
    let (_, session) = worktree_session(&home, Some("services/web"), "pwd > setup-where.txt");
    let worktree = home.worktree_of(&session);
    home.prompt(&session, "pwd > where.txt");
    let place = worktree.join("services/web");
    assert!(same_path(
        Path::new(&read(&place.join("setup-where.txt"))),
        &place
    ));
    assert!(same_path(
        Path::new(&read(&place.join("where.txt"))),
        &place
    ));
}

/// A setup that sleeps in the background (its pid in `sleep.pid` of the home) and waits for
/// it, unless the home has a file `quick`: (setup, pid file, quick file).
fn slow_setup(home: &GitHome) -> (String, PathBuf, PathBuf) {
    let pid_file = home.path().join("sleep.pid");
    let quick = home.path().join("quick");
    let setup = format!(
        "if [ -f '{}' ]; then echo quick; exit 0; fi; sleep 60 & echo $! > '{}'; wait",
        quick.display(),
        pid_file.display()
    );
    (setup, pid_file, quick)
}

/// The pid of the slow setup's sleep, once it runs.
fn sleeping(pid_file: &Path) -> i32 {
    wait_until("the setup's sleep started", || {
        std::fs::read_to_string(pid_file).is_ok_and(|text| text.ends_with('\n'))
    });
    let sleep: i32 = read(pid_file).parse().unwrap();
    assert!(alive(sleep));
    sleep
}

#[test]
fn cancelling_the_prompt_ends_the_setup_s_whole_group_and_the_next_prompt_sets_up_again() {
    let home = command_home();
    let (setup, pid_file, quick) = slow_setup(&home);
    let (_, session) = worktree_session(&home, None, &setup);
    home.ok(&["send", &session, "true"]);
    let sleep = sleeping(&pid_file);
    home.ok(&["cancel", &session]);
    wait_until("the prompt ended", || {
        events(&home, &session)
            .iter()
            .any(|(kind, _)| kind == "prompt.cancelled")
    });
    // Its background child went with its group, before the prompt's end.
    assert!(
        !alive(sleep),
        "the setup's sleep {sleep} outlived the cancel"
    );
    let seen = events(&home, &session);
    let exited = position(&seen, "setup.exited");
    assert_eq!(seen[exited].1["ended_by"], "cancelled");
    assert_eq!(count(&seen, "run.started"), 0);
    assert_eq!(home.session(&session)["worktree_state"], "setup");

    std::fs::write(&quick, "").unwrap();
    home.prompt(&session, "touch engine-ran");
    assert!(home.worktree_of(&session).join("engine-ran").is_file());
    assert_eq!(count(&events(&home, &session), "setup.started"), 2);
    assert_eq!(home.session(&session)["worktree_state"], "ready");
}

#[test]
fn a_daemon_shutdown_ends_the_setup_and_the_prompt_sets_up_again_at_the_next_start() {
    let home = command_home();
    let (setup, pid_file, quick) = slow_setup(&home);
    let (_, session) = worktree_session(&home, None, &setup);
    home.ok(&["send", &session, "touch engine-ran"]);
    let sleep = sleeping(&pid_file);
    home.stop_daemon();
    assert!(
        !alive(sleep),
        "the setup's sleep {sleep} outlived the daemon"
    );
    let seen = events(&home, &session);
    assert_eq!(
        seen[position(&seen, "setup.exited")].1["ended_by"],
        "daemon shutdown"
    );
    assert_eq!(seen.last().unwrap().0, "prompt.requeued");

    // The next daemon resumes the prompt: the setup runs again, then the engine.
    std::fs::write(&quick, "").unwrap();
    home.ok(&["daemon", "--detach"]);
    wait_until("the resumed prompt ended", || {
        let seen = events(&home, &session);
        count(&seen, "setup.started") == 2
            && seen.last().is_some_and(|(kind, _)| {
                ["prompt.done", "prompt.failed", "prompt.cancelled"].contains(&kind.as_str())
            })
    });
    assert!(home.worktree_of(&session).join("engine-ran").is_file());
    let seen = events(&home, &session);
    assert_eq!(count(&seen, "setup.started"), 2);
    assert_eq!(seen.last().unwrap().0, "prompt.done", "{seen:#?}");
}

#[test]
fn what_the_setup_leaves_in_the_background_ends_with_it() {
    let home = command_home();
    let pid_file = home.path().join("left.pid");
    let setup = format!("sleep 60 & echo $! > '{}'", pid_file.display());
    let (_, session) = worktree_session(&home, None, &setup);
    home.prompt(&session, "true");
    let left: i32 = read(&pid_file).parse().unwrap();
    assert!(
        !alive(left),
        "the setup's background sleep {left} outlived it"
    );
    assert_eq!(home.session(&session)["worktree_state"], "ready");
}

#[test]
fn a_worktree_deleted_by_hand_fails_the_prompt_saying_how_to_recreate_it() {
    let home = command_home();
    let (_, session) = worktree_session(&home, None, "true");
    home.prompt(&session, "true");
    let worktree = home.worktree_of(&session);
    std::fs::remove_dir_all(&worktree).unwrap();
    let stderr = prompt_fails(&home, &session, "touch x");
    assert!(
        stderr.contains(&format!(
            "worktree {} is gone (removed by hand?): recreate it with `corral session recreate {session}`",
            worktree.display()
        )),
        "{stderr}"
    );
    assert!(!worktree.exists());
}

#[test]
fn sessions_of_a_worktree_project_in_a_locking_group_run_one_at_a_time() {
    let home = command_home();
    home.config(&[("slots.command", "4")]);
    let repo = home.repo("repo");
    home.add_project("app", &repo, &["--isolation", "worktree", "--group", "db"]);
    let sessions: Vec<String> = (0..2)
        .map(|n| home.new_session(&["app", "--title", &format!("grouped {n}")]))
        .collect();
    let prompts: Vec<String> = sessions
        .iter()
        .map(|session| home.send(session, "sleep 0.4"))
        .collect();
    for prompt in &prompts {
        assert_eq!(home.wait_prompt(prompt)["status"], "done");
    }
    let mut runs: Vec<(i64, i64)> = sessions
        .iter()
        .map(|session| {
            let row = home.home.store().row(&format!(
                "SELECT started_at, ended_at FROM runs WHERE session_id = {}",
                common::store::quoted(session)
            ));
            (row[0].as_i64().unwrap(), row[1].as_i64().unwrap())
        })
        .collect();
    runs.sort();
    assert!(
        runs[0].1 <= runs[1].0,
        "the group's runs overlapped: {runs:?}"
    );
    // The second waited for the group, held by the first.
    let waited: Vec<Value> = sessions
        .iter()
        .flat_map(|session| events(&home, session))
        .filter(|(kind, _)| kind == "slot.waiting")
        .map(|(_, payload)| payload)
        .collect();
    assert_eq!(waited.len(), 1, "{waited:#?}");
    assert_eq!(waited[0]["held_by"]["reason"], "group_lock");
    assert_eq!(waited[0]["held_by"]["group"], "db");
}

#[test]
fn a_worktree_left_creating_that_cannot_be_made_fails_the_prompt_and_touches_nothing() {
    let home = command_home();
    let (repo, session) = worktree_session(&home, None, "true");
    let worktree = home.worktree_of(&session);
    // As if the daemon had died before `git worktree add`, and something else took the path
    // since.
    home.git(
        &repo,
        &["worktree", "remove", "--force", worktree.to_str().unwrap()],
    );
    std::fs::create_dir_all(&worktree).unwrap();
    std::fs::write(worktree.join("someone-else.txt"), "mine\n").unwrap();
    home.home.execute(&format!(
        "UPDATE sessions SET worktree_state = 'creating' WHERE id = {}",
        common::store::quoted(&session)
    ));

    let stderr = prompt_fails(&home, &session, "touch engine-ran");
    assert!(stderr.contains(worktree.to_str().unwrap()), "{stderr}");
    assert_eq!(read(&worktree.join("someone-else.txt")), "mine");
    assert!(!worktree.join("engine-ran").exists());
    assert_eq!(home.session(&session)["worktree_state"], "creating");
    let seen = events(&home, &session);
    assert_eq!(count(&seen, "run.started"), 0, "{seen:#?}");
}

#[test]
fn a_setup_left_by_a_daemon_killed_9_ends_at_the_next_boot_and_runs_again() {
    let home = command_home();
    let (setup, pid_file, quick) = slow_setup(&home);
    let (_, session) = worktree_session(&home, None, &setup);
    home.ok(&["send", &session, "touch engine-ran"]);
    let sleep = sleeping(&pid_file);
    let daemon = home.home.daemon_pid().expect("a daemon");
    common::daemon::kill(daemon, libc::SIGKILL);
    wait_until("the daemon is gone", || !alive(daemon));

    // The next daemon ends what the setup left before it answers, then sets up again.
    std::fs::write(&quick, "").unwrap();
    home.ok(&["daemon", "--detach"]);
    assert!(
        !alive(sleep),
        "the killed daemon's setup left {sleep} running"
    );
    wait_until("the resumed prompt ended", || {
        events(&home, &session)
            .last()
            .is_some_and(|(kind, _)| kind == "prompt.done" || kind == "prompt.failed")
    });
    assert!(home.worktree_of(&session).join("engine-ran").is_file());
    assert_eq!(count(&events(&home, &session), "setup.started"), 2);
    home.stop_daemon();
}
