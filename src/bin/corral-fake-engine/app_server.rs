//! `corral-fake-engine app-server`: codex's `app-server` protocol over stdin/stdout.
//!
//! The main thread reads stdin and answers requests in order; every turn runs on a thread of
//! its own and talks to the main thread through its `Control` channel (interrupts, steers
//! and the client's answers to the turn's server requests). Every stdout line goes through
//! `Wire`, whole and flushed.

use super::{answer_text, run_command, sleep_forever, Approval, Script, J};
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// JSON-RPC's "invalid request", which codex uses for every refusal.
const INVALID_REQUEST: i64 = -32600;
const INTERNAL_ERROR: i64 = -32603;
const RATE_LIMIT: &str = "exceeded retry limit, last status: 429 Too Many Requests";
const USAGE_LIMIT: &str = "You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 7:28 AM.";
const OVERLOADED: &str =
    "We're currently experiencing high demand, which may cause temporary errors.";
const CONTEXT_WINDOW: u64 = 121_600;
/// The id of `stray-response`'s answer to a request that was never sent.
const STRAY_RESPONSE_ID: i64 = 987_654;
const METHODS: [&str; 7] = [
    "initialize",
    "thread/start",
    "thread/resume",
    "turn/start",
    "turn/steer",
    "turn/interrupt",
    "thread/compact/start",
];

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

fn now_s() -> u64 {
    now_ms() / 1000
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a time in ms since the epoch (proleptic Gregorian).
fn timestamp(ms: u64) -> String {
    let secs = ms / 1000;
    let (hour, minute, second) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Days since 0000-03-01, counted in 400-year eras of 146097 days.
    let days = (secs / 86_400) as i64 + 719_468;
    let (era, day_of_era) = (days.div_euclid(146_097), days.rem_euclid(146_097));
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{:03}Z",
        ms % 1000
    )
}

/// A tracing-style line on stderr, as codex logs (without the colours).
fn log(level: &str, message: &str) {
    eprintln!(
        "{} {level:>5} corral_fake_engine::app_server: {message}",
        timestamp(now_ms())
    );
}

/// stdout: one whole JSON line at a time, flushed.
struct Wire {
    stdout: Mutex<std::io::Stdout>,
}

impl Wire {
    fn lock(&self) -> MutexGuard<'_, std::io::Stdout> {
        self.stdout.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn raw(&self, bytes: &[u8]) {
        let mut stdout = self.lock();
        // A client that went away is noticed on stdin (EOF), not here.
        let _ = stdout.write_all(bytes);
        let _ = stdout.flush();
    }

    fn send(&self, message: &J) {
        self.raw(format!("{}\n", message.0).as_bytes());
    }

    fn notify(&self, method: &str, params: J) {
        self.send(&obj! {"method" => method, "params" => params, "emittedAtMs" => now_ms()});
    }

    fn respond(&self, id: &J, result: J) {
        self.send(&obj! {"id" => id.clone(), "result" => result});
    }

    fn error(&self, id: &J, code: i64, message: &str) {
        self.send(&obj! {
            "error" => obj! {"code" => code, "message" => message},
            "id" => id.clone(),
        });
    }
}

/// What the main thread tells a running turn.
enum Control {
    Interrupt,
    Steer(String),
    /// The client's answer (the whole message) to the server request with this id.
    Response(i64, Value),
}

/// A refusal: the JSON-RPC error code and message.
struct Refusal(i64, String);

impl From<String> for Refusal {
    fn from(message: String) -> Refusal {
        Refusal(INVALID_REQUEST, message)
    }
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Refusal {
        Refusal(INVALID_REQUEST, message.to_string())
    }
}

/// A thread this process has started or resumed.
struct Loaded {
    /// The thread's file (see [`Server::save`]).
    record: Value,
    active: Option<Active>,
}

/// The turn in progress on a loaded thread.
struct Active {
    turn: String,
    control: Sender<Control>,
}

struct Server {
    wire: Wire,
    state: PathBuf,
    env_script: String,
    /// `clientInfo.name` of `initialize`: the threads' `originator`.
    originator: Mutex<String>,
    threads: Mutex<HashMap<String, Loaded>>,
    /// Server requests waiting for the client's answer: id → the asking turn.
    pending: Mutex<HashMap<i64, Sender<Control>>>,
    next_request: AtomicI64,
    next_item: AtomicU64,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `CORRAL_FAKE_STATE`, else `$CORRAL_HOME/fake-engine`, else a directory under the
/// system's temporary directory.
fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CORRAL_FAKE_STATE").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(home) = std::env::var_os("CORRAL_HOME").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(home).join("fake-engine");
    }
    let uid = nix::unistd::getuid();
    std::env::temp_dir().join(format!("corral-fake-engine-{uid}"))
}

/// Whether process `pid` is alive (a zombie is not).
fn alive(pid: i32) -> bool {
    // No signal (`None`) only checks that the process exists.
    let exists = match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => true,
        Err(_) => false,
    };
    if !exists {
        return false;
    }
    match procfs::process::Process::new(pid).and_then(|process| process.stat()) {
        Ok(stat) => stat.state != 'Z',
        Err(_) => true,
    }
}

/// FNV-1a: a hash that stays the same across processes and builds.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `params[key]` as a string, or codex's refusal of a missing field.
fn string<'a>(params: &'a Value, key: &str) -> Result<&'a str, Refusal> {
    match params.get(key) {
        Some(Value::String(text)) => Ok(text),
        None | Some(Value::Null) => Err(format!("Invalid request: missing field `{key}`").into()),
        Some(other) => {
            Err(format!("Invalid request: invalid type: {other}, expected a string").into())
        }
    }
}

/// `params[key]` as a string when it is given.
fn optional<'a>(params: &'a Value, key: &str) -> Result<Option<&'a str>, Refusal> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => string(params, key).map(Some),
    }
}

/// A user input list: the userMessage content as codex shows it, and its text (the text
/// items, one per line).
fn user_input(params: &Value) -> Result<(J, String), Refusal> {
    let items = match params.get("input") {
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => return Err("Invalid request: missing field `input`".into()),
        Some(other) => {
            return Err(
                format!("Invalid request: invalid type: {other}, expected a sequence").into(),
            )
        }
    };
    let mut content = Vec::new();
    let mut texts = Vec::new();
    for item in items {
        let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
        content.push(match kind {
            "text" => {
                let text = string(item, "text")?;
                texts.push(text.to_string());
                obj! {"type" => "text", "text" => text, "text_elements" => arr![]}
            }
            "localImage" => obj! {"type" => "localImage", "path" => string(item, "path")?},
            "image" => obj! {"type" => "image", "url" => string(item, "url")?},
            _ => J::from(item),
        });
    }
    Ok((J::list(content), texts.join("\n")))
}

/// A turn as codex shows it.
fn turn_json(
    id: &str,
    status: &str,
    items: Option<J>,
    error: J,
    started_at: Option<u64>,
    completed_at: Option<u64>,
    duration_ms: Option<u64>,
) -> J {
    let view = if items.is_some() {
        "summary"
    } else {
        "notLoaded"
    };
    obj! {
        "id" => id,
        "rootTurnId" => id,
        "items" => items.unwrap_or_else(|| arr![]),
        "itemsView" => view,
        "status" => status,
        "error" => error,
        "startedAt" => started_at,
        "completedAt" => completed_at,
        "durationMs" => duration_ms,
    }
}

/// codex's error object (of `error` notifications and failed turns).
fn error_json(message: &str, info: J, details: Option<&str>) -> J {
    obj! {
        "message" => message,
        "codexErrorInfo" => info,
        "additionalDetails" => details,
        "misalignment" => J::null(),
    }
}

fn status_json(status: &str) -> J {
    if status == "active" {
        obj! {"type" => "active", "activeFlags" => arr![]}
    } else {
        obj! {"type" => status}
    }
}

/// The `sandbox` of a thread/start response: codex's policy object for the sandbox modes,
/// anything else echoed as given.
fn sandbox_json(given: &Value, cwd: &str) -> J {
    match given.as_str() {
        None if given.is_null() => obj! {"type" => "readOnly", "networkAccess" => false},
        Some("read-only") => obj! {"type" => "readOnly", "networkAccess" => false},
        Some("workspace-write") => obj! {
            "type" => "workspaceWrite",
            "writableRoots" => arr![cwd],
            "networkAccess" => false,
            "excludeTmpdirEnvVar" => false,
            "excludeSlashTmp" => false,
        },
        Some("danger-full-access") => obj! {"type" => "dangerFullAccess"},
        _ => J::from(given),
    }
}

fn record_str<'a>(record: &'a Value, key: &str) -> &'a str {
    record.get(key).and_then(Value::as_str).unwrap_or("")
}

fn record_u64(record: &Value, key: &str) -> u64 {
    record.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Cuts `text` into codex-like deltas: each word with the whitespace before it.
fn words(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut previous_space = false;
    for (index, character) in text.char_indices() {
        let space = character.is_whitespace();
        if space && !previous_space && index > start {
            pieces.push(&text[start..index]);
            start = index;
        }
        previous_space = space;
    }
    if start < text.len() {
        pieces.push(&text[start..]);
    }
    pieces
}

impl Server {
    fn threads_dir(&self) -> PathBuf {
        self.state.join("threads")
    }

    fn thread_file(&self, id: &str) -> PathBuf {
        self.threads_dir().join(format!("{id}.json"))
    }

    fn lock_file(&self, id: &str) -> PathBuf {
        self.threads_dir().join(format!("{id}.lock"))
    }

    /// Writes a thread's file (whole, by rename).
    fn save(&self, record: &Value) -> Result<(), Refusal> {
        let id = record_str(record, "id");
        let path = self.thread_file(id);
        let temporary = path.with_extension(format!("json.{}", std::process::id()));
        std::fs::create_dir_all(self.threads_dir())
            .and_then(|()| std::fs::write(&temporary, format!("{record:#}\n")))
            .and_then(|()| std::fs::rename(&temporary, &path))
            .map_err(|error| {
                Refusal(
                    INTERNAL_ERROR,
                    format!("failed to write {}: {error}", path.display()),
                )
            })
    }

    /// Takes the thread's writer lock for this process.
    fn lock(&self, id: &str) -> Result<(), Refusal> {
        let path = self.lock_file(id);
        let own = std::process::id() as i32;
        let failed = |error: std::io::Error| {
            Refusal(
                INTERNAL_ERROR,
                format!("failed to lock thread {id}: {error}"),
            )
        };
        std::fs::create_dir_all(self.threads_dir()).map_err(failed)?;
        for _ in 0..3 {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut file) => return file.write_all(own.to_string().as_bytes()).map_err(failed),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|text| text.trim().parse::<i32>().ok());
                    match holder {
                        Some(pid) if pid == own => return Ok(()),
                        Some(pid) if alive(pid) => {
                            return Err(format!("thread {id} already has an active writer").into())
                        }
                        // A lock of a process that is gone.
                        _ => {
                            let _ = std::fs::remove_file(&path);
                        }
                    }
                }
                Err(error) => return Err(failed(error)),
            }
        }
        Err(format!("thread {id} already has an active writer").into())
    }

    /// Removes the locks this process holds (at exit).
    fn unlock_all(&self) {
        let own = std::process::id().to_string();
        for id in locked(&self.threads).keys() {
            let path = self.lock_file(id);
            if std::fs::read_to_string(&path).is_ok_and(|pid| pid.trim() == own) {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// Why a thread that this process has not loaded cannot be used.
    fn not_loaded(&self, id: &str) -> Refusal {
        if uuid::Uuid::parse_str(id).is_ok() && self.thread_file(id).exists() {
            format!("thread not found: {id}").into()
        } else {
            format!("no rollout found for thread id {id}").into()
        }
    }

    /// A thread as codex shows it.
    fn thread_json(&self, record: &Value) -> J {
        let id = record_str(record, "id");
        let cwd = record_str(record, "cwd");
        let created = record_u64(record, "createdAt");
        let updated = record_u64(record, "updatedAt");
        let originator = locked(&self.originator).clone();
        let path = self.thread_file(id).to_string_lossy().into_owned();
        obj! {
            "id" => id,
            "environments" => arr![obj! {
                "environmentId" => "local",
                "cwd" => cwd,
                "runtimeWorkspaceRoots" => arr![cwd],
            }],
            "extra" => J::null(),
            "sessionId" => id,
            "forkedFromId" => J::null(),
            "attachedToThreadId" => J::null(),
            "parentThreadId" => J::null(),
            "preview" => record_str(record, "preview"),
            "ephemeral" => false,
            "section" => J::null(),
            "sectionEnteredAt" => J::null(),
            "projectId" => J::null(),
            "historyMode" => "paginated",
            "modelProvider" => "fake",
            "model" => record_str(record, "model"),
            "reasoningEffort" => J::null(),
            "createdAt" => created,
            "updatedAt" => updated,
            "recencyAt" => updated,
            "status" => status_json("idle"),
            "path" => path,
            "cwd" => cwd,
            "cliVersion" => env!("CARGO_PKG_VERSION"),
            "originator" => originator,
            "source" => "vscode",
            "canAcceptDirectInput" => true,
            "threadSource" => J::null(),
            "agentNickname" => J::null(),
            "agentRole" => J::null(),
            "gitInfo" => J::null(),
            "name" => J::null(),
            "daybreakEnabled" => J::null(),
            "turns" => arr![],
        }
    }

    /// The result of thread/start and thread/resume.
    fn thread_result(&self, record: &Value) -> J {
        let cwd = record_str(record, "cwd");
        let sandbox = record.get("sandbox").unwrap_or(&Value::Null);
        let profile = match sandbox.as_str() {
            Some(mode) => format!(":{mode}"),
            None => ":read-only".to_string(),
        };
        obj! {
            "thread" => self.thread_json(record),
            "model" => record_str(record, "model"),
            "modelProvider" => "fake",
            "serviceTier" => J::null(),
            "disabledPluginIds" => arr![],
            "cwd" => cwd,
            "runtimeWorkspaceRoots" => arr![cwd],
            "instructionSources" => arr![],
            "approvalPolicy" => record.get("approvalPolicy").unwrap_or(&Value::Null),
            "approvalsReviewer" => "user",
            "sandbox" => sandbox_json(sandbox, cwd),
            "activePermissionProfile" => obj! {"id" => profile, "extends" => J::null()},
            "reasoningEffort" => J::null(),
            "multiAgentMode" => "explicitRequestOnly",
        }
    }

    /// Applies the settings a thread/start or thread/resume gives to a thread's record.
    fn apply_settings(record: &mut Value, params: &Value) -> Result<(), Refusal> {
        if let Some(cwd) = optional(params, "cwd")? {
            record["cwd"] = cwd.into();
        }
        if let Some(model) = optional(params, "model")? {
            record["model"] = model.into();
        }
        for key in ["approvalPolicy", "sandbox"] {
            if let Some(value) = params.get(key).filter(|value| !value.is_null()) {
                record[key] = value.clone();
            }
        }
        Ok(())
    }

    fn thread_start(&self, id: &J, params: &Value) -> Result<(), Refusal> {
        let thread = uuid::Uuid::now_v7().to_string();
        let cwd = std::env::current_dir()
            .map(|dir| dir.to_string_lossy().into_owned())
            .unwrap_or_default();
        let now = now_s();
        let mut record = serde_json::json!({
            "id": thread,
            "cwd": cwd,
            "model": "fake-model",
            "approvalPolicy": "on-request",
            "sandbox": null,
            "createdAt": now,
            "updatedAt": now,
            "preview": "",
            "turns": 0,
            "startParams": params,
        });
        Self::apply_settings(&mut record, params)?;
        self.lock(&thread)?;
        self.save(&record)?;
        log(
            "INFO",
            &format!(
                "thread/start {thread}: {}",
                serde_json::to_string(params).unwrap_or_default()
            ),
        );
        let result = self.thread_result(&record);
        let shown = self.thread_json(&record);
        locked(&self.threads).insert(
            thread.clone(),
            Loaded {
                record,
                active: None,
            },
        );
        self.wire.respond(id, result);
        self.wire.notify("thread/started", obj! {"thread" => shown});
        Ok(())
    }

    fn thread_resume(&self, id: &J, params: &Value) -> Result<(), Refusal> {
        let thread = string(params, "threadId")?.to_string();
        let loaded_record = locked(&self.threads)
            .get(&thread)
            .map(|loaded| loaded.record.clone());
        let mut record = match loaded_record {
            Some(record) => record,
            None => {
                let text = uuid::Uuid::parse_str(&thread)
                    .ok()
                    .and_then(|_| std::fs::read_to_string(self.thread_file(&thread)).ok());
                let record = text.and_then(|text| serde_json::from_str::<Value>(&text).ok());
                let Some(record) = record else {
                    return Err(format!("no rollout found for thread id {thread}").into());
                };
                self.lock(&thread)?;
                record
            }
        };
        Self::apply_settings(&mut record, params)?;
        self.save(&record)?;
        log("INFO", &format!("thread/resume {thread}"));
        let result = self.thread_result(&record);
        locked(&self.threads)
            .entry(thread.clone())
            .and_modify(|loaded| loaded.record = record.clone())
            .or_insert(Loaded {
                record,
                active: None,
            });
        self.wire.notify(
            "thread/status/changed",
            obj! {"threadId" => &thread, "status" => status_json("idle")},
        );
        self.wire.respond(id, result);
        Ok(())
    }

    fn turn_start(self: &Arc<Self>, id: &J, params: &Value) -> Result<(), Refusal> {
        let thread = string(params, "threadId")?.to_string();
        let (content, text) = user_input(params)?;
        let turn = uuid::Uuid::now_v7().to_string();
        let (sender, receiver) = mpsc::channel();
        let number = {
            let mut threads = locked(&self.threads);
            let Some(loaded) = threads.get_mut(&thread) else {
                return Err(self.not_loaded(&thread));
            };
            if let Some(active) = &loaded.active {
                return Err(format!(
                    "thread {thread} already has a turn in progress: {}",
                    active.turn
                )
                .into());
            }
            let record = &mut loaded.record;
            let number = record_u64(record, "turns") + 1;
            record["turns"] = number.into();
            record["updatedAt"] = now_s().into();
            if record_str(record, "preview").is_empty() {
                record["preview"] = super::first_line(&text).into();
            }
            let record = record.clone();
            self.save(&record)?;
            loaded.active = Some(Active {
                turn: turn.clone(),
                control: sender.clone(),
            });
            number
        };
        let (script, warnings) = Script::load(&self.env_script, &text);
        if script.stray_response {
            // A response to a request id the client never sent.
            self.wire.respond(&J::from(STRAY_RESPONSE_ID), obj! {});
        }
        let answer =
            obj! {"turn" => turn_json(&turn, "inProgress", None, J::null(), None, None, None)};
        self.wire.respond(id, answer.clone());
        if script.double_response {
            self.wire.respond(id, answer);
        }
        let turn = Turn {
            server: Arc::clone(self),
            thread,
            id: turn,
            number,
            text,
            content,
            script,
            control: receiver,
            sender,
            started: Instant::now(),
            started_at: now_s(),
            steered: None,
        };
        std::thread::spawn(move || turn.run(warnings));
        Ok(())
    }

    /// The control channel of the thread's turn in progress, if any.
    fn active(&self, thread: &str) -> Result<Option<(String, Sender<Control>)>, Refusal> {
        let threads = locked(&self.threads);
        let loaded = threads.get(thread).ok_or_else(|| self.not_loaded(thread))?;
        Ok(loaded
            .active
            .as_ref()
            .map(|active| (active.turn.clone(), active.control.clone())))
    }

    fn turn_steer(&self, id: &J, params: &Value) -> Result<(), Refusal> {
        let thread = string(params, "threadId")?;
        let (_, text) = user_input(params)?;
        // Required, as codex 0.171.0 requires it.
        let expected = string(params, "expectedTurnId")?;
        let Some((turn, control)) = self.active(thread)? else {
            return Err("no active turn to steer".into());
        };
        if expected != turn {
            return Err(format!("expected active turn id {expected} but found {turn}").into());
        }
        self.wire.respond(id, obj! {"turnId" => &turn});
        let _ = control.send(Control::Steer(text));
        Ok(())
    }

    fn turn_interrupt(&self, id: &J, params: &Value) -> Result<(), Refusal> {
        let thread = string(params, "threadId")?;
        let wanted = optional(params, "turnId")?;
        let active = self.active(thread)?;
        self.wire.respond(id, obj! {});
        match active {
            Some((turn, control)) if wanted.is_none_or(|wanted| wanted == turn) => {
                log("INFO", &format!("turn/interrupt {turn}"));
                let _ = control.send(Control::Interrupt);
            }
            _ => log(
                "INFO",
                "turn/interrupt: no such turn in progress (nothing to do)",
            ),
        }
        Ok(())
    }

    /// A compaction: a short turn of its own with a contextCompaction item.
    fn compact(&self, id: &J, params: &Value) -> Result<(), Refusal> {
        let thread = string(params, "threadId")?;
        if let Some((turn, _)) = self.active(thread)? {
            return Err(format!("thread {thread} already has a turn in progress: {turn}").into());
        }
        self.wire.respond(id, obj! {});
        let turn = uuid::Uuid::now_v7().to_string();
        let started = Instant::now();
        let started_at = now_s();
        let item = obj! {"type" => "contextCompaction", "id" => uuid::Uuid::now_v7().to_string()};
        let wire = &self.wire;
        wire.notify(
            "thread/status/changed",
            obj! {"threadId" => thread, "status" => status_json("active")},
        );
        wire.notify(
            "turn/started",
            obj! {
                "threadId" => thread,
                "turn" => turn_json(&turn, "inProgress", None, J::null(), Some(started_at), None, None),
            },
        );
        wire.notify(
            "item/started",
            obj! {"item" => item.clone(), "threadId" => thread, "turnId" => &turn, "startedAtMs" => now_ms()},
        );
        wire.notify(
            "item/completed",
            obj! {
                "item" => item.clone(),
                "threadId" => thread,
                "turnId" => &turn,
                "contentTokenCount" => J::null(),
                "completedAtMs" => now_ms(),
            },
        );
        wire.notify(
            "thread/status/changed",
            obj! {"threadId" => thread, "status" => status_json("idle")},
        );
        let duration = started.elapsed().as_millis() as u64;
        wire.notify(
            "turn/completed",
            obj! {
                "threadId" => thread,
                "turn" => turn_json(&turn, "completed", Some(arr![item]), J::null(), Some(started_at), Some(now_s()), Some(duration)),
            },
        );
        Ok(())
    }

    fn request(self: &Arc<Self>, id: &J, method: &str, params: &Value) -> Result<(), Refusal> {
        match method {
            "thread/start" => self.thread_start(id, params),
            "thread/resume" => self.thread_resume(id, params),
            "turn/start" => self.turn_start(id, params),
            "turn/steer" => self.turn_steer(id, params),
            "turn/interrupt" => self.turn_interrupt(id, params),
            "thread/compact/start" => self.compact(id, params),
            _ => Err(format!("Invalid request: unknown variant `{method}`").into()),
        }
    }

    /// A message from the client that answers one of our server requests.
    fn response(&self, message: Value) {
        let Some(id) = message.get("id").and_then(Value::as_i64) else {
            log(
                "WARN",
                &format!("a response with an unknown id (ignored): {message}"),
            );
            return;
        };
        match locked(&self.pending).remove(&id) {
            Some(turn) => {
                let _ = turn.send(Control::Response(id, message));
            }
            None => log(
                "WARN",
                &format!("a response to no pending request (ignored): {message}"),
            ),
        }
    }
}

/// A turn running on its own thread.
struct Turn {
    server: Arc<Server>,
    thread: String,
    id: String,
    /// Which turn of its thread this is (1-based).
    number: u64,
    text: String,
    content: J,
    script: Script,
    control: Receiver<Control>,
    /// The sending side of `control`, for server requests to answer through.
    sender: Sender<Control>,
    started: Instant,
    started_at: u64,
    steered: Option<String>,
}

/// How a turn ends.
enum End {
    Completed(String),
    Failed(J),
    Interrupted,
}

/// The turn was interrupted.
struct Stop;

impl Turn {
    fn wire(&self) -> &Wire {
        &self.server.wire
    }

    fn item_id(&self, prefix: &str) -> String {
        let number = self.server.next_item.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{prefix}_fake_{number}")
    }

    fn item_started(&self, item: J) {
        self.wire().notify(
            "item/started",
            obj! {"item" => item, "threadId" => &self.thread, "turnId" => &self.id, "startedAtMs" => now_ms()},
        );
    }

    fn item_completed(&self, item: J) {
        self.wire().notify(
            "item/completed",
            obj! {
                "item" => item,
                "threadId" => &self.thread,
                "turnId" => &self.id,
                "contentTokenCount" => J::null(),
                "completedAtMs" => now_ms(),
            },
        );
    }

    fn status(&self, status: &str) {
        self.wire().notify(
            "thread/status/changed",
            obj! {"threadId" => &self.thread, "status" => status_json(status)},
        );
    }

    fn error(&self, error: J, will_retry: bool) {
        self.wire().notify(
            "error",
            obj! {
                "error" => error,
                "willRetry" => will_retry,
                "threadId" => &self.thread,
                "turnId" => &self.id,
            },
        );
    }

    /// Handles one control message; an interrupt stops the turn unless ignored.
    fn control(&mut self, control: Control) -> Result<Option<(i64, Value)>, Stop> {
        match control {
            Control::Interrupt if self.script.ignore_interrupt => {
                log(
                    "INFO",
                    &format!("turn {}: interrupt ignored (ignore-interrupt)", self.id),
                );
                Ok(None)
            }
            Control::Interrupt => Err(Stop),
            Control::Steer(text) => {
                self.steered = Some(text);
                Ok(None)
            }
            Control::Response(id, message) => Ok(Some((id, message))),
        }
    }

    /// Sleeps `ms`, interruptibly.
    fn pause(&mut self, ms: u64) -> Result<(), Stop> {
        let deadline = Instant::now() + Duration::from_millis(ms);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            match self.control.recv_timeout(left) {
                Ok(control) => {
                    self.control(control)?;
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
    }

    /// Waits until a steer (or an interrupt) comes.
    fn hang(&mut self) -> Result<(), Stop> {
        while self.steered.is_none() {
            match self.control.recv() {
                Ok(control) => {
                    self.control(control)?;
                }
                Err(_) => sleep_forever(),
            }
        }
        Ok(())
    }

    /// Sends a server request and waits for the client's answer: `Ok(result)` or
    /// `Err(error)`.
    fn ask(&mut self, method: &str, params: J) -> Result<Result<Value, Value>, Stop> {
        let id = self.server.next_request.fetch_add(1, Ordering::Relaxed);
        locked(&self.server.pending).insert(id, self.sender.clone());
        self.wire()
            .send(&obj! {"id" => id, "method" => method, "params" => params});
        loop {
            let control = match self.control.recv() {
                Ok(control) => control,
                Err(_) => sleep_forever(),
            };
            match self.control(control) {
                Ok(Some((answered, message))) if answered == id => {
                    return Ok(match message.get("error") {
                        Some(error) => Err(error.clone()),
                        None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                    })
                }
                Ok(_) => {}
                Err(Stop) => {
                    locked(&self.server.pending).remove(&id);
                    return Err(Stop);
                }
            }
        }
    }

    fn command_item(
        &self,
        id: &str,
        command: &str,
        status: &str,
        output: Option<(&str, i32, u64)>,
    ) -> J {
        let cwd = self.cwd();
        obj! {
            "type" => "commandExecution",
            "id" => id,
            "command" => command,
            "cwd" => cwd,
            "processId" => J::null(),
            "source" => "agent",
            "status" => status,
            "commandActions" => arr![obj! {"type" => "unknown", "command" => command}],
            "aggregatedOutput" => output.map(|(text, _, _)| text),
            "exitCode" => output.map(|(_, code, _)| code),
            "durationMs" => output.map(|(_, _, ms)| ms),
        }
    }

    /// The variables the thread's config asks commands to get
    /// (`config: {"shell_environment_policy.set": {NAME: VALUE}}` at `thread/start`).
    fn shell_env(&self) -> Vec<(String, String)> {
        locked(&self.server.threads)
            .get(&self.thread)
            .and_then(|loaded| {
                let set = loaded
                    .record
                    .get("startParams")?
                    .get("config")?
                    .get("shell_environment_policy.set")?;
                Some(
                    set.as_object()?
                        .iter()
                        .filter_map(|(name, value)| {
                            Some((name.clone(), value.as_str()?.to_string()))
                        })
                        .collect(),
                )
            })
            .unwrap_or_default()
    }

    fn cwd(&self) -> String {
        locked(&self.server.threads)
            .get(&self.thread)
            .map(|loaded| record_str(&loaded.record, "cwd").to_string())
            .unwrap_or_default()
    }

    /// Runs `command` (when allowed) and completes its item.
    fn finish_command(&self, id: &str, command: &str) {
        let started = Instant::now();
        let cwd = self.cwd();
        let env = self.shell_env();
        let (output, code) = run_command(command, Some(std::path::Path::new(&cwd)), &env);
        let status = if code == 0 { "completed" } else { "failed" };
        let elapsed = started.elapsed().as_millis() as u64;
        self.item_completed(self.command_item(id, command, status, Some((&output, code, elapsed))));
    }

    /// `approval=`: asks the client, returns the answer text.
    fn approval(&mut self, kind: Approval) -> Result<String, Stop> {
        let (method, item_id) = match kind {
            Approval::Command => (
                "item/commandExecution/requestApproval",
                self.item_id("call"),
            ),
            Approval::File => ("item/fileChange/requestApproval", self.item_id("patch")),
        };
        let command = self
            .script
            .run
            .clone()
            .unwrap_or_else(|| "touch fake-engine.txt".to_string());
        let changes = arr![obj! {
            "path" => "fake-engine.txt",
            "kind" => obj! {"type" => "add"},
            "diff" => "fake engine\n",
        }];
        let file_item = |status: &str| {
            obj! {"type" => "fileChange", "id" => &item_id, "changes" => changes.clone(), "status" => status}
        };
        let params = match kind {
            Approval::Command => {
                self.item_started(self.command_item(&item_id, &command, "inProgress", None));
                obj! {
                    "threadId" => &self.thread,
                    "turnId" => &self.id,
                    "itemId" => &item_id,
                    "command" => &command,
                    "cwd" => self.cwd(),
                    "commandActions" => arr![obj! {"type" => "unknown", "command" => &command}],
                }
            }
            Approval::File => {
                self.item_started(file_item("inProgress"));
                obj! {
                    "threadId" => &self.thread,
                    "turnId" => &self.id,
                    "itemId" => &item_id,
                    "reason" => J::null(),
                    "grantRoot" => J::null(),
                }
            }
        };
        let answer = self.ask(method, params)?;
        let (decision, text) = match &answer {
            Ok(result) => {
                let decision = match result.get("decision") {
                    Some(Value::String(decision)) => decision.clone(),
                    Some(other) => other.to_string(),
                    None => "null".to_string(),
                };
                (decision.clone(), format!("approval: {decision}"))
            }
            Err(error) => (
                String::new(),
                format!("approval: error {}", error_message(error)),
            ),
        };
        let accepted = decision.starts_with("accept");
        match kind {
            Approval::Command if accepted && self.script.run.is_some() => {
                self.finish_command(&item_id, &command)
            }
            Approval::Command => {
                let status = if accepted { "completed" } else { "declined" };
                let output = accepted.then_some(("", 0, 0));
                self.item_completed(self.command_item(&item_id, &command, status, output));
            }
            Approval::File => {
                self.item_completed(file_item(if accepted { "completed" } else { "declined" }))
            }
        }
        Ok(text)
    }

    /// The turn's failure, if the script asks for one (`rate-limit` counts attempts).
    fn failure(&self) -> Option<J> {
        if self.script.rate_limit > 0 {
            let attempt = self.count_attempt();
            if attempt <= self.script.rate_limit {
                let info =
                    obj! {"responseTooManyFailedAttempts" => obj! {"httpStatusCode" => 429u64}};
                return Some(error_json(RATE_LIMIT, info, None));
            }
        }
        if self.script.usage_limit {
            return Some(error_json(USAGE_LIMIT, J::from("usageLimitExceeded"), None));
        }
        if self.script.overloaded {
            return Some(error_json(OVERLOADED, J::from("serverOverloaded"), None));
        }
        self.script
            .fail
            .as_ref()
            .map(|message| error_json(message, J::from("other"), None))
    }

    /// Counts one more attempt of this turn's text in the state dir; returns the count.
    fn count_attempt(&self) -> u64 {
        let dir = self.server.state.join("attempts");
        let path = dir.join(format!("{:016x}", fnv1a(&self.text)));
        let count = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .unwrap_or(0)
            + 1;
        if let Err(error) =
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, format!("{count}\n")))
        {
            log(
                "WARN",
                &format!("cannot count attempts in {}: {error}", path.display()),
            );
        }
        count
    }

    /// Everything between the user message and the answer.
    fn body(&mut self) -> Result<End, Stop> {
        self.pause(self.script.delay_ms)?;
        let retries = self.script.will_retry;
        for retry in 1..=retries {
            let info = obj! {"responseStreamDisconnected" => obj! {"httpStatusCode" => 429u64}};
            let message = format!("Reconnecting... {retry}/{retries}");
            self.error(error_json(&message, info, Some(RATE_LIMIT)), true);
            self.pause(self.script.interval_ms)?;
        }
        if let Some(error) = self.failure() {
            return Ok(End::Failed(error));
        }
        let mut answer = None;
        if let Some(kind) = self.script.approval {
            answer = Some(self.approval(kind)?);
        } else if let Some(command) = self.script.run.clone() {
            let id = self.item_id("call");
            self.item_started(self.command_item(&id, &command, "inProgress", None));
            self.finish_command(&id, &command);
        }
        if self.script.unknown_request {
            let params = obj! {"threadId" => &self.thread, "turnId" => &self.id};
            let text = match self.ask("fake/unknownRequest", params)? {
                Ok(result) => result.to_string(),
                Err(error) => error_message(&error),
            };
            answer = Some(format!("unknown request: {text}"));
        }
        for step in 1..=self.script.deltas {
            let id = self.item_id("rs");
            self.item_started(
                obj! {"type" => "reasoning", "id" => &id, "summary" => arr![], "content" => arr![]},
            );
            self.item_completed(obj! {
                "type" => "reasoning",
                "id" => &id,
                "summary" => arr![format!("step {step}")],
                "content" => arr![],
            });
            self.pause(self.script.interval_ms)?;
        }
        if self.script.garbage {
            self.wire().raw(b"this is not JSON {\"method\":\n");
            self.wire().raw(b"\xff\xfe invalid \xc3\x28 utf-8 \x80\n");
        }
        if self.script.hang || self.script.ignore_interrupt {
            self.hang()?;
        }
        Ok(End::Completed(match (&self.steered, answer) {
            (Some(steer), _) => format!("steered: {steer}"),
            (None, Some(answer)) => answer,
            (None, None) => answer_text(&self.script, &self.text),
        }))
    }

    fn run(mut self, warnings: Vec<String>) {
        for warning in warnings {
            log("WARN", &format!("{warning} (turn {})", self.id));
        }
        if let Some(text) = &self.script.stderr {
            eprintln!("{text}");
        }
        self.status("active");
        let turn = turn_json(
            &self.id,
            "inProgress",
            None,
            J::null(),
            Some(self.started_at),
            None,
            None,
        );
        self.wire().notify(
            "turn/started",
            obj! {"threadId" => &self.thread, "turn" => turn},
        );
        let user_id = uuid::Uuid::now_v7().to_string();
        let user_started = now_ms();
        let user = |completed: Option<u64>| {
            obj! {
                "type" => "userMessage",
                "id" => &user_id,
                "clientId" => J::null(),
                "content" => self.content.clone(),
                "startedAtMs" => user_started,
                "completedAtMs" => completed,
            }
        };
        self.item_started(user(None));
        self.item_completed(user(Some(now_ms())));
        if let Some(code) = self.script.exit_mid_turn {
            let item = self.agent_item("msg_fake_cut", "", now_ms(), None);
            let line = format!(r#"{{"method":"item/started","params":{{"item":{}"#, item.0);
            let mut stdout = self.wire().lock();
            let _ = stdout.write_all(&line.as_bytes()[..line.len() / 2]);
            let _ = stdout.flush();
            log("INFO", &format!("exit-mid-turn: exiting with {code}"));
            std::process::exit(code);
        }
        if self.script.crash {
            let _stdout = self.wire().lock();
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
            sleep_forever();
        }
        let end = self.body().unwrap_or(End::Interrupted);
        self.finish(end);
    }

    fn agent_item(&self, id: &str, text: &str, started: u64, completed: Option<u64>) -> J {
        obj! {
            "type" => "agentMessage",
            "moderation" => J::null(),
            "id" => id,
            "text" => text,
            "phase" => J::null(),
            "memoryCitation" => J::null(),
            "delivery" => J::null(),
            "questions" => J::null(),
            "startedAtMs" => started,
            "completedAtMs" => completed,
        }
    }

    /// Marks the thread idle again (before anything says the turn ended).
    fn release(&self) {
        if let Some(loaded) = locked(&self.server.threads).get_mut(&self.thread) {
            if loaded
                .active
                .as_ref()
                .is_some_and(|active| active.turn == self.id)
            {
                loaded.active = None;
            }
        }
    }

    fn completed(&self, status: &str, items: Option<J>, error: J) {
        let duration = self.started.elapsed().as_millis() as u64;
        let turn = turn_json(
            &self.id,
            status,
            items,
            error,
            Some(self.started_at),
            Some(now_s()),
            Some(duration),
        );
        let params = obj! {"threadId" => &self.thread, "turn" => turn};
        if !self.script.final_no_newline {
            self.wire().notify("turn/completed", params);
            return;
        }
        // The last line, without its newline, then the process ends at once.
        self.server.unlock_all();
        let line =
            obj! {"method" => "turn/completed", "params" => params, "emittedAtMs" => now_ms()};
        let mut stdout = self.wire().lock();
        let _ = stdout.write_all(line.0.as_bytes());
        let _ = stdout.flush();
        log("INFO", "final-no-newline: exiting with 0");
        std::process::exit(0);
    }

    fn finish(self, end: End) {
        match end {
            End::Completed(answer) => {
                let id = self.item_id("msg");
                let started_ms = now_ms();
                self.item_started(self.agent_item(&id, "", started_ms, None));
                for delta in words(&answer) {
                    self.wire().notify(
                        "item/agentMessage/delta",
                        obj! {"threadId" => &self.thread, "turnId" => &self.id, "itemId" => &id, "delta" => delta},
                    );
                }
                let item = self.agent_item(&id, &answer, started_ms, Some(now_ms()));
                self.item_completed(item.clone());
                self.wire()
                    .notify("thread/tokenUsage/updated", self.token_usage());
                self.wire()
                    .notify("account/rateLimits/updated", rate_limits());
                self.release();
                self.status("idle");
                self.completed("completed", Some(arr![item]), J::null());
            }
            End::Failed(error) => {
                self.release();
                self.status("systemError");
                self.error(error.clone(), false);
                self.completed("failed", None, error);
            }
            End::Interrupted => {
                self.release();
                self.status("idle");
                self.completed("interrupted", None, J::null());
            }
        }
    }

    fn token_usage(&self) -> J {
        let breakdown = |turns: u64| {
            obj! {
                "totalTokens" => 110 * turns,
                "inputTokens" => 100 * turns,
                "cachedInputTokens" => 0u64,
                "cacheWriteInputTokens" => 0u64,
                "outputTokens" => 10 * turns,
                "reasoningOutputTokens" => 0u64,
            }
        };
        obj! {
            "threadId" => &self.thread,
            "turnId" => &self.id,
            "tokenUsage" => obj! {
                "total" => breakdown(self.number),
                "last" => breakdown(1),
                "modelContextWindow" => CONTEXT_WINDOW,
            },
        }
    }
}

fn rate_limits() -> J {
    obj! {"rateLimits" => obj! {
        "limitId" => "codex",
        "limitName" => J::null(),
        "normalModelSlug" => J::null(),
        "primary" => J::null(),
        "secondary" => J::null(),
        "credits" => J::null(),
        "individualLimit" => J::null(),
        "spendControlReached" => J::null(),
        "planType" => J::null(),
        "rateLimitReachedType" => J::null(),
    }}
}

/// The message of a JSON-RPC error object (or the object itself).
fn error_message(error: &Value) -> String {
    match error.get("message").and_then(Value::as_str) {
        Some(message) => message.to_string(),
        None => error.to_string(),
    }
}

pub(super) fn run() -> ! {
    let env_script = std::env::var("CORRAL_FAKE_SCRIPT").unwrap_or_default();
    let (script, warnings) = Script::load(&env_script, "");
    for warning in warnings {
        log("WARN", &format!("CORRAL_FAKE_SCRIPT: {warning}"));
    }
    if script.ignore_sigterm {
        // SAFETY: setting a signal's disposition to "ignore" installs no handler code.
        unsafe {
            let _ = nix::sys::signal::signal(
                nix::sys::signal::Signal::SIGTERM,
                nix::sys::signal::SigHandler::SigIgn,
            );
        }
    }
    let no_initialize = match std::env::var("CORRAL_FAKE_APP_SERVER") {
        Ok(mode) if mode.trim() == "no-initialize" => true,
        Ok(mode) if !mode.trim().is_empty() => {
            log(
                "WARN",
                &format!("CORRAL_FAKE_APP_SERVER: unknown mode '{mode}' (ignored)"),
            );
            false
        }
        _ => false,
    };
    let state = state_dir();
    let server = Arc::new(Server {
        wire: Wire {
            stdout: Mutex::new(std::io::stdout()),
        },
        state,
        env_script,
        originator: Mutex::new("corral-fake-engine".to_string()),
        threads: Mutex::new(HashMap::new()),
        pending: Mutex::new(HashMap::new()),
        next_request: AtomicI64::new(0),
        next_item: AtomicU64::new(0),
    });
    log(
        "INFO",
        &format!(
            "corral-fake-engine {} app-server listening on stdio:// (state dir {})",
            env!("CARGO_PKG_VERSION"),
            server.state.display()
        ),
    );
    let mut initialized = false;
    let mut stdin = std::io::stdin().lock();
    let mut line = Vec::new();
    loop {
        line.clear();
        match stdin.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) => {
                log("ERROR", &format!("reading stdin: {error}"));
                break;
            }
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let message = match serde_json::from_str::<Value>(text.trim()) {
            Ok(message @ Value::Object(_)) => message,
            Ok(_) | Err(_) => {
                log(
                    "WARN",
                    &format!("not a JSON-RPC message (ignored): {}", text.trim_end()),
                );
                continue;
            }
        };
        if no_initialize && message.get("method").and_then(Value::as_str) == Some("initialize") {
            log("INFO", "no-initialize: initialize left unanswered");
            continue;
        }
        handle(&server, message, &mut initialized);
    }
    log("INFO", "stdin closed: exiting");
    server.unlock_all();
    // Holding the wire: no turn writes half a line while the process ends.
    let _stdout = server.wire.lock();
    std::process::exit(0)
}

fn handle(server: &Arc<Server>, message: Value, initialized: &mut bool) {
    let method = message.get("method").and_then(Value::as_str);
    let id = message.get("id").filter(|id| !id.is_null());
    let (Some(method), Some(id)) = (method, id) else {
        match (method, id) {
            (Some("initialized"), None) => {}
            (Some(method), None) => log("INFO", &format!("notification {method} (ignored)")),
            (None, Some(_)) => server.response(message),
            _ => log(
                "WARN",
                &format!("not a request, notification or response (ignored): {message}"),
            ),
        }
        return;
    };
    let id = J::from(id);
    let params = message.get("params").cloned().unwrap_or(Value::Null);
    let outcome = if !METHODS.contains(&method) {
        Err(format!("Invalid request: unknown variant `{method}`").into())
    } else if method == "initialize" {
        if *initialized {
            Err("Already initialized".into())
        } else {
            *initialized = true;
            initialize(server, &id, &params);
            Ok(())
        }
    } else if !*initialized {
        Err("Not initialized".into())
    } else {
        server.request(&id, method, &params)
    };
    if let Err(Refusal(code, text)) = outcome {
        log("INFO", &format!("{method} refused: {text}"));
        server.wire.error(&id, code, &text);
    }
}

fn initialize(server: &Server, id: &J, params: &Value) {
    if let Some(name) = params
        .get("clientInfo")
        .and_then(|info| info.get("name"))
        .and_then(Value::as_str)
    {
        *locked(&server.originator) = name.to_string();
    }
    let home = server.state.to_string_lossy().into_owned();
    server.wire.respond(
        id,
        obj! {
            "userAgent" => format!("corral-fake-engine/{}", env!("CARGO_PKG_VERSION")),
            "codexHome" => home,
            "platformFamily" => "unix",
            "platformOs" => "linux",
        },
    );
}
