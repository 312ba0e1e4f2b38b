//! E2B's paths as the workspace reads them. E2B programs name files by
//! absolute paths (`/home/user/x`); agent-reach serves envd with `--root`
//! at that directory, so an absolute path must be the root or beneath it
//! and is handed on relative to it, and a relative path is from the root
//! (E2B's home directory). The workspace then resolves it beneath the root
//! by the kernel, so `..` and links cannot lead out either.

use std::path::{Path, PathBuf};

/// An absolute path that is not beneath `--root`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path {path:?} is outside the sandbox root {}", root.display())]
pub(crate) struct OutsideRoot {
    pub(crate) path: String,
    pub(crate) root: PathBuf,
}

/// `path` relative to `root` (empty for the root itself), as the
/// workspace takes it.
pub(crate) fn in_root(root: &Path, path: &str) -> Result<String, OutsideRoot> {
    if !path.starts_with('/') {
        return Ok(path.to_owned());
    }
    match Path::new(path).strip_prefix(root) {
        Ok(rest) => Ok(rest.to_string_lossy().into_owned()),
        Err(_) => Err(OutsideRoot {
            path: path.to_owned(),
            root: root.to_path_buf(),
        }),
    }
}

/// The absolute path E2B shows for `rel` (relative to `root`).
pub(crate) fn shown(root: &Path, rel: &str) -> String {
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        root.to_string_lossy().into_owned()
    } else {
        root.join(rel).to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absolute_path_beneath_the_root_is_taken_relative_to_it() {
        let root = Path::new("/home/user");
        assert_eq!(in_root(root, "/home/user/a/b.txt").unwrap(), "a/b.txt");
        assert_eq!(in_root(root, "/home/user").unwrap(), "");
        assert_eq!(in_root(root, "notes.txt").unwrap(), "notes.txt");
    }

    #[test]
    fn an_absolute_path_elsewhere_is_refused_naming_the_root() {
        let err = in_root(Path::new("/home/user"), "/etc/passwd").unwrap_err();
        assert!(err.to_string().contains("/home/user"), "{err}");
        assert!(in_root(Path::new("/home/user"), "/home/username/x").is_err());
    }

    #[test]
    fn entries_are_shown_by_their_absolute_path() {
        assert_eq!(shown(Path::new("/r"), "a/b"), "/r/a/b");
        assert_eq!(shown(Path::new("/r"), ""), "/r");
    }
}
