//! The daemon's HTTP API (src/daemon/http/, docs/http.md) through the built binary: a daemon in a
//! temporary home on the fake engine, spoken to over loopback TCP by a small HTTP/1.1 client
//! written here (every byte it sends is the test's) and tungstenite for the WebSocket.
//!
//! What is checked: healthz and describe; the access rules (no token 401, bearer, the login
//! cookie's attributes, CSRF on a cookie's writes, a foreign Host, the WebSocket's Origin, no
//! CORS, a rotated token logs browsers out); every route once; bad input on every route
//! (missing, wrong-typed, oversized: JSON 400s with the socket's codes); the event WebSocket
//! (replay, resume, live), a client that never reads dropped while its session goes on, a
//! thousand clients at once; a taken port (told by `status` and `corral web`, the socket still
//! serves); a widening request from inside a supervised run refused over HTTP too; the
//! worktree routes (diff, merge, recreate, archive's discard) on a real git repository.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::daemon::{wait_until, DaemonHome, DEADLINE};
use common::git::GitHome;
use serde_json::{json, Value};

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// An HTTP answer.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {} {}", self.status, self.text()))
    }

    /// The error's code, checking the error body's shape and that the status is the code's.
    fn error_code(&self) -> i64 {
        let body = self.json();
        let code = body["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no error code: {} {body}", self.status));
        assert!(body["error"]["message"].is_string(), "{body}");
        assert_eq!(self.status, status_of(code), "{body}");
        code
    }
}

/// The status the contract gives each code (docs/http.md).
fn status_of(code: i64) -> u16 {
    match code {
        -32700 | -32600 | -32602 | -32008 => 400,
        -32601 | -32004 => 404,
        -32005 | -32007 | -32009 => 409,
        -32006 => 503,
        -32010 | -32011 => 403,
        _ => 500,
    }
}

/// One request on a connection of its own (`Connection: close`), read to its end.
fn request(listen: &str, head: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(listen).expect("the HTTP server listens");
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut text = format!("{head} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        text.push_str(&format!("Host: {listen}\r\n"));
    }
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || !head.starts_with("GET") {
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes()).unwrap();
    // The server may answer (and close) before it has read a refused body.
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    parse(&answer)
}

fn parse(answer: &[u8]) -> Reply {
    let end = answer
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {:?}", String::from_utf8_lossy(answer)));
    let head = String::from_utf8_lossy(&answer[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_string(), value.trim().to_string()))
        .collect();
    let mut body = answer[end + 4..].to_vec();
    let chunked = headers.iter().any(|(name, value)| {
        name.eq_ignore_ascii_case("transfer-encoding") && value.contains("chunked")
    });
    if chunked {
        let mut decoded = Vec::new();
        let mut rest = &body[..];
        while let Some(line_end) = rest.windows(2).position(|window| window == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..line_end]).trim(), 16)
                .unwrap_or(0);
            if size == 0 {
                break;
            }
            decoded.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
            rest = &rest[line_end + 2 + size + 2..];
        }
        body = decoded;
    }
    Reply {
        status,
        headers,
        body,
    }
}

/// The API of a home's daemon, as `corral web --json` names it.
struct Api {
    listen: String,
    token: String,
    login_url: String,
}

impl Api {
    fn of(home: &DaemonHome) -> Api {
        let web = home.json(&["web", "--json"]);
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

    fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// A request with the bearer token.
    fn call(&self, verb: &str, path: &str, body: Option<Value>) -> Reply {
        let bearer = self.bearer();
        let body = body.map(|body| body.to_string()).unwrap_or_default();
        request(
            &self.listen,
            &format!("{verb} {path}"),
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
    }

    /// A request that must succeed: its JSON body.
    fn ok(&self, verb: &str, path: &str, body: Option<Value>) -> Value {
        let reply = self.call(verb, path, body);
        assert_eq!(reply.status, 200, "{verb} {path}: {}", reply.text());
        reply.json()
    }

    /// Logs in as a browser does: the cookie and the page's CSRF token.
    fn login(&self) -> (String, String) {
        let path = self
            .login_url
            .split_once(&self.listen)
            .map(|(_, path)| path.to_string())
            .unwrap();
        let reply = request(&self.listen, &format!("GET {path}"), &[], b"");
        assert_eq!(reply.status, 303, "{}", reply.text());
        assert_eq!(reply.header("location"), Some("/"));
        let set = reply.header("set-cookie").expect("a cookie").to_string();
        let cookie = set.split(';').next().unwrap().trim().to_string();
        let page = request(&self.listen, "GET /", &[("Cookie", &cookie)], b"");
        assert_eq!(page.status, 200);
        let text = page.text();
        let csrf = text
            .split_once("name=\"csrf-token\" content=\"")
            .and_then(|(_, rest)| rest.split_once('"'))
            .map(|(csrf, _)| csrf.to_string())
            .expect("the page carries its CSRF token");
        (cookie, csrf)
    }

    fn websocket(
        &self,
        query: &str,
        headers: &[(&str, &str)],
    ) -> Result<tungstenite::WebSocket<TcpStream>, u16> {
        use tungstenite::client::IntoClientRequest;
        let url = format!("ws://{}/api/v1/events{query}", self.listen);
        let mut request = url.into_client_request().unwrap();
        for (name, value) in headers {
            request.headers_mut().insert(
                tungstenite::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        let stream = TcpStream::connect(&self.listen).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        match tungstenite::client(request, stream) {
            Ok((socket, _)) => Ok(socket),
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
                Err(response.status().as_u16())
            }
            Err(error) => panic!("the WebSocket handshake failed: {error}"),
        }
    }

    fn bearer_socket(&self, query: &str) -> tungstenite::WebSocket<TcpStream> {
        let bearer = self.bearer();
        self.websocket(query, &[("Authorization", &bearer)])
            .expect("the WebSocket opens")
    }
}

/// A home with a daemon, a fake-engine project `p` and a session `t`: (home, api, session id).
fn daemon() -> (DaemonHome, Api, String) {
    let home = DaemonHome::new();
    let session = home.fake_session(FAKE, "t", &[]);
    let api = Api::of(&home);
    (home, api, session)
}

/// Reads a WebSocket's notifications until `stop` says so; all of them.
fn read_until(
    socket: &mut tungstenite::WebSocket<TcpStream>,
    mut stop: impl FnMut(&Value) -> bool,
) -> Vec<Value> {
    let mut seen = Vec::new();
    loop {
        match socket.read() {
            Ok(tungstenite::Message::Text(text)) => {
                let message: Value = serde_json::from_str(&text).unwrap();
                let done = stop(&message);
                seen.push(message);
                if done {
                    return seen;
                }
            }
            Ok(_) => {}
            Err(error) => panic!("the WebSocket ended ({error}) after {seen:#?}"),
        }
    }
}

fn kind(message: &Value) -> &str {
    message["params"]["event"]["kind"].as_str().unwrap_or("")
}

/// Sends a prompt over HTTP and waits for its end over HTTP: the ended prompt.
fn prompt(api: &Api, session: &str, text: &str) -> Value {
    let sent = api.ok(
        "POST",
        &format!("/api/v1/sessions/{session}/prompts"),
        Some(json!({ "text": text })),
    );
    let id = sent["id"].as_str().expect("a prompt id").to_string();
    api.ok("GET", &format!("/api/v1/prompts/{id}/wait"), None)
}

#[test]
fn health_describe_and_the_access_rules() {
    let (home, api, _session) = daemon();
    let listen = api.listen.as_str();

    let health = request(listen, "GET /healthz", &[], b"");
    assert_eq!((health.status, health.json()), (200, json!({ "ok": true })));
    assert_eq!(health.header("content-type"), Some("application/json"));

    // No token: 401 with a JSON error; a wrong one too.
    for headers in [vec![], vec![("Authorization", "Bearer 0000")]] {
        for head in [
            "GET /describe",
            "GET /api/v1/status",
            "GET /api/v1/sessions",
        ] {
            let reply = request(listen, head, &headers, b"");
            assert_eq!(reply.status, 401, "{head}");
            assert_eq!(reply.json()["error"]["data"]["reason"], "unauthenticated");
        }
    }
    let bearer = api.bearer();
    let describe = request(listen, "GET /describe", &[("Authorization", &bearer)], b"");
    assert_eq!(describe.status, 200);
    let describe = describe.json();
    assert_eq!(describe["corral_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(describe["protocol"], 1);
    let routes = describe["routes"].as_array().unwrap();
    assert!(routes.iter().any(
        |route| route["path"] == "/api/v1/sessions/{session}/prompts"
            && route["method"] == "POST"
            && route["rpc"] == "prompt.send"
    ));
    assert!(describe["capabilities"]
        .as_array()
        .unwrap()
        .contains(&json!("events.websocket")));

    // The status names the address.
    let status = api.ok("GET", "/api/v1/status", None);
    assert_eq!(status["http"]["listen"], listen);
    assert_eq!(status["http"]["url"], format!("http://{listen}/"));
    let human = home.ok(&["status"]);
    assert!(
        human.contains(&format!(
            "http:     http://{listen}/ (corral web prints the login URL)"
        )),
        "{human}"
    );

    // The page: to the login without a cookie; the login page (401) without a valid token.
    let page = request(listen, "GET /", &[], b"");
    assert_eq!(
        (page.status, page.header("location")),
        (303, Some("/login"))
    );
    for head in ["GET /login", "GET /login?token=nope"] {
        let login = request(listen, head, &[], b"");
        assert_eq!(login.status, 401);
        assert!(login.text().contains("corral web"), "{}", login.text());
        assert!(login.header("set-cookie").is_none());
    }
    let stale = request(listen, "GET /", &[("Cookie", "corral_session=stale")], b"");
    assert_eq!(stale.status, 303);

    // Logged in: the cookie is HttpOnly, SameSite=Strict, Path=/; the page has its CSRF token.
    let path = api.login_url.split_once(listen).unwrap().1.to_string();
    let login = request(listen, &format!("GET {path}"), &[], b"");
    let set = login.header("set-cookie").unwrap();
    for attribute in ["corral_session=", "HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{set}");
    }
    let (cookie, csrf) = api.login();
    assert_eq!(csrf.len(), 64);
    assert!(!csrf.contains("{{"));
    let assets = request(listen, "GET /assets/app.js", &[], b"");
    assert_eq!(assets.status, 200);
    assert!(assets
        .header("content-type")
        .unwrap()
        .starts_with("text/javascript"));

    // The cookie reads; a write needs its login's CSRF token; the bearer token needs none.
    let read = request(
        listen,
        "GET /api/v1/settings/ui.theme",
        &[("Cookie", &cookie)],
        b"",
    );
    assert_eq!(read.status, 200, "{}", read.text());
    let body = br#"{"value":"dark"}"#;
    let put = "PUT /api/v1/settings/ui.theme";
    let no_csrf = request(listen, put, &[("Cookie", &cookie)], body);
    assert_eq!(no_csrf.status, 403, "{}", no_csrf.text());
    assert_eq!(no_csrf.json()["error"]["data"]["reason"], "csrf");
    let wrong = request(
        listen,
        put,
        &[("Cookie", &cookie), ("X-CSRF-Token", "00")],
        body,
    );
    assert_eq!(wrong.status, 403);
    let with_csrf = request(
        listen,
        put,
        &[("Cookie", &cookie), ("X-CSRF-Token", &csrf)],
        body,
    );
    assert_eq!(with_csrf.status, 200, "{}", with_csrf.text());
    assert_eq!(with_csrf.json()["value"], "dark");
    let by_bearer = request(
        listen,
        put,
        &[("Authorization", &bearer)],
        br#"{"value":"light"}"#,
    );
    assert_eq!(by_bearer.status, 200, "{}", by_bearer.text());

    // A foreign Host is refused everywhere, even with the token.
    for head in ["GET /healthz", "GET /api/v1/status", "GET /", "GET /nope"] {
        let reply = request(
            listen,
            head,
            &[("Host", "evil.example:80"), ("Authorization", &bearer)],
            b"",
        );
        assert_eq!(reply.status, 403, "{head}");
        assert_eq!(reply.json()["error"]["data"]["reason"], "host");
    }
    let port = listen.rsplit(':').next().unwrap();
    for host in [format!("localhost:{port}"), format!("[::1]:{port}")] {
        let reply = request(listen, "GET /healthz", &[("Host", &host)], b"");
        assert_eq!(reply.status, 200, "{host}");
    }

    // No CORS, ever.
    let origin = request(
        listen,
        "GET /api/v1/status",
        &[
            ("Authorization", &bearer),
            ("Origin", "http://evil.example"),
        ],
        b"",
    );
    let preflight = request(
        listen,
        "OPTIONS /api/v1/status",
        &[
            ("Origin", "http://evil.example"),
            ("Access-Control-Request-Method", "GET"),
        ],
        b"",
    );
    for reply in [&origin, &preflight] {
        assert!(
            reply
                .headers
                .iter()
                .all(|(name, _)| !name.to_ascii_lowercase().starts_with("access-control")),
            "{:?}",
            reply.headers
        );
    }
    assert_eq!(preflight.status, 405);

    // A rotated token: the old token and the old logins are refused, the new one serves.
    // --open hands the login URL to $BROWSER.
    let browser = home.path().join("browser.sh");
    let opened = home.path().join("opened");
    std::fs::write(
        &browser,
        format!(
            "#!/bin/sh\necho \"$1\" > '{}.tmp' && mv '{0}.tmp' '{0}'\n",
            opened.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &browser,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let output = home
        .corral(&["web", "--open"])
        .env("BROWSER", &browser)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        api.login_url
    );
    wait_until("the browser is given the URL", || opened.exists());
    // The browser is given a single-use code, never the token (its argv is world-readable).
    let handed = std::fs::read_to_string(&opened).unwrap().trim().to_string();
    let code_path = handed
        .strip_prefix(&format!("http://{listen}"))
        .unwrap_or_else(|| panic!("{handed}"))
        .to_string();
    assert!(code_path.starts_with("/login?code="), "{handed}");
    assert!(!handed.contains(&api.token), "{handed}");
    let first = request(listen, &format!("GET {code_path}"), &[], b"");
    assert_eq!(first.status, 303, "{}", first.text());
    assert!(first.header("set-cookie").is_some());
    let again = request(listen, &format!("GET {code_path}"), &[], b"");
    assert_eq!(again.status, 401, "a login code is good once");

    let rotated = home.json(&["web", "--rotate-token", "--json"]);
    let token = rotated["login_url"]
        .as_str()
        .unwrap()
        .split_once("token=")
        .unwrap()
        .1;
    assert_ne!(token, api.token);
    let old = request(
        listen,
        "GET /api/v1/status",
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(old.status, 401);
    let old_cookie = request(listen, "GET /", &[("Cookie", &cookie)], b"");
    assert_eq!(old_cookie.status, 303);
    let new_bearer = format!("Bearer {token}");
    let new = request(
        listen,
        "GET /api/v1/status",
        &[("Authorization", &new_bearer)],
        b"",
    );
    assert_eq!(new.status, 200);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(home.path().join("http.token"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    home.stop_daemon();
}

#[test]
fn every_route_once() {
    let (home, api, session) = daemon();
    let work = home.work().display().to_string();
    let other = home.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let other = other.display().to_string();

    assert_eq!(
        api.ok("GET", "/api/v1/status?waiters=2", None)["sessions"],
        1
    );
    let overview = api.ok("GET", "/api/v1/overview", None);
    assert!(overview["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == session.as_str()));

    // Projects.
    let added = api.ok(
        "POST",
        "/api/v1/projects",
        Some(json!({ "name": "q", "path": other, "engine": "fake" })),
    );
    assert_eq!(added["name"], "q");
    let listed = api.ok("GET", "/api/v1/projects", None);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(api.ok("GET", "/api/v1/projects/q", None)["path"], other);
    let set = api.ok(
        "PATCH",
        "/api/v1/projects/q",
        Some(json!({ "model": "m2" })),
    );
    assert_eq!(set["model"], "m2");
    let archived = api.ok("POST", "/api/v1/projects/q/archive", None);
    assert!(archived["archived_at"].is_i64(), "{archived}");
    assert_eq!(
        api.ok("GET", "/api/v1/projects", None)
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        api.ok("GET", "/api/v1/projects?archived=true", None)
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let group = api.ok(
        "PUT",
        "/api/v1/groups/deploy",
        Some(json!({ "locking": true })),
    );
    assert_eq!(group, json!({ "name": "deploy", "locking": true }));
    let _ = work;

    // Sessions.
    let new = api.ok(
        "POST",
        "/api/v1/sessions",
        Some(json!({ "project": "p", "title": "second" })),
    );
    let second = new["id"].as_str().unwrap().to_string();
    let sessions = api.ok("GET", "/api/v1/sessions?project=p", None);
    assert_eq!(sessions.as_array().unwrap().len(), 2);
    let shown = api.ok("GET", &format!("/api/v1/sessions/{session}"), None);
    assert_eq!(shown["session"]["id"], session.as_str());
    let renamed = api.ok(
        "PATCH",
        &format!("/api/v1/sessions/{second}"),
        Some(json!({ "title": "renamed" })),
    );
    assert_eq!(renamed["title"], "renamed");
    let gone = api.ok("POST", &format!("/api/v1/sessions/{second}/archive"), None);
    assert!(gone["archived_at"].is_i64());
    assert!(gone["worktree_state"].is_null(), "{gone}");
    // The worktree routes (`the_worktree_routes_over_http` uses them on a real repository):
    // a session without a worktree is refused with a JSON error, not a missing route.
    for (verb, path) in [
        ("GET", "diff?stat=true"),
        ("POST", "merge"),
        ("POST", "recreate"),
    ] {
        let reply = api.call(verb, &format!("/api/v1/sessions/{session}/{path}"), None);
        assert_eq!(reply.status, 400, "{verb} {path}: {}", reply.text());
        assert_eq!(
            reply.error_code(),
            -32602,
            "{verb} {path}: {}",
            reply.text()
        );
    }

    // Prompts: sent, waited for, their events paged.
    let done = prompt(&api, &session, "hello over http");
    assert_eq!(done["status"], "done", "{done}");
    let page = api.ok(
        "GET",
        &format!("/api/v1/sessions/{session}/events?after=0&limit=2"),
        None,
    );
    let events = page["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["seq"], 1);
    assert_eq!(page["next_after"], 2);
    let rest = api.ok(
        "GET",
        &format!("/api/v1/sessions/{session}/events?after=2"),
        None,
    );
    assert!(rest["events"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "prompt.done"));
    let history = api.ok("GET", &format!("/api/v1/history?session={session}"), None);
    assert_eq!(history["prompts"].as_array().unwrap().len(), 1);
    let execs = api.ok("GET", "/api/v1/execs?limit=5", None);
    assert!(execs.is_object() || execs.is_array(), "{execs}");

    // Steering and compaction: the fake exec engine cannot; the refusal is a JSON error.
    for path in ["steer", "compact"] {
        let reply = api.call(
            "POST",
            &format!("/api/v1/sessions/{session}/{path}"),
            Some(json!({ "text": "more" })),
        );
        assert_ne!(reply.status, 500, "{}", reply.text());
        if reply.status != 200 {
            reply.error_code();
        }
    }

    // Cancelling: a hanging prompt, by its id.
    let hanging = api.ok(
        "POST",
        &format!("/api/v1/sessions/{session}/prompts"),
        Some(json!({ "text": "@fake hang\nwait" })),
    );
    let id = hanging["id"].as_str().unwrap();
    let cancelled = api.ok("POST", &format!("/api/v1/prompts/{id}/cancel"), None);
    assert_eq!(cancelled["cancelled"][0]["prompt"], id);
    let ended = api.ok("GET", &format!("/api/v1/prompts/{id}/wait"), None);
    assert_eq!(ended["status"], "cancelled", "{ended}");

    // Drivers: none; a claim needs an exec (X-Corral-Exec), refused without one.
    let driver = api.ok("GET", &format!("/api/v1/sessions/{session}/driver"), None);
    assert!(driver.is_null() || driver.is_object(), "{driver}");
    let claim = api.call("POST", &format!("/api/v1/sessions/{session}/driver"), None);
    assert_eq!((claim.status, claim.error_code()), (400, -32602));
    let release = api.call(
        "DELETE",
        &format!("/api/v1/sessions/{session}/driver"),
        Some(json!({ "generation": 1 })),
    );
    assert_ne!(release.status, 500, "{}", release.text());

    // Schedules: added, shown, paused, resumed, removed.
    let added = api.ok(
        "POST",
        "/api/v1/schedules",
        Some(json!({ "session": session, "cron": "0 9 * * *", "text": "triage" })),
    );
    let schedule = added["id"].as_str().unwrap().to_string();
    assert!(added["next_at"].is_i64(), "{added}");
    let listed = api.ok("GET", "/api/v1/schedules", None);
    assert_eq!(listed[0]["id"], schedule.as_str(), "{listed}");
    let shown = api.ok(
        "GET",
        &format!("/api/v1/schedules/{schedule}?limit=5"),
        None,
    );
    assert_eq!(shown["firings"], json!([]), "{shown}");
    let paused = api.ok("POST", &format!("/api/v1/schedules/{schedule}/pause"), None);
    assert_eq!(paused["paused"], true, "{paused}");
    let resumed = api.ok(
        "POST",
        &format!("/api/v1/schedules/{schedule}/resume"),
        None,
    );
    assert_eq!(resumed["paused"], false, "{resumed}");
    api.ok("DELETE", &format!("/api/v1/schedules/{schedule}"), None);
    assert_eq!(api.ok("GET", "/api/v1/schedules", None), json!([]));
    let never = api.call(
        "POST",
        "/api/v1/schedules",
        Some(json!({ "project": "p", "cron": "0 0 30 2 *", "text": "x" })),
    );
    assert_eq!((never.status, never.error_code()), (400, -32602));

    // Settings.
    let settings = api.ok("GET", "/api/v1/settings", None);
    assert!(settings["known"]
        .as_array()
        .unwrap()
        .iter()
        .any(|k| k["name"] == "ui.theme"));
    let theme = api.ok("GET", "/api/v1/settings/ui.theme", None);
    assert_eq!(theme["default"], "system");
    let refused = api.call(
        "PUT",
        "/api/v1/settings/ui.theme",
        Some(json!({ "value": "blue" })),
    );
    assert_eq!(refused.error_code(), -32602);
    assert!(refused.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("system, light, dark"));

    // Shutdown: the daemon stops.
    let pid = home.daemon_pid().unwrap();
    assert_eq!(
        api.ok("POST", "/api/v1/shutdown", None),
        json!({ "stopping": true })
    );
    wait_until("the daemon stops", || !common::daemon::alive(pid));
}

#[test]
fn bad_input_is_a_json_error_on_every_route() {
    let (home, api, session) = daemon();
    let describe = api.ok("GET", "/describe", None);
    let routes: Vec<(String, String, bool, Vec<Value>)> = describe["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|route| route["path"].as_str().unwrap().starts_with("/api/"))
        .filter(|route| route["websocket"] != true)
        .map(|route| {
            (
                route["method"].as_str().unwrap().to_string(),
                route["path"].as_str().unwrap().to_string(),
                route["body"] == true,
                route["query"].as_array().unwrap().clone(),
            )
        })
        .collect();
    assert!(routes.len() >= 25, "{routes:?}");
    let fill = |path: &str| {
        path.replace("{session}", &session)
            .replace("{project}", "p")
            .replace("{prompt}", "nosuchprompt")
            .replace("{name}", "ui.theme")
            .replace("{schedule}", "nosuchschedule")
    };
    for (verb, path, body, query) in &routes {
        if path.ends_with("/shutdown") {
            continue;
        }
        let path = fill(path);
        // An unknown query parameter.
        let reply = api.call(verb, &format!("{path}?nosuch=1"), body.then(|| json!({})));
        assert_eq!(
            reply.error_code(),
            -32602,
            "{verb} {path}: {}",
            reply.text()
        );
        // A declared one of the wrong type.
        for declared in query {
            if declared["type"] != "string" {
                let name = declared["name"].as_str().unwrap();
                let reply = api.call(verb, &format!("{path}?{name}=notanumber"), None);
                assert_eq!(
                    reply.error_code(),
                    -32602,
                    "{verb} {path}?{name}: {}",
                    reply.text()
                );
            }
        }
        // An oversized query.
        let reply = api.call(verb, &format!("{path}?{}", "x".repeat(20_000)), None);
        assert!(
            reply.status == 400 || reply.status == 431,
            "{verb} {path}: {}",
            reply.status
        );
        if *body {
            // Not JSON; not an object; a member of the wrong type.
            let bearer = api.bearer();
            let broken = request(
                &api.listen,
                &format!("{verb} {path}"),
                &[("Authorization", &bearer)],
                b"{\"title\":",
            );
            assert_eq!(broken.error_code(), -32700, "{verb} {path}");
            let array = api.call(verb, &path, Some(json!([1, 2])));
            assert_eq!(array.error_code(), -32602, "{verb} {path}");
            let typed = api.call(
                verb,
                &path,
                Some(
                    json!({ "name": 5, "title": 5, "text": 5, "value": 5, "path": 5,
                             "project": 5, "locking": "yes", "generation": "x",
                             "discard_changes": "yes", "into": 5, "squash": "yes" }),
                ),
            );
            assert_eq!(
                typed.error_code(),
                -32602,
                "{verb} {path}: {}",
                typed.text()
            );
        }
    }
    // Missing params.
    for (verb, path, body) in [
        (
            "POST",
            "/api/v1/projects".to_string(),
            json!({ "name": "x" }),
        ),
        ("POST", "/api/v1/sessions".to_string(), json!({})),
        ("PATCH", format!("/api/v1/sessions/{session}"), json!({})),
        (
            "POST",
            format!("/api/v1/sessions/{session}/prompts"),
            json!({}),
        ),
        (
            "POST",
            format!("/api/v1/sessions/{session}/steer"),
            json!({}),
        ),
    ] {
        let reply = api.call(verb, &path, Some(body));
        assert_eq!(
            reply.error_code(),
            -32602,
            "{verb} {path}: {}",
            reply.text()
        );
    }
    // A path segment the body contradicts.
    let contradicted = api.call(
        "PATCH",
        &format!("/api/v1/sessions/{session}"),
        Some(json!({ "session": "other", "title": "x" })),
    );
    assert_eq!(contradicted.error_code(), -32602);
    // Oversized: a title, a selector, a body over the limit (16 MiB).
    let title = api.call(
        "PATCH",
        &format!("/api/v1/sessions/{session}"),
        Some(json!({ "title": "t".repeat(100_000) })),
    );
    assert_eq!(title.error_code(), -32602);
    let selector = api.call(
        "GET",
        &format!("/api/v1/sessions/{}", "s".repeat(5000)),
        None,
    );
    assert_eq!(selector.error_code(), -32004);
    assert!(
        selector.text().len() < 2000,
        "the error repeats the whole selector"
    );
    let huge = format!(r#"{{"text":"{}"}}"#, "x".repeat(16 << 20));
    let bearer = api.bearer();
    let over = request(
        &api.listen,
        &format!("POST /api/v1/sessions/{session}/prompts"),
        &[("Authorization", &bearer)],
        huge.as_bytes(),
    );
    assert_eq!(over.error_code(), -32600, "{}", over.text());
    assert!(over.text().contains("16777216"), "{}", over.text());
    // A prompt within the body limit but over the prompt's own limit (1 MiB as JSON).
    let long = api.call(
        "POST",
        &format!("/api/v1/sessions/{session}/prompts"),
        Some(json!({ "text": "x".repeat(2 << 20) })),
    );
    assert_eq!(long.error_code(), -32602, "{}", long.text());
    // Unknown routes and methods.
    assert_eq!(
        api.call("GET", "/api/v1/nothing", None).error_code(),
        -32601
    );
    let wrong = api.call("DELETE", "/api/v1/status", None);
    assert_eq!(wrong.status, 405);
    assert_eq!(wrong.header("allow"), Some("GET"));
    // The daemon still serves, and stored nothing of all that.
    assert_eq!(api.ok("GET", "/api/v1/status", None)["sessions"], 1);
    home.stop_daemon();
}

#[test]
fn the_event_websocket_replays_resumes_and_checks_its_origin() {
    let (home, api, session) = daemon();
    let bearer = api.bearer();
    let own = format!("http://{}", api.listen);
    // Access: the token, and an Origin of this server or none.
    assert_eq!(api.websocket("", &[]).err(), Some(401));
    assert_eq!(
        api.websocket(
            "",
            &[
                ("Authorization", &bearer),
                ("Origin", "http://evil.example")
            ]
        )
        .err(),
        Some(403)
    );
    assert_eq!(
        api.websocket(
            "",
            &[
                ("Authorization", &bearer),
                ("Origin", &format!("https://{}", api.listen))
            ]
        )
        .err(),
        Some(403)
    );
    let mut all = api
        .websocket("", &[("Authorization", &bearer), ("Origin", &own)])
        .expect("an Origin of this server opens");
    // A browser's cookie works too.
    let (cookie, _) = api.login();
    let mut by_cookie = api
        .websocket(
            &format!("?session={session}"),
            &[("Cookie", &cookie), ("Origin", &own)],
        )
        .expect("a cookie opens");
    assert_eq!(
        api.websocket("?session=nosuch", &[("Authorization", &bearer)])
            .err(),
        Some(404)
    );
    assert_eq!(
        api.websocket("?after=x", &[("Authorization", &bearer)])
            .err(),
        Some(400)
    );

    let done = prompt(&api, &session, "stream me");
    assert_eq!(done["status"], "done");
    // Live: the session's events, in order, to its end.
    let seen = read_until(&mut by_cookie, |m| kind(m) == "prompt.done");
    let seqs: Vec<i64> = seen
        .iter()
        .map(|m| m["params"]["event"]["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "{seen:#?}"
    );
    assert!(seen
        .iter()
        .all(|m| m["jsonrpc"] == "2.0" && m["method"] == "events.event"));
    // Every session's: the same events, numbered by the feed.
    let feed = read_until(&mut all, |m| kind(m) == "prompt.done");
    assert_eq!(feed.len(), seen.len());
    let feed_seqs: Vec<i64> = feed
        .iter()
        .map(|m| m["params"]["event"]["feed_seq"].as_i64().unwrap())
        .collect();
    assert!(
        feed_seqs.windows(2).all(|pair| pair[0] < pair[1]),
        "{feed_seqs:?}"
    );

    // Replay from a cursor: exactly what came after it.
    let after = seqs[1];
    let mut resumed = api.bearer_socket(&format!("?session={session}&after={after}"));
    let replayed = read_until(&mut resumed, |m| kind(m) == "prompt.done");
    assert_eq!(replayed[0]["params"]["event"]["seq"], after + 1);
    assert_eq!(replayed.len(), seen.len() - after as usize);
    let mut from_feed = api.bearer_socket(&format!("?after={}", feed_seqs[0]));
    let refed = read_until(&mut from_feed, |m| kind(m) == "prompt.done");
    assert_eq!(refed.len(), feed.len() - 1);
    home.stop_daemon();
}

#[test]
fn a_websocket_client_that_never_reads_is_dropped_and_its_session_goes_on() {
    let (home, api, session) = daemon();
    // Connected, and never read from until the end.
    let mut idle = api.bearer_socket(&format!("?session={session}"));
    let steps = 40_000;
    let done = prompt(&api, &session, &format!("@fake deltas={steps}\nmany steps"));
    assert_eq!(done["status"], "done", "{done}");
    // The session is whole: every step stored.
    let last = api.ok(
        "GET",
        &format!("/api/v1/sessions/{session}/events?after=0&limit=1000"),
        None,
    );
    assert!(last["more"] == true);
    wait_until("the idle client is dropped", || {
        std::fs::read_to_string(home.path().join("daemon.log"))
            .unwrap_or_default()
            .contains("dropped a WebSocket client that stopped reading")
    });
    // The idle client gets what was buffered for it, then the end, not the whole stream.
    let mut received = 0usize;
    let mut saw_done = false;
    let until = Instant::now() + DEADLINE;
    loop {
        assert!(
            Instant::now() < until,
            "the dropped client's stream never ended"
        );
        match idle.read() {
            Ok(tungstenite::Message::Text(text)) => {
                received += 1;
                saw_done |= text.contains("\"prompt.done\"");
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert!(
        !saw_done,
        "the dropped client got the whole stream ({received} messages)"
    );
    assert!(received > 0 && received < steps, "{received}");
    // A new client reads the whole stream, and the daemon goes on.
    let mut fresh = api.bearer_socket(&format!("?session={session}"));
    let all = read_until(&mut fresh, |m| kind(m) == "prompt.done");
    assert!(all.len() > steps, "{}", all.len());
    let again = prompt(&api, &session, "still here");
    assert_eq!(again["status"], "done");
    home.stop_daemon();
}

#[test]
fn a_thousand_websocket_clients_at_once() {
    // A thousand sockets each side: the soft descriptor limit raised to the hard one (the
    // daemon, started below, inherits it).
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    assert!(
        hard >= 4096,
        "a thousand clients need 4,096 descriptors; the hard limit is {hard}"
    );
    let (home, api, session) = daemon();
    let clients = 1000;
    let started = Instant::now();
    let mut sockets: Vec<_> = (0..clients)
        .map(|n| {
            let query = if n % 2 == 0 {
                format!("?session={session}")
            } else {
                String::new()
            };
            api.bearer_socket(&query)
        })
        .collect();
    let opened = started.elapsed();
    let done = prompt(&api, &session, "to a thousand");
    assert_eq!(done["status"], "done");
    for (n, socket) in sockets.iter_mut().enumerate() {
        let seen = read_until(socket, |m| kind(m) == "prompt.done");
        assert!(seen.len() >= 3, "client {n}: {seen:?}");
    }
    eprintln!(
        "{clients} clients opened in {opened:?}, all served in {:?}",
        started.elapsed()
    );
    drop(sockets);
    assert_eq!(api.ok("GET", "/api/v1/status", None)["sessions"], 1);
    home.stop_daemon();
}

#[test]
fn a_taken_port_is_told_and_the_socket_still_serves() {
    let home = DaemonHome::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    // Only loopback is accepted (a refused value is a usage error, exit 2, as any invalid setting).
    for refused in ["0.0.0.0:8080", "10.1.2.3:80", "nonsense"] {
        let error = home.fails(&["config", "set", "http.listen", refused], 2);
        assert!(
            error.contains("http.listen must be a loopback address"),
            "{error}"
        );
    }
    home.config(&[("http.listen", address.as_str())]);
    home.stop_daemon();
    home.start_daemon();
    let status = home.json(&["status", "--json"]);
    let error = status["http"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        error.contains(&format!("cannot listen on {address}")),
        "{error}"
    );
    let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap();
    assert_eq!(log.matches("http: not serving").count(), 1, "{log}");
    let web = home.fails(&["web"], 1);
    assert!(
        web.contains("the daemon serves no HTTP: cannot listen on"),
        "{web}"
    );
    assert!(home
        .ok(&["status"])
        .contains("http:     not serving: cannot listen on"));
    // The socket serves: a project and a session through it.
    home.add_project("p", &home.work(), "fake");
    home.new_session(&["p", "--title", "still"]);
    // Off: no HTTP, said so.
    home.config(&[("http.listen", "off")]);
    home.stop_daemon();
    home.start_daemon();
    assert!(home.json(&["status", "--json"])["http"].is_null());
    let web = home.fails(&["web"], 1);
    assert!(web.contains("http.listen is off"), "{web}");
    drop(taken);
    home.stop_daemon();
}

#[test]
fn widening_from_inside_a_supervised_run_is_refused_over_http() {
    let (home, api, session) = daemon();
    let token_file = home.path().join("http.token");
    let curl = |verb: &str, path: &str, body: &str| {
        format!(
            "curl -s -w ' HTTP %{{http_code}}' -X {verb} -H \"Authorization: Bearer $(cat '{}')\" \
             -H 'Content-Type: application/json' -d '{body}' 'http://{}{path}'",
            token_file.display(),
            api.listen
        )
    };
    let closing_client = home.path().join("closing_client.py");
    let (host, port) = api.listen.rsplit_once(':').unwrap();
    std::fs::write(
        &closing_client,
        format!(
            "import socket\n\
             token = open('{token}').read().strip()\n\
             body = b'{{\"full_access\":true}}'\n\
             head = ('PATCH /api/v1/projects/p HTTP/1.1\\r\\nHost: {listen}\\r\\n'\n\
                     'Authorization: Bearer ' + token + '\\r\\nContent-Type: application/json\\r\\n'\n\
                     'Content-Length: %d\\r\\n\\r\\n' % len(body)).encode()\n\
             s = socket.create_connection(('{host}', {port}))\n\
             s.sendall(head + body)\n\
             s.close()\n\
             print('sent and closed')\n",
            token = token_file.display(),
            listen = api.listen,
        ),
    )
    .unwrap();
    let script = [
        "set +e".to_string(),
        "echo '== widen'".into(),
        curl("PATCH", "/api/v1/projects/p", r#"{"full_access":true}"#),
        "echo; echo '== detached'".into(),
        format!(
            "env -i PATH=\"$PATH\" setsid -w {}",
            curl("PUT", "/api/v1/groups/deploy", r#"{"locking":false}"#)
        ),
        "echo; echo '== narrow'".into(),
        curl("PATCH", "/api/v1/projects/p", r#"{"full_access":false}"#),
        // Sent and closed at once, the answer never read: the peer is gone when the daemon
        // reads the body (after the narrowing, which would undo it).
        "echo; echo '== closed'".into(),
        format!("python3 '{}'", closing_client.display()),
        "echo; echo '== end'".into(),
    ]
    .join("\n");
    let script_path = home.path().join("agent.sh");
    std::fs::write(&script_path, script).unwrap();
    let done = prompt(
        &api,
        &session,
        &format!("@fake run=sh '{}'\nwiden", script_path.display()),
    );
    assert_eq!(done["status"], "done", "{done}");
    let page = api.ok("GET", &format!("/api/v1/sessions/{session}/events"), None);
    let events = page["events"].as_array().unwrap();
    let output = events
        .iter()
        .rev()
        .filter(|event| event["kind"] == "tool")
        .find_map(|event| event["payload"]["detail"]["aggregated_output"].as_str())
        .expect("the agent's command ran")
        .to_string();
    let sections: Vec<&str> = output.split("== ").skip(1).collect();
    assert_eq!(sections.len(), 5, "{output}");
    assert!(sections[3].contains("sent and closed"), "{output}");
    for section in &sections[..2] {
        assert!(section.contains("HTTP 403"), "{section}");
        assert!(section.contains("-32010"), "{section}");
        assert!(
            section.contains(&format!(
                "not allowed from inside a supervised run (session {session})"
            )),
            "{section}"
        );
    }
    assert!(
        sections[2].contains("HTTP 200"),
        "narrowing refused: {}",
        sections[2]
    );
    // The closed client's request is the daemon's to finish (no answer tells the test): it
    // is done once the daemon said its peer was not found, or refused it as a run's.
    let refusals = || {
        let page = api.ok("GET", &format!("/api/v1/sessions/{session}/events"), None);
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "request.refused")
            .cloned()
            .collect::<Vec<Value>>()
    };
    wait_until("the closed client's request is handled", || {
        let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap_or_default();
        log.contains("the process behind a project.set request was not found")
            || refusals().len() == 3
    });
    // Whatever was said to a client that did not listen, the project did not widen.
    assert_eq!(
        api.ok("GET", "/api/v1/projects/p", None)["full_access"],
        false,
        "a client that sent and closed widened the project"
    );
    let refused = refusals();
    assert!((2..=3).contains(&refused.len()), "{refused:#?}");
    assert!(
        refused
            .iter()
            .all(|e| e["payload"]["found_by"] == "ancestry"),
        "{refused:#?}"
    );
    // Nothing changed; the same request from a person (this test) is allowed.
    assert_eq!(
        api.ok("GET", "/api/v1/projects/p", None)["full_access"],
        false
    );
    let person = api.ok(
        "PATCH",
        "/api/v1/projects/p",
        Some(json!({ "full_access": true })),
    );
    assert_eq!(person["full_access"], true);
    let _ = Duration::ZERO;
    home.stop_daemon();
}

#[test]
fn an_image_uploaded_with_a_prompt_reaches_the_engine_as_a_private_file() {
    let (home, api, session) = daemon();
    let png = b"\x89PNG\r\n\x1a\nnot much of a picture";
    let data: String = {
        // Base64 by hand: the test's own bytes, no helper of the code under test.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        png.chunks(3)
            .flat_map(|chunk| {
                let n = chunk.iter().fold(0u32, |n, byte| n << 8 | *byte as u32)
                    << (8 * (3 - chunk.len()));
                (0..4).map(move |i| {
                    if i > chunk.len() {
                        '='
                    } else {
                        ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char
                    }
                })
            })
            .collect()
    };
    let sent = api.ok(
        "POST",
        &format!("/api/v1/sessions/{session}/prompts"),
        Some(json!({ "text": "look at this", "images": [
            { "name": "shot.png", "media_type": "image/png", "data": data }
        ]})),
    );
    let path = sent["images"][0]
        .as_str()
        .expect("the image's path")
        .to_string();
    assert!(
        path.starts_with(&home.path().join("uploads").display().to_string()),
        "{path}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), png);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let id = sent["id"].as_str().unwrap();
    let done = api.ok("GET", &format!("/api/v1/prompts/{id}/wait"), None);
    assert_eq!(done["status"], "done", "{done}");
    // The engine was given the file.
    let page = api.ok("GET", &format!("/api/v1/sessions/{session}/events"), None);
    let argv = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|event| event["kind"] == "run.started")
        .map(|event| event["payload"]["argv"].clone())
        .expect("a run");
    assert!(argv.as_array().unwrap().contains(&json!(path)), "{argv}");
    // What is not an image is refused, and nothing is written for it.
    let refused = api.call(
        "POST",
        &format!("/api/v1/sessions/{session}/prompts"),
        Some(json!({ "text": "x", "images": [
            { "name": "page.html", "media_type": "text/html", "data": "PHA+" }
        ]})),
    );
    assert_eq!(refused.error_code(), -32602);
    let uploads = std::fs::read_dir(home.path().join("uploads"))
        .unwrap()
        .count();
    assert_eq!(uploads, 1);
    home.stop_daemon();
}

/// A field of /proc/PID/status, in KiB.
fn status_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

#[test]
fn a_websocket_client_that_pings_and_never_reads_costs_the_daemon_little() {
    let (home, api, _session) = daemon();
    let pid = home.daemon_pid().expect("the daemon's pid");
    let mut socket = api.bearer_socket("");
    let before_rss = status_kib(pid, "VmRSS:");
    let before_peak = status_kib(pid, "VmHWM:");
    // Masked ping frames of 125 bytes (the most a control frame holds), written raw: the
    // client never reads a pong. Loopback's buffers hold some 10 MB of pongs, so the pings
    // go well past them (100,000 pongs would fit in the kernel).
    let mut frame = vec![0x89u8, 0x80 | 125, 0, 0, 0, 0];
    frame.extend_from_slice(&[b'p'; 125]);
    let batch: Vec<u8> = frame.repeat(1000);
    let pings = 500_000;
    let stream = socket.get_mut();
    // Once the client's queue is full the daemon reads no more of it: a write blocked this
    // long is the daemon not reading.
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sent = 0;
    while sent < pings {
        if stream.write_all(&batch).is_err() {
            break;
        }
        sent += 1000;
    }
    let after_rss = status_kib(pid, "VmRSS:");
    let after_peak = status_kib(pid, "VmHWM:");
    let grown = after_peak.saturating_sub(before_peak.max(before_rss));
    eprintln!(
        "{sent} pings written; the daemon's RSS {before_rss} → {after_rss} KiB, its peak \
         {before_peak} → {after_peak} KiB (+{grown} KiB)"
    );
    assert!(
        grown < 8 << 10,
        "the daemon's peak RSS grew by {grown} KiB for a client that pings and never reads"
    );
    wait_until("the pinging client is dropped", || {
        std::fs::read_to_string(home.path().join("daemon.log"))
            .unwrap_or_default()
            .contains("dropped a WebSocket client that stopped reading")
    });
    drop(socket);
    assert_eq!(api.ok("GET", "/api/v1/status", None)["sessions"], 1);
    home.stop_daemon();
}

#[test]
fn a_fifo_in_place_of_the_token_hangs_neither_the_api_nor_corral_web() {
    let (home, api, _session) = daemon();
    let token = home.path().join("http.token");
    std::fs::remove_file(&token).unwrap();
    nix::unistd::mkfifo(&token, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Nothing ever writes the FIFO: a server that opened it would wait forever.
    let refused = api.call("GET", "/api/v1/status", None);
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert_eq!(
        api.call("GET", "/api/v1/status", None).status,
        401,
        "asked again"
    );
    let web = home.fails(&["web"], 1);
    assert!(web.contains("not a regular file"), "{web}");
    assert_eq!(web.trim().lines().count(), 1, "{web}");
    // Replaced by a token again: served again.
    std::fs::remove_file(&token).unwrap();
    home.ok(&["web", "--rotate-token"]);
    let api = Api::of(&home);
    api.ok("GET", "/api/v1/status", None);
    home.stop_daemon();
}

#[test]
fn exec_records_and_the_exec_a_request_names_are_checked_over_http() {
    let (home, api, session) = daemon();
    let bearer = api.bearer();
    let send = |exec: &str, body: &Value| {
        request(
            &api.listen,
            &format!("POST /api/v1/sessions/{session}/prompts"),
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
                ("X-Corral-Exec", exec),
            ],
            body.to_string().as_bytes(),
        )
    };
    let forged_id = "0190aaaa-0000-7000-8000-000000000001";
    let forged = json!({
        "text": "forged",
        "exec": {
            "id": forged_id,
            "trace_id": forged_id,
            "argv": ["true"],
            "cwd": "/",
            "pid": 1,
            "started_at": 1,
        },
    });
    let refused = send(forged_id, &forged);
    assert_eq!(refused.error_code(), -32602, "{}", refused.text());
    assert!(
        refused.text().contains("exec records are the socket's"),
        "{}",
        refused.text()
    );
    let rows = home
        .store()
        .value("SELECT count(*) FROM execs WHERE pid = 1");
    assert_eq!(rows, json!(0), "a forged exec was recorded");
    // An exec that is not recorded.
    let claim = |exec: &str| {
        request(
            &api.listen,
            &format!("POST /api/v1/sessions/{session}/driver"),
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
                ("X-Corral-Exec", exec),
            ],
            b"{}",
        )
    };
    let unknown = claim(forged_id);
    assert_eq!(unknown.error_code(), -32602, "{}", unknown.text());
    assert!(
        unknown.text().contains("not recorded"),
        "{}",
        unknown.text()
    );
    // An exec that ended.
    home.ok(&["run", "--", "true"]);
    let exec_of = |command: &str, open: bool| -> Option<String> {
        let ended = if open { "IS NULL" } else { "IS NOT NULL" };
        home.store()
            .sql(&format!(
                "SELECT id FROM execs WHERE command LIKE {} AND completed_at {ended} \
                 ORDER BY started_at DESC LIMIT 1",
                common::store::quoted(&format!("%{command}%"))
            ))
            .first()
            .and_then(|row| row[0].as_str().map(str::to_string))
    };
    let ended = exec_of("\"true\"", false).expect("corral run's exec is recorded");
    let reply = claim(&ended);
    assert_eq!(reply.error_code(), -32602, "{}", reply.text());
    assert!(reply.text().contains("has ended"), "{}", reply.text());
    // A live exec of another process: this test is not it.
    let mut running = home
        .corral(&["run", "--", "sleep", "30"])
        .spawn()
        .expect("corral run starts");
    let mut live = None;
    wait_until("corral run's exec is recorded", || {
        live = exec_of("\"sleep\"", true);
        live.is_some()
    });
    let live = live.unwrap();
    let reply = claim(&live);
    assert_eq!(reply.error_code(), -32010, "{}", reply.text());
    assert!(
        reply
            .text()
            .contains("not the process sending this request"),
        "{}",
        reply.text()
    );
    let reply = send(&live, &json!({ "text": "as another exec" }));
    assert_eq!(reply.error_code(), -32010, "{}", reply.text());
    // Without the header, the person's request goes as before.
    api.ok(
        "POST",
        &format!("/api/v1/sessions/{session}/prompts"),
        Some(json!({ "text": "mine" })),
    );
    common::daemon::kill(running.id() as i32, libc::SIGTERM);
    let _ = running.wait();
    home.stop_daemon();
}

#[test]
fn a_body_that_arrives_too_slowly_is_refused_and_pages_carry_a_full_csp() {
    let (home, api, session) = daemon();
    home.stop_daemon();
    let started = home
        .corral(&["daemon", "--detach"])
        .env("CORRAL_HTTP_BODY_TIMEOUT_MS", "300")
        .output()
        .unwrap();
    assert!(started.status.success(), "{started:?}");
    drop(api);
    let api = Api::of(&home);
    let mut stream = TcpStream::connect(&api.listen).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let head = format!(
        "POST /api/v1/sessions/{session}/prompts HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"te",
        api.listen,
        api.bearer()
    );
    stream.write_all(head.as_bytes()).unwrap();
    // The rest never comes: the answer does, and the connection ends.
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let reply = parse(&answer);
    assert_eq!(reply.error_code(), -32600, "{}", reply.text());
    assert!(
        reply.text().contains("did not arrive within 300 ms"),
        "{}",
        reply.text()
    );
    // A whole body is read as ever.
    api.ok(
        "POST",
        &format!("/api/v1/sessions/{session}/prompts"),
        Some(json!({ "text": "whole" })),
    );
    let (cookie, _) = api.login();
    let page = request(&api.listen, "GET /", &[("Cookie", &cookie)], b"");
    let csp = page.header("content-security-policy").unwrap_or_default();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    let answer = api.call("GET", "/api/v1/status", None);
    assert!(answer
        .header("content-security-policy")
        .unwrap_or_default()
        .contains("default-src 'self'"));
    home.stop_daemon();
}

/// The worktree routes (issue 13) on a worktree project of a real repository (git isolated:
/// `common::git`; the command engine, whose prompt is a shell line run in the worktree):
/// `GET …/diff` (`?stat=true`: git's summary), `POST …/merge` (`{"squash": true}`: the file
/// lands on main in one commit), `POST …/recreate` of a worktree removed by hand (refused
/// while it is there), and `POST …/archive` that keeps a worktree with changes, then with
/// `{"discard_changes": true}` removes it.
#[test]
fn the_worktree_routes_over_http() {
    let git = GitHome::new();
    git.ok(&["daemon", "--detach"]);
    let repo = git.repo("repo");
    git.add_project("p", &repo, &["--isolation", "worktree"]);
    let session = git.new_session(&["p", "--title", "over http"]);
    let api = Api::of(&git.home);
    let base = git.sha(&repo, "main");
    let done = prompt(
        &api,
        &session,
        "echo one > one.txt && git add one.txt && git commit -q -m one",
    );
    assert_eq!(done["status"], "done", "{done}");
    let branch = git.branch_of(&session);
    let worktree = git.worktree_of(&session);
    let path = |tail: &str| format!("/api/v1/sessions/{session}/{tail}");

    let stat = api.ok("GET", &path("diff?stat=true"), None);
    assert_eq!(
        (
            &stat["files_changed"],
            &stat["insertions"],
            &stat["deletions"]
        ),
        (&json!(1), &json!(1), &json!(0)),
        "{stat}"
    );
    assert_eq!(stat["branch"], branch.as_str());
    assert_eq!(stat["base_commit"], base.as_str());
    assert!(stat["text"].as_str().unwrap().contains("one.txt"), "{stat}");
    let patch = api.ok("GET", &path("diff"), None);
    assert!(patch["text"].as_str().unwrap().contains("+one"), "{patch}");

    let merged = api.ok("POST", &path("merge"), Some(json!({ "squash": true })));
    assert_eq!(merged["into"], "main", "{merged}");
    assert_eq!(merged["squash"], true);
    assert_eq!(merged["commit"], git.sha(&repo, "main").as_str());
    assert_eq!(git.git(&repo, &["show", "main:one.txt"]), "one");
    assert_eq!(
        git.git(&repo, &["rev-list", "--count", &format!("{base}..main")]),
        "1",
        "a squash is one commit"
    );

    let refused = api.call("POST", &path("recreate"), None);
    assert_eq!(refused.status, 400, "{}", refused.text());
    std::fs::remove_dir_all(&worktree).unwrap();
    let shown = api.ok("GET", &format!("/api/v1/sessions/{session}"), None);
    assert_eq!(shown["session"]["worktree_state"], "missing", "{shown}");
    let again = api.ok("POST", &path("recreate"), None);
    assert_eq!(again["worktree_state"], "ready", "{again}");
    assert!(worktree.join("one.txt").is_file());

    std::fs::write(worktree.join("wip.txt"), "not committed\n").unwrap();
    let kept = api.ok("POST", &path("archive"), None);
    assert_eq!(kept["worktree_state"], "kept", "{kept}");
    assert!(kept["archived_at"].is_i64());
    assert!(worktree.join("wip.txt").is_file());
    let removed = api.ok(
        "POST",
        &path("archive"),
        Some(json!({ "discard_changes": true })),
    );
    assert_eq!(removed["worktree_state"], "removed", "{removed}");
    assert!(!worktree.exists());
    // The branch is kept (`sha` fails on a ref that is not there).
    git.sha(&repo, &format!("refs/heads/{branch}"));
    git.stop_daemon();
}

/// A browser's login outlives its daemon: after `corral daemon restart` the cookie still
/// reads, and writes with its CSRF token (the page's copy stays good); once the token is
/// rotated it does neither.
#[test]
fn a_login_outlives_a_daemon_restart_until_the_token_is_rotated() {
    let home = DaemonHome::new();
    home.start_daemon();
    let api = Api::of(&home);
    let (cookie, csrf) = api.login();
    home.ok(&["daemon", "restart"]);
    let listen = Api::of(&home).listen;
    assert_eq!(listen, api.listen, "the same address");
    let read = request(&listen, "GET /api/v1/status", &[("Cookie", &cookie)], b"");
    assert_eq!(read.status, 200, "{}", read.text());
    let put = "PUT /api/v1/settings/ui.theme";
    let headers = [("Cookie", cookie.as_str()), ("X-CSRF-Token", csrf.as_str())];
    let write = request(&listen, put, &headers, br#"{"value":"dark"}"#);
    assert_eq!(write.status, 200, "{}", write.text());

    home.ok(&["web", "--rotate-token"]);
    let read = request(&listen, "GET /api/v1/status", &[("Cookie", &cookie)], b"");
    assert_eq!(read.status, 401, "{}", read.text());
    home.ok(&["daemon", "restart"]);
    let read = request(&listen, "GET /api/v1/status", &[("Cookie", &cookie)], b"");
    assert_eq!(read.status, 401, "{}", read.text());
    home.stop_daemon();
}

/// The port a daemon chose (no `http.listen` port set) is kept in the home: a restarted
/// daemon serves the same URL, so an open page reconnects by itself. Taken meanwhile by
/// another program, the next daemon chooses another, and keeps that one.
#[test]
fn a_restarted_daemon_serves_the_same_port() {
    let home = DaemonHome::new();
    home.start_daemon();
    let listen = |home: &DaemonHome| {
        let status = home.json(&["status", "--json"]);
        status["http"]["listen"]
            .as_str()
            .unwrap_or_else(|| panic!("{status}"))
            .to_string()
    };
    let first = listen(&home);
    let kept = std::fs::read_to_string(home.path().join("http.port")).unwrap();
    assert_eq!(first.rsplit(':').next(), Some(kept.trim()));
    home.ok(&["daemon", "restart"]);
    assert_eq!(listen(&home), first);

    home.ok(&["daemon", "stop"]);
    let taken = std::net::TcpListener::bind(&first).expect("the port is free again");
    home.ok(&["daemon", "start"]);
    let second = listen(&home);
    assert_ne!(second, first);
    drop(taken);
    home.ok(&["daemon", "restart"]);
    assert_eq!(listen(&home), second);
    home.stop_daemon();
}
