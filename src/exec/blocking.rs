//! The blocking face of an [`Execution`], for a one-shot caller (`run`,
//! `agent-reach-exec`) that has nothing else to wait for: no async runtime,
//! no thread of its own. The waits are the pump's condition variable; a
//! signal to the caller reaches them through the signalfd the pump watches
//! ([`Execution::spawn_interruptible`]).
//!
//! The steps are those of the async [`Execution::settle`] and
//! [`Execution::finish`], and they share the cached outcome: whichever runs
//! first, the other returns what it found.

use std::time::Instant;

use super::completed::Completed;
use super::execution::{EXIT_SETTLE, Execution, far_future, kill_and_drain, something_is_left};
use super::glue::RenderOptions;
use super::kill::{self, KillReport};

impl Execution {
    /// Waits for the exit (the command timeout applies), gives the output a
    /// moment, kills whatever the command left behind, drains within the
    /// bound and reaps, as [`settle`](Self::settle) does. With
    /// `stop_on_interrupt`, returns the signal instead as soon as one was
    /// read from the interrupt descriptor while the command still runs (the
    /// caller then [terminates](Self::terminate_blocking) it).
    pub fn settle_blocking(&self, stop_on_interrupt: bool) -> Option<i32> {
        if self.settled_cell().initialized() {
            return None;
        }
        let shared = self.shared();
        shared.wait_blocking(far_future(), |s| {
            s.exit.is_some() || (stop_on_interrupt && s.interrupted.is_some())
        });
        {
            let state = shared.lock();
            if state.exit.is_none() {
                return state.interrupted;
            }
        }
        shared.wait_blocking(Instant::now() + EXIT_SETTLE, |s| s.output_done);
        if something_is_left(shared) {
            kill_and_drain(shared);
        }
        kill::reap_and_release(shared);
        let _ = self.settled_cell().set(());
        None
    }

    /// Kills the command and everything it started (SIGTERM, grace,
    /// SIGKILL), then drains the output within its bound.
    pub fn terminate_blocking(&self) -> KillReport {
        kill::terminate(self.shared_arc())
    }

    /// [`settle_blocking`](Self::settle_blocking) to the end, then renders
    /// stdout and stderr; the same result as [`finish`](Self::finish).
    /// Must not be called from inside an async runtime.
    pub fn finish_blocking(&self, opts: &RenderOptions) -> Completed {
        let mut cached = self.completed_cache().blocking_lock();
        if let Some(done) = cached.as_ref() {
            return done.clone();
        }
        self.settle_blocking(false);
        let completed = self.build_completed(opts);
        *cached = Some(completed.clone());
        completed
    }

    /// The signal read from the interrupt descriptor, if any.
    pub fn interrupted(&self) -> Option<i32> {
        self.shared().lock().interrupted
    }
}
