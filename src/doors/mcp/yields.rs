//! How long the MCP shell tools wait before they answer (the contract's
//! defaults and clamps), on every platform: Linux's door and Windows' MCP
//! server read the same numbers.

/// `exec_command`'s yield when none is given.
pub(crate) const EXEC_YIELD_DEFAULT_MS: u64 = 10_000;
/// Bounds of `exec_command`'s yield.
pub(crate) const EXEC_YIELD_RANGE_MS: (u64, u64) = (250, 30_000);
/// `write_stdin`'s yield after a write.
pub(crate) const WRITE_YIELD_DEFAULT_MS: u64 = 250;
/// Bounds of `write_stdin`'s yield after a write.
pub(crate) const WRITE_YIELD_RANGE_MS: (u64, u64) = (250, 30_000);
/// `write_stdin`'s yield for an empty poll.
pub(crate) const POLL_YIELD_DEFAULT_MS: u64 = 5_000;
/// Bounds of `write_stdin`'s yield for an empty poll.
pub(crate) const POLL_YIELD_RANGE_MS: (u64, u64) = (5_000, 300_000);
