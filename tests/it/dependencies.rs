//! `send --after` and `--after-any` (#35, item 2): a prompt that runs after others, in any
//! session, waits queued until they have ended; one that fails or is cancelled fails what
//! runs after it (and what runs after that), unless `--after-any`; a session whose next
//! prompt waits says what for; bad dependencies are one line and store nothing.

use crate::common;

use common::daemon::DaemonHome;
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

fn sent_id(sent: &str) -> String {
    sent.split_whitespace().next().unwrap().to_string()
}

fn prompt(home: &DaemonHome, session: &str, id: &str) -> Value {
    home.prompt_of(session, id)
}

/// A project of its own for each session, so that they run side by side.
fn sessions(home: &DaemonHome, titles: &[&str]) {
    home.config(&[("engines.fake.path", FAKE)]);
    for title in titles {
        let dir = home.path().join(format!("project-{title}"));
        std::fs::create_dir(&dir).unwrap();
        home.add_project(title, &dir, "fake");
        home.new_session(&[title, "--title", title]);
    }
}

#[test]
fn a_chain_across_three_sessions_runs_in_order() {
    let home = DaemonHome::new();
    sessions(&home, &["a", "b", "c"]);
    let first = sent_id(&home.ok(&["send", "a", "@fake delay=1500\nbuild it"]));
    let second = home.ok(&["send", "b", "--after", &first[..13], "review it"]);
    assert!(second.ends_with("queued\n"), "{second}");
    let second = sent_id(&second);
    let third = sent_id(&home.ok(&["send", "c", "--after", &second, "ship it"]));
    // Both wait, each saying what for, while the first runs.
    let waiting = home.state_of("b");
    assert_eq!(waiting["state"], "queued", "{waiting}");
    assert!(
        waiting["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("the next runs after prompt {first}")),
        "{waiting}"
    );
    let history = home.ok(&["history", "c"]);
    assert!(
        history.contains(&format!("  runs after {second}\n")),
        "{history}"
    );
    let shown = prompt(&home, "c", &third);
    assert_eq!(shown["after"], serde_json::json!([second]), "{shown}");
    assert_eq!(prompt(&home, "b", &second)["status"], "queued");
    assert_eq!(home.wait_prompt(&third), 0, "the last of the chain is done");
    let (a, b, c) = (
        prompt(&home, "a", &first),
        prompt(&home, "b", &second),
        prompt(&home, "c", &third),
    );
    for done in [&a, &b, &c] {
        assert_eq!(done["status"], "done", "{done}");
    }
    assert!(
        b["started_at"].as_i64() >= a["finished_at"].as_i64(),
        "{a} {b}"
    );
    assert!(
        c["started_at"].as_i64() >= b["finished_at"].as_i64(),
        "{b} {c}"
    );
    home.stop_daemon();
}

#[test]
fn a_failed_or_cancelled_dependency_fails_what_runs_after_it_unless_after_any() {
    let home = DaemonHome::new();
    sessions(&home, &["a", "b", "c", "d"]);
    let first = sent_id(&home.ok(&["send", "a", "@fake hang\nbuild it"]));
    let second = sent_id(&home.ok(&["send", "b", "--after", &first, "review it"]));
    // Behind it in its own session: waits for it, then runs as usual.
    let behind = sent_id(&home.ok(&["send", "b", "unrelated"]));
    let third = sent_id(&home.ok(&["send", "c", "--after", &second, "ship it"]));
    let anyway = sent_id(&home.ok(&["send", "d", "--after", &first, "--after-any", "clean up"]));
    assert_eq!(prompt(&home, "d", &anyway)["after_any"], true);
    assert_eq!(prompt(&home, "b", &behind)["status"], "queued");
    home.ok(&["cancel", &first]);
    assert_eq!(home.wait_prompt(&third), 1, "failed in turn");
    let failed = prompt(&home, "b", &second);
    assert_eq!(failed["status"], "failed");
    assert_eq!(
        failed["error"],
        format!("prompt {first} it runs after was cancelled")
    );
    assert_eq!(
        prompt(&home, "c", &third)["error"],
        format!("prompt {second} it runs after failed")
    );
    assert_eq!(home.wait_prompt(&anyway), 0, "--after-any runs it anyway");
    assert_eq!(home.wait_prompt(&behind), 0, "its session goes on");
    // Nothing of the failed ones ever ran.
    assert!(home.runs_of("b", &second).is_empty());
    assert!(home.runs_of("c", &third).is_empty());
    // A queued prompt cancelled fails what runs after it too.
    let hold = sent_id(&home.ok(&["send", "a", "@fake hang\nhold"]));
    let queued = sent_id(&home.ok(&["send", "a", "queued behind"]));
    let after_queued = sent_id(&home.ok(&["send", "d", "--after", &queued, "then"]));
    home.ok(&["cancel", &queued]);
    assert_eq!(home.wait_prompt(&after_queued), 1);
    home.ok(&["cancel", &hold]);
    home.stop_daemon();
}

#[test]
fn a_bad_dependency_is_one_line_and_stores_nothing() {
    let home = DaemonHome::new();
    sessions(&home, &["a"]);
    let failed = sent_id(&home.ok(&["send", "a", "@fake fail=fatal\nbroken"]));
    assert_eq!(home.wait_prompt(&failed), 1);
    let before = home.sql("SELECT count(*) FROM prompts");
    let said = home.fails(&["send", "a", "--after", "nosuch", "x"], 1);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("nosuch"), "{said}");
    let said = home.fails(&["send", "a", "--after", &failed, "x"], 1);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains(&format!("prompt {failed} has already failed")),
        "{said}"
    );
    // Usage: --after-any alone.
    home.fails(&["send", "a", "--after-any", "x"], 2);
    assert_eq!(home.sql("SELECT count(*) FROM prompts"), before);
    // With --after-any it is queued, and runs.
    let anyway = sent_id(&home.ok(&["send", "a", "--after", &failed, "--after-any", "x"]));
    assert_eq!(home.wait_prompt(&anyway), 0);
    home.stop_daemon();
}
