//! The handlers of the sandboxd REST routes (see the module above for what
//! each answers). Each resolves the path, does the blocking file work off
//! the async threads, and maps [`WorkspaceError`]s through [`ApiError`].

use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use super::{ApiError, RestState};
use crate::broker::Files;
use crate::broker::files::surface::upload::{UploadError, blocking, write_stream};
use crate::broker::files::surface::{Entry, EntryKind, WorkspaceError};
use crate::gate::Caller;
use crate::gate::MAX_BODY_BYTES;
use crate::plan::FileOp;

/// The mode of a written file when `?mode=` is not given.
const DEFAULT_FILE_MODE: u32 = 0o644;

/// `{path}` of `/v1/files/{path}`, decoded; empty for `/v1/files/`.
fn path_of(path: Option<Path<String>>) -> String {
    path.map(|Path(p)| p).unwrap_or_default()
}

/// The broker's word on `op` over `path`, and where to do it.
fn permit(state: &RestState, caller: &Caller, op: FileOp, path: &str) -> Result<Files, ApiError> {
    Ok(state.broker.files(caller, op, &[path])?)
}

/// RFC 3339 in UTC with whole seconds, as the reference writes it.
fn rfc3339(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn entry_json(entry: &Entry) -> serde_json::Value {
    json!({
        "name": entry.name,
        "size": entry.size,
        "type": match entry.kind {
            EntryKind::File => "file",
            EntryKind::Directory => "directory",
        },
        "modified_at": rfc3339(entry.modified),
        "mode": format!("{:04o}", entry.mode & 0o777),
    })
}

/// `GET|HEAD /v1/files/{path}`: a file's bytes or a directory's listing.
pub(crate) async fn get_file(
    State(state): State<RestState>,
    Extension(caller): Extension<Caller>,
    path: Option<Path<String>>,
) -> Result<Response, ApiError> {
    let path = path_of(path);
    let ws = permit(&state, &caller, FileOp::Read, &path)?
        .workspace()
        .clone();
    let shown = path.clone();
    let opened = blocking(move || {
        let target = ws.resolve(&shown)?;
        match ws.open_file(&target) {
            Ok(file) => Ok(Ok(file)),
            Err(WorkspaceError::IsDirectory { .. }) => ws.list(&target).map(Err),
            Err(e) => Err(e),
        }
    })
    .await?;
    match opened {
        Ok((file, size, modified)) => {
            let stream = crate::broker::files::surface::upload::read_stream(file);
            Ok((
                [
                    (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
                    (header::CONTENT_LENGTH, size.to_string()),
                    (
                        header::LAST_MODIFIED,
                        chrono::DateTime::<chrono::Utc>::from(modified)
                            .format("%a, %d %b %Y %H:%M:%S GMT")
                            .to_string(),
                    ),
                ],
                Body::from_stream(stream),
            )
                .into_response())
        }
        Err(entries) => {
            let shown = if path.starts_with('/') {
                path
            } else {
                format!("/{path}")
            };
            let entries: Vec<_> = entries.iter().map(entry_json).collect();
            Ok(Json(json!({"path": shown, "entries": entries})).into_response())
        }
    }
}

/// The query of a `PUT`.
#[derive(Debug, Deserialize)]
pub(crate) struct PutQuery {
    mode: Option<String>,
}

/// `?mode=`: `^0[0-7]{3}$`, as the spec says.
fn parse_mode(mode: Option<&str>) -> Result<u32, ApiError> {
    let Some(mode) = mode.filter(|m| !m.is_empty()) else {
        return Ok(DEFAULT_FILE_MODE);
    };
    let digits = mode.strip_prefix('0').filter(|d| d.len() == 3);
    digits
        .and_then(|d| u32::from_str_radix(d, 8).ok())
        .ok_or_else(|| ApiError::invalid(format!("mode {mode:?} must match ^0[0-7]{{3}}$")))
}

fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("multipart/form-data"))
        })
}

impl From<UploadError> for ApiError {
    fn from(err: UploadError) -> Self {
        match err {
            UploadError::Workspace(e) => e.into(),
            UploadError::TooLarge { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "INVALID_ARGUMENT",
                err.to_string(),
            ),
            UploadError::Body(_) => ApiError::invalid(err.to_string()),
        }
    }
}

/// `PUT /v1/files/{path}`: the raw body or the multipart `file` part,
/// written atomically; 204.
pub(crate) async fn put_file(
    State(state): State<RestState>,
    Extension(caller): Extension<Caller>,
    path: Option<Path<String>>,
    Query(query): Query<PutQuery>,
    request: Request,
) -> Result<StatusCode, ApiError> {
    let mode = parse_mode(query.mode.as_deref())?;
    let path = path_of(path);
    let files = permit(&state, &caller, FileOp::Write, &path)?;
    let ws = files.workspace().clone();
    let target = blocking(move || ws.resolve(&path)).await?;
    if is_multipart(request.headers()) {
        let mut multipart = Multipart::from_request(request, &state)
            .await
            .map_err(|e| ApiError::invalid(format!("invalid multipart body: {e}")))?;
        loop {
            let field = multipart
                .next_field()
                .await
                .map_err(|e| ApiError::invalid(format!("invalid multipart body: {e}")))?
                .ok_or_else(|| {
                    ApiError::invalid(
                        "multipart body is missing the required \"file\" part".to_owned(),
                    )
                })?;
            if field.name() == Some("file") {
                write_stream(files.workspace(), target, mode, MAX_BODY_BYTES, field).await?;
                break;
            }
        }
    } else {
        let body = request.into_body().into_data_stream();
        write_stream(files.workspace(), target, mode, MAX_BODY_BYTES, body).await?;
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The query of a `DELETE`.
#[derive(Debug, Deserialize)]
pub(crate) struct DeleteQuery {
    recursive: Option<String>,
}

/// A boolean as Go's `strconv.ParseBool` reads it (the reference's parser).
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// `DELETE /v1/files/{path}[?recursive=true]`: 204.
pub(crate) async fn delete_file(
    State(state): State<RestState>,
    Extension(caller): Extension<Caller>,
    path: Option<Path<String>>,
    Query(query): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    let recursive = match query.recursive.as_deref().filter(|r| !r.is_empty()) {
        None => false,
        Some(given) => parse_bool(given)
            .ok_or_else(|| ApiError::invalid(format!("recursive {given:?} must be a boolean")))?,
    };
    let path = path_of(path);
    let ws = permit(&state, &caller, FileOp::Remove, &path)?
        .workspace()
        .clone();
    blocking(move || {
        let target = ws.resolve_entry(&path)?;
        ws.remove(&target, recursive)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/health`: 200 while serving, 503 once stopping or without a
/// workspace directory.
pub(crate) async fn health(State(state): State<RestState>) -> Response {
    if state.shutdown.is_cancelled() {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            "agent-reach is shutting down".to_owned(),
        )
        .into_response();
    }
    let broker = state.broker.clone();
    if !blocking(move || Ok(broker.workspace_ready()))
        .await
        .unwrap_or(false)
    {
        return ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            format!(
                "the workspace {} is not a directory",
                state.broker.root().display()
            ),
        )
        .into_response();
    }
    Json(json!({
        "status": "ok",
        "uptime_seconds": state.started.elapsed().as_secs(),
    }))
    .into_response()
}

/// `GET /v1/metadata`: `{"env": {...}}`.
pub(crate) async fn metadata(State(state): State<RestState>) -> Json<serde_json::Value> {
    Json(json!({"env": *state.metadata_env}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_four_octal_digits_with_a_leading_zero() {
        assert_eq!(parse_mode(None).unwrap(), 0o644);
        assert_eq!(parse_mode(Some("0755")).unwrap(), 0o755);
        assert_eq!(parse_mode(Some("0600")).unwrap(), 0o600);
        for bad in ["755", "0788", "07555", "abc", "1755"] {
            assert!(parse_mode(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_are_rfc3339_utc_seconds() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(86_400_500);
        assert_eq!(rfc3339(t), "1970-01-02T00:00:00Z");
    }

    #[test]
    fn recursive_reads_like_go() {
        assert_eq!(parse_bool("true"), Some(true));
        assert_eq!(parse_bool("1"), Some(true));
        assert_eq!(parse_bool("False"), Some(false));
        assert_eq!(parse_bool("yes"), None);
    }
}
