//! Where a problem of a registry file is: file, line and column.
//!
//! toml_edit reports byte offsets; people read lines. [`LineIndex`] turns
//! one into the other so `tools check` can print `file:line:col: message`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A place in a registry file (1-based line and column), or the built-in registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    /// The file; `None` for the built-in registry.
    pub(crate) file: Option<Arc<Path>>,
    pub(crate) line: usize,
    pub(crate) column: usize,
}

impl Default for Location {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Location {
    /// The place of something that has no file (the built-in registry).
    pub(crate) fn builtin() -> Self {
        Self {
            file: None,
            line: 0,
            column: 0,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{}:{}:{}", file.display(), self.line, self.column),
            None => f.write_str("<built-in registry>"),
        }
    }
}

/// One problem of a registry: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub(crate) location: Location,
    pub(crate) message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}

/// Byte offset to line and column for one file's text.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex {
    file: Arc<Path>,
    line_starts: Vec<usize>,
    text_len: usize,
}

impl LineIndex {
    pub(crate) fn new(file: &Path, text: &str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Self {
            file: Arc::from(file),
            line_starts,
            text_len: text.len(),
        }
    }

    /// The location of a byte offset (clamped to the text); columns count bytes.
    pub(crate) fn locate(&self, offset: usize) -> Location {
        let offset = offset.min(self.text_len);
        let line = self.line_starts.partition_point(|start| *start <= offset);
        let line_start = self
            .line_starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(0);
        Location {
            file: Some(self.file.clone()),
            line: line.max(1),
            column: offset - line_start + 1,
        }
    }

    /// The location of an optional span's start; the file start without one.
    pub(crate) fn locate_span(&self, span: Option<std::ops::Range<usize>>) -> Location {
        self.locate(span.map(|s| s.start).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let index = LineIndex::new(Path::new("r.toml"), "a = 1\nbb = 2\n\nc");
        assert_eq!((index.locate(0).line, index.locate(0).column), (1, 1));
        assert_eq!((index.locate(6).line, index.locate(6).column), (2, 1));
        assert_eq!((index.locate(9).line, index.locate(9).column), (2, 4));
        assert_eq!(index.locate(14).line, 4);
        assert_eq!(index.locate(999).line, 4);
        assert_eq!(index.locate(6).to_string(), "r.toml:2:1");
    }
}
