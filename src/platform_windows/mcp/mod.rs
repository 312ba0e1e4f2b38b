//! `agent-reach serve` on Windows: the MCP server on stdio with the
//! contract's five tools (`exec_command`, `write_stdin`, `list_sessions`,
//! `kill_session`, `apply_patch`) and the registry's tools (`--config`,
//! `--profile`, `--root`) on the Windows engine, under the operator's
//! policy as on Linux: the built-in tools are raw commands (neither listed
//! nor served where the policy refuses those), registry tools resolve on
//! the shared plan stage, and where a person's approval would let a request
//! run the person behind the client is asked (form elicitation); the
//! model's own `approve` never counts.
//!
//! Each session is an [`Execution`] in its own job object: `kill_session`
//! ends its whole tree, and so does the server's end (stdin EOF): every
//! session handle and running tool is dropped, and the jobs are
//! kill-on-close if the server itself is killed.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

mod http;
mod tools;

use self::tools::{BUILTIN_NAMES, EXEC_DOC, listed_tools};
use super::engine::Execution;
use super::operator::Operator;
use super::path_entry::session_context;
use super::process::resolve_program;
use super::run::{Command, check_sandbox, run_tool, spec_for, strip_verbatim};
use super::{NO_SANDBOX, conpty};
use crate::context::ProcessContext;
use crate::doors::mcp::portable::{ask_person, can_ask, tool_result};
use crate::doors::mcp::yields::{
    EXEC_YIELD_DEFAULT_MS, EXEC_YIELD_RANGE_MS, POLL_YIELD_DEFAULT_MS, POLL_YIELD_RANGE_MS,
    WRITE_YIELD_DEFAULT_MS, WRITE_YIELD_RANGE_MS,
};
use crate::exec::glue::Rendered;
use crate::exit_code;
use crate::output::{DEFAULT_MAX_OUTPUT_TOKENS, RenderOptions};
use crate::plan::files::{FileOp, plan_file};
use crate::plan::registry_args::RegistryArgs;
use crate::plan::{Door, Rejection, Request};
use crate::result::NormalizedResult;
use crate::sandbox::Policy;
use crate::serve::listen::args::ListenArgs;

/// `serve` arguments: the registry and the project root, which relative
/// `workdir`s are under and no command leaves; and the listeners (MCP over
/// streamable HTTP on Windows, [`http`]), with Linux's names and defaults.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
    /// The sandbox of every raw command and of every tool without its own
    /// (overrides the registry's `[sandbox] default`): on Windows anything
    /// but danger-full-access exits 125.
    #[arg(long, value_name = "POLICY")]
    pub(crate) sandbox: Option<Policy>,
    #[command(flatten)]
    pub(crate) listeners: ListenArgs,
}

/// Runs the server until stdin closes, or its listeners until Ctrl-C.
pub(crate) fn main(args: &ServeArgs, ctx: &ProcessContext) -> i32 {
    let (entry, ctx) = match session_context(ctx) {
        Ok(ready) => ready,
        Err(err) => {
            eprintln!("agent-reach serve: {err}");
            return exit_code::FAILURE;
        }
    };
    if let Some(policy) = args.sandbox
        && policy != Policy::DangerFullAccess
    {
        eprintln!("agent-reach serve: --sandbox {policy}: {NO_SANDBOX}");
        return exit_code::INTERNAL;
    }
    let operator = match Operator::load(&args.registry, &ctx) {
        Ok(operator) => operator.with_sandbox_override(args.sandbox),
        Err(err) => {
            eprintln!("agent-reach serve: {err}");
            return err.code;
        }
    };
    let listening = match http::Listening::check(args, &ctx) {
        Ok(listening) => listening,
        Err((code, message)) => {
            eprintln!("agent-reach serve: {message}");
            return code;
        }
    };
    let tools = listed_tools(&operator);
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
    let shared = Arc::new(Shared {
        ctx: operator.child_context(&ctx),
        operator,
        tools,
    });
    if let Some(listening) = listening {
        let code = runtime.block_on(http::serve(args, listening, shared));
        runtime.shutdown_timeout(Duration::from_secs(1));
        drop(entry);
        return code;
    }
    let server = WindowsServer::new(shared);
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

/// What every client of the server shares.
#[derive(Debug)]
struct Shared {
    ctx: ProcessContext,
    operator: Operator,
    /// What `tools/list` gives, fixed at start.
    tools: Vec<Tool>,
}

/// One client's server: its sessions and running tools, ended with it.
#[derive(Debug)]
struct ServerInner {
    shared: Arc<Shared>,
    sessions: Mutex<BTreeMap<u64, Execution>>,
    /// Registry tools running to their end, by call number.
    running: Mutex<BTreeMap<u64, Execution>>,
    next_id: Mutex<u64>,
}

impl Drop for ServerInner {
    fn drop(&mut self) {
        // Every session's tree ends with the server.
        for (_, execution) in std::mem::take(&mut *crate::sync::lock(&self.sessions)) {
            execution.kill();
        }
        for (_, execution) in std::mem::take(&mut *crate::sync::lock(&self.running)) {
            execution.kill();
        }
    }
}

#[derive(Debug, Clone)]
struct WindowsServer {
    inner: Arc<ServerInner>,
}

impl WindowsServer {
    /// How the output is folded: the call's `max_output_tokens` within
    /// `[limits]`, and the cap's detail when it cut what was asked.
    fn render_options(&self, args: &Map<String, Value>) -> (RenderOptions, Vec<String>) {
        let asked = u64_arg(args, "max_output_tokens").map_or(DEFAULT_MAX_OUTPUT_TOKENS, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
        let (tokens, cap) = self.inner.shared.operator.cap_tokens(asked);
        let opts = RenderOptions {
            max_output_tokens: tokens,
            keep_color: false,
        };
        (opts, cap.map(|c| c.detail()).into_iter().collect())
    }

    /// A client's server, with no session yet.
    fn new(shared: Arc<Shared>) -> Self {
        Self {
            inner: Arc::new(ServerInner {
                shared,
                sessions: Mutex::new(BTreeMap::new()),
                running: Mutex::new(BTreeMap::new()),
                next_id: Mutex::new(1),
            }),
        }
    }
}

/// Plans with `plan` as an MCP door: where a person's approval would let
/// the request run and the client can ask one, the person is asked, and
/// on their accept it is planned again as approved.
async fn asking<T>(
    peer: &Peer<RoleServer>,
    plan: impl Fn(Door) -> Result<T, Rejection>,
) -> Result<T, Rejection> {
    match plan(Door::Mcp {
        person_approved: false,
    }) {
        Err(Rejection {
            approval: Some(ask),
            ..
        }) if can_ask(peer) => {
            ask_person(peer, &ask).await?;
            plan(Door::Mcp {
                person_approved: true,
            })
        }
        other => other,
    }
}

/// A refusal as the tool error the model reads, its kind named.
fn rejected(rejection: &Rejection) -> CallToolResponse {
    refused(format!(
        "rejected: {} ({})",
        rejection.message, rejection.kind
    ))
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

/// The call's `yield_time_ms`, else `default`, within `range`.
fn yield_for(args: &Map<String, Value>, default: u64, range: (u64, u64)) -> Duration {
    let ms = u64_arg(args, "yield_time_ms")
        .unwrap_or(default)
        .clamp(range.0, range.1);
    Duration::from_millis(ms)
}

/// The contract's reply block; `capped` names what `[limits]` cut.
fn reply(
    started: Instant,
    status: &str,
    capped: &[String],
    original_tokens: u64,
    output: &str,
) -> String {
    let capped: String = capped.iter().map(|c| format!("Capped: {c}\n")).collect();
    format!(
        "Wall time: {:.4} seconds\n{status}\n{capped}Original token count: {original_tokens}\nOutput:\n{output}",
        started.elapsed().as_secs_f64()
    )
}

impl WindowsServer {
    /// The shell a command line runs in: the one asked for, else
    /// PowerShell when present, else cmd.exe; with the quoting each needs.
    fn shell_argv(&self, shell: Option<&str>, cmd: &str) -> (Vec<OsString>, bool) {
        let env = &self.inner.shared.ctx.env;
        let cwd = &strip_verbatim(self.inner.shared.operator.root().to_path_buf());
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

    fn next_id(&self) -> u64 {
        let mut next = crate::sync::lock(&self.inner.next_id);
        let id = *next;
        *next += 1;
        id
    }

    fn session(&self, id: u64) -> Option<Execution> {
        crate::sync::lock(&self.inner.sessions).get(&id).cloned()
    }

    async fn exec_command(
        &self,
        args: Map<String, Value>,
        peer: &Peer<RoleServer>,
    ) -> CallToolResponse {
        let started = Instant::now();
        let Some(cmd) = str_arg(&args, "cmd") else {
            return refused("exec_command needs `cmd` (a command line)".into());
        };
        if let Err(refusal) = check_sandbox(str_arg(&args, "sandbox")) {
            return refused(format!("rejected: {refusal}"));
        }
        let (argv, verbatim_args) = self.shell_argv(str_arg(&args, "shell"), cmd);
        let (tty, tty_note) = conpty::grant(args.get("tty").and_then(Value::as_bool) == Some(true));
        let asked = Command {
            argv,
            workdir: str_arg(&args, "workdir").map(PathBuf::from),
            timeout: u64_arg(&args, "timeout_ms")
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            env: Vec::new(),
            verbatim_args,
            tty,
        };
        let operator = &self.inner.shared.operator;
        let admitted = asking(peer, |door| {
            let mut command = asked.clone();
            operator
                .admit_raw(&mut command, door, false)
                .map(|()| command)
        })
        .await;
        let mut command = match admitted {
            Ok(command) => command,
            Err(rejection) => return rejected(&rejection),
        };
        let (opts, mut capped) = self.render_options(&args);
        capped.extend(
            operator
                .cap_timeout(&mut command, false)
                .map(|c| c.detail()),
        );
        let spec = match spec_for(command, &self.inner.shared.ctx, true, true) {
            Ok(spec) => spec,
            Err(refusal) => return refused(format!("rejected: {refusal}")),
        };
        let execution = match Execution::spawn(&spec) {
            Ok(execution) => execution,
            Err(err) => return refused(format!("cannot start: {err}")),
        };
        let until = Instant::now() + yield_for(&args, EXEC_YIELD_DEFAULT_MS, EXEC_YIELD_RANGE_MS);
        let note = tty_note.map_or_else(String::new, |n| format!("Note: {n}\n"));
        let (status, output) = self.settle(execution, None, until, &opts, &note).await;
        text(reply(
            started,
            &status,
            &capped,
            output.original_token_count,
            &output.text,
        ))
    }

    /// Waits for `execution` until `until` (off the runtime's threads), then
    /// takes its new output and says how it stands, after `note`: exited
    /// with its code (leaving the session table), or running as session
    /// `session` (a new one when `None`).
    async fn settle(
        &self,
        execution: Execution,
        session: Option<u64>,
        until: Instant,
        opts: &RenderOptions,
        note: &str,
    ) -> (String, Rendered) {
        let waiting = execution.clone();
        let finished = tokio::task::spawn_blocking(move || waiting.wait_until(Some(until)))
            .await
            .unwrap_or(false);
        let output = execution.take_output(opts);
        let status = if finished {
            if let Some(id) = session {
                crate::sync::lock(&self.inner.sessions).remove(&id);
            }
            let code = execution
                .exit()
                .map_or(exit_code::INTERNAL, |e| e.exit_code());
            format!("{note}Process exited with code {code}")
        } else {
            let id = session.unwrap_or_else(|| {
                let id = self.next_id();
                crate::sync::lock(&self.inner.sessions).insert(id, execution);
                id
            });
            format!("{note}Process running with session ID {id}")
        };
        (status, output)
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
        // An empty poll waits longer than an answer to a write.
        let (default, range) = if chars.is_empty() {
            (POLL_YIELD_DEFAULT_MS, POLL_YIELD_RANGE_MS)
        } else {
            (WRITE_YIELD_DEFAULT_MS, WRITE_YIELD_RANGE_MS)
        };
        let until = Instant::now() + yield_for(&args, default, range);
        let (opts, capped) = self.render_options(&args);
        let (status, output) = self.settle(execution, Some(id), until, &opts, &note).await;
        text(reply(
            started,
            &status,
            &capped,
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
        let (opts, capped) = self.render_options(&args);
        let output = execution.take_output(&opts);
        let left = if execution.tree_alive() {
            "; processes of its tree are still alive"
        } else {
            ""
        };
        text(reply(
            started,
            &format!("Session {id} killed (its whole process tree){left}"),
            &capped,
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

    /// The built-in `apply_patch`: a file write planned as one (refused
    /// where raw commands are, a person asked where one must approve), in
    /// the caller's directory beneath the root, no path leaving it.
    async fn apply_patch(
        &self,
        args: Map<String, Value>,
        peer: &Peer<RoleServer>,
    ) -> CallToolResponse {
        let Some(patch) = str_arg(&args, "input").map(str::to_owned) else {
            return refused("apply_patch needs `input` (the patch)".into());
        };
        let operator = &self.inner.shared.operator;
        let workdir = str_arg(&args, "workdir").map(std::path::Path::new);
        let planned = asking(peer, |door| {
            plan_file(operator.policy(), FileOp::ApplyPatch, &[], door)?;
            operator.check_unsandboxed()?;
            operator.caller_dir(workdir)
        })
        .await;
        let dir = match planned {
            Ok(dir) => strip_verbatim(dir),
            Err(rejection) => return rejected(&rejection),
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

    /// A registry tool, run to its end: the normalized result as JSON text
    /// and structured content (a tool error when refused or failed to run).
    async fn registry_tool(
        &self,
        name: &str,
        args: Map<String, Value>,
        peer: &Peer<RoleServer>,
    ) -> CallToolResponse {
        let operator = &self.inner.shared.operator;
        let request = match operator.registry().tool(name) {
            Some(spec) => Request::for_mcp_tool(spec, args),
            None => Request::for_tool(None, name, args),
        };
        let result = match asking(peer, |door| operator.resolve(&request, door)).await {
            Ok(run) => {
                // Only a weak link: the client's end (its handler dropped)
                // must still kill what it runs.
                let client = Arc::downgrade(&self.inner);
                let shared = Arc::clone(&self.inner.shared);
                let number = self.next_id();
                tokio::task::spawn_blocking(move || {
                    let result = run_tool(run, &shared.ctx, |execution| match client.upgrade() {
                        Some(inner) => {
                            crate::sync::lock(&inner.running).insert(number, execution.clone());
                        }
                        None => execution.kill(),
                    });
                    if let Some(inner) = client.upgrade() {
                        crate::sync::lock(&inner.running).remove(&number);
                    }
                    result
                })
                .await
                .unwrap_or_else(|err| {
                    NormalizedResult::refused(
                        None,
                        Some(name.to_owned()),
                        crate::result::Status::Error,
                        crate::registry::kinds::SPAWN_FAILED,
                        format!("the tool's runner failed: {err}"),
                    )
                })
            }
            Err(rejection) => NormalizedResult::refused(
                None,
                Some(name.to_owned()),
                rejection.status,
                rejection.kind,
                rejection.message,
            ),
        };
        tool_result(&result).into()
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
        Ok(ListToolsResult::with_all_items(
            self.inner.shared.tools.clone(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner
            .shared
            .tools
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let name = request.name.as_ref();
        // Only what is listed is served: the built-ins are gone where the
        // policy refuses raw commands.
        if self.get_tool(name).is_none() {
            if BUILTIN_NAMES.contains(&name) {
                return Ok(refused(format!(
                    "{name} is not available: raw commands are disabled by the operator's policy (raw_commands_disabled); use a registry tool (the operator can set allow_raw_commands = true in the registry)"
                )));
            }
            return Err(McpError::invalid_params(
                format!("no tool named {name:?}"),
                None,
            ));
        }
        let peer = &context.peer;
        Ok(match name {
            "exec_command" => self.exec_command(args, peer).await,
            "write_stdin" => self.write_stdin(args).await,
            "kill_session" => self.kill_session(args).await,
            "list_sessions" => self.list_sessions(),
            "apply_patch" => self.apply_patch(args, peer).await,
            registry => self.registry_tool(registry, args, peer).await,
        })
    }
}
