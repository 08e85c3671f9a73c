//! corral's home: the directory that holds the store (and later the daemon's socket and lock).
//!
//! Resolution: `--home DIR`, else `CORRAL_HOME`, else `$XDG_STATE_HOME/corral`, else
//! `~/.local/state/corral`. The default home is created on first use; a home named explicitly
//! must already exist, because a typo in `--home` should fail loudly, not start a new history
//! somewhere unexpected.
//!
//! A home is private: it holds every prompt, answer and argv. It is the owner's alone (0700),
//! and every file corral makes in it is 0600 from its creation, whatever the umask. A home
//! others can only read is tightened, saying so once. Refused: a home that belongs to another
//! user, one others can write to (anyone could have put a store or a config there), and a
//! symbolic link to a directory others can open (tightening it would change a directory
//! somebody shares). The store's own files are tightened once they are known to be ours
//! (`store::make_private`). The HTTP token is never tightened: a secret others could read is
//! spent, so the daemon stops honouring it (`http::access`); `config` and `store.id` are
//! refused by their readers when others could change them.

use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of the home and of every directory corral makes in it.
pub const PRIVATE_DIR: u32 = 0o700;

/// The mode of every file corral makes in the home.
pub const PRIVATE_FILE: u32 = 0o600;

/// The home's own files that are tightened when found loose: the daemon's. Not the store's
/// (tightened once known to be ours), and not those whose content decides what corral trusts:
/// the token, `config` and `store.id` are refused by their readers when others could read or
/// change them, since tightening would bless what another user may have written.
const PRIVATE_FILES: &[&str] = &["daemon.lock", "daemon.pid", "daemon.log"];

/// The home's own directories, likewise.
const PRIVATE_DIRS: &[&str] = &["spill", "uploads", "drivers", "runs"];

/// Whether a supervisor (a daemon, or a program embedding corral) ever ran in `home`: it left
/// its lock, its pid or log, or a directory of its own. A supervisor opens the store first, so
/// such a home held one: an empty store file there was emptied, not just created.
pub fn has_served(home: &Path) -> bool {
    PRIVATE_FILES
        .iter()
        .chain(PRIVATE_DIRS)
        .any(|name| std::fs::symlink_metadata(home.join(name)).is_ok())
}

/// Where the home came from, which decides whether corral may create it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HomeSource {
    /// `--home` or `CORRAL_HOME`.
    Explicit,
    /// The XDG default.
    Default,
}

/// The home directory corral would use, and where that choice came from.
pub fn locate(flag: Option<&Path>) -> Option<(PathBuf, HomeSource)> {
    if let Some(dir) = flag.filter(|dir| !dir.as_os_str().is_empty()) {
        return Some((dir.to_path_buf(), HomeSource::Explicit));
    }
    if let Some(dir) = std::env::var_os(crate::env::HOME).filter(|dir| !dir.is_empty()) {
        return Some((PathBuf::from(dir), HomeSource::Explicit));
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|dir| !dir.is_empty())
                .map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some((state.join("corral"), HomeSource::Default))
}

/// Makes sure the home is a usable, private directory, creating the default one (0700), and
/// says on stderr what it tightened ([`secure`]).
pub fn prepare(dir: &Path, source: &HomeSource) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(format!("home {} is not a directory", dir.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => match source {
            HomeSource::Explicit => {
                return Err(format!(
                    "home {} does not exist (create it, or unset CORRAL_HOME / --home)",
                    dir.display()
                ))
            }
            HomeSource::Default => create_private_dir(dir, true)
                .map_err(|error| format!("cannot create home {}: {error}", dir.display()))?,
        },
        Err(error) => return Err(format!("home {}: {error}", dir.display())),
    }
    for note in secure(dir)? {
        say!("corral: {note}");
    }
    Ok(())
}

/// Why a home may not be used, if it may not: it belongs to another user, others can write
/// to it, or it is a symbolic link to a directory that others can open. Reads only.
pub fn refusal(dir: &Path) -> Option<String> {
    let link = std::fs::symlink_metadata(dir)
        .map(|meta| meta.file_type().is_symlink())
        .unwrap_or(false);
    let meta = std::fs::metadata(dir).ok()?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Some(format!(
            "home {} belongs to uid {}, not to you (uid {me}); corral keeps every prompt and \
             answer there, so it uses only a home of your own",
            dir.display(),
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "home {} can be written by others (mode {mode:04o}): anyone could have put a \
             store or config there; use a directory only you can write (chmod 0700 it if it \
             is yours and nobody else's)",
            dir.display()
        ));
    }
    if link && mode & 0o077 != 0 {
        return Some(format!(
            "home {} is a symbolic link to {}, which others can open (mode {mode:04o}); \
             point it at a directory only you can open",
            dir.display(),
            std::fs::canonicalize(dir)
                .unwrap_or_else(|_| dir.to_path_buf())
                .display()
        ));
    }
    None
}

/// Checks that the home is the user's own ([`refusal`]) and tightens what is looser than it
/// should be: the home to 0700, the home's own files to 0600 and directories to 0700 (only
/// those that are the user's: another's file is never touched). Returns a line for each
/// change, for the caller to say.
pub fn secure(dir: &Path) -> Result<Vec<String>, String> {
    if let Some(why) = refusal(dir) {
        return Err(why);
    }
    let mut notes = Vec::new();
    tighten(dir, PRIVATE_DIR, "home", &mut notes);
    for name in PRIVATE_FILES {
        tighten(&dir.join(name), PRIVATE_FILE, "file", &mut notes);
    }
    for name in PRIVATE_DIRS {
        tighten(&dir.join(name), PRIVATE_DIR, "directory", &mut notes);
    }
    Ok(notes)
}

/// Sets `path` to `mode` when it is the user's own file or directory (not a link) and others
/// may open it, and notes it. Anything else is left as it is.
pub fn tighten(path: &Path, mode: u32, what: &str, notes: &mut Vec<String>) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    let kind = meta.file_type();
    let ours = meta.uid() == nix::unistd::geteuid().as_raw();
    let old = meta.mode() & 0o7777;
    if !ours || !(kind.is_file() || kind.is_dir()) || old & 0o077 == 0 {
        return;
    }
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        Ok(()) => notes.push(format!(
            "made {what} {} private: {old:04o} → {mode:04o} (others could read it)",
            path.display()
        )),
        Err(error) => notes.push(format!(
            "cannot make {what} {} private ({old:04o}): {error}",
            path.display()
        )),
    }
}

/// Creates a directory of the home's, 0700 exactly whatever the umask (`recursive`: its
/// missing parents too, likewise private, as XDG asks of a state directory). An existing
/// directory is left as it is.
pub fn create_private_dir(dir: &Path, recursive: bool) -> std::io::Result<()> {
    match std::fs::DirBuilder::new()
        .recursive(recursive)
        .mode(PRIVATE_DIR)
        .create(dir)
    {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(error) => return Err(error),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.mode() & 0o777 != PRIVATE_DIR {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(PRIVATE_DIR))?;
    }
    Ok(())
}

/// Options that create a file of the home's: 0600 from its creation (the umask can only take
/// bits away), never through a symbolic link.
pub fn private_file() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    options
        .mode(PRIVATE_FILE)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits());
    options
}

/// Finds `--home DIR` / `--home=DIR` in a raw argv that clap refused to parse (`--help`, a
/// usage error), so that such an exec is still recorded in the right home. Stops at `--`.
pub fn scan_flag(argv: &[OsString]) -> Option<PathBuf> {
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        if text == "--" {
            break;
        }
        if text == "--home" {
            return args.next().map(PathBuf::from);
        }
        if let Some(value) = text.strip_prefix("--home=") {
            return Some(PathBuf::from(value));
        }
    }
    None
}

/// Writes `text` as the file at `path` (in the home): a new file, 0600 from its creation and
/// never through a link, renamed over the old one, so a reader sees the old file or the new
/// one whole. For the home's private files (`http.token`, `config`, `store.id`).
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("file");
    let temporary = path.with_file_name(format!("{name}.{}.new", std::process::id()));
    let written = (|| {
        let _ = std::fs::remove_file(&temporary);
        let mut file = private_file()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        // The mode given at creation is masked by the umask: make sure it is 0600 exactly.
        file.set_permissions(std::fs::Permissions::from_mode(PRIVATE_FILE))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn a_loose_home_and_its_files_are_made_private_and_others_left_alone() {
        let scratch = tempfile::tempdir().unwrap();
        let home = scratch.path().join("home");
        std::fs::create_dir(&home).unwrap();
        let chmod = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        chmod(&home, 0o755);
        for name in ["daemon.pid", "daemon.log", "http.token", "notes.txt"] {
            std::fs::write(home.join(name), "x").unwrap();
            chmod(&home.join(name), 0o644);
        }
        std::fs::create_dir(home.join("spill")).unwrap();
        chmod(&home.join("spill"), 0o755);
        let notes = secure(&home).unwrap();
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes[0].contains("0755 → 0700"), "{notes:?}");
        assert_eq!(mode(&home), 0o700);
        assert_eq!(mode(&home.join("daemon.pid")), 0o600);
        assert_eq!(mode(&home.join("daemon.log")), 0o600);
        assert_eq!(mode(&home.join("spill")), 0o700);
        // The token is refused where it is read, never tightened; a file corral does not
        // make is not corral's to change.
        assert_eq!(mode(&home.join("http.token")), 0o644);
        assert_eq!(mode(&home.join("notes.txt")), 0o644);
        assert!(secure(&home).unwrap().is_empty(), "said once");
    }

    #[test]
    fn a_link_to_a_directory_others_can_open_is_refused_and_a_private_one_used() {
        let scratch = tempfile::tempdir().unwrap();
        let shared = scratch.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = scratch.path().join("home");
        std::os::unix::fs::symlink(&shared, &link).unwrap();
        let error = secure(&link).unwrap_err();
        assert!(error.contains("symbolic link"), "{error}");
        assert_eq!(mode(&shared), 0o755, "left as it is");
        // Writable by others, linked or not: refused, never tightened.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        for home in [&link, &shared] {
            let error = secure(home).unwrap_err();
            assert!(error.contains("written by others"), "{error}");
        }
        assert_eq!(mode(&shared), 0o1777, "left as it is");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(secure(&link).unwrap().is_empty());
    }

    #[test]
    fn a_home_of_another_user_is_refused() {
        // `/` belongs to root; as root, a directory given to `nobody`.
        let scratch = tempfile::tempdir().unwrap();
        let dir = if nix::unistd::geteuid().is_root() {
            let dir = scratch.path().join("theirs");
            std::fs::create_dir(&dir).unwrap();
            nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
            dir
        } else {
            PathBuf::from("/")
        };
        let before = mode(&dir);
        let error = secure(&dir).unwrap_err();
        assert!(error.contains("not to you"), "{error}");
        assert_eq!(mode(&dir), before);
    }

    #[test]
    fn the_default_home_is_made_private_with_its_missing_parents() {
        let scratch = tempfile::tempdir().unwrap();
        let home = scratch.path().join("state/corral");
        prepare(&home, &HomeSource::Default).unwrap();
        assert_eq!(mode(&home), 0o700);
        assert_eq!(mode(&scratch.path().join("state")), 0o700);
    }

    #[test]
    fn a_private_file_is_0600_whatever_the_umask_leaves() {
        let scratch = tempfile::tempdir().unwrap();
        let path = scratch.path().join("f");
        write_private(&path, "x").unwrap();
        assert_eq!(mode(&path), 0o600);
        let link = scratch.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let opened = private_file().write(true).open(&link);
        assert!(opened.is_err(), "never through a link");
    }
}

// ---------------------------------------------------------------------------------------------
// The home's lock.

/// The lock's file name in the home.
pub const LOCK_FILE: &str = "daemon.lock";

/// The exclusive lock of a home's supervisor: one per home, whether it is a daemon or a
/// program embedding corral (`Corral::start` takes it, or is handed the daemon's). The daemon
/// takes it before it touches the socket and hands it to the supervisor it starts, which
/// holds it as long as it lives; the lock file names the holder's pid.
pub struct DaemonLock {
    /// The lock file, locked (`flock`, exclusive): dropping it unlocks (the lock also goes
    /// with the descriptor when the process exits).
    _file: nix::fcntl::Flock<std::fs::File>,
    /// The home, as the lock was taken for it (canonical when it could be made so).
    home: PathBuf,
}

/// Why the home's lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another supervisor holds it; `pid` is what the lock file says (`None`: unreadable).
    #[error(
        "{} is already served by a corral supervisor: pid {} holds {} (a corral daemon, or a \
         program embedding corral); stop it, or use another home",
        .home.display(),
        .pid.map(|pid| pid.to_string()).unwrap_or_else(|| "?".into()),
        .path.display()
    )]
    Held {
        home: PathBuf,
        path: PathBuf,
        pid: Option<u32>,
    },
    #[error("cannot lock {}: {error}", .path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl DaemonLock {
    /// Takes the lock, or says who holds it.
    pub fn acquire(home: &Path) -> Result<DaemonLock, String> {
        Self::try_acquire(home).map_err(|error| error.to_string())
    }

    /// Takes the lock, or says who holds it (with the holder's pid as the lock file says).
    pub fn try_acquire(home: &Path) -> Result<DaemonLock, LockError> {
        let path = home.join(LOCK_FILE);
        let io = |error| LockError::Io {
            path: path.clone(),
            error,
        };
        let file = private_file()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let mut file =
            match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
                Ok(locked) => locked,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    let holder = std::fs::read_to_string(&path).unwrap_or_default();
                    return Err(LockError::Held {
                        home: home.to_path_buf(),
                        path,
                        pid: holder.trim().parse().ok(),
                    });
                }
                Err((_, errno)) => return Err(io(std::io::Error::from(errno))),
            };
        use std::io::Write;
        file.set_len(0)
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .map_err(io)?;
        let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
        Ok(DaemonLock { _file: file, home })
    }

    /// The home this lock is for.
    pub fn home(&self) -> &Path {
        &self.home
    }
}
