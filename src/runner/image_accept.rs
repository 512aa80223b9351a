//! `computer.image.accept`: before the control plane makes a new image current, the Runner
//! checks it on its own Docker engine. It must be there; it must pass the `yy image verify`
//! ladder (guest version, uid 1000, loopback only, read-only root, no capabilities, ...);
//! and an acceptance computer started from it exactly the way the pool starts computers
//! (production hardening, its own temporary workspace) must answer a guest round trip: a
//! file written and read back through the guest agent, as uid 1000, in the workspace. The
//! acceptance computer and its workspace are removed before the answer, pass or fail.

use std::time::Instant;

use crate::api::computers::{ImageAcceptPayload, ImageAcceptResult, ImageCheck};
use crate::computer::protocol::ExecParams;
use crate::computer::{ComputerError, image_verify, validate_image_id};

use super::CommandFailure;
use super::computers::Computers;

/// What the round trip writes and expects back: `<marker> <uid>`.
const MARKER: &str = "yy-acceptance";

pub async fn accept(
    pool: &Computers,
    p: ImageAcceptPayload,
) -> Result<serde_json::Value, CommandFailure> {
    let started = Instant::now();
    validate_image_id(&p.image_id).map_err(|e| CommandFailure::failed(e.to_string()))?;
    let provider = pool.provider();
    let report = image_verify::verify_image(provider, &p.image_id)
        .await
        .map_err(|e| CommandFailure::failed(refused(&e.to_string())))?;
    let mut checks: Vec<ImageCheck> = report
        .checks
        .iter()
        .map(|c| ImageCheck {
            name: c.name.clone(),
            ok: c.ok,
            want: c.want.clone(),
            got: c.got.clone(),
        })
        .collect();
    if !report.ok {
        return Err(CommandFailure::failed(refused(&failed_checks(&checks))));
    }

    let run = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let desktop = pool.is_desktop(&p.image_id).await;
    let spec = pool.acceptance_spec(&p.image_id, &run, desktop);
    let name = spec.name();
    let trip = async {
        let (created, guest) = provider.launch(&spec).await?;
        let script =
            format!("echo {MARKER} > .yy-acceptance && echo \"$(cat .yy-acceptance) $(id -u)\"");
        let r = guest
            .exec(
                ExecParams {
                    argv: Some(vec!["/bin/sh".into(), "-c".into(), script]),
                    timeout_ms: Some(30_000),
                    ..ExecParams::default()
                },
                None,
            )
            .await;
        guest.close().await;
        Ok::<_, ComputerError>((created.id, r?))
    }
    .await;
    // Removed whatever happened (by name: also when it was created but did not start),
    // and confirmed gone.
    let removed = match provider.remove(&name).await {
        Ok(()) | Err(ComputerError::NotFound(_)) => match provider.inspect(&name).await {
            Err(ComputerError::NotFound(_)) => Ok(()),
            Ok(_) => Err("still there after its removal".to_string()),
            Err(e) => Err(e.to_string()),
        },
        Err(e) => Err(e.to_string()),
    };
    let _ = std::fs::remove_dir_all(&spec.workspace_host_dir);
    let got = match &trip {
        Ok((_, r)) if r.exit_code == Some(0) => r.stdout.trim().to_string(),
        Ok((_, r)) => format!("exit {:?}: {}", r.exit_code, one_line(&r.stderr)),
        Err(e) => one_line(&e.to_string()),
    };
    let want = format!("{MARKER} 1000");
    checks.push(ImageCheck {
        name: "acceptance computer round trip".into(),
        ok: got == want,
        want,
        got,
    });
    let gone = match removed {
        Ok(()) => "removed".to_string(),
        Err(e) => one_line(&e),
    };
    checks.push(ImageCheck {
        name: "acceptance computer removed".into(),
        ok: gone == "removed",
        want: "removed".into(),
        got: gone,
    });
    if checks.iter().any(|c| !c.ok) {
        return Err(CommandFailure::failed(refused(&failed_checks(&checks))));
    }
    let result = ImageAcceptResult {
        image_id: p.image_id,
        checks,
        acceptance_container: name,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    tracing::info!(image = %result.image_id, ms = result.duration_ms, "image accepted");
    serde_json::to_value(result).map_err(|e| CommandFailure::failed(e.to_string()))
}

fn refused(why: &str) -> String {
    format!("image refused: {why}")
}

/// `name: want W, got G` of every failed check, on one line.
fn failed_checks(checks: &[ImageCheck]) -> String {
    checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| format!("{}: want {}, got {}", c.name, c.want, c.got))
        .collect::<Vec<_>>()
        .join("; ")
}

fn one_line(s: &str) -> String {
    let s = s.trim().replace('\n', " ");
    match s.char_indices().nth(200) {
        Some((end, _)) => format!("{}...", &s[..end]),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_checks_name_what_was_wanted_and_found() {
        let check = |name: &str, ok: bool| ImageCheck {
            name: name.into(),
            ok,
            want: "1000:1000".into(),
            got: "0:0".into(),
        };
        let text = failed_checks(&[check("guest agent", true), check("uid:gid", false)]);
        assert_eq!(text, "uid:gid: want 1000:1000, got 0:0");
        assert_eq!(one_line("a\nb"), "a b");
        assert!(one_line(&"x".repeat(300)).ends_with("..."));
    }
}
