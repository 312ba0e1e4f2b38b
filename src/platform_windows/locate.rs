//! Windows' confinement of a path beneath the project root (a registry
//! tool's `path` parameter): Linux resolves beneath the root in the kernel
//! (`openat2`, `crate::workspace`); here the deepest existing part is
//! resolved by `GetFinalPathNameByHandle` (what `canonicalize` calls, so
//! symbolic links and junctions are followed to where they lead), the
//! missing rest is appended name by name (`..` is taken lexically first, as
//! Windows takes it in every path), and the result must lie beneath
//! the canonical root.

use std::path::{Component, Path, PathBuf};

/// Why a path cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LocateError {
    #[error("an empty path")]
    Empty,
    #[error("path {path:?} is outside the project root {}", root.display())]
    Outside { path: String, root: PathBuf },
    #[error("path {path:?} cannot be resolved: {reason}")]
    Unresolvable { path: String, reason: String },
}

/// Locates `value` (relative to `base`, or absolute) beneath `root`; `root`
/// and `base` are canonical (`\\?\C:\...`), `base` inside `root`. Returns
/// the path as programs take it (`C:\...`), links resolved.
pub(crate) fn locate(root: &Path, base: &Path, value: &Path) -> Result<PathBuf, LocateError> {
    if value.as_os_str().is_empty() {
        return Err(LocateError::Empty);
    }
    let shown = value.to_string_lossy().into_owned();
    let unresolvable = |reason: &str| LocateError::Unresolvable {
        path: shown.clone(),
        reason: reason.to_owned(),
    };
    // Joined in the plain form (`C:\...`), where Windows itself takes `..`
    // lexically, as every program does with the path; an absolute value
    // replaces `base`, `\dir` keeps base's drive.
    let joined = super::run::strip_verbatim(base.to_path_buf()).join(value);
    let mut existing = joined.as_path();
    let mut missing = Vec::new();
    let resolved = loop {
        match existing.canonicalize() {
            Ok(found) => break found,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let Some(name) = existing.components().next_back() else {
                    return Err(unresolvable("no part of it exists"));
                };
                match name {
                    Component::Normal(name) => missing.push(name.to_owned()),
                    _ => {
                        return Err(unresolvable(
                            "a missing directory is followed by `..` or `.`",
                        ));
                    }
                }
                existing = existing
                    .parent()
                    .ok_or_else(|| unresolvable("no part of it exists"))?;
            }
            Err(err) => return Err(unresolvable(&err.to_string())),
        }
    };
    let mut located = resolved;
    located.extend(missing.iter().rev());
    if located.starts_with(root) {
        Ok(super::run::strip_verbatim(located))
    } else {
        Err(LocateError::Outside {
            path: shown,
            root: super::run::strip_verbatim(root.to_path_buf()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src/deep")).unwrap();
        std::fs::write(dir.path().join("src/a.txt"), "a").unwrap();
        let root = dir.path().canonicalize().unwrap();
        (dir, root)
    }

    #[test]
    fn relative_absolute_and_missing_paths_inside_the_root() {
        let (_dir, root) = project();
        let plain = super::super::run::strip_verbatim(root.clone());
        let src = root.join("src");
        assert_eq!(
            locate(&root, &root, Path::new("src\\a.txt")).unwrap(),
            plain.join("src").join("a.txt")
        );
        assert_eq!(
            locate(&root, &src, Path::new("deep\\..\\a.txt")).unwrap(),
            plain.join("src").join("a.txt")
        );
        assert_eq!(
            locate(&root, &root, Path::new("src\\new\\file.rs")).unwrap(),
            plain.join("src").join("new").join("file.rs")
        );
        assert_eq!(
            locate(&root, &root, &plain.join("src")).unwrap(),
            plain.join("src")
        );
    }

    #[test]
    fn escapes_are_refused() {
        let (_dir, root) = project();
        let outside = locate(&root, &root, Path::new("..")).unwrap_err();
        assert!(matches!(outside, LocateError::Outside { .. }), "{outside}");
        let drive_root = locate(&root, &root, Path::new("\\")).unwrap_err();
        assert!(matches!(drive_root, LocateError::Outside { .. }));
        // `..` is taken lexically, as Windows takes it for every program.
        let dotted = locate(&root, &root, Path::new("missing\\..\\..\\x")).unwrap_err();
        assert!(matches!(dotted, LocateError::Outside { .. }), "{dotted}");
        let plain = super::super::run::strip_verbatim(root.clone());
        assert_eq!(
            locate(&root, &root, Path::new("missing\\..\\x")).unwrap(),
            plain.join("x")
        );
        assert!(matches!(
            locate(&root, &root, Path::new("")),
            Err(LocateError::Empty)
        ));
    }
}
