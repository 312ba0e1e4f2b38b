//! The network doors of `agent-reach serve --listen PROTOCOL=ADDR`: what each
//! listener speaks ([`Protocol`]), where ([`ListenSpec`]), who may talk to it
//! ([`auth`]), and the one loop that binds them all and stops them together.
//! Every listener is served through the gate (`crate::doors::serve_door`).
//!
//! Every listener of one process is handed one [`Shared`]
//! (`crate::doors::DoorContext`): the broker, the MCP server, the gate's
//! settings and the shutdown signal — never the dispatcher. A protocol
//! module is an adapter on the broker.

pub(crate) mod addr;
pub(crate) mod args;
pub(crate) mod auth;

use tokio::net::TcpListener;

pub(crate) use addr::{ListenSpec, Protocol};
pub(crate) use auth::Auth;

pub(crate) use crate::doors::DoorContext as Shared;

/// `--max-sessions-per-client` when not given.
pub(crate) const DEFAULT_MAX_SESSIONS_PER_CLIENT: usize = 64;

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
        Protocol::CodexExec => crate::doors::codex_exec::serve(listener, shared).await,
        Protocol::Daytona => crate::doors::daytona::serve(listener, shared).await,
    }
}
