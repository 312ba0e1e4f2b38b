//! Logs, in one place for every subcommand: `serve` writes JSON lines on
//! stderr or `--log-file`, never on stdout (stdout is the protocol); `exec`
//! writes the same on stderr when `$AGENT_REACH_LOG` is set. Every execution,
//! whatever the door, is one [`ExecutionRecord`] line with the fields an
//! operator needs to tell what ran, where, for whom, for how long and how it
//! ended; the rest are tracing's JSON events.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing_subscriber::EnvFilter;

/// The caller a record names when its door names none: the local user
/// (the scheduler's default caller too).
pub(crate) const LOCAL_CALLER: &str = "local";

/// The environment variable that overrides the log filter (`info` by default).
pub(crate) const LOG_FILTER_VAR: &str = "AGENT_REACH_LOG";

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
            if let Ok(records) = file.try_clone() {
                let _ = RECORDS.set(Mutex::new(Box::new(records)));
            }
            let _ = builder.with_writer(Mutex::new(file)).try_init();
        }
        None => {
            let _ = RECORDS.set(Mutex::new(Box::new(std::io::stderr())));
            let _ = builder.with_writer(std::io::stderr).try_init();
        }
    }
    Ok(())
}

/// Where execution records go: the log file or stderr, set by [`init`].
static RECORDS: OnceLock<Mutex<Box<dyn Write + Send>>> = OnceLock::new();

/// One execution, as the log records it: one JSON line with exactly the
/// contract's fields, whatever the door.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ExecutionRecord {
    /// RFC 3339, UTC.
    pub(crate) time: String,
    /// `exec`, `mcp`, `listener`, or the door the broker names.
    pub(crate) door: String,
    pub(crate) caller: String,
    /// The registry tool (absent for a raw command).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tool: Option<String>,
    /// The command line, redacted (absent for a registry tool).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) argv: Option<Vec<String>>,
    pub(crate) cwd: String,
    /// The normalized result's status (or `running` for a session that
    /// goes on).
    pub(crate) status: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) duration_ms: u64,
    pub(crate) queue_ms: u64,
    pub(crate) bytes_out: u64,
    pub(crate) truncated: bool,
    pub(crate) cached: bool,
    /// The first and last line of the output, redacted.
    pub(crate) summary: String,
}

impl ExecutionRecord {
    /// A record stamped now, with nothing counted yet.
    pub(crate) fn now(door: &str, caller: &str, cwd: &Path, status: &str) -> Self {
        Self {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            door: door.to_owned(),
            caller: caller.to_owned(),
            tool: None,
            argv: None,
            cwd: cwd.display().to_string(),
            status: status.to_owned(),
            exit_code: None,
            signal: None,
            duration_ms: 0,
            queue_ms: 0,
            bytes_out: 0,
            truncated: false,
            cached: false,
            summary: String::new(),
        }
    }
}

/// The longest line a summary keeps of each end, in characters.
const SUMMARY_LINE_CHARS: usize = 200;

/// The first and last non-empty line of `output` (one line when they are
/// the same), each cut to [`SUMMARY_LINE_CHARS`].
pub(crate) fn summary(output: &str) -> String {
    let mut lines = output.lines().map(str::trim_end).filter(|l| !l.is_empty());
    let cut = |line: &str| -> String {
        let mut text: String = line.chars().take(SUMMARY_LINE_CHARS).collect();
        if line.chars().count() > SUMMARY_LINE_CHARS {
            text.push('…');
        }
        text
    };
    let Some(first) = lines.next() else {
        return String::new();
    };
    match lines.next_back() {
        Some(last) => format!("{} … {}", cut(first), cut(last)),
        None => cut(first),
    }
}

/// Writes one execution record, when logs are on.
pub(crate) fn record(record: &ExecutionRecord) {
    let Some(sink) = RECORDS.get() else { return };
    let Ok(mut line) = serde_json::to_vec(record) else {
        return;
    };
    line.push(b'\n');
    let mut sink = crate::sync::lock(sink);
    // A log that cannot be written is not worth failing a command for.
    let _ = sink.write_all(&line).and_then(|()| sink.flush());
}

/// One MCP tool call, as the MCP tools report it (recorded through
/// [`record`]).
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

/// Writes one MCP tool call's record: an exited command is a `success` or
/// a `failure` by its exit code; a session that goes on is `running`.
pub(crate) fn execution(event: &ExecutionEvent<'_>) {
    let status = match (event.state, event.exit_code) {
        ("exited" | "killed", Some(0)) => "success",
        ("exited" | "killed", Some(crate::exit_code::TIMEOUT)) => "timeout",
        ("exited" | "killed", Some(_)) => "failure",
        // A session that goes on: its command has not ended yet.
        (_, None) if event.session_id.is_some() => "running",
        (state, _) => state,
    };
    let mut record = ExecutionRecord::now("mcp", LOCAL_CALLER, event.cwd, status);
    record.tool = Some(event.tool.to_owned());
    record.argv = Some(event.argv.to_vec());
    record.exit_code = event.exit_code;
    record.duration_ms = u64::try_from(event.duration.as_millis()).unwrap_or(u64::MAX);
    record.bytes_out = event.bytes_out;
    record.truncated = event.truncated;
    self::record(&record);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_is_the_first_and_last_line() {
        assert_eq!(summary(""), "");
        assert_eq!(summary("only\n"), "only");
        assert_eq!(summary("first\nmiddle\n\nlast\n\n"), "first … last");
        assert!(summary(&"x".repeat(500)).ends_with('…'));
    }

    #[test]
    fn a_record_is_flat_json_with_no_debug_values() {
        let mut record = ExecutionRecord::now("exec", "local", Path::new("/w"), "success");
        record.tool = Some("t".into());
        record.exit_code = Some(0);
        let value = serde_json::to_value(&record).unwrap();
        assert_eq!(value["exit_code"], 0);
        assert_eq!(value["status"], "success");
        assert_eq!(value["signal"], serde_json::Value::Null);
        assert!(value.get("argv").is_none());
    }
}
