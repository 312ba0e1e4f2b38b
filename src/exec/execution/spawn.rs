//! Starting a command: the checks before the fork (working directory,
//! program, wrapper), the fork itself with its stdio (pipes or a PTY) and
//! cgroup, the output captures, and the pump thread that reads it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{Execution, Owner};
use crate::exec::cgroup::CgroupGuard;
use crate::exec::error::ExecError;
use crate::exec::glue::{Sink, SinkConfig};
use crate::exec::kill;
use crate::exec::pids_limit::PidsHold;
use crate::exec::pty::{self, CrlfNormalizer};
use crate::exec::pump::{self, Source};
use crate::exec::resolve;
use crate::exec::spawner::{self, ChildStdio, ForkRequest};
use crate::exec::spec::SpawnSpec;
use crate::exec::state::{Captures, Shared, State, StreamKind};
use crate::exec::tap::{Attach, TapWriter};

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
        // The handle the child enters: the path is not looked up again.
        let cwd = resolve::open_workdir(&spec.cwd, spec.cwd_beneath.as_deref())?;
        let command_program = resolve::resolve_program(&program_name, &spec.cwd, &spec.env)?;
        let mut argv = spec.wrapper.clone();
        argv.extend(spec.argv.iter().cloned());
        // The wrapper starts unconfined: with its own environment, the
        // command's handed over on a descriptor it reads once confined.
        let (env, handover) = match (&spec.wrapper_env, spec.wrapper.is_empty()) {
            (Some(base), false) => {
                let block = crate::sandbox::env_fd::encode(&spec.env);
                let fd = crate::sandbox::env_fd::sealed_memfd(&block).map_err(|source| {
                    ExecError::Spawn {
                        program: program_name.clone(),
                        source,
                    }
                })?;
                let mut env = base.clone();
                env.insert(
                    crate::sandbox::env_fd::ENV_FD_VAR.into(),
                    fd.as_raw_fd().to_string().into(),
                );
                (env, Some(fd))
            }
            _ => (spec.env.clone(), None),
        };
        let program = if spec.wrapper.is_empty() {
            command_program
        } else {
            let wrapper = argv[0].clone();
            resolve::resolve_program(&wrapper, &spec.cwd, &env)?
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
        let pids = match spec.pids_limit {
            Some(max) => PidsHold::hold(max, &spec.session_tag, cgroup.as_ref(), spec.use_cgroup),
            None => PidsHold::None,
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
            cwd,
            env,
            inherit_fd: handover.as_ref().map(AsRawFd::as_raw_fd),
            limits: pids.child(),
            stdio,
            cgroup: cgroup.as_ref().map(|c| spawner::CgroupFds {
                dir: c.dir_fd(),
                procs: c.procs_fd(),
            }),
        })
        .map_err(|source| spawn_error(&program_name, source))?;
        // The child has its copy (or failed): ours closes now.
        drop(handover);
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
            });
        }
        for (pipe, kind) in [
            (forked.stdout, StreamKind::Stdout),
            (forked.stderr, StreamKind::Stderr),
        ] {
            if let Some(fd) = pipe {
                pty::set_nonblocking(&fd).map_err(watch_error)?;
                enlarge_pipe(&fd);
                sources.push(Source {
                    fd,
                    kind,
                    crlf: None,
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
            _pids: pids,
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
            _live: kill::LiveExecutionGuard::new(),
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
}

fn captures_for(spec: &SpawnSpec) -> Captures {
    let store = if spec.limits.spill {
        crate::exec::glue::open_spill_store(&spec.home, spec.limits.spill_cap_bytes)
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
fn skim_after(limits: &crate::exec::spec::OutputLimits) -> u64 {
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

/// A bigger pipe means fewer wake-ups per megabyte of output and a writer
/// that blocks less often while the pump is busy.
fn enlarge_pipe(fd: &OwnedFd) {
    // SAFETY: F_SETPIPE_SZ on a pipe we own; a failure (over
    // /proc/sys/fs/pipe-max-size for an unprivileged user) is harmless.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, 1024 * 1024) };
}
