//! A loopback TCP proxy a test puts between a daemon and its PostgreSQL server, to cut the
//! network without touching the shared test cluster.
//!
//! [`TcpProxy::start`] listens on a free loopback port and forwards each connection to the
//! server, two threads per connection. [`TcpProxy::cut`] shuts every forwarded connection
//! down (the daemon's side sees its connections end) and refuses new ones until
//! [`TcpProxy::restore`]. Dropping it stops it and its threads.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct TcpProxy {
    port: u16,
    state: Arc<State>,
}

struct State {
    cut: AtomicBool,
    stopped: AtomicBool,
    /// Both ends of every forwarded connection, to shut them down at a cut.
    open: Mutex<Vec<TcpStream>>,
}

impl TcpProxy {
    /// A proxy to `upstream`, listening on 127.0.0.1 (a free port).
    pub fn start(upstream: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let state = Arc::new(State {
            cut: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accepting = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if accepting.cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(upstream) else {
                    continue;
                };
                forward(&accepting, client, server);
            }
        });
        TcpProxy { port, state }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Ends every forwarded connection and refuses new ones.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        for stream in self.state.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies both ways between `client` and `server`, each direction on a thread of its own.
fn forward(state: &Arc<State>, client: TcpStream, server: TcpStream) {
    let (Ok(client_copy), Ok(server_copy)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    {
        let mut open = state.open.lock().unwrap();
        open.extend(client.try_clone());
        open.extend(server.try_clone());
    }
    std::thread::spawn(move || pipe(client, server));
    std::thread::spawn(move || pipe(server_copy, client_copy));
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.cut();
        // Wakes the accept loop, which then sees it is stopped.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
