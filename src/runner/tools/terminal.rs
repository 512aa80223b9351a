//! `terminal`: a shell command in the computer, its output streamed live while it runs.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Family, Spec, Tool};
use crate::computer::protocol::ExecParams;

/// Output kept of each stream of a `terminal` call: what a model can use.
const OUTPUT_CAP: u64 = 64 * 1024;
/// Seconds a command runs when the model does not say.
const DEFAULT_TIMEOUT: u64 = 60;

pub struct Terminal;

static SPEC: Spec = Spec {
    name: "terminal",
    description: || {
        "Run a shell command in your computer (Linux), in your working directory. Returns the exit code, stdout and stderr.".into()
    },
    properties: || {
        json!({
            "command": super::string("The command line for /bin/sh -c"),
            "timeout": { "type": "integer", "description": "Seconds before it is killed (default 60)" }
        })
    },
    required: &["command"],
};

#[derive(Debug, PartialEq, Deserialize)]
pub struct Args {
    command: String,
    /// Anything but a non-negative integer means the default.
    #[serde(default, deserialize_with = "super::lenient")]
    timeout: Option<u64>,
}

impl Tool for Terminal {
    type Args = Args;

    fn spec(&self) -> &Spec {
        &SPEC
    }

    fn family(&self) -> Family {
        Family::Terminal
    }

    fn bad_arguments(&self, _: serde_json::Error) -> String {
        "terminal needs a command".into()
    }

    async fn run<'a>(&'a self, args: Args, call: &'a Call<'a>) -> Value {
        let seconds = args.timeout.unwrap_or(DEFAULT_TIMEOUT).clamp(1, 3600);
        let params = ExecParams {
            shell: Some(args.command),
            timeout_ms: Some(seconds * 1000),
            output_cap_bytes: Some(OUTPUT_CAP),
            ..ExecParams::default()
        };
        let ran = call
            .guest
            .exec_live(params, Some(call.stop), &mut |stream, text| {
                call.live.push(stream, text)
            })
            .await;
        match ran {
            Ok(r) => json!({
                "exit_code": r.exit_code,
                "stdout": r.stdout,
                "stderr": r.stderr,
                "timed_out": r.timed_out,
                "truncated": r.truncated,
            }),
            Err(e) => json!({ "error": e.to_string() }),
        }
    }
}
