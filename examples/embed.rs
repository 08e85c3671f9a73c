//! Embedding corral: another program starts the supervisor inside its own actix system, runs
//! a prompt on the fake engine and prints the session's events as they happen.
//!
//! Run: `cargo build && cargo run --example embed` (the fake engine binary must be built: it
//! is found beside this example's directory, in `target/<profile>/corral-fake-engine`).

use corral::{Corral, CorralOptions, EngineKind, NewProject, NewPrompt, NewSession};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // target/<profile>/examples/embed → target/<profile>/corral-fake-engine
    let fake = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .map(|profile| profile.join("corral-fake-engine"))
        .filter(|path| path.is_file())
        .ok_or("build the fake engine first: cargo build")?;
    let home = tempfile::tempdir()?;
    let project_dir = tempfile::tempdir()?;

    actix::System::new().block_on(async move {
        let corral = Corral::start(CorralOptions::new(home.path())).await?;
        corral
            .set_setting("engines.fake.path", Some(&fake.to_string_lossy()))
            .await?;
        let project = corral
            .add_project(NewProject {
                name: "embedded".into(),
                path: project_dir.path().to_string_lossy().into_owned(),
                ..Default::default()
            })
            .await?;
        let session = corral
            .open_session(NewSession {
                project_id: project.id,
                engine: Some(EngineKind::Fake),
                ..Default::default()
            })
            .await?;
        // Subscribe before sending, so no event is missed.
        let mut events = corral.subscribe();
        let sent = corral
            .send(NewPrompt {
                session_id: session.id.clone(),
                text: "@fake deltas=3\n@fake answer=Hello from an embedded corral\nsay hello"
                    .into(),
                ..Default::default()
            })
            .await?;
        println!(
            "prompt {} is {}",
            sent.prompt.id,
            sent.prompt.status.as_str()
        );
        loop {
            let event = events.recv().await?;
            if event.session_id != session.id {
                continue;
            }
            println!("#{:<3} {:<16} {}", event.seq, event.kind, event.payload);
            if event.kind.ends_prompt() {
                break;
            }
        }
        let done = corral.wait_prompt(&sent.prompt.id).await?;
        println!(
            "{}: {}",
            done.status.as_str(),
            done.answer.unwrap_or_default()
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
