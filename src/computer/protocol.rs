//! The guest protocol: JSON lines over the guest agent's stdin and stdout.
//!
//! The guest speaks first with one [`Hello`] line. Then every line from the host is a
//! [`Request`] (`{"id": 7, "op": "exec", ...}`) and every line from the guest is a
//! [`Frame`] for one request id: zero or more `chunk` frames (export only) or `output`
//! frames (an exec that asked for `stream`), then exactly one `result` or `error`.
//! Requests run concurrently, so frames of different ids interleave. A newer guest keeps
//! accepting every request of an older protocol version; the host refuses a guest whose
//! `protocol` it does not know.
//!
//! The host issues request ids in order from a random start and takes only frames that
//! answer a request it sent and has not seen answered (chunks only for an export, output
//! only for a streamed exec): any other frame, a malformed line or a line over
//! [`MAX_FRAME_BYTES`] ends the session with the reason, and the next request opens a
//! fresh one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks.
pub const PROTOCOL: u32 = 1;

/// Largest export chunk before base64 (the last one may be shorter).
pub const CHUNK_BYTES: usize = 256 * 1024;

/// The longest line either side accepts (a frame or a request, newline excluded). Every
/// answer the guest sends fits well under it: an exec result is at most twice the largest
/// output cap (caps count JSON-escaped bytes), a read 16 MiB as base64, a listing 10 000
/// names. A longer line ends the session.
pub const MAX_FRAME_BYTES: usize = 48 * 1024 * 1024;

/// Output kept per stream of an exec when the request names no cap. A cap counts the
/// bytes of the stream as it is sent: its text in a JSON string, escapes included (see
/// [`fit_json`]), so output that escapes to more bytes than it had (NUL bytes become six)
/// still fits the cap on the wire.
pub const DEFAULT_OUTPUT_CAP: u64 = crate::api::computers::EXEC_DEFAULT_OUTPUT_CAP;
/// The largest output cap a request may ask for.
pub const MAX_OUTPUT_CAP: u64 = 16 * 1024 * 1024;
/// Exec timeout when the request names none.
pub const DEFAULT_TIMEOUT_MS: u64 = crate::api::computers::EXEC_DEFAULT_TIMEOUT_MS;
/// Bytes returned by `read` when the request names no limit, and the most it may ask for.
pub const DEFAULT_READ_BYTES: u64 = 1024 * 1024;
pub const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;
/// Largest file `write` accepts (decoded).
pub const MAX_WRITE_BYTES: usize = crate::api::artifacts::MAX_ATTACH_BYTES as usize;
/// Most entries one `list` returns.
pub const MAX_LIST_ENTRIES: usize = 10_000;

crate::api::states::word_enum! {
    /// The `type` of the guest's first line: a line of another type is no hello.
    HelloType {
        Hello = "hello",
    }
}

crate::api::states::word_enum! {
    /// What a path in the workspace is.
    FileKind {
        File = "file",
        Dir = "dir",
        Symlink = "symlink",
        Other = "other",
    }
}

/// The guest's first line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    #[serde(rename = "type")]
    pub kind: HelloType,
    pub protocol: u32,
    pub yy_version: String,
    /// The workspace root, as the guest resolved it.
    pub workspace: String,
    /// The user and group commands run as and files are made by.
    pub uid: u32,
    pub gid: u32,
    /// The agent's own user when it runs apart from its commands (`serve --user`): none of
    /// them can then signal, trace or read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_uid: Option<u32>,
}

/// One request from the host.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Request {
    pub id: u64,
    #[serde(flatten)]
    pub op: Op,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    Exec(ExecParams),
    /// Kill the process group of the exec request `target` (SIGKILL).
    Cancel {
        target: u64,
    },
    Read {
        path: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_bytes: Option<u64>,
    },
    Write {
        path: String,
        /// The file's bytes, base64 (standard alphabet, padded).
        content: String,
        /// Permission bits (e.g. 420 = 0o644); default 0o644. Only 0o777 is kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mode: Option<u32>,
    },
    List {
        path: String,
    },
    Stat {
        path: String,
    },
    /// Snapshot a regular file and stream it in chunks.
    Export {
        path: String,
    },
    Version,
    /// A screen action on the desktop (desktop images; starts the display if needed).
    Screen(crate::computer::screen::ScreenAction),
    /// A screen action that only runs while `frame_id` is the current frame (the latest
    /// screenshot): input aimed at an older picture of the screen is refused.
    ScreenAt {
        frame_id: String,
        action: crate::computer::screen::ScreenAction,
    },
    /// Start the display (Xvfb and the window manager) unless it runs.
    Display,
    /// Start, kill or report the browser with its profile in the workspace.
    Browser {
        action: crate::computer::browser::BrowserAction,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ExecParams {
    /// The program and its arguments (no shell). Exactly one of `argv` and `shell`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// A command line for `/bin/sh -c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Working directory; relative to the workspace root. Default: the root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Added to (or replacing) the guest agent's environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Bytes kept of stdout and of stderr each; the rest is read and dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_cap_bytes: Option<u64>,
    /// Also send the output as `output` frames while the command runs (at most the output
    /// cap of each stream; the result still has what was kept). A guest that predates it
    /// ignores it and sends only the result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

impl ExecParams {
    pub fn argv<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        ExecParams {
            argv: Some(argv.into_iter().map(Into::into).collect()),
            ..Default::default()
        }
    }
    pub fn shell(command: impl Into<String>) -> Self {
        ExecParams {
            shell: Some(command.into()),
            ..Default::default()
        }
    }
}

/// One line from the guest about request `id`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Frame {
    pub id: u64,
    #[serde(flatten)]
    pub body: FrameBody,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FrameBody {
    Result {
        result: serde_json::Value,
    },
    Error {
        error: ErrorBody,
    },
    Chunk {
        seq: u64,
        data: String,
    },
    /// A piece of a streamed exec's output, as text (a UTF-8 sequence is never split).
    Output {
        stream: StdStream,
        text: String,
    },
}

pub use crate::api::sessions::StdStream;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    /// One of the `codes` constants.
    pub code: String,
    pub message: String,
}

/// Error codes in [`ErrorBody::code`].
pub mod codes {
    pub const BAD_REQUEST: &str = "bad_request";
    pub const OUTSIDE_WORKSPACE: &str = "outside_workspace";
    pub const NOT_FOUND: &str = "not_found";
    pub const WRONG_TYPE: &str = "wrong_type";
    pub const TOO_LARGE: &str = "too_large";
    pub const SPAWN: &str = "spawn_failed";
    pub const IO: &str = "io";
    /// A screen input named a frame that is no longer the current one.
    pub const STALE_FRAME: &str = "stale_frame";
}

/// What an exec answers; the same shape travels on to the admin API.
pub use crate::api::computers::ExecResult;

/// The bytes `c` takes inside a JSON string as serde_json writes it.
fn json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// Output as text (invalid UTF-8 as U+FFFD), cut to the longest prefix whose JSON string
/// form (quotes excluded) is at most `cap` bytes; true when something was cut.
pub fn fit_json(data: &[u8], cap: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(data);
    let mut used = 0usize;
    for (i, c) in text.char_indices() {
        used += json_len(c);
        if used > cap {
            return (text[..i].to_string(), true);
        }
    }
    (text.into_owned(), false)
}

/// Cuts an exec result's streams to `cap` as [`fit_json`] counts (the host applies the cap
/// it asked for again, whatever the guest sent).
pub fn cap_exec_result(r: &mut ExecResult, cap: usize) {
    if r.stdout.len() > cap / 6 || r.stderr.len() > cap / 6 {
        let (out, cut_out) = fit_json(r.stdout.as_bytes(), cap);
        let (err, cut_err) = fit_json(r.stderr.as_bytes(), cap);
        r.stdout = out;
        r.stderr = err;
        r.stdout_truncated |= cut_out;
        r.stderr_truncated |= cut_err;
    }
    r.truncated = r.stdout_truncated || r.stderr_truncated;
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReadResult {
    /// Relative to the workspace root.
    pub path: String,
    pub size: u64,
    pub content: String,
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WriteResult {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// What a listing and a stat say of one file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileInfo {
    #[serde(rename = "type")]
    pub kind: FileKind,
    pub size: u64,
    pub mode: u32,
    pub mtime_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entry {
    pub name: String,
    #[serde(flatten)]
    pub info: FileInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ListResult {
    pub path: String,
    pub entries: Vec<Entry>,
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatResult {
    pub path: String,
    #[serde(flatten)]
    pub info: FileInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExportResult {
    pub path: String,
    pub size: u64,
    pub sha256: String,
    pub chunks: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VersionResult {
    pub protocol: u32,
    pub yy_version: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CancelResult {
    /// False when `target` was not running (already finished or unknown).
    pub cancelled: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_where_its_json_form_reaches_the_cap() {
        // NUL escapes to six bytes, a quote and a newline to two, UTF-8 stays as it is.
        assert_eq!(fit_json(&[0; 10], 12), ("\0\0".to_string(), true));
        assert_eq!(fit_json(&[0; 2], 12), ("\0\0".to_string(), false));
        assert_eq!(fit_json(b"a\"b\n", 4), ("a\"b".to_string(), true));
        assert_eq!(fit_json("é€".as_bytes(), 4), ("é".to_string(), true));
        // Invalid UTF-8 becomes U+FFFD (three bytes).
        assert_eq!(fit_json(&[0xff, b'a'], 3), ("\u{fffd}".to_string(), true));
        for data in [
            vec![0u8; 5000],
            b"x\"\\\n\t\x01".repeat(700),
            vec![0xff; 3000],
        ] {
            for cap in [0, 1, 5, 6, 7, 1000, 4096] {
                let (text, cut) = fit_json(&data, cap);
                let sent = serde_json::to_string(&text).unwrap().len() - 2;
                assert!(sent <= cap, "{sent} > {cap}");
                let whole = serde_json::to_string(&String::from_utf8_lossy(&data))
                    .unwrap()
                    .len()
                    - 2;
                assert_eq!(cut, whole > cap);
            }
        }
        let mut r = ExecResult {
            exit_code: Some(0),
            signal: None,
            stdout: "\0".repeat(1000),
            stderr: "ok".into(),
            stdout_truncated: false,
            stderr_truncated: false,
            truncated: false,
            timed_out: false,
            cancelled: false,
            duration_ms: 1,
        };
        cap_exec_result(&mut r, 600);
        assert_eq!(
            (r.stdout.len(), r.stdout_truncated, r.truncated),
            (100, true, true)
        );
        assert_eq!((r.stderr.as_str(), r.stderr_truncated), ("ok", false));
    }

    #[test]
    fn wire_format_is_flat_and_tagged() {
        let req = Request {
            id: 3,
            op: Op::Exec(ExecParams::argv(["true"])),
        };
        let text = serde_json::to_string(&req).unwrap();
        assert_eq!(text, r#"{"id":3,"op":"exec","argv":["true"]}"#);
        assert_eq!(serde_json::from_str::<Request>(&text).unwrap(), req);
        let cancel: Request = serde_json::from_str(r#"{"id":4,"op":"cancel","target":3}"#).unwrap();
        assert_eq!(cancel.op, Op::Cancel { target: 3 });
        let frame = Frame {
            id: 9,
            body: FrameBody::Chunk {
                seq: 0,
                data: "aGk=".into(),
            },
        };
        assert_eq!(
            serde_json::to_string(&frame).unwrap(),
            r#"{"id":9,"type":"chunk","seq":0,"data":"aGk="}"#
        );
        let version: Request = serde_json::from_str(r#"{"id":1,"op":"version"}"#).unwrap();
        assert_eq!(version.op, Op::Version);
        let click: Request =
            serde_json::from_str(r#"{"id":2,"op":"screen","action":"left_click","x":5,"y":6}"#)
                .unwrap();
        assert_eq!(
            click.op,
            Op::Screen(crate::computer::screen::ScreenAction::LeftClick { x: 5, y: 6 })
        );
        assert_eq!(
            serde_json::to_string(&click).unwrap(),
            r#"{"id":2,"op":"screen","action":"left_click","x":5,"y":6}"#
        );
    }
}
