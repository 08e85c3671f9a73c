//! A home with a real daemon, driven through the built `corral` binary as a user would, for
//! the tests of the CLI as the daemon's client (`tests/it/cli.rs`, `tests/it/connect.rs`). A home
//! stops its daemon when dropped, and kills whatever of it is left, so a failed test leaves
//! no process behind.
//!
//! Under `CORRAL_TEST_STORE=postgres` (`.ci/run`'s second pass) every home gets a PostgreSQL
//! database of its own, named in `HOME/config` ([`super::store::for_home`]), dropped after
//! the daemon stopped; [`DaemonHome::on_postgres`] is a home on PostgreSQL whatever that says.
//! A benchmark's home stays on SQLite unless it is run with that variable.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any one step may take before the test fails instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A temporary home with a project directory `work` in it, and the daemon it may have.
pub struct DaemonHome {
    dir: tempfile::TempDir,
    /// The home's PostgreSQL database, if its store is one. A field, so dropped after
    /// [`Drop::drop`] stopped the daemon.
    database: Option<super::store::TestDatabase>,
}

impl Default for DaemonHome {
    fn default() -> Self {
        Self::new()
    }
}

impl DaemonHome {
    /// A home on the store of the test pass: SQLite, or under `CORRAL_TEST_STORE=postgres` a
    /// database of its own.
    pub fn new() -> Self {
        let dir = Self::directory();
        DaemonHome {
            database: super::store::for_home(dir.path()),
            dir,
        }
    }

    /// A home on PostgreSQL, for the tests that are about it; `None` when the test is to skip
    /// (printed; see [`super::store::postgres_admin_url`]).
    pub fn on_postgres() -> Option<Self> {
        let dir = Self::directory();
        let database = super::store::on_postgres(dir.path())?;
        Some(DaemonHome {
            database: Some(database),
            dir,
        })
    }

    fn directory() -> tempfile::TempDir {
        // Its user's alone, as corral makes a home (a looser one would be tightened by the
        // first command, which says so on stderr).
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("work")).unwrap();
        dir
    }

    /// The PostgreSQL URL in `HOME/config` (password included), or `None` on SQLite.
    pub fn store_url(&self) -> Option<&str> {
        self.database.as_ref().map(|database| database.url.as_str())
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The project directory.
    pub fn work(&self) -> PathBuf {
        self.path().join("work")
    }

    /// `corral ARGS…` in this home (see [`super::corral_in`]), stdin closed.
    pub fn corral(&self, args: &[&str]) -> Command {
        let mut command = super::corral_in(self.path(), args);
        command.stdin(Stdio::null());
        command
    }

    /// Runs `corral ARGS…` to its end (at most [`DEADLINE`]); its output.
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self
            .corral(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("corral starts");
        finish(child)
    }

    /// Runs a command that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        succeeded(args, &self.run(args))
    }

    /// Runs a command that must succeed and print JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        printed_json(args, &self.ok(args))
    }

    /// Runs a command that must fail with `code`; its stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        failed_with(args, &self.run(args), code)
    }

    /// Prompt `id` of `session`, as `history --json` shows it.
    pub fn prompt_of(&self, session: &str, id: &str) -> Value {
        let history = self.json(&["history", session, "--json"]);
        history["prompts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|prompt| prompt["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no prompt {id} in {history}"))
    }

    /// The state of `session` as `session show --json` says it (`state`, `reason`,
    /// `next_action`).
    pub fn state_of(&self, session: &str) -> Value {
        self.json(&["session", "show", session, "--json"])["state"].clone()
    }

    /// Blocks until prompt `id` ends (`corral wait`, a minute at most): its exit code, 0 done,
    /// 1 failed, 4 cancelled.
    pub fn wait_prompt(&self, id: &str) -> i32 {
        let waited = self.run(&["wait", id, "--timeout", "60s"]);
        waited.status.code().expect("corral wait exits")
    }

    /// The runs of prompt `id` of `session`, in order, as `history --json` shows them.
    pub fn runs_of(&self, session: &str, id: &str) -> Vec<Value> {
        self.json(&["history", session, "--json"])["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|run| run["prompt_id"] == id)
            .cloned()
            .collect()
    }

    /// `corral config set NAME VALUE` for each setting, in order; each must succeed.
    pub fn config(&self, settings: &[(&str, &str)]) {
        for (name, value) in settings {
            self.ok(&["config", "set", name, value]);
        }
    }

    /// `corral project add NAME DIR --engine ENGINE`, which must succeed.
    pub fn add_project(&self, name: &str, dir: &Path, engine: &str) {
        let dir = dir.to_str().expect("temporary paths are UTF-8");
        self.ok(&["project", "add", name, dir, "--engine", engine]);
    }

    /// `corral session new ARGS… --json`, which must succeed: the new session's id.
    pub fn new_session(&self, args: &[&str]) -> String {
        let mut command = vec!["session", "new"];
        command.extend(args);
        command.push("--json");
        let session = self.json(&command);
        session["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{command:?} printed no session id: {session}"))
            .to_string()
    }

    /// `fake` (the bundled fake engine's path) as engine `fake`, `settings`, a project `p`
    /// (the `work` directory) on it, and a session of it titled `title`: the session's id.
    pub fn fake_session(&self, fake: &str, title: &str, settings: &[(&str, &str)]) -> String {
        self.config(&[("engines.fake.path", fake)]);
        self.config(settings);
        self.add_project("p", &self.work(), "fake");
        self.new_session(&["p", "--title", title])
    }

    /// `corral daemon --detach`.
    pub fn start_daemon(&self) {
        let out = self.ok(&["daemon", "--detach"]);
        assert!(out.contains("corral daemon started"), "{out}");
        assert!(self.daemon_pid().is_some());
    }

    pub fn daemon_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.path().join("daemon.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse().ok())
    }

    /// SIGTERM to the daemon, then waits until it and every process of this home are gone,
    /// and checks that it removed its socket.
    pub fn stop_daemon(&self) {
        if let Some(pid) = self.daemon_pid() {
            kill(pid, libc::SIGTERM);
            wait_until("the daemon exits", || !alive(pid));
        }
        wait_until("no process of the home is left", || {
            processes_of(self.path()).is_empty()
        });
        assert!(!self.path().join("corral.sock").exists());
    }

    /// The store, for reading what the daemon recorded (SQLite only: the files of the second
    /// pass use [`DaemonHome::sql`], which reads either store).
    pub fn db(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.path().join("corral.db")).unwrap()
    }

    /// The home's store on either backend (see [`super::store::HomeStore`]).
    pub fn store(&self) -> super::store::HomeStore<'_> {
        super::store::HomeStore::of(self.path(), self.store_url())
    }

    /// The rows of `query` on the home's store, whichever it is, each column as JSON.
    pub fn sql(&self, query: &str) -> Vec<Vec<Value>> {
        self.store().sql(query)
    }

    /// Runs one statement on the home's store, whichever it is: the rows it changed.
    pub fn execute(&self, statement: &str) -> u64 {
        self.store().execute(statement)
    }
}

impl Drop for DaemonHome {
    fn drop(&mut self) {
        // A failed test still stops its daemon (and kills it when it does not stop).
        if let Some(pid) = self.daemon_pid() {
            kill(pid, libc::SIGTERM);
            let until = Instant::now() + Duration::from_secs(10);
            while alive(pid) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(20));
            }
            if alive(pid) {
                kill(pid, libc::SIGKILL);
            }
        }
        for pid in processes_of(self.path()) {
            kill(pid, libc::SIGKILL);
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The output of `corral ARGS…`, which must have succeeded: its stdout.
pub fn succeeded(args: &[&str], output: &Output) -> String {
    assert!(
        output.status.success(),
        "{args:?} failed ({:?}): {}\nstdout: {}",
        output.status,
        text(&output.stderr),
        text(&output.stdout)
    );
    text(&output.stdout)
}

/// What `corral ARGS…` printed, which must be JSON.
pub fn printed_json(args: &[&str], printed: &str) -> Value {
    serde_json::from_str(printed)
        .unwrap_or_else(|error| panic!("{args:?} printed no JSON ({error}): {printed}"))
}

/// The output of `corral ARGS…`, which must have failed with `code`: its stderr.
pub fn failed_with(args: &[&str], output: &Output, code: i32) -> String {
    assert_eq!(
        output.status.code(),
        Some(code),
        "{args:?}: stdout {} stderr {}",
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stderr)
}

/// Waits for a child whose output is read elsewhere (its pipes taken); fails the test (and
/// kills the child) after [`DEADLINE`].
pub fn wait_for(child: &mut Child) -> std::process::ExitStatus {
    let until = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("a corral command did not end within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for a child's output, failing the test (and killing the child) after [`DEADLINE`].
pub fn finish(child: Child) -> Output {
    let pid = child.id() as i32;
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    match receiver.recv_timeout(DEADLINE) {
        Ok(output) => output.expect("the child's output"),
        Err(_) => {
            kill(pid, libc::SIGKILL);
            panic!("a corral command did not end within {DEADLINE:?}");
        }
    }
}

pub fn kill(pid: i32, signal: i32) {
    // SAFETY: kill on a pid a test started or read from its own home.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Waits until `condition` holds, failing the test after [`DEADLINE`]. For what no
/// notification tells a test about: another process's exit, a file appearing.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let until = Instant::now() + DEADLINE;
    while !condition() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a process exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    crate::process::is_alive(pid as u32, None)
}

/// Live processes whose environment names `home` as their CORRAL_HOME: the daemon, the CLIs
/// and the engine children of a test.
pub fn processes_of(home: &Path) -> Vec<i32> {
    crate::process::find_by_env("CORRAL_HOME", &home.to_string_lossy())
        .into_iter()
        .filter(|&pid| alive(pid))
        .collect()
}

/// What runs in `home` beside its daemon: [`processes_of`] less the daemon itself and, on a
/// shared store, its lease guard (`corral __lease-guard`, which lives as long as it does).
pub fn beside_the_daemon(home: &DaemonHome) -> Vec<i32> {
    processes_of(home.path())
        .into_iter()
        .filter(|&pid| Some(pid) != home.daemon_pid())
        .filter(|&pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            !String::from_utf8_lossy(&cmdline).contains("__lease-guard")
        })
        .collect()
}

/// Reads `lines` (from [`lines_of`]) until `pick` gives something for one, for at most
/// [`DEADLINE`]: that, with the lines read before it; else (the time is up or the lines ended)
/// every line read, for the test's message.
pub fn next_line<T>(
    lines: &mpsc::Receiver<String>,
    mut pick: impl FnMut(&str) -> Option<T>,
) -> Result<(T, Vec<String>), Vec<String>> {
    let until = Instant::now() + DEADLINE;
    let mut seen = Vec::new();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                if let Some(found) = pick(&line) {
                    return Ok((found, seen));
                }
                seen.push(line);
            }
            Err(_) => return Err(seen),
        }
    }
}

/// Reads a pipe's lines on a thread; they arrive on the channel.
pub fn lines_of(pipe: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}
