//! The broker: the only code that plans and starts anything, or touches a
//! file, for a remote caller. Every door is handed a [`Broker`] (never the
//! server's shared state) and calls it with the [`Caller`] the gate made:
//!
//! - [`Broker::run`]: a one-shot command through the plan stage, the
//!   scheduler and the engine, answered as a normalized result;
//! - [`Broker::run_to_end`]: the same for a door that renders the raw
//!   output itself (SWE-ReX's `subprocess.run`);
//! - [`Broker::start`]: a live process, seated in the one session table
//!   ([`sessions`]) that `--max-sessions` and `--max-sessions-per-client`
//!   bound across every door;
//! - [`Broker::files`]: a file operation, planned like a command
//!   (`plan::files`), then done in the workspace, beneath the root.
//!
//! Every request of a remote door is planned as [`Door::Listener`]: the
//! operator's policy, with nobody there to approve.

pub(crate) mod files;
pub(crate) mod scratch;
pub(crate) mod sessions;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use files::Files;
pub(crate) use sessions::{SessionLedger, SessionTicket, SessionsFull};

use crate::exec::{Attach, Completed, ExecError, Execution};
use crate::gate::Caller;
use crate::plan::sandbox::ReportGuard;
use crate::plan::{Dispatcher, Door, FileOp, Plan, Rejection, Request};
use crate::registry::model::LimitSettings;
use crate::result::NormalizedResult;
use crate::workspace::Workspace;
use crate::workspace::locate::ConfineError;

/// Why the broker did not do what a door asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BrokerError {
    /// The plan stage refused it (policy, bad parameters, approval).
    #[error("{}", .0.message)]
    Refused(Rejection),
    /// The engine could not start the command.
    #[error(transparent)]
    Start(#[from] ExecError),
    /// The session table has no seat for the caller.
    #[error(transparent)]
    Full(#[from] SessionsFull),
}

impl From<Rejection> for BrokerError {
    fn from(rejection: Rejection) -> Self {
        BrokerError::Refused(rejection)
    }
}

/// A live process started for a caller: the process, its sandbox report
/// (removed when dropped) and its seat in the session table. Drop all three
/// together, when the process is over.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) exec: Execution,
    pub(crate) report: Option<ReportGuard>,
    pub(crate) ticket: SessionTicket,
}

/// A one-shot command run to its end, for a door that renders it itself.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) completed: Completed,
    /// The names of the operator's `[limits]` that cut what was asked.
    pub(crate) capped: Vec<String>,
}

/// The broker every door of one server shares.
#[derive(Clone)]
pub(crate) struct Broker {
    inner: Arc<Inner>,
}

struct Inner {
    dispatcher: Arc<Dispatcher>,
    workspace: Workspace,
    sessions: SessionLedger,
    /// The server's own environment (what a SWE-ReX shell inherits),
    /// agent-reach's internals left out.
    env: BTreeMap<OsString, OsString>,
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broker")
            .field("root", &self.inner.workspace.root())
            .field("sessions", &self.inner.sessions.len())
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// The broker over `dispatcher` (registry, policy, scheduler), the
    /// workspace at `root` and the session table `sessions`; `env` is the
    /// server's own environment.
    pub(crate) fn new(
        dispatcher: Arc<Dispatcher>,
        root: &Path,
        sessions: SessionLedger,
        env: &BTreeMap<OsString, OsString>,
    ) -> Self {
        let env = env
            .iter()
            .filter(|(k, _)| {
                !k.to_string_lossy()
                    .starts_with(crate::plan::RESERVED_ENV_PREFIX)
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self {
            inner: Arc::new(Inner {
                dispatcher,
                workspace: Workspace::new(root),
                sessions,
                env,
            }),
        }
    }

    /// `--root`: the workspace every caller path is confined to.
    pub(crate) fn root(&self) -> &Path {
        self.inner.workspace.root()
    }

    /// Whether the workspace is a directory the broker can work in.
    pub(crate) fn workspace_ready(&self) -> bool {
        self.inner.workspace.is_ready()
    }

    /// The server's own environment, agent-reach's internals left out.
    pub(crate) fn server_env(&self) -> &BTreeMap<OsString, OsString> {
        &self.inner.env
    }

    /// The operator's `[limits]`.
    pub(crate) fn limits(&self) -> LimitSettings {
        self.inner.dispatcher.planner().limits()
    }

    /// The one session table of every door.
    pub(crate) fn sessions(&self) -> &SessionLedger {
        &self.inner.sessions
    }

    /// The operator's word on raw commands at this door, before a door
    /// opens anything for a caller who will send them.
    pub(crate) fn check_raw_commands(&self) -> Result<(), Rejection> {
        self.inner
            .dispatcher
            .planner()
            .policy()
            .check_raw_commands()
    }

    /// The sandbox a raw command gets when the request asks for none (the
    /// operator's `--sandbox` or `[sandbox] default`), so a door can ask
    /// for the narrower of its client's wish and this one.
    pub(crate) fn operator_sandbox(&self) -> Option<crate::sandbox::Policy> {
        self.inner
            .dispatcher
            .planner()
            .policy()
            .sandbox_for(None, None)
            .ok()
            .flatten()
    }

    /// A caller's path for a working directory, confined beneath the root
    /// (relative paths from the root).
    pub(crate) fn locate(&self, path: &Path) -> Result<PathBuf, ConfineError> {
        let root = self.root();
        crate::workspace::locate(root, root, path)
    }

    /// Runs a one-shot command for `caller` through the plan stage, the
    /// scheduler and the engine.
    pub(crate) async fn run(&self, caller: &Caller, request: Request) -> NormalizedResult {
        tracing::debug!(door = caller.door(), caller = %caller, "one-shot command");
        // Callers take turns in the scheduler: one caller's queue cannot
        // starve another's.
        self.inner
            .dispatcher
            .handle_as(request, Door::Listener, &caller.to_string())
            .await
    }

    /// Runs a one-shot command for `caller` to its end and hands back its
    /// raw output, for a door that renders it itself.
    pub(crate) async fn run_to_end(
        &self,
        caller: &Caller,
        request: Request,
    ) -> Result<Finished, BrokerError> {
        let plan = self.plan(caller, &request)?;
        let capped = capped_names(&plan);
        let exec = Execution::spawn(plan.spec)?;
        let completed = exec.finish(&plan.render).await;
        drop(plan.report);
        Ok(Finished { completed, capped })
    }

    /// Starts a live process for `caller`, seated in the session table
    /// (`what` names it there); `attach` wires its output to a tap and its
    /// stdin to a pipe where the door streams them.
    pub(crate) fn start(
        &self,
        caller: &Caller,
        request: &Request,
        what: &str,
        attach: Option<Attach>,
    ) -> Result<Live, BrokerError> {
        let ticket = self.inner.sessions.admit(caller, what)?;
        let plan = self.plan(caller, request)?;
        let exec = match attach {
            Some(attach) => Execution::spawn_attached(plan.spec, attach)?,
            None => Execution::spawn(plan.spec)?,
        };
        ticket.hold(&exec);
        Ok(Live {
            exec,
            report: plan.report,
            ticket,
        })
    }

    /// A file operation for `caller`: planned like a command (the policy
    /// may refuse it), then the workspace to do it in.
    pub(crate) fn files(
        &self,
        caller: &Caller,
        op: FileOp,
        paths: &[&str],
    ) -> Result<Files, Rejection> {
        let permit = self
            .inner
            .dispatcher
            .planner()
            .plan_file(op, paths, Door::Listener)?;
        tracing::debug!(caller = %caller, op = op.verb(), "file operation");
        Ok(Files::new(permit, self.inner.workspace.clone()))
    }

    fn plan(&self, caller: &Caller, request: &Request) -> Result<Plan, Rejection> {
        tracing::debug!(caller = %caller, "planned");
        self.inner
            .dispatcher
            .planner()
            .plan(request, Door::Listener)
    }
}

fn capped_names(plan: &Plan) -> Vec<String> {
    plan.capped.iter().map(|cap| cap.name.to_owned()).collect()
}
