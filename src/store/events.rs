//! Events: the normalized things that happened in a session (`events`), numbered per session
//! (`seq`) and across the daemon's sessions (`feed_seq`).
//!
//! Home of **gap-free event numbers**: [`append_events`] takes each session's next numbers from
//! `sessions.last_event_seq` in the same transaction, so readers can resume from an offset.
//! Written by the ledger actor (`AppendEvents`, with other writes); read by streams and replay.

use crate::store::sql::{self, args, Conn, Dialect, OptionalExt, Row};
use serde::{Deserialize, Serialize};

use super::now_ms;
use crate::events::{EventKind, Payload};

/// One normalized thing that happened in a session, numbered per session (`seq`) and across
/// the daemon's sessions (`feed_seq`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub session_id: String,
    pub seq: i64,
    /// Daemon-wide, strictly increasing, without gaps among stored events: the cursor of the
    /// stream of every session. 0 from a daemon older than the feed (migration 8).
    #[serde(default)]
    pub feed_seq: i64,
    pub prompt_id: Option<String>,
    pub run_id: Option<String>,
    pub at: i64,
    pub kind: EventKind,
    pub payload: serde_json::Value,
}

impl Event {
    /// The payload, typed by the event's kind (never fails: see [`Payload::read`]).
    pub(crate) fn payload(&self) -> Payload {
        Payload::read(&self.kind, &self.payload)
    }
}

fn event_row(row: &Row<'_>) -> sql::Result<Event> {
    let payload: String = row.get(6)?;
    Ok(Event {
        session_id: row.get(0)?,
        seq: row.get(1)?,
        prompt_id: row.get(2)?,
        run_id: row.get(3)?,
        at: row.get(4)?,
        kind: EventKind::parse(&row.get::<String>(5)?),
        payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::String(payload)),
        feed_seq: row.get::<Option<i64>>(7)?.unwrap_or(0),
    })
}

const EVENT_COLUMNS: &str = "session_id, seq, prompt_id, run_id, at, kind, payload, feed_seq";

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// An event to append; its number is given by [`append_events`].
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub session_id: String,
    pub prompt_id: Option<String>,
    pub run_id: Option<String>,
    pub kind: EventKind,
    pub payload: serde_json::Value,
}

impl NewEvent {
    /// An event telling `payload`, of the kind of its payload (so the two always agree).
    pub(crate) fn new(
        session_id: impl Into<String>,
        prompt_id: Option<String>,
        run_id: Option<String>,
        payload: Payload,
    ) -> NewEvent {
        NewEvent {
            session_id: session_id.into(),
            prompt_id,
            run_id,
            kind: payload.kind(),
            payload: payload.to_value(),
        }
    }

    /// The payload, typed by the event's kind (never fails: see [`Payload::read`]).
    pub(crate) fn payload(&self) -> Payload {
        Payload::read(&self.kind, &self.payload)
    }
}

/// Appends events, numbering each session's from its `last_event_seq`. Returns them numbered.
pub(crate) fn append_events(connection: &Conn, events: &[NewEvent]) -> sql::Result<Vec<Event>> {
    let at = now_ms();
    append_events_at(connection, events.iter().cloned().map(|event| (event, at)))
}

/// Appends events as [`append_events`] does, each with the time given beside it (a spill
/// journal's events keep the time they were spilled, `store::spill`).
pub(crate) fn append_events_at(
    connection: &Conn,
    events: impl ExactSizeIterator<Item = (NewEvent, i64)>,
) -> sql::Result<Vec<Event>> {
    if events.len() == 0 {
        return Ok(Vec::new());
    }
    // The daemon-wide number: the ledger is the only writer, so the last stored one plus one
    // (an index seek) is free inside this transaction; a write rolled back gives its numbers
    // back with its rows, so the stored numbers have no gaps.
    let mut feed_seq = feed_seq_in_transaction(connection)?;
    let mut numbered = Vec::with_capacity(events.len());
    let mut events = events.peekable();
    while let Some(first) = events.next() {
        // A session's events in a row are numbered and stored together.
        let mut run = vec![first];
        while let Some(next) = events.next_if(|(next, _)| next.session_id == run[0].0.session_id) {
            run.push(next);
        }
        let first_seq = match connection.dialect() {
            Dialect::Sqlite => number_one_by_one(connection, &run, feed_seq)?,
            Dialect::Postgres => number_at_once(connection, &run, feed_seq)?,
        };
        for (event, at) in &run {
            super::phases::follow(connection, event, *at)?;
        }
        for (index, (event, at)) in run.into_iter().enumerate() {
            feed_seq += 1;
            numbered.push(Event {
                session_id: event.session_id,
                seq: first_seq + index as i64,
                feed_seq,
                prompt_id: event.prompt_id,
                run_id: event.run_id,
                at,
                kind: event.kind,
                payload: event.payload,
            });
        }
    }
    connection.note_last_feed_seq(feed_seq);
    Ok(numbered)
}

/// Stores one session's events in a row, the feed's numbers following `feed_seq`, a
/// statement each (SQLite, in process); returns the session number of the first.
fn number_one_by_one(
    connection: &Conn,
    run: &[(NewEvent, i64)],
    feed_seq: i64,
) -> sql::Result<i64> {
    // The session's last event's time goes with its number (the overview reads it there, not
    // from the event, whose payload may be long).
    const NEXT: &str = "UPDATE sessions SET last_event_seq = last_event_seq + 1, \
         last_event_at = ?2 WHERE id = ?1 RETURNING last_event_seq";
    const INSERT: &str =
        "INSERT INTO events (session_id, seq, prompt_id, run_id, at, kind, payload, feed_seq) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
    let mut first_seq = None;
    for (offset, (event, at)) in run.iter().enumerate() {
        let seq: i64 = connection.row(NEXT, args![&event.session_id, *at], |row| row.get(0))?;
        first_seq.get_or_insert(seq);
        connection.run(
            INSERT,
            args![
                event.session_id,
                seq,
                event.prompt_id,
                event.run_id,
                *at,
                event.kind.as_str(),
                event.payload.to_string(),
                feed_seq + 1 + offset as i64,
            ],
        )?;
    }
    first_seq.ok_or(sql::DbError::NoRows)
}

/// Stores one session's events in a row as [`number_one_by_one`] does, in one statement
/// (PostgreSQL: one round trip to the server, made under the store's write lock, whatever
/// the number of events).
fn number_at_once(connection: &Conn, run: &[(NewEvent, i64)], feed_seq: i64) -> sql::Result<i64> {
    // ?1 session, ?2 how many, ?3 the last one's time, ?4 the feed number before the first,
    // ?5 the events as JSON records, `n` counting them from 1.
    const STORE: &str = "WITH numbered AS ( \
             UPDATE sessions SET last_event_seq = last_event_seq + ?2, last_event_at = ?3 \
              WHERE id = ?1 RETURNING last_event_seq - ?2 AS before) \
         INSERT INTO events (session_id, seq, prompt_id, run_id, at, kind, payload, feed_seq) \
         SELECT ?1, numbered.before + e.n, e.prompt_id, e.run_id, e.at, e.kind, e.payload, \
                ?4 + e.n \
           FROM numbered, json_to_recordset(?5::text::json) AS e(n bigint, prompt_id text, \
                run_id text, at bigint, kind text, payload text) \
         RETURNING seq";
    // The same, its numbers given: the session's last number is known to this writer
    // (`sql::SessionSeqs`), so nothing is to be read back and the statement is held. The
    // session's row is set in the same statement (a data-modifying `WITH` runs whether or not
    // the rest reads it): one statement for the server to parse and run, not two.
    const STORE_FROM: &str = "WITH numbered AS ( \
             UPDATE sessions SET last_event_seq = ?2::bigint + ?5::bigint, last_event_at = ?6 \
              WHERE id = ?1) \
         INSERT INTO events (session_id, seq, prompt_id, run_id, at, kind, payload, feed_seq) \
         SELECT ?1, ?2 + e.n, e.prompt_id, e.run_id, e.at, e.kind, e.payload, ?3 + e.n \
           FROM json_to_recordset(?4::text::json) AS e(n bigint, prompt_id text, \
                run_id text, at bigint, kind text, payload text)";
    let session_id = &run[0].0.session_id;
    let last_at = run[run.len() - 1].1;
    let count = run.len() as i64;
    let records: Vec<serde_json::Value> = run
        .iter()
        .enumerate()
        .map(|(index, (event, at))| {
            serde_json::json!({
                "n": index + 1,
                "prompt_id": event.prompt_id,
                "run_id": event.run_id,
                "at": at,
                "kind": event.kind.as_str(),
                "payload": event.payload.to_string(),
            })
        })
        .collect();
    let records = serde_json::Value::Array(records).to_string();
    if let Some(before) = connection.known_event_seq(session_id) {
        connection.run_later(
            STORE_FROM,
            args![session_id, before, feed_seq, records, count, last_at],
        )?;
        connection.note_event_seq(session_id, before + count);
        return Ok(before + 1);
    }
    let seqs: Vec<i64> = connection.rows(
        STORE,
        args![session_id, count, last_at, feed_seq, records],
        |row| row.get(0),
    )?;
    // No such session: nothing was stored, as the one-by-one form fails on its first event.
    match seqs.iter().min() {
        Some(first) if seqs.len() == run.len() => {
            connection.note_event_seq(session_id, first + count - 1);
            Ok(*first)
        }
        _ => Err(sql::DbError::NoRows),
    }
}

/// Whether the session's event `seq` is `event` (same kind, prompt, run and payload): how a
/// boot finds a spill file it stored before it was killed, before it could remove the file.
pub(crate) fn event_is(connection: &Conn, seq: i64, event: &NewEvent) -> sql::Result<bool> {
    let found = connection
        .row(
            "SELECT kind, prompt_id, run_id, payload FROM events WHERE session_id = ?1 AND seq = ?2",
            args![event.session_id, seq],
            |row| {
                Ok((
                    row.get::<String>(0)?,
                    row.get::<Option<String>>(1)?,
                    row.get::<Option<String>>(2)?,
                    row.get::<String>(3)?,
                ))
            },
        )
        .optional()?;
    Ok(found.is_some_and(|(kind, prompt_id, run_id, payload)| {
        kind == event.kind.as_str()
            && prompt_id == event.prompt_id
            && run_id == event.run_id
            && serde_json::from_str::<serde_json::Value>(&payload)
                .ok()
                .as_ref()
                == Some(&event.payload)
    }))
}

// ---------------------------------------------------------------------------------------------
// Reads.

/// A session's events with a number above `after`, oldest first, at most `limit`.
pub fn events_after(
    connection: &Conn,
    session_id: &str,
    after: i64,
    limit: usize,
) -> sql::Result<Vec<Event>> {
    events_between(connection, session_id, after, i64::MAX, limit)
}

/// A session's events numbered above `after` and below `before`, oldest first, at most
/// `limit`.
pub fn events_between(
    connection: &Conn,
    session_id: &str,
    after: i64,
    before: i64,
    limit: usize,
) -> sql::Result<Vec<Event>> {
    connection.rows(
        &format!(
            "SELECT {EVENT_COLUMNS} FROM events \
         WHERE session_id = ?1 AND seq > ?2 AND seq < ?3 ORDER BY seq LIMIT ?4"
        ),
        args![session_id, after, before, limit as i64],
        event_row,
    )
}

/// Every session's events with a daemon-wide number above `after` and below `before`, in
/// that number's order, at most `limit`.
pub fn feed_between(
    connection: &Conn,
    after: i64,
    before: i64,
    limit: usize,
) -> sql::Result<Vec<Event>> {
    connection.rows(
        &format!(
            "SELECT {EVENT_COLUMNS} FROM events \
         WHERE feed_seq > ?1 AND feed_seq < ?2 ORDER BY feed_seq LIMIT ?3"
        ),
        args![after, before, limit as i64],
        event_row,
    )
}

/// [`last_feed_seq`] as the open write transaction stands, asked of the store once (see
/// `sql::TransactionMemo`).
pub(crate) fn feed_seq_in_transaction(connection: &Conn) -> sql::Result<i64> {
    if let Some(seq) = connection.known_last_feed_seq() {
        return Ok(seq);
    }
    let seq = last_feed_seq(connection)?;
    connection.note_last_feed_seq(seq);
    Ok(seq)
}

/// The daemon-wide number of the last stored event (0: none yet).
pub fn last_feed_seq(connection: &Conn) -> sql::Result<i64> {
    connection.row(
        "SELECT coalesce(max(feed_seq), 0) FROM events",
        args![],
        |row| row.get(0),
    )
}
