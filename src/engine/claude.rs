//! Placeholder until the adapter is written.

use std::ffi::OsString;

use super::{Engine, EngineEvent, EngineKind, RunSpec};

/// The `claude` adapter.
pub struct Claude;

impl Engine for Claude {
    fn kind(&self) -> EngineKind {
        EngineKind::Claude
    }

    fn argv(&self, spec: &RunSpec) -> Vec<OsString> {
        vec![
            spec.program.clone().into_os_string(),
            spec.prompt.clone().into(),
        ]
    }

    fn parse_line(&self, line: &str) -> Vec<EngineEvent> {
        vec![EngineEvent::Raw {
            line: line.to_string(),
        }]
    }
}
