//! The daemon's methods: each request becomes calls on the [`Corral`] handle.
//!
//! One entry point, [`call`], for every transport (the socket's `server.rs`, the HTTP API):
//! a [`Caller`] says who asks (the daemon's state, the peer's pid, its exec). The dispatcher
//! ([`answer`]) maps a method to its group's function, one file per group: `projects.rs`
//! (projects, groups), `sessions.rs` (sessions, history, steer, compact), `prompts.rs`
//! (send, with the sender's exec recorded, cancel, wait), `drivers.rs` (driver claims),
//! `settings.rs`, `status.rs` (status, shutdown). This file holds what they share: param
//! checks, selectors, the refusal of widening requests from supervised runs, and
//! [`inspect`], the read-only methods the CLI also answers from the store (`cli::local`).
//!
//! Selectors (`project`, `session`, `prompt` params) accept an exact id, an exact name or
//! title, or a unique id prefix; a selector that matches several is an error with code
//! `AMBIGUOUS` whose `data.candidates` lists them.

mod drivers;
mod projects;
mod prompts;
mod sessions;
mod settings;
mod status;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use rusqlite::Connection as Store;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::origin;
use super::server::DaemonContext;
use crate::events::EventKind;
use crate::protocol::{code, RpcError, METHODS};
use crate::store::select::Unselected;
use crate::store::work::{self, Project, Session};
use crate::{Corral, CorralError};

pub use status::{kept_alive, STATUS_WAITERS};

/// How a request reached the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The Unix socket (`server.rs`).
    Socket,
    /// The HTTP API (loopback TCP).
    Http,
}

/// Who asks: what a method may know of its caller, whatever the transport. The socket keeps
/// one per connection (`exec_id` is set by `initialize`); HTTP makes one per request.
pub struct Caller {
    pub context: Rc<DaemonContext>,
    /// The peer's pid (the socket's `SO_PEERCRED`, read at accept; over HTTP the process
    /// behind the loopback TCP peer): the process that connected, which may have exited since.
    pub peer_pid: Option<i32>,
    /// The client's exec (the driver of what it sends), from `initialize`.
    pub exec_id: RefCell<Option<String>>,
    /// Whether a `prompt.send` of this caller carried the exec for the daemon to record (an
    /// exec is recorded once).
    pub exec_recorded: Cell<bool>,
    pub transport: Transport,
}

impl Caller {
    pub fn new(context: Rc<DaemonContext>, peer_pid: Option<i32>, transport: Transport) -> Self {
        Caller {
            context,
            peer_pid,
            exec_id: RefCell::new(None),
            exec_recorded: Cell::new(false),
            transport,
        }
    }

    fn corral(&self) -> &Corral {
        &self.context.corral
    }
}

impl From<CorralError> for RpcError {
    fn from(error: CorralError) -> Self {
        let code = match &error {
            CorralError::Superseded(_) => code::SUPERSEDED,
            CorralError::NotFound(_) => code::NOT_FOUND,
            CorralError::Invalid(_) => code::INVALID_PARAMS,
            CorralError::Store(_) => code::INTERNAL,
            CorralError::Locked(_) => code::BUSY,
        };
        RpcError::new(code, error.to_string())
    }
}

/// Every method but subscriptions (`server.rs`: they stream) and `initialize` (the
/// transport's handshake).
pub async fn call(caller: &Caller, method: &str, params: &Value) -> Result<Value, RpcError> {
    if method == "prompt.send" {
        if let Some(record) = prompts::exec_to_record(caller, params)? {
            return prompts::send_recording(caller, params, record).await;
        }
    }
    answer(caller, method, params).await
}

/// The dispatcher: the read-only methods on a reader ([`inspect`]), the others to their
/// group's function.
async fn answer(caller: &Caller, method: &str, params: &Value) -> Result<Value, RpcError> {
    check_named(params)?;
    refuse_widening_from_a_run(caller, method, params).await?;
    if let Some(answer) = caller
        .corral()
        .read(|c| Ok(inspect(c, method, params)))
        .map_err(store_error)?
    {
        return answer;
    }
    match method {
        "status" => status::status(caller, params).await,
        "shutdown" => status::shutdown(caller),
        "project.add" => projects::add(caller, params).await,
        "project.set" => projects::set(caller, params, false).await,
        "project.archive" => projects::set(caller, params, true).await,
        "group.set" => projects::group_set(caller, params).await,
        "session.new" => sessions::new(caller, params).await,
        "session.rename" => sessions::change(caller, params, false).await,
        "session.archive" => sessions::change(caller, params, true).await,
        "session.steer" => sessions::steer(caller, params).await,
        "session.compact" => sessions::compact(caller, params).await,
        "prompt.send" => prompts::send(caller, params).await,
        "prompt.cancel" => prompts::cancel(caller, params).await,
        "prompt.wait" => prompts::wait(caller, params).await,
        "settings.set" => settings::set(caller, params).await,
        "driver.claim" => drivers::claim(caller, params).await,
        "driver.release" => drivers::release(caller, params).await,
        "driver.show" => drivers::show(caller, params),
        other => Err(unknown_method(other)),
    }
}

fn unknown_method(method: &str) -> RpcError {
    RpcError::new(code::METHOD_NOT_FOUND, format!("unknown method '{method}'"))
        .with_data(json!({ "methods": METHODS }))
}

/// The methods that only read the store, answered on one connection: the daemon serves them
/// on a reader of its pool, and the CLI on its own read-only connection when no daemon runs
/// (`cli::local`), so both give the same results and check params alike. `None`: `method`
/// is not one of them.
pub fn inspect(c: &Store, method: &str, params: &Value) -> Option<Result<Value, RpcError>> {
    Some(match method {
        "project.list" => projects::list(c, params),
        "project.show" => projects::show(c, params),
        "session.list" => sessions::list(c, params),
        "session.show" => sessions::show(c, params),
        "history" => sessions::history(c, params),
        "settings.get" => settings::get(c, params),
        "settings.list" => settings::list(c),
        _ => return None,
    })
}

fn params<T: DeserializeOwned>(value: &Value) -> Result<T, RpcError> {
    let value = if value.is_null() {
        json!({})
    } else {
        value.clone()
    };
    serde_json::from_value(value)
        .map_err(|error| RpcError::new(code::INVALID_PARAMS, error.to_string()))
}

fn string_param<'a>(value: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    match value.get(name) {
        Some(Value::String(text)) => Ok(text),
        None | Some(Value::Null) => Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("{name} is required"),
        )),
        Some(other) => Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("{name} must be a string, not {}", json_type(other)),
        )),
    }
}

/// An optional param: absent or null is `None`; a value of another type is refused (never
/// read as absent: `{"value": 12}` must not unset a setting).
fn optional<T: DeserializeOwned>(value: &Value, name: &str) -> Result<Option<T>, RpcError> {
    match value.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(given) => serde_json::from_value(given.clone())
            .map(Some)
            .map_err(|_| {
                RpcError::new(
                    code::INVALID_PARAMS,
                    format!("{name} has the wrong type ({})", json_type(given)),
                )
            }),
    }
}

/// The JSON type of a value, for error messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Params are named: an object, or absent. Positional (array) params are refused, whatever
/// the method, as is any other JSON value.
fn check_named(params: &Value) -> Result<(), RpcError> {
    match params {
        Value::Object(_) | Value::Null => Ok(()),
        other => Err(RpcError::new(
            code::INVALID_PARAMS,
            format!(
                "params must be an object of named params, not {} (positional params are not supported)",
                json_type(other)
            ),
        )),
    }
}

/// The longest title a person may give a session, in characters (a generated one is cut at
/// 120).
pub const MAX_TITLE: usize = 500;

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|error| RpcError::new(code::INTERNAL, error.to_string()))
}

fn store_error(error: CorralError) -> RpcError {
    error.into()
}

/// A person's title: not empty, at most [`MAX_TITLE`] characters.
fn check_title(title: &str) -> Result<(), RpcError> {
    if title.is_empty() {
        return Err(RpcError::new(code::INVALID_PARAMS, "the title is empty"));
    }
    let length = title.chars().count();
    if length > MAX_TITLE {
        return Err(RpcError::new(
            code::INVALID_PARAMS,
            format!("the title is {length} characters; at most {MAX_TITLE}"),
        ));
    }
    Ok(())
}

/// Privilege stays with people: a request that would widen what an agent may do is refused
/// when it comes from inside a supervised run (`origin::find`), and the attempt is recorded
/// as an event of the run's session.
async fn refuse_widening_from_a_run(
    caller: &Caller,
    method: &str,
    params_value: &Value,
) -> Result<(), RpcError> {
    let Some(what) = origin::widening(method, params_value) else {
        return Ok(());
    };
    let Some(peer) = caller.peer_pid else {
        return Ok(());
    };
    let corral = caller.corral();
    let runs = corral.live_runs().await;
    let Some(origin) = origin::find(peer, &runs) else {
        return Ok(());
    };
    let session = origin
        .session_id
        .clone()
        .unwrap_or_else(|| origin.run_id.clone());
    tracing::warn!(method, what, peer, run = %origin.run_id, found_by = origin.found_by, transport = ?caller.transport, "refused a widening request from a supervised run");
    if let Some(session_id) = &origin.session_id {
        // Waits out a locked store (the refusal is told after its record); the request is
        // refused even when the record cannot be made.
        let recorded = corral
            .record_event(
                session_id,
                EventKind::RequestRefused,
                json!({
                    "method": method,
                    "what": what,
                    "run_id": origin.run_id,
                    "found_by": origin.found_by,
                    "peer_pid": peer,
                }),
            )
            .await;
        if let Err(error) = recorded {
            tracing::error!(%error, session = session_id, "the refusal was not recorded");
        }
    }
    Err(RpcError::new(
        code::NOT_ALLOWED,
        format!("not allowed from inside a supervised run (session {session}): {what}"),
    )
    .with_data(json!({ "run_id": origin.run_id, "found_by": origin.found_by })))
}

/// A selector's failure with the protocol's error codes (the CLI's direct reads of the store
/// answer the same, `cli::local`).
impl From<Unselected> for RpcError {
    fn from(error: Unselected) -> Self {
        let message = error.to_string();
        match error {
            Unselected::Empty { .. } => RpcError::new(code::INVALID_PARAMS, message),
            Unselected::None { .. } => RpcError::new(code::NOT_FOUND, message),
            Unselected::Ambiguous { candidates, .. } => RpcError::new(code::AMBIGUOUS, message)
                .with_data(json!({ "candidates": candidates })),
        }
    }
}

fn select<T>(
    kind: &'static str,
    selector: &str,
    items: Vec<T>,
    id: impl Fn(&T) -> &str,
    name: impl Fn(&T) -> Option<&str>,
) -> Result<T, RpcError> {
    Ok(crate::store::select::select(
        kind, selector, items, id, name,
    )?)
}

pub fn resolve_project(corral: &Corral, selector: &str) -> Result<Project, RpcError> {
    corral
        .read(|c| Ok(project_of(c, selector)))
        .map_err(store_error)?
}

pub fn resolve_session(corral: &Corral, selector: &str) -> Result<Session, RpcError> {
    corral
        .read(|c| Ok(session_of(c, selector)))
        .map_err(store_error)?
}

/// The project `selector` names, read on `c`.
fn project_of(c: &Store, selector: &str) -> Result<Project, RpcError> {
    // An exact id (what clients send) wins anyway: one indexed row, not every project.
    if let Some(project) = read(work::project(c, selector.trim()))? {
        return Ok(project);
    }
    let projects = read(work::projects(c))?;
    select("project", selector, projects, |p| &p.id, |p| Some(&p.name))
}

/// The session `selector` names, read on `c`.
fn session_of(c: &Store, selector: &str) -> Result<Session, RpcError> {
    // An exact id wins anyway: one indexed row, not every session (issue 11: a prompt sent
    // to one of 2,000 sessions read all 2,000).
    if let Some(session) = read(work::session(c, selector.trim()))? {
        return Ok(session);
    }
    let sessions = read(work::sessions(c))?;
    select(
        "session",
        selector,
        sessions,
        |s| &s.id,
        |s| s.title.as_deref(),
    )
}

fn read<T>(result: rusqlite::Result<T>) -> Result<T, RpcError> {
    result.map_err(|error| RpcError::new(code::INTERNAL, format!("store: {error}")))
}
