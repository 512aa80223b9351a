//! A running tool's live output (`tool.output` events) for a person: each line under its
//! tool, indented, escaped (it comes from a command the model ran), and said when cut.

use std::collections::HashSet;
use std::io::Write;

use crate::api::sessions::{LIVE_OUTPUT_CAP, ToolOutput};
use crate::output;

/// What starts each line of a tool's output.
const INDENT: &str = "  │ ";

/// Where the printed output stands: mid-line or not, and which tools showed output.
#[derive(Default)]
pub struct LiveLines {
    mid_line: bool,
    shown: HashSet<String>,
}

impl LiveLines {
    /// Prints a piece of a tool's output.
    pub fn show(&mut self, out: &mut impl Write, piece: &ToolOutput) -> std::io::Result<()> {
        self.shown.insert(piece.tool_id.clone());
        let text = piece.text.replace("\r\n", "\n");
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                out.write_all(b"\n")?;
                self.mid_line = false;
            }
            if line.is_empty() {
                continue;
            }
            if !self.mid_line {
                out.write_all(INDENT.as_bytes())?;
            }
            out.write_all(output::clean(line).as_bytes())?;
            self.mid_line = true;
        }
        if piece.cut {
            self.end_line(out)?;
            writeln!(
                out,
                "{INDENT}[live output stops here, past {} KiB; the result keeps the rest]",
                LIVE_OUTPUT_CAP / 1024
            )?;
        }
        out.flush()
    }

    /// Ends a line the output left open, so what follows starts on its own line.
    pub fn end_line(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        if self.mid_line {
            out.write_all(b"\n")?;
            self.mid_line = false;
        }
        Ok(())
    }

    /// True when tool `tool_id` showed live output (its result need not repeat it).
    pub fn showed(&self, tool_id: &str) -> bool {
        self.shown.contains(tool_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str, cut: bool) -> ToolOutput {
        ToolOutput {
            tool_id: "c1".into(),
            name: "terminal".into(),
            stream: crate::api::sessions::StdStream::Stdout,
            text: text.into(),
            cut,
        }
    }

    #[test]
    fn lines_are_indented_across_pieces_and_escaped() {
        let mut lines = LiveLines::default();
        let mut out = Vec::new();
        for piece in ["one\ntw", "o\r\n", "\x1b[31mred\n"] {
            lines.show(&mut out, &event(piece, false)).unwrap();
        }
        lines.end_line(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  │ one\n  │ two\n  │ \\x1b[31mred\n"
        );
        assert!(lines.showed("c1") && !lines.showed("c2"));
    }

    #[test]
    fn an_open_line_is_ended_before_the_cut_is_said() {
        let mut lines = LiveLines::default();
        let mut out = Vec::new();
        lines.show(&mut out, &event("partial", true)).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("  │ partial\n  │ [live output stops here"),
            "{text}"
        );
        lines.end_line(&mut Vec::new()).unwrap();
    }
}
