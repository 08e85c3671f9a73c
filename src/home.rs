//! corral's home: the directory that holds the store (and later the daemon's socket and lock).
//!
//! Resolution: `--home DIR`, else `CORRAL_HOME`, else `$XDG_STATE_HOME/corral`, else
//! `~/.local/state/corral`. The default home is created on first use; a home named explicitly
//! must already exist, because a typo in `--home` should fail loudly, not start a new history
//! somewhere unexpected.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

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
    if let Some(dir) = std::env::var_os("CORRAL_HOME").filter(|dir| !dir.is_empty()) {
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

/// Makes sure the home is a usable directory, creating the default one.
pub fn prepare(dir: &Path, source: &HomeSource) -> Result<(), String> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!("home {} is not a directory", dir.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => match source {
            HomeSource::Explicit => Err(format!(
                "home {} does not exist (create it, or unset CORRAL_HOME / --home)",
                dir.display()
            )),
            HomeSource::Default => std::fs::create_dir_all(dir)
                .map_err(|error| format!("cannot create home {}: {error}", dir.display())),
        },
        Err(error) => Err(format!("home {}: {error}", dir.display())),
    }
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
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let name = path
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("file");
    let temporary = path.with_file_name(format!("{name}.{}.new", std::process::id()));
    let written = (|| {
        let _ = std::fs::remove_file(&temporary);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&temporary)?;
        // The mode given at creation is masked by the umask: make sure it is 0600 exactly.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}
