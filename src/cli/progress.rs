//! The status line of `send --wait` and `attach`: while a prompt waits — for a slot, out a
//! retry's delay, for its project's app-server to restart — one line on stderr says why, and
//! for how long, and is cleared when the wait ends.
//!
//! It is only ever drawn when stderr is a terminal (and indicatif also stays hidden when
//! `TERM` is unset or `dumb`): piped or redirected, a command prints exactly what it printed
//! before. The line never mixes with the command's output: whatever is printed while it shows
//! goes through [`StatusLine::print`], which clears it, prints, and draws it again.
//!
//! The file has two parts. [`Wait`] is pure: it follows the events of the prompt being waited
//! for ([`Wait::observe`]) and renders the line from its state and a moment
//! ([`Wait::line`]), so the texts and the countdown are unit-tested without a terminal.
//! [`StatusLine`] puts that line on the terminal with an indicatif spinner and redraws it
//! once a second ([`StatusLine::tick`]).
//!
//! Which events count:
//!
//! | event | the line |
//! |---|---|
//! | `slot.waiting` | `waiting 3 s for a slot — project api locked by session "Fix the client"` (what holds it comes from the payload's `held_by`, a [`Blocker`]; without one: `waiting 3 s for a codex slot (project api)`) |
//! | `retry.scheduled` | `rate limited — retry 2/3 in 44 s`, counting down from `delay_ms` (`retry`/`retries` when the payload has them, else the next attempt's number) |
//! | `app_server.unavailable` | `app-server restarting — retry in 12 s (REASON)`, counting down from `retry_in_ms` |
//! | any other event of the prompt (`slot.granted`, `run.started`, `prompt.done`…) | cleared |

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::remote::{cut, one_line};
use crate::actors::slots::Blocker;
use crate::events::Payload;
use crate::store::events::Event;

/// The spinner's frames; it moves on at each redraw (once a second while a wait goes on).
/// Braille characters, which nothing else corral prints contains: tests/it/status_line.rs finds
/// the line on a terminal by them.
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// How many characters of a reason a line shows.
const REASON_CHARS: usize = 80;

// ---------------------------------------------------------------------------------------------
// The pure part.

/// What the followed prompt waits for now, if anything.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Wait {
    /// Nothing: the line is not shown.
    #[default]
    None,
    /// A slot, since `since`.
    Slot {
        since: Instant,
        engine: String,
        /// The project's name (the payload's `project`).
        project: String,
        groups: Vec<String>,
        held_by: Option<Blocker>,
    },
    /// The delay before a retry, which ends at `until`.
    Retry {
        until: Instant,
        /// The failure class (`rate_limit`, `overloaded`, `writer_conflict`…).
        reason: String,
        /// This retry's number within its class (1-based) and how many that class gets.
        retry: Option<u64>,
        retries: Option<u64>,
        next_attempt: Option<u64>,
        new_thread: bool,
    },
    /// The project's app-server child, whose next start is allowed at `until`.
    AppServer { until: Instant, reason: String },
}

impl Wait {
    /// Follows one event of the prompt: its `payload`, and `age`, how long ago it happened (so
    /// that a countdown started by an event read late is not too long). `now` is the moment
    /// it is read.
    pub fn observe(&mut self, payload: &Payload, age: Duration, now: Instant) {
        let at = now.checked_sub(age).unwrap_or(now);
        let known = |text: &str| if text.is_empty() { "?" } else { text }.to_string();
        *self = match payload {
            Payload::SlotWaiting(waiting) => Wait::Slot {
                since: at,
                engine: known(&waiting.engine),
                project: known(&waiting.project),
                groups: waiting.groups.clone(),
                // A holder this build cannot read (a newer daemon's) is left out, not an error.
                held_by: Some(&waiting.held_by)
                    .filter(|held_by| !held_by.is_null())
                    .and_then(|held_by| serde_json::from_value(held_by.clone()).ok()),
            },
            Payload::RetryScheduled(retry) => Wait::Retry {
                until: at + Duration::from_millis(retry.delay_ms),
                reason: if retry.reason.is_empty() {
                    "failed".into()
                } else {
                    retry.reason.clone()
                },
                retry: retry.retry,
                retries: retry.retries,
                // 0: an event without it.
                next_attempt: u64::try_from(retry.next_attempt).ok().filter(|n| *n > 0),
                new_thread: retry.new_thread,
            },
            Payload::AppServerUnavailable(unavailable) => Wait::AppServer {
                until: at + Duration::from_millis(unavailable.retry_in_ms),
                reason: unavailable.reason.clone(),
            },
            _ => Wait::None,
        };
    }

    /// [`observe`](Self::observe) for a session event read now.
    pub fn observe_event(&mut self, event: &Event, now: Instant) {
        let age = crate::store::now_ms().saturating_sub(event.at).max(0) as u64;
        self.observe(&event.payload(), Duration::from_millis(age), now);
    }

    /// The line at `now`; `None` while nothing is waited for.
    pub fn line(&self, now: Instant) -> Option<String> {
        match self {
            Wait::None => None,
            Wait::Slot {
                since,
                engine,
                project,
                groups,
                held_by,
            } => {
                let waited = seconds(now.saturating_duration_since(*since).as_secs());
                Some(match held_by {
                    Some(blocker) => {
                        format!("waiting {waited} for a slot — {}", why(blocker, project))
                    }
                    None if groups.is_empty() => {
                        format!("waiting {waited} for a {engine} slot (project {project})")
                    }
                    None => format!(
                        "waiting {waited} for a {engine} slot (project {project}, groups {})",
                        groups.join(", ")
                    ),
                })
            }
            Wait::Retry {
                until,
                reason,
                retry,
                retries,
                next_attempt,
                new_thread,
            } => {
                let what = match reason.as_str() {
                    "rate_limit" => "rate limited".to_string(),
                    "overloaded" => "engine overloaded".to_string(),
                    "writer_conflict" => "thread busy (writer conflict)".to_string(),
                    "missing_rollout" => "rollout missing".to_string(),
                    other => other.replace('_', " "),
                };
                let count = match (retry, retries, next_attempt) {
                    (Some(retry), Some(retries), _) => format!("retry {retry}/{retries}"),
                    (Some(retry), None, _) => format!("retry {retry}"),
                    (None, _, Some(attempt)) => format!("attempt {attempt}"),
                    (None, _, None) => "retry".to_string(),
                };
                let thread = if *new_thread { " in a new thread" } else { "" };
                Some(format!(
                    "{what} — {count}{thread} {}",
                    countdown(*until, now)
                ))
            }
            Wait::AppServer { until, reason } => {
                let reason = cut(&one_line(reason), REASON_CHARS);
                let when = match countdown(*until, now) {
                    now if now == "now" => "retrying now".to_string(),
                    later => format!("retry {later}"),
                };
                Some(if reason.is_empty() {
                    format!("app-server restarting — {when}")
                } else {
                    format!("app-server restarting — {when} ({reason})")
                })
            }
        }
    }

    /// When the line's text changes next by time alone (a second more waited, a second less
    /// to go); `None` when it does not (nothing shown, or a countdown at its end).
    pub fn next_change(&self, now: Instant) -> Option<Instant> {
        match self {
            Wait::None => None,
            Wait::Slot { since, .. } => {
                let waited = now.saturating_duration_since(*since).as_secs();
                Some(*since + Duration::from_secs(waited + 1))
            }
            Wait::Retry { until, .. } | Wait::AppServer { until, .. } => {
                let left = until.saturating_duration_since(now);
                if left.is_zero() {
                    return None;
                }
                // Shown as ⌈left⌉ seconds: the text changes when that drops by one.
                let shown = left.as_millis().div_ceil(1000) as u64;
                Some(*until - Duration::from_secs(shown - 1))
            }
        }
    }
}

/// `12 s`, `2 min`, `2 min 5 s`.
fn seconds(total: u64) -> String {
    match (total / 60, total % 60) {
        (0, seconds) => format!("{seconds} s"),
        (minutes, 0) => format!("{minutes} min"),
        (minutes, seconds) => format!("{minutes} min {seconds} s"),
    }
}

/// `in 44 s` (rounded up), or `now` once `until` is reached.
fn countdown(until: Instant, now: Instant) -> String {
    let left = until.saturating_duration_since(now);
    if left.is_zero() {
        return "now".to_string();
    }
    format!("in {}", seconds(left.as_millis().div_ceil(1000) as u64))
}

/// Why a request waits, in words: [`Blocker::describe`] (the daemon stores the same words as
/// a waiting session's reason).
pub fn why(blocker: &Blocker, project: &str) -> String {
    blocker.describe(project)
}

// ---------------------------------------------------------------------------------------------
// The terminal.

/// The status line on stderr. Without a terminal it only keeps the state: nothing is drawn.
pub struct StatusLine {
    wait: Wait,
    /// Whether stderr is a terminal (decided once).
    terminal: bool,
    /// The spinner while a line shows; made when a wait begins, cleared when it ends.
    bar: Option<ProgressBar>,
    /// The line the bar shows (without the spinner's frame).
    shown: Option<String>,
    /// Redraws so far: picks the spinner's frame.
    frame: usize,
}

impl StatusLine {
    /// A status line on stderr, drawn only if stderr is a terminal.
    pub fn stderr() -> StatusLine {
        StatusLine::new(std::io::stderr().is_terminal())
    }

    /// A status line that draws (on stderr) only if `terminal`.
    pub fn new(terminal: bool) -> StatusLine {
        StatusLine {
            wait: Wait::None,
            terminal,
            bar: None,
            shown: None,
            frame: 0,
        }
    }

    /// Follows an event of the prompt and redraws (or clears) the line.
    pub fn observe(&mut self, event: &Event) {
        self.wait.observe_event(event, Instant::now());
        self.refresh();
    }

    /// Follows an event and prints what `print` prints (e.g. the event itself) without mixing
    /// it with the line: a wait that ends with this event is cleared before the printing, a
    /// wait that begins with it is drawn after.
    pub fn observe_and_print<R>(&mut self, event: &Event, print: impl FnOnce() -> R) -> R {
        self.wait.observe_event(event, Instant::now());
        self.print(print)
    }

    /// Runs `print` (which writes to stdout or stderr) with the line out of the way, then
    /// draws the line again if a wait goes on.
    pub fn print<R>(&mut self, print: impl FnOnce() -> R) -> R {
        if self.wait.line(Instant::now()).is_none() {
            self.clear_bar();
        }
        let result = match &self.bar {
            Some(bar) => bar.suspend(print),
            None => print(),
        };
        self.refresh();
        result
    }

    /// Resolves when the line should be redrawn (a second has passed in the wait), and redraws
    /// it; never resolves while nothing is waited for. Cancel-safe: meant for a `select!`
    /// beside the event stream.
    pub async fn tick(&mut self) {
        match self.wait.next_change(Instant::now()) {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
        self.refresh();
    }

    /// Ends the wait and clears the line.
    pub fn clear(&mut self) {
        self.wait = Wait::None;
        self.clear_bar();
    }

    /// Draws the line for the state now: makes the bar when a wait begins, clears it when the
    /// wait ends.
    fn refresh(&mut self) {
        let line = self.wait.line(Instant::now());
        if !self.terminal || line == self.shown {
            return;
        }
        let Some(text) = line else {
            self.clear_bar();
            return;
        };
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            // `wide_msg`: cut to the terminal's width, so the line never wraps. The spinner's
            // frame is part of the message: one draw a second, not one for the spinner and
            // one for the text.
            if let Ok(style) = ProgressStyle::with_template("{wide_msg}") {
                bar.set_style(style);
            }
            bar
        });
        let frame = FRAMES[self.frame % FRAMES.len()];
        self.frame += 1;
        bar.set_message(format!("{frame} {text}"));
        self.shown = Some(text);
    }

    fn clear_bar(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.shown = None;
    }
}

impl Drop for StatusLine {
    fn drop(&mut self) {
        // Every way out of a command (an error, a signal) leaves the terminal clean.
        self.clear_bar();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::slots::{Claim, SlotOwner};
    use crate::events::EventKind;
    use serde_json::json;
    use serde_json::Value;

    fn at(wait: &mut Wait, kind: &str, payload: Value, now: Instant) {
        let payload = Payload::read(&EventKind::parse(kind), &payload);
        wait.observe(&payload, Duration::ZERO, now);
    }

    fn owner(session: &str, label: Option<&str>) -> SlotOwner {
        SlotOwner::new(session, label)
    }

    #[test]
    fn a_slot_wait_names_what_holds_it_and_counts_up() {
        let start = Instant::now();
        let mut wait = Wait::default();
        assert_eq!(wait.line(start), None);
        let blocker = Blocker::ProjectLock {
            project: "019a-project-id".into(),
            holder: Some(owner(
                "0190aaaa-bbbb-7ccc-dddd-eeeeffff0000",
                Some("first one"),
            )),
        };
        at(
            &mut wait,
            "slot.waiting",
            json!({"engine": "fake", "project": "api", "groups": [], "held_by": blocker}),
            start,
        );
        assert_eq!(
            wait.line(start).as_deref(),
            Some("waiting 0 s for a slot — project api locked by session \"first one\"")
        );
        let later = start + Duration::from_millis(61_500);
        assert_eq!(
            wait.line(later).as_deref(),
            Some("waiting 1 min 1 s for a slot — project api locked by session \"first one\"")
        );
        assert_eq!(
            wait.next_change(later),
            Some(start + Duration::from_secs(62))
        );
        at(
            &mut wait,
            "slot.granted",
            json!({"waited_ms": 61500}),
            later,
        );
        assert_eq!(wait.line(later), None);
        assert_eq!(wait.next_change(later), None);
    }

    #[test]
    fn an_event_read_late_is_back_dated() {
        let now = Instant::now();
        let mut wait = Wait::default();
        let retry = json!({"reason": "rate_limit", "delay_ms": 10_000, "retry": 1, "retries": 3});
        wait.observe(
            &Payload::read(&EventKind::RetryScheduled, &retry),
            Duration::from_secs(4),
            now,
        );
        assert_eq!(
            wait.line(now).as_deref(),
            Some("rate limited — retry 1/3 in 6 s")
        );
    }

    #[test]
    fn every_blocker_reads_as_words() {
        let now = Instant::now();
        let line = |held_by: Value| {
            let mut wait = Wait::default();
            at(
                &mut wait,
                "slot.waiting",
                json!({"engine": "fake", "project": "api", "groups": ["deploy"], "held_by": held_by}),
                now,
            );
            wait.line(now).unwrap()
        };
        let untitled = owner("0190aaaa-bbbb-7ccc-dddd-eeeeffff0000", None);
        let a = owner("s-a", Some("a"));
        let b = owner("s-b", Some("b  \n second line"));
        let json = |blocker: Blocker| serde_json::to_value(blocker).unwrap();
        assert_eq!(
            line(json(Blocker::GroupLock {
                group: "deploy".into(),
                holder: Some(untitled.clone()),
            })),
            "waiting 0 s for a slot — group deploy locked by session 0190aaaa-bbbb-7ccc"
        );
        assert_eq!(
            line(json(Blocker::ProjectLock {
                project: "p".into(),
                holder: None,
            })),
            "waiting 0 s for a slot — project api locked"
        );
        assert_eq!(
            line(json(Blocker::EngineLimit {
                engine: "fake".into(),
                limit: 1,
                running: 1,
                holders: vec![a.clone()],
            })),
            "waiting 0 s for a slot — fake limit 1 reached, held by session \"a\""
        );
        assert_eq!(
            line(json(Blocker::EngineLimit {
                engine: "fake".into(),
                limit: 0,
                running: 0,
                holders: vec![],
            })),
            "waiting 0 s for a slot — fake paused (slots.fake = 0)"
        );
        assert_eq!(
            line(json(Blocker::TotalLimit {
                limit: 5,
                running: 5,
                holders: vec![a.clone(), b.clone(), a.clone(), b.clone(), untitled.clone()],
            })),
            "waiting 0 s for a slot — total limit 5 reached, held by sessions \"a\", \
             \"b second line\", \"a\" and 2 more"
        );
        assert_eq!(
            line(json(Blocker::TotalLimit {
                limit: 2,
                running: 2,
                holders: vec![],
            })),
            "waiting 0 s for a slot — total limit 2 reached"
        );
        assert_eq!(
            line(json(Blocker::Queue {
                holder: Some(a.clone()),
                claim: Claim::Engine {
                    engine: "fake".into()
                },
            })),
            "waiting 0 s for a slot — queued behind session \"a\", first in line for the last \
             fake permit"
        );
        assert_eq!(
            line(json(Blocker::Queue {
                holder: None,
                claim: Claim::Group {
                    group: "deploy".into()
                },
            })),
            "waiting 0 s for a slot — queued behind an earlier session, first in line for \
             group deploy"
        );
        assert_eq!(
            line(json(Blocker::Queue {
                holder: Some(b),
                claim: Claim::Total,
            })),
            "waiting 0 s for a slot — queued behind session \"b second line\", first in line \
             for the last permit of slots.total"
        );
        // Without `held_by` (an older daemon) or with one this build cannot read.
        assert_eq!(
            line(Value::Null),
            "waiting 0 s for a fake slot (project api, groups deploy)"
        );
        assert_eq!(
            line(json!({"reason": "moon_phase"})),
            "waiting 0 s for a fake slot (project api, groups deploy)"
        );
        let mut wait = Wait::default();
        at(
            &mut wait,
            "slot.waiting",
            json!({"engine": "codex", "project": "api", "groups": []}),
            now,
        );
        assert_eq!(
            wait.line(now).as_deref(),
            Some("waiting 0 s for a codex slot (project api)")
        );
    }

    #[test]
    fn a_retry_counts_down_each_second_to_now() {
        let start = Instant::now();
        let mut wait = Wait::default();
        at(
            &mut wait,
            "retry.scheduled",
            json!({"reason": "rate_limit", "attempt": 2, "next_attempt": 3, "delay_ms": 44_000,
                   "new_thread": false, "message": "429", "retry": 2, "retries": 3}),
            start,
        );
        let line = |after_ms: u64| wait.line(start + Duration::from_millis(after_ms)).unwrap();
        assert_eq!(line(0), "rate limited — retry 2/3 in 44 s");
        assert_eq!(line(1), "rate limited — retry 2/3 in 44 s");
        assert_eq!(line(999), "rate limited — retry 2/3 in 44 s");
        assert_eq!(line(1000), "rate limited — retry 2/3 in 43 s");
        assert_eq!(line(43_001), "rate limited — retry 2/3 in 1 s");
        assert_eq!(line(44_000), "rate limited — retry 2/3 now");
        assert_eq!(line(90_000), "rate limited — retry 2/3 now");
        // The next change is where the text changes.
        assert_eq!(
            wait.next_change(start),
            Some(start + Duration::from_secs(1))
        );
        assert_eq!(
            wait.next_change(start + Duration::from_millis(1500)),
            Some(start + Duration::from_secs(2))
        );
        assert_eq!(
            wait.next_change(start + Duration::from_millis(43_500)),
            Some(start + Duration::from_secs(44))
        );
        assert_eq!(wait.next_change(start + Duration::from_secs(44)), None);
        // A long one.
        let mut long = Wait::default();
        at(
            &mut long,
            "retry.scheduled",
            json!({"reason": "rate_limit", "delay_ms": 120_000, "retry": 3, "retries": 3}),
            start,
        );
        let line = |after_ms: u64| long.line(start + Duration::from_millis(after_ms)).unwrap();
        assert_eq!(line(0), "rate limited — retry 3/3 in 2 min");
        assert_eq!(line(5_000), "rate limited — retry 3/3 in 1 min 55 s");
        // The run that follows ends the wait.
        at(&mut wait, "run.started", json!({"pid": 7}), start);
        assert_eq!(wait.line(start), None);
    }

    #[test]
    fn a_retry_without_its_counts_falls_back() {
        let now = Instant::now();
        let line = |payload: Value| {
            let mut wait = Wait::default();
            at(&mut wait, "retry.scheduled", payload, now);
            wait.line(now).unwrap()
        };
        assert_eq!(
            line(json!({"reason": "overloaded", "next_attempt": 4, "delay_ms": 2500})),
            "engine overloaded — attempt 4 in 3 s"
        );
        assert_eq!(
            line(json!({"reason": "writer_conflict", "retry": 1, "delay_ms": 2000})),
            "thread busy (writer conflict) — retry 1 in 2 s"
        );
        assert_eq!(
            line(
                json!({"reason": "missing_rollout", "retry": 1, "retries": 1, "delay_ms": 0,
                        "new_thread": true})
            ),
            "rollout missing — retry 1/1 in a new thread now"
        );
        assert_eq!(
            line(json!({"reason": "transport_closed", "delay_ms": 1000})),
            "transport closed — retry in 1 s"
        );
        assert_eq!(line(json!({})), "failed — retry now");
    }

    #[test]
    fn an_app_server_wait_counts_down_then_says_it_retries() {
        let start = Instant::now();
        let mut wait = Wait::default();
        at(
            &mut wait,
            "app_server.unavailable",
            json!({"reason": "restarted 5 times within 60 s\nstopped", "retry_in_ms": 12_300}),
            start,
        );
        assert_eq!(
            wait.line(start).as_deref(),
            Some("app-server restarting — retry in 13 s (restarted 5 times within 60 s stopped)")
        );
        assert_eq!(
            wait.line(start + Duration::from_secs(13)).as_deref(),
            Some("app-server restarting — retrying now (restarted 5 times within 60 s stopped)")
        );
        at(
            &mut wait,
            "app_server.unavailable",
            json!({"retry_in_ms": 1000}),
            start,
        );
        assert_eq!(
            wait.line(start).as_deref(),
            Some("app-server restarting — retry in 1 s")
        );
        for end in [
            "prompt.done",
            "prompt.failed",
            "prompt.cancelled",
            "slot.waiting",
        ] {
            let mut ended = wait.clone();
            at(&mut ended, end, json!({}), start);
            assert!(
                !matches!(ended, Wait::AppServer { .. }),
                "{end} ends the app-server wait"
            );
        }
    }

    #[test]
    fn without_a_terminal_nothing_is_drawn() {
        let mut line = StatusLine::new(false);
        let event: Event = serde_json::from_value(json!({
            "session_id": "s", "seq": 1, "prompt_id": "p", "run_id": null,
            "at": crate::store::now_ms(), "kind": "slot.waiting",
            "payload": {"engine": "fake", "project": "api", "groups": []},
        }))
        .unwrap();
        line.observe(&event);
        assert!(line.bar.is_none());
        assert_eq!(line.print(|| 7), 7);
        assert!(line.bar.is_none() && line.shown.is_none());
        assert!(
            line.wait.line(Instant::now()).is_some(),
            "the state is kept"
        );
        line.clear();
        assert_eq!(line.wait, Wait::None);
    }
}
