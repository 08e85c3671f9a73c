//! Where a running prompt stands (#32, item 8): `working`, `waiting-for-slot` (and what holds
//! it) or `backing-off` (until when), kept on the prompt's row (`prompts.phase`,
//! `phase_reason`, `phase_until`) by the events that say it, in the transaction that stores
//! them, so that the overview reads a session's state from one row, never from its events.
//!
//! | event | phase | reason | until |
//! |---|---|---|---|
//! | `slot.waiting` | `waiting-for-slot` | its `why` (what holds the slot, in words) | — |
//! | `app_server.unavailable` | `waiting-for-slot` | its project's app-server, and why | the next try |
//! | `retry.scheduled` | `backing-off` | the retry, of how many, and why | `at` + `delay_ms` |
//! | `slot.granted`, `run.started` | `working` | — | — |

use super::events::NewEvent;
use crate::events::{EventKind, Payload};
use crate::store::sql::{self, args, Conn};

/// A running prompt's phase, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Working,
    WaitingForSlot,
    BackingOff,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Working => "working",
            Phase::WaitingForSlot => "waiting-for-slot",
            Phase::BackingOff => "backing-off",
        }
    }

    pub fn parse(text: &str) -> Option<Phase> {
        match text {
            "working" => Some(Phase::Working),
            "waiting-for-slot" => Some(Phase::WaitingForSlot),
            "backing-off" => Some(Phase::BackingOff),
            _ => None,
        }
    }
}

/// The phase `event` (stored at `at`) puts its prompt in, if it says one.
pub fn of(event: &NewEvent, at: i64) -> Option<(Phase, Option<String>, Option<i64>)> {
    // Asked of every event stored: only these few are read.
    let says_a_phase = matches!(
        event.kind,
        EventKind::SlotWaiting
            | EventKind::AppServerUnavailable
            | EventKind::RetryScheduled
            | EventKind::SlotGranted
            | EventKind::RunStarted
    );
    if !says_a_phase {
        return None;
    }
    Some(match event.payload() {
        Payload::SlotWaiting(waiting) => {
            let engine = Some(waiting.engine.as_str())
                .filter(|engine| !engine.is_empty())
                .unwrap_or("an engine");
            let reason = match waiting.why {
                Some(why) => format!("waits for a {engine} slot: {why}"),
                None => format!("waits for a {engine} slot"),
            };
            (Phase::WaitingForSlot, Some(reason), None)
        }
        Payload::AppServerUnavailable(unavailable) => (
            Phase::WaitingForSlot,
            Some(format!(
                "waits for its project's app-server: {}",
                Some(unavailable.reason.as_str())
                    .filter(|reason| !reason.is_empty())
                    .unwrap_or("unavailable")
            )),
            Some(at + unavailable.retry_in_ms as i64),
        ),
        Payload::RetryScheduled(retry) => {
            let why = Some(retry.reason.as_str())
                .filter(|reason| !reason.is_empty())
                .unwrap_or("failure")
                .replace('_', " ");
            let count = match (retry.retry, retry.retries) {
                (Some(retry), Some(retries)) => format!("retry {retry}/{retries}"),
                (Some(retry), None) => format!("retry {retry}"),
                _ => "a retry".to_string(),
            };
            (
                Phase::BackingOff,
                Some(format!("{why}: {count}")),
                Some(at + retry.delay_ms as i64),
            )
        }
        Payload::SlotGranted(_) | Payload::RunStarted(_) => (Phase::Working, None, None),
        _ => return None,
    })
}

/// Keeps the phase of `event`'s prompt (while it runs).
pub(crate) fn follow(connection: &Conn, event: &NewEvent, at: i64) -> sql::Result<()> {
    let (Some(prompt), Some((phase, reason, until))) = (&event.prompt_id, of(event, at)) else {
        return Ok(());
    };
    connection.run(
        "UPDATE prompts SET phase = ?2, phase_reason = ?3, phase_until = ?4 \
         WHERE id = ?1 AND status = 'running'",
        args![prompt, phase.as_str(), reason, until],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn event(kind: EventKind, payload: Value) -> NewEvent {
        NewEvent {
            session_id: "s".into(),
            prompt_id: Some("p".into()),
            run_id: None,
            kind,
            payload,
        }
    }

    #[test]
    fn each_event_that_says_a_phase_says_it_in_words() {
        let waiting = event(
            EventKind::SlotWaiting,
            json!({ "engine": "codex", "why": "project api locked by session \"Fix\"" }),
        );
        assert_eq!(
            of(&waiting, 1_000),
            Some((
                Phase::WaitingForSlot,
                Some("waits for a codex slot: project api locked by session \"Fix\"".into()),
                None
            ))
        );
        let retry = event(
            EventKind::RetryScheduled,
            json!({ "reason": "rate_limit", "retry": 2, "retries": 3, "delay_ms": 45_000 }),
        );
        assert_eq!(
            of(&retry, 1_000),
            Some((
                Phase::BackingOff,
                Some("rate limit: retry 2/3".into()),
                Some(46_000)
            ))
        );
        assert_eq!(
            of(&event(EventKind::RunStarted, json!({})), 5),
            Some((Phase::Working, None, None))
        );
        assert_eq!(of(&event(EventKind::Message, json!({})), 5), None);
    }
}
