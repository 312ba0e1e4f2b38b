//! The normal command-line interface: `agent-reach SUBCOMMAND ...`.
//!
//! clap turns the arguments into one of the subcommands the contract lists;
//! each subcommand is its own module and returns an exit code. Subcommands
//! that run commands for others first set up the session ([`session`]),
//! still on the single dispatch thread.

pub(crate) mod completions;
pub(crate) mod doctor;
pub(crate) mod exec;
pub(crate) mod man;
mod nofile;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod shell;
pub(crate) mod tools;

use std::ffi::OsString;

use clap::{Parser, Subcommand};

use crate::context::ProcessContext;
use crate::exit_code;

/// agent-reach: the execution layer for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "agent-reach", version, about, long_about = None, after_help = EXIT_STATUS)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The end of `agent-reach --help` and of the man page.
const EXIT_STATUS: &str = "\
Exit status:
  0  success
  1  failure: a bad patch, a check that found problems, a failed request,
     a probe the configuration needs that failed (doctor)
  2  bad usage: bad flags, a missing or unreadable file or directory named
     on the command line, a bad config
  run, sandbox and exec have their own codes: see their --help.";

/// The subcommands of the contract.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run one command through the exec engine.
    Run(run::RunArgs),
    /// One JSON request on stdin (--json), or many, one per line (--jsonl).
    Exec(exec::ExecArgs),
    /// MCP server on stdio.
    Serve(serve::ServeArgs),
    /// Run CMD (default $SHELL) with the session PATH entry first.
    Shell(shell::ShellArgs),
    /// Confine a command with Landlock and seccomp, then exec it.
    #[command(disable_help_flag = true)]
    Sandbox(PassThroughArgs),
    /// Apply a patch (argument or stdin).
    #[command(name = "apply-patch", disable_help_flag = true)]
    ApplyPatch(PassThroughArgs),
    /// Inspect and check the tool registry.
    Tools(tools::ToolsArgs),
    /// What this machine supports.
    Doctor(doctor::DoctorArgs),
    /// Print a completion script for the shell.
    Completions(completions::CompletionsArgs),
    /// Print the man page (or write every page into --out-dir).
    #[command(hide = true)]
    Man(man::ManArgs),
}

/// Arguments handed unparsed to a personality that parses its own.
#[derive(Debug, clap::Args)]
pub(crate) struct PassThroughArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub(crate) args: Vec<OsString>,
}

/// Parses the CLI arguments and runs the subcommand.
pub(crate) fn main(ctx: ProcessContext) -> i32 {
    if let [only] = ctx.args.as_slice()
        && (only == "--version" || only == "-V")
    {
        // What clap prints for `--version`, without building the whole
        // command tree first (the binary's own start, issue 42).
        println!("agent-reach {}", env!("CARGO_PKG_VERSION"));
        return exit_code::SUCCESS;
    }
    if ctx.args.first().is_some_and(|first| first == "run") {
        // The latency-critical subcommand: parsing it alone builds one
        // subcommand's definition instead of the whole tree.
        let argv = std::iter::once(OsString::from("agent-reach run"))
            .chain(ctx.args.iter().skip(1).cloned());
        return match run::RunCli::try_parse_from(argv) {
            Ok(cli) => run::main(cli.run, ctx),
            Err(err) => clap_error_exit(&err, exit_code::INTERNAL),
        };
    }
    let argv = std::iter::once(OsString::from("agent-reach")).chain(ctx.args.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(err) => return clap_error_exit(&err, usage_error_code(&ctx)),
    };
    match cli.command {
        Command::Run(args) => run::main(args, ctx),
        Command::Exec(args) => {
            nofile::raise_to_hard_limit();
            exec::main(args, ctx)
        }
        Command::Serve(args) => {
            nofile::raise_to_hard_limit();
            serve::main(args, ctx)
        }
        Command::Shell(args) => shell::main(args, ctx),
        Command::Sandbox(pass) => crate::sandbox::command::main(&with_args(ctx, pass.args)),
        Command::ApplyPatch(pass) => crate::apply_patch::command::main(&with_args(ctx, pass.args)),
        Command::Tools(args) => tools::main(args, ctx),
        Command::Doctor(args) => doctor::main(args, &ctx),
        Command::Completions(args) => completions::main(&args),
        Command::Man(args) => man::main(&args),
    }
}

fn with_args(mut ctx: ProcessContext, args: Vec<OsString>) -> ProcessContext {
    ctx.args = args;
    ctx
}

/// `run` follows the exec engine's codes (125 for bad flags); the other
/// subcommands use the usual usage code 2.
fn usage_error_code(ctx: &ProcessContext) -> i32 {
    match ctx.args.first().and_then(|a| a.to_str()) {
        Some("run") => exit_code::INTERNAL,
        _ => exit_code::USAGE,
    }
}

/// Prints a clap error (or help/version) and returns the exit code for it.
pub(crate) fn clap_error_exit(err: &clap::Error, usage_code: i32) -> i32 {
    use clap::error::ErrorKind;
    let _ = err.print();
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => exit_code::SUCCESS,
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => usage_code,
        _ => usage_code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_fast_path_prints_what_clap_would() {
        use clap::CommandFactory;
        let clap = Cli::command().render_version();
        assert_eq!(clap, format!("agent-reach {}\n", env!("CARGO_PKG_VERSION")));
    }
}
