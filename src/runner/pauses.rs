//! Operator takeover on the Runner: a computer whose model is paused. The model is stopped
//! at its next tool call (the tool in flight finishes first); a handback resumes it with
//! the operator's note, which the model gets instead of the tool it was waiting to run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::api::computers::{PauseResult, ResumeResult};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, Default)]
struct State {
    paused: bool,
    /// A tool of the computer's turn is running now.
    in_tool: bool,
    control_fence: i64,
    /// The handback note, for the waiting tool call to take.
    note: Option<String>,
}

/// The pause state of every computer of this Runner (in memory: a Runner restart ends its
/// turns anyway, and the control plane keeps the control itself).
#[derive(Default)]
pub struct Pauses {
    cells: Mutex<HashMap<String, Arc<watch::Sender<State>>>>,
}

/// What a tool call may do.
pub enum Gate {
    /// Run it (and call [`Pauses::leave`] when it ended).
    Run,
    /// An operator had control; it is back with this note. The tool is not run.
    HandedBack(String),
    /// The turn was stopped while paused.
    Stopped,
}

impl Pauses {
    fn cell(&self, computer: &str) -> Arc<watch::Sender<State>> {
        self.cells
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(computer.to_string())
            .or_insert_with(|| Arc::new(watch::Sender::new(State::default())))
            .clone()
    }

    /// Pauses the computer's model; answers once no tool is in flight.
    pub async fn pause(&self, computer: &str, control_fence: i64) -> Value {
        let cell = self.cell(computer);
        cell.send_modify(|s| {
            s.paused = true;
            s.control_fence = control_fence;
            s.note = None;
        });
        let started = std::time::Instant::now();
        let mut rx = cell.subscribe();
        let _ = rx.wait_for(|s| !s.in_tool).await;
        serde_json::to_value(PauseResult {
            paused: true,
            control_fence,
            waited_for_tool_ms: started.elapsed().as_millis() as u64,
        })
        .expect("serializes")
    }

    /// Resumes the model with the operator's note.
    pub fn resume(&self, computer: &str, control_fence: i64, note: &str) -> Value {
        let cell = self.cell(computer);
        let mut was_paused = false;
        cell.send_modify(|s| {
            was_paused = s.paused;
            s.paused = false;
            s.note = Some(note.to_string());
        });
        serde_json::to_value(ResumeResult {
            resumed: was_paused,
            control_fence,
        })
        .expect("serializes")
    }

    /// Before a tool call: run it, or wait while the computer is paused (`on_pause` is told
    /// once) and then hand the note back instead.
    pub async fn enter(
        &self,
        computer: &str,
        stop: &CancellationToken,
        on_pause: impl FnOnce(),
    ) -> Gate {
        let cell = self.cell(computer);
        let mut run = false;
        cell.send_if_modified(|s| {
            if s.paused {
                return false;
            }
            s.in_tool = true;
            s.note = None;
            run = true;
            true
        });
        if run {
            return Gate::Run;
        }
        on_pause();
        let mut rx = cell.subscribe();
        tokio::select! {
            _ = rx.wait_for(|s| !s.paused) => {}
            _ = stop.cancelled() => return Gate::Stopped,
        }
        let mut note = None;
        cell.send_modify(|s| note = s.note.take());
        Gate::HandedBack(note.unwrap_or_default())
    }

    /// The tool call that [`Pauses::enter`] let run has ended.
    pub fn leave(&self, computer: &str) {
        self.cell(computer).send_modify(|s| s.in_tool = false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_pause_waits_for_the_tool_in_flight_and_holds_the_next() {
        let p = Arc::new(Pauses::default());
        let stop = CancellationToken::new();
        assert!(matches!(p.enter("c", &stop, || {}).await, Gate::Run));
        let pausing = tokio::spawn({
            let p = p.clone();
            async move { p.pause("c", 7).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!pausing.is_finished(), "a tool is in flight");
        p.leave("c");
        let v = pausing.await.unwrap();
        assert_eq!(v["paused"], true);
        // The next tool call waits until the handback, then gets the note.
        let next = tokio::spawn({
            let p = p.clone();
            let stop = stop.clone();
            async move {
                match p.enter("c", &stop, || {}).await {
                    Gate::HandedBack(n) => n,
                    _ => "ran".into(),
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!next.is_finished(), "nothing resumes by itself");
        assert_eq!(p.resume("c", 7, "fixed the login")["resumed"], true);
        assert_eq!(next.await.unwrap(), "fixed the login");
        // Other computers were never paused.
        assert!(matches!(p.enter("d", &stop, || {}).await, Gate::Run));
        // A stop ends the wait.
        p.pause("c", 8).await;
        stop.cancel();
        assert!(matches!(p.enter("c", &stop, || {}).await, Gate::Stopped));
    }
}
