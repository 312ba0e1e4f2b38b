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

pub(crate) mod asking;
pub(crate) mod files;
pub(crate) mod scratch;
pub(crate) mod sessions;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use asking::{Answer, Approver, Planned, StartedSession};
pub(crate) use files::Files;
pub(crate) use sessions::{SessionLedger, SessionTicket, SessionsFull};

use crate::exec::{Attach, Completed, ExecError, Execution};
use crate::gate::Caller;
use crate::plan::sandbox::ReportGuard;
use crate::plan::{Background, Dispatcher, Door, FileOp, Plan, Rejection, Request};
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
    /// No slot of the scheduler came free in time (the machine-wide
    /// limits count live processes too).
    #[error(transparent)]
    Busy(#[from] asking::NoSlot),
}

/// Why a caller's path was given no place: the policy refused the
/// operation, or the path lies beyond the root and the writable roots.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlaceError {
    #[error("{}", .0.message)]
    Refused(Rejection),
    #[error(transparent)]
    Outside(files::OutsideReach),
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
    /// Its slot of the scheduler, held while it lives ([`Broker::start_counted`]).
    pub(crate) slot: Option<crate::scheduler::Permit>,
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
    /// The whitelisted base of the server's environment (what a SWE-ReX
    /// shell or Codex's `inherit: all` gets), agent-reach's internals left
    /// out.
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
        // The whitelisted base, as every door's command gets: never the
        // server's credentials (OPENAI_API_KEY, DB_PASSWORD, ...).
        let env = crate::exec::env::whitelisted(env)
            .into_iter()
            .filter(|(k, _)| {
                !k.to_string_lossy()
                    .starts_with(crate::plan::RESERVED_ENV_PREFIX)
            })
            .collect();
        let ledger = sessions.clone();
        dispatcher
            .metrics()
            .watch_sessions_by_door(crate::registry::metrics::Probe::new(move || {
                ledger.by_door()
            }));
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

    /// The whitelisted base of the server's environment (what a door's
    /// command may start from), agent-reach's internals left out.
    pub(crate) fn server_env(&self) -> &BTreeMap<OsString, OsString> {
        &self.inner.env
    }

    /// Where doors keep their private files beside a live process
    /// ([`scratch`]): in the state directory, out of every command's and
    /// every file route's reach.
    pub(crate) fn scratch_root(&self) -> PathBuf {
        scratch::scratch_root(&self.inner.dispatcher.planner().home())
    }

    /// The operator's `[limits]`.
    pub(crate) fn limits(&self) -> LimitSettings {
        self.inner.dispatcher.planner().limits()
    }

    /// The registry the operator serves (its tools, as a door lists them).
    pub(crate) fn registry(&self) -> Arc<crate::registry::Registry> {
        self.inner.dispatcher.registry()
    }

    /// The counters every door's calls are counted in.
    pub(crate) fn metrics(&self) -> Arc<crate::registry::metrics::Metrics> {
        self.inner.dispatcher.metrics()
    }

    /// `text` with the registry's secrets replaced (for a log line).
    pub(crate) fn redact(&self, text: &str) -> String {
        self.inner.dispatcher.redact(text)
    }

    /// The operator's `allow_raw_commands`: whether a door offers its
    /// shell tools at all.
    pub(crate) fn allows_raw_commands(&self) -> bool {
        self.inner.dispatcher.planner().policy().allow_raw_commands
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
        launch(ticket, plan, attach, None)
    }

    /// [`start`](Self::start) for a process that counts against the
    /// scheduler's limits like any command (machine-wide, every door): it
    /// takes a slot first, waiting no longer than [`START_SLOT_WAIT`], and
    /// holds it while it lives. A Start, an envd process, a Codex process.
    pub(crate) async fn start_counted(
        &self,
        caller: &Caller,
        request: &Request,
        what: &str,
        attach: Option<Attach>,
    ) -> Result<Live, BrokerError> {
        let ticket = self.inner.sessions.admit(caller, what)?;
        let plan = self.plan(caller, request)?;
        let slot = self.slot(plan.demand.clone(), START_SLOT_WAIT).await?;
        launch(ticket, plan, attach, Some(slot))
    }

    /// Runs a one-shot command for `caller` the way `envd` and `daytona`
    /// users rely on: what it leaves running in the background
    /// (`server > log 2>&1 &`) lives on, seated in the session table under
    /// `caller` (`what` names it there) until it is all gone, killed, or the
    /// server stops. A timeout still kills the whole tree.
    pub(crate) async fn run_leaving_background(
        &self,
        caller: &Caller,
        mut request: Request,
        what: &str,
    ) -> NormalizedResult {
        let broker = self.clone();
        let owner = caller.clone();
        let what = what.to_owned();
        request.background = Some(Background::new(move |remainder| {
            broker.keep_background(&owner, remainder, &what);
        }));
        self.run(caller, request).await
    }

    /// Seats what `remainder` left running under `caller` and holds it on
    /// a task of its own; with no seat free it is killed at once (the caps
    /// hold for background processes too).
    pub(crate) fn keep_background(&self, caller: &Caller, remainder: Execution, what: &str) {
        match self.inner.sessions.admit(caller, what) {
            Ok(ticket) => {
                ticket.hold(&remainder);
                tokio::spawn(hold_background(remainder, ticket));
            }
            Err(full) => {
                tracing::warn!(caller = %caller, what, "background processes killed: {full}");
                tokio::spawn(async move {
                    remainder.terminate().await;
                });
            }
        }
    }

    /// A file operation for `caller`: planned like a command (the policy
    /// may refuse it), then the workspace to do it in.
    pub(crate) fn files(
        &self,
        caller: &Caller,
        op: FileOp,
        paths: &[&str],
    ) -> Result<Files, Rejection> {
        let planner = self.inner.dispatcher.planner();
        let permit = planner.plan_file(op, paths, Door::Listener)?;
        tracing::debug!(caller = %caller, op = op.verb(), "file operation");
        // Every workspace handed out checks the planner's fence: what the
        // command's sandbox keeps out of reach, no file operation reaches.
        let fence = planner.fence();
        let writable = planner
            .policy()
            .writable_roots
            .iter()
            .map(|root| Workspace::fenced(root, fence.clone()))
            .collect();
        let workspace = self.inner.workspace.with_fence(fence);
        Ok(Files::new(permit, workspace, writable))
    }

    /// A file operation for `caller` on one real path (E2B, Daytona): the
    /// policy's word on it, then where it lies ([`Files::place`]). Either
    /// refusal is a message the door answers as "forbidden".
    pub(crate) fn place(
        &self,
        caller: &Caller,
        op: FileOp,
        path: &str,
    ) -> Result<files::Placed, PlaceError> {
        let files = self
            .files(caller, op, &[path])
            .map_err(PlaceError::Refused)?;
        files.place(path).map_err(PlaceError::Outside)
    }

    /// Plans `request` for `caller`: callers take turns in the scheduler,
    /// so the demand names whose it is.
    fn plan(&self, caller: &Caller, request: &Request) -> Result<Plan, Rejection> {
        tracing::debug!(caller = %caller, "planned");
        let mut plan = self
            .inner
            .dispatcher
            .planner()
            .plan(request, Door::Listener)?;
        plan.demand.caller = caller.to_string();
        Ok(plan)
    }
}

/// How long a live process waits for a slot of the scheduler before its
/// start is answered busy.
pub(crate) const START_SLOT_WAIT: std::time::Duration = crate::scheduler::DOOR_SLOT_WAIT;

/// How often a held background is looked at to see whether it is gone.
const BACKGROUND_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Holds what a command left running in its seat (`ticket`, marked as
/// background) until none of it is left: ended by itself, killed through
/// its door or the session table, or at the server's stop. Then the
/// execution is settled (reaped, its cgroup released) and the seat freed.
pub(crate) async fn hold_background(remainder: Execution, ticket: SessionTicket) {
    ticket.leave_in_background();
    tracing::info!(
        session = ticket.id(),
        pid = remainder.pid(),
        "a command's background processes live on"
    );
    while remainder.has_remainder().await {
        tokio::time::sleep(BACKGROUND_POLL).await;
    }
    remainder.settle().await;
    tracing::info!(session = ticket.id(), "background processes gone");
    drop(ticket);
}

/// Spawns a planned live process into its seat (`ticket`), holding `slot`.
fn launch(
    ticket: SessionTicket,
    plan: Plan,
    attach: Option<Attach>,
    slot: Option<crate::scheduler::Permit>,
) -> Result<Live, BrokerError> {
    let exec = match attach {
        Some(attach) => Execution::spawn_attached(plan.spec, attach)?,
        None => Execution::spawn(plan.spec)?,
    };
    ticket.hold(&exec);
    Ok(Live {
        exec,
        report: plan.report,
        ticket,
        slot,
    })
}

fn capped_names(plan: &Plan) -> Vec<String> {
    plan.capped.iter().map(|cap| cap.name.to_owned()).collect()
}
