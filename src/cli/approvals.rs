//! `corral approvals`, `corral approve ID`, `corral deny ID`: what engines asked a person
//! under the policy `ask`, and the person's answer (#32).
//!
//! An engine that asks waits, keeping its slot, until a person answers here, over HTTP or on
//! the dashboard. Each approval is answered once; `--for-session` keeps the decision for the
//! session's later requests of the same tool whose target matches (`--pattern`, default:
//! this target exactly). Only a person answers: from inside a supervised run `approve` and
//! `deny` are refused (-32010) and the attempt is recorded.

use super::remote::{self, print_json};
use super::{CliError, Context, Exit};
use crate::protocol::{ApprovalsAnswer, ApprovalsAnswerParams, ApprovalsList, ApprovalsListParams};
use crate::store::approvals::{Approval, Decision};

#[derive(Debug, clap::Args)]
pub struct ApprovalsArgs {
    /// Only this session's (its id, title, or a unique id prefix).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// The last ones asked, answered or not (newest first), not only those waiting.
    #[arg(long)]
    pub all: bool,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AnswerArgs {
    /// The approval: its id, or a unique prefix of it (`corral approvals` lists them).
    pub approval: String,
    /// Why (the engine is told, and it is kept with the answer).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Answer the session's later requests of this tool the same way, without asking, when
    /// their target matches --pattern (default: this very target).
    #[arg(long)]
    pub for_session: bool,
    /// With --for-session: the targets it covers, `*` standing for any characters (`src/*`,
    /// `npm test*`); one that would match everything is refused.
    #[arg(long, value_name = "GLOB", requires = "for_session")]
    pub pattern: Option<String>,
    /// Print the answered approval as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn list(context: &Context, args: &ApprovalsArgs) -> Result<Exit, CliError> {
    let mut source = remote::inspect(context).await?;
    let params = ApprovalsListParams {
        session: args.session.clone(),
        all: args.all.then_some(true),
    };
    let approvals = source.ask::<ApprovalsList>(&params).await?;
    if args.json {
        print_json(&serde_json::to_value(&approvals).unwrap_or_default());
        return Ok(Exit::success());
    }
    if approvals.is_empty() {
        println!(
            "{}",
            if args.all {
                "no engine has asked anything"
            } else {
                "no approval waits for you"
            }
        );
    }
    for approval in &approvals {
        print_one(approval);
    }
    Ok(Exit::success())
}

pub async fn answer(
    context: &Context,
    args: &AnswerArgs,
    decision: Decision,
) -> Result<Exit, CliError> {
    let mut client = remote::connect(context).await?;
    let params = ApprovalsAnswerParams {
        approval: args.approval.clone(),
        decision,
        reason: args.reason.clone(),
        for_session: args.for_session,
        pattern: args.pattern.clone(),
    };
    let approval = remote::ask::<ApprovalsAnswer>(&mut client, &params).await?;
    if args.json {
        print_json(&serde_json::to_value(&approval).unwrap_or_default());
        return Ok(Exit::success());
    }
    println!(
        "{} {}: {}",
        approval.status.as_str(),
        approval.id,
        what(&approval)
    );
    if let Some(pattern) = &approval.pattern {
        println!(
            "kept for session {}: {} requests matching '{pattern}' are {} without asking",
            approval.session_id,
            approval.tool,
            approval.status.as_str()
        );
    }
    Ok(Exit::success())
}

/// The tool and what it would touch, in one line.
fn what(approval: &Approval) -> String {
    match &approval.target {
        Some(target) => format!("{} {}", approval.tool, remote::one_line(target)),
        None => approval.tool.clone(),
    }
}

fn print_one(approval: &Approval) {
    let session: String = approval.session_id.chars().take(8).collect();
    println!(
        "{}  {}  session {session}  asked {}  {}",
        approval.id,
        approval.status.as_str(),
        super::monitor::format_time(approval.asked_at),
        what(approval)
    );
    if let Some(reason) = &approval.reason {
        println!("    why: {}", remote::one_line(reason));
    }
    if let Some(answer) = &approval.answer_reason {
        println!("    answer: {}", remote::one_line(answer));
    }
}
