//! A running tool's output as `tool.output` turn events: pieces that arrive close together
//! travel as one event, and a call sends at most [`LIVE_OUTPUT_CAP`] live.

use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::api::sessions::{LIVE_OUTPUT_CAP, StdStream, ToolOutput, TurnEvent};

/// Pieces within this time of the last event wait and go out together.
const EVERY: Duration = Duration::from_millis(250);
/// What an event costs against the cap at least, so a trickle of single bytes cannot
/// make tens of thousands of events.
const EVENT_COST: usize = 128;

/// The live output of one tool call. Dropping it (or [`finish`](Self::finish)) sends what
/// is still pending.
pub struct LiveOutput {
    tx: UnboundedSender<(StdStream, String)>,
    task: tokio::task::JoinHandle<()>,
}

impl LiveOutput {
    pub fn start(tool_id: &str, name: &str, events: UnboundedSender<TurnEvent>) -> LiveOutput {
        let (tx, rx) = unbounded_channel();
        let task = tokio::spawn(forward(
            Piece {
                tool_id: tool_id.into(),
                name: name.into(),
            },
            rx,
            events,
        ));
        LiveOutput { tx, task }
    }

    /// Takes a piece of output; never waits.
    pub fn push(&self, stream: StdStream, text: &str) {
        if !text.is_empty() {
            let _ = self.tx.send((stream, text.to_string()));
        }
    }

    /// Sends what is pending and returns once it is sent (before the tool's completion).
    pub async fn finish(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}

struct Piece {
    tool_id: String,
    name: String,
}

/// Pending output in arrival order, adjacent pieces of one stream merged.
#[derive(Default)]
struct Pending(Vec<(StdStream, String)>);

impl Pending {
    fn add(&mut self, stream: StdStream, text: &str) {
        match self.0.last_mut() {
            Some((s, t)) if *s == stream => t.push_str(text),
            _ => self.0.push((stream, text.to_string())),
        }
    }
}

/// What is left of one tool call's live output ([`LIVE_OUTPUT_CAP`]), for computer and
/// host turns alike.
pub struct Budget {
    left: usize,
    cut: bool,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            left: LIVE_OUTPUT_CAP,
            cut: false,
        }
    }
}

impl Budget {
    /// True once the call's output went past the cap: nothing more is sent live.
    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// The event for one piece, within the budget: the piece that reaches the cap is cut
    /// where a character ends and marked `cut`; none follows it, nor an empty piece.
    pub fn event(
        &mut self,
        tool_id: &str,
        name: &str,
        stream: StdStream,
        text: String,
    ) -> Option<ToolOutput> {
        if self.cut || text.is_empty() {
            return None;
        }
        let cost = text.len().max(EVENT_COST);
        let text = if cost <= self.left {
            self.left -= cost;
            text
        } else {
            let kept = crate::output::cut_bytes(&text, self.left).to_string();
            self.left = 0;
            self.cut = true;
            kept
        };
        Some(ToolOutput {
            tool_id: tool_id.into(),
            name: name.into(),
            stream,
            text,
            cut: self.cut,
        })
    }

    /// The events for `pending`, in order, within the budget.
    fn events(&mut self, piece: &Piece, pending: Pending) -> Vec<ToolOutput> {
        pending
            .0
            .into_iter()
            .filter_map(|(stream, text)| self.event(&piece.tool_id, &piece.name, stream, text))
            .collect()
    }
}

async fn forward(
    piece: Piece,
    mut rx: UnboundedReceiver<(StdStream, String)>,
    events: UnboundedSender<TurnEvent>,
) {
    let mut budget = Budget::default();
    let mut last = tokio::time::Instant::now() - EVERY;
    let mut open = true;
    while open {
        let mut pending = Pending::default();
        match rx.recv().await {
            Some((stream, text)) => pending.add(stream, &text),
            None => break,
        }
        let due = last + EVERY;
        loop {
            tokio::select! {
                // What is queued already goes with this event.
                biased;
                p = rx.recv() => match p {
                    Some((stream, text)) => pending.add(stream, &text),
                    None => { open = false; break; }
                },
                _ = tokio::time::sleep_until(due) => break,
            }
        }
        for e in budget.events(&piece, pending) {
            let _ = events.send(TurnEvent::ToolOutput(e));
        }
        last = tokio::time::Instant::now();
        if budget.is_cut() {
            // Read and drop the rest, so the producer never waits on a full channel.
            while rx.recv().await.is_some() {}
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece() -> Piece {
        Piece {
            tool_id: "t1".into(),
            name: "terminal".into(),
        }
    }

    #[test]
    fn pieces_of_one_stream_merge_and_streams_keep_their_order() {
        let mut p = Pending::default();
        p.add(StdStream::Stdout, "a");
        p.add(StdStream::Stdout, "b");
        p.add(StdStream::Stderr, "E");
        p.add(StdStream::Stdout, "c");
        let got: Vec<_> = p.0.iter().map(|(s, t)| (*s, t.as_str())).collect();
        assert_eq!(
            got,
            [
                (StdStream::Stdout, "ab"),
                (StdStream::Stderr, "E"),
                (StdStream::Stdout, "c")
            ]
        );
    }

    #[test]
    fn the_budget_cuts_on_a_character_and_marks_the_last_event() {
        let mut b = Budget {
            left: EVENT_COST + 5,
            cut: false,
        };
        let mut p = Pending::default();
        p.add(StdStream::Stdout, "x");
        let first = b.events(&piece(), p);
        assert_eq!(first.len(), 1);
        assert!(!first[0].cut);
        assert_eq!(b.left, 5);
        let mut p = Pending::default();
        p.add(StdStream::Stdout, "ab你好");
        p.add(StdStream::Stderr, "never");
        let last = b.events(&piece(), p);
        assert_eq!(last.len(), 1, "nothing after the cut");
        assert_eq!(last[0].text, "ab你", "cut where a character ends");
        assert!(last[0].cut);
        assert!(
            b.events(&piece(), Pending(vec![(StdStream::Stdout, "z".into())]))
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_burst_travels_as_one_event_and_a_late_piece_is_not_held_back() {
        let (tx, mut rx) = unbounded_channel();
        let live = LiveOutput::start("t1", "terminal", tx);
        live.push(StdStream::Stdout, "first ");
        live.push(StdStream::Stdout, "burst");
        let e = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        let TurnEvent::ToolOutput(first) = e else {
            panic!("{e:?}")
        };
        assert_eq!(first.text, "first burst");
        tokio::time::sleep(EVERY * 2).await;
        let t = std::time::Instant::now();
        live.push(StdStream::Stderr, "late");
        let e = rx.recv().await.unwrap();
        assert!(
            t.elapsed() < EVERY,
            "a piece after a quiet spell goes at once"
        );
        let TurnEvent::ToolOutput(late) = e else {
            panic!("{e:?}")
        };
        assert_eq!(
            (late.stream, late.text.as_str()),
            (StdStream::Stderr, "late")
        );
        live.push(StdStream::Stdout, "tail");
        live.finish().await;
        let Some(TurnEvent::ToolOutput(tail)) = rx.recv().await else {
            panic!("no tail")
        };
        assert_eq!(tail.text, "tail", "finish sends what is pending");
    }
}
