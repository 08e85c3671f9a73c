//! `corral group list|add|set|remove`: execution groups from the CLI.

use crate::common;

use common::daemon::DaemonHome;

#[test]
fn groups_are_listed_declared_changed_and_removed_from_the_cli() {
    let home = DaemonHome::new();
    home.start_daemon();
    let said = home.ok(&["group", "list"]);
    assert!(said.starts_with("no execution group"), "{said}");
    let dir = home.work().join("a");
    std::fs::create_dir_all(&dir).unwrap();
    home.ok(&[
        "project",
        "add",
        "a",
        dir.to_str().unwrap(),
        "--group",
        "build",
    ]);
    let said = home.ok(&["group", "add", "docs", "--label"]);
    assert_eq!(
        said,
        "group docs added, a label: its projects may run at once\n"
    );
    let failed = home.fails(&["group", "add", "docs"], 1);
    assert!(failed.contains("group 'docs' exists already"), "{failed}");
    let listed = home.json(&["group", "list", "--json"]);
    assert_eq!(listed[0]["name"], "build", "{listed}");
    assert_eq!(listed[0]["locking"], true, "{listed}");
    assert_eq!(listed[0]["projects"], serde_json::json!(["a"]), "{listed}");
    assert_eq!(listed[1]["name"], "docs", "{listed}");
    assert_eq!(listed[1]["locking"], false, "{listed}");
    assert_eq!(listed[1]["projects"], serde_json::json!([]), "{listed}");
    let said = home.ok(&["group", "set", "docs", "--locking"]);
    assert!(
        said.contains("locking: one of its projects runs at a time"),
        "{said}"
    );
    home.fails(&["group", "set", "docs"], 2);
    home.fails(&["group", "set", "docs", "--locking", "--label"], 2);
    let failed = home.fails(&["group", "remove", "build"], 1);
    assert!(
        failed.contains("group 'build' has projects (a)"),
        "{failed}"
    );
    assert_eq!(
        home.ok(&["group", "remove", "docs"]),
        "group docs removed\n"
    );
    let failed = home.fails(&["group", "remove", "docs"], 1);
    assert!(
        failed.contains("no execution group is named 'docs'"),
        "{failed}"
    );
    // Looking needs no daemon, and starts none.
    home.stop_daemon();
    let said = home.ok(&["group", "list"]);
    assert!(said.starts_with("build  locking  a  (since "), "{said}");
    assert!(home
        .daemon_pid()
        .is_none_or(|pid| !common::daemon::alive(pid)));
}
