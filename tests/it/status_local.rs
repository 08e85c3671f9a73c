//! `corral status --json` with no daemon answers from the store in the daemon's shape: the
//! same keys, the kept background processes that still live, and the app-server children as
//! stored (one whose process is gone is not shown running).

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::daemon::{alive, kill, wait_until, DaemonHome};
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// The exit code of an inspection that found no daemon (`cli::remote::NO_DAEMON`).
const NO_DAEMON: i32 = 3;

/// Kills a process when dropped, so a failing test leaves no kept process behind.
struct Reap(i32);

impl Drop for Reap {
    fn drop(&mut self) {
        if alive(self.0) {
            kill(self.0, libc::SIGKILL);
        }
    }
}

/// A `spawn=` directive whose process writes its pid to `pidfile`, then becomes `command`.
fn spawn(pidfile: &Path, command: &str) -> String {
    format!(
        "@fake spawn=echo $$ > '{}.tmp' && mv '{0}.tmp' '{0}' && exec {command}",
        pidfile.display()
    )
}

fn keys(value: &Value) -> BTreeSet<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

/// `status --json` of a home no daemon serves: it exits NO_DAEMON and prints JSON.
fn local_status(home: &DaemonHome) -> Value {
    let output = home.run(&["status", "--json"]);
    assert_eq!(output.status.code(), Some(NO_DAEMON), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("status --json prints JSON")
}

#[test]
fn status_without_a_daemon_has_the_daemons_shape_and_what_the_store_knows() {
    let home = DaemonHome::new();
    home.config(&[
        ("engines.fake.path", FAKE),
        ("engines.codex-app-server.path", FAKE),
    ]);
    let work = home.work();
    home.ok(&[
        "project",
        "add",
        "k",
        work.to_str().unwrap(),
        "--engine",
        "fake",
        "--keep-background",
    ]);
    let served = home.path().join("served");
    std::fs::create_dir(&served).unwrap();
    home.add_project("a", &served, "codex-app-server");

    // A kept background process, and an app-server child.
    let kept_session = home.new_session(&["k", "--title", "dev server"]);
    let pidfile = home.path().join("kept.pid");
    let prompt = format!("{}\nstart a dev server", spawn(&pidfile, "sleep 30"));
    home.ok(&["send", &kept_session, &prompt, "--wait"]);
    wait_until("the kept process says its pid", || pidfile.exists());
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _reap = Reap(pid);
    let app_session = home.new_session(&["a", "--title", "served"]);
    home.ok(&["send", &app_session, "hello", "--wait"]);

    let daemon = home.json(&["status", "--json"]);
    assert!(
        daemon["kept"]
            .as_array()
            .unwrap()
            .iter()
            .any(|kept| kept["pid"] == pid),
        "{daemon}"
    );
    let served = daemon["app_servers"].as_array().unwrap();
    assert_eq!(served.len(), 1, "{daemon}");
    assert_eq!(served[0]["status"], "running", "{daemon}");
    let server_pid = served[0]["pid"].as_i64().unwrap() as i32;
    // Stopped by SIGTERM (not `stop_daemon`, which waits for every process of the home,
    // the kept one included).
    let daemon_pid = home.daemon_pid().expect("a daemon");
    kill(daemon_pid, libc::SIGTERM);
    wait_until("the daemon exits", || !alive(daemon_pid));
    wait_until("the app-server child is gone", || !alive(server_pid));
    assert!(alive(pid), "the kept process did not outlive the daemon");

    let local = local_status(&home);
    assert_eq!(
        keys(&local),
        keys(&daemon),
        "daemon: {daemon}\nlocal: {local}"
    );
    assert_eq!(local["daemon"], Value::Null, "{local}");
    assert_eq!(local["home"], daemon["home"], "{local}");
    assert_eq!(local["home"], daemon["daemon"]["home"], "{daemon}");
    assert_eq!(local["sessions"], daemon["sessions"], "{local}");
    assert_eq!(local["working"], 0, "{local}");
    assert_eq!(local["slots"], Value::Null, "{local}");
    // The kept process, as the daemon listed it.
    assert_eq!(
        local["kept"], daemon["kept"],
        "daemon: {daemon}\nlocal: {local}"
    );
    // The app-server child as stored, its process gone: not shown running, no pid.
    let servers = local["app_servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{local}");
    let server = &servers[0];
    assert_eq!(keys(server), keys(&served[0]), "{server}");
    assert_eq!(server["project_id"], served[0]["project_id"], "{server}");
    assert_eq!(server["generation"], served[0]["generation"], "{server}");
    assert_eq!(server["status"], "stopped", "{server}");
    assert!(
        server["pid"].is_null(),
        "a dead child's pid is shown: {server}"
    );
    // The text form still says there is no daemon, in one line.
    let output = home.run(&["status"]);
    assert_eq!(output.status.code(), Some(NO_DAEMON), "{output:?}");
    assert!(common::stdout(&output).contains("no daemon runs for"));

    // A kept process that died is no longer listed.
    kill(pid, libc::SIGKILL);
    wait_until("the kept process is gone", || !alive(pid));
    let local = local_status(&home);
    assert_eq!(local["kept"], Value::Array(Vec::new()), "{local}");
}
