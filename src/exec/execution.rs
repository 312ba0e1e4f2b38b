//! One running command: spawned from a [`SpawnSpec`], then waited for,
//! read from, written to and ended through a cheap, cloneable handle, so a
//! one-shot `run` and a long-lived session use the same engine.
//!
//! Dropping the last handle of a command that still runs kills it (and
//! everything it started) at once, without grace: nothing outlives the
//! handle that could still have ended it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use regex::Regex;

use super::cgroup::CgroupGuard;
use super::completed::Completed;
use super::error::ExecError;
use super::glue::{RenderOptions, Rendered, Sink, SinkConfig};
use super::kill::{self, KillReport};
use super::pty::{self, CrlfNormalizer};
use super::pump::{self, Source};
use super::resolve;
use super::spawner::{self, ChildStdio, ForkRequest};
use super::spec::SpawnSpec;
use super::state::{Captures, ExitInfo, Shared, State, StreamKind};
use super::tap::{Attach, TapWriter};

/// After the command exits, how long output may still arrive before what
/// is left of its process tree is killed (then the drain bound applies).
pub const EXIT_SETTLE: Duration = Duration::from_millis(50);

/// The pump's stack: it keeps its read buffer on the heap and calls no deep
/// code, so a small stack saves mapping and faulting the default 2 MiB.
const PUMP_STACK_BYTES: usize = 256 * 1024;

/// The pump of an [`Execution::spawn_inline`] execution, to run on the
/// caller's thread.
#[derive(Debug)]
pub struct InlinePump {
    job: pump::Job,
}

impl InlinePump {
    /// Reads the output until the exit is collected and every pipe is
    /// closed (or cut at the drain bound), watching the interrupt
    /// descriptor and the command timeout meanwhile.
    pub fn run(self) {
        self.job.run();
    }
}

/// Why [`Execution::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The command exited (its output up to the exit has been read).
    Exited,
    /// The `wait_for` pattern matched the output since the last take.
    Matched,
    /// The time given ran out; the command still runs.
    Deadline,
}

/// A running (or finished) command. Clones share it.
#[derive(Debug, Clone)]
pub struct Execution {
    owner: Arc<Owner>,
}

/// Kills the command when the last handle goes.
#[derive(Debug)]
struct Owner {
    shared: Arc<Shared>,
    spec: SpawnSpec,
    completed: tokio::sync::Mutex<Option<Completed>>,
    settled: tokio::sync::OnceCell<()>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        let shared = &self.shared;
        // A settled command with no survivors left nothing to look for (a
        // dead tree cannot grow).
        let settled = self.settled.initialized() && shared.lock().survivors.is_empty();
        if !settled && kill::may_have_members(shared) {
            kill::kill_now(shared);
        }
        shared.stop_reading();
    }
}

impl Execution {
    /// Starts the command. Fails with a clear error (and the exit code for
    /// it) when the working directory or the program is unusable.
    pub fn spawn(spec: SpawnSpec) -> Result<Execution, ExecError> {
        Self::spawn_attached(spec, Attach::default())
    }

    /// [`spawn`](Self::spawn) with the caller attached to the command's
    /// stdio (a tap of its output, a stdin pipe, the PTY's size).
    pub fn spawn_attached(spec: SpawnSpec, attach: Attach) -> Result<Execution, ExecError> {
        let (execution, job) = Self::start(spec, None, false, attach)?;
        // The pump starts after the fork: creating a thread costs the caller
        // more than a trivial command's exec leaves idle, and here it
        // overlaps the command's start instead of delaying it.
        let started = std::thread::Builder::new()
            .name("agent-reach-pump".into())
            .stack_size(PUMP_STACK_BYTES)
            .spawn(move || job.run());
        if let Err(source) = started {
            kill::kill_now(execution.shared());
            return Err(ExecError::Watch {
                program: execution.spec().argv.first().cloned().unwrap_or_default(),
                source,
            });
        }
        Ok(execution)
    }

    /// [`spawn`](Self::spawn) without a pump thread: the caller runs the
    /// pump itself ([`InlinePump::run`]), which then also starts the
    /// clean-ups a waiting caller would (the kill after a signal read from
    /// `interrupt`, a signalfd, or when output stays open after the exit).
    /// For a one-shot caller with nothing else to do: no thread to create,
    /// no hand-over at the exit.
    pub fn spawn_inline(
        spec: SpawnSpec,
        interrupt: Option<OwnedFd>,
    ) -> Result<(Execution, InlinePump), ExecError> {
        let (execution, job) = Self::start(spec, interrupt, true, Attach::default())?;
        Ok((execution, InlinePump { job }))
    }

    fn start(
        spec: SpawnSpec,
        interrupt: Option<OwnedFd>,
        inline: bool,
        attach: Attach,
    ) -> Result<(Execution, pump::Job), ExecError> {
        let Some(program_name) = spec.argv.first().cloned() else {
            return Err(ExecError::EmptyCommand);
        };
        resolve::check_workdir(&spec.cwd)?;
        let command_program = resolve::resolve_program(&program_name, &spec.cwd, &spec.env)?;
        let mut argv = spec.wrapper.clone();
        argv.extend(spec.argv.iter().cloned());
        let program = if spec.wrapper.is_empty() {
            command_program
        } else {
            let wrapper = argv[0].clone();
            resolve::resolve_program(&wrapper, &spec.cwd, &spec.env)?
        };
        let watch_error = |source| ExecError::Watch {
            program: program_name.clone(),
            source,
        };
        let cgroup = if spec.use_cgroup {
            CgroupGuard::create(&spec.session_tag).ok()
        } else {
            None
        };
        let (stdio, master) = if spec.tty {
            let (cols, rows) = attach.pty_size.unwrap_or((pty::COLUMNS, pty::ROWS));
            let pair = pty::open(cols, rows).map_err(|source| ExecError::Pty {
                program: program_name.clone(),
                source,
            })?;
            (ChildStdio::Pty(pair.slave), Some(pair.master))
        } else {
            (
                ChildStdio::Pipes {
                    stdin_pipe: attach.stdin_pipe,
                },
                None,
            )
        };
        let forked = spawner::fork_exec(ForkRequest {
            program,
            argv,
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            stdio,
            cgroup: cgroup.as_ref().map(|c| spawner::CgroupFds {
                dir: c.dir_fd(),
                procs: c.procs_fd(),
            }),
        })
        .map_err(|source| spawn_error(&program_name, source))?;
        let started_at = Instant::now();
        let pid = forked.pid;
        let mut sources = Vec::new();
        let mut pty_master = None;
        if let Some(master) = master {
            pty_master = Some(master.try_clone().map_err(watch_error)?);
            sources.push(Source {
                fd: master,
                kind: StreamKind::Stdout,
                // A tap gets what the terminal wrote, line ends included.
                crlf: attach.tap.is_none().then(CrlfNormalizer::default),
                pipe_capacity: 0,
            });
        }
        for (pipe, kind) in [
            (forked.stdout, StreamKind::Stdout),
            (forked.stderr, StreamKind::Stderr),
        ] {
            if let Some(fd) = pipe {
                pty::set_nonblocking(&fd).map_err(watch_error)?;
                let pipe_capacity = enlarge_pipe(&fd);
                sources.push(Source {
                    fd,
                    kind,
                    crlf: None,
                    pipe_capacity,
                });
            }
        }
        if let Some(fd) = &forked.stdin {
            pty::set_nonblocking(fd).map_err(watch_error)?;
        }
        let (wake_tx, wake_rx) = UnixStream::pair().map_err(watch_error)?;
        wake_tx.set_nonblocking(true).map_err(watch_error)?;
        wake_rx.set_nonblocking(true).map_err(watch_error)?;
        let pidfd = forked.pidfd.or_else(|| pump::pidfd_open(pid));
        let (events, _) = tokio::sync::watch::channel(0u64);
        let shared = Arc::new(Shared {
            pid,
            tag: spec.session_tag.clone(),
            tty: spec.tty,
            started_at,
            kill_grace: spec.kill_grace,
            drain: spec.drain,
            cgroup,
            pty_master,
            stdin: Mutex::new(forked.stdin),
            state: Mutex::new(State {
                keep_for_matching: spec.merge_output || spec.tty,
                ..State::new(captures_for(&spec))
            }),
            changed: std::sync::Condvar::new(),
            events,
            wake: wake_tx,
            kill_lock: Mutex::new(()),
            live: kill::LiveExecutionGuard::new(),
            known: Mutex::new(Some(forked.known)),
        });
        let pump_shared = Arc::clone(&shared);
        let timeout_at = spec.timeout.map(|timeout| started_at + timeout);
        let job = pump::Job {
            shared: pump_shared,
            sources,
            pidfd,
            wake: wake_rx,
            timeout_at,
            interrupt,
            supervise: inline,
            tap: attach.tap.map(|tap| TapWriter::new(tap, &spec.secrets)),
        };
        let execution = Execution {
            owner: Arc::new(Owner {
                shared,
                spec,
                completed: tokio::sync::Mutex::new(None),
                settled: tokio::sync::OnceCell::new(),
            }),
        };
        Ok((execution, job))
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.owner.shared
    }

    pub(super) fn settled_cell(&self) -> &tokio::sync::OnceCell<()> {
        &self.owner.settled
    }

    pub(super) fn completed_cache(&self) -> &tokio::sync::Mutex<Option<Completed>> {
        &self.owner.completed
    }

    /// The command's process id (also its process group and session id).
    pub fn pid(&self) -> u32 {
        self.shared().pid as u32
    }

    /// Whether it runs on a PTY.
    pub fn is_tty(&self) -> bool {
        self.shared().tty
    }

    /// The spec it was started from.
    pub fn spec(&self) -> &SpawnSpec {
        &self.owner.spec
    }

    /// How it ended; `None` while it runs.
    pub fn exit_info(&self) -> Option<ExitInfo> {
        self.shared().lock().exit
    }

    /// When it was started.
    pub fn started_at(&self) -> Instant {
        self.shared().started_at
    }

    /// When output last arrived, if any did.
    pub fn last_output_at(&self) -> Option<Instant> {
        self.shared().lock().last_output_at
    }

    /// Whether all output has been read (every pipe closed, or reading was
    /// stopped at the drain bound).
    pub fn output_done(&self) -> bool {
        self.shared().lock().output_done
    }

    /// Waits until the command exits, `wait_for` matches the output that
    /// arrived since the last [`take_output`](Self::take_output), or `until`.
    /// This is the sessions' yield: it never kills anything. `wait_for` sees
    /// output only of session-style executions (`merge_output` or `tty`);
    /// one-shot executions do not keep a copy for it.
    pub async fn wait(&self, until: Instant, wait_for: Option<&Regex>) -> WaitEnd {
        let mut events = self.shared().events.subscribe();
        loop {
            events.borrow_and_update();
            if let Some(end) = self.check_wait(wait_for) {
                return end;
            }
            let now = Instant::now();
            if now >= until {
                return WaitEnd::Deadline;
            }
            let exited_settle = self.shared().lock().exited_at.map(|at| at + EXIT_SETTLE);
            let wake_at = exited_settle.map_or(until, |s| s.min(until));
            let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(wake_at));
            tokio::select! {
                changed = events.changed() => {
                    if changed.is_err() {
                        // The sender lives as long as we do; be safe anyway.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                () = sleep => {}
            }
        }
    }

    fn check_wait(&self, wait_for: Option<&Regex>) -> Option<WaitEnd> {
        let mut state = self.shared().lock();
        if let Some(exited_at) = state.exited_at
            && (state.output_done || exited_at.elapsed() >= EXIT_SETTLE)
        {
            return Some(WaitEnd::Exited);
        }
        let pattern = wait_for?;
        // Re-search a little before the new bytes so a match that straddles
        // two reads is found.
        let from = state.match_scanned.saturating_sub(4096);
        let from = floor_char_boundary(&state.match_buf, from);
        let bytes = &state.match_buf[from..];
        // Valid UTF-8 (the usual case) is searched in place, without the
        // copy a lossy conversion makes.
        let found = match std::str::from_utf8(bytes) {
            Ok(text) => pattern.is_match(text),
            Err(_) => pattern.is_match(&String::from_utf8_lossy(bytes)),
        };
        if found {
            return Some(WaitEnd::Matched);
        }
        state.match_scanned = state.match_buf.len();
        None
    }

    /// What arrived since the last take, rendered (both streams, or the one
    /// merged stream of a session).
    pub fn take_output(&self, opts: &RenderOptions) -> Rendered {
        let mut state = self.shared().lock();
        state.match_buf.clear();
        state.match_scanned = 0;
        state.windows_taken = true;
        state.taken_raw_bytes = state.captures.total_raw_bytes();
        state.captures.take_window(opts)
    }

    /// Bytes the command wrote (as read from its pipes or terminal, before
    /// any cleaning) that no [`take_output`](Self::take_output) has taken.
    pub fn pending_bytes(&self) -> u64 {
        let state = self.shared().lock();
        state
            .captures
            .total_raw_bytes()
            .saturating_sub(state.taken_raw_bytes)
    }

    /// The spill file holding the whole (cleaned, redacted) output of a
    /// session-style execution (`merge_output` or `tty`: one stream), once
    /// some output was written to it. `None` for one-shot executions with
    /// separate streams (their [`Completed`] result names their files), or
    /// when nothing is spilled.
    pub fn spill_path(&self) -> Option<std::path::PathBuf> {
        self.shared().lock().captures.merged_spill_path()
    }

    /// The process group in the foreground of the PTY (a shell's current
    /// job), for telling whether the command waits for input.
    pub fn pty_foreground_pgid(&self) -> Option<i32> {
        self.shared()
            .pty_master
            .as_ref()
            .and_then(pty::foreground_pgid)
    }

    /// Whether the foreground process of the PTY waits for the terminal and
    /// nothing else (a `read` on it, or a `select`/`poll`/`epoll` that
    /// watches only it): the command waits for input, and its prompt is
    /// the end of the output. Always false on pipes.
    pub fn awaiting_input(&self) -> bool {
        let Some(master) = &self.shared().pty_master else {
            return false;
        };
        let (Some(pgid), Some(terminal)) = (pty::foreground_pgid(master), pty::slave_name(master))
        else {
            return false;
        };
        super::terminal_wait::group_waits_for_terminal(pgid, &terminal)
    }

    /// Kills the command and everything it started (SIGTERM, grace,
    /// SIGKILL), then drains the output within its bound.
    pub async fn terminate(&self) -> KillReport {
        let shared = Arc::clone(&self.owner.shared);
        tokio::task::spawn_blocking(move || kill::terminate(&shared))
            .await
            .unwrap_or_default()
    }

    /// Waits for the exit (the command timeout applies), gives the output a
    /// moment, kills whatever the command left behind, drains within the
    /// bound and reaps: afterwards nothing the command started runs (or it
    /// is listed as a survivor). Calling it again returns at once; a call
    /// that was cancelled starts over.
    pub async fn settle(&self) {
        self.owner
            .settled
            .get_or_init(|| async {
                let shared = &self.owner.shared;
                shared.wait_async(far_future(), |s| s.exit.is_some()).await;
                shared
                    .wait_async(Instant::now() + EXIT_SETTLE, |s| s.output_done)
                    .await;
                if something_is_left(shared) {
                    // The slow path, on a thread since it sleeps through the
                    // grace.
                    let shared = Arc::clone(shared);
                    let _ = tokio::task::spawn_blocking(move || kill_and_drain(&shared)).await;
                }
                kill::reap_and_release(shared);
            })
            .await;
    }

    /// [`settle`](Self::settle), then renders stdout and stderr. Calling it
    /// again returns the same result.
    pub async fn finish(&self, opts: &RenderOptions) -> Completed {
        let mut cached = self.owner.completed.lock().await;
        if let Some(done) = cached.as_ref() {
            return done.clone();
        }
        self.settle().await;
        let completed = self.build_completed(opts);
        *cached = Some(completed.clone());
        completed
    }

    /// The result of a settled execution.
    pub(super) fn build_completed(&self, opts: &RenderOptions) -> Completed {
        let survivors = self.owner.shared.lock().survivors.clone();
        Completed::build(self, opts, survivors)
    }

    pub(super) fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.shared().lock())
    }
}

/// Whether something of the command is left after its exit, or holds its
/// output open.
pub(super) fn something_is_left(shared: &Shared) -> bool {
    !shared.lock().output_done || kill::may_have_members(shared)
}

/// Kills what is left of the command, then drains its output. Blocking.
pub(super) fn kill_and_drain(shared: &Shared) {
    kill::kill_everything(shared);
    kill::drain(shared);
}

pub(super) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

fn captures_for(spec: &SpawnSpec) -> Captures {
    let store = if spec.limits.spill {
        super::glue::open_spill_store(&spec.home, spec.limits.spill_cap_bytes)
    } else {
        None
    };
    let config = |label: &str| SinkConfig {
        cap_bytes: spec.limits.cap_bytes,
        secrets: spec.secrets.clone(),
        keep_color: spec.limits.keep_color,
        keep_blanks: spec.limits.keep_blanks,
        tty: spec.tty,
        label: format!("{}-{label}", spec.session_tag),
        spill: store.clone(),
        skim_after: skim_after(&spec.limits),
    };
    if spec.merge_output || spec.tty {
        Captures::Merged(Sink::new(config("output")))
    } else {
        Captures::Separate {
            stdout: Sink::new(config("stdout")),
            stderr: Sink::new(config("stderr")),
        }
    }
}

/// Raw bytes after which a stream is skimmed: a quarter of the spill store
/// (one flood must not evict every other run's file; 16 MiB of log is more
/// than anyone reads), at least a few times the memory cap.
fn skim_after(limits: &super::spec::OutputLimits) -> u64 {
    let memory = (limits.cap_bytes as u64).saturating_mul(8);
    if limits.spill {
        (limits.spill_cap_bytes / 4).max(memory)
    } else {
        memory
    }
}

fn spawn_error(program: &std::ffi::OsStr, source: std::io::Error) -> ExecError {
    let program = program.to_owned();
    match source.raw_os_error() {
        Some(libc::ENOENT) => ExecError::NotFound { program },
        Some(libc::EACCES | libc::ENOEXEC | libc::EISDIR | libc::ETXTBSY | libc::EPERM) => {
            ExecError::NotExecutable { program, source }
        }
        _ => ExecError::Spawn { program, source },
    }
}

/// A bigger pipe means fewer wake-ups per megabyte of output. Returns the
/// capacity the pipe has now (0 when it cannot be told).
fn enlarge_pipe(fd: &OwnedFd) -> usize {
    // SAFETY: F_SETPIPE_SZ and F_GETPIPE_SZ on a pipe we own; a failure
    // (over /proc/sys/fs/pipe-max-size for an unprivileged user) is harmless.
    let size = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, 1024 * 1024) };
    let size = if size > 0 {
        size
    } else {
        unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) }
    };
    usize::try_from(size).unwrap_or(0)
}

fn floor_char_boundary(bytes: &[u8], mut index: usize) -> usize {
    index = index.min(bytes.len());
    while index > 0 && index < bytes.len() && (bytes[index] & 0xC0) == 0x80 {
        index -= 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_can_be_shared_across_tasks_and_threads() {
        fn shareable<T: Send + Sync + Clone + 'static>() {}
        shareable::<Execution>();
        fn sendable<T: Send>(_: &T) {}
        let execution: Option<Execution> = None;
        if let Some(execution) = &execution {
            sendable(&execution.finish(&RenderOptions::default()));
            sendable(&execution.wait(Instant::now(), None));
            sendable(&execution.terminate());
        }
    }

    #[test]
    fn char_boundaries_are_found_backwards() {
        let text = "aé€b".as_bytes();
        assert_eq!(floor_char_boundary(text, 2), 1);
        assert_eq!(floor_char_boundary(text, 4), 3);
        assert_eq!(floor_char_boundary(text, 99), text.len());
    }
}
