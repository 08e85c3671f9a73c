//! The slot manager: who may start an engine child now.
//!
//! A *slot* is everything one run needs at once: a permit from its engine's concurrency limit
//! (and from the optional total limit), the lock of its project (two runs of one working tree
//! never overlap) and the lock of every *locking* execution group its project is in (projects
//! that share such a group never overlap, whatever their engines). A group that is declared
//! non-locking is only a label: the caller leaves it out of [`SlotRequest::groups`], so the
//! manager never sees it.
//!
//! The file is laid out in three parts:
//!
//! - [`SlotTable`], a pure, synchronous core with no actix in it: requests, releases, cancels
//!   and limit changes go in, the tickets they grant come out. Every grant decision is made by
//!   one scan, `SlotTable::grant_waiters`, so the rules live in one place and the property
//!   test at the bottom can drive the table directly.
//! - `SlotManager`, the (private) actor holding the table and, for each waiting ticket, the
//!   oneshot sender that wakes it. It is woken by messages only: there is no polling and no
//!   timer anywhere, a release or a limit change grants in the same handler that processes it.
//! - [`SlotsHandle`], the cloneable handle: [`SlotsHandle::acquire`] waits for a slot and
//!   returns a [`SlotGuard`] that releases it on drop; dropping the `acquire` future while it
//!   waits withdraws the request.
//!
//! # The grant rule
//!
//! Grants are atomic: a request gets all its resources at once or none. Waiters are scanned in
//! arrival order; each one *claims* what it needs (its project and group locks, one permit of
//! its engine, one of the total) whether or not it is granted. A waiter is granted only if its
//! needs fit beside what is running *and* everything claimed by the waiters before it. So a
//! later request can pass an earlier one only when the two do not conflict, and an early
//! request that needs many locks is never starved by a stream of small ones: whatever it
//! waits for, nobody behind it can take.
//!
//! Limits may change at run time ([`SlotTable::set_limits`]). Raising one grants at once;
//! lowering one never preempts running work, it only stops new grants of that engine until
//! the count is below the new limit. A limit of 0 pauses an engine (or, for the total, every
//! engine): its waiters keep their place in the queue and keep holding back the later
//! waiters they conflict with.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;

use actix::prelude::*;
use serde::{Deserialize, Serialize, Serializer};
use tokio::sync::oneshot;

/// The per-engine limit when neither the settings nor the caller say otherwise
/// (`slots.<engine> = 3`).
pub const DEFAULT_PER_ENGINE: usize = 3;

// ---------------------------------------------------------------------------------------------
// The vocabulary.

/// Names one request to the table, from the time it is made until it is released or
/// cancelled. The actor hands them out from a counter and never reuses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ticket(pub u64);

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// What one run needs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlotRequest {
    /// The engine's name (`codex`, `claude`, `fake`…): picks the concurrency limit.
    pub engine: String,
    /// The project's identity: two requests with the same project never run at once.
    pub project: String,
    /// The project's *locking* execution groups only. Non-locking groups are labels and must
    /// be left out by the caller; the table treats every name here as a lock. Group names and
    /// project names live in separate namespaces (a group may share a project's name).
    pub groups: Vec<String>,
}

impl SlotRequest {
    /// A request for `engine` in `project`, locking `groups`.
    pub fn new(
        engine: impl Into<String>,
        project: impl Into<String>,
        groups: impl IntoIterator<Item = impl Into<String>>,
    ) -> SlotRequest {
        SlotRequest {
            engine: engine.into(),
            project: project.into(),
            groups: groups.into_iter().map(Into::into).collect(),
        }
    }

    /// The same request with its groups sorted and deduplicated, so that snapshots are stable
    /// and a group listed twice is one lock.
    fn normalized(mut self) -> SlotRequest {
        self.groups.sort();
        self.groups.dedup();
        self
    }
}

/// The concurrency limits (settings `slots.<engine>` and `slots.total`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotLimits {
    /// Limits of the engines that have one set; serialized sorted by engine so that `corral
    /// status` prints the same thing twice.
    #[serde(serialize_with = "sorted_map")]
    pub per_engine: HashMap<String, usize>,
    /// The limit of every engine missing from `per_engine` (engines are open-ended: a
    /// `command` engine may have any name).
    pub default_per_engine: usize,
    /// At most this many runs at once over all engines; `None` means no total limit.
    pub total: Option<usize>,
}

impl Default for SlotLimits {
    fn default() -> SlotLimits {
        SlotLimits {
            per_engine: HashMap::new(),
            default_per_engine: DEFAULT_PER_ENGINE,
            total: None,
        }
    }
}

impl SlotLimits {
    /// How many runs of `engine` may run at once.
    pub fn for_engine(&self, engine: &str) -> usize {
        self.per_engine
            .get(engine)
            .copied()
            .unwrap_or(self.default_per_engine)
    }
}

fn sorted_map<S: Serializer>(
    map: &HashMap<String, usize>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    map.iter().collect::<BTreeMap<_, _>>().serialize(serializer)
}

/// One ticket and what it asked for, as shown by a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotEntry {
    pub ticket: Ticket,
    pub request: SlotRequest,
}

/// The state of the table at one moment, for `corral status` and tests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotSnapshot {
    pub limits: SlotLimits,
    /// Running requests, by ticket.
    pub running: Vec<SlotEntry>,
    /// How many requests of each engine run now (engines with none are left out).
    pub running_per_engine: BTreeMap<String, usize>,
    /// Waiting requests in arrival order: the first is served first.
    pub waiting: Vec<SlotEntry>,
}

// ---------------------------------------------------------------------------------------------
// The pure core.

/// The slot table: running requests, waiting requests and the limits. Synchronous and
/// deterministic; the actor below is a thin shell around it.
///
/// Tickets are the caller's to choose and must be fresh: a ticket that was released or
/// cancelled is forgotten, so reusing it makes a new, unrelated request.
#[derive(Debug, Clone, Default)]
pub struct SlotTable {
    limits: SlotLimits,
    /// Granted requests, by ticket (a `BTreeMap` so that listings come out in a stable order).
    running: BTreeMap<Ticket, SlotRequest>,
    /// Requests not granted yet, in arrival order: the order of the FIFO scan.
    waiting: VecDeque<(Ticket, SlotRequest)>,
    /// Projects locked by running requests. Kept beside `running` so that the scan checks a
    /// lock in O(1) instead of walking every running request.
    held_projects: HashSet<String>,
    /// Groups locked by running requests (same reason).
    held_groups: HashSet<String>,
    /// Running requests per engine; an engine is removed when its count drops to 0, so the
    /// map only ever holds engines that run.
    running_per_engine: HashMap<String, usize>,
}

impl SlotTable {
    /// An empty table with these limits.
    pub fn new(limits: SlotLimits) -> SlotTable {
        SlotTable {
            limits,
            ..SlotTable::default()
        }
    }

    /// Registers `request` under `ticket` and says whether it was granted at once; if not, it
    /// waits, and a later call ([`release`](Self::release), [`cancel`](Self::cancel),
    /// [`set_limits`](Self::set_limits)) returns its ticket when it is granted.
    ///
    /// A ticket the table already knows is not registered twice: the answer is its current
    /// state (granted or not) and nothing changes.
    pub fn request(&mut self, ticket: Ticket, request: SlotRequest) -> bool {
        if self.running.contains_key(&ticket) {
            return true;
        }
        if self.waiting.iter().any(|(known, _)| *known == ticket) {
            return false;
        }
        self.waiting.push_back((ticket, request.normalized()));
        let granted = self.grant_waiters();
        // Before this call no waiter fitted beside what runs and what the waiters before it
        // claim (every operation ends with a full scan). A new waiter goes last, so it changes
        // nobody's claims but its own: it is the only one that can be granted now.
        debug_assert!(granted.is_empty() || granted == [ticket], "{granted:?}");
        granted.contains(&ticket)
    }

    /// Releases a granted ticket and returns the waiters that are granted as a result, in
    /// arrival order. A ticket that is still waiting is withdrawn instead (as by
    /// [`cancel`](Self::cancel)); an unknown one changes nothing.
    pub fn release(&mut self, ticket: Ticket) -> Vec<Ticket> {
        self.forget(ticket)
    }

    /// Withdraws a ticket and returns the waiters that are granted as a result (its claims no
    /// longer hold them back). A ticket that was granted meanwhile is released: the waiter may
    /// give up after its grant was decided but before it learnt of it, and the slot must not
    /// stay taken by nobody.
    pub fn cancel(&mut self, ticket: Ticket) -> Vec<Ticket> {
        self.forget(ticket)
    }

    /// Replaces the limits and returns the waiters granted under the new ones. Lowering a
    /// limit never takes anything back from running requests.
    pub fn set_limits(&mut self, limits: SlotLimits) -> Vec<Ticket> {
        self.limits = limits;
        self.grant_waiters()
    }

    /// The limits in force.
    pub fn limits(&self) -> &SlotLimits {
        &self.limits
    }

    /// Running tickets, in ticket order.
    pub fn running(&self) -> Vec<Ticket> {
        self.running.keys().copied().collect()
    }

    /// Waiting tickets, in arrival order (the first is served first).
    pub fn waiting(&self) -> Vec<Ticket> {
        self.waiting.iter().map(|(ticket, _)| *ticket).collect()
    }

    /// Whether `ticket` holds a slot now.
    pub fn is_running(&self, ticket: Ticket) -> bool {
        self.running.contains_key(&ticket)
    }

    /// How many requests of `engine` run now.
    pub fn running_of(&self, engine: &str) -> usize {
        self.running_per_engine.get(engine).copied().unwrap_or(0)
    }

    /// A copy of the whole state, serializable.
    pub fn snapshot(&self) -> SlotSnapshot {
        let entry = |ticket: &Ticket, request: &SlotRequest| SlotEntry {
            ticket: *ticket,
            request: request.clone(),
        };
        SlotSnapshot {
            limits: self.limits.clone(),
            running: self
                .running
                .iter()
                .map(|(ticket, request)| entry(ticket, request))
                .collect(),
            running_per_engine: self
                .running_per_engine
                .iter()
                .map(|(engine, count)| (engine.clone(), *count))
                .collect(),
            waiting: self
                .waiting
                .iter()
                .map(|(ticket, request)| entry(ticket, request))
                .collect(),
        }
    }

    /// Removes `ticket` whatever its state; rescans when that freed anything.
    fn forget(&mut self, ticket: Ticket) -> Vec<Ticket> {
        if let Some(request) = self.running.remove(&ticket) {
            self.held_projects.remove(&request.project);
            for group in &request.groups {
                self.held_groups.remove(group);
            }
            if let Some(count) = self.running_per_engine.get_mut(&request.engine) {
                *count -= 1;
                if *count == 0 {
                    self.running_per_engine.remove(&request.engine);
                }
            }
            return self.grant_waiters();
        }
        if let Some(position) = self.waiting.iter().position(|(known, _)| *known == ticket) {
            self.waiting.remove(position);
            // Its claims may have been all that held a later waiter back.
            return self.grant_waiters();
        }
        Vec::new()
    }

    /// The one place grants are decided: scans the waiters in arrival order and grants each
    /// one whose needs fit beside what runs and what the waiters before it claim. Returns the
    /// granted tickets in arrival order.
    fn grant_waiters(&mut self) -> Vec<Ticket> {
        let chosen = self.choose();
        if chosen.is_empty() {
            return Vec::new();
        }
        let mut granted = Vec::with_capacity(chosen.len());
        let waiting = std::mem::take(&mut self.waiting);
        for (index, (ticket, request)) in waiting.into_iter().enumerate() {
            if chosen.binary_search(&index).is_ok() {
                self.start(ticket, request);
                granted.push(ticket);
            } else {
                self.waiting.push_back((ticket, request));
            }
        }
        granted
    }

    /// The scan itself, read-only: the indices (ascending) of the waiters to grant.
    ///
    /// A waiter granted earlier in the same scan and a waiter that could not be granted block
    /// the later ones in the same way, so both simply add their needs to the claims.
    fn choose(&self) -> Vec<usize> {
        let mut claimed_projects: HashSet<&str> = HashSet::new();
        let mut claimed_groups: HashSet<&str> = HashSet::new();
        let mut claimed_per_engine: HashMap<&str, usize> = HashMap::new();
        let mut chosen = Vec::new();
        // Every waiter before this one claims one permit of the total, so the total claimed
        // so far is simply `index`.
        for (index, (_, request)) in self.waiting.iter().enumerate() {
            let engine = request.engine.as_str();
            let engine_claimed = claimed_per_engine.get(engine).copied().unwrap_or(0);
            let project_free = !self.held_projects.contains(&request.project)
                && !claimed_projects.contains(request.project.as_str());
            let groups_free = request.groups.iter().all(|group| {
                !self.held_groups.contains(group) && !claimed_groups.contains(group.as_str())
            });
            // `<` rather than `+ 1 <=`: the same, without an overflow to think about.
            let engine_free =
                self.running_of(engine) + engine_claimed < self.limits.for_engine(engine);
            let total_free = self
                .limits
                .total
                .is_none_or(|total| self.running.len() + index < total);
            if project_free && groups_free && engine_free && total_free {
                chosen.push(index);
            }
            claimed_projects.insert(&request.project);
            claimed_groups.extend(request.groups.iter().map(String::as_str));
            *claimed_per_engine.entry(engine).or_insert(0) += 1;
        }
        chosen
    }

    /// Moves a chosen waiter to the running set and takes its locks and permits.
    fn start(&mut self, ticket: Ticket, request: SlotRequest) {
        self.held_projects.insert(request.project.clone());
        self.held_groups.extend(request.groups.iter().cloned());
        *self
            .running_per_engine
            .entry(request.engine.clone())
            .or_insert(0) += 1;
        self.running.insert(ticket, request);
    }
}

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
struct Acquire(SlotRequest);

impl Handler<Acquire> for SlotManager {
    type Result = MessageResult<Acquire>;

    fn handle(&mut self, Acquire(request): Acquire, ctx: &mut Context<Self>) -> Self::Result {
        let ticket = Ticket(self.next_ticket);
        self.next_ticket += 1;
        let (waker, wake) = oneshot::channel();
        if self.table.request(ticket, request) {
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
    pub async fn acquire(&self, request: SlotRequest) -> Result<SlotGuard, SlotError> {
        let Waiting { guard, wake } = self
            .manager
            .send(Acquire(request))
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
    use super::*;
    use proptest::prelude::*;

    fn req(engine: &str, project: &str, groups: &[&str]) -> SlotRequest {
        SlotRequest::new(engine, project, groups.iter().copied())
    }

    fn limits(per_engine: &[(&str, usize)], total: Option<usize>) -> SlotLimits {
        SlotLimits {
            per_engine: per_engine
                .iter()
                .map(|(engine, limit)| (engine.to_string(), *limit))
                .collect(),
            default_per_engine: DEFAULT_PER_ENGINE,
            total,
        }
    }

    fn t(n: u64) -> Ticket {
        Ticket(n)
    }

    // -- SlotTable, one rule per test ---------------------------------------------------------

    #[test]
    fn three_projects_run_while_a_fourth_waits() {
        let mut table = SlotTable::default();
        for (n, project) in ["a", "b", "c"].iter().enumerate() {
            assert!(table.request(t(n as u64), req("codex", project, &[])));
        }
        assert!(!table.request(t(3), req("codex", "d", &[])));
        assert_eq!(table.waiting(), [t(3)]);
        assert_eq!(table.release(t(1)), [t(3)]);
        assert_eq!(table.running(), [t(0), t(2), t(3)]);
    }

    #[test]
    fn two_sessions_of_one_project_serialize() {
        let mut table = SlotTable::default();
        assert!(table.request(t(1), req("codex", "p", &[])));
        assert!(!table.request(t(2), req("codex", "p", &[])));
        // Whatever the engine: they share a working tree.
        assert!(!table.request(t(3), req("claude", "p", &[])));
        assert_eq!(table.release(t(1)), [t(2)]);
        assert_eq!(table.release(t(2)), [t(3)]);
    }

    #[test]
    fn overlapping_group_lists_serialize() {
        let mut table = SlotTable::default();
        assert!(table.request(t(1), req("codex", "a", &["salon", "tv"])));
        assert!(!table.request(t(2), req("codex", "b", &["media", "tv"])));
        // Disjoint groups run side by side; a project and a group of one name do not clash.
        assert!(table.request(t(3), req("codex", "c", &["salon2", "a"])));
        assert_eq!(table.release(t(1)), [t(2)]);
    }

    #[test]
    fn one_group_serializes_claude_and_codex() {
        let mut table = SlotTable::default();
        assert!(table.request(t(1), req("claude", "a", &["g"])));
        assert!(!table.request(t(2), req("codex", "b", &["g"])));
        assert_eq!(table.release(t(1)), [t(2)]);
    }

    #[test]
    fn a_codex_limit_does_not_hold_back_claude() {
        let mut table = SlotTable::new(limits(&[("codex", 1)], None));
        assert!(table.request(t(1), req("codex", "a", &[])));
        assert!(!table.request(t(2), req("codex", "b", &[])));
        assert!(table.request(t(3), req("claude", "c", &[])));
        assert!(table.request(t(4), req("claude", "d", &[])));
        assert_eq!(table.running_of("claude"), 2);
        assert_eq!(table.waiting(), [t(2)]);
    }

    #[test]
    fn the_total_limit_caps_all_engines() {
        let mut table = SlotTable::new(limits(&[], Some(2)));
        assert!(table.request(t(1), req("codex", "a", &[])));
        assert!(table.request(t(2), req("claude", "b", &[])));
        assert!(!table.request(t(3), req("fake", "c", &[])));
        assert_eq!(table.release(t(1)), [t(3)]);
        assert_eq!(table.running(), [t(2), t(3)]);
    }

    #[test]
    fn a_large_waiter_is_not_starved_by_later_small_ones() {
        let mut table = SlotTable::default();
        assert!(table.request(t(1), req("codex", "x", &["a"])));
        // The large request needs a, b and c; a is taken, so it waits and claims all three.
        assert!(!table.request(t(2), req("claude", "big", &["a", "b", "c"])));
        // A stream of small requests, each needing one of its groups, must queue behind it.
        let mut next = 3;
        for round in 0..5 {
            for group in ["b", "c"] {
                let project = format!("small{round}{group}");
                assert!(!table.request(t(next), req("codex", &project, &[group])));
                next += 1;
            }
        }
        assert_eq!(table.running(), [t(1)]);
        // Once x is done the large one runs first; the small ones still wait for it.
        assert_eq!(table.release(t(1)), [t(2)]);
        assert_eq!(table.waiting().len(), 10);
        // Then the first small request of each group runs (same engine, limit 3).
        assert_eq!(table.release(t(2)), [t(3), t(4)]);
    }

    #[test]
    fn a_later_request_that_does_not_conflict_passes() {
        let mut table = SlotTable::default();
        assert!(table.request(t(1), req("codex", "x", &["a"])));
        assert!(!table.request(t(2), req("codex", "big", &["a", "b"])));
        assert!(table.request(t(3), req("codex", "y", &["c"])));
        assert_eq!(table.running(), [t(1), t(3)]);
        assert_eq!(table.waiting(), [t(2)]);
    }

    #[test]
    fn a_waiter_holds_its_engine_permit_for_itself() {
        // Limit 2, one codex runs, an earlier codex waiter is blocked by its project: it still
        // claims the last permit, so a later codex request cannot take it.
        let mut table = SlotTable::new(limits(&[("codex", 2)], None));
        assert!(table.request(t(1), req("codex", "p", &[])));
        assert!(!table.request(t(2), req("claude", "p", &[])));
        assert!(table.request(t(3), req("codex", "q", &[])));
        assert!(!table.request(t(4), req("codex", "r", &[])));
        assert!(!table.request(t(5), req("codex", "s", &[])));
        assert_eq!(table.release(t(3)), [t(4)]);
        assert_eq!(table.waiting(), [t(2), t(5)]);
    }

    #[test]
    fn cancelling_a_waiter_unblocks_a_later_one() {
        let mut table = SlotTable::default();
        assert!(table.request(t(1), req("codex", "a", &["g"])));
        assert!(!table.request(t(2), req("codex", "b", &["g", "h"])));
        assert!(!table.request(t(3), req("codex", "c", &["h"])));
        assert_eq!(table.cancel(t(2)), [t(3)]);
        assert_eq!(table.running(), [t(1), t(3)]);
        assert!(table.waiting().is_empty());
    }

    #[test]
    fn cancelling_a_granted_ticket_releases_it() {
        let mut table = SlotTable::default();
        assert!(table.request(t(1), req("codex", "a", &[])));
        assert!(!table.request(t(2), req("codex", "a", &[])));
        assert_eq!(table.cancel(t(1)), [t(2)]);
        assert!(
            table.cancel(t(99)).is_empty(),
            "an unknown ticket changes nothing"
        );
    }

    #[test]
    fn raising_a_limit_grants_at_once_and_lowering_preempts_nothing() {
        let mut table = SlotTable::new(limits(&[("codex", 1)], None));
        assert!(table.request(t(1), req("codex", "a", &[])));
        assert!(!table.request(t(2), req("codex", "b", &[])));
        assert!(!table.request(t(3), req("codex", "c", &[])));
        assert_eq!(
            table.set_limits(limits(&[("codex", 3)], None)),
            [t(2), t(3)]
        );
        // Lowered to 1 with 3 running: all keep running, nothing new starts until below 1.
        assert!(table.set_limits(limits(&[("codex", 1)], None)).is_empty());
        assert_eq!(table.running().len(), 3);
        assert!(!table.request(t(4), req("codex", "d", &[])));
        assert!(table.release(t(1)).is_empty());
        assert!(table.release(t(2)).is_empty());
        assert_eq!(table.release(t(3)), [t(4)]);
    }

    #[test]
    fn a_known_ticket_is_not_registered_twice() {
        let mut table = SlotTable::default();
        assert!(table.request(t(1), req("codex", "a", &[])));
        assert!(!table.request(t(2), req("codex", "a", &[])));
        assert!(table.request(t(1), req("codex", "z", &[])));
        assert!(!table.request(t(2), req("codex", "z", &[])));
        assert_eq!(table.running(), [t(1)]);
        assert_eq!(table.waiting(), [t(2)]);
    }

    #[test]
    fn a_snapshot_serializes_in_a_stable_order() {
        let mut table = SlotTable::new(limits(&[("codex", 2), ("claude", 1)], Some(4)));
        assert!(table.request(t(1), req("codex", "a", &["tv", "salon", "tv"])));
        assert!(!table.request(t(2), req("codex", "b", &["tv"])));
        let snapshot = table.snapshot();
        assert_eq!(snapshot.running[0].request.groups, ["salon", "tv"]);
        assert_eq!(snapshot.running_per_engine["codex"], 1);
        assert_eq!(snapshot.waiting[0].ticket, t(2));
        let json = serde_json::to_string(&snapshot).unwrap();
        assert!(
            json.contains(r#""per_engine":{"claude":1,"codex":2}"#),
            "{json}"
        );
        let back: SlotSnapshot = serde_json::from_str(&json).unwrap();
        assert_eq!(back, snapshot);
    }

    // -- SlotTable, random sequences -----------------------------------------------------------

    const ENGINES: [&str; 3] = ["codex", "claude", "fake"];
    const PROJECTS: [&str; 4] = ["p0", "p1", "p2", "p3"];
    const GROUPS: [&str; 3] = ["g0", "g1", "g2"];

    #[derive(Debug, Clone)]
    enum Op {
        Request {
            engine: usize,
            project: usize,
            /// Bit i set: the request locks GROUPS[i].
            groups: u8,
        },
        /// Releases the running ticket at this index (modulo); an unknown one when none runs.
        Release(usize),
        /// Cancels the issued ticket at this index (modulo), whatever its state.
        Cancel(usize),
        SetLimits(SlotLimits),
    }

    fn limits_strategy() -> impl Strategy<Value = SlotLimits> {
        (
            proptest::collection::vec(proptest::option::of(1..=3usize), 3),
            1..=3usize,
            proptest::option::of(1..=4usize),
        )
            .prop_map(|(per_engine, default_per_engine, total)| SlotLimits {
                per_engine: ENGINES
                    .iter()
                    .zip(per_engine)
                    .filter_map(|(engine, limit)| Some((engine.to_string(), limit?)))
                    .collect(),
                default_per_engine,
                total,
            })
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..3usize, 0..4usize, 0u8..8).prop_map(|(engine, project, groups)| {
                Op::Request { engine, project, groups }
            }),
            3 => any::<usize>().prop_map(Op::Release),
            1 => any::<usize>().prop_map(Op::Cancel),
            1 => limits_strategy().prop_map(Op::SetLimits),
        ]
    }

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum State {
        Waiting,
        Running,
        Gone,
    }

    /// What the test knows independently of the table: every request made and its state.
    #[derive(Default)]
    struct Model {
        /// Indexed by ticket number (tickets are issued 0, 1, 2…, so this is arrival order).
        requests: Vec<(SlotRequest, State)>,
    }

    impl Model {
        fn tickets_in(&self, state: State) -> Vec<Ticket> {
            (0..self.requests.len())
                .filter(|&n| self.requests[n].1 == state)
                .map(|n| t(n as u64))
                .collect()
        }

        fn request(&self, ticket: Ticket) -> &SlotRequest {
            &self.requests[ticket.0 as usize].0
        }

        fn conflict(a: &SlotRequest, b: &SlotRequest) -> bool {
            a.project == b.project || a.groups.iter().any(|group| b.groups.contains(group))
        }
    }

    /// Checks the table after one step. `granted` are the tickets the step granted.
    fn check(
        table: &SlotTable,
        model: &mut Model,
        granted: &[Ticket],
    ) -> Result<(), TestCaseError> {
        for ticket in granted {
            let state = model.requests.get(ticket.0 as usize).map(|entry| entry.1);
            prop_assert_eq!(state, Some(State::Waiting), "{} granted", ticket);
            model.requests[ticket.0 as usize].1 = State::Running;
        }
        let running = model.tickets_in(State::Running);
        let waiting = model.tickets_in(State::Waiting);
        prop_assert_eq!(table.running(), running.clone());
        // Arrival order is ticket order here.
        prop_assert_eq!(table.waiting(), waiting.clone());

        // Locks are exclusive among running requests.
        for (i, a) in running.iter().enumerate() {
            for b in &running[i + 1..] {
                prop_assert!(
                    !Model::conflict(model.request(*a), model.request(*b)),
                    "{} and {} run together",
                    a,
                    b
                );
            }
        }

        // Each grant respected the limits at its time and every claim of an earlier waiter
        // still waiting: counting what ran before the step, the grants of this step up to it
        // and the earlier waiters, its engine and the total stay within their limits, and it
        // shares no lock with an earlier waiter.
        let limits = table.limits();
        let before: Vec<Ticket> = running
            .iter()
            .copied()
            .filter(|ticket| !granted.contains(ticket))
            .collect();
        for ticket in granted {
            let engine = &model.request(*ticket).engine;
            let up_to: Vec<Ticket> = before
                .iter()
                .chain(granted.iter().filter(|other| *other <= ticket))
                .chain(waiting.iter().filter(|other| *other < ticket))
                .copied()
                .collect();
            let of_engine = up_to
                .iter()
                .filter(|other| &model.request(**other).engine == engine)
                .count();
            prop_assert!(
                of_engine <= limits.for_engine(engine),
                "{} over its engine limit",
                ticket
            );
            if let Some(total) = limits.total {
                prop_assert!(up_to.len() <= total, "{} over the total", ticket);
            }
            for earlier in waiting.iter().filter(|other| *other < ticket) {
                prop_assert!(
                    !Model::conflict(model.request(*earlier), model.request(*ticket)),
                    "{} passed the conflicting earlier {}",
                    ticket,
                    earlier
                );
            }
        }

        // Work-conserving: the first waiter has nobody before it, so it waits only if it does
        // not fit beside what runs.
        if let Some(head) = waiting.first() {
            let request = model.request(*head);
            let locked = running
                .iter()
                .any(|other| Model::conflict(model.request(*other), request));
            let engine_full =
                table.running_of(&request.engine) >= limits.for_engine(&request.engine);
            let total_full = limits.total.is_some_and(|total| running.len() >= total);
            prop_assert!(locked || engine_full || total_full, "{} could run", head);
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn random_sequences_keep_every_rule(
            initial in limits_strategy(),
            ops in proptest::collection::vec(op_strategy(), 1..80),
        ) {
            let mut table = SlotTable::new(initial);
            let mut model = Model::default();
            for op in ops {
                let granted = match op {
                    Op::Request { engine, project, groups } => {
                        let ticket = t(model.requests.len() as u64);
                        let request = SlotRequest::new(
                            ENGINES[engine],
                            PROJECTS[project],
                            (0..3).filter(|bit| groups & (1 << bit) != 0).map(|bit| GROUPS[bit]),
                        );
                        model.requests.push((request.clone(), State::Waiting));
                        if table.request(ticket, request) { vec![ticket] } else { Vec::new() }
                    }
                    Op::Release(index) => {
                        let running = model.tickets_in(State::Running);
                        let ticket = if running.is_empty() {
                            t(u64::MAX)
                        } else {
                            running[index % running.len()]
                        };
                        if let Some(entry) = model.requests.get_mut(ticket.0 as usize) {
                            entry.1 = State::Gone;
                        }
                        table.release(ticket)
                    }
                    Op::Cancel(index) => {
                        let issued = model.requests.len();
                        let ticket = if issued == 0 {
                            t(u64::MAX)
                        } else {
                            t((index % issued) as u64)
                        };
                        if let Some(entry) = model.requests.get_mut(ticket.0 as usize) {
                            entry.1 = State::Gone;
                        }
                        table.cancel(ticket)
                    }
                    Op::SetLimits(limits) => table.set_limits(limits),
                };
                check(&table, &mut model, &granted)?;
            }

            // Liveness: with every limit at least 1, finishing whatever runs, again and
            // again, serves every waiter.
            for _ in 0..=model.requests.len() {
                let running = table.running();
                if running.is_empty() {
                    break;
                }
                for ticket in running {
                    model.requests[ticket.0 as usize].1 = State::Gone;
                    let granted = table.release(ticket);
                    check(&table, &mut model, &granted)?;
                }
            }
            prop_assert!(table.running().is_empty());
            prop_assert_eq!(table.waiting(), Vec::<Ticket>::new());
        }
    }

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
