//! stdout is data: tables for people, `--json` for programs. Every write goes through here so
//! a closed pipe surfaces as an error that exits quietly.

use std::borrow::Cow;
use std::io::{self, Write};

use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;

/// Prints `text` (a newline is added) to stdout.
pub fn print(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Prints `value` as pretty JSON.
pub fn json<T: Serialize + ?Sized>(value: &T) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    Ok(print(&text)?)
}

/// A plain table: a header row and aligned columns, no borders (like `docker ps`).
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(headers.iter().map(|h| h.to_uppercase()));
    for row in rows {
        t.add_row(row.iter().map(|cell| clean(cell)));
    }
    for column in t.column_iter_mut() {
        column.set_padding((0, 3));
    }
    t.lines()
        .map(|l| l.trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Prints a list as a table, or as JSON with `--json`.
pub fn list<T: Serialize>(
    items: &[T],
    as_json: bool,
    headers: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> anyhow::Result<()> {
    if as_json {
        return json(items);
    }
    Ok(print(&table(headers, items.iter().map(row).collect()))?)
}

/// Prints one object as `key: value` lines, or as JSON with `--json`.
pub fn show<T: Serialize>(
    item: &T,
    as_json: bool,
    fields: Vec<(&str, String)>,
) -> anyhow::Result<()> {
    if as_json {
        return json(item);
    }
    let width = fields.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let text = fields
        .iter()
        .map(|(k, v)| format!("{:<w$}  {}", format!("{k}:"), clean(v), w = width + 1))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(print(&text)?)
}

/// Prints one object as `key: value` lines labelled like the columns of its list (the
/// same `headers` and `row` as [`list`]), or as JSON with `--json`.
pub fn record<T: Serialize>(
    item: &T,
    as_json: bool,
    headers: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> anyhow::Result<()> {
    show(
        item,
        as_json,
        headers.iter().copied().zip(row(item)).collect(),
    )
}

/// One line of text from elsewhere (a Runner, Hermes, a model, a client), made safe for a
/// terminal: control characters (newlines too), DEL, C1 controls and bidirectional
/// overrides become visible escapes, so no string can move the cursor, recolour the
/// screen, set the window title or forge a line. JSON output never goes through here.
pub fn clean(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// Like [`clean`] for text meant to span lines: newlines and tabs are kept.
pub fn clean_text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        let layout = keep_lines && (c == '\n' || c == '\t');
        !layout
            && (c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
    };
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            _ if !unsafe_char(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// `-` for a missing value in a table.
pub fn opt(v: &Option<impl std::fmt::Display>) -> String {
    v.as_ref().map_or_else(|| "-".into(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_plain_and_aligned() {
        let t = table(
            &["name", "env"],
            vec![
                vec!["a".into(), "host".into()],
                vec!["longer".into(), "computer".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME     ENV");
        assert_eq!(lines[1], "a        host");
        assert_eq!(lines[2], "longer   computer");
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert!(matches!(clean("plain ünïcode"), Cow::Borrowed(_)));
        assert_eq!(clean("a\x1b[31mb\nstate: x"), "a\\x1b[31mb\\nstate: x");
        assert_eq!(clean("\u{9b}2J\u{7f}\r\t"), "\\u{9b}2J\\x7f\\r\\t");
        assert_eq!(clean("\u{202e}txt"), "\\u{202e}txt");
        assert_eq!(clean_text("two\nlines\x07"), "two\nlines\\x07");
        let t = table(&["host"], vec![vec!["evil\n\x1b]0;title\x07".into()]]);
        assert_eq!(t.lines().count(), 2, "{t}");
        assert!(!t.contains('\x1b'));
    }
}

/// A JSON value for a person: `key=value` pairs for an object (nested values compact),
/// items joined by ", " for an array, strings without quotes.
pub fn plain(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Object(map) if map.is_empty() => "-".into(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub fn cut_bytes(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Cuts a long table cell to `max` characters, marking the cut with "…" (`show` and
/// `--json` keep the whole value).
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod plain_tests {
    use super::*;

    #[test]
    fn a_byte_bounded_prefix_ends_where_a_character_ends() {
        assert_eq!(cut_bytes("ab你好", 4), "ab");
        assert_eq!(cut_bytes("ab你好", 5), "ab你");
        assert_eq!(cut_bytes("ab", 0), "");
        assert_eq!(cut_bytes("ab", 9), "ab");
    }

    #[test]
    fn json_reads_as_words_and_long_cells_are_cut() {
        let v = serde_json::json!({"argv": ["uname", "-a"], "exit": 0, "who": "ops"});
        assert_eq!(plain(&v), r#"argv=["uname","-a"] exit=0 who=ops"#);
        assert_eq!(plain(&serde_json::Value::Null), "-");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }
}
