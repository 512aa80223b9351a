//! A host turn's live tool output, from the pieces the tool tap sends (`tool_tap`) to
//! `tool.output` events: each piece goes to the tool it belongs to, Hermes's working
//! directory marker is cut out, text is decoded without splitting a character, and
//! output is coalesced (every [`FLUSH_AFTER`] or [`FLUSH_BYTES`]) and capped at
//! [`LIVE_OUTPUT_CAP`] per tool call. Pure: the caller gives the clock.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::live_output::Budget;
use crate::api::sessions::{LIVE_OUTPUT_CAP, StdStream, ToolOutput};

/// Buffered output waits at most this long before it is sent.
pub const FLUSH_AFTER: Duration = Duration::from_millis(200);
/// ... or until this much is buffered.
pub const FLUSH_BYTES: usize = 8 * 1024;
/// Output that arrives before its tool's `tool.start` is held this long, then dropped
/// (the socket and the gateway's WebSocket race; a shell outside any tool never gets one).
pub const EARLY_HOLD: Duration = Duration::from_secs(2);
/// ... and at most this much of it.
const EARLY_CAP: usize = LIVE_OUTPUT_CAP;
/// Commands remembered with the tool they belong to (a turn runs few).
const BOUND_MAX: usize = 256;
/// Only these tools' output is shown live: a command's output. Other tools may run shells
/// too (file reads), whose output is their result, not progress.
pub const LIVE_TOOLS: [&str; 1] = ["terminal"];

/// Hermes ends every command's stdout with `\n__HERMES_CWD_<id>__<cwd>__HERMES_CWD_<id>__\n`
/// and strips it from the result; so does live output.
const MARKER_PREFIX: &[u8] = b"__HERMES_CWD_";

/// A piece of output from one command (one run of the tap).
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// Which run of the tap sent it (a tool's command, or Hermes's own shell).
    pub invocation: String,
    pub stream: StdStream,
    pub data: Vec<u8>,
    /// Bytes the tap could not send before this piece (the Runner was behind).
    pub dropped: u64,
}

fn stream_index(s: StdStream) -> usize {
    match s {
        StdStream::Stdout => 0,
        StdStream::Stderr => 1,
    }
}

/// A tool call between its `tool.start` and `tool.complete`.
struct Tool {
    id: String,
    name: String,
    live: bool,
    budget: Budget,
    markers: [MarkerFilter; 2],
    utf8: [Utf8Carry; 2],
    /// Text not sent yet, in order, one entry per run of a stream.
    pending: Vec<(StdStream, String)>,
    pending_bytes: usize,
    pending_since: Option<Instant>,
}

impl Tool {
    fn new(id: String, name: String) -> Tool {
        let live = LIVE_TOOLS.contains(&name.as_str());
        Tool {
            id,
            name,
            live,
            budget: Budget::default(),
            markers: Default::default(),
            utf8: Default::default(),
            pending: Vec::new(),
            pending_bytes: 0,
            pending_since: None,
        }
    }

    fn push(&mut self, piece: Piece, now: Instant) {
        if !self.live || self.budget.is_cut() {
            return;
        }
        let i = stream_index(piece.stream);
        if piece.dropped > 0 {
            let note = format!("\n[{} bytes of output not shown live]\n", piece.dropped);
            self.add(piece.stream, note, now);
        }
        let bytes = self.markers[i].push(&piece.data, piece.stream == StdStream::Stdout);
        let text = self.utf8[i].decode(&bytes, false);
        self.add(piece.stream, text, now);
    }

    /// The held-back tails (a possible marker, a split character), at the tool's end.
    fn finish(&mut self, now: Instant) {
        if !self.live || self.budget.is_cut() {
            return;
        }
        for s in [StdStream::Stdout, StdStream::Stderr] {
            let i = stream_index(s);
            let bytes = self.markers[i].finish();
            let text = self.utf8[i].decode(&bytes, true);
            self.add(s, text, now);
        }
    }

    fn add(&mut self, stream: StdStream, text: String, now: Instant) {
        if text.is_empty() {
            return;
        }
        self.pending_bytes += text.len();
        self.pending_since.get_or_insert(now);
        match self.pending.last_mut() {
            Some((s, t)) if *s == stream => t.push_str(&text),
            _ => self.pending.push((stream, text)),
        }
    }

    fn due(&self) -> Option<Instant> {
        if self.pending_bytes >= FLUSH_BYTES {
            return self.pending_since;
        }
        self.pending_since.map(|t| t + FLUSH_AFTER)
    }

    /// Everything pending as events, within the cap.
    fn drain(&mut self) -> Vec<ToolOutput> {
        let mut out = Vec::new();
        for (stream, text) in std::mem::take(&mut self.pending) {
            out.extend(self.budget.event(&self.id, &self.name, stream, text));
        }
        self.pending_bytes = 0;
        self.pending_since = None;
        out
    }
}

/// The live output of one turn.
#[derive(Default)]
pub struct LiveOutput {
    /// Running tools, oldest first; new commands belong to the newest.
    tools: Vec<Tool>,
    /// Which tool each command seen so far belongs to (its id), oldest first.
    bound: VecDeque<(String, String)>,
    /// Pieces of commands not bound yet, with when they came.
    early: VecDeque<(Instant, Piece)>,
    early_bytes: usize,
}

impl LiveOutput {
    pub fn new() -> LiveOutput {
        LiveOutput::default()
    }

    fn bound_to(&self, invocation: &str) -> Option<&str> {
        self.bound
            .iter()
            .find(|(inv, _)| inv == invocation)
            .map(|(_, tool)| tool.as_str())
    }

    fn bind(&mut self, invocation: &str, tool: &str) {
        if self.bound.len() >= BOUND_MAX {
            self.bound.pop_front();
        }
        self.bound
            .push_back((invocation.to_string(), tool.to_string()));
    }

    pub fn tool_started(&mut self, id: &str, name: &str, now: Instant) {
        self.expire(now);
        self.tools.push(Tool::new(id.to_string(), name.to_string()));
        // Output that beat this tool.start over the socket.
        let early = std::mem::take(&mut self.early);
        self.early_bytes = 0;
        for (_, piece) in early {
            self.push(piece, now);
        }
    }

    /// The tool's last live output; call before its `tool.complete` goes out.
    pub fn tool_completed(&mut self, id: &str, now: Instant) -> Vec<ToolOutput> {
        let Some(i) = self.tools.iter().position(|t| t.id == id) else {
            return Vec::new();
        };
        let mut tool = self.tools.remove(i);
        tool.finish(now);
        tool.drain()
    }

    pub fn push(&mut self, piece: Piece, now: Instant) {
        self.expire(now);
        match self.bound_to(&piece.invocation).map(str::to_string) {
            Some(tool) => {
                // A command's output after its tool completed is dropped.
                if let Some(t) = self.tools.iter_mut().find(|t| t.id == tool) {
                    t.push(piece, now);
                }
            }
            None => match self.tools.last_mut() {
                Some(t) => {
                    let id = t.id.clone();
                    t.push(piece.clone(), now);
                    self.bind(&piece.invocation, &id);
                }
                None => {
                    let len = piece.data.len();
                    if self.early_bytes + len <= EARLY_CAP {
                        self.early_bytes += len;
                        self.early.push_back((now, piece));
                    }
                }
            },
        }
    }

    fn expire(&mut self, now: Instant) {
        while let Some((at, p)) = self.early.front() {
            if now.duration_since(*at) < EARLY_HOLD {
                break;
            }
            self.early_bytes -= p.data.len();
            self.early.pop_front();
        }
    }

    /// When [`LiveOutput::flush`] has something to send (`None`: nothing pending).
    pub fn due(&self) -> Option<Instant> {
        self.tools.iter().filter_map(Tool::due).min()
    }

    /// The events whose time has come.
    pub fn flush(&mut self, now: Instant) -> Vec<ToolOutput> {
        self.expire(now);
        let mut out = Vec::new();
        for t in &mut self.tools {
            if t.due().is_some_and(|d| d <= now) {
                out.extend(t.drain());
            }
        }
        out
    }
}

/// Cuts Hermes's working directory marker line (and the newline Hermes puts before it)
/// out of a stream, holding back just enough to recognise it across pieces.
#[derive(Default)]
struct MarkerFilter {
    carry: Vec<u8>,
}

fn is_marker_line(line: &[u8]) -> bool {
    let Some(rest) = line.strip_prefix(MARKER_PREFIX) else {
        return false;
    };
    let Some(end) = rest.windows(2).position(|w| w == b"__") else {
        return false;
    };
    let marker = &line[..MARKER_PREFIX.len() + end + 2];
    line.len() >= 2 * marker.len() && line.ends_with(marker)
}

/// Could `line` (no newline yet) still become a marker line?
fn may_be_marker(line: &[u8]) -> bool {
    MARKER_PREFIX.starts_with(line) || line.starts_with(MARKER_PREFIX)
}

impl MarkerFilter {
    fn push(&mut self, data: &[u8], filter: bool) -> Vec<u8> {
        if !filter {
            return data.to_vec();
        }
        self.carry.extend_from_slice(data);
        self.release(false)
    }

    fn finish(&mut self) -> Vec<u8> {
        self.release(true)
    }

    fn release(&mut self, last: bool) -> Vec<u8> {
        let buf = std::mem::take(&mut self.carry);
        let mut out = Vec::with_capacity(buf.len());
        let mut from = 0;
        let mut search = 0;
        while let Some(k) = buf[search..].iter().position(|&b| b == b'\n') {
            let nl = search + k;
            let rest = &buf[nl + 1..];
            match rest.iter().position(|&b| b == b'\n') {
                Some(end) if is_marker_line(&rest[..end]) => {
                    out.extend_from_slice(&buf[from..nl]);
                    from = nl + 1 + end + 1;
                    search = from;
                }
                Some(_) => search = nl + 1,
                None if !last && may_be_marker(rest) => {
                    out.extend_from_slice(&buf[from..nl]);
                    self.carry = buf[nl..].to_vec();
                    return out;
                }
                None => break,
            }
        }
        out.extend_from_slice(&buf[from..]);
        out
    }
}

/// Decodes UTF-8 across pieces: a character split between two reads waits for its rest;
/// invalid bytes become U+FFFD.
#[derive(Default)]
struct Utf8Carry {
    tail: Vec<u8>,
}

/// Where an incomplete character at the end of `b` starts (`b.len()`: none).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(3) {
        let i = b.len() - back;
        let byte = b[i];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if need > back { i } else { b.len() };
    }
    b.len()
}

impl Utf8Carry {
    fn decode(&mut self, data: &[u8], last: bool) -> String {
        let mut buf = std::mem::take(&mut self.tail);
        buf.extend_from_slice(data);
        let cut = if last {
            buf.len()
        } else {
            incomplete_tail(&buf)
        };
        self.tail = buf[cut..].to_vec();
        String::from_utf8_lossy(&buf[..cut]).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(inv: &str, stream: StdStream, data: &str) -> Piece {
        Piece {
            invocation: inv.into(),
            stream,
            data: data.as_bytes().to_vec(),
            dropped: 0,
        }
    }

    fn texts(events: &[ToolOutput]) -> String {
        events.iter().map(|e| e.text.as_str()).collect()
    }

    fn filter_all(chunks: &[&str]) -> String {
        let mut f = MarkerFilter::default();
        let mut got = Vec::new();
        for c in chunks {
            got.extend(f.push(c.as_bytes(), true));
        }
        got.extend(f.finish());
        String::from_utf8(got).unwrap()
    }

    const M: &str = "__HERMES_CWD_0123456789ab__";

    #[test]
    fn the_cwd_marker_and_its_newline_are_cut_however_the_pieces_fall() {
        let text = format!("first\nsecond\n\n{M}/work/dir{M}\n");
        let whole = filter_all(&[&text]);
        assert_eq!(whole, "first\nsecond\n");
        // Every split point gives the same text.
        for cut in 0..text.len() {
            let (a, b) = text.split_at(cut);
            assert_eq!(filter_all(&[a, b]), "first\nsecond\n", "cut at {cut}");
        }
        // Output without a final newline: Hermes's newline ends it and goes too.
        assert_eq!(filter_all(&[&format!("exact\n{M}/w{M}\n")]), "exact");
        // No output at all.
        assert_eq!(filter_all(&[&format!("\n{M}/w{M}\n")]), "");
    }

    #[test]
    fn lines_that_only_look_like_a_marker_stay() {
        let text = "a\n__HERMES_CWD_x\n__HERMES_CWD_ab__/p__HERMES_CWD_cd__\n__HERMES\nb";
        assert_eq!(filter_all(&[text]), text);
        // A held-back newline comes out with the next piece.
        let mut f = MarkerFilter::default();
        assert_eq!(f.push(b"one\n", true), b"one");
        assert_eq!(f.push(b"two\n", true), b"\ntwo");
        assert_eq!(f.finish(), b"\n");
        // stderr is not filtered.
        assert_eq!(f.push(b"x\n", false), b"x\n");
    }

    #[test]
    fn utf8_split_across_pieces_waits_for_its_rest_and_bad_bytes_are_replaced() {
        let s = "é✓𝄞";
        let bytes = s.as_bytes();
        for cut in 0..bytes.len() {
            let mut u = Utf8Carry::default();
            let mut got = u.decode(&bytes[..cut], false);
            got.push_str(&u.decode(&bytes[cut..], false));
            got.push_str(&u.decode(&[], true));
            assert_eq!(got, s, "cut at {cut}");
        }
        let mut u = Utf8Carry::default();
        assert_eq!(u.decode(b"a\xffb", false), "a\u{fffd}b");
        assert_eq!(u.decode(b"c\xe2\x9c", false), "c");
        assert_eq!(u.decode(&[], true), "\u{fffd}");
    }

    #[test]
    fn output_is_coalesced_until_the_flush_time_or_size() {
        let t0 = Instant::now();
        let mut live = LiveOutput::new();
        assert_eq!(live.due(), None);
        live.tool_started("t1", "terminal", t0);
        live.push(piece("a", StdStream::Stdout, "one\n"), t0);
        live.push(piece("a", StdStream::Stdout, "two\n"), t0);
        live.push(piece("a", StdStream::Stderr, "oops\n"), t0);
        assert_eq!(live.due(), Some(t0 + FLUSH_AFTER));
        assert!(live.flush(t0 + Duration::from_millis(100)).is_empty());
        let events = live.flush(t0 + FLUSH_AFTER);
        // Runs of one stream go together; the last newline of stdout waits (it may
        // come before Hermes's marker).
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].stream, StdStream::Stdout);
        assert_eq!(events[0].text, "one\ntwo");
        assert_eq!(events[0].tool_id, "t1");
        assert_eq!(events[0].name, "terminal");
        assert_eq!(events[1].stream, StdStream::Stderr);
        assert_eq!(events[1].text, "oops\n");
        assert_eq!(live.due(), None);
        // A big piece is due at once.
        let t1 = t0 + Duration::from_secs(1);
        live.push(piece("a", StdStream::Stderr, &"x".repeat(FLUSH_BYTES)), t1);
        assert_eq!(live.due(), Some(t1));
        assert_eq!(texts(&live.flush(t1)).len(), FLUSH_BYTES);
        // The rest comes with the tool's end, the marker cut.
        live.push(piece("a", StdStream::Stdout, &format!("\n{M}/w{M}\n")), t1);
        let last = live.tool_completed("t1", t1);
        assert_eq!(texts(&last), "\n", "{last:?}");
    }

    #[test]
    fn live_output_stops_at_the_cap_on_a_character_boundary() {
        let t0 = Instant::now();
        let mut live = LiveOutput::new();
        live.tool_started("t1", "terminal", t0);
        let mut sent = String::new();
        for i in 0..100 {
            let now = t0 + Duration::from_millis(i);
            live.push(piece("a", StdStream::Stderr, &"✓".repeat(1000)), now);
            sent += &texts(&live.flush(now + FLUSH_AFTER));
        }
        sent += &texts(&live.tool_completed("t1", t0));
        assert!(sent.len() <= LIVE_OUTPUT_CAP, "{}", sent.len());
        assert!(sent.len() > LIVE_OUTPUT_CAP - 3, "{}", sent.len());
        assert!(sent.chars().all(|c| c == '✓'));
        // The next call has its own cap.
        live.tool_started("t2", "terminal", t0);
        live.push(piece("b", StdStream::Stderr, "more"), t0);
        assert_eq!(texts(&live.tool_completed("t2", t0)), "more");
    }

    #[test]
    fn output_before_its_tool_start_is_held_briefly_and_late_output_is_dropped() {
        let t0 = Instant::now();
        let mut live = LiveOutput::new();
        // Hermes's own shell before any tool: held, then dropped after EARLY_HOLD.
        live.push(piece("snap", StdStream::Stdout, "profile noise"), t0);
        live.push(piece("cmd", StdStream::Stderr, "early"), t0 + EARLY_HOLD);
        live.tool_started("t1", "terminal", t0 + EARLY_HOLD);
        live.push(
            piece("cmd", StdStream::Stderr, " and on time"),
            t0 + EARLY_HOLD,
        );
        let got = live.tool_completed("t1", t0 + EARLY_HOLD);
        assert_eq!(texts(&got), "early and on time");
        // The command's output after its tool completed is not the next tool's.
        live.tool_started("t2", "terminal", t0);
        live.push(piece("cmd", StdStream::Stderr, "late"), t0);
        live.push(piece("cmd2", StdStream::Stderr, "mine"), t0);
        assert_eq!(texts(&live.tool_completed("t2", t0)), "mine");
    }

    #[test]
    fn only_commands_are_live_and_dropped_bytes_are_said() {
        let t0 = Instant::now();
        let mut live = LiveOutput::new();
        live.tool_started("r", "read_file", t0);
        live.push(piece("a", StdStream::Stdout, "file text\n"), t0);
        assert!(live.tool_completed("r", t0).is_empty());
        live.tool_started("t", "terminal", t0);
        let mut p = piece("b", StdStream::Stderr, "after\n");
        p.dropped = 4096;
        live.push(p, t0);
        assert_eq!(
            texts(&live.tool_completed("t", t0)),
            "\n[4096 bytes of output not shown live]\nafter\n"
        );
        // Unknown tools complete with nothing.
        assert!(live.tool_completed("nope", t0).is_empty());
    }

    #[test]
    fn early_output_is_bounded() {
        let t0 = Instant::now();
        let mut live = LiveOutput::new();
        for i in 0..100 {
            live.push(
                piece(&format!("i{i}"), StdStream::Stderr, &"y".repeat(4096)),
                t0,
            );
        }
        assert!(live.early_bytes <= EARLY_CAP);
        live.tool_started("t", "terminal", t0);
        assert_eq!(texts(&live.tool_completed("t", t0)).len(), EARLY_CAP);
    }
}
