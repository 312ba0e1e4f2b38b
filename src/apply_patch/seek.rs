//! Finding a chunk's lines in a file, as tolerant as models need.
//!
//! Models copy context lines imperfectly: trailing spaces vanish,
//! indentation drifts, typographic quotes and dashes turn into ASCII (or the
//! reverse). Each search tries the levels in order of strictness and takes
//! the first position at the first level that matches, so an exact match
//! always wins over a fuzzy one.

use std::cell::OnceCell;

/// How strictly a chunk matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MatchLevel {
    /// Byte for byte.
    Exact,
    /// Trailing whitespace ignored.
    TrailingWhitespace,
    /// Leading and trailing whitespace ignored.
    SurroundingWhitespace,
    /// Also with Unicode quotes, dashes and odd spaces made ASCII.
    Punctuation,
}

const LEVELS: [MatchLevel; 4] = [
    MatchLevel::Exact,
    MatchLevel::TrailingWhitespace,
    MatchLevel::SurroundingWhitespace,
    MatchLevel::Punctuation,
];

/// The lines of one file, searched by every chunk of an update.
pub(super) struct Haystack<'a> {
    lines: &'a [std::borrow::Cow<'a, str>],
    trimmed_end: OnceCell<Vec<&'a str>>,
    trimmed: OnceCell<Vec<&'a str>>,
    normalized: OnceCell<Vec<String>>,
}

/// Where a search found its lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Found {
    /// Index of the first matching line.
    pub(crate) index: usize,
    /// How strictly it matched.
    pub(crate) level: MatchLevel,
}

/// The region of a file that looks most like lines that were not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Candidate {
    /// Index of the region's first line.
    pub(crate) index: usize,
    /// How many of the wanted lines the region has (after normalizing).
    pub(crate) same_lines: usize,
}

impl<'a> Haystack<'a> {
    /// Wraps a file's lines.
    pub(super) fn new(lines: &'a [std::borrow::Cow<'a, str>]) -> Self {
        Self {
            lines,
            trimmed_end: OnceCell::new(),
            trimmed: OnceCell::new(),
            normalized: OnceCell::new(),
        }
    }

    /// The number of lines.
    pub(super) fn len(&self) -> usize {
        self.lines.len()
    }

    /// Line `index` as text.
    pub(super) fn line(&self, index: usize) -> Option<&str> {
        self.lines.get(index).map(|l| l.as_ref())
    }

    fn normalized(&self) -> &[String] {
        self.normalized
            .get_or_init(|| self.lines.iter().map(|l| normalize(l)).collect())
    }

    /// The first position at or after `start` where `pattern` matches, at
    /// the strictest level that matches anywhere there. With `at_end` only
    /// the position that ends at the last line counts.
    pub(super) fn seek(&self, pattern: &[&str], start: usize, at_end: bool) -> Option<Found> {
        let len = self.lines.len();
        if pattern.len() > len {
            return None;
        }
        let last_start = len - pattern.len();
        let first_start = if at_end { last_start } else { start };
        if first_start > last_start {
            return None;
        }
        let range = first_start..=last_start;
        LEVELS.into_iter().find_map(|level| {
            let index = match level {
                MatchLevel::Exact => find_window(self.lines, pattern, range.clone()),
                MatchLevel::TrailingWhitespace => {
                    let wanted: Vec<&str> = pattern.iter().map(|p| p.trim_end()).collect();
                    let view = self
                        .trimmed_end
                        .get_or_init(|| self.lines.iter().map(|l| l.trim_end()).collect());
                    find_window(view, &wanted, range.clone())
                }
                MatchLevel::SurroundingWhitespace => {
                    let wanted: Vec<&str> = pattern.iter().map(|p| p.trim()).collect();
                    let view = self
                        .trimmed
                        .get_or_init(|| self.lines.iter().map(|l| l.trim()).collect());
                    find_window(view, &wanted, range.clone())
                }
                MatchLevel::Punctuation => {
                    let wanted: Vec<String> = pattern.iter().map(|p| normalize(p)).collect();
                    find_window(self.normalized(), &wanted, range.clone())
                }
            };
            index.map(|index| Found { index, level })
        })
    }

    /// The region most like `pattern`, for an error message: the window
    /// sharing the most non-blank lines (normalized) with it, else the line
    /// most similar to its first non-blank line.
    pub(super) fn closest(&self, pattern: &[&str]) -> Option<Candidate> {
        let normalized = self.normalized();
        let wanted: Vec<String> = pattern.iter().map(|p| normalize(p)).collect();
        let mut best: Option<Candidate> = None;
        for index in 0..normalized.len() {
            let same_lines = wanted
                .iter()
                .zip(&normalized[index..])
                .filter(|(w, l)| !w.is_empty() && w == l)
                .count();
            if same_lines > best.as_ref().map_or(0, |b| b.same_lines) {
                best = Some(Candidate { index, same_lines });
            }
        }
        best.or_else(|| self.most_similar_line(&wanted))
    }

    fn most_similar_line(&self, wanted: &[String]) -> Option<Candidate> {
        const THRESHOLD: f64 = 0.6;
        let (offset, probe) = wanted.iter().enumerate().find(|(_, w)| !w.is_empty())?;
        let probe_len = probe.chars().count();
        let mut best: Option<(f64, usize)> = None;
        for (index, line) in self.normalized().iter().enumerate() {
            let line_len = line.chars().count();
            if line_len * 2 < probe_len || probe_len * 2 < line_len {
                continue;
            }
            let score = strsim::normalized_levenshtein(probe, line);
            if score >= THRESHOLD && best.is_none_or(|(s, _)| score > s) {
                best = Some((score, index));
            }
        }
        best.map(|(_, index)| Candidate {
            index: index.saturating_sub(offset),
            same_lines: 0,
        })
    }
}

/// The first start in `range` where `wanted` equals the lines of `view`.
fn find_window<L: AsRef<str>, W: AsRef<str>>(
    view: &[L],
    wanted: &[W],
    range: std::ops::RangeInclusive<usize>,
) -> Option<usize> {
    range.into_iter().find(|&start| {
        view[start..start + wanted.len()]
            .iter()
            .zip(wanted)
            .all(|(line, want)| line.as_ref() == want.as_ref())
    })
}

/// A line with surrounding whitespace removed and Unicode punctuation that
/// models render as ASCII (or the reverse) made ASCII.
pub(super) fn normalize(line: &str) -> String {
    line.trim()
        .chars()
        .filter_map(|c| match c {
            '\u{2010}' | '\u{2011}' | '\u{2012}' | '\u{2013}' | '\u{2014}' | '\u{2015}'
            | '\u{2212}' | '\u{FE58}' | '\u{FE63}' | '\u{FF0D}' => Some('-'),
            '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' | '\u{2032}' | '\u{FF07}' => {
                Some('\'')
            }
            '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' | '\u{2033}' | '\u{FF02}'
            | '\u{00AB}' | '\u{00BB}' => Some('"'),
            '\u{2026}' => Some('.'),
            '\u{00A0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200A}'
            | '\u{202F}'
            | '\u{205F}'
            | '\u{3000}' => Some(' '),
            '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' => None,
            other => Some(other),
        })
        .collect::<String>()
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    fn lines(texts: &[&'static str]) -> Vec<Cow<'static, str>> {
        texts.iter().map(|t| Cow::Borrowed(*t)).collect()
    }

    #[test]
    fn exact_beats_fuzzy_even_when_fuzzy_comes_first() {
        let file = lines(&["foo  ", "foo"]);
        let hay = Haystack::new(&file);
        assert_eq!(
            hay.seek(&["foo"], 0, false),
            Some(Found {
                index: 1,
                level: MatchLevel::Exact
            })
        );
    }

    #[test]
    fn each_level_matches_what_it_should() {
        let file = lines(&[
            "a\t ",
            "    b",
            "say \u{201C}hi\u{201D} \u{2014} ok\u{00A0}x",
        ]);
        let hay = Haystack::new(&file);
        assert_eq!(
            hay.seek(&["a"], 0, false).map(|f| f.level),
            Some(MatchLevel::TrailingWhitespace)
        );
        assert_eq!(
            hay.seek(&["b  "], 0, false).map(|f| f.level),
            Some(MatchLevel::SurroundingWhitespace)
        );
        assert_eq!(
            hay.seek(&["say \"hi\" - ok x"], 0, false).map(|f| f.level),
            Some(MatchLevel::Punctuation)
        );
        assert_eq!(hay.seek(&["c"], 0, false), None);
    }

    #[test]
    fn start_and_end_anchor_limit_the_search() {
        let file = lines(&["x", "y", "x"]);
        let hay = Haystack::new(&file);
        assert_eq!(hay.seek(&["x"], 1, false).map(|f| f.index), Some(2));
        assert_eq!(hay.seek(&["x"], 0, true).map(|f| f.index), Some(2));
        assert_eq!(hay.seek(&["y"], 0, true), None);
        assert_eq!(hay.seek(&["x", "y", "x", "y"], 0, false), None);
        assert_eq!(hay.seek(&["x"], 9, false), None);
    }

    #[test]
    fn closest_prefers_the_window_sharing_most_lines() {
        let file = lines(&["fn a() {", "    one();", "}", "fn b() {", "    two();", "}"]);
        let hay = Haystack::new(&file);
        let found = hay.closest(&["fn b() {", "    two();", "    three();"]);
        assert_eq!(
            found,
            Some(Candidate {
                index: 3,
                same_lines: 2
            })
        );
        let similar = hay.closest(&["    twoo();"]);
        assert_eq!(similar.map(|c| c.index), Some(4));
        assert_eq!(hay.closest(&["completely different"]), None);
    }
}
