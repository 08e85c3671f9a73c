//! The dashboard's costs (issue 12, Performance), measured on a daemon of the release build
//! and through a real browser (headless Chromium over WebDriver, the harness of
//! `src/testkit/browser.rs`).
//!
//! A daemon starts on a temporary home (`corral daemon --detach`) with the fake engine and
//! SESSIONS sessions (default 1,000) spread over 8 projects; each gets one prompt, so that the
//! overview shows several states: most answered (waiting), one in ten failed, 4 of them
//! running (`@fake hang`, active, each in a project of its own). Then:
//!
//! 1. **Overview, server**: `GET /api/v1/overview` (bearer token, one keep-alive connection)
//!    ×REPEATS after a warm-up: p50/p90 of the round trip on loopback, which bounds the
//!    server's time from above; the socket's `overview` beside it. Goal: ≤ 20 ms p50.
//! 2. **Overview, browser**: the page opened anew (from `about:blank`) ×PAGE_LOADS: the time
//!    from navigation start to the overview's rows in the page, the page's own marks
//!    (`performance.mark('corral:overview-read')` when its first overview arrived,
//!    `'corral:overview-rendered'` when its rows were in the DOM; `startTime` is counted from
//!    navigation start), and the rows counted (all SESSIONS must be there). Goal: ≤ 300 ms p50.
//! 3. **A line, engine to browser**: a session of the `command` engine whose command prints
//!    LINES lines, one every 50 ms, each carrying the time it was printed (`date +%s%3N`,
//!    ms since the epoch). The session's page is open; a `MutationObserver` injected with
//!    execute_script notes `Date.now()` when each line's text first appears in the page (the
//!    browser and the shell read the same clock). p50/p90 of print → visible, and print →
//!    the event's `at` (the daemon's time, ms) and `at` → visible to say where it goes. Goal:
//!    ≤ 50 ms p50.
//!
//! Run: `cargo build --release --bin corral --bin corral-fake-engine --example dashboard_bench
//! && target/release/examples/dashboard_bench [SESSIONS [REPEATS [PAGE_LOADS [LINES]]]]`
//! (defaults 1000 200 10 60). Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's
//! `chromium`, `chromium-driver`; `CORRAL_TEST_CHROMIUM`/`CORRAL_TEST_CHROMEDRIVER` name
//! others); exits 2 with one line without them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use common::binaries;
use common::daemon::{Conn, Daemon};
use corral::testkit::browser::{self, Browser};

/// Prompts left running forever (`@fake hang`): the active sessions.
const HANGING: usize = 4;

/// The projects the other sessions are spread over (one prompt runs at a time in each).
const PROJECTS: usize = 8;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|value| value.parse().expect("a number"))
        .collect();
    let arg = |index: usize, default: usize| args.get(index).copied().unwrap_or(default);
    let (sessions, repeats, page_loads, lines) =
        (arg(0, 1000), arg(1, 200), arg(2, 10), arg(3, 60));
    let (corral, fake) = binaries();
    if !browser::available() {
        eprintln!("dashboard_bench needs Chromium and chromedriver");
        std::process::exit(2);
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let (daemon, _) = Daemon::start(&corral, &home);
    let mut conn = Conn::open(&daemon.socket());
    conn.call("initialize", json!({ "protocol": 1 }));

    let setup = Instant::now();
    let session_ids = populate(&mut conn, &home, &fake, sessions);
    println!(
        "setup: {sessions} sessions, their prompts answered, {:.1} s",
        setup.elapsed().as_secs_f64()
    );
    let login = login_url(&corral, &home);
    let (address, token) = split_login(&login);

    overview_server(&mut conn, &address, &token, repeats);
    let browser = Browser::start("bench", dir.path());
    browser.goto(&login);
    browser.wait_for("[data-testid=nav-overview]");
    overview_browser(&browser, &address, sessions, page_loads);
    line_latency(&mut conn, &browser, &address, &token, &home, lines);
    drop(browser);
    // The hanging prompts end with the daemon (SIGTERM, then their runs are ended).
    for id in session_ids.iter().take(HANGING) {
        conn.call("prompt.cancel", json!({ "target": id }));
    }
    drop(conn);
    daemon.stop();
}

/// The fake engine, `sessions` sessions and one prompt each; returns once every prompt that
/// can end has ended. A project runs one prompt at a time (its tree's lock), so the sessions
/// are spread over [`PROJECTS`] projects, and each of the first [`HANGING`] sessions, whose
/// prompt hangs, has a project of its own. One in ten fails.
fn populate(conn: &mut Conn, home: &Path, fake: &Path, sessions: usize) -> Vec<String> {
    let set = |conn: &mut Conn, name: &str, value: &str| {
        conn.call("settings.set", json!({ "name": name, "value": value }));
    };
    set(conn, "engines.fake.path", fake.to_str().unwrap());
    set(conn, "slots.fake", &(HANGING + PROJECTS).to_string());
    set(conn, "cancel.grace_ms", "300");
    let add_project = |conn: &mut Conn, name: &str| {
        let dir = home.join("work").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        conn.call(
            "project.add",
            json!({ "name": name, "path": dir, "engine": "fake" }),
        );
    };
    for project in 0..PROJECTS {
        add_project(conn, &format!("p{project}"));
    }
    let mut ids = Vec::with_capacity(sessions);
    let mut waits = Vec::new();
    for index in 0..sessions {
        let project = if index < HANGING {
            let name = format!("busy{index}");
            add_project(conn, &name);
            name
        } else {
            format!("p{}", index % PROJECTS)
        };
        let session = conn.call(
            "session.new",
            json!({ "project": project, "title": format!("session {index:04}") }),
        );
        let id = session["id"].as_str().expect("a session id").to_string();
        let text = if index < HANGING {
            "@fake hang\nkeep working".to_string()
        } else if index % 10 == 0 {
            format!("@fake fail=model error {index}\ntry")
        } else {
            format!("@fake answer=answer {index}\nwork on item {index}")
        };
        let sent = conn.call("prompt.send", json!({ "session": id, "text": text }));
        if index >= HANGING {
            waits.push(sent["id"].as_str().expect("a prompt id").to_string());
        }
        ids.push(id);
    }
    for prompt in waits {
        conn.call("prompt.wait", json!({ "prompt": prompt }));
    }
    ids
}

/// `corral --home HOME web`: the login URL it printed.
fn login_url(corral: &Path, home: &Path) -> String {
    let output = Command::new(corral)
        .arg("--home")
        .arg(home)
        .arg("web")
        .stdin(Stdio::null())
        .output()
        .expect("corral web runs");
    let printed = String::from_utf8_lossy(&output.stdout);
    printed
        .split_whitespace()
        .find(|word| word.starts_with("http://") && word.contains("/login?token="))
        .unwrap_or_else(|| panic!("corral web printed no login URL: {output:?}"))
        .to_string()
}

fn split_login(login: &str) -> (String, String) {
    let rest = login.strip_prefix("http://").expect("an http URL");
    let (address, token) = rest.split_once("/login?token=").expect("a login URL");
    (address.to_string(), token.to_string())
}

/// Step 1: `GET /api/v1/overview` on one keep-alive connection, and the socket's `overview`.
fn overview_server(conn: &mut Conn, address: &str, token: &str, repeats: usize) {
    let mut http = KeepAlive::open(address, token);
    let (status, body) = http.get("/api/v1/overview");
    assert_eq!(status, 200, "{body}");
    let overview: Value = serde_json::from_str(&body).expect("JSON");
    let rows = overview["sessions"].as_array().map_or(0, Vec::len);
    for _ in 0..20 {
        http.get("/api/v1/overview");
    }
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let started = Instant::now();
        let (status, _) = http.get("/api/v1/overview");
        times.push(started.elapsed());
        assert_eq!(status, 200);
    }
    let mut socket = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let started = Instant::now();
        conn.call("overview", json!({}));
        socket.push(started.elapsed());
    }
    println!(
        "overview, server: GET /api/v1/overview ({rows} sessions, {} KiB) p50 {} p90 {} \
         (goal p50 <= 20 ms); socket overview p50 {} p90 {}",
        body.len() / 1024,
        ms(percentile(&mut times, 50)),
        ms(percentile(&mut times, 90)),
        ms(percentile(&mut socket, 50)),
        ms(percentile(&mut socket, 90)),
    );
}

/// Step 2: the overview page opened anew `loads` times, navigation start → its rows in the
/// page. The page builds the rows a screen shows first and the rest in slices after the first
/// paint; its marks say when its first overview was read and rendered (usable) and painted;
/// a `MutationObserver` of this script notes when the last row is in (`performance.now()`,
/// counted from navigation start too).
fn overview_browser(browser: &Browser, address: &str, sessions: usize, loads: usize) {
    let (mut read, mut rendered, mut painted, mut complete) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut late = 0;
    for _ in 0..loads {
        browser.goto("about:blank");
        browser.goto(&format!("http://{address}/#/"));
        // Checked at once, then at each DOM change: `already` says the rows were all in
        // before this script ran (its time is then an upper bound).
        let all = browser.wait_until(
            "every session is a row",
            &format!(
                "(() => {{ const first = !window.__looked; window.__looked = true; \
                 return document.querySelectorAll('[data-testid=session-row]').length \
                 >= {sessions} && {{ at: performance.now(), already: first }}; }})()"
            ),
        );
        if all["already"] == json!(true) {
            late += 1;
        }
        complete.push(from_ms(all["at"].as_f64().unwrap()));
        let marks = browser.wait_until(
            "the page's marks are set",
            "(() => { const at = (name) => performance.getEntriesByName(name)[0]?.startTime; \
             const m = { read: at('corral:overview-read'), rendered: at('corral:overview-rendered'), \
             painted: at('corral:overview-painted') }; return m.painted !== undefined && m; })()",
        );
        read.push(from_ms(marks["read"].as_f64().unwrap()));
        rendered.push(from_ms(marks["rendered"].as_f64().unwrap()));
        painted.push(from_ms(marks["painted"].as_f64().unwrap()));
    }
    let rows = browser.count("[data-testid=session-row]");
    assert_eq!(rows, sessions, "every session is a row");
    browser.screenshot("overview-1000");
    println!(
        "overview, browser ({sessions} rows), from navigation start: first screen of rows \
         rendered p50 {} p90 {} (goal p50 <= 300 ms), painted p50 {}, all {sessions} rows in \
         p50 {} p90 {}{}; overview read p50 {}",
        ms(percentile(&mut rendered, 50)),
        ms(percentile(&mut rendered, 90)),
        ms(percentile(&mut painted, 50)),
        ms(percentile(&mut complete, 50)),
        ms(percentile(&mut complete, 90)),
        if late > 0 {
            format!(" ({late} of {loads} were in before the wait began: upper bounds)")
        } else {
            String::new()
        },
        ms(percentile(&mut read, 50)),
    );
}

fn from_ms(ms: f64) -> Duration {
    Duration::from_secs_f64(ms / 1000.0)
}

/// Step 3: LINES lines, each carrying its print time, from a `command` session to the page.
fn line_latency(
    conn: &mut Conn,
    browser: &Browser,
    address: &str,
    token: &str,
    home: &Path,
    lines: usize,
) {
    let work = home.join("shell");
    std::fs::create_dir_all(&work).unwrap();
    conn.call(
        "project.add",
        json!({ "name": "sh", "path": work, "engine": "command" }),
    );
    let session = conn.call("session.new", json!({ "project": "sh", "title": "ticks" }));
    let session = session["id"].as_str().unwrap().to_string();
    browser.goto(&format!("http://{address}/#/sessions/{session}"));
    browser.wait_for("[data-testid=transcript]");
    browser.wait_until(
        "the live feed is connected",
        "document.querySelector('[data-testid=live]').dataset.live === 'true'",
    );
    // Each `tick N T` line: when its text first showed in the page.
    browser.execute(
        r#"window.__ticks = {};
const look = () => {
  const now = Date.now();
  for (const e of document.querySelectorAll('[data-testid=agent-text]')) {
    for (const m of e.textContent.matchAll(/tick (\d+) (\d+)/g)) {
      if (!(m[1] in window.__ticks)) window.__ticks[m[1]] = { printed: Number(m[2]), seen: now };
    }
  }
};
new MutationObserver(look).observe(document.body, { subtree: true, childList: true, characterData: true });"#,
        vec![],
    );
    let command =
        format!("for i in $(seq 1 {lines}); do echo \"tick $i $(date +%s%3N)\"; sleep 0.05; done");
    let sent = conn.call(
        "prompt.send",
        json!({ "session": session, "text": command }),
    );
    browser.wait_until(
        "every line is in the page",
        &format!("Object.keys(window.__ticks).length >= {lines}"),
    );
    let prompt = sent["id"].as_str().unwrap();
    conn.call("prompt.wait", json!({ "prompt": prompt }));
    let ticks = browser.execute("return window.__ticks;", vec![]);
    let mut http = KeepAlive::open(address, token);
    let (status, body) = http.get(&format!(
        "/api/v1/sessions/{session}/events?after=0&limit=1000"
    ));
    assert_eq!(status, 200, "{body}");
    let events: Value = serde_json::from_str(&body).unwrap();
    let events = events["events"]
        .as_array()
        .or_else(|| events.as_array())
        .cloned()
        .unwrap_or_default();
    let stored_at = |tick: &str| -> Option<i64> {
        events.iter().find_map(|event| {
            let text = event["payload"].to_string();
            let words: Vec<&str> = text.split(|c: char| !c.is_ascii_alphanumeric()).collect();
            let found = words.windows(2).any(|pair| pair == ["tick", tick]);
            found.then(|| event["at"].as_i64()).flatten()
        })
    };
    let (mut visible, mut to_store, mut from_store) = (Vec::new(), Vec::new(), Vec::new());
    for (tick, seen) in ticks.as_object().expect("the ticks") {
        let printed = seen["printed"].as_i64().unwrap();
        let shown = seen["seen"].as_i64().unwrap();
        visible.push(millis(shown - printed));
        if let Some(at) = stored_at(tick) {
            to_store.push(millis(at - printed));
            from_store.push(millis(shown - at));
        }
    }
    println!(
        "a line, engine to browser ({} lines): printed -> visible p50 {} p90 {} (goal p50 <= \
         50 ms); printed -> event at p50 {}; event at -> visible p50 {}",
        visible.len(),
        ms(percentile(&mut visible, 50)),
        ms(percentile(&mut visible, 90)),
        or_dash(&mut to_store),
        or_dash(&mut from_store),
    );
}

/// A duration of `ms` milliseconds (a negative difference of clocks read as 0).
fn millis(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

fn or_dash(times: &mut [Duration]) -> String {
    if times.is_empty() {
        "-".into()
    } else {
        ms(percentile(times, 50))
    }
}

fn percentile(times: &mut [Duration], p: usize) -> Duration {
    times.sort();
    times[(times.len() * p / 100).min(times.len() - 1)]
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

/// A keep-alive HTTP/1.1 connection making bearer-authenticated GETs.
struct KeepAlive {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    address: String,
    token: String,
}

impl KeepAlive {
    fn open(address: &str, token: &str) -> KeepAlive {
        let stream = TcpStream::connect(address).expect("the dashboard listens");
        stream.set_nodelay(true).unwrap();
        KeepAlive {
            reader: BufReader::with_capacity(1 << 16, stream.try_clone().unwrap()),
            writer: stream,
            address: address.to_string(),
            token: token.to_string(),
        }
    }

    /// GET `path`: the status and the body (the response must have a Content-Length).
    fn get(&mut self, path: &str) -> (u16, String) {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            self.address, self.token
        );
        self.writer.write_all(request.as_bytes()).unwrap();
        let mut line = String::new();
        self.reader.read_line(&mut line).unwrap();
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut length = None;
        loop {
            line.clear();
            self.reader.read_line(&mut line).unwrap();
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((key, value)) = header.split_once(':') {
                if key.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().ok();
                }
            }
        }
        let length: usize = length.expect("a Content-Length");
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}
