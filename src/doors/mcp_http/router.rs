//! The MCP endpoint over streamable HTTP, on every platform: rmcp's
//! [`StreamableHttpService`] at `/mcp` (sessions by `Mcp-Session-Id`,
//! `DELETE` to end one, SSE for progress, keep-alive pings; a call
//! answered at once goes back as JSON, `super::json_answers`), the
//! `Host`/`Origin` lists of [`crate::gate::hosts`], `GET /healthz`, and
//! what the gate holds the door to ([`RULES`]). Linux's listener
//! (`super::serve`) and Windows' give it their handlers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::sessions::Sessions;
use crate::gate::MAX_BODY_BYTES;
use crate::gate::{DoorRules, Refusal, hosts};

/// `--client-idle-timeout` when not given: an MCP client silent this long
/// loses its sessions.
pub(crate) const DEFAULT_CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(1800);
/// `--max-clients` when not given: MCP client sessions over HTTP at once;
/// past it the one idle longest is ended.
pub(crate) const DEFAULT_MAX_CLIENTS: usize = 256;

/// The path the MCP endpoint is served at.
pub(crate) const MCP_PATH: &str = "/mcp";
/// The path of the health check (no token).
pub(crate) const HEALTH_PATH: &str = "/healthz";
/// The largest JSON-RPC message read (an `apply_patch` of a big file fits).
pub(crate) const MCP_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
const _: () = assert!(MCP_MAX_BODY_BYTES <= MAX_BODY_BYTES);
/// How often an open SSE stream gets a comment, so proxies and clients
/// do not take a long poll for a dead connection.
pub(crate) const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What the gate holds MCP to: the bearer token but on `/healthz`, JSON
/// bodies of at most [`MCP_MAX_BODY_BYTES`], refusals as JSON-RPC errors.
pub(crate) const RULES: DoorRules = DoorRules {
    public: &[HEALTH_PATH],
    body_types: &["application/json"],
    body_limit: MCP_MAX_BODY_BYTES,
    reply: json_rpc_refusal,
    ..DoorRules::new("mcp")
};

/// The JSON-RPC error code of a request refused at the gate (the range
/// JSON-RPC leaves to servers).
const REFUSED_CODE: i64 = -32001;

/// A refusal of the gate as a JSON-RPC error with its HTTP status (and
/// `WWW-Authenticate: Bearer` on a 401).
fn json_rpc_refusal(refusal: &Refusal) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = axum::Json(serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": REFUSED_CODE,
            "message": refusal.to_string(),
            "data": {"reason": refusal.kind()},
        },
    }));
    let mut response = (refusal.status(), body).into_response();
    if let Some((name, value)) = refusal.challenge() {
        response
            .headers_mut()
            .insert(name, axum::http::HeaderValue::from_static(value));
    }
    response
}

/// What the endpoint needs besides its handlers: the listener's address,
/// the operator's `--allowed-host`s, how long a silent client keeps its
/// session, how many clients at once, and the server's shutdown.
pub(crate) struct Endpoint<'a> {
    pub(crate) local: SocketAddr,
    pub(crate) allowed_hosts: &'a [String],
    pub(crate) client_idle_timeout: Duration,
    pub(crate) max_clients: usize,
    pub(crate) shutdown: &'a CancellationToken,
}

/// `/mcp` and `/healthz` (the gate lets the latter through without a
/// token); each MCP client gets its own handler from `handler`, dropped
/// (its processes with it) when its session ends.
pub(crate) fn router<H, F>(endpoint: &Endpoint<'_>, handler: F) -> Router
where
    H: ServerHandler,
    F: Fn() -> H + Send + Sync + 'static,
{
    let local = endpoint.local;
    let interfaces = if local.ip().is_unspecified() {
        hosts::interface_addresses()
    } else {
        Vec::new()
    };
    let allowed = hosts::allowed_hosts(local, &interfaces, endpoint.allowed_hosts);
    let origins = hosts::allowed_origins(&allowed);
    tracing::debug!(hosts = ?allowed, "Host values the MCP listener accepts");
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
        .with_legacy_session_mode(true)
        .with_max_request_body_bytes(MCP_MAX_BODY_BYTES)
        .with_cancellation_token(endpoint.shutdown.child_token());
    let mut sessions = LocalSessionManager::default();
    // A client silent this long is gone: its MCP session closes, which
    // drops its handler and kills its processes.
    sessions.session_config.keep_alive = Some(endpoint.client_idle_timeout);
    let sessions = Arc::new(Sessions::new(sessions, endpoint.max_clients));
    let service = StreamableHttpService::new(move || Ok(handler()), sessions.clone(), config);
    Router::new()
        .route_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn(session_ended_is_200))
        .layer(axum::middleware::from_fn_with_state(
            sessions,
            super::sessions::unknown_session_delete_is_404,
        ))
        .layer(axum::middleware::from_fn(
            super::json_answers::single_answer_as_json,
        ))
        .layer(axum::middleware::from_fn(malformed_is_a_parse_error))
        .fallback(|| async { axum::http::StatusCode::NOT_FOUND })
        .route(HEALTH_PATH, get(healthz))
}

/// JSON-RPC's "Parse error": the body is not JSON.
const PARSE_ERROR: i64 = -32700;

/// A `POST` whose body cannot be read whole (shorter than its
/// `Content-Length`, cut by the client) or is not JSON is the client's
/// mistake: 400 with a JSON-RPC parse error, as the JSON-RPC and MCP specs
/// say, never rmcp's 415 or 500 in plain text. The body (at most
/// [`MCP_MAX_BODY_BYTES`], the gate holds it to that) is read here once
/// and handed on as it came.
async fn malformed_is_a_parse_error(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if request.method() != axum::http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let parse_error = |why: String| {
        let body = axum::Json(serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": PARSE_ERROR, "message": format!("Parse error: {why}")},
        }));
        (axum::http::StatusCode::BAD_REQUEST, body).into_response()
    };
    let bytes = match axum::body::to_bytes(body, MCP_MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => {
            // Over the limit is the gate's 413; anything else is a body
            // that ended early or broke off.
            let text = e.to_string();
            if text.contains("length limit") {
                let refusal = Refusal::TooLarge {
                    length: u64::try_from(MCP_MAX_BODY_BYTES).unwrap_or(u64::MAX) + 1,
                    limit: MCP_MAX_BODY_BYTES,
                };
                return json_rpc_refusal(&refusal);
            }
            return parse_error(format!("the request body could not be read whole: {text}"));
        }
    };
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return parse_error(e.to_string());
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

/// A `DELETE` that ended a session answers 200 (rmcp says 202): the
/// Python SDK, and the clients built on it, take anything but 200 or 204
/// for a failed termination. Notifications keep their 202.
async fn session_ended_is_200(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::OK;
    }
    response
}

async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}
