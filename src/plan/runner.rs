//! The seam between one-shot plans and the exec engine: "run this spec and
//! give me the normalized result".
//!
//! The dispatcher only knows [`Runner`]; [`EngineRunner`] runs a plan's spec
//! through the exec engine, and tests' fakes record specs, so validation,
//! policy, scheduling and caching are tested without processes.

use std::future::Future;
use std::pin::Pin;

use super::Background;
use crate::exec::{Execution, RenderOptions, SpawnSpec};
use crate::exit_code;
use crate::result::{NormalizedResult, Status};

/// A boxed future, so runners can be trait objects.
pub(crate) type RunFuture<'a> = Pin<Box<dyn Future<Output = NormalizedResult> + Send + 'a>>;

/// Runs a planned spec to completion. The result's `id`, `tool` and
/// `cached` are filled by the caller.
pub(crate) trait Runner: Send + Sync + 'static {
    /// `background`: where what the command leaves running goes, else it
    /// is killed with the command.
    fn run(
        &self,
        spec: SpawnSpec,
        render: RenderOptions,
        background: Option<Background>,
    ) -> RunFuture<'_>;
}

/// Runs specs through the exec engine, which owns process groups,
/// timeouts, kill escalation, escapee clean-up, redaction and spill files.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct EngineRunner;

impl Runner for EngineRunner {
    fn run(
        &self,
        spec: SpawnSpec,
        render: RenderOptions,
        background: Option<Background>,
    ) -> RunFuture<'_> {
        Box::pin(run(spec, render, background))
    }
}

async fn run(
    spec: SpawnSpec,
    render: RenderOptions,
    background: Option<Background>,
) -> NormalizedResult {
    let execution = match Execution::spawn(spec) {
        Ok(execution) => execution,
        Err(err) => return spawn_failure(&err),
    };
    let Some(background) = background else {
        return execution.finish(&render).await.to_result(None, None);
    };
    let (completed, left) = execution.finish_leaving_background(&render).await;
    if left {
        background.keep(execution);
    }
    completed.to_result(None, None)
}

/// How long a caller refused for want of descriptors is told to wait.
const EXHAUSTED_RETRY_AFTER_MS: u64 = 250;

/// The result of a command that could not be started; running out of
/// descriptors or processes is load (`busy`), not a failure.
pub(crate) fn spawn_failure(err: &crate::exec::ExecError) -> NormalizedResult {
    if err.is_resource_exhaustion() {
        let mut result = NormalizedResult::refused(
            None,
            None,
            Status::Busy,
            crate::registry::kinds::RESOURCES_EXHAUSTED,
            format!("{err}; try again later"),
        );
        if let Some(error) = &mut result.error {
            error.retry_after_ms = Some(EXHAUSTED_RETRY_AFTER_MS);
        }
        return result;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn_error(errno: i32) -> crate::exec::ExecError {
        crate::exec::ExecError::Spawn {
            program: "prog".into(),
            source: std::io::Error::from_raw_os_error(errno),
        }
    }

    #[test]
    fn running_out_of_descriptors_is_busy_with_a_retry_time() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::EAGAIN] {
            let result = spawn_failure(&spawn_error(errno));
            assert_eq!(result.status, Status::Busy);
            let error = result.error.unwrap();
            assert_eq!(error.kind, crate::registry::kinds::RESOURCES_EXHAUSTED);
            assert!(error.retry_after_ms.unwrap() > 0);
        }
        assert_eq!(
            spawn_failure(&spawn_error(libc::EPERM)).status,
            Status::Error
        );
    }
}
