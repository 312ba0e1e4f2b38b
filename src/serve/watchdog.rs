//! A watchdog process that outlives a crashed server just long enough to kill
//! what the server started.
//!
//! A server killed with SIGKILL runs no cleanup. Its direct children die by
//! their parent-death signal, but a grandchild (`sleep` under `bash -c 'sleep
//! 300; echo'`, a double-forked daemon) is re-parented to init and would live
//! on. So before the runtime starts threads, the server forks this watchdog:
//! it sits in a process group of its own, holding only the read end of a pipe
//! whose write end only the server holds. When the server is gone, however it
//! went, the read returns end-of-file; the watchdog then SIGKILLs every
//! process tagged `AGENT_REACH_SESSION=ar-<server pid>-...`, removes the
//! session PATH directory, and exits. After a clean shutdown it finds nothing.

use std::fs;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{ForkResult, Pid};

use crate::exec::KnownChildGuard;

/// How long the watchdog keeps sweeping for processes forked while it kills.
const SWEEP_FOR: Duration = Duration::from_secs(2);

/// Held by the server: dropping it (or dying) wakes the watchdog.
#[derive(Debug)]
pub(crate) struct WatchdogGuard {
    _write_end: OwnedFd,
    /// Keeps the engine from taking the watchdog for an orphan of a command
    /// (it kills and reaps those).
    _known: KnownChildGuard,
}

/// Forks the watchdog. Must be called while the process has one thread.
pub(crate) fn start(path_dir: &Path) -> std::io::Result<WatchdogGuard> {
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let server = std::process::id() as i32;
    // SAFETY: called before any thread exists (serve::main runs it before the
    // runtime), so the child may run ordinary code until it exits.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Parent { child } => {
            drop(read_end);
            Ok(WatchdogGuard {
                _write_end: write_end,
                _known: KnownChildGuard::register(child.as_raw()),
            })
        }
        ForkResult::Child => {
            drop(write_end);
            let code = watch(read_end, server, path_dir);
            // SAFETY: _exit ends the child without running the parent's
            // destructors (the PATH guard's Drop belongs to the server).
            unsafe { libc::_exit(code) }
        }
    }
}

fn watch(read_end: OwnedFd, server: i32, path_dir: &Path) -> i32 {
    let _ = nix::unistd::setsid();
    close_other_fds(read_end.as_raw_fd());
    let mut pipe = fs::File::from(read_end);
    let mut byte = [0u8; 1];
    // Returns at end-of-file: the server is gone.
    while matches!(pipe.read(&mut byte), Ok(n) if n > 0) {}
    let until = Instant::now() + SWEEP_FOR;
    loop {
        let left = kill_tagged(server);
        if left == 0 || Instant::now() >= until {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = fs::remove_dir_all(path_dir);
    0
}

/// Closes every fd but `keep` and points 0, 1 and 2 at /dev/null, so the
/// watchdog never holds the client's pipes open.
fn close_other_fds(keep: i32) {
    let fds: Vec<i32> = fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    for fd in fds {
        if fd != keep {
            // SAFETY: closing a descriptor number; nothing else runs here.
            unsafe { libc::close(fd) };
        }
    }
    if let Ok(null) = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for target in 0..3 {
            // SAFETY: dup2 onto the standard descriptor numbers.
            unsafe { libc::dup2(null.as_raw_fd(), target) };
        }
    }
}

/// SIGKILLs every process whose session tag names `server`; returns how many.
fn kill_tagged(server: i32) -> usize {
    let prefix = format!("AGENT_REACH_SESSION=ar-{server}-");
    let mut killed = 0;
    for pid in tagged_pids(prefix.as_bytes()) {
        if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    killed
}

fn tagged_pids(prefix: &[u8]) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let environ = fs::read(entry.path().join("environ")).ok()?;
            environ
                .split(|&b| b == 0)
                .any(|v| v.starts_with(prefix))
                .then_some(pid)
        })
        .collect()
}
