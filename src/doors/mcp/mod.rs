//! MCP, the door agents connect to: the tools (`exec_command`,
//! `write_stdin`, `apply_patch`, the registry's), the session table behind
//! them, and the replies. Served on stdio by `serve` (its lifecycle lives in
//! `crate::serve`) and over streamable HTTP by `super::mcp_http`.
//!
//! An adapter like the other doors: it plans, starts and dispatches through
//! the broker, whose plan asks a person where one must approve (MCP
//! elicitation, [`approval`]); what stays here is MCP's own: the tools'
//! shapes, each client's table of sessions with their output windows
//! ([`table`], their seats taken in the broker's one session table), and
//! the replies.

pub(crate) mod approval;
pub(crate) mod client;
pub(crate) mod lenient;
pub(crate) mod portable;
pub(crate) mod reply;
pub(crate) mod server;
pub(crate) mod session;
pub(crate) mod table;
pub(crate) mod tool_params;
pub(crate) mod tools;
pub(crate) mod yields;
