//! Listening sockets (src/socket.rs), through the built binary: the daemon's socket and
//! `corral connect`'s are mode 0600 from the moment their path exists — even when the process
//! runs with umask 000 — and a path too long for `sun_path` is refused by both with one line,
//! exit 1. (That the umask is never changed, so other threads' files keep their mode, is the
//! unit test `socket::tests::files_created_by_another_thread_while_binding_keep_their_mode`.)

use crate::common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use common::daemon::{DaemonHome, DEADLINE};

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// `command` spawned with umask 000, so that only corral itself can make its socket private.
fn spawn_with_open_umask(mut command: Command) -> Child {
    // SAFETY: umask is async-signal-safe and touches only the child's own mask.
    unsafe {
        command.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("corral starts")
}

/// Watches `path` from before it exists until something accepts on it: every time it is seen
/// it must be a socket of mode 0600. Returns how many times it was seen before it accepted.
fn private_until_it_accepts(path: &Path, child: &mut Child) -> usize {
    let until = Instant::now() + DEADLINE;
    let mut seen = 0;
    loop {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            seen += 1;
            assert!(meta.file_type().is_socket(), "{}", path.display());
            let mode = meta.permissions().mode() & 0o7777;
            assert_eq!(mode, 0o600, "{} is {mode:o}", path.display());
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                let mode = std::fs::symlink_metadata(path)
                    .unwrap()
                    .permissions()
                    .mode()
                    & 0o7777;
                assert_eq!(
                    mode,
                    0o600,
                    "{} is {mode:o} once it accepts",
                    path.display()
                );
                return seen;
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "corral exited ({status}) before it accepted on {}",
                path.display()
            );
        }
        assert!(
            Instant::now() < until,
            "nothing accepted on {}",
            path.display()
        );
        std::thread::yield_now();
    }
}

fn stop(mut child: Child) {
    common::daemon::kill(child.id() as i32, libc::SIGTERM);
    let status = common::daemon::wait_for(&mut child);
    assert!(
        status.code().is_some(),
        "ended by a signal it handles: {status}"
    );
}

#[test]
fn the_daemons_socket_is_private_from_its_first_moment_under_umask_000() {
    let home = DaemonHome::new();
    let socket = home.path().join("corral.sock");
    let mut daemon = spawn_with_open_umask(home.corral(&["daemon"]));
    assert!(private_until_it_accepts(&socket, &mut daemon) >= 1);
    // It serves (its signal handlers are in place) before it is told to stop.
    home.ok(&["status"]);
    stop(daemon);
    assert!(!socket.exists());
}

#[test]
fn connects_socket_is_private_from_its_first_moment_under_umask_000() {
    let home = DaemonHome::new();
    home.start_daemon();
    home.config(&[
        ("engines.fake.path", FAKE),
        ("engines.codex-app-server.path", FAKE),
    ]);
    home.add_project("p", &home.work(), "fake");
    home.new_session(&["p", "--engine", "fake", "--title", "s"]);
    let socket = home.path().join("native.sock");
    let mut connect =
        spawn_with_open_umask(home.corral(&["connect", "s", "--socket", socket.to_str().unwrap()]));
    assert!(private_until_it_accepts(&socket, &mut connect) >= 1);
    stop(connect);
    assert!(!socket.exists());
    home.stop_daemon();
}

#[test]
fn a_socket_path_too_long_is_refused_in_one_line_by_the_daemon_and_by_connect() {
    let base = tempfile::tempdir().unwrap();
    let long_home = base.path().join("h".repeat(110));
    std::fs::create_dir(&long_home).unwrap();
    std::fs::set_permissions(
        &long_home,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let output = common::corral_in(&long_home, &["daemon"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = said
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(
        lines[0].contains("a Unix socket path holds at most 107")
            && lines[0].contains("use a shorter CORRAL_HOME"),
        "{said}"
    );
    assert!(!long_home.join("corral.sock").exists());

    let home = DaemonHome::new();
    home.start_daemon();
    home.config(&[("engines.fake.path", FAKE)]);
    home.add_project("p", &home.work(), "fake");
    home.new_session(&["p", "--engine", "fake", "--title", "s"]);
    let long = home.path().join("x".repeat(120));
    let output = home.run(&["connect", "s", "--socket", long.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = said
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "{said}");
    assert!(
        lines[0].contains("a Unix socket path holds at most 107")
            && lines[0].contains("choose a shorter path"),
        "{said}"
    );
    assert!(!long.exists());
    home.stop_daemon();
}
