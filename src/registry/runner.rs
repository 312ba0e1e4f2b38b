//! The seam between the registry and the exec engine: "run this argv, here,
//! with this environment, and give me the normalized result".
//!
//! The dispatcher only knows [`Runner`]; the process runner (and tests'
//! fakes) implement it, so validation, policy, scheduling and caching are
//! tested without processes.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use crate::result::NormalizedResult;

/// Everything needed to run one command, fully resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPlan {
    /// The program and its arguments (never a shell line).
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    /// The child's complete environment.
    pub env: BTreeMap<OsString, OsString>,
    pub tty: bool,
    /// The command timeout (killed, `status: timeout`).
    pub timeout: Option<Duration>,
    /// An argv prefix, e.g. the sandbox link and its flags; empty = none.
    pub wrapper: Vec<OsString>,
    /// Where the sandbox wrapper writes what it enforced (`--report`).
    pub attestation_file: Option<PathBuf>,
    /// Values redacted from everything the command prints.
    pub secrets: Vec<(String, Vec<u8>)>,
    pub max_output_tokens: usize,
    /// `$AGENT_REACH_HOME`, for spill files.
    pub home: PathBuf,
    /// Tags the command's processes (`AGENT_REACH_SESSION`); unique per run.
    pub session_tag: String,
}

/// A boxed future, so runners can be trait objects.
pub type RunFuture<'a> = Pin<Box<dyn Future<Output = NormalizedResult> + Send + 'a>>;

/// Runs a plan to completion. The result's `id`, `tool` and `cached` are
/// filled by the caller.
pub trait Runner: Send + Sync + 'static {
    fn run(&self, plan: RunPlan) -> RunFuture<'_>;
}
