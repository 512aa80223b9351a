//! Login flood control. Each argon2id check takes ~19 MiB and a core for a while, so only
//! about one check per core runs at once and a short queue waits for them; past that the
//! server answers 429 with `Retry-After`. Failed logins slow down further attempts for the
//! same account and from the same client address with delays that grow with each failure.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

/// Failures allowed before delays start (typos happen).
const FREE_FAILURES: u32 = 3;
/// The first delay; each further failure doubles it, up to [`MAX_DELAY`].
const FIRST_DELAY: Duration = Duration::from_secs(1);
const MAX_DELAY: Duration = Duration::from_secs(60);
/// A key with no failure for this long is forgotten.
const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);
/// Most keys remembered; past it the oldest quiet ones are dropped (the map is bounded).
const MAX_KEYS: usize = 10_000;
/// Longest a login waits in the queue for a check slot.
const QUEUE_WAIT: Duration = Duration::from_secs(5);

/// Why a login is not checked now; the caller answers 429 with `Retry-After`.
#[derive(Debug, PartialEq, Eq)]
pub struct Busy {
    pub retry_after_secs: u64,
    pub reason: &'static str,
}

pub struct LoginGuard {
    checks: Semaphore,
    /// Logins waiting for or holding a check slot.
    admitted: AtomicUsize,
    max_admitted: usize,
    failures: Mutex<HashMap<Key, Failures>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Account(String),
    Address(IpAddr),
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    blocked_until: Instant,
}

/// A check slot; the next login may start when it is dropped.
pub struct Slot<'a> {
    _permit: SemaphorePermit<'a>,
    admitted: &'a AtomicUsize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.admitted.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Default for LoginGuard {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        LoginGuard::new(cores.clamp(1, 8), 16)
    }
}

impl LoginGuard {
    /// `concurrent` checks at once, `queue` more waiting.
    pub fn new(concurrent: usize, queue: usize) -> LoginGuard {
        LoginGuard {
            checks: Semaphore::new(concurrent),
            admitted: AtomicUsize::new(0),
            max_admitted: concurrent + queue,
            failures: Mutex::default(),
        }
    }

    /// Refuses a login while its account or address is in a failure delay.
    pub fn throttled(&self, account: &str, address: IpAddr) -> Result<(), Busy> {
        let now = Instant::now();
        let map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let wait = [Key::Account(account.to_string()), Key::Address(address)]
            .iter()
            .filter_map(|k| map.get(k))
            .map(|f| f.blocked_until.saturating_duration_since(now))
            .max()
            .unwrap_or_default();
        if wait.is_zero() {
            return Ok(());
        }
        Err(Busy {
            retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
            reason: "too many failed logins for this account or from this address",
        })
    }

    /// Waits for a check slot behind a short queue, or refuses at once when it is full.
    pub async fn slot(&self) -> Result<Slot<'_>, Busy> {
        let busy = Busy {
            retry_after_secs: 1,
            reason: "the server is busy checking other logins",
        };
        if self.admitted.fetch_add(1, Ordering::AcqRel) >= self.max_admitted {
            self.admitted.fetch_sub(1, Ordering::AcqRel);
            return Err(busy);
        }
        match tokio::time::timeout(QUEUE_WAIT, self.checks.acquire()).await {
            Ok(Ok(permit)) => Ok(Slot {
                _permit: permit,
                admitted: &self.admitted,
            }),
            _ => {
                self.admitted.fetch_sub(1, Ordering::AcqRel);
                Err(busy)
            }
        }
    }

    /// Records a failed login; the next attempts wait longer.
    pub fn failed(&self, account: &str, address: IpAddr) {
        super::telemetry::login_failed();
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_KEYS {
            map.retain(|_, f| now.duration_since(f.last) < FORGET_AFTER);
            if map.len() >= MAX_KEYS {
                // Still full of fresh keys (a flood from many addresses): drop the quietest
                // half rather than grow.
                let mut lasts: Vec<Instant> = map.values().map(|f| f.last).collect();
                lasts.sort_unstable();
                let cut = lasts[lasts.len() / 2];
                map.retain(|_, f| f.last > cut);
            }
        }
        for key in [Key::Account(account.to_string()), Key::Address(address)] {
            let f = map.entry(key).or_insert(Failures {
                count: 0,
                last: now,
                blocked_until: now,
            });
            if now.duration_since(f.last) >= FORGET_AFTER {
                f.count = 0;
            }
            f.count = f.count.saturating_add(1);
            f.last = now;
            f.blocked_until = now + delay(f.count);
        }
    }

    /// A successful login clears its account's and address's failures.
    pub fn succeeded(&self, account: &str, address: IpAddr) {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&Key::Account(account.to_string()));
        map.remove(&Key::Address(address));
    }
}

/// The delay after `count` failures in a row.
fn delay(count: u32) -> Duration {
    if count <= FREE_FAILURES {
        return Duration::ZERO;
    }
    let doublings = (count - FREE_FAILURES - 1).min(16);
    (FIRST_DELAY * 2u32.pow(doublings)).min(MAX_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

    #[test]
    fn delays_grow_per_account_and_per_address_and_success_clears_them() {
        assert_eq!(delay(3), Duration::ZERO);
        assert_eq!(delay(4), Duration::from_secs(1));
        assert_eq!(delay(5), Duration::from_secs(2));
        assert_eq!(delay(40), MAX_DELAY);
        let g = LoginGuard::new(1, 1);
        for _ in 0..FREE_FAILURES {
            g.failed("root", A);
        }
        assert!(g.throttled("root", A).is_ok());
        g.failed("root", A);
        let busy = g.throttled("root", B).unwrap_err();
        assert_eq!(busy.retry_after_secs, 1, "the account is throttled");
        assert!(g.throttled("other", A).is_err(), "the address is throttled");
        assert!(g.throttled("other", B).is_ok());
        g.succeeded("root", A);
        assert!(g.throttled("root", A).is_ok());
    }

    #[tokio::test]
    async fn past_the_queue_logins_are_refused_at_once() {
        let g = LoginGuard::new(1, 1);
        let first = g.slot().await.unwrap();
        let waiting = g.slot();
        tokio::pin!(waiting);
        assert!(
            futures_util::poll!(waiting.as_mut()).is_pending(),
            "the second waits in the queue"
        );
        assert_eq!(g.slot().await.err().unwrap().retry_after_secs, 1);
        drop(first);
        assert!(waiting.await.is_ok());
    }
}
