//! The machine protocol between a Runner and the control plane (`/runner/v1`), and the admin
//! views of the command queue. docs/protocol.md describes every field and state.

use serde::{Deserialize, Serialize};

use super::computers::{ComputerRef, ExecPayload, PausePayload, ScreenPayload, StartPayload};
use super::sessions::{SessionRef, TurnPayload, WorkerTurnPayload};

pub use super::ids::{CommandId, Generation, RunnerId};
pub use super::states::CommandState;

/// The protocol version this yy speaks.
pub const PROTOCOL_VERSION: u32 = 1;

pub const HEADER_PROTOCOL: &str = "yy-protocol";
pub const HEADER_INSTANCE: &str = "yy-runner-instance";
pub const HEADER_GENERATION: &str = "yy-generation";
/// On connect: the instance that last connected from this Runner's data directory (a
/// restart of it is no takeover).
pub const HEADER_PREVIOUS_INSTANCE: &str = "yy-previous-instance";
/// On connect: `1` takes over from another instance that is online (`--replace`).
pub const HEADER_REPLACE: &str = "yy-replace";

/// A read-only result (a fetched file, a command's output) is at most this large.
pub const MAX_RESULT_BYTES: usize = 8 * 1024 * 1024;
/// Largest serialized result: 8 MiB of data, base64-encoded, plus its JSON envelope.
pub const MAX_RESULT_JSON_BYTES: usize = MAX_RESULT_BYTES / 3 * 4 + 64 * 1024;
/// Largest machine request body (a result and its envelope).
pub const MACHINE_BODY_LIMIT: usize = 12 * 1024 * 1024;
/// How long a lease request waits for work before answering with none.
pub const LEASE_WAIT_MS: u64 = 25_000;
/// A Runner not heard from for this long is offline.
pub const OFFLINE_AFTER_MS: i64 = 90_000;

/// Error codes of the machine API that change what a Runner does.
pub mod codes {
    /// The generation is not current (control plane restart, reconnect): connect again.
    pub const STALE_GENERATION: &str = "stale_generation";
    /// Another instance of the same Runner holds the current generation: stop.
    pub const REPLACED: &str = "replaced_by_other_instance";
    /// The Runner was disabled by an admin: stop for good.
    pub const RUNNER_DISABLED: &str = "runner_disabled";
    /// The token is unknown: stop.
    pub const UNKNOWN_RUNNER: &str = "unknown_runner";
    /// The control plane is shutting down: reconnect later.
    pub const SHUTTING_DOWN: &str = "shutting_down";
    pub const UPGRADE_REQUIRED: &str = "upgrade_required";
    pub const ORIGIN_REFUSED: &str = "origin_refused";
    /// The token is past its lifetime (the Runner was offline too long): stop.
    pub const TOKEN_EXPIRED: &str = "token_expired";
    /// Another instance of this Runner is online: stop it first, or connect with
    /// [`super::HEADER_REPLACE`].
    pub const RUNNER_LIVE: &str = "runner_online_elsewhere";
}

/// What a Runner says of itself when it connects.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerStatus {
    pub version: String,
    pub capabilities: Vec<String>,
    /// Computers this Runner may run at once (0: computers not enabled).
    pub computers_capacity: u32,
    pub hostname: String,
    /// Where the Hermes the Runner started itself listens (it binds a free port on
    /// 127.0.0.1, whatever the registered Hermes URL says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hermes_listen: Option<String>,
    /// The container engine computers run on and its version (`docker 20.10.24+dfsg1`,
    /// `podman 4.3.1`); none when computers are not enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// How long a computer may sit idle before the control plane stops it
    /// (`--computer-idle`); none when computers are not enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_idle_ms: Option<u64>,
    /// How long a computer must have sat idle before a start waiting for a full pool takes
    /// its slot (`--computer-reclaim-after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub computer_reclaim_ms: Option<u64>,
    /// Warm computers it keeps ready (`--warm-computers`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_computers: Option<u32>,
}

/// Longest hostname a Runner may report (bytes).
pub const MAX_HOSTNAME: usize = 255;
/// Longest version and capability word (bytes), and most capabilities.
pub const MAX_WORD: usize = 64;
pub const MAX_CAPABILITIES: usize = 64;

impl RunnerStatus {
    /// What the control plane accepts from a connecting Runner. Version and capabilities
    /// are words yy itself makes, so anything else is refused. The hostname is the host's
    /// own and is kept as reported (only its length and NUL are checked): every human
    /// output escapes it.
    pub fn check(&self) -> Result<(), String> {
        let word = |w: &str| {
            !w.is_empty()
                && w.len() <= MAX_WORD
                && w.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'+'))
        };
        if !word(&self.version) {
            return Err(format!(
                "the reported version is not a version word (1-{MAX_WORD} of A-Z a-z 0-9 . - _ +)"
            ));
        }
        if self.capabilities.len() > MAX_CAPABILITIES {
            return Err(format!(
                "more than {MAX_CAPABILITIES} capabilities reported"
            ));
        }
        if let Some(bad) = self.capabilities.iter().position(|c| !word(c)) {
            return Err(format!(
                "capability {} is not a word (1-{MAX_WORD} of A-Z a-z 0-9 . - _ +)",
                bad + 1
            ));
        }
        if self.hostname.len() > MAX_HOSTNAME {
            return Err(format!("the hostname is longer than {MAX_HOSTNAME} bytes"));
        }
        if self.hostname.contains('\0') {
            return Err("the hostname contains a NUL character".into());
        }
        if let Some(url) = &self.hermes_listen
            && (url.len() > MAX_HOSTNAME || url::Url::parse(url).is_err())
        {
            return Err("the supervised Hermes address is not a URL".into());
        }
        if let Some(engine) = &self.engine {
            let mut parts = engine.splitn(2, ' ');
            let name = parts.next().unwrap_or_default();
            let version = parts.next().unwrap_or_default();
            if !matches!(name, "docker" | "podman") || !word(version) {
                return Err(format!(
                    "the engine is not \"docker VERSION\" or \"podman VERSION\" (a version word of 1-{MAX_WORD} of A-Z a-z 0-9 . - _ +)"
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Connected {
    pub runner_id: RunnerId,
    pub generation: Generation,
    /// Commands of earlier generations that were running and are now `uncertain`.
    pub uncertain: Vec<String>,
    /// Commands of earlier generations that were leased, never started, and are queued again.
    pub requeued: Vec<String>,
    /// When the token this connection used stops working (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_expires_at_ms: Option<i64>,
    /// Renew the token now (`POST /runner/v1/token`): 75 % of its lifetime passed, or an
    /// admin asked (`yy runner rotate-token`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotate_token: bool,
    /// What this control plane offers beyond the base protocol ([`features`]); an older
    /// one sends none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

/// What a control plane offers a Runner beyond the base protocol (`Connected::features`).
pub mod features {
    /// `POST /runner/v1/commands/start` and `/complete` take several commands at once.
    pub const COMMAND_BATCHES: &str = "command-batches-v1";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseParams {
    /// How many commands the Runner can take now.
    pub max: u32,
    /// How long to wait for work, at most [`LEASE_WAIT_MS`].
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// A command as delivered to a Runner.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeasedCommand {
    pub id: String,
    pub kind: String,
    pub payload: serde_json::Value,
    /// Unix milliseconds after which the command must not start or keep running.
    pub deadline_ms: i64,
    /// A `worker.turn` of an agent that may manage a team: the opaque id of its team
    /// tools, minted for this lease. It is not part of the payload, so it is never stored
    /// with the command and a delivery's fingerprint does not depend on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team_tools: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Leased {
    pub commands: Vec<LeasedCommand>,
    /// Renew the token now, as in [`Connected::rotate_token`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rotate_token: bool,
}

/// `GET /runner/v1/whoami`: who a token belongs to, for `yy doctor`. It authenticates like
/// every machine request and touches no connection state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunnerWhoami {
    pub runner_id: String,
    /// When the token used stops working (Unix milliseconds).
    pub token_expires_at_ms: i64,
    /// The Runner should renew it now (it does so itself while it runs).
    pub rotate_token: bool,
    /// The image its computers are created from; none when computers are not enabled.
    pub computer_image: Option<String>,
    /// The instance of this Runner that is online now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online_instance: Option<OnlineInstance>,
}

/// An instance of a Runner that polled the control plane recently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OnlineInstance {
    pub instance: String,
    /// The host name it reported (untrusted: shown only through [`Self::refusal`]).
    pub hostname: Option<String>,
    pub last_seen_ms_ago: i64,
}

impl OnlineInstance {
    /// Why a second instance is not let in, and what to do.
    pub fn refusal(&self, runner_id: &str) -> String {
        let host: String = self
            .hostname
            .as_deref()
            .unwrap_or_default()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            .take(64)
            .collect();
        let on = if host.is_empty() {
            String::new()
        } else {
            format!(" on host {host}")
        };
        format!(
            "runner {runner_id} is online as another instance{on} (last seen {} s ago): stop that Runner first (it counts as offline {} s after it was last seen), or start this one with --replace to take over (the other stops and its computers are removed)",
            self.last_seen_ms_ago.max(0) / 1000,
            OFFLINE_AFTER_MS / 1000
        )
    }
}

/// A new Runner token (`POST /runner/v1/token`). It is pending until the Runner's first
/// request with it, which makes it current and ends the old one; until then both work,
/// and a new rotation replaces it. Save it before using it.
#[derive(Clone, Serialize, Deserialize)]
pub struct TokenRenewed {
    pub token: String,
    pub issued_at_ms: i64,
    pub expires_at_ms: i64,
}

impl std::fmt::Debug for TokenRenewed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRenewed")
            .field("token", &"<redacted>")
            .field("expires_at_ms", &self.expires_at_ms)
            .finish_non_exhaustive()
    }
}

/// The control plane's answer to "may I start this command now?".
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartGranted {
    pub id: String,
    pub deadline_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Done,
    Failed,
    Cancelled,
    Uncertain,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Done => "done",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
            Outcome::Uncertain => "uncertain",
        }
    }
    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "done" => Some(Outcome::Done),
            "failed" => Some(Outcome::Failed),
            "cancelled" => Some(Outcome::Cancelled),
            "uncertain" => Some(Outcome::Uncertain),
            _ => None,
        }
    }

    /// The command state an outcome ends in.
    pub fn state(self) -> CommandState {
        match self {
            Outcome::Done => CommandState::Done,
            Outcome::Failed => CommandState::Failed,
            Outcome::Cancelled => CommandState::Cancelled,
            Outcome::Uncertain => CommandState::Uncertain,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteParams {
    pub outcome: Outcome,
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    #[serde(default)]
    pub error: Option<String>,
}

/// Most commands in one batched start or complete.
pub const MAX_BATCH: usize = 256;
/// A report goes in a batch only when its result is at most this big as JSON; a bigger
/// one goes alone (`/commands/{id}/complete`), so a batch stays small.
pub const BATCH_RESULT_BYTES: usize = 64 * 1024;

/// `POST /runner/v1/commands/start`: the re-check of several leased commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartBatch {
    pub ids: Vec<String>,
}

/// `POST /runner/v1/commands/complete`: the outcomes of several commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteBatch {
    pub reports: Vec<CompleteReport>,
}

/// One command's outcome in a [`CompleteBatch`]: [`CompleteParams`] with its id.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteReport {
    pub id: String,
    pub outcome: Outcome,
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    #[serde(default)]
    pub error: Option<String>,
}

/// The answer to a batch: one item per command, in the order asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchAnswer {
    pub results: Vec<BatchItem>,
}

/// One command's answer in a batch: granted (with its deadline, for a start) or refused
/// with the status, code and message the single-command call would have given.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchItem {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
}

/// Why one command of a batch was refused.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refusal {
    pub status: u16,
    pub code: String,
    pub message: String,
}

// ---- command kinds and their payloads/results ----

super::states::word_enum! {
    /// What a Runner command does; the word travels as `kind` next to its payload.
    CommandKind {
        Ping = "ping",
        Fetch = "fetch",
        Cancel = "cancel",
        /// A conversation turn through the Runner's Hermes.
        SessionTurn = "session.turn",
        /// Interrupt a session and confirm it is idle or gone.
        SessionStop = "session.stop",
        /// Close (revoke) one session of the Runner's channel.
        SessionClose = "session.close",
        /// The live sessions of the Runner's own channel.
        SessionList = "session.list",
        /// Read-only look at a session whose turn is uncertain: its status and last reply.
        SessionCheck = "session.check",
        /// Create (or recreate) and start a computer under a new fence.
        ComputerStart = "computer.start",
        /// Stop a computer and remove its container (its workspace stays).
        ComputerStop = "computer.stop",
        /// Stop a computer and delete its workspace.
        ComputerRemove = "computer.remove",
        /// An admin diagnostic command in a running computer.
        ComputerExec = "computer.exec",
        /// An operator's screen action (screenshot, click, ...) on a desktop computer.
        ComputerScreen = "computer.screen",
        /// Pause the computer's model at its next tool call (an operator takes control);
        /// done once no tool is in flight.
        ComputerPause = "computer.pause",
        /// Resume the paused model with the operator's note (handback).
        ComputerResume = "computer.resume",
        /// Open the operator's shell (a pty) in the computer and connect its relay.
        ComputerShell = "computer.shell",
        /// A computer agent's turn through the Worker.
        WorkerTurn = "worker.turn",
        /// The egress proxy's recent decisions (read-only).
        EgressLog = "egress.log",
        /// Check a new computer image on the Runner's Docker engine: the image checks and
        /// a throw-away acceptance computer with a guest round trip.
        ComputerImageAccept = "computer.image.accept",
        /// Close a host agent's managed browser context (and remove its profile when the
        /// agent is gone).
        BrowserClose = "browser.close",
        /// An operator's look at (or input to) a host agent's managed browser.
        BrowserScreen = "browser.screen",
        /// An operator takes control of an agent's browser: the model waits at its next
        /// browser call; done once no browser call is in flight.
        BrowserPause = "browser.pause",
        /// The operator hands the browser back, with a note for the model.
        BrowserResume = "browser.resume",
    }
}

/// What a command kind answers with when it ends `done`: every result type names the
/// kinds that produce it, so a result is read only as its own command's (the admin
/// client's `result_of`, the store's `CommandRow::result_as`). The wire is the type's JSON.
pub trait CommandResult: serde::de::DeserializeOwned {
    const KINDS: &'static [CommandKind];
}

macro_rules! command_results {
    ($($t:ty => [$($kind:ident),+];)+) => {$(
        impl CommandResult for $t {
            const KINDS: &'static [CommandKind] = &[$(CommandKind::$kind),+];
        }
    )+};
}

command_results! {
    PingResult => [Ping];
    FetchResult => [Fetch];
    super::sessions::TurnResult => [SessionTurn, WorkerTurn];
    super::sessions::StopResult => [SessionStop, SessionClose];
    super::sessions::SessionListResult => [SessionList];
    super::computers::StartResult => [ComputerStart];
    super::computers::ExecResult => [ComputerExec];
    super::computers::PauseResult => [ComputerPause, BrowserPause];
    super::computers::ResumeResult => [ComputerResume, BrowserResume];
    super::computers::ImageAcceptResult => [ComputerImageAccept];
    super::screen::ScreenResult => [ComputerScreen, BrowserScreen];
    super::browser::BrowserCloseResult => [BrowserClose];
}

/// The control plane object whose state follows a command's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settles {
    Session,
    Computer,
    /// A computer agent's turn: its session and its computer.
    Both,
    /// An image acceptance: the Runner's pending image.
    Image,
    Nothing,
}

/// Longest a command may be given, from enqueue to outcome.
pub const MAX_COMMAND_TIMEOUT_MS: u64 = 3_600_000;

/// What a computer exec gets beyond the operator's timeout: starting it and reporting it.
pub const EXEC_SLACK_MS: u64 = 30_000;

/// How long a command of a kind may take, from enqueue to outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// Always this long (milliseconds).
    Fixed(u64),
    /// As long as the caller asks, up to `max_ms`; `default_ms` when it does not ask.
    Caller { default_ms: u64, max_ms: u64 },
}

impl Deadline {
    /// The timeout for one command: what the caller asked, within bounds.
    pub fn resolve(self, requested: Option<u64>) -> Result<u64, String> {
        match (self, requested) {
            (Deadline::Fixed(ms), None) => Ok(ms),
            (Deadline::Fixed(ms), Some(_)) => Err(format!(
                "this command always has {} s: leave out the timeout",
                ms / 1000
            )),
            (Deadline::Caller { default_ms, .. }, None) => Ok(default_ms),
            (Deadline::Caller { max_ms, .. }, Some(ms)) if (1..=max_ms).contains(&ms) => Ok(ms),
            (Deadline::Caller { max_ms, .. }, Some(_)) => Err(format!(
                "the timeout must be between 1 ms and {} s",
                max_ms / 1000
            )),
        }
    }
}

/// How a running command is stopped when it is cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopping {
    /// Dropped where it is: nothing of it needs to be undone by itself.
    Dropped,
    /// Told to stop, and it ends itself (a Worker turn interrupts its model loop and kills
    /// its guest commands, then reports).
    Cooperative,
}

impl CommandKind {
    /// Kinds that stop work: never refused because a queue is full.
    pub fn is_stop(self) -> bool {
        matches!(
            self,
            CommandKind::Cancel
                | CommandKind::SessionStop
                | CommandKind::SessionClose
                | CommandKind::ComputerStop
                | CommandKind::ComputerRemove
        )
    }

    /// How long a command of this kind may take, from enqueue to outcome.
    pub fn deadline(self) -> Deadline {
        const MINUTE: u64 = 60_000;
        match self {
            // The caller says how long: a ping holds, a fetch reads a file of any size.
            CommandKind::Ping | CommandKind::Fetch => Deadline::Caller {
                default_ms: MINUTE,
                max_ms: MAX_COMMAND_TIMEOUT_MS,
            },
            // The operator's timeout, and time to start the command and report it.
            CommandKind::ComputerExec => Deadline::Caller {
                default_ms: super::computers::EXEC_DEFAULT_TIMEOUT_MS + EXEC_SLACK_MS,
                max_ms: super::computers::EXEC_MAX_TIMEOUT_MS + EXEC_SLACK_MS,
            },
            CommandKind::SessionTurn | CommandKind::WorkerTurn => Deadline::Fixed(30 * MINUTE),
            CommandKind::SessionStop | CommandKind::SessionClose | CommandKind::SessionList => {
                Deadline::Fixed(30_000)
            }
            // A check of an uncertain turn waits for its Runner to come back.
            CommandKind::SessionCheck => Deadline::Fixed(60 * MINUTE),
            CommandKind::ComputerStart => Deadline::Fixed(2 * MINUTE),
            CommandKind::Cancel
            | CommandKind::ComputerStop
            | CommandKind::ComputerRemove
            | CommandKind::ComputerScreen
            | CommandKind::ComputerResume => Deadline::Fixed(MINUTE),
            // The pause is done once the tool in flight ended: the longest tool's time.
            CommandKind::ComputerPause => {
                Deadline::Fixed(super::computers::EXEC_MAX_TIMEOUT_MS + EXEC_SLACK_MS)
            }
            CommandKind::ComputerShell => Deadline::Fixed(super::shell::RUNNER_CONNECT_TIMEOUT_MS),
            CommandKind::EgressLog | CommandKind::BrowserClose => Deadline::Fixed(30_000),
            CommandKind::BrowserScreen | CommandKind::BrowserResume => Deadline::Fixed(MINUTE),
            // The pause is done once the browser call in flight ended (a page loads in 30 s)
            // and the context opened (Chromium may be installed first).
            CommandKind::BrowserPause => Deadline::Fixed(10 * MINUTE),
            // A desktop image's acceptance ladder starts a browser twice.
            CommandKind::ComputerImageAccept => Deadline::Fixed(10 * MINUTE),
        }
    }

    /// How the Runner stops a running command of this kind when it is cancelled.
    pub fn stopping(self) -> Stopping {
        match self {
            CommandKind::WorkerTurn => Stopping::Cooperative,
            CommandKind::Ping
            | CommandKind::Fetch
            | CommandKind::Cancel
            | CommandKind::SessionTurn
            | CommandKind::SessionStop
            | CommandKind::SessionClose
            | CommandKind::SessionList
            | CommandKind::SessionCheck
            | CommandKind::ComputerStart
            | CommandKind::ComputerStop
            | CommandKind::ComputerRemove
            | CommandKind::ComputerExec
            | CommandKind::ComputerScreen
            | CommandKind::ComputerPause
            | CommandKind::ComputerResume
            | CommandKind::ComputerShell
            | CommandKind::EgressLog
            | CommandKind::BrowserClose
            | CommandKind::BrowserScreen
            | CommandKind::BrowserPause
            | CommandKind::BrowserResume
            | CommandKind::ComputerImageAccept => Stopping::Dropped,
        }
    }

    pub fn settles(self) -> Settles {
        match self {
            CommandKind::SessionTurn
            | CommandKind::SessionStop
            | CommandKind::SessionClose
            | CommandKind::SessionList
            | CommandKind::SessionCheck => Settles::Session,
            CommandKind::ComputerStart
            | CommandKind::ComputerStop
            | CommandKind::ComputerRemove
            | CommandKind::ComputerExec
            | CommandKind::ComputerScreen
            | CommandKind::ComputerPause
            | CommandKind::ComputerResume => Settles::Computer,
            CommandKind::ComputerShell => Settles::Nothing,
            CommandKind::WorkerTurn => Settles::Both,
            CommandKind::ComputerImageAccept => Settles::Image,
            CommandKind::Ping
            | CommandKind::Fetch
            | CommandKind::Cancel
            | CommandKind::EgressLog
            | CommandKind::BrowserClose
            | CommandKind::BrowserScreen
            | CommandKind::BrowserPause
            | CommandKind::BrowserResume => Settles::Nothing,
        }
    }
}

/// A command with its typed payload. On the wire (and in the database) it is the pair
/// `kind` + `payload` of [`LeasedCommand`]; the Runner parses it once, where it arrives.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", content = "payload")]
#[allow(clippy::large_enum_variant)] // parsed once per command, short-lived; a turn is the common case
pub enum RunnerCommand {
    #[serde(rename = "ping")]
    Ping(PingPayload),
    #[serde(rename = "fetch")]
    Fetch(FetchPayload),
    #[serde(rename = "cancel")]
    Cancel(CancelPayload),
    #[serde(rename = "session.turn")]
    SessionTurn(TurnPayload),
    #[serde(rename = "session.stop")]
    SessionStop(SessionRef),
    #[serde(rename = "session.close")]
    SessionClose(SessionRef),
    #[serde(rename = "session.list")]
    SessionList(NoPayload),
    #[serde(rename = "session.check")]
    SessionCheck(SessionRef),
    #[serde(rename = "computer.start")]
    ComputerStart(StartPayload),
    #[serde(rename = "computer.stop")]
    ComputerStop(ComputerRef),
    #[serde(rename = "computer.remove")]
    ComputerRemove(ComputerRef),
    #[serde(rename = "computer.exec")]
    ComputerExec(ExecPayload),
    #[serde(rename = "computer.screen")]
    ComputerScreen(ScreenPayload),
    #[serde(rename = "computer.pause")]
    ComputerPause(PausePayload),
    #[serde(rename = "computer.resume")]
    ComputerResume(PausePayload),
    #[serde(rename = "computer.shell")]
    ComputerShell(super::shell::ShellPayload),
    #[serde(rename = "worker.turn")]
    WorkerTurn(WorkerTurnPayload),
    #[serde(rename = "egress.log")]
    EgressLog(super::computers::EgressLogQuery),
    #[serde(rename = "computer.image.accept")]
    ComputerImageAccept(super::computers::ImageAcceptPayload),
    #[serde(rename = "browser.close")]
    BrowserClose(super::browser::BrowserClosePayload),
    #[serde(rename = "browser.screen")]
    BrowserScreen(super::browser::BrowserScreenPayload),
    #[serde(rename = "browser.pause")]
    BrowserPause(super::browser::BrowserPausePayload),
    #[serde(rename = "browser.resume")]
    BrowserResume(super::browser::BrowserPausePayload),
}

/// The payload of a command that needs none: `{}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoPayload {}

impl RunnerCommand {
    pub fn kind(&self) -> CommandKind {
        match self {
            RunnerCommand::Ping(_) => CommandKind::Ping,
            RunnerCommand::Fetch(_) => CommandKind::Fetch,
            RunnerCommand::Cancel(_) => CommandKind::Cancel,
            RunnerCommand::SessionTurn(_) => CommandKind::SessionTurn,
            RunnerCommand::SessionStop(_) => CommandKind::SessionStop,
            RunnerCommand::SessionClose(_) => CommandKind::SessionClose,
            RunnerCommand::SessionList(_) => CommandKind::SessionList,
            RunnerCommand::SessionCheck(_) => CommandKind::SessionCheck,
            RunnerCommand::ComputerStart(_) => CommandKind::ComputerStart,
            RunnerCommand::ComputerStop(_) => CommandKind::ComputerStop,
            RunnerCommand::ComputerRemove(_) => CommandKind::ComputerRemove,
            RunnerCommand::ComputerExec(_) => CommandKind::ComputerExec,
            RunnerCommand::ComputerScreen(_) => CommandKind::ComputerScreen,
            RunnerCommand::ComputerPause(_) => CommandKind::ComputerPause,
            RunnerCommand::ComputerResume(_) => CommandKind::ComputerResume,
            RunnerCommand::ComputerShell(_) => CommandKind::ComputerShell,
            RunnerCommand::WorkerTurn(_) => CommandKind::WorkerTurn,
            RunnerCommand::EgressLog(_) => CommandKind::EgressLog,
            RunnerCommand::ComputerImageAccept(_) => CommandKind::ComputerImageAccept,
            RunnerCommand::BrowserClose(_) => CommandKind::BrowserClose,
            RunnerCommand::BrowserScreen(_) => CommandKind::BrowserScreen,
            RunnerCommand::BrowserPause(_) => CommandKind::BrowserPause,
            RunnerCommand::BrowserResume(_) => CommandKind::BrowserResume,
        }
    }

    /// The payload alone, as stored and leased.
    pub fn payload(&self) -> serde_json::Value {
        let mut both = serde_json::to_value(self).expect("commands serialize");
        both.get_mut("payload")
            .map(serde_json::Value::take)
            .unwrap_or_else(|| serde_json::json!({}))
    }

    /// Reads a leased command; an unknown kind or a payload of the wrong shape is refused.
    pub fn parse(kind: &str, payload: &serde_json::Value) -> Result<RunnerCommand, String> {
        if CommandKind::parse(kind).is_none() {
            return Err(format!(
                "this Runner (yy {}) does not know command kind {kind:?}: upgrade yy on the Runner",
                crate::VERSION
            ));
        }
        serde_json::from_value(serde_json::json!({ "kind": kind, "payload": payload }))
            .map_err(|e| format!("malformed {kind} payload: {e}"))
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PingPayload {
    /// Hold the ping this long on the Runner before answering (to try slow-command paths).
    #[serde(default)]
    pub hold_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PingResult {
    /// A random id of this execution: a replayed outcome repeats it.
    pub execution_id: String,
    pub runner_version: String,
    pub started_at_ms: i64,
    /// The same instant in Unix microseconds (0 from a Runner older than this field), so
    /// pickup latency can be measured below a millisecond.
    #[serde(default)]
    pub started_at_us: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchPayload {
    pub path: String,
    /// The roots registered on the control plane; the Runner exports only from roots that
    /// are in both this list and its own runner.json.
    #[serde(default)]
    pub artifact_roots: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FetchResult {
    /// The real path that was read (symlinks resolved).
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// The artifact holding the bytes (`GET /api/v1/artifacts/{id}/content`); they are
    /// never in the command's result.
    pub artifact_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelPayload {
    pub command_id: String,
}

// ---- admin API over the queue ----

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PingParams {
    #[serde(default)]
    pub hold_ms: u64,
    /// How long the ping may wait in the queue and run, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchParams {
    pub path: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Command {
    pub id: CommandId,
    pub runner_id: RunnerId,
    pub kind: CommandKind,
    pub state: CommandState,
    pub created_at: String,
    pub deadline_at: String,
    pub leased_at: Option<String>,
    pub generation: Option<Generation>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub cancel_requested: bool,
    pub error: Option<String>,
    /// Present only when one command is shown (lists leave results out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why a command that has not started yet is waiting (its Runner offline, or not
    /// taken yet); only when one command is shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

impl Command {
    pub fn is_final(&self) -> bool {
        self.state.is_final()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reported_engine_is_a_known_name_and_a_version_word() {
        let status = |engine: &str| RunnerStatus {
            version: "1.0".into(),
            hostname: "h".into(),
            engine: Some(engine.into()),
            ..Default::default()
        };
        assert!(status("docker 20.10.24+dfsg1").check().is_ok());
        assert!(status("podman 4.3.1").check().is_ok());
        for bad in [
            "lxc 1.0",
            "podman",
            "podman 4.3\n",
            "docker 1 2",
            "podman \u{1b}[2J",
        ] {
            assert!(status(bad).check().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn every_kind_has_a_deadline_within_the_longest_and_one_way_to_stop() {
        for &kind in CommandKind::ALL {
            let (default_ms, max_ms) = match kind.deadline() {
                Deadline::Fixed(ms) => (ms, ms),
                Deadline::Caller { default_ms, max_ms } => (default_ms, max_ms),
            };
            assert!(
                (1..=max_ms).contains(&default_ms),
                "{kind}: default {default_ms} ms beyond {max_ms} ms"
            );
            // An exec may run the longest a command may, plus its start and report.
            assert!(max_ms <= MAX_COMMAND_TIMEOUT_MS + EXEC_SLACK_MS, "{kind}");
            assert_eq!(
                kind.stopping() == Stopping::Cooperative,
                kind == CommandKind::WorkerTurn,
                "{kind}"
            );
        }
        let fetch = CommandKind::Fetch.deadline();
        assert_eq!(fetch.resolve(None), Ok(60_000));
        assert_eq!(fetch.resolve(Some(5)), Ok(5));
        assert!(fetch.resolve(Some(0)).is_err());
        assert!(fetch.resolve(Some(MAX_COMMAND_TIMEOUT_MS + 1)).is_err());
        let turn = CommandKind::SessionTurn.deadline();
        assert_eq!(turn.resolve(None), Ok(30 * 60_000));
        assert!(
            turn.resolve(Some(1)).is_err(),
            "a fixed deadline takes no timeout"
        );
    }

    #[test]
    fn every_kind_word_names_a_runner_command() {
        // A word RunnerCommand does not know would fail as an unknown variant, not as a
        // payload of the wrong shape.
        for &kind in CommandKind::ALL {
            let e = RunnerCommand::parse(kind.as_sql(), &serde_json::json!("x")).unwrap_err();
            assert!(
                e.starts_with(&format!("malformed {kind} payload")) && !e.contains("variant"),
                "{kind}: {e}"
            );
        }
    }

    #[test]
    fn runner_commands_carry_their_kind_word() {
        let samples = [
            RunnerCommand::Ping(PingPayload { hold_ms: 3 }),
            RunnerCommand::SessionList(NoPayload {}),
            RunnerCommand::Cancel(CancelPayload {
                command_id: "c".into(),
            }),
            RunnerCommand::ComputerStop(ComputerRef {
                computer_id: "m".into(),
                fence: 2,
                delete_workspace: false,
            }),
        ];
        for cmd in samples {
            let wire = serde_json::to_value(&cmd).unwrap();
            assert_eq!(wire["kind"], cmd.kind().as_sql());
            let back = RunnerCommand::parse(cmd.kind().as_sql(), &cmd.payload()).unwrap();
            assert_eq!(back.kind(), cmd.kind());
        }
        assert_eq!(
            RunnerCommand::SessionList(NoPayload {}).payload(),
            serde_json::json!({})
        );
        let unknown = RunnerCommand::parse("teleport", &serde_json::json!({})).unwrap_err();
        assert!(unknown.contains("does not know command kind"), "{unknown}");
        let malformed = RunnerCommand::parse("ping", &serde_json::json!({"hold": 1})).unwrap_err();
        assert!(malformed.contains("malformed ping payload"), "{malformed}");
    }
}
