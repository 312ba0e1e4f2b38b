//! What to run and how: a plain value built by the caller (`run`, a session,
//! a registry tool) and handed to [`crate::exec::Execution::spawn`].
//!
//! The command timeout lives here; the yield time of sessions does not: it is
//! a parameter of `Execution::wait`, because it only hands control back and
//! never kills anything.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// How long a command gets between SIGTERM and SIGKILL.
pub(crate) const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);
/// How long the output readers may go on after the command is gone, so that
/// a grandchild still holding the pipe cannot block the caller.
pub(crate) const DEFAULT_DRAIN: Duration = Duration::from_secs(2);
/// Bytes of each stream held in memory (head plus rolling tail).
pub(crate) const DEFAULT_CAP_BYTES: usize = 1024 * 1024;
/// Bytes all spill files under `$AGENT_REACH_HOME/spill` may take together.
pub(crate) const DEFAULT_SPILL_CAP_BYTES: u64 = 64 * 1024 * 1024;

/// How much output is kept and where the rest goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes of each stream held in memory.
    pub cap_bytes: usize,
    /// Total size of the spill directory; oldest files go first.
    pub spill_cap_bytes: u64,
    /// Write the full output to a spill file (so a fold can name it).
    pub spill: bool,
    /// Keep SGR colour sequences instead of stripping them.
    pub keep_color: bool,
    /// Keep the blanks at the end of lines instead of dropping them.
    pub keep_blanks: bool,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            cap_bytes: DEFAULT_CAP_BYTES,
            spill_cap_bytes: DEFAULT_SPILL_CAP_BYTES,
            spill: true,
            keep_color: false,
            keep_blanks: false,
        }
    }
}

/// Everything needed to start one command.
#[derive(Debug, Clone)]
pub struct SpawnSpec {
    /// The command and its arguments, run without a shell.
    pub argv: Vec<OsString>,
    /// The working directory: always explicit, opened before the start; the
    /// child enters that handle (`fchdir`), never the path.
    pub cwd: PathBuf,
    /// When set, `cwd` is resolved beneath this directory by the kernel
    /// (`openat2` with `RESOLVE_BENEATH`) as it is opened, so a directory
    /// swapped for a link after the plan cannot lead the command out of it.
    pub cwd_beneath: Option<PathBuf>,
    /// The complete environment (see [`crate::exec::env::child_env`]).
    pub env: BTreeMap<OsString, OsString>,
    /// Run on a pseudo-terminal instead of pipes.
    pub tty: bool,
    /// The command timeout: at it the command is killed and ends with 124.
    /// `None` = never.
    pub timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL.
    pub kill_grace: Duration,
    /// How long output is still read once the command is gone.
    pub drain: Duration,
    /// An argv prefix the command is started through (the sandbox link and
    /// its flags); empty = none.
    pub wrapper: Vec<OsString>,
    /// With a wrapper: the wrapper's own environment (agent-reach's base,
    /// without the request's variables). `env` then reaches the command
    /// only on a descriptor the wrapper reads once it is confined
    /// ([`crate::sandbox::env_fd`]). `None`: the wrapper gets `env`.
    pub wrapper_env: Option<BTreeMap<OsString, OsString>>,
    /// A file the wrapper writes its attestation to (`--report FILE`), read
    /// after the exit.
    pub attestation_file: Option<PathBuf>,
    /// Values that never leave agent-reach: `(NAME, value)`, replaced by
    /// `[REDACTED:NAME]` in all output.
    pub secrets: Vec<(String, Vec<u8>)>,
    /// Output caps and spilling.
    pub limits: OutputLimits,
    /// `$AGENT_REACH_HOME`: spill files go under it.
    pub home: PathBuf,
    /// The value of `AGENT_REACH_SESSION` in the child's environment; also
    /// names the execution's cgroup. Must be unique per execution.
    pub session_tag: String,
    /// Feed stdout and stderr into one capture in arrival order (sessions);
    /// otherwise they are kept apart (one-shot results). Sessions (this or
    /// `tty`) also keep the newest output for `wait_for` patterns.
    pub merge_output: bool,
    /// Processes the command (with all it starts) may have at once; `None`:
    /// no limit of ours (see [`crate::exec::pids_limit`]).
    pub pids_limit: Option<u64>,
    /// Put the command in a cgroup v2 of its own when one can be created
    /// (otherwise escapees are found through the session tag).
    pub use_cgroup: bool,
}

impl SpawnSpec {
    /// A spec with the defaults: pipes, no timeout, 2 s grace and drain, no
    /// wrapper, no secrets, default limits, a fresh session tag.
    pub fn new(
        argv: Vec<OsString>,
        cwd: PathBuf,
        env: BTreeMap<OsString, OsString>,
        home: PathBuf,
    ) -> Self {
        Self {
            argv,
            cwd,
            cwd_beneath: None,
            env,
            tty: false,
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            drain: DEFAULT_DRAIN,
            wrapper: Vec::new(),
            wrapper_env: None,
            attestation_file: None,
            secrets: Vec::new(),
            limits: OutputLimits::default(),
            home,
            session_tag: new_session_tag(),
            merge_output: false,
            pids_limit: Some(super::pids_limit::DEFAULT_PIDS_LIMIT),
            use_cgroup: true,
        }
    }
}

/// A tag unique on this machine for the lifetime of the process: our pid, a
/// counter and the clock, so two agent-reach processes never share one.
pub fn new_session_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("ar-{}-{n}-{nanos:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_tags_are_unique_and_name_safe() {
        let a = new_session_tag();
        let b = new_session_tag();
        assert_ne!(a, b);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }

    #[test]
    fn defaults_are_pipes_without_timeout() {
        let spec = SpawnSpec::new(
            vec!["true".into()],
            "/".into(),
            BTreeMap::new(),
            "/h".into(),
        );
        assert!(!spec.tty);
        assert_eq!(spec.timeout, None);
        assert_eq!(spec.kill_grace, DEFAULT_KILL_GRACE);
        assert_eq!(spec.limits.cap_bytes, DEFAULT_CAP_BYTES);
    }
}
