//! The seam between one-shot plans and the exec engine: "run this spec and
//! give me the normalized result".
//!
//! The dispatcher only knows [`Runner`]; [`EngineRunner`] runs a plan's spec
//! through the exec engine, and tests' fakes record specs, so validation,
//! policy, scheduling and caching are tested without processes.

use std::future::Future;
use std::pin::Pin;

use crate::exec::{Execution, RenderOptions, SpawnSpec};
use crate::exit_code;
use crate::result::{NormalizedResult, Status};

/// A boxed future, so runners can be trait objects.
pub(crate) type RunFuture<'a> = Pin<Box<dyn Future<Output = NormalizedResult> + Send + 'a>>;

/// Runs a planned spec to completion. The result's `id`, `tool` and
/// `cached` are filled by the caller.
pub(crate) trait Runner: Send + Sync + 'static {
    fn run(&self, spec: SpawnSpec, render: RenderOptions) -> RunFuture<'_>;
}

/// Runs specs through the exec engine, which owns process groups,
/// timeouts, kill escalation, escapee clean-up, redaction and spill files.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct EngineRunner;

impl Runner for EngineRunner {
    fn run(&self, spec: SpawnSpec, render: RenderOptions) -> RunFuture<'_> {
        Box::pin(run(spec, render))
    }
}

async fn run(spec: SpawnSpec, render: RenderOptions) -> NormalizedResult {
    match Execution::spawn(spec) {
        Ok(execution) => execution.finish(&render).await.to_result(None, None),
        Err(err) => spawn_failure(&err),
    }
}

/// The result of a command that could not be started.
pub(crate) fn spawn_failure(err: &crate::exec::ExecError) -> NormalizedResult {
    let code = err.exit_code();
    let status = if code == exit_code::INTERNAL {
        Status::Error
    } else {
        Status::Failure
    };
    let mut result = NormalizedResult::refused(None, None, status, err.kind(), err.to_string());
    if status == Status::Failure {
        result.exit_code = Some(code);
    }
    result
}
