//! The doors: one module per wire protocol a remote caller speaks, each an
//! adapter that translates its requests into the broker's calls and the
//! broker's answers into its replies. A door never reaches the filesystem,
//! the planner or the engine but through the broker (`clippy.toml` says so
//! for this folder).

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod context;

pub(crate) use context::{DoorContext, serve_door};

pub(crate) mod codex_exec;
pub(crate) mod daytona;
pub(crate) mod envd;
pub(crate) mod mcp;
pub(crate) mod mcp_http;
pub(crate) mod python_runtime;
pub mod sandboxd_grpc;
pub(crate) mod sandboxd_rest;
pub(crate) mod swerex;
