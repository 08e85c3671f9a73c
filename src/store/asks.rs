//! Asks across daemons (`asks`, #14): a steer or a compact of a session whose engine holds
//! its thread on another daemon (the codex app-server child running its turn, the thread's
//! files on that host) is asked of that daemon through the store.
//!
//! ```text
//!  asker:  put (a row: to, from, request)  ─NOTIFY corral_work 'a:<to>:<id>'──►  asked
//!  asked:  answer (the row's answer)        ─NOTIFY corral_work 'A:<from>:<id>'─► asker
//!  asker:  take (reads the answer, deletes the row)
//! ```
//!
//! The request and the answer are JSON texts; what they hold is the asker's and the asked
//! one's business (`actors::asks`). A row whose asker gave up (no answer in time) is taken
//! all the same, so nothing is left behind by a daemon that did not answer.

use crate::store::now_ms;
use crate::store::sql::{self, args, Conn, OptionalExt, Row};

/// One ask as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskRow {
    pub id: String,
    pub to_node: String,
    pub from_node: String,
    pub request: String,
    pub answer: Option<String>,
}

const ASK_COLUMNS: &str = "id, to_node, from_node, request, answer";

fn ask_row(row: &Row) -> sql::Result<AskRow> {
    Ok(AskRow {
        id: row.get(0)?,
        to_node: row.get(1)?,
        from_node: row.get(2)?,
        request: row.get(3)?,
        answer: row.get(4)?,
    })
}

pub(crate) fn put(
    connection: &Conn,
    id: &str,
    to_node: &str,
    from_node: &str,
    request: &str,
) -> sql::Result<()> {
    connection.run(
        "INSERT INTO asks (id, to_node, from_node, request, asked_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        args![id, to_node, from_node, request, now_ms()],
    )?;
    Ok(())
}

/// Stores the answer of an ask not answered yet: the row, or `None` when it is gone (its
/// asker gave up) or was answered already.
pub(crate) fn answer(connection: &Conn, id: &str, answer: &str) -> sql::Result<Option<AskRow>> {
    let changed = connection.run(
        "UPDATE asks SET answer = ?2, answered_at = ?3 WHERE id = ?1 AND answered_at IS NULL",
        args![id, answer, now_ms()],
    )?;
    if changed == 0 {
        return Ok(None);
    }
    ask(connection, id)
}

/// Reads the ask and deletes it: its asker is done with it, answered or not.
pub(crate) fn take(connection: &Conn, id: &str) -> sql::Result<Option<AskRow>> {
    let found = ask(connection, id)?;
    if found.is_some() {
        connection.run("DELETE FROM asks WHERE id = ?1", args![id])?;
    }
    Ok(found)
}

pub fn ask(connection: &Conn, id: &str) -> sql::Result<Option<AskRow>> {
    connection
        .row(
            &format!("SELECT {ASK_COLUMNS} FROM asks WHERE id = ?1"),
            args![id],
            ask_row,
        )
        .optional()
}

/// The asks of `to_node` not answered yet, oldest first: read when its notices may have
/// been missed (its listener reconnected).
pub fn unanswered(connection: &Conn, to_node: &str) -> sql::Result<Vec<AskRow>> {
    connection.rows(
        &format!(
            "SELECT {ASK_COLUMNS} FROM asks WHERE to_node = ?1 AND answered_at IS NULL \
             ORDER BY asked_at, id"
        ),
        args![to_node],
        ask_row,
    )
}
