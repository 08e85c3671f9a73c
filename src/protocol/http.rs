//! The HTTP API's socket methods: `http.login_code`, a single-use login for the dashboard.

use serde::{Deserialize, Serialize};

use super::method;

method! {
    /// A login code for the dashboard: `GET /login?code=CODE` logs a browser in once, within
    /// `expires_in_ms` (`corral web --open` hands that URL to the browser, not the token).
    HttpLoginCode = "http.login_code": HttpLoginCodeParams => HttpLoginCodeResult,
}

/// `http.login_code`'s params: none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpLoginCodeParams {}

/// `http.login_code`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpLoginCodeResult {
    pub code: String,
    pub expires_in_ms: u64,
}
