//! Driver claims: `driver.claim`, `driver.release`, `driver.show`.

use serde_json::json;

use super::{resolve_session, Caller, Serve};
use crate::protocol::*;
use crate::store::drivers::ClaimRefused;
use crate::store::sql::args;

/// Whether an exec (a driver) still runs: not completed, and its process alive. On a store
/// several hosts share, a pid is judged only on its own host: another host's driver (an
/// `attach` there) runs while it is not completed and a daemon of its host holds a lease
/// (its pid means nothing here; judged here, a live driver elsewhere was taken over
/// without `--take-over`).
fn exec_is_live(home: &std::path::Path, exec_id: &str) -> bool {
    let Some(connection) = crate::store::location::locate(home)
        .ok()
        .and_then(|location| crate::store::open_read(&location).ok())
    else {
        return false;
    };
    let shared = connection.dialect() == crate::store::sql::Dialect::Postgres;
    let query = if shared {
        "SELECT pid, pid_start, completed_at, host, \
                EXISTS (SELECT 1 FROM daemons d WHERE d.host = execs.host \
                         AND d.lease_until >= corral_now_ms()) \
           FROM execs WHERE id = ?1"
    } else {
        "SELECT pid, pid_start, completed_at, NULL, 0 FROM execs WHERE id = ?1"
    };
    type Found = (Option<i64>, Option<i64>, Option<i64>, Option<String>, bool);
    let row: Option<Found> = connection
        .row(query, args![exec_id], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .ok();
    match row {
        Some((_, _, None, Some(host), host_live)) if shared && host != crate::host::name() => {
            host_live
        }
        Some((Some(pid), start, None, _, _)) => {
            crate::process::is_alive(pid as u32, start.map(|s| s as u64))
        }
        _ => false,
    }
}

/// `driver.claim`: the caller's exec becomes the session's driver.
impl Serve for DriverClaim {
    async fn serve(caller: &Caller, p: ClaimParams) -> Result<Claim, RpcError> {
        let context = &caller.context;
        let session = resolve_session(&context.corral, &p.session)?;
        let exec_id = caller.exec_id.borrow().clone().ok_or_else(|| {
            RpcError::new(
                code::INVALID_PARAMS,
                "a driver needs an exec: initialize with exec_id",
            )
        })?;
        let home = context.home.clone();
        let is_live = Box::new(move |exec: &str| exec_is_live(&home, exec));
        let claimed = context
            .corral
            .claim_driver(&session.id, &exec_id, p.take_over, is_live)
            .await?;
        match claimed {
            Ok(claim) => Ok((&claim).into()),
            Err(ClaimRefused::Held { exec_id }) => Err(RpcError::new(
                code::CLAIMED,
                format!("the session is driven by exec {exec_id}; use --take-over to take it"),
            )
            .with_data(json!({ "driver": exec_id }))),
        }
    }
}

impl Serve for DriverRelease {
    async fn serve(caller: &Caller, p: ReleaseParams) -> Result<Option<Claim>, RpcError> {
        let corral = caller.corral();
        let session = resolve_session(corral, &p.session)?;
        let released = corral.release_driver(&session.id, p.generation).await?;
        Ok(released.as_ref().map(Claim::from))
    }
}

impl Serve for DriverShow {
    async fn serve(caller: &Caller, p: SessionSelector) -> Result<Option<Claim>, RpcError> {
        let corral = caller.corral();
        let session = resolve_session(corral, &p.session)?;
        let claim = corral.driver(&session.id)?;
        Ok(claim.as_ref().map(Claim::from))
    }
}
