//! How plain text and escape sequences act on the screen: the parser's
//! events ([`Perform`]), the fast scanner's plain text and simple CSI
//! sequences, which must act exactly alike (a property test holds them
//! equal), and the private modes that switch to the alternate screen.

use vte::{Params, Perform};

use super::{ALTERNATE_SCREEN_MODES, LastEvent, Rows, Screen};
use crate::output::scan::{
    MAX_FAST_PARAMS, first_c1_control, first_control, first_control_but_newline_or_tab,
    sgr_sequence, simple_csi,
};

impl Screen {
    /// A CSI sequence other than SGR, with the first value of each param.
    fn csi(&mut self, params: &[u16], action: char) {
        let raw = |i: usize| params.get(i).copied().unwrap_or(0);
        let count = || usize::from(raw(0).max(1));
        match action {
            'K' => self.rows.line.erase(raw(0)),
            'C' | 'a' => self.rows.line.cursor_forward(count()),
            'D' => self.rows.line.cursor_back(count()),
            'G' | '`' => self.rows.line.cursor_to_column(count() - 1),
            'A' => self.cursor_up(count()),
            'F' => {
                self.cursor_up(count());
                self.rows.line.carriage_return();
            }
            'B' | 'e' => self.cursor_down(count()),
            'E' => {
                self.cursor_down(count());
                self.rows.line.carriage_return();
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

    /// `CSI ? N h` / `CSI ? N l`: only the alternate screen matters.
    fn private_mode(&mut self, params: &Params, set: bool) {
        let alternate = params.iter().any(|p| {
            p.first()
                .is_some_and(|m| ALTERNATE_SCREEN_MODES.contains(m))
        });
        if !alternate {
            return;
        }
        match (set, self.normal.is_some()) {
            (true, false) => {
                let alternate = Rows::new(self.keep_color, true);
                self.normal = Some(std::mem::replace(&mut self.rows, alternate));
            }
            (false, true) => {
                if let Some(normal) = self.normal.take() {
                    // What was drawn on the alternate screen goes with it.
                    self.rows = normal;
                }
            }
            _ => {}
        }
    }

    /// Handles a simple CSI sequence (`ESC [` digits and `;`, a final
    /// byte) at the start of `bytes` exactly as the parser would, without
    /// it; returns its length, or `None` to leave it to the parser.
    pub(crate) fn take_simple_csi(&mut self, bytes: &[u8]) -> Option<usize> {
        let (len, values, count, action) = simple_csi(bytes)?;
        let params = &values[..count];
        if action == b'm' {
            if self.keep_color {
                let groups = params.iter().map(std::slice::from_ref);
                self.rows.line.insert_sgr(&sgr_sequence(groups));
            }
        } else {
            self.csi(params, char::from(action));
        }
        Some(len)
    }

    /// Handles the longest prefix of `bytes` that is plain text (valid
    /// UTF-8, no ESC, no C1 control) the way the parser would in its ground
    /// state; returns how many bytes it took.
    pub(crate) fn take_plain(&mut self, bytes: &[u8]) -> usize {
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
        if !self.rows.screen_mode && self.rows.line.is_blank() {
            // Whole plain lines go straight through: nothing can redraw them.
            let simple = first_control_but_newline_or_tab(bytes).unwrap_or(bytes.len());
            if let Some(last_newline) = memchr::memrchr(b'\n', &bytes[..simple]) {
                if self.keep_blanks {
                    self.committed.extend_from_slice(&bytes[..=last_newline]);
                } else {
                    push_lines_trimmed(&mut self.committed, &bytes[..=last_newline]);
                }
                at = last_newline + 1;
            }
        }
        while at < bytes.len() {
            let run = first_control(&bytes[at..]).map_or(bytes.len(), |offset| at + offset);
            if run > at {
                // Controls are ASCII, so `at..run` holds whole characters.
                self.rows.line.print_str(&text[at..run]);
                if self.rows.line.is_overlong() {
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
}

/// Appends whole lines to `out` without the blanks at their ends.
fn push_lines_trimmed(out: &mut Vec<u8>, lines: &[u8]) {
    if memchr::memmem::find(lines, b" \n").is_none()
        && memchr::memmem::find(lines, b"\t\n").is_none()
    {
        out.extend_from_slice(lines);
        return;
    }
    for line in lines.split_inclusive(|&b| b == b'\n') {
        let body = &line[..line.len() - 1];
        let end = body
            .iter()
            .rposition(|&b| b != b' ' && b != b'\t')
            .map_or(0, |last| last + 1);
        out.extend_from_slice(&body[..end]);
        out.push(b'\n');
    }
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
        self.rows.line.print(c);
        if self.rows.line.is_overlong() {
            self.flush_overlong();
        }
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0B | 0x0C => self.line_feed(),
            b'\r' => self.rows.line.carriage_return(),
            0x08 => self.rows.line.backspace(),
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
        if ignore {
            return;
        }
        if intermediates == b"?" && matches!(action, 'h' | 'l') {
            self.private_mode(params, action == 'h');
            return;
        }
        if !intermediates.is_empty() {
            return;
        }
        if action == 'm' {
            if self.keep_color {
                self.rows.line.insert_sgr(&sgr_sequence(params.iter()));
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
                self.rows.line.carriage_return();
            }
            _ => {}
        }
    }
}
