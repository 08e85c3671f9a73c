//! The CLI's manners (issue #11, items 7 and 8), through the built binary in temporary homes:
//! output to a closed pipe ends quietly; the short ids tables show are unique prefixes that
//! `show` resolves; a newline in an argument never breaks a row; `corral --home DIR top` is
//! live; `monitor prune --json` reports the state after pruning; `monitor --live --json` is
//! NDJSON; an empty `CORRAL_HOME=` means unset; the daemon's exec is a child of the exec that
//! started it; and long prompts fail clearly (`send`, `attach`, the library), with any answer
//! of id null ending the client's wait.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::process::{Command, Output, Stdio};

use common::daemon::{finish, kill, lines_of, next_line, DaemonHome};
use common::library::{actix_test, Library};
use common::store::{quoted, HomeStore};
use common::{output_with_stdin, stderr, stdout, Home};
use corral::protocol::MAX_LINE;
use corral::store::projects::NewProject;
use corral::store::prompts::NewPrompt;
use corral::CorralError;
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// `daemon --detach` beside the daemon that serves the home: one line naming the pid that
/// holds the home, with `corral:` once (the started daemon's own error was quoted whole,
/// prefix and all), exit 1; the daemon that serves is left as it was.
#[test]
fn a_second_detached_daemon_is_refused_in_one_line() {
    let home = DaemonHome::new();
    home.start_daemon();
    let pid = home.daemon_pid().expect("the daemon's pid");
    let line = home.fails(&["daemon", "--detach"], 1);
    assert_eq!(line.trim_end().lines().count(), 1, "{line}");
    assert_eq!(line.matches("corral:").count(), 1, "{line}");
    assert!(line.contains(&format!("pid {pid}")), "{line}");
    assert_eq!(home.daemon_pid(), Some(pid));
    home.ok(&["status"]);
    home.stop_daemon();
}

/// A home with the fake engine, a project `p`, a session titled `s` with one prompt done;
/// the daemon stopped. The session's id.
fn home_with_history() -> (DaemonHome, String) {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "s", &[]);
    home.ok(&["send", "s", "--wait", "hello"]);
    home.stop_daemon();
    (home, session)
}

/// Runs `command` with its stdout a pipe nobody reads any more (its reading end is closed
/// before the command starts, so its first line of output meets a closed pipe).
fn into_closed_pipe(mut command: Command) -> Output {
    let mut ends = [0; 2];
    // SAFETY: pipe fills the two descriptors, owned here alone from now on.
    let (reader, writer) = unsafe {
        assert_eq!(libc::pipe(ends.as_mut_ptr()), 0);
        (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1]))
    };
    drop(reader);
    let child = command
        .stdout(writer)
        .stderr(Stdio::piped())
        .spawn()
        .expect("corral starts");
    finish(child)
}

#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let (home, session) = home_with_history();
    let exec_id = text(&home.store().value("SELECT id FROM execs LIMIT 1"));
    let commands: Vec<Vec<&str>> = vec![
        vec!["history", "s"],
        vec!["history", "s", "--json"],
        vec!["watch", "s"],
        vec!["watch", "s", "--json"],
        vec!["session", "list"],
        vec!["session", "show", &session],
        vec!["project", "list"],
        vec!["config", "list"],
        vec!["monitor"],
        vec!["monitor", "--json"],
        vec!["monitor", "list", "--all"],
        vec!["monitor", "show", &exec_id],
        vec!["ps"],
        vec!["completions", "bash"],
        vec!["--help"],
    ];
    for args in &commands {
        let output = into_closed_pipe(home.corral(args));
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        assert_eq!(stderr(&output), "", "{args:?} said something");
    }
    // The same through a daemon, for the commands that ask one.
    home.start_daemon();
    for args in [&["history", "s"][..], &["watch", "s"], &["session", "list"]] {
        let output = into_closed_pipe(home.corral(args));
        assert_eq!(output.status.code(), Some(0), "{args:?}: {output:?}");
        assert_eq!(stderr(&output), "", "{args:?} said something");
    }
    home.stop_daemon();
    // Each was recorded as a command that did its job; none as a panic.
    let panics = home
        .store()
        .value("SELECT count(*) FROM execs WHERE exit_code = 101 OR outcome = 'failed'");
    assert_eq!(panics, 0);
}

/// The first column of a table's rows that begin with `prefix` (the ids it shows).
fn shown_ids(table: &str, prefix: &str) -> Vec<String> {
    table
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with(prefix))
        .map(|line| line.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// Inserts a copy of row `id` of `table` under each of `copies` (a fixture written by the
/// test: ids that UUIDv7 makes in one millisecond); `set` gives more columns of the copy
/// (unique ones) their values, in SQL, where `COPY` stands for the copy's id.
fn copy_row(store: &HomeStore, table: &str, id: &str, copies: &[&str], set: &[(&str, &str)]) {
    let columns = store.columns(table);
    for copy in copies {
        let values: Vec<String> = columns
            .iter()
            .map(|column| match set.iter().find(|(name, _)| name == column) {
                _ if column == "id" => quoted(copy),
                Some((_, value)) => value.replace("COPY", copy),
                None => column.clone(),
            })
            .collect();
        store.execute(&format!(
            "INSERT INTO {table} ({}) SELECT {} FROM {table} WHERE id = {}",
            columns.join(", "),
            values.join(", "),
            quoted(id)
        ));
    }
}

/// A text column's value.
fn text(value: &Value) -> String {
    value
        .as_str()
        .unwrap_or_else(|| panic!("text expected: {value}"))
        .to_string()
}

#[test]
fn short_exec_ids_are_unique_prefixes_that_show_resolves() {
    let home = Home::new();
    home.init_store();
    // Three execs of one millisecond: two share 23 characters, the third 19.
    let ids = [
        "01a231b0-4a92-76d6-8c90-dab8c0976ae6",
        "01a231b0-4a92-76d6-8c90-f00000000001",
        "01a231b0-4a92-76d6-9000-000000000000",
    ];
    let db = home.db();
    for id in ids {
        db.execute(
            "INSERT INTO execs (id, trace_id, command, started_at, completed_at, exit_code, \
             outcome) VALUES (?1, ?1, '[\"corral\",\"x\"]', 1796000000000, 1796000000001, 0, \
             'succeeded')",
            [id],
        )
        .unwrap();
    }
    let table = stdout(&home.run(&["monitor", "list", "--all"]));
    let shown = shown_ids(&table, "01a231b0-4a92");
    assert_eq!(shown.len(), 3, "{table}");
    let mut distinct = shown.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "short ids repeat: {table}");
    assert!(shown.iter().all(|short| short.len() >= 18));
    for short in &shown {
        let exec = home.json(&["monitor", "show", short, "--json"]);
        let id = exec["id"].as_str().unwrap();
        assert!(
            id.starts_with(short.as_str()) && ids.contains(&id),
            "{short}: {exec}"
        );
    }
    // Rows stay aligned: every row's second column starts where the header's does.
    let header = table.lines().next().unwrap();
    let column = header.find("STARTED").unwrap();
    for line in table
        .lines()
        .filter(|line| line.starts_with("01a231b0-4a92"))
    {
        assert!(line[column..].starts_with("2026-"), "{line}\n{header}");
    }
}

#[test]
fn short_session_ids_are_unique_prefixes_that_show_resolves() {
    let (home, session) = home_with_history();
    // Two more sessions whose ids share 30 characters with each other.
    let copies = [
        "01a231b0-4a92-76d6-8c90-dab8c0976ae6",
        "01a231b0-4a92-76d6-8c90-dab8c0976af7",
    ];
    copy_row(&home.store(), "sessions", &session, &copies, &[]);
    let list = stdout(&home.run(&["session", "list"]));
    let overview = stdout(&home.run(&["monitor", "--all"]));
    let mut all = vec![session.as_str()];
    all.extend(copies);
    for table in [&list, &overview] {
        let shown: Vec<String> = table
            .lines()
            .filter_map(|line| line.split_whitespace().next())
            .filter(|word| {
                all.iter()
                    .any(|id| id.starts_with(word) && word.len() >= 18)
            })
            .map(str::to_string)
            .collect();
        assert_eq!(shown.len(), 3, "{table}");
        for short in &shown {
            let matching: Vec<&&str> = all
                .iter()
                .filter(|id| id.starts_with(short.as_str()))
                .collect();
            assert_eq!(matching.len(), 1, "{short} is not unique: {table}");
            let shown = home.json(&["session", "show", short, "--json"]);
            assert_eq!(shown["session"]["id"], *matching[0], "{short}");
        }
    }
}

#[test]
fn short_project_ids_are_unique_prefixes_that_show_resolves() {
    let (home, _) = home_with_history();
    let project = text(&home.store().value("SELECT id FROM projects"));
    let copies = [
        "01a231b0-4a92-76d6-8c90-dab8c0976ae6",
        "01a231b0-4a92-76d6-8c90-dab8c0976af7",
    ];
    // Names and paths are unique: the copies get their own.
    let set = [("name", "'COPY'"), ("path", "'/nowhere/COPY'")];
    copy_row(&home.store(), "projects", &project, &copies, &set);
    let list = stdout(&home.run(&["project", "list"]));
    let shown = shown_ids(&list, "01a231b0-4a92");
    assert_eq!(shown.len(), 2, "{list}");
    assert_ne!(shown[0], shown[1], "{list}");
    for short in &shown {
        let shown = home.json(&["project", "show", short, "--json"]);
        assert!(
            copies.contains(&shown["id"].as_str().unwrap()),
            "{short}: {shown}"
        );
        assert!(shown["id"].as_str().unwrap().starts_with(short.as_str()));
    }
}

#[test]
fn a_newline_in_an_argument_does_not_break_a_row() {
    let home = Home::new();
    let output = home.run(&["run", "--", "true", "two\nlines", "tab\there"]);
    assert!(output.status.success(), "{output:?}");
    let table = stdout(&home.run(&["monitor", "list", "--all"]));
    let rows: Vec<&str> = table.lines().collect();
    // The header, this listing, and the run.
    assert_eq!(rows.len(), 3, "{table}");
    assert!(
        rows[2].ends_with("run -- true two\\nlines tab\\there"),
        "{table}"
    );
    let shown = stdout(&home.run(&["monitor", "show", rows[2].split(' ').next().unwrap()]));
    assert!(shown.contains("true two\\nlines tab\\there\n"), "{shown}");
}

#[test]
fn top_with_home_before_it_is_live() {
    let home = Home::new();
    home.init_store();
    let pair = common::pty::open(Some((40, 120)));
    let mut command = Command::new(env!("CARGO_BIN_EXE_corral"));
    command
        .env_remove("CORRAL_HOME")
        .arg("--home")
        .arg(home.path())
        .arg("top")
        .current_dir(home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::from(pair.slave.try_clone().unwrap()))
        .stderr(Stdio::piped());
    let child = command.spawn().expect("corral starts");
    drop(pair.slave);
    // A live top redraws under a title line; a one-shot overview has none.
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + common::daemon::DEADLINE;
    while String::from_utf8_lossy(&seen).matches("corral top").count() < 2 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match pair.output.recv_timeout(left) {
            Ok(piece) => seen.extend(piece),
            Err(_) => panic!(
                "no two redraws: {:?}",
                String::from_utf8_lossy(&seen).into_owned()
            ),
        }
    }
    kill(child.id() as i32, libc::SIGINT);
    let output = finish(child);
    assert_eq!(output.status.code(), Some(130), "{output:?}");
}

#[test]
fn prune_json_reports_the_execs_as_pruning_left_them() {
    let home = Home::new();
    home.init_store();
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    let id = "01a231b0-4a92-76d6-8c90-dab8c0976ae6";
    home.db()
        .execute(
            "INSERT INTO execs (id, trace_id, command, pid, started_at) \
             VALUES (?1, ?1, '[\"corral\",\"x\"]', ?2, 1796000000000)",
            rusqlite::params![id, pid],
        )
        .unwrap();
    let dry = home.json(&["monitor", "prune", "--dry-run", "--json"]);
    assert_eq!(dry["pruned"], 0, "{dry}");
    assert_eq!(dry["candidates"][0]["outcome"], Value::Null, "{dry}");
    let report = home.json(&["monitor", "prune", "--json"]);
    assert_eq!(report["pruned"], 1, "{report}");
    let exec = &report["candidates"][0];
    assert_eq!(exec["id"], id);
    assert_eq!(exec["outcome"], "lost", "{report}");
    assert!(exec["completed_at"].is_i64(), "{report}");
}

#[test]
fn live_json_is_one_snapshot_per_line() {
    let home = Home::new();
    home.init_store();
    let mut child = home
        .corral(&["monitor", "--live", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = lines_of(child.stdout.take().unwrap());
    for _ in 0..2 {
        let (snapshot, before) = next_line(&lines, |line| serde_json::from_str::<Value>(line).ok())
            .unwrap_or_else(|seen| panic!("no JSON line: {seen:?}"));
        assert!(before.is_empty(), "lines that are not JSON: {before:?}");
        assert!(
            snapshot["items"].is_array() && snapshot["active"].is_object(),
            "{snapshot}"
        );
    }
    kill(child.id() as i32, libc::SIGINT);
    let output = finish(child);
    assert_eq!(output.status.code(), Some(130), "{output:?}");
}

#[test]
fn an_empty_corral_home_means_unset() {
    let home = Home::new();
    let state = tempfile::tempdir().unwrap();
    let output = home
        .corral(&["monitor", "list", "--all"])
        .env("CORRAL_HOME", "")
        .env("XDG_STATE_HOME", state.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(state.path().join("corral/corral.db").exists());
    assert!(!home.db_path().exists());
}

/// The execs whose argv ends with `tail`, as (id, parent_exec_id, trace_id), oldest first.
fn execs_ending(store: &HomeStore, tail: &[&str]) -> Vec<(String, Option<String>, String)> {
    store
        .sql("SELECT id, parent_exec_id, trace_id, command FROM execs ORDER BY started_at, id")
        .into_iter()
        .filter(|row| {
            let argv: Vec<String> = serde_json::from_str(&text(&row[3])).unwrap();
            argv.ends_with(&tail.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        })
        .map(|row| {
            (
                text(&row[0]),
                row[1].as_str().map(str::to_string),
                text(&row[2]),
            )
        })
        .collect()
}

#[test]
fn the_daemon_exec_is_a_child_of_the_exec_that_started_it() {
    let home = DaemonHome::new();
    // Auto-started by a command that changes something.
    home.ok(&["config", "set", "daemon.autostart", "true"]);
    home.stop_daemon();
    home.start_daemon();
    home.stop_daemon();
    let store = home.store();
    let starters = [
        execs_ending(&store, &["config", "set", "daemon.autostart", "true"]),
        execs_ending(&store, &["daemon", "--detach"]),
    ];
    let daemons = execs_ending(&store, &["daemon"]);
    assert_eq!(daemons.len(), 2, "{daemons:?}");
    for (starter, daemon) in starters.iter().zip(&daemons) {
        let (starter_id, _, starter_trace) = &starter[0];
        let (_, parent, trace) = daemon;
        assert_eq!(parent.as_ref(), Some(starter_id));
        assert_eq!(trace, starter_trace);
    }
}

#[test]
fn send_and_attach_refuse_a_prompt_too_long_for_one_line() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let long = "x".repeat(MAX_LINE + 10);
    let sent = output_with_stdin(home.corral(&["send", "s", "-"]), &long, finish);
    assert_eq!(sent.status.code(), Some(1), "{sent:?}");
    let said = stderr(&sent);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("too long") && said.contains(&MAX_LINE.to_string()),
        "{said}"
    );

    let input = format!("{long}\nhello\n");
    let attached = output_with_stdin(home.corral(&["attach", "s"]), &input, finish);
    // Not every prompt it was given succeeded: exit 1, saying so.
    assert_eq!(attached.status.code(), Some(1), "{attached:?}");
    assert!(
        stderr(&attached)
            .ends_with("corral: not every prompt succeeded: 1 refused, 0 failed or cancelled\n"),
        "{attached:?}"
    );
    let said = stderr(&attached);
    let refusals: Vec<&str> = said
        .lines()
        .filter(|line| line.contains("too long"))
        .collect();
    assert_eq!(refusals.len(), 1, "{said}");
    assert!(refusals[0].contains(&MAX_LINE.to_string()), "{said}");
    // The line after it was sent and answered: attach read on.
    assert!(
        stdout(&attached).contains("fake answer: hello"),
        "{attached:?}"
    );
    assert_eq!(home.store().value("SELECT count(*) FROM prompts"), 1);
    // A plain send (whose start is written while it connects) is recorded whole, and the
    // refused one as the failure it was.
    home.ok(&["send", "s", "fits"]);
    let outcomes: Vec<(String, i64)> = home
        .store()
        .sql(
            "SELECT outcome, exit_code FROM execs WHERE command LIKE '%\"send\"%' \
             ORDER BY started_at",
        )
        .into_iter()
        .map(|row| (text(&row[0]), row[1].as_i64().unwrap()))
        .collect();
    assert_eq!(
        outcomes,
        [("failed".to_string(), 1), ("succeeded".to_string(), 0)]
    );
    home.stop_daemon();
}

#[test]
fn the_library_refuses_a_prompt_too_long_for_one_line() {
    actix_test(|| async {
        let home = tempfile::tempdir().unwrap();
        let library = Library::start_in(home, &[("engines.fake.path", FAKE)]).await;
        let project = library
            .add_project(NewProject {
                name: "p".into(),
                engine: Some(corral::engine::EngineKind::Fake),
                ..Default::default()
            })
            .await;
        let session = library.session(&project, "fake").await;
        let refused = library
            .corral
            .send(NewPrompt {
                session_id: session.id.clone(),
                text: "x".repeat(MAX_LINE),
                ..Default::default()
            })
            .await;
        match refused {
            Err(CorralError::Invalid(why)) => {
                assert!(
                    why.contains(&MAX_LINE.to_string()) && !why.contains('\n'),
                    "{why}"
                );
            }
            other => panic!("not refused: {other:?}"),
        }
        // A prompt that fits is taken.
        let fits = "x".repeat(MAX_LINE / 2);
        library.run(&session, &fits).await;
    });
}

#[test]
fn an_answer_with_id_null_ends_the_clients_wait() {
    // A daemon stand-in: it answers the handshake, then answers every request as the real
    // daemon answers a line it cannot read (id null), and keeps the connection open.
    let home = Home::new();
    home.init_store();
    let listener = UnixListener::bind(home.path().join("corral.sock")).unwrap();
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        let mut answered = 0;
        while reader.read_line(&mut line).unwrap() > 0 {
            let request: Value = serde_json::from_str(&line).unwrap();
            let answer = if request["method"] == "initialize" {
                serde_json::json!({ "jsonrpc": "2.0", "id": request["id"], "result": {
                    "protocol": 1, "pid": 1, "version": "test" } })
            } else {
                answered += 1;
                serde_json::json!({ "jsonrpc": "2.0", "id": null, "error": {
                    "code": -32600, "message": "line longer than 1048576 bytes; ignored" } })
            };
            writeln!(writer, "{answer}").unwrap();
            line.clear();
        }
        answered
    });
    let output = home
        .corral(&["--no-spawn", "send", "s", "hello"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let output = finish(output);
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        stderr(&output).contains("line longer than 1048576 bytes"),
        "{output:?}"
    );
    assert_eq!(server.join().unwrap(), 1);
}

/// The rows of the execs whose argv has `send` in it, oldest first.
#[allow(clippy::type_complexity)]
fn send_rows(
    store: &HomeStore,
) -> Vec<(
    Vec<String>,
    Option<String>,
    String,
    u32,
    Option<String>,
    Option<i64>,
    Option<String>,
)> {
    let optional = |value: &Value| value.as_str().map(str::to_string);
    store
        .sql(
            "SELECT command, parent_exec_id, trace_id, pid, cwd, exit_code, outcome, completed_at \
             FROM execs WHERE command LIKE '%\"send\"%' ORDER BY started_at",
        )
        .into_iter()
        .map(|row| {
            let command = text(&row[0]);
            assert!(!row[7].is_null(), "an exec left open: {command}");
            (
                serde_json::from_str(&command).unwrap(),
                optional(&row[1]),
                text(&row[2]),
                row[3].as_u64().unwrap() as u32,
                optional(&row[4]),
                row[5].as_i64(),
                optional(&row[6]),
            )
        })
        .collect()
}

#[test]
fn a_send_through_a_daemon_is_recorded_by_the_daemon_as_it_would_record_itself() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let send = |words: &[&str]| {
        let mut command = home.corral(words);
        command
            .env("CORRAL_PARENT_EXEC", "the-parent")
            .env("CORRAL_TRACE_ID", "the-trace")
            .current_dir(home.work())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = command.spawn().unwrap();
        let pid = child.id();
        (pid, finish(child))
    };
    let (sent_pid, sent) = send(&["send", "s", "hello", "there"]);
    let (refused_pid, refused) = send(&["send", "no-such-session", "hello"]);
    assert_eq!(sent.status.code(), Some(0), "{sent:?}");
    let said = stdout(&sent);
    let words: Vec<&str> = said.split_whitespace().collect();
    assert!(
        words.len() == 2 && ["running", "queued"].contains(&words[1]),
        "{said}"
    );
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert_eq!(stderr(&refused).lines().count(), 1, "{refused:?}");
    assert!(stderr(&refused).contains("no-such-session"), "{refused:?}");

    let rows = send_rows(&home.store());
    let work = home.work().to_string_lossy().into_owned();
    let expect = |words: &[&str], pid: u32, exit: i64, outcome: &str| {
        let mut argv = vec![env!("CARGO_BIN_EXE_corral").to_string()];
        argv.extend(words.iter().map(|word| word.to_string()));
        (
            argv,
            Some("the-parent".to_string()),
            "the-trace".to_string(),
            pid,
            Some(work.clone()),
            Some(exit),
            Some(outcome.to_string()),
        )
    };
    assert_eq!(
        rows,
        [
            expect(&["send", "s", "hello", "there"], sent_pid, 0, "succeeded"),
            expect(
                &["send", "no-such-session", "hello"],
                refused_pid,
                1,
                "failed"
            ),
        ]
    );
    // The prompt was queued and ran.
    home.ok(&["history", "s"]);
    home.stop_daemon();
}

#[test]
fn a_send_killed_once_its_request_is_written_is_recorded_by_the_daemon() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    // kill -9 of the client right after its one write (handshake and prompt, exec included):
    // it never reads the answer, and never writes anything itself.
    let mut command = home.corral(&["send", "s", "hello"]);
    command
        .env("CORRAL_TEST_KILL_AT", "send.written")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    let pid = child.id();
    let killed = finish(child);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed.status),
        Some(libc::SIGKILL),
        "{killed:?}"
    );
    let store = home.store();
    common::daemon::wait_until("the daemon completes the exec", || {
        store.value(&format!(
            "SELECT count(*) FROM execs WHERE pid = {pid} AND completed_at IS NOT NULL"
        )) == 1
    });
    let rows = send_rows(&store);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (argv, _, _, row_pid, _, exit, outcome) = &rows[0];
    assert_eq!(argv[1..], ["send", "s", "hello"]);
    assert_eq!(
        (*row_pid, *exit, outcome.as_deref()),
        (pid, Some(0), Some("succeeded"))
    );
    assert_eq!(store.value("SELECT count(*) FROM prompts"), 1);
    home.stop_daemon();
}

/// The exec row of a `corral run` (found by `needle` in its argv): (id, argv, pid,
/// started_at, completed_at, exit_code, outcome).
#[allow(clippy::type_complexity)]
fn run_row(
    db: &rusqlite::Connection,
    needle: &str,
) -> (
    String,
    Vec<String>,
    u32,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
) {
    db.query_row(
        "SELECT id, command, pid, started_at, completed_at, exit_code, outcome FROM execs \
         WHERE command LIKE ?1",
        [format!("%{needle}%")],
        |row| {
            let command: String = row.get(1)?;
            Ok((
                row.get(0)?,
                serde_json::from_str(&command).unwrap(),
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
            ))
        },
    )
    .unwrap()
}

/// Milliseconds since the epoch.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn run_records_its_exec_whether_the_command_or_the_store_is_quicker() {
    // A home with no store: the store is created and migrated while the command runs, which
    // takes longer than `sh -c 'exit 3'` (the start and the end then go in one write); then
    // a command slower than the store (its start written while it runs, its end after).
    let home = Home::new();
    for (script, code) in [
        ("echo $CORRAL_PARENT_EXEC; exit 3", 3),
        ("sleep 0.3; echo $CORRAL_PARENT_EXEC", 0),
    ] {
        let before = now_ms();
        let child = home
            .corral(&["run", "--", "sh", "-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let output = child.wait_with_output().unwrap();
        let after = now_ms();
        assert_eq!(output.status.code(), Some(code), "{output:?}");
        let (id, argv, row_pid, started, completed, exit, outcome) = run_row(&home.db(), script);
        // The command was given its exec's id before the row was written.
        assert_eq!(stdout(&output).trim(), id);
        assert_eq!(argv[1..], ["run", "--", "sh", "-c", script]);
        assert_eq!(row_pid, pid);
        // The start is taken before the spawn, the end after the command's.
        let completed = completed.expect("completed");
        assert!(before <= started && started <= completed && completed <= after);
        assert_eq!(exit, Some(code.into()));
        let expected = if code == 0 { "succeeded" } else { "failed" };
        assert_eq!(outcome.as_deref(), Some(expected));
    }
}

/// Writes `requests` as lines on a new connection to `home`'s daemon, one write; the answers
/// by id.
fn pipelined(home: &std::path::Path, requests: &[Value]) -> Vec<Value> {
    let mut stream = std::os::unix::net::UnixStream::connect(home.join("corral.sock")).unwrap();
    let lines: String = requests
        .iter()
        .map(|request| format!("{request}\n"))
        .collect();
    stream.write_all(lines.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut answers: Vec<Value> = (0..requests.len())
        .map(|_| {
            let mut line = String::new();
            assert!(
                reader.read_line(&mut line).unwrap() > 0,
                "the daemon hung up"
            );
            serde_json::from_str(&line).unwrap()
        })
        .collect();
    answers.sort_by_key(|answer| answer["id"].as_u64());
    answers
}

/// Recording a client's exec wraps the dispatch, whatever the method: a `session.new` that
/// carries its exec has it recorded, completed with exit 0 before the answer; a refused
/// `project.show` records its own, failed.
#[test]
fn any_request_may_carry_its_exec_for_the_daemon_to_record() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let pid = std::process::id();
    let exec = |id: &str| {
        serde_json::json!({ "id": id, "trace_id": id, "argv": ["corral", "session", "new"],
            "pid": pid, "started_at": 1_700_000_000_000_i64 })
    };
    let request = |id: u64, method: &str, params: Value| serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let hello = |exec_id: &str| {
        request(
            1,
            "initialize",
            serde_json::json!({ "protocol": 1, "exec_id": exec_id }),
        )
    };
    let project = home.json(&["project", "list", "--json"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let made = pipelined(
        home.path(),
        &[
            hello("exe-new"),
            request(
                2,
                "session.new",
                serde_json::json!({ "project": project, "title": "carried", "exec": exec("exe-new") }),
            ),
        ],
    );
    assert!(made[1]["result"]["id"].is_string(), "{made:?}");
    let refused = pipelined(
        home.path(),
        &[
            hello("exe-show"),
            request(
                2,
                "project.show",
                serde_json::json!({ "project": "no-such-project", "exec": exec("exe-show") }),
            ),
        ],
    );
    assert_eq!(
        refused[1]["error"]["data"]["exec_recorded"], true,
        "{refused:?}"
    );
    let store = home.store();
    let rows: Vec<(String, Option<i64>)> = store
        .sql("SELECT id, exit_code FROM execs WHERE id IN ('exe-new', 'exe-show') ORDER BY id")
        .into_iter()
        .map(|row| (text(&row[0]), row[1].as_i64()))
        .collect();
    assert_eq!(
        rows,
        [
            ("exe-new".to_string(), Some(0)),
            ("exe-show".to_string(), Some(1))
        ]
    );
    home.stop_daemon();
}

#[test]
fn the_daemon_records_only_an_exec_its_peer_could_record() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let pid = std::process::id();
    let exec = |id: &str, pid: u32| {
        serde_json::json!({ "id": id, "trace_id": id, "argv": ["corral", "send", "x"],
            "pid": pid, "started_at": 1_700_000_000_000_i64 })
    };
    let request = |id: u64, method: &str, params: Value| serde_json::json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let send = |id: u64, session: &str, exec: Value| {
        request(
            id,
            "prompt.send",
            serde_json::json!({ "session": session, "text": "x", "exec": exec }),
        )
    };
    let hello = |exec_id: &str| {
        request(
            1,
            "initialize",
            serde_json::json!({ "protocol": 1, "exec_id": exec_id }),
        )
    };
    let answers = pipelined(
        home.path(),
        &[
            hello("exe-a"),
            // Another process's pid, another exec than the connection's, a field too long.
            send(2, "s", exec("exe-a", 1)),
            send(3, "s", exec("exe-b", pid)),
            send(4, "s", {
                let mut long = exec("exe-a", pid);
                long["cwd"] = Value::String("x".repeat(5000));
                long
            }),
        ],
    );
    assert_eq!(answers[0]["result"]["records_execs"], true, "{answers:?}");
    for answer in &answers[1..] {
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        assert!(answer["error"].get("data").is_none(), "{answer}");
    }
    let answers = pipelined(
        home.path(),
        &[
            hello("exe-c"),
            send(2, "no-such-session", exec("exe-c", pid)),
            // One exec per connection.
            send(3, "s", exec("exe-c", pid)),
        ],
    );
    assert_eq!(answers[1]["error"]["code"], -32004, "{answers:?}");
    assert_eq!(
        answers[1]["error"]["data"]["exec_recorded"], true,
        "{answers:?}"
    );
    assert_eq!(answers[2]["error"]["code"], -32602, "{answers:?}");
    let store = home.store();
    let rows: Vec<(String, Option<i64>, Option<String>)> = store
        .sql("SELECT id, exit_code, outcome FROM execs WHERE id LIKE 'exe-%'")
        .into_iter()
        .map(|row| {
            (
                text(&row[0]),
                row[1].as_i64(),
                row[2].as_str().map(str::to_string),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [("exe-c".to_string(), Some(1), Some("failed".to_string()))]
    );
    assert_eq!(store.value("SELECT count(*) FROM prompts"), 0);
    home.stop_daemon();
}

/// `attach` exits 1 when a prompt it sent failed, saying how many did (and 0 when all
/// succeeded).
#[test]
fn attach_says_when_a_prompt_it_sent_failed() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[]);
    let all_done = output_with_stdin(home.corral(&["attach", "s"]), "hello\n", finish);
    assert_eq!(all_done.status.code(), Some(0), "{all_done:?}");
    let input = "@fake fail=it broke\nhello again\n";
    let attached = output_with_stdin(home.corral(&["attach", "s"]), input, finish);
    assert_eq!(attached.status.code(), Some(1), "{attached:?}");
    assert!(
        stderr(&attached)
            .ends_with("corral: not every prompt succeeded: 0 refused, 1 failed or cancelled\n"),
        "{attached:?}"
    );
    home.stop_daemon();
}

/// The daemon's log names what each line is about: a line logged while an engine runs sits
/// in its session's, its prompt's and its run's spans, so `grep RUN_ID daemon.log` finds all
/// the daemon said of that run.
#[test]
fn the_daemons_log_names_the_session_prompt_and_run_of_each_line() {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "s", &[]);
    home.ok(&["send", "s", "--wait", "hello"]);
    let history = home.json(&["history", "s", "--json"]);
    let prompt = history["prompts"][0]["id"]
        .as_str()
        .expect("a prompt")
        .to_string();
    let run = history["runs"][0]["id"]
        .as_str()
        .expect("a run")
        .to_string();
    home.stop_daemon();
    let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap();
    let spans = format!("session{{id={session}}}:prompt{{id={prompt}}}:run{{id={run} attempt=1}}");
    for said in ["engine started", "engine exited"] {
        assert!(
            log.lines()
                .any(|line| line.contains(&spans) && line.contains(said)),
            "no '{said}' line in {spans}:\n{log}"
        );
    }
}

/// While a daemon shuts down (its running prompts have their grace), a command reaches it:
/// `status` says it is shutting down, and `send` says it waits for its end, then sends
/// through the next daemon; neither is told that no daemon runs, or that one holds the home.
#[test]
fn commands_wait_through_a_daemons_shutdown_and_say_why() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[("daemon.shutdown_grace_ms", "3000")]);
    let old = home.daemon_pid().expect("the session's daemon");
    home.ok(&["send", "s", "@fake hang\nstay"]);
    let history = |home: &DaemonHome| home.json(&["history", "s", "--json"]);
    common::daemon::wait_until("the prompt runs", || {
        history(&home)["prompts"][0]["status"] == "running"
    });
    kill(old, libc::SIGTERM);
    let status = home.run(&["status"]);
    assert!(status.status.success(), "{status:?}");
    assert!(stdout(&status).contains("(shutting down)"), "{status:?}");

    let sent = home.run(&["send", "s", "after the restart"]);
    assert!(sent.status.success(), "{sent:?}");
    let said = stderr(&sent);
    assert!(
        said.contains(&format!(
            "the daemon (pid {old}) is shutting down; waiting for it to end"
        )),
        "{said}"
    );
    assert!(!common::daemon::alive(old), "the old daemon is gone");
    let new = home.daemon_pid().expect("a new daemon serves");
    assert_ne!(new, old);
    // Then the usual line of a send that started the daemon it needed.
    assert_eq!(said.lines().count(), 2, "{said}");
    assert!(said.contains(&format!("started one (pid {new})")), "{said}");
    let prompts = history(&home)["prompts"].clone();
    assert_eq!(prompts.as_array().map(Vec::len), Some(2), "{prompts}");
    assert_eq!(prompts[1]["text"], "after the restart", "{prompts}");
    home.stop_daemon();
}
