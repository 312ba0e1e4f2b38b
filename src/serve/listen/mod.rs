//! The network doors of `agent-reach serve --listen PROTOCOL=ADDR`: what each
//! listener speaks ([`Protocol`]), where ([`ListenSpec`]), who may talk to it
//! ([`auth`]), and the one loop that binds them all and stops them together.
//! Every listener is served through the gate ([`serve_door`]).
//!
//! Every listener of one process shares one [`Shared`]: the dispatcher (the
//! registry, the operator's policy, the plan stage, the scheduler and the
//! metrics), the MCP server's session table, the token, and the shutdown
//! signal. A protocol module is an adapter: it turns its requests into plan
//! requests and its replies from the engine's results; it never spawns.

pub(crate) mod addr;
pub(crate) mod auth;

use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub(crate) use addr::{ListenSpec, Protocol};
pub(crate) use auth::Auth;

use crate::broker::Broker;
use crate::doors::mcp::server::AgentReachServer;

/// `--client-idle-timeout` when not given: an MCP client silent this long
/// loses its sessions.
pub(crate) const DEFAULT_CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(1800);
/// `--max-clients` when not given: MCP client sessions over HTTP at once;
/// past it the one idle longest is ended.
pub(crate) const DEFAULT_MAX_CLIENTS: usize = 256;
/// `--max-sessions-per-client` when not given.
pub(crate) const DEFAULT_MAX_SESSIONS_PER_CLIENT: usize = 64;
pub(crate) use crate::gate::MAX_BODY_BYTES;

/// What every listener of one `serve` process shares.
#[derive(Clone)]
pub(crate) struct Shared {
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
    /// Cancelled once, when the server stops (signal): every listener stops
    /// accepting and its sessions are killed.
    pub(crate) shutdown: CancellationToken,
}

/// Why a listener could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ListenError {
    #[error("cannot listen on {addr} for {protocol}: {source}")]
    Bind {
        protocol: Protocol,
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the {protocol} listener on {addr} failed: {message}")]
    Serve {
        protocol: Protocol,
        addr: std::net::SocketAddr,
        message: String,
    },
}

/// Serves a door's `app` on `listener` behind the gate with its `rules`
/// (the listener's hosts, the token, the connection bounds) until
/// `shared.shutdown`; returns once every connection has ended.
pub(crate) async fn serve_door(
    listener: TcpListener,
    shared: &Shared,
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

/// Binds every listener first (so a port in use fails the start before
/// anything is served), then serves them all until `shared.shutdown` is
/// cancelled or one of them fails.
pub(crate) async fn serve_all(specs: &[ListenSpec], shared: Shared) -> Result<(), ListenError> {
    let mut bound = Vec::with_capacity(specs.len());
    for spec in specs {
        let listener = TcpListener::bind(spec.addr)
            .await
            .map_err(|source| ListenError::Bind {
                protocol: spec.protocol,
                addr: spec.addr,
                source,
            })?;
        let local = listener.local_addr().unwrap_or(spec.addr);
        tracing::info!(protocol = %spec.protocol, addr = %local, "listening");
        if !shared.auth.is_required() {
            tracing::warn!(
                protocol = %spec.protocol,
                addr = %local,
                "no token: any program on this machine (any user) can drive this listener; give --token-file FILE or $AGENT_REACH_TOKEN"
            );
            eprintln!(
                "agent-reach serve: warning: {} on {local} has no token: any program on this machine can drive it",
                spec.protocol
            );
        }
        bound.push((spec.protocol, local, listener));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (protocol, addr, listener) in bound {
        let shared = shared.clone();
        tasks.spawn(async move {
            serve_one(protocol, listener, shared)
                .await
                .map_err(|message| ListenError::Serve {
                    protocol,
                    addr,
                    message,
                })
        });
    }
    let mut outcome = Ok(());
    while let Some(joined) = tasks.join_next().await {
        let result = joined.unwrap_or_else(|e| {
            Err(ListenError::Serve {
                protocol: Protocol::Mcp,
                addr: std::net::SocketAddr::from(([0, 0, 0, 0], 0)),
                message: format!("a listener task ended abnormally: {e}"),
            })
        });
        if let Err(err) = result {
            tracing::error!(error = %err, "listener failed; stopping every listener");
            shared.shutdown.cancel();
            if outcome.is_ok() {
                outcome = Err(err);
            }
        }
    }
    outcome
}

/// Serves one bound listener until shutdown; each protocol is its module.
async fn serve_one(
    protocol: Protocol,
    listener: TcpListener,
    shared: Shared,
) -> Result<(), String> {
    match protocol {
        Protocol::SandboxdRest => crate::doors::sandboxd_rest::serve(listener, shared).await,
        Protocol::PythonRuntime => crate::doors::python_runtime::serve(listener, shared).await,
        Protocol::SandboxdGrpc => crate::doors::sandboxd_grpc::serve(listener, shared).await,
        Protocol::Mcp => crate::doors::mcp_http::serve(listener, shared).await,
        Protocol::Swerex => crate::doors::swerex::serve(listener, shared).await,
        Protocol::Envd => crate::doors::envd::serve(listener, shared).await,
    }
}
