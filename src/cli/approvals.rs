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
use crate::events::Payload;
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

/// A person at a terminal answering what the engine asks while `send --wait` or `attach`
/// follows a session: each request is printed on stderr; when stdin is a terminal the person
/// is asked there (`y` approve, `n` deny, `s` approve for the session, empty: leave it for
/// later), else told how to answer (`corral approve|deny ID`).
pub struct TerminalAsker {
    /// Requests waiting, oldest first: the first is the one asked about.
    waiting: std::collections::VecDeque<Approval>,
    /// Lines typed on stdin (read on a thread of its own once the first request comes).
    lines: Option<tokio::sync::mpsc::UnboundedReceiver<String>>,
    terminal: bool,
}

impl TerminalAsker {
    pub fn new() -> TerminalAsker {
        use std::io::IsTerminal;
        TerminalAsker {
            waiting: std::collections::VecDeque::new(),
            lines: None,
            terminal: std::io::stdin().is_terminal(),
        }
    }

    /// Whether a request waits for a line typed on this terminal.
    pub fn asks(&self) -> bool {
        self.terminal && !self.waiting.is_empty()
    }

    /// An `approval.requested` or `approval.answered` event of the followed prompt.
    pub fn take(&mut self, event: &crate::store::events::Event) {
        let (told, requested) = match event.payload() {
            Payload::ApprovalRequested(told) => (told, true),
            Payload::ApprovalAnswered(told) => (told, false),
            _ => return,
        };
        let Ok(approval) = serde_json::from_value::<Approval>(told.approval) else {
            return;
        };
        if requested {
            say!(
                "corral: the agent asks: {}{}",
                what(&approval),
                approval
                    .reason
                    .as_deref()
                    .map(|why| format!(" (why: {})", remote::one_line(why)))
                    .unwrap_or_default()
            );
            let first = self.waiting.is_empty();
            self.waiting.push_back(approval);
            if first {
                self.prompt();
            }
            return;
        }
        // Answered: by this terminal (said already), or elsewhere.
        let Some(at) = self
            .waiting
            .iter()
            .position(|known| known.id == approval.id)
        else {
            return;
        };
        self.waiting.remove(at);
        say!(
            "corral: {} {} ({})",
            approval.status.as_str(),
            what(&approval),
            approval.answered_by.map(|by| by.as_str()).unwrap_or("?")
        );
        if at == 0 {
            self.prompt();
        }
    }

    fn prompt(&mut self) {
        let Some(first) = self.waiting.front() else {
            return;
        };
        if !self.terminal {
            say!(
                "corral: it waits: corral approve {id} | corral deny {id} [--reason TEXT]",
                id = first.id
            );
            return;
        }
        if self.lines.is_none() {
            let (sender, lines) = tokio::sync::mpsc::unbounded_channel();
            std::thread::spawn(move || {
                for line in std::io::BufRead::lines(std::io::stdin().lock()) {
                    let Ok(line) = line else { return };
                    if sender.send(line).is_err() {
                        return;
                    }
                }
            });
            self.lines = Some(lines);
        }
        eprint!("corral: approve? [y]es, [n]o, [s]: yes for the session, enter: later > ");
    }

    /// The next line typed (pending for ever once stdin ended).
    pub async fn line(&mut self) -> String {
        match self.lines.as_mut() {
            Some(lines) => match lines.recv().await {
                Some(line) => line,
                None => std::future::pending().await,
            },
            None => std::future::pending().await,
        }
    }

    /// What a typed line answers: the params of `approvals.answer`, or `None` (left for later,
    /// or not understood: asked again).
    pub fn answer(&mut self, line: &str) -> Option<ApprovalsAnswerParams> {
        let first = self.waiting.front()?;
        let (decision, for_session) = match line.trim().to_lowercase().as_str() {
            "y" | "yes" => (Decision::Approve, false),
            "n" | "no" => (Decision::Deny, false),
            "s" | "session" => (Decision::Approve, true),
            "" => {
                say!(
                    "corral: left for later: corral approve {id} | corral deny {id}",
                    id = first.id
                );
                let later = self.waiting.pop_front();
                self.waiting.extend(later);
                if self.waiting.len() > 1 {
                    self.prompt();
                } else {
                    // Only this one: not asked again until another comes.
                    self.terminal = false;
                }
                return None;
            }
            other => {
                say!("corral: '{other}' is not y, n, s or empty");
                self.prompt();
                return None;
            }
        };
        Some(ApprovalsAnswerParams {
            approval: first.id.clone(),
            decision,
            reason: (decision == Decision::Deny).then(|| "denied at the terminal".to_string()),
            for_session,
            pattern: None,
        })
    }
}

impl Default for TerminalAsker {
    fn default() -> Self {
        TerminalAsker::new()
    }
}
