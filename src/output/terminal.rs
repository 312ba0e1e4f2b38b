//! Terminal clean-up: a real escape-sequence parser (`vte`) turns what a
//! program drew on a terminal into the text a person would read.
//!
//! Cursor movement off the line, clear-screen, OSC (titles, hyperlink
//! targets: the link text stays), DCS and other escapes are dropped; `\r`,
//! backspace, column moves and erase-in-line are applied to the current
//! line ([`ScreenLine`]); a line redrawn many times is folded into one; SGR
//! colour is kept only when asked. `\r\n` becomes `\n`.
//!
//! Streaming: finished lines are appended to [`TerminalCleaner::committed`]
//! as they complete; the unfinished last line stays [`TerminalCleaner::pending`]
//! because a later `\r` may still redraw it.
//!
//! Multi-line redraws (a cursor moved up: npm, docker, multi-bar progress,
//! full-screen redraws at `CSI H`) switch the cleaner to screen mode: from
//! then on the last [`MAX_REGION_ROWS`] rows stay live and are redrawn in
//! place, and a row is passed on only when it scrolls off the top of that
//! region or the stream ends. Rows drawn before the switch were already
//! passed on; those the program draws again appear once more, in their
//! final state, so the repetition is bounded by the region.
//!
//! Not modelled: scroll regions (`CSI r`) and saved cursors (`ESC 7/8`).
//! Absolute rows count from the top of the live region, so a status line
//! pinned to the bottom of the screen (apt's `Progress: [ 40%]`) keeps its
//! text but can land among the log lines.

use std::borrow::Cow;
use std::collections::VecDeque;

use vte::{Params, Parser, Perform};

use super::line::ScreenLine;

/// Rows kept live in screen mode (a tall terminal).
pub const MAX_REGION_ROWS: usize = 64;

/// Streams raw terminal output in, cleaned lines out.
pub struct TerminalCleaner {
    parser: Parser,
    screen: Screen,
    /// The parser is in its ground state with nothing buffered, so plain
    /// text can bypass it.
    ground: bool,
    /// The start of a character cut off by the end of the last push. Held
    /// here rather than in the parser: vte 0.15 can swallow the byte after
    /// a character completed across two pushes.
    carry: Vec<u8>,
}

impl std::fmt::Debug for TerminalCleaner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalCleaner")
            .field("committed", &self.screen.committed.len())
            .field("pending", &self.screen.line.current().len())
            .field("screen_mode", &self.screen.screen_mode)
            .finish()
    }
}

/// What the parser did last, to know when it is back in its ground state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastEvent {
    Other,
    /// Printed this ASCII character (only done in the ground state).
    PrintedAscii(u8),
    /// Dispatched an escape or CSI sequence (back to the ground state).
    Dispatched,
}

struct Screen {
    last_event: LastEvent,
    /// The row under the cursor.
    line: ScreenLine,
    /// Screen mode: live rows above the cursor row, top first.
    above: VecDeque<ScreenLine>,
    /// Screen mode: live rows below the cursor row, nearest first.
    below: VecDeque<ScreenLine>,
    screen_mode: bool,
    committed: Vec<u8>,
    keep_color: bool,
}

impl TerminalCleaner {
    pub fn new(keep_color: bool) -> Self {
        Self {
            parser: Parser::new(),
            ground: true,
            carry: Vec::new(),
            screen: Screen {
                last_event: LastEvent::Other,
                line: ScreenLine::new(keep_color),
                above: VecDeque::new(),
                below: VecDeque::new(),
                screen_mode: false,
                committed: Vec::new(),
                keep_color,
            },
        }
    }

    /// Cleans everything at once (a finished capture, a test, a benchmark).
    pub fn clean(bytes: &[u8], keep_color: bool) -> Vec<u8> {
        let mut cleaner = Self::new(keep_color);
        cleaner.push(bytes);
        cleaner.finish();
        std::mem::take(&mut cleaner.screen.committed)
    }

    /// Feeds the next chunk of raw output.
    ///
    /// In the parser's ground state, plain text (valid UTF-8 without ESC
    /// or C1 controls) and simple CSI sequences (digits and `;`) are handled
    /// directly, exactly as the parser would dispatch them (a property test
    /// holds the two paths equal); everything else goes through `vte`, a
    /// sequence at a time, until a printed ASCII character or a dispatched
    /// sequence proves it is back in the ground state.
    pub fn push(&mut self, bytes: &[u8]) {
        let joined;
        let bytes = if self.carry.is_empty() {
            bytes
        } else {
            joined = [std::mem::take(&mut self.carry).as_slice(), bytes].concat();
            joined.as_slice()
        };
        // Hold back a trailing cut character (and cut-looking bytes before
        // it, which only the next bytes can prove invalid), at most 8 bytes.
        let mut complete = bytes.len();
        while complete > 0 && bytes.len() - complete < 8 {
            match incomplete_char_len(&bytes[..complete]) {
                0 => break,
                cut => complete -= cut,
            }
        }
        self.carry.extend_from_slice(&bytes[complete..]);
        let mut rest = &bytes[..complete];
        while !rest.is_empty() {
            if self.ground {
                let taken = self.screen.take_plain(rest);
                rest = &rest[taken..];
                if rest.is_empty() {
                    break;
                }
                if let Some(len) = self.screen.take_simple_csi(rest) {
                    rest = &rest[len..];
                    continue;
                }
                self.ground = false;
            }
            // Feed the parser up to the next byte that can end a sequence or
            // be printed as ASCII; that byte alone shows whether the parser
            // is back in its ground state.
            let mut fed = 0;
            while fed < rest.len() {
                let end = rest[fed + 1..]
                    .iter()
                    .position(|b| (0x40..=0x7E).contains(b))
                    .map_or(rest.len(), |at| fed + 1 + at + 1);
                self.parser.advance(&mut self.screen, &rest[fed..end - 1]);
                let last = rest[end - 1];
                self.screen.last_event = LastEvent::Other;
                self.parser.advance(&mut self.screen, &rest[end - 1..end]);
                fed = end;
                let printable = (0x20..=0x7E).contains(&last);
                if (printable && self.screen.last_event == LastEvent::PrintedAscii(last))
                    || (self.screen.last_event == LastEvent::Dispatched && last.is_ascii())
                {
                    self.ground = true;
                    break;
                }
            }
            rest = &rest[fed..];
        }
    }

    /// Feeds everything through the parser, without the plain-text fast
    /// path: the reference the fast path is tested against.
    #[cfg(test)]
    fn push_through_parser(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.screen, bytes);
    }

    /// Ends the stream: the unfinished line is committed as it stands.
    pub fn finish(&mut self) {
        // A character or an escape sequence cut off by the end of the
        // stream is dropped.
        let carry = std::mem::take(&mut self.carry);
        self.parser.advance(&mut self.screen, &carry);
        self.parser = Parser::new();
        self.ground = true;
        self.screen.flush_all();
    }

    /// Cleaned text that is final (whole lines, or the start of a line too
    /// long to hold back), not yet cleared.
    pub fn committed(&self) -> &[u8] {
        &self.screen.committed
    }

    /// Forgets the committed text once the caller has taken it.
    pub fn clear_committed(&mut self) {
        self.screen.committed.clear();
    }

    /// The unfinished output as it stands now: the last line (a prompt, a
    /// progress bar) or, in screen mode, the live rows.
    pub fn pending(&self) -> Cow<'_, [u8]> {
        let screen = &self.screen;
        if !screen.screen_mode {
            return Cow::Borrowed(screen.line.current());
        }
        let mut out = Vec::new();
        let rows = screen
            .above
            .iter()
            .chain(std::iter::once(&screen.line))
            .chain(screen.below.iter())
            .filter(|row| !row.is_phantom());
        for (i, row) in rows.enumerate() {
            if i > 0 {
                out.push(b'\n');
            }
            out.extend_from_slice(row.current());
        }
        while out.last() == Some(&b'\n') {
            out.pop();
        }
        Cow::Owned(out)
    }

    /// True once a multi-line redraw was seen.
    pub fn is_screen_mode(&self) -> bool {
        self.screen.screen_mode
    }
}

impl Screen {
    /// A CSI sequence other than SGR, with the first value of each param.
    fn csi(&mut self, params: &[u16], action: char) {
        let raw = |i: usize| params.get(i).copied().unwrap_or(0);
        let count = || usize::from(raw(0).max(1));
        match action {
            'K' => self.line.erase(raw(0)),
            'C' | 'a' => self.line.cursor_forward(count()),
            'D' => self.line.cursor_back(count()),
            'G' | '`' => self.line.cursor_to_column(count() - 1),
            'A' => self.cursor_up(count()),
            'F' => {
                self.cursor_up(count());
                self.line.carriage_return();
            }
            'B' | 'e' => self.cursor_down(count()),
            'E' => {
                self.cursor_down(count());
                self.line.carriage_return();
            }
            'H' | 'f' => {
                let row = raw(0).max(1);
                let column = raw(1).max(1);
                self.cursor_position(usize::from(row - 1), usize::from(column - 1));
            }
            'J' => self.erase_display(raw(0)),
            // Scrolling regions, modes, reports: dropped.
            _ => {}
        }
    }

    /// Handles a simple CSI sequence (`ESC [` digits and `;`, a final
    /// byte) at the start of `bytes` exactly as the parser would, without
    /// it; returns its length, or `None` to leave it to the parser.
    fn take_simple_csi(&mut self, bytes: &[u8]) -> Option<usize> {
        let (len, values, count, action) = simple_csi(bytes)?;
        let params = &values[..count];
        if action == b'm' {
            if self.keep_color {
                let groups = params.iter().map(std::slice::from_ref);
                self.line.insert_sgr(&sgr_sequence(groups));
            }
        } else {
            self.csi(params, char::from(action));
        }
        Some(len)
    }

    /// Handles the longest prefix of `bytes` that is plain text (valid
    /// UTF-8, no ESC, no C1 control) the way the parser would in its ground
    /// state; returns how many bytes it took.
    fn take_plain(&mut self, bytes: &[u8]) -> usize {
        let candidate = &bytes[..memchr::memchr(0x1B, bytes).unwrap_or(bytes.len())];
        let valid = match std::str::from_utf8(candidate) {
            Ok(text) => text,
            Err(error) => {
                let (valid, _) = candidate.split_at(error.valid_up_to());
                std::str::from_utf8(valid).unwrap_or_default()
            }
        };
        let text = match first_c1_control(valid.as_bytes()) {
            Some(c1) => &valid[..c1],
            None => valid,
        };
        let bytes = text.as_bytes();
        let mut at = 0;
        if !self.screen_mode && self.line.is_blank() {
            // Whole plain lines go straight through: nothing can redraw them.
            let simple = first_control_but_newline_or_tab(bytes).unwrap_or(bytes.len());
            if let Some(last_newline) = memchr::memrchr(b'\n', &bytes[..simple]) {
                self.committed.extend_from_slice(&bytes[..=last_newline]);
                at = last_newline + 1;
            }
        }
        while at < bytes.len() {
            let run = first_control(&bytes[at..]).map_or(bytes.len(), |offset| at + offset);
            if run > at {
                // Controls are ASCII, so `at..run` holds whole characters.
                self.line.print_str(&text[at..run]);
                if self.line.is_overlong() {
                    self.flush_overlong();
                }
                at = run;
            }
            if let Some(&control) = bytes.get(at) {
                self.execute(control);
                at += 1;
            }
        }
        text.len()
    }

    fn rows(&self) -> usize {
        self.above.len() + 1 + self.below.len()
    }

    fn new_row(&self) -> ScreenLine {
        ScreenLine::new(self.keep_color)
    }

    /// Passes on a row that left the live region (or the stream ended).
    fn commit_row(&mut self, mut row: ScreenLine, newline: bool) {
        if !row.is_phantom() {
            row.commit(&mut self.committed, newline);
        }
    }

    /// `\n`: the next row; in line mode the finished line is passed on.
    fn line_feed(&mut self) {
        if !self.screen_mode {
            self.line.commit(&mut self.committed, true);
            return;
        }
        let next = self.below.pop_front().unwrap_or_else(|| self.new_row());
        let previous = std::mem::replace(&mut self.line, next);
        self.above.push_back(previous);
        self.line.carriage_return();
        while self.rows() > MAX_REGION_ROWS {
            if let Some(top) = self.above.pop_front() {
                self.commit_row(top, true);
            }
        }
    }

    /// Moves the cursor `n` rows up, entering screen mode.
    fn cursor_up(&mut self, n: usize) {
        self.screen_mode = true;
        for _ in 0..n {
            let upper = match self.above.pop_back() {
                Some(row) => row,
                None if self.rows() < MAX_REGION_ROWS => ScreenLine::phantom(self.keep_color),
                None => break,
            };
            let previous = std::mem::replace(&mut self.line, upper);
            self.below.push_front(previous);
        }
    }

    /// Moves the cursor `n` rows down (within or past the live rows).
    fn cursor_down(&mut self, n: usize) {
        for _ in 0..n {
            if self.screen_mode {
                self.line_feed();
            }
        }
    }

    /// `CSI row;col H`: rows count from the top of the live region.
    fn cursor_position(&mut self, row: usize, column: usize) {
        self.screen_mode = true;
        let up = self.above.len();
        self.cursor_up(up);
        self.cursor_down(row);
        self.line.cursor_to_column(column);
    }

    /// `CSI n J`: 0 = cursor to end of screen, 1 = start to cursor, 2/3 = all.
    fn erase_display(&mut self, mode: u16) {
        match mode {
            0 => {
                self.line.erase(0);
                if self.screen_mode {
                    self.below.clear();
                }
            }
            1 => {
                self.line.erase(1);
                for row in &mut self.above {
                    row.erase(2);
                }
            }
            // A cleared screen in line mode leaves what was passed on alone.
            _ if self.screen_mode => {
                self.above.clear();
                self.below.clear();
                self.line.erase(2);
            }
            _ => {}
        }
    }

    /// The line grew too long to hold: pass on everything up to it.
    fn flush_overlong(&mut self) {
        while let Some(top) = self.above.pop_front() {
            self.commit_row(top, true);
        }
        self.line.commit(&mut self.committed, false);
    }

    /// End of stream: every live row is passed on, the last without `\n`.
    fn flush_all(&mut self) {
        let mut rows: Vec<ScreenLine> = self.above.drain(..).collect();
        rows.push(std::mem::replace(
            &mut self.line,
            ScreenLine::new(self.keep_color),
        ));
        rows.extend(self.below.drain(..));
        let drawn = rows.len();
        while rows.last().is_some_and(ScreenLine::is_blank) {
            rows.pop();
        }
        // A blank row after the last one means that one ended with `\n`.
        let last_newline = rows.len() < drawn;
        let count = rows.len();
        for (i, row) in rows.into_iter().enumerate() {
            self.commit_row(row, i + 1 < count || last_newline);
        }
    }
}

/// The first ASCII control byte (below 0x20, or DEL), eight bytes at a time.
fn first_control(bytes: &[u8]) -> Option<usize> {
    first_stop::<false>(bytes)
}

/// The first ASCII control byte other than `\n` and `\t`: what stops plain
/// lines from going straight through.
fn first_control_but_newline_or_tab(bytes: &[u8]) -> Option<usize> {
    first_stop::<true>(bytes)
}

/// Lanes of `x` (high bit set) whose byte is zero, exactly (no carries
/// between lanes).
fn zero_lanes(x: u64) -> u64 {
    const LOWS: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    !(((x & LOWS) + LOWS) | x) & !LOWS
}

/// The first byte below 0x20 or DEL (sparing `\n` and `\t` when
/// `SPARE_LINES`), found a word at a time with exact per-byte masks.
fn first_stop<const SPARE_LINES: bool>(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let stops = |b: u8| (b < 0x20 && !(SPARE_LINES && (b == b'\n' || b == b'\t'))) || b == 0x7F;
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let mut word = [0_u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        // High bit set where the byte is below 0x20 (and below 0x80).
        let below_space = !((x | HIGHS) - ONES * 0x20) & !x & HIGHS;
        let mut hits = below_space | zero_lanes(x ^ (ONES * 0x7F));
        if SPARE_LINES {
            hits &= !zero_lanes(x ^ (ONES * u64::from(b'\n')));
            hits &= !zero_lanes(x ^ (ONES * u64::from(b'\t')));
        }
        if hits != 0 {
            return Some(offset + (hits.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| stops(b))
        .map(|at| offset + at)
}

/// Where the first C1 control (U+0080..U+009F, `C2 80`..`C2 9F`) starts.
fn first_c1_control(bytes: &[u8]) -> Option<usize> {
    memchr::memchr_iter(0xC2, bytes)
        .find(|&at| bytes.get(at + 1).is_some_and(|b| (0x80..=0x9F).contains(b)))
}

/// How many bytes at the end of `bytes` are the start of a UTF-8 character
/// that is not complete yet.
fn incomplete_char_len(bytes: &[u8]) -> usize {
    let tail_start = bytes.len().saturating_sub(3);
    for at in (tail_start..bytes.len()).rev() {
        let byte = bytes[at];
        if byte & 0xC0 == 0x80 {
            continue;
        }
        let width = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        let have = bytes.len() - at;
        return if have < width { have } else { 0 };
    }
    0
}

/// Params of a CSI sequence the fast path handles itself; more go to vte.
const MAX_FAST_PARAMS: usize = 16;

/// Parses `ESC [ (digit | ;)* final` at the start of `bytes`, with values
/// accumulated the way vte does (saturating): (length, values, count, final).
fn simple_csi(bytes: &[u8]) -> Option<(usize, [u16; MAX_FAST_PARAMS], usize, u8)> {
    if bytes.len() < 3 || bytes[0] != 0x1B || bytes[1] != b'[' {
        return None;
    }
    let mut values = [0_u16; MAX_FAST_PARAMS];
    let mut count = 0;
    let mut current: u16 = 0;
    for (i, &byte) in bytes[2..].iter().enumerate().take(64) {
        match byte {
            b'0'..=b'9' => {
                current = current
                    .saturating_mul(10)
                    .saturating_add(u16::from(byte - b'0'));
            }
            b';' => {
                if count + 1 == MAX_FAST_PARAMS {
                    return None;
                }
                values[count] = current;
                count += 1;
                current = 0;
            }
            0x40..=0x7E => {
                values[count] = current;
                return Some((i + 3, values, count + 1, byte));
            }
            _ => return None,
        }
    }
    None
}

impl Perform for Screen {
    fn print(&mut self, c: char) {
        self.last_event = if c.is_ascii() {
            LastEvent::PrintedAscii(c as u8)
        } else {
            LastEvent::Other
        };
        // DEL and C1 controls draw nothing (vte prints a C1 control that
        // arrives split across two pushes instead of executing it).
        if c == '\x7f' || ('\u{80}'..='\u{9f}').contains(&c) {
            return;
        }
        self.line.print(c);
        if self.line.is_overlong() {
            self.flush_overlong();
        }
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0B | 0x0C => self.line_feed(),
            b'\r' => self.line.carriage_return(),
            0x08 => self.line.backspace(),
            b'\t' => {
                self.print('\t');
                self.last_event = LastEvent::Other;
            }
            // NUL, bell, shifts and C1 controls draw nothing.
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], ignore: bool, action: char) {
        self.last_event = LastEvent::Dispatched;
        if ignore || !intermediates.is_empty() {
            return;
        }
        if action == 'm' {
            if self.keep_color {
                self.line.insert_sgr(&sgr_sequence(params.iter()));
            }
            return;
        }
        let mut values = [0_u16; MAX_FAST_PARAMS];
        let mut count = 0;
        for param in params.iter().take(MAX_FAST_PARAMS) {
            values[count] = param.first().copied().unwrap_or(0);
            count += 1;
        }
        self.csi(&values[..count], action);
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _ignore: bool, byte: u8) {
        self.last_event = LastEvent::Dispatched;
        match (intermediates, byte) {
            // Reverse index: one row up.
            ([], b'M') => self.cursor_up(1),
            // Index / next line: one row down.
            ([], b'D') => self.line_feed(),
            ([], b'E') => {
                self.line_feed();
                self.line.carriage_return();
            }
            _ => {}
        }
    }
}

/// Re-encodes an SGR sequence from its parsed parameters.
fn sgr_sequence<'a>(params: impl Iterator<Item = &'a [u16]>) -> Vec<u8> {
    let mut out = b"\x1b[".to_vec();
    for (i, param) in params.enumerate() {
        if i > 0 {
            out.push(b';');
        }
        for (j, sub) in param.iter().enumerate() {
            if j > 0 {
                out.push(b':');
            }
            out.extend_from_slice(sub.to_string().as_bytes());
        }
    }
    out.push(b'm');
    out
}

/// Removes SGR sequences (`ESC [ ... m`) from already cleaned text.
pub fn strip_sgr(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(esc) = memchr::memchr(0x1B, rest) {
        out.extend_from_slice(&rest[..esc]);
        let after = &rest[esc + 1..];
        let sgr_len = (after.first() == Some(&b'['))
            .then(|| {
                after[1..]
                    .iter()
                    .position(|b| !(b.is_ascii_digit() || *b == b';' || *b == b':'))
                    .filter(|&end| after[1 + end] == b'm')
                    .map(|end| end + 2)
            })
            .flatten();
        match sgr_len {
            Some(len) => rest = &after[len..],
            None => {
                out.push(0x1B);
                rest = after;
            }
        }
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(raw: &str) -> String {
        String::from_utf8(TerminalCleaner::clean(raw.as_bytes(), false)).unwrap()
    }

    #[test]
    fn crlf_becomes_lf() {
        assert_eq!(clean("one\r\ntwo\r\n"), "one\ntwo\n");
    }

    #[test]
    fn colour_is_dropped_unless_kept() {
        let raw = "\x1b[1m\x1b[92m   Compiling\x1b[0m foo\n";
        assert_eq!(clean(raw), "   Compiling foo\n");
        let kept = TerminalCleaner::clean(raw.as_bytes(), true);
        assert_eq!(kept, raw.as_bytes());
    }

    #[test]
    fn osc_titles_and_hyperlink_targets_go_but_link_text_stays() {
        let raw =
            "\x1b]0;my title\x07see \x1b]8;;https://x.test/a\x1b\\the docs\x1b]8;;\x1b\\ now\n";
        assert_eq!(clean(raw), "see the docs now\n");
    }

    #[test]
    fn clear_screen_is_dropped_and_cursor_positions_place_text_on_rows() {
        assert_eq!(
            clean("\x1b[2J\x1b[Hhello\x1b[1A\x1b[5;3Hworld\n"),
            "hello\n\n\n  world\n"
        );
    }

    #[test]
    fn multi_line_progress_redrawn_with_cursor_up_ends_as_its_final_frame() {
        let mut raw = String::from("Installing\n");
        for step in 0..=1000 {
            if step > 0 {
                raw.push_str("\x1b[3A");
            }
            for bar in ["alpha", "beta", "gamma"] {
                raw.push_str(&format!("\r\x1b[2K{bar}: {step}/1000\n"));
            }
        }
        raw.push_str("done\n");
        assert_eq!(
            clean(&raw),
            "Installing\nalpha: 0/1000\nbeta: 0/1000\ngamma: 0/1000\n\
             alpha: 1000/1000\nbeta: 1000/1000\ngamma: 1000/1000\ndone\n"
        );
    }

    #[test]
    fn full_screen_redraws_at_home_keep_only_the_last_frame() {
        let mut raw = String::new();
        for frame in 0..200 {
            raw.push_str("\x1b[H\x1b[2J");
            for row in 0..5 {
                raw.push_str(&format!("frame {frame} row {row}\r\n"));
            }
        }
        let out = clean(&raw);
        assert_eq!(out.lines().count(), 5, "{out}");
        assert!(out.starts_with("frame 199 row 0\n"), "{out}");
    }

    #[test]
    fn the_first_multi_line_frame_repeats_at_most_once() {
        // The first frame was passed on before the cursor moved up.
        let raw = "a: 0\nb: 0\n\x1b[2A\x1b[2Ka: 1\n\x1b[2Kb: 1\nend\n";
        assert_eq!(clean(raw), "a: 0\nb: 0\na: 1\nb: 1\nend\n");
    }

    #[test]
    fn screen_mode_scrolls_old_rows_out_of_the_region() {
        let mut cleaner = TerminalCleaner::new(false);
        cleaner.push(b"x\x1b[1A");
        for i in 0..(MAX_REGION_ROWS + 10) {
            cleaner.push(format!("row {i}\n").as_bytes());
        }
        let committed = String::from_utf8(cleaner.committed().to_vec()).unwrap();
        // "x" was redrawn in place by "row 1": a redraw, folded as one.
        assert!(
            committed.starts_with("row 0\nx → row 1\nrow 2\n"),
            "{committed}"
        );
        assert!(cleaner.pending().len() < (MAX_REGION_ROWS + 1) * 8);
    }

    #[test]
    fn a_ten_thousand_step_progress_bar_is_one_line() {
        let mut raw = String::new();
        for i in 0..=10_000 {
            raw.push_str(&format!("\rProgress {i}/10000"));
        }
        raw.push_str("\nok\n");
        let out = clean(&raw);
        assert_eq!(
            out,
            "Progress 0/10000 → … → 9998/10000 → 9999/10000 → 10000/10000\nok\n"
        );
    }

    #[test]
    fn cargo_style_status_lines_leave_only_the_log_lines() {
        let raw = "\x1b[1m\x1b[92m   Compiling\x1b[0m a v1\r\n\
                   \x1b[1m\x1b[96m    Building\x1b[0m [>  ] 1/3: a     \r\
                   \x1b[1m\x1b[96m    Building\x1b[0m [=> ] 2/3: b     \r\x1b[K\
                   \x1b[1m\x1b[92m   Compiling\x1b[0m b v1\r\n\
                   \x1b[1m\x1b[96m    Building\x1b[0m [==>] 2/3: b     \r\x1b[K\
                   \x1b[1m\x1b[92m    Finished\x1b[0m `dev` profile\r\n";
        assert_eq!(
            clean(raw),
            "   Compiling a v1\n   Compiling b v1\n    Finished `dev` profile\n"
        );
    }

    #[test]
    fn backspace_redraws_like_a_terminal() {
        assert_eq!(clean("spin |\x08/\x08-\x08\\\x08done\n"), "spin done\n");
    }

    #[test]
    fn a_column_move_overwrites_from_that_column() {
        assert_eq!(clean("abcdef\x1b[3GXY\n"), "abXYef\n");
    }

    #[test]
    fn escape_sequences_split_across_pushes_are_still_understood() {
        let raw = b"red \x1b[31mtext\x1b[0m\r\n";
        for split in 0..raw.len() {
            let mut cleaner = TerminalCleaner::new(false);
            cleaner.push(&raw[..split]);
            cleaner.push(&raw[split..]);
            cleaner.finish();
            assert_eq!(cleaner.committed(), b"red text\n", "split at {split}");
        }
    }

    #[test]
    fn the_unfinished_line_is_pending_until_a_newline() {
        let mut cleaner = TerminalCleaner::new(false);
        cleaner.push(b"line\nPassword: ");
        assert_eq!(cleaner.committed(), b"line\n");
        assert_eq!(&*cleaner.pending(), b"Password: ");
        cleaner.clear_committed();
        cleaner.finish();
        assert_eq!(cleaner.committed(), b"Password: ");
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        let out = TerminalCleaner::clean(b"a\xffb\xc3\n", false);
        assert_eq!(String::from_utf8(out).unwrap(), "a\u{fffd}b\u{fffd}\n");
    }

    #[test]
    fn finds_control_bytes_at_every_position() {
        for len in 0..20 {
            for at in 0..len {
                for control in [0x00_u8, 0x0A, 0x1B, 0x1F, 0x7F] {
                    let mut bytes = vec![b'x'; len];
                    bytes[at] = control;
                    assert_eq!(first_control(&bytes), Some(at), "{len} {at} {control}");
                }
                let mut bytes = vec![b'x'; len];
                bytes[at] = 0xC3;
                assert_eq!(first_control(&bytes), None);
            }
        }
        assert_eq!(first_control(" ~é".as_bytes()), None);
    }

    #[test]
    fn word_masks_match_a_byte_by_byte_scan_for_every_byte_value() {
        for value in 0..=255_u8 {
            for at in 0..17 {
                let mut bytes = vec![b'x'; 17];
                bytes[at] = value;
                let control = value < 0x20 || value == 0x7F;
                let spared = value == b'\n' || value == b'\t';
                assert_eq!(
                    first_control(&bytes),
                    control.then_some(at),
                    "{value:#x} at {at}"
                );
                assert_eq!(
                    first_control_but_newline_or_tab(&bytes),
                    (control && !spared).then_some(at),
                    "{value:#x} at {at}"
                );
            }
        }
    }

    #[test]
    fn newlines_and_tabs_do_not_stop_plain_lines() {
        assert_eq!(first_control_but_newline_or_tab(b"y\ny\ny\n\ty\n"), None);
        for at in 0..40 {
            let mut bytes = b"y\n".repeat(20);
            bytes[at] = b'\r';
            assert_eq!(first_control_but_newline_or_tab(&bytes), Some(at));
        }
    }

    #[test]
    fn knows_when_a_push_ends_inside_a_character() {
        assert_eq!(incomplete_char_len(b"ab"), 0);
        assert_eq!(incomplete_char_len("é".as_bytes()), 0);
        assert_eq!(incomplete_char_len(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_char_len(&"→".as_bytes()[..2]), 2);
        assert_eq!(incomplete_char_len(&[b'a', 0xF0, 0x9F, 0x98]), 3);
        assert_eq!(incomplete_char_len(&[0xFF]), 0);
    }

    #[test]
    fn a_character_split_across_pushes_is_printed_once() {
        let text = "a→é\x1b[1mb\n";
        for split in 0..=text.len() {
            let mut cleaner = TerminalCleaner::new(false);
            cleaner.push(&text.as_bytes()[..split]);
            cleaner.push(&text.as_bytes()[split..]);
            cleaner.finish();
            assert_eq!(cleaner.committed(), "a→éb\n".as_bytes(), "split at {split}");
        }
    }

    #[test]
    fn strip_sgr_removes_only_colour() {
        assert_eq!(
            strip_sgr(b"\x1b[1;31mred\x1b[0m \x1b[2Kx\x1b"),
            b"red \x1b[2Kx\x1b"
        );
    }

    proptest::proptest! {
        /// The plain-text fast path changes nothing: any bytes, any
        /// chunking, the same text as feeding the parser everything.
        #[test]
        fn the_fast_path_matches_the_parser(
            bytes in proptest::collection::vec(proptest::sample::select(vec![
                b'a', b'b', b' ', b'1', b'0', b';', b':', b'?', b'[', b']', b'm', b'K', b'A', b'H', b'J', b'G', b'\\',
                0x1B, b'\r', b'\n', b'\t', 0x08, 0x07, 0x00, 0x7F, 0x9B, 0xC2, 0xC3, 0xA9, 0xE2, 0x86, 0x92, 0xFF,
            ]), 0..200),
            cuts in proptest::collection::vec(0_usize..200, 0..5),
            keep_color in proptest::bool::ANY,
        ) {
            let mut reference = TerminalCleaner::new(keep_color);
            reference.push_through_parser(&bytes);
            reference.finish();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut fast = TerminalCleaner::new(keep_color);
            let mut from = 0;
            for cut in cuts {
                fast.push(&bytes[from..cut]);
                from = cut;
            }
            fast.push(&bytes[from..]);
            fast.finish();
            proptest::prop_assert_eq!(
                String::from_utf8_lossy(fast.committed()),
                String::from_utf8_lossy(reference.committed())
            );
        }
    }
}
