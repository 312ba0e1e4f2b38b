//! The one table of every long-lived process of every door: MCP sessions,
//! gRPC `Start` streams, SWE-ReX bash sessions, and the doors to come. Each
//! live process holds a [`SessionTicket`] from here for as long as it
//! lives; `--max-sessions` bounds the table and `--max-sessions-per-client`
//! each caller's share of it, whatever door the sessions came through.
//!
//! A door keeps its own ids and wire state (an MCP session's output
//! window, a SWE-ReX session's name); this table keeps who owns what, how
//! many there are, and a handle to end each one, so the server's stop and
//! a caller's quota are settled in one place.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::exec::Execution;
use crate::gate::Caller;

/// `--max-sessions` when not given: live processes of every door together.
pub(crate) const DEFAULT_MAX_SESSIONS: usize = 64;

/// Why a session was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SessionsFull {
    #[error(
        "the server holds its limit of {max} live sessions across every door (--max-sessions); end one or try again later"
    )]
    Server { max: usize },
    #[error(
        "{caller} holds its limit of {max} live sessions across every door (--max-sessions-per-client); end one of its sessions first"
    )]
    Caller { caller: String, max: usize },
}

/// One live process, as the table knows it.
#[derive(Debug, Clone)]
pub(crate) struct SessionEntry {
    pub(crate) id: u64,
    pub(crate) caller: Caller,
    /// What the door calls it (`exec_command`, `Start`, `bash session NAME`).
    pub(crate) what: String,
    pub(crate) started: Instant,
    /// The process, once spawned; the server's stop ends it.
    pub(crate) exec: Option<Execution>,
    /// What a one-shot command left running after it exited (`envd`,
    /// `daytona`): it counts until all of it is gone.
    pub(crate) background: bool,
}

impl SessionEntry {
    /// Not yet started, or started and not exited.
    fn is_running(&self) -> bool {
        self.background || self.exec.as_ref().is_none_or(|e| e.exit_info().is_none())
    }
}

#[derive(Debug)]
struct Table {
    max: usize,
    per_caller: usize,
    last_id: u64,
    live: BTreeMap<u64, SessionEntry>,
}

/// The table, shared by every door of one server.
#[derive(Debug, Clone)]
pub(crate) struct SessionLedger {
    inner: Arc<Mutex<Table>>,
}

/// A seat in the table; dropping it frees the seat.
#[derive(Debug)]
pub(crate) struct SessionTicket {
    id: u64,
    ledger: SessionLedger,
}

impl SessionLedger {
    /// A table of at most `max` sessions, `per_caller` of them one caller's.
    pub(crate) fn new(max: usize, per_caller: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Table {
                max,
                per_caller,
                last_id: 0,
                live: BTreeMap::new(),
            })),
        }
    }

    /// A seat for one more session of `caller`, or why there is none.
    pub(crate) fn admit(&self, caller: &Caller, what: &str) -> Result<SessionTicket, SessionsFull> {
        let mut table = crate::sync::lock(&self.inner);
        // A process that exited holds no seat, though its door may keep
        // it a while for its last output.
        let running = table.live.values().filter(|e| e.is_running()).count();
        if running >= table.max {
            return Err(SessionsFull::Server { max: table.max });
        }
        let held = table
            .live
            .values()
            .filter(|e| &e.caller == caller && e.is_running())
            .count();
        if held >= table.per_caller {
            return Err(SessionsFull::Caller {
                caller: caller.to_string(),
                max: table.per_caller,
            });
        }
        table.last_id += 1;
        let id = table.last_id;
        table.live.insert(
            id,
            SessionEntry {
                id,
                caller: caller.clone(),
                what: what.to_owned(),
                started: Instant::now(),
                exec: None,
                background: false,
            },
        );
        Ok(SessionTicket {
            id,
            ledger: self.clone(),
        })
    }

    /// How many sessions live, of every door.
    pub(crate) fn len(&self) -> usize {
        crate::sync::lock(&self.inner).live.len()
    }

    /// The live sessions, oldest first.
    pub(crate) fn entries(&self) -> Vec<SessionEntry> {
        crate::sync::lock(&self.inner)
            .live
            .values()
            .cloned()
            .collect()
    }

    /// The process of session `id` if `caller` owns it: another caller's
    /// session reads as unknown.
    pub(crate) fn process_of(&self, caller: &Caller, id: u64) -> Option<Execution> {
        let table = crate::sync::lock(&self.inner);
        let entry = table.live.get(&id)?;
        (&entry.caller == caller)
            .then(|| entry.exec.clone())
            .flatten()
    }

    /// Ends every live process (the server stops); each door's own task
    /// then sees its process gone and drops its ticket.
    pub(crate) async fn end_all(&self) {
        for entry in self.entries() {
            let Some(exec) = entry.exec else { continue };
            let report = exec.terminate().await;
            tracing::info!(
                session = entry.id,
                caller = %entry.caller,
                what = %entry.what,
                age_ms = u64::try_from(entry.started.elapsed().as_millis()).unwrap_or(u64::MAX),
                survivors = ?report.survivors,
                "session ended: the server stops"
            );
        }
    }
}

impl SessionTicket {
    /// The id the table knows this session by (a door may show it).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Marks the seat as held by what its command left running in the
    /// background: it counts against the caps though the command exited.
    pub(crate) fn leave_in_background(&self) {
        if let Some(entry) = crate::sync::lock(&self.ledger.inner).live.get_mut(&self.id) {
            entry.background = true;
        }
    }

    /// Records the process this seat is for, so the server's stop ends it.
    pub(crate) fn hold(&self, exec: &Execution) {
        if let Some(entry) = crate::sync::lock(&self.ledger.inner).live.get_mut(&self.id) {
            entry.exec = Some(exec.clone());
        }
    }
}

impl Drop for SessionTicket {
    fn drop(&mut self) {
        crate::sync::lock(&self.ledger.inner).live.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(n: u8) -> Caller {
        Caller::remote("swerex", [127, 0, 0, n].into(), None)
    }

    #[test]
    fn the_table_bounds_every_door_together_and_frees_a_seat_when_a_ticket_drops() {
        let ledger = SessionLedger::new(2, 2);
        let a = ledger.admit(&caller(1), "Start").unwrap();
        let _b = ledger.admit(&caller(2), "bash session x").unwrap();
        assert_eq!(
            ledger.admit(&caller(3), "exec_command").unwrap_err(),
            SessionsFull::Server { max: 2 }
        );
        drop(a);
        assert_eq!(ledger.len(), 1);
        assert!(ledger.admit(&caller(3), "exec_command").is_ok());
    }

    #[test]
    fn one_caller_gets_its_share_and_others_keep_theirs() {
        let ledger = SessionLedger::new(10, 2);
        let _a = ledger.admit(&caller(1), "a").unwrap();
        let _b = ledger.admit(&caller(1), "b").unwrap();
        let err = ledger.admit(&caller(1), "c").unwrap_err();
        assert!(matches!(err, SessionsFull::Caller { max: 2, .. }), "{err}");
        assert!(err.to_string().contains("--max-sessions-per-client"));
        assert!(ledger.admit(&caller(2), "d").is_ok());
    }

    #[test]
    fn a_caller_reaches_only_its_own_sessions() {
        let ledger = SessionLedger::new(10, 10);
        let t = ledger.admit(&caller(1), "a").unwrap();
        assert!(ledger.process_of(&caller(2), t.id()).is_none());
        assert_eq!(ledger.entries()[0].caller, caller(1));
    }
}
