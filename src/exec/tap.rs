//! Attaching to a command's stdio: a raw tap of its output for a caller
//! that forwards it as it comes (a gRPC `Start` stream), a stdin pipe on
//! pipes, and the size of its PTY. See [`Attach`] and
//! [`Execution::spawn_attached`](super::Execution::spawn_attached).
//!
//! The tap is a bounded channel of chunks. A chunk is what the pump read
//! from one pipe (redacted) since the receiver last caught up, up to
//! [`TAP_CHUNK_BYTES`]: the pump reads straight into it, so a byte is
//! copied once on its way from the pipe to the caller. At the end of a
//! round of reads the chunk goes out, unless the receiver is behind (it
//! has not taken every chunk before; it wakes the pump when it takes one)
//! or the chunk was opened right after the last went out, in a flood (it
//! gathers for [`TAP_GATHER`]); meanwhile the next rounds add to it, and a
//! full chunk goes out at once. So output after a pause goes out at the
//! end of its round, as small as it came, and a flood goes out in 512 KiB
//! messages instead of a pipe write or two each (a client pays per
//! message: see docs/PERFORMANCE.md). Back-pressure goes onto the
//! command, never onto the pump:
//! when the channel is full the pump keeps its unsent chunk and stops
//! reading that command's output (so the pipe fills and the command's
//! `write` blocks, as it would behind a slow terminal) while it goes on
//! watching the exit, the command timeout and the drain bound. The
//! receiver wakes the pump (a byte on a socket pair) when it takes a chunk
//! from a full channel. Memory is therefore bounded by the channel's
//! capacity times [`TAP_CHUNK_BYTES`], whatever the command writes; an
//! alternative that drops output when the caller lags would lose bytes of
//! a stream the caller asked for whole.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::state::StreamKind;
use crate::output::redact::Redactor;

/// Chunks a tap holds before the command is held back (each at most
/// [`TAP_CHUNK_BYTES`]: at most 4 MiB in flight).
pub(crate) const DEFAULT_TAP_CHUNKS: usize = 8;

/// The most bytes one chunk holds: a round of reads that finds more in
/// the pipe sends them in several chunks. Under the `serve` malloc's mmap
/// threshold, so a freed chunk's memory is reused, not faulted in anew.
pub(crate) const TAP_CHUNK_BYTES: usize = 512 * 1024;

/// How long a chunk opened in a flood (right after the last one went
/// out) gathers output before it goes out, when it does not fill first:
/// a client pays per message, and a flood read as it comes would go out
/// in pieces of a pipe write or two. Output after a pause goes out at once.
pub(crate) const TAP_GATHER: Duration = Duration::from_millis(1);

/// What a caller attaches to a command it spawns.
#[derive(Debug, Default)]
pub struct Attach {
    /// The output goes here, raw (no CRLF folding, colour kept) and
    /// redacted, instead of into the captures: `take_output` and `finish`
    /// of a tapped execution render nothing.
    pub tap: Option<OutputTap>,
    /// On pipes, stdin is a pipe from us instead of `/dev/null`
    /// ([`Execution::write_stdin`](super::Execution::write_stdin),
    /// [`Execution::close_stdin`](super::Execution::close_stdin)).
    pub stdin_pipe: bool,
    /// On a PTY, its size (columns, rows) instead of the default.
    pub pty_size: Option<(u16, u16)>,
}

/// One read of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TapChunk {
    pub(crate) kind: StreamKind,
    pub(crate) bytes: Vec<u8>,
}

/// The pump's end of a tap.
#[derive(Debug)]
pub struct OutputTap {
    tx: mpsc::Sender<TapChunk>,
    /// The pump waits for the receiver to take a chunk (the channel is
    /// full, or a chunk is held open): the receiver wakes it.
    wake_on_take: Arc<AtomicBool>,
    wake: UnixStream,
}

/// The caller's end: chunks in order, `None` once the output is over.
#[derive(Debug)]
pub(crate) struct TapReceiver {
    rx: mpsc::Receiver<TapChunk>,
    wake_on_take: Arc<AtomicBool>,
    wake: UnixStream,
}

/// A tap holding at most `capacity` chunks.
pub(crate) fn output_tap(capacity: usize) -> std::io::Result<(OutputTap, TapReceiver)> {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let (pump_side, receiver_side) = UnixStream::pair()?;
    pump_side.set_nonblocking(true)?;
    receiver_side.set_nonblocking(true)?;
    let wake_on_take = Arc::new(AtomicBool::new(false));
    Ok((
        OutputTap {
            tx,
            wake_on_take: Arc::clone(&wake_on_take),
            wake: pump_side,
        },
        TapReceiver {
            rx,
            wake_on_take,
            wake: receiver_side,
        },
    ))
}

impl TapReceiver {
    /// The next chunk; `None` when the command's output is over (or was
    /// cut at the drain bound).
    pub(crate) async fn recv(&mut self) -> Option<TapChunk> {
        let chunk = self.rx.recv().await;
        if self.wake_on_take.load(Ordering::SeqCst) {
            let _ = (&self.wake).write(&[1]);
        }
        chunk
    }
}

/// The tap as the pump drives it: the sender, the chunk being filled, the
/// chunks the full channel did not take, and a redactor per stream.
#[derive(Debug)]
pub(crate) struct TapWriter {
    tap: OutputTap,
    open: Option<TapChunk>,
    /// The open chunk outlived a round: the receiver was behind, or a
    /// flood's chunk gathers for [`TAP_GATHER`].
    holding: bool,
    /// When the open chunk, opened in a flood, goes out at the latest.
    gathering_until: Option<Instant>,
    /// When the last chunk went out.
    last_sealed_at: Option<Instant>,
    pending: VecDeque<TapChunk>,
    redactors: Option<[Redactor; 2]>,
    closed: bool,
}

impl TapWriter {
    pub(crate) fn new(tap: OutputTap, secrets: &[(String, Vec<u8>)]) -> Self {
        let redactors = (!secrets.is_empty()).then(|| {
            [
                Redactor::new(secrets.to_vec()),
                Redactor::new(secrets.to_vec()),
            ]
        });
        Self {
            tap,
            open: None,
            holding: false,
            gathering_until: None,
            last_sealed_at: None,
            pending: VecDeque::new(),
            redactors,
            closed: false,
        }
    }

    /// The channel is full: the pump reads no more output until it is not.
    pub(super) fn is_blocked(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The pump waits for the receiver to take a chunk: the channel is
    /// full, or a chunk is held open until the receiver catches up.
    pub(super) fn waits_on_receiver(&self) -> bool {
        self.is_blocked() || self.holding
    }

    /// The descriptor that turns readable when the receiver took a chunk.
    pub(super) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.tap.wake.as_fd()
    }

    /// When a held chunk goes out unless the receiver is behind: the pump
    /// waits no longer than this.
    pub(super) fn hold_deadline(&self) -> Option<Instant> {
        self.gathering_until.filter(|_| self.holding)
    }

    /// After a wait: the unsent chunks are offered again, and a held chunk
    /// goes out if it may (see [`end_round`](Self::end_round)).
    pub(super) fn after_wait(&mut self) {
        if !self.waits_on_receiver() {
            return;
        }
        if self.retry() {
            self.release_held();
        }
    }

    /// The end of a round of reads: the chunk being filled goes out, unless
    /// the receiver has not taken every chunk before it (the receiver
    /// wakes the pump when it takes one) or the chunk belongs to a flood
    /// and gathers on for [`TAP_GATHER`]. Either way the next rounds add to
    /// it, and it goes out when full.
    pub(super) fn end_round(&mut self) {
        if self.closed || self.open.as_ref().is_none_or(|open| open.bytes.is_empty()) {
            return;
        }
        self.holding = true;
        self.release_held();
    }

    fn release_held(&mut self) {
        if !self.holding {
            return;
        }
        if !self.caught_up() {
            self.tap.wake_on_take.store(true, Ordering::SeqCst);
            // The receiver may have taken the last chunk before it could
            // see the flag: look once more, or it would never wake us.
            if !self.caught_up() {
                return;
            }
        }
        if self
            .gathering_until
            .is_some_and(|until| Instant::now() < until)
        {
            return;
        }
        self.seal();
    }

    /// Every chunk handed over has been taken by the receiver.
    fn caught_up(&self) -> bool {
        self.pending.is_empty() && self.tap.tx.capacity() == self.tap.tx.max_capacity()
    }

    /// The chunk a read of `kind` may go straight into, with room for at
    /// least one more byte; `None` when the output is redacted (the read
    /// then goes through [`push`](Self::push)). A chunk of the other
    /// stream is sent first.
    pub(super) fn room(&mut self, kind: StreamKind) -> Option<&mut Vec<u8>> {
        if self.redactors.is_some() {
            return None;
        }
        self.seal_other_than(kind);
        if self.open.is_none() {
            self.open_chunk(kind, Vec::with_capacity(TAP_CHUNK_BYTES));
        }
        self.open.as_mut().map(|open| &mut open.bytes)
    }

    /// A read went into [`room`](Self::room): a full chunk is sent.
    pub(super) fn filled(&mut self) {
        if self
            .open
            .as_ref()
            .is_some_and(|open| open.bytes.len() >= TAP_CHUNK_BYTES)
        {
            self.seal();
        }
    }

    /// Takes one read of output that did not go into [`room`](Self::room)
    /// (redacted on the way).
    pub(super) fn push(&mut self, kind: StreamKind, bytes: &[u8]) {
        let bytes = match self.redactors.as_mut() {
            Some(redactors) => redactors[index(kind)].push(bytes),
            None => bytes.to_vec(),
        };
        self.append(kind, &bytes);
        self.filled();
    }

    /// A stream closed: what its redactor held back goes out with the rest.
    pub(super) fn finish_stream(&mut self, kind: StreamKind) {
        if let Some(rest) = self.redactors.as_mut().map(|r| r[index(kind)].finish()) {
            self.append(kind, &rest);
        }
        self.seal();
    }

    /// The chunk being filled goes out now.
    pub(super) fn seal(&mut self) {
        self.holding = false;
        let Some(mut chunk) = self.open.take() else {
            return;
        };
        self.last_sealed_at = Some(Instant::now());
        if self.closed || chunk.bytes.is_empty() {
            return;
        }
        // A trickle's chunk gives back the room it did not use (in place:
        // glibc shrinks a heap chunk without moving it).
        if chunk.bytes.len() < chunk.bytes.capacity() / 2 {
            chunk.bytes.shrink_to_fit();
        }
        self.pending.push_back(chunk);
        self.retry();
    }

    /// A chunk of the other stream being filled goes out first: a chunk
    /// holds one stream's bytes.
    fn seal_other_than(&mut self, kind: StreamKind) {
        if self.open.as_ref().is_some_and(|open| open.kind != kind) {
            self.seal();
        }
    }

    fn append(&mut self, kind: StreamKind, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.seal_other_than(kind);
        match self.open.as_mut() {
            Some(open) => open.bytes.extend_from_slice(bytes),
            None => self.open_chunk(kind, bytes.to_vec()),
        }
    }

    /// A new chunk: one opened right after the last went out belongs to a
    /// flood, and gathers until [`TAP_GATHER`] from now.
    fn open_chunk(&mut self, kind: StreamKind, bytes: Vec<u8>) {
        let now = Instant::now();
        self.gathering_until = self
            .last_sealed_at
            .filter(|at| now.duration_since(*at) < TAP_GATHER)
            .map(|_| now + TAP_GATHER);
        self.open = Some(TapChunk { kind, bytes });
    }

    /// Tries to hand the unsent chunks over again (after a wake-up);
    /// returns whether the tap is free.
    pub(super) fn retry(&mut self) -> bool {
        let mut sink = [0u8; 64];
        while matches!((&self.tap.wake).read(&mut sink), Ok(n) if n > 0) {}
        while let Some(chunk) = self.pending.pop_front() {
            match self.try_send(chunk) {
                Ok(()) => {}
                Err(chunk) => {
                    self.pending.push_front(chunk);
                    return false;
                }
            }
        }
        true
    }

    /// Sends one chunk, or gives it back when the channel is full (with
    /// the receiver told to wake the pump). Into a closed channel the
    /// output goes nowhere.
    fn try_send(&mut self, chunk: TapChunk) -> Result<(), TapChunk> {
        if self.closed {
            return Ok(());
        }
        match self.tap.tx.try_send(chunk) {
            Ok(()) => {
                self.tap.wake_on_take.store(self.holding, Ordering::SeqCst);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.closed = true;
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(chunk)) => {
                self.tap.wake_on_take.store(true, Ordering::SeqCst);
                // The receiver may have taken a chunk before it could see
                // the flag: look once more, or it would never wake us.
                match self.tap.tx.try_send(chunk) {
                    Ok(()) => {
                        self.tap.wake_on_take.store(self.holding, Ordering::SeqCst);
                        Ok(())
                    }
                    Err(mpsc::error::TrySendError::Full(chunk)) => Err(chunk),
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        self.closed = true;
                        Ok(())
                    }
                }
            }
        }
    }
}

fn index(kind: StreamKind) -> usize {
    match kind {
        StreamKind::Stdout => 0,
        StreamKind::Stderr => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(bytes: &[u8]) -> TapChunk {
        TapChunk {
            kind: StreamKind::Stdout,
            bytes: bytes.to_vec(),
        }
    }

    #[tokio::test]
    async fn a_full_tap_keeps_one_chunk_and_is_woken_when_the_receiver_takes_one() {
        let (tap, mut receiver) = output_tap(1).unwrap();
        let mut writer = TapWriter::new(tap, &[]);
        writer.push(StreamKind::Stdout, b"one");
        writer.seal();
        assert!(!writer.is_blocked());
        writer.push(StreamKind::Stdout, b"two");
        writer.seal();
        assert!(writer.is_blocked());
        assert_eq!(receiver.recv().await, Some(chunk(b"one")));
        let mut fds = [nix::poll::PollFd::new(
            writer.wake_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        assert_eq!(nix::poll::poll(&mut fds, 1000u16).unwrap(), 1);
        assert!(writer.retry());
        drop(writer);
        assert_eq!(receiver.recv().await, Some(chunk(b"two")));
        assert_eq!(receiver.recv().await, None);
    }

    #[tokio::test]
    async fn secrets_never_reach_the_tap_even_split_across_reads() {
        let (tap, mut receiver) = output_tap(8).unwrap();
        let mut writer = TapWriter::new(tap, &[("TOKEN".into(), b"hunter2".to_vec())]);
        writer.push(StreamKind::Stdout, b"pass=hun");
        writer.seal();
        writer.push(StreamKind::Stdout, b"ter2 done\n");
        writer.seal();
        writer.finish_stream(StreamKind::Stdout);
        drop(writer);
        let mut all = Vec::new();
        while let Some(c) = receiver.recv().await {
            all.extend(c.bytes);
        }
        let text = String::from_utf8(all).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("[REDACTED:TOKEN]"), "{text}");
    }

    #[tokio::test]
    async fn output_for_a_receiver_that_went_away_is_dropped() {
        let (tap, receiver) = output_tap(1).unwrap();
        drop(receiver);
        let mut writer = TapWriter::new(tap, &[]);
        writer.push(StreamKind::Stdout, b"one");
        writer.seal();
        writer.push(StreamKind::Stdout, b"two");
        writer.seal();
        assert!(!writer.is_blocked());
    }

    #[tokio::test]
    async fn reads_of_one_round_go_out_as_one_chunk_and_a_full_one_at_once() {
        let (tap, mut receiver) = output_tap(8).unwrap();
        let mut writer = TapWriter::new(tap, &[]);
        for part in [&b"ab"[..], b"cd"] {
            writer
                .room(StreamKind::Stdout)
                .unwrap()
                .extend_from_slice(part);
            writer.filled();
        }
        writer.seal();
        assert_eq!(receiver.recv().await, Some(chunk(b"abcd")));
        let full = vec![b'x'; TAP_CHUNK_BYTES];
        writer
            .room(StreamKind::Stdout)
            .unwrap()
            .extend_from_slice(&full);
        writer.filled();
        assert_eq!(receiver.recv().await, Some(chunk(&full)));
        writer.room(StreamKind::Stdout).unwrap().push(b'o');
        writer.room(StreamKind::Stderr).unwrap().push(b'e');
        writer.seal();
        assert_eq!(receiver.recv().await, Some(chunk(b"o")));
        let err = receiver.recv().await.unwrap();
        assert_eq!((err.kind, err.bytes), (StreamKind::Stderr, b"e".to_vec()));
    }

    #[tokio::test]
    async fn a_chunk_sealed_while_the_tap_is_full_waits_its_turn() {
        let (tap, mut receiver) = output_tap(1).unwrap();
        let mut writer = TapWriter::new(tap, &[("T".into(), b"secret".to_vec())]);
        writer.push(StreamKind::Stdout, b"one");
        writer.seal();
        writer.push(StreamKind::Stdout, b"two");
        writer.seal();
        assert!(writer.is_blocked());
        // The stream closes while its last chunk still waits: nothing is lost.
        writer.push(StreamKind::Stdout, b"three");
        writer.finish_stream(StreamKind::Stdout);
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(receiver.recv().await.unwrap().bytes);
            writer.retry();
        }
        assert_eq!(got, [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
    }

    fn try_take(receiver: &mut TapReceiver) -> Option<Vec<u8>> {
        receiver.rx.try_recv().ok().map(|c| c.bytes)
    }

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        nix::poll::poll(&mut fds, 1000u16).unwrap() == 1
    }

    #[test]
    fn a_round_after_a_pause_goes_out_at_its_end() {
        let (tap, mut receiver) = output_tap(8).unwrap();
        let mut writer = TapWriter::new(tap, &[]);
        writer.push(StreamKind::Stdout, b"$ ");
        writer.end_round();
        assert_eq!(try_take(&mut receiver), Some(b"$ ".to_vec()));
        std::thread::sleep(TAP_GATHER * 2);
        writer.push(StreamKind::Stdout, b"next");
        writer.end_round();
        assert_eq!(try_take(&mut receiver), Some(b"next".to_vec()));
        assert!(!writer.waits_on_receiver());
    }

    #[test]
    fn a_flood_gathers_its_rounds_into_one_chunk_until_the_gathering_time_is_up() {
        let (tap, mut receiver) = output_tap(8).unwrap();
        let mut writer = TapWriter::new(tap, &[]);
        writer.push(StreamKind::Stdout, b"a");
        writer.end_round();
        assert_eq!(try_take(&mut receiver), Some(b"a".to_vec()));
        for part in [&b"b"[..], b"c"] {
            writer.push(StreamKind::Stdout, part);
            writer.end_round();
        }
        assert_eq!(try_take(&mut receiver), None);
        let deadline = writer
            .hold_deadline()
            .expect("a flood's chunk has a deadline");
        assert!(deadline <= Instant::now() + TAP_GATHER);
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        writer.after_wait();
        assert_eq!(try_take(&mut receiver), Some(b"bc".to_vec()));
        // A full chunk does not wait for its time.
        writer.push(StreamKind::Stdout, &vec![b'x'; TAP_CHUNK_BYTES]);
        assert_eq!(
            try_take(&mut receiver).map(|b| b.len()),
            Some(TAP_CHUNK_BYTES)
        );
    }

    #[tokio::test]
    async fn while_the_receiver_is_behind_a_chunk_grows_and_goes_when_it_catches_up() {
        let (tap, mut receiver) = output_tap(8).unwrap();
        let mut writer = TapWriter::new(tap, &[]);
        writer.push(StreamKind::Stdout, b"one");
        writer.end_round();
        std::thread::sleep(TAP_GATHER * 2);
        writer.push(StreamKind::Stdout, b"two");
        writer.end_round();
        writer.push(StreamKind::Stdout, b"three");
        writer.end_round();
        assert!(writer.waits_on_receiver());
        assert_eq!(
            writer.hold_deadline(),
            None,
            "no deadline: the receiver wakes us"
        );
        assert_eq!(receiver.recv().await, Some(chunk(b"one")));
        assert!(readable(writer.wake_fd()));
        writer.after_wait();
        assert_eq!(receiver.recv().await, Some(chunk(b"twothree")));
        assert!(!writer.waits_on_receiver());
    }
}
