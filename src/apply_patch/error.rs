//! Everything that can stop a patch, each naming the file and hunk involved.

use std::fmt;
use std::path::PathBuf;

use super::parser::ParseError;
use super::paths::Refusal;
use crate::exit_code;

/// Why a patch was not applied. Every variant but [`ApplyPatchError::Write`]
/// is found before anything is written, so the tree is untouched.
#[derive(Debug, thiserror::Error)]
pub enum ApplyPatchError {
    /// The patch text is malformed.
    #[error("invalid patch: {0}")]
    Parse(#[from] ParseError),
    /// The working directory cannot be resolved.
    #[error("cannot use the working directory {}: {source}", path.display())]
    Workdir {
        /// The directory given.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A path leaves the working directory.
    #[error("{}: refused: the path {refusal} (pass --allow-outside to permit it)", path.display())]
    OutsideWorkdir {
        /// The path as written in the patch.
        path: PathBuf,
        /// What makes it leave.
        refusal: Refusal,
    },
    /// Update, Delete or Move of a file that does not exist.
    #[error("{}: cannot {action}: no such file", path.display())]
    Missing {
        /// The path as written in the patch.
        path: PathBuf,
        /// `update`, `delete` or `move`.
        action: &'static str,
    },
    /// Add (or Move to) a path that already exists.
    #[error(
        "{}: cannot {action}: the file already exists (update it, or delete it earlier in the same patch)",
        path.display()
    )]
    AlreadyExists {
        /// The path as written in the patch.
        path: PathBuf,
        /// `add` or `move here`.
        action: &'static str,
    },
    /// The path is a directory or other non-file.
    #[error("{}: cannot {action}: it is not a regular file", path.display())]
    NotAFile {
        /// The path as written in the patch.
        path: PathBuf,
        /// The operation attempted.
        action: &'static str,
    },
    /// Reading a file failed.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The path as written in the patch.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A hunk's lines or context were not found.
    #[error("{0}")]
    NoMatch(Box<NoMatch>),
    /// Writing failed; `rollback` says whether the earlier writes were undone.
    #[error("{}: cannot write: {source}; {rollback}", path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
        /// What became of the files already written.
        rollback: Rollback,
    },
}

impl ApplyPatchError {
    /// The exit code the `apply_patch` personality ends with.
    pub fn exit_code(&self) -> i32 {
        match self {
            ApplyPatchError::Parse(_)
            | ApplyPatchError::OutsideWorkdir { .. }
            | ApplyPatchError::Missing { .. }
            | ApplyPatchError::AlreadyExists { .. }
            | ApplyPatchError::NotAFile { .. }
            | ApplyPatchError::Read { .. }
            | ApplyPatchError::NoMatch(_)
            | ApplyPatchError::Workdir { .. }
            | ApplyPatchError::Write { .. } => exit_code::BAD_PATCH,
        }
    }

    /// A stable name for the failure, for JSON `error.kind` fields.
    pub fn kind(&self) -> &'static str {
        match self {
            ApplyPatchError::Parse(_) => "invalid_patch",
            ApplyPatchError::Workdir { .. } => "bad_workdir",
            ApplyPatchError::OutsideWorkdir { .. } => "outside_workdir",
            ApplyPatchError::Missing { .. } => "missing_file",
            ApplyPatchError::AlreadyExists { .. } => "file_exists",
            ApplyPatchError::NotAFile { .. } => "not_a_file",
            ApplyPatchError::Read { .. } => "read_failed",
            ApplyPatchError::NoMatch(_) => "hunk_not_found",
            ApplyPatchError::Write { .. } => "write_failed",
        }
    }

    /// Whether the file tree is guaranteed to be as it was.
    pub fn tree_untouched(&self) -> bool {
        match self {
            ApplyPatchError::Write { rollback, .. } => *rollback == Rollback::Complete,
            _ => true,
        }
    }
}

/// What happened to the files already written when a later write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollback {
    /// Every earlier change was undone.
    Complete,
    /// Some could not be undone; these paths may hold new contents.
    Incomplete(Vec<PathBuf>),
}

impl fmt::Display for Rollback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rollback::Complete => f.write_str("every change was rolled back"),
            Rollback::Incomplete(paths) => {
                f.write_str("rolling back failed for: ")?;
                for (i, path) in paths.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}", path.display())?;
                }
                Ok(())
            }
        }
    }
}

/// A hunk that did not apply: which, where, and what the file has instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoMatch {
    /// The file as written in the patch.
    pub path: PathBuf,
    /// The hunk's number within this file's Update, from 1.
    pub hunk: usize,
    /// The patch line where the hunk starts.
    pub patch_line: usize,
    /// What was looked for.
    pub missing: Missing,
    /// Line number (from 1) after which the search started, if not the top.
    pub searched_after: Option<usize>,
    /// The lines were found, but above the previous hunk (at this line).
    pub found_earlier_at: Option<usize>,
    /// The most similar region of the file.
    pub closest: Option<ClosestRegion>,
}

/// What a hunk needed and the file lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// An `@@ context` line.
    Context(String),
    /// The hunk's context and removed lines, in order.
    Lines {
        /// The lines.
        lines: Vec<String>,
        /// They had to end the file (`*** End of File`).
        at_end_of_file: bool,
    },
}

/// A region of the file shown as "closest match".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosestRegion {
    /// Line number of its first line, from 1.
    pub line: usize,
    /// Its lines.
    pub lines: Vec<String>,
}

impl fmt::Display for NoMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: hunk {} (patch line {}) does not apply: ",
            self.path.display(),
            self.hunk,
            self.patch_line
        )?;
        let after = self
            .searched_after
            .map(|line| format!(" after line {line}"))
            .unwrap_or_default();
        match &self.missing {
            Missing::Context(context) => {
                writeln!(f, "context line '@@ {context}' not found{after}")?;
            }
            Missing::Lines {
                lines,
                at_end_of_file,
            } => {
                let place = if *at_end_of_file {
                    " at the end of the file".to_owned()
                } else {
                    after
                };
                writeln!(f, "these lines were not found{place}:")?;
                for line in lines {
                    writeln!(f, "  | {line}")?;
                }
            }
        }
        if let Some(line) = self.found_earlier_at {
            writeln!(
                f,
                "they are at line {line}, above the previous hunk: hunks must follow the file's order"
            )?;
        }
        match &self.closest {
            Some(region) => {
                writeln!(f, "closest match in the file, at line {}:", region.line)?;
                for (i, line) in region.lines.iter().enumerate() {
                    let number = region.line + i;
                    if i + 1 == region.lines.len() {
                        write!(f, "  {number:>5} | {line}")?;
                    } else {
                        writeln!(f, "  {number:>5} | {line}")?;
                    }
                }
                Ok(())
            }
            None => f.write_str("nothing similar was found in the file"),
        }
    }
}
