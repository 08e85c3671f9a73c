//! Notifications (#35): a person is told when a prompt ends, when an agent asks them, and when
//! a pause stops work — by a command hook (`notify.command`: `sh -c`, the notification as JSON
//! on its stdin, like pueue's callback), a webhook (`notify.webhook`: the same JSON POSTed)
//! and the desktop (`notify.desktop`: a freedesktop notification over the D-Bus session bus).
//!
//! ```text
//! worker / Corral ──notify()──► filter (notify.events, the project's notify)
//!                                   │ try_send: never waits
//!                    ┌──────────────┼──────────────┐
//!                 hook queue   webhook queue   desktop queue     (bounded, one task each)
//!                    │              │              │
//!               sh -c CMD       POST URL       D-Bus Notify
//! ```
//!
//! The supervisor never waits for a notification: [`Notifier::notify`] puts it on each
//! channel's bounded queue and returns; a full queue drops it and counts it. Each channel
//! delivers on a task of its own, so a hook that hangs (ended with its process group after
//! `notify.timeout_ms`) delays nothing but the hook's next notifications. A channel's failures
//! are recorded once: its first failure is logged and kept for `status` (`notify`), the next
//! ones only counted, until one succeeds again. Notifications are sent by the daemon that
//! runs the session (a shared store's other daemons do not repeat them).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::shared::SettingsCell;
use crate::protocol::status::NotifyChannel as ChannelStatus;
use crate::store::pauses::Pause;
use crate::store::settings::{parse_notify_kinds, Desktop, NotifyKind, Settings};

/// How many notifications wait for a channel before new ones are dropped.
const QUEUE: usize = 256;

/// How many times a webhook is tried, and the wait before each retry.
const WEBHOOK_RETRIES: [Duration; 2] = [Duration::from_millis(500), Duration::from_secs(2)];

/// The longest text a notification carries of a prompt, an answer or an error.
const TEXT: usize = 500;

/// One notification: what happened, and to what. Sent as it serializes.
#[derive(Debug, Clone, Serialize)]
pub struct Notification {
    pub event: NotifyKind,
    /// When it happened (ms since the epoch).
    pub at: i64,
    /// One line for a person: `web · fix-login: done`.
    pub title: String,
    /// What follows the title: the answer's start, the error, what the agent asks.
    pub body: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<Named>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<Named>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptTold>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
    /// The project's own choice of kinds (`projects.notify`), over `notify.events`.
    #[serde(skip)]
    pub project_kinds: Option<String>,
}

/// A session or a project, by id and what a person calls it.
#[derive(Debug, Clone, Serialize)]
pub struct Named {
    pub id: String,
    pub name: Option<String>,
}

/// The prompt a notification is about.
#[derive(Debug, Clone, Serialize)]
pub struct PromptTold {
    pub id: String,
    /// Its text's start.
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a session stands, as a notification names it.
#[derive(Debug, Clone)]
pub struct Place {
    pub session: Named,
    pub project: Named,
    pub project_kinds: Option<String>,
}

impl Notification {
    /// A prompt's end.
    pub fn prompt_ended(
        place: &Place,
        event: NotifyKind,
        prompt: (&str, &str),
        answer: Option<&str>,
        error: Option<&str>,
    ) -> Notification {
        let said = match event {
            NotifyKind::PromptDone => "done",
            NotifyKind::PromptFailed => "failed",
            _ => "cancelled",
        };
        let body = error.or(answer).map(short).unwrap_or_default();
        Notification {
            event,
            at: crate::clock::now_ms(),
            title: format!("{}: {said}", place.title()),
            body,
            session: Some(place.session.clone()),
            project: Some(place.project.clone()),
            prompt: Some(PromptTold {
                id: prompt.0.to_string(),
                text: short(prompt.1),
                answer: answer.map(short),
                error: error.map(short),
            }),
            approval: None,
            pause: None,
            project_kinds: place.project_kinds.clone(),
        }
    }

    /// An agent asks a person.
    pub fn needs_you(
        place: &Place,
        prompt_id: &str,
        asked: &str,
        mut approval: serde_json::Value,
    ) -> Notification {
        // What the engine would do (a whole patch, a file) is cut as the texts are: the
        // notification says what is asked; the approval itself is the page's to show.
        if let Some(input) = approval.get_mut("input") {
            let text = input.to_string();
            if text.chars().count() > TEXT {
                *input = serde_json::Value::String(short(&text));
            }
        }
        Notification {
            event: NotifyKind::NeedsYou,
            at: crate::clock::now_ms(),
            title: format!("{}: needs you", place.title()),
            body: short(asked),
            session: Some(place.session.clone()),
            project: Some(place.project.clone()),
            prompt: Some(PromptTold {
                id: prompt_id.to_string(),
                text: String::new(),
                answer: None,
                error: None,
            }),
            approval: Some(approval),
            pause: None,
            project_kinds: place.project_kinds.clone(),
        }
    }

    /// A pause that stops work; `project_kinds`: its project's choice, for a project's pause.
    pub fn paused(pause: &Pause, project_kinds: Option<String>) -> Notification {
        Notification {
            event: NotifyKind::Paused,
            at: crate::clock::now_ms(),
            title: format!("paused: {}", pause.describe()),
            body: String::new(),
            session: None,
            project: None,
            prompt: None,
            approval: None,
            pause: Some(pause.clone()),
            project_kinds,
        }
    }
}

impl Notification {
    /// A schedule's firing: sent, skipped or refused.
    pub fn schedule(
        event: NotifyKind,
        title: String,
        body: String,
        project_kinds: Option<String>,
    ) -> Notification {
        Notification {
            event,
            at: crate::clock::now_ms(),
            title,
            body: short(&body),
            session: None,
            project: None,
            prompt: None,
            approval: None,
            pause: None,
            project_kinds,
        }
    }
}

impl Place {
    fn title(&self) -> String {
        let session = self
            .session
            .name
            .clone()
            .unwrap_or_else(|| self.session.id.chars().take(8).collect());
        match &self.project.name {
            Some(project) => format!("{project} · {session}"),
            None => session,
        }
    }
}

/// `text`'s first [`TEXT`] characters, on one line's worth of trimming.
fn short(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(TEXT) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The notifier: the three channels' queues and how each fares. Cloneable; the channels'
/// tasks live as long as one clone does.
#[derive(Clone)]
pub struct Notifier {
    settings: SettingsCell,
    hook: Channel,
    webhook: Channel,
    desktop: Channel,
}

#[derive(Clone)]
struct Channel {
    queue: mpsc::Sender<Arc<Notification>>,
    status: Arc<Mutex<ChannelStatus>>,
}

/// What a channel does with one notification.
trait Deliver: Send + 'static {
    fn deliver(
        &mut self,
        notification: &Notification,
        settings: &Settings,
    ) -> impl std::future::Future<Output = Result<(), String>>;
}

impl Channel {
    fn start(name: &str, settings: SettingsCell, mut deliver: impl Deliver) -> Channel {
        let (queue, mut inbox) = mpsc::channel::<Arc<Notification>>(QUEUE);
        let status = Arc::new(Mutex::new(ChannelStatus {
            channel: name.to_string(),
            ..ChannelStatus::default()
        }));
        let fares = status.clone();
        let name = name.to_string();
        actix::spawn(async move {
            while let Some(notification) = inbox.recv().await {
                let settings = settings.now();
                let result = deliver.deliver(&notification, &settings).await;
                let mut status = fares
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                match result {
                    Ok(()) => {
                        if status.failing > 0 {
                            tracing::info!(
                                channel = name,
                                failures = status.failing,
                                "notifications are delivered again"
                            );
                        }
                        status.sent += 1;
                        status.failing = 0;
                        status.error = None;
                    }
                    Err(error) => {
                        if status.failing == 0 {
                            // Once: the next failures are counted until one succeeds.
                            tracing::warn!(channel = name, %error, "a notification was not delivered");
                            status.error = Some(error);
                        }
                        status.failing += 1;
                    }
                }
            }
        });
        Channel { queue, status }
    }

    fn send(&self, notification: &Arc<Notification>) {
        if self.queue.try_send(notification.clone()).is_err() {
            let mut status = self
                .status
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            status.dropped += 1;
        }
    }

    fn status(&self) -> ChannelStatus {
        self.status
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl Notifier {
    /// Starts the channels' tasks (on the current actix system); `home` is given to the hook.
    pub fn start(settings: SettingsCell, home: std::path::PathBuf) -> Notifier {
        Notifier {
            hook: Channel::start("command", settings.clone(), Hook { home }),
            webhook: Channel::start("webhook", settings.clone(), Webhook { agent: None }),
            desktop: Channel::start("desktop", settings.clone(), DesktopBus { connection: None }),
            settings,
        }
    }

    /// Sends `notification` on every channel that is on, if its kind is wanted (the project's
    /// `notify`, else `notify.events`). Never waits.
    pub fn notify(&self, notification: Notification) {
        let settings = self.settings.now();
        let wanted = match notification.project_kinds.as_deref() {
            Some(kinds) => parse_notify_kinds(kinds).unwrap_or_default(),
            None => settings.notify_events.clone(),
        };
        if !wanted.contains(&notification.event) {
            return;
        }
        let notification = Arc::new(notification);
        if settings.notify_command.is_some() {
            self.hook.send(&notification);
        }
        if settings.notify_webhook.is_some() {
            self.webhook.send(&notification);
        }
        if desktop_on(&settings) {
            self.desktop.send(&notification);
        }
    }

    /// How each channel that is on fares.
    pub fn status(&self) -> Vec<ChannelStatus> {
        let settings = self.settings.now();
        let mut status = Vec::new();
        if settings.notify_command.is_some() {
            status.push(self.hook.status());
        }
        if settings.notify_webhook.is_some() {
            status.push(self.webhook.status());
        }
        if desktop_on(&settings) {
            status.push(self.desktop.status());
        }
        status
    }
}

fn desktop_on(settings: &Settings) -> bool {
    match settings.notify_desktop {
        Desktop::On => true,
        Desktop::Off => false,
        Desktop::Auto => {
            std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some_and(|bus| !bus.is_empty())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The channels.

/// `notify.command`: `sh -c COMMAND` in a process group of its own, the notification as JSON
/// on its stdin, `CORRAL_NOTIFY_EVENT` naming its kind; what it prints is not read (a hook
/// that prints a lot costs nothing). It ends with its group: at its exit, or after
/// `notify.timeout_ms`.
struct Hook {
    home: std::path::PathBuf,
}

impl Deliver for Hook {
    async fn deliver(
        &mut self,
        notification: &Notification,
        settings: &Settings,
    ) -> Result<(), String> {
        let Some(command) = settings.notify_command.as_deref() else {
            return Ok(());
        };
        let json = serde_json::to_vec(notification).expect("notifications serialize");
        let mut spawn = tokio::process::Command::new("sh");
        spawn
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .current_dir(&self.home)
            .env(crate::env::HOME, &self.home)
            .env(crate::env::NOTIFY_EVENT, notification.event.as_str());
        for name in crate::env::DAEMON_ONLY {
            spawn.env_remove(name);
        }
        crate::process::dies_with_this_process(&mut spawn);
        let mut child = spawn
            .spawn()
            .map_err(|error| format!("notify.command could not start: {error}"))?;
        let pgid = child.id().map_or(0, |pid| pid as i32);
        let talked = async {
            if let Some(mut stdin) = child.stdin.take() {
                // A hook that does not read its stdin is no failure.
                let _ = stdin.write_all(&json).await;
            }
            child.wait().await
        };
        let ended = tokio::time::timeout(settings.notify_timeout, talked).await;
        // Whatever it left in its group ends with it.
        let status = match ended {
            Ok(status) => {
                crate::process::signal_group(pgid, nix::sys::signal::Signal::SIGKILL);
                status.map_err(|error| error.to_string())?
            }
            Err(_) => {
                crate::process::end_group(&mut child, pgid, Duration::from_millis(200)).await;
                return Err(format!(
                    "notify.command ran longer than notify.timeout_ms ({} ms) and was ended",
                    settings.notify_timeout.as_millis()
                ));
            }
        };
        if status.success() {
            Ok(())
        } else {
            Err(format!("notify.command failed: {status}"))
        }
    }
}

/// `notify.webhook`: a POST of the notification as JSON, each try bounded by
/// `notify.timeout_ms`, tried again twice (after 0.5 s and 2 s) unless the server refused it
/// for good (a 4xx other than 408 and 429).
struct Webhook {
    agent: Option<(Duration, ureq::Agent)>,
}

impl Deliver for Webhook {
    async fn deliver(
        &mut self,
        notification: &Notification,
        settings: &Settings,
    ) -> Result<(), String> {
        let Some(url) = settings.notify_webhook.clone() else {
            return Ok(());
        };
        let timeout = settings.notify_timeout;
        if self.agent.as_ref().is_none_or(|(made, _)| *made != timeout) {
            let config = ureq::Agent::config_builder()
                .timeout_global(Some(timeout))
                .http_status_as_error(false)
                .user_agent(concat!("corral/", env!("CARGO_PKG_VERSION")))
                .build();
            self.agent = Some((timeout, config.into()));
        }
        let agent = self.agent.as_ref().expect("made above").1.clone();
        let body = serde_json::to_vec(notification).expect("notifications serialize");
        let mut waits = WEBHOOK_RETRIES.iter();
        loop {
            let (agent, url, body) = (agent.clone(), url.clone(), body.clone());
            // ureq blocks: off the daemon's thread.
            let tried = tokio::task::spawn_blocking(move || {
                agent
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .send(&body[..])
                    .map(|answer| answer.status().as_u16())
                    .map_err(|error| error.to_string())
            })
            .await
            .map_err(|error| error.to_string())?;
            let error = match tried {
                Ok(status) if (200..300).contains(&status) => return Ok(()),
                Ok(status) => {
                    let error = format!("notify.webhook answered HTTP {status}");
                    if (400..500).contains(&status) && status != 408 && status != 429 {
                        return Err(error);
                    }
                    error
                }
                Err(error) => format!("notify.webhook: {error}"),
            };
            match waits.next() {
                Some(wait) => tokio::time::sleep(*wait).await,
                None => return Err(error),
            }
        }
    }
}

/// `notify.desktop`: `org.freedesktop.Notifications.Notify` on the session bus (the
/// connection made at the first notification, and again after a failure).
struct DesktopBus {
    connection: Option<zbus::Connection>,
}

impl Deliver for DesktopBus {
    async fn deliver(
        &mut self,
        notification: &Notification,
        settings: &Settings,
    ) -> Result<(), String> {
        let connection = match &self.connection {
            Some(connection) => connection.clone(),
            None => {
                let made =
                    tokio::time::timeout(settings.notify_timeout, zbus::Connection::session())
                        .await
                        .map_err(|_| "the session bus did not answer".to_string())?
                        .map_err(|error| format!("no session bus: {error}"))?;
                self.connection = Some(made.clone());
                made
            }
        };
        let urgency_high = matches!(
            notification.event,
            NotifyKind::NeedsYou | NotifyKind::PromptFailed
        );
        let mut hints: std::collections::HashMap<&str, zbus::zvariant::Value<'_>> =
            std::collections::HashMap::new();
        hints.insert(
            "urgency",
            zbus::zvariant::Value::U8(if urgency_high { 2 } else { 1 }),
        );
        // app name, replaces id, icon, summary, body, actions, hints, timeout (the server's).
        let body = (
            "corral",
            0u32,
            "",
            notification.title.as_str(),
            notification.body.as_str(),
            Vec::<&str>::new(),
            hints,
            -1i32,
        );
        let call = connection.call_method(
            Some("org.freedesktop.Notifications"),
            "/org/freedesktop/Notifications",
            Some("org.freedesktop.Notifications"),
            "Notify",
            &body,
        );
        match tokio::time::timeout(settings.notify_timeout, call).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(error)) => {
                self.connection = None;
                Err(format!("desktop notification: {error}"))
            }
            Err(_) => {
                self.connection = None;
                Err("desktop notification: the bus did not answer".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_is_cut_and_a_notification_names_its_session() {
        let place = Place {
            session: Named {
                id: "0123456789".into(),
                name: None,
            },
            project: Named {
                id: "p".into(),
                name: Some("web".into()),
            },
            project_kinds: None,
        };
        let long = "x".repeat(TEXT + 10);
        let told = Notification::prompt_ended(
            &place,
            NotifyKind::PromptFailed,
            ("id", &long),
            None,
            Some("boom"),
        );
        assert_eq!(told.title, "web · 01234567: failed");
        assert_eq!(told.body, "boom");
        let text = &told.prompt.as_ref().unwrap().text;
        assert_eq!(text.chars().count(), TEXT + 1, "cut, with an ellipsis");
        let json = serde_json::to_value(&told).unwrap();
        assert_eq!(json["event"], "prompt.failed");
        assert_eq!(json["prompt"]["error"], "boom");
        assert!(json.get("project_kinds").is_none());
    }
}
