//! The seam between the SWE-ReX door and the engine: the two ways it runs
//! something (a session's bash on a PTY, a one-shot `/execute`), under the
//! operator's policy: both go through the plan stage (`Door::Listener`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::error::{PyClass, SwerexError};
use super::pyrepr;
use crate::exec::{Completed, ExecError, Execution};
use crate::plan::sandbox::ReportGuard;
use crate::plan::{Door, Plan, Rejection, Request, Target};
use crate::serve::listen::Shared;

/// Variables of the server's own environment a command never inherits: the
/// listener's token and agent-reach's internals.
const PRIVATE_PREFIX: &str = "AGENT_REACH_";

/// A one-shot command of `/execute`.
#[derive(Debug, Clone)]
pub(crate) struct OneShot {
    pub(crate) argv: Vec<OsString>,
    pub(crate) cwd: Option<PathBuf>,
    /// `Some`: the whole environment, as `subprocess.run(env=...)`.
    pub(crate) env: Option<BTreeMap<String, String>>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) merge_output: bool,
}

/// Refuses every command when the operator turned raw commands off.
pub(crate) fn check_raw_commands(shared: &Shared) -> Result<(), SwerexError> {
    shared
        .dispatcher
        .planner()
        .policy()
        .check_raw_commands()
        .map_err(refused)
}

/// A session's bash and its sandbox report, which lives as long as it.
pub(crate) type SessionProcess = (Execution, Option<ReportGuard>);

/// Starts a session's shell on a PTY (no timeout: it lives until closed).
pub(crate) fn spawn_session(
    shared: &Shared,
    argv: Vec<OsString>,
) -> Result<SessionProcess, SwerexError> {
    let mut request = request(shared, argv, None, None);
    request.tty = Some(true);
    request.session = true;
    request.timeout_ms = Some(0);
    let plan = plan(shared, &request)?;
    let exec = Execution::spawn(plan.spec).map_err(|e| start_error(&e))?;
    Ok((exec, plan.report))
}

/// Runs a one-shot command to its end (or its timeout); with it, the names
/// of the operator's `[limits]` that cut what it asked.
pub(crate) async fn run_once(
    shared: &Shared,
    req: OneShot,
) -> Result<(Completed, Vec<String>), SwerexError> {
    let mut request = request(shared, req.argv, req.cwd, req.env.as_ref());
    request.timeout_ms = Some(req.timeout.map_or(0, |t| {
        u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
    }));
    // Merged streams in arrival order, as `merge_output_streams` asks.
    request.session = req.merge_output;
    let plan = plan(shared, &request)?;
    let exec = Execution::spawn(plan.spec).map_err(|e| start_error(&e))?;
    let done = exec.finish(&plan.render).await;
    drop(plan.report);
    let capped = plan.capped.iter().map(|cap| cap.name.to_owned()).collect();
    Ok((done, capped))
}

/// The plan stage's request for a command of this door: the server's own
/// environment passed on (as the original's shell inherits it), but for
/// agent-reach's internals; or exactly the given one.
fn request(
    shared: &Shared,
    argv: Vec<OsString>,
    cwd: Option<PathBuf>,
    replace_env: Option<&BTreeMap<String, String>>,
) -> Request {
    let mut request = Request::command(argv);
    // Without a `cwd`, the server's own directory, as the original's
    // subprocess (the root's when that is outside the root).
    request.workdir = cwd.or_else(|| Some(super::files::base_dir(&shared.root)));
    // The original passes output on as the command wrote it.
    request.keep_blanks = true;
    match replace_env {
        Some(given) => {
            request.replace_env = true;
            request.env = given
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect();
            if !given.contains_key("PATH") {
                on_python_default_path(&mut request, &shared.root);
            }
        }
        None => {
            request.env = shared
                .server
                .config()
                .env
                .iter()
                .filter(|(k, _)| !k.to_string_lossy().starts_with(PRIVATE_PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
        }
    }
    request
}

/// Where Python's `subprocess` looks for a program when the environment it
/// is given has no `PATH` (`os.defpath`).
const PYTHON_DEFAULT_PATH: &str = "/bin:/usr/bin";

/// `subprocess.run(["sh", ...], env={...})` without `PATH` still finds `sh`
/// on `os.defpath`; the command itself then runs without `PATH`, as there.
fn on_python_default_path(request: &mut Request, root: &std::path::Path) {
    let Target::Command(argv) = &mut request.target else {
        return;
    };
    let Some(program) = argv.first_mut() else {
        return;
    };
    let env = BTreeMap::from([(OsString::from("PATH"), OsString::from(PYTHON_DEFAULT_PATH))]);
    if let Ok(found) = crate::exec::resolve::resolve_program(program, root, &env) {
        *program = found.into_os_string();
    }
}

fn plan(shared: &Shared, request: &Request) -> Result<Plan, SwerexError> {
    shared
        .dispatcher
        .planner()
        .plan(request, Door::Listener)
        .map_err(refused)
}

fn refused(rejection: Rejection) -> SwerexError {
    SwerexError::Refused {
        kind: rejection.kind,
        message: rejection.message,
    }
}

/// The Python exception `subprocess.run` raises for a command that cannot
/// start.
fn start_error(err: &ExecError) -> SwerexError {
    let os = |errno: i32, what: &std::ffi::OsStr| {
        SwerexError::io(
            &std::io::Error::from_raw_os_error(errno),
            &what.to_string_lossy(),
        )
    };
    match err {
        ExecError::NotFound { program } => os(libc::ENOENT, program),
        ExecError::NotExecutable { program, .. } => os(libc::EACCES, program),
        ExecError::WorkdirMissing { path } => os(libc::ENOENT, path.as_os_str()),
        ExecError::WorkdirNotDirectory { path } => os(libc::ENOTDIR, path.as_os_str()),
        ExecError::WorkdirUnusable { path, source } => {
            SwerexError::io(source, &path.to_string_lossy())
        }
        other => SwerexError::raise(PyClass::Os, other.to_string()),
    }
}

/// `repr()` of a `Command.command` for messages.
pub(crate) fn command_repr(line: &super::model::CommandLine) -> String {
    match line {
        super::model::CommandLine::Line(s) => pyrepr::string(s),
        super::model::CommandLine::Argv(v) => pyrepr::list(v),
    }
}
