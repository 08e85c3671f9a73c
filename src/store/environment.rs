//! A project's or a session's own environment variables (#35): given to its engine children
//! on top of the daemon's environment (a session's over its project's), never over corral's
//! own `CORRAL_*` variables. Stored as a JSON object (`projects.env`, `sessions.env`); shown
//! with the values of names that look like secrets masked ([`Environment::masked`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::store::sql;

/// Variable names to values, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Environment(pub BTreeMap<String, String>);

/// What a masked value reads as.
pub const MASK: &str = "********";

/// Name parts that make a variable's value a secret to show (`OPENAI_API_KEY`, `GH_TOKEN`).
const SECRET_WORDS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "PRIVATE",
    "PASSPHRASE",
    "DSN",
];

impl Environment {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This environment with `over`'s variables put over it (a session's over its project's).
    pub fn under(&self, over: &Environment) -> Environment {
        let mut merged = self.0.clone();
        merged.extend(
            over.0
                .iter()
                .map(|(name, value)| (name.clone(), value.clone())),
        );
        Environment(merged)
    }

    /// As shown: the value of a name that looks like a secret is [`MASK`].
    pub fn masked(&self) -> Environment {
        Environment(
            self.0
                .iter()
                .map(|(name, value)| {
                    let shown = if looks_secret(name) {
                        MASK.to_string()
                    } else {
                        without_password(value)
                    };
                    (name.clone(), shown)
                })
                .collect(),
        )
    }

    /// `K=V, …` for a person (masked).
    pub fn describe(&self) -> String {
        self.masked()
            .0
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The JSON text it is stored as.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.0).expect("strings serialize")
    }
}

impl sql::Get for Environment {
    fn from_value(value: sql::Value) -> Result<Self, String> {
        let text = String::from_value(value)?;
        serde_json::from_str(&text)
            .map_err(|error| format!("an environment that is not a JSON object: {error}"))
    }
}

/// Whether `name`'s value is a secret to show masked: a word of it (split at `_`) is one of
/// [`SECRET_WORDS`], its plural (`AWS_CREDENTIALS`), or ends with one (`APIKEY`).
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    upper.split('_').any(|word| {
        let singular = word.strip_suffix('S').unwrap_or(word);
        SECRET_WORDS
            .iter()
            .any(|secret| word.ends_with(secret) || singular == *secret)
    })
}

/// `value` with the password of a URL in it masked (`postgres://me:********@db/app`): a
/// `DATABASE_URL` names no secret, but carries one.
pub fn without_password(value: &str) -> String {
    let Some(scheme_end) = value.find("://") else {
        return value.to_string();
    };
    let rest = &value[scheme_end + 3..];
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else {
        return value.to_string();
    };
    match authority[..at].find(':') {
        Some(colon) => {
            let start = scheme_end + 3 + colon + 1;
            let end = scheme_end + 3 + at;
            format!("{}{MASK}{}", &value[..start], &value[end..])
        }
        None => value.to_string(),
    }
}

/// Checks a variable's name: letters, digits and `_`, not starting with a digit, and none of
/// corral's own (`CORRAL_*`, which say who a run is) or the daemon's private ones.
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "'{name}' is not a variable name (letters, digits and _, not starting with a digit)"
        ));
    }
    if name.to_ascii_uppercase().starts_with("CORRAL_") || crate::env::DAEMON_ONLY.contains(&name) {
        return Err(format!(
            "{name} is corral's own: it says who a run is, and is not set per project or session"
        ));
    }
    Ok(())
}

/// Reads `NAME=VALUE` (the value may be empty; it may hold `=`; no NUL).
pub fn parse_assignment(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("'{text}' is not NAME=VALUE"))?;
    check_name(name)?;
    if value.contains('\0') {
        return Err(format!("{name}'s value holds a NUL byte"));
    }
    Ok((name.to_string(), value.to_string()))
}

/// Reads an env file: one `NAME=VALUE` a line (an `export ` before it is allowed), blank lines
/// and `#` comments skipped, a value in matching single or double quotes taken without them.
pub fn parse_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut read = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let (name, value) =
            parse_assignment(line).map_err(|error| format!("line {}: {error}", number + 1))?;
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|quote| {
                value
                    .strip_prefix(*quote)
                    .and_then(|rest| rest.strip_suffix(*quote))
            })
            .unwrap_or(&value)
            .to_string();
        read.push((name, unquoted));
    }
    Ok(read)
}

/// Checks every variable of a whole environment (as a client sent it).
pub fn check(environment: &Environment) -> Result<(), String> {
    for (name, value) in &environment.0 {
        check_name(name)?;
        if value.contains('\0') {
            return Err(format!("{name}'s value holds a NUL byte"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_and_others_shown() {
        let environment = Environment(
            [
                ("OPENAI_API_KEY", "sk-1"),
                ("GH_TOKEN", "ghp"),
                ("DB_PASSWORD", "pw"),
                ("APIKEY", "k"),
                ("RUST_LOG", "debug"),
                ("KEYBOARD", "us"),
            ]
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
        );
        let shown = environment.masked();
        assert_eq!(shown.0["OPENAI_API_KEY"], MASK);
        assert_eq!(shown.0["GH_TOKEN"], MASK);
        assert_eq!(shown.0["DB_PASSWORD"], MASK);
        assert_eq!(shown.0["APIKEY"], MASK);
        assert_eq!(shown.0["RUST_LOG"], "debug");
        assert_eq!(
            shown.0["KEYBOARD"], "us",
            "a word that only starts with one"
        );
        for secret in [
            "AWS_CREDENTIALS",
            "APP_SECRETS",
            "GPG_PASSPHRASE",
            "SENTRY_DSN",
        ] {
            assert!(looks_secret(secret), "{secret}");
        }
    }

    #[test]
    fn a_urls_password_is_masked() {
        assert_eq!(
            without_password("postgres://me:pw@db:5432/app?x=1"),
            format!("postgres://me:{MASK}@db:5432/app?x=1")
        );
        for shown in [
            "postgres://me@db/app",
            "https://example.com/a@b",
            "plain",
            "http://host/path",
        ] {
            assert_eq!(without_password(shown), shown);
        }
    }

    #[test]
    fn names_are_checked_and_corrals_own_refused() {
        assert!(check_name("MY_VAR").is_ok());
        assert!(check_name("_x1").is_ok());
        for bad in [
            "",
            "1X",
            "A-B",
            "A B",
            "CORRAL_HOME",
            "corral_session_id",
            "NOTIFY_SOCKET",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_assignment("A=b=c").unwrap(),
            ("A".to_string(), "b=c".to_string())
        );
        assert_eq!(parse_assignment("EMPTY=").unwrap().1, "");
        assert!(parse_assignment("NOEQUALS").is_err());
    }

    #[test]
    fn an_env_file_reads_like_a_dotenv() {
        let read = parse_file("# comment\n\nexport A=1\nB=\"two words\"\nC='x'\nD=a#b\n").unwrap();
        assert_eq!(
            read,
            vec![
                ("A".into(), "1".into()),
                ("B".into(), "two words".into()),
                ("C".into(), "x".into()),
                ("D".into(), "a#b".into()),
            ]
        );
        let error = parse_file("A=1\nCORRAL_RUN_ID=x\n").unwrap_err();
        assert!(error.starts_with("line 2: "), "{error}");
    }

    #[test]
    fn a_sessions_variables_go_over_its_projects() {
        let project = Environment([("A".to_string(), "p".to_string())].into());
        let session = Environment(
            [
                ("A".to_string(), "s".to_string()),
                ("B".to_string(), "s".to_string()),
            ]
            .into(),
        );
        let merged = project.under(&session);
        assert_eq!(merged.0["A"], "s");
        assert_eq!(merged.0["B"], "s");
    }
}
