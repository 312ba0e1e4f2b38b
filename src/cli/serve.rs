//! `agent-reach serve`: the MCP server on stdio.

use std::path::PathBuf;

use crate::context::ProcessContext;

/// `serve` arguments.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The registry file (default: the built-in registry).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Narrow the registry to one of its profiles.
    #[arg(long)]
    pub profile: Option<String>,
    /// Default working directory and the registry's project root.
    #[arg(long)]
    pub root: Option<PathBuf>,
}

/// `agent-reach serve ...`.
pub fn main(_args: ServeArgs, _ctx: ProcessContext) -> i32 {
    crate::stdio::not_available("agent-reach serve (the MCP server)")
}
