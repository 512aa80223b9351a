//! The typed view of Hermes's gateway results, turn events and stop outcomes.

use std::pin::Pin;
use std::task::{Context, Poll};

use serde::Deserialize;
use serde_json::Value;

/// What `session.create` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The live id (8 hex digits) every gateway method takes.
    pub session_id: String,
    /// The id in Hermes's database and REST API (`/api/sessions/{id}/messages`).
    pub stored_session_id: String,
    pub desktop_contract: u64,
}

/// One entry of `session.active_list`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ActiveSession {
    pub id: String,
    /// `idle`, `working`, `starting` or `waiting`.
    pub status: String,
}

/// Token counts of a turn (`message.complete` `usage`); absent fields are 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub model: Option<String>,
    pub input: u64,
    pub output: u64,
    pub reasoning: u64,
    pub total: u64,
    /// Model calls the turn made.
    pub calls: u64,
    pub context_used: u64,
    pub context_max: u64,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteStatus {
    Complete,
    Interrupted,
    Error,
}

impl CompleteStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CompleteStatus::Complete => "complete",
            CompleteStatus::Interrupted => "interrupted",
            CompleteStatus::Error => "error",
        }
    }
    /// Any status other than `complete` or `interrupted` counts as an error.
    pub fn parse(s: &str) -> CompleteStatus {
        match s {
            "complete" => CompleteStatus::Complete,
            "interrupted" => CompleteStatus::Interrupted,
            _ => CompleteStatus::Error,
        }
    }
}

/// Hermes asks whether a dangerous command may run (`approval.request`). Answer with
/// [`HermesClient::approval_respond`](super::HermesClient::approval_respond); the request
/// carries no id: the answer applies to the session's pending approval.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApprovalRequest {
    pub command: String,
    pub description: String,
    pub pattern_keys: Vec<String>,
    /// Offered answers, e.g. `once`, `session`, `always`, `deny`.
    pub choices: Vec<String>,
    pub allow_permanent: bool,
}

/// An answer to an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalChoice {
    Once,
    Session,
    Always,
    Deny,
}

impl ApprovalChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalChoice::Once => "once",
            ApprovalChoice::Session => "session",
            ApprovalChoice::Always => "always",
            ApprovalChoice::Deny => "deny",
        }
    }
}

/// One event of a turn, in Hermes's order. A turn ends with exactly one `Complete`; a
/// [`TurnStream`](super::TurnStream) that ends without it lost its connection to Hermes,
/// and the turn's outcome is then unknown.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// `message.start`: Hermes began answering.
    Started,
    /// `message.delta`: streamed answer text. Display only: the final text is
    /// `Complete::text` (deltas carry e.g. a `\n\n` prefix after a tool round).
    TextDelta(String),
    /// `tool.start`: `tool_id` is the model's tool-call id.
    ToolStart {
        tool_id: String,
        name: String,
    },
    /// `tool.complete`: `args` and `result` are JSON as Hermes reports them.
    ToolComplete {
        tool_id: String,
        name: String,
        args: Value,
        result: Value,
    },
    Approval(ApprovalRequest),
    /// `error`: Hermes reported a failure. When Hermes sends no `message.complete` after it
    /// (a crashed turn), the client ends the turn with a `Complete` of status `Error` once
    /// the session is no longer running.
    Error(String),
    /// `message.complete`: the end of the turn.
    Complete {
        text: String,
        status: CompleteStatus,
        usage: Usage,
    },
}

impl TurnEvent {
    pub fn is_complete(&self) -> bool {
        matches!(self, TurnEvent::Complete { .. })
    }
}

/// A confirmed stop: the session is no longer running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopConfirmation {
    /// Live in Hermes and idle (`session.active_list` status `idle`).
    Idle,
    /// Not among Hermes's live sessions (closed, or never existed in this Hermes process).
    Gone,
}

/// A stop that could not be confirmed: the session may still be running.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot confirm that Hermes session {session_id} stopped: {reason}")]
pub struct NotConfirmed {
    pub session_id: String,
    pub reason: String,
}

/// The events of one turn, in order, ending with [`TurnEvent::Complete`]. `None` before
/// `Complete` means the connection to Hermes was lost: the turn's outcome is unknown.
/// Also a [`futures_util::Stream`].
pub struct TurnStream {
    pub(crate) session_id: String,
    pub(crate) rx: tokio::sync::mpsc::UnboundedReceiver<TurnEvent>,
}

impl TurnStream {
    pub fn session_id(&self) -> &str {
        &self.session_id
    }
    pub async fn next(&mut self) -> Option<TurnEvent> {
        self.rx.recv().await
    }
}

impl futures_util::Stream for TurnStream {
    type Item = TurnEvent;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<TurnEvent>> {
        self.rx.poll_recv(cx)
    }
}

fn text_of(payload: &Value, key: &str) -> String {
    match payload.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn strings_of(payload: &Value, key: &str) -> Vec<String> {
    payload
        .get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The turn event for a gateway event of type `kind`, or `None` for what a turn does not
/// need (`thinking.delta`, `reasoning.available`, `session.info`, `status.update`,
/// `tool.generating`, `session.title`, unknown types, empty deltas).
pub fn parse_event(kind: &str, payload: &Value) -> Option<TurnEvent> {
    Some(match kind {
        "message.start" => TurnEvent::Started,
        "message.delta" => {
            let text = text_of(payload, "text");
            if text.is_empty() {
                return None;
            }
            TurnEvent::TextDelta(text)
        }
        "tool.start" => TurnEvent::ToolStart {
            tool_id: text_of(payload, "tool_id"),
            name: text_of(payload, "name"),
        },
        "tool.complete" => TurnEvent::ToolComplete {
            tool_id: text_of(payload, "tool_id"),
            name: text_of(payload, "name"),
            args: payload.get("args").cloned().unwrap_or(Value::Null),
            result: payload.get("result").cloned().unwrap_or(Value::Null),
        },
        "approval.request" => TurnEvent::Approval(ApprovalRequest {
            command: text_of(payload, "command"),
            description: text_of(payload, "description"),
            pattern_keys: strings_of(payload, "pattern_keys"),
            choices: strings_of(payload, "choices"),
            allow_permanent: payload
                .get("allow_permanent")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }),
        "error" => {
            let message = text_of(payload, "message");
            TurnEvent::Error(if message.is_empty() {
                "Hermes reported an error without a message".into()
            } else {
                message
            })
        }
        "message.complete" => TurnEvent::Complete {
            text: text_of(payload, "text"),
            status: CompleteStatus::parse(payload.get("status").and_then(Value::as_str)?),
            usage: payload
                .get("usage")
                .and_then(|u| serde_json::from_value(u.clone()).ok())
                .unwrap_or_default(),
        },
        _ => return None,
    })
}

/// Why a `session.create` result is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CreatedError {
    /// The desktop contract found (`none` when absent).
    Contract(String),
    Malformed(&'static str),
}

/// Reads the `session.create` result and checks its `desktop_contract`.
pub(crate) fn parse_session_created(
    result: &Value,
    expected: u64,
) -> Result<SessionInfo, CreatedError> {
    let id = |key: &str| {
        result
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let contract = result.pointer("/info/desktop_contract");
    let desktop_contract = match contract.and_then(Value::as_u64) {
        Some(c) if c == expected => c,
        Some(c) => return Err(CreatedError::Contract(c.to_string())),
        None => {
            return Err(CreatedError::Contract(match contract {
                Some(v) => v.to_string(),
                None => "none".into(),
            }));
        }
    };
    let missing = CreatedError::Malformed;
    Ok(SessionInfo {
        session_id: id("session_id").ok_or(missing("no session_id"))?,
        stored_session_id: id("stored_session_id").ok_or(missing("no stored_session_id"))?,
        desktop_contract,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn turn_events_are_typed_and_noise_ignored() {
        assert_eq!(
            parse_event("message.start", &Value::Null),
            Some(TurnEvent::Started)
        );
        assert_eq!(
            parse_event("message.delta", &json!({"text": "Hi"})),
            Some(TurnEvent::TextDelta("Hi".into()))
        );
        for noise in [
            "thinking.delta",
            "reasoning.available",
            "session.info",
            "status.update",
            "tool.generating",
            "session.title",
            "something.new",
        ] {
            assert_eq!(parse_event(noise, &json!({"text": "x"})), None, "{noise}");
        }
        assert_eq!(parse_event("message.delta", &json!({"text": ""})), None);
        let done = parse_event(
            "tool.complete",
            &json!({"tool_id":"call_1","name":"terminal","args":{"command":"echo hi"},
                    "duration_s":0.6,"result":{"output":"hi","exit_code":0}}),
        );
        assert_eq!(
            done,
            Some(TurnEvent::ToolComplete {
                tool_id: "call_1".into(),
                name: "terminal".into(),
                args: json!({"command":"echo hi"}),
                result: json!({"output":"hi","exit_code":0}),
            })
        );
        let approval = parse_event(
            "approval.request",
            &json!({"command":"rm -r x","description":"recursive delete",
                    "pattern_keys":["recursive delete"],"choices":["once","deny"],
                    "allow_permanent":true}),
        );
        assert!(
            matches!(approval, Some(TurnEvent::Approval(a)) if a.choices == ["once", "deny"] && a.allow_permanent)
        );
        assert_eq!(
            parse_event("error", &json!({})),
            Some(TurnEvent::Error(
                "Hermes reported an error without a message".into()
            ))
        );
    }

    #[test]
    fn message_complete_carries_text_status_and_usage() {
        let ev = parse_event(
            "message.complete",
            &json!({"text":"one two","status":"interrupted",
                    "usage":{"model":"m","input":3,"output":2,"total":5,"calls":1,"extra":true}}),
        )
        .unwrap();
        let TurnEvent::Complete {
            text,
            status,
            usage,
        } = ev
        else {
            panic!("{ev:?}")
        };
        assert_eq!(text, "one two");
        assert_eq!(status, CompleteStatus::Interrupted);
        assert_eq!((usage.input, usage.output, usage.total), (3, 2, 5));
        assert_eq!(
            CompleteStatus::parse("weird"),
            CompleteStatus::Error,
            "unknown statuses are errors"
        );
    }

    #[test]
    fn session_create_checks_the_desktop_contract() {
        let ok = json!({"session_id":"bfa5b474","stored_session_id":"2026_x",
                        "info":{"desktop_contract":4}});
        let info = parse_session_created(&ok, 4).unwrap();
        assert_eq!(info.session_id, "bfa5b474");
        assert_eq!(info.stored_session_id, "2026_x");
        let mut v5 = ok.clone();
        v5["info"]["desktop_contract"] = json!(5);
        assert_eq!(
            parse_session_created(&v5, 4).unwrap_err(),
            CreatedError::Contract("5".into())
        );
        let none = json!({"session_id":"a","stored_session_id":"b","info":{}});
        assert_eq!(
            parse_session_created(&none, 4).unwrap_err(),
            CreatedError::Contract("none".into())
        );
        let no_id = json!({"stored_session_id":"b","info":{"desktop_contract":4}});
        assert_eq!(
            parse_session_created(&no_id, 4).unwrap_err(),
            CreatedError::Malformed("no session_id")
        );
    }
}
