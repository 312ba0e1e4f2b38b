//! The screen model behind the terminal clean-up: what the parser's events
//! (and the fast scanner's plain text) do to the rows a person would see.
//!
//! Line mode: the row under the cursor ([`ScreenLine`]) takes `\r`,
//! backspace, column moves and erase-in-line; a finished line is committed
//! (passed on for good); one line redrawn many times (a progress bar) is
//! folded into its states.
//!
//! Screen mode, from the first multi-line redraw (a cursor moved up: npm,
//! docker, multi-bar progress, full-screen redraws at `CSI H`): the last
//! [`MAX_REGION_ROWS`] rows stay live and are redrawn in place; a row is
//! committed when it scrolls off the top of that region or the stream ends,
//! as it stands then (no redraw history: a screen row is what is on it).
//!
//! The alternate screen (`CSI ? 1049/1047/47 h`, a full-screen program)
//! is a region of its own; leaving it brings the normal screen back and
//! drops everything drawn there, as a terminal does.
//!
//! Readers of a running program see the live rows through
//! [`Screen::take_changed_rows`]: only the rows that changed since the last
//! take, each remembered as shown, so a row that is later committed as the
//! model already saw it is marked seen ([`Screen::seen`]) and a session
//! reply does not carry it again.
//!
//! Not modelled: scroll regions (`CSI r`) and saved cursors (`ESC 7/8`).
//! Absolute rows count from the top of the live region, so a status line
//! pinned to the bottom of the screen (apt's `Progress: [ 40%]`) keeps its
//! text but can land among the log lines.

use std::collections::VecDeque;
use std::ops::Range;

use super::line::ScreenLine;

mod sequences;

/// Rows kept live in screen mode (a tall terminal).
pub const MAX_REGION_ROWS: usize = 64;

/// The private modes (`CSI ? N h/l`) that switch to the alternate screen.
const ALTERNATE_SCREEN_MODES: [u16; 3] = [1049, 1047, 47];

/// What the parser did last, to know when it is back in its ground state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastEvent {
    Other,
    /// Printed this ASCII character (only done in the ground state).
    PrintedAscii(u8),
    /// Dispatched an escape or CSI sequence (back to the ground state).
    Dispatched,
}

/// The rows of one screen (the normal one or the alternate one).
#[derive(Debug)]
struct Rows {
    /// The row under the cursor.
    line: ScreenLine,
    /// Screen mode: live rows above the cursor row, top first.
    above: VecDeque<ScreenLine>,
    /// Screen mode: live rows below the cursor row, nearest first.
    below: VecDeque<ScreenLine>,
    screen_mode: bool,
}

impl Rows {
    fn new(keep_color: bool, screen_mode: bool) -> Self {
        let line = if screen_mode {
            ScreenLine::screen_row(keep_color)
        } else {
            ScreenLine::new(keep_color)
        };
        Self {
            line,
            above: VecDeque::new(),
            below: VecDeque::new(),
            screen_mode,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Screen {
    pub(crate) last_event: LastEvent,
    /// The rows being drawn on.
    rows: Rows,
    /// The normal screen's rows while the alternate screen is in use.
    normal: Option<Rows>,
    committed: Vec<u8>,
    /// Spans of `committed` the model already saw while they were live.
    seen: Vec<Range<usize>>,
    keep_color: bool,
    /// Lines (not rows of a full screen) keep their trailing blanks.
    pub(crate) keep_blanks: bool,
}

impl Screen {
    pub(crate) fn new(keep_color: bool) -> Self {
        Self {
            last_event: LastEvent::Other,
            rows: Rows::new(keep_color, false),
            normal: None,
            committed: Vec::new(),
            seen: Vec::new(),
            keep_color,
            keep_blanks: false,
        }
    }

    /// From now on lines keep the blanks at their end.
    pub(crate) fn keep_blanks(&mut self) {
        self.keep_blanks = true;
        let line = std::mem::take(&mut self.rows.line);
        self.rows.line = line.keeping_blanks(true);
    }

    /// Cleaned text that is final, not yet cleared.
    pub(crate) fn committed(&self) -> &[u8] {
        &self.committed
    }

    /// The spans of [`Self::committed`] that were shown while live.
    pub(crate) fn seen(&self) -> &[Range<usize>] {
        &self.seen
    }

    /// Forgets the committed text (and its seen spans).
    pub(crate) fn clear_committed(&mut self) {
        self.committed.clear();
        self.seen.clear();
    }

    /// Exchanges the committed text and its seen spans for `text` and
    /// `seen` (emptied first): the caller takes them without a copy, and
    /// the screen goes on in the caller's old buffers.
    pub(crate) fn swap_committed(&mut self, text: &mut Vec<u8>, seen: &mut Vec<Range<usize>>) {
        text.clear();
        seen.clear();
        std::mem::swap(&mut self.committed, text);
        std::mem::swap(&mut self.seen, seen);
    }

    /// Takes the committed text out, leaving the buffer empty.
    pub(crate) fn take_committed(&mut self) -> Vec<u8> {
        self.seen.clear();
        std::mem::take(&mut self.committed)
    }

    /// True in screen mode or on the alternate screen: the live output is
    /// rows, read by [`Self::take_changed_rows`].
    pub(crate) fn is_row_mode(&self) -> bool {
        self.rows.screen_mode
    }

    /// The current line's text up to the cursor and without the blanks
    /// after it (line mode's pending text).
    pub(crate) fn current_line(&self) -> &[u8] {
        self.rows.line.visible()
    }

    /// Every live row as it stands, without trailing blanks, joined by
    /// `\n`, without trailing blank rows.
    pub(crate) fn live_text(&self) -> Vec<u8> {
        let rows = &self.rows;
        let texts = rows
            .above
            .iter()
            .map(ScreenLine::trimmed_if_live)
            .chain(std::iter::once(rows.line.trimmed_if_live()))
            .chain(rows.below.iter().map(ScreenLine::trimmed_if_live))
            .flatten();
        let mut out = Vec::new();
        for (i, text) in texts.enumerate() {
            if i > 0 {
                out.push(b'\n');
            }
            out.extend_from_slice(text);
        }
        while out.last() == Some(&b'\n') {
            out.pop();
        }
        out
    }

    /// The live rows that changed since the last take (blank ones left
    /// out), joined by `\n`; all of them count as shown afterwards.
    pub(crate) fn take_changed_rows(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let rows = &mut self.rows;
        let mut show = |row: &mut ScreenLine| {
            if row.is_phantom() || !row.mark_shown() {
                return;
            }
            let text = row.trimmed();
            if !text.is_empty() {
                if !out.is_empty() {
                    out.push(b'\n');
                }
                out.extend_from_slice(text);
            }
        };
        for row in &mut rows.above {
            show(row);
        }
        show(&mut rows.line);
        for row in &mut rows.below {
            show(row);
        }
        out
    }

    fn row_count(&self) -> usize {
        self.rows.above.len() + 1 + self.rows.below.len()
    }

    /// Passes on a row that left the live region (or the stream ended);
    /// on the alternate screen a row scrolled off is gone.
    fn commit_row(&mut self, mut row: ScreenLine, newline: bool) {
        if row.is_phantom() {
            return;
        }
        let start = self.committed.len();
        let seen = row.is_shown();
        row.commit(&mut self.committed, newline);
        if seen && self.committed.len() > start {
            self.seen.push(start..self.committed.len());
        }
    }

    /// `\n`: the next row; in line mode the finished line is passed on.
    fn line_feed(&mut self) {
        if !self.rows.screen_mode {
            self.rows.line.commit(&mut self.committed, true);
            return;
        }
        let keep_color = self.keep_color;
        let rows = &mut self.rows;
        let next = rows
            .below
            .pop_front()
            .unwrap_or_else(|| ScreenLine::screen_row(keep_color));
        let previous = std::mem::replace(&mut rows.line, next);
        rows.above.push_back(previous);
        rows.line.carriage_return();
        while self.row_count() > MAX_REGION_ROWS {
            if let Some(top) = self.rows.above.pop_front()
                && self.normal.is_none()
            {
                self.commit_row(top, true);
            }
        }
    }

    /// Moves the cursor `n` rows up, entering screen mode.
    fn cursor_up(&mut self, n: usize) {
        if !self.rows.screen_mode {
            self.rows.screen_mode = true;
            self.rows.line.stop_folding();
        }
        for _ in 0..n {
            let upper = match self.rows.above.pop_back() {
                Some(row) => row,
                None if self.row_count() < MAX_REGION_ROWS => ScreenLine::phantom(self.keep_color),
                None => break,
            };
            let previous = std::mem::replace(&mut self.rows.line, upper);
            self.rows.below.push_front(previous);
        }
    }

    /// Moves the cursor `n` rows down (within or past the live rows).
    fn cursor_down(&mut self, n: usize) {
        if self.rows.screen_mode {
            for _ in 0..n {
                self.line_feed();
            }
        }
    }

    /// `CSI row;col H`: rows count from the top of the live region.
    fn cursor_position(&mut self, row: usize, column: usize) {
        let up = self.rows.above.len();
        self.cursor_up(up);
        self.cursor_down(row);
        self.rows.line.cursor_to_column(column);
    }

    /// `CSI n J`: 0 = cursor to end of screen, 1 = start to cursor, 2/3 = all.
    fn erase_display(&mut self, mode: u16) {
        let rows = &mut self.rows;
        match mode {
            0 => {
                rows.line.erase(0);
                if rows.screen_mode {
                    rows.below.clear();
                }
            }
            1 => {
                rows.line.erase(1);
                for row in &mut rows.above {
                    row.erase(2);
                }
            }
            // A cleared screen in line mode leaves what was passed on alone.
            _ if rows.screen_mode => {
                rows.above.clear();
                rows.below.clear();
                rows.line.erase(2);
            }
            _ => {}
        }
    }

    /// The line grew too long to hold: pass on everything up to it.
    fn flush_overlong(&mut self) {
        while let Some(top) = self.rows.above.pop_front() {
            if self.normal.is_none() {
                self.commit_row(top, true);
            }
        }
        if self.normal.is_none() {
            self.rows.line.commit(&mut self.committed, false);
        } else {
            self.rows.line.erase(2);
        }
    }

    /// End of stream: every live row is passed on, the last without `\n`.
    pub(crate) fn flush_all(&mut self) {
        let rows = &mut self.rows;
        let mut live: Vec<ScreenLine> = rows.above.drain(..).collect();
        live.push(std::mem::replace(
            &mut rows.line,
            ScreenLine::new(self.keep_color).keeping_blanks(self.keep_blanks),
        ));
        live.extend(rows.below.drain(..));
        rows.screen_mode = false;
        let drawn = live.len();
        while live.last().is_some_and(ScreenLine::is_blank) {
            live.pop();
        }
        // A blank row after the last one means that one ended with `\n`.
        let last_newline = live.len() < drawn;
        let count = live.len();
        for (i, row) in live.into_iter().enumerate() {
            self.commit_row(row, i + 1 < count || last_newline);
        }
    }
}
