//! The events of a turn, typed once: the Runner streams them, the control plane stores
//! them as `(type, payload)`, and the CLI reads them back. On the wire each is
//! `{"type": "tool.start", "payload": {...}}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One event of a running turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum TurnEvent {
    /// The Runner made a Hermes session for the turn (host agents).
    #[serde(rename = "session.created")]
    SessionCreated(SessionCreated),
    /// Streamed reply text.
    #[serde(rename = "text.delta")]
    TextDelta(TextDelta),
    #[serde(rename = "tool.start")]
    ToolStart(ToolStart),
    /// Output of a running tool as it happens, between its start and its completion.
    #[serde(rename = "tool.output")]
    ToolOutput(ToolOutput),
    #[serde(rename = "tool.complete")]
    ToolComplete(ToolComplete),
    /// Hermes asks whether a command may run.
    #[serde(rename = "approval.request")]
    ApprovalRequest(ApprovalRequest),
    /// Hermes (or the Worker) reported a failure.
    #[serde(rename = "error")]
    Error(Message),
    /// A computer agent's computer runs under the turn's lease.
    #[serde(rename = "computer.ready")]
    ComputerReady(ComputerReady),
    /// The turn waits for something (a free computer slot, a Hermes session).
    #[serde(rename = "waiting")]
    Waiting(Message),
}

impl TurnEvent {
    /// The event's `type` on the wire and in the store.
    pub fn kind(&self) -> &'static str {
        match self {
            TurnEvent::SessionCreated(_) => event_types::SESSION_CREATED,
            TurnEvent::TextDelta(_) => event_types::TEXT_DELTA,
            TurnEvent::ToolStart(_) => event_types::TOOL_START,
            TurnEvent::ToolOutput(_) => event_types::TOOL_OUTPUT,
            TurnEvent::ToolComplete(_) => event_types::TOOL_COMPLETE,
            TurnEvent::ApprovalRequest(_) => event_types::APPROVAL_REQUEST,
            TurnEvent::Error(_) => event_types::ERROR,
            TurnEvent::ComputerReady(_) => event_types::COMPUTER_READY,
            TurnEvent::Waiting(_) => event_types::WAITING,
        }
    }

    /// The event as the store keeps it: its type and its payload.
    pub fn to_parts(&self) -> (&'static str, Value) {
        let payload = match serde_json::to_value(self) {
            Ok(Value::Object(mut map)) => map.remove("payload").unwrap_or(Value::Null),
            _ => Value::Null,
        };
        (self.kind(), payload)
    }

    /// An event from its stored type and payload.
    pub fn from_parts(kind: &str, payload: Value) -> Result<TurnEvent, serde_json::Error> {
        serde_json::from_value(serde_json::json!({ "type": kind, "payload": payload }))
    }

    pub fn waiting(message: impl Into<String>) -> TurnEvent {
        TurnEvent::Waiting(Message {
            message: message.into(),
        })
    }

    pub fn error(message: impl Into<String>) -> TurnEvent {
        TurnEvent::Error(Message {
            message: message.into(),
        })
    }
}

/// The `type` of each event, for SQL and logs.
pub mod event_types {
    pub const SESSION_CREATED: &str = "session.created";
    pub const TEXT_DELTA: &str = "text.delta";
    pub const TOOL_START: &str = "tool.start";
    pub const TOOL_OUTPUT: &str = "tool.output";
    pub const TOOL_COMPLETE: &str = "tool.complete";
    pub const APPROVAL_REQUEST: &str = "approval.request";
    pub const ERROR: &str = "error";
    pub const COMPUTER_READY: &str = "computer.ready";
    pub const WAITING: &str = "waiting";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionCreated {
    pub hermes_session_id: String,
    #[serde(default)]
    pub stored_session_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextDelta {
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolStart {
    /// The model's tool-call id.
    pub tool_id: String,
    pub name: String,
}

/// A finished tool call: `args` and `result` as JSON (as Hermes or the Runner reports them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolComplete {
    pub tool_id: String,
    pub name: String,
    #[serde(default)]
    pub args: Value,
    #[serde(default)]
    pub result: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    pub command: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub choices: Vec<String>,
}

/// The payload of `error` and `waiting`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub message: String,
}

/// Live output a tool call sends at most, over both streams: the rest arrives only in its
/// result (which keeps its own cap). Keeps a chatty command from flooding the event log.
pub const LIVE_OUTPUT_CAP: usize = 64 * 1024;

/// Which stream of a command a piece of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StdStream {
    Stdout,
    Stderr,
}

/// The payload of a `tool.output` event: a piece of a running tool's output. Text, as the
/// tool wrote it (invalid UTF-8 as U+FFFD); untrusted, so a terminal shows it escaped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub tool_id: String,
    pub name: String,
    pub stream: StdStream,
    pub text: String,
    /// On the last piece sent live when the output went on past [`LIVE_OUTPUT_CAP`]: the
    /// rest is only in the tool's result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// The payload of a `computer.ready` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComputerReady {
    pub computer_id: String,
    pub fence: i64,
    pub container_id: String,
    pub resources: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_their_wire_form_and_round_trip_through_the_store_parts() {
        let e = TurnEvent::ToolStart(ToolStart {
            tool_id: "c1".into(),
            name: "terminal".into(),
        });
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            serde_json::json!({ "type": "tool.start", "payload": { "tool_id": "c1", "name": "terminal" } })
        );
        let (kind, payload) = e.to_parts();
        assert_eq!(kind, "tool.start");
        assert_eq!(TurnEvent::from_parts(kind, payload).unwrap(), e);
        let waiting = TurnEvent::waiting("a free slot");
        assert_eq!(
            serde_json::to_value(&waiting).unwrap(),
            serde_json::json!({ "type": "waiting", "payload": { "message": "a free slot" } })
        );
    }

    #[test]
    fn an_unknown_type_or_a_malformed_payload_is_refused() {
        assert!(TurnEvent::from_parts("tool.exploded", serde_json::json!({})).is_err());
        assert!(TurnEvent::from_parts("tool.start", serde_json::json!({ "name": 1 })).is_err());
    }
}
