//! `corral schedule add|list|show|pause|resume|remove` (#35): prompts sent on a cron
//! schedule, to a session, or to a new session of a project at each firing.
//!
//! `add TARGET 'CRON' TEXT`: TARGET is a session (its id, title or a unique id prefix), else
//! a project of that name; `--project` says it is a project. Each firing is recorded — what
//! it sent, or why it skipped — and `show` lists them. `list` and `show` only look: `list`
//! reads the store when no daemon runs.

use super::remote::{self, print_json, time_of};
use super::{CliError, Context, Exit};
use crate::client::ClientError;
use crate::protocol::{
    code, NoParams, ScheduleAdd, ScheduleAddParams, ScheduleList, SchedulePause, ScheduleRemove,
    ScheduleResume, ScheduleResumeParams, ScheduleSelector, ScheduleShow, ScheduleShowParams,
};
use crate::store::schedules::{Firing, Schedule};

#[derive(Debug, clap::Args)]
pub struct ScheduleArgs {
    #[command(subcommand)]
    pub action: ScheduleAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum ScheduleAction {
    /// Send TEXT to a session (or to a new session of a project) at each time CRON names.
    Add(AddArgs),
    /// The schedules, with their next firing and what the last one did.
    List(JsonArgs),
    /// A schedule and its latest firings: what each sent, or why it skipped.
    Show(ShowArgs),
    /// Stop a schedule firing until it is resumed.
    Pause(SelectorArgs),
    /// Let a paused schedule fire again, from its next time on.
    Resume(SelectorArgs),
    /// Remove a schedule and its firings (the prompts it sent stay).
    Remove(SelectorArgs),
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// A session (its id, title, or a unique id prefix), else a project by name.
    pub target: String,
    /// When, in cron's words in the local time zone: `MIN HOUR DAY MONTH WEEKDAY` (`0 9 * *
    /// 1-5`: weekdays at 9), six fields with seconds first, or `@hourly`, `@daily`, ….
    #[arg(value_parser = cron)]
    pub cron: String,
    /// The prompt each firing sends.
    pub text: String,
    /// TARGET is a project: each firing opens a new session in it (in its own worktree when
    /// the project makes worktrees).
    #[arg(long)]
    pub project: bool,
    /// A time missed while no daemon ran is sent once, late (default: skipped, and recorded).
    #[arg(long)]
    pub catch_up: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct JsonArgs {
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The schedule: its id or a unique id prefix.
    pub schedule: String,
    /// How many of its latest firings to show.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct SelectorArgs {
    /// The schedule: its id or a unique id prefix.
    pub schedule: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A cron expression that names a time to come (else a usage error, exit 2).
fn cron(text: &str) -> Result<String, String> {
    crate::clock::CronTimes::parse(text, crate::clock::schedule_now())?;
    Ok(text.to_string())
}

impl ScheduleAction {
    /// Whether it only looks (see `Command::inspects`).
    pub fn inspects(&self) -> bool {
        matches!(self, ScheduleAction::List(_))
    }
}

pub async fn execute(context: &Context, args: &ScheduleArgs) -> Result<Exit, CliError> {
    match &args.action {
        ScheduleAction::Add(add) => {
            let mut client = remote::connect(context).await?;
            let mut params = ScheduleAddParams {
                cron: add.cron.clone(),
                text: add.text.clone(),
                catch_up: add.catch_up,
                ..ScheduleAddParams::default()
            };
            if add.project {
                params.project = Some(add.target.clone());
            } else {
                params.session = Some(add.target.clone());
            }
            let added = match client.call_json::<ScheduleAdd>(&params).await {
                // Not a session: a project of that name, if there is one.
                Err(ClientError::Rpc(error))
                    if !add.project
                        && error.code == code::NOT_FOUND
                        && error.message.contains("session") =>
                {
                    params.session = None;
                    params.project = Some(add.target.clone());
                    remote::ask_answered::<ScheduleAdd>(&mut client, &params).await?
                }
                said => remote::Answered::read::<ScheduleAdd>(said.map_err(remote::failure)?)?,
            };
            if add.json {
                print_json(&added.said);
            } else {
                let schedule = &added.result;
                println!(
                    "schedule {} added: {} {}; next {}",
                    schedule.id,
                    target(schedule),
                    schedule.cron,
                    time_of(schedule.next_at)
                );
            }
            Ok(Exit::success())
        }
        ScheduleAction::List(list) => {
            let mut source = remote::inspect(context).await?;
            let schedules = source.ask_answered::<ScheduleList>(&NoParams {}).await?;
            if list.json {
                print_json(&schedules.said);
            } else if schedules.result.is_empty() {
                println!("no schedule (corral schedule add SESSION|PROJECT 'CRON' TEXT)");
            } else {
                for schedule in &schedules.result {
                    print_schedule(schedule);
                }
            }
            Ok(Exit::success())
        }
        ScheduleAction::Show(show) => {
            let mut client = remote::connect(context).await?;
            let params = ScheduleShowParams {
                schedule: show.schedule.clone(),
                limit: Some(show.limit),
            };
            let shown = remote::ask_answered::<ScheduleShow>(&mut client, &params).await?;
            if show.json {
                print_json(&shown.said);
                return Ok(Exit::success());
            }
            print_schedule(&shown.result.schedule);
            println!("  text: {}", shown.result.schedule.text);
            if shown.result.firings.is_empty() {
                println!("  no firing yet");
            }
            for firing in &shown.result.firings {
                println!("  {}", firing_line(firing));
            }
            Ok(Exit::success())
        }
        ScheduleAction::Pause(selected) => {
            let mut client = remote::connect(context).await?;
            let params = ScheduleSelector {
                schedule: selected.schedule.clone(),
            };
            let paused = remote::ask_answered::<SchedulePause>(&mut client, &params).await?;
            said(
                selected.json,
                &paused,
                "paused: it fires no more until resumed",
            )
        }
        ScheduleAction::Resume(selected) => {
            let mut client = remote::connect(context).await?;
            let params = ScheduleResumeParams {
                schedule: selected.schedule.clone(),
            };
            let resumed = remote::ask_answered::<ScheduleResume>(&mut client, &params).await?;
            let next = format!("resumed; next {}", time_of(resumed.result.next_at));
            said(selected.json, &resumed, &next)
        }
        ScheduleAction::Remove(selected) => {
            let mut client = remote::connect(context).await?;
            let params = ScheduleSelector {
                schedule: selected.schedule.clone(),
            };
            let removed = remote::ask_answered::<ScheduleRemove>(&mut client, &params).await?;
            said(selected.json, &removed, "removed")
        }
    }
}

/// Prints a changed schedule: its JSON, or `schedule ID WHAT`.
fn said(json: bool, answer: &remote::Answered<Schedule>, what: &str) -> Result<Exit, CliError> {
    if json {
        print_json(&answer.said);
    } else {
        println!("schedule {} {what}", answer.result.id);
    }
    Ok(Exit::success())
}

/// What a schedule sends to, in words.
fn target(schedule: &Schedule) -> String {
    let project = schedule
        .project_name
        .clone()
        .unwrap_or_else(|| schedule.project_id.clone());
    match &schedule.session_id {
        Some(id) => format!(
            "to session {}",
            schedule.session_title.clone().unwrap_or_else(|| id.clone())
        ),
        None => format!("to a new session of project {project}"),
    }
}

/// One schedule, on one line.
fn print_schedule(schedule: &Schedule) {
    let next = match (schedule.paused, schedule.next_at) {
        (true, _) => "paused".to_string(),
        (false, Some(at)) => format!("next {}", time_of(Some(at))),
        (false, None) => "fires no more".to_string(),
    };
    let last = schedule
        .last
        .as_ref()
        .map(|firing| format!("; last: {}", firing_line(firing)))
        .unwrap_or_default();
    let catch_up = if schedule.catch_up { "  catch-up" } else { "" };
    println!(
        "{}  '{}'  {}  {next}{catch_up}{last}",
        schedule.id,
        schedule.cron,
        target(schedule)
    );
}

/// What a firing did, in words.
fn firing_line(firing: &Firing) -> String {
    let what = match (&firing.prompt_id, &firing.reason) {
        (Some(prompt), Some(reason)) => format!(" prompt {prompt} ({reason})"),
        (Some(prompt), None) => format!(" prompt {prompt}"),
        (None, Some(reason)) => format!(": {reason}"),
        (None, None) => String::new(),
    };
    format!(
        "{} {}{what}",
        time_of(Some(firing.due_at)),
        firing.outcome.as_str()
    )
}
