//! The registry flags `exec`, `serve`, `doctor` and Windows' `exec` take
//! (`--config`, `--profile`, `--root`): the project root they name and the
//! registry they load, on both platforms (the dispatcher and the reload
//! built on them are Linux's, in `super::source`).

use std::path::{Path, PathBuf};

use crate::context::ProcessContext;
use crate::exit_code;
use crate::registry::{Registry, RegistryError};

/// `--config`, `--profile`, `--root`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct RegistryArgs {
    /// The registry file (default: the built-in registry).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Narrow the registry to one of its profiles.
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) profile: Option<String>,
    /// The project root: default working directory, and the root `path`
    /// parameters are confined to (default: the current directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) root: Option<PathBuf>,
}

impl RegistryArgs {
    /// The project root: `--root` (relative to the working directory), else
    /// the working directory; resolved, and a directory. The error is one
    /// line naming the path.
    pub(crate) fn project_root(&self, ctx: &ProcessContext) -> Result<PathBuf, String> {
        let given = match (&self.root, ctx.cwd()) {
            (Some(root), Ok(cwd)) => cwd.join(root),
            (Some(root), Err(_)) => root.clone(),
            (None, Ok(cwd)) => cwd.to_path_buf(),
            (None, Err(e)) => return Err(format!("{e}; pass --root DIR")),
        };
        let root = given
            .canonicalize()
            .map_err(|e| format!("--root {}: {e}", given.display()))?;
        if !root.is_dir() {
            return Err(format!("--root {} is not a directory", root.display()));
        }
        Ok(root)
    }

    /// The registry these flags name, for `root`.
    pub(crate) fn load(&self, root: &Path) -> Result<Registry, RegistryError> {
        Registry::load(self.config.as_deref(), self.profile.as_deref(), root)
    }
}

/// The exit code of `exec --json`/`--jsonl` for a registry that does not
/// load, which the contract's result section fixes: 2 for what the command
/// line names (a `--config` file missing or unreadable, an unknown
/// `--profile`, a root), 125 for a config that reads but does not load.
pub(crate) fn exec_exit_code(err: &RegistryError) -> i32 {
    match err {
        RegistryError::Read { .. }
        | RegistryError::UnknownProfile { .. }
        | RegistryError::Root { .. } => exit_code::USAGE,
        RegistryError::Invalid { .. } => exit_code::INTERNAL,
    }
}
