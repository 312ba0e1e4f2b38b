//! A cgroup v2 per execution, where the machine lets us create one: the one
//! container a process cannot leave by `setsid` or double-forking, killed as
//! a whole with `cgroup.kill`.
//!
//! The cgroup is made under the one we already run in (so a nested
//! agent-reach nests its cgroups, and killing the outer kills the inner).
//! Where cgroup2 is absent or not writable, [`CgroupGuard::create`] fails and
//! the engine falls back to the session tag in `/proc/*/environ`.

use std::fs;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::Duration;

/// Set once creating a cgroup failed: later executions do not try again.
static UNAVAILABLE: AtomicBool = AtomicBool::new(false);

/// Empty cgroups of finished executions, kept for the next ones: creating
/// and removing a cgroup costs the kernel more than the rest of a trivial
/// command's start (and a kworker's time after each removal).
static POOL: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// How many empty cgroups the pool keeps at most (and the v1 `pids`
/// groups' pool, `pids_limit`, as many).
pub(super) const POOL_MAX: usize = 64;

fn pool() -> MutexGuard<'static, Vec<PathBuf>> {
    crate::sync::lock(&POOL)
}

/// Removes the pooled cgroups; runs at exit (a process killed with SIGKILL
/// leaves them to the next start's sweep, as their names carry its pid).
pub(crate) fn release_pool() {
    for dir in pool().drain(..) {
        let _ = fs::remove_dir(dir);
    }
}

extern "C" fn release_pools_at_exit_hook() {
    release_pool();
    super::pids_limit::release_pool();
}

/// Registers, once, the removal at exit of both pools (this one and the
/// v1 `pids` groups') before the first directory is kept.
pub(crate) fn release_pools_at_exit() {
    static AT_EXIT: Once = Once::new();
    // SAFETY: registering a plain extern "C" function.
    AT_EXIT.call_once(|| unsafe {
        libc::atexit(release_pools_at_exit_hook);
    });
}

/// The cgroup2 directory we run in, if there is a cgroup2 mount.
pub(crate) fn own_cgroup_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let mount = usual_cgroup2_mount().or_else(|| {
            let mountinfo = crate::exec::procfs::read_small("/proc/self/mountinfo")?;
            cgroup2_mount_point(&mountinfo)
        })?;
        let cgroups = crate::exec::procfs::read_small("/proc/self/cgroup")?;
        let own = unified_cgroup_path(&cgroups)?;
        Some(mount.join(own.trim_start_matches('/')))
    })
    .as_deref()
}

/// Where systemd and most container runtimes mount cgroup2: the whole
/// hierarchy, or its unified part on a hybrid one. Two `statfs` calls save
/// generating and parsing the mount table at every start.
fn usual_cgroup2_mount() -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .into_iter()
        .find(|path| {
            nix::sys::statfs::statfs(*path)
                .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
        })
        .map(PathBuf::from)
}

/// The mount point of the first cgroup2 filesystem in a mountinfo text.
pub(crate) fn cgroup2_mount_point(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        if after.split_ascii_whitespace().next()? != "cgroup2" {
            return None;
        }
        before.split_ascii_whitespace().nth(4).map(PathBuf::from)
    })
}

/// Our path in the unified hierarchy, from a `/proc/self/cgroup` text.
pub(crate) fn unified_cgroup_path(cgroups: &str) -> Option<&str> {
    cgroups.lines().find_map(|line| line.strip_prefix("0::"))
}

/// Names of our cgroups: the prefix, then the session tag `ar-<pid>-...`.
const PREFIX: &str = "agent-reach-";

/// The pid of the agent-reach process that made a cgroup, from its name.
pub(crate) fn owner_pid(name: &str) -> Option<i32> {
    name.strip_prefix(PREFIX)?
        .strip_prefix("ar-")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

/// The directories under `base` named after an agent-reach process
/// ([`owner_pid`]) that is no longer alive.
pub(crate) fn dead_owners_dirs(base: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(base) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(owner_pid)
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        })
        .map(|entry| entry.path())
        .collect()
}

/// What an agent-reach that died without cleaning up (SIGKILL) left in
/// our cgroup, removed now rather than at the first command: a server
/// calls it as it starts.
pub(crate) fn remove_stale() {
    if let Some(base) = own_cgroup_dir() {
        remove_stale_once(base);
    }
}

/// Once per process: cgroups left by an agent-reach that died without
/// cleaning up (SIGKILL) are emptied, killing what still runs in them
/// (escapees of its commands), and removed.
fn remove_stale_once(base: &Path) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for dir in dead_owners_dirs(base) {
            let _ = fs::write(dir.join("cgroup.kill"), b"1");
            for _ in 0..20 {
                if fs::remove_dir(&dir).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    });
}

/// Owns one execution's cgroup directory; removes it on drop, killing what
/// is still inside first.
#[derive(Debug)]
pub(crate) struct CgroupGuard {
    dir: PathBuf,
    procs: OwnedFd,
    dir_fd: OwnedFd,
    /// Held across every read of and write to the directory, so a kill that
    /// checked it cannot land after the release, on a cgroup that is
    /// another execution's by then (a clone into a cgroup that is being
    /// killed is killed too).
    state: Mutex<GuardState>,
}

#[derive(Debug, Default)]
struct GuardState {
    /// The directory is gone or pooled: the guard never touches it again.
    released: bool,
    /// `cgroup.kill` was written. Such a cgroup is never pooled: Linux (seen
    /// on 6.18) SIGKILLs every later `clone3(CLONE_INTO_CGROUP)` into a
    /// cgroup that was ever killed, so its next command would die at birth.
    killed: bool,
}

impl CgroupGuard {
    /// Creates `agent-reach-<tag>` under our own cgroup.
    pub(crate) fn create(tag: &str) -> std::io::Result<Self> {
        let unavailable =
            || std::io::Error::new(std::io::ErrorKind::Unsupported, "no writable cgroup2");
        if UNAVAILABLE.load(Ordering::Relaxed) {
            return Err(unavailable());
        }
        let base = own_cgroup_dir().ok_or_else(unavailable)?;
        remove_stale_once(base);
        while let Some(dir) = pool().pop() {
            match open_cgroup(&dir) {
                Ok(guard) => return Ok(guard),
                Err(_) => {
                    let _ = fs::remove_dir(&dir);
                }
            }
        }
        let dir = base.join(format!("{PREFIX}{tag}"));
        match fs::create_dir(&dir).and_then(|()| open_cgroup(&dir)) {
            Ok(guard) => Ok(guard),
            Err(err) => {
                let _ = fs::remove_dir(&dir);
                UNAVAILABLE.store(true, Ordering::Relaxed);
                Err(err)
            }
        }
    }

    /// Limits the processes inside to `max` (`pids.max`); fails where the
    /// controller cannot be had. Whether it can is found out once, at the
    /// first command: the `pids` controller enabled for our cgroups if it
    /// is not yet (existing ones get it too), or, where it cannot be (a
    /// hybrid machine's cgroup2 carries none), never looked for again.
    pub(crate) fn set_pids_max(&self, max: u64) -> std::io::Result<()> {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        let file = self.dir.join("pids.max");
        let available = *AVAILABLE.get_or_init(|| {
            if !file.exists()
                && let Some(base) = self.dir.parent()
            {
                let _ = fs::write(base.join("cgroup.subtree_control"), "+pids");
            }
            file.exists()
        });
        if !available {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "no pids controller in cgroup2",
            ));
        }
        fs::write(file, max.to_string())
    }

    /// An fd open on `cgroup.procs` for writing: a child writes `0` to it
    /// between fork and exec to move itself in before it can fork.
    pub(crate) fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// An fd open on the cgroup directory, for `clone3(CLONE_INTO_CGROUP)`.
    pub(crate) fn dir_fd(&self) -> RawFd {
        self.dir_fd.as_raw_fd()
    }

    /// The processes inside (zombies are not listed); none once the
    /// cgroup was released (it may be another execution's by then).
    pub(crate) fn members(&self) -> Vec<i32> {
        let state = self.lock();
        if state.released {
            return Vec::new();
        }
        self.read_members()
    }

    /// SIGKILLs everything inside, including what forks while we kill.
    pub(crate) fn kill_all(&self) {
        let mut state = self.lock();
        if state.released {
            return;
        }
        state.killed = true;
        let written = fs::OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.kill"))
            .and_then(|mut f| f.write_all(b"1"));
        if written.is_err() {
            self.signal_members(libc::SIGKILL);
        }
    }

    fn lock(&self) -> MutexGuard<'_, GuardState> {
        crate::sync::lock(&self.state)
    }

    /// With the lock held and the cgroup not released.
    fn read_members(&self) -> Vec<i32> {
        super::procfs::read_small(self.dir.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// With the lock held and the cgroup not released.
    fn signal_members(&self, signal: i32) {
        for pid in self.read_members() {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, signal) };
        }
    }
}

impl CgroupGuard {
    /// Lets the cgroup go once it is empty (done at the end of a clean-up,
    /// so no exit of the process can leave it behind): into the pool for
    /// the next execution, or removed when the pool is full. After this the
    /// guard never touches it again; the drop tries again if it was not
    /// empty.
    pub(crate) fn release(&self) {
        let mut state = self.lock();
        if state.released || !self.read_members().is_empty() {
            return;
        }
        let mut pool = pool();
        if pool.len() < POOL_MAX && !state.killed {
            release_pools_at_exit();
            pool.push(self.dir.clone());
            state.released = true;
            return;
        }
        drop(pool);
        if fs::remove_dir(&self.dir).is_ok() {
            state.released = true;
        }
    }
}

fn open_cgroup(dir: &Path) -> std::io::Result<CgroupGuard> {
    let procs = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .map(OwnedFd::from)?;
    let dir_fd = fs::File::open(dir).map(OwnedFd::from)?;
    Ok(CgroupGuard {
        dir: dir.to_path_buf(),
        procs,
        dir_fd,
        state: Mutex::new(GuardState::default()),
    })
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        if self
            .state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .released
        {
            return;
        }
        for _ in 0..40 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => {
                    self.kill_all();
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_among_v1_mounts() {
        let info = "30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                    35 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount_point(info),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            cgroup2_mount_point("1 2 0:1 / / rw - ext4 /dev/x rw\n"),
            None
        );
    }

    /// A new cgroup, or `None` after saying loudly why the test is skipped.
    fn cgroup_or_skip(tag: &str) -> Option<CgroupGuard> {
        CgroupGuard::create(tag)
            .map_err(|err| eprintln!("SKIPPED: no writable cgroup2 here ({err})"))
            .ok()
    }

    #[test]
    fn a_released_cgroup_is_reused_and_its_old_guard_lets_it_be() {
        let Some(first) = cgroup_or_skip("ar-test-pool-a") else {
            return;
        };
        first.release();
        let second = CgroupGuard::create("ar-test-pool-b").unwrap();
        assert_eq!(second.dir, first.dir, "the pooled directory is taken");
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        fs::write(second.dir.join("cgroup.procs"), pid.to_string()).unwrap();
        assert_eq!(second.members(), vec![pid]);
        assert!(first.members().is_empty(), "the old guard sees nothing");
        first.kill_all();
        drop(first);
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the old guard killed it"
        );
        second.kill_all();
        child.wait().unwrap();
        drop(second);
    }

    #[test]
    fn a_killed_cgroup_is_removed_not_pooled() {
        let Some(killed) = cgroup_or_skip("ar-test-pool-killed") else {
            return;
        };
        killed.kill_all();
        killed.release();
        assert!(!killed.dir.exists(), "the killed cgroup was kept");
        let next = CgroupGuard::create("ar-test-pool-after-kill").unwrap();
        assert_ne!(next.dir, killed.dir);
        next.release();
    }

    #[test]
    fn cgroup_names_tell_their_owner() {
        assert_eq!(owner_pid("agent-reach-ar-4242-0-1a2b"), Some(4242));
        assert_eq!(owner_pid("agent-reach-other"), None);
        assert_eq!(owner_pid("system.slice"), None);
    }

    #[test]
    fn reads_the_unified_line_of_proc_cgroup() {
        assert_eq!(
            unified_cgroup_path("4:memory:/x\n0::/user.slice/a.scope\n"),
            Some("/user.slice/a.scope")
        );
        assert_eq!(unified_cgroup_path("4:memory:/x\n"), None);
    }
}
