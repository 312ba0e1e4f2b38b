//! agent-reach: the execution layer for AI coding agents.
//!
//! One binary, several personalities chosen by the name it was started under
//! ([`dispatch`]). Each personality is a library function that returns an
//! exit code; `main.rs` only calls [`dispatch::process_main`].

pub mod apply_patch;
pub mod cli;
pub mod context;
pub mod dispatch;
pub mod exec;
pub mod exit_code;
pub mod logging;
pub mod output;
pub mod path_guard;
pub mod plan;
pub mod registry;
pub mod result;
pub mod sandbox;
pub mod scheduler;
pub mod serve;
pub mod stdio;
pub mod sync;
