//! `/read_file`, `/write_file` and `/upload` of the SWE-ReX API, with the
//! original's Python semantics (`Path.read_text` with `encoding` and
//! `errors`, parents made on write, `unzip` into a directory) and its
//! Python exceptions on failure.
//!
//! Every route is a file operation planned like a command (see
//! [`crate::plan::files`]): refused where raw commands are, a write refused
//! under a `read-only` policy, names with line breaks refused. Paths are
//! the client's, absolute as in the original (the `swerex-remote`
//! personality serves with root `/` unless `--root` says otherwise);
//! relative ones are taken from the server's working directory when it is
//! inside the root, else from the root. Whatever a path names must lie
//! under `--root`: it is resolved in the [`Workspace`] (no `..` or link
//! leading out), and every write lands through a pending write (temporary
//! file beside the destination, renamed into place when complete).
//!
//! An upload is spooled to an unnamed temporary file as it arrives
//! ([`Spool`]), never held in memory; the kernel frees it whatever happens.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use axum::body::Bytes;
use tokio_stream::Stream;

use super::error::{PyClass, SwerexError};
use super::model::{ReadFile, WriteFile};
use crate::broker::Broker;
use crate::broker::files::surface::fs::Node;
pub(crate) use crate::broker::files::surface::upload::Spool;
use crate::broker::files::surface::upload::UploadError;
use crate::broker::files::surface::{Target, Workspace, WorkspaceError};
use crate::gate::Caller;
use crate::plan::{FileOp, FilePermit, Rejection};
use crate::registry::kinds;

/// The file name an upload without one is saved under in a directory.
const UPLOAD_FILE_NAME: &str = "temp_file_transfer";
/// The permission bits of a file the routes create (Python's `open` under
/// the usual umask 022).
pub(crate) const NEW_FILE_MODE: u32 = 0o644;

/// One file operation the broker allowed: its permit, the workspace and
/// where relative paths start.
#[derive(Debug, Clone)]
pub(crate) struct Files {
    permit: FilePermit,
    workspace: Workspace,
    base: PathBuf,
}

impl Files {
    /// The broker's word on `op` over `paths` for `caller` (refused as
    /// the client's exception or the listener's 403), relative paths
    /// starting at `base`.
    pub(crate) fn granted(
        broker: &Broker,
        caller: &Caller,
        base: &Path,
        op: FileOp,
        paths: &[&str],
    ) -> Result<Self, SwerexError> {
        let grant = broker.files(caller, op, paths).map_err(refused)?;
        // The workspace the operation's path lies in: the root, or a
        // writable root of the policy. A path in neither is refused by
        // `target` as leading out of the root.
        let workspace = paths
            .first()
            .map(|path| absolute(base, path))
            .and_then(|path| grant.place(&path.to_string_lossy()).ok())
            .map_or_else(|| grant.workspace().clone(), |placed| placed.workspace);
        Ok(Self {
            permit: grant.permit(),
            workspace,
            base: base.to_path_buf(),
        })
    }

    /// The planner's word this operation holds.
    pub(crate) fn permit(&self) -> FilePermit {
        self.permit
    }

    /// The client's `path` resolved in the workspace; a path outside the
    /// root is a `PermissionError`, as the kernel would say it.
    fn target(&self, path: &str) -> Result<Target, SwerexError> {
        let absolute = absolute(&self.base, path);
        if !absolute.starts_with(self.workspace.root()) {
            return Err(py_error(
                WorkspaceError::Escapes {
                    path: path.to_owned(),
                },
                path,
            ));
        }
        self.workspace
            .resolve(&absolute.to_string_lossy())
            .map(|mut target| {
                target.shown = path.to_owned();
                target
            })
            .map_err(|e| py_error(e, path))
    }
}

/// The client's `path`, relative ones from `base`.
fn absolute(base: &Path, path: &str) -> PathBuf {
    let given = Path::new(path);
    if given.is_absolute() {
        given.to_path_buf()
    } else {
        base.join(given)
    }
}

/// Where relative paths (and commands without a `cwd`) start: the server's
/// working directory when it is inside the root (the original's
/// behaviour), else the root.
pub(crate) fn base_dir(root: &Path) -> PathBuf {
    std::env::current_dir()
        .ok()
        .and_then(|d| d.canonicalize().ok())
        .filter(|d| d.starts_with(root))
        .unwrap_or_else(|| root.to_path_buf())
}

/// A refusal of the plan stage: a bad name is the client's `ValueError`
/// (511, re-raised), a policy refusal the listener's 403.
pub(crate) fn refused(rejection: Rejection) -> SwerexError {
    if rejection.kind == kinds::INVALID_PARAMS {
        return SwerexError::raise(PyClass::Value, rejection.message);
    }
    SwerexError::Refused {
        kind: rejection.kind,
        message: rejection.message,
    }
}

/// A workspace error as the Python exception `open()` would raise.
pub(crate) fn py_error(err: WorkspaceError, shown: &str) -> SwerexError {
    let os = |errno: i32| SwerexError::io(&std::io::Error::from_raw_os_error(errno), shown);
    match err {
        WorkspaceError::Escapes { .. } => SwerexError::raise(
            PyClass::Permission,
            format!(
                "[Errno 13] Permission denied: {}: the path leaves the server's root",
                super::pyrepr::string(shown)
            ),
        ),
        WorkspaceError::Denied { .. } | WorkspaceError::Protected { .. } => os(libc::EACCES),
        WorkspaceError::NotFound { .. } => os(libc::ENOENT),
        WorkspaceError::IsDirectory { .. } => os(libc::EISDIR),
        WorkspaceError::NotEmpty { .. } => os(libc::ENOTEMPTY),
        WorkspaceError::Root => os(libc::EBUSY),
        WorkspaceError::Invalid { why, .. } => SwerexError::raise(
            PyClass::Os,
            format!("{}: {why}", super::pyrepr::string(shown)),
        ),
        WorkspaceError::Io { source, .. } => SwerexError::io(&source, shown),
    }
}

/// Blocking workspace work off the async threads, its failure a Python
/// exception.
async fn off_thread<T, F>(work: F) -> Result<T, SwerexError>
where
    F: FnOnce() -> Result<T, SwerexError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SwerexError::Internal(format!("the file work failed: {e}")))?
}

/// `Path(path).read_text(encoding, errors)`.
pub(crate) async fn read_file(files: Files, request: ReadFile) -> Result<String, SwerexError> {
    let path = request.path.clone();
    let bytes = off_thread(move || {
        let target = files.target(&path)?;
        let (mut file, size, _) = files
            .workspace
            .open_file(&target)
            .map_err(|e| py_error(e, &path))?;
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        file.read_to_end(&mut bytes)
            .map_err(|e| SwerexError::io(&e, &path))?;
        Ok(bytes)
    })
    .await?;
    let text = decode(
        &bytes,
        request.encoding.as_deref(),
        request.errors.as_deref(),
    )?;
    // Text mode reads with universal newlines.
    Ok(text.replace("\r\n", "\n").replace('\r', "\n"))
}

/// `Path(path).parent.mkdir(parents=True)` then `write_text(content)`; an
/// existing file keeps its permission bits.
pub(crate) async fn write_file(files: Files, request: WriteFile) -> Result<(), SwerexError> {
    off_thread(move || {
        let path = request.path.as_str();
        let target = files.target(path)?;
        let mode = existing_mode(&files.workspace, &target).unwrap_or(NEW_FILE_MODE);
        let mut pending = files
            .workspace
            .begin_write(&target, mode)
            .map_err(|e| py_error(e, path))?;
        let mut file = pending
            .take_file()
            .ok_or_else(|| SwerexError::Internal("the pending write has no file".to_owned()))?;
        file.write_all(request.content.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| SwerexError::io(&e, path))?;
        drop(file);
        pending.commit().map_err(|e| py_error(e, path))
    })
    .await
}

/// The permission bits of the regular file `target`, if there is one.
fn existing_mode(workspace: &Workspace, target: &Target) -> Option<u32> {
    let (file, _, _) = workspace.open_file(target).ok()?;
    Some(file.metadata().ok()?.permissions().mode() & 0o7777)
}

/// Spools an upload's `body` (at most `limit` bytes) to an unnamed
/// temporary file, its failures the client's exceptions.
pub(crate) async fn spool<S, E>(body: S, limit: usize) -> Result<Spool, SwerexError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    Spool::fill(body, limit).await.map_err(|e| match e {
        UploadError::Body(message) => super::error::invalid(
            "value_error",
            &["body", "file"],
            &message,
            &serde_json::Value::Null,
        ),
        UploadError::TooLarge { .. } => SwerexError::raise(PyClass::Value, e.to_string()),
        UploadError::Workspace(e) => SwerexError::Internal(format!("cannot spool the upload: {e}")),
    })
}

/// `/upload`: the spooled bytes saved at `target_path` (inside it, under
/// the client's file name, when it is a directory), or unzipped into it.
pub(crate) async fn upload(
    files: Files,
    target_path: String,
    file_name: Option<String>,
    spool: Spool,
    unzip: bool,
) -> Result<(), SwerexError> {
    off_thread(move || {
        if unzip {
            return super::unzip::extract(&files, files.permit(), &target_path, spool);
        }
        let target = files.target(&target_path)?;
        let into_dir = matches!(files.workspace.node(&target), Ok(Node::Directory));
        let (target, shown) = if into_dir {
            let name = file_name
                .as_deref()
                .and_then(|n| Path::new(n).file_name())
                .map_or_else(
                    || UPLOAD_FILE_NAME.to_owned(),
                    |n| n.to_string_lossy().into_owned(),
                );
            let inside = Path::new(&target_path).join(&name);
            let shown = inside.to_string_lossy().into_owned();
            (files.target(&shown)?, shown)
        } else {
            (target, target_path.clone())
        };
        save(&files, &target, &shown, spool.into_file(), NEW_FILE_MODE)
    })
    .await
}

/// Copies `contents` into `target` through a pending write: complete and
/// synced, or not there at all.
pub(crate) fn save(
    files: &Files,
    target: &Target,
    shown: &str,
    mut contents: impl Read,
    mode: u32,
) -> Result<(), SwerexError> {
    let mut pending = files
        .workspace
        .begin_write(target, mode)
        .map_err(|e| py_error(e, shown))?;
    let mut file = pending
        .take_file()
        .ok_or_else(|| SwerexError::Internal("the pending write has no file".to_owned()))?;
    std::io::copy(&mut contents, &mut file)
        .and_then(|_| file.sync_all())
        .map_err(|e| SwerexError::io(&e, shown))?;
    drop(file);
    pending.commit().map_err(|e| py_error(e, shown))
}

impl Files {
    /// The workspace.
    pub(crate) fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// `target` for a path the server builds (an archive entry under the
    /// client's target): confined like a client's path.
    pub(crate) fn resolve(&self, path: &str) -> Result<Target, SwerexError> {
        self.target(path)
    }
}

/// Bytes as Python's codecs decode them, for the encodings clients use.
fn decode(
    bytes: &[u8],
    encoding: Option<&str>,
    errors: Option<&str>,
) -> Result<String, SwerexError> {
    let encoding = encoding
        .unwrap_or("utf-8")
        .to_ascii_lowercase()
        .replace('_', "-");
    let errors = errors.unwrap_or("strict");
    match encoding.as_str() {
        "utf-8" | "utf8" | "u8" | "utf-8-sig" => {
            let bytes = if encoding == "utf-8-sig" {
                bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes)
            } else {
                bytes
            };
            decode_utf8(bytes, errors)
        }
        "latin-1" | "latin1" | "iso-8859-1" | "iso8859-1" | "l1" => {
            Ok(bytes.iter().map(|&b| char::from(b)).collect())
        }
        "ascii" | "us-ascii" => match bytes.iter().position(|b| !b.is_ascii()) {
            Some(at) if errors == "strict" => Err(decode_error(
                "ascii",
                bytes[at],
                at,
                "ordinal not in range(128)",
            )),
            _ => decode_utf8(bytes, errors),
        },
        other => Err(SwerexError::raise(
            PyClass::Lookup,
            format!("unknown encoding: {other}"),
        )),
    }
}

fn decode_utf8(bytes: &[u8], errors: &str) -> Result<String, SwerexError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) => match errors {
            "strict" => {
                let at = e.valid_up_to();
                Err(decode_error("utf-8", bytes[at], at, "invalid start byte"))
            }
            "ignore" => Ok(String::from_utf8_lossy(bytes).replace('\u{fffd}', "")),
            "backslashreplace" => Ok(backslash_replace(bytes)),
            _ => Ok(String::from_utf8_lossy(bytes).into_owned()),
        },
    }
}

fn decode_error(codec: &str, byte: u8, at: usize, why: &str) -> SwerexError {
    SwerexError::raise(
        PyClass::UnicodeDecode,
        format!("'{codec}' codec can't decode byte 0x{byte:02x} in position {at}: {why}"),
    )
}

fn backslash_replace(mut bytes: &[u8]) -> String {
    let mut out = String::new();
    while !bytes.is_empty() {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                out.push_str(text);
                break;
            }
            Err(e) => {
                let (good, bad) = bytes.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                let n = e.error_len().unwrap_or(bad.len()).max(1);
                for b in &bad[..n] {
                    out.push_str(&format!("\\x{b:02x}"));
                }
                bytes = &bad[n..];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_follows_the_errors_argument() {
        let bytes = b"a\xffb";
        assert!(matches!(
            decode(bytes, None, None),
            Err(SwerexError::Raise {
                class: PyClass::UnicodeDecode,
                ..
            })
        ));
        assert_eq!(decode(bytes, None, Some("ignore")).unwrap(), "ab");
        assert_eq!(decode(bytes, None, Some("replace")).unwrap(), "a\u{fffd}b");
        assert_eq!(
            decode(bytes, None, Some("backslashreplace")).unwrap(),
            "a\\xffb"
        );
        assert_eq!(decode(bytes, Some("latin-1"), None).unwrap(), "a\u{ff}b");
        assert!(decode(bytes, Some("klingon"), None).is_err());
    }
}
