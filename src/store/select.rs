//! Selectors: how a person names a project, a session or a prompt. A selector is an exact id,
//! an exact name (or title), or a unique id prefix; anything else is an error that says what
//! it matched. The CLI's direct reads of the store (`crate::cli::local`, when no daemon runs)
//! resolve selectors here; the daemon's methods resolve them the same way.

/// How many characters of a selector an error repeats (a selector may be any length).
const ECHOED: usize = 80;

/// Why a selector names no single item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unselected {
    #[error("the {kind} selector is empty")]
    Empty { kind: &'static str },
    #[error("No {kind} matches '{selector}'")]
    None {
        kind: &'static str,
        /// The selector, cut to [`ECHOED`] characters.
        selector: String,
    },
    #[error("Ambiguous {kind} '{selector}': {}", .candidates.join(", "))]
    Ambiguous {
        kind: &'static str,
        selector: String,
        /// `ID (NAME)`, or `ID` for an item without a name.
        candidates: Vec<String>,
    },
}

/// The selector as an error repeats it: at most [`ECHOED`] characters, `…` when cut.
fn echoed(selector: &str) -> String {
    if selector.chars().count() <= ECHOED {
        return selector.to_string();
    }
    let mut short: String = selector.chars().take(ECHOED - 1).collect();
    short.push('…');
    short
}

/// Picks the one item `selector` names: an exact id, then an exact name (when only one item
/// has it), then a unique id prefix or name.
pub fn select<T>(
    kind: &'static str,
    selector: &str,
    items: Vec<T>,
    id: impl Fn(&T) -> &str,
    name: impl Fn(&T) -> Option<&str>,
) -> Result<T, Unselected> {
    let selector = selector.trim();
    if selector.is_empty() {
        return Err(Unselected::Empty { kind });
    }
    let position = items
        .iter()
        .position(|item| id(item) == selector)
        .or_else(|| {
            let named: Vec<usize> = items
                .iter()
                .enumerate()
                .filter(|(_, item)| name(item) == Some(selector))
                .map(|(index, _)| index)
                .collect();
            (named.len() == 1).then(|| named[0])
        });
    if let Some(position) = position {
        return Ok(items.into_iter().nth(position).expect("a found position"));
    }
    let mut matches: Vec<T> = items
        .into_iter()
        .filter(|item| id(item).starts_with(selector) || name(item) == Some(selector))
        .collect();
    match matches.len() {
        0 => Err(Unselected::None {
            kind,
            selector: echoed(selector),
        }),
        1 => Ok(matches.remove(0)),
        _ => Err(Unselected::Ambiguous {
            kind,
            selector: echoed(selector),
            candidates: matches
                .iter()
                .map(|item| match name(item) {
                    Some(name) => format!("{} ({name})", id(item)),
                    None => id(item).to_string(),
                })
                .collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items() -> Vec<(&'static str, Option<&'static str>)> {
        vec![
            ("0190-aaaa", Some("api")),
            ("0190-aabb", Some("web")),
            ("0191-cccc", None),
            ("0192-dddd", Some("web")),
        ]
    }

    fn pick(selector: &str) -> Result<&'static str, Unselected> {
        select("project", selector, items(), |item| item.0, |item| item.1).map(|item| item.0)
    }

    #[test]
    fn ids_names_and_prefixes_name_one_item() {
        assert_eq!(pick("0190-aabb"), Ok("0190-aabb"));
        assert_eq!(pick("api"), Ok("0190-aaaa"));
        assert_eq!(pick(" 0191 "), Ok("0191-cccc"));
    }

    #[test]
    fn an_empty_unknown_or_ambiguous_selector_says_so() {
        assert_eq!(pick("  "), Err(Unselected::Empty { kind: "project" }));
        assert_eq!(
            pick("nope").unwrap_err().to_string(),
            "No project matches 'nope'"
        );
        assert_eq!(
            pick("0190-aa").unwrap_err().to_string(),
            "Ambiguous project '0190-aa': 0190-aaaa (api), 0190-aabb (web)"
        );
        // Two items share the name: neither is picked by it.
        assert!(matches!(
            pick("web"),
            Err(Unselected::Ambiguous { candidates, .. }) if candidates.len() == 2
        ));
    }

    #[test]
    fn a_long_selector_is_not_repeated_whole() {
        let long = "x".repeat(100_000);
        let message = pick(&long).unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
        assert!(message.contains('…'));
    }
}
