//! The scheduler's bookkeeping, synchronous: what runs, what waits, and who
//! may start next. [`super::Scheduler`] wraps it in one mutex.
//!
//! # Order
//!
//! Waiters are served by priority, then round, then arrival. A caller's
//! waiters of one priority take consecutive rounds (its first waits in the
//! current round, its second in the next, ...), and a caller with nothing
//! waiting enters at the current round: so within a priority each caller's
//! requests keep their arrival order, and callers take turns, one request
//! each per round, whatever the length of one caller's queue. With one
//! caller this is plain first come, first served.
//!
//! # Machine-wide
//!
//! With [`MachineSlots`], a request starts only when this process's own
//! counters *and* the slot files shared with the other processes allow it
//! (see [`super::slots`]); a release elsewhere is not announced, so the
//! waiter at the head of the queue polls ([`super::Scheduler`]).

use std::collections::{BTreeMap, BTreeSet};

use super::slots::{Blocked, Hold, MachineSlots};
use super::tickets::{Other, Place, QueueGuard, Ticket};
use super::{Demand, Priority};

/// Limits: how many run at once, how many may wait, per-group caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) global: usize,
    pub(crate) queue: usize,
    pub(crate) groups: BTreeMap<String, usize>,
    /// `[scheduler] per_caller`: the most slots one caller holds at once.
    pub(crate) per_caller: Option<usize>,
}

/// Waiters are served by priority, then round, then arrival (`seq`).
pub(super) type WaitKey = (std::cmp::Reverse<Priority>, u64, u64);

/// A caller's place in the rounds of one priority.
#[derive(Debug, Default)]
struct Turns {
    next_round: u64,
    waiting: usize,
}

/// The state behind the mutex; `T` is what a waiter is woken with.
#[derive(Debug)]
pub(super) struct State<T> {
    pub(crate) limits: Limits,
    pub(crate) running: usize,
    pub(crate) group_running: BTreeMap<String, usize>,
    /// Slots held per caller, where `per_caller` bounds them.
    pub(crate) caller_running: BTreeMap<String, usize>,
    pub(crate) exclusive_held: BTreeSet<String>,
    pub(crate) waiting: BTreeMap<WaitKey, (Demand, T)>,
    next_seq: u64,
    /// The round being served, per priority.
    round: BTreeMap<Priority, u64>,
    turns: BTreeMap<(Priority, String), Turns>,
    machine: Option<MachineSlots>,
    /// Machine-wide, each waiter's place in the shared queue and its ticket
    /// (none if it could not be written: the waiter is then this process's
    /// alone, still served in order here).
    places: BTreeMap<WaitKey, (Place, Option<Ticket>)>,
}

impl<T> State<T> {
    pub(super) fn new(limits: Limits, machine: Option<MachineSlots>) -> Self {
        Self {
            limits,
            running: 0,
            group_running: BTreeMap::new(),
            caller_running: BTreeMap::new(),
            exclusive_held: BTreeSet::new(),
            waiting: BTreeMap::new(),
            next_seq: 0,
            round: BTreeMap::new(),
            turns: BTreeMap::new(),
            machine,
            places: BTreeMap::new(),
        }
    }

    /// Takes the machine-wide queue lock for one admission or grant.
    pub(super) fn hold_queue(&self) -> Option<QueueGuard> {
        self.machine.as_ref().and_then(|m| m.queue.hold())
    }

    /// The other processes' waiters, in queue order (none when the queue is
    /// this process's alone).
    pub(super) fn others(&self) -> Vec<Other> {
        let Some(machine) = &self.machine else {
            return Vec::new();
        };
        let own = self.places.values().map(|(place, _)| *place).collect();
        machine.queue.others(&own)
    }

    /// The place a request arriving now would take machine-wide.
    pub(super) fn place_now(&self, priority: Priority) -> Place {
        Place::now(priority, self.next_seq)
    }

    /// Whether this process's own counters allow `demand` now.
    fn fits_here(&self, demand: &Demand) -> Result<(), Blocked> {
        if self.running >= self.limits.global {
            return Err(Blocked::Global);
        }
        if let Some(group) = &demand.group
            && let Some(limit) = self.limits.groups.get(group)
            && self.group_running.get(group).copied().unwrap_or(0) >= *limit
        {
            return Err(Blocked::Own);
        }
        if let Some(limit) = self.limits.per_caller
            && self
                .caller_running
                .get(&demand.caller)
                .copied()
                .unwrap_or(0)
                >= limit
        {
            return Err(Blocked::Own);
        }
        match &demand.exclusive {
            Some(key) if self.exclusive_held.contains(key) => Err(Blocked::Own),
            _ => Ok(()),
        }
    }

    /// Takes everything `demand` needs, here and machine-wide, all at once,
    /// or nothing.
    pub(super) fn try_start(&mut self, demand: &Demand) -> Result<Option<Hold>, Blocked> {
        self.fits_here(demand)?;
        let hold = match &mut self.machine {
            Some(machine) => Some(machine.try_take(demand)?),
            None => None,
        };
        self.running += 1;
        if let Some(group) = &demand.group {
            *self.group_running.entry(group.clone()).or_insert(0) += 1;
        }
        if let Some(key) = &demand.exclusive {
            self.exclusive_held.insert(key.clone());
        }
        if self.limits.per_caller.is_some() {
            *self
                .caller_running
                .entry(demand.caller.clone())
                .or_insert(0) += 1;
        }
        Ok(hold)
    }

    /// Gives back everything `demand` held.
    pub(super) fn give_back(&mut self, demand: &Demand, hold: Option<&Hold>) {
        if let (Some(machine), Some(hold)) = (&mut self.machine, hold) {
            machine.give_back(hold);
        }
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
        if let Some(count) = self.caller_running.get_mut(&demand.caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.caller_running.remove(&demand.caller);
            }
        }
    }

    /// Starts every waiter that now fits, in order, and returns them. A
    /// waiter blocked on its group or key does not hold back those behind
    /// it; no global slot left stops the scan.
    ///
    /// Machine-wide, a waiter also lets pass every earlier waiter of another
    /// process that could start (one blocked on its own group or key holds
    /// nobody back); that process starts it at its next look.
    pub(super) fn grant_ready(&mut self) -> Vec<(Demand, Option<Hold>, T)> {
        if self.waiting.is_empty() {
            return Vec::new();
        }
        let _queue = self.hold_queue();
        let others = self.others();
        self.grant_ready_seeing(&others)
    }

    /// [`grant_ready`](Self::grant_ready) under a queue lock the caller
    /// holds, with the other processes' waiters it has just looked at.
    pub(super) fn grant_ready_seeing(
        &mut self,
        others: &[Other],
    ) -> Vec<(Demand, Option<Hold>, T)> {
        let mut granted = Vec::new();
        let keys: Vec<WaitKey> = self.waiting.keys().cloned().collect();
        for key in keys {
            if let Some((place, _)) = self.places.get(&key)
                && someone_before(others, *place)
            {
                continue;
            }
            let Some((demand, _)) = self.waiting.get(&key) else {
                continue;
            };
            let demand = demand.clone();
            match self.try_start(&demand) {
                Ok(hold) => {
                    if let Some((demand, payload)) = self.remove(&key) {
                        let round = self.round.entry(demand.priority).or_insert(0);
                        *round = (*round).max(key.1);
                        granted.push((demand, hold, payload));
                    }
                }
                Err(Blocked::Global) => break,
                Err(Blocked::Own) => {}
            }
        }
        granted
    }

    /// Queues a waiter; returns its key.
    pub(super) fn enqueue(&mut self, demand: Demand, payload: T) -> WaitKey {
        let current = self.round.get(&demand.priority).copied().unwrap_or(0);
        let turns = self
            .turns
            .entry((demand.priority, demand.caller.clone()))
            .or_default();
        let round = turns.next_round.max(current);
        turns.next_round = round + 1;
        turns.waiting += 1;
        let key = (std::cmp::Reverse(demand.priority), round, self.next_seq);
        if let Some(machine) = &self.machine {
            let place = Place::now(demand.priority, self.next_seq);
            let ticket = machine
                .queue
                .issue(place, &machine.needs(&demand))
                .map_err(|err| {
                    tracing::warn!(error = %err, "a waiter cannot join the machine-wide queue; it waits in this process's");
                })
                .ok();
            self.places.insert(key, (place, ticket));
        }
        self.next_seq += 1;
        self.waiting.insert(key, (demand, payload));
        key
    }

    /// Takes a waiter out of the queue (started, or gone away).
    pub(super) fn remove(&mut self, key: &WaitKey) -> Option<(Demand, T)> {
        let (demand, payload) = self.waiting.remove(key)?;
        self.places.remove(key);
        let turn_key = (demand.priority, demand.caller.clone());
        if let Some(turns) = self.turns.get_mut(&turn_key) {
            turns.waiting = turns.waiting.saturating_sub(1);
            if turns.waiting == 0 {
                self.turns.remove(&turn_key);
            }
        }
        Some((demand, payload))
    }

    /// Whether process-wide polling is needed (other processes share the slots).
    pub(super) fn is_machine_wide(&self) -> bool {
        self.machine.is_some()
    }
}

/// Whether another process's waiter that could start now comes before
/// `place`.
pub(super) fn someone_before(others: &[Other], place: Place) -> bool {
    others
        .iter()
        .take_while(|other| other.place < place)
        .any(|other| !other.blocked_on_own)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand(group: Option<&str>, exclusive: Option<&str>, priority: Priority) -> Demand {
        Demand {
            group: group.map(str::to_owned),
            exclusive: exclusive.map(str::to_owned),
            priority,
            caller: super::super::LOCAL_CALLER.to_owned(),
        }
    }

    fn from(caller: &str) -> Demand {
        Demand {
            caller: caller.to_owned(),
            ..demand(None, None, Priority::Normal)
        }
    }

    fn state(global: usize) -> State<&'static str> {
        State::new(
            Limits {
                global,
                queue: 10,
                groups: [("cpu".to_owned(), 1)].into(),
                per_caller: None,
            },
            None,
        )
    }

    fn names(granted: Vec<(Demand, Option<Hold>, &'static str)>) -> Vec<&'static str> {
        granted.into_iter().map(|(_, _, p)| p).collect()
    }

    #[test]
    fn limits_and_exclusive_keys_are_respected() {
        let mut s = state(3);
        let cpu = demand(Some("cpu"), None, Priority::Normal);
        assert!(s.try_start(&cpu).is_ok());
        assert_eq!(s.try_start(&cpu), Err(Blocked::Own), "group cpu allows one");
        let ex = demand(None, Some("db"), Priority::Normal);
        assert!(s.try_start(&ex).is_ok());
        assert_eq!(s.try_start(&ex), Err(Blocked::Own), "exclusive key held");
        assert!(
            s.try_start(&demand(Some("net"), None, Priority::Normal))
                .is_ok(),
            "undeclared group is unlimited"
        );
        assert_eq!(
            s.try_start(&demand(None, None, Priority::Normal)),
            Err(Blocked::Global),
            "global full"
        );
        s.give_back(&ex, None);
        assert!(s.try_start(&ex).is_ok());
    }

    #[test]
    fn grants_follow_priority_then_arrival_and_skip_blocked_waiters() {
        let mut s = state(2);
        let cpu = demand(Some("cpu"), None, Priority::Normal);
        s.try_start(&cpu).unwrap();
        s.try_start(&demand(None, None, Priority::Normal)).unwrap();
        s.enqueue(demand(Some("cpu"), None, Priority::Normal), "cpu-waiter");
        s.enqueue(demand(None, None, Priority::Low), "low");
        s.enqueue(demand(None, None, Priority::Normal), "normal-1");
        s.enqueue(demand(None, None, Priority::High), "high");
        s.enqueue(demand(None, None, Priority::Normal), "normal-2");
        s.give_back(&demand(None, None, Priority::Normal), None);
        assert_eq!(names(s.grant_ready()), ["high"]);
        s.give_back(&cpu, None);
        assert_eq!(names(s.grant_ready()), ["cpu-waiter"]);
        s.give_back(&demand(None, None, Priority::High), None);
        assert_eq!(names(s.grant_ready()), ["normal-1"]);
    }

    #[test]
    fn one_caller_is_served_in_arrival_order() {
        let mut s = state(1);
        s.try_start(&from("a")).unwrap();
        let order = ["1", "2", "3", "4", "5", "6", "7", "8"];
        for name in order {
            s.enqueue(from("a"), name);
        }
        let mut served = Vec::new();
        while !s.waiting.is_empty() {
            s.give_back(&from("a"), None);
            served.extend(names(s.grant_ready()));
        }
        assert_eq!(served, order);
    }

    #[test]
    fn callers_take_turns_so_a_long_queue_does_not_starve_a_late_caller() {
        let mut s = state(1);
        s.try_start(&from("busy")).unwrap();
        for name in ["b1", "b2", "b3", "b4", "b5", "b6"] {
            s.enqueue(from("busy"), name);
        }
        s.give_back(&from("busy"), None);
        assert_eq!(names(s.grant_ready()), ["b1"]);
        s.enqueue(from("late"), "l1");
        s.enqueue(from("late"), "l2");
        s.enqueue(from("other"), "o1");
        let mut served = Vec::new();
        while !s.waiting.is_empty() {
            s.give_back(&from("busy"), None);
            served.extend(names(s.grant_ready()));
        }
        assert_eq!(served, ["l1", "o1", "b2", "l2", "b3", "b4", "b5", "b6"]);
        assert!(s.turns.is_empty(), "nothing is kept for callers that left");
    }

    #[test]
    fn a_higher_priority_still_goes_before_every_round_of_a_lower_one() {
        let mut s = state(1);
        s.try_start(&from("a")).unwrap();
        s.enqueue(from("a"), "a1");
        s.enqueue(from("b"), "b1");
        s.enqueue(
            Demand {
                priority: Priority::High,
                ..from("c")
            },
            "c-high",
        );
        s.give_back(&from("a"), None);
        assert_eq!(names(s.grant_ready()), ["c-high"]);
    }
}
