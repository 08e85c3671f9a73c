//! Driver claims: `driver.claim`, `driver.release`, `driver.show`.

use serde::{Deserialize, Serialize};

use super::{method, SessionSelector};
use crate::store::drivers;

method! {
    /// The caller's exec (`initialize`'s `exec_id`) becomes the session's driver.
    DriverClaim = "driver.claim": ClaimParams => Claim,
    /// Ends the claim of that generation; the claim as it is now.
    DriverRelease = "driver.release": ReleaseParams => Option<Claim>,
    DriverShow = "driver.show": SessionSelector => Option<Claim>,
}

/// A session's driver claim on the wire (`drivers::DriverClaim`'s keys).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub session_id: String,
    /// The exec driving the session now; `None`: vacant.
    pub exec_id: Option<String>,
    /// The last exec that claimed it.
    pub last_exec_id: Option<String>,
    pub generation: i64,
    pub provider_generation: i64,
    pub claimed_at: Option<i64>,
    pub released_at: Option<i64>,
}

impl From<&drivers::DriverClaim> for Claim {
    fn from(c: &drivers::DriverClaim) -> Self {
        Claim {
            session_id: c.session_id.clone(),
            exec_id: c.exec_id.clone(),
            last_exec_id: c.last_exec_id.clone(),
            generation: c.generation,
            provider_generation: c.provider_generation,
            claimed_at: c.claimed_at,
            released_at: c.released_at,
        }
    }
}

/// `driver.claim`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClaimParams {
    pub session: String,
    #[serde(default)]
    pub take_over: bool,
}

/// `driver.release`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReleaseParams {
    pub session: String,
    pub generation: i64,
}
