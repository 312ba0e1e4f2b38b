//! Where this door meets the plan stage: a `ProcessConfig` becomes a raw
//! command request under the operator's policy (the listener door, which
//! refuses what needs approval), and the plan stage's refusals and the
//! engine's start errors become gRPC statuses.
//!
//! Until `crate::plan` lands, [`plan_process`] applies the policy points
//! this door needs itself (raw commands allowed, the workdir confined to
//! the root, the cleared environment plus the whitelist, the policy's
//! sandbox); switching to `Dispatcher::plan_command(&req, Door::Listener)`
//! is the one edit in that function.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use tonic::Status;

use super::proto::process_v1::ProcessConfig;
use crate::exec::{ExecError, SpawnSpec};
use crate::serve::listen::Shared;

/// A command of this door, before the plan stage.
#[derive(Debug, Clone)]
pub(crate) struct ProcessRequest {
    pub(crate) argv: Vec<OsString>,
    /// Added after the cleared environment's whitelist.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Relative to the root, confined to it.
    pub(crate) workdir: Option<PathBuf>,
    pub(crate) tty: bool,
    /// The command timeout; `None` is the plan stage's default.
    pub(crate) timeout: Option<Duration>,
    /// A live process (Start) rather than a one-shot command (Execute).
    pub(crate) session: bool,
}

impl ProcessRequest {
    /// The request of a `ProcessConfig` (a live process when `session`);
    /// an empty command is refused.
    pub(crate) fn from_config(
        config: Option<ProcessConfig>,
        tty: bool,
        session: bool,
    ) -> Result<Self, Status> {
        let config = config.unwrap_or_default();
        if config.command.is_empty() {
            return Err(Status::invalid_argument("config.command is required"));
        }
        let mut env: Vec<(OsString, OsString)> = config
            .env_vars
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        env.sort();
        Ok(Self {
            argv: config.command.into_iter().map(OsString::from).collect(),
            env,
            workdir: config.cwd.filter(|c| !c.is_empty()).map(PathBuf::from),
            tty,
            timeout: None,
            session,
        })
    }
}

/// The spec the engine runs for `req`, or the status refusing it.
pub(crate) fn plan_process(shared: &Shared, req: &ProcessRequest) -> Result<SpawnSpec, Status> {
    let registry = shared.dispatcher.registry();
    let settings = &registry.settings;
    if !settings.allow_raw_commands {
        return Err(Status::permission_denied(
            "raw commands are disabled on this server (error kind raw_commands_disabled); the operator can set allow_raw_commands = true",
        ));
    }
    let root = &registry.root;
    let cwd = match &req.workdir {
        None => root.clone(),
        Some(dir) => crate::registry::confine::confine(root, root, dir)
            .map_err(|e| Status::permission_denied(format!("cwd: {e}")))?,
    };
    if !cwd.is_dir() {
        return Err(Status::not_found(format!(
            "cwd {} is not an existing directory",
            cwd.display()
        )));
    }
    let config = shared.server.config();
    let tag = crate::exec::new_session_tag();
    let mut set: Vec<(OsString, OsString)> = settings
        .env
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    set.extend(req.env.iter().cloned());
    let env = crate::exec::env::child_env(&config.env, &[], &set, req.tty, &tag);
    let mut spec = SpawnSpec::new(req.argv.clone(), cwd.clone(), env, config.home.clone());
    spec.tty = req.tty;
    // The plan stage's defaults: a one-shot command gets the default
    // timeout, a live process none.
    spec.timeout = req
        .timeout
        .or((!req.session).then_some(crate::registry::dispatcher::DEFAULT_COMMAND_TIMEOUT));
    spec.session_tag = tag;
    spec.use_cgroup = config.use_cgroup;
    if let Some(policy) = settings.sandbox.default.as_deref() {
        let policy = policy.parse::<crate::sandbox::Policy>().unwrap_or_default();
        let sandbox = crate::sandbox::SandboxSpec {
            policy,
            ..Default::default()
        };
        spec.wrapper =
            sandbox.wrapper_argv(&config.path_dir.join("agent-reach-sandbox"), &cwd, None);
    }
    Ok(spec)
}

/// The status of a command the engine could not start.
pub(crate) fn start_error(err: &ExecError) -> Status {
    match err {
        ExecError::NotFound { .. } | ExecError::WorkdirMissing { .. } => {
            Status::not_found(err.to_string())
        }
        ExecError::NotExecutable { .. } => Status::permission_denied(err.to_string()),
        ExecError::EmptyCommand => Status::invalid_argument(err.to_string()),
        _ => Status::internal(err.to_string()),
    }
}
