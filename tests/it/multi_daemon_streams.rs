//! A session running on one daemon, followed live through another daemon of the same
//! PostgreSQL store (issue 14, item 5) by the clients `tests/it/multi_daemon.rs` does not drive:
//!
//! - `corral attach` in B's home prints the events of a prompt A runs, live and to its end,
//!   from the session's end when it attached (nothing old replayed, nothing skipped);
//! - B's HTTP WebSocket (`/api/v1/events?session=S`) delivers the same events live, in order,
//!   without a gap, and a second one opened with `?after=N` while A still runs the prompt gets
//!   exactly the events after N (replayed from the store, then live from A's notices);
//! - B's WebSocket of every session's events (no `session`) has every feed number of the
//!   prompts A and C run once, in order, and `?after=N` opened meanwhile the numbers after N;
//! - B's dashboard (headless Chromium, `src/testkit/browser.rs`) shows the session active
//!   while A runs it, and its transcript streams A's output in before the answer.
//!
//! Every prompt is sent through A's home (home 0) with no driver claim, so A takes it (a daemon
//! claims what is sent through it while it has room); each test checks in `runs.node_id` that
//! the run was A's. Like `tests/it/multi_daemon.rs` they need a PostgreSQL server
//! (`CORRAL_TEST_POSTGRES_URL`; `.ci/run` starts one) and skip with a printed reason without one, except
//! in CI; the browser test also needs Chromium (the same rule, `browser::available`).

use crate::common;

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use common::browser::{self, js_string, Browser};
use common::cluster::Cluster;
use common::daemon::{kill, lines_of};
use common::store::quoted;

/// How long a streamed prompt may take to end, as seen from B, before the test fails.
const STREAM_LIMIT: Duration = Duration::from_secs(30);

/// A prompt whose 20 output lines come 100 ms apart: 2 s of output, so "live" is measurable
/// (its first line reaches B well before its end).
const STREAMED: &str = "@fake deltas=20\n@fake interval=100\nstream";

/// Wall-clock milliseconds, the clock the store's `finished_at` is on (one machine).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

/// The text of a column value (a number as its digits).
fn text(value: &Value) -> String {
    value
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| value.to_string())
}

/// The node ids of `prompt`'s runs, in start order.
fn run_nodes(cluster: &Cluster, prompt: &str) -> Vec<Option<String>> {
    cluster
        .sql(&format!(
            "SELECT node_id FROM runs WHERE prompt_id = {} ORDER BY started_at, attempt",
            quoted(prompt)
        ))
        .into_iter()
        .map(|row| row[0].as_str().map(str::to_string))
        .collect()
}

/// Asserts that `prompt` ran once, on home `index`'s daemon.
fn ran_once_on(cluster: &Cluster, prompt: &str, index: usize) {
    let nodes = run_nodes(cluster, prompt);
    assert_eq!(
        nodes,
        vec![Some(cluster.node_id(index))],
        "prompt {prompt} ran once, on home {index}'s daemon"
    );
}

/// The session's stored events with `seq` in `(after, upto]`: `(seq, kind)`, in order.
fn stored_events(cluster: &Cluster, session: &str, after: i64, upto: i64) -> Vec<(i64, String)> {
    cluster
        .sql(&format!(
            "SELECT seq, kind FROM events WHERE session_id = {} AND seq > {after} AND seq <= {upto} \
             ORDER BY seq",
            quoted(session)
        ))
        .into_iter()
        .map(|row| (row[0].as_i64().unwrap_or(0), text(&row[1])))
        .collect()
}

/// When `prompt` ended, in the store (ms).
fn finished_at(cluster: &Cluster, prompt: &str) -> i64 {
    cluster.count(&format!(
        "SELECT finished_at FROM prompts WHERE id = {}",
        quoted(prompt)
    ))
}

/// Asserts that the first output (`tool`) of `seen` (`(seq, kind, when)`) came at least a
/// second before the prompt ended: it was streamed, not delivered with the end.
fn assert_live(seen: &[(i64, String, i64)], finished: i64, who: &str) {
    let (_, _, first_output) = seen
        .iter()
        .find(|(_, kind, _)| kind == "tool")
        .unwrap_or_else(|| panic!("{who} showed no output event: {seen:?}"));
    assert!(
        *first_output < finished - 1000,
        "{who}: the first output came at {first_output}, the prompt ended at {finished}"
    );
}

/// A child in a process group of its own, killed with its group when dropped (a failed
/// test leaves no process).
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        if self.0.try_wait().ok().flatten().is_none() {
            kill(-pid, libc::SIGKILL);
            let _ = self.0.wait();
        }
    }
}

/// One line `corral attach` prints for an event (`#SEQ KIND summary`): its seq and kind.
fn attach_event(line: &str) -> Option<(i64, String)> {
    let rest = line.strip_prefix('#')?;
    let mut words = rest.split_whitespace();
    let seq = words.next()?.parse().ok()?;
    let kind = words.next()?.to_string();
    Some((seq, kind))
}

/// Reads `lines` until `end` holds for one, at most `limit`: every line with when it came.
fn lines_until(
    lines: &mpsc::Receiver<String>,
    limit: Duration,
    what: &str,
    mut end: impl FnMut(&str) -> bool,
) -> Vec<(String, i64)> {
    let until = Instant::now() + limit;
    let mut seen = Vec::new();
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            panic!("{what}: no such line within {limit:?}; got {seen:#?}");
        };
        let done = end(&line);
        seen.push((line, now_ms()));
        if done {
            return seen;
        }
    }
}

/// `corral attach SESSION` in B's home (home 1) prints the events of a prompt A runs as they
/// come, and its end; it attached after an earlier prompt ended, and starts right after that
/// prompt's last event. Its input closed, it detaches (exit 0: it sent nothing to wait for).
#[test]
fn attach_on_b_follows_a_session_running_on_a() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("attached");
    // An earlier prompt, ended before the attach: its events are not replayed.
    let earlier = cluster.json(
        0,
        &[
            "send",
            &session,
            "@fake answer=before\nearlier",
            "--wait",
            "--json",
        ],
    );
    assert_eq!(earlier["status"], "done", "{earlier}");
    let before = cluster.count(&format!(
        "SELECT coalesce(max(seq), 0) FROM events WHERE session_id = {}",
        quoted(&session)
    ));
    assert!(before > 0, "the earlier prompt stored events");

    let mut child = cluster
        .command(1, &["attach", &session])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("corral attach starts");
    let stdin = child.stdin.take().expect("attach's stdin");
    let out = lines_of(child.stdout.take().expect("attach's stdout"));
    let err = lines_of(child.stderr.take().expect("attach's stderr"));
    let mut attach = Group(child);
    lines_until(&err, STREAM_LIMIT, "attach says it attached", |line| {
        line.contains("attached to session")
    });
    // B's exec drives the session now (the claim is in the shared store).
    let driver = cluster.json(0, &["session", "show", &session, "--json"])["driver"].clone();
    assert!(
        driver["exec_id"].is_string(),
        "attach holds the driver claim: {driver}"
    );

    // A plain send (no claim) through A: A runs it while B's attach is the driver.
    let prompt = cluster.send(0, &session, STREAMED);
    // Its end: a `prompt.done` past the earlier prompt's events (the lines name no prompt).
    let printed = lines_until(
        &out,
        STREAM_LIMIT,
        "attach prints the prompt's end",
        |line| attach_event(line).is_some_and(|(seq, kind)| kind == "prompt.done" && seq > before),
    );
    drop(stdin);
    let until = Instant::now() + STREAM_LIMIT;
    let status = loop {
        if let Some(status) = attach.0.try_wait().expect("attach's status") {
            break status;
        }
        assert!(
            Instant::now() < until,
            "attach did not detach at the end of its input"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "attach detached with {status:?}");
    ran_once_on(&cluster, &prompt, 0);
    // Detached: the claim is released.
    let driver = cluster.json(0, &["session", "show", &session, "--json"])["driver"].clone();
    assert!(
        driver["exec_id"].is_null(),
        "attach released its claim: {driver}"
    );

    // Every line is an event; from the one after the attach's start to the end, each once, in
    // order: what the store has.
    let seen: Vec<(i64, String, i64)> = printed
        .iter()
        .map(|(line, when)| {
            let (seq, kind) =
                attach_event(line).unwrap_or_else(|| panic!("not an event line: {line:?}"));
            (seq, kind, *when)
        })
        .collect();
    let end = seen.last().map_or(0, |(seq, _, _)| *seq);
    let shown: Vec<(i64, String)> = seen
        .iter()
        .map(|(seq, kind, _)| (*seq, kind.clone()))
        .collect();
    assert_eq!(shown, stored_events(&cluster, &session, before, end));
    assert_eq!(shown.first().map(|(seq, _)| *seq), Some(before + 1));
    assert_live(&seen, finished_at(&cluster, &prompt), "attach on B");
}

/// The HTTP API of home `index`'s daemon, as `corral web --json` names it there.
struct Api {
    /// `127.0.0.1:PORT`.
    listen: String,
    /// The login URL's token, a bearer for the API.
    token: String,
    /// The login URL (the browser test's way in).
    login_url: String,
}

impl Api {
    fn of(cluster: &Cluster, index: usize) -> Api {
        let web = cluster.json(index, &["web", "--json"]);
        let listen = web["listen"].as_str().expect("listen").to_string();
        let login_url = web["login_url"].as_str().expect("login_url").to_string();
        let token = login_url
            .split_once("token=")
            .map(|(_, token)| token.to_string())
            .expect("the login URL carries the token");
        Api {
            listen,
            token,
            login_url,
        }
    }

    /// `GET /api/v1/events?QUERY` upgraded to a WebSocket, with the bearer token.
    fn events(&self, query: &str) -> tungstenite::WebSocket<TcpStream> {
        use tungstenite::client::IntoClientRequest;
        let url = format!("ws://{}/api/v1/events?{query}", self.listen);
        let mut request = url.into_client_request().expect("a WebSocket request");
        let bearer = format!("Bearer {}", self.token)
            .parse()
            .expect("a header value");
        request.headers_mut().insert("Authorization", bearer);
        let stream = TcpStream::connect(&self.listen).expect("the HTTP server listens");
        // A quiet stream is no failure by itself: the reads are bounded by the test's limit.
        stream
            .set_read_timeout(Some(STREAM_LIMIT))
            .expect("a read timeout");
        match tungstenite::client(request, stream) {
            Ok((socket, _)) => socket,
            Err(error) => panic!("the WebSocket {query:?} does not open: {error}"),
        }
    }
}

/// Reads a WebSocket's events until `prompt`'s `prompt.done`: each event with when it came.
/// Anything but an event (a lag notice, the socket's end) fails the test.
fn ws_events_until_done(
    socket: &mut tungstenite::WebSocket<TcpStream>,
    prompt: &str,
    who: &str,
) -> Vec<(Value, i64)> {
    let until = Instant::now() + STREAM_LIMIT;
    let mut seen = Vec::new();
    loop {
        assert!(
            Instant::now() < until,
            "{who}: no end of {prompt} within {STREAM_LIMIT:?}: {seen:#?}"
        );
        match socket.read() {
            Ok(tungstenite::Message::Text(message)) => {
                let message: Value = serde_json::from_str(&message)
                    .unwrap_or_else(|error| panic!("{who}: not JSON ({error}): {message}"));
                assert_eq!(message["method"], "events.event", "{who}: {message}");
                let event = message["params"]["event"].clone();
                let end = event["kind"] == "prompt.done" && event["prompt_id"] == prompt;
                seen.push((event, now_ms()));
                if end {
                    return seen;
                }
            }
            Ok(_) => {}
            Err(error) => panic!("{who}: the WebSocket ended ({error}) after {seen:#?}"),
        }
    }
}

/// `(seq, kind, when)` of a WebSocket's events.
fn seq_kinds(seen: &[(Value, i64)]) -> Vec<(i64, String, i64)> {
    seen.iter()
        .map(|(event, when)| {
            let seq = event["seq"]
                .as_i64()
                .unwrap_or_else(|| panic!("an event without seq: {event}"));
            (seq, text(&event["kind"]), *when)
        })
        .collect()
}

/// B's WebSocket of the session's events delivers the events of the prompt A runs live, each
/// once, in order, as the store has them; a second WebSocket opened on B with `?after=N` while
/// the prompt still runs gets exactly the events after N, the same ones.
#[test]
fn http_stream_on_b_follows_a_session_running_on_a() {
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("over http");
    let api = Api::of(&cluster, 1);
    let mut first = api.events(&format!("session={session}&after=0"));
    let prompt = cluster.send(0, &session, STREAMED);

    // The first few events, then the resume from the last of them while A still streams.
    let mut head = Vec::new();
    while head.len() < 5 {
        match first.read() {
            Ok(tungstenite::Message::Text(message)) => {
                let message: Value = serde_json::from_str(&message).expect("JSON");
                assert_eq!(message["method"], "events.event", "{message}");
                head.push((message["params"]["event"].clone(), now_ms()));
            }
            Ok(_) => {}
            Err(error) => panic!("B's WebSocket ended ({error}) after {head:#?}"),
        }
    }
    let after = head
        .last()
        .and_then(|(event, _)| event["seq"].as_i64())
        .expect("an event's seq");
    let mut resumed = api.events(&format!("session={session}&after={after}"));
    let resumed_at = now_ms();
    let running = cluster.prompt_status(&prompt);

    let mut raw = head;
    raw.extend(ws_events_until_done(&mut first, &prompt, "B's WebSocket"));
    let from_after = ws_events_until_done(&mut resumed, &prompt, "B's resumed WebSocket");
    let _ = first.close(None);
    let _ = resumed.close(None);
    ran_once_on(&cluster, &prompt, 0);

    let seen = seq_kinds(&raw);
    let end = seen.last().map_or(0, |(seq, _, _)| *seq);
    let shown: Vec<(i64, String)> = seen
        .iter()
        .map(|(seq, kind, _)| (*seq, kind.clone()))
        .collect();
    assert_eq!(shown, stored_events(&cluster, &session, 0, end));
    assert_eq!(
        shown.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
        (1..=end).collect::<Vec<_>>(),
        "every event once, in order"
    );
    let finished = finished_at(&cluster, &prompt);
    assert_live(&seen, finished, "B's WebSocket");

    // The resume was made mid-prompt, so it joined a replay to A's live events.
    assert_eq!(
        running, "running",
        "the resume was opened while A ran the prompt"
    );
    assert!(resumed_at < finished, "{resumed_at} < {finished}");
    let resumed_seqs: Vec<i64> = seq_kinds(&from_after)
        .into_iter()
        .map(|(seq, _, _)| seq)
        .collect();
    assert_eq!(
        resumed_seqs,
        (after + 1..=end).collect::<Vec<_>>(),
        "?after={after}: exactly the events after it"
    );
    // Each resumed event is the very event the first stream carried.
    let carried: Vec<&Value> = raw
        .iter()
        .map(|(event, _)| event)
        .filter(|event| event["seq"].as_i64().is_some_and(|seq| seq > after))
        .collect();
    let again: Vec<&Value> = from_after.iter().map(|(event, _)| event).collect();
    assert_eq!(again, carried);
}

/// Reads a WebSocket of every session's events until it has given feed number `upto`: the
/// feed numbers it gave. Anything but an event fails the test.
fn ws_feed_until(socket: &mut tungstenite::WebSocket<TcpStream>, upto: i64, who: &str) -> Vec<i64> {
    let until = Instant::now() + STREAM_LIMIT;
    let mut numbers = Vec::new();
    while numbers.last().copied().unwrap_or(0) < upto {
        assert!(
            Instant::now() < until,
            "{who}: not at feed number {upto} within {STREAM_LIMIT:?}: {numbers:?}"
        );
        match socket.read() {
            Ok(tungstenite::Message::Text(message)) => {
                let message: Value = serde_json::from_str(&message)
                    .unwrap_or_else(|error| panic!("{who}: not JSON ({error}): {message}"));
                assert_eq!(message["method"], "events.event", "{who}: {message}");
                let number = message["params"]["event"]["feed_seq"]
                    .as_i64()
                    .unwrap_or_else(|| panic!("{who}: an event without feed_seq: {message}"));
                numbers.push(number);
            }
            Ok(_) => {}
            Err(error) => panic!("{who}: the WebSocket ended ({error}) after {numbers:?}"),
        }
    }
    numbers
}

/// B's WebSocket of every session's events (no `session`: the daemon-wide `feed_seq`) has the
/// events of the prompts A and C run, each feed number once, in order; one opened on B with `?after=N`
/// while they still run gets exactly the numbers after N.
#[test]
fn the_http_feed_on_b_has_every_feed_number_of_a_and_c() {
    let Some(cluster) = Cluster::start(3) else {
        return;
    };
    // A project each: a shared project runs one session at a time across the daemons.
    let sessions: Vec<String> = (0..6)
        .map(|index| {
            let project = format!("h{index}");
            cluster.add_project(&project);
            cluster.session_of(&project, &project)
        })
        .collect();
    let api = Api::of(&cluster, 1);
    let mut first = api.events("after=0");
    // Through A (home 0) and C (home 2), alternately.
    let prompts: Vec<String> = sessions
        .iter()
        .enumerate()
        .map(|(index, session)| {
            let text = format!("@fake deltas=20\n@fake interval=50\nh{index}");
            cluster.send(if index % 2 == 0 { 0 } else { 2 }, session, &text)
        })
        .collect();
    let listed = prompts
        .iter()
        .map(|id| quoted(id))
        .collect::<Vec<_>>()
        .join(", ");
    let done = || {
        cluster.count(&format!(
            "SELECT count(*) FROM prompts WHERE id IN ({listed}) AND status = 'done'"
        ))
    };
    let head = ws_feed_until(&mut first, 10, "B's feed");
    let after = head.last().copied().unwrap_or(0);
    let mut resumed = api.events(&format!("after={after}"));
    let done_at_resume = done();
    cluster.wait_for("every prompt is done", Duration::from_secs(60), || {
        done() == prompts.len() as i64
    });
    let total = cluster.count("SELECT count(*) FROM events");
    let mut numbers = head;
    numbers.extend(ws_feed_until(&mut first, total, "B's feed"));
    let rest = ws_feed_until(&mut resumed, total, "B's resumed feed");
    let _ = first.close(None);
    let _ = resumed.close(None);

    let writers: Vec<Option<String>> = cluster
        .sql(&format!(
            "SELECT DISTINCT node_id FROM runs WHERE prompt_id IN ({listed}) ORDER BY node_id"
        ))
        .into_iter()
        .map(|row| row[0].as_str().map(str::to_string))
        .collect();
    // What B relays is other daemons' work: A and C each ran some of it.
    for index in [0, 2] {
        let node = Some(cluster.node_id(index));
        assert!(
            writers.contains(&node),
            "home {index}'s daemon ran a prompt: {writers:?}"
        );
    }
    assert_eq!(numbers, (1..=total).collect::<Vec<_>>(), "B's feed");
    assert!(
        done_at_resume < prompts.len() as i64,
        "the resume was opened while prompts still ran"
    );
    assert_eq!(
        rest,
        (after + 1..=total).collect::<Vec<_>>(),
        "?after={after}: exactly the numbers after it"
    );
}

/// Notes, in the page, when each `[data-testid=event]` element first appeared: its seq, its
/// kind, the number of the DOM change and the wall clock then (`window.__seen`).
const NOTE_EVENTS: &str = r#"window.__seen = []; let change = 0;
const note = () => {
  change += 1;
  for (const e of document.querySelectorAll('[data-testid=event]')) {
    if (!window.__seen.some((s) => s.seq === e.dataset.seq)) {
      window.__seen.push({ seq: e.dataset.seq, kind: e.dataset.kind, change, at: Date.now() });
    }
  }
};
note();
new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });"#;

/// B's dashboard shows a session A runs: its page (open before the prompt was sent, through A)
/// streams A's output in, each progress line before the answer and the first a second before
/// the prompt's end, then the end; the overview shows the session active while A runs another
/// prompt of it, and idle once that one is cancelled through B.
#[test]
fn the_dashboard_on_b_shows_a_session_running_on_a() {
    if !browser::available() {
        return;
    }
    let Some(cluster) = Cluster::start(2) else {
        return;
    };
    let session = cluster.session("on the page");
    let api = Api::of(&cluster, 1);
    let base = format!("http://{}", api.listen);
    // The browser's profile and driver logs: a directory of the test's own, not a home.
    let scratch = tempfile::tempdir().expect("a temporary directory");
    let browser = Browser::start("multi-daemon", scratch.path());
    browser.goto(&api.login_url);
    browser.wait_for("[data-testid=nav-overview]");
    assert_eq!(
        browser.document_url(),
        format!("{base}/"),
        "the login goes to the app"
    );

    browser.goto(&format!("{base}/#/sessions/{session}"));
    browser.wait_for("[data-testid=prompt-input]");
    browser.wait_until(
        "the live feed is connected",
        "document.querySelector('[data-testid=live]').dataset.live === 'true'",
    );
    browser.execute(NOTE_EVENTS, vec![]);
    let prompt = cluster.send(0, &session, STREAMED);
    browser.wait_for("[data-testid=event][data-kind='prompt.done']");
    ran_once_on(&cluster, &prompt, 0);
    let _ = browser.screenshot("session");

    let notes = browser.execute("return window.__seen;", vec![]);
    let notes = notes.as_array().expect("the notes");
    // (seq, kind, change, at) of each event element, in the order they appeared.
    let seen: Vec<(i64, String, u64, i64)> = notes
        .iter()
        .map(|note| {
            (
                text(&note["seq"]).parse().unwrap_or(0),
                text(&note["kind"]),
                note["change"].as_u64().unwrap_or(0),
                note["at"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let end = cluster.count(&format!(
        "SELECT seq FROM events WHERE prompt_id = {} AND kind = 'prompt.done'",
        quoted(&prompt)
    ));
    // Every event A stored is on the page, each once.
    let stored = stored_events(&cluster, &session, 0, end);
    let outputs = stored.iter().filter(|(_, kind)| kind == "tool").count();
    assert_eq!(outputs, 20, "A stored the 20 output lines: {stored:?}");
    let mut shown: Vec<(i64, String)> = seen
        .iter()
        .map(|(seq, kind, _, _)| (*seq, kind.clone()))
        .collect();
    shown.sort_unstable();
    assert_eq!(shown, stored, "the page shows every event once");
    // Streamed: the output lines came in several changes of the page, all before the answer,
    // the first a second before the prompt ended.
    let changes = |kind: &str| -> Vec<u64> {
        seen.iter()
            .filter(|(_, seen_kind, _, _)| seen_kind == kind)
            .map(|(_, _, change, _)| *change)
            .collect()
    };
    let output_changes = changes("tool");
    let answer = changes("message");
    assert_eq!(answer.len(), 1, "one answer: {seen:?}");
    assert!(
        output_changes.iter().all(|change| *change < answer[0]),
        "each output line before the answer: {seen:?}"
    );
    let distinct: std::collections::BTreeSet<u64> = output_changes.iter().copied().collect();
    assert!(distinct.len() > 1, "the output came in over time: {seen:?}");
    let as_seen: Vec<(i64, String, i64)> = seen
        .iter()
        .map(|(seq, kind, _, at)| (*seq, kind.clone(), *at))
        .collect();
    assert_live(&as_seen, finished_at(&cluster, &prompt), "B's dashboard");
    // The transcript is in the events' order.
    let order: Vec<i64> = browser
        .execute(
            "return Array.from(document.querySelectorAll('[data-testid=event]'))\
             .map((e) => Number(e.dataset.seq));",
            vec![],
        )
        .as_array()
        .expect("the transcript's seqs")
        .iter()
        .map(|seq| seq.as_i64().unwrap_or(0))
        .collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{order:?}");

    // The overview: working while A runs a prompt of the session, idle once it is cancelled
    // (through B, which does not run it).
    browser.goto(&format!("{base}/#/"));
    let row = format!(
        "[data-testid=session-row][data-session-id={}]",
        js_string(&session)
    );
    browser.wait_for(&row);
    let hanging = cluster.send(0, &session, "@fake hang\nkeep going");
    browser.wait_until(
        "the overview shows the session working",
        &format!(
            "document.querySelector({})?.dataset.state === 'working'",
            js_string(&row)
        ),
    );
    // A prompt is running from its claim on; its run's row comes once the engine starts.
    cluster.wait_for("the hanging prompt's run", STREAM_LIMIT, || {
        !run_nodes(&cluster, &hanging).is_empty()
    });
    ran_once_on(&cluster, &hanging, 0);
    let _ = browser.screenshot("overview");
    cluster.ok(1, &["cancel", &session]);
    browser.wait_until(
        "the overview shows the session waiting",
        &format!(
            "document.querySelector({})?.dataset.state === 'idle'",
            js_string(&row)
        ),
    );
    assert_eq!(cluster.prompt_status(&hanging), "cancelled");
    assert_eq!(
        json!(browser.attr("[data-testid=live]", "data-live")),
        json!("true"),
        "the page stayed live"
    );
}

/// A driver on another host is judged by that host, not by this one's processes: `attach`
/// on host B holds the session; `send --wait` on host A (which claims the session to drive
/// it) is refused without `--take-over`, though B's pid means nothing on A (made one no
/// process of this machine has, as it would be on a real other host), and takes it over with
/// `--take-over`.
#[test]
fn a_driver_on_another_host_keeps_its_claim() {
    let Some(cluster) = Cluster::start_on_hosts(2) else {
        return;
    };
    let session = cluster.session("driven on b");
    let mut child = cluster
        .command(1, &["attach", &session])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("corral attach starts");
    let _stdin = child.stdin.take().expect("attach's stdin");
    let err = lines_of(child.stderr.take().expect("attach's stderr"));
    let _attach = Group(child);
    lines_until(&err, STREAM_LIMIT, "attach says it attached", |line| {
        line.contains("attached to session")
    });
    let driver = cluster.json(0, &["session", "show", &session, "--json"])["driver"].clone();
    let exec = driver["exec_id"]
        .as_str()
        .unwrap_or_else(|| panic!("attach holds the driver claim: {driver}"))
        .to_string();
    // The pid of B's exec as A sees it: none of A's processes (pid_max is at most 2^22).
    cluster.sql(&format!(
        "UPDATE execs SET pid = 99999999, pid_start = NULL WHERE id = {}",
        quoted(&exec)
    ));
    let refused = cluster.run(0, &["send", &session, "@fake\nfrom a", "--wait"]);
    assert_eq!(
        refused.status.code(),
        Some(1),
        "send --wait on A took the session from B's live attach: {}",
        String::from_utf8_lossy(&refused.stdout)
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    let taken = cluster.run(
        0,
        &["send", &session, "@fake\nfrom a", "--wait", "--take-over"],
    );
    assert!(
        taken.status.success(),
        "--take-over: {}",
        String::from_utf8_lossy(&taken.stderr)
    );
}
