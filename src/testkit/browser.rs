//! A real browser for the dashboard's tests (`tests/it/dashboard.rs`, and
//! `examples/dashboard_bench.rs`, which includes this file): headless Chromium driven
//! over WebDriver (`chromedriver`, through the `fantoccini` crate), and a plain HTTP/1.1
//! client for the requests a browser would never send (a foreign `Host`, a write without its
//! CSRF token).
//!
//! - [`available`]: whether Chromium and chromedriver run here. `.ci/run` installs Debian's
//!   `chromium` and `chromium-driver` and says how that went in `CORRAL_TEST_BROWSER`
//!   (`installed` or `unavailable`); a test skips with a printed reason only when the install
//!   failed (or off CI, on a machine without them). In CI a missing browser fails the test.
//! - [`Browser`]: one chromedriver (its own process group, on a free loopback port it picks
//!   itself) and one headless Chromium session with a fresh profile in the test's temporary
//!   directory and a fixed window size. Dropping it (also while a test panics) ends the
//!   WebDriver session, then the driver's whole process group: no process is left behind.
//!   Its helpers block (each runs the async WebDriver call to its end), so tests stay plain.
//!   Waits are done in the page: a `MutationObserver` wakes the wait at each DOM change, no
//!   sleeping loop ([`Browser::wait_until`]).
//! - [`request`]: one HTTP request on its own connection, the status, headers and body.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

/// How long one step (a page load, a wait for the page, a script) may take before the test
/// fails instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The browser's window: a laptop screen.
pub const WINDOW: (u32, u32) = (1280, 800);

/// The Chromium binary (`CORRAL_TEST_CHROMIUM` names another).
pub fn chromium() -> PathBuf {
    std::env::var_os("CORRAL_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/chromium".into())
}

/// The chromedriver binary (`CORRAL_TEST_CHROMEDRIVER` names another).
pub fn chromedriver() -> PathBuf {
    std::env::var_os("CORRAL_TEST_CHROMEDRIVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/usr/bin/chromedriver".into())
}

/// Whether Chromium and chromedriver run here. When they do not: in CI (`CI` set) the test
/// fails unless `.ci/run` said their install failed (`CORRAL_TEST_BROWSER=unavailable`), so a
/// missing browser never passes silently; otherwise the test prints why it skips.
pub fn available() -> bool {
    let missing: Vec<String> = [chromium(), chromedriver()]
        .into_iter()
        .filter(|program| {
            !Command::new(program)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        })
        .map(|program| program.display().to_string())
        .collect();
    if missing.is_empty() {
        return true;
    }
    let said = std::env::var("CORRAL_TEST_BROWSER").unwrap_or_default();
    let in_ci = std::env::var_os("CI").is_some_and(|value| !value.is_empty());
    if said == "installed" || (in_ci && said != "unavailable") {
        panic!(
            "{} do(es) not run here, yet CORRAL_TEST_BROWSER={said:?} (CI={in_ci}): the \
             browser tests must not pass without a browser",
            missing.join(" and ")
        );
    }
    eprintln!(
        "skipped: {} do(es) not run here (install Debian's chromium and chromium-driver)",
        missing.join(" and ")
    );
    false
}

/// Where screenshots go: `screenshots/` in the target directory (`CARGO_TARGET_DIR`, else
/// `target/` beside Cargo.toml).
pub fn screenshot_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("screenshots")
}

/// chromedriver in a process group of its own; the group (the driver and every Chromium
/// process it started) is ended when this is dropped.
struct Driver {
    child: Child,
    port: u16,
    /// The `HOME` of the driver and of every browser process: a directory of the test's
    /// own, which also marks them (Chromium's crash handler leaves the group with `setsid`).
    home: PathBuf,
}

impl Driver {
    /// Starts chromedriver on a port it picks (`--port=0`) and reads that port from its first
    /// lines ("… started successfully on port N.").
    ///
    /// chromedriver given port 0 sometimes picks a port it then cannot bind ("IPv4 port not
    /// available. Exiting..."), seen on a loaded machine: that start is tried again, twice.
    fn start(dir: &Path) -> Driver {
        let mut tries = 0;
        loop {
            tries += 1;
            match Driver::try_start(dir) {
                Ok(driver) => return driver,
                Err(seen)
                    if tries < 3 && seen.iter().any(|line| line.contains("port not available")) =>
                {
                    continue
                }
                Err(seen) => panic!("chromedriver said no port: {seen:?}"),
            }
        }
    }

    /// One start of the driver: it, or what it said before it gave no port.
    fn try_start(dir: &Path) -> Result<Driver, Vec<String>> {
        let home = dir.to_path_buf();
        let mut child = Command::new(chromedriver())
            .arg("--port=0")
            .arg(format!(
                "--log-path={}",
                dir.join("chromedriver.log").display()
            ))
            // Chromium's crash reports, caches and settings stay in the test's directory.
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|error| panic!("{} does not start: {error}", chromedriver().display()));
        let stdout = child.stdout.take().expect("piped");
        let (sender, lines) = mpsc::channel();
        // Reads the driver's stdout to its end, so that the driver never blocks on it.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let _ = sender.send(line);
            }
        });
        let mut driver = Driver {
            child,
            port: 0,
            home,
        };
        let until = Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        while driver.port == 0 {
            let left = until.saturating_duration_since(Instant::now());
            let Ok(line) = lines.recv_timeout(left) else {
                // Dropped: its group is ended.
                return Err(seen);
            };
            if let Some(port) = line
                .split("started successfully on port ")
                .nth(1)
                .and_then(|rest| rest.trim_end_matches('.').trim().parse().ok())
            {
                driver.port = port;
            }
            seen.push(line);
        }
        Ok(driver)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Whatever of the group is left (a Chromium helper that outlived the driver), and
        // whatever left the group.
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pid in self.leftovers() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

impl Driver {
    /// The live processes started from this driver, in its group or not (their `HOME`).
    fn leftovers(&self) -> Vec<i32> {
        processes_in(&self.home)
    }
}

/// A headless Chromium session for one test. See the module doc.
pub struct Browser {
    // Declared first: dropped (closed) before the driver and the runtime.
    client: Option<Client>,
    runtime: tokio::runtime::Runtime,
    driver: Driver,
    test: String,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium whose profile is a new directory under
    /// `dir` (the test's temporary directory); `test` names the screenshots.
    pub fn start(test: &str, dir: &Path) -> Browser {
        let dir = dir.join(format!("browser-{test}"));
        std::fs::create_dir_all(&dir).unwrap();
        let driver = Driver::start(&dir);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let profile = dir.join("profile");
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            format!("--user-data-dir={}", profile.display()),
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
        ];
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium(), "args": args },
            "timeouts": {
                "script": DEADLINE.as_millis() as u64,
                "pageLoad": DEADLINE.as_millis() as u64,
                "implicit": 0,
            },
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let url = format!("http://127.0.0.1:{}", driver.port);
        let client = runtime
            .block_on(
                ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                    .capabilities(capabilities)
                    .connect(&url),
            )
            .unwrap_or_else(|error| panic!("no Chromium session from chromedriver: {error}"));
        Browser {
            client: Some(client),
            runtime,
            driver,
            test: test.to_string(),
        }
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("the session is open")
    }

    /// Runs a WebDriver call to its end, failing the test (saying `what`) on an error or
    /// after [`DEADLINE`] and a little more.
    fn run<T, E: std::fmt::Display>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> T {
        self.try_run(what, call)
            .unwrap_or_else(|error| panic!("{what}: {error}"))
    }

    /// As [`Browser::run`], but the browser's error is returned; no answer still fails.
    fn try_run<T, E: std::fmt::Display>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, String> {
        let bounded =
            async { tokio::time::timeout(DEADLINE + Duration::from_secs(10), call).await };
        match self.runtime.block_on(bounded) {
            Ok(result) => result.map_err(|error| error.to_string()),
            Err(_) => panic!("{what}: no answer from the browser within {DEADLINE:?}"),
        }
    }

    /// Opens `url` and returns once it has loaded (WebDriver's page-load wait).
    pub fn goto(&self, url: &str) {
        self.run(&format!("going to {url}"), self.client().goto(url));
    }

    /// Resizes the window (CSS pixels, the browser's frame included).
    pub fn set_window_size(&self, width: u32, height: u32) {
        self.run(
            &format!("resizing the window to {width}x{height}"),
            self.client().set_window_size(width, height),
        );
    }

    /// The URL the browser shows now.
    pub fn url(&self) -> String {
        self.run("reading the URL", self.client().current_url())
            .to_string()
    }

    /// The URL the browser shows now without its fragment (a redirect keeps the fragment of
    /// the URL asked for: `/#/settings` sent to `/login` shows `/login#/settings`).
    pub fn document_url(&self) -> String {
        let url = self.url();
        url.split('#').next().unwrap_or_default().to_string()
    }

    /// Waits until the page's path is `path`, through the navigations the page itself makes
    /// (a script's wait ends with its document: it is started again in the next one).
    pub fn wait_for_path(&self, path: &str) {
        let script = format!(
            r#"const done = arguments[arguments.length - 1];
const path = {};
if (location.pathname === path) {{ done(true); return; }}
new MutationObserver(() => {{ if (location.pathname === path) done(true); }})
  .observe(document, {{ subtree: true, childList: true, attributes: true }});"#,
            js_string(path)
        );
        let until = Instant::now() + DEADLINE;
        loop {
            let call = self.client().execute_async(&script, vec![]);
            let bounded = async { tokio::time::timeout(DEADLINE, call).await };
            match self.runtime.block_on(bounded) {
                Ok(Ok(_)) => return,
                // The document went away under the script (the page navigated): look again.
                Ok(Err(error)) if Instant::now() < until => {
                    let _ = error;
                }
                Ok(Err(error)) => panic!("waiting for the path {path}: {error}"),
                Err(_) => panic!("the page's path did not become {path} within {DEADLINE:?}"),
            }
        }
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page: its value.
    pub fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.run(
            &format!("running {script}"),
            self.client().execute(script, args),
        )
    }

    /// Runs `script` (a function body) in the page until it calls `arguments[arguments.length
    /// - 1]` (its callback) with a value: that value.
    pub fn execute_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.run(
            &format!("running {script}"),
            self.client().execute_async(script, args),
        )
    }

    /// Waits until the JavaScript expression `condition` is truthy in the page, checking it
    /// now and again after each change of the DOM (a `MutationObserver`, no polling): its
    /// value. Fails the test after [`DEADLINE`] (WebDriver's script timeout), saying `what`.
    pub fn wait_until(&self, what: &str, condition: &str) -> Value {
        let script = format!(
            r#"const done = arguments[arguments.length - 1];
const check = () => {{ try {{ return ({condition}); }} catch (error) {{ return null; }} }};
const now = check();
if (now) {{ done(now); return; }}
const observer = new MutationObserver(() => {{
  const value = check();
  if (value) {{ observer.disconnect(); done(value); }}
}});
observer.observe(document, {{ subtree: true, childList: true, attributes: true, characterData: true }});"#
        );
        self.run(
            &format!("waiting until {what} ({condition})"),
            self.client().execute_async(&script, vec![]),
        )
    }

    /// Waits until an element matches the CSS `selector`.
    pub fn wait_for(&self, selector: &str) {
        self.wait_until(
            &format!("{selector} is on the page"),
            &format!("document.querySelector({})", js_string(selector)),
        );
    }

    /// Waits until an element matches `selector` and its text contains `text`.
    pub fn wait_for_text(&self, selector: &str, text: &str) {
        self.wait_until(
            &format!("{selector} shows {text:?}"),
            &format!(
                "Array.from(document.querySelectorAll({})).some(e => e.textContent.includes({}))",
                js_string(selector),
                js_string(text)
            ),
        );
    }

    /// How many elements match `selector` now.
    pub fn count(&self, selector: &str) -> usize {
        let count = self.execute(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(selector)],
        );
        count.as_u64().expect("a count") as usize
    }

    /// The text of the first element matching `selector` (it must be there).
    pub fn text(&self, selector: &str) -> String {
        let element = self.find(selector);
        self.run(&format!("reading the text of {selector}"), element.text())
    }

    /// An attribute of the first element matching `selector` (it must be there).
    pub fn attr(&self, selector: &str, name: &str) -> Option<String> {
        let element = self.find(selector);
        self.run(&format!("reading {name} of {selector}"), element.attr(name))
    }

    /// The current `value` of the form field matching `selector`.
    pub fn value(&self, selector: &str) -> String {
        let element = self.find(selector);
        self.run(
            &format!("reading the value of {selector}"),
            element.prop("value"),
        )
        .unwrap_or_default()
    }

    /// Replaces the text of the field matching `selector` with `text`, typed as keys.
    pub fn type_into(&self, selector: &str, text: &str) {
        let element = self.find(selector);
        self.run(&format!("clearing {selector}"), element.clear());
        self.run(&format!("typing into {selector}"), element.send_keys(text));
    }

    /// Clicks the first element matching `selector` (it must be there).
    ///
    /// The element is first brought to the middle of the window, as a person would scroll
    /// to it: WebDriver clicks an element it counts as in view where it is, even under the
    /// page's sticky top bar (which then takes the click). A transcript that follows its
    /// newest line may scroll the page again before the click lands; then it is scrolled
    /// back and clicked again, a few times at most.
    pub fn click(&self, selector: &str) {
        let element = self.find(selector);
        let arg = serde_json::to_value(&element).expect("an element is JSON");
        for attempt in 1.. {
            self.execute(
                "arguments[0].scrollIntoView({block: 'center', inline: 'nearest'})",
                vec![arg.clone()],
            );
            let what = format!("clicking {selector}");
            match self.try_run(&what, element.click()) {
                Ok(()) => return,
                Err(error) if attempt < 5 && error.contains("click intercepted") => {}
                Err(error) => panic!("{what}: {error}"),
            }
        }
    }

    /// Chooses the option of value `value` in the select matching `selector`.
    pub fn select(&self, selector: &str, value: &str) {
        let element = self.find(selector);
        self.run(
            &format!("choosing {value} in {selector}"),
            element.select_by_value(value),
        );
    }

    /// The first element matching `selector`, which must be on the page now.
    pub fn find(&self, selector: &str) -> fantoccini::elements::Element {
        self.run(
            &format!("finding {selector}"),
            self.client().find(Locator::Css(selector)),
        )
    }

    /// Removes the cookie `name` (the next request goes without it).
    pub fn delete_cookie(&self, name: &str) {
        self.run(
            &format!("deleting cookie {name}"),
            self.client().delete_cookie(name),
        );
    }

    /// The value of cookie `name`, if the browser has it (HttpOnly ones included).
    pub fn cookie(&self, name: &str) -> Option<String> {
        let cookies = self.run("reading the cookies", self.client().get_all_cookies());
        cookies
            .iter()
            .find(|cookie| cookie.name() == name)
            .map(|cookie| cookie.value().to_string())
    }

    /// Replaces the value of cookie `name` for the current page's site (HttpOnly,
    /// SameSite=Strict, path `/`).
    pub fn set_cookie(&self, name: &str, value: &str) {
        let url = self.run("reading the URL", self.client().current_url());
        let host = url.host_str().expect("a page of a site").to_string();
        // SameSite spelled out: unset, fantoccini sends `None`, which Chrome takes only with
        // Secure. A domain too: Chrome refuses none on a page whose host is an IP address.
        let mut cookie = fantoccini::cookies::Cookie::parse(format!(
            "{name}={value}; Path=/; HttpOnly; SameSite=Strict"
        ))
        .expect("a cookie");
        cookie.set_domain(host);
        self.delete_cookie(name);
        self.run(
            &format!("setting cookie {name}"),
            self.client().add_cookie(cookie),
        );
    }

    /// Saves what the window shows as `target/screenshots/<test>-<page>.png`, prints the path
    /// and returns it.
    pub fn screenshot(&self, page: &str) -> PathBuf {
        let png = self.run(
            &format!("taking a screenshot of {page}"),
            self.client().screenshot(),
        );
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}-{page}.png", self.test));
        std::fs::write(&path, png).unwrap();
        println!("screenshot: {}", path.display());
        path
    }

    /// The chromedriver's pid (the leader of the group that holds the browser).
    pub fn driver_pid(&self) -> u32 {
        self.driver.child.id()
    }

    /// The `HOME` every process of this browser has (see [`processes_in`]).
    pub fn home(&self) -> PathBuf {
        self.driver.home.clone()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the WebDriver session (Chromium quits), bounded so that a stuck browser still
        // lets the driver's group be killed; the driver goes after (field order).
        if let Some(client) = self.client.take() {
            let close =
                async { tokio::time::timeout(Duration::from_secs(10), client.close()).await };
            let _ = self.runtime.block_on(close);
        }
    }
}

/// The live processes whose `HOME` is `home`: a [`Browser`]'s driver and Chromium processes,
/// crash handler included.
pub fn processes_in(home: &Path) -> Vec<i32> {
    crate::process::find_by_env("HOME", &home.to_string_lossy())
        .into_iter()
        .filter(|&pid| crate::process::is_alive(pid as u32, None))
        .collect()
}

/// `text` as a JavaScript string literal.
pub fn js_string(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// An HTTP response as [`request`] read it.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    /// The first header `name` (lower case), if any.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The body as JSON (it must be).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("the body is not JSON ({error}): {self:?}"))
    }
}

/// Sends one HTTP/1.1 request to `address` (`127.0.0.1:PORT`) on a connection of its own and
/// reads one response: its head, then a body of its `Content-Length`, its chunks, or up to the
/// end of the connection (none for a 101, 204 or 304). `headers` are sent as given; a `Host`
/// header is added (the address) unless one is among them, `Connection: close` unless a
/// `Connection` is; a body gets its `Content-Length` (and `Content-Type: application/json`
/// unless given).
pub fn request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    let mut stream = TcpStream::connect(address)
        .unwrap_or_else(|error| panic!("{address} does not answer: {error}"));
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    let has = |name: &str| {
        headers
            .iter()
            .any(|(key, _)| key.eq_ignore_ascii_case(name))
    };
    if !has("host") {
        head.push_str(&format!("Host: {address}\r\n"));
    }
    for (key, value) in headers {
        head.push_str(&format!("{key}: {value}\r\n"));
    }
    if let Some(body) = body {
        if !has("content-type") {
            head.push_str("Content-Type: application/json\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    if !has("connection") {
        head.push_str("Connection: close\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    if let Some(body) = body {
        stream.write_all(body.as_bytes()).unwrap();
    }
    read_response(BufReader::new(stream))
        .unwrap_or_else(|error| panic!("{method} {path}: no HTTP response: {error}"))
}

/// One response from `reader`.
fn read_response(mut reader: impl BufRead) -> Result<Response, String> {
    let mut line = String::new();
    let read_line = |reader: &mut dyn BufRead, line: &mut String| -> Result<(), String> {
        line.clear();
        match reader.read_line(line) {
            Ok(0) => Err("the connection ended".into()),
            Ok(_) => Ok(()),
            Err(error) => Err(error.to_string()),
        }
    };
    read_line(&mut reader, &mut line)?;
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not a status line: {line:?}"))?;
    let mut headers = Vec::new();
    loop {
        read_line(&mut reader, &mut line)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((key, value)) = header.split_once(':') {
            headers.push((key.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value): &(String, String)| value.clone())
    };
    let mut body = Vec::new();
    if matches!(status, 101 | 204 | 304) {
    } else if let Some(length) = find("content-length") {
        let length: usize = length.parse().map_err(|_| format!("length {length:?}"))?;
        body.resize(length, 0);
        reader
            .read_exact(&mut body)
            .map_err(|error| error.to_string())?;
    } else if find("transfer-encoding").is_some_and(|value| value.contains("chunked")) {
        loop {
            read_line(&mut reader, &mut line)?;
            let size = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size, 16).map_err(|_| format!("chunk {line:?}"))?;
            let mut chunk = vec![0; size + 2];
            reader
                .read_exact(&mut chunk)
                .map_err(|error| error.to_string())?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else {
        reader
            .read_to_end(&mut body)
            .map_err(|error| error.to_string())?;
    }
    Ok(Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
