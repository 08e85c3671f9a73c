//! corral's overhead around a real engine run (issue 9, Performance): Claude Code, OpenCode and
//! Codex, each offline against its loopback mock model server (the tests' `mock_models/` and
//! `mock_responses/`, in the private environment `src/testkit/engines.rs` builds).
//!
//! Per engine, one daemon home and project; then RUNS pairs, interleaved (the order inside a
//! pair alternates), after one warm-up pair:
//!
//! - **through corral**: `corral send SESSION PROMPT --wait` as a whole process (a new titled
//!   session each time, so every run is the same first run: no resume, no title request),
//!   wall clock from spawn to exit;
//! - **directly**: the same CLI on the same prompt — the very invocation corral made (argv,
//!   environment, working directory, stdin) replayed by this program, stdout and stderr read
//!   to their end as corral reads them, wall clock from spawn to exit.
//!
//! The engine's own run time is taken in both by the same timer: corral's
//! `engines.<engine>.path` is this very program, which, when `CORRAL_BENCH_TIMER_INNER` is
//! set, runs that program (the engine's wrapper script, which execs the real CLI) as its
//! child and appends the child's wall time, and the invocation it was given, to
//! `CORRAL_BENCH_TIMER_LOG`. Engine times vary a lot (opencode ~2 s), so each figure is a
//! difference within one run, never a difference of medians of different runs:
//!
//! - `send --wait − engine`: what corral adds around the engine (goal: p50 ≤ 15 ms). It
//!   includes the timer's own start and exit (the floor below).
//! - `direct − engine`: the same for a direct run: the timer's cost, and any wait for
//!   output still open after the engine's exit (the floor).
//! - `vs direct`: (send − engine) − (direct − engine) of each pair: corral against running the
//!   CLI directly, the engine's variance and the timer's cost cancelled.
//! - `send − direct`: the raw wall-clock difference of each pair, for reference (it carries the
//!   engine's run-to-run variance).
//! - second view: `send − (run ended − run started)` from `corral history --json` (ms).
//! - where the time goes: medians of the steps of a run, from the bench's clock (send spawned,
//!   exited), the prompt's and run's rows (`history --json`), the events' `at`
//!   (`watch --json`) and the timer (engine started, ended).
//!
//! Run: `cargo build --release && cargo build --release --examples &&
//!       target/release/examples/engine_overhead_bench [CLAUDE_RUNS [OPENCODE_RUNS [CODEX_RUNS]]]`
//! (defaults 20 10 20; 0 skips an engine). `corral` is found beside the example's directory
//! (target/release/). The engines' binaries: `CORRAL_CLAUDE_BIN`, `CORRAL_OPENCODE_BIN`,
//! `CORRAL_CODEX_BIN`, else the `.ci/run` install under `~/.cache/corral-ci/`; an engine whose
//! binary is not found is skipped, saying why.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use corral::testkit::daemon::DaemonHome;
use corral::testkit::engines::{Engine, EngineEnv};
use corral::testkit::mock_models::anthropic::MockAnthropic;
use corral::testkit::mock_models::chat::MockChat;
use corral::testkit::mock_models::Answer;
use corral::testkit::mock_responses::{self, MockResponses};

/// Set in the daemon's environment (so in every engine child's): this program, started as an
/// engine, is the timer around this program.
const TIMER_INNER: &str = "CORRAL_BENCH_TIMER_INNER";
/// Where the timer appends one JSON line per run.
const TIMER_LOG: &str = "CORRAL_BENCH_TIMER_LOG";

const PROMPT: &str = "say pong";
const ANSWER: &str = "pong";

fn main() {
    if let Some(inner) = std::env::var_os(TIMER_INNER) {
        timer(inner);
    }
    let arg = |index: usize, default: usize| -> usize {
        std::env::args()
            .nth(index)
            .map(|value| value.parse().expect("a number of runs"))
            .unwrap_or(default)
    };
    let plan = [
        (Engine::Claude, arg(1, 20)),
        (Engine::Opencode, arg(2, 10)),
        (Engine::Codex, arg(3, 20)),
    ];
    let corral = corral::testkit::built("corral").unwrap_or_else(|missing| {
        eprintln!("{missing}");
        std::process::exit(2);
    });
    println!(
        "corral {}; prompt {PROMPT:?}, answer {ANSWER:?}; each engine's runs interleaved with \
         direct runs of the same invocation; load average at start: {}",
        corral.display(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut summaries = Vec::new();
    for (engine, runs) in plan {
        if runs == 0 {
            println!("\n== {}: skipped (0 runs asked) ==", engine.name());
            continue;
        }
        let binary = match engine_binary(engine) {
            Ok(binary) => binary,
            Err(why) => {
                println!("\n== {}: skipped: {why} ==", engine.name());
                continue;
            }
        };
        summaries.push(bench(engine, &binary, runs));
    }
    if !summaries.is_empty() {
        println!("\n== summary (goal: corral's overhead p50 <= 15 ms) ==");
        for line in summaries {
            println!("  {line}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The timer: this program as the engine corral (or a direct run) starts.

/// Runs `inner` with this process's arguments as its child (stdio passed on, stdin read first
/// and handed over whole), appends the child's wall time and this invocation to the log, and
/// exits as the child did.
fn timer(inner: OsString) -> ! {
    let mut input = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut input);
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let started_at = epoch_us();
    let started = Instant::now();
    let mut child = Command::new(&inner)
        .args(&args)
        .stdin(if input.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "timer: {} does not start: {error}",
                Path::new(&inner).display()
            )
        });
    let feeder = child.stdin.take().map(|mut pipe| {
        let input = input.clone();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        })
    });
    let status = child.wait().expect("timer: waiting for the engine");
    let elapsed = started.elapsed();
    let ended_at = epoch_us();
    if let Some(feeder) = feeder {
        let _ = feeder.join();
    }
    let record = json!({
        "argv": std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect::<Vec<_>>(),
        "cwd": std::env::current_dir().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default(),
        "env": std::env::vars_os()
            .map(|(k, v)| [k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()])
            .collect::<Vec<_>>(),
        "stdin": String::from_utf8_lossy(&input),
        "started_us": started_at,
        "ended_us": ended_at,
        "elapsed_ns": elapsed.as_nanos() as u64,
        "exit": status.code(),
    });
    if let Some(log) = std::env::var_os(TIMER_LOG) {
        let mut line = record.to_string();
        line.push('\n');
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("timer: the log opens");
        file.write_all(line.as_bytes()).expect("timer: the log");
    }
    use std::os::unix::process::ExitStatusExt;
    std::process::exit(
        status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
    );
}

/// One run as the timer saw it.
struct Timed {
    argv: Vec<String>,
    cwd: String,
    env: Vec<(String, String)>,
    stdin: String,
    started_us: u64,
    ended_us: u64,
    elapsed: Duration,
}

impl Timed {
    fn parse(line: &str) -> Timed {
        let record: Value = serde_json::from_str(line).expect("a timer record");
        let strings = |value: &Value| -> Vec<String> {
            value
                .as_array()
                .into_iter()
                .flatten()
                .map(|item| item.as_str().unwrap_or_default().to_string())
                .collect()
        };
        Timed {
            argv: strings(&record["argv"]),
            cwd: record["cwd"].as_str().unwrap_or_default().to_string(),
            env: record["env"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|pair| {
                    let pair = strings(pair);
                    (pair[0].clone(), pair[1].clone())
                })
                .collect(),
            stdin: record["stdin"].as_str().unwrap_or_default().to_string(),
            started_us: record["started_us"].as_u64().unwrap_or(0),
            ended_us: record["ended_us"].as_u64().unwrap_or(0),
            elapsed: Duration::from_nanos(record["elapsed_ns"].as_u64().unwrap_or(0)),
        }
    }
}

fn epoch_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as u64
}

// ---------------------------------------------------------------------------------------------
// The engines.

/// The engine's native binary: its variable, else where `.ci/run` installs it.
fn engine_binary(engine: Engine) -> Result<PathBuf, String> {
    let var = engine.bin_var();
    if let Some(value) = std::env::var_os(var) {
        let path = PathBuf::from(value);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{var}={} names no file", path.display()))
        };
    }
    let cache =
        PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/corral-ci");
    let found = match engine {
        Engine::Claude => {
            Some(cache.join("claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude"))
        }
        Engine::Opencode => {
            Some(cache.join("opencode/node_modules/opencode-linux-x64/bin/opencode"))
        }
        // node_modules/@openai/codex-<platform>/vendor/<target>/bin/codex
        Engine::Codex => std::fs::read_dir(cache.join("codex/node_modules/@openai"))
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|package| {
                std::fs::read_dir(package.path().join("vendor"))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .map(|target| target.path().join("bin/codex"))
            .find(|path| path.is_file()),
    };
    match found {
        Some(path) if path.is_file() => Ok(path),
        _ => Err(format!(
            "{var} is not set and no {} is installed under {}",
            engine.name(),
            cache.display()
        )),
    }
}

/// The mock model server an engine talks to.
enum Mock {
    Anthropic(MockAnthropic),
    Chat(MockChat),
    Responses(MockResponses),
}

impl Mock {
    fn start(engine: Engine) -> Mock {
        match engine {
            Engine::Claude => Mock::Anthropic(MockAnthropic::start()),
            Engine::Opencode => Mock::Chat(MockChat::start()),
            Engine::Codex => Mock::Responses(MockResponses::start()),
        }
    }

    fn base_url(&self) -> String {
        match self {
            Mock::Anthropic(mock) => mock.base_url(),
            Mock::Chat(mock) => mock.base_url(),
            Mock::Responses(mock) => mock.base_url(),
        }
    }

    /// The next model call answers `text`.
    fn answer(&self, text: &str) {
        match self {
            Mock::Anthropic(mock) => mock.script([Answer::text(text)]),
            Mock::Chat(mock) => mock.script([Answer::text(text)]),
            Mock::Responses(mock) => mock.script([mock_responses::Answer::text(text)]),
        }
    }

    fn unused_answers(&self) -> usize {
        match self {
            Mock::Anthropic(mock) => mock.unused_answers(),
            Mock::Chat(mock) => mock.unused_answers(),
            Mock::Responses(mock) => mock.unused_answers(),
        }
    }
}

/// One engine's world, dropped in field order: the daemon and every process of its home
/// first, then the mock, then the engine's files.
struct Rig {
    home: DaemonHome,
    mock: Mock,
    _env: EngineEnv,
    engine: Engine,
    log: PathBuf,
    /// Lines of the timer's log already read.
    seen: usize,
    /// The last invocation corral made, which the direct runs replay.
    last: Option<Timed>,
}

impl Rig {
    fn start(engine: Engine, binary: &Path) -> Rig {
        let mock = Mock::start(engine);
        let env = EngineEnv::new(engine, binary, &mock.base_url());
        let home = DaemonHome::new();
        let log = home.path().join("engine-times.jsonl");
        // The daemon, and so every engine child, carries the timer's variables; the commands
        // below (which strip CORRAL_* variables) do not.
        let output = home
            .corral(&["daemon", "--detach"])
            .env(TIMER_INNER, env.wrapper())
            .env(TIMER_LOG, &log)
            .output()
            .expect("corral daemon --detach");
        assert!(output.status.success(), "the daemon starts: {output:?}");
        env.configure(&home);
        let me = std::env::current_exe().expect("this example's path");
        home.ok(&[
            "config",
            "set",
            &format!("engines.{}.path", engine.name()),
            me.to_str().expect("a UTF-8 path"),
        ]);
        let work = home.work();
        home.ok(&[
            "project",
            "add",
            "p",
            work.to_str().unwrap(),
            "--engine",
            engine.name(),
        ]);
        Rig {
            home,
            mock,
            _env: env,
            engine,
            log,
            seen: 0,
            last: None,
        }
    }

    /// The timer's record of the run that just ended (exactly one new line).
    fn timed(&mut self) -> Timed {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.len(),
            self.seen + 1,
            "one engine run per run: the timer's log has {} lines, {} were read before",
            lines.len(),
            self.seen
        );
        self.seen = lines.len();
        Timed::parse(lines[lines.len() - 1])
    }

    /// `corral send SESSION PROMPT --wait` in a new titled session: its timings.
    fn through_corral(&mut self, index: usize) -> CorralRun {
        let title = format!("bench {index}");
        let session = self
            .home
            .json(&["session", "new", "p", "--title", &title, "--json"])["id"]
            .as_str()
            .expect("a session id")
            .to_string();
        self.mock.answer(ANSWER);
        let mut command = self.home.corral(&["send", &session, PROMPT, "--wait"]);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let spawned_us = epoch_us();
        let started = Instant::now();
        let output = command.output().expect("corral send runs");
        let wall = started.elapsed();
        let exited_us = epoch_us();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout == format!("{ANSWER}\n"),
            "{}: send --wait failed or answered {stdout:?}: {}\n{}",
            self.engine.name(),
            String::from_utf8_lossy(&output.stderr),
            self.home.ok(&["history", &session])
        );
        assert_eq!(self.mock.unused_answers(), 0, "one model call per run");
        let timed = self.timed();

        let history = self.home.json(&["history", &session, "--json"]);
        let prompt = &history["prompts"][0];
        let runs = history["runs"].as_array().cloned().unwrap_or_default();
        assert_eq!(runs.len(), 1, "one run: {history}");
        let run = &runs[0];
        let events: Vec<Value> = self
            .home
            .ok(&["watch", &session, "--after", "0", "--json"])
            .lines()
            .map(|line| serde_json::from_str(line).expect("one event per line"))
            .collect();
        let event_at = |kind: &str| -> f64 {
            events
                .iter()
                .find(|event| event["kind"] == kind)
                .and_then(|event| event["at"].as_i64())
                .unwrap_or_else(|| panic!("no {kind} event: {events:?}")) as f64
        };
        let ms_field = |value: &Value, field: &str| -> f64 {
            value[field]
                .as_i64()
                .unwrap_or_else(|| panic!("no {field}: {value}")) as f64
        };
        let steps = Steps {
            send_spawned: spawned_us as f64 / 1000.0,
            prompt_created: ms_field(prompt, "created_at"),
            prompt_started_event: event_at("prompt.started"),
            run_row: ms_field(run, "started_at"),
            run_started_event: event_at("run.started"),
            engine_started: timed.started_us as f64 / 1000.0,
            engine_ended: timed.ended_us as f64 / 1000.0,
            run_exited_event: event_at("run.exited"),
            run_ended: ms_field(run, "ended_at"),
            prompt_finished: ms_field(prompt, "finished_at"),
            prompt_done_event: event_at("prompt.done"),
            send_exited: exited_us as f64 / 1000.0,
        };
        let engine = timed.elapsed;
        self.last = Some(timed);
        CorralRun {
            wall,
            engine,
            steps,
        }
    }

    /// The last invocation corral made, replayed as it was: its wall time and the engine's.
    fn direct(&mut self) -> (Duration, Duration) {
        let invocation = self.last.as_ref().expect("a corral run came first");
        let mut command = Command::new(&invocation.argv[0]);
        command
            .args(&invocation.argv[1..])
            .env_clear()
            .envs(invocation.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&invocation.cwd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command.stdin(if invocation.stdin.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        });
        let input = invocation.stdin.clone();
        let started = Instant::now();
        let mut child = command.spawn().expect("the engine starts");
        let feeder = child.stdin.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let _ = pipe.write_all(input.as_bytes());
            })
        });
        // Both pipes to their end and the exit, as corral waits for a run.
        let output = child.wait_with_output().expect("the engine's output");
        let wall = started.elapsed();
        if let Some(feeder) = feeder {
            let _ = feeder.join();
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains(ANSWER),
            "{}: the direct run failed: {:?}\nstdout: {stdout}\nstderr: {}",
            self.engine.name(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(self.mock.unused_answers(), 0, "one model call per run");
        let timed = self.timed();
        (wall, timed.elapsed)
    }

    fn direct_scripted(&mut self) -> (Duration, Duration) {
        self.mock.answer(ANSWER);
        self.direct()
    }
}

/// A run's moments, in ms since the epoch.
struct Steps {
    send_spawned: f64,
    prompt_created: f64,
    prompt_started_event: f64,
    run_row: f64,
    run_started_event: f64,
    engine_started: f64,
    engine_ended: f64,
    run_exited_event: f64,
    run_ended: f64,
    prompt_finished: f64,
    prompt_done_event: f64,
    send_exited: f64,
}

struct CorralRun {
    wall: Duration,
    engine: Duration,
    steps: Steps,
}

// ---------------------------------------------------------------------------------------------
// The figures.

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The `q` quantile of samples (nearest rank).
fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn line(label: &str, samples: &[f64]) {
    println!(
        "  {label:<44} n={:<3} p50 {:>9.2} ms   p90 {:>9.2} ms   min {:>9.2}   max {:>9.2}",
        samples.len(),
        quantile(samples, 0.5),
        quantile(samples, 0.9),
        quantile(samples, 0.0),
        quantile(samples, 1.0),
    );
}

fn bench(engine: Engine, binary: &Path, runs: usize) -> String {
    println!(
        "\n== {}: {runs} runs through corral and {runs} direct, interleaved (+1 warm-up pair) ==",
        engine.name()
    );
    println!("  binary {}", binary.display());
    let mut rig = Rig::start(engine, binary);

    // Warm-up: the first run of an engine fills caches (and writes its private state).
    let warm = Instant::now();
    rig.through_corral(0);
    rig.direct_scripted();
    println!("  warm-up pair: {:.2} s", warm.elapsed().as_secs_f64());

    let mut corral_runs = Vec::with_capacity(runs);
    let mut directs = Vec::with_capacity(runs);
    for index in 1..=runs {
        if index % 2 == 1 {
            corral_runs.push(rig.through_corral(index));
            directs.push(rig.direct_scripted());
        } else {
            directs.push(rig.direct_scripted());
            corral_runs.push(rig.through_corral(index));
        }
    }
    if let Some(invocation) = &rig.last {
        println!(
            "  invocation (corral's, replayed by the direct runs): {}{}",
            invocation.argv[1..].join(" "),
            if invocation.stdin.is_empty() {
                String::from(", stdin /dev/null")
            } else {
                format!(", stdin {} bytes", invocation.stdin.len())
            }
        );
    }

    let send: Vec<f64> = corral_runs.iter().map(|run| ms(run.wall)).collect();
    let engine_corral: Vec<f64> = corral_runs.iter().map(|run| ms(run.engine)).collect();
    let direct: Vec<f64> = directs.iter().map(|(wall, _)| ms(*wall)).collect();
    let engine_direct: Vec<f64> = directs.iter().map(|(_, engine)| ms(*engine)).collect();
    let overhead: Vec<f64> = send
        .iter()
        .zip(&engine_corral)
        .map(|(s, e)| s - e)
        .collect();
    let floor: Vec<f64> = direct
        .iter()
        .zip(&engine_direct)
        .map(|(d, e)| d - e)
        .collect();
    let versus: Vec<f64> = overhead.iter().zip(&floor).map(|(o, f)| o - f).collect();
    let raw: Vec<f64> = send.iter().zip(&direct).map(|(s, d)| s - d).collect();
    let run_rows: Vec<f64> = corral_runs
        .iter()
        .map(|run| ms(run.wall) - (run.steps.run_ended - run.steps.run_row))
        .collect();

    line("engine, through corral (timer)", &engine_corral);
    line("engine, direct (timer)", &engine_direct);
    line("corral send --wait, wall", &send);
    line("direct run, wall", &direct);
    line("overhead: send --wait - engine", &overhead);
    line("floor: direct - engine (the timer's cost)", &floor);
    line("vs direct: overhead - floor, per pair", &versus);
    line("send - direct, raw, per pair", &raw);
    line("2nd view: send - (run ended - run started)", &run_rows);

    println!("  where corral's time goes (p50 of each step; store times are whole ms):");
    let step = |label: &str, from: fn(&Steps) -> f64, to: fn(&Steps) -> f64| {
        let samples: Vec<f64> = corral_runs
            .iter()
            .map(|run| to(&run.steps) - from(&run.steps))
            .collect();
        println!(
            "    {label:<58} p50 {:>8.2} ms   p90 {:>8.2} ms",
            quantile(&samples, 0.5),
            quantile(&samples, 0.9)
        );
    };
    step(
        "send spawned -> prompt accepted (prompts.created_at)",
        |s| s.send_spawned,
        |s| s.prompt_created,
    );
    step(
        "prompt accepted -> prompt.started event",
        |s| s.prompt_created,
        |s| s.prompt_started_event,
    );
    step(
        "prompt accepted -> run row (runs.started_at)",
        |s| s.prompt_created,
        |s| s.run_row,
    );
    step(
        "run row -> engine started (timer)",
        |s| s.run_row,
        |s| s.engine_started,
    );
    step(
        "run row -> run.started event",
        |s| s.run_row,
        |s| s.run_started_event,
    );
    step(
        "engine ended (timer) -> run.exited event",
        |s| s.engine_ended,
        |s| s.run_exited_event,
    );
    step(
        "engine ended -> run ended (runs.ended_at)",
        |s| s.engine_ended,
        |s| s.run_ended,
    );
    step(
        "run ended -> prompt finished (prompts.finished_at)",
        |s| s.run_ended,
        |s| s.prompt_finished,
    );
    step(
        "prompt finished -> prompt.done event",
        |s| s.prompt_finished,
        |s| s.prompt_done_event,
    );
    step(
        "prompt finished -> send exited",
        |s| s.prompt_finished,
        |s| s.send_exited,
    );
    step(
        "send spawned -> engine started",
        |s| s.send_spawned,
        |s| s.engine_started,
    );
    step(
        "engine ended -> send exited",
        |s| s.engine_ended,
        |s| s.send_exited,
    );

    let p50 = quantile(&overhead, 0.5);
    let verdict = if p50 <= 15.0 { "met" } else { "NOT met" };
    let summary = format!(
        "{:<8} n={runs:<3} send --wait - engine: p50 {p50:+.2} ms, p90 {:+.2} ms ({verdict}); \
         vs direct: p50 {:+.2} ms, p90 {:+.2} ms; engine p50 {:.0} ms",
        engine.name(),
        quantile(&overhead, 0.9),
        quantile(&versus, 0.5),
        quantile(&versus, 0.9),
        quantile(&engine_corral, 0.5),
    );
    println!("  overhead {summary}");
    rig.home.stop_daemon();
    summary
}
