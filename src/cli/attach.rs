//! `corral attach SESSION [--take-over]`: drive a session interactively.
//!
//! It claims the session's driver (refused while another live exec drives, unless
//! `--take-over`), prints the session's events live (`#SEQ KIND summary`), and sends each
//! line read from stdin as a prompt with the claim's generation. At the end of its input it
//! waits for the prompts it sent to end, releases the claim and exits 0, or 1 with one line
//! saying how many were refused and how many failed or were cancelled. When another exec
//! took the session over, the next send is refused with `superseded by exec …`: attach says so
//! and exits 1. A line too long for the protocol is refused with one line naming the limit,
//! and attach reads on. On a terminal, a status line on stderr says what a prompt waits for (a slot, a
//! retry, its app-server) while it waits (see [`super::progress`]); every line attach prints
//! clears it first.
//!
//! What the engine asks a person under the policy `ask` is printed as it comes; while one
//! waits, the line `/approve`, `/session` (approve for the rest of the session) or `/deny
//! [REASON]` answers the oldest (any other line is a prompt, as always).

use std::collections::HashSet;
use std::io::Write;

use crate::events::{ApprovalTold, EventKind, Payload};
use crate::protocol::{ApprovalsAnswer, ApprovalsAnswerParams, PromptSend, SendParams};
use crate::store::approvals::Decision;
use tokio::sync::mpsc;

use super::progress::StatusLine;
use super::remote::{self, EventStream, Interrupts};
use super::{CliError, Context, Exit};
use crate::client::Client;

#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// Take the session over from a driver that is still live.
    #[arg(long)]
    pub take_over: bool,
}

pub async fn execute(context: &Context, args: &AttachArgs) -> Result<Exit, CliError> {
    let mut interrupts = Interrupts::watch();
    let mut client = tokio::select! {
        client = remote::connect(context) => client?,
        signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
    };
    let (session, generation) = tokio::select! {
        claimed = super::send::claim(&mut client, &args.session, args.take_over) => claimed?,
        signal = interrupts.recv() => return Ok(Exit::interrupted(signal)),
    };
    // The claim is ours from here: every way out releases it.
    let result = tokio::select! {
        result = drive(context, &mut client, &session, generation) => result,
        signal = interrupts.recv() => {
            // A call may have been cut mid-way: release on a fresh connection.
            if let Ok(mut fresh) = Client::connect(&context.home, Some(&context.invocation.id)).await {
                remote::release(&mut fresh, &session.id, generation).await;
            }
            return Ok(Exit::interrupted(signal));
        }
    };
    remote::release(&mut client, &session.id, generation).await;
    result
}

async fn drive(
    context: &Context,
    client: &mut Client,
    session: &remote::SessionRef,
    generation: i64,
) -> Result<Exit, CliError> {
    let mut events = EventStream::open(context, &session.id, session.last_event_seq).await?;
    say!(
        "corral: attached to session {} as its driver (generation {generation}); one prompt \
         per line, end of input (Ctrl-D) to detach",
        session.id
    );
    let mut lines = stdin_lines();
    let mut input_open = true;
    // Prompts this attach sent that have not ended: the end of input waits for them.
    let mut pending: HashSet<String> = HashSet::new();
    // The session runs one prompt at a time: its events tell what that one waits for.
    let mut status = StatusLine::stderr();
    // Requests of the engine waiting for a person, oldest first.
    let mut asked: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    // Prompts refused when sent, and sent ones that failed or were cancelled.
    let (mut refused, mut failed) = (0usize, 0usize);
    loop {
        if !input_open && pending.is_empty() {
            if refused + failed > 0 {
                return Err(CliError::failure(format!(
                    "not every prompt succeeded: {refused} refused, {failed} failed or cancelled"
                )));
            }
            return Ok(Exit::success());
        }
        tokio::select! {
            line = lines.recv(), if input_open => match line {
                Some(Ok(line)) => {
                    let text = line.trim();
                    if text.is_empty() {
                        continue;
                    }
                    if let (Some(answer), Some(oldest)) = (typed_answer(text), asked.front()) {
                        let (decision, for_session, reason) = answer;
                        let params = ApprovalsAnswerParams {
                            approval: oldest.clone(),
                            decision,
                            reason,
                            for_session,
                            pattern: None,
                        };
                        let said = match client.call::<ApprovalsAnswer>(&params).await {
                            Ok(answered) => format!("corral: {} {}", answered.status.as_str(), answered.id),
                            Err(error) => format!("corral: {}", remote::one_line(&error.to_string())),
                        };
                        status.print(|| say!("{said}"));
                        continue;
                    }
                    // Too long for one request line: said, and the next line is read.
                    if let Err(why) = crate::protocol::check_prompt_size(text) {
                        status.print(|| say!("corral: {why}"));
                        refused += 1;
                        continue;
                    }
                    let params = SendParams {
                        session: session.id.clone(),
                        text: text.to_string(),
                        generation: Some(generation),
                        ..SendParams::default()
                    };
                    match client.call::<PromptSend>(&params).await {
                        Ok(prompt) => {
                            status.print(|| {
                                say!("corral: sent {} ({})", prompt.id, prompt.status.as_str())
                            });
                            pending.insert(prompt.id);
                        }
                        Err(error) if remote::is_superseded(&error) => {
                            return Err(remote::failure(error));
                        }
                        // A prompt refused for itself (empty, an archived session) ends
                        // nothing; a broken connection ends the attach.
                        Err(error) if remote::rpc_error(&error).is_some() => {
                            status.print(|| {
                                say!("corral: {}", remote::one_line(&error.to_string()))
                            });
                            refused += 1;
                        }
                        Err(error) => return Err(remote::failure(error)),
                    }
                }
                None => input_open = false,
                Some(Err(error)) => {
                    return Err(CliError::failure(format!("reading stdin: {error}")));
                }
            },
            event = events.next() => {
                let event = event?;
                // A closed stdout ends nothing: the prompts still run.
                status.observe_and_print(&event, || {
                    let _ = writeln!(std::io::stdout(), "{}", remote::event_line(&event));
                });
                if event.kind.ends_prompt() {
                    if let Some(prompt) = &event.prompt_id {
                        if pending.remove(prompt) && event.kind != EventKind::PromptDone {
                            failed += 1;
                        }
                    }
                }
                let id = |told: &ApprovalTold| told.approval["id"].as_str().map(str::to_string);
                match event.payload() {
                    Payload::ApprovalRequested(told) => {
                        if let Some(id) = id(&told) {
                            asked.push_back(id);
                            status.print(|| {
                                say!("corral: it waits for you: /approve, /session (yes for the session) or /deny [REASON]")
                            });
                        }
                    }
                    Payload::ApprovalAnswered(told) => {
                        if let Some(id) = id(&told) {
                            asked.retain(|known| *known != id);
                        }
                    }
                    _ => {}
                }
            }
            () = status.tick() => {}
        }
    }
}

/// A typed answer to the oldest request: (decision, for the session, reason), or `None`
/// for a line that is a prompt.
fn typed_answer(line: &str) -> Option<(Decision, bool, Option<String>)> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let reason = Some(rest.trim().to_string()).filter(|reason| !reason.is_empty());
    match word {
        "/approve" => Some((Decision::Approve, false, None)),
        "/session" => Some((Decision::Approve, true, None)),
        "/deny" => Some((Decision::Deny, false, reason)),
        _ => None,
    }
}

/// The lines of stdin, read on a thread of their own (a blocking read never holds the
/// runtime); the channel closes at the end of input.
fn stdin_lines() -> mpsc::Receiver<std::io::Result<String>> {
    let (sender, receiver) = mpsc::channel(16);
    let spawned = std::thread::Builder::new()
        .name("corral-stdin".into())
        .spawn(move || {
            use std::io::BufRead;
            for line in std::io::stdin().lock().lines() {
                let failed = line.is_err();
                if sender.blocking_send(line).is_err() || failed {
                    return;
                }
            }
        });
    if let Err(error) = spawned {
        let (sender, receiver) = mpsc::channel(1);
        let _ = sender.try_send(Err(error));
        return receiver;
    }
    receiver
}
