//! A bounded directory walk, the one every door's walking route uses
//! (envd `ListDir` with a depth, Daytona `files/find` and `files/search`):
//! it lists each directory with [`Workspace::list`] (so beneath the root,
//! and never into what the fence seals), descends only into real
//! directories (a link to a directory is listed, never followed, so a link
//! loop costs one entry), and stops after `max_entries` entries, saying so.

use super::fs::{Entry, EntryKind};
use super::{Workspace, WorkspaceError};

/// One entry met by a walk: its path relative to the root as the caller
/// wrote the top, and what [`Workspace::list`] said of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Walked {
    pub(crate) rel: String,
    pub(crate) entry: Entry,
}

/// What a walk found, in order: each directory's entries sorted by name,
/// a directory's contents after the directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Walk {
    pub(crate) entries: Vec<Walked>,
    /// The walk stopped at its cap; more entries lie beneath.
    pub(crate) truncated: bool,
}

/// `dir` and `name` joined as a caller's relative path.
pub(crate) fn join(dir: &str, name: &str) -> String {
    let dir = dir.trim_end_matches('/');
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

impl Workspace {
    /// The entries beneath the directory `rel`, `depth` levels deep (1: its
    /// own entries), at most `max_entries` of them. The directory itself
    /// must list (a file named is the caller's [`WorkspaceError`]); a
    /// directory below that cannot be listed any more is skipped.
    pub(crate) fn walk(
        &self,
        rel: &str,
        depth: u32,
        max_entries: usize,
    ) -> Result<Walk, WorkspaceError> {
        let mut walk = Walk::default();
        let first = self.list(&self.resolve(rel)?)?;
        // Depth-first in listing order, the stack holding what is left of
        // each open directory.
        let mut stack: Vec<(String, u32, std::vec::IntoIter<Entry>)> =
            vec![(rel.to_owned(), depth, first.into_iter())];
        while let Some((dir, left, entries)) = stack.last_mut() {
            let Some(entry) = entries.next() else {
                stack.pop();
                continue;
            };
            if walk.entries.len() >= max_entries {
                walk.truncated = true;
                break;
            }
            let child = join(dir, &entry.name);
            let descend = entry.kind == EntryKind::Directory && !entry.link && *left > 1;
            let below = *left - 1;
            walk.entries.push(Walked {
                rel: child.clone(),
                entry,
            });
            if descend && let Ok(entries) = self.resolve(&child).and_then(|t| self.list(&t)) {
                stack.push((child, below, entries.into_iter()));
            }
        }
        Ok(walk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(walk: &Walk) -> Vec<&str> {
        walk.entries.iter().map(|w| w.rel.as_str()).collect()
    }

    #[test]
    fn a_walk_goes_depth_first_to_its_depth() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b/c")).unwrap();
        std::fs::write(dir.path().join("a/f"), "x").unwrap();
        let ws = Workspace::new(dir.path());
        let all = ws.walk("", 10, 100).unwrap();
        assert_eq!(names(&all), ["a", "a/b", "a/b/c", "a/f"]);
        assert!(!all.truncated);
        assert_eq!(names(&ws.walk("", 2, 100).unwrap()), ["a", "a/b", "a/f"]);
        assert_eq!(names(&ws.walk("a", 1, 100).unwrap()), ["a/b", "a/f"]);
    }

    #[test]
    fn a_link_loop_is_listed_once_and_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        for n in 0..10 {
            std::os::unix::fs::symlink("..", dir.path().join(format!("d/l{n}"))).unwrap();
        }
        let ws = Workspace::new(dir.path());
        let walk = ws.walk("", 10, 100_000).unwrap();
        assert_eq!(walk.entries.len(), 11, "{:?}", names(&walk));
        assert!(walk.entries.iter().filter(|w| w.entry.link).count() == 10);
    }

    #[test]
    fn a_walk_stops_at_its_cap_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        for n in 0..20 {
            std::fs::write(dir.path().join(format!("f{n:02}")), "").unwrap();
        }
        let ws = Workspace::new(dir.path());
        let walk = ws.walk("", 1, 5).unwrap();
        assert_eq!(walk.entries.len(), 5);
        assert!(walk.truncated);
        let exact = ws.walk("", 1, 20).unwrap();
        assert!(!exact.truncated);
    }
}
