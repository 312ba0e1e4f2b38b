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
