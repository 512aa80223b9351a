//! Artifacts: files that leave an agent's computer (or a Runner's host) through the control
//! plane, verified chunk by chunk and as a whole, and files that go in (`--attach`).
//! The control plane keeps the bytes as files (its artifact directory), or, on PostgreSQL
//! without `yy serve --blob-dir`, as chunks in its database.

use serde::{Deserialize, Serialize};

/// Largest artifact, in either direction.
pub const MAX_ARTIFACT_BYTES: u64 = 25 * 1024 * 1024;
/// Most artifacts one turn may export.
pub const MAX_EXPORTS_PER_TURN: u32 = 8;
/// Largest file `yy chat --attach` takes: what one guest write carries.
pub const MAX_ATTACH_BYTES: u64 = 16 * 1024 * 1024;
/// Most attachments of one turn.
pub const MAX_ATTACHMENTS: usize = 8;
/// The chunk size Runners upload with (the server accepts 64 KiB to 4 MiB): the largest,
/// since every chunk is a request and a database write.
pub const CHUNK_BYTES: u64 = MAX_CHUNK_BYTES;
pub const MIN_CHUNK_BYTES: u64 = 64 * 1024;
pub const MAX_CHUNK_BYTES: u64 = 4 * 1024 * 1024;
/// The SHA-256 (hex) of a whole upload's body (or of a chunk, from older Runners).
pub const HEADER_SHA256: &str = "yy-sha256";
/// The CRC-32 (8 hex digits) of a chunk: the cheap check against damage in transit; the
/// whole file's SHA-256 is the end-to-end check.
pub const HEADER_CRC32: &str = "yy-crc32";

super::states::word_enum! {
    /// Where an artifact came from.
    ArtifactKind {
        /// `computer_export` in a computer agent's turn.
        Export = "export",
        /// `yy runner fetch` of a file under a Runner's artifact roots.
        Fetch = "fetch",
        /// A file a user attached to a turn (`yy chat --attach`).
        Input = "input",
    }
}

super::states::word_enum! {
    /// An artifact is `ready` only once the whole file was checked and sealed.
    ArtifactState {
        Uploading = "uploading",
        Ready = "ready",
    }
}

/// `POST /runner/v1/artifacts`: begin (or resume) an upload for a running command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadBegin {
    pub command_id: String,
    /// A plain file name (no directories).
    pub name: String,
    pub size: u64,
    /// The whole file's SHA-256 when it is known before the upload (an export's
    /// snapshot); otherwise the finish carries it, computed while the chunks were read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub chunk_size: u64,
    /// The path it was read from (guest or Runner host), for provenance.
    #[serde(default)]
    pub source_path: Option<String>,
}

/// `POST /runner/v1/artifacts/{id}/finish`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadFinish {
    /// The whole file's SHA-256, when the begin did not announce it (or the same one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Where an upload stands: the answer to begin, every chunk and finish.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UploadState {
    pub id: String,
    pub state: ArtifactState,
    pub size: u64,
    pub chunk_size: u64,
    /// Bytes verified and stored so far; the next chunk to send is `received / chunk_size`.
    pub received: u64,
}

impl UploadState {
    pub fn next_chunk(&self) -> u64 {
        self.received / self.chunk_size.max(1)
    }
}

/// An artifact as the admin API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Artifact {
    pub id: String,
    pub kind: ArtifactKind,
    pub name: String,
    pub size: u64,
    pub sha256: String,
    pub state: ArtifactState,
    pub received: u64,
    pub owner: Option<String>,
    pub runner_id: Option<super::ids::RunnerId>,
    pub command_id: Option<super::ids::CommandId>,
    pub session_id: Option<super::ids::SessionId>,
    pub turn_id: Option<String>,
    /// The turn's number in its session (the message it answered).
    pub turn_seq: Option<i64>,
    pub agent: Option<String>,
    pub profile: Option<String>,
    pub computer_id: Option<super::ids::ComputerId>,
    pub source_path: Option<String>,
    pub created_at: String,
    pub finished_at: Option<String>,
}

/// An attached file as a `worker.turn` carries it: the Runner downloads it (verified)
/// and writes it into the guest workspace before the model starts.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachmentRef {
    pub artifact_id: String,
    pub name: String,
    pub size: u64,
    pub sha256: String,
    /// Where in the workspace an input goes, relative to its root, when not `inputs`:
    /// `reviews/#N` (a result an admin reviews), `inputs/deps/#N` (the accepted result of
    /// a subtask this one depends on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

/// What a tool, a fetch or a CLI says of a stored artifact.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArtifactRef {
    pub artifact_id: String,
    pub name: String,
    pub size: u64,
    pub sha256: String,
}

/// A plain file name for an artifact: the last path component, without control
/// characters, slashes or leading dots; `None` when nothing usable is left.
pub fn sanitize_name(raw: &str) -> Option<String> {
    let last = raw.rsplit(['/', '\\']).next().unwrap_or_default();
    let cleaned: String = last
        .chars()
        .filter(|c| !c.is_control())
        .map(|c| if c == ':' { '_' } else { c })
        .collect();
    let cleaned = cleaned.trim().trim_start_matches('.').to_string();
    let cleaned: String = cleaned.chars().take(200).collect();
    (!cleaned.is_empty()).then_some(cleaned)
}

/// True for a lowercase 64-digit hex SHA-256.
pub fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Sizes for people: `3.0 MiB`.
pub fn human_size(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_file_names() {
        assert_eq!(
            sanitize_name("out/report.pdf").as_deref(),
            Some("report.pdf")
        );
        assert_eq!(sanitize_name("../../etc/passwd").as_deref(), Some("passwd"));
        assert_eq!(sanitize_name("..").as_deref(), None);
        assert_eq!(sanitize_name("/").as_deref(), None);
        assert_eq!(sanitize_name(".hidden").as_deref(), Some("hidden"));
        assert_eq!(sanitize_name("a\u{1b}[31mb").as_deref(), Some("a[31mb"));
        assert_eq!(sanitize_name("C:\\x\\y.txt").as_deref(), Some("y.txt"));
    }

    #[test]
    fn sha256_and_sizes() {
        assert!(is_sha256(&"a".repeat(64)));
        assert!(!is_sha256(&"A".repeat(64)));
        assert!(!is_sha256("abc"));
        assert_eq!(human_size(10), "10 B");
        assert_eq!(human_size(3 * 1024 * 1024), "3.0 MiB");
    }
}
