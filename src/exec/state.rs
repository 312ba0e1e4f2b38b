//! The state one execution shares between its pump thread, its timeout
//! watcher and its callers, and the wake-ups that tell them it changed.
//!
//! Blocking code waits on the condvar; async callers on the watch channel,
//! which counts events so that no change between a check and the wait is
//! ever missed.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::cgroup::CgroupGuard;
use super::glue::{RenderOptions, Rendered, Sink};
use crate::exit_code;
use crate::result::Status;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitInfo {
    /// Its exit code when it exited by itself.
    pub code: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<i32>,
    /// It was killed because its command timeout ran out.
    pub timed_out: bool,
}

impl ExitInfo {
    /// The code `run` exits with: the command's own, 124 at the timeout,
    /// 128+N when killed by signal N.
    pub fn exit_code(&self) -> i32 {
        if self.timed_out {
            return exit_code::TIMEOUT;
        }
        match (self.code, self.signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => exit_code::for_signal(signal),
            (None, None) => exit_code::INTERNAL,
        }
    }

    /// The normalized result's status.
    pub(crate) fn status(&self) -> Status {
        if self.timed_out {
            Status::Timeout
        } else if self.code == Some(0) {
            Status::Success
        } else {
            Status::Failure
        }
    }

    /// Decodes a `waitid` result: `si_code` and `si_status`.
    pub fn from_child_info(code: i32, status: i32, timed_out: bool) -> Self {
        if code == libc::CLD_EXITED {
            Self {
                code: Some(status),
                signal: None,
                timed_out,
            }
        } else {
            Self {
                code: None,
                signal: Some(status),
                timed_out,
            }
        }
    }

    /// Decodes a `waitpid` status.
    pub fn from_wait_status(status: i32, timed_out: bool) -> Self {
        if libc::WIFEXITED(status) {
            Self {
                code: Some(libc::WEXITSTATUS(status)),
                signal: None,
                timed_out,
            }
        } else {
            Self {
                code: None,
                signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
                timed_out,
            }
        }
    }
}

/// Where output goes: each stream apart (one-shot results) or both in
/// arrival order (sessions).
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "one value per execution, built once and never moved in a hot path"
)]
pub(crate) enum Captures {
    Separate { stdout: Sink, stderr: Sink },
    Merged(Sink),
}

/// Which stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamKind {
    Stdout,
    Stderr,
}

impl Captures {
    pub(crate) fn sink(&mut self, kind: StreamKind) -> &mut Sink {
        match (self, kind) {
            (Captures::Separate { stdout, .. }, StreamKind::Stdout) => stdout,
            (Captures::Separate { stderr, .. }, StreamKind::Stderr) => stderr,
            (Captures::Merged(sink), _) => sink,
        }
    }

    pub(crate) fn finish(&mut self) {
        match self {
            Captures::Separate { stdout, stderr } => {
                stdout.finish();
                stderr.finish();
            }
            Captures::Merged(sink) => sink.finish(),
        }
    }

    /// Bytes the command wrote so far, over every window and stream.
    pub(crate) fn total_raw_bytes(&self) -> u64 {
        match self {
            Captures::Merged(sink) => sink.total_raw_bytes(),
            Captures::Separate { stdout, stderr } => {
                stdout.total_raw_bytes() + stderr.total_raw_bytes()
            }
        }
    }

    /// The spill file of the one merged stream, once something was written
    /// to it; `None` for separate streams.
    pub(crate) fn merged_spill_path(&self) -> Option<std::path::PathBuf> {
        match self {
            Captures::Merged(sink) => sink.spill_path(),
            Captures::Separate { .. } => None,
        }
    }

    /// What arrived since the last take, both streams in one text.
    pub(crate) fn take_window(&mut self, opts: &RenderOptions) -> Rendered {
        match self {
            Captures::Merged(sink) => sink.take_window(opts),
            Captures::Separate { stdout, stderr } => {
                let mut out = stdout.take_window(opts);
                let mut err = stderr.take_window(opts);
                out.highlights.tag("stdout");
                err.highlights.tag("stderr");
                join_rendered(out, err)
            }
        }
    }
}

/// Two rendered texts one after the other, a newline between them when the
/// first does not end in one.
pub(crate) fn join_rendered(first: Rendered, second: Rendered) -> Rendered {
    let mut text = first.text;
    if !text.is_empty() && !second.text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&second.text);
    let mut highlights = first.highlights;
    highlights.merge(second.highlights);
    Rendered {
        text,
        truncated: first.truncated || second.truncated,
        original_bytes: first.original_bytes + second.original_bytes,
        original_token_count: first.original_token_count + second.original_token_count,
        highlights,
    }
}

/// Raw output kept for `wait_for` patterns: what arrived since the last
/// take, at most this much (the newest).
pub(crate) const MATCH_BUFFER_BYTES: usize = 1024 * 1024;

/// The mutable part.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) exit: Option<ExitInfo>,
    pub(crate) exited_at: Option<Instant>,
    pub(crate) timed_out: bool,
    pub(crate) output_done: bool,
    pub(crate) stop_reading: bool,
    pub(crate) last_output_at: Option<Instant>,
    pub(crate) captures: Captures,
    pub(crate) match_buf: Vec<u8>,
    /// Bytes of `match_buf` already searched without a match.
    pub(crate) match_scanned: usize,
    pub(crate) survivors: Vec<u32>,
    /// A window was taken: its fold marker may name the spill files.
    pub(crate) windows_taken: bool,
    /// [`Captures::total_raw_bytes`] at the last take.
    pub(crate) taken_raw_bytes: u64,
    /// Keep raw output for `wait_for` (sessions: merged output or a PTY).
    pub(crate) keep_for_matching: bool,
    /// A signal read from the caller's interrupt descriptor (see
    /// [`Execution::spawn_inline`](super::Execution::spawn_inline)).
    pub(crate) interrupted: Option<i32>,
}

impl State {
    pub(crate) fn new(captures: Captures) -> Self {
        Self {
            exit: None,
            exited_at: None,
            timed_out: false,
            output_done: false,
            stop_reading: false,
            last_output_at: None,
            captures,
            match_buf: Vec::new(),
            match_scanned: 0,
            survivors: Vec::new(),
            windows_taken: false,
            taken_raw_bytes: 0,
            keep_for_matching: true,
            interrupted: None,
        }
    }

    /// Appends raw output to the `wait_for` buffer, dropping the oldest.
    /// Trimmed only when twice the size, so each byte moves once at most.
    pub(crate) fn remember_for_matching(&mut self, bytes: &[u8]) {
        if !self.keep_for_matching {
            return;
        }
        self.match_buf.extend_from_slice(bytes);
        if self.match_buf.len() > 2 * MATCH_BUFFER_BYTES {
            let excess = self.match_buf.len() - MATCH_BUFFER_BYTES;
            self.match_buf.drain(..excess);
            self.match_scanned = self.match_scanned.saturating_sub(excess);
        }
    }
}

/// What the pump, the watcher and the callers share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) pid: i32,
    pub(crate) tag: String,
    pub(crate) tty: bool,
    pub(crate) started_at: Instant,
    pub(crate) kill_grace: Duration,
    pub(crate) drain: Duration,
    pub(crate) cgroup: Option<CgroupGuard>,
    /// Where the command's process limit is held (a v1 `pids` group is
    /// removed with it, after the cgroup above killed what was left).
    pub(crate) _pids: super::pids_limit::PidsHold,
    /// A copy of the PTY master for writing and for the foreground group.
    pub(crate) pty_master: Option<OwnedFd>,
    /// The write end of the command's stdin pipe, while open (see
    /// [`super::tap::Attach::stdin_pipe`]).
    pub(crate) stdin: Mutex<Option<OwnedFd>>,
    pub(crate) state: Mutex<State>,
    pub(crate) changed: Condvar,
    pub(crate) events: tokio::sync::watch::Sender<u64>,
    /// One byte written here wakes the pump thread out of `poll`.
    pub(crate) wake: UnixStream,
    /// Only one termination runs at a time.
    pub(crate) kill_lock: Mutex<()>,
    /// Counts this execution for the orphan attribution rule.
    pub(crate) _live: super::kill::LiveExecutionGuard,
    /// Keeps the reaper off the command until [`Shared::reap_main`].
    pub(crate) known: Mutex<Option<super::spawner::KnownChildGuard>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.reap_main();
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// Tells every waiter that something changed.
    pub(crate) fn notify(&self) {
        self.changed.notify_all();
        self.events.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Wakes the pump so it looks at `stop_reading`.
    pub(crate) fn wake_pump(&self) {
        let _ = (&self.wake).write(&[1]);
    }

    /// Blocks until `done(state)` or the deadline; returns whether it held.
    pub(crate) fn wait_blocking(&self, deadline: Instant, done: impl Fn(&State) -> bool) -> bool {
        let mut state = self.lock();
        loop {
            if done(&state) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = match self.changed.wait_timeout(state, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Async: waits until `done(state)` or the deadline; returns whether it held.
    pub(crate) async fn wait_async(
        &self,
        deadline: Instant,
        done: impl Fn(&State) -> bool,
    ) -> bool {
        let mut events = self.events.subscribe();
        loop {
            events.borrow_and_update();
            if done(&self.lock()) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            next_event(&mut events, deadline).await;
        }
    }

    /// The command is not reaped yet: its pid and process group id are
    /// still reserved for it.
    pub(crate) fn main_unreaped(&self) -> bool {
        crate::sync::lock(&self.known).is_some()
    }

    /// Sends `signal` to the command's process group while the command is
    /// not reaped (its pid, which is the group id, is reserved until then;
    /// the reap waits for the same lock, so the group cannot be a
    /// stranger's by the time the signal goes). Returns whether it was sent.
    pub(crate) fn signal_group(&self, signal: i32) -> bool {
        let known = crate::sync::lock(&self.known);
        if known.is_none() {
            return false;
        }
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(-self.pid, signal) };
        true
    }

    /// Reaps the command once its exit is recorded (the pump leaves it a
    /// zombie so its pid and process group stay reserved during clean-up).
    pub(crate) fn reap_main(&self) {
        if self.lock().exit.is_none() {
            return;
        }
        let mut known = crate::sync::lock(&self.known);
        if known.is_some() {
            let mut status = 0;
            // SAFETY: reaping our own child, whose exit was seen.
            unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            *known = None;
        }
    }

    /// Ends reading: whatever a grandchild still writes is not waited for.
    pub(crate) fn stop_reading(&self) {
        self.lock().stop_reading = true;
        self.wake_pump();
    }
}

/// Sleeps until the next event on `events` or `at`, whichever is first.
pub(crate) async fn next_event(events: &mut tokio::sync::watch::Receiver<u64>, at: Instant) {
    let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(at));
    tokio::select! {
        changed = events.changed() => {
            if changed.is_err() {
                // The sender lives as long as its waiters; be safe anyway.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        () = sleep => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_contract() {
        let ok = ExitInfo {
            code: Some(0),
            signal: None,
            timed_out: false,
        };
        assert_eq!((ok.exit_code(), ok.status()), (0, Status::Success));
        let failed = ExitInfo {
            code: Some(3),
            signal: None,
            timed_out: false,
        };
        assert_eq!((failed.exit_code(), failed.status()), (3, Status::Failure));
        let killed = ExitInfo {
            code: None,
            signal: Some(9),
            timed_out: false,
        };
        assert_eq!(
            (killed.exit_code(), killed.status()),
            (137, Status::Failure)
        );
        let timeout = ExitInfo {
            code: None,
            signal: Some(15),
            timed_out: true,
        };
        assert_eq!(
            (timeout.exit_code(), timeout.status()),
            (124, Status::Timeout)
        );
    }

    #[test]
    fn decodes_wait_statuses() {
        assert_eq!(ExitInfo::from_wait_status(3 << 8, false).code, Some(3));
        let killed = ExitInfo::from_wait_status(libc::SIGKILL, false);
        assert_eq!((killed.code, killed.signal), (None, Some(9)));
    }

    #[test]
    fn match_buffer_keeps_the_newest_bytes() {
        let mut state = State::new(Captures::Merged(Sink::new(
            super::super::glue::SinkConfig {
                cap_bytes: 10,
                secrets: vec![],
                keep_color: false,
                keep_blanks: false,
                tty: false,
                label: "t".into(),
                spill: None,
                skim_after: u64::MAX,
            },
        )));
        state.remember_for_matching(&vec![b'a'; 2 * MATCH_BUFFER_BYTES]);
        state.match_scanned = 2 * MATCH_BUFFER_BYTES - 10;
        state.remember_for_matching(b"zz");
        assert_eq!(state.match_buf.len(), MATCH_BUFFER_BYTES);
        assert!(state.match_buf.ends_with(b"zz"));
        assert_eq!(state.match_scanned, MATCH_BUFFER_BYTES - 12);
    }
}
