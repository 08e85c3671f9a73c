//! Faults at the disk while runs are live (the chaos suite): the daemon stays up, says what is
//! wrong, stores what it held once the fault clears, and loses nothing it had acknowledged.
//! The home is a small tmpfs of its own (mounting one needs root, as CI has; elsewhere the
//! tests skip, saying why).

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common;
use common::daemon::{alive, wait_until};

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// A tmpfs of `size` mounted on a directory of its own, unmounted when dropped.
struct Tmpfs {
    _scratch: tempfile::TempDir,
    path: PathBuf,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("home");
        std::fs::create_dir(&path).unwrap();
        let mounted = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "none",
            ])
            .arg(&path)
            .output();
        match mounted {
            Ok(output) if output.status.success() => Some(Tmpfs {
                _scratch: scratch,
                path,
            }),
            other => {
                assert!(
                    std::env::var_os("CI").is_none_or(|value| value.is_empty()),
                    "CI mounts a tmpfs: {other:?}"
                );
                println!("skipping: cannot mount a tmpfs here ({other:?})");
                None
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .output();
    }
}

/// Fills the filesystem of `dir` with a file of zeros until it is full: the file.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    let block = vec![0u8; 64 * 1024];
    while file.write_all(&block).is_ok() {}
    // The last bytes a block did not fit.
    while file.write_all(&[0u8; 512]).is_ok() {}
    filler
}

fn run(home: &Path, args: &[&str]) -> Output {
    common::corral_in(home, args).output().unwrap()
}

fn ok(home: &Path, args: &[&str]) -> String {
    let output = run(home, args);
    assert!(output.status.success(), "corral {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json(home: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(home, args)).unwrap()
}

/// The disk fills while a turn streams its steps: the daemon stays up and says the store
/// refuses writes because the disk is full; once there is room again it stores what it held,
/// and the turn ends done, every step stored once, in order.
#[test]
fn a_full_disk_while_a_turn_streams_loses_nothing_and_the_daemon_stays_up() {
    let Some(disk) = Tmpfs::mount("24m") else {
        return;
    };
    let home = disk.path.as_path();
    let work = tempfile::tempdir().unwrap();
    ok(home, &["daemon", "start"]);
    let daemon: i32 = std::fs::read_to_string(home.join("daemon.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    ok(home, &["config", "set", "engines.fake.path", FAKE]);
    ok(
        home,
        &["project", "add", "p", work.path().to_str().unwrap()],
    );
    ok(
        home,
        &["session", "new", "p", "--engine", "fake", "--title", "s"],
    );
    ok(
        home,
        &[
            "send",
            "s",
            "@fake deltas=40\n@fake interval=100\n@fake answer=Kept.\nstream",
        ],
    );
    let steps = |home: &Path| -> usize {
        ok(home, &["watch", "s", "--json"])
            .lines()
            .filter(|line| line.contains("\"step "))
            .count()
    };
    wait_until("a few steps are stored", || steps(home) >= 5);
    let filler = fill(home);
    // The store refuses writes for now, and says why; the daemon waits it out.
    let mut said = Value::Null;
    wait_until("status says the disk is full", || {
        said = json(home, &["status", "--json"]);
        said["store"]["refusing_writes"]
            .as_str()
            .is_some_and(|why| why.contains("full"))
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(alive(daemon), "the daemon stays up on a full disk");
    std::fs::remove_file(&filler).unwrap();
    wait_until("the prompt ends", || {
        json(home, &["history", "s", "--json"])["prompts"][0]["status"] != "running"
    });
    assert!(alive(daemon), "the same daemon: {said}");
    let history = json(home, &["history", "s", "--json"]);
    assert_eq!(history["prompts"][0]["status"], "done", "{history}");
    assert_eq!(history["prompts"][0]["answer"], "Kept.", "{history}");
    assert_eq!(history["runs"].as_array().unwrap().len(), 1, "{history}");
    let events: Vec<Value> = ok(home, &["watch", "s", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let seqs: Vec<i64> = events.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>(), "no hole");
    let stepped: Vec<String> = events
        .iter()
        .map(|event| event["payload"].to_string())
        .filter(|payload| payload.contains("step "))
        .collect();
    assert_eq!(stepped.len(), 40, "every step once: {stepped:?}");
    for (index, step) in stepped.iter().enumerate() {
        assert!(
            step.contains(&format!("step {}\"", index + 1)),
            "{stepped:?}"
        );
    }
    ok(home, &["daemon", "stop"]);
}

/// A page of the store damaged while a turn streams (a page of the projects' table, written
/// over on the disk): the daemon stays up, a command that meets the damage fails with one
/// line naming the repair (sqlite3's `.recover`), and the turn, whose writes do not touch
/// that page, ends done with every step stored.
#[test]
fn a_damaged_page_while_a_turn_streams_is_named_with_its_repair_and_the_daemon_stays_up() {
    let home = common::daemon::DaemonHome::new();
    if home.store().is_postgres() {
        println!("skipped: a damaged page is SQLite's file's");
        return;
    }
    let session = home.fake_session(FAKE, "s", &[]);
    home.ok(&[
        "send",
        &session,
        "@fake deltas=30\n@fake interval=100\nstream",
    ]);
    let daemon = home.daemon_pid().unwrap();
    let db = home.path().join("corral.db");
    // Everything in the file itself, then the projects' table's first page written over.
    let checkpoint = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg("PRAGMA wal_checkpoint(TRUNCATE)")
        .output()
        .expect("sqlite3 (CI installs it)");
    assert!(checkpoint.status.success(), "{checkpoint:?}");
    let root: i64 = home.sql("SELECT rootpage FROM sqlite_master WHERE name = 'projects'")[0][0]
        .as_i64()
        .unwrap();
    {
        use std::io::{Seek, Write};
        let mut file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
        file.seek(std::io::SeekFrom::Start((root as u64 - 1) * 4096))
            .unwrap();
        file.write_all(&[0xde; 4096]).unwrap();
    }
    let output = home.run(&["project", "list"]);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("malformed") && said.contains(".recover"),
        "{said}"
    );
    // (Read from the store's other tables: the commands that name a session read the
    // damaged one.)
    let status = || {
        home.sql(&format!(
            "SELECT status FROM prompts WHERE session_id = '{session}'"
        ))[0][0]
            .clone()
    };
    wait_until("the turn ends", || status() != "running");
    assert!(alive(daemon), "the daemon stays up");
    assert_eq!(status(), "done");
    let steps = home.sql(&format!(
        "SELECT count(*) FROM events WHERE session_id = '{session}' AND payload LIKE '%step %'"
    ));
    assert_eq!(steps[0][0], 30);
}
