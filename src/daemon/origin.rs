//! Where a request comes from: a person, or an agent inside a supervised run.
//!
//! Agents are not trusted with their own rights: a request that would widen what an agent may
//! do (see [`Widening`]) is refused when it comes from inside a run. The daemon learns the
//! peer's pid from SO_PEERCRED when the connection is accepted, and [`find`] matches that
//! process against the daemon's live runs (each run's engine leads a process group of its
//! own; a codex app-server child serves its project's turns; each runs under its shim, whose
//! pid is the one recorded):
//!
//! 1. **ancestry**: the peer, its parent, and so on up to pid 1, is a run's shim (or an
//!    app-server child's) — whatever the peer did to its environment, process group or session
//!    (`env -i`, `setsid`), it stays a descendant, and a process that double-forks to leave
//!    the tree is adopted by the shim (`process::shim`, the child subreaper of its engine);
//! 2. **process group**: the peer is in a run's group (a process that was reparented when its
//!    parent exited, but never left the group);
//! 3. **environment**: the peer or one of its ancestors carries a live run's `CORRAL_RUN_ID`.
//!
//! What it cannot catch, written down on purpose: a process the agent asked something outside
//! corral to start (`systemd-run --user`, a cron or `at` job, a user service, a line added to
//! a shell's startup file), which is no descendant of the run, and, in a program embedding
//! corral without a `corral-shim`, a process that left the run's tree *and* group *and*
//! environment. Such an escape needs the agent to reach those programs from its sandbox; an
//! agent that can already has the user's rights, and corral does not claim to contain it. A
//! per-user secret proving "a person's client" was weighed and not built: an agent runs as
//! the same user and may read whatever the person's client can (docs/permissions.md).

use crate::events::{Payload, RequestRefused};
use std::cell::RefCell;
use std::collections::HashMap;

use procfs::process::Process;

use crate::engine::{EngineKind, Policy};
use crate::protocol::*;
use crate::store::sql::{args, Conn};
use crate::store::{projects, prompts, sessions};

pub use crate::process::LiveRun;

/// Which live run a request came from, and how that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub run_id: String,
    pub session_id: Option<String>,
    /// `ancestry`, `process group` or `environment`.
    pub found_by: &'static str,
}

/// The refusal of a request from inside a run (`NOT_ALLOWED`, naming the run's session and
/// `what` it would have done), recorded first as a `request.refused` event of that session:
/// a widening ([`Widening`]) and a reach beyond the session (`confine.rs`) alike. The record
/// waits out a locked store; the request is refused even when it cannot be made.
pub async fn refuse(
    corral: &crate::Corral,
    origin: &Origin,
    peer: i32,
    method: &str,
    what: &str,
) -> RpcError {
    if let Some(session_id) = &origin.session_id {
        let recorded = corral
            .record_payload(
                session_id,
                Payload::RequestRefused(RequestRefused {
                    method: method.to_string(),
                    what: what.to_string(),
                    run_id: origin.run_id.clone(),
                    found_by: origin.found_by.to_string(),
                    peer_pid: peer,
                }),
            )
            .await;
        if let Err(error) = recorded {
            tracing::error!(%error, session = session_id, "the refusal was not recorded");
        }
    }
    let session = origin.session_id.as_deref().unwrap_or(&origin.run_id);
    RpcError::new(
        code::NOT_ALLOWED,
        format!("not allowed from inside a supervised run (session {session}): {what}"),
    )
    .with_data(serde_json::json!({ "run_id": origin.run_id, "found_by": origin.found_by }))
}

/// The last look of one connection's peer: the live runs it was made against and what it
/// found. A look costs a pass over `/proc` (the peer's ancestry and environment); the next
/// request of the connection against the same runs reads it from here. What it found cannot
/// have become wrong in a way that frees the peer: a process never moves into a run's tree
/// (it is only ever reparented up, out of one), cannot join a run's process group (that is
/// another session's), and its environment is fixed at its exec; a change in the runs (one
/// started, its pid stored, one ended) makes a new look.
#[derive(Debug, Default)]
pub struct OriginCache(std::cell::RefCell<Option<(Vec<LiveRun>, Option<Origin>)>>);

impl OriginCache {
    /// [`find`], or what the last look found against the same runs.
    pub fn find(&self, peer: i32, runs: &[LiveRun]) -> Option<Origin> {
        if let Some((seen, found)) = &*self.0.borrow() {
            if seen == runs {
                return found.clone();
            }
        }
        let found = find(peer, runs);
        *self.0.borrow_mut() = Some((runs.to_vec(), found.clone()));
        found
    }
}

/// How far up a process tree [`find`] walks (a deeper tree is not a supervised run's).
const MAX_DEPTH: usize = 64;

/// The live run `peer` belongs to, if any (see the module documentation).
pub fn find(peer: i32, runs: &[LiveRun]) -> Option<Origin> {
    if peer <= 0 {
        return None;
    }
    if runs.is_empty() {
        return from_a_setup(peer);
    }
    // A run whose pid is not known yet (0) is found by its run id only.
    let by_pid: HashMap<i32, &LiveRun> = runs
        .iter()
        .filter(|run| run.pid > 0)
        .map(|run| (run.pid, run))
        .collect();
    let by_id: HashMap<&str, &LiveRun> =
        runs.iter().map(|run| (run.run_id.as_str(), run)).collect();
    let origin = |run: &LiveRun, found_by| Origin {
        run_id: run.run_id.clone(),
        session_id: run.session_id.clone(),
        found_by,
    };
    // Ancestry first (the strongest evidence), then the peer's group, then an environment.
    let mut group = None;
    let mut from_environment = None;
    let mut pid = peer;
    for depth in 0..MAX_DEPTH {
        if let Some(run) = by_pid.get(&pid) {
            return Some(origin(run, "ancestry"));
        }
        let Ok(process) = Process::new(pid) else {
            break;
        };
        let Ok(stat) = process.stat() else {
            break;
        };
        if depth == 0 {
            group = by_pid.get(&stat.pgrp).copied();
        }
        if from_environment.is_none() {
            from_environment =
                run_id_in_environment(&process).and_then(|id| by_id.get(id.as_str()).copied());
        }
        if stat.ppid <= 1 {
            break;
        }
        pid = stat.ppid;
    }
    if let Some(run) = group {
        return Some(origin(run, "process group"));
    }
    from_environment
        .map(|run| origin(run, "environment"))
        .or_else(|| from_a_setup(peer))
}

/// A worktree's setup command (`npm ci` runs the repository's scripts, which an agent may
/// have written) is no run, but is held to a run's rules: a peer that is one of its
/// processes, or descends from one, carries its session's id in `CORRAL_SETUP_SESSION`.
fn from_a_setup(peer: i32) -> Option<Origin> {
    let mut pid = peer;
    for _ in 0..MAX_DEPTH {
        let process = Process::new(pid).ok()?;
        if let Some(session) = process.environ().ok().and_then(|environment| {
            environment
                .get(std::ffi::OsStr::new(crate::env::SETUP_SESSION))
                .cloned()
        }) {
            let session = session.to_string_lossy().into_owned();
            return Some(Origin {
                run_id: format!("setup of session {session}"),
                session_id: Some(session),
                found_by: "environment",
            });
        }
        let ppid = process.stat().ok()?.ppid;
        if ppid <= 1 {
            return None;
        }
        pid = ppid;
    }
    None
}

/// The `CORRAL_RUN_ID` in a process's environment (readable for our own user's processes).
fn run_id_in_environment(process: &Process) -> Option<String> {
    let environment = process.environ().ok()?;
    environment
        .get(std::ffi::OsStr::new(crate::env::RUN_ID))
        .map(|value| value.to_string_lossy().into_owned())
}

/// What a request would widen, judged before anything is read: the dispatcher's rules
/// ([`Widening`]) with nothing known of the store or of the caller, so a rule that needs
/// to know answers as if the worst were true (`None` here is `None` for every caller,
/// whatever the store says); the rules' unit tests ask it. A method that is not served, or
/// params that do not decode, do not widen (they fail).
#[cfg(test)]
pub fn widening(method: &str, params: &serde_json::Value) -> Option<String> {
    super::methods::widening_unread(method, params)
}

/// A request's params that may widen what an agent may do, as the dispatcher decodes them:
/// every served method's params implement it (`methods::Serve` requires it), so a method
/// cannot skip the check by sharing a type or a name. The rules (docs/protocol.md,
/// "Privilege stays with people") are written once per params type, here.
pub trait Widening {
    /// Whether any request of these params can widen at all: `false` for the params that
    /// never do, so that their requests (`status`, `exec.start`, …) take no store read for
    /// the check. A type that may widen keeps the default.
    const MAY_WIDEN: bool = true;

    /// What this request would widen, in words for the refusal; `None`: nothing (narrowing
    /// is never widening). A fact `ctx` cannot give (no store, an unknown selector, a caller
    /// whose run is not known) counts as the worst: the rule widens.
    fn widens(&self, _ctx: &WideningContext) -> Option<String> {
        None
    }

    /// Replaces the selectors a rule judges by with the ids they name now (left as they are
    /// when they name none), so that the method serves the session or project that was
    /// judged, not one that took its title in between.
    fn pin(&mut self, _ctx: &WideningContext) {}
}

/// What a rule may know: the store (`None`: not read — [`widening`]) and the run the
/// request came from (its session and that session's project; `None`: not known, which a
/// rule reads as a run that may do nothing — no full access, no project of its own).
pub struct WideningContext<'a> {
    store: Option<&'a Conn>,
    caller: Option<(sessions::Session, Option<projects::Project>)>,
    /// The sessions and projects read so far, by id: a request's `pin` and `widens` ask
    /// for the same rows (a `prompt.send` read its session twice), and should see them
    /// alike.
    seen_sessions: RefCell<Vec<sessions::Session>>,
    seen_projects: RefCell<Vec<projects::Project>>,
}

/// The sessions and projects a request's check read ([`WideningContext`]), handed to the
/// method it lets through: it serves the very rows that were judged instead of reading
/// them again (a `prompt.send` read its session and project twice each).
#[derive(Default)]
pub struct Judged {
    sessions: Vec<sessions::Session>,
    projects: Vec<projects::Project>,
}

impl Judged {
    /// The session of id `id`, if the check read it.
    pub fn session(&self, id: &str) -> Option<&sessions::Session> {
        self.sessions.iter().find(|session| session.id == id)
    }

    /// The project of id `id`, if the check read it.
    pub fn project(&self, id: &str) -> Option<&projects::Project> {
        self.projects.iter().find(|project| project.id == id)
    }
}

/// The row of `seen` whose id is `id`, else `read`'s (kept in `seen` for the next ask).
fn seen_or_read<T: Clone>(
    seen: &RefCell<Vec<T>>,
    id: &str,
    id_of: fn(&T) -> &str,
    read: impl FnOnce() -> Option<T>,
) -> Option<T> {
    if let Some(row) = seen.borrow().iter().find(|row| id_of(row) == id) {
        return Some(row.clone());
    }
    let row = read()?;
    seen.borrow_mut().push(row.clone());
    Some(row)
}

impl<'a> WideningContext<'a> {
    /// Nothing known: the worst for every fact.
    #[cfg(test)]
    pub fn unread() -> Self {
        WideningContext {
            store: None,
            caller: None,
            seen_sessions: RefCell::default(),
            seen_projects: RefCell::default(),
        }
    }

    /// The store read, the caller's run not known (yet).
    pub fn of_store(store: &'a Conn) -> Self {
        WideningContext {
            store: Some(store),
            caller: None,
            seen_sessions: RefCell::default(),
            seen_projects: RefCell::default(),
        }
    }

    /// The store read, and the caller's run: `session_id` is its session's (`None`: an
    /// app-server child, which serves many sessions: not known).
    pub fn of_run(store: &'a Conn, session_id: Option<&str>) -> Self {
        let caller = session_id
            .and_then(|id| sessions::session(store, id).ok().flatten())
            .map(|session| {
                let project = session
                    .project_id
                    .as_deref()
                    .and_then(|id| projects::project(store, id).ok().flatten());
                (session, project)
            });
        WideningContext {
            store: Some(store),
            caller,
            seen_sessions: RefCell::default(),
            seen_projects: RefCell::default(),
        }
    }

    /// The rows read so far, for the method served next.
    pub fn into_judged(self) -> Judged {
        Judged {
            sessions: self.seen_sessions.into_inner(),
            projects: self.seen_projects.into_inner(),
        }
    }

    /// The project a selector names (`None`: no store, or it names none or several).
    pub fn project(&self, selector: &str) -> Option<projects::Project> {
        let store = self.store?;
        seen_or_read(
            &self.seen_projects,
            selector.trim(),
            |project| &project.id,
            || super::methods::project_of(store, selector).ok(),
        )
    }

    /// The session a selector names, with its project.
    pub fn session(&self, selector: &str) -> Option<(sessions::Session, projects::Project)> {
        let session = self.session_only(selector)?;
        let project = self.project(session.project_id.as_deref()?)?;
        Some((session, project))
    }

    /// A session id not seen yet read with its project, in one statement (what clients
    /// send is an id), both kept as seen; a selector that is no id reads nothing here.
    fn read_with_project(&self, id: &str) {
        let Some(store) = self.store else { return };
        if self
            .seen_sessions
            .borrow()
            .iter()
            .any(|session| session.id == id)
        {
            return;
        }
        let Ok(Some((session, project))) = sessions::session_and_project(store, id) else {
            return;
        };
        if let Some(project) = project {
            let mut seen = self.seen_projects.borrow_mut();
            if !seen.iter().any(|known| known.id == project.id) {
                seen.push(project);
            }
        }
        self.seen_sessions.borrow_mut().push(session);
    }

    /// The session a selector names (an id seen before is not read again).
    fn session_only(&self, selector: &str) -> Option<sessions::Session> {
        let store = self.store?;
        // Its project comes with it: the rules that ask for a session ask for its project.
        self.read_with_project(selector.trim());
        // Not found by its id there: a title or a prefix.
        seen_or_read(
            &self.seen_sessions,
            selector.trim(),
            |session| &session.id,
            || super::methods::session_among_all(store, selector).ok(),
        )
    }

    /// `selector` made the id of the project it names now.
    fn pin_project(&self, selector: &mut String) {
        if let Some(project) = self.project(selector) {
            *selector = project.id;
        }
    }

    /// `selector` made the id of the session it names now.
    fn pin_session(&self, selector: &mut String) {
        if let Some(session) = self.session_only(selector) {
            *selector = session.id;
        }
    }

    /// Whether some session of `project` runs without a sandbox: it has full access (and is
    /// not remote), or one of its sessions is on the `command` engine (not known: yes).
    fn has_unconfined_sessions(&self, project: &projects::Project) -> bool {
        if project.full_access && project.kind != "remote" {
            return true;
        }
        let Some(store) = self.store else {
            return true;
        };
        store
            .row(
                "SELECT EXISTS(SELECT 1 FROM sessions WHERE project_id = ?1 AND engine = 'command')",
                args![&project.id],
                |row| row.get::<bool>(0),
            )
            .unwrap_or(true)
    }

    /// The caller's run's project, when known.
    pub fn caller_project(&self) -> Option<&projects::Project> {
        self.caller.as_ref()?.1.as_ref()
    }

    /// The caller's run's session (`None`: not known).
    fn caller_session(&self) -> Option<&sessions::Session> {
        self.caller.as_ref().map(|(session, _)| session)
    }

    /// Whether the caller's run is itself unconfined (see [`unconfined`]); not known: no.
    fn caller_unconfined(&self) -> bool {
        match &self.caller {
            Some((session, Some(project))) => unconfined(session, project),
            _ => false,
        }
    }
}

/// Whether a session's runs have no sandbox: its project has full access (and is not
/// remote: a remote project's engines are always read-only), or its engine is `command`
/// (any program, never sandboxed).
fn unconfined(session: &sessions::Session, project: &projects::Project) -> bool {
    (project.full_access && project.kind != "remote") || session.engine == EngineKind::Command
}

/// The engine a project's new sessions get when none is given (`Corral::open_session`).
fn project_engine(project: &projects::Project) -> EngineKind {
    project.engine.unwrap_or_default()
}

/// Whether two paths are the same directory (symlinks resolved); a path that does not
/// resolve is no directory of anyone's.
fn same_directory(a: &str, b: &str) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

impl Widening for ProjectAddParams {
    /// Choosing a project's sandbox, engine and place is the person's: from a run, a project
    /// is added only on the run's own project's directory (not a directory below it: the
    /// agent could later replace that directory with a symlink to anywhere), sandboxed as
    /// that project is, on the default engine.
    fn widens(&self, ctx: &WideningContext) -> Option<String> {
        if self.full_access {
            return Some("adding a project with full access".into());
        }
        if let Some(policy) = self
            .policy
            .filter(|policy| *policy > Policy::WorkspaceWrite)
        {
            return Some(format!("adding a project under policy {policy}"));
        }
        if self.keep_background {
            return Some("adding a project whose runs' background processes outlive them".into());
        }
        if !self.env.is_empty() {
            return Some("adding a project with environment variables".into());
        }
        if let Some(why) = worktree_widening(self.setup.as_deref(), self.worktrees_dir.as_deref()) {
            return Some(why);
        }
        if self
            .engine
            .as_deref()
            .is_some_and(|engine| !engine.is_empty())
        {
            return Some("choosing a new project's engine".into());
        }
        let Some(own) = ctx
            .caller_project()
            .filter(|own| same_directory(&own.path, &self.path))
        else {
            return Some(format!(
                "adding a project on {} (not the run's own project's directory)",
                self.path
            ));
        };
        if own.kind == "remote" && !self.remote {
            return Some("adding a local project from a remote one".into());
        }
        // A worktree project's directory is the person's own checkout: a project on it that
        // shares it (or may, when git is missing) would run sessions there.
        (own.isolation == projects::Isolation::Worktree
            && self.isolation.as_deref() != Some("worktree"))
        .then(|| format!("adding a project that shares {}'s working tree", own.name))
    }
}

impl Widening for ProjectSetParams {
    fn pin(&mut self, ctx: &WideningContext) {
        ctx.pin_project(&mut self.project);
    }

    fn widens(&self, ctx: &WideningContext) -> Option<String> {
        if self.full_access == Some(true) {
            return Some("turning full access on".into());
        }
        if self.agents_scope == Some(projects::AgentsScope::Project) {
            return Some("letting a project's agents reach each other's sessions".into());
        }
        if let Some(policy) = self.policy {
            match ctx.project(&self.project) {
                Some(project) if policy <= project.default_policy() => {}
                Some(project) => {
                    return Some(format!(
                        "widening project {}'s policy from {} to {policy}",
                        project.name,
                        project.default_policy()
                    ))
                }
                None => return Some(format!("setting a project's policy to {policy}")),
            }
        }
        if self.keep_background == Some(true) {
            return Some("letting background processes outlive their runs".into());
        }
        if self.notify.is_some() {
            return Some("changing what a person is told of a project (notify)".into());
        }
        if !self.env.is_empty() || !self.unset_env.is_empty() {
            return Some("changing a project's environment variables".into());
        }
        if self.pause_on_failure == Some(false) {
            return Some("letting a project run on after a failure (pause_on_failure off)".into());
        }
        if self.remote == Some(false) {
            return Some("turning remote off".into());
        }
        if let Some(why) = worktree_widening(self.setup.as_deref(), self.worktrees_dir.as_deref()) {
            return Some(why);
        }
        let project = || ctx.project(&self.project);
        // Shared isolation runs the project's new sessions in the person's own checkout,
        // where a worktree session cannot reach.
        if self.isolation.as_deref() == Some("shared")
            && project().is_none_or(|p| p.isolation != projects::Isolation::Shared)
        {
            return Some("making a project's sessions share its working tree".into());
        }
        if let Some(engine) = &self.engine {
            if project().and_then(|p| p.engine).map(EngineKind::as_str) != Some(engine.as_str()) {
                return Some("changing a project's engine".into());
            }
        }
        // A project's instructions come with every prompt its sessions send: text for a
        // session without a sandbox, as `prompt.send`'s is.
        if self.instructions.is_some() && !ctx.caller_unconfined() {
            match project() {
                Some(project) if !ctx.has_unconfined_sessions(&project) => {}
                Some(project) => {
                    return Some(format!(
                    "changing the instructions of project {}, whose sessions run without a sandbox",
                    project.name
                ))
                }
                None => return Some("changing a project's instructions".into()),
            }
        }
        if let Some(groups) = &self.groups {
            let Some(project) = project() else {
                return Some("changing a project's groups".into());
            };
            if let Some(left) = project.groups.iter().find(|group| !groups.contains(group)) {
                return Some(format!(
                    "taking project {} out of group {left}",
                    project.name
                ));
            }
        }
        None
    }
}

/// A setup command is run by corral, outside any sandbox; a worktrees directory is a place
/// corral writes: both are the person's to choose (clearing either is not).
fn worktree_widening(setup: Option<&str>, worktrees_dir: Option<&str>) -> Option<String> {
    if setup.is_some_and(|setup| !setup.is_empty()) {
        return Some("setting a project's setup command".into());
    }
    worktrees_dir
        .filter(|dir| !dir.is_empty())
        .map(|_| "choosing where a project's worktrees go".into())
}

/// `project.archive` takes its selector only: it changes nothing else.
impl Widening for ProjectArchiveParams {
    const MAY_WIDEN: bool = false;
}

/// `group.remove` removes only a group no project is in: no project runs beside another
/// because of it.
impl Widening for GroupSelector {
    const MAY_WIDEN: bool = false;
}

impl Widening for GroupSetParams {
    fn widens(&self, _: &WideningContext) -> Option<String> {
        // `locking` defaults to true: only an explicit false widens.
        (self.locking == Some(false)).then(|| format!("making group {} non-locking", self.name))
    }
}

impl Widening for SettingsSetParams {
    /// Where an engine's program comes from (set or unset alike).
    fn widens(&self, _: &WideningContext) -> Option<String> {
        let name = &self.name;
        let engine_program = name.starts_with("engines.")
            && (name.ends_with(".path") || name == "engines.command.template");
        // Where corral makes worktrees (set or unset alike); what a person is told, and the
        // command the daemon runs to tell them (outside any sandbox).
        (engine_program || name == "worktrees.dir" || name.starts_with("notify."))
            .then(|| format!("changing {name}"))
    }
}

impl Widening for ShutdownParams {
    fn widens(&self, _: &WideningContext) -> Option<String> {
        Some("stopping the daemon".into())
    }
}

impl Widening for SessionNewParams {
    /// A session runs its project's engine unless a person chooses another (the `command`
    /// engine has no sandbox at all).
    fn pin(&mut self, ctx: &WideningContext) {
        ctx.pin_project(&mut self.project);
    }

    fn widens(&self, ctx: &WideningContext) -> Option<String> {
        if !self.env.is_empty() {
            return Some("setting environment variables for a session's engines".into());
        }
        if let Some(policy) = self.policy {
            match ctx.project(&self.project) {
                Some(project) if policy <= project.default_policy() => {}
                _ => return Some(format!("opening a session under policy {policy}")),
            }
        }
        // A project's setup command runs unsandboxed on the tree a new worktree is made from:
        // choosing that tree (a branch or base an agent may have committed to) is the person's.
        if self.branch.is_some() || self.base.is_some() {
            let project = ctx.project(&self.project);
            if project.as_ref().is_none_or(|p| p.setup.is_some()) {
                return Some(
                    "choosing the branch or base of a new worktree that a setup command runs in"
                        .into(),
                );
            }
        }
        let engine = self.engine.as_deref().filter(|engine| !engine.is_empty())?;
        match ctx.project(&self.project) {
            Some(project) if project_engine(&project).as_str() == engine => None,
            Some(project) => Some(format!(
                "choosing engine {engine} for a session of project {} (its engine is {})",
                project.name,
                project_engine(&project)
            )),
            None => Some(format!("choosing engine {engine} for a new session")),
        }
    }
}

/// Text for a session whose runs have no sandbox, from a run that has one, is full access
/// by proxy.
fn into_unconfined(ctx: &WideningContext, selector: &str) -> Option<String> {
    if ctx.caller_unconfined() {
        return None;
    }
    match ctx.session(selector) {
        Some((session, project)) if !unconfined(&session, &project) => None,
        Some((session, project)) => Some(format!(
            "sending to session {} of project {}, which runs without a sandbox",
            session.id, project.name
        )),
        None => Some("sending to a session that may run without a sandbox".into()),
    }
}

impl Widening for SendParams {
    fn pin(&mut self, ctx: &WideningContext) {
        ctx.pin_session(&mut self.session);
    }

    fn widens(&self, ctx: &WideningContext) -> Option<String> {
        if let Some(policy) = self.policy {
            match ctx.session(&self.session) {
                Some((session, project))
                    if policy <= session.policy.unwrap_or(project.default_policy()) => {}
                _ => return Some(format!("sending a prompt under policy {policy}")),
            }
        }
        into_unconfined(ctx, &self.session)
    }
}

impl Widening for SteerParams {
    fn pin(&mut self, ctx: &WideningContext) {
        ctx.pin_session(&mut self.session);
    }

    fn widens(&self, ctx: &WideningContext) -> Option<String> {
        into_unconfined(ctx, &self.session)
    }
}

impl Widening for ClaimParams {
    /// Taking a session from its driver (a person's terminal, say) is the person's.
    fn widens(&self, _: &WideningContext) -> Option<String> {
        self.take_over
            .then(|| format!("taking session {} over from its driver", self.session))
    }
}

impl Widening for SessionArchiveParams {
    fn pin(&mut self, ctx: &WideningContext) {
        ctx.pin_session(&mut self.session);
    }

    /// A worktree's uncommitted changes are lost for good; and archiving another session
    /// with a worktree removes it (its ignored files, `.env` or `node_modules`, with it).
    fn widens(&self, ctx: &WideningContext) -> Option<String> {
        if self.discard_changes == Some(true) {
            return Some(format!(
                "discarding the uncommitted changes of session {}'s worktree",
                self.session
            ));
        }
        let own = ctx.caller_session().map(|session| session.id.as_str());
        match ctx.session(&self.session) {
            Some((session, _))
                if session.worktree.is_none() || Some(session.id.as_str()) == own =>
            {
                None
            }
            Some((session, _)) => Some(format!(
                "archiving session {}, which has a worktree",
                session.id
            )),
            None => Some(format!("archiving session {}", self.session)),
        }
    }
}

/// Pausing narrows (what a run reaches is `confine`'s: its own session only).
impl Widening for PauseParams {
    const MAY_WIDEN: bool = false;
}

impl Widening for PauseTarget {
    /// Work a pause holds is let go by a person: an agent that could would undo the pause
    /// that stopped it.
    fn widens(&self, _: &WideningContext) -> Option<String> {
        Some("resuming paused work".into())
    }
}

/// A schedule sends to the session it names as a `send` there would, under that session's
/// policy (what an agent reaches is `confine`'s); pausing or removing one narrows.
impl Widening for ScheduleAddParams {
    const MAY_WIDEN: bool = false;
}

impl Widening for ScheduleResumeParams {
    /// A schedule a person paused is let go by a person.
    fn widens(&self, _: &WideningContext) -> Option<String> {
        Some(format!("resuming schedule {}", self.schedule))
    }
}

impl Widening for ApprovalsAnswerParams {
    /// Only a person answers what an engine asks: an agent that could would approve itself.
    fn widens(&self, _: &WideningContext) -> Option<String> {
        Some(format!("answering approval {}", self.approval))
    }
}

impl Widening for SessionMergeParams {
    /// A merge writes the person's branch (and may fast-forward their checkout).
    fn widens(&self, _: &WideningContext) -> Option<String> {
        Some(format!("merging session {}'s branch", self.session))
    }
}

/// The served methods whose params never widen (a method that is only read never does).
macro_rules! never_widen {
    ($($params:ty),* $(,)?) => {
        $(impl Widening for $params {
            const MAY_WIDEN: bool = false;
        })*
    };
}

/// A prompt of the caller's own session (`confine`) is run again as it was, or edited while
/// queued, under the policy it had: new words in place of a person's are a widening when
/// that policy is the prompt's own and wider than its session's (the person granted it to
/// their words, not the agent's).
impl Widening for RetryParams {
    fn widens(&self, ctx: &WideningContext) -> Option<String> {
        self.text.as_ref()?;
        rewrites_under_its_grant(ctx, &self.prompt)
    }
}

impl Widening for EditParams {
    fn widens(&self, ctx: &WideningContext) -> Option<String> {
        rewrites_under_its_grant(ctx, &self.prompt)
    }
}

/// Why new words for the prompt `selector` names widen (see [`RetryParams`]'s rule). A
/// selector that names no one prompt is left to the method (it says so).
fn rewrites_under_its_grant(ctx: &WideningContext, selector: &str) -> Option<String> {
    let Some(store) = ctx.store else {
        return Some("rewriting a prompt".into());
    };
    let found = prompts::ids_starting(store, selector.trim(), 2).ok()?;
    let [id] = found.as_slice() else {
        return None;
    };
    let prompt = prompts::prompt(store, id).ok()??;
    let policy = prompt.policy?;
    match ctx.session(&prompt.session_id) {
        Some((session, project))
            if policy <= session.policy.unwrap_or(project.default_policy()) =>
        {
            None
        }
        _ => Some(format!("rewriting a prompt sent under policy {policy}")),
    }
}

never_widen!(
    NoParams,
    StatusParams,
    SessionSelector,
    SessionRenameParams,
    SessionDiffParams,
    CancelParams,
    PromptSelector,
    ReleaseParams,
    ExecStartParams,
    ExecEndParams,
    ScheduleSelector,
    ScheduleShowParams,
);

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};

    use super::*;

    /// A connection's last look stands while the runs are the same, and a change in them makes
    /// a new one: here the test process is a "run" (found by ancestry), then no run's is.
    #[test]
    fn a_look_is_kept_while_the_runs_are_the_same_and_made_again_when_they_change() {
        let me = std::process::id() as i32;
        let run = |run_id: &str, pid: i32| LiveRun {
            run_id: run_id.into(),
            session_id: Some("s".into()),
            pid,
        };
        let cache = OriginCache::default();
        let ours = vec![run("r1", me)];
        let found = cache
            .find(me, &ours)
            .expect("the peer is the run's process");
        assert_eq!((found.run_id.as_str(), found.found_by), ("r1", "ancestry"));
        assert_eq!(cache.find(me, &ours), Some(found.clone()));
        // Another run (a pid that is no ancestor of ours): looked at again, not found.
        let others = vec![run("r2", i32::MAX)];
        assert_eq!(cache.find(me, &others), None);
        assert_eq!(cache.find(me, &ours), Some(found));
    }

    #[test]
    fn a_row_seen_is_not_read_again_and_another_is() {
        let seen: RefCell<Vec<(String, u32)>> = RefCell::default();
        let reads = std::cell::Cell::new(0);
        let read = |id: &str, version: u32| {
            seen_or_read(
                &seen,
                id,
                |row| &row.0,
                || {
                    reads.set(reads.get() + 1);
                    Some((id.to_string(), version))
                },
            )
        };
        assert_eq!(read("a", 1), Some(("a".into(), 1)));
        // The same id: the row seen first, not read again.
        assert_eq!(read("a", 2), Some(("a".into(), 1)));
        assert_eq!(reads.get(), 1);
        assert_eq!(read("b", 3), Some(("b".into(), 3)));
        assert_eq!(reads.get(), 2);
        // Nothing found is not kept: asked again, it is read again.
        assert_eq!(seen_or_read(&seen, "c", |row| &row.0, || None), None);
        assert_eq!(read("c", 4), Some(("c".into(), 4)));
    }

    fn run(pid: u32, id: &str) -> LiveRun {
        LiveRun {
            run_id: id.into(),
            session_id: Some(format!("session-of-{id}")),
            pid: pid as i32,
        }
    }

    #[test]
    fn a_descendant_is_found_by_its_ancestry_even_in_a_session_of_its_own() {
        // A shell in its own process group (a run's engine) whose child calls setsid and
        // waits: the grandchild is in another session and group, but still a descendant.
        let mut engine = Command::new("sh")
            .args(["-c", "setsid sleep 5 & echo $!; wait"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(engine.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let runs = [run(engine.id(), "r1")];
        let found = find(grandchild, &runs);
        let _ = Command::new("kill").arg(grandchild.to_string()).status();
        let _ = engine.wait();
        assert_eq!(
            found.map(|o| (o.run_id, o.found_by)),
            Some(("r1".into(), "ancestry"))
        );
    }

    #[test]
    fn widening_requests_are_named_and_narrowing_ones_pass() {
        use serde_json::json;
        // Nothing read: a rule that needs the store or the caller answers as if the worst.
        let widens = |method: &str, params: serde_json::Value| widening(method, &params);
        for (method, params) in [
            ("project.set", json!({"project": "p", "full_access": true})),
            ("project.set", json!({"project": "p", "remote": false})),
            ("project.set", json!({"project": "p", "engine": "codex"})),
            (
                "project.set",
                json!({"project": "p", "keep_background": true}),
            ),
            ("project.set", json!({"project": "p", "groups": []})),
            ("project.set", json!({"project": "p", "instructions": "x"})),
            (
                "project.add",
                json!({"name": "q", "path": "/", "full_access": true}),
            ),
            (
                "project.add",
                json!({"name": "q", "path": "/", "keep_background": true}),
            ),
            ("project.add", json!({"name": "q", "path": "/tmp"})),
            (
                "settings.set",
                json!({"name": "engines.claude.path", "value": "/x"}),
            ),
            ("settings.set", json!({"name": "engines.command.template"})),
            ("group.set", json!({"name": "deploy", "locking": false})),
            ("shutdown", json!({})),
            ("shutdown", serde_json::Value::Null),
            ("session.new", json!({"project": "p", "engine": "command"})),
            ("prompt.send", json!({"session": "s", "text": "hi"})),
            ("session.steer", json!({"session": "s", "text": "hi"})),
            ("driver.claim", json!({"session": "s", "take_over": true})),
            ("session.merge", json!({"session": "s"})),
            // Not known whether it has a worktree: the worst.
            ("session.archive", json!({"session": "s"})),
            (
                "session.new",
                json!({"project": "p", "branch": "b", "base": "main"}),
            ),
            (
                "session.archive",
                json!({"session": "s", "discard_changes": true}),
            ),
            ("project.set", json!({"project": "p", "setup": "npm ci"})),
            (
                "project.set",
                json!({"project": "p", "worktrees_dir": "/x"}),
            ),
            (
                "project.set",
                json!({"project": "p", "isolation": "shared"}),
            ),
            (
                "project.add",
                json!({"name": "q", "path": "/", "setup": "make"}),
            ),
            (
                "settings.set",
                json!({"name": "worktrees.dir", "value": "/x"}),
            ),
        ] {
            assert!(
                widens(method, params.clone()).is_some(),
                "{method} {params}"
            );
        }
        // Narrowing, and everything else, is allowed.
        for (method, params) in [
            ("project.set", json!({"project": "p", "full_access": false})),
            ("project.set", json!({"project": "p", "remote": true})),
            (
                "project.set",
                json!({"project": "p", "keep_background": false}),
            ),
            ("project.set", json!({"project": "p", "model": "m"})),
            ("settings.set", json!({"name": "slots.total", "value": "1"})),
            ("group.set", json!({"name": "deploy"})),
            ("group.set", json!({"name": "deploy", "locking": true})),
            ("session.new", json!({"project": "p"})),
            ("session.new", json!({"project": "p", "engine": ""})),
            ("driver.claim", json!({"session": "s"})),
            ("session.rename", json!({"session": "s", "title": "t"})),
            ("project.archive", json!({"project": "p"})),
            ("project.show", json!({"project": "p"})),
            ("project.set", json!({"project": "p", "setup": ""})),
            ("project.set", json!({"project": "p", "worktrees_dir": ""})),
            (
                "project.set",
                json!({"project": "p", "isolation": "worktree"}),
            ),
            ("session.diff", json!({"session": "s", "stat": true})),
            ("session.recreate", json!({"session": "s"})),
            ("status", json!({})),
            // Not served, or not decoded: it fails on its own.
            ("no.such", json!({"full_access": true})),
            (
                "project.archive",
                json!({"project": "p", "full_access": true}),
            ),
        ] {
            assert_eq!(widens(method, params.clone()), None, "{method} {params}");
        }
    }
    #[test]
    fn a_stranger_is_not_a_run() {
        let runs = [run(999_999, "r1")];
        assert_eq!(find(std::process::id() as i32, &runs), None);
        assert_eq!(find(0, &runs), None);
        assert_eq!(find(std::process::id() as i32, &[]), None);
    }

    #[test]
    fn the_run_id_in_an_ancestors_environment_names_the_run() {
        // A child whose environment names a live run, and whose pid is not the run's. It
        // says it is ready once it runs, then waits on its stdin without another exec (while
        // a process execs, its `/proc/PID/environ` can read empty).
        let mut child = Command::new("sh")
            .args(["-c", "echo ready; read _"])
            .env(crate::env::RUN_ID, "r2")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let runs = [run(999_998, "r2")];
        let found = find(child.id() as i32, &runs);
        // A run whose pid is not stored yet (the engine being spawned) is found the same way,
        // and its pid 0 matches no process's ancestry or group.
        let spawning = find(child.id() as i32, &[run(0, "r2")]);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            found.map(|o| (o.run_id, o.found_by)),
            Some(("r2".into(), "environment"))
        );
        assert_eq!(
            spawning.map(|o| (o.run_id, o.found_by)),
            Some(("r2".into(), "environment"))
        );
        assert_eq!(find(std::process::id() as i32, &[run(0, "r3")]), None);
    }

    #[test]
    fn a_setup_commands_processes_are_held_to_a_runs_rules() {
        // A grandchild of a shell that carries the setup's mark, with no live run at all.
        let mut child = Command::new("sh")
            .args(["-c", "sh -c 'echo ready; read _'"])
            .env(crate::env::SETUP_SESSION, "s1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let found = find(child.id() as i32, &[]);
        let found_with_runs = find(child.id() as i32, &[run(999_997, "r3")]);
        let _ = child.kill();
        let _ = child.wait();
        for found in [found, found_with_runs] {
            assert_eq!(
                found.map(|o| (o.session_id, o.found_by)),
                Some((Some("s1".into()), "environment"))
            );
        }
        assert_eq!(find(std::process::id() as i32, &[]), None);
    }
}
