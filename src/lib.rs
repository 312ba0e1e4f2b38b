//! agent-reach: the execution layer for AI coding agents.
//!
//! One binary, several personalities chosen by the name it was started under
//! ([`dispatch`]). Each personality is a library function that returns an
//! exit code; `main.rs` only calls [`dispatch::process_main`].

#![warn(unreachable_pub)]

pub mod apply_patch;
pub(crate) mod broker;
pub(crate) mod cli;
pub(crate) mod context;
pub mod dispatch;
pub mod doors;
pub mod exec;
pub(crate) mod exit_code;
pub(crate) mod gate;
pub(crate) mod kernel_file;
pub(crate) mod logging;
pub mod output;
pub mod path_guard;
pub(crate) mod personality;
pub(crate) mod plan;
pub(crate) mod registry;
pub mod result;
pub mod sandbox;
pub(crate) mod scheduler;
pub mod serve;
pub(crate) mod stdio;
pub(crate) mod sync;
pub(crate) mod workspace;
