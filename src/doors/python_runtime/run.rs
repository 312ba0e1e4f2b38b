//! `POST /execute`'s command, through the one plan stage: the shell line
//! becomes a raw command request of the listener door, under the
//! operator's policy (raw commands off, or anything needing approval:
//! refused), run one-shot by the broker (scheduler, engine, result).

use std::ffi::OsString;
use std::time::Duration;

use crate::broker::Broker;
use crate::gate::Caller;
use crate::plan::Request;
use crate::result::NormalizedResult;

/// The shell a command line runs under (what the published SDK says the
/// runtime does: `/bin/sh -c LINE`).
pub(crate) const SHELL: &str = "/bin/sh";

/// Runs `line` with `/bin/sh -c` in the workspace root, killed (exit 124)
/// after `timeout`.
pub(crate) async fn run_line(
    broker: &Broker,
    caller: &Caller,
    line: &str,
    timeout: Duration,
) -> NormalizedResult {
    let mut request = Request::command(vec![
        OsString::from(SHELL),
        OsString::from("-c"),
        OsString::from(line),
    ]);
    request.timeout_ms = Some(
        u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
    );
    request.tty = Some(false);
    broker.run(caller, request).await
}
