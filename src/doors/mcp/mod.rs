//! MCP, the door agents connect to: the tools (`exec_command`,
//! `write_stdin`, `apply_patch`, the registry's), the session table behind
//! them, and the replies. Served on stdio by `serve` (its lifecycle lives in
//! `crate::serve`) and over streamable HTTP by `super::mcp_http`.
//!
//! Not yet an adapter like the network doors: it plans with a person's
//! approval (MCP elicitation, `approval`) and keeps its own table of
//! sessions with their output windows, so it still holds the dispatcher and
//! spawns through the engine. Its live sessions take their seats in the
//! broker's one session table; the rest moves behind the broker next.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "MCP plans with elicitation and spawns itself until its planning moves behind the broker"
)]

pub(crate) mod approval;
pub(crate) mod client;
pub(crate) mod lenient;
pub(crate) mod reply;
pub(crate) mod server;
pub(crate) mod session;
pub(crate) mod session_ports;
pub(crate) mod table;
pub(crate) mod tool_params;
pub(crate) mod tools;
