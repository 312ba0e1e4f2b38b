//! The byte cap on what is held in memory: the first half of the cap keeps
//! the head of the output, the second half a rolling tail (where errors and
//! summaries are). Everything is counted, bytes and lines, so the part in
//! between can be described exactly even though it is not kept.
//!
//! Pushing is a couple of `memcpy`s: it never blocks and never fails.

/// Head and rolling tail of a stream, within a byte cap.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    /// Ring storage; grows up to `tail_cap`, then wraps at `tail_start`.
    tail: Vec<u8>,
    tail_start: usize,
    /// The latest byte that fell out between head and tail.
    last_dropped: Option<u8>,
    bytes: u64,
    newlines: u64,
}

impl HeadTail {
    /// A store holding at most `cap` bytes (half head, half tail).
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Self {
            head_cap,
            tail_cap: cap - head_cap,
            head: Vec::new(),
            tail: Vec::new(),
            tail_start: 0,
            last_dropped: None,
            bytes: 0,
            newlines: 0,
        }
    }

    /// Appends `data`, dropping the oldest non-head bytes past the cap.
    pub fn push(&mut self, data: &[u8]) {
        self.push_counted(data, memchr::memchr_iter(b'\n', data).count() as u64);
    }

    /// [`Self::push`] of `data` whose `newlines` the caller counted already.
    pub fn push_counted(&mut self, data: &[u8], newlines: u64) {
        self.bytes += data.len() as u64;
        self.newlines += newlines;
        let to_head = self
            .head_cap
            .saturating_sub(self.head.len())
            .min(data.len());
        self.head.extend_from_slice(&data[..to_head]);
        self.push_tail(&data[to_head..]);
    }

    fn push_tail(&mut self, mut data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let cap = self.tail_cap;
        if data.len() >= cap {
            let keep_from = data.len() - cap;
            self.last_dropped = if keep_from > 0 {
                Some(data[keep_from - 1])
            } else {
                self.newest_tail_byte().or(self.last_dropped)
            };
            self.tail.clear();
            self.tail.extend_from_slice(&data[keep_from..]);
            self.tail_start = 0;
            return;
        }
        if self.tail.len() < cap {
            let fill = (cap - self.tail.len()).min(data.len());
            self.tail.extend_from_slice(&data[..fill]);
            data = &data[fill..];
            if data.is_empty() {
                return;
            }
        }
        // Full ring: `data` replaces the oldest `data.len()` bytes.
        let count = data.len();
        self.last_dropped = Some(self.tail[(self.tail_start + count - 1) % cap]);
        let first = (cap - self.tail_start).min(count);
        self.tail[self.tail_start..self.tail_start + first].copy_from_slice(&data[..first]);
        self.tail[..count - first].copy_from_slice(&data[first..]);
        self.tail_start = (self.tail_start + count) % cap;
    }

    fn newest_tail_byte(&self) -> Option<u8> {
        if self.tail.is_empty() {
            return None;
        }
        let newest = (self.tail_start + self.tail.len() - 1) % self.tail.len();
        Some(self.tail[newest])
    }

    /// The kept head.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The kept tail, oldest byte first.
    pub fn tail(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.tail.len());
        out.extend_from_slice(&self.tail[self.tail_start..]);
        out.extend_from_slice(&self.tail[..self.tail_start]);
        out
    }

    /// Bytes pushed in total.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Newlines pushed in total.
    pub fn newlines(&self) -> u64 {
        self.newlines
    }

    /// Bytes between head and tail that were not kept.
    pub fn omitted_bytes(&self) -> u64 {
        self.bytes - (self.head.len() + self.tail.len()) as u64
    }

    /// True when the kept tail begins a line (what precedes it is a `\n`,
    /// or nothing).
    pub fn tail_starts_line(&self) -> bool {
        let before = if self.omitted_bytes() > 0 {
            self.last_dropped
        } else {
            self.head.last().copied()
        };
        before.is_none_or(|b| b == b'\n')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_under_the_cap() {
        let mut store = HeadTail::new(16);
        store.push(b"abc\n");
        store.push(b"def\n");
        assert_eq!(store.head(), b"abc\ndef\n");
        assert!(store.tail().is_empty());
        assert_eq!(store.omitted_bytes(), 0);
        assert_eq!(store.newlines(), 2);
    }

    #[test]
    fn keeps_head_and_rolling_tail_and_counts_everything() {
        let mut store = HeadTail::new(8);
        for chunk in [&b"0123"[..], b"4567", b"89", b"abcdef", b"g"] {
            store.push(chunk);
        }
        assert_eq!(store.head(), b"0123");
        assert_eq!(store.tail(), b"defg");
        assert_eq!(store.bytes(), 17);
        assert_eq!(store.omitted_bytes(), 9);
    }

    #[test]
    fn matches_a_naive_model_for_every_chunking() {
        let data: Vec<u8> = (0..200_u8)
            .map(|i| if i % 7 == 0 { b'\n' } else { i })
            .collect();
        for chunk in 1..40 {
            let mut store = HeadTail::new(30);
            for piece in data.chunks(chunk) {
                store.push(piece);
            }
            assert_eq!(store.head(), &data[..15], "chunk {chunk}");
            assert_eq!(store.tail(), &data[data.len() - 15..], "chunk {chunk}");
            let before = data[data.len() - 16];
            assert_eq!(store.tail_starts_line(), before == b'\n', "chunk {chunk}");
        }
    }

    #[test]
    fn knows_whether_the_tail_starts_a_line() {
        let mut store = HeadTail::new(8);
        store.push(b"aaaa\nbb\ncccc");
        // head "aaaa", tail "cccc": the dropped "\nbb\n" ends with a newline.
        assert!(store.tail_starts_line());
        store.push(b"d");
        assert!(!store.tail_starts_line());
    }

    #[test]
    fn a_zero_cap_keeps_nothing_but_counts() {
        let mut store = HeadTail::new(0);
        store.push(b"a\nb\n");
        assert!(store.head().is_empty() && store.tail().is_empty());
        assert_eq!(store.omitted_bytes(), 4);
        assert_eq!(store.newlines(), 2);
    }
}
