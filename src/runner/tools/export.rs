//! `computer_export`: a file of the computer to the user as a verified artifact (the
//! transfer itself is [`TurnExports::export`](crate::runner::artifacts::TurnExports::export)).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Family, Spec, Tool};
use crate::api::artifacts::{MAX_ARTIFACT_BYTES, MAX_EXPORTS_PER_TURN};

pub struct ComputerExport;

static SPEC: Spec = Spec {
    name: "computer_export",
    description: || {
        format!(
            "Export a file of your computer to the user as a verified artifact (at most {} MiB, {} per turn). Returns its artifact id, size and SHA-256.",
            MAX_ARTIFACT_BYTES >> 20,
            MAX_EXPORTS_PER_TURN
        )
    },
    properties: || json!({ "path": super::string("Path relative to the workspace") }),
    required: &["path"],
};

#[derive(Debug, PartialEq, Deserialize)]
pub struct Args {
    path: String,
}

impl Tool for ComputerExport {
    type Args = Args;

    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn family(&self) -> Family {
        Family::Export
    }

    fn bad_arguments(&self, _: serde_json::Error) -> String {
        "computer_export needs a path".into()
    }

    async fn run<'a>(&'a self, args: Args, call: &'a Call<'a>) -> Value {
        call.exports.export(call.guest, &args.path).await
    }
}
