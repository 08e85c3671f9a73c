//! The schema steps in PostgreSQL's text: step N here is the twin of step N of
//! [`super::migrations::MIGRATIONS`], the same tables, columns, indexes (their names
//! included), constraints and triggers, so one statement text reads and writes both stores.
//!
//! How the SQLite text was translated, and why:
//!
//! - **Every `INTEGER` is `BIGINT`**, booleans too (`0`/`1`, the SQLite text's `CHECK`s kept).
//!   SQLite's integers are 64-bit whatever the declaration says; PostgreSQL's `INTEGER` is 32-bit
//!   and would overflow at the first millisecond timestamp. Keeping booleans as numbers keeps
//!   `WHERE full_access = 1`, the `0`/`1` binds and the reads of those columns the same text
//!   on both stores (a PostgreSQL `boolean` column would take neither `= 1` nor an `i64`).
//! - **Every `TEXT` column is `TEXT COLLATE "C"`.** SQLite compares text by its bytes
//!   (`BINARY`); a PostgreSQL database made in a linguistic locale (`en_US.UTF-8`) orders `-`,
//!   `_` and case differently. Ids are resolved by their prefixes and pages are cut by
//!   cursors (`started_at.id`, `id < ?1 ORDER BY id DESC`), and both must compare bytes, so the
//!   collation is written column by column and holds whatever locale the database was made
//!   with. It also makes `lower()` of a column fold ASCII letters only, as SQLite's built-in
//!   `lower()` does (`exec::search_text` relies on that); a parameter has the database's
//!   collation, so shared SQL lowers search terms in Rust, not with `lower(?)`.
//! - **JSON stays `TEXT`**: the store writes and reads it as text; nothing here indexes into it.
//! - **No rowid tables.** Every table has a declared key and no `INTEGER PRIMARY KEY` alias,
//!   so there is no identity column; `WITHOUT ROWID` (events) has no meaning here and is
//!   dropped.
//! - **Triggers are PL/pgSQL trigger functions** of the same names, with the same effect:
//!   SQLite's `AFTER INSERT … UPDATE … WHERE rowid = NEW.rowid` (filling a column the insert
//!   left NULL) becomes a `BEFORE INSERT` trigger that sets `NEW.column`; SQLite's
//!   `INSERT OR REPLACE` inside a trigger becomes `INSERT … ON CONFLICT (key) DO UPDATE`.
//! - **Helpers for the shared SQL**, made by step 1: `instr(text, text)` (SQLite's built-in,
//!   `strpos` here; the exec search uses it) and `corral_try_json(text)` (the text as `json`,
//!   NULL when it is not JSON: PostgreSQL 15 has no `json_valid`, and a cast of bad text
//!   raises). SQLite's `char(9, 10, 13)` has no twin: `CHAR` is a keyword in PostgreSQL and no
//!   function of that name can be called unquoted, so this text writes `E' \t\n\r'`, and
//!   shared statements write the blanks as literal characters (`' \t\n\r'` in a Rust string),
//!   which both parsers take.
//! - **`corral_meta`** (step 1) is what SQLite keeps in its header: `application = 'corral'`
//!   (tells a corral store from another program's database), `store_id` (a UUID made here,
//!   the store's identity for `HOME/store.id`) and `schema_version` ('0' here; the migration
//!   runner sets it to N in step N's transaction, as SQLite's `user_version`). `gen_random_uuid()`
//!   is built in from PostgreSQL 13 on: the oldest server these steps take.
//! - **NULLs sort as in SQLite where an index serves an order.** SQLite puts NULL below every
//!   value, PostgreSQL above; an `ORDER BY` of a nullable column says `NULLS LAST`/`FIRST`
//!   in the shared text (SQLite ≥ 3.30 takes it), and the one index that serves such an order
//!   (`prompt_ends_by_session`, on `finished_at`) is declared `NULLS FIRST` to match.
//!
//! Subqueries in `FROM` carry aliases (PostgreSQL 15 requires one); everything else in the
//! steps — partial indexes, window functions, `UPDATE … FROM` — reads as in SQLite.

/// Every schema step in PostgreSQL's text, in [`super::migrations::MIGRATIONS`]' order; each
/// runs in one transaction.
pub const STEPS: &[&str] = &[
    // 1: exec ledger (and what a PostgreSQL store needs before anything: its identity, helpers)
    r#"
CREATE TABLE corral_meta (
    key   TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    value TEXT COLLATE "C" NOT NULL
);
INSERT INTO corral_meta (key, value) VALUES
    ('application', 'corral'),
    ('store_id', gen_random_uuid()::text),
    ('schema_version', '0');
-- SQLite's instr(): the 1-based position of the needle, 0 when absent, NULL with a NULL.
CREATE FUNCTION instr(haystack text, needle text) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT strpos(haystack, needle)::bigint $$;
-- The text as json, NULL when it is not JSON (a cast of bad text raises).
CREATE FUNCTION corral_try_json(doc text) RETURNS json
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
BEGIN
    RETURN doc::json;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;
CREATE TABLE execs (
    id                TEXT COLLATE "C" PRIMARY KEY NOT NULL,   -- UUIDv7, time-ordered
    trace_id          TEXT COLLATE "C" NOT NULL,               -- shared by an exec tree
    parent_exec_id    TEXT COLLATE "C",
    caller_session_id TEXT COLLATE "C",
    via_agent         BIGINT DEFAULT 0,
    command           TEXT COLLATE "C",                        -- argv as a JSON array
    search_text       TEXT COLLATE "C",                        -- lower-cased, space-joined argv
    cwd               TEXT COLLATE "C",
    repo              TEXT COLLATE "C",                        -- canonical git top-level of cwd
    pid               BIGINT,
    pid_start         BIGINT,                                  -- process start time, tells a recycled pid
    started_at        BIGINT NOT NULL,                         -- ms since the epoch
    completed_at      BIGINT,
    exit_code         BIGINT,
    outcome           TEXT COLLATE "C",                        -- succeeded|failed|interrupted|lost, NULL = unknown
    signal            TEXT COLLATE "C"
);
CREATE INDEX execs_by_start  ON execs(started_at DESC, id DESC);
CREATE INDEX execs_by_repo   ON execs(repo, started_at DESC, id DESC);
CREATE INDEX execs_by_parent ON execs(parent_exec_id);
CREATE INDEX execs_by_caller ON execs(caller_session_id);
CREATE INDEX execs_open      ON execs(started_at) WHERE completed_at IS NULL;
-- Rows written by hand or by an older corral get their search text too: the argv's words
-- joined by spaces when the command is a JSON array (NULL for an empty one, JSON nulls
-- skipped, as SQLite's group_concat does), else the command itself; lower-cased in ASCII
-- only, as SQLite's lower() and `exec::search_text` do (hence COLLATE "C" on the argument).
CREATE FUNCTION execs_search_text() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    doc json := corral_try_json(NEW.command);
BEGIN
    IF doc IS NOT NULL AND json_typeof(doc) = 'array' THEN
        NEW.search_text := lower((SELECT string_agg(word, ' ' ORDER BY n)
                                  FROM json_array_elements_text(doc) WITH ORDINALITY AS w(word, n))
                                 COLLATE "C");
    ELSE
        NEW.search_text := lower(NEW.command COLLATE "C");
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER execs_search_text BEFORE INSERT ON execs
    FOR EACH ROW WHEN (NEW.search_text IS NULL) EXECUTE FUNCTION execs_search_text();
"#,
    // 2: projects, waves, sessions, settings
    r#"
CREATE TABLE projects (
    id          TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    name        TEXT COLLATE "C" NOT NULL UNIQUE,
    path        TEXT COLLATE "C" NOT NULL,
    engine      TEXT COLLATE "C",
    model       TEXT COLLATE "C",
    full_access BIGINT NOT NULL DEFAULT 0,
    kind        TEXT COLLATE "C" NOT NULL DEFAULT 'local' CHECK (kind IN ('local', 'remote')),
    groups      TEXT COLLATE "C" NOT NULL DEFAULT '[]',          -- JSON array of execution group names
    instructions TEXT COLLATE "C",
    created_at  BIGINT NOT NULL,
    archived_at BIGINT
);
CREATE TABLE waves (
    id         TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    name       TEXT COLLATE "C" NOT NULL,
    repo       TEXT COLLATE "C",
    created_at BIGINT NOT NULL
);
CREATE INDEX waves_by_name ON waves(name);
CREATE TABLE sessions (
    id               TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    project_id       TEXT COLLATE "C" REFERENCES projects(id),
    engine           TEXT COLLATE "C" NOT NULL,
    model            TEXT COLLATE "C",
    reasoning_effort TEXT COLLATE "C",
    thread_id        TEXT COLLATE "C",
    title            TEXT COLLATE "C",
    title_source     TEXT COLLATE "C",                           -- human | generated
    status           TEXT COLLATE "C" NOT NULL DEFAULT 'idle',
    task             TEXT COLLATE "C",                           -- external issue key, e.g. PROJ-12
    wave_id          TEXT COLLATE "C" REFERENCES waves(id),
    created_at       BIGINT NOT NULL,
    archived_at      BIGINT
);
CREATE INDEX sessions_by_task ON sessions(task);
CREATE INDEX sessions_by_wave ON sessions(wave_id);
CREATE TABLE settings (
    name       TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    value      TEXT COLLATE "C" NOT NULL,
    updated_at BIGINT NOT NULL
);
"#,
    // 3: prompts, runs, events, execution groups
    r#"
CREATE TABLE execution_groups (
    name       TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    locking    BIGINT NOT NULL DEFAULT 1,          -- 0: a label only, never serializes
    created_at BIGINT NOT NULL
);
ALTER TABLE sessions ADD COLUMN last_event_seq BIGINT NOT NULL DEFAULT 0;
CREATE TABLE prompts (
    id          TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions(id),
    text        TEXT COLLATE "C" NOT NULL,
    images      TEXT COLLATE "C" NOT NULL DEFAULT '[]',         -- JSON array of absolute paths
    read_only   BIGINT NOT NULL DEFAULT 0,
    status      TEXT COLLATE "C" NOT NULL CHECK (status IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    attempts    BIGINT NOT NULL DEFAULT 0,
    error       TEXT COLLATE "C",
    answer      TEXT COLLATE "C",
    sender_exec_id TEXT COLLATE "C",
    created_at  BIGINT NOT NULL,
    started_at  BIGINT,
    finished_at BIGINT
);
CREATE INDEX prompts_by_session ON prompts(session_id, status, created_at);
-- The one-worker rule, kept by the schema itself: a session has at most one running prompt.
CREATE UNIQUE INDEX prompts_one_running ON prompts(session_id) WHERE status = 'running';
CREATE TABLE runs (
    id             TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    prompt_id      TEXT COLLATE "C" NOT NULL REFERENCES prompts(id),
    session_id     TEXT COLLATE "C" NOT NULL REFERENCES sessions(id),
    attempt        BIGINT NOT NULL,
    engine         TEXT COLLATE "C" NOT NULL,
    argv           TEXT COLLATE "C" NOT NULL,                   -- JSON array
    thread_id      TEXT COLLATE "C",
    exec_id        TEXT COLLATE "C",                            -- CORRAL_PARENT_EXEC given to the child
    pid            BIGINT,
    pid_start      BIGINT,
    pgid           BIGINT,
    started_at     BIGINT NOT NULL,
    ended_at       BIGINT,
    exit_code      BIGINT,
    signal         TEXT COLLATE "C",
    status         TEXT COLLATE "C" NOT NULL DEFAULT 'running'
                   CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    failure_class  TEXT COLLATE "C",
    retry_decision TEXT COLLATE "C",
    error          TEXT COLLATE "C"
);
CREATE INDEX runs_by_prompt ON runs(prompt_id, attempt);
CREATE INDEX runs_running ON runs(started_at) WHERE status = 'running';
CREATE TABLE events (
    session_id TEXT COLLATE "C" NOT NULL,
    seq        BIGINT NOT NULL,                    -- per session, from 1, no gaps
    prompt_id  TEXT COLLATE "C",
    run_id     TEXT COLLATE "C",
    at         BIGINT NOT NULL,
    kind       TEXT COLLATE "C" NOT NULL,
    payload    TEXT COLLATE "C" NOT NULL,          -- JSON
    PRIMARY KEY (session_id, seq)
);
"#,
    // 4: driver claims
    r#"
CREATE TABLE driver_claims (
    session_id          TEXT COLLATE "C" PRIMARY KEY NOT NULL REFERENCES sessions(id),
    exec_id             TEXT COLLATE "C",          -- the driver now; NULL: vacant
    last_exec_id        TEXT COLLATE "C",          -- the last driver, kept after a release
    generation          BIGINT NOT NULL DEFAULT 0, -- bumped by every claim
    provider_generation BIGINT NOT NULL DEFAULT 0, -- bumped by every engine child started
    claimed_at          BIGINT,
    released_at         BIGINT
);
"#,
    // 5: app-server children
    r#"
CREATE TABLE app_servers (
    project_id TEXT COLLATE "C" PRIMARY KEY NOT NULL REFERENCES projects(id),
    state      TEXT COLLATE "C" NOT NULL,          -- JSON: pid, generation, status, last exit, recent events
    updated_at BIGINT NOT NULL
);
ALTER TABLE sessions ADD COLUMN compacted_message_count BIGINT;
ALTER TABLE sessions ADD COLUMN compacted_character_count BIGINT;
ALTER TABLE sessions ADD COLUMN compacted_at BIGINT;
"#,
    // 6: thread resume points
    r#"
ALTER TABLE sessions ADD COLUMN resume_point TEXT COLLATE "C";  -- the engine's id of the last good message
"#,
    // 7: background processes kept
    r#"
-- 1: what a project's engines leave behind outlives their runs (a person's choice).
ALTER TABLE projects ADD COLUMN keep_background BIGINT NOT NULL DEFAULT 0;
CREATE TABLE kept_processes (
    pid        BIGINT NOT NULL,
    pid_start  BIGINT NOT NULL,                    -- with pid: the process for good
    run_id     TEXT COLLATE "C" NOT NULL,
    session_id TEXT COLLATE "C" NOT NULL,
    project_id TEXT COLLATE "C",
    command    TEXT COLLATE "C" NOT NULL,
    kept_at    BIGINT NOT NULL,
    PRIMARY KEY (pid, pid_start)
);
"#,
    // 8: the daemon-wide event feed, the overview's reads
    r#"
-- One number across sessions, strictly increasing (see the SQLite step for the order existing
-- rows are numbered in). Written by the ledger with each event (`work::append_events`).
ALTER TABLE events ADD COLUMN feed_seq BIGINT;
UPDATE events SET feed_seq = numbered.feed_seq
FROM (
    SELECT session_id, seq,
           row_number() OVER (ORDER BY session_at, session_id, seq) AS feed_seq
    FROM (
        SELECT session_id, seq,
               max(at) OVER (PARTITION BY session_id ORDER BY seq
                             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS session_at
        FROM events
    ) AS timed
) AS numbered
WHERE events.session_id = numbered.session_id AND events.seq = numbered.seq;
CREATE UNIQUE INDEX events_by_feed ON events(feed_seq);
-- Rows written by hand or by another program get the next number too (a row-level BEFORE
-- trigger sees the rows its statement inserted before this one, so a multi-row insert
-- numbers them in turn, as SQLite's AFTER INSERT trigger does).
CREATE FUNCTION events_feed_seq() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.feed_seq := (SELECT coalesce(max(feed_seq), 0) + 1 FROM events);
    RETURN NEW;
END
$$;
CREATE TRIGGER events_feed_seq BEFORE INSERT ON events
    FOR EACH ROW WHEN (NEW.feed_seq IS NULL) EXECUTE FUNCTION events_feed_seq();
-- A session's last event's time, written by the ledger with each event.
ALTER TABLE sessions ADD COLUMN last_event_at BIGINT;
UPDATE sessions SET last_event_at =
    (SELECT at FROM events WHERE session_id = sessions.id AND seq = sessions.last_event_seq);
-- Each ended prompt, written by triggers in the write that ends it, backfilled here. `head`:
-- the start (256 characters, blanks before it dropped) of the answer (done), the error
-- (failed) or the prompt's text (cancelled): the reason a session's state shows.
CREATE TABLE prompt_ends (
    prompt_id   TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL,
    status      TEXT COLLATE "C" NOT NULL,         -- done | failed | cancelled
    finished_at BIGINT,
    created_at  BIGINT NOT NULL,
    head        TEXT COLLATE "C"
);
-- NULLS FIRST: SQLite's order (NULL below every number), so the overview's
-- `finished_at DESC NULLS LAST` walks this index backward as SQLite walks its own.
CREATE INDEX prompt_ends_by_session ON prompt_ends(session_id, finished_at NULLS FIRST, created_at, prompt_id);
INSERT INTO prompt_ends (prompt_id, session_id, status, finished_at, created_at, head)
    SELECT id, session_id, status, finished_at, created_at,
           substr(ltrim(CASE status WHEN 'done' THEN answer WHEN 'failed' THEN error ELSE text END,
                        E' \t\n\r'), 1, 256)
    FROM prompts WHERE status IN ('done', 'failed', 'cancelled');
-- One function for both triggers (an ended prompt's status set, or a prompt inserted ended).
CREATE FUNCTION prompts_ended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO prompt_ends (prompt_id, session_id, status, finished_at, created_at, head)
    VALUES (NEW.id, NEW.session_id, NEW.status, NEW.finished_at, NEW.created_at,
            substr(ltrim(CASE NEW.status WHEN 'done' THEN NEW.answer WHEN 'failed' THEN NEW.error
                         ELSE NEW.text END, E' \t\n\r'), 1, 256))
    ON CONFLICT (prompt_id) DO UPDATE SET
        session_id = excluded.session_id, status = excluded.status,
        finished_at = excluded.finished_at, created_at = excluded.created_at,
        head = excluded.head;
    RETURN NULL;
END
$$;
CREATE TRIGGER prompts_ended AFTER UPDATE OF status ON prompts
    FOR EACH ROW WHEN (NEW.status IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION prompts_ended();
CREATE TRIGGER prompts_ended_inserted AFTER INSERT ON prompts
    FOR EACH ROW WHEN (NEW.status IN ('done', 'failed', 'cancelled'))
    EXECUTE FUNCTION prompts_ended();
"#,
    // 9: worktrees
    r#"
-- Isolation (#13): a worktree project gives each session its own git worktree and branch.
ALTER TABLE projects ADD COLUMN isolation TEXT COLLATE "C" NOT NULL DEFAULT 'shared'; -- shared | worktree
ALTER TABLE projects ADD COLUMN worktrees_dir TEXT COLLATE "C";  -- overrides the worktrees.dir setting
ALTER TABLE projects ADD COLUMN setup TEXT COLLATE "C";          -- run in a new worktree before its first prompt
ALTER TABLE projects ADD COLUMN repo_root TEXT COLLATE "C";      -- the repository's top level, read at add
ALTER TABLE sessions ADD COLUMN worktree TEXT COLLATE "C";       -- the worktree's root (absolute)
ALTER TABLE sessions ADD COLUMN branch TEXT COLLATE "C";
ALTER TABLE sessions ADD COLUMN base TEXT COLLATE "C";           -- the ref as given (HEAD by default)
ALTER TABLE sessions ADD COLUMN base_commit TEXT COLLATE "C";    -- what that ref was then
ALTER TABLE sessions ADD COLUMN worktree_state TEXT COLLATE "C"; -- creating | setup | ready | removed | kept
-- Two sessions never share a worktree.
CREATE UNIQUE INDEX sessions_by_worktree ON sessions(worktree) WHERE worktree IS NOT NULL;
"#,
    // 10: several daemons
    r#"
-- Several daemons on one store (#14). Lease arithmetic uses the database's clock only.
CREATE FUNCTION corral_now_ms() RETURNS BIGINT LANGUAGE sql VOLATILE AS
    $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;
CREATE TABLE daemons (
    node_id     TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    epoch       BIGINT NOT NULL,
    host        TEXT COLLATE "C" NOT NULL,
    home        TEXT COLLATE "C" NOT NULL,
    pid         BIGINT NOT NULL,
    started_at  BIGINT NOT NULL,
    lease_until BIGINT,
    renewed_at  BIGINT,
    serves      TEXT COLLATE "C" NOT NULL DEFAULT '[]',
    status      TEXT COLLATE "C" NOT NULL DEFAULT '{}'
);
ALTER TABLE prompts ADD COLUMN claimed_by TEXT COLLATE "C";
ALTER TABLE prompts ADD COLUMN claim_epoch BIGINT;
CREATE INDEX prompts_claimed ON prompts(claimed_by) WHERE status = 'running';
-- The queue's heads in order, for the daemons' claims.
CREATE INDEX prompts_queued ON prompts(created_at, id) WHERE status = 'queued';
ALTER TABLE runs ADD COLUMN node_id TEXT COLLATE "C";
ALTER TABLE execs ADD COLUMN host TEXT COLLATE "C";
ALTER TABLE kept_processes ADD COLUMN node_id TEXT COLLATE "C";
ALTER TABLE sessions ADD COLUMN worktree_node TEXT COLLATE "C";
"#,
    // 11: cancels kept
    r#"
ALTER TABLE prompts ADD COLUMN cancel_asked_at BIGINT;
CREATE INDEX sessions_by_project ON sessions(project_id);
"#,
    // 12: asks across daemons
    r#"
CREATE TABLE asks (
    id          TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    to_node     TEXT COLLATE "C" NOT NULL,
    from_node   TEXT COLLATE "C" NOT NULL,
    request     TEXT NOT NULL,
    asked_at    BIGINT NOT NULL,
    answer      TEXT,
    answered_at BIGINT
);
CREATE INDEX asks_unanswered ON asks(to_node) WHERE answered_at IS NULL;
"#,
    // 13: queue heads
    r#"
CREATE TABLE queue_heads (
    session_id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    prompt_id  TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX queue_heads_in_order ON queue_heads(created_at, prompt_id);
INSERT INTO queue_heads (session_id, prompt_id, created_at)
SELECT DISTINCT ON (session_id) session_id, id, created_at FROM prompts
 WHERE status = 'queued' ORDER BY session_id, created_at, id;
CREATE FUNCTION queue_head_of_prompt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'queued' THEN
        INSERT INTO queue_heads (session_id, prompt_id, created_at)
        VALUES (NEW.session_id, NEW.id, NEW.created_at)
        ON CONFLICT (session_id) DO UPDATE SET prompt_id = excluded.prompt_id,
                                               created_at = excluded.created_at
         WHERE (excluded.created_at, excluded.prompt_id)
             < (queue_heads.created_at, queue_heads.prompt_id);
    ELSE
        DELETE FROM queue_heads WHERE session_id = OLD.session_id AND prompt_id = OLD.id;
        INSERT INTO queue_heads (session_id, prompt_id, created_at)
        SELECT session_id, id, created_at FROM prompts
         WHERE session_id = OLD.session_id AND status = 'queued'
         ORDER BY created_at, id LIMIT 1
        ON CONFLICT (session_id) DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER queue_head_on_insert AFTER INSERT ON prompts
    FOR EACH ROW WHEN (NEW.status = 'queued') EXECUTE FUNCTION queue_head_of_prompt();
CREATE TRIGGER queue_head_on_status AFTER UPDATE OF status ON prompts
    FOR EACH ROW WHEN ((OLD.status = 'queued') <> (NEW.status = 'queued'))
    EXECUTE FUNCTION queue_head_of_prompt();
"#,
    // 14: denials
    r#"
ALTER TABLE prompts ADD COLUMN denied BIGINT NOT NULL DEFAULT 0;
"#,
    // 15: approvals
    r#"
ALTER TABLE projects ADD COLUMN policy TEXT NOT NULL DEFAULT 'workspace-write';
ALTER TABLE sessions ADD COLUMN policy TEXT;
ALTER TABLE prompts ADD COLUMN policy TEXT;
UPDATE projects SET policy = 'full' WHERE full_access = 1;
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
    asked_at BIGINT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    answered_at BIGINT,
    answered_by TEXT,
    answer_reason TEXT,
    pattern TEXT,
    node_id TEXT
);
CREATE INDEX approvals_pending ON approvals (asked_at) WHERE status = 'pending';
CREATE INDEX approvals_by_session ON approvals (session_id, asked_at);
"#,
    // 16: phases
    r#"
ALTER TABLE prompts ADD COLUMN phase TEXT;
ALTER TABLE prompts ADD COLUMN phase_reason TEXT;
ALTER TABLE prompts ADD COLUMN phase_until BIGINT;
"#,
    // 17: agents_scope
    r#"
ALTER TABLE projects ADD COLUMN agents_scope TEXT NOT NULL DEFAULT 'session';
"#,
    // 18: runs_stored_through
    r#"
ALTER TABLE runs ADD COLUMN stdout_stored BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN stderr_stored BIGINT NOT NULL DEFAULT 0;
"#,
    // 19: pauses
    r#"
CREATE TABLE pauses (
    scope     TEXT COLLATE "C" NOT NULL,
    target    TEXT COLLATE "C" NOT NULL,
    needle    TEXT COLLATE "C",
    paused_at BIGINT NOT NULL,
    reason    TEXT NOT NULL,
    hard      BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, target)
);
ALTER TABLE projects ADD COLUMN pause_on_failure BIGINT NOT NULL DEFAULT 0;
ALTER TABLE projects ADD COLUMN notify TEXT COLLATE "C";
ALTER TABLE projects ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
ALTER TABLE sessions ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
"#,
    // 20: dependencies
    r#"
ALTER TABLE prompts ADD COLUMN runs_after TEXT;
ALTER TABLE prompts ADD COLUMN runs_after_any BIGINT NOT NULL DEFAULT 0;
CREATE TABLE prompt_after (
    prompt_id TEXT COLLATE "C" NOT NULL REFERENCES prompts(id),
    after_id  TEXT COLLATE "C" NOT NULL REFERENCES prompts(id),
    any_end   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (prompt_id, after_id)
);
CREATE INDEX prompt_after_by_after ON prompt_after(after_id);
"#,
    // 21: due times
    r#"
ALTER TABLE prompts ADD COLUMN due_at BIGINT;
CREATE INDEX prompts_due ON prompts(due_at) WHERE status = 'queued' AND due_at IS NOT NULL;
"#,
    // 22: schedules
    r#"
CREATE TABLE schedules (
    id         TEXT COLLATE "C" PRIMARY KEY,
    project_id TEXT COLLATE "C" NOT NULL REFERENCES projects(id),
    session_id TEXT COLLATE "C" REFERENCES sessions(id),
    cron       TEXT NOT NULL,
    text       TEXT NOT NULL,
    catch_up   BIGINT NOT NULL DEFAULT 0,
    paused     BIGINT NOT NULL DEFAULT 0,
    next_at    BIGINT,
    created_at BIGINT NOT NULL
);
CREATE INDEX schedules_next ON schedules(next_at) WHERE paused = 0 AND next_at IS NOT NULL;
CREATE TABLE schedule_firings (
    schedule_id TEXT COLLATE "C" NOT NULL REFERENCES schedules(id),
    due_at      BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    outcome     TEXT COLLATE "C" NOT NULL,
    reason      TEXT,
    session_id  TEXT COLLATE "C",
    prompt_id   TEXT COLLATE "C",
    PRIMARY KEY (schedule_id, due_at)
);
"#,
];

#[cfg(test)]
mod tests {
    #[test]
    fn one_postgres_step_per_sqlite_step() {
        assert_eq!(
            super::STEPS.len(),
            super::super::migrations::MIGRATIONS.len()
        );
    }
}
