//! Where a patch path really points, and whether it may be written.
//!
//! A relative path resolves against the working directory; `.` and `..`
//! are folded lexically; the longest existing prefix is then resolved
//! through symbolic links. The result must stay inside the (resolved)
//! working directory unless the caller allows paths outside it. The reason
//! for a refusal names what leaves: the `..`, the absolute path, or the
//! symbolic link.

use std::path::{Component, Path, PathBuf};

/// A patch path resolved for reading and writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ResolvedPath {
    /// Where the file's contents live: symbolic links followed, the last
    /// component included. Updates read and write here.
    pub(crate) target: PathBuf,
    /// The directory entry itself: links followed in the parent only.
    /// Deletes and the source of a move act here.
    pub(crate) entry: PathBuf,
}

/// Why a path may not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The path is empty or names the working directory itself.
    NotAFilePath,
    /// Lexically outside through `..`.
    DotDotEscape,
    /// An absolute path outside the working directory.
    AbsoluteOutside,
    /// A symbolic link inside the working directory points outside it.
    SymlinkEscape {
        /// The link that leaves.
        link: PathBuf,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotAFilePath => f.write_str("does not name a file"),
            Refusal::DotDotEscape => f.write_str("leaves the working directory through '..'"),
            Refusal::AbsoluteOutside => {
                f.write_str("is an absolute path outside the working directory")
            }
            Refusal::SymlinkEscape { link } => write!(
                f,
                "goes through the symbolic link {}, which points outside the working directory",
                link.display()
            ),
        }
    }
}

/// The working directory, as given and with links resolved.
#[derive(Debug, Clone)]
pub(super) struct Workdir {
    given: PathBuf,
    real: PathBuf,
}

impl Workdir {
    /// Resolves the working directory; it must exist.
    pub(super) fn new(dir: &Path) -> std::io::Result<Self> {
        let real = std::fs::canonicalize(dir)?;
        let given = if dir.is_absolute() {
            lexical_normalize(dir)
        } else {
            real.clone()
        };
        Ok(Self { given, real })
    }

    /// The working directory with links resolved.
    #[cfg(test)]
    pub(crate) fn real(&self) -> &Path {
        &self.real
    }

    /// Resolves a patch path; `allow_outside` lifts the confinement.
    pub(super) fn resolve(&self, raw: &Path, allow_outside: bool) -> Result<ResolvedPath, Refusal> {
        let lexical = lexical_normalize(&self.given.join(raw));
        let inside_lexically = lexical.starts_with(&self.given) || lexical.starts_with(&self.real);
        if !allow_outside && !inside_lexically {
            return Err(if raw.is_absolute() {
                Refusal::AbsoluteOutside
            } else {
                Refusal::DotDotEscape
            });
        }
        let (Some(parent), Some(name)) = (lexical.parent(), lexical.file_name()) else {
            return Err(Refusal::NotAFilePath);
        };
        if lexical == self.given || lexical == self.real {
            return Err(Refusal::NotAFilePath);
        }
        let entry = resolve_existing_prefix(parent).join(name);
        let target = if is_symlink(&entry) {
            resolve_existing_prefix(&entry)
        } else {
            entry.clone()
        };
        if !allow_outside {
            for resolved in [&entry, &target] {
                if !resolved.starts_with(&self.real) || resolved == &self.real {
                    return Err(Refusal::SymlinkEscape {
                        link: self.first_escaping_link(&lexical),
                    });
                }
            }
        }
        Ok(ResolvedPath { target, entry })
    }

    /// The first component of `lexical` that is a link leading outside,
    /// shown relative to the working directory.
    fn first_escaping_link(&self, lexical: &Path) -> PathBuf {
        let base = if lexical.starts_with(&self.given) {
            &self.given
        } else {
            &self.real
        };
        let mut current = base.clone();
        if let Ok(rest) = lexical.strip_prefix(base) {
            for component in rest.components() {
                current.push(component);
                if is_symlink(&current)
                    && !resolve_existing_prefix(&current).starts_with(&self.real)
                {
                    return current
                        .strip_prefix(base)
                        .map_or(current.clone(), Path::to_path_buf);
                }
            }
        }
        lexical.to_path_buf()
    }
}

fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Folds `.` and `..` without touching the file system.
pub(super) fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(component),
            },
            other => out.push(other),
        }
    }
    out
}

/// Resolves links in the longest prefix of `path` that exists; the rest
/// (not created yet) is appended as it is. A dangling link resolves to
/// where it points.
fn resolve_existing_prefix(path: &Path) -> PathBuf {
    /// Links followed before giving up, as the kernel does (ELOOP).
    const MAX_LINK_HOPS: usize = 40;
    let mut missing = Vec::new();
    let mut current = path.to_path_buf();
    let mut hops = 0;
    loop {
        if let Ok(real) = std::fs::canonicalize(&current) {
            let mut out = real;
            for name in missing.iter().rev() {
                out.push(name);
            }
            return lexical_normalize(&out);
        }
        if let Ok(link) = std::fs::read_link(&current) {
            let parent = current.parent().map(Path::to_path_buf).unwrap_or_default();
            let pointed = lexical_normalize(&parent.join(link));
            if hops < MAX_LINK_HOPS {
                hops += 1;
                current = pointed;
                continue;
            }
        }
        match (current.file_name().map(ToOwned::to_owned), current.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                current = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

#[cfg(test)]
mod tests {
    // Links are made the Unix way (Windows needs a privilege for them).
    #[cfg(unix)]
    use std::os::unix::fs::symlink;

    use super::*;

    fn setup() -> (tempfile::TempDir, Workdir) {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let work = root.path().join("work");
        std::fs::create_dir_all(work.join("sub")).unwrap_or_else(|e| panic!("mkdir: {e}"));
        std::fs::create_dir_all(root.path().join("outside"))
            .unwrap_or_else(|e| panic!("mkdir: {e}"));
        let workdir = Workdir::new(&work).unwrap_or_else(|e| panic!("workdir: {e}"));
        (root, workdir)
    }

    #[test]
    fn lexical_normalize_folds_dots() {
        assert_eq!(
            lexical_normalize(Path::new("/a/./b/../c")),
            Path::new("/a/c")
        );
        assert_eq!(lexical_normalize(Path::new("/..")), Path::new("/"));
    }

    #[test]
    fn relative_and_absolute_inside_are_fine() {
        let (_root, wd) = setup();
        let rel = wd.resolve(Path::new("sub/../new.txt"), false);
        assert_eq!(rel.map(|r| r.target), Ok(wd.real().join("new.txt")));
        let abs = wd.real().join("sub/x");
        assert_eq!(wd.resolve(&abs, false).map(|r| r.entry), Ok(abs.clone()));
    }

    #[test]
    fn escapes_are_refused_with_their_reason() {
        let (root, wd) = setup();
        assert_eq!(
            wd.resolve(Path::new("../outside/x"), false),
            Err(Refusal::DotDotEscape)
        );
        let abs = root.path().join("outside/x");
        assert_eq!(wd.resolve(&abs, false), Err(Refusal::AbsoluteOutside));
        assert!(wd.resolve(&abs, true).is_ok());
        assert_eq!(
            wd.resolve(Path::new("."), false),
            Err(Refusal::NotAFilePath)
        );
    }

    #[cfg(unix)]
    #[test]
    fn link_loops_end() {
        let (_root, wd) = setup();
        symlink("loop-b", wd.real().join("loop-a")).unwrap_or_else(|e| panic!("{e}"));
        symlink("loop-a", wd.real().join("loop-b")).unwrap_or_else(|e| panic!("{e}"));
        assert!(wd.resolve(Path::new("loop-a/x"), false).is_ok());
        assert!(wd.resolve(Path::new("loop-a"), false).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn links_that_leave_are_refused_links_that_stay_are_followed() {
        let (root, wd) = setup();
        let outside = root.path().join("outside");
        symlink(&outside, wd.real().join("out")).unwrap_or_else(|e| panic!("{e}"));
        symlink(outside.join("file"), wd.real().join("file-out")).unwrap_or_else(|e| panic!("{e}"));
        symlink("sub", wd.real().join("in")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            wd.resolve(Path::new("out/new.txt"), false),
            Err(Refusal::SymlinkEscape { link: "out".into() })
        );
        assert_eq!(
            wd.resolve(Path::new("file-out"), false),
            Err(Refusal::SymlinkEscape {
                link: "file-out".into()
            })
        );
        assert_eq!(
            wd.resolve(Path::new("in/x"), false).map(|r| r.target),
            Ok(wd.real().join("sub/x"))
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_missing_directory_and_dot_dot_before_a_link_out_do_not_hide_it() {
        let (root, wd) = setup();
        let outside = root.path().join("outside");
        symlink(&outside, wd.real().join("out")).unwrap_or_else(|e| panic!("{e}"));
        symlink(outside.join("shadow"), wd.real().join("sub/shadow"))
            .unwrap_or_else(|e| panic!("{e}"));
        for path in ["missing/../out/x", "sub/../out/x", "missing/../sub/shadow"] {
            assert!(
                matches!(
                    wd.resolve(Path::new(path), false),
                    Err(Refusal::SymlinkEscape { .. })
                ),
                "{path}"
            );
        }
    }
}
