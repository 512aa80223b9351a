//! What crosses the wire: request bodies (`params`), responses (`views`) and the HTTP client
//! used by every CLI command (`client`, typed per endpoint in `admin`). Kept apart from database rows on purpose: a column can change
//! without changing the API, and the reverse.

pub mod artifacts;
pub mod browser;
pub mod computers;
pub mod credentials;
pub mod http;
pub mod ids;
pub mod machine;
pub mod names;
pub mod params;
pub mod screen;
pub mod sessions;
pub mod shell;
pub mod states;
pub mod status;
pub mod teams;
pub mod tls;
pub mod turn_events;
pub mod views;
pub mod words;

/// Prefix of account API tokens (`yy login`): lets log maskers and secret scanners find them.
pub const API_TOKEN_PREFIX: &str = "yyat_";
/// Prefix of Runner tokens (runner.json).
pub const RUNNER_TOKEN_PREFIX: &str = "yyrt_";

/// What a Runner declares it can do when it connects; the control plane sends a kind of
/// work only to a Runner that declared it.
pub mod capabilities {
    /// Turns through the Runner's Hermes.
    pub const SESSION_TURN: &str = "session-turn-v1";
    /// Stops confirmed with `session.active_list`.
    pub const SESSION_STOP: &str = "session-stop-v1";
    /// Computers (a Docker engine answered when the Runner started).
    pub const COMPUTER: &str = "computer-v1";
    /// Turns of computer agents: the Worker on the Runner, every tool in the computer.
    pub const COMPUTER_WORKER: &str = "computer-worker-v1";
    /// A shared computer's member turns: the Worker of the agent named by the turn's
    /// `acting_agent_id`, in the computer of another agent (with `COMPUTER_WORKER`).
    pub const SHARED_COMPUTER: &str = "shared-computer-v1";
    /// The egress proxy for `public-web` computers (with `COMPUTER`).
    pub const EGRESS: &str = "egress-v1";
    /// The managed browser of host agents: turns carry the agent whose browser they may
    /// use, and `browser.close` commands close (or remove) an agent's browser context.
    pub const BROWSER: &str = "browser-v1";
}

/// Largest request body the admin API accepts.
pub const ADMIN_BODY_LIMIT: usize = 1024 * 1024;

/// The error body every endpoint answers with: `{ "error": { "code", "message" } }`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}
