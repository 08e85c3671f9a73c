//! What an agent working in a session's worktree can make corral's own git calls do (issue 13's
//! review), through the built binary against a real daemon and real git (`common::git`). The
//! `command` engine plays the agent: its prompt is a shell command line run in the worktree.
//! Everything in the worktree is the agent's to write — its `.git` file, a submodule's `.git`
//! file — so `session diff`, `session merge` and `session archive`, asked by the person (this
//! test process), must never run a program the agent chose, and must still act on the real
//! worktree (or refuse in one line). Also: what archive keeps (submodules, a HEAD off the
//! branch, an operation in progress), registrations that are not the session's, merge into
//! another busy session's checkout, the merge scratch, and branch names.

use crate::common;

use std::path::{Path, PathBuf};

use common::git::GitHome;

/// A home whose command engine has short grace periods.
fn command_home() -> GitHome {
    let home = GitHome::new();
    home.config(&[
        ("cancel.grace_ms", "300"),
        ("daemon.shutdown_grace_ms", "300"),
    ]);
    home
}

/// A repository the agent made (outside the worktree), whose configuration names a script as
/// `core.fsmonitor` (git runs it whenever it refreshes an index of this repository) and as a
/// clean filter.
/// (its git directory, the marker file the script makes when it runs).
fn evil_repository(home: &GitHome) -> (PathBuf, PathBuf) {
    let evil = home.path().join("evil");
    std::fs::create_dir_all(&evil).unwrap();
    home.git(&evil, &["init", "-q"]);
    home.commit_file(
        &evil,
        "evil.txt",
        "evil\n",
        "a commit, so that git goes on there",
    );
    let marker = home.path().join("hook-ran");
    let hook = home.script(
        "evil-bin",
        "fsmonitor.sh",
        &format!("#!/bin/sh\necho \"$@\" >> '{}'\nexit 1\n", marker.display()),
    );
    home.git(&evil, &["config", "core.fsmonitor", hook.to_str().unwrap()]);
    // And a clean filter, run on any file whose attributes name it.
    home.git(
        &evil,
        &["config", "filter.evil.clean", hook.to_str().unwrap()],
    );
    (evil.join(".git"), marker)
}

/// A worktree project `app` on `repo` and a session of it: its id and worktree.
fn session_of(home: &GitHome, repo: &Path) -> (String, PathBuf) {
    home.add_project("app", repo, &["--isolation", "worktree"]);
    let session = home.new_session(&["app", "--title", "agent"]);
    let worktree = home.worktree_of(&session);
    (session, worktree)
}

/// The agent's prompt: commits `work.txt` on its branch, then points the `.git` file at
/// `gitfile` (relative to the worktree) to its own repository.
fn agent_commits_then_redirects(gitfile: &str, evil: &Path) -> String {
    format!(
        "echo work > work.txt && git add work.txt && git commit -qm 'agent work' && \
         printf 'gitdir: %s\\n' '{}' > {gitfile}",
        evil.display()
    )
}

/// The person's diff, merge and archive of `session`: none runs the agent's script; diff and
/// merge act on the real worktree; archive succeeds or refuses in one line.
fn person_commands_run_nothing_of_the_agent(home: &GitHome, repo: &Path, session: &str) {
    let marker = home.path().join("hook-ran");
    let ran = || std::fs::read_to_string(&marker).unwrap_or_default();

    let diff = home.ok(&["session", "diff", session]);
    assert!(diff.contains("+work"), "the real worktree's diff: {diff}");
    assert_eq!(ran(), "", "session diff ran the agent's fsmonitor");

    home.ok(&["session", "merge", session]);
    assert_eq!(ran(), "", "session merge ran the agent's fsmonitor");
    assert_eq!(
        std::fs::read_to_string(repo.join("work.txt")).unwrap(),
        "work\n"
    );

    let archive = home.run(&["session", "archive", session]);
    let stderr = String::from_utf8_lossy(&archive.stderr);
    assert!(archive.status.success(), "{stderr}");
    assert!(
        stderr.contains("kept worktree")
            && (stderr.contains("its .git file no longer names") || stderr.contains("submodules")),
        "{stderr}"
    );
    assert_eq!(ran(), "", "session archive ran the agent's fsmonitor");
}

#[test]
fn a_rewritten_worktree_git_file_leads_no_git_call_of_corral_elsewhere() {
    let home = command_home();
    let repo = home.repo("repo");
    let (session, worktree) = session_of(&home, &repo);
    let (evil, _marker) = evil_repository(&home);
    home.prompt(&session, &agent_commits_then_redirects(".git", &evil));
    assert!(std::fs::read_to_string(worktree.join(".git"))
        .unwrap()
        .contains("evil"));
    person_commands_run_nothing_of_the_agent(&home, &repo, &session);
    // Archive kept it, saying why; discarding removes it all the same.
    assert_eq!(home.session(&session)["worktree_state"], "kept");
    home.ok(&["session", "archive", &session, "--discard-changes"]);
    assert!(!worktree.exists());
    assert_eq!(home.worktrees(&repo).len(), 1);
}

#[test]
fn a_rewritten_submodule_git_file_leads_no_git_call_of_corral_into_it() {
    let home = command_home();
    let lib = home.repo("lib");
    let repo = home.repo("repo");
    home.git(
        &repo,
        &["submodule", "add", "-q", lib.to_str().unwrap(), "lib"],
    );
    home.git(&repo, &["commit", "-q", "-m", "add lib"]);
    let (session, worktree) = session_of(&home, &repo);
    assert!(worktree.join("lib/README.md").is_file(), "initialized");
    let (evil, _marker) = evil_repository(&home);
    let prompt = agent_commits_then_redirects("lib/.git", &evil);
    home.prompt(
        &session,
        &format!("{prompt} && echo '* filter=evil' > lib/.gitattributes"),
    );
    person_commands_run_nothing_of_the_agent(&home, &repo, &session);
}

#[test]
fn a_fifo_where_the_agent_points_the_index_does_not_hang_the_daemon() {
    let home = command_home();
    let repo = home.repo("repo");
    let (session, worktree) = session_of(&home, &repo);
    let (evil, _marker) = evil_repository(&home);
    std::fs::remove_file(evil.join("index")).unwrap();
    nix::unistd::mkfifo(&evil.join("index"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    home.prompt(
        &session,
        &format!("printf 'gitdir: %s\\n' '{}' > .git", evil.display()),
    );
    assert!(std::fs::read_to_string(worktree.join(".git"))
        .unwrap()
        .contains("evil"));
    std::fs::write(worktree.join("new.txt"), "new\n").unwrap();
    // Each command ends within the tests' deadline, or the test fails.
    let diff = home.ok(&["session", "diff", &session, "--stat"]);
    assert!(diff.contains("new.txt"), "{diff}");
    home.ok(&["status"]);
}

/// `session archive S` of a worktree that must be kept: its stderr (exit 0), after checking
/// the worktree is still there and `kept`.
fn archive_keeps(home: &GitHome, session: &str, worktree: &Path) -> String {
    let output = home.run(&["session", "archive", session]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    assert!(worktree.is_dir(), "removed: {stderr}");
    assert_eq!(home.session(session)["worktree_state"], "kept", "{stderr}");
    stderr
}

#[test]
fn a_worktree_with_submodules_is_kept_at_archive_unless_its_changes_are_discarded() {
    let home = command_home();
    let lib = home.repo("lib");
    let repo = home.repo("repo");
    home.git(
        &repo,
        &["submodule", "add", "-q", lib.to_str().unwrap(), "lib"],
    );
    home.git(&repo, &["commit", "-q", "-m", "add lib"]);
    let (session, worktree) = session_of(&home, &repo);
    // A commit inside the submodule, recorded by the session's branch: it lives only in the
    // worktree's own copy of the submodule's repository.
    let sub = worktree.join("lib");
    home.git(&sub, &["checkout", "-q", "-b", "feature"]);
    let commit = home.commit_file(&sub, "x.txt", "x\n", "sub work");
    home.git(&worktree, &["add", "lib"]);
    home.git(&worktree, &["commit", "-q", "-m", "bump lib"]);
    assert_eq!(home.status(&worktree), "");

    let stderr = archive_keeps(&home, &session, &worktree);
    assert!(
        stderr.contains("it has submodules, whose commits corral cannot check"),
        "{stderr}"
    );
    assert_eq!(home.sha(&sub, "HEAD"), commit);
    home.ok(&["session", "archive", &session, "--discard-changes"]);
    assert!(!worktree.exists());
    assert_eq!(home.session(&session)["worktree_state"], "removed");
}

#[test]
fn a_worktree_off_its_branch_or_midway_through_a_merge_is_kept_at_archive() {
    let home = command_home();
    let repo = home.repo("repo");
    home.add_project("app", &repo, &["--isolation", "worktree"]);
    let made = |title: &str| {
        let session = home.new_session(&["app", "--title", title]);
        let worktree = home.worktree_of(&session);
        (session, worktree)
    };

    // Commits on a detached HEAD are on no branch: removing the worktree would orphan them.
    let (detached, worktree) = made("detached");
    home.git(&worktree, &["checkout", "-q", "--detach"]);
    home.commit_file(&worktree, "w.txt", "w\n", "work on a detached HEAD");
    let stderr = archive_keeps(&home, &detached, &worktree);
    assert!(stderr.contains("its HEAD is detached"), "{stderr}");

    // Another branch checked out there.
    let (other, worktree) = made("other");
    home.git(&worktree, &["checkout", "-q", "-b", "elsewhere"]);
    let stderr = archive_keeps(&home, &other, &worktree);
    assert!(
        stderr.contains("it has elsewhere checked out, not its branch"),
        "{stderr}"
    );

    // A merge stopped on a conflict.
    let (merging, worktree) = made("merging");
    let branch = home.branch_of(&merging);
    home.git(&worktree, &["checkout", "-q", "-b", "side"]);
    home.commit_file(&worktree, "README.md", "side\n", "side");
    home.git(&worktree, &["checkout", "-q", &branch]);
    home.commit_file(&worktree, "README.md", "session\n", "session");
    let merge = home.git_output(&worktree, &["merge", "side"]);
    assert!(!merge.status.success(), "a conflict");
    let stderr = archive_keeps(&home, &merging, &worktree);
    assert!(stderr.contains("a merge is in progress in it"), "{stderr}");
}

#[test]
fn recreate_and_archive_drop_only_the_sessions_own_registration() {
    let home = command_home();
    let repo = home.repo("repo");
    // The person's own worktree, on a disk not mounted now: its directory is missing.
    let usb = home.path().join("usb");
    std::fs::create_dir_all(&usb).unwrap();
    let mine = usb.join("mywork");
    home.git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "mywork",
            mine.to_str().unwrap(),
        ],
    );
    std::fs::rename(&usb, home.path().join("usb-unplugged")).unwrap();
    let (session, worktree) = session_of(&home, &repo);
    let registered = |path: &Path| home.worktrees(&repo).iter().any(|(p, _)| p == path);

    std::fs::remove_dir_all(&worktree).unwrap();
    home.ok(&["session", "recreate", &session]);
    assert!(worktree.join("README.md").is_file());
    assert!(registered(&mine), "recreate pruned the person's worktree");

    std::fs::remove_dir_all(&worktree).unwrap();
    home.ok(&["session", "archive", &session]);
    assert_eq!(home.session(&session)["worktree_state"], "removed");
    assert!(!registered(&worktree));
    assert!(registered(&mine), "archive pruned the person's worktree");
}

#[test]
fn branch_names_git_would_read_otherwise_and_unknown_bases_are_refused_in_one_line() {
    let home = command_home();
    let repo = home.repo("repo");
    home.add_project("app", &repo, &["--isolation", "worktree"]);
    let branches_before = home.git(&repo, &["branch", "--list"]);
    for name in [
        "refs/heads/main",
        "HEAD",
        "@",
        "@{-1}",
        "a..b",
        "x y",
        "-x",
        "ends.lock",
    ] {
        let stderr = home.fails(&["session", "new", "app", &format!("--branch={name}")], 1);
        assert!(
            stderr.contains(&format!("'{name}' is no branch name")),
            "{name}: {stderr}"
        );
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    for base in ["HEAD@{1}", "no-such-ref"] {
        let stderr = home.fails(&["session", "new", "app", "--base", base], 1);
        assert!(
            stderr.contains(&format!("unknown revision {base}")),
            "{base}: {stderr}"
        );
    }
    assert_eq!(home.git(&repo, &["branch", "--list"]), branches_before);
    // A plain name with a slash is a branch name.
    let session = home.new_session(&["app", "--branch", "topic/fix"]);
    assert_eq!(home.branch_of(&session), "topic/fix");
}

#[test]
fn a_merge_into_a_branch_another_busy_session_has_checked_out_is_refused() {
    let home = command_home();
    let repo = home.repo("repo");
    home.git(&repo, &["checkout", "-q", "-b", "dev"]);
    home.add_project("app", &repo, &["--isolation", "worktree"]);
    let holder = home.new_session(&["app", "--title", "holder", "--branch", "main"]);
    let holder_worktree = home.worktree_of(&holder);
    let merged = home.new_session(&["app", "--title", "merged", "--base", "main"]);
    let worktree = home.worktree_of(&merged);
    home.commit_file(&worktree, "x.txt", "x\n", "work to merge");

    let sent = home.json(&["send", &holder, "sleep 30", "--json"]);
    let prompt = sent["id"].as_str().expect("a prompt id").to_string();
    let stderr = home.fails(&["session", "merge", &merged], 1);
    assert!(
        stderr.contains(&format!("checked out in session {holder}'s worktree"))
            && stderr.contains(&prompt),
        "{stderr}"
    );
    assert!(!holder_worktree.join("x.txt").exists());
    assert_eq!(home.sha(&repo, "main"), home.sha(&holder_worktree, "HEAD"));

    home.ok(&["cancel", &prompt]);
    let mut rpc = common::rpc::Rpc::connect(home.path());
    rpc.call("prompt.wait", serde_json::json!({ "prompt": prompt }))
        .unwrap();
    home.ok(&["session", "merge", &merged]);
    assert!(holder_worktree.join("x.txt").is_file(), "fast-forwarded");
}

#[test]
fn a_merge_clears_the_scratch_a_killed_merge_left_and_nothing_else() {
    let home = command_home();
    let repo = home.repo("repo");
    let (session, worktree) = session_of(&home, &repo);
    let hex: String = session.chars().filter(char::is_ascii_hexdigit).collect();
    let scratch = worktree
        .parent()
        .unwrap()
        .join(format!(".merge-{}", &hex[hex.len() - 8..]));
    let merge_once = |file: &str| {
        home.commit_file(&worktree, file, "w\n", file);
        home.run(&["session", "merge", &session])
    };

    // A detached worktree left there, registered.
    home.git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "--detach",
            scratch.to_str().unwrap(),
        ],
    );
    assert!(merge_once("one.txt").status.success());
    assert!(!scratch.exists());
    assert_eq!(
        home.worktrees(&repo).len(),
        2,
        "the scratch's registration gone"
    );

    // An empty directory left there.
    std::fs::create_dir_all(&scratch).unwrap();
    assert!(merge_once("two.txt").status.success());
    assert!(!scratch.exists());

    // Anything else is not corral's: refused, left as it is.
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::write(scratch.join("notes.txt"), "mine").unwrap();
    let refused = merge_once("three.txt");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("exists already"));
    assert_eq!(
        std::fs::read_to_string(scratch.join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(!repo.join("three.txt").exists());
}
