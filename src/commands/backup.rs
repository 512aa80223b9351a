//! `yy backup create|verify`, `yy restore`, `yy runner backup|restore`: backups of a data
//! directory (see docs/backup.md and [`crate::backup`]).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;

use crate::api::words::plural;
use crate::backup::collect::{self, Created};
use crate::backup::lock::{DirLock, Mode};
use crate::backup::restore::Restored;
use crate::backup::{self, BackupError, Kind, Siblings, archive, journal};
use crate::computer::workspaces;
use crate::error::CliError;
use crate::output;
use crate::server::store::transfer;

#[derive(Debug, Args)]
pub struct BackupArgs {
    #[command(subcommand)]
    pub command: BackupCommand,
}

#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Back up the control plane's data directory into one archive (works while `yy serve`
    /// runs: the database is copied with SQLite's online backup)
    Create(CreateArgs),
    /// Check every entry of an archive against its manifest and the database's integrity;
    /// `--json` lists what it holds
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Data directory of `yy serve` [default: $XDG_DATA_HOME/yy]
    #[arg(long, value_name = "DIR", env = "YY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(flatten)]
    pub database: super::database::DatabaseArgs,
    /// With --database: the directory of the artifact files (`yy serve --blob-dir`)
    /// [default: the bytes are in the database, as `yy serve --database` keeps them without
    /// --blob-dir]
    #[arg(long, value_name = "DIR")]
    pub blob_dir: Option<PathBuf>,
    #[command(flatten)]
    pub archive: ArchiveOut,
}

/// Where `backup create` and `runner backup` write, and how they report.
#[derive(Debug, Args)]
pub struct ArchiveOut {
    /// The archive to write (written to a temporary file, synced, then renamed)
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Replace FILE if it exists
    #[arg(long)]
    pub force: bool,
    /// Print the summary as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The archive to check
    pub file: PathBuf,
    /// Print the archive's manifest and the checks as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The archive to restore (from `yy backup create`)
    pub file: PathBuf,
    /// Data directory to restore into; it need not exist [default: $XDG_DATA_HOME/yy]
    #[arg(long, value_name = "DIR", env = "YY_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Restore a backup of another server (or one that does not say which server it came
    /// from): every account of this server is replaced by the archive's
    #[arg(long)]
    pub from_other_server: bool,
    #[command(flatten)]
    pub database: super::database::DatabaseArgs,
    /// With --database: where the artifact files go (`yy serve --blob-dir`) [default: into
    /// the database, as `yy serve --database` keeps them without --blob-dir]
    #[arg(long, value_name = "DIR")]
    pub blob_dir: Option<PathBuf>,
    /// Print the summary as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunnerBackupArgs {
    /// The Runner's data directory (`yy runner run --data-dir`)
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub archive: ArchiveOut,
}

#[derive(Debug, Args)]
pub struct RunnerRestoreArgs {
    /// The archive to restore (from `yy runner backup`)
    pub file: PathBuf,
    /// The Runner's data directory; it need not exist
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
    /// Print the summary as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn cli(e: BackupError) -> anyhow::Error {
    CliError::new(crate::error::backup_exit(&e), e.to_string()).into()
}

/// Runs blocking backup work off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> backup::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f).await?.map_err(cli)
}

/// What `yy serve`, `yy admin` and `yy runner run` do first with their data directory:
/// roll back an interrupted restore (and say so), then hold the directory's lock shared
/// for as long as the returned guard lives.
pub fn enter_data_dir(dir: &Path) -> anyhow::Result<DirLock> {
    let (lock, said) = journal::enter(dir).map_err(cli)?;
    if let Some(said) = said {
        tracing::warn!("{said}");
        eprintln!("note: {said}");
    }
    Ok(lock)
}

pub async fn run(args: BackupArgs) -> anyhow::Result<()> {
    match args.command {
        BackupCommand::Create(a) => create(a).await,
        BackupCommand::Verify(a) => verify(a).await,
    }
}

fn data_dir_or_default(d: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match d {
        Some(d) => Ok(d),
        None => super::context::default_data_dir(),
    }
}

pub fn human_bytes(n: u64) -> String {
    backup::bench::human_bytes(n)
}

fn print_created(c: &Created, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        return output::json(&json!({
            "path": c.path,
            "sha256": c.sha256,
            "archive_bytes": c.bytes,
            "kind": c.manifest.kind,
            "file_count": c.manifest.file_count,
            "total_bytes": c.manifest.total_bytes,
            "schema_version": c.manifest.schema_version,
            "yy_version": c.manifest.yy_version,
            "created_at": c.manifest.created_at,
            "stopped_computers": c.manifest.stopped_computers,
            "seconds": c.elapsed.as_secs_f64(),
        }));
    }
    Ok(output::print(&format!(
        "backed up {} ({}) to {} in {:.1}s; sha256 {}",
        plural(c.manifest.file_count, "file", "files"),
        human_bytes(c.manifest.total_bytes),
        c.path.display(),
        c.elapsed.as_secs_f64(),
        c.sha256
    ))?)
}

/// Where a control plane on PostgreSQL keeps its artifact bytes: in `--blob-dir`, else in
/// the database (as `yy serve --database` does).
fn place(blob_dir: Option<PathBuf>) -> transfer::BlobPlace {
    blob_dir.map_or(transfer::BlobPlace::Database, transfer::BlobPlace::Dir)
}

async fn create(a: CreateArgs) -> anyhow::Result<()> {
    let dir = data_dir_or_default(a.data_dir)?;
    let json = a.archive.json;
    if let Some(url) = a.database.postgres_url()?.map(str::to_owned) {
        let blobs = place(a.blob_dir);
        let created = blocking(move || {
            // Never inside the directory it backs up.
            let inside = match &blobs {
                transfer::BlobPlace::Dir(d) => d.clone(),
                transfer::BlobPlace::Database => dir,
            };
            let out = collect::check_output(&inside, &a.archive.output, a.archive.force)?;
            backup::postgres::create(&url, &blobs, &out, true)
        })
        .await?;
        return print_created(&created, json);
    }
    let created = blocking(move || {
        let out = collect::check_output(&dir, &a.archive.output, a.archive.force)?;
        let s = Siblings::of(&dir)?;
        // Shared: `yy serve` goes on; a restore cannot swap the directory meanwhile.
        let busy = || {
            BackupError::Busy(format!(
                "{} is being restored; back it up when the restore is done",
                dir.display()
            ))
        };
        let _lock = DirLock::try_take(&s, Mode::Shared)?.ok_or_else(busy)?;
        if s.journal().exists() {
            return Err(busy());
        }
        collect::create(Kind::ControlPlane, &s.dir, &out, vec![], true)
    })
    .await?;
    print_created(&created, json)
}

/// A sink that checks each database of the archive: copied to a private temporary file
/// and run through `PRAGMA integrity_check`.
struct DbCheck {
    current: Option<(std::fs::File, collect::TempPath)>,
    checked: Vec<serde_json::Value>,
    schema: Option<i64>,
}

impl archive::Sink for DbCheck {
    fn dir(&mut self, _: &backup::manifest::Entry) -> backup::Result<()> {
        Ok(())
    }
    fn symlink(&mut self, _: &backup::manifest::Entry, _: &[u8]) -> backup::Result<()> {
        Ok(())
    }
    fn file_start(&mut self, e: &backup::manifest::Entry) -> backup::Result<()> {
        if !collect::is_database(&e.path) {
            return Ok(());
        }
        use std::os::unix::fs::OpenOptionsExt;
        let path =
            std::env::temp_dir().join(format!("yy-verify-{}-{}", std::process::id(), e.path));
        let _ = std::fs::remove_file(&path);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|err| backup::io_error("creating", &path, err))?;
        self.current = Some((f, collect::TempPath(path)));
        Ok(())
    }
    fn file_data(&mut self, chunk: &[u8]) -> backup::Result<()> {
        use std::io::Write;
        if let Some((f, p)) = &mut self.current {
            f.write_all(chunk)
                .map_err(|e| backup::io_error("writing", &p.0, e))?;
        }
        Ok(())
    }
    fn file_end(&mut self, e: &backup::manifest::Entry) -> backup::Result<()> {
        let Some((f, p)) = self.current.take() else {
            return Ok(());
        };
        drop(f);
        let version = collect::check_database_file(&p.0)
            .map_err(|err| BackupError::Corrupt(format!("{} in the archive: {err}", e.path)))?;
        if e.path == "yy.db" {
            self.schema = Some(version);
        }
        self.checked.push(json!({
            "path": e.path,
            "integrity_check": "ok",
            "user_version": version,
        }));
        Ok(())
    }
}

async fn verify(a: VerifyArgs) -> anyhow::Result<()> {
    let path = a.file.clone();
    let (opened_manifest, len, sha, checked) = blocking(move || {
        let mut opened = archive::open(&path)?;
        let progress = backup::progress::Progress::new(
            "verify",
            opened.manifest.total_bytes,
            opened.manifest.file_count,
        );
        let mut sink = DbCheck {
            current: None,
            checked: vec![],
            schema: None,
        };
        let sha = opened.read_all(&mut sink, &progress)?;
        progress.finish();
        let m = opened.manifest.clone();
        if m.kind == Kind::ControlPlane && sink.schema != Some(m.schema_version) {
            return Err(BackupError::Corrupt(format!(
                "{}: the database's schema version ({:?}) is not the manifest's ({})",
                path.display(),
                sink.schema,
                m.schema_version
            )));
        }
        Ok((m, opened.len, sha, sink.checked))
    })
    .await?;
    let m = opened_manifest;
    if a.json {
        return output::json(&json!({
            "ok": true,
            "path": a.file,
            "sha256": sha,
            "archive_bytes": len,
            "format": m.format,
            "kind": m.kind,
            "yy_version": m.yy_version,
            "schema_version": m.schema_version,
            "created_at": m.created_at,
            "hostname": m.hostname,
            "source": m.source,
            "server_id": m.server_id,
            "file_count": m.file_count,
            "total_bytes": m.total_bytes,
            "stopped_computers": m.stopped_computers,
            "databases": checked,
            "entries": m.entries,
        }));
    }
    output::print(&format!(
        "ok: {} is a {} backup of {} on {}, made {} by yy {} (schema {}): {} ({}), every SHA-256 and {} check out; sha256 {}",
        a.file.display(),
        m.kind.as_str(),
        m.source,
        m.hostname,
        m.created_at,
        m.yy_version,
        m.schema_version,
        plural(m.file_count, "file", "files"),
        human_bytes(m.total_bytes),
        plural(checked.len(), "database", "databases"),
        sha
    ))?;
    Ok(())
}

/// What every restore's JSON says of the archive it restored.
fn restored_fields(
    m: &backup::manifest::Manifest,
    sha256: &str,
    migrated: Option<(i64, i64)>,
    elapsed: std::time::Duration,
) -> serde_json::Map<String, serde_json::Value> {
    let fields = json!({
        "sha256": sha256,
        "kind": m.kind,
        "file_count": m.file_count,
        "total_bytes": m.total_bytes,
        "schema_version": m.schema_version,
        "migrated_to": migrated.map(|(_, to)| to),
        "created_at": m.created_at,
        "seconds": elapsed.as_secs_f64(),
    });
    match fields {
        serde_json::Value::Object(map) => map,
        _ => unreachable!("an object literal"),
    }
}

fn migrated_words(migrated: Option<(i64, i64)>) -> String {
    migrated
        .map(|(a, b)| format!(", database migrated from schema {a} to {b}"))
        .unwrap_or_default()
}

fn print_restored(r: &Restored, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        let mut out = restored_fields(&r.manifest, &r.sha256, r.migrated, r.elapsed);
        out.insert("data_dir".into(), json!(r.target));
        out.insert("old_copy".into(), json!(r.old_copy));
        out.insert("log".into(), json!(r.log));
        return output::json(&out);
    }
    let kept = match &r.old_copy {
        Some(o) => format!("the data from before is in {}", o.display()),
        None => "the directory was new".into(),
    };
    let migrated = migrated_words(r.migrated);
    Ok(output::print(&format!(
        "restored {} ({}) into {} in {:.1}s{migrated}; {kept}; sha256 {}; log {}",
        plural(r.manifest.file_count, "file", "files"),
        human_bytes(r.manifest.total_bytes),
        r.target.display(),
        r.elapsed.as_secs_f64(),
        r.sha256,
        r.log.display()
    ))?)
}

fn print_restored_postgres(r: &backup::postgres::Restored, as_json: bool) -> anyhow::Result<()> {
    let t = &r.report;
    if as_json {
        let mut out = restored_fields(&r.manifest, &r.sha256, r.migrated, r.elapsed);
        out.insert("database".into(), json!(r.database));
        out.insert("rows".into(), json!(t.rows));
        out.insert("replaced_rows".into(), json!(t.replaced_rows));
        out.insert("tables".into(), json!(t.tables));
        out.insert("artifacts".into(), json!(t.artifacts));
        return output::json(&out);
    }
    let migrated = migrated_words(r.migrated);
    let files = match &t.artifacts {
        Some(c) if c.same_directory => String::new(),
        Some(c) if c.files > 0 => format!(
            "; {} ({}) written to {}",
            plural(c.files, "artifact file", "artifact files"),
            human_bytes(c.bytes),
            c.to
        ),
        _ => String::new(),
    };
    Ok(output::print(&format!(
        "restored {} ({}) into {} in {:.1}s{migrated}: {} in {}, in place of {}{files}; every table read back with the same rows and SHA-256; sha256 {}",
        plural(r.manifest.file_count, "file", "files"),
        human_bytes(r.manifest.total_bytes),
        r.database,
        r.elapsed.as_secs_f64(),
        plural(t.rows, "row", "rows"),
        plural(t.tables.len(), "table", "tables"),
        plural(t.replaced_rows, "row", "rows"),
        r.sha256
    ))?)
}

fn note(said: Option<String>) {
    if let Some(said) = said {
        eprintln!("note: {said}");
    }
}

pub async fn restore(a: RestoreArgs) -> anyhow::Result<()> {
    let dir = data_dir_or_default(a.data_dir)?;
    if let Some(url) = a.database.postgres_url()?.map(str::to_owned) {
        let blobs = place(a.blob_dir);
        let (file, other) = (a.file, a.from_other_server);
        let restored =
            blocking(move || backup::postgres::restore(&file, &url, &blobs, other, true)).await?;
        return print_restored_postgres(&restored, a.json);
    }
    let file = a.file;
    let other = a.from_other_server;
    let restored = blocking(move || {
        let s = Siblings::of(&dir)?;
        let (_lock, said) = journal::maintain(
            &s,
            &format!(
                "{} is in use (a yy serve, yy admin or yy backup create holds it): stop it first, a restore replaces the data under it",
                s.dir.display()
            ),
        )?;
        note(said);
        let _runners = backup::restore::lock_nested_runners(&s)?;
        backup::restore::restore(Kind::ControlPlane, &file, &s, true, other)
    })
    .await?;
    print_restored(&restored, a.json)
}

/// The maintenance lock of a Runner's data directory, with its interrupted restore rolled
/// back.
fn runner_maintenance(dir: &Path) -> backup::Result<(Siblings, DirLock)> {
    let s = Siblings::of(dir)?;
    let (lock, said) = journal::maintain(
        &s,
        &format!(
            "a yy runner run is using {}: stop it first, maintenance needs the Runner stopped",
            s.dir.display()
        ),
    )?;
    note(said);
    Ok((s, lock))
}

pub async fn runner_backup(a: RunnerBackupArgs) -> anyhow::Result<()> {
    let dir = a.data_dir.clone();
    let (s, lock) = blocking(move || {
        if !dir.join("receipts.db").is_file() {
            return Err(BackupError::NotFound(format!(
                "{} holds no receipts.db: it is not a Runner's data directory",
                dir.display()
            )));
        }
        runner_maintenance(&dir)
    })
    .await?;
    let stopped = backup::computers::stop_all(&s.dir).await.map_err(cli)?;
    let created = blocking(move || {
        let out = collect::check_output(&s.dir, &a.archive.output, a.archive.force)?;
        // Workspaces with a size limit are disk images: their files are read mounted.
        let mounted =
            workspaces::mount_for_backup(&s.dir).map_err(|e| BackupError::Io(e.to_string()))?;
        let created = collect::create(Kind::Runner, &s.dir, &out, stopped, true);
        workspaces::unmount_all(&mounted);
        drop(lock);
        created
    })
    .await?;
    print_created(&created, a.archive.json)
}

pub async fn runner_restore(a: RunnerRestoreArgs) -> anyhow::Result<()> {
    let dir = a.data_dir.clone();
    let file = a.file.clone();
    // The archive is checked before the computers are stopped for it.
    let check = file.clone();
    blocking(move || {
        let opened = archive::open(&check)?;
        if opened.manifest.kind != Kind::Runner {
            return Err(BackupError::Invalid(format!(
                "{} is a {} backup: restore it with `yy restore`",
                check.display(),
                opened.manifest.kind.as_str()
            )));
        }
        Ok(())
    })
    .await?;
    let (s, lock) = blocking(move || runner_maintenance(&dir)).await?;
    if s.dir.exists() {
        backup::computers::stop_all(&s.dir).await.map_err(cli)?;
        // A restore moves plain directories: the images go with the data from before, and
        // the Runner moves each restored workspace into a new image at its next start.
        let dir = s.dir.clone();
        blocking(move || {
            workspaces::unmount_for_restore(&dir).map_err(|e| BackupError::Io(e.to_string()))
        })
        .await?;
    }
    let restored = blocking(move || {
        let r = backup::restore::restore(Kind::Runner, &file, &s, true, false);
        drop(lock);
        r
    })
    .await?;
    print_restored(&restored, a.json)
}
