//! Everything that can stop the sandbox before the command runs, each with
//! the path or command involved, and the one exhaustive map to exit codes.

use std::ffi::OsString;
use std::path::PathBuf;

use super::env_fd::ENV_FD_VAR;
use crate::exit_code;

/// Why `agent-reach-sandbox` did not exec the command.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("--cwd {path}: {source}")]
    Cwd {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the working directory no longer exists or cannot be read: {0}")]
    NoCwd(std::io::Error),
    #[error("--writable-root {path}: {source}")]
    WritableRoot {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--report {path}: {source}")]
    Report {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(nix::Error),
    #[error(
        "the {policy} policy needs Landlock, which this kernel does not offer ({reason}); \
         use --best-effort to run unconfined"
    )]
    LandlockMissing {
        policy: &'static str,
        reason: String,
    },
    #[error(
        "the {policy} policy needs Landlock ABI 3 (Linux 6.2) to control truncation; \
         this kernel has ABI {abi}; use --best-effort to run partly confined"
    )]
    LandlockTooOld { policy: &'static str, abi: u32 },
    #[error("Landlock rule for {path}: {source}")]
    LandlockRule {
        path: PathBuf,
        source: landlock::RulesetError,
    },
    #[error("Landlock: {0}")]
    Landlock(landlock::RulesetError),
    #[error("the built-in seccomp policy {name} does not compile: {message}")]
    SeccompPolicy { name: &'static str, message: String },
    #[error(
        "cannot install the seccomp filters {names} (needed for {purposes}): {message}; use --best-effort to run without them"
    )]
    Seccomp {
        names: String,
        purposes: String,
        message: String,
    },
    #[error("the command's environment on descriptor {} ({ENV_FD_VAR}): {source}", .value.to_string_lossy())]
    EnvFd {
        value: OsString,
        source: std::io::Error,
    },
    #[error("{0}; the command could read it; use --best-effort to run with it readable")]
    Hide(super::hidden::HideError),
    #[error("{}: command not found", .command.to_string_lossy())]
    CommandNotFound { command: OsString },
    #[error("{}: {source}", .command.to_string_lossy())]
    CannotExecute {
        command: OsString,
        source: std::io::Error,
    },
}

impl SandboxError {
    /// The exit code the contract gives this failure.
    pub fn exit_code(&self) -> i32 {
        match self {
            SandboxError::CommandNotFound { .. } => exit_code::NOT_FOUND,
            SandboxError::CannotExecute { .. } => exit_code::CANNOT_EXECUTE,
            SandboxError::Cwd { .. }
            | SandboxError::NoCwd(_)
            | SandboxError::WritableRoot { .. }
            | SandboxError::Report { .. }
            | SandboxError::EnvFd { .. }
            | SandboxError::NoNewPrivs(_)
            | SandboxError::LandlockMissing { .. }
            | SandboxError::LandlockTooOld { .. }
            | SandboxError::LandlockRule { .. }
            | SandboxError::Landlock(_)
            | SandboxError::SeccompPolicy { .. }
            | SandboxError::Seccomp { .. }
            | SandboxError::Hide(_) => exit_code::INTERNAL,
        }
    }
}
