//! Progress of long copies: a bar with bytes and files when stderr is a terminal; off a
//! terminal (scripts, CI logs) a plain line every few seconds, then the one-line summary.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::api::artifacts::human_size;

/// How often a copy off a terminal says how far it got.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// The plain-line reporter used off a terminal.
struct Lines {
    label: String,
    total_bytes: u64,
    done: AtomicU64,
    last: Mutex<Instant>,
}

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    lines: Option<Lines>,
    files: AtomicU64,
    total_files: u64,
}

impl Progress {
    /// No output at all.
    pub fn hidden() -> Progress {
        Progress {
            bar: None,
            lines: None,
            files: AtomicU64::new(0),
            total_files: 0,
        }
    }

    /// A bar labelled `label` on a terminal; plain lines every few seconds otherwise.
    pub fn new(label: &str, total_bytes: u64, total_files: u64) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress {
                lines: Some(Lines {
                    label: label.to_string(),
                    total_bytes,
                    done: AtomicU64::new(0),
                    last: Mutex::new(Instant::now()),
                }),
                bar: None,
                files: AtomicU64::new(0),
                total_files,
            };
        }
        let bar = ProgressBar::with_draw_target(
            Some(total_bytes),
            ProgressDrawTarget::stderr_with_hz(10),
        );
        let style = ProgressStyle::with_template(
            "{prefix:>9} [{bar:30}] {bytes}/{total_bytes} {msg} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_prefix(label.to_string());
        let p = Progress {
            bar: Some(bar),
            lines: None,
            files: AtomicU64::new(0),
            total_files,
        };
        p.show_files(0);
        p
    }

    fn show_files(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!(
                "{n}/{}",
                crate::api::words::plural(self.total_files, "file", "files")
            ));
        }
    }

    pub fn bytes(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
        if let Some(l) = &self.lines {
            let done = l.done.fetch_add(n, Ordering::Relaxed) + n;
            let mut last = l.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() >= LINE_EVERY {
                *last = Instant::now();
                eprintln!(
                    "{}: {} of {}, {} of {}",
                    l.label,
                    human_size(done),
                    human_size(l.total_bytes),
                    self.files.load(Ordering::Relaxed),
                    crate::api::words::plural(self.total_files, "file", "files")
                );
            }
        }
    }

    /// One more file done; `bytes` more of content not counted through [`Progress::bytes`].
    pub fn file_done(&self, bytes: u64) {
        let n = self.files.fetch_add(1, Ordering::Relaxed) + 1;
        self.bytes(bytes);
        self.show_files(n);
    }

    /// Removes the bar (the summary line follows on stdout).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
