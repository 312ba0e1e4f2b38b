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
//! Must be used inside a tokio runtime (the async methods); the threads it
//! starts itself (a spawner, one pump per execution, a timeout watcher when
//! there is a timeout) do not need one.

pub mod cgroup;
pub mod clone3;
pub mod completed;
pub mod env;
pub mod error;
pub mod execution;
pub mod glue;
pub mod kill;
pub mod procfs;
pub mod pty;
pub mod pump;
pub mod resolve;
pub mod spawner;
pub mod spec;
pub mod state;

pub use completed::Completed;
pub use env::{SESSION_VAR, child_env};
pub use error::ExecError;
pub use execution::{Execution, WaitEnd};
pub use glue::{RenderOptions, Rendered};
pub use kill::KillReport;
pub use spawner::{KnownChildGuard, reap_orphans};
pub use spec::{OutputLimits, SpawnSpec, new_session_tag};
pub use state::ExitInfo;
