//! `yy completions` and `yy man`: generated from the clap definitions; the results are
//! committed in completions/ and man/ and a test fails when they are stale.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ShellArg {
    Bash,
    Zsh,
    Fish,
}

impl ShellArg {
    pub const ALL: [ShellArg; 3] = [ShellArg::Bash, ShellArg::Zsh, ShellArg::Fish];

    fn name(self) -> &'static str {
        match self {
            ShellArg::Bash => "bash",
            ShellArg::Zsh => "zsh",
            ShellArg::Fish => "fish",
        }
    }

    /// The file name the script is committed under in completions/.
    pub fn file_name(self) -> &'static str {
        match self {
            ShellArg::Bash => "yy.bash",
            ShellArg::Zsh => "_yy",
            ShellArg::Fish => "yy.fish",
        }
    }
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    pub shell: ShellArg,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write a page per command into DIR instead of printing yy(1) to stdout
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// The script a shell sources: it asks `yy` itself at each <TAB>, so that names and ids
/// (agents, Runners, computers, sessions) complete from the server, and subcommands and
/// flags from this yy's own definitions.
pub fn completion_script(shell: ShellArg) -> Vec<u8> {
    super::complete::registration(shell.name())
}

/// Every man page: (file name, contents), for yy and each subcommand at every depth.
pub fn man_pages() -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    fn walk(
        cmd: clap::Command,
        name: String,
        out: &mut Vec<(String, Vec<u8>)>,
    ) -> anyhow::Result<()> {
        let cmd = cmd.name(name.clone());
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
        out.push((format!("{name}.1"), buf));
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            walk(sub.clone(), format!("{name}-{}", sub.get_name()), out)?;
        }
        Ok(())
    }
    let mut cmd = crate::cli::command();
    cmd.build();
    let mut out = Vec::new();
    walk(cmd, "yy".into(), &mut out)?;
    Ok(out)
}

pub fn completions(args: CompletionsArgs) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&completion_script(args.shell))?;
    Ok(stdout.flush()?)
}

pub fn man(args: ManArgs) -> anyhow::Result<()> {
    let pages = man_pages()?;
    match args.out_dir {
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&pages[0].1)?;
            Ok(stdout.flush()?)
        }
        Some(dir) => write_all(&dir, &pages),
    }
}

fn write_all(dir: &Path, pages: &[(String, Vec<u8>)]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (name, data) in pages {
        let path = dir.join(name);
        crate::fsutil::write_atomic(&path, data, 0o644)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    crate::output::print(&format!(
        "wrote {} man pages to {}",
        pages.len(),
        dir.display()
    ))?;
    Ok(())
}
