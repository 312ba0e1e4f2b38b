//! The scheduler: how many commands run at once, which wait, and who is
//! refused with `busy`.
//!
//! A request names what it needs: one slot of the global limit, one slot of
//! its group (if the group has a limit) and its exclusive key (if any).
//! Built with [`Scheduler::machine_wide`], those slots are also files locked
//! under `$AGENT_REACH_HOME/run/slots/` ([`slots`]), so the limits hold
//! across every agent-reach process sharing the home, whatever door started
//! a command.
//!
//! # Why it cannot deadlock
//!
//! Everything a request needs is taken *at once, under one mutex, and only
//! when all of it is free* (machine-wide: every lock is tried without
//! blocking, and a partial take is given back at once); a request never
//! holds one resource while waiting for another, and each request holds at
//! most one permit. With no hold-and-wait there is no cycle of waiters, so
//! no deadlock, whatever the mix of groups and exclusive keys. Releasing a
//! permit gives everything back under the same mutex and then starts every
//! waiter that now fits, in order ([`state`]: priority, then turns between
//! callers, then arrival); a waiter blocked on a busy group or key does not
//! block others behind it that can run.
//!
//! # Arrival order
//!
//! [`Scheduler::admit`] is synchronous: a door that reads requests in order
//! admits them in that order, before any of them is awaited, so their
//! places in the queue are their arrival order. A newcomer never passes a
//! waiter: it is queued first, then whoever fits is started. Machine-wide,
//! the waiters of every process sharing the home form one queue
//! ([`tickets`]): a newcomer never passes another process's earlier waiter
//! either (unless that one is blocked on its own group or key), and the
//! queue bound counts them all.
//!
//! # Busy
//!
//! When the queue holds `queue` waiters already (machine-wide: of every
//! process), the newcomer (the newest
//! request) is refused at once (no await) with a `retry_after_ms` estimated
//! from recent run times.

mod priority;
mod slots;
mod state;
mod tickets;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

pub(crate) use priority::Priority;
use slots::{Hold, MachineSlots};
pub(crate) use state::Limits;
use state::{State, WaitKey};

/// The caller a request counts as when its door names none.
pub(crate) use crate::logging::LOCAL_CALLER;

/// How often the head of the queue looks for a slot another process freed.
const MACHINE_POLL: Duration = Duration::from_millis(5);

/// What one request needs to run, and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Demand {
    pub(crate) group: Option<String>,
    pub(crate) exclusive: Option<String>,
    pub(crate) priority: Priority,
    /// Who asks: callers take turns within a priority. A door that knows
    /// its caller (the broker) sets it; otherwise [`LOCAL_CALLER`].
    pub(crate) caller: String,
}

impl Demand {
    /// A demand of the local caller.
    pub(crate) fn new(
        group: Option<String>,
        exclusive: Option<String>,
        priority: Priority,
    ) -> Self {
        Self {
            group,
            exclusive,
            priority,
            caller: LOCAL_CALLER.to_owned(),
        }
    }
}

/// The queue is full; try again after `retry_after_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the queue is full ({queued} waiting, {running} running); retry after {retry_after_ms} ms")]
pub(crate) struct Busy {
    pub(crate) retry_after_ms: u64,
    pub(crate) queued: usize,
    pub(crate) running: usize,
}

/// A snapshot of the scheduler's load (this process's part).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) running: usize,
    pub(crate) queued: usize,
    pub(crate) global: usize,
    pub(crate) queue: usize,
}

type Waker = oneshot::Sender<Permit>;

struct Inner {
    state: Mutex<State<Waker>>,
    /// Exponentially weighted mean of how long permits are held, in ms.
    mean_hold_ms: AtomicU64,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State<Waker>> {
        // A panic while holding the lock leaves consistent counters (every
        // update is a single step), so a poisoned lock is still usable.
        crate::sync::lock(&self.state)
    }

    /// Starts every waiter that fits and wakes them (outside the lock: a
    /// waiter that went away hands its permit back through [`Permit`]'s
    /// `Drop`, which takes the lock again).
    fn grant(self: &Arc<Self>) {
        let granted = self.lock().grant_ready();
        self.wake(granted);
    }

    /// Hands the granted waiters their permits.
    fn wake(self: &Arc<Self>, granted: Vec<(Demand, Option<Hold>, Waker)>) {
        for (demand, hold, sender) in granted {
            drop(sender.send(Permit {
                inner: self.clone(),
                demand,
                hold,
                since: Instant::now(),
            }));
        }
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
    hold: Option<Hold>,
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
        self.inner
            .lock()
            .give_back(&self.demand, self.hold.as_ref());
        self.inner.grant();
    }
}

/// A place in the queue: [`Waiter::wait`] until started. Dropping it
/// leaves the queue without a trace.
pub(crate) struct Waiter {
    inner: Arc<Inner>,
    key: Option<WaitKey>,
    receiver: oneshot::Receiver<Permit>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.inner.lock().remove(&key);
        }
    }
}

impl Waiter {
    /// Waits for the permit. The head of a machine-wide queue polls for a
    /// slot another process freed.
    pub(crate) async fn wait(mut self) -> Result<Permit, Busy> {
        let Some(key) = self.key else {
            return Err(Busy::default());
        };
        let machine_wide = self.inner.lock().is_machine_wide();
        let mut head = machine_wide && self.inner.lock().waiting.keys().next() == Some(&key);
        let got = loop {
            if !machine_wide {
                break (&mut self.receiver).await;
            }
            // Only the head polls the slot files; the others look now and
            // then whether they became the head.
            let pause = if head {
                MACHINE_POLL
            } else {
                MACHINE_POLL * 10
            };
            tokio::select! {
                got = &mut self.receiver => break got,
                () = tokio::time::sleep(pause) => {
                    head = self.inner.lock().waiting.keys().next() == Some(&key);
                    if head {
                        self.inner.grant();
                    }
                }
            }
        };
        // Granted (removed from the queue by the grant), or the scheduler
        // dropped the sender, which it never does while the waiter is queued.
        self.key = None;
        got.map_err(|_| busy(&self.inner, &self.inner.lock(), 0))
    }
}

impl Default for Busy {
    fn default() -> Self {
        Self {
            retry_after_ms: 10,
            queued: 0,
            running: 0,
        }
    }
}

/// What [`Scheduler::admit`] answers when the queue had room.
pub(crate) enum Admission {
    /// Started at once.
    Ready(Permit),
    /// Queued in arrival order.
    Queued(Waiter),
}

impl Admission {
    /// The permit, now or when the request's turn comes.
    pub(crate) async fn permit(self) -> Result<Permit, Busy> {
        match self {
            Admission::Ready(permit) => Ok(permit),
            Admission::Queued(waiter) => waiter.wait().await,
        }
    }

    /// The permit, if the request's turn comes within `limit`; else it
    /// leaves the queue and is answered [`Busy`].
    pub(crate) async fn permit_within(self, limit: Duration) -> Result<Permit, Busy> {
        match self {
            Admission::Ready(permit) => Ok(permit),
            Admission::Queued(waiter) => {
                let inner = waiter.inner.clone();
                match tokio::time::timeout(limit, waiter.wait()).await {
                    Ok(waited) => waited,
                    Err(_) => Err(busy(&inner, &inner.lock(), 0)),
                }
            }
        }
    }
}

/// How long a remote caller's request waits for a slot before it is
/// answered `busy` (a one-shot command, a live process's start).
pub(crate) const DOOR_SLOT_WAIT: Duration = Duration::from_secs(10);

impl Scheduler {
    /// A scheduler for this process alone.
    #[cfg(test)]
    pub(crate) fn new(limits: Limits) -> Self {
        Self::with_machine(limits, None)
    }

    /// A scheduler whose limits hold for every process sharing `home`;
    /// where the slot directory cannot be made, this process's alone (with a
    /// warning).
    pub(crate) fn machine_wide(limits: Limits, home: &Path) -> Self {
        let machine = match MachineSlots::open(home, &limits) {
            Ok(machine) => Some(machine),
            Err(err) => {
                tracing::warn!(error = %err, "the scheduler's limits hold for this process only");
                None
            }
        };
        Self::with_machine(limits, machine)
    }

    fn with_machine(limits: Limits, machine: Option<MachineSlots>) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::new(limits, machine)),
                mean_hold_ms: AtomicU64::new(100),
            }),
        }
    }

    /// Takes a place for `demand` now, without waiting: started at once if
    /// nobody waits before it and everything it needs is free, else queued
    /// behind every earlier request; [`Busy`] when the queue is full.
    pub(crate) fn admit(&self, demand: Demand) -> Result<Admission, Busy> {
        let (key, receiver, granted) = {
            let mut state = self.inner.lock();
            // Machine-wide, under the queue lock: the other processes'
            // waiters seen now are all that arrived before this request.
            let _queue = state.hold_queue();
            let others = state.others();
            if state.waiting.is_empty()
                && !state::someone_before(&others, state.place_now(demand.priority))
                && let Ok(hold) = state.try_start(&demand)
            {
                return Ok(Admission::Ready(Permit {
                    inner: self.inner.clone(),
                    demand,
                    hold,
                    since: Instant::now(),
                }));
            }
            if state.waiting.len() + others.len() >= state.limits.queue {
                return Err(busy(&self.inner, &state, others.len()));
            }
            let (sender, receiver) = oneshot::channel();
            let key = state.enqueue(demand, sender);
            // Whoever now fits starts, in order (this newcomer too, if
            // nobody before it can run), under the same look at the queue.
            (key, receiver, state.grant_ready_seeing(&others))
        };
        self.inner.wake(granted);
        Ok(Admission::Queued(Waiter {
            inner: self.inner.clone(),
            key: Some(key),
            receiver,
        }))
    }

    /// Waits until everything `demand` needs is free and takes it, or
    /// answers [`Busy`] at once when the queue is full.
    pub(crate) async fn acquire(&self, demand: Demand) -> Result<Permit, Busy> {
        self.admit(demand)?.permit().await
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

/// What a slot costs, for `benches/scheduler.rs`: a scheduler of one
/// global slot, machine-wide under a home or this process's alone.
#[doc(hidden)]
pub struct SlotBench(Scheduler);

impl SlotBench {
    /// Machine-wide under `home`, or (`None`) this process's alone.
    pub fn new(home: Option<&Path>) -> Self {
        let limits = Limits {
            global: 1,
            queue: 8,
            groups: Default::default(),
            per_caller: None,
        };
        Self(match home {
            Some(home) => Scheduler::machine_wide(limits, home),
            None => Scheduler::with_machine(limits, None),
        })
    }

    /// Takes the slot and gives it back; false if it was not free.
    pub fn take_and_give_back(&self) -> bool {
        let demand = Demand::new(None, None, Priority::Normal);
        matches!(self.0.admit(demand), Ok(Admission::Ready(_)))
    }
}

/// Busy, with `elsewhere` waiters of other processes queued too.
fn busy<T>(inner: &Inner, state: &State<T>, elsewhere: usize) -> Busy {
    let mean = inner.mean_hold_ms.load(Ordering::Relaxed).max(1);
    let global = state.limits.global.max(1) as u64;
    let queued = state.waiting.len() + elsewhere;
    let rounds = (queued as u64 + 1).div_ceil(global);
    Busy {
        retry_after_ms: (mean * rounds).clamp(10, 60_000),
        queued,
        running: state.running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn plain() -> Demand {
        Demand::new(None, None, Priority::Normal)
    }

    fn scheduler(global: usize, queue: usize) -> Scheduler {
        Scheduler::new(Limits {
            global,
            queue,
            groups: Default::default(),
            per_caller: None,
        })
    }

    fn of(caller: &str) -> Demand {
        let mut demand = plain();
        caller.clone_into(&mut demand.caller);
        demand
    }

    #[tokio::test]
    async fn per_caller_keeps_one_caller_from_taking_every_slot() {
        let s = Scheduler::new(Limits {
            global: 3,
            queue: 8,
            groups: Default::default(),
            per_caller: Some(2),
        });
        let a1 = s.acquire(of("a")).await.unwrap();
        let _a2 = s.acquire(of("a")).await.unwrap();
        // A third of a's waits, yet b passes it to the free slot.
        let third = s.admit(of("a")).unwrap();
        assert!(matches!(third, Admission::Queued(_)));
        let _b = s
            .admit(of("b"))
            .unwrap()
            .permit_within(Duration::from_millis(500))
            .await
            .expect("b was held behind a's waiter");
        drop(a1);
        let _a3 = third
            .permit_within(Duration::from_secs(5))
            .await
            .expect("a's slot came back");
    }

    #[tokio::test]
    async fn a_bounded_wait_is_answered_busy_and_leaves_the_queue() {
        let s = scheduler(1, 4);
        let _running = s.acquire(plain()).await.unwrap();
        let started = Instant::now();
        let waited = s
            .admit(plain())
            .unwrap()
            .permit_within(Duration::from_millis(100))
            .await;
        let busy = waited.map(drop).unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(busy.retry_after_ms >= 10);
        assert_eq!(s.load().queued, 0, "the waiter left the queue");
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
    async fn two_processes_share_one_queue_in_arrival_order_and_one_bound() {
        // Two schedulers on one home stand for two processes.
        let home = tempfile::tempdir().unwrap();
        let limits = Limits {
            global: 1,
            queue: 2,
            groups: Default::default(),
            per_caller: None,
        };
        let one = Scheduler::machine_wide(limits.clone(), home.path());
        let other = Scheduler::machine_wide(limits, home.path());
        let running = one.acquire(plain()).await.unwrap();
        let first = other.admit(plain()).unwrap();
        // The holder's slot comes free; a newcomer in the holder's process
        // must not pass the other process's earlier waiter.
        drop(running);
        let second = one.admit(plain()).unwrap();
        assert!(
            matches!(second, Admission::Queued(_)),
            "the newcomer waits its turn"
        );
        let busy = other.admit(plain()).map(drop).unwrap_err();
        assert_eq!(busy.queued, 2, "the bound counts both processes' waiters");
        let first = tokio::time::timeout(Duration::from_secs(5), first.permit())
            .await
            .expect("the earlier waiter starts")
            .unwrap();
        let second = tokio::spawn(second.permit());
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !second.is_finished(),
            "one slot: the second waits for the first"
        );
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the second starts when the first is done")
            .unwrap()
            .unwrap();
        drop(second);
        let queue: Vec<_> = std::fs::read_dir(home.path().join(tickets::QUEUE_DIR))
            .unwrap()
            .collect();
        assert!(queue.is_empty(), "no ticket is left: {queue:?}");
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
