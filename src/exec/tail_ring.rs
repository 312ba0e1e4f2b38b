//! The newest bytes of a skimmed flood, and counts of everything that went
//! through: what a [`super::glue::Sink`] keeps of a stream it no longer
//! cleans.
//!
//! A circular buffer, so each byte of a gigabyte flood is copied once (and
//! only the newest `cap` bytes of a big read at all), where a growing `Vec`
//! trimmed from the front moved every byte twice. The counts are taken as
//! bytes arrive, since the bytes themselves are overwritten.

/// What a skimmed stretch held beyond the bytes kept.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SkimCounts {
    pub(crate) dropped_bytes: u64,
    pub(crate) dropped_newlines: u64,
    pub(crate) saw_nul: bool,
}

/// Keeps the newest `cap` bytes pushed and counts all of them.
#[derive(Debug, Default)]
pub(crate) struct TailRing {
    buf: Vec<u8>,
    /// Where the oldest byte is once `buf` is full.
    start: usize,
    cap: usize,
    bytes: u64,
    newlines: u64,
    saw_nul: bool,
}

impl TailRing {
    /// An empty ring that keeps at most `cap` bytes (at least 1).
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            ..Self::default()
        }
    }

    /// Whether nothing was pushed since the last [`take`](Self::take).
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Takes a chunk: counts it, keeps its newest bytes.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        self.newlines += memchr::memchr_iter(b'\n', chunk).count() as u64;
        self.saw_nul |= memchr::memchr(0, chunk).is_some();
        let mut rest = &chunk[chunk.len().saturating_sub(self.cap)..];
        if rest.len() == self.cap {
            self.buf.clear();
            self.buf.extend_from_slice(rest);
            self.start = 0;
            return;
        }
        if self.buf.len() < self.cap {
            let take = rest.len().min(self.cap - self.buf.len());
            self.buf.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
        }
        while !rest.is_empty() {
            let n = rest.len().min(self.cap - self.start);
            self.buf[self.start..self.start + n].copy_from_slice(&rest[..n]);
            self.start = (self.start + n) % self.cap;
            rest = &rest[n..];
        }
    }

    /// Counts of everything pushed, as if none of it were kept.
    pub(crate) fn all_dropped(&self) -> SkimCounts {
        SkimCounts {
            dropped_bytes: self.bytes,
            dropped_newlines: self.newlines,
            saw_nul: self.saw_nul,
        }
    }

    /// Empties the ring: the kept bytes in order, and what the rest held.
    pub(crate) fn take(&mut self) -> (Vec<u8>, SkimCounts) {
        let mut kept = Vec::with_capacity(self.buf.len());
        kept.extend_from_slice(&self.buf[self.start..]);
        kept.extend_from_slice(&self.buf[..self.start]);
        let kept_newlines = memchr::memchr_iter(b'\n', &kept).count() as u64;
        let counts = SkimCounts {
            dropped_bytes: self.bytes - kept.len() as u64,
            dropped_newlines: self.newlines - kept_newlines,
            saw_nul: self.saw_nul,
        };
        *self = Self::new(self.cap);
        (kept, counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed(cap: usize, chunks: &[&[u8]]) -> (Vec<u8>, SkimCounts) {
        let mut ring = TailRing::new(cap);
        for chunk in chunks {
            ring.push(chunk);
        }
        ring.take()
    }

    #[test]
    fn keeps_everything_below_the_cap() {
        let (kept, counts) = pushed(10, &[b"ab\n", b"cd"]);
        assert_eq!(kept, b"ab\ncd");
        assert_eq!(counts, SkimCounts::default());
    }

    #[test]
    fn keeps_the_newest_bytes_across_wraps_and_counts_the_rest() {
        let mut all = Vec::new();
        let mut ring = TailRing::new(7);
        for (i, chunk) in [
            &b"12\n45"[..],
            b"6\n8",
            b"9abc\nef",
            b"g",
            b"hij\nklmnopq\n",
        ]
        .into_iter()
        .enumerate()
        {
            ring.push(chunk);
            all.extend_from_slice(chunk);
            if i == 2 {
                assert_eq!(ring.all_dropped().dropped_bytes, all.len() as u64);
            }
        }
        let (kept, counts) = ring.take();
        assert_eq!(kept, &all[all.len() - 7..]);
        assert_eq!(counts.dropped_bytes, (all.len() - 7) as u64);
        let newlines = |b: &[u8]| b.iter().filter(|&&c| c == b'\n').count() as u64;
        assert_eq!(counts.dropped_newlines, newlines(&all[..all.len() - 7]));
        assert!(ring.is_empty(), "take empties it");
    }

    #[test]
    fn a_chunk_bigger_than_the_ring_keeps_its_end() {
        let (kept, counts) = pushed(4, &[b"xy", b"0123456789"]);
        assert_eq!(kept, b"6789");
        assert_eq!(counts.dropped_bytes, 8);
    }

    #[test]
    fn a_nul_anywhere_is_remembered() {
        let (_, counts) = pushed(2, &[b"a\0b", b"cdef"]);
        assert!(counts.saw_nul);
    }
}
