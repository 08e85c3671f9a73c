//! corral's git layer: every git command corral runs for worktree isolation, async on tokio
//! (the daemon's actors share one thread: nothing here waits on git; the few file-system calls
//! are single stats, small reads of a repository's own records, a mkdir and a copy of an
//! index (tokio's), and a tree's removal goes to tokio's blocking pool).
//!
//! Map of the file:
//! - [`Git`]: the `git` found on PATH ([`Git::detect`], at least [`MIN_VERSION`]) and one method
//!   per question or change: [`Git::repo`], [`Git::head`], [`Git::resolve`],
//!   [`Git::is_branch_name`], [`Git::branch_exists`], [`Git::worktree_add`], [`Git::worktrees`], [`Git::checkout`],
//!   [`Git::is_clean`], [`Git::symbolic_head`], [`Git::has_submodules`],
//!   [`Git::worktree_remove`] (one registration: corral never prunes a whole repository),
//!   [`Git::diff`], [`Git::merge`];
//! - what they answer: [`Repo`], [`Head`], [`WorktreeEntry`], [`Checkout`], [`Diff`],
//!   [`Merged`], and [`GitError`], one clear line per way git can fail corral;
//! - `GitCommand`: the one place a git child is spawned (its own process group, the group killed
//!   when the call is dropped, SIGKILL when the daemon dies, `LC_ALL=C`, no prompts, no
//!   fsmonitor, no submodule recursion);
//! - the parsers of `git --version`, `git worktree list --porcelain` and `git diff --numstat`.
//!
//! A worktree is the agent's to write, its `.git` file and its submodules' included: git must
//! never find a repository from inside one (that repository's configuration names programs git
//! runs: `core.fsmonitor`, filters). So corral runs git in a work tree only through a
//! [`Checkout`], whose git directory comes from the main repository's own records
//! (`<common dir>/worktrees/<id>`), passed as `GIT_DIR` with `GIT_WORK_TREE`; and it never
//! lets git enter a submodule (`--ignore-submodules=all`, gitlinks left out of `add`).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The oldest git corral works with: `git worktree remove` came in 2.17.
pub const MIN_VERSION: GitVersion = GitVersion {
    major: 2,
    minor: 17,
    patch: 0,
};
/// [`MIN_VERSION`] as people write it.
const MIN_VERSION_TEXT: &str = "2.17";

/// Variables that would point git at another repository than the directory it is run in (set
/// when corral itself runs under git, in a hook): never passed on.
const LOCATION_VARIABLES: [&str; 8] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
];

/// Every way a git call fails corral; each displays as one line.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(
        "git is not on PATH: worktree isolation needs git {} or newer",
        MIN_VERSION_TEXT
    )]
    Missing,
    #[error("git {found} is too old: worktree isolation needs git {needed} or newer")]
    TooOld { found: String, needed: String },
    /// `stderr` is git's first meaningful line, without its `fatal: ` or `error: `.
    #[error("{what} failed: {stderr}")]
    Failed { what: String, stderr: String },
    #[error("the repository has no commit yet ({})", path.display())]
    NoCommit { path: PathBuf },
    #[error("no commit named '{rev}'")]
    UnknownRevision { rev: String },
    #[error("there is no branch '{branch}'")]
    NoBranch { branch: String },
    #[error("{} exists already", path.display())]
    Exists { path: PathBuf },
    #[error("{} is no worktree the repository records", path.display())]
    NotAWorktree { path: PathBuf },
    #[error("{} has uncommitted changes: commit or discard them first", path.display())]
    Dirty { path: PathBuf },
    #[error("the merge conflicts in {}: nothing was changed", files.join(", "))]
    Conflict { files: Vec<String> },
    #[error("{} is no longer on {into}: nothing was changed", checkout.display())]
    MovedAway { checkout: PathBuf, into: String },
    #[error("branch '{branch}' has nothing to merge into '{into}'")]
    NothingToMerge { branch: String, into: String },
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// A git version, as `git --version` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct GitVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl GitVersion {
    /// Reads `git version 2.47.3`, `git version 2.39.2 (Apple Git-143)`,
    /// `git version 2.45.1.windows.1`; the patch number may be missing.
    pub fn parse(output: &str) -> Option<GitVersion> {
        let number = output
            .trim()
            .strip_prefix("git version ")?
            .split_whitespace()
            .next()?;
        let mut parts = number.split('.').map(leading_number);
        Some(GitVersion {
            major: parts.next()??,
            minor: parts.next()??,
            patch: parts.next().flatten().unwrap_or(0),
        })
    }

    /// `git --version`'s answer, refused when older than [`MIN_VERSION`].
    fn check(output: &str) -> Result<GitVersion, GitError> {
        let version =
            GitVersion::parse(output).ok_or_else(|| unexpected("git --version", output))?;
        if version < MIN_VERSION {
            return Err(GitError::TooOld {
                found: version.to_string(),
                needed: MIN_VERSION_TEXT.to_owned(),
            });
        }
        Ok(version)
    }
}

impl fmt::Display for GitVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

fn leading_number(part: &str) -> Option<u32> {
    let digits = part.len() - part.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    part[..digits].parse().ok()
}

/// The repository a path belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repo {
    /// The top level of the work tree holding the path (a linked worktree's own root).
    pub toplevel: PathBuf,
    /// The repository's common git directory (absolute; shared by all its worktrees).
    pub common_dir: PathBuf,
    /// The path relative to `toplevel` (empty at the top level).
    pub prefix: PathBuf,
}

/// What a work tree has checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Head {
    /// A branch, by its short name (`main`, `corral/fix-1a2b3c4d`).
    Branch(String),
    /// A commit, by its sha.
    Detached(String),
}

/// One entry of `git worktree list --porcelain`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorktreeEntry {
    pub path: PathBuf,
    /// Its git directory as the repository records it: the common dir for the main work tree,
    /// `<common dir>/worktrees/<id>` (whose `gitdir` file names `<path>/.git`) for a linked one;
    /// none for a bare repository's entry or a registration whose record cannot be read.
    pub git_dir: Option<PathBuf>,
    /// The checked-out commit; none in a bare repository's entry.
    pub head: Option<String>,
    /// The checked-out branch's short name (`refs/heads/` taken off).
    pub branch: Option<String>,
    pub detached: bool,
    pub bare: bool,
    /// Locked, by `git worktree lock` or by a `git worktree add` that never finished.
    pub locked: bool,
    /// Its directory is gone: `git worktree prune` would drop it.
    pub prunable: bool,
}

/// A work tree as its repository records it: git runs there only with `GIT_DIR=git_dir` and
/// `GIT_WORK_TREE=root`, never finding its repository from the work tree's own `.git`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkout {
    pub root: PathBuf,
    pub git_dir: PathBuf,
}

impl Checkout {
    /// Whether the work tree's `.git` file still names its git directory, as git wrote it (an
    /// agent may have rewritten it; git then refuses to remove the worktree).
    pub async fn points_back(&self) -> bool {
        let gitfile = self.root.join(".git");
        let regular = tokio::fs::symlink_metadata(&gitfile)
            .await
            .is_ok_and(|meta| meta.is_file());
        if !regular {
            return false;
        }
        let Ok(text) = tokio::fs::read_to_string(&gitfile).await else {
            return false;
        };
        text.trim()
            .strip_prefix("gitdir: ")
            .is_some_and(|named| same_path(&self.root.join(named), &self.git_dir))
    }

    /// Writes the work tree's `.git` file back as git made it (naming its git directory), in
    /// place of a file or link there, so that git will remove the worktree.
    pub async fn restore_gitfile(&self) -> Result<(), GitError> {
        let gitfile = self.root.join(".git");
        let what = || format!("write {}", gitfile.display());
        if let Ok(meta) = tokio::fs::symlink_metadata(&gitfile).await {
            if !meta.is_dir() {
                tokio::fs::remove_file(&gitfile)
                    .await
                    .map_err(io_error(what()))?;
            }
        }
        let text = format!("gitdir: {}\n", self.git_dir.display());
        tokio::fs::write(&gitfile, text)
            .await
            .map_err(io_error(what()))
    }

    /// The git operation left in progress there (a rebase, a merge…), by the files git keeps
    /// in its git directory meanwhile.
    pub async fn operation_in_progress(&self) -> Option<&'static str> {
        const OPERATIONS: [(&str, &str); 6] = [
            ("rebase-merge", "a rebase"),
            ("rebase-apply", "a rebase"),
            ("MERGE_HEAD", "a merge"),
            ("CHERRY_PICK_HEAD", "a cherry-pick"),
            ("REVERT_HEAD", "a revert"),
            ("BISECT_LOG", "a bisect"),
        ];
        for (file, operation) in OPERATIONS {
            if tokio::fs::symlink_metadata(self.git_dir.join(file))
                .await
                .is_ok()
            {
                return Some(operation);
            }
        }
        None
    }
}

/// A work tree's changes against a commit, untracked files included.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diff {
    /// The patch, or the `--stat` summary when asked.
    pub text: String,
    /// Binary files count as changed files with no lines.
    pub files_changed: u32,
    pub insertions: u32,
    pub deletions: u32,
}

/// What [`Git::merge`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merged {
    /// The merge (or squash) commit `into` now points at.
    pub commit: String,
    pub into: String,
    /// The worktree where `into` is checked out, fast-forwarded to `commit`.
    pub checkout_updated: Option<PathBuf>,
}

/// The `git` program corral runs.
#[derive(Clone, Debug)]
pub struct Git {
    program: PathBuf,
    version: GitVersion,
    /// Variables every git child gets besides the fixed ones ([`Git::with_env`]).
    env: Vec<(OsString, OsString)>,
}

impl Git {
    /// The `git` on PATH, when it is at least [`MIN_VERSION`].
    pub async fn detect() -> Result<Git, GitError> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let program = find_on_path("git", &path).ok_or(GitError::Missing)?;
        let mut git = Git {
            program,
            version: MIN_VERSION,
            env: Vec::new(),
        };
        git.version = GitVersion::check(&git.command(None, &["--version"]).run().await?)?;
        Ok(git)
    }

    /// Every git child gets `name=value` too (tests isolate git's configuration with it).
    pub fn with_env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Git {
        self.env.push((name.into(), value.into()));
        self
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    pub fn version(&self) -> GitVersion {
        self.version
    }

    /// The repository `path` is in; `None` when it is in none.
    pub async fn repo(&self, path: &Path) -> Result<Option<Repo>, GitError> {
        let output = self
            .at(path, &["rev-parse"])
            .args(["--show-toplevel", "--git-common-dir", "--show-prefix"])
            .output()
            .await?;
        if !output.status.success() {
            if output.stderr.contains("not a git repository") {
                return Ok(None);
            }
            return Err(output.failed());
        }
        let mut lines = output.stdout.lines();
        let (Some(toplevel), Some(common_dir)) = (lines.next(), lines.next()) else {
            return Err(unexpected(&output.what, &output.stdout));
        };
        // The common dir may come relative to `path` (`.git`, `../../.git`).
        let common_dir = path.join(common_dir);
        let common_dir = std::fs::canonicalize(&common_dir)
            .map_err(io_error(format!("resolve {}", common_dir.display())))?;
        Ok(Some(Repo {
            toplevel: PathBuf::from(toplevel),
            common_dir,
            prefix: PathBuf::from(lines.next().unwrap_or("").trim_end_matches('/')),
        }))
    }

    /// What the work tree at `dir` has checked out; [`GitError::NoCommit`] in a repository
    /// without a commit.
    pub async fn head(&self, dir: &Path) -> Result<Head, GitError> {
        let (commit, branch) = tokio::join!(
            self.at(dir, &["rev-parse"])
                .args(["--verify", "--quiet", "HEAD^{commit}"])
                .output(),
            self.at(dir, &["symbolic-ref"])
                .args(["--quiet", "HEAD"])
                .output(),
        );
        let (commit, branch) = (commit?, branch?);
        match commit.status.code() {
            Some(0) => {}
            // `--verify --quiet` says "no such commit" by exiting 1 silently: HEAD is unborn.
            Some(1) => return Err(GitError::NoCommit { path: dir.into() }),
            _ => return Err(commit.failed()),
        }
        match branch.status.code() {
            Some(0) => Ok(Head::Branch(short_branch(branch.stdout.trim()).to_owned())),
            Some(1) => Ok(Head::Detached(commit.stdout.trim().to_owned())),
            _ => Err(branch.failed()),
        }
    }

    /// The sha of the commit `rev` names.
    pub async fn resolve(&self, dir: &Path, rev: &str) -> Result<String, GitError> {
        let unknown = || GitError::UnknownRevision {
            rev: rev.to_owned(),
        };
        // A rev that git would read as an option is no rev.
        if rev.is_empty() || rev.starts_with('-') {
            return Err(unknown());
        }
        self.commit_of(self.at(dir, &["rev-parse"]), rev).await
    }

    /// The sha of the commit `rev` names in a work tree.
    async fn resolve_within(&self, checkout: &Checkout, rev: &str) -> Result<String, GitError> {
        self.commit_of(self.within(checkout, &["rev-parse"]), rev)
            .await
    }

    /// `rev_parse` (a `git rev-parse` to run) asked for the commit `rev` names.
    async fn commit_of(&self, rev_parse: GitCommand, rev: &str) -> Result<String, GitError> {
        let unknown = || GitError::UnknownRevision {
            rev: rev.to_owned(),
        };
        let output = rev_parse
            .args(["--verify", "--quiet"])
            .arg(format!("{rev}^{{commit}}"))
            .output()
            .await?;
        match output.status.code() {
            Some(0) => Ok(output.stdout.trim().to_owned()),
            Some(1) => Err(unknown()),
            _ => Err(output.failed()),
        }
    }

    /// Whether `name` is a branch name git takes as it is (`git check-ref-format --branch`,
    /// which also expands `@{-1}`: a name it changes is refused too).
    pub async fn is_branch_name(&self, dir: &Path, name: &str) -> Result<bool, GitError> {
        if name.starts_with('-') {
            return Ok(false);
        }
        let output = self
            .at(dir, &["check-ref-format"])
            .args(["--branch", name])
            .output()
            .await?;
        Ok(output.status.success() && output.stdout.trim_end_matches('\n') == name)
    }

    pub async fn branch_exists(&self, dir: &Path, branch: &str) -> Result<bool, GitError> {
        let output = self
            .at(dir, &["show-ref"])
            .args(["--verify", "--quiet"])
            .arg(format!("refs/heads/{branch}"))
            .output()
            .await?;
        match output.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(output.failed()),
        }
    }

    /// Makes the worktree `path` of `repo`: on a new `branch` from `base_commit`
    /// (`new_branch`), else on the existing `branch` (`base_commit` unused); then initializes
    /// its submodules. `path` must not exist; its parent is made if missing. On failure what
    /// it made is taken back (worktree, directory, new branch), so nothing half-made is left;
    /// a call dropped midway (the daemon killed) leaves that to the caller's `creating` state.
    pub async fn worktree_add(
        &self,
        repo: &Path,
        path: &Path,
        branch: &str,
        base_commit: &str,
        new_branch: bool,
    ) -> Result<(), GitError> {
        if std::fs::symlink_metadata(path).is_ok() {
            return Err(GitError::Exists { path: path.into() });
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io_error(format!("create {}", parent.display())))?;
        }
        let makes_branch = new_branch && !self.branch_exists(repo, branch).await?;
        let made = self
            .checkout_worktree(repo, path, branch, base_commit, new_branch)
            .await;
        if made.is_err() {
            self.undo_worktree_add(repo, path, makes_branch.then_some((branch, base_commit)))
                .await;
        }
        made
    }

    async fn checkout_worktree(
        &self,
        repo: &Path,
        path: &Path,
        branch: &str,
        base_commit: &str,
        new_branch: bool,
    ) -> Result<(), GitError> {
        let add = self.at(repo, &["worktree", "add"]);
        let add = if new_branch {
            add.args(["-b", branch, "--"]).arg(path).arg(base_commit)
        } else {
            add.arg("--").arg(path).arg(branch)
        };
        add.run().await?;
        // Just made: no agent has run there yet, so its `.git` file is git's own.
        if path.join(".gitmodules").exists() {
            self.at(path, &["submodule", "update"])
                .args(["--init", "--recursive"])
                .run()
                .await?;
        }
        Ok(())
    }

    /// Takes back what a failed [`Git::worktree_add`] made, as far as it can: the first
    /// failure is the one reported.
    async fn undo_worktree_add(&self, repo: &Path, path: &Path, made_branch: Option<(&str, &str)>) {
        if self.worktree_remove(repo, path, true).await.is_err() {
            // Not registered (git stopped before): only a directory may be left, and `path`
            // did not exist before the call.
            let path = path.to_owned();
            let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(path)).await;
        }
        if let Some((branch, base_commit)) = made_branch {
            // The old value makes git delete it only while it is where it was made.
            let _ = self
                .at(repo, &["update-ref"])
                .arg("-d")
                .arg(format!("refs/heads/{branch}"))
                .arg(base_commit)
                .run()
                .await;
        }
    }

    /// The repository's worktrees, its main one first.
    pub async fn worktrees(&self, repo: &Path) -> Result<Vec<WorktreeEntry>, GitError> {
        let listed = self
            .at(repo, &["worktree", "list"])
            .arg("--porcelain")
            .run()
            .await?;
        let mut entries = parse_worktrees(&listed);
        // git says `prunable` itself only since 2.31.
        for entry in &mut entries {
            if !entry.prunable {
                entry.prunable = !entry.path.exists();
            }
        }
        let common_dir = match self.repo(repo).await? {
            Some(found) => found.common_dir,
            None => return Err(GitError::NotAWorktree { path: repo.into() }),
        };
        let linked = linked_worktrees(&common_dir).await;
        for (n, entry) in entries.iter_mut().enumerate() {
            entry.git_dir = match n {
                0 => (!entry.bare).then(|| common_dir.clone()),
                _ => linked
                    .iter()
                    .find(|(root, _)| same_path(root, &entry.path))
                    .map(|(_, admin)| admin.clone()),
            };
        }
        Ok(entries)
    }

    /// The work tree of `repo` at `path`, with the git directory the repository records for
    /// it ([`Checkout`]); [`GitError::NotAWorktree`] when the repository records none there.
    pub async fn checkout(&self, repo: &Path, path: &Path) -> Result<Checkout, GitError> {
        let entries = self.worktrees(repo).await?;
        let entry = entries
            .into_iter()
            .find(|entry| !entry.prunable && same_path(&entry.path, path));
        match entry.and_then(|entry| entry.git_dir) {
            Some(git_dir) => Ok(Checkout {
                root: path.to_path_buf(),
                git_dir,
            }),
            None => Err(GitError::NotAWorktree { path: path.into() }),
        }
    }

    /// Whether `git status` shows nothing: no change, no untracked file (ignored ones aside).
    /// Submodules are not looked into (their `.git` is the work tree's to rewrite): whether a
    /// work tree has any is [`Git::has_submodules`].
    pub async fn is_clean(&self, checkout: &Checkout) -> Result<bool, GitError> {
        let status = self
            .within(checkout, &["status"])
            .args([
                "--porcelain=v1",
                "--untracked-files=all",
                "--ignore-submodules=all",
            ])
            // Its engine may be using the index: status must not take its lock to refresh it.
            .env("GIT_OPTIONAL_LOCKS", "0")
            .run()
            .await?;
        Ok(status.is_empty())
    }

    /// The ref a work tree's HEAD points to (`refs/heads/main`); none when it is detached.
    pub async fn symbolic_head(&self, checkout: &Checkout) -> Result<Option<String>, GitError> {
        let output = self
            .within(checkout, &["symbolic-ref"])
            .args(["--quiet", "HEAD"])
            .output()
            .await?;
        match output.status.code() {
            Some(0) => Ok(Some(output.stdout.trim().to_owned())),
            Some(1) => Ok(None),
            _ => Err(output.failed()),
        }
    }

    /// Whether the work tree has submodules (a `.gitmodules`, or a gitlink in its index):
    /// their commits live in repositories corral cannot check.
    pub async fn has_submodules(&self, checkout: &Checkout) -> Result<bool, GitError> {
        if tokio::fs::symlink_metadata(checkout.root.join(".gitmodules"))
            .await
            .is_ok()
        {
            return Ok(true);
        }
        let staged = self
            .within(checkout, &["ls-files"])
            .args(["--stage", "-z"])
            .run()
            .await?;
        Ok(!gitlinks(&staged).is_empty())
    }

    /// Removes the worktree `path` of `repo` (directory and registration; its branch stays),
    /// whatever is in it: the caller has checked it ([`Git::is_clean`] and the rest). git's own
    /// check would run `git status` through the worktree's `.git` file, submodules included.
    /// `unlock` also removes a locked one (as an interrupted `git worktree add` leaves it).
    /// A registration whose directory is gone is dropped (only that one: no prune).
    pub async fn worktree_remove(
        &self,
        repo: &Path,
        path: &Path,
        unlock: bool,
    ) -> Result<(), GitError> {
        let force: &[&str] = if unlock {
            &["--force", "--force"]
        } else {
            &["--force"]
        };
        self.at(repo, &["worktree", "remove"])
            .args(force)
            .arg("--")
            .arg(path)
            .run()
            .await
            .map(drop)
    }

    /// The changes in `checkout` against `base_commit`, untracked files included, the
    /// worktree's own index untouched (its engine may be using it). A submodule shows as its
    /// recorded commit (`--submodule=short`): git never looks into one.
    pub async fn diff(
        &self,
        checkout: &Checkout,
        base_commit: &str,
        stat: bool,
    ) -> Result<Diff, GitError> {
        let index = tempfile::Builder::new()
            .prefix("corral-index-")
            .tempdir()
            .map_err(io_error("make a temporary index".to_owned()))?;
        let tree = self
            .worktree_tree(checkout, &index.path().join("index"))
            .await?;
        let diff = |extra: Option<&str>| {
            self.within(checkout, &["diff"])
                .args(["--no-color", "--no-ext-diff", "--submodule=short"])
                .args(extra)
                .args([base_commit, tree.as_str(), "--"])
                .run()
        };
        let stat = stat.then_some("--stat");
        let (text, numstat) = tokio::try_join!(diff(stat), diff(Some("--numstat")))?;
        let (files_changed, insertions, deletions) = parse_numstat(&numstat);
        Ok(Diff {
            text,
            files_changed,
            insertions,
            deletions,
        })
    }

    /// The tree of everything in `checkout` now (untracked files in, ignored ones out),
    /// written through the temporary index file `index`: HEAD read into it, then `add -A` of
    /// all but its gitlinks (for each, `add` would run `git status` inside the submodule).
    async fn worktree_tree(&self, checkout: &Checkout, index: &Path) -> Result<String, GitError> {
        // A copy of the worktree's index lends its stat cache (`read-tree --reset` keeps it
        // where HEAD matches): `add -A` then hashes only changed files, not the whole tree.
        // Only a regular file is copied (a FIFO would never end), off the actor thread.
        let own = checkout.git_dir.join("index");
        let regular = tokio::fs::symlink_metadata(&own)
            .await
            .is_ok_and(|meta| meta.is_file());
        let copied = regular && tokio::fs::copy(&own, index).await.is_ok();
        let with_index = |words: &[&str]| self.within(checkout, words).env("GIT_INDEX_FILE", index);
        let read = with_index(&["read-tree"])
            .args(["--reset", "HEAD"])
            .run()
            .await;
        if read.is_err() && copied {
            // A copy git cannot read on its own (a split index): start from HEAD alone.
            let _ = tokio::fs::remove_file(index).await;
            with_index(&["read-tree"]).arg("HEAD").run().await?;
        } else {
            read?;
        }
        let staged = with_index(&["ls-files"])
            .args(["--stage", "-z"])
            .run()
            .await?;
        let excluded = gitlinks(&staged)
            .into_iter()
            .map(|path| format!(":(exclude,literal){path}"));
        with_index(&["add"])
            .args(["-A", "--", "."])
            .args(excluded)
            .run()
            .await?;
        let tree = with_index(&["write-tree"]).run().await?;
        Ok(tree.trim().to_owned())
    }

    /// Merges `branch` into `into` without touching the person's checkout until the merge is
    /// made: both sides must be clean ([`GitError::Dirty`]); the merge (`--no-ff`, or
    /// `--squash` and a commit, with `message`) is made in a detached worktree at `scratch`;
    /// a conflict ([`GitError::Conflict`]) changes nothing. Then `into` moves: the clean
    /// checkout where it is checked out is fast-forwarded, else the ref is updated (from the
    /// value it had, or not at all). The scratch worktree is removed whatever happens; what a
    /// merge killed midway left at `scratch` (its caller names it the same each time) is
    /// cleared first (see `clear_scratch`).
    pub async fn merge(
        &self,
        repo: &Path,
        scratch: &Path,
        branch: &str,
        into: &str,
        squash: bool,
        message: &str,
    ) -> Result<Merged, GitError> {
        let plan = self.merge_plan(repo, branch, into).await?;
        self.clear_scratch(repo, scratch).await?;
        let merged = self
            .merge_in_scratch(repo, scratch, &plan, squash, message)
            .await;
        let removed = if scratch.exists() {
            self.worktree_remove(repo, scratch, true).await
        } else {
            Ok(())
        };
        if let Err(error) = removed {
            // The merge's outcome stands; a stale scratch is cleared by the next merge.
            tracing::warn!(scratch = %scratch.display(), %error, "scratch worktree left");
        }
        merged
    }

    /// Both tips, where each branch is checked out, and the refusals that need no merge.
    async fn merge_plan(
        &self,
        repo: &Path,
        branch: &str,
        into: &str,
    ) -> Result<MergePlan, GitError> {
        let nothing = || GitError::NothingToMerge {
            branch: branch.to_owned(),
            into: into.to_owned(),
        };
        if branch == into {
            return Err(nothing());
        }
        let branch_commit = self.branch_tip(repo, branch).await?;
        let into_commit = self.branch_tip(repo, into).await?;
        let worktrees = self.worktrees(repo).await?;
        let checkout = |name: &str| -> Result<Option<Checkout>, GitError> {
            let Some(entry) = worktrees
                .iter()
                .find(|entry| !entry.prunable && entry.branch.as_deref() == Some(name))
            else {
                return Ok(None);
            };
            let git_dir = entry
                .git_dir
                .clone()
                .ok_or_else(|| GitError::NotAWorktree {
                    path: entry.path.clone(),
                })?;
            Ok(Some(Checkout {
                root: entry.path.clone(),
                git_dir,
            }))
        };
        let (branch_checkout, into_checkout) = (checkout(branch)?, checkout(into)?);
        for checkout in [&branch_checkout, &into_checkout].into_iter().flatten() {
            if !self.is_clean(checkout).await? {
                return Err(GitError::Dirty {
                    path: checkout.root.clone(),
                });
            }
        }
        if self.is_ancestor(repo, &branch_commit, &into_commit).await? {
            return Err(nothing());
        }
        Ok(MergePlan {
            branch: branch.to_owned(),
            into: into.to_owned(),
            branch_commit,
            into_commit,
            into_checkout,
        })
    }

    async fn branch_tip(&self, repo: &Path, branch: &str) -> Result<String, GitError> {
        match self.resolve(repo, &format!("refs/heads/{branch}")).await {
            Err(GitError::UnknownRevision { .. }) => Err(GitError::NoBranch {
                branch: branch.to_owned(),
            }),
            tip => tip,
        }
    }

    async fn is_ancestor(&self, repo: &Path, commit: &str, of: &str) -> Result<bool, GitError> {
        let output = self
            .at(repo, &["merge-base"])
            .args(["--is-ancestor", commit, of])
            .output()
            .await?;
        match output.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(output.failed()),
        }
    }

    /// Clears what a merge killed midway left at `scratch` (its name is fixed per session):
    /// a detached worktree of `repo` there is removed, an empty directory too, a registration
    /// whose directory is gone dropped; anything else there (a symbolic link, a worktree on a
    /// branch, files) is not corral's to remove.
    async fn clear_scratch(&self, repo: &Path, scratch: &Path) -> Result<(), GitError> {
        let taken = || GitError::Exists {
            path: scratch.into(),
        };
        let entries = self.worktrees(repo).await?;
        let entry = entries.iter().find(|entry| same_path(&entry.path, scratch));
        let Ok(meta) = tokio::fs::symlink_metadata(scratch).await else {
            return match entry {
                Some(_) => self.worktree_remove(repo, scratch, true).await,
                None => Ok(()),
            };
        };
        if !meta.is_dir() {
            return Err(taken());
        }
        match entry {
            Some(entry) if entry.detached => self.worktree_remove(repo, scratch, true).await,
            Some(_) => Err(taken()),
            None => tokio::fs::remove_dir(scratch).await.map_err(|_| taken()),
        }
    }

    /// The merge made in a detached worktree at `scratch`, then `into` moved to it.
    async fn merge_in_scratch(
        &self,
        repo: &Path,
        scratch: &Path,
        plan: &MergePlan,
        squash: bool,
        message: &str,
    ) -> Result<Merged, GitError> {
        // The scratch checkout needs no large files: LFS leaves their pointers in. `--force`
        // overrides a registration of the path left meanwhile.
        self.at(repo, &["worktree", "add"])
            .args(["--detach", "--force", "--"])
            .arg(scratch)
            .arg(&plan.into_commit)
            .env("GIT_LFS_SKIP_SMUDGE", "1")
            .run()
            .await?;
        let scratch = &self.checkout(repo, scratch).await?;
        let merge = self
            .within(scratch, &["merge"])
            .env("GIT_LFS_SKIP_SMUDGE", "1");
        let merge = if squash {
            merge.arg("--squash")
        } else {
            merge.args(["--no-ff", "--no-edit", "-m", message])
        };
        let output = merge.arg(&plan.branch_commit).output().await?;
        if !output.status.success() {
            return Err(self.merge_failed(scratch, squash, output).await);
        }
        if squash {
            let staged = self
                .within(scratch, &["diff"])
                .args(["--cached", "--quiet", "--ignore-submodules=all"])
                .output()
                .await?;
            if staged.status.success() {
                // Its changes are in `into` already (squash-merged before).
                return Err(GitError::NothingToMerge {
                    branch: plan.branch.clone(),
                    into: plan.into.clone(),
                });
            }
            self.within(scratch, &["commit"])
                .args(["--quiet", "-m", message])
                .run()
                .await?;
        }
        let commit = self.resolve_within(scratch, "HEAD").await?;
        let checkout_updated = match &plan.into_checkout {
            Some(checkout) => {
                // Still on `into` (it may have switched since the plan): else nothing moves.
                let on_into = format!("refs/heads/{}", plan.into);
                if self.symbolic_head(checkout).await?.as_deref() != Some(on_into.as_str()) {
                    return Err(GitError::MovedAway {
                        checkout: checkout.root.clone(),
                        into: plan.into.clone(),
                    });
                }
                // A fast-forward of the person's clean checkout, as `git pull --ff-only` does:
                // git refuses it if the checkout moved or would lose local changes meanwhile.
                self.within(checkout, &["merge"])
                    .args(["--ff-only", "--quiet", commit.as_str()])
                    .run()
                    .await?;
                Some(checkout.root.clone())
            }
            None => {
                self.at(repo, &["update-ref"])
                    .arg("-m")
                    .arg(format!("corral: merge {}", plan.branch))
                    .arg(format!("refs/heads/{}", plan.into))
                    .args([&commit, &plan.into_commit])
                    .run()
                    .await?;
                None
            }
        };
        Ok(Merged {
            commit,
            into: plan.into.clone(),
            checkout_updated,
        })
    }

    /// A failed merge in `scratch`: a conflict (the merge undone, its files named) or git's
    /// own error.
    async fn merge_failed(&self, scratch: &Checkout, squash: bool, output: GitOutput) -> GitError {
        let conflicted = self
            .within(scratch, &["diff"])
            .args(["--name-only", "-z", "--diff-filter=U"])
            .run()
            .await;
        let files: Vec<String> = match conflicted {
            Ok(names) => names
                .split('\0')
                .filter(|n| !n.is_empty())
                .map(Into::into)
                .collect(),
            Err(_) => Vec::new(),
        };
        if files.is_empty() {
            return output.failed();
        }
        // The scratch worktree goes anyway; undoing first leaves nothing even if that fails.
        let undo = if squash {
            self.within(scratch, &["reset"]).args(["--hard", "--quiet"])
        } else {
            self.within(scratch, &["merge"]).arg("--abort")
        };
        let _ = undo.run().await;
        GitError::Conflict { files }
    }

    /// A git command run in `dir` (`git -C dir WORDS…`); see [`Git::command`].
    fn at(&self, dir: &Path, words: &[&str]) -> GitCommand {
        self.command(Some(dir), words)
    }

    /// A git command run in a work tree, its repository given (`GIT_DIR`, `GIT_WORK_TREE`):
    /// git never reads the work tree's own `.git`.
    fn within(&self, checkout: &Checkout, words: &[&str]) -> GitCommand {
        self.at(&checkout.root, words)
            .env("GIT_DIR", &checkout.git_dir)
            .env("GIT_WORK_TREE", &checkout.root)
    }

    /// `git [-C dir] WORDS…` (the words name the command in errors; add its arguments to
    /// the answer), as every git child runs: in its own process group, stdin closed, output
    /// captured, killed with its group when the call is dropped, SIGKILL when the process
    /// that spawned it dies, in the C locale (its errors are read), never prompting.
    fn command(&self, dir: Option<&Path>, words: &[&str]) -> GitCommand {
        let mut command = tokio::process::Command::new(&self.program);
        if let Some(dir) = dir {
            command.arg("-C").arg(dir);
        }
        // No program a repository's configuration names for these (an fsmonitor daemon), and
        // never into a submodule unless asked (`submodule update --recursive` is explicit).
        command
            .args([
                "-c",
                "core.fsmonitor=false",
                "-c",
                "submodule.recurse=false",
            ])
            .args(words)
            .env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        for name in LOCATION_VARIABLES {
            command.env_remove(name);
        }
        command.envs(self.env.iter().map(|(name, value)| (name, value)));
        crate::process::dies_with_this_process(&mut command);
        GitCommand {
            what: format!("git {}", words.join(" ")).trim_end().to_owned(),
            command,
        }
    }
}

/// [`Git::merge`]'s findings before it merges.
struct MergePlan {
    branch: String,
    into: String,
    branch_commit: String,
    into_commit: String,
    /// The clean worktree where `into` is checked out.
    into_checkout: Option<Checkout>,
}

/// One git invocation, ready to run.
struct GitCommand {
    /// `git worktree add`: how errors name it.
    what: String,
    command: tokio::process::Command,
}

/// How a git invocation ended.
struct GitOutput {
    what: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl GitCommand {
    fn arg(mut self, arg: impl AsRef<OsStr>) -> GitCommand {
        self.command.arg(arg);
        self
    }

    fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> GitCommand {
        self.command.args(args);
        self
    }

    fn env(mut self, name: &str, value: impl AsRef<OsStr>) -> GitCommand {
        self.command.env(name, value);
        self
    }

    /// Runs it to its end; an error only when it cannot be run.
    async fn output(mut self) -> Result<GitOutput, GitError> {
        let child = self.command.spawn().map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                GitError::Missing
            } else {
                io_error(format!("run {}", self.what))(source)
            }
        })?;
        let mut child = Group(child);
        let (stdout, stderr) = (child.0.stdout.take(), child.0.stderr.take());
        let (status, stdout, stderr) =
            tokio::try_join!(child.0.wait(), read_all(stdout), read_all(stderr))
                .map_err(io_error(format!("run {}", self.what)))?;
        Ok(GitOutput {
            what: self.what,
            status,
            stdout,
            stderr,
        })
    }

    /// Runs it and answers its stdout; a nonzero exit is [`GitError::Failed`].
    async fn run(self) -> Result<String, GitError> {
        self.output().await?.success()
    }
}

impl GitOutput {
    fn success(self) -> Result<String, GitError> {
        if self.status.success() {
            Ok(self.stdout)
        } else {
            Err(self.failed())
        }
    }

    fn failed(self) -> GitError {
        GitError::Failed {
            stderr: first_meaningful_line(&self.stderr)
                .unwrap_or_else(|| format!("it ended with {}", self.status)),
            what: self.what,
        }
    }
}

/// A running git child. Dropped before its end (its call cancelled), its whole group is
/// killed: git's own children (hooks, submodule clones) too, not only the git tokio kills.
struct Group(tokio::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        // `id` is none once the child is reaped: its group id cannot have been reused.
        if let Some(pid) = self.0.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

async fn read_all(pipe: Option<impl AsyncRead + Unpin>) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    if let Some(mut pipe) = pipe {
        pipe.read_to_end(&mut bytes).await?;
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The line of git's stderr that says what went wrong: its first `fatal:` or `error:` line
/// (progress such as "Preparing worktree" comes before), else its first line that is no hint
/// or warning, else its first line; the prefix taken off.
fn first_meaningful_line(stderr: &str) -> Option<String> {
    let lines = || {
        stderr
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
    };
    let line = lines()
        .find(|line| line.starts_with("fatal:") || line.starts_with("error:"))
        .or_else(|| lines().find(|l| !l.starts_with("hint:") && !l.starts_with("warning:")))
        .or_else(|| lines().next())?;
    let line = ["fatal:", "error:"]
        .iter()
        .find_map(|prefix| line.strip_prefix(prefix))
        .unwrap_or(line);
    Some(line.trim().to_owned())
}

fn unexpected(what: &str, stdout: &str) -> GitError {
    GitError::Failed {
        what: what.to_owned(),
        stderr: format!("unexpected output: {}", stdout.trim()),
    }
}

fn io_error(what: String) -> impl FnOnce(std::io::Error) -> GitError {
    move |source| GitError::Io { what, source }
}

/// The linked worktrees `common_dir` records: (root, admin dir) for each
/// `<common_dir>/worktrees/<id>` whose `gitdir` file (a regular file) names `<root>/.git`,
/// absolute or (git 2.48's `worktree.useRelativePaths`) relative to the admin dir.
async fn linked_worktrees(common_dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut found = Vec::new();
    let Ok(mut dirs) = tokio::fs::read_dir(common_dir.join("worktrees")).await else {
        return found;
    };
    while let Ok(Some(dir)) = dirs.next_entry().await {
        let admin = dir.path();
        let gitdir = admin.join("gitdir");
        let regular = tokio::fs::symlink_metadata(&gitdir)
            .await
            .is_ok_and(|meta| meta.is_file());
        if !regular {
            continue;
        }
        let Ok(text) = tokio::fs::read_to_string(&gitdir).await else {
            continue;
        };
        let named = admin.join(text.trim());
        if let Some(root) = named.parent().filter(|_| named.ends_with(".git")) {
            found.push((root.to_path_buf(), admin));
        }
    }
    found
}

/// Whether two paths name one place (compared resolved when they exist).
fn same_path(a: &Path, b: &Path) -> bool {
    let resolved = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.into());
    a == b || resolved(a) == resolved(b)
}

fn short_branch(reference: &str) -> &str {
    reference.strip_prefix("refs/heads/").unwrap_or(reference)
}

/// The executable `name` in an absolute directory of `path` (a PATH value), as a shell finds
/// it; relative entries (`.`, empty) are skipped: corral runs no program from wherever it is.
fn find_on_path(name: &str, path: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// The entries of `git worktree list --porcelain`: a `worktree PATH` line opens each, then
/// `HEAD SHA`, `branch REF` or `detached`, and maybe `bare`, `locked [REASON]`,
/// `prunable [REASON]`; blank lines between.
fn parse_worktrees(porcelain: &str) -> Vec<WorktreeEntry> {
    let mut entries: Vec<WorktreeEntry> = Vec::new();
    for line in porcelain.lines() {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        if key == "worktree" {
            entries.push(WorktreeEntry {
                path: PathBuf::from(value),
                ..WorktreeEntry::default()
            });
            continue;
        }
        let Some(entry) = entries.last_mut() else {
            continue;
        };
        match key {
            "HEAD" => entry.head = Some(value.to_owned()),
            "branch" => entry.branch = Some(short_branch(value).to_owned()),
            "detached" => entry.detached = true,
            "bare" => entry.bare = true,
            "locked" => entry.locked = true,
            "prunable" => entry.prunable = true,
            _ => {}
        }
    }
    entries
}

/// The paths of the gitlinks (submodules) in `git ls-files --stage -z` (`MODE SHA STAGE\tPATH`
/// entries, NUL-ended).
fn gitlinks(staged: &str) -> Vec<&str> {
    staged
        .split('\0')
        .filter_map(|entry| entry.split_once('\t'))
        .filter(|(info, _)| info.starts_with("160000 "))
        .map(|(_, path)| path)
        .collect()
}

/// Files, insertions and deletions from `git diff --numstat` (`ADDED\tDELETED\tPATH`; a
/// binary file's numbers are `-`).
fn parse_numstat(numstat: &str) -> (u32, u32, u32) {
    let mut totals = (0, 0, 0);
    for line in numstat.lines().filter(|line| !line.trim().is_empty()) {
        let mut numbers = line.split('\t').map(|n| n.parse::<u32>().unwrap_or(0));
        totals.0 += 1;
        totals.1 += numbers.next().unwrap_or(0);
        totals.2 += numbers.next().unwrap_or(0);
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Read};
    use std::os::fd::{AsRawFd, BorrowedFd};
    use std::time::Duration;

    /// A temporary directory and a [`Git`] whose configuration is this test's alone (the
    /// process's environment is never changed: tests run in parallel threads).
    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        git: Git,
    }

    impl Fixture {
        async fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            let config = root.join("gitconfig");
            // Local submodules need the file protocol, which git refuses by default since 2.38.
            std::fs::write(
                &config,
                "[init]\n\tdefaultBranch = main\n[protocol \"file\"]\n\tallow = always\n",
            )
            .unwrap();
            let mut git = Git::detect()
                .await
                .unwrap()
                .with_env("GIT_CONFIG_GLOBAL", &config)
                .with_env("GIT_CONFIG_NOSYSTEM", "1");
            for (name, value) in [
                ("GIT_AUTHOR_NAME", "corral test"),
                ("GIT_AUTHOR_EMAIL", "test@corral.invalid"),
                ("GIT_COMMITTER_NAME", "corral test"),
                ("GIT_COMMITTER_EMAIL", "test@corral.invalid"),
            ] {
                git = git.with_env(name, value);
            }
            Fixture {
                _dir: dir,
                root,
                git,
            }
        }

        /// `git ARGS…` in `dir`, which must succeed: its stdout.
        async fn git(&self, dir: &Path, args: &[&str]) -> String {
            self.git.at(dir, &[]).args(args).run().await.unwrap()
        }

        /// A new repository `name` whose one commit holds `a.txt`.
        async fn repo(&self, name: &str) -> PathBuf {
            self.git(&self.root, &["init", "-q", name]).await;
            let path = self.root.join(name);
            self.commit(&path, "a.txt", "one\n", "first").await;
            path
        }

        /// Writes `file` in `dir` and commits it: the new commit's sha.
        async fn commit(&self, dir: &Path, file: &str, text: &str, message: &str) -> String {
            std::fs::write(dir.join(file), text).unwrap();
            self.git(dir, &["add", file]).await;
            self.git(dir, &["commit", "-q", "-m", message]).await;
            self.sha(dir, "HEAD").await
        }

        async fn sha(&self, dir: &Path, rev: &str) -> String {
            self.git.resolve(dir, rev).await.unwrap()
        }

        /// The work tree `path` of `repo`, as the repository records it.
        async fn checkout(&self, repo: &Path, path: &Path) -> Checkout {
            self.git.checkout(repo, path).await.unwrap()
        }

        async fn status(&self, dir: &Path) -> String {
            self.git(dir, &["status", "--porcelain=v1", "--untracked-files=all"])
                .await
        }

        /// A repository `main` and a session worktree on `corral/s` from main's HEAD (or from
        /// `from`), with one commit of `file`: (main, worktree, base commit).
        async fn session(&self, from: &str, file: &str, text: &str) -> (PathBuf, PathBuf, String) {
            let main = self.repo("main").await;
            let base = self.sha(&main, from).await;
            let worktree = self.root.join("worktrees/main/s");
            self.git
                .worktree_add(&main, &worktree, "corral/s", &base, true)
                .await
                .unwrap();
            self.commit(&worktree, file, text, "session work").await;
            (main, worktree, base)
        }
    }

    fn text(path: &Path) -> &str {
        path.to_str().unwrap()
    }

    #[test]
    fn versions_are_read_and_old_ones_refused() {
        let version = |major, minor, patch| GitVersion {
            major,
            minor,
            patch,
        };
        let parse = GitVersion::parse;
        assert_eq!(parse("git version 2.47.3\n"), Some(version(2, 47, 3)));
        assert_eq!(
            parse("git version 2.39.2 (Apple Git-143)"),
            Some(version(2, 39, 2))
        );
        assert_eq!(
            parse("git version 2.45.1.windows.1"),
            Some(version(2, 45, 1))
        );
        assert_eq!(parse("git version 2.17"), Some(version(2, 17, 0)));
        assert_eq!(parse("git version 2.18.0.rc2"), Some(version(2, 18, 0)));
        assert_eq!(parse("hub version 2.14.2"), None);
        assert_eq!(parse("git version x.1"), None);

        assert_eq!(
            GitVersion::check("git version 2.17.0").unwrap(),
            MIN_VERSION
        );
        let too_old = GitVersion::check("git version 2.16.6").unwrap_err();
        assert!(
            matches!(&too_old, GitError::TooOld { found, needed } if found == "2.16.6" && needed == "2.17"),
            "{too_old:?}"
        );
        assert_eq!(
            too_old.to_string(),
            "git 2.16.6 is too old: worktree isolation needs git 2.17 or newer"
        );
        assert_eq!(
            GitError::Missing.to_string(),
            "git is not on PATH: worktree isolation needs git 2.17 or newer"
        );
        assert!(matches!(
            GitVersion::check("nonsense"),
            Err(GitError::Failed { .. })
        ));
    }

    #[test]
    fn git_is_found_on_path_as_a_shell_finds_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let make = |sub: &str, mode: u32| {
            let bin = dir.path().join(sub);
            std::fs::create_dir_all(&bin).unwrap();
            let git = bin.join("git");
            std::fs::write(&git, "").unwrap();
            std::fs::set_permissions(&git, std::fs::Permissions::from_mode(mode)).unwrap();
            bin
        };
        let (plain, runnable) = (make("plain", 0o644), make("runnable", 0o755));
        let path = std::env::join_paths([
            PathBuf::from("relative"),
            dir.path().join("absent"),
            plain,
            runnable.clone(),
        ])
        .unwrap();
        assert_eq!(find_on_path("git", &path), Some(runnable.join("git")));
        assert_eq!(find_on_path("git", OsStr::new("")), None);
        assert_eq!(
            find_on_path("git", dir.path().join("plain").as_os_str()),
            None
        );
    }

    #[tokio::test]
    async fn detect_finds_this_machines_git() {
        let git = Git::detect().await.unwrap();
        assert!(git.version() >= MIN_VERSION);
        assert!(git.program().is_absolute() && git.program().ends_with("git"));
    }

    #[test]
    fn git_errors_are_told_by_their_meaningful_line() {
        let add =
            "Preparing worktree (new branch 'main')\nfatal: a branch named 'main' already exists\n";
        assert_eq!(
            first_meaningful_line(add).as_deref(),
            Some("a branch named 'main' already exists")
        );
        assert_eq!(
            first_meaningful_line("\nhint: try this\n  something broke  \n").as_deref(),
            Some("something broke")
        );
        assert_eq!(first_meaningful_line(" \n"), None);
    }

    #[tokio::test]
    async fn repo_is_found_from_its_top_a_subdirectory_and_a_linked_worktree() {
        let f = Fixture::new().await;
        let main = f.repo("main").await;
        let at_top = f.git.repo(&main).await.unwrap().unwrap();
        assert_eq!(
            at_top,
            Repo {
                toplevel: main.clone(),
                common_dir: main.join(".git"),
                prefix: PathBuf::new(),
            }
        );

        std::fs::create_dir_all(main.join("src/deep")).unwrap();
        let below = f.git.repo(&main.join("src/deep")).await.unwrap().unwrap();
        assert_eq!(below.toplevel, main);
        assert_eq!(below.common_dir, main.join(".git"));
        assert_eq!(below.prefix, PathBuf::from("src/deep"));

        // The project path is itself a linked worktree: its own top, the shared common dir,
        // and worktrees made from it belong to the one repository.
        let linked = f.root.join("linked");
        f.git(
            &main,
            &["worktree", "add", "-q", "-b", "side", text(&linked)],
        )
        .await;
        let repo = f.git.repo(&linked).await.unwrap().unwrap();
        assert_eq!(repo.toplevel, linked);
        assert_eq!(repo.common_dir, main.join(".git"));
        assert_eq!(repo.prefix, PathBuf::new());
        let one = f.root.join("worktrees/one");
        f.git
            .worktree_add(&linked, &one, "corral/one", "HEAD", true)
            .await
            .unwrap();
        let paths: Vec<_> = f
            .git
            .worktrees(&main)
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, [main, linked, one]);
    }

    #[tokio::test]
    async fn outside_a_repository_is_none_and_a_repository_without_commit_says_so() {
        let f = Fixture::new().await;
        let plain = f.root.join("plain");
        std::fs::create_dir(&plain).unwrap();
        assert_eq!(f.git.repo(&plain).await.unwrap(), None);

        f.git(&f.root, &["init", "-q", "empty"]).await;
        let empty = f.root.join("empty");
        assert_eq!(f.git.repo(&empty).await.unwrap().unwrap().toplevel, empty);
        let error = f.git.head(&empty).await.unwrap_err();
        assert!(matches!(&error, GitError::NoCommit { path } if *path == empty));
        assert!(error
            .to_string()
            .starts_with("the repository has no commit yet"));

        let gone = f.git.repo(&f.root.join("absent")).await.unwrap_err();
        assert!(matches!(&gone, GitError::Failed { what, .. } if what == "git rev-parse"));
    }

    #[tokio::test]
    async fn head_resolve_and_branch_exists_answer_what_is_there() {
        let f = Fixture::new().await;
        let main = f.repo("main").await;
        let first = f.sha(&main, "HEAD").await;
        assert_eq!(
            f.git.head(&main).await.unwrap(),
            Head::Branch("main".into())
        );
        f.commit(&main, "a.txt", "two\n", "second").await;
        f.git(&main, &["checkout", "-q", "--detach", "HEAD~1"])
            .await;
        assert_eq!(
            f.git.head(&main).await.unwrap(),
            Head::Detached(first.clone())
        );

        assert_eq!(f.sha(&main, "main~1").await, first);
        for rev in ["no-such-thing", "-h", ""] {
            let error = f.git.resolve(&main, rev).await.unwrap_err();
            assert!(
                matches!(&error, GitError::UnknownRevision { rev: r } if r == rev),
                "{error:?}"
            );
        }
        assert!(f.git.branch_exists(&main, "main").await.unwrap());
        assert!(!f.git.branch_exists(&main, "nope").await.unwrap());
    }

    #[tokio::test]
    async fn worktree_add_makes_a_new_branch_or_checks_out_an_existing_one() {
        let f = Fixture::new().await;
        let main = f.repo("main").await;
        let base = f.sha(&main, "HEAD").await;
        f.git(&main, &["branch", "existing"]).await;
        f.commit(&main, "a.txt", "two\n", "second").await;

        // The parent directories do not exist yet.
        let one = f.root.join("worktrees/proj/one");
        f.git
            .worktree_add(&main, &one, "corral/one", &base, true)
            .await
            .unwrap();
        assert_eq!(
            f.git.head(&one).await.unwrap(),
            Head::Branch("corral/one".into())
        );
        assert_eq!(f.sha(&one, "HEAD").await, base);
        assert_eq!(std::fs::read_to_string(one.join("a.txt")).unwrap(), "one\n");

        let two = f.root.join("worktrees/proj/two");
        f.git
            .worktree_add(&main, &two, "existing", "unused", false)
            .await
            .unwrap();
        assert_eq!(
            f.git.head(&two).await.unwrap(),
            Head::Branch("existing".into())
        );
        assert_eq!(f.sha(&two, "HEAD").await, base);

        let entries = f.git.worktrees(&main).await.unwrap();
        let seen: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    e.path.clone(),
                    e.branch.clone().unwrap(),
                    e.detached,
                    e.prunable,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (main.clone(), "main".to_owned(), false, false),
                (one, "corral/one".to_owned(), false, false),
                (two, "existing".to_owned(), false, false),
            ]
        );
        assert_eq!(entries[1].head.as_deref(), Some(base.as_str()));
    }

    #[tokio::test]
    async fn worktree_add_refuses_what_exists_and_leaves_nothing_behind() {
        let f = Fixture::new().await;
        let main = f.repo("main").await;
        let base = f.sha(&main, "HEAD").await;

        // A path that exists (a crash's leftover, or made by hand), even empty, is refused.
        let taken = f.root.join("taken");
        std::fs::create_dir(&taken).unwrap();
        let error = f
            .git
            .worktree_add(&main, &taken, "corral/t", &base, true)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, GitError::Exists { path } if *path == taken),
            "{error:?}"
        );
        std::fs::write(taken.join("file"), "mine").unwrap();
        assert!(f
            .git
            .worktree_add(&main, &taken, "corral/t", &base, false)
            .await
            .is_err());
        assert_eq!(std::fs::read_to_string(taken.join("file")).unwrap(), "mine");

        let fresh = f.root.join("worktrees/fresh");
        let refusals = [
            ("main", base.as_str(), true, "already exists"),
            (
                "corral/x",
                "0123456789abcdef0123456789abcdef01234567",
                true,
                "invalid reference",
            ),
            ("main", "unused", false, "main"),
        ];
        for (branch, base_commit, new_branch, says) in refusals {
            let error = f
                .git
                .worktree_add(&main, &fresh, branch, base_commit, new_branch)
                .await
                .unwrap_err();
            assert!(
                matches!(&error, GitError::Failed { what, stderr } if what == "git worktree add" && stderr.contains(says)),
                "{error:?}"
            );
            assert!(!fresh.exists());
        }
        assert_eq!(f.git.worktrees(&main).await.unwrap().len(), 1);
        assert!(!f.git.branch_exists(&main, "corral/x").await.unwrap());
        assert!(!f.git.branch_exists(&main, "corral/t").await.unwrap());
        assert_eq!(f.sha(&main, "main").await, base);
    }

    #[tokio::test]
    async fn submodules_are_initialized_and_told_but_never_looked_into() {
        let f = Fixture::new().await;
        let lib = f.repo("lib").await;
        let main = f.repo("main").await;
        f.git(&main, &["submodule", "add", "-q", text(&lib), "vendor/lib"])
            .await;
        f.git(&main, &["commit", "-q", "-m", "vendor lib"]).await;
        let base = f.sha(&main, "HEAD").await;

        let worktree = f.root.join("worktrees/sub");
        f.git
            .worktree_add(&main, &worktree, "corral/sub", &base, true)
            .await
            .unwrap();
        let vendored = worktree.join("vendor/lib/a.txt");
        assert_eq!(std::fs::read_to_string(&vendored).unwrap(), "one\n");
        let checkout = f.checkout(&main, &worktree).await;
        assert!(f.git.has_submodules(&checkout).await.unwrap());
        let plain = f.repo("plain").await;
        let plain = f.checkout(&plain, &plain).await;
        assert!(!f.git.has_submodules(&plain).await.unwrap());

        // A change inside the submodule is not looked for (its `.git` is the worktree's to
        // rewrite): the worktree's own status is clean.
        std::fs::write(&vendored, "changed\n").unwrap();
        assert!(f.git.is_clean(&checkout).await.unwrap());
        let diff = f.git.diff(&checkout, &base, false).await.unwrap();
        assert_eq!(diff, Diff::default(), "the gitlink is as HEAD has it");
        f.git.worktree_remove(&main, &worktree, true).await.unwrap();
        assert!(!worktree.exists());
        assert!(f.git.branch_exists(&main, "corral/sub").await.unwrap());

        // A submodule that cannot be fetched fails the add midway: the worktree, its
        // directory and its new branch are taken back.
        std::fs::rename(&lib, f.root.join("lib-moved")).unwrap();
        let broken = f.root.join("worktrees/broken");
        let error = f
            .git
            .worktree_add(&main, &broken, "corral/broken", &base, true)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, GitError::Failed { what, .. } if what == "git submodule update"),
            "{error:?}"
        );
        assert!(!broken.exists());
        assert!(!f.git.branch_exists(&main, "corral/broken").await.unwrap());
        assert_eq!(f.git.worktrees(&main).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn is_clean_counts_changes_and_untracked_files_not_ignored_ones() {
        let f = Fixture::new().await;
        let main = f.repo("main").await;
        f.commit(&main, ".gitignore", "*.log\n", "ignore logs")
            .await;
        let main = f.checkout(&main, &main).await;
        assert!(f.git.is_clean(&main).await.unwrap());
        std::fs::write(main.root.join("debug.log"), "noise").unwrap();
        assert!(f.git.is_clean(&main).await.unwrap());
        std::fs::create_dir_all(main.root.join("new/deeper")).unwrap();
        std::fs::write(main.root.join("new/deeper/file"), "x").unwrap();
        assert!(!f.git.is_clean(&main).await.unwrap());
        std::fs::remove_dir_all(main.root.join("new")).unwrap();
        std::fs::write(main.root.join("a.txt"), "changed\n").unwrap();
        assert!(!f.git.is_clean(&main).await.unwrap());
    }

    #[tokio::test]
    async fn worktree_remove_removes_what_it_is_given_and_only_that_registration() {
        let f = Fixture::new().await;
        let main = f.repo("main").await;
        let base = f.sha(&main, "HEAD").await;
        let one = f.root.join("worktrees/one");
        let two = f.root.join("worktrees/two");
        let mine = f.root.join("worktrees/mine");
        for (path, branch) in [(&one, "corral/one"), (&two, "corral/two"), (&mine, "mine")] {
            f.git
                .worktree_add(&main, path, branch, &base, true)
                .await
                .unwrap();
        }
        // The caller has checked it: what is in it goes with it.
        std::fs::write(one.join("work.txt"), "unsaved").unwrap();
        f.git.worktree_remove(&main, &one, false).await.unwrap();
        assert!(!one.exists());
        assert!(f.git.branch_exists(&main, "corral/one").await.unwrap());

        // Gone by hand: its registration alone is dropped, not another gone one's.
        std::fs::remove_dir_all(&two).unwrap();
        std::fs::remove_dir_all(&mine).unwrap();
        f.git.worktree_remove(&main, &two, false).await.unwrap();
        let entries = f.git.worktrees(&main).await.unwrap();
        let paths: Vec<_> = entries
            .iter()
            .map(|e| (e.path.clone(), e.prunable))
            .collect();
        assert_eq!(paths, [(main.clone(), false), (mine, true)]);
        assert_eq!(entries[0].git_dir, Some(main.join(".git")));
    }

    #[test]
    fn worktree_list_porcelain_is_read_entry_by_entry() {
        let listed = "worktree /r\nHEAD aaa\nbranch refs/heads/main\n\n\
                      worktree /w\nHEAD bbb\ndetached\nlocked initializing\n\n\
                      worktree /gone\nHEAD ccc\nbranch refs/heads/corral/x-1\n\
                      prunable gitdir file points to non-existent location\n\n\
                      worktree /bare.git\nbare\n";
        let entry = |path: &str, head: Option<&str>, branch: Option<&str>| WorktreeEntry {
            path: path.into(),
            head: head.map(Into::into),
            branch: branch.map(Into::into),
            ..WorktreeEntry::default()
        };
        assert_eq!(
            parse_worktrees(listed),
            [
                entry("/r", Some("aaa"), Some("main")),
                WorktreeEntry {
                    detached: true,
                    locked: true,
                    ..entry("/w", Some("bbb"), None)
                },
                WorktreeEntry {
                    prunable: true,
                    ..entry("/gone", Some("ccc"), Some("corral/x-1"))
                },
                WorktreeEntry {
                    bare: true,
                    ..entry("/bare.git", None, None)
                },
            ]
        );
        assert_eq!(parse_worktrees(""), []);
    }

    #[test]
    fn numstat_counts_files_lines_and_binaries() {
        assert_eq!(
            parse_numstat("1\t2\ta.txt\n-\t-\tb.bin\n10\t0\tc d.txt\n"),
            (3, 11, 2)
        );
        assert_eq!(parse_numstat(""), (0, 0, 0));
    }

    #[tokio::test]
    async fn diff_counts_untracked_and_modified_files_and_leaves_the_index_alone() {
        let f = Fixture::new().await;
        let main = f.repo("main").await;
        let base = f.sha(&main, "HEAD").await;
        let worktree = f.root.join("worktrees/d");
        f.git
            .worktree_add(&main, &worktree, "corral/d", &base, true)
            .await
            .unwrap();
        std::fs::write(worktree.join("a.txt"), "two\n").unwrap(); // +1 -1
        std::fs::write(worktree.join("new.txt"), "x\ny\n").unwrap(); // untracked, +2
        std::fs::write(worktree.join("blob.bin"), [0u8, 1, 2, 0, 255]).unwrap(); // binary
        std::fs::write(worktree.join("staged.txt"), "s\n").unwrap(); // +1
        f.git(&worktree, &["add", "staged.txt"]).await;
        let own_index = f
            .git(&worktree, &["rev-parse", "--git-path", "index"])
            .await;
        let own_index = worktree.join(own_index.trim());
        let index_before = std::fs::read(&own_index).unwrap();
        let status_before = f.status(&worktree).await;

        let checkout = f.checkout(&main, &worktree).await;
        let diff = f.git.diff(&checkout, &base, false).await.unwrap();
        assert_eq!(
            (diff.files_changed, diff.insertions, diff.deletions),
            (4, 4, 1)
        );
        for shown in [
            "-one",
            "+two",
            "+++ b/new.txt",
            "Binary files",
            "+++ b/staged.txt",
        ] {
            assert!(diff.text.contains(shown), "{shown} not in {}", diff.text);
        }
        let stat = f.git.diff(&checkout, &base, true).await.unwrap();
        assert_eq!(
            (stat.files_changed, stat.insertions, stat.deletions),
            (4, 4, 1)
        );
        assert!(stat.text.contains("4 files changed"), "{}", stat.text);
        assert!(!stat.text.contains("+two"));

        assert_eq!(std::fs::read(&own_index).unwrap(), index_before);
        assert_eq!(f.status(&worktree).await, status_before);
        assert!(status_before.contains("?? new.txt") && status_before.contains("A  staged.txt"));

        // Nothing changed: nothing to show.
        let clean = f.root.join("worktrees/clean");
        f.git
            .worktree_add(&main, &clean, "corral/clean", &base, true)
            .await
            .unwrap();
        assert_eq!(
            f.git
                .diff(&f.checkout(&main, &clean).await, &base, false)
                .await
                .unwrap(),
            Diff::default()
        );
    }

    fn parents(line: String) -> Vec<String> {
        line.split_whitespace().skip(1).map(Into::into).collect()
    }

    #[tokio::test]
    async fn merge_no_ff_moves_a_branch_nobody_has_checked_out() {
        let f = Fixture::new().await;
        let (main, worktree, base) = f.session("HEAD", "b.txt", "b\n").await;
        f.git(&main, &["branch", "target", &base]).await;
        let tip = f.sha(&main, "corral/s").await;
        let scratch = f.root.join("worktrees/.merge-s");

        // A scratch worktree left by a daemon killed mid-merge is cleared first.
        f.git(
            &main,
            &["worktree", "add", "-q", "--detach", text(&scratch)],
        )
        .await;
        let merged = f
            .git
            .merge(&main, &scratch, "corral/s", "target", false, "merge s")
            .await
            .unwrap();
        assert_eq!(merged.into, "target");
        assert_eq!(merged.checkout_updated, None);
        assert_eq!(f.sha(&main, "target").await, merged.commit);
        let line = f
            .git(&main, &["rev-list", "--parents", "-n1", &merged.commit])
            .await;
        assert_eq!(parents(line), [base.clone(), tip]);
        let subject = f
            .git(&main, &["log", "-1", "--format=%s", &merged.commit])
            .await;
        assert_eq!(subject.trim(), "merge s");

        // The person's checkout and the session's are as they were; the scratch is gone.
        assert_eq!(f.sha(&main, "main").await, base);
        assert_eq!(f.status(&main).await, "");
        assert_eq!(f.status(&worktree).await, "");
        assert!(!scratch.exists());
        assert_eq!(f.git.worktrees(&main).await.unwrap().len(), 2);

        // Merged already: nothing to merge. Something else at the scratch path is not
        // corral's to remove. A branch that does not exist is named.
        let again = f
            .git
            .merge(&main, &scratch, "corral/s", "target", false, "m")
            .await;
        assert!(
            matches!(again, Err(GitError::NothingToMerge { .. })),
            "{again:?}"
        );
        f.commit(&worktree, "c.txt", "c\n", "more").await;
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(scratch.join("notes.txt"), "mine").unwrap();
        let taken = f
            .git
            .merge(&main, &scratch, "corral/s", "target", false, "m")
            .await;
        assert!(
            matches!(&taken, Err(GitError::Exists { path }) if *path == scratch),
            "{taken:?}"
        );
        assert!(scratch.exists());
        let missing = f
            .git
            .merge(&main, &scratch, "corral/none", "target", false, "m")
            .await;
        assert!(matches!(&missing, Err(GitError::NoBranch { branch }) if branch == "corral/none"));
    }

    #[tokio::test]
    async fn merge_squash_makes_one_commit_with_the_branch_changes() {
        let f = Fixture::new().await;
        let (main, worktree, base) = f.session("HEAD", "b.txt", "b\n").await;
        f.commit(&worktree, "c.txt", "c\n", "more work").await;
        f.git(&main, &["branch", "target", &base]).await;
        let scratch = f.root.join("worktrees/.merge-s");
        let merged = f
            .git
            .merge(&main, &scratch, "corral/s", "target", true, "squashed s")
            .await
            .unwrap();
        let line = f
            .git(&main, &["rev-list", "--parents", "-n1", &merged.commit])
            .await;
        assert_eq!(parents(line), [base]);
        let squashed = f
            .git(
                &main,
                &["rev-parse", &format!("{}^{{tree}}", merged.commit)],
            )
            .await;
        let session = f.git(&main, &["rev-parse", "corral/s^{tree}"]).await;
        assert_eq!(squashed, session);
        let subject = f.git(&main, &["log", "-1", "--format=%s", "target"]).await;
        assert_eq!(subject.trim(), "squashed s");
        assert!(!scratch.exists());

        // Squashed already: its changes are in `into`, nothing to merge.
        let again = f
            .git
            .merge(&main, &scratch, "corral/s", "target", true, "m")
            .await;
        assert!(
            matches!(again, Err(GitError::NothingToMerge { .. })),
            "{again:?}"
        );
        assert_eq!(f.sha(&main, "target").await, merged.commit);
        assert!(!scratch.exists());
    }

    #[tokio::test]
    async fn merge_fast_forwards_the_clean_checkout_where_into_is() {
        let f = Fixture::new().await;
        let (main, _worktree, base) = f.session("HEAD", "b.txt", "b\n").await;
        let scratch = f.root.join("worktrees/.merge-s");
        let merged = f
            .git
            .merge(&main, &scratch, "corral/s", "main", false, "merge s")
            .await
            .unwrap();
        assert_eq!(merged.checkout_updated, Some(main.clone()));
        assert_eq!(f.sha(&main, "HEAD").await, merged.commit);
        assert_eq!(f.sha(&main, "HEAD~1").await, base);
        assert_eq!(std::fs::read_to_string(main.join("b.txt")).unwrap(), "b\n");
        assert_eq!(f.status(&main).await, "");
        assert_eq!(
            f.git.head(&main).await.unwrap(),
            Head::Branch("main".into())
        );
    }

    #[tokio::test]
    async fn a_conflicting_merge_changes_nothing_anywhere() {
        let f = Fixture::new().await;
        let (main, worktree, _base) = f.session("HEAD", "a.txt", "session\n").await;
        f.commit(&main, "a.txt", "person\n", "person's work").await;
        let before = (
            f.sha(&main, "main").await,
            f.sha(&main, "corral/s").await,
            f.status(&main).await,
            f.status(&worktree).await,
        );
        let scratch = f.root.join("worktrees/.merge-s");
        for squash in [false, true] {
            let error = f
                .git
                .merge(&main, &scratch, "corral/s", "main", squash, "m")
                .await
                .unwrap_err();
            assert!(
                matches!(&error, GitError::Conflict { files } if files == &["a.txt"]),
                "{error:?}"
            );
            assert_eq!(
                error.to_string(),
                "the merge conflicts in a.txt: nothing was changed"
            );
            let after = (
                f.sha(&main, "main").await,
                f.sha(&main, "corral/s").await,
                f.status(&main).await,
                f.status(&worktree).await,
            );
            assert_eq!(after, before);
            assert_eq!(
                std::fs::read_to_string(main.join("a.txt")).unwrap(),
                "person\n"
            );
            assert!(!scratch.exists());
            assert_eq!(f.git.worktrees(&main).await.unwrap().len(), 2);
        }
    }

    #[tokio::test]
    async fn a_checkout_that_left_into_during_the_merge_is_not_fast_forwarded() {
        use std::os::unix::fs::PermissionsExt;
        let f = Fixture::new().await;
        let (main, _worktree, base) = f.session("HEAD", "b.txt", "b\n").await;
        f.git(&main, &["branch", "other"]).await;
        // The person's hook, run by the merge in the scratch worktree: it switches the
        // person's checkout to another branch meanwhile.
        let hook = main.join(".git/hooks/post-merge");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\nunset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE\n\
                 git -C '{}' checkout -q other\n",
                main.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let scratch = f.root.join("worktrees/.merge-s");
        let error = f
            .git
            .merge(&main, &scratch, "corral/s", "main", false, "m")
            .await
            .unwrap_err();
        assert!(
            matches!(&error, GitError::MovedAway { checkout, into } if *checkout == main && into == "main"),
            "{error:?}"
        );
        assert!(error
            .to_string()
            .ends_with("is no longer on main: nothing was changed"));
        assert_eq!(f.sha(&main, "main").await, base);
        assert_eq!(
            f.git.head(&main).await.unwrap(),
            Head::Branch("other".into())
        );
        assert!(!scratch.exists());
    }

    #[tokio::test]
    async fn merge_refuses_a_dirty_side() {
        let f = Fixture::new().await;
        let (main, worktree, base) = f.session("HEAD", "b.txt", "b\n").await;
        let tip = f.sha(&main, "corral/s").await;
        let scratch = f.root.join("worktrees/.merge-s");
        let merge = || f.git.merge(&main, &scratch, "corral/s", "main", false, "m");

        std::fs::write(worktree.join("unsaved.txt"), "x").unwrap();
        let error = merge().await.unwrap_err();
        assert!(
            matches!(&error, GitError::Dirty { path } if *path == worktree),
            "{error:?}"
        );
        std::fs::remove_file(worktree.join("unsaved.txt")).unwrap();

        std::fs::write(main.join("a.txt"), "edited by the person\n").unwrap();
        let error = merge().await.unwrap_err();
        assert!(
            matches!(&error, GitError::Dirty { path } if *path == main),
            "{error:?}"
        );

        assert_eq!(
            (f.sha(&main, "main").await, f.sha(&main, "corral/s").await),
            (base, tip)
        );
        assert_eq!(f.status(&main).await, " M a.txt\n");
        assert!(!scratch.exists());
    }

    #[tokio::test]
    async fn a_dropped_call_kills_its_whole_group() {
        let f = Fixture::new().await;
        // A pipe whose write end only this git child (and what it starts) inherits: its EOF
        // says they all ended.
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let fd = write.as_raw_fd();
        let alias = format!("alias.linger=!echo started > /dev/fd/{fd}; exec sleep 30");
        let mut linger = f.git.at(&f.root, &["-c", &alias, "linger"]);
        // SAFETY: fcntl is async-signal-safe.
        unsafe {
            linger.command.pre_exec(move || {
                let fd = BorrowedFd::borrow_raw(fd);
                nix::fcntl::fcntl(fd, nix::fcntl::F_SETFD(nix::fcntl::FdFlag::empty()))?;
                Ok(())
            });
        }
        let mut reader = std::io::BufReader::new(std::fs::File::from(read));
        let started = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            (line, reader)
        });
        let mut call = Box::pin(linger.output());
        let (line, mut reader) = tokio::select! {
            ended = &mut call => panic!("git ended first: {:?}", ended.map(|o| o.stderr)),
            started = started => started.unwrap(),
        };
        assert_eq!(line, "started\n");
        drop(write);
        drop(call);
        let rest = tokio::task::spawn_blocking(move || reader.read_to_end(&mut Vec::new()));
        let ended = tokio::time::timeout(Duration::from_secs(20), rest).await;
        assert!(ended.is_ok(), "the group outlived its dropped call");
    }
}
