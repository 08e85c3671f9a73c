//! Projects and lock groups: `project.list`, `project.show`, `project.add`, `project.set`,
//! `project.archive`, `group.set`.

use rusqlite::Connection as Store;
use serde_json::{json, Value};

use super::{optional, params, project_of, read, resolve_project, string_param, to_value, Caller};
use crate::actors::ledger::ChangeProject;
use crate::protocol::{code, ProjectAddParams, ProjectSetParams, RpcError};
use crate::store::work::{self, NewProject, Project};

pub(super) fn list(c: &Store, params: &Value) -> Result<Value, RpcError> {
    let all = optional::<bool>(params, "all")?.unwrap_or(false);
    let projects: Vec<Project> = read(work::projects(c))?
        .into_iter()
        .filter(|p| all || p.archived_at.is_none())
        .collect();
    to_value(&projects)
}

pub(super) fn show(c: &Store, params: &Value) -> Result<Value, RpcError> {
    to_value(&project_of(c, string_param(params, "project")?)?)
}

pub(super) async fn add(caller: &Caller, params_value: &Value) -> Result<Value, RpcError> {
    let p: ProjectAddParams = params(params_value)?;
    let project = caller
        .corral()
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

/// `project.set`, and `project.archive` (`archive`: the same params, and the project goes).
pub(super) async fn set(
    caller: &Caller,
    params_value: &Value,
    archive: bool,
) -> Result<Value, RpcError> {
    let corral = caller.corral();
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
        archive,
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

pub(super) async fn group_set(caller: &Caller, params_value: &Value) -> Result<Value, RpcError> {
    let name = string_param(params_value, "name")?;
    let locking = optional::<bool>(params_value, "locking")?.unwrap_or(true);
    caller.corral().set_group_locking(name, locking).await?;
    Ok(json!({ "name": name, "locking": locking }))
}
