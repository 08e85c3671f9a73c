//! Placeholder until the adapter is written.

use std::ffi::OsString;

use super::{Engine, EngineEvent, EngineKind, RunSpec};

/// The `opencode` adapter.
pub struct Opencode;

impl Engine for Opencode {
    fn kind(&self) -> EngineKind {
        EngineKind::Opencode
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
