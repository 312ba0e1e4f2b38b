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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
