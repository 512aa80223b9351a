//! `POST /api/v1/uploads`: a file for a turn (`yy chat --attach`), checked against the
//! announced SHA-256 before it becomes a ready `input` artifact. Into a part file renamed
//! into place (`Blobs::Dir`), or into the database in chunks of [`CHUNK_BYTES`] while an
//! `uploading` row stands for it (`Blobs::Database`); either way never held whole in memory.

use std::path::Path;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::{ApiError, AppState, Blobs, blobs, corrupt, header_sha, io_error, part};
use crate::api::artifacts::{self as wire, CHUNK_BYTES, MAX_ATTACH_BYTES};
use crate::server::auth::Caller;
use crate::server::extract::Q;
use crate::server::store::Store;
use crate::server::store::artifact_chunks::{self as chunks, Put};
use crate::server::store::artifacts::{self as rows, ArtifactRow};

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadQuery {
    pub name: String,
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("an attached file is at most {} MiB", MAX_ATTACH_BYTES >> 20),
    )
}

fn damaged(got: &str, sha: &str) -> ApiError {
    corrupt(format!(
        "the upload arrived damaged (SHA-256 {got}, announced {sha}); nothing was stored"
    ))
}

fn unreadable(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("reading the body: {e}"))
}

pub(super) async fn input_upload(
    State(state): State<AppState>,
    caller: Caller,
    Q(q): Q<UploadQuery>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Json<wire::Artifact>, ApiError> {
    let name = wire::sanitize_name(&q.name)
        .ok_or_else(|| ApiError::bad_request(format!("{:?} is not a file name", q.name)))?;
    let sha = header_sha(&headers)?;
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_ATTACH_BYTES) {
        return Err(too_large());
    }
    let upload = Upload {
        account: caller.account.id.clone(),
        name,
        sha,
    };
    let row = match &state.artifacts.blobs {
        Blobs::Dir(dir) => upload.into_file(&state.store, dir, body).await?,
        Blobs::Database => {
            let size = announced.unwrap_or(0);
            upload.into_database(&state.store, size, body).await?
        }
    };
    crate::server::telemetry::artifact_bytes("in", row.size as u64);
    Ok(Json(row.into()))
}

/// An attached file on its way in: whose, its name and the SHA-256 it must have.
struct Upload {
    account: String,
    name: String,
    sha: String,
}

impl Upload {
    /// Streams the body to a part file, checks it, renames it into place and records it.
    async fn into_file(
        self,
        store: &Store,
        dir: &Path,
        body: axum::body::Body,
    ) -> Result<ArtifactRow, ApiError> {
        let id = crate::server::store::new_id();
        let part = part::part_path(dir, &id);
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
                let chunk = chunk.map_err(unreadable)?;
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
        if got != self.sha {
            let _ = tokio::fs::remove_file(&part).await;
            return Err(damaged(&got, &self.sha));
        }
        let dest = part::sealed_path(dir, &id);
        tokio::fs::rename(&part, &dest)
            .await
            .map_err(|e| io_error("storing an upload", e))?;
        let Upload { account, name, sha } = self;
        let stored = store
            .call(move |c| rows::create_input(c, &id, &account, &name, size, &sha))
            .await;
        if stored.is_err() {
            let _ = tokio::fs::remove_file(&dest).await;
        }
        Ok(stored?)
    }

    /// Streams the body into the database in chunks (each stored with the upload's
    /// progress), checks the whole as stored, and seals it. Whatever fails, the upload's
    /// row goes again with its chunks.
    async fn into_database(
        self,
        store: &Store,
        size: u64,
        body: axum::body::Body,
    ) -> Result<ArtifactRow, ApiError> {
        let id = crate::server::store::new_id();
        let (key, account, name) = (id.clone(), self.account.clone(), self.name.clone());
        store
            .call(move |c| chunks::begin_input(c, &key, &account, &name, size, CHUNK_BYTES))
            .await?;
        let pending = Pending {
            store: store.clone(),
            id: Some(id.clone()),
        };
        let sealed = self.fill(store, &id, body).await;
        match sealed {
            Ok(row) => {
                pending.keep();
                Ok(row)
            }
            Err(e) => {
                pending.discard().await;
                Err(e)
            }
        }
    }

    async fn fill(
        &self,
        store: &Store,
        id: &str,
        body: axum::body::Body,
    ) -> Result<ArtifactRow, ApiError> {
        let chunk_size = CHUNK_BYTES as usize;
        let mut hasher = Sha256::new();
        let (mut size, mut n) = (0u64, 0u64);
        let mut buf: Vec<u8> = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(frame) = stream.next().await {
            let mut frame = frame.map_err(unreadable)?;
            size += frame.len() as u64;
            if size > MAX_ATTACH_BYTES {
                return Err(too_large());
            }
            hasher.update(&frame);
            while !frame.is_empty() {
                let take = (chunk_size - buf.len()).min(frame.len());
                buf.extend_from_slice(&frame.split_to(take));
                if buf.len() == chunk_size {
                    put(store, id, n, std::mem::take(&mut buf)).await?;
                    n += 1;
                }
            }
        }
        if !buf.is_empty() {
            put(store, id, n, buf).await?;
        }
        let got = hex::encode(hasher.finalize());
        if got != self.sha {
            return Err(damaged(&got, &self.sha));
        }
        let shape = (size, CHUNK_BYTES);
        if let Err(why) = blobs::check_whole(store, id, shape, &self.sha).await? {
            return Err(corrupt(format!(
                "the upload was not stored intact ({why}); nothing was kept, attach it again"
            )));
        }
        let (key, sha) = (id.to_string(), self.sha.clone());
        Ok(store
            .call(move |c| chunks::seal(c, &key, size, &sha))
            .await?)
    }
}

/// Stores chunk `n` of the attached file `id`.
async fn put(store: &Store, id: &str, n: u64, data: Vec<u8>) -> Result<(), ApiError> {
    let (key, offset) = (id.to_string(), n * CHUNK_BYTES);
    match store
        .call(move |c| chunks::put(c, &key, n, offset, &data))
        .await?
    {
        Put::Stored(_) => Ok(()),
        other => Err(ApiError::internal(format!(
            "chunk {n} of the upload {id} was not stored ({other:?})"
        ))),
    }
}

/// An attached file's `uploading` row in the database, removed (with its chunks) unless
/// it was kept: also when the request goes away half-way.
struct Pending {
    store: Store,
    id: Option<String>,
}

impl Pending {
    fn keep(mut self) {
        self.id = None;
    }

    async fn discard(mut self) {
        if let Some(id) = self.id.take() {
            discard(&self.store, id).await;
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let (Some(id), Ok(runtime)) = (self.id.take(), tokio::runtime::Handle::try_current()) {
            let store = self.store.clone();
            runtime.spawn(async move { discard(&store, id).await });
        }
    }
}

async fn discard(store: &Store, id: String) {
    let key = id.clone();
    if let Err(e) = store.call(move |c| chunks::discard(c, &key)).await {
        // Retention removes an upload that never finished.
        tracing::warn!(upload = %id, error = %e, "cannot remove an unfinished upload");
    }
}
