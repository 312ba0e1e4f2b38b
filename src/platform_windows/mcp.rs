//! `agent-reach serve` on Windows: the MCP server on stdio with the
//! contract's five tools (`exec_command`, `write_stdin`, `list_sessions`,
//! `kill_session`, `apply_patch`) on the Windows engine. Each session is an
//! [`Execution`] in its own job object: `kill_session` ends its whole tree,
//! and so does the server's end (stdin EOF): every session handle is
//! dropped, and the jobs are kill-on-close if the server itself is killed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

use super::conpty;
use super::engine::Execution;
use super::path_entry::session_context;
use super::process::resolve_program;
use super::run::{Command, check_sandbox, spec_for};
use crate::context::ProcessContext;
use crate::exit_code;
use crate::output::{DEFAULT_MAX_OUTPUT_TOKENS, RenderOptions};

/// How long `exec_command` waits before answering with a session.
const EXEC_YIELD_DEFAULT_MS: u64 = 10_000;
/// How long `write_stdin` waits for output.
const WRITE_YIELD_DEFAULT_MS: u64 = 250;
/// The yields' bounds.
const YIELD_RANGE_MS: (u64, u64) = (250, 30_000);

/// `serve` arguments (stdio only on Windows).
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The directory relative `workdir`s are under (default: the current one).
    #[arg(long)]
    pub(crate) root: Option<PathBuf>,
}

/// What the model is told about running commands on Windows.
const EXEC_DOC: &str = "Run a command line in a shell on Windows (PowerShell when present, else cmd.exe; `shell` picks one) and return when it ends or its yield runs out; then it goes on as a session you poll or type into with write_stdin. Windows rules: never combine a destructive operation across shells in one line; check the resolved absolute path before any recursive delete; start background helpers without a window (Start-Process -WindowStyle Hidden / start /b). There is no sandbox on Windows: `sandbox` other than danger-full-access is refused.";

/// Runs the server until stdin closes.
pub(crate) fn main(args: &ServeArgs, ctx: &ProcessContext) -> i32 {
    let (entry, ctx) = match session_context(ctx) {
        Ok(ready) => ready,
        Err(err) => {
            eprintln!("agent-reach serve: {err}");
            return exit_code::FAILURE;
        }
    };
    let root = args
        .root
        .clone()
        .or_else(|| ctx.cwd().ok().map(ToOwned::to_owned))
        .unwrap_or_else(|| PathBuf::from("."));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("agent-reach serve: cannot start the runtime: {err}");
            return exit_code::FAILURE;
        }
    };
    let server = WindowsServer {
        inner: Arc::new(ServerInner {
            ctx,
            root,
            sessions: Mutex::new(BTreeMap::new()),
            next_id: Mutex::new(1),
        }),
    };
    let code = runtime.block_on(async move {
        match server.clone().serve(rmcp::transport::stdio()).await {
            Ok(service) => {
                let _ = service.waiting().await;
                exit_code::SUCCESS
            }
            Err(err) => {
                eprintln!("agent-reach serve: {err}");
                exit_code::FAILURE
            }
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    drop(entry);
    code
}

#[derive(Debug)]
struct ServerInner {
    ctx: ProcessContext,
    root: PathBuf,
    sessions: Mutex<BTreeMap<u64, Execution>>,
    next_id: Mutex<u64>,
}

impl Drop for ServerInner {
    fn drop(&mut self) {
        // Every session's tree ends with the server.
        for (_, execution) in std::mem::take(&mut *crate::sync::lock(&self.sessions)) {
            execution.kill();
        }
    }
}

#[derive(Debug, Clone)]
struct WindowsServer {
    inner: Arc<ServerInner>,
}

fn tool(name: &'static str, doc: &'static str, schema: Value) -> Tool {
    let map = match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    Tool::new(name, doc, Arc::new(map))
}

fn tools() -> Vec<Tool> {
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

fn text(text: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

fn refused(text: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

fn str_arg<'a>(args: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    args.get(name).and_then(Value::as_str)
}

fn u64_arg(args: &Map<String, Value>, name: &str) -> Option<u64> {
    args.get(name).and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    })
}

fn yield_for(args: &Map<String, Value>, default: u64) -> Duration {
    let ms = u64_arg(args, "yield_time_ms")
        .unwrap_or(default)
        .clamp(YIELD_RANGE_MS.0, YIELD_RANGE_MS.1);
    Duration::from_millis(ms)
}

fn render_options(args: &Map<String, Value>) -> RenderOptions {
    RenderOptions {
        max_output_tokens: u64_arg(args, "max_output_tokens")
            .map_or(DEFAULT_MAX_OUTPUT_TOKENS, |n| n as usize),
        keep_color: false,
    }
}

/// The contract's reply block.
fn reply(started: Instant, status: &str, original_tokens: u64, output: &str) -> String {
    format!(
        "Wall time: {:.4} seconds\n{status}\nOriginal token count: {original_tokens}\nOutput:\n{output}",
        started.elapsed().as_secs_f64()
    )
}

impl WindowsServer {
    /// The shell a command line runs in: the one asked for, else
    /// PowerShell when present, else cmd.exe; with the quoting each needs.
    fn shell_argv(&self, shell: Option<&str>, cmd: &str) -> (Vec<OsString>, bool) {
        let env = &self.inner.ctx.env;
        let cwd = &self.inner.root;
        let wanted = shell.map(str::to_ascii_lowercase);
        let powershell = match wanted.as_deref() {
            Some(s) if s.contains("cmd") => None,
            // Wine's powershell.exe is a stub that runs nothing.
            _ if super::console::is_wine() => None,
            _ => ["pwsh", "powershell"]
                .into_iter()
                .find(|p| resolve_program(p.as_ref(), env, cwd).is_some()),
        };
        match powershell {
            Some(ps) => (
                vec![
                    ps.into(),
                    "-NoProfile".into(),
                    "-NonInteractive".into(),
                    "-Command".into(),
                    cmd.into(),
                ],
                false,
            ),
            // cmd parses its own line: /s /c "LINE" keeps LINE as typed.
            None => (
                vec![
                    "cmd.exe".into(),
                    "/d".into(),
                    "/s".into(),
                    "/c".into(),
                    format!("\"{cmd}\"").into(),
                ],
                true,
            ),
        }
    }

    fn session(&self, id: u64) -> Option<Execution> {
        crate::sync::lock(&self.inner.sessions).get(&id).cloned()
    }

    async fn exec_command(&self, args: Map<String, Value>) -> CallToolResponse {
        let started = Instant::now();
        let Some(cmd) = str_arg(&args, "cmd") else {
            return refused("exec_command needs `cmd` (a command line)".into());
        };
        if let Err(refusal) = check_sandbox(str_arg(&args, "sandbox")) {
            return refused(format!("rejected: {refusal}"));
        }
        let (argv, verbatim_args) = self.shell_argv(str_arg(&args, "shell"), cmd);
        let workdir = str_arg(&args, "workdir").map(|w| self.inner.root.join(w));
        let (tty, tty_note) = conpty::grant(args.get("tty").and_then(Value::as_bool) == Some(true));
        let command = Command {
            argv,
            workdir: Some(workdir.unwrap_or_else(|| self.inner.root.clone())),
            timeout: u64_arg(&args, "timeout_ms")
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            env: Vec::new(),
            verbatim_args,
            tty,
        };
        let spec = match spec_for(command, &self.inner.ctx, true, true) {
            Ok(spec) => spec,
            Err(refusal) => return refused(format!("rejected: {refusal}")),
        };
        let execution = match Execution::spawn(&spec) {
            Ok(execution) => execution,
            Err(err) => return refused(format!("cannot start: {err}")),
        };
        let opts = render_options(&args);
        let until = Instant::now() + yield_for(&args, EXEC_YIELD_DEFAULT_MS);
        let waiting = execution.clone();
        let finished = tokio::task::spawn_blocking(move || waiting.wait_until(Some(until)))
            .await
            .unwrap_or(false);
        let note = tty_note.map_or_else(String::new, |n| format!("Note: {n}\n"));
        let output = execution.take_output(&opts);
        let status = if finished {
            let code = execution
                .exit()
                .map_or(exit_code::INTERNAL, |e| e.exit_code());
            format!("{note}Process exited with code {code}")
        } else {
            let id = {
                let mut next = crate::sync::lock(&self.inner.next_id);
                let id = *next;
                *next += 1;
                id
            };
            crate::sync::lock(&self.inner.sessions).insert(id, execution);
            format!("{note}Process running with session ID {id}")
        };
        text(reply(
            started,
            &status,
            output.original_token_count,
            &output.text,
        ))
    }

    async fn write_stdin(&self, args: Map<String, Value>) -> CallToolResponse {
        let started = Instant::now();
        let Some(id) = u64_arg(&args, "session_id") else {
            return refused("write_stdin needs `session_id`".into());
        };
        let Some(execution) = self.session(id) else {
            return refused(format!("no session {id}"));
        };
        let chars = str_arg(&args, "chars").unwrap_or_default().to_owned();
        let mut note = String::new();
        if !chars.is_empty()
            && let Err(err) = execution.write_stdin(chars.as_bytes())
        {
            note = format!("Note: nothing was written: {err}\n");
        }
        let until = Instant::now() + yield_for(&args, WRITE_YIELD_DEFAULT_MS);
        let waiting = execution.clone();
        let finished = tokio::task::spawn_blocking(move || waiting.wait_until(Some(until)))
            .await
            .unwrap_or(false);
        let output = execution.take_output(&render_options(&args));
        let status = if finished {
            crate::sync::lock(&self.inner.sessions).remove(&id);
            let code = execution
                .exit()
                .map_or(exit_code::INTERNAL, |e| e.exit_code());
            format!("{note}Process exited with code {code}")
        } else {
            format!("{note}Process running with session ID {id}")
        };
        text(reply(
            started,
            &status,
            output.original_token_count,
            &output.text,
        ))
    }

    async fn kill_session(&self, args: Map<String, Value>) -> CallToolResponse {
        let started = Instant::now();
        let Some(id) = u64_arg(&args, "session_id") else {
            return refused("kill_session needs `session_id`".into());
        };
        let Some(execution) = crate::sync::lock(&self.inner.sessions).remove(&id) else {
            return refused(format!("no session {id}"));
        };
        execution.kill();
        let waiting = execution.clone();
        let _ = tokio::task::spawn_blocking(move || waiting.wait_until(None)).await;
        let output = execution.take_output(&render_options(&args));
        let left = if execution.tree_alive() {
            "; processes of its tree are still alive"
        } else {
            ""
        };
        text(reply(
            started,
            &format!("Session {id} killed (its whole process tree){left}"),
            output.original_token_count,
            &output.text,
        ))
    }

    fn list_sessions(&self) -> CallToolResponse {
        let sessions = crate::sync::lock(&self.inner.sessions);
        let list: Vec<Value> = sessions
            .iter()
            .map(|(id, execution)| {
                json!({
                    "session_id": id,
                    "pid": execution.pid(),
                    "running": execution.exit().is_none(),
                })
            })
            .collect();
        text(Value::Array(list).to_string())
    }

    async fn apply_patch(&self, args: Map<String, Value>) -> CallToolResponse {
        let Some(patch) = str_arg(&args, "input").map(str::to_owned) else {
            return refused("apply_patch needs `input` (the patch)".into());
        };
        let dir = match str_arg(&args, "workdir") {
            Some(w) => self.inner.root.join(w),
            None => self.inner.root.clone(),
        };
        let applied = tokio::task::spawn_blocking(move || {
            crate::apply_patch::apply(&patch, &dir, &crate::apply_patch::ApplyOptions::default())
        })
        .await;
        match applied {
            Ok(Ok(report)) => text(report.to_string()),
            Ok(Err(err)) => refused(err.to_string()),
            Err(err) => refused(format!("apply_patch failed: {err}")),
        }
    }
}

impl ServerHandler for WindowsServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "agent-reach",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(EXEC_DOC)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools().into_iter().find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        Ok(match request.name.as_ref() {
            "exec_command" => self.exec_command(args).await,
            "write_stdin" => self.write_stdin(args).await,
            "kill_session" => self.kill_session(args).await,
            "list_sessions" => self.list_sessions(),
            "apply_patch" => self.apply_patch(args).await,
            other => {
                return Err(McpError::invalid_params(
                    format!("no tool named {other:?}"),
                    None,
                ));
            }
        })
    }
}
