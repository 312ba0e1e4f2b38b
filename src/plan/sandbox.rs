//! The sandbox part of a plan: the argv prefix that starts the command
//! through the sandbox personality, and the report file it writes its
//! attestation to, removed by a guard when the run is over.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{Planner, PlannerConfig, Rejection};
use crate::context::HOME_VAR;
use crate::exec::SpawnSpec;
use crate::registry::kinds;
use crate::sandbox::{Network, Policy, SandboxSpec};

/// Owns a sandbox report file; removes it when dropped.
#[derive(Debug)]
pub(crate) struct ReportGuard {
    path: PathBuf,
}

impl ReportGuard {
    /// The report file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ReportGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a planned command is confined by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confinement {
    pub(crate) policy: Policy,
    pub(crate) network: Network,
    pub(crate) writable_roots: Vec<PathBuf>,
    pub(crate) best_effort: bool,
}

/// Puts a planned spec under `policy` (none: left as it is): the wrapper
/// that starts it through the sandbox personality, with the operator's
/// writable roots and strictness, and the report file it attests to.
pub(crate) fn apply_sandbox(
    planner: &Planner,
    spec: &mut SpawnSpec,
    policy: Option<Policy>,
    network: Network,
) -> Result<Option<ReportGuard>, Rejection> {
    let Some(policy) = policy else {
        return Ok(None);
    };
    let confinement = Confinement {
        policy,
        network,
        writable_roots: planner.policy.writable_roots.clone(),
        best_effort: planner.policy.best_effort,
    };
    let (wrapper, report) = wrapper(&planner.config, &confinement, &spec.session_tag)?;
    spec.wrapper = wrapper;
    spec.wrapper_env = Some(wrapper_env(planner, spec.tty, &spec.session_tag));
    spec.attestation_file = report.as_ref().map(|r| r.path().to_path_buf());
    Ok(report)
}

/// The environment the wrapper itself starts with: agent-reach's own base
/// (what a command gets with no request variables: the engine's
/// whitelist, the operator's `[env]`, the session tag) and our real home.
/// The request's variables reach the command only after confinement.
pub(crate) fn wrapper_env(planner: &Planner, tty: bool, tag: &str) -> BTreeMap<OsString, OsString> {
    let operator: Vec<(OsString, OsString)> = planner
        .registry
        .iter()
        .flat_map(|registry| registry.settings.env.iter())
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    let mut env = crate::exec::child_env(&planner.config.env, &[], &operator, tty, tag);
    env.insert(
        HOME_VAR.into(),
        planner.config.home.clone().into_os_string(),
    );
    env
}

/// The wrapper argv (empty when there is no sandbox link) and its report.
pub(crate) fn wrapper(
    config: &PlannerConfig,
    confinement: &Confinement,
    tag: &str,
) -> Result<(Vec<OsString>, Option<ReportGuard>), Rejection> {
    let Some((link, extra)) = config.sandbox_prefix.split_first() else {
        return Err(Rejection::error(
            kinds::SPAWN_FAILED,
            "a sandbox was asked for, but this process has no sandbox link",
        ));
    };
    let dir = config.home.join("tmp");
    std::fs::create_dir_all(&dir).map_err(|e| {
        Rejection::error(
            kinds::SPAWN_FAILED,
            format!(
                "cannot create the sandbox report directory {}: {e}",
                dir.display()
            ),
        )
    })?;
    let report = ReportGuard {
        path: dir.join(format!("sandbox-{tag}.json")),
    };
    let spec = SandboxSpec {
        policy: confinement.policy,
        writable_roots: confinement.writable_roots.clone(),
        network: confinement.network,
        best_effort: confinement.best_effort,
        hidden: config.hidden_paths.clone(),
    };
    // `--cwd .`: the wrapper is started in the working directory's checked
    // handle (see `SpawnSpec::cwd`) and must not look its path up again.
    let mut argv = spec.wrapper_argv(Path::new(link), Path::new("."), Some(report.path()));
    // A prefix like `exe --agent-reach-run-as=agent-reach-sandbox` keeps its
    // extra words right after the program.
    for (i, word) in extra.iter().enumerate() {
        argv.insert(1 + i, word.clone());
    }
    Ok((argv, Some(report)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(home: &Path, sandbox_prefix: &[&str]) -> PlannerConfig {
        PlannerConfig {
            env: Default::default(),
            home: home.to_path_buf(),
            sandbox_prefix: sandbox_prefix.iter().map(OsString::from).collect(),
            apply_patch_prefix: Vec::new(),
            use_cgroup: false,
            hidden_paths: vec![PathBuf::from("/etc/agent-reach/token")],
        }
    }

    fn read_only() -> Confinement {
        Confinement {
            policy: Policy::ReadOnly,
            network: Network::Deny,
            writable_roots: Vec::new(),
            best_effort: false,
        }
    }

    #[test]
    fn the_report_file_goes_with_its_guard() {
        let dir = tempfile::tempdir().unwrap();
        let config = config(
            dir.path(),
            &["/x/exe", "--agent-reach-run-as=agent-reach-sandbox"],
        );
        let (argv, report) = wrapper(&config, &read_only(), "t1").unwrap();
        assert_eq!(argv[0], "/x/exe");
        assert_eq!(argv[1], "--agent-reach-run-as=agent-reach-sandbox");
        assert!(argv.contains(&OsString::from("read-only")));
        let hide = argv.iter().position(|word| word == "--hide").unwrap();
        assert_eq!(argv[hide + 1], "/etc/agent-reach/token");
        let cwd = argv.iter().position(|a| a == "--cwd").unwrap();
        assert_eq!(
            argv[cwd + 1],
            ".",
            "the wrapper stays in the directory it was started in"
        );
        let report = report.unwrap();
        let path = report.path().to_path_buf();
        std::fs::write(&path, "{}").unwrap();
        drop(report);
        assert!(!path.exists());
    }

    #[test]
    fn no_sandbox_link_is_an_error_not_an_unconfined_run() {
        let config = config(Path::new("/nonexistent"), &[]);
        assert!(wrapper(&config, &read_only(), "t").is_err());
    }
}
