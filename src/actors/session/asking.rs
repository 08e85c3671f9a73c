//! A run under the policy `ask`: the engine asks before a tool use and waits; the worker
//! stores the request as an approval and answers the engine once a person has.
//!
//! ```text
//!  engine: can_use_tool ─► a kept decision matches? ─ yes ─► answered at once (session-rule)
//!                                   │ no
//!                                   ▼
//!                 PutApproval + approval.requested ─► corral approvals / HTTP / the page
//!                                   │    (the run keeps its slot; its run clock stops)
//!  a person answers (AnswerApproval, once) ─► SessionActor ─► worker ─► the engine's stdin
//!  approvals.timeout_s passes ─► denied (timeout)      the run ends ─► denied (run-ended)
//! ```
//!
//! Only a person answers: the daemon refuses an answer from inside any run (`daemon/origin`),
//! and the worker takes answers only from its session actor, which takes them only from
//! `Corral::answer_approval` after the store recorded them.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Worker;
use crate::actors::ledger::{AnswerApproval, DenyLeftApprovals, PutApproval};
use crate::engine::{Engine, EngineEvent, EngineKind, Reply};
use crate::events::{ApprovalTold, Notice, Payload};
use crate::store::approvals::{self, AnsweredBy, Approval, ApprovalStatus, Decision};
use crate::store::events::NewEvent;
use crate::store::prompts::Prompt;

/// The conversation with an engine that asks: its stdin, and what it waits for.
pub(super) struct Talk {
    /// Lines for the engine's stdin (a task writes them); dropped to close it.
    stdin: Option<mpsc::UnboundedSender<String>>,
    /// What the engine waits for, by approval id.
    waiting: HashMap<String, Waiting>,
    /// Whether this run asked anything (its leftovers are denied when it ends).
    asked: bool,
    /// When the run's clock stopped (a request waits): `run.timeout_s` counts the engine's
    /// own time, not the person's.
    paused_at: Option<Instant>,
}

struct Waiting {
    request_id: String,
    input: Value,
    asked_at: Instant,
}

impl Talk {
    pub(super) fn new(stdin: Option<mpsc::UnboundedSender<String>>) -> Talk {
        Talk {
            stdin,
            waiting: HashMap::new(),
            asked: false,
            paused_at: None,
        }
    }

    /// Whether the engine waits for a person now (the run's clock stands still).
    pub(super) fn waits(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Closes the engine's stdin: after its final line, so that it exits (claude waits for
    /// more input while stdin is open).
    pub(super) fn close(&mut self) {
        self.stdin = None;
    }

    fn send(&self, line: Option<String>) {
        if let (Some(stdin), Some(line)) = (&self.stdin, line) {
            // A closed channel: the engine is gone, nobody waits for the answer.
            let _ = stdin.send(line);
        }
    }

    /// When the oldest request runs out of `timeout`, if one waits and a timeout is set.
    pub(super) fn next_timeout(&self, timeout: Option<Duration>) -> Option<Instant> {
        let timeout = timeout?;
        self.waiting
            .values()
            .map(|waiting| waiting.asked_at + timeout)
            .min()
    }

    /// Stops the run's clock as a request starts to wait.
    fn pause(&mut self) {
        self.paused_at.get_or_insert_with(Instant::now);
    }

    /// How long the run's clock stood still, once nothing waits any more (to move the run's
    /// deadline by).
    pub(super) fn resume(&mut self) -> Option<Duration> {
        if self.waits() {
            return None;
        }
        self.paused_at.take().map(|at| at.elapsed())
    }
}

/// Writes `lines` to the engine's stdin from a task of its own (an engine that prints before
/// it reads must not wait on us while we wait on it); the first is the prompt. Closing the
/// channel closes stdin.
pub(super) fn stdin_writer(
    mut pipe: tokio::process::ChildStdin,
    first: String,
) -> mpsc::UnboundedSender<String> {
    use tokio::io::AsyncWriteExt;
    let (lines, mut receiver) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        if pipe.write_all(first.as_bytes()).await.is_err() {
            return;
        }
        while let Some(mut line) = receiver.recv().await {
            line.push('\n');
            // The engine exited without reading it: nobody waits for it.
            if pipe.write_all(line.as_bytes()).await.is_err() || pipe.flush().await.is_err() {
                return;
            }
        }
        let _ = pipe.shutdown().await;
    });
    lines
}

/// The words a denied request's engine is told.
fn denial_words(approval: &Approval) -> String {
    let who = match approval.answered_by {
        Some(AnsweredBy::Timeout) => "nobody answered in time".to_string(),
        Some(AnsweredBy::RunEnded) => "its run ended".to_string(),
        Some(AnsweredBy::SessionRule) => "a person denied it for this session".to_string(),
        _ => "a person denied it".to_string(),
    };
    match &approval.answer_reason {
        Some(reason) if !reason.is_empty() => format!("{who}: {reason}"),
        _ => who,
    }
}

impl Worker {
    /// The engine asked: answered at once by a decision the person kept for the session, or
    /// stored for a person (the run's clock stops). Returns why it could not be stored, if
    /// it could not (the engine is then told no, and the run goes on).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn ask_person(
        &mut self,
        prompt: &Prompt,
        run_id: &str,
        kind: EngineKind,
        adapter: &dyn Engine,
        asked: EngineEvent,
        talk: &mut Talk,
        batch: &mut Vec<NewEvent>,
    ) -> Option<crate::actors::ledger::LedgerError> {
        let (request_id, tool, target, reason, input) = match asked {
            EngineEvent::Asks {
                request_id,
                tool,
                target,
                reason,
                input,
            } => (request_id, tool, target, reason, input),
            EngineEvent::AsksUnknown { request_id, what } => {
                let message = format!("corral does not handle the request '{what}'");
                talk.send(adapter.reply(&request_id, Reply::Unsupported { message: &message }));
                batch.push(self.new_event(
                    prompt,
                    run_id,
                    Payload::Notice(Notice::new(format!(
                        "the engine asked '{what}', which corral does not handle: answered with an error"
                    ))),
                ));
                return None;
            }
            _ => return None,
        };
        talk.asked = true;
        let rule = self
            .session_rules()
            .iter()
            .find(|rule| {
                rule.tool == tool
                    && rule
                        .pattern
                        .as_deref()
                        .is_some_and(|pattern| approvals::matches(pattern, target.as_deref()))
            })
            .cloned();
        let now = crate::store::now_ms();
        let mut approval = Approval {
            id: uuid::Uuid::now_v7().to_string(),
            session_id: self.session_id.clone(),
            prompt_id: Some(prompt.id.clone()),
            run_id: Some(run_id.to_string()),
            engine: kind,
            tool,
            target,
            reason,
            input,
            asked_at: now,
            status: ApprovalStatus::Pending,
            answered_at: None,
            answered_by: None,
            answer_reason: None,
            pattern: None,
            node_id: self.shared.coordination.node_id().map(str::to_string),
        };
        if let Some(rule) = &rule {
            approval.status = rule.status;
            approval.answered_at = Some(now);
            approval.answered_by = Some(AnsweredBy::SessionRule);
            approval.answer_reason = Some(format!(
                "kept for the session by approval {} ({})",
                rule.id,
                rule.pattern.as_deref().unwrap_or_default()
            ));
        }
        let told = ApprovalTold {
            approval: serde_json::to_value(&approval).unwrap_or_default(),
        };
        let payload = if rule.is_some() {
            Payload::ApprovalAnswered(told)
        } else {
            Payload::ApprovalRequested(told)
        };
        batch.push(self.new_event(prompt, run_id, payload));
        let stored = self
            .write_events(
                PutApproval {
                    approval: approval.clone(),
                },
                std::mem::take(batch),
            )
            .await;
        if let Err(unwritten) = stored {
            // Nobody could answer a request that is not stored: the engine is told no.
            let words = format!("corral could not record the request: {}", unwritten.error);
            talk.send(adapter.reply(&request_id, Reply::Deny { message: &words }));
            return Some(unwritten.error);
        }
        if rule.is_some() {
            self.reply(adapter, talk, &approval, &request_id, &approval.input);
            return None;
        }
        if let Some(place) = &self.stops.place {
            let asked = match &approval.target {
                Some(target) => format!("{}: {target}", approval.tool),
                None => approval.tool.clone(),
            };
            self.shared
                .notifier
                .notify(crate::actors::notifier::Notification::needs_you(
                    &place.told,
                    &prompt.id,
                    &asked,
                    serde_json::to_value(&approval).unwrap_or_default(),
                ));
        }
        talk.waiting.insert(
            approval.id.clone(),
            Waiting {
                request_id,
                input: approval.input,
                asked_at: Instant::now(),
            },
        );
        talk.pause();
        None
    }

    /// A person's answer, as the store recorded it: the engine is told, and a decision kept
    /// for the session answers its later requests alike.
    pub(super) fn take_answer(
        &mut self,
        adapter: &dyn Engine,
        talk: &mut Talk,
        answered: Approval,
    ) {
        let Some(waiting) = talk.waiting.remove(&answered.id) else {
            return;
        };
        if answered.pattern.is_some() && answered.answered_by == Some(AnsweredBy::Person) {
            self.session_rules().insert(0, answered.clone());
        }
        self.reply(
            adapter,
            talk,
            &answered,
            &waiting.request_id,
            &waiting.input,
        );
    }

    fn reply(
        &self,
        adapter: &dyn Engine,
        talk: &Talk,
        approval: &Approval,
        request_id: &str,
        input: &Value,
    ) {
        let words;
        let reply = if approval.status == ApprovalStatus::Approved {
            Reply::Allow { input }
        } else {
            words = denial_words(approval);
            Reply::Deny { message: &words }
        };
        talk.send(adapter.reply(request_id, reply));
    }

    /// Denies the requests that waited past `approvals.timeout_s`, saying so. One a person
    /// answered meanwhile keeps the person's answer (it arrives as any answer does).
    pub(super) async fn time_out(
        &mut self,
        adapter: &dyn Engine,
        talk: &mut Talk,
        timeout: Duration,
    ) {
        let now = Instant::now();
        let expired: Vec<String> = talk
            .waiting
            .iter()
            .filter(|(_, waiting)| waiting.asked_at + timeout <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            let write = AnswerApproval {
                id: id.clone(),
                answer: approvals::Answer {
                    decision: Decision::Deny,
                    by: AnsweredBy::Timeout,
                    reason: Some(format!(
                        "no answer within approvals.timeout_s ({} s)",
                        timeout.as_secs()
                    )),
                    pattern: None,
                },
            };
            match self.shared.ledger.write(write).await {
                Ok((approvals::Answered::Now(denied), told)) => {
                    self.publish(told);
                    self.take_answer(adapter, talk, denied);
                }
                // Answered by a person meanwhile (its answer is on its way), or gone.
                Ok(_) => {
                    if let Some(waiting) = talk.waiting.get_mut(&id) {
                        waiting.asked_at = now;
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, approval = id, "an approval's timeout was not recorded");
                    if let Some(waiting) = talk.waiting.get_mut(&id) {
                        waiting.asked_at = now;
                    }
                }
            }
        }
    }

    /// The run ended: whatever it left waiting is denied (`run-ended`), since no engine waits
    /// for the answer any more.
    pub(super) async fn end_asking(&mut self, run_id: &str, talk: &mut Talk, why: &str) {
        talk.close();
        if !talk.asked {
            return;
        }
        let write = DenyLeftApprovals {
            run_id: Some(run_id.to_string()),
            node_id: self.shared.coordination.node_id().map(str::to_string),
            reason: why.to_string(),
        };
        match self.shared.ledger.write(write).await {
            Ok(told) => self.publish(told),
            Err(error) => tracing::warn!(%error, run_id, "approvals left by a run were not denied"),
        }
        talk.waiting.clear();
    }

    /// The decisions a person kept for this session, newest first (read once per worker).
    fn session_rules(&mut self) -> &mut Vec<Approval> {
        if self.session_rules.is_none() {
            let rules = self
                .shared
                .readers
                .read(|connection| approvals::session_rules(connection, &self.session_id))
                .unwrap_or_else(|error| {
                    tracing::warn!(%error, "the session's kept approvals were not read");
                    Vec::new()
                });
            self.session_rules = Some(rules);
        }
        self.session_rules.get_or_insert_with(Vec::new)
    }
}
