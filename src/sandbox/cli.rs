//! The `agent-reach-sandbox` personality and `agent-reach sandbox`: parse the
//! flags, plan the rules, confine this process, attest, exec the command.
//!
//! Order: `no_new_privs`, then Landlock, then seccomp, then exec. Landlock
//! comes before seccomp so that its own setup (opening each rule's path,
//! the `landlock_*` calls) runs before any filter exists and can never be
//! refused by one; seccomp is installed last, immediately before exec, so
//! nothing of ours runs under it except writing the report and the exec
//! itself. Both restrictions survive exec and can only be tightened later.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::context::ProcessContext;
use crate::exit_code;

use super::args::{self, REPORT_VAR, SandboxRequest};
use super::attestation::{self, FsLevel, NetLevel};
use super::error::SandboxError;
use super::fs_plan::{self, FsPlan, RuleFile};
use super::landlock_rules::{self, FULL_FS_ABI};
use super::launch;
use super::policy::{Network, Policy};
use super::seccomp_rules;

/// Confines the command, then execs it; returns only on failure.
pub fn main(ctx: &ProcessContext) -> i32 {
    let report_env = ctx
        .var(REPORT_VAR)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from);
    let request = match args::parse(&ctx.args, report_env) {
        Ok(request) => request,
        Err(err) => return usage_exit(&err),
    };
    let err = confine_and_exec(ctx, &request);
    eprintln!("agent-reach-sandbox: {err}");
    err.exit_code()
}

fn usage_exit(err: &clap::Error) -> i32 {
    use clap::error::ErrorKind;
    let _ = err.print();
    match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => exit_code::SUCCESS,
        _ => exit_code::INTERNAL,
    }
}

/// Everything from the parsed request to the exec; the error says what stopped it.
fn confine_and_exec(ctx: &ProcessContext, request: &SandboxRequest) -> SandboxError {
    match prepare_and_confine(ctx, request) {
        Ok(()) => {
            let env: Vec<(OsString, OsString)> = ctx
                .env
                .iter()
                .filter(|(name, _)| name.as_os_str() != REPORT_VAR)
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            launch::exec(&request.command, &env)
        }
        Err(err) => err,
    }
}

fn prepare_and_confine(ctx: &ProcessContext, request: &SandboxRequest) -> Result<(), SandboxError> {
    let spec = &request.spec;
    let cwd = working_dir(ctx, request.cwd.as_deref())?;
    let mut report = request
        .report
        .as_deref()
        .map(|path| {
            std::fs::File::create(path)
                .map(|file| (path, file))
                .map_err(|source| SandboxError::Report {
                    path: path.to_path_buf(),
                    source,
                })
        })
        .transpose()?;
    std::env::set_current_dir(&cwd).map_err(|source| SandboxError::Cwd {
        path: cwd.clone(),
        source,
    })?;
    let plan = match spec.policy {
        Policy::DangerFullAccess => None,
        Policy::ReadOnly | Policy::WorkspaceWrite => {
            Some(build_plan(ctx, spec.policy, &cwd, &spec.writable_roots)?)
        }
    };

    nix::sys::prctl::set_no_new_privs().map_err(SandboxError::NoNewPrivs)?;
    let mut not_enforced: Vec<String> = Vec::new();

    let (fs, abi) = match &plan {
        None => (FsLevel::None, None),
        Some(plan) => {
            let outcome = landlock_rules::restrict(plan, spec.network)?;
            match (outcome.fs, spec.best_effort) {
                (FsLevel::Enforced, _) => {}
                (FsLevel::None, false) => {
                    return Err(SandboxError::LandlockMissing {
                        policy: spec.policy.as_str(),
                        reason: outcome
                            .unavailable
                            .unwrap_or("the kernel refused the ruleset")
                            .to_owned(),
                    });
                }
                (FsLevel::Partial, false) => {
                    return Err(SandboxError::LandlockTooOld {
                        policy: spec.policy.as_str(),
                        abi: outcome.abi.unwrap_or(0),
                    });
                }
                (FsLevel::None, true) => not_enforced.push(format!(
                    "filesystem rules ({})",
                    outcome
                        .unavailable
                        .unwrap_or("the kernel refused the ruleset")
                )),
                (FsLevel::Partial, true) => not_enforced.push(format!(
                    "truncation and cross-directory rules (Landlock ABI {} < {FULL_FS_ABI})",
                    outcome.abi.unwrap_or(0)
                )),
            }
            (outcome.fs, outcome.abi)
        }
    };

    let filters = seccomp_rules::filters(spec.network)?;
    let net = match (seccomp_rules::install(&filters), spec.best_effort) {
        (Ok(()), _) => match spec.network {
            Network::Deny => NetLevel::Enforced,
            Network::Allow => NetLevel::None,
        },
        (Err(err), false) => return Err(err),
        (Err(err), true) => {
            not_enforced.push(format!("seccomp ({err})"));
            NetLevel::None
        }
    };
    if spec.network == Network::Deny && net == NetLevel::Enforced {
        close_inherited_network_sockets();
    }

    if let Some((path, file)) = report.as_mut() {
        let value = attestation::attestation(fs, net, abi);
        let mut bytes = serde_json::to_vec(&value).unwrap_or_default();
        bytes.push(b'\n');
        file.write_all(&bytes)
            .map_err(|source| SandboxError::Report {
                path: path.to_path_buf(),
                source,
            })?;
    }
    for what in &not_enforced {
        eprintln!("agent-reach-sandbox: --best-effort: not enforced: {what}");
    }
    Ok(())
}

fn working_dir(ctx: &ProcessContext, flag: Option<&Path>) -> Result<PathBuf, SandboxError> {
    match flag {
        Some(dir) => {
            let base = ctx.cwd.as_deref().unwrap_or(Path::new("/"));
            base.join(dir)
                .canonicalize()
                .map_err(|source| SandboxError::Cwd {
                    path: dir.to_path_buf(),
                    source,
                })
        }
        None => ctx
            .cwd()
            .and_then(Path::canonicalize)
            .map_err(SandboxError::NoCwd),
    }
}

/// Plans the filesystem rules from the real filesystem: canonical roots
/// (an explicit root that does not exist is an error; `/tmp` or `$TMPDIR`
/// missing is not), their protected paths, and the devices present.
fn build_plan(
    ctx: &ProcessContext,
    policy: Policy,
    cwd: &Path,
    explicit: &[PathBuf],
) -> Result<FsPlan, SandboxError> {
    let rules = RuleFile::builtin().map_err(|err| SandboxError::SeccompPolicy {
        name: "landlock.toml",
        message: err.to_string(),
    })?;
    let mut explicit_roots = Vec::with_capacity(explicit.len());
    if policy == Policy::WorkspaceWrite {
        for root in explicit {
            let canonical =
                cwd.join(root)
                    .canonicalize()
                    .map_err(|source| SandboxError::WritableRoot {
                        path: root.clone(),
                        source,
                    })?;
            explicit_roots.push(canonical);
        }
    }
    let var = |name: &str| ctx.var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let roots: Vec<PathBuf> = fs_plan::candidate_roots(policy, cwd, &explicit_roots, &rules, var)
        .iter()
        .filter_map(|root| root.canonicalize().ok())
        .collect();
    let mut protected = Vec::new();
    for root in &roots {
        protected.extend(fs_plan::protected_paths_for_root(
            root,
            &rules,
            |path| {
                std::fs::symlink_metadata(path)
                    .ok()
                    .map(|meta| meta.file_type().is_file())
            },
            |path| std::fs::read_to_string(path).ok(),
            |path| path.canonicalize().ok(),
        ));
    }
    let writable = fs_plan::split_writable(&roots, &explicit_roots, &protected, fs_plan::list_dir);
    let devices = rules
        .devices
        .iter()
        .chain(&rules.device_dirs)
        .filter(|path| path.exists())
        .cloned()
        .collect();
    Ok(FsPlan { writable, devices })
}

/// A socket inherited from our parent keeps its family, and seccomp cannot
/// see the family of an existing descriptor; so with the network denied,
/// inherited non-Unix sockets beyond stdio are closed before exec.
fn close_inherited_network_sockets() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    for fd in fds {
        if socket_domain(fd).is_some_and(|domain| domain != libc::AF_UNIX) {
            // SAFETY: closing a descriptor we own no Rust object for; nothing
            // else in this single-threaded process uses it before exec.
            unsafe { libc::close(fd) };
        }
    }
}

fn socket_domain(fd: i32) -> Option<i32> {
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `domain` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(domain)
}
