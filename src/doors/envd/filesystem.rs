//! `filesystem.Filesystem`: `Stat`, `ListDir` (to a depth), `MakeDir`,
//! `Move` and `Remove`, each planned by the broker like a command (a write
//! where the policy is read-only is refused) and done in the workspace,
//! beneath the root. Paths are E2B's absolute paths under `--root`
//! ([`super::paths`]). `WatchDir` and the polled watchers are in
//! [`super::watch`].

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::EnvdState;
use super::connect::{Code, ConnectError};
use super::proto::filesystem::{
    EntryInfo, FileType, ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse,
    MoveRequest, MoveResponse, RemoveRequest, RemoveResponse, StatRequest, StatResponse,
};
use crate::broker::files::surface::manage::{EntryStat, StatKind};
use crate::broker::files::surface::upload::blocking;
use crate::broker::files::surface::{Entry, EntryKind, Workspace, WorkspaceError};
use crate::gate::Caller;
use crate::plan::FileOp;

/// `ListDir`'s depth when the caller gives none (0).
const DEFAULT_DEPTH: u32 = 1;
/// The deepest `ListDir` walks.
const MAX_DEPTH: u32 = 64;

/// `POST /filesystem.Filesystem/Stat`.
pub(crate) async fn stat(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "filesystem.StatRequest",
        "filesystem.StatResponse",
        |r: StatRequest| async move {
            let (ws, rel) = workspace_for(&state, &caller, FileOp::Read, &r.path)?;
            let root = ws.root().to_path_buf();
            let entry = blocking(move || {
                let target = ws.resolve_entry(&rel)?;
                Ok(entry_info(&root, &rel, &ws.stat(&target)?))
            })
            .await
            .map_err(|e| fs_error(&e))?;
            Ok(StatResponse { entry: Some(entry) })
        },
    )
    .await
}

/// `POST /filesystem.Filesystem/ListDir`: entries to `depth` levels.
pub(crate) async fn list_dir(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "filesystem.ListDirRequest",
        "filesystem.ListDirResponse",
        |r: ListDirRequest| async move {
            let (ws, rel) = workspace_for(&state, &caller, FileOp::List, &r.path)?;
            let root = ws.root().to_path_buf();
            let depth = if r.depth == 0 {
                DEFAULT_DEPTH
            } else {
                r.depth.min(MAX_DEPTH)
            };
            let cap = state.broker.limits().max_walk_entries;
            let walk = blocking(move || ws.walk(&rel, depth, cap))
                .await
                .map_err(|e| fs_error(&e))?;
            if walk.truncated {
                // E2B's ListDirResponse has no field to say it was cut.
                return Err(ConnectError::new(
                    Code::ResourceExhausted,
                    format!(
                        "{:?} holds more than {cap} entries to depth {depth} (the operator's [limits] max_walk_entries): list a narrower directory or a smaller depth",
                        r.path
                    ),
                ));
            }
            let entries = walk
                .entries
                .iter()
                .map(|walked| entry_of(&root, &walked.rel, &walked.entry))
                .collect();
            Ok(ListDirResponse { entries })
        },
    )
    .await
}

/// `POST /filesystem.Filesystem/MakeDir`: `already_exists` when it was there.
pub(crate) async fn make_dir(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "filesystem.MakeDirRequest",
        "filesystem.MakeDirResponse",
        |r: MakeDirRequest| async move {
            let (ws, rel) = workspace_for(&state, &caller, FileOp::Write, &r.path)?;
            let root = ws.root().to_path_buf();
            let made = blocking(move || {
                let target = ws.resolve(&rel)?;
                if !ws.make_dir(&target)? {
                    return Ok(None);
                }
                Ok(Some(entry_info(&root, &rel, &ws.stat(&target)?)))
            })
            .await
            .map_err(|e| fs_error(&e))?;
            match made {
                Some(entry) => Ok(MakeDirResponse { entry: Some(entry) }),
                None => Err(ConnectError::new(
                    Code::AlreadyExists,
                    format!("directory {} already exists", r.path),
                )),
            }
        },
    )
    .await
}

/// `POST /filesystem.Filesystem/Move`.
pub(crate) async fn move_entry(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "filesystem.MoveRequest",
        "filesystem.MoveResponse",
        |r: MoveRequest| async move {
            let (ws, from) = workspace_for(&state, &caller, FileOp::Move, &r.source)?;
            let (into, to) = workspace_for(&state, &caller, FileOp::Move, &r.destination)?;
            if into.root() != ws.root() {
                return Err(ConnectError::new(
                    Code::InvalidArgument,
                    format!(
                        "cannot move {} to {}: they lie in different roots ({} and {})",
                        r.source,
                        r.destination,
                        ws.root().display(),
                        into.root().display()
                    ),
                ));
            }
            let root = ws.root().to_path_buf();
            let entry = blocking(move || {
                let source = ws.resolve_entry(&from)?;
                let destination = ws.resolve(&to)?;
                ws.rename(&source, &destination)?;
                let moved = ws.resolve_entry(&to)?;
                Ok(entry_info(&root, &to, &ws.stat(&moved)?))
            })
            .await
            .map_err(|e| fs_error(&e))?;
            Ok(MoveResponse { entry: Some(entry) })
        },
    )
    .await
}

/// `POST /filesystem.Filesystem/Remove`: a file, a link, or a whole tree.
pub(crate) async fn remove(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "filesystem.RemoveRequest",
        "filesystem.RemoveResponse",
        |r: RemoveRequest| async move {
            let (ws, rel) = workspace_for(&state, &caller, FileOp::Remove, &r.path)?;
            blocking(move || {
                let target = ws.resolve_entry(&rel)?;
                ws.remove(&target, true)
            })
            .await
            .map_err(|e| fs_error(&e))?;
            Ok(RemoveResponse {})
        },
    )
    .await
}

/// The broker's word on `op` over the E2B path `path`: the workspace it
/// lies in (the root or a writable root of the policy) and the path
/// relative to that workspace.
pub(crate) fn workspace_for(
    state: &EnvdState,
    caller: &Caller,
    op: FileOp,
    path: &str,
) -> Result<(Workspace, String), ConnectError> {
    let placed = state
        .broker
        .place(caller, op, path)
        .map_err(|why| ConnectError::new(Code::PermissionDenied, why.to_string()))?;
    Ok((placed.workspace, placed.rel))
}

/// E2B's `EntryInfo` of one listed entry at `rel` (a link as what it
/// points to, as the listing shows it).
fn entry_of(root: &std::path::Path, rel: &str, entry: &Entry) -> EntryInfo {
    let is_dir = entry.kind == EntryKind::Directory;
    EntryInfo {
        name: entry.name.clone(),
        r#type: if is_dir {
            FileType::Directory
        } else {
            FileType::File
        } as i32,
        path: super::paths::shown(root, rel),
        size: i64::try_from(entry.size).unwrap_or(i64::MAX),
        mode: entry.mode,
        permissions: permissions(if is_dir { 0o040_000 } else { 0o100_000 } | entry.mode),
        modified_time: Some(timestamp(entry.modified)),
        ..EntryInfo::default()
    }
}

/// E2B's `EntryInfo` of the entry at `rel`.
pub(crate) fn entry_info(root: &std::path::Path, rel: &str, stat: &EntryStat) -> EntryInfo {
    let shown = super::paths::shown(root, rel);
    let name = std::path::Path::new(&shown)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let r#type = match stat.kind {
        StatKind::Directory => FileType::Directory,
        StatKind::Symlink => FileType::Symlink,
        StatKind::File | StatKind::Other => FileType::File,
    };
    EntryInfo {
        name,
        r#type: r#type as i32,
        path: shown,
        size: i64::try_from(stat.size).unwrap_or(i64::MAX),
        mode: stat.mode & 0o7777,
        permissions: permissions(stat.mode),
        owner: user_name(stat.uid),
        group: group_name(stat.gid),
        modified_time: Some(timestamp(stat.modified)),
        symlink_target: stat.link_target.clone(),
        metadata: Default::default(),
    }
}

fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(uid.into())
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name)
}

fn group_name(gid: u32) -> String {
    nix::unistd::Group::from_gid(gid.into())
        .ok()
        .flatten()
        .map_or_else(|| gid.to_string(), |g| g.name)
}

/// `ls -l`'s permission string of `st_mode` (`drwxr-xr-x`), as Go writes it.
fn permissions(mode: u32) -> String {
    let kind = match mode & 0o170_000 {
        0o040_000 => 'd',
        0o120_000 => 'L',
        _ => '-',
    };
    let mut out = String::with_capacity(10);
    out.push(kind);
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 0o7;
        out.push(if bits & 0o4 != 0 { 'r' } else { '-' });
        out.push(if bits & 0o2 != 0 { 'w' } else { '-' });
        out.push(if bits & 0o1 != 0 { 'x' } else { '-' });
    }
    out
}

fn timestamp(time: std::time::SystemTime) -> prost_types::Timestamp {
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(since.subsec_nanos()).unwrap_or(0),
    }
}

/// The Connect error of a failed workspace operation.
pub(crate) fn fs_error(err: &WorkspaceError) -> ConnectError {
    let code = match err {
        WorkspaceError::NotFound { .. } => Code::NotFound,
        WorkspaceError::Escapes { .. }
        | WorkspaceError::Denied { .. }
        | WorkspaceError::Protected { .. }
        | WorkspaceError::Root => Code::PermissionDenied,
        WorkspaceError::IsDirectory { .. }
        | WorkspaceError::NotEmpty { .. }
        | WorkspaceError::Invalid { .. } => Code::InvalidArgument,
        // A limit of the system (descriptors, inotify instances, space).
        WorkspaceError::Io { source, .. }
            if matches!(
                source.raw_os_error(),
                Some(libc::EMFILE | libc::ENFILE | libc::ENOSPC | libc::EDQUOT)
            ) =>
        {
            Code::ResourceExhausted
        }
        WorkspaceError::Io { .. } => Code::Internal,
    };
    ConnectError::new(code, err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_like_ls() {
        assert_eq!(permissions(0o040_755), "drwxr-xr-x");
        assert_eq!(permissions(0o100_644), "-rw-r--r--");
        assert_eq!(permissions(0o120_777), "Lrwxrwxrwx");
    }

    #[test]
    fn a_limit_of_the_system_is_resource_exhausted_and_other_failures_internal() {
        let io = |errno| WorkspaceError::Io {
            path: "w".into(),
            source: std::io::Error::from_raw_os_error(errno),
        };
        assert_eq!(fs_error(&io(libc::EMFILE)).code, Code::ResourceExhausted);
        assert_eq!(fs_error(&io(libc::ENOSPC)).code, Code::ResourceExhausted);
        assert_eq!(fs_error(&io(libc::EIO)).code, Code::Internal);
    }

    #[test]
    fn a_missing_path_is_not_found_and_an_escape_is_denied() {
        let missing = WorkspaceError::NotFound { path: "x".into() };
        assert_eq!(fs_error(&missing).code, Code::NotFound);
        let out = WorkspaceError::Escapes {
            path: "../x".into(),
        };
        assert_eq!(fs_error(&out).code, Code::PermissionDenied);
    }
}
