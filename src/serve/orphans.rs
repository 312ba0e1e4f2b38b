//! Processes a crashed agent-reach left behind, found and killed at start.
//!
//! A server killed with SIGKILL cannot clean up: its direct children die by
//! their parent-death signal, but a grandchild that double-forked lives on
//! under init. Every child carries `AGENT_REACH_SESSION=ar-<pid>-...`; at the
//! next start, any process whose tag names a pid that no longer exists is
//! such an orphan.

use std::collections::BTreeSet;
use std::fs;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The pid of the agent-reach process that made `tag` (`ar-<pid>-<n>-<t>`).
pub(crate) fn owner_pid(tag: &str) -> Option<i32> {
    tag.strip_prefix("ar-")?.split('-').next()?.parse().ok()
}

/// Whether `pid` still runs. A reused pid makes an orphan look owned and
/// spares it: the safe way to be wrong.
fn is_alive(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Kills (SIGKILL) every process whose session tag names a dead owner.
/// Returns the pids killed.
pub(crate) fn sweep() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut dead_owners: BTreeSet<i32> = BTreeSet::new();
    let mut live_owners: BTreeSet<i32> = BTreeSet::new();
    let mut killed = Vec::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return killed;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = fs::read(entry.path().join("environ")) else {
            continue;
        };
        let Some(owner) = environ
            .split(|&b| b == 0)
            .find_map(|v| v.strip_prefix(b"AGENT_REACH_SESSION="))
            .and_then(|t| std::str::from_utf8(t).ok())
            .and_then(owner_pid)
        else {
            continue;
        };
        if owner == me || live_owners.contains(&owner) {
            continue;
        }
        if !dead_owners.contains(&owner) {
            if is_alive(owner) {
                live_owners.insert(owner);
                continue;
            }
            dead_owners.insert(owner);
        }
        if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            killed.push(pid);
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_is_read_from_the_tag() {
        assert_eq!(owner_pid("ar-4242-7-0badf00d"), Some(4242));
        assert_eq!(owner_pid("serve-1"), None);
        assert_eq!(owner_pid("ar-x-1"), None);
    }
}
