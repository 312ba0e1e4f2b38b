//! `agent-reach doctor [--json]`: what this machine supports, probed for real.
//!
//! Each probe asks the kernel directly (a syscall, a file in /proc, a PTY
//! opened and closed) rather than guessing from versions, and every probe
//! that fails says why, so a user knows which feature of agent-reach is
//! degraded on this machine and what to change.

use std::path::Path;

use serde::Serialize;

use crate::context::ProcessContext;
use crate::exit_code;
use crate::path_guard::path_root;

/// `doctor` arguments.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One probed feature.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    /// Short stable name.
    pub name: &'static str,
    /// Whether the feature is usable.
    pub ok: bool,
    /// The value found, or why the probe failed.
    pub detail: String,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: &'static str,
    pub landlock_abi: Option<u32>,
    pub cores: usize,
    pub default_concurrency: usize,
    pub default_queue: usize,
    pub path_dir: String,
    pub probes: Vec<Probe>,
}

/// Runs every probe and prints the report.
pub fn main(args: DoctorArgs, ctx: &ProcessContext) -> i32 {
    let report = probe_all(&ctx.agent_reach_home());
    let text = if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => json + "\n",
            Err(err) => {
                eprintln!("agent-reach doctor: {err}");
                return exit_code::INTERNAL;
            }
        }
    } else {
        render_text(&report)
    };
    match crate::stdio::print_or_exit_code(&text) {
        Ok(()) => exit_code::SUCCESS,
        Err(code) => code,
    }
}

/// Probes this machine.
pub fn probe_all(home: &Path) -> Report {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let landlock = probe_landlock();
    let path_dir = path_root(home);
    let probes = vec![
        landlock.1.clone(),
        probe_seccomp(),
        probe_pty(),
        probe_user_namespaces(),
        probe_open_files(),
        probe_cgroup(),
        probe_subreaper(),
        Probe {
            name: "cores",
            ok: true,
            detail: format!(
                "{cores} cores: default concurrency {} running, {} queued",
                cores * 3,
                cores * 24
            ),
        },
        probe_path_dir(&path_dir),
    ];
    Report {
        version: env!("CARGO_PKG_VERSION"),
        landlock_abi: landlock.0,
        cores,
        default_concurrency: cores * 3,
        default_queue: cores * 24,
        path_dir: path_dir.display().to_string(),
        probes,
    }
}

fn render_text(report: &Report) -> String {
    let mut out = format!("agent-reach {}\n", report.version);
    for probe in &report.probes {
        let mark = if probe.ok { "ok " } else { "no " };
        out.push_str(&format!("{mark} {:<16} {}\n", probe.name, probe.detail));
    }
    out
}

fn probe(name: &'static str, result: Result<String, String>) -> Probe {
    match result {
        Ok(detail) => Probe {
            name,
            ok: true,
            detail,
        },
        Err(detail) => Probe {
            name,
            ok: false,
            detail,
        },
    }
}

#[cfg(target_os = "linux")]
fn probe_landlock() -> (Option<u32>, Probe) {
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
        let abi = u32::try_from(abi).unwrap_or(0);
        (Some(abi), probe("landlock", Ok(format!("ABI {abi}"))))
    } else {
        let err = std::io::Error::last_os_error();
        let why = match err.raw_os_error() {
            Some(libc::ENOSYS) => "the kernel was built without Landlock (ENOSYS)".to_owned(),
            Some(libc::EOPNOTSUPP) => {
                "Landlock is built in but disabled at boot (add landlock to the lsm= parameter)"
                    .to_owned()
            }
            _ => format!("landlock_create_ruleset failed: {err}"),
        };
        (None, probe("landlock", Err(why)))
    }
}

#[cfg(target_os = "linux")]
fn probe_seccomp() -> Probe {
    // SAFETY: PR_GET_SECCOMP only reads this thread's seccomp mode.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if mode < 0 {
        let err = std::io::Error::last_os_error();
        return probe("seccomp", Err(format!("the kernel lacks seccomp: {err}")));
    }
    let actions = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    if mode == 2 {
        return probe(
            "seccomp",
            Ok(format!(
                "filter mode available (this process is already filtered); actions: {actions}"
            )),
        );
    }
    if actions.split_whitespace().any(|a| a == "errno") {
        probe(
            "seccomp",
            Ok(format!("filter mode available; actions: {actions}")),
        )
    } else {
        probe(
            "seccomp",
            Err(format!(
                "seccomp filters cannot return errno (actions: {actions:?})"
            )),
        )
    }
}

#[cfg(target_os = "linux")]
fn probe_pty() -> Probe {
    match nix::pty::openpty(None, None) {
        Ok(pty) => {
            let name = nix::unistd::ttyname(&pty.slave)
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "a pseudo-terminal".into());
            probe("pty", Ok(format!("opened {name}")))
        }
        Err(err) => probe(
            "pty",
            Err(format!("openpty failed: {err} (is /dev/pts mounted?)")),
        ),
    }
}

#[cfg(target_os = "linux")]
fn probe_user_namespaces() -> Probe {
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    match max {
        Some(0) => probe(
            "user_namespaces",
            Err("disabled: /proc/sys/user/max_user_namespaces is 0".into()),
        ),
        Some(max) => probe("user_namespaces", Ok(format!("available (at most {max})"))),
        None => probe(
            "user_namespaces",
            Err(
                "cannot read /proc/sys/user/max_user_namespaces: the kernel lacks CONFIG_USER_NS"
                    .into(),
            ),
        ),
    }
}

fn probe_open_files() -> Probe {
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

#[cfg(target_os = "linux")]
fn probe_cgroup() -> Probe {
    use crate::exec::cgroup::{CgroupGuard, own_cgroup_dir};
    // Where the engine looks: /sys/fs/cgroup, or its unified part on a
    // hybrid hierarchy, or any cgroup2 mount.
    let Some(dir) = own_cgroup_dir() else {
        return probe(
            "cgroup_v2",
            Err("no cgroup v2 hierarchy mounted, or /proc/self/cgroup names no v2 cgroup".into()),
        );
    };
    // For real, as the engine does it: a cgroup made and removed.
    match CgroupGuard::create(&crate::exec::new_session_tag()) {
        Ok(guard) => {
            drop(guard);
            probe("cgroup_v2", Ok(format!("writable: {}", dir.display())))
        }
        Err(err) => probe(
            "cgroup_v2",
            Err(format!(
                "cannot make a cgroup under {} ({err}): escapees are found through /proc instead",
                dir.display()
            )),
        ),
    }
}

#[cfg(target_os = "linux")]
fn probe_subreaper() -> Probe {
    match nix::sys::prctl::get_child_subreaper() {
        Ok(_) => probe("subreaper", Ok("PR_SET_CHILD_SUBREAPER available".into())),
        Err(err) => probe(
            "subreaper",
            Err(format!("PR_GET_CHILD_SUBREAPER failed: {err}")),
        ),
    }
}

fn probe_path_dir(dir: &Path) -> Probe {
    let existing = dir.ancestors().find(|a| a.exists());
    match existing {
        Some(base) => match nix::unistd::access(base, nix::unistd::AccessFlags::W_OK) {
            Ok(()) => probe("path_dir", Ok(dir.display().to_string())),
            Err(err) => probe(
                "path_dir",
                Err(format!(
                    "{} cannot be created: {} is not writable ({err}); set AGENT_REACH_HOME",
                    dir.display(),
                    base.display()
                )),
            ),
        },
        None => probe(
            "path_dir",
            Err(format!("{} has no existing ancestor", dir.display())),
        ),
    }
}

#[cfg(not(target_os = "linux"))]
fn probe_landlock() -> (Option<u32>, Probe) {
    (
        None,
        probe("landlock", Err("Landlock is Linux-only".into())),
    )
}
#[cfg(not(target_os = "linux"))]
fn probe_seccomp() -> Probe {
    probe("seccomp", Err("seccomp is Linux-only".into()))
}
#[cfg(not(target_os = "linux"))]
fn probe_pty() -> Probe {
    probe("pty", Err("not probed on this platform".into()))
}
#[cfg(not(target_os = "linux"))]
fn probe_user_namespaces() -> Probe {
    probe("user_namespaces", Err("Linux-only".into()))
}
#[cfg(not(target_os = "linux"))]
fn probe_cgroup() -> Probe {
    probe("cgroup_v2", Err("Linux-only".into()))
}
#[cfg(not(target_os = "linux"))]
fn probe_subreaper() -> Probe {
    probe("subreaper", Err("Linux-only".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_every_probe_with_a_detail() {
        let home = tempfile::tempdir().unwrap();
        let report = probe_all(home.path());
        let names: Vec<_> = report.probes.iter().map(|p| p.name).collect();
        for expected in [
            "landlock",
            "seccomp",
            "pty",
            "user_namespaces",
            "open_files",
            "cores",
            "path_dir",
        ] {
            assert!(names.contains(&expected), "missing probe {expected}");
        }
        assert!(report.probes.iter().all(|p| !p.detail.is_empty()));
        assert_eq!(report.default_queue, report.default_concurrency * 8);
    }
}
