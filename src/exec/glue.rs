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

use std::path::{Path, PathBuf};

use crate::output::{CaptureConfig, Captured, Redactor, SpillStore, StreamCapture, render};
pub use crate::output::{RenderOptions, Rendered};

/// What a capture is built with.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub cap_bytes: usize,
    pub secrets: Vec<(String, Vec<u8>)>,
    pub keep_color: bool,
    pub tty: bool,
    /// Names the spill file (`<tag>-stdout`).
    pub label: String,
    /// The spill store, when the full output is kept on disk.
    pub spill: Option<SpillStore>,
    /// Raw bytes after which the sink skims; `u64::MAX` = never.
    pub skim_after: u64,
}

/// Opens the spill store under `home`; `None` (no file, the fold marker
/// then says so) when it cannot be created.
pub fn open_spill_store(home: &Path, cap_bytes: u64) -> Option<SpillStore> {
    SpillStore::open(home, cap_bytes).ok()
}

/// The newest raw bytes of a skimmed stretch, and what the rest held.
#[derive(Debug, Default)]
struct Skimmed {
    ring: Vec<u8>,
    /// Bytes that passed through the ring and were dropped.
    dropped_bytes: u64,
    dropped_newlines: u64,
    saw_nul: bool,
}

/// One stream's capture.
#[derive(Debug)]
pub struct Sink {
    capture: StreamCapture,
    total: u64,
    skim_after: u64,
    ring_cap: usize,
    /// Bytes cut from the ring's start before it is cleaned, so a secret
    /// split by the skim cannot show half of itself.
    secret_guard: usize,
    skimmed: Skimmed,
    /// Complete lines in the spill file when the skim began.
    lines_at_skim: Option<u64>,
}

impl Sink {
    pub fn new(config: SinkConfig) -> Self {
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
                tty: config.tty,
            }),
            total: 0,
            skim_after: config.skim_after,
            ring_cap: (config.cap_bytes / 2).max(4096),
            secret_guard,
            skimmed: Skimmed::default(),
            lines_at_skim: None,
        }
    }

    /// Takes a chunk; never blocks, never fails.
    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.total <= self.skim_after && self.lines_at_skim.is_none() {
            self.capture.push(bytes);
            // Binary output is refused whole: cleaning the rest of it would
            // only cost time, so the skim starts after the first NUL.
            if memchr::memchr(0, bytes).is_some() {
                let so_far = self.capture.whole();
                self.lines_at_skim = Some((so_far.first_line - 1) + so_far.lines);
            }
            return;
        }
        if self.lines_at_skim.is_none() {
            let so_far = self.capture.whole();
            self.lines_at_skim = Some((so_far.first_line - 1) + so_far.lines);
        }
        let skimmed = &mut self.skimmed;
        skimmed.saw_nul |= memchr::memchr(0, bytes).is_some();
        skimmed.ring.extend_from_slice(bytes);
        if skimmed.ring.len() > 2 * self.ring_cap {
            let excess = skimmed.ring.len() - self.ring_cap;
            skimmed.dropped_bytes += excess as u64;
            skimmed.dropped_newlines +=
                memchr::memchr_iter(b'\n', &skimmed.ring[..excess]).count() as u64;
            skimmed.ring.drain(..excess);
        }
    }

    /// Sends the ring through the pipeline; returns what it left out.
    fn flush_skimmed(&mut self) -> Skimmed {
        let mut skimmed = std::mem::take(&mut self.skimmed);
        if skimmed.ring.is_empty() {
            return skimmed;
        }
        let mut cut = 0;
        if skimmed.dropped_bytes > 0 {
            // Start the cleaned tail on a line, and past any half secret.
            let line_start = memchr::memchr(b'\n', &skimmed.ring).map_or(0, |i| i + 1);
            cut = line_start.max(self.secret_guard).min(skimmed.ring.len());
        }
        skimmed.dropped_bytes += cut as u64;
        skimmed.dropped_newlines += memchr::memchr_iter(b'\n', &skimmed.ring[..cut]).count() as u64;
        self.capture.push(&skimmed.ring[cut..]);
        skimmed.ring = Vec::new();
        skimmed
    }

    /// The stream ended.
    pub fn finish(&mut self) {
        let skimmed = self.flush_skimmed();
        self.skimmed.dropped_bytes = skimmed.dropped_bytes;
        self.skimmed.dropped_newlines = skimmed.dropped_newlines;
        self.skimmed.saw_nul = skimmed.saw_nul;
        self.capture.finish();
    }

    /// Raw bytes over all windows.
    pub fn total_raw_bytes(&self) -> u64 {
        self.total
    }

    /// The spill file, once something was written to it.
    pub fn spill_path(&self) -> Option<PathBuf> {
        self.capture.spill_path()
    }

    /// What arrived since the last take, rendered.
    pub fn take_window(&mut self, opts: &RenderOptions) -> Rendered {
        let skimmed = self.flush_skimmed();
        let mut captured = self.capture.take_window();
        self.account_for(&mut captured, &skimmed);
        render(&captured, opts)
    }

    /// Everything (since the last take), rendered.
    pub fn whole(&self, opts: &RenderOptions) -> Rendered {
        let mut captured = self.capture.whole();
        let mut skimmed_now = Skimmed {
            dropped_bytes: self.skimmed.dropped_bytes + self.skimmed.ring.len() as u64,
            dropped_newlines: self.skimmed.dropped_newlines,
            saw_nul: self.skimmed.saw_nul,
            ring: Vec::new(),
        };
        skimmed_now.dropped_newlines +=
            memchr::memchr_iter(b'\n', &self.skimmed.ring).count() as u64;
        self.account_for(&mut captured, &skimmed_now);
        render(&captured, opts)
    }
}

impl Sink {
    /// Adds what the skim left out to a window, so its counts and the fold
    /// marker cover every byte, and the marker never names spill lines that
    /// were not written.
    fn account_for(&self, captured: &mut Captured, skimmed: &Skimmed) {
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
