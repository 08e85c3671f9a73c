//! `approvals.list` and `approvals.answer` (#32): one handler each. The list only reads, so
//! the CLI answers it on its own connection when no daemon runs (nothing waits then: the
//! next daemon denies what the last one's runs left).

use super::{read, session_of, Caller, Inspect, Serve, Store};
use crate::protocol::{
    ApprovalsAnswer, ApprovalsAnswerParams, ApprovalsList, ApprovalsListParams, RpcError,
};
use crate::store::approvals::{self, Approval};

impl Inspect for ApprovalsList {
    fn inspect(c: &Store, p: ApprovalsListParams) -> Result<Vec<Approval>, RpcError> {
        let session = match &p.session {
            Some(selector) => Some(session_of(c, selector)?.id),
            None => None,
        };
        read(if p.all.unwrap_or(false) {
            approvals::recent(c, session.as_deref(), 200)
        } else {
            approvals::pending(c, session.as_deref())
        })
    }
}

impl Serve for ApprovalsAnswer {
    async fn serve(caller: &Caller, p: ApprovalsAnswerParams) -> Result<Approval, RpcError> {
        Ok(caller
            .corral()
            .answer_approval(&p.approval, p.decision, p.reason, p.for_session, p.pattern)
            .await?)
    }
}
