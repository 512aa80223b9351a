//! The chat queue and the end of a disabled account's work, against SQLite in memory.

use super::commands::{self, QueueLimits, StartRefused};
use super::sessions::{self, Admission};
use super::tests::world;
use super::turn_waits::{self, Chat, MAX_QUEUED_PER_ACCOUNT};
use super::{StoreError, accounts, computers, control};
use crate::api::machine::Outcome;
use crate::api::states::TurnState;

fn ask(account: &str, agent: &str, message: &str) -> Admission {
    Admission {
        account_id: account.into(),
        admin: true,
        agent: agent.into(),
        session: None,
        message: message.into(),
        attachments: Vec::new(),
        inputs: Vec::new(),
    }
}

#[test]
fn chats_to_a_busy_agent_wait_in_order_and_start_with_their_ids() {
    let mut w = world();
    let generation = w.connect();
    let (_, running) = w.chat("host-1").unwrap();
    let limits = QueueLimits::default();
    let mut waiting = Vec::new();
    for (i, message) in ["second", "third"].into_iter().enumerate() {
        match turn_waits::chat(&mut w.conn, &ask(&w.account, "host-1", message), limits).unwrap() {
            Chat::Queued(_, wait, ahead) => {
                assert_eq!(
                    ahead,
                    i as u32 + 1,
                    "the running turn and those queued before"
                );
                let why = ["already in a turn", "an earlier turn"][i];
                assert!(wait.reason.contains(why), "{}", wait.reason);
                waiting.push(wait);
            }
            other => panic!("{other:?}"),
        }
    }
    // Another agent is not held up by them.
    assert!(matches!(
        turn_waits::chat(&mut w.conn, &ask(&w.account, "host-2", "free"), limits).unwrap(),
        Chat::Started(..)
    ));
    // Nothing starts while the agent is busy.
    assert!(
        turn_waits::dispatch(&mut w.conn, limits)
            .unwrap()
            .is_empty()
    );
    w.run(generation, &running.command_id);
    w.complete(generation, &running.command_id, Outcome::Done)
        .unwrap();
    // The first queued starts, with the id it had while it waited; the next one still waits.
    assert_eq!(
        turn_waits::dispatch(&mut w.conn, limits).unwrap(),
        vec![w.runner.clone()]
    );
    let started = sessions::get_turn(&w.conn, &waiting[0].id).unwrap();
    assert_eq!(
        (started.state, started.message.as_str()),
        (TurnState::Queued, "second")
    );
    let next = turn_waits::get(&w.conn, &waiting[1].id).unwrap();
    assert!(next.is_waiting());
    assert_eq!(turn_waits::ahead(&w.conn, &next).unwrap(), 1);
    // A new chat to the agent queues behind it even once the agent is free.
    w.run(generation, &started.command_id);
    w.complete(generation, &started.command_id, Outcome::Done)
        .unwrap();
    assert!(matches!(
        turn_waits::chat(&mut w.conn, &ask(&w.account, "host-1", "fourth"), limits).unwrap(),
        Chat::Queued(_, ref wait, 1) if wait.reason.contains("earlier turn")
    ));
    turn_waits::dispatch(&mut w.conn, limits).unwrap();
    assert_eq!(
        sessions::get_turn(&w.conn, &waiting[1].id).unwrap().message,
        "third"
    );
}

#[test]
fn an_account_may_have_32_turns_waiting_and_a_cancelled_one_never_starts() {
    let mut w = world();
    let generation = w.connect();
    let (_, running) = w.chat("host-1").unwrap();
    let limits = QueueLimits::default();
    let mut first = None;
    for i in 0..MAX_QUEUED_PER_ACCOUNT {
        let Chat::Queued(session, wait, _) = turn_waits::chat(
            &mut w.conn,
            &ask(&w.account, "host-1", &format!("m{i}")),
            limits,
        )
        .unwrap() else {
            panic!("queued");
        };
        first.get_or_insert((session, wait));
    }
    let refused = turn_waits::chat(&mut w.conn, &ask(&w.account, "host-1", "one more"), limits);
    assert!(
        matches!(&refused, Err(StoreError::Limit(m)) if m.contains("32")),
        "{refused:?}"
    );
    let (session, wait) = first.unwrap();
    sessions::cancel_turn(&mut w.conn, &session.id, &wait.id, limits).unwrap();
    let ended = turn_waits::get(&w.conn, &wait.id).unwrap();
    assert_eq!(
        ended.clone().view().state,
        crate::api::states::TurnState::Interrupted
    );
    w.run(generation, &running.command_id);
    w.complete(generation, &running.command_id, Outcome::Done)
        .unwrap();
    turn_waits::dispatch(&mut w.conn, limits).unwrap();
    assert!(matches!(
        sessions::get_turn(&w.conn, &wait.id),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn a_disabled_account_is_refused_at_admission_at_start_and_at_renewal() {
    let mut w = world();
    let generation = w.connect();
    let limits = QueueLimits::default();
    // Leased before the disable: refused when its Runner would start it.
    let (_, leased) = w.chat("host-1").unwrap();
    commands::lease(&mut w.conn, &w.runner, generation, 10).unwrap();
    // Waiting before the disable: refused, never admitted.
    let Chat::Queued(_, wait, _) =
        turn_waits::chat(&mut w.conn, &ask(&w.account, "host-1", "later"), limits).unwrap()
    else {
        panic!("queued");
    };
    // Control taken before the disable: never renewed.
    let (c, start) = computers::create(&mut w.conn, &w.account, "box", limits).unwrap();
    let start = start.unwrap();
    w.run(generation, &start.id);
    w.complete(generation, &start.id, Outcome::Done).unwrap();
    control::take(&mut w.conn, &w.account, &c.id, limits).unwrap();

    let (account, _) = accounts::disable(&mut w.conn, "ops").unwrap();
    assert!(account.disabled_at.is_some());
    assert!(matches!(
        commands::start(&mut w.conn, &w.runner, generation, &leased.command_id),
        Err(StartRefused::Unauthorized(why)) if why.contains("disabled")
    ));
    let refused = turn_waits::get(&w.conn, &wait.id).unwrap();
    assert_eq!(refused.state, "refused");
    assert!(refused.reason.contains("disabled"), "{}", refused.reason);
    assert!(
        turn_waits::dispatch(&mut w.conn, limits)
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        w.chat("host-2"),
        Err(StoreError::Forbidden(m)) if m.contains("disabled")
    ));
    assert!(matches!(
        control::renew_or_release(&mut w.conn, &w.account, &c.id, 1, false),
        Err(StoreError::Forbidden(m)) if m.contains("disabled")
    ));
}
