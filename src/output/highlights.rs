//! Highlights: the few lines of a command's output that carry its failure
//! (`error[E0308]: mismatched types`, `--- FAIL: TestAdd`, the exception a
//! Python traceback ends with), found while the output streams past, so a
//! failed result can name them even where the fold left them out.
//!
//! A [`Detector`] sees every finished line of a stream once, as the capture
//! commits it (and, past the skim point of a flood, the raw bytes the
//! capture no longer cleans). One Aho-Corasick pass over each chunk finds
//! the rare lines worth a look ([`NEEDLES`]); only those are classified, so
//! plain output costs one vectorised search (Teddy, about 20 GB/s here;
//! the needles are short so that it can use its fastest form). Memory is
//! bounded whatever the
//! output's size: the start of one unfinished line and at most
//! [`KEPT_PER_RANK`] + 1 highlights of each rank.
//!
//! # The patterns
//!
//! All case-sensitive, tried in this order on a line whose colour and
//! blanks at either end are removed (the first that matches names it):
//!
//! | kind | a line that | from |
//! | --- | --- | --- |
//! | (traceback start) | starts `Traceback (most recent call last):`; not a highlight, but the first unindented line after it is an `exception` | Python |
//! | `panic` | contains `panicked at`; when it ends with `:`, the next line (the message) too | Rust (`thread 'main' panicked at src/main.rs:4:5:`) |
//! | `test_failed` | has `FAIL` or `FAILED` as a word, or starts `error: test failed` | cargo test (`test t::a ... FAILED`, `test result: FAILED.`), pytest (`FAILED t.py::test_a - …`), jest (`FAIL src/a.test.js`), go test (`--- FAIL: TestAdd`, `FAIL pkg 0.01s`) |
//! | `npm` | starts `npm ERR!` or `npm error` | npm before and since v10 |
//! | `compiler_error` | starts `error:` or `error[`; has `: error:` or `: fatal error:`; has `error TS` and a digit | rustc and cargo, gcc, clang, ld, javac (`a.c:3:5: error: …`), tsc (`a.ts(3,7): error TS2322: …`) |
//! | `assertion` | contains `AssertionError` | Python, pytest (`t.py:5: AssertionError`), Node's `assert` |
//! | `exception` | is not indented and starts with a (dotted) name ending in `Error` or `Exception`, then `:`, ` [` or nothing | Python (`ValueError: …`), Node (`TypeError: …`) |
//! | `error_line` | starts with the word `ERROR` | pytest's summary (`ERROR t.py - …`), pip (`ERROR: No matching distribution`) |
//!
//! Lines drawn in red belong here too, once the colour change marks them
//! in the cleaned text (`‹red›…‹/red›`): add its marker to [`NEEDLES`] and
//! a rule `Kind::Red` (a cause) at the top of [`classify`]. Nothing else
//! changes: the marker reaches the detector with the rest of the line.
//!
//! # Which lines win
//!
//! Kinds have two ranks. *Causes* say what went wrong (`compiler_error`,
//! `panic`, `assertion`, `exception`); *verdicts* say that something did
//! (`test_failed`, `npm`, `error_line`). Of at most [`MAX_HIGHLIGHTS`],
//! verdicts get up to [`VERDICT_SLOTS`] and causes the rest (either takes
//! the other's unused slots). Within a rank the earliest lines win (the
//! first error is the cause, later ones often its echo), but the last slot
//! goes to the rank's latest line when more matched than fit (the
//! exception that ended the run, `test result: FAILED`). Highlights are
//! listed in the order they arrived, both streams together.

use std::borrow::Cow;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use aho_corasick::{AhoCorasick, Input, MatchKind, Span, packed};

use super::redact::Redactor;
use super::terminal::{TerminalCleaner, strip_sgr};

/// At most this many highlights per result.
pub const MAX_HIGHLIGHTS: usize = 8;

/// Of [`MAX_HIGHLIGHTS`], at most this many verdicts when causes matched.
pub const VERDICT_SLOTS: usize = 2;

/// A highlight's text is cut to this many characters (an ellipsis added).
pub const MAX_TEXT_CHARS: usize = 300;

/// The earliest highlights kept of each rank (the latest is kept apart).
pub const KEPT_PER_RANK: usize = MAX_HIGHLIGHTS;

/// Of a line that arrives in pieces, the start kept to classify it.
const CARRY_BYTES: usize = 2048;

/// What makes a line worth classifying: every rule of [`classify`] needs
/// one of these in the line (`rror` for `error`, `Error`, `AssertionError`
/// and `npm error`; `ERR` for `ERROR` and `npm ERR!`). Short and
/// distinctive, so that plain output rarely stops the search, and at least
/// 3 bytes, Teddy's fastest mask (one byte more costs it half as much
/// again).
pub const NEEDLES: &[&str] = &["rror", "ERR", "FAIL", "panicked", "Exception", "Traceback"];

/// The search for [`NEEDLES`]: Teddy where the CPU has it (x86-64 with
/// SSSE3 or AVX2, aarch64), else the automaton (a few times slower).
enum Search {
    Teddy(packed::Searcher),
    Automaton(AhoCorasick),
}

impl Search {
    #[expect(
        clippy::expect_used,
        reason = "six fixed needles are far within the automaton's limits; a unit test builds it"
    )]
    fn new() -> Self {
        match packed::Searcher::new(NEEDLES) {
            Some(teddy) => Search::Teddy(teddy),
            None => Search::Automaton(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostFirst)
                    .build(NEEDLES)
                    .expect("the highlight needles build"),
            ),
        }
    }

    /// Where the first needle in `text[start..end]` starts.
    fn find(&self, text: &[u8], start: usize, end: usize) -> Option<usize> {
        match self {
            Search::Teddy(teddy) => teddy
                .find_in(text, Span { start, end })
                .map(|hit| hit.start()),
            Search::Automaton(automaton) => automaton
                .find(Input::new(text).range(start..end))
                .map(|hit| hit.start()),
        }
    }
}

static SEARCH: LazyLock<Search> = LazyLock::new(Search::new);

/// Orders highlights of both streams of a command as they arrived.
static ARRIVAL: AtomicU64 = AtomicU64::new(0);

/// What a highlighted line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A compiler's error line (rustc, cargo, gcc, clang, ld, javac, tsc).
    CompilerError,
    /// A Rust panic, or the message on the line after it.
    Panic,
    /// An `AssertionError` (Python, pytest, Node).
    Assertion,
    /// The exception ending a Python traceback, or an unindented
    /// `SomeError: message` line.
    Exception,
    /// A test framework's `FAIL`/`FAILED`.
    TestFailed,
    /// npm's `npm ERR!` / `npm error` lines.
    Npm,
    /// A line starting with the word `ERROR`.
    ErrorLine,
}

impl Kind {
    fn is_cause(self) -> bool {
        matches!(
            self,
            Kind::CompilerError | Kind::Panic | Kind::Assertion | Kind::Exception
        )
    }
}

/// One line that carries a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Highlight {
    /// The stream it came from, once the engine named it (`stdout`,
    /// `stderr`; empty for one merged stream).
    pub stream: &'static str,
    /// 1-based, over the stream's whole output: the spill file's line.
    pub line: u64,
    /// The cleaned line, without colour and the blanks at its ends, at
    /// most [`MAX_TEXT_CHARS`] characters.
    pub text: String,
    pub kind: Kind,
    /// The rendered window shows the line whole (the fold kept it).
    pub shown: bool,
    /// Arrival order across the streams of a process.
    arrival: u64,
}

/// The highlights of one rank: the earliest, the latest, and a count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Tier {
    first: Vec<Highlight>,
    /// The latest one past `first`.
    last: Option<Highlight>,
}

impl Tier {
    fn add(&mut self, highlight: Highlight) {
        if self.first.len() < KEPT_PER_RANK {
            self.first.push(highlight);
        } else {
            self.last = Some(highlight);
        }
    }

    fn merge(&mut self, other: Tier) {
        let mut all = std::mem::take(&mut self.first);
        all.extend(other.first);
        all.extend(self.last.take());
        all.extend(other.last);
        all.sort_by_key(|h| h.arrival);
        if all.len() > KEPT_PER_RANK {
            self.last = all.pop();
            all.truncate(KEPT_PER_RANK);
        }
        self.first = all;
    }

    fn kept(&self) -> impl Iterator<Item = &Highlight> {
        self.first.iter().chain(self.last.as_ref())
    }

    /// At most `slots` of those `keep` accepts: the earliest, and the
    /// latest in the last slot when more are there than fit.
    fn pick(&self, slots: usize, keep: &impl Fn(&Highlight) -> bool) -> Vec<Highlight> {
        let mut all: Vec<&Highlight> = self.kept().filter(|h| keep(h)).collect();
        if all.len() > slots && slots > 0 {
            let latest = all.pop();
            all.truncate(slots - 1);
            all.extend(latest);
        }
        all.truncate(slots);
        all.into_iter().cloned().collect()
    }

    fn count(&self, keep: &impl Fn(&Highlight) -> bool) -> usize {
        self.kept().filter(|h| keep(h)).count()
    }
}

/// The highlight candidates of a stream (or of several, merged): bounded,
/// whatever the output's size. [`Found::select`] picks the ones shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    causes: Tier,
    verdicts: Tier,
}

impl Found {
    fn add(&mut self, highlight: Highlight) {
        if highlight.kind.is_cause() {
            self.causes.add(highlight);
        } else {
            self.verdicts.add(highlight);
        }
    }

    /// True when no line matched.
    pub fn is_empty(&self) -> bool {
        self.causes.first.is_empty() && self.verdicts.first.is_empty()
    }

    /// Names the stream of every candidate.
    pub fn tag(&mut self, stream: &'static str) {
        for tier in [&mut self.causes, &mut self.verdicts] {
            for highlight in tier.first.iter_mut().chain(tier.last.as_mut()) {
                highlight.stream = stream;
            }
        }
    }

    /// Marks each candidate shown or not: `left_out` says whether the
    /// window left a line out.
    pub fn mark_shown(&mut self, left_out: impl Fn(u64) -> bool) {
        for tier in [&mut self.causes, &mut self.verdicts] {
            for highlight in tier.first.iter_mut().chain(tier.last.as_mut()) {
                highlight.shown = !left_out(highlight.line);
            }
        }
    }

    /// The candidates of a command's two streams, each named. Merged
    /// output (`stderr` then empty) is shown as stdout: its lines are
    /// stdout's.
    pub fn of_streams(stdout: &Found, stderr: &Found) -> Found {
        let mut found = stdout.clone();
        found.tag("stdout");
        let mut from_stderr = stderr.clone();
        from_stderr.tag("stderr");
        found.merge(from_stderr);
        found
    }

    /// Adds another stream's candidates (or a later window's).
    pub fn merge(&mut self, other: Found) {
        self.causes.merge(other.causes);
        self.verdicts.merge(other.verdicts);
    }

    /// The highlights to show, by the rule of this module's doc: at most
    /// [`MAX_HIGHLIGHTS`], in arrival order.
    pub fn select(&self) -> Vec<Highlight> {
        self.select_where(|_| true)
    }

    /// The same choice among the candidates the fold left out.
    pub fn select_left_out(&self) -> Vec<Highlight> {
        self.select_where(|h| !h.shown)
    }

    fn select_where(&self, keep: impl Fn(&Highlight) -> bool) -> Vec<Highlight> {
        let verdicts = self.verdicts.count(&keep);
        let causes = self.causes.count(&keep);
        let cause_slots = causes.min(MAX_HIGHLIGHTS - verdicts.min(VERDICT_SLOTS));
        let verdict_slots = verdicts.min(MAX_HIGHLIGHTS - cause_slots);
        let mut chosen = self.causes.pick(cause_slots, &keep);
        chosen.extend(self.verdicts.pick(verdict_slots, &keep));
        chosen.sort_by_key(|h| h.arrival);
        chosen
    }
}

/// Where a line's text came from.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    /// The capture's cleaned, redacted text (colour possibly kept).
    Cleaned,
    /// Raw bytes of a skimmed flood: a matching line is cleaned, and its
    /// text redacted, before it is kept.
    Raw(Option<&'a Redactor>),
}

/// A line that tells how to read the next ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Follow {
    #[default]
    Nothing,
    /// After `Traceback (most recent call last):`: indented frames, then
    /// the exception.
    Traceback,
    /// After `panicked at …:`: the panic's message.
    PanicMessage,
}

/// Finds the highlights of one stream as its lines go by.
#[derive(Debug, Default)]
pub struct Detector {
    found: Found,
    /// The start of the unfinished line, at most [`CARRY_BYTES`].
    carry: Vec<u8>,
    /// A line is unfinished (`carry` holds its start).
    carrying: bool,
    /// The unfinished line was longer than `carry`.
    carry_cut: bool,
    follow: Follow,
}

impl Detector {
    pub fn new() -> Self {
        Self::default()
    }

    /// The candidates so far.
    pub fn found(&self) -> &Found {
        &self.found
    }

    /// The candidates so far; the next take starts empty.
    pub fn take_found(&mut self) -> Found {
        std::mem::take(&mut self.found)
    }

    /// Takes the next piece of a stream's text; `first_line` is the line
    /// number of its first byte (the unfinished line's, when one is
    /// carried).
    pub(crate) fn scan(&mut self, text: &[u8], first_line: u64, source: Source<'_>) {
        let mut at = 0;
        let mut line = first_line;
        if self.carrying {
            let Some(newline) = memchr::memchr(b'\n', text) else {
                self.carry_more(text);
                return;
            };
            self.carry_more(&text[..newline]);
            let carried = std::mem::take(&mut self.carry);
            let cut = self.carry_cut;
            self.line_done(&carried, line, source, cut);
            self.carry = carried;
            self.carry.clear();
            self.carrying = false;
            self.carry_cut = false;
            at = newline + 1;
            line += 1;
        }
        // Whole lines up to the last newline; the rest is carried.
        let end = match memchr::memrchr(b'\n', &text[at..]) {
            Some(last) => at + last + 1,
            None => at,
        };
        self.scan_lines(text, at, end, line, source);
        if end < text.len() {
            self.carrying = true;
            self.carry_more(&text[end..]);
        }
    }

    /// The stream ended: the unfinished line, numbered `line`, is final.
    pub(crate) fn finish(&mut self, line: u64, source: Source<'_>) {
        if self.carrying {
            let carried = std::mem::take(&mut self.carry);
            let cut = self.carry_cut;
            self.line_done(&carried, line, source, cut);
            self.carrying = false;
            self.carry_cut = false;
        }
        self.follow = Follow::Nothing;
    }

    fn carry_more(&mut self, piece: &[u8]) {
        let room = CARRY_BYTES - self.carry.len();
        if piece.len() > room {
            self.carry_cut = true;
        }
        self.carry
            .extend_from_slice(&piece[..piece.len().min(room)]);
    }

    /// Whole lines `text[start..end]` (`end` follows a newline), the first
    /// numbered `line`.
    fn scan_lines(&mut self, text: &[u8], start: usize, end: usize, line: u64, source: Source<'_>) {
        let mut at = start;
        let mut line = line;
        while at < end {
            if self.follow != Follow::Nothing {
                // The line after a traceback's start or a panic: read it.
                let stop = memchr::memchr(b'\n', &text[at..end]).map_or(end, |n| at + n);
                self.line_done(&text[at..stop], line, source, false);
                at = stop + 1;
                line += 1;
                continue;
            }
            let Some(hit) = SEARCH.find(text, at, end) else {
                return;
            };
            let line_start = memchr::memrchr(b'\n', &text[at..hit]).map_or(at, |n| at + n + 1);
            line += memchr::memchr_iter(b'\n', &text[at..line_start]).count() as u64;
            let stop = memchr::memchr(b'\n', &text[hit..end]).map_or(end, |n| hit + n);
            self.line_done(&text[line_start..stop], line, source, false);
            at = stop + 1;
            line += 1;
        }
    }

    /// Classifies one finished line (its start only, when `cut`).
    fn line_done(&mut self, raw: &[u8], line: u64, source: Source<'_>, cut: bool) {
        let cleaned: Cow<'_, [u8]> = match source {
            Source::Raw(_) if raw.iter().any(|&b| matches!(b, 0x1B | b'\r' | 0x08)) => {
                Cow::Owned(TerminalCleaner::clean(raw, false))
            }
            _ if memchr::memchr(0x1B, raw).is_some() => Cow::Owned(strip_sgr(raw)),
            _ => Cow::Borrowed(raw),
        };
        let text = trim(&cleaned);
        let follow = std::mem::take(&mut self.follow);
        let kind = match follow {
            Follow::Traceback if text.is_empty() => None,
            Follow::Traceback if cleaned.first().is_some_and(|&b| b == b' ' || b == b'\t') => {
                self.follow = Follow::Traceback;
                return;
            }
            Follow::Traceback if is_exception(text, true) => Some(Kind::Exception),
            Follow::PanicMessage if !text.is_empty() => Some(Kind::Panic),
            _ => match classify(text, &cleaned) {
                Some(Rule::TracebackStart) => {
                    self.follow = Follow::Traceback;
                    None
                }
                Some(Rule::Panic { message_follows }) => {
                    if message_follows {
                        self.follow = Follow::PanicMessage;
                    }
                    Some(Kind::Panic)
                }
                Some(Rule::Line(kind)) => Some(kind),
                None => None,
            },
        };
        let Some(kind) = kind else {
            return;
        };
        let redacted;
        let text = match source {
            Source::Raw(Some(redactor)) if cut => {
                redacted = redactor.redact_cut(text);
                redacted.as_slice()
            }
            Source::Raw(Some(redactor)) => {
                redacted = redactor.redact_bytes(text);
                redacted.as_slice()
            }
            _ => text,
        };
        self.found.add(Highlight {
            stream: "",
            line,
            text: capped_text(text, cut),
            kind,
            shown: false,
            arrival: ARRIVAL.fetch_add(1, Ordering::Relaxed),
        });
    }
}

/// What a line is, by the table of this module's doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    TracebackStart,
    Panic { message_follows: bool },
    Line(Kind),
}

/// Classifies a line: `text` without colour or the blanks at its ends,
/// `untrimmed` as it came (its indentation).
fn classify(text: &[u8], untrimmed: &[u8]) -> Option<Rule> {
    // Lines drawn in red: the first rule, once the colour change lands.
    if text.starts_with(b"Traceback (most recent call last):") {
        return Some(Rule::TracebackStart);
    }
    if contains(text, b"panicked at") {
        return Some(Rule::Panic {
            message_follows: text.ends_with(b":"),
        });
    }
    if has_word(text, b"FAIL")
        || has_word(text, b"FAILED")
        || text.starts_with(b"error: test failed")
    {
        return Some(Rule::Line(Kind::TestFailed));
    }
    if text.starts_with(b"npm ERR!") || text.starts_with(b"npm error") {
        return Some(Rule::Line(Kind::Npm));
    }
    if is_compiler_error(text) {
        return Some(Rule::Line(Kind::CompilerError));
    }
    if contains(text, b"AssertionError") {
        return Some(Rule::Line(Kind::Assertion));
    }
    let indented = untrimmed.first().is_some_and(u8::is_ascii_whitespace);
    if !indented && is_exception(text, false) {
        return Some(Rule::Line(Kind::Exception));
    }
    if text.starts_with(b"ERROR") && text.get(5).is_none_or(|&b| b == b' ' || b == b':') {
        return Some(Rule::Line(Kind::ErrorLine));
    }
    None
}

/// `error[E0308]: …`, `error: …`; `file:3:5: error: …`, `: fatal error:`;
/// `error TS2322: …`.
fn is_compiler_error(text: &[u8]) -> bool {
    if text.starts_with(b"error:") || text.starts_with(b"error[") {
        return true;
    }
    if contains(text, b": error:") || contains(text, b": fatal error:") {
        return true;
    }
    memchr::memmem::find_iter(text, b"error TS")
        .any(|at| text.get(at + 8).is_some_and(u8::is_ascii_digit))
}

/// `ValueError: …`, `json.decoder.JSONDecodeError: …`, `AssertionError
/// [ERR_ASSERTION]: …`: a dotted name, then `:`, ` [` or the end of the
/// line. Outside a traceback the name must end in `Error` or `Exception`;
/// after one, any name will do (`KeyboardInterrupt`, `SystemExit`, a
/// program's own exception class).
fn is_exception(text: &[u8], after_traceback: bool) -> bool {
    let name_end = text
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_' || b == b'.'))
        .unwrap_or(text.len());
    let (name, rest) = text.split_at(name_end);
    let starts_like_a_name = name
        .first()
        .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_');
    let named_as_one = name.ends_with(b"Error") || name.ends_with(b"Exception");
    starts_like_a_name
        && (after_traceback || named_as_one)
        && (rest.is_empty() || rest.starts_with(b":") || rest.starts_with(b" ["))
}

/// `word` in `text` with no letter, digit or `_` on either side.
fn has_word(text: &[u8], word: &[u8]) -> bool {
    let part_of_word = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    memchr::memmem::find_iter(text, word).any(|at| {
        let before = at.checked_sub(1).and_then(|i| text.get(i));
        let after = text.get(at + word.len());
        !before.is_some_and(part_of_word) && !after.is_some_and(part_of_word)
    })
}

fn contains(text: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(text, needle).is_some()
}

fn trim(text: &[u8]) -> &[u8] {
    let start = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    let end = text
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |last| last + 1);
    &text[start..end]
}

/// The text a reader sees: valid UTF-8 without control characters (a tab
/// stays), at most [`MAX_TEXT_CHARS`] characters, an ellipsis where it was
/// cut.
fn capped_text(text: &[u8], cut: bool) -> String {
    let mut text = String::from_utf8_lossy(text);
    if text.chars().any(|c| c.is_control() && c != '\t') {
        text = text
            .chars()
            .map(|c| {
                if c.is_control() && c != '\t' {
                    char::REPLACEMENT_CHARACTER
                } else {
                    c
                }
            })
            .collect::<String>()
            .into();
    }
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None if cut => format!("{text}…"),
        None => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams `text` through a detector in pieces of `chunk` bytes, as the
    /// capture would, and returns what it selects.
    fn detect_in_chunks(text: &[u8], chunk: usize, source: Source<'_>) -> Vec<(u64, Kind, String)> {
        let mut detector = Detector::new();
        let mut line = 1;
        for piece in text.chunks(chunk.max(1)) {
            detector.scan(piece, line, source);
            line += memchr::memchr_iter(b'\n', piece).count() as u64;
        }
        detector.finish(line, source);
        detector
            .found()
            .select()
            .into_iter()
            .map(|h| (h.line, h.kind, h.text))
            .collect()
    }

    fn detect(text: &str) -> Vec<(u64, Kind, String)> {
        detect_in_chunks(text.as_bytes(), text.len(), Source::Cleaned)
    }

    fn expected(lines: &[(u64, Kind, &str)]) -> Vec<(u64, Kind, String)> {
        lines
            .iter()
            .map(|(line, kind, text)| (*line, *kind, (*text).to_owned()))
            .collect()
    }

    /// `cargo build` of a crate with a type error (rustc 1.79).
    const RUSTC: &str = r#"   Compiling demo v0.1.0 (/home/user/demo)
error[E0308]: mismatched types
 --> src/main.rs:2:18
  |
2 |     let x: i32 = "five";
  |            ---   ^^^^^^ expected `i32`, found `&str`
  |            |
  |            expected due to this

For more information about this error, try `rustc --explain E0308`.
error: could not compile `demo` (bin "demo") due to 1 previous error
"#;

    #[test]
    fn rustc_error_lines_and_cargo_summary() {
        assert_eq!(
            detect(RUSTC),
            expected(&[
                (2, Kind::CompilerError, "error[E0308]: mismatched types"),
                (
                    11,
                    Kind::CompilerError,
                    r#"error: could not compile `demo` (bin "demo") due to 1 previous error"#
                ),
            ])
        );
    }

    /// gcc 12 on an undeclared variable, and the linker failing after it.
    const GCC: &str = "main.c: In function \u{2018}main\u{2019}:
main.c:4:5: error: \u{2018}y\u{2019} undeclared (first use in this function)
    4 |     y = 3;
      |     ^
main.c:4:5: note: each undeclared identifier is reported only once for each function it appears in
main.c:2:10: fatal error: missing.h: No such file or directory
collect2: error: ld returned 1 exit status
";

    #[test]
    fn gcc_and_clang_location_errors() {
        assert_eq!(
            detect(GCC),
            expected(&[
                (
                    2,
                    Kind::CompilerError,
                    "main.c:4:5: error: \u{2018}y\u{2019} undeclared (first use in this function)"
                ),
                (
                    6,
                    Kind::CompilerError,
                    "main.c:2:10: fatal error: missing.h: No such file or directory"
                ),
                (
                    7,
                    Kind::CompilerError,
                    "collect2: error: ld returned 1 exit status"
                ),
            ])
        );
    }

    /// `cargo test` with one failing test (Rust 1.79: the panic message on
    /// the line after `panicked at`).
    const CARGO_TEST: &str = "   Compiling adder v0.1.0 (/home/user/adder)
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.42s
     Running unittests src/lib.rs (target/debug/deps/adder-1b6a4b1c2d3e4f50)

running 2 tests
test tests::it_adds ... ok
test tests::it_subtracts ... FAILED

failures:

---- tests::it_subtracts stdout ----

thread 'tests::it_subtracts' panicked at src/lib.rs:17:9:
assertion `left == right` failed
  left: 1
 right: 2
note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace


failures:
    tests::it_subtracts

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s

error: test failed, to rerun pass `--lib`
";

    #[test]
    fn cargo_test_failures_and_the_panic_with_its_message() {
        assert_eq!(
            detect(CARGO_TEST),
            expected(&[
                (7, Kind::TestFailed, "test tests::it_subtracts ... FAILED"),
                (
                    13,
                    Kind::Panic,
                    "thread 'tests::it_subtracts' panicked at src/lib.rs:17:9:"
                ),
                (14, Kind::Panic, "assertion `left == right` failed"),
                (
                    23,
                    Kind::TestFailed,
                    "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s"
                ),
                (
                    25,
                    Kind::TestFailed,
                    "error: test failed, to rerun pass `--lib`"
                ),
            ])
        );
    }

    /// pytest 7.4 with one failing test: the `FAILURES` banner is no
    /// highlight, the assertion's location and the summary line are.
    const PYTEST: &str =
        "============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-7.4.0, pluggy-1.2.0
rootdir: /home/user/calc
collected 2 items

test_calc.py .F                                                          [100%]

=================================== FAILURES ===================================
___________________________________ test_add ___________________________________

    def test_add():
>       assert add(1, 2) == 4
E       assert 3 == 4
E        +  where 3 = add(1, 2)

test_calc.py:6: AssertionError
=========================== short test summary info ============================
FAILED test_calc.py::test_add - assert 3 == 4
========================= 1 failed, 1 passed in 0.02s ==========================
";

    #[test]
    fn pytest_assertion_and_summary() {
        assert_eq!(
            detect(PYTEST),
            expected(&[
                (16, Kind::Assertion, "test_calc.py:6: AssertionError"),
                (
                    18,
                    Kind::TestFailed,
                    "FAILED test_calc.py::test_add - assert 3 == 4"
                ),
            ])
        );
    }

    /// `npm test` running jest 29 with one failing test, under npm 8.
    const NPM_JEST: &str = "
> calc@1.0.0 test
> jest

 FAIL  ./sum.test.js
  \u{25cf} adds 1 + 2 to equal 3

    expect(received).toBe(expected) // Object.is equality

    Expected: 4
    Received: 3

      2 |
      3 | test('adds 1 + 2 to equal 3', () => {
    > 4 |   expect(sum(1, 2)).toBe(4);
        |                     ^
      5 | });
      6 |

      at Object.toBe (sum.test.js:4:21)

Test Suites: 1 failed, 1 total
Tests:       1 failed, 1 total
Snapshots:   0 total
Time:        0.312 s
Ran all test suites.
npm ERR! code 1
npm ERR! path /home/user/calc
npm ERR! command failed
npm ERR! command sh -c jest

npm ERR! A complete log of this run can be found in:
npm ERR!     /home/user/.npm/_logs/2024-05-02T10_11_12_345Z-debug-0.log
";

    #[test]
    fn jest_fail_and_npm_err_lines() {
        let found = detect(NPM_JEST);
        assert_eq!(
            found[0],
            (5, Kind::TestFailed, "FAIL  ./sum.test.js".to_owned())
        );
        assert_eq!(found[1], (27, Kind::Npm, "npm ERR! code 1".to_owned()));
        assert_eq!(found.len(), 7, "{found:?}");
        assert!(found.iter().skip(1).all(|(_, kind, _)| *kind == Kind::Npm));
        // npm 10 writes `npm error` instead.
        assert_eq!(
            detect("npm error code 1\nnpm error path /home/user/calc\n")[0],
            (1, Kind::Npm, "npm error code 1".to_owned())
        );
    }

    /// `go test` (Go 1.22) with one failing test.
    const GO_TEST: &str = "--- FAIL: TestAdd (0.00s)
    calc_test.go:9: Add(1, 2) = 4; want 3
FAIL
FAIL\texample.com/calc\t0.002s
FAIL
";

    #[test]
    fn go_test_fail_lines() {
        assert_eq!(
            detect(GO_TEST),
            expected(&[
                (1, Kind::TestFailed, "--- FAIL: TestAdd (0.00s)"),
                (3, Kind::TestFailed, "FAIL"),
                (4, Kind::TestFailed, "FAIL\texample.com/calc\t0.002s"),
                (5, Kind::TestFailed, "FAIL"),
            ])
        );
    }

    /// `tsc` 5.4, pretty (the default on a terminal) and plain.
    const TSC: &str =
        "src/index.ts:3:7 - error TS2322: Type 'string' is not assignable to type 'number'.

3 const n: number = \"three\";
        ~

src/util.ts(10,5): error TS2304: Cannot find name 'foo'.

Found 2 errors in 2 files.

Errors  Files
     1  src/index.ts:3
     1  src/util.ts:10
";

    #[test]
    fn tsc_errors_pretty_and_plain() {
        assert_eq!(
            detect(TSC),
            expected(&[
                (
                    1,
                    Kind::CompilerError,
                    "src/index.ts:3:7 - error TS2322: Type 'string' is not assignable to type 'number'."
                ),
                (
                    6,
                    Kind::CompilerError,
                    "src/util.ts(10,5): error TS2304: Cannot find name 'foo'."
                ),
            ])
        );
    }

    /// Python 3.11: an uncaught exception, then one of a program's own
    /// classes (any name ends a traceback).
    const PYTHON_TRACEBACK: &str = "loading config from /etc/app.toml
Traceback (most recent call last):
  File \"/home/user/app/main.py\", line 12, in <module>
    main()
  File \"/home/user/app/main.py\", line 8, in main
    port = int(config[\"port\"])
           ^^^^^^^^^^^^^^^^^^^
ValueError: invalid literal for int() with base 10: 'eighty'
";

    #[test]
    fn the_last_line_of_a_python_traceback() {
        assert_eq!(
            detect(PYTHON_TRACEBACK),
            expected(&[(
                8,
                Kind::Exception,
                "ValueError: invalid literal for int() with base 10: 'eighty'"
            )])
        );
        let own = "Traceback (most recent call last):
  File \"/srv/job.py\", line 3, in <module>
    raise app.errors.ConfigMissing(\"no port\")
app.errors.ConfigMissing: no port
";
        assert_eq!(
            detect(own),
            expected(&[(4, Kind::Exception, "app.errors.ConfigMissing: no port")])
        );
        let interrupted = "Traceback (most recent call last):
  File \"/srv/wait.py\", line 2, in <module>
    time.sleep(60)
KeyboardInterrupt
";
        assert_eq!(
            detect(interrupted),
            expected(&[(4, Kind::Exception, "KeyboardInterrupt")])
        );
    }

    #[test]
    fn node_errors_and_assertions() {
        let node = "/home/user/app/index.js:3
  return user.name;
              ^

TypeError: Cannot read properties of undefined (reading 'name')
    at greet (/home/user/app/index.js:3:15)
    at Object.<anonymous> (/home/user/app/index.js:6:1)

Node.js v20.12.2
";
        assert_eq!(
            detect(node),
            expected(&[(
                5,
                Kind::Exception,
                "TypeError: Cannot read properties of undefined (reading 'name')"
            )])
        );
        let assert = "node:assert:399\n    throw err;\n    ^\n\nAssertionError [ERR_ASSERTION]: Expected values to be strictly equal:\n";
        assert_eq!(detect(assert)[0].1, Kind::Assertion);
    }

    #[test]
    fn the_automaton_finds_what_teddy_finds() {
        let automaton = Search::Automaton(
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostFirst)
                .build(NEEDLES)
                .unwrap(),
        );
        let text = [
            RUSTC,
            GCC,
            CARGO_TEST,
            PYTEST,
            NPM_JEST,
            GO_TEST,
            TSC,
            PYTHON_TRACEBACK,
        ]
        .concat();
        let hits = |search: &Search| {
            let mut found = Vec::new();
            let mut at = 0;
            while let Some(hit) = search.find(text.as_bytes(), at, text.len()) {
                found.push(hit);
                at = hit + 1;
            }
            found
        };
        let fast = hits(&SEARCH);
        assert!(fast.len() > 20, "{fast:?}");
        assert_eq!(hits(&automaton), fast);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("ssse3") {
            assert!(
                matches!(*SEARCH, Search::Teddy(_)),
                "Teddy where the CPU has it"
            );
        }
    }

    #[test]
    fn ordinary_output_has_no_highlights() {
        let text = "=== FAILURES ===\nXFAIL test_x.py::test_flaky\nno errors found\nFound 0 errors.\nerror_handler.rs compiled\nError handling is described in docs/errors.md\n    ValueError: shown indented in a log\nERRORS_SEEN=0\n";
        assert_eq!(detect(text), Vec::new());
    }

    #[test]
    fn every_chunking_finds_the_same_lines() {
        let text = [RUSTC, CARGO_TEST, PYTHON_TRACEBACK, GO_TEST].concat();
        let whole = detect_in_chunks(text.as_bytes(), text.len(), Source::Cleaned);
        assert_eq!(whole.len(), 8, "{whole:?}");
        for chunk in [1, 2, 3, 7, 64, 333] {
            assert_eq!(
                detect_in_chunks(text.as_bytes(), chunk, Source::Cleaned),
                whole,
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn more_than_eight_keep_the_first_causes_the_last_one_and_two_verdicts() {
        let mut text = String::new();
        for i in 1..=30 {
            text.push_str(&format!("src/m{i}.rs:1:1: error: problem {i}\n"));
        }
        text.push_str("test a ... FAILED\ntest b ... FAILED\ntest c ... FAILED\n");
        let found = detect(&text);
        let lines: Vec<u64> = found.iter().map(|(line, _, _)| *line).collect();
        // Causes: lines 1-5 and the last (30); verdicts: the first (31)
        // and the last (33).
        assert_eq!(lines, [1, 2, 3, 4, 5, 30, 31, 33]);
    }

    #[test]
    fn streams_merge_in_arrival_order_within_the_cap() {
        let mut out = Detector::new();
        let mut err = Detector::new();
        err.scan(b"error: first\n", 1, Source::Cleaned);
        out.scan(b"ok\ntest x ... FAILED\n", 1, Source::Cleaned);
        err.scan(b"error: second\n", 2, Source::Cleaned);
        let found = Found::of_streams(out.found(), err.found()).select();
        let seen: Vec<(&str, u64)> = found.iter().map(|h| (h.stream, h.line)).collect();
        assert_eq!(seen, [("stderr", 1), ("stdout", 2), ("stderr", 2)]);
    }

    #[test]
    fn raw_bytes_are_cleaned_and_redacted_before_they_are_kept() {
        let raw = b"\x1b[0m\x1b[1m\x1b[38;5;9merror[E0308]\x1b[0m\x1b[0m\x1b[1m: mismatched types\x1b[0m\r\nprogress 10%\rprogress 100%\r\nerror: token tok-123456 refused\r\n";
        let redactor = Redactor::new(vec![("TOKEN".into(), b"tok-123456".to_vec())]);
        assert_eq!(
            detect_in_chunks(raw, 5, Source::Raw(Some(&redactor))),
            expected(&[
                (1, Kind::CompilerError, "error[E0308]: mismatched types"),
                (
                    3,
                    Kind::CompilerError,
                    "error: token [REDACTED:TOKEN] refused"
                ),
            ])
        );
    }

    #[test]
    fn long_lines_are_capped_and_memory_stays_bounded() {
        let long = format!("error: {}\n", "x".repeat(5000));
        let found = detect(&long);
        assert_eq!(found[0].2.chars().count(), MAX_TEXT_CHARS + 1);
        assert!(found[0].2.ends_with('…'));
        // A line that never ends: the detector keeps only its start.
        let mut detector = Detector::new();
        detector.scan(b"error: ", 1, Source::Cleaned);
        for _ in 0..1000 {
            detector.scan(&[b'y'; 1024], 1, Source::Cleaned);
        }
        assert!(detector.carry.len() <= CARRY_BYTES);
        detector.finish(1, Source::Cleaned);
        assert_eq!(detector.found().select()[0].line, 1);
    }

    #[test]
    fn control_characters_of_binary_output_do_not_reach_the_text() {
        assert_eq!(
            detect("error: bad\u{0}\u{7}byte\tthere\n"),
            expected(&[(
                1,
                Kind::CompilerError,
                "error: bad\u{fffd}\u{fffd}byte\tthere"
            )])
        );
    }

    #[test]
    fn a_secret_cut_with_a_long_raw_line_never_shows_in_part() {
        let redactor = Redactor::new(vec![("KEY".into(), b"abcdef0123456789".to_vec())]);
        let mut line = b"error: ".to_vec();
        line.resize(CARRY_BYTES - 6, b'.');
        line.extend_from_slice(b"abcdef0123456789 and more\n");
        let mut detector = Detector::new();
        let source = Source::Raw(Some(&redactor));
        // In two pieces: the line is carried, and cut inside the secret.
        let (a, b) = line.split_at(10);
        detector.scan(a, 1, source);
        detector.scan(b, 1, source);
        let text = &detector.found().select()[0].text;
        assert!(!text.contains("abcdef"), "{text}");
    }
}
