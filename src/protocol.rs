//! The control protocol between the daemon and its clients (the CLI, or any program).
//!
//! JSON-RPC 2.0 over a Unix socket, one JSON object per line, at most [`MAX_LINE`] bytes a
//! line. A client starts with `initialize` (the version handshake), then calls methods; a
//! subscription streams `events.event` notifications until `events.unsubscribe` or the
//! connection closes. `docs/protocol.md` has an example of every method.
//!
//! This module only holds the wire types (pueue's split: protocol types here, the daemon in
//! `crate::daemon`, the client in `crate::client`); both sides share them, so they cannot
//! drift apart.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

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
// Method parameters (results are the model types of `crate::store`, or small objects).

/// `initialize`: the version handshake; also tells the daemon which exec the client is.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InitializeParams {
    pub protocol: u32,
    #[serde(default)]
    pub client: Option<String>,
    /// The client's exec id (the CLI's own exec row), used as the driver of what it sends.
    #[serde(default)]
    pub exec_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitializeResult {
    pub protocol: u32,
    pub corral_version: String,
    pub daemon_pid: u32,
    pub home: String,
}

/// `project.add`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProjectAddParams {
    pub name: String,
    pub path: String,
    #[serde(default)]
    pub engine: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub full_access: bool,
    #[serde(default)]
    pub remote: bool,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub instructions: Option<String>,
    /// Background processes its engines leave outlive their runs (a widening).
    #[serde(default)]
    pub keep_background: bool,
}

/// `project.set`: only the fields given change.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProjectSetParams {
    pub project: String,
    #[serde(default)]
    pub engine: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub full_access: Option<bool>,
    #[serde(default)]
    pub remote: Option<bool>,
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    #[serde(default)]
    pub instructions: Option<String>,
    /// Turning it on is a widening; off is always allowed.
    #[serde(default)]
    pub keep_background: Option<bool>,
}

/// `session.new`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SessionNewParams {
    pub project: String,
    #[serde(default)]
    pub engine: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub reasoning_effort: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub wave: Option<String>,
}

/// `prompt.send`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SendParams {
    pub session: String,
    pub text: String,
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default)]
    pub read_only: bool,
    /// The driver claim the sender holds (`send --wait`, `attach`): refused with
    /// [`code::SUPERSEDED`] once another driver took the session over.
    #[serde(default)]
    pub generation: Option<i64>,
    /// The caller's own exec, recorded by the daemon (a compatible addition; a daemon whose
    /// `initialize` answers `records_execs: true` honours it): its start before the prompt is
    /// queued, its end with this request's answer (exit 0 for a prompt, 1 for an error).
    /// Read before the other params, so that a refused send is recorded too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecRecord>,
}

/// The longest id (an exec's, a trace's, a session's) an [`ExecRecord`] carries.
pub const MAX_EXEC_ID: usize = 256;

/// The longest path (`cwd`, `repo`) an [`ExecRecord`] carries (Linux's `PATH_MAX`).
pub const MAX_EXEC_PATH: usize = 4096;

/// A `corral` process as an exec row, sent by the process itself for the daemon to record
/// (`prompt.send`'s `exec`): what `cli::invocation` would write into the store, field for
/// field, so that the row is the same whoever writes it. The daemon records nothing a peer
/// of the same uid could not record by running `corral` itself; it checks sizes and that the
/// pid is the peer's, and that the id is the one the connection's `initialize` named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRecord {
    pub id: String,
    pub trace_id: String,
    #[serde(default)]
    pub parent_exec_id: Option<String>,
    #[serde(default)]
    pub caller_session_id: Option<String>,
    pub argv: Vec<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub repo: Option<String>,
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/PID/stat`), which tells the
    /// process from a later one with the same pid.
    #[serde(default)]
    pub pid_start: Option<u64>,
    /// Milliseconds since the epoch, taken by the process when it started.
    pub started_at: i64,
}

impl ExecRecord {
    /// Checks the record's sizes and fields; the client checks before it sends (a record that
    /// fails here is written by the client itself), the daemon before it writes.
    pub fn check(&self) -> Result<(), String> {
        let id = |name: &str, value: &str| {
            if value.is_empty() || value.len() > MAX_EXEC_ID {
                Err(format!("exec.{name} must be 1 to {MAX_EXEC_ID} bytes"))
            } else {
                Ok(())
            }
        };
        id("id", &self.id)?;
        id("trace_id", &self.trace_id)?;
        if let Some(parent) = &self.parent_exec_id {
            id("parent_exec_id", parent)?;
        }
        if let Some(session) = &self.caller_session_id {
            id("caller_session_id", session)?;
        }
        for (name, path) in [("cwd", &self.cwd), ("repo", &self.repo)] {
            if path.as_ref().is_some_and(|path| path.len() > MAX_EXEC_PATH) {
                return Err(format!("exec.{name} is at most {MAX_EXEC_PATH} bytes"));
            }
        }
        if self.argv.is_empty() {
            return Err("exec.argv must name the program".into());
        }
        if self.pid == 0 || self.pid > i32::MAX as u32 {
            return Err("exec.pid must be a process id".into());
        }
        if self.started_at <= 0 {
            return Err("exec.started_at must be milliseconds since the epoch".into());
        }
        Ok(())
    }
}

/// `events.subscribe`: replay stored events after `after`, then stream live ones.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SubscribeParams {
    pub session: String,
    #[serde(default)]
    pub after: i64,
}

/// `driver.claim`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClaimParams {
    pub session: String,
    #[serde(default)]
    pub take_over: bool,
}

/// `driver.release`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReleaseParams {
    pub session: String,
    pub generation: i64,
}

/// Every method the daemon serves, for `docs/protocol.md` and the unknown-method error.
pub const METHODS: &[&str] = &[
    "initialize",
    "status",
    "project.add",
    "project.list",
    "project.show",
    "project.set",
    "project.archive",
    "group.set",
    "session.new",
    "session.list",
    "session.show",
    "session.rename",
    "session.archive",
    "session.steer",
    "session.compact",
    "prompt.send",
    "prompt.cancel",
    "prompt.wait",
    "history",
    "events.subscribe",
    "events.unsubscribe",
    "settings.get",
    "settings.set",
    "settings.list",
    "driver.claim",
    "driver.release",
    "driver.show",
    "shutdown",
];

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
