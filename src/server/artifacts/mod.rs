//! Artifact bytes on the control plane, kept where [`Blobs`] says: files in a directory
//! (`part`: a `.part` file that grows only by verified chunks, renamed into place only
//! after the whole file's size and SHA-256 were checked), or chunks in the PostgreSQL
//! database (`blobs`: each verified chunk stored with the upload's progress, the whole
//! checked as stored before the row becomes ready). The machine API uploads and downloads
//! here; the admin API lists, shows and streams.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};

mod blobs;
mod follow;
mod input;
mod part;
mod upload;

pub use blobs::Blobs;
use blobs::Source;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::Q;
use super::machine::Current;
use super::store::Store;
use super::store::artifacts::{self as rows, ArtifactRow};
use crate::api::artifacts::{self as wire, HEADER_SHA256, MAX_ARTIFACT_BYTES, MAX_ATTACH_BYTES};

/// The artifact bytes of one control plane, and the uploads being written right now.
pub struct ArtifactFiles {
    blobs: Blobs,
    /// Uploads with a chunk or finish in progress: one writer per upload at a time.
    busy: Mutex<HashSet<String>>,
    /// The running whole-file hashes of uploads into part files.
    hashing: part::Hashing,
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
    /// Files in `dir` (created, private): `DATA_DIR/artifacts`, or `yy serve --blob-dir`
    /// (one directory that the replicas on a PostgreSQL database share).
    pub fn open_at(dir: PathBuf) -> std::io::Result<ArtifactFiles> {
        crate::fsutil::create_private_dir(&dir)?;
        Ok(ArtifactFiles::new(Blobs::Dir(dir)))
    }

    /// Chunks in the control plane's PostgreSQL database (`artifact_chunks`).
    pub fn in_database() -> ArtifactFiles {
        ArtifactFiles::new(Blobs::Database)
    }

    fn new(blobs: Blobs) -> ArtifactFiles {
        ArtifactFiles {
            blobs,
            busy: Mutex::default(),
            hashing: part::Hashing::default(),
            followers: Arc::default(),
        }
    }

    /// What wakes the fetches following an upload here when it moved through another
    /// replica.
    pub fn upload_listener(&self) -> super::peers::UploadMoved {
        let followers = self.followers.clone();
        std::sync::Arc::new(move |command: &str, restarted: bool| {
            followers.touch(command, restarted)
        })
    }

    /// Where the bytes are kept.
    pub fn blobs(&self) -> &Blobs {
        &self.blobs
    }

    /// Removes the bytes (finished or partial) of artifacts whose rows are gone. In the
    /// database they went with the rows already (`ON DELETE CASCADE`, in the same
    /// transaction).
    pub fn remove(&self, ids: &[String]) {
        for id in ids {
            self.hashing.forget(id);
        }
        if let Blobs::Dir(dir) = &self.blobs {
            part::remove(dir, ids);
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

    /// The bytes of `row` as they are now: its file once sealed, its part file while it
    /// uploads; or its chunks in the database.
    async fn source(&self, store: &Store, row: &ArtifactRow) -> std::io::Result<Source> {
        let dir = match &self.blobs {
            Blobs::Database => {
                return Ok(Source::Chunks {
                    store: store.clone(),
                    id: Arc::from(row.id.as_str()),
                    chunk_size: row.chunk_size as u64,
                });
            }
            Blobs::Dir(dir) => dir,
        };
        // A file opened while it was the part stays the same file after the rename.
        let path = if row.is_ready() {
            part::sealed_path(dir, &row.id)
        } else {
            part::part_path(dir, &row.id)
        };
        let file = tokio::task::spawn_blocking(move || std::fs::File::open(path))
            .await
            .map_err(std::io::Error::other)??;
        Ok(Source::File(Arc::new(file)))
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
    Router::new().route("/api/v1/uploads", post(input::input_upload))
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
    let source = state
        .artifacts
        .source(&state.store, row)
        .await
        .map_err(|e| io_error("opening an artifact", e))?;
    // Counted as sent when the answer starts: a receiver that goes away early is rare.
    crate::server::telemetry::artifact_bytes("out", row.size as u64);
    let mut resp = bytes_response(blobs::body(source, row.size as u64), row.size as u64);
    if let Ok(v) = HeaderValue::from_str(&row.sha256) {
        resp.headers_mut().insert(HEADER_SHA256, v);
    }
    Ok(resp)
}

/// A response carrying `size` bytes of an artifact.
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

/// Checks at compile time that the limits fit the machine body limit.
const _: () = assert!(wire::MAX_CHUNK_BYTES as usize <= crate::api::machine::MACHINE_BODY_LIMIT);
const _: () = assert!(MAX_ATTACH_BYTES <= MAX_ARTIFACT_BYTES);

/// Shared handle for the state.
pub type Files = Arc<ArtifactFiles>;
