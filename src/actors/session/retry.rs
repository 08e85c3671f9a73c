//! The retry policy: what to do after a failed run, as a pure function of the failure, what
//! this prompt already tried, and the settings. The worker calls [`Retries::decide`] and
//! carries the decision out; nothing here sleeps, reads a clock or touches the store.
//!
//! | class | decision |
//! |---|---|
//! | rate limit | wait `retry.rate_limit_delays[n]` (or the provider's Retry-After when longer), then fail |
//! | overloaded | the same delays ± 20 % jitter (waiting sessions do not return at the same instant) |
//! | writer conflict | wait `retry.writer_conflict_delays[n]`, same thread, then fail |
//! | missing rollout | replay at once on a new thread, once per prompt |
//! | anything else | fail |
//!
//! A retry must not show the model the person's prompt twice: a run that reached the model (a
//! rate limit, an overload) left the prompt in the engine's conversation. [`resend`] says how
//! the next attempt goes on instead:
//!
//! | the failed prompt | engine | the retry |
//! |---|---|---|
//! | began a new conversation | any | a new conversation with the prompt (the failed one is dropped) |
//! | continued one | claude | the prompt again, resumed at the last good message (`--resume-session-at`) |
//! | continued one | codex, codex-app-server, opencode | [`CONTINUATION`] on the same thread: the failed turn holds the prompt |
//! | any | fake, command | the prompt again (no transcript to keep clean) |
//!
//! A failure before the model saw anything (a writer conflict, a lost rollout) sends the prompt
//! again as it was.

use std::time::Duration;

use crate::engine::{EngineKind, FailureClass};

/// What a retry sends when the conversation already holds the person's prompt.
pub const CONTINUATION: &str = "Continue from where you left off.";

/// Where the session's conversation stood when the prompt began.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Before {
    pub thread: Option<String>,
    pub resume_point: Option<String>,
}

/// What the next attempt sends, and on which thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resend {
    /// The prompt, on `thread` (`None`: a new conversation), from `resume_at` when set.
    Prompt {
        thread: Option<String>,
        resume_at: Option<String>,
    },
    /// [`CONTINUATION`] on the current thread.
    Continue,
}

/// How a retry of a prompt that failed with `class` goes on (see the module's table).
/// `current` is the thread the failed run left the session on.
pub fn resend(
    kind: EngineKind,
    class: FailureClass,
    before: &Before,
    current: Option<&str>,
) -> Resend {
    let as_it_was = Resend::Prompt {
        thread: current.map(str::to_string),
        resume_at: None,
    };
    let reached_the_model = matches!(class, FailureClass::RateLimit | FailureClass::Overloaded);
    if !reached_the_model || matches!(kind, EngineKind::Fake | EngineKind::Command) {
        return as_it_was;
    }
    if before.thread.is_none() {
        return Resend::Prompt {
            thread: None,
            resume_at: None,
        };
    }
    match kind {
        EngineKind::Claude => Resend::Prompt {
            thread: before.thread.clone(),
            resume_at: before.resume_point.clone(),
        },
        EngineKind::Codex | EngineKind::CodexAppServer | EngineKind::Opencode => {
            if current.is_some() {
                Resend::Continue
            } else {
                as_it_was
            }
        }
        EngineKind::Fake | EngineKind::Command => as_it_was,
    }
}

/// The longest Retry-After honoured: a provider asking for more than this is not going to be
/// waited out by a supervised run (the prompt fails, saying how long it was asked to wait).
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// A failed run, as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub class: FailureClass,
    /// How long the provider asked to wait, when the engine reported it.
    pub retry_after: Option<Duration>,
}

/// The settings the policy reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub rate_limit_delays: Vec<Duration>,
    pub writer_conflict_delays: Vec<Duration>,
}

/// What the policy decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    Retry(Retry),
    /// Give up; `why` says so when the failure's own message does not (a Retry-After too long).
    Fail {
        why: Option<String>,
    },
}

/// A retry to make.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    pub delay: Duration,
    /// Start a new engine thread (a lost rollout), rather than continue the current one.
    pub new_thread: bool,
    /// Which retry of its class this is (1-based) …
    pub number: usize,
    /// … of how many that class gets.
    pub of: usize,
}

impl Decision {
    /// The decision in words, as the run's row keeps it.
    pub fn describe(&self) -> String {
        match self {
            Decision::Retry(Retry {
                delay,
                new_thread: true,
                ..
            }) => format!("replay in a new thread after {} ms", delay.as_millis()),
            Decision::Retry(Retry { delay, .. }) => format!("retry after {} ms", delay.as_millis()),
            Decision::Fail { .. } => "fail".to_string(),
        }
    }
}

/// What one prompt has retried so far, by class.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retries {
    rate_limited: usize,
    overloaded: usize,
    writer_conflicts: usize,
    replayed: bool,
}

impl Retries {
    /// Decides after `failure` and counts the retry it grants. `jitter` is a factor in
    /// `[0.8, 1.2]` applied to overload delays (the caller draws it).
    pub fn decide(&mut self, policy: &Policy, failure: &Failure, jitter: f64) -> Decision {
        let fail = Decision::Fail { why: None };
        let (count, delays, jittered) = match failure.class {
            FailureClass::RateLimit => (&mut self.rate_limited, &policy.rate_limit_delays, false),
            FailureClass::Overloaded => (&mut self.overloaded, &policy.rate_limit_delays, true),
            FailureClass::WriterConflict => (
                &mut self.writer_conflicts,
                &policy.writer_conflict_delays,
                false,
            ),
            // Replay once: a second missing rollout on a brand-new thread is not that.
            FailureClass::MissingRollout if !self.replayed => {
                self.replayed = true;
                return Decision::Retry(Retry {
                    delay: Duration::ZERO,
                    new_thread: true,
                    number: 1,
                    of: 1,
                });
            }
            _ => return fail,
        };
        let Some(&delay) = delays.get(*count) else {
            return fail;
        };
        let mut delay = if jittered {
            delay.mul_f64(jitter.clamp(0.8, 1.2))
        } else {
            delay
        };
        if let Some(asked) = failure.retry_after {
            if asked > MAX_RETRY_AFTER {
                return Decision::Fail {
                    why: Some(format!(
                        "the provider asks to wait {} s before a retry, longer than corral waits ({} s)",
                        asked.as_secs(),
                        MAX_RETRY_AFTER.as_secs()
                    )),
                };
            }
            delay = delay.max(asked);
        }
        *count += 1;
        Decision::Retry(Retry {
            delay,
            new_thread: false,
            number: *count,
            of: delays.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn secs(list: &[u64]) -> Vec<Duration> {
        list.iter().map(|&s| Duration::from_secs(s)).collect()
    }

    fn policy() -> Policy {
        Policy {
            rate_limit_delays: secs(&[15, 45, 120]),
            writer_conflict_delays: secs(&[2, 5, 15, 30]),
        }
    }

    fn failure(class: FailureClass) -> Failure {
        Failure {
            class,
            retry_after: None,
        }
    }

    fn delay(decision: &Decision) -> Option<Duration> {
        match decision {
            Decision::Retry(retry) => Some(retry.delay),
            Decision::Fail { .. } => None,
        }
    }

    #[test]
    fn rate_limits_wait_the_delays_in_turn_then_fail() {
        let mut retries = Retries::default();
        let rate_limit = failure(FailureClass::RateLimit);
        let decisions: Vec<Decision> = (0..4)
            .map(|_| retries.decide(&policy(), &rate_limit, 1.0))
            .collect();
        assert_eq!(
            decisions.iter().map(delay).collect::<Vec<_>>(),
            [
                Some(secs(&[15])[0]),
                Some(secs(&[45])[0]),
                Some(secs(&[120])[0]),
                None
            ]
        );
        assert_eq!(
            decisions[1],
            Decision::Retry(Retry {
                delay: Duration::from_secs(45),
                new_thread: false,
                number: 2,
                of: 3
            })
        );
        assert_eq!(decisions[1].describe(), "retry after 45000 ms");
    }

    #[test]
    fn a_longer_retry_after_wins_and_a_shorter_one_does_not() {
        let mut retries = Retries::default();
        let asked = Failure {
            class: FailureClass::RateLimit,
            retry_after: Some(Duration::from_secs(30)),
        };
        assert_eq!(
            delay(&retries.decide(&policy(), &asked, 1.0)),
            Some(Duration::from_secs(30))
        );
        // The second delay (45 s) is longer than the 30 s asked.
        assert_eq!(
            delay(&retries.decide(&policy(), &asked, 1.0)),
            Some(Duration::from_secs(45))
        );
        let too_long = Failure {
            class: FailureClass::RateLimit,
            retry_after: Some(Duration::from_secs(7200)),
        };
        match Retries::default().decide(&policy(), &too_long, 1.0) {
            Decision::Fail { why: Some(why) } => assert!(why.contains("7200 s"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_rollout_is_replayed_once_on_a_new_thread() {
        let mut retries = Retries::default();
        let lost = failure(FailureClass::MissingRollout);
        let first = retries.decide(&policy(), &lost, 1.0);
        assert_eq!(
            first,
            Decision::Retry(Retry {
                delay: Duration::ZERO,
                new_thread: true,
                number: 1,
                of: 1
            })
        );
        assert_eq!(first.describe(), "replay in a new thread after 0 ms");
        assert_eq!(
            retries.decide(&policy(), &lost, 1.0),
            Decision::Fail { why: None }
        );
        assert_eq!(
            Retries::default().decide(&policy(), &failure(FailureClass::Other), 1.0),
            Decision::Fail { why: None }
        );
        assert_eq!(
            Retries::default().decide(&policy(), &failure(FailureClass::TransportClosed), 1.0),
            Decision::Fail { why: None }
        );
    }

    #[test]
    fn a_retry_holds_the_prompt_once() {
        let fresh = Before::default();
        let ongoing = Before {
            thread: Some("t".into()),
            resume_point: Some("m1".into()),
        };
        let rate = FailureClass::RateLimit;
        // A failed first turn: a new conversation, on every engine that keeps one.
        for kind in [EngineKind::Claude, EngineKind::Codex, EngineKind::Opencode] {
            assert_eq!(
                resend(kind, rate, &fresh, Some("failed")),
                Resend::Prompt {
                    thread: None,
                    resume_at: None
                },
                "{kind}"
            );
        }
        assert_eq!(
            resend(EngineKind::Claude, rate, &ongoing, Some("t")),
            Resend::Prompt {
                thread: Some("t".into()),
                resume_at: Some("m1".into())
            }
        );
        for kind in [
            EngineKind::Codex,
            EngineKind::Opencode,
            EngineKind::CodexAppServer,
        ] {
            assert_eq!(
                resend(kind, FailureClass::Overloaded, &ongoing, Some("t")),
                Resend::Continue,
                "{kind}"
            );
        }
        // The engine never saw it: as it was.
        assert_eq!(
            resend(
                EngineKind::Codex,
                FailureClass::WriterConflict,
                &ongoing,
                Some("t")
            ),
            Resend::Prompt {
                thread: Some("t".into()),
                resume_at: None
            }
        );
        assert_eq!(
            resend(EngineKind::Fake, rate, &fresh, Some("f")),
            Resend::Prompt {
                thread: Some("f".into()),
                resume_at: None
            }
        );
    }

    fn class() -> impl Strategy<Value = FailureClass> {
        prop_oneof![
            Just(FailureClass::RateLimit),
            Just(FailureClass::Overloaded),
            Just(FailureClass::WriterConflict),
            Just(FailureClass::MissingRollout),
            Just(FailureClass::TransportClosed),
            Just(FailureClass::Other),
        ]
    }

    proptest! {
        /// Whatever the order of failures: each class gets at most its own number of retries,
        /// the classes count apart, delays stay within their bounds, and the policy ends.
        #[test]
        fn every_class_is_bounded_on_its_own(
            failures in proptest::collection::vec((class(), proptest::option::of(0u64..200)), 0..40),
            jitter in 0.0f64..2.0,
        ) {
            let policy = Policy {
                rate_limit_delays: secs(&[1, 2, 3]),
                writer_conflict_delays: secs(&[5, 6]),
            };
            let mut retries = Retries::default();
            let mut granted = std::collections::HashMap::new();
            for (class, retry_after) in failures {
                let failure = Failure { class, retry_after: retry_after.map(Duration::from_secs) };
                if let Decision::Retry(retry) = retries.decide(&policy, &failure, jitter) {
                    let count = granted.entry(class).or_insert(0usize);
                    *count += 1;
                    prop_assert_eq!(retry.number, *count);
                    prop_assert!(retry.number <= retry.of);
                    let (base, max) = match class {
                        FailureClass::RateLimit => (policy.rate_limit_delays[*count - 1], 1.0),
                        FailureClass::Overloaded => (policy.rate_limit_delays[*count - 1], 1.2),
                        FailureClass::WriterConflict => (policy.writer_conflict_delays[*count - 1], 1.0),
                        FailureClass::MissingRollout => (Duration::ZERO, 1.0),
                        other => return Err(TestCaseError::fail(format!("{other:?} retried"))),
                    };
                    let floor = match class {
                        FailureClass::Overloaded => base.mul_f64(0.8),
                        _ => base,
                    };
                    let ceiling = base.mul_f64(max).max(failure.retry_after.unwrap_or_default());
                    prop_assert!(retry.delay >= floor.min(ceiling) && retry.delay <= ceiling,
                        "{:?}: {:?} not in {:?}..={:?}", class, retry.delay, floor, ceiling);
                    prop_assert_eq!(retry.new_thread, class == FailureClass::MissingRollout);
                }
            }
            let bound = |class: FailureClass| match class {
                FailureClass::RateLimit | FailureClass::Overloaded => 3,
                FailureClass::WriterConflict => 2,
                FailureClass::MissingRollout => 1,
                _ => 0,
            };
            for (class, count) in granted {
                prop_assert!(count <= bound(class), "{:?} retried {} times", class, count);
            }
        }
    }
}
