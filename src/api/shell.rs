//! The operator's shell (`yy computer attach C --control`): a pty in the computer's own
//! container, relayed CLI ↔ control plane ↔ Runner ↔ docker exec over two WebSockets.
//!
//! Frames, the same on both legs: binary frames carry terminal bytes (keystrokes towards
//! the computer, screen output back); text frames carry one small JSON control message,
//! [`Control`]. docs/protocol.md describes the relay.

use serde::{Deserialize, Serialize};

/// Largest frame either side sends or accepts (terminal bytes come in small chunks).
pub const MAX_FRAME: usize = 64 * 1024;
/// How long the control plane waits for the Runner to connect its side of a relay.
pub const RUNNER_CONNECT_TIMEOUT_MS: u64 = 30_000;
/// Set by a replica that carries a Runner's relay leg on to the replica holding the relay
/// (its value: the carrying replica's id); the holder then checks the Runner's generation
/// in the database, since the Runner is connected to the other one.
pub const HEADER_RELAYED_BY: &str = "yy-relayed-by";
/// The key that detaches the CLI from the shell: Ctrl-] (as in telnet).
pub const DETACH_BYTE: u8 = 0x1d;

/// The WebSocket limits of every leg: frames and messages of at most [`MAX_FRAME`], and a
/// small write buffer (a slow reader holds the sender back instead of growing it).
pub fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME))
        .max_frame_size(Some(MAX_FRAME))
        .max_write_buffer_size(4 * MAX_FRAME)
}

/// A relay leg's WebSocket, as the CLI and the Runner open it.
pub type RelaySocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens a relay leg with [`ws_config`]'s limits, over TLS when `connector` says so; no
/// Nagle delay (keystrokes are small).
pub async fn connect(
    request: tokio_tungstenite::tungstenite::handshake::client::Request,
    connector: Option<tokio_tungstenite::Connector>,
) -> Result<RelaySocket, tokio_tungstenite::tungstenite::Error> {
    let (ws, _) = tokio_tungstenite::connect_async_tls_with_config(
        request,
        Some(ws_config()),
        true,
        connector,
    )
    .await?;
    Ok(ws)
}

/// A control message (a text frame).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Control {
    /// CLI → Runner: the operator's terminal has this size now.
    Resize { cols: u16, rows: u16 },
    /// Runner → CLI: the shell exited with this status (-1: killed by a signal).
    Exit(i64),
    /// Control plane or Runner → CLI: the relay ends for this reason (control ended, the
    /// Runner could not open the shell, ...); the socket closes after it.
    Closed(String),
}

impl Control {
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("control messages serialize")
    }

    pub fn parse(text: &str) -> Option<Control> {
        serde_json::from_str(text).ok()
    }
}

/// Query of `GET /api/v1/computers/{id}/shell` (a WebSocket upgrade).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellQuery {
    /// The control fence the caller holds (from `POST .../control`).
    pub control_fence: i64,
    #[serde(default)]
    pub cols: Option<u16>,
    #[serde(default)]
    pub rows: Option<u16>,
}

/// Payload of the `computer.shell` Runner command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellPayload {
    pub computer_id: String,
    /// The computer's fence: the Runner opens the shell only in the container it holds.
    pub fence: i64,
    /// The operator's control fence, for the Runner's log and the audit trail.
    pub control_fence: i64,
    /// One-time id of the relay: the Runner connects `GET /runner/v1/shell/{relay_id}`.
    /// Random (122 bits), bound to this Runner, and good for one connection.
    pub relay_id: String,
    pub cols: u16,
    pub rows: u16,
}

/// A window size both sides accept: zero or absurd sizes become 80×24 / are capped.
pub fn window(cols: Option<u16>, rows: Option<u16>) -> (u16, u16) {
    let fit = |v: Option<u16>, default: u16| match v {
        Some(0) | None => default,
        Some(v) => v.min(1000),
    };
    (fit(cols, 80), fit(rows, 24))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_are_small_json() {
        let r = Control::Resize {
            cols: 100,
            rows: 30,
        };
        assert_eq!(r.to_text(), r#"{"resize":{"cols":100,"rows":30}}"#);
        assert_eq!(Control::Exit(3).to_text(), r#"{"exit":3}"#);
        assert_eq!(Control::parse(r#"{"exit":0}"#), Some(Control::Exit(0)));
        assert_eq!(
            Control::parse(r#"{"closed":"bye"}"#),
            Some(Control::Closed("bye".into()))
        );
        assert_eq!(Control::parse("not json"), None);
        assert_eq!(window(None, Some(0)), (80, 24));
        assert_eq!(window(Some(5000), Some(40)), (1000, 40));
    }
}
