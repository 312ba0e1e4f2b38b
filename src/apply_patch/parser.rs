//! The Codex patch format, parsed into file operations without touching disk.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: P        then `+` lines
//! *** Delete File: P
//! *** Update File: P
//! *** Move to: Q         (optional, right after Update)
//! @@ context             (one or more, to locate the chunk; bare `@@` too)
//!  context / -old / +new lines
//! *** End of File        (optional: the chunk ends at the end of the file)
//! *** End Patch
//! ```
//!
//! The parser is as lenient as models need and no more: markers may carry
//! surrounding whitespace, blank lines may separate operations, the first
//! chunk may omit `@@`, several `@@` lines may narrow the position step by
//! step, and a unified-diff header (`@@ -3,7 +3,8 @@ fn x`) counts as `@@ fn x`.
//! Anything it cannot read is an error naming the patch line.

use std::path::PathBuf;

use super::wrapper::{NumberedLine, unwrap_patch};

const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";
const ADD_FILE: &str = "*** Add File:";
const DELETE_FILE: &str = "*** Delete File:";
const UPDATE_FILE: &str = "*** Update File:";
const MOVE_TO: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// A parsed patch: its operations in the order they appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// The file operations, in patch order.
    pub operations: Vec<Operation>,
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Create a file that must not exist yet.
    Add {
        /// The path as written in the patch.
        path: PathBuf,
        /// The full new contents (every line ends with `\n`).
        contents: String,
        /// The patch line of the `*** Add File:` marker.
        patch_line: usize,
    },
    /// Remove an existing file.
    Delete {
        /// The path as written in the patch.
        path: PathBuf,
        /// The patch line of the marker.
        patch_line: usize,
    },
    /// Change an existing file, optionally moving it.
    Update {
        /// The path as written in the patch.
        path: PathBuf,
        /// The new path, when the file is also moved.
        move_to: Option<PathBuf>,
        /// The chunks, in file order.
        chunks: Vec<Chunk>,
        /// The patch line of the marker.
        patch_line: usize,
    },
}

impl Operation {
    /// The path the operation names first (the source of a move).
    pub fn path(&self) -> &PathBuf {
        match self {
            Operation::Add { path, .. }
            | Operation::Delete { path, .. }
            | Operation::Update { path, .. } => path,
        }
    }
}

/// One line of a chunk body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkLine {
    /// ` line`: must be there, stays as it is in the file.
    Context(String),
    /// `-line`: must be there, is removed.
    Remove(String),
    /// `+line`: is inserted.
    Add(String),
}

/// One `@@` section of an Update: where it goes and what it changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// `@@ text` lines, each located after the previous one.
    pub contexts: Vec<String>,
    /// The body lines in order.
    pub lines: Vec<ChunkLine>,
    /// `*** End of File` closed the chunk: it must match at the file's end.
    pub at_end_of_file: bool,
    /// The patch line where the chunk starts (its first `@@` or body line).
    pub patch_line: usize,
}

impl Chunk {
    /// The lines the file must contain (context and removed lines).
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|line| match line {
                ChunkLine::Context(text) | ChunkLine::Remove(text) => Some(text.as_str()),
                ChunkLine::Add(_) => None,
            })
            .collect()
    }

    /// A short label for messages: `@@ context` or the first body line.
    pub fn label(&self) -> String {
        match self.contexts.last() {
            Some(context) => format!("@@ {context}"),
            None => "@@".to_owned(),
        }
    }
}

/// Why a patch text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", line.map(|n| format!("patch line {n}: ")).unwrap_or_default())]
pub struct ParseError {
    /// The 1-based line of the patch text, when one line is to blame.
    pub line: Option<usize>,
    /// What is wrong, in one sentence.
    pub message: String,
}

impl ParseError {
    fn at(line: usize, message: impl Into<String>) -> Self {
        Self {
            line: Some(line),
            message: message.into(),
        }
    }

    fn whole(message: impl Into<String>) -> Self {
        Self {
            line: None,
            message: message.into(),
        }
    }
}

/// Parses a patch text, wrapper and all.
pub fn parse(input: &str) -> Result<Patch, ParseError> {
    let lines = unwrap_patch(input);
    let (first, last) = match (lines.first(), lines.last()) {
        (Some(first), Some(last)) => (first, last),
        _ => return Err(ParseError::whole("the patch is empty")),
    };
    if first.text.trim() != BEGIN_PATCH {
        return Err(ParseError::at(
            first.number,
            format!(
                "the patch must start with '{BEGIN_PATCH}', found '{}'",
                shorten(first.text)
            ),
        ));
    }
    if lines.len() < 2 || last.text.trim() != END_PATCH {
        return Err(ParseError::at(
            last.number,
            format!(
                "the patch must end with '{END_PATCH}', found '{}' (was the patch cut off?)",
                shorten(last.text)
            ),
        ));
    }
    let body = &lines[1..lines.len() - 1];
    let mut parser = Parser { lines: body, at: 0 };
    let mut operations = Vec::new();
    while let Some(line) = parser.peek() {
        if line.text.trim().is_empty() {
            parser.at += 1;
            continue;
        }
        operations.push(parser.operation()?);
    }
    if operations.is_empty() {
        return Err(ParseError::at(
            first.number,
            "the patch contains no file operations (Add File, Delete File or Update File)",
        ));
    }
    Ok(Patch { operations })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterBlanks {
    ChunkHeader,
    Marker,
    BodyLine,
    Nothing,
}

struct Parser<'a, 'b> {
    lines: &'b [NumberedLine<'a>],
    at: usize,
}

impl<'a> Parser<'a, '_> {
    fn peek(&self) -> Option<NumberedLine<'a>> {
        self.lines.get(self.at).copied()
    }

    fn next(&mut self) -> Option<NumberedLine<'a>> {
        let line = self.peek();
        if line.is_some() {
            self.at += 1;
        }
        line
    }

    fn operation(&mut self) -> Result<Operation, ParseError> {
        let Some(header) = self.next() else {
            return Err(ParseError::whole("unexpected end of patch"));
        };
        let text = header.text.trim();
        if let Some(path) = text.strip_prefix(ADD_FILE) {
            let path = marker_path(path, header.number, ADD_FILE)?;
            Ok(Operation::Add {
                path,
                contents: self.add_contents(),
                patch_line: header.number,
            })
        } else if let Some(path) = text.strip_prefix(DELETE_FILE) {
            let path = marker_path(path, header.number, DELETE_FILE)?;
            Ok(Operation::Delete {
                path,
                patch_line: header.number,
            })
        } else if let Some(path) = text.strip_prefix(UPDATE_FILE) {
            let path = marker_path(path, header.number, UPDATE_FILE)?;
            self.update(path, header.number)
        } else {
            Err(ParseError::at(
                header.number,
                format!(
                    "'{}' is not a file operation; expected '{ADD_FILE} PATH', '{DELETE_FILE} PATH' or '{UPDATE_FILE} PATH'",
                    shorten(header.text)
                ),
            ))
        }
    }

    /// `+` lines; a bare empty line between two `+` lines is an empty line
    /// of the file (models often drop the `+` there).
    fn add_contents(&mut self) -> String {
        let mut contents = String::new();
        while let Some(line) = self.peek() {
            if let Some(text) = line.text.strip_prefix('+') {
                contents.push_str(text);
                contents.push('\n');
                self.at += 1;
                continue;
            }
            let blanks = self.lines[self.at..]
                .iter()
                .take_while(|l| l.text.is_empty())
                .count();
            let followed_by_add = blanks > 0
                && self
                    .lines
                    .get(self.at + blanks)
                    .is_some_and(|l| l.text.starts_with('+'));
            if !followed_by_add {
                break;
            }
            for _ in 0..blanks {
                contents.push('\n');
            }
            self.at += blanks;
        }
        contents
    }

    fn update(&mut self, path: PathBuf, patch_line: usize) -> Result<Operation, ParseError> {
        let mut move_to = None;
        if let Some(line) = self.peek()
            && let Some(dest) = line.text.trim().strip_prefix(MOVE_TO)
        {
            move_to = Some(marker_path(dest, line.number, MOVE_TO)?);
            self.at += 1;
        }
        let mut chunks: Vec<Chunk> = Vec::new();
        while let Some(line) = self.peek() {
            let trimmed = line.text.trim();
            if trimmed.is_empty() {
                match self.after_blank_run() {
                    AfterBlanks::ChunkHeader => {
                        self.skip_blank_run();
                        continue;
                    }
                    AfterBlanks::Marker | AfterBlanks::Nothing => break,
                    AfterBlanks::BodyLine => {}
                }
            }
            if trimmed.starts_with("***") && trimmed != END_OF_FILE {
                break;
            }
            chunks.push(self.chunk(chunks.is_empty())?);
        }
        if chunks.is_empty() {
            return Err(ParseError::at(
                patch_line,
                format!(
                    "'{UPDATE_FILE} {}' has no changes: add '@@' chunks with ' ', '-' and '+' lines",
                    path.display()
                ),
            ));
        }
        Ok(Operation::Update {
            path,
            move_to,
            chunks,
            patch_line,
        })
    }

    /// What follows the blank lines starting here. Blank lines before the
    /// next operation, the next `@@` or the end are separators; blank lines
    /// followed by more body lines are empty context lines.
    fn after_blank_run(&self) -> AfterBlanks {
        let rest = &self.lines[self.at..];
        match rest.iter().find(|l| !l.text.trim().is_empty()) {
            None => AfterBlanks::Nothing,
            Some(next) if chunk_header(next.text).is_some() => AfterBlanks::ChunkHeader,
            Some(next) => {
                let t = next.text.trim();
                if t.starts_with("***") && t != END_OF_FILE {
                    AfterBlanks::Marker
                } else {
                    AfterBlanks::BodyLine
                }
            }
        }
    }

    fn skip_blank_run(&mut self) {
        while self.peek().is_some_and(|l| l.text.trim().is_empty()) {
            self.at += 1;
        }
    }

    fn chunk(&mut self, first_in_file: bool) -> Result<Chunk, ParseError> {
        let start_line = self.peek().map_or(0, |l| l.number);
        let headers_start = self.at;
        let mut contexts = Vec::new();
        while let Some(line) = self.peek() {
            match chunk_header(line.text) {
                Some(context) => {
                    contexts.extend(context);
                    self.at += 1;
                }
                None => break,
            }
        }
        let header_seen = self.at > headers_start;
        if !header_seen && !first_in_file {
            let line = self.peek().map_or(start_line, |l| l.number);
            let text = self.peek().map_or("", |l| l.text);
            return Err(ParseError::at(
                line,
                format!(
                    "expected '@@' to start the next chunk, found '{}'",
                    shorten(text)
                ),
            ));
        }
        let mut body = Vec::new();
        let mut at_end_of_file = false;
        while let Some(line) = self.peek() {
            let text = line.text;
            if text.trim() == END_OF_FILE {
                self.at += 1;
                at_end_of_file = true;
                break;
            }
            if text.trim().is_empty() && !text.starts_with(' ') {
                if self.after_blank_run() != AfterBlanks::BodyLine {
                    break;
                }
                body.push(ChunkLine::Context(String::new()));
                self.at += 1;
                continue;
            }
            let parsed = if let Some(rest) = text.strip_prefix(' ') {
                ChunkLine::Context(rest.to_owned())
            } else if let Some(rest) = text.strip_prefix('-') {
                ChunkLine::Remove(rest.to_owned())
            } else if let Some(rest) = text.strip_prefix('+') {
                ChunkLine::Add(rest.to_owned())
            } else if body.is_empty() {
                return Err(ParseError::at(
                    line.number,
                    format!(
                        "unexpected line '{}' in a chunk: every line must start with ' ' (context), '-' (remove) or '+' (add)",
                        shorten(text)
                    ),
                ));
            } else {
                break;
            };
            body.push(parsed);
            self.at += 1;
        }
        if body.is_empty() {
            return Err(ParseError::at(
                start_line,
                "this chunk has no lines: add ' ', '-' or '+' lines after '@@'",
            ));
        }
        Ok(Chunk {
            contexts,
            lines: body,
            at_end_of_file,
            patch_line: start_line,
        })
    }
}

/// `Some(contexts)` when the line is a chunk header: `@@` gives none,
/// `@@ text` gives `text`, `@@ -1,2 +1,3 @@ text` gives `text` if any.
fn chunk_header(line: &str) -> Option<Option<String>> {
    let rest = line.trim_end().strip_prefix("@@")?;
    if rest.is_empty() {
        return Some(None);
    }
    let rest = rest.strip_prefix(' ')?;
    if let Some(after_range) = unified_range_suffix(rest) {
        let text = after_range.trim();
        return Some((!text.is_empty()).then(|| text.to_owned()));
    }
    Some(Some(rest.to_owned()))
}

/// For `-3,7 +3,8 @@ fn x` returns ` fn x`.
fn unified_range_suffix(rest: &str) -> Option<&str> {
    let mut words = rest.splitn(3, ' ');
    let old = words.next()?;
    let new = words.next()?;
    let tail = words.next()?;
    let is_range = |word: &str, sign: char| {
        word.strip_prefix(sign).is_some_and(|r| {
            !r.is_empty()
                && r.split(',')
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    if is_range(old, '-') && is_range(new, '+') {
        tail.strip_prefix("@@")
    } else {
        None
    }
}

fn marker_path(raw: &str, line: usize, marker: &str) -> Result<PathBuf, ParseError> {
    let path = raw.trim();
    if path.is_empty() {
        return Err(ParseError::at(line, format!("'{marker}' needs a path")));
    }
    Ok(PathBuf::from(path))
}

fn shorten(text: &str) -> String {
    const MAX: usize = 80;
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(input: &str) -> Vec<Operation> {
        match parse(input) {
            Ok(patch) => patch.operations,
            Err(err) => panic!("parse failed: {err}\n{input}"),
        }
    }

    fn err(input: &str) -> ParseError {
        match parse(input) {
            Ok(patch) => panic!("parse succeeded: {patch:?}"),
            Err(err) => err,
        }
    }

    #[test]
    fn add_delete_update_move() {
        let parsed = ops(
            "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Delete File: b.txt\n*** Update File: c.txt\n*** Move to: d.txt\n@@ fn main\n ctx\n-old\n+new\n*** End Patch\n",
        );
        assert_eq!(parsed.len(), 3);
        assert_eq!(
            parsed[0],
            Operation::Add {
                path: "a.txt".into(),
                contents: "one\ntwo\n".into(),
                patch_line: 2
            }
        );
        assert_eq!(
            parsed[1],
            Operation::Delete {
                path: "b.txt".into(),
                patch_line: 5
            }
        );
        let Operation::Update {
            move_to, chunks, ..
        } = &parsed[2]
        else {
            panic!("not an update");
        };
        assert_eq!(move_to.as_deref(), Some(std::path::Path::new("d.txt")));
        assert_eq!(chunks[0].contexts, ["fn main"]);
        assert_eq!(
            chunks[0].lines,
            [
                ChunkLine::Context("ctx".into()),
                ChunkLine::Remove("old".into()),
                ChunkLine::Add("new".into())
            ]
        );
    }

    #[test]
    fn first_chunk_without_header_and_later_chunks_need_one() {
        let parsed = ops("*** Begin Patch\n*** Update File: a\n x\n-y\n@@\n-z\n+w\n*** End Patch");
        let Operation::Update { chunks, .. } = &parsed[0] else {
            panic!("not an update");
        };
        assert_eq!(chunks.len(), 2);
        assert!(chunks[1].contexts.is_empty());
    }

    #[test]
    fn nested_contexts_and_unified_headers() {
        let parsed = ops(
            "*** Begin Patch\n*** Update File: a\n@@ class A\n@@     def f():\n-x\n+y\n@@ -10,3 +10,4 @@ def g():\n-p\n+q\n@@ -1 +1 @@\n-r\n*** End Patch",
        );
        let Operation::Update { chunks, .. } = &parsed[0] else {
            panic!("not an update");
        };
        assert_eq!(chunks[0].contexts, ["class A", "    def f():"]);
        assert_eq!(chunks[1].contexts, ["def g():"]);
        assert!(chunks[2].contexts.is_empty());
    }

    #[test]
    fn end_of_file_marker_and_blank_context_lines() {
        let parsed = ops(
            "*** Begin Patch\n*** Update File: a\n@@\n x\n\n y\n+z\n*** End of File\n\n*** Delete File: b\n*** End Patch",
        );
        let Operation::Update { chunks, .. } = &parsed[0] else {
            panic!("not an update");
        };
        assert!(chunks[0].at_end_of_file);
        assert_eq!(chunks[0].old_lines(), ["x", "", "y"]);
        assert_eq!(parsed.len(), 2);
    }

    #[test]
    fn add_tolerates_missing_plus_on_empty_lines() {
        let parsed = ops("*** Begin Patch\n*** Add File: a\n+one\n\n+three\n\n*** End Patch");
        assert_eq!(
            parsed[0],
            Operation::Add {
                path: "a".into(),
                contents: "one\n\nthree\n".into(),
                patch_line: 2
            }
        );
    }

    #[test]
    fn crlf_and_padded_markers() {
        let parsed = ops("  *** Begin Patch  \r\n*** Add File: a \r\n+x\r\n *** End Patch\r\n");
        assert_eq!(parsed[0].path(), &PathBuf::from("a"));
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(err("").message, "the patch is empty");
        assert_eq!(err("hello").line, Some(1));
        let missing_end = err("*** Begin Patch\n*** Add File: a\n+x\n");
        assert_eq!(missing_end.line, Some(3));
        assert!(missing_end.message.contains("End Patch"));
        assert!(
            err("*** Begin Patch\n*** End Patch")
                .message
                .contains("no file operations")
        );
        let bad_header = err("*** Begin Patch\n*** Frobnicate: a\n*** End Patch");
        assert_eq!(bad_header.line, Some(2));
        let empty_update = err("*** Begin Patch\n*** Update File: a\n*** End Patch");
        assert!(empty_update.message.contains("has no changes"));
        let bad_line = err("*** Begin Patch\n*** Update File: a\n@@\nbogus\n*** End Patch");
        assert_eq!(bad_line.line, Some(4));
        let no_path = err("*** Begin Patch\n*** Delete File:   \n*** End Patch");
        assert!(no_path.message.contains("needs a path"));
    }

    #[test]
    fn second_chunk_without_header_is_an_error() {
        let error = err("*** Begin Patch\n*** Update File: a\n-x\n+y\nstray\n*** End Patch");
        assert_eq!(error.line, Some(5));
    }

    proptest::proptest! {
        #[test]
        fn parsing_arbitrary_text_never_panics(input in "\\PC*") {
            let _ = parse(&input);
        }

        #[test]
        fn parsing_patch_shaped_text_never_panics(
            lines in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("*** Begin Patch".to_owned()),
                    proptest::strategy::Just("*** End Patch".to_owned()),
                    proptest::strategy::Just("*** End of File".to_owned()),
                    proptest::strategy::Just("@@".to_owned()),
                    proptest::strategy::Just("<<'EOF'".to_owned()),
                    proptest::strategy::Just("EOF".to_owned()),
                    proptest::strategy::Just("```".to_owned()),
                    "(\\*\\*\\* (Add|Delete|Update) File: |\\*\\*\\* Move to: |@@ |[ +-]|)\\PC{0,12}",
                ],
                0..24,
            ),
            crlf in proptest::bool::ANY,
        ) {
            let input = lines.join(if crlf { "\r\n" } else { "\n" });
            let _ = parse(&input);
        }
    }
}
