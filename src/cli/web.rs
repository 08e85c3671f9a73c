//! `corral web`: the dashboard's login URL (`http://127.0.0.1:PORT/login?token=…`), from the
//! daemon's `status` (its `http` address) and `HOME/http.token`, starting the daemon if none
//! runs. `--rotate-token` replaces the token first: the daemon notices the new file at its
//! next request and logs every browser out. `--open` hands `…/login?code=…` to `$BROWSER` or
//! `xdg-open` instead (a single-use code from the daemon's `http.login_code`, valid 60 s: a
//! browser's argv and history never hold the token), in a process group of its own that is left to run (the browser is the
//! person's, not corral's).

use serde_json::json;

use super::remote::{self, print_json};
use super::{CliError, Context, Exit};
use crate::daemon::http::access;
use crate::protocol::status::HttpServing;
use crate::protocol::{HttpLoginCode, HttpLoginCodeParams, Status, StatusParams};

#[derive(Debug, clap::Args)]
pub struct WebArgs {
    /// Open the URL in a browser ($BROWSER, else xdg-open).
    #[arg(long)]
    pub open: bool,
    /// Replace the token first (every browser logged in with the old one is logged out).
    #[arg(long)]
    pub rotate_token: bool,
    /// Print {url, login_url, listen} as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn execute(context: &Context, args: &WebArgs) -> Result<Exit, CliError> {
    let mut client = remote::connect(context).await?;
    if args.rotate_token {
        access::rotate_token(&context.home).map_err(CliError::failure)?;
    }
    let status = remote::ask::<Status>(&mut client, &StatusParams { waiters: Some(0) }).await?;
    let (url, listen) =
        match &status.http {
            None => return Err(CliError::failure(
                "the daemon serves no HTTP (http.listen is off): `corral config set http.listen \
                 127.0.0.1:0`, then restart the daemon",
            )),
            Some(HttpServing::Failed { error }) => {
                return Err(CliError::failure(format!(
                    "the daemon serves no HTTP: {error}"
                )))
            }
            Some(HttpServing::Serving { url, listen }) => (url, listen),
        };
    let token = access::ensure_token(&context.home).map_err(CliError::failure)?;
    let login = format!("{url}login?token={token}");
    if args.open {
        // The browser gets a code good once for a minute, not the token: its argv is
        // readable by every user (/proc/PID/cmdline), and its history keeps the URL.
        let code = remote::ask::<HttpLoginCode>(&mut client, &HttpLoginCodeParams {}).await?;
        open(&format!("{url}login?code={}", code.code))?;
    }
    if args.json {
        print_json(&json!({ "url": url, "login_url": login, "listen": listen }));
    } else {
        println!("{login}");
    }
    Ok(Exit::success())
}

/// Hands the URL to the person's browser.
fn open(url: &str) -> Result<(), CliError> {
    use std::os::unix::process::CommandExt;
    let browser = std::env::var("BROWSER")
        .ok()
        .filter(|browser| !browser.trim().is_empty())
        .unwrap_or_else(|| "xdg-open".to_string());
    std::process::Command::new(&browser)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
        .map_err(|error| CliError::failure(format!("cannot run {browser}: {error}")))
}
