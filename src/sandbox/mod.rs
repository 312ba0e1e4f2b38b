//! The sandbox wrapper: Landlock and seccomp, fail-closed, attested.
//!
//! `agent-reach-sandbox` confines itself, then execs the command, so the
//! confinement applies to the command and everything it starts, never to
//! agent-reach's engine. The engine reaches it through the session PATH link
//! with the argv from [`SandboxSpec::wrapper_argv`] and reads the result's
//! `sandbox` field back with [`read_attestation`].
//!
//! # Threat model
//!
//! The adversary is the command: a model-written script, or a tool it
//! downloaded, running as the same user as the agent (or as root in a
//! container) and trying to reach outside what the policy grants. Covered:
//!
//! - **Files** (Landlock, and under it a private read-only mount namespace
//!   where the kernel allows one): writes outside the writable roots,
//!   including through a symlink pointing out, renaming or hard-linking a
//!   file out or in, truncation; metadata outside (`chmod`, `chown`, `touch`,
//!   xattrs, `chattr`: mount layer only); device nodes anywhere (`mknod` of a
//!   raw disk as root); writes into a top-level `.git` (hooks, config) of a
//!   writable root and its worktree/submodule `gitdir`/`commondir` targets;
//!   agent-reach's own state directory (the session PATH links) when it lies
//!   inside a writable root.
//!   Reading and executing stay allowed everywhere.
//! - **Network** (seccomp, plus Landlock TCP/UDP rules where the kernel has
//!   them): no socket but `AF_UNIX`; abstract Unix sockets outside the sandbox
//!   unreachable (Landlock scoping); inherited non-Unix sockets closed.
//! - **Processes**: no `ptrace`, no reading or writing another process's
//!   memory or environment, no signals to processes outside the sandbox
//!   (Landlock scoping), no keystrokes pushed into the agent's terminal
//!   (`TIOCSTI`, `TIOCLINUX`).
//! - **Privilege**: `no_new_privs` (setuid binaries do not elevate); no user
//!   namespaces, mounts, kernel modules, kexec, bpf, io_uring, perf, port I/O,
//!   `open_by_handle_at`, `setns`, clock, hostname or kernel log changes;
//!   x32 syscall numbers closed; 32-bit (i386) syscalls kill the process.
//! - **Secrets** (read-only and workspace-write, in the private mount
//!   namespace; [`hidden`]): the paths the engine names with the hidden
//!   `--hide` flag (the listeners' token file, the registry's secrets file)
//!   read as empty, and `/proc` is a fresh one showing only the command's own
//!   processes, so agent-reach's `environ`, `cmdline` and descriptors are out
//!   of reach. Without a mount namespace a `--hide` path still readable is a
//!   failure (125, or a `--best-effort` line); `/proc` then stays the host's.
//! - **Undoing it**: every layer survives exec and only ever stacks, so a
//!   nested `agent-reach-sandbox --policy danger-full-access` stays confined.
//!
//! Not covered: reading anything else (every other file is readable, and
//! under `danger-full-access` everything is); as a non-root user, other
//! processes' `cmdline`, `status` and `fd/` listing (the kernel refuses the
//! user namespace a fresh `/proc`; `environ`, `maps`, `mem` and the links
//! stay refused);
//! file descriptors
//! the parent passes in keep their access (the engine passes none but
//! stdio: the descriptor holding the command's environment, see
//! [`env_fd`], is read and closed by the wrapper before the exec); pathname Unix
//! sockets that lead out (a Docker or SSH agent socket, or a local DNS
//! resolver that queries the network for the command); CPU, memory and disk
//! exhaustion; kernel bugs; `.git` directories below the top of a writable
//! root or created by the command itself; and, without a mount namespace
//! (no root and no unprivileged user namespaces, or a nested sandbox),
//! metadata changes outside the writable roots.

// Windows compiles only the policy names (a registry's `sandbox` keys and
// a request's `sandbox` field parse there too, and are then refused).
#[cfg(unix)]
pub mod args;
#[cfg(unix)]
pub(crate) mod attestation;
#[cfg(unix)]
pub(crate) mod command;
#[cfg(target_os = "linux")]
pub(crate) mod confine;
#[cfg(unix)]
pub(crate) mod env_fd;
#[cfg(target_os = "linux")]
pub(crate) mod error;
#[cfg(target_os = "linux")]
pub mod fs_plan;
#[cfg(target_os = "linux")]
pub(crate) mod hidden;
#[cfg(target_os = "linux")]
pub(crate) mod landlock_rules;
#[cfg(target_os = "linux")]
pub(crate) mod launch;
#[cfg(target_os = "linux")]
pub(crate) mod mount_api;
pub(crate) mod policy;
#[cfg(target_os = "linux")]
pub(crate) mod read_only_mounts;
#[cfg(unix)]
pub(crate) mod rule_file;
// Build-time code (build.rs includes them): here only for their tests.
#[cfg(all(test, target_os = "linux"))]
pub(crate) mod seccomp_fast_path;
#[cfg(all(test, target_os = "linux"))]
pub(crate) mod seccomp_merge;
#[cfg(target_os = "linux")]
pub(crate) mod seccomp_names;
#[cfg(target_os = "linux")]
pub mod seccomp_rules;
#[cfg(target_os = "linux")]
pub(crate) mod seccomp_stack;

#[cfg(unix)]
pub(crate) use attestation::read_attestation;
pub use policy::{Network, Policy};
#[cfg(unix)]
pub(crate) use policy::{SandboxSpec, UnknownName};
