//! One session: a command started by `exec_command` that the table keeps
//! while it runs, and the smart wait that every call on it goes through.
//!
//! A wait ends at the first of: the command exits, `wait_for` matches new
//! output, the foreground process of its PTY waits for the terminal alone
//! after a quiet period (a prompt), the yield runs out, or the client cancels
//! the call. It never kills anything: the command timeout lives in the
//! engine and is a separate parameter.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use regex::Regex;
use tokio_util::sync::CancellationToken;

use super::reply::ReplyState;
use super::table::Prunable;
use crate::exec::{Execution, ExitInfo, WaitEnd};
use crate::exit_code;

/// How long a PTY must stay quiet before a wait for the terminal counts as
/// a prompt waiting for an answer.
pub(crate) const PROMPT_QUIET: Duration = Duration::from_millis(300);
/// How often a wait looks at `/proc` and sends progress.
const TICK: Duration = Duration::from_millis(100);
/// A running session with no output for this long is `idle`.
const IDLE_AFTER: Duration = Duration::from_secs(5);

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    Exited,
    Matched,
    AwaitingInput,
    Deadline,
    Cancelled,
}

impl WaitOutcome {
    /// The reply state for this outcome (a cancelled call still answers).
    pub(crate) fn reply_state(self) -> ReplyState {
        match self {
            WaitOutcome::Exited => ReplyState::Exited,
            WaitOutcome::Matched => ReplyState::Matched,
            WaitOutcome::AwaitingInput => ReplyState::AwaitingInput,
            WaitOutcome::Deadline | WaitOutcome::Cancelled => ReplyState::Running,
        }
    }
}

/// A session's state for `list_sessions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SessionState {
    /// Running and producing output (or being waited on).
    Active,
    /// Running, quiet for a while.
    Idle,
    /// The process is gone; its last output was not taken yet.
    Exited,
}

/// A command the table keeps.
#[derive(Debug)]
pub(crate) struct CommandSession {
    pub(crate) exec: Execution,
    pub(crate) command: String,
    pub(crate) tty: bool,
    pub(crate) started: Instant,
    last_call: Mutex<Instant>,
    /// The command's end was counted in the metrics.
    end_counted: AtomicBool,
    /// The sandbox report of a confined command, kept while it lives.
    report: Option<crate::plan::sandbox::ReportGuard>,
    /// Its seat in the one session table of every door.
    seat: Mutex<Option<crate::broker::SessionTicket>>,
    /// The scheduler's slot, held while the command runs.
    _slot: SlotGuard,
}

/// Holds a session's scheduler slot until its command ends (exit, kill,
/// timeout) or the session goes; a session that only waits for its next
/// call holds no slot once its command is gone.
#[derive(Debug)]
struct SlotGuard {
    gone: CancellationToken,
}

impl SlotGuard {
    fn hold(exec: &Execution, permit: crate::scheduler::Permit) -> Self {
        let gone = CancellationToken::new();
        let exec = exec.clone();
        let session_gone = gone.clone();
        tokio::spawn(async move {
            // The handle kept here is given up with the session, so it never
            // keeps a command alive that its session would have killed.
            let forever = Instant::now() + Duration::from_secs(SLOT_WATCH_HORIZON_SECS);
            tokio::select! {
                _ = exec.wait(forever, None) => {}
                () = session_gone.cancelled() => {}
            }
            drop(exec);
            drop(permit);
        });
        Self { gone }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.gone.cancel();
    }
}

/// How far ahead the slot watch waits for a command's end (a wait needs a
/// deadline): a century, so in practice until the end.
const SLOT_WATCH_HORIZON_SECS: u64 = 100 * 365 * 24 * 3600;

impl Prunable for CommandSession {
    fn has_exited(&self) -> bool {
        self.exec.exit_info().is_some()
    }
}

impl CommandSession {
    pub(crate) fn new(
        exec: Execution,
        command: String,
        tty: bool,
        report: Option<crate::plan::sandbox::ReportGuard>,
        permit: crate::scheduler::Permit,
    ) -> Self {
        let now = Instant::now();
        Self {
            _slot: SlotGuard::hold(&exec, permit),
            report,
            tty,
            exec,
            command,
            started: now,
            last_call: Mutex::new(now),
            end_counted: AtomicBool::new(false),
            seat: Mutex::new(None),
        }
    }

    /// Seats the session in the one table of every door.
    pub(crate) fn take_seat(&self, ticket: crate::broker::SessionTicket) {
        ticket.hold(&self.exec);
        *crate::sync::lock(&self.seat) = Some(ticket);
    }

    /// Frees its seat at once (the session is being killed).
    pub(crate) fn leave_seat(&self) {
        crate::sync::lock(&self.seat).take();
    }

    /// What the sandbox enforced, for a confined command.
    pub(crate) fn attestation(&self) -> Option<crate::result::SandboxAttestation> {
        self.report
            .as_ref()
            .and_then(|r| crate::result::SandboxAttestation::read(r.path()))
    }

    /// True the first time only: the end of the command is counted once,
    /// however many calls see it.
    pub(crate) fn first_to_count_end(&self) -> bool {
        !self.end_counted.swap(true, Ordering::Relaxed)
    }

    /// Marks the session as used by a call now.
    pub(crate) fn touch(&self) {
        if let Ok(mut at) = self.last_call.lock() {
            *at = Instant::now();
        }
    }

    /// When a call last used the session.
    pub(crate) fn last_call(&self) -> Instant {
        self.last_call.lock().map(|at| *at).unwrap_or(self.started)
    }

    /// Active, idle or exited, from the process and its last output.
    pub(crate) fn state(&self) -> SessionState {
        if self.exec.exit_info().is_some() {
            return SessionState::Exited;
        }
        let last = self
            .exec
            .last_output_at()
            .unwrap_or(self.started)
            .max(self.last_call());
        if last.elapsed() < IDLE_AFTER {
            SessionState::Active
        } else {
            SessionState::Idle
        }
    }

    /// Waits until `until` or an earlier end; `on_tick` runs about every
    /// [`TICK`] (progress notifications).
    pub(crate) async fn wait(
        &self,
        until: Instant,
        wait_for: Option<&Regex>,
        cancel: &CancellationToken,
        mut on_tick: impl FnMut(),
    ) -> WaitOutcome {
        let call_started = Instant::now();
        loop {
            let now = Instant::now();
            if now >= until {
                return WaitOutcome::Deadline;
            }
            let step = until.min(now + TICK);
            tokio::select! {
                end = self.exec.wait(step, wait_for) => match end {
                    WaitEnd::Exited => return WaitOutcome::Exited,
                    WaitEnd::Matched => return WaitOutcome::Matched,
                    WaitEnd::Deadline => {}
                },
                () = cancel.cancelled() => return WaitOutcome::Cancelled,
            }
            on_tick();
            if self.tty && self.quiet_since(call_started) >= PROMPT_QUIET {
                let exec = self.exec.clone();
                let blocked = tokio::task::spawn_blocking(move || exec.awaiting_input())
                    .await
                    .unwrap_or(false);
                if blocked && self.exec.exit_info().is_none() {
                    return WaitOutcome::AwaitingInput;
                }
            }
        }
    }

    /// How long no output came, counted from `floor` at the earliest: input
    /// just written may not have been read yet.
    fn quiet_since(&self, floor: Instant) -> Duration {
        self.exec
            .last_output_at()
            .map_or(floor, |at| at.max(floor))
            .elapsed()
    }
}

/// The exit code a reply gives for how a command ended: its own code, 124
/// at the command timeout, 128+N when killed by signal N.
pub(crate) fn exit_code_of(info: &ExitInfo) -> i32 {
    if info.timed_out {
        return exit_code::TIMEOUT;
    }
    match (info.code, info.signal) {
        (Some(code), _) => code,
        (None, Some(signal)) => exit_code::for_signal(signal),
        (None, None) => exit_code::INTERNAL,
    }
}
