//! The toolbox's `files` routes, every one planned by the broker first
//! (the policy may refuse: 403) and done in the workspace beneath `--root`:
//!
//! - `GET /files?path=` lists a directory as `[FileInfo]`; `GET
//!   /files/info?path=` one `FileInfo` (`name, size, mode, modTime,
//!   modifiedAt, isDir, owner, group, permissions, path`, Go's spellings);
//! - `GET /files/download?path=` the bytes; `POST /files/bulk-download
//!   {paths}` a multipart answer, one part per path named `file` (or
//!   `error`, a JSON error body) whose `filename=` is the path as asked;
//! - `POST /files/upload?path=` (multipart part `file`), `POST
//!   /files/bulk-upload` (parts `files[i].path` then `files[i].file`,
//!   streamed to disk, chunked bodies too), each file written atomically;
//! - `POST /files/folder?path=&mode=`, `POST /files/move?source=&destination=`,
//!   `DELETE /files?path=&recursive=`, `POST /files/permissions?path=&mode=`.
//!
//! A path is Daytona's: absolute beneath `--root` (or one of the policy's
//! writable roots), or relative to the root; an absolute path elsewhere is
//! 403, like a link leading out.

use std::collections::BTreeMap;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_stream::StreamExt;

use super::{ApiError, DaytonaState};
use crate::broker::files::surface::manage::{EntryStat, StatKind};
use crate::broker::files::surface::upload::{blocking, read_stream, write_stream};
use crate::broker::files::surface::{Workspace, WorkspaceError};
use crate::gate::{Caller, MAX_BODY_BYTES};
use crate::plan::FileOp;

/// The mode of an uploaded file.
const UPLOAD_MODE: u32 = 0o644;
/// The mode of `files/folder` when none is given (Daytona's default).
const DEFAULT_FOLDER_MODE: u32 = 0o755;
/// The multipart boundary of a bulk download.
const BOUNDARY: &str = "agent-reach-daytona-bulk-download";
/// Chunks of a bulk download queued before the writer waits for the client.
const DOWNLOAD_QUEUE: usize = 8;

/// The broker's word on `op` over the Daytona path `path`: the workspace
/// it lies in (the root, or one of the policy's writable roots for an
/// absolute path there) and the path relative to that workspace.
pub(crate) fn permit(
    state: &DaytonaState,
    caller: &Caller,
    op: FileOp,
    path: &str,
) -> Result<(Workspace, String), ApiError> {
    let placed = state
        .broker
        .place(caller, op, path)
        .map_err(|why| ApiError::forbidden(why.to_string()))?;
    Ok((placed.workspace, tidy(&placed.rel)))
}

/// `rel` without its empty and `.` parts (`./a//b` is `a/b`, `.` the
/// root), so the paths shown back are plain; `..` is left to the workspace.
fn tidy(rel: &str) -> String {
    rel.split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// A required query parameter.
fn required(value: Option<String>, name: &str) -> Result<String, ApiError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("{name} is required")))
}

/// Go's `FileMode.String()` of an `st_mode`: the type letter, then `rwx`.
fn go_mode(mode: u32, kind: StatKind) -> String {
    let mut out = String::with_capacity(11);
    out.push(match kind {
        StatKind::Directory => 'd',
        StatKind::Symlink => 'L',
        StatKind::File => '-',
        StatKind::Other => '?',
    });
    for (bit, ch) in [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o040, 'r'),
        (0o020, 'w'),
        (0o010, 'x'),
        (0o004, 'r'),
        (0o002, 'w'),
        (0o001, 'x'),
    ] {
        out.push(if mode & bit != 0 { ch } else { '-' });
    }
    out
}

/// A `FileInfo` of the entry `stat` at `rel`.
fn file_info(root: &std::path::Path, rel: &str, stat: &EntryStat) -> Value {
    let path = crate::doors::envd::paths::shown(root, rel);
    let name = std::path::Path::new(&path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".to_owned());
    let modified: chrono::DateTime<chrono::Utc> = stat.modified.into();
    json!({
        "name": name,
        "path": path,
        "size": stat.size,
        "mode": go_mode(stat.mode, stat.kind),
        "modTime": modified.format("%Y-%m-%d %H:%M:%S%.f +0000 UTC").to_string(),
        "modifiedAt": modified.to_rfc3339(),
        "isDir": stat.kind == StatKind::Directory,
        "owner": stat.uid.to_string(),
        "group": stat.gid.to_string(),
        "permissions": format!("{:04o}", stat.mode & 0o777),
    })
}

/// What `rel` is, a final link followed beneath the root.
fn stat_followed(ws: &Workspace, rel: &str) -> Result<EntryStat, WorkspaceError> {
    let target = ws.resolve(rel)?;
    let stat = ws.stat(&target)?;
    if stat.kind != StatKind::Symlink {
        return Ok(stat);
    }
    let (_, size, modified) = match ws.open_file(&target) {
        Ok(found) => found,
        Err(WorkspaceError::IsDirectory { .. }) => {
            return Ok(EntryStat {
                kind: StatKind::Directory,
                ..stat
            });
        }
        Err(e) => return Err(e),
    };
    Ok(EntryStat {
        kind: StatKind::File,
        size,
        modified,
        ..stat
    })
}

/// The query of the single-path routes.
#[derive(Debug, Deserialize)]
pub(crate) struct PathQuery {
    path: Option<String>,
    recursive: Option<String>,
    mode: Option<String>,
    owner: Option<String>,
    group: Option<String>,
}

/// `GET /files?path=`.
pub(crate) async fn list(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PathQuery>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let path = query.path.unwrap_or_default();
    let (ws, rel) = permit(&state, &caller, FileOp::List, &path)?;
    let root = ws.root().to_path_buf();
    let infos = blocking(move || {
        let entries = ws.list(&ws.resolve(&rel)?)?;
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let child = crate::broker::files::surface::join(&rel, &entry.name);
            if let Ok(stat) = stat_followed(&ws, &child) {
                out.push(file_info(&root, &child, &stat));
            }
        }
        Ok(out)
    })
    .await?;
    Ok(Json(infos))
}

/// `GET /files/info?path=`.
pub(crate) async fn info(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PathQuery>,
) -> Result<Json<Value>, ApiError> {
    let path = required(query.path, "path")?;
    let (ws, rel) = permit(&state, &caller, FileOp::List, &path)?;
    let root = ws.root().to_path_buf();
    let info = blocking(move || Ok(file_info(&root, &rel, &stat_followed(&ws, &rel)?))).await?;
    Ok(Json(info))
}

/// `GET /files/download?path=`: the bytes, streamed.
pub(crate) async fn download(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let path = required(query.path, "path")?;
    let (ws, rel) = permit(&state, &caller, FileOp::Read, &path)?;
    let (file, size, _) = blocking(move || ws.open_file(&ws.resolve(&rel)?)).await?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_owned()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        Body::from_stream(read_stream(file)),
    )
        .into_response())
}

/// The body of `files/bulk-download`.
#[derive(Debug, Deserialize)]
pub(crate) struct DownloadRequest {
    paths: Vec<String>,
}

/// The headers of one part of a bulk download.
fn part_head(name: &str, path: &str, content_type: &str, size: Option<u64>) -> Bytes {
    let quoted = path.replace(['"', '\r', '\n'], "_");
    let mut head = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{quoted}\"\r\nContent-Type: {content_type}\r\n"
    );
    if let Some(size) = size {
        head.push_str(&format!("Content-Length: {size}\r\n"));
    }
    head.push_str("\r\n");
    Bytes::from(head)
}

/// `POST /files/bulk-download {paths}`: a multipart answer, streamed.
pub(crate) async fn bulk_download(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<DownloadRequest>,
) -> Result<Response, ApiError> {
    if body.paths.is_empty() {
        return Err(ApiError::bad_request(
            "request body must be {\"paths\": [ ... ]} and non-empty",
        ));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(DOWNLOAD_QUEUE);
    tokio::spawn(async move {
        for path in body.paths {
            let opened = match permit(&state, &caller, FileOp::Read, &path) {
                Ok((ws, rel)) => blocking(move || ws.open_file(&ws.resolve(&rel)?))
                    .await
                    .map_err(ApiError::from),
                Err(e) => Err(e),
            };
            match opened {
                Ok((file, size, _)) => {
                    let head = part_head("file", &path, "application/octet-stream", Some(size));
                    if tx.send(Ok(head)).await.is_err() {
                        return;
                    }
                    let mut bytes = read_stream(file);
                    while let Some(chunk) = bytes.next().await {
                        if tx.send(chunk).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    let json = json!({
                        "statusCode": e.status.as_u16(),
                        "message": e.message,
                        "code": super::code_of(e.status),
                    })
                    .to_string();
                    let head = part_head("error", &path, "application/json; charset=utf-8", None);
                    if tx.send(Ok(head)).await.is_err() || tx.send(Ok(json.into())).await.is_err() {
                        return;
                    }
                }
            }
            if tx.send(Ok(Bytes::from_static(b"\r\n"))).await.is_err() {
                return;
            }
        }
        let _ = tx
            .send(Ok(Bytes::from(format!("--{BOUNDARY}--\r\n"))))
            .await;
    });
    Ok((
        [(
            header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )],
        Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response())
}

/// Writes one uploaded stream to the Daytona path `path`; its size.
async fn write_one<S, E>(
    state: &DaytonaState,
    caller: &Caller,
    path: &str,
    body: S,
) -> Result<u64, ApiError>
where
    S: tokio_stream::Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let (ws, rel) = permit(state, caller, FileOp::Upload, path)?;
    let target = blocking({
        let ws = ws.clone();
        move || ws.resolve(&rel)
    })
    .await?;
    Ok(write_stream(&ws, target, UPLOAD_MODE, MAX_BODY_BYTES, body).await?)
}

async fn multipart_of(request: Request, state: &DaytonaState) -> Result<Multipart, ApiError> {
    Multipart::from_request(request, state)
        .await
        .map_err(|e| ApiError::bad_request(format!("invalid multipart form: {e}")))
}

/// `POST /files/upload?path=`: the multipart part `file`.
pub(crate) async fn upload(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PathQuery>,
    request: Request,
) -> Result<StatusCode, ApiError> {
    let path = required(query.path, "path")?;
    let mut multipart = multipart_of(request, &state).await?;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::bad_request(format!("invalid multipart form: {e}")))?
    {
        if field.name() == Some("file") {
            write_one(&state, &caller, &path, field).await?;
            return Ok(StatusCode::OK);
        }
    }
    Err(ApiError::bad_request("the form has no \"file\" part"))
}

/// The index and kind of a bulk-upload part name (`files[3].path`).
fn bulk_part(name: &str) -> Option<(String, &str)> {
    let rest = name.strip_prefix("files[")?;
    let (index, kind) = rest.split_once("].")?;
    Some((index.to_owned(), kind))
}

/// `POST /files/bulk-upload`: `files[i].path` then `files[i].file`, each
/// file streamed to its path.
pub(crate) async fn bulk_upload(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    request: Request,
) -> Result<Json<Value>, ApiError> {
    let mut multipart = multipart_of(request, &state).await?;
    let mut dests: BTreeMap<String, String> = BTreeMap::new();
    let mut written = Vec::new();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| ApiError::bad_request(format!("invalid multipart form: {e}")))?
    {
        let Some((index, kind)) = field.name().and_then(bulk_part) else {
            continue;
        };
        match kind {
            "path" => {
                let text = field
                    .text()
                    .await
                    .map_err(|e| ApiError::bad_request(format!("path[{index}]: {e}")))?;
                dests.insert(index, text.trim().to_owned());
            }
            "file" => {
                let path = dests
                    .get(&index)
                    .cloned()
                    .or_else(|| field.file_name().map(str::to_owned))
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("file[{index}]: missing .path metadata"))
                    })?;
                let bytes = write_one(&state, &caller, &path, field).await?;
                written.push(json!({"path": path, "bytes": bytes}));
            }
            _ => {}
        }
    }
    Ok(Json(json!({"files": written, "errors": []})))
}

/// `POST /files/folder?path=&mode=`.
pub(crate) async fn folder(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PathQuery>,
) -> Result<StatusCode, ApiError> {
    let path = required(query.path, "path")?;
    let mode = parse_mode(query.mode.as_deref())?.unwrap_or(DEFAULT_FOLDER_MODE);
    let (ws, rel) = permit(&state, &caller, FileOp::Write, &path)?;
    blocking(move || {
        let target = ws.resolve(&rel)?;
        if ws.make_dir(&target)? {
            ws.set_mode(&target, mode)?;
        }
        Ok(())
    })
    .await?;
    Ok(StatusCode::CREATED)
}

/// An octal mode (`"755"`, `"0644"`).
fn parse_mode(mode: Option<&str>) -> Result<Option<u32>, ApiError> {
    match mode.filter(|m| !m.is_empty()) {
        None => Ok(None),
        Some(m) => u32::from_str_radix(m, 8)
            .ok()
            .filter(|v| *v <= 0o7777)
            .map(Some)
            .ok_or_else(|| ApiError::bad_request("invalid mode format")),
    }
}

/// The query of `files/move`.
#[derive(Debug, Deserialize)]
pub(crate) struct MoveQuery {
    source: Option<String>,
    destination: Option<String>,
}

/// `POST /files/move?source=&destination=`.
pub(crate) async fn move_entry(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<MoveQuery>,
) -> Result<StatusCode, ApiError> {
    let source = required(query.source, "source")?;
    let destination = required(query.destination, "destination")?;
    let (ws, from) = permit(&state, &caller, FileOp::Move, &source)?;
    let (_, to) = permit(&state, &caller, FileOp::Move, &destination)?;
    blocking(move || ws.rename(&ws.resolve_entry(&from)?, &ws.resolve(&to)?)).await?;
    Ok(StatusCode::OK)
}

/// `DELETE /files?path=&recursive=`: a directory only with `recursive`.
pub(crate) async fn delete(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PathQuery>,
) -> Result<StatusCode, ApiError> {
    let path = required(query.path, "path")?;
    let recursive = query.recursive.as_deref() == Some("true");
    let (ws, rel) = permit(&state, &caller, FileOp::Remove, &path)?;
    blocking(move || {
        let target = ws.resolve_entry(&rel)?;
        if !recursive && ws.stat(&target)?.kind == StatKind::Directory {
            return Err(WorkspaceError::Invalid {
                path: target.shown.clone(),
                why: "cannot delete directory without recursive flag".to_owned(),
            });
        }
        ws.remove(&target, recursive)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /files/permissions?path=&mode=[&owner=&group=]`: the mode is set;
/// an owner or group other than the server's own user is refused (every
/// file here is the server user's).
pub(crate) async fn permissions(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PathQuery>,
) -> Result<StatusCode, ApiError> {
    let path = required(query.path, "path")?;
    let mode = parse_mode(query.mode.as_deref())?;
    let (ws, rel) = permit(&state, &caller, FileOp::Write, &path)?;
    let owner = query.owner.filter(|o| !o.is_empty());
    let group = query.group.filter(|g| !g.is_empty());
    blocking(move || {
        let target = ws.resolve(&rel)?;
        let stat = ws.stat(&target)?;
        let same =
            |given: &Option<String>, id: u32| given.as_ref().is_none_or(|g| *g == id.to_string());
        if !same(&owner, stat.uid) || !same(&group, stat.gid) {
            return Err(WorkspaceError::Denied {
                path: format!(
                    "{} (changing the owner or group is not served)",
                    target.shown
                ),
            });
        }
        if let Some(mode) = mode {
            ws.set_mode(&target, mode)?;
        }
        Ok(())
    })
    .await?;
    Ok(StatusCode::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_spelled_as_go_spells_them() {
        assert_eq!(go_mode(0o100644, StatKind::File), "-rw-r--r--");
        assert_eq!(go_mode(0o40755, StatKind::Directory), "drwxr-xr-x");
    }

    #[test]
    fn paths_are_shown_without_dot_parts() {
        assert_eq!(tidy("./a//b/."), "a/b");
        assert_eq!(tidy("."), "");
        assert_eq!(tidy("a/../b"), "a/../b");
    }

    #[test]
    fn bulk_upload_part_names_give_their_index_and_kind() {
        assert_eq!(bulk_part("files[3].path"), Some(("3".to_owned(), "path")));
        assert_eq!(bulk_part("files[0].file"), Some(("0".to_owned(), "file")));
        assert_eq!(bulk_part("file"), None);
    }

    #[test]
    fn octal_modes_are_read_and_nonsense_refused() {
        assert_eq!(parse_mode(Some("755")).unwrap(), Some(0o755));
        assert_eq!(parse_mode(None).unwrap(), None);
        assert!(parse_mode(Some("9z")).is_err());
    }
}
