//! The command's environment handed to `agent-reach-sandbox` on a
//! descriptor, so that the wrapper itself never runs with it.
//!
//! The wrapper starts unconfined: were a caller's variables its own
//! environment, `LD_PRELOAD` would load the caller's library into it before
//! a single rule exists, and `AGENT_REACH_HOME` would change what it
//! protects. So the engine starts the wrapper with agent-reach's own base
//! environment and writes the command's complete environment into a sealed
//! memfd, named by [`ENV_FD_VAR`]; the wrapper reads it only once it is
//! confined, closes it, and execs the command with exactly that
//! environment. The descriptor is close-on-exec in the engine and closed by
//! the wrapper, so the command never inherits it.
//!
//! The format: `NAME=VALUE` entries, each ended by a NUL byte, as an
//! `environ` block.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// Names the descriptor holding the command's environment.
pub(crate) const ENV_FD_VAR: &str = "AGENT_REACH_SANDBOX_ENV_FD";

/// An environment as one `environ` block.
pub(crate) fn encode(env: &BTreeMap<OsString, OsString>) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in env {
        block.extend_from_slice(name.as_bytes());
        block.push(b'=');
        block.extend_from_slice(value.as_bytes());
        block.push(0);
    }
    block
}

/// The entries of an `environ` block; an entry without `=` is skipped, as
/// the C library skips it.
pub(crate) fn decode(block: &[u8]) -> Vec<(OsString, OsString)> {
    block
        .split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| {
            let at = entry.iter().position(|b| *b == b'=')?;
            Some((
                OsStr::from_bytes(&entry[..at]).to_owned(),
                OsString::from_vec(entry[at + 1..].to_vec()),
            ))
        })
        .collect()
}

/// A sealed, close-on-exec memfd holding `block`, numbered above stdio (the
/// child's stdio is placed on 0-2 over whatever was there).
pub(crate) fn sealed_memfd(block: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: a constant NUL-terminated name; the result is checked.
    let raw = unsafe {
        libc::memfd_create(
            c"agent-reach-env".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nobody else owns.
    let mut fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if fd.as_raw_fd() <= 2 {
        // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor we then own.
        let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if moved < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: as above.
        fd = unsafe { OwnedFd::from_raw_fd(moved) };
    }
    let mut written = 0;
    while written < block.len() {
        // SAFETY: writing from the unwritten part of our buffer.
        let n = unsafe {
            libc::write(
                fd.as_raw_fd(),
                block[written..].as_ptr().cast(),
                block.len() - written,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        written += n as usize;
    }
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: F_ADD_SEALS on our own memfd.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The descriptor number a value of [`ENV_FD_VAR`] names.
pub(crate) fn parse_fd(value: &OsStr) -> Option<RawFd> {
    value.to_str()?.parse::<RawFd>().ok().filter(|fd| *fd > 2)
}

/// Reads the whole block from `fd` (from its start) and closes it.
pub(crate) fn take(fd: RawFd) -> io::Result<Vec<(OsString, OsString)>> {
    // SAFETY: the engine handed this descriptor to us alone; from here it
    // is ours and closed when dropped.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut block = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // SAFETY: reading into our buffer at an explicit offset.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                block.len() as libc::off_t,
            )
        };
        match n {
            0 => break,
            n if n < 0 => {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            n => block.extend_from_slice(&buf[..n as usize]),
        }
    }
    Ok(decode(&block))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<OsString, OsString> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn an_environment_survives_the_round_trip_with_equals_in_values() {
        let given = env(&[
            ("A", "1"),
            ("B", "x=y"),
            ("EMPTY", ""),
            ("LD_PRELOAD", "/x.so"),
        ]);
        let back: BTreeMap<_, _> = decode(&encode(&given)).into_iter().collect();
        assert_eq!(back, given);
    }

    #[test]
    fn the_memfd_is_sealed_close_on_exec_and_read_back_whole() {
        let given = env(&[("X", &"v".repeat(20_000)), ("Y", "2")]);
        let fd = sealed_memfd(&encode(&given)).unwrap();
        let raw = fd.as_raw_fd();
        assert!(raw > 2);
        // SAFETY: querying flags of our descriptor.
        let flags = unsafe { libc::fcntl(raw, libc::F_GETFD) };
        assert_ne!(flags & libc::FD_CLOEXEC, 0, "not inherited by accident");
        // SAFETY: a write to a sealed memfd must fail.
        let wrote = unsafe { libc::write(raw, b"Z=1".as_ptr().cast(), 3) };
        assert!(wrote < 0, "the block cannot be changed once sealed");
        let taken = take(std::os::fd::IntoRawFd::into_raw_fd(fd)).unwrap();
        let back: BTreeMap<_, _> = taken.into_iter().collect();
        assert_eq!(back, given);
    }

    #[test]
    fn only_numbers_above_stdio_name_a_descriptor() {
        assert_eq!(parse_fd(OsStr::new("7")), Some(7));
        assert_eq!(parse_fd(OsStr::new("2")), None);
        assert_eq!(parse_fd(OsStr::new("x")), None);
    }
}
