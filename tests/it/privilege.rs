//! Privilege stays with people: an agent inside a supervised run cannot widen its own rights.
//!
//! The agent is the fake engine's `run=` directive: a shell script it runs inside its run
//! tries every widening request — through `corral`, directly on the socket, after `env -i`
//! (no `CORRAL_*` left), after `setsid` (a session and group of its own), both, and detached
//! from the run (`setsid -f env -i`: its parent gone too) — and
//! each is refused with one line naming the session, recorded as a `request.refused` event,
//! and changes nothing. Narrowing (full access off) is allowed; the daemon keeps serving.

use crate::common;

use std::path::Path;

use common::agent::{detached, python_rpc, run_as_agent};
use common::daemon::DaemonHome;
use common::git::GitHome;
use serde_json::json;

const REFUSAL: &str = "not allowed from inside a supervised run (session ";

/// The agent's script: each widening attempt, then one narrowing request.
fn attempts(home: &Path, rpc: &Path) -> (String, usize) {
    let corral = env!("CARGO_BIN_EXE_corral");
    let home = home.display();
    let rpc = rpc.display();
    let widening = [
        format!("'{corral}' project set p --full-access true"),
        format!("'{corral}' project set p --remote false"),
        format!("'{corral}' project set p --engine codex"),
        format!("'{corral}' config set engines.fake.path /bin/sh"),
        format!(r#"'{corral}' config set engines.command.template '["sh","-c","{{prompt}}"]'"#),
        format!(r#"python3 '{rpc}' group.set '{{"name":"deploy","locking":false}}'"#),
        format!("python3 '{rpc}' shutdown '{{}}'"),
        format!(r#"python3 '{rpc}' project.set '{{"project":"p","full_access":true}}'"#),
        format!(
            "env -i PATH=\"$PATH\" '{corral}' --home '{home}' project set p --full-access true"
        ),
        format!("setsid -w '{corral}' project set p --full-access true"),
        format!(
            r#"env -i PATH="$PATH" setsid -w python3 '{rpc}' project.set '{{"project":"p","remote":false}}' '{home}'"#
        ),
        // Detached from the run: the run's shim adopted it.
        detached(
            &format!("'{corral}' project set p --full-access true"),
            &Path::new(&*home.to_string()).join("escape.fifo"),
        ),
    ];
    let mut script = String::from("set +e\n");
    for (n, attempt) in widening.iter().enumerate() {
        script.push_str(&format!("echo '== attempt {n}'\n{attempt} 2>&1\n"));
    }
    script.push_str(&format!(
        "echo '== narrowing'\n'{corral}' project set p --full-access false --json 2>&1\necho '== end'\n"
    ));
    (script, widening.len())
}

#[test]
fn an_agent_cannot_widen_its_own_rights_by_any_route() {
    let home = DaemonHome::new();
    let session = home.fake_session(env!("CARGO_BIN_EXE_corral-fake-engine"), "agent", &[]);
    let rpc = python_rpc(home.path());
    let (script, widening) = attempts(home.path(), &rpc);
    // What the agent saw: one refusal line per widening attempt, naming the session.
    let (sections, events) = run_as_agent(&home, &session, &script);
    let output = sections.join("== ");
    assert_eq!(sections.len(), widening + 2, "{output}");
    for section in &sections[..widening] {
        assert!(
            section.contains(&format!("{REFUSAL}{session})")),
            "not refused: {section}\n--- all:\n{output}"
        );
        assert!(!section.contains("ALLOWED"), "{section}");
    }
    // Narrowing is allowed.
    assert!(
        sections[widening].contains("\"full_access\": false")
            || sections[widening].contains("\"full_access\":false"),
        "narrowing was refused: {}",
        sections[widening]
    );

    // Each attempt is an event of the session; nothing changed; the daemon still serves.
    let refused: Vec<&serde_json::Value> = events
        .iter()
        .filter(|event| event["kind"] == "request.refused")
        .collect();
    assert_eq!(refused.len(), widening, "{refused:#?}");
    let found_by: Vec<&str> = refused
        .iter()
        .filter_map(|event| event["payload"]["found_by"].as_str())
        .collect();
    assert!(
        found_by.iter().all(|how| *how == "ancestry"),
        "{found_by:?}"
    );
    let project = home.json(&["project", "show", "p", "--json"]);
    assert_eq!(project["full_access"], false, "{project}");
    assert_eq!(project["kind"], "local", "{project}");
    assert_eq!(project["engine"], "fake", "{project}");
    let path = home.json(&["config", "get", "engines.fake.path", "--json"]);
    assert_eq!(
        path["value"],
        env!("CARGO_BIN_EXE_corral-fake-engine"),
        "{path}"
    );
    let template = home.json(&["config", "get", "engines.command.template", "--json"]);
    assert!(template["value"].is_null(), "{template}");
    assert!(
        common::daemon::alive(home.daemon_pid().expect("the daemon runs")),
        "the daemon was not stopped"
    );
    // The same requests from a person, outside any run, are allowed.
    home.ok(&["project", "set", "p", "--full-access", "true"]);
    assert_eq!(
        home.json(&["project", "show", "p", "--json"])["full_access"],
        true
    );
    home.stop_daemon();
}

/// The requests that widened by the back door before (issue #12's review): another engine
/// for a session, a project on `/` or with an engine of the agent's choosing, text for a
/// session without a sandbox or instructions for its project (full access by proxy), a
/// driver taken over, a project taken out of its lock group, and `project.archive` carrying
/// `project.set`'s params. From a run
/// each is refused and recorded (the archive: refused as bad params, for anyone); the same
/// requests that do not widen pass, and from a person every one passes.
#[test]
fn an_agent_cannot_widen_by_a_session_a_project_a_proxy_or_a_take_over() {
    let home = DaemonHome::new();
    let fake = env!("CARGO_BIN_EXE_corral-fake-engine");
    let session = home.fake_session(fake, "agent", &[]);
    // A person's full-access project, with a session; p in a locking group; a sandboxed
    // session beside the agent's.
    let open = home.path().join("open");
    std::fs::create_dir_all(&open).unwrap();
    home.add_project("fa", &open, "fake");
    home.ok(&["project", "set", "fa", "--full-access", "true"]);
    let target = home.new_session(&["fa", "--title", "target"]);
    let beside = home.new_session(&["p", "--title", "beside"]);
    let mut person = common::rpc::Rpc::connect(home.path());
    person
        .call("project.set", json!({"project": "p", "groups": ["deploy"]}))
        .expect("a person puts p in a group");
    let rpc = python_rpc(home.path());

    let work = home.work().display().to_string();
    let widening: Vec<(&str, serde_json::Value)> = vec![
        ("session.new", json!({"project": "p", "engine": "command"})),
        ("session.new", json!({"project": "fa", "engine": "command"})),
        ("project.add", json!({"name": "root", "path": "/"})),
        (
            "project.add",
            json!({"name": "up", "path": format!("{work}/..")}),
        ),
        (
            "project.add",
            json!({"name": "cmd", "path": work, "engine": "command"}),
        ),
        (
            "project.add",
            json!({"name": "bg", "path": work, "keep_background": true}),
        ),
        (
            "prompt.send",
            json!({"session": target, "text": "rm -rf /"}),
        ),
        (
            "prompt.send",
            json!({"session": "target", "text": "by title"}),
        ),
        ("session.steer", json!({"session": target, "text": "now"})),
        (
            "driver.claim",
            json!({"session": beside, "take_over": true}),
        ),
        ("project.set", json!({"project": "p", "groups": []})),
        ("project.set", json!({"project": "p", "engine": "command"})),
        (
            "project.set",
            json!({"project": "fa", "instructions": "rm -rf ~"}),
        ),
    ];
    // Not widening, but beyond the agent's own session (tests/it/confinement.rs has the rest).
    let beyond: Vec<(&str, serde_json::Value)> = vec![
        ("prompt.send", json!({"session": beside, "text": "hello"})),
        ("driver.claim", json!({"session": beside})),
    ];
    // Not widening: the project's own engine, a project on the run's own directory, p kept in
    // its group, instructions for a sandboxed project.
    let allowed: Vec<(&str, serde_json::Value)> = vec![
        (
            "session.new",
            json!({"project": "p", "engine": "fake", "title": "mine"}),
        ),
        ("project.add", json!({"name": "same", "path": work})),
        (
            "project.set",
            json!({"project": "p", "groups": ["deploy", "more"]}),
        ),
        (
            "project.set",
            json!({"project": "p", "instructions": "Be brief."}),
        ),
    ];
    let archive = json!({"project": "p", "full_access": true});
    let mut script = String::from("set +e\n");
    let quote = |value: &serde_json::Value| value.to_string().replace('\'', r"'\''");
    let mut call = |label: &str, method: &str, params: &serde_json::Value| {
        script.push_str(&format!(
            "echo '== {label} {method}'\npython3 '{}' {method} '{}' 2>&1\n",
            rpc.display(),
            quote(params)
        ));
    };
    for (method, params) in &widening {
        call("widening", method, params);
    }
    for (method, params) in &beyond {
        call("beyond", method, params);
    }
    for (method, params) in &allowed {
        call("allowed", method, params);
    }
    call("invalid", "project.archive", &archive);
    script.push_str("echo '== end'\n");

    let (sections, events) = run_as_agent(&home, &session, &script);
    let all = sections.join("== ");
    let refusals = widening.len() + beyond.len();
    assert_eq!(sections.len(), refusals + allowed.len() + 2, "{all}");
    for section in &sections[..refusals] {
        assert!(
            section.contains(&format!("{REFUSAL}{session})")),
            "not refused: {section}\n--- all:\n{all}"
        );
    }
    for section in &sections[refusals..refusals + allowed.len()] {
        assert!(
            !section.contains(REFUSAL),
            "refused: {section}\n--- all:\n{all}"
        );
        assert!(section.contains("ALLOWED"), "{section}\n--- all:\n{all}");
    }
    let invalid = &sections[refusals + allowed.len()];
    assert!(
        invalid.contains("project.archive takes only project, not full_access"),
        "{invalid}"
    );

    // Each widening attempt is recorded, naming its method; nothing widened.
    let refused: Vec<&str> = events
        .iter()
        .filter(|event| event["kind"] == "request.refused")
        .filter_map(|event| event["payload"]["method"].as_str())
        .collect();
    let methods: Vec<&str> = widening
        .iter()
        .chain(&beyond)
        .map(|(method, _)| *method)
        .collect();
    assert_eq!(refused, methods);
    let projects = home.json(&["project", "list", "--all", "--json"]);
    let names: Vec<&str> = projects
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|project| project["name"].as_str())
        .collect();
    for name in ["root", "up", "cmd", "bg"] {
        assert!(!names.contains(&name), "{name} was added: {names:?}");
    }
    let p = home.json(&["project", "show", "p", "--json"]);
    assert_eq!(p["engine"], "fake", "{p}");
    assert_eq!(p["full_access"], false, "{p}");
    assert!(p["archived_at"].is_null(), "{p}");
    assert_eq!(p["groups"], json!(["deploy", "more"]), "{p}");
    let sessions = home.json(&["session", "list", "--json"]);
    assert!(
        sessions
            .as_array()
            .unwrap()
            .iter()
            .all(|session| session["engine"] != "command"),
        "{sessions}"
    );
    let target_show = home.json(&["session", "show", &target, "--json"]);
    assert_eq!(target_show["prompts"], json!([]), "{target_show}");
    let fa = home.json(&["project", "show", "fa", "--json"]);
    assert!(fa["instructions"].is_null(), "{fa}");

    // From a person, outside any run, every widening request passes the check.
    let elsewhere = home.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    person
        .call(
            "project.add",
            json!({"name": "elsewhere", "path": elsewhere, "engine": "fake"}),
        )
        .expect("a person adds a project anywhere, on the engine they choose");
    person
        .call("session.new", json!({"project": "p", "engine": "codex"}))
        .expect("a person chooses a session's engine");
    person
        .call("prompt.send", json!({"session": target, "text": "hello"}))
        .expect("a person sends to a full-access session");
    let claim = person
        .call(
            "driver.claim",
            json!({"session": beside, "take_over": true}),
        )
        .expect_err("no exec: not a driver");
    assert_eq!(claim["code"], -32602, "{claim}");
    person
        .call("project.set", json!({"project": "p", "groups": []}))
        .expect("a person takes p out of its group");
    person
        .call(
            "project.set",
            json!({"project": "fa", "instructions": "Be careful."}),
        )
        .expect("a person instructs a full-access project");
    // project.archive takes its selector only, from anyone; `corral project archive` works.
    let archived = person
        .call(
            "project.archive",
            json!({"project": "elsewhere", "engine": "command"}),
        )
        .expect_err("project.archive with project.set's params");
    assert_eq!(archived["code"], -32602, "{archived}");
    assert!(home.json(&["project", "show", "elsewhere", "--json"])["archived_at"].is_null());
    home.ok(&["project", "archive", "elsewhere"]);
    let elsewhere = home.json(&["project", "show", "elsewhere", "--json"]);
    assert!(elsewhere["archived_at"].is_i64(), "{elsewhere}");
    assert_eq!(elsewhere["engine"], "fake", "{elsewhere}");
    home.stop_daemon();
}

/// An agent in a worktree session (the `command` engine: its prompt is the agent's script)
/// cannot reach the person's checkout through a project that shares it, nor another
/// session's worktree or the person's branch.
#[test]
fn an_agent_in_a_worktree_cannot_reach_the_checkout_or_other_sessions_worktrees() {
    let home = GitHome::new();
    let repo = home.repo("web");
    home.add_project("p", &repo, &["--isolation", "worktree", "--setup", "true"]);
    let other = home.new_session(&["p", "--title", "other"]);
    let agent = home.new_session(&["p", "--title", "agent"]);
    let corral = env!("CARGO_BIN_EXE_corral");
    let repo = repo.display();
    let attempts = [
        format!("project add shared {repo} --isolation shared"),
        format!("project add default {repo}"),
        format!("session archive {other}"),
        format!("session archive {other} --discard-changes"),
        format!("session merge {other} --into main"),
        "session new p --branch side".to_string(),
        "config set worktrees.dir /tmp".to_string(),
        "project set p --setup touch-everything".to_string(),
    ];
    let mut script = String::from("set +e; ");
    for attempt in &attempts {
        script.push_str(&format!("echo '== {attempt}'; '{corral}' {attempt} 2>&1; "));
    }
    script.push_str("echo '== end'");
    let output = home.prompt(&agent, &script);
    let sections: Vec<&str> = output.split("== ").skip(1).collect();
    assert_eq!(sections.len(), attempts.len() + 1, "{output}");
    for (attempt, section) in attempts.iter().zip(&sections) {
        assert!(
            section.contains(REFUSAL),
            "{attempt} was not refused: {section}"
        );
    }
    // Nothing changed.
    let projects = home.json(&["project", "list", "--json"]);
    assert_eq!(projects.as_array().map(Vec::len), Some(1), "{projects}");
    assert_eq!(projects[0]["setup"], "true", "{projects}");
    let shown = home.session(&other);
    assert!(shown["archived_at"].is_null(), "{shown}");
    assert_eq!(shown["worktree_state"], "setup", "{shown}");
    assert!(home.worktree_of(&other).is_dir());
    // The person may.
    home.ok(&["session", "archive", &other]);
    home.stop_daemon();
}
