//! The state machines of the store against SQLite in memory: the command queue, computers
//! and turns, each legal transition and the refusal of each illegal one.

use super::commands::{self, Cancelled, QueueLimits, StartRefused};
use super::db::Db;
use super::runners::{self, NewRunner};
use super::sessions::{self, Admission};
use super::{StoreError, accounts, agents, catalog, computers, migrate};
use crate::api::capabilities;
use crate::api::ids::{CommandId, ComputerId, Fence, Generation, RunnerId};
use crate::api::machine::{CommandState, NoPayload, Outcome, PingPayload, RunnerCommand};
use crate::api::params::AgentEnv;
use crate::api::states::{ComputerState, SessionState, TurnState};

const IMAGE: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

pub(super) struct World {
    pub(super) conn: Db,
    pub(super) account: String,
    pub(super) runner: RunnerId,
}

/// An account, a source with an enabled Runner that declared every capability, a profile
/// with a guest cwd, and the agents `host-N` and `box` (a computer agent).
pub(super) fn world() -> World {
    let mut conn = empty_store();
    let account = accounts::create(&conn, "ops", "hash", true).unwrap().id;
    catalog::create_source(&conn, "main", "").unwrap();
    catalog::create_profile(&conn, "default", Some("/workspace")).unwrap();
    let runner = runners::register(
        &mut conn,
        NewRunner {
            source: "main",
            profiles: &["default".to_string()],
            artifact_roots: &[],
            server_url: "http://127.0.0.1:1",
            hermes_url: "http://127.0.0.1:2",
            token_hash: "token-hash",
            computer_image: Some(IMAGE),
            network: crate::api::computers::NetworkMode::None,
        },
    )
    .unwrap()
    .id;
    let mut w = World {
        conn,
        account,
        runner,
    };
    w.connect();
    for name in ["host-1", "host-2", "host-3", "host-4", "host-5"] {
        w.agent(name, AgentEnv::Host);
    }
    w.agent("box", AgentEnv::Computer);
    w
}

/// The environment variable naming a scratch PostgreSQL database: the store's tests then
/// run there instead of in SQLite (scripts/run-tests.sh sets it for its PostgreSQL pass).
pub(super) const POSTGRES_ENV: &str = "YY_TEST_STORE_POSTGRES";

/// A migrated, empty store: SQLite in memory, or a schema of its own in the PostgreSQL
/// database of [`POSTGRES_ENV`], inside a transaction that is never committed (the store's
/// savepoints need one there).
pub(super) fn empty_store() -> Db {
    let Ok(url) = std::env::var(POSTGRES_ENV) else {
        let mut conn = Db::open_in_memory().unwrap();
        let sqlite = conn.sqlite_mut().unwrap();
        sqlite.pragma_update(None, "foreign_keys", "ON").unwrap();
        migrate(sqlite).unwrap();
        return conn;
    };
    let mut pg = super::pg::conn::PgConn::connect(&url)
        .unwrap_or_else(|e| panic!("{POSTGRES_ENV}: cannot connect: {e}"));
    let schema = format!("w_{}", uuid::Uuid::new_v4().simple());
    pg.batch_execute(&format!(
        "CREATE SCHEMA {schema}; SET search_path TO {schema}"
    ))
    .unwrap();
    pg.block_on(async |client| super::pg::migrate(client).await)
        .unwrap();
    pg.batch_execute("BEGIN").unwrap();
    Db::Postgres(Box::new(pg))
}

/// What a Runner with `capabilities` and room for `computers_capacity` computers says
/// when it connects.
pub(super) fn status(
    capabilities: &[&str],
    computers_capacity: u32,
) -> crate::api::machine::RunnerStatus {
    crate::api::machine::RunnerStatus {
        version: crate::VERSION.into(),
        capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
        computers_capacity,
        hostname: "test".into(),
        hermes_listen: None,
        engine: None,
        computer_idle_ms: None,
        computer_reclaim_ms: None,
        warm_computers: None,
    }
}

impl World {
    /// Turns the checking of foreign keys off or on again (to make a row the store never
    /// would); on PostgreSQL by the replication role, for this transaction.
    pub(super) fn foreign_keys(&self, on: bool) {
        match &self.conn {
            Db::Sqlite(c) => c.pragma_update(None, "foreign_keys", on).unwrap(),
            Db::Postgres(c) => c
                .batch_execute(if on {
                    "SET LOCAL session_replication_role = origin"
                } else {
                    "SET LOCAL session_replication_role = replica"
                })
                .unwrap(),
        }
    }

    /// A new connection generation with every capability declared.
    pub(super) fn connect(&mut self) -> Generation {
        let connected = self
            .connect_as("instance", &Default::default())
            .expect("connect");
        computers::end_leases(&self.conn, &self.runner, connected.generation).unwrap();
        commands::settle(&mut self.conn, None).unwrap();
        connected.generation
    }

    /// Connects as `instance` declaring `capabilities` and room for `capacity` computers,
    /// without settling anything; returns the generation.
    pub(super) fn connect_declaring(&mut self, capabilities: &[&str], capacity: u32) -> Generation {
        let status = status(capabilities, capacity);
        commands::connect(
            &mut self.conn,
            &self.runner,
            "instance",
            &status,
            &Default::default(),
        )
        .unwrap()
        .generation
    }

    /// Connects as a Runner with turns, their stop, computers and the Worker, room for 8
    /// computers; returns the generation.
    pub(super) fn connect_with_worker(&mut self) -> Generation {
        self.connect_declaring(
            &[
                capabilities::SESSION_TURN,
                capabilities::SESSION_STOP,
                capabilities::COMPUTER,
                capabilities::COMPUTER_WORKER,
                capabilities::SHARED_COMPUTER,
            ],
            8,
        )
    }

    /// Connects as `instance`, without settling anything.
    pub(super) fn connect_as(
        &mut self,
        instance: &str,
        takeover: &commands::Takeover,
    ) -> Result<crate::api::machine::Connected, StoreError> {
        let mut status = status(
            &[
                capabilities::SESSION_TURN,
                capabilities::SESSION_STOP,
                capabilities::COMPUTER,
            ],
            2,
        );
        status.hostname = "host-a\x1b[2J".into();
        commands::connect(&mut self.conn, &self.runner, instance, &status, takeover)
    }

    pub(super) fn agent(&mut self, name: &str, env: AgentEnv) {
        agents::create(
            &mut self.conn,
            agents::NewAgent {
                account_id: &self.account,
                name,
                profile: "default",
                source: Some("main"),
                env,
                manage_team: false,
                browser: false,
            },
        )
        .unwrap();
    }

    pub(super) fn ping(&mut self, limits: QueueLimits) -> Result<commands::CommandRow, StoreError> {
        let ping = RunnerCommand::Ping(PingPayload { hold_ms: 0 });
        commands::enqueue(&mut self.conn, &self.runner, &ping, None, limits)
    }

    pub(super) fn state(&self, id: &CommandId) -> CommandState {
        commands::get(&self.conn, id).unwrap().state
    }

    /// Leases everything pending to `generation` and starts the command `id`.
    pub(super) fn run(&mut self, generation: Generation, id: &CommandId) {
        commands::lease(&mut self.conn, &self.runner, generation, 100).unwrap();
        commands::start(&mut self.conn, &self.runner, generation, id).unwrap();
    }

    pub(super) fn complete(
        &mut self,
        generation: Generation,
        id: &CommandId,
        outcome: Outcome,
    ) -> Result<(), StoreError> {
        let row = commands::complete(
            &mut self.conn,
            &self.runner,
            generation,
            id,
            outcome,
            None,
            None,
        )?;
        commands::settle(&mut self.conn, Some(row.kind))
    }

    /// Creates the computer of `box` and starts it with `outcome`; its id and the start.
    fn start_box(&mut self, generation: Generation, outcome: Outcome) -> (ComputerId, CommandId) {
        let (c, start) =
            computers::create(&mut self.conn, &self.account, "box", QueueLimits::default())
                .unwrap();
        let start = start.expect("a start command");
        self.run(generation, &start.id);
        self.complete(generation, &start.id, outcome).unwrap();
        (c.id, start.id)
    }

    pub(super) fn chat(
        &mut self,
        agent: &str,
    ) -> Result<(sessions::SessionRow, sessions::TurnRow), StoreError> {
        let admission = Admission {
            account_id: self.account.clone(),
            admin: true,
            agent: agent.into(),
            session: None,
            message: "hello".into(),
            attachments: Vec::new(),
            inputs: Vec::new(),
        };
        sessions::admit_turn(&mut self.conn, &admission, QueueLimits::default())
    }
}

#[test]
fn a_command_goes_pending_leased_running_done_and_stays_done() {
    let mut w = world();
    let generation = w.connect();
    let cmd = w.ping(QueueLimits::default()).unwrap();
    assert_eq!(cmd.state, CommandState::Pending);
    let leased = commands::lease(&mut w.conn, &w.runner, generation, 10).unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(w.state(&cmd.id), CommandState::Leased);
    assert!(
        commands::lease(&mut w.conn, &w.runner, generation, 10)
            .unwrap()
            .is_empty(),
        "a leased command is not leased again"
    );
    let deadline = commands::start(&mut w.conn, &w.runner, generation, &cmd.id).unwrap();
    assert_eq!(w.state(&cmd.id), CommandState::Running);
    // A retried start whose answer was lost gets the same grant.
    assert_eq!(
        commands::start(&mut w.conn, &w.runner, generation, &cmd.id).unwrap(),
        deadline
    );
    w.complete(generation, &cmd.id, Outcome::Done).unwrap();
    assert_eq!(w.state(&cmd.id), CommandState::Done);
    // The same outcome again is a retried report; another outcome is refused.
    w.complete(generation, &cmd.id, Outcome::Done).unwrap();
    assert!(matches!(
        w.complete(generation, &cmd.id, Outcome::Failed),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        commands::start(&mut w.conn, &w.runner, generation, &cmd.id),
        Err(StartRefused::NotLeased(_))
    ));
}

#[test]
fn a_second_instance_is_let_in_only_as_a_restart_a_takeover_or_after_the_first_went_offline() {
    // world() connected "instance".
    let mut w = world();
    let refused = w.connect_as("second", &Default::default()).unwrap_err();
    let StoreError::RunnerOnline(message) = refused else {
        panic!("{refused:?}")
    };
    assert!(message.contains("on host host-a2J"), "{message}");
    assert!(message.contains("--replace"), "{message}");
    assert_eq!(
        runners::online_instance(&w.conn, &w.runner)
            .unwrap()
            .unwrap()
            .instance,
        "instance",
        "the refused one changed nothing"
    );
    // The same instance reconnecting (a control plane restart) is no takeover.
    w.connect_as("instance", &Default::default()).unwrap();
    // A restart from the same data directory names its predecessor.
    let restart = commands::Takeover {
        previous: Some("instance".into()),
        replace: false,
    };
    w.connect_as("second", &restart).unwrap();
    let replace = commands::Takeover {
        previous: None,
        replace: true,
    };
    w.connect_as("third", &replace).unwrap();
    // Seen longer ago than the offline limit: nobody is online to take over from.
    w.conn
        .execute(
            "UPDATE runners SET last_seen_at = last_seen_at - ?1",
            [runners::OFFLINE_AFTER_MS],
        )
        .unwrap();
    assert_eq!(runners::online_instance(&w.conn, &w.runner).unwrap(), None);
    w.connect_as("fourth", &Default::default()).unwrap();
}

#[test]
fn a_command_is_never_started_or_completed_by_another_generation() {
    let mut w = world();
    let old = w.connect();
    let running = w.ping(QueueLimits::default()).unwrap();
    w.run(old, &running.id);
    let leased = w.ping(QueueLimits::default()).unwrap();
    commands::lease(&mut w.conn, &w.runner, old, 10).unwrap();
    assert_eq!(w.state(&leased.id), CommandState::Leased);

    let new = w.connect();
    assert!(new > old);
    assert_eq!(w.state(&running.id), CommandState::Uncertain);
    assert_eq!(
        w.state(&leased.id),
        CommandState::Pending,
        "leased, never started: queued again"
    );
    assert!(matches!(
        w.complete(old, &running.id, Outcome::Done),
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        commands::start(&mut w.conn, &w.runner, old, &leased.id),
        Err(StartRefused::NotLeased(_))
    ));
    // A duplicate report of the new generation for the uncertain command is refused too.
    assert!(matches!(
        w.complete(new, &running.id, Outcome::Done),
        Err(StoreError::Conflict(_))
    ));
}

#[test]
fn cancelling_dequeues_or_asks_the_runner_and_ends_in_one_outcome() {
    let mut w = world();
    let generation = w.connect();
    let pending = w.ping(QueueLimits::default()).unwrap();
    assert!(matches!(
        commands::cancel(&mut w.conn, &pending.id).unwrap(),
        Cancelled::Dequeued(_)
    ));
    assert_eq!(w.state(&pending.id), CommandState::Cancelled);
    assert!(matches!(
        commands::cancel(&mut w.conn, &pending.id),
        Err(StoreError::Conflict(_))
    ));

    let running = w.ping(QueueLimits::default()).unwrap();
    w.run(generation, &running.id);
    // Cancelled is only an outcome of a cancel that was asked for.
    assert!(matches!(
        w.complete(generation, &running.id, Outcome::Cancelled),
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        commands::cancel(&mut w.conn, &running.id).unwrap(),
        Cancelled::Requested(_)
    ));
    let queued: Vec<_> = commands::list(&w.conn, &w.runner, 10)
        .unwrap()
        .into_iter()
        .filter(|c| c.state == CommandState::Pending)
        .collect();
    assert_eq!(queued.len(), 1, "one cancel command goes to the Runner");
    assert_eq!(queued[0].kind, crate::api::machine::CommandKind::Cancel);
    w.complete(generation, &running.id, Outcome::Cancelled)
        .unwrap();
    assert_eq!(w.state(&running.id), CommandState::Cancelled);
}

#[test]
fn deadlines_expire_what_never_started_and_make_overdue_work_uncertain() {
    let mut w = world();
    let generation = w.connect();
    let started = w.ping(QueueLimits::default()).unwrap();
    let leased = w.ping(QueueLimits::default()).unwrap();
    let pending = w.ping(QueueLimits::default()).unwrap();
    commands::lease(&mut w.conn, &w.runner, generation, 2).unwrap();
    commands::start(&mut w.conn, &w.runner, generation, &started.id).unwrap();
    // Every deadline lies in the past; the running one beyond the grace period.
    let past = crate::timefmt::now_ms() - commands::OVERDUE_GRACE_MS - 1;
    w.conn
        .execute("UPDATE runner_commands SET deadline_at = ?1", [past])
        .unwrap();
    assert!(matches!(
        commands::start(&mut w.conn, &w.runner, generation, &leased.id),
        Err(StartRefused::Expired(_))
    ));
    let touched = commands::sweep(&mut w.conn).unwrap();
    assert_eq!(touched, vec![w.runner.clone()]);
    assert_eq!(w.state(&started.id), CommandState::Uncertain);
    assert_eq!(w.state(&leased.id), CommandState::Expired);
    assert_eq!(w.state(&pending.id), CommandState::Expired);
    assert!(commands::sweep(&mut w.conn).unwrap().is_empty());
}

#[test]
fn a_full_queue_refuses_work_but_never_a_stop() {
    let mut w = world();
    let limits = QueueLimits {
        max_pending: 2,
        max_pending_bytes: 1 << 20,
    };
    let first = w.ping(limits).unwrap();
    w.ping(limits).unwrap();
    assert!(matches!(w.ping(limits), Err(StoreError::Limit(_))));
    let list = RunnerCommand::SessionList(NoPayload {});
    assert!(matches!(
        commands::enqueue(&mut w.conn, &w.runner, &list, None, limits),
        Err(StoreError::Limit(_))
    ));
    // Cancelling goes through even now, and makes room.
    commands::cancel(&mut w.conn, &first.id).unwrap();
    let third = w.ping(limits).unwrap();
    assert!(matches!(w.ping(limits), Err(StoreError::Limit(_))));
    let generation = w.connect();
    commands::lease(&mut w.conn, &w.runner, generation, 1).unwrap();
    w.ping(limits).unwrap();
    commands::cancel(&mut w.conn, &third.id).unwrap();
    runners::disable(&w.conn, &w.runner).unwrap();
    assert!(matches!(
        w.ping(QueueLimits::default()),
        Err(StoreError::Conflict(_))
    ));
}

/// The Runner's kept pending counts, and the same counted from its rows.
fn pending_counts(w: &World) -> ((i64, i64), (i64, i64)) {
    let kept = w
        .conn
        .query_row(
            "SELECT pending_commands, pending_bytes FROM runners WHERE id = ?1",
            [&w.runner],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let counted = w
        .conn
        .query_row(
            "SELECT count(*), coalesce(sum(payload_bytes), 0) FROM runner_commands
             WHERE runner_id = ?1 AND state = 'pending'",
            [&w.runner],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    (kept, counted)
}

#[test]
fn the_kept_pending_counts_follow_every_change_of_a_command() {
    let mut w = world();
    let generation = w.connect();
    let check = |w: &World, commands: i64, why: &str| {
        let (kept, counted) = pending_counts(w);
        assert_eq!(kept, counted, "{why}");
        assert_eq!(kept.0, commands, "{why}");
    };
    check(&w, 0, "none yet");
    let pings: Vec<_> = (0..5)
        .map(|_| w.ping(QueueLimits::default()).unwrap())
        .collect();
    check(&w, 5, "enqueued");
    assert!(pending_counts(&w).0.1 > 0, "the bytes are counted");
    commands::lease(&mut w.conn, &w.runner, generation, 2).unwrap();
    check(&w, 3, "two leased");
    commands::cancel(&mut w.conn, &pings[4].id).unwrap();
    check(&w, 2, "one dequeued");
    // A new generation puts what was leased and never started back in the queue.
    let generation = w.connect();
    check(&w, 4, "the leased ones requeued");
    w.conn
        .execute(
            "UPDATE runner_commands SET deadline_at = 0 WHERE id = ?1",
            [&pings[3].id],
        )
        .unwrap();
    commands::sweep(&mut w.conn).unwrap();
    check(&w, 3, "one expired");
    w.conn
        .execute(
            "UPDATE runner_commands SET payload_bytes = payload_bytes + 100 WHERE id = ?1",
            [&pings[2].id],
        )
        .unwrap();
    check(&w, 3, "a pending command's bytes changed");
    w.conn
        .execute("DELETE FROM runner_commands WHERE id = ?1", [&pings[2].id])
        .unwrap();
    check(&w, 2, "one deleted");
    let leased = commands::lease(&mut w.conn, &w.runner, generation, 10).unwrap();
    assert_eq!(leased.len(), 2);
    check(&w, 0, "all leased");
    // What counting again finds is what was kept.
    let before = pending_counts(&w).0;
    commands::recount_pending(&w.conn).unwrap();
    assert_eq!(pending_counts(&w).0, before);
}

#[test]
fn a_computer_starts_stops_and_is_recreated_under_a_growing_fence() {
    let mut w = world();
    let generation = w.connect();
    let (c, start) =
        computers::create(&mut w.conn, &w.account, "box", QueueLimits::default()).unwrap();
    let start = start.expect("a start command");
    assert_eq!((c.state, c.fence), (ComputerState::Starting, Fence(1)));
    let (again, none) =
        computers::create(&mut w.conn, &w.account, "box", QueueLimits::default()).unwrap();
    assert!(none.is_none(), "a starting computer is not started twice");
    assert_eq!(again.id, c.id);
    assert!(
        matches!(
            computers::exec(
                &mut w.conn,
                &w.account,
                &c.id,
                &["true".into()],
                None,
                None,
                QueueLimits::default()
            ),
            Err(StoreError::Conflict(_))
        ),
        "no exec before it runs"
    );

    w.run(generation, &start.id);
    w.complete(generation, &start.id, Outcome::Done).unwrap();
    let running = computers::get(&w.conn, &c.id).unwrap();
    assert_eq!(running.state, ComputerState::Running);
    let exec = computers::exec(
        &mut w.conn,
        &w.account,
        &c.id,
        &["true".into()],
        Some(1000),
        None,
        QueueLimits::default(),
    )
    .unwrap();
    assert_eq!(exec.kind, crate::api::machine::CommandKind::ComputerExec);

    let (stopping, stop) = computers::stop(&mut w.conn, &c.id, false).unwrap();
    assert_eq!(
        (stopping.state, stopping.fence),
        (ComputerState::Stopping, Fence(2))
    );
    let stop = stop.unwrap();
    w.run(generation, &stop.id);
    w.complete(generation, &stop.id, Outcome::Done).unwrap();
    let stopped = computers::get(&w.conn, &c.id).unwrap();
    assert_eq!(stopped.state, ComputerState::Stopped);
    assert!(
        computers::stop(&mut w.conn, &c.id, false)
            .unwrap()
            .1
            .is_none(),
        "stopping a stopped computer sends nothing"
    );

    let (recreated, _) =
        computers::create(&mut w.conn, &w.account, "box", QueueLimits::default()).unwrap();
    assert_eq!(
        (recreated.state, recreated.fence),
        (ComputerState::Starting, Fence(3))
    );
    // A new generation ends the lease: the fence grows and the computer is stopped.
    w.connect();
    let ended = computers::get(&w.conn, &c.id).unwrap();
    assert_eq!(
        (ended.state, ended.fence),
        (ComputerState::Stopped, Fence(4))
    );

    let generation = w.connect();
    let (_, remove) = computers::stop(&mut w.conn, &c.id, true).unwrap();
    let remove = remove.unwrap();
    w.run(generation, &remove.id);
    w.complete(generation, &remove.id, Outcome::Done).unwrap();
    assert_eq!(
        computers::get(&w.conn, &c.id).unwrap().state,
        ComputerState::Removed
    );
    assert!(matches!(
        computers::stop(&mut w.conn, &c.id, false),
        Err(StoreError::Conflict(_))
    ));
}

#[test]
fn a_failed_start_leaves_the_computer_failed_and_host_agents_get_none() {
    let mut w = world();
    let generation = w.connect();
    let (c, _) = w.start_box(generation, Outcome::Failed);
    assert_eq!(
        computers::get(&w.conn, &c).unwrap().state,
        ComputerState::Failed
    );
    assert!(matches!(
        computers::create(&mut w.conn, &w.account, "host-1", QueueLimits::default()),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn turns_are_admitted_one_per_agent_and_four_in_all() {
    let mut w = world();
    let (session, turn) = w.chat("host-1").unwrap();
    assert_eq!(session.state, SessionState::Running);
    assert_eq!(turn.state, TurnState::Queued);
    assert!(matches!(w.chat("host-1"), Err(StoreError::Conflict(_))));
    for agent in ["host-2", "host-3", "host-4"] {
        w.chat(agent).unwrap();
    }
    assert!(matches!(w.chat("host-5"), Err(StoreError::Limit(_))));
    assert!(
        matches!(w.chat("box"), Err(StoreError::Invalid(_))),
        "computer agents are refused on the host path"
    );
    // Closing a session in a turn is refused; a stop of a queued turn cancels it.
    assert!(matches!(
        sessions::close(&mut w.conn, &session.id, QueueLimits::default()),
        Err(StoreError::Conflict(_))
    ));
    let (stopped, command) =
        sessions::stop(&mut w.conn, &session.id, QueueLimits::default()).unwrap();
    assert!(
        command.is_none(),
        "nothing reached a Runner: nothing to send"
    );
    assert_eq!(stopped.state, SessionState::Idle);
    let turn = sessions::get_turn(&w.conn, &turn.id).unwrap();
    assert_eq!(turn.state, TurnState::Interrupted);
    assert!(matches!(
        sessions::stop(&mut w.conn, &session.id, QueueLimits::default()),
        Err(StoreError::Conflict(_))
    ));
    w.chat("host-5").unwrap();
}

#[test]
fn a_turn_running_when_its_generation_ends_is_uncertain_and_its_session_idle() {
    let mut w = world();
    let generation = w.connect();
    let (session, turn) = w.chat("host-1").unwrap();
    w.run(generation, &turn.command_id);
    w.connect();
    let turn = sessions::get_turn(&w.conn, &turn.id).unwrap();
    assert_eq!(turn.state, TurnState::Uncertain);
    assert!(turn.error.unwrap().contains("never replayed"));
    let session = sessions::get(&w.conn, &session.id).unwrap();
    assert_eq!(session.state, SessionState::Idle);
    let closed = sessions::close(&mut w.conn, &session.id, QueueLimits::default()).unwrap();
    assert_eq!(closed.0.state, SessionState::Closed);
    let admission = Admission {
        account_id: w.account.clone(),
        admin: true,
        agent: "host-1".into(),
        session: Some(session.id.clone()),
        message: "again".into(),
        attachments: Vec::new(),
        inputs: Vec::new(),
    };
    assert!(
        matches!(
            sessions::admit_turn(&mut w.conn, &admission, QueueLimits::default()),
            Err(StoreError::Conflict(_))
        ),
        "a closed session is never reused"
    );
}

#[test]
fn queued_work_of_an_archived_agent_is_refused_at_start_and_its_computer_stops() {
    let mut w = world();
    let generation = w.connect();
    let (c, _) = w.start_box(generation, Outcome::Done);
    let (_, turn) = w.chat("host-1").unwrap();
    commands::lease(&mut w.conn, &w.runner, generation, 10).unwrap();

    agents::archive(&mut w.conn, &w.account, "host-1").unwrap();
    assert!(matches!(
        commands::start(&mut w.conn, &w.runner, generation, &turn.command_id),
        Err(StartRefused::Unauthorized(why)) if why.contains("archived")
    ));
    assert_eq!(w.state(&turn.command_id), CommandState::Failed);
    commands::settle(&mut w.conn, None).unwrap();
    assert_eq!(
        sessions::get_turn(&w.conn, &turn.id).unwrap().state,
        TurnState::Error
    );

    let boxed = agents::get(&w.conn, &w.account, "box").unwrap();
    agents::archive(&mut w.conn, &w.account, "box").unwrap();
    let (stopping, stop) = computers::stop_for_agent(&mut w.conn, &boxed.id)
        .unwrap()
        .expect("its running computer stops");
    assert_eq!(stopping.id, c);
    assert_eq!(stopping.state, ComputerState::Stopping);
    assert!(stop.is_some());
    assert!(
        computers::stop_for_agent(&mut w.conn, &boxed.id)
            .unwrap()
            .is_none()
    );
}

#[test]
fn an_agent_in_a_turn_cannot_switch_its_execution_environment() {
    let mut w = world();
    w.chat("host-1").unwrap();
    let change = agents::AgentChange {
        profile: None,
        env: Some(AgentEnv::Computer),
        manage_team: None,
        browser: None,
    };
    assert!(matches!(
        agents::update(&mut w.conn, &w.account, "host-1", change),
        Err(StoreError::Conflict(why)) if why.contains("cannot change while it executes")
    ));
}

#[test]
fn retention_drops_delivered_big_results_then_deletes_finished_commands() {
    use super::retention::{self, Compacted};
    let mut w = world();
    let generation = w.connect();
    let big = w.ping(QueueLimits::default()).unwrap().id;
    let small = w.ping(QueueLimits::default()).unwrap().id;
    for id in [&big, &small] {
        w.run(generation, id);
        w.complete(generation, id, Outcome::Done).unwrap();
    }
    let pending = w.ping(QueueLimits::default()).unwrap().id;
    let huge = format!("\"{}\"", "x".repeat(100_000));
    w.conn
        .execute(
            "UPDATE runner_commands SET result = ?1 WHERE id = ?2",
            rusqlite::params![huge, big],
        )
        .unwrap();
    w.conn
        .execute(
            "UPDATE runner_commands SET result = '{\"ok\":true}' WHERE id = ?1",
            [&small],
        )
        .unwrap();
    let now = crate::timefmt::now_ms();
    let hour = 3_600_000;
    retention::mark_delivered(&w.conn, &big, now).unwrap();
    retention::mark_delivered(&w.conn, &small, now).unwrap();

    let kept = retention::compact(&mut w.conn, hour, now + 30_000).unwrap();
    assert_eq!(
        kept,
        Compacted::default(),
        "a retry within the grace still gets it"
    );
    let dropped = retention::compact(&mut w.conn, hour, now + 61_000).unwrap();
    assert_eq!(dropped.results, 1, "only the big result goes");
    assert!(commands::get(&w.conn, &big).unwrap().result.is_none());
    assert!(commands::get(&w.conn, &small).unwrap().result.is_some());

    let old = retention::compact(&mut w.conn, hour, now + 2 * hour).unwrap();
    assert_eq!(
        old.commands, 2,
        "both finished commands are past the retention"
    );
    assert!(commands::get(&w.conn, &big).is_err());
    assert_eq!(
        w.state(&pending),
        CommandState::Pending,
        "unfinished work stays"
    );
    assert!(retention::give_back_space(&w.conn).is_ok());
}

#[test]
fn control_fences_only_grow_and_end_unless_renewed() {
    use super::control;
    let mut w = world();
    let generation = w.connect();
    let (c, start) =
        computers::create(&mut w.conn, &w.account, "box", QueueLimits::default()).unwrap();
    assert!(
        matches!(
            control::take(&mut w.conn, &w.account, &c.id, QueueLimits::default()),
            Err(StoreError::Conflict(_))
        ),
        "nothing to take over before it runs"
    );
    let start = start.unwrap();
    w.run(generation, &start.id);
    w.complete(generation, &start.id, Outcome::Done).unwrap();
    let other = accounts::create(&w.conn, "other", "hash", true).unwrap().id;

    let (taken, pause) =
        control::take(&mut w.conn, &w.account, &c.id, QueueLimits::default()).unwrap();
    assert_eq!((taken.control_fence, taken.paused), (1, true));
    assert_eq!(
        pause.unwrap().kind,
        crate::api::machine::CommandKind::ComputerPause
    );
    // Another operator is refused while the control is live.
    assert!(matches!(
        control::take(&mut w.conn, &other, &c.id, QueueLimits::default()),
        Err(StoreError::Conflict(m)) if m.contains("controlled by another operator")
    ));
    control::renew_or_release(&mut w.conn, &w.account, &c.id, 1, false).unwrap();
    // The holder's shell goes to the computer's Runner under the computer's fence; nobody
    // else's.
    let shell = |w: &mut World, account: &str, fence: i64| {
        let q = crate::api::shell::ShellQuery {
            control_fence: fence,
            cols: None,
            rows: Some(40),
        };
        control::shell(
            &mut w.conn,
            account,
            &c.id,
            &q,
            "relay",
            QueueLimits::default(),
        )
    };
    let me = w.account.clone();
    let opened = shell(&mut w, &me, 1).unwrap();
    assert_eq!(opened.kind, crate::api::machine::CommandKind::ComputerShell);
    let payload: serde_json::Value = serde_json::from_str(&opened.payload).unwrap();
    assert_eq!(
        (&payload["fence"], &payload["cols"], &payload["rows"]),
        (
            &serde_json::json!(c.fence),
            &serde_json::json!(80),
            &serde_json::json!(40)
        )
    );
    assert!(
        matches!(shell(&mut w, &other, 1), Err(StoreError::Conflict(m)) if m.contains("ended"))
    );
    // Taking again raises the fence; the old fence can no longer renew.
    let (again, _) = control::take(&mut w.conn, &w.account, &c.id, QueueLimits::default()).unwrap();
    assert_eq!(again.control_fence, 2);
    assert!(matches!(shell(&mut w, &me, 1), Err(StoreError::Conflict(m)) if m.contains("stale")));
    assert!(matches!(
        control::renew_or_release(&mut w.conn, &w.account, &c.id, 1, false),
        Err(StoreError::Conflict(m)) if m.contains("stale")
    ));
    // Control not renewed in time ends; the model stays paused.
    w.conn
        .execute(
            "UPDATE computer_controls SET expires_at = 1 WHERE computer_id = ?1",
            [&c.id],
        )
        .unwrap();
    assert!(matches!(
        control::renew_or_release(&mut w.conn, &w.account, &c.id, 2, false),
        Err(StoreError::Conflict(m)) if m.contains("ended")
    ));
    let shown = control::show(&w.conn, &c.id).unwrap();
    assert_eq!((shown.holder, shown.paused), (None, true));
    // Then anyone may take it, raising the fence again, or hand it back.
    let (third, _) = control::take(&mut w.conn, &other, &c.id, QueueLimits::default()).unwrap();
    assert_eq!(third.control_fence, 3);
    assert!(
        matches!(
            control::handback(&mut w.conn, &w.account, &c.id, "x", QueueLimits::default()),
            Err(StoreError::Conflict(_))
        ),
        "not while another operator holds it"
    );
    let (back, resume) =
        control::handback(&mut w.conn, &other, &c.id, "note", QueueLimits::default()).unwrap();
    assert!(!back.paused && back.holder.is_none());
    assert_eq!(
        resume.unwrap().kind,
        crate::api::machine::CommandKind::ComputerResume
    );
    assert!(matches!(
        control::handback(&mut w.conn, &other, &c.id, "again", QueueLimits::default()),
        Err(StoreError::Conflict(m)) if m.contains("not paused")
    ));
    let long = "x".repeat(crate::api::computers::MAX_NOTE_CHARS + 1);
    assert!(matches!(
        control::handback(&mut w.conn, &other, &c.id, &long, QueueLimits::default()),
        Err(StoreError::Invalid(_))
    ));
}
