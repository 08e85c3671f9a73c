//! An agent inside a supervised run, for the tests of what it may not do
//! (`tests/it/privilege.rs`, `tests/it/confinement.rs`): the fake engine's `run=` directive runs a
//! shell script inside its run; the script's output comes back in the run's `tool` event.

use std::path::Path;

use serde_json::Value;

use super::daemon::DaemonHome;

/// A JSON-RPC client in Python (a process that is not `corral`): METHOD PARAMS [HOME] (the
/// home defaults to `$CORRAL_HOME`). Prints the error's message, or `ALLOWED: ` and the
/// answer.
pub const PYTHON_RPC: &str = r#"import json, os, socket, sys
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

/// Writes [`PYTHON_RPC`] into the home: its path.
pub fn python_rpc(home: &Path) -> std::path::PathBuf {
    let path = home.join("rpc.py");
    std::fs::write(&path, PYTHON_RPC).unwrap();
    path
}

/// Runs `script` as the agent of `session` (the prompt waits for its end): what it printed,
/// split at its `== ` lines, and the session's events.
pub fn run_as_agent(home: &DaemonHome, session: &str, script: &str) -> (Vec<String>, Vec<Value>) {
    let script_path = home.path().join("attempts.sh");
    std::fs::write(&script_path, script).unwrap();
    let prompt = format!("@fake run=sh '{}'\ntry everything", script_path.display());
    home.ok(&["send", session, &prompt, "--wait"]);
    let events: Vec<Value> = home
        .ok(&["watch", session, "--json"])
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
    let sections = output.split("== ").skip(1).map(str::to_string).collect();
    (sections, events)
}

/// The script that runs each of `attempts` after an `== attempt N` line, then `== end`.
pub fn script_of<'a>(attempts: impl IntoIterator<Item = &'a String>) -> String {
    let mut script = String::from("set +e\n");
    for (n, attempt) in attempts.into_iter().enumerate() {
        script.push_str(&format!("echo '== attempt {n}'\n{attempt} 2>&1\n"));
    }
    script.push_str("echo '== end'\n");
    script
}

/// `command` (a shell command line) as an agent that detaches it from its run would start it:
/// `setsid -f` (a double fork into a session and group of its own, its parent gone at once)
/// and `env -i` (no `CORRAL_*` left but the home). The agent reads what it printed through the
/// fifo `fifo` (made here), which also waits for its end.
pub fn detached(command: &str, fifo: &Path) -> String {
    let fifo = fifo.display();
    let command = command.replace('\'', r"'\''");
    format!(
        "rm -f '{fifo}'; mkfifo '{fifo}' && setsid -f env -i PATH=\"$PATH\" CORRAL_HOME=\"$CORRAL_HOME\" sh -c '{{ {command}; }} > \"$0\" 2>&1' '{fifo}' && cat '{fifo}'"
    )
}

/// A home whose session `agent` (project `p`, the fake engine) is the agent of the tests of
/// what it may reach, beside a session `other` of another project `q`: the agent's id.
pub fn agent_beside_another_project(home: &DaemonHome, fake: &str) -> String {
    let agent = home.fake_session(fake, "agent", &[]);
    let other = home.work().join("q");
    std::fs::create_dir_all(&other).unwrap();
    home.add_project("q", &other, "fake");
    home.new_session(&["q", "--title", "other"]);
    agent
}

/// Runs each of `beyond` then each of `own` as the agent of `session`, and checks that each of
/// `beyond` was refused as reaching beyond its run (and recorded once as `request.refused`):
/// what each of `own` printed, in order.
pub fn refused_beyond(
    home: &DaemonHome,
    session: &str,
    beyond: &[String],
    own: &[String],
) -> Vec<String> {
    let (sections, events) = run_as_agent(home, session, &script_of(beyond.iter().chain(own)));
    let output = sections.join("== ");
    assert_eq!(sections.len(), beyond.len() + own.len() + 1, "{output}");
    for (section, attempt) in sections.iter().zip(beyond) {
        assert!(
            section.contains("not allowed from inside a supervised run"),
            "not refused: {attempt}\n{section}\n--- all:\n{output}"
        );
    }
    let refused = events
        .iter()
        .filter(|event| event["kind"] == "request.refused")
        .count();
    assert_eq!(refused, beyond.len(), "{events:#?}");
    sections[beyond.len()..beyond.len() + own.len()].to_vec()
}
