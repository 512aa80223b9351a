//! `yy computer attach --web` and `yy browser attach --web`: the command's side (control,
//! the link, Ctrl-C); the page and its server are in [`crate::web_view`].

use std::time::Duration;

use crate::client::Client;
use crate::web_view::{Screen, serve};

/// How often control is renewed while attached (it lasts 30 s).
const RENEW_EVERY: Duration = Duration::from_secs(10);

/// Serves the page until Ctrl-C (or, under control, until control is lost).
pub async fn run(client: &Client, screen: Screen, control: bool, open: bool) -> anyhow::Result<()> {
    let fence = if control {
        Some(
            super::computer_attach::take_control(client, &screen)
                .await?
                .0,
        )
    } else {
        None
    };
    let served = match serve(client.clone(), screen.clone(), fence).await {
        Ok(s) => s,
        Err(e) => {
            if let Some(f) = fence {
                let _ = screen.renew_control(client, f, true).await;
            }
            return Err(e);
        }
    };
    let url = served.url.clone();
    let (noun, name) = (
        screen.noun(),
        crate::output::clean(screen.name()).into_owned(),
    );
    match fence {
        Some(f) => eprintln!(
            "[you have control of {noun} {name} (fence {f}); the model is paused. Open the link below (it works once); Ctrl-C stops the page and releases control]"
        ),
        None => eprintln!(
            "[watching {noun} {name}, read-only. Open the link below (it works once); Ctrl-C stops the page]"
        ),
    }
    crate::output::print(&url)?;
    if open {
        // The token works once, so its moment in xdg-open's argv gives nobody a session.
        if let Err(e) = std::process::Command::new("xdg-open")
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            eprintln!("[could not start xdg-open ({e}); open the link yourself]");
        }
    }
    let mut renew = tokio::time::interval(RENEW_EVERY);
    renew.tick().await;
    let ended: anyhow::Result<()> = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ok(()),
            _ = renew.tick(), if fence.is_some() => {
                if let Err(e) = screen.renew_control(client, fence.unwrap_or(0), false).await {
                    break Err(anyhow::Error::from(e).context("control was lost"));
                }
            }
        }
    };
    served.stop().await;
    if let Some(f) = fence {
        let _ = screen.renew_control(client, f, true).await;
        eprintln!(
            "[page stopped, control released; the model stays paused until `yy {noun} handback {name} --note ...`]"
        );
    } else {
        eprintln!("[page stopped]");
    }
    ended
}
