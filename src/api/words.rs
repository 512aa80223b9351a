//! Words of messages whose form depends on a value: "1 file" but "2 files", "an agent" but
//! "a team". Every message with a count or a variable noun goes through here, and every
//! error that is said on one line.

use std::fmt::Display;

/// A number a noun is counted with.
pub trait Count: Display {
    fn is_one(&self) -> bool;
}

macro_rules! counts {
    ($($t:ty),*) => {$(
        impl Count for $t {
            fn is_one(&self) -> bool {
                *self == 1
            }
        }
    )*};
}
counts!(u8, u16, u32, u64, usize, i32, i64);

impl Count for f64 {
    fn is_one(&self) -> bool {
        *self == 1.0
    }
}

impl<T: Count> Count for &T {
    fn is_one(&self) -> bool {
        (**self).is_one()
    }
}

/// `n` with the noun in the number it takes: `plural(1, "file", "files")` is "1 file",
/// `plural(0, "file", "files")` "0 files", `plural(1.5, "CPU", "CPUs")` "1.5 CPUs".
pub fn plural<N: Count>(n: N, one: &str, many: &str) -> String {
    format!("{n} {}", if n.is_one() { one } else { many })
}

/// `noun` after "a" or "an", as it sounds: "an agent", "a team", "a user".
pub fn a(noun: &str) -> String {
    format!("{} {noun}", article(noun))
}

/// "a" or "an" before `word`, by its first letter; a `u` that sounds like "you" (user,
/// unique, uid) takes "a".
pub fn article(word: &str) -> &'static str {
    let w = word.to_ascii_lowercase();
    let you = ["us", "uni", "uid", "uuid", "uti"]
        .iter()
        .any(|p| w.starts_with(p));
    match w.chars().next() {
        Some('a' | 'e' | 'i' | 'o') => "an",
        Some('u') if !you => "an",
        _ => "a",
    }
}

/// An error and its sources on one line: reqwest, hyper and tungstenite nest the useful
/// part several levels down.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.dedup();
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_take_the_noun_in_their_number() {
        assert_eq!(plural(1, "file", "files"), "1 file");
        assert_eq!(plural(2, "file", "files"), "2 files");
        assert_eq!(plural(0, "file", "files"), "0 files");
        assert_eq!(plural(1usize, "entry", "entries"), "1 entry");
        assert_eq!(plural(1i64, "byte", "bytes"), "1 byte");
        assert_eq!(plural(-1i64, "byte", "bytes"), "-1 bytes");
        assert_eq!(plural(11u64, "check", "checks"), "11 checks");
        assert_eq!(plural(1.0, "CPU", "CPUs"), "1 CPU");
        assert_eq!(plural(0.5, "CPU", "CPUs"), "0.5 CPUs");
    }

    #[test]
    fn articles_follow_the_sound() {
        assert_eq!(a("agent"), "an agent");
        assert_eq!(a("exec"), "an exec");
        assert_eq!(a("image_accept"), "an image_accept");
        assert_eq!(a("old"), "an old");
        assert_eq!(a("unknown"), "an unknown");
        assert_eq!(a("team"), "a team");
        assert_eq!(a("profile"), "a profile");
        assert_eq!(a("user"), "a user");
        assert_eq!(a("unique"), "a unique");
        assert_eq!(a("Agent"), "an Agent");
    }
}
