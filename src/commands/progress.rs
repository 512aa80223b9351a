//! What a command is waiting for, and how far a long job got: a spinner or a bar on a
//! terminal, plain lines on stderr otherwise (CI logs, pipes), never on stdout.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output;

/// How often a job off a terminal says how far it got.
const PLAIN_EVERY: Duration = Duration::from_secs(10);

/// How long a wait for a live Runner goes unmentioned.
const PATIENCE: Duration = Duration::from_millis(500);

/// How long the first look at something queued waits: short, so that an offline Runner
/// is said well within a second.
pub const FIRST_LOOK_MS: u64 = 250;

/// How often something queued is looked at again: whether its Runner is there can change.
pub const QUEUED_LOOK_MS: u64 = 500;

fn terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// Why a command is waiting, said as soon as it is known and again when it changes:
/// a spinner on a terminal, one line per change on stderr otherwise.
pub struct Waiting {
    /// How to stop waiting, e.g. "Ctrl-C stops the turn".
    cancel: String,
    since: Instant,
    said: Option<String>,
    spinner: Option<ProgressBar>,
}

impl Waiting {
    pub fn new(cancel: impl Into<String>) -> Self {
        Waiting {
            cancel: cancel.into(),
            since: Instant::now(),
            said: None,
            spinner: None,
        }
    }

    /// Reports the current reason (None: no longer waiting). The reason may come from the
    /// server and is cleaned for the terminal.
    pub fn say(&mut self, reason: Option<&str>) {
        let Some(reason) = reason else {
            self.clear();
            return;
        };
        // A live Runner usually takes work within moments: "not taken yet" is held back
        // for half a second so that every command does not flash it, while an offline Runner
        // is said at once.
        if self.since.elapsed() < PATIENCE && !reason.contains("offline") {
            return;
        }
        self.say_now(reason);
    }

    /// Reports a reason at once: what the Runner says it is doing (starting a session, a
    /// full pool) is news, not a flash of a wait that is about to end.
    pub fn say_now(&mut self, reason: &str) {
        if self.said.as_deref() == Some(reason) {
            return;
        }
        self.said = Some(reason.to_string());
        let line = format!("{}; {}", output::clean(reason), self.cancel);
        if terminal() {
            let spinner = self.spinner.get_or_insert_with(|| {
                let s = ProgressBar::new_spinner();
                s.set_draw_target(ProgressDrawTarget::stderr());
                s.set_style(
                    ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                        .expect("a valid template"),
                );
                s.enable_steady_tick(Duration::from_millis(120));
                s
            });
            spinner.set_message(line);
        } else {
            eprintln!("[{line}]");
        }
    }

    /// Ends the spinner (and forgets the reason, so that a later wait is said again).
    pub fn clear(&mut self) {
        if let Some(s) = self.spinner.take() {
            s.finish_and_clear();
        }
        self.said = None;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Progress of a job with a known or unknown size (bytes or steps): a bar on a terminal,
/// a plain line every few seconds otherwise.
pub struct Progress {
    what: String,
    bar: Option<ProgressBar>,
    total: Option<u64>,
    done: u64,
    bytes: bool,
    last_line: Instant,
    started: Instant,
}

impl Progress {
    /// Progress in bytes of `total` (None: unknown).
    pub fn bytes(what: impl Into<String>, total: Option<u64>) -> Self {
        Self::new(what.into(), total, true)
    }

    /// Progress in steps (e.g. the steps of an image build): a spinner with the step.
    pub fn steps(what: impl Into<String>) -> Self {
        Self::new(what.into(), None, false)
    }

    fn new(what: String, total: Option<u64>, bytes: bool) -> Self {
        // What is named may come from elsewhere (an artifact's name): cleaned once.
        let what = output::clean(&what).into_owned();
        let bar = terminal().then(|| {
            let bar = match total {
                Some(t) => ProgressBar::new(t),
                None => ProgressBar::new_spinner(),
            };
            bar.set_draw_target(ProgressDrawTarget::stderr());
            let template = match (total.is_some(), bytes) {
                (true, true) => "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                (false, true) => "{spinner} {msg} {bytes} {bytes_per_sec} ({elapsed})",
                _ => "{spinner} {msg} ({elapsed})",
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .expect("a valid template")
                    .progress_chars("=> "),
            );
            bar.set_message(what.clone());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            what,
            bar,
            total,
            done: 0,
            bytes,
            last_line: Instant::now(),
            started: Instant::now(),
        }
    }

    /// `n` more bytes (or steps) done.
    pub fn inc(&mut self, n: u64) {
        self.done += n;
        match &self.bar {
            Some(bar) => bar.inc(n),
            None if self.last_line.elapsed() >= PLAIN_EVERY => {
                self.last_line = Instant::now();
                eprintln!("{}: {}", self.what, self.amount());
            }
            None => {}
        }
    }

    /// A new step: shown in the spinner, or as its own line off a terminal.
    pub fn step(&mut self, text: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(format!("{}: {}", self.what, output::clean(text))),
            None => {
                self.last_line = Instant::now();
                eprintln!("{}: {}", self.what, output::clean(text));
            }
        }
    }

    /// A line that must stay on screen (a warning): printed above the bar.
    pub fn note(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("{}: {}", self.what, output::clean(text))),
            None => eprintln!("{}: {}", self.what, output::clean(text)),
        }
    }

    fn amount(&self) -> String {
        let (done, total) = if self.bytes {
            (
                human_bytes(self.done),
                self.total.map(human_bytes).unwrap_or_default(),
            )
        } else {
            (
                self.done.to_string(),
                self.total.map(|t| t.to_string()).unwrap_or_default(),
            )
        };
        let elapsed = human_duration(self.started.elapsed());
        match self.total {
            Some(_) => format!("{done} of {total} after {elapsed}"),
            None => format!("{done} after {elapsed}"),
        }
    }

    /// Removes the bar; off a terminal, says where it ended when it took a while.
    pub fn finish(self) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None if self.bytes && self.started.elapsed() >= PLAIN_EVERY => {
                eprintln!("{}: {}", self.what, self.amount())
            }
            None => {}
        }
    }
}

/// Sizes as people read them (one spelling everywhere: the artifacts' own).
pub fn human_bytes(n: u64) -> String {
    crate::api::artifacts::human_size(n)
}

/// Durations as people read them: 850ms, 4.2s, 3m 20s, 2h 5m.
pub fn human_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = d.as_secs_f64();
    if s < 60.0 {
        return format!("{s:.1}s");
    }
    let secs = d.as_secs();
    if secs < 3600 {
        return format!("{}m {}s", secs / 60, secs % 60);
    }
    format!("{}h {}m", secs / 3600, (secs % 3600) / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_duration(Duration::from_millis(850)), "850ms");
        assert_eq!(human_duration(Duration::from_millis(4200)), "4.2s");
        assert_eq!(human_duration(Duration::from_secs(200)), "3m 20s");
        assert_eq!(human_duration(Duration::from_secs(7500)), "2h 5m");
    }
}
