//! The session actor: one per session with work. It owns the session's engine children.
//!
//! The actor itself only takes messages ([`StartWork`], [`CancelPrompt`]); the work is a
//! *worker* future spawned on the actor's context, which runs the session's prompts one after
//! the other:
//!
//! ```text
//! prompt ─► ask the slot manager ─► spawn the engine (own process group, prompt on stdin)
//!    ▲          (cancellable)          │ stdout/stderr line by line ─► events (ledger)
//!    │                                 ▼
//!    │                       judge the run (last structured line, then exit status)
//!    │                                 │ failed: classify ─► retry policy
//!    │       release the slot, sleep the delay (cancellable) ◄┘      │
//!    └─ finish the prompt and claim the next one, in one transaction ◄┘ done / failed
//! ```
//!
//! Cancelling the running prompt wakes whatever the worker waits on at once: the slot, the
//! retry delay, or the child, whose whole process group is ended (SIGTERM, then SIGKILL after
//! `cancel.grace_ms`).
//!
//! A store another program locks: every write of the worker waits for it (in the ledger), so
//! the worker reads no more of its child's output meanwhile (the child blocks on its full
//! pipe). A write the ledger gives up past `store.lock_timeout_ms` never ran: its events stay
//! deferred, in order (`try_store_events`, `write_events`), the run fails (`child.rs`), and the
//! run's and prompt's ends are retried until they are stored (`write_events_until_stored`).
//! At a shutdown the ledger gives such writes up at once; what the worker still holds then
//! goes to the session's spill file (`spill_deferred`, `store::spill`), stored by the next
//! boot before anything else; the run and the prompt stay running in the store, for that
//! boot to close and requeue.
//!
//! The files: this one holds the actor and the worker's outer loop (a prompt's end, the next
//! prompt claimed in the same transaction); `prompt.rs` one prompt's attempts, step by step;
//! `retry.rs` the policy (pure); `child.rs` a run as a child process; `app_turn.rs` a run as
//! a turn of the project's app-server; `setup.rs` a session's own worktree made usable before
//! a prompt's first attempt (made, set up with the project's setup command, or found gone).

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use tokio::sync::watch;

mod adopt;
mod app_turn;
mod asking;
mod child;
mod prompt;
pub mod retry;
mod setup;
mod spool;

use super::ledger::{
    AppendEvents, Both, EndRun, Fenced, FinishPrompt, LedgerError, LedgerWrite, RequeuePrompt,
    SetGeneratedTitle, SetThread, Unwritten, WithEvents,
};
use super::life::Working;
use super::notifier::{self, Notification};
use super::shared::Shared;
use crate::engine::{FailureClass, RunVerdict};
use crate::events::{Payload, PromptEnded, PromptRequeued, TitleGenerated};
use crate::store::approvals::Approval;
use crate::store::daemons::Claim;
use crate::store::dependencies::Released;
use crate::store::events::NewEvent;
use crate::store::pauses::{Pause, PauseScope, PauseSet};
use crate::store::prompts::{ClaimBy, PutBack};
use crate::store::prompts::{Prompt, PromptStatus};
use crate::store::runs::RunEnd;
use crate::store::settings::NotifyKind;
use crate::store::spill::{self, SpilledEvent};
pub(crate) use child::guard_mark;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::Instrument;

/// A wait for a slot longer than this is announced with a `slot.waiting` event (a grant that
/// comes at once, the common case, costs no event).
const SLOT_NOTICE: Duration = Duration::from_millis(20);

/// Events gathered before they are handed to the ledger in one write.
const EVENT_BATCH: usize = 256;

/// The actor. Private: the supervisor starts it and talks to it through its `Addr`.
pub struct SessionActor {
    session_id: String,
    shared: Arc<Shared>,
    /// The id of the prompt whose cancellation was asked last; the worker ends its current
    /// prompt when this names it.
    cancel: watch::Sender<Option<String>>,
    /// Whether a worker future is running: it is counted in the supervisor's `working` for
    /// as long as this is held.
    working: Option<Working>,
    /// A prompt handed over while the worker was finishing: the worker's last transaction
    /// found nothing queued, then a send claimed this one before the worker future ended.
    /// It starts as soon as that future ends.
    pending: Option<Prompt>,
    /// The running worker's inbox for answered approvals (`AnswerRun`).
    answers: Option<tokio::sync::mpsc::UnboundedSender<Approval>>,
    /// Where the prompts of other sessions that a prompt's end let run are handed.
    elsewhere: Recipient<StartElsewhere>,
}

impl SessionActor {
    pub fn new(
        session_id: String,
        shared: Arc<Shared>,
        elsewhere: Recipient<StartElsewhere>,
    ) -> Self {
        SessionActor {
            session_id,
            shared,
            elsewhere,
            cancel: watch::channel(None).0,
            working: None,
            pending: None,
            answers: None,
        }
    }
}

impl Actor for SessionActor {
    type Context = Context<Self>;
}

/// Runs `prompt` (already `running` in the store) and then the session's queued prompts.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StartWork(pub Prompt);

/// Prompts of other sessions, `running` in the store, that a prompt's end here let run
/// (`store::dependencies`): for their sessions' workers (the supervisor's to hand on).
#[derive(Message)]
#[rtype(result = "()")]
pub struct StartElsewhere(pub Vec<Prompt>);

impl Handler<StartWork> for SessionActor {
    type Result = ();

    fn handle(&mut self, StartWork(prompt): StartWork, ctx: &mut Context<Self>) {
        // A cancel asked of this prompt before was of its last time through: a prompt that
        // starts again (`corral retry`) starts uncancelled. (A cancel of this start comes
        // after it: the supervisor hands messages on in order.)
        self.cancel.send_if_modified(|asked| {
            let stale = asked.as_deref() == Some(prompt.id.as_str());
            if stale {
                *asked = None;
            }
            stale
        });
        if self.working.is_some() {
            self.pending = Some(prompt);
            return;
        }
        self.start_worker(prompt, ctx);
    }
}

impl SessionActor {
    fn start_worker(&mut self, prompt: Prompt, ctx: &mut Context<Self>) {
        self.working = Some(self.shared.life.begin_work());
        let fenced = Arc::new(AtomicBool::new(false));
        let shutdown = self.shared.coordination.stop_signal(
            self.shared.life.shutdown_signal(),
            prompt.claim.as_ref(),
            &fenced,
        );
        let (answers, inbox) = tokio::sync::mpsc::unbounded_channel();
        self.answers = Some(answers);
        let worker = Worker {
            answers: inbox,
            session_rules: None,
            session_id: self.session_id.clone(),
            stops: Stops {
                cancel: self.cancel.subscribe(),
                shutdown,
                pauses: self.shared.pauses.watch(),
                place: None,
            },
            shared: self.shared.clone(),
            elsewhere: self.elsewhere.clone(),
            driver_written: None,
            pending_end: None,
            pending_thread: None,
            deferred: Vec::new(),
            claim: prompt.claim.clone(),
            fenced,
            denied: 0,
        };
        // Every line the daemon logs while this worker runs names its session.
        let span = tracing::info_span!("session", id = %self.session_id);
        let work = worker.run(prompt).instrument(span);
        ctx.spawn(work.into_actor(self).map(|_, actor, ctx| {
            actor.working = None;
            if let Some(prompt) = actor.pending.take() {
                actor.start_worker(prompt, ctx);
            }
        }));
    }
}

/// An approval a person answered (as the store recorded it), for the run that waits for it.
/// A worker that does not wait for it (its run ended) drops it.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AnswerRun(pub Approval);

impl Handler<AnswerRun> for SessionActor {
    type Result = ();

    fn handle(&mut self, AnswerRun(approval): AnswerRun, _: &mut Context<Self>) {
        if let Some(answers) = &self.answers {
            let _ = answers.send(approval);
        }
    }
}

/// Ends the running prompt `prompt_id` if this session runs it now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct CancelPrompt(pub String);

impl Handler<CancelPrompt> for SessionActor {
    type Result = ();

    fn handle(&mut self, CancelPrompt(prompt_id): CancelPrompt, _: &mut Context<Self>) {
        self.cancel.send_replace(Some(prompt_id));
    }
}

// ---------------------------------------------------------------------------------------------
// The worker.

struct Worker {
    session_id: String,
    shared: Arc<Shared>,
    /// See [`SessionActor::elsewhere`].
    elsewhere: Recipient<StartElsewhere>,
    /// What stops the prompt under way: a cancel, the daemon's shutdown, a pause.
    stops: Stops,
    /// What this worker last wrote to the session's driver file (app-server turns), so that
    /// an unchanged driver costs no file write.
    driver_written: Option<Option<String>>,
    /// The end of the prompt's last run, written with the prompt's end (one commit); a run
    /// followed by a retry is written at once instead.
    pending_end: Option<RunEnd>,
    /// Where the session's thread stands after a successful run (its resume point), written
    /// with the prompt's end.
    pending_thread: Option<SetThread>,
    /// Events not stored yet, in order: they go with the next write (the run's row, the
    /// prompt's end), so that a quick turn costs three commits in all — its prompt queued, its
    /// run started, its prompt ended — however many events it has. Every write of events
    /// takes these first, so the order of a session's events is kept.
    deferred: Vec<NewEvent>,
    /// On a shared store, the claim its prompt is held under: every write about the prompt
    /// carries it ([`Fenced`]), so none commits once the lease is gone.
    claim: Option<Claim>,
    /// Set once a write was refused by the fence or the lease was lost: the worker stops and
    /// writes, requeues or spills nothing more (another daemon owns the prompt now).
    fenced: Arc<AtomicBool>,
    /// The tool uses the engine refused in the current prompt's runs (`tool.denied`), told
    /// with its end (`denied`) so that a refusal is never a silent success.
    denied: u64,
    /// Approvals a person answered, from the session actor (`AnswerRun`).
    answers: tokio::sync::mpsc::UnboundedReceiver<Approval>,
    /// The decisions a person kept for the session (`asking.rs`), read when first needed.
    session_rules: Option<Vec<Approval>>,
}

/// Why the worker stopped waiting for a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The prompt was cancelled.
    Cancel,
    /// The daemon shuts down: the prompt goes back to the queue.
    Shutdown,
    /// A pause covers the session (`store::pauses`): the prompt goes back to the head of its
    /// queue, to run when the pause is lifted.
    Pause,
}

impl Stop {
    /// What ended the run, as its `run.exited` says (`ended_by`).
    fn ended_by(self) -> &'static str {
        match self {
            Stop::Cancel => "cancelled",
            Stop::Shutdown => "daemon shutdown",
            Stop::Pause => "paused",
        }
    }
}

/// What the worker is doing when it asks what stops it: a pause holds back a run that has
/// not started (a slot, a retry's delay, an app-server's child waited for), and interrupts
/// one under way only when it was made `--now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum While {
    Starting,
    Running,
}

/// Where the session stands, for a pause to cover it: its project and the project's groups,
/// read with each prompt (`PromptRun`).
struct Place {
    project_id: String,
    groups: Vec<String>,
    /// The session and project as a notification names them.
    told: notifier::Place,
}

/// What may stop a worker's prompt, each watched: its cancel, the daemon's shutdown, and the
/// pauses in force (`Shared::pauses`) with where the session stands.
struct Stops {
    cancel: watch::Receiver<Option<String>>,
    /// Set when the daemon shuts down: the current prompt is requeued, not cancelled.
    shutdown: watch::Receiver<bool>,
    pauses: watch::Receiver<Arc<PauseSet>>,
    /// The prompt under way's session's place; `None` before it is read (nothing is held).
    place: Option<Place>,
}

impl Stops {
    fn is_cancelled(&self, prompt_id: &str) -> bool {
        self.cancel.borrow().as_deref() == Some(prompt_id)
    }

    fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// The pause that holds `session_id` now, if one does while it is `doing` so.
    fn pause(&self, session_id: &str, doing: While) -> Option<Pause> {
        let place = self.place.as_ref()?;
        let pauses = self.pauses.borrow();
        pauses
            .covers(
                session_id,
                &place.project_id,
                &place.groups,
                doing == While::Running,
            )
            .cloned()
    }

    /// Resolves when `prompt_id` is cancelled, the daemon shuts down, or a pause covers the
    /// session while it is `doing` so.
    async fn stopped(&mut self, session_id: &str, prompt_id: &str, doing: While) -> Stop {
        let Stops {
            cancel,
            shutdown,
            pauses,
            place,
        } = self;
        let cancelled = async {
            loop {
                if cancel.borrow_and_update().as_deref() == Some(prompt_id) {
                    return Stop::Cancel;
                }
                if cancel.changed().await.is_err() {
                    // The actor is gone: nobody can cancel any more.
                    std::future::pending::<()>().await;
                }
            }
        };
        let shutting_down = async {
            loop {
                if *shutdown.borrow_and_update() {
                    return Stop::Shutdown;
                }
                if shutdown.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        let paused = async {
            let Some(place) = place.as_ref() else {
                return std::future::pending().await;
            };
            loop {
                let held = pauses
                    .borrow_and_update()
                    .covers(
                        session_id,
                        &place.project_id,
                        &place.groups,
                        doing == While::Running,
                    )
                    .is_some();
                if held {
                    return Stop::Pause;
                }
                if pauses.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            stop = cancelled => stop,
            stop = shutting_down => stop,
            stop = paused => stop,
        }
    }
}

/// How a prompt ended.
struct PromptEnd {
    status: PromptStatus,
    error: Option<String>,
    answer: Option<String>,
    /// Stopped by a shutdown or a pause: back to the queue rather than ended.
    requeue: Option<Stop>,
    /// Its run was handed over to its shim for the next daemon to adopt: the prompt stays
    /// running, and nothing more of it is written here.
    handed_over: bool,
}

impl PromptEnd {
    fn failed(message: impl Into<String>) -> Self {
        PromptEnd {
            status: PromptStatus::Failed,
            error: Some(message.into()),
            answer: None,
            requeue: None,
            handed_over: false,
        }
    }

    fn stopped(stop: Stop) -> Self {
        PromptEnd {
            status: PromptStatus::Cancelled,
            error: None,
            answer: None,
            requeue: (stop != Stop::Cancel).then_some(stop),
            handed_over: false,
        }
    }

    fn handed_over() -> Self {
        PromptEnd {
            status: PromptStatus::Running,
            error: None,
            answer: None,
            requeue: None,
            handed_over: true,
        }
    }
}

/// How one run ended, before the policy decides.
enum RunOutcome {
    Finished {
        verdict: RunVerdict,
        exit_code: Option<i32>,
        signal: Option<String>,
        answer: Option<String>,
        /// The class when the engine said it in a structured way (an HTTP status, app-server's
        /// `codexErrorInfo`, a closed transport); else it is read from the words.
        class: Option<FailureClass>,
        /// The provider's Retry-After, when the engine reported it.
        retry_after: Option<Duration>,
        /// The run's other words about its failure (notices, the stderr tail), which may name
        /// a writer conflict or a lost rollout when the failure itself does not.
        context: Vec<String>,
        /// Where the conversation stands after a successful run, if the engine says.
        resume_point: Option<String>,
    },
    /// Cancelled or stopped by a shutdown; how the engine's process ended, if it had one.
    Stopped(Stop, Exit),
    /// Left running to its shim at a hand-over (see [`PromptEnd::handed_over`]).
    HandedOver,
    TimedOut(Exit),
}

impl RunOutcome {
    /// A run that failed before the engine could say anything.
    fn failed(message: String) -> RunOutcome {
        RunOutcome::Finished {
            verdict: RunVerdict::Failed { message },
            exit_code: None,
            signal: None,
            answer: None,
            class: None,
            retry_after: None,
            context: Vec::new(),
            resume_point: None,
        }
    }
}

/// How an engine's process ended: its exit code, or the signal that killed it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Exit {
    code: Option<i32>,
    signal: Option<String>,
}

impl Exit {
    fn of(status: Option<std::process::ExitStatus>) -> Exit {
        Exit {
            code: status.and_then(|status| status.code()),
            signal: status
                .and_then(|status| std::os::unix::process::ExitStatusExt::signal(&status))
                .map(crate::process::signal_name),
        }
    }
}

impl Worker {
    /// Runs the prompts, then keeps in the spill journal what a shutdown during a store lock
    /// left unstored.
    async fn run(mut self, first: Prompt) {
        self.work(first).await;
        self.spill_deferred();
    }

    async fn work(&mut self, first: Prompt) {
        let mut next = Some(first);
        while let Some(prompt) = next {
            let prompt_id = prompt.id.clone();
            // What a notification of its end says of it (its start: the text may be long).
            let text_head: String = prompt.text.chars().take(600).collect();
            self.claim = prompt.claim.clone();
            self.denied = 0;
            let end = if self.stops.is_shutting_down() || self.shared.life.is_draining() {
                PromptEnd::stopped(Stop::Shutdown)
            } else {
                let span = tracing::info_span!("prompt", id = %prompt_id);
                self.run_prompt(prompt).instrument(span).await
            };
            if end.handed_over {
                // The next daemon adopts the run and finishes the prompt.
                return;
            }
            if self.is_fenced() {
                // What follows is still tried, and refused by the fence in the store: the
                // lease is gone there, so nothing of it can commit (`status` counts them).
                tracing::warn!(
                    prompt_id,
                    session = self.session_id,
                    "the lease this prompt was claimed under is gone: it is left to the daemon that takes it over"
                );
            }
            if let Some(stop) = end.requeue {
                self.flush_end().await;
                // A pause's requeue claims the session's head again in its own write: a
                // resume that came first found the prompt still running and left it be.
                let again = match stop {
                    Stop::Pause => Some(match &self.claim {
                        Some(claim) => ClaimBy::Daemon(claim.clone()),
                        None => ClaimBy::Alone,
                    }),
                    _ => None,
                };
                let put_back = self
                    .shared
                    .ledger
                    .write(self.fence(RequeuePrompt {
                        prompt_id: prompt_id.clone(),
                        again,
                    }))
                    .await;
                let claimed = match &put_back {
                    Ok((_, claimed)) => claimed.clone(),
                    Err(_) => None,
                };
                let payload = match put_back.map(|(put_back, _)| put_back) {
                    Ok(PutBack::Cancelled) => Payload::PromptCancelled(PromptEnded {
                        error: Some("cancelled while its daemon shut down".into()),
                        ..PromptEnded::default()
                    }),
                    _ => Payload::PromptRequeued(PromptRequeued {
                        reason: match stop {
                            Stop::Pause => {
                                match self.stops.pause(&self.session_id, While::Starting) {
                                    Some(pause) => format!("paused: {}", pause.describe()),
                                    None => "paused".into(),
                                }
                            }
                            _ => "daemon shutdown".into(),
                        },
                    }),
                };
                self.event(Some(&prompt_id), None, payload).await;
                if claimed.is_none() {
                    return;
                }
                next = claimed;
                continue;
            }
            // The prompt's end is committed before its event is published, so that whoever
            // reacts to the event reads the final state.
            let told = PromptEnded {
                error: end.error.clone(),
                answer: end.answer.clone(),
                denied: (self.denied > 0).then_some(self.denied),
            };
            let payload = match end.status {
                PromptStatus::Done => Payload::PromptDone(told),
                PromptStatus::Failed => Payload::PromptFailed(told),
                PromptStatus::Cancelled => Payload::PromptCancelled(told),
                // Not an end: told as the worker's bookkeeping always told it.
                other => Payload::Other(other.end_event(), Payload::PromptDone(told).to_value()),
            };
            let ended = self.session_event(Some(&prompt_id), None, payload);
            let shared_with_others = self.shared.coordination.with_others();
            let finish = FinishPrompt {
                prompt_id: prompt_id.clone(),
                session_id: self.session_id.clone(),
                status: end.status,
                error: end.error.clone(),
                answer: end.answer.clone(),
                denied: self.denied as i64,
                claimer: match &self.claim {
                    Some(claim) => ClaimBy::Daemon(claim.clone()),
                    None => ClaimBy::Alone,
                },
                announce: shared_with_others,
                total: self
                    .shared
                    .settings()
                    .slots_total
                    .filter(|_| shared_with_others),
            };
            // One commit for the last run's end, the prompt's end, its events and the ones
            // still deferred; the events are published after it.
            let last_run = self.pending_end.take().map(|end| EndRun { end });
            let thread = self.pending_thread.take();
            let finished = self
                .write_events_until_stored(Both(Both(last_run, finish), thread), vec![ended])
                .await
                .map(|((_, finished), _)| finished);
            if let Ok(finished) = &finished {
                self.tell_ended(&prompt_id, &text_head, &end, finished.paused.clone());
                self.let_go(finished.released.clone());
            }
            let slot_free = shared_with_others && !matches!(&finished, Ok(f) if f.next.is_some());
            // A slot is free here: another session's queued prompt may take it; or its end let
            // heads go that only the claims take (a shared store: `store::dependencies`).
            if slot_free || matches!(&finished, Ok(f) if f.released.unclaimed) {
                self.shared.coordination.wake_claimer();
            }
            next = match finished {
                Ok(finished) => finished.next,
                Err(error) => {
                    tracing::error!(%error, prompt_id, "could not finish the prompt");
                    if self.stops.is_shutting_down() {
                        // The prompt stays running in the store, and the next boot requeues
                        // it: its end is not told (the rest is spilled, `spill_deferred`).
                        self.deferred.retain(|event| {
                            !(event.kind.ends_prompt()
                                && event.prompt_id.as_deref() == Some(prompt_id.as_str()))
                        });
                    }
                    None
                }
            };
        }
    }

    /// Hands on what the end of a prompt here did to the prompts that run after it: the
    /// failures it stored are published, the heads it claimed start on their sessions.
    fn let_go(&self, released: Released) {
        if !released.told.is_empty() {
            self.shared.publisher.publish(released.told);
        }
        if !released.started.is_empty() {
            self.elsewhere.do_send(StartElsewhere(released.started));
        }
    }

    /// Tells a person of a prompt's end (`actors::notifier`), and of the pause its failure
    /// made (`pause_on_failure`: the pauses in force then), which the other workers of the
    /// project hold to from now on.
    fn tell_ended(&self, prompt_id: &str, text: &str, end: &PromptEnd, paused: Option<Vec<Pause>>) {
        let kind = match end.status {
            PromptStatus::Done => NotifyKind::PromptDone,
            PromptStatus::Failed => NotifyKind::PromptFailed,
            PromptStatus::Cancelled => NotifyKind::PromptCancelled,
            _ => return,
        };
        let Some(place) = &self.stops.place else {
            return;
        };
        self.shared.notifier.notify(Notification::prompt_ended(
            &place.told,
            kind,
            (prompt_id, text),
            end.answer.as_deref(),
            end.error.as_deref(),
        ));
        let Some(pauses) = paused else {
            return;
        };
        let mine = PauseScope::Project(place.project_id.clone());
        if let Some(pause) = pauses.iter().find(|pause| pause.scope == mine) {
            self.shared.notifier.notify(Notification::paused(
                pause,
                place.told.project_kinds.clone(),
            ));
        }
        self.shared.pauses.replace(pauses);
    }

    fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    /// `write` carrying the claim of the worker's prompt.
    fn fence<W>(&self, write: W) -> Fenced<W> {
        Fenced {
            claim: self.claim.clone(),
            write,
        }
    }

    /// Tells the lease a write was refused by the fence: this worker stops (its stop signal
    /// fires), and so does every worker of the same claim.
    fn note_fenced(&self, error: &LedgerError) {
        if error.store_error().is_some_and(|error| error.is_fenced()) {
            self.fenced.store(true, Ordering::SeqCst);
            self.shared.coordination.fenced(self.claim.as_ref());
        }
    }

    fn is_cancelled(&self, prompt_id: &str) -> bool {
        self.stops.is_cancelled(prompt_id)
    }

    /// Stores one event now (with the deferred ones before it) and publishes it.
    async fn event(&mut self, prompt_id: Option<&str>, run_id: Option<&str>, payload: Payload) {
        let event = self.session_event(prompt_id, run_id, payload);
        self.store_events(vec![event]).await;
    }

    /// An event of this session.
    fn session_event(
        &self,
        prompt_id: Option<&str>,
        run_id: Option<&str>,
        payload: Payload,
    ) -> NewEvent {
        NewEvent::new(
            self.session_id.clone(),
            prompt_id.map(str::to_string),
            run_id.map(str::to_string),
            payload,
        )
    }

    /// Stores `events` now, after the deferred ones. When they cannot be stored they stay
    /// deferred (see [`try_store_events`](Self::try_store_events)) and go with the next write.
    async fn store_events(&mut self, events: Vec<NewEvent>) {
        if let Err(error) = self.try_store_events(events).await {
            tracing::warn!(%error, session = self.session_id, "events kept for the next write");
        }
    }

    /// Stores `events` now, after the deferred ones, and publishes them. A write that never
    /// ran (the store stayed locked past `store.lock_timeout_ms`) leaves them all deferred, in
    /// order, ahead of any later event: nothing is dropped, and no number is skipped since
    /// numbers are given in the transaction that commits.
    async fn try_store_events(&mut self, events: Vec<NewEvent>) -> Result<(), LedgerError> {
        let events = self.take_deferred(events);
        if events.is_empty() {
            return Ok(());
        }
        match self
            .shared
            .ledger
            .write_keeping(self.fence(AppendEvents { events }))
            .await
        {
            Ok(stored) => {
                self.publish(stored);
                Ok(())
            }
            Err(Unwritten { error, write }) => {
                self.note_fenced(&error);
                match write {
                    Some(Fenced {
                        write: AppendEvents { events },
                        ..
                    }) => self.keep_deferred(events),
                    None => tracing::error!(%error, "events not stored"),
                }
                Err(error)
            }
        }
    }

    /// Applies `write` with the deferred events and `events` in one commit, then publishes
    /// the events. A write that never ran leaves its events deferred (as in
    /// [`try_store_events`](Self::try_store_events)) and comes back in the error.
    async fn write_events<W: LedgerWrite>(
        &mut self,
        write: W,
        events: Vec<NewEvent>,
    ) -> Result<W::Output, Unwritten<W>> {
        let events = self.take_deferred(events);
        match self
            .shared
            .ledger
            .write_keeping(self.fence(WithEvents { write, events }))
            .await
        {
            Ok((output, stored)) => {
                self.publish(stored);
                Ok(output)
            }
            Err(Unwritten { error, write }) => {
                self.note_fenced(&error);
                Err(Unwritten {
                    write: write.map(|Fenced { write, .. }| {
                        let WithEvents { write, events } = write;
                        self.keep_deferred(events);
                        write
                    }),
                    error,
                })
            }
        }
    }

    /// [`write_events`](Self::write_events) until it commits, for the writes a prompt's state
    /// needs (a run's end, the prompt's end): a store that stays locked past
    /// `store.lock_timeout_ms` is waited out again and again (each try waits that long in the
    /// ledger, so this does not spin), until the daemon shuts down. Giving such a write up
    /// would leave its prompt running in the store with no worker.
    async fn write_events_until_stored<W: LedgerWrite>(
        &mut self,
        mut write: W,
        mut events: Vec<NewEvent>,
    ) -> Result<W::Output, LedgerError> {
        loop {
            match self.write_events(write, std::mem::take(&mut events)).await {
                Ok(output) => return Ok(output),
                Err(Unwritten {
                    error,
                    write: Some(kept),
                }) if error.is_transient() && !self.stops.is_shutting_down() => {
                    tracing::warn!(%error, session = self.session_id, "trying the write again");
                    write = kept;
                }
                Err(unwritten) => return Err(unwritten.error),
            }
        }
    }

    /// Writes the events still deferred when the worker ends at a shutdown (the store stayed
    /// locked, so their writes were given up) to the session's spill file,
    /// `HOME/spill/<session id>.jsonl`: the next boot stores them before anything else
    /// (`supervisor::ingest_spills`). The session's last stored number goes with them, by
    /// which that boot knows a file it stored already.
    fn spill_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let count = self.deferred.len();
        if self.is_fenced() {
            // Never into the spill journal: the next boot would store them about a prompt
            // another daemon runs now.
            tracing::warn!(
                session = self.session_id,
                count,
                "events of a fenced-out run dropped"
            );
            self.deferred.clear();
            return;
        }
        if !self.stops.is_shutting_down() {
            tracing::error!(session = self.session_id, count, "events not stored");
            return;
        }
        let after_seq = self
            .shared
            .readers
            .read(|connection| crate::store::sessions::session(connection, &self.session_id))
            .ok()
            .flatten()
            .map(|session| session.last_event_seq);
        let at = crate::store::now_ms();
        let events: Vec<SpilledEvent> = self
            .deferred
            .iter()
            .map(|event| SpilledEvent::new(event, at, after_seq))
            .collect();
        match spill::write(&self.shared.home, &self.session_id, &events) {
            Ok(path) => {
                tracing::warn!(
                    session = self.session_id,
                    count,
                    path = %path.display(),
                    "events spilled: the store stayed locked; the next start stores them"
                );
                self.deferred.clear();
            }
            Err(error) => {
                tracing::error!(%error, session = self.session_id, count, "events neither stored nor spilled");
            }
        }
    }

    /// Puts events that were not stored back in front of the deferred ones.
    fn keep_deferred(&mut self, mut events: Vec<NewEvent>) {
        events.append(&mut self.deferred);
        self.deferred = events;
    }

    /// Publishes stored events (no subscriber is not an error).
    fn publish(&self, stored: Vec<crate::store::events::Event>) {
        self.shared.publisher.publish(stored);
    }

    /// Whether events wait, deferred, for the next write.
    fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// The deferred events followed by `events`, to go with a write made now.
    fn take_deferred(&mut self, mut events: Vec<NewEvent>) -> Vec<NewEvent> {
        if self.deferred.is_empty() {
            return events;
        }
        let mut all = std::mem::take(&mut self.deferred);
        all.append(&mut events);
        all
    }

    /// Writes a run's end that waits for its prompt's end now, with the deferred events.
    async fn flush_end(&mut self) {
        if let Some(end) = self.pending_end.take() {
            let run_id = end.run_id.clone();
            let closed = self
                .write_events_until_stored(EndRun { end }, Vec::new())
                .await;
            if let Err(error) = closed {
                tracing::error!(%error, run_id, "could not close the run");
            }
        }
    }

    fn new_event(&self, prompt: &Prompt, run_id: &str, payload: impl Into<Payload>) -> NewEvent {
        self.session_event(Some(&prompt.id), Some(run_id), payload.into())
    }

    async fn set_title(
        &self,
        prompt: &Prompt,
        run_id: Option<&str>,
        title: &str,
        batch: &mut Vec<NewEvent>,
    ) {
        let set = self
            .shared
            .ledger
            .write(self.fence(SetGeneratedTitle {
                session_id: self.session_id.clone(),
                title: title.to_string(),
            }))
            .await;
        if matches!(set, Ok(true)) {
            batch.push(self.session_event(
                Some(&prompt.id),
                run_id,
                Payload::TitleGenerated(TitleGenerated {
                    title: title.to_string(),
                }),
            ));
        }
    }
}

/// A jitter factor in `[0.8, 1.2]`, from the clock's nanoseconds (no randomness crate for one
/// jitter).
fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    0.8 + 0.4 * (nanos % 1000) as f64 / 1000.0
}
