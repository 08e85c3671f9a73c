//! `corral run -- CMD`: exit codes, the recorded exec, interrupts, and exec ancestry.
//!
//! Each home is on the store of the test pass (SQLite, or under `CORRAL_TEST_STORE=postgres` a
//! database of its own named in `HOME/config`): `run` records its exec wherever the home's
//! store is, and the rows are read back through that store.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::daemon::DaemonHome;
use common::store::quoted;
use common::{stderr, stdout};
use serde_json::Value;

type Row = (Option<String>, Option<i32>, Option<String>, bool);

fn text(value: &Value) -> Option<String> {
    value.as_str().map(str::to_string)
}

fn exec_of(home: &DaemonHome, needle: &str) -> Row {
    let row = home.store().row(&format!(
        "SELECT outcome, exit_code, signal, \
                CASE WHEN completed_at IS NULL THEN 0 ELSE 1 END \
           FROM execs WHERE command LIKE {}",
        quoted(&format!("%{needle}%"))
    ));
    (
        text(&row[0]),
        row[1].as_i64().map(|code| code as i32),
        text(&row[2]),
        row[3] == 1,
    )
}

#[test]
fn exit_status_is_passed_through_and_recorded() {
    let home = DaemonHome::new();
    let output = home.run(&["run", "--", "sh", "-c", "echo out; echo err >&2; exit 42"]);
    assert_eq!(output.status.code(), Some(42), "{output:?}");
    assert_eq!(stdout(&output), "out\n");
    assert_eq!(stderr(&output), "err\n");
    assert_eq!(
        exec_of(&home, "exit 42"),
        (Some("failed".into()), Some(42), None, true)
    );

    let ok = home.run(&["run", "--", "true"]);
    assert!(ok.status.success());
    assert_eq!(
        exec_of(&home, "\"true\""),
        (Some("succeeded".into()), Some(0), None, true)
    );
}

#[test]
fn stdin_is_passed_through() {
    let home = DaemonHome::new();
    let mut child = home
        .corral(&["run", "--", "sh", "-c", "read line; echo got:$line"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(stdout(&output), "got:hello\n");
}

#[test]
fn a_command_that_cannot_start_exits_127() {
    let home = DaemonHome::new();
    let output = home.run(&["run", "--", "/definitely/not/a/program"]);
    assert_eq!(output.status.code(), Some(127), "{output:?}");
    let message = stderr(&output);
    assert!(
        message.contains("cannot start '/definitely/not/a/program'"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1);
    assert_eq!(
        exec_of(&home, "not/a/program"),
        (Some("failed".into()), Some(127), None, true)
    );
}

#[test]
fn a_command_killed_by_a_signal_records_that_signal() {
    let home = DaemonHome::new();
    let output = home.run(&["run", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(output.status.code(), Some(128 + 9), "{output:?}");
    assert_eq!(
        exec_of(&home, "kill -KILL"),
        (
            Some("failed".into()),
            Some(137),
            Some("SIGKILL".into()),
            true
        )
    );
}

fn process_gone(pid: i32) -> bool {
    !corral::process::is_alive(pid as u32, None)
}

fn interrupt(signal: i32, expected: i32, script: &str) {
    let home = DaemonHome::new();
    let mut child = home
        .corral(&["run", "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The script prints the pid of its background sleep once it runs.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let sleeper: i32 = line.trim().parse().expect("the script prints a pid");
    assert!(!process_gone(sleeper));
    unsafe { libc::kill(child.id() as i32, signal) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(expected));
    assert_eq!(
        exec_of(&home, "sleep 30"),
        (Some("interrupted".into()), Some(expected), None, true)
    );
    // The group was ended before corral exited; reaping by init may take a moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !process_gone(sleeper) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(process_gone(sleeper), "the sleep survived corral");
}

#[test]
fn sigint_ends_the_group_and_records_interrupted_without_a_signal_name() {
    interrupt(libc::SIGINT, 130, "sleep 30 & echo $!; wait");
}

#[test]
fn sigterm_ends_the_group_and_exits_143() {
    interrupt(libc::SIGTERM, 143, "sleep 30 & echo $!; wait");
}

#[test]
fn a_child_ignoring_sigterm_is_killed_after_the_grace_period() {
    let home = DaemonHome::new();
    home.config(&[("cancel.grace_ms", "300")]);
    let mut child = home
        .corral(&[
            "run",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 30 & echo $!; wait",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let sleeper: i32 = line.trim().parse().unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(130));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !process_gone(sleeper) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(process_gone(sleeper));
}

#[test]
fn children_inherit_their_exec_as_parent_and_sessions_mark_via_agent() {
    let home = DaemonHome::new();
    let corral = env!("CARGO_BIN_EXE_corral");
    let script = format!("'{corral}' monitor list --all --json > /dev/null");
    let output = home
        .corral(&["run", "--", "sh", "-c", &script])
        .env("CORRAL_SESSION_ID", "session-7")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    /// id, trace, parent, caller, via_agent
    type Ancestry = (String, String, Option<String>, Option<String>, bool);
    let rows: Vec<Ancestry> = home
        .store()
        .sql(
            "SELECT id, trace_id, parent_exec_id, caller_session_id, \
                    CASE WHEN via_agent <> 0 THEN 1 ELSE 0 END \
               FROM execs ORDER BY started_at, id",
        )
        .iter()
        .map(|row| {
            (
                text(&row[0]).expect("an id"),
                text(&row[1]).expect("a trace"),
                text(&row[2]),
                text(&row[3]),
                row[4] == 1,
            )
        })
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let (outer, inner) = (&rows[0], &rows[1]);
    assert_eq!(
        inner.2.as_deref(),
        Some(outer.0.as_str()),
        "child's parent is the run"
    );
    assert_eq!(inner.1, outer.0, "one trace");
    assert_eq!(outer.3.as_deref(), Some("session-7"));
    assert!(outer.4, "a session's exec is via_agent");
    // The session's id reaches the agent's own calls through the environment.
    assert_eq!(inner.3.as_deref(), Some("session-7"));
    assert!(inner.4);
}

// ---------------------------------------------------------------------------------------------
// From a terminal: an interactive bash on a pseudo-terminal, with job control, runs corral the
// way a person's shell does.

/// A pseudo-terminal with an interactive bash on it as the session leader.
struct Terminal {
    master: std::fs::File,
    output: std::sync::mpsc::Receiver<Vec<u8>>,
    /// Everything the terminal showed so far.
    seen: String,
    shell: std::process::Child,
}

/// How long the terminal may take to show what a step expects.
const TERMINAL_DEADLINE: Duration = Duration::from_secs(20);

impl Terminal {
    fn bash(home: &DaemonHome) -> Terminal {
        use std::os::unix::process::CommandExt;
        // No window size is asked for.
        let common::pty::Pair {
            master,
            slave,
            output,
        } = common::pty::open(None);
        let mut bash = common::command_in("bash", home.path());
        bash.args(["--norc", "--noprofile", "-i"])
            .env("PS1", "$ ")
            .env("TERM", "dumb")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave);
        // SAFETY: only async-signal-safe calls between fork and exec: a new session whose
        // controlling terminal is the pty on stdin, as a terminal window sets up a shell.
        unsafe {
            bash.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let shell = bash.spawn().expect("bash starts");
        Terminal {
            master,
            output,
            seen: String::new(),
            shell,
        }
    }

    /// Types `text` (a `\x1a` is Ctrl-Z).
    fn type_in(&mut self, text: &str) {
        use std::io::Write;
        self.master.write_all(text.as_bytes()).unwrap();
    }

    /// Waits until the terminal has shown `marker` (after what was expected before).
    fn expect(&mut self, marker: &str) {
        let until = Instant::now() + TERMINAL_DEADLINE;
        loop {
            if let Some(at) = self.seen.find(marker) {
                self.seen.drain(..at + marker.len());
                return;
            }
            let left = until.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(bytes) => self.seen.push_str(&String::from_utf8_lossy(&bytes)),
                Err(_) => panic!(
                    "the terminal never showed {marker:?}; it shows {:?}",
                    self.seen
                ),
            }
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Whatever is left of the shell's session (after a failure: a stopped job).
        let session = self.shell.id() as i32;
        for process in procfs::process::all_processes().unwrap().flatten() {
            if process.stat().is_ok_and(|stat| stat.session == session) {
                // A process of this test's own terminal session.
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(process.pid()),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let _ = self.shell.wait();
    }
}

#[test]
fn from_a_terminal_the_command_reads_it_and_stops_and_continues_with_the_job() {
    let home = DaemonHome::new();
    let mut terminal = Terminal::bash(&home);
    terminal.expect("$ ");
    let corral = env!("CARGO_BIN_EXE_corral");
    // The markers are computed, so that the echo of the typed line never matches them.
    terminal.type_in(&format!(
        "{corral} run -- sh -c 'echo ready:$((1+1)); read a; echo got:$a; read b; echo then:$b'\n"
    ));
    terminal.expect("ready:2");
    // The command reads the terminal: it has it, not corral's group.
    terminal.type_in("hello\n");
    terminal.expect("got:hello");
    // Ctrl-Z stops the command, and corral with it: the shell sees the job stop.
    terminal.type_in("\x1a");
    terminal.expect("Stopped");
    terminal.expect("$ ");
    // `fg` continues corral, which lends the terminal again and continues the command.
    terminal.type_in("fg\n");
    terminal.type_in("again\n");
    terminal.expect("then:again");
    terminal.type_in("echo status:$?\n");
    terminal.expect("status:0");
    assert_eq!(
        exec_of(&home, "echo ready"),
        (Some("succeeded".into()), Some(0), None, true)
    );
    // Inside a pipeline corral keeps the terminal with the job: the pipeline's last program
    // reads it while corral's command still runs (it starts reading once corral has started).
    terminal.type_in(&format!(
        "{corral} run -- sh -c 'sleep 1; echo x' | sh -c 'sleep 0.3; read a </dev/tty; echo piped:$((40+2)):$a'\n"
    ));
    terminal.type_in("hello\n");
    terminal.expect("piped:42:hello");
    terminal.expect("$ ");
    terminal.type_in("exit\n");
    let (sender, receiver) = std::sync::mpsc::channel();
    let pid = terminal.shell.id();
    std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: waits for the test's own child.
        unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        let _ = sender.send(status);
    });
    receiver
        .recv_timeout(TERMINAL_DEADLINE)
        .expect("the shell exits");
}
