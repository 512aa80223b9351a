//! The Runner's client for a Hermes Agent on its machine (`hermes serve`, hermes-agent 0.19).
//!
//! Hermes is driven through its JSON-RPC 2.0 gateway on the WebSocket `/api/ws` and read
//! through a few read-only REST paths. docs/hermes.md explains the set-up, and
//! docs/hermes-protocol-notes.md the wire protocol this module was written against.
//!
//! - [`HermesAccess`]: where Hermes is and how to authenticate (a loopback session token,
//!   from a file or from [`Supervisor`], or non-loopback `hermesCredentials`).
//! - [`HermesClient`]: one gateway connection; version and `desktop_contract` checks, a
//!   fixed method allowlist, turns as streams of [`TurnEvent`]s, confirmed stops.
//! - [`HermesRest`]: the read-only REST helpers.
//! - [`Supervisor`]: starts `hermes serve` itself with a token passed only by environment.

mod access;
mod client;
mod events;
mod rest;
mod supervisor;

pub use access::{HermesAccess, HermesAuth, HermesCredentials, Secret, is_loopback_literal};
pub use client::{ALLOWED_METHODS, HermesClient};
pub use events::{
    ActiveSession, ApprovalChoice, ApprovalRequest, CompleteStatus, NotConfirmed, SessionInfo,
    StopConfirmation, TurnEvent, TurnStream, Usage,
};
pub use rest::{HermesRest, HermesStatus};
pub use supervisor::{Supervisor, SupervisorOptions};

/// The hermes-agent release line this yy speaks (`/api/status` `version`).
pub const SUPPORTED_VERSION_PREFIX: &str = "0.19.";
/// Shown in errors: the supported versions.
pub const SUPPORTED_VERSIONS: &str = "0.19.x";
/// The exact version scripts/install-hermes.sh installs.
pub const PINNED_VERSION: &str = "0.19.0";
/// Hermes's `DESKTOP_BACKEND_CONTRACT` for 0.19 (`session.create` `info.desktop_contract`).
pub const DESKTOP_CONTRACT: u64 = 4;

/// JSON-RPC error codes Hermes uses.
pub mod codes {
    pub const SESSION_NOT_FOUND: i64 = 4001;
    pub const SESSION_BUSY: i64 = 4009;
    pub const TOO_MANY_SESSIONS: i64 = 4090;
    pub const UNKNOWN_METHOD: i64 = -32601;
}

/// Every failure of this module. Messages are one line and never hold a secret (no token,
/// password, cookie or ticket, and no URL that carries one).
#[derive(Debug, thiserror::Error)]
pub enum HermesError {
    #[error("Hermes access: {0}")]
    Config(String),
    #[error("cannot use the Hermes token file {path}: {reason}")]
    TokenFile { path: String, reason: String },
    #[error("cannot reach Hermes at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error(
        "Hermes at {url} is hermes-agent {found}, and this yy supports hermes-agent {supported}: install the pinned version with scripts/install-hermes.sh"
    )]
    UnsupportedVersion {
        url: String,
        found: String,
        supported: String,
    },
    #[error(
        "Hermes at {url} speaks desktop contract {found}, and this yy needs desktop contract {expected} (hermes-agent {SUPPORTED_VERSIONS}): install the pinned version with scripts/install-hermes.sh"
    )]
    ContractMismatch {
        url: String,
        found: String,
        expected: u64,
    },
    #[error("Hermes at {url} refused {what}: {hint}")]
    Unauthorized {
        url: String,
        what: String,
        hint: String,
    },
    #[error(
        "gateway method {0:?} is not on yy's allowlist of Hermes methods; refused without sending it"
    )]
    MethodNotAllowed(String),
    #[error(
        "GET {0} is not allowed: yy only reads /api/status, /api/sessions and /api/profiles from Hermes"
    )]
    PathNotAllowed(String),
    #[error("Hermes has no live session {0}")]
    SessionNotFound(String),
    #[error("a turn is already running in Hermes session {0}")]
    TurnInProgress(String),
    #[error("Hermes {method} failed: {message} (code {code})")]
    Rpc {
        method: String,
        code: i64,
        message: String,
    },
    #[error("Hermes did not answer {what} within {secs} s")]
    Timeout { what: String, secs: u64 },
    #[error("the connection to Hermes at {url} is lost: {reason}")]
    Disconnected { url: String, reason: String },
    #[error("unexpected answer from Hermes to {what}: {reason}")]
    Protocol { what: String, reason: String },
    #[error("cannot start Hermes: {0}")]
    Supervisor(String),
}

impl HermesError {
    /// The JSON-RPC error code, when Hermes answered with one.
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            HermesError::Rpc { code, .. } => Some(*code),
            HermesError::SessionNotFound(_) => Some(codes::SESSION_NOT_FOUND),
            _ => None,
        }
    }

    /// The connection is gone or Hermes cannot be reached: connect again later.
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            HermesError::Unreachable { .. }
                | HermesError::Disconnected { .. }
                | HermesError::Timeout { .. }
        )
    }
}

pub(crate) use crate::api::words::chain;
