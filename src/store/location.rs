//! Where the store is: a SQLite file in the home, or a PostgreSQL database named by a URL.
//!
//! [`locate`] decides, in this order:
//! 1. `CORRAL_STORE_URL` ([`crate::env::STORE_URL`]) when it is set and not empty;
//! 2. `store.url` in `HOME/config` ([`HomeConfig`]);
//! 3. else the SQLite file `HOME/corral.db` ([`super::store_path`]).
//!
//! The address of the store cannot be a store setting (the store cannot hold its own
//! address), so it lives in `HOME/config`, a small text file read by hand:
//!
//! ```text
//! # lines `key = value`; `#` starts a comment line; blank lines are kept
//! store.url = postgres://corral:secret@127.0.0.1:54329/corral
//! ```
//!
//! Only the keys in [`KNOWN_KEYS`] are accepted: a line with another key is refused, naming
//! its line number, rather than silently ignored (a typo would otherwise send a daemon to the
//! wrong store). A comment is a whole line: a `#` inside a value is part of the value.
//!
//! The file is trusted only when it is the user's own: a regular file (never a symbolic
//! link), owned by the effective uid, not group- or world-writable, and mode 0600 when its
//! URL carries a password (the rule of `HOME/http.token`). It is written the way the token
//! is: a new file of ours, 0600 from its creation, renamed over the old one, so a file that
//! is not ours is never written through.
//!
//! A [`PgUrl`] keeps the text it was given (the driver needs the password) but never shows
//! it: `Display` and `Debug` print the URL without its password, and every error of this
//! module shows the redacted form.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// The key of the store's URL in `HOME/config`.
pub const STORE_URL: &str = "store.url";
/// The file name of the home's configuration.
pub const CONFIG_FILE: &str = "config";
/// Every key `HOME/config` may hold. One list: loading, `set` and the CLI's messages use it.
pub const KNOWN_KEYS: &[&str] = &[STORE_URL];

/// The longest `HOME/config` read: it holds a few lines; anything longer is not ours.
const MAX_CONFIG_FILE: u64 = 64 * 1024;

/// Defaults given to a URL that does not say otherwise: a store that does not answer is
/// said within seconds, and a dead peer is noticed by TCP keepalives.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const DEFAULT_KEEPALIVES_IDLE: Duration = Duration::from_secs(5);
const DEFAULT_KEEPALIVES_INTERVAL: Duration = Duration::from_secs(2);
const DEFAULT_KEEPALIVES_RETRIES: u32 = 3;
/// How long sent data may stay unacknowledged before the connection is given up.
const DEFAULT_TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_APPLICATION_NAME: &str = "corral";

/// Why the store's location could not be told. Every message is one line, names the file
/// or the variable, and never holds a password.
#[derive(Debug, thiserror::Error)]
pub enum LocationError {
    /// The text is not a `postgres://` or `postgresql://` URL at all.
    #[error("{origin}: not a postgres:// URL: {shown} (postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE expected)")]
    NotPostgres { origin: String, shown: String },
    /// A `postgres://` URL the driver (or corral) refuses.
    #[error("{origin}: not a valid postgres:// URL: {shown}: {why}")]
    BadUrl {
        origin: String,
        shown: String,
        why: String,
    },
    /// A line of `HOME/config` that is not `key = value` with a known key.
    #[error("{} line {line}: {why}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        why: String,
    },
    /// `HOME/config` is not a file corral trusts (owner, mode, kind).
    #[error("{} is refused: {why}", path.display())]
    Unsafe { path: PathBuf, why: String },
    /// A key `HOME/config` does not know, given to [`HomeConfig::set`].
    #[error("unknown key '{key}' for {} (known: {})", path.display(), KNOWN_KEYS.join(", "))]
    UnknownKey { path: PathBuf, key: String },
    /// A value that cannot be one line of `HOME/config`.
    #[error("{key}: {why}")]
    BadValue { key: String, why: String },
    #[error("cannot {doing} {}: {error}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Where the store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The SQLite file (normally `HOME/corral.db`).
    Sqlite(PathBuf),
    /// A PostgreSQL database.
    Postgres(PgUrl),
}

impl Location {
    pub fn is_postgres(&self) -> bool {
        matches!(self, Location::Postgres(_))
    }
}

/// The path, or the URL without its password.
impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => write!(f, "{url}"),
        }
    }
}

/// Where [`locate`] found the store's location.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `CORRAL_STORE_URL`.
    Env,
    /// `store.url` in `HOME/config`.
    File,
    /// Neither: the SQLite file in the home.
    Default,
}

impl Source {
    /// `env`, `file`, `default`: the word the CLI's JSON uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Env => "env",
            Source::File => "file",
            Source::Default => "default",
        }
    }
}

/// Where the store of `home` is (see the module's doc for the order).
pub fn locate(home: &Path) -> Result<Location, LocationError> {
    locate_with_source(home).map(|(location, _)| location)
}

/// [`locate`], and where the answer came from.
pub fn locate_with_source(home: &Path) -> Result<(Location, Source), LocationError> {
    let env = std::env::var_os(crate::env::STORE_URL).filter(|value| !value.is_empty());
    locate_from(
        home,
        env.as_deref()
            .map(|value| value.to_string_lossy())
            .as_deref(),
    )
}

/// [`locate_with_source`] with the variable's value given (the tests do not touch the
/// process's environment).
fn locate_from(home: &Path, env: Option<&str>) -> Result<(Location, Source), LocationError> {
    if let Some(text) = env {
        let url = PgUrl::parse_as(text, crate::env::STORE_URL)?;
        return Ok((Location::Postgres(url), Source::Env));
    }
    let config = HomeConfig::load(home)?;
    if let Some((line, text)) = config.entry(STORE_URL) {
        let origin = format!("{} line {line}: {STORE_URL}", config.path.display());
        let url = PgUrl::parse_as(text, &origin)?;
        return Ok((Location::Postgres(url), Source::File));
    }
    Ok((Location::Sqlite(super::store_path(home)), Source::Default))
}

/// A PostgreSQL URL: the text as given (with its password, for the driver), the driver's
/// configuration with corral's defaults, and the text shown to people (without password).
#[derive(Clone)]
pub struct PgUrl {
    text: String,
    shown: String,
    /// Boxed: a `Location` stays small.
    config: Box<tokio_postgres::Config>,
}

impl PartialEq for PgUrl {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for PgUrl {}

impl PgUrl {
    /// Parses a `postgres://` or `postgresql://` URL (the driver's parser; the `key=value`
    /// form is refused: the store's address is a URL). An error names `store.url`.
    pub fn parse(text: &str) -> Result<PgUrl, LocationError> {
        Self::parse_as(text, STORE_URL)
    }

    /// [`PgUrl::parse`], with errors naming `origin` (the variable, or the file and line).
    fn parse_as(text: &str, origin: &str) -> Result<PgUrl, LocationError> {
        let text = text.trim();
        let Some(rest) = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|prefix| text.strip_prefix(prefix))
        else {
            return Err(LocationError::NotPostgres {
                origin: origin.to_string(),
                shown: redact_any(text),
            });
        };
        let shown = redact(text, rest);
        let bad = |why: String| LocationError::BadUrl {
            origin: origin.to_string(),
            shown: shown.clone(),
            why,
        };
        // The driver splits the credentials at the first `@`: a second one before the host
        // means an unencoded `@` in the password, which would end up in the host (and be
        // shown). Refused, without showing the text.
        if let Some((_, after)) = rest.split_once('@') {
            let authority = after.split(['/', '?']).next().unwrap_or("");
            if authority.contains('@') {
                return Err(LocationError::BadUrl {
                    origin: origin.to_string(),
                    shown: format!("{}…", &text[..text.len() - rest.len()]),
                    why: "more than one @ before the host (write an @ of the password as %40)"
                        .into(),
                });
            }
        }
        let mut config = tokio_postgres::Config::from_str(text).map_err(|error| {
            // The driver's line is `invalid connection string`; what is wrong is its source
            // (`invalid value for option `port``): option names only, never a value.
            let why = match std::error::Error::source(&error) {
                Some(source) => format!("{error}: {source}"),
                None => error.to_string(),
            };
            bad(why.replace('\n', " "))
        })?;
        if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
            return Err(bad("it names no host".into()));
        }
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(bad(
                "sslmode=require needs TLS, which this corral does not have".into(),
            ));
        }
        let given = query_keys(rest);
        let given = |key: &str| given.iter().any(|given| given == key);
        if !given("connect_timeout") {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        if !given("keepalives_idle") {
            config.keepalives_idle(DEFAULT_KEEPALIVES_IDLE);
        }
        // A cut network (no reset) is found out in seconds, not after the OS defaults' minutes
        // (75 s × 9 probes idle; some 15 minutes of retransmissions with a query in flight):
        // until then the ledger's writer would wait on the dead socket.
        if !given("keepalives_interval") {
            config.keepalives_interval(DEFAULT_KEEPALIVES_INTERVAL);
        }
        if !given("keepalives_retries") {
            config.keepalives_retries(DEFAULT_KEEPALIVES_RETRIES);
        }
        if !given("tcp_user_timeout") {
            config.tcp_user_timeout(DEFAULT_TCP_USER_TIMEOUT);
        }
        if !given("application_name") {
            config.application_name(DEFAULT_APPLICATION_NAME);
        }
        Ok(PgUrl {
            text: text.to_string(),
            shown,
            config: Box::new(config),
        })
    }

    /// The driver's configuration, corral's defaults set where the URL says nothing
    /// (`connect_timeout` 5 s, `keepalives_idle` 5 s, `keepalives_interval` 2 s,
    /// `keepalives_retries` 3, `tcp_user_timeout` 10 s, `application_name` `corral`).
    pub fn config(&self) -> tokio_postgres::Config {
        (*self.config).clone()
    }

    /// Whether the URL carries a password (in its user part or as `password=`).
    pub fn has_password(&self) -> bool {
        self.config.get_password().is_some()
    }

    /// The URL as given, password included: for writing `HOME/config` and handing it to
    /// the driver only, never for showing.
    pub fn secret_text(&self) -> &str {
        &self.text
    }
}

/// The URL without its password: `postgres://corral@127.0.0.1:54329/corral`.
impl fmt::Display for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

/// By hand, so that a `{:?}` anywhere (a log line, a test's failure) shows no password.
impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgUrl")
            .field("url", &self.shown)
            .field("password", &self.has_password())
            .finish()
    }
}

/// `text` (whose part after the scheme is `rest`) without its password, cut where the
/// driver cuts: the credentials end at the first `@`, the user at their first `:`, and the
/// query's `password=` parameters are dropped.
///
/// Where the text is not a plain `user[:password]@host…` shape, it is not shown at all past its
/// scheme (`postgres://…`): a user part holding `/`, `?`, `&` or `=` (the first `@` is in the
/// path or the query, so what precedes it may hold a `password=`), or no `@` and an authority
/// whose port is not digits (`postgres://corral:SECRET` — a password the driver would read as
/// a port).
fn redact(text: &str, rest: &str) -> String {
    let scheme = &text[..text.len() - rest.len()];
    let hidden = || format!("{scheme}…");
    let (user, after) = match rest.split_once('@') {
        Some((credentials, after)) => {
            let user = credentials.split(':').next().unwrap_or("");
            if user.contains(['/', '?', '&', '=', '#']) {
                return hidden();
            }
            (Some(user), after)
        }
        None => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            let odd_port = authority.split(',').any(|host| {
                host.rsplit_once(':')
                    .is_some_and(|(_, port)| !port.bytes().all(|b| b.is_ascii_digit()))
            });
            if odd_port {
                return hidden();
            }
            (None, rest)
        }
    };
    let (before_query, query) = match after.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (after, None),
    };
    let mut shown = String::from(scheme);
    if let Some(user) = user {
        shown.push_str(user);
        shown.push('@');
    }
    shown.push_str(before_query);
    if let Some(query) = query {
        let kept: Vec<&str> = query
            .split('&')
            .filter(|pair| {
                let key = pair.split('=').next().unwrap_or("");
                percent_decode(key) != "password"
            })
            .collect();
        if !kept.is_empty() {
            shown.push('?');
            shown.push_str(&kept.join("&"));
        }
    }
    shown
}

/// Some text that should have been a postgres URL, shown safely: a `scheme://` URL is
/// redacted like one (`mysql://root@db/x`), anything else is not shown at all.
fn redact_any(text: &str) -> String {
    match text.split_once("://") {
        Some((scheme, rest))
            if !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            redact(text, rest)
        }
        _ if text.is_empty() => "(empty)".into(),
        _ => "(not a URL; not shown)".into(),
    }
}

/// Whether a `store.url` value carries a password, read from the text alone (so that a value
/// the driver refuses is judged too): credentials with a `:`, or a `password=` parameter.
fn textual_password(text: &str) -> bool {
    let Some((_, rest)) = text.split_once("://") else {
        return false;
    };
    let in_credentials = rest
        .split_once('@')
        .is_some_and(|(credentials, _)| credentials.contains(':'));
    in_credentials || query_keys(rest).iter().any(|key| key == "password")
}

/// The decoded keys of the query of a URL's part after its scheme.
fn query_keys(rest: &str) -> Vec<String> {
    let after = rest.split_once('@').map_or(rest, |(_, after)| after);
    match after.split_once('?') {
        Some((_, query)) => query
            .split('&')
            .map(|pair| percent_decode(pair.split('=').next().unwrap_or("")))
            .collect(),
        None => Vec::new(),
    }
}

/// `%XX` decoded (what is not a valid escape is kept as it is); lossy UTF-8.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |byte: u8| (byte as char).to_digit(16);
        match (bytes[at], bytes.get(at + 1), bytes.get(at + 2)) {
            (b'%', Some(&high), Some(&low)) if hex(high).is_some() && hex(low).is_some() => {
                out.push((hex(high).unwrap_or(0) * 16 + hex(low).unwrap_or(0)) as u8);
                at += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The path of a home's configuration file.
pub fn config_path(home: &Path) -> PathBuf {
    home.join(CONFIG_FILE)
}

/// One line of `HOME/config`, as it was read (so that saving keeps it), and its entry.
#[derive(Clone)]
struct Line {
    text: String,
    entry: Option<(String, String)>,
}

/// `HOME/config`, read: its lines as they are (comments, blank lines, order) and the
/// entries among them. [`HomeConfig::set`] and [`HomeConfig::unset`] change only the lines
/// of their key; [`HomeConfig::save`] writes the rest back byte for byte.
#[derive(Clone)]
pub struct HomeConfig {
    path: PathBuf,
    lines: Vec<Line>,
    changed: bool,
}

/// By hand: the values may carry a password.
impl fmt::Debug for HomeConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> = self
            .lines
            .iter()
            .filter_map(|line| line.entry.as_ref().map(|(key, _)| key.as_str()))
            .collect();
        f.debug_struct("HomeConfig")
            .field("path", &self.path)
            .field("keys", &keys)
            .field("lines", &self.lines.len())
            .finish()
    }
}

impl HomeConfig {
    /// Reads `HOME/config`; an absent file is an empty configuration. Refused: a file that
    /// is not a regular file of the user's, a group- or world-writable one, one whose URL
    /// carries a password and that others may read, a line that is not `key = value` with
    /// a known key, a key given twice.
    pub fn load(home: &Path) -> Result<HomeConfig, LocationError> {
        let path = config_path(home);
        let io = |doing, error| LocationError::Io {
            doing,
            path: path.clone(),
            error,
        };
        let refused = |why: String| LocationError::Unsafe {
            path: path.clone(),
            why,
        };
        let before = match std::fs::symlink_metadata(&path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Ok(HomeConfig {
                    path,
                    lines: Vec::new(),
                    changed: false,
                })
            }
            Err(error) => return Err(io("read", error)),
        };
        if let Some(why) = untrusted(&before) {
            return Err(refused(why));
        }
        // No link followed, no blocking on a FIFO put there meanwhile; then the file opened
        // must be the file checked.
        let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits())
            .open(&path)
            .map_err(|error| match error.raw_os_error() {
                Some(code) if code == nix::errno::Errno::ELOOP as i32 => {
                    refused("it is a symbolic link".into())
                }
                _ => io("read", error),
            })?;
        let metadata = file.metadata().map_err(|error| io("read", error))?;
        if let Some(why) = untrusted(&metadata) {
            return Err(refused(why));
        }
        if metadata.ino() != before.ino() || metadata.dev() != before.dev() {
            return Err(refused("it was replaced while being read".into()));
        }
        if metadata.size() > MAX_CONFIG_FILE {
            return Err(refused(format!(
                "it is {} bytes long (at most {MAX_CONFIG_FILE})",
                metadata.size()
            )));
        }
        let mut bytes = Vec::new();
        (&mut file)
            .take(MAX_CONFIG_FILE)
            .read_to_end(&mut bytes)
            .map_err(|error| io("read", error))?;
        let text = String::from_utf8(bytes).map_err(|_| refused("it is not UTF-8 text".into()))?;
        let config = Self::parse(path.clone(), &text)?;
        if let Some((line, value)) = config.entry(STORE_URL) {
            if textual_password(value) && metadata.mode() & 0o077 != 0 {
                return Err(refused(format!(
                    "its {STORE_URL} (line {line}) carries a password, so its mode must be \
                     0600, not {:04o} (chmod 600 {})",
                    metadata.mode() & 0o7777,
                    path.display()
                )));
            }
        }
        Ok(config)
    }

    /// The lines of `text`, checked.
    fn parse(path: PathBuf, text: &str) -> Result<HomeConfig, LocationError> {
        let mut lines: Vec<Line> = Vec::new();
        for (at, raw) in text.lines().enumerate() {
            let number = at + 1;
            let bad = |why: String| LocationError::Line {
                path: path.clone(),
                line: number,
                why,
            };
            let trimmed = raw.trim();
            let entry = if trimmed.is_empty() || trimmed.starts_with('#') {
                None
            } else {
                let Some((key, value)) = trimmed.split_once('=') else {
                    return Err(bad(
                        "expected `key = value` (or a `#` comment, or a blank line)".into(),
                    ));
                };
                let key = key.trim();
                if !KNOWN_KEYS.contains(&key) {
                    return Err(bad(format!(
                        "unknown key '{key}' (known: {})",
                        KNOWN_KEYS.join(", ")
                    )));
                }
                let earlier = lines.iter().position(|line| {
                    line.entry
                        .as_ref()
                        .is_some_and(|(earlier, _)| earlier == key)
                });
                if let Some(earlier) = earlier {
                    return Err(bad(format!(
                        "'{key}' is given again (first on line {})",
                        earlier + 1
                    )));
                }
                let value = value.trim();
                if value.is_empty() {
                    return Err(bad(format!("'{key}' has no value")));
                }
                Some((key.to_string(), value.to_string()))
            };
            lines.push(Line {
                text: raw.to_string(),
                entry,
            });
        }
        Ok(HomeConfig {
            path,
            lines,
            changed: false,
        })
    }

    /// The file this configuration is read from and written to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The value of `key`, if the file gives one.
    #[cfg(any(test, feature = "testkit"))]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entry(key).map(|(_, value)| value)
    }

    /// The line number (from 1) and value of `key`.
    pub fn entry(&self, key: &str) -> Option<(usize, &str)> {
        self.lines.iter().enumerate().find_map(|(at, line)| {
            line.entry
                .as_ref()
                .filter(|(given, _)| given == key)
                .map(|(_, value)| (at + 1, value.as_str()))
        })
    }

    /// Gives `key` the value `value`: its line is rewritten in place (`key = value`), or a
    /// line is added at the end. Refused: an unknown key, a value that is empty or is not
    /// one line.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), LocationError> {
        if !KNOWN_KEYS.contains(&key) {
            return Err(LocationError::UnknownKey {
                path: self.path.clone(),
                key: key.to_string(),
            });
        }
        let value = value.trim();
        if value.is_empty() || value.contains(['\n', '\r']) {
            return Err(LocationError::BadValue {
                key: key.to_string(),
                why: "a value is one line, not empty".into(),
            });
        }
        let line = Line {
            text: format!("{key} = {value}"),
            entry: Some((key.to_string(), value.to_string())),
        };
        match self.entry(key) {
            Some((number, _)) => self.lines[number - 1] = line,
            None => self.lines.push(line),
        }
        self.changed = true;
        Ok(())
    }

    /// Removes `key`'s line; whether there was one.
    pub fn unset(&mut self, key: &str) -> bool {
        let before = self.lines.len();
        self.lines
            .retain(|line| line.entry.as_ref().is_none_or(|(given, _)| given != key));
        let removed = self.lines.len() != before;
        self.changed |= removed;
        removed
    }

    /// Whether [`HomeConfig::set`] or [`HomeConfig::unset`] changed anything since the load.
    #[cfg(test)]
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Writes the configuration to `HOME/config`: a new file (mode 0600 from its creation,
    /// never through a link) renamed over the old one, so a reader sees the old file or the
    /// new one, whole. A path that holds something not ours is refused, not replaced.
    pub fn save(&self, home: &Path) -> Result<(), LocationError> {
        let path = config_path(home);
        let io = |doing, error| LocationError::Io {
            doing,
            path: path.clone(),
            error,
        };
        match std::fs::symlink_metadata(&path) {
            Ok(metadata) => {
                if let Some(why) = untrusted(&metadata) {
                    return Err(LocationError::Unsafe {
                        path: path.clone(),
                        why,
                    });
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io("write", error)),
        }
        let mut text = String::new();
        for line in &self.lines {
            text.push_str(&line.text);
            text.push('\n');
        }
        if let Err(error) = crate::home::write_private(&path, &text) {
            return Err(io("write", error));
        }
        // The rename is durable once the directory is (best effort).
        if let Ok(dir) = std::fs::File::open(home) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

/// Why a file at `HOME/config` is not one corral trusts, from its metadata (taken without
/// following a link): not a regular file, not the effective user's, group/world-writable.
fn untrusted(metadata: &std::fs::Metadata) -> Option<String> {
    let uid = nix::unistd::geteuid().as_raw();
    if metadata.file_type().is_symlink() {
        return Some("it is a symbolic link".into());
    }
    if !metadata.file_type().is_file() {
        return Some("it is not a regular file".into());
    }
    if metadata.uid() != uid {
        return Some(format!(
            "its owner is uid {}, not you (uid {uid})",
            metadata.uid()
        ));
    }
    if metadata.mode() & 0o022 != 0 {
        return Some(format!(
            "its mode {:04o} lets others write it (chmod go-w)",
            metadata.mode() & 0o7777
        ));
    }
    None
}

// ---------------------------------------------------------------------------------------------
// A home serves one store.

/// The file that binds a home to the PostgreSQL store its daemon first served: the store's
/// `corral_meta.store_id`.
pub const STORE_ID_FILE: &str = "store.id";

/// Checks, when a supervisor starts on `home`, that the home's store is the one it served
/// before: a daemon pointed at another database (a changed `CORRAL_STORE_URL`, a copied home)
/// must not take the home's runs, spill journal and worktrees there. `store_id` is the
/// PostgreSQL store's id as the database holds it now (`None`: the SQLite file, which is the
/// home's own, or a database with no store yet). Run before anything is written to the store;
/// [`bind_home`] records the binding once the store exists. `corral config set|unset
/// store.url` remove it: moving a home to another store is a person's deliberate act, made
/// while no daemon runs.
pub fn check_home(home: &Path, location: &Location, store_id: Option<&str>) -> Result<(), String> {
    match (bound_store(home)?, store_id) {
        (None, _) => Ok(()),
        (Some(bound), Some(id)) if bound == id => Ok(()),
        (Some(bound), _) => Err(format!(
            "this home serves store {bound} (its {STORE_ID_FILE}), not {location}{}: a home \
             serves one store (`corral config set store.url` moves it)",
            store_id
                .map(|id| format!(" (store {id})"))
                .unwrap_or_default()
        )),
    }
}

/// Binds `home` to the PostgreSQL store `store_id` (after [`check_home`] let it through and
/// the store exists): `HOME/store.id` is written the first time.
pub fn bind_home(home: &Path, location: &Location, store_id: &str) -> Result<(), String> {
    check_home(home, location, Some(store_id))?;
    if bound_store(home)?.is_some() {
        return Ok(());
    }
    let path = home.join(STORE_ID_FILE);
    crate::home::write_private(&path, &format!("{store_id}\n"))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

/// The store id `HOME/store.id` names, if the home is bound.
fn bound_store(home: &Path) -> Result<Option<String>, String> {
    let path = home.join(STORE_ID_FILE);
    match std::fs::symlink_metadata(&path) {
        Ok(metadata) => {
            if let Some(why) = untrusted(&metadata) {
                return Err(format!("{} is refused: {why}", path.display()));
            }
            let text = std::fs::read_to_string(&path)
                .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
            Ok(Some(text.trim().to_string()))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    }
}

/// Forgets the home's store binding (see [`bind_home`]).
pub fn unbind_home(home: &Path) -> Result<(), LocationError> {
    let path = home.join(STORE_ID_FILE);
    match std::fs::symlink_metadata(&path) {
        Ok(metadata) if metadata.file_type().is_file() => {
            std::fs::remove_file(&path).map_err(|error| LocationError::Io {
                doing: "remove",
                path,
                error,
            })
        }
        Ok(_) => Err(LocationError::Unsafe {
            path,
            why: "it is not a regular file".into(),
        }),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn odd_shapes_never_show_a_password() {
        for text in [
            "postgres://corral:SECRET2",
            "postgres://corral:SECRET3/postgres",
            "postgres://localhost/db?password=SECRET1&options=a@b",
        ] {
            let rest = text.split_once("://").unwrap().1;
            let shown = redact(text, rest);
            assert!(!shown.contains("SECRET"), "{text} shown as {shown}");
            let error = PgUrl::parse(text)
                .map(|url| url.to_string())
                .unwrap_or_else(|e| e.to_string());
            assert!(!error.contains("SECRET"), "{text}: {error}");
        }
        assert_eq!(
            redact("postgres://u:pw@h:5432/d", "u:pw@h:5432/d"),
            "postgres://u@h:5432/d"
        );
        assert_eq!(
            redact("postgres://h:5432/d", "h:5432/d"),
            "postgres://h:5432/d"
        );
    }

    const SECRET: &str = "s3cr3t-Pw";

    fn home() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    fn write(home: &Path, text: &str, mode: u32) -> PathBuf {
        let path = config_path(home);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_url_parses_with_defaults_and_shows_no_password() {
        let url = PgUrl::parse(&format!(
            "postgres://corral:{SECRET}@127.0.0.1:54329/corral"
        ))
        .unwrap();
        assert_eq!(url.to_string(), "postgres://corral@127.0.0.1:54329/corral");
        assert!(url.has_password());
        let debug = format!("{url:?}");
        assert!(!debug.contains(SECRET), "{debug}");
        assert!(debug.contains("postgres://corral@127.0.0.1:54329/corral"));
        let config = url.config();
        assert_eq!(config.get_user(), Some("corral"));
        assert_eq!(config.get_dbname(), Some("corral"));
        assert_eq!(config.get_ports(), &[54329]);
        assert_eq!(config.get_password(), Some(SECRET.as_bytes()));
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(5)));
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(5));
        assert_eq!(config.get_application_name(), Some("corral"));
        let location = Location::Postgres(url);
        assert!(location.is_postgres());
        assert!(!format!("{location} {location:?}").contains(SECRET));
    }

    #[test]
    fn what_the_url_says_wins_over_the_defaults() {
        let url = PgUrl::parse(
            "postgresql://me@db.local/x?connect_timeout=9&keepalives_idle=30&application_name=ci",
        )
        .unwrap();
        assert!(!url.has_password());
        let config = url.config();
        assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(9)));
        assert_eq!(config.get_keepalives_idle(), Duration::from_secs(30));
        assert_eq!(config.get_application_name(), Some("ci"));
        assert_eq!(
            url.to_string(),
            "postgresql://me@db.local/x?connect_timeout=9&keepalives_idle=30&application_name=ci"
        );
    }

    #[test]
    fn a_password_parameter_is_redacted_too() {
        let url = PgUrl::parse(&format!(
            "postgres://me@h/x?password={SECRET}&application_name=a"
        ))
        .unwrap();
        assert!(url.has_password());
        assert_eq!(url.to_string(), "postgres://me@h/x?application_name=a");
        let url = PgUrl::parse(&format!("postgres://h/x?%70assword={SECRET}")).unwrap();
        assert_eq!(url.to_string(), "postgres://h/x");
    }

    #[test]
    fn bad_urls_are_refused_in_one_line_without_the_password() {
        for text in [
            format!("mysql://root:{SECRET}@db/x"),
            format!("host=h password={SECRET}"),
            format!("postgres://u:{SECRET}@h:notaport/x"),
            format!("postgres://u:{SECRET}@/x"),
            format!("postgres://u:{SECRET}@h/x?sslmode=require"),
            format!("postgres://u:{SECRET}@h/x?bogus=1"),
            format!("postgres://u:{SECRET}@more@h/x"),
            String::new(),
        ] {
            let error = PgUrl::parse(&text).unwrap_err();
            let line = error.to_string();
            assert!(line.starts_with("store.url: not "), "{line}");
            assert!(!line.contains('\n'), "{line}");
            assert!(!line.contains(SECRET), "{line}");
            assert!(!format!("{error:?}").contains(SECRET), "{error:?}");
        }
        let line = PgUrl::parse(&format!("postgres://u:{SECRET}@h:notaport/x"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            line,
            "store.url: not a valid postgres:// URL: postgres://u@h:notaport/x: \
             invalid connection string: invalid value for option `port`"
        );
        let line = PgUrl::parse("mysql://root@db/x").unwrap_err().to_string();
        assert!(
            line.starts_with("store.url: not a postgres:// URL: mysql://root@db/x"),
            "{line}"
        );
    }

    #[test]
    fn the_environment_wins_over_the_file_and_the_file_over_the_default() {
        let home = home();
        let (location, source) = locate_from(home.path(), None).unwrap();
        assert_eq!(location, Location::Sqlite(home.path().join("corral.db")));
        assert_eq!(source, Source::Default);
        assert_eq!(
            location.to_string(),
            home.path().join("corral.db").display().to_string()
        );
        write(home.path(), "store.url = postgres://file@h/x\n", 0o600);
        let (location, source) = locate_from(home.path(), None).unwrap();
        assert_eq!(location.to_string(), "postgres://file@h/x");
        assert_eq!(source, Source::File);
        let (location, source) = locate_from(home.path(), Some("postgres://env@h/x")).unwrap();
        assert_eq!(location.to_string(), "postgres://env@h/x");
        assert_eq!(source, Source::Env);
        // A bad variable names the variable; a bad file names the file and its line.
        let line = locate_from(home.path(), Some("nope"))
            .unwrap_err()
            .to_string();
        assert!(
            line.starts_with("CORRAL_STORE_URL: not a postgres:// URL"),
            "{line}"
        );
        write(
            home.path(),
            "# mine\n\nstore.url = postgres://h:x/y\n",
            0o600,
        );
        let line = locate_from(home.path(), None).unwrap_err().to_string();
        assert!(
            line.contains("config line 3: store.url: not a valid"),
            "{line}"
        );
    }

    #[test]
    fn a_round_trip_keeps_comments_and_blank_lines() {
        let home = home();
        let original =
            "# where the store is\n\n  # indented comment\nstore.url = postgres://a@h/x\n# end\n";
        write(home.path(), original, 0o644);
        let mut config = HomeConfig::load(home.path()).unwrap();
        assert_eq!(config.get(STORE_URL), Some("postgres://a@h/x"));
        config.set(STORE_URL, "postgres://b@h/y").unwrap();
        config.save(home.path()).unwrap();
        let saved = std::fs::read_to_string(config_path(home.path())).unwrap();
        assert_eq!(
            saved,
            original.replace(
                "store.url = postgres://a@h/x",
                "store.url = postgres://b@h/y"
            )
        );
        let mode = std::fs::metadata(config_path(home.path())).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mut config = HomeConfig::load(home.path()).unwrap();
        assert!(config.unset(STORE_URL));
        assert!(!config.unset(STORE_URL));
        config.save(home.path()).unwrap();
        let saved = std::fs::read_to_string(config_path(home.path())).unwrap();
        assert_eq!(
            saved,
            "# where the store is\n\n  # indented comment\n# end\n"
        );
        // Nothing but the file itself was left in the home.
        let names: Vec<String> = std::fs::read_dir(home.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["config".to_string()]);
    }

    #[test]
    fn an_absent_file_is_empty_and_a_set_appends() {
        let home = home();
        let mut config = HomeConfig::load(home.path()).unwrap();
        assert_eq!(config.get(STORE_URL), None);
        assert!(!config.changed());
        config.set(STORE_URL, "postgres://a@h/x").unwrap();
        assert!(config.set("store.urll", "x").is_err());
        assert!(config.set(STORE_URL, "a\nb").is_err());
        config.save(home.path()).unwrap();
        let saved = std::fs::read_to_string(config_path(home.path())).unwrap();
        assert_eq!(saved, "store.url = postgres://a@h/x\n");
    }

    #[test]
    fn unknown_keys_and_bad_lines_are_refused_with_their_line() {
        let home = home();
        for (text, expected) in [
            (
                "# ok\nstore.uri = x\n",
                "line 2: unknown key 'store.uri' (known: store.url)",
            ),
            ("just words\n", "line 1: expected `key = value`"),
            (
                "store.url = postgres://h/x\nstore.url = postgres://h/y\n",
                "line 2: 'store.url' is given again (first on line 1)",
            ),
            ("store.url =\n", "line 1: 'store.url' has no value"),
        ] {
            write(home.path(), text, 0o600);
            let line = HomeConfig::load(home.path()).unwrap_err().to_string();
            assert!(line.contains(expected), "{line}");
            assert!(line.contains(&config_path(home.path()).display().to_string()));
        }
    }

    #[test]
    fn unsafe_files_are_refused() {
        let home = home();
        let path = write(home.path(), "store.url = postgres://a@h/x\n", 0o664);
        let line = HomeConfig::load(home.path()).unwrap_err().to_string();
        assert!(
            line.contains("is refused: its mode 0664 lets others write it"),
            "{line}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        HomeConfig::load(home.path()).unwrap();
        // A password makes 0600 the rule; the line never shows it.
        write(
            home.path(),
            &format!("store.url = postgres://a:{SECRET}@h/x\n"),
            0o640,
        );
        let line = HomeConfig::load(home.path()).unwrap_err().to_string();
        assert!(
            line.contains("carries a password, so its mode must be 0600, not 0640"),
            "{line}"
        );
        assert!(!line.contains(SECRET));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        HomeConfig::load(home.path()).unwrap();
        // A link is neither read nor written through.
        std::fs::remove_file(&path).unwrap();
        let target = home.path().join("elsewhere");
        std::fs::write(&target, "store.url = postgres://a@h/x\n").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let line = HomeConfig::load(home.path()).unwrap_err().to_string();
        assert!(line.contains("is a symbolic link"), "{line}");
        let mut config = HomeConfig::parse(path.clone(), "").unwrap();
        config.set(STORE_URL, "postgres://b@h/x").unwrap();
        assert!(config.save(home.path()).is_err());
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "store.url = postgres://a@h/x\n"
        );
        // A directory at the path.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let line = HomeConfig::load(home.path()).unwrap_err().to_string();
        assert!(line.contains("is not a regular file"), "{line}");
    }

    #[test]
    fn another_users_file_is_refused() {
        // Only root can make a file of another uid here.
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let home = home();
        let path = write(home.path(), "store.url = postgres://a@h/x\n", 0o600);
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        let line = HomeConfig::load(home.path()).unwrap_err().to_string();
        assert!(line.contains("its owner is uid 65534, not you"), "{line}");
        let config = HomeConfig::parse(path.clone(), "").unwrap();
        assert!(config.save(home.path()).is_err());
    }

    #[test]
    fn debug_of_a_config_shows_no_value() {
        let config = HomeConfig::parse(
            "/h/config".into(),
            &format!("store.url = postgres://a:{SECRET}@h/x"),
        )
        .unwrap();
        let debug = format!("{config:?}");
        assert!(!debug.contains(SECRET), "{debug}");
        assert!(debug.contains("store.url"));
    }
}
