//! The admin API, one typed method per endpoint. Every path is built here, and every path
//! segment taken from a caller is percent-encoded here ([`seg`]), so commands never spell
//! a URL.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::{DeserializeOwned, IgnoredAny};

use super::{Client, ClientError};
use crate::api::artifacts::Artifact;
use crate::api::computers::{AuditEntry, Computer, ComputerCreate, ComputerExec};
use crate::api::machine::{Command, CommandResult, FetchParams, PingParams};
use crate::api::params::{
    AccountCreate, AgentCreate, AgentUpdate, LoginParams, PasswordChange, ProfileCreate,
    ProfileUpdate, RunnerRegister, RunnerUpdate, SourceCreate, SourceUpdate,
};
use crate::api::sessions::{ChatParams, ChatStarted, EventsPage, Session, StopStarted};
use crate::api::teams;
use crate::api::views::{
    Account, Agent, LoginResult, Profile, Runner, RunnerRegistration, Source, Token, Whoami,
};

/// How long one long-poll request asks the server to wait: well inside the client's
/// request timeout, so a quiet wait is never mistaken for a dead server.
pub const LONG_POLL_MS: u64 = 25_000;

pub(super) type Result<T> = std::result::Result<T, ClientError>;

/// The empty body of the endpoints that act on a resource named by the path alone.
fn empty() -> serde_json::Value {
    serde_json::json!({})
}

/// Percent-encodes one URL path segment (names are validated, but ids typed by hand are not).
pub fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Most endpoints are `api/v1/{things}`, `api/v1/{things}/{id}` and actions on one thing
/// (`POST api/v1/{things}/{id}/{action}`, most with an empty body).
impl Client {
    async fn list_of<T: DeserializeOwned>(&self, things: &str, archived: bool) -> Result<Vec<T>> {
        let query = if archived { "?archived=true" } else { "" };
        self.get(&format!("api/v1/{things}{query}")).await
    }

    async fn one<T: DeserializeOwned>(&self, things: &str, id: &str) -> Result<T> {
        self.get(&format!("api/v1/{things}/{}", seg(id))).await
    }

    async fn change<B: Serialize, T: DeserializeOwned>(
        &self,
        things: &str,
        id: &str,
        body: &B,
    ) -> Result<T> {
        self.patch(&format!("api/v1/{things}/{}", seg(id)), body)
            .await
    }

    async fn act<T: DeserializeOwned>(&self, things: &str, id: &str, action: &str) -> Result<T> {
        self.act_with(things, id, action, &empty()).await
    }

    async fn act_with<B: Serialize, T: DeserializeOwned>(
        &self,
        things: &str,
        id: &str,
        action: &str,
        body: &B,
    ) -> Result<T> {
        self.post(&format!("api/v1/{things}/{}/{action}", seg(id)), body)
            .await
    }
}

impl Client {
    // ---- login ----

    pub async fn login(&self, p: &LoginParams) -> Result<LoginResult> {
        self.post("api/v1/auth/login", p).await
    }

    /// Revokes this client's token on the server.
    pub async fn logout(&self) -> Result<()> {
        let _: IgnoredAny = self.post("api/v1/auth/logout", &empty()).await?;
        Ok(())
    }

    pub async fn whoami(&self) -> Result<Whoami> {
        self.get("api/v1/whoami").await
    }

    // ---- accounts ----

    pub async fn account_list(&self) -> Result<Vec<Account>> {
        self.get("api/v1/accounts").await
    }

    pub async fn account_show(&self, username: &str) -> Result<Account> {
        self.one("accounts", username).await
    }

    pub async fn account_create(&self, p: &AccountCreate) -> Result<Account> {
        self.post("api/v1/accounts", p).await
    }

    /// Disables an account and revokes its tokens; or enables it again.
    pub async fn account_set_disabled(&self, username: &str, disabled: bool) -> Result<Account> {
        let action = if disabled { "disable" } else { "enable" };
        self.act("accounts", username, action).await
    }

    pub async fn account_password(&self, username: &str, p: &PasswordChange) -> Result<Account> {
        self.act_with("accounts", username, "password", p).await
    }

    // ---- tokens ----

    pub async fn token_list(&self, account: Option<&str>) -> Result<Vec<Token>> {
        let query = account
            .map(|a| format!("?account={}", seg(a)))
            .unwrap_or_default();
        self.get(&format!("api/v1/tokens{query}")).await
    }

    pub async fn token_revoke(&self, id: &str) -> Result<Token> {
        self.act("tokens", id, "revoke").await
    }

    // ---- sources ----

    pub async fn source_list(&self, archived_too: bool) -> Result<Vec<Source>> {
        self.list_of("sources", archived_too).await
    }

    pub async fn source_show(&self, name: &str) -> Result<Source> {
        self.one("sources", name).await
    }

    pub async fn source_create(&self, p: &SourceCreate) -> Result<Source> {
        self.post("api/v1/sources", p).await
    }

    pub async fn source_update(&self, name: &str, p: &SourceUpdate) -> Result<Source> {
        self.change("sources", name, p).await
    }

    pub async fn source_archive(&self, name: &str) -> Result<Source> {
        self.act("sources", name, "archive").await
    }

    // ---- profiles ----

    pub async fn profile_list(&self, archived_too: bool) -> Result<Vec<Profile>> {
        self.list_of("profiles", archived_too).await
    }

    pub async fn profile_show(&self, name: &str) -> Result<Profile> {
        self.one("profiles", name).await
    }

    pub async fn profile_create(&self, p: &ProfileCreate) -> Result<Profile> {
        self.post("api/v1/profiles", p).await
    }

    pub async fn profile_update(&self, name: &str, p: &ProfileUpdate) -> Result<Profile> {
        self.change("profiles", name, p).await
    }

    pub async fn profile_archive(&self, name: &str) -> Result<Profile> {
        self.act("profiles", name, "archive").await
    }

    // ---- agents ----

    pub async fn agent_list(&self, archived_too: bool) -> Result<Vec<Agent>> {
        self.list_of("agents", archived_too).await
    }

    pub async fn agent_show(&self, name: &str) -> Result<Agent> {
        self.one("agents", name).await
    }

    pub async fn agent_create(&self, p: &AgentCreate) -> Result<Agent> {
        self.post("api/v1/agents", p).await
    }

    pub async fn agent_update(&self, name: &str, p: &AgentUpdate) -> Result<Agent> {
        self.change("agents", name, p).await
    }

    pub async fn agent_archive(&self, name: &str) -> Result<Agent> {
        self.act("agents", name, "archive").await
    }

    // ---- Runners ----

    pub async fn runner_list(&self) -> Result<Vec<Runner>> {
        self.get("api/v1/runners").await
    }

    /// `id` is a Runner id or a unique prefix of one.
    pub async fn runner_show(&self, id: &str) -> Result<Runner> {
        self.one("runners", id).await
    }

    /// The answer carries the Runner's token, once.
    pub async fn runner_register(&self, p: &RunnerRegister) -> Result<RunnerRegistration> {
        self.post("api/v1/runners", p).await
    }

    pub async fn runner_update(&self, id: &str, p: &RunnerUpdate) -> Result<Runner> {
        self.change("runners", id, p).await
    }

    pub async fn runner_disable(&self, id: &str) -> Result<Runner> {
        self.act("runners", id, "disable").await
    }

    /// `POST /api/v1/runners/{id}/rotate-token`
    pub async fn runner_rotate_token(
        &self,
        id: &str,
        p: &crate::api::params::RunnerRotateToken,
    ) -> Result<Runner> {
        self.act_with("runners", id, "rotate-token", p).await
    }

    // ---- the command queue ----

    /// Enqueues a ping; its result is a [`crate::api::machine::PingResult`].
    pub async fn runner_ping(&self, runner: &str, p: &PingParams) -> Result<Command> {
        self.act_with("runners", runner, "ping", p).await
    }

    /// Enqueues a file export; its result is a [`crate::api::machine::FetchResult`].
    pub async fn runner_fetch(&self, runner: &str, p: &FetchParams) -> Result<Command> {
        self.act_with("runners", runner, "fetch", p).await
    }

    /// Enqueues a read of the Runner's recent egress decisions; its result is the egress
    /// log (the egress proxy's `LogResult`).
    pub async fn runner_egress_log(
        &self,
        runner: &str,
        p: &crate::api::computers::EgressLogParams,
    ) -> Result<Command> {
        self.act_with("runners", runner, "egress-log", p).await
    }

    /// Enqueues a listing of the Runner's live sessions; its result is a
    /// [`crate::api::sessions::SessionListResult`].
    pub async fn runner_sessions(&self, runner: &str) -> Result<Command> {
        self.act("runners", runner, "sessions").await
    }

    /// A Runner's newest commands, without their results.
    pub async fn runner_commands(&self, runner: &str, limit: u32) -> Result<Vec<Command>> {
        self.get(&format!(
            "api/v1/runners/{}/commands?limit={limit}",
            seg(runner)
        ))
        .await
    }

    /// One command with its result, after waiting up to `wait_ms` for it to end.
    pub async fn command_show(&self, id: &str, wait_ms: u64) -> Result<Command> {
        self.get(&format!("api/v1/commands/{}?wait_ms={wait_ms}", seg(id)))
            .await
    }

    pub async fn command_cancel(&self, id: &str) -> Result<Command> {
        self.act("commands", id, "cancel").await
    }

    /// Waits until the command is final, or `timeout` passed (then it is returned as last
    /// seen). Without a timeout it waits for good: the server ends every command by its
    /// deadline.
    pub async fn wait_command(&self, id: &str, timeout: Option<Duration>) -> Result<Command> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let wait_ms = match deadline {
                Some(d) => (d.saturating_duration_since(Instant::now()).as_millis() as u64)
                    .min(LONG_POLL_MS),
                None => LONG_POLL_MS,
            };
            let cmd = self.command_show(id, wait_ms).await?;
            if cmd.is_final() || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(cmd);
            }
        }
    }

    // ---- sessions ----

    /// Starts a turn (and a session, unless one is given).
    pub async fn chat(&self, p: &ChatParams) -> Result<ChatStarted> {
        self.post("api/v1/chat", p).await
    }

    /// Sessions, newest first; only `agent`'s when given.
    pub async fn session_list(&self, agent: Option<&str>) -> Result<Vec<Session>> {
        match agent {
            Some(a) => self.get(&format!("api/v1/sessions?agent={}", seg(a))).await,
            None => self.get("api/v1/sessions").await,
        }
    }

    /// A session with its transcript.
    pub async fn session_show(&self, id: &str) -> Result<Session> {
        self.one("sessions", id).await
    }

    /// Long-poll: the events after `after`, as soon as there are any, the turn (`turn`, or
    /// the newest) ended, or `wait_ms` passed.
    pub async fn session_events(
        &self,
        id: &str,
        after: i64,
        wait_ms: u64,
        turn: Option<&str>,
    ) -> Result<EventsPage> {
        let turn = turn
            .map(|t| format!("&turn={}", seg(t)))
            .unwrap_or_default();
        self.get(&format!(
            "api/v1/sessions/{}/events?after={after}&wait_ms={wait_ms}{turn}",
            seg(id)
        ))
        .await
    }

    /// Asks for the session's turn to be interrupted; the stop is confirmed later.
    pub async fn session_stop(&self, id: &str) -> Result<StopStarted> {
        self.act("sessions", id, "stop").await
    }

    /// Cancels one turn: a waiting one at once, a started one through a confirmed stop.
    pub async fn turn_cancel(&self, session: &str, turn: &str) -> Result<StopStarted> {
        let path = format!("turns/{}/cancel", seg(turn));
        self.act("sessions", session, &path).await
    }

    pub async fn session_close(&self, id: &str) -> Result<StopStarted> {
        self.act("sessions", id, "close").await
    }

    // ---- computers ----

    pub async fn computer_list(&self, removed_too: bool) -> Result<Vec<Computer>> {
        match removed_too {
            true => self.get("api/v1/computers?removed=true").await,
            false => self.get("api/v1/computers").await,
        }
    }

    /// `id` is a computer id or a unique prefix of one.
    pub async fn computer_show(&self, id: &str) -> Result<Computer> {
        self.one("computers", id).await
    }

    /// Provisions (or returns) the agent's computer; it may still be starting.
    pub async fn computer_create(&self, p: &ComputerCreate) -> Result<Computer> {
        self.post("api/v1/computers", p).await
    }

    pub async fn computer_stop(&self, id: &str) -> Result<Computer> {
        self.act("computers", id, "stop").await
    }

    /// Shares the computer with agents of its account (the user's explicit grant).
    pub async fn computer_share(&self, id: &str, agents: &[String]) -> Result<Computer> {
        let body = crate::api::computers::ComputerShare {
            agents: agents.to_vec(),
        };
        self.act_with("computers", id, "share", &body).await
    }

    /// Revokes the named agents' grants: their next turns run in their own computers.
    pub async fn computer_unshare(&self, id: &str, agents: &[String]) -> Result<Computer> {
        let body = crate::api::computers::ComputerShare {
            agents: agents.to_vec(),
        };
        self.act_with("computers", id, "unshare", &body).await
    }

    /// Removes the computer and deletes its workspace.
    pub async fn computer_remove(&self, id: &str) -> Result<Computer> {
        self.act("computers", id, "remove").await
    }

    /// Enqueues a diagnostic command; its result is a [`crate::api::computers::ExecResult`].
    pub async fn computer_exec(&self, id: &str, p: &ComputerExec) -> Result<Command> {
        self.act_with("computers", id, "exec", p).await
    }

    /// Enqueues a screen action; its result is a [`ScreenResult`](crate::api::screen::ScreenResult).
    pub async fn computer_screen(
        &self,
        id: &str,
        action: &crate::api::screen::ScreenAction,
        control_fence: Option<i64>,
        frame_id: Option<&str>,
    ) -> Result<Command> {
        let body = crate::api::computers::ComputerScreen {
            action: action.clone(),
            control_fence,
            frame_id: frame_id.map(str::to_string),
        };
        self.act_with("computers", id, "screen", &body).await
    }

    /// Runs one screen action as a Runner command and waits for its answer.
    pub async fn computer_screen_act(
        &self,
        id: &str,
        action: &crate::api::screen::ScreenAction,
        control_fence: Option<i64>,
        frame_id: Option<&str>,
    ) -> Result<crate::api::screen::ScreenResult> {
        let cmd = self
            .computer_screen(id, action, control_fence, frame_id)
            .await?;
        let cmd = self.wait_command(&cmd.id, None).await?;
        result_of(cmd, action.name())
    }

    /// Takes control of a computer; the answer names the pause command to wait for.
    pub async fn computer_control(&self, id: &str) -> Result<crate::api::computers::Control> {
        self.act("computers", id, "control").await
    }

    /// Renews (or with `release`, gives up) the control held under `fence`.
    pub async fn computer_control_renew(
        &self,
        id: &str,
        fence: i64,
        release: bool,
    ) -> Result<crate::api::computers::Control> {
        let body = crate::api::computers::ControlFence {
            control_fence: fence,
        };
        let action = if release {
            "control/release"
        } else {
            "control/renew"
        };
        self.act_with("computers", id, action, &body).await
    }

    /// Resumes the paused model with a note.
    pub async fn computer_handback(
        &self,
        id: &str,
        note: &str,
    ) -> Result<crate::api::computers::Control> {
        let body = crate::api::computers::Handback { note: note.into() };
        self.act_with("computers", id, "handback", &body).await
    }

    // ---- artifacts ----

    /// Artifacts, newest first; only one session's when given.
    pub async fn artifact_list(&self, session: Option<&str>) -> Result<Vec<Artifact>> {
        match session {
            Some(s) => {
                self.get(&format!("api/v1/artifacts?session={}", seg(s)))
                    .await
            }
            None => self.get("api/v1/artifacts").await,
        }
    }

    /// `id` is an artifact id or a unique prefix of one.
    pub async fn artifact_show(&self, id: &str) -> Result<Artifact> {
        self.one("artifacts", id).await
    }

    /// The artifact's bytes, as a response to read in chunks (its SHA-256 in a header).
    pub async fn artifact_content(&self, id: &str) -> Result<reqwest::Response> {
        self.get_stream(&format!("api/v1/artifacts/{}/content", seg(id)))
            .await
    }

    /// A fetch command's artifact, sent while it uploads (chunk by verified chunk).
    pub async fn command_artifact(&self, command: &str) -> Result<reqwest::Response> {
        self.get_stream(&format!("api/v1/commands/{}/artifact", seg(command)))
            .await
    }

    /// Uploads a file to attach to a turn; the server checks it against `sha256`.
    pub async fn upload(&self, name: &str, data: Vec<u8>, sha256: &str) -> Result<Artifact> {
        self.post_bytes(
            &format!("api/v1/uploads?name={}", seg(name)),
            data,
            &[(crate::api::artifacts::HEADER_SHA256, sha256)],
        )
        .await
    }

    /// Operator actions on computers, newest first.
    pub async fn audit_list(&self, limit: u32) -> Result<Vec<AuditEntry>> {
        self.get(&format!("api/v1/audit?limit={limit}")).await
    }

    // ---- teams, goals, subtasks ----

    pub async fn team_list(&self, archived_too: bool) -> Result<Vec<teams::Team>> {
        self.list_of("teams", archived_too).await
    }

    pub async fn team_show(&self, name: &str) -> Result<teams::Team> {
        self.one("teams", name).await
    }

    pub async fn team_create(&self, p: &teams::TeamCreate) -> Result<teams::Team> {
        self.post("api/v1/teams", p).await
    }

    pub async fn team_add(&self, team: &str, agent: &str) -> Result<teams::Team> {
        let body = teams::TeamMemberChange {
            agent: agent.into(),
        };
        self.act_with("teams", team, "members", &body).await
    }

    pub async fn team_remove(&self, team: &str, agent: &str) -> Result<teams::Team> {
        let body = teams::TeamMemberChange {
            agent: agent.into(),
        };
        self.act_with("teams", team, "members/remove", &body).await
    }

    pub async fn team_archive(&self, name: &str) -> Result<teams::Team> {
        self.act("teams", name, "archive").await
    }

    pub async fn goal_list(&self, team: Option<&str>) -> Result<Vec<teams::Goal>> {
        match team {
            Some(t) => self.get(&format!("api/v1/goals?team={}", seg(t))).await,
            None => self.get("api/v1/goals").await,
        }
    }

    pub async fn goal_show(&self, id: &str) -> Result<teams::Goal> {
        self.one("goals", id).await
    }

    pub async fn goal_create(&self, p: &teams::GoalCreate) -> Result<teams::Goal> {
        self.post("api/v1/goals", p).await
    }

    pub async fn goal_stop(&self, id: &str) -> Result<teams::Goal> {
        self.act("goals", id, "stop").await
    }

    pub async fn goal_resume(&self, id: &str) -> Result<teams::Goal> {
        self.act("goals", id, "resume").await
    }

    pub async fn subtask_list(&self, goal: &str) -> Result<Vec<teams::Subtask>> {
        self.get(&format!("api/v1/subtasks?goal={}", seg(goal)))
            .await
    }

    pub async fn subtask_show(&self, id: &str) -> Result<teams::Subtask> {
        self.one("subtasks", id).await
    }
}

/// The typed result of a command that must have ended `done`; otherwise an error that
/// says `{what} {state}: {reason}`.
pub fn result_of<T: CommandResult>(cmd: Command, what: &str) -> Result<T> {
    if !T::KINDS.contains(&cmd.kind) {
        return Err(ClientError::Command(format!(
            "{what}: command {} is {}, which does not answer with this result",
            cmd.id,
            crate::api::words::a(cmd.kind.as_sql())
        )));
    }
    if cmd.state != crate::api::states::CommandState::Done {
        return Err(ClientError::Command(format!(
            "{what} {}: {}",
            cmd.state,
            cmd.error.as_deref().unwrap_or("no reason given")
        )));
    }
    serde_json::from_value(cmd.result.unwrap_or_default()).map_err(|e| {
        ClientError::Command(format!(
            "the Runner's answer to {} ({what}) is not what this yy expects: {e}",
            cmd.kind
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::seg;

    #[test]
    fn seg_encodes_everything_but_unreserved_bytes() {
        assert_eq!(seg("abc-_.~09"), "abc-_.~09");
        assert_eq!(seg("a/b c"), "a%2Fb%20c");
        assert_eq!(seg("../x?y#z"), "..%2Fx%3Fy%23z");
        assert_eq!(seg("é"), "%C3%A9");
    }

    #[test]
    fn a_result_is_read_only_as_its_own_kinds_type() {
        use crate::api::computers::ExecResult;
        use crate::api::machine::{Command, CommandKind, CommandState, PingResult};
        let ping = Command {
            id: "c1".into(),
            runner_id: "r1".into(),
            kind: CommandKind::Ping,
            state: CommandState::Done,
            created_at: String::new(),
            deadline_at: String::new(),
            leased_at: None,
            generation: None,
            started_at: None,
            finished_at: None,
            cancel_requested: false,
            error: None,
            result: Some(serde_json::json!({
                "execution_id": "e", "runner_version": "1", "started_at_ms": 5
            })),
            waiting: None,
        };
        let r: PingResult = super::result_of(ping.clone(), "ping").unwrap();
        assert_eq!(r.started_at_ms, 5);
        let wrong = super::result_of::<ExecResult>(ping, "exec").unwrap_err();
        assert!(wrong.to_string().contains("is a ping"), "{wrong}");
    }
}
