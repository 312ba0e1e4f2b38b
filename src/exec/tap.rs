//! Attaching to a command's stdio: a raw tap of its output for a caller
//! that forwards it as it comes (a gRPC `Start` stream), a stdin pipe on
//! pipes, and the size of its PTY. See [`Attach`] and
//! [`Execution::spawn_attached`](super::Execution::spawn_attached).
//!
//! The tap is a bounded channel of chunks (each one `read` of the pump,
//! redacted). Back-pressure goes onto the command, never onto the pump:
//! when the channel is full the pump keeps its one unsent chunk and stops
//! reading that command's output (so the pipe fills and the command's
//! `write` blocks, as it would behind a slow terminal) while it goes on
//! watching the exit, the command timeout and the drain bound. The
//! receiver wakes the pump (a byte on a socket pair) when it takes a chunk
//! from a full channel. Memory is therefore bounded by the channel's
//! capacity times the pump's read size, whatever the command writes; an
//! alternative that drops output when the caller lags would lose bytes of
//! a stream the caller asked for whole.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::mpsc;

use super::state::StreamKind;
use crate::output::redact::Redactor;

/// Chunks a tap holds before the command is held back (each is at most
/// one pump read, 128 KiB: about 2 MiB in flight).
pub(crate) const DEFAULT_TAP_CHUNKS: usize = 16;

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

/// The tap as the pump drives it: the sender, the one chunk the full
/// channel did not take, and a redactor per stream.
#[derive(Debug)]
pub(crate) struct TapWriter {
    tap: OutputTap,
    pending: Option<TapChunk>,
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
            pending: None,
            redactors,
            closed: false,
        }
    }

    /// The channel is full: the pump reads no more output until it is not.
    pub(super) fn is_blocked(&self) -> bool {
        self.pending.is_some()
    }

    /// The descriptor that turns readable when the receiver took a chunk.
    pub(super) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.tap.wake.as_fd()
    }

    /// Takes one read of output.
    pub(super) fn push(&mut self, kind: StreamKind, bytes: &[u8]) {
        let bytes = match self.redactors.as_mut() {
            Some(redactors) => redactors[index(kind)].push(bytes),
            None => bytes.to_vec(),
        };
        self.send(TapChunk { kind, bytes });
    }

    /// A stream closed: what its redactor held back goes out.
    pub(super) fn finish_stream(&mut self, kind: StreamKind) {
        let rest = match self.redactors.as_mut() {
            Some(redactors) => redactors[index(kind)].finish(),
            None => return,
        };
        self.send(TapChunk { kind, bytes: rest });
    }

    fn send(&mut self, chunk: TapChunk) {
        if self.closed || chunk.bytes.is_empty() {
            return;
        }
        debug_assert!(
            self.pending.is_none(),
            "the pump reads nothing while blocked"
        );
        self.pending = Some(chunk);
        self.retry();
    }

    /// Tries to hand the unsent chunk over again (after a wake-up);
    /// returns whether the tap is free.
    pub(super) fn retry(&mut self) -> bool {
        let mut sink = [0u8; 64];
        while matches!((&self.tap.wake).read(&mut sink), Ok(n) if n > 0) {}
        let Some(chunk) = self.pending.take() else {
            return true;
        };
        match self.tap.tx.try_send(chunk) {
            Ok(()) => {
                self.tap.blocked.store(false, Ordering::Release);
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                // Nobody listens any more: the output goes nowhere.
                self.closed = true;
                true
            }
            Err(mpsc::error::TrySendError::Full(chunk)) => {
                self.tap.blocked.store(true, Ordering::Release);
                // The receiver may have taken a chunk before it could see
                // the flag: look once more, or it would never wake us.
                match self.tap.tx.try_send(chunk) {
                    Ok(()) => {
                        self.tap.blocked.store(false, Ordering::Release);
                        true
                    }
                    Err(mpsc::error::TrySendError::Full(chunk)) => {
                        self.pending = Some(chunk);
                        false
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        self.closed = true;
                        true
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
        assert!(!writer.is_blocked());
        writer.push(StreamKind::Stdout, b"two");
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
        writer.push(StreamKind::Stdout, b"ter2 done\n");
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
        writer.push(StreamKind::Stdout, b"two");
        assert!(!writer.is_blocked());
    }
}
