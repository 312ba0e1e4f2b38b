//! What the whole-process benchmarks share: the server binary they measure
//! and the bare fork+exec they measure it against.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under measurement: `$AGENT_REACH_BIN` (another build, such as
/// the static one `install.sh` ships or an older commit's), else cargo's
/// release build.
pub fn server_bin() -> OsString {
    std::env::var_os("AGENT_REACH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_agent-reach").into())
}

/// The time of a bare fork+exec+wait of `argv`, stdio on `/dev/null`.
pub fn fork_exec(argv: &[&str]) -> Duration {
    let start = Instant::now();
    let status = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(status.is_ok_and(|s| s.success()), "{argv:?} failed");
    start.elapsed()
}
