//! The protocol's stdin and stdout, with stdout kept for the protocol alone.
//!
//! stdout carries JSON-RPC: one stray line from anything else corrupts the
//! session with the client. So before serving, the real stdout is moved to a
//! private close-on-exec descriptor and fd 1 is pointed at stderr: a library
//! that prints, or a child that inherits our fds, can no longer reach the
//! protocol. Pipes (how MCP clients start servers) are reopened non-blocking
//! through `/proc/self/fd`, on their own open file description, so they run
//! on the reactor without changing the flags of the fds we were given.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};

use tokio::io::{AsyncRead, AsyncWrite};

/// The protocol's reading half.
pub(crate) type ProtocolReader = Box<dyn AsyncRead + Send + Unpin>;
/// The protocol's writing half.
pub(crate) type ProtocolWriter = Box<dyn AsyncWrite + Send + Unpin>;

/// Takes stdin and stdout for the protocol; afterwards fd 1 is stderr.
/// Must run inside the tokio runtime.
pub(crate) fn take_stdio() -> io::Result<(ProtocolReader, ProtocolWriter)> {
    let protocol_out: OwnedFd = io::stdout().as_fd().try_clone_to_owned()?;
    nix::unistd::dup2_stdout(io::stderr().as_fd()).map_err(io::Error::from)?;
    let reader: ProtocolReader = match reopen_fifo(io::stdin().as_raw_fd(), false) {
        Some(fd) => Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?),
        None => Box::new(tokio::io::stdin()),
    };
    let writer: ProtocolWriter = match reopen_fifo(protocol_out.as_raw_fd(), true) {
        Some(fd) => Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?),
        None => Box::new(tokio::fs::File::from_std(File::from(protocol_out))),
    };
    Ok((reader, writer))
}

/// A non-blocking descriptor of its own for `fd` when it is a FIFO.
fn reopen_fifo(fd: i32, write: bool) -> Option<OwnedFd> {
    let file = OpenOptions::new()
        .read(!write)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{fd}"))
        .ok()?;
    file.metadata()
        .ok()?
        .file_type()
        .is_fifo()
        .then(|| OwnedFd::from(file))
}
