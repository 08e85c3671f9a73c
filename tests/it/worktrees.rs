//! A git worktree per session (issue 13), through the built binary against a real daemon and
//! real git in temporary repositories (git isolated from the person's: `common::git`).
//!
//! The engine is the `command` engine: a prompt is a shell command line run in the session's
//! working directory, so a test makes the "agent" write a file, commit, print its directory
//! or sleep. The cases, in the issue's order:
//! 1. sessions of a worktree project run at once, each in its own worktree and branch (and a
//!    shared project's do not);
//! 2. the default isolation and where worktrees go;
//! 3. archive: a clean worktree is removed (its branch kept), a dirty one kept until
//!    `--discard-changes`;
//! 4. `session diff` and `--stat` against the base;
//! 5. `session merge`: no-ff, `--squash`, a conflict that leaves everything as it was, a dirty
//!    side refused;
//! 6. what real repositories do (item 3 of the issue), one test each;
//! 7. a daemon killed mid-`git worktree add` (and the half-made path then taken by hand);
//! 8. the branch everywhere a session shows.

use crate::common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::Value;

use common::daemon::{alive, finish, kill, wait_until};
use common::git::{path_with_first, same_path, GitHome};

/// A home whose command engine may run eight children at once, with short grace periods.
fn command_home() -> GitHome {
    let home = GitHome::new();
    home.config(&[
        ("slots.command", "8"),
        ("cancel.grace_ms", "500"),
        ("daemon.shutdown_grace_ms", "500"),
    ]);
    home
}

/// A home with a repository `repo` (one commit on `main`) and a worktree project `p` on it.
fn repo_home() -> (GitHome, PathBuf) {
    let home = command_home();
    let repo = home.repo("repo");
    home.add_project("p", &repo, &["--isolation", "worktree"]);
    (home, repo)
}

/// The line count of a command's stderr, for "one clear line".
fn one_line(stderr: &str) -> bool {
    stderr.trim().lines().count() == 1
}

/// The (started_at, ended_at) of each session's first run, from `history --json`.
fn first_run(home: &GitHome, session: &str) -> (i64, i64) {
    let history = home.json(&["history", session, "--json"]);
    let run = &history["runs"][0];
    (
        run["started_at"]
            .as_i64()
            .unwrap_or_else(|| panic!("no started_at: {history}")),
        run["ended_at"]
            .as_i64()
            .unwrap_or_else(|| panic!("no ended_at: {history}")),
    )
}

/// Sends each session its prompt, all before any is waited for; waits for all, which must be
/// done; each session's first run's times.
fn run_together(
    home: &GitHome,
    sessions: &[String],
    prompt: impl Fn(&str) -> String,
) -> Vec<(i64, i64)> {
    let prompts: Vec<String> = sessions
        .iter()
        .map(|session| home.send(session, &prompt(session)))
        .collect();
    for id in &prompts {
        let done = home.wait_prompt(id);
        assert_eq!(done["status"], "done", "{done}");
    }
    sessions
        .iter()
        .map(|session| first_run(home, session))
        .collect()
}

/// The short id the contract names a session's worktree and branch by: the uuid's last 8
/// hex digits.
fn short_id(session: &str) -> String {
    let hex: String = session.chars().filter(|c| *c != '-').collect();
    hex[hex.len() - 8..].to_string()
}

// 1. Parallel sessions.

#[test]
fn four_sessions_of_a_worktree_project_run_at_once_each_in_its_own_worktree_and_branch() {
    let (home, repo) = repo_home();
    let sessions: Vec<String> = (1..=4)
        .map(|i| home.new_session(&["p", "--title", &format!("four {i}")]))
        .collect();
    let file = |session: &str| format!("by-{session}.txt");
    // Each run writes its file, then waits (at most 20 s) until all four have written theirs:
    // run at once, every run starts before any ends, however slow the machine is; run one
    // at a time, the first waits out its 20 s alone and ends before the next starts.
    let started = home.path().join("started");
    std::fs::create_dir(&started).unwrap();
    let runs = run_together(&home, &sessions, |session| {
        format!(
            "echo {session} > {file} && touch '{dir}/{session}' && n=0; \
             while [ \"$(ls '{dir}' | wc -l)\" -lt 4 ] && [ $n -lt 200 ]; do \
             sleep 0.1; n=$((n+1)); done; sleep 0.2",
            file = file(session),
            dir = started.display()
        )
    });
    let last_start = runs.iter().map(|run| run.0).max().unwrap();
    let first_end = runs.iter().map(|run| run.1).min().unwrap();
    assert!(last_start < first_end, "not all four ran at once: {runs:?}");

    let mut worktrees = HashSet::new();
    let mut branches = HashSet::new();
    for session in &sessions {
        let worktree = home.worktree_of(session);
        let branch = home.branch_of(session);
        assert!(branch.starts_with("corral/"), "{branch}");
        assert!(
            worktree.join(file(session)).is_file(),
            "{session}'s file is not in its worktree {}",
            worktree.display()
        );
        for other in sessions.iter().filter(|other| *other != session) {
            assert!(
                !worktree.join(file(other)).exists(),
                "{other}'s file is in {session}'s worktree"
            );
        }
        assert!(
            !repo.join(file(session)).exists(),
            "{session}'s file is in the main checkout"
        );
        assert_eq!(
            home.git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]),
            branch
        );
        assert_eq!(home.status(&worktree), format!("?? {}", file(session)));
        assert!(worktrees.insert(worktree.canonicalize().unwrap()));
        assert!(branches.insert(branch));
    }
    assert_eq!(home.status(&repo), "", "the main checkout was touched");
    assert_eq!(
        home.git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main"
    );

    // The same on a shared project: one at a time, in the project's own directory.
    let shared = home.repo("shared");
    home.add_project("s", &shared, &["--isolation", "shared"]);
    let sessions: Vec<String> = (1..=4)
        .map(|i| home.new_session(&["s", "--title", &format!("shared {i}")]))
        .collect();
    let runs = run_together(&home, &sessions, |session| {
        format!("echo {session} > {} && sleep 1.5", file(session))
    });
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            assert!(a.1 <= b.0 || b.1 <= a.0, "shared runs overlap: {runs:?}");
        }
    }
    for session in &sessions {
        assert!(shared.join(file(session)).is_file());
        assert!(home.session(session)["worktree"].is_null());
    }
    home.stop_daemon();
}

// 2. The default isolation.

#[test]
fn the_default_isolation_is_worktree_in_a_repository_and_shared_elsewhere() {
    let home = command_home();
    let repo = home.repo("repo");
    let plain = home.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let unborn = home.path().join("unborn");
    std::fs::create_dir(&unborn).unwrap();
    home.git(&unborn, &["init", "-q"]);

    home.add_project("r", &repo, &[]);
    home.add_project("d", &plain, &[]);
    home.add_project("u", &unborn, &[]);
    home.add_project("asked", &repo, &["--isolation", "shared"]);
    let isolation = |project: &str| {
        let shown = home.json(&["project", "show", project, "--json"]);
        shown["isolation"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(isolation("r"), "worktree");
    assert_eq!(isolation("d"), "shared");
    assert_eq!(isolation("u"), "shared", "a repository without a commit");
    assert_eq!(isolation("asked"), "shared");

    // A worktree session: under HOME/worktrees/<project>/<title slug>-<short id>, on
    // corral/<title slug>-<short id>, from HEAD.
    let session = home.new_session(&["r", "--title", "First One!"]);
    let shown = home.session(&session);
    let slug = format!("first-one-{}", short_id(&session));
    let expected = home.path().join("worktrees").join("r").join(&slug);
    assert!(
        same_path(Path::new(shown["worktree"].as_str().unwrap()), &expected),
        "{shown}"
    );
    assert_eq!(shown["branch"], format!("corral/{slug}"), "{shown}");
    // The base as given (HEAD), or the branch HEAD named then.
    assert!(
        shown["base"] == "HEAD" || shown["base"] == "main",
        "{shown}"
    );
    assert_eq!(shown["base_commit"], home.sha(&repo, "HEAD"), "{shown}");
    assert!(expected.join("README.md").is_file());
    let answer = home.prompt(&session, "pwd");
    assert!(answer.contains(&slug), "{answer}");

    // A shared session runs in the project's directory, with no worktree.
    let plain_session = home.new_session(&["d", "--title", "plain"]);
    let shown = home.session(&plain_session);
    assert!(shown["worktree"].is_null(), "{shown}");
    assert!(shown["branch"].is_null(), "{shown}");
    home.prompt(&plain_session, "pwd > here.txt");
    assert!(plain.join("here.txt").is_file());

    // worktrees.dir moves new worktrees; a project's own dir overrides it.
    let elsewhere = home.path().join("elsewhere");
    home.config(&[("worktrees.dir", elsewhere.to_str().unwrap())]);
    let moved = home.new_session(&["r", "--title", "moved"]);
    assert!(home.worktree_of(&moved).starts_with(elsewhere.join("r")));
    let own = home.path().join("own");
    home.ok(&[
        "project",
        "set",
        "r",
        "--worktrees-dir",
        own.to_str().unwrap(),
    ]);
    let owned = home.new_session(&["r", "--title", "owned"]);
    assert!(home.worktree_of(&owned).starts_with(&own));

    // A change of isolation affects new sessions only.
    home.ok(&["project", "set", "r", "--isolation", "shared"]);
    assert_eq!(isolation("r"), "shared");
    let later = home.new_session(&["r", "--title", "later"]);
    assert!(home.session(&later)["worktree"].is_null());
    assert!(same_path(&home.worktree_of(&session), &expected));
    home.stop_daemon();
}

// 3. Archive.

#[test]
fn archiving_removes_a_clean_worktree_and_keeps_its_branch() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "clean"]);
    home.prompt(
        &session,
        "echo work > work.txt && git add work.txt && git commit -q -m work",
    );
    let worktree = home.worktree_of(&session);
    let branch = home.branch_of(&session);
    let tip = home.sha(&worktree, "HEAD");

    home.ok(&["session", "archive", &session]);
    assert!(!worktree.exists(), "a clean worktree was kept");
    assert!(
        !home
            .worktrees(&repo)
            .iter()
            .any(|(path, _)| same_path(path, &worktree)),
        "git still lists the removed worktree"
    );
    assert_eq!(
        home.git(&repo, &["branch", "--list", &branch])
            .trim_start_matches(['*', '+', ' ']),
        branch
    );
    assert_eq!(home.sha(&repo, &branch), tip, "the branch lost its commit");
    let shown = home.session(&session);
    assert_eq!(shown["worktree_state"], "removed", "{shown}");
    assert!(!shown["archived_at"].is_null(), "{shown}");
    home.stop_daemon();
}

#[test]
fn archiving_keeps_a_dirty_worktree_until_told_to_discard_its_changes() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "dirty"]);
    home.prompt(&session, "echo unsaved > notes.txt");
    let worktree = home.worktree_of(&session);
    let branch = home.branch_of(&session);

    let archived = home.run(&["session", "archive", &session]);
    let stderr = String::from_utf8_lossy(&archived.stderr).into_owned();
    assert!(archived.status.success(), "{archived:?}");
    assert!(one_line(&stderr), "{stderr}");
    assert!(
        stderr.contains("kept worktree")
            && stderr.contains(worktree.to_str().unwrap())
            && stderr.contains("corral session archive")
            && stderr.contains("--discard-changes"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("notes.txt")).unwrap(),
        "unsaved\n"
    );
    let shown = home.session(&session);
    assert_eq!(shown["worktree_state"], "kept", "{shown}");
    assert!(!shown["archived_at"].is_null(), "{shown}");

    home.ok(&["session", "archive", &session, "--discard-changes"]);
    assert!(!worktree.exists(), "--discard-changes kept the worktree");
    assert!(!home
        .worktrees(&repo)
        .iter()
        .any(|(path, _)| same_path(path, &worktree)));
    assert!(!home.git(&repo, &["branch", "--list", &branch]).is_empty());
    assert_eq!(home.session(&session)["worktree_state"], "removed");
    home.stop_daemon();
}

// 4. Diff.

#[test]
fn diff_shows_committed_modified_and_untracked_changes_against_the_base() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "diff"]);
    home.prompt(
        &session,
        "echo kept > committed.txt && git add committed.txt && git commit -q -m c \
         && printf 'changed\\n' > README.md && printf 'brand new\\n' > new.txt",
    );
    // The base branch moves on: none of that is the session's change.
    home.commit_file(&repo, "other.txt", "theirs\n", "on main meanwhile");
    let worktree = home.worktree_of(&session);
    let before = home.status(&worktree);
    assert!(before.contains("?? new.txt"), "{before}");

    let diff = home.ok(&["session", "diff", &session]);
    for expected in [
        "README.md",
        "-hello",
        "+changed",
        "new.txt",
        "+brand new",
        "committed.txt",
        "+kept",
    ] {
        assert!(diff.contains(expected), "no {expected:?} in:\n{diff}");
    }
    assert!(!diff.contains("other.txt"), "{diff}");

    let stat = home.ok(&["session", "diff", &session, "--stat"]);
    for expected in ["README.md", "new.txt", "committed.txt", "3 files changed"] {
        assert!(stat.contains(expected), "no {expected:?} in:\n{stat}");
    }
    assert!(!stat.contains("other.txt"), "{stat}");
    assert!(
        !stat.contains("+brand new"),
        "--stat printed the patch: {stat}"
    );
    // The worktree's index is as it was: the new file is still untracked.
    assert_eq!(home.status(&worktree), before);
    home.stop_daemon();
}

// 5. Merge.

/// Parents of `rev` in `dir`.
fn parents(home: &GitHome, dir: &Path, rev: &str) -> Vec<String> {
    home.git(dir, &["rev-list", "--parents", "-n", "1", rev])
        .split_whitespace()
        .skip(1)
        .map(String::from)
        .collect()
}

/// The worktrees git lists for `repo`, canonical, sorted.
fn listed(home: &GitHome, repo: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = home
        .worktrees(repo)
        .into_iter()
        .map(|(path, _)| path.canonicalize().unwrap_or(path))
        .collect();
    paths.sort();
    paths
}

#[test]
fn a_merge_lands_on_the_base_branch_and_fast_forwards_the_persons_clean_checkout() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "merge"]);
    home.prompt(
        &session,
        "echo feature > feature.txt && git add feature.txt && git commit -q -m feature",
    );
    let branch = home.branch_of(&session);
    let tip = home.sha(&repo, &branch);
    let main_before = home.sha(&repo, "main");
    let worktrees_before = listed(&home, &repo);

    home.ok(&["session", "merge", &session]);
    let main_after = home.sha(&repo, "main");
    assert_eq!(
        parents(&home, &repo, "main"),
        vec![main_before, tip.clone()],
        "not a no-ff merge of the branch"
    );
    // The person's checkout moved with its branch, and is clean.
    assert_eq!(home.sha(&repo, "HEAD"), main_after);
    assert_eq!(
        home.git(&repo, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "main"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("feature.txt")).unwrap(),
        "feature\n"
    );
    assert_eq!(home.status(&repo), "");
    assert_eq!(home.sha(&repo, &branch), tip, "the session's branch moved");
    assert_eq!(
        listed(&home, &repo),
        worktrees_before,
        "a scratch worktree was left"
    );
    home.stop_daemon();
}

#[test]
fn a_squash_merge_makes_one_commit() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "squash"]);
    home.prompt(
        &session,
        "echo one > one.txt && git add one.txt && git commit -q -m one \
         && echo two > two.txt && git add two.txt && git commit -q -m two",
    );
    let main_before = home.sha(&repo, "main");
    home.ok(&["session", "merge", &session, "--squash"]);
    assert_eq!(parents(&home, &repo, "main"), vec![main_before.clone()]);
    assert_eq!(
        home.git(
            &repo,
            &["rev-list", "--count", &format!("{main_before}..main")]
        ),
        "1"
    );
    assert!(repo.join("one.txt").is_file() && repo.join("two.txt").is_file());
    assert_eq!(home.status(&repo), "");
    home.stop_daemon();
}

#[test]
fn a_conflicting_merge_fails_in_one_line_and_leaves_both_sides_untouched() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "conflict"]);
    home.prompt(
        &session,
        "printf 'session side\\n' > README.md && git commit -q -am session",
    );
    home.commit_file(&repo, "README.md", "person side\n", "person");
    let worktree = home.worktree_of(&session);
    let branch = home.branch_of(&session);
    let shas = (home.sha(&repo, "main"), home.sha(&repo, &branch));
    let worktrees_before = listed(&home, &repo);

    let stderr = home.fails(&["session", "merge", &session], 1);
    assert!(one_line(&stderr), "{stderr}");
    assert!(stderr.contains("README.md"), "{stderr}");

    assert_eq!((home.sha(&repo, "main"), home.sha(&repo, &branch)), shas);
    for dir in [&repo, &worktree] {
        assert_eq!(home.status(dir), "", "{} was touched", dir.display());
        let merging = home.git_output(dir, &["rev-parse", "-q", "--verify", "MERGE_HEAD"]);
        assert!(
            !merging.status.success(),
            "a merge is left in {}",
            dir.display()
        );
    }
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "person side\n"
    );
    assert_eq!(
        std::fs::read_to_string(worktree.join("README.md")).unwrap(),
        "session side\n"
    );
    assert_eq!(
        listed(&home, &repo),
        worktrees_before,
        "a scratch worktree was left"
    );
    home.stop_daemon();
}

#[test]
fn a_merge_refuses_a_dirty_session_worktree_and_a_dirty_checkout() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "dirty merge"]);
    home.prompt(
        &session,
        "echo f > f.txt && git add f.txt && git commit -q -m f && echo x > dirt.txt",
    );
    let worktree = home.worktree_of(&session);
    let branch = home.branch_of(&session);
    let shas = (home.sha(&repo, "main"), home.sha(&repo, &branch));
    let says_dirty = |stderr: &str, dir: &Path| {
        one_line(stderr)
            && (stderr.contains(dir.to_str().unwrap())
                || stderr.contains("uncommitted")
                || stderr.contains("dirty"))
    };

    let stderr = home.fails(&["session", "merge", &session], 1);
    assert!(says_dirty(&stderr, &worktree), "{stderr}");
    assert_eq!((home.sha(&repo, "main"), home.sha(&repo, &branch)), shas);
    assert!(worktree.join("dirt.txt").is_file());
    assert!(!repo.join("f.txt").exists());

    // Clean on the session's side, dirty in the person's checkout.
    std::fs::remove_file(worktree.join("dirt.txt")).unwrap();
    std::fs::write(repo.join("README.md"), "mine, not committed\n").unwrap();
    let stderr = home.fails(&["session", "merge", &session], 1);
    assert!(says_dirty(&stderr, &repo), "{stderr}");
    assert_eq!((home.sha(&repo, "main"), home.sha(&repo, &branch)), shas);
    assert_eq!(
        std::fs::read_to_string(repo.join("README.md")).unwrap(),
        "mine, not committed\n"
    );
    assert_eq!(home.status(&repo), "M README.md");
    home.stop_daemon();
}

// 6. What real repositories do.

#[test]
fn a_project_on_a_linked_worktree_works_from_that_worktree() {
    let home = command_home();
    let repo = home.repo("repo");
    let linked = home.path().join("linked");
    home.git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "feature",
            linked.to_str().unwrap(),
        ],
    );
    let feature = home.commit_file(&linked, "feature.txt", "f\n", "feature");
    home.add_project("l", &linked, &[]);
    let shown = home.json(&["project", "show", "l", "--json"]);
    assert_eq!(shown["isolation"], "worktree", "{shown}");

    let session = home.new_session(&["l", "--title", "linked"]);
    let shown = home.session(&session);
    assert_eq!(shown["base_commit"], feature, "{shown}");
    let worktree = home.worktree_of(&session);
    assert!(worktree.join("feature.txt").is_file());
    home.prompt(
        &session,
        "echo s > from-session.txt && git add from-session.txt && git commit -q -m s",
    );
    assert!(worktree.join("from-session.txt").is_file());
    assert!(!linked.join("from-session.txt").exists());
    assert!(!repo.join("from-session.txt").exists());
    assert!(listed(&home, &repo).contains(&worktree.canonicalize().unwrap()));

    // Its base is the linked worktree's branch: a merge goes there and moves that checkout.
    home.ok(&["session", "merge", &session]);
    assert!(linked.join("from-session.txt").is_file());
    assert_eq!(home.status(&linked), "");
    assert!(
        !repo.join("from-session.txt").exists(),
        "main's checkout moved"
    );
    home.stop_daemon();
}

#[test]
fn a_project_in_a_subdirectory_runs_its_engine_in_that_subdirectory_of_the_worktree() {
    let home = command_home();
    let repo = home.repo("repo");
    home.commit_file(&repo, "sub/dir/keep.txt", "k\n", "a subdirectory");
    let sub = repo.join("sub").join("dir");
    home.add_project("sub", &sub, &["--isolation", "worktree"]);
    let session = home.new_session(&["sub", "--title", "sub"]);
    home.prompt(&session, "pwd > where.txt");

    let worktree = home.worktree_of(&session);
    let expected = worktree.join("sub").join("dir");
    let written = std::fs::read_to_string(expected.join("where.txt"))
        .unwrap_or_else(|_| panic!("no where.txt in {}", expected.display()));
    assert!(same_path(Path::new(written.trim()), &expected), "{written}");
    assert!(!worktree.join("where.txt").exists());
    assert!(!sub.join("where.txt").exists());
    home.stop_daemon();
}

#[test]
fn a_detached_head_is_a_base_and_a_merge_then_needs_into() {
    let home = command_home();
    let repo = home.repo("repo");
    let first = home.sha(&repo, "HEAD");
    let second = home.commit_file(&repo, "second.txt", "2\n", "second");
    home.git(&repo, &["checkout", "-q", "--detach", &first]);
    home.add_project("p", &repo, &[]);

    let session = home.new_session(&["p", "--title", "detached"]);
    let shown = home.session(&session);
    assert_eq!(shown["base_commit"], first, "{shown}");
    let branch = home.branch_of(&session);
    assert!(branch.starts_with("corral/"), "{branch}");
    let worktree = home.worktree_of(&session);
    assert!(!worktree.join("second.txt").exists());
    home.prompt(
        &session,
        "echo d > d.txt && git add d.txt && git commit -q -m d",
    );

    let stderr = home.fails(&["session", "merge", &session], 1);
    assert!(one_line(&stderr) && stderr.contains("--into"), "{stderr}");
    assert_eq!(home.sha(&repo, "main"), second);

    home.ok(&["session", "merge", &session, "--into", "main"]);
    assert_eq!(
        parents(&home, &repo, "main"),
        vec![second, home.sha(&repo, &branch)]
    );
    // The person's detached checkout did not move.
    assert_eq!(home.sha(&repo, "HEAD"), first);
    assert!(!home
        .git_output(&repo, &["symbolic-ref", "-q", "HEAD"])
        .status
        .success());
    assert_eq!(home.status(&repo), "");
    home.stop_daemon();
}

#[test]
fn branch_may_name_an_existing_branch() {
    let (home, repo) = repo_home();
    home.git(&repo, &["checkout", "-q", "-b", "topic"]);
    let topic = home.commit_file(&repo, "topic.txt", "t\n", "topic");
    home.git(&repo, &["checkout", "-q", "main"]);

    let session = home.new_session(&["p", "--title", "topic", "--branch", "topic"]);
    assert_eq!(home.branch_of(&session), "topic");
    let worktree = home.worktree_of(&session);
    assert_eq!(home.sha(&worktree, "HEAD"), topic);
    assert_eq!(
        home.git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "topic"
    );
    assert!(worktree.join("topic.txt").is_file());
    assert_eq!(home.sha(&repo, "topic"), topic, "the branch moved");

    // A branch checked out elsewhere cannot be a session's: one line, nothing made.
    let before = listed(&home, &repo);
    let stderr = home.fails(
        &["session", "new", "p", "--title", "main", "--branch", "main"],
        1,
    );
    assert!(one_line(&stderr), "{stderr}");
    assert!(stderr.contains("main"), "{stderr}");
    assert_eq!(listed(&home, &repo), before);
    home.stop_daemon();
}

#[test]
fn recreate_refuses_a_worktree_path_that_exists_and_never_overwrites_it() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "in the way"]);
    let worktree = home.worktree_of(&session);
    let branch = home.branch_of(&session);
    // Gone, and something else made where it was.
    std::fs::remove_dir_all(&worktree).unwrap();
    std::fs::create_dir(&worktree).unwrap();
    std::fs::write(worktree.join("mine.txt"), "not corral's\n").unwrap();

    let stderr = home.fails(&["session", "recreate", &session], 1);
    assert!(one_line(&stderr), "{stderr}");
    assert!(stderr.contains(worktree.to_str().unwrap()), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(worktree.join("mine.txt")).unwrap(),
        "not corral's\n"
    );
    assert!(!worktree.join("README.md").exists());

    // Once the directory is out of the way, the worktree comes back on its branch.
    std::fs::remove_dir_all(&worktree).unwrap();
    home.ok(&["session", "recreate", &session]);
    assert_eq!(
        home.git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]),
        branch
    );
    assert!(home.worktrees(&repo).iter().all(|(_, prunable)| !prunable));
    home.stop_daemon();
}

#[test]
fn a_new_session_never_takes_or_touches_a_directory_that_exists() {
    let (home, _repo) = repo_home();
    // Whatever is in the worktrees directory already stays as it is.
    let dir = home.path().join("worktrees").join("p");
    std::fs::create_dir_all(&dir).unwrap();
    let mut existing = Vec::new();
    for name in ["session", "taken", "taken-00000000"] {
        let path = dir.join(name);
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("mine.txt"), name).unwrap();
        existing.push(path);
    }
    for _ in 0..3 {
        let session = home.new_session(&["p", "--title", "taken"]);
        let worktree = home.worktree_of(&session);
        assert!(
            !existing.iter().any(|path| same_path(path, &worktree)),
            "{session} took {}",
            worktree.display()
        );
        assert!(!worktree.join("mine.txt").exists());
    }
    for path in &existing {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            std::fs::read_to_string(path.join("mine.txt")).unwrap(),
            name
        );
        assert_eq!(std::fs::read_dir(path).unwrap().count(), 1);
    }
    home.stop_daemon();
}

#[test]
fn submodules_are_checked_out_in_a_sessions_worktree() {
    let home = command_home();
    let library = home.repo("library");
    home.commit_file(&library, "lib.txt", "from the submodule\n", "lib");
    let repo = home.repo("repo");
    home.git(
        &repo,
        &["submodule", "add", "-q", library.to_str().unwrap(), "lib"],
    );
    home.git(&repo, &["commit", "-q", "-m", "add the submodule"]);
    home.add_project("p", &repo, &[]);

    let session = home.new_session(&["p", "--title", "submodule"]);
    let worktree = home.worktree_of(&session);
    assert_eq!(
        std::fs::read_to_string(worktree.join("lib").join("lib.txt")).unwrap(),
        "from the submodule\n"
    );
    let status = home.git_output(&worktree, &["submodule", "status"]);
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.starts_with(' ') && status.contains("lib"),
        "the submodule is not initialized at its commit: {status}"
    );
    let answer = home.prompt(&session, "cat lib/lib.txt");
    assert!(answer.contains("from the submodule"), "{answer}");

    // A worktree with a submodule is kept at archive (a commit made inside the submodule
    // lives only in the worktree's modules directory), and says why; discarding removes it.
    let archived = home.run(&["session", "archive", &session]);
    assert!(archived.status.success(), "{archived:?}");
    let note = String::from_utf8_lossy(&archived.stderr).into_owned();
    assert!(
        note.contains("it has submodules, whose commits corral cannot check")
            && note.contains("--discard-changes"),
        "{note}"
    );
    assert!(worktree.is_dir(), "a worktree with a submodule was removed");
    assert_eq!(home.session(&session)["worktree_state"], "kept");
    home.ok(&["session", "archive", &session, "--discard-changes"]);
    assert!(!worktree.exists(), "--discard-changes left the worktree");
    assert_eq!(home.session(&session)["worktree_state"], "removed");
    home.stop_daemon();
}

/// The one-line refusal of `--isolation worktree`, and the default falling back to shared
/// with a one-line note, under `home`'s (broken) PATH. The daemon must not have started yet:
/// the first command starts it with that PATH.
fn refuses_worktrees_without_usable_git(home: &GitHome, expected: &[&str]) {
    let repo = home.path().join("repo");
    // Started first, so that no command's stderr carries the autostart note.
    home.ok(&["daemon", "--detach"]);
    let refused = home.fails(
        &[
            "project",
            "add",
            "w",
            repo.to_str().unwrap(),
            "--engine",
            "command",
            "--isolation",
            "worktree",
        ],
        1,
    );
    assert!(one_line(&refused), "{refused}");
    assert!(
        expected.iter().any(|word| refused.contains(word)),
        "{refused} names none of {expected:?}"
    );
    let added = home.run(&[
        "project",
        "add",
        "d",
        repo.to_str().unwrap(),
        "--engine",
        "command",
    ]);
    assert!(added.status.success(), "{added:?}");
    let note = String::from_utf8_lossy(&added.stderr).into_owned();
    assert!(one_line(&note) && note.contains("git"), "{note}");
    let shown = home.json(&["project", "show", "d", "--json"]);
    assert_eq!(shown["isolation"], "shared", "{shown}");
    let projects = home.json(&["project", "list", "--json"]);
    let names: Vec<&str> = projects
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|project| project["name"].as_str())
        .collect();
    assert_eq!(names, vec!["d"], "the refused project was stored");
}

#[test]
fn without_git_a_worktree_project_is_refused_in_one_line() {
    let mut home = GitHome::new();
    home.repo("repo");
    let bin = home.bin_without_git("nogit", &["sh", "sleep", "cat", "touch"]);
    home.set_path_var(bin);
    refuses_worktrees_without_usable_git(&home, &["git"]);
    home.stop_daemon();
}

#[test]
fn with_a_git_older_than_2_17_a_worktree_project_is_refused_in_one_line() {
    let mut home = GitHome::new();
    home.repo("repo");
    let fake = home.script("oldgit", "git", "#!/bin/sh\necho 'git version 2.10.0'\n");
    home.set_path_var(path_with_first(fake.parent().unwrap()));
    refuses_worktrees_without_usable_git(&home, &["2.10", "2.17"]);
    home.stop_daemon();
}

#[test]
fn a_worktree_deleted_by_hand_is_reported_and_can_be_recreated_on_its_branch() {
    let (home, repo) = repo_home();
    let session = home.new_session(&["p", "--title", "deleted"]);
    home.prompt(
        &session,
        "echo saved > saved.txt && git add saved.txt && git commit -q -m saved",
    );
    let worktree = home.worktree_of(&session);
    let branch = home.branch_of(&session);
    let tip = home.sha(&worktree, "HEAD");
    std::fs::remove_dir_all(&worktree).unwrap();
    assert_eq!(home.session(&session)["worktree_state"], "missing");

    let stderr = home.fails(&["send", &session, "touch again.txt", "--wait"], 1);
    assert!(stderr.contains("corral session recreate"), "{stderr}");
    assert!(stderr.contains(worktree.to_str().unwrap()), "{stderr}");
    assert!(!worktree.exists(), "the failed prompt made something");

    home.ok(&["session", "recreate", &session]);
    assert_eq!(
        home.git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]),
        branch
    );
    assert_eq!(home.sha(&worktree, "HEAD"), tip);
    assert!(worktree.join("saved.txt").is_file());
    assert_eq!(home.session(&session)["worktree_state"], "ready");
    home.prompt(&session, "touch again.txt");
    assert!(worktree.join("again.txt").is_file());
    assert!(home.worktrees(&repo).iter().all(|(_, prunable)| !prunable));
    home.stop_daemon();
}

#[test]
fn two_sessions_never_share_a_worktree_even_made_at_the_same_moment() {
    let (home, repo) = repo_home();
    // Eight at once, one title: only the short id tells their paths apart.
    let children: Vec<_> = (0..8)
        .map(|_| {
            home.corral(&["session", "new", "p", "--title", "same", "--json"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("corral starts")
        })
        .collect();
    let mut sessions = Vec::new();
    for child in children {
        let output = finish(child);
        assert!(output.status.success(), "{output:?}");
        let shown: Value = serde_json::from_slice(&output.stdout).unwrap();
        let shown = shown.get("session").cloned().unwrap_or(shown);
        sessions.push(shown["id"].as_str().unwrap().to_string());
    }
    let mut worktrees = HashSet::new();
    let mut branches = HashSet::new();
    for session in &sessions {
        let worktree = home.worktree_of(session).canonicalize().unwrap();
        assert!(
            worktrees.insert(worktree.clone()),
            "shared {}",
            worktree.display()
        );
        assert!(branches.insert(home.branch_of(session)));
        assert!(listed(&home, &repo).contains(&worktree));
    }
    assert_eq!(listed(&home, &repo).len(), 1 + sessions.len());
    home.stop_daemon();
}

// 7. A daemon killed while it creates a worktree.

/// A project `p` on `repo`, a session `killed` whose `git worktree add` did its work and
/// then hung, and the daemon killed (-9) at that moment; the hanging git gone with it. The
/// session's id and the hanging process's pid. `home` must have run nothing yet (its daemon
/// starts here with the hanging git first on PATH); its PATH is the real one again after.
fn killed_mid_create(home: &mut GitHome, repo: &Path) -> (String, i32) {
    // A git whose `worktree add` does its work, says so, then hangs (exec: the sleep keeps
    // the daemon's death signal, so it dies with the daemon).
    let real = common::git::which("git").expect("git on PATH");
    let marker = home.path().join("worktree-add.pid");
    let wrapper = home.script(
        "slowgit",
        "git",
        &format!(
            "#!/bin/sh\ncase \" $* \" in\n*\" worktree add \"*)\n  '{real}' \"$@\" || exit $?\n  \
             echo $$ > '{marker}.tmp' && mv '{marker}.tmp' '{marker}'\n  exec sleep 30 ;;\n\
             esac\nexec '{real}' \"$@\"\n",
            real = real.display(),
            marker = marker.display()
        ),
    );
    home.set_path_var(path_with_first(wrapper.parent().unwrap()));
    home.config(&[("slots.command", "8"), ("cancel.grace_ms", "500")]);
    home.add_project("p", repo, &["--isolation", "worktree"]);

    let creating = home
        .corral(&["session", "new", "p", "--title", "killed", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("corral starts");
    wait_until("git worktree add ran", || marker.exists());
    let sleep: i32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(sleep));
    let daemon = home.home.daemon_pid().expect("a daemon");
    kill(daemon, libc::SIGKILL);
    wait_until("the daemon is gone", || !alive(daemon));
    wait_until("the hanging git is gone with the daemon", || !alive(sleep));
    let interrupted = finish(creating);
    assert!(!interrupted.status.success(), "{interrupted:?}");
    home.set_path_var(GitHome::real_path_var());

    // The row says what to finish.
    let rows = home
        .home
        .sql("SELECT id, worktree_state FROM sessions WHERE title = 'killed'");
    let row = rows
        .first()
        .expect("the session's row was written before git ran");
    let session = row[0].as_str().expect("an id").to_string();
    assert_eq!(row[1], "creating");
    (session, sleep)
}

#[test]
fn a_daemon_killed_mid_create_leaves_a_worktree_the_first_prompt_completes() {
    let mut home = GitHome::new();
    let repo = home.repo("repo");
    let (session, sleep) = killed_mid_create(&mut home, &repo);

    // A daemon with the real git: the worktree is completed (or redone) by the first prompt
    // at the latest.
    home.ok(&["daemon", "--detach"]);
    home.prompt(&session, "touch after.txt");
    let worktree = home.worktree_of(&session);
    let branch = home.branch_of(&session);
    assert!(worktree.join("after.txt").is_file());
    assert!(worktree.join("README.md").is_file());
    assert_eq!(
        home.git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]),
        branch
    );
    assert_eq!(home.session(&session)["worktree_state"], "ready");
    let entries = home.worktrees(&repo);
    assert!(entries.iter().all(|(_, prunable)| !prunable), "{entries:?}");
    assert_eq!(listed(&home, &repo).len(), 2, "{entries:?}");
    assert!(!repo.join("after.txt").exists());
    home.stop_daemon();
    assert!(!alive(sleep));
}

#[test]
fn a_path_taken_by_hand_after_a_killed_create_is_left_alone_until_freed() {
    let mut home = GitHome::new();
    let repo = home.repo("repo");
    let (session, _) = killed_mid_create(&mut home, &repo);
    // While no daemon runs, the person removes the half-made worktree and puts a directory
    // of their own where it was.
    let worktree = home.home.store().value(&format!(
        "SELECT worktree FROM sessions WHERE id = {}",
        common::store::quoted(&session)
    ));
    let worktree = PathBuf::from(worktree.as_str().expect("a worktree path"));
    std::fs::remove_dir_all(&worktree).unwrap();
    std::fs::create_dir(&worktree).unwrap();
    std::fs::write(worktree.join("mine.txt"), "the person's\n").unwrap();

    home.ok(&["daemon", "--detach"]);
    let stderr = home.fails(&["send", &session, "touch after.txt", "--wait"], 1);
    assert!(stderr.contains(worktree.to_str().unwrap()), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(worktree.join("mine.txt")).unwrap(),
        "the person's\n"
    );
    assert_eq!(std::fs::read_dir(&worktree).unwrap().count(), 1);

    // Freed, the next prompt makes the worktree and runs in it.
    std::fs::remove_dir_all(&worktree).unwrap();
    home.prompt(&session, "touch after.txt");
    assert!(worktree.join("after.txt").is_file());
    assert_eq!(
        home.git(&worktree, &["rev-parse", "--abbrev-ref", "HEAD"]),
        home.branch_of(&session)
    );
    let entries = home.worktrees(&repo);
    assert!(entries.iter().all(|(_, prunable)| !prunable), "{entries:?}");
    assert_eq!(listed(&home, &repo).len(), 2, "{entries:?}");
    home.stop_daemon();
}

// 8. The branch everywhere.

#[test]
fn the_branch_shows_wherever_a_session_shows() {
    let (home, _repo) = repo_home();
    let session = home.new_session(&["p", "--title", "shown"]);
    home.prompt(&session, "echo hi");
    let shown = home.session(&session);
    let branch = shown["branch"].as_str().expect("a branch").to_string();
    assert!(branch.starts_with("corral/shown-"), "{shown}");
    for field in ["worktree", "base", "base_commit"] {
        assert!(shown[field].is_string(), "no {field}: {shown}");
    }
    assert_eq!(shown["worktree_state"], "ready", "{shown}");

    for args in [
        vec!["session", "list"],
        vec!["session", "show", &session],
        vec!["history", &session],
        vec!["monitor", "--all"],
    ] {
        let out = home.ok(&args);
        assert!(out.contains(&branch), "{args:?} shows no {branch}:\n{out}");
    }
    let listed = home.json(&["session", "list", "--json"]);
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["id"] == session.as_str())
        .expect("the session is listed");
    assert_eq!(entry["branch"], branch.as_str(), "{entry}");
    home.stop_daemon();
}
