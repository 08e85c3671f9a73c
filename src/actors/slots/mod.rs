//! The slot manager: who may start an engine child now.
//!
//! A *slot* is everything one run needs at once: a permit from its engine's concurrency limit
//! (and from the optional total limit), the lock of its project (two runs of one working tree
//! never overlap) and the lock of every *locking* execution group its project is in (projects
//! that share such a group never overlap, whatever their engines). A group that is declared
//! non-locking is only a label: the caller leaves it out of [`SlotRequest::groups`], so the
//! manager never sees it.
//!
//! It is laid out in three parts:
//!
//! - [`SlotTable`] (`table.rs`), a pure, synchronous core with no actix in it: requests, releases, cancels
//!   and limit changes go in, the tickets they grant come out. Every grant is decided in one
//!   place, `SlotTable::grant_waiters`, so the rules live in one place and the property test
//!   beside it can drive the table directly (and compare it with a literal scan of the
//!   rule, written there).
//! - `SlotManager` (here), the (private) actor holding the table and, for each waiting ticket, the
//!   oneshot sender that wakes it. It is woken by messages only: there is no polling and no
//!   timer anywhere, a release or a limit change grants in the same handler that processes it.
//! - [`SlotsHandle`], the cloneable handle: [`SlotsHandle::acquire`] waits for a slot and
//!   returns a [`SlotGuard`] that releases it on drop; dropping the `acquire` future while it
//!   waits withdraws the request.
//!
//! A request may name its [`SlotOwner`] (the session it is for,
//! [`SlotsHandle::acquire_for`]). The table does not use owners to decide anything; it only
//! keeps them so that a waiter can be told *why* it waits and *who* holds what it needs:
//! [`SlotTable::blocker`] (pure) and [`SlotsHandle::blocker`] return a [`Blocker`], the
//! `held_by` of the `slot.waiting` event.
//!
//! # The grant rule
//!
//! Grants are atomic: a request gets all its resources at once or none. Resources are of two
//! kinds: *locks* (its project's and its groups'), which one request holds at a time, and
//! *permits* (one of its engine's limit, one of the total), which are counted.
//!
//! - **Locks are taken in arrival order.** Every waiter claims its locks from the moment it
//!   arrives: a later request never takes a lock an earlier waiter needs. A waiter is
//!   *lock-ready* when none of its locks is held by a running request and it is the first
//!   waiter to need each of them.
//! - **Only lock-ready waiters claim permits**, in arrival order: the first
//!   `limit − running` lock-ready waiters of an engine claim its free permits, and of those
//!   the earliest are granted while the total has room. A waiter that waits for a lock (held
//!   by a running request, or by an earlier waiter's claim) holds no permit: three sessions of
//!   a busy project queued never keep a session of another project from an idle permit.
//! - A lock-ready waiter that waits for its engine's limit claims no total permit meanwhile:
//!   its engine's permit frees only when a run of that engine ends, which frees a total permit
//!   in the same release, and the scan offers it to the earliest waiter first.
//!
//! What follows, and what the property test checks: when a waiter waits while its engine and
//! the total both have room, one of its locks is held by a running request or needed by an
//! earlier waiter (idle permits never coexist with a waiter that could use them); a later
//! request passes an earlier waiter only when they share no lock and, if the earlier one is
//! lock-ready, it waits for its own full engine; and nobody starves: the first waiter's locks
//! can only be freed (nobody behind it may take them), then it claims its engine's next
//! permit and gets the total permit freed with it, so with limits of at least 1 it runs once
//! the requests running when it became first, and those running when its locks freed, end.
//!
//! Each operation touches only what its request names: waiters are indexed by the locks
//! they need (a lock's first waiter is the only one a release of it can make lock-ready) and,
//! once lock-ready, by engine (only the first ready waiter of each engine can be granted
//! next), so enqueue, cancel and grant cost no scan of the waiters.
//!
//! Limits may change at run time ([`SlotTable::set_limits`]). Raising one grants at once;
//! lowering one never preempts running work, it only stops new grants of that engine until
//! the count is below the new limit. A limit of 0 pauses an engine (or, for the total, every
//! engine): its waiters keep their place in the queue and their lock claims.
//!
//! The lock of a project is its identity as the caller names it in
//! [`SlotRequest::project`]: the session worker names the project's canonical directory, and
//! in [`SlotRequest::overlapping`] the directories of the other projects (archived ones
//! too) on the same tree: one above it or inside it. A request takes all of those locks, so
//! two projects on one working tree never run at once, whichever was added or archived while
//! the other ran.

use std::collections::{HashMap, VecDeque};

use actix::prelude::*;

use tokio::sync::oneshot;

pub use crate::protocol::slots::*;

mod table;

pub use table::SlotTable;

// ---------------------------------------------------------------------------------------------
// The actor.

/// Holds the table and wakes the waiters it grants. Private: see [`SlotsHandle`].
struct SlotManager {
    table: SlotTable,
    /// One sender per waiting ticket (exactly the table's waiting set): sending on it is how a
    /// grant reaches the task parked in [`SlotsHandle::acquire`].
    wakers: HashMap<Ticket, oneshot::Sender<()>>,
    /// The next ticket to hand out; never reused, so a late `Release` or `Cancel` of an old
    /// ticket cannot touch a newer request.
    next_ticket: u64,
}

impl Actor for SlotManager {
    type Context = Context<Self>;
}

impl SlotManager {
    /// Tells each granted ticket's task. A task that is gone (its receiver dropped) cannot use
    /// the slot, so the slot is released at once, which may grant more: hence the work list.
    fn wake(&mut self, granted: Vec<Ticket>) {
        let mut queue = VecDeque::from(granted);
        while let Some(ticket) = queue.pop_front() {
            // Every waiting ticket has a waker (they are inserted and removed together), so
            // `None` would mean a grant of a ticket that was not waiting; nothing to wake then.
            let Some(waker) = self.wakers.remove(&ticket) else {
                continue;
            };
            if waker.send(()).is_err() {
                // Its `Cancel` is on the way too and will find the ticket already gone.
                queue.extend(self.table.release(ticket));
            }
        }
    }
}

/// Registers a request. Replies with the ticket's [`Waiting`] (the wake receiver and a guard
/// that withdraws the ticket when dropped).
#[derive(Message)]
#[rtype(result = "Waiting")]
struct Acquire {
    request: SlotRequest,
    owner: Option<SlotOwner>,
}

impl Handler<Acquire> for SlotManager {
    type Result = MessageResult<Acquire>;

    fn handle(&mut self, acquire: Acquire, ctx: &mut Context<Self>) -> Self::Result {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        let (waker, wake) = oneshot::channel();
        if self
            .table
            .request_for(ticket, acquire.request, acquire.owner)
        {
            // Granted now: the receiver is in the reply, so this cannot fail; if the reply is
            // never delivered, dropping it cancels the ticket (see `Waiting`).
            let _ = waker.send(());
        } else {
            self.wakers.insert(ticket, waker);
        }
        MessageResult(Waiting {
            guard: WaitGuard {
                ticket,
                manager: Some(ctx.address()),
            },
            wake,
        })
    }
}

/// Gives a granted slot back.
#[derive(Message)]
#[rtype(result = "()")]
struct Release(Ticket);

impl Handler<Release> for SlotManager {
    type Result = ();

    fn handle(&mut self, Release(ticket): Release, _: &mut Context<Self>) {
        let granted = self.table.release(ticket);
        self.wake(granted);
    }
}

/// Withdraws a ticket whose task stopped waiting (released if it was granted meanwhile).
#[derive(Message)]
#[rtype(result = "()")]
struct Cancel(Ticket);

impl Handler<Cancel> for SlotManager {
    type Result = ();

    fn handle(&mut self, Cancel(ticket): Cancel, _: &mut Context<Self>) {
        self.wakers.remove(&ticket);
        let granted = self.table.cancel(ticket);
        self.wake(granted);
    }
}

/// Replaces the limits; replies once the waiters they allow are woken.
#[derive(Message)]
#[rtype(result = "()")]
struct SetLimits(SlotLimits);

impl Handler<SetLimits> for SlotManager {
    type Result = ();

    fn handle(&mut self, SetLimits(limits): SetLimits, _: &mut Context<Self>) {
        let granted = self.table.set_limits(limits);
        self.wake(granted);
    }
}

/// Asks for a copy of the table's state.
#[derive(Message)]
#[rtype(result = "SlotSnapshot")]
struct Snapshot;

impl Handler<Snapshot> for SlotManager {
    type Result = MessageResult<Snapshot>;

    fn handle(&mut self, _: Snapshot, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.table.snapshot())
    }
}

/// Asks for the table as `status` shows it ([`SlotTable::summary`]).
#[derive(Message)]
#[rtype(result = "SlotSummary")]
struct Summary {
    first: usize,
}

impl Handler<Summary> for SlotManager {
    type Result = MessageResult<Summary>;

    fn handle(&mut self, Summary { first }: Summary, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.table.summary(first))
    }
}

/// Asks why a session's waiting request is not granted.
#[derive(Message)]
#[rtype(result = "Option<Blocker>")]
struct Blocked {
    session: String,
}

impl Handler<Blocked> for SlotManager {
    type Result = Option<Blocker>;

    fn handle(&mut self, Blocked { session }: Blocked, _: &mut Context<Self>) -> Self::Result {
        let ticket = self.table.waiting_for(&session)?;
        self.table.blocker(ticket)
    }
}

/// Asks why each of several sessions' waiting requests is not granted, in one message (the
/// boot's burst of `slot.waiting` announcements asks for 2,000 at once).
#[derive(Message)]
#[rtype(result = "Vec<Option<Blocker>>")]
struct BlockedAll {
    sessions: Vec<String>,
}

impl Handler<BlockedAll> for SlotManager {
    type Result = MessageResult<BlockedAll>;

    fn handle(
        &mut self,
        BlockedAll { sessions }: BlockedAll,
        _: &mut Context<Self>,
    ) -> Self::Result {
        MessageResult(
            sessions
                .iter()
                .map(|session| {
                    let ticket = self.table.waiting_for(session)?;
                    self.table.blocker(ticket)
                })
                .collect(),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The handle and the guards.

/// Errors a slot caller sees.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// The slot manager is gone (the system is shutting down).
    #[error("the slot manager is not running")]
    Stopped,
}

/// The reply to [`Acquire`]: what a task waits on, and what withdraws its ticket if it stops
/// waiting.
///
/// The guard is built by the actor inside the reply, not by the task after receiving it, so
/// there is no moment at which the ticket is registered and nothing would cancel it: if the
/// `acquire` future is dropped after the actor answered but before it read the answer, the
/// reply is dropped with it and the guard cancels the ticket. (If the future is dropped before
/// the actor even handled `Acquire`, actix skips the handler: nothing was registered.)
struct Waiting {
    guard: WaitGuard,
    /// Resolves when the ticket is granted; fails when the manager stopped.
    wake: oneshot::Receiver<()>,
}

/// Sends [`Cancel`] for its ticket when dropped, unless turned into a [`SlotGuard`].
struct WaitGuard {
    ticket: Ticket,
    /// `None` once the guard is disarmed.
    manager: Option<Addr<SlotManager>>,
}

impl WaitGuard {
    /// The ticket is granted: from now on dropping means releasing.
    fn into_slot(mut self) -> Option<SlotGuard> {
        let manager = self.manager.take()?;
        Some(SlotGuard {
            ticket: self.ticket,
            manager,
        })
    }
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if let Some(manager) = self.manager.take() {
            manager.do_send(Cancel(self.ticket));
        }
    }
}

/// A granted slot. Dropping it releases the slot (and wakes the waiters that fit then).
#[derive(Debug)]
#[must_use = "dropping the guard releases the slot at once"]
pub struct SlotGuard {
    ticket: Ticket,
    manager: Addr<SlotManager>,
}

impl SlotGuard {
    /// The ticket this slot was granted under (as shown by a snapshot).
    #[cfg(any(test, feature = "testkit"))]
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        // `do_send` ignores the mailbox bound and needs no runtime, so this works from any
        // drop; if the manager is gone, there is nothing left to release.
        self.manager.do_send(Release(self.ticket));
    }
}

/// The cloneable way to ask for slots. Needs a running actix system.
#[derive(Clone)]
pub struct SlotsHandle {
    manager: Addr<SlotManager>,
}

impl SlotsHandle {
    /// Starts a slot manager with these limits on the current arbiter.
    pub fn start(limits: SlotLimits) -> SlotsHandle {
        let manager = SlotManager {
            table: SlotTable::new(limits),
            wakers: HashMap::new(),
            next_ticket: 1,
        }
        .start();
        SlotsHandle { manager }
    }

    /// Waits until `request` is granted and returns its slot. Dropping this future while it
    /// waits withdraws the request (later waiters it held back may then be granted).
    #[cfg(any(test, feature = "testkit"))]
    pub async fn acquire(&self, request: SlotRequest) -> Result<SlotGuard, SlotError> {
        self.acquire_as(request, None).await
    }

    /// [`acquire`](Self::acquire) on behalf of `owner`: while the request waits,
    /// [`blocker`](Self::blocker)`(&owner.session)` says why, and while it runs, the requests it
    /// holds back are told that `owner` holds what they need.
    pub async fn acquire_for(
        &self,
        request: SlotRequest,
        owner: SlotOwner,
    ) -> Result<SlotGuard, SlotError> {
        self.acquire_as(request, Some(owner)).await
    }

    async fn acquire_as(
        &self,
        request: SlotRequest,
        owner: Option<SlotOwner>,
    ) -> Result<SlotGuard, SlotError> {
        let Waiting { guard, wake } = self
            .manager
            .send(Acquire { request, owner })
            .await
            .map_err(|_| SlotError::Stopped)?;
        // The waker is dropped without a send only when the manager stops (a `Cancel` drops
        // it too, but only this guard sends one).
        wake.await.map_err(|_| SlotError::Stopped)?;
        // The guard is armed: the actor builds it with its address and nothing disarms it
        // before this line.
        guard.into_slot().ok_or(SlotError::Stopped)
    }

    /// Replaces the limits at once: raising one wakes the waiters it allows before this
    /// returns; lowering one preempts nothing.
    pub async fn set_limits(&self, limits: SlotLimits) -> Result<(), SlotError> {
        self.manager
            .send(SetLimits(limits))
            .await
            .map_err(|_| SlotError::Stopped)
    }

    /// Why the request that session `session` waits with (made by
    /// [`acquire_for`](Self::acquire_for) with an owner of that session) is not granted now.
    ///
    /// Meant for the `acquire_for` caller itself, which cannot see its ticket while its future
    /// waits: keep that future pinned and unpolled-but-alive (e.g. in a `select!` branch) and
    /// ask this from another branch, after the wait has been noticed (the worker asks after
    /// 20 ms). The manager handles messages in order, so a call made after the `acquire_for`
    /// future's first poll sees its request. `Ok(None)` means the session has no waiting
    /// request: it was granted meanwhile (its future is about to resolve), withdrawn, or never
    /// named an owner. A session's worker has one request at a time; if a session had several
    /// waiting, this would answer for the earliest.
    #[cfg(any(test, feature = "testkit"))]
    pub async fn blocker(&self, session: &str) -> Result<Option<Blocker>, SlotError> {
        self.manager
            .send(Blocked {
                session: session.to_string(),
            })
            .await
            .map_err(|_| SlotError::Stopped)
    }

    /// [`blocker`](Self::blocker) for each of `sessions`, in order, in one message.
    pub async fn blockers(&self, sessions: Vec<String>) -> Result<Vec<Option<Blocker>>, SlotError> {
        self.manager
            .send(BlockedAll { sessions })
            .await
            .map_err(|_| SlotError::Stopped)
    }

    /// The table as `status` shows it: what runs, the waiters' count and the first `first`
    /// waiters with their blockers.
    pub async fn summary(&self, first: usize) -> Result<SlotSummary, SlotError> {
        self.manager
            .send(Summary { first })
            .await
            .map_err(|_| SlotError::Stopped)
    }

    /// The table's state now.
    pub async fn snapshot(&self) -> Result<SlotSnapshot, SlotError> {
        self.manager
            .send(Snapshot)
            .await
            .map_err(|_| SlotError::Stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::table::tests::{limits, owner, req};
    use super::*;

    // -- The actor ------------------------------------------------------------------------------

    use futures::FutureExt;
    use std::time::Duration;

    /// Bounds a wait in a test so that a bug fails it instead of hanging it.
    async fn soon<F: std::future::Future>(future: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(10), future)
            .await
            .expect("timed out")
    }

    #[test]
    fn acquire_waits_until_a_guard_is_dropped() {
        actix::System::new().block_on(async {
            let slots = SlotsHandle::start(SlotLimits::default());
            let first = soon(slots.acquire(req("codex", "p", &[]))).await.unwrap();
            let mut second = Box::pin(slots.acquire(req("claude", "p", &["g"])));
            // One poll sends `Acquire`; the snapshot queued behind it sees the waiter.
            assert!((&mut second).now_or_never().is_none());
            let snapshot = soon(slots.snapshot()).await.unwrap();
            assert_eq!(snapshot.running.len(), 1);
            assert_eq!(snapshot.waiting.len(), 1);
            assert!((&mut second).now_or_never().is_none(), "granted too early");
            drop(first);
            let second = soon(second).await.unwrap();
            let snapshot = soon(slots.snapshot()).await.unwrap();
            assert_eq!(snapshot.running.len(), 1);
            assert_eq!(snapshot.running[0].ticket, second.ticket());
            assert!(snapshot.waiting.is_empty());
            drop(second);
            assert!(soon(slots.snapshot()).await.unwrap().running.is_empty());
        });
    }

    #[test]
    fn a_dropped_acquire_leaves_no_waiter() {
        actix::System::new().block_on(async {
            let slots = SlotsHandle::start(SlotLimits::default());
            let held = soon(slots.acquire(req("codex", "p", &[]))).await.unwrap();

            // Dropped after its reply arrived: its guard sends `Cancel`.
            let mut waiter = Box::pin(slots.acquire(req("codex", "p", &[])));
            assert!((&mut waiter).now_or_never().is_none());
            assert_eq!(soon(slots.snapshot()).await.unwrap().waiting.len(), 1);
            assert!((&mut waiter).now_or_never().is_none());
            drop(waiter);
            assert!(soon(slots.snapshot()).await.unwrap().waiting.is_empty());

            // Dropped before the manager handled `Acquire`: nothing is registered.
            let mut waiter = Box::pin(slots.acquire(req("codex", "p", &[])));
            assert!((&mut waiter).now_or_never().is_none());
            drop(waiter);
            assert!(soon(slots.snapshot()).await.unwrap().waiting.is_empty());

            // Dropped with its reply unread, after the manager answered: the guard inside
            // the reply cancels.
            let mut waiter = Box::pin(slots.acquire(req("codex", "p", &[])));
            assert!((&mut waiter).now_or_never().is_none());
            let _ = soon(slots.snapshot()).await.unwrap();
            drop(waiter);
            assert!(soon(slots.snapshot()).await.unwrap().waiting.is_empty());

            // A waiter granted but never polled again releases what it was given.
            let mut waiter = Box::pin(slots.acquire(req("codex", "p", &[])));
            assert!((&mut waiter).now_or_never().is_none());
            drop(held);
            let snapshot = soon(slots.snapshot()).await.unwrap();
            assert_eq!(snapshot.running.len(), 1, "the waiter was granted");
            drop(waiter);
            let snapshot = soon(slots.snapshot()).await.unwrap();
            assert!(snapshot.running.is_empty() && snapshot.waiting.is_empty());
        });
    }

    #[test]
    fn a_waiting_session_learns_who_holds_its_slot() {
        actix::System::new().block_on(async {
            let slots = SlotsHandle::start(limits(&[("fake", 1)], None));
            let first = soon(slots.acquire_for(req("fake", "a", &[]), owner("first")))
                .await
                .unwrap();
            assert_eq!(soon(slots.blocker("first")).await.unwrap(), None, "it runs");
            let mut second = Box::pin(slots.acquire_for(req("fake", "b", &[]), owner("second")));
            assert!((&mut second).now_or_never().is_none());
            // Asked after the first poll, as the worker does: the request is registered.
            assert_eq!(
                soon(slots.blocker("second")).await.unwrap(),
                Some(Blocker::EngineLimit {
                    engine: "fake".into(),
                    limit: 1,
                    running: 1,
                    holders: vec![owner("first")],
                })
            );
            let snapshot = soon(slots.snapshot()).await.unwrap();
            assert_eq!(snapshot.running[0].owner, Some(owner("first")));
            assert_eq!(snapshot.waiting[0].owner, Some(owner("second")));
            drop(first);
            let second = soon(second).await.unwrap();
            assert_eq!(soon(slots.blocker("second")).await.unwrap(), None);
            drop(second);
            assert_eq!(soon(slots.blocker("nobody")).await.unwrap(), None);
        });
    }

    #[test]
    fn raising_a_limit_wakes_waiters() {
        actix::System::new().block_on(async {
            let slots = SlotsHandle::start(limits(&[("fake", 1)], None));
            let first = soon(slots.acquire(req("fake", "a", &[]))).await.unwrap();
            let mut second = Box::pin(slots.acquire(req("fake", "b", &[])));
            assert!((&mut second).now_or_never().is_none());
            soon(slots.set_limits(limits(&[("fake", 2)], None)))
                .await
                .unwrap();
            let second = soon(second).await.unwrap();
            assert_ne!(first.ticket(), second.ticket());
            assert_eq!(soon(slots.snapshot()).await.unwrap().running.len(), 2);
        });
    }
}
