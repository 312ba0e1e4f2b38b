//! The Windows platform: the engine's backend (a job object per command,
//! `CreateProcessW`, pipes drained by threads, code pages) and the
//! personalities built on it. Linux's backend (cgroups, clone3, pidfd,
//! `/proc`, Landlock, seccomp) and what needs it are `cfg(unix)` in
//! `lib.rs`; this module is what Windows has beside them:
//!
//! - `run`, the `agent-reach-exec` personality and `exec --json` ([`run`]),
//!   `exec --jsonl` ([`jsonl`]), with the registry's tools and policy
//!   ([`operator`], on the shared plan stage);
//! - `serve`: the MCP server with the registry's tools, on stdio or over
//!   streamable HTTP behind the gate (`--listen mcp=HOST:PORT`) ([`mcp`]);
//! - `apply_patch` / `applypatch` / `agent-reach apply-patch` (the shared
//!   [`crate::apply_patch`], CRLF files kept CRLF);
//! - the session PATH entry with `.exe` copies and `.cmd` shims
//!   ([`path_entry`]);
//! - `tools list|show|check|schema` (the registry, the shared
//!   `crate::cli::tools`);
//! - `doctor`, saying what works here;
//! - no sandbox yet: `agent-reach-sandbox`, `--sandbox` other than
//!   `danger-full-access` and sandboxed MCP calls exit 125 / are refused
//!   ([`NO_SANDBOX`]) instead of running unconfined.

pub(crate) mod codepage;
pub(crate) mod conpty;
pub(crate) mod console;
pub(crate) mod engine;
pub(crate) mod job;
pub(crate) mod jsonl;
pub(crate) mod locate;
pub(crate) mod mcp;
pub(crate) mod operator;
pub(crate) mod path_entry;
pub(crate) mod process;
pub(crate) mod run;
/// `agent-reach tools list|show|check|schema`: the same file as on Linux
/// (the registry loads and is inspected the same way everywhere; only the
/// rest of `crate::cli` is Linux's).
#[path = "../cli/tools.rs"]
pub(crate) mod tools;

use std::ffi::OsString;

use clap::{Parser, Subcommand};

use crate::context::ProcessContext;
use crate::exit_code;
use crate::personality::Personality;

/// What every sandbox request gets on Windows.
pub(crate) const NO_SANDBOX: &str = "no sandbox on Windows: only --sandbox danger-full-access can run (the command would run unconfined)";

/// The one sandbox policy Windows can honour.
pub(crate) const FULL_ACCESS: &str = "danger-full-access";

/// Runs one personality to its exit code.
pub(crate) fn run_personality(personality: Personality, ctx: ProcessContext) -> i32 {
    console::use_utf8_console();
    match personality {
        Personality::ApplyPatch => crate::apply_patch::command::main(&ctx),
        Personality::Sandbox => refuse_sandbox(),
        Personality::Exec => run::exec_personality(ctx),
        Personality::SwerexRemote => {
            eprintln!("swerex-remote: not available on Windows (its sessions need a Unix shell)");
            exit_code::INTERNAL
        }
        Personality::Cli => cli_main(ctx),
    }
}

/// The function `name` of `module`, a DLL every process has loaded
/// (kernel32, ntdll), when it exports one.
pub(crate) fn loaded_function(
    module: &str,
    name: &std::ffi::CStr,
) -> Option<unsafe extern "system" fn() -> isize> {
    use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
    let wide: Vec<u16> = module.encode_utf16().chain(std::iter::once(0)).collect();
    // SAFETY: a NUL-terminated name; the handle of a loaded module is not
    // freed (GetModuleHandleW takes no reference).
    let handle = unsafe { GetModuleHandleW(wide.as_ptr()) };
    if handle.is_null() {
        return None;
    }
    // SAFETY: a valid module handle and a NUL-terminated ANSI name.
    unsafe { GetProcAddress(handle, name.as_ptr().cast()) }
}

/// `agent-reach-sandbox` and `agent-reach sandbox`: refused, exit 125.
pub(crate) fn refuse_sandbox() -> i32 {
    eprintln!("agent-reach-sandbox: {NO_SANDBOX}");
    exit_code::INTERNAL
}

/// agent-reach on Windows.
#[derive(Debug, Parser)]
#[command(name = "agent-reach", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one command through the exec engine.
    Run(run::RunArgs),
    /// One JSON request on stdin (--json).
    Exec(run::ExecArgs),
    /// MCP server on stdio.
    Serve(mcp::ServeArgs),
    /// The registry: list, show, check, schema.
    Tools(tools::ToolsArgs),
    /// No sandbox on Windows: exits 125.
    #[command(disable_help_flag = true)]
    Sandbox(PassThrough),
    /// Apply a patch (argument or stdin).
    #[command(name = "apply-patch", disable_help_flag = true)]
    ApplyPatch(PassThrough),
    /// What works on this platform.
    Doctor,
}

#[derive(Debug, clap::Args)]
struct PassThrough {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<OsString>,
}

fn cli_main(mut ctx: ProcessContext) -> i32 {
    let argv = std::iter::once(OsString::from("agent-reach")).chain(ctx.args.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            let usage = if ctx.args.first().is_some_and(|a| a == "run") {
                exit_code::INTERNAL
            } else {
                exit_code::USAGE
            };
            return match err.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    exit_code::SUCCESS
                }
                _ => usage,
            };
        }
    };
    match cli.command {
        Command::Run(args) => run::main(&args, &ctx),
        Command::Exec(args) if args.jsonl => jsonl::main(&args, &ctx),
        Command::Exec(args) => run::exec_json(&args, &ctx),
        Command::Serve(args) => mcp::main(&args, &ctx),
        Command::Tools(args) => tools::main(args, ctx),
        Command::Sandbox(_) => refuse_sandbox(),
        Command::ApplyPatch(pass) => {
            ctx.args = pass.args;
            crate::apply_patch::command::main(&ctx)
        }
        Command::Doctor => crate::stdio::print_or_failure(&doctor()),
    }
}

/// `agent-reach doctor` on Windows.
fn doctor() -> String {
    let tty = match conpty::unavailable() {
        None => "ok    tty: a pseudo console (ConPTY) per command, in its job".to_owned(),
        Some(why) => format!("no    tty: {why}; tty requests run on pipes and say so"),
    };
    format!(
        "\
agent-reach doctor (Windows)
  ok    exec engine: CreateProcessW into a job object (kill-on-close); the timeout (124) and kill_session end the whole tree
  ok    output: the Linux pipeline (clean-up, fold, spill); non-UTF-8 output decoded from the child's code page
  ok    console code page 65001 when there is a console
  ok    MCP over stdio (serve): the five built-in tools and the registry's, under the operator's policy; a person asked to approve (elicitation)
  ok    run, exec --json and --jsonl, apply_patch (CRLF kept)
  ok    session PATH entry: apply_patch.exe, applypatch.exe, agent-reach-exec.exe and .cmd shims
  no    sandbox: none on Windows; anything but danger-full-access exits 125
  {tty}
  ok    the registry: tools list, show, check and schema; exec --json, --jsonl and serve run its tools under the operator's policy (--config, --profile, --root); the built-in file tools are dir, type and findstr
  ok    serve --listen mcp=HOST:PORT: MCP over streamable HTTP behind the gate (token from $AGENT_REACH_TOKEN, Host, Origin, content types, connection bounds)
  no    the other listeners (sandboxd, python-runtime, swerex, envd, daytona, codex-exec) and the scheduler: Linux only for now
"
    )
}
