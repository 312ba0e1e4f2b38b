//! The MCP tool list: names, input schemas generated from the argument
//! structs, and descriptions written for a model (when to use `tty`, what the
//! two waits mean, how to keep a server running, how to read folded output).

use std::sync::Arc;

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{Tool, ToolAnnotations};

use super::params::{
    ApplyPatchParams, ExecCommandParams, KillSessionParams, NoParams, WriteStdinParams,
};

pub const EXEC_COMMAND: &str = "exec_command";
pub const WRITE_STDIN: &str = "write_stdin";
pub const LIST_SESSIONS: &str = "list_sessions";
pub const KILL_SESSION: &str = "kill_session";
pub const APPLY_PATCH: &str = "apply_patch";
/// The built-in tools' names; a registry tool cannot take one of them.
/// The shell tools: raw commands, served only where the policy allows them.
pub const SHELL_TOOLS: [&str; 4] = [EXEC_COMMAND, WRITE_STDIN, LIST_SESSIONS, KILL_SESSION];
pub const BUILTIN_NAMES: [&str; 5] = [
    EXEC_COMMAND,
    WRITE_STDIN,
    LIST_SESSIONS,
    KILL_SESSION,
    APPLY_PATCH,
];

const EXEC_COMMAND_DOC: &str = "Run a shell command line and return its output.\n\
\n\
Two different times: `yield_time_ms` (default 10000) only hands control back to you: if the command has not finished by then, the reply gives a `session_id` and the command keeps running; read more of it with write_stdin. `timeout_ms` (default: none) kills the command (exit code 124). A wait also ends early when the command exits, when `wait_for` (a regex) matches new output, or, on a tty, when the program sits at a prompt waiting for input (state `awaiting_input`).\n\
\n\
Servers and watchers (`npm run dev`, `cargo watch`): run them in the foreground here with `wait_for` set to their ready line (e.g. `listening on|ready`); they live on as a session until you kill_session them. Background jobs (`cmd &`, `nohup`, daemons) are killed when the command that started them ends.\n\
\n\
Set `tty: true` for anything interactive: prompts, passwords, REPLs, `ssh`, programs you will type into with write_stdin. Without it stdin is closed and prompts fail at once.\n\
\n\
Long output is folded to `max_output_tokens`: the head and tail are kept and a marker says which lines were left out and the file that holds them (`sed -n 'A,Bp' FILE` prints them).";

const WRITE_STDIN_DOC: &str = "Type into a running session (started with `tty: true`) and/or read the output it produced since the last reply.\n\
\n\
`chars` is sent as is: end a line with \"\\n\"; \"\\u0003\" is Ctrl-C, \"\\u0004\" Ctrl-D (end of input). Empty `chars` only polls: it waits up to `yield_time_ms` (default 5000, up to 300000) for new output, returning early when the process exits, `wait_for` matches, or it waits for input. After a write the default wait is 250 ms.\n\
\n\
When the process has exited, the reply gives its remaining output and exit code, and the session ends.";

const LIST_SESSIONS_DOC: &str = "List the running sessions: id, command, state (active, idle, exited), age, idle time, pid, bytes of output not yet read, and the TCP ports its processes listen on (so you know which session holds port 3000).";

const KILL_SESSION_DOC: &str = "End a session: SIGTERM to everything it started, SIGKILL after a short grace. Returns its last output and how it ended.";

const APPLY_PATCH_DOC: &str = "Edit files with a patch in the apply_patch format, all or nothing:\n\
*** Begin Patch\n\
*** Add File: path/new.txt\n\
+line\n\
*** Update File: path/old.rs\n\
@@ fn context_line\n\
 unchanged\n\
-removed\n\
+added\n\
*** Delete File: path/gone.txt\n\
*** End Patch\n\
`*** Move to: P` after an Update header renames. Paths are relative to `workdir` (default: the server root). If any hunk does not apply, nothing is changed and the error says why.";

/// The built-in tools, in the order they are listed.
pub fn builtin_tools() -> Vec<Tool> {
    let read_only = ToolAnnotations::new().read_only(true);
    vec![
        Tool::new(
            EXEC_COMMAND,
            EXEC_COMMAND_DOC,
            schema_for_type::<ExecCommandParams>(),
        )
        .with_annotations(ToolAnnotations::new().destructive(true).open_world(true)),
        Tool::new(
            WRITE_STDIN,
            WRITE_STDIN_DOC,
            schema_for_type::<WriteStdinParams>(),
        ),
        Tool::new(
            LIST_SESSIONS,
            LIST_SESSIONS_DOC,
            schema_for_type::<NoParams>(),
        )
        .with_annotations(read_only),
        Tool::new(
            KILL_SESSION,
            KILL_SESSION_DOC,
            schema_for_type::<KillSessionParams>(),
        ),
        Tool::new(
            APPLY_PATCH,
            APPLY_PATCH_DOC,
            schema_for_type::<ApplyPatchParams>(),
        )
        .with_annotations(ToolAnnotations::new().destructive(true)),
    ]
}

/// A tool from a name, a description and a raw JSON schema object.
pub fn raw_tool(
    name: String,
    description: String,
    schema: serde_json::Map<String, serde_json::Value>,
) -> Tool {
    Tool::new(name, description, Arc::new(schema))
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
