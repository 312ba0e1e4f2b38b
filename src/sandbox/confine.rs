//! Confinement, in order: `no_new_privs`, then Landlock, then seccomp, then
//! exec. Landlock comes before seccomp so that its own setup (opening each
//! rule's path, the `landlock_*` calls, and before them the optional mount
//! namespace for `.git`) runs before any filter exists and can never be
//! refused by one; seccomp is installed last, immediately before exec, so
//! nothing of ours runs under it except writing the report and the exec
//! itself. Both restrictions survive exec and can only be tightened later.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::context::ProcessContext;

use super::args::{REPORT_VAR, SandboxRequest};
use super::attestation::{self, FsLevel, NetLevel};
use super::env_fd::{self, ENV_FD_VAR};
use super::error::SandboxError;
use super::fs_plan::{self, FsPlan, RuleFile};
use super::hidden;
use super::landlock_rules::{self, FULL_FS_ABI, LandlockOutcome};
use super::launch;
use super::policy::{Network, Policy};
use super::read_only_mounts;
use super::seccomp_rules;

/// Everything from the parsed request to the exec; the error says what stopped it.
pub(crate) fn confine_and_exec(ctx: &ProcessContext, request: &SandboxRequest) -> SandboxError {
    if let Err(err) = prepare_and_confine(ctx, request) {
        return err;
    }
    match command_env(ctx) {
        Ok(env) => launch::exec(&request.command, &env),
        Err(err) => err,
    }
}

/// The command's environment, read only now that we are confined: the
/// block the engine handed over on [`ENV_FD_VAR`]'s descriptor, or, when
/// started by hand without one, ours; our own variables left out.
fn command_env(ctx: &ProcessContext) -> Result<Vec<(OsString, OsString)>, SandboxError> {
    let env = match ctx.var(ENV_FD_VAR) {
        None => ctx
            .env
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect(),
        Some(value) => {
            let fd = env_fd::parse_fd(value).ok_or_else(|| SandboxError::EnvFd {
                value: value.to_owned(),
                source: std::io::Error::from_raw_os_error(libc::EBADF),
            })?;
            env_fd::take(fd).map_err(|source| SandboxError::EnvFd {
                value: value.to_owned(),
                source,
            })?
        }
    };
    Ok(env
        .into_iter()
        .filter(|(name, _)| name.as_os_str() != REPORT_VAR && name.as_os_str() != ENV_FD_VAR)
        .collect())
}

fn prepare_and_confine(ctx: &ProcessContext, request: &SandboxRequest) -> Result<(), SandboxError> {
    let spec = &request.spec;
    let (entered, cwd) = working_dir(request.cwd.as_deref())?;
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
    let plan = match spec.policy {
        Policy::DangerFullAccess => None,
        Policy::ReadOnly | Policy::WorkspaceWrite => {
            Some(build_plan(ctx, spec.policy, &cwd, &spec.writable_roots)?)
        }
    };
    let mut not_enforced: Vec<String> = Vec::new();
    if let Some(plan) = &plan {
        // In the namespace the plan made (or one of its own): before
        // Landlock, whose scoping is what makes the fresh /proc hide.
        let outcome = hidden::hide(&spec.hidden, plan.read_only_mounts);
        if let Some(err) = outcome.files {
            if !spec.best_effort {
                return Err(SandboxError::Hide(err));
            }
            not_enforced.push(format!("hiding a secret ({err})"));
        }
        if let Some(err) = outcome.proc
            && spec.best_effort
        {
            not_enforced.push(format!("a private /proc ({err})"));
        }
    }
    // A mount namespace made by the plan put the writable roots' mounts on
    // top of the directory we are in: enter it again by path, and refuse a
    // path that no longer names the directory we were started in.
    if plan.as_ref().is_some_and(|plan| plan.read_only_mounts) {
        reenter(&entered, &cwd)?;
    }
    nix::sys::prctl::set_no_new_privs().map_err(SandboxError::NoNewPrivs)?;

    let (fs, abi) = match &plan {
        None => (FsLevel::None, None),
        Some(plan) => {
            let mut outcome = landlock_rules::restrict(plan, spec.network)?;
            if outcome.fs == FsLevel::None && plan.read_only_mounts {
                // Read-only mounts still refuse every write outside the roots.
                outcome.fs = FsLevel::Partial;
            }
            if let Some(what) = judge_landlock(&outcome, spec.policy, spec.best_effort)? {
                not_enforced.push(what);
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
        file.write_all(&attestation::encode(&value))
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

/// Fail closed: a Landlock outcome short of `enforced` is an error, or with
/// `best_effort` a line saying what is not enforced.
fn judge_landlock(
    outcome: &LandlockOutcome,
    policy: Policy,
    best_effort: bool,
) -> Result<Option<String>, SandboxError> {
    let reason = outcome
        .unavailable
        .unwrap_or("the kernel refused the ruleset");
    let abi = outcome.abi.unwrap_or(0);
    match (outcome.fs, best_effort) {
        (FsLevel::Enforced, _) => Ok(None),
        (FsLevel::None, false) => Err(SandboxError::LandlockMissing {
            policy: policy.as_str(),
            reason: reason.to_owned(),
        }),
        (FsLevel::Partial, false) if outcome.unavailable.is_some() => {
            Err(SandboxError::LandlockMissing {
                policy: policy.as_str(),
                reason: reason.to_owned(),
            })
        }
        (FsLevel::Partial, false) => Err(SandboxError::LandlockTooOld {
            policy: policy.as_str(),
            abi,
        }),
        (FsLevel::None, true) => Ok(Some(format!("filesystem rules ({reason})"))),
        (FsLevel::Partial, true) if outcome.unavailable.is_some() => Ok(Some(format!(
            "Landlock rules ({reason}); only read-only mounts protect the filesystem"
        ))),
        (FsLevel::Partial, true) => Ok(Some(format!(
            "truncation and cross-directory rules (Landlock ABI {abi} < {FULL_FS_ABI})"
        ))),
    }
}

/// The working directory: the one this process was started in (the spawner
/// entered it from the handle it checked), or `--cwd DIR` entered first. It
/// is kept as a handle, and named as the kernel names it now.
fn working_dir(flag: Option<&Path>) -> Result<(OwnedFd, PathBuf), SandboxError> {
    if let Some(dir) = flag.filter(|dir| *dir != Path::new(".")) {
        std::env::set_current_dir(dir).map_err(|source| SandboxError::Cwd {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let entered = nix::fcntl::open(
        ".",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| SandboxError::NoCwd(errno.into()))?;
    let named = std::env::current_dir().map_err(SandboxError::NoCwd)?;
    Ok((entered, named))
}

/// Enters `path` again and checks it is still the directory `entered`.
fn reenter(entered: &OwnedFd, path: &Path) -> Result<(), SandboxError> {
    let cwd_error = |source| SandboxError::Cwd {
        path: path.to_path_buf(),
        source,
    };
    std::env::set_current_dir(path).map_err(cwd_error)?;
    let now = nix::sys::stat::stat(".").map_err(|e| cwd_error(e.into()))?;
    let before = nix::sys::stat::fstat(entered).map_err(|e| cwd_error(e.into()))?;
    if (now.st_dev, now.st_ino) == (before.st_dev, before.st_ino) {
        Ok(())
    } else {
        Err(cwd_error(std::io::Error::other(
            "the working directory was replaced while the sandbox started",
        )))
    }
}

/// Plans the filesystem rules from the real filesystem: canonical roots
/// (an explicit root that does not exist is an error; `/tmp` or `$TMPDIR`
/// missing is not), their protected paths, and the devices.
fn build_plan(
    ctx: &ProcessContext,
    policy: Policy,
    cwd: &Path,
    explicit: &[PathBuf],
) -> Result<FsPlan, SandboxError> {
    let rules = RuleFile::builtin();
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
    // The working directory is named as the kernel named its handle, never
    // resolved by path again (its rule is opened from `.`).
    let roots: Vec<PathBuf> = fs_plan::candidate_roots(policy, cwd, &explicit_roots, &rules, var)
        .iter()
        .filter_map(|root| {
            if root == cwd {
                Some(root.clone())
            } else {
                root.canonicalize().ok()
            }
        })
        .collect();
    let home = ctx.agent_reach_home();
    let protected = fs_plan::read_only_within(&roots, &explicit_roots, Some(&home), &rules);
    let whole_roots = fs_plan::split_writable(&roots, &explicit_roots, &[], fs_plan::list_dir);
    let mounted = rules.read_only_mounts.wanted(!protected.is_empty())
        && read_only_mounts::isolate(
            &whole_roots,
            &protected,
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
        .is_ok();
    let writable = if mounted || protected.is_empty() {
        whole_roots
    } else {
        fs_plan::split_writable(&roots, &explicit_roots, &protected, fs_plan::list_dir)
    };
    // Absent ones are skipped when their rule cannot be opened.
    let devices = rules
        .devices
        .iter()
        .chain(&rules.device_dirs)
        .cloned()
        .collect();
    Ok(FsPlan {
        writable,
        devices,
        read_only_mounts: mounted,
        working_dir: Some(cwd.to_path_buf()),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(fs: FsLevel, abi: Option<u32>) -> LandlockOutcome {
        LandlockOutcome {
            fs,
            abi,
            unavailable: (fs == FsLevel::None).then_some("Landlock is not built into this kernel"),
        }
    }

    #[test]
    fn enforced_landlock_passes_silently() {
        let result = judge_landlock(
            &outcome(FsLevel::Enforced, Some(7)),
            Policy::ReadOnly,
            false,
        );
        assert!(matches!(result, Ok(None)));
    }

    #[test]
    fn missing_landlock_fails_closed_naming_the_feature() {
        let err = judge_landlock(&outcome(FsLevel::None, None), Policy::WorkspaceWrite, false)
            .unwrap_err();
        assert_eq!(err.exit_code(), 125);
        let message = err.to_string();
        assert!(
            message.contains("Landlock is not built into this kernel"),
            "{message}"
        );
        assert!(message.contains("workspace-write"), "{message}");
        assert!(message.contains("--best-effort"), "{message}");
    }

    #[test]
    fn old_landlock_fails_closed_naming_the_abi() {
        let err = judge_landlock(&outcome(FsLevel::Partial, Some(2)), Policy::ReadOnly, false)
            .unwrap_err();
        assert_eq!(err.exit_code(), 125);
        assert!(err.to_string().contains("ABI 2"), "{err}");
    }

    #[test]
    fn best_effort_says_what_is_not_enforced() {
        let none = judge_landlock(&outcome(FsLevel::None, None), Policy::ReadOnly, true).unwrap();
        assert!(none.is_some_and(|line| line.contains("filesystem rules")));
        let partial =
            judge_landlock(&outcome(FsLevel::Partial, Some(1)), Policy::ReadOnly, true).unwrap();
        assert!(partial.is_some_and(|line| line.contains("ABI 1 < 3")));
        let mounts_only = LandlockOutcome {
            fs: FsLevel::Partial,
            abi: None,
            unavailable: Some("Landlock is not built into this kernel"),
        };
        let line = judge_landlock(&mounts_only, Policy::ReadOnly, true).unwrap();
        assert!(line.is_some_and(|line| line.contains("only read-only mounts")));
        let err = judge_landlock(&mounts_only, Policy::ReadOnly, false).unwrap_err();
        assert!(err.to_string().contains("not built into"), "{err}");
    }
}
