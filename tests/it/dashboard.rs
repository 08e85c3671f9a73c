//! The dashboard in a real browser: headless Chromium (src/testkit/browser.rs) against a
//! daemon on the fake engine in a temporary home, through the page's DOM contract (the
//! `data-testid`s of docs/http.md): logging in through the URL `corral web` prints, the
//! overview's sessions and their states, a prompt sent from the page whose events stream in,
//! a hanging prompt cancelled from the page, a setting changed and an invalid one refused in
//! place, the theme, a worktree session's branch, diff stat, merge, recreate and discard
//! (real git, isolated: `common::git`), and a missing, forged or expired cookie sent to the
//! login page. Plain HTTP from the test (no browser needed) checks what a browser would not
//! send: a write with the cookie but without its CSRF token, and a foreign Host header or
//! WebSocket Origin.
//!
//! Each page is saved as `target/screenshots/<test>-<page>.png`; with
//! `CORRAL_SCREENSHOTS_TO_DOCS=1` the overview, session, projects, settings, history and login
//! pages (and a worktree session's, merged and missing) are also copied to
//! `docs/screenshots/<page>.png` (what the README shows).

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::killpg;
use nix::unistd::Pid;
use serde_json::{json, Value};

use common::browser::{self, js_string, request, Browser, Response};
use common::daemon::{wait_until, DaemonHome};
use common::git::GitHome;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// The keys that make a new line in the prompt box without sending it (Shift+Enter, then the
/// modifier released: WebDriver's key codes).
const NEW_LINE: &str = "\u{E008}\u{E007}\u{E000}";

/// A daemon on the fake engine (project `p`) with the dashboard's address and login URL as
/// `corral web` printed them.
struct Dashboard {
    home: DaemonHome,
    /// `127.0.0.1:PORT`, as the login URL names it.
    address: String,
    /// `http://127.0.0.1:PORT`.
    base: String,
    /// The URL `corral web` printed: `http://127.0.0.1:PORT/login?token=…`.
    login: String,
    /// The token in it (`Authorization: Bearer` for the test's own API calls).
    token: String,
}

impl Dashboard {
    /// A home whose project `p` runs on the fake engine, with a session for each title.
    fn start(titles: &[&str]) -> (Dashboard, Vec<String>) {
        let home = DaemonHome::new();
        home.config(&[("engines.fake.path", FAKE), ("cancel.grace_ms", "300")]);
        home.add_project("p", &home.work(), "fake");
        let ids = titles
            .iter()
            .map(|title| home.new_session(&["p", "--title", title]))
            .collect();
        let login = web_url(&home);
        let (address, token) = split_login(&login);
        let dashboard = Dashboard {
            home,
            base: format!("http://{address}"),
            address,
            login,
            token,
        };
        (dashboard, ids)
    }

    /// An API request with the token as a bearer (no cookie, no CSRF token needed).
    fn api(&self, method: &str, path: &str, body: Option<Value>) -> Response {
        let bearer = format!("Bearer {}", self.token);
        let body = body.map(|body| body.to_string());
        request(
            &self.address,
            method,
            path,
            &[("Authorization", &bearer)],
            body.as_deref(),
        )
    }

    /// A setting's stored value (`settings.get`'s `value`), through the API.
    fn setting(&self, name: &str) -> Value {
        let response = self.api("GET", &format!("/api/v1/settings/{name}"), None);
        assert_eq!(response.status, 200, "{response:?}");
        response.json()["value"].clone()
    }

    /// Opens the login URL in `browser`: the page is the app's, with the login cookie.
    fn log_in(&self, browser: &Browser) {
        log_in(browser, &self.login, &self.base);
    }

    /// Opens one of the app's hash routes (`#/settings`) in a browser already logged in.
    fn open(&self, browser: &Browser, route: &str) {
        browser.goto(&format!("{}/{route}", self.base));
    }

    /// A session's prompts as `corral history --json` gives them.
    fn prompts(&self, session: &str) -> Vec<Value> {
        let history = self.home.json(&["history", session, "--json"]);
        history["prompts"].as_array().cloned().unwrap_or_default()
    }
}

/// Opens `login` (a login URL) in `browser`: the page is the app's at `base`, with the login
/// cookie.
fn log_in(browser: &Browser, login: &str, base: &str) {
    browser.goto(login);
    browser.wait_for("[data-testid=nav-overview]");
    assert_eq!(
        browser.document_url(),
        format!("{base}/"),
        "the login goes to the app"
    );
    assert!(
        browser.cookie("corral_session").is_some(),
        "the login set its cookie"
    );
}

/// Runs `corral --home HOME web` (which starts the daemon if need be): the login URL it
/// printed.
fn web_url(home: &DaemonHome) -> String {
    let home_arg = home.path().to_str().expect("temporary paths are UTF-8");
    let printed = home.ok(&["--home", home_arg, "web"]);
    login_url_in(&printed).unwrap_or_else(|| panic!("corral web printed no login URL: {printed}"))
}

/// The first `http://…/login?token=…` word of `text`.
fn login_url_in(text: &str) -> Option<String> {
    text.split_whitespace()
        .find(|word| word.starts_with("http://") && word.contains("/login?token="))
        .map(|word| word.trim_end_matches(['.', ',', ')']).to_string())
}

/// `127.0.0.1:PORT` and the token of a login URL.
fn split_login(login: &str) -> (String, String) {
    let rest = login.strip_prefix("http://").expect("an http URL");
    let (address, query) = rest.split_once("/login?token=").expect("a login URL");
    (address.to_string(), query.to_string())
}

/// The lines typed into the prompt box, each after the first on a new line.
fn typed_lines(lines: &[&str]) -> String {
    lines.join(NEW_LINE)
}

/// Saves the browser's page as a screenshot and, with `CORRAL_SCREENSHOTS_TO_DOCS` set, as
/// `docs/screenshots/<page>.png` too.
fn screenshot(browser: &Browser, page: &str) {
    let path = browser.screenshot(page);
    if std::env::var_os("CORRAL_SCREENSHOTS_TO_DOCS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(&path, docs.join(format!("{page}.png"))).unwrap();
    }
}

/// A selector for the settings row of `name` and, within it, `inner`.
fn setting_field(name: &str, inner: &str) -> String {
    format!(
        "[data-testid=setting-row][data-name={}] [data-testid={inner}]",
        js_string(name)
    )
}

/// The harness itself: a page's later change wakes a wait, a screenshot is written, and
/// dropping the browser leaves no process behind (its driver's group, and the crash handler
/// that leaves it).
#[test]
fn the_browser_harness_waits_for_the_page_and_leaves_no_process() {
    if !browser::available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let browser = Browser::start("harness", dir.path());
    browser.goto(
        "data:text/html,<title>t</title><body><script>setTimeout(() => { \
         const p = document.createElement('p'); p.id = 'late'; p.textContent = 'arrived'; \
         document.body.appendChild(p); }, 300)</script></body>",
    );
    browser.wait_for_text("#late", "arrived");
    assert_eq!(browser.text("#late"), "arrived");
    assert_eq!(
        browser.execute("return arguments[0] + 1;", vec![json!(41)]),
        json!(42)
    );
    let shot = browser.screenshot("blank");
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "{shot:?} is no PNG");
    let group = Pid::from_raw(browser.driver_pid() as i32);
    let home = browser.home();
    assert!(killpg(group, None).is_ok(), "the driver's group runs");
    let running = browser::processes_in(&home);
    assert!(
        running.len() > 2,
        "the driver and Chromium's processes: {running:?}"
    );
    drop(browser);
    // Nothing tells a test that another process has exited: it looks until then.
    let until = Instant::now() + Duration::from_secs(10);
    while killpg(group, None).is_ok() || !browser::processes_in(&home).is_empty() {
        assert!(
            Instant::now() < until,
            "processes of the browser are left: {:?}",
            browser::processes_in(&home)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `corral web`'s URL logs the browser in; the overview lists every session with its state
/// by word and by attribute (a new session, one answered, one failed, one running); the
/// projects and history pages show what the CLI made; each page is saved as a screenshot.
#[test]
fn the_web_url_logs_in_and_the_overview_lists_every_session() {
    if !browser::available() {
        return;
    }
    let (dashboard, ids) = Dashboard::start(&["fresh", "answered", "broken", "busy"]);
    let home = &dashboard.home;
    home.ok(&["send", &ids[1], "--wait", "@fake answer=all done\nsay done"]);
    home.fails(
        &[
            "send",
            &ids[2],
            "--wait",
            "@fake fail=the model broke\nbreak",
        ],
        1,
    );
    home.ok(&["send", &ids[3], "@fake hang\nkeep going"]);
    let full = home.path().join("full");
    std::fs::create_dir(&full).unwrap();
    home.ok(&[
        "project",
        "add",
        "wide",
        full.to_str().unwrap(),
        "--engine",
        "fake",
        "--full-access",
    ]);

    let browser = Browser::start("overview", home.path());
    dashboard.log_in(&browser);
    browser.wait_until(
        "the four sessions are listed, the busy one working",
        &format!(
            "document.querySelectorAll('[data-testid=session-row]').length === 4 && \
             document.querySelector('[data-testid=session-row][data-session-id={}]')\
             ?.dataset.state === 'working'",
            js_string(&ids[3])
        ),
    );
    let expected = [
        (&ids[0], "idle"),
        (&ids[1], "idle"),
        (&ids[2], "failed"),
        (&ids[3], "working"),
    ];
    for (id, state) in expected {
        let row = format!(
            "[data-testid=session-row][data-session-id={}]",
            js_string(id)
        );
        assert_eq!(
            browser.attr(&row, "data-state").as_deref(),
            Some(state),
            "session {id}"
        );
        let word = browser.text(&format!("{row} [data-testid=session-state]"));
        assert!(
            word.to_lowercase().contains(state),
            "session {id} shows {word:?}"
        );
    }
    // Live once its event stream is open (the rows above come from the first reads, which
    // may finish before the WebSocket's handshake does).
    browser.wait_for("[data-testid=live][data-live=true]");
    screenshot(&browser, "overview");

    browser.click("[data-testid=nav-projects]");
    browser.wait_until(
        "both projects are listed",
        "document.querySelectorAll('[data-testid=project-row]').length === 2",
    );
    assert_eq!(
        browser.count("[data-testid=project-row] [data-testid=full-access-warning]"),
        1,
        "the full-access project, and only it, carries the warning"
    );
    screenshot(&browser, "projects");

    browser.click("[data-testid=nav-history]");
    browser.wait_for("[data-testid=exec-row]");
    screenshot(&browser, "history");

    // The session page of the answered session shows its answer.
    dashboard.open(&browser, &format!("#/sessions/{}", ids[1]));
    browser.wait_for_text("[data-testid=agent-text]", "all done");
    assert!(browser
        .text("[data-testid=session-title]")
        .contains("answered"));
    home.ok(&["cancel", &ids[3]]);
}

/// A prompt typed into the session page is sent and its events stream in as the engine
/// prints them: each progress event is on the page before the answer is (a `MutationObserver`
/// notes in which DOM change each event first appeared), then the answer.
#[test]
fn a_prompt_sent_from_the_page_streams_its_events_and_answer_in() {
    if !browser::available() {
        return;
    }
    let (dashboard, ids) = Dashboard::start(&["chat"]);
    let session = &ids[0];
    let browser = Browser::start("prompt", dashboard.home.path());
    dashboard.log_in(&browser);
    dashboard.open(&browser, &format!("#/sessions/{session}"));
    browser.wait_for("[data-testid=prompt-input]");
    browser.wait_until(
        "the live feed is connected",
        "document.querySelector('[data-testid=live]').dataset.live === 'true'",
    );
    // Notes, for each event element, the number of the DOM change it first appeared in.
    browser.execute(
        r#"window.__seen = []; let change = 0;
const note = () => {
  change += 1;
  for (const e of document.querySelectorAll('[data-testid=event]')) {
    if (!window.__seen.some((s) => s.seq === e.dataset.seq)) {
      window.__seen.push({ seq: e.dataset.seq, kind: e.dataset.kind, change });
    }
  }
};
note();
new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });"#,
        vec![],
    );
    browser.type_into(
        "[data-testid=prompt-input]",
        &typed_lines(&[
            "@fake deltas=3",
            "@fake interval=400",
            "@fake answer=The answer streamed in.",
            "stream please",
        ]),
    );
    browser.click("[data-testid=prompt-send]");
    browser.wait_for_text("[data-testid=agent-text]", "The answer streamed in.");
    browser.wait_for("[data-testid=event][data-kind='prompt.done']");
    screenshot(&browser, "session");

    let seen = browser.execute("return window.__seen;", vec![]);
    let seen = seen.as_array().expect("the notes");
    let change_of = |kind: &str| -> Vec<u64> {
        seen.iter()
            .filter(|event| event["kind"] == kind)
            .map(|event| event["change"].as_u64().unwrap())
            .collect()
    };
    let progress = change_of("tool");
    let answer = change_of("message");
    assert_eq!(progress.len(), 3, "three progress events: {seen:?}");
    assert_eq!(answer.len(), 1, "one answer: {seen:?}");
    assert!(
        progress.windows(2).all(|pair| pair[0] < pair[1]) && progress[2] < answer[0],
        "each event appeared on its own, before the answer: {seen:?}"
    );
    // The transcript is in the events' order.
    let seqs: Vec<u64> = browser
        .execute(
            "return Array.from(document.querySelectorAll('[data-testid=event]'))\
             .map((e) => Number(e.dataset.seq));",
            vec![],
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|seq| seq.as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
    let prompts = dashboard.prompts(session);
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert_eq!(prompts[0]["status"], "done", "{prompts:?}");
    assert!(
        prompts[0]["text"]
            .as_str()
            .unwrap()
            .contains("@fake deltas=3\n@fake interval=400"),
        "the lines were sent as typed: {prompts:?}"
    );
}

/// A prompt whose engine hangs is cancelled from the page: the run ends, the transcript says
/// so, the prompt is stored cancelled and the overview shows the session waiting.
#[test]
fn a_hanging_prompt_is_cancelled_from_the_page() {
    if !browser::available() {
        return;
    }
    let (dashboard, ids) = Dashboard::start(&["stuck"]);
    let session = &ids[0];
    let browser = Browser::start("cancel", dashboard.home.path());
    dashboard.log_in(&browser);
    dashboard.open(&browser, &format!("#/sessions/{session}"));
    browser.type_into(
        "[data-testid=prompt-input]",
        &typed_lines(&["@fake hang", "wait here"]),
    );
    browser.click("[data-testid=prompt-send]");
    browser.wait_for("[data-testid=event][data-kind='run.started']");
    browser.wait_until(
        "the cancel button is enabled",
        "(b => b && !b.disabled)(document.querySelector('[data-testid=prompt-cancel]'))",
    );
    let prompts = dashboard.prompts(session);
    assert_eq!(prompts[0]["status"], "running", "{prompts:?}");
    browser.click("[data-testid=prompt-cancel]");
    browser.wait_for("[data-testid=event][data-kind='prompt.cancelled']");
    screenshot(&browser, "session-cancelled");
    let prompts = dashboard.prompts(session);
    assert_eq!(prompts[0]["status"], "cancelled", "{prompts:?}");
    // The engine's process is gone with its run (on a shared store the daemon's lease guard
    // stays: it lives as long as the daemon).
    wait_until("the fake engine has ended", || {
        common::daemon::beside_the_daemon(&dashboard.home).is_empty()
    });
    browser.click("[data-testid=nav-overview]");
    browser.wait_until(
        "the overview shows the session idle",
        &format!(
            "document.querySelector('[data-testid=session-row][data-session-id={}]')\
             ?.dataset.state === 'idle'",
            js_string(session)
        ),
    );
}

/// The pause controls: the session page pauses its session (a prompt sent then stays
/// queued, the state says paused), the overview shows the pause with its Resume, which lets
/// the prompt run; "Pause all" pauses everything.
#[test]
fn a_session_is_paused_and_resumed_from_the_page() {
    if !browser::available() {
        return;
    }
    let (dashboard, ids) = Dashboard::start(&["held"]);
    let session = &ids[0];
    let browser = Browser::start("pause", dashboard.home.path());
    dashboard.log_in(&browser);
    dashboard.open(&browser, &format!("#/sessions/{session}"));
    browser.wait_for_text("[data-testid=session-pause]", "Pause");
    browser.click("[data-testid=session-pause]");
    browser.wait_for_text("[data-testid=session-state]", "paused");
    browser.wait_for_text("[data-testid=session-pause]", "Resume");
    browser.type_into("[data-testid=prompt-input]", "wait for the resume");
    browser.click("[data-testid=prompt-send]");
    wait_until("the prompt is stored", || {
        !dashboard.prompts(session).is_empty()
    });
    let prompts = dashboard.prompts(session);
    assert_eq!(
        prompts[0]["status"], "queued",
        "held by the pause: {prompts:?}"
    );
    screenshot(&browser, "session-paused");

    browser.click("[data-testid=nav-overview]");
    browser.wait_for_text("[data-testid=pause-banner]", "session held");
    browser.wait_until(
        "the overview shows the session paused",
        &format!(
            "document.querySelector('[data-testid=session-row][data-session-id={}]')\
             ?.dataset.state === 'paused'",
            js_string(session)
        ),
    );
    browser.click("[data-testid=pause-resume]");
    wait_until("the prompt ends", || {
        dashboard.prompts(session)[0]["status"] == "done"
    });
    browser.wait_until(
        "the banner is gone",
        "document.querySelectorAll('[data-testid=pause-banner]').length === 0",
    );
    browser.click("[data-testid=pause-all]");
    browser.wait_for_text("[data-testid=pause-banner]", "everything");
    let pauses = dashboard.home.json(&["pause", "--json"]);
    assert_eq!(pauses[0]["scope"], "all", "{pauses}");

    // Held by its project's pause, the session page's Resume lifts that pause.
    dashboard.home.ok(&["resume", "--all"]);
    dashboard.home.ok(&["pause", "--project", "p"]);
    dashboard.open(&browser, &format!("#/sessions/{session}"));
    browser.wait_for_text("[data-testid=session-pause]", "Resume");
    browser.click("[data-testid=session-pause]");
    wait_until("the project's pause is lifted", || {
        dashboard.home.json(&["pause", "--json"]) == serde_json::json!([])
    });
}

/// The schedules page: a schedule added to a session from the form shows its next time;
/// paused, its row says so; its firings are listed (none yet); a project's schedule names
/// the project; a cron expression that is not one is refused in the form; removed, it is gone.
#[test]
fn schedules_are_added_paused_and_removed_from_the_page() {
    if !browser::available() {
        return;
    }
    let (dashboard, ids) = Dashboard::start(&["triage"]);
    let browser = Browser::start("schedules", dashboard.home.path());
    dashboard.log_in(&browser);
    browser.click("[data-testid=nav-schedules]");
    browser.wait_for("[data-testid=schedules-empty]");
    browser.wait_until(
        "the targets are listed",
        "document.querySelectorAll('[data-testid=schedule-target] option').length === 2",
    );
    browser.select(
        "[data-testid=schedule-target]",
        &format!("session:{}", ids[0]),
    );
    browser.type_into("[data-testid=schedule-cron]", "every morning");
    browser.type_into("[data-testid=schedule-text]", "triage the new issues");
    browser.click("[data-testid=schedule-add]");
    browser.wait_for_text("[data-testid=schedule-error]", "is not a cron expression");
    browser.type_into("[data-testid=schedule-cron]", "0 9 * * 1-5");
    browser.click("[data-testid=schedule-add]");
    browser.wait_for("[data-testid=schedule-row]");
    let listed = dashboard.home.json(&["schedule", "list", "--json"]);
    assert_eq!(listed[0]["session_id"], ids[0].as_str(), "{listed}");
    assert_eq!(listed[0]["text"], "triage the new issues", "{listed}");
    assert!(browser
        .text("[data-testid=schedule-row]")
        .contains("0 9 * * 1-5"));

    browser.click("[data-testid=schedule-pause]");
    browser.wait_until(
        "the row says paused",
        "document.querySelector('[data-testid=schedule-row]')?.dataset.paused === 'true'",
    );
    assert_eq!(
        dashboard.home.json(&["schedule", "list", "--json"])[0]["paused"],
        true
    );
    browser.click("[data-testid=schedule-firings-toggle]");
    browser.wait_for_text("[data-testid=schedule-firings]", "no firing yet");
    screenshot(&browser, "schedules");

    browser.click("[data-testid=schedule-remove]");
    confirm(&browser);
    browser.wait_for("[data-testid=schedules-empty]:not([hidden])");
    assert_eq!(
        dashboard.home.json(&["schedule", "list", "--json"]),
        json!([])
    );
}

/// A daemon restarted under an open page (an upgrade): the page's feed comes back by itself
/// at the same address, says so as a notice naming the restart (not as an error), and its
/// login still sends a prompt (the cookie and the page's CSRF token outlive the daemon).
#[test]
fn an_open_page_comes_back_after_a_daemon_restart_and_says_so() {
    if !browser::available() {
        return;
    }
    let (dashboard, ids) = Dashboard::start(&["chat"]);
    let session = &ids[0];
    let browser = Browser::start("restart", dashboard.home.path());
    dashboard.log_in(&browser);
    dashboard.open(&browser, &format!("#/sessions/{session}"));
    browser.wait_for("[data-testid=prompt-input]");
    let live = "document.querySelector('[data-testid=live]')";
    browser.wait_until(
        "the live feed is connected",
        &format!("{live}.dataset.live === 'true'"),
    );
    browser.execute(
        r#"window.__toasts = [];
new MutationObserver(() => {
  for (const t of document.querySelectorAll('#toasts .toast')) window.__toasts.push(t.textContent);
}).observe(document.getElementById('toasts'), { childList: true });"#,
        vec![],
    );
    dashboard.home.ok(&["daemon", "restart"]);
    browser.wait_until(
        "the page is back on the restarted daemon",
        &format!("{live}.dataset.live === 'true' && {live}.dataset.reconnects === '1'"),
    );
    assert_eq!(
        browser
            .attr("[data-testid=live]", "data-restarted")
            .as_deref(),
        Some("true")
    );
    let toasts = browser.execute("return window.__toasts;", vec![]);
    assert!(
        toasts
            .as_array()
            .unwrap()
            .iter()
            .any(|toast| toast.as_str() == Some("Reconnected: the daemon was restarted")),
        "{toasts}"
    );
    assert_eq!(browser.count("#toasts .toast.error"), 0, "no error shown");
    browser.type_into(
        "[data-testid=prompt-input]",
        &typed_lines(&["@fake answer=Still logged in.", "hello again"]),
    );
    browser.click("[data-testid=prompt-send]");
    browser.wait_for_text("[data-testid=agent-text]", "Still logged in.");
}

/// A setting changed on the settings page is stored; an invalid value is refused in place
/// with the server's message and nothing is stored; the theme chosen is stored as `ui.theme`
/// and applied, and still chosen after a reload.
#[test]
fn a_setting_is_changed_and_an_invalid_value_refused_in_place() {
    if !browser::available() {
        return;
    }
    let (dashboard, _) = Dashboard::start(&["s"]);
    let browser = Browser::start("settings", dashboard.home.path());
    dashboard.log_in(&browser);
    browser.click("[data-testid=nav-settings]");
    browser.wait_for(&setting_field("slots.total", "setting-input"));

    browser.type_into(&setting_field("slots.total", "setting-input"), "7");
    browser.click(&setting_field("slots.total", "setting-save"));
    wait_until("slots.total is stored", || {
        dashboard.setting("slots.total") == "7"
    });
    assert_eq!(
        browser.text(&setting_field("slots.total", "setting-error")),
        ""
    );

    let before = dashboard.setting("cancel.grace_ms");
    let refused = dashboard.api(
        "PUT",
        "/api/v1/settings/cancel.grace_ms",
        Some(json!({ "value": "soon" })),
    );
    assert_eq!(refused.status, 400, "{refused:?}");
    let message = refused.json()["error"]["message"]
        .as_str()
        .expect("an error message")
        .to_string();
    browser.type_into(&setting_field("cancel.grace_ms", "setting-input"), "soon");
    browser.click(&setting_field("cancel.grace_ms", "setting-save"));
    let error = setting_field("cancel.grace_ms", "setting-error");
    browser.wait_for_text(&error, &message);
    assert_eq!(
        dashboard.setting("cancel.grace_ms"),
        before,
        "nothing stored"
    );
    screenshot(&browser, "settings");

    browser.select("[data-testid=theme]", "dark");
    wait_until("ui.theme is stored", || {
        dashboard.setting("ui.theme") == "dark"
    });
    browser.wait_until(
        "the dark theme is applied",
        "document.documentElement.dataset.theme === 'dark'",
    );
    dashboard.open(&browser, "#/settings");
    browser.wait_for("[data-testid=theme]");
    browser.wait_until(
        "the stored theme is chosen",
        "document.querySelector('[data-testid=theme]').value === 'dark'",
    );
    screenshot(&browser, "settings-dark");
}

/// A browser without the cookie, with a forged one, or with one whose login the token's
/// rotation ended, is sent to the login page; so is a page already open when its login ends.
/// The old login URL no longer logs in; the new one does.
#[test]
fn a_missing_or_expired_cookie_is_sent_to_the_login_page() {
    if !browser::available() {
        return;
    }
    let (dashboard, _) = Dashboard::start(&["s"]);
    let browser = Browser::start("login", dashboard.home.path());
    let login_page = format!("{}/login", dashboard.base);
    // Each visit starts from a blank page, so that a route of the app is a new document (not
    // a change of fragment the open page would handle itself).
    let visit = |route: &str| {
        browser.goto("about:blank");
        browser.goto(&format!("{}/{route}", dashboard.base));
        browser.document_url()
    };

    assert_eq!(visit(""), login_page, "no cookie: the login page");
    browser.wait_for_text("body", "corral web");
    screenshot(&browser, "login");

    dashboard.log_in(&browser);
    browser.delete_cookie("corral_session");
    assert_eq!(visit("#/settings"), login_page, "a deleted cookie");

    dashboard.log_in(&browser);
    browser.set_cookie("corral_session", &"0".repeat(64));
    assert_eq!(visit(""), login_page, "a forged cookie");

    // The token's rotation ends every login: the open page goes to the login page at its next
    // request, and a new visit too.
    dashboard.log_in(&browser);
    browser.wait_for("[data-testid=sessions]");
    let home_arg = dashboard.home.path().to_str().unwrap();
    let rotated = dashboard
        .home
        .ok(&["--home", home_arg, "web", "--rotate-token"]);
    let new_login = login_url_in(&rotated).unwrap_or_else(|| web_url(&dashboard.home));
    assert_ne!(new_login, dashboard.login, "a new token");
    browser.click("[data-testid=nav-settings]");
    browser.wait_for_path("/login");
    assert_eq!(browser.document_url(), login_page, "the open page");
    assert_eq!(visit(""), login_page, "an expired cookie");
    browser.goto(&dashboard.login);
    assert_eq!(
        browser.document_url(),
        dashboard.login,
        "the old URL logs in no more: it stays on the login page"
    );
    browser.wait_for_text("body", "corral web");
    assert_eq!(visit(""), login_page, "the old URL set no cookie");
    browser.goto(&new_login);
    browser.wait_for("[data-testid=nav-overview]");
    assert_eq!(browser.document_url(), format!("{}/", dashboard.base));
}

/// On a phone's screen (390 CSS pixels wide) every page fits its width: nothing is wider than
/// the window, so nothing needs a sideways scroll.
#[test]
fn every_page_fits_a_phone_screen() {
    if !browser::available() {
        return;
    }
    let (dashboard, ids) = Dashboard::start(&["a session with a rather long title to wrap"]);
    dashboard.home.ok(&[
        "send",
        &ids[0],
        "--wait",
        "@fake answer=An answer long enough to wrap on a narrow screen, twice over at least.\nhi",
    ]);
    dashboard.home.ok(&[
        "schedule",
        "add",
        &ids[0],
        "0 9 * * 1-5",
        "A prompt long enough to wrap on a narrow screen, every weekday morning at nine.",
    ]);
    let browser = Browser::start("phone", dashboard.home.path());
    browser.set_window_size(390, 844);
    dashboard.log_in(&browser);
    let fits = "document.documentElement.scrollWidth <= document.documentElement.clientWidth";
    let pages = [
        ("#/", "[data-testid=session-row]"),
        (
            &*format!("#/sessions/{}", ids[0]),
            "[data-testid=agent-text]",
        ),
        ("#/projects", "[data-testid=project-row]"),
        ("#/schedules", "[data-testid=schedule-row]"),
        ("#/settings", "[data-testid=setting-row]"),
        ("#/history", "[data-testid=exec-row]"),
    ];
    for (route, content) in pages {
        dashboard.open(&browser, route);
        browser.wait_for(content);
        let width = browser.execute(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];",
            vec![],
        );
        assert_eq!(
            browser.execute(&format!("return {fits};"), vec![]),
            json!(true),
            "{route} is wider than the phone's screen: {width}"
        );
        if route == "#/" {
            screenshot(&browser, "overview-phone");
        }
    }
}

/// The login cookie's properties, then a write made with it: refused (403, a JSON error)
/// without the CSRF token or with a wrong one, stored with the token the page's meta tag
/// holds; a bearer write needs none.
#[test]
fn a_cookie_write_without_the_csrf_token_is_refused() {
    let (dashboard, _) = Dashboard::start(&[]);
    let address = &dashboard.address;

    // No cookie: the app sends the browser to the login page, the API answers 401.
    let app = request(address, "GET", "/", &[], None);
    assert_eq!(app.status, 303, "{app:?}");
    assert_eq!(app.header("location"), Some("/login"), "{app:?}");
    let api = request(address, "GET", "/api/v1/overview", &[], None);
    assert_eq!(api.status, 401, "{api:?}");
    let page = request(address, "GET", "/login", &[], None);
    assert_eq!(page.status, 401, "{page:?}");
    assert!(page.body.contains("corral web"), "{page:?}");

    let token_path = format!("/login?token={}", dashboard.token);
    let login = request(address, "GET", &token_path, &[], None);
    assert_eq!(login.status, 303, "{login:?}");
    assert_eq!(login.header("location"), Some("/"), "{login:?}");
    let set_cookie = login.header("set-cookie").expect("a cookie").to_string();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set_cookie.contains(part), "{set_cookie}");
    }
    let cookie = set_cookie.split(';').next().unwrap().trim().to_string();
    assert!(cookie.starts_with("corral_session="), "{cookie}");
    let wrong = request(address, "GET", "/login?token=nope", &[], None);
    assert_eq!(wrong.status, 401, "{wrong:?}");
    assert!(wrong.header("set-cookie").is_none(), "{wrong:?}");

    let app = request(address, "GET", "/", &[("Cookie", &cookie)], None);
    assert_eq!(app.status, 200, "{app:?}");
    let csrf = app
        .body
        .split("name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page carries its CSRF token")
        .to_string();
    assert!(csrf.len() >= 32 && !csrf.contains("{{"), "{csrf}");

    let put = |headers: &[(&str, &str)], value: &str| {
        request(
            address,
            "PUT",
            "/api/v1/settings/slots.total",
            headers,
            Some(&json!({ "value": value }).to_string()),
        )
    };
    let refused = put(&[("Cookie", &cookie)], "4");
    assert_eq!(refused.status, 403, "no CSRF token: {refused:?}");
    assert!(
        refused.json()["error"]["message"].is_string(),
        "{refused:?}"
    );
    let refused = put(&[("Cookie", &cookie), ("X-CSRF-Token", "0123abcd")], "4");
    assert_eq!(refused.status, 403, "a wrong CSRF token: {refused:?}");
    assert_eq!(
        dashboard.setting("slots.total"),
        Value::Null,
        "nothing stored"
    );

    let stored = put(&[("Cookie", &cookie), ("X-CSRF-Token", &csrf)], "4");
    assert_eq!(stored.status, 200, "{stored:?}");
    assert_eq!(dashboard.setting("slots.total"), "4");
    // Reads need no CSRF token.
    let read = request(
        address,
        "GET",
        "/api/v1/overview",
        &[("Cookie", &cookie)],
        None,
    );
    assert_eq!(read.status, 200, "{read:?}");
    // A script's bearer token is no cookie: no CSRF token is asked of it.
    let bearer = format!("Bearer {}", dashboard.token);
    let stored = put(&[("Authorization", &bearer)], "5");
    assert_eq!(stored.status, 200, "{stored:?}");
    assert_eq!(dashboard.setting("slots.total"), "5");
}

/// A request whose Host is not the server's (DNS rebinding) is refused, with a valid token or
/// cookie; the server's own names are served; a WebSocket upgrade from a foreign Origin is
/// refused. No response carries a CORS header.
#[test]
fn a_request_with_a_foreign_host_header_is_refused() {
    let (dashboard, _) = Dashboard::start(&[]);
    let address = &dashboard.address;
    let port = address.rsplit_once(':').unwrap().1;
    let bearer = format!("Bearer {}", dashboard.token);
    let foreign = format!("rebind.example:{port}");
    let status = |host: &str| {
        request(
            address,
            "GET",
            "/api/v1/status",
            &[("Host", host), ("Authorization", &bearer)],
            None,
        )
    };
    for host in [foreign.as_str(), "rebind.example", "127.0.0.2:1"] {
        let refused = status(host);
        assert_eq!(refused.status, 403, "Host {host}: {refused:?}");
        assert!(refused.header("access-control-allow-origin").is_none());
    }
    for host in [
        address.clone(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
    ] {
        let served = status(&host);
        assert_eq!(served.status, 200, "Host {host}: {served:?}");
        assert!(served.json()["http"]["listen"].is_string(), "{served:?}");
        assert!(served.header("access-control-allow-origin").is_none());
    }
    let token_path = format!("/login?token={}", dashboard.token);
    let login = request(address, "GET", &token_path, &[("Host", &foreign)], None);
    assert_eq!(login.status, 403, "{login:?}");
    assert!(login.header("set-cookie").is_none(), "{login:?}");

    let upgrade = |origin: &str| {
        request(
            address,
            "GET",
            "/api/v1/events",
            &[
                ("Authorization", &bearer),
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Origin", origin),
            ],
            None,
        )
    };
    let refused = upgrade(&format!("http://{foreign}"));
    assert_eq!(refused.status, 403, "a foreign Origin: {refused:?}");
    let refused = upgrade("null");
    assert_eq!(refused.status, 403, "an opaque Origin: {refused:?}");
    // The server's own origin upgrades (the connection is dropped at once).
    let accepted = upgrade(&dashboard.base);
    assert_eq!(accepted.status, 101, "the server's Origin: {accepted:?}");
}

/// The dashboard of a home whose git is isolated (`common::git`): the daemon `corral web`
/// starts runs with that git, and so do its engines and git children.
struct GitDashboard {
    git: GitHome,
    base: String,
    login: String,
}

impl GitDashboard {
    fn start() -> GitDashboard {
        let git = GitHome::new();
        git.config(&[("cancel.grace_ms", "300")]);
        let home_arg = git
            .path()
            .to_str()
            .expect("temporary paths are UTF-8")
            .to_string();
        let printed = git.ok(&["--home", &home_arg, "web"]);
        let login = login_url_in(&printed)
            .unwrap_or_else(|| panic!("corral web printed no login URL: {printed}"));
        let (address, _) = split_login(&login);
        GitDashboard {
            git,
            base: format!("http://{address}"),
            login,
        }
    }

    /// A repository `repo` (one commit on `main`), its worktree project `p` on the command
    /// engine, and a session of it: (repo, session).
    fn session(&self, title: &str) -> (PathBuf, String) {
        let repo = self.git.repo("repo");
        self.git
            .add_project("p", &repo, &["--isolation", "worktree"]);
        let session = self.git.new_session(&["p", "--title", title]);
        (repo, session)
    }

    fn open(&self, browser: &Browser, route: &str) {
        browser.goto(&format!("{}/{route}", self.base));
    }
}

/// Waits until the worktree panel says `state` (its `data-state`).
fn wait_for_worktree_state(browser: &Browser, state: &str) {
    browser.wait_until(
        &format!("the worktree is {state}"),
        &format!(
            "document.querySelector('[data-testid=worktree-state]')?.dataset.state === {}",
            js_string(state)
        ),
    );
}

/// Clicks OK in the confirmation dialog open now.
fn confirm(browser: &Browser) {
    browser.wait_for("dialog[data-testid=confirm][open] [data-testid=confirm-ok]");
    browser.click("[data-testid=confirm-ok]");
}

/// A worktree session (issue 13) whose prompt committed a file: its overview row names its
/// branch; its page shows the worktree's path, branch, base (short sha) and state, and the
/// diff stat against the base ("1 file changed", the stat text naming the file); Merge asks
/// in a dialog (squash, the target: the base by default) and merges: the file is on `main`,
/// which points at the commit the page shows, and the person's checkout followed it.
#[test]
fn a_worktree_session_shows_its_branch_and_diff_stat_and_merges_from_the_page() {
    if !browser::available() {
        return;
    }
    let web = GitDashboard::start();
    let git = &web.git;
    let (repo, session) = web.session("feature");
    let base_commit = git.sha(&repo, "main");
    git.prompt(
        &session,
        "echo feature > feature.txt && git add feature.txt && git commit -q -m feature",
    );
    let branch = git.branch_of(&session);
    let worktree = git.worktree_of(&session);

    let browser = Browser::start("worktree", git.path());
    log_in(&browser, &web.login, &web.base);
    let row = format!(
        "[data-testid=session-row][data-session-id={}]",
        js_string(&session)
    );
    browser.wait_for_text(&format!("{row} [data-testid=session-branch]"), &branch);

    web.open(&browser, &format!("#/sessions/{session}"));
    browser.wait_for_text("[data-testid=worktree-branch]", &branch);
    assert_eq!(
        browser.text("[data-testid=worktree-path]"),
        worktree.display().to_string()
    );
    assert!(
        browser
            .text("[data-testid=worktree-base]")
            .contains(&base_commit[..7]),
        "the base's short sha"
    );
    wait_for_worktree_state(&browser, "ready");
    browser.wait_for_text("[data-testid=diff-summary]", "1 file changed");
    assert_eq!(
        browser
            .attr("[data-testid=diff-summary]", "data-files-changed")
            .as_deref(),
        Some("1")
    );
    assert!(
        browser
            .text("[data-testid=diff-text]")
            .contains("feature.txt"),
        "the stat names the file: {}",
        browser.text("[data-testid=diff-text]")
    );
    browser.screenshot("session-worktree");

    // A second commit: the refresh button reads it.
    git.commit_file(&worktree, "second.txt", "two\n", "second");
    browser.click("[data-testid=diff-refresh]");
    browser.wait_for_text("[data-testid=diff-summary]", "2 files changed");
    // A prompt sent from the page commits a third: its end reads the changes again.
    browser.type_into(
        "[data-testid=prompt-input]",
        "echo three > third.txt && git add third.txt && git commit -q -m third",
    );
    browser.click("[data-testid=prompt-send]");
    browser.wait_for_text("[data-testid=diff-summary]", "3 files changed");
    browser.wait_until(
        "the merge button is enabled once the prompt ended",
        "!document.querySelector('[data-testid=session-merge]').disabled",
    );

    browser.click("[data-testid=session-merge]");
    browser.wait_for("[data-testid=merge-into]");
    assert!(
        !browser
            .execute(
                "return document.querySelector('[data-testid=merge-squash]').checked;",
                vec![]
            )
            .as_bool()
            .unwrap(),
        "squash is asked, not assumed"
    );
    confirm(&browser);
    browser.wait_for_text("[data-testid=merge-result]", "Merged");
    assert!(
        browser.text("[data-testid=merge-result]").contains("main"),
        "{}",
        browser.text("[data-testid=merge-result]")
    );
    let main = git.sha(&repo, "main");
    assert_eq!(
        browser.attr("[data-testid=merge-result]", "data-commit"),
        Some(main.clone()),
        "the page shows the commit main points at"
    );
    assert_ne!(main, base_commit, "main moved");
    assert_eq!(
        git.git(&repo, &["show", "main:feature.txt"]),
        "feature",
        "the file is on main"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("feature.txt")).unwrap(),
        "feature\n",
        "the person's clean checkout of main followed"
    );
    assert_eq!(git.status(&repo), "");
    browser.wait_for("[data-testid=transcript] [data-testid=event][data-kind='session.merged']");
    screenshot(&browser, "session-merged");

    // A conflicting change on main: the merge fails, its one line shown in place, and main
    // stays where it was.
    git.commit_file(&worktree, "feature.txt", "from the session\n", "session's");
    git.commit_file(&repo, "feature.txt", "from main\n", "main's");
    let main = git.sha(&repo, "main");
    browser.click("[data-testid=session-merge]");
    confirm(&browser);
    browser.wait_until(
        "the merge's error is shown",
        "document.querySelector('[data-testid=merge-error]').textContent.length > 0",
    );
    assert!(
        browser
            .text("[data-testid=merge-error]")
            .contains("feature.txt"),
        "{}",
        browser.text("[data-testid=merge-error]")
    );
    assert_eq!(git.sha(&repo, "main"), main, "a failed merge moved main");
    assert_eq!(git.status(&repo), "");
    git.stop_daemon();
}

/// A worktree removed by hand shows as `missing`, with the warning and Recreate, which makes
/// it again on its branch; archiving a worktree with changes keeps it and says so, and
/// "Discard changes" (behind a confirmation) removes it, keeping the branch. The projects page
/// names a worktree project's isolation, and the overview's form makes a session on a branch
/// given there.
#[test]
fn a_missing_worktree_is_recreated_and_a_kept_one_discarded_from_the_page() {
    if !browser::available() {
        return;
    }
    let web = GitDashboard::start();
    let git = &web.git;
    let (repo, session) = web.session("by hand");
    git.prompt(
        &session,
        "echo one > one.txt && git add one.txt && git commit -q -m one",
    );
    let branch = git.branch_of(&session);
    let worktree = git.worktree_of(&session);
    std::fs::remove_dir_all(&worktree).unwrap();

    let browser = Browser::start("worktree-missing", git.path());
    log_in(&browser, &web.login, &web.base);
    web.open(&browser, &format!("#/sessions/{session}"));
    wait_for_worktree_state(&browser, "missing");
    assert!(browser
        .text("[data-testid=worktree-notice]")
        .contains("is gone"));
    assert_eq!(
        browser.count("[data-testid=diff-stat]:not([hidden])"),
        0,
        "no diff of a worktree that is gone"
    );
    screenshot(&browser, "session-worktree-missing");
    browser.click("[data-testid=worktree-recreate]");
    wait_for_worktree_state(&browser, "ready");
    assert!(
        worktree.join("one.txt").is_file(),
        "made again on its branch"
    );
    assert_eq!(
        git.git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]),
        branch
    );
    browser.wait_for_text("[data-testid=diff-summary]", "1 file changed");

    // Changes not committed: archiving keeps the worktree, and the page says so.
    std::fs::write(worktree.join("wip.txt"), "not committed\n").unwrap();
    browser.click("[data-testid=session-archive]");
    confirm(&browser);
    wait_for_worktree_state(&browser, "kept");
    assert!(browser
        .text("[data-testid=worktree-notice]")
        .contains("uncommitted changes"));
    assert!(
        worktree.join("wip.txt").is_file(),
        "a kept worktree was touched"
    );
    browser.click("[data-testid=worktree-discard]");
    // The confirmation's Cancel leaves it; its OK discards.
    browser.wait_for("dialog[data-testid=confirm][open]");
    browser.click("[data-testid=confirm-cancel]");
    assert!(worktree.is_dir());
    assert_eq!(git.session(&session)["worktree_state"], "kept");
    browser.click("[data-testid=worktree-discard]");
    confirm(&browser);
    wait_for_worktree_state(&browser, "removed");
    assert!(!worktree.exists(), "the discarded worktree is still there");
    assert_eq!(
        git.git(&repo, &["branch", "--list", &branch])
            .trim_start_matches(['*', '+', ' ']),
        branch,
        "the branch is kept"
    );

    // The projects page names the isolation; the overview's form makes a session on a branch
    // of the person's choosing.
    browser.click("[data-testid=nav-projects]");
    browser.wait_for_text("[data-testid=project-isolation]", "worktree per session");
    browser.click("[data-testid=nav-overview]");
    browser.wait_until(
        "the form offers a branch for the worktree project",
        "(f => f && f.offsetParent !== null)(document.querySelector('[data-testid=new-session-branch]'))",
    );
    browser.type_into("[data-testid=new-session-title]", "from the form");
    browser.type_into("[data-testid=new-session-branch]", "feature/form");
    browser.click("[data-testid=new-session-submit]");
    browser.wait_for_text("[data-testid=worktree-branch]", "feature/form");
    wait_for_worktree_state(&browser, "ready");
    assert_eq!(
        git.git(&repo, &["rev-parse", "feature/form"]),
        git.sha(&repo, "main"),
        "the new branch starts at the project's HEAD"
    );
    git.stop_daemon();
}

/// A prompt done with refusals says so in the transcript: each refused tool use is a *Denied*
/// note naming what it would have touched, and the end reads `done · denied: N` (the claude
/// form of the fake engine reports them as claude does, in `permission_denials`).
#[test]
fn a_prompt_done_with_refusals_says_so_in_the_transcript() {
    if !browser::available() {
        return;
    }
    let (dashboard, _) = Dashboard::start(&[]);
    let home = &dashboard.home;
    home.config(&[("engines.claude.path", FAKE)]);
    home.add_project("c", &home.work(), "claude");
    let session = home.new_session(&["c", "--title", "refused"]);
    let browser = Browser::start("denied", home.path());
    dashboard.log_in(&browser);
    dashboard.open(&browser, &format!("#/sessions/{session}"));
    browser.wait_for("[data-testid=prompt-input]");
    browser.type_into(
        "[data-testid=prompt-input]",
        &typed_lines(&[
            "@fake deny=Write:/elsewhere/notes.txt",
            "@fake answer=I could not write it.",
            "write the notes",
        ]),
    );
    browser.click("[data-testid=prompt-send]");
    browser.wait_for("[data-testid=event][data-kind='prompt.done']");
    let denied = browser.text("[data-testid=event][data-kind='tool.denied']");
    assert!(
        denied.contains("Denied: Write") && denied.contains("/elsewhere/notes.txt"),
        "{denied}"
    );
    let done = browser.text("[data-testid=event][data-kind='prompt.done']");
    assert!(done.contains("done · denied: 1"), "{done}");
    screenshot(&browser, "session-denied");
    assert_eq!(dashboard.prompts(&session)[0]["denied"], 1);
}

/// The person in the loop on the page: a request of an agent under `ask` shows as *Needs you*
/// in the header (a count, linking to its session), sorts its session first on the overview
/// as `needs-you`, and waits in the transcript with Approve / Deny; a click answers it, the
/// engine goes on, and the count goes back to nothing.
#[test]
fn a_person_approves_what_the_agent_asks_from_the_page() {
    if !browser::available() {
        return;
    }
    let (dashboard, _) = Dashboard::start(&["quiet"]);
    let home = &dashboard.home;
    home.config(&[("engines.claude.path", FAKE)]);
    let claude = home.path().join("c");
    std::fs::create_dir(&claude).unwrap();
    home.add_project("c", &claude, "claude");
    home.ok(&["project", "set", "c", "--policy", "ask"]);
    let session = home.new_session(&["c", "--title", "asks"]);
    let outside = home.path().join("approved.txt");
    let browser = Browser::start("approvals", home.path());
    dashboard.log_in(&browser);
    browser.wait_for("[data-testid=nav-overview]");
    home.ok(&[
        "send",
        "asks",
        &format!(
            "@fake ask=Write:{}\n@fake answer=Written.\nwrite it",
            outside.display()
        ),
    ]);
    // The header counts it, on whatever page.
    browser.wait_until(
        "the header shows one request",
        "document.querySelector('[data-testid=needs-you]')?.hidden === false && \
         document.querySelector('[data-testid=needs-you-count]').textContent === '1'",
    );
    // The overview puts the session that needs a person first.
    browser.wait_until(
        "the session needs you, first",
        "document.querySelector('[data-testid=session-row]')?.dataset.state === 'needs-you' && \
         document.querySelector('[data-testid=session-row]').textContent.includes('asks')",
    );
    screenshot(&browser, "overview-needs-you");
    browser.click("[data-testid=needs-you]");
    browser.wait_until(
        "the link leads to the session",
        &format!(
            "location.hash === {} && document.querySelector('[data-testid=approval]')",
            js_string(&format!("#/sessions/{session}"))
        ),
    );
    browser.wait_for("[data-testid=approval] [data-testid=approve]");
    let card = browser.text("[data-testid=approval]");
    assert!(
        card.contains("Needs you") && card.contains(&format!("Write {}", outside.display())),
        "{card}"
    );
    assert!(card.contains("why: fake engine asks"), "{card}");
    screenshot(&browser, "session-needs-you");
    assert!(!outside.exists());
    browser.click("[data-testid=approval] [data-testid=approve]");
    browser.wait_for("[data-testid=event][data-kind='prompt.done']");
    browser.wait_for_text("[data-testid=approval-status]", "approved · by a person");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "approved\n");
    browser.wait_until(
        "the header count is gone",
        "document.querySelector('[data-testid=needs-you]')?.hidden === true",
    );
    let answered = home.json(&["approvals", "--all", "--json"]);
    assert_eq!(answered[0]["status"], "approved", "{answered}");
    assert_eq!(answered[0]["answered_by"], "person", "{answered}");
}

/// The session page's queue says what each queued prompt waits for besides its turn: the
/// prompts it runs after (`send --after`) and its due time (`send --in`).
#[test]
fn the_queue_shows_what_a_prompt_runs_after_and_when_it_is_due() {
    if !browser::available() {
        return;
    }
    let (dashboard, ids) = Dashboard::start(&["build", "review"]);
    let home = &dashboard.home;
    let first = home.ok(&["send", "build", "@fake hang\nbuild it"]);
    let first = first.split_whitespace().next().unwrap().to_string();
    home.ok(&[
        "send",
        "review",
        "--after",
        &first,
        "--after-any",
        "review it",
    ]);
    home.ok(&["send", "review", "--in", "1h", "and later"]);
    let browser = Browser::start("queue", home.path());
    dashboard.log_in(&browser);
    dashboard.open(&browser, &format!("#/sessions/{}", ids[1]));
    browser.wait_for_text(
        "[data-testid=queued-after]",
        &format!("after {} (any end)", &first[..18]),
    );
    browser.wait_for_text("[data-testid=queued-due]", "due ");
    screenshot(&browser, "session-queue-after-due");
    home.ok(&["cancel", &first]);
}
