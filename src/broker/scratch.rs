//! A door's own scratch directory: private files a door's protocol needs
//! beside a live process (SWE-ReX's rc file and the command it feeds the
//! shell), never a caller's path. It lives in agent-reach's state
//! directory ([`scratch_root`]), which every sandboxed command sees
//! read-only and no file route reaches, under a name carrying the server's
//! pid; it is removed with its guard, and what a killed server left is
//! swept at the next start ([`sweep_stale`]).

use std::io::Read;
use std::path::{Path, PathBuf};

/// A private directory, removed when dropped.
#[derive(Debug)]
pub(crate) struct ScratchGuard {
    dir: tempfile::TempDir,
}

impl ScratchGuard {
    /// A new directory named `PREFIX<pid>-<random>` in `parent` (made
    /// first, mode 0700).
    pub(crate) fn new_in(parent: &Path, prefix: &str) -> std::io::Result<Self> {
        std::fs::create_dir_all(parent)?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{prefix}{}-", std::process::id()))
            .tempdir_in(parent)?;
        Ok(Self { dir })
    }

    /// Where it is.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `contents` to `path`, a file of this directory.
    pub(crate) fn write(&self, path: &Path, contents: &[u8]) -> std::io::Result<()> {
        self.check(path)?;
        std::fs::write(path, contents)
    }

    fn check(&self, path: &Path) -> std::io::Result<()> {
        if path.parent() == Some(self.dir.path()) {
            Ok(())
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{} is not a file of the scratch directory {}",
                    path.display(),
                    self.dir.path().display()
                ),
            ))
        }
    }
}

/// The pid a scratch directory's name (`PREFIX<pid>-<random>`) says owns it.
pub(crate) fn owner_of(prefix: &str, name: &str) -> Option<i32> {
    let rest = name.strip_prefix(prefix)?;
    let (pid, random) = rest.split_once('-')?;
    if random.is_empty() {
        return None;
    }
    pid.parse().ok().filter(|&pid| pid > 0)
}

/// The pid in a scratch directory's name whatever its door's prefix
/// (`<prefix><pid>-<random>`, the random part without `-`).
fn any_owner(name: &str) -> Option<i32> {
    let (head, random) = name.rsplit_once('-')?;
    if random.is_empty() {
        return None;
    }
    head.rsplit('-').next()?.parse().ok().filter(|&pid| pid > 0)
}

/// Removes the scratch directories named with `prefix` (every door's when
/// empty) whose server is
/// gone (killed before it could): ours by uid, their owning pid dead.
/// Returns the directories removed.
pub(crate) fn sweep_stale(parent: &Path, prefix: &str) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let uid = nix::unistd::geteuid().as_raw();
    let mut removed = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let owner = |n: &str| {
            if prefix.is_empty() {
                any_owner(n)
            } else {
                owner_of(prefix, n)
            }
        };
        let Some(pid) = name.to_str().and_then(owner) else {
            continue;
        };
        let alive = !matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
            Err(nix::errno::Errno::ESRCH)
        );
        let ours = entry.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if !alive && ours {
            let path = entry.path();
            match std::fs::remove_dir_all(&path) {
                Ok(()) => {
                    tracing::info!(dir = %path.display(), pid, "removed the scratch directory of a server that died");
                    removed.push(path);
                }
                Err(e) => {
                    tracing::warn!(dir = %path.display(), error = %e, "cannot remove a dead server's scratch directory");
                }
            }
        }
    }
    removed
}

/// Removes every door's scratch directories whose server is gone, under
/// the state directory `home`.
pub(crate) fn sweep_all(home: &Path) -> Vec<PathBuf> {
    sweep_stale(&scratch_root(home), "")
}

/// Where the scratch directories of a server whose state directory is
/// `home` live.
pub(crate) fn scratch_root(home: &Path) -> PathBuf {
    home.join("run").join("scratch")
}

/// 64 random bits as 16 hex digits: a marker no command prints by chance
/// (a shell session's prompt or end-of-output marker).
pub(crate) fn nonce() -> String {
    format!("{:016x}", random_u64())
}

/// 64 random bits from the kernel, or from the clock and std's hasher
/// keys where `/dev/urandom` cannot be read.
pub(crate) fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_ok() {
        return u64::from_le_bytes(bytes);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_their_owner() {
        let p = "agent-reach-swerex-";
        assert_eq!(owner_of(p, "agent-reach-swerex-4242-aB3dE9"), Some(4242));
        assert_eq!(owner_of(p, "agent-reach-swerex-aB3dE9"), None);
        assert_eq!(owner_of(p, "agent-reach-swerex-0-x"), None);
        assert_eq!(owner_of(p, "agent-reach-swerex-12-"), None);
        assert_eq!(owner_of(p, "other-12-x"), None);
        assert_eq!(any_owner("agent-reach-swerex-4242-aB3dE9"), Some(4242));
        assert_eq!(any_owner("agent-reach-swerex-x-aB3dE9"), None);
    }

    #[test]
    fn only_files_of_the_directory_are_reached() {
        let home = tempfile::tempdir().unwrap();
        let scratch =
            ScratchGuard::new_in(&scratch_root(home.path()), "agent-reach-test-scratch-").unwrap();
        let inside = scratch.path().join("rc");
        scratch.write(&inside, b"x").unwrap();
        assert_eq!(std::fs::read_to_string(&inside).unwrap(), "x");
        let outside = scratch.path().join("..").join("elsewhere");
        assert!(scratch.write(&outside, b"x").is_err());
        let path = scratch.path().to_path_buf();
        drop(scratch);
        assert!(!path.exists());
    }
}
