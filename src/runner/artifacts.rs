//! Files between this Runner and the control plane, through the machine API: uploads in
//! verified chunks that resume after an interruption (a computer's `computer_export`, a
//! `fetch`), and verified downloads of the files a user attached to a turn.

use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::client::{MachineClient, MachineError};
use crate::api::artifacts::{
    self, ArtifactRef, ArtifactState, AttachmentRef, CHUNK_BYTES, MAX_ARTIFACT_BYTES,
    MAX_EXPORTS_PER_TURN, UploadBegin, UploadState, human_size,
};
use crate::computer::host_read::{self, Snapshot};
use crate::computer::protocol::{ExecParams, FileKind};
use crate::computer::session::GuestSession;

/// Tries of one upload before it fails (each resumes from the last verified chunk).
const ATTEMPTS: u32 = 5;
/// Where the guest's attachments go, relative to its working directory.
pub const ATTACH_DIR: &str = "attachments";
/// Where a subtask's input artifacts go, relative to the guest's working directory.
pub const INPUTS_DIR: &str = "inputs";

/// The transfers of one running command.
#[derive(Clone)]
pub struct Transfer {
    pub client: MachineClient,
    pub generation: i64,
    pub command_id: String,
    /// A private directory for files in transit.
    pub spool: PathBuf,
}

impl Transfer {
    /// A private temporary file in the spool directory, removed when dropped.
    fn spool_file(&self) -> Result<(Spooled, std::fs::File), String> {
        crate::fsutil::create_private_dir(&self.spool)
            .map_err(|e| format!("cannot create {}: {e}", self.spool.display()))?;
        let path = self.spool.join(uuid::Uuid::new_v4().simple().to_string());
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok((Spooled(path), file))
    }

    /// Uploads `file` as artifact `name`, hashing it while its chunks are on their way
    /// (the finish carries the SHA-256); an interruption resumes from the last chunk the
    /// control plane verified (or starts over when it kept nothing). A file that changes
    /// during the upload is refused by the control plane and sent again.
    pub async fn upload(
        &self,
        file: &Path,
        name: &str,
        source_path: Option<String>,
    ) -> Result<ArtifactRef, String> {
        let size = std::fs::metadata(file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?
            .len();
        self.upload_file(file, name, source_path, size, None).await
    }

    /// Uploads `file` of `size` bytes; `sha256` when it is known already (a spool file
    /// this Runner wrote and nobody else can change), announced with the begin.
    async fn upload_file(
        &self,
        file: &Path,
        name: &str,
        source_path: Option<String>,
        size: u64,
        sha256: Option<String>,
    ) -> Result<ArtifactRef, String> {
        if size > MAX_ARTIFACT_BYTES {
            return Err(too_large(name, size));
        }
        let begin = UploadBegin {
            command_id: self.command_id.clone(),
            name: name.to_string(),
            size,
            sha256,
            chunk_size: CHUNK_BYTES,
            source_path,
        };
        let mut last = String::new();
        for attempt in 0..ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
            match self.try_upload(file, &begin).await {
                Ok((id, sha256)) => {
                    return Ok(ArtifactRef {
                        artifact_id: id,
                        name: name.to_string(),
                        size,
                        sha256,
                    });
                }
                Err(e) if retryable(&e) => {
                    tracing::warn!(error = %e, attempt, "artifact upload interrupted; resuming");
                    last = e.to_string();
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Err(format!(
            "the upload of {name} failed {ATTEMPTS} times; last: {last}"
        ))
    }

    /// One attempt: the artifact's id and SHA-256.
    async fn try_upload(
        &self,
        file: &Path,
        begin: &UploadBegin,
    ) -> Result<(String, String), MachineError> {
        let cannot_read = |e: std::io::Error| local(format!("cannot read {}: {e}", file.display()));
        let mut state = self.client.artifact_begin(self.generation, begin).await?;
        let f = std::fs::File::open(file)
            .map(Arc::new)
            .map_err(cannot_read)?;
        let before = Stamp::of(&f).map_err(cannot_read)?;
        if before.0 != begin.size {
            return Err(local(format!(
                "{} changed while it was being sent ({}, then {}); try again when it stays put",
                file.display(),
                crate::api::words::plural(begin.size, "byte", "bytes"),
                before.0
            )));
        }
        // Without an announced SHA-256 the file is hashed as its chunks are read, on a
        // blocking thread while the chunk travels.
        let mut hashing = begin.sha256.is_none().then(WholeHash::default);
        // The next chunk is read (and its CRC taken) while the one before is on its way.
        let mut ahead: Option<(u64, ChunkRead)> = None;
        while state.state == ArtifactState::Uploading && state.received < state.size {
            let n = state.next_chunk();
            let read = match ahead.take() {
                Some((k, read)) if k == n => read,
                _ => read_chunk(&f, &state, n),
            };
            let (data, crc) = read
                .await
                .map_err(|e| local(e.to_string()))?
                .map_err(cannot_read)?;
            let data = bytes::Bytes::from(data);
            let following = n + 1;
            if following * state.chunk_size < state.size {
                ahead = Some((following, read_chunk(&f, &state, following)));
            }
            let hashed = hashing.take().map(|h| {
                let (f, data, offset) = (f.clone(), data.clone(), n * state.chunk_size);
                tokio::task::spawn_blocking(move || h.advance(&f, offset, &data))
            });
            state = self
                .client
                .artifact_chunk(self.generation, &state.id, n, data, crc)
                .await?;
            if let Some(h) = hashed {
                hashing = Some(
                    h.await
                        .map_err(|e| local(e.to_string()))?
                        .map_err(cannot_read)?,
                );
            }
        }
        let sha256 = match &begin.sha256 {
            Some(sha) => sha.clone(),
            None => {
                // What was not hashed on the way (nothing, when the upload was found
                // complete) is read now.
                let h = hashing.unwrap_or_default();
                let f2 = f.clone();
                let size = state.size;
                let whole = tokio::task::spawn_blocking(move || h.finish(&f2, size))
                    .await
                    .map_err(|e| local(e.to_string()))?
                    .map_err(cannot_read)?;
                // A file that changed while it was read: the finish announces what it
                // holds now, which is not what arrived, and the upload starts over.
                if Stamp::of(&f).map_err(cannot_read)? == before {
                    whole
                } else {
                    let path = file.to_path_buf();
                    tokio::task::spawn_blocking(move || crate::fsutil::sha256_file(&path))
                        .await
                        .map_err(|e| local(e.to_string()))?
                        .map_err(cannot_read)?
                        .1
                }
            }
        };
        if state.state != ArtifactState::Ready {
            let announce = begin.sha256.is_none().then_some(sha256.as_str());
            state = self
                .client
                .artifact_finish(self.generation, &state.id, announce)
                .await?;
        }
        Ok((state.id, sha256))
    }

    /// Downloads an attachment into a spool file, checking its size and SHA-256.
    pub async fn download(&self, a: &AttachmentRef) -> Result<Vec<u8>, String> {
        let mut resp = self
            .client
            .artifact_content(self.generation, &a.artifact_id)
            .await
            .map_err(|e| format!("cannot download attachment {}: {e}", a.name))?;
        let mut data = Vec::with_capacity(a.size as usize);
        let mut hasher = Sha256::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| format!("downloading attachment {}: {e}", a.name))?
        {
            if (data.len() + chunk.len()) as u64 > a.size {
                return Err(format!("attachment {} is larger than announced", a.name));
            }
            hasher.update(&chunk);
            data.extend_from_slice(&chunk);
        }
        let got = hex::encode(hasher.finalize());
        if data.len() as u64 != a.size || got != a.sha256 {
            return Err(format!(
                "attachment {} arrived damaged ({}, SHA-256 {got}); not written",
                a.name,
                crate::api::words::plural(data.len(), "byte", "bytes")
            ));
        }
        Ok(data)
    }
}

/// What shows that a file changed: its size, inode, and change and modification times.
#[derive(PartialEq)]
struct Stamp(u64, u64, i64, i64, i64, i64);

impl Stamp {
    fn of(f: &std::fs::File) -> std::io::Result<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = f.metadata()?;
        Ok(Stamp(
            m.len(),
            m.ino(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        ))
    }
}

/// The SHA-256 of a file's first `at` bytes.
#[derive(Default)]
struct WholeHash {
    at: u64,
    hasher: Sha256,
}

impl WholeHash {
    /// Adds the chunk at `offset`, reading what lies between from the file first (a
    /// resumed upload), or starting over when the chunk lies before what was hashed.
    fn advance(mut self, f: &std::fs::File, offset: u64, data: &[u8]) -> std::io::Result<Self> {
        if offset < self.at {
            self = WholeHash::default();
        }
        self.read_up_to(f, offset)?;
        self.hasher.update(data);
        self.at += data.len() as u64;
        Ok(self)
    }

    fn read_up_to(&mut self, f: &std::fs::File, end: u64) -> std::io::Result<()> {
        let mut buf = vec![0u8; 1 << 20];
        while self.at < end {
            let n = (end - self.at).min(buf.len() as u64) as usize;
            f.read_exact_at(&mut buf[..n], self.at)?;
            self.hasher.update(&buf[..n]);
            self.at += n as u64;
        }
        Ok(())
    }

    /// The hex SHA-256 of the first `size` bytes.
    fn finish(mut self, f: &std::fs::File, size: u64) -> std::io::Result<String> {
        if self.at > size {
            self = WholeHash::default();
        }
        self.read_up_to(f, size)?;
        Ok(hex::encode(self.hasher.finalize()))
    }
}

/// Chunk `n` of an upload and its CRC-32, read off the runtime.
type ChunkRead = tokio::task::JoinHandle<std::io::Result<(Vec<u8>, u32)>>;

fn read_chunk(f: &Arc<std::fs::File>, state: &UploadState, n: u64) -> ChunkRead {
    let offset = n * state.chunk_size;
    let len = state.chunk_size.min(state.size.saturating_sub(offset)) as usize;
    let f = f.clone();
    tokio::task::spawn_blocking(move || {
        let mut data = vec![0u8; len];
        f.read_exact_at(&mut data, offset)?;
        let crc = crc32fast::hash(&data);
        Ok((data, crc))
    })
}

fn local(message: String) -> MachineError {
    MachineError::Api {
        status: 0,
        code: "local".into(),
        message,
    }
}

/// Worth another try from the last verified chunk: the network, a restarting server, a
/// chunk refused as corrupt or out of order, a finish that found the file damaged.
fn retryable(e: &MachineError) -> bool {
    e.is_transient() || matches!(e.code(), Some("corrupt" | "conflict"))
}

fn too_large(name: &str, size: u64) -> String {
    format!(
        "{name} is {} ({size} bytes); an artifact is at most {} MiB",
        human_size(size),
        MAX_ARTIFACT_BYTES >> 20
    )
}

/// A file in transit; removed when dropped.
struct Spooled(PathBuf);

impl Drop for Spooled {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A spool file that refuses to grow past the artifact limit (a file that grew after it
/// was looked at cannot fill the Runner's disk).
struct Capped {
    file: std::fs::File,
    written: u64,
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written += buf.len() as u64;
        if self.written > MAX_ARTIFACT_BYTES {
            return Err(std::io::Error::other(format!(
                "the file grew past {} MiB while exported",
                MAX_ARTIFACT_BYTES >> 20
            )));
        }
        self.file.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The files of one turn: its attachments and inputs in, its exports out
/// ([`computer_export`](super::tools::export)).
pub struct TurnExports {
    pub transfer: Transfer,
    done: AtomicU32,
}

impl TurnExports {
    pub fn new(transfer: Transfer) -> TurnExports {
        TurnExports {
            transfer,
            done: AtomicU32::new(0),
        }
    }

    /// Snapshots the file in the guest, streams it to the control plane and answers the
    /// model; every failure is an answer too.
    pub async fn export(&self, guest: &GuestSession, path: &str) -> Value {
        match self.try_export(guest, path).await {
            Ok(v) => v,
            Err(e) => json!({ "error": e }),
        }
    }

    async fn try_export(&self, guest: &GuestSession, path: &str) -> Result<Value, String> {
        let done = self.done.load(Ordering::SeqCst);
        if done >= MAX_EXPORTS_PER_TURN {
            return Err(format!(
                "refused: this turn already exported {done} files, the limit is {MAX_EXPORTS_PER_TURN} per turn"
            ));
        }
        let name = artifacts::sanitize_name(path)
            .ok_or_else(|| format!("{path:?} does not name a file"))?;
        let stat = guest.stat(path).await.map_err(|e| e.to_string())?.info;
        if stat.kind != FileKind::File {
            return Err(format!(
                "{path} is {}, not a regular file",
                crate::api::words::a(stat.kind.as_sql())
            ));
        }
        if stat.size > MAX_ARTIFACT_BYTES {
            return Err(format!("refused: {}", too_large(path, stat.size)));
        }
        let (spool, file) = self.transfer.spool_file()?;
        let exported = match guest.host_workspace().and_then(|w| w.open_file(path)) {
            // A plain file: copied through the workspace's bind mount on this host.
            Some((mut from, shown)) => {
                let mut to = file;
                tokio::task::spawn_blocking(move || {
                    host_read::snapshot(&mut from, &shown, &mut to, MAX_ARTIFACT_BYTES)
                })
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot export {path}: {e}"))?
            }
            // Anything else (a symlink, a file only the guest's view explains): the guest
            // agent snapshots it and streams it over its session.
            None => {
                let mut sink = Capped { file, written: 0 };
                let r = guest
                    .export(path, &mut sink)
                    .await
                    .map_err(|e| format!("cannot export {path}: {e}"))?;
                sink.flush().map_err(|e| e.to_string())?;
                Snapshot {
                    path: r.path,
                    size: r.size,
                    sha256: r.sha256,
                }
            }
        };
        self.done.fetch_add(1, Ordering::SeqCst);
        let stored = self
            .transfer
            .upload_file(
                &spool.0,
                &name,
                Some(exported.path.clone()),
                exported.size,
                Some(exported.sha256.clone()),
            )
            .await?;
        Ok(json!({
            "artifact_id": stored.artifact_id,
            "name": stored.name,
            "size": stored.size,
            "sha256": stored.sha256,
            "path": exported.path,
        }))
    }

    /// Writes the turn's attachments into the guest (under `attachments/`) before the model
    /// starts; returns the note that tells the model where they are.
    pub async fn attach(
        &self,
        guest: &GuestSession,
        attachments: &[AttachmentRef],
        cwd: &str,
    ) -> Result<Option<String>, String> {
        let lines = self.place(guest, attachments, cwd, ATTACH_DIR).await?;
        Ok(lines.map(|lines| {
            format!(
                "[The user attached {} file(s); they are in your computer:\n{lines}]",
                attachments.len()
            )
        }))
    }

    /// Writes the input artifacts of the turn's subtask into the guest (under `inputs/`)
    /// before the model starts; returns the note that tells the model where they are.
    pub async fn inputs(
        &self,
        guest: &GuestSession,
        inputs: &[AttachmentRef],
        cwd: &str,
    ) -> Result<Option<String>, String> {
        let lines = self.place(guest, inputs, cwd, INPUTS_DIR).await?;
        Ok(lines.map(|lines| {
            format!(
                "[{} file(s) for this turn are in your computer (under inputs/: your subtask's; inputs/deps/#N/: the accepted result of subtask #N it depends on; reviews/#N/: the result of subtask #N to review; results/#N/: the accepted result of subtask #N of a goal delivered to you; attachments/: files attached earlier in this conversation):\n{lines}]",
                inputs.len()
            )
        }))
    }

    /// Downloads each file (size and SHA-256 checked), writes it under its directory
    /// (`default_dir/` unless it names one) in the guest (checked again there) and returns
    /// one line per file naming its path.
    async fn place(
        &self,
        guest: &GuestSession,
        files: &[AttachmentRef],
        cwd: &str,
        default_dir: &str,
    ) -> Result<Option<String>, String> {
        if files.is_empty() {
            return Ok(None);
        }
        let mut dirs: Vec<&str> = Vec::new();
        for a in files {
            let dir = a.dir.as_deref().unwrap_or(default_dir);
            if !input_dir_is_plain(dir) {
                return Err(format!(
                    "refused: {dir:?} is not a plain directory in the workspace"
                ));
            }
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        let mkdir = ExecParams {
            argv: Some(
                ["mkdir", "-p", "--"]
                    .into_iter()
                    .chain(dirs.iter().copied())
                    .map(String::from)
                    .collect(),
            ),
            timeout_ms: Some(30_000),
            ..ExecParams::default()
        };
        let made = guest.exec(mkdir, None).await.map_err(|e| e.to_string())?;
        if made.exit_code != Some(0) {
            return Err(format!(
                "cannot create {} in the computer: {}",
                dirs.join(", "),
                made.stderr.trim()
            ));
        }
        let mut lines = Vec::new();
        let mut used: Vec<String> = Vec::new();
        for a in files {
            let dir = a.dir.as_deref().unwrap_or(default_dir);
            let name = artifacts::sanitize_name(&a.name)
                .ok_or_else(|| format!("file name {:?} is not usable", a.name))?;
            // Two files of one name both arrive: the later one is prefixed by its id.
            let name = if used.contains(&format!("{dir}/{name}")) {
                format!("{}-{name}", &a.artifact_id[..a.artifact_id.len().min(8)])
            } else {
                name
            };
            used.push(format!("{dir}/{name}"));
            let data = self.transfer.download(a).await?;
            let rel = format!("{dir}/{name}");
            let written = guest
                .write(&rel, &data, Some(0o644))
                .await
                .map_err(|e| format!("cannot write {name} into the computer: {e}"))?;
            if written.sha256 != a.sha256 {
                return Err(format!("{name} was damaged on its way into the computer"));
            }
            lines.push(format!(
                "- {}/{rel} ({}, sha256 {})",
                cwd.trim_end_matches('/'),
                crate::api::words::plural(a.size, "byte", "bytes"),
                a.sha256
            ));
        }
        Ok(Some(lines.join("\n")))
    }
}

/// A directory an input may go to: relative, of plain names (`reviews/#2`), never `..`.
fn input_dir_is_plain(dir: &str) -> bool {
    !dir.is_empty()
        && dir.len() <= 64
        && dir.split('/').all(|c| {
            !c.is_empty()
                && c != "."
                && c != ".."
                && c.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || "#-_.".contains(ch))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_goes_only_to_a_plain_directory_of_the_workspace() {
        for ok in ["inputs", "reviews/#2", "inputs/deps/#10"] {
            assert!(input_dir_is_plain(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc",
            "../x",
            "a/../../b",
            "a//b",
            "a/./b",
            "a b",
            "a\nb",
        ] {
            assert!(!input_dir_is_plain(bad), "{bad}");
        }
    }

    #[test]
    fn the_whole_hash_reads_what_it_skipped_and_restarts_when_sent_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let want = hex::encode(Sha256::digest(&bytes));
        // In order.
        let h = WholeHash::default()
            .advance(&f, 0, &bytes[..4000])
            .unwrap()
            .advance(&f, 4000, &bytes[4000..])
            .unwrap();
        assert_eq!(h.finish(&f, 10_000).unwrap(), want);
        // A resumed upload: the first chunks were sent by an earlier attempt.
        let h = WholeHash::default()
            .advance(&f, 8000, &bytes[8000..])
            .unwrap();
        assert_eq!(h.finish(&f, 10_000).unwrap(), want);
        // The control plane asks for an earlier chunk again: the hash starts over.
        let h = WholeHash::default()
            .advance(&f, 0, &bytes[..4000])
            .unwrap()
            .advance(&f, 4000, &bytes[4000..8000])
            .unwrap()
            .advance(&f, 4000, &bytes[4000..8000])
            .unwrap();
        assert_eq!(h.finish(&f, 10_000).unwrap(), want);
        // Nothing hashed yet (an upload found complete): the file is read.
        assert_eq!(WholeHash::default().finish(&f, 10_000).unwrap(), want);
    }
}
