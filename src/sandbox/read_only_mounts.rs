//! A private mount namespace where the whole filesystem is read-only except
//! the writable roots, and `.git` inside them read-only again: the better of
//! the two ways the sandbox keeps `.git` safe, and a second layer under
//! Landlock.
//!
//! Landlock cannot subtract a path from a writable root, so the fallback
//! ([`super::fs_plan::split_writable`]) leaves the root's own directory
//! without write rights. Landlock also does not cover metadata: `chmod`,
//! `chown`, `utimensat` (`touch` of an existing file) and extended attributes
//! outside the writable roots pass it. When the process may create a mount
//! namespace (root, or any user with unprivileged user namespaces), it makes
//! its own copy of the mount table, marks it a slave of the host's (nothing
//! propagates back), binds each writable root onto itself, binds each
//! protected path onto itself read-only, and finally remounts every other
//! mount read-only. The writable roots are then granted whole, so new files
//! at the repository root, `sed -i` and editors' atomic saves all work; `.git`
//! answers EROFS (EBUSY for renaming or removing it, EXDEV for linking or
//! moving files across it), and so does every metadata change outside.
//! Device nodes stay usable on a read-only mount. seccomp and Landlock both
//! refuse later mount changes, so the command cannot lift any of this.
//!
//! A non-root user gets a user namespace mapping only its own uid and gid;
//! files owned by other users then show as the overflow id (`nobody`).
//! Moving a file between two writable roots becomes a copy (EXDEV for
//! `rename`), as under bubblewrap.

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

/// Moves this (single-threaded) process into a private mount namespace with
/// `writable` writable, `protected` (inside them) read-only, and every other
/// mount read-only. An error before the last step leaves only harmless extra
/// mounts behind; failures of the last step (a mount the kernel will not
/// remount) are skipped, Landlock still guarding those paths.
pub fn isolate(
    writable: &[PathBuf],
    protected: &[PathBuf],
    uid: u32,
    gid: u32,
) -> Result<Namespace, MountError> {
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
    for path in writable {
        bind(path)?;
    }
    for path in protected {
        bind(path)?;
        remount_read_only(path).map_err(|source| MountError::Bind {
            path: path.clone(),
            source,
        })?;
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for point in mount_points(&mountinfo) {
        if !writable.iter().any(|root| point.starts_with(root)) {
            let _ = remount_read_only(&point);
        }
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

fn bind(path: &Path) -> Result<(), MountError> {
    mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|source| MountError::Bind {
        path: path.to_path_buf(),
        source,
    })
}

/// Makes the mount at `path` read-only. In a user namespace the flags the
/// original mount had are locked (a remount dropping them is refused), so
/// they are carried over.
fn remount_read_only(path: &Path) -> Result<(), nix::Error> {
    let locked = statvfs(path).map(|s| locked_flags(s.flags()))?;
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked,
        None::<&str>,
    )
}

/// The mount points listed in `/proc/self/mountinfo` (field 5, with the
/// kernel's octal escapes for space, tab, newline and backslash undone).
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_octal(field)))
        .collect()
}

fn unescape_octal(field: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes
            .get(i + 1..i + 4)
            .filter(|_| bytes[i] == b'\\')
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
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
    fn mount_points_are_read_and_unescaped() {
        let mountinfo = "22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                         40 22 0:5 / /mnt/my\\040disk rw - tmpfs none rw\n\
                         41 22 0:6 / /odd\\134name rw - tmpfs none rw\n";
        assert_eq!(
            mount_points(mountinfo),
            vec![
                PathBuf::from("/"),
                PathBuf::from("/mnt/my disk"),
                PathBuf::from("/odd\\name")
            ]
        );
        assert!(mount_points("").is_empty());
    }

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
