//! `yy store migrate`: moves a stopped control plane's state between its embedded SQLite
//! file and PostgreSQL, or between two databases of a kind (docs/postgres.md, "Moving a
//! deployment"; the copying is [`crate::server::store::transfer`]).

use std::path::PathBuf;
use std::time::Instant;

use clap::{ArgGroup, Args, Subcommand};
use serde_json::json;

use crate::api::words::plural;
use crate::backup::{Siblings, journal, lock::DirLock};
use crate::error::CliError;
use crate::output;
use crate::server::store::pg;
use crate::server::store::transfer::{
    self, BlobDirs, BlobPlace, Endpoint, Mode, Report, TransferError,
};

#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(subcommand)]
    pub command: StoreCommand,
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy a stopped control plane's database and artifact files into an empty database
    /// (SQLite or PostgreSQL), then read the copy back and compare every table
    Migrate(MigrateArgs),
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("source").required(true).args(["from", "from_env"])))]
#[command(group(ArgGroup::new("target").required(true).args(["to", "to_env"])))]
pub struct MigrateArgs {
    /// The database to copy: sqlite:DATA_DIR (or sqlite:DATA_DIR/yy.db), or PostgreSQL at
    /// postgres://USER@HOST:PORT/NAME (or `host=... dbname=...`). A password goes in an
    /// environment variable (--from-env), never on the command line
    #[arg(long, value_name = "SRC")]
    pub from: Option<String>,
    /// Take SRC from the environment variable VAR (e.g. YY_DATABASE), which may hold a
    /// password
    #[arg(long, value_name = "VAR")]
    pub from_env: Option<String>,
    /// The database to fill, written as SRC is; it is created or migrated, and must hold
    /// no data
    #[arg(long, value_name = "DST")]
    pub to: Option<String>,
    /// Take DST from the environment variable VAR, which may hold a password
    #[arg(long, value_name = "VAR")]
    pub to_env: Option<String>,
    /// The source's artifact files (`yy serve --blob-dir`) [default for sqlite:
    /// DATA_DIR/artifacts; for PostgreSQL: the bytes are in its database]
    #[arg(long, value_name = "DIR")]
    pub from_blob_dir: Option<PathBuf>,
    /// Where the artifact files go [default for sqlite: DATA_DIR/artifacts; for PostgreSQL:
    /// into its database, as `yy serve --database` keeps them without --blob-dir]. The
    /// same directory as the source's: nothing is copied
    #[arg(long, value_name = "DIR")]
    pub to_blob_dir: Option<PathBuf>,
    /// Print every table's figures as JSON
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: StoreArgs) -> anyhow::Result<()> {
    match args.command {
        StoreCommand::Migrate(a) => migrate(a).await,
    }
}

/// The exit code of a failed transfer (docs/cli.md).
pub fn cli(e: TransferError) -> anyhow::Error {
    CliError::new(crate::error::transfer_exit(&e), e.to_string()).into()
}

/// The endpoint given by `flag` (or read from the environment variable of `env_flag`).
fn endpoint(
    value: Option<&str>,
    env: Option<&str>,
    flag: &str,
    env_flag: &str,
) -> Result<Endpoint, CliError> {
    let (spec, from_env) = match (value, env) {
        (Some(v), _) => (v.to_string(), false),
        (None, Some(var)) => match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => (v, true),
            _ => {
                return Err(CliError::usage(format!(
                    "{env_flag} {var}: the environment variable {var} is not set"
                )));
            }
        },
        (None, None) => unreachable!("clap requires one of them"),
    };
    let e = Endpoint::parse(&spec).map_err(|e| CliError::usage(format!("{flag} {e}")))?;
    if let Endpoint::Postgres(url) = &e
        && !from_env
        && pg::redacted(url) != *url
    {
        return Err(CliError::usage(format!(
            "{flag} holds a password, which every user of this host can read in the process list: put the URL in an environment variable and pass {env_flag} VAR instead"
        )));
    }
    Ok(e)
}

/// Where a side keeps its artifact bytes: the flag's directory, else a SQLite side's
/// default directory, else (PostgreSQL) its database, as `yy serve` does.
fn blob_place(given: Option<PathBuf>, side: &Endpoint) -> BlobPlace {
    match (given, side) {
        (Some(dir), _) => BlobPlace::Dir(dir),
        (None, Endpoint::Sqlite(dir)) => BlobPlace::Dir(transfer::default_blob_dir(dir)),
        (None, Endpoint::Postgres(_)) => BlobPlace::Database,
    }
}

/// A SQLite side's data directory, held exclusively (so `yy serve` cannot run on it, and
/// a running one makes this refuse), with an interrupted restore rolled back first.
fn hold(side: &Endpoint) -> anyhow::Result<Option<DirLock>> {
    let Endpoint::Sqlite(dir) = side else {
        return Ok(None);
    };
    let s = Siblings::of(dir).map_err(super::backup::cli)?;
    let (lock, said) = journal::maintain(
        &s,
        &format!(
            "{} is in use (a yy serve, yy admin or yy backup create holds it): stop it first",
            s.dir.display()
        ),
    )
    .map_err(super::backup::cli)?;
    if let Some(said) = said {
        eprintln!("note: {said}");
    }
    Ok(Some(lock))
}

fn same_place(a: &Endpoint, b: &Endpoint) -> bool {
    match (a, b) {
        (Endpoint::Sqlite(x), Endpoint::Sqlite(y)) => {
            let canon = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
            canon(x) == canon(y)
        }
        (Endpoint::Postgres(x), Endpoint::Postgres(y)) => x == y,
        _ => false,
    }
}

async fn migrate(a: MigrateArgs) -> anyhow::Result<()> {
    let from = endpoint(
        a.from.as_deref(),
        a.from_env.as_deref(),
        "--from",
        "--from-env",
    )?;
    let to = endpoint(a.to.as_deref(), a.to_env.as_deref(), "--to", "--to-env")?;
    if same_place(&from, &to) {
        return Err(CliError::usage(format!(
            "--from and --to both name {}: give another database to copy into",
            from.describe()
        ))
        .into());
    }
    let started = Instant::now();
    let dirs = BlobDirs {
        from: blob_place(a.from_blob_dir, &from),
        to: blob_place(a.to_blob_dir, &to),
    };
    let (shown_from, shown_to) = (from.describe(), to.describe());
    let report = tokio::task::spawn_blocking(move || -> anyhow::Result<Report> {
        if let Endpoint::Sqlite(dir) = &from
            && !crate::server::store::db_path(dir).is_file()
        {
            return Err(cli(TransferError::NotFound(format!(
                "{} does not exist: give the data directory of a yy control plane",
                from.describe()
            ))));
        }
        let _source_lock = hold(&from)?;
        let _target_lock = hold(&to)?;
        let source = from.open_source().map_err(cli)?;
        transfer::check_version(&source, &from.describe()).map_err(cli)?;
        transfer::check_no_replica(&source, &from.describe()).map_err(cli)?;
        let target = to.open_target().map_err(cli)?;
        transfer::transfer(&source, &target, &to.describe(), Mode::Empty, Some(&dirs)).map_err(cli)
    })
    .await??;
    print(&report, &shown_from, &shown_to, started, a.json)
}

fn print(r: &Report, from: &str, to: &str, started: Instant, as_json: bool) -> anyhow::Result<()> {
    let seconds = started.elapsed().as_secs_f64();
    if as_json {
        return output::json(&json!({
            "from": from,
            "to": to,
            "schema_version": r.schema_version,
            "rows": r.rows,
            "tables": r.tables,
            "artifacts": r.artifacts,
            "seconds": seconds,
        }));
    }
    let rows = r
        .tables
        .iter()
        .map(|s| {
            vec![
                s.table.clone(),
                s.rows.to_string(),
                s.sha256[..12].to_string(),
            ]
        })
        .collect();
    output::print(&output::table(&["table", "rows", "sha256"], rows))?;
    let files = match &r.artifacts {
        Some(c) if c.same_directory => {
            format!("; the artifact files stay in {} (the same directory)", c.to)
        }
        Some(c) => format!(
            "; {} ({}) copied to {} and checked",
            plural(c.files, "artifact file", "artifact files"),
            super::backup::human_bytes(c.bytes),
            c.to
        ),
        None => String::new(),
    };
    output::print(&format!(
        "migrated {} in {} from {from} to {to} (schema {}) in {seconds:.1}s; every table read back with the same rows and SHA-256{files}",
        plural(r.rows, "row", "rows"),
        plural(r.tables.len(), "table", "tables"),
        r.schema_version
    ))?;
    Ok(())
}
