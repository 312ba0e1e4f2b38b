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

use vte::{Params, Parser, Perform};

use super::line::ScreenLine;

/// Streams raw terminal output in, cleaned lines out.
pub struct TerminalCleaner {
    parser: Parser,
    screen: Screen,
}

impl std::fmt::Debug for TerminalCleaner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalCleaner")
            .field("committed", &self.screen.committed.len())
            .field("pending", &self.screen.line.current().len())
            .finish()
    }
}

struct Screen {
    line: ScreenLine,
    committed: Vec<u8>,
    keep_color: bool,
}

impl TerminalCleaner {
    pub fn new(keep_color: bool) -> Self {
        Self {
            parser: Parser::new(),
            screen: Screen {
                line: ScreenLine::new(keep_color),
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
    pub fn push(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.screen, bytes);
    }

    /// Ends the stream: the unfinished line is committed as it stands.
    pub fn finish(&mut self) {
        // An escape sequence cut off by the end of the stream is dropped.
        self.parser = Parser::new();
        if !self.screen.line.is_blank() {
            self.screen.line.commit(&mut self.screen.committed, false);
        }
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

    /// The unfinished last line as it stands now (a prompt, a progress bar).
    pub fn pending(&self) -> &[u8] {
        self.screen.line.current()
    }
}

fn first_param(params: &Params, default: u16) -> u16 {
    match params.iter().next().and_then(|p| p.first()).copied() {
        Some(0) | None => default,
        Some(n) => n,
    }
}

impl Perform for Screen {
    fn print(&mut self, c: char) {
        self.line.print(c);
        if self.line.is_overlong() {
            self.line.commit(&mut self.committed, false);
        }
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0B | 0x0C => self.line.commit(&mut self.committed, true),
            b'\r' => self.line.carriage_return(),
            0x08 => self.line.backspace(),
            b'\t' => self.print('\t'),
            // NUL, bell, shifts and C1 controls draw nothing.
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], ignore: bool, action: char) {
        if ignore || !intermediates.is_empty() {
            return;
        }
        match action {
            'm' if self.keep_color => self.line.insert_sgr(&sgr_sequence(params)),
            'K' => {
                let mode = params
                    .iter()
                    .next()
                    .and_then(|p| p.first())
                    .copied()
                    .unwrap_or(0);
                self.line.erase(mode);
            }
            'C' | 'a' => self
                .line
                .cursor_forward(usize::from(first_param(params, 1))),
            'D' => self.line.cursor_back(usize::from(first_param(params, 1))),
            'G' | '`' => self
                .line
                .cursor_to_column(usize::from(first_param(params, 1)) - 1),
            // Moves to other lines, scrolling, clear-screen, modes: dropped.
            _ => {}
        }
    }
}

/// Re-encodes an SGR sequence from its parsed parameters.
fn sgr_sequence(params: &Params) -> Vec<u8> {
    let mut out = b"\x1b[".to_vec();
    for (i, param) in params.iter().enumerate() {
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
    fn clear_screen_and_cursor_moves_to_other_lines_are_dropped() {
        assert_eq!(
            clean("\x1b[2J\x1b[Hhello\x1b[1A\x1b[5;3Hworld\n"),
            "helloworld\n"
        );
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
        assert_eq!(cleaner.pending(), b"Password: ");
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
    fn strip_sgr_removes_only_colour() {
        assert_eq!(
            strip_sgr(b"\x1b[1;31mred\x1b[0m \x1b[2Kx\x1b"),
            b"red \x1b[2Kx\x1b"
        );
    }
}
