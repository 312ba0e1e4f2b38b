//! A file operation the plan stage allowed: the permit and where it may
//! act. A door gets one only from [`super::Broker::files`], so every path
//! it opens is under the policy first and beneath the root (or one of the
//! policy's writable roots) after.
//!
//! What a file route reaches is what a sandboxed command could write: the
//! root and `[sandbox] writable_roots`. A caller naming a real absolute path
//! (E2B, SWE-ReX, Daytona, Codex) is [`Files::place`]d in one of them; a
//! door whose paths are relative to the root (sandboxd, python-runtime)
//! uses [`Files::workspace`], the root.

use std::path::{Path, PathBuf};

use crate::plan::FilePermit;
use crate::workspace::Workspace;

/// The file surface a door works with: the workspace a permit hands out
/// and what its operations take and give (entries, errors, streamed
/// bodies, watches). A door names these through the broker, never
/// `crate::workspace` itself.
pub(crate) mod surface {
    pub(crate) use crate::workspace::walk::join;
    pub(crate) use crate::workspace::{
        Entry, EntryKind, Target, Workspace, WorkspaceError, fs, manage, upload, watch,
    };
}

/// The workspace, for one operation the policy allowed.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    permit: FilePermit,
    workspace: Workspace,
    /// The policy's writable roots, each a workspace of its own.
    writable: Vec<Workspace>,
}

/// An absolute path placed in reach: the workspace it lies in and the path
/// relative to that workspace's root (empty for the root itself).
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) workspace: Workspace,
    pub(crate) rel: String,
}

/// An absolute path beneath neither the root nor a writable root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("path {path:?} is outside the sandbox root {} (serve --root){}", root.display(), also(writable))]
pub(crate) struct OutsideReach {
    pub(crate) path: String,
    pub(crate) root: PathBuf,
    pub(crate) writable: Vec<PathBuf>,
}

fn also(writable: &[PathBuf]) -> String {
    if writable.is_empty() {
        return String::new();
    }
    let names: Vec<String> = writable.iter().map(|w| w.display().to_string()).collect();
    format!(" and the policy's writable roots ({})", names.join(", "))
}

impl Files {
    pub(super) fn new(permit: FilePermit, workspace: Workspace, writable: Vec<Workspace>) -> Self {
        Self {
            permit,
            workspace,
            writable,
        }
    }

    /// The planner's word: which operation this is.
    pub(crate) fn permit(&self) -> FilePermit {
        self.permit
    }

    /// The root's workspace: every path resolved beneath the root.
    pub(crate) fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// Where the caller's `path` lies: a relative path is from the root; an
    /// absolute one must be the root or beneath it, else beneath one of the
    /// policy's writable roots (the deepest that holds it). The workspace
    /// then resolves the rest by the kernel, so `..` and links cannot lead
    /// out of the one it was placed in.
    pub(crate) fn place(&self, path: &str) -> Result<Placed, OutsideReach> {
        if !path.starts_with('/') {
            return Ok(Placed {
                workspace: self.workspace.clone(),
                rel: path.to_owned(),
            });
        }
        let given = Path::new(path);
        let inside = |ws: &Workspace| {
            given
                .strip_prefix(ws.root())
                .ok()
                .map(|rest| (ws.root().components().count(), rest.to_path_buf()))
        };
        // The root first: a path in it is the root's even when a writable
        // root lies inside the root too (links between them keep working).
        let found = inside(&self.workspace)
            .map(|(_, rest)| (&self.workspace, rest))
            .or_else(|| {
                self.writable
                    .iter()
                    .filter_map(|ws| inside(ws).map(|(depth, rest)| (depth, ws, rest)))
                    .max_by_key(|(depth, _, _)| *depth)
                    .map(|(_, ws, rest)| (ws, rest))
            });
        match found {
            Some((workspace, rest)) => Ok(Placed {
                workspace: workspace.clone(),
                rel: rest.to_string_lossy().into_owned(),
            }),
            None => Err(OutsideReach {
                path: path.to_owned(),
                root: self.workspace.root().to_path_buf(),
                writable: self
                    .writable
                    .iter()
                    .map(|ws| ws.root().to_path_buf())
                    .collect(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Door, FileOp, OperatorPolicy};

    fn files(root: &Path, writable: &[&Path]) -> Files {
        let policy = OperatorPolicy::local_user(root.to_path_buf());
        let permit = crate::plan::files::plan_file(&policy, FileOp::Read, &[], Door::Run).unwrap();
        Files::new(
            permit,
            Workspace::new(root),
            writable.iter().map(|w| Workspace::new(w)).collect(),
        )
    }

    #[test]
    fn a_relative_path_is_from_the_root_and_an_absolute_one_beneath_it_is_taken_relative() {
        let files = files(Path::new("/nonexistent-root"), &[]);
        let placed = files.place("a/b").unwrap();
        assert_eq!(placed.workspace.root(), Path::new("/nonexistent-root"));
        assert_eq!(placed.rel, "a/b");
        assert_eq!(files.place("/nonexistent-root/x/y").unwrap().rel, "x/y");
        assert_eq!(files.place("/nonexistent-root").unwrap().rel, "");
    }

    #[test]
    fn a_path_beneath_a_writable_root_is_placed_there() {
        let files = files(
            Path::new("/nonexistent-root"),
            &[
                Path::new("/nonexistent-cache"),
                Path::new("/nonexistent-cache/deep"),
            ],
        );
        let placed = files.place("/nonexistent-cache/deep/f").unwrap();
        assert_eq!(
            placed.workspace.root(),
            Path::new("/nonexistent-cache/deep")
        );
        assert_eq!(placed.rel, "f");
        let placed = files.place("/nonexistent-cache/g").unwrap();
        assert_eq!(placed.workspace.root(), Path::new("/nonexistent-cache"));
    }

    #[test]
    fn a_path_elsewhere_is_refused_naming_what_is_in_reach() {
        let err = files(Path::new("/r"), &[Path::new("/w")])
            .place("/etc/passwd")
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/r") && text.contains("/w"), "{text}");
        assert!(
            files(Path::new("/home/user"), &[])
                .place("/home/username/x")
                .is_err()
        );
    }
}
