//! A project's and a session's own environment variables (#35, item 4): `project set --env`,
//! `session new --env` and `--env-file` reach the engine child (a session's over its
//! project's, never over corral's own `CORRAL_*`), are shown with secrets masked, and bad
//! names are one line and exit 2.

use crate::common;

use common::daemon::DaemonHome;
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// What the engine's `run=` command printed in the session's last `tool` event.
fn tool_output(home: &DaemonHome, session: &str) -> String {
    home.ok(&["watch", session, "--json"])
        .lines()
        .rev()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["kind"] == "tool")
        .find_map(|event| {
            // As the engine names it: codex exec's item, or the app-server's.
            let detail = &event["payload"]["detail"];
            detail["aggregated_output"]
                .as_str()
                .or(detail["aggregatedOutput"].as_str())
                .map(str::to_string)
        })
        .expect("the engine's command ran")
}

#[test]
fn a_projects_and_a_sessions_variables_reach_the_engine_and_secrets_are_masked() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "plain", &[]);
    home.ok(&[
        "project",
        "set",
        "p",
        "--env",
        "SHARED=project",
        "--env",
        "ONLY_PROJECT=p",
        "--env",
        "API_TOKEN=tok-123",
    ]);
    let file = home.path().join("session.env");
    std::fs::write(
        &file,
        "# the session's\nexport FROM_FILE='a file'\nSHARED=file\n",
    )
    .unwrap();
    home.ok(&[
        "session",
        "new",
        "p",
        "--title",
        "s",
        "--env-file",
        file.to_str().unwrap(),
        "--env",
        "SHARED=session",
    ]);
    let script = "echo SHARED=$SHARED ONLY_PROJECT=$ONLY_PROJECT FROM_FILE=$FROM_FILE \
                  API_TOKEN=$API_TOKEN HOME_IS=$CORRAL_HOME";
    home.ok(&[
        "send",
        "s",
        &format!("@fake run={script}\nshow me"),
        "--wait",
    ]);
    let printed = tool_output(&home, "s");
    assert!(
        printed.contains(&format!(
            "SHARED=session ONLY_PROJECT=p FROM_FILE=a file API_TOKEN=tok-123 HOME_IS={}",
            home.path().display()
        )),
        "{printed}"
    );
    // A session without its own gets the project's.
    home.ok(&[
        "send",
        "plain",
        &format!("@fake run={script}\nshow me"),
        "--wait",
    ]);
    let printed = tool_output(&home, "plain");
    assert!(
        printed.contains("SHARED=project ONLY_PROJECT=p FROM_FILE= "),
        "{printed}"
    );

    // Shown, the secret masked, in words and in JSON.
    let shown = home.ok(&["project", "show", "p"]);
    assert!(
        shown.contains("env:          API_TOKEN=********, ONLY_PROJECT=p, SHARED=project"),
        "{shown}"
    );
    let json = home.json(&["project", "show", "p", "--json"]);
    assert_eq!(json["env"]["API_TOKEN"], "********", "{json}");
    assert!(!json.to_string().contains("tok-123"), "{json}");
    let session = home.json(&["session", "show", "s", "--json"]);
    assert_eq!(session["session"]["env"]["SHARED"], "session", "{session}");
    assert_eq!(
        session["session"]["env"]["FROM_FILE"], "a file",
        "{session}"
    );

    // Removed: gone from the next run.
    home.ok(&["project", "set", "p", "--unset-env", "ONLY_PROJECT"]);
    home.ok(&[
        "send",
        "plain",
        &format!("@fake run={script}\nagain"),
        "--wait",
    ]);
    let printed = tool_output(&home, "plain");
    assert!(printed.contains("ONLY_PROJECT= "), "{printed}");
    home.stop_daemon();
}

/// The codex app-server child is its project's, started once: the project's variables reach
/// it, a change of them reaches its next child (the idle one is replaced), and a session of
/// such a project cannot have variables of its own (its child has only the project's).
#[test]
fn an_app_servers_child_gets_its_projects_variables_as_they_change() {
    let home = DaemonHome::new();
    home.config(&[("engines.codex-app-server.path", FAKE)]);
    let dir = home.path().join("app");
    std::fs::create_dir(&dir).unwrap();
    home.add_project("app", &dir, "codex-app-server");
    home.ok(&["project", "set", "app", "--env", "STAGE=one"]);
    home.new_session(&["app", "--title", "a"]);
    let show = "@fake run=echo STAGE=$STAGE\nshow me";
    home.ok(&["send", "a", show, "--wait"]);
    assert!(tool_output(&home, "a").contains("STAGE=one"));
    home.ok(&["project", "set", "app", "--env", "STAGE=two"]);
    home.ok(&["send", "a", show, "--wait"]);
    let printed = tool_output(&home, "a");
    assert!(printed.contains("STAGE=two"), "{printed}");
    let said = home.fails(&["session", "new", "app", "--env", "MINE=1"], 1);
    assert!(said.contains("runs in its project's app-server"), "{said}");
    home.stop_daemon();
}

#[test]
fn bad_names_and_files_are_one_line_and_store_nothing() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    for bad in [
        "CORRAL_HOME=/elsewhere",
        "corral_run_id=x",
        "1ABC=x",
        "A-B=x",
        "NOEQUALS",
    ] {
        // clap's usage error: its one line, then its pointer to --help.
        for args in [["project", "set", "p"], ["session", "new", "p"]] {
            let said = home.fails(&[&args[..], &["--env", bad]].concat(), 2);
            let first = said.lines().next().unwrap_or_default();
            assert!(first.starts_with("error: invalid value"), "{bad}: {said}");
        }
    }
    let said = home.fails(&["project", "set", "p", "--env", "CORRAL_SESSION_ID=x"], 2);
    assert!(said.contains("is corral's own"), "{said}");
    let file = home.path().join("bad.env");
    std::fs::write(&file, "GOOD=1\nCORRAL_TRACE_ID=x\n").unwrap();
    let said = home.fails(
        &["project", "set", "p", "--env-file", file.to_str().unwrap()],
        2,
    );
    assert!(
        said.contains("line 2: CORRAL_TRACE_ID is corral's own"),
        "{said}"
    );
    let missing = home.path().join("missing.env");
    let said = home.fails(
        &[
            "project",
            "set",
            "p",
            "--env-file",
            missing.to_str().unwrap(),
        ],
        1,
    );
    assert!(said.contains("cannot read"), "{said}");
    let json = home.json(&["project", "show", "p", "--json"]);
    assert!(json.get("env").is_none(), "nothing stored: {json}");
    let sessions = home.json(&["session", "list", "--json"]);
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions}");
    home.stop_daemon();
}
