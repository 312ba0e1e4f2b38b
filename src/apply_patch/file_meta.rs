//! What apply_patch reads from and sets on a file's metadata, per platform:
//! the permission bits, owner and change stamp on Unix; on Windows the
//! read-only flag and the size and write time (the stamp that tells a file
//! changed while the patch was applied).

use std::fs::{File, Metadata, Permissions};

/// `(mode, uid, gid)` of a file.
#[cfg(unix)]
pub(super) fn attrs(meta: &Metadata) -> (u32, u32, u32) {
    use std::os::unix::fs::MetadataExt;
    (meta.mode() & 0o7777, meta.uid(), meta.gid())
}

/// `(mode, uid, gid)` of a file: Windows has only the read-only flag.
#[cfg(windows)]
pub(super) fn attrs(meta: &Metadata) -> (u32, u32, u32) {
    let mode = if meta.permissions().readonly() {
        0o444
    } else {
        0o644
    };
    (mode, 0, 0)
}

/// `(dev, ino, size, mtime, mtime_nsec)` of a file.
#[cfg(unix)]
pub(super) fn stamp(meta: &Metadata) -> (u64, u64, u64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
    )
}

/// `(dev, ino, size, mtime, mtime_nsec)` of a file: the size and the last
/// write time (100 ns ticks) are what Windows gives without opening it.
#[cfg(windows)]
pub(super) fn stamp(meta: &Metadata) -> (u64, u64, u64, i64, i64) {
    use std::os::windows::fs::MetadataExt;
    let written = meta.last_write_time();
    (
        0,
        0,
        meta.file_size(),
        i64::try_from(written / 10_000_000).unwrap_or(i64::MAX),
        i64::try_from(written % 10_000_000).unwrap_or(0),
    )
}

/// The permissions a file with `mode` gets.
#[cfg(unix)]
pub(super) fn permissions(mode: u32) -> Option<Permissions> {
    use std::os::unix::fs::PermissionsExt;
    Some(Permissions::from_mode(mode))
}

/// Windows files keep the permissions (ACLs) of their directory.
#[cfg(windows)]
pub(super) fn permissions(_mode: u32) -> Option<Permissions> {
    None
}

/// Gives `file` the owner `uid`/`gid` where we may (best effort).
#[cfg(unix)]
pub(super) fn set_owner(file: &File, uid: u32, gid: u32) {
    let _ = std::os::unix::fs::fchown(file, Some(uid), Some(gid));
}

/// Windows files are owned by who writes them.
#[cfg(windows)]
pub(super) fn set_owner(_file: &File, _uid: u32, _gid: u32) {}
