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
//! propagates back), makes every mount but the writable roots read-only, and
//! binds each protected path onto itself read-only. The writable roots are then granted whole, so new files
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

use super::mount_api::{self, MountApiError};

/// Why the mount approach could not be used (the caller falls back).
#[derive(Debug, thiserror::Error)]
pub(crate) enum MountError {
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
    #[error("{0}")]
    Api(MountApiError),
}

/// How the namespace was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Namespace {
    /// A mount namespace alone (the process had CAP_SYS_ADMIN).
    Mount,
    /// A user namespace mapping our own ids, and a mount namespace in it.
    UserAndMount,
}

/// Moves this (single-threaded) process into a private mount namespace with
/// `writable` writable, `protected` (inside them) read-only, and every other
/// mount read-only: with the mount API in a few syscalls ([`mount_api`]),
/// else one remount per mount. An error leaves at most what Landlock
/// enforces anyway (extra mounts, or everything but the roots read-only);
/// a mount the kernel will not remount one by one is skipped, Landlock
/// still guarding its paths.
pub(crate) fn isolate(
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
    keep_mounts_private().map_err(MountError::Private)?;
    let by_api = match mount_api::read_only_except(writable) {
        Ok(()) => true,
        Err(MountApiError::Unavailable { .. }) => false,
        Err(err @ MountApiError::Restore { .. }) => return Err(MountError::Api(err)),
    };
    if !by_api {
        remount_one_by_one(writable)?;
    }
    for path in protected {
        bind(path)?;
        let read_only = if by_api {
            mount_api::set_read_only(path)
                .map_err(|err| nix::Error::from_raw(err.raw_os_error().unwrap_or(libc::EINVAL)))
        } else {
            statvfs(path.as_path())
                .map(|s| locked_flags(s.flags()))
                .and_then(|locked| remount_read_only(path, locked))
        };
        read_only.map_err(|source| MountError::Bind {
            path: path.clone(),
            source,
        })?;
    }
    Ok(namespace)
}

/// Where the mount API is missing (before Linux 5.12): each writable root
/// bound onto itself, then every other mount remounted read-only on its own.
/// A mount the kernel will not remount is skipped, Landlock still guarding
/// its paths.
fn remount_one_by_one(writable: &[PathBuf]) -> Result<(), MountError> {
    let mounts = parse_mountinfo(
        &crate::kernel_file::read_small("/proc/self/mountinfo").unwrap_or_default(),
    );
    // Every bind before the first remount: a failure leaves nothing read-only.
    for path in writable {
        bind(path)?;
    }
    for entry in mounts_to_make_read_only(&mounts, writable) {
        let _ = remount_read_only(&entry.point, entry.flags);
    }
    Ok(())
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

/// Makes the mount at `path` read-only, keeping `flags`: in a user
/// namespace the flags the original mount had are locked (a remount dropping
/// them is refused), and as root dropping them would loosen the mount.
fn remount_read_only(path: &Path, flags: MsFlags) -> Result<(), nix::Error> {
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | flags,
        None::<&str>,
    )
}

/// One line of `/proc/self/mountinfo`, as far as remounting cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// Where it is mounted (the kernel's octal escapes undone).
    pub(crate) point: PathBuf,
    pub(crate) read_only: bool,
    /// Its per-mount flags that a read-only remount must keep.
    pub(crate) flags: MsFlags,
    /// Whether it propagates mount events to peers (`shared:N`).
    pub(crate) shared: bool,
}

/// Parses `/proc/self/mountinfo`: mount point (field 5), per-mount options
/// (field 6) and the optional propagation fields up to the `-` separator.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let point = fields.nth(4)?;
            let options = fields.next()?;
            let shared = fields
                .take_while(|field| *field != "-")
                .any(|field| field.starts_with("shared:"));
            let mut flags = MsFlags::empty();
            let mut read_only = false;
            for option in options.split(',') {
                match option {
                    "ro" => read_only = true,
                    "nosuid" => flags |= MsFlags::MS_NOSUID,
                    "nodev" => flags |= MsFlags::MS_NODEV,
                    "noexec" => flags |= MsFlags::MS_NOEXEC,
                    "noatime" => flags |= MsFlags::MS_NOATIME,
                    "nodiratime" => flags |= MsFlags::MS_NODIRATIME,
                    "relatime" => flags |= MsFlags::MS_RELATIME,
                    _ => {}
                }
            }
            Some(MountEntry {
                point: PathBuf::from(unescape_octal(point)),
                read_only,
                flags,
                shared,
            })
        })
        .collect()
}

/// The mounts to remount read-only: every writable one not at or beneath a
/// writable root, each mount point once (the last, topmost, mount wins).
pub(crate) fn mounts_to_make_read_only<'a>(
    mounts: &'a [MountEntry],
    writable: &[PathBuf],
) -> Vec<&'a MountEntry> {
    let mut chosen: Vec<&MountEntry> = Vec::new();
    for entry in mounts {
        chosen.retain(|earlier| earlier.point != entry.point);
        chosen.push(entry);
    }
    chosen.retain(|entry| {
        !entry.read_only && !writable.iter().any(|root| entry.point.starts_with(root))
    });
    chosen
}

pub(crate) fn unescape_octal(field: &str) -> std::ffi::OsString {
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
pub(crate) fn locked_flags(flags: FsFlags) -> MsFlags {
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

/// Makes the mounts of the namespace we are in slaves of the host's, so
/// ours never propagate back to the host's mount table (where nothing is
/// shared, as in most containers, this changes nothing).
pub(crate) fn keep_mounts_private() -> Result<(), nix::Error> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
        40 22 0:5 / /mnt/my\\040disk rw,nosuid,nodev - tmpfs none rw\n\
        41 22 0:6 / /odd\\134name ro,relatime master:3 - tmpfs none rw\n\
        42 22 0:7 / /work/ws rw - tmpfs none rw\n\
        43 22 0:8 / /dev/pts rw,nosuid,noexec - devpts devpts rw\n\
        44 43 0:9 / /dev/pts ro,nosuid,noexec - devpts devpts rw\n";

    #[test]
    fn mountinfo_lines_are_parsed_and_unescaped() {
        let mounts = parse_mountinfo(MOUNTINFO);
        let points: Vec<&Path> = mounts.iter().map(|m| m.point.as_path()).collect();
        assert_eq!(
            points,
            vec![
                Path::new("/"),
                Path::new("/mnt/my disk"),
                Path::new("/odd\\name"),
                Path::new("/work/ws"),
                Path::new("/dev/pts"),
                Path::new("/dev/pts"),
            ]
        );
        assert!(mounts[0].shared && !mounts[2].shared);
        assert_eq!(mounts[0].flags, MsFlags::MS_RELATIME);
        assert_eq!(mounts[1].flags, MsFlags::MS_NOSUID | MsFlags::MS_NODEV);
        assert!(mounts[2].read_only && !mounts[1].read_only);
        assert!(parse_mountinfo("").is_empty());
    }

    #[test]
    fn only_writable_mounts_outside_the_roots_are_remounted() {
        let mounts = parse_mountinfo(MOUNTINFO);
        let chosen: Vec<&Path> = mounts_to_make_read_only(&mounts, &[PathBuf::from("/work")])
            .iter()
            .map(|m| m.point.as_path())
            .collect();
        // /odd is already ro; /work/ws is under a writable root; the topmost
        // /dev/pts is already ro.
        assert_eq!(chosen, vec![Path::new("/"), Path::new("/mnt/my disk")]);
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
