//! A file's contents as lines that remember their own line endings.
//!
//! Lines are kept as raw bytes so that an update touches only the lines a
//! chunk changes: untouched lines, including ones that are not valid UTF-8
//! or end in `\r\n`, are written back byte for byte. Inserted lines take the
//! file's dominant line ending, and an updated file always ends with one.

use std::borrow::Cow;

/// How a line ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Eol {
    /// `\n`
    Lf,
    /// `\r\n`
    CrLf,
    /// The last line of a file without a final newline.
    None,
}

impl Eol {
    fn bytes(self) -> &'static [u8] {
        match self {
            Eol::Lf => b"\n",
            Eol::CrLf => b"\r\n",
            Eol::None => b"",
        }
    }
}

/// One line of a file: its bytes without the ending, and the ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Line {
    /// The line's bytes, without `\n` / `\r\n`.
    pub(crate) bytes: Vec<u8>,
    /// How it ended in the file.
    pub(crate) eol: Eol,
}

impl Line {
    /// The line as text for matching; invalid UTF-8 becomes U+FFFD.
    pub(super) fn text(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes)
    }
}

/// A file split into lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TextFile {
    /// The lines; a final newline does not make an empty last line.
    pub(crate) lines: Vec<Line>,
    /// The ending new lines get: `\r\n` when most lines use it.
    pub(crate) dominant_eol: Eol,
}

impl TextFile {
    /// Splits bytes into lines.
    pub(super) fn parse(contents: &[u8]) -> Self {
        let mut lines = Vec::new();
        let mut crlf = 0usize;
        let mut lf = 0usize;
        let mut rest = contents;
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(newline) => {
                    let (bytes, eol) = if newline > 0 && rest[newline - 1] == b'\r' {
                        crlf += 1;
                        (&rest[..newline - 1], Eol::CrLf)
                    } else {
                        lf += 1;
                        (&rest[..newline], Eol::Lf)
                    };
                    lines.push(Line {
                        bytes: bytes.to_vec(),
                        eol,
                    });
                    rest = &rest[newline + 1..];
                }
                None => {
                    lines.push(Line {
                        bytes: rest.to_vec(),
                        eol: Eol::None,
                    });
                    rest = &[];
                }
            }
        }
        let dominant_eol = if crlf > lf { Eol::CrLf } else { Eol::Lf };
        Self {
            lines,
            dominant_eol,
        }
    }

    /// A line made from patch text, ending like the rest of the file.
    pub(super) fn new_line(&self, text: &str) -> Line {
        Line {
            bytes: text.as_bytes().to_vec(),
            eol: self.dominant_eol,
        }
    }

    /// The lines as text, for matching.
    pub(super) fn texts(&self) -> Vec<Cow<'_, str>> {
        self.lines.iter().map(Line::text).collect()
    }

    /// The bytes to write: every line ends, the last one included.
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.lines.iter().map(|l| l.bytes.len() + 2).sum());
        for line in &self.lines {
            out.extend_from_slice(&line.bytes);
            let eol = match line.eol {
                Eol::None => self.dominant_eol,
                other => other,
            };
            out.extend_from_slice(eol.bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_lf_and_crlf() {
        for input in [&b"a\nb\n"[..], b"a\r\nb\r\n", b"a\r\nb\n", b"", b"\n\n"] {
            assert_eq!(TextFile::parse(input).to_bytes(), input);
        }
    }

    #[test]
    fn missing_final_newline_is_added_in_the_file_style() {
        assert_eq!(TextFile::parse(b"a\nb").to_bytes(), b"a\nb\n");
        assert_eq!(TextFile::parse(b"a\r\nb").to_bytes(), b"a\r\nb\r\n");
    }

    #[test]
    fn dominant_ending_is_crlf_only_when_most_lines_use_it() {
        assert_eq!(TextFile::parse(b"a\r\nb\r\nc\n").dominant_eol, Eol::CrLf);
        assert_eq!(TextFile::parse(b"a\r\nb\nc\n").dominant_eol, Eol::Lf);
        assert_eq!(TextFile::parse(b"").dominant_eol, Eol::Lf);
    }

    #[test]
    fn invalid_utf8_survives_untouched() {
        let input = b"caf\xe9\nok\n";
        let file = TextFile::parse(input);
        assert_eq!(file.lines[0].text(), "caf\u{fffd}");
        assert_eq!(file.to_bytes(), input);
    }
}
