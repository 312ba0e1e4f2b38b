//! The `fs/*` methods Codex calls for file reads and `apply_patch`:
//! `fs/getMetadata`, `fs/readFile`, `fs/writeFile`, `fs/createDirectory`,
//! `fs/readDirectory`, `fs/remove`. Each is planned by the broker like a
//! command (a write where the policy is read-only is refused) and done in
//! the workspace, beneath `--root`, as on every door. Codex's error codes
//! are kept: a missing path is `-32004`, and so is a write whose parent
//! directory is missing (Codex then creates it and retries). A path
//! outside the root does not exist here: `-32004` for a look, a refusal
//! (`-32600`) for a change.

use std::io::{Read, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::connection::{Connection, params, to_value};
use super::protocol::{
    ByteChunk, FsGetMetadataResponse, FsPathParams, FsReadDirectoryEntry, FsReadDirectoryResponse,
    FsReadFileResponse, FsWriteFileParams, RpcError, codes,
};
use crate::broker::PlaceError;
use crate::broker::files::surface::manage::StatKind;
use crate::broker::files::surface::upload::blocking;
use crate::broker::files::surface::{EntryKind, Workspace, WorkspaceError};
use crate::plan::FileOp;

/// The largest file `fs/readFile` returns (it travels whole, in base64).
pub(crate) const MAX_READ_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// The permission bits of a file `fs/writeFile` creates.
const NEW_FILE_MODE: u32 = 0o644;
/// `fs/createDirectory`'s `recursive` when Codex leaves it out.
const DEFAULT_MKDIR_RECURSIVE: bool = true;
/// `fs/remove`'s `recursive` when Codex leaves it out.
const DEFAULT_REMOVE_RECURSIVE: bool = false;
/// `fs/remove`'s `force` when Codex leaves it out.
const DEFAULT_REMOVE_FORCE: bool = false;

/// `fs/getMetadata`: what the entry is (a final link reported as a link).
pub(crate) async fn get_metadata(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: FsPathParams = params(raw)?;
    let (ws, rel) = workspace_for(conn, FileOp::Read, &ask.path)?;
    let stat = blocking(move || {
        let target = ws.resolve(&rel)?;
        ws.stat(&target)
    })
    .await
    .map_err(|e| fs_error(&e))?;
    to_value(&FsGetMetadataResponse {
        is_directory: stat.kind == StatKind::Directory,
        is_file: stat.kind == StatKind::File,
        is_symlink: stat.kind == StatKind::Symlink,
        size: stat.size,
        created_at_ms: 0,
        modified_at_ms: millis(stat.modified),
    })
}

/// `fs/readFile`: the whole file, base64.
pub(crate) async fn read_file(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: FsPathParams = params(raw)?;
    let (ws, rel) = workspace_for(conn, FileOp::Read, &ask.path)?;
    let bytes = blocking(move || {
        let target = ws.resolve(&rel)?;
        let (file, size, _) = ws.open_file(&target)?;
        if size > MAX_READ_FILE_BYTES {
            return Err(WorkspaceError::Invalid {
                path: target.shown.clone(),
                why: format!(
                    "it is larger than fs/readFile's limit of {MAX_READ_FILE_BYTES} bytes"
                ),
            });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.take(MAX_READ_FILE_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|source| WorkspaceError::Io {
                path: target.shown.clone(),
                source,
            })?;
        Ok(bytes)
    })
    .await
    .map_err(|e| fs_error(&e))?;
    to_value(&FsReadFileResponse {
        data_base64: ByteChunk(bytes),
    })
}

/// `fs/writeFile`: the whole file, replaced atomically; its parent must
/// exist (`-32004` otherwise). An existing file keeps its permission bits.
pub(crate) async fn write_file(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: FsWriteFileParams = params(raw)?;
    let (ws, rel) = workspace_for(conn, FileOp::Write, &ask.path)?;
    let data = ask.data_base64.0;
    blocking(move || {
        let target = ws.resolve(&rel)?;
        require_parent(&ws, &target)?;
        let mode = ws
            .open_file(&target)
            .ok()
            .and_then(|(f, _, _)| f.metadata().ok())
            .map_or(NEW_FILE_MODE, |m| {
                std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777
            });
        let mut pending = ws.begin_write(&target, mode)?;
        let mut file = pending.take_file().ok_or_else(|| WorkspaceError::Io {
            path: target.shown.clone(),
            source: std::io::Error::other("the pending write has no file"),
        })?;
        file.write_all(&data)
            .and_then(|()| file.sync_all())
            .map_err(|source| WorkspaceError::Io {
                path: target.shown.clone(),
                source,
            })?;
        drop(file);
        pending.commit()
    })
    .await
    .map_err(|e| fs_error(&e))?;
    Ok(serde_json::json!({}))
}

/// `fs/createDirectory`: with `recursive` (the default) its missing
/// parents too and an existing directory is fine; without, its parent
/// must exist and it must not.
pub(crate) async fn create_directory(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: FsPathParams = params(raw)?;
    let recursive = ask.recursive.unwrap_or(DEFAULT_MKDIR_RECURSIVE);
    let (ws, rel) = workspace_for(conn, FileOp::Write, &ask.path)?;
    blocking(move || {
        let target = ws.resolve(&rel)?;
        if !recursive {
            require_parent(&ws, &target)?;
        }
        let made = ws.make_dir(&target)?;
        if !made && !recursive {
            return Err(WorkspaceError::Invalid {
                path: target.shown.clone(),
                why: "it already exists".to_owned(),
            });
        }
        Ok(())
    })
    .await
    .map_err(|e| fs_error(&e))?;
    Ok(serde_json::json!({}))
}

/// `fs/readDirectory`: the entries, by name.
pub(crate) async fn read_directory(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: FsPathParams = params(raw)?;
    let (ws, rel) = workspace_for(conn, FileOp::List, &ask.path)?;
    let entries = blocking(move || {
        let target = ws.resolve(&rel)?;
        ws.list(&target)
    })
    .await
    .map_err(|e| fs_error(&e))?;
    to_value(&FsReadDirectoryResponse {
        entries: entries
            .into_iter()
            .map(|e| FsReadDirectoryEntry {
                file_name: e.name,
                is_directory: e.kind == EntryKind::Directory,
                is_file: e.kind == EntryKind::File,
            })
            .collect(),
    })
}

/// `fs/remove`: a file or link, an empty directory, or with `recursive` a
/// tree; with `force` a missing path is no error.
pub(crate) async fn remove(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: FsPathParams = params(raw)?;
    let (recursive, force) = (
        ask.recursive.unwrap_or(DEFAULT_REMOVE_RECURSIVE),
        ask.force.unwrap_or(DEFAULT_REMOVE_FORCE),
    );
    let (ws, rel) = workspace_for(conn, FileOp::Remove, &ask.path)?;
    let removed = blocking(move || {
        let target = ws.resolve_entry(&rel)?;
        ws.remove(&target, recursive)
    })
    .await;
    match removed {
        Ok(()) => Ok(serde_json::json!({})),
        Err(WorkspaceError::NotFound { .. }) if force => Ok(serde_json::json!({})),
        Err(e) => Err(fs_error(&e)),
    }
}

/// The broker's word on `op` over Codex's URI `uri`: the workspace it is
/// placed in (the root or one of the policy's writable roots, as at every
/// door) and the path relative to that workspace.
fn workspace_for(
    conn: &Connection,
    op: FileOp,
    uri: &str,
) -> Result<(Workspace, String), RpcError> {
    let path = super::uri::to_path(uri).map_err(|e| RpcError::invalid_params(e.to_string()))?;
    let placed = conn
        .broker
        .place(&conn.caller, op, &path.to_string_lossy())
        .map_err(|e| match e {
            PlaceError::Outside(outside) if !op.writes() => {
                RpcError::new(codes::NOT_FOUND, format!("not found: {outside}"))
            }
            PlaceError::Outside(outside) => {
                RpcError::new(codes::INVALID_REQUEST, outside.to_string())
            }
            PlaceError::Refused(r) => RpcError::new(
                codes::INVALID_REQUEST,
                format!("{} (error kind {})", r.message, r.kind),
            ),
        })?;
    Ok((placed.workspace, placed.rel))
}

/// Refuses `target` unless the directory holding it exists (`NotFound`).
fn require_parent(
    ws: &Workspace,
    target: &crate::broker::files::surface::Target,
) -> Result<(), WorkspaceError> {
    let Some((parent, _)) = target.split() else {
        return Ok(());
    };
    let parent = ws.resolve(&parent.to_string_lossy())?;
    match ws.node(&parent)? {
        crate::broker::files::surface::fs::Node::Directory => Ok(()),
        _ => Err(WorkspaceError::NotFound {
            path: target.shown.clone(),
        }),
    }
}

fn millis(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The JSON-RPC error of a failed workspace operation: Codex's `-32004`
/// for a missing path.
pub(crate) fn fs_error(err: &WorkspaceError) -> RpcError {
    let code = match err {
        WorkspaceError::NotFound { .. } => codes::NOT_FOUND,
        WorkspaceError::Escapes { .. }
        | WorkspaceError::Denied { .. }
        | WorkspaceError::Protected { .. }
        | WorkspaceError::Root => codes::INVALID_REQUEST,
        WorkspaceError::IsDirectory { .. }
        | WorkspaceError::NotEmpty { .. }
        | WorkspaceError::Invalid { .. } => codes::INVALID_PARAMS,
        WorkspaceError::Io { .. } => codes::INTERNAL_ERROR,
    };
    RpcError::new(code, err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_path_is_codex_s_not_found_and_an_escape_a_refusal() {
        let missing = WorkspaceError::NotFound { path: "x".into() };
        assert_eq!(fs_error(&missing).code, codes::NOT_FOUND);
        let out = WorkspaceError::Escapes {
            path: "../x".into(),
        };
        assert_eq!(fs_error(&out).code, codes::INVALID_REQUEST);
    }
}
