//! The scheduler's bookkeeping, pure and synchronous: what runs, what waits,
//! and who may start next. [`super::Scheduler`] wraps it in one mutex.

use std::collections::{BTreeMap, BTreeSet};

use super::{Demand, Priority};

/// Limits: how many run at once, how many may wait, per-group caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) global: usize,
    pub(crate) queue: usize,
    pub(crate) groups: BTreeMap<String, usize>,
}

/// Waiters are served by priority, then arrival (`seq`).
pub(super) type WaitKey = (std::cmp::Reverse<Priority>, u64);

/// The state behind the mutex; `T` is what a waiter is woken with.
#[derive(Debug)]
pub(super) struct State<T> {
    pub(crate) limits: Limits,
    pub(crate) running: usize,
    pub(crate) group_running: BTreeMap<String, usize>,
    pub(crate) exclusive_held: BTreeSet<String>,
    pub(crate) waiting: BTreeMap<WaitKey, (Demand, T)>,
    pub(crate) next_seq: u64,
}

impl<T> State<T> {
    pub(super) fn new(limits: Limits) -> Self {
        Self {
            limits,
            running: 0,
            group_running: BTreeMap::new(),
            exclusive_held: BTreeSet::new(),
            waiting: BTreeMap::new(),
            next_seq: 0,
        }
    }

    /// Whether everything `demand` needs is free right now.
    pub(super) fn fits(&self, demand: &Demand) -> bool {
        if self.running >= self.limits.global {
            return false;
        }
        if let Some(group) = &demand.group
            && let Some(limit) = self.limits.groups.get(group)
            && self.group_running.get(group).copied().unwrap_or(0) >= *limit
        {
            return false;
        }
        match &demand.exclusive {
            Some(key) => !self.exclusive_held.contains(key),
            None => true,
        }
    }

    /// Takes everything `demand` needs, all at once (call only when it fits).
    pub(super) fn take(&mut self, demand: &Demand) {
        self.running += 1;
        if let Some(group) = &demand.group {
            *self.group_running.entry(group.clone()).or_insert(0) += 1;
        }
        if let Some(key) = &demand.exclusive {
            self.exclusive_held.insert(key.clone());
        }
    }

    /// Gives back everything `demand` held.
    pub(super) fn give_back(&mut self, demand: &Demand) {
        self.running = self.running.saturating_sub(1);
        if let Some(group) = &demand.group
            && let Some(count) = self.group_running.get_mut(group)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.group_running.remove(group);
            }
        }
        if let Some(key) = &demand.exclusive {
            self.exclusive_held.remove(key);
        }
    }

    /// Starts every waiter that now fits, in priority then arrival order, and
    /// returns them. After this no waiter fits: the invariant that lets a
    /// newcomer that fits start at once without passing anyone who could run.
    pub(super) fn grant_ready(&mut self) -> Vec<(Demand, T)> {
        let mut granted = Vec::new();
        let keys: Vec<WaitKey> = self.waiting.keys().copied().collect();
        for key in keys {
            if self.running >= self.limits.global {
                break;
            }
            let fits = self.waiting.get(&key).is_some_and(|(d, _)| self.fits(d));
            if let Some((demand, payload)) = fits.then(|| self.waiting.remove(&key)).flatten() {
                self.take(&demand);
                granted.push((demand, payload));
            }
        }
        granted
    }

    /// Queues a waiter; returns its key.
    pub(super) fn enqueue(&mut self, demand: Demand, payload: T) -> WaitKey {
        let key = (std::cmp::Reverse(demand.priority), self.next_seq);
        self.next_seq += 1;
        self.waiting.insert(key, (demand, payload));
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(group: Option<&str>, exclusive: Option<&str>, priority: Priority) -> Demand {
        Demand {
            group: group.map(str::to_owned),
            exclusive: exclusive.map(str::to_owned),
            priority,
        }
    }

    fn state(global: usize) -> State<&'static str> {
        State::new(Limits {
            global,
            queue: 10,
            groups: [("cpu".to_owned(), 1)].into(),
        })
    }

    #[test]
    fn limits_and_exclusive_keys_are_respected() {
        let mut s = state(3);
        let cpu = demand(Some("cpu"), None, Priority::Normal);
        assert!(s.fits(&cpu));
        s.take(&cpu);
        assert!(!s.fits(&cpu), "group cpu allows one");
        let ex = demand(None, Some("db"), Priority::Normal);
        s.take(&ex);
        assert!(!s.fits(&ex), "exclusive key held");
        assert!(
            s.fits(&demand(Some("net"), None, Priority::Normal)),
            "undeclared group is unlimited"
        );
        s.take(&demand(None, None, Priority::Normal));
        assert!(
            !s.fits(&demand(None, None, Priority::Normal)),
            "global full"
        );
        s.give_back(&ex);
        assert!(s.fits(&ex));
    }

    #[test]
    fn grants_follow_priority_then_arrival_and_skip_blocked_waiters() {
        let mut s = state(2);
        let cpu = demand(Some("cpu"), None, Priority::Normal);
        s.take(&cpu);
        s.take(&demand(None, None, Priority::Normal));
        s.enqueue(demand(Some("cpu"), None, Priority::Normal), "cpu-waiter");
        s.enqueue(demand(None, None, Priority::Low), "low");
        s.enqueue(demand(None, None, Priority::Normal), "normal-1");
        s.enqueue(demand(None, None, Priority::High), "high");
        s.enqueue(demand(None, None, Priority::Normal), "normal-2");
        s.give_back(&demand(None, None, Priority::Normal));
        let order: Vec<&str> = s.grant_ready().into_iter().map(|(_, p)| p).collect();
        assert_eq!(order, ["high"]);
        s.give_back(&cpu);
        let order: Vec<&str> = s.grant_ready().into_iter().map(|(_, p)| p).collect();
        assert_eq!(order, ["cpu-waiter"]);
        s.give_back(&demand(None, None, Priority::High));
        let order: Vec<&str> = s.grant_ready().into_iter().map(|(_, p)| p).collect();
        assert_eq!(order, ["normal-1"]);
    }
}
