//! `exec.start` and `exec.end`: a client's own exec, recorded by the daemon (`corral run`
//! when a daemon answers; `prompt.send`'s `exec` goes through [`claim`] too).

use super::{Caller, Serve};
use crate::actors::ledger::{CompleteExec, RecordExec};
use crate::protocol::*;
use crate::store::exec::ExecCompletion;

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
            .write(RecordExec(record.into_new_exec(None)))
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
            .write(CompleteExec {
                id: p.id.clone(),
                completion,
            })
            .await
            .map_err(|error| not_recorded(&p.id, error))?;
        caller.exec_started.set(false);
        Ok(ExecRecorded { id: p.id })
    }
}
