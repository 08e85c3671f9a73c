//! `corral-shim --spool DIR`: the shim that lets a run outlive its daemon. While the daemon
//! lives it only holds the pipes' read ends and waits on the lifeline; once the lifeline ends
//! it reads what the engine prints into the spool, records the engine's end, and ends an
//! engine no daemon adopts within the orphan timeout. Driven here as a daemon would, with the
//! pipes made by the test.

use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SHIM: &str = env!("CARGO_BIN_EXE_corral-shim");

/// A shim spooling into `dir` as a daemon starts one: the engine's stdout and stderr are pipes
/// the test reads, and the lifeline's write end is the test's; the shim opens its own read ends
/// of the three through this process's `/proc/PID/fd`.
struct Spooled {
    shim: Child,
    stdout: Option<std::fs::File>,
    stderr: Option<std::fs::File>,
    lifeline: Option<OwnedFd>,
}

fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap()
}

fn start(dir: &Path, orphan_timeout_ms: u64, script: &str) -> Spooled {
    let (out_read, out_write) = pipe();
    let (err_read, err_write) = pipe();
    let (_, life_write) = pipe();
    let pipes = format!(
        "{}:{}:{}:{}",
        std::process::id(),
        out_read.as_raw_fd(),
        err_read.as_raw_fd(),
        life_write.as_raw_fd()
    );
    let shim = Command::new(SHIM)
        .arg("--spool")
        .arg(dir)
        .args(["--pipes-of", &pipes])
        .args(["--orphan-timeout-ms", &orphan_timeout_ms.to_string()])
        .args(["sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::from(out_write))
        .stderr(Stdio::from(err_write))
        .process_group(0)
        .spawn()
        .unwrap();
    Spooled {
        shim,
        stdout: Some(out_read.into()),
        stderr: Some(err_read.into()),
        lifeline: Some(life_write),
    }
}

impl Spooled {
    /// Reads the engine's first line, `ready` (so the shim has opened its own ends: it does
    /// before it starts the engine).
    fn ready(&mut self) {
        let mut line = [0u8; 6];
        self.stdout.as_mut().unwrap().read_exact(&mut line).unwrap();
        assert_eq!(&line, b"ready\n");
    }

    /// The daemon goes away: its pipes' read ends and the lifeline close.
    fn orphan(&mut self) {
        self.stdout = None;
        self.stderr = None;
        self.lifeline = None;
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        self.shim.wait().unwrap()
    }
}

fn spooled(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

/// What the daemon read stays the daemon's; what the engine prints after the daemon went away
/// is spooled, its end recorded, and the shim still ends as its engine did.
#[test]
fn after_its_daemon_the_shim_spools_the_rest_and_records_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = start(
        dir.path(),
        60_000,
        "echo before; sleep 0.3; echo after; echo oops >&2; exit 3",
    );
    let mut line = [0u8; 7];
    run.stdout.as_mut().unwrap().read_exact(&mut line).unwrap();
    assert_eq!(&line, b"before\n");
    run.orphan();
    let status = run.wait();
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert_eq!(spooled(dir.path(), "stdout"), "after\n");
    assert_eq!(spooled(dir.path(), "stderr"), "oops\n");
    let exit = spooled(dir.path(), "exit");
    assert!(exit.starts_with("code 3\nat "), "{exit}");
}

/// While its daemon lives, the shim spools nothing and records nothing: the daemon reads the
/// pipes and waits for the shim.
#[test]
fn while_its_daemon_lives_the_shim_spools_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = start(dir.path(), 60_000, "echo hello; exit 4");
    let mut said = String::new();
    run.stdout
        .as_mut()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    assert_eq!(said, "hello\n");
    assert_eq!(run.wait().code(), Some(4));
    assert_eq!(spooled(dir.path(), "stdout"), "");
    assert!(!dir.path().join("exit").exists());
}

/// An orphaned engine that no daemon adopts is ended after the orphan timeout (SIGTERM to its
/// group), and its end recorded; one a daemon adopts (`SIGUSR2`) runs to its own end.
#[test]
fn an_orphan_is_ended_after_its_timeout_unless_a_daemon_adopts_it() {
    let dir = tempfile::tempdir().unwrap();
    let began = Instant::now();
    let mut run = start(dir.path(), 300, "echo ready; sleep 30");
    run.ready();
    run.orphan();
    let status = run.wait();
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "{:?}",
        began.elapsed()
    );
    // SIGTERM, or SIGKILL its grace later for an engine that was not yet listening (a shell
    // still starting up on a loaded machine).
    use std::os::unix::process::ExitStatusExt;
    let signal = status.signal();
    assert!(
        signal == Some(libc::SIGTERM) || signal == Some(libc::SIGKILL),
        "{status:?}"
    );
    let exit = spooled(dir.path(), "exit");
    assert!(
        exit.starts_with("signal SIGTERM\n") || exit.starts_with("signal SIGKILL\n"),
        "{exit}"
    );

    let adopted = tempfile::tempdir().unwrap();
    let mut run = start(
        adopted.path(),
        300,
        "echo ready; sleep 1; echo finished on its own",
    );
    run.ready();
    run.orphan();
    // A daemon follows it: it says so well within each timeout, as a daemon does.
    let shim = nix::unistd::Pid::from_raw(run.shim.id() as i32);
    // (Not before it is under way: a shim watches its signals from its first steps on, but a
    // signal sent while it still starts would end it.)
    let status = loop {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(status) = run.shim.try_wait().unwrap() {
            break status;
        }
        let _ = nix::sys::signal::kill(shim, nix::sys::signal::Signal::SIGUSR2);
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(spooled(adopted.path(), "stdout"), "finished on its own\n");
    assert!(spooled(adopted.path(), "exit").starts_with("code 0\n"));
}

/// A full disk while the shim spools: nothing is dropped. The shim holds what it read, stops
/// reading, so the engine blocks on its full pipe; once there is room the whole output is in
/// the spool, in order, and the engine's end is recorded. (On a small tmpfs: root only, as CI
/// has; elsewhere it skips, saying why.)
#[test]
fn a_full_disk_while_spooling_blocks_the_engine_and_loses_nothing() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("spool");
    std::fs::create_dir(&dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "none"])
        .arg(&dir)
        .output();
    match mounted {
        Ok(output) if output.status.success() => {}
        other => {
            assert!(
                std::env::var_os("CI").is_none_or(|value| value.is_empty()),
                "CI mounts a tmpfs: {other:?}"
            );
            println!("skipping: cannot mount a tmpfs here ({other:?})");
            return;
        }
    }
    let unmount = || {
        let _ = Command::new("umount").arg("-l").arg(&dir).output();
    };
    // Fill it, leaving no room for the engine's 256 KiB.
    let filler = dir.join("filler");
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&filler).unwrap();
        while file.write_all(&[0u8; 4096]).is_ok() {}
        while file.write_all(&[0u8; 1]).is_ok() {}
    }
    let mut run = start(
        &dir,
        60_000,
        "echo ready; i=0; while [ $i -lt 4096 ]; do printf '%063d\\n' $i; i=$((i+1)); done; echo done",
    );
    run.ready();
    run.orphan();
    // The engine cannot finish: its output has nowhere to go.
    std::thread::sleep(Duration::from_millis(800));
    let blocked = run.shim.try_wait().unwrap().is_none();
    let before = spooled(&dir, "exit");
    std::fs::remove_file(&filler).unwrap();
    let status = run.wait();
    let out = spooled(&dir, "stdout");
    let exit = spooled(&dir, "exit");
    unmount();
    assert!(blocked, "the shim waits for room");
    assert_eq!(before, "", "no end recorded while output is held");
    assert_eq!(status.code(), Some(0), "{status:?}");
    let expected: String = (0..4096)
        .map(|i| format!("{i:063}\n"))
        .chain(std::iter::once("done\n".to_string()))
        .collect();
    assert_eq!(out.len(), expected.len(), "every byte kept");
    assert!(out == expected, "in order");
    assert!(exit.starts_with("code 0\n"), "{exit}");
}
