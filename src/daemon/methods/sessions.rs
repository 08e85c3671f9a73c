//! Sessions: `session.list`, `session.show`, `history`, `session.new`, `session.rename`,
//! `session.archive`, `session.steer`, `session.compact`.

use rusqlite::Connection as Store;
use serde_json::{json, Value};

use super::{
    check_title, optional, params, project_of, read, resolve_project, resolve_session, session_of,
    string_param, to_value, Caller,
};
use crate::actors::ledger::{ChangeSession, WaveNamed};
use crate::protocol::{code, RpcError, SessionNewParams};
use crate::store::work::{self, NewSession, Session};

pub(super) fn list(c: &Store, params: &Value) -> Result<Value, RpcError> {
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

pub(super) fn show(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let session = session_of(c, string_param(params, "session")?)?;
    let prompts = read(work::prompts_of(c, &session.id))?;
    let driver = read(work::driver_claim(c, &session.id))?;
    Ok(json!({ "session": session, "prompts": prompts, "driver": driver }))
}

pub(super) fn history(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let session = session_of(c, string_param(params, "session")?)?;
    let prompts = read(work::prompts_of(c, &session.id))?;
    let runs = read(work::runs_of_session(c, &session.id))?;
    Ok(json!({ "session": session, "prompts": prompts, "runs": runs }))
}

pub(super) async fn new(caller: &Caller, params_value: &Value) -> Result<Value, RpcError> {
    let corral = caller.corral();
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

/// `session.rename`, and `session.archive` (`archive`: no title).
pub(super) async fn change(
    caller: &Caller,
    params_value: &Value,
    archive: bool,
) -> Result<Value, RpcError> {
    let corral = caller.corral();
    let session = resolve_session(corral, string_param(params_value, "session")?)?;
    let title = if archive {
        None
    } else {
        let title = string_param(params_value, "title")?.trim();
        check_title(title)?;
        Some(title.to_string())
    };
    let changed = corral
        .write(ChangeSession {
            id: session.id,
            title,
            archive,
        })
        .await?
        .ok_or_else(|| RpcError::new(code::NOT_FOUND, "the session is gone"))?;
    to_value(&changed)
}

pub(super) async fn steer(caller: &Caller, params_value: &Value) -> Result<Value, RpcError> {
    let corral = caller.corral();
    let session = resolve_session(corral, string_param(params_value, "session")?)?;
    let text = string_param(params_value, "text")?;
    Ok(corral.steer(&session.id, text).await?)
}

pub(super) async fn compact(caller: &Caller, params_value: &Value) -> Result<Value, RpcError> {
    let corral = caller.corral();
    let session = resolve_session(corral, string_param(params_value, "session")?)?;
    Ok(corral.compact(&session.id).await?)
}
