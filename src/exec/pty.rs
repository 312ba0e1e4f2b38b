//! The pseudo-terminal side of a command run with `tty`: opening the pair,
//! and turning the terminal's `\r\n` line ends back into `\n`.
//!
//! We open the PTY ourselves (`openpty`) rather than through portable-pty so
//! that the slave is closed in the parent right after the fork (the master
//! then sees EOF when the command's side closes) and the working directory is
//! the one we checked, never a silent fallback to `$HOME`.

use std::os::fd::{AsRawFd, OwnedFd};

/// Columns and rows the command sees. Wide, so tools do not wrap lines an
/// agent would then have to join again.
pub(crate) const COLUMNS: u16 = 200;
pub(crate) const ROWS: u16 = 50;

/// The master (ours) and slave (the command's) ends of a new PTY.
#[derive(Debug)]
pub(crate) struct PtyPair {
    pub(crate) master: OwnedFd,
    pub(crate) slave: OwnedFd,
}

/// Opens a PTY pair of this window size (default [`COLUMNS`] x [`ROWS`]),
/// both ends close-on-exec, and the master non-blocking.
pub(crate) fn open(cols: u16, rows: u16) -> std::io::Result<PtyPair> {
    let size = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pair = nix::pty::openpty(Some(&size), None).map_err(std::io::Error::from)?;
    for fd in [&pair.master, &pair.slave] {
        set_cloexec(fd)?;
    }
    set_nonblocking(&pair.master)?;
    Ok(PtyPair {
        master: pair.master,
        slave: pair.slave,
    })
}

/// Sets `O_NONBLOCK` on a descriptor.
pub(crate) fn set_nonblocking(fd: &OwnedFd) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
    Ok(())
}

fn set_cloexec(fd: &OwnedFd) -> std::io::Result<()> {
    use nix::fcntl::{FcntlArg, FdFlag, fcntl};
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(std::io::Error::from)?;
    Ok(())
}

/// Gives the terminal behind `master` a new window size (the kernel sends
/// SIGWINCH to its foreground group).
pub(crate) fn resize(master: &OwnedFd, cols: u16, rows: u16) -> std::io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize we own from a valid descriptor.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The process group in the foreground of the terminal behind `master`.
pub(crate) fn foreground_pgid(master: &OwnedFd) -> Option<i32> {
    // SAFETY: tcgetpgrp only reads the terminal state of a valid descriptor.
    let pgid = unsafe { libc::tcgetpgrp(master.as_raw_fd()) };
    (pgid > 0).then_some(pgid)
}

/// The path of the slave behind `master` (`/dev/pts/N`), as the command's
/// descriptors on it show in `/proc/PID/fd`.
pub(crate) fn slave_name(master: &OwnedFd) -> Option<String> {
    let mut number: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int through the pointer.
    let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut number) };
    (rc == 0).then(|| format!("/dev/pts/{number}"))
}

/// Streaming `\r\n` → `\n`: a `\r` at the end of a chunk is held back until
/// the next chunk says whether a `\n` follows. A lone `\r` (a progress
/// redraw) is kept for the terminal clean-up to apply.
#[derive(Debug, Default)]
pub(crate) struct CrlfNormalizer {
    pending_cr: bool,
}

impl CrlfNormalizer {
    /// Converts one chunk. Runs without `\r` are copied whole (memchr):
    /// a flood through a terminal is mostly such runs.
    pub(crate) fn push(&mut self, input: &[u8]) -> Vec<u8> {
        if input.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(input.len() + 1);
        let mut rest = input;
        if std::mem::take(&mut self.pending_cr) && rest.first().is_some_and(|&b| b != b'\n') {
            out.push(b'\r');
        }
        while let Some(at) = memchr::memchr(b'\r', rest) {
            out.extend_from_slice(&rest[..at]);
            match rest.get(at + 1) {
                Some(b'\n') => {}
                Some(_) => out.push(b'\r'),
                None => self.pending_cr = true,
            }
            rest = &rest[at + 1..];
        }
        out.extend_from_slice(rest);
        out
    }

    /// What is held back at the end of the stream.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        if std::mem::take(&mut self.pending_cr) {
            vec![b'\r']
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normalize(chunks: &[&[u8]]) -> Vec<u8> {
        let mut n = CrlfNormalizer::default();
        let mut out = Vec::new();
        for chunk in chunks {
            out.extend(n.push(chunk));
        }
        out.extend(n.finish());
        out
    }

    #[test]
    fn crlf_becomes_lf_even_split_across_chunks() {
        assert_eq!(normalize(&[b"a\r\nb\r\n"]), b"a\nb\n");
        assert_eq!(normalize(&[b"a\r", b"\nb"]), b"a\nb");
        assert_eq!(normalize(&[b"a\r", b"", b"\nb"]), b"a\nb");
    }

    #[test]
    fn lone_carriage_returns_are_kept() {
        assert_eq!(normalize(&[b"10%\r20%\r", b"done\n"]), b"10%\r20%\rdone\n");
        assert_eq!(normalize(&[b"end\r"]), b"end\r");
        assert_eq!(normalize(&[b"\r\r\n"]), b"\r\n");
        assert_eq!(normalize(&[b"a\r", b"", b"b"]), b"a\rb");
        assert_eq!(normalize(&[b"a\r", b"\r", b"\n\r"]), b"a\r\n\r");
    }

    #[test]
    fn opens_a_pty_with_our_size() {
        let pair = open(COLUMNS, ROWS).unwrap();
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::ioctl(pair.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        assert_eq!(rc, 0);
        assert_eq!((size.ws_col, size.ws_row), (COLUMNS, ROWS));
    }
}
