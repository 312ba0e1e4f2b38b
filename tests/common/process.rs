//! Processes the tests start and watch: a server child stopped the way an
//! operator stops it (SIGTERM, a bounded wait, then SIGKILL), and whether a
//! pid is gone from `/proc` (a zombie counts as gone: it runs nothing).

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How long a server gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// A server process of a test; stopped (TERM, grace, KILL) when dropped.
pub struct ServerProcess {
    child: Child,
}

impl ServerProcess {
    pub fn new(child: Child) -> Self {
        Self { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then its exit status; `None` if it did not stop within the
    /// grace.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        // SAFETY: a signal to the child we started and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let end = Instant::now() + STOP_GRACE;
        while Instant::now() < end {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.stop().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether `pid` runs (a zombie does not).
pub fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z')
        })
        .unwrap_or(false)
}

/// Waits (bounded) for `pid` to be gone; returns whether it is.
pub fn gone_within(pid: i32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if !is_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !is_alive(pid)
}

/// The pid a test's command wrote to `path` (`echo $$ > path`).
pub fn pid_in(path: &std::path::Path) -> i32 {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("no pid file {}: {e}", path.display()));
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{} holds {text:?}, not a pid: {e}", path.display()))
}
