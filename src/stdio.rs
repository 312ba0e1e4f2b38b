//! Writing to our own stdout and stderr without ever panicking.
//!
//! `println!` panics when stdout is a closed pipe (`agent-reach ... | head`).
//! A reader that stopped reading is not an error of ours: a broken pipe on
//! stdout ends the process with exit 0; every other write error is the
//! failure code of the personality's convention (125 for the wrappers and
//! `exec`, 1 for the other subcommands: [`print_or_failure`]).

use std::io::{self, Write};

use crate::exit_code;

/// Writes all of `bytes` to stdout and flushes.
pub(crate) fn write_stdout(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// The exit code a personality ends with after stdout failed with `err`.
pub(crate) fn exit_code_for_stdout_error(err: &io::Error) -> i32 {
    if err.kind() == io::ErrorKind::BrokenPipe {
        exit_code::SUCCESS
    } else {
        eprintln!("agent-reach: cannot write to stdout: {err}");
        exit_code::INTERNAL
    }
}

/// Prints `text` to stdout; on failure returns the exit code to end with.
pub(crate) fn print_or_exit_code(text: &str) -> Result<(), i32> {
    write_stdout(text.as_bytes()).map_err(|e| exit_code_for_stdout_error(&e))
}

/// Prints `text` to stdout under the common convention: 0 when written (or
/// when the reader went away), [`exit_code::FAILURE`] when stdout failed.
pub(crate) fn print_or_failure(text: &str) -> i32 {
    write_or_failure(text.as_bytes())
}

/// [`print_or_failure`] for bytes.
pub(crate) fn write_or_failure(bytes: &[u8]) -> i32 {
    match write_stdout(bytes) {
        Ok(()) => exit_code::SUCCESS,
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => exit_code::SUCCESS,
        Err(err) => {
            eprintln!("agent-reach: cannot write to stdout: {err}");
            exit_code::FAILURE
        }
    }
}
