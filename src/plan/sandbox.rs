//! The sandbox part of a plan: the argv prefix that starts the command
//! through the sandbox personality, and the report file it writes its
//! attestation to, removed by a guard when the run is over.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{PlannerConfig, Rejection};
use crate::registry::kinds;
use crate::sandbox::{Network, Policy, SandboxSpec};

/// Owns a sandbox report file; removes it when dropped.
#[derive(Debug)]
pub struct ReportGuard {
    path: PathBuf,
}

impl ReportGuard {
    /// The report file.
    pub fn path(&self) -> &Path {
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
pub struct Confinement {
    pub policy: Policy,
    pub network: Network,
    pub writable_roots: Vec<PathBuf>,
    pub best_effort: bool,
}

/// The wrapper argv (empty when there is no sandbox link) and its report.
pub fn wrapper(
    config: &PlannerConfig,
    confinement: &Confinement,
    cwd: &Path,
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
    };
    let mut argv = spec.wrapper_argv(Path::new(link), cwd, Some(report.path()));
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

    #[test]
    fn the_report_file_goes_with_its_guard() {
        let dir = tempfile::tempdir().unwrap();
        let config = PlannerConfig {
            env: Default::default(),
            home: dir.path().to_path_buf(),
            sandbox_prefix: vec![
                "/x/exe".into(),
                "--agent-reach-run-as=agent-reach-sandbox".into(),
            ],
            apply_patch_prefix: Vec::new(),
            use_cgroup: false,
        };
        let confinement = Confinement {
            policy: Policy::ReadOnly,
            network: Network::Deny,
            writable_roots: Vec::new(),
            best_effort: false,
        };
        let (argv, report) = wrapper(&config, &confinement, Path::new("/w"), "t1").unwrap();
        assert_eq!(argv[0], "/x/exe");
        assert_eq!(argv[1], "--agent-reach-run-as=agent-reach-sandbox");
        assert!(argv.contains(&OsString::from("read-only")));
        let report = report.unwrap();
        let path = report.path().to_path_buf();
        std::fs::write(&path, "{}").unwrap();
        drop(report);
        assert!(!path.exists());
    }

    #[test]
    fn no_sandbox_link_is_an_error_not_an_unconfined_run() {
        let config = PlannerConfig {
            env: Default::default(),
            home: "/nonexistent".into(),
            sandbox_prefix: Vec::new(),
            apply_patch_prefix: Vec::new(),
            use_cgroup: false,
        };
        let confinement = Confinement {
            policy: Policy::ReadOnly,
            network: Network::Deny,
            writable_roots: Vec::new(),
            best_effort: false,
        };
        assert!(wrapper(&config, &confinement, Path::new("/w"), "t").is_err());
    }
}
