//! Real git in a temporary home, isolated from the person's git (issue 13's tests): a
//! [`GitHome`] is a [`DaemonHome`] whose every `corral` command — and so the daemon the first
//! of them starts, and every engine and git child of that daemon — runs with git's
//! configuration in a file of the home (`GIT_CONFIG_GLOBAL`, `GIT_CONFIG_NOSYSTEM`, a fixed
//! author and committer, `HOME` inside the home), no `GIT_*` variable of the tests'
//! environment, and a `PATH` a test may replace (a fake or absent `git`). Repositories are
//! made inside the home only ([`GitHome::repo`]); [`GitHome::git`] runs the real git there
//! with the same environment.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::daemon::{failed_with, finish, printed_json, succeeded, DaemonHome};

/// The identity every commit of these tests carries.
const NAME: &str = "Corral Test";
const EMAIL: &str = "corral-test@example.invalid";

/// A daemon home with git isolated (see the module doc).
pub struct GitHome {
    pub home: DaemonHome,
    /// The `PATH` given to every command from now on (the daemon keeps the one it started
    /// with).
    path_var: OsString,
}

impl GitHome {
    /// A home with its git configuration file (`protocol.file.allow = always`, for local
    /// submodules) and an empty `HOME` directory.
    pub fn new() -> Self {
        let home = DaemonHome::new();
        std::fs::create_dir(home.path().join("userhome")).unwrap();
        std::fs::write(
            home.path().join("gitconfig"),
            format!(
                "[user]\n\tname = {NAME}\n\temail = {EMAIL}\n[init]\n\tdefaultBranch = main\n\
                 [protocol \"file\"]\n\tallow = always\n[advice]\n\tdetachedHead = false\n"
            ),
        )
        .unwrap();
        GitHome {
            home,
            path_var: std::env::var_os("PATH").unwrap_or_default(),
        }
    }

    pub fn path(&self) -> &Path {
        self.home.path()
    }

    /// The `PATH` of the commands from now on.
    pub fn set_path_var(&mut self, path: impl Into<OsString>) {
        self.path_var = path.into();
    }

    /// The tests' own `PATH`.
    pub fn real_path_var() -> OsString {
        std::env::var_os("PATH").unwrap_or_default()
    }

    /// The isolated environment, on `command`.
    fn isolate(&self, command: &mut Command) {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("GIT_") {
                command.env_remove(key);
            }
        }
        command
            .env("GIT_CONFIG_GLOBAL", self.path().join("gitconfig"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", NAME)
            .env("GIT_AUTHOR_EMAIL", EMAIL)
            .env("GIT_COMMITTER_NAME", NAME)
            .env("GIT_COMMITTER_EMAIL", EMAIL)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("HOME", self.path().join("userhome"))
            .env("PATH", &self.path_var);
    }

    /// `corral ARGS…` in this home with git isolated, stdin closed.
    pub fn corral(&self, args: &[&str]) -> Command {
        let mut command = self.home.corral(args);
        self.isolate(&mut command);
        command
    }

    /// Runs `corral ARGS…` to its end (at most the daemon module's DEADLINE).
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self
            .corral(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("corral starts");
        finish(child)
    }

    /// Runs a command that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        succeeded(args, &self.run(args))
    }

    /// Runs a command that must succeed and print JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        printed_json(args, &self.ok(args))
    }

    /// Runs a command that must fail with `code`; its stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        failed_with(args, &self.run(args), code)
    }

    /// `corral config set NAME VALUE` for each setting.
    pub fn config(&self, settings: &[(&str, &str)]) {
        for (name, value) in settings {
            self.ok(&["config", "set", name, value]);
        }
    }

    /// `corral project add NAME DIR --engine command EXTRA…`, which must succeed.
    pub fn add_project(&self, name: &str, dir: &Path, extra: &[&str]) {
        let dir = dir.to_str().expect("temporary paths are UTF-8");
        let mut args = vec!["project", "add", name, dir, "--engine", "command"];
        args.extend(extra);
        self.ok(&args);
    }

    /// `corral session new ARGS… --json`, which must succeed: the new session's id.
    pub fn new_session(&self, args: &[&str]) -> String {
        let mut command = vec!["session", "new"];
        command.extend(args);
        command.push("--json");
        let session = self.json(&command);
        let session = session.get("session").unwrap_or(&session);
        session["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{command:?} printed no session id: {session}"))
            .to_string()
    }

    /// The session as `session show --json` shows it (its `session` object).
    pub fn session(&self, session: &str) -> Value {
        let shown = self.json(&["session", "show", session, "--json"]);
        shown.get("session").cloned().unwrap_or(shown)
    }

    /// The session's worktree root (it must have one).
    pub fn worktree_of(&self, session: &str) -> PathBuf {
        let shown = self.session(session);
        PathBuf::from(
            shown["worktree"]
                .as_str()
                .unwrap_or_else(|| panic!("{session} has no worktree: {shown}")),
        )
    }

    /// The session's branch (it must have one).
    pub fn branch_of(&self, session: &str) -> String {
        let shown = self.session(session);
        shown["branch"]
            .as_str()
            .unwrap_or_else(|| panic!("{session} has no branch: {shown}"))
            .to_string()
    }

    /// `corral send S PROMPT --json` without waiting: the prompt's id.
    pub fn send(&self, session: &str, prompt: &str) -> String {
        let sent = self.json(&["send", session, prompt, "--json"]);
        sent["id"]
            .as_str()
            .unwrap_or_else(|| panic!("send printed no prompt id: {sent}"))
            .to_string()
    }

    /// Waits until the prompt has ended (`prompt.wait`): its JSON.
    pub fn wait_prompt(&self, prompt: &str) -> Value {
        let mut rpc = super::rpc::Rpc::connect(self.path());
        rpc.call("prompt.wait", serde_json::json!({ "prompt": prompt }))
            .unwrap_or_else(|error| panic!("prompt.wait {prompt}: {error}"))
    }

    /// `corral send S PROMPT --wait`, which must succeed: its stdout.
    pub fn prompt(&self, session: &str, prompt: &str) -> String {
        self.ok(&["send", session, prompt, "--wait"])
    }

    /// `git ARGS…` in `dir` with git isolated (the real git, whatever `PATH` the home's
    /// commands get).
    pub fn git_output(&self, dir: &Path, args: &[&str]) -> Output {
        let mut command = Command::new("git");
        self.isolate(&mut command);
        command
            .env("PATH", Self::real_path_var())
            .env("LC_ALL", "C")
            .current_dir(dir)
            .args(args)
            .stdin(Stdio::null());
        command.output().expect("git runs")
    }

    /// `git ARGS…` in `dir`, which must succeed: its stdout, trimmed.
    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        let output = self.git_output(dir, args);
        assert!(
            output.status.success(),
            "git {args:?} in {} failed: {}",
            dir.display(),
            text(&output.stderr)
        );
        text(&output.stdout).trim().to_string()
    }

    /// A new repository `NAME` in the home, on branch `main`, with one commit of `README.md`
    /// (`hello`).
    pub fn repo(&self, name: &str) -> PathBuf {
        let repo = self.path().join(name);
        std::fs::create_dir_all(&repo).unwrap();
        self.git(&repo, &["init", "-q", "-b", "main"]);
        self.commit_file(&repo, "README.md", "hello\n", "first");
        repo
    }

    /// Writes `file` (its directories made) in `dir` and commits it: the new commit's sha.
    pub fn commit_file(&self, dir: &Path, file: &str, content: &str, message: &str) -> String {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        self.git(dir, &["add", "--", file]);
        self.git(dir, &["commit", "-q", "-m", message]);
        self.git(dir, &["rev-parse", "HEAD"])
    }

    /// The sha `rev` names in `dir`.
    pub fn sha(&self, dir: &Path, rev: &str) -> String {
        self.git(dir, &["rev-parse", "--verify", rev])
    }

    /// `git status --porcelain` of `dir` (untracked files included).
    pub fn status(&self, dir: &Path) -> String {
        self.git(dir, &["status", "--porcelain", "--untracked-files=all"])
    }

    /// The worktrees `git worktree list --porcelain` names in `repo`: (path, prunable).
    pub fn worktrees(&self, repo: &Path) -> Vec<(PathBuf, bool)> {
        let listed = self.git(repo, &["worktree", "list", "--porcelain"]);
        let mut entries: Vec<(PathBuf, bool)> = Vec::new();
        for line in listed.lines() {
            if let Some(path) = line.strip_prefix("worktree ") {
                entries.push((PathBuf::from(path), false));
            } else if line.starts_with("prunable") {
                if let Some(last) = entries.last_mut() {
                    last.1 = true;
                }
            }
        }
        entries
    }

    /// A directory of the home holding, as symlinks, the tools named (found on the tests'
    /// `PATH`): a `PATH` without git.
    pub fn bin_without_git(&self, name: &str, tools: &[&str]) -> PathBuf {
        let dir = self.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for tool in tools {
            let found = which(tool).unwrap_or_else(|| panic!("{tool} is not on PATH"));
            std::os::unix::fs::symlink(found, dir.join(tool)).unwrap();
        }
        dir
    }

    /// An executable script `NAME` in the home directory `dir` (made).
    pub fn script(&self, dir: &str, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.path().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, body).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// SIGTERM to the daemon, waiting until every process of the home is gone.
    pub fn stop_daemon(&self) {
        self.home.stop_daemon();
    }
}

/// `PATH` with `dir` first.
pub fn path_with_first(dir: &Path) -> OsString {
    let mut joined = OsString::from(dir.as_os_str());
    joined.push(":");
    joined.push(GitHome::real_path_var());
    joined
}

/// The first `name` on the tests' `PATH`.
pub fn which(name: impl AsRef<OsStr>) -> Option<PathBuf> {
    let name = name.as_ref();
    std::env::split_paths(&GitHome::real_path_var())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Both paths canonical (when they exist), for comparing what corral and the test spell.
pub fn same_path(a: &Path, b: &Path) -> bool {
    let canon = |path: &Path| path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    canon(a) == canon(b)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
