//! `read_file`, `write_file` and `list_files`: the computer's workspace through its guest
//! agent (paths are confined to the workspace there).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Family, Spec, Tool};

/// Largest file `read_file` returns.
const READ_CAP: u64 = 256 * 1024;

fn workspace_path() -> Value {
    super::string("Path relative to the workspace")
}

pub struct ReadFile;

static READ: Spec = Spec {
    name: "read_file",
    description: || "Read a text file of your computer's workspace.".into(),
    properties: || json!({ "path": workspace_path() }),
    required: &["path"],
};

#[derive(Debug, PartialEq, Deserialize)]
pub struct PathArgs {
    path: String,
}

impl Tool for ReadFile {
    type Args = PathArgs;

    fn spec(&self) -> &Spec {
        &READ
    }

    fn family(&self) -> Family {
        Family::Files
    }

    fn bad_arguments(&self, _: serde_json::Error) -> String {
        "read_file needs a path".into()
    }

    async fn run<'a>(&'a self, args: PathArgs, call: &'a Call<'a>) -> Value {
        match call.guest.read(&args.path, Some(READ_CAP)).await {
            Ok((r, data)) => json!({
                "path": r.path,
                "size": r.size,
                "truncated": r.truncated,
                "content": String::from_utf8_lossy(&data),
            }),
            Err(e) => json!({ "error": e.to_string() }),
        }
    }
}

pub struct WriteFile;

static WRITE: Spec = Spec {
    name: "write_file",
    description: || "Write (create or replace) a file in your computer's workspace.".into(),
    properties: || json!({ "path": workspace_path(), "content": { "type": "string" } }),
    required: &["path", "content"],
};

#[derive(Debug, PartialEq, Deserialize)]
pub struct WriteArgs {
    path: String,
    content: String,
}

impl Tool for WriteFile {
    type Args = WriteArgs;

    fn spec(&self) -> &Spec {
        &WRITE
    }

    fn family(&self) -> Family {
        Family::Files
    }

    fn bad_arguments(&self, _: serde_json::Error) -> String {
        "write_file needs a path and content".into()
    }

    async fn run<'a>(&'a self, args: WriteArgs, call: &'a Call<'a>) -> Value {
        match call
            .guest
            .write(&args.path, args.content.as_bytes(), None)
            .await
        {
            Ok(r) => json!({ "path": r.path, "size": r.size, "sha256": r.sha256 }),
            Err(e) => json!({ "error": e.to_string() }),
        }
    }
}

pub struct ListFiles;

static LIST: Spec = Spec {
    name: "list_files",
    description: || "List a directory of your computer's workspace.".into(),
    properties: || json!({ "path": super::string("Directory relative to the workspace (default: the workspace)") }),
    required: &[],
};

#[derive(Debug, PartialEq, Deserialize)]
pub struct ListArgs {
    /// Anything but a string means the workspace itself.
    #[serde(default, deserialize_with = "super::lenient")]
    path: Option<String>,
}

impl Tool for ListFiles {
    type Args = ListArgs;

    fn spec(&self) -> &Spec {
        &LIST
    }

    fn family(&self) -> Family {
        Family::Files
    }

    async fn run<'a>(&'a self, args: ListArgs, call: &'a Call<'a>) -> Value {
        match call.guest.list(args.path.as_deref().unwrap_or(".")).await {
            Ok(r) => serde_json::to_value(r).unwrap_or_default(),
            Err(e) => json!({ "error": e.to_string() }),
        }
    }
}
