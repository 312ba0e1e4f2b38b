//! `serve --listen python-runtime=ADDR`: the older runtime API of
//! kubernetes-sigs/agent-sandbox (`examples/python-runtime-sandbox`, port
//! 8888), which the SDK's router, tunnel and direct connections speak:
//!
//! - `GET /`: `{"status":"ok", ...}`, needs no token.
//! - `POST /execute {command, timeout_seconds?}` →
//!   `{stdout, stderr, exit_code, timed_out}`: `command` is a shell line
//!   (`/bin/sh -c`), run in the workspace through the plan stage
//!   ([`run`]); `timeout_seconds` is its command timeout (default
//!   [`DEFAULT_EXECUTE_TIMEOUT`], the original's), past which it is killed
//!   with exit 124 and `timed_out: true`. Refused by the policy: 403.
//! - `POST /upload` (multipart, part `file`; its filename is the path).
//! - `GET /download/{p}` (bytes; 404 unless a file), `GET /list/{p}`
//!   (`[{name, size, type, mod_time}]`), `GET /exists/{p}`
//!   (`{path, exists}`).
//!
//! Paths resolve in the same [`Workspace`] as sandboxd-rest's: leaving it
//! is 403. Every file route is planned like a command first
//! ([`crate::plan::files`]): a policy refusal (raw commands off, a write
//! under `read-only`) is 403, a name with a line break 400. Errors are
//! `{"message": ...}` as in the original.

mod run;

use std::time::{Duration, UNIX_EPOCH};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Multipart, Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::broker::files::surface::fs::Node;
use crate::broker::files::surface::upload::{UploadError, blocking, write_stream};
use crate::broker::files::surface::{EntryKind, Workspace, WorkspaceError};
use crate::doors::DoorContext;
use crate::gate::MAX_BODY_BYTES;
use crate::gate::{Caller, DoorRules};
use crate::plan::{FileOp, Rejection};
use crate::registry::kinds;
use crate::result::{NormalizedResult, Status};

/// The command timeout when `/execute` gives none (the original's
/// `SANDBOX_EXEC_TIMEOUT_SECONDS` default).
pub(crate) const DEFAULT_EXECUTE_TIMEOUT: Duration = Duration::from_secs(300);
/// The mode of an uploaded file.
const UPLOAD_MODE: u32 = 0o644;

#[derive(Clone)]
struct RuntimeState {
    broker: Broker,
    shutdown: CancellationToken,
}

/// Serves the runtime API on `listener` until `shared.shutdown`. A command
/// still running then is killed with its request (its future is dropped,
/// and the engine kills the whole group on drop), so nothing outlives it.
pub(crate) async fn serve(listener: TcpListener, shared: DoorContext) -> Result<(), String> {
    let state = RuntimeState {
        broker: shared.broker.clone(),
        shutdown: shared.shutdown.clone(),
    };
    let app = Router::new()
        .route("/", get(health))
        .route("/execute", post(execute))
        .route("/upload", post(upload))
        .route("/download/", get(download))
        .route("/download/{*path}", get(download))
        .route("/list/", get(list))
        .route("/list/{*path}", get(list))
        .route("/exists/", get(exists))
        .route("/exists/{*path}", get(exists))
        .fallback(|| async { message(StatusCode::NOT_FOUND, "Not Found".to_owned()) })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state);
    crate::doors::serve_door(listener, &shared, RULES, app).await
}

/// What the gate holds the runtime API to: the bearer token but on its
/// health check (`GET /`).
pub(crate) const RULES: DoorRules = DoorRules {
    public: &["/"],
    ..DoorRules::new("python-runtime")
};

/// An answer `{"message": ...}` with `status`.
fn message(status: StatusCode, text: String) -> Response {
    (status, Json(json!({"message": text}))).into_response()
}

/// A workspace error as the original answers it.
fn refusal(err: &WorkspaceError) -> Response {
    match err {
        WorkspaceError::Escapes { .. }
        | WorkspaceError::Denied { .. }
        | WorkspaceError::Protected { .. } => {
            message(StatusCode::FORBIDDEN, format!("Access denied: {err}"))
        }
        WorkspaceError::NotFound { .. } => message(StatusCode::NOT_FOUND, err.to_string()),
        WorkspaceError::Io { .. } => message(StatusCode::INTERNAL_SERVER_ERROR, err.to_string()),
        _ => message(StatusCode::BAD_REQUEST, err.to_string()),
    }
}

fn path_of(path: Option<Path<String>>) -> String {
    path.map(|Path(p)| p).unwrap_or_default()
}

/// The broker's refusal of a file operation, answered as the original.
struct Refused(Rejection);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        policy_refusal(&self.0)
    }
}

/// The broker's word on `op` over `paths`, and where to do it.
fn workspace_for(
    state: &RuntimeState,
    caller: &Caller,
    op: FileOp,
    paths: &[&str],
) -> Result<Workspace, Refused> {
    state
        .broker
        .files(caller, op, paths)
        .map(|files| files.workspace().clone())
        .map_err(Refused)
}

/// A refusal of the plan stage as the original refuses: 403, or 400 for a
/// bad name.
fn policy_refusal(rejection: &Rejection) -> Response {
    let status = if rejection.kind == kinds::INVALID_PARAMS {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::FORBIDDEN
    };
    (
        status,
        Json(json!({"message": rejection.message, "kind": rejection.kind})),
    )
        .into_response()
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok", "message": "Sandbox Runtime is active."}))
}

/// The body of `POST /execute`.
#[derive(Debug, Deserialize)]
struct ExecuteBody {
    command: String,
    #[serde(default)]
    timeout_seconds: Option<f64>,
}

/// The command timeout a request asks for, checked.
fn timeout_of(seconds: Option<f64>) -> Result<Duration, String> {
    match seconds {
        None => Ok(DEFAULT_EXECUTE_TIMEOUT),
        Some(s) if s.is_finite() && s > 0.0 => {
            Duration::try_from_secs_f64(s).map_err(|e| format!("timeout_seconds: {e}"))
        }
        Some(s) => Err(format!(
            "timeout_seconds must be a number greater than 0, not {s}"
        )),
    }
}

/// The answer to `/execute` for a normalized result.
fn execute_answer(result: &NormalizedResult) -> Response {
    let refused_message = || {
        result
            .error
            .as_ref()
            .map_or_else(|| "refused".to_owned(), |e| e.message.clone())
    };
    let kind = result.error.as_ref().map(|e| e.kind.as_str());
    match result.status {
        Status::Success | Status::Failure | Status::Timeout => {
            let timed_out = result.status == Status::Timeout;
            let exit_code = match (result.exit_code, result.signal) {
                _ if timed_out => crate::exit_code::TIMEOUT,
                (Some(code), _) => code,
                // As Python's subprocess reports a death by signal.
                (None, Some(signal)) => -signal,
                (None, None) => -1,
            };
            let mut answer = json!({
                "stdout": result.stdout,
                "stderr": result.stderr,
                "exit_code": exit_code,
                "timed_out": timed_out,
            });
            if !result.capped.is_empty() {
                answer["capped"] = json!(result.capped);
            }
            Json(answer).into_response()
        }
        Status::Rejected if kind.is_some_and(kinds::is_policy_refusal) => (
            StatusCode::FORBIDDEN,
            Json(json!({"message": refused_message(), "kind": kind})),
        )
            .into_response(),
        Status::Busy => {
            let after = result.error.as_ref().and_then(|e| e.retry_after_ms);
            let secs = after.map_or(1, |ms| ms.div_ceil(1000).max(1));
            (
                StatusCode::SERVICE_UNAVAILABLE,
                [(header::RETRY_AFTER, secs.to_string())],
                Json(json!({"message": refused_message(), "kind": kind, "retry_after_ms": after})),
            )
                .into_response()
        }
        Status::Rejected => (
            StatusCode::BAD_REQUEST,
            Json(json!({"message": refused_message(), "kind": kind})),
        )
            .into_response(),
        Status::Error => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"message": refused_message(), "kind": kind})),
        )
            .into_response(),
    }
}

/// `POST /execute`: runs the line, answers when it ends, or 503 when the
/// server stops first (the command is killed with the dropped future).
async fn execute(
    State(state): State<RuntimeState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let request: ExecuteBody = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"detail": format!("invalid /execute body: {e}")})),
            )
                .into_response();
        }
    };
    let timeout = match timeout_of(request.timeout_seconds) {
        Ok(timeout) => timeout,
        Err(why) => {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                Json(json!({"detail": why})),
            )
                .into_response();
        }
    };
    tokio::select! {
        result = run::run_line(&state.broker, &caller, &request.command, timeout) => execute_answer(&result),
        () = state.shutdown.cancelled() => message(
            StatusCode::SERVICE_UNAVAILABLE,
            "agent-reach is shutting down; the command was killed".to_owned(),
        ),
    }
}

/// `POST /upload`: the `file` part, saved at the path its filename names.
async fn upload(
    State(state): State<RuntimeState>,
    Extension(caller): Extension<Caller>,
    mut multipart: Multipart,
) -> Response {
    if let Err(refused) = workspace_for(&state, &caller, FileOp::Upload, &[]) {
        return refused.into_response();
    }
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => {
                return (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    Json(json!({"detail": "the multipart body has no \"file\" part"})),
                )
                    .into_response();
            }
            Err(e) => {
                return message(
                    StatusCode::BAD_REQUEST,
                    format!("invalid multipart body: {e}"),
                );
            }
        };
        if field.name() != Some("file") {
            continue;
        }
        let name = field.file_name().unwrap_or_default().to_owned();
        let workspace = match workspace_for(&state, &caller, FileOp::Upload, &[&name]) {
            Ok(workspace) => workspace,
            Err(refused) => return refused.into_response(),
        };
        let ws = workspace.clone();
        let path = name.clone();
        let target = match blocking(move || ws.resolve(&path)).await {
            Ok(target) => target,
            Err(e) => return refusal(&e),
        };
        return match write_stream(&workspace, target, UPLOAD_MODE, MAX_BODY_BYTES, field).await {
            Ok(_) => message(
                StatusCode::OK,
                format!("File '{name}' uploaded successfully."),
            ),
            Err(UploadError::Workspace(e)) => refusal(&e),
            Err(e @ UploadError::TooLarge { .. }) => {
                message(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
            }
            Err(e @ UploadError::Body(_)) => message(StatusCode::BAD_REQUEST, e.to_string()),
        };
    }
}

/// `GET /download/{p}`: the file's bytes; 404 unless it is a file.
async fn download(
    State(state): State<RuntimeState>,
    Extension(caller): Extension<Caller>,
    path: Option<Path<String>>,
) -> Result<Response, Refused> {
    let path = path_of(path);
    let ws = workspace_for(&state, &caller, FileOp::Read, &[&path])?;
    Ok(
        match blocking(move || ws.resolve(&path).and_then(|t| ws.open_file(&t))).await {
            Ok((file, size, _)) => (
                [
                    (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                    (header::CONTENT_LENGTH, size.to_string()),
                ],
                Body::from_stream(crate::broker::files::surface::upload::read_stream(file)),
            )
                .into_response(),
            Err(
                e @ (WorkspaceError::Escapes { .. }
                | WorkspaceError::Denied { .. }
                | WorkspaceError::Protected { .. }),
            ) => refusal(&e),
            Err(_) => message(StatusCode::NOT_FOUND, "File not found".to_owned()),
        },
    )
}

/// `GET /list/{p}`: the directory's entries; 404 unless it is a directory.
async fn list(
    State(state): State<RuntimeState>,
    Extension(caller): Extension<Caller>,
    path: Option<Path<String>>,
) -> Result<Response, Refused> {
    let path = path_of(path);
    let ws = workspace_for(&state, &caller, FileOp::List, &[&path])?;
    Ok(
        match blocking(move || ws.resolve(&path).and_then(|t| ws.list(&t))).await {
            Ok(entries) => {
                let entries: Vec<_> = entries
                    .iter()
                    .map(|e| {
                        let mod_time = e
                            .modified
                            .duration_since(UNIX_EPOCH)
                            .map_or(0.0, |d| d.as_secs_f64());
                        json!({
                            "name": e.name,
                            "size": e.size,
                            "type": match e.kind {
                                EntryKind::File => "file",
                                EntryKind::Directory => "directory",
                            },
                            "mod_time": mod_time,
                        })
                    })
                    .collect();
                Json(serde_json::Value::Array(entries)).into_response()
            }
            Err(
                e @ (WorkspaceError::Escapes { .. }
                | WorkspaceError::Denied { .. }
                | WorkspaceError::Protected { .. }),
            ) => refusal(&e),
            Err(WorkspaceError::Io { source, .. }) => message(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("List files failed: {source}"),
            ),
            Err(_) => message(StatusCode::NOT_FOUND, "Path is not a directory".to_owned()),
        },
    )
}

/// `GET /exists/{p}`: `{path, exists}` (a broken link does not exist).
async fn exists(
    State(state): State<RuntimeState>,
    Extension(caller): Extension<Caller>,
    path: Option<Path<String>>,
) -> Result<Response, Refused> {
    let path = path_of(path);
    let ws = workspace_for(&state, &caller, FileOp::Read, &[&path])?;
    let shown = path.clone();
    let found = blocking(move || {
        let target = ws.resolve(&path)?;
        match ws.node(&target) {
            Ok(node) => Ok(node != Node::Other),
            Err(WorkspaceError::NotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    })
    .await;
    Ok(match found {
        Ok(exists) => Json(json!({"path": shown, "exists": exists})).into_response(),
        Err(e) => refusal(&e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_must_be_positive_and_finite() {
        assert_eq!(timeout_of(None).unwrap(), DEFAULT_EXECUTE_TIMEOUT);
        assert_eq!(timeout_of(Some(1.5)).unwrap(), Duration::from_millis(1500));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(timeout_of(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_timeout_answers_124_and_timed_out() {
        let mut result =
            NormalizedResult::refused(None, None, Status::Timeout, "timeout", String::new());
        result.error = None;
        result.exit_code = Some(124);
        let response = execute_answer(&result);
        assert_eq!(response.status(), StatusCode::OK);
    }

    #[test]
    fn raw_commands_off_is_403() {
        let result = NormalizedResult::refused(
            None,
            None,
            Status::Rejected,
            kinds::RAW_COMMANDS_DISABLED,
            "off".to_owned(),
        );
        assert_eq!(execute_answer(&result).status(), StatusCode::FORBIDDEN);
    }
}
