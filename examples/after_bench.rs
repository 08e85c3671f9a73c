//! Release latency of `send --after`: from a prompt's end to the start of the prompt that runs
//! after it, in another session, on the fake engine.
//!
//! Each round sends A to session `a`, then B to session `b` with `after: [A]` (so B waits
//! queued), and takes A's `prompt.done` → B's `run.started` as a subscriber receives them: A's
//! end claims B in its own transaction and hands it to B's worker, which takes a slot and
//! spawns B's engine (the dispatch path `dispatch_bench` measures from a send).
//!
//! Run: `cargo build --release && cargo run --release --example after_bench [ROUNDS]`
//! Goal (issue 35): a release that makes a dependent ready starts it within 5 ms.

use std::time::{Duration, Instant};

use corral::store::projects::NewProject;
use corral::store::prompts::NewPrompt;
use corral::store::sessions::{NewSession, Session};
use corral::Corral;

mod common;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn say(what: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what:<40} p50 {:6.2} ms   p90 {:6.2} ms   p99 {:6.2} ms   max {:6.2} ms   (n = {})",
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.9)),
        ms(percentile(&samples, 0.99)),
        ms(*samples.last().unwrap()),
        samples.len()
    );
}

async fn session(corral: &Corral, root: &std::path::Path, name: &str) -> Session {
    let path = root.join(name);
    std::fs::create_dir_all(&path).unwrap();
    let project = corral
        .add_project(NewProject {
            name: name.into(),
            path: path.to_string_lossy().into_owned(),
            ..Default::default()
        })
        .await
        .unwrap();
    corral
        .open_session(NewSession {
            project_id: project.id,
            engine: Some(corral::engine::EngineKind::Fake),
            ..Default::default()
        })
        .await
        .unwrap()
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let (_, fake) = common::binaries();
    let home = tempfile::tempdir().unwrap();
    let projects = tempfile::tempdir().unwrap();
    actix::System::new().block_on(async move {
        let corral = common::library_with_fake(home.path(), &fake).await;
        let a = session(&corral, projects.path(), "a").await;
        let b = session(&corral, projects.path(), "b").await;
        let mut events = corral.subscribe();
        let send = |session: &Session, after: Vec<String>| {
            let corral = corral.clone();
            let prompt = NewPrompt {
                session_id: session.id.clone(),
                text: "@fake delay=20\nwork".into(),
                after,
                ..Default::default()
            };
            async move { corral.send(prompt).await.unwrap().prompt.id }
        };
        let mut release = Vec::new();
        for round in 0..rounds + 10 {
            let first = send(&a, Vec::new()).await;
            let second = send(&b, vec![first.clone()]).await;
            let (mut first_done, mut second_started) = (None, None);
            while second_started.is_none() {
                let event = tokio::time::timeout(Duration::from_secs(30), events.recv())
                    .await
                    .expect("no event for 30 s")
                    .expect("the subscriber lagged");
                let at = Instant::now();
                match (event.prompt_id.as_deref(), event.kind.as_str()) {
                    (Some(id), "prompt.done") if id == first => first_done = Some(at),
                    (Some(id), "run.started") if id == second => second_started = Some(at),
                    (Some(id), kind @ ("prompt.failed" | "prompt.cancelled")) if id == second => {
                        panic!("B ended as {kind} before it started")
                    }
                    _ => {}
                }
            }
            // Its end, so that the next round finds both sessions free.
            corral.wait_prompt(&second).await.unwrap();
            if round < 10 {
                continue;
            }
            let done = first_done.expect("A's prompt.done came before B started");
            release.push(second_started.unwrap() - done);
        }
        say("release: A prompt.done -> B run.started", release);
        corral.shutdown(Duration::from_secs(5)).await;
    });
}
