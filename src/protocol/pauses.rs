//! Pauses (#35): `pause`, `resume`, `pause.list`. A scope is everything (`all`), a project, an
//! execution group or a session; exactly one is named.

use serde::{Deserialize, Serialize};

use super::{method, NoParams};
use crate::store::pauses::Pause;

method! {
    /// Pauses a scope: none of its queued prompts starts a run until it is resumed; a
    /// prompt waiting for a slot or a retry goes back to the head of its queue; with `now`,
    /// its running prompts are interrupted and go back too.
    PauseWork = "pause": PauseParams => PauseResult,
    /// Lifts a scope's pause; what it held starts as the slots allow.
    ResumeWork = "resume": PauseTarget => ResumeResult,
    /// The pauses in force, oldest first.
    PauseList = "pause.list": NoParams => Vec<Pause>,
}

/// What a pause or a resume names: exactly one of these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseTarget {
    /// Everything.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// A project: its id, name, or a unique id prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// An execution group, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// A session: its id, title, or a unique id prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

/// `pause`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseParams {
    #[serde(flatten)]
    pub target: PauseTarget,
    /// Interrupt the scope's running prompts too (each goes back to the head of its queue).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub now: bool,
}

/// `pause`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseResult {
    /// The scope's pause as it stands (paused earlier, it keeps its time and reason).
    pub pause: Pause,
    /// Every pause in force.
    pub pauses: Vec<Pause>,
}

/// `resume`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumeResult {
    /// Whether the scope was paused.
    pub lifted: bool,
    /// The prompts that started because of it (others wait for a slot as usual).
    pub started: Vec<String>,
    /// The pauses still in force (another may still cover the scope).
    pub pauses: Vec<Pause>,
}
