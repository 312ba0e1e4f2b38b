//! The end of a one-shot execution: how it exited, its rendered output, and
//! the normalized result the contract fixes (with the highlights of both
//! streams, and a timeout's error).

use std::path::PathBuf;
use std::time::Duration;

use super::execution::Execution;
use super::glue::{RenderOptions, Rendered};
use super::state::{Captures, ExitInfo};
use crate::output::highlights::{Found, Highlight};
use crate::result::{
    FullOutputPaths, NormalizedResult, OriginalBytes, ResultError, SandboxAttestation, Status,
};

/// A finished command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    pub exit: ExitInfo,
    pub stdout: Rendered,
    pub stderr: Rendered,
    /// From the start to the exit.
    pub duration: Duration,
    /// Some output was left out of `stdout` or `stderr`.
    pub truncated: bool,
    pub(crate) original_bytes: OriginalBytes,
    /// The spill file with the full output of a truncated stream: stdout's
    /// if it was folded, else stderr's.
    pub full_output_path: Option<PathBuf>,
    /// Each folded stream's spill file (stdout, stderr).
    pub full_output_paths: [Option<PathBuf>; 2],
    /// Processes the command started that could not be killed.
    pub survivors: Vec<u32>,
    /// What the sandbox wrapper reported, when there was one.
    pub(crate) sandbox: Option<SandboxAttestation>,
    /// The lines of both streams that carry a failure (at most 8, in the
    /// order they arrived), whatever the exit.
    pub highlights: Vec<Highlight>,
    /// The command timeout it ran under.
    pub(crate) timeout: Option<Duration>,
}

impl Completed {
    pub(super) fn build(execution: &Execution, opts: &RenderOptions, survivors: Vec<u32>) -> Self {
        let exit = execution.exit_info().unwrap_or(ExitInfo {
            code: None,
            signal: None,
            timed_out: false,
        });
        let started = execution.started_at();
        let (stdout, stderr, paths) = execution.with_state(|state| {
            let duration_end = state.exited_at.unwrap_or_else(std::time::Instant::now);
            let rendered = match &state.captures {
                Captures::Separate { stdout, stderr } => (
                    stdout.whole(opts),
                    stderr.whole(opts),
                    [stdout.spill_path(), stderr.spill_path()],
                ),
                Captures::Merged(sink) => (
                    sink.whole(opts),
                    Rendered::default(),
                    [sink.spill_path(), None],
                ),
            };
            (
                rendered.0,
                rendered.1,
                (rendered.2, duration_end, state.windows_taken),
            )
        });
        let (spills, ended, windows_taken) = paths;
        if !windows_taken {
            // Nothing names a spill file whose stream was shown whole: it
            // would only crowd the store (and evict files that matter).
            for (spill, rendered) in spills.iter().zip([&stdout, &stderr]) {
                if let Some(path) = spill.as_ref().filter(|_| !rendered.truncated) {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        let full_output_paths = [
            spills[0].clone().filter(|_| stdout.truncated),
            spills[1].clone().filter(|_| stderr.truncated),
        ];
        let full_output_path = full_output_paths[0]
            .clone()
            .or_else(|| full_output_paths[1].clone());
        let sandbox = execution
            .spec()
            .attestation_file
            .as_deref()
            .and_then(crate::result::SandboxAttestation::read);
        let found = Found::of_streams(&stdout.highlights, &stderr.highlights);
        Self {
            exit,
            truncated: stdout.truncated || stderr.truncated,
            original_bytes: OriginalBytes {
                stdout: stdout.original_bytes,
                stderr: stderr.original_bytes,
            },
            stdout,
            stderr,
            duration: ended.saturating_duration_since(started),
            full_output_path,
            full_output_paths,
            survivors,
            sandbox,
            highlights: found.select(),
            timeout: execution.spec().timeout,
        }
    }

    /// The contract's normalized result.
    pub(crate) fn to_result(
        &self,
        id: Option<serde_json::Value>,
        tool: Option<String>,
    ) -> NormalizedResult {
        let status = self.exit.status();
        let error = if status == Status::Timeout {
            Some(ResultError::timeout(self.timeout, self.survivors.clone()))
        } else if self.survivors.is_empty() {
            None
        } else {
            Some(ResultError {
                kind: "survivors".into(),
                message: format!(
                    "{} process(es) the command started could not be killed: {:?}",
                    self.survivors.len(),
                    self.survivors
                ),
                retry_after_ms: None,
                survivors: self.survivors.clone(),
            })
        };
        NormalizedResult {
            id,
            tool,
            status,
            exit_code: Some(self.exit.exit_code()),
            signal: self.exit.signal,
            stdout: self.stdout.text.clone(),
            stderr: self.stderr.text.clone(),
            duration_ms: u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX),
            truncated: self.truncated,
            original_bytes: self.original_bytes,
            full_output_path: self
                .full_output_path
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            full_output_paths: FullOutputPaths {
                stdout: self.full_output_paths[0]
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned()),
                stderr: self.full_output_paths[1]
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned()),
            },
            sandbox: self.sandbox.clone(),
            cached: false,
            error,
            capped: Vec::new(),
            highlights: crate::result::highlights_for(status, &self.highlights),
        }
    }
}
