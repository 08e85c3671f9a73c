//! Several daemons on one PostgreSQL store (issue 14), driven as a user drives them: through
//! the built `corral` binary in each home, and each daemon's socket.
//!
//! - [`Cluster`]: one [`TestDatabase`], n [`DaemonHome`]s whose `HOME/config` names it, the
//!   store's settings for quick tests (`store.lease_ms` = [`LEASE_MS`], the fake engine, short
//!   graces), one project `p` on a directory all the daemons see, and the n daemons started
//!   (detached) and answering `status`. Dropped, it stops every daemon (a paused one is woken
//!   first), kills what is left of them (engines, lease guards), prints their logs when the
//!   test failed, and drops the database.
//! - The helpers a test asks the cluster with: commands in a home ([`Cluster::ok`],
//!   [`Cluster::json`], [`Cluster::send`]), the store's rows ([`Cluster::sql`]), a daemon's
//!   node id and pid, the live processes of a run ([`run_processes`]), and a bounded wait
//!   ([`wait_for`]).
//! - [`Feed`]: a socket subscription to every session's events (`events.subscribe` without
//!   `session`), read on a thread of its own so the daemon never finds it lagging behind.
//!
//! Hosts: by default every daemon is on this machine under its real host name. A test that
//! wants distinct hosts asks [`Cluster::start_on_hosts`]: each home's commands, its daemon
//! included, get `CORRAL_HOST` = `host-a`, `host-b`, … (one machine pretending to be several;
//! the project directory is still a directory on each of them).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::daemon::{
    alive, finish, kill, printed_json, processes_of, succeeded, DaemonHome, DEADLINE,
};
use super::store::{quoted, sql, TestDatabase};

/// The lease every cluster's daemons hold, in ms (the store setting `store.lease_ms`): short,
/// so a dead daemon's prompts are rescued within seconds.
pub const LEASE_MS: u64 = 2000;

/// The fake engine every cluster runs its prompts on.
pub const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// The name of the one project a cluster starts with.
pub const PROJECT: &str = "p";

/// n daemons, each with a home of its own, on one PostgreSQL database.
pub struct Cluster {
    /// The homes, in order (home 0 is "A", 1 "B", …). A field before `database`, so the
    /// homes' own drops (which stop what is left of their daemons) run before the database
    /// is dropped.
    homes: Vec<DaemonHome>,
    /// Each home's `CORRAL_HOST`, when the test asked for distinct hosts.
    hosts: Vec<Option<String>>,
    /// Where the projects' directories are: one place every daemon of this machine sees.
    dir: tempfile::TempDir,
    /// The shared store.
    database: TestDatabase,
    /// The proxy the daemons reach the store through, when the test cuts the network.
    proxy: Option<super::tcp_proxy::TcpProxy>,
}

impl Cluster {
    /// `n` daemons on this machine's host name; `None` when PostgreSQL is unavailable (the
    /// test is to skip, the reason printed: see `src/testkit/store.rs`).
    pub fn start(n: usize) -> Option<Cluster> {
        Self::start_with(vec![None; n], false)
    }

    /// `n` daemons that reach the store through a loopback proxy the test can cut
    /// ([`Cluster::proxy`]); the test's own SQL goes straight to the server.
    pub fn start_through_proxy(n: usize) -> Option<Cluster> {
        Self::start_with(vec![None; n], true)
    }

    /// The proxy between the daemons and the store ([`Cluster::start_through_proxy`]).
    pub fn proxy(&self) -> &super::tcp_proxy::TcpProxy {
        self.proxy
            .as_ref()
            .expect("a cluster started through a proxy")
    }

    /// `n` daemons, each on a host of its own name (`host-a`, `host-b`, …).
    pub fn start_on_hosts(n: usize) -> Option<Cluster> {
        let hosts = (0..n)
            .map(|index| Some(format!("host-{}", (b'a' + index as u8) as char)))
            .collect();
        Self::start_with(hosts, false)
    }

    fn start_with(hosts: Vec<Option<String>>, through_proxy: bool) -> Option<Cluster> {
        assert!(!hosts.is_empty() && hosts.len() <= 26, "1 to 26 daemons");
        let database = TestDatabase::create()?;
        // postgres://USER:PW@HOST:PORT/DB: the daemons' URL names the proxy's port instead.
        let (proxy, url) = if through_proxy {
            let (head, rest) = database.url.rsplit_once('@').expect("a URL with a user");
            let (address, path) = rest.split_once('/').expect("a URL with a database");
            let upstream: std::net::SocketAddr = address.parse().expect("a loopback address");
            let proxy = super::tcp_proxy::TcpProxy::start(upstream);
            let url = format!("{head}@127.0.0.1:{}/{path}", proxy.port());
            (Some(proxy), url)
        } else {
            (None, database.url.clone())
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(dir.path().join("work")).expect("the project directory");
        // Under the PostgreSQL pass each home is given a database of its own first: `config
        // set store.url` is the deliberate move to the shared one (it drops the binding).
        let homes = hosts.iter().map(|_| DaemonHome::new()).collect();
        let cluster = Cluster {
            homes,
            hosts,
            dir,
            database,
            proxy,
        };
        for index in 0..cluster.len() {
            cluster.ok(index, &["config", "set", "store.url", &url]);
        }
        // The store's settings, through home 0. `config set` asks a daemon (the first one
        // started here and migrated the store); it is stopped again so that every daemon of
        // the cluster starts with the short lease already in the store.
        let work = cluster.work();
        let work = work.to_str().expect("temporary paths are UTF-8");
        for (name, value) in [
            ("store.lease_ms", LEASE_MS.to_string().as_str()),
            ("engines.fake.path", FAKE),
            ("daemon.shutdown_grace_ms", "200"),
            ("cancel.grace_ms", "200"),
        ] {
            cluster.ok(0, &["config", "set", name, value]);
        }
        cluster.ok(0, &["project", "add", PROJECT, work, "--engine", "fake"]);
        cluster.homes[0].stop_daemon();
        for index in 0..cluster.len() {
            cluster.start_daemon(index);
        }
        Some(cluster)
    }

    /// Starts home `index`'s daemon (detached) and waits until it answers `status`.
    pub fn start_daemon(&self, index: usize) {
        let out = self.ok(index, &["daemon", "--detach"]);
        assert!(out.contains("corral daemon started"), "{out}");
        let pid = self
            .daemon_pid(index)
            .expect("a started daemon wrote its pid");
        let status = self.status(index);
        assert_eq!(
            status["daemon"]["pid"],
            json!(pid),
            "home {index} answers as its own daemon: {status}"
        );
    }

    /// How many daemons (homes) there are.
    pub fn len(&self) -> usize {
        self.homes.len()
    }

    pub fn home(&self, index: usize) -> &DaemonHome {
        &self.homes[index]
    }

    /// The shared store's URL (password included).
    pub fn url(&self) -> &str {
        &self.database.url
    }

    /// The directory of project `p`.
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The directory the projects' directories are made in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `corral ARGS…` in home `index` (stdin closed; its `CORRAL_HOST` when it has one).
    pub fn command(&self, index: usize, args: &[&str]) -> Command {
        let mut command = self.homes[index].corral(args);
        if let Some(host) = &self.hosts[index] {
            command.env("CORRAL_HOST", host);
        }
        command
    }

    /// Runs `corral ARGS…` in home `index` to its end (bounded): its output.
    pub fn run(&self, index: usize, args: &[&str]) -> Output {
        let child = self
            .command(index, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("corral starts");
        finish(child)
    }

    /// Runs a command that must succeed in home `index`: its stdout.
    pub fn ok(&self, index: usize, args: &[&str]) -> String {
        succeeded(args, &self.run(index, args))
    }

    /// Runs a command that must succeed and print JSON in home `index`.
    pub fn json(&self, index: usize, args: &[&str]) -> Value {
        printed_json(args, &self.ok(index, args))
    }

    /// `corral status --json` through home `index`'s daemon.
    pub fn status(&self, index: usize) -> Value {
        self.json(index, &["status", "--json"])
    }

    /// A project `name` in a directory of its own every daemon sees (through home 0). Sessions
    /// of one project run one at a time across the daemons (shared isolation): work meant to
    /// spread over the daemons is spread over projects.
    pub fn add_project(&self, name: &str) {
        let dir = self.dir().join(name);
        std::fs::create_dir_all(&dir).expect("a project directory");
        let dir = dir.to_str().expect("temporary paths are UTF-8");
        self.ok(0, &["project", "add", name, dir, "--engine", "fake"]);
    }

    /// A new session of project `p` titled `title` (through home 0): its id.
    pub fn session(&self, title: &str) -> String {
        self.session_of(PROJECT, title)
    }

    /// A new session of `project` titled `title` (through home 0): its id.
    pub fn session_of(&self, project: &str, title: &str) -> String {
        let args = ["session", "new", project, "--title", title, "--json"];
        let session = self.json(0, &args);
        session["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{args:?} printed no session id: {session}"))
            .to_string()
    }

    /// `corral send SESSION TEXT --json` through home `index` (a plain send, back at once):
    /// the prompt's id.
    pub fn send(&self, index: usize, session: &str, text: &str) -> String {
        let args = ["send", session, text, "--json"];
        let prompt = self.json(index, &args);
        prompt["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{args:?} printed no prompt id: {prompt}"))
            .to_string()
    }

    /// The rows of `query` on the shared store, each column as JSON.
    pub fn sql(&self, query: &str) -> Vec<Vec<Value>> {
        sql(&self.database.url, query)
    }

    /// The one value of `query`'s one row.
    pub fn value(&self, query: &str) -> Value {
        let rows = self.sql(query);
        assert!(
            rows.len() == 1 && rows[0].len() == 1,
            "{query:?}: one value expected, got {rows:?}"
        );
        rows[0][0].clone()
    }

    /// The one integer of `query`'s one row.
    pub fn count(&self, query: &str) -> i64 {
        let value = self.value(query);
        value
            .as_i64()
            .unwrap_or_else(|| panic!("{query:?}: an integer expected, got {value}"))
    }

    /// A prompt's status in the store.
    pub fn prompt_status(&self, prompt: &str) -> String {
        let query = format!("SELECT status FROM prompts WHERE id = {}", quoted(prompt));
        self.value(&query).as_str().unwrap_or("").to_string()
    }

    /// Home `index`'s node id (`HOME/node.id`, made at its daemon's first start).
    pub fn node_id(&self, index: usize) -> String {
        let path = self.homes[index].path().join("node.id");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
            .trim()
            .to_string()
    }

    /// Which home's daemon `node` is.
    pub fn home_of_node(&self, node: &str) -> Option<usize> {
        (0..self.len()).find(|&index| self.node_id(index) == node)
    }

    /// Home `index`'s daemon pid (`HOME/daemon.pid`).
    pub fn daemon_pid(&self, index: usize) -> Option<i32> {
        self.homes[index].daemon_pid()
    }

    /// Every daemon's log (`HOME/daemon.log`), headed by its home, for a failure's message.
    pub fn logs(&self) -> String {
        let mut logs = String::new();
        for (index, home) in self.homes.iter().enumerate() {
            let path = home.path().join("daemon.log");
            let text = std::fs::read_to_string(&path).unwrap_or_else(|error| format!("({error})"));
            logs.push_str(&format!(
                "==== home {index} ({}) daemon.log ====\n{text}\n",
                home.path().display()
            ));
        }
        logs
    }

    /// Waits until `condition` holds, at most `limit`; else fails the test with `what` (the
    /// daemons' logs are printed by the drop).
    pub fn wait_for(&self, what: &str, limit: Duration, condition: impl FnMut() -> bool) {
        wait_for(what, limit, condition);
    }

    /// Subscribes to every session's events through home `index`'s socket.
    pub fn feed(&self, index: usize) -> Feed {
        Feed::subscribe(self.homes[index].path())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        // Every daemon at once (each home's drop would wait for its own in turn): woken first
        // in case a test paused it, then asked to stop, then killed if it does not.
        let pids: Vec<i32> = self
            .homes
            .iter()
            .filter_map(DaemonHome::daemon_pid)
            .filter(|&pid| alive(pid))
            .collect();
        for &pid in &pids {
            kill(pid, libc::SIGCONT);
            kill(pid, libc::SIGTERM);
        }
        let until = Instant::now() + Duration::from_secs(10);
        while pids.iter().any(|&pid| alive(pid)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &pid in &pids {
            if alive(pid) {
                kill(pid, libc::SIGKILL);
            }
        }
        for home in &self.homes {
            for pid in lease_guards_of(home.path())
                .into_iter()
                .chain(processes_of(home.path()))
            {
                kill(pid, libc::SIGKILL);
            }
            // A daemon killed by the test left its pid file: its number may be another
            // process's by now, which the home's own drop must not signal.
            if home.daemon_pid().is_some_and(|pid| !alive(pid)) {
                let _ = std::fs::remove_file(home.path().join("daemon.pid"));
            }
        }
    }
}

/// Waits until `condition` holds, checking every 20 ms, at most `limit`: for what no
/// notification tells a test about (rows another process writes, a process's exit).
pub fn wait_for(what: &str, limit: Duration, mut condition: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < until,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The live processes of run `run_id`: every process whose environment carries
/// `CORRAL_RUN_ID=<run_id>` (the engine, and whatever it started), zombies excluded.
pub fn run_processes(run_id: &str) -> Vec<i32> {
    corral::process::find_by_env("CORRAL_RUN_ID", run_id)
        .into_iter()
        .filter(|&pid| alive(pid))
        .collect()
}

/// The live `corral __lease-guard` processes of `home`: by their command line, and `home` in
/// their environment or their arguments (a guard may have been given a clean environment).
pub fn lease_guards_of(home: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let home_text = home.to_string_lossy().into_owned();
    let in_env = format!("CORRAL_HOME={home_text}");
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<String> = cmdline
                .split(|&byte| byte == 0)
                .map(|arg| String::from_utf8_lossy(arg).into_owned())
                .collect();
            if !args.iter().any(|arg| arg == "__lease-guard") {
                return false;
            }
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            environ
                .split(|&byte| byte == 0)
                .any(|pair| pair == in_env.as_bytes())
                || args.iter().any(|arg| arg.contains(&home_text))
        })
        .filter(|&pid| alive(pid))
        .collect()
}

/// One socket connection subscribed to every session's events, read on a thread of its own:
/// each `events.event`'s event arrives on [`Feed::next`]. An `events.lagged` notice is met as
/// a client should meet it: a new subscription from the number it names (so a gap would
/// still show). Ends when the daemon hangs up or the feed is dropped.
pub struct Feed {
    events: mpsc::Receiver<Value>,
}

impl Feed {
    /// Connects to the daemon of `home`, does the handshake and subscribes from the start.
    pub fn subscribe(home: &Path) -> Feed {
        let stream = UnixStream::connect(home.join("corral.sock")).expect("the daemon listens");
        // The handshake is bounded; the stream after it is not (a quiet feed is no failure:
        // the test bounds its own waits in `next`).
        stream
            .set_read_timeout(Some(DEADLINE))
            .expect("a read timeout");
        let mut writer = stream.try_clone().expect("a socket clone");
        let mut reader = BufReader::new(stream);
        let mut next_id = 1u64;
        let mut call = |writer: &mut UnixStream,
                        reader: &mut BufReader<UnixStream>,
                        method: &str,
                        params: Value|
         -> Value {
            let id = next_id;
            next_id += 1;
            let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
            writeln!(writer, "{request}").expect("the request is written");
            loop {
                let line = read_json(reader).expect("the daemon answers");
                if line.get("id") == Some(&json!(id)) {
                    assert!(line.get("error").is_none(), "{method}: {line}");
                    return line["result"].clone();
                }
            }
        };
        let params = json!({ "protocol": 1, "client": "multi_daemon" });
        call(&mut writer, &mut reader, "initialize", params);
        call(&mut writer, &mut reader, "events.subscribe", json!({}));
        reader
            .get_ref()
            .set_read_timeout(None)
            .expect("no read timeout");
        let (sender, events) = mpsc::channel();
        std::thread::spawn(move || {
            let mut resubscribe_id = 1_000_000u64;
            while let Some(line) = read_json(&mut reader) {
                // Whether the line was handled and the feed goes on.
                let going = match line["method"].as_str() {
                    Some("events.event") => sender.send(line["params"]["event"].clone()).is_ok(),
                    Some("events.lagged") => {
                        let after = line["params"]["resume_after"].clone();
                        resubscribe_id += 1;
                        let request = json!({ "jsonrpc": "2.0", "id": resubscribe_id,
                            "method": "events.subscribe", "params": { "after": after } });
                        writeln!(writer, "{request}").is_ok()
                    }
                    // Answers (the resubscriptions') and other notifications.
                    _ => true,
                };
                if !going {
                    return;
                }
            }
        });
        Feed { events }
    }

    /// The next event, waiting at most `limit`; `None` when none came (or the feed ended).
    pub fn next(&self, limit: Duration) -> Option<Value> {
        self.events.recv_timeout(limit).ok()
    }
}

/// One JSON line from the daemon; `None` when it hung up (or the line is not JSON).
fn read_json(reader: &mut BufReader<UnixStream>) -> Option<Value> {
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => serde_json::from_str(&line).ok(),
    }
}
