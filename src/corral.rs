//! [`Corral`]: the supervisor as a library. It starts the actors inside the caller's actix
//! system and offers typed calls: add a project, open a session, send a prompt, cancel it,
//! follow the events, change a setting (the crate's documentation shows it at work).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::actors::due::DueHandle;
use crate::actors::ledger::{
    AnswerApproval, CancelPrompt, ChangeProject, ChangeSession, ClaimDriver, CompleteExec,
    CreateProject, CreateSession, EnqueuePrompt, ForgetNewSession, LedgerError, LedgerHandle,
    RecordExec, ReleaseDriver, SaveAppServer, SetGroupLocking, SetSetting, WaveNamed,
};
use crate::actors::publisher::Published;
use crate::actors::shared::{slot_limits, Shared};
use crate::actors::slots::SlotsHandle;
use crate::actors::supervisor::SupervisorHandle;
use crate::actors::worktree;
use crate::engine::EngineKind;
use crate::events::{EventKind, Payload};
use crate::home::DaemonLock;
use crate::store::drivers::{ClaimRefused, DriverClaim};
use crate::store::events::Event;
use crate::store::exec::{Exec, ExecCompletion, NewExec};
use crate::store::location::Location;
use crate::store::pauses::{Pause, PauseScope, PausedBy};
use crate::store::projects::{Isolation, NewProject, Project, ProjectChange};
use crate::store::prompts::{CancelFound, ClaimBy, Enqueued, NewPrompt, NotQueued, Prompt};
use crate::store::runs::Recovered;
use crate::store::sessions::{NewSession, Session, WorktreeState};
use crate::store::settings::{self, Settings};
use crate::store::sql::{self, args, Conn};
use crate::store::{self, Compatibility, ReaderPool, StoreError};
use crate::store::{approvals, drivers, events, processes, projects, prompts, sessions};

mod schedules;
pub use schedules::{ScheduleRequest, ScheduleTarget};

/// What went wrong below a library call, kept whole (its `source()` chain, and its type for a
/// `downcast_ref`), or a message where nothing below failed.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

/// Errors of the library calls, each one line a user can act on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CorralError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// The store failed (or the supervisor stopped): the cause says how.
    #[error(transparent)]
    Store(Cause),
    /// The store could not take the write for `store.lock_timeout_ms` (another writer held
    /// its lock, its server could not be reached or refused writes): nothing was written, and
    /// the same call may succeed later.
    #[error(transparent)]
    Locked(Cause),
    /// The approval was answered already: the first answer stands (named in the message).
    #[error("{0}")]
    Answered(String),
    /// The sender's driver claim was taken over; this is the claim now.
    #[error("superseded by exec {}", .0.exec_id.as_deref().unwrap_or("(released)"))]
    Superseded(drivers::DriverClaim),
}

impl From<LedgerError> for CorralError {
    fn from(error: LedgerError) -> Self {
        if error.is_transient() {
            return CorralError::Locked(error.into());
        }
        CorralError::Store(error.into())
    }
}

impl From<crate::actors::asks::AskError> for CorralError {
    fn from(error: crate::actors::asks::AskError) -> Self {
        use crate::actors::asks::AskError;
        match error {
            AskError::NotFound(message) => CorralError::NotFound(message),
            AskError::Invalid(message) => CorralError::Invalid(message),
            AskError::Store(message) => CorralError::Store(message.into()),
            AskError::Locked(message) => CorralError::Locked(message.into()),
        }
    }
}

impl From<StoreError> for CorralError {
    fn from(error: StoreError) -> Self {
        if error.is_transient() {
            return CorralError::Locked(error.into());
        }
        CorralError::Store(error.into())
    }
}

/// Refuses a policy the engine cannot honour (`ask` where it cannot ask a person), or `full`
/// without the project's grant, in one line.
fn refuse_policy(
    engine: EngineKind,
    policy: crate::engine::Policy,
    granted: bool,
) -> Result<(), CorralError> {
    use crate::engine::Policy;
    match policy {
        Policy::Ask => match engine.cannot_ask() {
            Some(why) => Err(CorralError::Invalid(format!(
                "policy 'ask' on {engine}: {why}"
            ))),
            None => Ok(()),
        },
        Policy::Full if !granted => Err(CorralError::Invalid(
            "policy 'full' is a project's grant: corral project set PROJECT --policy full".into(),
        )),
        _ => Ok(()),
    }
}

/// One line naming an approval's first answer.
fn answered_already(approval: &approvals::Approval) -> String {
    let by = match approval.answered_by {
        Some(approvals::AnsweredBy::Person) => "by a person",
        Some(approvals::AnsweredBy::SessionRule) => "by a decision kept for the session",
        Some(approvals::AnsweredBy::Timeout) => "by approvals.timeout_s",
        Some(approvals::AnsweredBy::RunEnded) => "when its run ended",
        None => "",
    };
    let mut line = format!(
        "approval {} was {} already {by}",
        approval.id,
        approval.status.as_str()
    );
    if let Some(reason) = &approval.answer_reason {
        line.push_str(&format!(" ({reason})"));
    }
    line
}

fn full_not_granted(project: &str) -> String {
    format!(
        "policy 'full' is a project's grant, and project '{project}' has none: corral project \
         set {project} --policy full"
    )
}

/// How to start a [`Corral`].
#[derive(Debug, Clone)]
pub struct CorralOptions {
    /// The home (the store lives in it; engine children get it as `CORRAL_HOME`).
    pub home: PathBuf,
    /// The exec hosting the supervisor (default parent of the agents' own `corral` calls).
    pub exec_id: Option<String>,
    /// The caller already checked the store's header (`store::inspect`) before it opened any
    /// connection to it. Checking again would open and close a plain descriptor on a file
    /// this process holds SQLite locks on, and closing any descriptor of a file drops every
    /// POSIX lock the process holds on it: SQLite's included.
    pub store_checked: bool,
}

/// The id of the PostgreSQL store at `location` as its `corral_meta` holds it, read with
/// `SELECT`s only: `None` for the SQLite file, a database with no store yet, or one that is not
/// a store (the ledger refuses it, in its own words).
fn stored_id(location: &Location) -> Result<Option<String>, CorralError> {
    use crate::store::postgres::{self, Found};
    if !location.is_postgres() {
        return Ok(None);
    }
    let conn = store::open_read(location)?;
    match postgres::inspect(&conn).map_err(StoreError::from)? {
        Found::Store { version } if version >= 1 => Ok(conn
            .opt_row(
                "SELECT value FROM corral_meta WHERE key = 'store_id'",
                crate::store::sql::args![],
                |row| row.get::<String>(0),
            )
            .map_err(StoreError::from)?),
        _ => Ok(None),
    }
}

impl CorralOptions {
    pub fn new(home: impl Into<PathBuf>) -> Self {
        CorralOptions {
            home: home.into(),
            exec_id: None,
            store_checked: false,
        }
    }
}

/// The supervisor's handle. Cheap to clone; needs a running actix system.
#[derive(Clone)]
pub struct Corral {
    shared: Arc<Shared>,
    supervisor: SupervisorHandle,
    /// Claims the prompts queued to start later when their time comes.
    due: DueHandle,
    /// What boot reconciliation found.
    recovered: Arc<Recovered>,
    /// What the boot's check of a SQLite file found (`store::check_integrity`).
    checked: Option<Arc<str>>,
    /// The home's lock (`HOME/daemon.lock`), held while any handle lives: one supervisor
    /// per home, daemon or library.
    _lock: Arc<DaemonLock>,
    /// On a shared store, the listener of the store's notices (work to claim, other daemons'
    /// events): dropped with the last handle.
    _listener: Arc<Option<crate::store::listen::Listener>>,
}

/// An archived project takes no new session and no prompt, as an archived session takes no
/// prompt (the same error: a request a person can act on, not a missing record).
fn refuse_archived_project(project: &Project) -> Result<(), CorralError> {
    match project.archived_at {
        Some(_) => Err(CorralError::Invalid(format!(
            "project '{}' is archived",
            project.name
        ))),
        None => Ok(()),
    }
}

/// The slot limits the settings ask for.
/// The program the lease guard runs as (`corral __lease-guard`): `CORRAL_GUARD_PROGRAM`, else
/// this binary when it is corral. A program embedding the library elsewhere names it, or runs
/// without a guard (its engines then outlive it if it is killed: said in one log line).
fn guard_program() -> Option<PathBuf> {
    if let Some(program) = std::env::var_os(crate::env::GUARD_PROGRAM).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(program));
    }
    let exe = std::env::current_exe().ok()?;
    if exe.file_name().is_some_and(|name| name == "corral") {
        return Some(exe);
    }
    tracing::warn!(
        program = %exe.display(),
        "no lease guard (set CORRAL_GUARD_PROGRAM to the corral binary): engines outlive this process if it is killed"
    );
    None
}

impl Corral {
    /// Takes the home's lock (`HOME/daemon.lock`, the one a daemon holds), opens (creating and
    /// migrating) the store in `options.home`, starts the ledger, the slot manager and the
    /// supervisor, and resumes what a previous supervisor left.
    ///
    /// Refused, with nothing touched, when the store is not one this binary may use (the same
    /// check every `corral` command takes) and when another supervisor — a daemon, or another
    /// program embedding corral — serves the home: its boot reconciliation would end that
    /// supervisor's runs. The error names the pid that holds the lock.
    pub async fn start(options: CorralOptions) -> Result<Corral, CorralError> {
        Self::start_with(None, options).await
    }

    /// [`Corral::start`] for a caller that already holds the home's lock (the daemon takes it
    /// before it touches the socket): the supervisor holds it from now on.
    pub async fn start_holding(
        lock: DaemonLock,
        options: CorralOptions,
    ) -> Result<Corral, CorralError> {
        Self::start_with(Some(lock), options).await
    }

    async fn start_with(
        lock: Option<DaemonLock>,
        options: CorralOptions,
    ) -> Result<Corral, CorralError> {
        // The home's config names the store (`HOME/config`, `CORRAL_STORE_URL`), else the file.
        let location = store::location::locate(&options.home)
            .map_err(|error| CorralError::Store(error.into()))?;
        // Before the lock: a foreign store gets nothing, not even a lock file beside it. (A
        // PostgreSQL database is checked by the ledger's first connection, with nothing but
        // reads, before anything is written.)
        if let (false, Location::Sqlite(path)) = (options.store_checked, &location) {
            if let Compatibility::Incompatible(foreign) = store::inspect(path)? {
                return Err(CorralError::Store(store::refusal(path, foreign).into()));
            }
        }
        // A home of another user's is refused; a loose one is made private (the CLI has said
        // so already; a library's embedder reads the log).
        for note in crate::home::secure(&options.home).map_err(CorralError::Invalid)? {
            tracing::warn!("{note}");
        }
        let lock = match lock {
            Some(lock) => {
                let home = options.home.canonicalize().unwrap_or(options.home.clone());
                if lock.home() != home {
                    return Err(CorralError::Invalid(format!(
                        "the lock handed to the supervisor is {}'s, not {}'s",
                        lock.home().display(),
                        options.home.display()
                    )));
                }
                lock
            }
            None => DaemonLock::try_acquire(&options.home)
                .map_err(|error| CorralError::Store(error.into()))?,
        };
        // A home serves one store: its daemon is refused another database before anything is
        // written there (the check reads only).
        store::location::check_home(&options.home, &location, stored_id(&location)?.as_deref())
            .map_err(|error| CorralError::Store(error.into()))?;
        let (ledger, _) = LedgerHandle::start_at(&location, true).await?;
        // A damaged file is refused before anything runs on it: its first failing write
        // would otherwise fail a session's every prompt. Checked once migrated (the migration
        // reads what it changes).
        let checked = match &location {
            Location::Sqlite(path) => {
                let at = path.clone();
                let integrity = tokio::task::spawn_blocking(move || {
                    store::check_integrity(&at, store::INTEGRITY_CHECK_TIME)
                })
                .await
                .map_err(|error| CorralError::Store(error.into()))??;
                if let store::Integrity::Damaged(found) = &integrity {
                    return Err(CorralError::Store(store::damaged(path, found).into()));
                }
                if let store::Integrity::Unfinished(_) = &integrity {
                    tracing::warn!(%integrity, "the store was not checked");
                }
                Some(integrity.to_string())
            }
            Location::Postgres(_) => None,
        };
        // The writer checked the file is ours: a store left loose is made private.
        if let Location::Sqlite(path) = &location {
            for note in store::make_private(path) {
                tracing::warn!("{note}");
            }
        }
        let readers = ReaderPool::at(&location);
        if let Some(id) = stored_id(&location)? {
            store::location::bind_home(&options.home, &location, &id)
                .map_err(|error| CorralError::Store(error.into()))?;
        }
        let settings = readers.read(Settings::load)?;
        let slots = SlotsHandle::start(slot_limits(&settings));
        let home = options.home.canonicalize().unwrap_or(options.home);
        // On a shared store: registered (a new epoch, its lease taken) before boot, whose
        // reconciliation takes this node's own prompts again under it.
        let lease = match &location {
            Location::Postgres(url) => {
                let (url, at, length) = (url.clone(), home.clone(), settings.store_lease);
                let started = tokio::task::spawn_blocking(move || {
                    crate::lease::holder::Lease::start(&url, &at, guard_program(), length)
                })
                .await
                .map_err(|error| CorralError::Store(error.into()))?
                .map_err(|error| CorralError::Store(error.into()))?;
                ledger.set_node(&started.0.node_id);
                Some(started)
            }
            Location::Sqlite(_) => None,
        };
        let shared = Arc::new(Shared::new(
            home,
            ledger,
            slots,
            readers,
            settings,
            options.exec_id,
            lease.as_ref().map(|(lease, _)| lease.clone()),
        ));
        // The pauses in force hold the workers boot starts.
        shared
            .reload_pauses()
            .map_err(|error| CorralError::Store(error.into()))?;
        let supervisor = SupervisorHandle::start(shared.clone());
        let recovered = supervisor
            .boot()
            .await
            .map_err(|error| CorralError::Store(error.into()))?;
        // Worktrees a killed supervisor left half-made are finished (or left for the first
        // prompt to report).
        if !shared.coordination.shares_store() {
            // On a shared store a worktree being made may be another daemon's, now.
            actix::spawn(worktree::finish_creating(
                shared.worktrees(),
                shared.git.clone(),
            ));
        }
        let due = DueHandle::start(shared.clone(), supervisor.clone());
        let listener = match (&location, lease) {
            (Location::Postgres(url), Some((_, wanted))) => Some(crate::actors::claims::start(
                shared.clone(),
                supervisor.clone(),
                due.clone(),
                url,
                wanted,
            )),
            _ => None,
        };
        let corral = Corral {
            checked: checked.map(Arc::from),
            _listener: Arc::new(listener),
            shared,
            supervisor,
            due,
            recovered: Arc::new(recovered),
            _lock: Arc::new(lock),
        };
        corral.start_firing();
        Ok(corral)
    }

    /// What boot reconciliation found (runs closed as interrupted, sessions resumed).
    pub fn recovered(&self) -> &Recovered {
        &self.recovered
    }

    /// What the store is and whether it can be written now (see `LedgerHandle::store`).
    pub fn store(&self) -> crate::protocol::status::StoreStatus {
        let mut store = self.shared.ledger.store();
        store.checked = self.checked.as_deref().map(str::to_string);
        store
    }

    /// Runs `read` on a read-only connection to the store, whichever store it is. The
    /// crate's own read model (the method handlers, `cli::local`) and the tests use it; an
    /// embedder reads through the typed calls, so it is not part of the library's interface
    /// (the store's types are private). `FnMut`: on PostgreSQL a read whose pooled connection
    /// the server had ended is made once more on a new one.
    #[cfg(not(any(test, feature = "testkit")))]
    pub(crate) fn read<T>(
        &self,
        read: impl FnMut(&Conn) -> sql::Result<T>,
    ) -> Result<T, CorralError> {
        self.read_store(read)
    }

    /// [`Corral::read`] as the tests see it: public with the `testkit` feature, so that a test
    /// checks a row by the store's own reads.
    #[cfg(any(test, feature = "testkit"))]
    #[doc(hidden)]
    pub fn read<T>(&self, read: impl FnMut(&Conn) -> sql::Result<T>) -> Result<T, CorralError> {
        self.read_store(read)
    }

    fn read_store<T>(&self, read: impl FnMut(&Conn) -> sql::Result<T>) -> Result<T, CorralError> {
        Ok(self.shared.readers.read(read)?)
    }

    /// Adds a project. Its path must be an existing directory; it is stored canonical. Its
    /// isolation is the one asked for, else `worktree` when the path is in a git repository
    /// with a commit and git 2.17+ is found, else `shared`; `worktree` asked for where it
    /// cannot work is refused in one line (git's own words where they help). The repository's
    /// top level is recorded whenever worktree isolation could work there, whichever is asked.
    pub async fn add_project(&self, mut project: NewProject) -> Result<Project, CorralError> {
        if project.name.trim().is_empty() {
            return Err(CorralError::Invalid("a project needs a name".into()));
        }
        let path = Path::new(&project.path);
        if !path.is_dir() {
            return Err(CorralError::Invalid(format!(
                "project path {} is not an existing directory",
                path.display()
            )));
        }
        project.path = path
            .canonicalize()
            .map_err(|error| CorralError::Invalid(format!("{}: {error}", path.display())))?
            .to_string_lossy()
            .into_owned();
        let kind = project.engine.unwrap_or_default();
        refuse_policy(kind, project.policy, project.full_access)?;
        let repository = self.worktree_repository(Path::new(&project.path)).await;
        project.isolation = Some(match (project.isolation, &repository) {
            (Some(Isolation::Worktree), Err(why)) => return Err(CorralError::Invalid(why.clone())),
            (Some(isolation), _) => isolation,
            (None, Ok(_)) => Isolation::Worktree,
            (None, Err(_)) => Isolation::Shared,
        });
        project.repo_root = match &repository {
            Ok(toplevel) => Some(toplevel.to_string_lossy().into_owned()),
            Err(_) => None,
        };
        project.worktrees_dir = match project.worktrees_dir.as_deref() {
            Some(dir) => worktrees_dir(dir)?,
            None => None,
        };
        project.setup = project.setup.filter(|setup| !setup.trim().is_empty());
        let exists = self.read(|connection| {
            Ok(projects::projects(connection)?
                .into_iter()
                .any(|known| known.name == project.name))
        })?;
        let name = project.name.clone();
        let taken = || CorralError::Invalid(format!("a project named '{name}' exists already"));
        if exists {
            return Err(taken());
        }
        let created = self
            .shared
            .ledger
            .write(CreateProject { project })
            .await?
            .ok_or_else(taken)?;
        self.shared.coordination.projects_changed();
        Ok(created)
    }

    /// Changes a project's settings (or archives it). Worktree isolation is refused, with
    /// one line, when the project's path is not in a git repository with a commit or no
    /// usable git is found; a worktrees directory must be absolute (`""` clears it, and the
    /// setup command).
    pub async fn change_project(
        &self,
        id: &str,
        mut change: ProjectChange,
    ) -> Result<Project, CorralError> {
        let project = self
            .read(|connection| projects::project(connection, id))?
            .ok_or_else(|| CorralError::NotFound(format!("no project '{id}'")))?;
        let engine = change.engine.or(project.engine).unwrap_or_default();
        // The policy the change leaves, as the store makes it (`projects::change_project`).
        let policy = match (change.full_access, change.policy) {
            (Some(true), _) => crate::engine::Policy::Full,
            (_, Some(policy)) => policy,
            (Some(false), None) if project.policy == crate::engine::Policy::Full => {
                crate::engine::Policy::WorkspaceWrite
            }
            (_, None) => project.policy,
        };
        let full = change.full_access.unwrap_or(project.full_access);
        refuse_policy(engine, policy, full)?;
        if change.isolation == Some(Isolation::Worktree) {
            let toplevel = self
                .worktree_repository(Path::new(&project.path))
                .await
                .map_err(CorralError::Invalid)?;
            change.repo_root = Some(toplevel.to_string_lossy().into_owned());
        }
        change.worktrees_dir = match change.worktrees_dir {
            Some(Some(dir)) => Some(worktrees_dir(&dir)?),
            other => other,
        };
        change.setup = change
            .setup
            .map(|setup| setup.filter(|setup| !setup.trim().is_empty()));
        let changed = self
            .shared
            .ledger
            .write(ChangeProject {
                id: id.to_string(),
                change,
            })
            .await?
            .ok_or_else(|| CorralError::NotFound(format!("no project '{id}'")))?;
        self.shared.coordination.projects_changed();
        Ok(changed)
    }

    /// The top level of the git repository holding `path`, when worktree isolation can work
    /// there (git found, `path` in a repository with a commit); else the line saying why not.
    async fn worktree_repository(&self, path: &Path) -> Result<PathBuf, String> {
        let git = self.git().await.map_err(|error| error.to_string())?;
        let repo = git
            .repo(path)
            .await
            .map_err(|error| error.to_string())?
            .ok_or_else(|| {
                format!(
                    "{} is not in a git repository: worktree isolation needs one (or \
                     --isolation shared)",
                    path.display()
                )
            })?;
        git.head(path).await.map_err(|error| match error {
            crate::git::GitError::NoCommit { .. } => format!(
                "{error}: worktree isolation branches from a commit (make one, or \
                 --isolation shared)"
            ),
            other => other.to_string(),
        })?;
        Ok(repo.toplevel)
    }

    /// Declares an execution group locking (its projects never run at once) or a label only.
    pub async fn set_group_locking(&self, name: &str, locking: bool) -> Result<(), CorralError> {
        Ok(self
            .shared
            .ledger
            .write(SetGroupLocking {
                name: name.to_string(),
                locking,
            })
            .await?)
    }

    /// Removes an execution group that no project is in (one with projects is refused,
    /// naming them).
    pub async fn remove_group(&self, name: &str) -> Result<(), CorralError> {
        let write = crate::actors::ledger::RemoveGroup {
            name: name.to_string(),
        };
        match self.shared.ledger.write(write).await? {
            projects::GroupRemoved::Removed => Ok(()),
            projects::GroupRemoved::Missing => Err(CorralError::NotFound(format!(
                "no execution group is named '{name}'"
            ))),
            projects::GroupRemoved::InUse(members) => Err(CorralError::Invalid(format!(
                "group '{name}' has projects ({}): take them out first (`project set PROJECT \
                 --group …` or `--no-groups`)",
                members.join(", ")
            ))),
        }
    }

    /// Pauses `scope` (`store::pauses`): none of its queued prompts starts a run until it is
    /// resumed, and a prompt of it waiting for a slot or a retry goes back to the head of its
    /// queue; `hard` (`--now`) interrupts its running prompts too, which go back the same
    /// way. A scope paused already stays as it was, only hardened by `hard`. Returns the
    /// pauses in force.
    pub async fn pause(
        &self,
        scope: PauseScope,
        by: PausedBy,
        hard: bool,
    ) -> Result<Vec<Pause>, CorralError> {
        let scope_made = scope.clone();
        let write = crate::actors::ledger::SetPause {
            scope,
            reason: by.reason().to_string(),
            hard,
        };
        let pauses = self.shared.ledger.write(write).await?;
        // The workers watch it: those it covers stop as it says.
        self.shared.pauses.replace(pauses.clone());
        // A person knows of their own pause; one an agent made is told.
        if by != PausedBy::Person {
            if let Some(pause) = pauses.iter().find(|pause| pause.scope == scope_made) {
                self.shared
                    .notifier
                    .notify(crate::actors::notifier::Notification::paused(pause, None));
            }
        }
        Ok(pauses)
    }

    /// Lifts the pause of `scope`: the prompts it held are claimed now (in the same write)
    /// and start as the slots allow. Returns whether it was paused, the prompts started and
    /// the pauses still in force (another may still hold the scope).
    pub async fn resume(
        &self,
        scope: PauseScope,
    ) -> Result<(bool, Vec<Prompt>, Vec<Pause>), CorralError> {
        let write = crate::actors::ledger::Fenced {
            claim: self.shared.coordination.fence(),
            write: crate::actors::ledger::LiftPause {
                scope,
                claimer: self.shared.coordination.claimer(),
                total: self
                    .settings()
                    .slots_total
                    .filter(|_| self.shared.coordination.with_others()),
            },
        };
        let (lifted, started, pauses) = self.shared.ledger.write(write).await?;
        self.shared.pauses.replace(pauses.clone());
        self.supervisor.dispatch_all(started.clone());
        // On a shared store the other queued heads are the claimer's.
        self.shared.coordination.wake_claimer();
        Ok((lifted, started, pauses))
    }

    /// How each notification channel that is on fares (`notify.*`).
    pub fn notify_status(&self) -> Vec<crate::protocol::status::NotifyChannel> {
        self.shared.notifier.status()
    }

    /// The pauses in force, oldest first.
    pub fn pauses(&self) -> Result<Vec<Pause>, CorralError> {
        self.read_store(store::pauses::pauses)
    }

    /// Every execution group, with the projects in it.
    pub fn groups(&self) -> Result<Vec<projects::Group>, CorralError> {
        self.read_store(projects::groups)
    }

    /// Opens a session in a project. The engine defaults to the project's, then `codex`.
    pub async fn open_session(&self, mut session: NewSession) -> Result<Session, CorralError> {
        let project_id = session.project_id.clone();
        let project = self
            .read(|connection| projects::project(connection, &project_id))?
            .ok_or_else(|| CorralError::NotFound(format!("no project '{project_id}'")))?;
        refuse_archived_project(&project)?;
        let kind = session.engine.or(project.engine).unwrap_or_default();
        session.engine = Some(kind);
        let template = &self.settings().command_template;
        let model = session.model.as_deref().or(project.model.as_deref());
        if let Some(why) = crate::engine::unsupported(kind, false, model, false, template) {
            return Err(CorralError::Invalid(why));
        }
        let policy = session.policy.unwrap_or(project.default_policy());
        refuse_policy(kind, policy, project.full_access)?;
        if kind == crate::engine::EngineKind::CodexAppServer && !session.env.is_empty() {
            // Its turns run in the project's one app-server child, started before it.
            return Err(CorralError::Invalid(format!(
                "a codex-app-server session runs in its project's app-server, which has the                  project's variables only: set them on the project (corral project set {}                  --env NAME=VALUE)",
                project.name
            )));
        }
        if project.isolation == Isolation::Worktree {
            return self.open_worktree_session(session, &project).await;
        }
        if session.branch.is_some() || session.base.is_some() {
            return Err(CorralError::Invalid(format!(
                "--branch and --base need a worktree project: project '{}' shares one working \
                 tree (isolation shared)",
                project.name
            )));
        }
        session.worktree = None;
        Ok(self.shared.ledger.write(CreateSession { session }).await?)
    }

    /// A worktree project's session: its id first (the worktree is named after it), the
    /// worktree planned, the session stored with it `creating` (one write: a daemon killed
    /// from here on leaves a row saying what to finish), then made. A worktree that could not
    /// be made leaves nothing: git's own failure is undone by the git layer and the row is
    /// deleted again. Only when a worktree is on disk (its state could not be recorded) is
    /// the row kept `creating`, for the session's first prompt to finish.
    async fn open_worktree_session(
        &self,
        mut session: NewSession,
        project: &Project,
    ) -> Result<Session, CorralError> {
        let git = self
            .git()
            .await
            .map_err(|error| CorralError::Invalid(error.to_string()))?;
        let id = session
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let planned = worktree::plan(
            &git,
            &self.settings(),
            self.home(),
            project,
            &id,
            session.title.as_deref(),
            session.branch.as_deref(),
            session.base.as_deref(),
        )
        .await?;
        let path = PathBuf::from(&planned.path);
        session.id = Some(id.clone());
        session.worktree = Some(planned);
        // On a shared store the worktree is this host's: its prompts run here only.
        session.worktree_node = self.shared.coordination.node_id().map(str::to_string);
        let opened = self.shared.ledger.write(CreateSession { session }).await?;
        let error = match worktree::make(&git, &self.shared.worktrees(), &opened, project).await {
            Ok(made) => return Ok(made),
            Err(error) => error,
        };
        if std::fs::symlink_metadata(&path).is_err() {
            let forget = ForgetNewSession {
                session_id: id.clone(),
            };
            if let Ok(true) = self.shared.ledger.write(forget).await {
                return Err(error.into());
            }
        }
        Err(CorralError::Invalid(format!(
            "{error} (session {id} is kept, its worktree `creating`: its first prompt makes it)"
        )))
    }

    /// Queues a prompt. It is refused before queueing when empty, when an image does not
    /// exist, or when the session does not. The answer says `running` (the session was free
    /// and its worker starts now) or `queued`.
    pub async fn send(&self, prompt: NewPrompt) -> Result<Enqueued, CorralError> {
        let prompt = self.checked_prompt(prompt)?;
        let session_id = prompt.session_id.clone();
        let (session, project) = self
            .read(|connection| sessions::session_and_project(connection, &session_id))?
            .ok_or_else(|| CorralError::NotFound(format!("no session '{session_id}'")))?;
        self.enqueue_on(session, project, prompt).await
    }

    /// [`Corral::send`] to a session the caller has just read, and its project when read too
    /// (the daemon's `prompt.send` read both to check the request): they are not read again.
    pub async fn send_to(
        &self,
        session: Session,
        project: Option<Project>,
        mut prompt: NewPrompt,
    ) -> Result<Enqueued, CorralError> {
        prompt.session_id = session.id.clone();
        let prompt = self.checked_prompt(prompt)?;
        self.enqueue_on(session, project, prompt).await
    }

    /// The prompt's own checks: its text, and its images (made absolute).
    fn checked_prompt(&self, mut prompt: NewPrompt) -> Result<NewPrompt, CorralError> {
        if prompt.text.trim().is_empty() {
            return Err(CorralError::Invalid("the prompt is empty".into()));
        }
        // What the protocol could not carry in one line is refused here too (one line, naming
        // the limit), so that the library and the daemon take the same prompts.
        crate::protocol::check_prompt_size(&prompt.text).map_err(CorralError::Invalid)?;
        if let Some(at) = prompt.due_at {
            // A second's grace: the time a sender took to say "now".
            if at < crate::store::now_ms() - 1_000 {
                return Err(CorralError::Invalid(format!(
                    "the prompt would be due in the past ({})",
                    crate::clock::utc_time(at)
                )));
            }
        }
        let mut images = Vec::with_capacity(prompt.images.len());
        for image in &prompt.images {
            let path = Path::new(image);
            if !path.is_file() {
                return Err(CorralError::Invalid(format!("image not found: {image}")));
            }
            let canonical = path
                .canonicalize()
                .map_err(|error| CorralError::Invalid(format!("{image}: {error}")))?;
            images.push(canonical.to_string_lossy().into_owned());
        }
        prompt.images = images;
        Ok(prompt)
    }

    /// Queues `prompt` on `session`, whose project is `known` when the caller read it.
    async fn enqueue_on(
        &self,
        session: Session,
        known: Option<Project>,
        prompt: NewPrompt,
    ) -> Result<Enqueued, CorralError> {
        let session_id = session.id.clone();
        if session.archived_at.is_some() {
            return Err(CorralError::Invalid(format!(
                "session '{session_id}' is archived"
            )));
        }
        // What the engine cannot do is said now, not found out by the run.
        let kind = session.engine;
        let project = match (&session.project_id, known) {
            (Some(id), Some(project)) if &project.id == id => Some(project),
            (Some(id), _) => self.read(|connection| projects::project(connection, id))?,
            (None, _) => None,
        };
        if let Some(project) = &project {
            refuse_archived_project(project)?;
        }
        let settings = self.settings();
        let project_model = project.as_ref().and_then(|project| project.model.clone());
        let model = session.model.as_deref().or(project_model.as_deref());
        if let Some(why) = crate::engine::unsupported(
            kind,
            !prompt.images.is_empty(),
            model,
            prompt.read_only,
            &settings.command_template,
        ) {
            return Err(CorralError::Invalid(why));
        }
        if let Some(project) = &project {
            let policy = project.policy_for(session.policy, prompt.policy, prompt.read_only);
            refuse_policy(kind, policy, project.full_access)?;
            if prompt.policy == Some(crate::engine::Policy::Full) && !project.full_access {
                return Err(CorralError::Invalid(full_not_granted(&project.name)));
            }
        }
        crate::engine::resolve_program(kind, &settings.engine_paths)
            .map_err(CorralError::Invalid)?;
        let enqueued = self
            .shared
            .ledger
            .write(EnqueuePrompt {
                claimer: self.claimer_for(project.as_ref(), &session),
                // Across daemons; a daemon alone on its store queues for the total itself.
                total: settings
                    .slots_total
                    .filter(|_| self.shared.coordination.with_others()),
                prompt,
            })
            .await?
            .map_err(|refused| match refused {
                NotQueued::Superseded(claim) => CorralError::Superseded(claim),
                NotQueued::After(why) => CorralError::Invalid(why),
            })?;
        if let Some(at) = enqueued
            .prompt
            .due_at
            .filter(|_| enqueued.started.is_none())
        {
            self.due.queued(at);
        }
        if let Some(started) = enqueued.started.clone() {
            self.supervisor.dispatch(started);
        } else if let Some(project) = project
            .as_ref()
            .filter(|_| self.shared.coordination.shares_store())
        {
            self.tell_if_unserved(&enqueued.prompt, project, &session)
                .await;
        }
        Ok(enqueued)
    }

    /// On a shared store, a prompt left queued whose project no live daemon serves waits
    /// for one that does (started with its path there): told in its session's events, so a
    /// person sees why it does not start.
    async fn tell_if_unserved(&self, prompt: &Prompt, project: &Project, session: &Session) {
        // Only a session in a worktree has one on some host; a path that is a directory here
        // is served by this daemon (both looked at before any read: most prompts queue
        // behind their session's running one).
        let in_worktree = session.worktree.is_some();
        let reason = match in_worktree
            .then(|| self.worktree_unserved(&prompt.session_id))
            .flatten()
        {
            Some(reason) => reason,
            None => {
                if Path::new(&project.path).is_dir() {
                    return;
                }
                let served = self
                    .read(|c| crate::store::daemons::served_by_anyone(c, &project.id))
                    .unwrap_or(true);
                if served {
                    return;
                }
                format!(
                    "no live daemon serves project {}: its path {} is a directory on no live daemon's host",
                    project.name, project.path
                )
            }
        };
        let unserved = crate::events::PromptUnserved {
            project: project.name.clone(),
            path: project.path.clone(),
            reason,
        };
        let event = events::NewEvent::new(
            prompt.session_id.clone(),
            Some(prompt.id.clone()),
            None,
            Payload::PromptUnserved(unserved),
        );
        if let Err(error) = self.shared.publisher.append_events(vec![event]).await {
            tracing::warn!(%error, "prompt.unserved not stored");
        }
    }

    /// Why a session whose worktree another daemon made waits: that daemon holds no lease.
    fn worktree_unserved(&self, session_id: &str) -> Option<String> {
        let this_node = self.shared.coordination.node_id()?;
        let (node, host) = self
            .read(|c| sessions::worktree_node(c, session_id))
            .ok()??;
        let live = self
            .read(crate::store::daemons::daemons)
            .ok()?
            .into_iter()
            .any(|daemon| daemon.node_id == node && daemon.is_live());
        (node != this_node && !live).then(|| {
            format!(
                "its worktree is on host {} (daemon {node}), whose daemon holds no lease: the prompt waits for it",
                host.as_deref().unwrap_or("unknown")
            )
        })
    }

    /// Refuses to touch a worktree another daemon's host has (a shared store): its directory
    /// is there, so that daemon archives, diffs, merges and makes it again.
    fn refuse_worktree_elsewhere(&self, session: &Session, doing: &str) -> Result<(), CorralError> {
        if !self.shared.coordination.shares_store() {
            return Ok(());
        }
        let Some((node, host)) = self.read(|c| sessions::worktree_node(c, &session.id))? else {
            return Ok(());
        };
        if !self.shared.coordination.is_elsewhere(&node) {
            return Ok(());
        }
        Err(CorralError::Invalid(format!(
            "session {}'s worktree is on host {} (daemon {node}), not this one: {doing} is done by that host's corral",
            session.id,
            host.as_deref().unwrap_or("unknown"),
        )))
    }

    /// Who takes a prompt sent now if its session is free: on a shared store this daemon
    /// only when it serves the project (its path is a directory on this host), its lease
    /// holds and it has room for another run; else it stays queued for a daemon that can.
    fn claimer_for(&self, project: Option<&Project>, session: &sessions::Session) -> ClaimBy {
        let serves = || project.is_none_or(|project| Path::new(&project.path).is_dir());
        let has_room = || {
            let settings = self.settings();
            let limit = settings
                .slots_of(session.engine.as_str())
                .min(settings.slots_total.unwrap_or(usize::MAX));
            self.shared.life.working() < limit
        };
        self.shared
            .coordination
            .claimer_for_send(&serves, &has_room)
    }

    /// This daemon's lease on a shared store (`None` on SQLite).
    pub fn lease(&self) -> Option<&Arc<crate::lease::holder::Lease>> {
        self.shared
            .coordination
            .among_others()
            .map(|others| &others.lease)
    }

    /// Cancels a prompt: a queued one is removed at once; a running one is ended (its child's
    /// whole process group, or its wait for a slot or a retry).
    pub async fn cancel(&self, prompt_id: &str) -> Result<CancelFound, CorralError> {
        // On a shared store the heads a cancel lets go are the claims' to take: they know
        // which daemon serves each project and has room (this one may serve neither).
        let shared_store = self.shared.coordination.shares_store();
        let claimer = match shared_store {
            true => ClaimBy::Nobody,
            false => self.shared.coordination.claimer(),
        };
        let (found, released) = self
            .shared
            .ledger
            .write(CancelPrompt {
                prompt_id: prompt_id.to_string(),
                claimer,
            })
            .await?
            .ok_or_else(|| CorralError::NotFound(format!("no prompt '{prompt_id}'")))?;
        // What ran after a queued prompt: failed with it, or (`--after-any`) free to run.
        if !released.told.is_empty() {
            self.shared.publisher.publish(released.told);
        }
        self.supervisor.dispatch_all(released.started);
        if released.unclaimed || (shared_store && matches!(found, CancelFound::Dequeued { .. })) {
            self.shared.coordination.wake_claimer();
        }
        match &found {
            CancelFound::Running { session_id } => self
                .supervisor
                .cancel_running(session_id.clone(), prompt_id.to_string()),
            // No worker ever had it, so none tells its end: told here, so that whoever waits
            // on it (`send --wait`, `prompt.wait`, the HTTP wait) wakes and lets its driver
            // claim go. A record that fails leaves the prompt cancelled all the same; a
            // waiter reads its status again on its next wake.
            CancelFound::Dequeued { session_id } => {
                let cancelled = crate::events::PromptEnded {
                    error: Some("cancelled while queued".into()),
                    ..Default::default()
                };
                let event = events::NewEvent::new(
                    session_id.clone(),
                    Some(prompt_id.to_string()),
                    None,
                    Payload::PromptCancelled(cancelled),
                );
                if let Err(error) = self.shared.publisher.append_events(vec![event]).await {
                    tracing::error!(%error, prompt_id, "the cancel of a queued prompt was not told");
                }
            }
            CancelFound::Finished { .. } => {}
        }
        Ok(found)
    }

    /// Runs a failed or cancelled prompt again in place (`corral retry`): the same prompt,
    /// back at the head of its session's queue, `text` replacing its text when given. Told
    /// with a `prompt.requeued` event. A prompt that was answered, or has not ended, is
    /// refused saying so.
    pub async fn retry(
        &self,
        prompt_id: &str,
        text: Option<String>,
    ) -> Result<Prompt, CorralError> {
        if let Some(text) = &text {
            crate::protocol::check_prompt_size(text).map_err(CorralError::Invalid)?;
        }
        let found = self
            .prompt(prompt_id)?
            .ok_or_else(|| CorralError::NotFound(format!("no prompt '{prompt_id}'")))?;
        let (session, project) = self
            .read_store(|c| sessions::session_and_project(c, &found.session_id))?
            .ok_or_else(|| CorralError::NotFound(format!("no session '{}'", found.session_id)))?;
        if session.archived_at.is_some() {
            return Err(CorralError::Invalid(format!(
                "session '{}' is archived: send the prompt to another session",
                session.id
            )));
        }
        let settings = self.settings();
        let write = crate::actors::ledger::Fenced {
            claim: self.shared.coordination.fence(),
            write: crate::actors::ledger::RetryPrompt {
                prompt_id: found.id.clone(),
                text,
                claimer: self.claimer_for(project.as_ref(), &session),
                total: settings
                    .slots_total
                    .filter(|_| self.shared.coordination.with_others()),
            },
        };
        let (again, started) = self.shared.ledger.write(write).await?.map_err(|status| {
            CorralError::Invalid(match status {
                prompts::PromptStatus::Done => format!(
                    "prompt {} was answered: send it again to ask again",
                    found.id
                ),
                other => format!(
                    "prompt {} is {}: only a failed or cancelled prompt runs again",
                    found.id,
                    other.as_str()
                ),
            })
        })?;
        let told = events::NewEvent::new(
            again.session_id.clone(),
            Some(again.id.clone()),
            None,
            Payload::PromptRequeued(crate::events::PromptRequeued {
                reason: "retried by a person".into(),
            }),
        );
        if let Err(error) = self.shared.publisher.append_events(vec![told]).await {
            tracing::warn!(%error, prompt_id, "the retry was not told");
        }
        if let Some(started) = started {
            self.supervisor.dispatch(started);
        }
        self.shared.coordination.wake_claimer();
        Ok(again)
    }

    /// Replaces the text of a prompt that is still queued (`corral prompt edit`).
    pub async fn edit_prompt(&self, prompt_id: &str, text: String) -> Result<Prompt, CorralError> {
        crate::protocol::check_prompt_size(&text).map_err(CorralError::Invalid)?;
        let write = crate::actors::ledger::EditPrompt {
            prompt_id: prompt_id.to_string(),
            text,
        };
        self.shared.ledger.write(write).await?.map_err(|status| {
            CorralError::Invalid(format!(
                "prompt {prompt_id} is {}: only a queued prompt is edited (its text reached \
                     the engine once it started)",
                status.as_str()
            ))
        })
    }

    /// An approval by its id or a unique prefix of it.
    pub fn approval(&self, selector: &str) -> Result<approvals::Approval, CorralError> {
        let selector = selector.trim();
        if selector.is_empty() {
            return Err(CorralError::Invalid("an approval id is empty".into()));
        }
        let found = self.read(|connection| approvals::by_prefix(connection, selector))?;
        match found.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(CorralError::NotFound(format!("no approval '{selector}'"))),
            _ => Err(CorralError::Invalid(format!(
                "approval '{selector}' is ambiguous: give more of its id"
            ))),
        }
    }

    /// Answers a pending approval, once: the store records the answer (with its
    /// `approval.answered`), then the run that waits for it is told. A second answer, or one
    /// to an approval that ended otherwise (its run ended, its timeout), is refused naming
    /// the first. `for_session` keeps the decision for the session's later requests of the
    /// same tool whose target matches `pattern` (default: this target exactly); a pattern
    /// that would match everything is refused.
    pub async fn answer_approval(
        &self,
        selector: &str,
        decision: approvals::Decision,
        reason: Option<String>,
        for_session: bool,
        pattern: Option<String>,
    ) -> Result<approvals::Approval, CorralError> {
        let approval = self.approval(selector)?;
        let pattern = match (for_session, pattern) {
            (false, Some(_)) => {
                return Err(CorralError::Invalid(
                    "a pattern is kept only for the session: give --for-session with it".into(),
                ))
            }
            (false, None) => None,
            (true, Some(pattern)) => {
                if let Some(why) = approvals::too_broad(&pattern) {
                    return Err(CorralError::Invalid(why));
                }
                Some(pattern)
            }
            (true, None) => Some(approval.target.clone().unwrap_or_default()),
        };
        if approval.status != approvals::ApprovalStatus::Pending {
            return Err(CorralError::Answered(answered_already(&approval)));
        }
        let write = AnswerApproval {
            id: approval.id.clone(),
            answer: approvals::Answer {
                decision,
                by: approvals::AnsweredBy::Person,
                reason: reason.filter(|reason| !reason.trim().is_empty()),
                pattern,
            },
        };
        let (answered, told) = self.shared.ledger.write(write).await?;
        self.shared.publisher.publish(told);
        match answered {
            approvals::Answered::Now(approval) => {
                self.supervisor.approval_answered(approval.clone());
                Ok(approval)
            }
            approvals::Answered::Before(first) => {
                Err(CorralError::Answered(answered_already(&first)))
            }
            approvals::Answered::NotFound => Err(CorralError::NotFound(format!(
                "no approval '{}'",
                approval.id
            ))),
        }
    }

    /// Whether any session has a worker running now (a prompt in a run, or waiting for
    /// one), read without asking the supervisor: from any thread, at no cost.
    pub fn any_working(&self) -> bool {
        self.shared.life.working() > 0
    }

    /// This daemon's node on a shared store (`None` on SQLite).
    pub fn node_id(&self) -> Option<&str> {
        self.shared.coordination.node_id()
    }

    /// Every event stored from now on, of every session (filter by `session_id`). A receiver
    /// that falls more than `EVENT_CHANNEL` behind gets `Lagged` and can read the rest from
    /// the store (`store::events::events_after`).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Published>> {
        self.shared.publisher.subscribe()
    }

    /// Waits until a prompt has ended (done, failed or cancelled) and returns it.
    pub async fn wait_prompt(&self, prompt_id: &str) -> Result<Prompt, CorralError> {
        let mut events = self.subscribe();
        loop {
            let prompt = self
                .read(|connection| prompts::prompt(connection, prompt_id))?
                .ok_or_else(|| CorralError::NotFound(format!("no prompt '{prompt_id}'")))?;
            if prompt.status.is_final() {
                return Ok(prompt);
            }
            // Wake on this prompt's end, or re-read after a lag.
            loop {
                match events.recv().await {
                    Ok(event)
                        if event.prompt_id.as_deref() == Some(prompt_id)
                            && (event.kind.ends_prompt()
                                || event.kind == EventKind::PromptRequeued) =>
                    {
                        break
                    }
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    Err(broadcast::error::RecvError::Closed) => {
                        return Err(CorralError::Store("the supervisor stopped".into()))
                    }
                }
            }
        }
    }

    /// Changes a setting (validated; `None` resets it). Slot limits apply at once, on every
    /// daemon of a shared store (`SetSetting` tells them).
    pub async fn set_setting(&self, name: &str, value: Option<&str>) -> Result<(), CorralError> {
        let value = match value {
            Some(value) => Some(settings::validate(name, value).map_err(CorralError::Invalid)?),
            None => None,
        };
        self.shared
            .ledger
            .write(SetSetting {
                name: name.to_string(),
                value,
            })
            .await?;
        self.shared
            .reload_settings()
            .await
            .map_err(|error| CorralError::Store(error.into()))
    }

    /// The settings in effect.
    pub fn settings(&self) -> Arc<Settings> {
        self.shared.settings()
    }

    /// Applies one ledger write: for tests that set up a record no call makes (the daemon's
    /// methods write through the typed calls only).
    #[cfg(test)]
    pub(crate) async fn write<W: crate::actors::ledger::LedgerWrite>(
        &self,
        write: W,
    ) -> Result<W::Output, CorralError> {
        Ok(self.shared.ledger.write(write).await?)
    }

    /// Records a client's exec (a command run outside the daemon: `corral send`, a driver).
    pub async fn record_exec(&self, exec: NewExec) -> Result<(), CorralError> {
        Ok(self.shared.ledger.write(RecordExec(exec)).await?)
    }

    /// Ends a client's exec recorded by [`Corral::record_exec`]: whether its row was still
    /// open.
    pub async fn complete_exec(
        &self,
        id: &str,
        completion: ExecCompletion,
    ) -> Result<bool, CorralError> {
        let id = id.to_string();
        Ok(self
            .shared
            .ledger
            .write(CompleteExec { id, completion })
            .await?)
    }

    /// The id of the wave called `name` (in the repository `repo`), made on first use.
    pub async fn name_wave(&self, name: &str, repo: Option<String>) -> Result<String, CorralError> {
        let name = name.to_string();
        Ok(self.shared.ledger.write(WaveNamed { name, repo }).await?)
    }

    /// Gives a session a person's title; `None`: the session is gone.
    pub async fn rename_session(
        &self,
        session_id: &str,
        title: &str,
    ) -> Result<Option<Session>, CorralError> {
        let change = ChangeSession {
            id: session_id.to_string(),
            title: Some(title.to_string()),
            policy: None,
            archive: false,
        };
        Ok(self.shared.ledger.write(change).await?)
    }

    /// Makes `exec_id` the driver of a session (`take_over`: even if another exec drives it);
    /// `is_live` tells whether a holder still runs (a dead one's claim is taken anyway).
    pub async fn claim_driver(
        &self,
        session_id: &str,
        exec_id: &str,
        take_over: bool,
        is_live: Box<dyn Fn(&str) -> bool + Send>,
    ) -> Result<Result<DriverClaim, ClaimRefused>, CorralError> {
        let claim = ClaimDriver {
            session_id: session_id.to_string(),
            exec_id: exec_id.to_string(),
            take_over,
            is_live,
        };
        Ok(self.shared.ledger.write(claim).await?)
    }

    /// Releases the driver claim of `generation` (a stale one changes nothing): the claim
    /// that stands after.
    pub async fn release_driver(
        &self,
        session_id: &str,
        generation: i64,
    ) -> Result<Option<DriverClaim>, CorralError> {
        let release = ReleaseDriver {
            session_id: session_id.to_string(),
            generation,
        };
        Ok(self.shared.ledger.write(release).await?)
    }

    /// A session's driver claim, if any.
    pub fn driver(&self, session_id: &str) -> Result<Option<DriverClaim>, CorralError> {
        self.read(|c| drivers::driver_claim(c, session_id))
    }

    /// A prompt by its id.
    pub fn prompt(&self, prompt_id: &str) -> Result<Option<Prompt>, CorralError> {
        self.read(|c| prompts::prompt(c, prompt_id))
    }

    /// A session's prompts, oldest first.
    pub fn prompts_of(&self, session_id: &str) -> Result<Vec<Prompt>, CorralError> {
        self.read(|c| prompts::prompts_of(c, session_id))
    }

    /// The stored value of a setting (`None`: its default applies).
    pub fn setting(&self, name: &str) -> Result<Option<String>, CorralError> {
        self.read(|c| Ok(settings::get(c, name)))
    }

    /// An exec of the ledger by its id.
    pub fn exec(&self, id: &str) -> Result<Option<Exec>, CorralError> {
        self.read(|c| store::exec::get(c, id))
    }

    /// What `overview` and the dashboard show: every session's state, the runs and gaps,
    /// the open execs.
    pub fn overview(&self) -> Result<store::overview::Overview, CorralError> {
        self.read(|c| store::overview::read(c, true))
    }

    /// A session's stored events numbered in `(after, before)`, at most `limit`, in order.
    pub fn events_between(
        &self,
        session_id: &str,
        after: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<Event>, CorralError> {
        self.read(|c| events::events_between(c, session_id, after, before, limit))
    }

    /// Every session's stored events with a feed number in `(after, before)`, at most
    /// `limit`, in the order they were stored.
    pub fn feed_between(
        &self,
        after: i64,
        before: i64,
        limit: usize,
    ) -> Result<Vec<Event>, CorralError> {
        self.read(|c| events::feed_between(c, after, before, limit))
    }

    /// A session's stored events after number `after`, at most `limit`, in order.
    pub fn events_after(
        &self,
        session_id: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Event>, CorralError> {
        self.read(|c| events::events_after(c, session_id, after, limit))
    }

    /// The slot manager's state: limits, running and waiting requests.
    pub async fn slots(&self) -> Option<crate::actors::slots::SlotSnapshot> {
        self.shared.slots.snapshot().await.ok()
    }

    /// The slot manager's state as `status` shows it: limits, what runs, how many wait and
    /// the first `first` waiters with what they wait for.
    pub async fn slot_summary(&self, first: usize) -> Option<crate::actors::slots::SlotSummary> {
        self.shared.slots.summary(first).await.ok()
    }

    /// Adds text to the turn running on a codex-app-server session (`turn/steer`). On a
    /// shared store a turn running on another daemon is steered by that daemon
    /// (`actors::asks`).
    pub async fn steer(
        &self,
        session_id: &str,
        text: &str,
    ) -> Result<crate::protocol::Steered, CorralError> {
        Ok(crate::actors::asks::steer(&self.shared, session_id, text).await?)
    }

    /// Compacts a codex-app-server session's thread context (`thread/compact/start`) and
    /// records what was compacted (exchanges and characters since the last compaction). When
    /// the thread's rollout is missing, the thread is reset instead (the next prompt starts a
    /// new one) and the answer says so. On a shared store the daemon that ran the session
    /// last, whose host holds the thread, does it.
    pub async fn compact(
        &self,
        session_id: &str,
    ) -> Result<crate::protocol::Compacted, CorralError> {
        Ok(crate::actors::asks::compact(&self.shared, session_id).await?)
    }

    /// The app-server children: live ones first, then what the store remembers of others.
    /// On a shared store each names its daemon's node, live or stored alike.
    pub async fn app_servers(&self) -> Vec<processes::AppServerState> {
        let mut states = Vec::new();
        for actor in self.shared.app_servers.all() {
            if let Some(state) = actor.snapshot().await {
                states.push(state.of_node(self.node_id()));
            }
        }
        let stored = self.read(processes::app_servers).unwrap_or_default();
        for state in stored {
            if !states
                .iter()
                .any(|live| live.project_id == state.project_id)
            {
                states.push(state);
            }
        }
        states
    }

    /// How many sessions have a worker running now.
    pub async fn working(&self) -> usize {
        self.supervisor.count_working().await
    }

    /// Hands the runs over and stops (`corral daemon restart`): at once, every run under a
    /// spooling shim is left running to its shim with what was read of it stored, and its
    /// prompt stays running, for the next supervisor of the home to adopt; the rest stops as
    /// [`Corral::shutdown`] with no grace stops it.
    pub async fn hand_over(&self) {
        self.shared.life.begin_handover();
        self.shutdown(Duration::ZERO).await;
    }

    /// Stops the supervisor's work: running prompts may finish for `grace`; then every child
    /// still running has its process group ended, its run closed as `interrupted` and its
    /// prompt requeued (it runs again, first, at the next start). Returns once every worker
    /// stopped (or after a bounded wait). Queued prompts stay queued.
    pub async fn shutdown(&self, grace: Duration) {
        self.shared.life.begin_drain();
        let mut working = self.shared.life.watch_working();
        let finish_by = tokio::time::Instant::now() + grace;
        // Woken as each worker ends: draining, a worker ends with its running prompt.
        let _ = tokio::time::timeout_at(finish_by, working.wait_for(|&count| count == 0)).await;
        self.shared.life.begin_shutdown();
        // A write waiting for a store another program locks comes back now, unapplied (after
        // the signal, so whoever gets it back sees the shutdown): its worker keeps its events
        // in the spill journal before the daemon exits.
        self.shared.ledger.stop_waiting();
        let stop_by =
            tokio::time::Instant::now() + self.settings().cancel_grace + Duration::from_secs(5);
        let _ = tokio::time::timeout_at(stop_by, working.wait_for(|&count| count == 0)).await;
        self.stop_app_servers().await;
        // The prompts were requeued: the lease is given up, so nobody waits for it to run
        // out before taking them. Not while a worker still runs (stuck in a write): then
        // the lease runs out by itself, and the guard ends what is still listed when this
        // process exits.
        if self.shared.coordination.shares_store() && self.shared.life.working() == 0 {
            let shared = self.shared.clone();
            let released = tokio::task::spawn_blocking(move || shared.coordination.release()).await;
            if let Err(error) = released {
                tracing::warn!(%error, "the lease was not given up; it runs out by itself");
            }
        }
    }

    /// Ends every project's app-server child (no turn runs any more) and stores the state it
    /// leaves, so that the next daemon shows it stopped by this shutdown rather than taking
    /// it for a child that died with its daemon.
    async fn stop_app_servers(&self) {
        let grace = self.settings().cancel_grace;
        for server in self.shared.app_servers.all() {
            let Some(state) = server.stop_child(grace).await else {
                continue;
            };
            let write = SaveAppServer {
                project_id: state.project_id.clone(),
                state: state.of_node(self.node_id()),
            };
            if let Err(error) = self.shared.ledger.write(write).await {
                tracing::error!(%error, "the stopped app-server's state was not stored");
            }
        }
    }

    /// The `git` worktree isolation uses (found once per supervisor, again after a failure).
    pub async fn git(&self) -> Result<crate::git::Git, crate::git::GitError> {
        self.shared.git.find().await
    }

    /// The home this supervisor runs in.
    pub fn home(&self) -> &Path {
        &self.shared.home
    }
}

/// A worktree session's operations: `session.archive`, `session.diff`, `session.merge`,
/// `session.recreate` (the git work is `actors::worktree`'s).
impl Corral {
    /// A session and its project, or `NotFound`.
    fn session_and_project(
        &self,
        session_id: &str,
    ) -> Result<(Session, Option<Project>), CorralError> {
        self.read(|connection| sessions::session_and_project(connection, session_id))?
            .ok_or_else(|| CorralError::NotFound(format!("no session '{session_id}'")))
    }

    /// A worktree session's project, or the line saying it has none.
    fn project_of(session: &Session, project: Option<Project>) -> Result<Project, CorralError> {
        project.ok_or_else(|| {
            CorralError::NotFound(format!("session '{}' has no project", session.id))
        })
    }

    /// Refuses what would touch a worktree a prompt of the session is using or about to use
    /// (`doing`: what was asked, for the line).
    fn refuse_busy(&self, session: &Session, doing: &str) -> Result<(), CorralError> {
        let busy = self.read(|connection| prompts::busy_prompt(connection, &session.id))?;
        match busy {
            Some(prompt) => Err(CorralError::Invalid(format!(
                "session {} has a prompt {} ({}) in its worktree: wait for it to end, or cancel \
                 it (corral cancel {}), before {doing}",
                session.id,
                prompt.status.as_str(),
                prompt.id,
                prompt.id
            ))),
            None => Ok(()),
        }
    }

    /// Archives a session. A worktree session's worktree goes too when it is clean (its
    /// branch stays); one with changes is `kept` (the session is archived all the same)
    /// unless `discard_changes`. An archived session may be archived again: with
    /// `discard_changes` that removes a kept worktree. Refused while a prompt of the session
    /// runs or waits and its worktree would be touched. Answers the session, and why its
    /// worktree was kept when it was (uncommitted changes, submodules, a HEAD off its branch…).
    pub async fn archive_session(
        &self,
        session_id: &str,
        discard_changes: bool,
    ) -> Result<(Session, Option<String>), CorralError> {
        let (session, project) = self.session_and_project(session_id)?;
        let touches = session.worktree.as_ref().is_some_and(|w| match w.state {
            WorktreeState::Removed => false,
            WorktreeState::Kept => discard_changes,
            _ => true,
        });
        if touches {
            self.refuse_worktree_elsewhere(&session, "archiving it")?;
            self.refuse_busy(&session, "archiving it")?;
        }
        let archived = self
            .shared
            .ledger
            .write(ChangeSession {
                id: session.id.clone(),
                title: None,
                policy: None,
                archive: true,
            })
            .await?
            .ok_or_else(|| CorralError::NotFound(format!("no session '{session_id}'")))?;
        let (Some(project), true) = (project, touches) else {
            return Ok((archived, None));
        };
        let not_removed = |error: String| {
            CorralError::Invalid(format!(
                "session {} is archived, but its worktree stays: {error}",
                archived.id
            ))
        };
        // A prompt sent between the check and the archive (an archived session takes none
        // from now on) keeps the worktree.
        self.refuse_busy(&archived, "archiving it again")
            .map_err(|error| not_removed(error.to_string()))?;
        let git = self.git().await.map_err(|e| not_removed(e.to_string()))?;
        worktree::archive(
            &git,
            &self.shared.worktrees(),
            &archived,
            &project,
            discard_changes,
        )
        .await
        .map(|done| (done.session, done.kept_because))
        .map_err(|error| match error {
            worktree::WorktreeError::Ledger(error) => error.into(),
            other => not_removed(other.to_string()),
        })
    }

    /// A worktree session's changes against its base commit (untracked files in), with the
    /// worktree they are of.
    pub async fn session_diff(
        &self,
        session_id: &str,
        stat: bool,
    ) -> Result<(sessions::SessionWorktree, crate::git::Diff), CorralError> {
        let (session, project) = self.session_and_project(session_id)?;
        let Some(worktree) = session.worktree.clone() else {
            return Err(worktree::no_worktree(&session).into());
        };
        let project = Self::project_of(&session, project)?;
        self.refuse_worktree_elsewhere(&session, "its diff")?;
        let git = self
            .git()
            .await
            .map_err(|error| CorralError::Invalid(error.to_string()))?;
        let diff = worktree::diff(&git, &session, &project, stat).await?;
        Ok((worktree, diff))
    }

    /// Merges a worktree session's branch into `into` (default: its base, when a branch),
    /// never in a person's checkout (see `git::Git::merge`). Refused while a prompt
    /// of the session runs or waits.
    pub async fn merge_session(
        &self,
        session_id: &str,
        into: Option<&str>,
        squash: bool,
    ) -> Result<(sessions::SessionWorktree, crate::git::Merged), CorralError> {
        let (session, project) = self.session_and_project(session_id)?;
        let Some(worktree) = session.worktree.clone() else {
            return Err(worktree::no_worktree(&session).into());
        };
        let project = Self::project_of(&session, project)?;
        self.refuse_worktree_elsewhere(&session, "merging it")?;
        self.refuse_busy(&session, "merging it")?;
        let git = self
            .git()
            .await
            .map_err(|error| CorralError::Invalid(error.to_string()))?;
        let merged = worktree::merge(
            &git,
            &self.shared.worktrees(),
            &session,
            &project,
            into,
            squash,
        )
        .await?;
        Ok((worktree, merged))
    }

    /// Makes a worktree deleted by hand again, on the session's branch; refused when its
    /// directory exists.
    pub async fn recreate_worktree(&self, session_id: &str) -> Result<Session, CorralError> {
        let (session, project) = self.session_and_project(session_id)?;
        if session.worktree.is_none() {
            return Err(worktree::no_worktree(&session).into());
        }
        let project = Self::project_of(&session, project)?;
        self.refuse_worktree_elsewhere(&session, "making it again")?;
        let git = self
            .git()
            .await
            .map_err(|error| CorralError::Invalid(error.to_string()))?;
        Ok(worktree::recreate(&git, &self.shared.worktrees(), &session, &project).await?)
    }
}

/// A worktrees directory as given: absolute, resolved as far as it exists (`""`: none).
fn worktrees_dir(dir: &str) -> Result<Option<String>, CorralError> {
    if dir.trim().is_empty() {
        return Ok(None);
    }
    let path = Path::new(dir);
    if !path.is_absolute() {
        return Err(CorralError::Invalid(format!(
            "the worktrees directory must be an absolute path, not '{dir}'"
        )));
    }
    Ok(Some(
        worktree::absolute(path).to_string_lossy().into_owned(),
    ))
}

impl Corral {
    /// Stores (and publishes) one event of a session that no worker tells: what the daemon
    /// itself did about the session (a refused request); the event as stored. A store another
    /// program locks is waited out, however long (the shutdown ends the wait), so the event
    /// is never dropped for it; an error says it was not stored.
    pub async fn record_event(
        &self,
        session_id: &str,
        kind: crate::events::EventKind,
        payload: serde_json::Value,
    ) -> Result<events::Event, CorralError> {
        let event = events::NewEvent {
            session_id: session_id.to_string(),
            prompt_id: None,
            run_id: None,
            kind,
            payload,
        };
        self.record(event).await
    }

    /// [`record_event`](Self::record_event) of a typed payload (the daemon's own events).
    pub(crate) async fn record_payload(
        &self,
        session_id: &str,
        payload: Payload,
    ) -> Result<events::Event, CorralError> {
        self.record(events::NewEvent::new(session_id, None, None, payload))
            .await
    }

    async fn record(&self, event: events::NewEvent) -> Result<events::Event, CorralError> {
        let stored = self.shared.publisher.append_events(vec![event]).await?;
        stored
            .into_iter()
            .next()
            .ok_or_else(|| CorralError::Store("the event was not stored".into()))
    }

    /// The runs whose engines live now, as origins of requests are matched against them
    /// (`daemon::origin`): each child run's engine, and each project's app-server child.
    pub async fn live_runs(&self) -> Vec<crate::process::LiveRun> {
        let mut runs = self
            .read(|connection| {
                connection.rows(
                    // A run whose pid is not stored yet (its engine is being spawned, or has
                    // just been: the pid is the next commit) is matched by the run id its
                    // engine carries (pid 0: never by ancestry or group), so an agent's very
                    // first request is judged as its others.
                    "SELECT id, session_id, coalesce(pid, 0) FROM runs WHERE status = 'running'",
                    args![],
                    |row| {
                        Ok(crate::process::LiveRun {
                            run_id: row.get(0)?,
                            session_id: Some(row.get(1)?),
                            pid: row.get(2)?,
                        })
                    },
                )
            })
            .unwrap_or_default();
        for state in self.app_servers().await {
            if let Some(pid) = state.pid.filter(|_| !state.is_stopped()) {
                runs.push(crate::process::LiveRun {
                    run_id: format!("app-server of project \"{}\"", state.project_id),
                    session_id: None,
                    pid: pid as i32,
                });
            }
        }
        runs
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    /// A store's error reaches the caller whole: its words, its type (for `downcast_ref`),
    /// and whether it is worth trying again.
    #[test]
    fn a_store_error_keeps_its_cause() {
        let locked = CorralError::from(StoreError::Locked(PathBuf::from("/tmp/corral.db")));
        assert_eq!(
            locked.to_string(),
            "the store at /tmp/corral.db is locked by another writer"
        );
        let CorralError::Locked(cause) = locked else {
            panic!("a locked store is worth trying again: {locked:?}");
        };
        assert!(matches!(
            cause.downcast_ref::<StoreError>(),
            Some(StoreError::Locked(_))
        ));
        let message = CorralError::Store("the supervisor stopped".into());
        assert_eq!(message.to_string(), "the supervisor stopped");
    }
}
