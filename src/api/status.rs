//! `yy status` (one screen of the control plane's state) and the scrape tokens that read
//! `/metrics`: wire types (their client methods are in `client::status`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Prefix of scrape tokens (they read `/metrics` and nothing else).
pub const SCRAPE_TOKEN_PREFIX: &str = "yyst_";

/// `GET /api/v1/status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub started_at: String,
    pub uptime_ms: u64,
    /// The SQLite database's size (its pages; the WAL not counted).
    pub database_bytes: u64,
    pub runners: Vec<StatusRunner>,
    pub turns: TurnCounts,
    pub goals: GoalCounts,
    /// Commands that ended failed, uncertain or expired in the last day, newest first.
    pub recent_failures: Vec<StatusFailure>,
    /// What the operator should know about how this control plane runs (no TLS, ...).
    pub warnings: Vec<String>,
    /// The `yy serve` replicas on the same PostgreSQL database, seen in the last hour
    /// (empty with the embedded SQLite file).
    #[serde(default)]
    pub replicas: Vec<StatusReplica>,
    /// Where artifact bytes are kept: `files` (a directory of this replica: DATA_DIR/artifacts
    /// or `--blob-dir`) or `database` (PostgreSQL, which every replica serves from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReplica {
    pub id: String,
    pub hostname: String,
    pub listen: String,
    pub version: String,
    /// `up`, or `gone` after three missed heartbeats (15 s).
    pub state: String,
    /// It runs the scheduler, the sweeps and retention now.
    pub leads: bool,
    /// The one that answered this request.
    pub this: bool,
    pub started_at: String,
    pub seen_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusRunner {
    pub id: String,
    pub source: String,
    /// `online`, `offline` or `disabled`.
    pub state: String,
    pub last_seen_at: Option<String>,
    /// As the Runner reported it (untrusted text).
    pub engine: Option<String>,
    pub version: Option<String>,
    /// Its computers by state (`removed` ones left out).
    pub computers: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TurnCounts {
    pub running: u64,
    /// Sent to a Runner, not started yet.
    pub queued: u64,
    /// Not sent yet: the agent is busy or every slot is taken.
    pub waiting: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GoalCounts {
    pub active: u64,
    pub waiting_user: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusFailure {
    pub at: String,
    pub runner_id: String,
    pub command_id: String,
    pub kind: String,
    pub state: String,
    /// As recorded (a Runner's words may be in it: untrusted text).
    pub error: Option<String>,
}

/// A scrape token as listed (never the token itself).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScrapeToken {
    pub id: String,
    pub name: String,
    pub created_by: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// `POST /api/v1/metrics/tokens`: the token, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScrapeTokenCreated {
    #[serde(flatten)]
    pub info: ScrapeToken,
    pub token: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeTokenCreate {
    pub name: String,
}
