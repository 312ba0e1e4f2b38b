//! What no file operation may touch, whatever door asks: the one rule list
//! the sandbox wrapper enforces for commands, checked here on the handle
//! every workspace operation opened.
//!
//! Two kinds of protected path:
//!
//! - **sealed**: neither read nor written, nor listed, by any file
//!   operation, under every policy (`danger-full-access` included):
//!   agent-reach's state directory (`$AGENT_REACH_HOME`: the sandbox
//!   wrapper of the session PATH entry, spill files, slots), the listeners'
//!   token file and the registry's secrets file. A sealed file is also
//!   known by its device and inode, so a hard link to it elsewhere in the
//!   root is refused too.
//! - **read-only**: readable, never written, removed, renamed or chmodded:
//!   a `.git` at the top of the root or of a writable root (with its
//!   `gitdir:` targets), as `sandbox::fs_plan::read_only_within` lists it
//!   for the wrapper. Under `danger-full-access` commands may write them,
//!   and so may file operations.
//!
//! The check is made on what the kernel opened, never on the caller's
//! text: the handle's path (`/proc/self/fd`) after the beneath-the-root
//! resolution, so a link, `..` or a directory swapped meanwhile leads to
//! the same answer as the plain path. Removing or moving a directory that
//! holds a protected path is refused as a write of it.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat};

use super::{WorkspaceError, beneath};

/// What an operation does to the path it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads, stats or lists it.
    Read,
    /// Writes, creates, chmods it.
    Write,
    /// Removes, moves or replaces it, with everything beneath.
    Destroy,
}

/// The protected paths of one server (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Fence {
    sealed: Vec<PathBuf>,
    /// Device and inode of every sealed path that existed when the fence was
    /// made.
    sealed_ids: Vec<(u64, u64)>,
    read_only: Vec<PathBuf>,
}

impl Fence {
    /// A fence sealing `sealed` and keeping `read_only` unwritten; each path
    /// is taken as the kernel resolves it where it exists.
    pub(crate) fn new(
        sealed: impl IntoIterator<Item = PathBuf>,
        read_only: impl IntoIterator<Item = PathBuf>,
    ) -> Self {
        let canonical = |path: PathBuf| path.canonicalize().unwrap_or(path);
        let mut sealed_paths = Vec::new();
        let mut sealed_ids = Vec::new();
        for path in sealed {
            let path = canonical(path);
            if let Ok(stat) = nix::sys::stat::stat(&path) {
                sealed_ids.push((stat.st_dev, stat.st_ino));
            }
            sealed_paths.push(path);
        }
        let mut read_only: Vec<PathBuf> = read_only.into_iter().map(canonical).collect();
        read_only.sort();
        read_only.dedup();
        sealed_paths.sort();
        sealed_paths.dedup();
        Self {
            sealed: sealed_paths,
            sealed_ids,
            read_only,
        }
    }

    /// Whether `path` is sealed or lies beneath a sealed path (a listing or
    /// a walk leaves it out).
    pub(crate) fn seals(&self, path: &Path) -> bool {
        self.sealed.iter().any(|sealed| path.starts_with(sealed))
    }

    /// Whether `access` to `path` (as the kernel names it) is allowed.
    pub(crate) fn allows(&self, path: &Path, access: Access) -> bool {
        if self.seals(path) {
            return false;
        }
        match access {
            Access::Read => true,
            Access::Write => !self.read_only.iter().any(|ro| path.starts_with(ro)),
            Access::Destroy => !self
                .read_only
                .iter()
                .chain(&self.sealed)
                .any(|kept| path.starts_with(kept) || kept.starts_with(path)),
        }
    }

    /// Refuses `access` to what `fd` is.
    pub(crate) fn check_fd(
        &self,
        fd: BorrowedFd<'_>,
        shown: &str,
        access: Access,
    ) -> Result<(), WorkspaceError> {
        if self.is_empty() {
            return Ok(());
        }
        let path = where_is(fd, shown)?;
        let id = fstat(fd).ok().map(|s| (s.st_dev, s.st_ino));
        self.decide(&path, id, shown, access)
    }

    /// Refuses `access` to the entry `name` of the directory `dir` (which
    /// may not exist yet).
    pub(crate) fn check_child(
        &self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        shown: &str,
        access: Access,
    ) -> Result<(), WorkspaceError> {
        if self.is_empty() {
            return Ok(());
        }
        let parent = where_is(dir, shown)?;
        let id = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .ok()
            .map(|s| (s.st_dev, s.st_ino));
        self.decide(&parent.join(name), id, shown, access)
    }

    /// Whether the entry `name` of `dir` stays out of a listing.
    pub(crate) fn hides_child(&self, dir: &Path, name: &OsStr, id: (u64, u64)) -> bool {
        !self.is_empty() && (self.seals(&dir.join(name)) || self.sealed_ids.contains(&id))
    }

    /// Whether nothing is protected (`run`, tests): no check costs anything.
    pub(crate) fn is_empty(&self) -> bool {
        self.sealed.is_empty() && self.read_only.is_empty()
    }

    fn decide(
        &self,
        path: &Path,
        id: Option<(u64, u64)>,
        shown: &str,
        access: Access,
    ) -> Result<(), WorkspaceError> {
        let hard_link = id.is_some_and(|id| self.sealed_ids.contains(&id));
        if hard_link || !self.allows(path, access) {
            return Err(WorkspaceError::Protected {
                path: shown.to_owned(),
            });
        }
        Ok(())
    }
}

/// Where the kernel says `fd` is (`shown` names it in an error).
fn where_is(fd: BorrowedFd<'_>, shown: &str) -> Result<PathBuf, WorkspaceError> {
    beneath::path_of(fd).map_err(|source| WorkspaceError::Io {
        path: shown.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> Fence {
        Fence::new(
            [
                PathBuf::from("/nonexistent/ws/.agent-reach"),
                PathBuf::from("/nonexistent/ws/token"),
            ],
            [PathBuf::from("/nonexistent/ws/.git")],
        )
    }

    #[test]
    fn a_sealed_path_is_neither_read_nor_written_nor_anything_beneath_it() {
        let fence = fence();
        for access in [Access::Read, Access::Write, Access::Destroy] {
            assert!(!fence.allows(Path::new("/nonexistent/ws/token"), access));
            assert!(!fence.allows(
                Path::new("/nonexistent/ws/.agent-reach/tmp/path/x/agent-reach-sandbox"),
                access
            ));
        }
        assert!(fence.allows(Path::new("/nonexistent/ws/tokens"), Access::Write));
        assert!(fence.allows(Path::new("/nonexistent/ws/.agent-reachx"), Access::Read));
    }

    #[test]
    fn a_read_only_path_is_read_but_not_written_and_its_holders_not_removed() {
        let fence = fence();
        let hook = Path::new("/nonexistent/ws/.git/hooks/post-checkout");
        assert!(fence.allows(hook, Access::Read));
        assert!(!fence.allows(hook, Access::Write));
        assert!(!fence.allows(Path::new("/nonexistent/ws/.git"), Access::Write));
        assert!(!fence.allows(Path::new("/nonexistent/ws"), Access::Destroy));
        assert!(fence.allows(Path::new("/nonexistent/ws"), Access::Write));
        assert!(fence.allows(Path::new("/nonexistent/ws/src"), Access::Destroy));
        assert!(fence.allows(Path::new("/nonexistent/ws/.github/x"), Access::Write));
    }

    #[test]
    fn an_empty_fence_allows_everything() {
        let fence = Fence::default();
        assert!(fence.allows(Path::new("/"), Access::Destroy));
    }
}
