//! What keeps a spill file from being removed while it is written, per
//! platform: an exclusive `flock` on Unix; on Windows the file is opened
//! without `FILE_SHARE_DELETE`, so the system itself refuses to remove it
//! until the writer closes it.

use std::fs::{DirBuilder, File, OpenOptions};
use std::path::Path;

/// A spill file open for writing, with its lock.
#[cfg(unix)]
pub(super) type LockedFile = nix::fcntl::Flock<File>;
/// A spill file open for writing; its share mode is the lock.
#[cfg(windows)]
pub(super) type LockedFile = File;

/// Creates `path` (new, private to the user) and locks it.
pub(super) fn create_locked(path: &Path) -> Result<LockedFile, String> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        // FILE_SHARE_READ alone: readers may look, nobody may remove it.
        options.share_mode(windows_sys::Win32::Storage::FileSystem::FILE_SHARE_READ);
    }
    let file = options.open(path).map_err(|error| error.to_string())?;
    lock(file)
}

#[cfg(unix)]
fn lock(file: File) -> Result<LockedFile, String> {
    use nix::fcntl::{Flock, FlockArg};
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| errno.to_string())
}

#[cfg(windows)]
fn lock(file: File) -> Result<LockedFile, String> {
    Ok(file)
}

/// Removes `path` unless a writer still holds it.
pub(super) fn remove_if_unlocked(path: &Path) -> bool {
    #[cfg(unix)]
    {
        let Ok(file) = File::open(path) else {
            return false;
        };
        match lock(file) {
            Ok(_locked) => std::fs::remove_file(path).is_ok(),
            Err(_) => false,
        }
    }
    #[cfg(windows)]
    {
        std::fs::remove_file(path).is_ok()
    }
}

/// Makes a store's directory (and its parents), private to the user: the
/// spill files here, the shared result cache (`registry::cache_store`).
pub(crate) fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}
