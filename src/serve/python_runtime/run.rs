//! `POST /execute`'s command, through the one plan stage: the shell line
//! becomes a raw command request of the listener door, under the
//! operator's policy (raw commands off: refused), run by the engine.
//!
//! This is the only place the module meets the dispatcher, so the switch
//! to the plan stage's `run_command(req, Door::Listener)` is one edit here.

use std::time::Duration;

use crate::registry::Dispatcher;
use crate::registry::request::{Request, Target};
use crate::result::NormalizedResult;
use crate::scheduler::Priority;

/// The shell a command line runs under (what the published SDK says the
/// runtime does: `/bin/sh -c LINE`).
pub(crate) const SHELL: &str = "/bin/sh";

/// Runs `line` with `/bin/sh -c` in the workspace root, killed (exit 124)
/// after `timeout`.
pub(crate) async fn run_line(
    dispatcher: &Dispatcher,
    line: &str,
    timeout: Duration,
) -> NormalizedResult {
    let request = Request {
        id: None,
        target: Target::Command(vec![SHELL.to_owned(), "-c".to_owned(), line.to_owned()]),
        workdir: None,
        timeout_ms: Some(
            u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        ),
        tty: Some(false),
        priority: Priority::Normal,
        // A listener has no person behind it: what needs approval is refused.
        approve: false,
        max_output_tokens: None,
    };
    dispatcher.handle(request).await
}
