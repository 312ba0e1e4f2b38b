//! The seam between the engine and the output pipeline: one capture per
//! stream (or one for both, in arrival order), fed by the pump thread and
//! read by `take_output` and `finish`.
//!
//! Until `crate::output` lands this holds a minimal head-and-tail buffer with
//! the same shape ([`RenderOptions`], [`Rendered`]), so callers compile
//! against the final types.

use std::path::PathBuf;

/// How a capture is turned into text for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderOptions {
    /// Fold to about this many tokens (4 bytes each).
    pub max_output_tokens: usize,
    /// Keep SGR colour.
    pub keep_color: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            max_output_tokens: 10_000,
            keep_color: false,
        }
    }
}

/// Text for the model, and what it stands for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    pub truncated: bool,
    pub original_bytes: u64,
    pub original_token_count: u64,
}

/// What a capture is built with.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub cap_bytes: usize,
    pub secrets: Vec<(String, Vec<u8>)>,
    pub keep_color: bool,
    pub tty: bool,
    pub label: String,
    pub home: PathBuf,
    pub spill: bool,
    pub spill_cap_bytes: u64,
}

/// One stream's capture.
#[derive(Debug)]
pub struct Sink {
    cap: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    total: u64,
    window_start: u64,
}

impl Sink {
    pub fn new(config: SinkConfig) -> Self {
        Self {
            cap: config.cap_bytes,
            head: Vec::new(),
            tail: std::collections::VecDeque::new(),
            total: 0,
            window_start: 0,
        }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_room = (self.cap / 2).saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(head_room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(rest);
        let tail_cap = self.cap - self.cap / 2;
        while self.tail.len() > tail_cap {
            self.tail.pop_front();
        }
    }

    pub fn finish(&mut self) {}

    pub fn total_raw_bytes(&self) -> u64 {
        self.total
    }

    pub fn spill_path(&self) -> Option<PathBuf> {
        None
    }

    pub fn take_window(&mut self, opts: &RenderOptions) -> Rendered {
        let whole = self.whole(opts);
        let start = self.window_start;
        self.window_start = self.total;
        if start == 0 {
            whole
        } else {
            let keep = (self.total - start) as usize;
            let bytes = whole.text.as_bytes();
            let from = bytes.len().saturating_sub(keep);
            Rendered {
                text: String::from_utf8_lossy(&bytes[from..]).into_owned(),
                truncated: whole.truncated,
                original_bytes: self.total - start,
                original_token_count: (self.total - start).div_ceil(4),
            }
        }
    }

    pub fn whole(&self, opts: &RenderOptions) -> Rendered {
        let mut bytes = self.head.clone();
        bytes.extend(self.tail.iter());
        let budget = opts.max_output_tokens.saturating_mul(4);
        let truncated = self.total > bytes.len() as u64 || bytes.len() > budget;
        if bytes.len() > budget {
            let half = budget / 2;
            let mut folded = bytes[..half].to_vec();
            folded.extend_from_slice(b"\n[... output folded ...]\n");
            folded.extend_from_slice(&bytes[bytes.len() - half..]);
            bytes = folded;
        }
        Rendered {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            truncated,
            original_bytes: self.total,
            original_token_count: self.total.div_ceil(4),
        }
    }
}
