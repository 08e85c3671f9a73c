//! The supervisor through its library handle, on the fake engine: prompts, events, the retry
//! policy, the one-worker rule, cancellation, slots, and bad input.

use crate::common;

use std::ops::Deref;
use std::time::Duration;

use common::library::{actix_test, Library};
use corral::engine::FailureClass;
use corral::store::events::Event;
use corral::store::projects::{NewProject, Project};
use corral::store::prompts::{CancelFound, NewPrompt, PromptStatus};
use corral::store::runs::{Run, RunStatus};
use corral::store::sessions::{NewSession, Session};
use corral::store::{prompts, runs};
use corral::{Corral, CorralOptions};

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");

/// A temporary home with a supervisor on the fake engine, fast retry delays and a short grace.
struct Bench(Library);

impl Deref for Bench {
    type Target = Library;

    fn deref(&self) -> &Library {
        &self.0
    }
}

impl Bench {
    async fn start() -> Bench {
        let settings = [
            ("engines.fake.path", FAKE),
            ("engines.claude.path", FAKE),
            ("retry.rate_limit_delays", "0.05,0.1"),
            ("retry.writer_conflict_delays", "0.05,0.05,0.05"),
            ("cancel.grace_ms", "300"),
        ];
        Bench(Library::start_in(tempfile::tempdir().unwrap(), &settings).await)
    }

    async fn project(&self, name: &str, groups: &[&str]) -> Project {
        self.add_project(NewProject {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        })
        .await
    }

    fn events(&self, session: &Session) -> Vec<Event> {
        self.session_events(&session.id)
    }
}

fn kinds(events: &[Event]) -> Vec<&str> {
    events.iter().map(|event| event.kind.as_str()).collect()
}

#[test]
fn a_prompt_runs_and_its_events_are_numbered_without_gaps() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        let done = bench
            .run(&session, "@fake answer=hello there\nsay hi")
            .await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        assert_eq!(done.answer.as_deref(), Some("hello there"));
        assert_eq!(done.attempts, 1);
        let events = bench.events(&session);
        let seqs: Vec<i64> = events.iter().map(|event| event.seq).collect();
        assert_eq!(seqs, (1..=events.len() as i64).collect::<Vec<_>>());
        let kinds = kinds(&events);
        for kind in [
            "prompt.started",
            "run.started",
            "thread.started",
            "message",
            "turn.completed",
            "run.exited",
            "prompt.done",
        ] {
            assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
        }
        assert_eq!(kinds.last(), Some(&"prompt.done"));
        let now = bench.session_now(&session);
        assert!(now.thread_id.is_some(), "the thread id is kept");
        // The first prompt asked for a title; the fake engine gave one; the answer lost it.
        assert_eq!(now.title_source.as_deref(), Some("generated"));
        assert!(!done.answer.unwrap().contains("corral-title"));

        // The next prompt resumes the same thread.
        let next = bench.run(&session, "again").await;
        assert_eq!(next.status, PromptStatus::Done);
        let runs = bench.runs(&next.id);
        assert_eq!(runs[0].thread_id, now.thread_id);
        assert!(
            runs[0].argv.contains(&"resume".to_string()),
            "{:?}",
            runs[0].argv
        );
    });
}

#[test]
fn a_rate_limit_is_retried_after_the_configured_delays() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        let done = bench.run(&session, "@fake rate-limit=1\nwork").await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        let runs = bench.runs(&done.id);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("rate_limit")
        );
        assert_eq!(runs[0].retry_decision.as_deref(), Some("retry after 50 ms"));
        assert_eq!(runs[1].status, RunStatus::Succeeded);
        let retry = bench
            .events(&session)
            .into_iter()
            .find(|event| event.kind == "retry.scheduled")
            .expect("a retry.scheduled event");
        assert_eq!(retry.payload["reason"], "rate_limit");
        assert_eq!(retry.payload["delay_ms"], 50);

        // More rate limits than delays: fail with the engine's message.
        let failed = bench.run(&session, "@fake rate-limit=9\nwork").await;
        assert_eq!(failed.status, PromptStatus::Failed);
        assert!(
            failed.error.as_deref().unwrap().contains("429"),
            "{failed:?}"
        );
        assert_eq!(bench.runs(&failed.id).len(), 3);
    });
}

#[test]
fn a_writer_conflict_retries_the_same_thread() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        bench.run(&session, "start a thread").await;
        let thread = bench.session_now(&session).thread_id.unwrap();
        let done = bench
            .run(&session, "@fake writer-conflict=2\ncontinue")
            .await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        let runs = bench.runs(&done.id);
        assert_eq!(runs.len(), 3);
        assert!(runs
            .iter()
            .all(|run| run.thread_id.as_deref() == Some(thread.as_str())));
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("writer_conflict")
        );
    });
}

#[test]
fn a_missing_rollout_replays_the_prompt_in_a_new_thread() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        bench.run(&session, "start a thread").await;
        let lost = bench.session_now(&session).thread_id.unwrap();
        let done = bench
            .run(&session, "@fake missing-rollout\nRelaunch this")
            .await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        let runs = bench.runs(&done.id);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].thread_id.as_deref(), Some(lost.as_str()));
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("missing_rollout")
        );
        assert_eq!(runs[1].thread_id, None, "replayed in a new thread");
        assert!(!runs[1].argv.contains(&"resume".to_string()));
        let now = bench.session_now(&session).thread_id.unwrap();
        assert_ne!(now, lost);
    });
}

#[test]
fn other_failures_fail_with_the_engine_message_and_are_not_retried() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        let failed = bench
            .run(&session, "@fake fail=Authentication failed\nwork")
            .await;
        assert_eq!(failed.status, PromptStatus::Failed);
        assert_eq!(failed.error.as_deref(), Some("Authentication failed"));
        assert_eq!(bench.runs(&failed.id).len(), 1);
        // The session stays usable.
        assert_eq!(bench.run(&session, "next").await.status, PromptStatus::Done);
    });
}

#[test]
fn two_senders_at_once_get_one_running_one_queued_and_one_child_at_a_time() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        let (first, second) = tokio::join!(
            bench.send(&session, "@fake delay=200\none"),
            bench.send(&session, "@fake delay=200\ntwo"),
        );
        let mut statuses = vec![first.prompt.status, second.prompt.status];
        statuses.sort_by_key(|status| status.as_str());
        assert_eq!(statuses, [PromptStatus::Queued, PromptStatus::Running]);
        let a = bench.wait(&first.prompt.id).await;
        let b = bench.wait(&second.prompt.id).await;
        assert_eq!(
            (a.status, b.status),
            (PromptStatus::Done, PromptStatus::Done)
        );
        let mut runs = bench.runs(&a.id);
        runs.extend(bench.runs(&b.id));
        runs.sort_by_key(|run| run.started_at);
        assert_eq!(runs.len(), 2);
        assert!(
            runs[0].ended_at.unwrap() <= runs[1].started_at,
            "the two children overlapped: {runs:?}"
        );
    });
}

#[test]
fn cancelling_a_queued_prompt_removes_it() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        let first = bench.send(&session, "@fake delay=300\none").await;
        let second = bench.send(&session, "two").await;
        assert_eq!(second.prompt.status, PromptStatus::Queued);
        assert_eq!(
            bench.corral.cancel(&second.prompt.id).await.unwrap(),
            CancelFound::Dequeued {
                session_id: session.id.clone()
            }
        );
        assert_eq!(
            bench.wait(&first.prompt.id).await.status,
            PromptStatus::Done
        );
        let cancelled = bench.wait(&second.prompt.id).await;
        assert_eq!(cancelled.status, PromptStatus::Cancelled);
        assert!(bench.runs(&second.prompt.id).is_empty());
        // Cancelling it again says it has ended.
        assert!(matches!(
            bench.corral.cancel(&second.prompt.id).await.unwrap(),
            CancelFound::Finished {
                status: PromptStatus::Cancelled
            }
        ));
    });
}

fn process_gone(pid: i64) -> bool {
    !corral::process::is_alive(pid as u32, None)
}

#[test]
fn cancelling_a_running_prompt_ends_a_child_that_ignores_sigterm() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        let mut events = bench.corral.subscribe();
        let sent = bench
            .send(&session, "@fake ignore-sigterm\n@fake hang\nwork")
            .await;
        // Wait until the child runs.
        loop {
            let event = events.recv().await.unwrap();
            if event.kind == "turn.started" && event.prompt_id.as_deref() == Some(&sent.prompt.id) {
                break;
            }
        }
        let found = bench.corral.cancel(&sent.prompt.id).await.unwrap();
        assert!(matches!(found, CancelFound::Running { .. }), "{found:?}");
        let cancelled = bench.wait(&sent.prompt.id).await;
        assert_eq!(cancelled.status, PromptStatus::Cancelled);
        let runs = bench.runs(&sent.prompt.id);
        assert_eq!(runs[0].status, RunStatus::Cancelled);
        assert!(process_gone(runs[0].pid.unwrap()), "the engine survived");
    });
}

#[test]
fn cancelling_a_prompt_waiting_for_a_slot_or_a_retry_stops_the_wait() {
    actix_test(|| async {
        let bench = Bench::start().await;
        bench
            .corral
            .set_setting("slots.fake", Some("1"))
            .await
            .unwrap();
        let (p1, p2) = (
            bench.project("p1", &[]).await,
            bench.project("p2", &[]).await,
        );
        let (s1, s2) = (
            bench.session(&p1, "fake").await,
            bench.session(&p2, "fake").await,
        );
        let holder = bench.send(&s1, "@fake hang\nhold the only slot").await;
        let waiter = bench.send(&s2, "waits for the slot").await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            bench.runs(&waiter.prompt.id).is_empty(),
            "it must still wait"
        );
        bench.corral.cancel(&waiter.prompt.id).await.unwrap();
        let cancelled = bench.wait(&waiter.prompt.id).await;
        assert_eq!(cancelled.status, PromptStatus::Cancelled);
        assert!(bench.runs(&waiter.prompt.id).is_empty());
        bench.corral.cancel(&holder.prompt.id).await.unwrap();
        assert_eq!(
            bench.wait(&holder.prompt.id).await.status,
            PromptStatus::Cancelled
        );

        // A retry delay of 30 s is cut short by a cancel.
        bench
            .corral
            .set_setting("retry.rate_limit_delays", Some("30"))
            .await
            .unwrap();
        let mut events = bench.corral.subscribe();
        let limited = bench.send(&s1, "@fake rate-limit=5\nwork").await;
        loop {
            let event = events.recv().await.unwrap();
            if event.kind == "retry.scheduled"
                && event.prompt_id.as_deref() == Some(&limited.prompt.id)
            {
                break;
            }
        }
        let started = std::time::Instant::now();
        bench.corral.cancel(&limited.prompt.id).await.unwrap();
        assert_eq!(
            bench.wait(&limited.prompt.id).await.status,
            PromptStatus::Cancelled
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    });
}

#[test]
fn an_engine_path_that_cannot_run_is_refused_naming_it() {
    actix_test(|| async {
        let bench = Bench::start().await;
        // At `config set`: a path that does not exist, or is not executable.
        let refused = bench
            .corral
            .set_setting("engines.codex.path", Some("/nonexistent/codex"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("/nonexistent/codex does not exist"),
            "{refused}"
        );
        let plain = bench.projects.path().join("codex-not-executable");
        std::fs::write(&plain, "#!/bin/sh\n").unwrap();
        let refused = bench
            .corral
            .set_setting("engines.codex.path", plain.to_str())
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("is not executable"), "{refused}");

        // At send: a path that was fine when set and is gone now; nothing is queued.
        let script = bench.projects.path().join("codex-gone");
        std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        bench
            .corral
            .set_setting("engines.codex.path", script.to_str())
            .await
            .unwrap();
        std::fs::remove_file(&script).unwrap();
        // A reload of the settings (another one changed, here or on another daemon of a
        // shared store) keeps the path as set: the send still names it.
        bench
            .corral
            .set_setting("cancel.grace_ms", Some("300"))
            .await
            .unwrap();
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "codex").await;
        let refused = bench
            .corral
            .send(NewPrompt {
                session_id: session.id.clone(),
                text: "work".into(),
                ..Default::default()
            })
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains(&format!(
                "{} does not exist (engines.codex.path)",
                script.display()
            )),
            "{refused}"
        );
        let queued = bench
            .corral
            .read(|c| prompts::prompts_of(c, &session.id))
            .unwrap();
        assert!(queued.is_empty(), "{queued:?}");
    });
}

#[test]
fn bad_input_is_refused_before_anything_is_stored() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        let count = || {
            bench
                .corral
                .read(|c| prompts::prompts_of(c, &session.id))
                .unwrap()
                .len()
        };
        let empty = bench
            .corral
            .send(NewPrompt {
                session_id: session.id.clone(),
                text: "  ".into(),
                ..Default::default()
            })
            .await;
        assert_eq!(empty.unwrap_err().to_string(), "the prompt is empty");
        let image = bench
            .corral
            .send(NewPrompt {
                session_id: session.id.clone(),
                text: "look".into(),
                images: vec!["/nonexistent/a.png".into()],
                ..Default::default()
            })
            .await;
        assert_eq!(
            image.unwrap_err().to_string(),
            "image not found: /nonexistent/a.png"
        );
        assert_eq!(count(), 0);
        // The library takes an engine typed: an unknown name is refused where it is read
        // (the protocol's params, the CLI), in these words.
        let engine = "gpt".parse::<corral::engine::EngineKind>();
        assert!(engine.unwrap_err().contains("unknown engine 'gpt'"));
        let path = bench
            .corral
            .add_project(NewProject {
                name: "x".into(),
                path: "/nonexistent/dir".into(),
                ..Default::default()
            })
            .await;
        assert!(path
            .unwrap_err()
            .to_string()
            .contains("not an existing directory"));
        let duplicate = bench
            .corral
            .add_project(NewProject {
                name: "p".into(),
                path: project.path.clone(),
                ..Default::default()
            })
            .await;
        assert!(duplicate
            .unwrap_err()
            .to_string()
            .contains("exists already"));
        let unknown = bench
            .corral
            .send(NewPrompt {
                session_id: "nope".into(),
                text: "hi".into(),
                ..Default::default()
            })
            .await;
        assert_eq!(unknown.unwrap_err().to_string(), "no session 'nope'");
        assert!(bench
            .corral
            .set_setting("slots.fake", Some("zero"))
            .await
            .is_err());
        assert_eq!(bench.corral.settings().slots_of("fake"), 3);
    });
}

#[test]
fn odd_output_is_kept_as_raw_events_and_a_crash_fails_the_prompt() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        let done = bench.run(&session, "@fake garbage\nwork").await;
        assert_eq!(done.status, PromptStatus::Done);
        let raws = bench
            .events(&session)
            .into_iter()
            .filter(|event| event.kind == "raw")
            .count();
        assert!(raws >= 2, "non-JSON and invalid UTF-8 lines are raw events");

        let crashed = bench.run(&session, "@fake crash\nwork").await;
        assert_eq!(crashed.status, PromptStatus::Failed, "{crashed:?}");
        let last_raw = bench
            .events(&session)
            .into_iter()
            .filter(|event| event.kind == "raw" && event.prompt_id.as_deref() == Some(&crashed.id))
            .count();
        assert_eq!(last_raw, 1, "the half line without a newline is kept");

        let partial = bench
            .run(
                &session,
                "@fake partial\n@fake answer=ends without newline\nwork",
            )
            .await;
        assert_eq!(partial.status, PromptStatus::Done, "{partial:?}");
    });
}

/// Whether any two of the runs overlapped in time.
fn overlapped(runs: &[Run]) -> bool {
    runs.iter().enumerate().any(|(i, a)| {
        runs.iter()
            .skip(i + 1)
            .any(|b| a.started_at < b.ended_at.unwrap() && b.started_at < a.ended_at.unwrap())
    })
}

#[test]
fn slots_serialize_a_project_a_group_and_an_engine_limit() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let (a, b) = (
            bench.project("a", &["tv"]).await,
            bench.project("b", &["media", "tv"]).await,
        );
        let (c, d) = (
            bench.project("c", &["label"]).await,
            bench.project("d", &["label"]).await,
        );
        bench
            .corral
            .set_group_locking("label", false)
            .await
            .unwrap();

        // Two projects sharing the locking group `tv`, on two engines: never at once.
        let (sa, sb) = (
            bench.session(&a, "fake").await,
            bench.session(&b, "claude").await,
        );
        let (x, y) = tokio::join!(
            bench.run(&sa, "@fake delay=300\nx"),
            bench.run(&sb, "@fake delay=300\ny")
        );
        let mut runs = bench.runs(&x.id);
        runs.extend(bench.runs(&y.id));
        assert_eq!(
            (x.status, y.status),
            (PromptStatus::Done, PromptStatus::Done),
            "{x:?} {y:?}"
        );
        assert!(!overlapped(&runs), "a group serializes: {runs:?}");

        // A label-only group does not.
        let (sc, sd) = (
            bench.session(&c, "fake").await,
            bench.session(&d, "fake").await,
        );
        let (x, y) = tokio::join!(
            bench.run(&sc, "@fake delay=600\nx"),
            bench.run(&sd, "@fake delay=600\ny")
        );
        let mut runs = bench.runs(&x.id);
        runs.extend(bench.runs(&y.id));
        assert!(overlapped(&runs), "label groups do not serialize: {runs:?}");

        // Two sessions of one project: never at once.
        let sc2 = bench.session(&c, "fake").await;
        let (x, y) = tokio::join!(
            bench.run(&sc, "@fake delay=300\nx"),
            bench.run(&sc2, "@fake delay=300\ny")
        );
        let mut runs = bench.runs(&x.id);
        runs.extend(bench.runs(&y.id));
        assert!(!overlapped(&runs), "one project serializes: {runs:?}");
    });
}

#[test]
fn the_engine_environment_titles_and_instructions() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let path = bench.projects.path().join("rules");
        std::fs::create_dir_all(&path).unwrap();
        let project = bench
            .corral
            .add_project(NewProject {
                name: "rules".into(),
                path: path.to_string_lossy().into_owned(),
                instructions: Some("House rule: show images inline.".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let session = bench
            .corral
            .open_session(NewSession {
                project_id: project.id.clone(),
                engine: Some(corral::engine::EngineKind::Fake),
                title: Some("Chosen by a person".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let done = bench.run(&session, "@fake echo-env\nwork").await;
        let env: serde_json::Value = serde_json::from_str(done.answer.as_deref().unwrap()).unwrap();
        assert_eq!(env["CORRAL_SESSION_ID"], session.id.as_str());
        assert_eq!(
            env["CORRAL_HOME"],
            bench
                .home
                .path()
                .canonicalize()
                .unwrap()
                .to_string_lossy()
                .as_ref()
        );
        assert_eq!(env["CORRAL_RUN_ATTEMPT"], "1");
        let now = bench.session_now(&session);
        assert_eq!(
            now.title.as_deref(),
            Some("Chosen by a person"),
            "a human title stays"
        );
        // The conversation under way has the instructions already: not sent again.
        let plain = bench.run(&session, "the request").await;
        assert_eq!(plain.answer.as_deref(), Some("fake answer: the request"));
        // A conversation that begins gets them first.
        let fresh = bench
            .corral
            .open_session(NewSession {
                project_id: project.id.clone(),
                engine: Some(corral::engine::EngineKind::Fake),
                title: Some("Another".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let first = bench.run(&fresh, "the request").await;
        assert_eq!(
            first.answer.as_deref(),
            Some("fake answer: House rule: show images inline.")
        );
    });
}

#[test]
fn a_claude_session_runs_on_the_claude_format() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "claude").await;
        let done = bench.run(&session, "@fake answer=from claude\nwork").await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        assert_eq!(done.answer.as_deref(), Some("from claude"));
        let limited = bench.run(&session, "@fake rate-limit=1\nwork").await;
        assert_eq!(limited.status, PromptStatus::Done);
        assert_eq!(
            bench.runs(&limited.id)[0]
                .failure_class
                .map(FailureClass::as_str),
            Some("rate_limit")
        );
        // Claude's own retries are turned down: corral's policy does the waiting.
        let env = bench.run(&session, "@fake echo-env\nwork").await;
        let env: serde_json::Value = serde_json::from_str(env.answer.as_deref().unwrap()).unwrap();
        assert_eq!(env["CLAUDE_CODE_MAX_RETRIES"], "2", "{env}");
        // Other engines are left alone.
        let codex = bench.session(&project, "fake").await;
        let env = bench.run(&codex, "@fake echo-env\nwork").await;
        let env: serde_json::Value = serde_json::from_str(env.answer.as_deref().unwrap()).unwrap();
        assert_eq!(
            env["CLAUDE_CODE_MAX_RETRIES"],
            serde_json::Value::Null,
            "{env}"
        );
    });
}

/// A supervisor that goes away while its engine child runs: the prompt, the engine's pid and
/// the run's id. `hand_over`: it hands the run over first (`Corral::hand_over`, what
/// `corral daemon restart` does); else it just ends, as a killed daemon would.
fn leave_a_run(
    home: &std::path::Path,
    projects: &std::path::Path,
    hand_over: bool,
) -> (String, i64, String) {
    // Under the shim, as the daemon's engines run (see `common::library`).
    std::env::set_var("CORRAL_SHIM", env!("CARGO_BIN_EXE_corral-shim"));
    // A supervisor that goes away while its engine child runs (as a killed daemon would).
    actix::System::new().block_on(async {
        let corral = Corral::start(CorralOptions::new(home)).await.unwrap();
        corral
            .set_setting("engines.fake.path", Some(FAKE))
            .await
            .unwrap();
        corral
            .set_setting("cancel.grace_ms", Some("200"))
            .await
            .unwrap();
        let project = corral
            .add_project(NewProject {
                name: "p".into(),
                path: projects.to_string_lossy().into_owned(),
                ..Default::default()
            })
            .await
            .unwrap();
        let session = corral
            .open_session(NewSession {
                project_id: project.id,
                engine: Some(corral::engine::EngineKind::Fake),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut events = corral.subscribe();
        let sent = corral
            .send(NewPrompt {
                session_id: session.id,
                text: "@fake delay=4000\nlong work".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let (pid, run_id) = loop {
            let event = events.recv().await.unwrap();
            if event.kind == "run.started" {
                break (
                    event.payload["pid"].as_i64().unwrap(),
                    event.run_id.clone().unwrap(),
                );
            }
        };
        // The shim has started its engine (after it opened its own ends of the run's pipes).
        common::daemon::wait_until("the shim's engine runs", || {
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .is_ok_and(|children| !children.trim().is_empty())
        });
        if hand_over {
            corral.hand_over().await;
        }
        (sent.prompt.id, pid, run_id)
    })
}

/// The next supervisor of the home takes over a run its predecessor handed over (live
/// restore, on a store of its own): nothing is ended or closed at boot, the engine finishes
/// the turn it began, and the prompt ends with that one run.
#[test]
fn a_new_supervisor_takes_over_a_run_its_predecessor_handed_over() {
    let home = tempfile::tempdir().unwrap();
    let database = common::store::for_home(home.path());
    if database.is_some() {
        println!("skipping: on a shared store a dead daemon's runs are its lease guard's to end");
        return;
    }
    let projects = tempfile::tempdir().unwrap();
    let (prompt_id, pid, run_id) = leave_a_run(home.path(), projects.path(), true);
    assert!(!process_gone(pid), "the engine goes on under its shim");
    actix::System::new().block_on(async {
        let corral = Corral::start(CorralOptions::new(home.path()))
            .await
            .unwrap();
        assert!(corral.recovered().interrupted_runs.is_empty());
        let done = tokio::time::timeout(Duration::from_secs(30), corral.wait_prompt(&prompt_id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        let runs = corral.read(|c| runs::runs_of(c, &prompt_id)).unwrap();
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].id, run_id);
        assert_eq!(runs[0].status, RunStatus::Succeeded);
        let events = corral
            .read(|c| corral::store::events::events_after(c, &runs[0].session_id, 0, 1000))
            .unwrap();
        assert!(
            events.iter().any(|event| event.kind == "run.readopted"),
            "{events:?}"
        );
    });
}

/// A run whose spool is not whole (marked incomplete, as a full disk leaves it) is not taken
/// over, since lines would be missing: the next supervisor ends what is left of it (SIGTERM to
/// its group, its shim's included) and runs the prompt again.
#[test]
fn a_new_supervisor_ends_leftover_children_and_runs_their_prompts_again() {
    let home = tempfile::tempdir().unwrap();
    // The store of the test pass (a database of its own under CORRAL_TEST_STORE=postgres),
    // kept until both supervisors are done.
    let _database = common::store::for_home(home.path());
    let projects = tempfile::tempdir().unwrap();
    let (prompt_id, pid, run_id) = leave_a_run(home.path(), projects.path(), false);
    assert!(!process_gone(pid), "the orphaned engine still runs");
    // Its spool not whole (as a full disk leaves it): it cannot be taken over.
    std::fs::write(
        home.path().join("runs").join(&run_id).join("incomplete"),
        b"",
    )
    .unwrap();

    actix::System::new().block_on(async {
        let corral = Corral::start(CorralOptions::new(home.path()))
            .await
            .unwrap();
        assert_eq!(corral.recovered().interrupted_runs.len(), 1);
        // Ended at boot (SIGTERM to its group), long before its 4 s delay is over.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !process_gone(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            process_gone(pid),
            "the leftover engine was not ended at boot"
        );
        let done = tokio::time::timeout(Duration::from_secs(30), corral.wait_prompt(&prompt_id))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        let runs = corral.read(|c| runs::runs_of(c, &prompt_id)).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].status, RunStatus::Interrupted);
        assert_eq!(runs[0].retry_decision.as_deref(), Some("requeued"));
        assert_eq!(runs[1].status, RunStatus::Succeeded);
    });
}

#[test]
fn an_output_line_longer_than_the_bound_is_cut_and_the_run_goes_on() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", &[]).await;
        let session = bench.session(&project, "fake").await;
        // 6 MiB on one line: the daemon keeps 4 MiB of it, says so, and reads on.
        let done = bench.run(&session, "@fake long-line=6291456\nwork").await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        assert_eq!(done.answer.as_deref(), Some("fake answer: work"));
        let events = bench.session_events(&session.id);
        let raw: Vec<usize> = events
            .iter()
            .filter(|e| e.kind == "raw")
            .map(|e| e.payload["line"].as_str().unwrap_or_default().len())
            .collect();
        assert_eq!(raw, [4 * 1024 * 1024], "one raw line, cut to the bound");
        assert!(events.iter().any(|e| e.kind == "notice"
            && e.payload["message"]
                .as_str()
                .is_some_and(|m| m.contains("was cut"))));
    });
}

/// The shim ends as its engine did, so the daemon reads the engine's end from its own child:
/// the same exit code, or death by the same signal; an engine that cannot start is one line
/// on stderr and 127; no program is a usage error.
#[test]
fn the_shim_ends_as_its_engine_did() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;
    let shim = env!("CARGO_BIN_EXE_corral-shim");
    let exited = Command::new(shim)
        .args(["sh", "-c", "exit 3"])
        .status()
        .unwrap();
    assert_eq!(exited.code(), Some(3));
    let killed = Command::new(shim)
        .args(["sh", "-c", "kill -TERM $$"])
        .status()
        .unwrap();
    assert_eq!(killed.signal(), Some(libc::SIGTERM), "{killed:?}");
    let missing = Command::new(shim)
        .arg("/nonexistent/engine")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(127));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("/nonexistent/engine"), "{said}");
    let bare = Command::new(shim).output().unwrap();
    assert_eq!(bare.status.code(), Some(2));
}
