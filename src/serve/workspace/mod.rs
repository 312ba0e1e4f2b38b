//! The workspace the file endpoints of the network listeners serve
//! (`sandboxd-rest`'s `/v1/files`, `python-runtime`'s `/upload`,
//! `/download`, `/list`, `/exists`): `--root`, and nothing outside it.
//!
//! A client's path is first resolved the way the kernel will resolve it,
//! with [`crate::registry::root_path`] (the one confinement of the crate):
//! `..` and symbolic links are followed and the result must stay under the
//! root, else [`WorkspaceError::Escapes`] (HTTP 403). As in the reference
//! sandboxd, a leading `/` (or the root itself) means the workspace, so
//! `/main.py` and `main.py` name one file.
//!
//! The resolved path has no links left in it; every operation then walks it
//! from the root one `openat(O_NOFOLLOW)` at a time ([`fs`]). A directory
//! swapped for a link between the check and the use (a command running in
//! the workspace can do that) makes the walk fail with `ELOOP`, which is
//! refused as an escape, instead of being followed out of the workspace.

pub(crate) mod fs;
pub(crate) mod upload;

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::registry::root_path::{ConfineError, confine_to_root};

pub(crate) use fs::{Entry, EntryKind};

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
    pub(crate) fn from_errno(path: &str, errno: nix::errno::Errno) -> Self {
        use nix::errno::Errno;
        let path = path.to_owned();
        match errno {
            Errno::ENOENT | Errno::ENOTDIR => WorkspaceError::NotFound { path },
            // A link met on the no-follow walk: the tree changed under us.
            Errno::ELOOP | Errno::EXDEV => WorkspaceError::Escapes { path },
            Errno::EACCES | Errno::EPERM | Errno::EROFS => WorkspaceError::Denied { path },
            Errno::ENOTEMPTY | Errno::EEXIST => WorkspaceError::NotEmpty { path },
            Errno::EISDIR => WorkspaceError::IsDirectory { path },
            other => WorkspaceError::Io {
                path,
                source: std::io::Error::from(other),
            },
        }
    }
}

/// A client path resolved inside the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The path as the client gave it (for messages and listings).
    pub(crate) shown: String,
    /// Relative to the root, links resolved; empty for the root itself.
    pub(crate) rel: PathBuf,
}

impl Target {
    /// The directory holding it and its name; `None` for the root.
    pub(crate) fn split(&self) -> Option<(&Path, OsString)> {
        let name = self.rel.file_name()?.to_os_string();
        Some((self.rel.parent().unwrap_or(Path::new("")), name))
    }
}

/// The workspace: the canonical `--root`. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Workspace {
    root: Arc<PathBuf>,
}

impl Workspace {
    /// The workspace at `root` (resolved now; as given if it cannot be).
    pub(crate) fn new(root: &Path) -> Self {
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        Self {
            root: Arc::new(root),
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

    /// Resolves what `path` names: `..` and links followed, confined to the
    /// root. For a write, the parts that do not exist yet are kept as given.
    pub(crate) fn resolve(&self, path: &str) -> Result<Target, WorkspaceError> {
        let shown = path.to_owned();
        let rel = self.relative(path)?;
        let resolved = confine_to_root(&self.root, &self.root, rel).map_err(|e| match e {
            ConfineError::Outside { .. } => WorkspaceError::Escapes {
                path: shown.clone(),
            },
            ConfineError::Unresolvable { reason, .. } => WorkspaceError::Invalid {
                path: shown.clone(),
                why: reason,
            },
            ConfineError::Empty => WorkspaceError::Invalid {
                path: shown.clone(),
                why: "empty path".to_owned(),
            },
        })?;
        let rel = resolved
            .strip_prefix(self.root.as_path())
            .map_err(|_| WorkspaceError::Escapes {
                path: shown.clone(),
            })?
            .to_path_buf();
        Ok(Target { shown, rel })
    }

    /// What a delete acts on: the entry itself (a link is removed, not what
    /// it points to), after checking that what it names stays inside.
    pub(crate) fn resolve_entry(&self, path: &str) -> Result<Target, WorkspaceError> {
        let full = self.resolve(path)?;
        let rel = self.relative(path)?;
        let Some(Component::Normal(name)) = rel.components().next_back() else {
            return Ok(full);
        };
        let parent = rel.parent().map_or(Path::new("."), |p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        });
        let parent = self.resolve(&parent.to_string_lossy())?;
        Ok(Target {
            shown: full.shown,
            rel: parent.rel.join(name),
        })
    }

    /// `path` relative to the root: the root's own prefix or leading `/`
    /// dropped, `.` for the root; NUL bytes refused.
    fn relative<'a>(&self, path: &'a str) -> Result<&'a Path, WorkspaceError> {
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
        Ok(if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
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
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), root.join("out")).unwrap();
        std::os::unix::fs::symlink("src", root.join("inner")).unwrap();
        let ws = Workspace::new(&root);
        (dir, ws)
    }

    #[test]
    fn paths_inside_resolve_relative_to_the_root() {
        let (_dir, ws) = setup();
        let rel = |p: &str| ws.resolve(p).unwrap().rel;
        assert_eq!(rel("src/a.py"), PathBuf::from("src/a.py"));
        assert_eq!(rel("/src/a.py"), PathBuf::from("src/a.py"));
        assert_eq!(rel("inner/a.py"), PathBuf::from("src/a.py"));
        assert_eq!(rel(""), PathBuf::new());
        assert_eq!(rel("/"), PathBuf::new());
        assert_eq!(rel("."), PathBuf::new());
        assert_eq!(rel("src/.."), PathBuf::new());
        let absolute = ws.root().join("src/b").to_string_lossy().into_owned();
        assert_eq!(rel(&absolute), PathBuf::from("src/b"));
        assert!(ws.resolve("").unwrap().split().is_none());
    }

    #[test]
    fn dot_dot_and_links_out_are_escapes() {
        let (_dir, ws) = setup();
        for bad in ["..", "../x", "src/../../x", "out", "out/x", "new/../../x"] {
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
        assert_eq!(
            ws.resolve_entry("inner").unwrap().rel,
            PathBuf::from("inner")
        );
        assert_eq!(
            ws.resolve_entry("inner/x/").unwrap().rel,
            PathBuf::from("src/x")
        );
        assert!(matches!(
            ws.resolve_entry("out"),
            Err(WorkspaceError::Escapes { .. })
        ));
        assert!(ws.resolve_entry("/").unwrap().split().is_none());
    }
}
