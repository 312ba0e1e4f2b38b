//! The seam between the SWE-ReX door and the engine: the two ways it runs
//! something (a session's bash on a PTY, a one-shot `/execute`), under the
//! operator's policy: both go through the broker.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::{PyClass, SwerexError};
use super::pyrepr;
use crate::broker::{Broker, BrokerError, Finished, Live};
use crate::exec::{Completed, ExecError};
use crate::gate::Caller;
use crate::plan::{Rejection, Request, Target};

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
pub(crate) fn check_raw_commands(broker: &Broker) -> Result<(), SwerexError> {
    broker.check_raw_commands().map_err(refused)
}

/// Starts a session's shell on a PTY for `caller` (no timeout: it lives
/// until closed), seated in the broker's session table.
pub(crate) fn spawn_session(
    broker: &Broker,
    caller: &Caller,
    base: &Path,
    argv: Vec<OsString>,
) -> Result<Live, SwerexError> {
    let mut request = request(broker, base, argv, None, None);
    request.tty = Some(true);
    request.session = true;
    request.timeout_ms = Some(0);
    broker
        .start(caller, &request, "bash session", None)
        .map_err(|e| broker_error(&e))
}

/// Runs a one-shot command to its end (or its timeout); with it, the names
/// of the operator's `[limits]` that cut what it asked.
pub(crate) async fn run_once(
    broker: &Broker,
    caller: &Caller,
    base: &Path,
    req: OneShot,
) -> Result<(Completed, Vec<String>), SwerexError> {
    let mut request = request(broker, base, req.argv, req.cwd, req.env.as_ref());
    request.timeout_ms = Some(req.timeout.map_or(0, |t| {
        u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
    }));
    // Merged streams in arrival order, as `merge_output_streams` asks.
    request.session = req.merge_output;
    let Finished { completed, capped } = broker
        .run_to_end(caller, request)
        .await
        .map_err(|e| broker_error(&e))?;
    Ok((completed, capped))
}

/// The plan stage's request for a command of this door: the server's own
/// environment passed on (as the original's shell inherits it), but for
/// agent-reach's internals; or exactly the given one.
fn request(
    broker: &Broker,
    base: &Path,
    argv: Vec<OsString>,
    cwd: Option<PathBuf>,
    replace_env: Option<&BTreeMap<String, String>>,
) -> Request {
    let mut request = Request::command(argv);
    // Without a `cwd`, the server's own directory, as the original's
    // subprocess (the root's when that is outside the root).
    request.workdir = cwd.or_else(|| Some(base.to_path_buf()));
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
                on_python_default_path(&mut request, broker.root());
            }
        }
        None => {
            // The broker's copy leaves agent-reach's internals out.
            request.env = broker
                .server_env()
                .iter()
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

/// What the broker refused or could not start, as the client sees it.
fn broker_error(err: &BrokerError) -> SwerexError {
    match err {
        BrokerError::Refused(rejection) => refused(rejection.clone()),
        BrokerError::Start(e) => start_error(e),
        BrokerError::Full(full) => SwerexError::raise(PyClass::SwerexException, full.to_string()),
        BrokerError::Busy(busy) => SwerexError::raise(PyClass::SwerexException, busy.to_string()),
    }
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
