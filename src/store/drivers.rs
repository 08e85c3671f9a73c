//! Driver claims (fencing): at most one driver exec per session, a generation bumped by each
//! claim, and the provider generation bumped by each engine child (`driver_claims`).
//!
//! Written by the ledger actor (`ClaimDriver`, `ReleaseDriver`, and inside `EnqueuePrompt` and
//! `StartRun`); read by the daemon's `drivers` and `sessions` methods.

use crate::store::sql::{self, args, Conn, OptionalExt, Row};
use serde::{Deserialize, Serialize};

use super::now_ms;

/// A session's driver claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverClaim {
    pub session_id: String,
    /// The exec driving the session now; `None`: vacant.
    pub exec_id: Option<String>,
    /// The last exec that claimed it (kept when it releases, to name who superseded whom).
    pub last_exec_id: Option<String>,
    pub generation: i64,
    pub provider_generation: i64,
    pub claimed_at: Option<i64>,
    pub released_at: Option<i64>,
}

fn claim_row(row: &Row<'_>) -> sql::Result<DriverClaim> {
    Ok(DriverClaim {
        session_id: row.get(0)?,
        exec_id: row.get(1)?,
        generation: row.get(2)?,
        provider_generation: row.get(3)?,
        claimed_at: row.get(4)?,
        released_at: row.get(5)?,
        last_exec_id: row.get(6)?,
    })
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// Why a claim was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimRefused {
    /// Another live exec drives the session; `take_over` was not asked.
    Held { exec_id: String },
}

/// Claims the session for `exec_id`. A live driver (its exec still open and its process
/// alive, decided by `is_live`) is only replaced with `take_over`.
pub(crate) fn claim_driver(
    connection: &Conn,
    session_id: &str,
    exec_id: &str,
    take_over: bool,
    is_live: &dyn Fn(&str) -> bool,
) -> sql::Result<Result<DriverClaim, ClaimRefused>> {
    let current = driver_claim(connection, session_id)?;
    if let Some(holder) = current.as_ref().and_then(|claim| claim.exec_id.clone()) {
        if holder != exec_id && !take_over && is_live(&holder) {
            return Ok(Err(ClaimRefused::Held { exec_id: holder }));
        }
    }
    // `driver_claims.generation`, not a bare `generation`: PostgreSQL sees `excluded`'s column
    // of that name too in `DO UPDATE` and refuses the ambiguity (SQLite reads it as the row's).
    connection.run(
        "INSERT INTO driver_claims (session_id, exec_id, last_exec_id, generation, claimed_at) \
         VALUES (?1, ?2, ?2, 1, ?3) \
         ON CONFLICT (session_id) DO UPDATE SET exec_id = excluded.exec_id, \
         last_exec_id = excluded.exec_id, generation = driver_claims.generation + 1, \
         claimed_at = excluded.claimed_at, released_at = NULL",
        args![session_id, exec_id, now_ms()],
    )?;
    Ok(Ok(
        driver_claim(connection, session_id)?.expect("just written")
    ))
}

/// Releases the claim of `generation`; a stale generation changes nothing. Returns the claim.
pub(crate) fn release_driver(
    connection: &Conn,
    session_id: &str,
    generation: i64,
) -> sql::Result<Option<DriverClaim>> {
    connection.run(
        "UPDATE driver_claims SET exec_id = NULL, released_at = ?3 \
         WHERE session_id = ?1 AND generation = ?2",
        args![session_id, generation, now_ms()],
    )?;
    driver_claim(connection, session_id)
}

/// SQL: bumps the provider generation of session `$session` (a placeholder) and returns the
/// current driver's exec id. A macro so that `runs::insert_run` can take it into its own
/// statement on PostgreSQL. Qualified for PostgreSQL, as in `claim_driver`.
macro_rules! engine_started_sql {
    ($session:literal) => {
        concat!(
            "INSERT INTO driver_claims (session_id, provider_generation) VALUES (",
            $session,
            ", 1) ON CONFLICT (session_id) DO UPDATE \
             SET provider_generation = driver_claims.provider_generation + 1 \
             RETURNING exec_id"
        )
    };
}
pub(crate) use engine_started_sql;

/// Bumps the provider generation (an engine child was started for the session) and returns
/// the current driver's exec id, which the child gets as its `CORRAL_PARENT_EXEC`.
pub(crate) fn engine_started(connection: &Conn, session_id: &str) -> sql::Result<Option<String>> {
    // The driver read back in the same statement: one round trip under the write lock.
    connection.row(engine_started_sql!("?1"), args![session_id], |row| {
        row.get(0)
    })
}

// ---------------------------------------------------------------------------------------------
// Reads.

pub fn driver_claim(connection: &Conn, session_id: &str) -> sql::Result<Option<DriverClaim>> {
    connection
        .row(
            "SELECT session_id, exec_id, generation, provider_generation, claimed_at, released_at, \
             last_exec_id FROM driver_claims WHERE session_id = ?1",
            args![session_id],
            claim_row,
        )
        .optional()
}
