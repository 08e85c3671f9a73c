//! The person in the loop (issue 32): under the policy `ask` what the engine asks waits for a
//! person, who answers once from the CLI or over HTTP; an agent can answer nothing; a request
//! nobody answers ends by `approvals.timeout_s`, with its run, or at a restart, always saying
//! why; policies an engine cannot honour are refused in one line.
//!
//! The engine is the fake engine's claude form run as `claude` (`ask=TOOL:TARGET`: it asks
//! through claude's stream-json control protocol, as tests/it/real_engines.rs proves the real
//! claude does).

use crate::common;

use std::process::{Child, Stdio};
use std::sync::mpsc;

use common::agent::{python_rpc, run_as_agent, script_of};
use common::daemon::{lines_of, next_line, wait_until, DaemonHome};
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// A home with project `c` (claude's form of the fake engine, policy `ask`) and project `p`
/// (the fake engine, workspace-write), and a directory outside both.
fn home() -> DaemonHome {
    let home = DaemonHome::new();
    home.config(&[
        ("engines.claude.path", FAKE),
        ("engines.fake.path", FAKE),
        ("cancel.grace_ms", "500"),
        ("daemon.shutdown_grace_ms", "500"),
    ]);
    let claude = home.path().join("c");
    std::fs::create_dir(&claude).unwrap();
    std::fs::create_dir(home.path().join("outside")).unwrap();
    home.add_project("c", &claude, "claude");
    home.ok(&["project", "set", "c", "--policy", "ask"]);
    home.add_project("p", &home.work(), "fake");
    home
}

fn outside(home: &DaemonHome, name: &str) -> String {
    home.path()
        .join("outside")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

/// `watch --follow --json` of a session from its start.
fn follow(home: &DaemonHome, session: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = home
        .corral(&["watch", session, "--after", "0", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    (child, lines)
}

fn next_event(lines: &mpsc::Receiver<String>, what: &str, pick: impl Fn(&Value) -> bool) -> Value {
    match next_line(lines, |line| {
        let event: Value = serde_json::from_str(line).unwrap();
        pick(&event).then_some(event)
    }) {
        Ok((event, _)) => event,
        Err(seen) => panic!("no {what}; saw {seen:#?}"),
    }
}

/// The next `approval.requested`'s approval.
fn asked(lines: &mpsc::Receiver<String>) -> Value {
    next_event(lines, "approval.requested", |event| {
        event["kind"] == "approval.requested"
    })["payload"]["approval"]
        .clone()
}

/// The next prompt end's kind.
fn ended(lines: &mpsc::Receiver<String>) -> String {
    let event = next_event(lines, "a prompt's end", |event| {
        ["prompt.done", "prompt.failed", "prompt.cancelled"]
            .contains(&event["kind"].as_str().unwrap_or(""))
    });
    event["kind"].as_str().unwrap().to_string()
}

fn answered(lines: &mpsc::Receiver<String>) -> Value {
    next_event(lines, "approval.answered", |event| {
        event["kind"] == "approval.answered"
    })["payload"]["approval"]
        .clone()
}

fn end(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn stderr(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Approved: the tool runs; denied: it does not, the engine is told the reason and the prompt
/// says `denied: 1`; a second answer is refused naming the first; bad ids and patterns get one
/// line; `--for-session` answers the next like request without asking.
#[test]
fn a_person_answers_each_request_once() {
    let home = home();
    let session = home.new_session(&["c", "--title", "asks"]);
    let (watch, lines) = follow(&home, &session);
    let approved = outside(&home, "approved.txt");
    home.ok(&["send", "asks", &format!("@fake ask=Write:{approved}\ngo")]);
    let approval = asked(&lines);
    assert_eq!(approval["tool"], "Write");
    assert_eq!(approval["target"], approved.as_str());
    assert_eq!(approval["reason"], "fake engine asks");
    let id = approval["id"].as_str().unwrap().to_string();
    let listed = home.ok(&["approvals"]);
    assert!(listed.contains(&id) && listed.contains("Write"), "{listed}");
    assert!(listed.contains("why: fake engine asks"), "{listed}");
    // The engine waits: nothing is written yet, and the prompt still runs.
    assert!(!std::path::Path::new(&approved).exists());
    let history = home.json(&["history", "asks", "--json"]);
    assert_eq!(history["prompts"][0]["status"], "running", "{history}");

    // Bad answers: one line each, exit 1 (2 for usage), nothing answered.
    for (args, code, says) in [
        (vec!["approve", "no-such-id"], 1, "no approval 'no-such-id'"),
        (
            vec!["approve", &id, "--for-session", "--pattern", "*"],
            1,
            "would match everything",
        ),
        (vec!["deny", &id, "--pattern", "src/*"], 2, "--for-session"),
    ] {
        let output = home.run(&args);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {output:?}");
        let said = stderr(&output);
        assert!(said.contains(says), "{args:?}: {said}");
        if code == 1 {
            assert_eq!(said.lines().count(), 1, "{said}");
        }
    }
    // A unique prefix is enough.
    let said = home.ok(&["approve", &id[..id.len() - 4]]);
    assert_eq!(said, format!("approved {id}: Write {approved}\n"));
    assert_eq!(ended(&lines), "prompt.done");
    assert_eq!(std::fs::read_to_string(&approved).unwrap(), "approved\n");
    let again = home.run(&["deny", &id]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert_eq!(
        stderr(&again),
        format!("corral: approval {id} was approved already by a person\n")
    );

    // Denied, with a reason the engine is told.
    let refused = outside(&home, "refused.txt");
    home.ok(&["send", "asks", &format!("@fake ask=Write:{refused}\ngo")]);
    let approval = asked(&lines);
    let id = approval["id"].as_str().unwrap();
    let said = home.ok(&["deny", id, "--reason", "not in there"]);
    assert!(said.starts_with(&format!("denied {id}")), "{said}");
    assert_eq!(ended(&lines), "prompt.done");
    assert!(!std::path::Path::new(&refused).exists());
    let events = home.ok(&["watch", "asks"]);
    assert!(
        events.contains("a person denied it: not in there"),
        "the engine was told: {events}"
    );
    assert!(
        events.contains(&format!(
            "approval.answered denied Write {refused} by person (not in there)"
        )),
        "{events}"
    );
    let history = home.ok(&["history", "asks"]);
    assert!(history.contains("done · denied: 1"), "{history}");

    // Kept for the session: the like request is answered without asking.
    let kept = outside(&home, "kept-*.txt");
    let first = outside(&home, "kept-1.txt");
    home.ok(&["send", "asks", &format!("@fake ask=Write:{first}\ngo")]);
    let approval = asked(&lines);
    let said = home.ok(&[
        "approve",
        approval["id"].as_str().unwrap(),
        "--for-session",
        "--pattern",
        &kept,
    ]);
    assert!(said.contains(&format!("matching '{kept}'")), "{said}");
    assert_eq!(ended(&lines), "prompt.done");
    let second = outside(&home, "kept-2.txt");
    let elsewhere = outside(&home, "other.txt");
    home.ok(&[
        "send",
        "asks",
        &format!("@fake ask=Write:{second}\n@fake ask=Write:{elsewhere}\ngo"),
    ]);
    let by_rule = answered(&lines);
    assert_eq!(by_rule["target"], second.as_str(), "{by_rule}");
    assert_eq!(by_rule["answered_by"], "session-rule", "{by_rule}");
    assert_eq!(by_rule["status"], "approved", "{by_rule}");
    // The pattern does not cover the other file: that one is asked.
    let approval = asked(&lines);
    assert_eq!(approval["target"], elsewhere.as_str());
    home.ok(&["deny", approval["id"].as_str().unwrap()]);
    assert_eq!(ended(&lines), "prompt.done");
    assert!(std::path::Path::new(&second).exists());
    assert!(!std::path::Path::new(&elsewhere).exists());
    assert_eq!(home.ok(&["approvals"]), "no approval waits for you\n");
    let all = home.json(&["approvals", "--all", "--json"]);
    assert_eq!(all.as_array().unwrap().len(), 5, "{all}");
    end(watch);
    home.stop_daemon();
}

/// An agent answers nothing: `corral approve` and `deny`, a raw `approvals.answer` and the
/// HTTP route, from inside a run, are refused with -32010 and recorded; widening a policy from
/// a run is refused too. The request still waits for the person, who then answers it.
#[test]
fn an_agent_cannot_answer_for_a_person() {
    let home = home();
    home.config(&[("http.listen", "127.0.0.1:0")]);
    home.new_session(&["c", "--title", "asks"]);
    let agent = home.new_session(&["p", "--title", "agent"]);
    let (watch, lines) = follow(&home, "asks");
    let target = outside(&home, "wanted.txt");
    home.ok(&["send", "asks", &format!("@fake ask=Write:{target}\ngo")]);
    let id = asked(&lines)["id"].as_str().unwrap().to_string();
    let web = home.json(&["web", "--json"]);
    let listen = web["listen"].as_str().unwrap().to_string();
    let token = std::fs::read_to_string(home.path().join("http.token")).unwrap();
    let rpc = python_rpc(home.path());
    let rpc = rpc.display();
    let http = format!(
        "python3 -c \"import urllib.request as u; r=u.Request('http://{listen}/api/v1/approvals/{id}/approve', data=b'{{}}', method='POST', headers={{'Authorization':'Bearer {}','Content-Type':'application/json'}});\nimport urllib.error\ntry: print(u.urlopen(r).status)\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode())\"",
        token.trim()
    );
    let corral = env!("CARGO_BIN_EXE_corral");
    let attempts = [
        format!("{corral} approve {id}"),
        format!("{corral} deny {id} --reason mine"),
        format!(r#"python3 '{rpc}' approvals.answer '{{"approval":"{id}","decision":"approve"}}'"#),
        http,
        format!("{corral} project set p --policy ask"),
        format!("{corral} send agent --policy full 'more'"),
    ];
    let (sections, events) = run_as_agent(&home, &agent, &script_of(&attempts));
    let output = sections.join("== ");
    for (section, attempt) in sections.iter().zip(&attempts) {
        assert!(
            section.contains("not allowed from inside a supervised run") || section.contains("403"),
            "not refused: {attempt}\n{section}\n--- all:\n{output}"
        );
    }
    let refused = events
        .iter()
        .filter(|event| event["kind"] == "request.refused")
        .count();
    assert_eq!(refused, attempts.len(), "{output}\n{events:#?}");
    // Still the person's to answer.
    let pending = home.json(&["approvals", "--json"]);
    assert_eq!(pending[0]["id"], id.as_str(), "{pending}");
    assert_eq!(pending[0]["status"], "pending", "{pending}");
    assert!(!std::path::Path::new(&target).exists());
    // The person answers over HTTP.
    let answer = common::browser::request(
        &listen,
        "POST",
        &format!("/api/v1/approvals/{id}/approve"),
        &[("Authorization", &format!("Bearer {}", token.trim()))],
        Some("{}"),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["status"], "approved", "{answer:?}");
    assert_eq!(ended(&lines), "prompt.done");
    assert!(std::path::Path::new(&target).exists());
    let again = common::browser::request(
        &listen,
        "POST",
        &format!("/api/v1/approvals/{id}/deny"),
        &[("Authorization", &format!("Bearer {}", token.trim()))],
        Some("{}"),
    );
    assert_eq!(again.status, 409, "{again:?}");
    assert!(again.body.contains("approved already"), "{again:?}");
    let listed = common::browser::request(
        &listen,
        "GET",
        "/api/v1/approvals?all=true",
        &[("Authorization", &format!("Bearer {}", token.trim()))],
        None,
    );
    assert_eq!(listed.status, 200, "{listed:?}");
    assert_eq!(listed.json()[0]["id"], id.as_str(), "{listed:?}");
    end(watch);
    home.stop_daemon();
}

/// Nobody answers: `approvals.timeout_s` denies it, saying so; a cancelled run's request is
/// denied as its run ended; a daemon killed while one waits leaves it to the next daemon,
/// which denies it saying why. No engine waits for ever.
#[test]
fn an_unanswered_request_ends_saying_why() {
    let home = home();
    home.config(&[("approvals.timeout_s", "1")]);
    home.new_session(&["c", "--title", "asks"]);
    let (watch, lines) = follow(&home, "asks");
    let late = outside(&home, "late.txt");
    home.ok(&["send", "asks", &format!("@fake ask=Write:{late}\ngo")]);
    let approval = answered(&lines);
    assert_eq!(approval["status"], "denied", "{approval}");
    assert_eq!(approval["answered_by"], "timeout", "{approval}");
    assert_eq!(
        approval["answer_reason"],
        "no answer within approvals.timeout_s (1 s)"
    );
    assert_eq!(ended(&lines), "prompt.done");
    assert!(!std::path::Path::new(&late).exists());
    home.ok(&["config", "unset", "approvals.timeout_s"]);

    // Cancelled while it waits.
    home.ok(&["send", "asks", &format!("@fake ask=Write:{late}\ngo")]);
    let id = asked(&lines)["id"].as_str().unwrap().to_string();
    home.ok(&["cancel", "asks"]);
    let approval = answered(&lines);
    assert_eq!(approval["id"], id.as_str());
    assert_eq!(approval["answered_by"], "run-ended", "{approval}");
    assert_eq!(ended(&lines), "prompt.cancelled");
    let late_answer = home.run(&["approve", &id]);
    assert_eq!(late_answer.status.code(), Some(1));
    assert!(
        stderr(&late_answer).contains("was denied already when its run ended"),
        "{late_answer:?}"
    );
    end(watch);

    // The daemon dies while one waits: the next one denies it (and reruns the prompt, whose
    // engine asks again: a run does not outlive its daemon yet).
    home.ok(&["send", "asks", &format!("@fake ask=Write:{late}\ngo")]);
    let mut waiting = Value::Null;
    wait_until("the request waits", || {
        waiting = home.json(&["approvals", "--json"]);
        waiting.as_array().is_some_and(|pending| pending.len() == 1)
    });
    let id = waiting[0]["id"].as_str().unwrap().to_string();
    let pid = home.daemon_pid().unwrap();
    common::daemon::kill(pid, libc::SIGKILL);
    wait_until("the daemon is gone", || !common::daemon::alive(pid));
    // A change reaches the daemon that serves the home now, starting one if none does; its
    // boot denied what the dead one's run left waiting before it answered.
    home.ok(&["config", "set", "cancel.grace_ms", "500"]);
    let all = home.json(&["approvals", "--all", "--json"]);
    let before = all
        .as_array()
        .unwrap()
        .iter()
        .find(|approval| approval["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{id} is kept: {all}"));
    assert_eq!(before["status"], "denied", "{all}");
    assert_eq!(before["answered_by"], "run-ended", "{all}");
    assert!(
        before["answer_reason"]
            .as_str()
            .unwrap()
            .contains("the daemon restarted"),
        "{all}"
    );
    home.ok(&["cancel", "asks"]);
    home.stop_daemon();
}

/// A policy is one of four names; `ask` is refused where the engine cannot ask a person, and
/// `full` where the project has no grant, each in one line.
#[test]
fn policies_an_engine_cannot_honour_are_refused() {
    let home = home();
    let shown = home.ok(&["project", "show", "c"]);
    assert!(shown.contains("policy:       ask"), "{shown}");
    let usage = home.run(&["project", "set", "c", "--policy", "sometimes"]);
    assert_eq!(usage.status.code(), Some(2), "{usage:?}");
    assert!(
        stderr(&usage).contains("unknown policy 'sometimes'"),
        "{usage:?}"
    );
    for (args, says) in [
        (
            vec!["project", "set", "p", "--policy", "ask"],
            "policy 'ask' on fake: the fake engine speaks codex exec, which cannot ask",
        ),
        (
            vec!["session", "new", "p", "--policy", "ask"],
            "policy 'ask' on fake",
        ),
        (
            vec!["session", "new", "c", "--policy", "full"],
            "policy 'full' is a project's grant",
        ),
        (
            vec![
                "project",
                "set",
                "c",
                "--full-access",
                "true",
                "--policy",
                "ask",
            ],
            "full_access and policy disagree",
        ),
    ] {
        let output = home.run(&args);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        let said = stderr(&output);
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(said.contains(says), "{args:?}: {said}");
    }
    home.new_session(&["c", "--title", "s"]);
    let output = home.run(&["send", "s", "hi", "--policy", "full"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(stderr(&output).contains("has none"), "{output:?}");
    // A session of an asking project may run narrower; its prompt asks nothing then.
    let narrow = home.new_session(&["c", "--title", "narrow", "--policy", "workspace-write"]);
    let out = outside(&home, "never.txt");
    let output = home.run(&[
        "send",
        &narrow,
        &format!("@fake ask=Write:{out}\n@fake answer=refused\ngo"),
        "--wait",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert!(stderr(&output).contains("denied: 1"), "{output:?}");
    // Full, granted by the person: no sandbox, nothing asked.
    home.ok(&["project", "set", "c", "--policy", "full"]);
    let shown = home.json(&["project", "show", "c", "--json"]);
    assert_eq!(shown["policy"], "full", "{shown}");
    assert_eq!(shown["full_access"], true, "{shown}");
    // Taking the grant back leaves workspace-write.
    home.ok(&["project", "set", "c", "--full-access", "false"]);
    let shown = home.json(&["project", "show", "c", "--json"]);
    assert_eq!(shown["policy"], "workspace-write", "{shown}");
    assert_eq!(shown["full_access"], false, "{shown}");
    home.stop_daemon();
}

/// A request of a kind corral does not handle is answered at once with an error: the engine
/// never waits on it, and the turn goes on.
#[test]
fn an_unknown_request_is_answered_at_once() {
    let home = home();
    home.new_session(&["c", "--title", "odd"]);
    let output = home.run(&[
        "send",
        "odd",
        "@fake unknown-control\n@fake answer=carried on\ngo",
        "--wait",
    ]);
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "carried on\n");
    let events = home.ok(&["watch", "odd"]);
    assert!(
        events.contains("the engine asked 'fake_unknown', which corral does not handle"),
        "{events}"
    );
    home.stop_daemon();
}

/// The codex app-server asks too (the fake engine's app-server form, `approval=`): a command
/// and a file change wait for a person, and the answer reaches the server as codex's decision.
#[test]
fn the_app_server_asks_a_person() {
    let home = home();
    home.config(&[("engines.codex-app-server.path", FAKE)]);
    let dir = home.path().join("a");
    std::fs::create_dir(&dir).unwrap();
    home.add_project("a", &dir, "codex-app-server");
    home.ok(&["project", "set", "a", "--policy", "ask"]);
    home.new_session(&["a", "--title", "server"]);
    let (watch, lines) = follow(&home, "server");
    let ran = outside(&home, "ran");
    home.ok(&[
        "send",
        "server",
        &format!("@fake approval=command\n@fake run=touch {ran}\ngo"),
    ]);
    let approval = asked(&lines);
    assert_eq!(approval["tool"], "commandExecution", "{approval}");
    assert_eq!(approval["target"], format!("touch {ran}").as_str());
    assert!(!std::path::Path::new(&ran).exists());
    home.ok(&["approve", approval["id"].as_str().unwrap()]);
    assert_eq!(ended(&lines), "prompt.done");
    assert!(std::path::Path::new(&ran).exists());
    let history = home.ok(&["history", "server"]);
    assert!(history.contains("approval: accept"), "{history}");

    home.ok(&["send", "server", "@fake approval=file\ngo"]);
    let approval = asked(&lines);
    assert_eq!(approval["tool"], "fileChange", "{approval}");
    assert!(
        approval["target"]
            .as_str()
            .is_some_and(|target| target.contains("fake-engine.txt")),
        "the item's path is the target: {approval}"
    );
    home.ok(&["deny", approval["id"].as_str().unwrap()]);
    assert_eq!(ended(&lines), "prompt.done");
    let history = home.ok(&["history", "server"]);
    assert!(history.contains("approval: decline"), "{history}");
    // The declined change is a refusal told, as every engine's are.
    assert!(history.contains("done · denied: 1"), "{history}");
    let events = home.ok(&["watch", "server"]);
    assert!(events.contains("tool.denied fileChange"), "{events}");
    end(watch);
    home.stop_daemon();
}

/// `send --wait` on a terminal asks the person there: `y` approves, and the answer comes;
/// without a terminal it says how to answer, and waits for `corral approve`.
#[test]
fn send_wait_asks_at_the_terminal() {
    use std::io::Write;
    let home = home();
    home.new_session(&["c", "--title", "asks"]);
    let first = outside(&home, "first.txt");
    let common::pty::Pair {
        mut master,
        slave,
        output,
    } = common::pty::open(Some((30, 200)));
    let mut child = home
        .corral(&[
            "send",
            "asks",
            &format!("@fake ask=Write:{first}\n@fake answer=Wrote it.\ngo"),
            "--wait",
        ])
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::piped())
        .env("TERM", "xterm")
        .spawn()
        .unwrap();
    drop(slave);
    let mut shown = Vec::new();
    let deadline = std::time::Instant::now() + common::daemon::DEADLINE;
    while !String::from_utf8_lossy(&shown).contains("approve? [y]es") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match output.recv_timeout(left) {
            Ok(bytes) => shown.extend(bytes),
            Err(_) => panic!(
                "never asked; the terminal showed {:?}",
                String::from_utf8_lossy(&shown)
            ),
        }
    }
    let shown_text = String::from_utf8_lossy(&shown).into_owned();
    assert!(
        shown_text.contains(&format!(
            "the agent asks: Write {first} (why: fake engine asks)"
        )),
        "{shown_text}"
    );
    master.write_all(b"y\n").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut answer).unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(answer, "Wrote it.\n");
    assert_eq!(std::fs::read_to_string(&first).unwrap(), "approved\n");

    // No terminal: told how to answer, and the answer may come from elsewhere.
    let second = outside(&home, "second.txt");
    let mut child = home
        .corral(&[
            "send",
            "asks",
            &format!("@fake ask=Write:{second}\n@fake answer=Denied, then.\ngo"),
            "--wait",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stderr.take().unwrap());
    let id = match next_line(&lines, |line| {
        line.strip_prefix("corral: it waits: corral approve ")
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_string)
    }) {
        Ok((id, _)) => id,
        Err(seen) => panic!("not told how to answer: {seen:?}"),
    };
    home.ok(&["deny", &id, "--reason", "not that one"]);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "Denied, then.\n");
    assert!(!std::path::Path::new(&second).exists());
    home.stop_daemon();
}

/// `attach` prints what the engine asks and takes `/approve` or `/deny REASON` on its input.
#[test]
fn attach_answers_with_a_typed_line() {
    use std::io::Write;
    let home = home();
    home.new_session(&["c", "--title", "asks"]);
    let target = outside(&home, "attached.txt");
    let mut child = home
        .corral(&["attach", "asks"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = lines_of(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "@fake ask=Write:{target}").unwrap();
    if let Err(seen) = next_line(&stdout, |line| {
        line.contains("approval.requested Write").then_some(())
    }) {
        panic!("the request was not shown: {seen:?}");
    }
    writeln!(stdin, "/approve").unwrap();
    if let Err(seen) = next_line(&stdout, |line| line.contains("prompt.done").then_some(())) {
        panic!("the prompt did not end: {seen:?}");
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "approved\n");
    home.stop_daemon();
}
