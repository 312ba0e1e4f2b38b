//! Attaching to a command's stdio: a raw tap of its output for a caller
//! that forwards it as it comes (a gRPC `Start` stream), a stdin pipe on
//! pipes, and the size of its PTY. See [`Attach`] and
//! [`Execution::spawn_attached`](super::Execution::spawn_attached).
//!
//! The tap is a bounded channel of chunks. A chunk is what one round of
//! the pump found in one pipe (redacted), up to [`TAP_CHUNK_BYTES`]: the
//! pump reads straight into it, so a byte is copied once on its way from
//! the pipe to the caller, and a flood goes out in a few large messages
//! instead of one per read (a client pays per message), while output that
//! trickles goes out at once, as small as it came. Back-pressure goes
//! onto the command, never onto the pump:
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
    blocked: Arc<AtomicBool>,
    wake: UnixStream,
}

/// The caller's end: chunks in order, `None` once the output is over.
#[derive(Debug)]
pub(crate) struct TapReceiver {
    rx: mpsc::Receiver<TapChunk>,
    blocked: Arc<AtomicBool>,
    wake: UnixStream,
}

/// A tap holding at most `capacity` chunks.
pub(crate) fn output_tap(capacity: usize) -> std::io::Result<(OutputTap, TapReceiver)> {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let (pump_side, receiver_side) = UnixStream::pair()?;
    pump_side.set_nonblocking(true)?;
    receiver_side.set_nonblocking(true)?;
    let blocked = Arc::new(AtomicBool::new(false));
    Ok((
        OutputTap {
            tx,
            blocked: Arc::clone(&blocked),
            wake: pump_side,
        },
        TapReceiver {
            rx,
            blocked,
            wake: receiver_side,
        },
    ))
}

impl TapReceiver {
    /// The next chunk; `None` when the command's output is over (or was
    /// cut at the drain bound).
    pub(crate) async fn recv(&mut self) -> Option<TapChunk> {
        let chunk = self.rx.recv().await;
        if self.blocked.load(Ordering::Acquire) {
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
            pending: VecDeque::new(),
            redactors,
            closed: false,
        }
    }

    /// The channel is full: the pump reads no more output until it is not.
    pub(super) fn is_blocked(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The descriptor that turns readable when the receiver took a chunk.
    pub(super) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.tap.wake.as_fd()
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
        let open = self.open.get_or_insert_with(|| TapChunk {
            kind,
            bytes: Vec::with_capacity(TAP_CHUNK_BYTES),
        });
        Some(&mut open.bytes)
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

    /// The end of a round of reads: the chunk being filled goes out.
    pub(super) fn seal(&mut self) {
        let Some(mut chunk) = self.open.take() else {
            return;
        };
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
            None => {
                self.open = Some(TapChunk {
                    kind,
                    bytes: bytes.to_vec(),
                })
            }
        }
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
                self.tap.blocked.store(false, Ordering::Release);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.closed = true;
                Ok(())
            }
            Err(mpsc::error::TrySendError::Full(chunk)) => {
                self.tap.blocked.store(true, Ordering::Release);
                // The receiver may have taken a chunk before it could see
                // the flag: look once more, or it would never wake us.
                match self.tap.tx.try_send(chunk) {
                    Ok(()) => {
                        self.tap.blocked.store(false, Ordering::Release);
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
}
