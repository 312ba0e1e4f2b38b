//! Locking that outlives a panic elsewhere. Every mutex of agent-reach
//! guards state that each update leaves consistent (a set of pids, a pool
//! of directories, a table of lookups), so a thread that panicked while
//! holding one must not take the rest of the process down with it.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking the guard of a poisoned one as it is.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
