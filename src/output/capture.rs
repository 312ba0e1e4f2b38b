//! One output stream from pipe to window: redaction, terminal clean-up, the
//! spill file and the in-memory byte cap, in that order.
//!
//! Secrets are replaced first, so nothing later (memory, disk, the model)
//! ever sees them, and once more in the cleaned text, where dropping an
//! escape sequence or applying a redraw could join a value that arrived
//! split. The spill file holds the cleaned text, the same text the
//! head and tail are cut from, so the line numbers a fold marker names are
//! exact: `sed -n 'A,Bp' FILE` prints what was left out.
//!
//! Sessions read a running command's output in windows: [`StreamCapture::take_window`]
//! returns only what arrived since the last take. The unfinished last line
//! (a prompt) is shown at once; when it is completed later, only its new
//! part is shown again, unless it was redrawn. A program that draws a screen
//! shows the rows that changed since the last take; a row later passed on
//! as it was shown is not shown again (the window then skips spill lines,
//! which it records so that fold markers still name the right ones).
//!
//! Every finished line also goes past the [`Detector`] of highlights, with
//! its spill file line number, so a window carries the failing lines of
//! everything it covers, the part the fold will leave out included. Past
//! the skim point of a flood the sink hands the raw bytes over instead
//! ([`StreamCapture::scan_skimmed`]).

use std::ops::Range;
use std::path::PathBuf;

use super::headtail::HeadTail;
use super::highlights::{Detector, Found, Source};
use super::redact::Redactor;
use super::spill::SpillWriter;
use super::terminal::TerminalCleaner;

/// The default in-memory cap per stream.
pub const DEFAULT_CAP_BYTES: usize = 1024 * 1024;

/// How a stream is captured.
#[derive(Debug)]
pub struct CaptureConfig {
    /// Bytes held in memory (head + tail); the rest is counted and spilled.
    pub cap_bytes: usize,
    /// Where the full cleaned output goes; `None` keeps no file.
    pub spill: Option<SpillWriter>,
    /// Secrets to replace before anything is kept.
    pub redactor: Option<Redactor>,
    /// Keep SGR colour sequences in the cleaned text.
    pub keep_color: bool,
    /// Keep the blanks at the end of lines (they are dropped otherwise).
    pub keep_blanks: bool,
    /// The stream comes from a PTY (informational: the clean-up is the
    /// same, since programs draw on pipes too).
    pub tty: bool,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        Self {
            cap_bytes: DEFAULT_CAP_BYTES,
            spill: None,
            redactor: None,
            keep_color: false,
            keep_blanks: false,
            tty: false,
        }
    }
}

/// A window of cleaned output: what a reply or a result shows, before
/// folding to the token budget.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The first bytes of the window's cleaned text.
    pub head: Vec<u8>,
    /// The last bytes of the window's finished text (after `omitted_bytes`).
    pub tail: Vec<u8>,
    /// The unfinished last line (a prompt, a progress bar): shown after the
    /// tail, not yet in the spill file.
    pub pending: Vec<u8>,
    /// Cleaned bytes between head and tail that memory did not keep.
    pub omitted_bytes: u64,
    /// Raw bytes the command wrote in this window (before any clean-up).
    pub total_bytes: u64,
    /// Cleaned bytes of finished text in this window (head + omitted + tail).
    pub cleaned_bytes: u64,
    /// The spill file line (1-based) this window starts on.
    pub first_line: u64,
    /// Newlines in this window's finished text.
    pub lines: u64,
    /// The tail starts at the beginning of a line.
    pub tail_starts_line: bool,
    /// The window contained NUL bytes.
    pub binary: bool,
    /// The spill file holding the full cleaned output, if any.
    pub spill_path: Option<PathBuf>,
    /// Set when the spill file stopped early: only lines up to this number
    /// are complete in it. With the reason.
    pub spill_stopped: Option<(u64, String)>,
    /// Spill lines the window leaves out because an earlier window showed
    /// them: (newlines of the window before the gap, lines skipped there).
    pub skipped_lines: Vec<(u64, u64)>,
    /// Lines that carry a failure, found in this window's text.
    pub highlights: Found,
}

impl Captured {
    /// The spill file line that line `index` (0-based) of the window is.
    pub fn spill_line(&self, index: u64) -> u64 {
        let skipped: u64 = self
            .skipped_lines
            .iter()
            .filter(|(at, _)| *at <= index)
            .map(|(_, lines)| lines)
            .sum();
        self.first_line + index + skipped
    }

    /// Spill lines skipped inside the window, in all.
    pub fn skipped_line_count(&self) -> u64 {
        self.skipped_lines.iter().map(|(_, lines)| lines).sum()
    }
}

fn trim_blanks(text: &[u8]) -> &[u8] {
    let end = text
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |last| last + 1);
    &text[..end]
}

/// Captures one stream (or the merged streams of a session).
#[derive(Debug)]
pub struct StreamCapture {
    cap_bytes: usize,
    redactor: Option<Redactor>,
    /// The same secrets once more over the cleaned text: removing escape
    /// sequences or applying a redraw can join a value that arrived split.
    text_redactor: Option<Redactor>,
    cleaner: TerminalCleaner,
    /// The buffer committed text is taken into when nothing is redacted
    /// (it passes back and forth with the cleaner's).
    committed_scratch: Vec<u8>,
    spill: Option<SpillWriter>,
    window: HeadTail,
    window_raw_bytes: u64,
    window_binary: bool,
    window_first_line: u64,
    committed_newlines: u64,
    total_raw_bytes: u64,
    /// The part of the unfinished line the last window already showed.
    shown_pending: Vec<u8>,
    /// Gaps of the current window (see [`Captured::skipped_lines`]).
    window_gaps: Vec<(u64, u64)>,
    /// Reused buffer for the seen spans of committed text.
    seen_scratch: Vec<Range<usize>>,
    highlights: Detector,
    /// Cleaned text is searched for highlights (until a skim starts).
    scan_cleaned: bool,
    finished: bool,
}

impl StreamCapture {
    pub fn new(config: CaptureConfig) -> Self {
        let redactor = config.redactor.filter(|r| !r.is_empty());
        let mut cleaner = TerminalCleaner::new(config.keep_color);
        if config.keep_blanks {
            cleaner.keep_blanks();
        }
        Self {
            cap_bytes: config.cap_bytes,
            text_redactor: redactor.clone(),
            redactor,
            cleaner,
            committed_scratch: Vec::new(),
            spill: config.spill,
            window: HeadTail::new(config.cap_bytes),
            window_raw_bytes: 0,
            window_binary: false,
            window_first_line: 1,
            committed_newlines: 0,
            total_raw_bytes: 0,
            shown_pending: Vec::new(),
            window_gaps: Vec::new(),
            seen_scratch: Vec::new(),
            highlights: Detector::new(),
            scan_cleaned: true,
            finished: false,
        }
    }

    /// Takes the next chunk the command wrote. Never blocks, never fails:
    /// past the cap bytes are still counted, cleaned and spilled.
    pub fn push(&mut self, raw: &[u8]) {
        if self.finished || raw.is_empty() {
            return;
        }
        self.total_raw_bytes += raw.len() as u64;
        self.window_raw_bytes += raw.len() as u64;
        if !self.window_binary && memchr::memchr(0, raw).is_some() {
            self.window_binary = true;
        }
        match &mut self.redactor {
            Some(redactor) => {
                let redacted = redactor.push(raw);
                self.cleaner.push(&redacted);
            }
            None => self.cleaner.push(raw),
        }
        self.drain_committed();
    }

    /// The stream ended: releases held-back bytes and the unfinished line.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        if let Some(redactor) = &mut self.redactor {
            let rest = redactor.finish();
            self.cleaner.push(&rest);
        }
        self.cleaner.finish();
        self.drain_committed();
        if let Some(redactor) = &mut self.text_redactor {
            let rest = redactor.finish();
            self.keep(&rest, &[]);
        }
        if self.scan_cleaned {
            self.highlights
                .finish(self.committed_newlines + 1, Source::Cleaned);
        }
        self.finished = true;
    }

    /// The sink stopped cleaning every byte (a flood, or binary output):
    /// cleaned text is no longer searched for highlights, since what
    /// arrives now is a skimmed tail whose lines it cannot number.
    pub fn skim_started(&mut self) {
        self.scan_cleaned = false;
    }

    /// Raw bytes of a skimmed flood, searched for highlights; `first_line`
    /// numbers their first byte. A matching line is cleaned and redacted.
    pub fn scan_skimmed(&mut self, raw: &[u8], first_line: u64) {
        self.scan_cleaned = false;
        self.highlights
            .scan(raw, first_line, Source::Raw(self.text_redactor.as_ref()));
    }

    /// The skimmed stream ended; its unfinished line is `line`.
    pub fn end_skimmed(&mut self, line: u64) {
        self.highlights
            .finish(line, Source::Raw(self.text_redactor.as_ref()));
    }

    fn drain_committed(&mut self) {
        if self.cleaner.committed().is_empty() {
            return;
        }
        match &mut self.text_redactor {
            Some(redactor) => {
                // Redaction changes lengths: seen rows are shown again.
                let redacted = redactor.push(self.cleaner.committed());
                self.cleaner.clear_committed();
                self.keep(&redacted, &[]);
            }
            None => {
                // Buffers pass between the cleaner and here: no copy.
                let mut committed = std::mem::take(&mut self.committed_scratch);
                let mut seen = std::mem::take(&mut self.seen_scratch);
                self.cleaner.swap_committed(&mut committed, &mut seen);
                self.keep(&committed, &seen);
                self.committed_scratch = committed;
                self.seen_scratch = seen;
            }
        }
    }

    /// Final text: all of it to the spill file, to the window all but the
    /// `seen` spans (rows an earlier window showed as they are).
    fn keep(&mut self, committed: &[u8], seen: &[Range<usize>]) {
        if committed.is_empty() {
            return;
        }
        if let Some(spill) = &mut self.spill {
            spill.write(committed);
        }
        if self.scan_cleaned {
            self.highlights
                .scan(committed, self.committed_newlines + 1, Source::Cleaned);
        }
        let newlines = memchr::memchr_iter(b'\n', committed).count() as u64;
        if seen.is_empty() && self.shown_pending.is_empty() {
            // All of it goes to the window (a one-shot command's output):
            // its newlines are counted once.
            self.window.push_counted(committed, newlines);
        } else {
            let mut at = 0;
            for span in seen {
                self.keep_unseen(&committed[at..span.start]);
                self.skip(&committed[span.clone()]);
                at = span.end;
            }
            self.keep_unseen(&committed[at..]);
        }
        self.committed_newlines += newlines;
    }

    /// Leaves text out of the window that an earlier one showed.
    fn skip(&mut self, skipped: &[u8]) {
        let lines = memchr::memchr_iter(b'\n', skipped).count() as u64;
        if lines == 0 {
            return;
        }
        if self.window.bytes() == 0 && self.window_gaps.is_empty() {
            // Skipped text opens this window: the window starts after it.
            self.window_first_line += lines;
        } else {
            self.window_gaps.push((self.window.newlines(), lines));
        }
    }

    /// Finished text no screen row stood for: to the window, less the
    /// part a window showed while it was the unfinished line.
    fn keep_unseen(&mut self, committed: &[u8]) {
        if committed.is_empty() {
            return;
        }
        let mut for_window = committed;
        if !self.shown_pending.is_empty() {
            // Finished text that a window already showed while it was
            // unfinished is not shown again, unless it was redrawn since.
            // Passed on, a line may lose the blanks it ended with when shown.
            let shown = if committed.starts_with(&self.shown_pending) {
                self.shown_pending.as_slice()
            } else {
                trim_blanks(&self.shown_pending)
            };
            if let Some(rest) = committed.strip_prefix(shown) {
                for_window = rest;
                self.shown_pending.clear();
            } else if self.shown_pending.starts_with(committed) {
                for_window = &[];
                self.shown_pending.drain(..committed.len());
            } else {
                self.shown_pending.clear();
            }
        }
        if for_window.len() < committed.len() {
            self.skip(&committed[..committed.len() - for_window.len()]);
        }
        self.window.push(for_window);
    }

    /// The unfinished output as the model may see it.
    fn pending(&self) -> Vec<u8> {
        let pending = self.cleaner.pending();
        match &self.text_redactor {
            Some(redactor) => redactor.redact_bytes(&pending),
            None => pending.into_owned(),
        }
    }

    /// What arrived since the last take; the next window starts after it.
    pub fn take_window(&mut self) -> Captured {
        let new_pending = if self.cleaner.is_screen_mode() {
            // A screen: the rows that changed since the last take.
            let rows = self.cleaner.take_changed_rows();
            match &self.text_redactor {
                Some(redactor) => redactor.redact_bytes(&rows),
                None => rows,
            }
        } else {
            let pending = self.pending();
            let new_pending = match pending.strip_prefix(self.shown_pending.as_slice()) {
                Some(rest) => rest.to_vec(),
                None => pending.clone(),
            };
            self.shown_pending = pending;
            new_pending
        };
        let mut captured = self.snapshot();
        captured.pending = new_pending;
        captured.skipped_lines = std::mem::take(&mut self.window_gaps);
        captured.highlights = self.highlights.take_found();
        self.window = HeadTail::new(self.cap_bytes);
        self.window_raw_bytes = 0;
        self.window_binary = false;
        self.window_first_line = self.committed_newlines + 1;
        captured
    }

    /// Everything since the last take (for a one-shot result: all of it).
    pub fn whole(&self) -> Captured {
        let mut captured = self.snapshot();
        captured.pending = self.pending();
        captured.highlights = self.highlights.found().clone();
        captured
    }

    fn snapshot(&self) -> Captured {
        Captured {
            head: self.window.head().to_vec(),
            tail: self.window.tail(),
            pending: Vec::new(),
            omitted_bytes: self.window.omitted_bytes(),
            total_bytes: self.window_raw_bytes,
            cleaned_bytes: self.window.bytes(),
            first_line: self.window_first_line,
            lines: self.window.newlines(),
            tail_starts_line: self.window.tail_starts_line(),
            binary: self.window_binary,
            spill_path: self.spill_path(),
            spill_stopped: self.spill.as_ref().and_then(|spill| {
                spill
                    .stopped_reason()
                    .map(|reason| (spill.written_lines(), reason.to_owned()))
            }),
            skipped_lines: self.window_gaps.clone(),
            highlights: Found::default(),
        }
    }

    /// Raw bytes the command wrote, over all windows.
    pub fn total_raw_bytes(&self) -> u64 {
        self.total_raw_bytes
    }

    /// The spill file, once something was written to it.
    pub fn spill_path(&self) -> Option<PathBuf> {
        self.spill
            .as_ref()
            .and_then(|spill| spill.path().map(PathBuf::from))
    }

    /// True once [`Self::finish`] ran.
    pub fn is_finished(&self) -> bool {
        self.finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(cap: usize) -> StreamCapture {
        StreamCapture::new(CaptureConfig {
            cap_bytes: cap,
            ..CaptureConfig::default()
        })
    }

    #[test]
    fn a_capture_can_move_to_the_reader_thread() {
        fn assert_send<T: Send + 'static>() {}
        assert_send::<StreamCapture>();
        assert_send::<Captured>();
    }

    #[test]
    fn whole_holds_the_cleaned_output_and_counts_raw_bytes() {
        let mut c = capture(1024);
        c.push(b"\x1b[31mred\x1b[0m\r\n");
        c.push(b"50%\r100%\n");
        c.finish();
        let w = c.whole();
        assert_eq!(w.head, b"red\n50% \xe2\x86\x92 100%\n");
        assert_eq!(w.total_bytes, 23);
        assert_eq!(w.lines, 2);
        assert_eq!(c.total_raw_bytes(), 23);
    }

    #[test]
    fn windows_carry_only_new_output_and_their_first_line() {
        let mut c = capture(1024);
        c.push(b"a\nb\n");
        let first = c.take_window();
        assert_eq!(
            (first.head.as_slice(), first.first_line),
            (&b"a\nb\n"[..], 1)
        );
        c.push(b"c\n");
        let second = c.take_window();
        assert_eq!(
            (second.head.as_slice(), second.first_line),
            (&b"c\n"[..], 3)
        );
        let empty = c.take_window();
        assert!(empty.head.is_empty() && empty.pending.is_empty());
    }

    #[test]
    fn a_prompt_is_shown_at_once_and_not_repeated_when_answered() {
        let mut c = capture(1024);
        c.push(b"Password: ");
        assert_eq!(c.take_window().pending, b"Password: ");
        c.push(b"\nwelcome\n");
        let next = c.take_window();
        assert_eq!(next.head, b"\nwelcome\n");
        assert!(next.pending.is_empty());
    }

    #[test]
    fn a_redrawn_unfinished_line_is_shown_whole_again() {
        let mut c = capture(1024);
        c.push(b"10%");
        assert_eq!(c.take_window().pending, b"10%");
        c.push(b"\r20%");
        assert_eq!(c.take_window().pending, b"20%");
        c.push(b"\r30% more");
        c.push(b" still");
        assert_eq!(c.take_window().pending, b"30% more still");
    }

    #[test]
    fn live_rows_of_a_multi_line_redraw_are_not_shown_twice() {
        let mut c = capture(1024);
        c.push(b"a: 0\nb: 0\n\x1b[2A");
        assert_eq!(c.take_window().head, b"a: 0\nb: 0\n");
        c.push(b"\x1b[2Ka: 1\n\x1b[2Kb: 1\n");
        let live = c.take_window();
        assert!(live.head.is_empty());
        assert_eq!(live.pending, b"a: 1\nb: 1");
        c.push(b"end\n");
        c.finish();
        let last = c.take_window();
        // "a: 1" and "b: 1" were shown while live: this window starts
        // after them, at "end", line 5 of the spill file.
        assert_eq!(last.first_line, 5);
        assert_eq!(
            (last.head.as_slice(), last.pending.as_slice()),
            (&b"end\n"[..], &b""[..])
        );
    }

    #[test]
    fn a_screen_shows_only_changed_rows_and_never_a_row_again_as_it_was_shown() {
        let mut c = capture(1024);
        c.push(b"\x1b[H\x1b[2Jrow a   \r\nrow b\r\nrow c");
        assert_eq!(c.take_window().pending, b"row a\nrow b\nrow c");
        c.push(b"\x1b[1;1H\x1b[Krow A\x1b[3;1H\x1b[Krow C");
        assert_eq!(c.take_window().pending, b"row A\nrow C");
        c.push(b"\x1b[1;1H\x1b[Krow 1\x1b[3;1H\x1b[Krow 3");
        c.finish();
        let last = c.take_window();
        // "row b" was shown as it is: the window skips its spill line.
        assert_eq!(last.head, b"row 1\nrow 3");
        assert_eq!((last.first_line, last.skipped_lines), (1, vec![(1, 1)]));
    }

    #[test]
    fn leaving_the_alternate_screen_drops_what_was_drawn_there() {
        let mut c = capture(1024);
        c.push(b"before\r\n\x1b[?1049h\x1b[H\x1b[2Jeditor screen\r\n~\r\n~");
        let live = c.take_window();
        assert_eq!(
            (live.head.as_slice(), live.pending.as_slice()),
            (&b"before\n"[..], &b"editor screen\n~\n~"[..])
        );
        c.push(b"\x1b[?1049l\rafter\r\n");
        c.finish();
        let last = c.take_window();
        assert_eq!(
            (last.head.as_slice(), last.pending.as_slice()),
            (&b"after\n"[..], &b""[..])
        );
    }

    #[test]
    fn secrets_never_reach_memory_even_when_split() {
        let mut c = StreamCapture::new(CaptureConfig {
            redactor: Some(Redactor::new(vec![(
                "TOKEN".into(),
                b"tok-123456".to_vec(),
            )])),
            ..CaptureConfig::default()
        });
        c.push(b"the tok-12");
        c.push(b"3456 is set\n");
        c.finish();
        assert_eq!(c.whole().head, b"the [REDACTED:TOKEN] is set\n");
    }

    #[test]
    fn a_secret_joined_by_the_clean_up_is_redacted_too() {
        let mut c = StreamCapture::new(CaptureConfig {
            redactor: Some(Redactor::new(vec![(
                "TOKEN".into(),
                b"tok-123456".to_vec(),
            )])),
            ..CaptureConfig::default()
        });
        c.push(b"the tok-\x1b[1m123\x1b[0m456 is set\nand tok-1");
        // A possible start of the secret is held back, even from a prompt.
        assert_eq!(c.whole().pending, b"and ");
        c.push(b"23456 too");
        assert_eq!(c.whole().pending, b"and [REDACTED:TOKEN] too");
        c.finish();
        assert_eq!(
            c.whole().head,
            b"the [REDACTED:TOKEN] is set\nand [REDACTED:TOKEN] too"
        );
    }

    #[test]
    fn nul_bytes_mark_the_window_binary() {
        let mut c = capture(1024);
        c.push(b"ELF\x00\x01\x02");
        assert!(c.take_window().binary);
        c.push(b"text\n");
        assert!(!c.take_window().binary);
    }

    #[test]
    fn memory_stays_within_the_cap_while_everything_is_counted() {
        let mut c = capture(64);
        for i in 0..1000 {
            c.push(format!("line {i}\n").as_bytes());
        }
        c.finish();
        let w = c.whole();
        assert_eq!(w.head.len() + w.tail.len(), 64);
        assert!(w.tail.ends_with(b"line 999\n"));
        assert_eq!(w.lines, 1000);
        assert_eq!(w.cleaned_bytes, w.omitted_bytes + 64);
    }

    #[test]
    fn highlights_carry_spill_line_numbers_even_from_the_omitted_middle() {
        let mut c = capture(256);
        for i in 1..=2000 {
            if i == 800 {
                c.push(b"\x1b[1m\x1b[31merror[E0308]\x1b[0m: mismatched types\r\n");
            } else {
                c.push(format!("line {i}\n").as_bytes());
            }
        }
        c.push(b"test result: FAILED");
        c.finish();
        let w = c.whole();
        assert!(w.omitted_bytes > 0, "memory kept only head and tail");
        let found: Vec<(u64, String)> = w
            .highlights
            .select()
            .into_iter()
            .map(|h| (h.line, h.text))
            .collect();
        assert_eq!(
            found,
            [
                (800, "error[E0308]: mismatched types".to_owned()),
                (2001, "test result: FAILED".to_owned())
            ]
        );
    }

    #[test]
    fn a_window_carries_only_the_highlights_found_since_the_last_take() {
        let mut c = capture(1024);
        c.push(b"error: first\nok\n");
        let first = c.take_window();
        assert_eq!(first.highlights.select()[0].line, 1);
        c.push(b"fine\nFAIL pkg\n");
        let second = c.take_window();
        let lines: Vec<u64> = second.highlights.select().iter().map(|h| h.line).collect();
        assert_eq!(lines, [4]);
        assert!(c.take_window().highlights.is_empty());
    }

    proptest::proptest! {
        /// Arbitrary bytes in arbitrary chunks, through every stage: no
        /// panic, and every reply stays within its budget plus the marker.
        #[test]
        fn any_bytes_stay_within_the_budget(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::num::u8::ANY, 0..300), 0..12),
            cap in 0_usize..400,
            tokens in 0_usize..80,
            keep_color in proptest::bool::ANY,
            windows in proptest::bool::ANY,
        ) {
            use crate::output::fold::{BYTES_PER_TOKEN, fold};
            use crate::output::render::{RenderOptions, render};
            let mut c = StreamCapture::new(CaptureConfig {
                cap_bytes: cap,
                keep_color,
                redactor: Some(Redactor::new(vec![("K".into(), b"\x1b[0m".to_vec())])),
                ..CaptureConfig::default()
            });
            let options = RenderOptions { max_output_tokens: tokens, keep_color };
            let budget = tokens * BYTES_PER_TOKEN;
            let check = |captured: &Captured| -> Result<(), proptest::test_runner::TestCaseError> {
                let rendered = render(captured, &options);
                let marker = fold(captured, budget).marker.map_or(0, |m| m.len());
                if !captured.binary {
                    proptest::prop_assert!(
                        rendered.text.len() <= budget + marker + 2,
                        "{} > {budget} + {marker}", rendered.text.len()
                    );
                }
                Ok(())
            };
            for chunk in &chunks {
                c.push(chunk);
                if windows {
                    check(&c.take_window())?;
                }
            }
            c.finish();
            check(&c.whole())?;
            let total: usize = chunks.iter().map(Vec::len).sum();
            proptest::prop_assert_eq!(c.total_raw_bytes(), total as u64);
        }
    }

    proptest::proptest! {
        /// Session windows of plain text, taken at any points, add up to
        /// exactly the text: nothing lost, nothing shown twice.
        #[test]
        fn windows_add_up_to_the_text(
            text in "[ab\n]{0,120}",
            cuts in proptest::collection::vec(0_usize..121, 0..8),
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            cuts.sort_unstable();
            cuts.push(text.len());
            let mut c = capture(1 << 16);
            let mut shown = Vec::new();
            let mut from = 0;
            for cut in cuts {
                c.push(&text.as_bytes()[from..cut]);
                from = cut;
                let w = c.take_window();
                shown.extend_from_slice(&w.head);
                shown.extend_from_slice(&w.tail);
                shown.extend_from_slice(&w.pending);
            }
            c.finish();
            let last = c.take_window();
            shown.extend_from_slice(&last.head);
            shown.extend_from_slice(&last.tail);
            proptest::prop_assert_eq!(String::from_utf8(shown).unwrap(), text);
        }
    }
}
