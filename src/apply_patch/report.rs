//! What a successful patch changed, rendered exactly as the contract says.

use std::fmt;
use std::path::PathBuf;

use super::seek::MatchLevel;

/// How one file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeKind {
    /// Created (`A`).
    Added,
    /// Updated or moved (`M`, the destination for a move).
    Modified,
    /// Removed (`D`).
    Deleted,
}

impl ChangeKind {
    /// The one-letter tag of the success text.
    pub fn letter(self) -> char {
        match self {
            ChangeKind::Added => 'A',
            ChangeKind::Modified => 'M',
            ChangeKind::Deleted => 'D',
        }
    }
}

/// One changed file, with the path as the patch wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Added, modified or deleted.
    pub kind: ChangeKind,
    /// The path as written in the patch.
    pub path: PathBuf,
}

/// A hunk that only matched after relaxing the comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuzzyMatch {
    /// The file as written in the patch.
    pub path: PathBuf,
    /// The hunk's number within the file's Update, from 1.
    pub hunk: usize,
    /// The level that matched.
    pub level: MatchLevel,
}

/// The outcome of a patch that applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Files in patch order (the text groups them A, then M, then D).
    pub changes: Vec<FileChange>,
    /// Hunks that needed tolerant matching.
    pub fuzzy: Vec<FuzzyMatch>,
}

impl ApplyReport {
    pub(crate) fn record(&mut self, kind: ChangeKind, path: PathBuf) {
        let change = FileChange { kind, path };
        if !self.changes.contains(&change) {
            self.changes.push(change);
        }
    }
}

/// `Success. Updated the following files:` then `A path` / `M path` /
/// `D path`, one per line, added first, then modified, then deleted.
impl fmt::Display for ApplyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Success. Updated the following files:")?;
        for kind in [ChangeKind::Added, ChangeKind::Modified, ChangeKind::Deleted] {
            for change in self.changes.iter().filter(|c| c.kind == kind) {
                writeln!(f, "{} {}", kind.letter(), change.path.display())?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_grouped_and_deduplicated() {
        let mut report = ApplyReport::default();
        report.record(ChangeKind::Deleted, "gone".into());
        report.record(ChangeKind::Modified, "m".into());
        report.record(ChangeKind::Added, "new".into());
        report.record(ChangeKind::Modified, "m".into());
        assert_eq!(
            report.to_string(),
            "Success. Updated the following files:\nA new\nM m\nD gone\n"
        );
    }
}
