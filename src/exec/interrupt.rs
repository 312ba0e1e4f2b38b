//! SIGINT, SIGTERM and SIGHUP sent to a one-shot caller (`run`) while its
//! command runs: blocked and read from a signalfd (which the pump watches,
//! see [`Execution::spawn_inline`](super::Execution::spawn_inline)), so that
//! the command's whole tree is killed before the caller exits; a signal's
//! default action would leave its grandchildren behind.
//!
//! Blocked before any thread starts, so every thread inherits the mask and
//! the signals can only be read, never delivered; the spawner clears the
//! mask in each child, so commands get them as usual.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The signals `run` turns into a clean-up.
const SIGNALS: [i32; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Holds the signals blocked and the signalfd open; dropping it restores
/// the previous mask.
#[derive(Debug)]
pub(crate) struct InterruptGuard {
    previous: libc::sigset_t,
    fd: OwnedFd,
}

impl InterruptGuard {
    /// Blocks the signals on the calling thread (call it before any thread
    /// starts) and opens a signalfd for them.
    pub(crate) fn install() -> std::io::Result<InterruptGuard> {
        // SAFETY: sigset_t is plain data, filled by sigemptyset/sigaddset;
        // pthread_sigmask and signalfd take pointers to our own values, and
        // a non-negative signalfd result is a new descriptor we own.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for signal in SIGNALS {
                libc::sigaddset(&mut set, signal);
            }
            let mut previous: libc::sigset_t = std::mem::zeroed();
            let err = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous);
            if err != 0 {
                return Err(std::io::Error::from_raw_os_error(err));
            }
            let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                let err = std::io::Error::last_os_error();
                libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
                return Err(err);
            }
            Ok(InterruptGuard {
                previous,
                fd: OwnedFd::from_raw_fd(fd),
            })
        }
    }

    /// A descriptor for the pump to watch.
    pub(crate) fn watch_fd(&self) -> std::io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// A signal that arrived and nobody read yet (after the pump stopped
    /// watching), consumed.
    pub(crate) fn take_pending(&self) -> Option<i32> {
        read_signal(self.fd.as_fd()).ok().flatten()
    }
}

/// Reads one signal from a non-blocking signalfd: `None` when none is
/// pending.
pub(crate) fn read_signal(fd: BorrowedFd<'_>) -> std::io::Result<Option<i32>> {
    // SAFETY: signalfd_siginfo is plain data; all zero is a valid value.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reading one `signalfd_siginfo` into a value of that type.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut info).cast(), size) };
    if n == size as isize {
        return Ok(Some(info.ssi_signo as i32));
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) => Ok(None),
        _ => Err(err),
    }
}

impl Drop for InterruptGuard {
    fn drop(&mut self) {
        // Read what is still pending first: unblocked, it would be delivered
        // at once, and its default action would end the process before the
        // exit code it has decided on (and before its atexit clean-up).
        while self.take_pending().is_some() {}
        // SAFETY: restoring the mask saved by `install`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}
