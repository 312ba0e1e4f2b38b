//! Keeping `.git` read-only with a private read-only bind mount, the better
//! of the two ways the sandbox protects it.
//!
//! Landlock cannot subtract a path from a writable root, so the fallback
//! ([`super::fs_plan::split_writable`]) leaves the root's own directory
//! without write rights. When the process may create a mount namespace (root,
//! or any user with unprivileged user namespaces), it instead makes its own
//! copy of the mount table, marks it a slave of the host's (nothing
//! propagates back), and bind-mounts each protected path onto itself
//! read-only: the writable roots are then granted whole, so new files at the
//! repository root, `sed -i` and editors' atomic saves all work, and `.git`
//! answers EROFS (EBUSY for renaming or removing it, EXDEV for linking or
//! moving files across it). seccomp and Landlock both refuse later mount
//! changes, so the command cannot lift the mounts.
//!
//! A non-root user gets a user namespace mapping only its own uid and gid;
//! files owned by other users then show as the overflow id (`nobody`).

use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};

/// Why the mount approach could not be used (the caller falls back).
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cannot create a mount namespace: {0}")]
    Namespace(nix::Error),
    #[error("cannot map uid/gid in the user namespace ({path}): {source}")]
    IdMap {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make the mount table private: {0}")]
    Private(nix::Error),
    #[error("cannot bind {path} read-only: {source}")]
    Bind { path: PathBuf, source: nix::Error },
}

/// How the namespace was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    /// A mount namespace alone (the process had CAP_SYS_ADMIN).
    Mount,
    /// A user namespace mapping our own ids, and a mount namespace in it.
    UserAndMount,
}

/// Moves this (single-threaded) process into a private mount namespace and
/// makes each of `paths` a read-only bind of itself.
pub fn protect(paths: &[PathBuf], uid: u32, gid: u32) -> Result<Namespace, MountError> {
    let namespace = match unshare(CloneFlags::CLONE_NEWNS) {
        Ok(()) => Namespace::Mount,
        Err(_) => {
            unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
                .map_err(MountError::Namespace)?;
            write_id_maps(uid, gid)?;
            Namespace::UserAndMount
        }
    };
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(MountError::Private)?;
    for path in paths {
        bind_read_only(path)?;
    }
    Ok(namespace)
}

fn write_id_maps(uid: u32, gid: u32) -> Result<(), MountError> {
    for (file, contents) in [
        ("/proc/self/setgroups", "deny".to_owned()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ] {
        std::fs::write(file, contents).map_err(|source| MountError::IdMap {
            path: file.into(),
            source,
        })?;
    }
    Ok(())
}

fn bind_read_only(path: &Path) -> Result<(), MountError> {
    let err = |source| MountError::Bind {
        path: path.to_path_buf(),
        source,
    };
    mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(err)?;
    // In a user namespace the flags the original mount had are locked: a
    // remount that drops them is refused, so they are carried over.
    let locked = statvfs(path)
        .map(|s| locked_flags(s.flags()))
        .map_err(err)?;
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked,
        None::<&str>,
    )
    .map_err(err)
}

/// The mount flags a bind remount must keep, from the statvfs flags.
pub fn locked_flags(flags: FsFlags) -> MsFlags {
    let pairs = [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ];
    pairs
        .into_iter()
        .filter(|(st, _)| flags.contains(*st))
        .fold(MsFlags::empty(), |acc, (_, ms)| acc | ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_flags_carry_over_and_nothing_else() {
        let flags =
            FsFlags::ST_NOSUID | FsFlags::ST_NODEV | FsFlags::ST_RDONLY | FsFlags::ST_RELATIME;
        assert_eq!(
            locked_flags(flags),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_RELATIME
        );
        assert_eq!(locked_flags(FsFlags::empty()), MsFlags::empty());
    }
}
