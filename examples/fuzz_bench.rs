//! `fuzz_bench`: the protocol fuzzer (`corral::testkit::fuzz`, whose module doc says what it
//! writes and what it checks), run as long as asked.
//!
//! Run: `cargo build --release && cargo build --release --examples &&
//! target/release/examples/fuzz_bench [INPUTS [SECONDS]] [--seed N] [--threads N]
//! [--store-url postgres://…]` (defaults: 10,000,000 inputs, no time limit, one thread per
//! core, the SQLite file; a store URL, an empty database or a store, needs `--threads 1`). It
//! stops at whichever limit comes first, prints inputs, inputs/s, panics and invalid answers,
//! every finding, and exits 1 if there is any; `--verbose` also prints the first input and
//! answer of every variant of a finding. `fuzz_bench --replay FILE` writes FILE's lines on one
//! connection (after the same setup) and prints the answers and what the checks say of them.

use corral::testkit::fuzz::{parse_seed, random_seed, replay, run, thousands, Options, Summary};

fn main() {
    let mut positional = Vec::new();
    let mut seed = None;
    let mut verbose = false;
    let mut store_url = None;
    let mut threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => seed = Some(parse_seed(&args.next().expect("--seed needs a value"))),
            "--verbose" => verbose = true,
            "--store-url" => {
                store_url = Some(args.next().expect("--store-url needs a PostgreSQL URL"))
            }
            "--replay" => {
                replay(&args.next().expect("--replay needs a file"));
                return;
            }
            "--threads" => {
                threads = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("--threads needs a number")
            }
            _ => positional.push(arg),
        }
    }
    let inputs: u64 = positional
        .first()
        .map(|n| n.replace(['_', ','], "").parse().expect("INPUTS: a number"))
        .unwrap_or(10_000_000);
    let seconds: f64 = positional
        .get(1)
        .map(|s| s.parse().expect("SECONDS: a number"))
        .unwrap_or(0.0);
    let seed = seed.unwrap_or_else(random_seed);
    let fake = corral::testkit::built("corral-fake-engine").ok();
    if fake.is_none() {
        println!("(no corral-fake-engine beside target/<profile>/examples: `cargo build --release` first; the prompts sent are refused)");
    }
    println!(
        "fuzz_bench: seed {seed:#018x}, {threads} thread(s), up to {} inputs{}",
        thousands(inputs),
        if seconds > 0.0 {
            format!(" or {seconds} s")
        } else {
            String::new()
        }
    );
    let summary = run(&Options {
        seed,
        inputs,
        seconds,
        threads,
        fake_engine: fake,
        quiet: false,
        minimize_budget: 1500,
        known: Vec::new(),
        store_url,
    });
    let summary = Summary { verbose, ..summary };
    print!("{}", summary.report());
    std::process::exit(if summary.clean() { 0 } else { 1 });
}
