//! Response bodies of the admin API. None of them ever carries a token or a password hash,
//! except [`RunnerRegistration`], returned once by registration.

use serde::{Deserialize, Serialize};

use super::params::AgentEnv;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Health {
    pub status: String,
    pub version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Account {
    pub id: String,
    pub username: String,
    pub admin: bool,
    pub created_at: String,
    /// Set when an admin disabled the account: it cannot log in and has no live token.
    #[serde(default)]
    pub disabled_at: Option<String>,
}

/// An API token (never the token itself: the server keeps only its hash).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Token {
    pub id: String,
    pub account: String,
    pub created_at: String,
    pub last_used_at: Option<String>,
    /// When it stops working unless used before (each use extends it).
    pub expires_at: String,
    pub revoked_at: Option<String>,
}

/// Returned once by login: the token is shown here and never again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoginResult {
    pub token: String,
    pub account: Account,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Whoami {
    pub account: Account,
    pub token_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Source {
    pub id: String,
    pub name: String,
    pub description: String,
    pub created_at: String,
    pub archived_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Profile {
    pub id: String,
    pub name: String,
    pub cwd: Option<String>,
    /// True when `cwd` is an absolute path, which computer agents need.
    pub computer_ready: bool,
    pub created_at: String,
    pub archived_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Agent {
    pub id: String,
    pub name: String,
    pub owner: String,
    pub source: String,
    pub profile: String,
    pub env: AgentEnv,
    pub manage_team: bool,
    /// The managed browser is on (host agents; docs/browser.md).
    #[serde(default)]
    pub browser: bool,
    pub created_at: String,
    pub archived_at: Option<String>,
}

super::states::word_enum! {
    /// A Runner registration: `disabled` by an admin for good.
    RunnerState {
        Enabled = "enabled",
        Disabled = "disabled",
    }
}

super::states::word_enum! {
    /// An image update that is not current yet.
    PendingImageState {
        /// Its `computer.image.accept` runs on the Runner.
        Verifying = "verifying",
        /// Checked; it becomes current once the Runner is idle.
        Accepted = "accepted",
    }
}

super::states::word_enum! {
    /// Where a Runner's token rotation stands.
    TokenRotation {
        /// An admin asked for a new token at the next contact.
        Requested = "requested",
        /// A new token was issued and not used yet.
        Pending = "pending",
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Runner {
    pub id: super::ids::RunnerId,
    pub source: String,
    pub state: RunnerState,
    /// True while an instance of an enabled Runner has been heard from recently.
    pub online: bool,
    pub allowed_profiles: Vec<String>,
    pub artifact_roots: Vec<String>,
    pub server_url: String,
    pub hermes_url: String,
    pub created_at: String,
    pub disabled_at: Option<String>,
    pub last_seen_at: Option<String>,
    pub generation: super::ids::Generation,
    pub instance_id: Option<String>,
    pub version: Option<String>,
    pub capabilities: Vec<String>,
    /// Computers the Runner may run at once (0: computers not enabled), as it reported.
    pub computers_capacity: Option<u64>,
    pub hostname: Option<String>,
    /// Where the Hermes the Runner started itself listens, as it reported.
    #[serde(default)]
    pub hermes_listen: Option<String>,
    /// The container engine its computers run on, with its version, as it reported
    /// (`docker 20.10.24+dfsg1`, `podman 4.3.1`).
    #[serde(default)]
    pub engine: Option<String>,
    /// How long its computers may sit idle before they are stopped, as it reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_idle_ms: Option<u64>,
    /// How long a computer must have sat idle before a start waiting for a full pool takes
    /// its slot, as it reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_reclaim_ms: Option<u64>,
    /// The image computers are created from (computers enabled), or none.
    pub computer_image: Option<String>,
    /// Warm computers it keeps ready, as it reported (`--warm-computers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_computers: Option<u32>,
    /// An image update not current yet: being verified by the Runner, or accepted and
    /// waiting for the Runner to be idle.
    #[serde(default)]
    pub pending_image: Option<String>,
    #[serde(default)]
    pub pending_state: Option<PendingImageState>,
    /// The `computer.image.accept` command checking the pending image.
    #[serde(default)]
    pub pending_command: Option<String>,
    /// Why the pending image is not current yet, e.g. "accepted; waiting for 1 running turn".
    #[serde(default)]
    pub pending_reason: Option<String>,
    /// The image replaced last (what `yy runner update --rollback` returns to).
    #[serde(default)]
    pub previous_image: Option<String>,
    /// The last image update's outcome: when it was made current, or why it was refused.
    #[serde(default)]
    pub image_note: Option<String>,
    /// How its computers reach the network: `none`, or `public-web` through its egress
    /// proxy.
    pub network: crate::api::computers::NetworkMode,
    /// When the Runner's current token was issued (it renews at 75 % of its lifetime).
    #[serde(default)]
    pub token_issued_at: Option<String>,
    /// When the current token stops working unless renewed (none once disabled).
    #[serde(default)]
    pub token_expires_at: Option<String>,
    /// None when no rotation is under way.
    #[serde(default)]
    pub token_rotation: Option<TokenRotation>,
}

/// The private configuration a Runner runs with (`runner.json`): registration returns it
/// once, the Runner reads it (the Runner's config loader checks it). Field names follow
/// the documented file format.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunnerConfig {
    pub protocol: u32,
    #[serde(rename = "serverURL")]
    pub server_url: String,
    /// Every replica of the control plane, `serverURL` among them: the Runner moves to the
    /// next when its replica stops answering (one scheme and one certificate for all).
    #[serde(
        rename = "serverURLs",
        alias = "serverUrls",
        default,
        skip_serializing_if = "Vec::is_empty"
    )]
    pub server_urls: Vec<String>,
    pub runner_id: String,
    pub token: String,
    #[serde(rename = "hermesURL")]
    pub hermes_url: String,
    pub allowed_profiles: Vec<String>,
    pub artifact_roots: Vec<String>,
    /// The SHA-256 of the control plane's certificate (`yy serve --tls self-signed`): the
    /// Runner trusts that certificate, or one a trusted CA issued for the name, and nothing
    /// else.
    #[serde(
        rename = "serverCertSha256",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub server_cert_sha256: Option<String>,
    /// Permits plain http:// to a control plane or Hermes that is not on loopback.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_insecure_lan: bool,
    /// A file holding Hermes's session token (Hermes on a loopback address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hermes_token_file: Option<std::path::PathBuf>,
    /// Supervised mode: the argv of `hermes serve` the Runner starts itself, with a token it
    /// generates and passes only through Hermes's environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hermes_command: Option<Vec<String>>,
    /// HERMES_HOME of a supervised Hermes [default: DATA_DIR/hermes-home].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hermes_home: Option<std::path::PathBuf>,
    /// Hermes's own login, for a Hermes bound to a non-loopback address; stays on this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hermes_credentials: Option<super::credentials::HermesCredentials>,
    /// The Python the isolated Worker runs with: the Hermes venv's [default: the `python`
    /// beside `hermesCommand`'s program].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_python: Option<std::path::PathBuf>,
    /// The managed browser of host agents (docs/browser.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<BrowserConfig>,
}

/// runner.json `browser`: whether this Runner serves host agents' managed browser, and
/// whether it may install Chromium when an agent first needs it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BrowserConfig {
    /// `false` keeps the managed browser off [default: on].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `auto`: a missing Chromium is installed from Debian's packages on the first
    /// authorized use; `never`: such a use is refused, naming the command [default: auto].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<BrowserInstall>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BrowserInstall {
    Auto,
    Never,
}

impl RunnerConfig {
    /// The replicas to use, in order: `serverURL`, then the other `serverURLs`.
    pub fn servers(&self) -> Vec<String> {
        let mut all = vec![self.server_url.clone()];
        for url in &self.server_urls {
            let same = |u: &String| u.trim_end_matches('/') == url.trim_end_matches('/');
            if !all.iter().any(same) {
                all.push(url.clone());
            }
        }
        all
    }
}

impl std::fmt::Debug for RunnerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerConfig")
            .field("server_url", &self.server_url)
            .field("runner_id", &self.runner_id)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunnerRegistration {
    pub runner: Runner,
    pub config: RunnerConfig,
}
