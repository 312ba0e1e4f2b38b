//! Where this door meets the plan stage: a `ProcessConfig` becomes a raw
//! command request from [`Door::Listener`] (the operator's policy: raw
//! commands allowed or not, the default sandbox, risk; what needs approval
//! is refused), and the plan stage's refusals, the engine's start errors
//! and the one-shot result's failures become gRPC statuses.
//!
//! The working directory is confined to the root here, before planning:
//! sandboxd answers a `cwd` leaving the workspace (`..`, an absolute path
//! elsewhere, a symbolic link out) with `PERMISSION_DENIED`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use tonic::Status;

use super::proto::process_v1::ProcessConfig;
use crate::broker::{Broker, BrokerError};
use crate::exec::ExecError;
use crate::gate::Caller;
use crate::plan::{Rejection, Request, Target};
use crate::registry::kinds;
use crate::result::{NormalizedResult, Status as ResultStatus};

/// A command of this door, before the plan stage.
#[derive(Debug, Clone)]
pub(crate) struct ProcessRequest {
    pub(crate) argv: Vec<OsString>,
    /// Added after the cleared environment's whitelist.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Relative to the root, confined to it.
    pub(crate) workdir: Option<PathBuf>,
    pub(crate) tty: bool,
    /// The command timeout; `None` is the plan stage's default (10 s for a
    /// one-shot command, none for a live process).
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

    /// The plan stage's request, the working directory confined to the
    /// root first.
    pub(crate) fn to_request(&self, broker: &Broker) -> Result<Request, Status> {
        let workdir = match &self.workdir {
            None => None,
            Some(dir) => Some(
                broker
                    .locate(dir)
                    .map_err(|e| Status::permission_denied(format!("cwd: {e}")))?,
            ),
        };
        let mut request = Request::new(Target::Command(self.argv.clone()));
        request.workdir = workdir;
        request.env = self.env.clone();
        request.tty = Some(self.tty);
        request.session = self.session;
        // 0 would mean no timeout at all.
        request.timeout_ms = self
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1));
        Ok(request)
    }
}

/// The status of what the broker refused or could not start.
pub(crate) fn broker_status(err: &BrokerError) -> Status {
    match err {
        BrokerError::Refused(rejection) => rejection_status(rejection),
        BrokerError::Start(e) => start_error(e),
        BrokerError::Full(full) => Status::resource_exhausted(full.to_string()),
        BrokerError::Busy(busy) => Status::resource_exhausted(busy.to_string()),
    }
}

/// A one-shot command through the broker (plan stage, scheduler, engine):
/// its normalized result.
pub(crate) async fn run_one_shot(
    broker: &Broker,
    caller: &Caller,
    req: &ProcessRequest,
) -> Result<NormalizedResult, Status> {
    let request = req.to_request(broker)?;
    Ok(broker.run(caller, request).await)
}

fn rejection_status(rejection: &Rejection) -> Status {
    kind_status(rejection.kind, &rejection.message)
}

/// The status of an `error.kind` of the plan stage or of a result.
pub(crate) fn kind_status(kind: &str, message: &str) -> Status {
    let message = format!("{message} (error kind {kind})");
    match kind {
        k if kinds::is_policy_refusal(k) || k == kinds::NOT_EXECUTABLE => {
            Status::permission_denied(message)
        }
        k if kinds::is_missing(k) => Status::not_found(message),
        kinds::MALFORMED_REQUEST | kinds::INVALID_PARAMS => Status::invalid_argument(message),
        kinds::QUEUE_FULL => Status::resource_exhausted(message),
        kinds::TIMEOUT => Status::deadline_exceeded(message),
        _ => Status::internal(message),
    }
}

/// The answer of a one-shot result that is not a command's own exit:
/// refused, busy, not started, or agent-reach's own failure.
pub(crate) fn result_status(result: &NormalizedResult) -> Option<Status> {
    let error = result.error.as_ref();
    let not_started = error.is_some_and(|e| {
        [
            kinds::NOT_FOUND,
            kinds::NOT_EXECUTABLE,
            kinds::BAD_WORKDIR,
            kinds::SPAWN_FAILED,
        ]
        .contains(&e.kind.as_str())
    });
    let refused = matches!(
        result.status,
        ResultStatus::Rejected | ResultStatus::Busy | ResultStatus::Error
    );
    if !(refused || not_started) {
        return None;
    }
    let (kind, message) = error.map_or(("", "the command did not run"), |e| {
        (e.kind.as_str(), e.message.as_str())
    });
    Some(kind_status(kind, message))
}

/// The status of a command the engine could not start.
pub(crate) fn start_error(err: &ExecError) -> Status {
    match err {
        ExecError::NotFound { .. }
        | ExecError::WorkdirMissing { .. }
        | ExecError::WorkdirNotDirectory { .. } => Status::not_found(err.to_string()),
        ExecError::NotExecutable { .. } => Status::permission_denied(err.to_string()),
        ExecError::EmptyCommand => Status::invalid_argument(err.to_string()),
        _ => Status::internal(err.to_string()),
    }
}
