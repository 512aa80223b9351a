//! What makes the virtual display look like a desktop to a person and a model: a
//! wallpaper on the root window (Xvfb's is black) and the pointer drawn into screenshots
//! (an X screenshot never contains the cursor).

/// The wallpaper's colour at row `y` of `height`: a calm vertical gradient.
pub fn wallpaper_rgb(y: u16, height: u16) -> [u8; 3] {
    const TOP: [u8; 3] = [0x1f, 0x3b, 0x5c];
    const BOTTOM: [u8; 3] = [0x3f, 0x7c, 0x8f];
    let t = u32::from(y.min(height)) * 256 / u32::from(height.max(1));
    std::array::from_fn(|i| {
        let (a, b) = (u32::from(TOP[i]), u32::from(BOTTOM[i]));
        ((a * (256 - t) + b * t) / 256) as u8
    })
}

/// Rows `from..from + rows` of the wallpaper as a Z-pixmap of 32 bits per pixel, least
/// significant byte first (B, G, R, pad), as Xvfb's depth-24 screens take it.
pub fn wallpaper_rows(width: u16, height: u16, from: u16, rows: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(usize::from(width) * usize::from(rows) * 4);
    for y in from..from.saturating_add(rows).min(height) {
        let [r, g, b] = wallpaper_rgb(y, height);
        for _ in 0..width {
            out.extend_from_slice(&[b, g, r, 0]);
        }
    }
    out
}

/// The arrow pointer, its tip at the top left: `#` outline, `.` fill, space clear.
const ARROW: [&str; 17] = [
    "#",
    "##",
    "#.#",
    "#..#",
    "#...#",
    "#....#",
    "#.....#",
    "#......#",
    "#.......#",
    "#........#",
    "#.........#",
    "#......####",
    "#...#..#",
    "#..##..#",
    "#.#  #..#",
    "##   #..#",
    "      ##",
];

/// Draws the pointer with its tip at (`x`, `y`) into an RGB image, clipped to it.
pub fn draw_pointer(rgb: &mut [u8], width: u16, height: u16, x: i32, y: i32) {
    let (w, h) = (i32::from(width), i32::from(height));
    for (dy, row) in ARROW.iter().enumerate() {
        for (dx, cell) in row.bytes().enumerate() {
            let colour = match cell {
                b'#' => 0x00,
                b'.' => 0xff,
                _ => continue,
            };
            let (px, py) = (x + dx as i32, y + dy as i32);
            if px < 0 || py < 0 || px >= w || py >= h {
                continue;
            }
            let at = (py as usize * width as usize + px as usize) * 3;
            if let Some(p) = rgb.get_mut(at..at + 3) {
                p.fill(colour);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wallpaper_is_a_gradient_and_never_black() {
        let (top, bottom) = (wallpaper_rgb(0, 800), wallpaper_rgb(799, 800));
        assert_ne!(top, bottom);
        assert_ne!(top, [0, 0, 0]);
        let rows = wallpaper_rows(4, 800, 798, 5);
        assert_eq!(rows.len(), 4 * 2 * 4, "clipped at the last row");
        let [r, g, b] = wallpaper_rgb(798, 800);
        assert_eq!(&rows[..4], &[b, g, r, 0], "B, G, R, pad");
    }

    #[test]
    fn the_pointer_is_drawn_at_its_tip_and_clipped_at_the_edges() {
        let (w, h) = (20u16, 20u16);
        let mut rgb = vec![0x80; usize::from(w) * usize::from(h) * 3];
        draw_pointer(&mut rgb, w, h, 2, 3);
        let px = |x: usize, y: usize| rgb[(y * usize::from(w) + x) * 3];
        assert_eq!(px(2, 3), 0x00, "the tip is outlined");
        assert_eq!(px(3, 5), 0xff, "filled inside");
        assert_eq!(px(10, 3), 0x80, "clear beside it");
        let mut edge = vec![0x80; usize::from(w) * usize::from(h) * 3];
        draw_pointer(&mut edge, w, h, 19, 19);
        draw_pointer(&mut edge, w, h, -5, -5);
        assert_eq!(edge[(19 * 20 + 19) * 3], 0x00);
    }
}
