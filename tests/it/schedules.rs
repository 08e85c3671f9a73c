//! Schedules (#35, item 3): `schedule add SESSION|PROJECT 'CRON' TEXT` sends TEXT at each time
//! the cron expression names — to the session, or to a new session of the project — and
//! records each firing: what it sent, or why it skipped (paused, the previous firing still
//! running, missed while no daemon ran). The daemon's schedules run on a clock the tests set
//! (`CORRAL_TEST_CLOCK`), so no test waits for the wall clock's minutes.

use crate::common;

use common::agent::{agent_beside_another_project, refused_beyond};
use common::daemon::{succeeded, wait_until, DaemonHome};
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// Restarts the home's daemon in UTC with its schedules' clock at `clock` (RFC 3339).
fn daemon_at(home: &DaemonHome, clock: &str) {
    home.stop_daemon();
    let args = ["daemon", "--detach"];
    let output = home
        .corral(&args)
        .env("TZ", "UTC")
        .env("CORRAL_TEST_CLOCK", clock)
        .output()
        .unwrap();
    succeeded(&args, &output);
}

/// A time (RFC 3339) in ms.
fn ms(time: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(time)
        .unwrap()
        .timestamp_millis()
}

fn shown(home: &DaemonHome, schedule: &str) -> Value {
    home.json(&["schedule", "show", schedule, "--json"])
}

fn firings(home: &DaemonHome, schedule: &str) -> Vec<Value> {
    shown(home, schedule)["firings"].as_array().unwrap().clone()
}

#[test]
fn a_schedule_fires_at_its_cron_time_and_records_what_it_sent() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    // A Monday, two seconds before nine.
    daemon_at(&home, "2026-12-07T08:59:58Z");
    let added = home.json(&[
        "schedule",
        "add",
        "s",
        "0 9 * * 1-5",
        "triage the new issues",
        "--json",
    ]);
    let id = added["id"].as_str().unwrap().to_string();
    assert_eq!(added["next_at"], ms("2026-12-07T09:00:00Z"), "{added}");
    assert!(added["session_id"].is_string(), "{added}");

    wait_until("the firing is sent", || {
        firings(&home, &id)
            .first()
            .is_some_and(|firing| firing["outcome"] == "sent")
    });
    let firing = &firings(&home, &id)[0];
    assert_eq!(firing["due_at"], ms("2026-12-07T09:00:00Z"), "{firing}");
    let prompt = firing["prompt_id"].as_str().unwrap();
    assert_eq!(home.wait_prompt(prompt), 0);
    assert_eq!(home.prompt_of("s", prompt)["text"], "triage the new issues");
    // The next weekday at nine.
    assert_eq!(
        shown(&home, &id)["schedule"]["next_at"],
        ms("2026-12-08T09:00:00Z")
    );
    let listed = home.ok(&["schedule", "list"]);
    assert!(listed.contains("'0 9 * * 1-5'  to session s"), "{listed}");
    assert!(
        listed.contains(&format!("sent prompt {prompt}")),
        "{listed}"
    );

    // Paused, it has no next time; resumed, its next one from now.
    let paused = home.json(&["schedule", "pause", &id[..13], "--json"]);
    assert_eq!(paused["paused"], true, "{paused}");
    assert!(paused["next_at"].is_null(), "{paused}");
    assert!(home.ok(&["schedule", "list"]).contains("  paused"));
    let resumed = home.json(&["schedule", "resume", &id, "--json"]);
    assert_eq!(resumed["next_at"], ms("2026-12-08T09:00:00Z"), "{resumed}");

    home.ok(&["schedule", "remove", &id]);
    assert_eq!(
        home.json(&["schedule", "list", "--json"]),
        serde_json::json!([])
    );
    // What it sent stays.
    assert_eq!(home.prompt_of("s", prompt)["status"], "done");
    home.stop_daemon();
}

#[test]
fn a_project_schedule_opens_a_session_per_firing_and_skips_what_it_should() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[("notify.desktop", "off")]);
    home.ok(&[
        "config",
        "set",
        "notify.command",
        r#"{ cat; echo; } >> "$CORRAL_HOME/told.jsonl""#,
    ]);
    home.ok(&[
        "config",
        "set",
        "notify.events",
        "schedule.fired,schedule.skipped",
    ]);
    daemon_at(&home, "2026-12-07T08:59:58Z");
    // Every second; each prompt takes longer than that.
    let added = home.json(&[
        "schedule",
        "add",
        "p",
        "* * * * * *",
        "@fake delay=2500\nnightly triage",
        "--json",
    ]);
    let id = added["id"].as_str().unwrap().to_string();
    assert!(added["session_id"].is_null(), "a project's: {added}");
    let outcomes = |home: &DaemonHome| -> Vec<(String, String)> {
        firings(home, &id)
            .iter()
            .map(|firing| {
                (
                    firing["outcome"].as_str().unwrap().to_string(),
                    firing["reason"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    };
    wait_until("a firing is sent and one skipped behind it", || {
        let seen = outcomes(&home);
        seen.iter().any(|(outcome, _)| outcome == "sent")
            && seen
                .iter()
                .any(|(outcome, reason)| outcome == "skipped" && reason.contains("still running"))
    });
    home.ok(&["pause", "--project", "p"]);
    wait_until("a firing is skipped for the pause", || {
        outcomes(&home)
            .iter()
            .any(|(outcome, reason)| outcome == "skipped" && reason.contains("paused: project p"))
    });
    home.ok(&["schedule", "pause", &id]);
    home.ok(&["resume", "--project", "p"]);

    // One new session per firing sent, titled by its text and time.
    let sent: Vec<Value> = firings(&home, &id)
        .into_iter()
        .filter(|firing| firing["outcome"] == "sent")
        .collect();
    let sessions = home.json(&["session", "list", "--json"]);
    let opened: Vec<&Value> = sessions
        .as_array()
        .unwrap()
        .iter()
        .filter(|session| session["title"] != "s")
        .collect();
    assert_eq!(opened.len(), sent.len(), "{sessions:#}\n{sent:#?}");
    for firing in &sent {
        let session = firing["session_id"].as_str().unwrap();
        assert!(
            opened.iter().any(|opened| opened["id"] == session),
            "{firing}"
        );
        assert_eq!(home.wait_prompt(firing["prompt_id"].as_str().unwrap()), 0);
    }
    assert!(
        opened[0]["title"]
            .as_str()
            .unwrap()
            .starts_with("@fake delay=2500 (2026-12-07 "),
        "{opened:?}"
    );

    // A person is told of both.
    wait_until("the firings are told", || {
        let told = std::fs::read_to_string(home.path().join("told.jsonl")).unwrap_or_default();
        told.contains("\"schedule.fired\"") && told.contains("\"schedule.skipped\"")
    });
    home.stop_daemon();
}

#[test]
fn a_time_missed_while_no_daemon_ran_is_skipped_or_caught_up_once() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    daemon_at(&home, "2026-12-07T08:00:00Z");
    let skips = home.json(&["schedule", "add", "s", "0 * * * *", "hourly", "--json"]);
    let catches = home.json(&[
        "schedule",
        "add",
        "s",
        "0 * * * *",
        "hourly, caught up",
        "--catch-up",
        "--json",
    ]);
    assert_eq!(skips["next_at"], ms("2026-12-07T09:00:00Z"));
    // Down from eight to half past eleven: nine, ten and eleven are missed.
    daemon_at(&home, "2026-12-07T11:30:00Z");
    let (skips, catches) = (
        skips["id"].as_str().unwrap().to_string(),
        catches["id"].as_str().unwrap().to_string(),
    );
    wait_until("both are taken", || {
        !firings(&home, &skips).is_empty() && firings(&home, &catches).len() == 1
    });
    let skipped = &firings(&home, &skips)[0];
    assert_eq!(skipped["outcome"], "skipped", "{skipped}");
    let reason = skipped["reason"].as_str().unwrap();
    assert!(
        reason.contains("missed: no daemon ran at 2026-12-07 09:00:00 UTC (3 times"),
        "{reason}"
    );
    wait_until("the late one is sent", || {
        firings(&home, &catches)[0]["outcome"] == "sent"
    });
    let caught = &firings(&home, &catches)[0];
    assert!(
        caught["reason"]
            .as_str()
            .unwrap()
            .contains("late: it was due at 2026-12-07 09:00:00 UTC"),
        "{caught}"
    );
    assert_eq!(home.wait_prompt(caught["prompt_id"].as_str().unwrap()), 0);
    // Once for all the times missed, and both go on at noon.
    assert_eq!(firings(&home, &catches).len(), 1);
    for id in [&skips, &catches] {
        assert_eq!(
            shown(&home, id)["schedule"]["next_at"],
            ms("2026-12-07T12:00:00Z")
        );
    }
    let prompts = home.sql("SELECT count(*) FROM prompts");
    assert_eq!(prompts[0][0], 1, "only the caught-up firing sent one");
    home.stop_daemon();
}

#[test]
fn a_bad_schedule_is_one_line_and_stores_nothing() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let refused = [
        (
            &["schedule", "add", "s", "every morning", "x"][..],
            2,
            "is not a cron expression",
        ),
        (
            &["schedule", "add", "s", "0 0 30 2 *", "x"],
            2,
            "never fires",
        ),
        (
            &["schedule", "add", "nothing", "0 9 * * *", "x"],
            1,
            "No project matches 'nothing'",
        ),
        (
            &["schedule", "add", "s", "0 9 * * *", " "],
            1,
            "the prompt is empty",
        ),
        (
            &["schedule", "pause", "nothing"],
            1,
            "No schedule matches 'nothing'",
        ),
    ];
    for (args, code, says) in refused {
        let said = home.fails(args, code);
        // One line (a usage error's is clap's, with its pointer to --help below).
        let first = said.lines().next().unwrap_or_default();
        assert!(first.contains(says), "{args:?}: {said}");
        if code == 1 {
            assert_eq!(said.trim().lines().count(), 1, "{args:?}: {said}");
        }
    }
    assert_eq!(home.sql("SELECT count(*) FROM schedules")[0][0], 0);
    home.stop_daemon();
}

#[test]
fn an_agent_schedules_prompts_to_its_own_session_only() {
    let home = DaemonHome::new();
    let agent = agent_beside_another_project(&home, FAKE);
    let persons = home.json(&["schedule", "add", "other", "0 9 * * *", "x", "--json"]);
    let persons = persons["id"].as_str().unwrap();
    home.ok(&["schedule", "pause", persons]);

    let corral = env!("CARGO_BIN_EXE_corral");
    let beyond: Vec<String> = vec![
        format!("'{corral}' schedule add other '0 9 * * *' 'work for me'"),
        format!("'{corral}' schedule add --project p '0 9 * * *' 'new sessions'"),
        format!("'{corral}' schedule add --project q '0 9 * * *' 'new sessions'"),
        format!("'{corral}' schedule list"),
        format!("'{corral}' schedule show {persons}"),
        format!("'{corral}' schedule remove {persons}"),
        format!("'{corral}' schedule resume {persons}"),
    ];
    let own = vec![format!(
        "'{corral}' schedule add {agent} '0 9 * * *' 'my own follow-up'"
    )];
    let said = refused_beyond(&home, &agent, &beyond, &own);
    assert!(said[0].contains("added: to session agent"), "{said:?}");
    let listed = home.json(&["schedule", "list", "--json"]);
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(listed[0]["paused"], true, "the person's stays paused");
    assert_eq!(listed[1]["session_title"], "agent");
    home.stop_daemon();
}
