//! Every method's params are type-checked the same way: a value of the wrong type is
//! -32602 (never read as absent), positional params are refused, a selector is not echoed
//! whole in an error, and a title above its documented limit is refused — each one error,
//! nothing stored lost, the daemon still serving.

use crate::common;

use serde_json::{json, Value};

use common::daemon::DaemonHome;
use common::rpc::Rpc;

const INVALID_PARAMS: i64 = -32602;

fn code(answer: &Result<Value, Value>) -> i64 {
    answer
        .as_ref()
        .err()
        .and_then(|error| error["code"].as_i64())
        .unwrap_or_else(|| panic!("an error: {answer:?}"))
}

#[test]
fn params_of_the_wrong_type_are_refused_and_change_nothing() {
    let home = DaemonHome::new();
    home.ok(&["config", "set", "run.timeout_s", "77"]);
    let mut rpc = Rpc::connect(home.path());

    // A number where a string goes: today's bug erased the setting.
    let set = rpc.call(
        "settings.set",
        json!({ "name": "run.timeout_s", "value": 12 }),
    );
    assert_eq!(code(&set), INVALID_PARAMS, "{set:?}");
    let got = rpc
        .call("settings.get", json!({ "name": "run.timeout_s" }))
        .unwrap();
    assert_eq!(got["value"], "77", "the setting is kept: {got}");

    for (method, params) in [
        ("settings.get", json!({ "name": 7 })),
        ("project.list", json!({ "all": "yes" })),
        ("session.list", json!({ "project": ["p"] })),
        ("group.set", json!({ "name": "g", "locking": "no" })),
        ("session.show", json!({ "session": { "id": "x" } })),
        ("project.add", json!({ "name": "q", "path": 5 })),
        // Positional params, for any method.
        ("settings.get", json!(["run.timeout_s"])),
        ("status", json!([])),
    ] {
        let answer = rpc.call(method, params.clone());
        assert_eq!(
            code(&answer),
            INVALID_PARAMS,
            "{method} {params}: {answer:?}"
        );
        let message = answer.unwrap_err()["message"]
            .as_str()
            .unwrap_or("")
            .to_string();
        assert!(
            !message.is_empty() && !message.contains('\n'),
            "{message:?}"
        );
    }
    // Params that are not even structured make the request invalid (JSON-RPC 2.0).
    // (-32600, an invalid request, as JSON-RPC 2.0 says; a daemon that reads the request
    // first and checks params after says -32602.)
    let answer = rpc.call("status", json!("everything"));
    assert!(
        [-32600, INVALID_PARAMS].contains(&code(&answer)),
        "{answer:?}"
    );
    // The daemon still serves, and nothing was created.
    let projects = rpc.call("project.list", json!({})).unwrap();
    assert_eq!(projects, json!([]), "{projects}");
    home.stop_daemon();
}

#[test]
fn a_huge_selector_is_not_echoed_and_a_huge_title_is_refused() {
    let home = DaemonHome::new();
    let work = home.work();
    home.ok(&["project", "add", "p", work.to_str().unwrap()]);
    let mut rpc = Rpc::connect(home.path());
    let selector = "s".repeat(100 * 1024);
    let answer = rpc.call("session.show", json!({ "session": selector }));
    let message = answer.unwrap_err()["message"].as_str().unwrap().to_string();
    assert!(message.len() < 400, "{} bytes echoed", message.len());
    assert!(message.contains("…"), "{message}");

    let title = "t".repeat(900 * 1024);
    let answer = rpc.call("session.new", json!({ "project": "p", "title": title }));
    assert_eq!(code(&answer), INVALID_PARAMS, "{answer:?}");
    let message = answer.unwrap_err()["message"].as_str().unwrap().to_string();
    assert!(message.contains("at most 500"), "{message}");
    let sessions = rpc.call("session.list", json!({})).unwrap();
    assert_eq!(sessions, json!([]), "nothing stored");
    // At the limit is fine.
    let fine = rpc
        .call(
            "session.new",
            json!({ "project": "p", "title": "t".repeat(500) }),
        )
        .unwrap();
    assert_eq!(fine["title"].as_str().map(str::len), Some(500));
    let renamed = rpc.call(
        "session.rename",
        json!({ "session": fine["id"], "title": "u".repeat(501) }),
    );
    assert_eq!(code(&renamed), INVALID_PARAMS, "{renamed:?}");
    home.stop_daemon();
}

#[test]
fn the_shutdown_method_drains_like_sigterm_and_a_second_ask_stops_at_once() {
    let home = DaemonHome::new();
    let session = home.fake_session(
        env!("CARGO_BIN_EXE_corral-fake-engine"),
        "long",
        &[
            ("daemon.shutdown_grace_ms", "60000"),
            ("cancel.grace_ms", "300"),
        ],
    );
    home.ok(&["send", &session, "@fake hang\nrun for ever"]);
    let daemon = home.daemon_pid().unwrap();
    let mut rpc = Rpc::connect(home.path());
    assert_eq!(rpc.call("shutdown", json!({})).unwrap()["stopping"], true);
    // Draining: the daemon still answers, says so, and takes no new prompt.
    let status = rpc.call("status", json!({})).unwrap();
    assert_eq!(status["daemon"]["shutting_down"], true, "{status}");
    let refused = rpc.call("prompt.send", json!({ "session": session, "text": "more" }));
    assert_eq!(code(&refused), -32006, "{refused:?}");
    assert!(common::daemon::alive(daemon), "the grace has not run out");
    // A second ask ends the grace: the hanging run is ended and requeued, the daemon exits.
    rpc.call("shutdown", json!({})).unwrap();
    common::daemon::wait_until("the daemon exits", || !common::daemon::alive(daemon));
    let status = home.store().value("SELECT status FROM prompts");
    assert_eq!(status, "queued", "requeued, not lost");
}
