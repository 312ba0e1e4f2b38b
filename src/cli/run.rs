//! `agent-reach run` and the `agent-reach-exec` personality: one command
//! through the exec engine, its exit code passed through.
//!
//! The text form writes the command's cleaned, folded stdout to our stdout
//! and its stderr to our stderr (each folded on its own), so `run` drops in
//! where the bare command was; agent-reach's own notes (timeout, survivors)
//! go to stderr as `agent-reach: ...` lines. `--json` prints the normalized
//! result instead. Exit codes: the command's own, 124 at the timeout, 125
//! when agent-reach failed, 126/127 when the command could not be run or not
//! found, 128+N when it was killed by signal N.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

use crate::context::ProcessContext;
use crate::exec::interrupt::InterruptGuard;
use crate::exec::{self, Completed, ExecError, Execution};
use crate::exit_code;
use crate::path_guard::ProcessSession;
use crate::plan::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_MAX_OUTPUT_TOKENS, Door, Plan, Planner, PlannerConfig,
    Rejection, Request,
};
use crate::result::{NormalizedResult, Status};
use crate::sandbox::Policy;

/// `run` arguments, as the contract fixes them.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = exit_code::RUN_EXIT_STATUS)]
pub(crate) struct RunArgs {
    /// Kill the command after this many milliseconds (exit 124); 0 = never.
    #[arg(long, default_value_t = DEFAULT_COMMAND_TIMEOUT.as_millis() as u64)]
    pub(crate) timeout_ms: u64,
    /// Working directory of the command.
    #[arg(long)]
    pub(crate) workdir: Option<PathBuf>,
    /// Run the command on a pseudo-terminal instead of pipes.
    #[arg(long)]
    pub(crate) tty: bool,
    /// Fold the output to about this many tokens (4 bytes each).
    #[arg(long, default_value_t = DEFAULT_MAX_OUTPUT_TOKENS)]
    pub(crate) max_output_tokens: usize,
    /// Confine the command: read-only, workspace-write or danger-full-access.
    #[arg(long, value_name = "POLICY")]
    pub(crate) sandbox: Option<Policy>,
    /// Print the normalized result as JSON instead of the text form.
    #[arg(long)]
    pub(crate) json: bool,
    /// Pass one more environment variable: NAME (from our environment) or NAME=VALUE.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub(crate) env: Vec<String>,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// `agent-reach run` parsed on its own (see `cli::main`), and the
/// `agent-reach-exec` personality's command line.
#[derive(Debug, Parser)]
#[command(
    name = "agent-reach run",
    about = "Run one command through the exec engine"
)]
pub(crate) struct RunCli {
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// `agent-reach run ...`.
pub(crate) fn main(args: RunArgs, mut ctx: ProcessContext) -> i32 {
    let session = match ProcessSession::start(&mut ctx) {
        Ok(session) => session,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return exit_code::INTERNAL;
        }
    };
    // Every child of this process is the command's or an orphan of it.
    exec::spawner::claim_all_children();
    run(&args, &ctx, session)
}

/// The `agent-reach-exec` personality: the same as `agent-reach run`.
pub(crate) fn exec_personality(ctx: ProcessContext) -> i32 {
    let argv = std::iter::once(OsString::from("agent-reach-exec")).chain(ctx.args.iter().cloned());
    // The same options as `run`, under the personality's own name, with
    // --version as every personality has.
    let command = <RunCli as clap::CommandFactory>::command()
        .name("agent-reach-exec")
        .about("Run one command through the agent-reach exec engine")
        .version(env!("CARGO_PKG_VERSION"));
    let parsed = command
        .try_get_matches_from(argv)
        .and_then(|matches| <RunCli as clap::FromArgMatches>::from_arg_matches(&matches));
    match parsed {
        Ok(cli) => main(cli.run, ctx),
        Err(err) => super::clap_error_exit(&err, exit_code::INTERNAL),
    }
}

/// A bad `run` option, found before anything starts.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RunSetupError {
    #[error("--env needs NAME or NAME=VALUE, got {given:?}")]
    BadEnv { given: String },
    #[error("the current working directory cannot be used: {0}")]
    Cwd(std::io::Error),
    #[error("{0}")]
    Plan(Rejection),
    #[error("cannot block SIGINT, SIGTERM and SIGHUP to watch for them: {0}")]
    Signals(std::io::Error),
}

/// Names to copy from our environment, and values to set.
pub(crate) type EnvFlags = (Vec<String>, Vec<(OsString, OsString)>);

/// What `--env` asks for: names to copy and values to set.
pub(crate) fn parse_env_flags(flags: &[String]) -> Result<EnvFlags, RunSetupError> {
    let mut pass = Vec::new();
    let mut set = Vec::new();
    for flag in flags {
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (flag.as_str(), None),
        };
        if name.is_empty() || name.contains('\0') || value.is_some_and(|v| v.contains('\0')) {
            return Err(RunSetupError::BadEnv {
                given: flag.clone(),
            });
        }
        match value {
            Some(value) => set.push((OsString::from(name), OsString::from(value))),
            None => pass.push(name.to_owned()),
        }
    }
    Ok((pass, set))
}

/// `run`'s request, planned like every other door's (the local user's
/// policy: raw commands, its own `--sandbox`).
fn prepare(
    args: &RunArgs,
    ctx: &ProcessContext,
    session: &ProcessSession,
) -> Result<Plan, RunSetupError> {
    let (pass, set) = parse_env_flags(&args.env)?;
    let base = ctx.cwd().map_err(RunSetupError::Cwd)?;
    let config = PlannerConfig {
        env: ctx.env.clone(),
        home: ctx.agent_reach_home(),
        sandbox_prefix: vec![session.sandbox_link().into_os_string()],
        apply_patch_prefix: Vec::new(),
        use_cgroup: ctx.cgroups_wanted(),
        hidden_paths: ctx
            .var(crate::registry::secrets::SECRETS_FILE_VAR)
            .filter(|v| !v.is_empty())
            .and_then(|path| std::path::absolute(path).ok())
            .into_iter()
            .collect(),
    };
    let planner = Planner::for_run(config, base.to_path_buf());
    let mut request = Request::command(args.command.clone());
    request.workdir = args.workdir.clone();
    request.tty = Some(args.tty);
    request.timeout_ms = Some(args.timeout_ms);
    request.max_output_tokens = Some(args.max_output_tokens);
    request.pass_env = pass;
    request.env = set;
    request.sandbox = args.sandbox;
    planner
        .plan(&request, Door::Run)
        .map_err(RunSetupError::Plan)
}

fn run(args: &RunArgs, ctx: &ProcessContext, session: ProcessSession) -> i32 {
    let prepared = match prepare(args, ctx, &session) {
        Ok(prepared) => prepared,
        Err(err) => return report_setup_error(args, &err.to_string()),
    };
    // Before the pump thread starts, so it inherits the blocked signals.
    let interrupts = match InterruptGuard::install() {
        Ok(guard) => guard,
        Err(err) => return report_setup_error(args, &RunSetupError::Signals(err).to_string()),
    };
    let Plan {
        spec,
        render: opts,
        report,
        ..
    } = prepared;
    let outcome = interrupts
        .watch_fd()
        .map_err(|source| ExecError::Watch {
            program: args.command.first().cloned().unwrap_or_default(),
            source,
        })
        .and_then(|fd| Execution::spawn_inline(spec, Some(fd)))
        .map(|(execution, pump)| {
            // Reads here until the exit; a signal, the timeout or output
            // left open after the exit start the kill from inside.
            pump.run();
            let completed = execution.finish_blocking(&opts);
            // Also a signal that came after the pump stopped watching.
            let signal = execution
                .interrupted()
                .or_else(|| interrupts.take_pending());
            (completed, signal)
        });
    let code = print_outcome(args, outcome, args.timeout_ms);
    drop(session);
    drop(report);
    // Last: restoring the mask delivers a signal that is still pending.
    drop(interrupts);
    code
}

fn print_outcome(
    args: &RunArgs,
    outcome: Result<(Completed, Option<i32>), ExecError>,
    timeout_ms: u64,
) -> i32 {
    match outcome {
        Ok((completed, None)) => print_completed(args, &completed, timeout_ms),
        Ok((completed, Some(signal))) => {
            print_completed(args, &completed, timeout_ms);
            eprintln!(
                "agent-reach: interrupted by signal {signal}; the command and everything it started were killed"
            );
            exit_code::for_signal(signal)
        }
        Err(err) => report_exec_error(args, &err),
    }
}

fn print_completed(args: &RunArgs, completed: &Completed, timeout_ms: u64) -> i32 {
    let code = completed.exit.exit_code();
    if args.json {
        return match print_json(&completed.to_result(None, None)) {
            Ok(_) => code,
            Err(stdout_code) => stdout_code,
        };
    }
    if let Err(code) = crate::stdio::print_or_exit_code(&completed.stdout.text) {
        return code;
    }
    eprint!("{}", completed.stderr.text);
    if completed.exit.timed_out {
        eprintln!("agent-reach: killed at the command timeout ({timeout_ms} ms); exit 124");
    }
    if !completed.survivors.is_empty() {
        eprintln!(
            "agent-reach: {} process(es) the command started could not be killed: {:?}",
            completed.survivors.len(),
            completed.survivors
        );
    }
    code
}

/// Prints a result; on a stdout failure returns the code to end with.
fn print_json(result: &NormalizedResult) -> Result<i32, i32> {
    let mut text = serde_json::to_string_pretty(result).map_err(|err| {
        eprintln!("agent-reach: cannot encode the result: {err}");
        exit_code::INTERNAL
    })?;
    text.push('\n');
    crate::stdio::print_or_exit_code(&text).map(|()| exit_code::SUCCESS)
}

fn report_exec_error(args: &RunArgs, err: &ExecError) -> i32 {
    eprintln!("agent-reach: {err}");
    let code = err.exit_code();
    if args.json {
        let status = match code {
            exit_code::NOT_FOUND | exit_code::CANNOT_EXECUTE => Status::Failure,
            _ => Status::Error,
        };
        let mut result = NormalizedResult::refused(None, None, status, err.kind(), err.to_string());
        result.exit_code = Some(code);
        if let Err(stdout_code) = print_json(&result) {
            return stdout_code;
        }
    }
    code
}

fn report_setup_error(args: &RunArgs, message: &str) -> i32 {
    eprintln!("agent-reach: {message}");
    if args.json {
        let mut result =
            NormalizedResult::refused(None, None, Status::Error, "bad_request", message);
        result.exit_code = Some(exit_code::INTERNAL);
        if let Err(code) = print_json(&result) {
            return code;
        }
    }
    exit_code::INTERNAL
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_flags_split_into_names_and_values() {
        let (pass, set) =
            parse_env_flags(&["A".into(), "B=1".into(), "C=".into(), "D=x=y".into()]).unwrap();
        assert_eq!(pass, vec!["A".to_string()]);
        assert_eq!(
            set,
            vec![
                ("B".into(), "1".into()),
                ("C".into(), "".into()),
                ("D".into(), "x=y".into())
            ]
        );
        assert!(parse_env_flags(&["=1".into()]).is_err());
        assert!(parse_env_flags(&["".into()]).is_err());
    }
}
