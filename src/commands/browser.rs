//! `yy browser`: an operator's look at and takeover of a host agent's managed browser
//! (docs/browser.md), with a computer's fences, frames, 30 s control and handback note.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use tokio::io::AsyncBufReadExt;

use super::{Columns, JsonFlag, print_one};
use crate::api::browser::BrowserControl;
use crate::client::Client;
use crate::output::{self, opt};
use crate::web_view::Screen;

#[derive(Debug, Args)]
pub struct BrowserArgs {
    #[command(subcommand)]
    pub command: BrowserCommand,
}

#[derive(Debug, Subcommand)]
pub enum BrowserCommand {
    /// Who controls the agent's browser, and the Runner it is on
    Show {
        /// A host agent with the managed browser (`yy agent update AGENT --browser`)
        agent: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Watch what the agent does (its turns' tool calls); with --control take over its
    /// browser: the model waits at its next browser call (the one in flight finishes
    /// first) until you hand it back
    Attach(AttachArgs),
    /// Hand the browser back: the model's browser calls go on, the next with your note
    Handback {
        agent: String,
        /// What the model should know about what you did
        #[arg(long, value_name = "TEXT", default_value = "")]
        note: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Write a PNG of the agent's page (a look: it does not keep the browser open)
    Screenshot {
        agent: String,
        /// Where to write the PNG (replaced atomically)
        #[arg(long, short = 'o', value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// One screen action on the agent's page, under your control (as `yy computer screen`)
    Screen {
        agent: String,
        /// left_click X Y, right_click X Y, double_click X Y, move_cursor X Y,
        /// drag X1 Y1 X2 Y2 [X Y]..., type_text TEXT, press_key KEY, hotkey KEY KEY...,
        /// scroll DY [DX], get_screen_size or get_cursor_position
        #[arg(value_name = "ACTION")]
        action: String,
        #[arg(value_name = "ARG", allow_negative_numbers = true)]
        args: Vec<String>,
        /// The control fence you hold (`attach --control` prints it)
        #[arg(long, value_name = "N")]
        fence: Option<i64>,
        /// The frame the input aims at (the latest screenshot's id)
        #[arg(long, value_name = "FRAME_ID")]
        frame: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Close the agent's browser now (its profile stays; it opens again when used)
    Close {
        agent: String,
        #[command(flatten)]
        json: JsonFlag,
    },
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// A host agent with the managed browser
    pub agent: String,
    /// Print events as JSON lines (NDJSON) instead of text
    #[arg(long, conflicts_with_all = ["control", "web"])]
    pub json: bool,
    /// Take control: the model waits at its next browser call until you hand back. Without
    /// --web, act with `yy browser screenshot` and `yy browser screen ... --fence --frame`;
    /// a line on stdin hands back with it as the note, Ctrl-C or end of input releases
    /// control and leaves the model waiting
    #[arg(long)]
    pub control: bool,
    #[command(flatten)]
    pub view: super::computer_attach::WebFlags,
}

impl Columns for BrowserControl {
    const HEADERS: &'static [&'static str] = &[
        "agent",
        "runner",
        "control fence",
        "holder",
        "expires",
        "model paused",
    ];

    fn row(&self) -> Vec<String> {
        vec![
            self.agent.clone(),
            self.runner_id.clone(),
            self.control_fence.to_string(),
            opt(&self.holder),
            opt(&self.expires_at),
            self.paused.to_string(),
        ]
    }
}

/// Holds control without the page: renews it until a line on stdin hands back (the line
/// is the note), or Ctrl-C or the end of input releases it.
async fn control(client: &Client, screen: &Screen) -> anyhow::Result<()> {
    let (fence, mut renew) = super::computer_attach::take_control(client, screen).await?;
    let agent = output::clean(screen.name()).into_owned();
    eprintln!(
        "[you have control of agent {agent}'s browser (control fence {fence}); its model waits at its next browser call. Look with `yy browser screenshot {agent} -o FILE`, act with `yy browser screen {agent} ACTION ... --fence {fence} --frame ID`. A line here hands back with it as the note; Ctrl-C or end of input releases control]"
    );
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            _ = renew.tick() => screen.renew_control(client, fence, false).await?,
            line = lines.next_line() => {
                let Some(note) = line? else { break };
                let fence = screen.handback(client, note.trim()).await?;
                eprintln!("[handed back (control fence {fence}); the model's browser calls go on with your note]");
                return Ok(());
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    let _ = screen.renew_control(client, fence, true).await;
    eprintln!(
        "[control released; the model waits at its next browser call until `yy browser handback {agent} --note ...`]"
    );
    Ok(())
}

pub async fn run(args: BrowserArgs) -> anyhow::Result<()> {
    let client = super::context::client()?;
    match args.command {
        BrowserCommand::Show { agent, json } => {
            print_one(&client.browser_show(&agent).await?, json.json)
        }
        BrowserCommand::Attach(a) => {
            // Checked first: an agent without the browser is refused before anything runs.
            client.browser_show(&a.agent).await?;
            let screen = Screen::Browser(a.agent.clone());
            if a.view.web {
                return super::computer_web::run(&client, screen, a.control, a.view.open).await;
            }
            if a.control {
                return control(&client, &screen).await;
            }
            tokio::select! {
                r = super::computer_attach::follow(&client, &screen, a.json) => r,
                _ = tokio::signal::ctrl_c() => {
                    eprintln!("detached");
                    Ok(())
                }
            }
        }
        BrowserCommand::Handback { agent, note, json } => {
            let c = client.browser_handback(&agent, &note).await?;
            if json.json {
                return output::json(&c);
            }
            Ok(output::print(&format!(
                "handed agent {}'s browser back (control fence {}); its browser calls go on with your note",
                output::clean(&c.agent),
                c.control_fence
            ))?)
        }
        BrowserCommand::Screenshot {
            agent,
            output,
            json,
        } => {
            super::computer_screen::screenshot_of(
                &client,
                &Screen::Browser(agent),
                &output,
                json.json,
            )
            .await
        }
        BrowserCommand::Screen {
            agent,
            action,
            args,
            fence,
            frame,
            json,
        } => {
            let action = super::computer_screen::parse_action(&action, &args)?;
            let screen = Screen::Browser(agent);
            super::computer_screen::act_on(
                &client,
                &screen,
                &action,
                fence,
                frame.as_deref(),
                json.json,
            )
            .await
        }
        BrowserCommand::Close { agent, json } => {
            let cmd = client.browser_close(&agent).await?;
            let cmd = client.wait_command(&cmd.id, None).await?;
            let r: crate::api::browser::BrowserCloseResult =
                super::runner_ops::result_of(cmd, "close")?;
            if json.json {
                return output::json(&r);
            }
            Ok(output::print(if r.closed {
                "closed (its profile stays)"
            } else {
                "it was not open"
            })?)
        }
    }
}
