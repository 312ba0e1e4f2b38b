//! The stable `error.kind` values of registry results. Scripts and agents
//! match on these strings; add new ones, never rename.

/// The request line is not JSON, or not an object of known fields.
pub(crate) const MALFORMED_REQUEST: &str = "malformed_request";
/// No tool of that name in the registry.
pub(crate) const UNKNOWN_TOOL: &str = "unknown_tool";
/// A parameter is missing, unknown, of the wrong type or out of bounds.
pub(crate) const INVALID_PARAMS: &str = "invalid_params";
/// The `workdir` does not exist, escapes the project root or is not allowed.
pub(crate) const INVALID_WORKDIR: &str = "invalid_workdir";
/// The tool's risk needs `"approve": true`.
pub(crate) const APPROVAL_REQUIRED: &str = "approval_required";
/// A raw `command` request, and `allow_raw_commands` is off.
pub(crate) const RAW_COMMANDS_DISABLED: &str = "raw_commands_disabled";
/// The active profile leaves the tool out.
pub(crate) const DENIED_BY_PROFILE: &str = "denied_by_profile";
/// The tool's risk is above the registry's `max_risk`.
pub(crate) const DENIED_BY_POLICY: &str = "denied_by_policy";
/// The queue is full (`status: busy`, with `retry_after_ms`).
pub(crate) const QUEUE_FULL: &str = "queue_full";
/// The command could not start because descriptors or processes ran out
/// for now (`status: busy`, with `retry_after_ms`).
pub(crate) const RESOURCES_EXHAUSTED: &str = "resources_exhausted";
/// The tool is `interactive`: a one-shot request cannot answer its
/// prompts (`status: rejected`); it needs a terminal session.
pub(crate) const NEEDS_SESSION: &str = "needs_session";
/// A secret the tool needs has no value (`status: error`).
pub(crate) const SECRET_UNAVAILABLE: &str = "secret_unavailable";
/// The command was killed at its timeout (`status: timeout`).
pub(crate) const TIMEOUT: &str = "timeout";
/// The program was not found (exit 127).
pub(crate) const NOT_FOUND: &str = "not_found";
/// The program was found but could not be run (exit 126).
pub(crate) const NOT_EXECUTABLE: &str = "not_executable";
/// agent-reach failed to start or watch the command (or the sandbox
/// policy is unknown).
pub(crate) const SPAWN_FAILED: &str = "spawn_failed";
/// The engine found the working directory unusable at start (it vanished
/// after validation).
pub(crate) const BAD_WORKDIR: &str = "bad_workdir";

/// The kinds a door answers as "forbidden": the operator's policy or
/// profile refused, or a person's approval was needed.
pub(crate) fn is_policy_refusal(kind: &str) -> bool {
    matches!(
        kind,
        RAW_COMMANDS_DISABLED | DENIED_BY_POLICY | DENIED_BY_PROFILE | APPROVAL_REQUIRED
    )
}

/// The kinds a door answers as "not found": the working directory or the
/// program is not there.
pub(crate) fn is_missing(kind: &str) -> bool {
    matches!(kind, INVALID_WORKDIR | BAD_WORKDIR | NOT_FOUND)
}
