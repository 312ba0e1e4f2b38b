//! The live processes of `Start` streams, by the id their `InitEvent`
//! announced: what `WriteStdin`, `SendSignal` and `ResizeTTY` look up, and
//! what the shutdown kills. Ids are ours (counted from 1), never OS pids,
//! so a client can only reach processes this listener started.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::exec::Execution;

/// The table, shared by the service's handlers.
#[derive(Debug, Default, Clone)]
pub(crate) struct Processes {
    inner: Arc<Mutex<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    last_id: i32,
    live: HashMap<i32, Execution>,
}

/// Keeps one process in the table; dropping it takes it out.
#[derive(Debug)]
pub(crate) struct RegistrationGuard {
    id: i32,
    processes: Processes,
}

impl RegistrationGuard {
    pub(crate) fn id(&self) -> i32 {
        self.id
    }
}

impl Drop for RegistrationGuard {
    fn drop(&mut self) {
        crate::sync::lock(&self.processes.inner)
            .live
            .remove(&self.id);
    }
}

impl Processes {
    /// Adds `exec` under a fresh id.
    pub(crate) fn insert(&self, exec: Execution) -> RegistrationGuard {
        let mut table = crate::sync::lock(&self.inner);
        let mut id = table.last_id;
        // Ids wrap after 2^31 starts; one still live is never reused.
        loop {
            id = id.checked_add(1).unwrap_or(1);
            if !table.live.contains_key(&id) {
                break;
            }
        }
        table.last_id = id;
        table.live.insert(id, exec);
        RegistrationGuard {
            id,
            processes: self.clone(),
        }
    }

    /// The process `id`, while its stream lasts.
    pub(crate) fn get(&self, id: i32) -> Option<Execution> {
        crate::sync::lock(&self.inner).live.get(&id).cloned()
    }

    /// Every live process, for the shutdown.
    pub(crate) fn all(&self) -> Vec<Execution> {
        crate::sync::lock(&self.inner)
            .live
            .values()
            .cloned()
            .collect()
    }
}
