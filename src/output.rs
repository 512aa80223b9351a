//! stdout is data: tables for people, `--json` for programs. Every write goes through here so
//! a closed pipe surfaces as an error that exits quietly.

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
        t.add_row(row);
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
        .map(|(k, v)| format!("{:<w$}  {v}", format!("{k}:"), w = width + 1))
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

/// `-` for a missing value in a table.
pub fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".into())
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
}
