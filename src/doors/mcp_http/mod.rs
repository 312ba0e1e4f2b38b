//! `serve --listen mcp=HOST:PORT`: the MCP tools over streamable HTTP.
//!
//! rmcp's [`StreamableHttpService`] speaks the transport at `/mcp` (sessions
//! by `Mcp-Session-Id`, `DELETE` to end one, SSE for progress, keep-alive
//! pings; a call answered at once goes back as JSON, [`json_answers`]);
//! this module mounts it under axum behind the gate ([`RULES`]: the bearer
//! token, JSON-RPC error bodies), gives it the `Host`/`Origin` lists of
//! [`crate::gate::hosts`], and answers `GET /healthz` without a token. Every MCP session gets its own handler from the factory:
//! a clone of the one server (one table, registry, scheduler, metrics) with
//! a client seat of its own, so it sees only the sessions it started and
//! they die with it (`DELETE`, `--client-idle-timeout`, shutdown).

mod json_answers;
pub(crate) mod router;
pub(crate) mod sessions;

use tokio::net::TcpListener;

use crate::doors::DoorContext;
use router::{Endpoint, router};
use router::{MCP_PATH, RULES};

/// Serves MCP on `listener` until `shared.shutdown` is cancelled.
pub(crate) async fn serve(listener: TcpListener, shared: DoorContext) -> Result<(), String> {
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?;
    let endpoint = Endpoint {
        local,
        allowed_hosts: &shared.allowed_hosts,
        client_idle_timeout: shared.client_idle_timeout,
        max_clients: shared.max_clients,
        shutdown: &shared.shutdown,
    };
    let server = shared.server.clone();
    let per_client = shared.max_sessions_per_client;
    let app = router(&endpoint, move || server.for_client(per_client));
    tracing::info!(url = %format!("http://{local}{MCP_PATH}"), "serving MCP over streamable HTTP");
    crate::doors::serve_door(listener, &shared, RULES, app).await
}
