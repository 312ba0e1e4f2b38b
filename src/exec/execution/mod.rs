//! One running command: spawned from a [`SpawnSpec`], then waited for,
//! read from, written to and ended through a cheap, cloneable handle, so a
//! one-shot `run` and a long-lived session use the same engine.
//!
//! Dropping the last handle of a command that still runs kills it (and
//! everything it started) at once, without grace: nothing outlives the
//! handle that could still have ended it.
//!
//! By stage: [`spawn`] starts it (checks, fork, captures, pump), this
//! module is the handle (waits, output, input, state), [`lifetime`] ends it
//! (kill, settle, the finished result).

mod lifetime;
mod spawn;

pub(super) use lifetime::{far_future, kill_and_drain, something_is_left};

use std::sync::Arc;
use std::time::{Duration, Instant};

use regex::Regex;

use super::completed::Completed;
use super::glue::{RenderOptions, Rendered};
use super::kill;
use super::pty;
use super::spec::SpawnSpec;
use super::state::{ExitInfo, Shared, State};

/// After the command exits, how long output may still arrive before what
/// is left of its process tree is killed (then the drain bound applies).
pub(crate) const EXIT_SETTLE: Duration = Duration::from_millis(50);

/// Why [`Execution::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The command exited (its output up to the exit has been read).
    Exited,
    /// The `wait_for` pattern matched the output since the last take.
    Matched,
    /// The time given ran out; the command still runs.
    Deadline,
}

/// A running (or finished) command. Clones share it.
#[derive(Debug, Clone)]
pub struct Execution {
    owner: Arc<Owner>,
}

/// Kills the command when the last handle goes.
#[derive(Debug)]
struct Owner {
    shared: Arc<Shared>,
    spec: SpawnSpec,
    completed: tokio::sync::Mutex<Option<Completed>>,
    settled: tokio::sync::OnceCell<()>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        let shared = &self.shared;
        // A settled command with no survivors left nothing to look for (a
        // dead tree cannot grow).
        let settled = self.settled.initialized() && shared.lock().survivors.is_empty();
        if !settled && kill::may_have_members(shared) {
            kill::kill_now(shared);
        }
        shared.stop_reading();
    }
}

impl Execution {
    pub(super) fn shared(&self) -> &Shared {
        &self.owner.shared
    }

    pub(super) fn settled_cell(&self) -> &tokio::sync::OnceCell<()> {
        &self.owner.settled
    }

    pub(super) fn completed_cache(&self) -> &tokio::sync::Mutex<Option<Completed>> {
        &self.owner.completed
    }

    /// The command's process id (also its process group and session id).
    pub fn pid(&self) -> u32 {
        self.shared().pid as u32
    }

    /// Whether it runs on a PTY.
    pub fn is_tty(&self) -> bool {
        self.shared().tty
    }

    /// The spec it was started from.
    pub fn spec(&self) -> &SpawnSpec {
        &self.owner.spec
    }

    /// How it ended; `None` while it runs.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.shared().lock().exit
    }

    /// When it was started.
    pub fn started_at(&self) -> Instant {
        self.shared().started_at
    }

    /// When output last arrived, if any did.
    pub fn last_output_at(&self) -> Option<Instant> {
        self.shared().lock().last_output_at
    }

    /// Whether all output has been read (every pipe closed, or reading was
    /// stopped at the drain bound).
    pub fn output_done(&self) -> bool {
        self.shared().lock().output_done
    }

    /// Waits until the command exits, `wait_for` matches the output that
    /// arrived since the last [`take_output`](Self::take_output), or `until`.
    /// This is the sessions' yield: it never kills anything. `wait_for` sees
    /// output only of session-style executions (`merge_output` or `tty`);
    /// one-shot executions do not keep a copy for it.
    pub async fn wait(&self, until: Instant, wait_for: Option<&Regex>) -> WaitEnd {
        let mut events = self.shared().events.subscribe();
        loop {
            events.borrow_and_update();
            if let Some(end) = self.check_wait(wait_for) {
                return end;
            }
            let now = Instant::now();
            if now >= until {
                return WaitEnd::Deadline;
            }
            let exited_settle = self.shared().lock().exited_at.map(|at| at + EXIT_SETTLE);
            let wake_at = exited_settle.map_or(until, |s| s.min(until));
            super::state::next_event(&mut events, wake_at).await;
        }
    }

    fn check_wait(&self, wait_for: Option<&Regex>) -> Option<WaitEnd> {
        let mut state = self.shared().lock();
        if let Some(exited_at) = state.exited_at
            && (state.output_done || exited_at.elapsed() >= EXIT_SETTLE)
        {
            return Some(WaitEnd::Exited);
        }
        let pattern = wait_for?;
        // Re-search a little before the new bytes so a match that straddles
        // two reads is found.
        let from = state.match_scanned.saturating_sub(4096);
        let from = floor_char_boundary(&state.match_buf, from);
        let bytes = &state.match_buf[from..];
        // Valid UTF-8 (the usual case) is searched in place, without the
        // copy a lossy conversion makes.
        let found = match std::str::from_utf8(bytes) {
            Ok(text) => pattern.is_match(text),
            Err(_) => pattern.is_match(&String::from_utf8_lossy(bytes)),
        };
        if found {
            return Some(WaitEnd::Matched);
        }
        state.match_scanned = state.match_buf.len();
        None
    }

    /// What arrived since the last take, rendered (both streams, or the one
    /// merged stream of a session).
    pub fn take_output(&self, opts: &RenderOptions) -> Rendered {
        let mut state = self.shared().lock();
        state.match_buf.clear();
        state.match_scanned = 0;
        state.windows_taken = true;
        state.taken_raw_bytes = state.captures.total_raw_bytes();
        state.captures.take_window(opts)
    }

    /// Bytes the command wrote (as read from its pipes or terminal, before
    /// any cleaning) that no [`take_output`](Self::take_output) has taken.
    pub fn pending_bytes(&self) -> u64 {
        let state = self.shared().lock();
        state
            .captures
            .total_raw_bytes()
            .saturating_sub(state.taken_raw_bytes)
    }

    /// The spill file holding the whole (cleaned, redacted) output of a
    /// session-style execution (`merge_output` or `tty`: one stream), once
    /// some output was written to it. `None` for one-shot executions with
    /// separate streams (their [`Completed`] result names their files), or
    /// when nothing is spilled.
    pub fn spill_path(&self) -> Option<std::path::PathBuf> {
        self.shared().lock().captures.merged_spill_path()
    }

    /// The process group in the foreground of the PTY (a shell's current
    /// job), for telling whether the command waits for input.
    pub fn pty_foreground_pgid(&self) -> Option<i32> {
        self.shared()
            .pty_master
            .as_ref()
            .and_then(pty::foreground_pgid)
    }

    /// Whether the foreground process of the PTY waits for the terminal and
    /// nothing else (a `read` on it, or a `select`/`poll`/`epoll` that
    /// watches only it): the command waits for input, and its prompt is
    /// the end of the output. Always false on pipes.
    pub fn awaiting_input(&self) -> bool {
        let Some(master) = &self.shared().pty_master else {
            return false;
        };
        let (Some(pgid), Some(terminal)) = (pty::foreground_pgid(master), pty::slave_name(master))
        else {
            return false;
        };
        super::terminal_wait::group_waits_for_terminal(pgid, &terminal)
    }

    pub(super) fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.shared().lock())
    }
}

fn floor_char_boundary(bytes: &[u8], mut index: usize) -> usize {
    index = index.min(bytes.len());
    while index > 0 && index < bytes.len() && (bytes[index] & 0xC0) == 0x80 {
        index -= 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_can_be_shared_across_tasks_and_threads() {
        fn shareable<T: Send + Sync + Clone + 'static>() {}
        shareable::<Execution>();
        fn sendable<T: Send>(_: &T) {}
        let execution: Option<Execution> = None;
        if let Some(execution) = &execution {
            sendable(&execution.finish(&RenderOptions::default()));
            sendable(&execution.wait(Instant::now(), None));
            sendable(&execution.terminate());
        }
    }

    #[test]
    fn char_boundaries_are_found_backwards() {
        let text = "aé€b".as_bytes();
        assert_eq!(floor_char_boundary(text, 2), 1);
        assert_eq!(floor_char_boundary(text, 4), 3);
        assert_eq!(floor_char_boundary(text, 99), text.len());
    }
}
