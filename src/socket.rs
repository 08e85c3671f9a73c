//! Listening Unix sockets, made alike by the daemon (`HOME/corral.sock`) and `corral connect`
//! (`--socket PATH`): the path-length check, a socket private from its first moment, and the
//! peer check.
//!
//! - [`check_path`]: `sun_path` holds 108 bytes on Linux, the last one a NUL; a longer path is
//!   refused before anything is created.
//! - [`bind_private`]: the socket's own inode is given mode 0600 (`fchmod` on its descriptor)
//!   before `bind`, and Linux gives the path `bind` creates that mode (less the umask, which
//!   only removes bits); the path's mode is then set to exactly 0600, and only then does the
//!   socket `listen` — before `listen` a `connect` is refused, so no other user can ever reach
//!   it. The process-wide umask is never touched: another thread creating a file at the same
//!   moment keeps its mode.
//! - [`check_peer`]: `SO_PEERCRED` — only our own user may drive our agents.

use std::fmt;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::net::unix::UCred;
use tokio::net::{UnixListener, UnixSocket, UnixStream};

/// `sun_path` holds 108 bytes on Linux, the last one a NUL.
pub const MAX_PATH: usize = 107;

/// The mode of every listening socket.
pub const MODE: u32 = 0o600;

/// How many connections may wait to be accepted (the kernel caps it at `net.core.somaxconn`).
const BACKLOG: u32 = 4096;

/// A socket path that does not fit in `sun_path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTooLong {
    pub path: PathBuf,
    pub length: usize,
}

impl fmt::Display for PathTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "socket path {} is {} bytes; a Unix socket path holds at most {MAX_PATH}",
            self.path.display(),
            self.length
        )
    }
}

impl std::error::Error for PathTooLong {}

/// Checks that a socket path fits in `sun_path`.
pub fn check_path(path: &Path) -> Result<(), PathTooLong> {
    let length = path.as_os_str().len();
    if length > MAX_PATH {
        return Err(PathTooLong {
            path: path.to_path_buf(),
            length,
        });
    }
    Ok(())
}

/// Why a socket could not be made to listen.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error(transparent)]
    TooLong(#[from] PathTooLong),
    #[error("cannot listen on {}: {error}", .path.display())]
    Listen {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot restrict {}: {error}", .path.display())]
    Restrict {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// Binds a stream socket at `path` (which must not exist), mode 0600 from the moment the path
/// exists, and listens on it. Needs a tokio runtime. On failure nothing is left at `path`.
pub fn bind_private(path: &Path) -> Result<UnixListener, BindError> {
    check_path(path)?;
    let listen = |error| BindError::Listen {
        path: path.to_path_buf(),
        error,
    };
    let socket = bind_restricted(path).map_err(listen)?;
    // The umask may have taken the owner's bits too; the mode is set exactly.
    if let Err(error) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(MODE)) {
        let _ = std::fs::remove_file(path);
        return Err(BindError::Restrict {
            path: path.to_path_buf(),
            error,
        });
    }
    socket.listen(BACKLOG).map_err(|error| {
        let _ = std::fs::remove_file(path);
        listen(error)
    })
}

/// A new stream socket whose inode has mode [`MODE`], bound at `path`, not yet listening.
fn bind_restricted(path: &Path) -> std::io::Result<UnixSocket> {
    let socket = UnixSocket::new_stream()?;
    // `fchmod` on a duplicate of the descriptor changes the socket's own inode, whose mode
    // `bind` gives the path it creates.
    let duplicate = std::fs::File::from(socket.as_fd().try_clone_to_owned()?);
    duplicate.set_permissions(std::fs::Permissions::from_mode(MODE))?;
    drop(duplicate);
    socket.bind(path)?;
    Ok(socket)
}

/// This process's effective uid.
pub fn own_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Why a peer is not served.
#[derive(Debug)]
pub enum Refusal {
    /// It runs as another user.
    OtherUser {
        uid: u32,
        own_uid: u32,
        pid: Option<i32>,
    },
    /// Its credentials cannot be read.
    Unreadable(std::io::Error),
}

impl Refusal {
    /// The uid this process serves.
    pub fn own_uid(&self) -> u32 {
        match self {
            Refusal::OtherUser { own_uid, .. } => *own_uid,
            Refusal::Unreadable(_) => own_uid(),
        }
    }

    /// The peer's uid, or why it could not be read.
    pub fn peer_uid(&self) -> std::io::Result<u32> {
        match self {
            Refusal::OtherUser { uid, .. } => Ok(*uid),
            Refusal::Unreadable(error) => Err(std::io::Error::new(error.kind(), error.to_string())),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::OtherUser { uid, pid, .. } => {
                write!(f, "a client of uid {uid}")?;
                match pid {
                    Some(pid) => write!(f, " (pid {pid})"),
                    None => Ok(()),
                }
            }
            Refusal::Unreadable(error) => {
                write!(f, "a client whose credentials cannot be read: {error}")
            }
        }
    }
}

/// `SO_PEERCRED`: the peer's credentials if it runs as our own user.
pub fn check_peer(stream: &UnixStream) -> Result<UCred, Refusal> {
    peer_of(own_uid(), stream.peer_cred())
}

fn peer_of(own_uid: u32, credentials: std::io::Result<UCred>) -> Result<UCred, Refusal> {
    match credentials {
        Ok(peer) if peer.uid() == own_uid => Ok(peer),
        Ok(peer) => Err(Refusal::OtherUser {
            uid: peer.uid(),
            own_uid,
            pid: peer.pid(),
        }),
        Err(error) => Err(Refusal::Unreadable(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn a_path_longer_than_sun_path_is_refused_naming_the_limit() {
        assert!(check_path(Path::new(&"x".repeat(MAX_PATH))).is_ok());
        let error = check_path(Path::new(&"x".repeat(MAX_PATH + 1))).unwrap_err();
        assert_eq!(error.length, 108);
        assert!(error.to_string().contains("holds at most 107"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("s".repeat(120));
        let refused = runtime().block_on(async { bind_private(&long).err() });
        assert!(
            matches!(refused, Some(BindError::TooLong(_))),
            "{refused:?}"
        );
        assert!(!long.exists());
    }

    #[test]
    fn the_path_is_private_from_the_moment_bind_creates_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _runtime = runtime();
        let socket = bind_restricted(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        // Before the exact chmod: 0600 less whatever the umask removes.
        assert_eq!(mode(&path) & !MODE, 0, "{:o}", mode(&path));
        drop(socket);
    }

    #[test]
    fn a_bound_socket_is_0600_and_serves_its_own_user() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        runtime().block_on(async {
            let listener = bind_private(&path).unwrap();
            assert_eq!(mode(&path), 0o600);
            let client = UnixStream::connect(&path).await.unwrap();
            let (server, _) = listener.accept().await.unwrap();
            let peer = check_peer(&server).expect("our own user");
            assert_eq!(peer.uid(), own_uid());
            assert_eq!(peer.pid(), Some(std::process::id() as i32));
            drop(client);
        });
        // Binding over an existing path fails and leaves it alone.
        let error = runtime().block_on(async { bind_private(&path).err() });
        assert!(matches!(error, Some(BindError::Listen { .. })), "{error:?}");
        assert!(path.exists());
    }

    #[test]
    fn another_user_is_refused_naming_its_uid() {
        let runtime = runtime();
        let _entered = runtime.enter();
        let credentials = || {
            let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
            a.set_nonblocking(true).unwrap();
            UnixStream::from_std(a).unwrap().peer_cred()
        };
        let uid = own_uid();
        assert!(peer_of(uid, credentials()).is_ok());
        let refused = peer_of(uid.wrapping_add(1), credentials()).unwrap_err();
        assert!(
            matches!(refused, Refusal::OtherUser { uid: u, .. } if u == uid),
            "{refused:?}"
        );
        assert_eq!(
            refused.to_string(),
            format!("a client of uid {uid} (pid {})", std::process::id())
        );
        let unreadable = peer_of(uid, Err(std::io::Error::other("gone"))).unwrap_err();
        assert_eq!(
            unreadable.to_string(),
            "a client whose credentials cannot be read: gone"
        );
    }

    /// The umask is never changed: files another thread creates while sockets are bound keep
    /// the mode they were created with.
    #[test]
    fn files_created_by_another_thread_while_binding_keep_their_mode() {
        let dir = tempfile::tempdir().unwrap();
        let files = dir.path().join("files");
        std::fs::create_dir(&files).unwrap();
        let reference = files.join("reference");
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&reference)
            .unwrap();
        let expected = mode(&reference);
        let done = Arc::new(AtomicBool::new(false));
        let creator = {
            let (files, done) = (files.clone(), done.clone());
            std::thread::spawn(move || {
                let mut made = Vec::new();
                let mut n = 0u64;
                while !done.load(Ordering::Relaxed) || n < 100 {
                    let path = files.join(format!("f{n}"));
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o666)
                        .open(&path)
                        .unwrap();
                    made.push(path);
                    n += 1;
                }
                made
            })
        };
        runtime().block_on(async {
            for n in 0..300 {
                let path = dir.path().join(format!("s{n}.sock"));
                let listener = bind_private(&path).unwrap();
                assert_eq!(mode(&path), 0o600);
                drop(listener);
                std::fs::remove_file(&path).unwrap();
            }
        });
        done.store(true, Ordering::Relaxed);
        let made = creator.join().unwrap();
        for path in &made {
            assert_eq!(mode(path), expected, "{}", path.display());
        }
    }
}
