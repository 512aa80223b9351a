//! The desktop steps of `yy image verify`: the display is up, a screenshot is a complete
//! PNG of the display's size, the browser starts and writes its profile, and the profile
//! survives a browser kill and a computer recreate (same workspace, new container).

use super::browser::BrowserAction;
use super::docker::Provider;
use super::protocol::ExecParams;
use super::screen::{HEIGHT, ScreenAction, WIDTH, png_size};
use super::session::GuestSession;
use super::{ComputerError, ComputerSpec};

/// `add(name, want, got)` records a step and says whether to go on.
pub type AddStep<'a> = dyn FnMut(&str, String, String) -> bool + Send + 'a;

fn err_text(e: &ComputerError) -> String {
    let t = e.to_string().replace('\n', " ");
    t.chars().take(200).collect()
}

/// Runs the desktop steps on the started computer `id`; stops at the first failure.
pub async fn ladder(
    provider: &Provider,
    id: &str,
    spec: &ComputerSpec,
    add: &mut AddStep<'_>,
) -> Result<(), ComputerError> {
    let session = match provider.guest_at(id, &spec.guest_cwd).await {
        Ok(s) => s,
        Err(e) => {
            add("display up", format!("{WIDTH}x{HEIGHT}"), err_text(&e));
            return Ok(());
        }
    };
    let size = format!("{WIDTH}x{HEIGHT}");
    let got = match session.display().await {
        Ok(d) => format!("{}x{}", d.width, d.height),
        Err(e) => err_text(&e),
    };
    if !add("display up", size.clone(), got) {
        return Ok(());
    }
    // Pages in Chinese and with emoji render as text, not boxes: fontconfig has both.
    let fonts = session
        .exec(
            ExecParams::shell(
                "zh=$(fc-list :lang=zh family | head -n 1); emoji=$(fc-list :charset=1f600 family | head -n 1); echo \"zh=${zh:-none} emoji=${emoji:-none}\"",
            ),
            None,
        )
        .await;
    let got = match fonts {
        Ok(r) if r.exit_code == Some(0) => {
            let line = r.stdout.trim().to_string();
            if line.contains("zh=none") || line.contains("emoji=none") {
                line
            } else {
                "Chinese and emoji fonts".into()
            }
        }
        Ok(r) => format!("exit {:?}: {}", r.exit_code, r.stderr.trim()),
        Err(e) => err_text(&e),
    };
    if !add("fonts", "Chinese and emoji fonts".into(), got) {
        return Ok(());
    }
    let want = format!("valid PNG {size} with a frame id");
    let got = match session.screen(ScreenAction::Screenshot).await {
        Ok(r) => match r.png_bytes().map(|b| png_size(&b)) {
            Some(Ok((w, h))) if !r.frame_id.is_empty() => {
                format!("valid PNG {w}x{h} with a frame id")
            }
            Some(Ok((w, h))) => format!("valid PNG {w}x{h} without a frame id"),
            Some(Err(e)) => format!("invalid PNG: {e}"),
            None => "no PNG in the answer".into(),
        },
        Err(e) => err_text(&e),
    };
    if !add("complete screenshot", want, got) {
        return Ok(());
    }
    let (created, got) = browser_start(&session).await;
    if !add(
        "browser starts, writes its profile",
        "running, profile written".into(),
        got,
    ) {
        return Ok(());
    }
    let got = match session.browser(BrowserAction::Kill).await {
        Ok(r) if r.running => format!("still running: pids {:?}", r.pids),
        Ok(_) => same_profile(&browser_start(&session).await, created),
        Err(e) => err_text(&e),
    };
    if !add(
        "profile survives a browser kill",
        "same profile".into(),
        got,
    ) {
        return Ok(());
    }
    session.close().await;
    let got = match recreate(provider, id, spec).await {
        Ok(session) => {
            let r = same_profile(&browser_start(&session).await, created);
            let _ = session.browser(BrowserAction::Kill).await;
            session.close().await;
            r
        }
        Err(e) => err_text(&e),
    };
    add("profile survives a recreate", "same profile".into(), got);
    Ok(())
}

/// Starts the browser: its profile's creation time, and the step's outcome text.
async fn browser_start(session: &GuestSession) -> (Option<u64>, String) {
    match session.browser(BrowserAction::Start).await {
        Ok(r) if r.running && r.profile_created_ms.is_some() => {
            (r.profile_created_ms, "running, profile written".into())
        }
        Ok(r) => (
            None,
            format!(
                "running: {}, profile written: {}",
                r.running,
                r.profile_created_ms.is_some()
            ),
        ),
        Err(e) => (None, err_text(&e)),
    }
}

fn same_profile(started: &(Option<u64>, String), created: Option<u64>) -> String {
    match started {
        (Some(now), _) if Some(*now) == created => "same profile".into(),
        (Some(now), _) => format!(
            "a new profile (created {now}, was {})",
            created.unwrap_or_default()
        ),
        (None, text) => text.clone(),
    }
}

/// Removes the container and creates it again from the same spec (the workspace stays).
async fn recreate(
    provider: &Provider,
    id: &str,
    spec: &ComputerSpec,
) -> Result<GuestSession, ComputerError> {
    provider.remove(id).await?;
    let created = provider.create(spec).await?;
    provider.start_with_guest(&created, &spec.guest_cwd).await
}
