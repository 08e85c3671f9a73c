//! The timer of due prompts (`send --at/--in`): a prompt not due yet waits queued (every claim
//! checks `Prompt::due_later`), and this actor claims it when its time comes.
//!
//! It sleeps until the earliest due time still queued (`prompts::next_due`: one seek of an
//! index), read again after each firing and moved earlier when a send queues an earlier one
//! ([`DueHandle::queued`]), or read again when another daemon of a shared store announces
//! queued work ([`DueHandle::rearm`]: its sender may be gone by the time it is due). A
//! firing claims every due head in one ledger write (`ClaimDue`) and hands them to their
//! sessions' workers; on a shared store it wakes the claims instead, which know what each
//! daemon serves and has room for. A prompt whose time came while no daemon
//! ran is claimed by the next daemon's boot, late, as any queued prompt.
//!
//! It keeps the schedules' time too (`store::schedules`): it also sleeps until the earliest
//! firing (`schedules::next_firing`, on the schedules' clock, `clock::schedule_now`) and
//! then tells the firer (`corral::schedules`, which sends through the library's front as a
//! person's send would) with [`FireSchedules`]; it reads the next firing again once the
//! firer has taken what was due ([`DueHandle::schedules_taken`]).

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::ledger::{ClaimDue, Fenced};
use super::shared::Shared;
use super::supervisor::SupervisorHandle;
use crate::clock::{schedule_now, schedule_offset};
use crate::store::now_ms;
use crate::store::{prompts, schedules};

/// The actor, reached through its [`DueHandle`].
struct DueTimer {
    shared: Arc<Shared>,
    supervisor: SupervisorHandle,
    /// The due time it sleeps until, and the sleep (cancelled when an earlier one comes).
    armed: Option<(i64, SpawnHandle)>,
    /// Who sends the schedules' firings (none until the library's front has started it).
    firer: Option<Recipient<FireSchedules>>,
    /// The firer was told and has not taken the firings yet: the schedules' part waits.
    firing: bool,
    /// The earliest due time of a queued prompt it knows of: a firing of schedules alone
    /// claims no prompt (no empty write, no claimer woken).
    prompt_at: Option<i64>,
}

impl Actor for DueTimer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.arm(ctx);
    }
}

impl DueTimer {
    /// Sleeps until the earliest due time after now, if a queued prompt or a schedule has
    /// one.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        let due = match self.shared.readers.read(|c| prompts::next_due(c, now_ms())) {
            Ok(at) => at,
            Err(error) => {
                tracing::warn!(%error, "the next due prompt could not be read");
                None
            }
        };
        self.prompt_at = due;
        let firing = self.next_firing().map(|at| at - schedule_offset());
        if let Some(at) = due.into_iter().chain(firing).min() {
            self.arm_at(at, ctx);
        }
    }

    /// The next firing of a schedule (on the schedules' clock), when the firer can send it.
    fn next_firing(&self) -> Option<i64> {
        if self.firer.is_none() || self.firing {
            return None;
        }
        match self.shared.readers.read(schedules::next_firing) {
            Ok(at) => at,
            Err(error) => {
                tracing::warn!(%error, "the next firing of a schedule could not be read");
                None
            }
        }
    }

    fn arm_at(&mut self, at: i64, ctx: &mut Context<Self>) {
        if let Some((_, sleeping)) = self.armed.take() {
            ctx.cancel_future(sleeping);
        }
        // A millisecond past it: the claim's own clock must read it as due.
        let wait = Duration::from_millis((at - now_ms()).max(0) as u64 + 1);
        let sleeping = ctx.run_later(wait, |this, ctx| {
            this.armed = None;
            this.fire(ctx);
        });
        self.armed = Some((at, sleeping));
    }

    /// Claims the heads due now and has the firer send the schedules due, then sleeps until
    /// the next due time.
    fn fire(&mut self, ctx: &mut Context<Self>) {
        if let Some(firer) = &self.firer {
            if self.next_firing().is_some_and(|at| at <= schedule_now()) {
                self.firing = true;
                firer.do_send(FireSchedules);
            }
        }
        if self.prompt_at.is_none_or(|at| at > now_ms()) {
            self.arm(ctx);
            return;
        }
        if self.shared.coordination.shares_store() {
            self.shared.coordination.wake_claimer();
            self.arm(ctx);
            return;
        }
        let write = Fenced {
            claim: self.shared.coordination.fence(),
            write: ClaimDue {
                now: now_ms(),
                claimer: self.shared.coordination.claimer(),
            },
        };
        let ledger = self.shared.ledger.clone();
        ctx.wait(
            async move { ledger.write(write).await }
                .into_actor(self)
                .map(|claimed, this, ctx| {
                    match claimed {
                        Ok(claimed) => this.supervisor.dispatch_all(claimed),
                        Err(error) => tracing::error!(%error, "the due prompts were not claimed"),
                    }
                    this.arm(ctx);
                }),
        );
    }
}

/// A prompt due at this time (ms) was queued (`prompt`), or a schedule fires then.
#[derive(Message)]
#[rtype(result = "()")]
struct Queued {
    at: i64,
    prompt: bool,
}

impl Handler<Queued> for DueTimer {
    type Result = ();

    fn handle(&mut self, Queued { at, prompt }: Queued, ctx: &mut Context<Self>) {
        if prompt {
            self.prompt_at = Some(self.prompt_at.map_or(at, |known| known.min(at)));
        }
        if self.armed.as_ref().is_none_or(|(armed, _)| at < *armed) {
            self.arm_at(at, ctx);
        }
    }
}

/// Queued work was announced on a shared store (another daemon's send among it): the
/// earliest due time is read again.
#[derive(Message)]
#[rtype(result = "()")]
struct Rearm;

impl Handler<Rearm> for DueTimer {
    type Result = ();

    fn handle(&mut self, _: Rearm, ctx: &mut Context<Self>) {
        self.arm(ctx);
    }
}

/// The schedules due now are to be sent: the firer takes them (`TakeFirings`) and then
/// says so ([`DueHandle::schedules_taken`]).
#[derive(Message)]
#[rtype(result = "()")]
pub struct FireSchedules;

/// Who sends the schedules' firings, or that it took what was due.
#[derive(Message)]
#[rtype(result = "()")]
enum Firer {
    Start(Recipient<FireSchedules>),
    Taken,
}

impl Handler<Firer> for DueTimer {
    type Result = ();

    fn handle(&mut self, firer: Firer, ctx: &mut Context<Self>) {
        match firer {
            Firer::Start(firer) => self.firer = Some(firer),
            Firer::Taken => self.firing = false,
        }
        self.arm(ctx);
    }
}

/// The cloneable way to reach the timer. Needs a running actix system.
#[derive(Clone)]
pub struct DueHandle(Addr<DueTimer>);

impl DueHandle {
    /// Starts the timer, asleep until the earliest due prompt of the store (after boot: the
    /// prompts due already were claimed by it).
    pub fn start(shared: Arc<Shared>, supervisor: SupervisorHandle) -> DueHandle {
        DueHandle(
            DueTimer {
                shared,
                supervisor,
                armed: None,
                firer: None,
                firing: false,
                prompt_at: None,
            }
            .start(),
        )
    }

    /// Tells the timer of a prompt queued to start at `at` (ms).
    pub fn queued(&self, at: i64) {
        self.0.do_send(Queued { at, prompt: true });
    }

    /// Tells the timer of a schedule that fires at `at` (ms, on the schedules' clock).
    pub fn scheduled(&self, at: i64) {
        self.0.do_send(Queued {
            at: at - schedule_offset(),
            prompt: false,
        });
    }

    /// Gives the timer the firer of schedules, and has it read the next firing.
    pub fn start_firing(&self, firer: Recipient<FireSchedules>) {
        self.0.do_send(Firer::Start(firer));
    }

    /// The firer took the firings it was told of: the timer reads the next one.
    pub fn schedules_taken(&self) {
        self.0.do_send(Firer::Taken);
    }

    /// A weak handle, which keeps the timer no longer than its other handles do.
    pub fn downgrade(&self) -> WeakDueHandle {
        WeakDueHandle(self.0.downgrade())
    }

    /// Has the timer read the earliest due time again (work another daemon announced).
    pub fn rearm(&self) {
        self.0.do_send(Rearm);
    }
}

/// A [`DueHandle`] that does not keep the timer.
#[derive(Clone)]
pub struct WeakDueHandle(actix::WeakAddr<DueTimer>);

impl WeakDueHandle {
    pub fn upgrade(&self) -> Option<DueHandle> {
        self.0.upgrade().map(DueHandle)
    }
}
