//! `corral wait`: blocks until a prompt, a session's prompts or every prompt has ended, and
//! says how in its exit code (0 done, 1 failed, 4 cancelled, 124 timed out).

use crate::common;

use common::daemon::{wait_until, DaemonHome};

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

fn sent_id(sent: &str) -> String {
    sent.split_whitespace().next().unwrap().to_string()
}

#[test]
fn a_sessions_prompts_are_waited_for_and_a_failure_is_the_exit_code() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let first = sent_id(&home.ok(&["send", "s", "@fake delay=300\nfirst"]));
    let second = sent_id(&home.ok(&["send", "s", "@fake fail=boom\nsecond"]));
    let third = sent_id(&home.ok(&["send", "s", "third"]));
    let output = home.run(&["wait", "s"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        said,
        format!("{first} done\n{second} failed\n{third} done\n"),
        "each as it ended, in order"
    );
    // Nothing left to wait for: at once, and done.
    let output = home.run(&["wait", &first]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{first} done\n")
    );
    let json = home.json(&["wait", "s", "--json"]);
    assert_eq!(json, serde_json::json!([]), "nothing queued or running now");
    home.stop_daemon();
}

#[test]
fn a_timeout_exits_124_and_a_cancelled_prompt_4() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let hanging = sent_id(&home.ok(&["send", "s", "@fake hang\nforever"]));
    let started = std::time::Instant::now();
    let output = home.run(&["wait", "s", "--timeout", "500ms"]);
    assert_eq!(output.status.code(), Some(124), "{output:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("timed out after 0.5 s"), "{said}");
    let mut waiting = home
        .corral(&["wait", &hanging])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the prompt runs", || {
        home.json(&["history", "s", "--json"])["runs"][0]["pid"].is_i64()
    });
    home.ok(&["cancel", &hanging]);
    let status = waiting.wait().unwrap();
    assert_eq!(status.code(), Some(4), "cancelled");
    home.stop_daemon();
}

#[test]
fn all_waits_for_every_session_and_bad_input_is_one_line() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "a", &[]);
    let other = home.work().join("q");
    std::fs::create_dir_all(&other).unwrap();
    home.add_project("q", &other, "fake");
    home.new_session(&["q", "--title", "b"]);
    let one = sent_id(&home.ok(&["send", "a", "@fake delay=200\none"]));
    let two = sent_id(&home.ok(&["send", "b", "@fake delay=400\ntwo"]));
    let output = home.run(&["wait", "--all"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(said.contains(&format!("{one} done")), "{said}");
    assert!(said.contains(&format!("{two} done")), "{said}");

    let output = home.run(&["wait"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let output = home.run(&["wait", "s", "--all"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let output = home.run(&["wait", "a", "--timeout", "soon"]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let output = home.run(&["wait", "nosuch"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("no session or prompt is named 'nosuch'"),
        "{said}"
    );
    home.stop_daemon();
}
