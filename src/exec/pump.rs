//! The pump: one thread per execution (for a one-shot `run`, the caller's
//! own thread) that reads its output and notices its exit, so neither a full
//! pipe nor a slow caller can block the command.
//!
//! It polls the output descriptors, a pidfd for the exit (a 20 ms tick where
//! the kernel has no pidfd), a wake-up socket and, for `run`, the signalfd
//! of its interrupts. Output already in the pipes
//! when the exit shows is read before the exit is reported, so a caller that
//! sees the exit also sees the last lines. The pump never decides to stop
//! reading on its own while a descriptor is open: `stop_reading` (the drain
//! bound, set by the caller) does.

use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::execution::EXIT_SETTLE;
use super::interrupt::read_signal;
use super::pty::CrlfNormalizer;
use super::state::{ExitInfo, Shared, StreamKind};
use super::tap::TapWriter;

/// Bytes read per `read` call. A pipe read holds the pipe's lock while it
/// copies, and the writer spins on that lock meanwhile; cat's 128 KiB keeps
/// each hold short (the round loop reads on until the pipe is empty).
const CHUNK: usize = 128 * 1024;
/// Bytes read after the exit shows, before it is reported, at most (a
/// grandchild flooding the pipe must not delay the report forever).
const FINAL_READ_LIMIT: usize = 8 * 1024 * 1024;
/// How often the exit is polled without a pidfd.
const TICK_MS: u16 = 20;
/// Bytes read from one descriptor per poll round, at most.
const ROUND_READ_LIMIT: usize = 4 * 1024 * 1024;

/// One output descriptor.
#[derive(Debug)]
pub(crate) struct Source {
    pub(crate) fd: OwnedFd,
    pub(crate) kind: StreamKind,
    /// `Some` on a PTY: `\r\n` back to `\n`.
    pub(crate) crlf: Option<CrlfNormalizer>,
}

/// What a read attempt found.
enum ReadOutcome {
    Data(usize),
    WouldBlock,
    Closed,
}

/// Opens a pidfd for `pid`, when the kernel has them.
pub(crate) fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes plain integers; a non-negative result is a new
    // descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Everything the pump needs, handed to it once the command started.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) shared: Arc<Shared>,
    pub(crate) sources: Vec<Source>,
    pub(crate) pidfd: Option<OwnedFd>,
    pub(crate) wake: UnixStream,
    pub(crate) timeout_at: Option<Instant>,
    /// A signalfd of the caller's: a signal read from it is recorded in the
    /// state ([`State::interrupted`](super::state::State::interrupted)).
    pub(crate) interrupt: Option<OwnedFd>,
    /// The pump runs on the caller's thread, which cannot start the
    /// clean-ups while it reads: the pump starts them itself (on a thread
    /// of their own, since they wait out the grace), once, when a signal
    /// was read while the command runs or when output stays open
    /// [`EXIT_SETTLE`] after the exit.
    pub(crate) supervise: bool,
    /// The caller's tap: output goes there instead of the captures, and
    /// while it is full no output is read (see [`super::tap`]).
    pub(crate) tap: Option<TapWriter>,
}

impl Job {
    /// Runs the pump until every source is closed (or reading was stopped)
    /// and the exit is collected.
    pub(crate) fn run(self) {
        let Job {
            shared,
            mut sources,
            pidfd,
            wake,
            timeout_at,
            mut interrupt,
            supervise,
            mut tap,
        } = self;
        let mut clean_up_started = !supervise;
        // When a supervising pump kills what keeps the output open after the
        // exit.
        let mut settle_at: Option<Instant> = None;
        let mut timeout_at = timeout_at;
        let mut pidfd = pidfd;
        let mut buf = vec![0u8; CHUNK];
        let mut exited = false;
        loop {
            if shared.lock().stop_reading && !sources.is_empty() {
                finish_sources(&shared, &mut sources, &mut tap);
            }
            if exited && sources.is_empty() {
                break;
            }
            if let Some(at) = timeout_at
                && Instant::now() >= at
            {
                timeout_at = None;
                start_kill(&shared, true);
            }
            if !clean_up_started && settle_at.is_some_and(|at| Instant::now() >= at) {
                clean_up_started = true;
                start_kill(&shared, false);
            }
            let settle_limit = settle_at.filter(|_| !clean_up_started);
            let wait_limit = timeout_at
                .filter(|_| !exited)
                .or(settle_limit)
                .into_iter()
                .chain(tap.as_ref().and_then(TapWriter::hold_deadline))
                .min();
            let (ready, pid_ready, wake_ready, interrupt_ready) = wait_ready(
                &sources,
                pidfd.as_ref(),
                &wake,
                interrupt.as_ref(),
                tap.as_ref(),
                exited,
                wait_limit,
            );
            if let Some(tap) = tap.as_mut() {
                tap.after_wait();
            }
            let mut interrupted_now = false;
            if interrupt_ready && let Some(fd) = interrupt.as_ref() {
                match read_signal(fd.as_fd()) {
                    Ok(Some(signal)) => {
                        shared.lock().interrupted.get_or_insert(signal);
                        shared.notify();
                        interrupted_now = true;
                    }
                    Ok(None) => {}
                    // Unreadable: stop watching it rather than spin on it.
                    Err(_) => interrupt = None,
                }
            }
            let mut closed = Vec::new();
            for (index, source) in sources.iter_mut().enumerate() {
                if !ready.get(index).copied().unwrap_or(false) {
                    continue;
                }
                // Empty the pipe (within a bound, fair to the other stream).
                let (_, gone) =
                    read_available(&shared, source, &mut buf, ROUND_READ_LIMIT, &mut tap);
                if gone {
                    closed.push(index);
                }
            }
            close_sources(&shared, &mut sources, closed, &mut tap);
            if wake_ready {
                let mut sink = [0u8; 64];
                while matches!((&wake).read(&mut sink), Ok(n) if n > 0) {}
            }
            if !exited && (pid_ready || pidfd.is_none()) {
                exited = collect_exit(&shared, &mut sources, &mut buf, &mut tap);
                if exited {
                    pidfd = None;
                    settle_at = Some(Instant::now() + EXIT_SETTLE);
                }
            }
            if interrupted_now && !exited && !clean_up_started {
                clean_up_started = true;
                start_kill(&shared, false);
            }
        }
        if let Some(tap) = tap.as_mut() {
            flush_tap(&shared, tap);
        }
        drop(tap);
        let mut state = shared.lock();
        state.captures.finish();
        state.output_done = true;
        drop(state);
        shared.notify();
    }
}

/// Kills the execution on a thread of its own (the kill waits out the
/// grace period; the pump must go on reading meanwhile): at the command
/// timeout (`timed_out`, marked first), or for a supervising pump's
/// clean-up.
fn start_kill(shared: &Arc<Shared>, timed_out: bool) {
    if timed_out {
        let mut state = shared.lock();
        if state.exit.is_some() {
            return;
        }
        state.timed_out = true;
    }
    let killer = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name(format!("agent-reach-kill-{}", shared.pid))
        .spawn(move || {
            super::kill::terminate(&killer);
        });
    if spawned.is_err() {
        // No thread to wait out the grace: kill at once instead.
        super::kill::kill_now(shared);
    }
}

/// Which sources are readable, and whether the pidfd, the wake-up socket
/// and the interrupt descriptor are.
fn wait_ready(
    sources: &[Source],
    pidfd: Option<&OwnedFd>,
    wake: &UnixStream,
    interrupt: Option<&OwnedFd>,
    tap: Option<&TapWriter>,
    exited: bool,
    until: Option<Instant>,
) -> (Vec<bool>, bool, bool, bool) {
    // A full tap: the sources are not watched (their data waits in the
    // pipe; a closed one would report POLLHUP at once), the tap's wake-up is.
    let held_back = tap.is_some_and(TapWriter::is_blocked);
    let waits_on_receiver = tap.is_some_and(TapWriter::waits_on_receiver);
    let mut fds: Vec<PollFd> = if held_back {
        Vec::new()
    } else {
        sources
            .iter()
            .map(|s| PollFd::new(s.fd.as_fd(), PollFlags::POLLIN))
            .collect()
    };
    if let Some(tap) = tap.filter(|_| waits_on_receiver) {
        fds.push(PollFd::new(tap.wake_fd(), PollFlags::POLLIN));
    }
    let pid_index = match pidfd {
        Some(fd) if !exited => {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            Some(fds.len() - 1)
        }
        _ => None,
    };
    fds.push(PollFd::new(wake.as_fd(), PollFlags::POLLIN));
    let wake_index = fds.len() - 1;
    let interrupt_index = interrupt.map(|fd| {
        fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        fds.len() - 1
    });
    let tick = (!exited && pidfd.is_none()).then(|| Duration::from_millis(u64::from(TICK_MS)));
    let to_deadline =
        until.map(|at| at.saturating_duration_since(Instant::now()) + Duration::from_millis(1));
    let timeout = match (tick, to_deadline) {
        (Some(a), Some(b)) => PollTimeout::try_from(a.min(b)).unwrap_or(PollTimeout::MAX),
        (Some(a), None) | (None, Some(a)) => PollTimeout::try_from(a).unwrap_or(PollTimeout::MAX),
        (None, None) => PollTimeout::NONE,
    };
    if poll(&mut fds, timeout).is_err() {
        // EINTR: just look again.
        return (vec![false; sources.len()], false, false, false);
    }
    let hit = |fd: &PollFd| {
        fd.revents().is_some_and(|r| {
            r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
        })
    };
    let ready = if held_back {
        vec![false; sources.len()]
    } else {
        fds[..sources.len()].iter().map(hit).collect()
    };
    let pid_ready = pid_index.is_some_and(|i| hit(&fds[i]));
    let interrupt_ready = interrupt_index.is_some_and(|i| hit(&fds[i]));
    (ready, pid_ready, hit(&fds[wake_index]), interrupt_ready)
}

fn read_once(
    shared: &Shared,
    source: &mut Source,
    buf: &mut [u8],
    tap: &mut Option<TapWriter>,
) -> ReadOutcome {
    let fd: BorrowedFd<'_> = source.fd.as_fd();
    if let Some(writer) = tap.as_mut()
        && let Some(chunk) = writer.room(source.kind)
    {
        // Straight into the tap's chunk, at most a pump read at a time.
        let room = chunk.spare_capacity_mut();
        let want = room.len().min(buf.len());
        // SAFETY: reading at most `want` bytes into the vector's spare
        // capacity, from a descriptor we own; the length grows by what the
        // kernel wrote.
        let n = unsafe { libc::read(fd.as_raw_fd(), room.as_mut_ptr().cast(), want) };
        if n > 0 {
            // SAFETY: the kernel initialized those `n` bytes.
            unsafe { chunk.set_len(chunk.len() + n as usize) };
            writer.filled();
            shared.lock().last_output_at = Some(Instant::now());
            return ReadOutcome::Data(n as usize);
        }
        return failed_read(n);
    }
    // SAFETY: reading into a buffer we own, from a descriptor we own.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n > 0 {
        let n = n as usize;
        match tap.as_mut() {
            Some(tap) => {
                tap.push(source.kind, &buf[..n]);
                shared.lock().last_output_at = Some(Instant::now());
            }
            None => deliver(shared, source, &buf[..n]),
        }
        return ReadOutcome::Data(n);
    }
    failed_read(n)
}

/// What a `read` that returned `n` (zero or less) means.
fn failed_read(n: isize) -> ReadOutcome {
    if n == 0 {
        return ReadOutcome::Closed;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EINTR) => ReadOutcome::WouldBlock,
        // EIO: every holder of the PTY slave is gone.
        _ => ReadOutcome::Closed,
    }
}

/// Reads what `source` holds, up to about `limit` bytes: the bytes read,
/// and whether it closed.
fn read_available(
    shared: &Shared,
    source: &mut Source,
    buf: &mut [u8],
    limit: usize,
    tap: &mut Option<TapWriter>,
) -> (usize, bool) {
    let mut read = 0;
    while read < limit && !tap.as_ref().is_some_and(TapWriter::is_blocked) {
        match read_once(shared, source, buf, tap) {
            ReadOutcome::Data(n) => read += n,
            ReadOutcome::WouldBlock => break,
            // The stream's last chunk goes out when it is closed.
            ReadOutcome::Closed => return (read, true),
        }
    }
    // The round is over: what it read goes out now if the receiver is
    // waiting for it, else with what the next rounds add.
    if let Some(tap) = tap.as_mut() {
        tap.end_round();
    }
    (read, false)
}

fn deliver(shared: &Shared, source: &mut Source, bytes: &[u8]) {
    let normalized;
    let bytes = match source.crlf.as_mut() {
        Some(crlf) => {
            normalized = crlf.push(bytes);
            &normalized[..]
        }
        None => bytes,
    };
    if bytes.is_empty() {
        return;
    }
    let mut state = shared.lock();
    state.last_output_at = Some(Instant::now());
    state.captures.sink(source.kind).push(bytes);
    state.remember_for_matching(bytes);
    // Only sessions wait on output; a one-shot caller waits for the exit,
    // and waking it for every chunk of a flood would cost a context switch
    // each.
    let someone_waits_on_output = state.keep_for_matching;
    drop(state);
    if someone_waits_on_output {
        shared.notify();
    }
}

fn close_sources(
    shared: &Shared,
    sources: &mut Vec<Source>,
    mut closed: Vec<usize>,
    tap: &mut Option<TapWriter>,
) {
    closed.sort_unstable();
    for index in closed.into_iter().rev() {
        let mut source = sources.remove(index);
        flush_normalizer(shared, &mut source);
        if let Some(tap) = tap.as_mut() {
            tap.finish_stream(source.kind);
        }
    }
}

fn finish_sources(shared: &Shared, sources: &mut Vec<Source>, tap: &mut Option<TapWriter>) {
    for mut source in sources.drain(..) {
        flush_normalizer(shared, &mut source);
        if let Some(tap) = tap.as_mut() {
            tap.finish_stream(source.kind);
        }
    }
}

/// The output is over: the tap's last chunk is handed over while the
/// receiver takes it, until the drain bound stops reading.
fn flush_tap(shared: &Shared, tap: &mut TapWriter) {
    while tap.is_blocked() && !shared.lock().stop_reading {
        let mut fds = [PollFd::new(tap.wake_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(TICK_MS));
        tap.retry();
    }
}

fn flush_normalizer(shared: &Shared, source: &mut Source) {
    if let Some(rest) = source.crlf.as_mut().map(CrlfNormalizer::finish)
        && !rest.is_empty()
    {
        shared.lock().captures.sink(source.kind).push(&rest);
    }
}

/// Reads what is already in the pipes, then reaps the child if it exited.
fn collect_exit(
    shared: &Shared,
    sources: &mut Vec<Source>,
    buf: &mut [u8],
    tap: &mut Option<TapWriter>,
) -> bool {
    // SAFETY: WNOHANG|WNOWAIT only peeks at our own child's state.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let peek = unsafe {
        libc::waitid(
            libc::P_PID,
            shared.pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: si_pid is valid to read for a waitid result.
    if peek != 0 || unsafe { info.si_pid() } == 0 {
        return false;
    }
    let mut read_total = 0;
    let mut closed = Vec::new();
    for (index, source) in sources.iter_mut().enumerate() {
        let (read, gone) = read_available(
            shared,
            source,
            buf,
            FINAL_READ_LIMIT.saturating_sub(read_total),
            tap,
        );
        read_total += read;
        if gone {
            closed.push(index);
        }
    }
    close_sources(shared, sources, closed, tap);
    // Not reaped yet: while the zombie exists its pid, which is also the
    // process group id, cannot be reused, so signalling the group during
    // the clean-up can never hit a stranger. `Shared::reap_main` reaps it.
    // SAFETY: si_code and si_status are valid to read for a CLD_* result.
    let (code, value) = unsafe { (info.si_code, info.si_status()) };
    let mut state = shared.lock();
    let exit = ExitInfo::from_child_info(code, value, state.timed_out);
    state.exit = Some(exit);
    state.exited_at = Some(Instant::now());
    drop(state);
    shared.notify();
    true
}
