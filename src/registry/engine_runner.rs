//! The [`Runner`] for real use: each plan becomes a [`SpawnSpec`] for the
//! exec engine (`crate::exec`), which owns process groups, timeouts, kill
//! escalation, escapee cleanup, streaming redaction and spill files.

use crate::exec::{Execution, RenderOptions, SpawnSpec};
use crate::exit_code;
use crate::result::{NormalizedResult, Status};

use super::runner::{RunFuture, RunPlan, Runner};

/// Runs plans through the exec engine.
#[derive(Debug, Default, Clone, Copy)]
pub struct EngineRunner;

impl Runner for EngineRunner {
    fn run(&self, plan: RunPlan) -> RunFuture<'_> {
        Box::pin(run(plan))
    }
}

async fn run(plan: RunPlan) -> NormalizedResult {
    let attestation_file = plan.attestation_file.clone();
    let mut spec = SpawnSpec::new(plan.argv, plan.cwd, plan.env, plan.home);
    spec.tty = plan.tty;
    spec.timeout = plan.timeout;
    spec.wrapper = plan.wrapper;
    spec.attestation_file = plan.attestation_file;
    spec.secrets = plan.secrets;
    spec.session_tag = plan.session_tag;
    let options = RenderOptions {
        max_output_tokens: plan.max_output_tokens,
        keep_color: false,
    };
    let result = match Execution::spawn(spec) {
        Ok(execution) => execution.finish(&options).await.to_result(None, None),
        Err(err) => {
            let code = err.exit_code();
            let status = if code == exit_code::INTERNAL {
                Status::Error
            } else {
                Status::Failure
            };
            let mut result =
                NormalizedResult::refused(None, None, status, err.kind(), err.to_string());
            if status == Status::Failure {
                result.exit_code = Some(code);
            }
            result
        }
    };
    if let Some(file) = attestation_file {
        let _ = std::fs::remove_file(file);
    }
    result
}
