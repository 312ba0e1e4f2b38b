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

pub(crate) mod attached;
pub(crate) mod blocking;
pub(crate) mod cgroup;
mod child_setup;
pub(crate) mod clone3;
pub(crate) mod clone_vm;
pub(crate) mod completed;
pub(crate) mod env;
pub(crate) mod error;
pub(crate) mod execution;
pub(crate) mod glue;
pub(crate) mod interrupt;
pub(crate) mod kill;
pub(crate) mod pids_limit;
pub(crate) mod procfs;
pub(crate) mod pty;
pub(crate) mod pump;
pub(crate) mod resolve;
pub(crate) mod spawner;
pub(crate) mod spec;
pub(crate) mod state;
pub(crate) mod tail_ring;
pub(crate) mod tap;
pub(crate) mod terminal_wait;

pub(crate) use completed::Completed;
pub(crate) use env::SESSION_VAR;
pub use env::child_env;
pub(crate) use error::ExecError;
pub use execution::{Execution, WaitEnd};
pub use glue::RenderOptions;
pub(crate) use glue::Rendered;
pub(crate) use kill::kill_orphans;
pub use spawner::KnownChildGuard;
pub(crate) use spawner::claim_all_children;
pub use spec::{SpawnSpec, new_session_tag};
pub(crate) use state::ExitInfo;
pub(crate) use tap::{Attach, DEFAULT_TAP_CHUNKS, TapReceiver, output_tap};
