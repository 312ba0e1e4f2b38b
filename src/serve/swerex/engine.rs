//! The seam between the SWE-ReX door and the engine: the two ways it runs
//! something (a session's bash on a PTY, a one-shot `/execute`), under the
//! operator's policy. Everything the door starts goes through these two
//! functions, so moving them onto the plan stage is one edit here.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::error::{PyClass, SwerexError};
use super::pyrepr;
use crate::exec::{Completed, ExecError, Execution, RenderOptions, SESSION_VAR, SpawnSpec};
use crate::registry::kinds;
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
    if shared.dispatcher.registry().settings.allow_raw_commands {
        return Ok(());
    }
    Err(SwerexError::Refused {
        kind: kinds::RAW_COMMANDS_DISABLED,
        message: "raw commands are disabled on this server, and every SWE-ReX session and /execute is one (the operator can set allow_raw_commands = true)".to_owned(),
    })
}

/// Starts a session's shell on a PTY (no timeout: it lives until closed).
pub(crate) fn spawn_session(
    shared: &Shared,
    argv: Vec<OsString>,
) -> Result<Execution, SwerexError> {
    check_raw_commands(shared)?;
    let mut spec = base_spec(shared, argv, None, None, true);
    spec.tty = true;
    spec.merge_output = true;
    Execution::spawn(spec).map_err(|e| start_error(&e))
}

/// Runs a one-shot command to its end (or its timeout).
pub(crate) async fn run_once(shared: &Shared, req: OneShot) -> Result<Completed, SwerexError> {
    check_raw_commands(shared)?;
    let mut spec = base_spec(shared, req.argv, req.cwd, req.env.as_ref(), false);
    spec.timeout = req.timeout;
    spec.merge_output = req.merge_output;
    let exec = Execution::spawn(spec).map_err(|e| start_error(&e))?;
    Ok(exec.finish(&RenderOptions::default()).await)
}

fn base_spec(
    shared: &Shared,
    argv: Vec<OsString>,
    cwd: Option<PathBuf>,
    replace_env: Option<&BTreeMap<String, String>>,
    tty: bool,
) -> SpawnSpec {
    let config = shared.server.config();
    let tag = crate::exec::new_session_tag();
    let env = match replace_env {
        Some(given) => {
            let mut env: BTreeMap<OsString, OsString> = given
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect();
            env.insert(SESSION_VAR.into(), tag.clone().into());
            env
        }
        None => {
            let inherited: Vec<(OsString, OsString)> = config
                .env
                .iter()
                .filter(|(k, _)| !k.to_string_lossy().starts_with(PRIVATE_PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            crate::exec::child_env(&config.env, &[], &inherited, tty, &tag)
        }
    };
    let cwd = match cwd {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => shared.root.join(dir),
        None => shared.root.clone(),
    };
    let mut spec = SpawnSpec::new(argv, cwd, env, config.home.clone());
    spec.session_tag = tag;
    spec.use_cgroup = config.use_cgroup;
    spec
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
