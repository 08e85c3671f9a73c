//! corral's CLI and daemon driving the REAL engine CLIs — Claude Code 2.1.197, OpenCode
//! 1.18.33 and Codex 0.171.0 — fully offline, each against a loopback mock model server the
//! test starts itself: the Anthropic Messages API for claude and the OpenAI Chat Completions
//! API for opencode (`mock_models/`), the OpenAI Responses API for codex (`mock_responses/`).
//!
//! For each engine, through `corral` commands only, as a person would use them:
//!
//! - a new session answers (`send --wait` prints the mock's answer), and a second prompt
//!   resumes the same engine conversation (the mock sees the first turn replayed), with
//!   `history --json` and `watch` showing the whole life cycle;
//! - a rate-limited prompt (the mock's first requests are 429s) is retried by corral's policy
//!   into success, each failed run recorded as `rate_limit`, each retry a `retry.scheduled`;
//! - a run hanging on the model is cancelled with `corral cancel`, and its whole process group
//!   is gone afterwards.
//!
//! Each test has its own daemon home, its own mock and its own private engine environment
//! (`common::engines`), and ends by stopping its daemon and checking that no process of its
//! home is left. An engine whose binary is not installed is skipped with a printed reason;
//! that is the only skip.

use crate::common;
use crate::mock_models;
use crate::mock_responses;

use std::ops::Deref;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::daemon::{lines_of, next_line, wait_until, DaemonHome, DEADLINE};
use common::engines::{binary_or_skip, engine_slot, Engine, EngineEnv, EngineSlot};
use mock_models::anthropic::MockAnthropic;
use mock_models::chat::MockChat;
use mock_models::Answer;
use mock_responses::MockResponses;

/// OpenCode retries a 429 itself, 5 times, hard-coded (claude-opencode.md §2.4): one of its
/// runs takes this many 429s to fail. The mocks' `retry-after-ms` keeps them quick.
const OPENCODE_REQUESTS_PER_FAILED_RUN: usize = 6;

/// The `retry-after-ms` the chat mock gives opencode, so its own retries take milliseconds.
const OPENCODE_RETRY_AFTER_MS: u64 = 20;

/// The mock model server an engine talks to.
enum Mock {
    Anthropic(MockAnthropic),
    Chat(MockChat),
    Responses(MockResponses),
}

impl Mock {
    fn start(engine: Engine) -> Mock {
        match engine {
            Engine::Claude => Mock::Anthropic(MockAnthropic::start()),
            Engine::Opencode => Mock::Chat(MockChat::start()),
            Engine::Codex => Mock::Responses(MockResponses::start()),
        }
    }

    fn base_url(&self) -> String {
        match self {
            Mock::Anthropic(mock) => mock.base_url(),
            Mock::Chat(mock) => mock.base_url(),
            Mock::Responses(mock) => mock.base_url(),
        }
    }

    /// The next model call answers `text`.
    fn answer(&self, text: &str) {
        match self {
            Mock::Anthropic(mock) => mock.script([Answer::text(text)]),
            Mock::Chat(mock) => mock.script([Answer::text(text)]),
            Mock::Responses(mock) => mock.script([mock_responses::Answer::text(text)]),
        }
    }

    /// Enough 429s for `runs` whole engine runs to fail, with no retry hint the engine would
    /// wait on (opencode gets `retry-after-ms: 20` so that its own five retries are quick).
    fn rate_limit(&self, runs: usize) {
        match self {
            Mock::Anthropic(mock) => mock.script(vec![Answer::rate_limited(); runs]),
            Mock::Chat(mock) => mock.script(vec![
                Answer::rate_limited_ms(OPENCODE_RETRY_AFTER_MS);
                runs * OPENCODE_REQUESTS_PER_FAILED_RUN
            ]),
            Mock::Responses(mock) => mock.script(vec![
                mock_responses::Answer::RateLimited {
                    retry_after_s: None
                };
                runs
            ]),
        }
    }

    /// The next model call hangs.
    fn hang(&self) {
        match self {
            Mock::Anthropic(mock) => mock.script([Answer::Hang]),
            Mock::Chat(mock) => mock.script([Answer::Hang]),
            Mock::Responses(mock) => mock.script([mock_responses::Answer::Hang]),
        }
    }

    /// The conversation of each model call (opencode's title calls aside), in arrival order:
    /// its `user` and `assistant` messages as `(role, text)`.
    fn conversations(&self) -> Vec<Vec<(String, String)>> {
        let conversations: Vec<Vec<(String, String)>> = match self {
            Mock::Anthropic(mock) => mock
                .model_calls()
                .iter()
                .map(|call| call.conversation())
                .collect(),
            Mock::Chat(mock) => mock
                .model_calls()
                .iter()
                .map(|call| call.conversation())
                .collect(),
            Mock::Responses(mock) => mock
                .requests()
                .iter()
                .filter(|request| request.path == "/v1/responses")
                .map(|request| request.messages())
                .collect(),
        };
        conversations
            .into_iter()
            .map(|conversation| {
                conversation
                    .into_iter()
                    .filter(|(role, _)| role == "user" || role == "assistant")
                    .collect()
            })
            .collect()
    }

    fn model_calls(&self) -> usize {
        self.conversations().len()
    }

    /// The last model call's user messages, each as its text blocks, exactly as received
    /// (claude puts its `<system-reminder>` blocks before the prompt's own block).
    fn last_user_blocks(&self) -> Vec<Vec<String>> {
        let users = |messages: Vec<(String, Vec<String>)>| -> Vec<Vec<String>> {
            messages
                .into_iter()
                .filter(|(role, _)| role == "user")
                .map(|(_, blocks)| blocks)
                .collect()
        };
        match self {
            Mock::Anthropic(mock) => mock.model_calls().last().map(|c| users(c.blocks())),
            Mock::Chat(mock) => mock.model_calls().last().map(|c| users(c.blocks())),
            Mock::Responses(mock) => mock
                .requests()
                .iter()
                .rfind(|request| request.path == "/v1/responses")
                .map(|request| {
                    let input = request.json()["input"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    input
                        .iter()
                        .filter(|item| item["type"] == "message" && item["role"] == "user")
                        .map(|item| match &item["content"] {
                            Value::String(text) => vec![text.clone()],
                            Value::Array(parts) => parts
                                .iter()
                                .filter_map(|part| part["text"].as_str().map(str::to_string))
                                .collect(),
                            _ => Vec::new(),
                        })
                        .collect()
                }),
        }
        .unwrap_or_default()
    }

    /// How many times `text` occurs in the user messages of the last model call.
    fn times_sent(&self, text: &str) -> usize {
        self.last_user_blocks()
            .iter()
            .flatten()
            .map(|block| block.matches(text).count())
            .sum()
    }

    fn unused_answers(&self) -> usize {
        match self {
            Mock::Anthropic(mock) => mock.unused_answers(),
            Mock::Chat(mock) => mock.unused_answers(),
            Mock::Responses(mock) => mock.unused_answers(),
        }
    }

    /// How many of its connections the mock holds open on a hang.
    fn hanging(&self) -> usize {
        match self {
            Mock::Anthropic(mock) => mock.hanging(),
            Mock::Chat(mock) => mock.hanging(),
            Mock::Responses(mock) => mock.hanging(),
        }
    }

    /// What the mock received, for assertion messages: one line per request.
    fn log(&self) -> String {
        let lines: Vec<String> = match self {
            Mock::Anthropic(mock) => mock
                .calls()
                .iter()
                .map(|call| format!("{} {} → {}", call.request.method, call.path(), call.answer))
                .collect(),
            Mock::Chat(mock) => mock
                .calls()
                .iter()
                .map(|call| {
                    format!(
                        "{} {} ({:?}) → {}",
                        call.request.method,
                        call.path(),
                        call.kind,
                        call.answer
                    )
                })
                .collect(),
            Mock::Responses(mock) => mock
                .requests()
                .iter()
                .map(|request| format!("{} {}", request.method, request.path))
                .collect(),
        };
        format!(
            "mock log ({} requests):\n{}\nconversations: {:#?}",
            lines.len(),
            lines.join("\n"),
            self.conversations()
        )
    }
}

/// One test's world: a daemon home with project `p` on the engine, the engine's mock and its
/// private environment. Dropped in field order: the daemon and every process of the home
/// first, then the mock (ending its hangs), then the engine's files.
struct Rig {
    home: DaemonHome,
    mock: Mock,
    env: EngineEnv,
    _slot: EngineSlot,
}

impl Deref for Rig {
    type Target = DaemonHome;

    fn deref(&self) -> &DaemonHome {
        &self.home
    }
}

impl Rig {
    /// The rig for `engine`, or `None` (after printing why) when its binary is not installed.
    fn start(engine: Engine) -> Option<Rig> {
        let binary = binary_or_skip(engine)?;
        let slot = engine_slot();
        let mock = Mock::start(engine);
        let env = EngineEnv::new(engine, &binary, &mock.base_url());
        let home = DaemonHome::new();
        home.start_daemon();
        env.configure(&home);
        home.add_project("p", &home.work(), engine.name());
        Some(Rig {
            home,
            mock,
            env,
            _slot: slot,
        })
    }

    fn engine(&self) -> Engine {
        self.env.engine()
    }

    /// A new session of project `p` (untitled when `title` is `None`): its id.
    fn session(&self, title: Option<&str>) -> String {
        let mut args = vec!["p"];
        if let Some(title) = title {
            args.extend(["--title", title]);
        }
        self.new_session(&args)
    }

    /// `corral send SESSION TEXT --wait`, which must succeed: what it printed.
    fn send_wait(&self, session: &str, text: &str) -> String {
        let output = self.run(&["send", session, text, "--wait"]);
        assert!(
            output.status.success(),
            "send {text:?} failed: {}\nstdout: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout),
            self.story(session)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// `corral send SESSION - --wait` with `text` on stdin: its output.
    fn send_stdin(&self, session: &str, text: &str) -> std::process::Output {
        common::output_with_stdin(
            self.corral(&["send", session, "--wait", "-"]),
            text,
            common::daemon::finish,
        )
    }

    fn history(&self, session: &str) -> Value {
        self.json(&["history", session, "--json"])
    }

    fn session_show(&self, session: &str) -> Value {
        self.json(&["session", "show", session, "--json"])["session"].clone()
    }

    /// Every stored event of the session, as `watch --after 0 --json` prints them.
    fn events(&self, session: &str) -> Vec<Value> {
        self.ok(&["watch", session, "--after", "0", "--json"])
            .lines()
            .map(|line| serde_json::from_str(line).expect("one event object per line"))
            .collect()
    }

    /// What happened, for assertion messages: corral's history and events, and the mock's log.
    fn story(&self, session: &str) -> String {
        let history = self.run(&["history", session]);
        let watch = self.run(&["watch", session, "--after", "0"]);
        format!(
            "history:\n{}\nwatch:\n{}\n{}",
            String::from_utf8_lossy(&history.stdout),
            String::from_utf8_lossy(&watch.stdout),
            self.mock.log()
        )
    }

    /// The resume arguments corral passes the engine for `thread`.
    fn resumes(&self, argv: &[String], thread: &str) -> bool {
        let flag = match self.engine() {
            Engine::Claude => "--resume",
            Engine::Opencode => "--session",
            Engine::Codex => "resume",
        };
        argv.windows(2)
            .any(|pair| pair[0] == flag && pair[1] == thread)
    }
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

fn array(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// The kinds of a prompt's events, in order.
fn kinds_of(events: &[Value], prompt_id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|event| event["prompt_id"] == prompt_id)
        .filter_map(|event| event["kind"].as_str())
        .map(str::to_string)
        .collect()
}

/// Asserts that `expected` occur in `kinds` in this order (other kinds may come between).
fn assert_in_order(kinds: &[String], expected: &[&str], story: &str) {
    let mut rest = kinds.iter();
    for kind in expected {
        assert!(
            rest.any(|seen| seen == kind),
            "{kind} missing, or out of order, in {kinds:?} (expected in order: {expected:?})\n{story}"
        );
    }
}

/// A new session answers; a second prompt resumes the engine's conversation, which the mock
/// sees replayed; history and watch show both prompts' life cycles.
fn a_new_session_answers_and_the_next_prompt_resumes_it(engine: Engine) {
    let Some(rig) = Rig::start(engine) else {
        return;
    };
    // Untitled: the first answer's title line names the session and is taken out of it.
    let session = rig.session(None);
    let first_answer = "<!-- corral-title: Mock greeting -->\nhello from the mock";
    rig.mock.answer(first_answer);
    assert_eq!(
        rig.send_wait(&session, "say hi"),
        "hello from the mock\n",
        "{}",
        rig.story(&session)
    );
    let shown = rig.session_show(&session);
    assert_eq!(shown["title"], "Mock greeting", "{shown}");
    let thread = shown["thread_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the session got the engine's conversation id: {shown}"))
        .to_string();

    rig.mock.answer("second answer");
    assert_eq!(
        rig.send_wait(&session, "and again"),
        "second answer\n",
        "{}",
        rig.story(&session)
    );
    let story = rig.story(&session);
    assert_eq!(
        rig.session_show(&session)["thread_id"],
        thread.as_str(),
        "the same conversation"
    );

    // The mock: one model call per prompt, the second holding the first turn, then the new
    // prompt. (Prompt texts are checked as contained: what else an engine or corral's framing
    // puts around them is not this test's business.)
    let conversations = rig.mock.conversations();
    assert_eq!(conversations.len(), 2, "{story}");
    let first = &conversations[0];
    assert!(
        matches!(first.last(), Some((role, text)) if role == "user" && text.contains("say hi")),
        "the first call ends with the prompt: {first:#?}"
    );
    let second = &conversations[1];
    let earlier_prompt = second
        .iter()
        .position(|(role, text)| role == "user" && text.contains("say hi"))
        .unwrap_or_else(|| panic!("the earlier prompt is replayed: {second:#?}"));
    let earlier_answer = second
        .iter()
        .position(|(role, text)| role == "assistant" && text == first_answer)
        .unwrap_or_else(|| panic!("the earlier answer is replayed as given: {second:#?}"));
    assert!(earlier_prompt < earlier_answer, "{second:#?}");
    assert!(
        matches!(second.last(), Some((role, text)) if role == "user" && text.contains("and again")),
        "the second call ends with the new prompt: {second:#?}"
    );
    assert_eq!(rig.mock.unused_answers(), 0);

    // history --json: two prompts done with their answers, one successful run each, the
    // second resuming the first one's conversation.
    let history = rig.history(&session);
    let prompts = array(&history["prompts"]);
    assert_eq!(prompts.len(), 2, "{history}");
    for (prompt, answer) in prompts.iter().zip(["hello from the mock", "second answer"]) {
        assert_eq!(prompt["status"], "done", "{story}");
        assert_eq!(prompt["answer"], answer, "{story}");
        assert_eq!(prompt["attempts"], 1, "{story}");
    }
    let runs = array(&history["runs"]);
    assert_eq!(runs.len(), 2, "{history}");
    for (run, prompt) in runs.iter().zip(&prompts) {
        assert_eq!(run["prompt_id"], prompt["id"]);
        assert_eq!(run["status"], "succeeded", "{story}");
        assert_eq!(run["exit_code"], 0, "{story}");
        assert_eq!(run["engine"], engine.name());
        assert!(run["pid"].as_i64().is_some(), "{run}");
    }
    assert!(
        !rig.resumes(&strings(&runs[0]["argv"]), &thread),
        "the first run starts a new conversation: {}",
        runs[0]["argv"]
    );
    assert!(
        rig.resumes(&strings(&runs[1]["argv"]), &thread),
        "the second run resumes {thread}: {}",
        runs[1]["argv"]
    );
    assert_eq!(runs[1]["thread_id"], thread.as_str(), "{}", runs[1]);

    // watch: each prompt's life cycle, in order, and the plain lines agree with the JSON.
    let events = rig.events(&session);
    for prompt in &prompts {
        let id = prompt["id"].as_str().unwrap();
        assert_in_order(
            &kinds_of(&events, id),
            &[
                "prompt.started",
                "run.started",
                "message",
                "run.exited",
                "prompt.done",
            ],
            &story,
        );
    }
    assert!(
        events
            .iter()
            .any(|event| event["kind"] == "title.generated"),
        "{story}"
    );
    let lines = rig.ok(&["watch", &session, "--after", "0"]);
    assert_eq!(lines.lines().count(), events.len(), "{lines}");
    for (line, event) in lines.lines().zip(&events) {
        let expected = format!("#{} {}", event["seq"], event["kind"].as_str().unwrap());
        assert!(line.starts_with(&expected), "{line:?} vs {event}");
    }
    let done = lines
        .lines()
        .filter(|line| line.contains(" prompt.done "))
        .collect::<Vec<_>>();
    assert_eq!(done.len(), 2, "{lines}");
    assert!(done[1].contains("second answer"), "{lines}");

    rig.stop_daemon();
}

/// A prompt whose first engine runs are rate-limited is retried by corral's policy, after its
/// configured delays, until it succeeds.
fn a_rate_limited_prompt_is_retried_into_success(engine: Engine) {
    let Some(rig) = Rig::start(engine) else {
        return;
    };
    let session = rig.session(Some("limits"));
    rig.mock.rate_limit(2);
    rig.mock.answer("recovered");
    let started = Instant::now();
    assert_eq!(
        rig.send_wait(&session, "work despite the limit"),
        "recovered\n",
        "{}",
        rig.story(&session)
    );
    let elapsed = started.elapsed();
    let story = rig.story(&session);
    assert_eq!(rig.mock.unused_answers(), 0, "{story}");
    let expected_calls = match engine {
        Engine::Opencode => 2 * OPENCODE_REQUESTS_PER_FAILED_RUN + 1,
        _ => 3,
    };
    assert_eq!(rig.mock.model_calls(), expected_calls, "{story}");
    // The failed first turns are dropped: the answering conversation has the prompt once.
    assert_eq!(rig.mock.times_sent("work despite the limit"), 1, "{story}");
    assert!(
        elapsed >= Duration::from_millis(200),
        "two retries waited corral's delays ({elapsed:?})"
    );

    // history --json: the prompt is done after three attempts; two failed runs classed as
    // rate limits with their retry decisions, then a successful one.
    let history = rig.history(&session);
    let prompts = array(&history["prompts"]);
    assert_eq!(prompts.len(), 1, "{history}");
    assert_eq!(prompts[0]["status"], "done", "{story}");
    assert_eq!(prompts[0]["answer"], "recovered");
    assert_eq!(prompts[0]["attempts"], 3, "{story}");
    let runs = array(&history["runs"]);
    assert_eq!(runs.len(), 3, "{story}");
    for run in &runs[..2] {
        assert_eq!(run["status"], "failed", "{story}");
        assert_eq!(run["failure_class"], "rate_limit", "{story}");
        assert_eq!(run["retry_decision"], "retry after 100 ms", "{story}");
        assert!(run["error"].as_str().is_some_and(|error| !error.is_empty()));
    }
    assert_eq!(runs[2]["status"], "succeeded", "{story}");
    assert_eq!(runs[2]["exit_code"], 0, "{story}");
    let attempts: Vec<i64> = runs
        .iter()
        .filter_map(|run| run["attempt"].as_i64())
        .collect();
    assert_eq!(attempts, [1, 2, 3], "{story}");

    // watch: each failed run's exit is followed by a retry, then the next run.
    let events = rig.events(&session);
    let kinds = kinds_of(&events, prompts[0]["id"].as_str().unwrap());
    assert_in_order(
        &kinds,
        &[
            "prompt.started",
            "run.started",
            "run.exited",
            "retry.scheduled",
            "run.started",
            "run.exited",
            "retry.scheduled",
            "run.started",
            "message",
            "run.exited",
            "prompt.done",
        ],
        &story,
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|kind| *kind == "retry.scheduled")
            .count(),
        2,
        "{story}"
    );
    assert!(!kinds.iter().any(|kind| kind == "prompt.failed"), "{story}");
    // A failed run's error text is not taken for the agent's words.
    for run in &runs[..2] {
        let said = events
            .iter()
            .filter(|event| event["run_id"] == run["id"] && event["kind"] == "message")
            .count();
        assert_eq!(said, 0, "no agent message in a failed run: {story}");
    }
    let lines = rig.ok(&["watch", &session, "--after", "0"]);
    assert_eq!(
        lines
            .lines()
            .filter(|line| line.contains(" retry.scheduled "))
            .count(),
        2,
        "{lines}"
    );

    rig.stop_daemon();
}

/// Texts a person sends that engines used to receive otherwise: a leading `-` (claude read it
/// as its own flags), quotes and spaces (opencode wrapped multi-word prompts in quotes),
/// several lines, non-ASCII, and one larger than Linux lets a single argv string be (128 KiB).
fn awkward_prompts() -> Vec<String> {
    let mut big = String::from("A long brief follows.\n");
    while big.len() < 200 * 1024 {
        big.push_str("0123456789 abcdefghij ünï \"q\" -x\n");
    }
    big.push_str("The end.");
    vec![
        "-v please".to_string(),
        r#"say "hello world" and 'bye'  now"#.to_string(),
        "line one\nline two\n\n  indented\tand tabbed\n".to_string(),
        "ünïcødé ✓ 日本語 🦀 — «quotes»".to_string(),
        big,
    ]
}

/// Each awkward prompt, sent through `corral send` (the big one on stdin), reaches the model
/// byte for byte as the user message's own text, and is answered.
fn the_prompt_reaches_the_model_exactly_as_written(engine: Engine) {
    let Some(rig) = Rig::start(engine) else {
        return;
    };
    // Titled, and a project without instructions: nothing is added to the person's text.
    let session = rig.session(Some("verbatim"));
    for (n, prompt) in awkward_prompts().iter().enumerate() {
        let answer = format!("answer {n}");
        rig.mock.answer(&answer);
        let output = if prompt.len() > 64 * 1024 {
            rig.send_stdin(&session, prompt)
        } else {
            rig.run(&["send", &session, "--wait", "--", prompt])
        };
        let story = || rig.story(&session);
        assert!(
            output.status.success(),
            "prompt {n} failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            story()
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            format!("{answer}\n")
        );
        let users = rig.mock.last_user_blocks();
        let last = users.last().cloned().unwrap_or_default();
        assert!(
            last.iter().any(|block| block == prompt),
            "prompt {n} did not arrive as written: sent {:?}…, the model's last user message \
             was {:?}",
            prompt.chars().take(80).collect::<String>(),
            last.iter()
                .map(|b| b.chars().take(120).collect::<String>())
                .collect::<Vec<_>>()
        );
    }
    let history = rig.history(&session);
    let prompts = array(&history["prompts"]);
    assert_eq!(prompts.len(), awkward_prompts().len(), "{history}");
    for (stored, sent) in prompts.iter().zip(awkward_prompts()) {
        assert_eq!(stored["status"], "done");
        assert_eq!(stored["text"], sent.as_str(), "stored as sent");
    }
    rig.stop_daemon();
}

/// A prompt rate-limited in a conversation under way is retried into success, and the
/// conversation the model finally answers holds the person's prompt once, and the project's
/// instructions once (given when the conversation began; the retries added neither).
fn a_retried_prompt_reaches_the_model_once(engine: Engine) {
    let Some(rig) = Rig::start(engine) else {
        return;
    };
    let rules = "House rule: answer in one line.";
    rig.ok(&["project", "set", "p", "--instructions", rules]);
    let session = rig.session(Some("once"));
    rig.mock.answer("first answer");
    assert_eq!(rig.send_wait(&session, "first question"), "first answer\n");
    rig.mock.rate_limit(2);
    rig.mock.answer("second answer");
    assert_eq!(
        rig.send_wait(&session, "second question"),
        "second answer\n",
        "{}",
        rig.story(&session)
    );
    let story = rig.story(&session);
    assert_eq!(rig.mock.unused_answers(), 0, "{story}");
    assert_eq!(rig.mock.times_sent("second question"), 1, "{story}");
    assert_eq!(rig.mock.times_sent("first question"), 1, "{story}");
    assert_eq!(rig.mock.times_sent(rules), 1, "{story}");
    let history = rig.history(&session);
    let runs = array(&history["runs"]);
    assert_eq!(runs.len(), 4, "{story}");
    assert_eq!(runs[3]["status"], "succeeded", "{story}");
    // The conversation went on: the last run resumed the session's thread.
    let thread = rig.session_show(&session)["thread_id"]
        .as_str()
        .expect("a thread")
        .to_string();
    assert!(rig.resumes(&strings(&runs[3]["argv"]), &thread), "{story}");
    rig.stop_daemon();
}

/// Claude: an overload (HTTP 529) and then a rate limit in a conversation under way, each
/// classed as such by claude's `api_error_status`, are retried into an answer from a
/// conversation that holds the prompt once.
#[test]
fn claude_an_overload_then_a_rate_limit_reach_the_model_once() {
    let Some(rig) = Rig::start(Engine::Claude) else {
        return;
    };
    let session = rig.session(Some("overloaded"));
    rig.mock.answer("first answer");
    rig.send_wait(&session, "first question");
    if let Mock::Anthropic(mock) = &rig.mock {
        mock.script([
            Answer::Overloaded,
            Answer::rate_limited(),
            Answer::text("second answer"),
        ]);
    }
    assert_eq!(
        rig.send_wait(&session, "second question"),
        "second answer\n"
    );
    let story = rig.story(&session);
    assert_eq!(rig.mock.times_sent("second question"), 1, "{story}");
    let runs = array(&rig.history(&session)["runs"]);
    let classes: Vec<&str> = runs[1..]
        .iter()
        .map(|run| run["failure_class"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(classes, ["overloaded", "rate_limit", "-"], "{story}");
    rig.stop_daemon();
}

/// OpenCode: a provider's `retry-after-ms` longer than corral's next delay is what corral
/// waits (opencode reports the header on its error line).
#[test]
fn opencode_a_providers_retry_after_longer_than_corrals_delay_is_honoured() {
    let Some(rig) = Rig::start(Engine::Opencode) else {
        return;
    };
    let session = rig.session(Some("retry-after"));
    if let Mock::Chat(mock) = &rig.mock {
        mock.script(vec![
            Answer::rate_limited_ms(300);
            OPENCODE_REQUESTS_PER_FAILED_RUN
        ]);
        mock.script([Answer::text("waited")]);
    }
    assert_eq!(rig.send_wait(&session, "be patient"), "waited\n");
    let story = rig.story(&session);
    let retry = rig
        .events(&session)
        .into_iter()
        .find(|event| event["kind"] == "retry.scheduled")
        .unwrap_or_else(|| panic!("a retry: {story}"));
    // corral's own delay is 100 ms (common::engines); the provider asked for 300.
    assert_eq!(retry["payload"]["retry_after_ms"], 300, "{story}");
    assert_eq!(retry["payload"]["delay_ms"], 300, "{story}");
    rig.stop_daemon();
}

/// The next line of `lines` for which `pick` gives something, within [`DEADLINE`].
/// The engine's own tool for writing a file, and its arguments.
fn write_tool(engine: Engine, path: &std::path::Path, content: &str) -> Answer {
    let path = path.to_str().expect("temporary paths are UTF-8");
    match engine {
        Engine::Claude => Answer::tool(
            "Write",
            serde_json::json!({ "file_path": path, "content": content }),
        ),
        Engine::Opencode => Answer::tool(
            "write",
            serde_json::json!({ "filePath": path, "content": content }),
        ),
        Engine::Codex => unreachable!("codex writes through apply_patch"),
    }
}

impl Mock {
    /// The next model calls: the tool call, then (with its outcome) a final text.
    fn tool_then(&self, tool: Answer, text: &str) {
        match self {
            Mock::Anthropic(mock) => mock.script([tool, Answer::text(text)]),
            Mock::Chat(mock) => mock.script([tool, Answer::text(text)]),
            Mock::Responses(_) => unreachable!("codex writes through apply_patch"),
        }
    }
}

/// One cell of the sandbox on the real CLI: the model writes `path`; the prompt ends done
/// either way, and the write happened or was refused and told (`tool.denied` with the path,
/// `denied: 1` on the prompt, and a line of `send --wait`).
/// How a cell's prompt is sent.
#[derive(Clone, Copy, PartialEq)]
enum Sent {
    /// As it is: the project's sandbox.
    Plain,
    /// With `--read-only`.
    ReadOnly,
    /// To a remote project (read-only too).
    Remote,
}

/// The engine's shell tool running `touch PATH`.
fn touch_tool(engine: Engine, path: &std::path::Path) -> Answer {
    let command = format!("touch {}", path.display());
    let input = serde_json::json!({ "command": command, "description": "make a file" });
    match engine {
        Engine::Claude => Answer::tool("Bash", input),
        Engine::Opencode => Answer::tool("bash", input),
        Engine::Codex => unreachable!("codex's cells are codex_the_sandbox_holds"),
    }
}

fn write_cell(rig: &Rig, session: &str, path: &std::path::Path, sent: Sent, allowed: bool) {
    tool_cell(rig, session, path, sent, allowed, false);
}

/// [`write_cell`] through the engine's shell (`touch`).
fn shell_cell(rig: &Rig, session: &str, path: &std::path::Path, sent: Sent, allowed: bool) {
    tool_cell(rig, session, path, sent, allowed, true);
}

fn tool_cell(
    rig: &Rig,
    session: &str,
    path: &std::path::Path,
    sent: Sent,
    allowed: bool,
    shell: bool,
) {
    let read_only = sent != Sent::Plain;
    let (tool, content) = if shell {
        (touch_tool(rig.engine(), path), "")
    } else {
        (write_tool(rig.engine(), path, "written\n"), "written\n")
    };
    rig.mock.tool_then(tool, "my turn is over");
    let mut args = vec!["send", session, "write it", "--wait"];
    if sent == Sent::ReadOnly {
        args.push("--read-only");
    }
    let output = rig.run(&args);
    let story = rig.story(session);
    assert!(output.status.success(), "{output:?}\n{story}");
    let said = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "my turn is over\n",
        "{story}"
    );
    let history = rig.history(session);
    let prompt = array(&history["prompts"]).last().cloned().unwrap();
    assert_eq!(prompt["status"], "done", "{story}");
    let denials: Vec<Value> = rig
        .events(session)
        .into_iter()
        .filter(|event| event["kind"] == "tool.denied" && event["prompt_id"] == prompt["id"])
        .collect();
    if allowed {
        assert_eq!(
            std::fs::read_to_string(path).ok().as_deref(),
            Some(content),
            "{path:?} was to be written: {said}\n{story}"
        );
        assert_eq!(prompt["denied"], 0, "{story}");
        assert!(denials.is_empty(), "{denials:?}\n{story}");
        assert!(!said.contains("denied"), "{said}");
    } else {
        assert!(!path.exists(), "{path:?} was written\n{story}");
        assert_eq!(prompt["denied"], 1, "{story}");
        assert_eq!(denials.len(), 1, "{story}");
        let target = denials[0]["payload"]["target"].as_str();
        if rig.engine() == Engine::Opencode && read_only {
            // Read-only takes opencode's write tools away: a call of one comes back without
            // its arguments (docs/permissions.md), so the denial names the tool only.
            let tool = if shell { "bash" } else { "write" };
            assert_eq!(denials[0]["payload"]["tool"], tool, "{denials:?}");
        } else if shell {
            // The command is the target.
            let target = target.unwrap_or_default();
            assert!(target.contains(path.to_str().unwrap()), "{denials:?}");
        } else {
            assert_eq!(target, path.to_str(), "{denials:?}");
        }
        assert!(said.contains("denied: 1"), "send --wait says so: {said}");
        let shown = rig.ok(&["history", session]);
        assert!(shown.contains("done · denied: 1"), "{shown}");
    }
}

/// The sandbox holds on the real CLI (docs/permissions.md), each cell a write or a shell
/// command (`touch`) the mock scripts: workspace-write writes inside the working tree and is
/// refused outside it;
/// read-only (`send --read-only`, as a remote project's every prompt) is refused inside it;
/// full access writes outside it. Every refusal is told, never a silent success.
fn the_sandbox_holds_and_every_refusal_is_told(engine: Engine) {
    let Some(rig) = Rig::start(engine) else {
        return;
    };
    let session = rig.session(Some("Policy"));
    let outside = rig.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    write_cell(
        &rig,
        &session,
        &rig.work().join("inside.txt"),
        Sent::Plain,
        true,
    );
    write_cell(
        &rig,
        &session,
        &outside.join("escaped.txt"),
        Sent::Plain,
        false,
    );
    // A shell command: in the tree it runs; naming a path outside it, it is refused.
    shell_cell(
        &rig,
        &session,
        &rig.work().join("touched.txt"),
        Sent::Plain,
        true,
    );
    shell_cell(
        &rig,
        &session,
        &outside.join("touched.txt"),
        Sent::Plain,
        false,
    );
    write_cell(
        &rig,
        &session,
        &rig.work().join("looked.txt"),
        Sent::ReadOnly,
        false,
    );
    shell_cell(
        &rig,
        &session,
        &rig.work().join("looked-touched.txt"),
        Sent::ReadOnly,
        false,
    );
    rig.ok(&["project", "set", "p", "--remote", "true"]);
    write_cell(
        &rig,
        &session,
        &rig.work().join("remote.txt"),
        Sent::Remote,
        false,
    );
    rig.ok(&[
        "project",
        "set",
        "p",
        "--remote",
        "false",
        "--full-access",
        "true",
    ]);
    write_cell(
        &rig,
        &session,
        &outside.join("granted.txt"),
        Sent::Plain,
        true,
    );
    shell_cell(
        &rig,
        &session,
        &outside.join("granted-touched.txt"),
        Sent::Plain,
        true,
    );
    assert_eq!(rig.mock.unused_answers(), 0, "{}", rig.mock.log());
}

#[test]
fn claude_the_sandbox_holds_and_every_refusal_is_told() {
    the_sandbox_holds_and_every_refusal_is_told(Engine::Claude);
}

#[test]
fn opencode_the_sandbox_holds_and_every_refusal_is_told() {
    the_sandbox_holds_and_every_refusal_is_told(Engine::Opencode);
}

/// The session's reasoning effort reaches the model: claude's `--effort` as the request's
/// `output_config.effort`, opencode's `--variant` as `reasoning_effort`.
fn the_sessions_effort_reaches_the_model(engine: Engine) {
    let Some(rig) = Rig::start(engine) else {
        return;
    };
    let session = rig.new_session(&["p", "--title", "Effort", "--effort", "low"]);
    rig.mock.answer("thought little");
    assert_eq!(rig.send_wait(&session, "think"), "thought little\n");
    let bodies: Vec<Value> = match &rig.mock {
        Mock::Anthropic(mock) => mock.model_calls().iter().map(|call| call.body()).collect(),
        Mock::Chat(mock) => mock.model_calls().iter().map(|call| call.body()).collect(),
        Mock::Responses(_) => unreachable!("codex is tests/it/real_codex.rs's"),
    };
    let effort = |body: &Value| match engine {
        Engine::Claude => body["output_config"]["effort"].clone(),
        _ => body["reasoning_effort"].clone(),
    };
    assert!(!bodies.is_empty(), "{}", rig.mock.log());
    for body in &bodies {
        assert_eq!(effort(body), "low", "{body}");
    }
}

#[test]
fn claude_the_sessions_effort_reaches_the_model() {
    the_sessions_effort_reaches_the_model(Engine::Claude);
}

#[test]
fn opencode_the_sessions_effort_reaches_the_model() {
    the_sessions_effort_reaches_the_model(Engine::Opencode);
}

fn next_matching<T>(
    lines: &mpsc::Receiver<String>,
    what: &str,
    mut pick: impl FnMut(&Value) -> Option<T>,
) -> T {
    let found = next_line(lines, |line| {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("not an event ({error}): {line}"));
        pick(&event)
    });
    match found {
        Ok((found, _)) => found,
        Err(seen) => panic!("no {what} in the watch stream; saw {seen:#?}"),
    }
}

/// A `watch --follow --json` of the session from its beginning; ended by [`stop`].
fn follow(rig: &Rig, session: &str) -> (Child, mpsc::Receiver<String>) {
    let mut follower = rig
        .corral(&["watch", session, "--after", "0", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("watch starts");
    let lines = lines_of(follower.stdout.take().unwrap());
    (follower, lines)
}

fn stop(mut child: Child) {
    common::daemon::kill(child.id() as i32, libc::SIGTERM);
    let until = Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("watch --follow did not end on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A run waiting on a model that never answers is cancelled: the prompt is `cancelled`, and
/// no process of the run's group (nor any process carrying its run id) is left.
fn a_hanging_run_is_cancelled_with_its_whole_process_group(engine: Engine) {
    let Some(rig) = Rig::start(engine) else {
        return;
    };
    let session = rig.session(Some("hang"));
    rig.mock.hang();
    let (follower, lines) = follow(&rig, &session);

    let sent = rig.ok(&["send", &session, "wait for ever"]);
    let (prompt_id, status) = sent
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("send prints `ID STATUS`: {sent:?}"));
    assert_eq!(status, "running", "{sent}");
    let prompt_id = prompt_id.to_string();
    let (run_id, pid) = next_matching(&lines, "run.started", |event| {
        (event["kind"] == "run.started" && event["prompt_id"] == prompt_id.as_str()).then(|| {
            (
                event["run_id"].as_str().expect("the run's id").to_string(),
                event["payload"]["pid"].as_i64().expect("the run's pid") as i32,
            )
        })
    });
    // The engine is waiting on the model: the mock holds its request.
    wait_until("the engine's model call hangs", || rig.mock.hanging() == 1);
    assert!(
        corral::process::group_exists(pid),
        "the run's group {pid} runs"
    );

    let cancelled = rig.ok(&["cancel", &prompt_id]);
    assert!(cancelled.contains("cancelled"), "{cancelled}");
    let ended = next_matching(&lines, "prompt.cancelled", |event| {
        (event["prompt_id"] == prompt_id.as_str()
            && ["prompt.cancelled", "prompt.done", "prompt.failed"]
                .contains(&event["kind"].as_str().unwrap_or("")))
        .then(|| event["kind"].as_str().unwrap().to_string())
    });
    assert_eq!(ended, "prompt.cancelled", "{}", rig.story(&session));
    stop(follower);

    // The whole group is gone (the engine led it: pgid = pid), and nothing that carries the
    // run's id escaped it; the engine's connection to the mock closed with it.
    wait_until("the run's group is gone", || {
        !corral::process::group_exists(pid)
    });
    wait_until("no process carries the run's id", || {
        corral::process::find_by_env("CORRAL_RUN_ID", &run_id)
            .into_iter()
            .all(|pid| !corral::process::is_alive(pid as u32, None))
    });
    wait_until("the mock's hung connection is closed", || {
        rig.mock.hanging() == 0
    });

    let story = rig.story(&session);
    let history = rig.history(&session);
    let prompts = array(&history["prompts"]);
    assert_eq!(prompts.len(), 1, "{story}");
    assert_eq!(prompts[0]["status"], "cancelled", "{story}");
    let runs = array(&history["runs"]);
    assert_eq!(runs.len(), 1, "{story}");
    assert_eq!(runs[0]["id"], run_id.as_str());
    assert_eq!(runs[0]["status"], "cancelled", "{story}");
    assert_eq!(runs[0]["pid"], pid, "{story}");
    assert_eq!(runs[0]["pgid"], pid, "the run led its own group: {story}");
    assert_in_order(
        &kinds_of(&rig.events(&session), &prompt_id),
        &[
            "prompt.started",
            "run.started",
            "run.exited",
            "prompt.cancelled",
        ],
        &story,
    );
    assert_eq!(rig.mock.model_calls(), 1, "{story}");

    rig.stop_daemon();
}

#[test]
fn claude_a_new_session_answers_and_the_next_prompt_resumes_it() {
    a_new_session_answers_and_the_next_prompt_resumes_it(Engine::Claude);
}

#[test]
fn claude_a_rate_limited_prompt_is_retried_into_success() {
    a_rate_limited_prompt_is_retried_into_success(Engine::Claude);
}

#[test]
fn claude_a_hanging_run_is_cancelled_with_its_whole_process_group() {
    a_hanging_run_is_cancelled_with_its_whole_process_group(Engine::Claude);
}

#[test]
fn opencode_a_new_session_answers_and_the_next_prompt_resumes_it() {
    a_new_session_answers_and_the_next_prompt_resumes_it(Engine::Opencode);
}

#[test]
fn opencode_a_rate_limited_prompt_is_retried_into_success() {
    a_rate_limited_prompt_is_retried_into_success(Engine::Opencode);
}

#[test]
fn opencode_a_hanging_run_is_cancelled_with_its_whole_process_group() {
    a_hanging_run_is_cancelled_with_its_whole_process_group(Engine::Opencode);
}

#[test]
fn codex_a_new_session_answers_and_the_next_prompt_resumes_it() {
    a_new_session_answers_and_the_next_prompt_resumes_it(Engine::Codex);
}

#[test]
fn codex_a_rate_limited_prompt_is_retried_into_success() {
    a_rate_limited_prompt_is_retried_into_success(Engine::Codex);
}

#[test]
fn codex_a_hanging_run_is_cancelled_with_its_whole_process_group() {
    a_hanging_run_is_cancelled_with_its_whole_process_group(Engine::Codex);
}

#[test]
fn claude_the_prompt_reaches_the_model_exactly_as_written() {
    the_prompt_reaches_the_model_exactly_as_written(Engine::Claude);
}

#[test]
fn claude_a_retried_prompt_reaches_the_model_once() {
    a_retried_prompt_reaches_the_model_once(Engine::Claude);
}

#[test]
fn opencode_the_prompt_reaches_the_model_exactly_as_written() {
    the_prompt_reaches_the_model_exactly_as_written(Engine::Opencode);
}

#[test]
fn opencode_a_retried_prompt_reaches_the_model_once() {
    a_retried_prompt_reaches_the_model_once(Engine::Opencode);
}

#[test]
fn codex_the_prompt_reaches_the_model_exactly_as_written() {
    the_prompt_reaches_the_model_exactly_as_written(Engine::Codex);
}

#[test]
fn codex_a_retried_prompt_reaches_the_model_once() {
    a_retried_prompt_reaches_the_model_once(Engine::Codex);
}

/// Sends `text` (without waiting) and returns the prompt's id.
fn send_only(rig: &Rig, session: &str, text: &str) -> String {
    let sent = rig.ok(&["send", session, text]);
    sent.split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("send prints `ID STATUS`: {sent:?}"))
        .to_string()
}

/// The next `approval.requested` of `prompt` in the stream: the approval.
fn next_approval(lines: &mpsc::Receiver<String>, prompt: &str) -> Value {
    next_matching(lines, "approval.requested", |event| {
        (event["kind"] == "approval.requested" && event["prompt_id"] == prompt)
            .then(|| event["payload"]["approval"].clone())
    })
}

/// How `prompt` ended, from the stream: its end event's kind.
fn prompt_end(lines: &mpsc::Receiver<String>, prompt: &str) -> String {
    next_matching(lines, "the prompt's end", |event| {
        let kind = event["kind"].as_str().unwrap_or("");
        (event["prompt_id"] == prompt
            && ["prompt.done", "prompt.failed", "prompt.cancelled"].contains(&kind))
        .then(|| kind.to_string())
    })
}

/// A person approves `asked`; the prompt then ends done.
fn approved_and_done(
    rig: &Rig,
    session: &str,
    lines: &mpsc::Receiver<String>,
    prompt: &str,
    asked: &Value,
) {
    rig.ok(&["approve", asked["id"].as_str().unwrap()]);
    assert_eq!(
        prompt_end(lines, prompt),
        "prompt.done",
        "{}",
        rig.story(session)
    );
}

/// Under the policy `ask`, what claude would refuse is asked of a person through its
/// stream-json control protocol, and the person's answer is what happens: a write outside the
/// tree waits in `corral approvals` until `corral approve` (then it is written), or `corral
/// deny --reason` (then it is not, and the refusal is told); a write inside the tree is not
/// asked about (workspace-write allows it); a command approved `--for-session` runs again
/// without asking.
#[test]
fn claude_under_ask_a_person_answers_what_the_agent_asks() {
    let Some(rig) = Rig::start(Engine::Claude) else {
        return;
    };
    rig.ok(&["project", "set", "p", "--policy", "ask"]);
    let session = rig.session(Some("Ask"));
    let outside = rig.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let (follower, lines) = follow(&rig, &session);

    // Approved: written.
    let approved = outside.join("approved.txt");
    rig.mock
        .tool_then(write_tool(Engine::Claude, &approved, "yes\n"), "wrote it");
    let prompt = send_only(&rig, &session, "write outside");
    let asked = next_approval(&lines, &prompt);
    assert_eq!(asked["tool"], "Write", "{asked}");
    assert_eq!(asked["target"], approved.to_str().unwrap(), "{asked}");
    assert_eq!(asked["status"], "pending", "{asked}");
    assert!(!approved.exists(), "written before anyone answered");
    let listed = rig.json(&["approvals", "--json"]);
    assert_eq!(array(&listed).len(), 1, "{listed}");
    assert_eq!(listed[0]["id"], asked["id"], "{listed}");
    let id = asked["id"].as_str().unwrap();
    let said = rig.ok(&["approve", id]);
    assert!(said.starts_with("approved "), "{said}");
    assert_eq!(
        prompt_end(&lines, &prompt),
        "prompt.done",
        "{}",
        rig.story(&session)
    );
    assert_eq!(
        std::fs::read_to_string(&approved).ok().as_deref(),
        Some("yes\n")
    );
    let history = rig.history(&session);
    assert_eq!(array(&history["prompts"])[0]["denied"], 0, "{history}");
    // Answered once.
    let again = rig.run(&["deny", id]);
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    let again = String::from_utf8_lossy(&again.stderr);
    assert!(
        again.contains("was approved already by a person"),
        "{again}"
    );

    // Denied: not written, and told.
    let refused = outside.join("refused.txt");
    rig.mock
        .tool_then(write_tool(Engine::Claude, &refused, "no\n"), "could not");
    let prompt = send_only(&rig, &session, "write outside again");
    let asked = next_approval(&lines, &prompt);
    rig.ok(&[
        "deny",
        asked["id"].as_str().unwrap(),
        "--reason",
        "not there",
    ]);
    assert_eq!(
        prompt_end(&lines, &prompt),
        "prompt.done",
        "{}",
        rig.story(&session)
    );
    assert!(!refused.exists(), "a denied write happened");
    // The model was told the person's words.
    let told = rig.mock.conversations().concat();
    assert!(
        told.iter().any(|(_, text)| text.contains("not there")),
        "{}",
        rig.mock.log()
    );
    let history = rig.history(&session);
    let ended = array(&history["prompts"])[1].clone();
    assert_eq!(
        ended["denied"], 1,
        "a person's denial is a refusal told: {history}"
    );

    // Inside the tree: workspace-write allows it, nobody is asked.
    let inside = rig.work().join("inside.txt");
    rig.mock
        .tool_then(write_tool(Engine::Claude, &inside, "in\n"), "inside done");
    let output = rig.send_wait(&session, "write inside");
    assert_eq!(output, "inside done\n");
    assert_eq!(
        std::fs::read_to_string(&inside).ok().as_deref(),
        Some("in\n")
    );

    // A command approved for the session runs again without asking.
    let ran = outside.join("ran.txt");
    let command = format!("python3 -c \"open('{}','a').write('ran')\"", ran.display());
    let bash = || {
        Answer::tool(
            "Bash",
            serde_json::json!({ "command": command, "description": "write a file" }),
        )
    };
    rig.mock.tool_then(bash(), "ran once");
    let prompt = send_only(&rig, &session, "run it");
    let asked = next_approval(&lines, &prompt);
    assert_eq!(asked["tool"], "Bash", "{asked}");
    assert_eq!(asked["target"], command.as_str(), "{asked}");
    let said = rig.ok(&["approve", asked["id"].as_str().unwrap(), "--for-session"]);
    assert!(said.contains("kept for session"), "{said}");
    assert_eq!(
        prompt_end(&lines, &prompt),
        "prompt.done",
        "{}",
        rig.story(&session)
    );
    rig.mock.tool_then(bash(), "ran twice");
    let output = rig.send_wait(&session, "run it again");
    assert_eq!(output, "ran twice\n", "{}", rig.story(&session));
    assert_eq!(
        std::fs::read_to_string(&ran).ok().as_deref(),
        Some("ranran")
    );
    let kept: Vec<Value> = rig
        .events(&session)
        .into_iter()
        .filter(|event| event["kind"] == "approval.answered")
        .map(|event| event["payload"]["approval"].clone())
        .collect();
    let by: Vec<&str> = kept
        .iter()
        .map(|approval| approval["answered_by"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        by,
        ["person", "person", "person", "session-rule"],
        "{kept:#?}"
    );
    assert_eq!(array(&rig.json(&["approvals", "--json"])).len(), 0);
    stop(follower);
    assert_eq!(rig.mock.unused_answers(), 0, "{}", rig.mock.log());
    rig.stop_daemon();
}

/// The codex app-server under `ask`: a command the agent wants to run outside the sandbox
/// (`exec_command` with `sandbox_permissions: require_escalated`) is an
/// `item/commandExecution/requestApproval`
/// of the real codex, routed to a person; `corral approve` runs it, `corral deny` does not.
#[test]
fn codex_app_server_under_ask_a_person_answers_what_the_agent_asks() {
    let Some(rig) = Rig::start(Engine::Codex) else {
        return;
    };
    let Mock::Responses(mock) = &rig.mock else {
        unreachable!("codex talks to the Responses mock");
    };
    let wrapper = rig.env.wrapper().to_str().unwrap().to_string();
    rig.home
        .config(&[("engines.codex-app-server.path", wrapper.as_str())]);
    rig.ok(&[
        "project",
        "set",
        "p",
        "--engine",
        "codex-app-server",
        "--policy",
        "ask",
    ]);
    let session = rig.new_session(&["p", "--title", "Ask"]);
    let outside = rig.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let (follower, lines) = follow(&rig, &session);
    let escalated = |path: &std::path::Path| mock_responses::Answer::Call {
        name: "exec_command".into(),
        arguments: serde_json::json!({
            "cmd": format!("touch {}", path.display()),
            "sandbox_permissions": "require_escalated",
            "justification": "write outside the tree",
        }),
    };

    let approved = outside.join("approved.txt");
    mock.script([escalated(&approved), mock_responses::Answer::text("ran it")]);
    let prompt = send_only(&rig, &session, "touch it");
    let asked = next_approval(&lines, &prompt);
    assert_eq!(asked["tool"], "commandExecution", "{asked}");
    let target = asked["target"].as_str().unwrap_or_default();
    assert!(
        target.contains(approved.to_str().unwrap()),
        "the command is the target: {asked}"
    );
    assert_eq!(asked["reason"], "write outside the tree", "{asked}");
    assert!(!approved.exists(), "ran before anyone answered");
    approved_and_done(&rig, &session, &lines, &prompt, &asked);
    assert!(approved.exists(), "{}", rig.story(&session));

    let refused = outside.join("refused.txt");
    mock.script([
        escalated(&refused),
        mock_responses::Answer::text("could not"),
    ]);
    let prompt = send_only(&rig, &session, "touch the other");
    let asked = next_approval(&lines, &prompt);
    rig.ok(&["deny", asked["id"].as_str().unwrap(), "--reason", "no"]);
    assert_eq!(
        prompt_end(&lines, &prompt),
        "prompt.done",
        "{}",
        rig.story(&session)
    );
    assert!(!refused.exists(), "a denied command ran");
    // codex's declined item is a refusal told.
    let history = rig.history(&session);
    let last = array(&history["prompts"]).last().cloned().unwrap();
    assert_eq!(last["denied"], 1, "{}", rig.story(&session));

    // A file write outside the tree (codex's `apply_patch`; outside /tmp too, which codex
    // keeps writable) is a fileChange request, its target the file.
    let beyond = outside_tmp();
    let patched = beyond.path().join("patched.txt");
    mock.script([
        add_file_patch(&patched),
        mock_responses::Answer::text("patched it"),
    ]);
    let prompt = send_only(&rig, &session, "patch it");
    let asked = next_approval(&lines, &prompt);
    assert_eq!(asked["tool"], "fileChange", "{asked}");
    assert!(
        asked["target"]
            .as_str()
            .unwrap_or_default()
            .contains(patched.to_str().unwrap()),
        "the file is the target: {asked}"
    );
    assert!(!patched.exists(), "written before anyone answered");
    approved_and_done(&rig, &session, &lines, &prompt, &asked);
    assert_eq!(
        std::fs::read_to_string(&patched).ok().as_deref(),
        Some("patched\n")
    );
    stop(follower);
    assert_eq!(rig.mock.unused_answers(), 0, "{}", rig.mock.log());
    rig.stop_daemon();
}

/// codex's `apply_patch` (its file edit, a freeform tool) adding file `path` with `patched`.
fn add_file_patch(path: &std::path::Path) -> mock_responses::Answer {
    mock_responses::Answer::Custom {
        name: "apply_patch".into(),
        input: format!(
            "*** Begin Patch\n*** Add File: {}\n+patched\n*** End Patch\n",
            path.display()
        ),
    }
}

/// A directory outside the tree that codex's workspace-write does not keep writable: it
/// keeps /tmp (and $TMPDIR) writable, so the build's own temporary directory, else $HOME.
fn outside_tmp() -> tempfile::TempDir {
    let temporary = [std::path::PathBuf::from("/tmp"), std::env::temp_dir()];
    let base = [
        Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        std::env::var_os("HOME").map(std::path::PathBuf::from),
    ]
    .into_iter()
    .flatten()
    .find(|dir| !temporary.iter().any(|tmp| dir.starts_with(tmp)))
    .expect("a writable directory outside /tmp: the target directory or $HOME");
    tempfile::tempdir_in(base).unwrap()
}

/// codex's sandbox holds on the real CLI (docs/permissions.md), through `codex exec` and
/// through the app-server alike, each cell a command the mock scripts (`exec_command` with
/// `touch`): workspace-write writes inside the tree and not outside it (a directory outside
/// the tree and outside /tmp, which codex keeps writable); read-only (`send --read-only`)
/// writes nothing; full access writes outside. codex runs the command in its sandbox and
/// only the model is told it failed (`Read-only file system`).
fn codex_the_sandbox_holds(engine: &str) {
    let Some(rig) = Rig::start(Engine::Codex) else {
        return;
    };
    let Mock::Responses(mock) = &rig.mock else {
        unreachable!("codex talks to the Responses mock");
    };
    if engine == "codex-app-server" {
        let wrapper = rig.env.wrapper().to_str().unwrap().to_string();
        rig.home
            .config(&[("engines.codex-app-server.path", wrapper.as_str())]);
    }
    rig.ok(&["project", "set", "p", "--engine", engine]);
    let session = rig.new_session(&["p", "--title", "Sandbox"]);
    let outside = outside_tmp();
    // A cell: a command (`touch`) or a file write (`apply_patch`, codex's edit tool).
    let cell = |path: &std::path::Path, read_only: bool, written: bool| {
        let call = if path
            .extension()
            .is_some_and(|extension| extension == "patched")
        {
            add_file_patch(path)
        } else {
            mock_responses::Answer::Call {
                name: "exec_command".into(),
                arguments: serde_json::json!({ "cmd": format!("touch {}", path.display()) }),
            }
        };
        mock.script([call, mock_responses::Answer::text("my turn is over")]);
        let mut args = vec!["send", &session, "touch it", "--wait"];
        if read_only {
            args.push("--read-only");
        }
        let output = rig.run(&args);
        assert!(
            output.status.success(),
            "{output:?}\n{}",
            rig.story(&session)
        );
        assert_eq!(
            path.exists(),
            written,
            "{path:?} (read-only: {read_only})\n{}",
            rig.story(&session)
        );
        // What codex told the model: the command ran in its sandbox, and failed when refused.
        let told = mock
            .requests()
            .iter()
            .rfind(|request| request.path == "/v1/responses")
            .map(|request| request.json()["input"].to_string())
            .unwrap_or_default();
        if !written {
            assert!(told.contains("Read-only file system"), "{told}");
        }
    };
    cell(&rig.work().join("inside.txt"), false, true);
    cell(&rig.work().join("inside.patched"), false, true);
    cell(&outside.path().join("escaped.txt"), false, false);
    cell(&outside.path().join("escaped.patched"), false, false);
    cell(&rig.work().join("looked.txt"), true, false);
    cell(&rig.work().join("looked.patched"), true, false);
    rig.ok(&["project", "set", "p", "--full-access", "true"]);
    cell(&outside.path().join("granted.txt"), false, true);
    cell(&outside.path().join("granted.patched"), false, true);
    assert_eq!(rig.mock.unused_answers(), 0, "{}", rig.mock.log());
    rig.stop_daemon();
}

/// Nothing in `codex exec --json` says that a command was refused: these refusals reach only
/// the model, so they cannot be told as `tool.denied` (docs/permissions.md).
#[test]
fn codex_exec_the_sandbox_holds() {
    codex_the_sandbox_holds("codex");
}

#[test]
fn codex_app_server_the_sandbox_holds() {
    codex_the_sandbox_holds("codex-app-server");
}

/// Live restore on the real CLI: `corral daemon restart` while the engine runs a shell
/// command the model asked for. The engine is not ended: the next daemon takes its run over,
/// the engine sends the command's outcome to the model and gets its answer, and the turn ends
/// done with one run — each model call made once (the mock saw two: the tool call and the
/// answer), the prompt sent once.
fn a_turn_goes_on_through_a_daemon_restart_and_reaches_the_model_once(engine: Engine) {
    let Some(rig) = Rig::start(engine) else {
        return;
    };
    if rig.store().is_postgres() {
        // A shared store's lease guard ends a dead daemon's runs (README, live restore).
        println!("skipped: live restore is a home's own store's (SQLite), not PostgreSQL's");
        return;
    }
    let session = rig.session(Some("restarted"));
    let slept = rig.work().join("slept.txt");
    let command = format!("sleep 3 && touch {}", slept.display());
    let input = serde_json::json!({ "command": command, "description": "wait a little" });
    let tool = match engine {
        Engine::Claude => Answer::tool("Bash", input),
        Engine::Opencode => Answer::tool("bash", input),
        Engine::Codex => unreachable!("codex exec: not this test"),
    };
    rig.mock.tool_then(tool, "done after the restart");
    let prompt = send_only(&rig, &session, "wait, then say so");
    wait_until("the model asked for the command", || {
        rig.mock.model_calls() >= 1
    });
    let old = rig.daemon_pid();
    let said = rig.ok(&["daemon", "restart"]);
    assert!(said.contains("corral daemon started"), "{said}");
    assert_ne!(rig.daemon_pid(), old);
    wait_until("the prompt ends", || {
        array(&rig.history(&session)["prompts"])
            .iter()
            .any(|p| p["id"] == prompt.as_str() && p["status"] != "running")
    });
    let story = rig.story(&session);
    let history = rig.history(&session);
    let ended = array(&history["prompts"])
        .into_iter()
        .find(|p| p["id"] == prompt.as_str())
        .unwrap();
    assert_eq!(ended["status"], "done", "{story}");
    assert_eq!(ended["answer"], "done after the restart", "{story}");
    assert_eq!(array(&history["runs"]).len(), 1, "not redone: {story}");
    assert!(slept.exists(), "the command ran to its end: {story}");
    assert_eq!(rig.mock.model_calls(), 2, "{story}");
    assert_eq!(rig.mock.unused_answers(), 0, "{story}");
    assert_eq!(rig.mock.times_sent("wait, then say so"), 1, "{story}");
    let kinds = kinds_of(&rig.events(&session), &prompt);
    assert!(kinds.iter().any(|kind| kind == "run.readopted"), "{story}");
    rig.stop_daemon();
}

#[test]
fn claude_a_turn_goes_on_through_a_daemon_restart_and_reaches_the_model_once() {
    a_turn_goes_on_through_a_daemon_restart_and_reaches_the_model_once(Engine::Claude);
}

#[test]
fn opencode_a_turn_goes_on_through_a_daemon_restart_and_reaches_the_model_once() {
    a_turn_goes_on_through_a_daemon_restart_and_reaches_the_model_once(Engine::Opencode);
}
