//! Computers shared by explicit grant, against SQLite in memory: who may be granted, the
//! audit of every grant and revoke, a member's turns in the shared computer one at a time,
//! and its own computer again once the grant ends.

use super::commands::{self, QueueLimits, StartRefused};
use super::computer_grants::GrantChange;
use super::sessions::{self, Admission};
use super::tests::{World, world};
use super::turn_waits::{self, Chat};
use super::{StoreError, accounts, agents, computer_grants, computers};
use crate::api::ids::{CommandId, Generation};
use crate::api::machine::{Outcome, RunnerCommand};
use crate::api::params::AgentEnv;
use crate::api::sessions::WorkerTurnPayload;

/// The world of `tests.rs` with the Worker declared and computer agents `box2`, `box3`.
fn shared_world() -> (World, Generation) {
    let mut w = world();
    let generation = w.connect_with_worker();
    w.agent("box2", AgentEnv::Computer);
    w.agent("box3", AgentEnv::Computer);
    (w, generation)
}

fn names(agents: &[&str]) -> Vec<String> {
    agents.iter().map(|a| a.to_string()).collect()
}

fn ask(w: &World, agent: &str) -> Admission {
    Admission {
        account_id: w.account.clone(),
        admin: true,
        agent: agent.into(),
        session: None,
        message: format!("work, {agent}"),
        attachments: Vec::new(),
        inputs: Vec::new(),
    }
}

/// The Worker turn payload of a turn's command.
fn payload(w: &World, command: &CommandId) -> WorkerTurnPayload {
    let cmd = commands::get(&w.conn, command).unwrap();
    let value: serde_json::Value = serde_json::from_str(&cmd.payload).unwrap();
    match RunnerCommand::parse(cmd.kind.as_sql(), &value).unwrap() {
        RunnerCommand::WorkerTurn(p) => p,
        other => panic!("{other:?}"),
    }
}

fn audited(w: &World, action: &str) -> Vec<serde_json::Value> {
    computers::audit_list(&w.conn, 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.action == action)
        .map(|e| e.detail)
        .collect()
}

/// The computer of `box`, started.
fn box_computer(w: &mut World, g: Generation) -> String {
    let (c, start) =
        computers::create(&mut w.conn, &w.account, "box", QueueLimits::default()).unwrap();
    let start = start.expect("a start command");
    w.run(g, &start.id);
    w.complete(g, &start.id, Outcome::Done).unwrap();
    c.id.to_string()
}

/// The shared world with `box`'s computer started and shared with `box2`: (world,
/// generation, computer id).
fn box_shared_with_box2() -> (World, Generation, String) {
    let (mut w, g) = shared_world();
    let c = box_computer(&mut w, g);
    let account = w.account.clone();
    computer_grants::change(
        GrantChange::Share,
        &mut w.conn,
        &account,
        &c,
        &names(&["box2"]),
    )
    .unwrap();
    (w, g, c)
}

#[test]
fn only_computer_agents_of_the_account_may_be_granted_and_never_a_helper() {
    let (mut w, g) = shared_world();
    let c = box_computer(&mut w, g);
    let account = w.account.clone();
    let share = |w: &mut World, agents: &[&str]| {
        computer_grants::change(
            GrantChange::Share,
            &mut w.conn,
            &account,
            &c,
            &names(agents),
        )
    };
    // A temporary helper: a row in `helpers` (its goal is beside the point here).
    w.agent("helper", AgentEnv::Computer);
    w.foreign_keys(false);
    w.conn
        .execute(
            "INSERT INTO helpers (agent_id, goal_id, account_id, generation, created_at)
             SELECT id, 'goal', account_id, 1, 1 FROM agents WHERE name = 'helper'",
            [],
        )
        .unwrap();
    w.foreign_keys(true);
    match share(&mut w, &["box2", "helper"]) {
        Err(StoreError::Forbidden(why)) => {
            assert!(why.contains("temporary helper"), "{why}");
            assert!(why.contains("never join a shared computer"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // All or none: box2, named with the helper, was not granted either.
    assert!(computer_grants::members(&w.conn, &c).unwrap().is_empty());
    assert!(audited(&w, "computer.share").is_empty());
    for (agents, why) in [
        (&["host-1"][..], "runs its tools on the host"),
        (&["box"][..], "own computer"),
        (&["nobody"][..], "no agent named"),
        (&[][..], "at least one agent"),
    ] {
        let e = share(&mut w, agents).unwrap_err();
        assert!(e.to_string().contains(why), "{agents:?}: {e}");
    }
    // An agent of another account, even by id, is not found.
    let other = accounts::create(&w.conn, "other", "hash", false)
        .unwrap()
        .id;
    agents::create(
        &mut w.conn,
        agents::NewAgent {
            account_id: &other,
            name: "theirs",
            profile: "default",
            source: Some("main"),
            env: AgentEnv::Computer,
            manage_team: false,
            browser: false,
        },
    )
    .unwrap();
    let theirs = agents::get(&w.conn, &other, "theirs").unwrap().id;
    match share(&mut w, &[theirs.as_str()]) {
        Err(StoreError::NotFound(why)) => assert!(why.contains("its own account"), "{why}"),
        other => panic!("{other:?}"),
    }

    let (_, members) = share(&mut w, &["box2", "box3"]).unwrap();
    let shared: Vec<_> = members.iter().map(|g| g.agent.as_str()).collect();
    assert_eq!(shared, ["box2", "box3"]);
    assert_eq!(members[0].granted_by, "ops");
    let grants = audited(&w, "computer.share");
    assert_eq!(grants.len(), 2);
    assert!(grants.iter().any(|d| d["agent"] == "box3"));
    // Granted again: nothing changes, nothing more is audited.
    share(&mut w, &["box2"]).unwrap();
    assert_eq!(audited(&w, "computer.share").len(), 2);

    // One shared computer per agent, and no chains: box2's own computer cannot be shared
    // while box2 works in box's, and box (which shares its own) joins no other.
    let (own, _) =
        computers::create(&mut w.conn, &w.account, "box2", QueueLimits::default()).unwrap();
    let e = computer_grants::change(
        GrantChange::Share,
        &mut w.conn,
        &account,
        own.id.as_str(),
        &names(&["box"]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("works in computer"), "{e}");
    w.agent("box4", AgentEnv::Computer);
    let (box4, _) =
        computers::create(&mut w.conn, &w.account, "box4", QueueLimits::default()).unwrap();
    for (agent, why) in [
        ("box2", "already shares computer"),
        ("box", "its own computer with"),
    ] {
        let e = computer_grants::change(
            GrantChange::Share,
            &mut w.conn,
            &account,
            box4.id.as_str(),
            &names(&[agent]),
        )
        .unwrap_err();
        assert!(e.to_string().contains(why), "{agent}: {e}");
    }

    // Revoking: audited; a grant that does not exist is refused, and nothing changes.
    let e = computer_grants::change(
        GrantChange::Unshare,
        &mut w.conn,
        &account,
        &c,
        &names(&["box3", "host-1"]),
    )
    .unwrap_err();
    assert!(e.to_string().contains("is not shared with agent"), "{e}");
    assert_eq!(computer_grants::members(&w.conn, &c).unwrap().len(), 2);
    let (_, left) = computer_grants::change(
        GrantChange::Unshare,
        &mut w.conn,
        &account,
        &c,
        &names(&["box3"]),
    )
    .unwrap();
    assert_eq!(left.len(), 1);
    let revokes = audited(&w, "computer.unshare");
    assert_eq!(revokes.len(), 1);
    assert_eq!(revokes[0]["agent"], "box3");
}

#[test]
fn members_take_the_shared_computer_one_turn_at_a_time_each_in_its_own_session() {
    let (mut w, g, c) = box_shared_with_box2();
    let account = w.account.clone();
    let limits = QueueLimits::default();
    let box_id = agents::get(&w.conn, &account, "box").unwrap().id;
    let box2_id = agents::get(&w.conn, &account, "box2").unwrap().id;

    // The member's turn runs in the owner's computer, under the owner's lease, with its
    // own Worker.
    let (member_session, member_turn) = w.chat("box2").unwrap();
    assert_eq!(member_session.agent_id, box2_id);
    let p = payload(&w, &member_turn.command_id);
    assert_eq!(p.computer.computer_id, c);
    assert_eq!(p.computer.agent_id, box_id);
    assert_eq!(p.acting_agent_id.as_deref(), Some(box2_id.as_str()));
    assert_eq!(p.agent_id(), box2_id);

    // The owner's turn waits while the member's acts, and says so.
    let owner_ask = ask(&w, "box");
    match turn_waits::chat(&mut w.conn, &owner_ask, limits).unwrap() {
        Chat::Queued(session, wait, ahead) => {
            assert_eq!(session.agent_id, box_id, "its own session");
            assert_eq!(ahead, 1, "the member's turn acts first");
            assert!(wait.reason.contains("is shared"), "{}", wait.reason);
            assert!(
                wait.reason.contains("\"box2\" is in a turn"),
                "{}",
                wait.reason
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        turn_waits::dispatch(&mut w.conn, limits)
            .unwrap()
            .is_empty()
    );
    w.run(g, &member_turn.command_id);
    w.complete(g, &member_turn.command_id, Outcome::Done)
        .unwrap();
    assert_eq!(turn_waits::dispatch(&mut w.conn, limits).unwrap().len(), 1);
    let owner_session = sessions::list(&w.conn, Some(&box_id)).unwrap().remove(0);
    let owner_turn = sessions::turns(&w.conn, &owner_session.id)
        .unwrap()
        .remove(0);
    let p = payload(&w, &owner_turn.command_id);
    assert_eq!(
        (p.computer.computer_id.as_str(), p.acting_agent_id),
        (c.as_str(), None)
    );
    // The member's history stays in its own session.
    assert_ne!(owner_session.id, member_session.id);
    assert!(p.history.is_empty(), "{:?}", p.history);

    // Revoked while the member's next turn is queued: it is refused when it would start.
    w.run(g, &owner_turn.command_id);
    w.complete(g, &owner_turn.command_id, Outcome::Done)
        .unwrap();
    let (_, queued) = w.chat("box2").unwrap();
    commands::lease(&mut w.conn, &w.runner, g, 10).unwrap();
    computer_grants::change(
        GrantChange::Unshare,
        &mut w.conn,
        &account,
        &c,
        &names(&["box2"]),
    )
    .unwrap();
    assert!(matches!(
        commands::start(&mut w.conn, &w.runner, g, &queued.command_id),
        Err(StartRefused::Unauthorized(why)) if why.contains("no longer shared")
    ));
    commands::settle(&mut w.conn, None).unwrap();

    // Its next turn runs in its own computer again.
    let (_, own) = w.chat("box2").unwrap();
    let p = payload(&w, &own.command_id);
    assert_ne!(p.computer.computer_id, c);
    assert_eq!(
        (p.computer.agent_id.as_str(), p.acting_agent_id),
        (box2_id.as_str(), None)
    );
}

#[test]
fn a_runner_that_did_not_declare_shared_computers_gets_no_member_turn() {
    let (mut w, _, _) = box_shared_with_box2();
    // The same Runner reconnects as a yy from before shared computers.
    w.connect_declaring(
        &[
            crate::api::capabilities::SESSION_TURN,
            crate::api::capabilities::COMPUTER,
            crate::api::capabilities::COMPUTER_WORKER,
        ],
        8,
    );
    match w.chat("box2") {
        Err(StoreError::Invalid(why)) => {
            assert!(why.contains("shared-computer-v1"), "{why}");
            assert!(why.contains("yy computer unshare"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // The owner's own turns go on as before.
    w.chat("box").unwrap();
}
