//! Leases beside other replicas' transactions on PostgreSQL (issue 27): `FOR UPDATE SKIP
//! LOCKED`, no wait for the store's lock, and the generation fence through the Runner's
//! row. They need the store tests' database (`tests::POSTGRES_ENV`) and do nothing without
//! it; on SQLite a lease is [`commands::lease`], tested with the queue.

use std::time::Duration;

use super::commands::{self, Cancelled, QueueLimits};
use super::db::Db;
use super::pg::conn::{PgConn, STORE_LOCK};
use super::runners;
use super::tests::{POSTGRES_ENV, World, world};
use crate::api::ids::{CommandId, Generation};
use crate::api::machine::CommandState;

/// The store tests' world with its setup committed, so that other sessions see it; its
/// connection waits at most 5 s for any lock (a lease that waited would fail, not hang).
/// Also the URL of a second session on the same schema. `None` without PostgreSQL.
fn committed_world() -> Option<(World, String)> {
    let url = std::env::var(POSTGRES_ENV).ok()?;
    let w = world();
    let schema: String = w
        .conn
        .query_row("SELECT current_schema()", [], |r| r.get(0))
        .unwrap();
    w.conn
        .execute_batch("COMMIT; SET statement_timeout = 5000")
        .unwrap();
    let separator = if url.contains('?') { '&' } else { '?' };
    Some((
        w,
        format!("{url}{separator}options=-csearch_path%3D{schema}"),
    ))
}

/// `f` in a transaction of its own on `db`, without the store's lock (as
/// `Store::call_apart_relaxed` runs it), committed when it returns.
fn apart<R>(db: &mut Db, f: impl FnOnce(&mut Db) -> R) -> R {
    db.begin(false).unwrap();
    let r = f(db);
    db.execute_batch("COMMIT").unwrap();
    r
}

/// A second session holding the store's lock and the pending command `id`, as a replica's
/// transaction (a cancel, a sweep) does while it runs.
fn holding(url: &str, id: &str) -> PgConn {
    let holder = PgConn::connect(url).unwrap();
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({STORE_LOCK});
             SELECT 1 FROM runner_commands WHERE id = '{id}' FOR UPDATE"
        ))
        .unwrap();
    holder
}

#[test]
fn on_postgres_a_lease_takes_what_no_other_transaction_holds_without_the_store_lock() {
    let Some((mut w, url)) = committed_world() else {
        return;
    };
    let generation = apart(&mut w.conn, |c| {
        runners::fence(c, &w.runner).unwrap().unwrap().1
    });
    let generation = Generation(generation);
    let ids: Vec<String> = (0..3)
        .map(|_| {
            w.conn.begin(true).unwrap();
            let id = w.ping(QueueLimits::default()).unwrap().id;
            w.conn.execute_batch("COMMIT").unwrap();
            id.to_string()
        })
        .collect();

    // Another replica holds the store's lock and the oldest command: the lease neither
    // waits for either (its connection would fail after 5 s) nor takes that command.
    let holder = holding(&url, &ids[0]);
    let leased = apart(&mut w.conn, |c| {
        commands::lease_skipping_locked(c, &w.runner, generation, 10)
    })
    .unwrap()
    .expect("no worker turn is waiting");
    let leased: Vec<&str> = leased.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(leased, [ids[1].as_str(), ids[2].as_str()]);
    holder.batch_execute("ROLLBACK").unwrap();
    // Once it is free, the next lease takes it.
    let leased = apart(&mut w.conn, |c| {
        commands::lease_skipping_locked(c, &w.runner, generation, 10)
    })
    .unwrap()
    .unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].id.as_str(), ids[0]);
    // Each exactly once: all three leased, to this generation.
    for id in &ids {
        assert_eq!(w.state(&CommandId::new(id)), CommandState::Leased);
    }
    // A cancel after the lease asks the Runner to stop it (it no longer dequeues it).
    w.conn.begin(true).unwrap();
    let cancelled = commands::cancel(&mut w.conn, &CommandId::new(&ids[0])).unwrap();
    w.conn.execute_batch("COMMIT").unwrap();
    assert!(matches!(cancelled, Cancelled::Requested(_)));
}

#[test]
fn on_postgres_a_lease_waits_for_a_connect_through_another_replica_and_sees_its_generation() {
    let Some((mut w, url)) = committed_world() else {
        return;
    };
    let before = apart(&mut w.conn, |c| {
        runners::fence(c, &w.runner).unwrap().unwrap().1
    });
    // Another replica's connect: a new generation, not committed yet.
    let connect = PgConn::connect(&url).unwrap();
    connect
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({STORE_LOCK});
             UPDATE runners SET generation = generation + 1 WHERE id = '{}'",
            w.runner
        ))
        .unwrap();
    let runner = w.runner.clone();
    let lease = std::thread::spawn(move || {
        let mut db = Db::Postgres(Box::new(PgConn::connect(&url).unwrap()));
        apart(&mut db, |c| runners::fence(c, &runner).unwrap().unwrap().1)
    });
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !lease.is_finished(),
        "the lease waits for the Runner's row while a connect changes it"
    );
    connect.batch_execute("COMMIT").unwrap();
    // It reads the new generation, so the lease of the old one is refused.
    assert_eq!(lease.join().unwrap(), before + 1);
}

#[test]
fn on_postgres_a_waiting_worker_turn_is_leased_under_the_store_lock() {
    let Some((mut w, _url)) = committed_world() else {
        return;
    };
    let generation = apart(&mut w.conn, |c| {
        runners::fence(c, &w.runner).unwrap().unwrap().1
    });
    let generation = Generation(generation);
    w.conn.begin(true).unwrap();
    let ping = w.ping(QueueLimits::default()).unwrap().id;
    // A worker turn as the queue stores it (its lease writes a team tool grant).
    w.conn
        .execute(
            "INSERT INTO runner_commands
                 (id, runner_id, kind, payload, payload_bytes, state, created_at, deadline_at)
             VALUES ('turn-1', ?1, 'worker.turn', '{}', 2, 'pending', 0, 9000000000000)",
            [w.runner.as_str()],
        )
        .unwrap();
    w.conn.execute_batch("COMMIT").unwrap();
    let apart_lease = apart(&mut w.conn, |c| {
        commands::lease_skipping_locked(c, &w.runner, generation, 10)
    })
    .unwrap();
    assert!(apart_lease.is_none(), "{apart_lease:?}");
    assert_eq!(
        w.state(&ping),
        CommandState::Pending,
        "nothing leased apart"
    );
    w.conn.begin(true).unwrap();
    let leased = commands::lease(&mut w.conn, &w.runner, generation, 10).unwrap();
    w.conn.execute_batch("COMMIT").unwrap();
    assert_eq!(leased.len(), 2);
}
