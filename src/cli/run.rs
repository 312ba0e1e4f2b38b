//! `agent-reach run` and the `agent-reach-exec` personality: one command
//! through the exec engine, its exit code passed through.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::context::ProcessContext;

/// `run` arguments, as the contract fixes them.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Kill the command after this many milliseconds (exit 124); 0 = never.
    #[arg(long, default_value_t = 10_000)]
    pub timeout_ms: u64,
    /// Working directory of the command.
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// Run the command on a pseudo-terminal instead of pipes.
    #[arg(long)]
    pub tty: bool,
    /// Fold the output to about this many tokens (4 bytes each).
    #[arg(long, default_value_t = 10_000)]
    pub max_output_tokens: usize,
    /// Confine the command: read-only, workspace-write or danger-full-access.
    #[arg(long)]
    pub sandbox: Option<String>,
    /// Print the normalized result as JSON instead of the text form.
    #[arg(long)]
    pub json: bool,
    /// Pass one more environment variable: NAME (from our environment) or NAME=VALUE.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<OsString>,
}

/// `agent-reach run ...`.
pub fn main(_args: RunArgs, _ctx: ProcessContext) -> i32 {
    crate::stdio::not_available("agent-reach run (the exec engine)")
}

/// The `agent-reach-exec` personality: the same as `agent-reach run`.
pub fn exec_personality(_ctx: ProcessContext) -> i32 {
    crate::stdio::not_available("agent-reach-exec (the exec engine)")
}
