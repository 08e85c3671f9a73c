//! `http.login_code`: a single-use login code for the dashboard (`http::access`).

use super::{Caller, Serve};
use crate::daemon::origin;
use crate::protocol::*;

/// A login code logs a browser in, as the token file's reader could: nothing widens.
impl origin::Widening for HttpLoginCodeParams {
    const MAY_WIDEN: bool = false;
}

impl Serve for HttpLoginCode {
    async fn serve(
        _caller: &Caller,
        _p: HttpLoginCodeParams,
    ) -> Result<HttpLoginCodeResult, RpcError> {
        if !matches!(
            crate::daemon::http::status(),
            crate::daemon::http::HttpStatus::Serving { .. }
        ) {
            return Err(RpcError::new(
                code::NOT_FOUND,
                "the daemon serves no HTTP (see `corral status`): no login code to give",
            ));
        }
        let code = crate::daemon::http::access::new_login_code().map_err(|error| {
            RpcError::new(code::INTERNAL, format!("cannot make a login code: {error}"))
        })?;
        Ok(HttpLoginCodeResult {
            code,
            expires_in_ms: crate::daemon::http::access::LOGIN_CODE_LIFE.as_millis() as u64,
        })
    }
}
