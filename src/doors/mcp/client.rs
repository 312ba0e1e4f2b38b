//! Who is calling: one seat per MCP client. stdio is one client for the
//! whole life of the server; over HTTP every MCP session is a client, and
//! its seat is dropped with the handler rmcp made for that session (on
//! `DELETE`, at the idle timeout, at shutdown), which kills its sessions.
//!
//! The seat is an RAII guard: the server hands it the function that ends
//! the client, so whatever way the MCP session goes away, its processes go
//! with it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::table::ClientId;

/// The next id of a client over HTTP (0 is stdio).
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

type OnLeave = Box<dyn FnOnce(ClientId) + Send>;

/// One client: its id, how many sessions it may hold, and what happens
/// when it leaves.
pub(crate) struct ClientSeat {
    id: ClientId,
    max_sessions: usize,
    on_leave: Mutex<Option<OnLeave>>,
}

impl std::fmt::Debug for ClientSeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientSeat")
            .field("id", &self.id)
            .field("max_sessions", &self.max_sessions)
            .finish_non_exhaustive()
    }
}

impl ClientSeat {
    /// The stdio client: it leaves with the server, whose shutdown kills
    /// every session anyway.
    pub(crate) fn stdio(max_sessions: usize) -> Self {
        Self {
            id: ClientId::STDIO,
            max_sessions,
            on_leave: Mutex::new(None),
        }
    }

    /// A new client over HTTP; `on_leave` runs once, when the seat drops.
    pub(crate) fn remote(
        max_sessions: usize,
        on_leave: impl FnOnce(ClientId) + Send + 'static,
    ) -> Self {
        Self {
            id: ClientId(NEXT_CLIENT.fetch_add(1, Ordering::Relaxed)),
            max_sessions,
            on_leave: Mutex::new(Some(Box::new(on_leave))),
        }
    }

    pub(crate) fn id(&self) -> ClientId {
        self.id
    }

    /// `--max-sessions-per-client` (stdio: `--max-sessions`).
    pub(crate) fn max_sessions(&self) -> usize {
        self.max_sessions
    }

    /// The client as the one session table counts it.
    pub(crate) fn caller(&self) -> crate::gate::Caller {
        if self.is_remote() {
            crate::gate::Caller::local("mcp").within(&self.id.to_string())
        } else {
            crate::gate::Caller::local("stdio")
        }
    }

    /// Whether this is a client over the network (one MCP session).
    pub(crate) fn is_remote(&self) -> bool {
        self.id != ClientId::STDIO
    }
}

impl Drop for ClientSeat {
    fn drop(&mut self) {
        let on_leave = self
            .on_leave
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(on_leave) = on_leave {
            on_leave(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_remote_seat_runs_its_leave_once_when_dropped() {
        let left = Arc::new(Mutex::new(Vec::new()));
        let seen = left.clone();
        let seat = ClientSeat::remote(4, move |id| seen.lock().unwrap().push(id));
        let id = seat.id();
        assert!(seat.is_remote());
        assert_ne!(id, ClientId::STDIO);
        assert!(left.lock().unwrap().is_empty());
        drop(seat);
        assert_eq!(*left.lock().unwrap(), vec![id]);
        assert!(!ClientSeat::stdio(64).is_remote());
    }
}
