//! `yy bench screen`, the operator's path: a control plane and a Runner of this binary
//! (child processes, loopback), a desktop computer on the Runner, and the figures an
//! operator sees: the screenshot round trip through the control plane (API call ->
//! control plane -> Runner -> guest -> back), the frames per second the web view's server
//! (`yy computer attach --web`) delivers to a fetch loop like the page's, and the input
//! latency (a click sent through the control plane until the cursor is read back there).

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::computer::summary;
use super::harness::{Options, harness, setup};
use super::progress;
use crate::api::computers::ComputerCreate;
use crate::api::params::AgentEnv;
use crate::api::states::ComputerState;
use crate::client::Client;
use crate::computer::screen::{HEIGHT, ScreenAction, WIDTH, png_size};
use crate::error::CliError;

/// Measures the operator's path on a fresh control plane, Runner and desktop computer.
pub async fn bench_operator(image: &str, samples: usize) -> anyhow::Result<serde_json::Value> {
    let bin = std::env::current_exe().context("finding this executable")?;
    progress("operator path: starting a control plane and a Runner");
    let mut s = setup(
        harness(bin)?,
        Options {
            computer_image: Some(image.into()),
            max_computers: Some(1),
            profile_cwd: Some("/workspace".into()),
            ..Default::default()
        },
    )
    .await?;
    let admin = s.admin.clone();
    let figures = s.while_alive(measure(&admin, samples)).await;
    drop(s); // the computer and every child stop before the report
    figures
}

async fn measure(admin: &Client, samples: usize) -> anyhow::Result<serde_json::Value> {
    admin
        .agent_create(&super::harness::bench_agent("screen", AgentEnv::Computer))
        .await?;
    progress("operator path: creating the desktop computer");
    let c = admin
        .computer_create(&ComputerCreate {
            agent: "screen".into(),
        })
        .await?;
    let deadline = Instant::now() + Duration::from_secs(180);
    let id = loop {
        let c = admin.computer_show(&c.id).await?;
        match c.state {
            ComputerState::Running => break c.id,
            ComputerState::Starting if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            other => {
                return Err(CliError::failure(format!(
                    "the benchmark's computer is {other}: {}",
                    c.last_error.unwrap_or_default()
                ))
                .into());
            }
        }
    };
    // Something to draw, as in the guest leg: two terminal windows full of text.
    let draw = crate::api::computers::ComputerExec {
        argv: vec![
            "/bin/sh".into(),
            "-c".into(),
            "for g in 100x40+0+0 100x40+620+180; do setsid xterm -geometry $g -e sh -c 'ls -lR /usr/share | head -5000; sleep 3600' >/dev/null 2>&1 < /dev/null & done".into(),
        ],
        timeout_ms: Some(30_000),
        output_cap_bytes: None,
    };
    let cmd = admin.computer_exec(&id, &draw).await?;
    admin.wait_command(&cmd.id, None).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;

    progress("operator path: screenshots through the control plane");
    admin
        .computer_screen_act(&id, &ScreenAction::Screenshot, None, None)
        .await?;
    let mut shots = Vec::new();
    let mut bytes = 0;
    for _ in 0..samples {
        let started = Instant::now();
        let r = admin
            .computer_screen_act(&id, &ScreenAction::Screenshot, None, None)
            .await?;
        let png = r
            .png_bytes()
            .ok_or_else(|| CliError::failure("a screenshot without a PNG"))?;
        let size = png_size(&png).map_err(CliError::failure)?;
        shots.push(started.elapsed());
        if size != (u32::from(WIDTH), u32::from(HEIGHT)) {
            return Err(CliError::failure(format!("a {size:?} screenshot")).into());
        }
        bytes = png.len();
    }

    progress("operator path: frames through the web view's server");
    let (frames, frames_elapsed) = web_frames(admin, &id, samples).await?;

    progress("operator path: clicks through the control plane, under control");
    let (clicks, readbacks) = controlled_clicks(admin, &id, samples).await?;
    progress("operator path: clicks from the web view's page endpoint, under control");
    let page_clicks = web_clicks(admin, &id, samples).await?;
    let (shot, frame, input) = (summary(&shots), summary(&frames), summary(&readbacks));
    let page_input = summary(&page_clicks);
    let fps = frames.len() as f64 / frames_elapsed.as_secs_f64();
    let p50 = |v: &serde_json::Value| v["p50_ms"].as_f64().unwrap_or(f64::MAX);
    let paced = 1000.0 / (p50(&frame) + PAGE_FRAME_GAP_MS);
    let input_ok = p50(&input) <= super::screen::INPUT_P50_MS;
    Ok(json!({
        "screenshot": {
            "what": format!("{WIDTH}x{HEIGHT} PNG: admin API call -> control plane -> Runner -> guest -> back, decoded"),
            "round_trip": shot,
            "png_bytes": bytes,
        },
        "web_view": {
            "what": "GET /frame of the attach --web server in a loop, one at a time (as the page fetches), PNG checked",
            "frame": frame,
            "frames_per_second": (fps * 10.0).round() / 10.0,
            "page_frames_per_second": (paced * 10.0).round() / 10.0,
            "page_gap_ms": PAGE_FRAME_GAP_MS,
        },
        "input": {
            "what": "left_click sent through the control plane until get_cursor_position (through the control plane) answers the point",
            "click": summary(&clicks),
            "latency": input,
            "target_p50_le_50ms": input_ok,
        },
        "web_input": {
            "what": "left_click POSTed to /input of an attach --web --control server (fence and frame id) until get_cursor_position through the control plane answers the point",
            "latency": page_input,
            "target_p50_le_50ms": p50(&page_input) <= super::screen::INPUT_P50_MS,
        },
        "ok": input_ok && p50(&page_input) <= super::screen::INPUT_P50_MS,
    }))
}

/// The pause the page makes between frames (`FRAME_GAP_MS` in web_view/page.js).
const PAGE_FRAME_GAP_MS: f64 = 100.0;

/// A browser's view of a running `attach --web` server: signed in with its one-time
/// link (the cookie kept), and the server's base URL.
struct Page {
    http: reqwest::Client,
    cookie: String,
    base: String,
}

impl Page {
    async fn sign_in(served: &crate::web_view::Served) -> anyhow::Result<Page> {
        let http = crate::api::http::http_builder(&served.url.parse()?).build()?;
        let signed = http.get(&served.url).send().await?;
        let cookie = signed
            .headers()
            .get(reqwest::header::SET_COOKIE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(str::to_string)
            .ok_or_else(|| CliError::failure("the web view set no cookie"))?;
        let base = served
            .url
            .split_once("/?")
            .map(|(base, _)| base.to_string())
            .unwrap_or_default();
        Ok(Page { http, cookie, base })
    }

    async fn checked(r: reqwest::Response) -> anyhow::Result<reqwest::Response> {
        if r.status().is_success() {
            return Ok(r);
        }
        Err(CliError::failure(format!(
            "the web view answered {}: {}",
            r.status(),
            r.text().await.unwrap_or_default()
        ))
        .into())
    }

    /// One frame, as the page gets it: the PNG (checked) and its frame id.
    async fn frame(&self) -> anyhow::Result<String> {
        let r = self
            .http
            .get(format!("{}/frame", self.base))
            .header(reqwest::header::COOKIE, &self.cookie)
            .send()
            .await?;
        let r = Self::checked(r).await?;
        let id = r
            .headers()
            .get("x-frame-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        png_size(&r.bytes().await?).map_err(CliError::failure)?;
        Ok(id)
    }

    /// One input, as the page sends it; the cursor position answered.
    async fn input(
        &self,
        fence: i64,
        frame: &str,
        action: &ScreenAction,
    ) -> anyhow::Result<(i32, i32)> {
        let r = self
            .http
            .post(format!("{}/input", self.base))
            .header(reqwest::header::COOKIE, &self.cookie)
            .json(&json!({ "fence": fence, "frame_id": frame, "action": action }))
            .send()
            .await?;
        let r: crate::computer::screen::ScreenResult = Self::checked(r).await?.json().await?;
        Ok((r.x, r.y))
    }
}

/// Fetches `n` frames from a real `attach --web` server one at a time; the time of each
/// and of them all.
async fn web_frames(
    admin: &Client,
    id: &str,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let served = crate::web_view::serve(
        admin.clone(),
        crate::web_view::Screen::Computer(id.to_string()),
        None,
    )
    .await?;
    let result = async {
        let page = Page::sign_in(&served).await?;
        let mut times = Vec::new();
        let all = Instant::now();
        for _ in 0..n {
            let started = Instant::now();
            page.frame().await?;
            times.push(started.elapsed());
        }
        Ok::<_, anyhow::Error>((times, all.elapsed()))
    }
    .await;
    served.stop().await;
    result
}

/// Clicks sent the way the page sends them (`POST /input` with the control fence and the
/// frame id, to a real `attach --web --control` server), each until the cursor is read
/// back through the control plane; control is taken first and released after.
/// Clicks by admin API calls, as input always goes: under control, with its fence and the
/// latest frame's id. Each click's time, and each click's with its read-back.
/// Takes control of computer `id`, waits until its model is paused, runs `work` with the
/// control fence, and hands control back whatever `work` gave.
async fn under_control<T, Fut>(
    admin: &Client,
    id: &str,
    work: impl FnOnce(i64) -> Fut,
) -> anyhow::Result<T>
where
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let c = admin.computer_control(id).await?;
    let fence = c.control_fence;
    let result = async {
        let pause = c.command_id.clone().unwrap_or_default();
        let cmd = admin.wait_command(&pause, None).await?;
        crate::client::result_of::<crate::api::computers::PauseResult>(cmd, "pause")?;
        work(fence).await
    }
    .await;
    let _ = admin.computer_control_renew(id, fence, true).await;
    result
}

async fn controlled_clicks(
    admin: &Client,
    id: &str,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    under_control(admin, id, |fence| async move {
        let frame = admin
            .computer_screen_act(id, &ScreenAction::Screenshot, None, None)
            .await?
            .frame_id;
        let mut clicks = Vec::new();
        let mut readbacks = Vec::new();
        for i in 0..n {
            let (x, y) = ((37 * i as i32) % 1200 + 20, (53 * i as i32) % 760 + 20);
            let started = Instant::now();
            let click = ScreenAction::LeftClick { x, y };
            admin
                .computer_screen_act(id, &click, Some(fence), Some(&frame))
                .await?;
            clicks.push(started.elapsed());
            let r = admin
                .computer_screen_act(id, &ScreenAction::GetCursorPosition, None, None)
                .await?;
            readbacks.push(started.elapsed());
            cursor_is_at(&r, x, y)?;
        }
        Ok((clicks, readbacks))
    })
    .await
}

/// A click landed: the cursor read back is where it was sent.
fn cursor_is_at(r: &crate::api::screen::ScreenResult, x: i32, y: i32) -> anyhow::Result<()> {
    if (r.x, r.y) != (x, y) {
        return Err(CliError::failure(format!(
            "the cursor is at ({}, {}), not ({x}, {y})",
            r.x, r.y
        ))
        .into());
    }
    Ok(())
}

async fn web_clicks(admin: &Client, id: &str, n: usize) -> anyhow::Result<Vec<Duration>> {
    under_control(admin, id, |fence| async move {
        let served = crate::web_view::serve(
            admin.clone(),
            crate::web_view::Screen::Computer(id.to_string()),
            Some(fence),
        )
        .await?;
        let clicks = async {
            let page = Page::sign_in(&served).await?;
            let frame = page.frame().await?;
            let mut times = Vec::new();
            for i in 0..n {
                let (x, y) = ((41 * i as i32) % 1200 + 20, (59 * i as i32) % 760 + 20);
                let started = Instant::now();
                page.input(fence, &frame, &ScreenAction::LeftClick { x, y })
                    .await?;
                let r = admin
                    .computer_screen_act(id, &ScreenAction::GetCursorPosition, None, None)
                    .await?;
                times.push(started.elapsed());
                cursor_is_at(&r, x, y)?;
            }
            Ok::<_, anyhow::Error>(times)
        }
        .await;
        served.stop().await;
        clicks
    })
    .await
}
