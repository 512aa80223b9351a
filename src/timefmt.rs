//! Timestamps are stored as Unix milliseconds and shown as RFC 3339 (UTC).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Unix microseconds (for measurements finer than a millisecond, e.g. pickup latency).
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

pub fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

pub fn rfc3339_opt(ms: Option<i64>) -> Option<String> {
    ms.map(rfc3339)
}

/// `30m`, `1h30m`, `45s`: how a duration reads in a sentence.
pub fn duration_words(ms: i64) -> String {
    let secs = (ms / 1000).max(0) as u64;
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::duration_words;

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(duration_words(30 * 60_000), "30m");
        assert_eq!(duration_words(90 * 60_000), "1h30m");
        assert_eq!(duration_words(3000), "3s");
        assert_eq!(duration_words(0), "0s");
    }
}
