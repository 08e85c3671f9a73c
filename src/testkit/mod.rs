//! What corral's tests and benchmarks share, as a part of the library that only the `testkit`
//! feature builds (the crate is its own dev-dependency with that feature, so `tests/` and
//! `examples/` both use it, and neither includes the other's files): a temporary home and the
//! built `corral` binary in it ([`Home`]), a home with a real daemon ([`daemon::DaemonHome`]),
//! the real engine CLIs in private environments ([`engines`]), a real PostgreSQL ([`store`]: a
//! database per test home, the skip rule when there is none), headless Chromium
//! ([`browser`]), the kill-9 loop ([`crash_loop`]), the protocol fuzzer ([`fuzz`]) and mock
//! model servers ([`mock_models`], [`mock_responses`]).
//!
//! Not part of corral's interface: it may change with any test.

pub mod browser;
pub mod crash_loop;
pub mod daemon;
pub mod engines;
pub mod fuzz;
pub mod mock_models;
pub mod mock_responses;
pub mod store;

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use rusqlite::Connection;

/// A temporary `CORRAL_HOME`, removed with everything in it when dropped.
pub struct Home {
    dir: tempfile::TempDir,
}

/// A temporary directory that is its user's alone (0700), as corral makes a home: one made
/// looser by the umask would be tightened by the first command, which says so on stderr.
pub fn private_dir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

impl Default for Home {
    fn default() -> Self {
        Self::new()
    }
}

impl Home {
    pub fn new() -> Self {
        Home { dir: private_dir() }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn db_path(&self) -> PathBuf {
        self.path().join("corral.db")
    }

    /// `corral ARGS…` in this home (see [`corral_in`]).
    pub fn corral(&self, args: &[&str]) -> Command {
        corral_in(self.path(), args)
    }

    /// Runs `corral ARGS…` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.corral(args).output().expect("corral runs")
    }

    /// Runs `corral ARGS…`, asserts success and parses stdout as JSON.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let output = self.run(args);
        assert!(output.status.success(), "{args:?}: {output:?}");
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("{args:?} printed no JSON ({error}): {output:?}"))
    }

    /// Creates the store the way a user would: by running a command.
    pub fn init_store(&self) {
        let output = self.run(&["monitor", "list", "--all"]);
        assert!(output.status.success(), "{output:?}");
    }

    /// A direct connection to the store, for setting up and checking rows.
    pub fn db(&self) -> Connection {
        let connection = Connection::open(self.db_path()).expect("the store opens");
        connection
            .busy_timeout(std::time::Duration::from_secs(5))
            .unwrap();
        connection
    }

    /// The schema text, to check that a command did not migrate the store.
    pub fn schema(&self) -> String {
        self.db()
            .query_row(
                "SELECT group_concat(sql) FROM (SELECT sql FROM sqlite_master ORDER BY name)",
                [],
                |row| row.get(0),
            )
            .unwrap()
    }
}

/// `corral ARGS…` with `home` as its home, run from the home (outside any repository), with
/// no corral variable inherited from the environment the tests run in.
pub fn corral_in(home: &Path, args: &[&str]) -> Command {
    let mut command = command_in(binary("corral"), home);
    command.args(args);
    command
}

/// `program` as [`corral_in`] runs corral: from `home`, with `home` as its `CORRAL_HOME` and
/// no other corral variable of the tests' environment (a shell that runs corral, say), and no
/// session bus: a test's daemon tells no desktop of the machine (`notify.desktop` is `auto`).
pub fn command_in(program: impl AsRef<OsStr>, home: &Path) -> Command {
    let mut command = Command::new(program);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("CORRAL_") {
            command.env_remove(key);
        }
    }
    command.env_remove("DBUS_SESSION_BUS_ADDRESS");
    command.current_dir(home).env("CORRAL_HOME", home);
    command
}

/// Spawns `command` with its stdin, stdout and stderr piped, writes `input` to its stdin from a
/// thread (an input larger than a pipe holds would otherwise wait on a child that waits for
/// its output to be read), and collects the output with `wait`. The writing must have
/// succeeded.
pub fn output_with_stdin(
    mut command: Command,
    input: &str,
    wait: impl FnOnce(Child) -> Output,
) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{:?} does not start: {error}", command.get_program()));
    let mut pipe = child.stdin.take().unwrap();
    let input = input.to_string();
    let writer = std::thread::spawn(move || pipe.write_all(input.as_bytes()));
    let output = wait(child);
    writer.join().unwrap().unwrap();
    output
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `name` (`corral`, `corral-fake-engine`, `corral-shim`) as cargo built it for the profile of
/// the running test or example: both live under `target/<profile>/` (`deps/` or `examples/`),
/// and cargo builds a package's binaries before its integration tests run. Panics with the
/// line of [`built`] when it is missing.
pub fn binary(name: &str) -> PathBuf {
    built(name).unwrap_or_else(|missing| panic!("{missing}"))
}

/// [`binary`], or the line that says it is missing (an example run before `cargo build` of its
/// profile), for a caller that says it its own way.
pub fn built(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|error| format!("the running program: {error}"))?;
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the running program is not under target/<profile>/")?;
    let path = profile.join(name);
    match path.is_file() {
        true => Ok(path),
        false => Err(format!(
            "{} is missing: build the binaries of this profile first (cargo build)",
            path.display()
        )),
    }
}
