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
//! downloaded, running as the same user as the agent (or root in a container)
//! and trying to reach outside what the policy grants. Covered:
//!
//! - **Files** (Landlock): writes outside the writable roots, including
//!   through a symlink pointing out, renaming or hard-linking a file out,
//!   truncation, creating devices or fifos; writes into a top-level `.git`
//!   (hooks, config) of a writable root or its worktree/submodule targets.
//!   Reading and executing stay allowed everywhere.
//! - **Network** (seccomp, plus Landlock TCP/UDP rules where the kernel has
//!   them): no socket but `AF_UNIX`; abstract Unix sockets outside the sandbox
//!   are unreachable (Landlock scoping); inherited non-Unix sockets are closed.
//! - **Processes**: no `ptrace`, no reading or writing another process's
//!   memory, no signals to processes outside the sandbox (Landlock scoping).
//! - **Privilege**: `no_new_privs` (setuid binaries do not elevate); no user
//!   namespaces, mounts, kernel modules, kexec, bpf, io_uring, perf, port I/O,
//!   `open_by_handle_at`, `setns`; x32 syscall numbers closed.
//! - **Undoing it**: both layers survive exec and only ever stack, so a nested
//!   `agent-reach-sandbox --policy danger-full-access` stays confined.
//!
//! Not covered: reading secrets (everything is readable), connecting to
//! pathname Unix sockets that lead out (a Docker or SSH agent socket), CPU,
//! memory and disk exhaustion, kernel bugs, and `.git` directories below the
//! top of a writable root or created by the command itself.

pub mod args;
pub mod attestation;
pub mod cli;
pub mod error;
pub mod fs_plan;
pub mod landlock_rules;
pub mod launch;
pub mod policy;
pub mod seccomp_rules;

pub use attestation::read_attestation;
pub use error::SandboxError;
pub use policy::{Network, Policy, SandboxSpec, UnknownName};
