//! The one confinement of the crate: every path a caller gives (the file
//! routes of the listeners, working directories, tools' `path` arguments,
//! `apply_patch`) reaches only what lies beneath `--root`, as the kernel
//! resolves it.
//!
//! A client's path is resolved beneath the root by the kernel with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` ([`beneath`]; the
//! `O_NOFOLLOW` walk where the kernel lacks it): links that stay inside are
//! followed, anything leading out (`..` above the root, an absolute link, a
//! link climbing out) is [`WorkspaceError::Escapes`] (HTTP 403), whatever
//! comes before it. A missing component followed by `..` does not exist,
//! as for the kernel: `nope/../up/shadow` is never read as `up/shadow`. As
//! in the reference sandboxd, a leading `/` (or the root itself) means the
//! workspace, so `/main.py` and `main.py` name one file.
//!
//! Every operation ([`fs`]) resolves the path once and then works on the
//! handle it got (`*at` calls), never on the path again, so a directory
//! swapped for a link meanwhile (a command running in the workspace can do
//! that) is resolved beneath the root like any other path. A path that must
//! be handed on as text is located with [`locate`].

pub(crate) mod beneath;
pub(crate) mod fence;
pub(crate) mod fs;
pub(crate) mod manage;
pub(crate) mod upload;
pub(crate) mod walk;
pub(crate) mod watch;

pub(crate) mod locate;

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::OFlag;

pub(crate) use fence::{Access, Fence};
pub(crate) use fs::{Entry, EntryKind};
pub(crate) use locate::locate;

/// Why a workspace operation was refused or failed; each maps to one HTTP
/// status and `code` of the protocols.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkspaceError {
    #[error("path {path:?} leaves the workspace: traversal outside the sandbox root is forbidden")]
    Escapes { path: String },
    #[error("path {path:?} does not exist within the sandbox")]
    NotFound { path: String },
    #[error("path {path:?} is a directory")]
    IsDirectory { path: String },
    #[error("directory {path:?} is not empty; pass recursive=true to remove it")]
    NotEmpty { path: String },
    #[error("the sandbox root cannot be deleted; pass recursive=true to clear its contents")]
    Root,
    #[error("path {path:?}: permission denied")]
    Denied { path: String },
    /// A path the one rule list keeps from every file operation (the state
    /// directory, a read-only `.git`, the token or secrets file).
    #[error(
        "path {path:?} is protected: agent-reach's state, a read-only .git, the token or the secrets file are out of reach of file operations"
    )]
    Protected { path: String },
    #[error("path {path:?} is not usable: {why}")]
    Invalid { path: String, why: String },
    #[error("path {path:?}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl WorkspaceError {
    /// The error of a system call on `path`, by its errno.
    pub(crate) fn from_errno(path: &str, errno: Errno) -> Self {
        let path = path.to_owned();
        match errno {
            Errno::ENOENT | Errno::ENOTDIR => WorkspaceError::NotFound { path },
            // EXDEV: the kernel's "this leads out of the root"; ELOOP: a
            // link loop, a magic link, or a link planted where a no-follow
            // open met it.
            Errno::ELOOP | Errno::EXDEV => WorkspaceError::Escapes { path },
            Errno::EACCES | Errno::EPERM | Errno::EROFS => WorkspaceError::Denied { path },
            Errno::ENOTEMPTY | Errno::EEXIST => WorkspaceError::NotEmpty { path },
            Errno::EISDIR => WorkspaceError::IsDirectory { path },
            // The caller's name, not the server, is at fault.
            Errno::ENAMETOOLONG => WorkspaceError::Invalid {
                path,
                why: "a name in it is longer than the filesystem allows (255 bytes)".to_owned(),
            },
            other => WorkspaceError::Io {
                path,
                source: std::io::Error::from(other),
            },
        }
    }
}

/// A client path checked against the workspace; every operation resolves
/// it beneath the root again, by the kernel, and works on the handle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The path as the client gave it (for messages and listings).
    pub(crate) shown: String,
    /// Relative to the root as the client wrote it (`.` parts dropped, `..`
    /// and links left for the kernel); empty for the root itself.
    pub(crate) rel: PathBuf,
}

impl Target {
    /// The directory holding it and its name; `None` for the root, or for a
    /// path ending in `..` (a directory named as a whole).
    pub(crate) fn split(&self) -> Option<(&Path, OsString)> {
        let Some(Component::Normal(name)) = self.rel.components().next_back() else {
            return None;
        };
        Some((
            self.rel.parent().unwrap_or(Path::new("")),
            name.to_os_string(),
        ))
    }
}

/// The workspace: the canonical `--root`. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Workspace {
    root: Arc<PathBuf>,
    /// What no operation may touch ([`fence`]).
    fence: Arc<Fence>,
}

impl Workspace {
    /// The workspace at `root` (resolved now; as given if it cannot be).
    pub(crate) fn new(root: &Path) -> Self {
        Self::fenced(root, Arc::new(Fence::default()))
    }

    /// The workspace at `root` whose every operation `fence` checks.
    pub(crate) fn fenced(root: &Path, fence: Arc<Fence>) -> Self {
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        Self {
            root: Arc::new(root),
            fence,
        }
    }

    /// The same root, checked against `fence`.
    pub(crate) fn with_fence(&self, fence: Arc<Fence>) -> Self {
        Self {
            root: self.root.clone(),
            fence,
        }
    }

    /// The root, links resolved.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the root is an existing directory (the listeners' readiness).
    pub(crate) fn is_ready(&self) -> bool {
        self.root.is_dir()
    }

    /// The root's handle, every resolution's starting point.
    pub(crate) fn open_root(&self) -> Result<OwnedFd, WorkspaceError> {
        nix::fcntl::open(
            self.root.as_path(),
            beneath::dir_flags() | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| WorkspaceError::from_errno("/", e))
    }

    /// Checks what `path` names: resolved beneath the root by the kernel,
    /// links that stay inside followed. A path leading out is
    /// [`WorkspaceError::Escapes`]; one that does not exist (yet) is fine
    /// here, each operation saying what it makes of that.
    pub(crate) fn resolve(&self, path: &str) -> Result<Target, WorkspaceError> {
        let target = self.target(path)?;
        self.check(&target, OFlag::O_PATH)?;
        Ok(target)
    }

    /// What a delete acts on: the entry itself (a link is removed, not what
    /// it points to), after checking that what it names stays inside.
    pub(crate) fn resolve_entry(&self, path: &str) -> Result<Target, WorkspaceError> {
        let target = self.resolve(path)?;
        if let Some((parent, _)) = target.split() {
            let parent = Target {
                shown: target.shown.clone(),
                rel: parent.to_path_buf(),
            };
            self.check(&parent, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        }
        Ok(target)
    }

    /// Refuses `target` when the kernel finds it leads out of the root (a
    /// missing part is left to the operation).
    fn check(&self, target: &Target, flags: OFlag) -> Result<(), WorkspaceError> {
        let root = self.open_root()?;
        match beneath::open_beneath(root.as_fd(), &target.rel, flags) {
            Ok(_) | Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(()),
            Err(e) => Err(WorkspaceError::from_errno(&target.shown, e)),
        }
    }

    /// The client's `path` as a [`Target`]: the root's own prefix or a
    /// leading `/` dropped, `.` parts dropped; NUL bytes refused, and a path
    /// climbing above the root as written (`a/../../x`) refused at once.
    fn target(&self, path: &str) -> Result<Target, WorkspaceError> {
        if path.contains('\0') {
            return Err(WorkspaceError::Invalid {
                path: path.escape_debug().to_string(),
                why: "the path holds a NUL byte".to_owned(),
            });
        }
        let given = Path::new(path);
        let rel = match given.strip_prefix(self.root.as_path()) {
            Ok(inside) => inside,
            Err(_) => Path::new(path.trim_start_matches('/')),
        };
        let mut depth: usize = 0;
        let mut kept = PathBuf::new();
        for component in rel.components() {
            match component {
                Component::Normal(name) => {
                    depth += 1;
                    kept.push(name);
                }
                Component::ParentDir => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or_else(|| WorkspaceError::Escapes {
                            path: path.to_owned(),
                        })?;
                    kept.push("..");
                }
                Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            }
        }
        Ok(Target {
            shown: path.to_owned(),
            rel: kept,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("up")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", root.join("up/shadow")).unwrap();
        std::os::unix::fs::symlink("src", root.join("inner")).unwrap();
        let ws = Workspace::new(&root);
        (dir, ws)
    }

    #[test]
    fn paths_are_taken_relative_to_the_root_as_written() {
        let (_dir, ws) = setup();
        let rel = |p: &str| ws.resolve(p).unwrap().rel;
        assert_eq!(rel("src/a.py"), PathBuf::from("src/a.py"));
        assert_eq!(rel("/src/a.py"), PathBuf::from("src/a.py"));
        assert_eq!(rel("./inner/./a.py"), PathBuf::from("inner/a.py"));
        assert_eq!(rel(""), PathBuf::new());
        assert_eq!(rel("/"), PathBuf::new());
        assert_eq!(rel("."), PathBuf::new());
        assert_eq!(rel("src/.."), PathBuf::from("src/.."));
        let absolute = ws.root().join("src/b").to_string_lossy().into_owned();
        assert_eq!(rel(&absolute), PathBuf::from("src/b"));
        assert!(ws.resolve("").unwrap().split().is_none());
        assert!(ws.resolve("src/..").unwrap().split().is_none());
    }

    #[test]
    fn dot_dot_and_links_out_are_escapes() {
        let (_dir, ws) = setup();
        for bad in [
            "..",
            "../x",
            "src/../../x",
            "out",
            "out/x",
            "new/../../x",
            "up/shadow",
        ] {
            assert!(
                matches!(ws.resolve(bad), Err(WorkspaceError::Escapes { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            ws.resolve("a\0b"),
            Err(WorkspaceError::Invalid { .. })
        ));
    }

    #[test]
    fn a_delete_names_the_link_not_its_target() {
        let (_dir, ws) = setup();
        let entry = ws.resolve_entry("inner").unwrap();
        assert_eq!(
            entry.split(),
            Some((Path::new(""), OsString::from("inner")))
        );
        assert!(matches!(
            ws.resolve_entry("out"),
            Err(WorkspaceError::Escapes { .. })
        ));
        assert!(ws.resolve_entry("/").unwrap().split().is_none());
    }
}
