//! Privilege stays with people: an agent inside a supervised run cannot widen its own rights.
//!
//! The agent is the fake engine's `run=` directive: a shell script it runs inside its run
//! tries every widening request — through `corral`, directly on the socket, after `env -i`
//! (no `CORRAL_*` left), after `setsid` (a session and group of its own), and both — and
//! each is refused with one line naming the session, recorded as a `request.refused` event,
//! and changes nothing. Narrowing (full access off) is allowed; the daemon keeps serving.

mod common;

use std::path::Path;

use common::daemon::DaemonHome;

const REFUSAL: &str = "not allowed from inside a supervised run (session ";

/// A JSON-RPC client in Python (a process that is not `corral`): METHOD PARAMS [HOME].
const RPC: &str = r#"import json, os, socket, sys
home = sys.argv[3] if len(sys.argv) > 3 else os.environ["CORRAL_HOME"]
s = socket.socket(socket.AF_UNIX)
s.connect(os.path.join(home, "corral.sock"))
f = s.makefile("rw")
def call(i, method, params):
    f.write(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n")
    f.flush()
    while True:
        answer = json.loads(f.readline())
        if answer.get("id") == i:
            return answer
call(1, "initialize", {"protocol": 1})
answer = call(2, sys.argv[1], json.loads(sys.argv[2]))
print(answer.get("error", {}).get("message", "ALLOWED: " + json.dumps(answer)))
"#;

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
    let rpc = home.path().join("rpc.py");
    std::fs::write(&rpc, RPC).unwrap();
    let (script, widening) = attempts(home.path(), &rpc);
    let script_path = home.path().join("attempts.sh");
    std::fs::write(&script_path, script).unwrap();

    let prompt = format!("@fake run=sh '{}'\ntry everything", script_path.display());
    home.ok(&["send", &session, &prompt, "--wait"]);

    // What the agent saw: one refusal line per widening attempt, naming the session.
    let events: Vec<serde_json::Value> = home
        .ok(&["watch", &session, "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let output = events
        .iter()
        .rev()
        .filter(|event| event["kind"] == "tool")
        .find_map(|event| event["payload"]["detail"]["aggregated_output"].as_str())
        .expect("the agent's command ran")
        .to_string();
    let sections: Vec<&str> = output.split("== ").skip(1).collect();
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
