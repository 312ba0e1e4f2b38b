//! Forking children from one long-lived thread, and knowing which children
//! are ours to wait for.
//!
//! A parent-death signal (`PR_SET_PDEATHSIG`) fires when the *thread* that
//! forked exits, not the process: forking from a tokio worker or a
//! `spawn_blocking` thread that is later retired would kill a healthy
//! command. So every fork happens on one thread started on first use that
//! never exits. The same thread keeps the registry of children whose exit
//! status someone else collects (each [`super::Execution`] waits for its own
//! child): [`reap_orphans`] reaps every other child of ours, which, since
//! agent-reach is a child subreaper, are the orphans of commands it ran.
//! Anything else in the process that forks and waits must register its child
//! ([`KnownChildGuard`]) or its status could be reaped here.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::child_setup::SetupFailed;
use super::pids_limit::ChildLimits;
use super::procfs;

/// Pids of children whose exit status belongs to someone (not to the reaper).
static KNOWN: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

fn known() -> MutexGuard<'static, Option<HashSet<i32>>> {
    crate::sync::lock(&KNOWN)
}

/// Marks a pid as waited for by its owner until dropped.
#[derive(Debug)]
pub struct KnownChildGuard {
    pid: i32,
}

impl KnownChildGuard {
    /// Registers a child some other code forked and will wait for.
    pub fn register(pid: i32) -> Self {
        known().get_or_insert_with(HashSet::new).insert(pid);
        Self { pid }
    }

    /// The registered pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }
}

impl Drop for KnownChildGuard {
    fn drop(&mut self) {
        if let Some(set) = known().as_mut() {
            set.remove(&self.pid);
        }
    }
}

/// Set by processes whose only children are the engine's (`run`, `serve`):
/// then every child the engine did not start is an orphan of one of its
/// commands, which it may kill and reap.
static CLAIM_ALL_CHILDREN: AtomicBool = AtomicBool::new(false);

/// Set once a child cloned straight into its cgroup was killed at birth
/// (see [`CloneError::KilledAtBirth`](super::clone3::CloneError::KilledAtBirth)).
static INTO_CGROUP_KILLS: AtomicBool = AtomicBool::new(false);

/// Declares that this process starts children only through the engine, so
/// every unregistered child is an orphan of a command it ran. Without it (a
/// library embedder, a test binary) the engine never touches a child it
/// cannot attribute by session tag, cgroup or process group.
pub(crate) fn claim_all_children() {
    CLAIM_ALL_CHILDREN.store(true, Ordering::Relaxed);
}

/// Whether [`claim_all_children`] was called.
pub(crate) fn claims_all_children() -> bool {
    CLAIM_ALL_CHILDREN.load(Ordering::Relaxed)
}

/// Reaps zombie children of ours that nobody registered: orphans of commands
/// we ran, re-parented to us as their subreaper. Only in a process that
/// [claims all its children](claim_all_children); elsewhere see
/// [`reap_these`]. Returns how many.
pub(crate) fn reap_orphans() -> usize {
    if !claims_all_children() {
        return 0;
    }
    let unknown = unknown_children();
    reap_among(&unknown, &unknown)
}

/// Reaps those of `pids` that are zombie children of ours and not
/// registered: processes attributed to an execution and killed by it.
pub(crate) fn reap_these(pids: &[i32]) -> usize {
    reap_among(pids, &unknown_children())
}

/// Reaps those of `pids` that are among `unknown` (our unregistered
/// children, read once by the caller).
fn reap_among(pids: &[i32], unknown: &[i32]) -> usize {
    let mut reaped = 0;
    for pid in pids.iter().copied().filter(|pid| unknown.contains(pid)) {
        let mut status = 0;
        // SAFETY: waitpid on a specific pid with WNOHANG has no preconditions.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            reaped += 1;
        }
    }
    reaped
}

/// The stdio a child gets.
#[derive(Debug)]
pub(crate) enum ChildStdio {
    /// stdout and stderr piped to us; stdin /dev/null, or a pipe from us
    /// when `stdin_pipe` (a caller attached to the command, see
    /// [`crate::exec::Attach`]).
    Pipes { stdin_pipe: bool },
    /// All three on this PTY slave, which becomes the controlling terminal.
    Pty(std::os::fd::OwnedFd),
}

/// What to fork and exec.
#[derive(Debug)]
pub(crate) struct ForkRequest {
    /// The resolved executable.
    pub(crate) program: PathBuf,
    /// The full argv, argv[0] as the user gave it.
    pub(crate) argv: Vec<OsString>,
    /// The working directory, opened and checked: the child enters this
    /// handle with `fchdir`, never the path.
    pub(crate) cwd: OwnedFd,
    pub(crate) env: std::collections::BTreeMap<OsString, OsString>,
    /// A close-on-exec descriptor of ours the child keeps through its exec
    /// (the command's environment handed to the sandbox wrapper).
    pub(crate) inherit_fd: Option<RawFd>,
    /// The process limit the child applies to itself.
    pub(crate) limits: ChildLimits,
    pub(crate) stdio: ChildStdio,
    /// The execution's cgroup: its directory (to be born in it with
    /// clone3) and its `cgroup.procs` open for writing (the fallback: the
    /// child moves itself in between fork and exec).
    pub(crate) cgroup: Option<CgroupFds>,
}

/// Descriptors of the execution's cgroup.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CgroupFds {
    pub(crate) dir: RawFd,
    pub(crate) procs: RawFd,
}

/// A started child and the registration that keeps the reaper off it.
#[derive(Debug)]
pub(crate) struct Forked {
    pub(crate) pid: i32,
    /// Its pidfd, when clone3 made one.
    pub(crate) pidfd: Option<OwnedFd>,
    /// The write end of its stdin pipe, when one was asked for.
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
    pub(crate) known: KnownChildGuard,
}

type Job = Box<dyn FnOnce() + Send>;

fn spawner() -> Option<&'static Mutex<mpsc::Sender<Job>>> {
    static SENDER: OnceLock<Option<Mutex<mpsc::Sender<Job>>>> = OnceLock::new();
    SENDER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("agent-reach-spawner".into())
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Whether the calling thread is the process's main thread, which lives as
/// long as the process: forking there needs no hand-over.
fn on_main_thread() -> bool {
    // SAFETY: gettid and getpid have no preconditions.
    unsafe { libc::gettid() == libc::getpid() }
}

/// Our children that nobody registered: orphans of commands we ran (we are
/// their subreaper), alive or zombies.
pub(crate) fn unknown_children() -> Vec<i32> {
    let guard = known();
    procfs::own_children()
        .into_iter()
        .filter(|pid| !guard.as_ref().is_some_and(|set| set.contains(pid)))
        .collect()
}

/// Forks and execs on a thread that outlives the child: the calling thread
/// when it is the main thread, else the spawner thread.
pub(crate) fn fork_exec(request: ForkRequest) -> std::io::Result<Forked> {
    if on_main_thread() {
        return fork_exec_here(request);
    }
    let broken = || std::io::Error::other("the spawner thread is gone");
    let sender = spawner().ok_or_else(broken)?;
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _ = reply_tx.send(fork_exec_here(request));
    });
    crate::sync::lock(sender).send(job).map_err(|_| broken())?;
    reply_rx.recv().map_err(|_| broken())?
}

fn fork_exec_here(request: ForkRequest) -> std::io::Result<Forked> {
    // Held across the clone, so the reaper cannot take the child's status
    // before it is registered.
    let mut registry = known();
    // After a child cloned straight into its cgroup was killed at birth,
    // children join their cgroup by writing to `cgroup.procs` instead
    // (std's path below), which the kernel does not hold against them.
    if request.cgroup.is_none() || !INTO_CGROUP_KILLS.load(Ordering::Relaxed) {
        match super::clone3::spawn(&request, request.cgroup.map(|c| c.dir)) {
            Ok(cloned) => {
                registry.get_or_insert_with(HashSet::new).insert(cloned.pid);
                return Ok(Forked {
                    pid: cloned.pid,
                    pidfd: Some(cloned.pidfd),
                    stdin: cloned.stdin,
                    stdout: cloned.stdout,
                    stderr: cloned.stderr,
                    known: KnownChildGuard { pid: cloned.pid },
                });
            }
            Err(super::clone3::CloneError::Failed(err)) => return Err(err),
            // The command never ran: start it the other way, now and from
            // now on.
            Err(super::clone3::CloneError::KilledAtBirth) => {
                INTO_CGROUP_KILLS.store(true, Ordering::Relaxed);
            }
            // An old kernel: std's fork, and the cgroup.procs write.
            Err(super::clone3::CloneError::Unsupported) => {}
        }
    }
    drop(registry);
    let mut command = Command::new(&request.program);
    if let Some(arg0) = request.argv.first() {
        command.arg0(arg0);
    }
    command
        .args(request.argv.iter().skip(1))
        .env_clear()
        .envs(&request.env);
    let tty = match request.stdio {
        ChildStdio::Pipes { stdin_pipe } => {
            command
                .stdin(if stdin_pipe {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            false
        }
        ChildStdio::Pty(slave) => {
            command
                .stdin(Stdio::from(slave.try_clone()?))
                .stdout(Stdio::from(slave.try_clone()?))
                .stderr(Stdio::from(slave));
            true
        }
    };
    let parent = std::process::id() as libc::pid_t;
    let cgroup_fd = request.cgroup.map(|c| c.procs);
    let inherit_fd = request.inherit_fd;
    let limits = request.limits;
    let cwd_fd = request.cwd.as_raw_fd();
    // SAFETY: the closure runs between fork and exec and only makes
    // async-signal-safe system calls on values captured by copy; `cwd_fd`
    // stays open until `spawn` returns (the request outlives it).
    unsafe {
        command.pre_exec(move || in_child(parent, tty, cgroup_fd, inherit_fd, limits, cwd_fd));
    }
    let mut known = known();
    let mut child = command.spawn()?;
    let pid = child.id() as i32;
    known.get_or_insert_with(HashSet::new).insert(pid);
    drop(known);
    // The Command (and with it the parent's copies of the PTY slave) is
    // dropped here, so the master sees EOF once the child's side closes.
    drop(command);
    Ok(Forked {
        pid,
        pidfd: None,
        stdin: child.stdin.take().map(OwnedFd::from),
        stdout: child.stdout.take().map(OwnedFd::from),
        stderr: child.stderr.take().map(OwnedFd::from),
        known: KnownChildGuard { pid },
    })
}

/// Runs in the child between fork and exec.
fn in_child(
    parent: libc::pid_t,
    tty: bool,
    cgroup_fd: Option<RawFd>,
    inherit_fd: Option<RawFd>,
    limits: ChildLimits,
    cwd_fd: RawFd,
) -> std::io::Result<()> {
    // SAFETY (whole function): only async-signal-safe system calls.
    unsafe {
        if libc::fchdir(cwd_fd) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = cgroup_fd {
            // Best effort: without it the session tag still finds escapees.
            let _ = libc::write(fd, b"0".as_ptr().cast(), 1);
        }
        if super::child_setup::apply_limits(&limits).is_err() {
            return Err(std::io::Error::last_os_error());
        }
        match super::child_setup::become_command(parent, tty, inherit_fd) {
            Ok(()) => {}
            Err(SetupFailed::Errno) => return Err(std::io::Error::last_os_error()),
            Err(SetupFailed::ParentGone) => libc::_exit(125),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_on_the_spawner_thread_and_registers_the_child() {
        let forked = fork_exec(ForkRequest {
            program: "/bin/sh".into(),
            argv: vec!["sh".into(), "-c".into(), "exit 3".into()],
            cwd: OwnedFd::from(std::fs::File::open("/").unwrap()),
            env: Default::default(),
            inherit_fd: None,
            limits: ChildLimits::default(),
            stdio: ChildStdio::Pipes { stdin_pipe: false },
            cgroup: None,
        })
        .unwrap();
        let pid = forked.known.pid();
        assert!(known().as_ref().unwrap().contains(&pid));
        std::thread::sleep(std::time::Duration::from_millis(100));
        reap_orphans();
        let mut status = 0;
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid, "the reaper left our child alone");
        assert_eq!(libc::WEXITSTATUS(status), 3);
        drop(forked.known);
        assert!(!known().as_ref().unwrap().contains(&pid));
    }

    #[test]
    fn the_child_sets_its_rlimit_nproc_before_exec() {
        let forked = fork_exec(ForkRequest {
            program: "/bin/sh".into(),
            argv: vec!["sh".into(), "-c".into(), "exit $(ulimit -p)".into()],
            cwd: OwnedFd::from(std::fs::File::open("/").unwrap()),
            env: Default::default(),
            inherit_fd: None,
            limits: ChildLimits {
                join_procs: None,
                nproc: Some(42),
            },
            stdio: ChildStdio::Pipes { stdin_pipe: false },
            cgroup: None,
        })
        .unwrap();
        let mut status = 0;
        // SAFETY: waiting for our own registered child.
        unsafe { libc::waitpid(forked.pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(
            libc::WEXITSTATUS(status),
            42,
            "ulimit -p (processes) in the child"
        );
    }

    #[test]
    fn the_command_gets_default_signals_but_keeps_other_ignored_ones() {
        let ignore = |signal| {
            // SAFETY: changing a disposition no other test relies on.
            unsafe { libc::signal(signal, libc::SIG_IGN) }
        };
        let old_hup = ignore(libc::SIGHUP);
        let old_usr2 = ignore(libc::SIGUSR2);
        let run = |script: &str| {
            let forked = fork_exec(ForkRequest {
                program: "/bin/sh".into(),
                argv: vec!["sh".into(), "-c".into(), script.into()],
                cwd: OwnedFd::from(std::fs::File::open("/").unwrap()),
                env: Default::default(),
                inherit_fd: None,
                limits: ChildLimits::default(),
                stdio: ChildStdio::Pipes { stdin_pipe: false },
                cgroup: None,
            })
            .unwrap();
            let mut status = 0;
            // SAFETY: waiting for our own registered child.
            unsafe { libc::waitpid(forked.pid, &mut status, 0) };
            status
        };
        let hup = run("kill -HUP $$; exit 0");
        let usr2 = run("kill -USR2 $$; exit 7");
        // SAFETY: restoring what `signal` returned.
        unsafe {
            libc::signal(libc::SIGHUP, old_hup);
            libc::signal(libc::SIGUSR2, old_usr2);
        }
        assert!(
            libc::WIFSIGNALED(hup) && libc::WTERMSIG(hup) == libc::SIGHUP,
            "SIGHUP is back to its default: {hup:#x}"
        );
        assert!(
            libc::WIFEXITED(usr2) && libc::WEXITSTATUS(usr2) == 7,
            "SIGUSR2 stays ignored: {usr2:#x}"
        );
    }
}
