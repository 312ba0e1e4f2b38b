//! envd's plain HTTP routes (its `envd.yaml`): `GET /health` (204),
//! `GET /files` (a file's bytes), `POST /files` (multipart `file` parts or
//! a raw `application/octet-stream` body, written atomically; the entries
//! written as JSON), `POST /init` (variables and a default working
//! directory for the commands to come), `GET /envs`, `GET /metrics`.
//! Errors are envd's `{"message", "code"}` with its statuses (400 a
//! directory, 403 outside the root or refused by the policy, 404 missing,
//! 413 too large), which the SDK maps to its exceptions.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;

use super::EnvdState;
use crate::broker::files::surface::upload::{UploadError, blocking, write_stream};
use crate::broker::files::surface::{Workspace, WorkspaceError};
use crate::gate::Caller;
use crate::gate::MAX_BODY_BYTES;
use crate::plan::FileOp;

/// The mode of an uploaded file.
const UPLOAD_MODE: u32 = 0o644;

/// An error answer of the HTTP routes.
#[derive(Debug)]
pub(crate) struct HttpError {
    status: StatusCode,
    message: String,
}

impl HttpError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({"message": self.message, "code": self.status.as_u16()})),
        )
            .into_response()
    }
}

impl From<WorkspaceError> for HttpError {
    fn from(err: WorkspaceError) -> Self {
        let status = match &err {
            WorkspaceError::NotFound { .. } => StatusCode::NOT_FOUND,
            WorkspaceError::Escapes { .. }
            | WorkspaceError::Denied { .. }
            | WorkspaceError::Protected { .. }
            | WorkspaceError::Root => StatusCode::FORBIDDEN,
            WorkspaceError::IsDirectory { .. }
            | WorkspaceError::NotEmpty { .. }
            | WorkspaceError::Invalid { .. } => StatusCode::BAD_REQUEST,
            WorkspaceError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        HttpError::new(status, err.to_string())
    }
}

impl From<UploadError> for HttpError {
    fn from(err: UploadError) -> Self {
        match err {
            UploadError::Workspace(e) => e.into(),
            UploadError::TooLarge { .. } => {
                HttpError::new(StatusCode::PAYLOAD_TOO_LARGE, err.to_string())
            }
            UploadError::Body(_) => HttpError::new(StatusCode::BAD_REQUEST, err.to_string()),
        }
    }
}

/// `GET /health`: 204, no token needed.
pub(crate) async fn health() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// The query of `/files`.
#[derive(Debug, Deserialize)]
pub(crate) struct FileQuery {
    path: Option<String>,
    /// E2B's user: accepted; files are the server user's.
    #[serde(rename = "username")]
    _username: Option<String>,
}

/// The broker's word on `op` over the E2B path `path`: the workspace it
/// lies in (the root or a writable root of the policy) and the path
/// relative to that workspace.
fn permit(
    state: &EnvdState,
    caller: &Caller,
    op: FileOp,
    path: &str,
) -> Result<(Workspace, String), HttpError> {
    let placed = state
        .broker
        .place(caller, op, path)
        .map_err(|why| HttpError::new(StatusCode::FORBIDDEN, why.to_string()))?;
    Ok((placed.workspace, placed.rel))
}

/// `GET /files?path=`: the file's bytes, streamed.
pub(crate) async fn get_file(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<FileQuery>,
) -> Result<Response, HttpError> {
    let path = query
        .path
        .ok_or_else(|| HttpError::new(StatusCode::BAD_REQUEST, "the path parameter is required"))?;
    let (ws, rel) = permit(&state, &caller, FileOp::Read, &path)?;
    let (file, size, _) = blocking(move || {
        let target = ws.resolve(&rel)?;
        ws.open_file(&target)
    })
    .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(crate::broker::files::surface::upload::read_stream(file)),
    )
        .into_response())
}

/// One written file, as envd lists it.
fn written(root: &std::path::Path, rel: &str) -> serde_json::Value {
    let path = super::paths::shown(root, rel);
    let name = std::path::Path::new(&path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    serde_json::json!({"path": path, "name": name, "type": "file"})
}

fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("multipart/form-data"))
}

/// `POST /files`: each multipart `file` part (to `path`, or to the part's
/// file name when several are sent), or the raw body to `path`.
pub(crate) async fn post_file(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<FileQuery>,
    request: Request,
) -> Result<Json<Vec<serde_json::Value>>, HttpError> {
    if !is_multipart(request.headers()) {
        let path = query.path.ok_or_else(|| {
            HttpError::new(
                StatusCode::BAD_REQUEST,
                "a raw upload needs the path parameter",
            )
        })?;
        let permitted = async {
            let (ws, rel) = permit(&state, &caller, FileOp::Upload, &path)?;
            let shown = rel.clone();
            let target = blocking({
                let ws = ws.clone();
                move || ws.resolve(&shown)
            })
            .await?;
            Ok::<_, HttpError>((ws, rel, target))
        }
        .await;
        let (ws, rel, target) = match permitted {
            Ok(p) => p,
            Err(e) => {
                drain(request.into_body()).await;
                return Err(e);
            }
        };
        let body = request.into_body().into_data_stream();
        write_stream(&ws, target, UPLOAD_MODE, MAX_BODY_BYTES, body).await?;
        return Ok(Json(vec![written(ws.root(), &rel)]));
    }
    let mut multipart = Multipart::from_request(request, &state)
        .await
        .map_err(|e| {
            HttpError::new(
                StatusCode::BAD_REQUEST,
                format!("invalid multipart body: {e}"),
            )
        })?;
    let mut out = Vec::new();
    let result = upload_parts(&state, &caller, &query, &mut multipart, &mut out).await;
    if let Err(e) = result {
        // The rest of the body is read before the refusal, so the client
        // sees it rather than a connection closed under its upload.
        let _ = tokio::time::timeout(DRAIN_WAIT, async {
            while let Ok(Some(_)) = multipart.next_field().await {}
        })
        .await;
        return Err(e);
    }
    if out.is_empty() {
        return Err(HttpError::new(
            StatusCode::BAD_REQUEST,
            "the multipart body has no \"file\" part",
        ));
    }
    Ok(Json(out))
}

/// How long a refused upload's body is read before the refusal is sent.
const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads (and drops) what remains of a refused request's body, for at most
/// [`DRAIN_WAIT`]: a client still writing its upload then reads the
/// refusal instead of a connection closed under it.
async fn drain(body: Body) {
    use tokio_stream::StreamExt as _;
    let mut stream = body.into_data_stream();
    let _ = tokio::time::timeout(DRAIN_WAIT, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
}

/// Writes each `file` part of `multipart` to its path, naming them in `out`.
async fn upload_parts(
    state: &EnvdState,
    caller: &Caller,
    query: &FileQuery,
    multipart: &mut Multipart,
    out: &mut Vec<serde_json::Value>,
) -> Result<(), HttpError> {
    loop {
        let field = multipart.next_field().await.map_err(|e| {
            HttpError::new(
                StatusCode::BAD_REQUEST,
                format!("invalid multipart body: {e}"),
            )
        })?;
        let Some(field) = field else { break };
        if field.name() != Some("file") {
            continue;
        }
        let path = match (&query.path, field.file_name()) {
            (Some(path), _) => path.clone(),
            (None, Some(name)) => name.to_owned(),
            (None, None) => {
                return Err(HttpError::new(
                    StatusCode::BAD_REQUEST,
                    "a file part needs the path parameter or a file name",
                ));
            }
        };
        let (ws, rel) = permit(state, caller, FileOp::Upload, &path)?;
        let shown = rel.clone();
        let target = blocking({
            let ws = ws.clone();
            move || ws.resolve(&shown)
        })
        .await?;
        write_stream(&ws, target, UPLOAD_MODE, MAX_BODY_BYTES, field).await?;
        out.push(written(ws.root(), &rel));
    }
    Ok(())
}

/// The body of `POST /init` this door reads (the rest is E2B's
/// orchestrator's business: clock, volumes, CA bundle).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InitBody {
    #[serde(default)]
    env_vars: BTreeMap<String, String>,
    default_workdir: Option<String>,
}

/// `POST /init`: variables for every command to come and a default
/// working directory (beneath the root). The access token is not changed
/// by it: the token is the server's (`--token-file`).
pub(crate) async fn init(
    State(state): State<EnvdState>,
    body: axum::body::Bytes,
) -> Result<StatusCode, HttpError> {
    let init: InitBody = if body.iter().all(u8::is_ascii_whitespace) {
        InitBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| HttpError::new(StatusCode::BAD_REQUEST, format!("invalid body: {e}")))?
    };
    if let Some(reserved) = init
        .env_vars
        .keys()
        .find(|k| k.starts_with(crate::plan::RESERVED_ENV_PREFIX))
    {
        return Err(HttpError::new(
            StatusCode::BAD_REQUEST,
            format!("variable {reserved} is reserved by agent-reach"),
        ));
    }
    if let Some(dir) = &init.default_workdir {
        state
            .broker
            .locate(std::path::Path::new(dir))
            .map_err(|e| HttpError::new(StatusCode::FORBIDDEN, e.to_string()))?;
    }
    state.init.set(init.env_vars, init.default_workdir);
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /envs`: the variables `POST /init` set.
pub(crate) async fn envs(State(state): State<EnvdState>) -> Json<BTreeMap<String, String>> {
    Json(state.init.env())
}

/// `GET /metrics`: the machine's memory and CPU (sysinfo) and the disk of
/// the root (statvfs). `cpu_used_pct` is the one-minute load over the CPU
/// count, capped at 100.
pub(crate) async fn metrics(State(state): State<EnvdState>) -> Json<serde_json::Value> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut info = serde_json::json!({
        "ts": chrono::Utc::now().timestamp(),
        "cpu_count": cpus,
    });
    if let Ok(sys) = nix::sys::sysinfo::sysinfo() {
        let total = sys.ram_total();
        let used = total.saturating_sub(sys.ram_unused());
        #[expect(clippy::cast_precision_loss, reason = "a percentage")]
        let load = (sys.load_average().0 / cpus as f64 * 100.0).min(100.0);
        info["cpu_used_pct"] = serde_json::json!(load);
        info["mem_total"] = serde_json::json!(total);
        info["mem_used"] = serde_json::json!(used);
        info["mem_total_mib"] = serde_json::json!(total / (1024 * 1024));
        info["mem_used_mib"] = serde_json::json!(used / (1024 * 1024));
    }
    if let Ok(disk) = nix::sys::statvfs::statvfs(state.broker.root()) {
        let block = disk.fragment_size();
        let total = disk.blocks() * block;
        info["disk_total"] = serde_json::json!(total);
        info["disk_used"] = serde_json::json!(total.saturating_sub(disk.blocks_free() * block));
    }
    Json(info)
}
