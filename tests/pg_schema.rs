//! The control plane's schema on PostgreSQL (issue 27), on a real throw-away cluster: the
//! migration runner (versions, idempotence, refusals, replicas starting at once), and
//! SQLite's and PostgreSQL's schemas read back from each database's catalog into one
//! neutral description that must be the same.

mod common;
mod logical_schema;

use std::sync::Arc;

use common::postgres::Cluster;
use logical_schema::{Schema, differences};
use tokio_postgres::Client;
use yy::server::store::pg::{self, PgError};
use yy::server::store::{LATEST_VERSION, Store, StoreError};

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// A fresh SQLite store's schema: what `yy serve` makes in its data directory.
fn sqlite_store_schema() -> Schema {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("data")).unwrap();
    store
        .call_blocking(|conn| Ok(logical_schema::sqlite::schema(conn.sqlite().unwrap())))
        .unwrap()
}

async fn server_identity(client: &Client) -> Vec<String> {
    client
        .query("SELECT id FROM server_identity", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn migrating_twice_reaches_the_latest_version_and_changes_nothing() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let mut client = connect(&cluster.url()).await;
    assert_eq!(pg::schema_version(&client).await.unwrap(), 0);
    pg::migrate(&mut client).await.unwrap();
    assert_eq!(pg::schema_version(&client).await.unwrap(), LATEST_VERSION);
    let schema = logical_schema::postgres::schema(&client).await;
    let identity = server_identity(&client).await;
    assert_eq!(identity.len(), 1, "{identity:?}");
    assert_eq!(identity[0].len(), 32, "{identity:?}");
    assert!(identity[0].chars().all(|c| c.is_ascii_hexdigit()));

    pg::migrate(&mut client).await.unwrap();
    assert_eq!(pg::schema_version(&client).await.unwrap(), LATEST_VERSION);
    assert_eq!(
        differences(
            "first",
            &schema,
            "second",
            &logical_schema::postgres::schema(&client).await
        ),
        Vec::<String>::new()
    );
    assert_eq!(server_identity(&client).await, identity);
}

/// What each PostgreSQL migration after `FIRST_VERSION` adds, taken away again, in
/// order: with these a fresh database becomes one at `FIRST_VERSION`. A new migration
/// needs its line here (the test below says so).
const UNDO: &[&str] = &[
    "DROP TABLE computer_grants",
    "ALTER TABLE agents DROP COLUMN browser",
    "DROP TABLE browser_controls",
    "ALTER TABLE turn_waits DROP COLUMN seq",
    "DROP TABLE replicas",
    "ALTER TABLE replicas DROP COLUMN peer_url, DROP COLUMN cert_sha256",
    "DROP TABLE artifact_chunks",
    "DROP INDEX runner_commands_pending_deadline;
     DROP TRIGGER runner_commands_pending_added ON runner_commands;
     DROP TRIGGER runner_commands_pending_left ON runner_commands;
     DROP TRIGGER runner_commands_pending_entered ON runner_commands;
     DROP TRIGGER runner_commands_pending_deleted ON runner_commands;
     DROP FUNCTION runner_commands_pending();
     ALTER TABLE runners DROP COLUMN pending_commands, DROP COLUMN pending_bytes",
];

#[tokio::test]
async fn an_older_database_migrates_step_by_step_to_the_fresh_schema() {
    assert_eq!(
        pg::migrate::FIRST_VERSION + UNDO.len() as i64,
        LATEST_VERSION,
        "every PostgreSQL migration needs its line in UNDO"
    );
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let mut client = connect(&cluster.url()).await;
    pg::migrate(&mut client).await.unwrap();
    let fresh = logical_schema::postgres::schema(&client).await;
    let identity = server_identity(&client).await;

    for undo in UNDO.iter().rev() {
        client.batch_execute(undo).await.unwrap();
    }
    client
        .execute(
            "UPDATE schema_version SET version = $1",
            &[&pg::migrate::FIRST_VERSION],
        )
        .await
        .unwrap();
    assert_ne!(
        differences(
            "fresh",
            &fresh,
            "old",
            &logical_schema::postgres::schema(&client).await
        ),
        Vec::<String>::new(),
        "the old database lacks what the migrations add"
    );
    pg::migrate(&mut client).await.unwrap();
    assert_eq!(pg::schema_version(&client).await.unwrap(), LATEST_VERSION);
    assert_eq!(
        differences(
            "fresh",
            &fresh,
            "migrated",
            &logical_schema::postgres::schema(&client).await
        ),
        Vec::<String>::new()
    );
    assert_eq!(server_identity(&client).await, identity, "data is kept");
}

#[tokio::test]
async fn a_newer_or_foreign_database_is_refused_and_untouched() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let mut client = connect(&cluster.url()).await;
    pg::migrate(&mut client).await.unwrap();
    client
        .execute(
            "UPDATE schema_version SET version = $1",
            &[&(LATEST_VERSION + 1)],
        )
        .await
        .unwrap();
    let before = logical_schema::postgres::schema(&client).await;
    let err = pg::migrate(&mut client).await.unwrap_err();
    assert!(
        matches!(&err, PgError::Store(StoreError::NewerSchema { found, known, .. })
            if *found == LATEST_VERSION + 1 && *known == LATEST_VERSION),
        "{err:?}"
    );
    assert!(err.to_string().contains("written by a newer yy"), "{err}");
    assert_eq!(
        pg::schema_version(&client).await.unwrap(),
        LATEST_VERSION + 1
    );
    assert!(
        differences(
            "before",
            &before,
            "after",
            &logical_schema::postgres::schema(&client).await
        )
        .is_empty()
    );

    // A database with someone else's tables and no version is not yy's to fill.
    let mut other = connect(&cluster.create_database("theirs")).await;
    other
        .batch_execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
        .await
        .unwrap();
    let err = pg::migrate(&mut other).await.unwrap_err();
    assert!(
        matches!(&err, PgError::Store(StoreError::Invalid(m)) if m.contains("no yy schema version")),
        "{err:?}"
    );
    let tables: i64 = other
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relnamespace = to_regnamespace(current_schema()) AND relkind = 'r'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 1, "the refused database was changed");

    // A role that may not create tables gets the server's reason in one line.
    let locked = cluster.create_database("locked");
    client
        .batch_execute("CREATE ROLE visitor LOGIN")
        .await
        .unwrap();
    let mut visitor = connect(&locked.replacen("yy@", "visitor@", 1)).await;
    let err = pg::migrate(&mut visitor).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message
            .starts_with("postgresql: ERROR: permission denied for schema public (SQLSTATE 42501)"),
        "{message}"
    );
    assert_eq!(message.lines().count(), 1, "{message}");
}

#[tokio::test]
async fn sqlite_and_postgres_have_one_logical_schema() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let mut client = connect(&cluster.url()).await;
    pg::migrate(&mut client).await.unwrap();
    let sqlite = sqlite_store_schema();
    let postgres = logical_schema::postgres::schema(&client).await;
    let found = differences("sqlite", &sqlite, "postgres", &postgres);
    assert!(
        found.is_empty(),
        "the schemas differ in {} ways:\n{}",
        found.len(),
        found.join("\n")
    );
    // Both were read, in every part the comparison covers, not compared empty.
    assert!(sqlite.len() >= 26, "{:?}", sqlite.keys());
    let runners = &sqlite["runners"];
    let partial = &runners.indexes["runners_one_enabled_per_source"];
    assert_eq!(partial.predicate.as_deref(), Some("disabled_atisnull"));
    assert!(partial.unique);
    assert!(
        runners.checks.contains("networkin'none','public-web'"),
        "{:?}",
        runners.checks
    );
    assert!(runners.uniques.contains(&vec!["token_hash".to_string()]));
    assert_eq!(runners.foreign_keys.len(), 1);
    assert!(sqlite["runner_commands"].columns[0].auto_increment);
    assert_eq!(sqlite["runner_commands"].triggers.len(), 4);
    assert_eq!(sqlite["session_events"].primary_key, ["session_id", "seq"]);

    // The comparison names what one side lacks: drop parts of a scratch database.
    let mut scratch = connect(&cluster.create_database("scratch")).await;
    pg::migrate(&mut scratch).await.unwrap();
    scratch
        .batch_execute(
            "ALTER TABLE runners DROP COLUMN image_note;
             DROP INDEX turn_waits_session;
             ALTER TABLE accounts DROP CONSTRAINT accounts_admin_check;
             ALTER TABLE computers ALTER COLUMN network DROP DEFAULT;
             ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_token_hash_key;
             DROP TRIGGER runner_commands_pending_deleted ON runner_commands;",
        )
        .await
        .unwrap();
    let found = differences(
        "sqlite",
        &sqlite,
        "postgres",
        &logical_schema::postgres::schema(&scratch).await,
    );
    let expected = [
        "table runners: column image_note: only in sqlite",
        "table turn_waits: index turn_waits_session: only in sqlite",
        "table accounts: check \"adminin0,1\": only in sqlite",
        "table computers: column network: sqlite text NOT NULL DEFAULT 'none', postgres text NOT NULL",
        "table api_tokens: unique [\"token_hash\"]: only in sqlite",
        "table runner_commands: trigger \"runner_commands_pending_deleted\": only in sqlite",
    ];
    assert_eq!(found, sorted(&expected), "{}", found.join("\n"));
}

fn sorted(lines: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_migrating_at_once_create_the_schema_once() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    const REPLICAS: usize = 4;
    let mut clients = Vec::new();
    for _ in 0..REPLICAS {
        clients.push(connect(&cluster.url()).await);
    }
    // Connected first, then released together: the migrations overlap.
    let start = Arc::new(tokio::sync::Barrier::new(REPLICAS));
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                pg::migrate(&mut client).await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().expect("a replica's migration failed");
    }
    let client = connect(&cluster.url()).await;
    assert_eq!(pg::schema_version(&client).await.unwrap(), LATEST_VERSION);
    assert_eq!(server_identity(&client).await.len(), 1);
    // Every table was made by one transaction: one creating transaction id among them.
    let creators: i64 = client
        .query_one(
            "SELECT count(DISTINCT xmin::text) FROM pg_class
             WHERE relnamespace = to_regnamespace(current_schema()) AND relkind = 'r'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(creators, 1);
}
