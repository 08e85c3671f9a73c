//! The live check of the module doc (`CORRAL_FAKE_LIVE_CHECK`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

/// Takes the locks and logs them; the locks are held while the result lives. Nothing
/// without the variable; a failure is a warning on stderr (the turn runs anyway).
pub fn enter() -> Vec<Flock<File>> {
    let Some(dir) = std::env::var_os("CORRAL_FAKE_LIVE_CHECK") else {
        return Vec::new();
    };
    match take(Path::new(&dir)) {
        Ok(held) => held,
        Err(error) => {
            eprintln!("corral-fake-engine: warning: the live check failed: {error}");
            Vec::new()
        }
    }
}

fn take(dir: &Path) -> std::io::Result<Vec<Flock<File>>> {
    let session = std::env::var("CORRAL_SESSION_ID").unwrap_or_default();
    let home = std::env::var("CORRAL_HOME").unwrap_or_default();
    let name: String = Path::new(&home)
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    let mut held = Vec::new();
    let overlap = match lock(&dir.join(format!("session-{session}")))? {
        Some(lock) => {
            held.push(lock);
            0
        }
        None => 1,
    };
    let mut slot = |prefix: &str| -> std::io::Result<usize> {
        for k in 0.. {
            if let Some(lock) = lock(&dir.join(format!("{prefix}-{k}")))? {
                held.push(lock);
                return Ok(k);
            }
        }
        unreachable!("an unbounded range")
    };
    let all = slot("all")?;
    let mine = slot(&format!("home-{name}"))?;
    // One write of a short line with O_APPEND: lines of engines at once do not mix.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("log"))?
        .write_all(format!("{all} {mine} {name} {overlap} {session}\n").as_bytes())?;
    Ok(held)
}

/// The file's exclusive lock, or `None` when another process holds it.
fn lock(path: &Path) -> std::io::Result<Option<Flock<File>>> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, errno)) => Err(errno.into()),
    }
}
