//! `agent-reach serve --listen mcp=HOST:PORT` on Windows: the same MCP
//! server over streamable HTTP, behind the same gate as on Linux (the
//! token, `Host` and `Origin`, content types, body limits, header and idle
//! timeouts, `--max-connections`), with the same endpoint
//! ([`crate::doors::mcp_http::router`]). Each MCP client gets its own
//! [`WindowsServer`]: its sessions are its own and die with its session
//! (`DELETE`, `--client-idle-timeout`, `--max-clients`, the server's end).
//!
//! The other protocols are Linux's: they need the broker, its session
//! table and scheduler on the Linux engine (SWE-ReX's sessions a Unix
//! shell too), so naming one here is a usage error that says so.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{ServeArgs, Shared, WindowsServer};
use crate::context::ProcessContext;
use crate::doors::mcp_http::router::{Endpoint, MCP_PATH, RULES, router};
use crate::exit_code;
use crate::gate::{Gate, Limits};
use crate::serve::listen::Protocol;
use crate::serve::listen::auth::Auth;

/// How long the listeners have to close their connections at the end.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// What the listeners were checked to need before anything starts.
#[derive(Debug)]
pub(super) struct Listening {
    auth: Auth,
    limits: Limits,
}

impl Listening {
    /// `None` without `--listen`; else the token and the connection bounds,
    /// or the exit code and message of what cannot be served.
    pub(super) fn check(
        args: &ServeArgs,
        ctx: &ProcessContext,
    ) -> Result<Option<Self>, (i32, String)> {
        if args.listeners.listen.is_empty() {
            return Ok(None);
        }
        if let Some(spec) = args
            .listeners
            .listen
            .iter()
            .find(|s| s.protocol != Protocol::Mcp)
        {
            return Err((
                exit_code::USAGE,
                format!(
                    "--listen {}: not available on Windows, which serves mcp only (the other listeners need Linux's engine and session machinery)",
                    spec.protocol
                ),
            ));
        }
        let auth = args
            .listeners
            .auth(ctx)
            .map_err(|err| (exit_code::USAGE, err.to_string()))?;
        let limits = args.listeners.limits(ctx);
        Ok(Some(Self { auth, limits }))
    }
}

/// Binds every listener (a port in use fails the start), then serves them
/// until Ctrl-C; every client's processes end with it (and if the server
/// is killed instead, its job objects end them: they are kill-on-close).
pub(super) async fn serve(args: &ServeArgs, listening: Listening, shared: Arc<Shared>) -> i32 {
    let mut bound = Vec::with_capacity(args.listeners.listen.len());
    for spec in &args.listeners.listen {
        match TcpListener::bind(spec.addr).await {
            Ok(listener) => bound.push(listener),
            Err(err) => {
                eprintln!(
                    "agent-reach serve: cannot listen on {} for {}: {err}",
                    spec.addr, spec.protocol
                );
                return exit_code::FAILURE;
            }
        }
    }
    let shutdown = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    for listener in bound {
        let local = match listener.local_addr() {
            Ok(local) => local,
            Err(err) => {
                eprintln!("agent-reach serve: cannot read the listening address: {err}");
                return exit_code::FAILURE;
            }
        };
        let endpoint = Endpoint {
            local,
            allowed_hosts: &args.listeners.allowed_host,
            client_idle_timeout: Duration::from_secs(args.listeners.client_idle_timeout),
            max_clients: args.listeners.max_clients,
            shutdown: &shutdown,
        };
        let for_clients = Arc::clone(&shared);
        let app = router(&endpoint, move || {
            WindowsServer::new(Arc::clone(&for_clients))
        });
        let gate = Gate::new(
            local,
            &args.listeners.allowed_host,
            listening.auth.clone(),
            RULES,
        );
        eprintln!("agent-reach serve: MCP at http://{local}{MCP_PATH}");
        if !listening.auth.is_required() {
            eprintln!(
                "agent-reach serve: warning: mcp on {local} has no token: any program on this machine can drive it"
            );
        }
        tasks.spawn(crate::gate::serve(
            listener,
            gate,
            app,
            listening.limits.clone(),
            shutdown.clone(),
        ));
    }
    match tokio::signal::ctrl_c().await {
        Ok(()) => eprintln!("agent-reach serve: stopping"),
        Err(err) => eprintln!("agent-reach serve: cannot wait for Ctrl-C ({err}); stopping"),
    }
    shutdown.cancel();
    let _ = tokio::time::timeout(STOP_WAIT, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    exit_code::SUCCESS
}
