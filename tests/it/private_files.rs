//! A home is private (issue 37, item 3): the home is 0700 and every file corral makes in it
//! 0600 whatever the umask; a looser home or store is tightened with one line saying so; a
//! home of another user's, or a link to a directory others can open, is refused in one line
//! with nothing written; the daemon stops honouring a token file others can read. Every test
//! runs the built binary, under umask 022 (the common default) and 077.

use crate::common;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::daemon::{alive, finish, kill, wait_until};

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// A scratch directory whose default home (`$XDG_STATE_HOME/corral`) corral makes itself.
struct Scratch {
    dir: tempfile::TempDir,
    umask: u32,
}

impl Scratch {
    fn new(umask: u32) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("work")).unwrap();
        Scratch { dir, umask }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("state/corral")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// `corral ARGS…` with no `CORRAL_HOME` (the default home) under this scratch's umask.
    fn corral(&self, args: &[&str]) -> Command {
        let mut command = common::command_in(env!("CARGO_BIN_EXE_corral"), self.dir.path());
        command
            .env_remove("CORRAL_HOME")
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let umask = nix::sys::stat::Mode::from_bits_truncate(self.umask);
        // SAFETY: umask is async-signal-safe.
        unsafe {
            command.pre_exec(move || {
                nix::sys::stat::umask(umask);
                Ok(())
            });
        }
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        finish(self.corral(args).spawn().expect("corral starts"))
    }

    fn ok(&self, args: &[&str]) -> Output {
        let output = self.run(args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        output
    }

    fn stop_daemon(&self) {
        let pid = std::fs::read_to_string(self.home().join("daemon.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            kill(pid, libc::SIGTERM);
            wait_until("the daemon exits", || !alive(pid));
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.stop_daemon();
    }
}

/// Runs `corral ARGS…` in `home`, which must refuse it: exit 1 and one line on stderr, which
/// is returned.
fn refused_in_one_line(home: &Path, args: &[&str]) -> String {
    let output = common::corral_in(home, args).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    stderr
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Every path in the home whose mode is not private: directories must be 0700, files and
/// sockets 0600. The agents' worktrees hold the project's own files, with the project's modes
/// (the home's 0700 keeps them private); none is made here.
fn loose_paths(home: &Path) -> Vec<String> {
    let mut loose = Vec::new();
    let mut stack = vec![home.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if mode(&dir) != 0o700 {
            loose.push(format!("{} {:04o}", dir.display(), mode(&dir)));
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let kind = std::fs::symlink_metadata(&path).unwrap().file_type();
            if kind.is_dir() {
                stack.push(path);
            } else if (kind.is_file() || kind.is_socket()) && mode(&path) != 0o600 {
                loose.push(format!("{} {:04o}", path.display(), mode(&path)));
            } else if !(kind.is_file() || kind.is_socket()) {
                loose.push(format!("{} is neither a file nor a socket", path.display()));
            }
        }
    }
    loose
}

/// Runs each command a person runs in a first hour on a home corral makes itself, and checks
/// after every one that nothing in the home is readable by others.
fn every_file_is_private_under(umask: u32) {
    let scratch = Scratch::new(umask);
    let work = scratch.work();
    let work = work.to_str().unwrap();
    let steps: Vec<Vec<&str>> = vec![
        vec!["monitor", "list"],
        vec!["config", "set", "engines.fake.path", FAKE],
        vec!["project", "add", "p", work, "--engine", "fake"],
        vec!["session", "new", "p", "--title", "s"],
        vec!["send", "s", "hello", "--wait"],
        vec!["web", "--json"],
        vec!["run", "--", "true"],
        vec!["history", "s"],
        vec!["status"],
    ];
    for step in &steps {
        scratch.ok(step);
        let loose = loose_paths(&scratch.home());
        assert!(
            loose.is_empty(),
            "umask {umask:04o}, after {step:?}: {loose:?}"
        );
    }
    for file in [
        "corral.db",
        "corral.db-wal",
        "corral.sock",
        "daemon.log",
        "http.token",
    ] {
        assert!(
            scratch.home().join(file).exists(),
            "{file} was made and checked"
        );
    }
    scratch.stop_daemon();
    let loose = loose_paths(&scratch.home());
    assert!(
        loose.is_empty(),
        "umask {umask:04o}, after the daemon: {loose:?}"
    );
}

#[test]
fn every_file_corral_makes_is_private_under_umask_022() {
    every_file_is_private_under(0o022);
}

#[test]
fn every_file_corral_makes_is_private_under_umask_077() {
    every_file_is_private_under(0o077);
}

/// A home and store made by an older corral under umask 022 (0755, 0644): the next command
/// makes them private, saying so once, and loses nothing.
#[test]
fn a_loose_home_and_store_are_made_private_with_one_line_each_and_kept() {
    let scratch = Scratch::new(0o022);
    scratch.ok(&["run", "--", "true"]);
    let home = scratch.home();
    let chmod = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    chmod(&home, 0o755);
    chmod(&home.join("corral.db"), 0o644);
    chmod(&home.join("corral.db-wal"), 0o644);
    let output = scratch.ok(&["monitor", "list", "--json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(
        lines[0].contains("made home") && lines[0].contains("0755 → 0700"),
        "{stderr}"
    );
    assert!(
        lines[1].contains("corral.db private: 0644 → 0600"),
        "{stderr}"
    );
    assert!(lines[2].contains("corral.db-wal private"), "{stderr}");
    let listed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let argvs = listed.to_string();
    assert!(
        argvs.contains("\"true\""),
        "the first exec is kept: {listed}"
    );
    assert_eq!(loose_paths(&home), Vec::<String>::new());
    let again = scratch.ok(&["monitor", "list"]);
    assert!(again.stderr.is_empty(), "said once: {again:?}");
}

/// A home that belongs to another user is refused in one line (exit 1) and not touched.
#[test]
fn a_home_of_another_user_is_refused_in_one_line() {
    let scratch = tempfile::tempdir().unwrap();
    let theirs = if nix::unistd::geteuid().is_root() {
        let dir = scratch.path().join("theirs");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        dir
    } else {
        // Not root: a directory of root's that everybody may enter.
        PathBuf::from("/usr")
    };
    let before = mode(&theirs);
    for args in [
        &["monitor", "list"][..],
        &["session", "list"],
        &["run", "--", "true"],
    ] {
        let stderr = refused_in_one_line(&theirs, args);
        assert!(stderr.contains("not to you"), "{stderr}");
    }
    assert_eq!(mode(&theirs), before);
    assert!(!theirs.join("corral.db").exists());
}

/// A home that is a symbolic link to a directory others can open (a shared one) is refused in
/// one line, and nothing is made in that directory.
#[test]
fn a_home_linked_to_a_shared_directory_is_refused_in_one_line() {
    let scratch = tempfile::tempdir().unwrap();
    let shared = scratch.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let home = scratch.path().join("home");
    std::os::unix::fs::symlink(&shared, &home).unwrap();
    // Writable by everybody (like /tmp): refused, linked or not.
    for dir in [&home, &shared] {
        let stderr = refused_in_one_line(dir, &["monitor", "list"]);
        assert!(
            stderr.contains("written by others") && stderr.contains("1777"),
            "{stderr}"
        );
    }
    // Readable by others: the link is refused (tightening would change a directory somebody
    // may share); the directory itself would be tightened.
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    let stderr = refused_in_one_line(&home, &["monitor", "list"]);
    assert!(
        stderr.contains("symbolic link") && stderr.contains("0755"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&shared).unwrap().count(),
        0,
        "nothing made there"
    );
    assert_eq!(mode(&shared), 0o755);
}

/// The daemon stops honouring a token file that others can read, and honours it again once it
/// is private (a `chmod` changes neither the file's content nor its mtime).
#[test]
fn the_daemon_stops_honouring_a_token_others_can_read() {
    let scratch = Scratch::new(0o022);
    let web = scratch.ok(&["web", "--json"]);
    let web: serde_json::Value = serde_json::from_slice(&web.stdout).unwrap();
    let listen = web["listen"].as_str().unwrap().to_string();
    let token = std::fs::read_to_string(scratch.home().join("http.token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());
    let status = || {
        common::browser::request(
            &listen,
            "GET",
            "/api/v1/status",
            &[("Authorization", &bearer)],
            None,
        )
        .status
    };
    assert_eq!(status(), 200);
    let token_path = scratch.home().join("http.token");
    std::fs::set_permissions(&token_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(status(), 401, "a token others can read is not honoured");
    let refused = scratch.run(&["web"]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("0644"),
        "{refused:?}"
    );
    std::fs::set_permissions(&token_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(status(), 200);
}
