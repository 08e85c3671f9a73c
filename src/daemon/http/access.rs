//! Who may use the HTTP API: the token, login sessions, the cookie, CSRF, Host and Origin.
//!
//! - The secret is `HOME/http.token` (hex, mode 0600), made at the daemon's first start
//!   ([`ensure_token`]); `corral web --rotate-token` replaces it ([`rotate_token`]: a new file
//!   renamed over the old). The daemon notices a replaced file by its identity (inode, size,
//!   mtime), checked on each request (one `stat`), reads the new token and forgets every
//!   login: browsers are logged out. A file that is not ours (another owner, a symlink, not a
//!   regular file, readable by others) is refused, never read or replaced.
//! - `GET /login?code=C` with a single-use code (`http.login_code`, what `corral web --open`
//!   hands the browser: valid [`LOGIN_CODE_LIFE`], once) or `GET /login?token=T` makes a
//!   login: a random cookie value (`corral_session`, HttpOnly, SameSite=Strict, Path=/) and a
//!   CSRF token of its own. Logins are kept in `HOME/http.logins` (0600, beside the token and
//!   as secret), so a restarted daemon knows them: a browser stays logged in across a
//!   `corral daemon restart` or an upgrade. Logins unused for [`LOGIN_IDLE`] expire (the time
//!   of last use is written to the file at most once a [`USE_NOTED_EVERY`]); at most
//!   [`MAX_LOGINS`] are kept (the least recently used goes first). A new token forgets them
//!   all, the file too. A logins file that is not ours is neither read nor written.
//! - API requests carry the cookie or `Authorization: Bearer TOKEN` (scripts). A write
//!   (POST, PUT, PATCH, DELETE) made with the cookie also needs `X-CSRF-Token` equal to its
//!   login's CSRF token; the page reads it from the meta tag the server writes into it.
//! - The Host header must name the server as a browser on this machine does (the listen
//!   address, `localhost:PORT`, `127.0.0.1:PORT`, `[::1]:PORT`): a page of another site whose
//!   name was made to resolve to 127.0.0.1 (DNS rebinding) sends its own name and is refused.
//!   The WebSocket upgrade also checks Origin (absent, or `http://` and an allowed host):
//!   browsers do not apply the same-origin rule to WebSockets. No CORS header is ever sent.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// The token's file name in the home.
pub const TOKEN_FILE: &str = "http.token";

/// The logins' file name in the home.
pub const LOGINS_FILE: &str = "http.logins";

/// How stale the time of a login's last use in [`LOGINS_FILE`] may get before it is written
/// again: a login used every day is written once a day, not at every request.
pub const USE_NOTED_EVERY: Duration = Duration::from_secs(3600);

/// The login cookie's name.
pub const COOKIE: &str = "corral_session";

/// The header a cookie-authenticated write carries.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// A login unused this long is forgotten.
pub const LOGIN_IDLE: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most logins kept at once.
pub const MAX_LOGINS: usize = 256;

/// Random bytes in a token, a cookie value, a CSRF token (written as hex).
const SECRET_BYTES: usize = 32;

/// The longest token file read (a token is 64 hex digits).
const MAX_TOKEN_FILE: u64 = 1024;

/// The longest logins file read: [`MAX_LOGINS`] lines of two secrets and a time.
const MAX_LOGINS_FILE: u64 = MAX_LOGINS as u64 * 160;

/// `bytes` random bytes from the kernel, as lower-case hex.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buffer = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buffer)?;
    Ok(buffer.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// The token file of a home.
pub fn token_path(home: &Path) -> PathBuf {
    home.join(TOKEN_FILE)
}

/// What identifies one version of the token file: a replaced file differs in one of these.
/// Its owner and mode are part of it: a token made readable by others (a `chmod`, which
/// changes neither its content nor its mtime) is read again, refused, and no longer honoured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    size: u64,
    modified_ns: i128,
    owner: u32,
    mode: u32,
}

impl Stamp {
    fn of(metadata: &std::fs::Metadata) -> Stamp {
        Stamp {
            inode: metadata.ino(),
            size: metadata.size(),
            modified_ns: metadata.mtime() as i128 * 1_000_000_000 + metadata.mtime_nsec() as i128,
            owner: metadata.uid(),
            mode: metadata.mode(),
        }
    }
}

/// Why a file at the token's path is not one we read.
fn unsafe_reason(metadata: &std::fs::Metadata, longest: u64) -> Option<String> {
    let uid = nix::unistd::geteuid().as_raw();
    if !metadata.file_type().is_file() {
        return Some("it is not a regular file".into());
    }
    if metadata.uid() != uid {
        return Some(format!("it belongs to uid {}, not {uid}", metadata.uid()));
    }
    if metadata.mode() & 0o077 != 0 {
        return Some(format!(
            "its mode is {:04o}; it must be 0600",
            metadata.mode() & 0o7777
        ));
    }
    if metadata.size() > longest {
        return Some(format!("it is {} bytes long", metadata.size()));
    }
    None
}

/// Reads the token file: the token and its stamp.
fn read_token(path: &Path) -> Result<(String, Stamp), String> {
    let refused = |why: String| {
        format!(
            "{} is not corral's token file ({why}); remove it and run `corral web --rotate-token`",
            path.display()
        )
    };
    let (text, stamp) = read_ours(path, MAX_TOKEN_FILE, refused)?;
    let token = text.trim().to_string();
    if token.len() < 32 || !token.bytes().all(|byte| byte.is_ascii_alphanumeric()) {
        return Err(refused("it holds no token".into()));
    }
    Ok((token, stamp))
}

/// Reads a private file of ours, `longest` bytes at most: its text and its stamp. Never
/// follows a symlink, and never opens what is not a regular file of ours (a FIFO would block
/// an open for reading): the path's own metadata is checked first, the file opened without
/// blocking and without following a link, and checked again once open (it must be the file
/// checked). `refused` words why a file is not ours.
fn read_ours(
    path: &Path,
    longest: u64,
    refused: impl Fn(String) -> String,
) -> Result<(String, Stamp), String> {
    let cannot = |error: std::io::Error| format!("cannot read {}: {error}", path.display());
    let before = std::fs::symlink_metadata(path).map_err(cannot)?;
    if before.file_type().is_symlink() {
        return Err(refused("it is a symbolic link".into()));
    }
    if let Some(why) = unsafe_reason(&before, longest) {
        return Err(refused(why));
    }
    let flags = nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(code) if code == nix::errno::Errno::ELOOP as i32 => {
                refused("it is a symbolic link".into())
            }
            _ => cannot(error),
        })?;
    let metadata = file.metadata().map_err(cannot)?;
    if let Some(why) = unsafe_reason(&metadata, longest) {
        return Err(refused(why));
    }
    if metadata.ino() != before.ino() || metadata.dev() != before.dev() {
        return Err(refused("it was replaced while being read".into()));
    }
    let mut text = String::new();
    (&mut file)
        .take(longest)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    Ok((text, Stamp::of(&metadata)))
}

/// Writes a new token: a file of ours (0600 from its creation) renamed over the path.
fn write_token(path: &Path) -> Result<String, String> {
    let token =
        random_hex(SECRET_BYTES).map_err(|error| format!("cannot make a token: {error}"))?;
    crate::home::write_private(path, &format!("{token}\n"))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    Ok(token)
}

/// The home's token, made if there is none yet.
pub fn ensure_token(home: &Path) -> Result<String, String> {
    let path = token_path(home);
    match std::fs::symlink_metadata(&path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => write_token(&path),
        _ => read_token(&path).map(|(token, _)| token),
    }
}

/// Replaces the home's token (a file that is not ours is refused, not replaced): every login
/// made with the old one ends at its next request.
pub fn rotate_token(home: &Path) -> Result<String, String> {
    let path = token_path(home);
    match std::fs::symlink_metadata(&path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        Ok(metadata) => {
            if let Some(why) = unsafe_reason(&metadata, MAX_TOKEN_FILE).or_else(|| {
                metadata
                    .file_type()
                    .is_symlink()
                    .then(|| "it is a symbolic link".to_string())
            }) {
                return Err(format!(
                    "{} is not corral's token file ({why}); remove it first",
                    path.display()
                ));
            }
        }
    }
    let token = write_token(&path)?;
    // The logins made with the old token end with it, whether a daemon runs or not.
    let logins = home.join(LOGINS_FILE);
    if std::fs::symlink_metadata(&logins)
        .is_ok_and(|metadata| unsafe_reason(&metadata, MAX_LOGINS_FILE).is_none())
    {
        let _ = std::fs::remove_file(&logins);
    }
    Ok(token)
}

/// How long a login code is valid (`http.login_code`).
pub const LOGIN_CODE_LIFE: Duration = Duration::from_secs(60);

/// The most login codes waiting at once (the oldest is dropped past it).
const MAX_LOGIN_CODES: usize = 64;

/// Login codes not yet used: each logs one browser in, once, within [`LOGIN_CODE_LIFE`].
/// Kept by the process (one daemon a process), as the daemon's method makes them on its main
/// thread and the workers spend them.
static LOGIN_CODES: Mutex<Vec<(String, Instant)>> = Mutex::new(Vec::new());

/// A new single-use login code (`GET /login?code=CODE`).
pub fn new_login_code() -> std::io::Result<String> {
    let code = random_hex(SECRET_BYTES)?;
    let mut codes = LOGIN_CODES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let now = Instant::now();
    codes.retain(|(_, made)| now.duration_since(*made) < LOGIN_CODE_LIFE);
    if codes.len() >= MAX_LOGIN_CODES {
        codes.remove(0);
    }
    codes.push((code.clone(), now));
    Ok(code)
}

/// Spends a login code: whether it was a live one (it is gone either way).
pub fn take_login_code(code: &str) -> bool {
    let mut codes = LOGIN_CODES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let now = Instant::now();
    codes.retain(|(_, made)| now.duration_since(*made) < LOGIN_CODE_LIFE);
    // Every code is compared (in constant time), so the answer's time tells nothing.
    let found = codes
        .iter()
        .fold(false, |found, (known, _)| found | same_secret(known, code));
    if found {
        codes.retain(|(known, _)| !same_secret(known, code));
    }
    found
}

/// Compares secrets in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |differ, (x, y)| differ | (x ^ y))
            == 0
}

/// A login: its CSRF token, when it was last used, and when that was last written down.
#[derive(Clone)]
struct Login {
    csrf: String,
    used: SystemTime,
    noted: SystemTime,
}

impl Login {
    fn idle(&self, now: SystemTime) -> Duration {
        now.duration_since(self.used).unwrap_or_default()
    }
}

/// The logins of a logins file: `COOKIE CSRF USED_MS` lines (what does not read is left out,
/// as are expired ones).
fn parse_logins(text: &str, now: SystemTime) -> HashMap<String, Login> {
    let secret = |word: &str| word.len() >= 32 && word.bytes().all(|byte| byte.is_ascii_hexdigit());
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let (cookie, csrf, used) = (words.next()?, words.next()?, words.next()?);
            let used = SystemTime::UNIX_EPOCH + Duration::from_millis(used.parse().ok()?);
            let login = Login {
                csrf: csrf.to_string(),
                used,
                noted: used,
            };
            (secret(cookie) && secret(csrf) && login.idle(now) < LOGIN_IDLE)
                .then(|| (cookie.to_string(), login))
        })
        .take(MAX_LOGINS)
        .collect()
}

/// The text of a logins file.
fn format_logins(logins: &HashMap<String, Login>) -> String {
    logins
        .iter()
        .map(|(cookie, login)| {
            let used = login
                .used
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            format!("{cookie} {} {used}\n", login.csrf)
        })
        .collect()
}

struct Inner {
    /// `None`: the token file went away or is not ours; nothing authenticates by token then.
    token: Option<String>,
    stamp: Option<Stamp>,
    logins: HashMap<String, Login>,
}

/// How a request is authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authenticated {
    /// A login cookie, whose CSRF token a write must carry.
    Cookie { csrf: String },
    /// `Authorization: Bearer TOKEN`.
    Bearer,
}

/// The token and the logins, shared by the workers.
pub struct Access {
    path: PathBuf,
    /// `HOME/http.logins`.
    logins_path: PathBuf,
    inner: Mutex<Inner>,
    /// Held while the logins file is written: one writer at a time, each writing the logins
    /// as they are once it holds this (so the last write has every change before it).
    saving: Mutex<()>,
}

impl Access {
    /// Reads (or makes) the home's token, and the logins an earlier daemon kept.
    pub fn open(home: &Path) -> Result<Access, String> {
        ensure_token(home)?;
        let path = token_path(home);
        let (token, stamp) = read_token(&path)?;
        let logins_path = home.join(LOGINS_FILE);
        let logins = match std::fs::symlink_metadata(&logins_path) {
            Err(_) => HashMap::new(),
            Ok(_) => {
                let refused = |why: String| {
                    format!(
                        "{} is not corral's logins file ({why}); browsers log in again",
                        logins_path.display()
                    )
                };
                match read_ours(&logins_path, MAX_LOGINS_FILE, refused) {
                    Ok((text, _)) => parse_logins(&text, SystemTime::now()),
                    Err(error) => {
                        tracing::warn!("http: {error}");
                        HashMap::new()
                    }
                }
            }
        };
        Ok(Access {
            path,
            logins_path,
            inner: Mutex::new(Inner {
                token: Some(token),
                stamp: Some(stamp),
                logins,
            }),
            saving: Mutex::new(()),
        })
    }

    /// Writes the logins as they are now to the logins file, unless a file there is not
    /// ours. Not under the state's lock: a request never waits on this write.
    fn save_logins(&self) {
        let _saving = self
            .saving
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let text = format_logins(
            &self
                .inner
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .logins,
        );
        if let Ok(metadata) = std::fs::symlink_metadata(&self.logins_path) {
            if metadata.file_type().is_symlink() {
                return tracing::warn!(
                    "http: {} is a symbolic link; logins are not kept",
                    self.logins_path.display()
                );
            }
            if let Some(why) = unsafe_reason(&metadata, MAX_LOGINS_FILE) {
                return tracing::warn!(
                    "http: {} is not corral's ({why}); logins are not kept",
                    self.logins_path.display()
                );
            }
        }
        if let Err(error) = crate::home::write_private(&self.logins_path, &text) {
            tracing::warn!(%error, "http: the logins were not kept; a restart logs browsers out");
        }
    }

    /// The state, with the token file looked at again: a replaced file is read, and its
    /// logins forgotten. The file is looked at and read before the lock is taken (no file
    /// I/O under it: a request never waits on another's read).
    fn current(&self) -> std::sync::MutexGuard<'_, Inner> {
        let (inner, forgot) = self.current_noting();
        if forgot {
            drop(inner);
            self.save_logins();
            return self.current_noting().0;
        }
        inner
    }

    /// [`Access::current`], and whether it forgot the logins (a replaced token).
    fn current_noting(&self) -> (std::sync::MutexGuard<'_, Inner>, bool) {
        let lock = || {
            self.inner
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        };
        let stamp = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|metadata| Stamp::of(&metadata));
        if stamp == lock().stamp {
            return (lock(), false);
        }
        let read = read_token(&self.path);
        let mut inner = lock();
        let (token, stamp) = match read {
            Ok((token, stamp)) => (Some(token), Some(stamp)),
            Err(error) => {
                if inner.stamp != stamp || inner.token.is_some() {
                    tracing::warn!("http: {error}; no token is valid until it is replaced");
                }
                (None, stamp)
            }
        };
        if inner.stamp != stamp || inner.token != token {
            if token.is_some() {
                tracing::info!("http: the token was replaced; every browser is logged out");
            }
            inner.token = token;
            inner.stamp = stamp;
            let forgot = !inner.logins.is_empty();
            inner.logins.clear();
            return (inner, forgot);
        }
        (inner, false)
    }

    /// Whether `token` is the token.
    pub fn is_token(&self, token: &str) -> bool {
        self.current()
            .token
            .as_deref()
            .is_some_and(|current| same_secret(current, token))
    }

    /// Makes a login: its cookie value and CSRF token.
    pub fn login(&self) -> Result<(String, String), String> {
        let cookie = random_hex(SECRET_BYTES).map_err(|error| error.to_string())?;
        let csrf = random_hex(SECRET_BYTES).map_err(|error| error.to_string())?;
        let mut inner = self.current();
        let now = SystemTime::now();
        inner.logins.retain(|_, login| login.idle(now) < LOGIN_IDLE);
        if inner.logins.len() >= MAX_LOGINS {
            if let Some(oldest) = inner
                .logins
                .iter()
                .min_by_key(|(_, login)| login.used)
                .map(|(cookie, _)| cookie.clone())
            {
                inner.logins.remove(&oldest);
            }
        }
        inner.logins.insert(
            cookie.clone(),
            Login {
                csrf: csrf.clone(),
                used: now,
                noted: now,
            },
        );
        drop(inner);
        self.save_logins();
        Ok((cookie, csrf))
    }

    /// The CSRF token of the login a cookie value names, if it is a live one.
    pub fn login_of(&self, cookie: &str) -> Option<String> {
        let mut inner = self.current();
        let now = SystemTime::now();
        let (csrf, stale) = match inner.logins.get_mut(cookie) {
            None => return None,
            Some(login) if login.idle(now) >= LOGIN_IDLE => {
                inner.logins.remove(cookie);
                return None;
            }
            Some(login) => {
                login.used = now;
                let stale = now.duration_since(login.noted).unwrap_or_default() >= USE_NOTED_EVERY;
                if stale {
                    login.noted = now;
                }
                (login.csrf.clone(), stale)
            }
        };
        drop(inner);
        if stale {
            self.save_logins();
        }
        Some(csrf)
    }

    /// How a request with these headers is authenticated, if it is: a live login's cookie, or
    /// the bearer token.
    pub fn authenticate(
        &self,
        headers: &actix_web::http::header::HeaderMap,
    ) -> Option<Authenticated> {
        if let Some(token) = headers
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
        {
            return self.is_token(token.trim()).then_some(Authenticated::Bearer);
        }
        let cookie = cookie_value(headers, COOKIE)?;
        self.login_of(&cookie)
            .map(|csrf| Authenticated::Cookie { csrf })
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie_value(headers: &actix_web::http::header::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(actix_web::http::header::COOKIE)
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim_matches('"').to_string())
}

/// The `Set-Cookie` value of a login.
pub fn login_cookie(value: &str) -> String {
    format!("{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/")
}

/// Whether a Host header names this server as a browser on this machine would.
pub fn allowed_host(host: &str, listen: std::net::SocketAddr) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let port = listen.port();
    let names = [
        listen.to_string(),
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
    ];
    // On port 80 a browser sends the name alone.
    let bare = port == 80 && ["localhost", "127.0.0.1", "[::1]"].contains(&host.as_str());
    bare || names.contains(&host)
}

/// Whether a WebSocket's Origin is this server's (absent: not a browser page).
pub fn allowed_origin(origin: Option<&str>, listen: std::net::SocketAddr) -> bool {
    match origin {
        None => true,
        Some(origin) => origin
            .strip_prefix("http://")
            .is_some_and(|host| allowed_host(host, listen)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn hosts_and_origins_of_this_machine_only() {
        let listen: std::net::SocketAddr = "127.0.0.1:4242".parse().unwrap();
        for host in [
            "127.0.0.1:4242",
            "localhost:4242",
            "LOCALHOST:4242",
            "[::1]:4242",
        ] {
            assert!(allowed_host(host, listen), "{host}");
        }
        for host in [
            "evil.example:4242",
            "127.0.0.1:4243",
            "localhost",
            "127.0.0.1",
            "",
        ] {
            assert!(!allowed_host(host, listen), "{host}");
        }
        let eighty: std::net::SocketAddr = "127.0.0.1:80".parse().unwrap();
        for host in ["localhost", "127.0.0.1", "[::1]", "localhost:80"] {
            assert!(allowed_host(host, eighty), "{host}");
            assert!(!allowed_host(host, listen), "{host}");
        }
        assert!(allowed_origin(Some("http://localhost"), eighty));
        assert!(!allowed_host("evil.example", eighty));
        assert!(allowed_origin(None, listen));
        assert!(allowed_origin(Some("http://localhost:4242"), listen));
        assert!(!allowed_origin(Some("https://localhost:4242"), listen));
        assert!(!allowed_origin(Some("http://evil.example:4242"), listen));
        assert!(!allowed_origin(Some("null"), listen));
    }

    #[test]
    fn the_token_file_is_made_private_and_a_stranger_file_is_refused() {
        let home = tempfile::tempdir().unwrap();
        let token = ensure_token(home.path()).unwrap();
        assert_eq!(token.len(), 64);
        let metadata = std::fs::metadata(token_path(home.path())).unwrap();
        assert_eq!(metadata.mode() & 0o777, 0o600);
        assert_eq!(ensure_token(home.path()).unwrap(), token, "kept");
        let rotated = rotate_token(home.path()).unwrap();
        assert_ne!(rotated, token);
        // Readable by others: refused, not read, not replaced.
        std::fs::set_permissions(
            token_path(home.path()),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let error = ensure_token(home.path()).unwrap_err();
        assert!(error.contains("mode is 0644"), "{error}");
        assert!(rotate_token(home.path()).is_err());
        // A symlink is never followed.
        std::fs::remove_file(token_path(home.path())).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", token_path(home.path())).unwrap();
        let error = ensure_token(home.path()).unwrap_err();
        assert!(error.contains("symbolic link"), "{error}");
        assert!(rotate_token(home.path()).is_err());
    }

    /// A token that others became able to read (a `chmod`, which changes neither its content
    /// nor its mtime) is no longer honoured by a running daemon; made private again, it is.
    #[test]
    fn a_running_daemon_stops_honouring_a_token_made_readable_by_others() {
        let home = tempfile::tempdir().unwrap();
        let access = Access::open(home.path()).unwrap();
        let token = ensure_token(home.path()).unwrap();
        assert!(access.is_token(&token));
        let chmod = |mode| {
            std::fs::set_permissions(
                token_path(home.path()),
                std::fs::Permissions::from_mode(mode),
            )
            .unwrap()
        };
        chmod(0o644);
        assert!(
            !access.is_token(&token),
            "honoured while others can read it"
        );
        chmod(0o600);
        assert!(access.is_token(&token));
    }

    #[test]
    fn a_fifo_in_the_token_s_place_is_refused_without_waiting() {
        let home = tempfile::tempdir().unwrap();
        let access = Access::open(home.path()).unwrap();
        let token = ensure_token(home.path()).unwrap();
        std::fs::remove_file(token_path(home.path())).unwrap();
        nix::unistd::mkfifo(
            &token_path(home.path()),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        // No writer ever opens the FIFO: an open for reading would block forever.
        let error = ensure_token(home.path()).unwrap_err();
        assert!(error.contains("not a regular file"), "{error}");
        assert!(!access.is_token(&token));
        assert!(!access.is_token(&token), "asked again");
        assert!(Access::open(home.path()).is_err());
        // A FIFO the path's check missed (swapped in after it) does not block the open.
        let fifo = home.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags((nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits())
            .open(&fifo)
            .unwrap();
        assert!(unsafe_reason(&opened.metadata().unwrap(), MAX_TOKEN_FILE).is_some());
    }

    #[test]
    fn a_login_code_is_good_once() {
        let code = new_login_code().unwrap();
        assert_eq!(code.len(), 64);
        assert!(!take_login_code("nope"));
        assert!(take_login_code(&code));
        assert!(!take_login_code(&code), "spent");
    }

    #[test]
    fn a_replaced_token_logs_every_browser_out() {
        let home = tempfile::tempdir().unwrap();
        let access = Access::open(home.path()).unwrap();
        let token = ensure_token(home.path()).unwrap();
        assert!(access.is_token(&token));
        assert!(!access.is_token("0123"));
        let (cookie, csrf) = access.login().unwrap();
        assert_eq!(access.login_of(&cookie), Some(csrf));
        let rotated = rotate_token(home.path()).unwrap();
        assert!(!access.is_token(&token));
        assert!(access.is_token(&rotated));
        assert_eq!(access.login_of(&cookie), None);
        // Nor does a daemon started since know it.
        assert_eq!(Access::open(home.path()).unwrap().login_of(&cookie), None);
    }

    #[test]
    fn a_login_outlives_its_daemon_and_a_rotation_ends_it() {
        let home = tempfile::tempdir().unwrap();
        let access = Access::open(home.path()).unwrap();
        let (cookie, csrf) = access.login().unwrap();
        let file = home.path().join(LOGINS_FILE);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the logins file is private");
        drop(access);
        // The next daemon knows the login, with its CSRF token.
        let next = Access::open(home.path()).unwrap();
        assert_eq!(next.login_of(&cookie), Some(csrf));
        assert_eq!(next.login_of(&"f".repeat(64)), None);
        drop(next);
        // A token rotated while no daemon runs ends it too.
        rotate_token(home.path()).unwrap();
        assert!(!file.exists());
        assert_eq!(Access::open(home.path()).unwrap().login_of(&cookie), None);
    }

    #[test]
    fn expired_and_malformed_logins_are_not_read() {
        let now = SystemTime::now();
        let secret = |c: char| c.to_string().repeat(64);
        let old = now - LOGIN_IDLE - Duration::from_secs(1);
        let ms = |at: SystemTime| {
            at.duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        };
        let text = format!(
            "{} {} {}\n{} {} {}\nnot a login\n{} short {}\n",
            secret('a'),
            secret('b'),
            ms(now),
            secret('c'),
            secret('d'),
            ms(old),
            secret('e'),
            ms(now),
        );
        let logins = parse_logins(&text, now);
        assert_eq!(logins.keys().collect::<Vec<_>>(), [&secret('a')]);
        // What is written reads back.
        assert_eq!(parse_logins(&format_logins(&logins), now).len(), 1);
    }

    #[test]
    fn a_logins_file_that_is_not_ours_is_neither_read_nor_written() {
        let home = tempfile::tempdir().unwrap();
        let file = home.path().join(LOGINS_FILE);
        let stranger = format!("{} {} {}\n", "a".repeat(64), "b".repeat(64), u64::MAX / 2);
        std::fs::write(&file, &stranger).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let access = Access::open(home.path()).unwrap();
        assert_eq!(access.login_of(&"a".repeat(64)), None, "not read");
        access.login().unwrap();
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            stranger,
            "not written"
        );
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o644
        );
    }
}
