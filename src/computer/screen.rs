//! The desktop of a computer, driven by the guest agent: the X display (Xvfb, started on
//! first use with a window manager), screen actions through XTEST (named and shaped like
//! the cua computer-server command set) and the browser with its profile in the
//! workspace. Pure Rust X11 (x11rb), so the static guest needs no C library.
//!
//! The wire types live here too: they are part of the guest protocol
//! ([`super::protocol::Op::Screen`], `Display`, `Browser`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{self, ConnectionExt as _};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

use super::confine::OpError;
use super::keys::{self, Keymap};
use super::protocol::codes;

/// The display the guest agent runs (and `DISPLAY` in desktop images).
pub const DISPLAY: &str = ":0";
/// The display's size: what the model sees and what operators get.
pub const WIDTH: u16 = 1280;
pub const HEIGHT: u16 = 800;
/// The browser's profile, relative to the workspace root (so it persists with it).
pub use super::browser::BROWSER_PROFILE;
const XVFB: &str = "/usr/bin/Xvfb";
const WINDOW_MANAGER: &str = "/usr/bin/openbox";
const SOCKET: &str = "/tmp/.X11-unix/X0";
/// The most pixels a drag path may list.
const MAX_DRAG_POINTS: usize = 1000;
/// The most characters one type_text sends.
const MAX_TYPE_CHARS: usize = 10_000;

pub use crate::api::screen::{DisplayResult, ScreenAction, ScreenResult};

pub(super) fn io_err(what: &str, e: impl std::fmt::Display) -> OpError {
    OpError::new(codes::IO, format!("{what}: {e}"))
}

fn no_display(e: impl std::fmt::Display) -> OpError {
    OpError::new(
        codes::IO,
        format!("the display {DISPLAY} does not answer: {e}"),
    )
}

// ---- the display -------------------------------------------------------------------------

static START: Mutex<()> = Mutex::new(());

fn log_file(name: &str) -> Stdio {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::temp_dir().join(name))
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null())
}

/// Spawns a long-lived program in its own session: it outlives the guest session (and
/// is reaped by the container's init).
pub(super) fn spawn_detached(
    program: &str,
    args: &[&str],
    log: &str,
    cwd: &Path,
) -> Result<u32, OpError> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(program);
    super::identity::as_user(&mut command);
    let child = command
        .args(args)
        .current_dir(cwd)
        .env("DISPLAY", DISPLAY)
        .env_remove("YY_LOG")
        .stdin(Stdio::null())
        .stdout(log_file(log))
        .stderr(log_file(log))
        .process_group(0)
        .spawn()
        .map_err(|e| OpError::new(codes::SPAWN, format!("cannot run {program}: {e}")))?;
    Ok(child.id())
}

fn connect() -> Result<(RustConnection, usize), OpError> {
    x11rb::connect(Some(DISPLAY)).map_err(no_display)
}

/// Starts Xvfb and the window manager unless the display answers already.
pub fn ensure_display(cwd: &Path) -> Result<DisplayResult, OpError> {
    let _guard = START.lock().unwrap_or_else(|e| e.into_inner());
    if let Ok((conn, n)) = connect() {
        let s = &conn.setup().roots[n];
        return Ok(DisplayResult {
            display: DISPLAY.into(),
            width: s.width_in_pixels,
            height: s.height_in_pixels,
            started: false,
        });
    }
    if !Path::new(XVFB).exists() {
        return Err(OpError::new(
            codes::NOT_FOUND,
            "this computer has no display (its image is not a desktop image; build one with `yy image prepare --recipe desktop`)",
        ));
    }
    // A socket left by a killed server would make Xvfb refuse the display number.
    let _ = std::fs::remove_file(SOCKET);
    let _ = std::fs::remove_file("/tmp/.X0-lock");
    let size = format!("{WIDTH}x{HEIGHT}x24");
    spawn_detached(
        XVFB,
        &[
            DISPLAY,
            "-screen",
            "0",
            &size,
            "-nolisten",
            "tcp",
            "-dpi",
            "96",
            "-noreset",
        ],
        "yy-xvfb.log",
        cwd,
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let conn = loop {
        match connect() {
            Ok(c) => break c,
            Err(e) if Instant::now() > deadline => {
                let log = std::fs::read_to_string(std::env::temp_dir().join("yy-xvfb.log"))
                    .unwrap_or_default();
                let tail: String = log.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                return Err(OpError::new(
                    codes::IO,
                    format!("{}; Xvfb said: {tail}", e.message),
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    paint_wallpaper(&conn.0, conn.1)?;
    if Path::new(WINDOW_MANAGER).exists() {
        spawn_detached(WINDOW_MANAGER, &[], "yy-wm.log", cwd)?;
    }
    let s = &conn.0.setup().roots[conn.1];
    Ok(DisplayResult {
        display: DISPLAY.into(),
        width: s.width_in_pixels,
        height: s.height_in_pixels,
        started: true,
    })
}

/// Sets the root window's background to the wallpaper (desktop_look), when the screen
/// takes 32-bit little-endian pixels at depth 24 as Xvfb's does.
fn paint_wallpaper(conn: &RustConnection, n: usize) -> Result<(), OpError> {
    let setup = conn.setup();
    let screen = &setup.roots[n];
    let fits = screen.root_depth == 24
        && setup.image_byte_order == xproto::ImageOrder::LSB_FIRST
        && setup
            .pixmap_formats
            .iter()
            .any(|f| f.depth == 24 && f.bits_per_pixel == 32);
    if !fits {
        return Ok(());
    }
    let (root, w, h) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
    let pixmap = conn.generate_id().map_err(no_display)?;
    let gc = conn.generate_id().map_err(no_display)?;
    conn.create_pixmap(24, pixmap, root, w, h)
        .map_err(no_display)?;
    conn.create_gc(gc, pixmap, &xproto::CreateGCAux::new())
        .map_err(no_display)?;
    // Strips well under the core protocol's 256 KiB request limit.
    let rows = (200 * 1024 / (usize::from(w) * 4).max(1)).clamp(1, 64) as u16;
    for y in (0..h).step_by(usize::from(rows)) {
        let data = super::desktop_look::wallpaper_rows(w, h, y, rows);
        let n = rows.min(h - y);
        conn.put_image(
            xproto::ImageFormat::Z_PIXMAP,
            pixmap,
            gc,
            w,
            n,
            0,
            y as i16,
            0,
            24,
            &data,
        )
        .map_err(no_display)?;
    }
    conn.change_window_attributes(
        root,
        &xproto::ChangeWindowAttributesAux::new().background_pixmap(pixmap),
    )
    .map_err(no_display)?;
    conn.clear_area(false, root, 0, 0, 0, 0)
        .map_err(no_display)?;
    // The root window keeps the pixmap after its id is freed.
    conn.free_gc(gc).map_err(no_display)?;
    conn.free_pixmap(pixmap).map_err(no_display)?;
    conn.get_input_focus()
        .map_err(no_display)?
        .reply()
        .map_err(no_display)?;
    Ok(())
}

// ---- screen actions ----------------------------------------------------------------------

static FRAME_SEQ: AtomicU64 = AtomicU64::new(0);
static LAST_FRAME: Mutex<String> = Mutex::new(String::new());

/// Refuses input aimed at a frame that is not the latest screenshot.
pub fn check_frame(frame_id: &str) -> Result<(), OpError> {
    let current = LAST_FRAME.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if current == frame_id {
        return Ok(());
    }
    Err(OpError::new(
        codes::STALE_FRAME,
        format!(
            "frame {frame_id:?} is not the current frame ({}): the screen may have changed; take a new screenshot",
            if current.is_empty() {
                "none yet"
            } else {
                &current
            }
        ),
    ))
}

/// A frame id unique across guest restarts: start time of this guest and a sequence.
fn next_frame_id() -> String {
    static EPOCH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| crate::timefmt::now_ms() as u64);
    let seq = FRAME_SEQ.fetch_add(1, Ordering::Relaxed) + 1;
    format!("f{epoch:x}-{seq}")
}

struct Screen {
    conn: RustConnection,
    root: xproto::Window,
    width: u16,
    height: u16,
}

const KEY_PRESS: u8 = xproto::KEY_PRESS_EVENT;
const KEY_RELEASE: u8 = xproto::KEY_RELEASE_EVENT;
const BUTTON_PRESS: u8 = xproto::BUTTON_PRESS_EVENT;
const BUTTON_RELEASE: u8 = xproto::BUTTON_RELEASE_EVENT;
const MOTION: u8 = xproto::MOTION_NOTIFY_EVENT;

impl Screen {
    fn open(cwd: &Path) -> Result<Screen, OpError> {
        ensure_display(cwd)?;
        let (conn, n) = connect()?;
        let s = &conn.setup().roots[n];
        let (root, width, height) = (s.root, s.width_in_pixels, s.height_in_pixels);
        Ok(Screen {
            conn,
            root,
            width,
            height,
        })
    }

    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<(), OpError> {
        self.conn
            .xtest_fake_input(kind, detail, 0, self.root, x, y, 0)
            .map_err(no_display)?;
        Ok(())
    }

    /// Waits until the server has processed everything sent so far.
    fn sync(&self) -> Result<(), OpError> {
        self.conn
            .get_input_focus()
            .map_err(no_display)?
            .reply()
            .map_err(no_display)?;
        Ok(())
    }

    fn check_point(&self, x: i32, y: i32) -> Result<(i16, i16), OpError> {
        if x < 0 || y < 0 || x >= i32::from(self.width) || y >= i32::from(self.height) {
            return Err(OpError::bad(format!(
                "({x}, {y}) is outside the {}x{} screen",
                self.width, self.height
            )));
        }
        Ok((x as i16, y as i16))
    }

    fn move_to(&self, x: i32, y: i32) -> Result<(), OpError> {
        let (x, y) = self.check_point(x, y)?;
        self.fake(MOTION, 0, x, y)
    }

    fn click(&self, x: i32, y: i32, button: u8, times: u32) -> Result<(), OpError> {
        self.move_to(x, y)?;
        for _ in 0..times {
            self.fake(BUTTON_PRESS, button, 0, 0)?;
            self.fake(BUTTON_RELEASE, button, 0, 0)?;
        }
        Ok(())
    }

    fn cursor(&self) -> Result<(i32, i32), OpError> {
        let r = self
            .conn
            .query_pointer(self.root)
            .map_err(no_display)?
            .reply()
            .map_err(no_display)?;
        Ok((i32::from(r.root_x), i32::from(r.root_y)))
    }

    fn screenshot(&self) -> Result<Vec<u8>, OpError> {
        let reply = self
            .conn
            .get_image(
                xproto::ImageFormat::Z_PIXMAP,
                self.root,
                0,
                0,
                self.width,
                self.height,
                u32::MAX,
            )
            .map_err(no_display)?
            .reply()
            .map_err(no_display)?;
        let (w, h) = (usize::from(self.width), usize::from(self.height));
        let bpp = reply.data.len() / (w * h).max(1);
        if bpp < 3 || reply.depth < 24 {
            return Err(OpError::new(
                codes::IO,
                format!("unsupported screen format: depth {}", reply.depth),
            ));
        }
        // Z-pixmap at depth 24 on a little-endian server: B, G, R, (pad) per pixel.
        let mut rgb = Vec::with_capacity(w * h * 3);
        for px in reply.data.chunks_exact(bpp).take(w * h) {
            rgb.extend_from_slice(&[px[2], px[1], px[0]]);
        }
        let (x, y) = self.cursor()?;
        super::desktop_look::draw_pointer(&mut rgb, self.width, self.height, x, y);
        encode_png(self.width, self.height, &rgb)
    }

    /// The keyboard map: keycode range and keysyms per keycode.
    fn keymap(&self) -> Result<Keymap, OpError> {
        let setup = self.conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let r = self
            .conn
            .get_keyboard_mapping(min, max - min + 1)
            .map_err(no_display)?
            .reply()
            .map_err(no_display)?;
        Ok(Keymap {
            min,
            per: r.keysyms_per_keycode as usize,
            syms: r.keysyms,
        })
    }

    /// Types `text` (see [`keys`] for how characters beyond the keymap are typed).
    fn type_text(&self, text: &str) -> Result<(), OpError> {
        let syms = keys::text_keysyms(text).map_err(OpError::bad)?;
        let mut map = self.keymap()?;
        let per = map.per.max(1);
        let stretches = keys::plan(&mut map, &syms).map_err(|e| OpError::new(codes::IO, e))?;
        for (n, stretch) in stretches.iter().enumerate() {
            if n > 0 {
                // The last round's keys are read before their keycodes change again.
                self.sync()?;
                std::thread::sleep(Duration::from_millis(100));
            }
            if let Some(remap) = &stretch.remap {
                self.conn
                    .change_keyboard_mapping(remap.count, remap.first, per as u8, &remap.syms)
                    .map_err(no_display)?
                    .check()
                    .map_err(no_display)?;
                // Clients reload the map on MappingNotify; give them a moment first.
                std::thread::sleep(Duration::from_millis(20));
            }
            for tap in &stretch.taps {
                if let Some(shift) = tap.shift {
                    self.fake(KEY_PRESS, shift, 0, 0)?;
                }
                self.fake(KEY_PRESS, tap.code, 0, 0)?;
                self.fake(KEY_RELEASE, tap.code, 0, 0)?;
                if let Some(shift) = tap.shift {
                    self.fake(KEY_RELEASE, shift, 0, 0)?;
                }
            }
        }
        Ok(())
    }

    fn keycode(&self, map: &Keymap, name: &str) -> Result<u8, OpError> {
        let sym = keys::keysym(name)
            .ok_or_else(|| OpError::bad(format!("{name:?} is not a key name this guest knows")))?;
        map.find(sym)
            .map(|(k, _)| k)
            .ok_or_else(|| OpError::bad(format!("no key on this keyboard produces {name:?}")))
    }
}

/// Encodes 8-bit RGB as PNG (fast compression: screenshots are taken often).
pub fn encode_png(width: u16, height: u16, rgb: &[u8]) -> Result<Vec<u8>, OpError> {
    let mut out = Vec::with_capacity(rgb.len() / 8);
    {
        let mut enc = png::Encoder::new(&mut out, u32::from(width), u32::from(height));
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        let mut w = enc.write_header().map_err(|e| io_err("png", e))?;
        w.write_image_data(rgb).map_err(|e| io_err("png", e))?;
    }
    Ok(out)
}

/// Width and height of a PNG, if it is a valid one (all chunks and the image data are
/// decoded, so a truncated file fails).
pub fn png_size(data: &[u8]) -> Result<(u32, u32), String> {
    let decoder = png::Decoder::new(std::io::Cursor::new(data));
    let mut reader = decoder.read_info().map_err(|e| e.to_string())?;
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).map_err(|e| e.to_string())?;
    Ok((info.width, info.height))
}

/// Runs one screen action on the display (starting it first if needed).
pub fn act(cwd: &Path, action: &ScreenAction) -> Result<ScreenResult, OpError> {
    let s = Screen::open(cwd)?;
    let mut png = None;
    match action {
        ScreenAction::Screenshot => {
            s.sync()?;
            let data = s.screenshot()?;
            let id = next_frame_id();
            *LAST_FRAME.lock().unwrap_or_else(|e| e.into_inner()) = id;
            png = Some(B64.encode(data));
        }
        ScreenAction::LeftClick { x, y } => s.click(*x, *y, 1, 1)?,
        ScreenAction::RightClick { x, y } => s.click(*x, *y, 3, 1)?,
        ScreenAction::DoubleClick { x, y } => s.click(*x, *y, 1, 2)?,
        ScreenAction::MoveCursor { x, y } => s.move_to(*x, *y)?,
        ScreenAction::Drag { path } => {
            if path.len() < 2 || path.len() > MAX_DRAG_POINTS {
                return Err(OpError::bad(format!(
                    "a drag path has 2 to {MAX_DRAG_POINTS} points"
                )));
            }
            for &(x, y) in path {
                s.check_point(x, y)?;
            }
            s.move_to(path[0].0, path[0].1)?;
            s.fake(BUTTON_PRESS, 1, 0, 0)?;
            for &(x, y) in &path[1..] {
                s.move_to(x, y)?;
                s.sync()?;
            }
            s.fake(BUTTON_RELEASE, 1, 0, 0)?;
        }
        ScreenAction::TypeText { text } => {
            if text.chars().count() > MAX_TYPE_CHARS {
                return Err(OpError::bad(format!(
                    "type_text takes at most {MAX_TYPE_CHARS} characters at a time"
                )));
            }
            s.type_text(text)?;
        }
        ScreenAction::PressKey { key } => {
            let map = s.keymap()?;
            let code = s.keycode(&map, key)?;
            s.fake(KEY_PRESS, code, 0, 0)?;
            s.fake(KEY_RELEASE, code, 0, 0)?;
        }
        ScreenAction::Hotkey { keys } => {
            if keys.is_empty() || keys.len() > 8 {
                return Err(OpError::bad("a hotkey names 1 to 8 keys"));
            }
            let map = s.keymap()?;
            let codes = keys
                .iter()
                .map(|k| s.keycode(&map, k))
                .collect::<Result<Vec<_>, _>>()?;
            for &c in &codes {
                s.fake(KEY_PRESS, c, 0, 0)?;
            }
            for &c in codes.iter().rev() {
                s.fake(KEY_RELEASE, c, 0, 0)?;
            }
        }
        ScreenAction::Scroll { dx, dy, x, y } => {
            if let (Some(x), Some(y)) = (x, y) {
                s.move_to(*x, *y)?;
            }
            let notches = |n: i32, neg: u8, pos: u8| {
                (if n < 0 { neg } else { pos }, n.unsigned_abs().min(100))
            };
            for (button, count) in [notches(*dy, 4, 5), notches(*dx, 6, 7)] {
                for _ in 0..count {
                    s.fake(BUTTON_PRESS, button, 0, 0)?;
                    s.fake(BUTTON_RELEASE, button, 0, 0)?;
                }
            }
        }
        ScreenAction::GetScreenSize | ScreenAction::GetCursorPosition => {}
    }
    s.sync()?;
    // A window manager may hold pointer events under a synchronous grab for a moment (a
    // click to focus): answer once the pointer is where the action put it. On a loaded
    // host Openbox has taken more than half a second to release such a grab.
    let target = match action {
        ScreenAction::LeftClick { x, y }
        | ScreenAction::RightClick { x, y }
        | ScreenAction::DoubleClick { x, y }
        | ScreenAction::MoveCursor { x, y } => Some((*x, *y)),
        ScreenAction::Drag { path } => path.last().copied(),
        ScreenAction::Scroll {
            x: Some(x),
            y: Some(y),
            ..
        } => Some((*x, *y)),
        _ => None,
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let (x, y) = loop {
        let at = s.cursor()?;
        if target.is_none_or(|t| t == at) || Instant::now() > deadline {
            break at;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    Ok(ScreenResult {
        action: action.name().into(),
        width: s.width,
        height: s.height,
        x,
        y,
        frame_id: LAST_FRAME.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        png,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_have_cua_names_and_shapes() {
        let a: ScreenAction =
            serde_json::from_str(r#"{"action":"left_click","x":10,"y":20}"#).unwrap();
        assert_eq!(a, ScreenAction::LeftClick { x: 10, y: 20 });
        assert_eq!(a.name(), "left_click");
        let d: ScreenAction =
            serde_json::from_str(r#"{"action":"drag","path":[[1,2],[3,4]]}"#).unwrap();
        assert_eq!(
            d,
            ScreenAction::Drag {
                path: vec![(1, 2), (3, 4)]
            }
        );
        let s: ScreenAction = serde_json::from_str(r#"{"action":"scroll","dy":-3}"#).unwrap();
        assert_eq!(
            s,
            ScreenAction::Scroll {
                dx: 0,
                dy: -3,
                x: None,
                y: None
            }
        );
        assert_eq!(
            serde_json::to_string(&ScreenAction::GetCursorPosition).unwrap(),
            r#"{"action":"get_cursor_position"}"#
        );
    }

    #[test]
    fn pngs_round_trip_with_their_size() {
        let rgb = vec![200u8; 4 * 3 * 3];
        let png = encode_png(4, 3, &rgb).unwrap();
        assert_eq!(png_size(&png).unwrap(), (4, 3));
        assert!(png_size(&png[..png.len() - 20]).is_err());
        assert!(png_size(b"not a png").is_err());
        assert_ne!(next_frame_id(), next_frame_id());
    }
}
