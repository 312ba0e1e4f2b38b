//! Setting up a process that runs commands for others: the session PATH
//! directory and the child subreaper, both before any thread starts.
//!
//! `std::env::set_var` is unsound once other threads exist, and the tokio
//! runtime starts threads; so `serve`, `run`, `exec` and `shell` call
//! [`Session::start`] first thing, on the dispatch thread.

use std::ffi::OsStr;

use crate::context::ProcessContext;
use crate::path_guard::{PathGuard, PathGuardError};

/// The per-process session state: holds the PATH directory alive.
#[derive(Debug)]
pub struct Session {
    /// Owns `$AGENT_REACH_HOME/tmp/path/<random>`.
    pub path_guard: PathGuard,
}

impl Session {
    /// Creates the PATH directory, puts it first on this process's PATH (and
    /// on `ctx.env`, which children's environments are built from) and makes
    /// this process a child subreaper so orphaned grandchildren come back to
    /// us instead of init, where we can still kill them.
    pub fn start(ctx: &mut ProcessContext) -> Result<Self, PathGuardError> {
        let path_guard = PathGuard::create(&ctx.agent_reach_home(), &ctx.exe)?;
        let new_path = path_guard.prepend_to(ctx.var("PATH"));
        // SAFETY: called from dispatch before any thread is started.
        unsafe { std::env::set_var("PATH", &new_path) };
        ctx.env.insert("PATH".into(), new_path);
        #[cfg(target_os = "linux")]
        {
            // Failure only weakens orphan cleanup; the engine also scans /proc.
            let _ = nix::sys::prctl::set_child_subreaper(true);
        }
        Ok(Self { path_guard })
    }

    /// The directory that holds the personality links.
    pub fn path_dir(&self) -> &std::path::Path {
        self.path_guard.dir()
    }

    /// The link that starts the sandbox personality.
    pub fn sandbox_link(&self) -> std::path::PathBuf {
        self.path_dir().join(OsStr::new("agent-reach-sandbox"))
    }
}
