//! Keeping paths inside the project root.
//!
//! A path is resolved the way the kernel will resolve it: component by
//! component, following symlinks of the parts that exist, applying `..` to
//! the resolved parent. Only then is it compared with the (canonical) root,
//! so neither `../..` nor a symlink pointing outside gets through. Parts that
//! do not exist yet are appended as written (they cannot be symlinks).

use std::path::{Component, Path, PathBuf};

/// A path that escapes the root or cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfineError {
    #[error("path {path:?} resolves to {resolved}, outside the project root {root}")]
    Outside {
        path: String,
        resolved: PathBuf,
        root: PathBuf,
    },
    #[error("path {path:?} cannot be resolved: {reason}")]
    Unresolvable { path: String, reason: String },
    #[error("path is empty")]
    Empty,
}

/// Resolves `value` (relative to `base`) and checks it lies inside `root`.
/// `root` and `base` must be canonical. Returns the resolved absolute path.
pub(crate) fn confine_to_root(
    root: &Path,
    base: &Path,
    value: &Path,
) -> Result<PathBuf, ConfineError> {
    if value.as_os_str().is_empty() {
        return Err(ConfineError::Empty);
    }
    let shown = value.to_string_lossy().into_owned();
    let mut current = if value.is_absolute() {
        PathBuf::from("/")
    } else {
        base.to_path_buf()
    };
    let mut exists = true;
    for component in value.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => current = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                current.pop();
            }
            Component::Normal(name) => {
                current.push(name);
                if exists {
                    match current.symlink_metadata() {
                        Ok(_) => {
                            current = current.canonicalize().map_err(|err| {
                                ConfineError::Unresolvable {
                                    path: shown.clone(),
                                    reason: err.to_string(),
                                }
                            })?;
                        }
                        Err(_) => exists = false,
                    }
                }
            }
        }
    }
    if current.starts_with(root) {
        Ok(current)
    } else {
        Err(ConfineError::Outside {
            path: shown,
            resolved: current,
            root: root.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("src/sub")).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), root.join("escape")).unwrap();
        std::os::unix::fs::symlink(root.join("src"), root.join("inner")).unwrap();
        let root = root.canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn inside_paths_resolve() {
        let (_dir, root) = setup();
        assert_eq!(
            confine_to_root(&root, &root, Path::new("src")).unwrap(),
            root.join("src")
        );
        assert_eq!(
            confine_to_root(&root, &root, Path::new("src/../src/sub")).unwrap(),
            root.join("src/sub")
        );
        assert_eq!(
            confine_to_root(&root, &root, Path::new("inner/sub")).unwrap(),
            root.join("src/sub")
        );
        assert_eq!(
            confine_to_root(&root, &root, Path::new("new/file.txt")).unwrap(),
            root.join("new/file.txt")
        );
        assert_eq!(confine_to_root(&root, &root, Path::new(".")).unwrap(), root);
        assert_eq!(
            confine_to_root(&root, &root.join("src"), Path::new("..")).unwrap(),
            root
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (_dir, root) = setup();
        for bad in [
            "..",
            "../outside",
            "/etc/passwd",
            "escape",
            "escape/x",
            "src/../../x",
            "new/../../x",
            "inner/../../x",
        ] {
            assert!(
                matches!(
                    confine_to_root(&root, &root, Path::new(bad)),
                    Err(ConfineError::Outside { .. })
                ),
                "{bad}"
            );
        }
        assert_eq!(
            confine_to_root(&root, &root, Path::new("")),
            Err(ConfineError::Empty)
        );
    }
}
