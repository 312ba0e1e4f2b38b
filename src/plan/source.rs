//! The registry source that `exec`, `serve` and `tools` all take
//! (`--config`, `--profile`, `--root`), and the one way it becomes a loaded
//! registry and, in a process with a session, a dispatcher.

use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use super::registry_args::RegistryArgs;
use super::{Dispatcher, DispatcherConfig};
use crate::context::ProcessContext;
use crate::exit_code;
use crate::path_guard::ProcessSession;
use crate::registry::RegistryError;

impl RegistryArgs {
    /// Loads the registry and profile again and swaps them into
    /// `dispatcher` (`SIGHUP`); a file that does not load is refused and
    /// logged, and the old registry stays. Returns how many tools it has.
    pub(crate) fn reload_into(
        &self,
        root: &Path,
        dispatcher: &Dispatcher,
    ) -> Result<usize, RegistrySetupError> {
        let loaded = self
            .load(root)
            .map_err(RegistrySetupError::from)
            .and_then(|registry| {
                let tools = registry.tools().count();
                dispatcher.reload(registry)?;
                Ok(tools)
            });
        match &loaded {
            Ok(tools) => tracing::info!(tools, "the registry was reloaded"),
            Err(e) => tracing::error!(error = %e, "the registry did not reload; the old one stays"),
        }
        loaded
    }
}

/// Takes `SIGHUP` now (from here on it no longer ends the process) and
/// returns the loop that reloads `args`'s registry into `dispatcher` at
/// each one, calling `reloaded` after each reload that took; it runs until
/// its task is dropped. `None` (logged) where no handler can be installed.
/// Call it within the runtime.
pub(crate) fn reload_on_hangup<F, Fut>(
    args: RegistryArgs,
    root: PathBuf,
    dispatcher: Arc<Dispatcher>,
    reloaded: F,
) -> Option<impl std::future::Future<Output = ()> + Send + 'static>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(hup) => hup,
        Err(e) => {
            tracing::warn!(error = %e, "no SIGHUP handler: the registry cannot be reloaded");
            return None;
        }
    };
    Some(async move {
        while hup.recv().await.is_some() {
            if args.reload_into(&root, &dispatcher).is_ok() {
                reloaded().await;
            }
        }
    })
}

/// Why a registry-using subcommand could not get going.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistrySetupError {
    /// The project root is unusable (a usage error: exit 2).
    #[error("{0}")]
    Root(String),
    /// The registry did not load.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The dispatcher could not be built from it.
    #[error(transparent)]
    Dispatcher(#[from] crate::plan::dispatcher::DispatcherError),
}

impl RegistrySetupError {
    /// The exit code of a subcommand of the common convention (`serve`):
    /// a root, a config or a secrets file that cannot be used is usage, 2.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            RegistrySetupError::Root(_)
            | RegistrySetupError::Registry(_)
            | RegistrySetupError::Dispatcher(_) => exit_code::USAGE,
        }
    }

    /// The exit code of `exec --json`/`--jsonl`, which the contract's result
    /// section fixes: 2 for bad usage (a root, a `--config` file that is
    /// missing or unreadable, an unknown `--profile`: what the command line
    /// names), 125 for a bad config (one that reads but does not load, a
    /// refused secrets file).
    pub(crate) fn exec_exit_code(&self) -> i32 {
        match self {
            RegistrySetupError::Root(_) => exit_code::USAGE,
            RegistrySetupError::Registry(err) => super::registry_args::exec_exit_code(err),
            RegistrySetupError::Dispatcher(_) => exit_code::INTERNAL,
        }
    }
}

impl RegistryArgs {
    /// The project root, the registry and a dispatcher whose commands run
    /// with this process's session: its PATH entry, its sandbox link, its
    /// agent-reach home.
    pub(crate) fn session_dispatcher(
        &self,
        ctx: &ProcessContext,
        session: &ProcessSession,
        sandbox_override: Option<crate::sandbox::Policy>,
        hidden_paths: Vec<PathBuf>,
    ) -> Result<(PathBuf, Arc<Dispatcher>), RegistrySetupError> {
        let root = self.project_root(ctx).map_err(RegistrySetupError::Root)?;
        let registry = self.load(&root)?;
        let mut config = DispatcherConfig::for_session(
            ctx.env.clone(),
            ctx.agent_reach_home(),
            session.path_dir(),
            ctx.cgroups_wanted(),
        );
        config.sandbox_override = sandbox_override;
        config.hidden_paths = hidden_paths;
        let dispatcher = Dispatcher::new(registry, config)?;
        Ok((root, Arc::new(dispatcher)))
    }
}
