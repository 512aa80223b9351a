//! Artifact bytes on the control plane: files under `DATA_DIR/artifacts/`, written through
//! a `.part` file that grows only by verified chunks, and renamed into place only after the
//! whole file's size and SHA-256 were checked. The machine API uploads and downloads here;
//! the admin API lists, shows and streams.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

mod follow;
mod upload;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::Q;
use super::machine::Current;
use super::store::artifacts::{self as rows, ArtifactRow};
use crate::api::artifacts::{self as wire, HEADER_SHA256, MAX_ARTIFACT_BYTES, MAX_ATTACH_BYTES};

/// The artifact files of one control plane, and the uploads being written right now.
pub struct ArtifactFiles {
    dir: PathBuf,
    /// Uploads with a chunk or finish in progress: one writer per upload at a time.
    busy: Mutex<HashSet<String>>,
    hashing: upload::Hashing,
    /// Fetches followed while they upload.
    followers: Arc<follow::Followers>,
}

/// Holds an upload's write slot until dropped.
struct Busy(Files, String);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Ok(mut b) = self.0.busy.lock() {
            b.remove(&self.1);
        }
    }
}

impl ArtifactFiles {
    /// The artifact directory inside `data_dir` (created, private).
    pub fn open(data_dir: &Path) -> std::io::Result<ArtifactFiles> {
        ArtifactFiles::open_at(data_dir.join("artifacts"))
    }

    /// The files in `dir` (`yy serve --blob-dir`: one directory that the replicas on a
    /// PostgreSQL database share).
    pub fn open_at(dir: PathBuf) -> std::io::Result<ArtifactFiles> {
        crate::fsutil::create_private_dir(&dir)?;
        Ok(ArtifactFiles {
            dir,
            busy: Mutex::default(),
            hashing: upload::Hashing::default(),
            followers: Arc::default(),
        })
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    fn part(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.part"))
    }

    /// Removes the files (finished or partial) of artifacts whose rows are gone.
    pub fn remove(&self, ids: &[String]) {
        for id in ids {
            self.hashing.forget(id);
            for path in [self.path(id), self.part(id)] {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        tracing::warn!(artifact = %id, error = %e, "cannot remove an artifact file")
                    }
                }
            }
        }
    }

    fn hold(self: &Arc<Self>, id: &str) -> Result<Busy, ApiError> {
        let mut b = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        if !b.insert(id.to_string()) {
            return Err(ApiError::conflict(format!(
                "another request is writing artifact {id}; retry when it answered"
            )));
        }
        Ok(Busy(self.clone(), id.to_string()))
    }
}

pub fn machine_routes() -> Router<AppState> {
    Router::new()
        .route("/runner/v1/artifacts", post(upload::upload_begin))
        .route(
            "/runner/v1/artifacts/{id}/chunks/{n}",
            put(upload::upload_chunk),
        )
        .route(
            "/runner/v1/artifacts/{id}/finish",
            post(upload::upload_finish),
        )
        .route("/runner/v1/artifacts/{id}/content", get(machine_content))
}

pub fn admin_routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/artifacts", get(artifact_list))
        .route("/api/v1/artifacts/{id}", get(artifact_show))
        .route("/api/v1/artifacts/{id}/content", get(artifact_content))
        .route(
            "/api/v1/commands/{id}/artifact",
            get(follow::command_artifact),
        )
}

/// `POST /api/v1/uploads`: its own router, because its body (a whole attached file) is
/// larger than the admin API's limit; the handler enforces its own.
pub fn upload_routes() -> Router<AppState> {
    Router::new().route("/api/v1/uploads", post(input_upload))
}

fn blocking_failed(e: tokio::task::JoinError) -> ApiError {
    ApiError::internal(format!("artifact I/O task failed: {e}"))
}

fn io_error(what: &str, e: std::io::Error) -> ApiError {
    tracing::error!(error = %e, "{what}");
    ApiError::internal(format!("{what}: {e}"))
}

fn corrupt(message: String) -> ApiError {
    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "corrupt", message)
}

fn header_sha(headers: &HeaderMap) -> Result<String, ApiError> {
    headers
        .get(HEADER_SHA256)
        .and_then(|v| v.to_str().ok())
        .filter(|v| wire::is_sha256(v))
        .map(str::to_string)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "missing or malformed {HEADER_SHA256} header (64 lowercase hex digits)"
            ))
        })
}

async fn machine_content(
    State(state): State<AppState>,
    current: Current,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let row = state
        .store
        .call(move |c| rows::for_download(c, &current.runner_id, current.generation, &id))
        .await?;
    stream_file(&state, &row).await
}

// ---- admin API ----

/// An artifact is its owner's; one without an owner (a Runner fetch) is for admins only.
fn visible(caller: &Caller, a: &ArtifactRow) -> bool {
    caller.account.admin || a.account_id.as_deref() == Some(caller.account.id.as_str())
}

async fn load(state: &AppState, caller: &Caller, key: String) -> Result<ArtifactRow, ApiError> {
    let row = state.store.call(move |c| rows::get(c, &key)).await?;
    if !visible(caller, &row) {
        return Err(ApiError::not_found(format!(
            "no artifact {:?}: see `yy artifact list`",
            row.id
        )));
    }
    Ok(row)
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    pub session: Option<String>,
}

async fn artifact_list(
    State(state): State<AppState>,
    caller: Caller,
    Q(q): Q<ListQuery>,
) -> Result<Json<Vec<wire::Artifact>>, ApiError> {
    let account = (!caller.account.admin).then(|| caller.account.id.clone());
    let rows = state
        .store
        .call(move |c| {
            let session = match &q.session {
                Some(s) => {
                    let s = crate::api::ids::SessionId::new(s.as_str());
                    Some(super::store::sessions::get(c, &s)?.id)
                }
                None => None,
            };
            rows::list(c, session.as_ref(), account.as_deref())
        })
        .await?;
    Ok(Json(rows.into_iter().map(Into::into).collect()))
}

async fn artifact_show(
    State(state): State<AppState>,
    caller: Caller,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<wire::Artifact>, ApiError> {
    Ok(Json(load(&state, &caller, id).await?.into()))
}

async fn artifact_content(
    State(state): State<AppState>,
    caller: Caller,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let row = load(&state, &caller, id).await?;
    stream_file(&state, &row).await
}

/// The bytes of a ready artifact, with their size and SHA-256 in headers so the receiver
/// can check them again.
async fn stream_file(state: &AppState, row: &ArtifactRow) -> Result<Response, ApiError> {
    if !row.is_ready() {
        return Err(ApiError::conflict(format!(
            "artifact {} is still uploading ({} of {}); it has no content yet",
            row.id,
            row.received,
            crate::api::words::plural(row.size, "byte", "bytes")
        )));
    }
    let path = state.artifacts.path(&row.id);
    let file = tokio::task::spawn_blocking(move || std::fs::File::open(path))
        .await
        .map_err(blocking_failed)?
        .map_err(|e| io_error("opening an artifact", e))?;
    // Counted as sent when the answer starts: a receiver that goes away early is rare.
    crate::server::telemetry::artifact_bytes("out", row.size as u64);
    let mut resp = bytes_response(file_body(file, row.size as u64), row.size as u64);
    if let Ok(v) = HeaderValue::from_str(&row.sha256) {
        resp.headers_mut().insert(HEADER_SHA256, v);
    }
    Ok(resp)
}

/// Bytes read per blocking step while a file is sent.
const SEND_PIECE: usize = 1 << 20;

/// Up to `len` bytes of `file` at `at`, read on a blocking thread (fewer at its end).
fn read_piece(
    file: Arc<std::fs::File>,
    at: u64,
    len: usize,
) -> tokio::task::JoinHandle<std::io::Result<bytes::Bytes>> {
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            match file.read_at(&mut buf[filled..], at + filled as u64)? {
                0 => break,
                n => filled += n,
            }
        }
        buf.truncate(filled);
        Ok(bytes::Bytes::from(buf))
    })
}

/// A response carrying `size` bytes of a file.
fn bytes_response(body: axum::body::Body, size: u64) -> Response {
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    resp
}

/// The first `size` bytes of `file` as a response body, read in pieces on blocking threads
/// one piece ahead of the connection: the next read overlaps the send, and no thread waits
/// on a slow receiver. A file shorter than `size` ends the body early (the receiver sees
/// fewer bytes than its Content-Length).
fn file_body(file: std::fs::File, size: u64) -> axum::body::Body {
    let piece = move |at: u64| (size - at).min(SEND_PIECE as u64) as usize;
    let file = Arc::new(file);
    let first = (size > 0).then(|| read_piece(file.clone(), 0, piece(0)));
    let stream = futures_util::stream::try_unfold(
        (file, 0u64, first),
        move |(file, at, ahead)| async move {
            let Some(reading) = ahead else {
                return Ok(None);
            };
            let bytes = reading.await.map_err(std::io::Error::other)??;
            if bytes.is_empty() {
                return Ok(None);
            }
            let next = at + bytes.len() as u64;
            let ahead = (next < size).then(|| read_piece(file.clone(), next, piece(next)));
            Ok::<_, std::io::Error>(Some((bytes, (file, next, ahead))))
        },
    );
    axum::body::Body::from_stream(stream)
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadQuery {
    pub name: String,
}

/// A file for a turn (`yy chat --attach`): streamed to a part file, checked against the
/// announced SHA-256, and only then recorded.
async fn input_upload(
    State(state): State<AppState>,
    caller: Caller,
    Q(q): Q<UploadQuery>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Json<wire::Artifact>, ApiError> {
    let name = wire::sanitize_name(&q.name)
        .ok_or_else(|| ApiError::bad_request(format!("{:?} is not a file name", q.name)))?;
    let sha = header_sha(&headers)?;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("an attached file is at most {} MiB", MAX_ATTACH_BYTES >> 20),
        )
    };
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_ATTACH_BYTES) {
        return Err(too_large());
    }
    let id = super::store::new_id();
    let part = state.artifacts.part(&id);
    let mut out = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&part)
        .await
        .map_err(|e| io_error("creating an upload", e))?;
    let written = async {
        use tokio::io::AsyncWriteExt;
        let mut hasher = Sha256::new();
        let mut n = 0u64;
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(format!("reading the body: {e}")))?;
            n += chunk.len() as u64;
            if n > MAX_ATTACH_BYTES {
                return Err(too_large());
            }
            hasher.update(&chunk);
            out.write_all(&chunk)
                .await
                .map_err(|e| io_error("writing an upload", e))?;
        }
        out.sync_all()
            .await
            .map_err(|e| io_error("writing an upload", e))?;
        Ok((n, hex::encode(hasher.finalize())))
    }
    .await;
    let (size, got) = match written {
        Ok(v) => v,
        Err(e) => {
            let _ = tokio::fs::remove_file(&part).await;
            return Err(e);
        }
    };
    if got != sha {
        let _ = tokio::fs::remove_file(&part).await;
        return Err(corrupt(format!(
            "the upload arrived damaged (SHA-256 {got}, announced {sha}); nothing was stored"
        )));
    }
    let dest = state.artifacts.path(&id);
    tokio::fs::rename(&part, &dest)
        .await
        .map_err(|e| io_error("storing an upload", e))?;
    let account = caller.account.id.clone();
    let key = id.clone();
    let stored = state
        .store
        .call(move |c| rows::create_input(c, &key, &account, &name, size, &sha))
        .await;
    match stored {
        Ok(row) => {
            crate::server::telemetry::artifact_bytes("in", size);
            Ok(Json(row.into()))
        }
        Err(e) => {
            let _ = tokio::fs::remove_file(&dest).await;
            Err(e.into())
        }
    }
}

/// Checks at compile time that the limits fit the machine body limit.
const _: () = assert!(wire::MAX_CHUNK_BYTES as usize <= crate::api::machine::MACHINE_BODY_LIMIT);
const _: () = assert!(MAX_ATTACH_BYTES <= MAX_ARTIFACT_BYTES);

/// Shared handle for the state.
pub type Files = Arc<ArtifactFiles>;
