//! What a caller attached to a running command can do to it besides
//! reading its output: write its input (its terminal, or the stdin pipe of
//! [`Attach::stdin_pipe`](super::Attach::stdin_pipe)), end that input,
//! resize its terminal, and signal its process group.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::error::ExecError;
use super::execution::Execution;

/// How long a write to the command's input may wait for it to read.
pub(crate) const STDIN_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a terminal reads as end of input at the start of a line (^D, the
/// default VEOF).
const TERMINAL_EOF: u8 = 0x04;

impl Execution {
    /// Writes to the command's terminal, or to its stdin pipe. Fails with
    /// [`ExecError::StdinClosed`] when it has neither (stdin /dev/null, or
    /// the pipe was closed) and [`ExecError::Exited`] once it exited.
    pub fn write_stdin(&self, bytes: &[u8]) -> Result<(), ExecError> {
        let pid = self.pid();
        if self.exit_info().is_some() {
            return Err(ExecError::Exited { pid });
        }
        let written = match &self.shared().pty_master {
            Some(master) => write_all_bounded(master, bytes, STDIN_WRITE_TIMEOUT),
            None => {
                let stdin = crate::sync::lock(&self.shared().stdin);
                let Some(pipe) = stdin.as_ref() else {
                    return Err(ExecError::StdinClosed { pid });
                };
                write_all_bounded(pipe, bytes, STDIN_WRITE_TIMEOUT)
            }
        };
        written.map_err(|source| ExecError::StdinWrite { pid, source })
    }

    /// Ends the command's input: closes its stdin pipe, or types the end of
    /// input on its terminal. Closing a closed pipe does nothing.
    pub fn close_stdin(&self) -> Result<(), ExecError> {
        if self.shared().pty_master.is_some() {
            return self.write_stdin(&[TERMINAL_EOF]);
        }
        let pipe = crate::sync::lock(&self.shared().stdin).take();
        drop(pipe);
        Ok(())
    }

    /// Gives the command's terminal a new size.
    pub fn resize(&self, cols: u16, rows: u16) -> Result<(), ExecError> {
        let pid = self.pid();
        let Some(master) = &self.shared().pty_master else {
            return Err(ExecError::NoTerminal { pid });
        };
        if self.exit_info().is_some() {
            return Err(ExecError::Exited { pid });
        }
        super::pty::resize(master, cols, rows).map_err(|_| ExecError::NoTerminal { pid })
    }

    /// Sends `signal` to the command's process group (which it leads). Fails
    /// with [`ExecError::Exited`] once the command is reaped.
    pub fn signal_group(&self, signal: i32) -> Result<(), ExecError> {
        if self.shared().signal_group(signal) {
            Ok(())
        } else {
            Err(ExecError::Exited { pid: self.pid() })
        }
    }
}

/// Writes all of `bytes` to a non-blocking descriptor, waiting at most
/// `limit` in all for it to take them.
pub(super) fn write_all_bounded(
    fd: &OwnedFd,
    mut bytes: &[u8],
    limit: Duration,
) -> std::io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let deadline = Instant::now() + limit;
    while !bytes.is_empty() {
        // SAFETY: writing from a slice we hold to a descriptor we own.
        let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
        if n > 0 {
            bytes = &bytes[n as usize..];
            continue;
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the command did not read its input in time",
                    ));
                }
                let millis = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
                let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
                let _ = poll(&mut fds, PollTimeout::from(millis));
            }
            Some(libc::EINTR) => {}
            _ => return Err(err),
        }
    }
    Ok(())
}
