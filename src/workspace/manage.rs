//! The workspace operations beyond reading, writing, listing and removing:
//! making a directory, moving an entry, and what one entry is (kind, size,
//! mode, owner, link target). Like every operation here each resolves its
//! [`Target`] beneath the root once, by the kernel, and works on the
//! handle (`mkdirat`, `renameat`, `fstatat`, `readlinkat`, `fchmod`). The envd door
//! asks for them through the broker (`MakeDir`, `Move`, `Stat`).

use std::os::fd::{AsFd, OwnedFd};
use std::time::SystemTime;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat, mkdirat};

use super::fs::{NEW_DIR_MODE, modified_of};
use super::{Access, Target, Workspace, WorkspaceError};

/// What an entry is, a link not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatKind {
    File,
    Directory,
    Symlink,
    /// A socket, a device, a FIFO.
    Other,
}

/// One entry's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryStat {
    pub(crate) kind: StatKind,
    pub(crate) size: u64,
    /// `st_mode`: the type and permission bits.
    pub(crate) mode: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) modified: SystemTime,
    /// What a link names, as written in it.
    pub(crate) link_target: Option<String>,
}

fn kind_of(stat: &FileStat) -> StatKind {
    match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFREG => StatKind::File,
        SFlag::S_IFDIR => StatKind::Directory,
        SFlag::S_IFLNK => StatKind::Symlink,
        _ => StatKind::Other,
    }
}

fn entry_stat(stat: &FileStat, link_target: Option<String>) -> EntryStat {
    EntryStat {
        kind: kind_of(stat),
        size: u64::try_from(stat.st_size).unwrap_or(0),
        mode: stat.st_mode,
        uid: stat.st_uid,
        gid: stat.st_gid,
        modified: modified_of(stat),
        link_target,
    }
}

impl Workspace {
    /// What `target` is, a final link reported as the link (with what it
    /// names); the root is a directory.
    pub(crate) fn stat(&self, target: &Target) -> Result<EntryStat, WorkspaceError> {
        let shown = target.shown.as_str();
        let errno = |e| WorkspaceError::from_errno(shown, e);
        let Some((parent, name)) = target.split() else {
            let dir = self.open_target(target, OFlag::O_PATH, Access::Read)?;
            return fstat(&dir).map(|s| entry_stat(&s, None)).map_err(errno);
        };
        let dir = self.open_dir(parent, false, shown)?;
        self.fence
            .check_child(dir.as_fd(), &name, shown, Access::Read)?;
        let stat = fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno)?;
        let link = (kind_of(&stat) == StatKind::Symlink)
            .then(|| readlinkat(&dir, name.as_os_str()).ok())
            .flatten()
            .map(|t| t.to_string_lossy().into_owned());
        Ok(entry_stat(&stat, link))
    }

    /// Makes the directory `target` and its missing parents; `false` when
    /// it was there already. A file in its place is an error.
    pub(crate) fn make_dir(&self, target: &Target) -> Result<bool, WorkspaceError> {
        let shown = target.shown.as_str();
        let errno = |e| WorkspaceError::from_errno(shown, e);
        let Some((parent, name)) = target.split() else {
            return Ok(false);
        };
        let dir: OwnedFd = self.open_dir(parent, true, shown)?;
        self.fence
            .check_child(dir.as_fd(), &name, shown, Access::Write)?;
        match mkdirat(
            &dir,
            name.as_os_str(),
            Mode::from_bits_truncate(NEW_DIR_MODE),
        ) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => {
                let stat =
                    fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno)?;
                if kind_of(&stat) == StatKind::Directory {
                    Ok(false)
                } else {
                    Err(WorkspaceError::Invalid {
                        path: shown.to_owned(),
                        why: "it exists and is not a directory".to_owned(),
                    })
                }
            }
            Err(e) => Err(errno(e)),
        }
    }

    /// Sets the permission bits of `target` (what it names, a final link
    /// followed beneath the root) to `mode`.
    pub(crate) fn set_mode(&self, target: &Target, mode: u32) -> Result<(), WorkspaceError> {
        let fd = self.open_target(
            target,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Access::Write,
        )?;
        fchmod(&fd, Mode::from_bits_truncate(mode & 0o7777))
            .map_err(|e| WorkspaceError::from_errno(&target.shown, e))
    }

    /// Moves the entry `from` (a link moved, not followed) to `to`, making
    /// `to`'s missing parents; what is at `to` is replaced as `rename(2)`
    /// replaces it.
    pub(crate) fn rename(&self, from: &Target, to: &Target) -> Result<(), WorkspaceError> {
        let root = |t: &Target| WorkspaceError::Invalid {
            path: t.shown.clone(),
            why: "the sandbox root cannot be moved or replaced".to_owned(),
        };
        let (from_parent, from_name) = from.split().ok_or_else(|| root(from))?;
        let (to_parent, to_name) = to.split().ok_or_else(|| root(to))?;
        let from_dir = self.open_dir(from_parent, false, &from.shown)?;
        // The source must exist before anything is made for the destination.
        fstatat(
            &from_dir,
            from_name.as_os_str(),
            AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .map_err(|e| WorkspaceError::from_errno(&from.shown, e))?;
        self.fence
            .check_child(from_dir.as_fd(), &from_name, &from.shown, Access::Destroy)?;
        let to_dir = self.open_dir(to_parent, true, &to.shown)?;
        self.fence
            .check_child(to_dir.as_fd(), &to_name, &to.shown, Access::Destroy)?;
        renameat(
            &from_dir,
            from_name.as_os_str(),
            &to_dir,
            to_name.as_os_str(),
        )
        .map_err(|e| WorkspaceError::from_errno(&to.shown, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        (dir, ws)
    }

    #[test]
    fn a_directory_is_made_with_its_parents_once() {
        let (dir, ws) = workspace();
        let target = ws.resolve("a/b/c").unwrap();
        assert!(ws.make_dir(&target).unwrap());
        assert!(dir.path().join("a/b/c").is_dir());
        assert!(!ws.make_dir(&target).unwrap());
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let err = ws.make_dir(&ws.resolve("f").unwrap()).unwrap_err();
        assert!(matches!(err, WorkspaceError::Invalid { .. }), "{err}");
    }

    #[test]
    fn an_entry_moves_into_a_new_directory_and_a_missing_one_is_not_found() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("old.txt"), b"hello").unwrap();
        let from = ws.resolve("old.txt").unwrap();
        let to = ws.resolve("new/dir/moved.txt").unwrap();
        ws.rename(&from, &to).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("new/dir/moved.txt")).unwrap(),
            b"hello"
        );
        let err = ws.rename(&from, &to).unwrap_err();
        assert!(matches!(err, WorkspaceError::NotFound { .. }), "{err}");
        assert!(ws.rename(&ws.resolve("").unwrap(), &to).is_err());
    }

    #[test]
    fn a_link_is_stated_as_a_link_with_its_target() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("f"), b"12345").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        let file = ws.stat(&ws.resolve("f").unwrap()).unwrap();
        assert_eq!((file.kind, file.size), (StatKind::File, 5));
        let link = ws.stat(&ws.resolve_entry("l").unwrap()).unwrap();
        assert_eq!(link.kind, StatKind::Symlink);
        assert_eq!(link.link_target.as_deref(), Some("f"));
        assert_eq!(
            ws.stat(&ws.resolve("").unwrap()).unwrap().kind,
            StatKind::Directory
        );
    }
}
