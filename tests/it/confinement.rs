//! An agent is confined to its own session (issue 32, item 5): from inside a run it may read
//! and act on its own session only. Another project's session — its history, its events, its
//! running prompt, its title, its archive — and the lists of every session are refused in one
//! line naming the agent's session, recorded as `request.refused`, and change nothing; by
//! `corral`, by a raw socket client, after `env -i`, after `setsid`, and by a process the agent
//! detached from its run (`setsid -f env -i`), which also ends with the run.
//!
//! The agent is the fake engine's `run=` directive: a shell script it runs inside its run.

use crate::common;

use common::agent::{detached, python_rpc, run_as_agent, script_of};
use common::daemon::{wait_until, DaemonHome};
use serde_json::{json, Value};

const REFUSAL: &str = "not allowed from inside a supervised run (session ";

/// The running prompt of session `other`, if one runs.
fn running(home: &DaemonHome) -> Option<String> {
    let history = home.json(&["history", "other", "--json"]);
    history["prompts"]
        .as_array()?
        .iter()
        .find(|prompt| prompt["status"] == "running")
        .and_then(|prompt| prompt["id"].as_str().map(str::to_string))
}

/// Another project's session, `other`, with a prompt running all along (a project's sessions
/// take turns in a plain directory, so it is not the agent's project): its id and its
/// prompt's.
fn another_session_running(home: &DaemonHome) -> (String, String) {
    let elsewhere = home.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    home.add_project("q", &elsewhere, "fake");
    let other = home.new_session(&["q", "--title", "other"]);
    home.ok(&["send", "other", "@fake delay=60000\nlong work"]);
    let mut prompt = None;
    wait_until("the other session's prompt runs", || {
        prompt = running(home);
        prompt.is_some()
    });
    (other, prompt.unwrap())
}

#[test]
fn an_agent_reaches_its_own_session_only_by_any_route() {
    let home = DaemonHome::new();
    let fake = env!("CARGO_BIN_EXE_corral-fake-engine");
    let agent = home.fake_session(fake, "agent", &[]);
    let (other, other_prompt) = another_session_running(&home);

    let corral = env!("CARGO_BIN_EXE_corral");
    let rpc = python_rpc(home.path());
    let rpc = rpc.display();
    let q = |value: Value| value.to_string().replace('\'', r"'\''");
    let beyond: Vec<String> = vec![
        format!("'{corral}' history other"),
        format!("'{corral}' session show other"),
        format!("'{corral}' session rename other hijacked"),
        format!("'{corral}' cancel {other_prompt}"),
        format!("'{corral}' cancel other"),
        format!("'{corral}' session archive other"),
        format!("'{corral}' watch other"),
        format!("'{corral}' status"),
        format!("'{corral}' session list"),
        format!("'{corral}' send other 'do my bidding'"),
        // Its own session, but after another project's prompt.
        format!("'{corral}' send agent --after {other_prompt} 'chained'"),
        format!(
            "python3 '{rpc}' history '{}'",
            q(json!({ "session": other }))
        ),
        format!(
            "python3 '{rpc}' events.subscribe '{}'",
            q(json!({ "session": other }))
        ),
        format!(
            "python3 '{rpc}' prompt.wait '{}'",
            q(json!({ "prompt": other_prompt }))
        ),
        format!("python3 '{rpc}' project.show '{}'", q(json!({ "project": "q" }))),
        format!(
            "env -i PATH=\"$PATH\" CORRAL_HOME=\"$CORRAL_HOME\" '{corral}' session rename other again"
        ),
        format!("setsid -w '{corral}' cancel other"),
        format!(
            "env -i PATH=\"$PATH\" CORRAL_HOME=\"$CORRAL_HOME\" setsid -w python3 '{rpc}' session.archive '{}'",
            q(json!({ "session": other }))
        ),
        // Detached from the run (its group, its session, its environment, its parent): the
        // shim adopted it, so it is still found by its ancestry.
        detached(
            &format!("'{corral}' cancel other"),
            &home.path().join("escape.fifo"),
        ),
    ];
    // Its own session, its own project: allowed.
    let own: Vec<String> = vec![
        format!("'{corral}' history agent --json"),
        format!("'{corral}' session show agent --json"),
        format!(
            "python3 '{rpc}' project.show '{}'",
            q(json!({ "project": "p" }))
        ),
        format!("'{corral}' session rename agent renamed-by-itself --json"),
    ];
    let (sections, events) = run_as_agent(&home, &agent, &script_of(beyond.iter().chain(&own)));
    let output = sections.join("== ");
    assert_eq!(sections.len(), beyond.len() + own.len() + 1, "{output}");
    for (section, attempt) in sections.iter().zip(&beyond) {
        assert!(
            section.contains(&format!("{REFUSAL}{agent})")),
            "not refused: {attempt}\n{section}\n--- all:\n{output}"
        );
        assert!(
            section.contains("its own session only"),
            "{attempt}\n{section}"
        );
        assert!(!section.contains("ALLOWED"), "{attempt}\n{section}");
    }
    for (section, attempt) in sections[beyond.len()..].iter().zip(&own) {
        assert!(
            !section.contains(REFUSAL),
            "refused: {attempt}\n{section}\n--- all:\n{output}"
        );
    }

    // Each attempt is recorded on the agent's session; nothing of the other session changed.
    let refused = events
        .iter()
        .filter(|event| event["kind"] == "request.refused")
        .count();
    assert_eq!(refused, beyond.len(), "{events:#?}");
    assert_eq!(running(&home).as_deref(), Some(other_prompt.as_str()));
    let shown = home.json(&["session", "show", &other, "--json"]);
    assert_eq!(shown["session"]["title"], "other", "{shown}");
    assert_ne!(shown["session"]["status"], "archived", "{shown}");
    let own_title = home.json(&["session", "show", &agent, "--json"])["session"]["title"].clone();
    assert_eq!(own_title, "renamed-by-itself");
    // A person still reaches everything.
    home.ok(&["history", "other"]);
    home.ok(&["cancel", "other"]);
    home.stop_daemon();
}

/// A client over HTTP (a process that is not `corral`): METHOD PATH [BODY]; the listen address
/// in `$CORRAL_HOME/listen`, the token in `$CORRAL_HOME/http.token` (an agent that may read
/// the home may read it: confinement must not rest on the token).
const HTTP: &str = r#"import json, os, sys, urllib.request, urllib.error
home = os.environ["CORRAL_HOME"]
listen = open(os.path.join(home, "listen")).read().strip()
token = open(os.path.join(home, "http.token")).read().strip()
body = sys.argv[3].encode() if len(sys.argv) > 3 else None
request = urllib.request.Request("http://" + listen + sys.argv[2], data=body, method=sys.argv[1])
request.add_header("Authorization", "Bearer " + token)
if body is not None:
    request.add_header("Content-Type", "application/json")
try:
    with urllib.request.urlopen(request) as answer:
        print("ALLOWED", answer.status)
except urllib.error.HTTPError as error:
    print(error.code, error.read().decode())
"#;

#[test]
fn an_agent_reaches_its_own_session_only_over_http() {
    let home = DaemonHome::new();
    let fake = env!("CARGO_BIN_EXE_corral-fake-engine");
    home.config(&[("http.listen", "127.0.0.1:0")]);
    let agent = home.fake_session(fake, "agent", &[]);
    let (other, other_prompt) = another_session_running(&home);
    let web = home.json(&["web", "--json"]);
    std::fs::write(home.path().join("listen"), web["listen"].as_str().unwrap()).unwrap();
    let http = home.path().join("web_client.py");
    std::fs::write(&http, HTTP).unwrap();
    let http = http.display();
    let beyond = [
        format!("python3 '{http}' GET '/api/v1/history?session={other}'"),
        format!("python3 '{http}' GET /api/v1/sessions/{other}"),
        format!("python3 '{http}' GET /api/v1/sessions/{other}/events"),
        format!("python3 '{http}' GET /api/v1/status"),
        format!("python3 '{http}' GET /api/v1/sessions"),
        format!("python3 '{http}' POST /api/v1/prompts/{other_prompt}/cancel '{{}}'"),
        format!(r#"python3 '{http}' PATCH /api/v1/sessions/{other} '{{"title":"hijacked"}}'"#),
    ];
    let own = [format!(
        "python3 '{http}' GET '/api/v1/history?session={agent}'"
    )];
    let (sections, _) = run_as_agent(&home, &agent, &script_of(beyond.iter().chain(&own)));
    let output = sections.join("== ");
    assert_eq!(sections.len(), beyond.len() + own.len() + 1, "{output}");
    for (section, attempt) in sections.iter().zip(&beyond) {
        assert!(
            section.contains(&format!("{REFUSAL}{agent})")),
            "not refused: {attempt}\n{section}\n--- all:\n{output}"
        );
    }
    for (section, attempt) in sections[beyond.len()..].iter().zip(&own) {
        assert!(section.contains("ALLOWED 200"), "{attempt}\n{section}");
    }
    let shown = home.json(&["session", "show", &other, "--json"]);
    assert_eq!(shown["session"]["title"], "other", "{shown}");
    assert_eq!(running(&home).as_deref(), Some(other_prompt.as_str()));
    home.ok(&["cancel", "other"]);
    home.stop_daemon();
}

/// `agents.scope = project`, a person's grant: a project's agents reach each other's sessions
/// (another project's stay refused), and no agent can grant it.
#[test]
fn a_person_may_let_a_projects_agents_reach_each_other() {
    let home = DaemonHome::new();
    let fake = env!("CARGO_BIN_EXE_corral-fake-engine");
    let agent = home.fake_session(fake, "agent", &[]);
    let sibling = home.new_session(&["p", "--title", "sibling"]);
    another_session_running(&home);
    let corral = env!("CARGO_BIN_EXE_corral");
    let refused_before = format!("'{corral}' history sibling");
    let (sections, _) = run_as_agent(&home, &agent, &script_of([&refused_before]));
    assert!(sections[0].contains(REFUSAL), "{sections:?}");
    // The agent cannot grant itself the scope.
    let grant = format!("'{corral}' project set p --agents-scope project");
    let (sections, _) = run_as_agent(&home, &agent, &script_of([&grant]));
    assert!(
        sections[0].contains("letting a project's agents reach each other's sessions"),
        "{sections:?}"
    );
    // A person grants it.
    home.ok(&["project", "set", "p", "--agents-scope", "project"]);
    let shown = home.ok(&["project", "show", "p"]);
    assert!(
        shown.contains("reach every session of this project"),
        "{shown}"
    );
    let attempts = [
        format!("'{corral}' history sibling --json"),
        format!("'{corral}' history other"),
    ];
    let (sections, _) = run_as_agent(&home, &agent, &script_of(&attempts));
    assert!(
        !sections[0].contains(REFUSAL) && sections[0].contains(&sibling),
        "its project's session is reachable now: {sections:?}"
    );
    assert!(
        sections[1].contains(&format!("{REFUSAL}{agent})")),
        "another project's is not: {sections:?}"
    );
    home.ok(&["cancel", "other"]);
    home.stop_daemon();
}

/// A process the agent detached from its run (`setsid -f env -i`: out of its group, its
/// session and its environment, its parent gone) is still the run's: it ends with the run,
/// killed by the run's shim, where before it lived on under init, out of anyone's sight.
#[test]
fn what_an_agent_detaches_ends_with_its_run() {
    let home = DaemonHome::new();
    let fake = env!("CARGO_BIN_EXE_corral-fake-engine");
    let agent = home.fake_session(fake, "agent", &[]);
    let started = detached(
        "echo \"pid $$\"; exec sleep 600",
        &home.path().join("detach.fifo"),
    );
    // The fifo's reader would wait for the sleep's end: the shell prints its pid, then execs
    // into a sleep that keeps the fifo open, so the agent reads one line only.
    let started = started.replace("&& cat ", "&& head -n 1 ");
    let (sections, _) = run_as_agent(&home, &agent, &script_of([&started]));
    let pid: i32 = sections[0]
        .lines()
        .find_map(|line| line.strip_prefix("pid "))
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("the detached process said its pid: {sections:?}"));
    // The run has ended (`send --wait` returned): the sleep ended before it did.
    let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&command).contains("sleep"),
        "the detached process outlived its run: pid {pid}"
    );
    home.stop_daemon();
}
