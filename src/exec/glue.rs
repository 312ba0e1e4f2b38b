//! The seam between the engine and the output pipeline ([`crate::output`]):
//! one capture per stream (or one for both, in arrival order), fed by the
//! pump thread and rendered by `take_output` and `finish`.
//!
//! It adds one thing the pipeline cannot do alone: keeping up with a flood.
//! Terminal clean-up costs CPU per byte, and a command writing a gigabyte
//! must not be slowed to the cleaner's pace. Once a stream has sent more
//! than the spill file can hold (so nothing more could be shown or saved
//! anyway), the sink *skims*: it only counts bytes, lines and NULs and keeps
//! the newest raw bytes in a ring; the ring goes through the pipeline when
//! the window is taken or the stream ends, so the tail (the final "3
//! failed") is cleaned, redacted and shown, and the fold marker counts every
//! byte that was left out. Binary output (a NUL) is skimmed from its first
//! NUL on: it is refused whole anyway.
//!
//! A skimmed flood is still searched for highlights (the failing lines a
//! result names): the raw bytes go past the capture's detector as they
//! arrive, one vectorised search, so an `error:` in the middle of 100 MB
//! of log is found although nothing around it is cleaned or kept.

use std::path::{Path, PathBuf};

use super::tail_ring::{SkimCounts, TailRing};
pub use crate::output::RenderOptions;
pub(crate) use crate::output::Rendered;
use crate::output::{CaptureConfig, Captured, Redactor, SpillStore, StreamCapture, render};

/// What a capture is built with.
#[derive(Debug, Clone)]
pub(crate) struct SinkConfig {
    pub(crate) cap_bytes: usize,
    pub(crate) secrets: Vec<(String, Vec<u8>)>,
    pub(crate) keep_color: bool,
    pub(crate) keep_blanks: bool,
    pub(crate) tty: bool,
    /// Names the spill file (`<tag>-stdout`).
    pub(crate) label: String,
    /// The spill store, when the full output is kept on disk.
    pub(crate) spill: Option<SpillStore>,
    /// Raw bytes after which the sink skims; `u64::MAX` = never.
    pub(crate) skim_after: u64,
}

/// Opens the spill store under `home`; `None` (no file, the fold marker
/// then says so) when it cannot be created.
pub(crate) fn open_spill_store(home: &Path, cap_bytes: u64) -> Option<SpillStore> {
    SpillStore::open(home, cap_bytes).ok()
}

/// One stream's capture.
#[derive(Debug)]
pub(crate) struct Sink {
    capture: StreamCapture,
    total: u64,
    skim_after: u64,
    /// Bytes cut from the ring's start before it is cleaned, so a secret
    /// split by the skim cannot show half of itself.
    secret_guard: usize,
    /// The skimmed stretch of the current window.
    ring: TailRing,
    /// What the last window's skim left out, once the stream finished.
    finished_skim: SkimCounts,
    /// Complete lines in the spill file when the skim began.
    lines_at_skim: Option<u64>,
    /// Newlines skimmed since the skim began.
    skimmed_newlines: u64,
    /// The skim searches the raw bytes for highlights (not for binary).
    skim_scans: bool,
}

impl Sink {
    pub(crate) fn new(config: SinkConfig) -> Self {
        let secret_guard = config
            .secrets
            .iter()
            .map(|(_, v)| v.len())
            .max()
            .unwrap_or(0);
        let redactor = (!config.secrets.is_empty()).then(|| Redactor::new(config.secrets));
        let spill = config.spill.map(|store| store.create(&config.label));
        Self {
            capture: StreamCapture::new(CaptureConfig {
                cap_bytes: config.cap_bytes,
                spill,
                redactor,
                keep_color: config.keep_color,
                keep_blanks: config.keep_blanks,
                tty: config.tty,
            }),
            total: 0,
            skim_after: config.skim_after,
            secret_guard,
            ring: TailRing::new((config.cap_bytes / 2).max(4096)),
            finished_skim: SkimCounts::default(),
            lines_at_skim: None,
            skimmed_newlines: 0,
            skim_scans: false,
        }
    }

    /// Takes a chunk; never blocks, never fails.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.total <= self.skim_after && self.lines_at_skim.is_none() {
            self.capture.push(bytes);
            // Binary output is refused whole: cleaning the rest of it would
            // only cost time, so the skim starts after the first NUL.
            if memchr::memchr(0, bytes).is_some() {
                self.start_skim(false);
            }
            return;
        }
        if self.lines_at_skim.is_none() {
            self.start_skim(true);
        }
        let lines_before = self.ring.all_dropped().dropped_newlines;
        self.ring.push(bytes);
        if let Some(at_skim) = self.lines_at_skim
            && self.skim_scans
        {
            let first_line = at_skim + self.skimmed_newlines + 1;
            self.capture.scan_skimmed(bytes, first_line);
            self.skimmed_newlines += self.ring.all_dropped().dropped_newlines - lines_before;
        }
    }

    /// Stops cleaning every byte; a flood's raw bytes are still searched
    /// for highlights (`scans`), binary output's are not.
    fn start_skim(&mut self, scans: bool) {
        let so_far = self.capture.whole();
        self.lines_at_skim =
            Some((so_far.first_line - 1) + so_far.lines + so_far.skipped_line_count());
        self.skim_scans = scans;
        self.capture.skim_started();
    }

    /// Sends the ring through the pipeline; returns what it left out.
    fn flush_skimmed(&mut self) -> SkimCounts {
        if self.ring.is_empty() {
            return SkimCounts::default();
        }
        let (kept, mut counts) = self.ring.take();
        let mut cut = 0;
        if counts.dropped_bytes > 0 {
            // Start the cleaned tail on a line, and past any half secret.
            let line_start = memchr::memchr(b'\n', &kept).map_or(0, |i| i + 1);
            cut = line_start.max(self.secret_guard).min(kept.len());
        }
        counts.dropped_bytes += cut as u64;
        counts.dropped_newlines += memchr::memchr_iter(b'\n', &kept[..cut]).count() as u64;
        self.capture.push(&kept[cut..]);
        counts
    }

    /// The stream ended.
    pub(crate) fn finish(&mut self) {
        if let Some(at_skim) = self.lines_at_skim
            && self.skim_scans
        {
            self.capture
                .end_skimmed(at_skim + self.skimmed_newlines + 1);
        }
        self.finished_skim = self.flush_skimmed();
        self.capture.finish();
    }

    /// Raw bytes over all windows.
    pub(crate) fn total_raw_bytes(&self) -> u64 {
        self.total
    }

    /// The spill file, once something was written to it.
    pub(crate) fn spill_path(&self) -> Option<PathBuf> {
        self.capture.spill_path()
    }

    /// What arrived since the last take, rendered.
    pub(crate) fn take_window(&mut self, opts: &RenderOptions) -> Rendered {
        let skimmed = self.flush_skimmed();
        let mut captured = self.capture.take_window();
        self.account_for(&mut captured, &skimmed);
        render(&captured, opts)
    }

    /// Everything (since the last take), rendered.
    pub(crate) fn whole(&self, opts: &RenderOptions) -> Rendered {
        let mut captured = self.capture.whole();
        let live = self.ring.all_dropped();
        let skimmed_now = SkimCounts {
            dropped_bytes: live.dropped_bytes + self.finished_skim.dropped_bytes,
            dropped_newlines: live.dropped_newlines + self.finished_skim.dropped_newlines,
            saw_nul: live.saw_nul || self.finished_skim.saw_nul,
        };
        self.account_for(&mut captured, &skimmed_now);
        render(&captured, opts)
    }
}

impl Sink {
    /// Adds what the skim left out to a window, so its counts and the fold
    /// marker cover every byte, and the marker never names spill lines that
    /// were not written.
    fn account_for(&self, captured: &mut Captured, skimmed: &SkimCounts) {
        captured.total_bytes += skimmed.dropped_bytes;
        captured.omitted_bytes += skimmed.dropped_bytes;
        captured.cleaned_bytes += skimmed.dropped_bytes;
        captured.lines += skimmed.dropped_newlines;
        captured.binary |= skimmed.saw_nul;
        if let Some(lines) = self.lines_at_skim
            && captured.spill_stopped.is_none()
            && captured.spill_path.is_some()
        {
            captured.spill_stopped = Some((
                lines,
                format!(
                    "output past the first {} MiB was counted, not saved",
                    self.skim_after / (1024 * 1024)
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(cap: usize, skim_after: u64, secrets: Vec<(String, Vec<u8>)>) -> Sink {
        Sink::new(SinkConfig {
            cap_bytes: cap,
            secrets,
            keep_color: false,
            keep_blanks: false,
            tty: false,
            label: "t".into(),
            spill: None,
            skim_after,
        })
    }

    #[test]
    fn a_flood_past_the_skim_point_keeps_the_tail_and_counts_every_byte() {
        let mut s = sink(8192, 20_000, vec![]);
        let line = b"building something useful\n";
        let mut sent = 0u64;
        for _ in 0..100_000 {
            s.push(line);
            sent += line.len() as u64;
        }
        s.push(b"3 failed\n");
        sent += 9;
        s.finish();
        let rendered = s.whole(&RenderOptions::default());
        assert_eq!(rendered.original_bytes, sent);
        assert_eq!(s.total_raw_bytes(), sent);
        assert!(rendered.truncated);
        assert!(
            rendered.text.ends_with("3 failed\n"),
            "{}",
            &rendered.text[rendered.text.len() - 200..]
        );
        assert!(rendered.text.starts_with("building something useful\n"));
        assert!(rendered.text.contains("omitted"), "the marker is there");
    }

    #[test]
    fn a_skimmed_flood_is_still_searched_for_highlights() {
        let mut s = sink(8192, 20_000, vec![("KEY".into(), b"k3y-s3cr3t".to_vec())]);
        let line = b"building something useful\n";
        for _ in 0..10_000 {
            s.push(line);
        }
        s.push(b"\x1b[31merror\x1b[0m: bad k3y-s3cr3t\n");
        for _ in 0..10_000 {
            s.push(line);
        }
        s.push(b"FAIL at the end");
        s.finish();
        let rendered = s.whole(&RenderOptions::default());
        let found: Vec<(u64, String)> = rendered
            .highlights
            .select()
            .into_iter()
            .map(|h| (h.line, h.text))
            .collect();
        assert_eq!(
            found,
            [
                (10_001, "error: bad [REDACTED:KEY]".to_owned()),
                (20_002, "FAIL at the end".to_owned())
            ]
        );
    }

    #[test]
    fn nul_bytes_in_the_skimmed_part_still_refuse_binary() {
        let mut s = sink(4096, 1000, vec![]);
        s.push(&vec![b'a'; 5000]);
        s.push(b"\0\0\0");
        s.push(&vec![b'b'; 50_000]);
        s.finish();
        let rendered = s.whole(&RenderOptions::default());
        assert!(rendered.truncated);
        assert!(!rendered.text.contains("bbbb"), "{}", rendered.text);
    }

    #[test]
    fn a_secret_cut_by_the_skim_never_shows_in_part() {
        let secret = b"s3cr3t-T0KEN-abcdef".to_vec();
        let mut s = sink(4096, 20_000, vec![("TOKEN".into(), secret.clone())]);
        for _ in 0..6 {
            s.push(&vec![b'x'; 5_000]);
        }
        // Enough to push most of the secret out of the ring, leaving its end.
        let mut chunk = secret.clone();
        chunk.extend(vec![b'y'; 4096 - 7]);
        s.push(&chunk);
        s.push(b"\nend\n");
        s.finish();
        let text = s.whole(&RenderOptions::default()).text;
        assert!(!text.contains("abcdef"), "{text}");
        assert!(!text.contains("T0KEN"), "{text}");
        assert!(text.ends_with("end\n"), "{text}");
    }

    #[test]
    fn windows_after_a_skim_carry_on() {
        let mut s = sink(4096, 1000, vec![]);
        s.push(&vec![b'a'; 20_000]);
        let first = s.take_window(&RenderOptions::default());
        assert_eq!(first.original_bytes, 20_000);
        s.push(b"next\n");
        let second = s.take_window(&RenderOptions::default());
        assert_eq!(second.text, "next\n");
        assert_eq!(second.original_bytes, 5);
    }
}
