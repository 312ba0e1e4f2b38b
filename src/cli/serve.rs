//! `agent-reach serve`: the MCP server on stdio (the flags; the server itself
//! is [`crate::serve`]).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::cli::registry_args::RegistryArgs;
use crate::context::ProcessContext;

/// `serve` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Write the JSON log lines to this file (appended) instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// How many sessions may live at once; when full, exited then least
    /// recently used ones are killed (never the 8 most recent).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_sessions: u64,
    /// Serve the metrics in the Prometheus text format over HTTP on this
    /// loopback address (e.g. 127.0.0.1:9464); other addresses are refused.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
}

/// `agent-reach serve ...`.
pub fn main(args: ServeArgs, ctx: ProcessContext) -> i32 {
    crate::serve::main(args, ctx)
}
