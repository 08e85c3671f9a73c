//! The codex-app-server engine through the library, on the fake engine's app-server mode: one
//! long-lived child per project, turns, retries as the protocol says, transport loss and
//! restarts, server requests, steering, compaction, and the child's state in `status`.

use crate::common;

use std::ops::Deref;
use std::time::Duration;

use common::library::{actix_test, Library};
use corral::engine::FailureClass;
use corral::store::processes::ServerStatus;
use corral::store::projects::{NewProject, Project};
use corral::store::prompts::PromptStatus;
use corral::store::runs::RunStatus;
use corral::store::sessions::{NewSession, Session};
use corral::store::{events, prompts};
use corral::{Corral, CorralOptions};

const FAKE: &str = env!("CARGO_BIN_EXE_corral-fake-engine");
const ENGINE: &str = "codex-app-server";

/// A supervisor whose `codex-app-server` engine is the fake engine's app-server mode.
struct Bench(Library);

impl Deref for Bench {
    type Target = Library;

    fn deref(&self) -> &Library {
        &self.0
    }
}

impl Bench {
    async fn start() -> Bench {
        Self::start_in(tempfile::tempdir().unwrap()).await
    }

    async fn start_in(home: tempfile::TempDir) -> Bench {
        let settings = [
            ("engines.codex-app-server.path", FAKE),
            ("retry.rate_limit_delays", "0.05,0.05"),
            ("cancel.grace_ms", "300"),
        ];
        Bench(Library::start_in(home, &settings).await)
    }

    async fn project(&self, name: &str, full_access: bool) -> Project {
        self.add_project(NewProject {
            name: name.into(),
            full_access,
            ..Default::default()
        })
        .await
    }

    /// A session on the app-server engine.
    async fn session(&self, project: &Project) -> Session {
        self.0.session(project, ENGINE).await
    }

    /// Sends a prompt: its id.
    async fn send(&self, session: &Session, text: &str) -> String {
        self.0.send(session, text).await.prompt.id
    }

    /// The events of one prompt.
    fn events_of(&self, prompt: &prompts::Prompt) -> Vec<events::Event> {
        self.session_events(&prompt.session_id)
            .into_iter()
            .filter(|event| event.prompt_id.as_deref() == Some(&prompt.id))
            .collect()
    }

    /// Gives the session a thread id its app-server has never heard of.
    fn lose_thread(&self, session: &Session) {
        self.store().execute(&format!(
            "UPDATE sessions SET thread_id = '00000000-0000-4000-8000-000000000000' WHERE id = {}",
            common::store::quoted(&session.id)
        ));
    }
}

fn alive(pid: i64) -> bool {
    corral::process::is_alive(pid as u32, None)
}

#[test]
fn turns_run_on_one_long_lived_child_and_resume_the_thread() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let project = bench.project("p", false).await;
        let session = bench.session(&project).await;
        let first = bench
            .run(&session, "@fake answer=hello from the app server\nsay hi")
            .await;
        assert_eq!(first.status, PromptStatus::Done, "{first:?}");
        assert_eq!(first.answer.as_deref(), Some("hello from the app server"));
        let kinds: Vec<String> = bench
            .events_of(&first)
            .into_iter()
            .map(|e| e.kind.to_string())
            .collect();
        for kind in [
            "thread.started",
            "message.delta",
            "message",
            "turn.completed",
        ] {
            assert!(kinds.iter().any(|k| k == kind), "{kind} missing: {kinds:?}");
        }
        let thread = bench.session_now(&session).thread_id.expect("a thread");
        let second = bench.run(&session, "again").await;
        assert_eq!(second.status, PromptStatus::Done);
        let (a, b) = (&bench.runs(&first.id)[0], &bench.runs(&second.id)[0]);
        assert_eq!(a.pid, b.pid, "one child serves both turns");
        assert_eq!(b.thread_id.as_deref(), Some(thread.as_str()));
        assert_eq!(
            bench.session_now(&session).thread_id.as_deref(),
            Some(thread.as_str())
        );
    });
}

#[test]
fn will_retry_errors_keep_the_turn_in_progress() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let done = bench.run(&session, "@fake will-retry=2\nwork").await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        assert_eq!(bench.runs(&done.id).len(), 1);
        let notices = bench
            .events_of(&done)
            .into_iter()
            .filter(|e| e.kind == "notice" && e.payload["will_retry"] == true)
            .count();
        assert_eq!(notices, 2);
    });
}

#[test]
fn failed_turns_are_classified_by_codex_error_info() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let limited = bench.run(&session, "@fake rate-limit=1\nwork").await;
        assert_eq!(limited.status, PromptStatus::Done, "{limited:?}");
        let runs = bench.runs(&limited.id);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("rate_limit")
        );

        let usage = bench.run(&session, "@fake usage-limit\nwork").await;
        assert_eq!(usage.status, PromptStatus::Failed);
        assert!(
            usage.error.as_deref().unwrap().contains("usage limit"),
            "{usage:?}"
        );
        assert!(
            usage.error.as_deref().unwrap().contains("try again at"),
            "the reset time is shown"
        );
        assert_eq!(
            bench.runs(&usage.id).len(),
            1,
            "a usage limit is not retried"
        );

        // A new conversation: each retry sends the prompt again, on a new thread.
        let fresh = bench.session(&bench.project("q", false).await).await;
        let overloaded = bench.run(&fresh, "@fake overloaded\nwork").await;
        assert_eq!(overloaded.status, PromptStatus::Failed);
        let runs = bench.runs(&overloaded.id);
        assert_eq!(runs.len(), 3, "two backoffs, then fail");
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("overloaded")
        );

        // A conversation under way holds the failed turn's prompt: the retry continues it
        // rather than sending the prompt a second time.
        let continued = bench.run(&session, "@fake overloaded\nwork").await;
        assert_eq!(continued.status, PromptStatus::Done, "{continued:?}");
        assert_eq!(bench.runs(&continued.id).len(), 2);
        assert_eq!(
            continued.answer.as_deref(),
            Some("fake answer: Continue from where you left off.")
        );
    });
}

#[test]
fn a_missing_rollout_starts_a_new_thread_and_replays() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        bench.lose_thread(&session);
        let done = bench.run(&session, "replay me").await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        let runs = bench.runs(&done.id);
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("missing_rollout")
        );
        let thread = bench.session_now(&session).thread_id.unwrap();
        assert_ne!(thread, "00000000-0000-4000-8000-000000000000");
    });
}

#[test]
fn a_transport_loss_fails_the_turn_with_its_details_and_the_child_restarts() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let lost = bench.run(&session, "@fake exit-mid-turn=3\nwork").await;
        assert_eq!(lost.status, PromptStatus::Failed, "{lost:?}");
        let runs = bench.runs(&lost.id);
        assert_eq!(runs.len(), 1, "a transport loss is not retried");
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("transport_closed_before_turn_completed")
        );
        let closed = bench
            .events_of(&lost)
            .into_iter()
            .find(|e| e.kind == "transport.closed")
            .expect("a transport.closed event");
        assert_eq!(closed.payload["exit_code"], 3, "{closed:?}");
        assert_eq!(closed.payload["partial_line_flushed"], true, "{closed:?}");
        assert!(closed.payload["partial_line_length"].as_u64().unwrap() > 0);
        assert!(closed.payload["pid"].as_u64().is_some());
        assert!(closed.payload["close_source"].is_string());
        // No turn is reported completed that the child did not complete.
        assert!(bench
            .events_of(&lost)
            .iter()
            .all(|e| e.kind != "turn.completed"));

        let next = bench.run(&session, "after the restart").await;
        assert_eq!(next.status, PromptStatus::Done, "{next:?}");
        assert_ne!(bench.runs(&next.id)[0].pid, runs[0].pid, "a new child");
        let states = bench.corral.app_servers().await;
        assert_eq!(states[0].generation, 2, "{states:?}");
        assert_eq!(states[0].last_exit.as_ref().unwrap()["exit_code"], 3);
    });
}

#[test]
fn more_than_five_restarts_in_a_minute_stop_the_restarts() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        // The first child and five restarts all crash.
        for _ in 0..6 {
            let crashed = bench.run(&session, "@fake crash\nwork").await;
            assert_eq!(crashed.status, PromptStatus::Failed);
        }
        // The next prompt is not failed (nor lost): it waits until restarts are allowed again.
        let mut events = bench.corral.subscribe();
        let waiting = bench.send(&session, "work").await;
        let unavailable = loop {
            let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
                .await
                .expect("an app_server.unavailable event")
                .unwrap();
            if event.kind == "app_server.unavailable"
                && event.prompt_id.as_deref() == Some(&waiting)
            {
                break event;
            }
        };
        assert!(
            unavailable.payload["reason"]
                .as_str()
                .unwrap()
                .contains("not restarting"),
            "{unavailable:?}"
        );
        assert!(unavailable.payload["retry_in_ms"].as_u64().unwrap() > 0);
        let now = bench
            .corral
            .read(|c| prompts::prompt(c, &waiting))
            .unwrap()
            .unwrap();
        assert_eq!(now.status, PromptStatus::Running, "{now:?}");
        let states = bench.corral.app_servers().await;
        assert!(
            matches!(&states[0].status, ServerStatus::Failed { reason } if reason.contains("within 60 s")),
            "{states:?}"
        );
        // It waits without a slot: with one slot in all, another project's session runs.
        assert!(bench.runs(&waiting).is_empty(), "no run while it waits");
        bench
            .corral
            .set_setting("slots.total", Some("1"))
            .await
            .unwrap();
        bench
            .corral
            .set_setting("engines.fake.path", Some(FAKE))
            .await
            .unwrap();
        let other = bench.project("q", false).await;
        let other = bench
            .corral
            .open_session(NewSession {
                project_id: other.id.clone(),
                engine: Some(corral::engine::EngineKind::Fake),
                ..Default::default()
            })
            .await
            .unwrap();
        let beside = bench.run(&other, "meanwhile").await;
        assert_eq!(beside.status, PromptStatus::Done, "{beside:?}");
        // A waiting prompt can be cancelled.
        bench.corral.cancel(&waiting).await.unwrap();
        assert_eq!(bench.wait(&waiting).await.status, PromptStatus::Cancelled);
    });
}

#[test]
fn cancel_interrupts_the_turn_and_restarts_a_child_that_ignores_it() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let mut events = bench.corral.subscribe();
        let hanging = bench.send(&session, "@fake hang\nwork").await;
        loop {
            let event = events.recv().await.unwrap();
            if event.kind == "turn.started" && event.prompt_id.as_deref() == Some(&hanging) {
                break;
            }
        }
        bench.corral.cancel(&hanging).await.unwrap();
        assert_eq!(bench.wait(&hanging).await.status, PromptStatus::Cancelled);
        let pid = bench.runs(&hanging)[0].pid.unwrap();
        assert!(alive(pid), "turn/interrupt was enough: the child stays");

        let stubborn = bench
            .send(&session, "@fake ignore-interrupt\n@fake hang\nwork")
            .await;
        loop {
            let event = events.recv().await.unwrap();
            if event.kind == "turn.started" && event.prompt_id.as_deref() == Some(&stubborn) {
                break;
            }
        }
        bench.corral.cancel(&stubborn).await.unwrap();
        assert_eq!(bench.wait(&stubborn).await.status, PromptStatus::Cancelled);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(pid) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            !alive(pid),
            "the child that ignored turn/interrupt was restarted"
        );
        assert_eq!(bench.run(&session, "next").await.status, PromptStatus::Done);
    });
}

#[test]
fn approvals_follow_the_project_policy_and_unknown_requests_get_an_error() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let safe = bench.session(&bench.project("safe", false).await).await;
        let trusted = bench.session(&bench.project("trusted", true).await).await;
        let denied = bench.run(&safe, "@fake approval=command\nwork").await;
        assert_eq!(
            denied.answer.as_deref(),
            Some("approval: decline"),
            "{denied:?}"
        );
        assert!(bench
            .events_of(&denied)
            .iter()
            .any(|e| e.kind == "server.request"));
        let approved = bench.run(&trusted, "@fake approval=file\nwork").await;
        assert_eq!(
            approved.answer.as_deref(),
            Some("approval: accept"),
            "{approved:?}"
        );
        let unknown = bench.run(&safe, "@fake unknown-request\nwork").await;
        assert!(
            unknown
                .answer
                .as_deref()
                .unwrap()
                .contains("does not handle"),
            "{unknown:?}"
        );
    });
}

#[test]
fn steering_adds_to_the_running_turn() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        bench.run(&session, "open the thread").await;
        let mut events = bench.corral.subscribe();
        let hanging = bench.send(&session, "@fake hang\nwork").await;
        loop {
            let event = events.recv().await.unwrap();
            if event.kind == "turn.started" && event.prompt_id.as_deref() == Some(&hanging) {
                break;
            }
        }
        bench
            .corral
            .steer(&session.id, "also update the docs")
            .await
            .unwrap();
        let done = bench.wait(&hanging).await;
        assert_eq!(
            done.answer.as_deref(),
            Some("steered: also update the docs"),
            "{done:?}"
        );
    });
}

#[test]
fn compaction_records_counts_and_resets_a_missing_thread() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let done = bench
            .run(&session, "@fake answer=An answer\nFirst request")
            .await;
        let compacted = bench.corral.compact(&session.id).await.unwrap();
        assert!(!compacted.thread_reset, "{compacted:?}");
        assert_eq!(compacted.compacted.messages, 1);
        let expected = (done.text.chars().count() + "An answer".len()) as i64;
        assert_eq!(compacted.compacted.characters, expected);
        assert_eq!(
            compacted.session.map(|s| s.compacted_message_count),
            Some(Some(1))
        );
        let now = bench.session_now(&session);
        assert_eq!(now.compacted_message_count, Some(1));
        assert!(now.thread_id.is_some());

        bench.lose_thread(&session);
        let reset = bench.corral.compact(&session.id).await.unwrap();
        assert!(reset.thread_reset, "{reset:?}");
        assert_eq!(bench.session_now(&session).thread_id, None);
    });
}

#[test]
fn the_childs_state_survives_a_supervisor_restart() {
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().to_path_buf();
    let (pid, home, projects, _database) = actix::System::new().block_on(async {
        let bench = Bench::start_in(home).await;
        let session = bench.session(&bench.project("p", false).await).await;
        let done = bench.run(&session, "work").await;
        let states = bench.corral.app_servers().await;
        assert_eq!(states.len(), 1);
        assert_eq!(states[0].status, ServerStatus::Running, "{states:?}");
        assert!(!states[0].recent.is_empty());
        let pid = bench.runs(&done.id)[0].pid.unwrap();
        // Keep the home (and its database, on PostgreSQL): the next supervisor reads it.
        let Bench(library) = bench;
        (pid, library.home, library.projects, library.database)
    });
    actix::System::new().block_on(async {
        let corral = Corral::start(CorralOptions::new(&home_path)).await.unwrap();
        let states = corral.app_servers().await;
        assert_eq!(states.len(), 1, "read back from the store");
        // The truth: the dead supervisor's child was ended at boot, and its state says so.
        assert!(!alive(pid), "the orphaned app-server was ended at boot");
        assert_eq!(states[0].status, ServerStatus::Stopped, "{states:?}");
        assert!(states[0].pid.is_none(), "{states:?}");
        let last_exit = states[0].last_exit.clone().unwrap_or_default();
        assert_eq!(last_exit["pid"], pid, "{states:?}");
        assert_eq!(last_exit["close_source"], "recovery");
    });
    drop((home, projects));
}

#[test]
fn the_agents_commands_know_their_session_and_the_turns_driver() {
    actix_test(|| async {
        let home = tempfile::tempdir().unwrap();
        let corral = Corral::start(CorralOptions {
            exec_id: Some("host-exec-1".into()),
            ..CorralOptions::new(home.path())
        })
        .await
        .unwrap();
        corral
            .set_setting("engines.codex-app-server.path", Some(FAKE))
            .await
            .unwrap();
        let bench = Bench(Library {
            corral,
            database: None,
            home,
            projects: tempfile::tempdir().unwrap(),
        });
        let session = bench.session(&bench.project("p", false).await).await;
        let command = format!(
            "@fake run={} monitor list --all --limit 1\nwork",
            env!("CARGO_BIN_EXE_corral")
        );
        let done = bench.run(&session, &command).await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        let db = rusqlite::Connection::open(bench.home.path().join("corral.db")).unwrap();
        let (parent, caller, via_agent): (Option<String>, Option<String>, bool) = db
            .query_row(
                "SELECT parent_exec_id, caller_session_id, via_agent FROM execs \
                 WHERE command LIKE '%monitor%list%'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .unwrap();
        assert_eq!(caller.as_deref(), Some(session.id.as_str()));
        assert_eq!(parent.as_deref(), Some("host-exec-1"));
        assert!(via_agent);
    });
}

#[test]
fn a_last_line_without_a_newline_still_completes_the_turn() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let done = bench
            .run(
                &session,
                "@fake final-no-newline\n@fake answer=the last line had no newline\nwork",
            )
            .await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        assert_eq!(done.answer.as_deref(), Some("the last line had no newline"));
        let runs = bench.runs(&done.id);
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].status, RunStatus::Succeeded, "{runs:?}");
        assert_eq!(runs[0].failure_class, None, "not a transport failure");
        let kinds: Vec<String> = bench
            .events_of(&done)
            .into_iter()
            .map(|e| e.kind.to_string())
            .collect();
        assert!(kinds.iter().any(|k| k == "turn.completed"), "{kinds:?}");
        assert!(kinds.iter().all(|k| k != "transport.closed"), "{kinds:?}");

        // The child exited after that line: the next prompt gets a new one.
        let next = bench.run(&session, "after the exit").await;
        assert_eq!(next.status, PromptStatus::Done, "{next:?}");
        assert_ne!(bench.runs(&next.id)[0].pid, runs[0].pid, "a new child");
    });
}

#[test]
fn a_close_before_completion_fails_only_that_turn() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let first = bench.run(&session, "first").await;
        let second = bench.run(&session, "second").await;
        let lost = bench.run(&session, "@fake exit-mid-turn=1\nthird").await;
        assert_eq!(lost.status, PromptStatus::Failed, "{lost:?}");
        let runs = bench.runs(&lost.id);
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("transport_closed_before_turn_completed")
        );
        assert!(bench
            .events_of(&lost)
            .iter()
            .any(|e| e.kind == "transport.closed"));
        for earlier in [&first, &second] {
            let now = bench
                .corral
                .read(|c| prompts::prompt(c, &earlier.id))
                .unwrap()
                .unwrap();
            assert_eq!(now.status, PromptStatus::Done, "{now:?}");
            let runs = bench.runs(&earlier.id);
            assert_eq!(runs.len(), 1, "{runs:?}");
            assert_eq!(runs[0].status, RunStatus::Succeeded, "{runs:?}");
            assert_eq!(runs[0].pid, bench.runs(&lost.id)[0].pid, "the same child");
            assert!(
                bench
                    .events_of(&now)
                    .iter()
                    .all(|e| e.kind != "transport.closed"),
                "the close is not reported on an earlier turn"
            );
        }
    });
}

#[test]
fn garbage_on_stdout_is_a_raw_event_and_the_turn_completes() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let done = bench
            .run(&session, "@fake garbage\n@fake answer=fine\nwork")
            .await;
        assert_eq!(done.status, PromptStatus::Done, "{done:?}");
        assert_eq!(done.answer.as_deref(), Some("fine"));
        let raw: Vec<String> = bench
            .events_of(&done)
            .into_iter()
            .filter(|e| e.kind == "raw")
            .map(|e| e.payload["line"].as_str().unwrap_or_default().to_string())
            .collect();
        assert!(
            raw.iter().any(|line| line.contains("this is not JSON")),
            "{raw:?}"
        );
        assert_eq!(bench.runs(&done.id)[0].status, RunStatus::Succeeded);
    });
}

#[test]
fn stray_and_duplicate_responses_neither_crash_nor_restart_the_child() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let session = bench.session(&bench.project("p", false).await).await;
        let stray = bench
            .run(&session, "@fake stray-response\n@fake answer=stray\nwork")
            .await;
        assert_eq!(stray.status, PromptStatus::Done, "{stray:?}");
        assert_eq!(stray.answer.as_deref(), Some("stray"));
        let double = bench
            .run(&session, "@fake double-response\n@fake answer=double\nwork")
            .await;
        assert_eq!(double.status, PromptStatus::Done, "{double:?}");
        assert_eq!(double.answer.as_deref(), Some("double"));
        assert_eq!(bench.runs(&double.id).len(), 1, "the turn ran once");
        let next = bench.run(&session, "next").await;
        assert_eq!(next.status, PromptStatus::Done, "{next:?}");
        let pid = bench.runs(&stray.id)[0].pid;
        assert!(pid.is_some());
        assert_eq!(bench.runs(&double.id)[0].pid, pid, "the same child");
        assert_eq!(bench.runs(&next.id)[0].pid, pid, "the same child");
        assert!(alive(pid.unwrap()));
        let states = bench.corral.app_servers().await;
        assert_eq!(states[0].generation, 1, "no restart: {states:?}");
    });
}

#[test]
fn a_child_that_never_answers_initialize_is_timed_out_and_counted() {
    actix_test(|| async {
        let bench = Bench::start().await;
        let wrapper = bench.projects.path().join("no-initialize.sh");
        std::fs::write(
            &wrapper,
            format!("#!/bin/sh\nCORRAL_FAKE_APP_SERVER=no-initialize exec '{FAKE}' \"$@\"\n"),
        )
        .unwrap();
        let mut permissions = std::fs::metadata(&wrapper).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
        std::fs::set_permissions(&wrapper, permissions).unwrap();
        bench
            .corral
            .set_setting(
                "engines.codex-app-server.path",
                Some(wrapper.to_str().unwrap()),
            )
            .await
            .unwrap();
        bench
            .corral
            .set_setting("app_server.init_timeout_ms", Some("300"))
            .await
            .unwrap();
        let session = bench.session(&bench.project("p", false).await).await;
        let first = bench.run(&session, "work").await;
        assert_eq!(first.status, PromptStatus::Failed, "{first:?}");
        assert!(
            first
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("initialize"),
            "{first:?}"
        );
        let states = bench.corral.app_servers().await;
        assert!(states[0].generation >= 1, "{states:?}");
        let recent = &states[0].recent;
        assert!(
            recent.iter().any(|event| event["kind"]
                .as_str()
                .unwrap_or_default()
                .contains("initialize")),
            "{states:?}"
        );

        // The next prompt restarts the child: the attempt counted toward the limit.
        let second = bench.run(&session, "again").await;
        assert_eq!(second.status, PromptStatus::Failed, "{second:?}");
        let states = bench.corral.app_servers().await;
        assert!(states[0].generation >= 2, "{second:?} {states:?}");
        assert!(
            states[0]
                .recent
                .iter()
                .any(|event| event["kind"] == "restarting"),
            "{states:?}"
        );
    });
}

#[test]
fn a_thread_another_child_holds_is_a_writer_conflict_retried_on_the_same_thread() {
    actix_test(|| async {
        let bench = Bench::start().await;
        bench
            .corral
            .set_setting("retry.writer_conflict_delays", Some("0.05,0.05"))
            .await
            .unwrap();
        // Two projects: two app-server children. The first holds its thread open.
        let first = bench.session(&bench.project("a", false).await).await;
        assert_eq!(
            bench.run(&first, "open the thread").await.status,
            PromptStatus::Done
        );
        let held = bench.session_now(&first).thread_id.unwrap();
        let second = bench.session(&bench.project("b", false).await).await;
        bench.store().execute(&format!(
            "UPDATE sessions SET thread_id = {} WHERE id = {}",
            common::store::quoted(&held),
            common::store::quoted(&second.id)
        ));
        let refused = bench.run(&second, "write to it too").await;
        assert_eq!(refused.status, PromptStatus::Failed, "{refused:?}");
        assert!(
            refused.error.as_deref().unwrap().contains("active writer"),
            "{refused:?}"
        );
        let runs = bench.runs(&refused.id);
        assert_eq!(runs.len(), 3, "two retries, then fail: {runs:?}");
        assert!(runs
            .iter()
            .all(|run| run.failure_class.map(FailureClass::as_str) == Some("writer_conflict")));
        assert!(runs
            .iter()
            .all(|run| run.thread_id.as_deref() == Some(held.as_str())));
    });
}
