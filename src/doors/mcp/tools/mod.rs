//! The built-in MCP tools, one module each (its description for a model,
//! its input schema and its handler), and the registry's tools
//! ([`registry`]). This module holds the names (the contract's) and the
//! order they are listed in.

mod apply_patch;
mod exec_command;
mod kill_session;
mod list_sessions;
pub(crate) mod registry;
mod write_stdin;

use rmcp::model::Tool;

pub(crate) const EXEC_COMMAND: &str = "exec_command";
pub(crate) const WRITE_STDIN: &str = "write_stdin";
pub(crate) const LIST_SESSIONS: &str = "list_sessions";
pub(crate) const KILL_SESSION: &str = "kill_session";
pub(crate) const APPLY_PATCH: &str = "apply_patch";
/// The tools that do what a raw command does (the shell tools, and
/// `apply_patch`, a file write the caller writes itself): neither listed
/// nor served where the policy refuses raw commands.
pub(crate) const RAW_TOOLS: [&str; 5] = [
    EXEC_COMMAND,
    WRITE_STDIN,
    LIST_SESSIONS,
    KILL_SESSION,
    APPLY_PATCH,
];
/// The built-in tools' names; a registry tool cannot take one of them.
pub(crate) const BUILTIN_NAMES: [&str; 5] = [
    EXEC_COMMAND,
    WRITE_STDIN,
    LIST_SESSIONS,
    KILL_SESSION,
    APPLY_PATCH,
];

/// The built-in tools, in the order they are listed.
pub(crate) fn builtin_tools() -> Vec<Tool> {
    vec![
        exec_command::tool(),
        write_stdin::tool(),
        list_sessions::tool(),
        kill_session::tool(),
        apply_patch::tool(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_have_contract_names_and_object_schemas() {
        let tools = builtin_tools();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                EXEC_COMMAND,
                WRITE_STDIN,
                LIST_SESSIONS,
                KILL_SESSION,
                APPLY_PATCH
            ]
        );
        for tool in &tools {
            assert_eq!(
                tool.input_schema.get("type"),
                Some(&serde_json::json!("object")),
                "{}",
                tool.name
            );
        }
        let exec = &tools[0].input_schema;
        let props = exec.get("properties").and_then(|p| p.as_object()).unwrap();
        for arg in [
            "cmd",
            "workdir",
            "shell",
            "login",
            "tty",
            "yield_time_ms",
            "max_output_tokens",
            "timeout_ms",
            "wait_for",
            "sandbox",
        ] {
            assert!(props.contains_key(arg), "exec_command lacks {arg}");
        }
        assert_eq!(exec.get("required"), Some(&serde_json::json!(["cmd"])));
    }
}
