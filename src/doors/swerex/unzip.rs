//! `/upload` with `unzip`: a zip archive extracted into the workspace, as
//! `zipfile.extractall` would, but within bounds a hostile archive cannot
//! pass: at most [`MAX_ENTRIES`] entries and [`MAX_UNZIPPED_BYTES`] in all,
//! no more than [`MAX_RATIO`] times its compressed size, no symbolic link
//! entries, every entry's path confined under the target in the workspace.
//!
//! Everything that can be checked from the archive's directory is checked
//! before anything is written, so a bomb or a link leaves nothing behind.
//! What can only show while inflating (an entry holding more than its
//! header says, a bad checksum, a full disk) stops the extraction, and an
//! [`ExtractionGuard`] removes what it had made.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::{PyClass, SwerexError};
use super::files::{Files, NEW_FILE_MODE, Spool, py_error, refused, save};
use crate::broker::files::surface::WorkspaceError;
use crate::plan::FilePermit;

/// The most bytes one archive unzips to.
pub(crate) const MAX_UNZIPPED_BYTES: u64 = 1024 * 1024 * 1024;
/// The most entries one archive may hold.
pub(crate) const MAX_ENTRIES: usize = 10_000;
/// How many times its compressed size an archive (or one of its entries)
/// may expand to.
pub(crate) const MAX_RATIO: u64 = 100;
/// Below this size an entry is not held to [`MAX_RATIO`] on its own (a
/// small file of repeated bytes compresses that well); the archive as a
/// whole always is, past this size.
const RATIO_FLOOR_BYTES: u64 = 1024 * 1024;
/// The name a directory entry is made through (a pending write inside it,
/// never committed): the workspace makes a write's parents.
const DIRECTORY_PROBE: &str = ".agent-reach-unzip-dir";

/// Why an archive was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UnzipError {
    #[error("zipfile.BadZipFile: {0}")]
    BadZip(String),
    #[error("the archive has {count} entries; at most {MAX_ENTRIES} are unzipped")]
    TooManyEntries { count: usize },
    #[error("the archive unzips to {total} bytes; at most {MAX_UNZIPPED_BYTES} are unzipped")]
    TooLarge { total: u64 },
    #[error(
        "entry {name:?} expands {ratio} times its compressed size; at most {MAX_RATIO} is unzipped (a zip bomb?)"
    )]
    EntryRatio { name: String, ratio: u64 },
    #[error(
        "the archive expands {ratio} times its size; at most {MAX_RATIO} is unzipped (a zip bomb?)"
    )]
    ArchiveRatio { ratio: u64 },
    #[error("entry {name:?} is a symbolic link; archives holding links are refused")]
    Symlink { name: String },
    #[error("entry {name:?} leaves the target directory (absolute, or `..` out)")]
    Escapes { name: String },
    #[error("entry {name:?} holds more than the {declared} bytes its header declares")]
    Oversized { name: String, declared: u64 },
}

impl From<UnzipError> for SwerexError {
    fn from(err: UnzipError) -> Self {
        SwerexError::raise(PyClass::Value, format!("unzip refused: {err}"))
    }
}

/// One entry to extract, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Planned {
    index: usize,
    /// Relative to the target directory, no `..`, not absolute.
    path: PathBuf,
    directory: bool,
    size: u64,
    mode: u32,
}

/// What the archive's directory says about one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Header {
    name: String,
    enclosed: Option<PathBuf>,
    directory: bool,
    symlink: bool,
    size: u64,
    compressed: u64,
    mode: Option<u32>,
}

/// The bounds, checked on the headers alone: the entries to extract, or
/// why the archive is refused.
fn check(headers: &[Header], archive_len: u64) -> Result<Vec<Planned>, UnzipError> {
    if headers.len() > MAX_ENTRIES {
        return Err(UnzipError::TooManyEntries {
            count: headers.len(),
        });
    }
    let mut total: u64 = 0;
    let mut planned = Vec::with_capacity(headers.len());
    for (index, header) in headers.iter().enumerate() {
        if header.symlink {
            return Err(UnzipError::Symlink {
                name: header.name.clone(),
            });
        }
        let Some(path) = header.enclosed.clone() else {
            return Err(UnzipError::Escapes {
                name: header.name.clone(),
            });
        };
        total = total.saturating_add(header.size);
        if total > MAX_UNZIPPED_BYTES {
            return Err(UnzipError::TooLarge { total });
        }
        if header.size > RATIO_FLOOR_BYTES {
            let ratio = header.size / header.compressed.max(1);
            if ratio > MAX_RATIO {
                return Err(UnzipError::EntryRatio {
                    name: header.name.clone(),
                    ratio,
                });
            }
        }
        planned.push(Planned {
            index,
            path,
            directory: header.directory,
            size: header.size,
            mode: header.mode.map_or(NEW_FILE_MODE, |m| m & 0o777),
        });
    }
    if total > RATIO_FLOOR_BYTES {
        let ratio = total / archive_len.max(1);
        if ratio > MAX_RATIO {
            return Err(UnzipError::ArchiveRatio { ratio });
        }
    }
    Ok(planned)
}

/// Removes what an extraction made unless it finished: the topmost new
/// directory or file of each entry, newest first.
struct ExtractionGuard<'a> {
    files: &'a Files,
    made: Vec<String>,
    done: bool,
}

impl ExtractionGuard<'_> {
    /// Notes the topmost part of `path` that does not exist yet, before it
    /// is made.
    fn note_new(&mut self, path: &Path) {
        let mut topmost = None;
        for ancestor in path.ancestors() {
            if ancestor.as_os_str().is_empty() {
                break;
            }
            let shown = ancestor.to_string_lossy();
            let exists = self
                .files
                .resolve(&shown)
                .is_ok_and(|t| self.files.workspace().node(&t).is_ok());
            if exists {
                break;
            }
            topmost = Some(shown.into_owned());
        }
        if let Some(new) = topmost
            && !self.made.contains(&new)
        {
            self.made.push(new);
        }
    }
}

impl Drop for ExtractionGuard<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let ws = self.files.workspace();
        for path in self.made.iter().rev() {
            let Ok(made) = self.files.resolve(path) else {
                continue;
            };
            if let Ok(target) = ws.resolve_entry(&made.rel.to_string_lossy()) {
                let _ = ws.remove(&target, true);
            }
        }
    }
}

/// Makes the directory `path` (and its parents) in the workspace.
fn make_dir(files: &Files, path: &Path) -> Result<(), SwerexError> {
    let shown = path.to_string_lossy();
    let target = files.resolve(&shown)?;
    match files.workspace().node(&target) {
        Ok(crate::broker::files::surface::fs::Node::Directory) => return Ok(()),
        Ok(_) => {
            return Err(py_error(
                WorkspaceError::Invalid {
                    path: shown.into_owned(),
                    why: "a file is where the archive has a directory".to_owned(),
                },
                &path.to_string_lossy(),
            ));
        }
        Err(_) => {}
    }
    let probe = files.resolve(&path.join(DIRECTORY_PROBE).to_string_lossy())?;
    // Its parents are made; the probe itself is removed on drop.
    drop(
        files
            .workspace()
            .begin_write(&probe, NEW_FILE_MODE)
            .map_err(|e| py_error(e, &shown))?,
    );
    Ok(())
}

/// Extracts the spooled archive into `target_path`.
pub(crate) fn extract(
    files: &Files,
    permit: FilePermit,
    target_path: &str,
    spool: Spool,
) -> Result<(), SwerexError> {
    let archive_len = spool.len();
    let mut archive =
        zip::ZipArchive::new(spool.into_file()).map_err(|e| UnzipError::BadZip(e.to_string()))?;
    let mut headers = Vec::with_capacity(archive.len().min(MAX_ENTRIES + 1));
    for index in 0..archive.len() {
        if headers.len() > MAX_ENTRIES {
            break;
        }
        let entry = archive
            .by_index_raw(index)
            .map_err(|e| UnzipError::BadZip(e.to_string()))?;
        headers.push(Header {
            name: entry.name().to_owned(),
            enclosed: entry.enclosed_name(),
            directory: entry.is_dir(),
            symlink: entry.is_symlink(),
            size: entry.size(),
            compressed: entry.compressed_size(),
            mode: entry.unix_mode(),
        });
    }
    permit
        .check_names(headers.iter().map(|h| h.name.as_str()))
        .map_err(refused)?;
    let planned = check(&headers, archive_len)?;
    let base = Path::new(target_path);
    // Every entry confined before anything is written.
    let mut targets = Vec::with_capacity(planned.len());
    for entry in &planned {
        let path = base.join(&entry.path);
        let target = files.resolve(&path.to_string_lossy())?;
        targets.push((path, target));
    }
    let mut guard = ExtractionGuard {
        files,
        made: Vec::new(),
        done: false,
    };
    guard.note_new(base);
    make_dir(files, base)?;
    for (entry, (path, target)) in planned.iter().zip(&targets) {
        guard.note_new(path);
        if entry.directory {
            make_dir(files, path)?;
            continue;
        }
        let shown = path.to_string_lossy();
        let mut file = archive
            .by_index(entry.index)
            .map_err(|e| UnzipError::BadZip(e.to_string()))?;
        let mut counted = CountingReader {
            inner: (&mut file).take(entry.size.saturating_add(1)),
            read: 0,
        };
        save(files, target, &shown, &mut counted, entry.mode)?;
        if counted.read > entry.size {
            return Err(UnzipError::Oversized {
                name: path.to_string_lossy().into_owned(),
                declared: entry.size,
            }
            .into());
        }
    }
    guard.done = true;
    Ok(())
}

/// A reader that counts what went through it.
struct CountingReader<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, size: u64, compressed: u64) -> Header {
        Header {
            name: name.to_owned(),
            enclosed: Some(PathBuf::from(name)),
            directory: false,
            symlink: false,
            size,
            compressed,
            mode: None,
        }
    }

    #[test]
    fn an_ordinary_archive_passes_with_its_modes() {
        let mut script = header("bin/run.sh", 100, 60);
        script.mode = Some(0o100755);
        let planned = check(&[header("a.txt", 10, 10), script], 400).unwrap();
        assert_eq!(planned.len(), 2);
        assert_eq!(planned[0].mode, NEW_FILE_MODE);
        assert_eq!(planned[1].mode, 0o755);
    }

    #[test]
    fn a_bomb_is_refused_by_its_ratio() {
        let bomb = header("zeros", 500 * 1024 * 1024, 510 * 1024);
        assert!(matches!(
            check(&[bomb], 510 * 1024),
            Err(UnzipError::EntryRatio { .. })
        ));
        // Many small entries that add up: the archive's own ratio.
        let many: Vec<Header> = (0..1000)
            .map(|i| header(&format!("f{i}"), 1024 * 1024, 1024))
            .collect();
        assert!(matches!(
            check(&many, 1024 * 1024),
            Err(UnzipError::ArchiveRatio { .. })
        ));
        // A small file of repeated bytes is fine.
        assert!(check(&[header("pad", 64 * 1024, 80)], 300).is_ok());
    }

    #[test]
    fn size_and_count_are_bounded() {
        let huge = header("big", MAX_UNZIPPED_BYTES + 1, MAX_UNZIPPED_BYTES);
        assert!(matches!(
            check(&[huge], MAX_UNZIPPED_BYTES),
            Err(UnzipError::TooLarge { .. })
        ));
        let many: Vec<Header> = (0..=MAX_ENTRIES)
            .map(|i| header(&format!("f{i}"), 0, 0))
            .collect();
        assert!(matches!(
            check(&many, 100_000),
            Err(UnzipError::TooManyEntries { .. })
        ));
    }

    #[test]
    fn links_and_escaping_names_are_refused() {
        let mut link = header("up", 11, 11);
        link.symlink = true;
        assert!(matches!(
            check(&[link], 100),
            Err(UnzipError::Symlink { .. })
        ));
        let mut out = header("../x", 1, 1);
        out.enclosed = None;
        assert!(matches!(
            check(&[out], 100),
            Err(UnzipError::Escapes { .. })
        ));
    }
}
