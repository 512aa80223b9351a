//! `yy artifact`: files exported from computers (and fetched from Runners), verified on the
//! control plane: list, show, get. Also the transfers `yy chat --attach` and
//! `yy runner fetch` use.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use sha2::{Digest, Sha256};

use super::{ById, Columns, context, print_list};
use crate::api::artifacts::{
    self, Artifact, ArtifactRef, HEADER_SHA256, MAX_ATTACH_BYTES, human_size,
};
use crate::client::Client;
use crate::error::{CliError, Exit};
use crate::output::{self, opt};

#[derive(Debug, Args)]
pub struct ArtifactArgs {
    #[command(subcommand)]
    pub command: ArtifactCommand,
}

#[derive(Debug, Subcommand)]
pub enum ArtifactCommand {
    /// List artifacts, newest first (yours; an admin sees all)
    #[command(visible_alias = "ls")]
    List {
        /// Only this session's artifacts
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Show an artifact and where it came from
    Show(ById),
    /// Download an artifact, check its SHA-256 and write it atomically
    Get {
        /// Artifact id or unique prefix
        id: String,
        /// Where to write it (`-` for stdout)
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Replace FILE if it exists
        #[arg(long)]
        force: bool,
    },
}

impl Columns for Artifact {
    const HEADERS: &'static [&'static str] = &[
        "id", "name", "size", "state", "kind", "agent", "session", "created",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.id.clone(),
            self.name.clone(),
            human_size(self.size),
            self.state.to_string(),
            self.kind.to_string(),
            opt(&self.agent),
            opt(&self.session_id),
            self.created_at.clone(),
        ]
    }
}

pub async fn run(args: ArtifactArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        ArtifactCommand::List { session, json } => {
            let list = client.artifact_list(session.as_deref()).await?;
            print_list(&list, json)
        }
        ArtifactCommand::Show(ById { id, json }) => {
            let a = client.artifact_show(&id).await?;
            let seq = a.turn_seq.map(|s| s.to_string());
            output::show(
                &a,
                json.json,
                vec![
                    ("id", a.id.clone()),
                    ("name", a.name.clone()),
                    (
                        "size",
                        format!(
                            "{} ({})",
                            human_size(a.size),
                            crate::api::words::plural(a.size, "byte", "bytes")
                        ),
                    ),
                    ("sha256", a.sha256.clone()),
                    ("state", a.state.to_string()),
                    ("kind", a.kind.to_string()),
                    ("owner", opt(&a.owner)),
                    ("agent", opt(&a.agent)),
                    ("profile", opt(&a.profile)),
                    ("session", opt(&a.session_id)),
                    ("turn", opt(&a.turn_id)),
                    ("message", opt(&seq)),
                    ("computer", opt(&a.computer_id)),
                    ("runner", opt(&a.runner_id)),
                    ("source path", opt(&a.source_path)),
                    ("created", a.created_at.clone()),
                    ("finished", opt(&a.finished_at)),
                ],
            )
        }
        ArtifactCommand::Get { id, output, force } => {
            let got = download(&client, &id, &output, force).await?;
            if output.as_os_str() != "-" {
                eprintln!(
                    "{} ({}, sha256 {}) written to {}",
                    got.name,
                    human_size(got.size),
                    got.sha256,
                    output.display()
                );
            }
            Ok(())
        }
    }
}

/// Refuses to overwrite `output` unless `force` (checked before anything is fetched).
pub fn check_output(output: &Path, force: bool) -> Result<(), CliError> {
    if output.as_os_str() != "-" && output.exists() && !force {
        return Err(CliError::usage(format!(
            "{} already exists: choose another -o FILE, or pass --force to overwrite it",
            output.display()
        )));
    }
    Ok(())
}

/// Streams artifact `id` to `output` (or stdout for `-`): the bytes go to a temporary file
/// beside it, their SHA-256 is checked against the artifact's, and only then is the file
/// fsynced and renamed into place. Progress shows on a terminal, as lines otherwise.
pub async fn download(
    client: &Client,
    id: &str,
    output: &Path,
    force: bool,
) -> anyhow::Result<Artifact> {
    check_output(output, force)?;
    let meta = client.artifact_show(id).await?;
    let known = ArtifactRef {
        artifact_id: meta.id.clone(),
        name: meta.name.clone(),
        size: meta.size,
        sha256: meta.sha256.clone(),
    };
    download_known(client, &known, output).await?;
    Ok(meta)
}

/// [`download`] of an artifact whose size and SHA-256 the caller already has (a fetch's
/// result names them), without asking for it first.
pub async fn download_known(
    client: &Client,
    meta: &ArtifactRef,
    output: &Path,
) -> anyhow::Result<()> {
    let resp = client.artifact_content(&meta.artifact_id).await?;
    if resp
        .headers()
        .get(HEADER_SHA256)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v != meta.sha256)
    {
        return Err(CliError::failure(format!(
            "the server's SHA-256 for artifact {} changed while downloading; try again",
            meta.artifact_id
        ))
        .into());
    }
    let received = receive(resp, output, meta.name.clone(), meta.size).await?;
    if !received.is(meta) {
        return Err(CliError::failure(format!(
            "artifact {} arrived damaged ({} with SHA-256 {}, expected {} with {}); nothing was written",
            meta.artifact_id,
            crate::api::words::plural(received.size, "byte", "bytes"),
            received.sha256,
            crate::api::words::plural(meta.size, "byte", "bytes"),
            meta.sha256
        ))
        .into());
    }
    received.keep()
}

/// A download in its temporary file (removed unless kept), with its size and SHA-256.
pub struct Received {
    sink: Sink,
    size: u64,
    sha256: String,
}

impl Received {
    /// Whether these are the bytes `meta` names.
    pub fn is(&self, meta: &ArtifactRef) -> bool {
        self.size == meta.size && self.sha256 == meta.sha256
    }

    /// Puts the file in place (durably), or finishes stdout.
    pub fn keep(self) -> anyhow::Result<()> {
        let dest = self.sink.dest().to_path_buf();
        self.sink
            .commit()
            .with_context(|| format!("writing {}", dest.display()))
    }
}

/// Receives a response's body (at most `limit` bytes) for `output`: into a temporary file
/// beside it, or to stdout for `-`. The bytes are hashed and written on two blocking
/// threads while this one receives.
pub async fn receive(
    mut resp: reqwest::Response,
    output: &Path,
    name: String,
    limit: u64,
) -> anyhow::Result<Received> {
    let sink = Sink::open(output)?;
    let (to_writer, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
    let writer = tokio::task::spawn_blocking(move || sink.write_from(rx));
    let (to_hasher, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
    let hasher = tokio::task::spawn_blocking(move || {
        let mut hasher = Sha256::new();
        while let Some(chunk) = rx.blocking_recv() {
            hasher.update(&chunk);
        }
        hex::encode(hasher.finalize())
    });
    // The name is untrusted text: Progress cleans it for the terminal.
    let total = resp.content_length().filter(|n| *n <= limit);
    let mut progress = super::progress::Progress::bytes(name, total);
    let mut n = 0u64;
    let received = async {
        while let Some(chunk) = resp.chunk().await.context("downloading")? {
            n += chunk.len() as u64;
            if n > limit {
                break;
            }
            progress.inc(chunk.len() as u64);
            let hashed = to_hasher.send(chunk.clone()).await;
            if hashed.is_err() || to_writer.send(chunk).await.is_err() {
                break; // The writer failed; its error is reported below.
            }
        }
        anyhow::Ok(())
    }
    .await;
    drop((to_writer, to_hasher));
    progress.finish();
    let sha256 = hasher.await.context("hashing the download")?;
    let (sink, written) = writer.await.context("writing the download")?;
    received.and(written)?;
    Ok(Received {
        sink,
        size: n,
        sha256,
    })
}

/// Where a download goes: stdout, or a temporary file renamed over the target at the end
/// (and removed when it is dropped before that).
enum Sink {
    Stdout(std::io::Stdout),
    File(FileSink),
}

struct FileSink {
    tmp: PathBuf,
    dest: PathBuf,
    file: Option<std::io::BufWriter<std::fs::File>>,
    kept: bool,
}

impl Drop for FileSink {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

impl Sink {
    fn open(output: &Path) -> anyhow::Result<Sink> {
        if output.as_os_str() == "-" {
            return Ok(Sink::Stdout(std::io::stdout()));
        }
        let dir = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = output
            .file_name()
            .ok_or_else(|| CliError::usage(format!("{} is not a file path", output.display())))?;
        let tmp = dir.join(format!(
            ".{}.yy-{}",
            name.to_string_lossy(),
            uuid::Uuid::new_v4().simple()
        ));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write in {}", dir.display()))?;
        Ok(Sink::File(FileSink {
            tmp,
            dest: output.to_path_buf(),
            file: Some(std::io::BufWriter::with_capacity(1 << 20, file)),
            kept: false,
        }))
    }

    fn dest(&self) -> &Path {
        match self {
            Sink::Stdout(_) => Path::new("-"),
            Sink::File(f) => &f.dest,
        }
    }

    /// Writes what arrives on `chunks` until it closes; the sink comes back either way.
    fn write_from(
        mut self,
        mut chunks: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    ) -> (Sink, anyhow::Result<()>) {
        while let Some(chunk) = chunks.blocking_recv() {
            if let Err(e) = self.write(&chunk) {
                return (self, Err(e));
            }
        }
        (self, Ok(()))
    }

    fn write(&mut self, data: &[u8]) -> anyhow::Result<()> {
        match self {
            Sink::Stdout(out) => out.lock().write_all(data)?,
            Sink::File(FileSink {
                file: Some(file), ..
            }) => {
                let before = file.buffer().len();
                file.write_all(data)?;
                if file.buffer().len() < before + data.len() {
                    // The buffer went to the file: start writing it out now, so the
                    // fsync before the rename finds little left to do.
                    // SAFETY: our own open file; the call only schedules writeback.
                    unsafe {
                        libc::sync_file_range(
                            file.get_ref().as_raw_fd(),
                            0,
                            0,
                            libc::SYNC_FILE_RANGE_WRITE,
                        )
                    };
                }
            }
            Sink::File(_) => unreachable!("a file sink is open until it is committed"),
        }
        Ok(())
    }

    fn commit(self) -> std::io::Result<()> {
        match self {
            Sink::Stdout(out) => out.lock().flush(),
            Sink::File(mut f) => {
                let Some(file) = f.file.take() else {
                    return Ok(());
                };
                let file = file.into_inner().map_err(|e| e.into_error())?;
                file.sync_all()?;
                std::fs::rename(&f.tmp, &f.dest)?;
                f.kept = true;
                let dir = match f.dest.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                std::fs::File::open(dir)?.sync_all()
            }
        }
    }
}

/// Uploads a local file to attach to a turn; returns the upload's artifact id.
pub async fn attach(client: &Client, path: &Path) -> anyhow::Result<String> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| CliError::usage(format!("cannot attach {shown}: {e}")))?;
    if !meta.is_file() {
        return Err(CliError::usage(format!("cannot attach {shown}: not a regular file")).into());
    }
    if meta.len() > MAX_ATTACH_BYTES {
        return Err(CliError::new(
            Exit::Conflict,
            format!(
                "cannot attach {shown}: it is {}, an attached file is at most {} MiB",
                human_size(meta.len()),
                MAX_ATTACH_BYTES >> 20
            ),
        )
        .into());
    }
    let name = path
        .file_name()
        .and_then(|n| artifacts::sanitize_name(&n.to_string_lossy()))
        .ok_or_else(|| CliError::usage(format!("cannot attach {shown}: no usable file name")))?;
    let data =
        std::fs::read(path).map_err(|e| CliError::usage(format!("cannot read {shown}: {e}")))?;
    if data.len() as u64 > MAX_ATTACH_BYTES {
        return Err(CliError::new(
            Exit::Conflict,
            format!("{shown} grew past the attachment limit"),
        )
        .into());
    }
    let sha = hex::encode(Sha256::digest(&data));
    let uploaded = client.upload(&name, data, &sha).await?;
    Ok(uploaded.id)
}
