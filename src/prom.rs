//! Prometheus metrics shared by the control plane and the Runner: the process-global
//! recorder of the `metrics` crate (counters, gauges and histograms recorded where things
//! happen) and a writer for gauges computed at scrape time (from the database, say), which
//! are appended to the recorder's text.

use std::fmt::Write;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Histogram buckets, in seconds: from a long-poll that was already waiting (milliseconds)
/// to a Runner that was away for minutes.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0,
];

/// The recorder's handle. The recorder is process-global: installed once, on first use;
/// every later caller (another control plane state in the same test process) shares it.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new()
            .set_buckets(BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let handle = recorder.handle();
        if metrics::set_global_recorder(recorder).is_err() {
            tracing::warn!("another metrics recorder was installed first; counters stay empty");
        }
        handle
    })
}

/// Drains the recorder's histogram samples into their buckets now and then, so memory stays
/// bounded between scrapes (nobody may scrape at all). Runs until its task is dropped.
pub async fn upkeep_forever() {
    let handle = handle();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
    loop {
        tick.tick().await;
        handle.run_upkeep();
    }
}

/// Gauges written as Prometheus text (version 0.0.4).
#[derive(Default)]
pub struct Text(String);

impl Text {
    /// Starts a gauge family: its HELP and TYPE lines.
    pub fn gauge(&mut self, name: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} gauge");
        self
    }

    /// One sample of the family started last.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
        self
    }

    pub fn finish(self) -> String {
        self.0
    }
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The whole scrape: what the recorder holds, then the scrape-time gauges.
pub fn render(gauges: Text) -> String {
    let mut out = handle().render();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&gauges.finish());
    out
}

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_are_written_with_escaped_labels() {
        let mut t = Text::default();
        t.gauge("yy_x", "An x.")
            .sample("yy_x", &[("state", "a\"b\\c\nd")], 2.0)
            .sample("yy_x", &[], 0.5);
        assert_eq!(
            t.finish(),
            "# HELP yy_x An x.\n# TYPE yy_x gauge\nyy_x{state=\"a\\\"b\\\\c\\nd\"} 2\nyy_x 0.5\n"
        );
    }
}
