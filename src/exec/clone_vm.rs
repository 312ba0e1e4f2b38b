//! `clone3` the way `posix_spawn` forks: `CLONE_VM | CLONE_VFORK`, the child
//! on a stack of its own, in our address space until it execs.
//!
//! A plain fork copies the page tables of the whole process (of a tokio
//! server with a big heap, most of the cost of a spawn), and the child's
//! exec then tears that copy down again. Sharing the memory costs neither;
//! the parent thread waits (`CLONE_VFORK`) until the child has exec'd or
//! exited, so the child may read the plan we prepared on our stack.
//!
//! The child cannot return into Rust code: it comes out of the system call
//! on the new stack, where no caller's frame exists. So the call is a few
//! lines of assembly that hand the child straight to a function that never
//! returns. Only x86_64 has them; elsewhere [`clone_vm`] is `None` and the
//! caller forks the plain way.

use super::clone3::CloneArgs;

/// What the child runs: never returns (it execs or exits).
pub(super) type ChildEntry = unsafe extern "C" fn(*const u8) -> !;

/// Bytes of stack for the child: it makes a few dozen system calls through
/// libc and nothing else.
#[cfg(target_arch = "x86_64")]
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// A child stack: its own mapping with an inaccessible page below it, so an
/// overflow faults in the child instead of writing over our heap. One per
/// thread that spawns, made on its first spawn and kept: a thread's spawns
/// follow each other (CLONE_VFORK holds it until the child exec'd), and
/// mapping, protecting and unmapping a stack per spawn would cost each one
/// TLB shoot-downs on every core running one of our threads.
#[cfg(target_arch = "x86_64")]
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

#[cfg(target_arch = "x86_64")]
impl ChildStack {
    fn new() -> std::io::Result<Self> {
        const GUARD: usize = 4096;
        let len = CHILD_STACK_BYTES + GUARD;
        // SAFETY: a fresh private anonymous mapping, ours alone.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let stack = Self { base, len };
        // SAFETY: the lowest page of the mapping we just made.
        if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// This thread's stack (made on first use): lowest address and size.
    fn for_this_thread() -> std::io::Result<(u64, u64)> {
        thread_local! {
            static STACK: std::cell::OnceCell<ChildStack> = const { std::cell::OnceCell::new() };
        }
        STACK.with(|cell| {
            if let Some(stack) = cell.get() {
                return Ok(stack.bounds());
            }
            let stack = ChildStack::new()?;
            let bounds = stack.bounds();
            let _ = cell.set(stack);
            Ok(bounds)
        })
    }

    /// Lowest address and size, for `clone_args.stack`/`stack_size` (the
    /// guard page included: the kernel starts the child at the top, which
    /// is page-aligned, so 16-byte aligned as a call needs).
    fn bounds(&self) -> (u64, u64) {
        (self.base as u64, self.len as u64)
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping `new` made.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Runs `clone3` with `args` plus `CLONE_VM | CLONE_VFORK` on this thread's
/// child stack; in the child calls `entry(arg)`. Returns the child's pid,
/// or the error of the clone (or of making the stack).
///
/// # Safety
/// `entry` must only make async-signal-safe calls (it shares our memory)
/// and must never return; `arg` must stay valid until this returns; all
/// signals should be blocked so nothing is delivered to the child before
/// it has reset its handlers.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn clone_vm(
    args: &CloneArgs,
    entry: ChildEntry,
    arg: *const u8,
) -> Option<std::io::Result<i64>> {
    let (stack, stack_size) = match ChildStack::for_this_thread() {
        Ok(bounds) => bounds,
        Err(err) => return Some(Err(err)),
    };
    let mut vm_args = CloneArgs {
        flags: args.flags | libc::CLONE_VM as u64 | libc::CLONE_VFORK as u64,
        stack,
        stack_size,
        ..*args
    };
    let result: i64;
    // SAFETY: see the function's contract; the stack is this thread's and
    // unused while it waits (CLONE_VFORK returns once the child exec'd or
    // exited). The parent comes back from the syscall with rcx/r11
    // clobbered and rax = the pid; the child (rax = 0) runs on the stack the
    // kernel switched it to and never comes back.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => result,
            in("rdi") std::ptr::addr_of_mut!(vm_args),
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    Some(if result < 0 {
        Err(std::io::Error::from_raw_os_error((-result) as i32))
    } else {
        Ok(result)
    })
}

/// Not available off x86_64: the caller forks without `CLONE_VM`.
///
/// # Safety
/// Always safe: does nothing.
#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn clone_vm(
    _args: &CloneArgs,
    _entry: ChildEntry,
    _arg: *const u8,
) -> Option<std::io::Result<i64>> {
    None
}
