//! The spill journal: a session's events that a worker held when its daemon shut down while
//! another program locked the store (`docs/store.md`).
//!
//! ```text
//! shutdown, store locked ─► worker writes HOME/spill/<session id>.jsonl (temp, fsync, rename)
//! next boot ─► read every spill file ─► one ledger write per file (numbered as usual) ─► remove
//!                                         └─ before reconciliation, before any prompt runs
//! ```
//!
//! It is a journal, not a second writer: nothing here opens the store. Its events reach the
//! store through the ledger at boot (`actors::ledger::IngestSpill`), so only the ledger writes
//! the store. A file is one JSON object per line ([`SpilledEvent`]), in the order the events
//! happened; the directory is 0700, each file 0600, written whole to a temp file, fsynced and
//! renamed in (a reader never sees half a file). A file whose name is not `<session id>.jsonl`
//! is not corral's and is never touched; one that does not parse is left in place for a
//! person to look at, and named ([`Scan::unreadable`]).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::events::NewEvent;
use crate::events::EventKind;

/// The journal's directory inside the home.
pub const DIR: &str = "spill";

/// What a spill file's name ends with.
const SUFFIX: &str = ".jsonl";

/// One line of a spill file: an event the worker could not store, with when it was spilled
/// (`at`, stored as the event's time) and the session's last stored number the worker saw
/// then (`after_seq`), by which a boot killed between storing a file and removing it finds
/// the file already stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpilledEvent {
    pub session_id: String,
    pub prompt_id: Option<String>,
    pub run_id: Option<String>,
    pub kind: String,
    pub payload: serde_json::Value,
    pub at: i64,
    pub after_seq: Option<i64>,
}

impl SpilledEvent {
    pub fn new(event: &NewEvent, at: i64, after_seq: Option<i64>) -> Self {
        SpilledEvent {
            session_id: event.session_id.clone(),
            prompt_id: event.prompt_id.clone(),
            run_id: event.run_id.clone(),
            kind: event.kind.as_str().to_string(),
            payload: event.payload.clone(),
            at,
            after_seq,
        }
    }

    /// The event to append.
    pub fn event(&self) -> NewEvent {
        NewEvent {
            session_id: self.session_id.clone(),
            prompt_id: self.prompt_id.clone(),
            run_id: self.run_id.clone(),
            kind: EventKind::parse(&self.kind),
            payload: self.payload.clone(),
        }
    }
}

/// One session's spill file, read whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Spill {
    pub path: PathBuf,
    pub session_id: String,
    /// In the order they happened.
    pub events: Vec<SpilledEvent>,
}

/// What the journal holds.
#[derive(Debug, Default)]
pub struct Scan {
    /// The files read, oldest session id first (each session's file is independent).
    pub spills: Vec<Spill>,
    /// Corral's files that could not be read or parsed, with why: left in place.
    pub unreadable: Vec<(PathBuf, String)>,
}

/// The journal's directory in `home`.
pub fn dir(home: &Path) -> PathBuf {
    home.join(DIR)
}

/// Whether `name` is the name of a session's spill file: `<session id>.jsonl`, the id a
/// canonical (lower-case, hyphenated) UUID as corral makes them.
fn session_of(name: &str) -> Option<&str> {
    let id = name.strip_suffix(SUFFIX)?;
    let parsed = uuid::Uuid::parse_str(id).ok()?;
    (parsed.hyphenated().to_string() == id).then_some(id)
}

/// Writes `events` (a session's, in order) to its spill file, after whatever a file of that
/// session left there holds (kept whole: it may be one a boot could not read). The new file
/// is written beside it, fsynced and renamed over it, and the directory fsynced.
pub fn write(home: &Path, session_id: &str, events: &[SpilledEvent]) -> io::Result<PathBuf> {
    let name = format!("{session_id}{SUFFIX}");
    if session_of(&name).is_none() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a session id: {session_id}"),
        ));
    }
    let dir = dir(home);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    // A directory made by something else keeps its place but not looser rights.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
    let path = dir.join(&name);
    let mut text = match fs::read(&path) {
        Ok(old) => old,
        Err(error) if error.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(error) => return Err(error),
    };
    if !text.is_empty() && !text.ends_with(b"\n") {
        text.push(b'\n');
    }
    for event in events {
        serde_json::to_writer(&mut text, event)?;
        text.push(b'\n');
    }
    let temp = dir.join(format!(".{name}.tmp"));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(&text)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temp, &path)?;
    sync_dir(&dir)?;
    Ok(path)
}

/// Reads every session's spill file in `home` (none when there is no journal). Files of
/// other names are skipped unread.
pub fn scan(home: &Path) -> Scan {
    let mut scan = Scan::default();
    let dir = dir(home);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return scan,
        Err(error) => {
            scan.unreadable.push((dir, error.to_string()));
            return scan;
        }
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let session = session_of(&name)?.to_string();
            Some((session, entry.path()))
        })
        .collect();
    found.sort();
    for (session_id, path) in found {
        match read(&path, &session_id) {
            Ok(events) => scan.spills.push(Spill {
                path,
                session_id,
                events,
            }),
            Err(why) => scan.unreadable.push((path, why)),
        }
    }
    scan
}

/// A spill file's events; `Err` says why it is not one (a line that does not parse, an event
/// of another session).
fn read(path: &Path, session_id: &str) -> Result<Vec<SpilledEvent>, String> {
    let text = fs::read_to_string(path).map_err(|error| error.to_string())?;
    let mut events = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let event: SpilledEvent =
            serde_json::from_str(line).map_err(|error| format!("line {}: {error}", index + 1))?;
        if event.session_id != session_id {
            return Err(format!(
                "line {}: an event of session {}, not {session_id}",
                index + 1,
                event.session_id
            ));
        }
        events.push(event);
    }
    Ok(events)
}

/// Removes a spill file once its events are stored (and fsyncs the directory).
pub fn remove(spill: &Spill) -> io::Result<()> {
    fs::remove_file(&spill.path)?;
    if let Some(dir) = spill.path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SESSION: &str = "0193a5b2-7c1d-7e4f-8a9b-0c1d2e3f4a5b";

    fn event(kind: &str, text: &str) -> SpilledEvent {
        SpilledEvent::new(
            &NewEvent {
                session_id: SESSION.into(),
                prompt_id: Some("p1".into()),
                run_id: Some("r1".into()),
                kind: EventKind::parse(kind),
                payload: json!({ "text": text }),
            },
            1_700_000_000_000,
            Some(41),
        )
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn spill_round_trip_keeps_order_and_rights() {
        let home = tempfile::tempdir().unwrap();
        let events = vec![event("tool", "step 1"), event("tool", "step 2")];
        let path = write(home.path(), SESSION, &events).unwrap();
        assert_eq!(
            path,
            home.path().join("spill").join(format!("{SESSION}.jsonl"))
        );
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir(home.path())), 0o700);
        // A second spill of the session goes after the first.
        write(home.path(), SESSION, &[event("run.exited", "end")]).unwrap();
        let scan = scan(home.path());
        assert!(scan.unreadable.is_empty(), "{:?}", scan.unreadable);
        assert_eq!(scan.spills.len(), 1);
        let spill = &scan.spills[0];
        assert_eq!(spill.session_id, SESSION);
        let texts: Vec<_> = spill
            .events
            .iter()
            .map(|e| e.payload["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(texts, ["step 1", "step 2", "end"]);
        let back = spill.events[0].event();
        assert_eq!(back.kind, EventKind::Tool);
        assert_eq!(back.run_id.as_deref(), Some("r1"));
        // No temp file is left beside it.
        let names: Vec<_> = fs::read_dir(dir(home.path()))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        remove(spill).unwrap();
        assert!(!path.exists());
        assert!(super::scan(home.path()).spills.is_empty());
    }

    #[test]
    fn spill_corrupt_file_is_reported_and_left() {
        let home = tempfile::tempdir().unwrap();
        let path = write(home.path(), SESSION, &[event("tool", "step 1")]).unwrap();
        let mut text = fs::read_to_string(&path).unwrap();
        text.push_str("{\"session_id\": \"cut short\n");
        fs::write(&path, &text).unwrap();
        let scan = scan(home.path());
        assert!(scan.spills.is_empty());
        assert_eq!(scan.unreadable.len(), 1);
        assert_eq!(scan.unreadable[0].0, path);
        assert!(
            scan.unreadable[0].1.contains("line 2"),
            "{:?}",
            scan.unreadable
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), text, "left as it was");
        // An event of another session in a session's file is not taken either.
        let other = "0193a5b2-7c1d-7e4f-8a9b-0c1d2e3f4a5c";
        fs::write(
            dir(home.path()).join(format!("{other}.jsonl")),
            serde_json::to_string(&event("tool", "x")).unwrap() + "\n",
        )
        .unwrap();
        let scan = super::scan(home.path());
        assert_eq!(scan.unreadable.len(), 2, "{:?}", scan.unreadable);
    }

    #[test]
    fn spill_stray_files_are_not_touched() {
        let home = tempfile::tempdir().unwrap();
        let dir = dir(home.path());
        fs::create_dir_all(&dir).unwrap();
        let strays = [
            "notes.jsonl",
            "0193A5B2-7C1D-7E4F-8A9B-0C1D2E3F4A5B.jsonl",
            &format!("{SESSION}.json"),
            &format!(".{SESSION}.jsonl.tmp"),
        ];
        for name in strays {
            fs::write(dir.join(name), "not json").unwrap();
        }
        let scan = scan(home.path());
        assert!(scan.spills.is_empty());
        assert!(scan.unreadable.is_empty(), "{:?}", scan.unreadable);
        for name in strays {
            assert_eq!(fs::read_to_string(dir.join(name)).unwrap(), "not json");
        }
        assert!(write(home.path(), "../escape", &[]).is_err());
    }
}
