//! A session's own git worktree, through its life (docs/worktrees.md): planned and made when
//! the session opens, set up before its first prompt (by the session's worker), removed or
//! kept at archive, diffed, merged, and made again when a person deleted it by hand. Every git
//! call goes through [`crate::git`] (async: nothing here blocks the actor thread but single
//! stats and the removal of an empty directory); every store change through the ledger.
//!
//! Map of the file:
//! - naming: [`slug`], [`short_id`], [`worktrees_root`], and the engine's [`working_dir`];
//! - [`plan`]: a new session's path, branch, base and base commit, with no git change;
//! - [`make`]: `git worktree add` for a session whose worktree is `creating` (finishing what a
//!   killed daemon left), then `setup` or `ready` and a `worktree.created` event;
//!   [`finish_creating`] does it at boot for every worktree left `creating`;
//! - the repository lock: one worktree change (or listing) at a time per repository, as git
//!   races with itself there;
//! - [`archive`], [`diff`], [`merge`], [`recreate`]: what `session.archive`, `session.diff`,
//!   `session.merge` and `session.recreate` do to the worktree (called by [`crate::Corral`]);
//!   archive's `keep_reason` (submodules, a HEAD off the branch, an operation midway,
//!   uncommitted changes), merge's refusal of another busy session's checkout, and `forget`,
//!   which drops the session's own registration only (corral never prunes a repository);
//! - [`WorktreeError`]: one line each.
//!
//! git runs in a worktree only through the repository's record of it ([`crate::git::Checkout`]):
//! the worktree, its `.git` file included, is the agent's to write. corral writes only under
//! the worktrees directory and removes only a worktree the store says is the session's: a directory at that path that is no git worktree of the repository
//! (nor an empty directory, nor a checkout whose registration git lost) is left alone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};

use tokio::sync::OwnedMutexGuard;

use crate::actors::ledger::LedgerHandle;
use crate::actors::ledger::{LedgerError, SetWorktreeState};
use crate::actors::publisher::Publisher;
use crate::actors::shared::{GitFinder, SettingsCell};
use crate::events::{Payload, SessionMerged, WorktreeCreated, WorktreeRemoved};
use crate::git::{Checkout, Diff, Git, GitError, Head, Merged};
use crate::store::events::NewEvent;
use crate::store::sessions::{SessionWorktree, WorktreeState};
use crate::store::settings::Settings;
use crate::store::sql::{args, OptionalExt};
use crate::store::{projects, prompts, sessions};
use crate::store::{ReaderPool, StoreError};

/// What the worktree operations need of the supervisor
/// ([`Shared::worktrees`](crate::actors::shared::Shared::worktrees)): where worktrees go (the home and the
/// settings), the store's readers, the ledger (a worktree's state), the publisher (its
/// events), and on a shared store this daemon's node (whose host has a worktree).
#[derive(Clone)]
pub struct Worktrees {
    pub home: PathBuf,
    pub readers: Arc<ReaderPool>,
    pub ledger: LedgerHandle,
    pub publisher: Publisher,
    pub settings: SettingsCell,
    pub node_id: Option<String>,
}

/// A slug's length at most (a path and a branch name stay readable).
pub const MAX_SLUG: usize = 40;

/// The prefix of every branch corral names.
pub const BRANCH_PREFIX: &str = "corral/";

/// How many `-2`, `-3`… suffixes [`plan`] tries before it gives up on a name.
const MAX_SUFFIX: usize = 100;

/// One lock per repository (by its common git directory), held by every operation here that
/// adds, removes or lists worktrees: git itself races there (a `git worktree add`
/// reads every registration, and fails on one another `add` has begun but not yet written:
/// "failed to read .git/worktrees/NAME/commondir").
static REPOSITORIES: LazyLock<Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Mutex::default);

/// Waits for the worktree lock of the repository `dir` is in (by `dir` itself when it is in
/// none: the git call that follows says so).
async fn lock_repository(git: &Git, dir: &Path) -> Result<OwnedMutexGuard<()>, WorktreeError> {
    let key = match git.repo(dir).await? {
        Some(repo) => repo.common_dir,
        None => absolute(dir),
    };
    Ok(lock_key(key).await)
}

async fn lock_key(key: PathBuf) -> OwnedMutexGuard<()> {
    let lock = REPOSITORIES
        .lock()
        .unwrap_or_else(|poison| poison.into_inner())
        .entry(key)
        .or_default()
        .clone();
    lock.lock_owned().await
}

/// Every way a worktree operation fails; each displays as one line.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error(transparent)]
    Git(#[from] GitError),
    /// A request that cannot be done as asked (the line says why and what to do).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Read(#[from] StoreError),
}

impl From<WorktreeError> for crate::CorralError {
    fn from(error: WorktreeError) -> Self {
        match error {
            WorktreeError::Ledger(error) => error.into(),
            WorktreeError::Read(error) => error.into(),
            other => crate::CorralError::Invalid(other.to_string()),
        }
    }
}

fn invalid(line: impl Into<String>) -> WorktreeError {
    WorktreeError::Invalid(line.into())
}

/// Lowercase `[a-z0-9-]` of `text` (every other run of characters one `-`), at most
/// [`MAX_SLUG`] characters, no `-` at either end; empty when nothing is left.
pub fn slug(text: &str) -> String {
    let mut slug = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() > MAX_SLUG {
            break;
        }
    }
    slug.truncate(MAX_SLUG);
    slug.trim_end_matches('-').to_string()
}

/// The short id a session's worktree and branch are named with: the last 8 hex digits of its
/// uuid (in a v7 uuid, random bits; the first ones are the time, alike for sessions opened
/// together).
pub fn short_id(id: &str) -> String {
    let hex: Vec<char> = id.chars().filter(char::is_ascii_hexdigit).collect();
    hex[hex.len().saturating_sub(8)..].iter().collect()
}

/// Where a project's sessions' worktrees go: the project's own directory, else the
/// `worktrees.dir` setting, else `HOME/worktrees`; the project's slug below it.
pub fn worktrees_root(settings: &Settings, home: &Path, project: &projects::Project) -> PathBuf {
    let base = match (&project.worktrees_dir, &settings.worktrees_dir) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, Some(dir)) => dir.clone(),
        (None, None) => home.join("worktrees"),
    };
    let name = slug(&project.name);
    absolute(&base).join(if name.is_empty() { "project" } else { &name })
}

/// `path` with its deepest existing ancestor resolved (symbolic links, `..`): the form git
/// prints worktree paths in, so that corral's and git's paths compare equal.
pub fn absolute(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut missing = Vec::new();
    loop {
        if let Ok(resolved) = existing.canonicalize() {
            return missing
                .iter()
                .rev()
                .fold(resolved, |path, name| path.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_owned());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The engine's working directory: the worktree joined with the project path's place in its
/// repository (`project.path` relative to `project.repo_root`), else the project's path.
pub fn working_dir(session: &sessions::Session, project: &projects::Project) -> PathBuf {
    let Some(worktree) = &session.worktree else {
        return PathBuf::from(&project.path);
    };
    let root = Path::new(&worktree.path);
    let prefix = project
        .repo_root
        .as_deref()
        .and_then(|repo_root| Path::new(&project.path).strip_prefix(repo_root).ok());
    match prefix {
        Some(prefix) if !prefix.as_os_str().is_empty() => root.join(prefix),
        _ => root.to_path_buf(),
    }
}

/// The state a just-made worktree starts in: `setup` when the project has a setup command.
fn made_state(project: &projects::Project) -> WorktreeState {
    match project.setup.as_deref().map(str::trim) {
        Some(setup) if !setup.is_empty() => WorktreeState::Setup,
        _ => WorktreeState::Ready,
    }
}

/// Plans a new session's worktree (path, branch, base, base commit; state `creating`) — no
/// git change. `branch` naming an existing branch checks it out as it is (so no `base` with
/// it), unless another worktree has it; else a new branch (`corral/<slug>-<short id>` by
/// default) from `base` (default: what the project path has checked out — its branch, or the
/// commit of a detached HEAD). A path that exists is never used: `-2`, `-3`… are tried.
#[allow(clippy::too_many_arguments)]
pub async fn plan(
    git: &Git,
    settings: &Settings,
    home: &Path,
    project: &projects::Project,
    id: &str,
    title: Option<&str>,
    branch: Option<&str>,
    base: Option<&str>,
) -> Result<SessionWorktree, WorktreeError> {
    let dir = Path::new(&project.path);
    let Some(repo) = git.repo(dir).await? else {
        return Err(invalid(format!(
            "project path {} is not in a git repository (any more?): worktree isolation needs \
             one (corral project set {} --isolation shared)",
            project.path, project.name
        )));
    };
    if let Some(name) = branch {
        check_branch_name(git, dir, name).await?;
    }
    if let Some(base) = base {
        if base.trim().is_empty() {
            return Err(invalid("--base needs a branch, tag or commit"));
        }
    }
    let existing = match branch {
        Some(name) => git.branch_exists(dir, name).await?,
        None => false,
    };
    let (base, base_commit) = if existing {
        let name = branch.unwrap_or_default();
        if base.is_some() {
            return Err(invalid(format!(
                "branch '{name}' exists: the session works on it as it is, so --base cannot \
                 apply (drop --base, or name a new branch)"
            )));
        }
        let listed = {
            let _repository = lock_key(repo.common_dir.clone()).await;
            git.worktrees(dir).await?
        };
        if let Some(entry) = listed
            .into_iter()
            .find(|entry| !entry.prunable && entry.branch.as_deref() == Some(name))
        {
            return Err(invalid(format!(
                "branch '{name}' is checked out in {} already: a session needs a branch no \
                 other worktree has",
                entry.path.display()
            )));
        }
        (
            name.to_string(),
            git.resolve(dir, &format!("refs/heads/{name}")).await?,
        )
    } else {
        let base = match base {
            Some(base) => base.to_string(),
            None => match git.head(dir).await? {
                Head::Branch(name) => name,
                Head::Detached(sha) => sha,
            },
        };
        let commit = match git.resolve(dir, &base).await {
            Err(GitError::UnknownRevision { .. } | GitError::Failed { .. }) => {
                return Err(invalid(format!(
                    "unknown revision {base}: --base needs a branch, tag or commit"
                )))
            }
            commit => commit?,
        };
        (base, commit)
    };
    let root = worktrees_root(settings, home, project);
    let session_slug = match slug(title.unwrap_or_default()) {
        empty if empty.is_empty() => "session".to_string(),
        slug => slug,
    };
    let name = format!("{session_slug}-{}", short_id(id));
    for n in 1..=MAX_SUFFIX {
        let suffixed = match n {
            1 => name.clone(),
            n => format!("{name}-{n}"),
        };
        let path = root.join(&suffixed);
        if std::fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        let branch = match branch {
            Some(branch) => branch.to_string(),
            None => {
                let generated = format!("{BRANCH_PREFIX}{suffixed}");
                if git.branch_exists(dir, &generated).await? {
                    continue;
                }
                generated
            }
        };
        return Ok(SessionWorktree {
            path: path.to_string_lossy().into_owned(),
            branch,
            base,
            base_commit,
            state: WorktreeState::Creating,
        });
    }
    Err(invalid(format!(
        "no free worktree path for {name} in {} (tried {MAX_SUFFIX})",
        root.display()
    )))
}

/// Refuses a `--branch` that is no plain branch name: what `git check-ref-format --branch`
/// refuses, and names git would read as something else (`refs/heads/main` would become
/// `refs/heads/refs/heads/main`; `HEAD`, `@`).
async fn check_branch_name(git: &Git, dir: &Path, name: &str) -> Result<(), WorktreeError> {
    let ambiguous = name.starts_with("refs/") || name == "HEAD" || name == "@";
    if ambiguous || !git.is_branch_name(dir, name).await? {
        return Err(invalid(format!(
            "'{name}' is no branch name: give a plain one (like fix-login), without refs/"
        )));
    }
    Ok(())
}

/// Makes (or finishes making) a session's worktree whose state is `creating`: a registered
/// worktree at the path on the branch is kept; a partial one (locked by a `git worktree add`
/// that never finished, a registration without its directory, an empty directory, a checkout
/// whose registration is gone) is cleared and made again; anything else at the path is left
/// alone and refused. Records the new state (`setup` when the project has a setup command,
/// else `ready`) and a `worktree.created` event. Returns the session as stored. A made
/// worktree (any other state) is returned as it is.
pub async fn make(
    git: &Git,
    worktrees: &Worktrees,
    session: &sessions::Session,
    project: &projects::Project,
) -> Result<sessions::Session, WorktreeError> {
    let Some(worktree) = &session.worktree else {
        return Ok(session.clone());
    };
    if worktree.state != WorktreeState::Creating {
        return Ok(session.clone());
    }
    let repo = Path::new(&project.path);
    let path = Path::new(&worktree.path);
    {
        let _repository = lock_repository(git, repo).await?;
        // Another caller (the boot's completion, a prompt's worker) may have made it while
        // this one waited.
        let current = worktrees
            .readers
            .read(|connection| sessions::session(connection, &session.id))?
            .ok_or_else(|| invalid(format!("session {} is gone", session.id)))?;
        if current
            .worktree
            .as_ref()
            .is_some_and(|now| now.state != WorktreeState::Creating)
        {
            return Ok(current);
        }
        if !clear_partial(git, repo, path, &worktree.branch).await? {
            add(git, repo, worktree).await?;
        }
    }
    made(worktrees, session, project).await
}

/// Makes every worktree a previous supervisor left `creating` (killed while it made one), at
/// boot, in the background: what fails is logged and left `creating`, for the session's
/// first prompt to try again (and say why).
pub async fn finish_creating(worktrees: Worktrees, git: GitFinder) {
    let left = worktrees.readers.read(sessions::sessions_creating);
    let left = match left {
        Ok(left) if left.is_empty() => return,
        Ok(left) => left,
        Err(error) => return tracing::warn!(%error, "worktrees left creating not read"),
    };
    let git = match git.find().await {
        Ok(git) => git,
        Err(error) => return tracing::warn!(%error, "worktrees left creating stay so"),
    };
    let this_node = worktrees.node_id.clone();
    for session in left {
        // On a shared store, another daemon's host has (or is making) that worktree.
        let node = worktrees
            .readers
            .read(|connection| sessions::worktree_node(connection, &session.id));
        if let (Ok(Some((node, _))), Some(this)) = (node, &this_node) {
            if node != *this {
                continue;
            }
        }
        let project = session.project_id.as_deref().and_then(|id| {
            worktrees
                .readers
                .read(|connection| projects::project(connection, id))
                .ok()
                .flatten()
        });
        let Some(project) = project else { continue };
        match make(&git, &worktrees, &session, &project).await {
            Ok(_) => tracing::info!(session = %session.id, "worktree left creating made"),
            Err(error) => {
                tracing::warn!(session = %session.id, %error, "worktree left creating stays so")
            }
        }
    }
}

/// Records a worktree as made: its state, and the `worktree.created` event.
async fn made(
    worktrees: &Worktrees,
    session: &sessions::Session,
    project: &projects::Project,
) -> Result<sessions::Session, WorktreeError> {
    let worktree = session
        .worktree
        .as_ref()
        .expect("a session with a worktree");
    let stored = set_state(worktrees, &session.id, made_state(project)).await?;
    record(
        worktrees,
        &session.id,
        Payload::WorktreeCreated(WorktreeCreated {
            path: worktree.path.clone(),
            branch: worktree.branch.clone(),
            base_commit: worktree.base_commit.clone(),
        }),
    )
    .await;
    Ok(stored)
}

/// `git worktree add` of a planned worktree: on its branch when it exists (an existing branch
/// asked for, or the one an interrupted creation made), else on a new one from the base commit.
async fn add(git: &Git, repo: &Path, worktree: &SessionWorktree) -> Result<(), WorktreeError> {
    let new_branch = !git.branch_exists(repo, &worktree.branch).await?;
    git.worktree_add(
        repo,
        Path::new(&worktree.path),
        &worktree.branch,
        &worktree.base_commit,
        new_branch,
    )
    .await?;
    Ok(())
}

/// What an interrupted creation left at `path`: `true` when a complete worktree on `branch`
/// is there (nothing to do); `false` when the path is free now (a partial one was cleared).
async fn clear_partial(
    git: &Git,
    repo: &Path,
    path: &Path,
    branch: &str,
) -> Result<bool, WorktreeError> {
    let entries = git.worktrees(repo).await?;
    if let Some(entry) = entries.iter().find(|entry| entry.path == path) {
        if entry.prunable {
            git.worktree_remove(repo, path, true).await?;
        } else if entry.locked {
            // `git worktree add` locks the worktree until its checkout is done.
            git.worktree_remove(repo, path, true).await?;
        } else if entry.branch.as_deref() == Some(branch) {
            return Ok(true);
        } else {
            return Err(invalid(format!(
                "{} is a worktree on {} already, not on the session's branch {branch}: move it \
                 away",
                path.display(),
                entry.branch.as_deref().unwrap_or("a detached HEAD")
            )));
        }
    }
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return Ok(false);
    };
    if metadata.is_dir() {
        if std::fs::remove_dir(path).is_ok() {
            return Ok(false);
        }
        if let Some(common_dir) = git.repo(repo).await?.map(|found| found.common_dir) {
            if is_lost_checkout(path, &common_dir) {
                let gone = path.to_path_buf();
                tokio::task::spawn_blocking(move || std::fs::remove_dir_all(gone))
                    .await
                    .map_err(|error| invalid(format!("cannot remove {}: {error}", path.display())))?
                    .map_err(|error| {
                        invalid(format!("cannot remove {}: {error}", path.display()))
                    })?;
                return Ok(false);
            }
        }
    }
    Err(invalid(format!(
        "{} exists and is no worktree of the repository: move it away, then try again",
        path.display()
    )))
}

/// Drops the registration of the worktree at `path` whose directory is gone, if the repository
/// still has one: that registration only (a `git worktree prune` would drop the person's too,
/// a worktree on a disk not mounted now).
async fn forget(git: &Git, repo: &Path, path: &Path) -> Result<(), WorktreeError> {
    let registered = git
        .worktrees(repo)
        .await?
        .iter()
        .any(|entry| entry.path == absolute(path));
    if registered {
        git.worktree_remove(repo, path, true).await?;
    }
    Ok(())
}

/// A checkout of this repository git no longer knows: its `.git` file names a worktree
/// registration of `common_dir` that is gone (a removal or creation cut short).
fn is_lost_checkout(path: &Path, common_dir: &Path) -> bool {
    let Ok(gitfile) = std::fs::read_to_string(path.join(".git")) else {
        return false;
    };
    let Some(admin) = gitfile.trim().strip_prefix("gitdir: ") else {
        return false;
    };
    let admin = Path::new(admin);
    admin.starts_with(common_dir.join("worktrees")) && !admin.exists()
}

async fn set_state(
    worktrees: &Worktrees,
    session_id: &str,
    state: WorktreeState,
) -> Result<sessions::Session, WorktreeError> {
    worktrees
        .ledger
        .write(SetWorktreeState {
            session_id: session_id.to_string(),
            state,
        })
        .await?
        .ok_or_else(|| invalid(format!("session {session_id} is gone")))
}

/// Stores and publishes one of the session's events; an event that could not be stored is
/// logged, not an error of what it tells (that is done).
async fn record(worktrees: &Worktrees, session_id: &str, payload: Payload) {
    let event = NewEvent::new(session_id, None, None, payload);
    if let Err(error) = worktrees.publisher.append_events(vec![event]).await {
        tracing::warn!(%error, session_id, "worktree event not stored");
    }
}

/// The worktree of a session, or the line saying it has none.
fn worktree_of(session: &sessions::Session) -> Result<&SessionWorktree, WorktreeError> {
    session
        .worktree
        .as_ref()
        .ok_or_else(|| no_worktree(session))
}

/// The line for a session without a worktree (diff, merge, recreate).
pub fn no_worktree(session: &sessions::Session) -> WorktreeError {
    invalid(format!(
        "session {} has no worktree (its project shares one working tree)",
        session.id
    ))
}

/// The line for a made worktree whose directory is gone.
fn gone(session: &sessions::Session, path: &str) -> WorktreeError {
    invalid(format!(
        "worktree {path} is gone (removed by hand?): corral session recreate {}",
        session.id
    ))
}

/// What archive did to a session's worktree: the session as stored, and why its worktree was
/// kept (when it was).
pub struct Archived {
    pub session: sessions::Session,
    pub kept_because: Option<String>,
}

/// What `session.archive` does to the session's worktree, once the session is archived:
/// removed (its branch kept) when nothing in it can be lost (`keep_reason`), else kept,
/// unless `discard_changes`; a directory gone → its registration dropped, removed. A `kept`
/// worktree is removed only with `discard_changes`; a removed one (or none) is left as it is.
pub async fn archive(
    git: &Git,
    worktrees: &Worktrees,
    session: &sessions::Session,
    project: &projects::Project,
    discard_changes: bool,
) -> Result<Archived, WorktreeError> {
    let as_it_is = || Archived {
        session: session.clone(),
        kept_because: None,
    };
    let Some(worktree) = &session.worktree else {
        return Ok(as_it_is());
    };
    match worktree.state {
        WorktreeState::Removed => return Ok(as_it_is()),
        WorktreeState::Kept if !discard_changes => return Ok(as_it_is()),
        _ => {}
    }
    let repo = Path::new(&project.path);
    let path = Path::new(&worktree.path);
    let repository = lock_repository(git, repo).await?;
    if std::fs::symlink_metadata(path).is_err() {
        forget(git, repo, path).await?;
        drop(repository);
        return removed(worktrees, session).await;
    }
    let checkout = git.checkout(repo, path).await?;
    if discard_changes && !checkout.points_back().await {
        checkout.restore_gitfile().await?;
    }
    if !discard_changes {
        if let Some(reason) = keep_reason(git, &checkout, &worktree.branch).await? {
            let session = set_state(worktrees, &session.id, WorktreeState::Kept).await?;
            return Ok(Archived {
                session,
                kept_because: Some(reason),
            });
        }
    }
    git.worktree_remove(repo, path, discard_changes).await?;
    drop(repository);
    removed(worktrees, session).await
}

/// Why removing the worktree could lose work (or git would refuse), in the words of the kept
/// line: a `.git` file rewritten (git checks it before a removal), its submodules
/// (their commits live in repositories corral cannot check), a HEAD off its branch (commits
/// there are on no branch), a rebase or merge midway, uncommitted changes; none when clean.
async fn keep_reason(
    git: &Git,
    checkout: &Checkout,
    branch: &str,
) -> Result<Option<String>, WorktreeError> {
    if !checkout.points_back().await {
        return Ok(Some(
            "its .git file no longer names the repository's record of it (rewritten?)".into(),
        ));
    }
    if git.has_submodules(checkout).await? {
        return Ok(Some(
            "it has submodules, whose commits corral cannot check".into(),
        ));
    }
    let expected = format!("refs/heads/{branch}");
    match git.symbolic_head(checkout).await? {
        None => {
            return Ok(Some(format!(
                "its HEAD is detached, not on its branch {branch}: commits made there are on no \
                 branch"
            )))
        }
        Some(head) if head != expected => {
            return Ok(Some(format!(
                "it has {} checked out, not its branch {branch}",
                head.strip_prefix("refs/heads/").unwrap_or(&head)
            )))
        }
        Some(_) => {}
    }
    if let Some(operation) = checkout.operation_in_progress().await {
        return Ok(Some(format!("{operation} is in progress in it")));
    }
    if !git.is_clean(checkout).await? {
        return Ok(Some("it has uncommitted changes".into()));
    }
    Ok(None)
}

async fn removed(
    worktrees: &Worktrees,
    session: &sessions::Session,
) -> Result<Archived, WorktreeError> {
    let worktree = session
        .worktree
        .as_ref()
        .expect("a session with a worktree");
    let stored = set_state(worktrees, &session.id, WorktreeState::Removed).await?;
    record(
        worktrees,
        &session.id,
        Payload::WorktreeRemoved(WorktreeRemoved {
            path: worktree.path.clone(),
            kept_branch: worktree.branch.clone(),
        }),
    )
    .await;
    Ok(Archived {
        session: stored,
        kept_because: None,
    })
}

/// The session's changes against its base commit, untracked files included (git run there
/// through the repository's record of the worktree, never its `.git` file).
pub async fn diff(
    git: &Git,
    session: &sessions::Session,
    project: &projects::Project,
    stat: bool,
) -> Result<Diff, WorktreeError> {
    let worktree = worktree_of(session)?;
    match worktree.state {
        WorktreeState::Creating => {
            return Err(invalid(format!(
                "session {}'s worktree is not made yet (its first prompt makes it)",
                session.id
            )))
        }
        WorktreeState::Removed => {
            return Err(invalid(format!(
                "session {}'s worktree was removed at archive; its branch is kept: git diff {} {}",
                session.id, worktree.base_commit, worktree.branch
            )))
        }
        _ => {}
    }
    let path = Path::new(&worktree.path);
    if !path.is_dir() {
        return Err(gone(session, &worktree.path));
    }
    let checkout = git.checkout(Path::new(&project.path), path).await?;
    Ok(git.diff(&checkout, &worktree.base_commit, stat).await?)
}

/// Merges the session's branch into `into` (default: its base, when that is a branch), in a
/// scratch worktree under the project's worktrees directory, never in a person's checkout;
/// records `session.merged`.
pub async fn merge(
    git: &Git,
    worktrees: &Worktrees,
    session: &sessions::Session,
    project: &projects::Project,
    into: Option<&str>,
    squash: bool,
) -> Result<Merged, WorktreeError> {
    let worktree = worktree_of(session)?;
    if worktree.state == WorktreeState::Creating {
        return Err(invalid(format!(
            "session {}'s worktree is not made yet: nothing to merge",
            session.id
        )));
    }
    let repo = Path::new(&project.path);
    let into = match into {
        Some(into) => into.to_string(),
        None if git.branch_exists(repo, &worktree.base).await? => worktree.base.clone(),
        None => {
            return Err(invalid(format!(
                "the session's base is a commit ({}): pass --into BRANCH",
                worktree.base
            )))
        }
    };
    if into == worktree.branch {
        return Err(invalid(format!(
            "session {} works on {into} itself: pass --into BRANCH",
            session.id
        )));
    }
    let root = worktrees_root(&worktrees.settings.now(), &worktrees.home, project);
    // One name per session: a merge killed midway leaves it for the next merge to clear.
    let scratch = root.join(format!(".merge-{}", short_id(&session.id)));
    let name = session
        .title
        .clone()
        .unwrap_or_else(|| short_id(&session.id));
    let message = format!("Merge corral session {name} ({})", worktree.branch);
    let merged = {
        // Its scratch worktree is added and removed like a session's.
        let _repository = lock_repository(git, repo).await?;
        refuse_busy_checkout(git, worktrees, repo, &into).await?;
        git.merge(repo, &scratch, &worktree.branch, &into, squash, &message)
            .await?
    };
    record(
        worktrees,
        &session.id,
        Payload::SessionMerged(SessionMerged {
            into: merged.into.clone(),
            commit: merged.commit.clone(),
            squash,
        }),
    )
    .await;
    Ok(merged)
}

/// Refuses a merge into a branch checked out in another session's worktree while that session
/// runs or has prompts queued: the fast-forward would change files under its agent.
async fn refuse_busy_checkout(
    git: &Git,
    worktrees: &Worktrees,
    repo: &Path,
    into: &str,
) -> Result<(), WorktreeError> {
    let Some(checkout) = git
        .worktrees(repo)
        .await?
        .into_iter()
        .find(|entry| !entry.prunable && entry.branch.as_deref() == Some(into))
    else {
        return Ok(());
    };
    let path = checkout.path.to_string_lossy().into_owned();
    let busy = worktrees.readers.read(|connection| {
        let owner: Option<String> = connection
            .row(
                "SELECT id FROM sessions WHERE worktree = ?1",
                args![&path],
                |row| row.get(0),
            )
            .optional()?;
        match owner {
            Some(id) => Ok(prompts::busy_prompt(connection, &id)?.map(|prompt| (id, prompt))),
            None => Ok(None),
        }
    })?;
    match busy {
        Some((owner, prompt)) => Err(invalid(format!(
            "{into} is checked out in session {owner}'s worktree {path}, which has a prompt {} \
             ({}): wait for it to end, or cancel it (corral cancel {}), before merging into {into}",
            prompt.status.as_str(),
            prompt.id,
            prompt.id
        ))),
        None => Ok(()),
    }
}

/// Makes a worktree deleted by hand again, on its branch (or, if that is gone too, a new one
/// of the same name from the base commit); refused when the directory exists. A worktree
/// still `creating` is made.
pub async fn recreate(
    git: &Git,
    worktrees: &Worktrees,
    session: &sessions::Session,
    project: &projects::Project,
) -> Result<sessions::Session, WorktreeError> {
    let worktree = worktree_of(session)?;
    match worktree.state {
        WorktreeState::Creating => return make(git, worktrees, session, project).await,
        WorktreeState::Removed | WorktreeState::Kept => {
            return Err(invalid(format!(
                "session {} is archived: its worktree is {}",
                session.id, worktree.state
            )))
        }
        WorktreeState::Setup | WorktreeState::Ready => {}
    }
    let path = Path::new(&worktree.path);
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(invalid(format!("worktree {} exists", worktree.path)));
    }
    let repo = Path::new(&project.path);
    {
        let _repository = lock_repository(git, repo).await?;
        forget(git, repo, path).await?;
        add(git, repo, worktree).await?;
    }
    made(worktrees, session, project).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(path: &str, repo_root: Option<&str>) -> projects::Project {
        projects::Project {
            id: "p".into(),
            name: "My App".into(),
            path: path.into(),
            engine: None,
            model: None,
            full_access: false,
            kind: "local".into(),
            groups: Vec::new(),
            instructions: None,
            created_at: 0,
            archived_at: None,
            keep_background: false,
            pause_on_failure: false,
            notify: None,
            env: Default::default(),
            isolation: projects::Isolation::Worktree,
            worktrees_dir: None,
            setup: None,
            repo_root: repo_root.map(String::from),
            policy: Default::default(),
            agents_scope: Default::default(),
        }
    }

    fn session(worktree: Option<&str>) -> sessions::Session {
        sessions::Session {
            env: Default::default(),
            id: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b".into(),
            project_id: Some("p".into()),
            engine: crate::engine::EngineKind::Fake,
            model: None,
            reasoning_effort: None,
            thread_id: None,
            resume_point: None,
            title: None,
            title_source: None,
            status: crate::store::sessions::SessionStatus::Idle,
            task: None,
            wave_id: None,
            created_at: 0,
            archived_at: None,
            last_event_seq: 0,
            compacted_message_count: None,
            compacted_character_count: None,
            compacted_at: None,
            worktree: worktree.map(|path| SessionWorktree {
                path: path.into(),
                branch: "corral/x".into(),
                base: "main".into(),
                base_commit: "0".repeat(40),
                state: WorktreeState::Ready,
            }),
            policy: Default::default(),
        }
    }

    #[test]
    fn slugs_keep_lowercase_letters_digits_and_single_dashes() {
        assert_eq!(slug("Fix the Login bug!"), "fix-the-login-bug");
        assert_eq!(slug("  --Äpfel & Birnen__2 "), "pfel-birnen-2");
        assert_eq!(slug("日本語"), "");
        assert_eq!(slug(""), "");
        let long = slug(&"word ".repeat(20));
        assert!(long.len() <= MAX_SLUG, "{long}");
        assert!(!long.ends_with('-'), "{long}");
        assert_eq!(long, "word-word-word-word-word-word-word-word");
        assert_eq!(slug(&"a".repeat(50)).len(), MAX_SLUG);
    }

    #[test]
    fn the_short_id_is_the_uuids_last_eight_hex_digits() {
        assert_eq!(short_id("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), "2e3f4a5b");
        let a = uuid::Uuid::now_v7().to_string();
        let b = uuid::Uuid::now_v7().to_string();
        assert_eq!(short_id(&a).len(), 8);
        assert_ne!(short_id(&a), short_id(&b), "v7's last digits are random");
    }

    #[test]
    fn worktrees_go_under_the_project_dir_then_the_setting_then_home() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        let mut settings = Settings::default();
        let mut project = project("/r", Some("/r"));
        assert_eq!(
            worktrees_root(&settings, &home, &project),
            home.join("worktrees/my-app")
        );
        settings.worktrees_dir = Some(home.join("set"));
        assert_eq!(
            worktrees_root(&settings, &home, &project),
            home.join("set/my-app")
        );
        project.worktrees_dir = Some(home.join("own/").to_string_lossy().into_owned());
        project.name = "***".into();
        assert_eq!(
            worktrees_root(&settings, &home, &project),
            home.join("own/project")
        );
    }

    #[test]
    fn absolute_resolves_the_existing_part_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink(&real, real.join("link")).unwrap();
        assert_eq!(
            absolute(&real.join("link/not/yet")),
            real.join("not/yet"),
            "the symbolic link is resolved, the missing part kept"
        );
        assert_eq!(absolute(&real), real);
    }

    #[test]
    fn the_working_dir_keeps_the_projects_place_in_its_repository() {
        let top = project("/repo", Some("/repo"));
        let sub = project("/repo/crates/app", Some("/repo"));
        let with = session(Some("/wt/my-app/s-2e3f4a5b"));
        assert_eq!(
            working_dir(&with, &top),
            PathBuf::from("/wt/my-app/s-2e3f4a5b")
        );
        assert_eq!(
            working_dir(&with, &sub),
            PathBuf::from("/wt/my-app/s-2e3f4a5b/crates/app")
        );
        // No repository root known: the worktree's root.
        assert_eq!(
            working_dir(&with, &project("/repo/crates/app", None)),
            PathBuf::from("/wt/my-app/s-2e3f4a5b")
        );
        // A session without a worktree runs in its project's path, whatever the isolation.
        assert_eq!(
            working_dir(&session(None), &sub),
            PathBuf::from("/repo/crates/app")
        );
    }

    /// A repository on `main` with one commit, in a temporary directory, and a [`Git`] with
    /// this test's configuration alone (the process's environment is never changed).
    struct Repo {
        _dir: tempfile::TempDir,
        root: PathBuf,
        path: PathBuf,
        git: Git,
        env: Vec<(&'static str, String)>,
    }

    impl Repo {
        async fn new() -> Repo {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            let config = root.join("gitconfig");
            std::fs::write(&config, "[init]\n\tdefaultBranch = main\n").unwrap();
            let env = vec![
                ("GIT_CONFIG_GLOBAL", config.to_string_lossy().into_owned()),
                ("GIT_CONFIG_NOSYSTEM", "1".to_string()),
                ("GIT_AUTHOR_NAME", "corral test".to_string()),
                ("GIT_AUTHOR_EMAIL", "test@corral.invalid".to_string()),
                ("GIT_COMMITTER_NAME", "corral test".to_string()),
                ("GIT_COMMITTER_EMAIL", "test@corral.invalid".to_string()),
            ];
            let mut git = Git::detect().await.unwrap();
            for (name, value) in &env {
                git = git.with_env(*name, value);
            }
            let path = root.join("repo");
            let repo = Repo {
                _dir: dir,
                root,
                path,
                git,
                env,
            };
            repo.run(&repo.root, &["init", "-q", "repo"]);
            std::fs::write(repo.path.join("a.txt"), "a\n").unwrap();
            repo.run(&repo.path, &["add", "a.txt"]);
            repo.run(&repo.path, &["commit", "-q", "-m", "first"]);
            repo
        }

        /// `git ARGS…` in `dir`, which must succeed (a test's own blocking call): its stdout.
        fn run(&self, dir: &Path, args: &[&str]) -> String {
            let output = std::process::Command::new(self.git.program())
                .current_dir(dir)
                .args(args)
                .envs(self.env.iter().map(|(name, value)| (name, value)))
                .output()
                .unwrap();
            assert!(output.status.success(), "git {args:?}: {output:?}");
            String::from_utf8(output.stdout).unwrap().trim().to_string()
        }

        fn project(&self) -> projects::Project {
            let path = self.path.to_string_lossy().into_owned();
            project(&path, Some(&path))
        }

        async fn plan(
            &self,
            title: Option<&str>,
            branch: Option<&str>,
            base: Option<&str>,
        ) -> Result<SessionWorktree, WorktreeError> {
            let settings = Settings {
                worktrees_dir: Some(self.root.join("wt")),
                ..Settings::default()
            };
            let id = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
            plan(
                &self.git,
                &settings,
                &self.root,
                &self.project(),
                id,
                title,
                branch,
                base,
            )
            .await
        }
    }

    #[tokio::test]
    async fn plan_names_the_path_and_branch_after_the_title_and_short_id() {
        let repo = Repo::new().await;
        let head = repo.run(&repo.path, &["rev-parse", "HEAD"]);
        let planned = repo.plan(Some("Fix: the Login"), None, None).await.unwrap();
        assert_eq!(
            PathBuf::from(&planned.path),
            repo.root.join("wt/my-app/fix-the-login-2e3f4a5b")
        );
        assert_eq!(planned.branch, "corral/fix-the-login-2e3f4a5b");
        assert_eq!(planned.base, "main", "the project's branch, not HEAD");
        assert_eq!(planned.base_commit, head);
        assert_eq!(planned.state, WorktreeState::Creating);
        assert!(!Path::new(&planned.path).exists(), "a plan changes nothing");
        let untitled = repo.plan(None, None, None).await.unwrap();
        assert!(untitled.path.ends_with("/session-2e3f4a5b"), "{untitled:?}");
        assert_eq!(untitled.branch, "corral/session-2e3f4a5b");
    }

    #[tokio::test]
    async fn plan_never_uses_a_path_or_a_generated_branch_that_exists() {
        let repo = Repo::new().await;
        let first = repo.root.join("wt/my-app/s-2e3f4a5b");
        std::fs::create_dir_all(&first).unwrap();
        let planned = repo.plan(Some("s"), None, None).await.unwrap();
        assert_eq!(
            PathBuf::from(&planned.path),
            repo.root.join("wt/my-app/s-2e3f4a5b-2")
        );
        assert_eq!(planned.branch, "corral/s-2e3f4a5b-2");
        // A file takes a path as well as a directory; a branch of the name its own suffix.
        std::fs::write(repo.root.join("wt/my-app/s-2e3f4a5b-2"), "").unwrap();
        repo.run(&repo.path, &["branch", "corral/s-2e3f4a5b-3"]);
        let planned = repo.plan(Some("s"), None, None).await.unwrap();
        assert_eq!(
            PathBuf::from(&planned.path),
            repo.root.join("wt/my-app/s-2e3f4a5b-4")
        );
        assert_eq!(planned.branch, "corral/s-2e3f4a5b-4");
    }

    #[tokio::test]
    async fn plan_takes_an_existing_branch_as_it_is_and_refuses_what_contradicts_it() {
        let repo = Repo::new().await;
        repo.run(&repo.path, &["branch", "feature"]);
        let feature = repo.run(&repo.path, &["rev-parse", "feature"]);
        let planned = repo.plan(None, Some("feature"), None).await.unwrap();
        assert_eq!(planned.branch, "feature");
        assert_eq!(
            (planned.base.as_str(), planned.base_commit.as_str()),
            ("feature", feature.as_str())
        );
        let error = repo
            .plan(None, Some("feature"), Some("main"))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("--base cannot apply"), "{error}");
        let error = repo.plan(None, Some("main"), None).await.unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("branch 'main' is checked out in "),
            "{error}"
        );
        // A new branch named by the person starts from the base given.
        let planned = repo
            .plan(None, Some("topic"), Some("feature"))
            .await
            .unwrap();
        assert_eq!(
            (planned.branch.as_str(), planned.base.as_str()),
            ("topic", "feature")
        );
        let error = repo
            .plan(None, None, Some("no-such-ref"))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("no-such-ref"), "{error}");
    }

    #[tokio::test]
    async fn a_detached_head_is_the_base_by_its_sha() {
        let repo = Repo::new().await;
        let head = repo.run(&repo.path, &["rev-parse", "HEAD"]);
        repo.run(&repo.path, &["checkout", "-q", "--detach"]);
        let planned = repo.plan(None, None, None).await.unwrap();
        assert_eq!(planned.base, head);
        assert_eq!(planned.base_commit, head);
    }

    #[tokio::test]
    async fn plan_refuses_a_project_outside_any_repository() {
        let repo = Repo::new().await;
        let outside = repo.root.join("plain");
        std::fs::create_dir(&outside).unwrap();
        let project = project(&outside.to_string_lossy(), None);
        let error = plan(
            &repo.git,
            &Settings::default(),
            &repo.root,
            &project,
            "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
            None,
            None,
            None,
        )
        .await
        .unwrap_err();
        assert!(
            error.to_string().contains("is not in a git repository"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn what_an_interrupted_creation_left_is_kept_or_cleared_and_nothing_else_touched() {
        let repo = Repo::new().await;
        let head = repo.run(&repo.path, &["rev-parse", "HEAD"]);
        let path = repo.root.join("wt/p/s-1");
        let clear = || clear_partial(&repo.git, &repo.path, &path, "corral/s-1");
        // Nothing there: free.
        assert!(!clear().await.unwrap());
        // A complete worktree on the branch is kept.
        repo.git
            .worktree_add(&repo.path, &path, "corral/s-1", &head, true)
            .await
            .unwrap();
        assert!(clear().await.unwrap());
        // Locked by a `git worktree add` that never finished: cleared, the branch kept.
        repo.run(
            &repo.path,
            &[
                "worktree",
                "lock",
                "--reason",
                "initializing",
                path.to_str().unwrap(),
            ],
        );
        assert!(!clear().await.unwrap());
        assert!(!path.exists());
        assert!(repo
            .git
            .branch_exists(&repo.path, "corral/s-1")
            .await
            .unwrap());
        // A registration without its directory: pruned.
        repo.git
            .worktree_add(&repo.path, &path, "corral/s-1", &head, false)
            .await
            .unwrap();
        std::fs::remove_dir_all(&path).unwrap();
        assert!(!clear().await.unwrap());
        assert!(
            repo.git.worktrees(&repo.path).await.unwrap().len() == 1,
            "pruned"
        );
        // A checkout whose registration is gone, and an empty directory: cleared.
        repo.git
            .worktree_add(&repo.path, &path, "corral/s-1", &head, false)
            .await
            .unwrap();
        std::fs::remove_dir_all(repo.path.join(".git/worktrees")).unwrap();
        assert!(!clear().await.unwrap());
        assert!(!path.exists());
        std::fs::create_dir_all(&path).unwrap();
        assert!(!clear().await.unwrap());
        assert!(!path.exists());
        // Anything else is the person's: refused, left as it is.
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("notes.txt"), "mine").unwrap();
        let error = clear().await.unwrap_err();
        assert!(
            error
                .to_string()
                .contains("is no worktree of the repository"),
            "{error}"
        );
        assert_eq!(
            std::fs::read_to_string(path.join("notes.txt")).unwrap(),
            "mine"
        );
        std::fs::remove_dir_all(&path).unwrap();
        // A worktree of the repository on another branch: refused, left as it is.
        repo.git
            .worktree_add(&repo.path, &path, "other", &head, true)
            .await
            .unwrap();
        let error = clear().await.unwrap_err();
        assert!(
            error.to_string().contains("not on the session's branch"),
            "{error}"
        );
        assert!(path.join("a.txt").exists());
    }

    /// Waits (at most 30 s) for the first event of `session_id` of `kind` on `events`.
    async fn event_of(
        events: &mut tokio::sync::broadcast::Receiver<Arc<crate::actors::publisher::Published>>,
        session_id: &str,
        kind: &str,
    ) {
        let wait = async {
            loop {
                match events.recv().await {
                    Ok(event) if event.session_id == session_id && event.kind == kind => break,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(error) => panic!("events: {error}"),
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), wait)
            .await
            .unwrap_or_else(|_| panic!("no {kind} of {session_id}"));
    }

    #[test]
    fn archive_and_merge_wait_for_a_prompt_and_the_next_start_makes_what_was_left_creating() {
        use crate::store::prompts::NewPrompt;
        use crate::store::sessions::NewSession;
        use crate::{Corral, CorralOptions};
        let home = tempfile::tempdir().unwrap();
        let (repo, left) = actix::System::new().block_on(async {
            let repo = Repo::new().await;
            let corral = Corral::start(CorralOptions::new(home.path()))
                .await
                .unwrap();
            let project = corral
                .add_project(projects::NewProject {
                    name: "p".into(),
                    path: repo.path.to_string_lossy().into_owned(),
                    ..Default::default()
                })
                .await
                .unwrap();
            assert_eq!(
                project.isolation,
                projects::Isolation::Worktree,
                "the default in a repository"
            );
            let session = corral
                .open_session(NewSession {
                    project_id: project.id.clone(),
                    engine: Some(crate::engine::EngineKind::Command),
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut events = corral.subscribe();
            let sent = corral
                .send(NewPrompt {
                    session_id: session.id.clone(),
                    text: "sleep 30".into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            event_of(&mut events, &session.id, "run.started").await;
            for refused in [
                corral
                    .archive_session(&session.id, false)
                    .await
                    .unwrap_err(),
                corral
                    .merge_session(&session.id, None, false)
                    .await
                    .map(drop)
                    .unwrap_err(),
            ] {
                assert!(
                    refused
                        .to_string()
                        .contains(&format!("has a prompt running ({})", sent.prompt.id)),
                    "{refused}"
                );
            }
            let unchanged = corral
                .read(|c| sessions::session(c, &session.id))
                .unwrap()
                .unwrap();
            assert_eq!(unchanged.archived_at, None, "refused before archiving");
            corral.cancel(&sent.prompt.id).await.unwrap();
            corral.wait_prompt(&sent.prompt.id).await.unwrap();
            let (archived, kept_because) =
                corral.archive_session(&session.id, false).await.unwrap();
            assert_eq!(archived.worktree.unwrap().state, WorktreeState::Removed);
            assert_eq!(kept_because, None);

            // A session whose worktree a killed supervisor never made.
            let id = uuid::Uuid::now_v7().to_string();
            let git = corral.git().await.unwrap();
            let planned = plan(
                &git,
                &corral.settings(),
                corral.home(),
                &project,
                &id,
                Some("left"),
                None,
                None,
            )
            .await
            .unwrap();
            let left = corral
                .write(crate::actors::ledger::CreateSession {
                    session: NewSession {
                        project_id: project.id.clone(),
                        engine: Some(crate::engine::EngineKind::Command),
                        id: Some(id),
                        worktree: Some(planned),
                        ..Default::default()
                    },
                })
                .await
                .unwrap();
            (repo, left)
        });
        let path = PathBuf::from(&left.worktree.as_ref().unwrap().path);
        assert!(!path.exists());
        actix::System::new().block_on(async {
            let corral = Corral::start(CorralOptions::new(home.path()))
                .await
                .unwrap();
            let mut events = corral.subscribe();
            let now = corral
                .read(|c| sessions::session(c, &left.id))
                .unwrap()
                .unwrap();
            if now.worktree.as_ref().unwrap().state == WorktreeState::Creating {
                event_of(&mut events, &left.id, "worktree.created").await;
            }
            let made = corral
                .read(|c| sessions::session(c, &left.id))
                .unwrap()
                .unwrap();
            assert_eq!(made.worktree.unwrap().state, WorktreeState::Ready);
        });
        assert!(
            path.join("a.txt").is_file(),
            "made at the next start, with no prompt"
        );
        assert_eq!(
            repo.run(&path, &["rev-parse", "--abbrev-ref", "HEAD"]),
            left.worktree.unwrap().branch
        );
    }

    #[test]
    fn a_lost_checkout_is_told_from_a_directory_that_is_not_corrals() {
        let dir = tempfile::tempdir().unwrap();
        let common = dir.path().join("repo/.git");
        let checkout = dir.path().join("wt");
        std::fs::create_dir_all(&checkout).unwrap();
        assert!(!is_lost_checkout(&checkout, &common), "no .git file");
        let admin = common.join("worktrees/wt");
        std::fs::write(
            checkout.join(".git"),
            format!("gitdir: {}\n", admin.display()),
        )
        .unwrap();
        assert!(
            is_lost_checkout(&checkout, &common),
            "its registration is gone"
        );
        std::fs::create_dir_all(&admin).unwrap();
        assert!(
            !is_lost_checkout(&checkout, &common),
            "registered: not lost"
        );
        std::fs::write(
            checkout.join(".git"),
            "gitdir: /elsewhere/.git/worktrees/wt\n",
        )
        .unwrap();
        assert!(
            !is_lost_checkout(&checkout, &common),
            "another repository's"
        );
    }

    #[test]
    fn a_made_worktree_waits_for_setup_only_when_there_is_one() {
        let mut project = project("/r", None);
        assert_eq!(made_state(&project), WorktreeState::Ready);
        project.setup = Some("  ".into());
        assert_eq!(made_state(&project), WorktreeState::Ready);
        project.setup = Some("npm ci".into());
        assert_eq!(made_state(&project), WorktreeState::Setup);
    }
}
