//! The scheduler: how many commands run at once, which wait, and who is
//! refused with `busy`.
//!
//! A request names what it needs: one slot of the global limit, one slot of
//! its group (if the group has a limit) and its exclusive key (if any).
//!
//! # Why it cannot deadlock
//!
//! Everything a request needs is taken *at once, under one mutex, and only
//! when all of it is free*; a request never holds one resource while waiting
//! for another, and each request holds at most one permit. With no
//! hold-and-wait there is no cycle of waiters, so no deadlock, whatever the
//! mix of groups and exclusive keys. Releasing a permit gives everything back
//! under the same mutex and then starts every waiter that now fits, scanning
//! by priority (`high`, `normal`, `low`) then arrival order; a waiter blocked
//! on a busy group or key does not block others behind it that can run.
//!
//! # Busy
//!
//! When nothing is free and the queue holds `queue` waiters already, the
//! request is refused at once (no await) with a `retry_after_ms` estimated
//! from recent run times.

mod state;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::oneshot;

pub(crate) use state::Limits;
use state::{State, WaitKey};

/// Request priority; higher runs first among waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) enum Priority {
    Low,
    #[default]
    Normal,
    High,
}

impl Priority {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "high" => Some(Self::High),
            "normal" => Some(Self::Normal),
            "low" => Some(Self::Low),
            _ => None,
        }
    }
}

/// What one request needs to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Demand {
    pub(crate) group: Option<String>,
    pub(crate) exclusive: Option<String>,
    pub(crate) priority: Priority,
}

/// The queue is full; try again after `retry_after_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the queue is full ({queued} waiting, {running} running); retry after {retry_after_ms} ms")]
pub(crate) struct Busy {
    pub(crate) retry_after_ms: u64,
    pub(crate) queued: usize,
    pub(crate) running: usize,
}

/// A snapshot of the scheduler's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) running: usize,
    pub(crate) queued: usize,
    pub(crate) global: usize,
    pub(crate) queue: usize,
}

struct Inner {
    state: Mutex<State<oneshot::Sender<Permit>>>,
    /// Exponentially weighted mean of how long permits are held, in ms.
    mean_hold_ms: AtomicU64,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State<oneshot::Sender<Permit>>> {
        // A panic while holding the lock leaves consistent counters (every
        // update is a single step), so a poisoned lock is still usable.
        crate::sync::lock(&self.state)
    }
}

/// The scheduler; cheap to clone, shared by every request of a process.
#[derive(Clone)]
pub(crate) struct Scheduler {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("load", &self.load())
            .finish()
    }
}

/// Holding a permit is running; dropping it gives everything back and
/// starts the next waiters that fit.
pub(crate) struct Permit {
    inner: Arc<Inner>,
    demand: Demand,
    since: Instant,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("demand", &self.demand)
            .finish()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let held = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mean = self.inner.mean_hold_ms.load(Ordering::Relaxed);
        self.inner
            .mean_hold_ms
            .store((mean * 7 + held) / 8, Ordering::Relaxed);
        let granted = {
            let mut state = self.inner.lock();
            state.give_back(&self.demand);
            state.grant_ready()
        };
        // Sent outside the lock: a waiter that went away hands its permit
        // back through this same Drop, which takes the lock again.
        for (demand, sender) in granted {
            let permit = Permit {
                inner: self.inner.clone(),
                demand,
                since: Instant::now(),
            };
            drop(sender.send(permit));
        }
    }
}

/// Removes a waiter whose request went away before it was started.
struct WaitGuard {
    inner: Arc<Inner>,
    key: Option<WaitKey>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.inner.lock().waiting.remove(&key);
        }
    }
}

impl Scheduler {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::new(limits)),
                mean_hold_ms: AtomicU64::new(100),
            }),
        }
    }

    /// The default global limit: cores × 3.
    pub(crate) fn default_global() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get()) * 3
    }

    /// Waits until everything `demand` needs is free and takes it, or
    /// answers [`Busy`] at once when the queue is full.
    pub(crate) async fn acquire(&self, demand: Demand) -> Result<Permit, Busy> {
        let (key, receiver) = {
            let mut state = self.inner.lock();
            if state.fits(&demand) {
                state.take(&demand);
                return Ok(Permit {
                    inner: self.inner.clone(),
                    demand,
                    since: Instant::now(),
                });
            }
            if state.waiting.len() >= state.limits.queue {
                return Err(self.busy(&state));
            }
            let (sender, receiver) = oneshot::channel();
            (state.enqueue(demand, sender), receiver)
        };
        let mut guard = WaitGuard {
            inner: self.inner.clone(),
            key: Some(key),
        };
        let permit = receiver.await;
        guard.key = None;
        permit.map_err(|_| {
            let state = self.inner.lock();
            self.busy(&state)
        })
    }

    fn busy<T>(&self, state: &State<T>) -> Busy {
        let mean = self.inner.mean_hold_ms.load(Ordering::Relaxed).max(1);
        let global = state.limits.global.max(1) as u64;
        let rounds = (state.waiting.len() as u64 + 1).div_ceil(global);
        Busy {
            retry_after_ms: (mean * rounds).clamp(10, 60_000),
            queued: state.waiting.len(),
            running: state.running,
        }
    }

    /// How loaded the scheduler is right now.
    pub(crate) fn load(&self) -> Load {
        let state = self.inner.lock();
        Load {
            running: state.running,
            queued: state.waiting.len(),
            global: state.limits.global,
            queue: state.limits.queue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn plain() -> Demand {
        Demand {
            group: None,
            exclusive: None,
            priority: Priority::Normal,
        }
    }

    fn scheduler(global: usize, queue: usize) -> Scheduler {
        Scheduler::new(Limits {
            global,
            queue,
            groups: Default::default(),
        })
    }

    #[tokio::test]
    async fn full_queue_answers_busy_at_once() {
        let s = scheduler(1, 1);
        let running = s.acquire(plain()).await.unwrap();
        let s2 = s.clone();
        let waiter = tokio::spawn(async move { s2.acquire(plain()).await.map(drop) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let started = Instant::now();
        let busy = s.acquire(plain()).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(10));
        assert!(busy.retry_after_ms >= 10);
        drop(running);
        waiter.await.unwrap().unwrap();
        assert_eq!(s.load().running, 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_leaves_no_trace() {
        let s = scheduler(1, 4);
        let running = s.acquire(plain()).await.unwrap();
        let s2 = s.clone();
        let waiter = tokio::spawn(async move { s2.acquire(plain()).await.map(drop) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(s.load().queued, 1);
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(s.load().queued, 0);
        drop(running);
        assert_eq!(s.load().running, 0);
        let again = s.acquire(plain()).await.unwrap();
        drop(again);
    }
}
