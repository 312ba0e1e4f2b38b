//! What a door is handed when its listener starts: the broker (every plan,
//! process and file goes through it), the MCP server (for MCP over HTTP),
//! the gate's settings for its listener, and the shutdown signal. Never
//! the dispatcher, the planner or the workspace: those are the broker's.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::mcp::server::AgentReachServer;
use crate::broker::Broker;
use crate::gate::auth::Auth;

/// What every door of one `serve` process is handed.
#[derive(Clone)]
pub(crate) struct DoorContext {
    /// What every door plans, starts and reaches files through.
    pub(crate) broker: Broker,
    /// The MCP tools and their session table.
    pub(crate) server: AgentReachServer,
    /// The token every request must carry, or none (`--no-auth`, loopback).
    pub(crate) auth: Auth,
    /// Extra `Host` header values the HTTP listeners accept (`--allowed-host`).
    pub(crate) allowed_hosts: Vec<String>,
    /// `--client-idle-timeout`.
    pub(crate) client_idle_timeout: Duration,
    /// `--max-sessions-per-client`.
    pub(crate) max_sessions_per_client: usize,
    /// `--max-clients`: MCP client sessions over HTTP at once.
    pub(crate) max_clients: usize,
    /// The connection bounds of every listener (`--max-connections`, the
    /// header and idle timeouts).
    pub(crate) limits: crate::gate::Limits,
    /// The sandbox id the `daytona` listener answers to (`--sandbox-id`).
    pub(crate) sandbox_id: String,
    /// The variables `/v1/metadata` shows (`--metadata-env`).
    pub(crate) metadata_env: Vec<String>,
    /// Cancelled once, when the server stops (signal): every listener stops
    /// accepting and its sessions are killed.
    pub(crate) shutdown: CancellationToken,
}

/// Serves a door's `app` on `listener` behind the gate with its `rules`
/// (the listener's hosts, the token, the connection bounds) until
/// `shared.shutdown`; returns once every connection has ended.
pub(crate) async fn serve_door(
    listener: TcpListener,
    shared: &DoorContext,
    rules: crate::gate::DoorRules,
    app: axum::Router,
) -> Result<(), String> {
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let gate = crate::gate::Gate::new(local, &shared.allowed_hosts, shared.auth.clone(), rules);
    crate::gate::serve(
        listener,
        gate,
        app,
        shared.limits.clone(),
        shared.shutdown.clone(),
    )
    .await;
    Ok(())
}
