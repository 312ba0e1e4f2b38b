//! A caller's path that must be handed on as text (a tool's `path`
//! argument, a working directory the planner records, the SWE-ReX file
//! routes), located beneath the root by the kernel.
//!
//! The longest existing part is opened with [`super::beneath`] and named by
//! the kernel (`/proc/self/fd`), so `..` and links are followed the kernel's
//! way and nothing leading out gets through; the missing rest is appended as
//! written and must be plain names (`missing/..` is not guessed at). What is
//! handed on is a path, so whoever opens it later resolves it again: where
//! that matters (the working directory of a command) the opener resolves it
//! beneath the root once more and keeps the handle.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;

use super::beneath;

/// A path that leads out of the root or cannot be located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfineError {
    #[error("path {path:?} leads outside the project root {root}")]
    Outside { path: String, root: PathBuf },
    #[error("path {path:?} cannot be resolved: {reason}")]
    Unresolvable { path: String, reason: String },
    #[error("path is empty")]
    Empty,
    /// The machine, not the path: no file descriptor or memory left.
    #[error("path {path:?} cannot be resolved now: {reason}")]
    Exhausted { path: String, reason: String },
}

impl ConfineError {
    /// Whether the machine's limits, not the caller's path, failed it.
    pub(crate) fn is_exhausted(&self) -> bool {
        matches!(self, ConfineError::Exhausted { .. })
    }
}

/// Whether `errno` is a limit of the process or the machine.
fn exhausted(errno: Errno) -> bool {
    matches!(
        errno,
        Errno::EMFILE | Errno::ENFILE | Errno::ENOMEM | Errno::ENOSPC
    )
}

/// Locates `value` (relative to `base`, or absolute) beneath `root`; `root`
/// and `base` are canonical, `base` inside `root`. Returns the absolute
/// path, links resolved.
pub(crate) fn locate(root: &Path, base: &Path, value: &Path) -> Result<PathBuf, ConfineError> {
    if value.as_os_str().is_empty() {
        return Err(ConfineError::Empty);
    }
    let shown = value.to_string_lossy().into_owned();
    let outside = || ConfineError::Outside {
        path: shown.clone(),
        root: root.to_path_buf(),
    };
    let unresolvable = |reason: String| ConfineError::Unresolvable {
        path: shown.clone(),
        reason,
    };
    let rel = relative_to_root(root, base, value).ok_or_else(outside)?;
    let root_fd = open_root(root).map_err(|e| {
        if exhausted(e) {
            ConfineError::Exhausted {
                path: shown.clone(),
                reason: e.desc().to_owned(),
            }
        } else {
            unresolvable(e.to_string())
        }
    })?;
    let (found, rest): (OwnedFd, Vec<&std::ffi::OsStr>) =
        match beneath::open_beneath(root_fd.as_fd(), &rel, OFlag::O_PATH) {
            Ok(fd) => (fd, Vec::new()),
            Err(Errno::ENOENT) => {
                let (fd, depth) = beneath::deepest_existing(root_fd.as_fd(), &rel, OFlag::O_PATH)
                    .map_err(|e| errno_error(e, &outside, &unresolvable))?;
                let rest = beneath::missing_names(&rel, depth).map_err(|_| {
                    unresolvable("a missing directory is followed by `..` or `.`".to_owned())
                })?;
                (fd, rest)
            }
            Err(e) => return Err(errno_error(e, &outside, &unresolvable)),
        };
    let mut located = beneath::path_of(found.as_fd()).map_err(|e| unresolvable(e.to_string()))?;
    located.extend(rest);
    // The kernel kept it beneath the root; a root reached under another
    // name (a bind mount) is refused rather than guessed at.
    if located.starts_with(root) {
        Ok(located)
    } else {
        Err(outside())
    }
}

fn errno_error(
    errno: Errno,
    outside: &dyn Fn() -> ConfineError,
    unresolvable: &dyn Fn(String) -> ConfineError,
) -> ConfineError {
    match errno {
        Errno::EXDEV | Errno::ELOOP => outside(),
        other if exhausted(other) => match unresolvable(String::new()) {
            ConfineError::Unresolvable { path, .. } => ConfineError::Exhausted {
                path,
                reason: other.desc().to_owned(),
            },
            same => same,
        },
        other => unresolvable(other.desc().to_owned()),
    }
}

/// `value` as a path relative to `root`: joined to `base` when relative;
/// when absolute, under `root` as written or once its parent is resolved.
fn relative_to_root(root: &Path, base: &Path, value: &Path) -> Option<PathBuf> {
    if !value.is_absolute() {
        return Some(base.strip_prefix(root).ok()?.join(value));
    }
    if let Ok(rel) = value.strip_prefix(root) {
        return Some(rel.to_path_buf());
    }
    // `/link-to-root/x`: the parent named without links.
    let mut parent = value.to_path_buf();
    let mut tail = Vec::new();
    loop {
        match parent.canonicalize() {
            Ok(real) => {
                let mut rel = real.strip_prefix(root).ok()?.to_path_buf();
                rel.extend(tail.iter().rev());
                return Some(rel);
            }
            Err(_) => {
                let Some(Component::Normal(name)) = parent.components().next_back() else {
                    return None;
                };
                tail.push(name.to_os_string());
                parent.pop();
            }
        }
    }
}

fn open_root(root: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(
        root,
        beneath::dir_flags() | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn running_out_of_descriptors_is_the_machines_limit_not_a_bad_path() {
        let outside = || ConfineError::Outside {
            path: "w".into(),
            root: PathBuf::from("/r"),
        };
        let unresolvable = |reason: String| ConfineError::Unresolvable {
            path: "w".into(),
            reason,
        };
        for errno in [Errno::EMFILE, Errno::ENFILE, Errno::ENOMEM] {
            assert!(errno_error(errno, &outside, &unresolvable).is_exhausted());
        }
        assert!(!errno_error(Errno::EACCES, &outside, &unresolvable).is_exhausted());
        assert_eq!(
            errno_error(Errno::ELOOP, &outside, &unresolvable),
            outside()
        );
    }

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("src/sub")).unwrap();
        std::fs::create_dir_all(root.join("up")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        symlink(dir.path().join("outside"), root.join("escape")).unwrap();
        symlink(dir.path().join("outside"), root.join("lnk_out")).unwrap();
        symlink("/etc/shadow", root.join("up/shadow")).unwrap();
        symlink("src", root.join("inner")).unwrap();
        // RESOLVE_BENEATH refuses every absolute link, even one naming a
        // place inside.
        symlink(root.join("src"), root.join("absolute_inner")).unwrap();
        symlink(&root, dir.path().join("root_link")).unwrap();
        let root = root.canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn inside_paths_are_located_with_their_links_resolved() {
        let (dir, root) = setup();
        let at = |base: &Path, value: &str| locate(&root, base, Path::new(value)).unwrap();
        assert_eq!(at(&root, "src"), root.join("src"));
        assert_eq!(at(&root, "src/../src/sub"), root.join("src/sub"));
        assert_eq!(at(&root, "inner/sub"), root.join("src/sub"));
        assert_eq!(at(&root, "new/file.txt"), root.join("new/file.txt"));
        assert_eq!(at(&root, "."), root);
        assert_eq!(at(&root.join("src"), ".."), root);
        let through_link = dir.path().join("root_link/src/new");
        assert_eq!(
            at(&root, &through_link.to_string_lossy()),
            root.join("src/new")
        );
    }

    #[test]
    fn escapes_are_refused_whatever_comes_before_them() {
        let (_dir, root) = setup();
        for bad in [
            "..",
            "../outside",
            "/etc/passwd",
            "escape",
            "escape/x",
            "src/../../x",
            "inner/../../x",
            "up/shadow",
            "lnk_out/new",
            "absolute_inner",
        ] {
            let got = locate(&root, &root, Path::new(bad));
            assert!(
                matches!(got, Err(ConfineError::Outside { .. })),
                "{bad}: {got:?}"
            );
        }
        for never_guessed in ["nope/../up/shadow", "nope/../lnk_out", "new/../../x"] {
            let got = locate(&root, &root, Path::new(never_guessed));
            assert!(
                matches!(got, Err(ConfineError::Unresolvable { .. })),
                "{never_guessed}: {got:?}"
            );
        }
        assert_eq!(
            locate(&root, &root, Path::new("")),
            Err(ConfineError::Empty)
        );
    }
}
