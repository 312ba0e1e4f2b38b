//! Whether a process waits for its terminal and nothing else: the prompt
//! detector behind `awaiting_input`.
//!
//! A process waits for input when its main thread is blocked in a `read` on
//! the session's terminal, or in a `select`/`pselect6`/`poll`/`ppoll`/
//! `epoll_wait`/`epoll_pwait(2)` whose watched descriptors are the terminal
//! and at most the program's own wake-up descriptors (an eventfd, a
//! signalfd, a timerfd, or a pipe whose write end the process holds itself:
//! libuv's loop in node watches those next to the terminal). Readline
//! (python, bash, sqlite3, bc) sits in `pselect6`, vim in `pselect6` or
//! `poll`, node in `epoll_pwait`. A server that polls a socket or a pipe from
//! someone else next to the terminal is not waiting for input.
//!
//! The current system call and its arguments come from `/proc/PID/syscall`;
//! the descriptor sets behind pointer arguments from `/proc/PID/mem`; an
//! epoll set from `/proc/PID/fdinfo/EPFD` (`tfd:` lines); what a descriptor
//! is from `/proc/PID/fd/N`. Parsing is pure and unit-tested; every read
//! treats a vanished process or a refused read as "not waiting".

use std::fs;
use std::os::unix::fs::FileExt;

/// The most descriptors a wait may watch for us to look at it: more is a
/// server, not a prompt.
const MAX_WATCHED: u64 = 1024;

/// System call numbers of this architecture (`libc` has no `SYS_poll`,
/// `SYS_select` or `SYS_epoll_wait` on aarch64: those calls do not exist
/// there).
mod nr {
    pub(super) const READ: libc::c_long = libc::SYS_read;
    pub(super) const READV: libc::c_long = libc::SYS_readv;
    pub(super) const PSELECT6: libc::c_long = libc::SYS_pselect6;
    pub(super) const PPOLL: libc::c_long = libc::SYS_ppoll;
    pub(super) const EPOLL_PWAIT: libc::c_long = libc::SYS_epoll_pwait;
    pub(super) const EPOLL_PWAIT2: libc::c_long = libc::SYS_epoll_pwait2;
    #[cfg(target_arch = "x86_64")]
    pub(super) const SELECT: libc::c_long = libc::SYS_select;
    #[cfg(target_arch = "x86_64")]
    pub(super) const POLL: libc::c_long = libc::SYS_poll;
    #[cfg(target_arch = "x86_64")]
    pub(super) const EPOLL_WAIT: libc::c_long = libc::SYS_epoll_wait;
}

/// A blocking call, as far as telling a prompt goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// `read`/`readv` on a descriptor.
    Read { fd: u64 },
    /// `select`/`pselect6`: the count and the three set pointers.
    Select { nfds: u64, sets: [u64; 3] },
    /// `poll`/`ppoll`: the `pollfd` array and its length.
    Poll { fds: u64, nfds: u64 },
    /// `epoll_wait`/`epoll_pwait(2)` on an epoll descriptor.
    Epoll { epfd: u64 },
}

/// Parses `/proc/PID/syscall` (`NR arg1 … arg6 sp pc`, arguments in hex;
/// `running` or `-1 sp pc` when not in a call) into the call that blocks.
pub(crate) fn parse_syscall(text: &str) -> Option<Blocked> {
    let mut fields = text.split_ascii_whitespace();
    let number: libc::c_long = fields.next()?.parse().ok()?;
    let mut args = [0_u64; 6];
    for arg in &mut args {
        let field = fields.next()?;
        *arg = u64::from_str_radix(field.trim_start_matches("0x"), 16).ok()?;
    }
    blocked(number, args)
}

fn blocked(number: libc::c_long, args: [u64; 6]) -> Option<Blocked> {
    let select = Blocked::Select {
        nfds: args[0],
        sets: [args[1], args[2], args[3]],
    };
    let poll = Blocked::Poll {
        fds: args[0],
        nfds: args[1],
    };
    let epoll = Blocked::Epoll { epfd: args[0] };
    match number {
        nr::READ | nr::READV => Some(Blocked::Read { fd: args[0] }),
        nr::PSELECT6 => Some(select),
        nr::PPOLL => Some(poll),
        nr::EPOLL_PWAIT | nr::EPOLL_PWAIT2 => Some(epoll),
        #[cfg(target_arch = "x86_64")]
        nr::SELECT => Some(select),
        #[cfg(target_arch = "x86_64")]
        nr::POLL => Some(poll),
        #[cfg(target_arch = "x86_64")]
        nr::EPOLL_WAIT => Some(epoll),
        _ => None,
    }
}

/// The descriptors set in `select` fd sets (64-bit words, low bit first),
/// below `nfds`.
pub(crate) fn fds_in_sets(nfds: u64, words: &[u64]) -> Vec<u64> {
    let mut fds = Vec::new();
    for (i, word) in words.iter().enumerate() {
        let mut bits = *word;
        while bits != 0 {
            let fd = i as u64 * 64 + u64::from(bits.trailing_zeros());
            bits &= bits - 1;
            if fd < nfds {
                fds.push(fd);
            }
        }
    }
    fds
}

/// The descriptors of a `pollfd` array (`int fd; short events; short
/// revents`, native endian); negative ones are ignored, as poll does.
pub(crate) fn fds_in_pollfds(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(8)
        .filter_map(|entry| {
            let fd = i32::from_ne_bytes([entry[0], entry[1], entry[2], entry[3]]);
            u64::try_from(fd).ok()
        })
        .collect()
}

/// The descriptors an epoll set watches, from its fdinfo (`tfd: N …`).
pub(crate) fn fds_in_epoll_info(fdinfo: &str) -> Vec<u64> {
    fdinfo
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("tfd:"))
        .filter_map(|rest| rest.split_ascii_whitespace().next()?.parse().ok())
        .collect()
}

/// What a descriptor is, for telling a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FdKind {
    /// The session's terminal.
    Terminal,
    /// The program's own wake-up: eventfd, signalfd, timerfd, a self-pipe.
    Wakeup,
    /// Anything else: a socket, a file, someone else's pipe, another tty.
    Outside,
}

/// Classifies a descriptor from its `/proc/PID/fd` link; `terminal` is the
/// session's slave (`/dev/pts/N`), and `/dev/tty` (the controlling
/// terminal of a process on it) counts as the same; `self_pipe` says
/// whether the process holds the write end of a pipe.
pub(crate) fn classify(link: &str, terminal: &str, self_pipe: impl Fn(&str) -> bool) -> FdKind {
    if link == terminal || link == "/dev/tty" {
        FdKind::Terminal
    } else if matches!(
        link,
        "anon_inode:[eventfd]" | "anon_inode:[signalfd]" | "anon_inode:[timerfd]"
    ) || (link.starts_with("pipe:[") && self_pipe(link))
    {
        FdKind::Wakeup
    } else {
        FdKind::Outside
    }
}

/// True when the watched descriptors are the terminal plus wake-ups only.
pub(crate) fn only_the_terminal(kinds: impl IntoIterator<Item = FdKind>) -> bool {
    let mut terminal = false;
    for kind in kinds {
        match kind {
            FdKind::Terminal => terminal = true,
            FdKind::Wakeup => {}
            FdKind::Outside => return false,
        }
    }
    terminal
}

/// One process, read from `/proc` on demand.
struct Process<'a> {
    pid: i32,
    terminal: &'a str,
}

impl Process<'_> {
    fn link(&self, fd: u64) -> Option<String> {
        let target = fs::read_link(format!("/proc/{}/fd/{fd}", self.pid)).ok()?;
        Some(target.to_string_lossy().into_owned())
    }

    /// Whether the process holds the write end of the pipe named `link`.
    fn holds_write_end(&self, link: &str) -> bool {
        let Ok(fds) = fs::read_dir(format!("/proc/{}/fd", self.pid)) else {
            return false;
        };
        fds.flatten().any(|entry| {
            let same = fs::read_link(entry.path()).is_ok_and(|t| t.as_os_str() == link);
            same && fs::read_to_string(format!(
                "/proc/{}/fdinfo/{}",
                self.pid,
                entry.file_name().to_string_lossy()
            ))
            .is_ok_and(|info| opened_write_only(&info))
        })
    }

    fn kind(&self, fd: u64) -> FdKind {
        match self.link(fd) {
            Some(link) => classify(&link, self.terminal, |pipe| self.holds_write_end(pipe)),
            None => FdKind::Outside,
        }
    }

    fn read_memory(&self, address: u64, len: usize) -> Option<Vec<u8>> {
        let file = fs::File::open(format!("/proc/{}/mem", self.pid)).ok()?;
        let mut buf = vec![0; len];
        file.read_exact_at(&mut buf, address).ok()?;
        Some(buf)
    }

    fn watched(&self, call: Blocked) -> Option<Vec<u64>> {
        match call {
            Blocked::Read { fd } => Some(vec![fd]),
            Blocked::Select { nfds, sets } => {
                if nfds == 0 || nfds > MAX_WATCHED {
                    return None;
                }
                let words = nfds.div_ceil(64) as usize;
                let mut fds = Vec::new();
                for set in sets.into_iter().filter(|&p| p != 0) {
                    let bytes = self.read_memory(set, words * 8)?;
                    let words: Vec<u64> = bytes
                        .chunks_exact(8)
                        .map(|w| {
                            u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])
                        })
                        .collect();
                    fds.extend(fds_in_sets(nfds, &words));
                }
                Some(fds)
            }
            Blocked::Poll { fds, nfds } => {
                if nfds == 0 || nfds > MAX_WATCHED {
                    return None;
                }
                let bytes = self.read_memory(fds, nfds as usize * 8)?;
                Some(fds_in_pollfds(&bytes))
            }
            Blocked::Epoll { epfd } => {
                let info = fs::read_to_string(format!("/proc/{}/fdinfo/{epfd}", self.pid)).ok()?;
                Some(fds_in_epoll_info(&info))
            }
        }
    }
}

/// Whether an fdinfo's `flags:` (octal) say write-only (`O_WRONLY`).
fn opened_write_only(fdinfo: &str) -> bool {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("flags:"))
        .and_then(|flags| u32::from_str_radix(flags.trim(), 8).ok())
        .is_some_and(|flags| flags & 3 == 1)
}

/// Whether `pid` waits for the terminal named `terminal` (`/dev/pts/N`)
/// and nothing else.
pub(crate) fn waits_for_terminal(pid: i32, terminal: &str) -> bool {
    let wchan = super::procfs::read_small(format!("/proc/{pid}/wchan")).unwrap_or_default();
    if wchan.trim() == "n_tty_read" {
        return true;
    }
    let Some(call) = super::procfs::read_small(format!("/proc/{pid}/syscall"))
        .as_deref()
        .and_then(parse_syscall)
    else {
        return false;
    };
    let process = Process { pid, terminal };
    process
        .watched(call)
        .is_some_and(|fds| only_the_terminal(fds.into_iter().map(|fd| process.kind(fd))))
}

/// Whether a live member of process group `pgrp` waits for the terminal
/// named `terminal` and nothing else (a prompt waiting for an answer).
pub(crate) fn group_waits_for_terminal(pgrp: i32, terminal: &str) -> bool {
    super::procfs::group_members(pgrp)
        .into_iter()
        .any(|pid| waits_for_terminal(pid, terminal))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(number: libc::c_long, args: &str) -> Option<Blocked> {
        parse_syscall(&format!("{number} {args} 0x7ffd0000 0x7f000000"))
    }

    #[test]
    fn reads_and_waits_are_told_apart_from_other_calls() {
        let read = libc::SYS_read;
        assert_eq!(
            call(read, "0x0 0x55d0 0x1 0x0 0x0 0x0"),
            Some(Blocked::Read { fd: 0 })
        );
        let pselect = libc::SYS_pselect6;
        assert_eq!(
            call(pselect, "0x1 0x7ffd960c16a0 0x0 0x0 0x0 0x7ffd960c1610"),
            Some(Blocked::Select {
                nfds: 1,
                sets: [0x7ffd_960c_16a0, 0, 0]
            })
        );
        let ppoll = libc::SYS_ppoll;
        assert_eq!(
            call(ppoll, "0x7ffd 0x2 0x0 0x0 0x8 0x0"),
            Some(Blocked::Poll {
                fds: 0x7ffd,
                nfds: 2
            })
        );
        let epoll = libc::SYS_epoll_pwait;
        assert_eq!(
            call(epoll, "0xe 0x7ffc 0x400 0x1f9b 0x0 0x8"),
            Some(Blocked::Epoll { epfd: 14 })
        );
        let futex = libc::SYS_futex;
        assert_eq!(call(futex, "0x4195 0x189 0x0 0x0 0x0 0xffffffff"), None);
        assert_eq!(parse_syscall("running"), None);
        assert_eq!(parse_syscall("-1 0x7ffd 0x7f00"), None);
    }

    #[test]
    fn select_sets_and_pollfds_give_their_descriptors() {
        assert_eq!(fds_in_sets(1, &[1]), vec![0]);
        assert_eq!(fds_in_sets(70, &[0b1001, 1 << 3]), vec![0, 3, 67]);
        // Bits at or past nfds are not watched.
        assert_eq!(fds_in_sets(3, &[0b1001]), vec![0]);
        let mut pollfds = Vec::new();
        for fd in [0_i32, -1, 7] {
            pollfds.extend_from_slice(&fd.to_ne_bytes());
            pollfds.extend_from_slice(&[1, 0, 0, 0]);
        }
        assert_eq!(fds_in_pollfds(&pollfds), vec![0, 7]);
    }

    #[test]
    fn an_epoll_set_lists_its_target_descriptors() {
        // From node's REPL: its eventfd, the terminal, its signal pipe.
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t20\n\
            tfd:       17 events:       19 data:               11  pos:0 ino:14 sdev:10\n\
            tfd:       21 events:       19 data:               15  pos:0 ino:3 sdev:1a\n\
            tfd:       15 events:       19 data:                f  pos:0 ino:2e12 sdev:f\n";
        assert_eq!(fds_in_epoll_info(info), vec![17, 21, 15]);
        assert!(opened_write_only("pos:\t0\nflags:\t02000001\n"));
        assert!(!opened_write_only("pos:\t0\nflags:\t02004000\n"));
    }

    #[test]
    fn only_the_terminal_and_wakeups_make_a_prompt() {
        let tty = "/dev/pts/3";
        let kind = |link: &str| classify(link, tty, |pipe| pipe == "pipe:[15]");
        assert_eq!(kind("/dev/pts/3"), FdKind::Terminal);
        assert_eq!(kind("/dev/tty"), FdKind::Terminal);
        assert_eq!(kind("/dev/pts/4"), FdKind::Outside);
        assert_eq!(kind("anon_inode:[eventfd]"), FdKind::Wakeup);
        assert_eq!(kind("pipe:[15]"), FdKind::Wakeup);
        assert_eq!(kind("pipe:[16]"), FdKind::Outside);
        assert_eq!(kind("socket:[5551]"), FdKind::Outside);
        let node = ["anon_inode:[eventfd]", "/dev/pts/3", "pipe:[15]"];
        assert!(only_the_terminal(node.map(kind)));
        let server = ["socket:[5551]", "/dev/pts/3"];
        assert!(!only_the_terminal(server.map(kind)));
        assert!(!only_the_terminal(["anon_inode:[eventfd]"].map(kind)));
        assert!(!only_the_terminal([]));
    }

    /// A real child blocked in `poll` on a PTY slave alone, then on the
    /// slave and a socket: the first waits for its terminal, the second not.
    #[test]
    fn a_poll_on_the_terminal_alone_is_a_prompt_and_with_a_socket_is_not() {
        let pair =
            super::super::pty::open(super::super::pty::COLUMNS, super::super::pty::ROWS).unwrap();
        let name = super::super::pty::slave_name(&pair.master).unwrap();
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for (with_socket, expected) in [(false, true), (true, false)] {
            let mut fds = vec![libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&pair.slave),
                events: libc::POLLIN,
                revents: 0,
            }];
            if with_socket {
                fds.push(libc::pollfd {
                    fd: std::os::fd::AsRawFd::as_raw_fd(&socket),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            // SAFETY: the child only calls async-signal-safe poll and _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                unsafe {
                    libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 10_000);
                    libc::_exit(0);
                }
            }
            let in_poll = (0..250).any(|_| {
                let text = super::super::procfs::read_small(format!("/proc/{pid}/syscall"));
                let polling = text
                    .as_deref()
                    .and_then(parse_syscall)
                    .is_some_and(|c| matches!(c, Blocked::Poll { .. }));
                if !polling {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                polling
            });
            assert!(in_poll, "the child never reached poll");
            let seen = waits_for_terminal(pid, &name);
            assert!(super::super::procfs::is_alive(pid));
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            assert_eq!(seen, expected, "with a socket: {with_socket}");
        }
    }
}
