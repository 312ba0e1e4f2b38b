//! `serve --listen sandboxd-rest=ADDR`: the Filesystem & Runtime REST API of
//! kubernetes-sigs/agent-sandbox's sandboxd (KEP-539.2,
//! `packages/sandboxd/spec/filesystem/v1/filesystem.yaml`), as its Python
//! SDK (`k8s-agent-sandbox`) calls it for `sandbox.files`:
//!
//! - `GET /v1/files/{path}`: a file's bytes, or a directory's listing
//!   (`{path, entries: [{name, size, type, modified_at, mode}]}`); `HEAD`
//!   the same without the body (the SDK's `exists`: 200 or 404).
//! - `PUT /v1/files/{path}[?mode=0644]`: the raw body, or the `file` part of
//!   a multipart body, written atomically (temporary file, rename), parents
//!   made; 204.
//! - `DELETE /v1/files/{path}[?recursive=true]`: 204; 409 `CONFLICT` on a
//!   directory that is not empty without `recursive`.
//! - `GET /v1/health`: `{"status":"ok"}`, 503 while stopping or when the
//!   workspace is missing; needs no token. `GET /v1/metadata`: the
//!   `SANDBOX_*` variables of our environment, credentials withheld.
//!
//! `{path}` is percent-decoded (`%2F` included) and resolved in the
//! [`Workspace`]; leaving it (`..`, a link) is 403 `PERMISSION_DENIED`.
//! Each operation is planned like a command first
//! ([`crate::plan::files`]): refused by the policy (raw commands off, a
//! write under `read-only`) is 403 `PERMISSION_DENIED`, a name with a line
//! break 400 `INVALID_ARGUMENT`.
//! Every error is `{"code", "message"}` with the reference's codes.

mod handlers;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::broker::files::surface::WorkspaceError;
use crate::doors::DoorContext;
use crate::gate::MAX_BODY_BYTES;
use crate::gate::{DoorRules, Refusal};

/// What `/v1/metadata` shows when the operator names nothing
/// (`--metadata-env`): the sandbox's identity, never a credential.
pub(crate) const DEFAULT_METADATA_ENV: [&str; 3] =
    ["SANDBOX_ID", "SANDBOX_NAME", "SANDBOX_NAMESPACE"];

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct RestState {
    /// Every file operation goes through it.
    pub(crate) broker: Broker,
    pub(crate) metadata_env: Arc<BTreeMap<String, String>>,
    pub(crate) started: Instant,
    pub(crate) shutdown: CancellationToken,
}

/// Serves the REST API on `listener` until `shared.shutdown`; it starts no
/// process, so nothing is left to kill when it returns.
pub(crate) async fn serve(listener: TcpListener, shared: DoorContext) -> Result<(), String> {
    let state = RestState {
        broker: shared.broker.clone(),
        metadata_env: Arc::new(metadata_env(shared.server.env(), &shared.metadata_env)),
        started: Instant::now(),
        shutdown: shared.shutdown.clone(),
    };
    crate::doors::serve_door(listener, &shared, RULES, router(state)).await
}

/// What the gate holds the REST API to: the bearer token but on
/// `/v1/health`, refusals as `{"code", "message"}`.
pub(crate) const RULES: DoorRules = DoorRules {
    public: &["/v1/health"],
    reply: refusal,
    ..DoorRules::new("sandboxd-rest")
};

/// A refusal of the gate as the API's errors are: `{"code", "message"}`.
fn refusal(refusal: &Refusal) -> Response {
    let code = match refusal.status() {
        StatusCode::UNAUTHORIZED => "UNAUTHENTICATED",
        StatusCode::FORBIDDEN => "PERMISSION_DENIED",
        StatusCode::PAYLOAD_TOO_LARGE => "RESOURCE_EXHAUSTED",
        _ => "INVALID_ARGUMENT",
    };
    let mut response = ApiError::new(refusal.status(), code, refusal.to_string()).into_response();
    if let Some((name, value)) = refusal.challenge() {
        response
            .headers_mut()
            .insert(name, axum::http::HeaderValue::from_static(value));
    }
    response
}

/// The routes (the gate lets `/v1/health` through without a token).
pub(crate) fn router(state: RestState) -> Router {
    let files = get(handlers::get_file)
        .put(handlers::put_file)
        .delete(handlers::delete_file);
    Router::new()
        .route("/v1/health", get(handlers::health))
        .route("/v1/files", files.clone())
        .route("/v1/files/", files.clone())
        .route("/v1/files/{*path}", files)
        .route("/v1/metadata", get(handlers::metadata))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                "no such endpoint".to_owned(),
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// The variables of `env` that `/v1/metadata` shows: those the operator
/// `named` (`--metadata-env`), nothing else: commands in the sandbox can
/// read that endpoint, so no name is guessed safe by its look.
fn metadata_env(env: &BTreeMap<OsString, OsString>, named: &[String]) -> BTreeMap<String, String> {
    named
        .iter()
        .filter_map(|name| {
            let value = env.get(std::ffi::OsStr::new(name))?.to_str()?;
            Some((name.clone(), value.to_owned()))
        })
        .collect()
}

/// An error answer: `{"code", "message"}` with its HTTP status.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: String) -> Self {
        Self {
            status,
            code,
            message,
        }
    }

    pub(crate) fn invalid(message: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
    }
}

impl From<WorkspaceError> for ApiError {
    fn from(err: WorkspaceError) -> Self {
        let (status, code) = match &err {
            WorkspaceError::Escapes { .. }
            | WorkspaceError::Denied { .. }
            | WorkspaceError::Protected { .. } => (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
            WorkspaceError::NotFound { .. } => (StatusCode::NOT_FOUND, "NOT_FOUND"),
            WorkspaceError::NotEmpty { .. } | WorkspaceError::Root => {
                (StatusCode::CONFLICT, "CONFLICT")
            }
            WorkspaceError::IsDirectory { .. } | WorkspaceError::Invalid { .. } => {
                (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
            }
            WorkspaceError::Io { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        };
        Self::new(status, code, err.to_string())
    }
}

impl From<crate::plan::Rejection> for ApiError {
    fn from(rejection: crate::plan::Rejection) -> Self {
        if rejection.kind == crate::registry::kinds::INVALID_PARAMS {
            return Self::invalid(rejection.message);
        }
        Self::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            rejection.message,
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(serde_json::json!({"code": self.code, "message": self.message})),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_shows_sandbox_variables_without_credentials() {
        let env: BTreeMap<OsString, OsString> = [
            ("SANDBOX_ID", "sb-1"),
            ("SANDBOX_API_TOKEN", "t"),
            ("SANDBOX_private_key", "k"),
            ("HOME", "/root"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let named: Vec<String> = DEFAULT_METADATA_ENV.map(String::from).to_vec();
        let shown = metadata_env(&env, &named);
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert_eq!(shown["SANDBOX_ID"], "sb-1");
        // A name the operator gives is shown; its look does not matter,
        // and what it does not name (SANDBOX_DSN) never is.
        let shown = metadata_env(&env, &["SANDBOX_private_key".to_owned()]);
        assert_eq!(shown.len(), 1, "{shown:?}");
    }

    #[test]
    fn every_workspace_error_has_the_reference_status() {
        let p = || "x".to_owned();
        let cases = [
            (
                WorkspaceError::Escapes { path: p() },
                403,
                "PERMISSION_DENIED",
            ),
            (WorkspaceError::NotFound { path: p() }, 404, "NOT_FOUND"),
            (WorkspaceError::NotEmpty { path: p() }, 409, "CONFLICT"),
            (WorkspaceError::Root, 409, "CONFLICT"),
            (
                WorkspaceError::IsDirectory { path: p() },
                400,
                "INVALID_ARGUMENT",
            ),
        ];
        for (err, status, code) in cases {
            let api = ApiError::from(err);
            assert_eq!((api.status.as_u16(), api.code), (status, code));
        }
    }
}
