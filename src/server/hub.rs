//! In-memory connection state of Runners: which generation and instance is live in this
//! process, and the wake-ups for long-polls (new work) and waiters (a command finished).
//!
//! It is deliberately not persisted: after a control plane restart no generation is live,
//! so every Runner must connect again and gets a new generation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How often `last_seen_at` is written while a Runner keeps polling.
const TOUCH_EVERY: Duration = Duration::from_secs(10);

#[derive(Default)]
pub struct RunnerSignals {
    /// New work, a new generation, or a disable: long-polls re-check.
    pub work: Notify,
    /// A command of this Runner changed state: waiters re-check.
    pub done: Notify,
    live: Mutex<Option<Live>>,
}

struct Live {
    generation: i64,
    instance: String,
    touched: Instant,
}

/// Why a request's generation is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum GenerationError {
    /// Not current: connect again.
    Stale,
    /// Another instance of the same Runner holds the current generation.
    Replaced { instance: String },
}

impl RunnerSignals {
    pub fn check(&self, generation: i64, instance: &str) -> Result<(), GenerationError> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        match &*live {
            Some(l) if l.generation == generation && l.instance == instance => Ok(()),
            Some(l) if l.instance != instance => Err(GenerationError::Replaced {
                instance: l.instance.clone(),
            }),
            _ => Err(GenerationError::Stale),
        }
    }

    /// True when `last_seen_at` should be written now.
    pub fn should_touch(&self) -> bool {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        match live.as_mut() {
            Some(l) if l.touched.elapsed() >= TOUCH_EVERY => {
                l.touched = Instant::now();
                true
            }
            _ => false,
        }
    }
}

#[derive(Default)]
pub struct Hub {
    runners: Mutex<HashMap<String, Arc<RunnerSignals>>>,
}

impl Hub {
    pub fn signals(&self, runner_id: &str) -> Arc<RunnerSignals> {
        let mut map = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(runner_id.to_string()).or_default().clone()
    }

    /// Makes `generation` of `instance` the live one and wakes the previous one's polls.
    pub fn set_live(&self, runner_id: &str, generation: i64, instance: &str) {
        let signals = self.signals(runner_id);
        *signals.live.lock().unwrap_or_else(|p| p.into_inner()) = Some(Live {
            generation,
            instance: instance.to_string(),
            touched: Instant::now(),
        });
        signals.work.notify_waiters();
    }

    /// Forgets the live generation (disconnect or disable) and wakes its polls.
    pub fn clear(&self, runner_id: &str, generation: Option<i64>) {
        let signals = self.signals(runner_id);
        {
            let mut live = signals.live.lock().unwrap_or_else(|p| p.into_inner());
            if generation.is_none() || live.as_ref().map(|l| l.generation) == generation {
                *live = None;
            }
        }
        signals.work.notify_waiters();
        signals.done.notify_waiters();
    }

    /// Whether `runner_id` holds a live generation now.
    pub fn is_live(&self, runner_id: &str) -> bool {
        let map = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        map.get(runner_id)
            .is_some_and(|s| s.live.lock().map(|l| l.is_some()).unwrap_or(false))
    }

    /// Live connections right now.
    pub fn live_count(&self) -> usize {
        let map = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        map.values()
            .filter(|s| s.live.lock().map(|l| l.is_some()).unwrap_or(false))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_fence_old_instances() {
        let hub = Hub::default();
        let s = hub.signals("r");
        assert_eq!(s.check(1, "a"), Err(GenerationError::Stale));
        hub.set_live("r", 1, "a");
        assert_eq!(s.check(1, "a"), Ok(()));
        hub.set_live("r", 2, "a");
        assert_eq!(s.check(1, "a"), Err(GenerationError::Stale));
        hub.set_live("r", 3, "b");
        assert_eq!(
            s.check(2, "a"),
            Err(GenerationError::Replaced {
                instance: "b".into()
            })
        );
        hub.clear("r", Some(2));
        assert_eq!(
            s.check(3, "b"),
            Ok(()),
            "clearing an old generation keeps the new"
        );
        hub.clear("r", Some(3));
        assert_eq!(s.check(3, "b"), Err(GenerationError::Stale));
    }
}
