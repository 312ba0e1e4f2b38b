//! What a command's own process does between the clone (or fork) and the
//! exec, written once for both spawn paths (`clone3`'s child and the fork
//! path's `pre_exec`): a session of its own, the terminal as its
//! controlling one, death with us, default signal dispositions, and no
//! inherited descriptor kept open through the exec.
//!
//! Everything here is a raw system call: the clone path's child shares no
//! lock-safe state with the parent (libc's wrappers may take locks).

/// Why the set-up stopped.
pub(super) enum SetupFailed {
    /// A system call failed; `errno` says which error.
    Errno,
    /// We died before the death signal was armed: the command must not run.
    ParentGone,
}

/// The kernel's `struct sigaction` (not libc's): all zero is `SIG_DFL`.
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Signals a command gets at their default even when we were started with
/// them ignored (under `nohup`, say); other ignored signals stay ignored,
/// as a shell leaves them.
const DEFAULT_SIGNALS: [libc::c_int; 5] = [
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGPIPE,
];

/// Puts this process under its process limit: into its v1 `pids` group,
/// or under `RLIMIT_NPROC` (never raising the inherited hard limit). A
/// failure leaves `errno` set: the command must not run unlimited.
///
/// # Safety
/// Only in a freshly forked or cloned child, before its exec.
pub(super) unsafe fn apply_limits(
    limits: &super::pids_limit::ChildLimits,
) -> Result<(), SetupFailed> {
    // SAFETY (whole body): raw system calls on our own state and stack.
    unsafe {
        if let Some(fd) = limits.join_procs
            && libc::write(fd, b"0".as_ptr().cast(), 1) != 1
        {
            return Err(SetupFailed::Errno);
        }
        if let Some(max) = limits.nproc {
            let mut old = libc::rlimit64 {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::syscall(
                libc::SYS_prlimit64,
                0,
                libc::RLIMIT_NPROC,
                std::ptr::null::<libc::rlimit64>(),
                std::ptr::addr_of_mut!(old),
            ) < 0
            {
                return Err(SetupFailed::Errno);
            }
            let max = max.min(old.rlim_max);
            let new = libc::rlimit64 {
                rlim_cur: max,
                rlim_max: max,
            };
            if libc::syscall(
                libc::SYS_prlimit64,
                0,
                libc::RLIMIT_NPROC,
                std::ptr::addr_of!(new),
                std::ptr::null_mut::<libc::rlimit64>(),
            ) < 0
            {
                return Err(SetupFailed::Errno);
            }
        }
    }
    Ok(())
}

/// Makes this process the command's: its own session and process group
/// (signalled as a whole; on pipes no controlling terminal, so `/dev/tty`
/// prompts fail at once instead of stopping it), the PTY on fd 0 as its
/// controlling terminal when `tty`, SIGKILL when `parent` dies, default
/// dispositions for [`DEFAULT_SIGNALS`], no blocked signal, and
/// close-on-exec on every descriptor above 2 but `inherit` (the one
/// descriptor handed on through the exec, see [`crate::sandbox::env_fd`]).
///
/// # Safety
/// Only in a freshly forked or cloned child, before its exec.
pub(super) unsafe fn become_command(
    parent: libc::pid_t,
    tty: bool,
    inherit: Option<libc::c_int>,
) -> Result<(), SetupFailed> {
    // SAFETY (whole body): async-signal-safe system calls on our own state.
    unsafe {
        if libc::setsid() < 0 {
            return Err(SetupFailed::Errno);
        }
        if tty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return Err(SetupFailed::Errno);
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) < 0 {
            return Err(SetupFailed::Errno);
        }
        // The parent may have died before the death signal was armed.
        if libc::getppid() != parent {
            return Err(SetupFailed::ParentGone);
        }
        for signal in DEFAULT_SIGNALS {
            let default = KernelSigaction::default();
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                std::ptr::addr_of!(default),
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
        let empty: u64 = 0;
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            std::ptr::addr_of!(empty),
            std::ptr::null_mut::<u64>(),
            8usize,
        );
        // Inherited descriptors without close-on-exec (a caller's pipe, a
        // jobserver) would keep our caller's pipes open through the command.
        let _ = libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if let Some(fd) = inherit
            && libc::fcntl(fd, libc::F_SETFD, 0) < 0
        {
            return Err(SetupFailed::Errno);
        }
    }
    Ok(())
}
