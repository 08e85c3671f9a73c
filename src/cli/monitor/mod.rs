//! `corral monitor` (aliases `ps`, `top`, `mon`): the exec history and what runs now.
//!
//! Without a subcommand it prints the overview: execs still running, execs whose process is
//! gone without completing (gaps), and a page of recent commands. The subcommands, one file
//! each: [`list`] (filtered, paged history), [`show`] (one exec), [`prune`] (close lost execs).
//!
//! On a store that several hosts share, each exec names its host: a table shows a HOST
//! column when its rows name more than one ([`HostColumn`]), the JSON always has `host`.

pub mod list;
pub mod prune;
pub mod show;

use std::path::Path;

use serde::Serialize;

use super::session::worktree::BranchColumn;
use super::{CliError, Context, Exit};
use crate::store::exec::{self, Exec, ExecFilter, ExecPage};
use crate::store::overview::{self, SessionItem};
use crate::store::runs;
use crate::store::select::{IdKind, ShortIds};
use crate::store::sql::{self, Conn};

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct MonitorArgs {
    #[command(subcommand)]
    pub action: Option<MonitorAction>,

    /// Every repository, not only the current one.
    #[arg(long)]
    pub all: bool,

    /// Print the overview as one JSON object.
    #[arg(long)]
    pub json: bool,

    /// Redraw every second until interrupted (what `corral top` does in a terminal).
    #[arg(long)]
    pub live: bool,
}

#[derive(Debug, clap::Subcommand)]
pub enum MonitorAction {
    /// The exec history, newest first, filtered and paged.
    List(list::ListArgs),
    /// One exec, by a unique prefix of its id.
    Show(show::ShowArgs),
    /// Close as `lost` the execs that never completed and whose process is gone.
    Prune(prune::PruneArgs),
}

pub async fn execute(context: &Context, args: &MonitorArgs) -> Result<Exit, CliError> {
    match &args.action {
        Some(MonitorAction::List(list)) => list::execute(context, list),
        Some(MonitorAction::Show(show)) => show::execute(context, show),
        Some(MonitorAction::Prune(prune)) => prune::execute(context, prune).await,
        None => overview(context, args).await,
    }
}

/// The overview: sessions, what runs now, and recent commands.
#[derive(Debug, Serialize)]
pub struct Overview {
    /// Every session and its state.
    pub items: Vec<SessionItem>,
    pub active: Active,
    pub recent_commands: ExecPage,
    /// The short forms the text shows of the ids above (not part of the JSON).
    #[serde(skip)]
    pub short_ids: ShortIds,
}

#[derive(Debug, Serialize)]
pub struct Active {
    /// Execs still running: not completed, and their process alive (or another host's, whose
    /// pid this host cannot judge).
    pub execs: Vec<Exec>,
    /// Runs marked running whose engine process is gone (a daemon died; the next one closes
    /// them as interrupted and requeues their prompts).
    pub gaps: Vec<runs::Run>,
    /// Execs never completed whose process is gone; `corral monitor prune` closes them.
    pub lost_execs: Vec<Exec>,
}

/// Reads the overview from the store, with the same reads as the daemon's `overview`
/// (`store::overview`). `scope` limits execs to a repository (see [`repo_scope`]).
pub fn build_overview(connection: &Conn, scope: Option<Option<String>>) -> sql::Result<Overview> {
    let filter = ExecFilter {
        repo: scope.clone(),
        ..ExecFilter::default()
    };
    let recent = exec::list(connection, &filter, None, overview::RECENT)?;
    let (execs, lost_execs) = overview::open_execs(connection, scope.as_ref())?;
    // Read without asking a daemon: a run whose pid is not recorded counts as a gap.
    let (_, gaps) = overview::runs_now(connection, false)?;
    let items = overview::sessions(connection)?;
    let mut short_ids = ShortIds::of(
        Some(connection),
        IdKind::Session,
        items.iter().map(|item| item.id.as_str()),
    )?;
    let shown_execs = execs.iter().chain(&lost_execs).chain(&recent.entries);
    short_ids.add(
        Some(connection),
        IdKind::Exec,
        shown_execs.map(|exec| exec.id.as_str()),
    )?;
    Ok(Overview {
        items,
        active: Active {
            execs,
            gaps,
            lost_execs,
        },
        recent_commands: recent,
        short_ids,
    })
}

/// Prints the overview as text.
pub fn print_overview(overview: &Overview) {
    let short = &overview.short_ids;
    if !overview.items.is_empty() {
        println!("SESSIONS ({})", overview.items.len());
        let width = short.width(overview.items.iter().map(|item| item.id.as_str()));
        // A BRANCH column only when a session has its own worktree.
        let branches = BranchColumn::of(overview.items.iter().map(|item| item.branch.as_deref()));
        println!(
            "{:<width$}  {:<12}  {:<8}  {:<16}  {:<30}  {}REASON",
            "ID",
            "PROJECT",
            "ENGINE",
            "STATE",
            "TITLE",
            branches.header()
        );
        for item in &overview.items {
            let title: String = super::remote::one_line(item.title.as_deref().unwrap_or("-"))
                .chars()
                .take(30)
                .collect();
            let reason: String = super::remote::one_line(&item.reason)
                .chars()
                .take(60)
                .collect();
            println!(
                "{:<width$}  {:<12}  {:<8}  {:<16}  {:<30}  {}{}",
                short.get(&item.id),
                item.project.as_deref().unwrap_or("-"),
                item.engine,
                item.state,
                title,
                branches.cell(item.branch.as_deref()),
                reason
            );
        }
        println!();
    }
    println!("RUNNING ({})", overview.active.execs.len());
    print_table(&overview.active.execs, short);
    if !overview.active.gaps.is_empty() {
        println!(
            "\nGAPS ({}): runs marked running whose engine is gone (the next daemon requeues them)",
            overview.active.gaps.len()
        );
        for run in &overview.active.gaps {
            println!(
                "  run {} of prompt {} (pid {})",
                run.id,
                run.prompt_id,
                run.pid
                    .map(|pid| pid.to_string())
                    .unwrap_or_else(|| "-".into())
            );
        }
    }
    if !overview.active.lost_execs.is_empty() {
        println!(
            "\nLOST EXECS ({}): never completed, process gone; `corral monitor prune` closes them",
            overview.active.lost_execs.len()
        );
        print_table(&overview.active.lost_execs, short);
    }
    println!("\nRECENT COMMANDS");
    print_table(&overview.recent_commands.entries, short);
}

/// How often `corral top` redraws. A display tick, not a wait for work: nothing to be woken by.
const TOP_REFRESH: std::time::Duration = std::time::Duration::from_secs(1);

async fn overview(context: &Context, args: &MonitorArgs) -> Result<Exit, CliError> {
    let connection = context.reader()?;
    let scope = repo_scope(args.all, None)?;
    // `corral top` in a terminal, or `--live` anywhere, redraws until interrupted.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let live = args.live
        || (super::subcommand_word(&argv).is_some_and(|word| word == "top")
            && std::io::IsTerminal::is_terminal(&std::io::stdout())
            && !args.json);
    loop {
        let overview = build_overview(&connection, scope.clone())?;
        if args.json && live {
            // A stream of snapshots: one JSON object per line (NDJSON), each on its own.
            println!(
                "{}",
                serde_json::to_string(&overview).expect("ledger values serialize")
            );
            std::io::Write::flush(&mut std::io::stdout())
                .map_err(|error| CliError::failure(format!("stdout: {error}")))?;
        } else if args.json {
            print_json(&overview);
        } else {
            if live {
                // Clear the screen and go home.
                print!("\x1b[2J\x1b[H");
                println!(
                    "corral top — {} (Ctrl-C to leave)\n",
                    format_time(crate::store::now_ms())
                );
            }
            print_overview(&overview);
        }
        if !live {
            return Ok(Exit::success());
        }
        tokio::time::sleep(TOP_REFRESH).await;
    }
}

/// Which repository a listing is limited to: `None` = every one; `Some(None)` = execs made
/// outside any repository; `Some(Some(top))` = that repository.
pub fn repo_scope(all: bool, repo: Option<&Path>) -> Result<Option<Option<String>>, CliError> {
    if let Some(path) = repo {
        let top = overview::repo_of(path)
            .ok_or_else(|| CliError::failure(format!("no such directory: {}", path.display())))?;
        return Ok(Some(Some(top)));
    }
    if all {
        return Ok(None);
    }
    let cwd = std::env::current_dir()
        .map_err(|error| CliError::failure(format!("current directory: {error}")))?;
    Ok(Some(crate::repo::toplevel_text(&cwd)))
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json(value: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("ledger values serialize")
    );
}

/// The longest host name a HOST cell shows (longer ones are cut).
const HOST_CHARS: usize = 24;

/// The HOST column of an exec table: there only when its rows name more than one host, so a
/// store of one host's execs reads as before hosts were recorded. A row older than hosts
/// (no host) names none, and shows `-`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostColumn {
    width: Option<usize>,
}

impl HostColumn {
    pub fn of<'a>(hosts: impl IntoIterator<Item = Option<&'a str>>) -> HostColumn {
        let named: std::collections::BTreeSet<&str> = hosts.into_iter().flatten().collect();
        let width = (named.len() > 1).then(|| {
            named
                .iter()
                .map(|host| Self::shown(host).chars().count())
                .fold("HOST".len(), usize::max)
        });
        HostColumn { width }
    }

    /// The header's cell with its separator, or nothing.
    pub fn header(&self) -> String {
        self.cell(Some("HOST"))
    }

    /// A row's cell with its separator, or nothing.
    pub fn cell(&self, host: Option<&str>) -> String {
        match self.width {
            None => String::new(),
            Some(width) => format!("{:<width$}  ", Self::shown(host.unwrap_or("-"))),
        }
    }

    /// A host as a cell shows it: on one line (a name comes from a variable anyone sets),
    /// cut to [`HOST_CHARS`].
    fn shown(host: &str) -> String {
        super::remote::cut(&exec::escape_controls(host), HOST_CHARS)
    }
}

/// The text table of `monitor list` and the overview; `short` has the short forms of the
/// ids (each a unique prefix, which `monitor show` takes).
pub fn print_table(entries: &[Exec], short: &ShortIds) {
    if entries.is_empty() {
        println!("  (none)");
        return;
    }
    let width = short.width(entries.iter().map(|exec| exec.id.as_str()));
    let hosts = HostColumn::of(entries.iter().map(|exec| exec.host.as_deref()));
    println!(
        "{:<width$}  {}{:<19}  {:>8}  {:>4}  {:<11}  COMMAND",
        "ID",
        hosts.header(),
        "STARTED (UTC)",
        "TIME",
        "EXIT",
        "OUTCOME"
    );
    for exec in entries {
        let duration = exec
            .completed_at
            .map(|end| format_duration(end - exec.started_at))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<width$}  {}{:<19}  {:>8}  {:>4}  {:<11}  {}",
            short.get(&exec.id),
            hosts.cell(exec.host.as_deref()),
            format_time(exec.started_at),
            duration,
            exec.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            exec.outcome.as_deref().unwrap_or("unknown"),
            exec.command_line(),
        );
    }
}

/// `1.2s`, `3m04s`, `2h05m`.
pub fn format_duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, ms / 1000 % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms / 60_000 % 60),
    }
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` in UTC.
pub fn format_time(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    // Civil date from a day count (proleptic Gregorian; eras of 400 years).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_times() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00");
        assert_eq!(format_time(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(format_time(1_796_022_614_000), "2026-11-30 07:10:14");
    }

    #[test]
    fn a_host_column_only_with_two_hosts() {
        let one = HostColumn::of([Some("alpha"), None, Some("alpha")]);
        assert_eq!(one.header(), "");
        assert_eq!(one.cell(Some("alpha")), "");
        let two = HostColumn::of([Some("alpha"), None, Some("beta-host")]);
        assert_eq!(two.header(), format!("{:<9}  ", "HOST"));
        assert_eq!(two.cell(Some("alpha")), format!("{:<9}  ", "alpha"));
        assert_eq!(two.cell(None), format!("{:<9}  ", "-"));
        let long = "h".repeat(40);
        let cut = HostColumn::of([Some("a"), Some(long.as_str())]);
        assert_eq!(
            cut.cell(Some(&long)),
            format!("{}…  ", "h".repeat(HOST_CHARS - 1))
        );
        let odd = HostColumn::of([Some("a"), Some("b\u{1b}[2J")]);
        assert_eq!(odd.cell(Some("b\u{1b}[2J")), "b\\u{1b}[2J  ");
    }

    #[test]
    fn formats_durations() {
        assert_eq!(format_duration(1_234), "1.2s");
        assert_eq!(format_duration(184_000), "3m04s");
        assert_eq!(format_duration(7_500_000), "2h05m");
    }
}
