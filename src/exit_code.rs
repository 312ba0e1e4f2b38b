//! Every exit code agent-reach itself can produce, as documented constants.
//!
//! The contract fixes these numbers; keeping them in one place means a
//! personality can never invent a code of its own by accident. Two
//! conventions share them: the wrappers (`run`, `agent-reach-exec`,
//! `agent-reach-sandbox`) pass the command's code through, so like `timeout`
//! they keep [`INTERNAL`] for their own failures, bad flags included; every
//! other subcommand says [`SUCCESS`], [`FAILURE`] or [`USAGE`].

/// The command (or agent-reach's own work) succeeded.
pub(crate) const SUCCESS: i32 = 0;
/// The common convention's failure: a check that found problems, a request
/// that did not succeed, a probe the configuration needs that failed.
pub(crate) const FAILURE: i32 = 1;
/// `apply_patch`: the patch was malformed or did not apply; nothing was changed.
pub(crate) const BAD_PATCH: i32 = 1;
/// Bad usage: unknown flag, missing argument (clap's convention too), a
/// missing or unreadable file or directory named on the command line, a bad
/// config.
pub(crate) const USAGE: i32 = 2;
/// The command was killed at its command timeout.
pub(crate) const TIMEOUT: i32 = 124;
/// agent-reach itself failed: bad flags, bad config, sandbox not available,
/// or a personality that this build does not carry.
pub(crate) const INTERNAL: i32 = 125;
/// The command was found but could not be executed.
pub(crate) const CANNOT_EXECUTE: i32 = 126;
/// The command was not found.
pub(crate) const NOT_FOUND: i32 = 127;
/// Added to the signal number when a command was killed by a signal.
pub(crate) const SIGNAL_BASE: i32 = 128;

/// The end of `run --help` (and `agent-reach-exec --help`): what its exit
/// status means, as `timeout --help` says it.
pub(crate) const RUN_EXIT_STATUS: &str = "\
Exit status:
  the command's own  it finished by itself
  124                killed at the command timeout (--timeout-ms)
  125                agent-reach itself failed (bad flags, config, sandbox not available)
  126                the command was found but could not be run
  127                the command was not found
  128+N              the command was killed by signal N for another reason";

/// The end of `exec --help`: the codes the contract's result section fixes.
pub(crate) const EXEC_EXIT_STATUS: &str = "\
Exit status:
  0    --json: the result's status is success; --jsonl: the input ended
  1    --json: any other status (the result says why)
  2    bad usage: bad flags, a --config that is missing or unreadable, an
       unknown --profile, a --root that is not a directory
  125  agent-reach itself failed: a --config that does not load, the session";

/// The exit code for a process killed by `signal`, the shell's convention.
pub(crate) fn for_signal(signal: i32) -> i32 {
    SIGNAL_BASE + signal
}
