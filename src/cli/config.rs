//! `corral config get NAME | set NAME VALUE | unset NAME | list`: the settings stored in the
//! home's store, read and changed through the daemon (which validates them and applies a
//! change at once). `get` and `list` only look: with no daemon running they read the store
//! directly (same output) and start none.
//!
//! An unknown name or a bad value is a usage error (exit 2) whose line says what is allowed.

use serde_json::Value;

use super::remote::{self, print_json, text};
use super::{CliError, Context, Exit};
use crate::client::ClientError;
use crate::protocol::{
    code, NoParams, SettingName, SettingsGet, SettingsList, SettingsSet, SettingsSetParams,
};
use crate::store::settings;

#[derive(Debug, clap::Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub action: ConfigAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// The value in effect (stored, else the default).
    Get(GetArgs),
    /// Store a value (validated; a slot limit applies at once).
    Set(SetArgs),
    /// Forget a stored value: the default applies again.
    Unset(GetArgs),
    /// Every setting: its stored value, its default and what it means.
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The setting's name (see `corral config list`).
    pub name: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The setting's name (see `corral config list`).
    pub name: String,
    /// Its new value.
    #[arg(allow_hyphen_values = true)]
    pub value: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Print `{known, stored}` as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The names corral knows, for the line of an unknown one.
fn known_names() -> String {
    let names: Vec<&str> = settings::KNOWN.iter().map(|known| known.name).collect();
    names.join(", ")
}

/// A refusal of the name or the value is a usage error; anything else a failure.
fn usage_or_failure(error: ClientError) -> CliError {
    match remote::rpc_error(&error) {
        Some(rpc) if rpc.code == code::INVALID_PARAMS => {
            CliError::usage(remote::one_line(&rpc.message))
        }
        _ => remote::failure(error),
    }
}

impl ConfigAction {
    /// Whether the subcommand only looks (and so never starts a daemon).
    pub fn inspects(&self) -> bool {
        matches!(self, ConfigAction::Get(_) | ConfigAction::List(_))
    }
}

pub async fn execute(context: &Context, args: &ConfigArgs) -> Result<Exit, CliError> {
    match &args.action {
        ConfigAction::Get(get) => {
            let mut source = remote::inspect(context).await?;
            let result = source
                .call_json::<SettingsGet>(&SettingName {
                    name: get.name.clone(),
                })
                .await
                .map_err(|error| match remote::rpc_error(&error) {
                    Some(rpc)
                        if rpc.code == code::NOT_FOUND || rpc.code == code::INVALID_PARAMS =>
                    {
                        CliError::usage(format!(
                            "{} (known: {})",
                            remote::one_line(&rpc.message),
                            known_names()
                        ))
                    }
                    _ => remote::failure(error),
                })?;
            if get.json {
                print_json(&result);
            } else {
                let value = match result.get("value").and_then(Value::as_str) {
                    Some(stored) => stored,
                    None => text(&result, "default"),
                };
                println!("{value}");
            }
        }
        ConfigAction::List(list) => {
            let mut source = remote::inspect(context).await?;
            let result = source.ask_json::<SettingsList>(&NoParams {}).await?;
            if list.json {
                print_json(&result);
            } else {
                print_list(&result);
            }
        }
        ConfigAction::Set(set) => {
            let mut client = remote::connect(context).await?;
            let params = SettingsSetParams {
                name: set.name.clone(),
                value: Some(set.value.clone()),
            };
            let result = client
                .call_json::<SettingsSet>(&params)
                .await
                .map_err(usage_or_failure)?;
            if set.json {
                print_json(&result);
            } else {
                println!("{} = {}", text(&result, "name"), text(&result, "value"));
            }
        }
        ConfigAction::Unset(unset) => {
            // Without a value the daemon forgets the setting; it checks no name then, so the
            // name is checked here (before a daemon is started for it).
            let Some(default) = settings::default_of(&unset.name) else {
                return Err(CliError::usage(format!(
                    "unknown setting '{}' (known: {})",
                    unset.name,
                    known_names()
                )));
            };
            let mut client = remote::connect(context).await?;
            let params = SettingsSetParams {
                name: unset.name.clone(),
                value: None,
            };
            let result = client
                .call_json::<SettingsSet>(&params)
                .await
                .map_err(usage_or_failure)?;
            if unset.json {
                print_json(&result);
            } else if default.is_empty() {
                println!("{} unset (no default)", unset.name);
            } else {
                println!("{} unset (default: {default})", unset.name);
            }
        }
    }
    Ok(Exit::success())
}

/// Whether `name` is an instance of the pattern `pattern` (`slots.<engine>` …).
fn matches_pattern(pattern: &str, name: &str) -> bool {
    match pattern.split_once("<engine>") {
        Some((prefix, suffix)) => {
            name.len() > prefix.len() + suffix.len()
                && name.starts_with(prefix)
                && name.ends_with(suffix)
        }
        None => false,
    }
}

fn print_list(result: &Value) {
    let known = result["known"].as_array().cloned().unwrap_or_default();
    let stored = result["stored"].as_array().cloned().unwrap_or_default();
    let shown = |value: &str| {
        if value.is_empty() {
            "\"\"".to_string()
        } else {
            value.to_string()
        }
    };
    let mut listed = vec![false; stored.len()];
    println!(
        "{:<30}  {:<18}  {:<18}  MEANING",
        "NAME", "VALUE", "DEFAULT"
    );
    for setting in &known {
        let name = text(setting, "name");
        let default = shown(text(setting, "default"));
        let value = stored
            .iter()
            .position(|entry| text(entry, "name") == name)
            .map(|at| {
                listed[at] = true;
                shown(text(&stored[at], "value"))
            })
            .unwrap_or_else(|| "-".into());
        println!(
            "{name:<30}  {value:<18}  {default:<18}  {}",
            text(setting, "meaning")
        );
        for (at, entry) in stored.iter().enumerate() {
            if !listed[at] && matches_pattern(name, text(entry, "name")) {
                listed[at] = true;
                println!(
                    "  {:<28}  {}",
                    text(entry, "name"),
                    shown(text(entry, "value"))
                );
            }
        }
    }
    for (at, entry) in stored.iter().enumerate() {
        if !listed[at] {
            println!(
                "{:<30}  {}",
                text(entry, "name"),
                shown(text(entry, "value"))
            );
        }
    }
}
