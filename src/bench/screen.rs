//! `yy bench screen`: a desktop computer's screen through the guest agent: the screenshot
//! round trip (a 1280x800 PNG from the guest's display to the host, decoded) and the input
//! latency (a pointer move sent until the cursor is read back where it was sent).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use super::computer::summary;
use crate::computer::docker::Provider;
use crate::computer::protocol::ExecParams;
use crate::computer::screen::{HEIGHT, ScreenAction, WIDTH, png_size};
use crate::computer::{ComputerError, ComputerSpec, Limits, validate_image_id};
use crate::error::CliError;
use crate::output;

#[derive(Debug, clap::Args)]
pub struct ScreenBenchArgs {
    /// The full image id (sha256:...) of a desktop image (`yy image prepare --recipe desktop`)
    pub image: String,
    /// Samples of each figure
    #[arg(long, value_name = "N", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub samples: u32,
    /// Print the figures and targets as one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Target from the issue: input latency p50.
pub const INPUT_P50_MS: f64 = 50.0;

const BENCH_DIR: &str = "/var/tmp/yy/bench";

/// Measures screenshots and pointer moves on a fresh desktop computer.
pub async fn bench_screen(image: &str, samples: usize) -> Result<serde_json::Value, ComputerError> {
    validate_image_id(image)?;
    let provider = Provider::connect().await?;
    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let spec = ComputerSpec {
        owner_key: format!("bench/screen-{run}"),
        runner_id: "bench".into(),
        computer_id: format!("bench-screen-{run}"),
        agent_id: "bench".into(),
        account_id: "bench".into(),
        image_id: image.into(),
        generation: 0,
        workspace_host_dir: PathBuf::from(BENCH_DIR).join(&run),
        guest_cwd: "/workspace".into(),
        limits: Limits::desktop(),
        network: Default::default(),
    };
    let (created, session) = provider.launch(&spec).await?;
    let result = async {
        session.display().await?;
        // Something to draw: two terminal windows with text, so the PNG is not trivial.
        session
            .exec(
                ExecParams::shell(
                    "for g in 100x40+0+0 100x40+620+180; do setsid xterm -geometry $g -e sh -c 'ls -lR /usr/share | head -5000; sleep 3600' >/dev/null 2>&1 < /dev/null & done",
                ),
                None,
            )
            .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let mut shots = Vec::new();
        let mut bytes = 0usize;
        session.screen(ScreenAction::Screenshot).await?;
        for _ in 0..samples {
            let started = Instant::now();
            let r = session.screen(ScreenAction::Screenshot).await?;
            let png = r
                .png_bytes()
                .ok_or_else(|| ComputerError::Guest("a screenshot without a PNG".into()))?;
            let size = png_size(&png).map_err(ComputerError::Guest)?;
            shots.push(started.elapsed());
            if size != (u32::from(WIDTH), u32::from(HEIGHT)) {
                return Err(ComputerError::Guest(format!("a {size:?} screenshot")));
            }
            bytes = png.len();
        }
        let mut moves = Vec::new();
        for i in 0..samples {
            let (x, y) = ((37 * i as i32) % 1200 + 20, (53 * i as i32) % 760 + 20);
            let started = Instant::now();
            let r = session.screen(ScreenAction::MoveCursor { x, y }).await?;
            moves.push(started.elapsed());
            if (r.x, r.y) != (x, y) {
                return Err(ComputerError::Guest(format!(
                    "the cursor is at ({}, {}), not ({x}, {y})",
                    r.x, r.y
                )));
            }
        }
        Ok::<_, ComputerError>((shots, moves, bytes))
    }
    .await;
    drop(session);
    let _ = provider.remove(&created.id).await;
    let _ = std::fs::remove_dir_all(PathBuf::from(BENCH_DIR).join(&run));
    let (shots, moves, bytes) = result?;
    let (shot, input) = (summary(&shots), summary(&moves));
    let p50 = |v: &serde_json::Value| v["p50_ms"].as_f64().unwrap_or(f64::MAX);
    let fps = if p50(&shot) > 0.0 {
        (10_000.0 / p50(&shot)).round() / 10.0
    } else {
        0.0
    };
    let input_ok = p50(&input) <= INPUT_P50_MS;
    Ok(json!({
        "image": image,
        "samples": samples,
        "screenshot": {
            "what": format!("{WIDTH}x{HEIGHT} PNG from the guest's display to the host through the guest session, decoded"),
            "round_trip": shot,
            "png_bytes": bytes,
            "frames_per_second_sequential": fps,
        },
        "input": {
            "what": "move_cursor sent until the cursor is read back at the point sent",
            "latency": input,
            "target_p50_le_50ms": input_ok,
        },
        "ok": input_ok,
    }))
}

/// `yy bench screen`: measures and prints the figures.
pub async fn run(args: ScreenBenchArgs) -> anyhow::Result<()> {
    let mut figures = bench_screen(&args.image, args.samples as usize)
        .await
        .map_err(|e| CliError::new(crate::error::computer_exit(&e), e.to_string()))?;
    let operator =
        super::screen_operator::bench_operator(&args.image, args.samples as usize).await?;
    figures["ok"] = json!(figures["ok"] == true && operator["ok"] == true);
    figures["operator"] = operator;
    if args.json {
        return output::json(&figures);
    }
    let ms = |v: &serde_json::Value, k: &str| format!("{:.1} ms", v[k].as_f64().unwrap_or(0.0));
    let s = &figures["screenshot"];
    let i = &figures["input"];
    let mut rows = vec![
        vec![
            "screenshot round trip p50".into(),
            ms(&s["round_trip"], "p50_ms"),
            "-".into(),
            "-".into(),
        ],
        vec![
            "screenshot round trip p90".into(),
            ms(&s["round_trip"], "p90_ms"),
            "-".into(),
            "-".into(),
        ],
        vec![
            "screenshots per second (one at a time)".into(),
            format!("{}", s["frames_per_second_sequential"]),
            "-".into(),
            "-".into(),
        ],
        vec![
            "PNG size".into(),
            format!("{} bytes", s["png_bytes"]),
            "-".into(),
            "-".into(),
        ],
        vec![
            "input latency p50 (move, read back)".into(),
            ms(&i["latency"], "p50_ms"),
            format!("<= {INPUT_P50_MS} ms"),
            if i["target_p50_le_50ms"] == true {
                "pass"
            } else {
                "MISSED"
            }
            .into(),
        ],
    ];
    let o = &figures["operator"];
    let pass = |ok: bool| if ok { "pass" } else { "MISSED" }.to_string();
    rows.extend([
        vec![
            "operator: screenshot round trip p50 (through the control plane)".into(),
            ms(&o["screenshot"]["round_trip"], "p50_ms"),
            "-".into(),
            "-".into(),
        ],
        vec![
            "operator: web view frame p50 (attach --web /frame)".into(),
            ms(&o["web_view"]["frame"], "p50_ms"),
            "-".into(),
            "-".into(),
        ],
        vec![
            "operator: web view frames per second (back to back)".into(),
            format!("{}", o["web_view"]["frames_per_second"]),
            "-".into(),
            "-".into(),
        ],
        vec![
            "operator: web view frames per second (page pacing)".into(),
            format!("{}", o["web_view"]["page_frames_per_second"]),
            "-".into(),
            "-".into(),
        ],
        vec![
            "operator: click round trip p50".into(),
            ms(&o["input"]["click"], "p50_ms"),
            "-".into(),
            "-".into(),
        ],
        vec![
            "operator: input latency p50 (click, cursor read back)".into(),
            ms(&o["input"]["latency"], "p50_ms"),
            format!("<= {INPUT_P50_MS} ms"),
            pass(o["input"]["target_p50_le_50ms"] == true),
        ],
        vec![
            "operator: web view input latency p50 (POST /input click, read back)".into(),
            ms(&o["web_input"]["latency"], "p50_ms"),
            format!("<= {INPUT_P50_MS} ms"),
            pass(o["web_input"]["target_p50_le_50ms"] == true),
        ],
    ]);
    output::print(&output::table(
        &["figure", "value", "target", "result"],
        rows,
    ))?;
    Ok(())
}
