//! What `corral run` adds to a command: `corral run -- true` against bare `true`, alternating,
//! medians of many runs, in one run.
//!
//! Run: `cargo build --release && cargo run --release --example run_overhead [RUNS]`
//! Goal (issue #2): median(corral run -- true) ≤ median(true) + 3 ms.

use std::process::Command;
use std::time::{Duration, Instant};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time(command: &mut Command) -> Duration {
    let started = Instant::now();
    let status = command.status().expect("the command runs");
    let elapsed = started.elapsed();
    assert!(status.success());
    elapsed
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(200);
    let me = std::env::current_exe().unwrap();
    let corral = me.parent().unwrap().parent().unwrap().join("corral");
    assert!(
        corral.exists(),
        "build the release binary first: cargo build --release"
    );
    let true_path = ["/usr/bin/true", "/bin/true"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
        .expect("true(1)");
    let home = tempfile::tempdir().unwrap();
    // The first run creates and migrates the store; measure the steady state.
    time(
        Command::new(&corral)
            .args(["run", "--", true_path])
            .env("CORRAL_HOME", home.path()),
    );
    let (mut wrapped, mut bare) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        wrapped.push(time(
            Command::new(&corral)
                .args(["run", "--", true_path])
                .env("CORRAL_HOME", home.path()),
        ));
        bare.push(time(&mut Command::new(true_path)));
    }
    let (wrapped, bare) = (median(wrapped), median(bare));
    println!("runs: {runs} each, alternating");
    println!("true:                 median {bare:.2?}");
    println!("corral run -- true:   median {wrapped:.2?}");
    println!(
        "overhead: {:.2} ms",
        (wrapped.as_secs_f64() - bare.as_secs_f64()) * 1000.0
    );
}
