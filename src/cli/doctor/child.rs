//! Running a probe in a forked child: what a probe does to itself (a user
//! namespace, a Landlock ruleset, a seccomp filter, the subreaper flag)
//! lasts for the process's life, so doctor does it in a child that exits,
//! and reads back one line the child wrote on a pipe.
//!
//! `doctor` is single-threaded when it forks (it starts no runtime), so the
//! child may allocate and call the same library code as the sandbox does.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork, pipe};

/// What the child reported: its own verdict and the line it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ChildReport {
    /// The child's `Ok`/`Err` (its exit status 0 or not).
    pub(crate) ok: bool,
    /// The line it wrote (or why no line came back).
    pub(crate) line: String,
}

/// Runs `probe` in a forked child; its `Ok`/`Err` string comes back.
pub(super) fn in_child(probe: impl FnOnce() -> Result<String, String>) -> ChildReport {
    let (reader, writer) = match pipe() {
        Ok(ends) => ends,
        Err(err) => return failed(format!("cannot make a pipe for the probe: {err}")),
    };
    // SAFETY: doctor runs on the only thread of the process (no runtime was
    // started), so the child inherits no lock held by another thread; it
    // runs `probe`, writes one line and leaves with `_exit`.
    match unsafe { fork() } {
        Err(err) => failed(format!("cannot fork the probe: {err}")),
        Ok(ForkResult::Child) => {
            drop(reader);
            let (code, line) = match probe() {
                Ok(line) => (0, line),
                Err(line) => (1, line),
            };
            let mut writer = std::fs::File::from(writer);
            let _ = writer.write_all(line.as_bytes());
            // SAFETY: leaving the child without running the parent's
            // destructors or atexit handlers.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(writer);
            let line = read_all(reader);
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, 0)) => ChildReport { ok: true, line },
                Ok(WaitStatus::Exited(_, _)) => ChildReport { ok: false, line },
                Ok(WaitStatus::Signaled(_, signal, _)) => {
                    failed(format!("the probe was killed by {signal:?} {line}"))
                }
                Ok(other) => failed(format!("the probe ended oddly: {other:?}")),
                Err(err) => failed(format!("cannot wait for the probe: {err}")),
            }
        }
    }
}

fn read_all(reader: OwnedFd) -> String {
    let mut text = String::new();
    let _ = std::fs::File::from(reader).read_to_string(&mut text);
    text.trim().to_owned()
}

fn failed(line: String) -> ChildReport {
    ChildReport { ok: false, line }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_childs_verdict_and_line_come_back() {
        assert_eq!(
            in_child(|| Ok("fine".into())),
            ChildReport {
                ok: true,
                line: "fine".into()
            }
        );
        assert_eq!(
            in_child(|| Err("broken".into())),
            ChildReport {
                ok: false,
                line: "broken".into()
            }
        );
    }
}
