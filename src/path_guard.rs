//! The session PATH directory: links to this executable under every
//! personality name, first on the PATH of every child, gone when we are.
//!
//! A model that types `apply_patch <<'EOF'` in a shell agent-reach started must
//! find the tool with nothing installed. So every process that runs commands
//! for others creates `$XDG_RUNTIME_DIR/agent-reach/path/<random>` when that
//! names a writable directory, else `$AGENT_REACH_HOME/tmp/path/<random>`
//! (0700), before any
//! thread starts, fills it with links, and holds an advisory lock on a
//! `.lock` file inside it for as long as the [`PathGuard`] lives. Dropping the
//! guard removes the directory. A process killed with SIGKILL cannot drop
//! anything, so each start first sweeps siblings whose lock is free.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};

use crate::context::ProcessContext;
use crate::personality::PERSONALITY_NAMES;

/// The lock file held inside each session PATH directory.
pub const LOCK_FILE_NAME: &str = ".lock";
/// The lock file's name while it is being locked, before it is renamed to
/// [`LOCK_FILE_NAME`].
const LOCK_PENDING_NAME: &str = ".lock.pending";
/// A directory with no lock file yet may be one being created right now by
/// another start; it is only swept once it is older than this.
const UNLOCKED_GRACE: Duration = Duration::from_secs(60);

/// Why the session PATH directory could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PathGuardError {
    /// A directory could not be created.
    #[error("cannot create session PATH directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    /// The lock file could not be created or locked.
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
    /// A link to the executable could not be made.
    #[error("cannot link {dest} to {src}: {source}")]
    Link {
        src: PathBuf,
        dest: PathBuf,
        source: io::Error,
    },
}

/// Owns one session PATH directory; dropping it removes the directory.
#[derive(Debug)]
pub struct PathGuard {
    dir: PathBuf,
    /// Held until the directory is gone (see the drop), so a concurrent
    /// sweep never sees a free lock on a live directory.
    lock: Option<Flock<File>>,
}

impl PathGuard {
    /// Sweeps stale siblings, then creates and fills a fresh directory under
    /// `root` (a [`path_root`]) with links to `exe`.
    pub fn create(root: &Path, exe: &Path) -> Result<Self, PathGuardError> {
        let parent = root.to_path_buf();
        create_private_dir_all(&parent)?;
        // A failed sweep only leaves litter behind; it must not stop a start.
        let _ = sweep_stale(&parent);
        let dir = tempfile::Builder::new()
            .prefix("s")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(|source| PathGuardError::CreateDir {
                path: parent.clone(),
                source,
            })?;
        // From here on our drop removes it (by name, without listing it).
        let dir = dir.keep();
        let mut guard = Self { dir, lock: None };
        // Locked under another name, then renamed into place: a sibling's
        // sweep that finds `.lock` always finds it held (created as `.lock`
        // and locked after, a sweep between the two removed a live start's
        // directory).
        let pending = guard.dir.join(LOCK_PENDING_NAME);
        guard.lock = Some(lock_file(&pending, true)?);
        let lock_path = guard.dir.join(LOCK_FILE_NAME);
        fs::rename(&pending, &lock_path).map_err(|source| PathGuardError::Lock {
            path: lock_path,
            source,
        })?;
        for (name, _) in PERSONALITY_NAMES {
            link_executable(exe, &guard.dir.join(link_file_name(name)))?;
        }
        Ok(guard)
    }

    /// The directory to put first on children's PATH.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `dir` followed by the entries of `old_path` (which may be empty).
    pub fn prepend_to(&self, old_path: Option<&std::ffi::OsStr>) -> std::ffi::OsString {
        let mut entries = vec![self.dir().to_path_buf()];
        if let Some(old) = old_path {
            entries.extend(std::env::split_paths(old).filter(|p| p != self.dir()));
        }
        std::env::join_paths(entries).unwrap_or_else(|_| self.dir().as_os_str().to_owned())
    }
}

impl Drop for PathGuard {
    fn drop(&mut self) {
        // The entries we made, by name, then the directory: a listing
        // (`remove_dir_all`) only when something else was put there.
        for (name, _) in PERSONALITY_NAMES {
            let _ = fs::remove_file(self.dir.join(link_file_name(name)));
        }
        let _ = fs::remove_file(self.dir.join(LOCK_FILE_NAME));
        if fs::remove_dir(&self.dir).is_err() {
            let _ = fs::remove_dir_all(&self.dir);
        }
        drop(self.lock.take());
    }
}

/// Where session PATH directories live: under `runtime_dir`
/// (`$XDG_RUNTIME_DIR`, a tmpfs: cheaper) when it names a writable
/// directory, else under the agent-reach home.
pub fn path_root(home: &Path, runtime_dir: Option<&std::ffi::OsStr>) -> PathBuf {
    use nix::unistd::{AccessFlags, access};
    if let Some(dir) = runtime_dir.map(Path::new)
        && dir.is_absolute()
        && dir.is_dir()
        && access(dir, AccessFlags::W_OK | AccessFlags::X_OK).is_ok()
    {
        return dir.join("agent-reach").join("path");
    }
    home.join("tmp").join("path")
}

/// [`path_root`] for this process: its home and its `$XDG_RUNTIME_DIR`.
pub(crate) fn session_path_root(ctx: &ProcessContext) -> PathBuf {
    path_root(&ctx.agent_reach_home(), ctx.var("XDG_RUNTIME_DIR"))
}

#[cfg(not(windows))]
fn link_file_name(name: &str) -> String {
    name.to_owned()
}

#[cfg(windows)]
fn link_file_name(name: &str) -> String {
    format!("{name}.cmd")
}

fn create_private_dir_all(path: &Path) -> Result<(), PathGuardError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|source| PathGuardError::CreateDir {
            path: path.to_path_buf(),
            source,
        })
}

fn lock_file(path: &Path, create: bool) -> Result<Flock<File>, PathGuardError> {
    let lock_err = |source| PathGuardError::Lock {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(lock_err)?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|(_, errno)| lock_err(io::Error::from(errno)))
}

/// Removes every directory under `parent` whose lock is free, and leaves those
/// whose lock is held. Returns the directories removed.
pub(crate) fn sweep_stale(parent: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(parent)? {
        let entry = entry?;
        let path = entry.path();
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let lock_path = path.join(LOCK_FILE_NAME);
        let stale = if lock_path.exists() {
            // Holding the lock while deleting keeps a racing sweep out.
            match lock_file(&lock_path, false) {
                Ok(lock) => {
                    let gone = fs::remove_dir_all(&path).is_ok();
                    drop(lock);
                    gone
                }
                Err(_) => false,
            }
        } else {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .is_some_and(|age| age > UNLOCKED_GRACE);
            old && fs::remove_dir_all(&path).is_ok()
        };
        if stale {
            removed.push(path);
        }
    }
    Ok(removed)
}

/// Links `dest` (in a fresh directory) to `src`: a hard link, or a symlink
/// where a hard link cannot be made (another filesystem, or
/// `fs.protected_hardlinks` on someone else's file). A hard link is an entry
/// to the same inode, where a symlink is an inode of its own; on a
/// journalling filesystem that is a quarter of the cost of every start. It
/// also keeps naming the running executable if a new version is installed
/// over its path meanwhile.
#[cfg(unix)]
fn link_executable(src: &Path, dest: &Path) -> Result<(), PathGuardError> {
    fs::hard_link(src, dest)
        .or_else(|_| std::os::unix::fs::symlink(src, dest))
        .map_err(|source| PathGuardError::Link {
            src: src.to_path_buf(),
            dest: dest.to_path_buf(),
            source,
        })
}

/// On Windows the "link" is a `.cmd` shim made from the template in `shims/`.
#[cfg(windows)]
fn link_executable(src: &Path, dest: &Path) -> Result<(), PathGuardError> {
    const TEMPLATE: &str = include_str!("../shims/personality.cmd");
    let name = dest
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let body = TEMPLATE
        .replace("{exe}", &src.display().to_string())
        .replace("{name}", name);
    fs::write(dest, body).map_err(|source| PathGuardError::Link {
        src: src.to_path_buf(),
        dest: dest.to_path_buf(),
        source,
    })
}

/// Setting up a process that runs commands for others: the session PATH
/// directory and the child subreaper, both before any thread starts.
/// `std::env::set_var` is unsound once other threads exist, and the tokio
/// runtime starts threads; so `serve`, `run`, `exec` and `shell` call
/// [`ProcessSession::start`] first thing, on the dispatch thread.
/// The per-process session state: holds the PATH directory alive.
#[derive(Debug)]
pub(crate) struct ProcessSession {
    /// Owns the `<random>` directory under [`session_path_root`].
    pub(crate) path_guard: PathGuard,
}

impl ProcessSession {
    /// Creates the PATH directory, puts it first on this process's PATH (and
    /// on `ctx.env`, which children's environments are built from) and makes
    /// this process a child subreaper so orphaned grandchildren come back to
    /// us instead of init, where we can still kill them.
    pub(crate) fn start(ctx: &mut ProcessContext) -> Result<Self, PathGuardError> {
        let path_guard = PathGuard::create(&session_path_root(ctx), &ctx.exe)?;
        let new_path = path_guard.prepend_to(ctx.var("PATH"));
        // SAFETY: called from dispatch before any thread is started.
        unsafe { std::env::set_var("PATH", &new_path) };
        ctx.env.insert("PATH".into(), new_path);
        #[cfg(target_os = "linux")]
        {
            // Failure only weakens orphan cleanup; the engine also scans /proc.
            let _ = nix::sys::prctl::set_child_subreaper(true);
        }
        Ok(Self { path_guard })
    }

    /// The directory that holds the personality links.
    pub(crate) fn path_dir(&self) -> &std::path::Path {
        self.path_guard.dir()
    }

    /// The link that starts the sandbox personality.
    pub(crate) fn sandbox_link(&self) -> std::path::PathBuf {
        self.path_dir().join("agent-reach-sandbox")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn guard_creates_private_dir_with_links_and_removes_it_on_drop() {
        let home = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let guard = PathGuard::create(&path_root(home.path(), None), &exe).unwrap();
        let dir = guard.dir().to_path_buf();
        assert!(dir.starts_with(path_root(home.path(), None)));
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let identity = |path: &Path| {
            use std::os::unix::fs::MetadataExt;
            let meta = fs::metadata(path).unwrap();
            (meta.dev(), meta.ino())
        };
        for (name, _) in PERSONALITY_NAMES {
            assert_eq!(identity(&dir.join(name)), identity(&exe), "{name}");
        }
        assert!(dir.join(LOCK_FILE_NAME).exists());
        drop(guard);
        assert!(!dir.exists());
    }

    #[test]
    fn drop_removes_the_directory_even_with_files_put_in_it() {
        let home = tempfile::tempdir().unwrap();
        let guard = PathGuard::create(
            &path_root(home.path(), None),
            &std::env::current_exe().unwrap(),
        )
        .unwrap();
        let dir = guard.dir().to_path_buf();
        fs::write(dir.join("left-by-a-command"), "x").unwrap();
        fs::create_dir(dir.join("sub")).unwrap();
        drop(guard);
        assert!(!dir.exists());
    }

    #[test]
    fn sweep_removes_unlocked_and_keeps_locked_dirs() {
        let home = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let live = PathGuard::create(&path_root(home.path(), None), &exe).unwrap();
        let dead = path_root(home.path(), None).join("sdead");
        fs::create_dir_all(&dead).unwrap();
        fs::write(dead.join(LOCK_FILE_NAME), "").unwrap();
        let removed = sweep_stale(&path_root(home.path(), None)).unwrap();
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists());
        assert!(live.dir().exists());
    }

    #[test]
    fn prepend_puts_dir_first_once() {
        let home = tempfile::tempdir().unwrap();
        let guard = PathGuard::create(
            &path_root(home.path(), None),
            &std::env::current_exe().unwrap(),
        )
        .unwrap();
        let joined = guard.prepend_to(Some(std::ffi::OsStr::new("/usr/bin:/bin")));
        let parts: Vec<_> = std::env::split_paths(&joined).collect();
        assert_eq!(parts[0], guard.dir());
        assert_eq!(
            &parts[1..],
            &[PathBuf::from("/usr/bin"), PathBuf::from("/bin")]
        );
    }
}
