//! The tools a computer agent's model may call in a Worker turn: one registry, one module
//! per family, one schema builder.
//!
//! Adding a tool is one item and one line: a type implementing [`Tool`] (its [`Spec`],
//! typed arguments and handler) in its family's file, or a new file for a new family, and
//! one line in `TOOLS`. A new family also gets a [`Family`] variant, which says which
//! turns offer it. The model sees the tools in the order of `TOOLS`.
//!
//! There is no browser family: the model starts a desktop's Firefox with `terminal` and
//! drives it with the screen tools (the guest agent's own browser actions serve the image
//! check, `computer/desktop_verify.rs`).

pub mod export;
pub mod files;
pub mod screen;
pub mod team;
pub mod terminal;

use std::future::Future;

use futures_util::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::artifacts::TurnExports;
use super::client::MachineClient;
use super::live_output::LiveOutput;
use crate::computer::session::GuestSession;

/// Every tool, in the order the model sees them.
static TOOLS: &[&dyn Entry] = &[
    &terminal::Terminal,
    &files::ReadFile,
    &files::WriteFile,
    &files::ListFiles,
    &export::ComputerExport,
    &screen::SCREENSHOT,
    &screen::LEFT_CLICK,
    &screen::RIGHT_CLICK,
    &screen::DOUBLE_CLICK,
    &screen::MOVE_CURSOR,
    &screen::DRAG,
    &screen::TYPE_TEXT,
    &screen::PRESS_KEY,
    &screen::HOTKEY,
    &screen::SCROLL,
    &screen::GET_SCREEN_SIZE,
    &screen::GET_CURSOR_POSITION,
    &team::TEAM_CREATE_MEMBER,
    &team::TEAM_CREATE,
    &team::GOAL_CREATE,
    &team::SUBTASK_ADD,
    &team::SUBTASK_REVIEW,
    &team::GOAL_COMPLETE,
    &team::GOAL_BLOCK,
    &team::GOAL_STATUS,
    &team::ASK_USER,
    &team::HELPER_CREATE,
];

/// A group of tools that turns get or do not get together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Terminal,
    Files,
    Export,
    /// A desktop computer's screen actions.
    Screen,
    /// An admin agent's team tools, run by the control plane.
    Team,
}

/// What decides a turn's tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnKind {
    /// The computer's image has a desktop.
    pub desktop: bool,
    /// The agent manages teams (the turn carries a team-tool id).
    pub team: bool,
}

impl Family {
    fn offered(self, kind: TurnKind) -> bool {
        match self {
            Family::Terminal | Family::Files | Family::Export => true,
            Family::Screen => kind.desktop,
            Family::Team => kind.team,
        }
    }

    /// Whether its tools run in the guest (and so need a live guest session).
    pub fn in_guest(self) -> bool {
        match self {
            Family::Terminal | Family::Files | Family::Export | Family::Screen => true,
            Family::Team => false,
        }
    }
}

/// What the model is told about a tool.
pub struct Spec {
    pub name: &'static str,
    pub description: fn() -> String,
    /// The JSON Schema `properties` of its arguments.
    pub properties: fn() -> Value,
    pub required: &'static [&'static str],
}

impl Spec {
    /// The tool's schema in the OpenAI function format: the one builder of every tool.
    pub fn schema(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": (self.description)(),
                "parameters": {
                    "type": "object",
                    "properties": (self.properties)(),
                    "required": self.required,
                },
            }
        })
    }
}

/// A property of type string.
pub fn string(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

/// A property of type array of strings.
pub fn strings(description: &str) -> Value {
    json!({ "type": "array", "items": { "type": "string" }, "description": description })
}

/// What a tool call may use of its turn.
pub struct Call<'a> {
    pub guest: &'a GuestSession,
    pub stop: &'a CancellationToken,
    /// The call's live output (`terminal` streams into it).
    pub live: &'a LiveOutput,
    pub exports: &'a TurnExports,
    /// The control plane, for team tools.
    pub control: &'a MachineClient,
    pub generation: i64,
    /// The turn's opaque team-tool id, when its agent manages teams.
    pub team: Option<&'a str>,
}

/// One tool. Its answer is always a value for the model: a failure is `{"error": ...}`, not
/// an error of the turn.
pub trait Tool: Sync {
    /// The model's arguments, parsed once before the handler runs.
    type Args: DeserializeOwned + Send;

    fn spec(&self) -> &Spec;

    fn family(&self) -> Family;

    /// The arguments as the model's JSON has them. By default an object's fields; any
    /// other value has no fields (as `args["key"]` reads it).
    fn parse(&self, args: &Value) -> Result<Self::Args, String> {
        let parsed = match args {
            Value::Object(_) => Self::Args::deserialize(args),
            _ => Self::Args::deserialize(&json!({})),
        };
        parsed.map_err(|e| self.bad_arguments(e))
    }

    /// What the model is told when its arguments do not parse.
    fn bad_arguments(&self, e: serde_json::Error) -> String {
        format!("bad arguments for {}: {e}", self.spec().name)
    }

    fn run<'a>(
        &'a self,
        args: Self::Args,
        call: &'a Call<'a>,
    ) -> impl Future<Output = Value> + Send + 'a;
}

/// A tool with its argument type erased, as the registry holds it.
pub trait Entry: Sync {
    fn name(&self) -> &'static str;
    fn family(&self) -> Family;
    fn schema(&self) -> Value;
    /// Parses the arguments and runs the tool; a parse failure is the model's answer.
    fn call<'a>(&'a self, args: &'a Value, call: &'a Call<'a>) -> BoxFuture<'a, Value>;
}

impl<T: Tool> Entry for T {
    fn name(&self) -> &'static str {
        self.spec().name
    }
    fn family(&self) -> Family {
        Tool::family(self)
    }
    fn schema(&self) -> Value {
        self.spec().schema()
    }
    fn call<'a>(&'a self, args: &'a Value, call: &'a Call<'a>) -> BoxFuture<'a, Value> {
        Box::pin(async move {
            match self.parse(args) {
                Ok(args) => self.run(args, call).await,
                Err(e) => json!({ "error": e }),
            }
        })
    }
}

/// The tools one turn offers.
pub struct TurnTools {
    tools: Vec<&'static dyn Entry>,
}

impl TurnTools {
    pub fn new(kind: TurnKind) -> TurnTools {
        TurnTools {
            tools: TOOLS
                .iter()
                .copied()
                .filter(|t| t.family().offered(kind))
                .collect(),
        }
    }

    /// Their schemas, as the Worker hands them to the model.
    pub fn schemas(&self) -> Value {
        Value::Array(self.tools.iter().map(|t| t.schema()).collect())
    }

    /// The offered tool of this name.
    pub fn find(&self, name: &str) -> Option<&'static dyn Entry> {
        self.tools.iter().copied().find(|t| t.name() == name)
    }
}

/// The answer to a call of a tool the turn did not offer (the Worker refuses those first).
pub fn not_offered(name: &str) -> Value {
    json!({ "error": format!("tool {name:?} is not available in this computer") })
}

/// The names of a family's tools, in the order they are offered.
pub fn names(family: Family) -> Vec<&'static str> {
    TOOLS
        .iter()
        .filter(|t| t.family() == family)
        .map(|t| t.name())
        .collect()
}

/// For an optional argument the model may get wrong: a value of another type counts as
/// absent, as it did when arguments were read with `as_str()`/`as_u64()`.
pub fn lenient<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    Ok(T::deserialize(Value::deserialize(d)?).ok())
}

#[cfg(test)]
mod tests;
