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

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;

use super::ledger::{ClaimDue, Fenced};
use super::shared::Shared;
use super::supervisor::SupervisorHandle;
use crate::store::now_ms;
use crate::store::prompts;

/// The actor, reached through its [`DueHandle`].
struct DueTimer {
    shared: Arc<Shared>,
    supervisor: SupervisorHandle,
    /// The due time it sleeps until, and the sleep (cancelled when an earlier one comes).
    armed: Option<(i64, SpawnHandle)>,
}

impl Actor for DueTimer {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.arm(ctx);
    }
}

impl DueTimer {
    /// Sleeps until the earliest due time after now, if a queued prompt has one.
    fn arm(&mut self, ctx: &mut Context<Self>) {
        match self.shared.readers.read(|c| prompts::next_due(c, now_ms())) {
            Ok(Some(at)) => self.arm_at(at, ctx),
            Ok(None) => {}
            Err(error) => tracing::warn!(%error, "the next due prompt could not be read"),
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

    /// Claims the heads due now, then sleeps until the next due time.
    fn fire(&mut self, ctx: &mut Context<Self>) {
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

/// A prompt due at this time (ms) was queued.
#[derive(Message)]
#[rtype(result = "()")]
struct Queued(i64);

impl Handler<Queued> for DueTimer {
    type Result = ();

    fn handle(&mut self, Queued(at): Queued, ctx: &mut Context<Self>) {
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
            }
            .start(),
        )
    }

    /// Tells the timer of a prompt queued to start at `at` (ms).
    pub fn queued(&self, at: i64) {
        self.0.do_send(Queued(at));
    }

    /// Has the timer read the earliest due time again (work another daemon announced).
    pub fn rearm(&self) {
        self.0.do_send(Rearm);
    }
}
