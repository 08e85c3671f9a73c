//! The process behind a loopback TCP peer: what SO_PEERCRED gives the socket, found for HTTP.
//!
//! Both ends of a loopback connection are in this machine's socket table: the peer's end is
//! the entry of `/proc/net/tcp` (or `tcp6`) whose local address is the peer's and whose remote
//! address is ours; its inode is the socket, and the process holding a descriptor on
//! `socket:[INODE]` is the peer (the first found, as a forked child may share it). It costs a
//! pass over `/proc/*/fd`, so it is looked up only for a request that may widen an agent's
//! rights (a write: whether it widens is only known from its body), a driver's, or one naming
//! an exec, never for a read; and it is looked up when the request starts, before its body is read, while the client most
//! likely still holds its socket. `origin::find` then matches the pid against the live runs.
//! A peer that closed before the lookup (its socket's inode is then 0), or a process of
//! another user whose descriptors cannot be read, is not found: `None`, an unknown peer, which
//! the widening rule refuses over HTTP.

use std::net::SocketAddr;

use procfs::process::FDTarget;

/// The pid of the process holding the peer's end of the TCP connection `peer` → `local`.
pub fn pid_of(peer: SocketAddr, local: SocketAddr) -> Option<i32> {
    // Inode 0: the peer closed its end (an orphan socket the kernel finishes alone); no
    // process holds it, and none must be matched by it.
    let inode = socket_inode(peer, local).filter(|inode| *inode != 0)?;
    let own = std::process::id() as i32;
    let processes = procfs::process::all_processes().ok()?;
    for process in processes.flatten() {
        if process.pid == own {
            continue;
        }
        let Ok(fds) = process.fd() else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| matches!(fd.target, FDTarget::Socket(found) if found == inode));
        if holds {
            return Some(process.pid);
        }
    }
    None
}

/// The inode of the socket whose local address is `peer` and remote address `local`.
fn socket_inode(peer: SocketAddr, local: SocketAddr) -> Option<u64> {
    let same = |a: SocketAddr, b: SocketAddr| {
        a.port() == b.port() && canonical(a.ip()) == canonical(b.ip())
    };
    let tables = [procfs::net::tcp(), procfs::net::tcp6()];
    tables
        .into_iter()
        .flatten()
        .flatten()
        .find(|entry| same(entry.local_address, peer) && same(entry.remote_address, local))
        .map(|entry| entry.inode)
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is the same address.
fn canonical(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map(std::net::IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_of_a_loopback_connection_is_the_process_that_opened_it() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        // A child connects and waits: its pid is the peer's.
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                &format!(
                    "import socket,sys,time; s=socket.create_connection(('127.0.0.1',{})); \
                     print('ok', flush=True); time.sleep(10)",
                    address.port()
                ),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (stream, peer) = listener.accept().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let started = std::time::Instant::now();
        let found = pid_of(peer, stream.local_addr().unwrap());
        eprintln!(
            "a peer lookup over {} processes took {:?}",
            procfs::process::all_processes().unwrap().count(),
            started.elapsed()
        );
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, Some(child.id() as i32));
    }
}
