//! The messages of Codex's exec-server, as the pinned Codex
//! ([`super::CODEX_PACKAGE`]) sends and reads them: our own definitions,
//! named as openai/codex `codex-rs/exec-server/src/protocol.rs` names them,
//! checked against the traffic recorded in
//! `shared/protocols/codex-exec-0.171.0/`. A message is JSON-RPC without
//! the `"jsonrpc"` field; paths are `file://` URIs ([`super::uri`]); bytes
//! travel as standard base64.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) const INITIALIZE_METHOD: &str = "initialize";
pub(crate) const INITIALIZED_METHOD: &str = "initialized";
pub(crate) const EXEC_METHOD: &str = "process/start";
pub(crate) const EXEC_READ_METHOD: &str = "process/read";
pub(crate) const EXEC_WRITE_METHOD: &str = "process/write";
pub(crate) const EXEC_SIGNAL_METHOD: &str = "process/signal";
pub(crate) const EXEC_TERMINATE_METHOD: &str = "process/terminate";
pub(crate) const EXEC_OUTPUT_DELTA_METHOD: &str = "process/output";
pub(crate) const EXEC_EXITED_METHOD: &str = "process/exited";
pub(crate) const EXEC_CLOSED_METHOD: &str = "process/closed";
pub(crate) const ENVIRONMENT_INFO_METHOD: &str = "environment/info";
pub(crate) const FS_READ_FILE_METHOD: &str = "fs/readFile";
pub(crate) const FS_WRITE_FILE_METHOD: &str = "fs/writeFile";
pub(crate) const FS_CREATE_DIRECTORY_METHOD: &str = "fs/createDirectory";
pub(crate) const FS_GET_METADATA_METHOD: &str = "fs/getMetadata";
pub(crate) const FS_READ_DIRECTORY_METHOD: &str = "fs/readDirectory";
pub(crate) const FS_REMOVE_METHOD: &str = "fs/remove";

/// JSON-RPC's codes, and the exec-server's own for a missing path.
pub(crate) mod codes {
    pub(crate) const INVALID_REQUEST: i64 = -32600;
    pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
    pub(crate) const INVALID_PARAMS: i64 = -32602;
    pub(crate) const INTERNAL_ERROR: i64 = -32603;
    /// A path (or its parent) does not exist: Codex creates the directory
    /// and retries a write that got it.
    pub(crate) const NOT_FOUND: i64 = -32004;
}

/// One message from the client: a request (with `id`) or a notification.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Incoming {
    #[serde(default)]
    pub(crate) id: Option<Value>,
    #[serde(default)]
    pub(crate) method: Option<String>,
    #[serde(default)]
    pub(crate) params: Option<Value>,
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, message)
    }
}

/// The reply to request `id`.
pub(crate) fn response(id: &Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => serde_json::json!({ "id": id, "result": result }),
        Err(error) => serde_json::json!({ "id": id, "error": error }),
    }
}

/// A notification from the server.
pub(crate) fn notification(method: &str, params: &impl Serialize) -> Value {
    serde_json::json!({ "method": method, "params": params })
}

/// Bytes as standard base64 on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct ByteChunk(#[serde(with = "base64_bytes")] pub(crate) Vec<u8>);

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let encoded = String::deserialize(d)?;
        STANDARD.decode(encoded).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitializeParams {
    pub(crate) client_name: String,
    #[serde(default)]
    pub(crate) resume_session_id: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitializeResponse {
    pub(crate) session_id: String,
    pub(crate) environment_info: EnvironmentInfo,
}

/// What the client learns of this environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EnvironmentInfo {
    pub(crate) shell: ShellInfo,
    pub(crate) executor_version: String,
    pub(crate) cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user_home_dir: Option<String>,
    pub(crate) platform_os: String,
    pub(crate) temporary_directories: Vec<String>,
    pub(crate) temp_dir: String,
    pub(crate) capabilities: EnvironmentCapabilities,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ShellInfo {
    pub(crate) name: String,
    pub(crate) path: String,
}

/// The optional features of an exec-server; each `true` makes Codex send
/// requests this door would have to serve, so each is `false` here until
/// it is (`fsWatchMissing`: `fs/watchMissing`; `environmentConfigRead`:
/// `environmentConfig/read`; `networkProxyLaunch`: a proxy per process).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EnvironmentCapabilities {
    pub(crate) network_proxy_launch: bool,
    pub(crate) network_proxy_review_domains: bool,
    pub(crate) network_proxy_transparent_tcp: bool,
    pub(crate) credential_masking: bool,
    pub(crate) credential_masking_custom_providers: bool,
    pub(crate) capability_discovery_sandbox: bool,
    pub(crate) fs_watch_missing: bool,
    pub(crate) capability_discovery_v2: bool,
    pub(crate) environment_config_read: bool,
    pub(crate) http_header_env_vars: bool,
    pub(crate) sandboxed_file_streaming: bool,
    pub(crate) file_write_streaming: bool,
    pub(crate) shell_snapshot_v2: bool,
    pub(crate) windows_mxc: bool,
    pub(crate) linux_root_write_preserves_devices: bool,
    pub(crate) linux_approved_root_write_preserves_restrictions: bool,
}

/// `inherit` of Codex's shell environment policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ShellEnvironmentPolicyInherit {
    /// The few variables every shell needs.
    Core,
    /// The server's whole environment.
    All,
    /// Nothing: only `set` and the request's `env`.
    None,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecEnvPolicy {
    pub(crate) inherit: ShellEnvironmentPolicyInherit,
    #[serde(default)]
    pub(crate) ignore_default_excludes: bool,
    #[serde(default)]
    pub(crate) exclude: Vec<String>,
    #[serde(default)]
    pub(crate) r#set: HashMap<String, String>,
    #[serde(default)]
    pub(crate) include_only: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecParams {
    pub(crate) process_id: String,
    pub(crate) argv: Vec<String>,
    pub(crate) cwd: String,
    #[serde(default)]
    pub(crate) env_policy: Option<ExecEnvPolicy>,
    #[serde(default)]
    pub(crate) env: HashMap<String, String>,
    #[serde(default)]
    pub(crate) tty: bool,
    #[serde(default)]
    pub(crate) pipe_stdin: bool,
    #[serde(default)]
    pub(crate) arg0: Option<String>,
    /// Codex's `FileSystemSandboxContext`, read by [`super::sandbox`].
    #[serde(default)]
    pub(crate) sandbox: Option<Value>,
    #[serde(default)]
    pub(crate) enforce_managed_network: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ProcessSandboxType {
    None,
    LinuxSeccomp,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecResponse {
    pub(crate) process_id: String,
    pub(crate) sandbox_type: ProcessSandboxType,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReadParams {
    pub(crate) process_id: String,
    #[serde(default)]
    pub(crate) after_seq: Option<u64>,
    #[serde(default)]
    pub(crate) max_bytes: Option<usize>,
    #[serde(default)]
    pub(crate) wait_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ExecOutputStream {
    Stdout,
    Stderr,
    Pty,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ProcessOutputChunk {
    pub(crate) seq: u64,
    pub(crate) stream: ExecOutputStream,
    pub(crate) chunk: ByteChunk,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReadResponse {
    pub(crate) chunks: Vec<ProcessOutputChunk>,
    pub(crate) next_seq: u64,
    pub(crate) exited: bool,
    pub(crate) exit_code: Option<i32>,
    pub(crate) closed: bool,
    pub(crate) failure: Option<String>,
    pub(crate) sandbox_denied: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WriteParams {
    pub(crate) process_id: String,
    pub(crate) chunk: ByteChunk,
    #[serde(default)]
    pub(crate) write_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum WriteStatus {
    Accepted,
    UnknownProcess,
    StdinClosed,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct WriteResponse {
    pub(crate) status: WriteStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ProcessSignal {
    Interrupt,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SignalParams {
    pub(crate) process_id: String,
    pub(crate) signal: ProcessSignal,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TerminateParams {
    pub(crate) process_id: String,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct TerminateResponse {
    pub(crate) running: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecOutputDeltaNotification {
    pub(crate) process_id: String,
    pub(crate) seq: u64,
    pub(crate) stream: ExecOutputStream,
    pub(crate) chunk: ByteChunk,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecExitedNotification {
    pub(crate) process_id: String,
    pub(crate) seq: u64,
    pub(crate) exit_code: i32,
    pub(crate) sandbox_denied: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecClosedNotification {
    pub(crate) process_id: String,
    pub(crate) seq: u64,
}

/// The params of every `fs/*` call naming one path.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FsPathParams {
    pub(crate) path: String,
    #[serde(default)]
    pub(crate) recursive: Option<bool>,
    #[serde(default)]
    pub(crate) force: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FsWriteFileParams {
    pub(crate) path: String,
    pub(crate) data_base64: ByteChunk,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FsReadFileResponse {
    pub(crate) data_base64: ByteChunk,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FsGetMetadataResponse {
    pub(crate) is_directory: bool,
    pub(crate) is_file: bool,
    pub(crate) is_symlink: bool,
    pub(crate) size: u64,
    pub(crate) created_at_ms: i64,
    pub(crate) modified_at_ms: i64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FsReadDirectoryEntry {
    pub(crate) file_name: String,
    pub(crate) is_directory: bool,
    pub(crate) is_file: bool,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct FsReadDirectoryResponse {
    pub(crate) entries: Vec<FsReadDirectoryEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_process_start_reads_with_its_env_policy() {
        let params: ExecParams = serde_json::from_value(serde_json::json!({
            "processId": "p1", "metadata": {"threadId": "t", "toolCallId": "call0"},
            "argv": ["/bin/bash", "-lc", "echo hi; exit 3"],
            "cwd": "file:///w", "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": true,
            "exclude": ["CODEX_VERSION"], "set": {}, "includeOnly": []},
            "env": {"TERM": "dumb"}, "tty": false, "pipeStdin": false, "arg0": null,
            "sandbox": null, "enforceManagedNetwork": false, "managedNetwork": null
        }))
        .unwrap();
        assert_eq!(params.argv[2], "echo hi; exit 3");
        let policy = params.env_policy.unwrap();
        assert_eq!(policy.inherit, ShellEnvironmentPolicyInherit::All);
        assert_eq!(policy.exclude, ["CODEX_VERSION"]);
    }

    #[test]
    fn output_travels_as_base64_and_errors_carry_their_code() {
        let note = notification(
            EXEC_OUTPUT_DELTA_METHOD,
            &ExecOutputDeltaNotification {
                process_id: "p".into(),
                seq: 1,
                stream: ExecOutputStream::Stdout,
                chunk: ByteChunk(b"hi\n".to_vec()),
            },
        );
        assert_eq!(note["params"]["chunk"], "aGkK");
        assert_eq!(note["params"]["stream"], "stdout");
        assert!(note.get("jsonrpc").is_none());
        let err = response(
            &serde_json::json!(2),
            Err(RpcError::new(codes::NOT_FOUND, "gone")),
        );
        assert_eq!(err["error"]["code"], -32004);
    }
}
