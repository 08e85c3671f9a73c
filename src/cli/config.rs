//! `corral config get NAME | set NAME VALUE | unset NAME | list`: the settings stored in the
//! home's store, read and changed through the daemon (which validates them and applies a
//! change at once). `get` and `list` only look: with no daemon running they read the store
//! directly (same output) and start none.
//!
//! An unknown name or a bad value is a usage error (exit 2) whose line says what is allowed.
//!
//! One name is not a store setting: `store.url`, where the store is (the store cannot hold
//! its own address). It lives in `HOME/config` (`crate::store::location`), and
//! `get|set|unset store.url` ([`execute_location`]) need only the home: they never go through
//! the daemon, never open the store, and are not recorded in the exec ledger (the store they
//! would record into is the one they name). A malformed URL given to `set` is a usage error
//! (exit 2) like any bad value; a bad `HOME/config` or `CORRAL_STORE_URL` is a failure (exit
//! 1). `set` and `unset` are refused while a supervisor holds the home (`HOME/daemon.lock`):
//! the store a daemon serves cannot change under it. The URL is shown without its password
//! in every output.

use std::path::Path;

use serde_json::{json, Value};

use super::remote::{self, or_dash, print_json, read_answer, text};
use super::{CliError, Context, Exit};
use crate::client::ClientError;
use crate::protocol::settings::{Setting, SettingsListResult, StoredSetting};
use crate::protocol::{
    code, NoParams, SettingName, SettingsGet, SettingsList, SettingsSet, SettingsSetParams,
};
use crate::store::location::{self, HomeConfig, Location, PgUrl, Source};
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
    let mut names: Vec<&str> = settings::KNOWN.iter().map(|known| known.name).collect();
    names.extend(location::KNOWN_KEYS);
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

    /// Whether the subcommand is about where the store is (`store.url`): it needs the home
    /// only, no store and no daemon ([`execute_location`]).
    pub fn is_location(&self) -> bool {
        match self {
            ConfigAction::Get(GetArgs { name, .. })
            | ConfigAction::Unset(GetArgs { name, .. })
            | ConfigAction::Set(SetArgs { name, .. }) => is_location_key(name),
            ConfigAction::List(_) => false,
        }
    }
}

/// Whether `name` is a key of `HOME/config` rather than a store setting.
fn is_location_key(name: &str) -> bool {
    location::KNOWN_KEYS.contains(&name)
}

pub async fn execute(context: &Context, args: &ConfigArgs) -> Result<Exit, CliError> {
    if args.action.is_location() {
        return execute_location(&context.home, &args.action);
    }
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
                let setting: Setting = read_answer::<SettingsGet>(result)?;
                println!("{}", setting.value.unwrap_or(setting.default));
            }
        }
        ConfigAction::List(list) => {
            let mut source = remote::inspect(context).await?;
            let mut result = source.ask_json::<SettingsList>(&NoParams {}).await?;
            let store = store_json(&context.home)?;
            if list.json {
                if let Some(object) = result.as_object_mut() {
                    object.insert("store".into(), store);
                }
                print_json(&result);
            } else {
                print_list(&read_answer::<SettingsList>(result)?);
                println!(
                    "{:<30}  {:<18}  {:<18}  where the store is ({}; HOME/config)",
                    location::STORE_URL,
                    text(&store, "shown"),
                    format!("({})", text(&store, "source")),
                    crate::env::STORE_URL
                );
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
                let stored: StoredSetting = read_answer::<SettingsSet>(result)?;
                println!("{} = {}", stored.name, or_dash(stored.value.as_deref()));
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

fn print_list(result: &SettingsListResult) {
    let shown = |value: Option<&str>| match value {
        Some("") => "\"\"".to_string(),
        other => or_dash(other).to_string(),
    };
    let stored = &result.stored;
    let mut listed = vec![false; stored.len()];
    println!(
        "{:<30}  {:<18}  {:<18}  MEANING",
        "NAME", "VALUE", "DEFAULT"
    );
    for setting in &result.known {
        let name = setting.name.as_str();
        let default = shown(Some(&setting.default));
        let value = stored
            .iter()
            .position(|entry| entry.name == name)
            .map(|at| {
                listed[at] = true;
                shown(stored[at].value.as_deref())
            })
            .unwrap_or_else(|| "-".into());
        println!(
            "{name:<30}  {value:<18}  {default:<18}  {}",
            setting.meaning
        );
        for (at, entry) in stored.iter().enumerate() {
            if !listed[at] && matches_pattern(name, &entry.name) {
                listed[at] = true;
                println!("  {:<28}  {}", entry.name, shown(entry.value.as_deref()));
            }
        }
    }
    for (at, entry) in stored.iter().enumerate() {
        if !listed[at] {
            println!("{:<30}  {}", entry.name, shown(entry.value.as_deref()));
        }
    }
}

/// The whole process of `config get|set|unset store.url`, before any store is opened:
/// locates and prepares the home (`--home` given as `flag`), runs [`execute_location`],
/// prints a failure's line and gives the exit code. `cli::main` calls it right after the
/// parse, instead of opening the store.
pub fn run_location(flag: Option<&Path>, action: &ConfigAction) -> i32 {
    let result = match crate::home::locate(flag) {
        Some((home, source)) => crate::home::prepare(&home, &source)
            .map_err(CliError::failure)
            .and_then(|()| execute_location(&home, action)),
        None => Err(CliError::failure(
            "no home directory: set CORRAL_HOME, XDG_STATE_HOME or HOME",
        )),
    };
    match result {
        Ok(exit) => exit.code,
        Err(error) => {
            if let Some(message) = &error.message {
                say!("corral: {message}");
            }
            error.code
        }
    }
}

/// `config get|set|unset store.url`: `HOME/config`, with the home alone (see the module's
/// doc). A running supervisor of the home makes `set` and `unset` fail.
pub fn execute_location(home: &Path, action: &ConfigAction) -> Result<Exit, CliError> {
    let failure = |error: location::LocationError| CliError::failure(error.to_string());
    match action {
        ConfigAction::Get(get) => {
            let store = store_json(home)?;
            if get.json {
                print_json(&store);
            } else {
                println!("{}", text(&store, "shown"));
            }
            if let Some(note) = overridden(home) {
                say!("corral: {note}");
            }
        }
        ConfigAction::Set(set) => {
            let url =
                PgUrl::parse(&set.value).map_err(|error| CliError::usage(error.to_string()))?;
            let _held = refuse_while_served(home)?;
            let mut config = HomeConfig::load(home).map_err(failure)?;
            config
                .set(&set.name, url.secret_text())
                .map_err(|error| CliError::usage(error.to_string()))?;
            config.save(home).map_err(failure)?;
            // The home moves to that store: its next daemon binds it again.
            crate::store::location::unbind_home(home).map_err(failure)?;
            if set.json {
                print_json(&json!({
                    "name": set.name,
                    "value": url.to_string(),
                    "password": url.has_password(),
                    "file": config.path().display().to_string(),
                }));
            } else {
                println!("{} = {url}", set.name);
            }
            if let Some(note) = overridden(home) {
                say!("corral: {note}");
            }
        }
        ConfigAction::Unset(unset) => {
            let _held = refuse_while_served(home)?;
            let mut config = HomeConfig::load(home).map_err(failure)?;
            // A file that did not hold the key is left as it is (or absent).
            if config.unset(&unset.name) {
                config.save(home).map_err(failure)?;
                crate::store::location::unbind_home(home).map_err(failure)?;
            }
            let default = Location::Sqlite(crate::store::store_path(home));
            if unset.json {
                print_json(&json!({
                    "name": unset.name,
                    "value": Value::Null,
                    "default": format!("sqlite {default}"),
                }));
            } else {
                println!("{} unset (default: sqlite {default})", unset.name);
            }
            if let Some(note) = overridden(home) {
                say!("corral: {note}");
            }
        }
        ConfigAction::List(_) => {
            return Err(CliError::failure(
                "config list is not about store.url alone",
            ));
        }
    }
    Ok(Exit::success())
}

/// Where the store is, as `get --json` and `list --json` show it: `value` the redacted URL
/// (`null` for the default), `source` (`env`, `file`, `default`), `kind` and `shown`, the
/// one line `get` prints (`postgres://user@host/db`, or `sqlite <path>`).
fn store_json(home: &Path) -> Result<Value, CliError> {
    let (location, source) =
        location::locate_with_source(home).map_err(|error| CliError::failure(error.to_string()))?;
    let source_name = match source {
        Source::Env => crate::env::STORE_URL.to_string(),
        Source::File => location::config_path(home).display().to_string(),
        Source::Default => "default".to_string(),
    };
    Ok(match &location {
        Location::Postgres(url) => json!({
            "name": location::STORE_URL,
            "value": url.to_string(),
            "source": source.as_str(),
            "from": source_name,
            "kind": "postgres",
            "password": url.has_password(),
            "shown": url.to_string(),
        }),
        Location::Sqlite(path) => json!({
            "name": location::STORE_URL,
            "value": Value::Null,
            "source": source.as_str(),
            "from": source_name,
            "kind": "sqlite",
            "path": path.display().to_string(),
            "shown": format!("sqlite {}", path.display()),
        }),
    })
}

/// The note that `CORRAL_STORE_URL` is set, and so wins over what `HOME/config` says.
fn overridden(home: &Path) -> Option<String> {
    std::env::var_os(crate::env::STORE_URL).filter(|value| !value.is_empty())?;
    Some(format!(
        "{} is set and wins over {} in {}",
        crate::env::STORE_URL,
        location::STORE_URL,
        location::config_path(home).display()
    ))
}

/// Refuses when a supervisor (a daemon, or a program embedding corral) holds the home's
/// lock: the store it serves cannot change under it. Else holds a shared lock on the lock
/// file while the configuration is written, so that a daemon starting meanwhile is refused
/// rather than reading a half-changed home. Reads only: the lock file is never created or
/// written here (no daemon ever ran: there is none to refuse).
fn refuse_while_served(home: &Path) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = home.join(crate::home::LOCK_FILE);
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(&path)
    {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(CliError::failure(format!(
                "cannot tell whether a daemon serves {}: {}: {error}",
                home.display(),
                path.display()
            )))
        }
    };
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
        Ok(held) => Ok(Some(held)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            let pid = pid.trim();
            Err(CliError::failure(format!(
                "the store a daemon serves cannot change under it: pid {} serves {} (it holds \
                 {}); stop it first",
                if pid.is_empty() { "?" } else { pid },
                home.display(),
                path.display()
            )))
        }
        Err((_, errno)) => Err(CliError::failure(format!(
            "cannot tell whether a daemon serves {}: {}: {errno}",
            home.display(),
            path.display()
        ))),
    }
}
