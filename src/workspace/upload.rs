//! A request body streamed into a workspace file: the one upload path of
//! the listeners (sandboxd `PUT /v1/files`, python-runtime `/upload`), with
//! the body limit counted as it arrives and the file renamed into place
//! only once it is complete and synced.

use std::fmt::Display;

use axum::body::Bytes;
use tokio::io::AsyncWriteExt;
use tokio_stream::{Stream, StreamExt};

use super::{Target, Workspace, WorkspaceError};

/// Why an upload did not land.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadError {
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("the upload is larger than the limit of {limit} bytes")]
    TooLarge { limit: usize },
    #[error("the request body could not be read: {0}")]
    Body(String),
}

/// Runs blocking workspace work off the async threads.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, WorkspaceError>
where
    F: FnOnce() -> Result<T, WorkspaceError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| WorkspaceError::Io {
            path: String::new(),
            source: std::io::Error::other(e.to_string()),
        })?
}

/// Writes `body` to `target` with permission bits `mode`, at most `limit`
/// bytes; returns the number written. Nothing is left behind on failure.
pub(crate) async fn write_stream<S, E>(
    workspace: &Workspace,
    target: Target,
    mode: u32,
    limit: usize,
    mut body: S,
) -> Result<u64, UploadError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: Display,
{
    let ws = workspace.clone();
    let shown = target.shown.clone();
    let mut pending = blocking(move || ws.begin_write(&target, mode)).await?;
    let std_file = pending
        .take_file()
        .ok_or_else(|| UploadError::Body("no file".to_owned()))?;
    let mut file = tokio::fs::File::from_std(std_file);
    let io = |source: std::io::Error| {
        UploadError::Workspace(WorkspaceError::Io {
            path: shown.clone(),
            source,
        })
    };
    let mut written: u64 = 0;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| UploadError::Body(e.to_string()))?;
        written += chunk.len() as u64;
        if written > limit as u64 {
            return Err(UploadError::TooLarge { limit });
        }
        file.write_all(&chunk).await.map_err(io)?;
    }
    file.flush().await.map_err(io)?;
    file.sync_all().await.map_err(io)?;
    drop(file);
    blocking(move || pending.commit()).await?;
    Ok(written)
}

/// The bytes of a file the workspace opened, as a stream for a reply body
/// (a download): read as the client takes them, never whole in memory.
pub(crate) fn read_stream(file: std::fs::File) -> tokio_util::io::ReaderStream<tokio::fs::File> {
    tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file))
}

/// An upload's bytes, spooled to an unnamed temporary file as they arrive
/// (`O_TMPFILE` where the kernel has it): never in memory, and gone with
/// the last handle whatever happens, a killed server included.
#[derive(Debug)]
pub(crate) struct Spool {
    file: std::fs::File,
    len: u64,
}

impl Spool {
    /// Writes `body` to a new spool file, at most `limit` bytes.
    pub(crate) async fn fill<S, E>(mut body: S, limit: usize) -> Result<Self, UploadError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: Display,
    {
        use std::io::Seek;
        let io = |source| {
            UploadError::Workspace(WorkspaceError::Io {
                path: String::new(),
                source,
            })
        };
        let file = blocking(|| {
            tempfile::tempfile().map_err(|source| WorkspaceError::Io {
                path: String::new(),
                source,
            })
        })
        .await?;
        let mut file = tokio::fs::File::from_std(file);
        let mut len: u64 = 0;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| UploadError::Body(e.to_string()))?;
            len += chunk.len() as u64;
            if len > limit as u64 {
                return Err(UploadError::TooLarge { limit });
            }
            file.write_all(&chunk).await.map_err(io)?;
        }
        file.flush().await.map_err(io)?;
        let mut file = file.into_std().await;
        file.rewind().map_err(io)?;
        Ok(Self { file, len })
    }

    /// How many bytes it holds.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// The file, at its start.
    pub(crate) fn into_file(self) -> std::fs::File {
        self.file
    }
}
