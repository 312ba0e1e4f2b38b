//! The `agent-reach-sandbox` personality and `agent-reach sandbox`: parse the
//! flags, then confine this process and exec the command ([`super::confine`]).

use std::path::PathBuf;

use crate::context::ProcessContext;
use crate::exit_code;

use super::args::{self, REPORT_VAR};

/// Confines the command, then execs it; returns only on failure.
pub(crate) fn main(ctx: &ProcessContext) -> i32 {
    let report_env = ctx
        .var(REPORT_VAR)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    let request = match args::parse(&ctx.args, report_env) {
        Ok(request) => request,
        Err(err) => return usage_exit(&err),
    };
    run(ctx, &request)
}

#[cfg(target_os = "linux")]
fn run(ctx: &ProcessContext, request: &args::SandboxRequest) -> i32 {
    let err = super::confine::confine_and_exec(ctx, request);
    eprintln!("agent-reach-sandbox: {err}");
    err.exit_code()
}

/// Landlock and seccomp exist only on Linux.
#[cfg(not(target_os = "linux"))]
fn run(_ctx: &ProcessContext, _request: &args::SandboxRequest) -> i32 {
    eprintln!("agent-reach-sandbox: sandboxing needs Linux (Landlock and seccomp)");
    exit_code::INTERNAL
}

fn usage_exit(err: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    let _ = err.print();
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => exit_code::SUCCESS,
        _ => exit_code::INTERNAL,
    }
}
