//! `send --at TIME` and `--in DURATION` (#35, item 3): a prompt for later waits queued with
//! its due time (shown in the queue and the session's state), holds its session's later
//! prompts, starts when it is due (the daemon's timer, not a poll), outlasts a restart, and a
//! time that has passed or does not parse is a usage error that stores nothing.

use crate::common;

use common::daemon::DaemonHome;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

fn sent_id(sent: &str) -> String {
    sent.split_whitespace().next().unwrap().to_string()
}

#[test]
fn a_prompt_for_later_waits_with_its_due_time_and_starts_then() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let sent = home.ok(&["send", "s", "--in", "2s", "the nightly triage"]);
    assert!(sent.contains(" queued (due 20"), "{sent}");
    let later = sent_id(&sent);
    // Behind it in its session: a session is one conversation, in order.
    let behind = sent_id(&home.ok(&["send", "s", "and then this"]));
    let queued = home.prompt_of("s", &later);
    assert_eq!(queued["status"], "queued", "{queued}");
    let due_at = queued["due_at"].as_i64().expect("its due time is shown");
    let history = home.ok(&["history", "s"]);
    assert!(
        history.contains("\n  due 20") && history.contains(" UTC\n"),
        "{history}"
    );
    let shown = home.state_of("s");
    assert_eq!(shown["state"], "queued", "{shown}");
    assert!(
        shown["reason"]
            .as_str()
            .unwrap()
            .contains("the next is due at"),
        "{shown}"
    );
    assert_eq!(home.wait_prompt(&behind), 0);
    let (first, second) = (home.prompt_of("s", &later), home.prompt_of("s", &behind));
    assert_eq!(first["status"], "done", "{first}");
    assert!(first["started_at"].as_i64().unwrap() >= due_at, "{first}");
    assert!(
        second["started_at"].as_i64() >= first["finished_at"].as_i64(),
        "{first} {second}"
    );
    home.stop_daemon();
}

#[test]
fn a_prompt_for_later_outlasts_a_restart() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let later = sent_id(&home.ok(&["send", "s", "--in", "3s", "after the restart"]));
    home.stop_daemon();
    home.start_daemon();
    // The new daemon's timer was armed from the store: nothing sends to wake it.
    assert_eq!(home.wait_prompt(&later), 0);
    let done = home.prompt_of("s", &later);
    assert!(
        done["started_at"].as_i64() >= done["due_at"].as_i64(),
        "{done}"
    );
    home.stop_daemon();
}

#[test]
fn a_time_past_or_unreadable_is_a_usage_error_and_stores_nothing() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let before = home.sql("SELECT count(*) FROM prompts");
    let said = home.fails(&["send", "s", "--at", "2020-01-01T00:00:00Z", "x"], 2);
    assert!(said.contains("is in the past"), "{said}");
    let said = home.fails(&["send", "s", "--at", "soon", "x"], 2);
    assert!(said.contains("'soon' is not a time"), "{said}");
    let said = home.fails(&["send", "s", "--in", "5d", "x"], 2);
    assert!(said.contains("the unit is one of"), "{said}");
    home.fails(&["send", "s", "--in", "5m", "--at", "09:00", "x"], 2);
    assert_eq!(home.sql("SELECT count(*) FROM prompts"), before);
    home.stop_daemon();
}
