//! `yy subtask`: the subtasks of a goal, their owners, states and results.

use clap::{Args, Subcommand};

use super::{ById, Columns, JsonFlag, context, print_list, print_one};
use crate::api::teams::Subtask;
use crate::output::opt;

#[derive(Debug, Args)]
pub struct SubtaskArgs {
    #[command(subcommand)]
    pub command: SubtaskCommand,
}

#[derive(Debug, Subcommand)]
pub enum SubtaskCommand {
    /// List a goal's subtasks in order
    #[command(visible_alias = "ls")]
    List {
        /// The goal's id
        #[arg(long)]
        goal: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Show a subtask with its inputs, review note and result
    Show(ById),
}

impl Columns for Subtask {
    const HEADERS: &'static [&'static str] = &[
        "#",
        "title",
        "owner",
        "state",
        "attempts",
        "deps",
        "note",
        "result",
        "artifacts",
        "id",
    ];

    fn row(&self) -> Vec<String> {
        let result = self.result.as_ref();
        vec![
            self.seq.to_string(),
            self.title.clone(),
            self.owner.clone(),
            self.state.to_string(),
            self.attempts.to_string(),
            self.deps.len().to_string(),
            opt(&self.note),
            result
                .map(|r| r.text.chars().take(200).collect())
                .unwrap_or_else(|| "-".into()),
            result
                .map(|r| {
                    r.artifacts
                        .iter()
                        .map(|a| format!("{} ({})", a.name, a.id))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default(),
            self.id.clone(),
        ]
    }
}

pub async fn run(args: SubtaskArgs) -> anyhow::Result<()> {
    let client = context::client()?;
    match args.command {
        SubtaskCommand::List { goal, json } => {
            print_list(&client.subtask_list(&goal).await?, json.json)
        }
        SubtaskCommand::Show(ById { id, json }) => {
            print_one(&client.subtask_show(&id).await?, json.json)
        }
    }
}
