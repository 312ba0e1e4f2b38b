//! The tools Windows' MCP server lists: the contract's five built-in tools
//! (their descriptions carry the Windows rules) and the registry's.

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::{Map, Value, json};

use crate::doors::mcp::portable::registry_tools;
use crate::platform_windows::operator::Operator;

/// What the model is told about running commands on Windows.
pub(super) const EXEC_DOC: &str = "Run a command line in a shell on Windows (PowerShell when present, else cmd.exe; `shell` picks one) and return when it ends or its yield runs out; then it goes on as a session you poll or type into with write_stdin. Windows rules: never combine a destructive operation across shells in one line; check the resolved absolute path before any recursive delete; start background helpers without a window (Start-Process -WindowStyle Hidden / start /b). There is no sandbox on Windows: `sandbox` other than danger-full-access is refused.";

fn tool(name: &'static str, doc: &'static str, schema: Value) -> Tool {
    let map = match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    Tool::new(name, doc, Arc::new(map))
}

/// The built-in tools' names, in the order they are listed.
pub(super) const BUILTIN_NAMES: [&str; 5] = [
    "exec_command",
    "write_stdin",
    "list_sessions",
    "kill_session",
    "apply_patch",
];

/// What `tools/list` gives: the built-in tools where the policy lets raw
/// commands run, then the registry's available tools (one whose name a
/// built-in tool has is left out: the built-ins are what agents rely on).
pub(super) fn listed_tools(operator: &Operator) -> Vec<Tool> {
    let mut tools = if operator.raw_allowed() {
        builtin_tools()
    } else {
        Vec::new()
    };
    tools.extend(registry_tools(
        operator.registry(),
        &BUILTIN_NAMES,
        |name| {
            eprintln!(
                "agent-reach serve: registry tool {name} not served: a built-in tool has its name"
            );
        },
    ));
    tools
}

fn builtin_tools() -> Vec<Tool> {
    vec![
        tool(
            "exec_command",
            EXEC_DOC,
            json!({"type": "object", "properties": {
                "cmd": {"type": "string"},
                "workdir": {"type": "string"},
                "shell": {"type": "string"},
                "tty": {"type": "boolean"},
                "yield_time_ms": {"type": "integer"},
                "max_output_tokens": {"type": "integer"},
                "timeout_ms": {"type": "integer"},
                "sandbox": {"type": "string"}
            }, "required": ["cmd"]}),
        ),
        tool(
            "write_stdin",
            "Type into a session (chars, may be empty to poll) and return its new output.",
            json!({"type": "object", "properties": {
                "session_id": {"type": "integer"},
                "chars": {"type": "string"},
                "yield_time_ms": {"type": "integer"},
                "max_output_tokens": {"type": "integer"}
            }, "required": ["session_id"]}),
        ),
        tool(
            "list_sessions",
            "The live sessions: id, command, process id.",
            json!({"type": "object", "properties": {}}),
        ),
        tool(
            "kill_session",
            "End a session: its whole process tree (the job object) at once. Returns its last output and how it ended.",
            json!({"type": "object", "properties": {"session_id": {"type": "integer"}}, "required": ["session_id"]}),
        ),
        tool(
            "apply_patch",
            "Edit files with a patch in the apply_patch format, all or nothing; CRLF files stay CRLF. Paths are relative to `workdir` (default: the server root).",
            json!({"type": "object", "properties": {
                "input": {"type": "string"},
                "workdir": {"type": "string"}
            }, "required": ["input"]}),
        ),
    ]
}
