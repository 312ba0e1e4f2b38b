//! Fork and exec with `clone3(CLONE_INTO_CGROUP | CLONE_PIDFD)`: the child
//! is born inside the execution's cgroup and we get its pidfd atomically.
//!
//! Moving a running process into a cgroup (writing `cgroup.procs`) waits
//! for an RCU grace period, about 10 ms on a busy machine: that alone would
//! make `agent-reach run -- true` ten times slower than `true`. Being born
//! in the cgroup costs nothing extra. std's `Command` cannot pass clone3
//! flags, so this module does the fork itself, with the same rules as a
//! `pre_exec` closure: everything is prepared before the clone, and the
//! child only makes async-signal-safe system calls before `execve`.
//! Where the kernel lacks clone3 or `CLONE_INTO_CGROUP`, the caller falls
//! back to std's spawn and the `cgroup.procs` write.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use super::child_setup::{SetupFailed, apply_limits, become_command};
use super::clone_vm::clone_vm;
use super::pids_limit::ChildLimits;
use super::spawner::{ChildStdio, ForkRequest};

const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// Resets every handled signal to its default in the child (Linux 5.5):
/// no handler of ours can run there, with no `sigaction` call in the child
/// (libc's can take a lock that, in memory shared with us, a SIGKILL at the
/// wrong moment would leave taken for good).
const CLONE_CLEAR_SIGHAND: u64 = 0x1_0000_0000;

/// `struct clone_args` of the kernel (version 2, with `cgroup`).
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub(super) struct CloneArgs {
    pub(super) flags: u64,
    pub(super) pidfd: u64,
    pub(super) child_tid: u64,
    pub(super) parent_tid: u64,
    pub(super) exit_signal: u64,
    pub(super) stack: u64,
    pub(super) stack_size: u64,
    pub(super) tls: u64,
    pub(super) set_tid: u64,
    pub(super) set_tid_size: u64,
    pub(super) cgroup: u64,
}

/// A child started by [`spawn`].
#[derive(Debug)]
pub(crate) struct Cloned {
    pub(crate) pid: i32,
    pub(crate) pidfd: OwnedFd,
    pub(crate) stdin: Option<OwnedFd>,
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
}

/// Why [`spawn`] did not start anything.
#[derive(Debug)]
pub(crate) enum CloneError {
    /// The kernel cannot do it this way: use the std path.
    Unsupported,
    /// Starting failed (the child's errno from exec, or ours from setup).
    Failed(io::Error),
    /// The child was killed before it ran a single instruction (reaped):
    /// the command never started. Linux (seen on 6.18) SIGKILLs a child
    /// cloned into a cgroup whose `cgroup.kill` count differs from that of
    /// the cgroup the parent runs in, e.g. when agent-reach itself runs in
    /// a cgroup that was once killed. Only reported for cgroup clones.
    KilledAtBirth,
}

fn cstring(bytes: &OsStr) -> Result<CString, CloneError> {
    CString::new(bytes.as_bytes()).map_err(|_| {
        CloneError::Failed(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument or variable contains a NUL byte",
        ))
    })
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Everything the child needs, as raw pointers into values that outlive
/// the clone.
struct ChildPlan {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// The checked working directory's handle (entered with `fchdir`).
    cwd: RawFd,
    stdin: RawFd,
    stdout: RawFd,
    stderr: RawFd,
    tty: bool,
    parent: libc::pid_t,
    report: RawFd,
    /// Kept through the exec (-1: none).
    inherit: RawFd,
    limits: ChildLimits,
}

/// Starts `request`, born in the cgroup whose directory `cgroup_dir` is
/// open when one is given.
pub(crate) fn spawn(
    request: &ForkRequest,
    cgroup_dir: Option<RawFd>,
) -> Result<Cloned, CloneError> {
    let failed = CloneError::Failed;
    let program = cstring(request.program.as_os_str())?;
    let argv: Vec<CString> = request
        .argv
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<_, _>>()?;
    let envp: Vec<CString> = request
        .env
        .iter()
        .map(|(k, v)| {
            let mut entry = k.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(v.as_bytes());
            cstring(OsStr::from_bytes(&entry))
        })
        .collect::<Result<_, _>>()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());

    // The child's ends are closed in the parent when these drop.
    let (child_stdin, child_stdout, child_stderr, our_stdin, our_stdout, our_stderr, tty);
    match &request.stdio {
        ChildStdio::Pipes { stdin_pipe } => {
            if *stdin_pipe {
                let (in_read, in_write) = pipe().map_err(failed)?;
                child_stdin = in_read;
                our_stdin = Some(in_write);
            } else {
                child_stdin = OwnedFd::from(std::fs::File::open("/dev/null").map_err(failed)?);
                our_stdin = None;
            }
            let (out_read, out_write) = pipe().map_err(failed)?;
            let (err_read, err_write) = pipe().map_err(failed)?;
            child_stdout = out_write;
            child_stderr = err_write;
            our_stdout = Some(out_read);
            our_stderr = Some(err_read);
            tty = false;
        }
        ChildStdio::Pty(slave) => {
            child_stdin = slave.try_clone().map_err(failed)?;
            child_stdout = slave.try_clone().map_err(failed)?;
            child_stderr = slave.try_clone().map_err(failed)?;
            our_stdin = None;
            our_stdout = None;
            our_stderr = None;
            tty = true;
        }
    }
    let (report_read, report_write) = pipe().map_err(failed)?;
    let plan = ChildPlan {
        program: program.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        cwd: request.cwd.as_raw_fd(),
        stdin: child_stdin.as_raw_fd(),
        stdout: child_stdout.as_raw_fd(),
        stderr: child_stderr.as_raw_fd(),
        tty,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        report: report_write.as_raw_fd(),
        inherit: request.inherit_fd.unwrap_or(-1),
        limits: request.limits,
    };
    let mut pidfd: libc::c_int = -1;
    let into_cgroup = if cgroup_dir.is_some() {
        CLONE_INTO_CGROUP
    } else {
        0
    };
    let mut args = CloneArgs {
        flags: CLONE_PIDFD | CLONE_CLEAR_SIGHAND | into_cgroup,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup_dir.map_or(0, |fd| fd as u64),
        ..CloneArgs::default()
    };
    // Signals stay blocked across the clone so nothing is delivered to the
    // child before CLONE_CLEAR_SIGHAND has reset the handlers.
    let blocked = AllSignalsBlockedGuard::new();
    // SAFETY: `child_entry` only makes async-signal-safe calls and never
    // returns; signals are blocked.
    let shared_memory = unsafe { clone_vm(&args, child_entry, std::ptr::addr_of!(plan).cast()) };
    let result = match shared_memory {
        Some(result) => result,
        // SAFETY: clone3 without CLONE_VM is a fork: the child gets a copy
        // of our memory, in which every pointer of `plan` stays valid.
        None => unsafe {
            let pid = libc::syscall(
                libc::SYS_clone3,
                std::ptr::addr_of_mut!(args),
                std::mem::size_of::<CloneArgs>(),
            );
            if pid == 0 {
                child(&plan)
            }
            if pid < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(pid)
            }
        },
    };
    drop(blocked);
    let pid = match result {
        Ok(pid) => pid,
        Err(clone_error) => {
            return Err(match clone_error.raw_os_error() {
                Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EOPNOTSUPP) => {
                    CloneError::Unsupported
                }
                _ => CloneError::Failed(clone_error),
            });
        }
    };
    let pid = pid as i32;
    // SAFETY: CLONE_PIDFD stored a new descriptor we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    drop((child_stdin, child_stdout, child_stderr, report_write));
    // The child's report: the byte it writes first thing, then an errno if
    // anything up to the exec failed; close-on-exec ends it.
    let mut report = [0u8; 1 + 4];
    let read = read_full(&report_read, &mut report);
    let reap = || {
        let mut status = 0;
        // SAFETY: reaping our child, which ended before exec.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    };
    if read == report.len() {
        let errno = i32::from_ne_bytes([report[1], report[2], report[3], report[4]]);
        reap();
        return Err(CloneError::Failed(io::Error::from_raw_os_error(errno)));
    }
    if read == 0 && into_cgroup != 0 {
        reap();
        return Err(CloneError::KilledAtBirth);
    }
    Ok(Cloned {
        pid,
        pidfd,
        stdin: our_stdin,
        stdout: our_stdout,
        stderr: our_stderr,
    })
}

/// Blocks every signal for the calling thread; restores the old mask on drop.
struct AllSignalsBlockedGuard {
    old: libc::sigset_t,
}

impl AllSignalsBlockedGuard {
    fn new() -> Self {
        // SAFETY: sigfillset initializes `all`; pthread_sigmask fills `old`.
        unsafe {
            let mut all = std::mem::zeroed::<libc::sigset_t>();
            let mut old = std::mem::zeroed::<libc::sigset_t>();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            Self { old }
        }
    }
}

impl Drop for AllSignalsBlockedGuard {
    fn drop(&mut self) {
        // SAFETY: restoring a mask pthread_sigmask gave us.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the unfilled part of our buffer.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
            )
        };
        if n > 0 {
            got += n as usize;
        } else if n == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
    got
}

/// [`child`] in the calling convention [`clone_vm`] starts it with.
///
/// # Safety
/// As [`child`]; `plan` points at a live [`ChildPlan`].
unsafe extern "C" fn child_entry(plan: *const u8) -> ! {
    // SAFETY: clone_vm passes the plan pointer it was given.
    unsafe { child(&*plan.cast::<ChildPlan>()) }
}

/// The child between clone and exec: only async-signal-safe calls.
///
/// # Safety
/// Must only run in a freshly cloned child, with `plan` pointing into
/// memory copied from the parent.
unsafe fn child(plan: &ChildPlan) -> ! {
    unsafe fn fail(report: RawFd) -> ! {
        unsafe {
            let errno = *libc::__errno_location();
            let bytes = errno.to_ne_bytes();
            libc::write(report, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        }
    }
    unsafe {
        // Alive: what tells a failed exec or a normal one from a child that
        // never ran (see `CloneError::KilledAtBirth`).
        libc::write(plan.report, b"+".as_ptr().cast(), 1);
        for (fd, target) in [(plan.stdin, 0), (plan.stdout, 1), (plan.stderr, 2)] {
            // dup2 clears close-on-exec on the target; onto itself it does
            // nothing (stdin was closed and /dev/null took fd 0), so clear it.
            let placed = if fd == target {
                libc::fcntl(target, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if placed < 0 {
                fail(plan.report);
            }
        }
        if libc::fchdir(plan.cwd) < 0 {
            fail(plan.report);
        }
        // CLONE_CLEAR_SIGHAND reset our handlers; the rest as on the fork
        // path.
        if apply_limits(&plan.limits).is_err() {
            fail(plan.report);
        }
        let inherit = (plan.inherit >= 0).then_some(plan.inherit);
        match become_command(plan.parent, plan.tty, inherit) {
            Ok(()) => {}
            Err(SetupFailed::Errno) => fail(plan.report),
            Err(SetupFailed::ParentGone) => libc::_exit(125),
        }
        libc::execve(plan.program, plan.argv, plan.envp);
        fail(plan.report)
    }
}
