//! Turning an [`FsPlan`] into a Landlock domain on the current thread.
//!
//! We ask for the newest ABI the `landlock` crate knows, in best-effort mode,
//! and judge the outcome ourselves from the ABI the kernel granted: ABI 3
//! (truncation) is the least that enforces the whole write policy; ABI 1-2
//! is `partial`; no Landlock is `none`. Newer rights are used when present:
//! device ioctls (ABI 5) are refused except on the usual devices, signals and
//! abstract Unix sockets are scoped to the sandbox (ABI 6), TCP (ABI 4) and UDP
//! (ABI 10) are refused by Landlock too when the network is denied, and
//! connecting to pathname Unix sockets (ABI 9) stays allowed everywhere.
//! Character and block device nodes can be made nowhere.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus,
    PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::attestation::FsLevel;
use super::error::SandboxError;
use super::fs_plan::FsPlan;
use super::policy::Network;

/// The newest Landlock ABI this build knows; the kernel may grant less.
pub(crate) const NEWEST_ABI: ABI = ABI::V10;

/// The least ABI that enforces every write rule (truncation arrived in 3).
pub(crate) const FULL_FS_ABI: u32 = 3;

/// What the kernel granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LandlockOutcome {
    pub(crate) fs: FsLevel,
    /// The kernel's Landlock ABI; `None` when Landlock is unavailable.
    pub(crate) abi: Option<u32>,
    /// Why Landlock is unavailable, when it is.
    pub(crate) unavailable: Option<&'static str>,
}

/// Restricts the calling thread (and what it execs) to `plan`.
pub(crate) fn restrict(plan: &FsPlan, network: Network) -> Result<LandlockOutcome, SandboxError> {
    let all = AccessFs::from_all(NEWEST_ABI);
    // Never granted, even in writable roots: a root user could otherwise
    // create a device node for a raw disk or /dev/mem and write through it.
    let writable = all & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev);
    let everywhere = AccessFs::from_read(NEWEST_ABI) | AccessFs::ResolveUnix;
    let device = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let mut scopes: BitFlags<Scope> = Scope::Signal.into();
    if network == Network::Deny {
        scopes |= Scope::AbstractUnixSocket;
    }
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(SandboxError::Landlock)?
        .scope(scopes)
        .map_err(SandboxError::Landlock)?;
    if network == Network::Deny {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(NEWEST_ABI))
            .map_err(SandboxError::Landlock)?;
    }
    let mut created = ruleset.create().map_err(SandboxError::Landlock)?;
    created = add_rule(created, Path::new("/"), everywhere)?;
    for path in &plan.writable {
        created = add_rule(created, &from_working_dir(plan, path), writable)?;
    }
    for path in &plan.devices {
        created = add_rule(created, path, device | everywhere)?;
    }
    let status = created.restrict_self().map_err(SandboxError::Landlock)?;
    let abi = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => Some(kernel_abi.map_or(effective_abi as u32, |k| k.max(0) as u32)),
        LandlockStatus::NotEnabled | LandlockStatus::NotImplemented => None,
    };
    let unavailable = match status.landlock {
        LandlockStatus::NotEnabled => Some("Landlock is built in but not enabled (add it to lsm=)"),
        LandlockStatus::NotImplemented => Some("Landlock is not built into this kernel"),
        LandlockStatus::Available { .. } => None,
    };
    let fs = match (status.ruleset, abi) {
        (RulesetStatus::NotEnforced, _) | (_, None) => FsLevel::None,
        (_, Some(abi)) if abi >= FULL_FS_ABI => FsLevel::Enforced,
        (_, Some(_)) => FsLevel::Partial,
    };
    Ok(LandlockOutcome {
        fs,
        abi,
        unavailable,
    })
}

/// `path` as the rule opens it: beneath the working directory, relative to
/// `.` (the directory the command was started in, by handle), so a link
/// swapped in for that directory's path is never what the rule grants.
fn from_working_dir(plan: &FsPlan, path: &Path) -> PathBuf {
    match plan
        .working_dir
        .as_deref()
        .and_then(|dir| path.strip_prefix(dir).ok())
    {
        Some(rest) => Path::new(".").join(rest),
        None => path.to_path_buf(),
    }
}

/// Adds one rule; a path that cannot be opened (gone, or unreadable) only
/// means less access, so it is skipped. Non-directories get only file rights.
fn add_rule(
    created: landlock::RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<landlock::RulesetCreated, SandboxError> {
    let Ok(fd) = PathFd::new(path) else {
        return Ok(created);
    };
    // The opened descriptor, not the path again: one lookup per rule.
    let is_dir = nix::sys::stat::fstat(fd.as_fd())
        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR);
    let access = if is_dir {
        access
    } else {
        access & AccessFs::from_file(NEWEST_ABI)
    };
    created
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|source| SandboxError::LandlockRule {
            path: path.to_path_buf(),
            source,
        })
}
