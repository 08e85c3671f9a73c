//! A client's own exec, recorded by the daemon: around any request that carries it as `exec`
//! ([`record_around`]: `corral send` asks so), or by `exec.start` and `exec.end` (`corral run`
//! when a daemon answers). Both go through [`claim`].

use std::future::Future;

use serde_json::Value;

use super::{Caller, Serve};
use crate::protocol::*;
use crate::store::exec::{ExecCompletion, Outcome};

/// Checks an exec the caller asks the daemon to record: its sizes, that it is the exec the
/// connection's `initialize` named, run by the process connected, and that the connection
/// has not had one recorded already (an exec is recorded once). A refused one is not
/// recorded, and the client records it itself.
pub(super) fn claim(caller: &Caller, record: ExecRecord) -> Result<ExecRecord, RpcError> {
    let invalid = |message: String| RpcError::new(code::INVALID_PARAMS, message);
    record.check().map_err(invalid)?;
    if caller.exec_id.borrow().as_deref() != Some(record.id.as_str()) {
        return Err(invalid(
            "exec.id must be the exec_id this connection's initialize named".into(),
        ));
    }
    if let Some(peer) = caller.peer_pid {
        if i64::from(peer) != i64::from(record.pid) {
            return Err(invalid(format!(
                "exec.pid must be the connected process's ({peer})"
            )));
        }
    }
    if caller.exec_recorded.replace(true) {
        return Err(invalid(
            "this connection's exec was recorded already".into(),
        ));
    }
    Ok(record)
}

fn not_recorded(id: &str, error: impl std::fmt::Display) -> RpcError {
    RpcError::new(
        code::BUSY,
        format!("exec {id} could not be recorded: {error}"),
    )
}

impl Serve for ExecStart {
    async fn serve(caller: &Caller, p: ExecStartParams) -> Result<ExecRecorded, RpcError> {
        let record = claim(caller, p.exec)?;
        let id = record.id.clone();
        caller
            .corral()
            .record_exec(record.into_new_exec(None))
            .await
            .map_err(|error| not_recorded(&id, error))?;
        caller.exec_started.set(true);
        Ok(ExecRecorded { id })
    }
}

impl Serve for ExecEnd {
    async fn serve(caller: &Caller, p: ExecEndParams) -> Result<ExecRecorded, RpcError> {
        let own = caller.exec_id.borrow().as_deref() == Some(p.id.as_str());
        if !own || !caller.exec_started.get() {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "exec.end ends the exec this connection's exec.start recorded",
            ));
        }
        let completion = ExecCompletion {
            completed_at: p.completed_at,
            exit_code: p.exit_code,
            outcome: p.outcome,
            signal: p.signal,
        };
        caller
            .corral()
            .complete_exec(&p.id, completion)
            .await
            .map_err(|error| not_recorded(&p.id, error))?;
        caller.exec_started.set(false);
        Ok(ExecRecorded { id: p.id })
    }
}

/// The `exec` a request asks the daemon to record, checked before anything else (a refused
/// one is not recorded, and the error says nothing of it: the client records it).
pub(super) fn exec_to_record(
    caller: &Caller,
    params: &Value,
) -> Result<Option<ExecRecord>, RpcError> {
    let Some(value) = params.get("exec").filter(|value| !value.is_null()) else {
        return Ok(None);
    };
    let record: ExecRecord = serde_json::from_value(value.clone())
        .map_err(|error| RpcError::new(code::INVALID_PARAMS, format!("exec: {error}")))?;
    claim(caller, record).map(Some)
}

/// A request served with the caller's exec recorded around it: the exec's start is handed
/// to the ledger before the request's own writes (so it commits before them, or in the same
/// batch: no prompt queued without its sender's row), its end is committed before the answer
/// (exit 0 if served, 1 if refused), so that the client exits knowing its row is complete. An
/// error answer whose exec was recorded says so (`data.exec_recorded`); one that does not was
/// not recorded.
pub(super) async fn record_around(
    caller: &Caller,
    method: &str,
    record: ExecRecord,
    served: impl Future<Output = Result<Value, RpcError>>,
) -> Result<Value, RpcError> {
    let corral = caller.corral();
    let id = record.id.clone();
    let start = corral.record_exec(record.into_new_exec(None));
    let (started, answered) = tokio::join!(start, served);
    if let Err(error) = started {
        tracing::warn!(%error, exec = id, "a client's exec was not recorded");
        return Err(match answered {
            // Done all the same (a prompt queued): the answer names what it made.
            Ok(done) => RpcError::new(
                code::BUSY,
                match done.get("id").and_then(Value::as_str) {
                    Some(made) => format!(
                        "{method} was done ({made}), but exec {id} could not be recorded: {error}"
                    ),
                    None => {
                        format!("{method} was done, but exec {id} could not be recorded: {error}")
                    }
                },
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
    if let Err(error) = corral.complete_exec(&id, completion).await {
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
