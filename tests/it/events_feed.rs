//! The daemon-wide event feed (issue 12) through the socket, on a real daemon and the fake
//! engine: `events.subscribe` without `session` streams every session's events in their
//! `feed_seq` order (numbered 1, 2, 3… across sessions, each session's `seq` still in order),
//! resumes from a `feed_seq` with no gap and no repeat (replay and live alike), and a client
//! that does not read is told `events.lagged` with the number to resume from. Migration 8
//! numbers the events of a store an older corral left, in a stable order, and a daemon killed
//! in the middle of it leaves the store as it was. `overview` and `execs.list` through the
//! socket: the states of sessions in each state, the same session part as `corral monitor
//! --json`, and `monitor list --json`'s page.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde_json::{json, Value};

use common::daemon::{DaemonHome, DEADLINE};
use common::store::quoted;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// A raw connection that keeps the notifications a test reads.
struct Client {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next: u64,
    /// Notifications read while waiting for an answer, in order.
    pending: std::collections::VecDeque<Value>,
}

impl Client {
    fn connect(home: &Path) -> Client {
        let stream = UnixStream::connect(home.join("corral.sock")).expect("the daemon listens");
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut client = Client {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            next: 1,
            pending: Default::default(),
        };
        client
            .call(
                "initialize",
                json!({ "protocol": 1, "client": "events_feed" }),
            )
            .expect("the handshake");
        client
    }

    fn line(&mut self) -> Value {
        let mut line = String::new();
        let read = self
            .reader
            .read_line(&mut line)
            .expect("a line from the daemon in time");
        assert!(read > 0, "the daemon hung up");
        serde_json::from_str(&line).unwrap()
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next;
        self.next += 1;
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        writeln!(self.writer, "{request}").unwrap();
        loop {
            let line = self.line();
            if line.get("id") == Some(&json!(id)) {
                return match line.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(line["result"].clone()),
                };
            }
            self.pending.push_back(line);
        }
    }

    fn ok(&mut self, method: &str, params: Value) -> Value {
        self.call(method, params.clone())
            .unwrap_or_else(|error| panic!("{method} {params}: {error}"))
    }

    fn notification(&mut self) -> Value {
        match self.pending.pop_front() {
            Some(line) => line,
            None => self.line(),
        }
    }

    /// The next `events.event`'s event (a lag notice fails the test).
    fn event(&mut self) -> Value {
        let notification = self.notification();
        assert_eq!(notification["method"], "events.event", "{notification}");
        notification["params"]["event"].clone()
    }

    /// Events until `done` says stop (inclusive).
    fn events_until(&mut self, mut done: impl FnMut(&Value) -> bool) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let event = self.event();
            let stop = done(&event);
            events.push(event);
            if stop {
                return events;
            }
        }
    }
}

/// A home with the fake engine, a project `p` and a quick shutdown.
fn home() -> DaemonHome {
    let home = DaemonHome::new();
    home.config(&[
        ("engines.fake.path", FAKE),
        ("daemon.shutdown_grace_ms", "200"),
        ("cancel.grace_ms", "200"),
    ]);
    home.add_project("p", &home.work(), "fake");
    home
}

/// `(session_id, seq, feed_seq)` of every stored event, in `feed_seq` order.
fn stored(home: &DaemonHome) -> Vec<(String, i64, i64)> {
    home.sql("SELECT session_id, seq, feed_seq FROM events ORDER BY feed_seq")
        .into_iter()
        .map(|row| match &row[..] {
            [Value::String(session), Value::Number(seq), Value::Number(feed_seq)] => (
                session.clone(),
                seq.as_i64().unwrap(),
                feed_seq.as_i64().unwrap(),
            ),
            _ => panic!("an event row of other types: {row:?}"),
        })
        .collect()
}

fn key(event: &Value) -> (String, i64, i64) {
    (
        event["session_id"].as_str().unwrap().to_string(),
        event["seq"].as_i64().unwrap(),
        event["feed_seq"].as_i64().unwrap(),
    )
}

fn is_done_of(prompt: &Value) -> impl Fn(&Value) -> bool + '_ {
    move |event: &Value| event["kind"] == "prompt.done" && event["prompt_id"] == prompt["id"]
}

#[test]
fn every_sessions_events_stream_in_feed_order_and_resume_without_gap_or_repeat() {
    let home = home();
    let a = home.new_session(&["p", "--title", "a"]);
    let b = home.new_session(&["p", "--title", "b"]);
    // (The first command that changed something started the daemon.)
    let mut watcher = Client::connect(home.path());
    let subscribed = watcher.ok("events.subscribe", json!({}));
    assert_eq!(subscribed["session"], Value::Null, "{subscribed}");
    assert_eq!(subscribed["after"], 0, "{subscribed}");

    // Both sessions at once: their events interleave in the feed.
    let mut sender = Client::connect(home.path());
    let first = sender.ok(
        "prompt.send",
        json!({ "session": a, "text": "@fake deltas=30\n@fake interval=2\nfirst" }),
    );
    let second = sender.ok(
        "prompt.send",
        json!({ "session": b, "text": "@fake deltas=30\n@fake interval=2\nsecond" }),
    );
    let mut seen = Vec::new();
    let (mut a_done, mut b_done) = (false, false);
    while !(a_done && b_done) {
        let event = watcher.event();
        a_done |= is_done_of(&first)(&event);
        b_done |= is_done_of(&second)(&event);
        seen.push(event);
    }
    let keys: Vec<_> = seen.iter().map(key).collect();
    // Numbered 1, 2, 3… across both sessions, exactly as stored.
    let feed: Vec<i64> = keys.iter().map(|(_, _, feed)| *feed).collect();
    assert_eq!(feed, (1..=feed.len() as i64).collect::<Vec<_>>());
    assert_eq!(keys, stored(&home)[..keys.len()]);
    for session in [&a, &b] {
        let seqs: Vec<i64> = keys
            .iter()
            .filter(|(id, _, _)| id == session)
            .map(|(_, seq, _)| *seq)
            .collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as i64).collect::<Vec<_>>(),
            "{session}"
        );
        assert!(seqs.len() > 30, "{session}: {} events", seqs.len());
    }
    // A session's own stream carries the same numbers.
    let mut one = Client::connect(home.path());
    one.ok("events.subscribe", json!({ "session": b, "after": 0 }));
    let of_b = one.events_until(is_done_of(&second));
    let expected: Vec<_> = keys.iter().filter(|(id, _, _)| *id == b).cloned().collect();
    assert_eq!(of_b.iter().map(key).collect::<Vec<_>>(), expected);

    // Resume from the middle: the stored rest (replayed), then live ones, each once.
    let middle = feed[feed.len() / 2];
    let mut resumed = Client::connect(home.path());
    let answer = resumed.ok("events.subscribe", json!({ "after": middle }));
    assert_eq!(answer["after"], middle);
    let third = sender.ok(
        "prompt.send",
        json!({ "session": a, "text": "@fake deltas=5\nthird" }),
    );
    let rest = resumed.events_until(is_done_of(&third));
    let rest_feed: Vec<i64> = rest.iter().map(|event| key(event).2).collect();
    assert_eq!(
        rest_feed,
        ((middle + 1)..=(middle + rest.len() as i64)).collect::<Vec<_>>()
    );
    assert!(rest_feed.last().unwrap() > feed.last().unwrap());
    // The first watcher went on from live events alone, with the same numbers.
    let live = watcher.events_until(is_done_of(&third));
    assert_eq!(
        live.iter().map(key).collect::<Vec<_>>(),
        rest.iter()
            .map(key)
            .filter(|(_, _, feed_seq)| feed_seq > feed.last().unwrap())
            .collect::<Vec<_>>()
    );

    // A subscription from past the end gets only what comes next; bad params are refused.
    for (params, code) in [
        (json!({ "after": -1 }), -32602),
        (json!({ "after": "3" }), -32602),
        (json!({ "session": 7 }), -32602),
        (json!({ "session": "no-such-session" }), -32004),
    ] {
        let refused = resumed
            .call("events.subscribe", params.clone())
            .unwrap_err();
        assert_eq!(refused["code"], code, "{params}: {refused}");
    }
    home.stop_daemon();
}

#[test]
fn a_client_that_does_not_read_the_daemon_wide_stream_lags_and_resumes_from_its_number() {
    let home = home();
    let session = home.new_session(&["p", "--title", "firehose"]);
    let mut slow = Client::connect(home.path());
    let subscription = slow.ok("events.subscribe", json!({}))["subscription"].clone();
    // 40,000 events while the client reads nothing: more than the broadcast holds.
    let mut sender = Client::connect(home.path());
    let prompt = sender.ok(
        "prompt.send",
        json!({ "session": session, "text": "@fake deltas=40000\nflood" }),
    );
    let done = sender.ok("prompt.wait", json!({ "prompt": prompt["id"] }));
    assert_eq!(done["status"], "done", "{done}");
    // What the client was given before the notice runs up to the notice's number, in order.
    let mut last = 0;
    let lagged = loop {
        let notification = slow.notification();
        if notification["method"] == "events.lagged" {
            break notification;
        }
        let feed_seq = notification["params"]["event"]["feed_seq"]
            .as_i64()
            .unwrap();
        assert_eq!(feed_seq, last + 1, "{notification}");
        last = feed_seq;
    };
    assert_eq!(lagged["params"]["subscription"], subscription, "{lagged}");
    assert_eq!(lagged["params"]["session"], Value::Null, "{lagged}");
    let resume_after = lagged["params"]["resume_after"].as_i64().unwrap();
    assert_eq!(resume_after, last);
    assert!(resume_after < 40_000, "{lagged}: it did lag");
    // The subscription ended; a new one from the notice's number misses nothing.
    let gone = slow
        .call(
            "events.unsubscribe",
            json!({ "subscription": subscription }),
        )
        .unwrap_err();
    assert_eq!(gone["code"], -32004, "{gone}");
    slow.ok("events.subscribe", json!({ "after": resume_after }));
    let rest = slow.events_until(is_done_of(&prompt));
    let feed: Vec<i64> = rest.iter().map(|event| key(event).2).collect();
    assert_eq!(
        feed,
        ((resume_after + 1)..=(resume_after + rest.len() as i64)).collect::<Vec<_>>()
    );
    assert_eq!(*feed.last().unwrap(), stored(&home).last().unwrap().2);
    home.stop_daemon();
}

/// A store as corral 7 left it: two sessions whose events interleave in time, one of them
/// with a clock set back between two of its events.
fn store_at_version_7(home: &DaemonHome) {
    home.store().migrate_to(7);
    let work = quoted(home.work().to_str().unwrap());
    home.execute(&format!(
        "INSERT INTO projects (id, name, path, engine, created_at) VALUES ('p', 'p', {work}, 'fake', 1)"
    ));
    home.execute(&format!(
        "INSERT INTO settings (name, value, updated_at) VALUES ('engines.fake.path', {}, 1)",
        quoted(FAKE)
    ));
    for session in ["s1", "s2"] {
        home.execute(&format!(
            "INSERT INTO sessions (id, project_id, engine, title, created_at, last_event_seq) \
             VALUES ('{session}', 'p', 'fake', '{session}', 1, 3)"
        ));
    }
    // s1's prompt ended before the migration: its answer's first line is read back.
    let answer = format!("\n\n  the old answer  \n{}", "more lines\n".repeat(5_000));
    home.execute(&format!(
        "INSERT INTO prompts (id, session_id, text, status, attempts, answer, created_at, finished_at) \
         VALUES ('q1', 's1', 'old question', 'done', 1, {}, 5, 6)",
        quoted(&answer)
    ));
    // s1 at 10, 30, 20 (the clock went back); s2 at 15, 25, 25.
    for (session, seq, at) in [
        ("s1", 1, 10),
        ("s1", 2, 30),
        ("s1", 3, 20),
        ("s2", 1, 15),
        ("s2", 2, 25),
        ("s2", 3, 25),
    ] {
        home.execute(&format!(
            "INSERT INTO events (session_id, seq, at, kind, payload) \
             VALUES ('{session}', {seq}, {at}, 'message', '{{}}')"
        ));
    }
}

#[test]
fn migration_8_numbers_an_older_stores_events_and_a_kill_in_the_middle_leaves_it_as_it_was() {
    let home = DaemonHome::new();
    store_at_version_7(&home);

    // Killed inside the step: nothing of it is committed.
    let killed = home
        .corral(&["daemon", "--detach"])
        .env("CORRAL_TEST_KILL_AT", "migration")
        .output()
        .unwrap();
    assert!(!killed.status.success(), "{killed:?}");
    let store = home.store();
    assert_eq!(store.schema_version(), 7);
    let columns = store.columns("events");
    assert!(
        !columns.iter().any(|column| column == "feed_seq"),
        "the step's column is not there: {columns:?}"
    );

    // The next daemon migrates: time order, each session's own order kept (s1's third event
    // stays after its second, at the second's time), then session and seq.
    home.start_daemon();
    let numbered = stored(&home);
    let expected = [
        ("s1", 1),
        ("s2", 1),
        ("s2", 2),
        ("s2", 3),
        ("s1", 2),
        ("s1", 3),
    ];
    assert_eq!(
        numbered,
        expected
            .iter()
            .enumerate()
            .map(|(index, (session, seq))| (session.to_string(), *seq, index as i64 + 1))
            .collect::<Vec<_>>()
    );
    // New events go on from there, and the stream replays the old ones first.
    let mut client = Client::connect(home.path());
    client.ok("events.subscribe", json!({ "after": 4 }));
    let prompt = client.ok("prompt.send", json!({ "session": "s2", "text": "more" }));
    let events = client.events_until(is_done_of(&prompt));
    assert_eq!(
        events.iter().take(2).map(key).collect::<Vec<_>>(),
        [("s1".to_string(), 2, 5), ("s1".to_string(), 3, 6)]
    );
    let new = key(&events[2]);
    assert_eq!((new.0.as_str(), new.1, new.2), ("s2", 4, 7));
    // The overview's reasons: the old answer (kept by the migration), the new one (kept as it
    // was stored).
    let overview = client.ok("overview", json!({}));
    let reasons: Vec<(&str, &str, &str)> = overview["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            (
                item["id"].as_str().unwrap(),
                item["state"].as_str().unwrap(),
                item["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("s1", "idle", "answered: the old answer"),
            ("s2", "idle", "answered: fake answer: more")
        ]
    );
    assert_eq!(
        overview["feed_seq"].as_i64(),
        Some(stored(&home).last().unwrap().2)
    );
    home.stop_daemon();
}

/// The parts of `overview`'s sessions that `corral monitor --json` gives too (all of them).
fn sessions_of(value: &Value) -> Vec<Value> {
    value.as_array().unwrap().clone()
}

#[test]
fn overview_and_execs_list_through_the_socket() {
    let home = home();
    let waiting = home.new_session(&["p", "--title", "waiting"]);
    let failed = home.new_session(&["p", "--title", "failed"]);
    let unknown = home.new_session(&["p", "--title", "unknown"]);
    let finished = home.new_session(&["p", "--title", "finished"]);
    let active = home.new_session(&["p", "--title", "active"]);
    home.ok(&["send", "--wait", &waiting, "the answer please"]);
    home.run(&["send", "--wait", &failed, "@fake fail=broken\nbreak"]);
    home.ok(&["session", "archive", &finished]);
    let mut client = Client::connect(home.path());
    let mut watcher = Client::connect(home.path());
    watcher.ok("events.subscribe", json!({ "session": active }));
    let running = client.ok(
        "prompt.send",
        json!({ "session": active, "text": "@fake hang\nkeep going" }),
    );
    let queued = client.ok("prompt.send", json!({ "session": active, "text": "next" }));
    // The hanging engine has said all it says (its pid is stored with `run.started`, before).
    watcher.events_until(|event| event["kind"] == "turn.started");
    let overview = client.ok("overview", json!({}));
    let by_id = |id: &str| -> Value {
        overview["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|item| item["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} not in {overview}"))
    };
    for (id, state) in [
        (&waiting, "idle"),
        (&failed, "failed"),
        (&unknown, "idle"),
        (&finished, "archived"),
        (&active, "working"),
    ] {
        assert_eq!(by_id(id)["state"], state, "{}", by_id(id));
    }
    let item = by_id(&active);
    assert_eq!(item["current_prompt_id"], running["id"], "{item}");
    assert_eq!(item["queued"], 1, "{item}");
    assert_eq!(item["reason"], "running: @fake hang", "{item}");
    assert_eq!(item["full_access"], false);
    assert!(by_id(&waiting)["reason"]
        .as_str()
        .unwrap()
        .starts_with("answered: fake answer: "));
    assert!(by_id(&failed)["reason"]
        .as_str()
        .unwrap()
        .contains("broken"));
    assert_eq!(by_id(&unknown)["current_prompt_id"], Value::Null);
    let run = &overview["runs"][0];
    assert_eq!(run["session_id"], active.as_str());
    assert_eq!(run["prompt_id"], running["id"]);
    assert_eq!(overview["gaps"], json!([]));
    assert!(overview["slots"]["limits"].is_object(), "{overview}");
    assert!(!overview["recent"].as_array().unwrap().is_empty());
    let last_feed = home.sql("SELECT max(feed_seq) FROM events")[0][0]
        .as_i64()
        .expect("the events' last feed_seq");
    assert!(overview["feed_seq"].as_i64().unwrap() <= last_feed);
    assert!(overview["feed_seq"].as_i64().unwrap() > 0);

    // The same sessions as `corral monitor --json` reads from the store itself.
    let again = client.ok("overview", json!({}));
    let monitor = home.json(&["monitor", "--json", "--all"]);
    assert_eq!(
        sessions_of(&monitor["items"]),
        sessions_of(&again["sessions"])
    );

    // `execs.list` is `monitor list --json`'s page, filters and cursor alike.
    for (params, args) in [
        (json!({ "limit": 3 }), vec!["--all", "--limit", "3"]),
        (
            json!({ "search": "send", "limit": 2 }),
            vec!["--all", "--search", "send", "--limit", "2"],
        ),
        (
            json!({ "outcome": "failed" }),
            vec!["--all", "--outcome", "failed"],
        ),
    ] {
        let page = client.ok("execs.list", params.clone());
        let mut command = vec!["monitor", "list", "--json"];
        command.extend(args);
        let listed = home.json(&command);
        // The CLI's own `monitor list` exec is newer than the page it prints: compare the
        // entries both saw.
        let from_daemon: Vec<&Value> = page["entries"].as_array().unwrap().iter().collect();
        let own = |exec: &Value| {
            let argv = exec["command"].as_array().unwrap();
            exec["completed_at"].is_null() && argv.contains(&json!("list"))
        };
        let from_cli: Vec<&Value> = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|exec| !own(exec))
            .collect();
        assert!(!from_daemon.is_empty(), "{params}: {page}");
        assert_eq!(from_daemon[..from_cli.len()], from_cli[..], "{params}");
    }
    let first = client.ok("execs.list", json!({ "limit": 2 }));
    let next = client.ok("execs.list", json!({ "limit": 2, "after": first["next"] }));
    assert_ne!(first["entries"][1]["id"], next["entries"][0]["id"]);
    let all = client.ok("execs.list", json!({ "limit": 4 }));
    assert_eq!(
        [
            &first["entries"][0],
            &first["entries"][1],
            &next["entries"][0],
            &next["entries"][1]
        ],
        [
            &all["entries"][0],
            &all["entries"][1],
            &all["entries"][2],
            &all["entries"][3]
        ]
    );
    for (params, code) in [
        (json!({ "limit": 0 }), -32602),
        (json!({ "limit": "3" }), -32602),
        (json!({ "outcome": "maybe" }), -32602),
        (json!({ "after": "not a cursor" }), -32602),
        (json!({ "wave": "no-such-wave" }), -32004),
        (json!({ "repo": "/no/such/dir" }), -32004),
    ] {
        let refused = client.call("execs.list", params.clone()).unwrap_err();
        assert_eq!(refused["code"], code, "{params}: {refused}");
    }
    client.ok("prompt.cancel", json!({ "target": queued["id"] }));
    client.ok("prompt.cancel", json!({ "target": running["id"] }));
    home.stop_daemon();
}
