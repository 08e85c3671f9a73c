//! `corral demo`: the whole supervisor at work in a few seconds, on the fake engine, in a
//! temporary home and temporary projects (nothing of yours is touched).
//!
//! What it shows, with live progress lines:
//! - five sessions in four projects, with `slots.fake = 2`, so a session waits for a slot;
//! - `api` and `web` share the execution group `deploy`, so they never run at once;
//! - `docs` is rate-limited once and retried after a visible countdown;
//! - `tools` runs away (`hang`) and is cancelled, its process group ended;
//! - one agent runs `corral monitor list` itself: that exec is recorded as the session's.
//!
//! Then it prints the monitor overview of the demo's home.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tokio::sync::broadcast::error::RecvError;

use super::monitor::{build_overview, print_overview};
use super::{CliError, Context, Exit};
use crate::engine::EngineKind;
use crate::events::Payload;
use crate::store::events::Event;
use crate::store::projects::NewProject;
use crate::store::prompts::NewPrompt;
use crate::store::sessions::NewSession;
use crate::{Corral, CorralOptions};

#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Keep the demo's home (its path is printed) instead of removing it.
    #[arg(long)]
    pub keep: bool,
}

/// One session of the demo: its project, groups and the prompt it gets.
struct Scene {
    project: &'static str,
    groups: &'static [&'static str],
    prompt: String,
}

fn scenes(corral_binary: &str) -> Vec<Scene> {
    vec![
        Scene {
            project: "api",
            groups: &["deploy"],
            prompt: "@fake delay=1500\n@fake title=Refactor the API client\nRefactor the API client".into(),
        },
        Scene {
            project: "web",
            groups: &["deploy"],
            prompt: "@fake delay=1000\n@fake title=Fix the web build\nFix the web build".into(),
        },
        Scene {
            project: "docs",
            groups: &[],
            prompt: "@fake rate-limit=1\n@fake delay=400\n@fake title=Update the docs\nUpdate the docs".into(),
        },
        Scene {
            project: "tools",
            groups: &[],
            prompt: format!(
                "@fake run={corral_binary} monitor list --all --limit 3\n@fake title=Audit the ledger\nAudit the ledger"
            ),
        },
        Scene {
            project: "sandbox",
            groups: &[],
            prompt: "@fake hang\n@fake title=A runaway task\nA runaway task".into(),
        },
    ]
}

pub async fn execute(context: &Context, args: &DemoArgs) -> Result<Exit, CliError> {
    let fail = |error: crate::CorralError| CliError::failure(format!("demo: {error}"));
    let home = tempfile::Builder::new()
        .prefix("corral-demo-")
        .tempdir()
        .map_err(|error| CliError::failure(format!("demo: temporary home: {error}")))?;
    let projects_dir = home.path().join("projects");
    let corral = Corral::start(CorralOptions {
        home: home.path().to_path_buf(),
        exec_id: Some(context.invocation.id.clone()),
        store_checked: false,
    })
    .await
    .map_err(fail)?;
    for (name, value) in [
        ("slots.fake", "2"),
        ("retry.rate_limit_delays", "3"),
        ("cancel.grace_ms", "500"),
    ] {
        corral.set_setting(name, Some(value)).await.map_err(fail)?;
    }
    let corral_binary = std::env::current_exe()
        .map(|path| path.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "corral".into());
    // No `corral-fake-engine` beside this binary or on PATH (`cargo run -- demo` builds
    // corral alone): corral is the fake engine too, run through a link of that name.
    if crate::engine::resolve_program(EngineKind::Fake, &corral.settings().engine_paths).is_err() {
        let link = home.path().join(EngineKind::Fake.default_program());
        std::os::unix::fs::symlink(&corral_binary, &link)
            .map_err(|error| CliError::failure(format!("demo: {error}")))?;
        corral
            .set_setting("engines.fake.path", Some(&link.to_string_lossy()))
            .await
            .map_err(fail)?;
    }
    println!("corral demo — home {}", home.path().display());
    println!("  slots.fake = 2; api and web share the execution group 'deploy'\n");

    let started = Instant::now();
    let mut names: HashMap<String, &'static str> = HashMap::new();
    let mut prompts = Vec::new();
    let mut events = corral.subscribe();
    let mut runaway = None;
    for scene in scenes(&corral_binary) {
        let path = projects_dir.join(scene.project);
        std::fs::create_dir_all(&path)
            .map_err(|error| CliError::failure(format!("demo: {error}")))?;
        let project = corral
            .add_project(NewProject {
                name: scene.project.into(),
                path: path.to_string_lossy().into_owned(),
                groups: scene.groups.iter().map(|g| g.to_string()).collect(),
                ..Default::default()
            })
            .await
            .map_err(fail)?;
        let session = corral
            .open_session(NewSession {
                project_id: project.id,
                engine: Some(crate::engine::EngineKind::Fake),
                ..Default::default()
            })
            .await
            .map_err(fail)?;
        names.insert(session.id.clone(), scene.project);
        let sent = corral
            .send(NewPrompt {
                session_id: session.id,
                text: scene.prompt,
                ..Default::default()
            })
            .await
            .map_err(fail)?;
        if scene.project == "sandbox" {
            runaway = Some(sent.prompt.id.clone());
        }
        prompts.push(sent.prompt.id);
    }

    // Follow the events until every prompt has ended; cancel the runaway after 3 s.
    let mut open = prompts.len();
    let cancel_at = tokio::time::sleep(Duration::from_secs(3));
    tokio::pin!(cancel_at);
    let second = Duration::from_secs(1);
    let mut countdown = tokio::time::interval_at(tokio::time::Instant::now() + second, second);
    let mut retry_due: HashMap<String, Instant> = HashMap::new();
    while open > 0 {
        tokio::select! {
            event = events.recv() => match event {
                Ok(event) => {
                    if let Some(line) = describe(&event, &names, &mut retry_due) {
                        println!("[{:>5.1}s] {line}", started.elapsed().as_secs_f64());
                    }
                    if event.kind.ends_prompt() {
                        open -= 1;
                    }
                }
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => break,
            },
            _ = &mut cancel_at, if runaway.is_some() => {
                if let Some(prompt_id) = runaway.take() {
                    println!("[{:>5.1}s] sandbox  cancelling the runaway task", started.elapsed().as_secs_f64());
                    corral.cancel(&prompt_id).await.map_err(fail)?;
                }
            }
            _ = countdown.tick(), if !retry_due.is_empty() => {
                for (session, due) in &retry_due {
                    let left = due.saturating_duration_since(Instant::now()).as_secs_f64().ceil();
                    if left >= 1.0 {
                        let name = names.get(session).copied().unwrap_or("?");
                        println!("[{:>5.1}s] {name:<8} retrying in {left:.0} s…", started.elapsed().as_secs_f64());
                    }
                }
            }
        }
    }
    println!(
        "\nall {} prompts ended in {:.1} s\n",
        prompts.len(),
        started.elapsed().as_secs_f64()
    );
    let overview = corral
        .read(|connection| build_overview(connection, None))
        .map_err(fail)?;
    print_overview(&overview);
    if args.keep {
        let kept = home.keep();
        println!(
            "\nthe demo's home is kept: CORRAL_HOME={} corral monitor --all",
            kept.display()
        );
    }
    Ok(Exit::success())
}

/// One progress line for an event, or none for the chatty ones.
fn describe(
    event: &Event,
    names: &HashMap<String, &'static str>,
    retry_due: &mut HashMap<String, Instant>,
) -> Option<String> {
    let name = names.get(&event.session_id).copied().unwrap_or("?");
    let text = match event.payload() {
        Payload::SlotWaiting(waiting) => {
            if !waiting.groups.is_empty() {
                "waiting for a slot (engine limit, project or group lock)".to_string()
            } else {
                "waiting for a slot (engine limit)".to_string()
            }
        }
        Payload::SlotGranted(granted) => format!("got a slot after {} ms", granted.waited_ms),
        Payload::RunStarted(started) => format!("engine started, pid {}", started.pid),
        Payload::TitleGenerated(titled) => format!("titled \"{}\"", titled.title),
        // A command shows twice (started, completed): the completed one says it.
        Payload::Tool(tool) if tool.detail["status"] != "in_progress" => format!(
            "agent ran: {}",
            tool.detail["command"].as_str().unwrap_or("a tool")
        ),
        Payload::RetryScheduled(retry) => {
            retry_due.insert(
                event.session_id.clone(),
                Instant::now() + Duration::from_millis(retry.delay_ms),
            );
            let reason = if retry.reason.is_empty() {
                "failed"
            } else {
                &retry.reason
            };
            format!(
                "{reason} — retry {} in {:.0} s",
                retry.next_attempt,
                retry.delay_ms as f64 / 1000.0
            )
        }
        Payload::RunExited(exited) => {
            retry_due.remove(&event.session_id);
            match exited.ended_by {
                Some(reason) => format!("engine {reason}, process group ended"),
                None => format!(
                    "engine exited ({})",
                    exited.verdict.as_deref().unwrap_or("?")
                ),
            }
        }
        Payload::PromptDone(done) => format!(
            "done: {}",
            done.answer
                .as_deref()
                .unwrap_or("")
                .lines()
                .next()
                .unwrap_or("")
        ),
        Payload::PromptFailed(failed) => format!("failed: {}", failed.error.unwrap_or_default()),
        Payload::PromptCancelled(_) => "cancelled".to_string(),
        _ => return None,
    };
    Some(format!("{name:<8} {text}"))
}
