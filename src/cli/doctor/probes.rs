//! The probes of `doctor`, each doing the thing for real: the session PATH
//! directory made and removed where `run` makes it, a user namespace, a
//! Landlock ruleset and a seccomp filter applied in a forked child
//! ([`super::child`]), a cgroup made and removed, a PTY opened, the sandbox
//! personality started on this binary, the usual listener ports bound.
//!
//! A probe that fails says why, so a user knows which feature of agent-reach
//! is degraded on this machine and what to change.

use std::path::Path;

use serde::Serialize;

use crate::path_guard::PathGuard;

/// One probed feature.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Probe {
    /// Short stable name.
    pub(crate) name: &'static str,
    /// Whether the feature is usable.
    pub(crate) ok: bool,
    /// The value found, or why the probe failed.
    pub(crate) detail: String,
    /// Whether the configuration needs it (doctor exits 1 when a needed
    /// probe failed).
    pub(crate) needed: bool,
}

/// A probe from its result; not needed until the configuration says so.
pub(crate) fn probe(name: &'static str, result: Result<String, String>) -> Probe {
    let (ok, detail) = match result {
        Ok(detail) => (true, detail),
        Err(detail) => (false, detail),
    };
    Probe {
        name,
        ok,
        detail,
        needed: false,
    }
}

/// The session PATH directory, made with its links and removed again, by
/// the same code `run`, `exec`, `serve` and `shell` use.
pub(crate) fn path_dir(root: &Path, exe: &Path) -> Probe {
    let result = match PathGuard::create(root, exe) {
        Ok(guard) => {
            let dir = guard.dir().to_path_buf();
            drop(guard);
            if dir.exists() {
                Err(format!(
                    "{} was made but could not be removed",
                    dir.display()
                ))
            } else {
                Ok(format!("made and removed {}", dir.display()))
            }
        }
        Err(err) => Err(format!(
            "{err}: run, exec, serve and shell cannot start; set AGENT_REACH_HOME to a writable directory"
        )),
    };
    probe("path_dir", result)
}

/// The Landlock ABI the kernel offers, if any (`None`: why not).
#[cfg(target_os = "linux")]
pub(crate) fn landlock_abi() -> Result<u32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag this
    // syscall only returns the ABI number; it creates nothing.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if abi > 0 {
        return Ok(u32::try_from(abi).unwrap_or(0));
    }
    let err = std::io::Error::last_os_error();
    Err(match err.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel was built without Landlock (ENOSYS)".to_owned(),
        Some(libc::EOPNOTSUPP) => {
            "Landlock is built in but disabled at boot (add landlock to the lsm= parameter)"
                .to_owned()
        }
        _ => format!("landlock_create_ruleset failed: {err}"),
    })
}

/// A Landlock ruleset handling every file access right, applied in a child.
#[cfg(target_os = "linux")]
pub(crate) fn landlock() -> Probe {
    use landlock::{
        ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetStatus,
    };
    if let Err(why) = landlock_abi() {
        return probe("landlock", Err(why));
    }
    let report = super::child::in_child(|| {
        let status = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(ABI::V5))
            .and_then(|ruleset| ruleset.create())
            .and_then(|created| created.restrict_self())
            .map_err(|err| format!("applying a ruleset failed: {err}"))?;
        match status.ruleset {
            RulesetStatus::FullyEnforced => Ok("a ruleset was applied in a child: fully enforced".into()),
            RulesetStatus::PartiallyEnforced => Err(
                "a ruleset was applied in a child but only partly enforced (an older ABI lacks some rights)".into(),
            ),
            RulesetStatus::NotEnforced => Err("a ruleset could not be enforced in a child".into()),
        }
    });
    let abi = landlock_abi().map_or_else(|_| String::new(), |abi| format!("ABI {abi}; "));
    probe(
        "landlock",
        if report.ok {
            Ok(format!("{abi}{}", report.line))
        } else {
            Err(format!("{abi}{}", report.line))
        },
    )
}

/// The sandbox's own network filter, installed in a child, which then
/// tries to open an internet socket and must be refused.
#[cfg(target_os = "linux")]
pub(crate) fn seccomp() -> Probe {
    use crate::sandbox::{Network, seccomp_rules};
    let report = super::child::in_child(|| {
        nix::sys::prctl::set_no_new_privs().map_err(|err| format!("no_new_privs: {err}"))?;
        let filters = seccomp_rules::filters(Network::Deny).map_err(|err| err.to_string())?;
        seccomp_rules::install(&filters).map_err(|err| err.to_string())?;
        // SAFETY: plain arguments; a descriptor that came back is closed.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        if fd >= 0 {
            // SAFETY: our own descriptor.
            unsafe { libc::close(fd) };
            return Err(
                "a filter was installed in a child but socket(AF_INET) still worked".into(),
            );
        }
        Ok(format!(
            "the sandbox's filter was applied in a child: socket(AF_INET) refused ({})",
            std::io::Error::last_os_error()
        ))
    });
    probe(
        "seccomp",
        if report.ok {
            Ok(report.line)
        } else {
            Err(report.line)
        },
    )
}

/// A pseudo-terminal opened and closed, as `--tty` and sessions open one.
#[cfg(target_os = "linux")]
pub(crate) fn pty() -> Probe {
    match nix::pty::openpty(None, None) {
        Ok(pty) => {
            let name = nix::unistd::ttyname(&pty.slave)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "a pseudo-terminal".into());
            probe("pty", Ok(format!("opened and closed {name}")))
        }
        Err(err) => probe(
            "pty",
            Err(format!("openpty failed: {err} (is /dev/pts mounted?)")),
        ),
    }
}

/// `unshare(CLONE_NEWUSER)` in a child: what the sandbox's read-only mount
/// layer needs when not root.
#[cfg(target_os = "linux")]
pub(crate) fn user_namespaces() -> Probe {
    let report = super::child::in_child(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
            .map(|()| "a child made a user namespace (unshare CLONE_NEWUSER)".to_owned())
            .map_err(|err| {
                format!(
                    "unshare(CLONE_NEWUSER) in a child failed: {err}; the sandbox keeps .git read-only with Landlock alone"
                )
            })
    });
    probe(
        "user_namespaces",
        if report.ok {
            Ok(report.line)
        } else {
            Err(report.line)
        },
    )
}

/// The descriptor limit: each session holds several.
pub(crate) fn open_files() -> Probe {
    match nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft >= 1024 => probe(
            "open_files",
            Ok(format!("soft limit {soft}, hard limit {hard}")),
        ),
        Ok((soft, hard)) => probe(
            "open_files",
            Err(format!(
                "soft limit {soft} is low (hard {hard}): each session uses several descriptors; raise it with ulimit -n"
            )),
        ),
        Err(err) => probe("open_files", Err(format!("getrlimit failed: {err}"))),
    }
}

/// A cgroup made and removed where the engine makes them.
#[cfg(target_os = "linux")]
pub(crate) fn cgroup() -> Probe {
    use crate::exec::cgroup::{CgroupGuard, own_cgroup_dir};
    // Where the engine looks: /sys/fs/cgroup, or its unified part on a
    // hybrid hierarchy, or any cgroup2 mount.
    let Some(dir) = own_cgroup_dir() else {
        return probe(
            "cgroup_v2",
            Err("no cgroup v2 hierarchy mounted, or /proc/self/cgroup names no v2 cgroup".into()),
        );
    };
    match CgroupGuard::create(&crate::exec::new_session_tag()) {
        Ok(guard) => {
            drop(guard);
            probe(
                "cgroup_v2",
                Ok(format!("made and removed a cgroup under {}", dir.display())),
            )
        }
        Err(err) => probe(
            "cgroup_v2",
            Err(format!(
                "cannot make a cgroup under {} ({err})",
                dir.display()
            )),
        ),
    }
}

/// `PR_SET_CHILD_SUBREAPER` set in a child.
#[cfg(target_os = "linux")]
pub(crate) fn subreaper() -> Probe {
    let report = super::child::in_child(|| {
        nix::sys::prctl::set_child_subreaper(true)
            .map(|()| "a child became a subreaper (PR_SET_CHILD_SUBREAPER)".to_owned())
            .map_err(|err| format!("PR_SET_CHILD_SUBREAPER failed in a child: {err}"))
    });
    probe(
        "subreaper",
        if report.ok {
            Ok(report.line)
        } else {
            Err(report.line)
        },
    )
}

/// The usual port of each listener protocol, bound on every interface (as
/// `serve --listen PROTOCOL=:PORT` would) and closed again.
pub(crate) fn ports() -> Vec<PortProbe> {
    USUAL_PORTS
        .iter()
        .map(|&(protocol, port)| {
            let result = std::net::TcpListener::bind(("0.0.0.0", port));
            PortProbe {
                protocol,
                port,
                free: result.is_ok(),
                detail: match result {
                    Ok(_) => "free".to_owned(),
                    Err(err) => err.to_string(),
                },
            }
        })
        .collect()
}

/// The `serve --listen` protocols and their usual ports (the contract's table).
pub(crate) const USUAL_PORTS: &[(&str, u16)] = &[
    ("mcp", 8765),
    ("sandboxd-grpc", 9090),
    ("sandboxd-rest", 8080),
    ("python-runtime", 8888),
    ("swerex", 8000),
];

/// Whether one usual listener port can be bound.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct PortProbe {
    pub(crate) protocol: &'static str,
    pub(crate) port: u16,
    pub(crate) free: bool,
    /// `free`, or why binding failed (in use, permission).
    pub(crate) detail: String,
}

#[cfg(not(target_os = "linux"))]
mod elsewhere {
    //! Landlock, seccomp, user namespaces, cgroups and the subreaper are Linux's.
    use super::{Probe, probe};
    pub(crate) fn landlock_abi() -> Result<u32, String> {
        Err("Landlock is Linux-only".into())
    }
    pub(crate) fn landlock() -> Probe {
        probe("landlock", Err("Landlock is Linux-only".into()))
    }
    pub(crate) fn seccomp() -> Probe {
        probe("seccomp", Err("seccomp is Linux-only".into()))
    }
    pub(crate) fn pty() -> Probe {
        probe("pty", Err("not probed on this platform".into()))
    }
    pub(crate) fn user_namespaces() -> Probe {
        probe("user_namespaces", Err("Linux-only".into()))
    }
    pub(crate) fn cgroup() -> Probe {
        probe("cgroup_v2", Err("Linux-only".into()))
    }
    pub(crate) fn subreaper() -> Probe {
        probe("subreaper", Err("Linux-only".into()))
    }
}
#[cfg(not(target_os = "linux"))]
pub(crate) use elsewhere::*;
