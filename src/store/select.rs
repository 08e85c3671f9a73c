//! Selectors: how a person names a project, a session or a prompt. A selector is an exact id,
//! an exact name (or title), or a unique id prefix; anything else is an error that says what
//! it matched. The CLI's direct reads of the store (`crate::cli::local`, when no daemon runs)
//! resolve selectors here; the daemon's methods resolve them the same way.
//!
//! The other way round, [`ShortIds`]: the short form a table shows of an id, the shortest
//! prefix (at least [`SHORT_ID`] characters) that no other id of its kind in the store shares,
//! so that any id a table shows is a selector that resolves. (UUIDv7 ids made in the same
//! millisecond share their first 18 characters, and may share more.)

use std::collections::HashMap;

use crate::store::sql::{self, args, Conn};

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

/// The fewest characters of an id a table shows: the millisecond and 12 more bits of a
/// UUIDv7, unique in practice; more when another id shares them.
pub const SHORT_ID: usize = 18;

/// The tables whose ids a person selects by prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Exec,
    Project,
    Session,
    Prompt,
}

impl IdKind {
    fn table(self) -> &'static str {
        match self {
            IdKind::Exec => "execs",
            IdKind::Project => "projects",
            IdKind::Session => "sessions",
            IdKind::Prompt => "prompts",
        }
    }
}

/// The short forms of the ids a table shows, each unique among the ids of its kind in the
/// store (and among the ids given, which is all there is to go by without a store).
#[derive(Debug, Clone, Default)]
pub struct ShortIds(HashMap<String, String>);

impl ShortIds {
    /// The short forms of `ids`, all of one kind. `connection`: the store they are read from
    /// (two lookups on the primary key per id: its neighbours in id order).
    pub fn of<'a>(
        connection: Option<&Conn>,
        kind: IdKind,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> sql::Result<ShortIds> {
        let mut short = ShortIds::default();
        short.add(connection, kind, ids)?;
        Ok(short)
    }

    /// Adds the short forms of more ids (of one kind; kinds may be mixed across calls).
    pub fn add<'a>(
        &mut self,
        connection: Option<&Conn>,
        kind: IdKind,
        ids: impl IntoIterator<Item = &'a str>,
    ) -> sql::Result<()> {
        let mut sorted: Vec<&str> = ids.into_iter().collect();
        sorted.sort_unstable();
        sorted.dedup();
        for (index, id) in sorted.iter().enumerate() {
            let mut shared = 0;
            if index > 0 {
                shared = shared.max(common_prefix(id, sorted[index - 1]));
            }
            if let Some(next) = sorted.get(index + 1) {
                shared = shared.max(common_prefix(id, next));
            }
            if let Some(connection) = connection {
                for neighbour in neighbours(connection, kind, id)? {
                    shared = shared.max(common_prefix(id, &neighbour));
                }
            }
            let length = (shared + 1).max(SHORT_ID);
            self.0
                .insert(id.to_string(), id.chars().take(length).collect());
        }
        Ok(())
    }

    /// The short form of `id`; an id not added is cut to [`SHORT_ID`] characters.
    pub fn get(&self, id: &str) -> String {
        match self.0.get(id) {
            Some(short) => short.clone(),
            None => id.chars().take(SHORT_ID).collect(),
        }
    }

    /// The widest short form of `ids` (for a table's column), at least [`SHORT_ID`].
    pub fn width<'a>(&self, ids: impl IntoIterator<Item = &'a str>) -> usize {
        ids.into_iter()
            .map(|id| self.get(id).chars().count())
            .fold(SHORT_ID, usize::max)
    }
}

/// How many characters two ids share from their start.
fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

/// The ids of `kind` just below and just above `id` in the store's order: the only ones that
/// can share a longer prefix with it than any other.
fn neighbours(connection: &Conn, kind: IdKind, id: &str) -> sql::Result<Vec<String>> {
    let table = kind.table();
    let mut found = Vec::with_capacity(2);
    for sql in [
        format!("SELECT id FROM {table} WHERE id < ?1 ORDER BY id DESC LIMIT 1"),
        format!("SELECT id FROM {table} WHERE id > ?1 ORDER BY id LIMIT 1"),
    ] {
        let neighbour: Option<String> = connection.opt_row(&sql, args![id], |row| row.get(0))?;
        found.extend(neighbour);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn short_ids_are_the_shortest_unique_prefixes_of_at_least_18_characters() {
        let same_ms = [
            "01a231b0-4a92-76d6-8c90-dab8c0976ae6",
            "01a231b0-4a92-76d6-8c91-0000c0976ae6",
            "01a231b0-4a92-7000-0000-000000000000",
        ];
        let short = ShortIds::of(None, IdKind::Exec, same_ms).unwrap();
        assert_eq!(short.get(same_ms[0]), "01a231b0-4a92-76d6-8c90");
        assert_eq!(short.get(same_ms[1]), "01a231b0-4a92-76d6-8c91");
        assert_eq!(short.get(same_ms[2]), "01a231b0-4a92-7000");
        assert_eq!(short.width(same_ms), 23);
        // Every short form selects its own id among them.
        for id in same_ms {
            let picked = select("exec", &short.get(id), same_ms.to_vec(), |i| i, |_| None);
            assert_eq!(picked, Ok(id));
        }
        assert_eq!(short.get("0123456789abcdefghijkl"), "0123456789abcdefgh");
    }

    #[test]
    fn short_ids_are_unique_among_the_stored_ids_too() {
        let connection = Connection::open_in_memory().unwrap();
        connection
            .execute_batch(
                "CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL);
                 INSERT INTO sessions VALUES ('01a231b0-4a92-76d6-8c90-aaaa'),
                     ('01a231b0-4a92-76d6-8c90-bbbb'), ('01a231b0-ffff-7000-0000-0000');",
            )
            .unwrap();
        let connection = Conn::from(connection);
        // Only one of the sharing pair is shown: its form still tells it from the other.
        let short = ShortIds::of(
            Some(&connection),
            IdKind::Session,
            [
                "01a231b0-4a92-76d6-8c90-aaaa",
                "01a231b0-ffff-7000-0000-0000",
            ],
        )
        .unwrap();
        assert_eq!(
            short.get("01a231b0-4a92-76d6-8c90-aaaa"),
            "01a231b0-4a92-76d6-8c90-a"
        );
        assert_eq!(
            short.get("01a231b0-ffff-7000-0000-0000"),
            "01a231b0-ffff-7000"
        );
    }

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
