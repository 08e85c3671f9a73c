//! A daemon the benchmarks start on a home of their own, and a blocking JSON-RPC connection
//! to its socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

/// A daemon started with `corral daemon --detach`; stopped (SIGTERM) when dropped.
pub struct Daemon {
    pub home: PathBuf,
    pub pid: i32,
    running: bool,
}

impl Daemon {
    /// `corral daemon --detach` (which returns once the socket serves), with none of this
    /// process's `CORRAL_*` variables; how long the detach took.
    pub fn start(corral: &Path, home: &Path) -> (Daemon, Duration) {
        let mut command = Command::new(corral);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("CORRAL_") {
                command.env_remove(key);
            }
        }
        let started = Instant::now();
        let output = command
            .arg("--home")
            .arg(home)
            .args(["daemon", "--detach"])
            .stdin(Stdio::null())
            .output()
            .expect("corral runs");
        let took = started.elapsed();
        assert!(
            output.status.success(),
            "the daemon did not start: {output:?}"
        );
        let pid = std::fs::read_to_string(home.join("daemon.pid"))
            .expect("HOME/daemon.pid")
            .trim()
            .parse()
            .expect("a pid");
        let daemon = Daemon {
            home: home.to_path_buf(),
            pid,
            running: true,
        };
        (daemon, took)
    }

    pub fn socket(&self) -> PathBuf {
        self.home.join("corral.sock")
    }

    /// SIGTERM, then waits until the process has ended; how long that took.
    pub fn stop(mut self) -> Duration {
        self.running = false;
        terminate(self.pid)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.running {
            terminate(self.pid);
        }
    }
}

/// SIGTERM, and SIGKILL if it has not ended within 60 s. The detached daemon is not our
/// child, so nothing tells us it ended: it is looked at every 2 ms.
fn terminate(pid: i32) -> Duration {
    let started = Instant::now();
    let pid = Pid::from_raw(pid);
    let _ = kill(pid, Signal::SIGTERM);
    while alive(pid) {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = kill(pid, Signal::SIGKILL);
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    started.elapsed()
}

/// Not ended yet (a zombie has ended).
fn alive(pid: Pid) -> bool {
    procfs::process::Process::new(pid.as_raw())
        .and_then(|process| process.stat())
        .is_ok_and(|stat| stat.state != 'Z')
}

/// A blocking connection that writes requests and reads their answers (skipping
/// notifications).
pub struct Conn {
    writer: UnixStream,
    /// Open to a benchmark that reads its own way (a stream of notifications).
    pub reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Conn {
    pub fn open(socket: &Path) -> Conn {
        let stream = UnixStream::connect(socket).expect("the daemon's socket");
        Conn {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::with_capacity(1 << 16, stream),
            next_id: 1,
        }
    }

    /// Writes one request line, without waiting for anything.
    pub fn send(&mut self, request: &Value) {
        let mut line = request.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .expect("the daemon reads");
    }

    /// Calls `method` and returns its result; an error answer fails the benchmark.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut request = json!({ "jsonrpc": "2.0", "id": id, "method": method });
        if !params.is_null() {
            request["params"] = params;
        }
        self.send(&request);
        let mut line = String::new();
        loop {
            line.clear();
            let read = self
                .reader
                .read_line(&mut line)
                .expect("the daemon answers");
            assert!(read > 0, "the daemon closed the connection during {method}");
            let message: Value = serde_json::from_str(&line).expect("a JSON line");
            if message["id"] == json!(id) {
                if let Some(error) = message.get("error") {
                    panic!("{method} failed: {error}");
                }
                return message["result"].clone();
            }
        }
    }
}
