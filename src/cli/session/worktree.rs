//! A session's git worktree at the command line (docs/worktrees.md): `session archive` (and
//! what became of the worktree), `session diff`, `session merge`, `session recreate`, and the
//! lines `session show`, `session list`, `history` and `monitor` show about a worktree.
//!
//! Each command is one daemon call; the daemon does the git work and answers one line when
//! it refuses (a dirty side, a conflict, a session without a worktree), which is printed as
//! it is, exit 1. The formatting here is pure, so it is tested without a daemon.

use std::io::Write;

use crate::cli::remote::{self, cut, or_dash, print_json};
use crate::cli::{CliError, Context, Exit};
use crate::protocol::sessions::{Session, SessionMerged};
use crate::protocol::{
    SessionArchive, SessionArchiveParams, SessionDiff, SessionDiffParams, SessionMerge,
    SessionMergeParams, SessionRecreate, SessionSelector,
};

use super::ShowArgs;

/// The most characters of a branch a table shows (a default branch is at most 56: the
/// `corral/` prefix, a 40-character slug and the short id).
pub const BRANCH_CHARS: usize = 60;

#[derive(Debug, clap::Args)]
pub struct ArchiveArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// Remove its worktree even when it has uncommitted changes: they are lost (its branch
    /// and commits stay). Also works on a session archived already.
    #[arg(long)]
    pub discard_changes: bool,
    /// Print the archived session as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// The summary (files, insertions, deletions) instead of the patch.
    #[arg(long)]
    pub stat: bool,
    /// Print {session_id, branch, base_commit, text, files_changed, insertions, deletions}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The session: its id, title, or a unique id prefix.
    pub session: String,
    /// The branch to merge into (default: the session's base, when that is a branch).
    #[arg(long, value_name = "BRANCH")]
    pub into: Option<String>,
    /// One commit with all the session's changes instead of a merge commit.
    #[arg(long)]
    pub squash: bool,
    /// Print the merge as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn archive(context: &Context, args: &ArchiveArgs) -> Result<Exit, CliError> {
    let params = SessionArchiveParams {
        session: args.session.clone(),
        discard_changes: args.discard_changes.then_some(true),
    };
    let mut client = remote::connect(context).await?;
    let answered = remote::ask_answered::<SessionArchive>(&mut client, &params).await?;
    let session = &answered.result;
    // A kept worktree is said on stderr even with --json: the person must not miss it.
    if let Some(note) = kept_note(session, &args.session) {
        say!("{note}");
    }
    if args.json {
        print_json(&answered.said);
        return Ok(Exit::success());
    }
    println!("archived session {}", session.id);
    if let Some(line) = removed_line(session) {
        println!("{line}");
    }
    Ok(Exit::success())
}

pub async fn diff(context: &Context, args: &DiffArgs) -> Result<Exit, CliError> {
    let params = SessionDiffParams {
        session: args.session.clone(),
        stat: args.stat.then_some(true),
    };
    let mut client = remote::connect(context).await?;
    let answered = remote::ask_answered::<SessionDiff>(&mut client, &params).await?;
    if args.json {
        print_json(&answered.said);
        return Ok(Exit::success());
    }
    let diff = &answered.result;
    let patch = diff.text.as_str();
    // Nothing on a pipe (`corral session diff S | git apply` gets an empty patch, as from
    // `git diff`), a word for a person.
    let shown = if patch.is_empty() && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        format!(
            "(no changes against its base {})\n",
            short_commit(&diff.base_commit)
        )
    } else {
        with_newline(patch)
    };
    write_out(&shown)?;
    Ok(Exit::success())
}

pub async fn merge(context: &Context, args: &MergeArgs) -> Result<Exit, CliError> {
    let params = SessionMergeParams {
        session: args.session.clone(),
        into: args.into.clone(),
        squash: args.squash.then_some(true),
    };
    let mut client = remote::connect(context).await?;
    let merged = remote::ask_answered::<SessionMerge>(&mut client, &params).await?;
    if args.json {
        print_json(&merged.said);
    } else {
        for line in merged_lines(&merged.result) {
            println!("{line}");
        }
    }
    Ok(Exit::success())
}

pub async fn recreate(context: &Context, args: &ShowArgs) -> Result<Exit, CliError> {
    let mut client = remote::connect(context).await?;
    let params = SessionSelector::new(&args.session);
    let session = remote::ask_answered::<SessionRecreate>(&mut client, &params).await?;
    if args.json {
        print_json(&session.said);
    } else {
        println!(
            "recreated worktree {} on branch {}",
            or_dash(session.result.worktree.as_deref()),
            or_dash(session.result.branch.as_deref())
        );
    }
    Ok(Exit::success())
}

/// Text that ends with a newline (unless it is empty).
fn with_newline(text: &str) -> String {
    let mut text = text.to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// Writes to stdout; a reader that closed the pipe (`| head`) had what it wanted.
fn write_out(text: &str) -> Result<(), CliError> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::failure(format!("stdout: {error}")))
        }
        _ => Ok(()),
    }
}

/// A commit's short form (git's seven hex digits), or `-`.
pub fn short_commit(sha: &str) -> &str {
    match sha.char_indices().nth(7) {
        Some((at, _)) => &sha[..at],
        None => sha,
    }
}

/// A word as a shell reads it back: as it is when it is plain, else in single quotes (a
/// session's title typed as its selector may hold spaces).
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What `session archive` says on stderr when the daemon kept the worktree: where it is, why,
/// and the command that discards it (with the selector as the person typed it).
fn kept_note(session: &Session, selector: &str) -> Option<String> {
    (session.worktree_state.as_deref() == Some("kept")).then(|| {
        let uncommitted = "it has uncommitted changes";
        let (why, how) = match session.worktree_kept_because.as_deref() {
            Some(why) if why != uncommitted => (why, "remove it anyway with"),
            _ => (uncommitted, "discard them with"),
        };
        format!(
            "corral: kept worktree {}: {why}; {how}: corral session archive {} \
             --discard-changes",
            or_dash(session.worktree.as_deref()),
            shell_word(selector)
        )
    })
}

/// What `session archive` says when the worktree went.
fn removed_line(session: &Session) -> Option<String> {
    (session.worktree_state.as_deref() == Some("removed")).then(|| {
        format!(
            "removed worktree {} (branch {} kept)",
            or_dash(session.worktree.as_deref()),
            or_dash(session.branch.as_deref())
        )
    })
}

/// What `session merge` says: the merge, and the checkout of the target branch it
/// fast-forwarded (where that branch was checked out).
fn merged_lines(merged: &SessionMerged) -> Vec<String> {
    let how = if merged.squash { "squashed" } else { "merged" };
    let mut lines = vec![format!(
        "{how} {} into {} (commit {})",
        merged.branch,
        merged.into,
        short_commit(&merged.commit)
    )];
    if let Some(path) = &merged.checkout_updated {
        lines.push(format!("fast-forwarded {path}"));
    }
    lines
}

/// A worktree's state in words, with what to do about it (`id`: the session's, for the
/// commands named).
fn state_words(state: &str, id: &str) -> String {
    match state {
        "creating" => "creating: made before its first prompt".into(),
        "setup" => "setup: the project's setup command runs before its next prompt".into(),
        "removed" => "removed at archive; its branch is kept".into(),
        "kept" => format!(
            "kept: archived with uncommitted changes; `corral session archive {id} \
             --discard-changes` removes it"
        ),
        "missing" => {
            format!("missing: removed by hand? `corral session recreate {id}` makes it again")
        }
        other => other.into(),
    }
}

/// The worktree's lines of `session show` (labels as wide as the others there).
pub fn shown_lines(session: &Session) -> Vec<String> {
    let Some(path) = &session.worktree else {
        return vec!["worktree:  none (it runs in its project's path)".into()];
    };
    vec![
        format!(
            "worktree:  {path} ({})",
            state_words(or_dash(session.worktree_state.as_deref()), &session.id)
        ),
        format!("branch:    {}", or_dash(session.branch.as_deref())),
        format!(
            "base:      {} ({})",
            or_dash(session.base.as_deref()),
            short_commit(or_dash(session.base_commit.as_deref()))
        ),
    ]
}

/// `history`'s line under its header, for a session with a worktree.
pub fn history_line(session: &Session) -> Option<String> {
    let path = session.worktree.as_ref()?;
    Some(format!(
        "branch {} from {} ({}), worktree {path} ({})",
        or_dash(session.branch.as_deref()),
        or_dash(session.base.as_deref()),
        short_commit(or_dash(session.base_commit.as_deref())),
        or_dash(session.worktree_state.as_deref()),
    ))
}

/// A table's BRANCH column: there only when a row has a branch, as wide as the longest
/// (at most [`BRANCH_CHARS`]); blank for a session without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchColumn {
    width: Option<usize>,
}

impl BranchColumn {
    pub fn of<'a>(branches: impl IntoIterator<Item = Option<&'a str>>) -> BranchColumn {
        let widest = branches
            .into_iter()
            .flatten()
            .map(|branch| branch.chars().count().min(BRANCH_CHARS))
            .max();
        BranchColumn {
            width: widest.map(|widest| widest.max("BRANCH".len())),
        }
    }

    /// The header's cell with its separator, or nothing.
    pub fn header(&self) -> String {
        self.cell(Some("BRANCH"))
    }

    /// A row's cell with its separator, or nothing.
    pub fn cell(&self, branch: Option<&str>) -> String {
        match self.width {
            None => String::new(),
            Some(width) => format!("{:<width$}  ", cut(branch.unwrap_or(""), BRANCH_CHARS)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn worktree_session(state: &str) -> Value {
        json!({
            "id": "0190-s",
            "worktree": "/w/p/fix-1234abcd",
            "branch": "corral/fix-1234abcd",
            "base": "main",
            "base_commit": "0123456789abcdef0123456789abcdef01234567",
            "worktree_state": state,
        })
    }

    #[test]
    fn a_kept_worktree_says_where_why_and_the_command_with_the_selector_typed() {
        let worktree_session = |state: &str| typed(worktree_session(state));
        let note = kept_note(&worktree_session("kept"), "fix it").unwrap();
        assert_eq!(
            note,
            "corral: kept worktree /w/p/fix-1234abcd: it has uncommitted changes; discard them \
             with: corral session archive 'fix it' --discard-changes"
        );
        assert!(kept_note(&worktree_session("removed"), "s").is_none());
        assert!(kept_note(&typed(json!({"id": "s"})), "s").is_none());
        assert_eq!(
            removed_line(&worktree_session("removed")).unwrap(),
            "removed worktree /w/p/fix-1234abcd (branch corral/fix-1234abcd kept)"
        );
        assert!(removed_line(&worktree_session("kept")).is_none());
    }

    #[test]
    fn shell_words_quote_only_what_needs_it() {
        assert_eq!(shell_word("0190abc"), "0190abc");
        assert_eq!(shell_word("fix/login-2"), "fix/login-2");
        assert_eq!(shell_word("my task"), "'my task'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("$HOME"), "'$HOME'");
    }

    #[test]
    fn short_commits_are_seven_digits() {
        assert_eq!(short_commit("0123456789abcdef"), "0123456");
        assert_eq!(short_commit("abc"), "abc");
        assert_eq!(short_commit("-"), "-");
    }

    #[test]
    fn a_merge_names_both_branches_the_commit_and_the_checkout() {
        let merged = serde_json::from_value(json!({
            "session_id": "s", "branch": "corral/fix-1234abcd", "into": "main",
            "commit": "fedcba9876543210", "squash": false, "checkout_updated": "/repo",
        }))
        .unwrap();
        assert_eq!(
            merged_lines(&merged),
            [
                "merged corral/fix-1234abcd into main (commit fedcba9)",
                "fast-forwarded /repo"
            ]
        );
        let squashed = serde_json::from_value(json!({
            "session_id": "s", "branch": "b", "into": "dev", "commit": "1111111222",
            "squash": true, "checkout_updated": null,
        }))
        .unwrap();
        assert_eq!(
            merged_lines(&squashed),
            ["squashed b into dev (commit 1111111)"]
        );
    }

    /// A session as the daemon answers it, with `fields` over a plain one's.
    fn typed(fields: Value) -> crate::protocol::sessions::Session {
        let mut session = json!({
            "id": "s", "project_id": "p", "engine": "fake", "model": null,
            "reasoning_effort": null, "thread_id": null, "resume_point": null, "title": null,
            "title_source": null, "status": "idle", "task": null, "wave_id": null,
            "created_at": 0, "archived_at": null, "last_event_seq": 0,
            "compacted_message_count": null, "compacted_character_count": null,
            "compacted_at": null, "policy": null,
        });
        for (key, value) in fields.as_object().unwrap() {
            session[key] = value.clone();
        }
        serde_json::from_value(session).unwrap()
    }

    #[test]
    fn show_and_history_carry_path_branch_base_and_state() {
        let worktree_session = |state: &str| typed(worktree_session(state));
        let lines = shown_lines(&worktree_session("ready"));
        assert_eq!(
            lines,
            [
                "worktree:  /w/p/fix-1234abcd (ready)",
                "branch:    corral/fix-1234abcd",
                "base:      main (0123456)",
            ]
        );
        let missing = shown_lines(&worktree_session("missing"));
        assert!(
            missing[0].contains("corral session recreate 0190-s"),
            "{missing:?}"
        );
        assert_eq!(
            shown_lines(&typed(json!({"id": "s", "worktree": null}))),
            ["worktree:  none (it runs in its project's path)"]
        );
        assert_eq!(
            history_line(&worktree_session("kept")).unwrap(),
            "branch corral/fix-1234abcd from main (0123456), worktree /w/p/fix-1234abcd (kept)"
        );
        assert!(history_line(&typed(json!({"id": "s"}))).is_none());
    }

    #[test]
    fn the_branch_column_is_there_only_with_a_branch_and_fits_the_longest() {
        let none = BranchColumn::of([None, None]);
        assert_eq!(none.header(), "");
        assert_eq!(none.cell(None), "");
        let some = BranchColumn::of([None, Some("corral/a-12345678")]);
        assert_eq!(some.header(), format!("{:<17}  ", "BRANCH"));
        assert_eq!(some.cell(Some("corral/a-12345678")), "corral/a-12345678  ");
        assert_eq!(some.cell(None), format!("{:19}", ""));
        let short = BranchColumn::of([Some("x")]);
        assert_eq!(short.cell(Some("x")), "x       ");
        let long = "b".repeat(BRANCH_CHARS + 5);
        let cell = BranchColumn::of([Some(long.as_str())]).cell(Some(&long));
        assert_eq!(cell.chars().count(), BRANCH_CHARS + 2);
        assert!(cell.trim_end().ends_with('…'));
    }

    #[test]
    fn a_diff_ends_with_a_newline() {
        assert_eq!(with_newline(""), "");
        assert_eq!(with_newline("a"), "a\n");
        assert_eq!(with_newline("a\n"), "a\n");
    }
}
