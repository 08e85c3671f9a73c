//! This host's name: where a pid means something.
//!
//! On a shared (PostgreSQL) store several hosts record into one ledger, so a row that names a
//! process (an exec's pid, say) also names the host it runs on: only that host can tell
//! whether the process lives (`corral monitor prune` judges its own host's execs only).
//!
//! [`name`] is the system's host name, read once. `CORRAL_HOST` overrides it: tests simulate
//! several hosts on one machine with it, and containers that share a host name (or have a
//! random one at each start) name themselves with it.

use std::sync::OnceLock;

/// The name when neither the variable nor the system gives one.
const FALLBACK: &str = "localhost";

/// This host's name: `CORRAL_HOST` when set and not blank, else the system's host name, else
/// `localhost`. Read once per process: a row written later names the same host.
pub fn name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let chosen = std::env::var(crate::env::HOST).ok();
        from(chosen.as_deref(), system_name)
    })
}

/// The name given the variable's value and a way to read the system's name.
fn from(variable: Option<&str>, system: impl FnOnce() -> Option<String>) -> String {
    variable
        .filter(|value| !value.trim().is_empty())
        .map(str::to_string)
        .or_else(|| system().filter(|name| !name.trim().is_empty()))
        .unwrap_or_else(|| FALLBACK.to_string())
}

/// `gethostname(2)`, lossy UTF-8; `None` when it fails.
fn system_name() -> Option<String> {
    let name = nix::unistd::gethostname().ok()?;
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_unless_blank() {
        let system = || Some("box".to_string());
        assert_eq!(from(Some("alpha"), system), "alpha");
        assert_eq!(from(Some(""), system), "box");
        assert_eq!(from(Some("  "), system), "box");
        assert_eq!(from(None, system), "box");
        assert_eq!(from(None, || None), "localhost");
        assert_eq!(from(None, || Some(String::new())), "localhost");
    }

    #[test]
    fn the_system_has_a_name() {
        let name = system_name().expect("gethostname works");
        assert!(!name.contains('\0'), "{name:?}");
    }
}
