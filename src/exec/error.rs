//! Why an execution could not start or be talked to, each reason carrying the
//! command or path involved, and the exit code `run` ends with for it.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::exit_code;

/// An execution that could not start, or a request it cannot serve.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The argv was empty.
    #[error("no command given")]
    EmptyCommand,
    /// The working directory does not exist.
    #[error("working directory {} does not exist", path.display())]
    WorkdirMissing { path: PathBuf },
    /// The working directory is not a directory.
    #[error("working directory {} is not a directory", path.display())]
    WorkdirNotDirectory { path: PathBuf },
    /// The working directory cannot be entered or read.
    #[error("working directory {} cannot be used: {source}", path.display())]
    WorkdirUnusable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The program is on no PATH entry (or the path given does not exist).
    #[error("{}: command not found", program.to_string_lossy())]
    NotFound { program: OsString },
    /// The program exists but cannot be executed (permissions, a directory,
    /// a bad binary format).
    #[error("{}: cannot execute: {source}", program.to_string_lossy())]
    NotExecutable {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    /// fork/exec failed for another reason (out of processes, memory, fds).
    #[error("{}: cannot start: {source}", program.to_string_lossy())]
    Spawn {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    /// A pseudo-terminal could not be opened or set up.
    #[error("cannot open a pseudo-terminal for {}: {source}", program.to_string_lossy())]
    Pty {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    /// The output pipes or the exit watcher could not be set up.
    #[error("cannot watch {}: {source}", program.to_string_lossy())]
    Watch {
        program: OsString,
        #[source]
        source: std::io::Error,
    },
    /// Writing to a command that runs on pipes: its stdin is /dev/null.
    #[error(
        "process {pid} runs on pipes and its stdin is /dev/null (so prompts fail at once); start it with tty to write to it"
    )]
    StdinClosed { pid: u32 },
    /// Writing to a command that already exited.
    #[error("process {pid} has exited; nothing can be written to it")]
    Exited { pid: u32 },
    /// Writing to the terminal failed or the command did not read in time.
    #[error("cannot write to the terminal of process {pid}: {source}")]
    StdinWrite {
        pid: u32,
        #[source]
        source: std::io::Error,
    },
    /// Resizing a command that runs on pipes, or its terminal refused.
    #[error("process {pid} has no terminal to resize")]
    NoTerminal { pid: u32 },
}

impl ExecError {
    /// The exit code `run` and `agent-reach-exec` end with for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            ExecError::NotFound { .. } => exit_code::NOT_FOUND,
            ExecError::NotExecutable { .. } => exit_code::CANNOT_EXECUTE,
            ExecError::EmptyCommand
            | ExecError::WorkdirMissing { .. }
            | ExecError::WorkdirNotDirectory { .. }
            | ExecError::WorkdirUnusable { .. }
            | ExecError::Spawn { .. }
            | ExecError::Pty { .. }
            | ExecError::Watch { .. }
            | ExecError::StdinClosed { .. }
            | ExecError::Exited { .. }
            | ExecError::StdinWrite { .. }
            | ExecError::NoTerminal { .. } => exit_code::INTERNAL,
        }
    }

    /// Whether the command could not start only because this process or
    /// the machine ran out of descriptors or processes for now (`EMFILE`,
    /// `ENFILE`, `EAGAIN`): load, not a fault of the request.
    pub fn is_resource_exhaustion(&self) -> bool {
        match self {
            ExecError::Spawn { source, .. }
            | ExecError::Pty { source, .. }
            | ExecError::Watch { source, .. }
            | ExecError::WorkdirUnusable { source, .. } => matches!(
                source.raw_os_error(),
                Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN)
            ),
            _ => false,
        }
    }

    /// The stable `error.kind` of the normalized result.
    pub fn kind(&self) -> &'static str {
        match self {
            ExecError::EmptyCommand => "empty_command",
            ExecError::WorkdirMissing { .. }
            | ExecError::WorkdirNotDirectory { .. }
            | ExecError::WorkdirUnusable { .. } => "bad_workdir",
            ExecError::NotFound { .. } => "not_found",
            ExecError::NotExecutable { .. } => "not_executable",
            ExecError::Spawn { .. } | ExecError::Pty { .. } | ExecError::Watch { .. } => {
                "spawn_failed"
            }
            ExecError::StdinClosed { .. } => "stdin_closed",
            ExecError::Exited { .. } => "exited",
            ExecError::StdinWrite { .. } => "stdin_write",
            ExecError::NoTerminal { .. } => "no_terminal",
        }
    }
}
