//! The session table: ids, owners, least-recently-used order, the bounds on
//! how many sessions live at once, and the memory of sessions that ended.
//!
//! Pure bookkeeping, generic over the session type, so the pruning and
//! ownership rules are unit-tested without processes. Every session belongs
//! to the client that started it ([`ClientId`]: stdio is one client, each
//! MCP session over HTTP another); a client sees only its own, and an id of
//! another client's session reads as unknown. When a client is at its bound
//! (or the whole table at its own), one of that client's sessions makes
//! room: an exited one first, then the least recently used one, never one of
//! its most recently used [`PROTECTED_RECENT`]. The caller kills what comes
//! back from [`SessionTable::insert`] and the next reply says so.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::Arc;

/// How many of the most recently used sessions pruning never touches.
pub(crate) const PROTECTED_RECENT: usize = 8;
/// How many ended sessions are remembered for "session N ended with ...".
const ENDED_MEMORY: usize = 4096;

/// Who started a session: the stdio client, or one MCP session over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ClientId(pub u64);

impl ClientId {
    /// The one client of `serve` on stdio.
    pub(crate) const STDIO: ClientId = ClientId(0);
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == ClientId::STDIO {
            f.write_str("stdio")
        } else {
            write!(f, "mcp-{}", self.0)
        }
    }
}

/// Sessions pruned to make room, for the caller to kill.
pub(crate) type Pruned<S> = Vec<(u64, Arc<S>)>;

/// What the table needs to know about a session to prune it.
pub(crate) trait Prunable {
    /// The process is gone (its output may not have been taken yet).
    fn has_exited(&self) -> bool;
}

/// What became of an id, as its owner sees it.
#[derive(Debug)]
pub(crate) enum Lookup<S> {
    Live(Arc<S>),
    /// The session ended; the text says how ("ended with code 0").
    Ended(String),
    /// No such session, or another client's.
    Unknown,
}

/// The table holds `--max-sessions` sessions and the client none it could
/// give up to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the server holds its limit of {max} sessions (--max-sessions), none of them this client's to make room with; try again when other clients' sessions end"
)]
pub(crate) struct TableFull {
    pub(crate) max: usize,
}

#[derive(Debug)]
struct Slot<S> {
    owner: ClientId,
    session: Arc<S>,
    last_used: u64,
}

/// The live sessions and the memory of ended ones.
#[derive(Debug)]
pub(crate) struct SessionTable<S> {
    max: usize,
    next_id: u64,
    clock: u64,
    live: BTreeMap<u64, Slot<S>>,
    ended: BTreeMap<u64, (ClientId, String)>,
    ended_order: VecDeque<u64>,
    notes: BTreeMap<ClientId, Vec<String>>,
}

impl<S: Prunable> SessionTable<S> {
    /// A table holding at most `max` sessions of all clients (at least 1).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            next_id: 1,
            clock: 0,
            live: BTreeMap::new(),
            ended: BTreeMap::new(),
            ended_order: VecDeque::new(),
            notes: BTreeMap::new(),
        }
    }

    /// Adds a session of `owner`, who may hold at most `owner_max`; returns
    /// its id and the sessions of `owner` pruned to make room (removed from
    /// the table: the caller must kill them). Other clients' sessions are
    /// never pruned: when the table is full and `owner` holds none, the
    /// session is refused.
    pub(crate) fn insert(
        &mut self,
        owner: ClientId,
        session: Arc<S>,
        owner_max: usize,
    ) -> Result<(u64, Pruned<S>), TableFull> {
        let pruned = self.make_room(owner, owner_max)?;
        let id = self.next_id;
        self.next_id += 1;
        self.clock += 1;
        self.live.insert(
            id,
            Slot {
                owner,
                session,
                last_used: self.clock,
            },
        );
        Ok((id, pruned))
    }

    /// Prunes what [`Self::insert`] would for one more session of `owner`,
    /// without adding one: called before the session's process starts, so
    /// a session the table refuses never runs.
    pub(crate) fn make_room(
        &mut self,
        owner: ClientId,
        owner_max: usize,
    ) -> Result<Pruned<S>, TableFull> {
        let owner_max = owner_max.max(1);
        if self.live.len() >= self.max && self.count_of(owner) == 0 {
            return Err(TableFull { max: self.max });
        }
        let mut pruned = Vec::new();
        while self.count_of(owner) >= owner_max {
            let Some(victim) = self.victim(owner, owner_max) else {
                break;
            };
            pruned.extend(self.take(victim));
        }
        // The owner holds a session here (checked above), so one of its
        // own always makes room.
        while self.live.len() >= self.max {
            let Some(victim) = self.victim(owner, self.count_of(owner)) else {
                break;
            };
            pruned.extend(self.take(victim));
        }
        Ok(pruned)
    }

    fn take(&mut self, id: u64) -> Option<(u64, Arc<S>)> {
        self.live.remove(&id).map(|slot| (id, slot.session))
    }

    fn count_of(&self, owner: ClientId) -> usize {
        self.live.values().filter(|s| s.owner == owner).count()
    }

    /// The session of `owner` to prune when it may hold `bound`.
    fn victim(&self, owner: ClientId, bound: usize) -> Option<u64> {
        let own = || self.live.iter().filter(|(_, s)| s.owner == owner);
        if let Some((&id, _)) = own().find(|(_, s)| s.session.has_exited()) {
            return Some(id);
        }
        let protected = PROTECTED_RECENT.min(bound.saturating_sub(1));
        let mut by_use: Vec<(u64, u64)> = own().map(|(&id, s)| (s.last_used, id)).collect();
        by_use.sort_unstable();
        let candidates = by_use.len().saturating_sub(protected);
        by_use.first().filter(|_| candidates > 0).map(|&(_, id)| id)
    }

    /// Finds a session of `owner` and marks it as just used.
    pub(crate) fn get(&mut self, owner: ClientId, id: u64) -> Lookup<S> {
        self.clock += 1;
        if let Some(slot) = self.live.get_mut(&id) {
            if slot.owner != owner {
                return Lookup::Unknown;
            }
            slot.last_used = self.clock;
            return Lookup::Live(slot.session.clone());
        }
        match self.ended.get(&id) {
            Some((ended_owner, how)) if *ended_owner == owner => Lookup::Ended(how.clone()),
            _ => Lookup::Unknown,
        }
    }

    /// Removes a live session and remembers how it ended. Returns it, or
    /// `None` when another call removed it first.
    pub(crate) fn end(&mut self, id: u64, how: String) -> Option<Arc<S>> {
        let slot = self.live.remove(&id)?;
        self.remember(slot.owner, id, how);
        Some(slot.session)
    }

    /// Remembers how a session of `owner` that is no longer live ended.
    pub(crate) fn remember(&mut self, owner: ClientId, id: u64, how: String) {
        if self.ended.insert(id, (owner, how)).is_none() {
            self.ended_order.push_back(id);
        }
        while self.ended_order.len() > ENDED_MEMORY {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
    }

    /// The live sessions of `owner`, by id.
    pub(crate) fn live_of(&self, owner: ClientId) -> Vec<(u64, Arc<S>)> {
        self.live
            .iter()
            .filter(|(_, s)| s.owner == owner)
            .map(|(&id, s)| (id, s.session.clone()))
            .collect()
    }

    /// How many sessions live, of every client.
    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }

    /// How many sessions each client holds (clients holding none left out).
    pub(crate) fn count_by_owner(&self) -> BTreeMap<ClientId, usize> {
        let mut counts = BTreeMap::new();
        for slot in self.live.values() {
            *counts.entry(slot.owner).or_insert(0) += 1;
        }
        counts
    }

    /// Removes every live session (for shutdown).
    pub(crate) fn drain(&mut self) -> Vec<(u64, Arc<S>)> {
        self.notes.clear();
        std::mem::take(&mut self.live)
            .into_iter()
            .map(|(id, s)| (id, s.session))
            .collect()
    }

    /// Removes every live session of `owner` and forgets its notes and
    /// ended sessions (the client is gone).
    pub(crate) fn drain_owner(&mut self, owner: ClientId) -> Vec<(u64, Arc<S>)> {
        self.notes.remove(&owner);
        self.ended.retain(|_, (o, _)| *o != owner);
        let ended = &self.ended;
        self.ended_order.retain(|id| ended.contains_key(id));
        let ids: Vec<u64> = self
            .live
            .iter()
            .filter(|(_, s)| s.owner == owner)
            .map(|(&id, _)| id)
            .collect();
        ids.into_iter().filter_map(|id| self.take(id)).collect()
    }

    /// Queues a note for `owner`'s next reply.
    pub(crate) fn note(&mut self, owner: ClientId, note: String) {
        self.notes.entry(owner).or_default().push(note);
    }

    /// The notes of `owner` not yet given to any reply.
    pub(crate) fn take_notes(&mut self, owner: ClientId) -> Vec<String> {
        self.notes.remove(&owner).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    const A: ClientId = ClientId(1);
    const B: ClientId = ClientId(2);

    #[derive(Debug, Default)]
    struct Fake {
        exited: AtomicBool,
    }

    impl Prunable for Fake {
        fn has_exited(&self) -> bool {
            self.exited.load(Ordering::Relaxed)
        }
    }

    fn insert(t: &mut SessionTable<Fake>, owner: ClientId, owner_max: usize) -> (u64, Vec<u64>) {
        let (id, pruned) = t
            .insert(owner, Arc::new(Fake::default()), owner_max)
            .unwrap();
        (id, pruned.into_iter().map(|p| p.0).collect())
    }

    fn fill(t: &mut SessionTable<Fake>, owner: ClientId, n: usize) -> Vec<Arc<Fake>> {
        (0..n)
            .map(|_| {
                let s = Arc::new(Fake::default());
                let (_, pruned) = t.insert(owner, s.clone(), usize::MAX).unwrap();
                assert!(pruned.is_empty());
                s
            })
            .collect()
    }

    #[test]
    fn ids_count_up_and_lookup_says_what_became_of_them() {
        let mut t = SessionTable::new(64);
        fill(&mut t, A, 2);
        assert!(matches!(t.get(A, 1), Lookup::Live(_)));
        assert!(t.end(1, "ended with code 0".into()).is_some());
        assert!(t.end(1, "again".into()).is_none());
        assert!(matches!(t.get(A, 1), Lookup::Ended(s) if s == "ended with code 0"));
        assert!(matches!(t.get(A, 99), Lookup::Unknown));
    }

    #[test]
    fn another_clients_session_reads_as_unknown_live_or_ended() {
        let mut t = SessionTable::new(64);
        fill(&mut t, A, 2);
        assert!(matches!(t.get(B, 1), Lookup::Unknown));
        assert!(t.live_of(B).is_empty());
        assert_eq!(t.live_of(A).len(), 2);
        t.end(2, "ended with code 0".into());
        assert!(matches!(t.get(B, 2), Lookup::Unknown));
        assert!(matches!(t.get(A, 2), Lookup::Ended(_)));
        t.note(A, "for a".into());
        assert!(t.take_notes(B).is_empty());
        assert_eq!(t.take_notes(A), vec!["for a".to_owned()]);
    }

    #[test]
    fn full_table_prunes_an_exited_session_first() {
        let mut t = SessionTable::new(10);
        let sessions = fill(&mut t, A, 10);
        sessions[6].exited.store(true, Ordering::Relaxed);
        assert_eq!(insert(&mut t, A, 10), (11, vec![7]));
    }

    #[test]
    fn making_room_prunes_what_insert_would_and_adds_nothing() {
        let mut t = SessionTable::new(10);
        let sessions = fill(&mut t, A, 10);
        sessions[6].exited.store(true, Ordering::Relaxed);
        let pruned: Vec<u64> = t
            .make_room(A, 10)
            .unwrap()
            .into_iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(pruned, vec![7]);
        assert_eq!(t.live_of(A).len(), 9);
        assert!(t.make_room(B, 10).is_ok(), "a seat is free for anyone now");
        fill(&mut t, A, 1);
        assert!(t.make_room(B, 10).is_err(), "B holds none to prune");
    }

    #[test]
    fn full_table_prunes_the_least_recently_used_but_never_the_recent_eight() {
        let mut t = SessionTable::new(10);
        fill(&mut t, A, 10);
        // Use 1 and 2 again: 3 becomes the least recently used.
        t.get(A, 1);
        t.get(A, 2);
        assert_eq!(insert(&mut t, A, 10).1, vec![3]);
    }

    #[test]
    fn a_table_of_eight_or_fewer_still_makes_room() {
        let mut t = SessionTable::new(2);
        fill(&mut t, A, 2);
        assert_eq!(insert(&mut t, A, 2).1, vec![1]);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_client_at_its_bound_prunes_only_its_own() {
        let mut t = SessionTable::new(64);
        fill(&mut t, B, 3);
        fill(&mut t, A, 2);
        // A may hold 2: its least recently used (4) goes, B's stay.
        assert_eq!(insert(&mut t, A, 2).1, vec![4]);
        assert_eq!(t.live_of(B).len(), 3);
        assert_eq!(t.count_by_owner(), BTreeMap::from([(A, 2), (B, 3)]));
    }

    #[test]
    fn a_full_table_takes_room_from_the_client_asking_never_from_another() {
        let mut t = SessionTable::new(4);
        fill(&mut t, B, 3);
        fill(&mut t, A, 1);
        assert_eq!(insert(&mut t, A, 64).1, vec![4]);
        let mut full = SessionTable::new(2);
        fill(&mut full, B, 2);
        assert_eq!(
            full.insert(A, Arc::new(Fake::default()), 64).unwrap_err(),
            TableFull { max: 2 }
        );
        assert_eq!(full.live_of(B).len(), 2);
    }

    #[test]
    fn a_client_gone_leaves_nothing_behind() {
        let mut t = SessionTable::new(64);
        fill(&mut t, A, 2);
        fill(&mut t, B, 1);
        t.end(1, "ended with code 0".into());
        t.note(A, "note".into());
        let drained: Vec<u64> = t.drain_owner(A).into_iter().map(|d| d.0).collect();
        assert_eq!(drained, vec![2]);
        assert!(matches!(t.get(A, 1), Lookup::Unknown));
        assert!(t.take_notes(A).is_empty());
        assert_eq!(t.len(), 1);
    }
}
