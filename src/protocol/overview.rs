//! What a dashboard looks at: `overview` (every session's state, the slots, the runs, the
//! gaps, recent commands, the feed's number) and `execs.list` (the exec ledger, paged as
//! `monitor list --json` pages it). The daemon answers both from `store::overview`'s reads,
//! which `corral monitor` shares (`daemon::methods::overview`).
//!
//! A session's line ([`SessionItem`], [`SessionState`]) and a live run ([`RunNow`]) are views
//! made for showing, not stored rows: the wire takes them as `store::overview` makes them, so
//! `monitor --json`'s `items` and `overview`'s `sessions` cannot drift apart.

use serde::{Deserialize, Serialize};

use super::{method, named_params, NoParams, Run};
use crate::protocol::slots::SlotSummary;
use crate::store::exec;
pub use crate::store::overview::{RunNow, SessionItem, SessionState};

method! {
    /// Every session's state, the slots, running runs, gaps, recent commands, the feed's
    /// number.
    Overview = "overview": NoParams => OverviewResult,
    /// The exec ledger, newest first, filtered and paged by cursor.
    ExecsList = "execs.list": ExecsListParams => ExecsPage,
}

/// `overview`'s answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverviewResult {
    pub sessions: Vec<SessionItem>,
    /// The slot manager's summary, as `status` gives it.
    pub slots: Option<SlotSummary>,
    /// Runs marked running whose engine lives (or is being spawned).
    pub runs: Vec<RunNow>,
    /// Runs marked running whose engine is gone (a daemon died; the next one closes them).
    pub gaps: Vec<Run>,
    /// The last commands, newest first.
    pub recent: Vec<Exec>,
    /// The daemon-wide number of the last stored event: `events.subscribe` without `session`
    /// from here misses nothing after this answer.
    pub feed_seq: i64,
}

impl OverviewResult {
    pub fn new(read: crate::store::overview::Overview, slots: Option<SlotSummary>) -> Self {
        OverviewResult {
            sessions: read.sessions,
            slots,
            runs: read.runs,
            gaps: read.gaps.iter().map(Run::from).collect(),
            recent: read.recent.iter().map(Exec::from).collect(),
            feed_seq: read.feed_seq,
        }
    }
}

/// `execs.list {parent?, caller?, outcome?, search?, repo?, task?, wave?, limit?, after?}`:
/// `monitor list`'s filters. `outcome`: succeeded, failed, interrupted, lost or unknown;
/// `repo`: a path, whose repository's execs are listed (without it, every repository's);
/// `wave`: a name or an id; `limit`: 1 to 10,000 (default 50); `after`: the `next` of the
/// previous page.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExecsListParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub search: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wave: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}
named_params!(ExecsListParams {
    parent: optional,
    caller: optional,
    outcome: optional,
    search: optional,
    repo: optional,
    task: optional,
    wave: optional,
    limit: optional,
    after: optional,
});

/// A page of execs: `{"entries":[…],"next":CURSOR|null}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecsPage {
    pub entries: Vec<Exec>,
    /// The cursor of the next page (`after`), if there may be one.
    pub next: Option<String>,
}

impl From<&exec::ExecPage> for ExecsPage {
    fn from(page: &exec::ExecPage) -> Self {
        ExecsPage {
            entries: page.entries.iter().map(Exec::from).collect(),
            next: page.next.clone(),
        }
    }
}

/// One command in the exec ledger (`store::exec::Exec`'s keys, as `monitor --json` prints).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exec {
    pub id: String,
    pub trace_id: String,
    pub parent_exec_id: Option<String>,
    pub caller_session_id: Option<String>,
    pub via_agent: Option<bool>,
    /// The argv: a JSON array of strings (text a program wrote otherwise, as a string).
    pub command: Option<serde_json::Value>,
    pub cwd: Option<String>,
    pub repo: Option<String>,
    /// The host the exec runs on (where its pid means something); null for a row recorded
    /// before hosts were.
    pub host: Option<String>,
    pub pid: Option<i64>,
    pub started_at: i64,
    pub completed_at: Option<i64>,
    pub exit_code: Option<i32>,
    /// `succeeded`, `failed`, `interrupted`, `lost`; null = unknown.
    pub outcome: Option<String>,
    pub signal: Option<String>,
}

impl From<&exec::Exec> for Exec {
    fn from(e: &exec::Exec) -> Self {
        Exec {
            id: e.id.clone(),
            trace_id: e.trace_id.clone(),
            parent_exec_id: e.parent_exec_id.clone(),
            caller_session_id: e.caller_session_id.clone(),
            via_agent: e.via_agent,
            command: e.command.clone(),
            cwd: e.cwd.clone(),
            repo: e.repo.clone(),
            host: e.host.clone(),
            pid: e.pid,
            started_at: e.started_at,
            completed_at: e.completed_at,
            exit_code: e.exit_code,
            outcome: e.outcome.clone(),
            signal: e.signal.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire's exec has the store row's keys, in its order: `monitor --json`'s shape.
    #[test]
    fn an_exec_on_the_wire_is_the_rows_json() {
        let row = exec::Exec {
            id: "e".into(),
            trace_id: "t".into(),
            parent_exec_id: None,
            caller_session_id: Some("s".into()),
            via_agent: Some(true),
            command: Some(serde_json::json!(["corral", "status"])),
            cwd: Some("/w".into()),
            repo: None,
            host: Some("alpha".into()),
            pid: Some(7),
            started_at: 1,
            completed_at: Some(2),
            exit_code: Some(0),
            outcome: Some("succeeded".into()),
            signal: None,
        };
        assert_eq!(
            serde_json::to_string(&Exec::from(&row)).unwrap(),
            serde_json::to_string(&row).unwrap()
        );
    }

    #[test]
    fn params_of_the_wrong_type_are_named() {
        let error = serde_json::from_value::<ExecsListParams>(serde_json::json!({ "limit": "3" }))
            .unwrap_err();
        assert!(
            error.to_string().contains("limit has the wrong type"),
            "{error}"
        );
        let empty: ExecsListParams = serde_json::from_value(serde_json::Value::Null).unwrap();
        assert!(empty.limit.is_none());
    }
}
