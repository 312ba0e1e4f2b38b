//! `serve --listen daytona=ADDR`: agent-reach as a Daytona sandbox, so
//! programs written for Daytona's SDKs (`daytona` on PyPI, `@daytonaio/sdk`
//! on npm) drive this machine with agent-reach's guarantees:
//! `Daytona(DaytonaConfig(api_key=TOKEN, api_url="http://HOST:PORT/api")).get("agent-reach")`.
//!
//! An adapter on the broker, written from Daytona's published toolbox spec
//! (`apps/daemon/pkg/toolbox/docs/swagger.json`) and the generated clients
//! of the SDK version the tests pin ([`SDK_VERSION`]); the field names are
//! Daytona's, the definitions our own:
//!
//! - the control plane, only what the SDK reads for one sandbox
//!   ([`control`]): `GET /api/sandbox/{id}`, `GET /api/sandbox` (the one
//!   sandbox as a page), `GET /api/sandbox/{id}/toolbox-proxy-url`; the id
//!   is `--sandbox-id`, any other is 404. Nothing else of the control plane
//!   (create, start, stop, archive, snapshots, volumes) is served.
//! - the toolbox under `/toolbox/{id}/`: `process/execute` and
//!   `process/code-run` ([`process`]), the sessions ([`sessions`]), PTYs
//!   over a WebSocket ([`pty`]), the `files` routes ([`files`],
//!   [`files_search`]), and `work-dir`, `user-home-dir`, `version`. Not
//!   served (404): git, LSP, computer use, the code interpreter, ports.
//!
//! Every route needs `Authorization: Bearer TOKEN` (the SDK's API key);
//! a refusal is Daytona's error body `{statusCode, message, code}`, which
//! the SDK raises as its exception for that status (401: its
//! authentication error).

pub(crate) mod control;
pub(crate) mod files;
pub(crate) mod files_search;
pub(crate) mod process;
pub(crate) mod pty;
pub(crate) mod sessions;

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::broker::files::surface::WorkspaceError;
use crate::doors::DoorContext;
use crate::gate::MAX_BODY_BYTES;
use crate::gate::{DoorRules, Refusal};

/// The SDK versions this door is written to (their generated clients name
/// every field): the tests pin them.
pub(crate) const SDK_VERSION: &str = "daytona==0.226.1 (PyPI), @daytonaio/sdk 0.218.0 (npm)";

/// The daemon version `GET /toolbox/{id}/version` reports.
pub(crate) const DAEMON_VERSION: &str = "0.226.1";

/// `--sandbox-id` when not given.
pub(crate) const DEFAULT_SANDBOX_ID: &str = "agent-reach";

/// What the gate holds the daytona door to: the bearer token on every
/// route, JSON, multipart and raw bodies, refusals in Daytona's error shape.
pub(crate) const RULES: DoorRules = DoorRules {
    reply: daytona_refusal,
    ..DoorRules::new("daytona")
};

/// A refusal of the gate as Daytona's error body.
fn daytona_refusal(refusal: &Refusal) -> Response {
    ApiError::new(refusal.status(), refusal.to_string()).into_response()
}

/// An error answer: Daytona's `{statusCode, message, code}`.
#[derive(Debug)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
}

/// Daytona's error code for a status (its `DaemonErrorCode` names).
fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "BAD_REQUEST",
        StatusCode::UNAUTHORIZED => "UNAUTHORIZED",
        StatusCode::FORBIDDEN => "FORBIDDEN",
        StatusCode::NOT_FOUND => "NOT_FOUND",
        StatusCode::CONFLICT => "CONFLICT",
        StatusCode::REQUEST_TIMEOUT => "REQUEST_TIMEOUT",
        StatusCode::PAYLOAD_TOO_LARGE => "PAYLOAD_TOO_LARGE",
        StatusCode::TOO_MANY_REQUESTS => "TOO_MANY_REQUESTS",
        StatusCode::SERVICE_UNAVAILABLE => "SERVICE_UNAVAILABLE",
        _ => "INTERNAL_SERVER_ERROR",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "statusCode": self.status.as_u16(),
            "message": self.message,
            "code": code_of(self.status),
            "timestamp": chrono::Utc::now().to_rfc3339(),
        });
        (self.status, Json(body)).into_response()
    }
}

impl From<WorkspaceError> for ApiError {
    fn from(err: WorkspaceError) -> Self {
        let status = match &err {
            WorkspaceError::NotFound { .. } => StatusCode::NOT_FOUND,
            WorkspaceError::Escapes { .. }
            | WorkspaceError::Denied { .. }
            | WorkspaceError::Protected { .. }
            | WorkspaceError::Root => StatusCode::FORBIDDEN,
            WorkspaceError::NotEmpty { .. } => StatusCode::CONFLICT,
            WorkspaceError::IsDirectory { .. } | WorkspaceError::Invalid { .. } => {
                StatusCode::BAD_REQUEST
            }
            WorkspaceError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, err.to_string())
    }
}

impl From<crate::broker::files::surface::upload::UploadError> for ApiError {
    fn from(err: crate::broker::files::surface::upload::UploadError) -> Self {
        use crate::broker::files::surface::upload::UploadError;
        match err {
            UploadError::Workspace(e) => e.into(),
            UploadError::TooLarge { .. } => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, err.to_string())
            }
            UploadError::Body(_) => ApiError::bad_request(err.to_string()),
        }
    }
}

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct DaytonaState {
    pub(crate) broker: Broker,
    /// The one sandbox id this listener answers to (`--sandbox-id`).
    pub(crate) sandbox_id: Arc<str>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) sessions: sessions::SessionTable,
    pub(crate) ptys: pty::PtyTable,
}

/// Whether `id` can name the sandbox: one URL path segment of letters,
/// digits, `-`, `_` and `.`.
pub(crate) fn valid_sandbox_id(id: &str) -> bool {
    !id.is_empty()
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Serves the door on `listener` until `shared.shutdown`; the sessions it
/// started end with the broker's session table when the server stops.
pub(crate) async fn serve(listener: TcpListener, shared: DoorContext) -> Result<(), String> {
    let state = DaytonaState {
        broker: shared.broker.clone(),
        sandbox_id: Arc::from(shared.sandbox_id.as_str()),
        shutdown: shared.shutdown.clone(),
        sessions: sessions::SessionTable::default(),
        ptys: pty::PtyTable::default(),
    };
    tracing::info!(sandbox = %state.sandbox_id, written_for = SDK_VERSION, "daytona toolbox");
    crate::doors::serve_door(listener, &shared, RULES, router(state)).await
}

/// The routes: the control plane under `/api`, the toolbox of the one
/// sandbox under `/toolbox/{id}`; anything else is 404 in Daytona's shape.
pub(crate) fn router(state: DaytonaState) -> Router {
    let toolbox = Router::new()
        .route("/process/execute", post(process::execute))
        .route("/process/code-run", post(process::code_run))
        .route(
            "/process/session",
            get(sessions::list).post(sessions::create),
        )
        .route(
            "/process/session/{session}",
            get(sessions::get).delete(sessions::delete),
        )
        .route("/process/session/{session}/exec", post(sessions::exec))
        .route(
            "/process/session/{session}/command/{command}",
            get(sessions::command),
        )
        .route(
            "/process/session/{session}/command/{command}/logs",
            get(sessions::logs),
        )
        .route(
            "/process/session/{session}/command/{command}/input",
            post(sessions::input),
        )
        .route("/process/pty", get(pty::list).post(pty::create))
        .route("/process/pty/create-connect", get(pty::create_connect))
        .route("/process/pty/{id}", get(pty::get).delete(pty::kill))
        .route("/process/pty/{id}/connect", get(pty::connect))
        .route("/process/pty/{id}/resize", post(pty::resize))
        .route("/files", get(files::list).delete(files::delete))
        .route("/files/info", get(files::info))
        .route("/files/download", get(files::download))
        .route("/files/bulk-download", post(files::bulk_download))
        .route("/files/upload", post(files::upload))
        .route("/files/bulk-upload", post(files::bulk_upload))
        .route("/files/folder", post(files::folder))
        .route("/files/move", post(files::move_entry))
        .route("/files/permissions", post(files::permissions))
        .route("/files/find", get(files_search::find))
        .route("/files/search", get(files_search::search))
        .route("/files/replace", post(files_search::replace))
        .route("/work-dir", get(control::work_dir))
        .route("/user-home-dir", get(control::work_dir))
        .route("/version", get(control::version));
    let api = Router::new()
        .route("/sandbox", get(control::list))
        .route("/sandbox/{id}", get(control::sandbox))
        .route(
            "/sandbox/{id}/toolbox-proxy-url",
            get(control::toolbox_proxy_url),
        );
    let prefix = format!("/toolbox/{}", state.sandbox_id);
    Router::new()
        .nest("/api", api)
        .nest(&prefix, toolbox)
        .fallback(|| async { ApiError::not_found("no such route or sandbox") })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_id_is_one_plain_path_segment() {
        assert!(valid_sandbox_id(DEFAULT_SANDBOX_ID));
        assert!(valid_sandbox_id("box_1.a"));
        assert!(!valid_sandbox_id(""));
        assert!(!valid_sandbox_id(".."));
        assert!(!valid_sandbox_id("a/b"));
        assert!(!valid_sandbox_id("{id}"));
    }

    #[test]
    fn errors_carry_daytonas_status_code_and_code() {
        assert_eq!(code_of(StatusCode::REQUEST_TIMEOUT), "REQUEST_TIMEOUT");
        assert_eq!(code_of(StatusCode::IM_A_TEAPOT), "INTERNAL_SERVER_ERROR");
    }
}
