//! Backup and restore of a control plane on PostgreSQL (issue 27). Archives have one format
//! whatever the backend: the database goes in as the SQLite database `yy.db`, copied from
//! one snapshot (`REPEATABLE READ READ ONLY`) by the transfer of `yy store migrate`, and the
//! finished artifacts' bytes as `artifacts/ID` (from the blob directory, or written out of
//! the database's `artifact_chunks` by the same transfer). `yy backup verify`
//! reads such an archive as any other. A restore stages and verifies the archive as for a
//! data directory, then replaces the database's rows with the archive's in one transaction
//! (refused while a replica is up) and writes the artifact bytes into the blob directory, or
//! as chunks into the database.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::collect::{self, Created, Item};
use super::manifest::Manifest;
use super::{BackupError, Kind, Result, archive, io_error, restore};
use crate::server::store::transfer::{
    self, BlobDirs, BlobPlace, Endpoint, Mode, Report, TransferError,
};
use crate::server::store::{db_path, server_identity};

impl From<TransferError> for BackupError {
    fn from(e: TransferError) -> Self {
        match e {
            TransferError::Invalid(m) => BackupError::Invalid(m),
            TransferError::NotFound(m) => BackupError::NotFound(m),
            TransferError::Busy(m) | TransferError::NotEmpty(m) => BackupError::Busy(m),
            TransferError::Schema(m) | TransferError::Db(m) => BackupError::Db(m),
            TransferError::Mismatch(m) => BackupError::Corrupt(m),
            TransferError::Io(m) => BackupError::Io(m),
        }
    }
}

/// A private directory of work, removed with everything in it when dropped.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new(path: PathBuf) -> Result<WorkDir> {
        if path.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(&path).map_err(|e| io_error("removing", &path, e))?;
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| io_error("creating", &path, e))?;
        Ok(WorkDir(path))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn metadata(path: &Path) -> Result<std::fs::Metadata> {
    std::fs::metadata(path).map_err(|e| io_error("reading", path, e))
}

/// Backs up the PostgreSQL database at `url` and the artifact bytes kept in `blobs` to
/// `output` (already checked by [`collect::check_output`]). `yy serve` replicas may go on.
pub fn create(url: &str, blobs: &BlobPlace, output: &Path, show_progress: bool) -> Result<Created> {
    let started = Instant::now();
    let endpoint = Endpoint::Postgres(url.to_string());
    let shown = endpoint.describe();
    let dir = output.parent().expect("checked output");
    let name = output
        .file_name()
        .expect("checked output")
        .to_string_lossy();
    let work = WorkDir::new(dir.join(format!(".{name}.postgres-{}", std::process::id())))?;
    let source = endpoint.open_source()?;
    transfer::check_version(&source, &shown)?;
    let mut files = transfer::blobs::ready(&source)?;
    files.sort_by(|a, b| a.id.cmp(&b.id));
    let snapshot = Endpoint::Sqlite(work.0.clone());
    let store = snapshot.open_target()?;
    // Bytes in the database are written out as files beside the snapshot, from the same
    // snapshot: the archive holds files whatever the backend kept.
    let (blob_dir, dirs) = match blobs {
        BlobPlace::Dir(dir) => (dir.clone(), None),
        BlobPlace::Database => {
            let dir = work.0.join("artifacts");
            let dirs = BlobDirs {
                from: BlobPlace::Database,
                to: BlobPlace::Dir(dir.clone()),
            };
            (dir, Some(dirs))
        }
    };
    transfer::transfer(
        &source,
        &store,
        &snapshot.describe(),
        Mode::Empty,
        dirs.as_ref(),
    )?;
    drop((store, source));
    let blob_dir = blob_dir.as_path();

    let db = db_path(&work.0);
    let mut items = vec![Item::Database(
        collect::entry("yy.db".into(), &metadata(&db)?),
        db,
    )];
    if !files.is_empty() {
        items.push(Item::Dir(collect::entry(
            "artifacts".into(),
            &metadata(blob_dir)?,
        )));
    }
    for f in files {
        let path = blob_dir.join(&f.id);
        let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => BackupError::NotFound(format!(
                "the file of artifact {} is missing: {} does not exist (is --blob-dir the directory `yy serve --blob-dir` names?)",
                f.id,
                path.display()
            )),
            _ => io_error("reading", &path, e),
        })?;
        if meta.len() != f.size {
            return Err(BackupError::Corrupt(format!(
                "{} has {} bytes, its artifact's row records {}",
                path.display(),
                meta.len(),
                f.size
            )));
        }
        let mut e = collect::entry(format!("artifacts/{}", f.id), &meta);
        e.size = f.size;
        items.push(Item::Checked(e, path, f.sha256));
    }
    collect::write(
        Kind::ControlPlane,
        items,
        shown,
        output,
        vec![],
        show_progress,
        started,
    )
}

/// What [`restore`] did.
pub struct Restored {
    pub manifest: Manifest,
    pub sha256: String,
    /// The database, without its password.
    pub database: String,
    pub report: Report,
    /// (from, to) when the archive's database was migrated to this yy's schema first.
    pub migrated: Option<(i64, i64)>,
    pub elapsed: Duration,
}

/// Restores the control plane backup `archive` into the PostgreSQL database at `url`, and
/// its artifact bytes into `blobs`.
pub fn restore(
    archive_path: &Path,
    url: &str,
    blobs: &BlobPlace,
    from_other_server: bool,
    show_progress: bool,
) -> Result<Restored> {
    let started = Instant::now();
    let mut opened = archive::open(archive_path)?;
    let m = opened.manifest.clone();
    restore::check_manifest(Kind::ControlPlane, archive_path, &m)?;
    let target = Endpoint::Postgres(url.to_string());
    let shown = target.describe();
    let store = target.open_target()?;
    // Before the archive is read: a replica up, or another server's data, refuses it.
    let (filled, here) = store.transaction(|db| {
        transfer::check_no_replica(db, &shown)?;
        let filled = transfer::filled_tables(db)?;
        Ok::<_, TransferError>((filled, server_identity(db)))
    })?;
    if !from_other_server && !filled.is_empty() {
        restore::same_server(archive_path, &m, here, &shown)?;
    }
    let staging = WorkDir::new(std::env::temp_dir().join(format!(
        "yy-restore-{}-{}",
        std::process::id(),
        super::stamp_now()
    )))?;
    let sha256 = restore::stage(
        &mut opened,
        &staging.0,
        &m,
        Kind::ControlPlane,
        show_progress,
    )?;
    let migrated = restore::migrate(&staging.0)?;
    let source_side = Endpoint::Sqlite(staging.0.clone());
    let source = source_side.open_source()?;
    transfer::check_version(&source, &source_side.describe())?;
    let dirs = BlobDirs {
        from: BlobPlace::Dir(staging.0.join("artifacts")),
        to: blobs.clone(),
    };
    let report = transfer::transfer(&source, &store, &shown, Mode::Replace, Some(&dirs))?;
    Ok(Restored {
        manifest: m,
        sha256,
        database: shown,
        report,
        migrated,
        elapsed: started.elapsed(),
    })
}
