//! What a dashboard looks at: `overview` (every session's state, the slots, the runs, the
//! gaps, recent commands, the feed's number) and `execs.list` (the exec ledger, paged). The
//! reads are `store::overview`'s, shared with `corral monitor`; `execs.list` only reads, so
//! the CLI answers it from the store too when no daemon runs (`cli::local`).

use super::{Caller, Inspect, Serve, STATUS_WAITERS};
use crate::protocol::*;
use crate::store::exec::{Cursor, Outcome, OutcomeFilter};
use crate::store::overview::{self, ExecQuery, PageError};
use crate::store::sql::Conn as Store;

/// The most entries `execs.list` gives per page (as `monitor list --limit`).
pub const MAX_EXECS_PAGE: u64 = 10_000;

/// `execs.list`'s page size unless `limit` says otherwise (as `monitor list`).
pub const EXECS_PAGE: u64 = 50;

/// The slots are the slot manager's, with the first waiters as `status` lists them.
impl Serve for Overview {
    async fn serve(caller: &Caller, _: NoParams) -> Result<OverviewResult, RpcError> {
        let corral = &caller.context.corral;
        let read = corral.overview()?;
        let slots = corral.slot_summary(STATUS_WAITERS).await;
        Ok(OverviewResult::new(read, slots))
    }
}

/// `monitor list --json`'s page; `repo` is a path (its repository's execs), and without it
/// every repository's (the daemon has no current directory).
impl Inspect for ExecsList {
    fn inspect(c: &Store, p: ExecsListParams) -> Result<ExecsPage, RpcError> {
        let query = query(p)?;
        let page = overview::exec_page(c, &query).map_err(page_error)?;
        Ok(ExecsPage::from(&page))
    }
}

/// The params as the store's query, each checked with a message that says what it takes.
fn query(p: ExecsListParams) -> Result<ExecQuery, RpcError> {
    let invalid = |message: String| RpcError::new(code::INVALID_PARAMS, message);
    let cut = |text: &str| text.chars().take(80).collect::<String>();
    let outcome = match p.outcome.as_deref() {
        None => None,
        Some("succeeded") => Some(OutcomeFilter::Is(Outcome::Succeeded)),
        Some("failed") => Some(OutcomeFilter::Is(Outcome::Failed)),
        Some("interrupted") => Some(OutcomeFilter::Is(Outcome::Interrupted)),
        Some("lost") => Some(OutcomeFilter::Is(Outcome::Lost)),
        Some("unknown") => Some(OutcomeFilter::Unknown),
        Some(other) => {
            return Err(invalid(format!(
                "outcome must be succeeded, failed, interrupted, lost or unknown, not '{}'",
                cut(other)
            )))
        }
    };
    let repo = match &p.repo {
        None => None,
        Some(path) => Some(Some(
            overview::repo_of(std::path::Path::new(path)).ok_or_else(|| {
                RpcError::new(code::NOT_FOUND, format!("no such directory: {}", cut(path)))
            })?,
        )),
    };
    let limit = p.limit.unwrap_or(EXECS_PAGE);
    if !(1..=MAX_EXECS_PAGE).contains(&limit) {
        return Err(invalid(format!(
            "limit must be from 1 to {MAX_EXECS_PAGE}, not {limit}"
        )));
    }
    let after = match &p.after {
        None => None,
        Some(text) => Some(Cursor::decode(text).ok_or_else(|| {
            invalid("after must be a cursor given as `next` by execs.list".into())
        })?),
    };
    Ok(ExecQuery {
        parent: p.parent,
        caller: p.caller,
        outcome,
        search: p.search,
        repo,
        task: p.task,
        wave: p.wave,
        after,
        limit: limit as usize,
    })
}

/// A page's refusal with the protocol's codes (a wave selector fails as other selectors do).
fn page_error(error: PageError) -> RpcError {
    let message = error.to_string();
    match error {
        PageError::Store(error) => RpcError::new(code::INTERNAL, format!("store: {error}")),
        PageError::NoWave(_) => RpcError::new(code::NOT_FOUND, message),
        PageError::AmbiguousWave { candidates, .. } => RpcError::new(code::AMBIGUOUS, message)
            .with_data(serde_json::json!({ "candidates": candidates })),
    }
}
