//! `agent-reach serve`: the MCP server agents connect to.
//!
//! A session table ([`table`]) on top of the exec engine, served with the
//! official Rust SDK (rmcp) on stdio. stdout is the protocol and nothing else
//! ever goes there; logs are JSON lines on stderr or `--log-file`.

pub mod lenient;
pub mod params;
pub mod procfs;
pub mod reply;
pub mod table;
