//! Transfers between real stores: the test world (SQLite in memory, or PostgreSQL under
//! `YY_TEST_STORE_POSTGRES`) into SQLite files, and through PostgreSQL when it is there.

use super::*;
use crate::server::store::tests::{POSTGRES_ENV, world};

fn sqlite_target(dir: &Path) -> (Endpoint, Store) {
    let e = Endpoint::Sqlite(dir.to_path_buf());
    let store = e.open_target().unwrap();
    (e, store)
}

/// The figures of every table of `db`, in its own order.
fn sums_of(db: &Db) -> Vec<Sum> {
    tables::read(db)
        .unwrap()
        .iter()
        .map(|t| {
            let mut s = rows::scan(db, t, |_| Ok(())).unwrap();
            s.counter = rows::counter(db, t).unwrap();
            s
        })
        .collect()
}

#[test]
fn a_copy_reads_back_as_its_source_and_a_filled_target_is_refused() {
    let w = world();
    w.conn
        .execute(
            "INSERT INTO audit_log (at, account_id, action, target, detail) VALUES (1, ?1, 'x', '1', '{}')",
            [&w.account],
        )
        .unwrap();
    let t = tempfile::tempdir().unwrap();
    let (a, store) = sqlite_target(&t.path().join("a"));
    let report = transfer(&w.conn, &store, &a.describe(), Mode::Empty, None).unwrap();
    assert_eq!(report.schema_version, LATEST_VERSION);
    assert!(report.rows > 10, "{report:?}");
    let accounts = report
        .tables
        .iter()
        .find(|s| s.table == "accounts")
        .unwrap();
    assert_eq!(accounts.rows, 1);
    let audit = report
        .tables
        .iter()
        .find(|s| s.table == "audit_log")
        .unwrap();
    assert_eq!((audit.rows, audit.counter), (1, Some(1)));

    // Again into the same target: refused, and nothing changes.
    let before = store
        .transaction(|db| Ok::<_, TransferError>(sums_of(db)))
        .unwrap();
    let e = transfer(&w.conn, &store, &a.describe(), Mode::Empty, None).unwrap_err();
    assert!(matches!(e, TransferError::NotEmpty(_)), "{e}");
    assert!(e.to_string().contains("accounts (1)"), "{e}");
    let after = store
        .transaction(|db| Ok::<_, TransferError>(sums_of(db)))
        .unwrap();
    assert_eq!(before, after);

    // From the copy into a third database: the same figures, the server's identity too.
    let source = a.open_source().unwrap();
    check_version(&source, "a").unwrap();
    check_no_replica(&source, "a").unwrap();
    let (b, second) = sqlite_target(&t.path().join("b"));
    let again = transfer(&source, &second, &b.describe(), Mode::Empty, None).unwrap();
    assert_eq!(again.tables, report.tables);
    let identity = |s: &Store| {
        s.transaction(|db| Ok::<_, TransferError>(crate::server::store::server_identity(db)))
            .unwrap()
    };
    assert_eq!(identity(&store), identity(&second));
    assert!(identity(&second).is_some());

    // A restore replaces whatever the target held.
    let (c, third) = sqlite_target(&t.path().join("c"));
    third
        .transaction(|db| {
            crate::server::store::catalog::create_source(db, "stale", "")?;
            Ok::<_, TransferError>(())
        })
        .unwrap();
    let replaced = transfer(&source, &third, &c.describe(), Mode::Replace, None).unwrap();
    assert_eq!(replaced.replaced_rows, 1);
    assert_eq!(replaced.tables, report.tables);
}

#[test]
fn a_source_of_another_version_is_refused() {
    let t = tempfile::tempdir().unwrap();
    let (a, store) = sqlite_target(&t.path().join("a"));
    drop(store);
    let path = crate::server::store::db_path(&t.path().join("a"));
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", LATEST_VERSION - 1)
        .unwrap();
    drop(conn);
    let source = a.open_source().unwrap();
    let e = check_version(&source, &a.describe()).unwrap_err();
    assert!(matches!(e, TransferError::Schema(_)), "{e}");
    assert!(e.to_string().contains("start this yy's `yy serve`"), "{e}");
}

#[test]
fn endpoints_name_a_data_directory_or_a_postgres_database() {
    assert_eq!(
        Endpoint::parse("sqlite:/var/lib/yy").unwrap(),
        Endpoint::Sqlite("/var/lib/yy".into())
    );
    assert_eq!(
        Endpoint::parse("sqlite:/var/lib/yy/yy.db").unwrap(),
        Endpoint::Sqlite("/var/lib/yy".into())
    );
    assert_eq!(
        Endpoint::parse("sqlite:yy.db").unwrap(),
        Endpoint::Sqlite(".".into())
    );
    assert!(matches!(
        Endpoint::parse("postgres://yy@db:5432/yy").unwrap(),
        Endpoint::Postgres(_)
    ));
    assert!(matches!(
        Endpoint::parse("host=/run/postgresql dbname=yy").unwrap(),
        Endpoint::Postgres(_)
    ));
    for bad in ["sqlite:", "/var/lib/yy", "mysql://db/yy"] {
        assert!(Endpoint::parse(bad).is_err(), "{bad}");
    }
    let e = Endpoint::parse("postgres://yy:s3cret@db:bad/yy").unwrap_err();
    assert!(!e.to_string().contains("s3cret"), "{e}");
}

/// SQLite to PostgreSQL and back, in a schema of its own in the scratch database.
#[test]
fn a_round_trip_through_postgres_changes_nothing() {
    let Ok(url) = std::env::var(POSTGRES_ENV) else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let (a, store) = sqlite_target(&t.path().join("a"));
    let w = world();
    transfer(&w.conn, &store, &a.describe(), Mode::Empty, None).unwrap();
    drop(store);
    let original = a.open_source().unwrap();

    let schema = format!("m_{}", uuid::Uuid::new_v4().simple());
    let admin = pg::conn::PgConn::connect(&url).unwrap();
    admin
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let sep = if url.contains('?') { '&' } else { '?' };
    let pg_url = format!("{url}{sep}options=-csearch_path%3D{schema}");
    let pg_side = Endpoint::Postgres(pg_url);
    let pg_store = pg_side.open_target().unwrap();
    let there = transfer(&original, &pg_store, "pg", Mode::Empty, None).unwrap();
    drop(pg_store);

    let from_pg = pg_side.open_source().unwrap();
    check_version(&from_pg, "pg").unwrap();
    let (b, back) = sqlite_target(&t.path().join("b"));
    let again = transfer(&from_pg, &back, &b.describe(), Mode::Empty, None).unwrap();
    assert_eq!(again.tables, there.tables);
    drop(back);
    let final_db = b.open_source().unwrap();
    assert_eq!(sums_of(&original), sums_of(&final_db));
    drop((from_pg, w));
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .unwrap();
}
