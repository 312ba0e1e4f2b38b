//! The exec engine: starts commands (pipes or a PTY), enforces the command
//! timeout, reads their output without ever blocking them, and ends them so
//! that nothing they started survives.
//!
//! [`Execution`] is the handle `run`, sessions and registry tools share:
//! spawn from a [`SpawnSpec`], then [`Execution::wait`] (the sessions' yield,
//! never a kill), [`Execution::take_output`], [`Execution::write_stdin`],
//! [`Execution::terminate`] or [`Execution::finish`] (the one-shot end, with
//! the normalized result from [`Completed::to_result`]).
//!
//! The async methods need a tokio runtime (with time enabled). The engine's
//! own threads need none: one pump per execution (reads the output, sees
//! the exit, enforces the command timeout), a spawner thread only when
//! spawning off the main thread (see [`spawner`] on `PR_SET_PDEATHSIG`),
//! and a short-lived killer at a timeout.
//!
//! A process that starts children only through the engine (`run`, `serve`)
//! should call [`spawner::claim_all_children`] after `ProcessSession::start` made
//! it a subreaper: then orphans that even cleared their environment are
//! attributed, killed and reaped (with several executions running, at
//! their end or at the last [`kill_orphans`]).

// The Linux backend: every module but the output seam (`glue`,
// `tail_ring`), which the Windows backend
// ([`crate::platform_windows::engine`]) feeds the same way.
#[cfg(unix)]
pub(crate) mod attached;
#[cfg(unix)]
pub(crate) mod blocking;
#[cfg(unix)]
pub(crate) mod cgroup;
#[cfg(unix)]
mod child_setup;
#[cfg(unix)]
pub(crate) mod clone3;
#[cfg(unix)]
pub(crate) mod clone_vm;
#[cfg(unix)]
pub(crate) mod completed;
#[cfg(unix)]
pub(crate) mod env;
#[cfg(unix)]
pub(crate) mod error;
#[cfg(unix)]
pub(crate) mod execution;
pub(crate) mod glue;
#[cfg(unix)]
pub(crate) mod interrupt;
#[cfg(unix)]
pub(crate) mod kill;
#[cfg(unix)]
pub(crate) mod pids_limit;
#[cfg(unix)]
pub(crate) mod ports;
#[cfg(unix)]
pub(crate) mod procfs;
#[cfg(unix)]
pub(crate) mod pty;
#[cfg(unix)]
pub(crate) mod pump;
#[cfg(unix)]
pub(crate) mod resolve;
#[cfg(unix)]
pub(crate) mod spawner;
#[cfg(unix)]
pub(crate) mod spec;
#[cfg(unix)]
pub(crate) mod state;
pub(crate) mod tail_ring;
#[cfg(unix)]
pub(crate) mod tap;
#[cfg(unix)]
pub(crate) mod terminal_wait;

#[cfg(unix)]
pub(crate) use completed::Completed;

#[cfg(unix)]
pub(crate) use env::SESSION_VAR;
#[cfg(unix)]
pub use env::child_env;
#[cfg(unix)]
pub(crate) use error::ExecError;
#[cfg(unix)]
pub use execution::{Execution, WaitEnd};
pub use glue::RenderOptions;
#[cfg(unix)]
pub(crate) use glue::Rendered;
#[cfg(unix)]
pub(crate) use kill::kill_orphans;
#[cfg(unix)]
pub use spawner::KnownChildGuard;
#[cfg(unix)]
pub(crate) use spawner::claim_all_children;
#[cfg(unix)]
pub use spec::{SpawnSpec, new_session_tag};
#[cfg(unix)]
pub(crate) use state::ExitInfo;
#[cfg(unix)]
pub(crate) use tap::{Attach, DEFAULT_TAP_CHUNKS, TapReceiver, output_tap};

/// Processes one command may have at once when the registry does not say
/// (`[limits] pids`; Linux only: Windows has no such limit yet).
pub(crate) const DEFAULT_PIDS_LIMIT: u64 = 4096;

/// How many commands run at once unless the operator says otherwise:
/// cores × 3 (the scheduler's `global`; on Windows, which has no scheduler
/// yet, the bound of `exec --jsonl`).
pub(crate) fn default_global_limit() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from) * 3
}
