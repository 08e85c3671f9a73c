//! The inspections answered from the store itself, when no daemon runs: `project.list`,
//! `project.show`, `session.list`, `session.show`, `history`, `settings.get`,
//! `settings.list`, and a session's stored events. Each gives the result the daemon's method
//! of the same name gives (the commands print either the same way; `tests/home_safety.rs`
//! compares them), read on one read-only connection.
//!
//! The connection is [`Context::reader`]'s: it exists only once the store passed the check
//! every command takes (`store::inspect`, then the ledger's `check_connection`), so a file
//! that is not ours is never opened here either. Nothing here writes, and nothing starts a
//! daemon.

use rusqlite::Connection;
use serde::Serialize;
use serde_json::{json, Value};

use super::{CliError, Context};
use crate::client::ClientError;
use crate::protocol::{code, RpcError};
use crate::store::select::select;
use crate::store::settings::{self, KNOWN};
use crate::store::work::{self, Event, Project, Session};

/// The store of a home no daemon serves, read directly.
pub struct LocalStore {
    connection: Connection,
    home: String,
}

type Answer = Result<Value, RpcError>;

impl LocalStore {
    /// A read-only connection to the context's store (refused, silently, when the store was
    /// refused: its line was printed then).
    pub fn open(context: &Context) -> Result<LocalStore, CliError> {
        Ok(LocalStore {
            connection: context.reader()?,
            home: context.home.to_string_lossy().into_owned(),
        })
    }

    /// Answers `method` as the daemon would. Only the read-only methods are known here.
    pub fn call(&self, method: &str, params: &Value) -> Result<Value, ClientError> {
        self.answer(method, params).map_err(ClientError::Rpc)
    }

    fn answer(&self, method: &str, params: &Value) -> Answer {
        let c = &self.connection;
        match method {
            "project.list" => {
                let all = flag(params, "all");
                let projects: Vec<Project> = read(work::projects(c))?
                    .into_iter()
                    .filter(|p| all || p.archived_at.is_none())
                    .collect();
                to_value(&projects)
            }
            "project.show" => to_value(&self.project(string(params, "project")?)?),
            "session.list" => {
                let all = flag(params, "all");
                let project = match params.get("project").and_then(Value::as_str) {
                    Some(selector) => Some(self.project(selector)?.id),
                    None => None,
                };
                let sessions: Vec<Session> = read(work::sessions(c))?
                    .into_iter()
                    .filter(|s| all || s.archived_at.is_none())
                    .filter(|s| project.is_none() || s.project_id == project)
                    .collect();
                to_value(&sessions)
            }
            "session.show" => {
                let session = self.session(string(params, "session")?)?;
                let prompts = read(work::prompts_of(c, &session.id))?;
                let driver = read(work::driver_claim(c, &session.id))?;
                Ok(json!({ "session": session, "prompts": prompts, "driver": driver }))
            }
            "history" => {
                let session = self.session(string(params, "session")?)?;
                let prompts = read(work::prompts_of(c, &session.id))?;
                let runs = read(work::runs_of_session(c, &session.id))?;
                Ok(json!({ "session": session, "prompts": prompts, "runs": runs }))
            }
            "settings.get" => {
                let name = string(params, "name")?;
                let default = settings::default_of(name).ok_or_else(|| {
                    RpcError::new(code::NOT_FOUND, format!("unknown setting '{name}'"))
                })?;
                let stored = settings::get(c, name);
                Ok(json!({ "name": name, "value": stored, "default": default }))
            }
            "settings.list" => {
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
            other => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("{other} needs a daemon, and none runs for {}", self.home),
            )),
        }
    }

    /// A session's stored events after `after`, oldest first, at most `limit`.
    pub fn events_after(
        &self,
        session_id: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Event>, CliError> {
        Ok(work::events_after(
            &self.connection,
            session_id,
            after,
            limit,
        )?)
    }

    /// What `status --json` says of a home no daemon serves.
    pub fn status(&self) -> Result<Value, CliError> {
        let sessions = work::sessions(&self.connection)?;
        Ok(json!({ "daemon": null, "home": self.home, "sessions": sessions.len() }))
    }

    fn project(&self, selector: &str) -> Result<Project, RpcError> {
        let projects = read(work::projects(&self.connection))?;
        select("project", selector, projects, |p| &p.id, |p| Some(&p.name)).map_err(RpcError::from)
    }

    fn session(&self, selector: &str) -> Result<Session, RpcError> {
        let sessions = read(work::sessions(&self.connection))?;
        select(
            "session",
            selector,
            sessions,
            |s| &s.id,
            |s| s.title.as_deref(),
        )
        .map_err(RpcError::from)
    }
}

/// The settings stored now, by name.
fn stored_settings(connection: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut statement = connection.prepare("SELECT name, value FROM settings ORDER BY name")?;
    let rows = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect();
    rows
}

fn read<T>(result: rusqlite::Result<T>) -> Result<T, RpcError> {
    result.map_err(|error| RpcError::new(code::INTERNAL, format!("store: {error}")))
}

fn to_value<T: Serialize>(value: &T) -> Answer {
    serde_json::to_value(value).map_err(|error| RpcError::new(code::INTERNAL, error.to_string()))
}

fn flag(params: &Value, name: &str) -> bool {
    params.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn string<'a>(params: &'a Value, name: &str) -> Result<&'a str, RpcError> {
    params
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, format!("{name} is required")))
}
