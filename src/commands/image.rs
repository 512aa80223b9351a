//! `yy image`: build, verify and list the computer image on the local Docker engine.

use std::path::PathBuf;
use std::sync::Mutex;

use clap::{Args, Subcommand};

use super::JsonFlag;
use super::progress::Progress;
use crate::api::words::plural;
use crate::computer::docker::Provider;
use crate::computer::engine::EngineArgs;
use crate::computer::image::{self, BuildOptions};
use crate::computer::recipes;
use crate::computer::{ComputerError, image_rm as rm, image_verify};
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
    /// Build an image from a recipe, run the verify ladder on it and print its full image
    /// ID (for `yy runner update --computer-image`); exits 1 on the first failed step
    Prepare(PrepareArgs),
    /// Start a throw-away hardened computer from IMAGE_ID and check it; exits 1 if any
    /// check fails
    Verify {
        /// Full image ID (sha256: and 64 hex digits)
        #[arg(value_name = "IMAGE_ID")]
        image: String,
        #[command(flatten)]
        json: JsonFlag,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// List the yy computer images on this Docker engine
    #[command(visible_alias = "ls")]
    List {
        #[command(flatten)]
        json: JsonFlag,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Show one yy image (by id, unique id prefix or tag) with the packages it was built
    /// with
    Show {
        #[arg(value_name = "IMAGE")]
        image: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Remove yy images (by id, unique id prefix or tag) that no container was made from
    /// and no Runner of the current login's server is configured with
    Rm {
        #[arg(value_name = "IMAGE", required = true)]
        images: Vec<String>,
        #[command(flatten)]
        check: InUseArgs,
    },
    /// Remove every yy image that no container was made from and no Runner of the current
    /// login's server is configured with, and the base images nothing needs any more
    Prune {
        /// Do not ask for confirmation
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        check: InUseArgs,
    },
}

#[derive(Debug, Args)]
pub struct InUseArgs {
    /// Check only this Docker engine's containers, not the Runners of the current login's
    /// server (for a machine without a login)
    #[arg(long)]
    pub local_only: bool,
}

#[derive(Debug, Args)]
pub struct PrepareArgs {
    #[command(flatten)]
    pub build: BuildArgs,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The recipe (images/RECIPE): base (command-line tools) or desktop (adds a display, a
    /// window manager, Firefox ESR and CJK/emoji fonts) for computers; server: the control
    /// plane (`yy serve` as user yy, HTTPS with its own certificate, data on a volume at
    /// /var/lib/yy; see docs/deploy.md)
    #[arg(long, value_name = "RECIPE", default_value = "base", value_parser = ["base", "desktop", "server"])]
    pub recipe: String,
    /// Debian mirror for debootstrap
    #[arg(long, value_name = "URL", default_value = image::DEFAULT_MIRROR)]
    pub mirror: String,
    /// Mirror for SUITE-security updates
    #[arg(long, value_name = "URL", default_value = image::DEFAULT_SECURITY_MIRROR)]
    pub security_mirror: String,
    /// Debian suite (default: the one the recipe pins, bookworm)
    #[arg(long, value_name = "SUITE")]
    pub suite: Option<String>,
    /// Package list, one per line (default: the recipe's list built into yy,
    /// images/RECIPE/packages.txt)
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
    /// The package lock to compare with (name=version sha256 per line); written when it
    /// does not exist (default: images/RECIPE/packages.lock when that directory exists under
    /// the current directory, else the lock built into yy). The build installs the suite's
    /// current packages and says how they differ from it; the image records what it got
    #[arg(long, value_name = "FILE")]
    pub lock: Option<PathBuf>,
    /// Refuse any difference from the lock (exit 6), e.g. with --mirror pointing at a
    /// frozen mirror of your own
    #[arg(long, conflicts_with = "update_lock")]
    pub locked: bool,
    /// Rewrite the lock file with the installed packages when they differ from it
    #[arg(long)]
    pub update_lock: bool,
    /// Do not apply SUITE-updates and SUITE-security (point release only)
    #[arg(long)]
    pub no_updates: bool,
    /// Rebuild the root filesystem even when a cached one matches the recipe
    #[arg(long)]
    pub fresh: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn cli(e: ComputerError) -> anyhow::Error {
    CliError::new(crate::error::computer_exit(&e), e.to_string()).into()
}

pub async fn run(args: ImageArgs) -> anyhow::Result<()> {
    match args.command {
        ImageCommand::Build(b) => build(b).await,
        ImageCommand::Prepare(p) => prepare(p).await,
        ImageCommand::Verify {
            image,
            json,
            engine,
        } => verify(&image, json.json, engine).await,
        ImageCommand::List { json, engine } => list(json.json, engine).await,
        ImageCommand::Show { image, json } => show(&image, json.json).await,
        ImageCommand::Rm { images, check } => rm(&images, check).await,
        ImageCommand::Prune { yes, check } => prune(yes, check).await,
    }
}

fn options(b: BuildArgs) -> anyhow::Result<BuildOptions> {
    let recipe = recipes::builtin(&b.recipe).map_err(cli)?;
    let lock_out = b.lock.or_else(|| {
        let dir = PathBuf::from("images").join(recipe.name);
        (b.packages.is_none() && dir.is_dir()).then(|| dir.join("packages.lock"))
    });
    Ok(BuildOptions {
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
        engine: b.engine.engine,
        recipe,
        update_lock: b.update_lock,
        locked: b.locked,
    })
}

/// The steps of a build: a spinner with the current step on a terminal, each step as a
/// line otherwise; warnings and notes (`note: `) always stay on screen.
fn steps_for(command: &str) -> Mutex<Progress> {
    Mutex::new(Progress::steps(format!("yy image {command}")))
}

fn step(steps: &Mutex<Progress>, line: &str) {
    let mut steps = steps.lock().unwrap_or_else(|e| e.into_inner());
    if line.starts_with("warning: ") {
        steps.note(line);
    } else if let Some(note) = line.strip_prefix("note: ") {
        steps.note(note);
    } else {
        steps.step(line);
    }
}

async fn build(b: BuildArgs) -> anyhow::Result<()> {
    let opts = options(b)?;
    let steps = steps_for("build");
    let progress = |line: &str| step(&steps, line);
    let started = std::time::Instant::now();
    let built = image::build(&opts, &progress).await.map_err(cli)?;
    steps
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .finish();
    eprintln!(
        "yy image build: built {} (yy {}, {} packages) in {}",
        built.image_id,
        built.yy_version,
        built.packages,
        super::progress::human_duration(started.elapsed())
    );
    output::print(&built.image_id)?;
    Ok(())
}

/// Build, then the verify ladder; the image ID is printed once it passed.
async fn prepare(p: PrepareArgs) -> anyhow::Result<()> {
    let json = p.json.json;
    let opts = options(p.build)?;
    if opts.recipe.server {
        return Err(CliError::usage(
            "the server recipe is not a computer image and has no verify ladder: build it with `yy image build --recipe server --tag NAME`",
        )
        .into());
    }
    let steps = steps_for("prepare");
    let progress = |line: &str| step(&steps, line);
    let started = std::time::Instant::now();
    let built = image::build(&opts, &progress).await.map_err(cli)?;
    progress(&format!(
        "built {} ({} recipe, {} packages) in {:.1}s; verifying",
        built.image_id,
        built.recipe_name,
        built.packages,
        started.elapsed().as_secs_f64()
    ));
    let provider = Provider::connect_to(opts.engine).await.map_err(cli)?;
    let report = image_verify::verify_image_with(&provider, &built.image_id, &|c| {
        progress(&format!(
            "{} {}: {}",
            if c.ok { "PASS" } else { "FAIL" },
            c.name,
            c.got
        ))
    })
    .await
    .map_err(cli)?;
    steps
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .finish();
    show_report(&report, json)?;
    report_result(&report)?;
    eprintln!(
        "yy image prepare: ready in {}: yy runner update RUNNER --computer-image {}",
        super::progress::human_duration(started.elapsed()),
        built.image_id
    );
    if !json {
        output::print(&built.image_id)?;
    }
    Ok(())
}

async fn verify(image: &str, as_json: bool, engine: EngineArgs) -> anyhow::Result<()> {
    crate::computer::validate_image_id(image).map_err(cli)?;
    let provider = Provider::connect_to(engine.engine).await.map_err(cli)?;
    let report = image_verify::verify_image(&provider, image)
        .await
        .map_err(cli)?;
    show_report(&report, as_json)?;
    report_result(&report)
}

fn show_report(report: &image_verify::Report, as_json: bool) -> anyhow::Result<()> {
    if as_json {
        return output::json(report);
    }
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
    Ok(output::print(&output::table(
        &["result", "check", "want", "got"],
        rows,
    ))?)
}

fn report_result(report: &image_verify::Report) -> anyhow::Result<()> {
    let failed = report.checks.iter().filter(|c| !c.ok).count();
    if failed > 0 {
        return Err(CliError::failure(format!(
            "image {} failed {failed} of {}",
            report.image,
            plural(report.checks.len(), "check", "checks")
        ))
        .into());
    }
    Ok(())
}

fn short(digest: &str) -> String {
    digest.chars().take("sha256:".len() + 12).collect()
}

async fn list(as_json: bool, engine: EngineArgs) -> anyhow::Result<()> {
    let provider = Provider::connect_to(engine.engine).await.map_err(cli)?;
    let rows = rm::list(&provider).await.map_err(cli)?;
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

async fn show(key: &str, as_json: bool) -> anyhow::Result<()> {
    let provider = Provider::connect().await.map_err(cli)?;
    let images = rm::list(&provider).await.map_err(cli)?;
    let row = rm::find(&images, key).map_err(cli)?;
    let details = image::details(&provider, row).await.map_err(cli)?;
    let r = &details.row;
    let packages = details.packages.as_ref().map_or_else(
        || "not recorded (built by a yy that did not record them)".to_string(),
        |lock| lock.len().to_string(),
    );
    output::show(
        &details,
        as_json,
        vec![
            ("id", r.id.clone()),
            ("created", r.created.clone()),
            ("yy version", r.yy_version.clone()),
            ("recipe", format!("{} {}", details.recipe_name, r.recipe)),
            ("guest agent", r.binary.clone()),
            (
                "tags",
                if r.tags.is_empty() {
                    "-".into()
                } else {
                    r.tags.join(",")
                },
            ),
            ("packages", packages),
        ],
    )?;
    if let (false, Some(lock)) = (as_json, &details.packages) {
        let lines = lock
            .iter()
            .map(|(name, l)| vec![name.clone(), l.version.clone(), l.sha256.clone()])
            .collect();
        output::print("")?;
        output::print(&output::table(&["package", "version", "sha256"], lines))?;
    }
    Ok(())
}

/// Images that must stay: the ones containers were made from, and unless `local_only` the
/// ones the Runners of the current login's server keep (current, pending or previous), with
/// why. A Runner's reason comes first: it says what keeps the image longest.
async fn in_use(
    provider: &Provider,
    check: &InUseArgs,
) -> anyhow::Result<std::collections::HashMap<String, String>> {
    let containers = rm::used_by_containers(provider).await.map_err(cli)?;
    let mut used = std::collections::HashMap::new();
    if !check.local_only {
        let runners = async {
            super::context::client()?
                .runner_list()
                .await
                .map_err(anyhow::Error::from)
        };
        let runners = runners.await.map_err(|e| {
            CliError::failure(format!(
                "cannot ask the control plane which images its Runners use ({e}); log in, or pass --local-only to check this Docker engine only"
            ))
        })?;
        for r in runners
            .into_iter()
            .filter(|r| r.state == crate::api::views::RunnerState::Enabled)
        {
            let kept = [
                (r.computer_image, "is configured with it"),
                (r.pending_image, "has it as its pending image"),
                (
                    r.previous_image,
                    "keeps it as its previous image (for --rollback)",
                ),
            ];
            for (image, why) in kept {
                if let Some(image) = image {
                    used.entry(image)
                        .or_insert_with(|| format!("runner {} {why}", r.id));
                }
            }
        }
    }
    for id in containers {
        used.entry(id)
            .or_insert_with(|| "a container was made from it".to_string());
    }
    Ok(used)
}

async fn rm(keys: &[String], check: InUseArgs) -> anyhow::Result<()> {
    let provider = Provider::connect().await.map_err(cli)?;
    let images = rm::list(&provider).await.map_err(cli)?;
    let mut chosen = Vec::new();
    for key in keys {
        chosen.push(rm::find(&images, key).map_err(cli)?.id.clone());
    }
    let used = in_use(&provider, &check).await?;
    for id in &chosen {
        if let Some(why) = used.get(id) {
            return Err(CliError::new(
                crate::error::Exit::Conflict,
                format!("image {id} is in use ({why}); nothing was removed"),
            )
            .into());
        }
    }
    for id in &chosen {
        rm::remove(&provider, id).await.map_err(cli)?;
        output::print(&format!("removed {id}"))?;
    }
    Ok(())
}

async fn prune(yes: bool, check: InUseArgs) -> anyhow::Result<()> {
    let provider = Provider::connect().await.map_err(cli)?;
    let images = rm::list(&provider).await.map_err(cli)?;
    let used = in_use(&provider, &check).await?;
    let unused: Vec<&str> = images
        .iter()
        .map(|i| i.id.as_str())
        .filter(|id| !used.contains_key(*id))
        .collect();
    if !unused.is_empty() {
        super::prompt::confirm(
            &format!(
                "remove {}?",
                plural(unused.len(), "unused yy image", "unused yy images")
            ),
            yes,
        )?;
    }
    for id in &unused {
        rm::remove(&provider, id).await.map_err(cli)?;
        output::print(&format!("removed {id}"))?;
    }
    // Base images become unused only once the images built on them are gone.
    for id in rm::unused_bases(&provider).await.map_err(cli)? {
        if rm::remove(&provider, &id).await.is_ok() {
            output::print(&format!("removed base {id}"))?;
        }
    }
    let kept = images.len() - unused.len();
    eprintln!("{} removed, {kept} kept (in use)", unused.len());
    Ok(())
}
