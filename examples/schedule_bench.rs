//! How late schedules fire: 1,000 schedules on 1,000 sessions, spread over the seconds of a
//! minute (`S * * * * *`, S = i mod 60: about 17 due each second), on the fake engine.
//!
//! For every firing in the run it reads from the store when the firing was due (`due_at`),
//! when the timer took it (`at`) and when its prompt was queued (`created_at`), and prints
//! both delays. The schedules' clock is the wall clock here.
//!
//! Run: `cargo build --release && cargo run --release --example schedule_bench [SECONDS]`
//! Goal (issue 35): a schedule firing on time within 1 s.

use std::time::Duration;

use corral::store::projects::NewProject;
use corral::store::sessions::NewSession;
use corral::store::sql::args;
use corral::{ScheduleRequest, ScheduleTarget};

mod common;

const SCHEDULES: usize = 1_000;

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn say(what: &str, mut samples: Vec<i64>) {
    samples.sort();
    println!(
        "{what:<36} p50 {:5} ms   p90 {:5} ms   p99 {:5} ms   max {:5} ms   (n = {})",
        percentile(&samples, 0.5),
        percentile(&samples, 0.9),
        percentile(&samples, 0.99),
        samples.last().unwrap(),
        samples.len()
    );
}

fn main() {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20);
    let (_, fake) = common::binaries();
    let home = tempfile::tempdir().unwrap();
    let projects = tempfile::tempdir().unwrap();
    actix::System::new().block_on(async move {
        let corral = common::library_with_fake(home.path(), &fake).await;
        let path = projects.path().join("p");
        std::fs::create_dir_all(&path).unwrap();
        let project = corral
            .add_project(NewProject {
                name: "p".into(),
                path: path.to_string_lossy().into_owned(),
                ..Default::default()
            })
            .await
            .unwrap();
        for i in 0..SCHEDULES {
            let session = corral
                .open_session(NewSession {
                    project_id: project.id.clone(),
                    engine: Some(corral::engine::EngineKind::Fake),
                    ..Default::default()
                })
                .await
                .unwrap();
            corral
                .add_schedule(ScheduleRequest {
                    target: ScheduleTarget::Session(session.id),
                    cron: format!("{} * * * * *", i % 60),
                    text: "@fake delay=10\nscheduled work".into(),
                    catch_up: false,
                })
                .await
                .unwrap();
        }
        let started = corral::store::now_ms();
        println!("{SCHEDULES} schedules added; watching them fire for {seconds} s");
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let fired: Vec<(i64, i64, Option<i64>, String)> = corral
            .read(|c| {
                c.rows(
                    "SELECT f.due_at, f.at, p.created_at, f.outcome FROM schedule_firings f \
                       LEFT JOIN prompts p ON p.id = f.prompt_id WHERE f.due_at >= ?1",
                    args![started],
                    |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
                )
            })
            .unwrap();
        let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
        for (_, _, _, outcome) in &fired {
            *outcomes.entry(outcome.clone()).or_default() += 1;
        }
        println!("firings: {outcomes:?}");
        say(
            "due -> taken by the timer",
            fired.iter().map(|(due, at, _, _)| at - due).collect(),
        );
        say(
            "due -> its prompt queued",
            fired
                .iter()
                .filter_map(|(due, _, queued, _)| queued.map(|queued| queued - due))
                .collect(),
        );
        corral.shutdown(Duration::from_secs(5)).await;
    });
}
