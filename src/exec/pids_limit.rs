//! The per-command process limit (`[limits] pids`): a fork bomb ends at the
//! limit, inside its own command, and the rest of the machine is unharmed.
//!
//! Where it is held, best first:
//!
//! 1. `pids.max` of the command's own cgroup v2 ([`CgroupGuard`]), where
//!    the `pids` controller is enabled for it;
//! 2. a cgroup of its own in the cgroup v1 `pids` hierarchy (hybrid
//!    machines, where cgroup2 carries no controllers), which the child
//!    joins between fork and exec;
//! 3. `RLIMIT_NPROC`, where neither cgroup can be had. It counts every
//!    task of the user (threads too), not of the command, and root ignores
//!    it: so it is set only for a user other than root, to the tasks the
//!    machine runs now plus the limit (a bound on runaway forking, not an
//!    exact count); as root without a cgroup nothing holds the limit (the
//!    docs say so).

pub(crate) use super::DEFAULT_PIDS_LIMIT;

use std::fs;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::cgroup::{CgroupGuard, POOL_MAX, dead_owners_dirs};

/// Names of our v1 cgroups, as those of cgroup v2: then the session tag.
const PREFIX: &str = "agent-reach-";

/// How a command's process limit is held.
#[derive(Debug)]
pub(crate) enum PidsHold {
    /// `pids.max` of its cgroup v2.
    CgroupV2,
    /// Its own cgroup v1 `pids` group, which the child joins.
    CgroupV1(PidsCgroupGuard),
    /// `RLIMIT_NPROC` set in the child to this.
    Rlimit(u64),
    /// Nothing can hold it here (root without a `pids` cgroup).
    None,
}

impl PidsHold {
    /// Holds `max` processes for the command of `tag`: in `cgroup` when it
    /// has the controller, else a v1 `pids` group (when cgroups are
    /// wanted), else the rlimit.
    pub(crate) fn hold(
        max: u64,
        tag: &str,
        cgroup: Option<&CgroupGuard>,
        use_cgroup: bool,
    ) -> Self {
        if let Some(cgroup) = cgroup
            && cgroup.set_pids_max(max).is_ok()
        {
            return PidsHold::CgroupV2;
        }
        if use_cgroup && let Ok(guard) = PidsCgroupGuard::create(tag, max) {
            return PidsHold::CgroupV1(guard);
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return PidsHold::None;
        }
        // The rlimit counts every task of the user, threads included, so
        // it is set above what runs now: all tasks of the machine (one
        // cheap read, and never fewer than the user's) plus the limit.
        let running = super::procfs::read_small("/proc/loadavg")
            .as_deref()
            .and_then(total_tasks)
            .unwrap_or(0);
        PidsHold::Rlimit(running.saturating_add(max))
    }

    /// What the child does with it between fork and exec.
    pub(crate) fn child(&self) -> ChildLimits {
        match self {
            PidsHold::CgroupV1(guard) => ChildLimits {
                join_procs: guard.procs_fd(),
                nproc: None,
            },
            PidsHold::Rlimit(max) => ChildLimits {
                join_procs: None,
                nproc: Some(*max),
            },
            PidsHold::CgroupV2 | PidsHold::None => ChildLimits::default(),
        }
    }
}

/// The machine's task count from a `/proc/loadavg` text (`1.0 0.5 0.2 3/812 99`).
pub(crate) fn total_tasks(loadavg: &str) -> Option<u64> {
    loadavg
        .split_ascii_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}

/// The limits a child applies to itself before its exec.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ChildLimits {
    /// A `cgroup.procs` (v1 `pids`) to write `0` to: the child joins it.
    pub(crate) join_procs: Option<RawFd>,
    /// `RLIMIT_NPROC`, soft and hard (never above the inherited hard one).
    pub(crate) nproc: Option<u64>,
}

/// Empty v1 `pids` groups of finished commands, kept for the next ones
/// (as [`super::cgroup`] keeps its cgroup v2 directories): a `mkdir` and a
/// `rmdir` in the v1 hierarchy per command cost more than the rest of a
/// trivial command's start, and each removal a kworker's time after it.
static POOL: Mutex<Vec<Pooled>> = Mutex::new(Vec::new());

/// A pooled group: its directory, its `cgroup.procs` kept open, and the
/// `pids.max` it holds.
#[derive(Debug)]
struct Pooled {
    dir: PathBuf,
    procs: OwnedFd,
    max: u64,
}

/// Removes the pooled v1 groups; runs at exit with the cgroup v2 pool's
/// release (a process killed with SIGKILL leaves them to the next start's
/// sweep, as their names carry its pid).
pub(crate) fn release_pool() {
    for pooled in crate::sync::lock(&POOL).drain(..) {
        let _ = fs::remove_dir(pooled.dir);
    }
}

/// Owns one command's cgroup in the v1 `pids` hierarchy; when dropped
/// (once the command's processes are gone) puts it back in the pool if it
/// is empty, else removes it.
#[derive(Debug)]
pub(crate) struct PidsCgroupGuard {
    group: Option<Pooled>,
}

impl PidsCgroupGuard {
    /// A pooled group, or `agent-reach-<tag>` made under our own v1
    /// `pids` cgroup, holding `pids.max` = `max`.
    pub(crate) fn create(tag: &str, max: u64) -> std::io::Result<Self> {
        let base = own_v1_pids_dir().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "no cgroup v1 pids hierarchy",
            )
        })?;
        remove_stale_once(base);
        let pooled = crate::sync::lock(&POOL).pop();
        if let Some(mut group) = pooled {
            if group.max == max || fs::write(group.dir.join("pids.max"), max.to_string()).is_ok() {
                group.max = max;
                return Ok(Self { group: Some(group) });
            }
            let _ = fs::remove_dir(&group.dir);
        }
        let dir = base.join(format!("{PREFIX}{tag}"));
        fs::create_dir(&dir)?;
        let opened = fs::write(dir.join("pids.max"), max.to_string()).and_then(|()| {
            fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
        });
        match opened {
            Ok(procs) => Ok(Self {
                group: Some(Pooled {
                    dir,
                    procs: OwnedFd::from(procs),
                    max,
                }),
            }),
            Err(err) => {
                let _ = fs::remove_dir(&dir);
                Err(err)
            }
        }
    }

    /// The group's `cgroup.procs`, open for writing (held until the drop).
    fn procs_fd(&self) -> Option<RawFd> {
        self.group.as_ref().map(|group| group.procs.as_raw_fd())
    }
}

impl Drop for PidsCgroupGuard {
    fn drop(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        // No task charged to it any more (the last ones are reaped):
        // empty, and fit for the next command.
        let empty = super::procfs::read_small(group.dir.join("pids.current"))
            .is_some_and(|current| current.trim() == "0");
        if empty {
            let mut pool = crate::sync::lock(&POOL);
            if pool.len() < POOL_MAX {
                super::cgroup::release_pools_at_exit();
                pool.push(group);
                return;
            }
        }
        // The command's processes were killed with its execution; the last
        // ones may still be exiting.
        for _ in 0..40 {
            match fs::remove_dir(&group.dir) {
                Ok(()) => return,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

/// Our own directory in the v1 `pids` hierarchy, if it is mounted.
fn own_v1_pids_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let mountinfo = super::procfs::read_small("/proc/self/mountinfo")?;
        let mount = v1_pids_mount_point(&mountinfo)?;
        let cgroups = super::procfs::read_small("/proc/self/cgroup")?;
        let own = v1_pids_path(&cgroups)?;
        Some(mount.join(own.trim_start_matches('/')))
    })
    .as_deref()
}

/// The mount point of the cgroup v1 hierarchy with the `pids` controller.
pub(crate) fn v1_pids_mount_point(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut fields = after.split_ascii_whitespace();
        if fields.next()? != "cgroup" {
            return None;
        }
        let options = fields.nth(1)?;
        if !options.split(',').any(|o| o == "pids") {
            return None;
        }
        before.split_ascii_whitespace().nth(4).map(PathBuf::from)
    })
}

/// Our path in the v1 `pids` hierarchy, from a `/proc/self/cgroup` text.
pub(crate) fn v1_pids_path(cgroups: &str) -> Option<&str> {
    cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        controllers.split(',').any(|c| c == "pids").then_some(path)
    })
}

/// The v1 `pids` groups a dead agent-reach left, removed now (a server
/// calls it as it starts).
pub(crate) fn remove_stale() {
    if let Some(base) = own_v1_pids_dir() {
        remove_stale_once(base);
    }
}

/// Once per process: v1 groups left by an agent-reach that died without
/// cleaning up are removed (those still holding a process stay).
fn remove_stale_once(base: &Path) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for dir in dead_owners_dirs(base) {
            let _ = fs::remove_dir(dir);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_v1_pids_mount_and_our_place_in_it() {
        let info = "30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                    33 25 0:29 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                    35 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            v1_pids_mount_point(info),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(
            v1_pids_mount_point("35 25 0:31 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"),
            None
        );
        let cgroups = "9:name=systemd:/\n8:pids:/user.slice\n4:memory:/x\n0::/\n";
        assert_eq!(v1_pids_path(cgroups), Some("/user.slice"));
        assert_eq!(v1_pids_path("0::/\n"), None);
    }

    #[test]
    fn the_machine_task_count_is_read_from_loadavg() {
        assert_eq!(total_tasks("0.50 0.40 0.30 2/812 12345\n"), Some(812));
        assert_eq!(total_tasks("garbage"), None);
    }

    #[test]
    fn a_v1_pids_group_carries_the_limit_and_is_kept_for_the_next_command() {
        let Ok(guard) = PidsCgroupGuard::create(&crate::exec::new_session_tag(), 7) else {
            eprintln!("SKIPPED: no writable cgroup v1 pids hierarchy here");
            return;
        };
        let dir = guard.group.as_ref().unwrap().dir.clone();
        assert_eq!(
            fs::read_to_string(dir.join("pids.max")).unwrap().trim(),
            "7"
        );
        drop(guard);
        assert!(dir.exists(), "an empty group is pooled, not removed");
        // The next command's group holds its own limit, pooled or not.
        let next = PidsCgroupGuard::create(&crate::exec::new_session_tag(), 9).unwrap();
        let next_dir = next.group.as_ref().unwrap().dir.clone();
        assert_eq!(
            fs::read_to_string(next_dir.join("pids.max"))
                .unwrap()
                .trim(),
            "9"
        );
        drop(next);
        release_pool();
        assert!(!next_dir.exists(), "the pool is removed at exit");
    }
}
