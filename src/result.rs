//! The normalized result: the one JSON shape every one-shot execution yields
//! (`run --json`, `exec --json`, `exec --jsonl`, registry tools).
//!
//! The contract fixes the field names and the `status` and `error.kind`
//! vocabularies; this module is the only place they are spelled.

use serde::{Deserialize, Serialize};

/// How an execution ended, as the contract names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    /// The command exited 0.
    Success,
    /// The command exited with another code, or was killed by a signal.
    Failure,
    /// The command was killed at its command timeout (exit 124).
    Timeout,
    /// The request was refused before anything ran.
    Rejected,
    /// The queue was full; `error.retry_after_ms` says when to try again.
    Busy,
    /// agent-reach itself failed.
    Error,
}

/// Bytes each stream produced, before any folding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OriginalBytes {
    pub(crate) stdout: u64,
    pub(crate) stderr: u64,
}

/// The spill file of each stream that was folded (`null` for one shown
/// whole).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FullOutputPaths {
    pub(crate) stdout: Option<String>,
    pub(crate) stderr: Option<String>,
}

/// What the sandbox enforced, as `agent-reach-sandbox --report` wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SandboxAttestation {
    /// `enforced`, `partial` or `none`.
    pub(crate) fs: String,
    /// `enforced` or `none`.
    pub(crate) net: String,
    /// The Landlock ABI the kernel granted, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) abi: Option<u32>,
}

impl SandboxAttestation {
    /// Reads a report written by `agent-reach-sandbox --report FILE`; `None`
    /// when it is missing, empty or not the expected JSON.
    pub(crate) fn read(path: &std::path::Path) -> Option<SandboxAttestation> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// A stable error kind and a one-line message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ResultError {
    pub(crate) kind: String,
    pub(crate) message: String,
    /// Only with `status: busy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) retry_after_ms: Option<u64>,
    /// Processes the command started that could not be killed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) survivors: Vec<u32>,
}

impl ResultError {
    /// The error of a command killed at its timeout (`timeout`, when
    /// known, says how long it was), naming what could not be killed.
    pub(crate) fn timeout(timeout: Option<std::time::Duration>, survivors: Vec<u32>) -> Self {
        let mut message = match timeout {
            Some(limit) => format!(
                "the command was killed at its timeout of {} ms",
                limit.as_millis()
            ),
            None => "the command was killed at its timeout".to_owned(),
        };
        if !survivors.is_empty() {
            message.push_str(&format!(
                "; {} process(es) it started could not be killed: {survivors:?}",
                survivors.len()
            ));
        }
        Self {
            kind: crate::registry::kinds::TIMEOUT.to_owned(),
            message,
            retry_after_ms: None,
            survivors,
        }
    }
}

/// A line of the output that carries the failure (see
/// [`crate::output::highlights`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Highlight {
    /// `stdout` or `stderr` (merged output is `stdout`, where it is shown).
    pub(crate) stream: String,
    /// 1-based over the stream's whole output (its spill file's line).
    pub(crate) line: u64,
    /// The cleaned line, at most 300 characters.
    pub(crate) text: String,
}

/// The `highlights` of a result with `status`: those of the output for a
/// failure or a timeout, none otherwise.
pub(crate) fn highlights_for(
    status: Status,
    found: &[crate::output::highlights::Highlight],
) -> Vec<Highlight> {
    if !matches!(status, Status::Failure | Status::Timeout) {
        return Vec::new();
    }
    found
        .iter()
        .map(|h| Highlight {
            stream: if h.stream.is_empty() {
                "stdout".to_owned()
            } else {
                h.stream.to_owned()
            },
            line: h.line,
            text: h.text.clone(),
        })
        .collect()
}

/// Every field of the normalized result, as the contract names them.
pub const FIELDS: &[&str] = &[
    "id",
    "tool",
    "status",
    "exit_code",
    "signal",
    "stdout",
    "stderr",
    "duration_ms",
    "truncated",
    "original_bytes",
    "full_output_path",
    "full_output_paths",
    "sandbox",
    "cached",
    "error",
];

/// The normalized result of one execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NormalizedResult {
    pub(crate) id: Option<serde_json::Value>,
    pub(crate) tool: Option<String>,
    pub(crate) status: Status,
    pub(crate) exit_code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) duration_ms: u64,
    pub(crate) truncated: bool,
    pub(crate) original_bytes: OriginalBytes,
    pub(crate) full_output_path: Option<String>,
    pub(crate) full_output_paths: FullOutputPaths,
    pub(crate) sandbox: Option<SandboxAttestation>,
    pub(crate) cached: bool,
    pub(crate) error: Option<ResultError>,
    /// The operator's `[limits]` that cut what the request asked
    /// (`max_timeout_ms`, `max_output_tokens`); omitted when none did, so
    /// it is not among [`FIELDS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) capped: Vec<String>,
    /// For a `failure` or a `timeout`: up to 8 lines that carry the
    /// failure, from the whole output (the folded part included); omitted
    /// otherwise and when none matched, so it is not among [`FIELDS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) highlights: Vec<Highlight>,
}

impl NormalizedResult {
    /// The result as one JSON line (`exec --jsonl`, `exec --json`).
    pub(crate) fn to_line(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_else(|err| {
            format!(r#"{{"status":"error","error":{{"kind":"internal","message":"cannot serialize the result: {err}"}}}}"#)
                .into_bytes()
        });
        line.push(b'\n');
        line
    }

    /// A result for a request that never ran (rejected, busy or error).
    pub(crate) fn refused(
        id: Option<serde_json::Value>,
        tool: Option<String>,
        status: Status,
        kind: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            id,
            tool,
            status,
            exit_code: None,
            signal: None,
            stdout: String::new(),
            stderr: String::new(),
            duration_ms: 0,
            truncated: false,
            original_bytes: OriginalBytes::default(),
            full_output_path: None,
            full_output_paths: FullOutputPaths::default(),
            sandbox: None,
            cached: false,
            error: Some(ResultError {
                kind: kind.to_owned(),
                message: message.into(),
                retry_after_ms: None,
                survivors: Vec::new(),
            }),
            capped: Vec::new(),
            highlights: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_has_its_error_kind_and_names_the_survivors() {
        let error = ResultError::timeout(Some(std::time::Duration::from_millis(300)), vec![42]);
        assert_eq!(error.kind, "timeout");
        assert!(error.message.contains("300 ms"), "{}", error.message);
        assert!(error.message.contains("[42]"), "{}", error.message);
        assert_eq!(error.survivors, [42]);
    }

    #[test]
    fn only_a_failure_or_a_timeout_carries_highlights() {
        let mut capture =
            crate::output::StreamCapture::new(crate::output::CaptureConfig::default());
        capture.push(b"error: broken\n");
        capture.finish();
        let found = capture.whole().highlights.select();
        assert_eq!(
            highlights_for(Status::Failure, &found),
            [Highlight {
                stream: "stdout".into(),
                line: 1,
                text: "error: broken".into()
            }]
        );
        assert_eq!(highlights_for(Status::Timeout, &found).len(), 1);
        assert!(highlights_for(Status::Success, &found).is_empty());
        let mut result =
            NormalizedResult::refused(None, None, Status::Failure, "not_found", "no such program");
        let value = serde_json::to_value(&result).unwrap();
        assert!(
            value.get("highlights").is_none(),
            "absent when none matched"
        );
        result.highlights = highlights_for(Status::Failure, &found);
        let value = serde_json::to_value(&result).unwrap();
        assert_eq!(
            value["highlights"],
            serde_json::json!([{"stream": "stdout", "line": 1, "text": "error: broken"}])
        );
    }

    #[test]
    fn serializes_every_contract_field() {
        let result = NormalizedResult::refused(
            Some(serde_json::json!("req-7")),
            Some("git_status".into()),
            Status::Rejected,
            "unknown_tool",
            "no tool named git_status",
        );
        let value = serde_json::to_value(&result).unwrap();
        for field in FIELDS {
            assert!(value.get(field).is_some(), "missing {field}");
        }
        assert_eq!(value["status"], "rejected");
        assert_eq!(value["error"]["kind"], "unknown_tool");
        assert!(value["error"].get("retry_after_ms").is_none());
    }
}
