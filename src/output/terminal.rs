//! Terminal clean-up: a real escape-sequence parser (`vte`) turns what a
//! program drew on a terminal into the text a person would read.
//!
//! Cursor movement off the line, clear-screen, OSC (titles, hyperlink
//! targets: the link text stays), DCS and other escapes are dropped; `\r`,
//! backspace, column moves and erase-in-line are applied to the current
//! line; a line redrawn many times is folded into one; SGR colour is kept
//! only when asked. `\r\n` becomes `\n`. What the rows are and do is the
//! screen model ([`super::screen`]); this file streams bytes into it, with
//! plain text and simple CSI sequences taken by the fast scanner
//! ([`super::scan`]) instead of the parser wherever that changes nothing.
//!
//! Streaming: finished lines are appended to [`TerminalCleaner::committed`]
//! as they complete; the unfinished output stays [`TerminalCleaner::pending`]
//! because a later `\r` or cursor move may still redraw it.

use std::borrow::Cow;
use std::ops::Range;

use vte::Parser;

use super::scan::incomplete_char_len;
pub use super::scan::strip_sgr;
pub use super::screen::MAX_REGION_ROWS;
use super::screen::{LastEvent, Screen};

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
            .field("committed", &self.screen.committed().len())
            .field("pending", &self.screen.current_line().len())
            .field("row_mode", &self.screen.is_row_mode())
            .finish()
    }
}

impl TerminalCleaner {
    pub fn new(keep_color: bool) -> Self {
        Self {
            parser: Parser::new(),
            ground: true,
            carry: Vec::new(),
            screen: Screen::new(keep_color),
        }
    }

    /// Lines keep the blanks at their end from now on (rows of a full
    /// screen still lose them).
    pub fn keep_blanks(&mut self) {
        self.screen.keep_blanks();
    }

    /// Cleans everything at once (a finished capture, a test, a benchmark).
    pub fn clean(bytes: &[u8], keep_color: bool) -> Vec<u8> {
        let mut cleaner = Self::new(keep_color);
        cleaner.push(bytes);
        cleaner.finish();
        cleaner.screen.take_committed()
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

    /// Ends the stream: the unfinished output is committed as it stands.
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
        self.screen.committed()
    }

    /// The spans of [`Self::committed`] that are screen rows a reader was
    /// shown by [`Self::take_changed_rows`] exactly as they were committed.
    pub fn seen(&self) -> &[Range<usize>] {
        self.screen.seen()
    }

    /// Takes the committed text and its seen spans into `text` and `seen`
    /// without copying them (their old contents are dropped, their
    /// buffers reused): the same as reading both, then
    /// [`Self::clear_committed`].
    pub fn swap_committed(&mut self, text: &mut Vec<u8>, seen: &mut Vec<Range<usize>>) {
        self.screen.swap_committed(text, seen);
    }

    /// Forgets the committed text once the caller has taken it.
    pub fn clear_committed(&mut self) {
        self.screen.clear_committed();
    }

    /// The unfinished output as it stands now: the last line (a prompt, a
    /// progress bar) or, in screen mode, the live rows; without the blanks
    /// at the ends of rows.
    pub fn pending(&self) -> Cow<'_, [u8]> {
        if self.screen.is_row_mode() {
            Cow::Owned(self.screen.live_text())
        } else {
            Cow::Borrowed(self.screen.current_line())
        }
    }

    /// In screen mode (or on the alternate screen): the live rows that
    /// changed since the last call, joined by `\n`; they count as shown.
    pub fn take_changed_rows(&mut self) -> Vec<u8> {
        self.screen.take_changed_rows()
    }

    /// True once a multi-line redraw was seen or while the alternate screen
    /// is in use: the live output is rows.
    pub fn is_screen_mode(&self) -> bool {
        self.screen.is_row_mode()
    }
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
    fn a_cleaner_keeping_blanks_passes_lines_on_with_them() {
        let raw = b"a\n \nb  \nredrawn\rre  \n";
        let mut cleaner = TerminalCleaner::new(false);
        cleaner.keep_blanks();
        cleaner.push(raw);
        cleaner.finish();
        let kept = String::from_utf8(cleaner.committed().to_vec()).unwrap();
        assert_eq!(kept, "a\n \nb  \nredrawn \u{2192} re  awn\n");
        assert_eq!(clean("a\n \nb  \n"), "a\n\nb\n", "the default drops them");
    }

    #[test]
    fn screen_mode_scrolls_old_rows_out_of_the_region() {
        let mut cleaner = TerminalCleaner::new(false);
        cleaner.push(b"x\x1b[1A");
        for i in 0..(MAX_REGION_ROWS + 10) {
            cleaner.push(format!("row {i}\n").as_bytes());
        }
        let committed = String::from_utf8(cleaner.committed().to_vec()).unwrap();
        // "x" was redrawn in place by "row 1": a screen row is what is on
        // it, without the history of its redraws.
        assert!(
            committed.starts_with("row 0\nrow 1\nrow 2\n"),
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
        // Passed on, the row loses its trailing blank.
        assert_eq!(cleaner.committed(), b"Password:");
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        let out = TerminalCleaner::clean(b"a\xffb\xc3\n", false);
        assert_eq!(String::from_utf8(out).unwrap(), "a\u{fffd}b\u{fffd}\n");
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
