//! The blocking face of an [`Execution`], for a one-shot caller (`run`,
//! `agent-reach-exec`) that has nothing else to wait for: no async runtime.
//! The waits are the pump's condition variable; with
//! [`Execution::spawn_inline`] the caller has run the pump itself first,
//! and a signal to it reached the pump through its signalfd.
//!
//! The steps are those of the async [`Execution::settle`] and
//! [`Execution::finish`], and they share the cached outcome: whichever runs
//! first, the other returns what it found.

use std::time::Instant;

use super::completed::Completed;
use super::execution::{EXIT_SETTLE, Execution, far_future, kill_and_drain, something_is_left};
use super::glue::RenderOptions;
use super::kill;

impl Execution {
    /// Waits for the exit (the command timeout applies), gives the output a
    /// moment, kills whatever the command left behind, drains within the
    /// bound and reaps, as [`settle`](Self::settle) does.
    pub fn settle_blocking(&self) {
        if self.settled_cell().initialized() {
            return;
        }
        let shared = self.shared();
        shared.wait_blocking(far_future(), |s| s.exit.is_some());
        shared.wait_blocking(Instant::now() + EXIT_SETTLE, |s| s.output_done);
        if something_is_left(shared) {
            kill_and_drain(shared);
        }
        kill::reap_and_release(shared);
        let _ = self.settled_cell().set(());
    }

    /// [`settle_blocking`](Self::settle_blocking), then renders stdout and
    /// stderr; the same result as [`finish`](Self::finish). Must not be
    /// called from inside an async runtime.
    pub fn finish_blocking(&self, opts: &RenderOptions) -> Completed {
        let mut cached = self.completed_cache().blocking_lock();
        if let Some(done) = cached.as_ref() {
            return done.clone();
        }
        self.settle_blocking();
        let completed = self.build_completed(opts);
        *cached = Some(completed.clone());
        completed
    }

    /// The signal read from the interrupt descriptor, if any.
    pub fn interrupted(&self) -> Option<i32> {
        self.shared().lock().interrupted
    }
}
