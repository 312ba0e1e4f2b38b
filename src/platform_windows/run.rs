//! `agent-reach run`, the `agent-reach-exec` personality and
//! `agent-reach exec --json` on Windows: one command through the Windows
//! engine, with the same flags, exit codes and normalized result as on
//! Linux.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::conpty;
use super::engine::{Completed, Execution, Spec};
use super::operator::{Operator, ToolRun};
use super::path_entry::session_context;
use super::{FULL_ACCESS, NO_SANDBOX};
use crate::context::ProcessContext;
use crate::exit_code;
use crate::output::highlights::Found;
use crate::output::{DEFAULT_MAX_OUTPUT_TOKENS, RenderOptions};
use crate::plan::Door;
use crate::plan::registry_args::RegistryArgs;
use crate::registry::kinds;
use crate::result::{FullOutputPaths, NormalizedResult, OriginalBytes, ResultError, Status};

/// The command timeout when none is given (as on Linux).
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request `exec --json` reads.
pub(crate) const MAX_REQUEST_BYTES: u64 = 16 << 20;

/// `run` arguments: the Linux flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RunArgs {
    /// Kill the command after this many milliseconds (exit 124); 0 = never.
    #[arg(long, default_value_t = DEFAULT_COMMAND_TIMEOUT.as_millis() as u64)]
    pub(crate) timeout_ms: u64,
    /// Working directory of the command.
    #[arg(long)]
    pub(crate) workdir: Option<PathBuf>,
    /// A pseudo console (ConPTY); where there is none (Wine, Windows before
    /// 10 1809) the command runs on pipes and says so.
    #[arg(long)]
    pub(crate) tty: bool,
    /// Fold the output to about this many tokens (4 bytes each).
    #[arg(long, default_value_t = DEFAULT_MAX_OUTPUT_TOKENS)]
    pub(crate) max_output_tokens: usize,
    /// Only danger-full-access: there is no sandbox on Windows.
    #[arg(long, value_name = "POLICY")]
    pub(crate) sandbox: Option<String>,
    /// Print the normalized result as JSON instead of the text form.
    #[arg(long)]
    pub(crate) json: bool,
    /// Pass one more environment variable: NAME=VALUE (the environment is
    /// inherited on Windows).
    #[arg(long = "env", value_name = "NAME=VALUE")]
    pub(crate) env: Vec<String>,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, clap::Parser)]
#[command(
    name = "agent-reach-exec",
    version,
    about = "Run one command through the agent-reach exec engine"
)]
struct ExecCli {
    #[command(flatten)]
    run: RunArgs,
}

/// `exec` arguments.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("mode").required(true).multiple(false).args(["json", "jsonl"])))]
pub(crate) struct ExecArgs {
    /// One JSON request on stdin, one JSON result on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Many requests, one per line; results as they finish.
    #[arg(long)]
    pub(crate) jsonl: bool,
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
}

/// The `agent-reach-exec` personality.
pub(crate) fn exec_personality(ctx: ProcessContext) -> i32 {
    let argv = std::iter::once(OsString::from("agent-reach-exec")).chain(ctx.args.iter().cloned());
    match <ExecCli as clap::Parser>::try_parse_from(argv) {
        Ok(cli) => main(&cli.run, &ctx),
        Err(err) => {
            let _ = err.print();
            match err.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    exit_code::SUCCESS
                }
                _ => exit_code::INTERNAL,
            }
        }
    }
}

/// One command to run, checked.
#[derive(Debug, Clone)]
pub(crate) struct Command {
    pub(crate) argv: Vec<OsString>,
    pub(crate) workdir: Option<PathBuf>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) env: Vec<(OsString, OsString)>,
    /// See [`Spec::verbatim_args`].
    pub(crate) verbatim_args: bool,
    /// A pseudo console, already granted ([`super::conpty::grant`]).
    pub(crate) tty: bool,
}

/// Why a request cannot run here.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("{NO_SANDBOX}")]
    Sandbox,
    #[error("--env needs NAME=VALUE, got {0:?}")]
    BadEnv(String),
    #[error("the working directory {path:?} cannot be used: {source}")]
    Workdir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("agent-reach's own variables cannot be set: {0}")]
    Reserved(String),
}

/// Refuses every sandbox but danger-full-access.
pub(crate) fn check_sandbox(policy: Option<&str>) -> Result<(), Refusal> {
    match policy {
        None | Some(FULL_ACCESS) => Ok(()),
        Some(_) => Err(Refusal::Sandbox),
    }
}

/// The spec for `command` in this process's context.
pub(crate) fn spec_for(
    command: Command,
    ctx: &ProcessContext,
    merged: bool,
    stdin_pipe: bool,
) -> Result<Spec, Refusal> {
    let base = ctx
        .cwd()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|_| PathBuf::from("."));
    let cwd = match command.workdir {
        Some(dir) => base.join(dir),
        None => base,
    };
    let cwd = std::fs::canonicalize(&cwd)
        .map(strip_verbatim)
        .map_err(|source| Refusal::Workdir {
            path: cwd.clone(),
            source,
        })?;
    let mut env: BTreeMap<OsString, OsString> = ctx.env.clone();
    for (name, value) in command.env {
        if name
            .to_string_lossy()
            .to_ascii_uppercase()
            .starts_with("AGENT_REACH_")
        {
            return Err(Refusal::Reserved(name.to_string_lossy().into_owned()));
        }
        env.retain(|k, _| !k.eq_ignore_ascii_case(&name));
        env.insert(name, value);
    }
    Ok(Spec {
        argv: command.argv,
        cwd,
        env,
        timeout: command.timeout,
        merged,
        stdin_pipe,
        verbatim_args: command.verbatim_args,
        tty: command.tty,
        home: ctx.agent_reach_home(),
        label: format!("run-{}", std::process::id()),
        secrets: Vec::new(),
    })
}

/// `\\?\C:\dir` (what canonicalize gives) as `C:\dir`, which every program
/// takes as its working directory.
pub(crate) fn strip_verbatim(path: PathBuf) -> PathBuf {
    let text = path.to_string_lossy();
    match text.strip_prefix(r"\\?\") {
        Some(rest) if !rest.starts_with("UNC\\") => PathBuf::from(rest),
        _ => path,
    }
}

fn timeout_from_ms(ms: u64) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(ms))
}

fn parse_env(flags: &[String]) -> Result<Vec<(OsString, OsString)>, Refusal> {
    flags
        .iter()
        .map(|flag| match flag.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.into(), value.into())),
            _ => Err(Refusal::BadEnv(flag.clone())),
        })
        .collect()
}

/// `agent-reach run ...`.
pub(crate) fn main(args: &RunArgs, ctx: &ProcessContext) -> i32 {
    let (_entry, ctx) = match session_context(ctx) {
        Ok(ready) => ready,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return exit_code::INTERNAL;
        }
    };
    let ctx = &ctx;
    let (tty, tty_note) = conpty::grant(args.tty);
    let prepared = check_sandbox(args.sandbox.as_deref())
        .and_then(|()| parse_env(&args.env))
        .and_then(|env| {
            spec_for(
                Command {
                    argv: args.command.clone(),
                    workdir: args.workdir.clone(),
                    timeout: timeout_from_ms(args.timeout_ms),
                    env,
                    verbatim_args: false,
                    tty,
                },
                ctx,
                false,
                false,
            )
        });
    let spec = match prepared {
        Ok(spec) => spec,
        Err(refusal) => {
            eprintln!("agent-reach: {refusal}");
            if args.json {
                let result = NormalizedResult::refused(
                    None,
                    None,
                    Status::Rejected,
                    "rejected",
                    refusal.to_string(),
                );
                print_json(&result);
            }
            return exit_code::INTERNAL;
        }
    };
    if let Some(note) = &tty_note {
        eprintln!("agent-reach: {note}");
    }
    let opts = RenderOptions {
        max_output_tokens: args.max_output_tokens,
        keep_color: false,
    };
    let execution = match Execution::spawn(&spec) {
        Ok(execution) => execution,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            if args.json {
                print_json(&NormalizedResult::refused(
                    None,
                    None,
                    Status::Error,
                    "spawn_failed",
                    err.to_string(),
                ));
            }
            return err.exit_code();
        }
    };
    let completed = execution.finish(&opts);
    if args.json {
        print_json(&to_result(&completed, None));
        return completed.exit.exit_code();
    }
    let _ = crate::stdio::write_stdout(completed.stdout.text.as_bytes());
    eprint!("{}", completed.stderr.text);
    if let Some(note) = &completed.decoding_note {
        eprintln!("agent-reach: {note}");
    }
    if completed.exit.timed_out {
        eprintln!(
            "agent-reach: killed at the command timeout ({} ms); exit 124",
            args.timeout_ms
        );
    }
    completed.exit.exit_code()
}

/// The normalized result of a finished command.
pub(crate) fn to_result(completed: &Completed, id: Option<Value>) -> NormalizedResult {
    let status = if completed.exit.timed_out {
        Status::Timeout
    } else if completed.exit.code == 0 {
        Status::Success
    } else {
        Status::Failure
    };
    let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.to_string_lossy().into_owned());
    let mut stderr = completed.stderr.text.clone();
    if let Some(note) = &completed.decoding_note {
        stderr.push_str(&format!("agent-reach: {note}\n"));
    }
    NormalizedResult {
        id,
        tool: None,
        status,
        exit_code: Some(completed.exit.exit_code()),
        signal: None,
        stdout: completed.stdout.text.clone(),
        stderr,
        duration_ms: u64::try_from(completed.duration.as_millis()).unwrap_or(u64::MAX),
        truncated: completed.stdout.truncated || completed.stderr.truncated,
        original_bytes: OriginalBytes {
            stdout: completed.stdout.original_bytes,
            stderr: completed.stderr.original_bytes,
        },
        full_output_path: path(&completed.spill_paths[0])
            .or_else(|| path(&completed.spill_paths[1])),
        full_output_paths: FullOutputPaths {
            stdout: path(&completed.spill_paths[0]),
            stderr: path(&completed.spill_paths[1]),
        },
        sandbox: None,
        cached: false,
        error: (status == Status::Timeout).then(|| ResultError::timeout(None, Vec::new())),
        capped: Vec::new(),
        highlights: crate::result::highlights_for(
            status,
            &Found::of_streams(&completed.stdout.highlights, &completed.stderr.highlights).select(),
        ),
    }
}

fn print_json(result: &NormalizedResult) {
    match serde_json::to_string_pretty(result) {
        Ok(mut text) => {
            text.push('\n');
            let _ = crate::stdio::write_stdout(text.as_bytes());
        }
        Err(err) => eprintln!("agent-reach: cannot encode the result: {err}"),
    }
}

/// `agent-reach exec --json`: one request on stdin (a registry `tool` with
/// its `args`, or a `command`; `workdir`, `timeout_ms`, `max_output_tokens`,
/// `approve`, `id`), one result on stdout; exit 0 when the status is
/// success, 1 otherwise (2 or 125 when the registry cannot be used).
pub(crate) fn exec_json(args: &ExecArgs, ctx: &ProcessContext) -> i32 {
    let (_entry, ctx) = match session_context(ctx) {
        Ok(ready) => ready,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return exit_code::INTERNAL;
        }
    };
    let operator = match Operator::load(&args.registry, &ctx) {
        Ok(operator) => operator,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return err.code;
        }
    };
    let ctx = &operator.child_context(&ctx);
    let mut text = String::new();
    if let Err(err) = std::io::stdin()
        .take(MAX_REQUEST_BYTES)
        .read_to_string(&mut text)
    {
        eprintln!("agent-reach: cannot read the request: {err}");
        return exit_code::USAGE;
    }
    let result = answer(&text, ctx, &operator, |_| {});
    print_json(&result);
    if result.status == Status::Success {
        exit_code::SUCCESS
    } else {
        exit_code::FAILURE
    }
}

/// The result of the request `text` (one JSON object), run to its end;
/// `started` sees the command once it runs (to end it early).
pub(crate) fn answer(
    text: &str,
    ctx: &ProcessContext,
    operator: &Operator,
    started: impl FnOnce(&Execution),
) -> NormalizedResult {
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) => return malformed(None, format!("the request is not valid JSON: {e}")),
    };
    if value.get("tool").is_some() {
        return match operator.tool_run(&value) {
            Ok(run) => run_tool(run, ctx, started),
            Err(refused) => refused,
        };
    }
    let (id, mut command, max_output_tokens, tty_note, approve) = match request_from_json(&value) {
        Ok(parsed) => parsed,
        Err((id, message)) => return malformed(id, message),
    };
    if let Err(rejection) = operator.admit_raw(&mut command, Door::Exec, approve) {
        return NormalizedResult::refused(
            id,
            None,
            rejection.status,
            rejection.kind,
            rejection.message,
        );
    }
    // `[limits]` caps what any caller asks, at every door.
    let mut capped: Vec<String> = operator
        .cap_timeout(&mut command, true)
        .map(|c| c.name.to_owned())
        .into_iter()
        .collect();
    let (max_output_tokens, token_cap) = operator.cap_tokens(max_output_tokens);
    if let Some(cap) = token_cap {
        capped.push(cap.name.to_owned());
    }
    let mut result = run_request(id, command, max_output_tokens, ctx, None, started);
    result.capped = capped;
    if let Some(note) = tty_note {
        result.stderr.push_str(&format!("agent-reach: {note}\n"));
    }
    result
}

/// Runs a registry tool's resolved command to its end: its secrets in its
/// environment and redacted from its output, its tty note (when its tty
/// runs on pipes) on its stderr.
pub(crate) fn run_tool(
    run: ToolRun,
    ctx: &ProcessContext,
    started: impl FnOnce(&Execution),
) -> NormalizedResult {
    let tokens = run.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
    let tool = Some((run.name, run.secrets));
    let mut result = run_request(run.id, run.command, tokens, ctx, tool, started);
    result.capped = run.capped;
    if let Some(note) = run.tty_note {
        result.stderr.push_str(&format!("agent-reach: {note}\n"));
    }
    result
}

/// The `rejected` result of a request that cannot be read.
pub(crate) fn malformed(id: Option<Value>, message: String) -> NormalizedResult {
    NormalizedResult::refused(
        id,
        None,
        Status::Rejected,
        kinds::MALFORMED_REQUEST,
        message,
    )
}

/// A raw command request: its id, its command, its token budget, the line
/// saying its tty runs on pipes (when it does), and its `approve`.
type ParsedRequest = (Option<Value>, Command, usize, Option<String>, bool);

fn request_from_json(value: &Value) -> Result<ParsedRequest, (Option<Value>, String)> {
    let id = value.get("id").cloned().filter(|v| !v.is_null());
    let fail = |message: &str| (id.clone(), message.to_owned());
    if value
        .get("sandbox")
        .and_then(Value::as_str)
        .is_some_and(|p| p != FULL_ACCESS)
    {
        return Err(fail(NO_SANDBOX));
    }
    let argv: Vec<OsString> = value
        .get("command")
        .and_then(Value::as_array)
        .and_then(|items| {
            items
                .iter()
                .map(|v| v.as_str().map(OsString::from))
                .collect::<Option<Vec<_>>>()
        })
        .filter(|argv| !argv.is_empty())
        .ok_or_else(|| fail("`command` must be a non-empty list of strings"))?;
    let timeout = match value.get("timeout_ms").and_then(Value::as_u64) {
        Some(ms) => timeout_from_ms(ms),
        None => Some(DEFAULT_COMMAND_TIMEOUT),
    };
    let max_output_tokens = value
        .get("max_output_tokens")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_MAX_OUTPUT_TOKENS, |n| n as usize);
    let workdir = value
        .get("workdir")
        .and_then(Value::as_str)
        .map(PathBuf::from);
    let (tty, tty_note) = conpty::grant(value.get("tty").and_then(Value::as_bool) == Some(true));
    let approve = value.get("approve").and_then(Value::as_bool) == Some(true);
    Ok((
        id,
        Command {
            argv,
            workdir,
            timeout,
            env: Vec::new(),
            verbatim_args: false,
            tty,
        },
        max_output_tokens,
        tty_note,
        approve,
    ))
}

/// Runs a request's command: `tool` is the registry tool's name and its
/// secrets (redacted from the output), for a tool request.
fn run_request(
    id: Option<Value>,
    command: Command,
    max_output_tokens: usize,
    ctx: &ProcessContext,
    tool: Option<(String, Vec<(String, Vec<u8>)>)>,
    started: impl FnOnce(&Execution),
) -> NormalizedResult {
    let (name, secrets) = tool.unzip();
    let mut spec = match spec_for(command, ctx, false, false) {
        Ok(spec) => spec,
        Err(refusal) => {
            return NormalizedResult::refused(
                id,
                name,
                Status::Rejected,
                "rejected",
                refusal.to_string(),
            );
        }
    };
    spec.secrets = secrets.unwrap_or_default();
    match Execution::spawn(&spec) {
        Ok(execution) => {
            started(&execution);
            let opts = RenderOptions {
                max_output_tokens,
                keep_color: false,
            };
            let mut result = to_result(&execution.finish(&opts), id);
            result.tool = name;
            result
        }
        Err(err) => NormalizedResult::refused(
            id,
            name,
            Status::Error,
            kinds::SPAWN_FAILED,
            err.to_string(),
        ),
    }
}
