//! An in-process fuzzer of the daemon's socket protocol (issue 10, item 11); `examples/fuzz_bench.rs`
//! runs it as long as asked, `tests/it/fuzz.rs` for a few seconds.
//!
//! One process starts the supervisor (`Corral::start`) on a temporary home with the fake
//! engine, serves connections with the daemon's own `server::serve` over
//! `UnixStream::pair()`, and writes generated and mutated input on them: random bytes,
//! truncated and garbled JSON, every method of `protocol::METHODS` with mutated params (wrong
//! types, missing, extra, positional, scalar, huge strings, extreme numbers, deep nesting),
//! ids of every JSON type, requests before `initialize`, batches, lines at and past the 1 MiB
//! limit. Every input takes the whole path a client's line takes: the line reader, the
//! JSON-RPC decoding, the handshake, the method dispatch, the writer.
//!
//! A connection carries 1 to ~380 inputs; then its write side is closed, so the daemon answers
//! everything and closes it. Checked on every connection:
//! - every line written back is JSON-RPC 2.0: an object with `"jsonrpc":"2.0"`, an `id` that is
//!   a string, a number or null, exactly one of `result` and `error`, an error with an integer
//!   `code` and a string `message` (or a notification: `method` and object `params`);
//! - every line read gets exactly one answer (a notification, no `id`, none), with its id as
//!   it was sent (an integer id as the same integer, not a float);
//! - a request before a successful `initialize` is refused with -32008, and one after it is not;
//!   an unknown method is -32601; a line that is not JSON is -32700, one that is not a request
//!   -32600;
//! - a param of the wrong JSON type, a missing required param, positional (array) or scalar
//!   params are refused, not silently read as absent (issue 10, item 4);
//! - error codes are the documented ones, `-32603` (the store failed) never comes from bad
//!   input, and error messages are one line and never longer than 64 KiB;
//! - nothing panics (a panic hook counts every panic of the process, on any thread);
//! - a fresh connection still gets `initialize`, `status` and `session.list` answered, every
//!   256 connections and at the end.
//!
//! The inputs come from a seeded PRNG (splitmix64): `--seed N` replays a run's inputs (the ids
//! and times in the store differ, the inputs do not; with several threads, thread i > 0 runs
//! the printed seed of its own). The first failure of each kind is minimized (the lines of its
//! connection, then the JSON members or bytes of what is left) and printed with its seed.
//!
//! What stays cheap, so that the decoder and the dispatch get the time: inputs that would make
//! the supervisor work (a `project.add` with an existing directory, a `session.new` in a real
//! project, a `prompt.send` to a real session, a `session.rename`) name a real target only
//! within a small budget per thread; the prompts it does send answer at once on the fake
//! engine. Everything else names things that do not exist, or reads.
//!
//! Run: `cargo build --release && cargo build --release --examples &&
//! target/release/examples/fuzz_bench [INPUTS [SECONDS]] [--seed N] [--threads N]
//! [--store-url postgres://…]` (defaults: 10,000,000 inputs, no time limit, one thread per
//! core, the SQLite file; a store URL, an empty database or a store, needs `--threads 1`). It stops at whichever limit comes
//! first, prints inputs, inputs/s, panics and invalid answers, every finding, and exits 1 if
//! there is any; `--verbose` also prints the first input and answer of every variant of a
//! finding. `fuzz_bench --replay FILE` writes FILE's lines on one connection (after the same
//! setup) and prints the answers and what the checks say of them. `docs/benchmarks.md` has the
//! figures.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use crate::daemon::server::{self, DaemonContext};
use crate::protocol::{MAX_LINE, METHODS};
use crate::store::location::HomeConfig;
use crate::{Corral, CorralOptions};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// `METHODS`, and one more for the methods that are not.
const METHOD_SLOTS: usize = 64;
const _: () = assert!(METHODS.len() < METHOD_SLOTS);

/// How long one connection may take to be answered and closed.
const BATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The same, while minimizing.
const REPRODUCE_TIMEOUT: Duration = Duration::from_secs(3);
/// Connections between two liveness probes.
const PROBE_EVERY: u64 = 256;
/// An error message longer than this echoes its input.
const HUGE_MESSAGE: usize = 64 * 1024;
/// `docs/protocol.md`'s table of error codes.
const DOCUMENTED_CODES: &[i64] = &[
    -32700, -32600, -32601, -32602, -32603, -32004, -32005, -32006, -32007, -32008, -32009, -32011,
];

/// `--replay FILE`: FILE's bytes on one connection (a minimized input, say), the answers
/// printed as they came and checked as the fuzzer checks them.
pub fn replay(path: &str) {
    install_hooks();
    let input = std::fs::read(path).expect("the file to replay");
    let fake = super::built("corral-fake-engine").ok();
    let home = tempfile::tempdir().expect("a temporary home");
    let home_path = home.path().to_path_buf();
    actix::System::new().block_on(async move {
        let corral = Corral::start(CorralOptions::new(&home_path))
            .await
            .expect("the supervisor starts");
        let context = Rc::new(DaemonContext::new(corral.clone(), home_path.clone()));
        setup(&context, &home_path, fake.as_deref()).await;
        let unterminated = !input.ends_with(b"\n");
        let text = input.strip_suffix(b"\n").unwrap_or(&input);
        let batch = Batch {
            chunks: text
                .split(|&b| b == b'\n')
                .map(|l| Chunk::plain(l.to_vec()))
                .collect(),
            unterminated,
        };
        let (answers, complete) = exchange(&context, batch.wire(), BATCH_TIMEOUT).await;
        for line in answers.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            println!("<-- {}", show(line));
        }
        if !complete {
            println!("(the connection did not end within {BATCH_TIMEOUT:?})");
        }
        for found in check(&batch, &answers, complete).findings {
            println!(
                "finding: {} [{}]\n  {}",
                found.signature,
                found.variant,
                found.detail.replace('\n', "\n  ")
            );
        }
        corral.shutdown(Duration::from_secs(2)).await;
    });
}

// ---------------------------------------------------------------------------------------------
// Options and results.

/// One fuzzing run.
pub struct Options {
    pub seed: u64,
    /// Stop after about this many inputs (0: no limit).
    pub inputs: u64,
    /// Stop after this long (0: no limit).
    pub seconds: f64,
    pub threads: usize,
    /// `engines.fake.path`; without it every prompt is refused.
    pub fake_engine: Option<PathBuf>,
    /// No progress lines and no finding printed as it is found.
    pub quiet: bool,
    /// Reproductions a minimization may try.
    pub minimize_budget: u32,
    /// Findings whose signature starts with one of these are counted, not minimized, and
    /// reported as known.
    pub known: Vec<String>,
    /// The home's store: this PostgreSQL database (an empty one, or a store; written to the
    /// home's `config` as `store.url`) instead of the SQLite file. One thread only: two
    /// supervisors on one database would be two daemons sharing a store.
    pub store_url: Option<String>,
}

/// One kind of failure.
#[derive(Debug, Clone)]
pub struct Finding {
    pub signature: String,
    pub count: u64,
    /// Which methods, params or codes it was seen with, and the first input and answer of
    /// each (cut short).
    pub variants: BTreeMap<String, String>,
    /// Where it was first seen: the thread's seed and the connection's number.
    pub seed: u64,
    pub connection: u64,
    pub detail: String,
    /// The smallest connection found that shows it, one input a line (empty if not minimized).
    pub minimized: Vec<Vec<u8>>,
    pub known: bool,
    /// Whether the answer line breaks JSON-RPC (counted in `invalid_answers`).
    pub invalid: bool,
}

#[derive(Debug, Default)]
pub struct Summary {
    pub seeds: Vec<u64>,
    pub inputs: u64,
    pub lines: u64,
    /// Lines that were JSON-RPC requests (dispatched to a method or refused by the handshake).
    pub requests: u64,
    /// Lines of JSON past serde's limits (nesting, f64, surrogates): answers not checked.
    pub unknown: u64,
    /// Requests after a successful `initialize`, per method (`METHODS`, then unknown ones).
    pub per_method: Vec<u64>,
    pub answers: u64,
    /// `events.event` / `events.lagged` lines of subscriptions.
    pub notifications: u64,
    pub connections: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub probes: u64,
    pub panics: u64,
    pub panic_messages: Vec<String>,
    pub invalid_answers: u64,
    pub findings: BTreeMap<String, Finding>,
    pub elapsed: Duration,
    pub minimizing: Duration,
    /// The report shows the first example of every variant.
    pub verbose: bool,
}

impl Summary {
    fn merge(&mut self, other: Summary) {
        self.inputs += other.inputs;
        self.lines += other.lines;
        self.requests += other.requests;
        self.unknown += other.unknown;
        if self.per_method.len() < other.per_method.len() {
            self.per_method.resize(other.per_method.len(), 0);
        }
        for (mine, theirs) in self.per_method.iter_mut().zip(&other.per_method) {
            *mine += theirs;
        }
        self.answers += other.answers;
        self.notifications += other.notifications;
        self.connections += other.connections;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.probes += other.probes;
        self.invalid_answers += other.invalid_answers;
        self.minimizing += other.minimizing;
        for (signature, finding) in other.findings {
            match self.findings.get_mut(&signature) {
                Some(mine) => {
                    mine.count += finding.count;
                    for (variant, example) in finding.variants {
                        if mine.variants.len() < 64 {
                            mine.variants.entry(variant).or_insert(example);
                        }
                    }
                }
                None => {
                    self.findings.insert(signature, finding);
                }
            }
        }
    }

    /// The findings that are not known.
    pub fn unexpected(&self) -> Vec<&Finding> {
        self.findings.values().filter(|f| !f.known).collect()
    }

    /// No panic, no invalid answer, nothing unexpected.
    pub fn clean(&self) -> bool {
        self.panics == 0 && self.unexpected().is_empty()
    }

    pub fn inputs_per_second(&self) -> f64 {
        let fuzzing = self.elapsed.saturating_sub(self.minimizing).as_secs_f64();
        self.inputs as f64 / fuzzing.max(1e-9)
    }

    pub fn report(&self) -> String {
        let mut out = String::new();
        let seeds: Vec<String> = self.seeds.iter().map(|s| format!("{s:#018x}")).collect();
        out += &format!(
            "inputs {} in {:.1} s ({:.1} s of it minimizing): {} inputs/s\n",
            thousands(self.inputs),
            self.elapsed.as_secs_f64(),
            self.minimizing.as_secs_f64(),
            thousands(self.inputs_per_second() as u64)
        );
        out += &format!(
            "  lines {}, requests {}, answers {}, notifications {}, connections {}, {} MiB in, {} MiB out, liveness probes {}\n",
            thousands(self.lines),
            thousands(self.requests),
            thousands(self.answers),
            thousands(self.notifications),
            thousands(self.connections),
            thousands(self.bytes_in >> 20),
            thousands(self.bytes_out >> 20),
            thousands(self.probes),
        );
        if !self.per_method.is_empty() {
            let mut counts: Vec<String> = METHODS
                .iter()
                .zip(&self.per_method)
                .map(|(method, n)| format!("{method} {}", thousands(*n)))
                .collect();
            counts.push(format!(
                "unknown methods {}",
                thousands(self.per_method[METHOD_SLOTS - 1])
            ));
            out += &format!(
                "  requests after initialize, per method: {}\n  lines of JSON past serde's limits (answer not checked): {}\n",
                counts.join(", "),
                thousands(self.unknown)
            );
        }
        let unexpected = self.unexpected().len();
        out += &format!(
            "  panics {}, invalid answers {}, findings {} ({} known)\n",
            self.panics,
            thousands(self.invalid_answers),
            self.findings.len(),
            self.findings.len() - unexpected,
        );
        out += &format!("  seeds (thread 0, 1, …): {}\n", seeds.join(" "));
        for message in &self.panic_messages {
            out += &format!("  panic: {message}\n");
        }
        for finding in self.findings.values() {
            out += &format!(
                "\n[{}{}] {}{}\n",
                thousands(finding.count),
                if finding.invalid {
                    " invalid answers"
                } else {
                    ""
                },
                finding.signature,
                if finding.known { " (known)" } else { "" }
            );
            if finding.variants.len() > 1 || finding.variants.keys().any(|v| !v.is_empty()) {
                let variants: Vec<&str> = finding.variants.keys().map(String::as_str).collect();
                out += &format!("    seen with: {}\n", cut(&variants.join(", "), 600));
            }
            out += &format!(
                "    first: seed {:#018x}, connection {}\n",
                finding.seed, finding.connection
            );
            for line in finding.detail.lines() {
                out += &format!("    {line}\n");
            }
            if self.verbose {
                for (variant, example) in &finding.variants {
                    out += &format!("    - {variant}: {example}\n");
                }
            }
            if !finding.minimized.is_empty() {
                out +=
                    "    minimized input (one line each; ⟨0a⟩ is a byte in hex, ⟨x×N⟩ N of it):\n";
                for line in &finding.minimized {
                    out += &format!("      > {}\n", show(line));
                }
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// Panics: counted on every thread of the process.

static HOOK: Once = Once::new();
static PANICS: AtomicU64 = AtomicU64::new(0);
static PANIC_MESSAGES: Mutex<Vec<String>> = Mutex::new(Vec::new());

thread_local! {
    /// Set on the fuzzing threads: their panics are counted, not printed one by one.
    static FUZZING: Cell<bool> = const { Cell::new(false) };
}

fn install_hooks() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            let payload = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            if let Ok(mut messages) = PANIC_MESSAGES.lock() {
                if messages.len() < 32 {
                    let thread = std::thread::current();
                    messages.push(format!(
                        "{} (thread {}, at {location})",
                        cut(&payload, 300),
                        thread.name().unwrap_or("?")
                    ));
                }
            }
            if !FUZZING.with(Cell::get) {
                previous(info);
            }
        }));
        // `shutdown` is answered by a SIGTERM to our own process: it must not end the run. A
        // handler, not SIG_IGN, which the engine children would inherit through exec.
        extern "C" fn ignore(_: libc::c_int) {}
        // SAFETY: installs a handler that does nothing, so is async-signal-safe.
        unsafe {
            libc::signal(
                libc::SIGTERM,
                ignore as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    });
}

fn panic_messages_since(count: usize) -> Vec<String> {
    PANIC_MESSAGES
        .lock()
        .map(|m| m.iter().skip(count).cloned().collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The run.

/// Runs the fuzzer as `options` say; what it found.
pub fn run(options: &Options) -> Summary {
    install_hooks();
    let panics_before = PANICS.load(Ordering::SeqCst);
    let messages_before = PANIC_MESSAGES.lock().map(|m| m.len()).unwrap_or(0);
    let start = Instant::now();
    let deadline =
        (options.seconds > 0.0).then(|| start + Duration::from_secs_f64(options.seconds));
    let threads = options.threads.max(1) as u64;
    assert!(
        options.store_url.is_none() || threads == 1,
        "a store URL is for one thread (--threads 1)"
    );
    let seeds: Vec<u64> = (0..threads)
        .map(|i| {
            if i == 0 {
                options.seed
            } else {
                Rng(options.seed ^ i.wrapping_mul(0xA076_1D64_78BD_642F)).next_u64()
            }
        })
        .collect();
    let workers: Vec<_> = seeds
        .iter()
        .enumerate()
        .map(|(index, &seed)| {
            let quota = if options.inputs == 0 {
                u64::MAX
            } else {
                options.inputs / threads + u64::from((index as u64) < options.inputs % threads)
            };
            let worker = Worker {
                seed,
                quota,
                deadline,
                fake: options.fake_engine.clone(),
                quiet: options.quiet,
                minimize_budget: options.minimize_budget,
                known: options.known.clone(),
                store_url: options.store_url.clone(),
            };
            std::thread::Builder::new()
                .name(format!("fuzz-{index}"))
                .spawn(move || worker.run())
                .expect("a fuzzing thread")
        })
        .collect();
    let mut summary = Summary {
        seeds: seeds.clone(),
        ..Default::default()
    };
    for (index, worker) in workers.into_iter().enumerate() {
        match worker.join() {
            Ok(part) => summary.merge(part),
            Err(_) => {
                let signature = "the fuzz driver itself panicked".to_string();
                summary.findings.insert(
                    signature.clone(),
                    Finding {
                        signature,
                        count: 1,
                        variants: BTreeMap::new(),
                        seed: seeds[index],
                        connection: 0,
                        detail: "see the panic messages".into(),
                        minimized: Vec::new(),
                        known: false,
                        invalid: false,
                    },
                );
            }
        }
    }
    summary.elapsed = start.elapsed();
    summary.panics = PANICS.load(Ordering::SeqCst) - panics_before;
    summary.panic_messages = panic_messages_since(messages_before);
    summary
}

/// A seed from the clock and the pid.
pub fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Rng(nanos ^ (u64::from(std::process::id()) << 32)).next_u64()
}

pub fn parse_seed(text: &str) -> u64 {
    let text = text.trim();
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).expect("a hex seed"),
        None => text.parse().expect("a seed"),
    }
}

/// One thread: a supervisor on its own home, fuzzed through its own connections.
struct Worker {
    seed: u64,
    quota: u64,
    deadline: Option<Instant>,
    fake: Option<PathBuf>,
    quiet: bool,
    minimize_budget: u32,
    known: Vec<String>,
    store_url: Option<String>,
}

impl Worker {
    fn run(self) -> Summary {
        FUZZING.with(|f| f.set(true));
        let home = tempfile::tempdir().expect("a temporary home");
        let home_path = home.path().to_path_buf();
        if let Some(url) = &self.store_url {
            // As `corral config set store.url` writes it (0600: the URL carries a password).
            let mut config = HomeConfig::load(&home_path).expect("the home's config");
            config.set("store.url", url).expect("a store URL");
            config.save(&home_path).expect("the home's config");
        }
        let summary = actix::System::new().block_on(async move {
            let corral = Corral::start(CorralOptions::new(&home_path))
                .await
                .expect("the supervisor starts");
            let context = Rc::new(DaemonContext::new(corral.clone(), home_path.clone()));
            let pools = setup(&context, &home_path, self.fake.as_deref()).await;
            let mut fuzzer = Fuzzer {
                generator: Generator::new(self.seed, pools),
                context,
                summary: Summary::default(),
                seed: self.seed,
                connection: 0,
                quiet: self.quiet,
                minimize_budget: self.minimize_budget,
                known: self.known,
                fake: self.fake.clone(),
            };
            fuzzer.run(self.quota, self.deadline).await;
            corral.shutdown(Duration::from_secs(2)).await;
            fuzzer.summary
        });
        drop(home);
        summary
    }
}

/// What the fuzzer names when it names something real.
struct Pools {
    project_ids: Vec<String>,
    project_names: Vec<String>,
    /// The session `prompt.send` sends to (within its budget).
    runner: String,
    /// Other sessions: one with two finished prompts, one archived.
    session_ids: Vec<String>,
    session_titles: Vec<String>,
    prompt_ids: Vec<String>,
    project_dir: String,
}

/// A home with two projects, three sessions (one archived) and, with the fake engine, two
/// finished prompts: made through the protocol itself.
async fn setup(context: &Rc<DaemonContext>, home: &Path, fake: Option<&Path>) -> Pools {
    let main_dir = home.join("project-main");
    let second_dir = home.join("project-second");
    std::fs::create_dir_all(&main_dir).unwrap();
    std::fs::create_dir_all(&second_dir).unwrap();
    let mut requests = vec![
        (
            "project.add",
            serde_json::json!({ "name": "fz-main", "path": main_dir, "engine": "fake" }),
        ),
        (
            "project.add",
            serde_json::json!({ "name": "fz-second", "path": second_dir, "engine": "fake" }),
        ),
    ];
    if let Some(fake) = fake {
        requests.insert(
            0,
            (
                "settings.set",
                serde_json::json!({ "name": "engines.fake.path", "value": fake }),
            ),
        );
    }
    let projects = calls(context, &requests).await;
    let project_ids: Vec<String> = projects
        .iter()
        .filter_map(|p| p["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(project_ids.len(), 2, "setup: {projects:?}");
    let titles = ["fz-runner", "fz-other", "fz-archived"];
    let sessions = calls(
        context,
        &titles
            .iter()
            .map(|title| {
                (
                    "session.new",
                    serde_json::json!({ "project": "fz-main", "title": title, "engine": "fake" }),
                )
            })
            .collect::<Vec<_>>(),
    )
    .await;
    let session_ids: Vec<String> = sessions
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(session_ids.len(), 3, "setup: {sessions:?}");
    calls(
        context,
        &[(
            "session.archive",
            serde_json::json!({ "session": session_ids[2] }),
        )],
    )
    .await;
    let mut prompt_ids = Vec::new();
    if fake.is_some() {
        let sent = calls(
            context,
            &[
                (
                    "prompt.send",
                    serde_json::json!({ "session": session_ids[1], "text": "@fake answer=one\nfirst" }),
                ),
                (
                    "prompt.send",
                    serde_json::json!({ "session": session_ids[1], "text": "@fake answer=two\nsecond" }),
                ),
            ],
        )
        .await;
        prompt_ids = sent
            .iter()
            .filter_map(|p| p["id"].as_str().map(str::to_string))
            .collect();
        let waits: Vec<_> = prompt_ids
            .iter()
            .map(|id| ("prompt.wait", serde_json::json!({ "prompt": id })))
            .collect();
        let done = calls(context, &waits).await;
        assert!(
            done.iter().all(|p| p["status"] == "done"),
            "setup prompts: {done:?}"
        );
    }
    Pools {
        project_names: vec!["fz-main".into(), "fz-second".into()],
        project_ids,
        runner: session_ids[0].clone(),
        session_titles: titles[1..].iter().map(|t| t.to_string()).collect(),
        session_ids: session_ids[1..].to_vec(),
        prompt_ids,
        project_dir: main_dir.to_string_lossy().into_owned(),
    }
}

/// Calls `requests` on one initialized connection; each one's result (or its error object).
async fn calls(context: &Rc<DaemonContext>, requests: &[(&str, Value)]) -> Vec<Value> {
    let mut input = String::from(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocol":1,"client":"fuzz_bench"}}"#,
    );
    input.push('\n');
    for (index, (method, params)) in requests.iter().enumerate() {
        let request = serde_json::json!({
            "jsonrpc": "2.0", "id": index + 1, "method": method, "params": params
        });
        input += &request.to_string();
        input.push('\n');
    }
    let (answers, complete) = exchange(context, input.into_bytes(), BATCH_TIMEOUT).await;
    assert!(complete, "setup: the daemon did not answer");
    let mut by_id: HashMap<u64, Value> = HashMap::new();
    for line in answers.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let mut answer: Value = serde_json::from_slice(line).expect("setup: a JSON answer");
        if let Some(id) = answer["id"].as_u64() {
            let value = match answer.get_mut("result") {
                Some(result) => result.take(),
                None => answer["error"].take(),
            };
            by_id.insert(id, value);
        }
    }
    (1..=requests.len() as u64)
        .map(|id| by_id.remove(&id).unwrap_or(Value::Null))
        .collect()
}

/// Writes `input` on a new connection served by `server::serve`, closes the write side, and
/// reads everything until the daemon closes; whether that happened within `limit`.
async fn exchange(context: &Rc<DaemonContext>, input: Vec<u8>, limit: Duration) -> (Vec<u8>, bool) {
    let (client, daemon_side) = UnixStream::pair().expect("a socket pair");
    actix::spawn(server::serve(daemon_side, context.clone()));
    let (mut read, mut write) = client.into_split();
    let writing = async move {
        let _ = write.write_all(&input).await;
        let _ = write.shutdown().await;
    };
    let mut answers = Vec::new();
    let complete = tokio::time::timeout(limit, async {
        let (_, read) = tokio::join!(writing, read.read_to_end(&mut answers));
        read.is_ok()
    })
    .await
    .unwrap_or(false);
    (answers, complete)
}

// ---------------------------------------------------------------------------------------------
// The fuzzing loop.

struct Fuzzer {
    generator: Generator,
    context: Rc<DaemonContext>,
    summary: Summary,
    seed: u64,
    connection: u64,
    quiet: bool,
    minimize_budget: u32,
    known: Vec<String>,
    fake: Option<PathBuf>,
}

impl Fuzzer {
    async fn run(&mut self, quota: u64, deadline: Option<Instant>) {
        let start = Instant::now();
        let mut next_progress = start + Duration::from_secs(10);
        while self.summary.inputs < quota && deadline.is_none_or(|d| Instant::now() < d) {
            let mut batch = self.generator.batch();
            let left = (quota - self.summary.inputs) as usize;
            if batch.chunks.len() > left {
                batch.chunks.truncate(left);
            }
            self.connection += 1;
            let outcome = self.try_batch(&batch, BATCH_TIMEOUT).await;
            self.summary.inputs += batch.chunks.len() as u64;
            self.summary.lines += outcome.lines;
            self.summary.requests += outcome.requests;
            self.summary.unknown += outcome.unknown;
            if self.summary.per_method.is_empty() {
                self.summary.per_method = vec![0; METHOD_SLOTS];
            }
            for (sum, count) in self.summary.per_method.iter_mut().zip(outcome.per_method.0) {
                *sum += count;
            }
            self.summary.answers += outcome.answers;
            self.summary.notifications += outcome.notifications;
            self.summary.invalid_answers += outcome.invalid;
            self.summary.connections += 1;
            self.summary.bytes_in += outcome.bytes_in;
            self.summary.bytes_out += outcome.bytes_out;
            for found in outcome.findings {
                self.record(found, &batch).await;
            }
            if self.connection % PROBE_EVERY == 0 {
                self.probe().await;
            }
            if !self.quiet && Instant::now() >= next_progress {
                next_progress += Duration::from_secs(10);
                let seconds = start.elapsed().as_secs_f64();
                println!(
                    "  [{}] {} inputs in {seconds:.0} s, {} inputs/s, {} findings",
                    std::thread::current().name().unwrap_or("?"),
                    thousands(self.summary.inputs),
                    thousands((self.summary.inputs as f64 / seconds) as u64),
                    self.summary.findings.len()
                );
            }
        }
        self.probe().await;
    }

    /// One connection: its inputs written, its answers read and checked.
    async fn try_batch(&self, batch: &Batch, limit: Duration) -> Outcome {
        let wire = batch.wire();
        let bytes_in = wire.len() as u64;
        let panics = PANICS.load(Ordering::SeqCst);
        let messages = PANIC_MESSAGES.lock().map(|m| m.len()).unwrap_or(0);
        let (answers, complete) = exchange(&self.context, wire, limit).await;
        let mut outcome = check(batch, &answers, complete);
        outcome.bytes_in = bytes_in;
        outcome.bytes_out = answers.len() as u64;
        if PANICS.load(Ordering::SeqCst) > panics {
            let new = panic_messages_since(messages);
            let location = new
                .first()
                .and_then(|m| m.rsplit_once(" at ").map(|(_, l)| l.trim_end_matches(')')))
                .unwrap_or("?")
                .to_string();
            outcome.findings.push(Found {
                signature: "a panic".into(),
                variant: location,
                chunk: None,
                detail: new.join("\n"),
                invalid: false,
            });
        }
        outcome
    }

    async fn record(&mut self, found: Found, batch: &Batch) {
        if let Some(finding) = self.summary.findings.get_mut(&found.signature) {
            finding.count += 1;
            if finding.variants.len() < 64 {
                finding
                    .variants
                    .entry(found.variant)
                    .or_insert_with(|| example(&found.detail));
            }
            return;
        }
        let known = self
            .known
            .iter()
            .any(|known| found.signature.starts_with(known.as_str()));
        let minimized = if known || found.signature.starts_with("a connection that did not end") {
            Vec::new()
        } else {
            let started = Instant::now();
            let minimized = self.minimize(batch, &found).await;
            self.summary.minimizing += started.elapsed();
            minimized
        };
        let finding = Finding {
            signature: found.signature.clone(),
            count: 1,
            variants: [(found.variant, example(&found.detail))]
                .into_iter()
                .collect(),
            seed: self.seed,
            connection: self.connection,
            detail: found.detail,
            minimized,
            known,
            invalid: found.invalid,
        };
        if !self.quiet && !known {
            println!(
                "  new finding: {} (seed {:#018x}, connection {})",
                finding.signature, self.seed, self.connection
            );
        }
        self.summary.findings.insert(found.signature, finding);
    }

    /// A fresh connection must still get plain requests answered.
    async fn probe(&mut self) {
        self.summary.probes += 1;
        let mut input = String::from(
            r#"{"jsonrpc":"2.0","id":"probe-init","method":"initialize","params":{"protocol":1,"client":"probe"}}
{"jsonrpc":"2.0","id":"probe-status","method":"status"}
{"jsonrpc":"2.0","id":"probe-list","method":"session.list","params":{"all":true}}
"#,
        );
        // The fuzzed settings.set may have reset the engine's path: set it again.
        if let Some(fake) = &self.fake {
            input += &format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":\"probe-fake\",\"method\":\"settings.set\",\"params\":{{\"name\":\"engines.fake.path\",\"value\":{}}}}}\n",
                q(&fake.to_string_lossy())
            );
        }
        let expected = input.lines().count();
        let (answers, complete) = exchange(&self.context, input.into_bytes(), BATCH_TIMEOUT).await;
        let results = answers
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
            .filter(|answer| {
                answer["id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("probe-"))
                    && answer.get("result").is_some()
            })
            .count();
        if !complete || results != expected {
            let found = Found {
                signature: "the daemon stopped answering a plain request".into(),
                variant: String::new(),
                chunk: None,
                detail: format!(
                    "{results} of {expected} probe results{}; answers: {}",
                    if complete { "" } else { ", no end" },
                    show(&answers)
                ),
                invalid: false,
            };
            let batch = Batch {
                chunks: Vec::new(),
                unterminated: false,
            };
            self.record(found, &batch).await;
        }
    }

    // --- minimization ---

    /// Whether `chunks` on one connection still shows `signature`.
    async fn reproduces(&self, chunks: &[Chunk], signature: &str, budget: &mut u32) -> bool {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        let batch = Batch {
            chunks: chunks.to_vec(),
            unterminated: false,
        };
        let outcome = self.try_batch(&batch, REPRODUCE_TIMEOUT).await;
        outcome.findings.iter().any(|f| f.signature == signature)
    }

    /// The smallest connection found that still shows `found`.
    async fn minimize(&self, batch: &Batch, found: &Found) -> Vec<Vec<u8>> {
        let signature = found.signature.as_str();
        let mut budget = self.minimize_budget;
        let mut chunks = batch.chunks.clone();
        // The line it was seen on, alone or after a plain initialize.
        if let Some(index) = found.chunk {
            let alone = vec![chunks[index].clone()];
            let initialized = vec![self.generator.plain_initialize(), chunks[index].clone()];
            if self.reproduces(&alone, signature, &mut budget).await {
                chunks = alone;
            } else if self.reproduces(&initialized, signature, &mut budget).await {
                chunks = initialized;
            }
        }
        if chunks.len() > 1 && !self.reproduces(&chunks, signature, &mut budget).await {
            // Not reproducible on its own (a race, or the state of the store then).
            return Vec::new();
        }
        // Fewer lines (ddmin over the connection's lines).
        let mut granularity = 2;
        while chunks.len() >= 2 && budget > 0 {
            let size = chunks.len().div_ceil(granularity);
            let mut reduced = false;
            let mut start = 0;
            while start < chunks.len() {
                let end = (start + size).min(chunks.len());
                let candidate: Vec<Chunk> = chunks[..start]
                    .iter()
                    .chain(&chunks[end..])
                    .cloned()
                    .collect();
                if !candidate.is_empty()
                    && self.reproduces(&candidate, signature, &mut budget).await
                {
                    chunks = candidate;
                    reduced = true;
                    break;
                }
                start = end;
            }
            if reduced {
                granularity = (granularity - 1).max(2);
            } else if granularity >= chunks.len() {
                break;
            } else {
                granularity = (granularity * 2).min(chunks.len());
            }
        }
        // Smaller lines: JSON members and strings, else bytes.
        for index in (0..chunks.len()).rev() {
            self.shrink_json(&mut chunks, index, signature, &mut budget)
                .await;
            self.shrink_bytes(&mut chunks, index, signature, &mut budget)
                .await;
        }
        chunks.into_iter().map(|c| c.bytes).collect()
    }

    /// Removes members and elements, and halves strings, of a line that is JSON (re-serialized
    /// lines only: a number serde cannot keep exactly is left to [`Self::shrink_bytes`]).
    async fn shrink_json(
        &self,
        chunks: &mut [Chunk],
        index: usize,
        signature: &str,
        budget: &mut u32,
    ) {
        let Ok(mut value) = serde_json::from_slice::<Value>(&chunks[index].bytes) else {
            return;
        };
        let original = chunks[index].clone();
        chunks[index].bytes = serde_json::to_vec(&value).expect("values serialize");
        if !self.reproduces(chunks, signature, budget).await {
            chunks[index] = original;
            return;
        }
        'progress: loop {
            for candidate in json_shrinks(&value) {
                if *budget == 0 {
                    break 'progress;
                }
                let previous = std::mem::replace(
                    &mut chunks[index].bytes,
                    serde_json::to_vec(&candidate).expect("values serialize"),
                );
                if self.reproduces(chunks, signature, budget).await {
                    value = candidate;
                    continue 'progress;
                }
                chunks[index].bytes = previous;
            }
            break;
        }
    }

    /// Removes spans of bytes, halving their size (ddmin on one line).
    async fn shrink_bytes(
        &self,
        chunks: &mut [Chunk],
        index: usize,
        signature: &str,
        budget: &mut u32,
    ) {
        let mut size = chunks[index].bytes.len() / 2;
        while size > 0 && *budget > 0 {
            let mut start = 0;
            let mut reduced = false;
            while start < chunks[index].bytes.len() && *budget > 0 {
                let bytes = &chunks[index].bytes;
                let end = (start + size).min(bytes.len());
                let candidate: Vec<u8> = bytes[..start]
                    .iter()
                    .chain(&bytes[end..])
                    .copied()
                    .collect();
                let previous = std::mem::replace(&mut chunks[index].bytes, candidate);
                if self.reproduces(chunks, signature, budget).await {
                    reduced = true;
                } else {
                    chunks[index].bytes = previous;
                    start = end;
                }
            }
            if !reduced {
                size /= 2;
            }
        }
    }
}

/// Simpler values than `value`, one change each: a member or element removed, a string
/// halved, a nested value simplified.
fn json_shrinks(value: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    match value {
        Value::Object(map) => {
            for key in map.keys() {
                let mut smaller = map.clone();
                smaller.remove(key);
                out.push(Value::Object(smaller));
            }
            for (key, member) in map {
                for shrunk in json_shrinks(member) {
                    let mut smaller = map.clone();
                    smaller.insert(key.clone(), shrunk);
                    out.push(Value::Object(smaller));
                }
            }
        }
        Value::Array(items) => {
            for index in 0..items.len() {
                let mut smaller = items.clone();
                smaller.remove(index);
                out.push(Value::Array(smaller));
            }
            for (index, item) in items.iter().enumerate() {
                for shrunk in json_shrinks(item) {
                    let mut smaller = items.clone();
                    smaller[index] = shrunk;
                    out.push(Value::Array(smaller));
                }
            }
        }
        Value::String(text) if text.len() > 1 => {
            let half = text
                .char_indices()
                .nth(text.chars().count() / 2)
                .map_or(0, |(i, _)| i);
            out.push(Value::String(text[..half].to_string()));
            out.push(Value::String(String::new()));
        }
        _ => {}
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// One input: a line (or, for random bytes, several), and what its answer must not be.
#[derive(Debug, Clone)]
struct Chunk {
    bytes: Vec<u8>,
    /// A finding (signature, variant) if this request is answered with a result.
    expect: Option<(&'static str, String)>,
}

impl Chunk {
    fn plain(bytes: Vec<u8>) -> Chunk {
        Chunk {
            bytes,
            expect: None,
        }
    }
}

/// One connection's inputs.
struct Batch {
    chunks: Vec<Chunk>,
    /// The last line has no newline (it ends with the connection).
    unterminated: bool,
}

impl Batch {
    fn wire(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.chunks.iter().map(|c| c.bytes.len() + 1).sum());
        for (index, chunk) in self.chunks.iter().enumerate() {
            out.extend_from_slice(&chunk.bytes);
            if index + 1 < self.chunks.len() || !self.unterminated {
                out.push(b'\n');
            }
        }
        out
    }
}

#[derive(Debug)]
struct Found {
    signature: String,
    variant: String,
    /// The input it is about, when known.
    chunk: Option<usize>,
    detail: String,
    invalid: bool,
}

/// Counts per slot of [`METHOD_SLOTS`] (an array that long has no `Default` of its own).
#[derive(Debug)]
struct PerMethod([u64; METHOD_SLOTS]);

impl Default for PerMethod {
    fn default() -> Self {
        PerMethod([0; METHOD_SLOTS])
    }
}

impl std::ops::Deref for PerMethod {
    type Target = [u64; METHOD_SLOTS];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for PerMethod {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

#[derive(Debug, Default)]
struct Outcome {
    lines: u64,
    requests: u64,
    /// Lines of JSON past serde's limits, whose answer is not checked.
    unknown: u64,
    /// Requests after a successful `initialize`, per method of `METHODS` (and unknown ones).
    per_method: PerMethod,
    answers: u64,
    notifications: u64,
    invalid: u64,
    bytes_in: u64,
    bytes_out: u64,
    findings: Vec<Found>,
}

/// An id as it is compared: integers by their digits (a float is not the same id).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum IdKey {
    Null,
    /// Not a string, a number or null.
    Invalid,
    Str(String),
    Int(String),
    Float(u64),
}

impl IdKey {
    fn describe(&self) -> &'static str {
        match self {
            IdKey::Null => "null",
            IdKey::Invalid => "not a string, number or null",
            IdKey::Str(_) => "a string",
            IdKey::Int(_) => "an integer",
            IdKey::Float(_) => "a float",
        }
    }

    /// The key of a parsed id (an answer's).
    fn of(id: &Value) -> IdKey {
        match id {
            Value::Null => IdKey::Null,
            Value::String(s) => IdKey::Str(s.clone()),
            Value::Number(n) if n.is_u64() || n.is_i64() => IdKey::Int(n.to_string()),
            Value::Number(n) => float_key(n.as_f64().unwrap_or(0.0)),
            _ => IdKey::Invalid,
        }
    }

    /// The key of an id from its JSON text, as written (sent, or echoed).
    fn from_raw(raw: &[u8]) -> IdKey {
        let text = std::str::from_utf8(raw).unwrap_or("");
        match raw.first() {
            Some(b'-' | b'0'..=b'9') => {
                let integer = text
                    .bytes()
                    .enumerate()
                    .all(|(i, c)| c.is_ascii_digit() || (i == 0 && c == b'-'));
                if integer && text.trim_start_matches('-').bytes().all(|c| c == b'0') {
                    IdKey::Int("0".into())
                } else if integer {
                    IdKey::Int(text.to_string())
                } else {
                    match text.parse::<f64>() {
                        Ok(f) if f.is_finite() => float_key(f),
                        _ => IdKey::Str(format!("\u{0}number {text}")),
                    }
                }
            }
            Some(b'"') => IdKey::Str(
                serde_json::from_slice::<String>(raw)
                    .unwrap_or_else(|_| format!("\u{0}string {text}")),
            ),
            Some(b'n') => IdKey::Null,
            _ => IdKey::Invalid,
        }
    }
}

fn float_key(f: f64) -> IdKey {
    if f == 0.0 {
        IdKey::Int("0".into())
    } else {
        IdKey::Float(f.to_bits())
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Handshake {
    Waiting,
    Done,
    /// An `initialize` whose outcome this model cannot tell.
    Unknown,
}

#[derive(Debug)]
enum LineKind {
    Blank,
    TooLong,
    NotJson,
    /// JSON, not a request.
    Invalid,
    Request {
        method: String,
        notification: bool,
        params: Params,
    },
    /// Valid JSON by the grammar that serde's `Value` cannot hold: any answer, or none.
    Unknown,
}

#[derive(Debug)]
struct LineInfo {
    chunk: usize,
    kind: LineKind,
    key: IdKey,
    /// Whether the handshake was done when this line came (None: unknown).
    before_initialize: Option<bool>,
    /// Only when the chunk is this one line.
    expect: Option<(&'static str, String)>,
}

impl LineInfo {
    fn answered(&self) -> bool {
        !matches!(
            self.kind,
            LineKind::Blank
                | LineKind::Unknown
                | LineKind::Request {
                    notification: true,
                    ..
                }
        )
    }

    fn method(&self) -> &str {
        match &self.kind {
            LineKind::Request { method, .. } if METHODS.contains(&method.as_str()) => method,
            LineKind::Request { .. } => "(an unknown method)",
            _ => "(not a request)",
        }
    }

    fn describe(&self) -> &'static str {
        match (&self.kind, &self.key) {
            (LineKind::TooLong, _) => "a line over 1 MiB",
            (LineKind::NotJson, _) => "a line that is not JSON",
            (LineKind::Invalid, _) => "JSON that is not a request",
            (LineKind::Request { .. }, IdKey::Null) => "a request with id null",
            (LineKind::Request { .. }, IdKey::Invalid) => "a request with an id of another type",
            (LineKind::Request { .. }, _) => "a request",
            (LineKind::Blank, _) => "a blank line",
            (LineKind::Unknown, _) => "JSON past serde's limits",
        }
    }
}

/// What the daemon must do with each line read, from the protocol as documented.
fn model(batch: &Batch) -> Vec<LineInfo> {
    let mut lines = Vec::with_capacity(batch.chunks.len());
    let mut handshake = Handshake::Waiting;
    for (index, chunk) in batch.chunks.iter().enumerate() {
        let single = !chunk.bytes.contains(&b'\n');
        for line in chunk.bytes.split(|&b| b == b'\n') {
            let before_initialize = match handshake {
                Handshake::Waiting => Some(true),
                Handshake::Done => Some(false),
                Handshake::Unknown => None,
            };
            let (kind, key) = model_line(line, &mut handshake);
            lines.push(LineInfo {
                chunk: index,
                kind,
                key,
                before_initialize,
                expect: if single { chunk.expect.clone() } else { None },
            });
        }
    }
    lines
}

fn model_line(line: &[u8], handshake: &mut Handshake) -> (LineKind, IdKey) {
    if line.len() > MAX_LINE {
        return (LineKind::TooLong, IdKey::Null);
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return (LineKind::Blank, IdKey::Null);
    }
    let value = match serde_json::from_slice::<Value>(line) {
        Ok(value) => value,
        Err(error) => {
            // JSON by the grammar, past what serde's `Value` takes (nesting deeper than 128,
            // a number past f64, a lone surrogate): the daemon may read it or not.
            let message = error.to_string();
            if [
                "recursion limit",
                "number out of range",
                "surrogate",
                "escape",
            ]
            .iter()
            .any(|limit| message.contains(limit))
            {
                let may_initialize = line.windows(10).any(|w| w == b"initialize")
                    || line.windows(2).any(|w| w == b"\\u");
                if may_initialize && *handshake != Handshake::Done {
                    *handshake = Handshake::Unknown;
                }
                let key = top_members(line)
                    .and_then(|members| members.into_iter().find(|(key, _)| key == "id"))
                    .map_or(IdKey::Null, |(_, raw)| IdKey::from_raw(raw));
                return (LineKind::Unknown, key);
            }
            return (LineKind::NotJson, IdKey::Null);
        }
    };
    let Some(object) = value.as_object() else {
        return (LineKind::Invalid, IdKey::Null);
    };
    // Two members of one envelope name (after unescaping) are not one request.
    let members = top_members(line).unwrap_or_default();
    for name in ["id", "jsonrpc", "method", "params"] {
        if members.iter().filter(|(key, _)| key == name).count() > 1 {
            return (LineKind::Invalid, IdKey::Null);
        }
    }
    let key = match object.get("id") {
        None => IdKey::Null,
        Some(id) => match IdKey::of(id) {
            // Not a string, a number or null: -32600 with a null id.
            IdKey::Invalid => return (LineKind::Invalid, IdKey::Null),
            parsed => members
                .iter()
                .find(|(key, _)| key == "id")
                .map_or(parsed, |(_, raw)| IdKey::from_raw(raw)),
        },
    };
    let method = match (object.get("jsonrpc"), object.get("method")) {
        (Some(Value::String(version)), Some(Value::String(method))) if version == "2.0" => method,
        _ => return (LineKind::Invalid, key),
    };
    let params = match object.get("params") {
        None | Some(Value::Null) => Params::Absent,
        Some(Value::Object(_)) => Params::Object,
        Some(Value::Array(_)) => Params::Array,
        Some(_) => return (LineKind::Invalid, key),
    };
    if method == "initialize" {
        let params = object.get("params").and_then(Value::as_object);
        let protocol = params
            .and_then(|p| p.get("protocol"))
            .and_then(Value::as_u64);
        let typed =
            ["client", "exec_id"]
                .iter()
                .all(|name| match params.and_then(|p| p.get(*name)) {
                    None | Some(Value::Null) => true,
                    Some(Value::String(text)) => text.len() <= MAX_INITIALIZE_TEXT,
                    Some(_) => false,
                });
        if protocol == Some(1) && typed {
            *handshake = Handshake::Done;
        }
    }
    let notification = !object.contains_key("id");
    (
        LineKind::Request {
            method: method.clone(),
            notification,
            params,
        },
        key,
    )
}

/// `initialize`'s longest `client` and `exec_id` (docs/protocol.md, Limits).
const MAX_INITIALIZE_TEXT: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Params {
    Absent,
    Object,
    Array,
}

/// The top-level members of a JSON object text, names unescaped, values as their raw text.
fn top_members(text: &[u8]) -> Option<Vec<(String, &[u8])>> {
    let mut members = Vec::new();
    let mut i = skip_space(text, 0);
    if text.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_space(text, i);
        match text.get(i)? {
            b'}' => return Some(members),
            b',' => {
                i += 1;
                continue;
            }
            _ => {}
        }
        if text[i] != b'"' {
            return None;
        }
        let key_end = skip_value(text, i)?;
        let raw_key = &text[i..key_end];
        let name = if raw_key.contains(&b'\\') {
            serde_json::from_slice::<String>(raw_key).ok()?
        } else {
            String::from_utf8_lossy(&raw_key[1..raw_key.len() - 1]).into_owned()
        };
        i = skip_space(text, key_end);
        if text.get(i) != Some(&b':') {
            return None;
        }
        i = skip_space(text, i + 1);
        let end = skip_value(text, i)?;
        members.push((name, &text[i..end]));
        i = end;
    }
}

/// What an answer line is, or how it breaks JSON-RPC.
enum Answer {
    Response {
        key: IdKey,
        error: Option<(i64, String)>,
    },
    Notification,
}

fn shape(value: &Value, line: &[u8]) -> Result<Answer, (String, Option<IdKey>)> {
    let Some(object) = value.as_object() else {
        return Err(("not an object".into(), None));
    };
    if object.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err(("`jsonrpc` is not \"2.0\"".into(), None));
    }
    let Some(id) = object.get("id") else {
        return match (object.get("method"), object.get("params")) {
            (Some(Value::String(method)), Some(Value::Object(_)))
                if method == "events.event" || method == "events.lagged" =>
            {
                Ok(Answer::Notification)
            }
            (Some(_), _) => Err(("a notification that is not documented".into(), None)),
            _ => Err(("no `id`".into(), None)),
        };
    };
    let key = match id {
        // By the digits written: an integer id echoed as a float is not the same id.
        Value::Number(_) => top_members(line)
            .and_then(|members| members.into_iter().find(|(key, _)| key == "id"))
            .map_or_else(|| IdKey::of(id), |(_, raw)| IdKey::from_raw(raw)),
        _ => IdKey::of(id),
    };
    if key == IdKey::Invalid {
        return Err((
            format!("an id that is {}", json_type(id)),
            Some(IdKey::Invalid),
        ));
    }
    if let Some(extra) = object
        .keys()
        .find(|k| !matches!(k.as_str(), "jsonrpc" | "id" | "result" | "error"))
    {
        return Err((format!("a member `{}`", cut(extra, 40)), Some(key)));
    }
    match (object.get("result"), object.get("error")) {
        (Some(_), None) => Ok(Answer::Response { key, error: None }),
        (None, Some(Value::Object(error))) => {
            let Some(code) = error.get("code").and_then(Value::as_i64) else {
                return Err(("an error without an integer `code`".into(), Some(key)));
            };
            let Some(message) = error.get("message").and_then(Value::as_str) else {
                return Err(("an error without a string `message`".into(), Some(key)));
            };
            if let Some(extra) = error
                .keys()
                .find(|k| !matches!(k.as_str(), "code" | "message" | "data"))
            {
                return Err((
                    format!("an error with a member `{}`", cut(extra, 40)),
                    Some(key),
                ));
            }
            Ok(Answer::Response {
                key,
                error: Some((code, message.to_string())),
            })
        }
        (None, Some(_)) => Err(("an error that is not an object".into(), Some(key))),
        (Some(_), Some(_)) => Err(("both `result` and `error`".into(), Some(key))),
        (None, None) => Err(("neither `result` nor `error`".into(), Some(key))),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Checks one connection's answers against its inputs.
fn check(batch: &Batch, answers: &[u8], complete: bool) -> Outcome {
    let lines = model(batch);
    let mut outcome = Outcome {
        lines: lines.len() as u64,
        requests: lines
            .iter()
            .filter(|l| matches!(l.kind, LineKind::Request { .. }))
            .count() as u64,
        unknown: lines
            .iter()
            .filter(|l| matches!(l.kind, LineKind::Unknown))
            .count() as u64,
        ..Default::default()
    };
    for line in &lines {
        if let (LineKind::Request { method, .. }, Some(false)) =
            (&line.kind, line.before_initialize)
        {
            let slot = METHODS
                .iter()
                .position(|m| m == method)
                .unwrap_or(METHOD_SLOTS - 1);
            outcome.per_method[slot] += 1;
        }
    }
    // The answers each key still waits for; requests with id null first, so that the other
    // null-id answers (parse errors, …) are taken from the back.
    let mut waiting: HashMap<IdKey, Vec<usize>> = HashMap::new();
    for (index, line) in lines.iter().enumerate() {
        if line.answered() {
            waiting.entry(line.key.clone()).or_default().push(index);
        }
    }
    if let Some(nulls) = waiting.get_mut(&IdKey::Null) {
        nulls.sort_by_key(|&i| !matches!(lines[i].kind, LineKind::Request { .. }));
    }
    // The id a line the model cannot tell about may be answered with is not unique either.
    let tainted: std::collections::HashSet<&IdKey> = lines
        .iter()
        .filter(|l| matches!(l.kind, LineKind::Unknown))
        .map(|l| &l.key)
        .collect();
    let unique: HashMap<IdKey, bool> = waiting
        .iter()
        .map(|(key, lines)| {
            (
                key.clone(),
                lines.len() == 1
                    && !matches!(key, IdKey::Null | IdKey::Invalid)
                    && !tainted.contains(key),
            )
        })
        .collect();
    // Answers that may belong to lines the model cannot tell about.
    let mut unknown = lines
        .iter()
        .filter(|l| matches!(l.kind, LineKind::Unknown))
        .count();
    let lenient = unknown > 0;
    let finding = |signature: &str, variant: String, chunk: Option<usize>, detail: String| Found {
        signature: signature.to_string(),
        variant,
        chunk,
        detail,
        invalid: false,
    };
    let input_of = |index: usize| show(&batch.chunks[lines[index].chunk].bytes);
    for answer_line in answers.split(|&b| b == b'\n') {
        if answer_line.is_empty() {
            continue;
        }
        outcome.answers += 1;
        let parsed = serde_json::from_slice::<Value>(answer_line).or_else(|error| {
            // The id as the daemon echoed it, and whether the answer is JSON without it.
            let echoed = top_members(answer_line)
                .and_then(|members| members.into_iter().find(|(key, _)| key == "id"))
                .map(|(_, raw)| {
                    let start = raw.as_ptr() as usize - answer_line.as_ptr() as usize;
                    (raw.first().copied(), start..start + raw.len())
                });
            let without_id = |span: std::ops::Range<usize>, with: &[u8]| {
                let mut patched = answer_line.to_vec();
                patched.splice(span, with.iter().copied());
                serde_json::from_slice::<Value>(&patched).ok()
            };
            match echoed {
                // An id past f64 echoed as it was sent (`1e400`) is JSON all the same.
                Some((Some(b'-' | b'0'..=b'9'), span))
                    if error.to_string().contains("number out of range") =>
                {
                    without_id(span, b"0.5").ok_or((error, false))
                }
                // A string id serde cannot read (a lone surrogate), echoed.
                Some((Some(b'"'), span)) if without_id(span.clone(), b"null").is_some() => {
                    Err((error, true))
                }
                _ => Err((error, false)),
            }
        });
        let value =
            match parsed {
                Ok(value) => value,
                Err((error, true)) => {
                    outcome.invalid += 1;
                    outcome.findings.push(Found {
                    invalid: true,
                    ..finding(
                        "invalid answer: a string id echoed as sent that is not JSON serde reads",
                        error.to_string().split(" at line").next().unwrap_or("").to_string(),
                        None,
                        format!("answer: {}", show(answer_line)),
                    )
                });
                    continue;
                }
                Err((error, false)) => {
                    outcome.invalid += 1;
                    outcome.findings.push(Found {
                        invalid: true,
                        ..finding(
                            "invalid answer: not JSON",
                            error
                                .to_string()
                                .split(" at line")
                                .next()
                                .unwrap_or("")
                                .to_string(),
                            None,
                            format!("answer: {}", show(answer_line)),
                        )
                    });
                    continue;
                }
            };
        let (key, error) = match shape(&value, answer_line) {
            Ok(Answer::Notification) => {
                outcome.notifications += 1;
                outcome.answers -= 1;
                continue;
            }
            Ok(Answer::Response { key, error }) => (key, error),
            Err((what, key)) => {
                outcome.invalid += 1;
                // Still take the line it answers, so that one bug is one finding.
                let taken = key.and_then(|key| take(&mut waiting, &key));
                outcome.findings.push(Found {
                    invalid: true,
                    ..finding(
                        &format!("invalid answer: {what}"),
                        taken
                            .map(|i| lines[i].method().to_string())
                            .unwrap_or_default(),
                        taken.map(|i| lines[i].chunk),
                        format!(
                            "input: {}\nanswer: {}",
                            taken.map(input_of).unwrap_or_else(|| "?".into()),
                            show(answer_line)
                        ),
                    )
                });
                continue;
            }
        };
        let mut taken = take(&mut waiting, &key);
        if taken.is_none() {
            if let IdKey::Float(bits) = key {
                // An integer id that came back as a float.
                let value = f64::from_bits(bits);
                let integer = waiting
                    .iter()
                    .filter(|(k, v)| !v.is_empty() && matches!(k, IdKey::Int(_)))
                    .find(|(k, _)| match k {
                        IdKey::Int(text) => text
                            .parse::<f64>()
                            .is_ok_and(|f| (f - value).abs() <= f.abs() * 1e-12),
                        _ => false,
                    })
                    .map(|(k, _)| k.clone());
                if let Some(integer) = integer {
                    taken = take(&mut waiting, &integer);
                    if let Some(index) = taken {
                        outcome.findings.push(finding(
                            "an integer id came back changed (as a float)",
                            String::new(),
                            Some(lines[index].chunk),
                            format!("input: {}\nanswer: {}", input_of(index), show(answer_line)),
                        ));
                    }
                }
            }
        }
        let Some(index) = taken else {
            if unknown > 0 {
                unknown -= 1;
                continue;
            }
            outcome.findings.push(finding(
                "an answer to nothing that was sent",
                format!("id {}", key.describe()),
                None,
                format!("answer: {}", show(answer_line)),
            ));
            continue;
        };
        let line = &lines[index];
        // With an id sent more than once, which line this answers is not known.
        let attributed = unique.get(&key).copied().unwrap_or(false);
        let method = if attributed {
            line.method().to_string()
        } else {
            "(an id sent more than once)".to_string()
        };
        let detail = || {
            if attributed {
                format!("input: {}\nanswer: {}", input_of(index), show(answer_line))
            } else {
                format!("answer: {}", show(answer_line))
            }
        };
        let chunk = attributed.then_some(line.chunk);
        if let Some((code, message)) = &error {
            if !DOCUMENTED_CODES.contains(code) {
                outcome.findings.push(finding(
                    "an undocumented error code",
                    code.to_string(),
                    chunk,
                    detail(),
                ));
            }
            if *code == -32603 {
                outcome.findings.push(finding(
                    "an internal error (-32603) from bad input",
                    method.clone(),
                    chunk,
                    detail(),
                ));
            }
            if message.contains(['\n', '\r']) {
                outcome.findings.push(finding(
                    "an error message of several lines",
                    method.clone(),
                    chunk,
                    detail(),
                ));
            }
            if message.len() > HUGE_MESSAGE {
                outcome.findings.push(finding(
                    "an error message over 64 KiB (it echoes the input)",
                    method.clone(),
                    chunk,
                    format!("{} ({} bytes)", detail(), answer_line.len()),
                ));
            }
        }
        if !attributed {
            continue;
        }
        // What this line's answer must be.
        let code = error.as_ref().map(|(code, _)| *code);
        match &line.kind {
            LineKind::TooLong | LineKind::NotJson | LineKind::Invalid => {
                let must = if matches!(line.kind, LineKind::NotJson) {
                    -32700
                } else {
                    -32600
                };
                if code != Some(must) {
                    outcome.findings.push(finding(
                        "a line that is not a request answered otherwise than documented",
                        format!("{}: {}", line.describe(), code_text(code)),
                        chunk,
                        detail(),
                    ));
                }
            }
            LineKind::Request {
                method: name,
                params,
                ..
            } if name != "initialize" => {
                let known = METHODS.contains(&name.as_str());
                if line.before_initialize == Some(true) {
                    if code.is_none() {
                        outcome.findings.push(finding(
                            "a request sent before a successful initialize was carried out",
                            method.clone(),
                            chunk,
                            detail(),
                        ));
                    } else if code != Some(-32008) {
                        outcome.findings.push(finding(
                            "a request before initialize answered otherwise than -32008",
                            format!("{method}: {}", code_text(code)),
                            chunk,
                            detail(),
                        ));
                    }
                } else if line.before_initialize == Some(false) {
                    if code == Some(-32008) {
                        outcome.findings.push(finding(
                            "a request after a successful initialize refused with -32008",
                            method.clone(),
                            chunk,
                            detail(),
                        ));
                    } else if !known
                        && code != Some(-32601)
                        && !(*params == Params::Array && code == Some(-32602))
                    {
                        outcome.findings.push(finding(
                            "an unknown method answered otherwise than -32601",
                            code_text(code),
                            chunk,
                            detail(),
                        ));
                    } else if known && code == Some(-32601) {
                        outcome.findings.push(finding(
                            "a known method answered -32601",
                            method.clone(),
                            chunk,
                            detail(),
                        ));
                    }
                }
                if let (Some((signature, variant)), None) = (&line.expect, code) {
                    outcome
                        .findings
                        .push(finding(signature, variant.clone(), chunk, detail()));
                }
            }
            LineKind::Request { .. } => {
                if let (Some((signature, variant)), None) = (&line.expect, code) {
                    outcome
                        .findings
                        .push(finding(signature, variant.clone(), chunk, detail()));
                }
            }
            LineKind::Blank | LineKind::Unknown => {}
        }
    }
    if !complete {
        outcome.findings.push(finding(
            "a connection that did not end (its answers did not all come)",
            String::new(),
            None,
            format!(
                "{} inputs; the requests among them:\n{}",
                batch.chunks.len(),
                lines
                    .iter()
                    .filter(|l| matches!(l.kind, LineKind::Request { .. }))
                    .map(|l| format!("  {}", show(&batch.chunks[l.chunk].bytes)))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        ));
        return outcome;
    }
    if lenient {
        // An answer taken for another line may have been this one's.
        return outcome;
    }
    let mut missing: Vec<usize> = waiting.into_values().flatten().collect();
    missing.sort_unstable();
    for index in missing {
        outcome.findings.push(finding(
            "no answer to a line that needs one",
            lines[index].describe().to_string(),
            Some(lines[index].chunk),
            format!("input: {}", input_of(index)),
        ));
    }
    outcome
}

fn code_text(code: Option<i64>) -> String {
    code.map_or("a result".into(), |c| c.to_string())
}

/// Takes a line waiting for an answer with `key` (a null answer may answer a line whose id
/// was of another type).
fn take(waiting: &mut HashMap<IdKey, Vec<usize>>, key: &IdKey) -> Option<usize> {
    if let Some(index) = waiting.get_mut(key).and_then(Vec::pop) {
        return Some(index);
    }
    if *key == IdKey::Null {
        return waiting.get_mut(&IdKey::Invalid).and_then(Vec::pop);
    }
    None
}

fn skip_space(text: &[u8], mut i: usize) -> usize {
    while matches!(text.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

fn skip_value(text: &[u8], i: usize) -> Option<usize> {
    match text.get(i)? {
        b'"' => {
            let mut j = i + 1;
            loop {
                match text.get(j)? {
                    b'\\' => j += 2,
                    b'"' => return Some(j + 1),
                    _ => j += 1,
                }
            }
        }
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match text.get(j)? {
                    b'"' => {
                        j = skip_value(text, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while let Some(&c) = text.get(j) {
                if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The inputs.

/// splitmix64: small, fast, and the same on every machine.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// 0 ≤ n < bound (bound < 2³²).
    pub fn below(&mut self, bound: usize) -> usize {
        (((self.next_u64() >> 32) * bound as u64) >> 32) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub fn word(&mut self, items: &[&'static str]) -> &'static str {
        items[self.below(items.len())]
    }
}

/// A string as JSON text.
fn q(text: &str) -> String {
    serde_json::to_string(text).expect("strings serialize")
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Sel {
    Project,
    Session,
    Prompt,
    /// A prompt or a session (`prompt.cancel`).
    Target,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Text,
    /// A name or title.
    Name,
    Sel(Sel),
    Bool,
    Generation,
    Subscription,
    After,
    Groups,
    Images,
    Engine,
    SettingName,
    SettingValue,
    Group,
    Path,
    Protocol,
}

impl Kind {
    /// The JSON type the protocol gives it.
    fn class(self) -> Class {
        match self {
            Kind::Bool => Class::Bool,
            Kind::Generation | Kind::Subscription | Kind::After | Kind::Protocol => Class::Int,
            Kind::Groups | Kind::Images => Class::List,
            _ => Class::Str,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Class {
    Str,
    Bool,
    Int,
    List,
}

#[derive(Debug, Clone, Copy)]
struct P {
    name: &'static str,
    kind: Kind,
    required: bool,
}

const fn p(name: &'static str, kind: Kind, required: bool) -> P {
    P {
        name,
        kind,
        required,
    }
}

const SESSION: P = p("session", Kind::Sel(S::Session), true);

/// [`Sel`], where `Kind::Sel` hides its name.
type S = Sel;

/// Every method's params, as `docs/protocol.md` gives them.
fn schema(method: &str) -> &'static [P] {
    use Kind::*;
    match method {
        "initialize" => {
            const {
                &[
                    p("protocol", Protocol, true),
                    p("client", Text, false),
                    p("exec_id", Text, false),
                ]
            }
        }
        "project.add" => {
            const {
                &[
                    p("name", Name, true),
                    p("path", Path, true),
                    p("engine", Engine, false),
                    p("model", Text, false),
                    p("full_access", Bool, false),
                    p("remote", Bool, false),
                    p("groups", Groups, false),
                    p("instructions", Text, false),
                ]
            }
        }
        "project.list" => const { &[p("all", Bool, false)] },
        "project.show" | "project.archive" => const { &[p("project", Sel(S::Project), true)] },
        "project.set" => {
            const {
                &[
                    p("project", Sel(S::Project), true),
                    p("engine", Engine, false),
                    p("model", Text, false),
                    p("full_access", Bool, false),
                    p("remote", Bool, false),
                    p("groups", Groups, false),
                    p("instructions", Text, false),
                ]
            }
        }
        "group.set" => const { &[p("name", Group, true), p("locking", Bool, false)] },
        "session.new" => {
            const {
                &[
                    p("project", Sel(S::Project), true),
                    p("engine", Engine, false),
                    p("model", Text, false),
                    p("reasoning_effort", Text, false),
                    p("title", Name, false),
                    p("task", Text, false),
                    p("wave", Name, false),
                ]
            }
        }
        "session.list" => const { &[p("project", Sel(S::Project), false), p("all", Bool, false)] },
        "session.show" | "session.archive" | "session.compact" | "history" | "driver.show" => {
            const { &[SESSION] }
        }
        "session.rename" => const { &[SESSION, p("title", Name, true)] },
        "session.steer" => const { &[SESSION, p("text", Text, true)] },
        "prompt.send" => {
            const {
                &[
                    SESSION,
                    p("text", Text, true),
                    p("images", Images, false),
                    p("read_only", Bool, false),
                    p("generation", Generation, false),
                ]
            }
        }
        "prompt.cancel" => const { &[p("target", Sel(S::Target), true)] },
        "prompt.wait" => const { &[p("prompt", Sel(S::Prompt), true)] },
        // Without a session: every session's events (the daemon-wide feed).
        "events.subscribe" => {
            const {
                &[
                    p("session", Kind::Sel(S::Session), false),
                    p("after", After, false),
                ]
            }
        }
        "events.unsubscribe" => const { &[p("subscription", Subscription, true)] },
        "settings.get" => const { &[p("name", SettingName, true)] },
        "settings.set" => {
            const {
                &[
                    p("name", SettingName, true),
                    p("value", SettingValue, false),
                ]
            }
        }
        "driver.claim" => const { &[SESSION, p("take_over", Bool, false)] },
        "driver.release" => const { &[SESSION, p("generation", Generation, true)] },
        _ => const { &[] },
    }
}

const WORDS: &[&str] = &[
    "a",
    "fz",
    "x y",
    "status",
    "hello world",
    "null",
    "true",
    "0",
    "-1",
    "1e308",
    "initialize",
    "session",
    "codex",
    "~",
    "é",
    "o'brien",
    "semi;colon",
    "tab\there",
    "new\nline",
    "01",
];
const UNICODE: &[&str] = &[
    "é",
    "日本語",
    "🦀",
    "\u{202e}evil",
    "\u{feff}bom",
    "a\u{0}b",
    "\u{7f}",
    "\u{10ffff}",
    "\u{fffd}",
    "Ω≈ç√",
    "\u{200b}",
    "ｓｔａｔｕｓ",
];
/// JSON string texts with escapes (valid JSON).
const RAW_STRINGS: &[&str] = &[
    r#""\u0000""#,
    r#""\ud83e\udd80""#,
    r#""\n\r\t""#,
    r#""\\""#,
    r#""\/""#,
    r#""\u0073tatus""#,
    r#""\"quoted\"""#,
    r#""\u001f""#,
    r#""\b\f""#,
];
const SPACES: &[&str] = &["", " ", "\t\n", "\u{a0}", "   ", "\r"];
const METACHARS: &[&str] = &[
    "%s %n",
    "{prompt}",
    "$(id)",
    "`id`",
    "; true",
    "' OR '1'='1",
    "%",
    "_",
    "../../etc",
    "\\",
    "{}",
    "[]",
];
const NUMBERS: &[&str] = &[
    "0",
    "-0",
    "1",
    "-1",
    "1.5",
    "-1.5",
    "1e308",
    "-1e308",
    "1e-308",
    "4.9e-324",
    "1E2",
    "0.0",
    "-0.0",
    "2.5e-3",
    "18446744073709551615",
    "18446744073709551616",
    "18446744073709551617",
    "-9223372036854775808",
    "-9223372036854775809",
    "9223372036854775807",
    "9223372036854775808",
    "123456789012345678901234567890",
    "1e-400",
];
/// Not JSON numbers: the whole line is a parse error.
const BAD_NUMBERS: &[&str] = &[
    "01", "+1", ".5", "1.", "NaN", "Infinity", "-", "1e", "0x10", "1e400", "-1e400",
];
const PUNCT: &[u8] = b"{}[]\":,0123456789-+.eE tfnrul\\";
const BAD_UTF8: &[&[u8]] = &[
    b"\xff",
    b"\xc3\x28",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xc0\x80",
    b"\xe2\x82",
    b"\x80",
];
const ENGINES: &[&str] = &[
    "fake",
    "codex",
    "claude",
    "opencode",
    "command",
    "codex-app-server",
    "",
    "FAKE",
    "fake ",
    "gpt-5",
];
const GROUPS: &[&str] = &["fz-g1", "fz-g2", "fz-g3", "fz-g4"];
const DEPTHS: &[usize] = &[2, 8, 32, 100, 125, 126, 127, 128, 129, 256, 3000];
/// (JSON text, what it is): values to put where another type is documented.
const WRONG: &[(&str, &str)] = &[
    ("0", "a number"),
    ("-1", "a number"),
    ("12", "a number"),
    ("1.5", "a float"),
    ("1e308", "a float"),
    ("18446744073709551617", "an integer past u64"),
    ("true", "a boolean"),
    ("false", "a boolean"),
    ("\"x\"", "a string"),
    ("\"true\"", "a string"),
    ("\"1\"", "a string"),
    ("[]", "an array"),
    ("[\"a\"]", "an array"),
    ("[1]", "an array of numbers"),
    ("[null]", "an array of null"),
    ("{}", "an object"),
    ("{\"a\":1}", "an object"),
    ("[[[[[[[[1]]]]]]]]", "a nested array"),
];

/// Creations that name a real target, per thread.
struct Budgets {
    project_add: u32,
    session_new: u32,
    prompt_send: u32,
    rename: u32,
    group_names: u32,
}

enum Mode {
    Good,
    /// One param (by index) of the wrong type.
    Wrong(usize),
    /// One required param (by index) left out.
    Missing(usize),
    Chaos,
}

struct Generator {
    rng: Rng,
    pools: Pools,
    budget: Budgets,
    next_tag: u64,
    setting_names: Vec<String>,
    /// What the value last made by [`Self::wrong`] is.
    last_wrong: &'static str,
}

impl Generator {
    fn new(seed: u64, pools: Pools) -> Generator {
        let mut setting_names = Vec::new();
        for known in crate::store::settings::KNOWN {
            if known.name.contains("<engine>") {
                for engine in ["fake", "codex", "claude", "command", "nope"] {
                    setting_names.push(known.name.replace("<engine>", engine));
                }
            } else {
                setting_names.push(known.name.to_string());
            }
        }
        for odd in [
            "slots.",
            "slots.<engine>",
            "engines..path",
            "engines.fake.path.x",
            "",
            "nope",
            "SLOTS.TOTAL",
            "slots.total ",
        ] {
            setting_names.push(odd.to_string());
        }
        Generator {
            rng: Rng(seed),
            pools,
            budget: Budgets {
                project_add: 16,
                session_new: 64,
                prompt_send: 48,
                rename: 64,
                group_names: 64,
            },
            next_tag: 1000,
            setting_names,
            last_wrong: "",
        }
    }

    fn tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    fn plain_initialize(&self) -> Chunk {
        Chunk::plain(
            br#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocol":1,"client":"fuzz"}}"#
                .to_vec(),
        )
    }

    /// One connection's inputs.
    fn batch(&mut self) -> Batch {
        let size = match self.rng.below(10) {
            0 => 1 + self.rng.below(4),
            1..=7 => 16 + self.rng.below(112),
            _ => 128 + self.rng.below(256),
        };
        let mut chunks = Vec::with_capacity(size + 5);
        match self.rng.below(100) {
            0..=79 => chunks.push(self.initialize()),
            80..=89 => {
                for _ in 0..1 + self.rng.below(4) {
                    let chunk = self.chunk();
                    chunks.push(chunk);
                }
                chunks.push(self.initialize());
            }
            90..=94 => {}
            _ => {
                let id = Some(self.tag().to_string());
                let (text, expect) = self.call_of("initialize", id);
                chunks.push(Chunk {
                    bytes: text.into_bytes(),
                    expect,
                });
            }
        }
        for _ in 0..size {
            let chunk = self.chunk();
            chunks.push(chunk);
        }
        Batch {
            chunks,
            unterminated: self.rng.below(64) == 0,
        }
    }

    fn initialize(&mut self) -> Chunk {
        let tag = self.tag();
        let exec = if self.rng.below(3) == 0 {
            format!(r#","exec_id":"exe-fz-{}""#, self.rng.below(8))
        } else {
            String::new()
        };
        Chunk::plain(
            format!(
                r#"{{"jsonrpc":"2.0","id":{tag},"method":"initialize","params":{{"protocol":1,"client":"fuzz"{exec}}}}}"#
            )
            .into_bytes(),
        )
    }

    fn chunk(&mut self) -> Chunk {
        match self.rng.below(1000) {
            0..=149 => Chunk::plain(self.random_bytes()),
            150..=299 => {
                let id = self.id();
                let (text, _) = self.call(id);
                Chunk::plain(self.garble(text.into_bytes()))
            }
            300..=379 => Chunk::plain(self.structural()),
            380..=399 => Chunk::plain(
                self.rng
                    .pick(&["", " ", "\t", "\r", " \t \r"])
                    .as_bytes()
                    .to_vec(),
            ),
            400..=401 if self.rng.below(10) == 0 => Chunk::plain(self.long_line()),
            _ => {
                let id = self.id();
                let (text, expect) = self.call(id);
                Chunk {
                    bytes: text.into_bytes(),
                    expect,
                }
            }
        }
    }

    /// An id of any kind; None makes a notification.
    fn id(&mut self) -> Option<String> {
        let tag = self.tag();
        match self.rng.below(100) {
            0..=44 => Some(tag.to_string()),
            45..=69 => Some(format!("\"t{tag}\"")),
            70..=73 => None,
            74..=78 => Some("null".into()),
            79..=83 => Some(self.rng.pick(&["1", "\"a\"", "0"]).to_string()),
            84..=91 => Some(
                self.rng
                    .pick(&[
                        "true",
                        "false",
                        "{}",
                        "[]",
                        "[1]",
                        "{\"a\":1}",
                        "[[[]]]",
                        "[\"t\"]",
                    ])
                    .to_string(),
            ),
            _ => Some(
                self.rng
                    .pick(&[
                        "-0",
                        "1.5",
                        "1e308",
                        "18446744073709551617",
                        "18446744073709551616",
                        "-9223372036854775809",
                        "9223372036854775807",
                        "18446744073709551615",
                        "-9223372036854775808",
                        "1E2",
                        "\"\"",
                        "\"\\u0000\"",
                        "\"\\ud83e\\udd80\"",
                    ])
                    .to_string(),
            ),
        }
    }

    fn call(&mut self, id: Option<String>) -> (String, Option<(&'static str, String)>) {
        if self.rng.below(20) == 0 {
            let method = self.unknown_method();
            let params = if self.rng.below(2) == 0 {
                None
            } else {
                Some("{}".to_string())
            };
            return (self.envelope(id, &method, params), None);
        }
        let method = *self.rng.pick(METHODS);
        self.call_of(method, id)
    }

    fn call_of(
        &mut self,
        method: &str,
        id: Option<String>,
    ) -> (String, Option<(&'static str, String)>) {
        let (params, expect) = self.params(method);
        let expect = if id.is_some() { expect } else { None };
        (self.envelope(id, &q(method), params), expect)
    }

    fn envelope(
        &mut self,
        id: Option<String>,
        method_json: &str,
        params: Option<String>,
    ) -> String {
        let mut members = Vec::with_capacity(4);
        members.push(r#""jsonrpc":"2.0""#.to_string());
        if let Some(id) = id {
            members.push(format!(r#""id":{id}"#));
        }
        members.push(format!(r#""method":{method_json}"#));
        if let Some(params) = params {
            members.push(format!(r#""params":{params}"#));
        }
        if self.rng.below(10) == 0 {
            self.shuffle(&mut members);
        }
        let separator = if self.rng.below(20) == 0 { " , " } else { "," };
        format!("{{{}}}", members.join(separator))
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.rng.below(i + 1);
            items.swap(i, j);
        }
    }

    fn unknown_method(&mut self) -> String {
        match self.rng.below(10) {
            0..=6 => q(self.rng.word(&[
                "",
                "STATUS",
                "status ",
                " status",
                "status\u{0}",
                "project",
                "project.",
                ".",
                "events",
                "initialize2",
                "rpc.discover",
                "__proto__",
                "session.new.x",
                "prompt.send\n",
                "ŝtatus",
                "frobnicate",
            ])),
            7 | 8 => {
                let len = 1 + self.rng.below(20);
                q(&self.ascii(len))
            }
            _ => q(&"m".repeat(if self.rng.below(10) == 0 {
                100_000
            } else {
                10_000
            })),
        }
    }

    /// Whether this call names a real target (creations only within their budget).
    fn real(&mut self, method: &str) -> bool {
        let budget = match method {
            "project.add" => &mut self.budget.project_add,
            "session.new" => &mut self.budget.session_new,
            "prompt.send" => &mut self.budget.prompt_send,
            "session.rename" => &mut self.budget.rename,
            "project.set" | "project.archive" | "session.archive" | "driver.claim"
            | "driver.release" | "prompt.cancel" | "settings.set" | "group.set" => {
                return self.rng.below(100) < 25
            }
            _ => return self.rng.below(100) < 75,
        };
        if *budget > 0 && self.rng.below(100) < 20 {
            *budget -= 1;
            true
        } else {
            false
        }
    }

    /// Params text (None: absent) and the finding a result to them would be.
    fn params(&mut self, method: &str) -> (Option<String>, Option<(&'static str, String)>) {
        let schema = schema(method);
        let roll = self.rng.below(100);
        if schema.is_empty() {
            return match roll {
                0..=59 => (None, None),
                60..=69 => (Some("null".into()), None),
                70..=79 => (Some("{}".into()), None),
                80..=84 => (Some("[]".into()), None),
                85..=89 => (Some(format!("{{{}}}", self.extras(true).join(","))), None),
                90..=94 => (
                    Some(format!("[{}]", self.chaos_value(true))),
                    Some(("positional (array) params are accepted", method.to_string())),
                ),
                _ => {
                    let (text, what) = *self.rng.pick(&[
                        ("1", "a number"),
                        ("\"x\"", "a string"),
                        ("true", "a boolean"),
                        ("1e308", "a float"),
                    ]);
                    (
                        Some(text.to_string()),
                        Some(("scalar params are accepted", format!("{method} ({what})"))),
                    )
                }
            };
        }
        let real = self.real(method);
        match roll {
            0..=44 => (Some(self.object(method, schema, real, Mode::Good)), None),
            45..=59 => {
                let index = self.rng.below(schema.len());
                let wrong = self.object(method, schema, real, Mode::Wrong(index));
                let what = self.last_wrong;
                (
                    Some(wrong),
                    Some((
                        "a param of the wrong type is accepted",
                        format!("{method}.{} ({what})", schema[index].name),
                    )),
                )
            }
            60..=67 => {
                let required: Vec<usize> =
                    (0..schema.len()).filter(|&i| schema[i].required).collect();
                if required.is_empty() {
                    return (Some(self.object(method, schema, real, Mode::Good)), None);
                }
                let index = *self.rng.pick(&required);
                (
                    Some(self.object(method, schema, real, Mode::Missing(index))),
                    Some((
                        "a request without a required param is accepted",
                        format!("{method}.{}", schema[index].name),
                    )),
                )
            }
            68..=77 => {
                let object = self.object(method, schema, real, Mode::Good);
                let extras = self.extras(real);
                let inner = object.trim_start_matches('{').trim_end_matches('}');
                let joined = if inner.is_empty() {
                    extras.join(",")
                } else {
                    format!("{inner},{}", extras.join(","))
                };
                (Some(format!("{{{joined}}}")), None)
            }
            78..=87 => (Some(self.object(method, schema, real, Mode::Chaos)), None),
            _ => match self.rng.below(6) {
                0 => (None, None),
                1 => (Some("null".into()), None),
                2 => (Some("[]".into()), None),
                3 | 4 => {
                    let values: Vec<String> =
                        schema.iter().map(|p| self.good(method, p, false)).collect();
                    (
                        Some(format!("[{}]", values.join(","))),
                        Some(("positional (array) params are accepted", method.to_string())),
                    )
                }
                _ => {
                    let (text, what) = *self.rng.pick(&[
                        ("1", "a number"),
                        ("\"x\"", "a string"),
                        ("true", "a boolean"),
                        ("1e308", "a float"),
                    ]);
                    (
                        Some(text.to_string()),
                        Some(("scalar params are accepted", format!("{method} ({what})"))),
                    )
                }
            },
        }
    }

    fn object(&mut self, method: &str, schema: &[P], real: bool, mode: Mode) -> String {
        let mut members = Vec::with_capacity(schema.len());
        for (index, param) in schema.iter().enumerate() {
            let value = match mode {
                Mode::Wrong(wrong) if wrong == index => Some(self.wrong(param.kind)),
                Mode::Missing(missing) if missing == index => None,
                Mode::Chaos => match self.rng.below(10) {
                    0..=4 => None,
                    5 | 6 => Some(self.good(method, param, real)),
                    _ => Some(self.chaos_for(param.kind, real)),
                },
                _ if param.required => Some(self.good(method, param, real)),
                _ => (self.rng.below(10) < 4).then(|| self.good(method, param, real)),
            };
            if let Some(value) = value {
                members.push(format!("{}:{value}", q(param.name)));
            }
        }
        if self.rng.below(10) == 0 {
            self.shuffle(&mut members);
        }
        format!("{{{}}}", members.join(","))
    }

    /// A value of the documented type (its content may still be refused).
    fn good(&mut self, method: &str, param: &P, real: bool) -> String {
        match param.kind {
            Kind::Text if method == "prompt.send" && real => q(&format!(
                "@fake answer=ok\n{}",
                self.rng.pick(&["hi", "a b", "go"])
            )),
            Kind::Text => self.string(real),
            Kind::Name
                if real && matches!(method, "project.add" | "session.rename" | "session.new") =>
            {
                match self.rng.below(10) {
                    0 => q(self.rng.word(&["", "  ", "fz-main"])),
                    _ => {
                        let tag = self.tag();
                        q(&format!("fz-n{tag}"))
                    }
                }
            }
            Kind::Name => self.string(real),
            Kind::Sel(sel) => self.selector(method, sel, real),
            Kind::Bool => self.rng.pick(&["true", "false"]).to_string(),
            Kind::Generation => self
                .rng
                .pick(&[
                    "0",
                    "1",
                    "2",
                    "3",
                    "-1",
                    "9223372036854775807",
                    "-9223372036854775808",
                ])
                .to_string(),
            Kind::Subscription => self
                .rng
                .pick(&["0", "1", "2", "3", "7", "100", "18446744073709551615"])
                .to_string(),
            Kind::After => self
                .rng
                .pick(&["0", "1", "5", "1000", "9223372036854775807", "null"])
                .to_string(),
            Kind::Groups => self
                .rng
                .pick(&[
                    "[]",
                    "[\"fz-g1\"]",
                    "[\"fz-g1\",\"fz-g2\"]",
                    "[\"\"]",
                    "[\"fz-g3\",\"fz-g3\"]",
                ])
                .to_string(),
            Kind::Images => self
                .rng
                .pick(&[
                    "[]",
                    "[\"/nonexistent-fz/a.png\"]",
                    "[\"\"]",
                    "[\"relative-fz.png\"]",
                ])
                .to_string(),
            Kind::Engine => q(self.rng.word(ENGINES)),
            Kind::SettingName => {
                let index = self.rng.below(self.setting_names.len());
                q(&self.setting_names[index])
            }
            Kind::SettingValue => self
                .rng
                .pick(&[
                    "\"1\"",
                    "\"3\"",
                    "\"0\"",
                    "\"-1\"",
                    "\"\"",
                    "\"true\"",
                    "\"false\"",
                    "\"15,45\"",
                    "\"1,2,3\"",
                    "\"abc\"",
                    "\"5000\"",
                    "\"1e3\"",
                    "\"99999999999999999999\"",
                    "\"  3  \"",
                    "\"/nonexistent-fz/engine\"",
                    "null",
                ])
                .to_string(),
            Kind::Group => self.group_name(),
            Kind::Path if real => q(&self.pools.project_dir),
            Kind::Path => q(self
                .rng
                .word(&["/nonexistent-fz/x", "", "relative-fz", "/dev/null"])),
            Kind::Protocol => self
                .rng
                .pick(&["1", "1", "1", "1", "2", "0", "-1", "4294967297"])
                .to_string(),
        }
    }

    fn group_name(&mut self) -> String {
        if self.budget.group_names > 0 && self.rng.below(20) == 0 {
            self.budget.group_names -= 1;
            self.string(true)
        } else {
            q(self.rng.word(GROUPS))
        }
    }

    /// A value of another JSON type than `kind`'s (never null: null reads as absent).
    fn wrong(&mut self, kind: Kind) -> String {
        let class = kind.class();
        loop {
            let (text, what) = *self.rng.pick(WRONG);
            let fits = match class {
                Class::Str => text.starts_with('"'),
                Class::Bool => text == "true" || text == "false",
                Class::Int => matches!(text, "0" | "-1" | "12"),
                Class::List => matches!(text, "[]" | "[\"a\"]"),
            };
            if !fits {
                self.last_wrong = what;
                return text.to_string();
            }
        }
    }

    /// Anything at all where `kind` goes — except a real target, or a new group or path.
    fn chaos_for(&mut self, kind: Kind, real: bool) -> String {
        match kind {
            // A string of our own could name something real (or make a new group): strings
            // there are selectors that name nothing.
            Kind::Sel(_) | Kind::Path | Kind::Group if self.rng.below(2) == 0 => {
                self.selector("", Sel::Project, false)
            }
            Kind::Sel(_) | Kind::Path | Kind::Group => {
                let value = self.chaos_value(real);
                if value.starts_with('"') {
                    self.wrong(Kind::Text)
                } else {
                    value
                }
            }
            _ => self.chaos_value(real),
        }
    }

    fn chaos_value(&mut self, tame: bool) -> String {
        match self.rng.below(100) {
            0..=24 => self.string(tame),
            25..=44 => self.rng.pick(NUMBERS).to_string(),
            45..=46 => self.rng.pick(BAD_NUMBERS).to_string(),
            47..=56 => self.rng.pick(&["true", "false", "null"]).to_string(),
            57..=71 => self
                .rng
                .pick(&[
                    "[]",
                    "{}",
                    "[1,2]",
                    "{\"a\":null}",
                    "[\"x\",{}]",
                    "[null]",
                    "{\"\":[]}",
                ])
                .to_string(),
            72..=81 => {
                let depth = *self.rng.pick(DEPTHS);
                self.nest(depth)
            }
            82..=86 => self
                .rng
                .pick(&[
                    r#""\ud800""#,
                    r#""\udc00x""#,
                    r#""\x41""#,
                    r#""\u12""#,
                    "\"a\tb\"",
                    "\"a\nb\"",
                    "\"unterminated",
                    "'single'",
                ])
                .to_string(),
            _ => self.string(tame),
        }
    }

    fn nest(&mut self, depth: usize) -> String {
        if self.rng.below(2) == 0 {
            format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
        } else {
            format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
        }
    }

    /// Members the protocol does not know (or knows elsewhere).
    fn extras(&mut self, tame: bool) -> Vec<String> {
        (0..1 + self.rng.below(3))
            .map(|_| {
                let key = match self.rng.below(8) {
                    0 => "\"extra\"".to_string(),
                    1 => "\"__proto__\"".to_string(),
                    2 => "\"\"".to_string(),
                    3 => "\"params\"".to_string(),
                    4 => "\"id\"".to_string(),
                    5 => "\"é\"".to_string(),
                    6 if !tame => q(&"k".repeat(5_000)),
                    _ => q(&self.ascii(6)),
                };
                let value = self.chaos_value(true);
                format!("{key}:{value}")
            })
            .collect()
    }

    /// A string as JSON text; `tame` keeps it short.
    fn string(&mut self, tame: bool) -> String {
        match self.rng.below(1000) {
            0..=399 => q(self.rng.word(WORDS)),
            400..=549 => {
                let len = self.rng.below(24);
                q(&self.ascii(len))
            }
            550..=649 => q(self.rng.word(UNICODE)),
            650..=729 => self.rng.pick(RAW_STRINGS).to_string(),
            730..=799 => q(self.rng.word(SPACES)),
            800..=879 => q(self.rng.word(METACHARS)),
            880..=979 => {
                let len = self.rng.below(32);
                let bytes: Vec<u8> = (0..len).map(|_| self.rng.next_u64() as u8).collect();
                q(&String::from_utf8_lossy(&bytes))
            }
            980..=998 if !tame => q(&"y".repeat(1000 + self.rng.below(7000))),
            999 if !tame => q(&"z".repeat(if self.rng.below(20) == 0 {
                900_000
            } else {
                100_000
            })),
            _ => q(self.rng.word(WORDS)),
        }
    }

    fn ascii(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| (0x20 + self.rng.below(95) as u8) as char)
            .collect()
    }

    /// A selector; a real one (an id, a name or title, a unique id prefix) only if `real`.
    fn selector(&mut self, method: &str, sel: Sel, real: bool) -> String {
        if real {
            let pools = &self.pools;
            let (ids, names): (Vec<&String>, Vec<&String>) = match sel {
                Sel::Project => (
                    pools.project_ids.iter().collect(),
                    pools.project_names.iter().collect(),
                ),
                Sel::Session if method == "prompt.send" => (vec![&pools.runner], Vec::new()),
                Sel::Session => {
                    let mut ids: Vec<&String> = pools.session_ids.iter().collect();
                    // The runner's history grows: read it now and then only.
                    if !matches!(method, "session.archive" | "session.rename") {
                        ids.push(&pools.runner);
                    }
                    let keep = if self.rng.below(20) == 0 {
                        ids.len()
                    } else {
                        pools.session_ids.len()
                    };
                    ids.truncate(keep);
                    (ids, pools.session_titles.iter().collect())
                }
                Sel::Prompt => (pools.prompt_ids.iter().collect(), Vec::new()),
                Sel::Target => {
                    let mut ids: Vec<&String> = pools.prompt_ids.iter().collect();
                    ids.extend(pools.session_ids.iter());
                    (ids, pools.session_titles.iter().collect())
                }
            };
            if !ids.is_empty() {
                let roll = self.rng.below(10);
                let text = if roll < 5 || names.is_empty() && roll < 8 {
                    ids[self.rng.below(ids.len())].clone()
                } else if roll < 8 {
                    names[self.rng.below(names.len())].clone()
                } else {
                    let id = ids[self.rng.below(ids.len())];
                    id[..id.len() - 1].to_string()
                };
                return q(&text);
            }
        }
        match self.rng.below(100) {
            0..=9 => q(self.rng.word(&["", " ", "\t\n"])),
            10..=19 => q(self.rng.word(&["0", "01"])),
            20..=89 => {
                let len = self.rng.below(16);
                q(&format!("~{}", self.ascii(len)))
            }
            90..=97 => {
                q(self
                    .rng
                    .word(&["%", "_", "' OR '1'='1", "../..", "\u{0}", "~é", "\u{7f}"]))
            }
            _ => q(&format!(
                "~{}",
                "x".repeat(if self.rng.below(10) == 0 {
                    100_000
                } else {
                    10_000
                })
            )),
        }
    }

    fn random_bytes(&mut self) -> Vec<u8> {
        let len = match self.rng.below(10) {
            0..=3 => self.rng.below(16),
            4..=8 => 16 + self.rng.below(112),
            _ => 128 + self.rng.below(1920),
        };
        (0..len)
            .map(|_| match self.rng.below(10) {
                0..=4 => self.rng.next_u64() as u8,
                5..=7 => *self.rng.pick(PUNCT),
                _ => 0x20 + self.rng.below(95) as u8,
            })
            .collect()
    }

    fn garble(&mut self, mut bytes: Vec<u8>) -> Vec<u8> {
        for _ in 0..1 + self.rng.below(3) {
            let len = bytes.len();
            if len == 0 {
                bytes.push(b'{');
                continue;
            }
            let at = self.rng.below(len);
            match self.rng.below(9) {
                0 => bytes.truncate(at),
                1 => {
                    let end = (at + 1 + self.rng.below(16)).min(len);
                    bytes.drain(at..end);
                }
                2 => bytes.insert(at, self.rng.next_u64() as u8),
                3 => bytes[at] ^= 1 << self.rng.below(8),
                4 => bytes[at] = *self.rng.pick(PUNCT),
                5 => {
                    let end = (at + 1 + self.rng.below(32)).min(len);
                    let span = bytes[at..end].to_vec();
                    bytes.splice(at..at, span);
                }
                6 => {
                    let other = self.rng.below(len);
                    bytes.swap(at, other);
                }
                7 => {
                    let sequence = *self.rng.pick(BAD_UTF8);
                    bytes.splice(at..at, sequence.iter().copied());
                }
                _ => {
                    // Cut right after a quote, a colon or a comma.
                    if let Some(cut) = bytes[at..].iter().position(|b| b"\":,".contains(b)) {
                        bytes.truncate(at + cut + 1);
                    }
                }
            }
        }
        bytes
    }

    /// JSON that breaks the envelope: versions, methods, top-level types, batches, nesting,
    /// duplicate or escaped keys, what surrounds the object.
    fn structural(&mut self) -> Vec<u8> {
        let tag = self.tag();
        let id = if self.rng.below(2) == 0 {
            tag.to_string()
        } else {
            format!("\"t{tag}\"")
        };
        let text = match self.rng.below(23) {
            0 => format!(
                r#"{{"jsonrpc":{},"id":{id},"method":"status"}}"#,
                self.rng.pick(&[
                    "\"1.0\"",
                    "2.0",
                    "\"2\"",
                    "null",
                    "\"2.0 \"",
                    "[\"2.0\"]",
                    "\"\"",
                    "2"
                ])
            ),
            1 => format!(r#"{{"id":{id},"method":"status"}}"#),
            2 => format!(r#"{{"jsonrpc":"2.0","id":{id}}}"#),
            3 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":{}}}"#,
                self.rng.pick(&["5", "null", "[\"status\"]", "{}", "true"])
            ),
            4 => self
                .rng
                .pick(&[
                    "1",
                    "\"status\"",
                    "true",
                    "false",
                    "null",
                    "-0",
                    "1e308",
                    "\"\"",
                ])
                .to_string(),
            5 => {
                let (a, _) = self.call(Some(tag.to_string()));
                let (b, _) = self.call(Some(format!("\"b{tag}\"")));
                format!("[{a},{b}]")
            }
            6 => self
                .rng
                .pick(&["[]", "[1]", "[[]]", "[{}]", "[null]"])
                .to_string(),
            7 => "{}".to_string(),
            8 | 9 => {
                let depth = *self.rng.pick(DEPTHS);
                self.nest(depth)
            }
            10 => {
                let depth = *self.rng.pick(DEPTHS);
                let nested = self.nest(depth);
                let method = self.rng.pick(METHODS);
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"a":{nested}}}}}"#
                )
            }
            11 => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"id":{},"method":"status","method":"{}"}}"#,
                self.rng.pick(&["1", "\"x\"", "null", "{}"]),
                self.rng.pick(&["nope", "status", "project.list"])
            ),
            12 => format!(r#"{{"\u006asonrpc":"2.0","\u0069d":{id},"\u006dethod":"st\u0061tus"}}"#),
            13 => format!("\u{feff}{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"status\"}}"),
            14 => {
                let (call, _) = self.call(Some(id.clone()));
                let tail = self
                    .rng
                    .pick(&[" x", ",", "}", "]", " {}", "\u{0}"])
                    .to_string();
                format!("{call}{tail}")
            }
            15 => {
                let (a, _) = self.call(Some(id.clone()));
                let (b, _) = self.call(Some(format!("\"c{tag}\"")));
                format!("{a}{b}")
            }
            16 => format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"status\"}}\r"),
            17 => format!(" \t {{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"status\"}}\t "),
            18 => format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"status\",\"params\":"),
            19 => format!("\u{c}{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"status\"}}"),
            20 => format!(
                r#"{{"jsonrpc":"2.0","id":{},"method":"status"}}"#,
                self.rng
                    .pick(&["1e400", "-1e400", "1.0e-400", "01", "0x1", "NaN"])
            ),
            21 => {
                let depth = *self.rng.pick(DEPTHS);
                let nested = self.nest(depth);
                format!(r#"{{"jsonrpc":"2.0","id":{nested},"method":"status"}}"#)
            }
            _ => format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"status","params":{},"params":{}}}"#,
                self.rng.pick(&["[]", "{}", "1", "null"]),
                self.rng.pick(&["[]", "{}", "null"])
            ),
        };
        text.into_bytes()
    }

    /// Lines at and past the 1 MiB limit.
    fn long_line(&mut self) -> Vec<u8> {
        let tag = self.tag();
        match self.rng.below(5) {
            0 => vec![b'x'; MAX_LINE + 1 + self.rng.below(64)],
            1 | 2 => {
                // A status request padded with spaces to exactly the limit (answered), or one
                // byte past it (refused).
                let mut line =
                    format!(r#"{{"jsonrpc":"2.0","id":{tag},"method":"status"}}"#).into_bytes();
                let length = MAX_LINE + self.rng.below(2);
                line.resize(length, b' ');
                line
            }
            3 => {
                let head = format!(
                    r#"{{"jsonrpc":"2.0","id":{tag},"method":"session.show","params":{{"session":"~"#
                );
                let mut line = head.into_bytes();
                let fill = MAX_LINE - line.len() - 3;
                line.resize(line.len() + fill, b'y');
                line.extend_from_slice(b"\"}}");
                line
            }
            _ => vec![b'{'; 3 * MAX_LINE],
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Display.

/// Bytes for a person: text as it is, other bytes as ⟨hex⟩, long runs as ⟨c×N⟩, cut in the
/// middle past 600 characters.
fn show(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    let mut shown = 0;
    while i < bytes.len() {
        if shown > 600 {
            let tail_start = bytes.len().saturating_sub(80).max(i);
            out += &format!(" …⟨{} bytes in all⟩… ", bytes.len());
            out += &show_plain(&bytes[tail_start..]);
            break;
        }
        let b = bytes[i];
        let mut run = 1;
        while i + run < bytes.len() && bytes[i + run] == b {
            run += 1;
        }
        if run >= 16 {
            let c = if (0x21..0x7f).contains(&b) {
                (b as char).to_string()
            } else {
                format!("{b:02x}")
            };
            out += &format!("⟨{c}×{run}⟩");
            shown += 8;
            i += run;
            continue;
        }
        let width = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => 1,
        };
        if width > 1 && i + width <= bytes.len() {
            if let Ok(text) = std::str::from_utf8(&bytes[i..i + width]) {
                out += text;
                shown += 1;
                i += width;
                continue;
            }
        }
        if (0x20..0x7f).contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("⟨{b:02x}⟩");
        }
        shown += 1;
        i += 1;
    }
    out
}

fn show_plain(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .map(|c| {
            if c.is_control() {
                format!("⟨{:02x}⟩", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// A finding's detail on one line, cut short: the example of a variant.
fn example(detail: &str) -> String {
    cut(&detail.replace('\n', " | "), 400)
}

fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let end = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}… ({} bytes)", &text[..end], text.len())
}

pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
