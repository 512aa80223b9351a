//! The managed browser's grants in the store: a turn carries its agent's browser only to
//! a Runner that declared `browser-v1`; turning the browser off or archiving the agent asks
//! exactly those Runners to close (or remove) its context.

use super::agents::{self, AgentChange};
use super::commands;
use super::tests::world;
use crate::api::browser::BrowserClosePayload;
use crate::api::capabilities;
use crate::api::machine::{CommandKind, Outcome, RunnerCommand};
use crate::api::params::AgentEnv;

fn set_browser(w: &mut super::tests::World, on: bool) -> Vec<crate::api::ids::RunnerId> {
    let change = AgentChange {
        profile: None,
        env: None,
        manage_team: None,
        browser: Some(on),
    };
    agents::update(&mut w.conn, &w.account, "web", change)
        .unwrap()
        .1
}

/// The `browser` of the last turn's payload, and the `browser.close` commands queued.
fn sent(w: &super::tests::World) -> (Option<String>, Vec<BrowserClosePayload>) {
    let rows = commands::list(&w.conn, &w.runner, 100).unwrap();
    let mut turn = None;
    let mut closes = Vec::new();
    for row in rows.iter().rev() {
        let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap();
        match RunnerCommand::parse(row.kind.as_sql(), &payload).unwrap() {
            RunnerCommand::SessionTurn(p) => turn = Some(p.browser.map(|b| b.agent_id)),
            RunnerCommand::BrowserClose(p) => closes.push(p),
            _ => {}
        }
    }
    (turn.flatten(), closes)
}

#[test]
fn an_older_runner_without_browser_v1_gets_no_browser_and_no_close() {
    let mut w = world();
    w.connect_declaring(&[capabilities::SESSION_TURN, capabilities::SESSION_STOP], 0);
    w.agent("web", AgentEnv::Host);
    assert!(set_browser(&mut w, true).is_empty());
    w.chat("web").unwrap();
    assert_eq!(sent(&w), (None, Vec::new()));
    assert!(set_browser(&mut w, false).is_empty());
    agents::archive(&mut w.conn, &w.account, "web").unwrap();
    assert_eq!(sent(&w).1, Vec::new());
}

#[test]
fn a_runner_with_browser_v1_gets_the_grant_and_every_close() {
    let mut w = world();
    let generation = w.connect_declaring(
        &[
            capabilities::SESSION_TURN,
            capabilities::SESSION_STOP,
            capabilities::BROWSER,
        ],
        0,
    );
    w.agent("web", AgentEnv::Host);
    let agent = agents::get(&w.conn, &w.account, "web").unwrap();

    // Off (the default): the turn carries no browser.
    let (_, turn) = w.chat("web").unwrap();
    assert_eq!(sent(&w).0, None);
    w.run(generation, &turn.command_id);
    w.complete(generation, &turn.command_id, Outcome::Failed)
        .unwrap();

    assert!(
        set_browser(&mut w, true).is_empty(),
        "turning it on closes nothing"
    );
    w.chat("web").unwrap();
    assert_eq!(sent(&w).0, Some(agent.id.clone()));

    // Off again: one close, the profile kept; archived: one removal.
    assert_eq!(set_browser(&mut w, false), vec![w.runner.clone()]);
    let (_, archived) = agents::archive(&mut w.conn, &w.account, "web").unwrap();
    assert_eq!(archived, vec![w.runner.clone()]);
    let closes = sent(&w).1;
    let expected = |remove_profile| BrowserClosePayload {
        agent_id: agent.id.clone(),
        remove_profile,
    };
    assert_eq!(closes, vec![expected(false), expected(true)]);
    // Archiving again asks nothing more.
    assert!(
        agents::archive(&mut w.conn, &w.account, &agent.id)
            .unwrap()
            .1
            .is_empty()
    );
    let rows = commands::list(&w.conn, &w.runner, 100).unwrap();
    assert_eq!(
        rows.iter()
            .filter(|r| r.kind == CommandKind::BrowserClose)
            .count(),
        2
    );
}

#[test]
fn a_computer_agent_cannot_have_the_managed_browser() {
    let mut w = world();
    let change = AgentChange {
        profile: None,
        env: None,
        manage_team: None,
        browser: Some(true),
    };
    let e = agents::update(&mut w.conn, &w.account, "box", change).unwrap_err();
    assert!(e.to_string().contains("for host agents"), "{e}");
}
