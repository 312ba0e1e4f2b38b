//! The session table: ids, least-recently-used order, the bound on how many
//! sessions live at once, and the memory of sessions that ended.
//!
//! Pure bookkeeping, generic over the session type, so the pruning rule is
//! unit-tested without processes: when full, an exited session goes first,
//! then the least recently used one, never one of the most recently used
//! [`PROTECTED_RECENT`]. The caller kills what comes back from
//! [`SessionTable::insert`] and the next reply says so.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// How many of the most recently used sessions pruning never touches.
pub const PROTECTED_RECENT: usize = 8;
/// How many ended sessions are remembered for "session N ended with ...".
const ENDED_MEMORY: usize = 4096;

/// What the table needs to know about a session to prune it.
pub trait Prunable {
    /// The process is gone (its output may not have been taken yet).
    fn has_exited(&self) -> bool;
}

/// What became of an id.
#[derive(Debug)]
pub enum Lookup<S> {
    Live(Arc<S>),
    /// The session ended; the text says how ("ended with code 0").
    Ended(String),
    Unknown,
}

#[derive(Debug)]
struct Slot<S> {
    session: Arc<S>,
    last_used: u64,
}

/// The live sessions and the memory of ended ones.
#[derive(Debug)]
pub struct SessionTable<S> {
    max: usize,
    next_id: u64,
    clock: u64,
    live: BTreeMap<u64, Slot<S>>,
    ended: BTreeMap<u64, String>,
    ended_order: VecDeque<u64>,
    notes: Vec<String>,
}

impl<S: Prunable> SessionTable<S> {
    /// A table holding at most `max` sessions (at least 1).
    pub fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            next_id: 1,
            clock: 0,
            live: BTreeMap::new(),
            ended: BTreeMap::new(),
            ended_order: VecDeque::new(),
            notes: Vec::new(),
        }
    }

    /// The id the next inserted session will get.
    pub fn peek_next_id(&self) -> u64 {
        self.next_id
    }

    /// Adds a session; returns its id and the sessions pruned to make room
    /// (removed from the table: the caller must kill them).
    pub fn insert(&mut self, session: Arc<S>) -> (u64, Vec<(u64, Arc<S>)>) {
        let mut pruned = Vec::new();
        while self.live.len() >= self.max {
            let Some(victim) = self.victim() else { break };
            if let Some(slot) = self.live.remove(&victim) {
                pruned.push((victim, slot.session));
            }
        }
        let id = self.next_id;
        self.next_id += 1;
        self.clock += 1;
        self.live.insert(
            id,
            Slot {
                session,
                last_used: self.clock,
            },
        );
        (id, pruned)
    }

    fn victim(&self) -> Option<u64> {
        if let Some((&id, _)) = self.live.iter().find(|(_, s)| s.session.has_exited()) {
            return Some(id);
        }
        let protected = PROTECTED_RECENT.min(self.max.saturating_sub(1));
        let mut by_use: Vec<(u64, u64)> =
            self.live.iter().map(|(&id, s)| (s.last_used, id)).collect();
        by_use.sort_unstable();
        let candidates = by_use.len().saturating_sub(protected);
        by_use.first().filter(|_| candidates > 0).map(|&(_, id)| id)
    }

    /// Finds a session and marks it as just used.
    pub fn get(&mut self, id: u64) -> Lookup<S> {
        self.clock += 1;
        if let Some(slot) = self.live.get_mut(&id) {
            slot.last_used = self.clock;
            return Lookup::Live(slot.session.clone());
        }
        match self.ended.get(&id) {
            Some(how) => Lookup::Ended(how.clone()),
            None => Lookup::Unknown,
        }
    }

    /// Removes a live session and remembers how it ended. Returns it, or
    /// `None` when another call removed it first.
    pub fn end(&mut self, id: u64, how: String) -> Option<Arc<S>> {
        let slot = self.live.remove(&id)?;
        self.remember(id, how);
        Some(slot.session)
    }

    /// Remembers how a session that is no longer live ended (pruned ones).
    pub fn remember(&mut self, id: u64, how: String) {
        if self.ended.insert(id, how).is_none() {
            self.ended_order.push_back(id);
        }
        while self.ended_order.len() > ENDED_MEMORY {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// The live sessions, by id.
    pub fn live(&self) -> Vec<(u64, Arc<S>)> {
        self.live
            .iter()
            .map(|(&id, s)| (id, s.session.clone()))
            .collect()
    }

    /// Removes every live session (for shutdown).
    pub fn drain(&mut self) -> Vec<(u64, Arc<S>)> {
        std::mem::take(&mut self.live)
            .into_iter()
            .map(|(id, s)| (id, s.session))
            .collect()
    }

    /// Queues a note for the next reply.
    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// The notes not yet given to any reply.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Debug, Default)]
    struct Fake {
        exited: AtomicBool,
    }

    impl Prunable for Fake {
        fn has_exited(&self) -> bool {
            self.exited.load(Ordering::Relaxed)
        }
    }

    fn fill(table: &mut SessionTable<Fake>, n: usize) -> Vec<Arc<Fake>> {
        (0..n)
            .map(|_| {
                let s = Arc::new(Fake::default());
                let (_, pruned) = table.insert(s.clone());
                assert!(pruned.is_empty());
                s
            })
            .collect()
    }

    #[test]
    fn ids_count_up_and_lookup_says_what_became_of_them() {
        let mut t = SessionTable::new(64);
        fill(&mut t, 2);
        assert!(matches!(t.get(1), Lookup::Live(_)));
        assert!(t.end(1, "ended with code 0".into()).is_some());
        assert!(t.end(1, "again".into()).is_none());
        assert!(matches!(t.get(1), Lookup::Ended(s) if s == "ended with code 0"));
        assert!(matches!(t.get(99), Lookup::Unknown));
        assert_eq!(t.peek_next_id(), 3);
    }

    #[test]
    fn full_table_prunes_an_exited_session_first() {
        let mut t = SessionTable::new(10);
        let sessions = fill(&mut t, 10);
        sessions[6].exited.store(true, Ordering::Relaxed);
        let (id, pruned) = t.insert(Arc::new(Fake::default()));
        assert_eq!(id, 11);
        assert_eq!(pruned.iter().map(|p| p.0).collect::<Vec<_>>(), vec![7]);
    }

    #[test]
    fn full_table_prunes_the_least_recently_used_but_never_the_recent_eight() {
        let mut t = SessionTable::new(10);
        fill(&mut t, 10);
        // Use 1 and 2 again: 3 becomes the least recently used.
        t.get(1);
        t.get(2);
        let (_, pruned) = t.insert(Arc::new(Fake::default()));
        assert_eq!(pruned.iter().map(|p| p.0).collect::<Vec<_>>(), vec![3]);
    }

    #[test]
    fn a_table_of_eight_or_fewer_still_makes_room() {
        let mut t = SessionTable::new(2);
        fill(&mut t, 2);
        let (_, pruned) = t.insert(Arc::new(Fake::default()));
        assert_eq!(pruned.iter().map(|p| p.0).collect::<Vec<_>>(), vec![1]);
        assert_eq!(t.live().len(), 2);
    }

    #[test]
    fn notes_are_given_once() {
        let mut t: SessionTable<Fake> = SessionTable::new(4);
        t.note("a".into());
        assert_eq!(t.take_notes(), vec!["a".to_owned()]);
        assert!(t.take_notes().is_empty());
    }
}
