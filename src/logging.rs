//! Logs, in one place for every subcommand: `serve` writes JSON lines on
//! stderr or `--log-file`, never on stdout (stdout is the protocol), one
//! event per execution with the fields an operator needs to tell what ran,
//! where, for how long and how it ended; `exec` writes plain lines on stderr
//! when `$AGENT_REACH_LOG` asks for them.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use tracing_subscriber::EnvFilter;

/// The environment variable that overrides the log filter (`info` by default).
pub(crate) const LOG_FILTER_VAR: &str = "AGENT_REACH_LOG";

/// Installs a plain-text subscriber on stderr with `filter` (`exec`'s
/// logs: nothing unless asked for, since its stdout is the results).
pub(crate) fn init_stderr_text(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// The log file could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open log file {}: {source}", path.display())]
pub(crate) struct LogFileError {
    pub(crate) path: PathBuf,
    pub(crate) source: std::io::Error,
}

/// Installs the JSON subscriber. `filter` is `$AGENT_REACH_LOG` if set; the
/// SDK's own chatter is kept at `warn` unless the filter names it.
pub(crate) fn init(log_file: Option<&Path>, filter: Option<&str>) -> Result<(), LogFileError> {
    let filter = EnvFilter::try_new(filter.unwrap_or("info,rmcp=warn"))
        .unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    let builder = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_span_list(false)
        .with_ansi(false);
    // A second init (tests in one process) keeps the first subscriber.
    match log_file {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| LogFileError {
                    path: path.to_path_buf(),
                    source,
                })?;
            let _ = builder.with_writer(Mutex::new(file)).try_init();
        }
        None => {
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
    Ok(())
}

/// One execution, as the log records it.
#[derive(Debug, Clone)]
pub(crate) struct ExecutionEvent<'a> {
    pub(crate) tool: &'a str,
    pub(crate) argv: &'a [String],
    pub(crate) cwd: &'a Path,
    pub(crate) duration: Duration,
    pub(crate) session_id: Option<u64>,
    /// `exited`, `running`, `matched`, `awaiting_input`, `killed`, `error`.
    pub(crate) state: &'a str,
    pub(crate) exit_code: Option<i32>,
    pub(crate) bytes_out: u64,
    pub(crate) truncated: bool,
}

/// Writes one execution event.
pub(crate) fn execution(event: &ExecutionEvent<'_>) {
    tracing::info!(
        target: "agent_reach::execution",
        tool = event.tool,
        argv = ?event.argv,
        cwd = %event.cwd.display(),
        duration_ms = event.duration.as_millis() as u64,
        session_id = event.session_id,
        state = event.state,
        exit_code = event.exit_code,
        bytes_out = event.bytes_out,
        truncated = event.truncated,
        "execution"
    );
}
