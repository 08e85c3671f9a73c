//! One native connection of `corral connect`, past its daemon handshake: the app-server
//! requests a Codex client sends (`initialize`, `thread/*`, `turn/*`), answered through the
//! daemon, and the session's events sent back through [`Translator`].

use std::rc::Rc;

use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;

use crate::cli::remote::{self, EventStream};
use crate::cli::{CliError, Context};
use crate::client::{Client, ClientError};
use crate::protocol::{
    code, CancelParams, ClaimParams, DriverClaim, DriverShow, History, Method, ProjectSelector,
    ProjectShow, PromptCancel, PromptSend, RpcError, SendParams, SessionSelector, SessionShow,
    SessionSteer, SteerParams, MAX_LINE,
};
use crate::store::events::Event;
use crate::store::now_ms;

use super::translate::{turn_object, Translator};
use super::{Incoming, ServedSession};

/// Where a connection stands with the session's driver claim.
pub(super) enum Claim {
    /// Never claimed (or refused: the next write tries again).
    Unclaimed,
    /// Holds the claim of this generation.
    Held(i64),
    /// Was taken over; the text names the driver that took it.
    Superseded(String),
}

/// What a thread object says about the session, refreshed by `thread/start`, `thread/resume`
/// and `initialize`.
#[derive(Default)]
pub(super) struct ThreadInfo {
    engine: String,
    model: Option<String>,
    reasoning_effort: Option<String>,
    title: Option<String>,
    created_at: i64,
    cwd: Option<String>,
    full_access: bool,
    remote: bool,
    /// A prompt runs or waits.
    active: bool,
}

/// A native connection past its daemon handshake.
pub(super) struct Native {
    pub(super) shared: Rc<ServedSession>,
    /// The context as this connection's exec.
    pub(super) context: Context,
    pub(super) exec_id: String,
    pub(super) client: Client,
    pub(super) writer: OwnedWriteHalf,
    pub(super) initialized: bool,
    pub(super) events: Option<EventStream>,
    pub(super) claim: Claim,
    pub(super) info: ThreadInfo,
    pub(super) translator: Translator,
    /// The daemon connection broke: the native connection ends.
    pub(super) broken: bool,
}

/// Resolves with the next event, or never when there is no stream yet.
async fn next_event(events: &mut Option<EventStream>) -> Result<Event, CliError> {
    match events {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

impl Native {
    pub(super) async fn serve(&mut self, incoming: &mut mpsc::Receiver<Incoming>) {
        loop {
            if self.broken {
                return;
            }
            let written = tokio::select! {
                item = incoming.recv() => match item {
                    None => return,
                    Some(Incoming::TooLong) => {
                        let refusal = error_reply(
                            &Value::Null,
                            &RpcError::new(
                                code::INVALID_REQUEST,
                                format!("line longer than {MAX_LINE} bytes; ignored"),
                            ),
                        );
                        self.send(&refusal).await
                    }
                    Some(Incoming::Line(line)) => self.handle_line(&line).await,
                },
                event = next_event(&mut self.events) => match event {
                    Ok(event) => {
                        let notifications = self.translator.translate(&event);
                        let mut written = Ok(());
                        for notification in notifications {
                            written = self.send(&notification).await;
                            if written.is_err() {
                                break;
                            }
                        }
                        written
                    }
                    Err(error) => {
                        say!(
                            "corral: a native connection's event stream ended: {}",
                            error.message.unwrap_or_default()
                        );
                        return;
                    }
                },
            };
            if written.is_err() {
                return;
            }
        }
    }

    async fn send(&mut self, message: &Value) -> std::io::Result<()> {
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).await
    }

    async fn handle_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let message: Value = match serde_json::from_slice(line) {
            Ok(message) => message,
            Err(error) => {
                let refusal = RpcError::new(code::PARSE_ERROR, format!("Parse error: {error}"));
                return self.send(&error_reply(&Value::Null, &refusal)).await;
            }
        };
        let Some(object) = message.as_object() else {
            let refusal = RpcError::new(code::INVALID_REQUEST, "Invalid request: not an object");
            return self.send(&error_reply(&Value::Null, &refusal)).await;
        };
        let id = object.get("id").cloned();
        let Some(method) = object.get("method").and_then(Value::as_str) else {
            // An answer to a server request: corral connect sends none, so it is ignored.
            if object.contains_key("result") || object.contains_key("error") {
                return Ok(());
            }
            let refusal = RpcError::new(
                code::INVALID_REQUEST,
                "Invalid request: missing field `method`",
            );
            return self
                .send(&error_reply(id.as_ref().unwrap_or(&Value::Null), &refusal))
                .await;
        };
        let params = object.get("params").cloned().unwrap_or(Value::Null);
        let Some(id) = id.filter(|id| !id.is_null()) else {
            // Notifications (`initialized`, …) are accepted and need nothing.
            return Ok(());
        };
        let answer = self.request(method, &params).await;
        let reply = match answer {
            Ok(result) => json!({ "id": id, "result": result }),
            Err(error) => error_reply(&id, &error),
        };
        self.send(&reply).await
    }

    async fn request(&mut self, method: &str, params: &Value) -> Result<Value, RpcError> {
        if method == "initialize" {
            return self.initialize().await;
        }
        if !self.initialized {
            return Err(RpcError::new(code::INVALID_REQUEST, "Not initialized"));
        }
        match method {
            "thread/start" | "thread/resume" => {
                self.refresh().await?;
                Ok(self.thread_result(json!([])))
            }
            "thread/read" => {
                self.refresh().await?;
                let include = params
                    .get("includeTurns")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let turns = if include {
                    self.turns().await?
                } else {
                    json!([])
                };
                Ok(json!({ "thread": self.thread_object(turns) }))
            }
            "thread/list" => {
                self.refresh().await?;
                Ok(json!({ "data": [self.thread_object(json!([]))], "nextCursor": null }))
            }
            "turn/start" => self.turn_start(params).await,
            "turn/steer" => self.turn_steer(params).await,
            "turn/interrupt" => self.turn_interrupt(params).await,
            other => Err(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("{other} is not served by corral connect"),
            )),
        }
    }

    async fn initialize(&mut self) -> Result<Value, RpcError> {
        if self.initialized {
            return Err(RpcError::new(code::INVALID_REQUEST, "Already initialized"));
        }
        let after = self.refresh().await?;
        let events = EventStream::open(&self.context, &self.shared.session_id, after)
            .await
            .map_err(|error| {
                RpcError::new(
                    code::INTERNAL,
                    format!(
                        "cannot follow the session's events: {}",
                        error.message.unwrap_or_default()
                    ),
                )
            })?;
        self.events = Some(events);
        self.initialized = true;
        Ok(json!({
            "userAgent": format!("corral-connect/{}", env!("CARGO_PKG_VERSION")),
            "codexHome": self.shared.context.home.to_string_lossy(),
            "platformFamily": std::env::consts::FAMILY,
            "platformOs": std::env::consts::OS,
        }))
    }

    /// A daemon call; a broken daemon connection ends the native connection too.
    async fn call<M: Method>(&mut self, params: &M::Params) -> Result<Value, RpcError> {
        match self.client.call_json::<M>(params).await {
            Ok(value) => Ok(value),
            Err(ClientError::Rpc(error)) => Err(error),
            Err(other) => {
                self.broken = true;
                Err(RpcError::new(
                    code::INTERNAL,
                    format!(
                        "the daemon connection broke: {}",
                        remote::one_line(&other.to_string())
                    ),
                ))
            }
        }
    }

    /// Reads the session and its project into `info`; returns the session's last event.
    async fn refresh(&mut self) -> Result<i64, RpcError> {
        let shown = self
            .call::<SessionShow>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        let session = &shown["session"];
        let text = |value: &Value| value.as_str().map(str::to_string);
        let active = shown["prompts"].as_array().is_some_and(|prompts| {
            prompts
                .iter()
                .any(|prompt| matches!(prompt["status"].as_str(), Some("running" | "queued")))
        });
        let mut info = ThreadInfo {
            engine: session["engine"].as_str().unwrap_or_default().to_string(),
            model: text(&session["model"]),
            reasoning_effort: text(&session["reasoning_effort"]),
            title: text(&session["title"]),
            created_at: session["created_at"].as_i64().unwrap_or_default(),
            active,
            ..ThreadInfo::default()
        };
        if let Some(project) = session["project_id"].as_str().map(str::to_string) {
            let project = self
                .call::<ProjectShow>(&ProjectSelector::new(project))
                .await?;
            info.cwd = text(&project["path"]);
            info.model = info.model.or_else(|| text(&project["model"]));
            info.full_access = project["full_access"].as_bool().unwrap_or(false);
            info.remote = project["kind"].as_str() == Some("remote");
        }
        self.info = info;
        if let Some(thread) = session["thread_id"].as_str() {
            self.translator.thread_id = Some(thread.to_string());
        }
        Ok(session["last_event_seq"].as_i64().unwrap_or(0))
    }

    fn thread_object(&self, turns: Value) -> Value {
        let info = &self.info;
        let id = self.translator.thread();
        let status = if info.active {
            json!({ "type": "active", "activeFlags": [] })
        } else {
            json!({ "type": "idle" })
        };
        json!({
            "id": id,
            "sessionId": id,
            "preview": info.title.clone().unwrap_or_default(),
            "ephemeral": false,
            "modelProvider": info.engine,
            "model": info.model,
            "reasoningEffort": info.reasoning_effort,
            "createdAt": info.created_at / 1000,
            "updatedAt": now_ms() / 1000,
            "status": status,
            "path": null,
            "cwd": info.cwd,
            "cliVersion": env!("CARGO_PKG_VERSION"),
            "source": "corral",
            "name": info.title,
            "turns": turns,
        })
    }

    fn thread_result(&self, turns: Value) -> Value {
        let info = &self.info;
        let sandbox = if info.full_access {
            json!({ "type": "dangerFullAccess" })
        } else if info.remote {
            json!({ "type": "readOnly", "networkAccess": false })
        } else {
            json!({ "type": "workspaceWrite", "writableRoots": [info.cwd], "networkAccess": false })
        };
        json!({
            "thread": self.thread_object(turns),
            "model": info.model,
            "modelProvider": info.engine,
            "cwd": info.cwd,
            "approvalPolicy": "never",
            "sandbox": sandbox,
            "reasoningEffort": info.reasoning_effort,
        })
    }

    /// The session's prompts as turns (for `thread/read` with `includeTurns`).
    async fn turns(&mut self) -> Result<Value, RpcError> {
        let history = self
            .call::<History>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        let prompts = history["prompts"].as_array().cloned().unwrap_or_default();
        let turns: Vec<Value> = prompts
            .iter()
            .map(|prompt| {
                let id = prompt["id"].as_str().unwrap_or_default();
                let mut items = vec![json!({
                    "type": "userMessage",
                    "id": format!("{id}-user"),
                    "content": [{ "type": "text", "text": prompt["text"], "text_elements": [] }],
                })];
                if let Some(answer) = prompt["answer"].as_str() {
                    items.push(json!({
                        "type": "agentMessage",
                        "id": format!("{id}-answer"),
                        "text": answer,
                    }));
                }
                let status = match prompt["status"].as_str() {
                    Some("done") => "completed",
                    Some("failed") => "failed",
                    Some("cancelled") => "interrupted",
                    _ => "inProgress",
                };
                let error = prompt["error"]
                    .as_str()
                    .map(|message| json!({ "message": message, "codexErrorInfo": null }))
                    .unwrap_or(Value::Null);
                let mut turn = turn_object(
                    id,
                    status,
                    error,
                    prompt["started_at"].as_i64(),
                    prompt["finished_at"].as_i64(),
                );
                turn["items"] = Value::Array(items);
                turn["itemsView"] = json!("full");
                turn
            })
            .collect();
        Ok(Value::Array(turns))
    }

    async fn turn_start(&mut self, params: &Value) -> Result<Value, RpcError> {
        let (text, images) = input(params)?;
        let generation = self.claim().await?;
        let sent = self
            .call::<PromptSend>(&SendParams {
                session: self.shared.session_id.clone(),
                text,
                images,
                generation: Some(generation),
                ..SendParams::default()
            })
            .await;
        match sent {
            Ok(prompt) => {
                let id = prompt["id"].as_str().unwrap_or_default();
                Ok(json!({ "turn": turn_object(id, "inProgress", Value::Null, None, None) }))
            }
            Err(error) if error.code == code::SUPERSEDED => {
                let driver = error
                    .data
                    .as_ref()
                    .map(|data| describe_driver(&data["driver"]))
                    .unwrap_or_else(|| error.message.clone());
                Err(self.superseded(driver))
            }
            Err(error) => Err(error),
        }
    }

    async fn turn_steer(&mut self, params: &Value) -> Result<Value, RpcError> {
        let (text, images) = input(params)?;
        if !images.is_empty() {
            return Err(RpcError::new(
                code::INVALID_PARAMS,
                "corral connect steers with text only",
            ));
        }
        let generation = self.claim().await?;
        self.verify(generation).await?;
        let running = self.running_prompt().await?;
        let expected = params.get("expectedTurnId").and_then(Value::as_str);
        let Some(running) = running else {
            return Err(RpcError::new(
                code::INVALID_REQUEST,
                "no active turn to steer",
            ));
        };
        if let Some(expected) = expected.filter(|expected| *expected != running) {
            return Err(RpcError::new(
                code::INVALID_REQUEST,
                format!("expected active turn id {expected} but found {running}"),
            ));
        }
        self.call::<SessionSteer>(&SteerParams {
            session: self.shared.session_id.clone(),
            text,
        })
        .await?;
        Ok(json!({ "turnId": running }))
    }

    async fn turn_interrupt(&mut self, params: &Value) -> Result<Value, RpcError> {
        let turn = params
            .get("turnId")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "turnId is required"))?
            .to_string();
        let generation = self.claim().await?;
        self.verify(generation).await?;
        // Only a prompt of this session, named exactly (a session selector would cancel
        // everything queued on it).
        let shown = self
            .call::<SessionShow>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        let known = shown["prompts"].as_array().is_some_and(|prompts| {
            prompts
                .iter()
                .any(|prompt| prompt["id"].as_str() == Some(turn.as_str()))
        });
        if !known {
            return Err(RpcError::new(
                code::INVALID_REQUEST,
                format!("no turn {turn} in this thread"),
            ));
        }
        self.call::<PromptCancel>(&CancelParams { target: turn })
            .await?;
        Ok(json!({}))
    }

    /// The claim's generation, claiming it first when this connection never held it.
    async fn claim(&mut self) -> Result<i64, RpcError> {
        match &self.claim {
            Claim::Held(generation) => return Ok(*generation),
            Claim::Superseded(driver) => return Err(self.superseded(driver.clone())),
            Claim::Unclaimed => {}
        }
        let claimed = self
            .call::<DriverClaim>(&ClaimParams {
                session: self.shared.session_id.clone(),
                take_over: false,
            })
            .await;
        match claimed {
            Ok(claim) => {
                let generation = claim["generation"].as_i64().ok_or_else(|| {
                    RpcError::new(
                        code::INTERNAL,
                        "the daemon answered a claim without a generation",
                    )
                })?;
                self.claim = Claim::Held(generation);
                Ok(generation)
            }
            Err(error) if error.code == code::CLAIMED => {
                let driver = error
                    .data
                    .as_ref()
                    .and_then(|data| data["driver"].as_str())
                    .unwrap_or("?")
                    .to_string();
                Err(RpcError::new(
                    code::CLAIMED,
                    format!(
                        "the session is driven by exec {driver}; this connection receives the \
                         thread's notifications but cannot write while that exec drives"
                    ),
                )
                .with_data(json!({ "driver": driver })))
            }
            Err(error) => Err(error),
        }
    }

    /// Checks with the daemon that this connection still holds the claim of `generation`
    /// (steer and interrupt carry no generation of their own).
    async fn verify(&mut self, generation: i64) -> Result<(), RpcError> {
        let claim = self
            .call::<DriverShow>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        let holder = claim["exec_id"].as_str();
        if holder == Some(self.exec_id.as_str()) && claim["generation"].as_i64() == Some(generation)
        {
            return Ok(());
        }
        Err(self.superseded(describe_driver(&claim)))
    }

    /// Marks the claim lost to `driver`; the refusal every later write gets.
    fn superseded(&mut self, driver: String) -> RpcError {
        let refusal = RpcError::new(
            code::SUPERSEDED,
            format!(
                "superseded by {driver}: this connection lost the session's driver claim; it \
                 keeps receiving the thread's notifications but can no longer write"
            ),
        )
        .with_data(json!({ "driver": driver }));
        self.claim = Claim::Superseded(driver);
        refusal
    }

    /// The session's running prompt, if any.
    async fn running_prompt(&mut self) -> Result<Option<String>, RpcError> {
        let shown = self
            .call::<SessionShow>(&SessionSelector::new(&self.shared.session_id))
            .await?;
        Ok(shown["prompts"].as_array().and_then(|prompts| {
            prompts
                .iter()
                .find(|prompt| prompt["status"].as_str() == Some("running"))
                .and_then(|prompt| prompt["id"].as_str().map(str::to_string))
        }))
    }
}

/// A claim as words naming its driver: `exec X`, or `exec X (since released)`.
fn describe_driver(claim: &Value) -> String {
    match (claim["exec_id"].as_str(), claim["last_exec_id"].as_str()) {
        (Some(exec), _) => format!("exec {exec}"),
        (None, Some(last)) => format!("exec {last} (since released)"),
        (None, None) => "another driver".into(),
    }
}

/// An error answer, shaped as the app-server writes them.
fn error_reply(id: &Value, error: &RpcError) -> Value {
    json!({ "error": error, "id": id })
}

/// A turn's `input` as corral's prompt: the text items joined by newlines, the local images'
/// paths (made absolute).
fn input(params: &Value) -> Result<(String, Vec<String>), RpcError> {
    let items = params
        .get("input")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "input must be an array"))?;
    let mut texts = Vec::new();
    let mut images = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("text") => texts.push(
                item["text"]
                    .as_str()
                    .ok_or_else(|| RpcError::new(code::INVALID_PARAMS, "a text item needs text"))?
                    .to_string(),
            ),
            Some("localImage") => {
                let path = item["path"].as_str().ok_or_else(|| {
                    RpcError::new(code::INVALID_PARAMS, "a localImage item needs a path")
                })?;
                let absolute = std::path::absolute(path).map_err(|error| {
                    RpcError::new(code::INVALID_PARAMS, format!("{path}: {error}"))
                })?;
                images.push(absolute.to_string_lossy().into_owned());
            }
            other => {
                return Err(RpcError::new(
                    code::INVALID_PARAMS,
                    format!(
                        "input items of type {} are not served by corral connect (text and \
                         localImage are)",
                        other.unwrap_or("?")
                    ),
                ))
            }
        }
    }
    let text = texts.join("\n");
    if text.trim().is_empty() && images.is_empty() {
        return Err(RpcError::new(code::INVALID_PARAMS, "the input is empty"));
    }
    Ok((text, images))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_joins_text_and_takes_local_images() {
        let (text, images) = input(&json!({ "input": [
            { "type": "text", "text": "one" },
            { "type": "localImage", "path": "/tmp/a.png" },
            { "type": "text", "text": "two" },
        ]}))
        .unwrap();
        assert_eq!(text, "one\ntwo");
        assert_eq!(images, ["/tmp/a.png"]);
        assert!(input(&json!({ "input": [] })).is_err());
        assert!(input(&json!({ "input": [{ "type": "image", "url": "x" }] })).is_err());
        assert!(input(&json!({})).is_err());
    }
}
