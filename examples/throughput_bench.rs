//! Throughput under a slot limit: RUNS fake-engine runs of DELAY ms each (`@fake delay=DELAY`)
//! through corral with `slots.fake = SLOTS`, against the same runs of the same binary with the
//! same argv under `xargs -P SLOTS`, in the same run, printed side by side.
//!
//! corral side: every prompt gets its own session (so every run starts a new thread and all
//! argvs are the same), the sessions spread round-robin over PROJECTS projects (one run per
//! project at a time, so PROJECTS ≥ SLOTS keeps the project locks from serializing them). All
//! prompts are sent at once; the wall time runs from the first send to the last prompt's end.
//!
//! xargs side: `xargs -0 -P SLOTS -n 1 ARGV… --` reads the prompts NUL-separated and runs the
//! argv corral recorded for its runs (checked equal), with stdout and stderr on /dev/null (the
//! children inherit xargs' own; no shell in between). One difference, forced by xargs: corral
//! ends the argv with `-` and writes the prompt on the child's stdin (as it does for every
//! engine), while xargs cannot give each child a stdin of its own, so it puts the prompt in
//! the place of `-`; the fake engine reads either form the same way, as codex does. Writing
//! stdin is part of what corral is charged for. A short xargs warm-up comes first.
//!
//! Run: `cargo build --release && cargo run --release --example throughput_bench [RUNS [DELAY_MS [SLOTS [PROJECTS]]]] [--no-shim]`
//! (`--no-shim`: without the shim every engine runs under, for what it costs)
//! (defaults 500 50 8 32). Goal: corral's wall time ≤ 1.10 × xargs'.

use corral::args;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use corral::store::projects::NewProject;
use corral::store::prompts::{NewPrompt, PromptStatus};
use corral::store::sessions::NewSession;
use corral::{Corral, CorralOptions};
use tokio::sync::broadcast::error::RecvError;

fn arg(index: usize, default: usize) -> usize {
    std::env::args()
        .nth(index)
        .filter(|arg| arg != "--no-shim")
        .map(|arg| arg.parse().expect("arguments are numbers"))
        .unwrap_or(default)
}

/// How many prompts have ended (any final status), from the store.
fn finished(corral: &Corral) -> usize {
    corral
        .read(|c| {
            c.row(
                "SELECT count(*) FROM prompts WHERE status IN ('done', 'failed', 'cancelled')",
                args![],
                |row| row.get::<i64>(0),
            )
        })
        .unwrap() as usize
}

/// Runs `runs` prompts through xargs; returns the wall time.
fn xargs(argv: &[String], prompt: &str, runs: usize, slots: usize, dir: &Path) -> Duration {
    let input = dir.join(format!("prompts-{runs}"));
    let mut file = std::fs::File::create(&input).unwrap();
    for _ in 0..runs {
        file.write_all(prompt.as_bytes()).unwrap();
        file.write_all(b"\0").unwrap();
    }
    drop(file);
    let started = Instant::now();
    let status = Command::new("xargs")
        .args(["-0", "-P", &slots.to_string(), "-n", "1"])
        .args(argv)
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("xargs runs");
    let elapsed = started.elapsed();
    assert!(status.success(), "xargs: {status}");
    elapsed
}

fn main() {
    let runs = arg(1, 500);
    let delay_ms = arg(2, 50);
    let slots = arg(3, 8);
    let projects = arg(4, 32);
    let me = std::env::current_exe().unwrap();
    let fake = me
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("corral-fake-engine");
    assert!(
        fake.exists(),
        "{} is missing: build it first with cargo build --release",
        fake.display()
    );
    // The engines run under the shim, as a daemon's do; `--no-shim` measures them without it
    // (what an embedding program without `corral-shim` gets), for what the shim costs.
    if !std::env::args().any(|arg| arg == "--no-shim") {
        std::env::set_var("CORRAL_SHIM", fake.with_file_name("corral-shim"));
    }
    let fake_text = fake.to_str().unwrap().to_string();
    let prompt = format!("@fake delay={delay_ms}\nwork");
    // What corral builds for a new thread of the fake engine, less its last argument `-` (the
    // prompt on stdin): xargs appends the prompt there instead. Checked against the store below.
    let argv: Vec<String> = [
        fake_text.as_str(),
        "--sandbox",
        "workspace-write",
        "--ask-for-approval",
        "never",
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--",
    ]
    .map(String::from)
    .to_vec();
    let scratch = tempfile::tempdir().unwrap();

    // xargs: warm-up, then the timed run.
    xargs(&argv, &prompt, 2 * slots, slots, scratch.path());
    let bare = xargs(&argv, &prompt, runs, slots, scratch.path());

    let home = tempfile::tempdir().unwrap();
    let wall = actix::System::new().block_on(async {
        let corral = Corral::start(CorralOptions::new(home.path()))
            .await
            .unwrap();
        for (name, value) in [
            ("engines.fake.path", fake_text.clone()),
            ("slots.fake", slots.to_string()),
        ] {
            corral.set_setting(name, Some(&value)).await.unwrap();
        }
        let mut project_ids = Vec::with_capacity(projects);
        for index in 0..projects {
            let path = scratch.path().join(format!("project-{index}"));
            std::fs::create_dir_all(&path).unwrap();
            let project = corral
                .add_project(NewProject {
                    name: format!("project-{index}"),
                    path: path.to_string_lossy().into_owned(),
                    ..Default::default()
                })
                .await
                .unwrap();
            project_ids.push(project.id);
        }
        let mut sessions = Vec::with_capacity(runs);
        for index in 0..runs {
            let session = corral
                .open_session(NewSession {
                    project_id: project_ids[index % projects].clone(),
                    engine: Some(corral::engine::EngineKind::Fake),
                    title: Some(format!("throughput {index}")),
                    ..Default::default()
                })
                .await
                .unwrap();
            sessions.push(session.id);
        }

        let mut events = corral.subscribe();
        let started = Instant::now();
        let sends = sessions.iter().map(|session_id| {
            corral.send(NewPrompt {
                session_id: session_id.clone(),
                text: prompt.clone(),
                ..Default::default()
            })
        });
        for sent in futures::future::join_all(sends).await {
            sent.unwrap();
        }
        // Every prompt's end is an event; after a lag, count from the store.
        let mut ended = 0;
        while ended < runs {
            match events.recv().await {
                Ok(event) if event.kind.ends_prompt() => ended += 1,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) => ended = finished(&corral),
                Err(RecvError::Closed) => panic!("the supervisor stopped"),
            }
        }
        let wall = started.elapsed();

        // Every prompt done, with one run each, on the argv xargs ran.
        let (done, runs_argv): (i64, Vec<String>) = corral
            .read(|c| {
                let done = c.row(
                    "SELECT count(*) FROM prompts WHERE status = ?1",
                    args![PromptStatus::Done.as_str()],
                    |row| row.get(0),
                )?;
                let argvs = c.rows("SELECT DISTINCT argv FROM runs", args![], |row| row.get(0))?;
                Ok((done, argvs))
            })
            .unwrap();
        assert_eq!(done as usize, runs, "not every prompt is done");
        let run_count = corral
            .read(|c| {
                c.row("SELECT count(*) FROM runs", args![], |row| {
                    row.get::<i64>(0)
                })
            })
            .unwrap();
        assert_eq!(run_count as usize, runs, "a prompt took more than one run");
        let mut expected = argv.clone();
        expected.push("-".into());
        let expected = serde_json::to_string(&expected).unwrap();
        assert_eq!(runs_argv, [expected], "corral ran another argv");
        wall
    });

    let ideal = Duration::from_millis((runs.div_ceil(slots) * delay_ms) as u64);
    let ratio = wall.as_secs_f64() / bare.as_secs_f64();
    println!("runs: {runs} × @fake delay={delay_ms}, {slots} at once; corral: {runs} sessions over {projects} projects");
    println!("sleep alone (⌈runs/slots⌉ × delay): {ideal:>10.2?}");
    println!("xargs -P {slots}:                   {bare:>10.2?}");
    println!("corral, slots.fake={slots}:           {wall:>10.2?}");
    let rounds = runs.div_ceil(slots) as f64;
    println!(
        "beyond the sleep, per round of {slots} runs: xargs {:.2} ms, corral {:.2} ms",
        (bare.as_secs_f64() - ideal.as_secs_f64()) * 1000.0 / rounds,
        (wall.as_secs_f64() - ideal.as_secs_f64()) * 1000.0 / rounds,
    );
    println!(
        "corral / xargs: {ratio:.3} (goal ≤ 1.10: {})",
        if ratio <= 1.10 { "met" } else { "MISSED" }
    );
}
