//! The end of a command: the kill (SIGTERM, grace, SIGKILL), the settle
//! after its exit (a moment for the output, then whatever it left behind is
//! killed, drained and reaped) and the finished result.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{EXIT_SETTLE, Execution};
use crate::exec::completed::Completed;
use crate::exec::glue::RenderOptions;
use crate::exec::kill::{self, KillReport};
use crate::exec::state::Shared;

impl Execution {
    /// Kills the command and everything it started (SIGTERM, grace,
    /// SIGKILL), then drains the output within its bound.
    pub async fn terminate(&self) -> KillReport {
        let shared = Arc::clone(&self.owner.shared);
        tokio::task::spawn_blocking(move || kill::terminate(&shared))
            .await
            .unwrap_or_default()
    }

    /// Waits for the exit (the command timeout applies), gives the output a
    /// moment, kills whatever the command left behind, drains within the
    /// bound and reaps: afterwards nothing the command started runs (or it
    /// is listed as a survivor). Calling it again returns at once; a call
    /// that was cancelled starts over.
    pub async fn settle(&self) {
        self.owner
            .settled
            .get_or_init(|| async {
                let shared = &self.owner.shared;
                shared.wait_async(far_future(), |s| s.exit.is_some()).await;
                shared
                    .wait_async(Instant::now() + EXIT_SETTLE, |s| s.output_done)
                    .await;
                if something_is_left(shared) {
                    // The slow path, on a thread since it sleeps through the
                    // grace.
                    let shared = Arc::clone(shared);
                    let _ = tokio::task::spawn_blocking(move || kill_and_drain(&shared)).await;
                }
                kill::reap_and_release(shared);
            })
            .await;
    }

    /// [`settle`](Self::settle), then renders stdout and stderr. Calling it
    /// again returns the same result.
    pub async fn finish(&self, opts: &RenderOptions) -> Completed {
        let mut cached = self.owner.completed.lock().await;
        if let Some(done) = cached.as_ref() {
            return done.clone();
        }
        self.settle().await;
        let completed = self.build_completed(opts);
        *cached = Some(completed.clone());
        completed
    }

    /// Waits for the exit (the command timeout applies, and a timeout still
    /// kills the whole tree), gives the output a moment, then renders it,
    /// leaving what the command started in the background running: the
    /// platforms' way (`server > log 2>&1 &` lives on). `true` with the
    /// result when something is left; it lives while a handle of this
    /// execution does, and the last handle's drop (or
    /// [`terminate`](Self::terminate)) kills it. Output still held open by
    /// the background is no longer read (its writer gets `EPIPE`): the
    /// platforms' docs redirect it. With nothing left this is
    /// [`finish`](Self::finish).
    pub async fn finish_leaving_background(&self, opts: &RenderOptions) -> (Completed, bool) {
        if self.settle_leaving_background().await {
            (self.build_completed(opts), true)
        } else {
            (self.finish(opts).await, false)
        }
    }

    /// [`finish_leaving_background`](Self::finish_leaving_background)
    /// without the rendering (a door reading the output from a tap): `true`
    /// when something is left running; otherwise the execution is settled.
    pub async fn settle_leaving_background(&self) -> bool {
        let shared = Arc::clone(&self.owner.shared);
        shared.wait_async(far_future(), |s| s.exit.is_some()).await;
        shared
            .wait_async(Instant::now() + EXIT_SETTLE, |s| s.output_done)
            .await;
        if !self.has_remainder().await {
            self.settle().await;
            return false;
        }
        if !shared.lock().output_done {
            shared.stop_reading();
            shared
                .wait_async(Instant::now() + Duration::from_millis(500), |s| {
                    s.output_done
                })
                .await;
        }
        shared.reap_main();
        true
    }

    /// Whether a process of this execution still lives (after the exit:
    /// what it left in the background). Scans `/proc`; blocking work is
    /// done on a thread.
    pub async fn has_remainder(&self) -> bool {
        let shared = Arc::clone(&self.owner.shared);
        tokio::task::spawn_blocking(move || !kill::members(&shared).is_empty())
            .await
            .unwrap_or(true)
    }

    /// The result of a settled execution.
    pub(in crate::exec) fn build_completed(&self, opts: &RenderOptions) -> Completed {
        let survivors = self.owner.shared.lock().survivors.clone();
        Completed::build(self, opts, survivors)
    }
}

/// Whether something of the command is left after its exit, or holds its
/// output open.
pub(in crate::exec) fn something_is_left(shared: &Shared) -> bool {
    !shared.lock().output_done || kill::may_have_members(shared)
}

/// Kills what is left of the command, then drains its output. Blocking.
pub(in crate::exec) fn kill_and_drain(shared: &Shared) {
    kill::kill_everything(shared);
    kill::drain(shared);
}

pub(in crate::exec) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}
