//! `yy image`: build, verify and list the computer image on the local Docker engine.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::JsonFlag;
use crate::computer::docker::Provider;
use crate::computer::image::{self, BuildOptions};
use crate::computer::{ComputerError, image_verify};
use crate::error::CliError;
use crate::output;

#[derive(Debug, Args)]
pub struct ImageArgs {
    #[command(subcommand)]
    pub command: ImageCommand,
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build the computer image from Debian packages (no registry needed); prints the full
    /// image ID as the last line
    Build(BuildArgs),
    /// Start a throw-away hardened computer from IMAGE_ID and check it; exits 1 if any
    /// check fails
    Verify {
        /// Full image ID (sha256: and 64 hex digits)
        #[arg(value_name = "IMAGE_ID")]
        image: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List the yy computer images on this Docker engine
    #[command(visible_alias = "ls")]
    List(JsonFlag),
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Debian mirror for debootstrap
    #[arg(long, value_name = "URL", default_value = image::DEFAULT_MIRROR)]
    pub mirror: String,
    /// Mirror for SUITE-security updates
    #[arg(long, value_name = "URL", default_value = image::DEFAULT_SECURITY_MIRROR)]
    pub security_mirror: String,
    /// Debian suite (default: this host's release codename, else bookworm)
    #[arg(long, value_name = "SUITE")]
    pub suite: Option<String>,
    /// Package list, one per line (default: the list built into yy, images/base/packages.txt)
    #[arg(long, value_name = "FILE")]
    pub packages: Option<PathBuf>,
    /// The guest agent binary (default: this yy, which must be statically linked)
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Also tag the image (e.g. yy-computer:latest); computers still use the full ID
    #[arg(long, value_name = "NAME")]
    pub tag: Option<String>,
    /// Cache of root filesystems, by recipe
    #[arg(long, value_name = "DIR", default_value = image::DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// Write the package lock here (default: images/base/packages.lock when that directory
    /// exists under the current directory)
    #[arg(long, value_name = "FILE")]
    pub lock: Option<PathBuf>,
    /// Do not apply SUITE-updates and SUITE-security (point release only)
    #[arg(long)]
    pub no_updates: bool,
    /// Rebuild the root filesystem even when a cached one matches the recipe
    #[arg(long)]
    pub fresh: bool,
}

fn cli(e: ComputerError) -> anyhow::Error {
    CliError::new(crate::error::computer_exit(&e), e.to_string()).into()
}

pub async fn run(args: ImageArgs) -> anyhow::Result<()> {
    match args.command {
        ImageCommand::Build(b) => build(b).await,
        ImageCommand::Verify { image, json } => verify(&image, json.json).await,
        ImageCommand::List(json) => list(json.json).await,
    }
}

async fn build(b: BuildArgs) -> anyhow::Result<()> {
    let lock_out = b.lock.or_else(|| {
        let dir = PathBuf::from("images/base");
        dir.is_dir().then(|| dir.join("packages.lock"))
    });
    let opts = BuildOptions {
        mirror: b.mirror,
        security_mirror: b.security_mirror,
        suite: b.suite,
        packages_file: b.packages,
        binary: b.binary,
        tag: b.tag,
        cache_dir: b.cache_dir,
        lock_out,
        updates: !b.no_updates,
        fresh: b.fresh,
    };
    let terminal = std::io::stderr().is_terminal();
    let progress = move |line: &str| {
        if terminal || line.starts_with("warning:") {
            eprintln!("yy image build: {line}");
        }
    };
    let started = std::time::Instant::now();
    let built = image::build(&opts, &progress).await.map_err(cli)?;
    progress(&format!(
        "built {} (yy {}, {} packages) in {:.1}s",
        built.image_id,
        built.yy_version,
        built.packages,
        started.elapsed().as_secs_f64()
    ));
    output::print(&built.image_id)?;
    Ok(())
}

async fn verify(image: &str, as_json: bool) -> anyhow::Result<()> {
    crate::computer::validate_image_id(image).map_err(cli)?;
    let provider = Provider::connect().await.map_err(cli)?;
    let report = image_verify::verify_image(&provider, image)
        .await
        .map_err(cli)?;
    if as_json {
        output::json(&report)?;
    } else {
        let rows = report
            .checks
            .iter()
            .map(|c| {
                vec![
                    if c.ok { "PASS" } else { "FAIL" }.to_string(),
                    c.name.clone(),
                    c.want.clone(),
                    c.got.clone(),
                ]
            })
            .collect();
        output::print(&output::table(&["result", "check", "want", "got"], rows))?;
    }
    let failed = report.checks.iter().filter(|c| !c.ok).count();
    if failed > 0 {
        return Err(CliError::failure(format!(
            "image {image} failed {failed} of {} checks",
            report.checks.len()
        ))
        .into());
    }
    Ok(())
}

fn short(digest: &str) -> String {
    digest.chars().take("sha256:".len() + 12).collect()
}

async fn list(as_json: bool) -> anyhow::Result<()> {
    let provider = Provider::connect().await.map_err(cli)?;
    let rows = image::list(&provider).await.map_err(cli)?;
    output::list(
        &rows,
        as_json,
        &["id", "created", "yy version", "recipe", "tags"],
        |r| {
            vec![
                r.id.clone(),
                r.created.clone(),
                r.yy_version.clone(),
                short(&r.recipe),
                if r.tags.is_empty() {
                    "-".into()
                } else {
                    r.tags.join(",")
                },
            ]
        },
    )
}
