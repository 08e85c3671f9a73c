//! Where a request comes from: a person, or an agent inside a supervised run.
//!
//! Agents are not trusted with their own rights: a request that would widen what an agent may
//! do (see [`Widening`]) is refused when it comes from inside a run. The daemon learns the
//! peer's pid from SO_PEERCRED when the connection is accepted, and [`find`] matches that
//! process against the daemon's live runs (each run's engine leads a process group of its
//! own; a codex app-server child serves its project's turns):
//!
//! 1. **ancestry**: the peer, its parent, and so on up to pid 1, is a run's engine (or an
//!    app-server child) — whatever the peer did to its environment, process group or session
//!    (`env -i`, `setsid`), it stays a descendant;
//! 2. **process group**: the peer is in a run's group (a process that was reparented when its
//!    parent exited, but never left the group);
//! 3. **environment**: the peer or one of its ancestors carries a live run's `CORRAL_RUN_ID`.
//!
//! What it cannot catch, written down on purpose: a process that left the run's tree *and*
//! group *and* environment — it double-forked (reparented to init or a subreaper), called
//! `setsid`, and dropped `CORRAL_RUN_ID` — before connecting, or a process the agent asked
//! something outside corral to start (a cron job, a user service). Such an escape needs the
//! agent to run arbitrary processes outside its sandbox: an agent that can do that already
//! has the user's rights (full access is the user's own choice), and corral does not claim
//! to contain it.

use std::collections::HashMap;

use procfs::process::Process;

/// The variable every engine child carries: its run's id.
pub const RUN_ID_ENV: &str = crate::actors::supervisor::RUN_ID_ENV;

/// A live run as [`find`] matches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRun {
    pub run_id: String,
    /// `None` for an app-server child, which serves many sessions.
    pub session_id: Option<String>,
    /// The engine's pid, which is also its process group's id.
    pub pid: i32,
}

/// Which live run a request came from, and how that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub run_id: String,
    pub session_id: Option<String>,
    /// `ancestry`, `process group` or `environment`.
    pub found_by: &'static str,
}

/// How far up a process tree [`find`] walks (a deeper tree is not a supervised run's).
const MAX_DEPTH: usize = 64;

/// The live run `peer` belongs to, if any (see the module documentation).
pub fn find(peer: i32, runs: &[LiveRun]) -> Option<Origin> {
    if peer <= 0 || runs.is_empty() {
        return None;
    }
    let by_pid: HashMap<i32, &LiveRun> = runs.iter().map(|run| (run.pid, run)).collect();
    let by_id: HashMap<&str, &LiveRun> =
        runs.iter().map(|run| (run.run_id.as_str(), run)).collect();
    let origin = |run: &LiveRun, found_by| Origin {
        run_id: run.run_id.clone(),
        session_id: run.session_id.clone(),
        found_by,
    };
    // Ancestry first (the strongest evidence), then the peer's group, then an environment.
    let mut group = None;
    let mut from_environment = None;
    let mut pid = peer;
    for depth in 0..MAX_DEPTH {
        if let Some(run) = by_pid.get(&pid) {
            return Some(origin(run, "ancestry"));
        }
        let Ok(process) = Process::new(pid) else {
            break;
        };
        let Ok(stat) = process.stat() else {
            break;
        };
        if depth == 0 {
            group = by_pid.get(&stat.pgrp).copied();
        }
        if from_environment.is_none() {
            from_environment =
                run_id_in_environment(&process).and_then(|id| by_id.get(id.as_str()).copied());
        }
        if stat.ppid <= 1 {
            break;
        }
        pid = stat.ppid;
    }
    if let Some(run) = group {
        return Some(origin(run, "process group"));
    }
    from_environment.map(|run| origin(run, "environment"))
}

/// The `CORRAL_RUN_ID` in a process's environment (readable for our own user's processes).
fn run_id_in_environment(process: &Process) -> Option<String> {
    let environment = process.environ().ok()?;
    environment
        .get(std::ffi::OsStr::new(RUN_ID_ENV))
        .map(|value| value.to_string_lossy().into_owned())
}

/// What a request would widen, in words for the refusal, if it widens anything an agent may
/// do: full access on, `remote` off, another engine for a project, where an engine's program
/// comes from, a group that stops locking, background processes kept after their runs
/// (`keep_background` on: an agent could leave a process running unsupervised), the daemon
/// stopped. Narrowing (full access off, `remote` on, `keep_background` off) is not widening.
pub fn widening(method: &str, params: &serde_json::Value) -> Option<String> {
    let field = |name: &str| params.get(name);
    let is =
        |name: &str, value: bool| field(name).and_then(serde_json::Value::as_bool) == Some(value);
    match method {
        "project.add" if is("full_access", true) => {
            Some("adding a project with full access".into())
        }
        "project.add" if is("keep_background", true) => {
            Some("adding a project whose runs' background processes outlive them".into())
        }
        "project.set" if is("full_access", true) => Some("turning full access on".into()),
        "project.set" if is("keep_background", true) => {
            Some("letting background processes outlive their runs".into())
        }
        "project.set" if is("remote", false) => Some("turning remote off".into()),
        "project.set" if field("engine").is_some_and(|engine| !engine.is_null()) => {
            Some("changing a project's engine".into())
        }
        "project.set" if field("path").is_some_and(|path| !path.is_null()) => {
            Some("changing a project's path".into())
        }
        "settings.set" => {
            let name = field("name")?.as_str()?;
            let engine_program = name.starts_with("engines.")
                && (name.ends_with(".path") || name == "engines.command.template");
            engine_program.then(|| format!("changing {name}"))
        }
        // `locking` defaults to true: only an explicit false widens.
        "group.set" if is("locking", false) => Some(format!(
            "making group {} non-locking",
            field("name")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("?")
        )),
        "shutdown" => Some("stopping the daemon".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    fn run(pid: u32, id: &str) -> LiveRun {
        LiveRun {
            run_id: id.into(),
            session_id: Some(format!("session-of-{id}")),
            pid: pid as i32,
        }
    }

    #[test]
    fn a_descendant_is_found_by_its_ancestry_even_in_a_session_of_its_own() {
        // A shell in its own process group (a run's engine) whose child calls setsid and
        // waits: the grandchild is in another session and group, but still a descendant.
        let mut engine = Command::new("sh")
            .args(["-c", "setsid sleep 5 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(engine.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let runs = [run(engine.id(), "r1")];
        let found = find(grandchild, &runs);
        let _ = Command::new("kill").arg(grandchild.to_string()).status();
        let _ = engine.wait();
        assert_eq!(
            found.map(|o| (o.run_id, o.found_by)),
            Some(("r1".into(), "ancestry"))
        );
    }

    #[test]
    fn widening_requests_are_named_and_narrowing_ones_pass() {
        use serde_json::json;
        let widens = |method: &str, params: serde_json::Value| widening(method, &params);
        assert!(widens("project.set", json!({"project": "p", "full_access": true})).is_some());
        assert!(widens("project.set", json!({"project": "p", "remote": false})).is_some());
        assert!(widens("project.set", json!({"project": "p", "engine": "codex"})).is_some());
        assert!(widens("project.add", json!({"name": "q", "full_access": true})).is_some());
        assert!(widens(
            "settings.set",
            json!({"name": "engines.claude.path", "value": "/x"})
        )
        .is_some());
        assert!(widens("settings.set", json!({"name": "engines.command.template"})).is_some());
        assert!(widens("group.set", json!({"name": "deploy", "locking": false})).is_some());
        assert!(widens("shutdown", json!({})).is_some());
        assert!(widens(
            "project.set",
            json!({"project": "p", "keep_background": true})
        )
        .is_some());
        assert!(widens("project.add", json!({"name": "q", "keep_background": true})).is_some());
        assert_eq!(
            widens(
                "project.set",
                json!({"project": "p", "keep_background": false})
            ),
            None
        );
        // Narrowing, and everything else, is allowed.
        assert_eq!(
            widens("project.set", json!({"project": "p", "full_access": false})),
            None
        );
        assert_eq!(
            widens("project.set", json!({"project": "p", "remote": true})),
            None
        );
        assert_eq!(
            widens("project.add", json!({"name": "q", "path": "/tmp"})),
            None
        );
        assert_eq!(
            widens("settings.set", json!({"name": "slots.total", "value": "1"})),
            None
        );
        assert_eq!(widens("group.set", json!({"name": "deploy"})), None);
        assert_eq!(
            widens("prompt.send", json!({"session": "s", "text": "hi"})),
            None
        );
    }

    #[test]
    fn a_stranger_is_not_a_run() {
        let runs = [run(999_999, "r1")];
        assert_eq!(find(std::process::id() as i32, &runs), None);
        assert_eq!(find(0, &runs), None);
        assert_eq!(find(std::process::id() as i32, &[]), None);
    }

    #[test]
    fn the_run_id_in_an_ancestors_environment_names_the_run() {
        // A child whose environment names a live run, and whose pid is not the run's.
        // It says it is ready once it runs (exec'd, with its own environment in place).
        let mut child = Command::new("sh")
            .args(["-c", "echo ready; exec sleep 5"])
            .env(RUN_ID_ENV, "r2")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let runs = [run(999_998, "r2")];
        let found = find(child.id() as i32, &runs);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            found.map(|o| (o.run_id, o.found_by)),
            Some(("r2".into(), "environment"))
        );
    }
}
