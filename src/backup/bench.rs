//! `yy bench backup`: backup plus verify of a generated data directory (a real database and
//! many artifact files of incompressible bytes) against `tar -cf` plus `sha256sum` of every
//! file of the same tree, in the same run, alternating so both see the same page cache.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rand::RngCore;
use serde::Serialize;

use super::archive::{self, Discard};
use super::progress::Progress;
use super::{BackupError, Kind, Result, io_error};

/// The target: yy's backup and verify within this factor of tar plus sha256sum.
pub const TARGET_RATIO: f64 = 1.5;

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[derive(Debug, Serialize)]
pub struct Figures {
    pub data_bytes: u64,
    pub files: u64,
    pub rounds: u32,
    /// Medians, in seconds.
    pub yy_create_s: f64,
    pub yy_verify_s: f64,
    pub yy_total_s: f64,
    pub tar_s: f64,
    pub sha256sum_s: f64,
    pub baseline_total_s: f64,
    pub ratio: f64,
    pub target_ratio: f64,
    pub target_met: bool,
    pub yy_mib_per_s: f64,
    pub baseline_mib_per_s: f64,
}

/// Removes the benchmark's directory on every way out.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sizes from 4 KiB to 2 MiB in a fixed spread, adding up to about `total`.
fn file_sizes(total: u64, files: u64) -> Vec<u64> {
    let mean = (total / files.max(1)).max(1);
    (0..files)
        .map(|i| {
            // 0.25x .. 1.75x of the mean, evenly spread.
            let f = 0.25 + 1.5 * (i % 16) as f64 / 15.0;
            ((mean as f64 * f) as u64).max(1)
        })
        .collect()
}

fn generate(dir: &Path, total: u64, files: u64) -> Result<u64> {
    crate::server::store::Store::open(dir)
        .map_err(|e| BackupError::Db(format!("creating the benchmark database: {e}")))?;
    let mut rng = rand::rng();
    let mut buf = vec![0u8; 2 * 1024 * 1024];
    let mut written = 0;
    for (i, size) in file_sizes(total, files).into_iter().enumerate() {
        let sub = dir.join("artifacts").join(format!("{:02x}", i % 64));
        std::fs::create_dir_all(&sub).map_err(|e| io_error("creating", &sub, e))?;
        let path = sub.join(format!("artifact-{i:05}.bin"));
        let mut f = std::fs::File::create(&path).map_err(|e| io_error("creating", &path, e))?;
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            rng.fill_bytes(&mut buf[..n]);
            std::io::Write::write_all(&mut f, &buf[..n])
                .map_err(|e| io_error("writing", &path, e))?;
            left -= n as u64;
        }
        written += size;
    }
    Ok(written)
}

fn timed(mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    let t = Instant::now();
    f()?;
    Ok(t.elapsed())
}

fn shell(script: &str) -> Result<()> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .map_err(|e| BackupError::Io(format!("running sh: {e}")))?;
    if !out.status.success() {
        return Err(BackupError::Io(format!(
            "`{script}` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs the benchmark in a new directory under `base`; `say` reports progress.
pub fn run(
    base: &Path,
    total: u64,
    files: u64,
    rounds: u32,
    say: &dyn Fn(&str),
) -> Result<Figures> {
    for tool in ["tar", "sha256sum", "find", "xargs"] {
        if Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            return Err(BackupError::NotFound(format!(
                "{tool} is not installed; the benchmark compares against it"
            )));
        }
    }
    let scratch = Scratch(base.join(format!("yy-bench-backup-{}", std::process::id())));
    let root = &scratch.0;
    let data = root.join("data");
    std::fs::create_dir_all(&data).map_err(|e| io_error("creating", &data, e))?;
    say(&format!(
        "generating {} in {files} artifact files under {}",
        human_bytes(total),
        data.display()
    ));
    let data_bytes = generate(&data, total, files)?;
    let archive = root.join("backup.yyb");
    let tarball = root.join("backup.tar");
    let sums = root.join("backup.sha256");
    let (mut create, mut verify, mut tar, mut sha) = (vec![], vec![], vec![], vec![]);
    let tar_cmd = format!("tar -cf {} -C {} .", quote(&tarball), quote(&data));
    let sum_cmd = format!(
        "cd {} && find . -type f -print0 | xargs -0 sha256sum > {}",
        quote(&data),
        quote(&sums)
    );
    for round in 1..=rounds {
        say(&format!("round {round} of {rounds}"));
        let mut ours = || -> Result<()> {
            let _ = std::fs::remove_file(&archive);
            create.push(
                timed(|| {
                    super::collect::create(Kind::ControlPlane, &data, &archive, vec![], false)
                        .map(|_| ())
                })?
                .as_secs_f64(),
            );
            verify.push(
                timed(|| {
                    let mut o = archive::open(&archive)?;
                    o.read_all(&mut Discard, &Progress::hidden()).map(|_| ())
                })?
                .as_secs_f64(),
            );
            Ok(())
        };
        let mut theirs = || -> Result<()> {
            let _ = std::fs::remove_file(&tarball);
            tar.push(timed(|| shell(&tar_cmd))?.as_secs_f64());
            sha.push(timed(|| shell(&sum_cmd))?.as_secs_f64());
            Ok(())
        };
        // Alternate who goes first: neither always gets the warmer cache.
        if round % 2 == 1 {
            ours()?;
            theirs()?;
        } else {
            theirs()?;
            ours()?;
        }
    }
    let yy_create_s = median(create);
    let yy_verify_s = median(verify);
    let tar_s = median(tar);
    let sha256sum_s = median(sha);
    let yy_total_s = yy_create_s + yy_verify_s;
    let baseline_total_s = tar_s + sha256sum_s;
    let ratio = yy_total_s / baseline_total_s;
    let mib = data_bytes as f64 / (1024.0 * 1024.0);
    Ok(Figures {
        data_bytes,
        files,
        rounds,
        yy_create_s,
        yy_verify_s,
        yy_total_s,
        tar_s,
        sha256sum_s,
        baseline_total_s,
        ratio,
        target_ratio: TARGET_RATIO,
        target_met: ratio <= TARGET_RATIO,
        yy_mib_per_s: mib / yy_total_s,
        baseline_mib_per_s: mib / baseline_total_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_add_up_to_about_the_total() {
        let sizes = file_sizes(1 << 30, 2048);
        let sum: u64 = sizes.iter().sum();
        assert!(
            (sum as f64 / (1u64 << 30) as f64 - 1.0).abs() < 0.05,
            "{sum}"
        );
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(10), "10 B");
    }
}
