//! `corral group list|add|set|remove`: execution groups. Projects that share a *locking*
//! group never run at once; a *label* names projects together and locks nothing. A group a
//! project names is made locking when the project is added; `add` declares one ahead (or as a
//! label), `set` changes what it is, `remove` forgets one no project is in.
//!
//! Each subcommand is one daemon call (`group.*`); `--json` prints its result as it is. `list`
//! only looks: with no daemon running it reads the store directly and starts none.

use super::remote::{self, print_json, time_of};
use super::{CliError, Context, Exit};
use crate::protocol::{GroupList, GroupRemove, GroupSelector, GroupSet, GroupSetParams, NoParams};

#[derive(Debug, clap::Args)]
pub struct GroupArgs {
    #[command(subcommand)]
    pub action: GroupAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum GroupAction {
    /// The execution groups, with the projects in each.
    List(ListArgs),
    /// Declare a group: locking (one of its projects runs at a time), or --label.
    Add(AddArgs),
    /// Make a group locking (--locking) or a label only (--label).
    Set(SetArgs),
    /// Forget a group no project is in.
    Remove(RemoveArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Print the groups as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The group's name.
    pub name: String,
    /// A label only: its projects may run at once.
    #[arg(long)]
    pub label: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("kind").required(true).args(["locking", "label"])))]
pub struct SetArgs {
    /// The group's name.
    pub name: String,
    /// One of its projects runs at a time.
    #[arg(long)]
    pub locking: bool,
    /// A label only: its projects may run at once.
    #[arg(long)]
    pub label: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    /// The group's name.
    pub name: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

impl GroupAction {
    /// Whether it only looks (see `Command::inspects`).
    pub fn inspects(&self) -> bool {
        matches!(self, GroupAction::List(_))
    }
}

pub async fn execute(context: &Context, args: &GroupArgs) -> Result<Exit, CliError> {
    match &args.action {
        GroupAction::List(list) => {
            let mut source = remote::inspect(context).await?;
            let groups = source.ask_answered::<GroupList>(&NoParams {}).await?;
            if list.json {
                print_json(&groups.said);
                return Ok(Exit::success());
            }
            if groups.result.is_empty() {
                println!("no execution group (project add|set --group NAME makes one)");
            }
            for group in &groups.result {
                let kind = if group.locking { "locking" } else { "label" };
                let projects = if group.projects.is_empty() {
                    "no project".to_string()
                } else {
                    group.projects.join(", ")
                };
                println!(
                    "{}  {kind}  {projects}  (since {})",
                    group.name,
                    time_of(Some(group.created_at))
                );
            }
            Ok(Exit::success())
        }
        GroupAction::Add(add) => {
            let mut client = remote::connect(context).await?;
            let known = remote::ask::<GroupList>(&mut client, &NoParams {}).await?;
            if known.iter().any(|group| group.name == add.name) {
                return Err(CliError::failure(format!(
                    "group '{}' exists already (group set changes it)",
                    add.name
                )));
            }
            set(&mut client, &add.name, !add.label, add.json, "added").await
        }
        GroupAction::Set(change) => {
            let mut client = remote::connect(context).await?;
            set(
                &mut client,
                &change.name,
                change.locking,
                change.json,
                "set",
            )
            .await
        }
        GroupAction::Remove(remove) => {
            let mut client = remote::connect(context).await?;
            let params = GroupSelector {
                name: remove.name.clone(),
            };
            let removed = remote::ask_answered::<GroupRemove>(&mut client, &params).await?;
            if remove.json {
                print_json(&removed.said);
            } else {
                println!("group {} removed", remove.name);
            }
            Ok(Exit::success())
        }
    }
}

/// `group.set`: says what the group is now.
async fn set(
    client: &mut crate::client::Client,
    name: &str,
    locking: bool,
    json: bool,
    done: &str,
) -> Result<Exit, CliError> {
    let params = GroupSetParams {
        name: name.to_string(),
        locking: Some(locking),
    };
    let set = remote::ask_answered::<GroupSet>(client, &params).await?;
    if json {
        print_json(&set.said);
    } else {
        let kind = if set.result.locking {
            "locking: one of its projects runs at a time"
        } else {
            "a label: its projects may run at once"
        };
        println!("group {} {done}, {kind}", set.result.name);
    }
    Ok(Exit::success())
}
