//! Subscriptions: `events.subscribe`, `events.unsubscribe` (served by the transports
//! themselves, not `daemon::methods::call`: they stream `events.event` and `events.lagged`
//! notifications).

use serde::{Deserialize, Serialize};

use super::method;

method! {
    /// Replays a session's stored events after `after` (or every session's, after a feed
    /// number), then streams live ones.
    EventsSubscribe = "events.subscribe": SubscribeParams => SubscribeResult,
    EventsUnsubscribe = "events.unsubscribe": UnsubscribeParams => UnsubscribeResult,
}

/// `events.subscribe {session, after}`: without `session`, every session's events, and
/// `after` is the daemon-wide feed number.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SubscribeParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default)]
    pub after: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscribeResult {
    pub subscription: u64,
    /// The session's id; null for every session's.
    pub session: Option<String>,
    pub after: i64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UnsubscribeParams {
    pub subscription: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnsubscribeResult {
    pub unsubscribed: u64,
}
