//! The MCP server's shared state: the session table every client shares,
//! the tool list, the dispatcher and the metrics, and what the tools'
//! handlers have in common (argument parsing, failures, replies, logs).
//!
//! Every call is parsed into a validated request first ([`super::tool_params`]);
//! a bad argument or a failed start is a tool error with one clear line,
//! never a crash of the server. The tools themselves are in
//! [`super::tools`], one module each; rmcp's [`rmcp::ServerHandler`] glue is
//! in [`handler`], the waits and their replies in [`waiting`].

mod handler;
mod waiting;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, Tool};
use rmcp::service::RequestContext;
use serde::de::DeserializeOwned;

use super::approval;
use super::client::ClientSeat;
use super::reply::{LeftOutHighlight, Reply, ReplyState};
use super::session::CommandSession;
use super::table::SessionTable;
use super::tools::{self, registry::RegistryTools};
use crate::broker::{Broker, Planned};
use crate::exec::{ExitInfo, Rendered};
use crate::plan::{Rejection, Request};
use crate::registry::Metrics;
use crate::result::Status;

/// What the server needs from its start: where commands run, with what.
#[derive(Debug, Clone)]
pub(crate) struct ServeConfig {
    /// `--root`: the default working directory.
    pub(crate) root: PathBuf,
    /// Our environment (`$SHELL` for `exec_command`).
    pub(crate) env: BTreeMap<OsString, OsString>,
    /// `--max-sessions`.
    pub(crate) max_sessions: usize,
    /// The one session table of every door, which the MCP sessions count in.
    pub(crate) sessions: crate::broker::SessionLedger,
}

/// The MCP server; cheap to clone. Every client shares one table; each
/// handler serves one client ([`ClientSeat`]) and sees only its sessions.
#[derive(Clone)]
pub(crate) struct AgentReachServer {
    pub(super) inner: Arc<Inner>,
    pub(super) client: Arc<ClientSeat>,
}

pub(super) struct Inner {
    pub(super) config: ServeConfig,
    pub(super) table: Mutex<SessionTable<CommandSession>>,
    /// The tools listed now: rebuilt when the registry is reloaded.
    pub(super) tools: std::sync::RwLock<Arc<ToolSet>>,
    /// Every client that finished `initialize` (told when the tools change).
    pub(super) peers: Mutex<Vec<rmcp::service::Peer<RoleServer>>>,
    /// What every tool plans, starts and dispatches through.
    pub(super) broker: Broker,
    pub(super) metrics: Arc<Metrics>,
    /// Clients over HTTP whose seat is not dropped yet.
    pub(super) remote_clients: std::sync::atomic::AtomicUsize,
}

/// The tools served, as the registry loaded now and the policy say.
pub(super) struct ToolSet {
    /// Every tool listed: the built-ins, then the registry's.
    pub(super) tools: Vec<Tool>,
    /// The registry's tools.
    pub(super) registry: RegistryTools,
    /// The shell tools are served (the policy's `allow_raw_commands`).
    pub(super) raw_commands: bool,
}

impl ToolSet {
    /// The built-in tools and the registry's; the shell tools only where
    /// the policy allows raw commands.
    fn build(broker: &Broker) -> Self {
        let raw_commands = broker.allows_raw_commands();
        let mut all_tools: Vec<Tool> = tools::builtin_tools()
            .into_iter()
            .filter(|t| raw_commands || !tools::RAW_TOOLS.contains(&t.name.as_ref()))
            .collect();
        let builtin: Vec<&str> = tools::BUILTIN_NAMES.to_vec();
        let registry = RegistryTools::new(broker.clone(), &builtin);
        all_tools.extend(registry.tools().iter().cloned());
        Self {
            tools: all_tools,
            registry,
            raw_commands,
        }
    }
}

/// The tool-level failure of a call: shown to the model as one line.
pub(super) struct ToolFailure {
    pub(super) message: String,
    /// How the metrics count it: a refusal, or `None` when the handler
    /// already counted the run that failed.
    pub(super) counted_as: Option<Status>,
}

impl ToolFailure {
    /// A call refused: bad arguments, no such session, a command that
    /// cannot start.
    pub(super) fn refused(message: String) -> Self {
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

pub(super) type ToolResult = Result<CallToolResult, ToolFailure>;

impl AgentReachServer {
    /// A server with the built-in tools and the registry's. The shell
    /// tools are listed only where the policy allows raw commands. Every
    /// tool is counted in the dispatcher's [`Metrics`].
    pub(crate) fn new(config: ServeConfig, broker: Broker) -> Self {
        let metrics = broker.metrics();
        let table = Mutex::new(SessionTable::new(config.max_sessions));
        let stdio = Arc::new(ClientSeat::stdio(config.max_sessions));
        let tools = std::sync::RwLock::new(Arc::new(ToolSet::build(&broker)));
        Self {
            inner: Arc::new(Inner {
                config,
                table,
                tools,
                peers: Mutex::new(Vec::new()),
                broker,
                metrics,
                remote_clients: Default::default(),
            }),
            client: stdio,
        }
    }

    /// The tools served now.
    pub(super) fn toolset(&self) -> Arc<ToolSet> {
        self.inner
            .tools
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Remembers a client that finished `initialize`, to tell it when the
    /// tools change.
    pub(super) fn remember_peer(&self, peer: rmcp::service::Peer<RoleServer>) {
        let mut peers = crate::sync::lock(&self.inner.peers);
        peers.retain(|p| !p.is_transport_closed());
        peers.push(peer);
    }

    /// The registry was reloaded: the tools are listed anew, and every
    /// connected client gets `notifications/tools/list_changed`.
    pub(crate) async fn tools_changed(&self) {
        let next = Arc::new(ToolSet::build(&self.inner.broker));
        *self
            .inner
            .tools
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        let peers: Vec<_> = {
            let mut peers = crate::sync::lock(&self.inner.peers);
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            if let Err(e) = peer.notify_tool_list_changed().await {
                tracing::debug!(error = %e, "a client was not told the tools changed");
            }
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

    pub(super) fn table(&self) -> MutexGuard<'_, SessionTable<CommandSession>> {
        // A panic while holding the lock leaves consistent data behind: the
        // table's operations do not unwind half-way.
        self.inner
            .table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Kills every session (escapees included) and waits for them, bounded
    /// by the engine's grace and drain. Called on stdin EOF and signals.
    pub(crate) async fn shutdown(&self) {
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

    /// The metrics every tool is counted in.
    pub(crate) fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    pub(super) fn update_sessions_gauge(&self) {
        publish_gauges(&self.inner);
    }

    /// Counts the end of a session's command once, as a run of
    /// `exec_command` lasting from its start to now.
    pub(super) fn count_end(&self, session: &CommandSession, exit: &ExitInfo) {
        if session.first_to_count_end() {
            self.inner.metrics.record_outcome(
                tools::EXEC_COMMAND,
                exit.status(),
                session.started.elapsed(),
            );
        }
    }

    /// The plan of an MCP request, a person asked where one must approve.
    pub(super) async fn plan(
        &self,
        request: &Request,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Planned, Rejection> {
        self.inner
            .broker
            .plan_asking(
                &self.client.caller(),
                request,
                &approval::PeerApprover(&ctx.peer),
            )
            .await
    }

    pub(super) fn kill_pruned(&self, pruned: Vec<(u64, Arc<CommandSession>)>) {
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
            session.leave_seat();
            tokio::spawn(async move {
                session.exec.terminate().await;
            });
        }
    }

    /// `argv` with the registry's secrets replaced, for the log.
    pub(super) fn redact_all(&self, argv: &[String]) -> Vec<String> {
        argv.iter().map(|a| self.inner.broker.redact(a)).collect()
    }
}

pub(super) type JsonArgs = Option<serde_json::Map<String, serde_json::Value>>;

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

pub(super) fn parse<T: DeserializeOwned>(args: JsonArgs) -> Result<T, ToolFailure> {
    let value = serde_json::Value::Object(args.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| ToolFailure::refused(format!("bad arguments: {e}")))
}

pub(super) fn reply_result(reply: &Reply) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(reply.to_text())]);
    result.structured_content = Some(reply.to_structured());
    result
}

pub(super) fn text_result(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

pub(super) fn state_name(state: ReplyState) -> &'static str {
    match state {
        ReplyState::Exited => "exited",
        ReplyState::Running => "running",
        ReplyState::Matched => "matched",
        ReplyState::AwaitingInput => "awaiting_input",
    }
}

/// The reply showing `rendered`, a window of `session`'s output; the spill
/// file with the whole output is named only when the window was folded.
pub(super) fn window_reply(
    session: &CommandSession,
    rendered: Rendered,
    exit_code: Option<i32>,
    session_id: Option<u64>,
    state: ReplyState,
    notes: Vec<String>,
    started: std::time::Instant,
) -> Reply {
    let full_output_path = if rendered.truncated {
        session.exec.spill_path().map(|p| p.display().to_string())
    } else {
        None
    };
    let highlights = LeftOutHighlight::of(&rendered, exit_code);
    Reply {
        wall_time_seconds: Reply::wall_time(started.elapsed()),
        exit_code,
        session_id,
        state,
        original_token_count: rendered.original_token_count,
        full_output_path,
        output: rendered.text,
        truncated: rendered.truncated,
        sandbox: session.attestation(),
        notes,
        capped: Vec::new(),
        highlights,
    }
}
