//! The status line of `corral send --wait` and `corral attach` (src/cli/progress.rs), seen as a
//! person sees it: the built binary with its stderr (and stdout) on a pseudo-terminal, a real
//! daemon in a temporary home, prompts on the fake engine. A second session waits for what
//! the first one holds, then for a rate-limit retry; the terminal shows why and for how long,
//! the line is gone when the wait ends and never shares a line with what is printed. With
//! stderr not a terminal none of it is printed.
//!
//! The pty's output is replayed through a small terminal model ([`Screen`]) that keeps every
//! line finished by a newline: a status line that was not cleared before something was
//! printed would end up inside such a line.

use crate::common;

use std::io::Write;
use std::os::fd::OwnedFd;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use serde_json::{json, Value};

use common::daemon::{wait_for, wait_until, DaemonHome, DEADLINE};

/// A home with a daemon on the fake engine: rate-limit retries wait `retry_delay` seconds,
/// projects `p` and `q`, sessions `first` (in p) and `second` (in `second_project`).
fn home_with(retry_delay: &str, second_project: &str) -> DaemonHome {
    let home = DaemonHome::new();
    home.config(&[
        (
            "engines.fake.path",
            env!("CARGO_BIN_EXE_corral-fake-engine"),
        ),
        ("retry.rate_limit_delays", retry_delay),
        ("daemon.shutdown_grace_ms", "500"),
        ("cancel.grace_ms", "500"),
    ]);
    for project in ["p", "q"] {
        let dir = home.work().join(project);
        std::fs::create_dir(&dir).unwrap();
        home.add_project(project, &dir, "fake");
    }
    home.ok(&["session", "new", "p", "--title", "first"]);
    home.ok(&["session", "new", second_project, "--title", "second"]);
    home
}

/// Session `first` runs a prompt for `ms` and holds its slot meanwhile; returns once it does.
fn hold_a_slot(home: &DaemonHome, ms: u64) {
    home.ok(&["send", "first", &format!("@fake delay={ms}\nhold the slot")]);
    wait_until("the first session holds a slot", || {
        let status = home.json(&["status", "--json"]);
        status["slots"]["running"].as_array().map(Vec::len) == Some(1)
    });
}

/// The events of a session, as the daemon stored them.
fn events(home: &DaemonHome, session: &str) -> Vec<Value> {
    home.ok(&["watch", session, "--after", "0", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).expect("an event per line"))
        .collect()
}

fn payload_of<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    &events
        .iter()
        .find(|event| event["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} event in {events:#?}"))["payload"]
}

// ---------------------------------------------------------------------------------------------
// A pseudo-terminal and a model of what it shows.

/// A pseudo-terminal of 30×200 cells; what is written to it arrives on `output`.
struct Pty {
    master: std::fs::File,
    slave: Option<OwnedFd>,
    output: mpsc::Receiver<Vec<u8>>,
    /// Everything read so far.
    seen: Vec<u8>,
}

impl Pty {
    fn open() -> Pty {
        let common::pty::Pair {
            master,
            slave,
            output,
        } = common::pty::open(Some((30, 200)));
        Pty {
            master,
            slave: Some(slave),
            output,
            seen: Vec::new(),
        }
    }

    /// A descriptor of the terminal for a child's stdout or stderr.
    fn stdio(&self) -> Stdio {
        Stdio::from(self.slave.as_ref().unwrap().try_clone().unwrap())
    }

    /// Spawns `command` with stdout and stderr on the terminal, then closes this side's copies
    /// of it (the command's too), so that the output ends when the child is gone.
    fn spawn(&mut self, mut command: std::process::Command) -> Child {
        let child = command
            .stdout(self.stdio())
            .stderr(self.stdio())
            .env("TERM", "xterm")
            .spawn()
            .expect("corral starts");
        drop(command);
        self.slave = None;
        child
    }

    /// Reads until what was shown since `from` (a byte offset in `seen`) contains `text`;
    /// the offset just after it. Fails after [`DEADLINE`].
    fn expect(&mut self, from: usize, text: &str) -> usize {
        let until = Instant::now() + DEADLINE;
        loop {
            let shown = String::from_utf8_lossy(&self.seen[from..]).into_owned();
            if let Some(at) = shown.find(text) {
                return from + shown[..at + text.len()].len();
            }
            let left = until.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(bytes) => self.seen.extend_from_slice(&bytes),
                Err(_) => panic!(
                    "the terminal never showed {text:?}; it showed {:?}",
                    String::from_utf8_lossy(&self.seen)
                ),
            }
        }
    }

    /// Reads until the terminal is closed (every child holding it is gone).
    fn read_to_end(&mut self) -> String {
        let until = Instant::now() + DEADLINE;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(bytes) => self.seen.extend_from_slice(&bytes),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => panic!("the terminal stays open"),
            }
        }
        let _ = &self.master;
        String::from_utf8_lossy(&self.seen).into_owned()
    }
}

/// What a terminal shows, for the few controls a status line uses: carriage return, newline,
/// cursor up/down/column, erase in line and in display; other escapes change nothing here.
#[derive(Default)]
struct Screen {
    rows: Vec<Vec<char>>,
    row: usize,
    column: usize,
    /// Every row as it was when a newline left it.
    finished: Vec<String>,
}

impl Screen {
    fn of(output: &str) -> Screen {
        let mut screen = Screen {
            rows: vec![Vec::new()],
            ..Screen::default()
        };
        let mut chars = output.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' => screen.column = 0,
                '\n' => {
                    let line: String = screen.rows[screen.row].iter().collect();
                    screen.finished.push(line.trim_end().to_string());
                    screen.row += 1;
                    if screen.row == screen.rows.len() {
                        screen.rows.push(Vec::new());
                    }
                }
                '\x1b' if chars.peek() == Some(&'[') => {
                    chars.next();
                    let mut parameters = String::new();
                    let mut end = ' ';
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() || c == '~' {
                            end = c;
                            break;
                        }
                        parameters.push(c);
                    }
                    let n: usize = parameters.trim_start_matches('?').parse().unwrap_or(0);
                    screen.control(end, n, &parameters);
                }
                '\x1b' => {
                    chars.next();
                }
                c if c.is_control() => {}
                c => {
                    let row = &mut screen.rows[screen.row];
                    if row.len() <= screen.column {
                        row.resize(screen.column + 1, ' ');
                    }
                    row[screen.column] = c;
                    screen.column += 1;
                }
            }
        }
        screen
    }

    fn control(&mut self, end: char, n: usize, parameters: &str) {
        match end {
            'A' => self.row = self.row.saturating_sub(n.max(1)),
            'B' => {
                self.row += n.max(1);
                while self.rows.len() <= self.row {
                    self.rows.push(Vec::new());
                }
            }
            'G' => self.column = n.saturating_sub(1),
            'K' => {
                let row = &mut self.rows[self.row];
                match n {
                    0 => row.truncate(self.column),
                    1 => row.iter_mut().take(self.column + 1).for_each(|c| *c = ' '),
                    _ => row.clear(),
                }
            }
            'J' if n == 0 => {
                self.rows[self.row].truncate(self.column);
                self.rows.truncate(self.row + 1);
            }
            'J' => self.rows.iter_mut().for_each(Vec::clear),
            _ => {
                let _ = parameters;
            }
        }
    }

    /// The rows shown at the end, without trailing blanks.
    fn shown(&self) -> Vec<String> {
        let mut rows: Vec<String> = self
            .rows
            .iter()
            .map(|row| row.iter().collect::<String>().trim_end().to_string())
            .collect();
        while rows.last().is_some_and(String::is_empty) {
            rows.pop();
        }
        rows
    }
}

/// The distinct numbers that follow `marker` in `text` (`waiting 3 s` → 3), in order.
fn numbers_after(text: &str, marker: &str) -> Vec<u64> {
    let mut numbers: Vec<u64> = Vec::new();
    for (at, _) in text.match_indices(marker) {
        let digits: String = text[at + marker.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(number) = digits.parse() {
            if numbers.last() != Some(&number) {
                numbers.push(number);
            }
        }
    }
    numbers
}

/// Whether a line holds a status line: it begins with one of the spinner's frames (braille
/// characters, which nothing else corral prints contains), e.g. `⠋ waiting 3 s for…`.
fn has_status(line: &str) -> bool {
    line.chars().any(|c| ('\u{2800}'..='\u{28ff}').contains(&c))
}

/// The status line is cleared when its wait ends and before anything is printed, so no
/// finished line and nothing on the final screen holds it. Returns the final screen.
fn assert_clean(output: &str) -> Vec<String> {
    let screen = Screen::of(output);
    for line in screen.finished.iter().chain(&screen.shown()) {
        assert!(
            !has_status(line),
            "the status line was left in {line:?}; the terminal got {output:?}"
        );
    }
    screen.shown()
}

#[test]
fn the_screen_model_keeps_what_a_terminal_keeps() {
    let screen =
        Screen::of("⠋ waiting 1 s\r\x1b[2K#7 slot.granted\r\nnext\x1b[1A\r\x1b[2Kredo\r\n");
    assert_eq!(screen.finished, ["#7 slot.granted", "redo"]);
    assert_eq!(screen.shown(), ["redo", "next"]);
    // A line printed without clearing the status first is caught.
    let screen = Screen::of("⠋ waiting 1 s#7 slot.granted\r\n");
    assert_eq!(screen.finished, ["⠋ waiting 1 s#7 slot.granted"]);
    assert!(has_status(&screen.finished[0]));
    assert!(!has_status("#5 slot.waiting for a fake slot (project q)"));
    assert!(!has_status("#6 slot.granted after 1 ms"));
    assert!(has_status("⠙ rate limited — retry 1/3 in 4 s"));
    assert_eq!(
        numbers_after("in 5 s\rin 5 s\rin 4 s in x in 3 s", "in "),
        [5, 4, 3]
    );
}

// ---------------------------------------------------------------------------------------------
// The tests.

#[test]
fn send_wait_on_a_terminal_shows_the_slot_wait_then_the_retry_countdown() {
    let home = home_with("5", "p");
    hold_a_slot(&home, 4000);
    let mut pty = Pty::open();
    let send = home.corral(&[
        "send",
        "second",
        "@fake rate-limit=1\nafter the wait",
        "--wait",
    ]);
    let mut child = pty.spawn(send);

    // The project's lock, which the first session holds; then the retry's countdown.
    let waiting = pty.expect(0, "waiting ");
    let retry = pty.expect(waiting, "rate limited — ");
    pty.expect(retry, "fake answer: after the wait");
    let shown = String::from_utf8_lossy(&pty.seen).into_owned();
    let (slot_part, retry_part) = shown.split_at(retry);
    assert!(slot_part.contains("project p"), "{slot_part:?}");
    // Both tick each second: the wait counts up, the retry down.
    let waited = numbers_after(slot_part, "waiting ");
    assert!(
        waited.len() >= 2 && waited.windows(2).all(|pair| pair[0] < pair[1]),
        "the slot wait does not count up: {waited:?} in {slot_part:?}"
    );
    let left = numbers_after(retry_part, " in ");
    assert!(
        left.len() >= 2 && left.windows(2).all(|pair| pair[0] > pair[1]),
        "the retry does not count down: {left:?} in {retry_part:?}"
    );
    let status = wait_for(&mut child);
    assert!(status.success(), "{status:?}");
    let output = pty.read_to_end();
    let shown = assert_clean(&output);
    assert_eq!(
        shown.last().map(String::as_str),
        Some("fake answer: after the wait"),
        "{output:?}"
    );

    // What the worker said, and what the line made of it.
    let events = events(&home, "second");
    let waiting = payload_of(&events, "slot.waiting");
    assert_eq!(waiting["held_by"]["reason"], "project_lock", "{waiting}");
    assert!(
        output.contains("project p locked by session \"first\""),
        "held_by {waiting} is not named: {output:?}"
    );
    let retry = payload_of(&events, "retry.scheduled");
    assert_eq!(
        (&retry["retry"], &retry["retries"]),
        (&json!(1), &json!(1)),
        "{retry}"
    );
    assert!(
        output.contains("rate limited — retry 1/1 in "),
        "{output:?}"
    );
    home.stop_daemon();
}

#[test]
fn attach_on_a_terminal_shows_the_engine_limit_wait_between_its_event_lines() {
    // Sessions in two projects: only the engine's limit of 1 keeps the second waiting.
    let home = home_with("5", "q");
    home.ok(&["config", "set", "slots.fake", "1"]);
    hold_a_slot(&home, 4000);
    let mut pty = Pty::open();
    let mut attach = home.corral(&["attach", "second"]);
    attach.stdin(Stdio::piped());
    let mut child = pty.spawn(attach);
    pty.expect(0, "attached to session");
    {
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "short one").unwrap();
        // The end of input: attach waits for the prompt, then exits.
    }
    let event = pty.expect(0, "slot.waiting");
    pty.expect(event, "waiting 0 s for a");
    let granted = pty.expect(event, "slot.granted");
    pty.expect(granted, "prompt.done");
    let status = wait_for(&mut child);
    assert!(status.success(), "{status:?}");
    let output = pty.read_to_end();
    let shown = assert_clean(&output);
    // Every event line is whole, on a line of its own.
    for kind in ["slot.waiting", "slot.granted", "run.started", "prompt.done"] {
        assert!(
            shown
                .iter()
                .any(|line| line.starts_with('#') && line.contains(&format!(" {kind}"))),
            "no line of its own for {kind}: {shown:#?}"
        );
    }
    let events = events(&home, "second");
    let waiting = payload_of(&events, "slot.waiting");
    assert_eq!(waiting["held_by"]["reason"], "engine_limit", "{waiting}");
    assert!(
        output.contains("fake limit 1 reached, held by session \"first\""),
        "held_by {waiting} is not named: {output:?}"
    );
    home.stop_daemon();
}

#[test]
fn without_a_terminal_nothing_of_it_is_printed() {
    let home = home_with("2", "p");
    hold_a_slot(&home, 2000);
    let mut send = home.corral(&[
        "send",
        "second",
        "@fake rate-limit=1\nafter the wait",
        "--wait",
    ]);
    // Not a terminal, even with a terminal type that could draw.
    send.env("TERM", "xterm");
    let output = common::daemon::finish(
        send.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "fake answer: after the wait\n"
    );
    // The waits did happen.
    let events = events(&home, "second");
    payload_of(&events, "slot.waiting");
    payload_of(&events, "retry.scheduled");
    home.stop_daemon();
}
