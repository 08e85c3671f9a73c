//! The control protocol between the daemon and its clients (the CLI, the HTTP API, or any
//! program).
//!
//! JSON-RPC 2.0 over a Unix socket, one JSON object per line, at most [`MAX_LINE`] bytes a
//! line. A client starts with `initialize` (the version handshake), then calls methods; a
//! subscription streams `events.event` notifications until `events.unsubscribe` or the
//! connection closes. `docs/protocol.md` has an example of every method.
//!
//! This module holds the wire types only (pueue's split: protocol types here, the daemon in
//! `crate::daemon`, the client in `crate::client`); both sides share them, so they cannot
//! drift apart. This file: the framing (ids, requests, responses, errors and their codes,
//! limits) and the [`Method`] trait; each method is a unit struct implementing it, with its
//! params and result types, in its group's file: `status.rs` (initialize, status,
//! shutdown), `projects.rs`, `sessions.rs` (sessions, history), `prompts.rs` (send, cancel,
//! wait; the sender's [`ExecRecord`]), `drivers.rs`, `settings.rs`, `events.rs`
//! (subscriptions), `overview.rs` (`overview`, `execs.list`), `pauses.rs` (`pause`,
//! `resume`, `pause.list`), `schedules.rs` (`schedule.*`), `execs.rs` (`exec.start`,
//! `exec.end`: a client's own exec, recorded by the daemon). [`METHODS`], the list the
//! daemon gives in an unknown method's error, is made from the same table (`methods!`).
//! Results that are stored rows are sent as the
//! wire's own types (`projects::Project`, `sessions::Session`, `prompts::Prompt`, …), made
//! from the rows, with the rows' keys: version 1's JSON, unchanged.
//!
//! Params are named (an object). Params read field by field ([`Named`]) keep the daemon's
//! messages (`session is required`, `name must be a string, not a number`, `all has the
//! wrong type (a string)`); the others are serde's (`missing field `name``).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

pub mod approvals;
pub mod drivers;
pub mod events;
pub mod execs;
pub mod http;
pub mod overview;
pub mod pauses;
pub mod projects;
pub mod prompts;
pub mod schedules;
pub mod sessions;
pub mod settings;
pub mod slots;
pub mod status;

pub use approvals::*;
pub use drivers::*;
pub use events::*;
pub use execs::*;
pub use http::*;
pub use overview::*;
pub use pauses::*;
pub use projects::*;
pub use prompts::*;
pub use schedules::*;
pub use sessions::*;
pub use settings::*;
pub use status::*;

/// The protocol version this build speaks. A client with another version is refused at
/// `initialize` with [`code::VERSION_MISMATCH`].
pub const PROTOCOL_VERSION: u32 = 1;

/// The longest line either side accepts (1 MiB). A longer request is answered with
/// [`code::INVALID_REQUEST`] and the rest of the line is skipped.
pub const MAX_LINE: usize = 1 << 20;

/// Room a `prompt.send` request takes around its text (method, session, images, flags): a
/// prompt whose text, as a JSON string, fits in [`MAX_LINE`] less this fits in one line.
pub const PROMPT_ENVELOPE: usize = 4096;

/// Checks that a prompt's text fits in one request line; the error is one line that names
/// the limit. The CLI checks before it sends, and the library (`Corral::send`) refuses the
/// same texts, so that what one accepts the other can carry.
pub fn check_prompt_size(text: &str) -> Result<(), String> {
    let encoded = json_string_len(text);
    if encoded + PROMPT_ENVELOPE > MAX_LINE {
        return Err(format!(
            "the prompt is too long: {} bytes ({encoded} as JSON); a request line is at most \
             {MAX_LINE} bytes, so a prompt at most {} as JSON",
            text.len(),
            MAX_LINE - PROMPT_ENVELOPE
        ));
    }
    Ok(())
}

/// The length of `text` as a JSON string, quotes included, as serde_json writes it.
fn json_string_len(text: &str) -> usize {
    let escaped: usize = text
        .bytes()
        .map(|byte| match byte {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0x00..=0x1f => 6,
            _ => 1,
        })
        .sum();
    escaped + 2
}

/// Error codes: JSON-RPC's own, then corral's (−32000 … −32099, the server-error range).
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL: i64 = -32603;
    /// No project, session, prompt or setting by that selector.
    pub const NOT_FOUND: i64 = -32004;
    /// A selector that matches several things; `data.candidates` lists them.
    pub const AMBIGUOUS: i64 = -32005;
    /// The daemon cannot take this now (shutting down, store locked).
    pub const BUSY: i64 = -32006;
    /// The caller's driver claim was taken over; `data.driver` names the current driver.
    pub const SUPERSEDED: i64 = -32007;
    /// `initialize` with another protocol version, or a call before `initialize`.
    pub const VERSION_MISMATCH: i64 = -32008;
    /// The session has a live driver and the claim did not ask to take over.
    pub const CLAIMED: i64 = -32009;
    /// The request would widen what an agent may do, and came from inside a supervised run.
    pub const NOT_ALLOWED: i64 = -32010;
    /// The approval was answered already; the message names the first answer.
    pub const ANSWERED: i64 = -32012;
    /// The connection is not served: its peer is another uid (or its credentials cannot be
    /// read). Written once, with a null id, then the daemon closes the connection.
    pub const PEER_REFUSED: i64 = -32011;
}

/// A request's `id`, kept as the JSON text the client wrote, so that it comes back exactly as
/// sent: `18446744073709551617` stays that integer (a parsed `Value` would make it a float),
/// `"x"` stays that string, `1.50` stays `1.50`. JSON-RPC allows a string, a number or null;
/// [`Id::is_valid`] says whether an id is one of those (the daemon answers any other with
/// [`code::INVALID_REQUEST`] and a null id).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Id(Box<RawValue>);

impl Id {
    /// `null`: the id of an answer to a line whose id could not be read.
    pub fn null() -> Id {
        Id::from_text("null")
    }

    /// A numeric id.
    pub fn number(n: u64) -> Id {
        Id::from_text(&n.to_string())
    }

    fn from_text(text: &str) -> Id {
        Id(RawValue::from_string(text.to_string()).expect("a JSON literal"))
    }

    /// The id's JSON text, as the client wrote it.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// The id as an integer, when it is one that fits in a u64.
    pub fn as_u64(&self) -> Option<u64> {
        self.text().parse().ok()
    }

    pub fn is_null(&self) -> bool {
        self.text() == "null"
    }

    /// A string, a number or null (JSON-RPC 2.0's rule); not an object, array or boolean.
    pub fn is_valid(&self) -> bool {
        match self.text().as_bytes().first() {
            Some(b'-' | b'0'..=b'9' | b'n') => true,
            // A string must decode: one with a lone surrogate escape (`"\ud800"`) would come
            // back in an answer no JSON reader takes.
            Some(b'"') => serde_json::from_str::<String>(self.text()).is_ok(),
            _ => false,
        }
    }
}

impl From<Box<RawValue>> for Id {
    fn from(raw: Box<RawValue>) -> Id {
        Id(raw)
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.text() == other.text()
    }
}

impl Eq for Id {}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// A request (with an `id`, even `"id": null`) or a notification (no `id` member at all).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    pub jsonrpc: String,
    /// `None`: no `id` member, a notification. `"id": null` is `Some`: a request that gets
    /// an answer (with a null id), as JSON-RPC 2.0 says.
    #[serde(
        default,
        deserialize_with = "present_id",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<Id>,
    pub method: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

/// An `id` member that is there, even as `null` (`Option`'s own impl would read null as none).
fn present_id<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Id>, D::Error> {
    Id::deserialize(deserializer).map(Some)
}

impl Request {
    pub fn new(id: u64, method: &str, params: Value) -> Self {
        Request {
            jsonrpc: "2.0".into(),
            id: Some(Id::number(id)),
            method: method.into(),
            params,
        }
    }
}

/// An error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// The longest error message the daemon sends, in characters: a message quotes what it was
/// sent (a selector, a method name, a value), and a 100 KB input must not come back whole.
pub const MAX_MESSAGE: usize = 500;

/// An error message as it is sent: one line (control characters written as escapes, so that
/// a `\n` in the input cannot split it) and at most [`MAX_MESSAGE`] characters.
pub fn one_line_message(message: &str) -> String {
    let mut line = String::with_capacity(message.len().min(MAX_MESSAGE + 8));
    for (count, c) in message.chars().enumerate() {
        if count == MAX_MESSAGE {
            line.push_str(&format!("… ({} bytes in all)", message.len()));
            break;
        }
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
    }
    line
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: one_line_message(&message.into()),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RpcError {}

#[cfg(test)]
mod message_tests {
    use super::*;

    #[test]
    fn an_error_message_is_one_bounded_line() {
        let error = RpcError::new(-32601, "unknown method 'a\nb\r\t'");
        assert_eq!(error.message, "unknown method 'a\\nb\\r\\t'");
        let long = RpcError::new(
            -32602,
            format!("No session matches '{}'", "s".repeat(100_000)),
        );
        assert!(
            long.message.chars().count() < MAX_MESSAGE + 40,
            "{}",
            long.message.len()
        );
        assert!(
            long.message.ends_with("(100021 bytes in all)"),
            "{}",
            &long.message[480..]
        );
        let fine = "the prompt is empty";
        assert_eq!(RpcError::new(-32602, fine).message, fine);
    }

    #[test]
    fn a_string_id_must_decode() {
        let id = |text: &str| Id::from(RawValue::from_string(text.to_string()).unwrap());
        assert!(id(r#""ok""#).is_valid());
        assert!(id(r#""\u00e9""#).is_valid());
        assert!(!id(r#""\ud83e""#).is_valid(), "a lone surrogate");
        assert!(id("18446744073709551617").is_valid());
        assert!(!id("true").is_valid());
    }
}

/// A response: `result` or `error`, never both.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    pub jsonrpc: String,
    pub id: Id,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

impl Response {
    pub fn ok(id: Id, result: Value) -> Self {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: Some(result),
            error: None,
        }
    }

    pub fn err(id: Id, error: RpcError) -> Self {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: None,
            error: Some(error),
        }
    }

    pub fn from_result(id: Id, result: Result<Value, RpcError>) -> Self {
        match result {
            Ok(value) => Response::ok(id, value),
            Err(error) => Response::err(id, error),
        }
    }
}

/// A notification from the daemon (no `id`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Notification {
    pub jsonrpc: String,
    pub method: String,
    pub params: Value,
}

impl Notification {
    pub fn new(method: &str, params: Value) -> Self {
        Notification {
            jsonrpc: "2.0".into(),
            method: method.into(),
            params,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Methods: each one a unit struct with its params and result types.

/// A method of the protocol: its name on the wire, what it takes and what it answers. The
/// daemon decodes `Params` and encodes `Result` (`daemon::methods`), the client the other way
/// round (`Client::call`), so both use one definition.
pub trait Method {
    const NAME: &'static str;
    type Params: Serialize + DeserializeOwned;
    type Result: Serialize + DeserializeOwned;
}

/// Declares methods: `Name = "wire.name": Params => Result,` makes the unit struct `Name`
/// implementing [`Method`].
macro_rules! method {
    ($($(#[$doc:meta])* $name:ident = $wire:literal : $params:ty => $result:ty,)*) => {
        $(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy, Default)]
            pub struct $name;

            impl $crate::protocol::Method for $name {
                const NAME: &'static str = $wire;
                type Params = $params;
                type Result = $result;
            }
        )*
    };
}
pub(crate) use method;

/// The table of every method the daemon serves, in the order `docs/protocol.md` lists them:
/// [`METHODS`] is made from it, so the list cannot miss one that has a type.
macro_rules! methods {
    ($($method:ty),* $(,)?) => {
        /// Every method the daemon serves, for `docs/protocol.md`, the unknown-method error's
        /// `data.methods` and the HTTP API's `/describe`.
        pub const METHODS: &[&str] = &[$(<$method as Method>::NAME),*];
    };
}

methods![
    Initialize,
    Status,
    ProjectAdd,
    ProjectList,
    ProjectShow,
    ProjectSet,
    ProjectArchive,
    GroupSet,
    GroupList,
    GroupRemove,
    PauseWork,
    ResumeWork,
    PauseList,
    ScheduleAdd,
    ScheduleList,
    ScheduleShow,
    SchedulePause,
    ScheduleResume,
    ScheduleRemove,
    SessionNew,
    SessionList,
    SessionShow,
    SessionRename,
    SessionArchive,
    SessionDiff,
    SessionMerge,
    SessionRecreate,
    SessionSteer,
    SessionCompact,
    PromptSend,
    PromptCancel,
    PromptWait,
    PromptRetry,
    PromptEdit,
    History,
    EventsSubscribe,
    EventsUnsubscribe,
    SettingsGet,
    SettingsSet,
    SettingsList,
    DriverClaim,
    DriverRelease,
    DriverShow,
    Shutdown,
    Overview,
    ExecsList,
    ExecStart,
    ExecEnd,
    HttpLoginCode,
    ApprovalsList,
    ApprovalsAnswer,
];

/// The params of a method that takes none (any named params are ignored, as before).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoParams {}

/// Named params read one by one with the daemon's messages, for the params types whose
/// `Deserialize` is written by hand: a missing string is `NAME is required`, a string of
/// another type `NAME must be a string, not a number`, an optional value of the wrong type
/// `NAME has the wrong type (a string)` (never read as absent: `{"value": 12}` must not
/// unset a setting). Absent params read as `{}`.
pub struct Named(Map<String, Value>);

impl Named {
    pub fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Named, D::Error> {
        Ok(Named(
            Option::<Map<String, Value>>::deserialize(deserializer)?.unwrap_or_default(),
        ))
    }

    /// A required string.
    pub fn string<E: serde::de::Error>(&self, name: &str) -> Result<String, E> {
        match self.0.get(name) {
            Some(Value::String(text)) => Ok(text.clone()),
            None | Some(Value::Null) => Err(E::custom(format!("{name} is required"))),
            Some(other) => Err(E::custom(format!(
                "{name} must be a string, not {}",
                json_type(other)
            ))),
        }
    }

    /// An optional value: absent or null is `None`.
    pub fn optional<T: DeserializeOwned, E: serde::de::Error>(
        &self,
        name: &str,
    ) -> Result<Option<T>, E> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(given) => T::deserialize(given).map(Some).map_err(|_| {
                E::custom(format!("{name} has the wrong type ({})", json_type(given)))
            }),
        }
    }
}

/// The JSON type of a value, for error messages.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Writes `impl Deserialize` for a params struct read with [`Named`]: each field is
/// `field: string` (required) or `field: optional` (absent or null is `None`).
macro_rules! named_params {
    ($name:ident { $($field:ident : $how:ident),* $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let named = $crate::protocol::Named::read(deserializer)?;
                Ok($name { $($field: $crate::protocol::named_params!(@ named, $field, $how)),* })
            }
        }
    };
    (@ $named:ident, $field:ident, string) => { $named.string(stringify!($field))? };
    (@ $named:ident, $field:ident, optional) => { $named.optional(stringify!($field))? };
}
pub(crate) use named_params;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_is_measured_as_serde_json_writes_it() {
        for text in [
            "",
            "plain",
            "quote \" back \\ nl \n tab \t",
            "\u{1} \u{1f} é 🦀 \u{7f}",
        ] {
            let written = serde_json::to_string(text).unwrap().len();
            assert_eq!(json_string_len(text), written, "{text:?}");
        }
    }

    #[test]
    fn a_prompt_over_the_line_limit_is_refused_in_one_line_naming_it() {
        let fits = "x".repeat(MAX_LINE - PROMPT_ENVELOPE - 2);
        assert_eq!(check_prompt_size(&fits), Ok(()));
        let error = check_prompt_size(&format!("{fits}y")).unwrap_err();
        assert!(error.contains(&MAX_LINE.to_string()), "{error}");
        assert!(!error.contains('\n'));
        // Escapes count: 200,000 newlines are 400,000 bytes of JSON, plus the quotes.
        assert!(check_prompt_size(&"\n".repeat(MAX_LINE / 2)).is_err());
    }
}

#[cfg(test)]
mod wire_tests {
    //! The wire's rows have the store rows' keys and values: version 1's JSON, unchanged.

    use super::*;
    use crate::store::{drivers, processes, projects, prompts, runs, sessions};

    fn same<R: Serialize, W: Serialize>(row: &R, wire: &W) {
        assert_eq!(
            serde_json::to_value(row).unwrap(),
            serde_json::to_value(wire).unwrap()
        );
    }

    fn session() -> sessions::Session {
        sessions::Session {
            env: Default::default(),
            id: "ses".into(),
            project_id: Some("prj".into()),
            engine: crate::engine::EngineKind::Fake,
            model: None,
            reasoning_effort: Some("high".into()),
            thread_id: Some("thr".into()),
            resume_point: None,
            title: Some("fix".into()),
            title_source: Some("human".into()),
            status: crate::store::sessions::SessionStatus::Idle,
            task: None,
            wave_id: None,
            created_at: 1,
            archived_at: None,
            last_event_seq: 9,
            compacted_message_count: Some(3),
            compacted_character_count: None,
            compacted_at: None,
            worktree: Some(sessions::SessionWorktree {
                path: "/nonexistent/wt".into(),
                branch: "corral/fix-0badc0de".into(),
                base: "main".into(),
                base_commit: "abc".into(),
                state: sessions::WorktreeState::Removed,
            }),
            policy: Default::default(),
        }
    }

    fn prompt(id: &str, status: prompts::PromptStatus) -> prompts::Prompt {
        prompts::Prompt {
            id: id.into(),
            session_id: "ses".into(),
            text: "hi".into(),
            images: vec!["a.png".into()],
            read_only: true,
            status,
            attempts: 1,
            error: None,
            answer: Some("ok".into()),
            created_at: 2,
            started_at: Some(3),
            finished_at: None,
            claim: None,
            denied: 0,
            policy: Default::default(),
            after: vec!["p0".into()],
            after_any: true,
            due_at: Some(4),
        }
    }

    #[test]
    fn wire_rows_serialize_as_the_store_rows() {
        let project = projects::Project {
            id: "prj".into(),
            name: "web".into(),
            path: "/w".into(),
            engine: Some(crate::engine::EngineKind::Fake),
            model: None,
            full_access: true,
            kind: "local".into(),
            groups: vec!["g".into()],
            instructions: None,
            created_at: 1,
            archived_at: Some(2),
            keep_background: true,
            pause_on_failure: false,
            notify: None,
            env: Default::default(),
            isolation: projects::Isolation::Worktree,
            worktrees_dir: None,
            setup: Some("npm ci".into()),
            repo_root: Some("/w".into()),
            policy: Default::default(),
            agents_scope: Default::default(),
        };
        same(&project, &Project::from(&project));
        same(&session(), &Session::from(&session()));
        let p = prompt("prm", prompts::PromptStatus::Running);
        same(&p, &Prompt::from(&p));
        let run = runs::Run {
            id: "run".into(),
            prompt_id: "prm".into(),
            session_id: "ses".into(),
            attempt: 1,
            engine: crate::engine::EngineKind::Fake,
            argv: vec!["fake".into()],
            thread_id: None,
            exec_id: Some("exe".into()),
            pid: Some(7),
            pid_start: Some(8),
            pgid: Some(7),
            started_at: 4,
            ended_at: None,
            exit_code: Some(0),
            signal: None,
            status: crate::store::runs::RunStatus::Succeeded,
            failure_class: None,
            retry_decision: None,
            error: None,
            node_id: None,
        };
        same(&run, &Run::from(&run));
        let claim = drivers::DriverClaim {
            session_id: "ses".into(),
            exec_id: Some("exe".into()),
            last_exec_id: None,
            generation: 2,
            provider_generation: 0,
            claimed_at: Some(5),
            released_at: None,
        };
        same(&claim, &Claim::from(&claim));
        let kept = processes::KeptProcess {
            pid: 10,
            pid_start: 11,
            run_id: "run".into(),
            session_id: "ses".into(),
            project_id: None,
            command: "sleep 9".into(),
            kept_at: 12,
            node_id: Some("node".into()),
        };
        same(&kept, &KeptProcess::from(&kept));
        for found in [
            prompts::CancelFound::Dequeued {
                session_id: "ses".into(),
            },
            prompts::CancelFound::Running {
                session_id: "ses".into(),
            },
            prompts::CancelFound::Finished {
                status: prompts::PromptStatus::Done,
            },
        ] {
            same(&found, &CancelFound::from(&found));
        }
    }

    #[test]
    fn a_shown_session_adds_its_current_prompt_and_last_status() {
        use prompts::PromptStatus::*;
        let detail = |prompts: &[prompts::Prompt]| {
            let detail = SessionDetail::new(&session(), prompts);
            (detail.current_prompt_id, detail.last_status)
        };
        assert_eq!(detail(&[]), (None, None));
        let done = prompt("a", Done);
        let running = prompt("b", Running);
        let queued = prompt("c", Queued);
        assert_eq!(
            detail(&[done.clone(), running.clone(), queued.clone()]),
            (Some("b".into()), Some(Queued))
        );
        assert_eq!(
            detail(&[done.clone(), queued]),
            (Some("c".into()), Some(Queued))
        );
        assert_eq!(detail(&[done]), (None, Some(Done)));
        // The row's keys stay, beside the two new ones.
        let mut shown = serde_json::to_value(SessionDetail::new(&session(), &[running])).unwrap();
        let added = shown.as_object_mut().unwrap();
        assert_eq!(
            added.remove("current_prompt_id"),
            Some(serde_json::json!("b"))
        );
        assert_eq!(
            added.remove("last_status"),
            Some(serde_json::json!("running"))
        );
        assert_eq!(shown, serde_json::to_value(session()).unwrap());
    }
}
