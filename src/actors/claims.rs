//! The claimer: on a shared (PostgreSQL) store, what takes queued prompts for this daemon and
//! takes back the prompts of daemons whose lease ran out.
//!
//! ```text
//!  NOTIFY corral_work (a prompt queued elsewhere, a rescue) ─┐   (a setting changed: put in
//!                                                              │    effect here, then claim)
//!  a prompt ended here (a slot is free) ─────────────────────┼─► wake_claimer ──────► ClaimWork ─► Dispatch
//!  the heartbeat: registered again, projects served changed ─┘        (as room allows: per engine, in all)
//!  the heartbeat: another lease ran out ─► Rescue ─► ClaimWork
//! ```
//!
//! A send that finds the session free here claims its prompt in the same transaction as
//! today (`EnqueuePrompt`); this is for everything else. Wake-ups coalesce (a `Notify`): a
//! burst of notices costs one claim. Both writes carry the daemon's claim and are refused
//! once its lease is gone; nothing is claimed while it cannot be renewed.

use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

use super::asks;
use super::due::DueHandle;
use super::ledger::{
    ClaimWork, Rescue, ANSWER_NOTICE, APPROVAL_NOTICE, ASK_NOTICE, CANCEL_NOTICE, PAUSE_NOTICE,
    SETTINGS_NOTICE,
};
use super::relay::EventRelay;
use super::shared::Shared;
use super::supervisor::SupervisorHandle;
use crate::lease::holder::Wanted;
use crate::store::claims::Room;
use crate::store::listen::{Listener, Notice};
use crate::store::location::PgUrl;
use crate::store::settings::DEFAULT_SLOTS_PER_ENGINE;

/// Starts the claimer, the listener of the store's notices and the relay of other daemons'
/// events. Returns the listener, which stops them when dropped.
pub fn start(
    shared: Arc<Shared>,
    supervisor: SupervisorHandle,
    due: DueHandle,
    url: &PgUrl,
    mut wanted: mpsc::UnboundedReceiver<Wanted>,
) -> Listener {
    let rescue = Arc::new(Notify::new());
    // The heartbeat's wishes.
    {
        let shared = shared.clone();
        let rescue = rescue.clone();
        actix::spawn(async move {
            while let Some(wish) = wanted.recv().await {
                match wish {
                    Wanted::Claim => shared.coordination.wake_claimer(),
                    Wanted::Rescue => rescue.notify_one(),
                }
            }
        });
    }
    // The store's notices: other daemons' events are published here; work wakes the claimer.
    let (listener, notices) = Listener::start(url);
    let node_id = shared
        .coordination
        .node_id()
        .map(str::to_string)
        .unwrap_or_default();
    let start_at = shared
        .readers
        .read(crate::store::events::last_feed_seq)
        .unwrap_or(0);
    let relay = EventRelay::new(
        node_id,
        // Its own readers: a relay's reads never wait for a session's.
        crate::store::ReaderPool::at(&crate::store::location::Location::Postgres(url.clone())),
        shared.publisher.broadcast().clone(),
        start_at,
    );
    {
        let shared = shared.clone();
        let rescue = rescue.clone();
        let supervisor = supervisor.clone();
        actix::spawn(relay.run(notices, move |notice| match notice {
            Notice::Work(payload) if payload.starts_with(CANCEL_NOTICE) => {
                cancel_if_here(&shared, &supervisor, &payload[CANCEL_NOTICE.len()..])
            }
            Notice::Work(payload) if payload == SETTINGS_NOTICE => reload_settings(&shared),
            Notice::Work(payload) if payload == PAUSE_NOTICE => reload_pauses(&shared),
            Notice::Work(payload) if payload.starts_with(APPROVAL_NOTICE) => {
                approval_answered(&shared, &supervisor, &payload[APPROVAL_NOTICE.len()..])
            }
            Notice::Work(payload) if payload.starts_with(ASK_NOTICE) => {
                asks::answer_if_here(&shared, &payload[ASK_NOTICE.len()..])
            }
            Notice::Work(payload) if payload.starts_with(ANSWER_NOTICE) => {
                answered_here(&shared, &payload[ANSWER_NOTICE.len()..])
            }
            // Queued work, perhaps for later: another daemon's send of a prompt due later
            // tells this daemon's timer too (its sender may be gone by then).
            Notice::Work(_) => {
                shared.coordination.wake_claimer();
                due.rearm();
            }
            // A daemon came or went, or notices may have been missed: look at everything.
            Notice::Daemons(_) | Notice::Reconnected => {
                if matches!(notice, Notice::Reconnected) {
                    // What the notices missed meanwhile: a setting changed, a cancel asked,
                    // an ask or its answer.
                    reload_settings(&shared);
                    reload_pauses(&shared);
                    cancel_asked_here(&shared, &supervisor);
                    approvals_answered_here(&shared, &supervisor);
                    asks::answer_unanswered(&shared);
                }
                if let (Notice::Daemons(node_id), Some(others)) =
                    (&notice, shared.coordination.among_others())
                {
                    others.lease.other_registered(node_id);
                }
                rescue.notify_one();
                shared.coordination.wake_claimer();
                due.rearm();
            }
            Notice::Events { .. } => {}
        }));
    }
    actix::spawn(claim_loop(shared, supervisor, rescue));
    listener
}

/// A setting changed on some daemon (this one too): put in effect here, then claim, since
/// a limit raised may leave room.
fn reload_settings(shared: &Arc<Shared>) {
    let shared = shared.clone();
    actix::spawn(async move {
        if let Err(error) = shared.reload_settings().await {
            tracing::warn!(%error, "the settings changed in the store could not be read");
        }
        shared.coordination.wake_claimer();
    });
}

/// The pauses changed on some daemon: read again (a worker here holds or goes on), and
/// what a lifted pause held is claimed.
fn reload_pauses(shared: &Arc<Shared>) {
    if let Err(error) = shared.reload_pauses() {
        tracing::warn!(%error, "the pauses changed in the store could not be read");
    }
    shared.coordination.wake_claimer();
}

/// An answer notice (`<asker's node>:<ask id>`): wakes the ask if it is this daemon's.
fn answered_here(shared: &Shared, payload: &str) {
    if let Some(id) = asks::addressed_here(shared, payload) {
        if let Some(others) = shared.coordination.among_others() {
            others.asks.answered(id);
        }
    }
}

/// A cancel asked on any daemon (`<session id>:<prompt id>`): ended here if this daemon runs
/// the prompt.
fn cancel_if_here(shared: &Shared, supervisor: &SupervisorHandle, ids: &str) {
    let Some((session_id, prompt_id)) = ids.split_once(':') else {
        return;
    };
    let Some(this_node) = shared.coordination.node_id() else {
        return;
    };
    let here = shared
        .readers
        .read(|c| crate::store::prompts::prompt(c, prompt_id))
        .ok()
        .flatten()
        .and_then(|prompt| prompt.claim)
        .is_some_and(|claim| claim.node_id == this_node);
    if here {
        supervisor.cancel_running(session_id.to_string(), prompt_id.to_string());
    }
}

/// A person answered approval `id` on some daemon (this one too): the supervisor hands it
/// to the run that waits for it, if that run is here (a run takes an answer once).
fn approval_answered(shared: &Shared, supervisor: &SupervisorHandle, id: &str) {
    match shared
        .readers
        .read(|c| crate::store::approvals::approval(c, id))
    {
        Ok(Some(approval)) => supervisor.approval_answered(approval),
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(%error, approval = id, "an answered approval could not be read")
        }
    }
}

/// Hands the runs here every answer given to them, for when an answer's notice may have been
/// missed.
fn approvals_answered_here(shared: &Shared, supervisor: &SupervisorHandle) {
    let Some(this_node) = shared.coordination.node_id() else {
        return;
    };
    let answered = shared
        .readers
        .read(|c| crate::store::approvals::answered_for_live_runs(c, this_node));
    match answered {
        Ok(answered) => {
            for approval in answered {
                supervisor.approval_answered(approval);
            }
        }
        Err(error) => tracing::warn!(%error, "the answered approvals could not be read"),
    }
}

/// Ends the prompts running here whose cancel was asked (kept on their rows), for when a
/// cancel's notice may have been missed.
fn cancel_asked_here(shared: &Shared, supervisor: &SupervisorHandle) {
    let Some(this_node) = shared.coordination.node_id() else {
        return;
    };
    let asked = shared
        .readers
        .read(|c| crate::store::claims::cancels_asked(c, this_node));
    match asked {
        Ok(asked) => {
            for (session_id, prompt_id) in asked {
                supervisor.cancel_running(session_id, prompt_id);
            }
        }
        Err(error) => tracing::warn!(%error, "the cancels asked could not be read"),
    }
}

/// Claims whenever woken, rescues when asked, until the daemon drains.
async fn claim_loop(shared: Arc<Shared>, supervisor: SupervisorHandle, rescue: Arc<Notify>) {
    let Some(others) = shared.coordination.among_others() else {
        return;
    };
    let lease = &others.lease;
    let mut shutdown = shared.life.shutdown_signal();
    loop {
        let rescuing = tokio::select! {
            _ = others.claim_wanted.notified() => false,
            _ = rescue.notified() => true,
            _ = shutdown.changed() => return,
        };
        if shared.life.is_draining() || *shutdown.borrow() {
            return;
        }
        if !lease.holds() {
            // The heartbeat wakes this again once the lease is back (registered anew).
            continue;
        }
        let settings = shared.settings();
        // Full here: nothing to claim (a prompt's end here, or the heartbeat, wakes this
        // again). Each claim reads the queue under the store's write lock: not for nothing.
        let capacity = settings
            .slots
            .values()
            .copied()
            .max()
            .unwrap_or(DEFAULT_SLOTS_PER_ENGINE)
            .max(DEFAULT_SLOTS_PER_ENGINE)
            .min(settings.slots_total.unwrap_or(usize::MAX));
        if !rescuing && !lease.alone() && shared.life.working() >= capacity {
            continue;
        }
        if rescuing {
            match shared
                .ledger
                .write(Rescue {
                    claim: lease.claim(),
                })
                .await
            {
                Ok((rescued, told)) => {
                    if !rescued.is_empty() {
                        tracing::info!(
                            count = rescued.len(),
                            "prompts taken back from daemons whose lease ran out"
                        );
                    }
                    shared.publisher.publish(told);
                }
                Err(error) => {
                    tracing::warn!(%error, "the rescue failed; the next heartbeat asks again")
                }
            }
        }
        // Alone on the store, it takes every prompt it serves (its slot manager queues them).
        let room = match lease.alone() {
            true => Room {
                engines: Default::default(),
                default_per_engine: usize::MAX / 2,
                total: None,
            },
            false => Room {
                engines: settings.slots.clone(),
                default_per_engine: DEFAULT_SLOTS_PER_ENGINE,
                total: settings.slots_total,
            },
        };
        // A project added here a moment ago is served at once; the rest as of the last
        // renewal (which wakes this when the list changed).
        let serves = others
            .served_projects(|| {
                shared
                    .readers
                    .read(crate::lease::holder::served_projects)
                    .ok()
            })
            .to_vec();
        let claim = lease.claim();
        let epoch = claim.epoch;
        let claim = ClaimWork {
            claim,
            serves,
            room,
        };
        match shared.ledger.write(claim).await {
            Ok(prompts) => {
                for prompt in prompts {
                    supervisor.dispatch(prompt);
                }
            }
            Err(error) => {
                // The epoch the claim was made under: the heartbeat may have registered a
                // new one meanwhile, which holds.
                if error.store_error().is_some_and(|error| error.is_fenced()) {
                    lease.fenced(epoch);
                }
                tracing::warn!(%error, "claiming queued prompts failed");
            }
        }
    }
}
