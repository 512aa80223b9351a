//! Keys and text for the desktop's XTEST input: keysyms of key names and characters, and
//! the plan that types a text on a keyboard map (pure logic; `screen` sends it).
//!
//! A character no key carries (CJK, most symbols) is typed on a spare keycode remapped to
//! its Unicode keysym. Spares are mapped before their keys are pressed and stay mapped
//! afterwards: a client that reads the key event after a remap back would look it up in
//! the new map and drop the character (xdotool's known race). All spares a text needs are
//! remapped in one request: every remap makes the window manager grab its keys again,
//! and pointer input waits meanwhile. Only a text with more distinct such characters than
//! there are spares needs a second round, after a pause.

/// The keyboard map: keycode range and keysyms per keycode.
#[derive(Debug, Clone)]
pub struct Keymap {
    pub min: u8,
    pub per: usize,
    pub syms: Vec<u32>,
}

pub const SHIFT_L: u32 = 0xffe1;
/// Unicode keysyms are this plus the code point.
const UNICODE: u32 = 0x0100_0000;

impl Keymap {
    fn rows(&self) -> impl DoubleEndedIterator<Item = (u8, &[u32])> {
        self.syms
            .chunks(self.per.max(1))
            .enumerate()
            .map(|(i, row)| (self.min.saturating_add(i as u8), row))
    }

    /// The keycode and level (0 plain, 1 shifted) that produce `sym`.
    pub fn find(&self, sym: u32) -> Option<(u8, usize)> {
        (0..self.per.min(2)).find_map(|level| {
            self.rows()
                .find(|(_, row)| row.get(level) == Some(&sym))
                .map(|(code, _)| (code, level))
        })
    }

    /// Keycodes that may be remapped, highest first: those with no symbols, and those an
    /// earlier text left on one Unicode keysym.
    pub fn spares(&self) -> Vec<u8> {
        self.rows()
            .rev()
            .filter(|(_, row)| {
                row.iter().all(|&s| s == 0)
                    || (row[0] >= UNICODE && row.iter().all(|&s| s == row[0]))
            })
            .map(|(code, _)| code)
            .collect()
    }

    /// Keycodes `lo..=hi` as a [`Remap`] of their current keysyms.
    fn rows_of(&self, lo: u8, hi: u8) -> Remap {
        let per = self.per.max(1);
        let start = usize::from(lo - self.min) * per;
        let end = (usize::from(hi - self.min) + 1) * per;
        Remap {
            first: lo,
            count: hi - lo + 1,
            syms: self.syms[start..end].to_vec(),
        }
    }

    fn set(&mut self, code: u8, sym: u32) {
        let per = self.per.max(1);
        let start = usize::from(code - self.min) * per;
        self.syms[start..start + per].fill(sym);
    }
}

/// The X keysym of a character; `None` for a control character that is no key.
pub fn char_keysym(c: char) -> Option<u32> {
    Some(match c {
        '\n' | '\r' => 0xff0d,
        '\t' => 0xff09,
        '\u{8}' => 0xff08,
        c if (' '..='~').contains(&c) || ('\u{a0}'..='\u{ff}').contains(&c) => c as u32,
        c if c.is_control() || matches!(c, '\u{fffe}' | '\u{ffff}') => return None,
        c => UNICODE | c as u32,
    })
}

/// The keysyms that type `text`, or which character cannot be typed.
pub fn text_keysyms(text: &str) -> Result<Vec<u32>, String> {
    text.chars()
        .enumerate()
        .map(|(i, c)| {
            char_keysym(c).ok_or_else(|| {
                format!(
                    "type_text cannot type U+{:04X} (character {} of the text): it is a control character; use press_key or hotkey for keys",
                    c as u32,
                    i + 1
                )
            })
        })
        .collect()
}

/// The keysym of a key name (case-insensitive for named keys; one character for itself).
pub fn keysym(name: &str) -> Option<u32> {
    let mut chars = name.chars();
    if let (Some(c), None) = (chars.next(), chars.clone().next()) {
        return char_keysym(c.to_ascii_lowercase());
    }
    let lower = name.to_ascii_lowercase();
    let sym = match lower.as_str() {
        "return" | "enter" => 0xff0d,
        "tab" => 0xff09,
        "escape" | "esc" => 0xff1b,
        "backspace" => 0xff08,
        "delete" | "del" => 0xffff,
        "insert" => 0xff63,
        "space" => 0x20,
        "home" => 0xff50,
        "left" => 0xff51,
        "up" => 0xff52,
        "right" => 0xff53,
        "down" => 0xff54,
        "pageup" | "page_up" | "prior" => 0xff55,
        "pagedown" | "page_down" | "next" => 0xff56,
        "end" => 0xff57,
        "shift" | "shift_l" => SHIFT_L,
        "ctrl" | "control" | "control_l" => 0xffe3,
        "alt" | "alt_l" => 0xffe9,
        "super" | "super_l" | "cmd" | "command" | "win" | "meta" => 0xffeb,
        "menu" => 0xff67,
        "print" => 0xff61,
        f if f.starts_with('f') => {
            let n: u32 = f[1..].parse().ok().filter(|n| (1..=24).contains(n))?;
            0xffbe + n - 1
        }
        _ => return None,
    };
    Some(sym)
}

/// One key press of a plan: the keycode, with Shift held when it is on the shifted level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tap {
    pub code: u8,
    pub shift: Option<u8>,
}

/// Keycodes `first..first + count` get `syms` (`count` rows of the map's keysyms per
/// keycode): the spares a stretch needs and the keys between them, unchanged.
#[derive(Debug, PartialEq, Eq)]
pub struct Remap {
    pub first: u8,
    pub count: u8,
    pub syms: Vec<u32>,
}

/// One remap, then the presses it makes possible: each spare is remapped at most once.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stretch {
    pub remap: Option<Remap>,
    pub taps: Vec<Tap>,
}

/// How to type `syms` on `map` (which it updates with the remaps).
pub fn plan(map: &mut Keymap, syms: &[u32]) -> Result<Vec<Stretch>, String> {
    let shift = map.find(SHIFT_L).map(|(k, _)| k);
    let spares = map.spares();
    let mut stretches = Vec::new();
    let mut rest = syms;
    while !rest.is_empty() {
        if !stretches.is_empty() {
            // A new round: what the last one mapped on the spares is forgotten, so that a
            // spare is never remapped while a key typed on it in this round waits.
            for &code in &spares {
                map.set(code, 0);
            }
        }
        let mut free = spares.iter().copied();
        let mut stretch = Stretch::default();
        let mut remapped: Option<(u8, u8)> = None;
        let mut typed = 0;
        for &sym in rest {
            let (code, level) = match map.find(sym) {
                Some(found) => found,
                None => match free.next() {
                    Some(code) => {
                        map.set(code, sym);
                        remapped = Some(
                            remapped.map_or((code, code), |(lo, hi)| (lo.min(code), hi.max(code))),
                        );
                        (code, 0)
                    }
                    None => break,
                },
            };
            let shift = match level {
                0 => None,
                _ => Some(shift.ok_or("the keyboard has no Shift key to type this text with")?),
            };
            stretch.taps.push(Tap { code, shift });
            typed += 1;
        }
        if typed == 0 {
            return Err("the keyboard has no spare keycode to type this character with".into());
        }
        stretch.remap = remapped.map(|(lo, hi)| map.rows_of(lo, hi));
        rest = &rest[typed..];
        stretches.push(stretch);
    }
    Ok(stretches)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> Keymap {
        // 8: a A, 9: (none), 10: 1 !, 11: (none), 12: Shift_L
        Keymap {
            min: 8,
            per: 2,
            syms: vec![0x61, 0x41, 0, 0, 0x31, 0x21, 0, 0, SHIFT_L, 0],
        }
    }

    #[test]
    fn keys_map_to_keysyms() {
        assert_eq!(keysym("Return"), Some(0xff0d));
        assert_eq!(keysym("ctrl"), Some(0xffe3));
        assert_eq!(keysym("F5"), Some(0xffc2));
        assert_eq!(keysym("a"), Some(0x61));
        assert_eq!(keysym("A"), Some(0x61));
        assert_eq!(keysym("F99"), None);
        assert_eq!(keysym("nokey"), None);
        assert_eq!(char_keysym('é'), Some(0xe9));
        assert_eq!(char_keysym('中'), Some(0x0100_4e2d));
        assert_eq!(char_keysym('\n'), Some(0xff0d));
        assert_eq!(char_keysym('\u{7}'), None);
        let m = map();
        assert_eq!(m.find(0x41), Some((8, 1)));
        assert_eq!(m.find(0x31), Some((10, 0)));
        assert_eq!(m.spares(), vec![11, 9]);
    }

    #[test]
    fn a_control_character_is_refused_naming_where_it_is() {
        let e = text_keysyms("ok\u{7}").unwrap_err();
        assert!(e.contains("U+0007") && e.contains("character 3"), "{e}");
        assert_eq!(text_keysyms("a\n中").unwrap().len(), 3);
    }

    /// Replays a plan: what each tap types, given the remaps made before it.
    fn typed(map: &Keymap, stretches: &[Stretch]) -> Vec<u32> {
        let mut m = map.clone();
        let mut out = Vec::new();
        for s in stretches {
            if let Some(r) = &s.remap {
                assert_eq!(r.syms.len(), usize::from(r.count) * m.per);
                for (i, row) in r.syms.chunks(m.per).enumerate() {
                    let at = (usize::from(r.first - m.min) + i) * m.per;
                    m.syms[at..at + m.per].copy_from_slice(row);
                }
            }
            for t in &s.taps {
                let row = &m.syms[usize::from(t.code - m.min) * m.per..][..m.per];
                out.push(row[usize::from(t.shift.is_some())]);
            }
        }
        out
    }

    #[test]
    fn text_beyond_the_keymap_is_typed_on_spares_that_stay_mapped() {
        let syms = text_keysyms("aA1!你好你").unwrap();
        let start = map();
        let mut m = start.clone();
        let plan = plan(&mut m, &syms).unwrap();
        assert_eq!(plan.len(), 1, "two spares carry both characters");
        let remap = plan[0].remap.as_ref().unwrap();
        assert_eq!(
            (remap.first, remap.count),
            (9, 3),
            "one request from 9 to 11"
        );
        assert_eq!(&remap.syms[2..4], &[0x31, 0x21], "10 is sent unchanged");
        assert_eq!(typed(&start, &plan), syms);
        assert_eq!(
            plan[0].taps[1],
            Tap {
                code: 8,
                shift: Some(12)
            }
        );
        // The next text finds them mapped, and may take those keycodes back.
        assert_eq!(m.find(0x0100_4f60).map(|f| f.0), Some(11));
        assert_eq!(m.spares(), vec![11, 9]);
    }

    #[test]
    fn more_characters_than_spares_take_rounds_that_never_remap_a_waiting_key() {
        let syms = text_keysyms("你好世界你").unwrap();
        let start = map();
        let plan = plan(&mut start.clone(), &syms).unwrap();
        assert_eq!(plan.len(), 3, "{plan:?}");
        assert_eq!(typed(&start, &plan), syms);
        let mut none = Keymap {
            min: 8,
            per: 1,
            syms: vec![0x61],
        };
        let e = super::plan(&mut none, &[0x0100_4f60]).unwrap_err();
        assert!(e.contains("no spare keycode"), "{e}");
    }
}
