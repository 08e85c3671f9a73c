//! Loopback mock model servers for the tests that drive the real Claude Code and OpenCode CLIs
//! offline (`tests/it/real_engines.rs`):
//!
//! - [`anthropic::MockAnthropic`]: the Anthropic Messages API (`POST /v1/messages`, SSE or
//!   JSON; `POST /v1/messages/count_tokens`; `GET /v1/models`), for Claude Code.
//! - [`chat::MockChat`]: the OpenAI Chat Completions API (`POST /v1/chat/completions`, SSE or
//!   JSON; `GET /v1/models`), for OpenCode through `@ai-sdk/openai-compatible`.
//!
//! The Responses API mock for codex is `src/testkit/mock_responses/`; all three share the HTTP core
//! in [`http`].
//!
//! Both mocks answer model calls from a script, a queue of [`Answer`]s taken one per model call
//! in arrival order; a model call that finds the queue empty gets an HTTP 400 saying so (a
//! status no client retries, so an unexpected extra call fails its turn at once and visibly
//! instead of costing a client's backoff). Every request, model call or not, is recorded as a
//! [`Call`]: its path, its parsed body, what kind of call it was and how it was answered, and
//! the conversation the model was sent, as a list of `(role, text)` exactly as received (see
//! [`Call::conversation`]).

#![allow(dead_code)]

pub mod anthropic;
pub mod chat;
pub mod http;

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use http::{Reply, Request, Server};

/// The token counts every text answer reports, so a test can see them come out of the
/// engine's own usage report.
pub const INPUT_TOKENS: u64 = 42;
pub const OUTPUT_TOKENS: u64 = 7;

/// One scripted answer to one model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A completed assistant message with this text, streamed (SSE) when the call asked for a
    /// stream, else one JSON message.
    Text(String),
    /// HTTP 429 with the API's rate-limit error body, and the retry hints given: `retry-after`
    /// in seconds and/or `retry-after-ms` (OpenCode obeys the latter verbatim, so 20 ms keeps
    /// its five hard-coded retries quick).
    RateLimited {
        retry_after_s: Option<u64>,
        retry_after_ms: Option<u64>,
    },
    /// The API is overloaded: HTTP 529 `overloaded_error` (Anthropic) or HTTP 503 (OpenAI).
    Overloaded,
    /// HTTP 500 with the API's server-error body.
    ServerError,
    /// No answer at all: the request is read and the connection held open, silent, until the
    /// mock is dropped, the client hangs up, or [`http::HANG_LIMIT`] has passed.
    Hang,
    /// The model calls one tool (`name`, with `input` as its arguments) and stops for its
    /// result: a `tool_use` block (Anthropic) or a `tool_calls` delta (OpenAI). The engine
    /// then runs the tool, or refuses it, and calls the model again with the outcome.
    ToolUse { name: String, input: Value },
}

impl Answer {
    pub fn text(text: impl Into<String>) -> Answer {
        Answer::Text(text.into())
    }

    /// A call of the tool `name` with `input`.
    pub fn tool(name: &str, input: Value) -> Answer {
        Answer::ToolUse {
            name: name.to_string(),
            input,
        }
    }

    /// A 429 without any retry hint.
    pub fn rate_limited() -> Answer {
        Answer::RateLimited {
            retry_after_s: None,
            retry_after_ms: None,
        }
    }

    /// A 429 with `retry-after-ms: MS`.
    pub fn rate_limited_ms(ms: u64) -> Answer {
        Answer::RateLimited {
            retry_after_s: None,
            retry_after_ms: Some(ms),
        }
    }

    /// A 429 with `retry-after: SECONDS`.
    pub fn rate_limited_s(seconds: u64) -> Answer {
        Answer::RateLimited {
            retry_after_s: Some(seconds),
            retry_after_ms: None,
        }
    }

    /// The retry headers of a [`Answer::RateLimited`].
    fn retry_headers(&self) -> Vec<(&'static str, String)> {
        let Answer::RateLimited {
            retry_after_s,
            retry_after_ms,
        } = self
        else {
            return Vec::new();
        };
        let mut headers = Vec::new();
        if let Some(seconds) = retry_after_s {
            headers.push(("retry-after", seconds.to_string()));
        }
        if let Some(ms) = retry_after_ms {
            headers.push(("retry-after-ms", ms.to_string()));
        }
        headers
    }

    /// A short name for the log: `text`, `429`, `overloaded`, `500`, `hang`.
    fn label(&self) -> &'static str {
        match self {
            Answer::Text(_) => "text",
            Answer::RateLimited { .. } => "429",
            Answer::Overloaded => "overloaded",
            Answer::ServerError => "500",
            Answer::Hang => "hang",
            Answer::ToolUse { .. } => "tool",
        }
    }
}

/// What a recorded request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A call to the model that the script answers.
    Model,
    /// OpenCode's title generator (a system prompt starting "You are a title generator"),
    /// answered apart from the script ([`chat::MockChat::title_script`]).
    Title,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
    /// `GET /v1/models`.
    Models,
    /// Anything else (answered 404).
    Other,
}

/// One request as a mock received it, with how it was answered.
#[derive(Debug, Clone)]
pub struct Call {
    pub request: Request,
    pub kind: CallKind,
    /// How it was answered: `text`, `429`, `overloaded`, `500`, `hang`, `unscripted` (the
    /// script was empty: a 400), `title`, `count_tokens`, `models`, `404`.
    pub answer: &'static str,
}

impl Call {
    pub fn path(&self) -> &str {
        &self.request.path
    }

    /// The parsed body (`Value::Null` when it is not JSON).
    pub fn body(&self) -> Value {
        self.request.json()
    }

    /// Whether the call asked for a stream.
    pub fn stream(&self) -> bool {
        self.body()["stream"] == true
    }

    /// The conversation the model was sent, as received: `(role, text)` of every entry of the
    /// body's `messages`, any role (Claude Code sends `system` messages in there; OpenAI puts
    /// the system prompt there), the text of its content: a string as it is, or the text
    /// blocks of a list joined with nothing in between (see [`Call::blocks`] for them apart).
    /// Anthropic's top-level `system` is not part of it ([`Call::system`]).
    pub fn conversation(&self) -> Vec<(String, String)> {
        self.blocks()
            .into_iter()
            .map(|(role, blocks)| (role, blocks.concat()))
            .collect()
    }

    /// Like [`Call::conversation`], with each message's text blocks apart.
    pub fn blocks(&self) -> Vec<(String, Vec<String>)> {
        let body = self.body();
        let Some(messages) = body.get("messages").and_then(Value::as_array) else {
            return Vec::new();
        };
        messages
            .iter()
            .map(|message| {
                let role = message.get("role").and_then(Value::as_str).unwrap_or("");
                (role.to_string(), text_blocks(message.get("content")))
            })
            .collect()
    }

    /// The Anthropic top-level `system` prompt (a string, or text blocks joined), else the
    /// text of the conversation's `system` messages joined (OpenAI).
    pub fn system(&self) -> String {
        let body = self.body();
        match body.get("system") {
            Some(system) if !system.is_null() => text_blocks(Some(system)).concat(),
            _ => self
                .conversation()
                .into_iter()
                .filter(|(role, _)| role == "system")
                .map(|(_, text)| text)
                .collect(),
        }
    }

    /// The texts of the conversation's `user` messages, in order.
    pub fn user_texts(&self) -> Vec<String> {
        self.conversation()
            .into_iter()
            .filter(|(role, _)| role == "user")
            .map(|(_, text)| text)
            .collect()
    }

    /// How many times `needle` occurs in the texts of `role`'s messages (occurrences do not
    /// overlap): how often the model was shown a person's prompt.
    pub fn count(&self, role: &str, needle: &str) -> usize {
        self.conversation()
            .iter()
            .filter(|(r, _)| r == role)
            .map(|(_, text)| text.matches(needle).count())
            .sum()
    }
}

/// The texts of a message's content: a string is one block; a list gives the `text` of each
/// block that has one (`text` blocks; a `tool_result`'s string content too).
fn text_blocks(content: Option<&Value>) -> Vec<String> {
    match content {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|block| match block {
                Value::String(text) => Some(text.clone()),
                _ => block
                    .get("text")
                    .or_else(|| block.get("content").filter(|content| content.is_string()))
                    .and_then(Value::as_str)
                    .map(str::to_string),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The API a [`MockServer`] speaks: [`anthropic::Anthropic`] or [`chat::Chat`].
pub trait Api {
    /// The name of the server's threads.
    const NAME: &'static str;
    /// What the base URL a client is given adds to `http://ADDRESS`.
    const BASE_PATH: &'static str;
    /// Records a request in the mock's state and answers it.
    const ANSWER: fn(&Shared, &Request) -> Reply;
}

/// A running mock of `A` ([`anthropic::MockAnthropic`], [`chat::MockChat`]): the server and
/// the state it shares with its connection threads. Dropping it stops accepting and ends
/// every hang.
pub struct MockServer<A> {
    shared: Shared,
    server: Server,
    api: PhantomData<A>,
}

impl<A: Api> MockServer<A> {
    /// Starts the mock on a free loopback port.
    pub fn start() -> MockServer<A> {
        let shared = Shared::default();
        let handler = {
            let shared = shared.clone();
            Arc::new(move |request: &Request| (A::ANSWER)(&shared, request))
        };
        MockServer {
            shared,
            server: Server::start(A::NAME, handler),
            api: PhantomData,
        }
    }

    /// The base URL a client is given (`ANTHROPIC_BASE_URL`, a provider's `baseURL`).
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.address(), A::BASE_PATH)
    }
}

impl<A> MockServer<A> {
    pub fn address(&self) -> SocketAddr {
        self.server.address()
    }

    /// Queues answers for the next model calls (a chat mock's title calls aside), in order.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.shared.lock().script.extend(answers);
    }

    /// Every request received so far, in arrival order.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.lock().calls.clone()
    }

    /// The model calls received so far (not a chat mock's title calls), in arrival order.
    pub fn model_calls(&self) -> Vec<Call> {
        self.of_kind(CallKind::Model)
    }

    fn of_kind(&self, kind: CallKind) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|call| call.kind == kind)
            .collect()
    }

    /// How many scripted answers no model call has taken yet.
    pub fn unused_answers(&self) -> usize {
        self.shared.lock().script.len()
    }

    /// How many connections a [`Answer::Hang`] holds open right now.
    pub fn hanging(&self) -> usize {
        self.server.hanging()
    }
}

/// What a mock keeps: its scripts and its log.
#[derive(Default)]
struct State {
    script: VecDeque<Answer>,
    titles: VecDeque<Answer>,
    calls: Vec<Call>,
}

/// The state both mocks share between the test and their connection threads.
#[derive(Clone, Default)]
pub struct Shared(Arc<Mutex<State>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panicking connection thread must not hide what was recorded before it.
        self.0.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Records `request` as a `kind` call and takes its answer: from the script for a model
    /// call, the title script for a title call (`None`: the default title), else none.
    /// Returns the answer and the label recorded.
    fn take(&self, request: &Request, kind: CallKind) -> Option<Answer> {
        let mut state = self.lock();
        let (answer, label) = match kind {
            CallKind::Model => match state.script.pop_front() {
                Some(answer) => {
                    let label = answer.label();
                    (Some(answer), label)
                }
                None => (None, "unscripted"),
            },
            CallKind::Title => match state.titles.pop_front() {
                Some(answer) => {
                    let label = answer.label();
                    (Some(answer), label)
                }
                None => (None, "title"),
            },
            CallKind::CountTokens => (None, "count_tokens"),
            CallKind::Models => (None, "models"),
            CallKind::Other => (None, "404"),
        };
        state.calls.push(Call {
            request: request.clone(),
            kind,
            answer: label,
        });
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(body: Value) -> Call {
        Call {
            request: Request {
                method: "POST".into(),
                path: "/v1/messages".into(),
                headers: Vec::new(),
                body: body.to_string().into_bytes(),
                at: std::time::Instant::now(),
            },
            kind: CallKind::Model,
            answer: "text",
        }
    }

    #[test]
    fn the_conversation_is_every_message_as_received_with_its_blocks_joined() {
        let call = call(json!({
            "system": [{ "type": "text", "text": "You are " }, { "type": "text", "text": "a mock." }],
            "messages": [
                { "role": "user", "content": [
                    { "type": "text", "text": "<reminder>\n" },
                    { "type": "text", "text": "say \"hi\" -v" },
                ] },
                { "role": "system", "content": "mid-conversation" },
                { "role": "assistant", "content": [
                    { "type": "thinking", "thinking": "hmm" },
                    { "type": "text", "text": "hello" },
                ] },
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "t", "content": "ran" },
                    { "type": "text", "text": "say \"hi\" -v" },
                ] },
            ],
        }));
        assert_eq!(
            call.conversation(),
            [
                ("user".to_string(), "<reminder>\nsay \"hi\" -v".to_string()),
                ("system".to_string(), "mid-conversation".to_string()),
                ("assistant".to_string(), "hello".to_string()),
                ("user".to_string(), "ransay \"hi\" -v".to_string()),
            ]
        );
        assert_eq!(call.blocks()[0].1, ["<reminder>\n", "say \"hi\" -v"]);
        assert_eq!(call.system(), "You are a mock.");
        assert_eq!(call.count("user", "say \"hi\" -v"), 2);
        assert_eq!(call.count("assistant", "say"), 0);
        assert_eq!(call.user_texts().len(), 2);
    }

    #[test]
    fn an_openai_system_prompt_is_read_from_the_messages() {
        let call = call(json!({ "messages": [
            { "role": "system", "content": "You are a title generator." },
            { "role": "user", "content": [{ "type": "text", "text": "name it" }] },
        ]}));
        assert_eq!(call.system(), "You are a title generator.");
        assert_eq!(call.user_texts(), ["name it"]);
    }
}
