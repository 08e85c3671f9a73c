//! The client side of the control protocol: what the CLI (or any Rust program) uses to talk to
//! a daemon. It connects to `$CORRAL_HOME/corral.sock`, does the `initialize` handshake, and
//! calls methods; notifications that arrive while a call waits for its answer are kept for
//! [`Client::next_notification`].
//!
//! Calls are typed: [`Client::call`] takes a method of `crate::protocol` (`Method`), sends
//! its params type and decodes its result type, the daemon's own definitions.
//! [`Client::call_json`] is the same call answered as JSON (for a command that prints the
//! daemon's answer as it came), [`Client::call_raw`] a call by name (a proxy).
//!
//! [`connect_or_spawn`] is the CLI's way in: when no daemon answers, it starts one in the
//! background (unless told not to) and says so on stderr.

use std::collections::VecDeque;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use crate::daemon;
use crate::protocol::{
    Initialize, InitializeParams, Method, Notification, Request, Response, RpcError, MAX_LINE,
    PROTOCOL_VERSION,
};

/// The longest answer line the client reads (a bound against a broken peer, not a limit of
/// the protocol's answers in practice).
const MAX_ANSWER: usize = 1 << 30;

/// `initialize`'s params.
fn handshake(exec_id: Option<&str>) -> InitializeParams {
    InitializeParams {
        protocol: PROTOCOL_VERSION,
        client: Some("corral-cli".into()),
        exec_id: exec_id.map(str::to_string),
    }
}

/// Params as the JSON a request carries.
fn params_json<M: Method>(params: &M::Params) -> Result<Value, ClientError> {
    serde_json::to_value(params).map_err(|error| ClientError::Protocol(error.to_string()))
}

/// A method's answer as its result type.
pub fn decode<T: DeserializeOwned>(method: &str, answer: Value) -> Result<T, ClientError> {
    serde_json::from_value(answer).map_err(|error| {
        ClientError::Protocol(format!("the answer to {method} does not read: {error}"))
    })
}

/// Why a call did not get an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No daemon listens for this home.
    #[error("no daemon answers at {0} (start one with `corral daemon start`)")]
    NoDaemon(String),
    /// The daemon answered with an error object.
    #[error("{0}")]
    Rpc(RpcError),
    #[error("connection to the daemon: {0}")]
    Io(#[from] std::io::Error),
    #[error("the daemon broke the protocol: {0}")]
    Protocol(String),
    #[error("{0}")]
    Spawn(String),
    /// The request would not fit in one line of the protocol; it was not sent.
    #[error("the {method} request is {bytes} bytes; a request line is at most {MAX_LINE} bytes")]
    TooLong { method: String, bytes: usize },
}

/// A connection to a daemon, past the handshake.
pub struct Client {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
    notifications: VecDeque<Notification>,
    /// What `initialize` answered.
    pub daemon: Value,
}

impl Client {
    /// Connects to the daemon of `home` and does the handshake, as exec `exec_id`.
    pub async fn connect(home: &Path, exec_id: Option<&str>) -> Result<Client, ClientError> {
        let mut client = Client::open(home).await?;
        client.daemon = client.call_json::<Initialize>(&handshake(exec_id)).await?;
        Ok(client)
    }

    /// Connects as exec `exec_id` and writes `initialize` and one call in a single write: one
    /// round trip instead of two (the daemon decides the handshake in line order, so the call
    /// runs only once `initialize` succeeded, and is refused otherwise). A refused handshake
    /// is the error; else the client and the call's own answer (as JSON).
    pub async fn connect_and_call<M: Method>(
        home: &Path,
        exec_id: Option<&str>,
        params: &M::Params,
    ) -> Result<(Client, Result<Value, ClientError>), ClientError> {
        let mut client = Client::open(home).await?;
        let mut lines = client.line(
            Initialize::NAME,
            params_json::<Initialize>(&handshake(exec_id))?,
        )?;
        let call = client.next_id;
        lines.push_str(&client.line(M::NAME, params_json::<M>(params)?)?);
        if let Err(error) = client.writer.write_all(lines.as_bytes()).await {
            return Err(client
                .read_closing_reason()
                .await
                .unwrap_or(ClientError::Io(error)));
        }
        // A test's kill -9 here: the request is the daemon's, this process writes nothing more.
        crate::process::kill_point("send.written");
        client.daemon = client.answer(call - 1).await?;
        let answer = client.answer(call).await;
        Ok((client, answer))
    }

    /// The socket connected, before the handshake.
    async fn open(home: &Path) -> Result<Client, ClientError> {
        let path = daemon::socket_path(home);
        daemon::check_socket_path(&path).map_err(ClientError::Spawn)?;
        let stream = match UnixStream::connect(&path).await {
            Ok(stream) => stream,
            Err(error)
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                return Err(ClientError::NoDaemon(path.display().to_string()))
            }
            Err(error) => return Err(error.into()),
        };
        let (read, writer) = stream.into_split();
        Ok(Client {
            reader: BufReader::new(read),
            writer,
            next_id: 1,
            notifications: VecDeque::new(),
            daemon: Value::Null,
        })
    }

    /// Whether the daemon records the exec a `prompt.send` carries (`initialize` said so).
    pub fn records_execs(&self) -> bool {
        self.daemon.get("records_execs").and_then(Value::as_bool) == Some(true)
    }

    /// The next request's line (newline included), refused unsent when too long.
    fn line(&mut self, method: &str, params: Value) -> Result<String, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_string(&Request::new(id, method, params))
            .map_err(|error| ClientError::Protocol(error.to_string()))?;
        if line.len() > MAX_LINE {
            return Err(ClientError::TooLong {
                method: method.to_string(),
                bytes: line.len(),
            });
        }
        line.push('\n');
        Ok(line)
    }

    /// Calls method `M` and waits for its answer, decoded as `M`'s result.
    pub async fn call<M: Method>(&mut self, params: &M::Params) -> Result<M::Result, ClientError> {
        let answer = self.call_json::<M>(params).await?;
        decode(M::NAME, answer)
    }

    /// Calls method `M` and waits for its answer, as the JSON the daemon sent.
    pub async fn call_json<M: Method>(&mut self, params: &M::Params) -> Result<Value, ClientError> {
        self.call_raw(M::NAME, params_json::<M>(params)?).await
    }

    /// Calls `method` by name and waits for its answer. A request longer than the protocol's
    /// line limit is refused here, unsent; an error answer with a null id (the daemon could not
    /// read the request: too long, not JSON, or it refuses this connection) ends the wait,
    /// since this client has one call in flight at a time and so the error is this call's.
    pub async fn call_raw(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        let line = self.line(method, params)?;
        if let Err(error) = self.writer.write_all(line.as_bytes()).await {
            // The daemon may have closed the connection before reading (it refused this
            // peer): what it wrote first says why.
            return Err(self
                .read_closing_reason()
                .await
                .unwrap_or(ClientError::Io(error)));
        }
        self.answer(id).await
    }

    /// Reads until the answer to request `id` (keeping the notifications read meanwhile).
    async fn answer(&mut self, id: u64) -> Result<Value, ClientError> {
        loop {
            let message = self.read_message().await?;
            if message.get("id").and_then(Value::as_u64) == Some(id) {
                let response: Response = serde_json::from_value(message)
                    .map_err(|error| ClientError::Protocol(error.to_string()))?;
                return match (response.result, response.error) {
                    (_, Some(error)) => Err(ClientError::Rpc(error)),
                    (Some(result), None) => Ok(result),
                    (None, None) => Ok(Value::Null),
                };
            }
            // An error with id null: the daemon could not tell which request it answers, and
            // ours is the only one there is.
            if message.get("id") == Some(&Value::Null) {
                if let Some(error) = error_of(&message) {
                    return Err(ClientError::Rpc(error));
                }
            }
            if message.get("method").is_some() {
                if let Ok(notification) = serde_json::from_value(message) {
                    self.notifications.push_back(notification);
                }
            }
        }
    }

    /// The error line the daemon wrote before closing the connection, if it wrote one.
    async fn read_closing_reason(&mut self) -> Option<ClientError> {
        loop {
            let message = self.read_message().await.ok()?;
            if message.get("id") == Some(&Value::Null) {
                if let Some(error) = error_of(&message) {
                    return Some(ClientError::Rpc(error));
                }
            }
        }
    }

    /// The next notification (kept from earlier calls, or read now). `None` when the daemon
    /// closed the connection.
    pub async fn next_notification(&mut self) -> Result<Option<Notification>, ClientError> {
        if let Some(notification) = self.notifications.pop_front() {
            return Ok(Some(notification));
        }
        loop {
            let message = match self.read_message().await {
                Ok(message) => message,
                Err(ClientError::Io(error))
                    if error.kind() == std::io::ErrorKind::UnexpectedEof =>
                {
                    return Ok(None)
                }
                Err(error) => return Err(error),
            };
            if message.get("method").is_some() {
                return serde_json::from_value(message)
                    .map(Some)
                    .map_err(|error| ClientError::Protocol(error.to_string()));
            }
        }
    }

    async fn read_message(&mut self) -> Result<Value, ClientError> {
        let mut line = Vec::new();
        // The 1 MiB limit is on requests; answers (a long history) may be longer.
        let read = tokio::io::AsyncReadExt::take(&mut self.reader, MAX_ANSWER as u64)
            .read_until(b'\n', &mut line)
            .await?;
        if read == 0 {
            return Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        serde_json::from_slice(&line).map_err(|error| ClientError::Protocol(error.to_string()))
    }
}

/// The error object of an answer, if it is an error answer.
fn error_of(message: &Value) -> Option<RpcError> {
    serde_json::from_value(message.get("error")?.clone()).ok()
}

/// Connects to the daemon of `home` as exec `exec_id`; when none answers, `spawn` says
/// whether to start one in the background first (and which exec starts it: the daemon's
/// parent), which is then said on stderr. `spawn` is asked only when no daemon answers.
pub async fn connect_or_spawn(
    home: &Path,
    exec_id: Option<&str>,
    spawn: impl FnOnce() -> Option<daemon::Starter>,
) -> Result<Client, ClientError> {
    match Client::connect(home, exec_id).await {
        Err(ClientError::NoDaemon(path)) => {
            let Some(starter) = spawn() else {
                return Err(ClientError::NoDaemon(path));
            };
            let owned = home.to_path_buf();
            let spawned =
                tokio::task::spawn_blocking(move || daemon::spawn_detached(&owned, &starter))
                    .await
                    .map_err(|error| ClientError::Spawn(error.to_string()))?;
            match spawned {
                Ok(pid) => {
                    say!("corral: no daemon answered at {path}; started one (pid {pid})")
                }
                // Another client may have started one at the same moment: its daemon won the
                // lock, and ours stood down. Connect to the winner.
                Err(reason) => {
                    return Client::connect(home, exec_id)
                        .await
                        .map_err(|_| ClientError::Spawn(reason));
                }
            }
            Client::connect(home, exec_id).await
        }
        other => other,
    }
}
