//! The daemon's methods: each request becomes calls on the [`Corral`] handle.
//!
//! Selectors (`project`, `session`, `prompt` params) accept an exact id, an exact name or
//! title, or a unique id prefix; a selector that matches several is an error with code
//! `AMBIGUOUS` whose `data.candidates` lists them.

use std::rc::Rc;

use rusqlite::Connection as Store;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::origin;
use super::server::Connection;
use crate::actors::ledger::{
    ChangeProject, ChangeSession, ClaimDriver, CompleteExec, RecordExec, ReleaseDriver, WaveNamed,
};
use crate::events::EventKind;
use crate::protocol::{
    code, ClaimParams, ExecRecord, ProjectAddParams, ProjectSetParams, ReleaseParams, RpcError,
    SendParams, SessionNewParams, METHODS,
};
use crate::store::exec::{ExecCompletion, NewExec, Outcome};
use crate::store::select::Unselected;
use crate::store::settings::{self, KNOWN};
use crate::store::work::{
    self, ClaimRefused, NewProject, NewPrompt, NewSession, Project, Prompt, Session,
};
use crate::{Corral, CorralError};

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
    connection: &Rc<Connection>,
    method: &str,
    params_value: &Value,
) -> Result<(), RpcError> {
    let Some(what) = origin::widening(method, params_value) else {
        return Ok(());
    };
    let Some(peer) = connection.peer_pid else {
        return Ok(());
    };
    let corral = &connection.context.corral;
    let runs = corral.live_runs().await;
    let Some(origin) = origin::find(peer, &runs) else {
        return Ok(());
    };
    let session = origin
        .session_id
        .clone()
        .unwrap_or_else(|| origin.run_id.clone());
    tracing::warn!(method, what, peer, run = %origin.run_id, found_by = origin.found_by, "refused a widening request from a supervised run");
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

/// The settings stored now, by name.
fn stored_settings(c: &Store) -> rusqlite::Result<Vec<(String, String)>> {
    let mut statement = c.prepare("SELECT name, value FROM settings ORDER BY name")?;
    let rows = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect();
    rows
}

/// How many slot waiters `status` lists (with their blockers) unless its `waiters` param
/// says otherwise; `slots.waiting_count` gives them all.
pub const STATUS_WAITERS: usize = 20;

/// What projects with `keep_background` kept after their runs and still lives: `status`
/// lists them, from the daemon and from the store alike (`cli::local`).
pub fn kept_alive(c: &Store) -> rusqlite::Result<Vec<work::KeptProcess>> {
    let kept = work::kept_processes(c)?;
    Ok(kept
        .into_iter()
        .filter(|kept| crate::process::is_alive(kept.pid as u32, Some(kept.pid_start as u64)))
        .collect())
}

/// The methods that only read the store, answered on one connection: the daemon serves them
/// on a reader of its pool, and the CLI on its own read-only connection when no daemon runs
/// (`cli::local`), so both give the same results and check params alike. `None`: `method`
/// is not one of them.
pub fn inspect(c: &Store, method: &str, params: &Value) -> Option<Result<Value, RpcError>> {
    Some(match method {
        "project.list" => project_list(c, params),
        "project.show" => {
            string_param(params, "project").and_then(|selector| to_value(&project_of(c, selector)?))
        }
        "session.list" => session_list(c, params),
        "session.show" => session_show(c, params),
        "history" => history(c, params),
        "settings.get" => settings_get(c, params),
        "settings.list" => settings_list(c),
        _ => return None,
    })
}

fn project_list(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let all = optional::<bool>(params, "all")?.unwrap_or(false);
    let projects: Vec<Project> = read(work::projects(c))?
        .into_iter()
        .filter(|p| all || p.archived_at.is_none())
        .collect();
    to_value(&projects)
}

fn session_list(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let all = optional::<bool>(params, "all")?.unwrap_or(false);
    let project = match optional::<String>(params, "project")? {
        Some(selector) => Some(project_of(c, &selector)?.id),
        None => None,
    };
    let sessions: Vec<Session> = read(work::sessions(c))?
        .into_iter()
        .filter(|s| all || s.archived_at.is_none())
        .filter(|s| project.is_none() || s.project_id == project)
        .collect();
    to_value(&sessions)
}

fn session_show(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let session = session_of(c, string_param(params, "session")?)?;
    let prompts = read(work::prompts_of(c, &session.id))?;
    let driver = read(work::driver_claim(c, &session.id))?;
    Ok(json!({ "session": session, "prompts": prompts, "driver": driver }))
}

fn history(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let session = session_of(c, string_param(params, "session")?)?;
    let prompts = read(work::prompts_of(c, &session.id))?;
    let runs = read(work::runs_of_session(c, &session.id))?;
    Ok(json!({ "session": session, "prompts": prompts, "runs": runs }))
}

fn settings_get(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let name = string_param(params, "name")?;
    let default = settings::default_of(name)
        .ok_or_else(|| RpcError::new(code::NOT_FOUND, format!("unknown setting '{name}'")))?;
    let stored = settings::get(c, name);
    Ok(json!({ "name": name, "value": stored, "default": default }))
}

fn settings_list(c: &Store) -> Result<Value, RpcError> {
    let stored = read(stored_settings(c))?;
    let known: Vec<Value> = KNOWN
        .iter()
        .map(|k| json!({ "name": k.name, "default": k.default, "meaning": k.meaning }))
        .collect();
    let stored: Vec<Value> = stored
        .into_iter()
        .map(|(n, v)| json!({ "name": n, "value": v }))
        .collect();
    Ok(json!({ "known": known, "stored": stored }))
}

fn resolve_prompt(corral: &Corral, selector: &str) -> Result<Prompt, RpcError> {
    let selector = selector.trim();
    let found = corral
        .read(|c| {
            let mut statement = c.prepare(
                "SELECT id FROM prompts WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT 11",
            )?;
            let ids = statement
                .query_map(
                    rusqlite::params![selector, format!("{selector}\u{7f}")],
                    |row| row.get::<_, String>(0),
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(ids)
        })
        .map_err(store_error)?;
    let id = select("prompt", selector, found, |id| id.as_str(), |_| None)?;
    corral
        .read(|c| work::prompt(c, &id))
        .map_err(store_error)?
        .ok_or_else(|| RpcError::new(code::NOT_FOUND, format!("No prompt matches '{selector}'")))
}

/// Whether an exec (a driver) still runs: not completed, and its process alive.
fn exec_is_live(home: &std::path::Path, exec_id: &str) -> bool {
    let Ok(connection) = crate::store::open_reader(&crate::store::store_path(home)) else {
        return false;
    };
    let row: Option<(Option<i64>, Option<i64>, Option<i64>)> = connection
        .query_row(
            "SELECT pid, pid_start, completed_at FROM execs WHERE id = ?1",
            [exec_id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .ok();
    match row {
        Some((Some(pid), start, None)) => {
            crate::process::is_alive(pid as u32, start.map(|s| s as u64))
        }
        _ => false,
    }
}

pub async fn call(
    connection: &Rc<Connection>,
    method: &str,
    params_value: &Value,
) -> Result<Value, RpcError> {
    if method == "prompt.send" {
        if let Some(record) = exec_to_record(connection, params_value)? {
            return send_recording(connection, params_value, record).await;
        }
    }
    answer(connection, method, params_value).await
}

/// The `exec` a `prompt.send` asks the daemon to record, checked before anything else (a
/// refused one is not recorded, and the error says nothing of it: the client records it).
fn exec_to_record(connection: &Connection, params: &Value) -> Result<Option<ExecRecord>, RpcError> {
    let Some(value) = params.get("exec").filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    let invalid = |message: String| RpcError::new(code::INVALID_PARAMS, message);
    let record: ExecRecord =
        serde_json::from_value(value.clone()).map_err(|error| invalid(format!("exec: {error}")))?;
    record.check().map_err(invalid)?;
    // The exec the connection is (`initialize`'s `exec_id`), run by the process connected.
    if connection.exec_id.borrow().as_deref() != Some(record.id.as_str()) {
        return Err(invalid(
            "exec.id must be the exec_id this connection's initialize named".into(),
        ));
    }
    if let Some(peer) = connection.peer_pid {
        if i64::from(peer) != i64::from(record.pid) {
            return Err(invalid(format!(
                "exec.pid must be the connected process's ({peer})"
            )));
        }
    }
    if connection.exec_recorded.replace(true) {
        return Err(invalid(
            "this connection's exec was recorded already".into(),
        ));
    }
    Ok(Some(record))
}

/// `prompt.send` with the caller's exec: its start is handed to the ledger before the prompt
/// (so it commits before it, or in the same batch: no queued prompt without its sender's
/// row), its end is committed before the answer (exit 0 with a prompt, 1 with an error), so
/// that the client exits knowing its row is complete. An error answer whose exec was recorded
/// says so (`data.exec_recorded`); one that does not was not recorded.
async fn send_recording(
    connection: &Rc<Connection>,
    params_value: &Value,
    record: ExecRecord,
) -> Result<Value, RpcError> {
    let corral = &connection.context.corral;
    let id = record.id.clone();
    let start = corral.write(RecordExec(NewExec::from_record(record, None)));
    let (started, answered) = tokio::join!(start, answer(connection, "prompt.send", params_value));
    if let Err(error) = started {
        tracing::warn!(%error, exec = id, "a client's exec was not recorded");
        return Err(match answered {
            Ok(prompt) => RpcError::new(
                code::BUSY,
                format!(
                    "prompt {} is queued, but exec {id} could not be recorded: {error}",
                    prompt.get("id").and_then(Value::as_str).unwrap_or("-")
                ),
            ),
            Err(refused) => refused,
        });
    }
    let exit_code = if answered.is_ok() { 0 } else { 1 };
    let completion = ExecCompletion {
        completed_at: crate::store::now_ms(),
        exit_code,
        outcome: Outcome::of_exit_code(exit_code),
        signal: None,
    };
    if let Err(error) = corral
        .write(CompleteExec {
            id: id.clone(),
            completion,
        })
        .await
    {
        // Left open: `monitor prune` closes it as lost once its process is gone.
        tracing::warn!(%error, exec = id, "a client's exec end was not recorded");
    }
    answered.map_err(|mut refused| {
        let mut data = match refused.data.take() {
            Some(Value::Object(data)) => data,
            Some(other) => serde_json::Map::from_iter([("data".to_string(), other)]),
            None => serde_json::Map::new(),
        };
        data.insert("exec_recorded".into(), Value::Bool(true));
        refused.data = Some(Value::Object(data));
        refused
    })
}

/// Every method but subscriptions (`server.rs`) and the exec-recording `prompt.send`.
async fn answer(
    connection: &Rc<Connection>,
    method: &str,
    params_value: &Value,
) -> Result<Value, RpcError> {
    let context = &connection.context;
    let corral = &context.corral;
    check_named(params_value)?;
    refuse_widening_from_a_run(connection, method, params_value).await?;
    if let Some(answer) = corral
        .read(|c| Ok(inspect(c, method, params_value)))
        .map_err(store_error)?
    {
        return answer;
    }
    match method {
        "status" => {
            let waiters = optional::<usize>(params_value, "waiters")?.unwrap_or(STATUS_WAITERS);
            let sessions = corral.read(work::session_count).map_err(store_error)?;
            // Both kept as counts: the cost of `status` does not grow with the backlog.
            let working = corral.working().await;
            let slots = corral.slot_summary(waiters).await;
            Ok(json!({
                "daemon": {
                    "pid": std::process::id(),
                    "version": env!("CARGO_PKG_VERSION"),
                    "home": context.home.to_string_lossy(),
                    "shutting_down": context.is_shutting_down(),
                },
                "sessions": sessions,
                "working": working,
                "slots": slots,
                "app_servers": corral.app_servers().await,
                "kept": corral.read(kept_alive).map_err(store_error)?,
                // As in the store's answer with no daemon (`cli::local`): the same keys.
                "home": context.home.to_string_lossy(),
            }))
        }
        "project.add" => {
            let p: ProjectAddParams = params(params_value)?;
            let project = corral
                .add_project(NewProject {
                    name: p.name,
                    path: p.path,
                    engine: p.engine,
                    model: p.model,
                    full_access: p.full_access,
                    remote: p.remote,
                    groups: p.groups,
                    instructions: p.instructions,
                    keep_background: p.keep_background,
                })
                .await?;
            to_value(&project)
        }
        "project.set" | "project.archive" => {
            let p: ProjectSetParams = params(params_value)?;
            let project = resolve_project(corral, &p.project)?;
            if let Some(engine) = &p.engine {
                engine
                    .parse::<crate::engine::EngineKind>()
                    .map_err(|error| RpcError::new(code::INVALID_PARAMS, error))?;
            }
            let change = work::ProjectChange {
                engine: p.engine,
                model: p.model,
                full_access: p.full_access,
                remote: p.remote,
                groups: p.groups,
                instructions: p.instructions,
                keep_background: p.keep_background,
                archive: method == "project.archive",
            };
            let changed = corral
                .write(ChangeProject {
                    id: project.id,
                    change,
                })
                .await?
                .ok_or_else(|| RpcError::new(code::NOT_FOUND, "the project is gone"))?;
            to_value(&changed)
        }
        "group.set" => {
            let name = string_param(params_value, "name")?;
            let locking = optional::<bool>(params_value, "locking")?.unwrap_or(true);
            corral.set_group_locking(name, locking).await?;
            Ok(json!({ "name": name, "locking": locking }))
        }
        "session.new" => {
            let p: SessionNewParams = params(params_value)?;
            if let Some(title) = &p.title {
                check_title(title.trim())?;
            }
            let project = resolve_project(corral, &p.project)?;
            let wave_id = match &p.wave {
                Some(name) => {
                    let repo = crate::repo::toplevel_text(std::path::Path::new(&project.path));
                    Some(
                        corral
                            .write(WaveNamed {
                                name: name.clone(),
                                repo,
                            })
                            .await?,
                    )
                }
                None => None,
            };
            let session = corral
                .open_session(NewSession {
                    project_id: project.id,
                    engine: p.engine.unwrap_or_default(),
                    model: p.model,
                    reasoning_effort: p.reasoning_effort,
                    title: p.title,
                    task: p.task,
                    wave_id,
                })
                .await?;
            to_value(&session)
        }
        "session.rename" | "session.archive" => {
            let session = resolve_session(corral, string_param(params_value, "session")?)?;
            let title = if method == "session.rename" {
                let title = string_param(params_value, "title")?.trim();
                check_title(title)?;
                Some(title.to_string())
            } else {
                None
            };
            let changed = corral
                .write(ChangeSession {
                    id: session.id,
                    title,
                    archive: method == "session.archive",
                })
                .await?
                .ok_or_else(|| RpcError::new(code::NOT_FOUND, "the session is gone"))?;
            to_value(&changed)
        }
        "prompt.send" => {
            if context.is_shutting_down() {
                return Err(RpcError::new(code::BUSY, "the daemon is shutting down"));
            }
            let p: SendParams = params(params_value)?;
            let session = resolve_session(corral, &p.session)?;
            let sender = connection.exec_id.borrow().clone();
            let enqueued = corral
                .send(NewPrompt {
                    session_id: session.id,
                    text: p.text,
                    images: p.images,
                    read_only: p.read_only,
                    sender_exec_id: sender,
                    // Checked in the enqueue's own transaction: a take-over cannot slip in
                    // between the check and the queueing.
                    driver_generation: p.generation,
                })
                .await;
            match enqueued {
                Ok(enqueued) => to_value(&enqueued.prompt),
                Err(CorralError::Superseded(claim)) => {
                    let by = match (&claim.exec_id, &claim.last_exec_id) {
                        (Some(exec), _) => format!("superseded by exec {exec}"),
                        (None, Some(last)) => format!("superseded by exec {last} (since released)"),
                        (None, None) => format!(
                            "superseded: the driver claim is at generation {}",
                            claim.generation
                        ),
                    };
                    Err(RpcError::new(code::SUPERSEDED, by).with_data(json!({ "driver": claim })))
                }
                Err(error) => Err(error.into()),
            }
        }
        "prompt.cancel" => {
            let target = string_param(params_value, "target")?;
            // A prompt, or a session: its running prompt and everything queued on it.
            match resolve_prompt(corral, target) {
                Ok(prompt) => {
                    let found = corral.cancel(&prompt.id).await?;
                    Ok(json!({ "cancelled": [{ "prompt": prompt.id, "found": found }] }))
                }
                Err(error) if error.code == code::NOT_FOUND => {
                    let session = resolve_session(corral, target)?;
                    let prompts = corral
                        .read(|c| work::prompts_of(c, &session.id))
                        .map_err(store_error)?;
                    let mut cancelled = Vec::new();
                    for prompt in prompts.iter().filter(|p| !p.status.is_final()) {
                        let found = corral.cancel(&prompt.id).await?;
                        cancelled.push(json!({ "prompt": prompt.id, "found": found }));
                    }
                    Ok(json!({ "cancelled": cancelled }))
                }
                Err(error) => Err(error),
            }
        }
        "session.steer" => {
            let session = resolve_session(corral, string_param(params_value, "session")?)?;
            let text = string_param(params_value, "text")?;
            Ok(corral.steer(&session.id, text).await?)
        }
        "session.compact" => {
            let session = resolve_session(corral, string_param(params_value, "session")?)?;
            Ok(corral.compact(&session.id).await?)
        }
        "prompt.wait" => {
            let prompt = resolve_prompt(corral, string_param(params_value, "prompt")?)?;
            to_value(&corral.wait_prompt(&prompt.id).await?)
        }
        "settings.set" => {
            let name = string_param(params_value, "name")?;
            // A value is validated with the name (and a clearer message); an unset is not.
            if params_value.get("value").is_none_or(Value::is_null)
                && settings::default_of(name).is_none()
            {
                let names: Vec<&str> = KNOWN.iter().map(|known| known.name).collect();
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!("unknown setting '{name}' (known: {})", names.join(", ")),
                ));
            }
            let value = optional::<String>(params_value, "value")?;
            corral.set_setting(name, value.as_deref()).await?;
            let stored = corral
                .read(|c| Ok(settings::get(c, name)))
                .map_err(store_error)?;
            Ok(json!({ "name": name, "value": stored }))
        }
        "driver.claim" => {
            let p: ClaimParams = params(params_value)?;
            let session = resolve_session(corral, &p.session)?;
            let exec_id = connection.exec_id.borrow().clone().ok_or_else(|| {
                RpcError::new(
                    code::INVALID_PARAMS,
                    "a driver needs an exec: initialize with exec_id",
                )
            })?;
            let home = context.home.clone();
            let claimed = corral
                .write(ClaimDriver {
                    session_id: session.id,
                    exec_id,
                    take_over: p.take_over,
                    is_live: Box::new(move |exec| exec_is_live(&home, exec)),
                })
                .await?;
            match claimed {
                Ok(claim) => to_value(&claim),
                Err(ClaimRefused::Held { exec_id }) => Err(RpcError::new(
                    code::CLAIMED,
                    format!("the session is driven by exec {exec_id}; use --take-over to take it"),
                )
                .with_data(json!({ "driver": exec_id }))),
            }
        }
        "driver.release" => {
            let p: ReleaseParams = params(params_value)?;
            let session = resolve_session(corral, &p.session)?;
            to_value(
                &corral
                    .write(ReleaseDriver {
                        session_id: session.id,
                        generation: p.generation,
                    })
                    .await?,
            )
        }
        "driver.show" => {
            let session = resolve_session(corral, string_param(params_value, "session")?)?;
            to_value(
                &corral
                    .read(|c| work::driver_claim(c, &session.id))
                    .map_err(store_error)?,
            )
        }
        "shutdown" => {
            // The same as SIGTERM: the daemon drains, then stops (a second ask: at once).
            context.shutdown.request();
            Ok(json!({ "stopping": true }))
        }
        other => Err(
            RpcError::new(code::METHOD_NOT_FOUND, format!("unknown method '{other}'"))
                .with_data(json!({ "methods": METHODS })),
        ),
    }
}
