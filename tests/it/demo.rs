//! `corral demo` as a user runs it: every part of the show happens, and it ends cleanly.

use std::process::Command;

#[test]
fn the_demo_shows_limits_groups_retries_cancellation_and_the_ledger() {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_corral"))
        .arg("demo")
        .env("CORRAL_HOME", home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    for expected in [
        "waiting for a slot",
        "got a slot after",
        "rate_limit — retry 2 in 3 s",
        "retrying in",
        "sandbox  cancelled",
        "agent ran:",
        "all 5 prompts ended",
        "SESSIONS (5)",
        "RECENT COMMANDS",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // api and web share a group: web only started after api was done.
    let position = |needle: &str| stdout.find(needle).unwrap_or_else(|| panic!("{needle}"));
    assert!(position("api      engine exited") < position("web      engine started"));
    // The demo itself was recorded in the user's home, and its temporary home is gone.
    let db = rusqlite::Connection::open(home.path().join("corral.db")).unwrap();
    let outcome: String = db
        .query_row(
            "SELECT outcome FROM execs WHERE command LIKE '%demo%'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(outcome, "succeeded");
    let kept = stdout
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    assert!(
        !std::path::Path::new(&kept).exists(),
        "{kept} was not removed"
    );
}

/// `cargo run --release -- demo` on a fresh clone builds `corral` alone: with no
/// `corral-fake-engine` beside it (nor on PATH), the demo runs corral itself as the fake
/// engine, through a link of that name, and the show is the same.
#[test]
fn the_demo_runs_with_corral_alone() {
    let alone = tempfile::tempdir().unwrap();
    let corral = alone.path().join("corral");
    // Copied by `cp`, not from here: a copy written by this process leaves its write
    // descriptor, for an instant, in any child another test's thread forks meanwhile, and
    // running the copy then fails with "Text file busy" (seen once in a full run).
    let copied = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_corral"))
        .arg(&corral)
        .status()
        .unwrap();
    assert!(copied.success());
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(&corral)
        .arg("demo")
        .env("CORRAL_HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("all 5 prompts ended"), "{stdout}");
    assert!(stdout.contains("agent ran:"), "{stdout}");
}
