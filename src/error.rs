//! The one place where an error becomes an exit code.
//!
//! Library modules return their own `thiserror` types; commands use `anyhow` and wrap
//! anything that needs a specific exit code in [`CliError`]. [`exit_code`] walks the chain.

use std::fmt;

use crate::backup::BackupError;
use crate::client::ClientError;
use crate::computer::ComputerError;
use crate::server::store::transfer::TransferError;

/// Documented exit codes (docs/cli.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    Failure = 1,
    Usage = 2,
    Cancelled = 3,
    Auth = 4,
    NotFound = 5,
    Conflict = 6,
}

impl Exit {
    pub fn code(self) -> i32 {
        self as i32
    }
}

/// An error that knows its exit code; its message is the whole one-line report.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub message: String,
}

impl CliError {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        CliError {
            exit,
            message: message.into(),
        }
    }
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }
    pub fn failure(message: impl Into<String>) -> Self {
        Self::new(Exit::Failure, message)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// The exit status of a command yy ran for the user (`yy computer exec`), passed through
/// as `docker exec` and `ssh` do. Not a failure of yy: no `error:` line, only `note` (if
/// any) on stderr, so a script tells the two apart by that line or with `--json`.
#[derive(Debug)]
pub struct PassThrough {
    pub code: i32,
    pub note: Option<String>,
}

impl fmt::Display for PassThrough {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.note {
            Some(note) => f.write_str(note),
            None => write!(f, "exit status {}", self.code),
        }
    }
}

impl std::error::Error for PassThrough {}

/// What the process should do with an error: its exit code, or `None` to exit quietly
/// (a closed stdout pipe, as in `yy agent list | head -1`).
pub fn exit_code(err: &anyhow::Error) -> Option<Exit> {
    for cause in err.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::BrokenPipe
        {
            return None;
        }
        if let Some(cli) = cause.downcast_ref::<CliError>() {
            return Some(cli.exit);
        }
        if let Some(client) = cause.downcast_ref::<ClientError>() {
            return Some(client_exit(client));
        }
        if let Some(computer) = cause.downcast_ref::<ComputerError>() {
            return Some(computer_exit(computer));
        }
    }
    Some(Exit::Failure)
}

/// The exit code of a computer operation's failure (`yy image ...`, `yy bench computer`).
pub fn computer_exit(e: &ComputerError) -> Exit {
    match e {
        ComputerError::Invalid(_) => Exit::Usage,
        ComputerError::NotFound(_) => Exit::NotFound,
        ComputerError::NameInUse { .. } | ComputerError::Lock(_) => Exit::Conflict,
        _ => Exit::Failure,
    }
}

/// The exit code of a failed backup, verify or restore.
pub fn backup_exit(e: &BackupError) -> Exit {
    match e {
        BackupError::Invalid(_) => Exit::Usage,
        BackupError::NotFound(_) => Exit::NotFound,
        BackupError::Busy(_) => Exit::Conflict,
        BackupError::Corrupt(_)
        | BackupError::Newer(_)
        | BackupError::Io(_)
        | BackupError::Db(_) => Exit::Failure,
    }
}

/// The exit code of a failed `yy store migrate` (and of the transfers in a backup or a
/// restore of a PostgreSQL database).
pub fn transfer_exit(e: &TransferError) -> Exit {
    match e {
        TransferError::Invalid(_) => Exit::Usage,
        TransferError::NotFound(_) => Exit::NotFound,
        TransferError::Busy(_) | TransferError::NotEmpty(_) => Exit::Conflict,
        TransferError::Schema(_)
        | TransferError::Mismatch(_)
        | TransferError::Db(_)
        | TransferError::Io(_) => Exit::Failure,
    }
}

/// The exit code an answer of the admin API deserves: by HTTP status, except that a
/// reached limit is a conflict whatever its status.
pub fn client_exit(e: &ClientError) -> Exit {
    match e {
        ClientError::Api { status, code, .. } => match (*status, code.as_str()) {
            (_, "limit_reached") | (409 | 429, _) => Exit::Conflict,
            (401 | 403, _) => Exit::Auth,
            (404, _) => Exit::NotFound,
            (400 | 413 | 415 | 422, _) => Exit::Usage,
            _ => Exit::Failure,
        },
        ClientError::Certificate(_) => Exit::Auth,
        ClientError::Connect { .. } | ClientError::Protocol { .. } | ClientError::Command(_) => {
            Exit::Failure
        }
    }
}

/// The one-line message printed after `error: `.
pub fn message(err: &anyhow::Error) -> String {
    // Context layers read outermost first: "writing runner.json: permission denied".
    let parts: Vec<String> = err.chain().map(|c| c.to_string()).collect();
    let mut line = String::new();
    for part in parts {
        if line.contains(&part) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&part);
    }
    line.replace('\n', " ")
}

pub use crate::api::words::chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_malformed_image_id_is_a_usage_error() {
        let e = crate::computer::validate_image_id("bccb8148217c").unwrap_err();
        assert_eq!(computer_exit(&e), Exit::Usage);
    }

    fn api(status: u16, code: &str) -> ClientError {
        ClientError::Api {
            status,
            code: code.into(),
            message: String::new(),
        }
    }

    #[test]
    fn api_errors_map_to_documented_exit_codes() {
        assert_eq!(client_exit(&api(409, "conflict")), Exit::Conflict);
        assert_eq!(client_exit(&api(429, "busy")), Exit::Conflict);
        assert_eq!(client_exit(&api(400, "limit_reached")), Exit::Conflict);
        assert_eq!(client_exit(&api(401, "unauthorized")), Exit::Auth);
        assert_eq!(client_exit(&api(403, "forbidden")), Exit::Auth);
        assert_eq!(client_exit(&api(404, "not_found")), Exit::NotFound);
        for status in [400, 413, 415, 422] {
            assert_eq!(client_exit(&api(status, "bad_request")), Exit::Usage);
        }
        assert_eq!(client_exit(&api(500, "internal")), Exit::Failure);
        let down = ClientError::Connect {
            url: "http://127.0.0.1:1".into(),
            reason: "refused".into(),
        };
        assert_eq!(client_exit(&down), Exit::Failure);
        let wrapped = anyhow::Error::new(api(404, "not_found")).context("showing agent x");
        assert_eq!(exit_code(&wrapped), Some(Exit::NotFound));
    }
}
