//! One terminal line as a person would see it: `\r`, backspace, cursor
//! columns and erase-in-line applied, and the states of a line that was
//! redrawn many times (a progress bar) remembered in a bounded history so
//! that it can be folded into one line (`Building 40% → 60% → Done`).
//!
//! The text is built from whole characters, so it is always valid UTF-8;
//! with colour kept, SGR sequences sit in it as zero-width runs. Blanks at
//! the end of a line (programs pad rows with them) are not part of what it
//! shows or passes on.
//!
//! A row of a full screen does not fold its redraws (it is what is on it
//! now), and remembers what a reader was last shown of it.

use std::collections::VecDeque;

/// Past this many bytes an unfinished line is passed on without its end:
/// memory stays bounded even for output that never prints a newline.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// How many of the latest redraw states a folded line shows.
const RECENT_STATES: usize = 3;

/// Separates the states of a folded progress line.
pub const STATE_SEPARATOR: &str = " → ";

/// Stands for states left out of a folded progress line.
pub const ELIDED_STATES: &str = "…";

/// A common prefix shorter than this is not worth removing from states.
const MIN_SHARED_PREFIX: usize = 4;

/// The line under the cursor.
#[derive(Debug, Default)]
pub struct ScreenLine {
    text: Vec<u8>,
    /// Byte offset of the cursor in `text` (always on a char boundary).
    cursor: usize,
    /// A `\r` (or a move to column 0) happened and nothing was written since.
    redraw_pending: bool,
    history: History,
    keep_color: bool,
    /// A row the cursor moved back up into whose text was already passed
    /// on: it only counts again once something is drawn on it.
    phantom: bool,
    /// A line of its own, not a row of a screen: its redraws are folded.
    folds: bool,
    /// A hash of the text a reader was last shown of this row.
    shown: Option<u64>,
    /// Blanks at the end of a committed line are kept (a protocol that
    /// must pass output on byte for byte).
    keep_blanks: bool,
}

/// Earlier states of a redrawn line: the first, the latest few, and how
/// many were left out in between.
#[derive(Debug, Default)]
struct History {
    first: Option<Vec<u8>>,
    recent: VecDeque<Vec<u8>>,
    elided: u64,
}

impl History {
    fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    fn last(&self) -> Option<&[u8]> {
        self.recent
            .back()
            .or(self.first.as_ref())
            .map(Vec::as_slice)
    }

    fn record(&mut self, state: &[u8]) {
        let state = trim_trailing_blanks(state);
        if state.is_empty() || self.last() == Some(state) {
            return;
        }
        if self.first.is_none() {
            self.first = Some(state.to_vec());
            return;
        }
        if self.recent.len() == RECENT_STATES {
            self.recent.pop_front();
            self.elided += 1;
        }
        self.recent.push_back(state.to_vec());
    }

    fn clear(&mut self) {
        // Most lines were never redrawn: nothing to drop then (this runs
        // once per line).
        if !self.is_empty() {
            *self = Self::default();
        }
    }
}

impl ScreenLine {
    pub fn new(keep_color: bool) -> Self {
        Self {
            keep_color,
            folds: true,
            ..Self::default()
        }
    }

    /// The same line, keeping the blanks at the end of what it commits.
    pub fn keeping_blanks(mut self, keep: bool) -> Self {
        self.keep_blanks = keep;
        self
    }

    /// A row of a full screen: redraws replace it, without a history.
    pub fn screen_row(keep_color: bool) -> Self {
        Self {
            keep_color,
            ..Self::default()
        }
    }

    /// A row standing for a line that was already passed on (the cursor
    /// moved up into it).
    pub fn phantom(keep_color: bool) -> Self {
        Self {
            keep_color,
            phantom: true,
            ..Self::default()
        }
    }

    /// The line became a row of a full screen: its redraws stop folding,
    /// and those so far are forgotten.
    pub fn stop_folding(&mut self) {
        self.folds = false;
        self.history.clear();
    }

    /// The line as a reader sees it: without the blanks at its end, except
    /// those before the cursor (a prompt's `>>> `).
    pub fn visible(&self) -> &[u8] {
        let end = trim_trailing_blanks(&self.text).len().max(self.cursor);
        &self.text[..end.min(self.text.len())]
    }

    /// [`Self::trimmed`], or nothing for a phantom row.
    pub fn trimmed_if_live(&self) -> Option<&[u8]> {
        (!self.is_phantom()).then(|| self.trimmed())
    }

    /// The line without the blanks at its end (a row the cursor left).
    pub fn trimmed(&self) -> &[u8] {
        trim_trailing_blanks(&self.text)
    }

    fn visible_hash(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        self.trimmed().hash(&mut hasher);
        hasher.finish()
    }

    /// Remembers the row as shown; true when it changed since it last was.
    pub fn mark_shown(&mut self) -> bool {
        let hash = Some(self.visible_hash());
        let changed = self.shown != hash;
        self.shown = hash;
        changed
    }

    /// True when a reader was shown the row as it stands now.
    pub fn is_shown(&self) -> bool {
        self.shown.is_some() && self.shown == Some(self.visible_hash())
    }

    /// True for a row that was already passed on and not drawn on since.
    pub fn is_phantom(&self) -> bool {
        self.phantom && self.is_blank()
    }

    /// The line as it stands now (its current state only).
    pub fn current(&self) -> &[u8] {
        &self.text
    }

    /// True when nothing is on the line and nothing was drawn on it.
    pub fn is_blank(&self) -> bool {
        self.text.is_empty() && self.history.is_empty()
    }

    /// True when the line grew too long to hold back any longer.
    pub fn is_overlong(&self) -> bool {
        self.text.len() >= MAX_LINE_BYTES && self.cursor == self.text.len()
    }

    /// Writes a run of characters (no controls) at the cursor.
    #[inline]
    pub fn print_str(&mut self, text: &str) {
        if self.redraw_pending && !text.is_empty() {
            self.redraw_pending = false;
            if self.folds {
                self.history.record(&self.text);
            }
        }
        let overlap = (self.text.len() - self.cursor).min(text.len());
        if self.cursor == self.text.len() {
            self.phantom = false;
            self.text.extend_from_slice(text.as_bytes());
            self.cursor = self.text.len();
        } else if !self.keep_color
            && text.is_ascii()
            && self.text[self.cursor..self.cursor + overlap].is_ascii()
        {
            // ASCII over ASCII: one cell per byte, overwrite in place.
            self.phantom = false;
            let (over, beyond) = text.as_bytes().split_at(overlap);
            self.text[self.cursor..self.cursor + overlap].copy_from_slice(over);
            self.text.extend_from_slice(beyond);
            self.cursor += text.len();
        } else {
            for c in text.chars() {
                self.print(c);
            }
        }
    }

    /// Writes one character at the cursor (appending or overwriting).
    #[inline]
    pub fn print(&mut self, c: char) {
        self.phantom = false;
        if self.redraw_pending {
            self.redraw_pending = false;
            if self.folds {
                self.history.record(&self.text);
            }
        }
        if self.cursor == self.text.len() {
            push_char(&mut self.text, c);
            self.cursor = self.text.len();
            return;
        }
        if self.keep_color {
            self.cursor = skip_sgr(&self.text, self.cursor);
            if self.cursor == self.text.len() {
                push_char(&mut self.text, c);
                self.cursor = self.text.len();
                return;
            }
        }
        let old_width = char_width_at(&self.text, self.cursor);
        let mut buf = [0_u8; 4];
        let new = c.encode_utf8(&mut buf).as_bytes();
        if old_width == new.len() {
            self.text[self.cursor..self.cursor + old_width].copy_from_slice(new);
        } else {
            self.text
                .splice(self.cursor..self.cursor + old_width, new.iter().copied());
        }
        self.cursor += new.len();
    }

    /// `\r`: back to column 0; what is printed next redraws the line.
    pub fn carriage_return(&mut self) {
        self.cursor = 0;
        self.redraw_pending = !self.text.is_empty();
    }

    /// Backspace: one character to the left, nothing erased.
    pub fn backspace(&mut self) {
        if self.cursor == 0 {
            return;
        }
        let mut at = self.cursor - 1;
        while at > 0 && is_continuation(self.text[at]) {
            at -= 1;
        }
        self.cursor = at;
    }

    /// Moves the cursor `n` columns right, padding with blanks past the end.
    pub fn cursor_forward(&mut self, n: usize) {
        for _ in 0..n {
            if self.cursor == self.text.len() {
                self.text.push(b' ');
                self.cursor += 1;
            } else {
                self.cursor += char_width_at(&self.text, self.cursor);
            }
        }
    }

    /// Moves the cursor `n` columns left.
    pub fn cursor_back(&mut self, n: usize) {
        for _ in 0..n {
            self.backspace();
        }
    }

    /// Moves the cursor to 0-based `column`; column 0 is a redraw like `\r`.
    pub fn cursor_to_column(&mut self, column: usize) {
        self.carriage_return();
        if column > 0 {
            self.redraw_pending = false;
            self.cursor_forward(column);
        }
    }

    /// Erase in line (`CSI n K`): 0 = cursor to end, 1 = start to cursor,
    /// 2 = all. Erasing from column 0 to the end throws the line away, with
    /// its history: what was drawn there was transient (a status line).
    pub fn erase(&mut self, mode: u16) {
        match mode {
            0 => {
                self.text.truncate(self.cursor);
                if self.cursor == 0 {
                    self.discard();
                }
            }
            1 => {
                let under_cursor = self.cursor < self.text.len();
                let end = if under_cursor {
                    self.cursor + char_width_at(&self.text, self.cursor)
                } else {
                    self.cursor
                };
                let blanks =
                    std::str::from_utf8(&self.text[..end]).map_or(end, |s| s.chars().count());
                self.text.splice(..end, std::iter::repeat_n(b' ', blanks));
                // The cursor stays on its (now blank) cell.
                self.cursor = blanks.saturating_sub(usize::from(under_cursor));
            }
            _ => {
                let column = std::str::from_utf8(&self.text[..self.cursor])
                    .map_or(self.cursor, |s| s.chars().count());
                self.text.clear();
                self.discard();
                self.cursor = 0;
                self.cursor_forward(column);
            }
        }
    }

    /// Inserts an SGR sequence (kept colour) at the cursor, zero-width.
    pub fn insert_sgr(&mut self, sequence: &[u8]) {
        self.text
            .splice(self.cursor..self.cursor, sequence.iter().copied());
        self.cursor += sequence.len();
    }

    /// Appends the line as it should be read (a redrawn line folded into
    /// its states) to `out`, followed by `\n` when `newline`, and starts a
    /// fresh line.
    pub fn commit(&mut self, out: &mut Vec<u8>, newline: bool) {
        if self.history.is_empty() {
            if self.keep_blanks && self.folds {
                out.extend_from_slice(&self.text);
            } else {
                out.extend_from_slice(trim_trailing_blanks(&self.text));
            }
        } else {
            self.history.record(&self.text);
            self.write_folded(out);
        }
        if newline {
            out.push(b'\n');
        }
        self.text.clear();
        self.history.clear();
        self.cursor = 0;
        self.redraw_pending = false;
        self.shown = None;
    }

    fn discard(&mut self) {
        self.history.clear();
        self.redraw_pending = false;
    }

    fn write_folded(&self, out: &mut Vec<u8>) {
        let Some(first) = &self.history.first else {
            return;
        };
        out.extend_from_slice(first);
        if self.history.elided > 0 {
            out.extend_from_slice(STATE_SEPARATOR.as_bytes());
            out.extend_from_slice(ELIDED_STATES.as_bytes());
        }
        let prefix = shared_prefix(first, &self.history.recent);
        for state in &self.history.recent {
            out.extend_from_slice(STATE_SEPARATOR.as_bytes());
            let rest = &state[prefix.min(state.len())..];
            out.extend_from_slice(if rest.is_empty() { state } else { rest });
        }
    }
}

/// The length of the prefix (ending after a blank) that `first` shares with
/// every later state, or 0 when it is too short to be worth removing.
fn shared_prefix(first: &[u8], later: &VecDeque<Vec<u8>>) -> usize {
    let mut common = first.len();
    for state in later {
        common = common.min(
            first
                .iter()
                .zip(state.iter())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    let cut = first[..common]
        .iter()
        .rposition(|&b| b == b' ')
        .map_or(0, |space| space + 1);
    if cut >= MIN_SHARED_PREFIX && first[..cut].iter().any(|b| !b.is_ascii_whitespace()) {
        cut
    } else {
        0
    }
}

fn trim_trailing_blanks(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |last| last + 1);
    &bytes[..end]
}

#[inline]
fn push_char(text: &mut Vec<u8>, c: char) {
    if c.is_ascii() {
        text.push(c as u8);
    } else {
        let mut buf = [0_u8; 4];
        text.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// Bytes of the character starting at `at` (1 for anything unexpected).
fn char_width_at(text: &[u8], at: usize) -> usize {
    let width = match text[at] {
        0xF0..=0xF7 => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    };
    width.min(text.len() - at)
}

/// Skips SGR sequences (zero-width) starting at `at`.
fn skip_sgr(text: &[u8], mut at: usize) -> usize {
    while at < text.len() && text[at] == 0x1B {
        match text[at..].iter().position(|&b| b == b'm') {
            Some(end) => at += end + 1,
            None => return text.len(),
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn committed(line: &mut ScreenLine) -> String {
        let mut out = Vec::new();
        line.commit(&mut out, false);
        String::from_utf8(out).unwrap()
    }

    fn print(line: &mut ScreenLine, text: &str) {
        for c in text.chars() {
            line.print(c);
        }
    }

    #[test]
    fn carriage_return_overwrites_like_a_terminal() {
        let mut line = ScreenLine::new(false);
        print(&mut line, "Downloading 100 files");
        line.carriage_return();
        print(&mut line, "Done");
        assert_eq!(
            committed(&mut line),
            "Downloading 100 files → Doneloading 100 files"
        );
    }

    #[test]
    fn erase_after_carriage_return_drops_the_transient_status() {
        let mut line = ScreenLine::new(false);
        print(&mut line, "Building [=>  ] 1/4");
        line.carriage_return();
        print(&mut line, "Building [==> ] 2/4");
        line.carriage_return();
        line.erase(0);
        print(&mut line, "   Compiling foo v1.0");
        assert_eq!(committed(&mut line), "   Compiling foo v1.0");
    }

    #[test]
    fn a_progress_line_folds_into_its_first_and_latest_states() {
        let mut line = ScreenLine::new(false);
        print(&mut line, "Building 0%");
        for pct in (10..=100).step_by(10) {
            line.carriage_return();
            print(&mut line, &format!("Building {pct}%"));
        }
        line.carriage_return();
        print(&mut line, "Building Done");
        assert_eq!(committed(&mut line), "Building 0% → … → 90% → 100% → Done");
    }

    #[test]
    fn identical_redraws_are_one_state() {
        let mut line = ScreenLine::new(false);
        for _ in 0..5 {
            print(&mut line, "waiting");
            line.carriage_return();
        }
        print(&mut line, "waiting");
        assert_eq!(committed(&mut line), "waiting");
    }

    #[test]
    fn backspace_moves_left_and_the_next_char_overwrites() {
        let mut line = ScreenLine::new(false);
        print(&mut line, "héllo");
        line.backspace();
        line.backspace();
        print(&mut line, "p!");
        assert_eq!(committed(&mut line), "hélp!");
    }

    #[test]
    fn erase_to_start_blanks_up_to_and_including_the_cursor() {
        let mut line = ScreenLine::new(false);
        print(&mut line, "abcdef");
        line.cursor_to_column(2);
        line.erase(1);
        print(&mut line, "C");
        assert_eq!(committed(&mut line), "  Cdef");
    }

    #[test]
    fn cursor_forward_past_the_end_pads_with_blanks() {
        let mut line = ScreenLine::new(false);
        print(&mut line, "a");
        line.cursor_forward(3);
        print(&mut line, "b");
        assert_eq!(committed(&mut line), "a   b");
    }

    #[test]
    fn kept_colour_is_zero_width_when_overwriting() {
        let mut line = ScreenLine::new(true);
        line.insert_sgr(b"\x1b[1m");
        print(&mut line, "ab");
        line.carriage_return();
        print(&mut line, "X");
        assert_eq!(committed(&mut line), "\x1b[1mab → \x1b[1mXb");
    }

    #[test]
    fn an_overlong_line_is_reported_once_the_cursor_is_at_its_end() {
        let mut line = ScreenLine::new(false);
        print(&mut line, &"x".repeat(MAX_LINE_BYTES));
        assert!(line.is_overlong());
        line.carriage_return();
        assert!(!line.is_overlong());
    }
}
