//! The slot manager's vocabulary (`actors/slots/`), as `status`, `monitor` and the
//! `slot.waiting` event carry it: a request and its ticket, its owner, the limits, what runs
//! and waits, and why a waiter waits ([`Blocker`], worded once by [`Blocker::describe`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

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
    /// Other projects' locks this request takes too: those of the working trees that hold its
    /// project's or lie inside it. Two projects of overlapping trees then never run at once,
    /// whichever existed when the other's run began (each takes its own lock, and the later
    /// one the earlier one's as well).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overlapping: Vec<String>,
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
            overlapping: Vec::new(),
        }
    }

    /// The same request also taking the locks of `projects` (see [`SlotRequest::overlapping`]).
    pub fn overlapping(mut self, projects: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.overlapping = projects.into_iter().map(Into::into).collect();
        self
    }

    /// The same request with its groups sorted and deduplicated, so that snapshots are stable
    /// and a group listed twice is one lock.
    pub(crate) fn normalized(mut self) -> SlotRequest {
        self.groups.sort();
        self.groups.dedup();
        self.overlapping.sort();
        self.overlapping.dedup();
        self.overlapping.retain(|project| *project != self.project);
        self
    }
}

/// Who a request is for: the session whose run it is. Only reported, never used to decide a
/// grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlotOwner {
    /// The session's id; `actors::slots::SlotsHandle::blocker` finds a session's waiting request by it.
    pub session: String,
    /// What a person calls the session (its title), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl SlotOwner {
    /// The owner `session`, labelled `label` when there is one.
    pub fn new(session: impl Into<String>, label: Option<impl Into<String>>) -> SlotOwner {
        SlotOwner {
            session: session.into(),
            label: label.map(Into::into),
        }
    }
}

/// Why a waiting request is not granted now, and who is in the way: the first reason found in
/// this order — its project's lock, one of its groups' locks, its engine's limit, the total
/// limit (all held by *running* requests), then the claim of an earlier waiter on one of its
/// locks (the FIFO rule, see the module doc).
///
/// Serialized with a `reason` tag, e.g. `{"reason":"project_lock","project":"P","holder":
/// {"session":"S","label":"Refactor"}}`; this is the `held_by` of a `slot.waiting` event. A
/// holder is `None` (left out) when its request named no owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Blocker {
    /// A running request holds the project's lock (`project` is the request's project).
    ProjectLock {
        project: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<SlotOwner>,
    },
    /// A running request holds the lock of `group`, one of the request's locking groups.
    GroupLock {
        group: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<SlotOwner>,
    },
    /// `running` requests of `engine` run and its limit is `limit` (0: the engine is paused);
    /// `holders` are the owners of those that named one, in ticket order.
    EngineLimit {
        engine: String,
        limit: usize,
        running: usize,
        holders: Vec<SlotOwner>,
    },
    /// `running` requests run over all engines and `slots.total` is `limit`.
    TotalLimit {
        limit: usize,
        running: usize,
        holders: Vec<SlotOwner>,
    },
    /// Nothing running is in the way, but an earlier waiter (`holder`) needs a lock this
    /// request needs too (`claim`), so it is served first.
    Queue {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<SlotOwner>,
        claim: Claim,
    },
}

/// How many holders a blocker's words name before "and N more".
const NAMED_HOLDERS: usize = 3;

/// The most characters of a session's title a blocker's words keep.
const LABEL_CHARS: usize = 40;

impl SlotOwner {
    /// `"Fix the client"` (its title), or the session's short id when it has none.
    fn name(&self) -> String {
        let label = self
            .label
            .as_deref()
            .map(|label| label.split_whitespace().collect::<Vec<_>>().join(" "));
        match label {
            Some(label) if !label.is_empty() => {
                let mut short: String = label.chars().take(LABEL_CHARS).collect();
                if label.chars().count() > LABEL_CHARS {
                    short.pop();
                    short.push('…');
                }
                format!("\"{short}\"")
            }
            _ => self
                .session
                .chars()
                .take(crate::store::select::SHORT_ID)
                .collect(),
        }
    }

    /// `session "Fix the client"`.
    fn described(&self) -> String {
        format!("session {}", self.name())
    }
}

/// `session "a"`, `sessions "a", "b" and 2 more`; empty when none is known.
fn holders_named(owners: &[SlotOwner]) -> String {
    let named: Vec<String> = owners
        .iter()
        .take(NAMED_HOLDERS)
        .map(SlotOwner::name)
        .collect();
    let more = owners.len().saturating_sub(NAMED_HOLDERS);
    match (named.len(), more) {
        (0, _) => String::new(),
        (1, _) => format!("session {}", named[0]),
        (_, 0) => format!("sessions {}", named.join(", ")),
        (_, more) => format!("sessions {} and {more} more", named.join(", ")),
    }
}

impl Blocker {
    /// Why a request waits, in words: the status line's, the `slot.waiting` line's and a
    /// waiting session's reason. `project` is the waiting prompt's project name (a blocker
    /// names projects by id).
    pub fn describe(&self, project: &str) -> String {
        let by = |holder: &Option<SlotOwner>| match holder {
            Some(holder) => format!(" by {}", holder.described()),
            None => String::new(),
        };
        let held = |holders: &[SlotOwner]| match holders_named(holders) {
            held if held.is_empty() => String::new(),
            held => format!(", held by {held}"),
        };
        match self {
            Blocker::ProjectLock { holder, .. } => {
                format!("project {project} locked{}", by(holder))
            }
            Blocker::GroupLock { group, holder } => format!("group {group} locked{}", by(holder)),
            Blocker::EngineLimit { engine, limit, .. } if *limit == 0 => {
                format!("{engine} paused (slots.{engine} = 0)")
            }
            Blocker::EngineLimit {
                engine,
                limit,
                holders,
                ..
            } => format!("{engine} limit {limit} reached{}", held(holders)),
            Blocker::TotalLimit { limit, holders, .. } => {
                format!("total limit {limit} reached{}", held(holders))
            }
            Blocker::Queue { holder, claim } => {
                let ahead = match holder {
                    Some(holder) => holder.described(),
                    None => "an earlier session".to_string(),
                };
                let needs = match claim {
                    Claim::Project { .. } => format!("project {project}"),
                    Claim::Group { group } => format!("group {group}"),
                    Claim::Engine { engine } => format!("the last {engine} permit"),
                    Claim::Total => "the last permit of slots.total".to_string(),
                };
                format!("queued behind {ahead}, first in line for {needs}")
            }
        }
    }
}

/// What an earlier waiter claims that a later one needs ([`Blocker::Queue`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Claim {
    /// The same project.
    Project { project: String },
    /// A locking group both need.
    Group { group: String },
    /// The last permit of the engine's limit. Not produced since waiters claim permits only
    /// when they can use them (a waiter with room in its engine and the total waits only for
    /// a lock); kept so that `slot.waiting` events stored before still read.
    Engine { engine: String },
    /// The last permit of the total limit. Not produced either (see `Engine`).
    Total,
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
    /// Who it is for, when the request said (`actors::slots::SlotsHandle::acquire_for`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<SlotOwner>,
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

/// A waiting request as `status` shows it: the ticket, what it asked for, and what it waits
/// for now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingEntry {
    #[serde(flatten)]
    pub entry: SlotEntry,
    /// Why it is not granted now (always known for a waiter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocker: Option<Blocker>,
}

/// The table as `status` shows it: the limits and what runs, whole (a few entries: as many as
/// the limits allow), and of the waiters their count and the first few in the order they are
/// served, each with its blocker. A backlog of 2,000 waiting sessions would otherwise be
/// 300 KB of JSON for every `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotSummary {
    pub limits: SlotLimits,
    /// Running requests, by ticket.
    pub running: Vec<SlotEntry>,
    /// How many requests of each engine run now (engines with none are left out).
    pub running_per_engine: BTreeMap<String, usize>,
    /// How many requests wait, in all.
    pub waiting_count: usize,
    /// The first waiting requests in arrival order (at most the number asked for).
    pub waiting: Vec<WaitingEntry>,
}
