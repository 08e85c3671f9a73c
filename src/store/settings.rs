//! Settings persisted in the store (`settings` table, migration 2).
//!
//! Every name corral knows is in [`KNOWN`], with its default and a validator: `corral config
//! set` refuses anything else. [`Settings::load`] reads them all into typed values; the
//! supervisor reloads them when one changes, so a change takes effect without a restart.
//! Reading is open to any read-only connection; writing goes through the ledger actor.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::store::sql::{self, args, Conn, OptionalExt};

use super::now_ms;
use crate::engine::EngineKind;

/// Time between SIGTERM and SIGKILL when corral ends a process group.
pub const CANCEL_GRACE_MS: &str = "cancel.grace_ms";

/// The default of [`CANCEL_GRACE_MS`]: long enough for an engine to flush its rollout.
pub const DEFAULT_CANCEL_GRACE_MS: u64 = 5_000;

/// How long a write waits for the store's write lock while another program holds it, retried
/// with backoff, before it is given up: a run then fails saying so, a send gets a `BUSY`
/// error naming the lock (docs/store.md).
pub const STORE_LOCK_TIMEOUT_MS: &str = "store.lock_timeout_ms";

/// The default of [`STORE_LOCK_TIMEOUT_MS`]: a minute rides over a backup, a `sqlite3` session
/// or a vacuum, and a stuck lock is still told within one.
pub const DEFAULT_STORE_LOCK_TIMEOUT_MS: u64 = 60_000;

/// On a shared (PostgreSQL) store, how long a daemon's lease lasts unrenewed: past it, another
/// daemon takes its prompts over and runs them again.
pub const STORE_LEASE_MS: &str = "store.lease_ms";

/// How long a new codex app-server child may take to answer `initialize` before it is killed
/// (and the attempt counts toward the restart limit).
pub const APP_SERVER_INIT_TIMEOUT_MS: &str = "app_server.init_timeout_ms";

/// The default of [`STORE_LEASE_MS`]: renewed every 5 s, a dead daemon's work moves in 15 s.
pub const DEFAULT_STORE_LEASE_MS: u64 = 15_000;

/// The range of [`STORE_LEASE_MS`]: half a second (tests) to ten minutes.
const STORE_LEASE_RANGE: std::ops::RangeInclusive<u64> = 500..=600_000;

/// The range of [`STORE_LOCK_TIMEOUT_MS`]: a second (one attempt of the writer's) to an hour.
const STORE_LOCK_TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 1_000..=3_600_000;

/// Where the daemon serves its HTTP API and dashboard (`src/daemon/http/`), read when it starts.
pub const HTTP_LISTEN: &str = "http.listen";

/// The dashboard's theme preference, stored for the page (the daemon does not read it).
pub const UI_THEME: &str = "ui.theme";

/// The themes [`UI_THEME`] takes.
pub const UI_THEMES: &[&str] = &["system", "light", "dark"];

/// Where sessions' git worktrees go (a project's own `worktrees_dir` overrides it); empty:
/// `HOME/worktrees`.
pub const WORKTREES_DIR: &str = "worktrees.dir";

/// The default of [`HTTP_LISTEN`]: loopback, a free port.
pub const DEFAULT_HTTP_LISTEN: &str = "127.0.0.1:0";

/// Reads an [`HTTP_LISTEN`] value: `off` is `None`; otherwise a loopback address and port
/// (`127.0.0.1:PORT`, `[::1]:PORT`, `localhost:PORT`; port 0 is a free one). Any other
/// address is refused: the API drives agents with the user's rights, so it serves this machine
/// only.
pub fn parse_listen(value: &str) -> Result<Option<std::net::SocketAddr>, String> {
    let value = value.trim();
    if value == "off" {
        return Ok(None);
    }
    let refused = |why: &str| {
        format!(
            "{HTTP_LISTEN} must be a loopback address and port (127.0.0.1:PORT, [::1]:PORT or \
             localhost:PORT; port 0: a free one) or off, not '{value}': {why}"
        )
    };
    let address = match value.strip_prefix("localhost:") {
        Some(port) => port
            .parse::<u16>()
            .map(|port| std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .map_err(|_| refused("the port is not a number of 0 to 65535"))?,
        None => value
            .parse::<std::net::SocketAddr>()
            .map_err(|_| refused("not an address and port"))?,
    };
    if !address.ip().is_loopback() {
        return Err(refused("the API serves this machine only"));
    }
    Ok(Some(address))
}

/// Settings only a person may read (`daemon/confine.rs`): a webhook's URL is often its
/// topic's secret, and a hook's command may carry a token.
pub const PERSONS_TO_READ: &[&str] = &["notify.webhook", "notify.command"];

/// The default of `notify.events`: what a person wants to hear of without asking.
pub const DEFAULT_NOTIFY_EVENTS: &str =
    "prompt.done,prompt.failed,needs-you,paused,schedule.skipped";

/// What a notification tells (`actors::notifier`), as `notify.events` and a project's
/// `notify` name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum NotifyKind {
    /// A prompt ended answered.
    #[serde(rename = "prompt.done")]
    PromptDone,
    /// A prompt failed for good.
    #[serde(rename = "prompt.failed")]
    PromptFailed,
    /// A prompt was cancelled.
    #[serde(rename = "prompt.cancelled")]
    PromptCancelled,
    /// An agent asks a person (an approval waits).
    #[serde(rename = "needs-you")]
    NeedsYou,
    /// A pause stopped work (a person's, or `pause_on_failure`'s).
    #[serde(rename = "paused")]
    Paused,
    /// A schedule sent its prompt.
    #[serde(rename = "schedule.fired")]
    ScheduleFired,
    /// A schedule's firing was skipped (paused, its previous one still running, missed) or
    /// its prompt refused.
    #[serde(rename = "schedule.skipped")]
    ScheduleSkipped,
}

impl NotifyKind {
    pub const ALL: [NotifyKind; 7] = [
        NotifyKind::PromptDone,
        NotifyKind::PromptFailed,
        NotifyKind::PromptCancelled,
        NotifyKind::NeedsYou,
        NotifyKind::Paused,
        NotifyKind::ScheduleFired,
        NotifyKind::ScheduleSkipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NotifyKind::PromptDone => "prompt.done",
            NotifyKind::PromptFailed => "prompt.failed",
            NotifyKind::PromptCancelled => "prompt.cancelled",
            NotifyKind::NeedsYou => "needs-you",
            NotifyKind::Paused => "paused",
            NotifyKind::ScheduleFired => "schedule.fired",
            NotifyKind::ScheduleSkipped => "schedule.skipped",
        }
    }
}

/// Reads a list of notification kinds: comma-separated names, or `none` (empty).
pub fn parse_notify_kinds(value: &str) -> Result<Vec<NotifyKind>, String> {
    let value = value.trim();
    if value == "none" || value.is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(str::trim)
        .map(|name| {
            NotifyKind::ALL
                .into_iter()
                .find(|kind| kind.as_str() == name)
                .ok_or_else(|| {
                    let names: Vec<&str> =
                        NotifyKind::ALL.iter().map(|kind| kind.as_str()).collect();
                    format!(
                        "unknown notification '{name}' (known: {}, or none)",
                        names.join(", ")
                    )
                })
        })
        .collect()
}

/// Whether desktop notifications are sent (`notify.desktop`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Desktop {
    On,
    Off,
    /// When the daemon has a session bus (`DBUS_SESSION_BUS_ADDRESS`).
    Auto,
}

/// Checks a webhook's URL: `http://` or `https://`, a host, nothing that is not a URL.
pub fn check_webhook(url: &str) -> Result<(), String> {
    let refused = |why: &str| {
        format!("notify.webhook must be an http:// or https:// URL, not '{url}': {why}")
    };
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| refused("another scheme"))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.is_empty() {
        return Err(refused("no host"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(refused("it holds a space or a control character"));
    }
    Ok(())
}

/// A setting corral knows: its name (or `prefix.<engine>` pattern), default, and meaning.
pub struct Known {
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

/// Every setting, as `corral config list` shows them. `<engine>` stands for an engine name.
pub const KNOWN: &[Known] = &[
    Known {
        name: "slots.total",
        default: "",
        meaning: "at most this many engine children at once (empty: no total limit)",
    },
    Known {
        name: "slots.<engine>",
        default: "3",
        meaning: "at most this many children of that engine at once",
    },
    Known {
        name: "retry.rate_limit_delays",
        default: "15,45,120",
        meaning: "seconds before each rate-limit retry; then fail",
    },
    Known {
        name: "retry.writer_conflict_delays",
        default: "2,5,15,30",
        meaning: "seconds before each writer-conflict retry; then fail",
    },
    Known {
        name: "engines.<engine>.path",
        default: "",
        meaning: "the engine's executable (empty: found on PATH)",
    },
    Known {
        name: "engines.command.template",
        default: "[\"sh\",\"-c\",\"{prompt}\"]",
        meaning: "argv of the command engine, a JSON array; {prompt} is replaced",
    },
    Known {
        name: "cancel.grace_ms",
        default: "5000",
        meaning: "milliseconds between SIGTERM and SIGKILL when a run is ended",
    },
    Known {
        name: "run.timeout_s",
        default: "3600",
        meaning: "wall-clock limit of one engine run, in seconds",
    },
    Known {
        name: "runs.orphan_timeout_s",
        default: "600",
        meaning: "how long a run goes on without a daemon (one killed, or stopped for good) \
                  before its shim ends it, in seconds: a daemon started meanwhile adopts it",
    },
    Known {
        name: "approvals.timeout_s",
        default: "",
        meaning: "deny an approval nobody answered after this many seconds, saying so (empty: \
                  the engine waits for a person, keeping its slot)",
    },
    Known {
        name: STORE_LOCK_TIMEOUT_MS,
        default: "60000",
        meaning: "while another program holds the store's write lock, how long a write waits \
                  (retrying) before it is given up: the run fails, a send is refused (BUSY)",
    },
    Known {
        name: STORE_LEASE_MS,
        default: "15000",
        meaning: "on a shared PostgreSQL store, how long a daemon's lease lasts unrenewed \
                  (renewed every third of it); past it, another daemon reruns its prompts",
    },
    Known {
        name: APP_SERVER_INIT_TIMEOUT_MS,
        default: "20000",
        meaning: "how long a codex app-server child may take to answer initialize before it \
                  is killed (the attempt counts toward its restart limit)",
    },
    Known {
        name: "notify.command",
        default: "",
        meaning: "a command (sh -c) told of each notification, as JSON on its stdin (empty: none)",
    },
    Known {
        name: "notify.webhook",
        default: "",
        meaning: "an http:// or https:// URL each notification is POSTed to as JSON (empty: none)",
    },
    Known {
        name: "notify.desktop",
        default: "auto",
        meaning: "desktop notifications over D-Bus: on, off, or auto (when a session bus is set)",
    },
    Known {
        name: "notify.events",
        default: DEFAULT_NOTIFY_EVENTS,
        meaning: "which notifications are sent (prompt.done, prompt.failed, prompt.cancelled, needs-you, paused; or none)",
    },
    Known {
        name: "notify.timeout_ms",
        default: "10000",
        meaning: "how long a hook or a webhook may take, each try, before it is given up",
    },
    Known {
        name: "daemon.autostart",
        default: "true",
        meaning: "the CLI starts a daemon when none answers",
    },
    Known {
        name: "daemon.shutdown_grace_ms",
        default: "10000",
        meaning:
            "on SIGTERM, how long running prompts may finish before they are ended and requeued",
    },
    Known {
        name: HTTP_LISTEN,
        default: DEFAULT_HTTP_LISTEN,
        meaning: "where the daemon serves the HTTP API and dashboard: a loopback address and \
                  port (port 0: a free one), or off; read when the daemon starts",
    },
    Known {
        name: UI_THEME,
        default: "system",
        meaning: "the dashboard's theme: system, light or dark",
    },
    Known {
        name: WORKTREES_DIR,
        default: "",
        meaning: "where the sessions of worktree projects get their git worktrees, an absolute \
                  path (empty: HOME/worktrees; a project's --worktrees-dir overrides it)",
    },
];

/// The stored value of `name`, if any. A store too old to have settings has none.
pub fn get(connection: &Conn, name: &str) -> Option<String> {
    connection
        .row(
            "SELECT value FROM settings WHERE name = ?1",
            args![name],
            |row| row.get(0),
        )
        .optional()
        .ok()
        .flatten()
}

/// The grace period for ending a process group, from the store or the default.
pub fn cancel_grace(connection: Option<&Conn>) -> Duration {
    let ms = connection
        .and_then(|connection| get(connection, CANCEL_GRACE_MS))
        .and_then(|value| value.parse().ok())
        .unwrap_or(DEFAULT_CANCEL_GRACE_MS);
    Duration::from_millis(ms)
}

/// How long a write waits for a store another program locks, from the store or the default
/// (read by the ledger's writer when a write finds the store locked).
pub fn store_lock_timeout(connection: &Conn) -> Duration {
    let ms = get(connection, STORE_LOCK_TIMEOUT_MS)
        .and_then(|value| value.parse::<u64>().ok())
        .filter(|ms| STORE_LOCK_TIMEOUT_RANGE.contains(ms))
        .unwrap_or(DEFAULT_STORE_LOCK_TIMEOUT_MS);
    Duration::from_millis(ms)
}

/// Parses a delay list: seconds, fractions allowed (`0.2,0.4`), comma-separated.
pub fn parse_delays(text: &str) -> Result<Vec<Duration>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|part| {
            let seconds: f64 = part
                .trim()
                .parse()
                .map_err(|_| format!("'{}' is not a number of seconds", part.trim()))?;
            if !(0.0..=86_400.0).contains(&seconds) {
                return Err(format!("{seconds} is not between 0 and 86400 seconds"));
            }
            Ok(Duration::from_secs_f64(seconds))
        })
        .collect()
}

/// A worktrees directory as stored: empty (the default), or an absolute path (a relative one
/// would depend on the daemon's working directory). It need not exist yet.
fn check_worktrees_dir(value: &str) -> Result<String, String> {
    if value.is_empty() || std::path::Path::new(value).is_absolute() {
        return Ok(value.to_string());
    }
    Err(format!(
        "{WORKTREES_DIR} must be an absolute path (or empty: HOME/worktrees), not '{value}'"
    ))
}

fn engine_of(name: &str, prefix: &str, suffix: &str) -> Option<Result<EngineKind, String>> {
    let engine = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    Some(engine.parse::<EngineKind>())
}

/// The default of a known setting (`""` when unset by default), `None` for an unknown name.
pub fn default_of(name: &str) -> Option<&'static str> {
    if let Some(known) = KNOWN.iter().find(|known| known.name == name) {
        return Some(known.default);
    }
    if matches!(engine_of(name, "slots.", ""), Some(Ok(_))) {
        return Some("3");
    }
    if matches!(engine_of(name, "engines.", ".path"), Some(Ok(_))) {
        return Some("");
    }
    None
}

/// Checks a setting's name and value as it is set; returns the value to store (normalized)
/// or one line saying what is allowed. An engine's path must name a program that can run
/// now.
pub fn validate(name: &str, value: &str) -> Result<String, String> {
    checked(name, value, Check::AsSet)
}

/// How much of a value is checked: all of it when it is set; only its form when it is read
/// back from the store. A stored engine path whose program is gone since (or never was on
/// this host of a shared store) is kept as set, so that a send names it; dropped at a
/// reload, the engine would be looked for on `PATH` instead, and the send would say "not
/// on PATH" about a path the person set.
#[derive(Clone, Copy, PartialEq)]
enum Check {
    AsSet,
    AsStored,
}

fn checked(name: &str, value: &str, check: Check) -> Result<String, String> {
    let value = value.trim();
    let count = |what: &str| -> Result<String, String> {
        match value.parse::<u32>() {
            Ok(n) if n >= 1 => Ok(n.to_string()),
            _ => Err(format!(
                "{what} must be a whole number of at least 1, not '{value}'"
            )),
        }
    };
    match name {
        "slots.total" if value.is_empty() => Ok(String::new()),
        "slots.total" => count("slots.total"),
        "retry.rate_limit_delays" | "retry.writer_conflict_delays" => {
            parse_delays(value).map_err(|error| format!("{name}: {error} (example: 15,45,120)"))?;
            Ok(value.to_string())
        }
        "engines.command.template" => {
            let template: Vec<String> = serde_json::from_str(value).map_err(|_| {
                format!(
                    "{name} must be a JSON array of strings, e.g. [\"sh\",\"-c\",\"{{prompt}}\"]"
                )
            })?;
            if template.is_empty() {
                return Err(format!("{name} must name a program"));
            }
            if !template
                .iter()
                .any(|element| element.contains(crate::engine::command::PROMPT_PLACEHOLDER))
            {
                return Err(format!(
                    "{name} must contain {{prompt}} where the prompt goes, e.g. [\"sh\",\"-c\",\"{{prompt}}\"]"
                ));
            }
            Ok(value.to_string())
        }
        "cancel.grace_ms" => match value.parse::<u64>() {
            Ok(ms) if ms <= 600_000 => Ok(ms.to_string()),
            _ => Err(format!(
                "cancel.grace_ms must be 0..=600000 milliseconds, not '{value}'"
            )),
        },
        "run.timeout_s" => count("run.timeout_s"),
        "runs.orphan_timeout_s" => count("runs.orphan_timeout_s"),
        "approvals.timeout_s" if value.is_empty() => Ok(String::new()),
        "approvals.timeout_s" => count("approvals.timeout_s"),
        "daemon.shutdown_grace_ms" => match value.parse::<u64>() {
            Ok(ms) if ms <= 3_600_000 => Ok(ms.to_string()),
            _ => Err(format!(
                "daemon.shutdown_grace_ms must be 0..=3600000 milliseconds, not '{value}'"
            )),
        },
        STORE_LOCK_TIMEOUT_MS => match value.parse::<u64>() {
            Ok(ms) if STORE_LOCK_TIMEOUT_RANGE.contains(&ms) => Ok(ms.to_string()),
            _ => Err(format!(
                "{name} must be 1000..=3600000 milliseconds, not '{value}'"
            )),
        },
        STORE_LEASE_MS => match value.parse::<u64>() {
            Ok(ms) if STORE_LEASE_RANGE.contains(&ms) => Ok(ms.to_string()),
            _ => Err(format!(
                "{name} must be 500..=600000 milliseconds, not '{value}'"
            )),
        },
        APP_SERVER_INIT_TIMEOUT_MS => match value.parse::<u64>() {
            Ok(ms) if (100..=600_000).contains(&ms) => Ok(ms.to_string()),
            _ => Err(format!(
                "{name} must be 100..=600000 milliseconds, not '{value}'"
            )),
        },
        HTTP_LISTEN => {
            parse_listen(value)?;
            Ok(value.to_string())
        }
        WORKTREES_DIR => check_worktrees_dir(value),
        UI_THEME if UI_THEMES.contains(&value) => Ok(value.to_string()),
        UI_THEME => Err(format!(
            "{UI_THEME} must be one of {}, not '{value}'",
            UI_THEMES.join(", ")
        )),
        "notify.command" => Ok(value.to_string()),
        "notify.webhook" if value.is_empty() => Ok(String::new()),
        "notify.webhook" => check_webhook(value).map(|_| value.to_string()),
        "notify.desktop" => match value {
            "on" | "off" | "auto" => Ok(value.to_string()),
            _ => Err(format!(
                "notify.desktop must be on, off or auto, not '{value}'"
            )),
        },
        "notify.events" => parse_notify_kinds(value)
            .map(|_| value.to_string())
            .map_err(|error| format!("notify.events: {error}")),
        "notify.timeout_ms" => match value.parse::<u64>() {
            Ok(ms) if (100..=600_000).contains(&ms) => Ok(ms.to_string()),
            _ => Err(format!(
                "notify.timeout_ms must be 100..=600000 milliseconds, not '{value}'"
            )),
        },
        "daemon.autostart" => match value {
            "true" | "false" => Ok(value.to_string()),
            _ => Err(format!(
                "daemon.autostart must be true or false, not '{value}'"
            )),
        },
        _ => {
            if let Some(engine) = engine_of(name, "slots.", "") {
                engine?;
                return count(name);
            }
            if let Some(engine) = engine_of(name, "engines.", ".path") {
                engine?;
                // Empty: found on PATH again. Else it must be there, and runnable, now.
                if !value.is_empty() && check == Check::AsSet {
                    crate::engine::check_executable(std::path::Path::new(value))
                        .map_err(|why| format!("{name}: {why}"))?;
                }
                return Ok(value.to_string());
            }
            let names: Vec<&str> = KNOWN.iter().map(|known| known.name).collect();
            Err(format!(
                "unknown setting '{name}' (known: {})",
                names.join(", ")
            ))
        }
    }
}

/// Every setting, typed, with defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub slots_total: Option<usize>,
    /// Per-engine limits that differ from the default of 3.
    pub slots: HashMap<String, usize>,
    pub rate_limit_delays: Vec<Duration>,
    pub writer_conflict_delays: Vec<Duration>,
    pub engine_paths: HashMap<String, PathBuf>,
    pub command_template: Vec<String>,
    pub cancel_grace: Duration,
    pub run_timeout: Duration,
    /// `runs.orphan_timeout_s`: how long a run's shim keeps its engine without a daemon.
    pub orphan_timeout: Duration,
    /// `approvals.timeout_s`: `None`, an approval waits for a person.
    pub approval_timeout: Option<Duration>,
    pub daemon_autostart: bool,
    pub shutdown_grace: Duration,
    /// [`STORE_LOCK_TIMEOUT_MS`] (the ledger reads it itself, when the store is locked).
    pub store_lock_timeout: Duration,
    /// [`STORE_LEASE_MS`].
    pub store_lease: Duration,
    /// [`APP_SERVER_INIT_TIMEOUT_MS`].
    pub app_server_init_timeout: Duration,
    /// [`HTTP_LISTEN`]: `None` is off.
    pub http_listen: Option<std::net::SocketAddr>,
    /// [`WORKTREES_DIR`]: `None` is `HOME/worktrees`.
    pub worktrees_dir: Option<PathBuf>,
    /// `notify.command`: `None` is no hook.
    pub notify_command: Option<String>,
    /// `notify.webhook`: `None` is no webhook.
    pub notify_webhook: Option<String>,
    /// `notify.desktop`.
    pub notify_desktop: Desktop,
    /// `notify.events`: the kinds sent unless a project says otherwise.
    pub notify_events: Vec<NotifyKind>,
    /// `notify.timeout_ms`.
    pub notify_timeout: Duration,
}

/// The default limit per engine.
pub const DEFAULT_SLOTS_PER_ENGINE: usize = 3;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            slots_total: None,
            slots: HashMap::new(),
            rate_limit_delays: parse_delays("15,45,120").expect("valid default"),
            writer_conflict_delays: parse_delays("2,5,15,30").expect("valid default"),
            engine_paths: HashMap::new(),
            command_template: vec!["sh".into(), "-c".into(), "{prompt}".into()],
            cancel_grace: Duration::from_millis(DEFAULT_CANCEL_GRACE_MS),
            run_timeout: Duration::from_secs(3600),
            orphan_timeout: Duration::from_secs(600),
            approval_timeout: None,
            daemon_autostart: true,
            shutdown_grace: Duration::from_secs(10),
            store_lock_timeout: Duration::from_millis(DEFAULT_STORE_LOCK_TIMEOUT_MS),
            store_lease: Duration::from_millis(DEFAULT_STORE_LEASE_MS),
            app_server_init_timeout: Duration::from_secs(20),
            http_listen: parse_listen(DEFAULT_HTTP_LISTEN).expect("valid default"),
            worktrees_dir: None,
            notify_command: None,
            notify_webhook: None,
            notify_desktop: Desktop::Auto,
            notify_events: parse_notify_kinds(DEFAULT_NOTIFY_EVENTS).expect("valid default"),
            notify_timeout: Duration::from_secs(10),
        }
    }
}

impl Settings {
    /// Reads every stored setting over the defaults. A stored value that no longer validates
    /// (written by hand) keeps the default rather than stopping the supervisor.
    pub fn load(connection: &Conn) -> sql::Result<Settings> {
        let mut settings = Settings::default();
        let rows = connection.rows("SELECT name, value FROM settings", args![], |row| {
            Ok((row.get::<String>(0)?, row.get::<String>(1)?))
        })?;
        for (name, value) in rows {
            if let Err(error) = settings.apply(&name, &value) {
                tracing::warn!(name, value, error, "stored setting ignored");
            }
        }
        Ok(settings)
    }

    /// Applies one setting (validated first).
    pub fn apply(&mut self, name: &str, value: &str) -> Result<(), String> {
        let value = checked(name, value, Check::AsStored)?;
        match name {
            "slots.total" => self.slots_total = value.parse().ok(),
            "retry.rate_limit_delays" => self.rate_limit_delays = parse_delays(&value)?,
            "retry.writer_conflict_delays" => self.writer_conflict_delays = parse_delays(&value)?,
            "engines.command.template" => {
                self.command_template = serde_json::from_str(&value).map_err(|e| e.to_string())?
            }
            "cancel.grace_ms" => {
                self.cancel_grace = Duration::from_millis(value.parse().map_err(|_| "number")?)
            }
            "run.timeout_s" => {
                self.run_timeout = Duration::from_secs(value.parse().map_err(|_| "number")?)
            }
            "runs.orphan_timeout_s" => {
                self.orphan_timeout = Duration::from_secs(value.parse().map_err(|_| "number")?)
            }
            "approvals.timeout_s" => {
                self.approval_timeout = value.parse().ok().map(Duration::from_secs)
            }
            "daemon.autostart" => self.daemon_autostart = value == "true",
            "notify.command" => {
                self.notify_command = Some(value.clone()).filter(|command| !command.is_empty())
            }
            "notify.webhook" => {
                self.notify_webhook = Some(value.clone()).filter(|url| !url.is_empty())
            }
            "notify.desktop" => {
                self.notify_desktop = match value.as_str() {
                    "on" => Desktop::On,
                    "off" => Desktop::Off,
                    _ => Desktop::Auto,
                }
            }
            "notify.events" => self.notify_events = parse_notify_kinds(&value)?,
            "notify.timeout_ms" => {
                self.notify_timeout = Duration::from_millis(value.parse().map_err(|_| "number")?)
            }
            HTTP_LISTEN => self.http_listen = parse_listen(&value)?,
            WORKTREES_DIR => {
                self.worktrees_dir = Some(PathBuf::from(&value)).filter(|_| !value.is_empty())
            }
            STORE_LOCK_TIMEOUT_MS => {
                self.store_lock_timeout =
                    Duration::from_millis(value.parse().map_err(|_| "number")?)
            }
            APP_SERVER_INIT_TIMEOUT_MS => {
                self.app_server_init_timeout =
                    Duration::from_millis(value.parse().map_err(|_| "number")?)
            }
            STORE_LEASE_MS => {
                self.store_lease = Duration::from_millis(value.parse().map_err(|_| "number")?)
            }
            "daemon.shutdown_grace_ms" => {
                self.shutdown_grace = Duration::from_millis(value.parse().map_err(|_| "number")?)
            }
            _ => {
                if let Some(engine) = name.strip_prefix("slots.") {
                    self.slots
                        .insert(engine.to_string(), value.parse().map_err(|_| "number")?);
                } else if let Some(engine) = name
                    .strip_prefix("engines.")
                    .and_then(|rest| rest.strip_suffix(".path"))
                {
                    if value.is_empty() {
                        self.engine_paths.remove(engine);
                    } else {
                        self.engine_paths.insert(engine.to_string(), value.into());
                    }
                }
            }
        }
        Ok(())
    }

    /// The limit of one engine.
    pub fn slots_of(&self, engine: &str) -> usize {
        self.slots
            .get(engine)
            .copied()
            .unwrap_or(DEFAULT_SLOTS_PER_ENGINE)
    }
}

/// Sets a setting, or removes it (`None`: back to its default). Applied by the ledger actor
/// (`SetSetting`) inside its transaction.
pub(crate) fn set_setting(connection: &Conn, name: &str, value: Option<&str>) -> sql::Result<()> {
    match value {
        Some(value) => connection.run_later(
            "INSERT INTO settings (name, value, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            args![name, value, now_ms()],
        ),
        None => connection.run_later("DELETE FROM settings WHERE name = ?1", args![name]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_engine_path_whose_program_is_gone_is_kept_as_set() {
        let gone = "/nonexistent/codex";
        assert!(validate("engines.codex.path", gone)
            .unwrap_err()
            .contains("does not exist"));
        let mut settings = Settings::default();
        settings.apply("engines.codex.path", gone).unwrap();
        assert_eq!(
            settings.engine_paths.get("codex"),
            Some(&PathBuf::from(gone))
        );
        // Its form is still checked.
        assert!(settings.apply("engines.nosuch.path", gone).is_err());
    }

    #[test]
    fn validates_names_and_values() {
        assert_eq!(validate("slots.codex", "4").unwrap(), "4");
        assert!(validate("slots.codex", "0").is_err());
        assert!(validate("slots.nosuch", "2")
            .unwrap_err()
            .contains("unknown engine"));
        assert!(validate("retry.rate_limit_delays", "0.2,0.4").is_ok());
        assert!(validate("retry.rate_limit_delays", "a,b").is_err());
        assert!(validate("no.such", "1")
            .unwrap_err()
            .contains("unknown setting"));
        assert!(validate("daemon.autostart", "yes").is_err());
        assert_eq!(
            validate(HTTP_LISTEN, "127.0.0.1:8080").unwrap(),
            "127.0.0.1:8080"
        );
        assert_eq!(validate(HTTP_LISTEN, "off").unwrap(), "off");
        assert_eq!(
            parse_listen("localhost:7000").unwrap(),
            Some("127.0.0.1:7000".parse().unwrap())
        );
        assert_eq!(
            parse_listen("[::1]:0").unwrap(),
            Some("[::1]:0".parse().unwrap())
        );
        for refused in [
            "0.0.0.0:8080",
            "192.168.1.2:80",
            "127.0.0.1",
            "localhost:x",
            "",
        ] {
            let error = validate(HTTP_LISTEN, refused).unwrap_err();
            assert!(
                error.starts_with("http.listen must be a loopback address"),
                "{error}"
            );
        }
        assert_eq!(validate(UI_THEME, "dark").unwrap(), "dark");
        assert!(validate(UI_THEME, "blue")
            .unwrap_err()
            .contains("system, light, dark"));
        assert_eq!(validate(STORE_LOCK_TIMEOUT_MS, " 5000 ").unwrap(), "5000");
        assert!(validate(STORE_LOCK_TIMEOUT_MS, "999")
            .unwrap_err()
            .contains("store.lock_timeout_ms must be 1000..=3600000 milliseconds"));
        assert!(validate(STORE_LOCK_TIMEOUT_MS, "a minute").is_err());
        // An engine path must be an executable file now; empty means PATH again.
        assert!(validate("engines.codex.path", "/bin/sh").is_ok());
        assert!(validate("engines.codex.path", "").is_ok());
        assert!(validate("engines.codex.path", "/nonexistent/codex")
            .unwrap_err()
            .contains("/nonexistent/codex does not exist"));
        assert_eq!(validate(WORKTREES_DIR, "/srv/wt").unwrap(), "/srv/wt");
        assert_eq!(validate(WORKTREES_DIR, "").unwrap(), "");
        assert!(validate(WORKTREES_DIR, "wt")
            .unwrap_err()
            .contains("worktrees.dir must be an absolute path"));
        assert!(validate("engines.command.template", r#"["sh","-c","ls"]"#)
            .unwrap_err()
            .contains("{prompt}"));
    }

    #[test]
    fn applies_over_defaults() {
        let mut settings = Settings::default();
        assert_eq!(settings.slots_of("codex"), 3);
        settings.apply("slots.codex", "5").unwrap();
        settings.apply("retry.rate_limit_delays", "0.5").unwrap();
        assert_eq!(settings.slots_of("codex"), 5);
        assert_eq!(settings.rate_limit_delays, vec![Duration::from_millis(500)]);
        assert!(settings.apply("slots.codex", "x").is_err());
        assert_eq!(settings.slots_of("codex"), 5);
        settings.apply(WORKTREES_DIR, "/srv/wt").unwrap();
        assert_eq!(settings.worktrees_dir, Some(PathBuf::from("/srv/wt")));
        settings.apply(WORKTREES_DIR, "").unwrap();
        assert_eq!(settings.worktrees_dir, None);
    }
}
