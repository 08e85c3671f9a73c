//! The queue among several daemons on a shared store (PostgreSQL): what a daemon claims
//! ([`claim_work`], as its room allows, keeping the locks of projects and execution groups
//! across daemons), what stands between a session's head and its claim ([`look_shared`]),
//! and what is taken back from a daemon whose lease ran out ([`rescue`]). The one-daemon
//! queue is `store::prompts`; the actors reach this through the coordination seam
//! (`actors::coordination`), never by checking for a lease themselves.

use crate::store::sql::{self, args, Conn};
use serde::{Deserialize, Serialize};

use super::daemons::Claim;
use super::dependencies::waiting_sql;
use super::now_ms;
use super::pauses::paused_sql;
use super::prompts::{
    end_cancelled, maybe_prompt_at, prompt_columns, prompt_row, set_session_status, Look, Prompt,
    PromptStatus, PROMPT_COLUMNS,
};
use super::sessions::SessionStatus;
use crate::engine::EngineKind;

/// [`Look`] with other daemons live, [`Rivals`] included.
pub(super) fn look_shared(
    connection: &Conn,
    session_id: &str,
    node: Option<&str>,
    total: Option<usize>,
) -> sql::Result<Look> {
    // The rivals of a project in no execution group are the sessions sharing its
    // directory, asked here in a few index lookups: the general question
    // ([`rivals`]: groups, served projects, every running prompt's locks) is a plan
    // of some sixty nodes that the server sets up at every run, ~0.3 to 0.6 ms under
    // the write lock at each end. A project in a group (its row says so now) is
    // asked that question after.
    #[allow(clippy::type_complexity)]
    let (runs, next, elsewhere, grouped, paused, waiting, lean): (
        bool,
        Option<Prompt>,
        bool,
        bool,
        bool,
        bool,
        Rivals,
    ) =
        connection.row(
            concat!(
                "WITH me AS (SELECT s.project_id, s.worktree IS NULL AS shares_tree, \
                                    EXISTS (SELECT 1 FROM projects sp \
                                             WHERE sp.id = s.project_id \
                                               AND sp.groups <> '[]') AS grouped \
                               FROM sessions s WHERE s.id = ?1), \
                      head AS (SELECT prompt_id AS id, created_at FROM queue_heads \
                                WHERE session_id = ?1), \
                      busy AS (SELECT EXISTS (SELECT 1 FROM prompts \
                                              WHERE session_id = ?1 AND status = 'running') AS runs), \
                      asked AS (SELECT NOT busy.runs AND EXISTS (SELECT 1 FROM head) AS head \
                                  FROM busy) \
                 SELECT busy.runs, \
                        EXISTS (SELECT 1 FROM sessions WHERE id = ?1 AND worktree_node <> ?2), \
                        coalesce((SELECT grouped FROM me), false), \
                        CASE WHEN asked.head THEN EXISTS ( \
                            SELECT 1 FROM me, sessions o JOIN prompts r ON r.session_id = o.id \
                             WHERE me.shares_tree AND NOT me.grouped \
                               AND o.project_id = me.project_id AND o.id <> ?1 \
                               AND o.worktree IS NULL AND r.status = 'running') END, \
                        CASE WHEN asked.head THEN EXISTS ( \
                            SELECT 1 FROM me, head mine, sessions o \
                              JOIN queue_heads q ON q.session_id = o.id \
                             WHERE me.shares_tree AND NOT me.grouped \
                               AND o.project_id = me.project_id AND o.id <> ?1 \
                               AND o.worktree IS NULL AND o.archived_at IS NULL \
                               AND (q.created_at, q.prompt_id) < (mine.created_at, mine.id) \
                               AND NOT EXISTS (SELECT 1 FROM prompts r \
                                                WHERE r.session_id = o.id AND r.status = 'running') \
                               AND me.project_id = ANY (",
                served_projects_sql!(),
                ")) END, \
                        CASE WHEN asked.head AND ?3 THEN (",
                running_everywhere_sql!(),
                ") END, \
                        EXISTS (SELECT 1 FROM sessions s WHERE s.id = ?1 AND ",
                paused_sql!("s"),
                "), ",
                waiting_sql!("h.prompt_id"),
                ", ",
                prompt_columns!("p."),
                " FROM busy CROSS JOIN asked \
                   LEFT JOIN queue_heads h ON h.session_id = ?1 \
                   LEFT JOIN prompts p ON p.id = h.prompt_id"
            ),
            args![session_id, node, total.is_some()],
            |row| {
                let lean = Rivals {
                    held: row.get::<Option<bool>>(3)?.unwrap_or(false),
                    elder_waits: row.get::<Option<bool>>(4)?.unwrap_or(false),
                    running: row.get(5)?,
                };
                Ok((
                    row.get(0)?,
                    maybe_prompt_at(row, 8)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(6)?,
                    row.get(7)?,
                    lean,
                ))
            },
        )?;
    let asked = match (&next, grouped && !runs) {
        (Some(head), true) => rivals(connection, session_id, &head.id, total.is_some())?,
        _ => lean,
    };
    Ok(Look {
        runs,
        next,
        worktree_elsewhere: elsewhere,
        paused,
        waiting,
        rivals: Some(asked),
    })
}

/// How many more prompts a daemon takes on a shared store: per engine, its limit less what
/// it runs; and in all, its total less what it runs. Claiming more than it can start would
/// keep prompts from daemons that could run them now.
#[derive(Debug, Clone, Default)]
pub struct Room {
    /// `slots.<engine>` for each engine (absent: the default limit).
    pub engines: std::collections::HashMap<String, usize>,
    pub default_per_engine: usize,
    pub total: Option<usize>,
}

impl Room {
    /// The slots `engine` has left, with `running` (engine, count) taken.
    fn left(&self, engine: &str, running: &[(String, i64)]) -> i64 {
        let limit = self
            .engines
            .get(engine)
            .copied()
            .unwrap_or(self.default_per_engine) as i64;
        limit
            - running
                .iter()
                .find(|(name, _)| name == engine)
                .map_or(0, |(_, count)| *count)
    }
}

/// SQL: the sessions with a prompt running, on any daemon, as an array (read once, whatever
/// the statistics; see `claim_work`).
macro_rules! running_sessions_sql {
    () => {
        "ARRAY(SELECT r.session_id FROM prompts r WHERE r.status = 'running')"
    };
}

/// SQL: the projects of shared isolation that a running prompt holds, as an array (each
/// running prompt's session looked up by key).
macro_rules! held_projects_sql {
    () => {
        "ARRAY(SELECT rs.project_id FROM prompts r CROSS JOIN LATERAL ( \
                  SELECT s.project_id FROM sessions s \
                   WHERE s.id = r.session_id AND s.worktree IS NULL OFFSET 0) rs \
                WHERE r.status = 'running')"
    };
}

/// SQL: the projects some live daemon serves, as an array (each daemon's list parsed once).
macro_rules! served_projects_sql {
    () => {
        "ARRAY(SELECT json_array_elements_text(d.serves::json) FROM daemons d \
                WHERE d.lease_until >= corral_now_ms())"
    };
}

/// Claims for `claim`'s daemon the oldest queued prompt of each session that runs nothing,
/// whose project it serves (`serves`: project ids), as far as its room allows; replies with
/// the prompts, now `running`. Runs under the store's write lock, after the fence check (see
/// `store::daemons`), so two daemons never claim one prompt. PostgreSQL only (a SQLite
/// store's one daemon claims in `enqueue` and `finish_and_claim_next`).
pub(crate) fn claim_work(
    connection: &Conn,
    claim: &Claim,
    serves: &[String],
    room: &Room,
) -> sql::Result<Vec<Prompt>> {
    if serves.is_empty() {
        return Ok(Vec::new());
    }
    // What this daemon runs, by engine, and (`slots.total` holds across the daemons) what
    // every daemon runs, in the row without an engine: one round trip under the write lock.
    let counts: Vec<(Option<String>, i64)> = connection.rows(
        concat!(
            "SELECT NULL, (",
            running_everywhere_sql!(),
            ") WHERE ?2 \
             UNION ALL \
             SELECT s.engine, count(*) FROM prompts p JOIN sessions s ON s.id = p.session_id \
              WHERE p.status = 'running' AND p.claimed_by = ?1 GROUP BY s.engine"
        ),
        args![claim.node_id, room.total.is_some()],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let mut everywhere = 0;
    let mut running: Vec<(String, i64)> = Vec::new();
    for (engine, count) in counts {
        match engine {
            Some(engine) => running.push((engine, count)),
            None => everywhere = count,
        }
    }
    let total_left = match room.total {
        Some(total) => total as i64 - everywhere,
        None => i64::MAX,
    };
    if total_left <= 0 {
        // The total is taken on every daemon: no head could be claimed, so the queue is not
        // read.
        return Ok(Vec::new());
    }
    // Heads: the oldest queued prompt of each session with nothing running, in the order
    // they were queued. Written so that every plan is cheap, stale statistics included: the
    // served projects are an `ARRAY(…)`, parsed once (as `IN (SELECT json_array_elements_text
    // (…))` the list was parsed again for every queued prompt), and the heads are the store's
    // `queue_heads`, kept by triggers, walked in order: a sort of every queued prompt
    // (`DISTINCT ON`) cost 13 ms a claim at 10,000 queued, and an anti-join of the queue with
    // itself up to 200 ms on a fresh database with 1,000 queued, both under the lock. A
    // page's `LIMIT` stops the walk and the lookups. Each head's session is looked up by key
    // (the `LATERAL … OFFSET 0` is not turned into a join), and the sessions that run
    // something and the projects held are each read once, into an array: a store whose
    // statistics are from when its tables were empty (a new one, before autovacuum's first
    // analyze) planned joins as scans, 40 ms a claim, and each head's running prompt as a
    // walk of every running prompt. Its project's groups are a lookup by key too (joined,
    // the projects were scanned and hashed for every head: 0.25 ms against 0.19–0.22 ms a
    // page of 16 heads on a store of 200 sessions).
    //
    // With other daemons live, the claims keep the locks (`conflicts_sql!`): the heads of a
    // shared-isolation project a session of which runs are left out here, in one pass over
    // the running prompts; of the rest, only the first head of each such project is taken,
    // the oldest (first come, first served); a project in an execution group is asked per
    // head.
    let locks = shares_the_store(connection, claim)?;
    let serves = serde_json::to_string(serves).expect("strings serialize");
    let mut pass = ClaimPass {
        left: crate::engine::EngineKind::ALL
            .iter()
            .map(|kind| {
                let engine = kind.as_str();
                (engine.to_string(), room.left(engine, &running))
            })
            .collect(),
        turn_given: std::collections::HashSet::new(),
        total_left,
        claimed: Vec::new(),
    };
    // The heads are read a page at a time, oldest first: a pass fills its room from the
    // first few, so the sessions and projects of the rest are not looked up (each head's are
    // ~4 µs, under the write lock, for every waiting session).
    let mut after: Option<(i64, String)> = None;
    // The first page is sized by the room: four heads a slot leave room for those passed
    // over (a shared project's later heads, engines full, a group's lock).
    let mut page = total_left.saturating_mul(4).clamp(16, HEADS_A_PAGE);
    loop {
        // Only the heads of engines with a slot left here: with this daemon's slots full
        // (the usual case while the total has room) no head is looked up at all.
        let engines = pass.engines_with_room();
        if engines.is_empty() {
            break;
        }
        let heads = connection.rows(
            concat!(
                "SELECT q.prompt_id, q.session_id, h.engine, h.project_id, h.shared, h.grouped, \
                        q.created_at \
                   FROM queue_heads q \
                  CROSS JOIN LATERAL ( \
                         SELECT s.engine, s.project_id, s.worktree IS NULL AS shared, \
                                coalesce((SELECT sp.groups <> '[]' FROM projects sp \
                                           WHERE sp.id = s.project_id), false) AS grouped \
                           FROM sessions s \
                          WHERE s.id = q.session_id AND s.archived_at IS NULL \
                            AND NOT ", paused_sql!("s"), " \
                            AND (s.worktree_node IS NULL OR s.worktree_node = ?1) \
                            AND s.project_id = ANY (ARRAY(SELECT json_array_elements_text(?2::text::json))) \
                            AND s.engine = ANY (ARRAY(SELECT json_array_elements_text(?7::text::json))) \
                         OFFSET 0) h \
                  WHERE q.session_id <> ALL (", running_sessions_sql!(), ") \
                    AND NOT ", waiting_sql!("q.prompt_id"), " \
                    AND NOT EXISTS (SELECT 1 FROM prompts dp WHERE dp.id = q.prompt_id \
                                       AND dp.due_at > corral_now_ms()) \
                    AND NOT (?3 AND h.shared AND h.project_id = ANY (", held_projects_sql!(), ")) \
                    AND (?4::bigint IS NULL OR (q.created_at, q.prompt_id) > (?4::bigint, ?5::text)) \
                  ORDER BY q.created_at, q.prompt_id LIMIT ?6"
            ),
            args![
                claim.node_id,
                serves,
                locks,
                after.as_ref().map(|(at, _)| *at),
                after.as_ref().map(|(_, id)| id.clone()),
                page,
                serde_json::to_string(&engines).expect("strings serialize")
            ],
            |row| {
                Ok(Head {
                    id: row.get(0)?,
                    session_id: row.get(1)?,
                    engine: row.get(2)?,
                    project_id: row.get(3)?,
                    shared: row.get(4)?,
                    grouped: row.get(5)?,
                    created_at: row.get(6)?,
                })
            },
        )?;
        let full = heads.len() as i64 == page;
        after = heads.last().map(|head| (head.created_at, head.id.clone()));
        if !pass.take(connection, claim, locks, heads)? || !full {
            break;
        }
        page = HEADS_A_PAGE;
    }
    Ok(pass.claimed)
}

/// The most heads [`claim_work`] reads at a time.
const HEADS_A_PAGE: i64 = 256;

/// What one [`claim_work`] has claimed and what room it has left, across its pages of heads.
struct ClaimPass {
    /// Slots left per engine on this daemon.
    left: std::collections::HashMap<String, i64>,
    /// Shared-isolation projects whose oldest head this pass took or passed over.
    turn_given: std::collections::HashSet<String>,
    /// `slots.total` left across the daemons (`i64::MAX`: no total).
    total_left: i64,
    claimed: Vec<Prompt>,
}

impl ClaimPass {
    /// Claims what it may of `heads`, oldest first; false once the total is taken (no later
    /// head could be claimed).
    fn take(
        &mut self,
        connection: &Conn,
        claim: &Claim,
        locks: bool,
        heads: Vec<Head>,
    ) -> sql::Result<bool> {
        for head in heads {
            if self.total_left <= 0 {
                return Ok(false);
            }
            if locks && head.shared && !self.turn_given.insert(head.project_id.clone()) {
                continue;
            }
            // The total's last slot goes to the oldest waiter of every daemon; the heads
            // after this one are younger still.
            if locks && self.total_left == 1 && older_waiter(connection, &head.id)? {
                return Ok(false);
            }
            // Every engine's room was counted up front: a head of another is not claimed.
            let Some(engine_left) = self.left.get_mut(head.engine.as_str()) else {
                continue;
            };
            if *engine_left <= 0
                || (locks
                    && head.grouped
                    && rivals(connection, &head.session_id, &head.id, false)?.hold_or_go_first())
            {
                continue;
            }
            let prompt = connection.opt_row(
                &format!(
                    "UPDATE prompts SET status = 'running', started_at = ?2, claimed_by = ?3, \
                     claim_epoch = ?4 WHERE id = ?1 AND status = 'queued' RETURNING {PROMPT_COLUMNS}"
                ),
                args![head.id, now_ms(), claim.node_id, claim.epoch],
                prompt_row,
            )?;
            set_session_status(connection, &head.session_id, SessionStatus::Running)?;
            *engine_left -= 1;
            self.total_left -= 1;
            self.claimed.extend(prompt);
        }
        Ok(self.total_left > 0)
    }

    /// The engines this daemon has a slot left for.
    fn engines_with_room(&self) -> Vec<&str> {
        self.left
            .iter()
            .filter(|(_, left)| **left > 0)
            .map(|(engine, _)| engine.as_str())
            .collect()
    }
}

/// A session's oldest queued prompt, as [`claim_work`] reads the queue.
struct Head {
    id: String,
    session_id: String,
    engine: EngineKind,
    project_id: String,
    /// The session has no worktree: it takes its project's one directory.
    shared: bool,
    /// Its project is in an execution group (which may lock it with other projects).
    grouped: bool,
    /// When it was queued: where the next page of heads begins.
    created_at: i64,
}

/// SQL: how many prompts run now on every daemon of a shared store.
macro_rules! running_everywhere_sql {
    () => {
        "SELECT count(*) FROM prompts WHERE status = 'running' AND claimed_by IS NOT NULL"
    };
}

/// How many prompts run now on every daemon of a shared store.
pub(crate) fn running_everywhere(connection: &Conn) -> sql::Result<i64> {
    connection.row(running_everywhere_sql!(), args![], |row| row.get(0))
}

/// Whether another daemon's lease is live: the locks of projects and groups are then kept by
/// the claims (below); a daemon alone on the store takes everything it serves, and its slot
/// manager keeps them, as on SQLite (its prompts' ends wake no claimer).
pub(super) fn shares_the_store(connection: &Conn, claim: &Claim) -> sql::Result<bool> {
    Ok(super::daemons::others_live(connection, &claim.node_id)? > 0)
}

/// Whether claiming `prompt_id` would take the last free slot of `total` (`slots.total`,
/// across the daemons; `None`: unset, or the daemon alone) while an older prompt waits for
/// it, or there is no free slot. The last slot goes to the oldest waiter: without this the
/// daemon whose prompt ended took its session's next prompt at once, every time, and a
/// prompt queued earlier on another daemon starved.
pub(super) fn total_goes_elsewhere(
    connection: &Conn,
    prompt_id: &str,
    total: Option<usize>,
    running: Option<i64>,
) -> sql::Result<bool> {
    let Some(total) = total else {
        return Ok(false);
    };
    // Read already with the claim's other questions ([`rivals`]), or now.
    let running = match running {
        Some(running) => running,
        None => running_everywhere(connection)?,
    };
    let free = total as i64 - running;
    Ok(free <= 0 || (free == 1 && older_waiter(connection, prompt_id)?))
}

/// Whether an older prompt than `prompt_id` waits for a slot: the head of another session
/// that runs nothing, whose project a live daemon serves and no other session holds (shared
/// isolation), and whose worktree, if it has one, is on a live daemon. Each head's session
/// is looked up by key, as in [`claim_work`].
fn older_waiter(connection: &Conn, prompt_id: &str) -> sql::Result<bool> {
    // The sessions' heads will do (every filter is the session's, and a session's head is
    // its oldest queued prompt): the walk of the heads in queue order stops at the first
    // that waits.
    connection.row(
        concat!(
            "WITH me AS (SELECT p.session_id, p.created_at, p.id FROM prompts p WHERE p.id = ?1) \
             SELECT EXISTS ( \
                SELECT 1 FROM me, queue_heads q \
                 CROSS JOIN LATERAL ( \
                       SELECT o.project_id, o.worktree, o.worktree_node FROM sessions o \
                        WHERE o.id = q.session_id AND o.archived_at IS NULL OFFSET 0) o \
                 WHERE q.session_id <> me.session_id \
                   AND (q.created_at, q.prompt_id) < (me.created_at, me.id) \
                   AND q.session_id <> ALL (",
            running_sessions_sql!(),
            ") \
                   AND o.project_id = ANY (",
            served_projects_sql!(),
            ") \
                   AND NOT (o.worktree IS NULL AND o.project_id = ANY (",
            held_projects_sql!(),
            ")) \
                   AND (o.worktree_node IS NULL \
                        OR EXISTS (SELECT 1 FROM daemons d WHERE d.node_id = o.worktree_node \
                                    AND d.lease_until >= corral_now_ms())))"
        ),
        args![prompt_id],
        |row| row.get(0),
    )
}

/// SQL: session `o` (project `op`) holds a lock session `s` (project `sp`) needs, were one of
/// its prompts running: one directory without worktrees (shared isolation), or a locking
/// execution group their projects share. A macro so both queries below take it in `concat!`.
macro_rules! conflicts_sql {
    () => {
        "((o.project_id = s.project_id AND o.worktree IS NULL AND s.worktree IS NULL) \
           OR EXISTS (SELECT 1 FROM json_array_elements_text(op.groups::json) og \
                        JOIN json_array_elements_text(sp.groups::json) sg ON og = sg \
                        JOIN execution_groups eg ON eg.name = og AND eg.locking = 1))"
    };
}

/// SQL: whether a prompt of another session runs, on any daemon, that holds a lock session
/// `$session` needs (see `conflicts_sql!`). This daemon's own count: a prompt claimed here
/// that its slot manager would keep waiting for the lock is not claimed, so it neither counts
/// against `slots.total` while it waits nor holds the lock from the other daemons; the
/// store's claims keep the locks the slot managers keep within one daemon.
macro_rules! held_by_another_session_sql {
    ($session:literal) => {
        concat!(
            "SELECT EXISTS ( \
               SELECT 1 FROM sessions s JOIN projects sp ON sp.id = s.project_id, \
                      prompts r JOIN sessions o ON o.id = r.session_id \
                                JOIN projects op ON op.id = o.project_id \
                WHERE s.id = ",
            $session,
            " AND r.status = 'running' AND o.id <> s.id AND ",
            conflicts_sql!(),
            ")"
        )
    };
}

/// SQL: whether prompt `$prompt` is to wait for an older one: a queued prompt of another
/// session that needs the same lock (see `conflicts_sql!`), has no claimed prompt running
/// yet, and is served by a live daemon. Grants of a lock across daemons are then first come,
/// first served: without it the daemon that holds a project took its session's next prompt
/// at every end, and a session waiting on another daemon starved. (Within one daemon the
/// slot manager grants in order.)
///
/// The rival projects first, materialized (this one, and with groups those sharing one, each
/// served by a live daemon: the daemons' lists are parsed once, not per project, session or
/// queued prompt; 2 to 10 ms a claim when the planner read them per project), then their
/// sessions' heads (`queue_heads`: one row a session, whatever its queue's length).
macro_rules! waits_for_elder_sql {
    ($prompt:literal) => {
        concat!(
            "WITH me AS ( \
            SELECT p.created_at, p.id, s.id AS session_id, s.project_id, s.worktree, sp.groups \
              FROM prompts p JOIN sessions s ON s.id = p.session_id \
                             JOIN projects sp ON sp.id = s.project_id \
             WHERE p.id = ",
            $prompt,
            "), \
         rivals AS MATERIALIZED ( \
            SELECT op.id AS project_id, \
                   EXISTS (SELECT 1 FROM json_array_elements_text(op.groups::json) og \
                             JOIN json_array_elements_text(me.groups::json) sg ON og = sg \
                             JOIN execution_groups eg ON eg.name = og AND eg.locking = 1) \
                     AS grouped \
              FROM me, projects op \
             WHERE (op.id = me.project_id OR (me.groups <> '[]' AND op.groups <> '[]')) \
               AND op.id = ANY (",
            served_projects_sql!(),
            ")) \
         SELECT EXISTS ( \
            SELECT 1 FROM me, rivals r JOIN sessions o ON o.project_id = r.project_id \
                     JOIN queue_heads q ON q.session_id = o.id \
             WHERE o.id <> me.session_id AND o.archived_at IS NULL \
               AND (r.grouped OR (o.project_id = me.project_id AND o.worktree IS NULL \
                                  AND me.worktree IS NULL)) \
               AND (q.created_at < me.created_at \
                    OR (q.created_at = me.created_at AND q.prompt_id < me.id)) \
               AND o.id <> ALL (",
            running_sessions_sql!(),
            "))"
        )
    };
}
// The claims' SQL pieces, by path as well, so that `look_shared`, above their definitions,
// can take them too.
use {running_everywhere_sql, served_projects_sql};

/// What stands between a session's head prompt and its claim on a shared store, asked in one
/// round trip (each question was one, under the write lock). PostgreSQL only.
pub(super) struct Rivals {
    /// Another session's running prompt holds a lock this session needs.
    held: bool,
    /// An older prompt needing the same lock waits (first come, first served).
    elder_waits: bool,
    /// Every daemon's running prompts, when asked for (`slots.total` is set).
    pub(super) running: Option<i64>,
}

impl Rivals {
    /// Whether the lock is another session's now or next.
    pub(super) fn hold_or_go_first(&self) -> bool {
        self.held || self.elder_waits
    }
}

/// [`Rivals`] of session `session_id`'s head `prompt_id`; `count_running`: with the count of
/// running prompts.
fn rivals(
    connection: &Conn,
    session_id: &str,
    prompt_id: &str,
    count_running: bool,
) -> sql::Result<Rivals> {
    connection.row(
        concat!(
            "SELECT (",
            held_by_another_session_sql!("?1"),
            "), (",
            waits_for_elder_sql!("?2"),
            "), CASE WHEN ?3 THEN (",
            running_everywhere_sql!(),
            ") END"
        ),
        args![session_id, prompt_id, count_running],
        |row| {
            Ok(Rivals {
                held: row.get(0)?,
                elder_waits: row.get(1)?,
                running: row.get(2)?,
            })
        },
    )
}

/// What a run cut off by its daemon's lease running out says (`runs.error`).
const LEASE_EXPIRED: &str = "the lease of the daemon that ran it expired";

/// How many of a prompt's runs may be cut off by their daemon's lease running out before a
/// rescue fails the prompt instead of running it again: an engine that takes its host or its
/// daemon down would otherwise take every daemon of the store down in turn, for ever.
pub const RESCUES_AT_MOST: i64 = 3;

/// A prompt taken back from a daemon whose lease ran out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rescued {
    pub prompt_id: String,
    pub session_id: String,
    /// The daemon's node it was claimed by.
    pub from: String,
}

/// Puts back in the queue every running prompt whose claim no longer holds: its daemon's lease
/// ran out or stopped, or its node registered again (another epoch). Its runs still marked
/// running are closed `interrupted` and told, with the requeue, in the session's events. The
/// prompts keep their place (their `created_at`), so each runs first in its session again,
/// on its thread. Runs under the store's write lock (see `store::daemons`).
pub(crate) fn rescue(connection: &Conn) -> sql::Result<(Vec<Rescued>, Vec<super::events::Event>)> {
    use crate::events::{Payload, PromptEnded, PromptRequeued, RunExited};
    let lost: Vec<(Rescued, bool)> = connection.rows(
        "SELECT p.id, p.session_id, p.claimed_by, p.cancel_asked_at IS NOT NULL FROM prompts p \
           LEFT JOIN daemons d ON d.node_id = p.claimed_by \
          WHERE p.status = 'running' AND p.claimed_by IS NOT NULL \
            AND (d.node_id IS NULL OR d.epoch <> p.claim_epoch OR d.lease_until IS NULL \
                 OR d.lease_until < corral_now_ms())",
        args![],
        |row| {
            let rescued = Rescued {
                prompt_id: row.get(0)?,
                session_id: row.get(1)?,
                from: row.get(2)?,
            };
            Ok((rescued, row.get(3)?))
        },
    )?;
    if !lost.is_empty() {
        // A claim of this transaction's own writes may be among those ended here.
        connection.forget_fences_held();
    }
    let now = now_ms();
    let mut telling = Vec::new();
    // Ended here for good: what runs after them is let go, and its heads left to the claims.
    let mut ended = Vec::new();
    for (rescued, cancelled) in &lost {
        let runs: Vec<String> = connection.rows(
            "UPDATE runs SET status = 'interrupted', ended_at = ?2, retry_decision = 'requeued', \
                    error = ?3 \
              WHERE prompt_id = ?1 AND status = 'running' RETURNING id",
            args![rescued.prompt_id, now, LEASE_EXPIRED],
            |row| row.get(0),
        )?;
        let lost_runs: i64 = connection.row(
            "SELECT count(*) FROM runs WHERE prompt_id = ?1 AND error = ?2",
            args![rescued.prompt_id, LEASE_EXPIRED],
            |row| row.get(0),
        )?;
        // Its engine may be what takes its daemons down: then not run on another one again.
        let given_up = lost_runs >= RESCUES_AT_MOST && !runs.is_empty();
        let told = |run_id: Option<String>, payload| {
            let prompt_id = Some(rescued.prompt_id.clone());
            super::events::NewEvent::new(rescued.session_id.clone(), prompt_id, run_id, payload)
        };
        let reason = match (cancelled, given_up) {
            (true, _) => format!("{LEASE_EXPIRED}; it was cancelled meanwhile"),
            (false, true) => LEASE_EXPIRED.to_string(),
            (false, false) => format!("{LEASE_EXPIRED}; another daemon runs the prompt again"),
        };
        for run_id in runs {
            let exited = RunExited {
                ended_by: Some("lease expired".into()),
                reason: Some(reason.clone()),
                ..RunExited::default()
            };
            telling.push(told(Some(run_id), Payload::RunExited(exited)));
        }
        if *cancelled {
            // Asked while its daemon was dying: ended as asked, never run again.
            end_cancelled(connection, &rescued.prompt_id, &rescued.session_id, now)?;
            let cancelled = PromptEnded {
                error: Some("cancelled while the lease of the daemon that ran it expired".into()),
                ..PromptEnded::default()
            };
            telling.push(told(None, Payload::PromptCancelled(cancelled)));
            ended.push((&rescued.prompt_id, PromptStatus::Cancelled));
        } else if given_up {
            let error = format!(
                "the daemons that ran it died {lost_runs} times (their leases expired mid-run): not run again"
            );
            connection.run(
                "UPDATE prompts SET status = 'failed', error = ?2, finished_at = ?3, \
                        claimed_by = NULL, claim_epoch = NULL WHERE id = ?1",
                args![rescued.prompt_id, error, now],
            )?;
            set_session_status(connection, &rescued.session_id, SessionStatus::Failed)?;
            let failed = PromptEnded {
                error: Some(error),
                ..PromptEnded::default()
            };
            telling.push(told(None, Payload::PromptFailed(failed)));
            ended.push((&rescued.prompt_id, PromptStatus::Failed));
        } else {
            connection.run(
                "UPDATE prompts SET status = 'queued', claimed_by = NULL, claim_epoch = NULL \
                 WHERE id = ?1",
                args![rescued.prompt_id],
            )?;
            let requeued = PromptRequeued {
                reason: LEASE_EXPIRED.to_string(),
            };
            telling.push(told(None, Payload::PromptRequeued(requeued)));
        }
    }
    let mut told = super::events::append_events(connection, &telling)?;
    for (prompt_id, status) in ended {
        let released = super::dependencies::release_after(
            connection,
            prompt_id,
            status,
            None,
            super::prompts::Claimer::Nobody,
        )?;
        told.extend(released.told);
    }
    Ok((
        lost.iter().map(|(rescued, _)| rescued.clone()).collect(),
        told,
    ))
}

/// The running prompts claimed by `node_id` whose cancel was asked: (session, prompt). Read
/// when the daemon may have missed a cancel's notice (its listener reconnected).
pub fn cancels_asked(connection: &Conn, node_id: &str) -> sql::Result<Vec<(String, String)>> {
    connection.rows(
        "SELECT session_id, id FROM prompts WHERE status = 'running' AND claimed_by = ?1 \
           AND cancel_asked_at IS NOT NULL",
        args![node_id],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
}
