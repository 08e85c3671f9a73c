//! `corral pause` and `corral resume` (#35, item 1): a paused scope — a session, a project, an
//! execution group, everything — starts no new run; what runs goes on unless `--now`, which
//! interrupts it and puts its prompt back at the head of its queue; a prompt waiting for a
//! slot or a retry goes back the same way; pauses outlast a restart; `pause_on_failure`
//! pauses a project when one of its prompts fails; an agent may pause only its own session
//! and never resume.

use crate::common;

use common::agent::{agent_beside_another_project, refused_beyond};
use common::daemon::{wait_until, DaemonHome};
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

fn sent_id(sent: &str) -> String {
    sent.split_whitespace().next().unwrap().to_string()
}

fn prompt(home: &DaemonHome, session: &str, id: &str) -> Value {
    home.prompt_of(session, id)
}

fn status_of(home: &DaemonHome, session: &str, id: &str) -> String {
    prompt(home, session, id)["status"]
        .as_str()
        .unwrap()
        .to_string()
}

fn runs_of(home: &DaemonHome, session: &str, id: &str) -> Vec<Value> {
    home.runs_of(session, id)
}

#[test]
fn a_paused_session_holds_its_queue_across_a_restart_until_resumed() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let paused = home.ok(&["pause", "s"]);
    assert!(
        paused.contains("paused session s (by a person)"),
        "{paused}"
    );
    let first = sent_id(&home.ok(&["send", "s", "first"]));
    let second = sent_id(&home.ok(&["send", "s", "second"]));
    assert_eq!(status_of(&home, "s", &first), "queued");
    assert_eq!(status_of(&home, "s", &second), "queued");
    let shown = home.state_of("s");
    assert_eq!(shown["state"], "paused", "{shown}");
    let reason = shown["reason"].as_str().unwrap();
    assert!(reason.contains("by a person"), "{reason}");
    assert!(reason.contains("2 prompt(s) wait"), "{reason}");
    assert_eq!(
        shown["next_action"],
        format!("corral resume {}", shown["id"].as_str().unwrap())
    );
    let status = home.ok(&["status"]);
    assert!(
        status.contains("paused:   session s (by a person)"),
        "{status}"
    );
    let listed = home.json(&["pause", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["scope"], "session", "{listed}");

    // Stored: a new daemon holds it too.
    home.stop_daemon();
    let listed = home.json(&["pause", "--json"]);
    assert_eq!(
        listed[0]["scope"], "session",
        "read from the store: {listed}"
    );
    home.start_daemon();
    home.ok(&["send", "s", "third"]);
    assert_eq!(status_of(&home, "s", &first), "queued");
    assert!(runs_of(&home, "s", &first).is_empty());

    let resumed = home.ok(&["resume", "s"]);
    assert!(
        resumed.contains("resumed; 1 prompt(s) started"),
        "{resumed}"
    );
    let output = home.run(&["wait", "s", "--timeout", "60s"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let (one, two) = (prompt(&home, "s", &first), prompt(&home, "s", &second));
    assert_eq!(
        (&one["status"], &two["status"]),
        (&"done".into(), &"done".into())
    );
    assert!(
        one["started_at"].as_i64() <= two["started_at"].as_i64(),
        "in order: {one} {two}"
    );
    assert_eq!(home.json(&["pause", "--json"]), serde_json::json!([]));
    let again = home.ok(&["resume", "s"]);
    assert!(again.contains("that was not paused"), "{again}");
    home.stop_daemon();
}

#[test]
fn a_run_goes_on_under_a_pause_and_now_interrupts_it_back_to_the_head() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[("cancel.grace_ms", "500")]);
    let long = sent_id(&home.ok(&["send", "s", "@fake delay=1500\nlong"]));
    let next = sent_id(&home.ok(&["send", "s", "next"]));
    wait_until("the long prompt runs", || {
        runs_of(&home, "s", &long)
            .first()
            .is_some_and(|run| run["pid"].is_i64())
    });
    home.ok(&["pause", "s"]);
    let shown = home.state_of("s");
    assert_eq!(
        shown["state"], "working",
        "a run under way is shown: {shown}"
    );
    wait_until("the long prompt ends", || {
        status_of(&home, "s", &long) == "done"
    });
    assert_eq!(status_of(&home, "s", &next), "queued", "held by the pause");
    assert_eq!(home.state_of("s")["state"], "paused");
    home.ok(&["resume", "s"]);
    wait_until("the next prompt ends", || {
        status_of(&home, "s", &next) == "done"
    });

    // --now: the run is interrupted, its prompt goes back to the head of the queue.
    let hanging = sent_id(&home.ok(&["send", "s", "@fake hang\nforever"]));
    let behind = sent_id(&home.ok(&["send", "s", "behind"]));
    wait_until("the hanging prompt runs", || {
        runs_of(&home, "s", &hanging)
            .first()
            .is_some_and(|run| run["pid"].is_i64())
    });
    let paused = home.ok(&["pause", "s", "--now"]);
    assert!(paused.contains("interrupted"), "{paused}");
    wait_until("the hanging prompt is back in the queue", || {
        status_of(&home, "s", &hanging) == "queued"
    });
    let runs = runs_of(&home, "s", &hanging);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["status"], "interrupted", "{runs:?}");
    assert_eq!(status_of(&home, "s", &behind), "queued");
    let events: Vec<Value> = home
        .ok(&["watch", "s", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let requeued: Vec<&Value> = events
        .iter()
        .filter(|event| event["kind"] == "prompt.requeued" && event["prompt_id"] == hanging)
        .collect();
    assert_eq!(requeued.len(), 1, "{events:#?}");
    let reason = requeued[0]["payload"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("paused: session s"), "{reason}");
    // Back at the head: on resume it runs first (and hangs again, so cancel it).
    home.ok(&["resume", "s"]);
    wait_until("the hanging prompt runs again", || {
        runs_of(&home, "s", &hanging).len() == 2
    });
    assert_eq!(status_of(&home, "s", &behind), "queued");
    home.ok(&["cancel", &hanging]);
    wait_until("the prompt behind ends", || {
        status_of(&home, "s", &behind) == "done"
    });
    home.stop_daemon();
}

#[test]
fn a_prompt_waiting_for_a_slot_or_a_retry_goes_back_to_its_queue() {
    let home = DaemonHome::new();
    home.fake_session(
        FAKE,
        "a",
        &[("slots.fake", "1"), ("retry.rate_limit_delays", "30")],
    );
    home.new_session(&["p", "--title", "b"]);
    let long = sent_id(&home.ok(&["send", "a", "@fake delay=2000\nlong"]));
    wait_until("a runs", || {
        runs_of(&home, "a", &long)
            .first()
            .is_some_and(|run| run["pid"].is_i64())
    });
    let waiting = sent_id(&home.ok(&["send", "b", "waits"]));
    wait_until("b waits for a slot", || {
        home.state_of("b")["state"] == "waiting-for-slot"
    });
    home.ok(&["pause", "b"]);
    wait_until("b's prompt is back in its queue", || {
        status_of(&home, "b", &waiting) == "queued"
    });
    assert_eq!(home.state_of("b")["state"], "paused");
    wait_until("a ends", || status_of(&home, "a", &long) == "done");
    assert_eq!(
        status_of(&home, "b", &waiting),
        "queued",
        "the free slot is not taken"
    );
    assert!(runs_of(&home, "b", &waiting).is_empty());
    home.ok(&["resume", "b"]);
    wait_until("b's prompt ends", || {
        status_of(&home, "b", &waiting) == "done"
    });

    // A retry's delay: the prompt goes back to the queue, and its next run waits for resume.
    let limited = sent_id(&home.ok(&["send", "a", "@fake rate-limit=1\nlimited"]));
    wait_until("a backs off", || {
        home.state_of("a")["state"] == "backing-off"
    });
    home.ok(&["pause", "a"]);
    wait_until("a's prompt is back in its queue", || {
        status_of(&home, "a", &limited) == "queued"
    });
    assert_eq!(runs_of(&home, "a", &limited).len(), 1);
    home.ok(&["resume", "a"]);
    wait_until("a's prompt ends", || {
        status_of(&home, "a", &limited) == "done"
    });
    assert_eq!(
        runs_of(&home, "a", &limited).len(),
        2,
        "one run more after the resume"
    );
    home.stop_daemon();
}

#[test]
fn a_paused_group_or_project_holds_arriving_prompts_and_others_run() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "free", &[]);
    let grouped_dir = home.work().join("g");
    std::fs::create_dir_all(&grouped_dir).unwrap();
    home.ok(&[
        "project",
        "add",
        "grouped",
        grouped_dir.to_str().unwrap(),
        "--engine",
        "fake",
        "--group",
        "nightly",
    ]);
    home.new_session(&["grouped", "--title", "held"]);
    home.ok(&["pause", "--group", "nightly"]);
    let held = sent_id(&home.ok(&["send", "held", "one"]));
    let free = sent_id(&home.ok(&["send", "free", "two"]));
    wait_until("the free session's prompt ends", || {
        status_of(&home, "free", &free) == "done"
    });
    assert_eq!(status_of(&home, "held", &held), "queued");
    let shown = home.state_of("held");
    assert_eq!(shown["state"], "paused", "{shown}");
    assert!(
        shown["reason"].as_str().unwrap().contains("group nightly"),
        "{shown}"
    );
    assert_eq!(shown["next_action"], "corral resume --group nightly");
    // A second pause over it: resuming the group leaves it held by its project's.
    home.ok(&["pause", "--project", "grouped"]);
    let resumed = home.ok(&["resume", "--group", "nightly"]);
    assert!(resumed.contains("0 prompt(s) started"), "{resumed}");
    assert!(
        resumed.contains("still paused:\nproject grouped (by a person)"),
        "{resumed}"
    );
    assert_eq!(status_of(&home, "held", &held), "queued");
    home.ok(&["resume", "--project", "grouped"]);
    wait_until("the held prompt ends", || {
        status_of(&home, "held", &held) == "done"
    });

    // Everything.
    home.ok(&["pause", "--all"]);
    let later = sent_id(&home.ok(&["send", "free", "three"]));
    assert_eq!(status_of(&home, "free", &later), "queued");
    assert_eq!(home.state_of("free")["state"], "paused");
    home.ok(&["resume", "--all"]);
    wait_until("the prompt sent under the pause ends", || {
        status_of(&home, "free", &later) == "done"
    });

    // A group removed while it is paused is still resumed by its name.
    home.ok(&["group", "add", "gone"]);
    home.ok(&["pause", "--group", "gone"]);
    home.ok(&["group", "remove", "gone"]);
    home.fails(&["pause", "--group", "gone"], 1);
    home.ok(&["resume", "--group", "gone"]);
    assert_eq!(home.json(&["pause", "--json"]), serde_json::json!([]));
    home.stop_daemon();
}

#[test]
fn pause_on_failure_pauses_the_project_at_its_first_failure() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    home.ok(&["project", "set", "p", "--pause-on-failure", "true"]);
    let shown = home.ok(&["project", "show", "p"]);
    assert!(
        shown.contains("on failure:   the project pauses"),
        "{shown}"
    );
    let failing = sent_id(&home.ok(&["send", "s", "@fake fail=broken build\nbuild"]));
    let after = sent_id(&home.ok(&["send", "s", "deploy"]));
    wait_until("the failing prompt fails", || {
        status_of(&home, "s", &failing) == "failed"
    });
    assert_eq!(status_of(&home, "s", &after), "queued", "held by the pause");
    let listed = home.json(&["pause", "--json"]);
    assert_eq!(listed[0]["scope"], "project", "{listed}");
    let reason = listed[0]["reason"].as_str().unwrap();
    assert_eq!(
        reason,
        format!("prompt {failing} failed (pause_on_failure)")
    );
    let shown = home.state_of("s");
    assert_eq!(shown["state"], "paused", "{shown}");
    assert_eq!(shown["next_action"], "corral resume --project p");
    home.ok(&["resume", "--project", "p"]);
    wait_until("the held prompt ends", || {
        status_of(&home, "s", &after) == "done"
    });
    home.stop_daemon();
}

#[test]
fn bad_targets_are_one_line_and_change_nothing() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let said = home.fails(&["pause", "--project", "nosuch"], 1);
    assert_eq!(said.lines().count(), 1, "{said}");
    let said = home.fails(&["pause", "--group", "nosuch"], 1);
    assert!(
        said.contains("no execution group is named 'nosuch'"),
        "{said}"
    );
    home.fails(&["pause", "nosuch"], 1);
    home.fails(&["pause", "s", "--all"], 2);
    home.fails(&["pause", "--now"], 2);
    home.fails(&["resume"], 2);
    home.fails(&["resume", "--project", "p", "--group", "g"], 2);
    assert_eq!(home.json(&["pause", "--json"]), serde_json::json!([]));
    let listed = home.ok(&["pause"]);
    assert!(listed.contains("nothing is paused"), "{listed}");
    home.stop_daemon();
}

#[test]
fn an_agent_may_pause_its_own_session_only_and_never_resume() {
    let home = DaemonHome::new();
    let agent = agent_beside_another_project(&home, FAKE);
    home.ok(&["pause", "other"]);

    let corral = env!("CARGO_BIN_EXE_corral");
    let beyond: Vec<String> = vec![
        format!("'{corral}' pause --all"),
        format!("'{corral}' pause --project q"),
        format!("'{corral}' pause other"),
        format!("'{corral}' pause"),
        format!("'{corral}' resume other"),
        format!("'{corral}' resume --all"),
        // Nor change what a person is told, or the command that tells them.
        format!("'{corral}' config set notify.command 'rm -rf ~'"),
        format!("'{corral}' config set notify.events none"),
        format!("'{corral}' project set p --notify none"),
        // Nor give its own session, or its project, variables.
        format!("'{corral}' session new p --env PATH=/tmp/evil"),
        format!("'{corral}' project set p --env LD_PRELOAD=/tmp/evil.so"),
        format!("'{corral}' project set p --unset-env HOME"),
        // Nor read where a person is told (a webhook's URL is its secret), nor every setting.
        format!("'{corral}' config get notify.webhook"),
        format!("'{corral}' config get notify.command"),
        format!("'{corral}' config list"),
    ];
    let own = vec![
        format!("'{corral}' pause agent --json"),
        format!("'{corral}' config get run.timeout_s"),
    ];
    let said = refused_beyond(&home, &agent, &beyond, &own);
    assert!(said[0].contains("by its own agent"), "{said:?}");
    assert!(
        !said[1].contains("not allowed") && !said[1].trim().is_empty(),
        "another setting is the agent's to read: {said:?}"
    );
    // The person's pause of the other session stands; the agent paused only its own.
    let listed = home.json(&["pause", "--json"]);
    let scopes: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|pause| {
            (
                pause["name"].as_str().unwrap_or_default().to_string(),
                pause["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        scopes,
        vec![
            ("other".to_string(), "by a person".to_string()),
            ("agent".to_string(), "by its own agent".to_string()),
        ]
    );
    home.stop_daemon();
}
