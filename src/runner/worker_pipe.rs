//! The messages on a Worker's pipe (JSON lines; `worker_entry.py` is the other side).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the Runner sends a Worker.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToWorker<'a> {
    /// Runs one turn: the model's settings (and key) travel only here.
    Turn {
        session: &'a str,
        model: Value,
        tools: &'a Value,
        message: &'a str,
        history: Vec<HistoryLine<'a>>,
        system: &'a str,
    },
    /// Builds Hermes's agent for the turn that follows with the same settings, while the
    /// Runner still starts the computer.
    Prepare {
        session: &'a str,
        model: Value,
        tools: &'a Value,
        system: &'a str,
    },
    /// The answer to a `tool_call`: a string, or a `{"_multimodal": true, ...}` envelope.
    ToolResult { call_id: &'a str, content: Value },
    /// Stops the model loop.
    Interrupt,
    /// The Worker now serves one agent: its Hermes log goes to `log` (truncated).
    Claim { log: &'a str },
}

/// One earlier message of the session, as the model sees it.
#[derive(Debug, Serialize)]
pub struct HistoryLine<'a> {
    pub role: &'a str,
    pub content: &'a str,
}

/// What a Worker sends the Runner.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromWorker {
    /// Its first message: Hermes is imported.
    Ready {
        #[serde(default)]
        hermes_version: String,
    },
    /// Streamed answer text.
    Delta {
        #[serde(default)]
        text: String,
    },
    /// The model calls a tool the turn offered; the Runner runs it and answers.
    ToolCall {
        call_id: String,
        name: String,
        #[serde(default)]
        args: Value,
    },
    /// The model called a tool the turn did not offer; nothing ran.
    Refused {
        name: String,
        #[serde(default)]
        reason: Value,
    },
    /// The end of the turn.
    Done {
        #[serde(default)]
        status: String,
        #[serde(default)]
        text: String,
        #[serde(default)]
        error: Option<String>,
        /// The model's context window Hermes settled on (given, or found by probing).
        #[serde(default)]
        context_length: Option<u64>,
    },
    /// A type this Runner does not know (from a newer entry): logged and skipped.
    #[serde(other)]
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_keep_the_wire_form_the_entry_speaks() {
        let sent = serde_json::to_value(ToWorker::ToolResult {
            call_id: "c1",
            content: Value::String("ok".into()),
        })
        .unwrap();
        assert_eq!(
            sent,
            serde_json::json!({ "type": "tool_result", "call_id": "c1", "content": "ok" })
        );
        assert_eq!(
            serde_json::to_value(ToWorker::Interrupt).unwrap(),
            serde_json::json!({ "type": "interrupt" })
        );
        let got: FromWorker = serde_json::from_str(
            r#"{"type":"tool_call","call_id":"c2","name":"terminal","args":{"command":"ls"}}"#,
        )
        .unwrap();
        assert_eq!(
            got,
            FromWorker::ToolCall {
                call_id: "c2".into(),
                name: "terminal".into(),
                args: serde_json::json!({ "command": "ls" }),
            }
        );
        let done: FromWorker =
            serde_json::from_str(r#"{"type":"done","status":"complete","text":"hi","error":null}"#)
                .unwrap();
        assert!(matches!(done, FromWorker::Done { ref status, .. } if status == "complete"));
        let newer: FromWorker = serde_json::from_str(r#"{"type":"progress","x":1}"#).unwrap();
        assert_eq!(newer, FromWorker::Unknown);
    }
}
