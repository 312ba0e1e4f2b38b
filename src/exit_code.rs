//! Every exit code agent-reach itself can produce, as documented constants.
//!
//! The contract (`run`, `agent-reach-exec`, `apply_patch`, `agent-reach-sandbox`)
//! fixes these numbers; keeping them in one place means a personality can never
//! invent a code of its own by accident.

/// The command (or agent-reach's own work) succeeded.
pub const SUCCESS: i32 = 0;
/// `apply_patch`: the patch was malformed or did not apply; nothing was changed.
pub const BAD_PATCH: i32 = 1;
/// A subcommand did not succeed (a request that failed, a listener that
/// could not start): the common convention outside `run`.
pub const FAILURE: i32 = 1;
/// Bad usage: unknown flag, missing argument (clap's convention too).
pub const USAGE: i32 = 2;
/// The command was killed at its command timeout.
pub const TIMEOUT: i32 = 124;
/// agent-reach itself failed: bad flags, bad config, sandbox not available,
/// or a personality that this build does not carry.
pub const INTERNAL: i32 = 125;
/// The command was found but could not be executed.
pub const CANNOT_EXECUTE: i32 = 126;
/// The command was not found.
pub const NOT_FOUND: i32 = 127;
/// Added to the signal number when a command was killed by a signal.
pub const SIGNAL_BASE: i32 = 128;

/// The exit code for a process killed by `signal`, the shell's convention.
pub fn for_signal(signal: i32) -> i32 {
    SIGNAL_BASE + signal
}
