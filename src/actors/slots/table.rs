//! The slot manager's pure core: the table of running and waiting requests, with the grant
//! rule decided in one place (`SlotTable::grant_waiters`) and property-tested against a
//! literal scan of the rule. No actix in it: see the module above for the actor around it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::*;

// ---------------------------------------------------------------------------------------------
// The pure core.

/// A lock a request takes: its project's or one of its groups' (two namespaces: a group may
/// share a project's name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Lock {
    Project(String),
    Group(String),
}

impl SlotRequest {
    /// The locks this request takes: its project's, then its groups' in order.
    fn locks(&self) -> impl Iterator<Item = Lock> + '_ {
        std::iter::once(Lock::Project(self.project.clone()))
            .chain(self.overlapping.iter().cloned().map(Lock::Project))
            .chain(self.groups.iter().cloned().map(Lock::Group))
    }
}

/// Where a waiter stands in the queue: its arrival number (the order of the FIFO rule).
type Arrival = u64;

/// The slot table: running requests, waiting requests and the limits. Synchronous and
/// deterministic; the actor below is a thin shell around it.
///
/// Every operation costs time in proportion to what the request touches (its locks, the
/// engines that have waiters, the grants it makes), with a logarithm of the number of
/// waiters, never a scan of them: the waiters are indexed by the locks they need and, once
/// their locks are theirs to take, by engine (see the module doc).
///
/// Tickets are the caller's to choose and must be fresh: a ticket that was released or
/// cancelled is forgotten, so reusing it makes a new, unrelated request.
#[derive(Debug, Clone, Default)]
pub struct SlotTable {
    limits: SlotLimits,
    /// Granted requests, by ticket (a `BTreeMap` so that listings come out in a stable order).
    running: BTreeMap<Ticket, SlotRequest>,
    /// Requests not granted yet, by arrival.
    waiting: BTreeMap<Arrival, (Ticket, SlotRequest)>,
    /// The arrival of each waiting ticket.
    arrivals: HashMap<Ticket, Arrival>,
    next_arrival: Arrival,
    /// Each lock a running request holds, and which one.
    held: HashMap<Lock, Ticket>,
    /// Each lock some waiter needs, and the waiters that need it, in arrival order (the first
    /// is the only one that may take it). A lock no waiter needs has no entry.
    wanted: HashMap<Lock, BTreeSet<Arrival>>,
    /// Per engine, the waiters whose locks are theirs to take (*lock-ready*: none is held, and
    /// each lock's first waiter is this one), in arrival order; only these claim permits. An
    /// engine with none has no entry.
    ready: HashMap<String, BTreeSet<Arrival>>,
    /// Running requests per engine; an engine is removed when its count drops to 0, so the
    /// map only ever holds engines that run.
    running_per_engine: HashMap<String, usize>,
    /// The owner of each known ticket (running or waiting) that named one; removed with it.
    owners: HashMap<Ticket, SlotOwner>,
    /// The waiting arrivals of each session that named itself as owner.
    waiting_by_session: HashMap<String, BTreeSet<Arrival>>,
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
    #[cfg(any(test, feature = "testkit"))]
    pub fn request(&mut self, ticket: Ticket, request: SlotRequest) -> bool {
        self.request_for(ticket, request, None)
    }

    /// [`request`](Self::request), on behalf of `owner` (kept only to be reported by
    /// [`blocker`](Self::blocker) and snapshots; it changes no decision).
    pub fn request_for(
        &mut self,
        ticket: Ticket,
        request: SlotRequest,
        owner: Option<SlotOwner>,
    ) -> bool {
        if self.running.contains_key(&ticket) {
            return true;
        }
        if self.arrivals.contains_key(&ticket) {
            return false;
        }
        let request = request.normalized();
        let arrival = self.next_arrival;
        self.next_arrival += 1;
        if let Some(owner) = owner {
            self.waiting_by_session
                .entry(owner.session.clone())
                .or_default()
                .insert(arrival);
            self.owners.insert(ticket, owner);
        }
        // Lock-ready when no lock is held and no earlier waiter needs one (it goes last).
        let mut ready = true;
        for lock in request.locks() {
            ready &= !self.held.contains_key(&lock) && !self.wanted.contains_key(&lock);
            self.wanted.entry(lock).or_default().insert(arrival);
        }
        if ready {
            self.ready
                .entry(request.engine.clone())
                .or_default()
                .insert(arrival);
        }
        self.arrivals.insert(ticket, arrival);
        self.waiting.insert(arrival, (ticket, request));
        let granted = self.grant_waiters();
        // Every operation ends granting whatever the rule allows, and a new waiter goes last:
        // it changes nobody's claims, so it is the only one that can be granted now.
        debug_assert!(granted.is_empty() || granted == [ticket], "{granted:?}");
        !granted.is_empty()
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
    #[cfg(any(test, feature = "testkit"))]
    pub fn limits(&self) -> &SlotLimits {
        &self.limits
    }

    /// Running tickets, in ticket order.
    #[cfg(any(test, feature = "testkit"))]
    pub fn running(&self) -> Vec<Ticket> {
        self.running.keys().copied().collect()
    }

    /// Waiting tickets, in arrival order (the first is served first).
    #[cfg(any(test, feature = "testkit"))]
    pub fn waiting(&self) -> Vec<Ticket> {
        self.waiting.values().map(|(ticket, _)| *ticket).collect()
    }

    /// How many requests wait.
    #[cfg(any(test, feature = "testkit"))]
    pub fn waiting_count(&self) -> usize {
        self.waiting.len()
    }

    /// Whether `ticket` holds a slot now.
    #[cfg(any(test, feature = "testkit"))]
    pub fn is_running(&self, ticket: Ticket) -> bool {
        self.running.contains_key(&ticket)
    }

    /// How many requests of `engine` run now.
    pub fn running_of(&self, engine: &str) -> usize {
        self.running_per_engine.get(engine).copied().unwrap_or(0)
    }

    /// A copy of the whole state, serializable.
    pub fn snapshot(&self) -> SlotSnapshot {
        SlotSnapshot {
            limits: self.limits.clone(),
            running: self.running_entries(),
            running_per_engine: self.running_per_engine_map(),
            waiting: self
                .waiting
                .values()
                .map(|(ticket, request)| self.entry(ticket, request))
                .collect(),
        }
    }

    /// The table as `status` shows it: everything that runs, the waiters' count, and the
    /// first `first` waiters with their blockers (cost: the running requests and `first`
    /// waiters, whatever the backlog).
    pub fn summary(&self, first: usize) -> SlotSummary {
        SlotSummary {
            limits: self.limits.clone(),
            running: self.running_entries(),
            running_per_engine: self.running_per_engine_map(),
            waiting_count: self.waiting.len(),
            waiting: self
                .waiting
                .values()
                .take(first)
                .map(|(ticket, request)| WaitingEntry {
                    entry: self.entry(ticket, request),
                    blocker: self.blocker(*ticket),
                })
                .collect(),
        }
    }

    /// A request as the snapshot and the summary show it, with its owner.
    fn entry(&self, ticket: &Ticket, request: &SlotRequest) -> SlotEntry {
        SlotEntry {
            ticket: *ticket,
            request: request.clone(),
            owner: self.owners.get(ticket).cloned(),
        }
    }

    fn running_entries(&self) -> Vec<SlotEntry> {
        self.running
            .iter()
            .map(|(ticket, request)| self.entry(ticket, request))
            .collect()
    }

    fn running_per_engine_map(&self) -> BTreeMap<String, usize> {
        self.running_per_engine
            .iter()
            .map(|(engine, count)| (engine.clone(), *count))
            .collect()
    }

    /// The owner `ticket` was requested for, if it named one and is still known.
    #[cfg(any(test, feature = "testkit"))]
    pub fn owner(&self, ticket: Ticket) -> Option<&SlotOwner> {
        self.owners.get(&ticket)
    }

    /// The first waiting ticket requested for session `session` (a session's worker has at
    /// most one request at a time, so there is at most one).
    pub fn waiting_for(&self, session: &str) -> Option<Ticket> {
        let arrival = self.waiting_by_session.get(session)?.first()?;
        self.waiting.get(arrival).map(|(ticket, _)| *ticket)
    }

    /// Why the waiting `ticket` is not granted now (see [`Blocker`] for the order in which
    /// reasons are looked for). `None` when the ticket is not waiting: it runs, or the table
    /// does not know it. Every waiting ticket has a blocker, since every operation grants
    /// whatever the rule allows.
    pub fn blocker(&self, ticket: Ticket) -> Option<Blocker> {
        let arrival = *self.arrivals.get(&ticket)?;
        let (_, request) = &self.waiting[&arrival];
        let owner_of = |ticket: &Ticket| self.owners.get(ticket).cloned();

        // 1. What runs.
        for project in std::iter::once(&request.project).chain(&request.overlapping) {
            if let Some(holder) = self.held.get(&Lock::Project(project.clone())) {
                return Some(Blocker::ProjectLock {
                    project: project.clone(),
                    holder: owner_of(holder),
                });
            }
        }
        for group in &request.groups {
            if let Some(holder) = self.held.get(&Lock::Group(group.clone())) {
                return Some(Blocker::GroupLock {
                    group: group.clone(),
                    holder: owner_of(holder),
                });
            }
        }
        let engine = request.engine.as_str();
        let engine_limit = self.limits.for_engine(engine);
        let engine_running = self.running_of(engine);
        if engine_running >= engine_limit {
            return Some(Blocker::EngineLimit {
                engine: engine.to_string(),
                limit: engine_limit,
                running: engine_running,
                holders: self
                    .running
                    .iter()
                    .filter(|(_, running)| running.engine == engine)
                    .filter_map(|(ticket, _)| owner_of(ticket))
                    .collect(),
            });
        }
        if let Some(total) = self
            .limits
            .total
            .filter(|total| self.running.len() >= *total)
        {
            return Some(Blocker::TotalLimit {
                limit: total,
                running: self.running.len(),
                holders: self.running.keys().filter_map(owner_of).collect(),
            });
        }

        // 2. Nothing that runs is in the way, so a lock of this request is needed by an
        // earlier waiter: no permit is claimed by a waiter that waits while the engine and
        // the total have room (the rule in the module doc). The earliest such waiter is the
        // one in the way.
        let (first, lock) = request
            .locks()
            .filter_map(|lock| {
                let first = *self.wanted.get(&lock)?.first()?;
                (first < arrival).then_some((first, lock))
            })
            .min()?;
        let (holder, _) = &self.waiting[&first];
        let claim = match lock {
            Lock::Project(project) => Claim::Project { project },
            Lock::Group(group) => Claim::Group { group },
        };
        Some(Blocker::Queue {
            holder: owner_of(holder),
            claim,
        })
    }

    /// Removes `ticket` whatever its state, then grants what that allows.
    fn forget(&mut self, ticket: Ticket) -> Vec<Ticket> {
        if let Some(request) = self.running.remove(&ticket) {
            self.owners.remove(&ticket);
            if let Some(count) = self.running_per_engine.get_mut(&request.engine) {
                *count -= 1;
                if *count == 0 {
                    self.running_per_engine.remove(&request.engine);
                }
            }
            // A freed lock's first waiter may now have all of its locks.
            for lock in request.locks() {
                self.held.remove(&lock);
                if let Some(first) = self.wanted.get(&lock).and_then(|w| w.first().copied()) {
                    self.mark_if_ready(first);
                }
            }
            return self.grant_waiters();
        }
        let Some(arrival) = self.arrivals.remove(&ticket) else {
            return Vec::new();
        };
        let (_, request) = self
            .waiting
            .remove(&arrival)
            .expect("an arrival is waiting");
        self.unindex(arrival, ticket, &request);
        self.owners.remove(&ticket);
        for lock in request.locks() {
            let Some(wanted) = self.wanted.get_mut(&lock) else {
                continue;
            };
            let was_first = wanted.first() == Some(&arrival);
            wanted.remove(&arrival);
            match wanted.first().copied() {
                None => {
                    self.wanted.remove(&lock);
                }
                // Its claim may have been all that held the next one back.
                Some(next) if was_first => self.mark_if_ready(next),
                Some(_) => {}
            }
        }
        self.grant_waiters()
    }

    /// Takes a waiter out of the engine and session indexes (it is granted or withdrawn).
    fn unindex(&mut self, arrival: Arrival, ticket: Ticket, request: &SlotRequest) {
        if let Some(ready) = self.ready.get_mut(&request.engine) {
            ready.remove(&arrival);
            if ready.is_empty() {
                self.ready.remove(&request.engine);
            }
        }
        let Some(owner) = self.owners.get(&ticket) else {
            return;
        };
        if let Some(arrivals) = self.waiting_by_session.get_mut(&owner.session) {
            arrivals.remove(&arrival);
            if arrivals.is_empty() {
                self.waiting_by_session.remove(&owner.session);
            }
        }
    }

    /// Adds a waiter to its engine's ready set if all of its locks are now its to take.
    fn mark_if_ready(&mut self, arrival: Arrival) {
        let Some((_, request)) = self.waiting.get(&arrival) else {
            return;
        };
        let ready = request.locks().all(|lock| {
            !self.held.contains_key(&lock)
                && self.wanted.get(&lock).and_then(|w| w.first()) == Some(&arrival)
        });
        if ready {
            self.ready
                .entry(request.engine.clone())
                .or_default()
                .insert(arrival);
        }
    }

    /// The one place grants are decided. Among the lock-ready waiters, the first ones of each
    /// engine claim its free permits; of those, the earliest is granted while the total has
    /// room, again and again. Returns the granted tickets in arrival order.
    ///
    /// A grant changes no other waiter's readiness for the better (it takes locks and
    /// permits), so one pass is enough; each step looks only at the first ready waiter of
    /// each engine.
    fn grant_waiters(&mut self) -> Vec<Ticket> {
        let mut granted = Vec::new();
        loop {
            if let Some(total) = self.limits.total {
                if self.running.len() >= total {
                    break;
                }
            }
            let next = self
                .ready
                .iter()
                .filter(|(engine, _)| self.running_of(engine) < self.limits.for_engine(engine))
                .filter_map(|(_, ready)| ready.first().copied())
                .min();
            let Some(arrival) = next else {
                break;
            };
            granted.push(self.start(arrival));
        }
        granted
    }

    /// Moves a chosen waiter to the running set and takes its locks and permits.
    fn start(&mut self, arrival: Arrival) -> Ticket {
        let (ticket, request) = self.waiting.remove(&arrival).expect("a ready waiter waits");
        self.arrivals.remove(&ticket);
        self.unindex(arrival, ticket, &request);
        for lock in request.locks() {
            if let Some(wanted) = self.wanted.get_mut(&lock) {
                // It was the first to need each of its locks; the next one waits for it now.
                wanted.remove(&arrival);
                if wanted.is_empty() {
                    self.wanted.remove(&lock);
                }
            }
            self.held.insert(lock, ticket);
        }
        *self
            .running_per_engine
            .entry(request.engine.clone())
            .or_insert(0) += 1;
        self.running.insert(ticket, request);
        ticket
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(in crate::actors::slots) fn req(
        engine: &str,
        project: &str,
        groups: &[&str],
    ) -> SlotRequest {
        SlotRequest::new(engine, project, groups.iter().copied())
    }

    pub(in crate::actors::slots) fn limits(
        per_engine: &[(&str, usize)],
        total: Option<usize>,
    ) -> SlotLimits {
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
    fn a_request_taking_an_overlapping_trees_lock_waits_for_its_run_and_holds_it() {
        let mut table = SlotTable::default();
        // `/r/sub` runs before `/r` exists; `/r`'s request names `/r/sub` as overlapping.
        assert!(table.request(t(1), req("codex", "/r/sub", &[])));
        let outer = req("codex", "/r", &[]).overlapping(["/r/sub", "/r"]);
        assert!(!table.request(t(2), outer));
        assert!(matches!(
            table.blocker(t(2)),
            Some(Blocker::ProjectLock { project, .. }) if project == "/r/sub"
        ));
        // Granted, it holds both: `/r/sub`'s next run waits for it, and `/r` too.
        assert_eq!(table.release(t(1)), [t(2)]);
        assert!(!table.request(t(3), req("codex", "/r/sub", &[])));
        assert!(!table.request(t(4), req("codex", "/r", &[]).overlapping(["/r/sub"])));
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
    fn waiters_for_a_busy_project_leave_idle_permits_to_others() {
        // The head-of-line case of issue 11: three sessions of a busy project queued behind
        // its lock claim no permit, so a session of another project runs at once.
        let mut table = SlotTable::new(limits(&[("fake", 3)], Some(3)));
        assert!(table.request(t(1), req("fake", "busy", &[])));
        for n in 2..=4 {
            assert!(!table.request(t(n), req("fake", "busy", &[])));
        }
        assert!(table.request(t(5), req("fake", "other", &[])));
        assert!(table.request(t(6), req("codex", "third", &[])));
        assert_eq!(table.running(), [t(1), t(5), t(6)]);
        // Once the project is free, its next session runs first, then the others in turn.
        assert!(!table.request(t(7), req("fake", "fourth", &[])));
        assert_eq!(table.release(t(1)), [t(2)]);
        assert_eq!(table.release(t(5)), [t(7)]);
        assert_eq!(table.release(t(2)), [t(3)]);
    }

    #[test]
    fn a_waiter_with_its_locks_keeps_its_place_for_its_engine() {
        // Limit 1: b waits for the engine only; c, later, of the same engine, never passes it,
        // and neither does d of the same project as b.
        let mut table = SlotTable::new(limits(&[("codex", 1)], None));
        assert!(table.request(t(1), req("codex", "a", &[])));
        assert!(!table.request(t(2), req("codex", "b", &[])));
        assert!(!table.request(t(3), req("codex", "c", &[])));
        assert!(!table.request(t(4), req("claude", "b", &[])));
        assert!(table.request(t(5), req("claude", "e", &[])));
        assert_eq!(table.release(t(1)), [t(2)]);
        assert_eq!(table.release(t(2)), [t(3), t(4)]);
    }

    #[test]
    fn a_waiter_for_a_full_engine_leaves_the_total_to_other_engines() {
        // Total 2, codex 1: a codex waiter cannot use the last total permit (its engine is
        // full), so a claude request takes it; when codex frees, so does a total permit.
        let mut table = SlotTable::new(limits(&[("codex", 1)], Some(2)));
        assert!(table.request(t(1), req("codex", "a", &[])));
        assert!(!table.request(t(2), req("codex", "b", &[])));
        assert!(table.request(t(3), req("claude", "c", &[])));
        assert!(!table.request(t(4), req("claude", "d", &[])));
        assert_eq!(table.release(t(1)), [t(2)]);
        assert_eq!(table.release(t(3)), [t(4)]);
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

    // -- SlotTable::blocker ---------------------------------------------------------------------

    pub(in crate::actors::slots) fn owner(session: &str) -> SlotOwner {
        SlotOwner::new(session, Some(format!("title of {session}")))
    }

    #[test]
    fn a_blocker_names_the_session_holding_the_project() {
        let mut table = SlotTable::default();
        assert!(table.request_for(t(1), req("codex", "p", &["g"]), Some(owner("first"))));
        assert!(!table.request_for(t(2), req("claude", "p", &[]), Some(owner("second"))));
        assert_eq!(
            table.blocker(t(2)),
            Some(Blocker::ProjectLock {
                project: "p".into(),
                holder: Some(owner("first")),
            })
        );
        assert_eq!(table.waiting_for("second"), Some(t(2)));
        // Not waiting: running, or unknown.
        assert_eq!(table.blocker(t(1)), None);
        assert_eq!(table.blocker(t(9)), None);
        assert_eq!(table.waiting_for("first"), None);
        assert_eq!(table.release(t(1)), [t(2)]);
        assert_eq!(table.blocker(t(2)), None);
        assert_eq!(table.waiting_for("second"), None);
    }

    #[test]
    fn a_blocker_names_the_group_and_its_holder() {
        let mut table = SlotTable::default();
        assert!(table.request_for(t(1), req("codex", "a", &["deploy"]), Some(owner("s1"))));
        assert!(!table.request_for(t(2), req("codex", "b", &["deploy", "x"]), None));
        assert_eq!(
            table.blocker(t(2)),
            Some(Blocker::GroupLock {
                group: "deploy".into(),
                holder: Some(owner("s1")),
            })
        );
        // A holder that named no owner is reported without one.
        assert!(table.request(t(3), req("codex", "c", &["y"])));
        assert!(!table.request_for(t(4), req("codex", "d", &["y"]), Some(owner("s4"))));
        assert_eq!(
            table.blocker(t(4)),
            Some(Blocker::GroupLock {
                group: "y".into(),
                holder: None,
            })
        );
    }

    #[test]
    fn a_blocker_names_every_holder_of_a_full_engine() {
        let mut table = SlotTable::new(limits(&[("fake", 2)], None));
        assert!(table.request_for(t(1), req("fake", "a", &[]), Some(owner("s1"))));
        assert!(table.request(t(2), req("fake", "b", &[])));
        assert!(table.request_for(t(3), req("codex", "c", &[]), Some(owner("s3"))));
        assert!(!table.request_for(t(4), req("fake", "d", &[]), Some(owner("s4"))));
        assert_eq!(
            table.blocker(t(4)),
            Some(Blocker::EngineLimit {
                engine: "fake".into(),
                limit: 2,
                running: 2,
                holders: vec![owner("s1")],
            })
        );
        // A paused engine: limit 0, nothing of it runs.
        table.set_limits(limits(&[("fake", 2), ("claude", 0)], None));
        assert!(!table.request(t(5), req("claude", "e", &[])));
        assert_eq!(
            table.blocker(t(5)),
            Some(Blocker::EngineLimit {
                engine: "claude".into(),
                limit: 0,
                running: 0,
                holders: vec![],
            })
        );
    }

    #[test]
    fn a_blocker_says_when_the_total_is_reached() {
        let mut table = SlotTable::new(limits(&[], Some(2)));
        assert!(table.request_for(t(1), req("codex", "a", &[]), Some(owner("s1"))));
        assert!(table.request_for(t(2), req("claude", "b", &[]), Some(owner("s2"))));
        assert!(!table.request(t(3), req("fake", "c", &[])));
        assert_eq!(
            table.blocker(t(3)),
            Some(Blocker::TotalLimit {
                limit: 2,
                running: 2,
                holders: vec![owner("s1"), owner("s2")],
            })
        );
    }

    #[test]
    fn a_blocker_names_the_earlier_waiter_in_the_way() {
        let mut table = SlotTable::new(limits(&[("codex", 2)], None));
        assert!(table.request_for(t(1), req("codex", "x", &["a"]), Some(owner("s1"))));
        // s2 waits for group a and claims b; s3 needs b: it waits behind s2, not behind s1.
        assert!(!table.request_for(t(2), req("claude", "big", &["a", "b"]), Some(owner("s2"))));
        assert!(!table.request_for(t(3), req("claude", "small", &["b"]), Some(owner("s3"))));
        assert_eq!(
            table.blocker(t(3)),
            Some(Blocker::Queue {
                holder: Some(owner("s2")),
                claim: Claim::Group { group: "b".into() },
            })
        );
        // The same project as an earlier waiter.
        assert!(!table.request_for(t(4), req("fake", "big", &[]), Some(owner("s4"))));
        assert_eq!(
            table.blocker(t(4)),
            Some(Blocker::Queue {
                holder: Some(owner("s2")),
                claim: Claim::Project {
                    project: "big".into()
                },
            })
        );
        // codex has 1 of 2 running; a codex waiter blocked by its project claims no permit:
        // the last one goes to a codex request that can run.
        assert!(!table.request_for(t(5), req("codex", "x", &[]), Some(owner("s5"))));
        assert!(table.request_for(t(6), req("codex", "y", &[]), Some(owner("s6"))));
        assert!(!table.request_for(t(7), req("codex", "z", &[]), Some(owner("s7"))));
        assert_eq!(
            table.blocker(t(7)),
            Some(Blocker::EngineLimit {
                engine: "codex".into(),
                limit: 2,
                running: 2,
                holders: vec![owner("s1"), owner("s6")],
            })
        );
    }

    #[test]
    fn waiters_for_a_lock_leave_the_total_to_others() {
        let mut table = SlotTable::new(limits(&[], Some(3)));
        assert!(table.request_for(t(1), req("codex", "x", &[]), Some(owner("s1"))));
        // 1 runs of 3: the two waiters for project x claim none of the two permits left.
        assert!(!table.request_for(t(2), req("claude", "x", &[]), Some(owner("s2"))));
        assert!(!table.request_for(t(3), req("fake", "x", &[]), Some(owner("s3"))));
        assert!(table.request_for(t(4), req("opencode", "z", &[]), Some(owner("s4"))));
        assert_eq!(
            table.blocker(t(3)),
            Some(Blocker::ProjectLock {
                project: "x".into(),
                holder: Some(owner("s1")),
            })
        );
        assert!(table.request_for(t(5), req("opencode", "w", &[]), Some(owner("s5"))));
        assert!(!table.request_for(t(6), req("opencode", "v", &[]), Some(owner("s6"))));
        assert_eq!(
            table.blocker(t(6)),
            Some(Blocker::TotalLimit {
                limit: 3,
                running: 3,
                holders: vec![owner("s1"), owner("s4"), owner("s5")],
            })
        );
    }

    #[test]
    fn a_blocker_serializes_with_its_reason() {
        let blocker = Blocker::ProjectLock {
            project: "p".into(),
            holder: Some(owner("s1")),
        };
        let json = serde_json::to_value(&blocker).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "reason": "project_lock",
                "project": "p",
                "holder": { "session": "s1", "label": "title of s1" },
            })
        );
        assert_eq!(serde_json::from_value::<Blocker>(json).unwrap(), blocker);
        let queue = Blocker::Queue {
            holder: None,
            claim: Claim::Engine {
                engine: "fake".into(),
            },
        };
        let json = serde_json::to_value(&queue).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "reason": "queue",
                "claim": { "kind": "engine", "engine": "fake" },
            })
        );
        assert_eq!(serde_json::from_value::<Blocker>(json).unwrap(), queue);
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

    /// The rule of the module doc as a literal scan of every waiter, in arrival order: what
    /// the table must grant, given what runs and what waits (the table does the same without
    /// scanning). `limits`' engines may be any.
    fn scan_grants(model: &Model, limits: &SlotLimits) -> Vec<Ticket> {
        let running = model.tickets_in(State::Running);
        let mut per_engine: HashMap<&str, usize> = HashMap::new();
        for ticket in &running {
            *per_engine
                .entry(&model.request(*ticket).engine)
                .or_insert(0) += 1;
        }
        let mut claimed: Vec<&SlotRequest> = Vec::new();
        let mut engine_claims: HashMap<&str, usize> = HashMap::new();
        let mut total_claims = 0;
        let mut granted = Vec::new();
        for ticket in model.tickets_in(State::Waiting) {
            let request = model.request(ticket);
            let locked = running
                .iter()
                .any(|other| Model::conflict(model.request(*other), request))
                || claimed.iter().any(|other| Model::conflict(other, request));
            if !locked {
                let engine = request.engine.as_str();
                let of_engine = per_engine.get(engine).copied().unwrap_or(0)
                    + engine_claims.get(engine).copied().unwrap_or(0);
                if of_engine < limits.for_engine(engine) {
                    let total_free = limits
                        .total
                        .is_none_or(|total| running.len() + total_claims < total);
                    if total_free {
                        granted.push(ticket);
                    }
                    total_claims += 1;
                }
                *engine_claims.entry(engine).or_insert(0) += 1;
            }
            claimed.push(request);
        }
        granted
    }

    /// Whether `ticket` (waiting) has its locks to take: none held by a running request and
    /// none needed by an earlier waiter.
    fn lock_ready(model: &Model, ticket: Ticket) -> bool {
        let request = model.request(ticket);
        !model
            .tickets_in(State::Running)
            .iter()
            .chain(
                model
                    .tickets_in(State::Waiting)
                    .iter()
                    .filter(|o| **o < ticket),
            )
            .any(|other| Model::conflict(model.request(*other), request))
    }

    /// Checks the table after one step. `expected` is what a scan of the rule grants after the
    /// step (computed before the model learnt of the grants); `granted` what the table did.
    fn check(
        table: &SlotTable,
        model: &mut Model,
        expected: &[Ticket],
        granted: &[Ticket],
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            granted,
            expected,
            "the table and the scan of the rule differ"
        );
        for ticket in granted {
            let state = model.requests.get(ticket.0 as usize).map(|entry| entry.1);
            prop_assert_eq!(state, Some(State::Waiting), "{} granted", ticket);
            model.requests[ticket.0 as usize].1 = State::Running;
        }
        let limits = table.limits();
        // Every step ends at the rule's fixed point: nothing more would be granted.
        prop_assert_eq!(scan_grants(model, limits), Vec::<Ticket>::new());
        let running = model.tickets_in(State::Running);
        let waiting = model.tickets_in(State::Waiting);
        prop_assert_eq!(table.running(), running.clone());
        // Arrival order is ticket order here.
        prop_assert_eq!(table.waiting(), waiting.clone());
        prop_assert_eq!(table.waiting_count(), waiting.len());
        let engine_running = |engine: &str| {
            running
                .iter()
                .filter(|other| model.request(**other).engine == engine)
                .count()
        };
        for engine in ENGINES {
            prop_assert_eq!(table.running_of(engine), engine_running(engine));
        }

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

        // Each grant respected the limits at its time: counting what ran before the step and
        // the grants of this step up to it.
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
        }

        // Idle permits never coexist with a waiter that could use them: a waiter whose engine
        // and total both have room waits for a lock (held, or needed by an earlier waiter).
        for ticket in &waiting {
            let request = model.request(*ticket);
            let engine_room = engine_running(&request.engine) < limits.for_engine(&request.engine);
            let total_room = limits.total.is_none_or(|total| running.len() < total);
            if engine_room && total_room {
                prop_assert!(
                    !lock_ready(model, *ticket),
                    "{} waits beside idle permits with its locks free",
                    ticket
                );
            }
        }

        // FIFO among competitors: a request granted while an earlier one waits shares no
        // lock with it, and if the earlier one had its locks, it was of another engine, which
        // is full (it could not have used the total permit taken).
        for ticket in granted {
            let request = model.request(*ticket);
            for earlier in waiting.iter().filter(|other| *other < ticket) {
                let ahead = model.request(*earlier);
                prop_assert!(
                    !Model::conflict(ahead, request),
                    "{} passed the conflicting earlier {}",
                    ticket,
                    earlier
                );
                if lock_ready(model, *earlier) {
                    prop_assert!(
                        ahead.engine != request.engine,
                        "{} passed {}",
                        ticket,
                        earlier
                    );
                    prop_assert!(
                        engine_running(&ahead.engine) >= limits.for_engine(&ahead.engine),
                        "{} took a permit {} could use",
                        ticket,
                        earlier
                    );
                }
            }
        }

        check_blockers(table, model, &running, &waiting)?;

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

    /// The ticket of an owner the property test made (`s<N>`).
    fn ticket_of(owner: &SlotOwner) -> Ticket {
        t(owner.session[1..].parse().unwrap())
    }

    /// Every waiting ticket has a blocker, and it is true: what it names is in the way, and the
    /// reasons before it in the order of [`Blocker`] are not. Running tickets have none.
    fn check_blockers(
        table: &SlotTable,
        model: &Model,
        running: &[Ticket],
        waiting: &[Ticket],
    ) -> Result<(), TestCaseError> {
        let limits = table.limits();
        for ticket in running {
            prop_assert_eq!(table.blocker(*ticket), None);
            prop_assert_eq!(table.waiting_for(&format!("s{}", ticket.0)), None);
        }
        for (index, ticket) in waiting.iter().enumerate() {
            let request = model.request(*ticket);
            prop_assert_eq!(table.waiting_for(&format!("s{}", ticket.0)), Some(*ticket));
            let blocker = table.blocker(*ticket);
            prop_assert!(blocker.is_some(), "{} waits for nothing", ticket);
            let project_held = running
                .iter()
                .any(|other| model.request(*other).project == request.project);
            let group_held = running.iter().any(|other| {
                let other = model.request(*other);
                request
                    .groups
                    .iter()
                    .any(|group| other.groups.contains(group))
            });
            let engine_limit = limits.for_engine(&request.engine);
            let engine_running = running
                .iter()
                .filter(|other| model.request(**other).engine == request.engine)
                .count();
            let engine_full = engine_running >= engine_limit;
            let total_full = limits.total.is_some_and(|total| running.len() >= total);
            match blocker.unwrap() {
                Blocker::ProjectLock { project, holder } => {
                    prop_assert_eq!(&project, &request.project);
                    let holder = ticket_of(&holder.unwrap());
                    prop_assert!(running.contains(&holder));
                    prop_assert_eq!(&model.request(holder).project, &project);
                }
                Blocker::GroupLock { group, holder } => {
                    prop_assert!(!project_held);
                    prop_assert!(request.groups.contains(&group));
                    let holder = ticket_of(&holder.unwrap());
                    prop_assert!(running.contains(&holder));
                    prop_assert!(model.request(holder).groups.contains(&group));
                }
                Blocker::EngineLimit {
                    engine,
                    limit,
                    running: count,
                    holders,
                } => {
                    prop_assert!(!project_held && !group_held);
                    prop_assert_eq!(&engine, &request.engine);
                    prop_assert_eq!(limit, engine_limit);
                    prop_assert_eq!(count, engine_running);
                    prop_assert!(engine_full);
                    let holders: Vec<Ticket> = holders.iter().map(ticket_of).collect();
                    let expected: Vec<Ticket> = running
                        .iter()
                        .copied()
                        .filter(|other| model.request(*other).engine == engine)
                        .collect();
                    prop_assert_eq!(holders, expected);
                }
                Blocker::TotalLimit {
                    limit,
                    running: count,
                    holders,
                } => {
                    prop_assert!(!project_held && !group_held && !engine_full);
                    prop_assert_eq!(Some(limit), limits.total);
                    prop_assert_eq!(count, running.len());
                    prop_assert!(total_full);
                    let holders: Vec<Ticket> = holders.iter().map(ticket_of).collect();
                    prop_assert_eq!(holders, running.to_vec());
                }
                Blocker::Queue { holder, claim } => {
                    prop_assert!(!project_held && !group_held && !engine_full && !total_full);
                    let holder = ticket_of(&holder.unwrap());
                    // The earliest waiter that needs one of its locks.
                    let first = waiting[..index]
                        .iter()
                        .find(|other| Model::conflict(model.request(**other), request));
                    prop_assert_eq!(first, Some(&holder), "{} is not first in the way", holder);
                    let ahead = model.request(holder);
                    match claim {
                        Claim::Project { project } => {
                            prop_assert_eq!(&project, &request.project);
                            prop_assert_eq!(&ahead.project, &project);
                        }
                        Claim::Group { group } => {
                            prop_assert!(ahead.project != request.project);
                            prop_assert!(request.groups.contains(&group));
                            prop_assert!(ahead.groups.contains(&group));
                        }
                        // Permits are claimed only by waiters that can use them.
                        claim => prop_assert!(false, "{} claims {:?}", holder, claim),
                    }
                }
            }
        }
        Ok(())
    }

    /// One step of a random sequence, applied to the table and the model, then checked.
    fn step(table: &mut SlotTable, model: &mut Model, op: Op) -> Result<(), TestCaseError> {
        let granted = match op {
            Op::Request {
                engine,
                project,
                groups,
            } => {
                let ticket = t(model.requests.len() as u64);
                let request = SlotRequest::new(
                    ENGINES[engine],
                    PROJECTS[project],
                    (0..3)
                        .filter(|bit| groups & (1 << bit) != 0)
                        .map(|bit| GROUPS[bit]),
                );
                model
                    .requests
                    .push((request.clone().normalized(), State::Waiting));
                let expected = scan_grants(model, table.limits());
                let owner = SlotOwner::new(format!("s{}", ticket.0), None::<String>);
                let granted = if table.request_for(ticket, request, Some(owner)) {
                    vec![ticket]
                } else {
                    Vec::new()
                };
                return check(table, model, &expected, &granted);
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
                let expected = scan_grants(model, table.limits());
                (expected, table.release(ticket))
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
                let expected = scan_grants(model, table.limits());
                (expected, table.cancel(ticket))
            }
            Op::SetLimits(limits) => {
                let expected = scan_grants(model, &limits);
                (expected, table.set_limits(limits))
            }
        };
        let (expected, granted) = granted;
        check(table, model, &expected, &granted)
    }

    fn request_strategy() -> impl Strategy<Value = Op> {
        (0..3usize, 0..4usize, 0u8..8).prop_map(|(engine, project, groups)| Op::Request {
            engine,
            project,
            groups,
        })
    }

    proptest! {
        #[test]
        fn random_sequences_keep_every_rule(
            initial in limits_strategy(),
            ops in proptest::collection::vec(op_strategy(), 1..80),
            arrivals in proptest::collection::vec(request_strategy(), 0..60),
        ) {
            let mut table = SlotTable::new(initial);
            let mut model = Model::default();
            for op in ops {
                step(&mut table, &mut model, op)?;
            }

            // No starvation: whatever keeps arriving, the first waiter runs once the requests
            // running now have ended, and then those running at that time (see the module
            // doc). Each release here is followed by a new arrival.
            let mut arrivals = arrivals.into_iter();
            if let Some(head) = model.tickets_in(State::Waiting).first().copied() {
                for _generation in 0..2 {
                    if model.requests[head.0 as usize].1 != State::Waiting {
                        break;
                    }
                    for ticket in table.running() {
                        let index = model
                            .tickets_in(State::Running)
                            .iter()
                            .position(|other| *other == ticket)
                            .unwrap();
                        step(&mut table, &mut model, Op::Release(index))?;
                        if let Some(arrival) = arrivals.next() {
                            step(&mut table, &mut model, arrival)?;
                        }
                    }
                }
                prop_assert!(
                    model.requests[head.0 as usize].1 != State::Waiting,
                    "{} still waits after two generations of runs",
                    head
                );
            }

            // Liveness: with every limit at least 1, finishing whatever runs, again and
            // again, serves every waiter.
            for _ in 0..=model.requests.len() {
                let running = table.running();
                if running.is_empty() {
                    break;
                }
                for _ in running {
                    step(&mut table, &mut model, Op::Release(0))?;
                }
            }
            prop_assert!(table.running().is_empty());
            prop_assert_eq!(table.waiting(), Vec::<Ticket>::new());
        }
    }
}
