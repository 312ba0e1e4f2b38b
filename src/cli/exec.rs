//! `agent-reach exec --json|--jsonl`: requests on stdin, normalized results
//! on stdout, through the registry and the scheduler.

use std::path::PathBuf;

use crate::context::ProcessContext;

/// `exec` arguments.
#[derive(Debug, clap::Args)]
#[group(id = "mode", required = true, multiple = false)]
pub struct ExecArgs {
    /// One JSON request on stdin, one JSON result on stdout.
    #[arg(long, group = "mode")]
    pub json: bool,
    /// Many requests, one per line; results as they finish.
    #[arg(long, group = "mode")]
    pub jsonl: bool,
    /// The registry file (default: the built-in registry).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Narrow the registry to one of its profiles.
    #[arg(long)]
    pub profile: Option<String>,
    /// The project root (default: the current directory).
    #[arg(long)]
    pub root: Option<PathBuf>,
}

/// `agent-reach exec ...`.
pub fn main(_args: ExecArgs, _ctx: ProcessContext) -> i32 {
    crate::stdio::not_available("agent-reach exec (the tool registry)")
}
