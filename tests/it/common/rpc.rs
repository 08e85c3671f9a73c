//! A blocking JSON-RPC client of a daemon's socket, enough for a test: one request at a
//! time, answers matched by id, notifications skipped.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde_json::{json, Value};

pub struct Rpc {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next: u64,
}

impl Rpc {
    /// Connects to `home`'s daemon and does the handshake.
    pub fn connect(home: &Path) -> Rpc {
        let stream = UnixStream::connect(home.join("corral.sock")).expect("the daemon listens");
        let mut rpc = Rpc {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            next: 1,
        };
        rpc.call("initialize", json!({ "protocol": 1 }))
            .expect("the handshake");
        rpc
    }

    /// Calls `method`: its result, or its error object.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next;
        self.next += 1;
        let line = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        writeln!(self.writer, "{line}").unwrap();
        loop {
            let mut answer = String::new();
            assert!(
                self.reader.read_line(&mut answer).unwrap() > 0,
                "the daemon hung up"
            );
            let answer: Value = serde_json::from_str(&answer).unwrap();
            if answer["id"] == id {
                return match answer.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(answer["result"].clone()),
                };
            }
        }
    }
}
