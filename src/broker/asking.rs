//! The broker at a door where a person may approve (MCP, through the
//! client's elicitation): a request is planned under the operator's
//! policy; where a person's approval would let it run and the door can ask
//! one, the door's [`Approver`] asks, and the request is planned again as
//! approved. The door then hands the [`Planned`] request back to start it
//! (a session), run it to its end (apply_patch) or dispatch it (a
//! registry tool): it never holds the planner or the engine.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use super::Broker;
use crate::exec::{Completed, ExecError, Execution};
use crate::gate::Caller;
use crate::plan::sandbox::ReportGuard;
use crate::plan::{ApprovalAsk, Door, Plan, Rejection, Request};
use crate::result::NormalizedResult;
use crate::scheduler::{Busy, Demand, Permit};

/// What a door's approver answers: `Ok` only when a person accepted.
pub(crate) type Answer<'a> = Pin<Box<dyn Future<Output = Result<(), Rejection>> + Send + 'a>>;

/// Who can approve a request at a door.
pub(crate) trait Approver: Send + Sync {
    /// Whether a person can be asked at all (the client declared it can).
    fn can_ask(&self) -> bool;
    /// Asks the person about `ask`.
    fn ask<'a>(&'a self, ask: &'a ApprovalAsk) -> Answer<'a>;
}

/// A request the plan stage allowed, not started yet.
#[derive(Debug)]
pub(crate) struct Planned {
    plan: Plan,
}

impl Planned {
    /// The output budget the plan settled on (`[limits]` applied).
    pub(crate) fn max_output_tokens(&self) -> usize {
        self.plan.render.max_output_tokens
    }

    /// What the operator's `[limits]` cut, each as the reply shows it.
    pub(crate) fn capped(&self) -> Vec<String> {
        self.plan.capped.iter().map(|cap| cap.detail()).collect()
    }

    /// Where it runs.
    pub(crate) fn workdir(&self) -> &Path {
        &self.plan.spec.cwd
    }
}

/// Why a planned session found no slot of the scheduler.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NoSlot {
    /// The queue is full.
    #[error("busy: {0}")]
    Busy(Busy),
    /// None came free in the time the caller waits.
    #[error(
        "busy: no slot of the scheduler came free within the wait ({running} running here, global limit {global}); nothing was started, try again later or end a session"
    )]
    Waited { running: usize, global: usize },
}

/// A planned session, started: its process, its sandbox report (removed
/// when dropped) and its slot of the scheduler (held while it runs).
#[derive(Debug)]
pub(crate) struct StartedSession {
    pub(crate) exec: Execution,
    pub(crate) report: Option<ReportGuard>,
    pub(crate) permit: Permit,
}

impl Broker {
    /// A slot of the scheduler for `demand`, waited for no longer than
    /// `wait`; the wait is counted in the metrics.
    pub(super) async fn slot(&self, demand: Demand, wait: Duration) -> Result<Permit, NoSlot> {
        let scheduler = self.inner.dispatcher.scheduler();
        let asked = std::time::Instant::now();
        let acquired = tokio::time::timeout(wait, scheduler.acquire(demand)).await;
        self.inner
            .dispatcher
            .metrics()
            .record_queue_wait(asked.elapsed());
        match acquired {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(busy)) => Err(NoSlot::Busy(busy)),
            Err(_) => {
                let load = scheduler.load();
                Err(NoSlot::Waited {
                    running: load.running,
                    global: load.global,
                })
            }
        }
    }

    /// Plans `request` for `caller` at a door where a person may approve:
    /// the approver is asked where a person's approval would let it run.
    pub(crate) async fn plan_asking(
        &self,
        caller: &Caller,
        request: &Request,
        approver: &dyn Approver,
    ) -> Result<Planned, Rejection> {
        tracing::debug!(caller = %caller, "planned, a person may approve");
        let planner = self.inner.dispatcher.planner();
        let unasked = Door::Mcp {
            person_approved: false,
        };
        let plan = match planner.plan(request, unasked) {
            Err(Rejection {
                approval: Some(ask),
                ..
            }) if approver.can_ask() => {
                approver.ask(&ask).await?;
                planner.plan(
                    request,
                    Door::Mcp {
                        person_approved: true,
                    },
                )?
            }
            other => other?,
        };
        let mut plan = plan;
        // Callers take turns in the scheduler.
        plan.demand.caller = caller.to_string();
        Ok(Planned { plan })
    }

    /// Runs a registry tool for `caller` through the cache, the scheduler
    /// and the engine, a person asked where one must approve. A refusal is
    /// a normalized result too.
    pub(crate) async fn dispatch_asking(
        &self,
        caller: &Caller,
        request: Request,
        approver: &dyn Approver,
    ) -> NormalizedResult {
        let dispatcher = &self.inner.dispatcher;
        // The log says MCP; whether a person approved is the plan's.
        let door = Door::Mcp {
            person_approved: false,
        };
        match self.plan_asking(caller, &request, approver).await {
            Ok(planned) => dispatcher.run(request.id.clone(), planned.plan, door).await,
            Err(rejection) => dispatcher.finish_refused(
                request.id.clone(),
                request.tool_name().map(str::to_owned),
                crate::registry::metrics::UNKNOWN_TOOL_LABEL,
                rejection,
                door,
            ),
        }
    }

    /// Runs a planned command to its end (MCP's apply_patch).
    pub(crate) async fn run_planned(&self, planned: Planned) -> Result<Completed, ExecError> {
        let Plan {
            spec,
            render,
            report,
            ..
        } = planned.plan;
        let exec = Execution::spawn(spec)?;
        let completed = exec.finish(&render).await;
        drop(report);
        Ok(completed)
    }

    /// Starts a planned session once a slot of the scheduler is free
    /// (machine-wide, like every command), waiting no longer than `wait`.
    /// Its seat in the session table is the door's to take first.
    pub(crate) async fn start_planned(
        &self,
        planned: Planned,
        wait: Duration,
    ) -> Result<Result<StartedSession, ExecError>, NoSlot> {
        let permit = self.slot(planned.plan.demand.clone(), wait).await?;
        let Plan { spec, report, .. } = planned.plan;
        Ok(Execution::spawn(spec).map(|exec| StartedSession {
            exec,
            report,
            permit,
        }))
    }
}
