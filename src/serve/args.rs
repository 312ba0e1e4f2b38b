//! The flags of `agent-reach serve`: the registry source, logging, limits,
//! and the network listeners with their auth (`--listen`, `--token-file`,
//! `--no-auth`, ...). `serve` owns them; the CLI only embeds them.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::plan::source::RegistryArgs;
use crate::sandbox::Policy;

use super::listen::DEFAULT_MAX_SESSIONS_PER_CLIENT;
pub(crate) use super::listen::args::ListenArgs;
use crate::broker::sessions::DEFAULT_MAX_SESSIONS;

/// What `serve` speaks on stdio (`--stdio`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum StdioProtocol {
    /// MCP, for agents that start agent-reach as their MCP server.
    #[default]
    Mcp,
    /// Codex's exec-server, for a Codex environment entry.
    CodexExec,
}

/// `serve` arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
    #[command(flatten)]
    pub(crate) listeners: ListenArgs,
    /// What stdio speaks when no --listen is given: mcp (MCP, the default)
    /// or codex-exec (Codex's exec-server, one JSON-RPC message per line).
    #[arg(long, value_name = "PROTOCOL", value_enum, default_value_t = StdioProtocol::Mcp)]
    pub(crate) stdio: StdioProtocol,
    /// The sandbox of every raw command and of every tool without its own
    /// (overrides the registry's `[sandbox] default`).
    #[arg(long, value_name = "POLICY")]
    pub(crate) sandbox: Option<Policy>,
    /// How many live sessions one client may hold at once, counted across
    /// every door.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_SESSIONS_PER_CLIENT, value_parser = clap::value_parser!(usize))]
    pub(crate) max_sessions_per_client: usize,
    /// The sandbox id the `daytona` listener answers to (`GET
    /// /api/sandbox/ID`, `/toolbox/ID/...`); other ids are 404.
    #[arg(long, value_name = "ID", default_value = crate::doors::daytona::DEFAULT_SANDBOX_ID, value_parser = parse_sandbox_id)]
    pub(crate) sandbox_id: String,
    /// Write the JSON log lines to this file (appended) instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub(crate) log_file: Option<PathBuf>,
    /// How many live sessions (MCP sessions, gRPC Start streams, SWE-ReX
    /// bash sessions, ...) may live at once across every door; an MCP
    /// client at its share gives up its exited, then least recently used
    /// ones (never its 8 most recent).
    #[arg(long, default_value_t = DEFAULT_MAX_SESSIONS as u64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) max_sessions: u64,
    /// Serve the metrics in the Prometheus text format over HTTP on this
    /// loopback address (e.g. 127.0.0.1:9464); other addresses are refused.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// A variable of the server's environment that `sandboxd-rest`'s
    /// `/v1/metadata` shows (repeatable); no other is ever shown.
    #[arg(long, value_name = "NAME", default_values_t = crate::doors::sandboxd_rest::DEFAULT_METADATA_ENV.map(String::from))]
    pub(crate) metadata_env: Vec<String>,
}

/// `--sandbox-id`: one URL path segment (letters, digits, `-`, `_`, `.`).
fn parse_sandbox_id(value: &str) -> Result<String, String> {
    if crate::doors::daytona::valid_sandbox_id(value) {
        Ok(value.to_owned())
    } else {
        Err(format!(
            "{value:?} is not a sandbox id: use letters, digits, '-', '_' and '.'"
        ))
    }
}
