//! In-memory connection state of Runners: which generation and instance is live in this
//! process, and the wake-ups for long-polls (new work) and waiters (a command finished).
//!
//! It is deliberately not persisted: after a control plane restart no generation is live,
//! so every Runner must connect again and gets a new generation.

use crate::api::ids::Generation;
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
    /// Long-polls of this Runner open now, and when the last one ended: a Runner with a
    /// live generation but no long-poll for a while is gone (killed, or its network).
    polls: Mutex<(usize, Option<Instant>)>,
}

/// How long a Runner may go without a long-poll open before it counts as away.
const AWAY_AFTER: Duration = Duration::from_secs(2);

/// Counts one open long-poll while it lives.
pub struct PollGuard(Arc<RunnerSignals>);

impl Drop for PollGuard {
    fn drop(&mut self) {
        let mut polls = self.0.polls.lock().unwrap_or_else(|p| p.into_inner());
        polls.0 = polls.0.saturating_sub(1);
        polls.1 = Some(Instant::now());
    }
}

struct Live {
    generation: Generation,
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
    pub fn check(&self, generation: Generation, instance: &str) -> Result<(), GenerationError> {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        match &*live {
            Some(l) if l.generation == generation && l.instance == instance => Ok(()),
            Some(l) if l.instance != instance => Err(GenerationError::Replaced {
                instance: l.instance.clone(),
            }),
            _ => Err(GenerationError::Stale),
        }
    }

    /// Marks a long-poll open until the guard drops.
    pub fn polling(self: &Arc<Self>) -> PollGuard {
        self.polls.lock().unwrap_or_else(|p| p.into_inner()).0 += 1;
        PollGuard(self.clone())
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
    /// The live generation only grows: connects that commit in one order may reach this
    /// in another, and an older one must not replace the newest.
    pub fn set_live(&self, runner_id: &str, generation: Generation, instance: &str) {
        let signals = self.signals(runner_id);
        {
            let mut live = signals.live.lock().unwrap_or_else(|p| p.into_inner());
            if live.as_ref().is_some_and(|l| l.generation > generation) {
                return;
            }
            *live = Some(Live {
                generation,
                instance: instance.to_string(),
                touched: Instant::now(),
            });
        }
        signals.work.notify_waiters();
    }

    /// Forgets the live generation (disconnect or disable) and wakes its polls.
    pub fn clear(&self, runner_id: &str, generation: Option<Generation>) {
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

    /// Whether `runner_id` holds a live generation and is polling for work (or was a
    /// moment ago).
    pub fn is_live(&self, runner_id: &str) -> bool {
        let map = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        map.get(runner_id).is_some_and(|s| {
            let live = s.live.lock().map(|l| l.is_some()).unwrap_or(false);
            let (open, ended) = *s.polls.lock().unwrap_or_else(|p| p.into_inner());
            live && (open > 0 || ended.is_some_and(|t| t.elapsed() < AWAY_AFTER))
        })
    }

    /// The signals of `runner_id` if anything here ever waited on them.
    pub fn existing(&self, runner_id: &str) -> Option<Arc<RunnerSignals>> {
        let map = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        map.get(runner_id).cloned()
    }

    /// Wakes every long-poll and waiter: they all look at the database again.
    pub fn wake_all(&self) {
        let map = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        for signals in map.values() {
            signals.work.notify_waiters();
            signals.done.notify_waiters();
        }
    }

    /// Long-polls open right now, of every Runner.
    pub fn open_polls(&self) -> usize {
        let map = self.runners.lock().unwrap_or_else(|p| p.into_inner());
        map.values()
            .map(|s| s.polls.lock().unwrap_or_else(|p| p.into_inner()).0)
            .sum()
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
        assert_eq!(s.check(Generation(1), "a"), Err(GenerationError::Stale));
        hub.set_live("r", Generation(1), "a");
        assert_eq!(s.check(Generation(1), "a"), Ok(()));
        hub.set_live("r", Generation(2), "a");
        assert_eq!(s.check(Generation(1), "a"), Err(GenerationError::Stale));
        hub.set_live("r", Generation(3), "b");
        assert_eq!(
            s.check(Generation(2), "a"),
            Err(GenerationError::Replaced {
                instance: "b".into()
            })
        );
        hub.clear("r", Some(Generation(2)));
        assert_eq!(
            s.check(Generation(3), "b"),
            Ok(()),
            "clearing an old generation keeps the new"
        );
        hub.clear("r", Some(Generation(3)));
        assert_eq!(s.check(Generation(3), "b"), Err(GenerationError::Stale));
    }

    #[test]
    fn a_late_older_connect_never_replaces_the_newest() {
        let hub = Hub::default();
        let s = hub.signals("r");
        hub.set_live("r", Generation(5), "newest");
        hub.set_live("r", Generation(4), "older");
        assert_eq!(s.check(Generation(5), "newest"), Ok(()));
        assert_eq!(
            s.check(Generation(4), "older"),
            Err(GenerationError::Replaced {
                instance: "newest".into()
            })
        );
    }
}
