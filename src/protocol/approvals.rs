//! Approvals (#32): `approvals.list` and `approvals.answer`.
//!
//! An approval is what an engine asked a person under the policy `ask`; it is answered once,
//! by a person: an answer from inside a supervised run is refused (`NOT_ALLOWED`, -32010) and
//! recorded, and a second answer is refused naming the first (`ANSWERED`, -32012).

use serde::{Deserialize, Serialize};

use super::{method, named_params};
use crate::store::approvals::{Approval, Decision};

method! {
    /// The approvals waiting for a person, oldest first (`all`: the last ones asked,
    /// answered or not, newest first); of one session, or of every session.
    ApprovalsList = "approvals.list": ApprovalsListParams => Vec<Approval>,
    /// Answers a pending approval (a person's only).
    ApprovalsAnswer = "approvals.answer": ApprovalsAnswerParams => Approval,
}

/// `approvals.list {session?, all?}`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ApprovalsListParams {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
}
named_params!(ApprovalsListParams {
    session: optional,
    all: optional
});

/// `approvals.answer {approval, decision, reason?, for_session?, pattern?}`: `decision` is
/// `approve` or `deny`; `for_session` keeps it for the session's later requests of the same
/// tool whose target matches `pattern` (default: this request's target exactly).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalsAnswerParams {
    /// Its id, or a unique prefix of it.
    pub approval: String,
    pub decision: Decision,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub for_session: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
}
