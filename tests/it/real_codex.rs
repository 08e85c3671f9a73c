//! corral's supervisor driving the REAL Codex CLI (`@openai/codex@0.171.0`), fully offline,
//! against a loopback mock of the OpenAI Responses API that the test starts itself
//! ([`mock_responses`]).
//!
//! The fake engine (`tests/it/supervisor.rs`) only imitates codex's output; this test checks
//! that corral's argv, environment, output parsing, thread bookkeeping and retry policy hold
//! against the real binary: a new thread, a resumed one (codex replays the history to the
//! model), and a rate limit that codex gives up on at once and corral retries.
//!
//! The same binary also runs as corral's `codex-app-server` engine (`codex app-server`, one
//! long-lived child per project speaking JSON-RPC on stdio, codex.md §5): two turns on one
//! thread and one child, a 429 that codex itself retries (`willRetry: true`) inside one corral
//! run, an interrupt of a turn whose model request hangs, and a resume of a thread codex never
//! saw (`missing_rollout`, then a new thread).
//!
//! The binary comes from `CORRAL_CODEX_BIN` (CI installs it with npm, see `.ci/run`). Without
//! it the test prints why and passes: that is its only skip.
//!
//! Codex is kept off the network and away from the developer's own files by the private
//! environment `tests/it/real_engines.rs` runs it in too (`common::engines`): a private
//! `CODEX_HOME` whose `config.toml` names the mock as the only model provider and turns off
//! everything that reaches out (analytics, plugin sync, update checks), with codex's own
//! retries at 0 so that corral owns the retry policy.
//! corral gives engine children its own environment, so `engines.codex.path` points at a
//! generated wrapper script that sets `CODEX_HOME`, `HOME` and the dummy API key, then execs
//! the real binary.

use crate::common;
// The HTTP core `mock_responses` is built on (with the Anthropic and Chat Completions mocks).
use crate::mock_responses;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corral::engine::FailureClass;
use corral::store::events::Event;
use corral::store::projects::NewProject;
use corral::store::prompts::{NewPrompt, Prompt, PromptStatus};
use corral::store::runs::{Run, RunStatus};
use corral::store::sessions::{NewSession, Session};
use corral::store::{events, runs, sessions};
use corral::{Corral, CorralOptions};

use common::engines::{binary_or_skip, Engine, EngineEnv};
use common::library::actix_test;
use mock_responses::{Answer, MockResponses, INPUT_TOKENS};

/// How long one prompt may take. A turn against the mock takes ~0.1–0.2 s; the margin is for a
/// loaded CI machine and a cold `CODEX_HOME`.
const PROMPT_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything one test needs: the mock, codex's private environment with its wrapper, and a
/// supervisor in a temporary corral home with a project in a temporary directory.
struct Rig {
    mock: MockResponses,
    corral: Corral,
    session: Session,
    /// corral's home (its store is `corral.db` there, or the database its `config` names).
    corral_home: PathBuf,
    /// The home's PostgreSQL database under `CORRAL_TEST_STORE=postgres`; after `corral`, so
    /// dropped once the supervisor let go of it.
    database: Option<common::store::TestDatabase>,
    // Kept so the directories live as long as the rig.
    _dirs: Vec<tempfile::TempDir>,
    _env: EngineEnv,
}

/// The engine a rig's session runs on.
const EXEC: &str = "codex";
const APP_SERVER: &str = "codex-app-server";

/// A thread id no codex home has ever seen.
const UNKNOWN_THREAD: &str = "00000000-0000-4000-8000-000000000000";

impl Rig {
    /// A `codex exec` session with codex's own retries off.
    async fn start(codex: &Path) -> Rig {
        Rig::start_with(codex, EXEC, 0).await
    }

    /// A session on `engine` (`codex` or `codex-app-server`; both engines' paths are the
    /// wrapper), with codex's `stream_max_retries` as given.
    async fn start_with(codex: &Path, engine: &str, stream_max_retries: u32) -> Rig {
        let mock = MockResponses::start();
        let env = EngineEnv::codex(codex, &mock.base_url(), stream_max_retries);
        let wrapper = env.wrapper();
        let corral_home = tempfile::tempdir().unwrap();
        // Not a git repository: corral must pass --skip-git-repo-check.
        let project_dir = tempfile::tempdir().unwrap();
        // The store of the test pass: SQLite, or a database of its own in `HOME/config`.
        let database = common::store::for_home(corral_home.path());

        let corral = Corral::start(CorralOptions::new(corral_home.path()))
            .await
            .unwrap();
        for (name, value) in [
            ("engines.codex.path", wrapper.to_str().unwrap()),
            // corral runs it as `<wrapper> app-server`.
            ("engines.codex-app-server.path", wrapper.to_str().unwrap()),
            // One retry of a rate limit, soon.
            ("retry.rate_limit_delays", "0.2"),
            // A hung codex is ended by corral rather than hanging the test.
            ("run.timeout_s", "60"),
            ("cancel.grace_ms", "500"),
        ] {
            corral.set_setting(name, Some(value)).await.unwrap();
        }
        let project = corral
            .add_project(NewProject {
                name: "real-codex".into(),
                path: project_dir.path().to_string_lossy().into_owned(),
                ..Default::default()
            })
            .await
            .unwrap();
        let session = corral
            .open_session(NewSession {
                project_id: project.id,
                engine: Some(engine.parse().expect("a known engine")),
                ..Default::default()
            })
            .await
            .unwrap();
        Rig {
            mock,
            corral,
            session,
            corral_home: corral_home.path().to_path_buf(),
            database,
            _dirs: vec![corral_home, project_dir],
            _env: env,
        }
    }

    /// Sends `text` and waits for the prompt's end; on a timeout, fails with what is known.
    async fn run(&self, text: &str) -> Prompt {
        let prompt_id = self.send(text).await;
        self.wait(&prompt_id).await
    }

    /// Sends `text`; the prompt's id.
    async fn send(&self, text: &str) -> String {
        self.corral
            .send(NewPrompt {
                session_id: self.session.id.clone(),
                text: text.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .prompt
            .id
    }

    /// Sends `text`, whose turn the mock leaves hanging: its prompt's id once the turn has
    /// started and the mock holds the `requests`th request.
    async fn send_until_it_hangs(&self, text: &str, requests: usize) -> String {
        let mut events = self.corral.subscribe();
        let prompt_id = self.send(text).await;
        let started = tokio::time::timeout(PROMPT_TIMEOUT, async {
            loop {
                let event = events.recv().await.expect("the event stream");
                if event.kind == "turn.started" && event.prompt_id.as_deref() == Some(&prompt_id) {
                    return;
                }
            }
        })
        .await;
        assert!(started.is_ok(), "no turn.started: {:#?}", self.events());
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.mock.requests().len() < requests && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        prompt_id
    }

    /// Waits for the prompt's end; on a timeout, fails with what is known.
    async fn wait(&self, prompt_id: &str) -> Prompt {
        let prompt_id = prompt_id.to_string();
        match tokio::time::timeout(PROMPT_TIMEOUT, self.corral.wait_prompt(&prompt_id)).await {
            Ok(prompt) => prompt.unwrap(),
            Err(_) => panic!(
                "prompt {prompt_id} did not end within {PROMPT_TIMEOUT:?}; runs {:#?}; events {:#?}; \
                 mock requests: {}",
                self.runs(&prompt_id),
                self.events(),
                self.mock.requests().len()
            ),
        }
    }

    fn runs(&self, prompt_id: &str) -> Vec<Run> {
        self.corral.read(|c| runs::runs_of(c, prompt_id)).unwrap()
    }

    fn events(&self) -> Vec<Event> {
        self.corral
            .read(|c| events::events_after(c, &self.session.id, 0, 100_000))
            .unwrap()
    }

    /// Gives the session a thread id codex has never seen, straight in the store (as
    /// `tests/it/app_server.rs` does).
    fn lose_thread(&self) {
        let url = self.database.as_ref().map(|database| database.url.as_str());
        let changed = common::store::HomeStore::of(&self.corral_home, url).execute(&format!(
            "UPDATE sessions SET thread_id = {} WHERE id = {}",
            common::store::quoted(UNKNOWN_THREAD),
            common::store::quoted(&self.session.id)
        ));
        assert_eq!(changed, 1, "the session's row");
    }

    fn session_now(&self) -> Session {
        self.corral
            .read(|c| sessions::session(c, &self.session.id))
            .unwrap()
            .unwrap()
    }

    /// A readable account of a prompt, for assertion messages: its runs and its events.
    fn story(&self, prompt: &Prompt) -> String {
        let events: Vec<String> = self
            .events()
            .into_iter()
            .filter(|event| event.prompt_id.as_deref() == Some(&prompt.id))
            .map(|event| format!("{} {}", event.kind, event.payload))
            .collect();
        format!(
            "{prompt:#?}\nruns {:#?}\nevents:\n{}",
            self.runs(&prompt.id),
            events.join("\n")
        )
    }

    /// What codex logged at ERROR level on stderr during `prompt`. Codex logs a mock that
    /// strays from the protocol this way while the turn still succeeds (deltas sent before
    /// their item was opened gave `OutputTextDelta without active item`), so an empty list
    /// says the mock speaks the protocol as codex expects.
    fn engine_errors(&self, prompt: &Prompt) -> Vec<String> {
        self.events()
            .into_iter()
            .filter(|event| {
                event.kind == "stderr" && event.prompt_id.as_deref() == Some(&prompt.id)
            })
            .filter_map(|event| event.payload["line"].as_str().map(str::to_string))
            .filter(|line| line.contains(" ERROR "))
            .collect()
    }

    /// Asserts that no process of any run of `prompt` is left: each run's child led its own
    /// process group (pgid = pid), so an empty group means codex and anything it started are
    /// gone.
    async fn assert_no_process_left(&self, prompt: &Prompt) {
        for run in self.runs(&prompt.id) {
            let pid = run.pid.expect("the run's child was spawned") as i32;
            let deadline = Instant::now() + Duration::from_secs(5);
            while corral::process::group_exists(pid) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(
                !corral::process::group_exists(pid),
                "run {} left processes in group {pid}",
                run.id
            );
        }
    }
}

/// Asserts that the process groups of these app-server children are gone once the actix
/// system that ran corral has ended (the child lives as long as its actor; its stdin closes
/// and it exits). A group still there is killed, so a failing test leaves no codex behind.
fn assert_groups_gone(pids: &[i64]) {
    let mut pids = pids.to_vec();
    pids.sort_unstable();
    pids.dedup();
    for pid in pids {
        let pid = pid as i32;
        let deadline = Instant::now() + Duration::from_secs(5);
        while corral::process::group_exists(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if corral::process::group_exists(pid) {
            corral::process::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("the app-server child's group {pid} outlived corral");
        }
    }
}

/// The `usage` payloads the run reported (codex's `turn.completed` usage).
fn usages(events: &[Event], prompt: &Prompt) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter(|event| event.kind == "usage" && event.prompt_id.as_deref() == Some(&prompt.id))
        .map(|event| event.payload["usage"].clone())
        .collect()
}

#[test]
fn a_new_thread_then_a_resumed_one_with_the_history_replayed() {
    let Some(codex) = binary_or_skip(Engine::Codex) else {
        return;
    };
    actix_test(|| async {
        let rig = Rig::start(&codex).await;

        // 1. A new thread. The session has no title yet, so corral asks for one; the mock's
        //    answer gives it on its first line, which corral takes out of the answer.
        rig.mock.script([Answer::text(
            "<!-- corral-title: Mock greeting -->\nhello from the mock",
        )]);
        let first = rig.run("say hi").await;
        assert_eq!(first.status, PromptStatus::Done, "{}", rig.story(&first));
        assert_eq!(first.answer.as_deref(), Some("hello from the mock"));
        assert_eq!(first.attempts, 1);
        let requests = rig.mock.requests();
        assert_eq!(requests.len(), 1, "{requests:#?}");
        let request = &requests[0];
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", "/v1/responses")
        );
        // The wrapper's key reached codex, and codex used the configured model.
        assert_eq!(request.header("authorization"), Some("Bearer dummy"));
        assert_eq!(request.json()["model"], "mock-model");
        assert_eq!(request.json()["stream"], true);
        let last = request.messages().pop().expect("a message in the input");
        assert_eq!(last.0, "user");
        assert!(
            last.1.starts_with("say hi") && last.1.contains("corral-title:"),
            "the framed prompt is the last user message: {last:?}"
        );
        let session = rig.session_now();
        let thread = session
            .thread_id
            .clone()
            .expect("the session got codex's thread id");
        assert_eq!(session.title.as_deref(), Some("Mock greeting"));
        // The usage codex reported is the mock's.
        let used = usages(&rig.events(), &first);
        assert_eq!(used.len(), 1, "{}", rig.story(&first));
        assert_eq!(used[0]["input_tokens"], INPUT_TOKENS);
        let runs = rig.runs(&first.id);
        assert_eq!(runs.len(), 1);
        assert!(!runs[0].argv.contains(&"resume".to_string()));
        assert!(runs[0].argv.contains(&"--skip-git-repo-check".to_string()));
        assert_eq!(runs[0].exit_code, Some(0));
        assert_eq!(rig.engine_errors(&first), Vec::<String>::new());
        rig.assert_no_process_left(&first).await;

        // 2. The same session resumes the thread; codex replays the whole conversation.
        rig.mock.script([Answer::text("you said: next")]);
        let second = rig.run("next").await;
        assert_eq!(second.status, PromptStatus::Done, "{}", rig.story(&second));
        assert_eq!(second.answer.as_deref(), Some("you said: next"));
        let runs = rig.runs(&second.id);
        assert_eq!(runs.len(), 1);
        let argv = &runs[0].argv;
        assert!(
            argv.windows(2)
                .any(|pair| pair[0] == "resume" && pair[1] == thread),
            "the run resumes {thread}: {argv:?}"
        );
        assert_eq!(
            rig.session_now().thread_id.as_deref(),
            Some(thread.as_str())
        );
        let requests = rig.mock.requests();
        assert_eq!(requests.len(), 2, "{requests:#?}");
        // On the wire too it is the same thread (codex keys its prompt cache by thread).
        assert_eq!(requests[1].json()["prompt_cache_key"], thread.as_str());
        let conversation: Vec<(String, String)> = requests[1]
            .messages()
            .into_iter()
            .filter(|(role, _)| role == "user" || role == "assistant")
            .collect();
        let said = |role: &str, text: &str| {
            conversation
                .iter()
                .position(|(r, t)| r == role && t.contains(text))
        };
        let earlier = said("user", "say hi").expect("the earlier user text is replayed");
        let answered =
            said("assistant", "hello from the mock").expect("the earlier answer is replayed");
        assert!(earlier < answered, "{conversation:#?}");
        assert_eq!(
            conversation.last().map(|(r, t)| (r.as_str(), t.as_str())),
            Some(("user", "next")),
            "the new text comes last, without a title request"
        );
        assert_eq!(rig.engine_errors(&second), Vec::<String>::new());
        rig.assert_no_process_left(&second).await;
        assert_eq!(rig.mock.unused_answers(), 0);
    });
}

#[test]
fn a_rate_limit_codex_gives_up_on_is_retried_by_corral() {
    let Some(codex) = binary_or_skip(Engine::Codex) else {
        return;
    };
    actix_test(|| async {
        let rig = Rig::start(&codex).await;
        // No Retry-After: codex fails the turn at once instead of retrying itself.
        rig.mock.script([
            Answer::RateLimited {
                retry_after_s: None,
            },
            Answer::text("recovered"),
        ]);
        let started = Instant::now();
        let prompt = rig.run("work despite the limit").await;
        let elapsed = started.elapsed();
        assert_eq!(prompt.status, PromptStatus::Done, "{}", rig.story(&prompt));
        assert_eq!(prompt.answer.as_deref(), Some("recovered"));
        let runs = rig.runs(&prompt.id);
        assert_eq!(runs.len(), 2, "{}", rig.story(&prompt));
        assert_eq!(runs[0].status, RunStatus::Failed);
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("rate_limit")
        );
        assert_eq!(
            runs[0].retry_decision.as_deref(),
            Some("retry after 200 ms")
        );
        assert_eq!(
            runs[0].error.as_deref(),
            Some("exceeded retry limit, last status: 429 Too Many Requests"),
            "codex's own message for a 429 it does not retry"
        );
        assert_eq!(runs[1].status, RunStatus::Succeeded);
        assert!(
            elapsed >= Duration::from_millis(200),
            "the retry waited the configured delay ({elapsed:?})"
        );
        let requests = rig.mock.requests();
        assert_eq!(requests.len(), 2, "{requests:#?}");
        assert!(requests
            .iter()
            .all(|request| request.path == "/v1/responses"));
        // The failed run had already reported its new thread, so the retry resumes it; codex
        // kept the failed turn's user message, so the second request carries the prompt twice
        // (codex 0.171.0). Only "at least once" is asserted: that part is codex's business.
        for request in &requests {
            assert!(
                request.messages().iter().any(
                    |(role, text)| role == "user" && text.starts_with("work despite the limit")
                ),
                "every attempt carries the prompt: {:?}",
                request.messages()
            );
        }
        assert_eq!(rig.engine_errors(&prompt), Vec::<String>::new());
        rig.assert_no_process_left(&prompt).await;
        assert_eq!(rig.mock.unused_answers(), 0);
    });
}

/// The app-server children that served `prompts` (each run records its child's pid).
fn app_server_pids(rig: &Rig, prompts: &[&Prompt]) -> Vec<i64> {
    prompts
        .iter()
        .flat_map(|prompt| rig.runs(&prompt.id))
        .map(|run| run.pid.expect("the run names its app-server child"))
        .collect()
}

#[test]
fn app_server_two_turns_run_on_one_thread_and_one_child() {
    let Some(codex) = binary_or_skip(Engine::Codex) else {
        return;
    };
    let pids = actix_test(|| async {
        let rig = Rig::start_with(&codex, APP_SERVER, 0).await;
        // The first answer names the session, so the second prompt asks for no title.
        rig.mock.script([
            Answer::text("<!-- corral-title: App server greeting -->\nhello from the app server"),
            Answer::text("second answer"),
        ]);
        let first = rig.run("say hi").await;
        assert_eq!(first.status, PromptStatus::Done, "{}", rig.story(&first));
        assert_eq!(first.answer.as_deref(), Some("hello from the app server"));
        let second = rig.run("again").await;
        assert_eq!(second.status, PromptStatus::Done, "{}", rig.story(&second));
        assert_eq!(second.answer.as_deref(), Some("second answer"));

        let (a, b) = (rig.runs(&first.id), rig.runs(&second.id));
        assert_eq!((a.len(), b.len()), (1, 1), "{}", rig.story(&second));
        // The first run started the thread (a run records the thread it resumed; the new one
        // is the session's), the second resumed it.
        let thread = rig
            .session_now()
            .thread_id
            .expect("the session got codex's thread id");
        assert_eq!(b[0].thread_id.as_deref(), Some(thread.as_str()));
        assert_eq!(
            rig.session_now().thread_id.as_deref(),
            Some(thread.as_str())
        );
        assert_eq!(a[0].pid, b[0].pid, "one app-server child serves both turns");
        let pid = a[0].pid.unwrap();
        assert!(
            corral::process::is_alive(pid as u32, None),
            "the child stays"
        );

        // Codex sent both turns on the same thread, the second with the first in its history.
        let requests = rig.mock.requests();
        assert_eq!(requests.len(), 2, "{requests:#?}");
        assert_eq!(requests[1].json()["prompt_cache_key"], thread.as_str());
        let history = requests[1].messages();
        assert!(
            history
                .iter()
                .any(|(role, text)| role == "assistant"
                    && text.contains("hello from the app server")),
            "{history:#?}"
        );
        assert_eq!(
            history
                .last()
                .map(|(role, text)| (role.as_str(), text.as_str())),
            Some(("user", "again"))
        );
        assert_eq!(rig.mock.unused_answers(), 0);
        // Each turn is told as a run: started by the serving child, exited with its verdict
        // and the turn's status.
        let events = rig.events();
        for prompt in [&first, &second] {
            let of = |kind: &str| -> Vec<&Event> {
                events
                    .iter()
                    .filter(|event| {
                        event.kind == kind && event.prompt_id.as_ref() == Some(&prompt.id)
                    })
                    .collect()
            };
            let started = of("run.started");
            assert_eq!(started.len(), 1, "{events:#?}");
            assert_eq!(started[0].payload["pid"], pid);
            assert_eq!(started[0].payload["engine"], "codex-app-server");
            let exited = of("run.exited");
            assert_eq!(exited.len(), 1, "{events:#?}");
            assert_eq!(exited[0].payload["verdict"], "succeeded", "{:?}", exited[0]);
            assert_eq!(exited[0].payload["status"], "completed", "{:?}", exited[0]);
        }
        app_server_pids(&rig, &[&first, &second])
    });
    assert_groups_gone(&pids);
}

#[test]
fn app_server_a_rate_limit_codex_retries_itself_is_one_run() {
    let Some(codex) = binary_or_skip(Engine::Codex) else {
        return;
    };
    let pids = actix_test(|| async {
        // codex retries a 429 with Retry-After itself, once (`stream_max_retries = 1`).
        let rig = Rig::start_with(&codex, APP_SERVER, 1).await;
        rig.mock.script([
            Answer::RateLimited {
                retry_after_s: Some(1),
            },
            Answer::text("recovered"),
        ]);
        let started = Instant::now();
        let prompt = rig.run("work despite the limit").await;
        let elapsed = started.elapsed();
        assert_eq!(prompt.status, PromptStatus::Done, "{}", rig.story(&prompt));
        assert_eq!(prompt.answer.as_deref(), Some("recovered"));
        let runs = rig.runs(&prompt.id);
        assert_eq!(
            runs.len(),
            1,
            "codex retried, not corral: {}",
            rig.story(&prompt)
        );
        assert_eq!(runs[0].status, RunStatus::Succeeded);
        assert_eq!(prompt.attempts, 1);
        let notices: Vec<serde_json::Value> = rig
            .events()
            .into_iter()
            .filter(|event| {
                event.kind == "notice" && event.prompt_id.as_deref() == Some(&prompt.id)
            })
            .map(|event| event.payload)
            .collect();
        let retrying: Vec<&serde_json::Value> = notices
            .iter()
            .filter(|payload| payload["will_retry"] == true)
            .collect();
        assert_eq!(retrying.len(), 1, "{}", rig.story(&prompt));
        assert!(
            notices.iter().all(|payload| payload["will_retry"] != false),
            "no final error: {notices:#?}"
        );
        assert!(
            elapsed >= Duration::from_millis(900),
            "codex waited the Retry-After ({elapsed:?})"
        );
        let requests = rig.mock.requests();
        assert_eq!(requests.len(), 2, "{requests:#?}");
        assert_eq!(rig.mock.unused_answers(), 0);
        app_server_pids(&rig, &[&prompt])
    });
    assert_groups_gone(&pids);
}

#[test]
fn app_server_cancel_interrupts_a_hanging_turn_and_the_child_goes_on() {
    let Some(codex) = binary_or_skip(Engine::Codex) else {
        return;
    };
    let pids = actix_test(|| async {
        let rig = Rig::start_with(&codex, APP_SERVER, 0).await;
        rig.mock
            .script([Answer::Hang, Answer::text("after the interrupt")]);
        let hanging = rig.send_until_it_hangs("wait forever", 1).await;
        assert_eq!(rig.mock.requests().len(), 1);
        let cancel_at = Instant::now();
        rig.corral.cancel(&hanging).await.unwrap();
        let cancelled = rig.wait(&hanging).await;
        assert_eq!(
            cancelled.status,
            PromptStatus::Cancelled,
            "{}",
            rig.story(&cancelled)
        );
        assert!(
            cancel_at.elapsed() < Duration::from_secs(5),
            "turn/interrupt ended the turn ({:?})",
            cancel_at.elapsed()
        );
        let thread = rig
            .session_now()
            .thread_id
            .expect("the hanging turn's thread");
        let pid = rig.runs(&hanging)[0].pid.unwrap();
        assert!(
            corral::process::is_alive(pid as u32, None),
            "turn/interrupt was enough: the child stays"
        );

        let next = rig.run("and now?").await;
        assert_eq!(next.status, PromptStatus::Done, "{}", rig.story(&next));
        assert_eq!(next.answer.as_deref(), Some("after the interrupt"));
        let runs = rig.runs(&next.id);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].pid, Some(pid), "the same child");
        assert_eq!(
            runs[0].thread_id.as_deref(),
            Some(thread.as_str()),
            "the same thread"
        );
        assert_eq!(rig.mock.unused_answers(), 0);
        app_server_pids(&rig, &[&cancelled, &next])
    });
    assert_groups_gone(&pids);
}

#[test]
fn app_server_an_unknown_thread_is_a_missing_rollout_then_a_new_thread() {
    let Some(codex) = binary_or_skip(Engine::Codex) else {
        return;
    };
    let pids = actix_test(|| async {
        let rig = Rig::start_with(&codex, APP_SERVER, 0).await;
        rig.lose_thread();
        assert_eq!(rig.session_now().thread_id.as_deref(), Some(UNKNOWN_THREAD));
        rig.mock.script([Answer::text("in a new thread")]);
        let prompt = rig.run("replay me").await;
        assert_eq!(prompt.status, PromptStatus::Done, "{}", rig.story(&prompt));
        assert_eq!(prompt.answer.as_deref(), Some("in a new thread"));
        let runs = rig.runs(&prompt.id);
        assert_eq!(runs.len(), 2, "{}", rig.story(&prompt));
        assert_eq!(runs[0].status, RunStatus::Failed);
        assert_eq!(
            runs[0].failure_class.map(FailureClass::as_str),
            Some("missing_rollout"),
            "{}",
            rig.story(&prompt)
        );
        assert_eq!(runs[1].status, RunStatus::Succeeded);
        assert_eq!(
            runs[0].pid, runs[1].pid,
            "the child was not restarted for it"
        );
        let thread = rig.session_now().thread_id.expect("a new thread");
        assert_ne!(thread, UNKNOWN_THREAD);
        // The failed resume never reached the model: one request, for the new thread.
        let requests = rig.mock.requests();
        assert_eq!(requests.len(), 1, "{requests:#?}");
        assert_eq!(requests[0].json()["prompt_cache_key"], thread.as_str());
        assert_eq!(rig.mock.unused_answers(), 0);
        app_server_pids(&rig, &[&prompt])
    });
    assert_groups_gone(&pids);
}

/// A steer reaches the turn running on the real app-server (codex wants the running turn's
/// id, `expectedTurnId`, which corral fills in), the session's reasoning effort reaches the
/// model through `turn/start`'s `effort`, and a steer with no turn running is refused in one
/// line instead of reaching codex.
#[test]
fn app_server_a_steer_reaches_the_running_turn_and_the_effort_reaches_the_model() {
    let Some(codex) = binary_or_skip(Engine::Codex) else {
        return;
    };
    let pids = actix_test(|| async {
        let mut rig = Rig::start_with(&codex, APP_SERVER, 0).await;
        rig.session = rig
            .corral
            .open_session(NewSession {
                project_id: rig.session.project_id.clone().unwrap(),
                engine: Some(APP_SERVER.parse().expect("a known engine")),
                reasoning_effort: Some("high".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        rig.mock
            .script([Answer::text("a first answer"), Answer::Hang]);
        let first = rig.run("first").await;
        assert_eq!(first.status, PromptStatus::Done, "{}", rig.story(&first));
        let hanging = rig.send_until_it_hangs("wait for my steer", 2).await;
        for request in rig.mock.requests() {
            let request = request.json();
            assert_eq!(request["reasoning"]["effort"], "high", "{request}");
        }

        let steered = rig
            .corral
            .steer(&rig.session.id, "and mind the tests")
            .await
            .unwrap_or_else(|error| panic!("the steer was refused: {error}"));
        assert!(
            steered.turn_id.as_deref().is_some_and(|id| !id.is_empty()),
            "codex names the turn it steered: {steered:?}"
        );

        rig.corral.cancel(&hanging).await.unwrap();
        let cancelled = rig.wait(&hanging).await;
        assert_eq!(cancelled.status, PromptStatus::Cancelled);
        let exited: Vec<Event> = rig
            .events()
            .into_iter()
            .filter(|event| {
                event.kind == "run.exited" && event.prompt_id.as_deref() == Some(&hanging)
            })
            .collect();
        assert_eq!(exited.len(), 1, "{exited:#?}");
        assert_eq!(exited[0].payload["ended_by"], "cancelled");
        assert_eq!(exited[0].payload["status"], "interrupted");
        // The interrupted turn spent nothing new: no usage of it repeats the first turn's.
        let events = rig.events();
        let totals = |prompt: &Prompt| -> Vec<serde_json::Value> {
            usages(&events, prompt)
                .into_iter()
                .map(|usage| usage["total"].clone())
                .collect()
        };
        let first_totals = totals(&first);
        assert!(!first_totals.is_empty(), "{events:#?}");
        for total in totals(&cancelled) {
            assert!(!first_totals.contains(&total), "repeated: {total}");
        }
        let error = rig
            .corral
            .steer(&rig.session.id, "too late")
            .await
            .expect_err("no turn runs: nothing to steer");
        assert!(error.to_string().contains("no turn is running"), "{error}");
        app_server_pids(&rig, &[&first, &cancelled])
    });
    assert_groups_gone(&pids);
}

/// A change of `engines.codex-app-server.path` reaches the next turn without a daemon
/// restart: the idle child of the old path is ended and the next turn runs on a child of the
/// new one.
#[test]
fn app_server_a_new_engine_path_serves_the_next_turn() {
    let Some(codex) = binary_or_skip(Engine::Codex) else {
        return;
    };
    let pids = actix_test(|| async {
        let rig = Rig::start_with(&codex, APP_SERVER, 0).await;
        rig.mock.script([
            Answer::text("from the old path"),
            Answer::text("from the new path"),
        ]);
        let first = rig.run("one").await;
        assert_eq!(first.status, PromptStatus::Done, "{}", rig.story(&first));
        let old_pid = rig.runs(&first.id)[0].pid.unwrap();

        // The new path: a script that leaves a mark, then runs the same codex.
        let scratch = tempfile::tempdir().unwrap();
        let mark = scratch.path().join("started");
        let new_path = scratch.path().join("codex-next");
        std::fs::write(
            &new_path,
            format!(
                "#!/bin/sh\necho started > {}\nexec {} \"$@\"\n",
                common::engines::shell_quote(mark.to_str().unwrap()),
                common::engines::shell_quote(rig._env.wrapper().to_str().unwrap())
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&new_path, std::fs::Permissions::from_mode(0o755)).unwrap();
        rig.corral
            .set_setting(
                "engines.codex-app-server.path",
                Some(new_path.to_str().unwrap()),
            )
            .await
            .unwrap();

        let second = rig.run("two").await;
        assert_eq!(second.status, PromptStatus::Done, "{}", rig.story(&second));
        assert_eq!(second.answer.as_deref(), Some("from the new path"));
        assert!(mark.exists(), "the next child ran the new path");
        let new_pid = rig.runs(&second.id)[0].pid.unwrap();
        assert_ne!(new_pid, old_pid, "a new child serves the next turn");
        assert!(
            !corral::process::is_alive(old_pid as u32, None),
            "the old child ended"
        );
        app_server_pids(&rig, &[&first, &second])
    });
    assert_groups_gone(&pids);
}
