//! A pseudo-terminal, for the tests in which a program must see a terminal: corral's status
//! line (`tests/it/status_line.rs`) and an interactive shell that runs `corral run` with job
//! control (`tests/it/run.rs`). Each test file keeps its own way of reading what the terminal
//! showed; what they share is opening one and a thread that reads everything written to it.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::mpsc;

/// A pseudo-terminal just opened: its two sides, and what is written to it.
pub struct Pair {
    /// The terminal's own side: what is written here is typed in.
    pub master: File,
    /// The side a program gets as its stdin, stdout or stderr.
    pub slave: OwnedFd,
    /// What programs write to the terminal, in the pieces a thread read them from the master.
    /// The channel closes (the read ends with EIO) once no process holds the slave side.
    pub output: mpsc::Receiver<Vec<u8>>,
}

/// Opens a pseudo-terminal, of `size` (rows, columns) when one is given.
pub fn open(size: Option<(u16, u16)>) -> Pair {
    let (mut master, mut slave) = (0, 0);
    let size = size.map(|(rows, columns)| libc::winsize {
        ws_row: rows,
        ws_col: columns,
        ws_xpixel: 0,
        ws_ypixel: 0,
    });
    let size_pointer = size
        .as_ref()
        .map_or(std::ptr::null(), |size| size as *const libc::winsize);
    // SAFETY: openpty fills the two descriptors; no name or termios is asked for, and the
    // window size, when given, lives until it returns.
    let opened = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            size_pointer,
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here alone.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let master = File::from(master);
    let mut reader = master.try_clone().unwrap();
    let (sender, output) = mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buffer = [0u8; 4096];
        // Ends with EIO once nobody holds the terminal any more.
        while let Ok(read) = reader.read(&mut buffer) {
            if read == 0 || sender.send(buffer[..read].to_vec()).is_err() {
                return;
            }
        }
    });
    Pair {
        master,
        slave,
        output,
    }
}
