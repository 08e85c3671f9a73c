//! Pauses (#35): a person stops new work in a scope — everything, a project, an execution
//! group or a session — until it is resumed; a project with `pause_on_failure` pauses itself
//! when one of its prompts fails for good.
//!
//! A pause is a row of `pauses`, and it holds where prompts are claimed: every claim asks
//! [`paused_sql!`] of the session in the same statement (`prompts::claim_next`, the shared
//! store's `claims::claim_work`), so a prompt of a paused session stays `queued` whichever
//! daemon, write or boot would have started it. The running prompts are the workers' to
//! stop: a worker waiting for a slot or a retry puts its prompt back at the head of its
//! queue when a pause covers it ([`PauseSet::covers`]); a run goes on to its end unless the
//! pause was made `--now` (`hard`), which interrupts it and requeues its prompt the same way.
//!
//! Lifting a pause claims the queued heads it held ([`ready_after_lift`]) in its write.

use serde::{Deserialize, Serialize};

use crate::store::sql::{self, args, Conn, Row};

/// Who paused a scope by hand (`pause_on_failure` pauses name the failed prompt instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PausedBy {
    Person,
    /// A run's agent, its own session.
    Agent,
}

impl PausedBy {
    /// The pause's stored reason.
    pub fn reason(self) -> &'static str {
        match self {
            PausedBy::Person => "by a person",
            PausedBy::Agent => "by its own agent",
        }
    }
}

/// What a pause covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", content = "target", rename_all = "lowercase")]
pub enum PauseScope {
    /// Every session.
    All,
    /// The sessions of a project (by id).
    Project(String),
    /// The sessions of the projects in an execution group (by name).
    Group(String),
    /// One session (by id).
    Session(String),
}

impl PauseScope {
    fn kind(&self) -> &'static str {
        match self {
            PauseScope::All => "all",
            PauseScope::Project(_) => "project",
            PauseScope::Group(_) => "group",
            PauseScope::Session(_) => "session",
        }
    }

    fn target(&self) -> &str {
        match self {
            PauseScope::All => "",
            PauseScope::Project(id) | PauseScope::Group(id) | PauseScope::Session(id) => id,
        }
    }

    /// A group's name as it stands in `projects.groups` (a JSON list), so that `instr` finds
    /// exactly it: `"ci"` is not found in `["ci-2"]`.
    fn needle(&self) -> Option<String> {
        match self {
            PauseScope::Group(name) => {
                Some(serde_json::to_string(name).expect("strings serialize"))
            }
            _ => None,
        }
    }

    pub(super) fn from_parts(kind: &str, target: String) -> Option<PauseScope> {
        Some(match kind {
            "all" => PauseScope::All,
            "project" => PauseScope::Project(target),
            "group" => PauseScope::Group(target),
            "session" => PauseScope::Session(target),
            _ => return None,
        })
    }
}

/// A pause as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    #[serde(flatten)]
    pub scope: PauseScope,
    /// What a person calls the target: the project's or group's name, the session's title
    /// (else its id); `None` for everything.
    pub name: Option<String>,
    pub paused_at: i64,
    /// Why, in words: who paused it, or the prompt whose failure did.
    pub reason: String,
    /// Made `--now`: runs in its scope are interrupted too, not only new ones held.
    #[serde(default)]
    pub hard: bool,
}

impl Pause {
    /// The pause in a few words: `project web (by a person)`.
    pub fn describe(&self) -> String {
        let what = match (&self.scope, &self.name) {
            (PauseScope::All, _) => "everything".to_string(),
            (scope, Some(name)) => format!("{} {name}", scope.kind()),
            (scope, None) => format!("{} {}", scope.kind(), scope.target()),
        };
        format!("{what} ({})", self.reason)
    }
}

/// SQL: whether the pause `pz` (a `pauses` row) covers the session `$s` (a `sessions` row's
/// alias in the statement).
macro_rules! covers_sql {
    ($s:literal) => {
        concat!(
            "(pz.scope = 'all' OR (pz.scope = 'session' AND pz.target = ",
            $s,
            ".id) OR (pz.scope = 'project' AND pz.target = ",
            $s,
            ".project_id) OR (pz.scope = 'group' AND instr((SELECT pg.groups FROM projects pg \
                WHERE pg.id = ",
            $s,
            ".project_id), pz.needle) > 0))"
        )
    };
}
pub(crate) use covers_sql;

/// SQL: whether a pause covers the session `$s`. An empty `pauses` table, the usual case,
/// costs one look at its first page.
macro_rules! paused_sql {
    ($s:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM pauses pz WHERE ",
            $crate::store::pauses::covers_sql!($s),
            ")"
        )
    };
}
pub(crate) use paused_sql;

/// The pauses in force, as the daemon's workers ask them: is this session covered?
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseSet(pub Vec<Pause>);

impl PauseSet {
    /// The first pause that covers a session of `project_id` in `groups`, if any; with
    /// `hard`, the first hard one (`--now`: what stops a run under way), whatever softer
    /// pauses came before it.
    pub fn covers(
        &self,
        session_id: &str,
        project_id: &str,
        groups: &[String],
        hard: bool,
    ) -> Option<&Pause> {
        self.0
            .iter()
            .filter(|pause| pause.hard || !hard)
            .find(|pause| match &pause.scope {
                PauseScope::All => true,
                PauseScope::Project(id) => id == project_id,
                PauseScope::Group(name) => groups.iter().any(|group| group == name),
                PauseScope::Session(id) => id == session_id,
            })
    }
}

// ---------------------------------------------------------------------------------------------
// Writes (applied by the ledger actor inside its transaction).

/// Pauses `scope`. A scope paused already keeps its time and reason; `hard` only hardens it
/// (a `--now` over a plain pause interrupts what runs, a plain pause over a hard one does not
/// soften it). Returns the pauses in force after it.
pub(crate) fn pause(
    connection: &Conn,
    scope: &PauseScope,
    reason: &str,
    hard: bool,
) -> sql::Result<Vec<Pause>> {
    connection.run(
        "INSERT INTO pauses (scope, target, needle, paused_at, reason, hard) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (scope, target) DO UPDATE SET hard = CASE WHEN excluded.hard = 1 THEN 1 ELSE pauses.hard END",
        args![
            scope.kind(),
            scope.target(),
            scope.needle(),
            super::now_ms(),
            reason,
            hard
        ],
    )?;
    pauses(connection)
}

/// Lifts the pause of `scope` (nothing if it had none), then claims, for `claimer` (within
/// `total`, `slots.total` across the daemons of a shared store), the queued heads it held
/// that nothing else holds now ([`ready_after_lift`]). Returns whether a
/// pause was lifted and the prompts now `running`, for their sessions' workers.
pub(crate) fn lift(
    connection: &Conn,
    scope: &PauseScope,
    claimer: super::prompts::Claimer<'_>,
    total: Option<usize>,
) -> sql::Result<(bool, Vec<super::prompts::Prompt>)> {
    let lifted = connection.run(
        "DELETE FROM pauses WHERE scope = ?1 AND target = ?2",
        args![scope.kind(), scope.target()],
    )? > 0;
    let mut started = Vec::new();
    if lifted && claimer != super::prompts::Claimer::Nobody {
        for session_id in ready_after_lift(connection, scope)? {
            started.extend(super::prompts::claim_next(
                connection,
                &session_id,
                None,
                claimer,
                total,
            )?);
        }
    }
    Ok((lifted, started))
}

/// Pauses the project of `session_id` if it pauses on a failure (`pause_on_failure`), naming
/// `prompt_id`; nothing otherwise, nor when it is paused already. Returns the pauses in force
/// when it paused it.
pub(crate) fn pause_on_failure(
    connection: &Conn,
    session_id: &str,
    prompt_id: &str,
) -> sql::Result<Option<Vec<Pause>>> {
    let paused = connection.run(
        "INSERT INTO pauses (scope, target, needle, paused_at, reason, hard) \
         SELECT 'project', p.id, NULL, ?3, ?2, 0 FROM sessions s JOIN projects p \
             ON p.id = s.project_id \
          WHERE s.id = ?1 AND p.pause_on_failure = 1 \
         ON CONFLICT (scope, target) DO NOTHING",
        args![
            session_id,
            format!("prompt {prompt_id} failed (pause_on_failure)"),
            super::now_ms()
        ],
    )?;
    match paused {
        0 => Ok(None),
        _ => pauses(connection).map(Some),
    }
}

// ---------------------------------------------------------------------------------------------
// Reads.

/// The pauses in force, oldest first, each with its target's name.
pub fn pauses(connection: &Conn) -> sql::Result<Vec<Pause>> {
    connection.rows(
        "SELECT pz.scope, pz.target, pz.paused_at, pz.reason, pz.hard, \
                CASE pz.scope WHEN 'project' THEN (SELECT name FROM projects WHERE id = pz.target) \
                              WHEN 'group' THEN pz.target \
                              WHEN 'session' THEN (SELECT title FROM sessions WHERE id = pz.target) \
                END \
           FROM pauses pz ORDER BY pz.paused_at, pz.scope, pz.target",
        args![],
        pause_row,
    )
}

fn pause_row(row: &Row<'_>) -> sql::Result<Pause> {
    let kind: String = row.get(0)?;
    let target: String = row.get(1)?;
    let scope = PauseScope::from_parts(&kind, target)
        .ok_or_else(|| sql::DbError::Invalid(format!("{kind:?} is not a pause's scope")))?;
    Ok(Pause {
        scope,
        paused_at: row.get(2)?,
        reason: row.get(3)?,
        hard: row.get(4)?,
        name: row.get(5)?,
    })
}

/// The sessions in `scope` whose queued head nothing holds any more: no prompt of theirs runs
/// and no pause covers them. Oldest head first.
pub(crate) fn ready_after_lift(connection: &Conn, scope: &PauseScope) -> sql::Result<Vec<String>> {
    connection.rows(
        concat!(
            "SELECT q.session_id FROM queue_heads q JOIN sessions s ON s.id = q.session_id \
              WHERE s.archived_at IS NULL \
                AND (?1 = 'all' OR (?1 = 'session' AND s.id = ?2) \
                     OR (?1 = 'project' AND s.project_id = ?2) \
                     OR (?1 = 'group' AND instr((SELECT pg.groups FROM projects pg \
                                                  WHERE pg.id = s.project_id), ?3) > 0)) \
                AND NOT EXISTS (SELECT 1 FROM prompts r \
                                 WHERE r.session_id = s.id AND r.status = 'running') \
                AND NOT ",
            paused_sql!("s"),
            " ORDER BY q.created_at, q.prompt_id"
        ),
        args![scope.kind(), scope.target(), scope.needle()],
        |row| row.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(scope: PauseScope) -> Pause {
        Pause {
            scope,
            name: None,
            paused_at: 1,
            reason: "by a person".into(),
            hard: false,
        }
    }

    #[test]
    fn a_pause_covers_its_scope_only() {
        let groups = vec!["ci".to_string()];
        let none = PauseSet::default();
        assert!(none.covers("s", "p", &groups, false).is_none());
        let set = PauseSet(vec![pause(PauseScope::Group("ci-2".into()))]);
        assert!(set.covers("s", "p", &groups, false).is_none());
        let set = PauseSet(vec![pause(PauseScope::Group("ci".into()))]);
        assert!(set.covers("s", "p", &groups, false).is_some());
        let set = PauseSet(vec![pause(PauseScope::Project("q".into()))]);
        assert!(set.covers("s", "p", &groups, false).is_none());
        assert!(set.covers("s", "q", &groups, false).is_some());
        let set = PauseSet(vec![pause(PauseScope::Session("t".into()))]);
        assert!(set.covers("s", "p", &groups, false).is_none());
        assert!(set.covers("t", "p", &[], false).is_some());
        let set = PauseSet(vec![pause(PauseScope::All)]);
        assert!(set.covers("s", "p", &[], false).is_some());
        // A hard pause after a soft one that covers the same session is the one that stops
        // its run.
        let hard = Pause {
            hard: true,
            ..pause(PauseScope::Project("p".into()))
        };
        let set = PauseSet(vec![pause(PauseScope::All), hard.clone()]);
        assert_eq!(set.covers("s", "p", &[], true), Some(&hard));
        assert!(set.covers("s", "q", &[], true).is_none());
    }

    #[test]
    fn a_scope_reads_back_as_written() {
        for scope in [
            PauseScope::All,
            PauseScope::Project("p".into()),
            PauseScope::Group("g".into()),
            PauseScope::Session("s".into()),
        ] {
            let again = PauseScope::from_parts(scope.kind(), scope.target().to_string());
            assert_eq!(again, Some(scope.clone()));
            let json = serde_json::to_value(&scope).unwrap();
            assert_eq!(serde_json::from_value::<PauseScope>(json).unwrap(), scope);
        }
        assert_eq!(PauseScope::from_parts("wave", "w".into()), None);
    }
}
