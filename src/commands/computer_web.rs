//! `yy computer attach --web`: the command's side (control, the link, Ctrl-C); the page and
//! its server are in [`crate::web_view`].

use std::time::Duration;

use crate::client::Client;
use crate::web_view::serve;

/// How often control is renewed while attached (it lasts 30 s).
const RENEW_EVERY: Duration = Duration::from_secs(10);

/// Serves the page until Ctrl-C (or, under control, until control is lost).
pub async fn run(client: &Client, id: &str, control: bool, open: bool) -> anyhow::Result<()> {
    let computer = client.computer_show(id).await?.id.into_string();
    let fence = if control {
        Some(
            super::computer_attach::take_control(client, &computer)
                .await?
                .0,
        )
    } else {
        None
    };
    let served = match serve(client.clone(), computer.clone(), fence).await {
        Ok(s) => s,
        Err(e) => {
            if let Some(f) = fence {
                let _ = client.computer_control_renew(&computer, f, true).await;
            }
            return Err(e);
        }
    };
    let url = served.url.clone();
    match fence {
        Some(f) => eprintln!(
            "[you have control of computer {computer} (fence {f}); the model is paused. Open the link below (it works once); Ctrl-C stops the page and releases control]"
        ),
        None => eprintln!(
            "[watching computer {computer}, read-only. Open the link below (it works once); Ctrl-C stops the page]"
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
                if let Err(e) = client.computer_control_renew(&computer, fence.unwrap_or(0), false).await {
                    break Err(anyhow::Error::from(e).context("control was lost"));
                }
            }
        }
    };
    served.stop().await;
    if let Some(f) = fence {
        let _ = client.computer_control_renew(&computer, f, true).await;
        eprintln!(
            "[page stopped, control released; the model stays paused until `yy computer handback {computer} --note ...`]"
        );
    } else {
        eprintln!("[page stopped]");
    }
    ended
}
