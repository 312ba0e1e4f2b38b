//! A snapshot of everything the process was started with: arguments,
//! environment, working directory and executable path.
//!
//! The process environment is global, mutable and not thread-safe; agent-reach
//! reads it exactly once, at dispatch, before any thread starts, and passes
//! this snapshot down. Library code never calls `std::env::var` itself, which
//! keeps it testable with an environment made up by the test.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The environment variable that counts how deeply agent-reach personalities
/// have re-executed themselves (the dispatch refuses a 32nd).
pub(crate) const DEPTH_VAR: &str = "AGENT_REACH_DEPTH";
/// Disables the per-execution cgroup (the `/proc` session-tag fallback is
/// used instead); for testing the fallback and for machines where creating
/// cgroups is unwanted.
pub(crate) const NO_CGROUP_VAR: &str = "AGENT_REACH_NO_CGROUP";
/// The environment variable naming agent-reach's state directory.
pub(crate) const HOME_VAR: &str = "AGENT_REACH_HOME";

/// What the process was started with.
#[derive(Debug, Clone)]
pub(crate) struct ProcessContext {
    /// The arguments after the personality was chosen (argv[0] excluded).
    pub(crate) args: Vec<OsString>,
    /// The full environment as it was at start.
    pub(crate) env: BTreeMap<OsString, OsString>,
    /// The working directory at start; `None` when it was deleted or unreadable.
    pub(crate) cwd: Option<PathBuf>,
    /// The running executable, as the kernel knows it (`/proc/self/exe`).
    pub(crate) exe: PathBuf,
    /// How many agent-reach personalities are above this one.
    pub(crate) depth: u32,
}

impl ProcessContext {
    /// Reads the real process state. Call only from dispatch, before threads.
    pub(crate) fn capture(args: Vec<OsString>) -> Self {
        let env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        let depth = env
            .get(OsStr::new(DEPTH_VAR))
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("agent-reach"));
        Self {
            args,
            env,
            cwd: std::env::current_dir().ok(),
            exe,
            depth,
        }
    }

    /// Commands get a cgroup of their own unless `AGENT_REACH_NO_CGROUP` is
    /// set (to anything but empty or `0`).
    pub(crate) fn cgroups_wanted(&self) -> bool {
        self.var(NO_CGROUP_VAR)
            .is_none_or(|v| v.is_empty() || v == "0")
    }

    /// One environment variable, if set.
    pub(crate) fn var(&self, name: &str) -> Option<&OsStr> {
        self.env.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// The home directory of the user (`$HOME`), if set and not empty.
    pub(crate) fn user_home(&self) -> Option<PathBuf> {
        self.var("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }

    /// agent-reach's state directory: `$AGENT_REACH_HOME`, else `~/.agent-reach`,
    /// else (no home at all) a directory under the system temp dir.
    pub(crate) fn agent_reach_home(&self) -> PathBuf {
        if let Some(home) = self.var(HOME_VAR).filter(|h| !h.is_empty()) {
            return PathBuf::from(home);
        }
        match self.user_home() {
            Some(home) => home.join(".agent-reach"),
            None => std::env::temp_dir().join("agent-reach"),
        }
    }

    /// The working directory, or an error naming why it is unusable.
    pub(crate) fn cwd(&self) -> std::io::Result<&Path> {
        self.cwd.as_deref().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the current working directory no longer exists or cannot be read",
            )
        })
    }
}
