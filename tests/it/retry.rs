//! `corral retry` and `corral prompt edit` (#35, item 2): a failed or cancelled prompt runs
//! again in place (same id, first in its session's queue, its runs kept, optionally with a new
//! text); a queued prompt's text is changed before it starts; anything else is refused in one
//! line, changing nothing.

use crate::common;

use common::daemon::{wait_until, DaemonHome};
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

fn sent_id(sent: &str) -> String {
    sent.split_whitespace().next().unwrap().to_string()
}

fn prompt(home: &DaemonHome, id: &str) -> Value {
    home.prompt_of("s", id)
}

fn runs(home: &DaemonHome, id: &str) -> Vec<Value> {
    home.runs_of("s", id)
}

#[test]
fn a_failed_prompt_runs_again_in_place_first_in_its_queue() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let failed = sent_id(&home.ok(&["send", "s", "@fake fail=flaky\nfirst"]));
    wait_until("it fails", || prompt(&home, &failed)["status"] == "failed");
    // Something runs on the session now, and something waits behind it.
    let holding = sent_id(&home.ok(&["send", "s", "@fake hang\nhold"]));
    wait_until("it runs", || prompt(&home, &holding)["status"] == "running");
    let behind = sent_id(&home.ok(&["send", "s", "behind"]));
    let said = home.ok(&[
        "retry",
        &failed,
        "--text",
        "@fake answer=fixed\nfirst, again",
    ]);
    assert!(said.contains(&format!("{failed} queued again")), "{said}");
    let again = prompt(&home, &failed);
    assert_eq!(again["status"], "queued");
    assert_eq!(again["text"], "@fake answer=fixed\nfirst, again");
    assert!(again["error"].is_null(), "{again}");
    home.ok(&["cancel", &holding]);
    wait_until("the retried prompt is answered", || {
        prompt(&home, &failed)["status"] == "done"
    });
    assert_eq!(prompt(&home, &failed)["answer"], "fixed");
    wait_until("the one behind is done", || {
        prompt(&home, &behind)["status"] == "done"
    });
    // First in its queue: it started before the prompt sent before its retry.
    let (first, second) = (prompt(&home, &failed), prompt(&home, &behind));
    assert!(
        first["started_at"].as_i64() < second["started_at"].as_i64(),
        "{first} {second}"
    );
    let kept = runs(&home, &failed);
    assert_eq!(kept.len(), 2, "the failed run is kept: {kept:?}");
    assert_eq!(kept[0]["status"], "failed");
    assert_eq!(kept[1]["status"], "succeeded");
    // A cancelled one too, as it was.
    let cancelled = sent_id(&home.ok(&["send", "s", "@fake hang\nagain"]));
    wait_until("it runs", || {
        prompt(&home, &cancelled)["status"] == "running"
    });
    home.ok(&["cancel", &cancelled]);
    wait_until("it is cancelled", || {
        prompt(&home, &cancelled)["status"] == "cancelled"
    });
    home.ok(&["retry", &cancelled]);
    wait_until("it runs again", || runs(&home, &cancelled).len() == 2);
    home.ok(&["cancel", &cancelled]);
    home.stop_daemon();
}

#[test]
fn a_queued_prompt_is_edited_and_others_are_refused() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let holding = sent_id(&home.ok(&["send", "s", "@fake hang\nhold"]));
    wait_until("it runs", || prompt(&home, &holding)["status"] == "running");
    let queued = sent_id(&home.ok(&["send", "s", "tpyo"]));
    home.ok(&["prompt", "edit", &queued, "@fake answer=typo fixed\ntypo"]);
    assert_eq!(
        prompt(&home, &queued)["text"],
        "@fake answer=typo fixed\ntypo"
    );
    // Running: refused, both ways.
    let said = home.fails(&["prompt", "edit", &holding, "changed"], 1);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("is running: only a queued prompt is edited"),
        "{said}"
    );
    let said = home.fails(&["retry", &holding], 1);
    assert!(
        said.contains("is running: only a failed or cancelled prompt"),
        "{said}"
    );
    home.ok(&["cancel", &holding]);
    wait_until("the edited prompt is answered", || {
        prompt(&home, &queued)["status"] == "done"
    });
    assert_eq!(prompt(&home, &queued)["answer"], "typo fixed");
    // Answered: refused.
    let said = home.fails(&["retry", &queued], 1);
    assert!(said.contains("was answered: send it again"), "{said}");
    let said = home.fails(&["prompt", "edit", &queued, "late"], 1);
    assert!(said.contains("is done"), "{said}");
    home.fails(&["retry", "nosuch"], 1);
    home.fails(&["retry"], 2);
    assert_eq!(
        prompt(&home, &queued)["text"],
        "@fake answer=typo fixed\ntypo"
    );
    home.stop_daemon();
}

/// An agent may run its own session's prompts again as they were, but not put its words in
/// place of a person's that carry a policy wider than its session's: the person granted that
/// policy to their words.
#[test]
fn an_agent_may_not_rewrite_a_prompt_sent_under_a_wider_policy() {
    use common::agent::{run_as_agent, script_of};
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    home.new_session(&["p", "--title", "agent", "--policy", "read-only"]);
    let granted = sent_id(&home.ok(&[
        "send",
        "agent",
        "--policy",
        "workspace-write",
        "@fake fail=boom\nthe person's words",
    ]));
    assert_eq!(
        home.run(&["wait", &granted, "--timeout", "60s"])
            .status
            .code(),
        Some(1)
    );
    let corral = env!("CARGO_BIN_EXE_corral");
    let beyond: Vec<String> = vec![
        format!("'{corral}' retry {granted} --text 'the agent s words'"),
        format!("'{corral}' prompt edit {granted} 'the agent s words'"),
    ];
    let (sections, events) = run_as_agent(&home, "agent", &script_of(&beyond));
    let output = sections.join("== ");
    for (section, attempt) in sections.iter().zip(&beyond) {
        assert!(
            section.contains("not allowed from inside a supervised run")
                && section.contains("rewriting a prompt sent under policy workspace-write"),
            "not refused: {attempt}\n{section}\n--- all:\n{output}"
        );
    }
    let refused = events
        .iter()
        .filter(|event| event["kind"] == "request.refused")
        .count();
    assert_eq!(refused, beyond.len(), "{events:#?}");
    let kept = home.prompt_of("agent", &granted);
    assert_eq!(kept["text"], "@fake fail=boom\nthe person's words");
    assert_eq!(kept["status"], "failed");
}
