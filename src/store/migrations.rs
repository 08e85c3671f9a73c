//! Numbered schema migrations.
//!
//! Each step runs in its own transaction together with the `user_version` bump, so a store is
//! always exactly at one version: a crash in the middle of step N leaves it at N-1 with every
//! row intact. Steps only ever add (tables, columns, indexes, triggers); they never drop data.
//! The execs table of step 1 keeps its columns forever, because early commands (`--help`, a
//! usage error) record into a store of any compatible version without migrating it.

use rusqlite::Connection;

use super::APPLICATION_ID;

/// One schema step: its number is its position in [`MIGRATIONS`] plus one.
pub struct Migration {
    /// What the step adds, for logs and for ARCHITECTURE.md readers.
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every schema step, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "exec ledger",
        sql: r#"
CREATE TABLE execs (
    id                TEXT PRIMARY KEY NOT NULL,   -- UUIDv7, time-ordered
    trace_id          TEXT NOT NULL,               -- shared by an exec tree
    parent_exec_id    TEXT,
    caller_session_id TEXT,
    via_agent         INTEGER DEFAULT 0,
    command           TEXT,                        -- argv as a JSON array
    search_text       TEXT,                        -- lower-cased, space-joined argv
    cwd               TEXT,
    repo              TEXT,                        -- canonical git top-level of cwd
    pid               INTEGER,
    pid_start         INTEGER,                     -- process start time, tells a recycled pid
    started_at        INTEGER NOT NULL,            -- ms since the epoch
    completed_at      INTEGER,
    exit_code         INTEGER,
    outcome           TEXT,                        -- succeeded|failed|interrupted|lost, NULL = unknown
    signal            TEXT
);
CREATE INDEX execs_by_start  ON execs(started_at DESC, id DESC);
CREATE INDEX execs_by_repo   ON execs(repo, started_at DESC, id DESC);
CREATE INDEX execs_by_parent ON execs(parent_exec_id);
CREATE INDEX execs_by_caller ON execs(caller_session_id);
CREATE INDEX execs_open      ON execs(started_at) WHERE completed_at IS NULL;
-- Rows written by hand or by an older corral get their search text too.
CREATE TRIGGER execs_search_text AFTER INSERT ON execs WHEN NEW.search_text IS NULL
BEGIN
    UPDATE execs SET search_text = CASE
        WHEN json_valid(NEW.command) AND json_type(NEW.command) = 'array'
        THEN (SELECT lower(group_concat(value, ' ')) FROM json_each(NEW.command))
        ELSE lower(NEW.command) END
    WHERE rowid = NEW.rowid;
END;
"#,
    },
    Migration {
        name: "projects, waves, sessions, settings",
        sql: r#"
CREATE TABLE projects (
    id          TEXT PRIMARY KEY NOT NULL,
    name        TEXT NOT NULL UNIQUE,
    path        TEXT NOT NULL,
    engine      TEXT,
    model       TEXT,
    full_access INTEGER NOT NULL DEFAULT 0,
    kind        TEXT NOT NULL DEFAULT 'local' CHECK (kind IN ('local', 'remote')),
    groups      TEXT NOT NULL DEFAULT '[]',          -- JSON array of execution group names
    instructions TEXT,
    created_at  INTEGER NOT NULL,
    archived_at INTEGER
);
CREATE TABLE waves (
    id         TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL,
    repo       TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX waves_by_name ON waves(name);
CREATE TABLE sessions (
    id               TEXT PRIMARY KEY NOT NULL,
    project_id       TEXT REFERENCES projects(id),
    engine           TEXT NOT NULL,
    model            TEXT,
    reasoning_effort TEXT,
    thread_id        TEXT,
    title            TEXT,
    title_source     TEXT,                           -- human | generated
    status           TEXT NOT NULL DEFAULT 'idle',
    task             TEXT,                           -- external issue key, e.g. PROJ-12
    wave_id          TEXT REFERENCES waves(id),
    created_at       INTEGER NOT NULL,
    archived_at      INTEGER
);
CREATE INDEX sessions_by_task ON sessions(task);
CREATE INDEX sessions_by_wave ON sessions(wave_id);
CREATE TABLE settings (
    name       TEXT PRIMARY KEY NOT NULL,
    value      TEXT NOT NULL,
    updated_at INTEGER NOT NULL
);
"#,
    },
    Migration {
        name: "prompts, runs, events, execution groups",
        sql: r#"
CREATE TABLE execution_groups (
    name       TEXT PRIMARY KEY NOT NULL,
    locking    INTEGER NOT NULL DEFAULT 1,          -- 0: a label only, never serializes
    created_at INTEGER NOT NULL
);
ALTER TABLE sessions ADD COLUMN last_event_seq INTEGER NOT NULL DEFAULT 0;
CREATE TABLE prompts (
    id          TEXT PRIMARY KEY NOT NULL,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    text        TEXT NOT NULL,
    images      TEXT NOT NULL DEFAULT '[]',         -- JSON array of absolute paths
    read_only   INTEGER NOT NULL DEFAULT 0,
    status      TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    error       TEXT,
    answer      TEXT,
    sender_exec_id TEXT,
    created_at  INTEGER NOT NULL,
    started_at  INTEGER,
    finished_at INTEGER
);
CREATE INDEX prompts_by_session ON prompts(session_id, status, created_at);
-- The one-worker rule, kept by the schema itself: a session has at most one running prompt.
CREATE UNIQUE INDEX prompts_one_running ON prompts(session_id) WHERE status = 'running';
CREATE TABLE runs (
    id             TEXT PRIMARY KEY NOT NULL,
    prompt_id      TEXT NOT NULL REFERENCES prompts(id),
    session_id     TEXT NOT NULL REFERENCES sessions(id),
    attempt        INTEGER NOT NULL,
    engine         TEXT NOT NULL,
    argv           TEXT NOT NULL,                   -- JSON array
    thread_id      TEXT,
    exec_id        TEXT,                            -- CORRAL_PARENT_EXEC given to the child
    pid            INTEGER,
    pid_start      INTEGER,
    pgid           INTEGER,
    started_at     INTEGER NOT NULL,
    ended_at       INTEGER,
    exit_code      INTEGER,
    signal         TEXT,
    status         TEXT NOT NULL DEFAULT 'running'
                   CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    failure_class  TEXT,
    retry_decision TEXT,
    error          TEXT
);
CREATE INDEX runs_by_prompt ON runs(prompt_id, attempt);
CREATE INDEX runs_running ON runs(started_at) WHERE status = 'running';
CREATE TABLE events (
    session_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,                    -- per session, from 1, no gaps
    prompt_id  TEXT,
    run_id     TEXT,
    at         INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    payload    TEXT NOT NULL,                       -- JSON
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"#,
    },
    Migration {
        name: "driver claims",
        sql: r#"
CREATE TABLE driver_claims (
    session_id          TEXT PRIMARY KEY NOT NULL REFERENCES sessions(id),
    exec_id             TEXT,                       -- the driver now; NULL: vacant
    last_exec_id        TEXT,                       -- the last driver, kept after a release
    generation          INTEGER NOT NULL DEFAULT 0, -- bumped by every claim
    provider_generation INTEGER NOT NULL DEFAULT 0, -- bumped by every engine child started
    claimed_at          INTEGER,
    released_at         INTEGER
);
"#,
    },
    Migration {
        name: "app-server children",
        sql: r#"
CREATE TABLE app_servers (
    project_id TEXT PRIMARY KEY NOT NULL REFERENCES projects(id),
    state      TEXT NOT NULL,                       -- JSON: pid, generation, status, last exit, recent events
    updated_at INTEGER NOT NULL
);
ALTER TABLE sessions ADD COLUMN compacted_message_count INTEGER;
ALTER TABLE sessions ADD COLUMN compacted_character_count INTEGER;
ALTER TABLE sessions ADD COLUMN compacted_at INTEGER;
"#,
    },
    Migration {
        name: "thread resume points",
        sql: r#"
ALTER TABLE sessions ADD COLUMN resume_point TEXT;  -- the engine's id of the last good message
"#,
    },
    Migration {
        name: "background processes kept",
        sql: r#"
-- 1: what a project's engines leave behind outlives their runs (a person's choice).
ALTER TABLE projects ADD COLUMN keep_background INTEGER NOT NULL DEFAULT 0;
CREATE TABLE kept_processes (
    pid        INTEGER NOT NULL,
    pid_start  INTEGER NOT NULL,                    -- with pid: the process for good
    run_id     TEXT NOT NULL,
    session_id TEXT NOT NULL,
    project_id TEXT,
    command    TEXT NOT NULL,
    kept_at    INTEGER NOT NULL,
    PRIMARY KEY (pid, pid_start)
);
"#,
    },
    Migration {
        name: "the daemon-wide event feed, the overview's reads",
        sql: r#"
-- One number across sessions, strictly increasing, for a stream of every session that a client
-- can resume. Existing rows are numbered in a stable order: by time, each session's events
-- kept in their own order (a clock set back inside a session does not reorder it), then by
-- session and seq. Written by the ledger with each event (`work::append_events`).
ALTER TABLE events ADD COLUMN feed_seq INTEGER;
UPDATE events SET feed_seq = numbered.feed_seq
FROM (
    SELECT session_id, seq,
           row_number() OVER (ORDER BY session_at, session_id, seq) AS feed_seq
    FROM (
        SELECT session_id, seq,
               max(at) OVER (PARTITION BY session_id ORDER BY seq
                             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session_at
        FROM events
    )
) AS numbered
WHERE events.session_id = numbered.session_id AND events.seq = numbered.seq;
CREATE UNIQUE INDEX events_by_feed ON events(feed_seq);
-- Rows written by hand or by another program get the next number too.
CREATE TRIGGER events_feed_seq AFTER INSERT ON events WHEN NEW.feed_seq IS NULL
BEGIN
    UPDATE events SET feed_seq = (SELECT coalesce(max(feed_seq), 0) + 1 FROM events)
    WHERE session_id = NEW.session_id AND seq = NEW.seq;
END;
-- What the overview reads of every session, in small rows (a prompt's text and answer, an
-- event's payload may be long, and reading near them walks their overflow pages).
-- A session's last event's time, written by the ledger with each event.
ALTER TABLE sessions ADD COLUMN last_event_at INTEGER;
UPDATE sessions SET last_event_at =
    (SELECT at FROM events WHERE session_id = sessions.id AND seq = sessions.last_event_seq);
-- Each ended prompt, written by triggers in the write that ends it, backfilled here. `head`:
-- the start (256 characters, blanks before it dropped) of the answer (done), the error
-- (failed) or the prompt's text (cancelled): the reason a session's state shows.
CREATE TABLE prompt_ends (
    prompt_id   TEXT PRIMARY KEY NOT NULL,
    session_id  TEXT NOT NULL,
    status      TEXT NOT NULL,                      -- done | failed | cancelled
    finished_at INTEGER,
    created_at  INTEGER NOT NULL,
    head        TEXT
);
CREATE INDEX prompt_ends_by_session ON prompt_ends(session_id, finished_at, created_at, prompt_id);
INSERT INTO prompt_ends (prompt_id, session_id, status, finished_at, created_at, head)
    SELECT id, session_id, status, finished_at, created_at,
           substr(ltrim(CASE status WHEN 'done' THEN answer WHEN 'failed' THEN error ELSE text END,
                        ' ' || char(9, 10, 13)), 1, 256)
    FROM prompts WHERE status IN ('done', 'failed', 'cancelled');
CREATE TRIGGER prompts_ended AFTER UPDATE OF status ON prompts
    WHEN NEW.status IN ('done', 'failed', 'cancelled')
BEGIN
    INSERT OR REPLACE INTO prompt_ends (prompt_id, session_id, status, finished_at, created_at, head)
    VALUES (NEW.id, NEW.session_id, NEW.status, NEW.finished_at, NEW.created_at,
            substr(ltrim(CASE NEW.status WHEN 'done' THEN NEW.answer WHEN 'failed' THEN NEW.error
                         ELSE NEW.text END, ' ' || char(9, 10, 13)), 1, 256));
END;
CREATE TRIGGER prompts_ended_inserted AFTER INSERT ON prompts
    WHEN NEW.status IN ('done', 'failed', 'cancelled')
BEGIN
    INSERT OR REPLACE INTO prompt_ends (prompt_id, session_id, status, finished_at, created_at, head)
    VALUES (NEW.id, NEW.session_id, NEW.status, NEW.finished_at, NEW.created_at,
            substr(ltrim(CASE NEW.status WHEN 'done' THEN NEW.answer WHEN 'failed' THEN NEW.error
                         ELSE NEW.text END, ' ' || char(9, 10, 13)), 1, 256));
END;
"#,
    },
    Migration {
        name: "worktrees",
        sql: r#"
-- Isolation (#13): a worktree project gives each session its own git worktree and branch.
ALTER TABLE projects ADD COLUMN isolation TEXT NOT NULL DEFAULT 'shared'; -- shared | worktree
ALTER TABLE projects ADD COLUMN worktrees_dir TEXT;  -- overrides the worktrees.dir setting
ALTER TABLE projects ADD COLUMN setup TEXT;          -- run in a new worktree before its first prompt
ALTER TABLE projects ADD COLUMN repo_root TEXT;      -- the repository's top level, read at add
ALTER TABLE sessions ADD COLUMN worktree TEXT;       -- the worktree's root (absolute)
ALTER TABLE sessions ADD COLUMN branch TEXT;
ALTER TABLE sessions ADD COLUMN base TEXT;           -- the ref as given (HEAD by default)
ALTER TABLE sessions ADD COLUMN base_commit TEXT;    -- what that ref was then
ALTER TABLE sessions ADD COLUMN worktree_state TEXT; -- creating | setup | ready | removed | kept
-- Two sessions never share a worktree.
CREATE UNIQUE INDEX sessions_by_worktree ON sessions(worktree) WHERE worktree IS NOT NULL;
"#,
    },
    Migration {
        name: "several daemons",
        sql: r#"
-- Several daemons on one shared (PostgreSQL) store (#14). On SQLite the columns stay empty
-- and the table holds no row: one daemon, which needs no lease.
-- Each daemon that ever served the store: its node (HOME/node.id), its incarnation (`epoch`,
-- bumped at each registration: the fencing token of every prompt it claims) and its lease.
CREATE TABLE daemons (
    node_id     TEXT PRIMARY KEY NOT NULL,
    epoch       INTEGER NOT NULL,
    host        TEXT NOT NULL,
    home        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    started_at  INTEGER NOT NULL,
    lease_until INTEGER,                     -- the database's clock (ms); NULL: stopped cleanly
    renewed_at  INTEGER,
    serves      TEXT NOT NULL DEFAULT '[]',  -- JSON: the ids of the projects it serves
    status      TEXT NOT NULL DEFAULT '{}'   -- JSON: what it says of itself (running, fenced writes)
);
-- Who runs a running prompt: the daemon's node and its epoch when it claimed it.
ALTER TABLE prompts ADD COLUMN claimed_by TEXT;
ALTER TABLE prompts ADD COLUMN claim_epoch INTEGER;
CREATE INDEX prompts_claimed ON prompts(claimed_by) WHERE status = 'running';
-- The queue's heads in order, for the daemons' claims.
CREATE INDEX prompts_queued ON prompts(created_at, id) WHERE status = 'queued';
-- Where a run's pid means something, an exec's host, a kept process's node.
ALTER TABLE runs ADD COLUMN node_id TEXT;
ALTER TABLE execs ADD COLUMN host TEXT;
ALTER TABLE kept_processes ADD COLUMN node_id TEXT;
-- The node whose disk holds a session's worktree: only it runs the session's prompts.
ALTER TABLE sessions ADD COLUMN worktree_node TEXT;
"#,
    },
    Migration {
        name: "cancels kept",
        sql: r#"
-- A cancel asked of a running prompt, kept until the prompt ends (#14): the daemon that runs
-- it may not hear the notice (its listener reconnecting, the daemon dying), and a prompt
-- taken back from a dead daemon is cancelled, not run again.
ALTER TABLE prompts ADD COLUMN cancel_asked_at INTEGER;
-- A project's sessions (the claims and the overview look them up by project).
CREATE INDEX sessions_by_project ON sessions(project_id);
"#,
    },
    Migration {
        name: "asks across daemons",
        sql: r#"
-- A steer or compact asked of the daemon whose engine holds the session's thread (#14):
-- the asking daemon writes the request, the asked one its answer (JSON both), then the
-- asker takes the row away.
CREATE TABLE asks (
    id          TEXT PRIMARY KEY NOT NULL,
    to_node     TEXT NOT NULL,
    from_node   TEXT NOT NULL,
    request     TEXT NOT NULL,
    asked_at    INTEGER NOT NULL,
    answer      TEXT,
    answered_at INTEGER
);
CREATE INDEX asks_unanswered ON asks(to_node) WHERE answered_at IS NULL;
"#,
    },
    Migration {
        name: "queue heads",
        sql: r#"
-- The oldest queued prompt of each session that has one, kept by the triggers below at every
-- change of a prompt's status (#14): the daemons' claims walk it in queue order instead of
-- sorting every queued prompt under the write lock (13 ms a claim at 10,000 queued).
CREATE TABLE queue_heads (
    session_id TEXT PRIMARY KEY NOT NULL,
    prompt_id  TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX queue_heads_in_order ON queue_heads(created_at, prompt_id);
INSERT INTO queue_heads (session_id, prompt_id, created_at)
SELECT p.session_id, p.id, p.created_at FROM prompts p
 WHERE p.status = 'queued'
   AND NOT EXISTS (SELECT 1 FROM prompts o
                    WHERE o.session_id = p.session_id AND o.status = 'queued'
                      AND (o.created_at, o.id) < (p.created_at, p.id));
-- Queued, or queued again (a run taken back from a dead daemon): its session's head if it is
-- older than the one there.
CREATE TRIGGER queue_head_on_insert AFTER INSERT ON prompts WHEN NEW.status = 'queued'
BEGIN
    INSERT INTO queue_heads (session_id, prompt_id, created_at)
    VALUES (NEW.session_id, NEW.id, NEW.created_at)
    ON CONFLICT (session_id) DO UPDATE SET prompt_id = excluded.prompt_id,
                                           created_at = excluded.created_at
     WHERE (excluded.created_at, excluded.prompt_id)
         < (queue_heads.created_at, queue_heads.prompt_id);
END;
CREATE TRIGGER queue_head_on_requeue AFTER UPDATE OF status ON prompts
    WHEN NEW.status = 'queued' AND OLD.status <> 'queued'
BEGIN
    INSERT INTO queue_heads (session_id, prompt_id, created_at)
    VALUES (NEW.session_id, NEW.id, NEW.created_at)
    ON CONFLICT (session_id) DO UPDATE SET prompt_id = excluded.prompt_id,
                                           created_at = excluded.created_at
     WHERE (excluded.created_at, excluded.prompt_id)
         < (queue_heads.created_at, queue_heads.prompt_id);
END;
-- Out of the queue (claimed, cancelled, failed): if it was the head, the session's next
-- queued prompt is.
CREATE TRIGGER queue_head_on_dequeue AFTER UPDATE OF status ON prompts
    WHEN OLD.status = 'queued' AND NEW.status <> 'queued'
BEGIN
    DELETE FROM queue_heads WHERE session_id = OLD.session_id AND prompt_id = OLD.id;
    INSERT INTO queue_heads (session_id, prompt_id, created_at)
    SELECT session_id, id, created_at FROM prompts
     WHERE session_id = OLD.session_id AND status = 'queued'
     ORDER BY created_at, id LIMIT 1
    ON CONFLICT (session_id) DO NOTHING;
END;
"#,
    },
    Migration {
        name: "denials",
        sql: r#"
-- How many tool uses the engine refused in the prompt's runs (`tool.denied` events): a
-- prompt done with refusals says so wherever it is shown.
ALTER TABLE prompts ADD COLUMN denied INTEGER NOT NULL DEFAULT 0;
"#,
    },
    Migration {
        name: "approvals",
        sql: r#"
-- The person in the loop (#32). A policy per project (`full` goes with the `full_access` grant),
-- per session and per prompt (NULL: the wider one's).
ALTER TABLE projects ADD COLUMN policy TEXT NOT NULL DEFAULT 'workspace-write';
ALTER TABLE sessions ADD COLUMN policy TEXT;
ALTER TABLE prompts ADD COLUMN policy TEXT;
UPDATE projects SET policy = 'full' WHERE full_access = 1;
-- What an engine asked a person under `ask`, and how it was answered (once). A decision
-- given `--for-session` keeps its `pattern`: the session's later requests for that tool
-- whose target it matches are answered the same way without asking.
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    prompt_id TEXT,
    run_id TEXT,
    engine TEXT NOT NULL,
    tool TEXT NOT NULL,
    target TEXT,
    reason TEXT,
    input TEXT NOT NULL,
    asked_at INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    answered_at INTEGER,
    answered_by TEXT,
    answer_reason TEXT,
    pattern TEXT,
    node_id TEXT
);
CREATE INDEX approvals_pending ON approvals (asked_at) WHERE status = 'pending';
CREATE INDEX approvals_by_session ON approvals (session_id, asked_at);
"#,
    },
    Migration {
        name: "phases",
        sql: r#"
-- Where a running prompt stands (#32, honest states): working, waiting for a slot (and what
-- holds it), backing off (until when). Kept by the events that say it (`store::phases`), so
-- the overview reads one row per session, not the events.
ALTER TABLE prompts ADD COLUMN phase TEXT;
ALTER TABLE prompts ADD COLUMN phase_reason TEXT;
ALTER TABLE prompts ADD COLUMN phase_until INTEGER;
"#,
    },
    Migration {
        name: "agents_scope",
        sql: r#"
-- Which sessions a project's agents may reach through the daemon (#32): their own, or
-- every session of the project (`project set --agents-scope project`, a person's widening).
ALTER TABLE projects ADD COLUMN agents_scope TEXT NOT NULL DEFAULT 'session';
"#,
    },
    Migration {
        name: "runs_stored_through",
        sql: r#"
-- How many bytes of a run's stdout and stderr its stored events cover, written with them
-- (live restore): a daemon that takes the run over reads its spool from there, so no line
-- is lost or stored twice, even after a kill -9.
ALTER TABLE runs ADD COLUMN stdout_stored INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN stderr_stored INTEGER NOT NULL DEFAULT 0;
"#,
    },
    Migration {
        name: "pauses",
        sql: r#"
-- Paused scopes (#35): everything (`all`), a project, an execution group or a session. A
-- prompt of a session any pause covers is not claimed (`store::pauses`), so it waits queued;
-- `needle` is a group's name as it appears in `projects.groups` (JSON-quoted). A project may
-- pause itself when one of its prompts fails (`pause_on_failure`).
CREATE TABLE pauses (
    scope     TEXT NOT NULL,
    target    TEXT NOT NULL,
    needle    TEXT,
    paused_at INTEGER NOT NULL,
    reason    TEXT NOT NULL,
    hard      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, target)
);
ALTER TABLE projects ADD COLUMN pause_on_failure INTEGER NOT NULL DEFAULT 0;
-- Which notifications a project's sessions send (#35): a comma list of kinds, `none`, or
-- NULL for the `notify.events` setting.
ALTER TABLE projects ADD COLUMN notify TEXT;
-- A project's and a session's own environment variables for their engines (#35), a JSON
-- object (`store::environment`).
ALTER TABLE projects ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sessions ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
"#,
    },
    Migration {
        name: "dependencies",
        sql: r#"
-- `send --after` (#35): a prompt waits queued until the prompts it runs after have ended
-- (`store::dependencies`). `runs_after` is the list as it was sent (JSON, NULL: none), shown with
-- the prompt; `prompt_after` holds the same edges, looked up both ways: from a queued head
-- (does it still wait?) and from a prompt that ends (whom does it release?).
ALTER TABLE prompts ADD COLUMN runs_after TEXT;
ALTER TABLE prompts ADD COLUMN runs_after_any INTEGER NOT NULL DEFAULT 0;
CREATE TABLE prompt_after (
    prompt_id TEXT NOT NULL REFERENCES prompts(id),
    after_id  TEXT NOT NULL REFERENCES prompts(id),
    any_end   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (prompt_id, after_id)
);
CREATE INDEX prompt_after_by_after ON prompt_after(after_id);
"#,
    },
    Migration {
        name: "due times",
        sql: r#"
-- `send --at/--in` (#35): a prompt not to start before `due_at` (ms; NULL: as soon as it may).
-- The daemon's timer asks for the earliest one still queued (`prompts::next_due`).
ALTER TABLE prompts ADD COLUMN due_at INTEGER;
CREATE INDEX prompts_due ON prompts(due_at) WHERE status = 'queued' AND due_at IS NOT NULL;
"#,
    },
    Migration {
        name: "schedules",
        sql: r#"
-- `schedule add` (#35): a prompt sent on a cron schedule, to a session (`session_id`) or to a
-- new session of a project per firing (`session_id` NULL). `next_at` (ms; NULL: never again)
-- is the next firing's time; the daemon's timer asks for the earliest one not paused.
CREATE TABLE schedules (
    id         TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects(id),
    session_id TEXT REFERENCES sessions(id),
    cron       TEXT NOT NULL,
    text       TEXT NOT NULL,
    catch_up   INTEGER NOT NULL DEFAULT 0,
    paused     INTEGER NOT NULL DEFAULT 0,
    next_at    INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX schedules_next ON schedules(next_at) WHERE paused = 0 AND next_at IS NOT NULL;
-- Each firing: what it sent (`prompt_id`, in `session_id`), or why it skipped.
CREATE TABLE schedule_firings (
    schedule_id TEXT NOT NULL REFERENCES schedules(id),
    due_at      INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    outcome     TEXT NOT NULL,
    reason      TEXT,
    session_id  TEXT,
    prompt_id   TEXT,
    PRIMARY KEY (schedule_id, due_at)
);
"#,
    },
];

/// The schema version this binary writes: the number of the last step.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Brings the store to [`SCHEMA_VERSION`].
pub fn migrate(connection: &mut Connection) -> rusqlite::Result<u32> {
    migrate_to(connection, SCHEMA_VERSION)
}

/// Applies the steps after the store's current version up to `target`, each in one
/// transaction. Public so tests can build a store as an older corral left it.
pub fn migrate_to(connection: &mut Connection, target: u32) -> rusqlite::Result<u32> {
    let mut version: u32 = connection.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    while version < target.min(SCHEMA_VERSION) {
        let step = &MIGRATIONS[version as usize];
        // IMMEDIATE: take the write lock first (waiting out busy_timeout); a deferred
        // transaction that reads and then writes fails at once when another writer is in.
        let transaction =
            connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Another process may have migrated while we waited for the lock.
        let current: u32 = transaction.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if current > version {
            version = current;
            continue;
        }
        transaction.execute_batch(step.sql)?;
        transaction.pragma_update(None, "application_id", APPLICATION_ID)?;
        transaction.pragma_update(None, "user_version", version + 1)?;
        // A test's kill -9 in the middle of a step (nothing of it committed).
        crate::process::kill_point("migration");
        transaction.commit()?;
        version += 1;
        tracing::debug!(version, name = step.name, "store migrated");
    }
    Ok(version)
}
