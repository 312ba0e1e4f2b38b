//! `agent-reach tools list|show|check|schema`: the registry, inspected.

use std::path::PathBuf;

use crate::context::ProcessContext;

/// `tools` arguments.
#[derive(Debug, clap::Args)]
pub struct ToolsArgs {
    /// The registry file (default: the built-in registry).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Narrow the registry to one of its profiles.
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// The project root (default: the current directory).
    #[arg(long, global = true)]
    pub root: Option<PathBuf>,
    #[command(subcommand)]
    pub command: ToolsCommand,
}

/// What to do with the registry.
#[derive(Debug, clap::Subcommand)]
pub enum ToolsCommand {
    /// One line per tool.
    List,
    /// One tool in full.
    Show { name: String },
    /// Report every problem of a registry file, with file and line.
    Check { file: Option<PathBuf> },
    /// The tools as JSON schemas for function calling.
    Schema,
}

/// `agent-reach tools ...`.
pub fn main(_args: ToolsArgs, _ctx: ProcessContext) -> i32 {
    crate::stdio::not_available("agent-reach tools (the tool registry)")
}
