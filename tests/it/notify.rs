//! Notifications (#35, item 5): a person is told of a prompt's end, of an agent that asks
//! them and of a pause that stops work — by a command hook (the JSON on its stdin), a webhook
//! (a loopback server the test runs) and the desktop (a session bus the test runs, with a
//! notification server of its own on it). A hook that hangs or fails, or a webhook that
//! refuses, delays nothing and is recorded once in `status`.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::daemon::{processes_of, wait_until, DaemonHome};
use serde_json::Value;

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

fn sent_id(sent: &str) -> String {
    sent.split_whitespace().next().unwrap().to_string()
}

/// The notifications a hook appended to `told.jsonl`, one JSON object a line.
fn told(home: &DaemonHome) -> Vec<Value> {
    std::fs::read_to_string(home.path().join("told.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn notify_status(home: &DaemonHome) -> Vec<Value> {
    home.json(&["status", "--json"])["notify"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A hook that appends each notification to `HOME/told.jsonl` (with its kind from the
/// environment), desktop notifications off.
fn hooked(home: &DaemonHome) {
    home.fake_session(FAKE, "s", &[("notify.desktop", "off")]);
    home.ok(&[
        "config",
        "set",
        "notify.command",
        r#"{ cat; echo; } >> "$CORRAL_HOME/told.jsonl"; test -n "$CORRAL_NOTIFY_EVENT""#,
    ]);
}

#[test]
fn a_hook_is_told_of_each_end_as_json_on_its_stdin() {
    let home = DaemonHome::new();
    hooked(&home);
    let done = sent_id(&home.ok(&["send", "s", "@fake answer=all good\nbuild it"]));
    let failed = sent_id(&home.ok(&["send", "s", "@fake fail=broken\nbreak it"]));
    wait_until("both ends are told", || told(&home).len() == 2);
    let told = told(&home);
    assert_eq!(told[0]["event"], "prompt.done", "{told:?}");
    assert_eq!(told[0]["prompt"]["id"], done.as_str());
    assert_eq!(told[0]["prompt"]["text"], "@fake answer=all good\nbuild it");
    assert_eq!(told[0]["prompt"]["answer"], "all good");
    assert_eq!(told[0]["session"]["name"], "s");
    assert_eq!(told[0]["project"]["name"], "p");
    assert_eq!(told[0]["title"], "p · s: done");
    assert_eq!(told[1]["event"], "prompt.failed");
    assert_eq!(told[1]["prompt"]["id"], failed.as_str());
    assert!(
        told[1]["prompt"]["error"]
            .as_str()
            .unwrap()
            .contains("broken"),
        "{told:?}"
    );
    let status = notify_status(&home);
    assert_eq!(status.len(), 1, "{status:?}");
    assert_eq!(status[0]["channel"], "command");
    assert_eq!(status[0]["sent"], 2);
    assert_eq!(status[0]["failing"], 0);

    // A project that wants only failures.
    home.ok(&["project", "set", "p", "--notify", "prompt.failed"]);
    home.ok(&["send", "s", "quiet", "--wait"]);
    home.ok(&["send", "s", "@fake fail=again\nloud"]);
    home.run(&["wait", "s"]);
    wait_until("the failure is told", || self::told(&home).len() == 3);
    assert_eq!(self::told(&home)[2]["event"], "prompt.failed");
    home.ok(&["project", "set", "p", "--notify", "none"]);
    home.ok(&["send", "s", "@fake fail=silent\nhush"]);
    home.run(&["wait", "s"]);
    home.ok(&["project", "set", "p", "--notify", "default"]);
    home.ok(&["send", "s", "told again", "--wait"]);
    wait_until("the end is told", || self::told(&home).len() == 4);
    assert_eq!(
        self::told(&home)[3]["event"],
        "prompt.done",
        "none told between"
    );
    home.stop_daemon();
}

#[test]
fn a_hook_that_hangs_or_fails_delays_nothing_and_is_recorded_once() {
    let home = DaemonHome::new();
    home.fake_session(
        FAKE,
        "s",
        &[("notify.desktop", "off"), ("notify.timeout_ms", "300")],
    );
    home.ok(&["config", "set", "notify.command", "sleep 60"]);
    for n in 0..3 {
        home.ok(&["send", "s", &format!("quick {n}")]);
    }
    let output = home.run(&["wait", "s", "--timeout", "30s"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "every prompt ends: {output:?}"
    );
    let mut status = Vec::new();
    wait_until("the hook is given up on three times", || {
        status = notify_status(&home);
        status
            .first()
            .is_some_and(|channel| channel["failing"] == 3)
    });
    let error = status[0]["error"].as_str().unwrap();
    assert!(
        error.contains("ran longer than notify.timeout_ms (300 ms)"),
        "{error}"
    );
    // Each hung hook ended with its group.
    wait_until("no hook is left", || {
        processes_of(home.path())
            .iter()
            .all(|pid| !command_line(*pid).contains("sleep 60"))
    });
    let said = home.ok(&["status"]);
    assert!(
        said.contains("notify:   command failing (3 in a row)"),
        "{said}"
    );

    // A hook that fails: counted, the first failure of the run still the one recorded; then
    // one that prints a lot and succeeds: the count goes back to 0.
    home.ok(&["config", "set", "notify.command", "exit 3"]);
    home.ok(&["send", "s", "one more", "--wait"]);
    wait_until("the failure is counted", || {
        notify_status(&home)[0]["failing"] == 4
    });
    let error = notify_status(&home)[0]["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("ran longer than"), "recorded once: {error}");
    home.ok(&[
        "config",
        "set",
        "notify.command",
        "head -c 67108864 /dev/zero; true",
    ]);
    home.ok(&["send", "s", "and another", "--wait"]);
    wait_until("the hook succeeds", || {
        notify_status(&home)[0]["failing"] == 0
    });
    assert_eq!(notify_status(&home)[0]["sent"], 1);
    home.stop_daemon();
}

fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .unwrap_or_default()
}

/// A loopback HTTP server that answers each request with the next status of `statuses` (then
/// 200) and hands over each request's path and body.
fn webhook_server(statuses: Vec<u16>) -> (u16, mpsc::Receiver<(String, Value)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut statuses = statuses.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap();
                    }
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let status = statuses.next().unwrap_or(200);
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
            let json = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if tx.send((path, json)).is_err() {
                return;
            }
        }
    });
    (port, rx)
}

#[test]
fn a_webhook_is_posted_the_json_and_tried_again_after_a_server_error() {
    let home = DaemonHome::new();
    home.fake_session(FAKE, "s", &[("notify.desktop", "off")]);
    let (port, posts) = webhook_server(vec![503]);
    let url = format!("http://127.0.0.1:{port}/hook?topic=corral");
    home.ok(&["config", "set", "notify.webhook", &url]);
    let done = sent_id(&home.ok(&["send", "s", "hello"]));
    let (path, first) = posts.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(path, "/hook?topic=corral");
    assert_eq!(first["event"], "prompt.done", "{first}");
    // The 503 is tried again, with the same notification.
    let (_, again) = posts.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(again["prompt"]["id"], done.as_str());
    wait_until("the webhook is counted sent", || {
        notify_status(&home)
            .first()
            .is_some_and(|channel| channel["sent"] == 1 && channel["failing"] == 0)
    });

    // A server that is not there: recorded, nothing delayed.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = closed.local_addr().unwrap().port();
    drop(closed);
    home.ok(&[
        "config",
        "set",
        "notify.webhook",
        &format!("http://127.0.0.1:{gone}/"),
    ]);
    home.ok(&["send", "s", "nobody hears", "--wait"]);
    wait_until("the refusal is recorded", || {
        notify_status(&home)
            .first()
            .is_some_and(|channel| channel["failing"] == 1)
    });

    // Malformed URLs are refused at `config set`, exit 2, the one set is kept.
    for bad in [
        "ftp://example.com/",
        "http://",
        "not a url",
        "https://exa mple.com/",
    ] {
        let said = home.fails(&["config", "set", "notify.webhook", bad], 2);
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(
            said.contains("notify.webhook must be an http:// or https:// URL"),
            "{said}"
        );
    }
    let said = home.fails(
        &["config", "set", "notify.events", "prompt.done,everything"],
        2,
    );
    assert!(said.contains("unknown notification 'everything'"), "{said}");
    let said = home.fails(&["project", "set", "p", "--notify", "sometimes"], 1);
    assert!(said.contains("unknown notification 'sometimes'"), "{said}");
    let kept = home.ok(&["config", "get", "notify.webhook"]);
    assert!(kept.contains(&gone.to_string()), "{kept}");
    home.stop_daemon();
}

#[test]
fn an_agent_that_asks_and_a_pause_on_failure_are_told() {
    let home = DaemonHome::new();
    hooked(&home);
    home.ok(&["config", "set", "engines.claude.path", FAKE]);
    let asking = home.path().join("c");
    std::fs::create_dir(&asking).unwrap();
    home.add_project("c", &asking, "claude");
    home.ok(&["project", "set", "c", "--policy", "ask"]);
    home.new_session(&["c", "--title", "asks"]);
    let target = home.path().join("outside.txt");
    home.ok(&[
        "send",
        "asks",
        &format!("@fake ask=Write:{}\ngo", target.display()),
    ]);
    wait_until("the question is told", || {
        told(&home).iter().any(|told| told["event"] == "needs-you")
    });
    let asked = told(&home)
        .into_iter()
        .find(|told| told["event"] == "needs-you")
        .unwrap();
    assert_eq!(asked["title"], "c · asks: needs you", "{asked}");
    assert!(
        asked["body"].as_str().unwrap().starts_with("Write: "),
        "{asked}"
    );
    assert_eq!(asked["approval"]["status"], "pending", "{asked}");
    home.ok(&["deny", asked["approval"]["id"].as_str().unwrap()]);

    home.ok(&["project", "set", "p", "--pause-on-failure", "true"]);
    home.ok(&["send", "s", "@fake fail=red build\nbuild"]);
    wait_until("the pause is told", || {
        told(&home).iter().any(|told| told["event"] == "paused")
    });
    let paused = told(&home)
        .into_iter()
        .find(|told| told["event"] == "paused")
        .unwrap();
    assert_eq!(paused["pause"]["scope"], "project", "{paused}");
    assert!(
        paused["title"]
            .as_str()
            .unwrap()
            .contains("(pause_on_failure)"),
        "{paused}"
    );
    home.stop_daemon();
}

/// A private session bus (`dbus-daemon --session`) in a process group of its own, ended when
/// dropped.
struct SessionBus {
    child: Child,
    address: String,
}

impl SessionBus {
    fn start(dir: &std::path::Path) -> Option<SessionBus> {
        let spawned = Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .arg(format!("--address=unix:path={}", dir.join("bus").display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) if std::env::var_os("CI").is_none() => {
                println!("skipped: dbus-daemon does not run here ({error})");
                return None;
            }
            Err(error) => panic!("dbus-daemon does not run: {error}"),
        };
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        Some(SessionBus {
            child,
            address: line.trim().to_string(),
        })
    }
}

impl Drop for SessionBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

use std::os::unix::process::CommandExt;

/// A notification server on `address` (`org.freedesktop.Notifications`): each `Notify` call's
/// summary and body are handed over, and answered with an id.
fn notification_server(address: String) -> mpsc::Receiver<(String, String)> {
    let (tx, rx) = mpsc::channel();
    let (ready_tx, ready) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            use futures::StreamExt;
            let connection = zbus::connection::Builder::address(address.as_str())
                .unwrap()
                .build()
                .await
                .unwrap();
            connection
                .request_name("org.freedesktop.Notifications")
                .await
                .unwrap();
            ready_tx.send(()).unwrap();
            let mut messages = zbus::MessageStream::from(&connection);
            while let Some(Ok(message)) = messages.next().await {
                let header = message.header();
                if header.member().map(|member| member.as_str()) != Some("Notify") {
                    continue;
                }
                #[allow(clippy::type_complexity)]
                let (_, _, _, summary, body, _, _, _): (
                    String,
                    u32,
                    String,
                    String,
                    String,
                    Vec<String>,
                    std::collections::HashMap<String, zbus::zvariant::OwnedValue>,
                    i32,
                ) = message.body().deserialize().unwrap();
                connection.reply(&header, &(7u32,)).await.unwrap();
                if tx.send((summary, body)).is_err() {
                    return;
                }
            }
        });
    });
    ready.recv_timeout(Duration::from_secs(10)).unwrap();
    rx
}

#[test]
fn the_desktop_is_told_over_the_session_bus() {
    let home = DaemonHome::new();
    let Some(bus) = SessionBus::start(home.path()) else {
        return;
    };
    let shown = notification_server(bus.address.clone());
    home.fake_session(FAKE, "s", &[]);
    home.stop_daemon();
    // The daemon started with the bus in its environment (`notify.desktop` is `auto`).
    let started = home
        .corral(&["daemon", "--detach"])
        .env("DBUS_SESSION_BUS_ADDRESS", &bus.address)
        .output()
        .unwrap();
    assert!(started.status.success(), "{started:?}");
    home.ok(&["send", "s", "@fake answer=shipped it\nship", "--wait"]);
    let (summary, body) = shown.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(summary, "p · s: done");
    assert_eq!(body, "shipped it");
    wait_until("the desktop is counted sent", || {
        notify_status(&home)
            .iter()
            .any(|channel| channel["channel"] == "desktop" && channel["sent"] == 1)
    });
    home.stop_daemon();
    drop(bus);
}
