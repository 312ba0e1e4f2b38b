//! The MCP server: rmcp's [`ServerHandler`] over the session table.
//!
//! Every call is parsed into a validated request first ([`super::params`]);
//! a bad argument or a failed start is a tool error with one clear line,
//! never a crash of the server. Waiting calls send progress notifications
//! when the client gave a progress token, and stop waiting (leaving the
//! process running as a session) when the client cancels.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;

use super::approval;
use super::client::ClientSeat;
use super::params::{self, ExecRequest, PollRequest};
use super::procfs;
use super::registry_tools::RegistryTools;
use super::reply::{Reply, ReplyState};
use super::session::{self, Session, WaitOutcome};
use super::table::{Lookup, SessionTable};
use super::tools;
use crate::exec::{Execution, ExitInfo, RenderOptions, Rendered};
use crate::logging::{self, ExecutionEvent};
use crate::plan::{Dispatcher, Plan, Rejection, Request, Target};
use crate::registry::Metrics;
use crate::result::Status;

/// How often a waiting call sends a progress notification.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// The MCP resource with the metrics (the registry's [`Metrics::to_json`]).
pub const METRICS_URI: &str = "agent-reach://metrics";

/// What the server needs from its start: where commands run, with what.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// `--root`: the default working directory.
    pub root: PathBuf,
    /// Our environment (`$SHELL` for `exec_command`).
    pub env: BTreeMap<OsString, OsString>,
    /// `--max-sessions`.
    pub max_sessions: usize,
}

/// The MCP server; cheap to clone. Every client shares one table; each
/// handler serves one client ([`ClientSeat`]) and sees only its sessions.
#[derive(Clone)]
pub struct AgentReachServer {
    inner: Arc<Inner>,
    client: Arc<ClientSeat>,
}

struct Inner {
    config: ServeConfig,
    table: Mutex<SessionTable<Session>>,
    tools: Vec<Tool>,
    /// The shell tools are served (the policy's `allow_raw_commands`).
    raw_commands: bool,
    dispatcher: Arc<Dispatcher>,
    registry: RegistryTools,
    metrics: Arc<Metrics>,
    /// Clients over HTTP whose seat is not dropped yet.
    remote_clients: std::sync::atomic::AtomicUsize,
}

/// The tool-level failure of a call: shown to the model as one line.
struct ToolFailure {
    message: String,
    /// How the metrics count it: a refusal, or `None` when the handler
    /// already counted the run that failed.
    counted_as: Option<Status>,
}

impl ToolFailure {
    /// A call refused: bad arguments, no such session, a command that
    /// cannot start.
    fn refused(message: String) -> Self {
        Self {
            message,
            counted_as: Some(Status::Rejected),
        }
    }
}

impl<E: std::fmt::Display> From<E> for ToolFailure {
    fn from(e: E) -> Self {
        ToolFailure::refused(e.to_string())
    }
}

type ToolResult = Result<CallToolResult, ToolFailure>;

impl AgentReachServer {
    /// A server with the built-in tools and the registry's. The shell
    /// tools are listed only where the policy allows raw commands. Every
    /// tool is counted in the dispatcher's [`Metrics`].
    pub fn new(config: ServeConfig, dispatcher: Arc<Dispatcher>) -> Self {
        let metrics = dispatcher.metrics();
        let table = Mutex::new(SessionTable::new(config.max_sessions));
        let stdio = Arc::new(ClientSeat::stdio(config.max_sessions));
        let raw_commands = dispatcher.planner().policy().allow_raw_commands;
        let mut all_tools: Vec<Tool> = tools::builtin_tools()
            .into_iter()
            .filter(|t| raw_commands || !tools::SHELL_TOOLS.contains(&t.name.as_ref()))
            .collect();
        let builtin: Vec<&str> = tools::BUILTIN_NAMES.to_vec();
        let registry = RegistryTools::new(dispatcher.clone(), &builtin);
        all_tools.extend(registry.tools().iter().cloned());
        Self {
            inner: Arc::new(Inner {
                config,
                table,
                tools: all_tools,
                raw_commands,
                dispatcher,
                registry,
                metrics,
                remote_clients: Default::default(),
            }),
            client: stdio,
        }
    }

    /// A handler for a new client over HTTP (one MCP session): the same
    /// table, tools and metrics; its own sessions, at most `max_sessions`,
    /// killed when the handler is dropped.
    pub(crate) fn for_client(&self, max_sessions: usize) -> AgentReachServer {
        use std::sync::atomic::Ordering;
        self.inner.remote_clients.fetch_add(1, Ordering::Relaxed);
        let inner = self.inner.clone();
        let seat = ClientSeat::remote(max_sessions, move |id| {
            inner.remote_clients.fetch_sub(1, Ordering::Relaxed);
            let sessions = inner
                .table
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .drain_owner(id);
            publish_gauges(&inner);
            if sessions.is_empty() {
                return;
            }
            tracing::info!(client = %id, sessions = sessions.len(), "client gone; killing its sessions");
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            for (session_id, s) in sessions {
                runtime.spawn(async move {
                    let report = s.exec.terminate().await;
                    tracing::info!(client = %id, session_id, survivors = ?report.survivors, "session of a client gone killed");
                });
            }
        });
        AgentReachServer {
            inner: self.inner.clone(),
            client: Arc::new(seat),
        }
    }

    /// What the server was started with (the listeners spawn with it too).
    pub(crate) fn config(&self) -> &ServeConfig {
        &self.inner.config
    }

    fn table(&self) -> MutexGuard<'_, SessionTable<Session>> {
        // A panic while holding the lock leaves consistent data behind: the
        // table's operations do not unwind half-way.
        self.inner
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Kills every session (escapees included) and waits for them, bounded
    /// by the engine's grace and drain. Called on stdin EOF and signals.
    pub async fn shutdown(&self) {
        let sessions = self.table().drain();
        let mut kills = tokio::task::JoinSet::new();
        for (id, s) in sessions {
            kills.spawn(async move {
                let report = s.exec.terminate().await;
                tracing::info!(session_id = id, survivors = ?report.survivors, "session killed at shutdown");
            });
        }
        while kills.join_next().await.is_some() {}
        // Orphans the sessions' kills could not attribute (several ran).
        let orphans = tokio::task::spawn_blocking(crate::exec::kill_orphans)
            .await
            .unwrap_or_default();
        if !orphans.is_empty() {
            tracing::info!(pids = ?orphans, "killed orphans of session commands at shutdown");
        }
        self.update_sessions_gauge();
    }

    /// The server's environment (what `serve` started with).
    pub(crate) fn env(&self) -> &BTreeMap<OsString, OsString> {
        &self.inner.config.env
    }

    /// The number of live sessions, of every client.
    pub fn live_sessions(&self) -> usize {
        self.table().len()
    }

    /// The metrics every tool is counted in.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    fn update_sessions_gauge(&self) {
        publish_gauges(&self.inner);
    }

    /// Counts the end of a session's command once, as a run of
    /// `exec_command` lasting from its start to now.
    fn count_end(&self, session: &Session, exit: &ExitInfo) {
        if session.first_to_count_end() {
            self.inner.metrics.record_outcome(
                tools::EXEC_COMMAND,
                exit.status(),
                session.started.elapsed(),
            );
        }
    }

    async fn exec_command(&self, args: JsonArgs, ctx: &RequestContext<RoleServer>) -> ToolResult {
        let started = Instant::now();
        let p: params::ExecCommandParams = parse(args)?;
        let shell = self
            .inner
            .config
            .env
            .get(std::ffi::OsStr::new("SHELL"))
            .and_then(|s| s.to_str());
        let req = params::exec_request(p, shell, &self.inner.config.root)?;
        let mut request = Request::command(req.argv.iter().map(OsString::from).collect());
        request.workdir = Some(req.workdir.clone());
        request.tty = Some(req.tty);
        request.timeout_ms = req
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        request.max_output_tokens = Some(req.max_output_tokens);
        request.sandbox = req.sandbox;
        request.session = true;
        let plan = self.plan(&request, ctx).await.map_err(|rejection| {
            self.log(&req, started, None, "rejected", None, 0, false);
            ToolFailure::refused(format!("{} ({})", rejection.message, rejection.kind))
        })?;
        let exec = Execution::spawn(plan.spec).map_err(|e| {
            self.log(&req, started, None, "error", None, 0, false);
            ToolFailure::from(e)
        })?;
        let session = Arc::new(Session::new(exec, req.cmd.clone(), req.tty, plan.report));
        let admitted = self.table().insert(
            self.client.id(),
            session.clone(),
            self.client.max_sessions(),
        );
        let (id, pruned) = match admitted {
            Ok(admitted) => admitted,
            Err(full) => {
                session.exec.terminate().await;
                return Err(ToolFailure::from(full));
            }
        };
        self.kill_pruned(pruned);
        let until = started + req.yield_time;
        let outcome = self
            .wait_with_progress(&session, until, req.wait_for.as_ref(), ctx)
            .await;
        let reply = self
            .reply(id, &session, outcome, req.max_output_tokens, started)
            .await;
        self.log(
            &req,
            started,
            (reply.state != ReplyState::Exited).then_some(id),
            state_name(reply.state),
            reply.exit_code,
            reply.original_token_count * 4,
            reply.truncated,
        );
        Ok(reply_result(&reply))
    }

    /// The plan of an MCP request, a person asked where one must approve.
    async fn plan(
        &self,
        request: &Request,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Plan, Rejection> {
        approval::plan_with_person(self.inner.dispatcher.planner(), request, &ctx.peer).await
    }

    fn kill_pruned(&self, pruned: Vec<(u64, Arc<Session>)>) {
        for (id, session) in pruned {
            let max = self.client.max_sessions();
            let how = format!(
                "was killed to make room (at most {max} sessions; exited and least recently used ones go first)"
            );
            {
                let owner = self.client.id();
                let mut table = self.table();
                table.remember(owner, id, how.clone());
                table.note(owner, format!("session {id} ({}) {how}", session.command));
            }
            tokio::spawn(async move {
                session.exec.terminate().await;
            });
        }
    }

    async fn wait_with_progress(
        &self,
        session: &Session,
        until: Instant,
        wait_for: Option<&regex::Regex>,
        ctx: &RequestContext<RoleServer>,
    ) -> WaitOutcome {
        let token = ctx.meta.get_progress_token();
        let peer = ctx.peer.clone();
        let started = Instant::now();
        let mut last_sent = started;
        let total = until.saturating_duration_since(started).as_secs_f64();
        session.touch();
        let outcome = session
            .wait(until, wait_for, &ctx.ct, || {
                let Some(token) = &token else { return };
                if last_sent.elapsed() < PROGRESS_EVERY {
                    return;
                }
                last_sent = Instant::now();
                let elapsed = started.elapsed().as_secs_f64();
                let note = ProgressNotificationParam::new(token.clone(), elapsed.floor())
                    .with_total(total.ceil())
                    .with_message(format!("waited {elapsed:.0}s for the command"));
                let peer = peer.clone();
                tokio::spawn(async move {
                    let _ = peer.notify_progress(note).await;
                });
            })
            .await;
        session.touch();
        outcome
    }

    /// Builds the reply after a wait: output not returned before, and, when
    /// the command is over, its exit code (the session then ends).
    async fn reply(
        &self,
        id: u64,
        session: &Session,
        outcome: WaitOutcome,
        max_output_tokens: usize,
        started: Instant,
    ) -> Reply {
        if outcome == WaitOutcome::Cancelled {
            return cancelled_reply(id, session, started);
        }
        let exit = if outcome == WaitOutcome::Exited || session.exec.exit_info().is_some() {
            // Whatever the command left behind dies now; its output is drained.
            session.exec.terminate().await;
            session.exec.exit_info()
        } else {
            None
        };
        let rendered = session.exec.take_output(&RenderOptions {
            max_output_tokens,
            keep_color: false,
        });
        let state = match &exit {
            Some(_) => ReplyState::Exited,
            None => outcome.reply_state(),
        };
        if let Some(exit) = &exit {
            self.count_end(session, exit);
        }
        let exit_code = exit.as_ref().map(session::exit_code_of);
        if let Some(code) = exit_code {
            self.table().end(id, format!("ended with code {code}"));
        }
        let notes = self.table().take_notes(self.client.id());
        Reply {
            wall_time_seconds: Reply::wall_time(started.elapsed()),
            exit_code,
            session_id: exit_code.is_none().then_some(id),
            state,
            original_token_count: rendered.original_token_count,
            full_output_path: full_output_path(&session.exec, &rendered),
            output: rendered.text,
            truncated: rendered.truncated,
            sandbox: session.attestation(),
            notes,
        }
    }

    async fn write_stdin(&self, args: JsonArgs, ctx: &RequestContext<RoleServer>) -> ToolResult {
        let started = Instant::now();
        let p: params::WriteStdinParams = parse(args)?;
        let req: PollRequest = params::poll_request(p)?;
        let id = req.session_id;
        let session = self.live_session(id, !req.chars.is_empty())?;
        let mut write_note = None;
        if !req.chars.is_empty() {
            if session.exec.exit_info().is_some() {
                write_note = Some(format!(
                    "nothing was written: the process of session {id} had already exited"
                ));
            } else if !session.tty {
                return Err(ToolFailure::refused(format!(
                    "session {id} runs on pipes and its stdin is closed, so nothing can be typed into it; start the command with exec_command and tty: true to write to it"
                )));
            } else {
                session.exec.write_stdin(req.chars.as_bytes())?;
            }
        }
        let until = started + req.yield_time;
        let outcome = self
            .wait_with_progress(&session, until, req.wait_for.as_ref(), ctx)
            .await;
        let mut reply = self
            .reply(id, &session, outcome, req.max_output_tokens, started)
            .await;
        reply.notes.extend(write_note);
        let argv = self.redact_all(std::slice::from_ref(&session.command));
        logging::execution(&ExecutionEvent {
            tool: tools::WRITE_STDIN,
            argv: &argv,
            cwd: &self.inner.config.root,
            duration: started.elapsed(),
            session_id: Some(id),
            state: state_name(reply.state),
            exit_code: reply.exit_code,
            bytes_out: reply.original_token_count * 4,
            truncated: reply.truncated,
        });
        Ok(reply_result(&reply))
    }

    /// The live session `id`, or the one-line answer saying what became of it.
    fn live_session(&self, id: u64, writing: bool) -> Result<Arc<Session>, ToolFailure> {
        let nothing_written = if writing { "; nothing was written" } else { "" };
        match self.table().get(self.client.id(), id) {
            Lookup::Live(s) => Ok(s),
            Lookup::Ended(how) => Err(ToolFailure::refused(format!(
                "session {id} {how}{nothing_written}"
            ))),
            Lookup::Unknown => Err(ToolFailure::refused(format!(
                "no session {id}{nothing_written}; list_sessions shows the running ones"
            ))),
        }
    }

    async fn kill_session(&self, args: JsonArgs) -> ToolResult {
        let started = Instant::now();
        let p: params::KillSessionParams = parse(args)?;
        let id = p.session_id;
        let session = match self.table().get(self.client.id(), id) {
            Lookup::Live(s) => s,
            Lookup::Ended(how) => {
                return Ok(text_result(format!("session {id} already {how}")));
            }
            Lookup::Unknown => return Err(ToolFailure::refused(format!("no session {id}"))),
        };
        let report = session.exec.terminate().await;
        let exit = session.exec.exit_info();
        if let Some(exit) = &exit {
            self.count_end(&session, exit);
        }
        let exit_code = exit.as_ref().map(session::exit_code_of);
        let how = match exit_code {
            Some(code) => format!("was killed (exit code {code})"),
            None => "was killed".to_owned(),
        };
        self.table().end(id, how.clone());
        let rendered = session.exec.take_output(&RenderOptions {
            max_output_tokens: params::MAX_OUTPUT_TOKENS_DEFAULT,
            keep_color: false,
        });
        let mut notes = self.table().take_notes(self.client.id());
        if !report.survivors.is_empty() {
            notes.push(format!(
                "these processes could not be killed: {:?}",
                report.survivors
            ));
        }
        let reply = Reply {
            wall_time_seconds: Reply::wall_time(started.elapsed()),
            exit_code,
            session_id: None,
            state: ReplyState::Exited,
            original_token_count: rendered.original_token_count,
            full_output_path: full_output_path(&session.exec, &rendered),
            output: rendered.text,
            truncated: rendered.truncated,
            sandbox: session.attestation(),
            notes,
        };
        let argv = self.redact_all(std::slice::from_ref(&session.command));
        logging::execution(&ExecutionEvent {
            tool: tools::KILL_SESSION,
            argv: &argv,
            cwd: &self.inner.config.root,
            duration: started.elapsed(),
            session_id: Some(id),
            state: "killed",
            exit_code,
            bytes_out: reply.original_token_count * 4,
            truncated: reply.truncated,
        });
        let mut result = reply_result(&reply);
        result
            .content
            .insert(0, ContentBlock::text(format!("session {id} {how}")));
        Ok(result)
    }

    async fn list_sessions(&self, args: JsonArgs) -> ToolResult {
        let _: params::NoParams = parse(args)?;
        let sessions = self.table().live_of(self.client.id());
        let rows = tokio::task::spawn_blocking(move || session_rows(&sessions))
            .await
            .unwrap_or_default();
        let text = if rows.is_empty() {
            "no sessions".to_owned()
        } else {
            rows.iter()
                .map(|r| {
                    format!(
                        "session {} [{}] pid {} age {:.0}s idle {:.0}s pending {} bytes ports {:?}: {}",
                        r.session_id, state_label(r.state), r.pid, r.age_seconds, r.idle_seconds, r.bytes_pending, r.ports, r.command
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(serde_json::json!({ "sessions": rows }));
        Ok(result)
    }

    async fn apply_patch(&self, args: JsonArgs, ctx: &RequestContext<RoleServer>) -> ToolResult {
        let started = Instant::now();
        let p: params::ApplyPatchParams = parse(args)?;
        let mut request = Request::new(Target::ApplyPatch { input: p.input });
        request.workdir = p.workdir.filter(|w| !w.is_empty()).map(PathBuf::from);
        let plan = self.plan(&request, ctx).await.map_err(|rejection| {
            ToolFailure::refused(format!("{} ({})", rejection.message, rejection.kind))
        })?;
        let workdir = plan.spec.cwd.clone();
        let exec = Execution::spawn(plan.spec)?;
        let done = exec.finish(&plan.render).await;
        drop(plan.report);
        let code = session::exit_code_of(&done.exit);
        self.inner.metrics.record_outcome(
            tools::APPLY_PATCH,
            done.exit.status(),
            started.elapsed(),
        );
        logging::execution(&ExecutionEvent {
            tool: tools::APPLY_PATCH,
            argv: &["apply_patch".to_owned()],
            cwd: &workdir,
            duration: started.elapsed(),
            session_id: None,
            state: "exited",
            exit_code: Some(code),
            bytes_out: done.stdout.original_bytes + done.stderr.original_bytes,
            truncated: done.truncated,
        });
        if code == 0 {
            Ok(text_result(done.stdout.text))
        } else {
            let mut message = done.stderr.text.trim().to_owned();
            if message.is_empty() {
                message = done.stdout.text.trim().to_owned();
            }
            Err(ToolFailure {
                message: format!("apply_patch failed (exit {code}): {message}"),
                counted_as: None,
            })
        }
    }

    /// `argv` with the registry's secrets replaced, for the log.
    fn redact_all(&self, argv: &[String]) -> Vec<String> {
        argv.iter()
            .map(|a| self.inner.dispatcher.redact(a))
            .collect()
    }

    #[expect(clippy::too_many_arguments, reason = "one flat log event")]
    fn log(
        &self,
        req: &ExecRequest,
        started: Instant,
        session_id: Option<u64>,
        state: &str,
        exit_code: Option<i32>,
        bytes_out: u64,
        truncated: bool,
    ) {
        let argv = self.redact_all(&req.argv);
        logging::execution(&ExecutionEvent {
            tool: tools::EXEC_COMMAND,
            argv: &argv,
            cwd: &req.workdir,
            duration: started.elapsed(),
            session_id,
            state,
            exit_code,
            bytes_out,
            truncated,
        });
    }
}

type JsonArgs = Option<serde_json::Map<String, serde_json::Value>>;

/// Sets the gauges of live sessions, in all and by client, and of clients.
fn publish_gauges(inner: &Inner) {
    let (total, by_client) = {
        let table = inner
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (table.len(), table.count_by_owner())
    };
    let metrics = &inner.metrics;
    metrics.set_live_sessions(total);
    metrics.set_clients(
        inner
            .remote_clients
            .load(std::sync::atomic::Ordering::Relaxed),
        by_client
            .into_iter()
            .map(|(client, n)| (client.to_string(), n))
            .collect(),
    );
}

/// The reply to a call cancelled mid-wait (by the client, or because its
/// connection dropped): nothing is read, so the next poll loses nothing.
fn cancelled_reply(id: u64, session: &Session, started: Instant) -> Reply {
    Reply {
        wall_time_seconds: Reply::wall_time(started.elapsed()),
        exit_code: None,
        session_id: Some(id),
        state: ReplyState::Running,
        original_token_count: 0,
        full_output_path: None,
        output: String::new(),
        truncated: false,
        sandbox: session.attestation(),
        notes: vec![format!(
            "the call was cancelled: nothing was read and session {id} goes on; write_stdin polls it"
        )],
    }
}

fn parse<T: DeserializeOwned>(args: JsonArgs) -> Result<T, ToolFailure> {
    let value = serde_json::Value::Object(args.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| ToolFailure::refused(format!("bad arguments: {e}")))
}

fn reply_result(reply: &Reply) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(reply.to_text())]);
    result.structured_content = Some(reply.to_structured());
    result
}

fn text_result(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn state_name(state: ReplyState) -> &'static str {
    match state {
        ReplyState::Exited => "exited",
        ReplyState::Running => "running",
        ReplyState::Matched => "matched",
        ReplyState::AwaitingInput => "awaiting_input",
    }
}

fn state_label(state: session::SessionState) -> &'static str {
    match state {
        session::SessionState::Active => "active",
        session::SessionState::Idle => "idle",
        session::SessionState::Exited => "exited",
    }
}

/// One row of `list_sessions`.
#[derive(Debug, Clone, serde::Serialize)]
struct SessionRow {
    session_id: u64,
    command: String,
    state: session::SessionState,
    tty: bool,
    pid: u32,
    age_seconds: f64,
    idle_seconds: f64,
    bytes_pending: u64,
    ports: Vec<u16>,
}

fn session_rows(sessions: &[(u64, Arc<Session>)]) -> Vec<SessionRow> {
    let stats: Vec<_> = crate::exec::procfs::all_pids()
        .into_iter()
        .filter_map(crate::exec::procfs::stat)
        .collect();
    sessions
        .iter()
        .map(|(id, s)| {
            let pid = s.exec.pid();
            let tagged: std::collections::BTreeSet<i32> = crate::exec::procfs::tagged_pids(
                crate::exec::SESSION_VAR,
                &s.exec.spec().session_tag,
            )
            .into_iter()
            .collect();
            let family = procfs::family(&stats, pid as i32, &tagged);
            let last = s
                .exec
                .last_output_at()
                .unwrap_or(s.started)
                .max(s.last_call());
            SessionRow {
                session_id: *id,
                command: s.command.clone(),
                state: s.state(),
                tty: s.tty,
                pid,
                age_seconds: round1(s.started.elapsed()),
                idle_seconds: round1(last.elapsed()),
                bytes_pending: s.exec.pending_bytes(),
                ports: procfs::listening_ports(&family),
            }
        })
        .collect()
}

/// The spill file with the whole output, named only when a reply was folded.
fn full_output_path(exec: &Execution, rendered: &Rendered) -> Option<String> {
    if !rendered.truncated {
        return None;
    }
    exec.spill_path().map(|p| p.display().to_string())
}

fn round1(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

const INSTRUCTIONS: &str = "agent-reach runs commands for you. exec_command runs a shell command line and returns when it ends or its yield runs out (then it goes on as a session you poll or type into with write_stdin). Run servers in the foreground with wait_for; use tty for anything interactive. apply_patch edits files all or nothing.";

impl ServerHandler for AgentReachServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(
            "agent-reach",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(INSTRUCTIONS)
    }

    /// Over HTTP only the revisions with `initialize` (and so with
    /// `Mcp-Session-Id`): a session is who owns the processes, and the
    /// sessionless 2026-07-28 lifecycle would leave a client none.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.client.is_remote() {
            ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .filter(|v| v.has_initialize())
                .cloned()
                .collect::<Vec<_>>()
                .into()
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let metrics = Resource::new(METRICS_URI, "metrics")
            .with_title("agent-reach metrics")
            .with_description(
                "Per tool: calls, runs, successes, failures, timeouts, errors, busy, rejected and cached answers, and a latency histogram; and the live sessions.",
            )
            .with_mime_type("application/json");
        Ok(ListResourcesResult::with_all_items(vec![metrics]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if request.uri != METRICS_URI {
            return Err(McpError::resource_not_found(
                format!(
                    "no resource {:?}; the one resource is {METRICS_URI}",
                    request.uri
                ),
                None,
            ));
        }
        self.update_sessions_gauge();
        let json = self.inner.metrics.to_json().to_string();
        let contents = ResourceContents::text(json, METRICS_URI).with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        let name = request.name.to_string();
        let args = request.arguments;
        let builtin = tools::BUILTIN_NAMES.contains(&name.as_str());
        if !self.inner.raw_commands && tools::SHELL_TOOLS.contains(&name.as_str()) {
            self.inner.metrics.record_call(&name);
            self.inner
                .metrics
                .record_outcome(&name, Status::Rejected, started.elapsed());
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "{name} is not available: raw commands are disabled by the operator's policy (raw_commands_disabled); use a registry tool (the operator can set allow_raw_commands = true in the registry)"
            ))])
            .into());
        }
        let result = match name.as_str() {
            tools::EXEC_COMMAND => self.exec_command(args, &context).await,
            tools::WRITE_STDIN => self.write_stdin(args, &context).await,
            tools::LIST_SESSIONS => self.list_sessions(args).await,
            tools::KILL_SESSION => self.kill_session(args).await,
            tools::APPLY_PATCH => self.apply_patch(args, &context).await,
            other if self.inner.registry.serves(other) => {
                Ok(self.inner.registry.call(other, args, &context.peer).await)
            }
            other => {
                return Err(McpError::invalid_params(
                    format!("no tool named {other:?}"),
                    None,
                ));
            }
        };
        // The dispatcher counts the registry's tools itself.
        if builtin {
            let metrics = &self.inner.metrics;
            metrics.record_call(&name);
            if let Err(ToolFailure {
                counted_as: Some(status),
                ..
            }) = &result
            {
                metrics.record_outcome(&name, *status, started.elapsed());
            }
        }
        self.update_sessions_gauge();
        Ok(match result {
            Ok(r) => r,
            Err(failure) => CallToolResult::error(vec![ContentBlock::text(failure.message)]),
        }
        .into())
    }
}
