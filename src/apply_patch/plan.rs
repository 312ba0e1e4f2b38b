//! A whole patch worked out in memory before anything is written.
//!
//! Each operation runs against a virtual view of the files it touches
//! (loaded from disk on first use), so later operations see earlier ones:
//! a file deleted and added again, or updated twice, behaves as in order.
//! Any failure returns before a single byte is written. The result is the
//! list of file writes and removals that [`super::commit`] carries out.

use std::collections::HashMap;
use std::fs::Metadata;
use std::path::{Path, PathBuf};

use super::ApplyOptions;
use super::error::ApplyPatchError;
use super::hunks::apply_chunks;
use super::parser::{Operation, Patch};
use super::paths::{ResolvedPath, Workdir};
use super::report::{ApplyReport, ChangeKind};
use super::text::TextFile;

/// What a replaced or moved file keeps: its mode bits and owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileAttrs {
    /// Permission bits (`st_mode & 0o7777`).
    pub(crate) mode: u32,
    /// Owner.
    pub(crate) uid: u32,
    /// Group.
    pub(crate) gid: u32,
}

impl From<&Metadata> for FileAttrs {
    fn from(meta: &Metadata) -> Self {
        let (mode, uid, gid) = super::file_meta::attrs(meta);
        Self { mode, uid, gid }
    }
}

/// Identifies a file's state when it was read: if any part differs at
/// commit time, someone else changed the file and the patch is not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl Stamp {
    /// The stamp of the entry at `path` (links not followed).
    pub(crate) fn of(path: &Path) -> std::io::Result<Self> {
        std::fs::symlink_metadata(path).map(|meta| Self::from(&meta))
    }
}

impl From<&Metadata> for Stamp {
    fn from(meta: &Metadata) -> Self {
        let (dev, ino, size, mtime, mtime_nsec) = super::file_meta::stamp(meta);
        Self {
            dev,
            ino,
            size,
            mtime,
            mtime_nsec,
        }
    }
}

/// What was on disk at a path before the patch.
#[derive(Debug, Clone)]
enum OnDisk {
    Missing,
    NotAFile,
    File(FileAttrs, Stamp),
    Symlink(Stamp),
}

impl OnDisk {
    fn stamp(&self) -> Option<Stamp> {
        match self {
            OnDisk::File(_, stamp) | OnDisk::Symlink(stamp) => Some(*stamp),
            OnDisk::Missing | OnDisk::NotAFile => None,
        }
    }
}

/// A path's state as the patch goes along.
#[derive(Debug, Clone)]
struct Slot {
    on_disk: OnDisk,
    /// `None`: absent now. `Some(None)`: present, unchanged from disk.
    /// `Some(Some(bytes))`: present with new contents.
    now: Option<Option<Vec<u8>>>,
    /// Attributes for new contents (a moved file keeps its own).
    attrs: Option<FileAttrs>,
}

/// One change to make on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FileWrite {
    /// Write `bytes` at `path` (creating or replacing it).
    Put {
        /// The resolved path.
        path: PathBuf,
        /// The new contents.
        bytes: Vec<u8>,
        /// Mode and owner to give it (`None`: a new file, the umask decides).
        attrs: Option<FileAttrs>,
        /// The file it replaces, as it was read; `None` for a new file.
        replaces: Option<Stamp>,
    },
    /// Remove the entry at `path`.
    Remove {
        /// The resolved path.
        path: PathBuf,
        /// The entry as it was read.
        stamp: Stamp,
    },
}

/// A patch ready to be written: every check has passed.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The writes, in the order the paths were first touched.
    pub(crate) writes: Vec<FileWrite>,
    /// What to report once written.
    pub(crate) report: ApplyReport,
}

struct Planner<'a> {
    workdir: Workdir,
    options: &'a ApplyOptions,
    slots: HashMap<PathBuf, Slot>,
    order: Vec<PathBuf>,
    report: ApplyReport,
}

impl Plan {
    /// Resolves, reads and applies everything in memory.
    pub(crate) fn build(
        patch: &Patch,
        cwd: &Path,
        options: &ApplyOptions,
    ) -> Result<Self, ApplyPatchError> {
        let workdir = Workdir::new(cwd).map_err(|source| ApplyPatchError::Workdir {
            path: cwd.to_path_buf(),
            source,
        })?;
        let mut planner = Planner {
            workdir,
            options,
            slots: HashMap::new(),
            order: Vec::new(),
            report: ApplyReport::default(),
        };
        for operation in &patch.operations {
            planner.operation(operation)?;
        }
        Ok(planner.finish())
    }
}

impl Planner<'_> {
    fn resolve(&self, path: &Path) -> Result<ResolvedPath, ApplyPatchError> {
        self.workdir
            .resolve(path, self.options.allow_outside)
            .map_err(|refusal| ApplyPatchError::OutsideWorkdir {
                path: path.to_path_buf(),
                refusal,
            })
    }

    fn slot(&mut self, key: &Path) -> &mut Slot {
        let order = &mut self.order;
        self.slots.entry(key.to_path_buf()).or_insert_with(|| {
            let on_disk = match std::fs::symlink_metadata(key) {
                Err(_) => OnDisk::Missing,
                Ok(meta) if meta.file_type().is_symlink() => OnDisk::Symlink(Stamp::from(&meta)),
                Ok(meta) if meta.is_file() => {
                    OnDisk::File(FileAttrs::from(&meta), Stamp::from(&meta))
                }
                Ok(_) => OnDisk::NotAFile,
            };
            let now = match on_disk {
                OnDisk::Missing => None,
                _ => Some(None),
            };
            order.push(key.to_path_buf());
            Slot {
                on_disk,
                now,
                attrs: None,
            }
        })
    }

    fn operation(&mut self, operation: &Operation) -> Result<(), ApplyPatchError> {
        match operation {
            Operation::Add { path, contents, .. } => {
                let resolved = self.resolve(path)?;
                let slot = self.slot(&resolved.entry);
                // Like Codex, Add over an existing file replaces it: the model
                // states the whole content it wants there. Only a non-file is refused.
                if let (OnDisk::NotAFile, Some(_)) = (&slot.on_disk, &slot.now) {
                    return not_a_file(path, "add");
                }
                slot.now = Some(Some(contents.clone().into_bytes()));
                self.report.record(ChangeKind::Added, path.clone());
            }
            Operation::Delete { path, .. } => {
                let resolved = self.resolve(path)?;
                let slot = self.slot(&resolved.entry);
                match (&slot.on_disk, &slot.now) {
                    (_, None) => return missing(path, "delete"),
                    (OnDisk::NotAFile, Some(None)) => return not_a_file(path, "delete"),
                    _ => {}
                }
                slot.now = None;
                self.report.record(ChangeKind::Deleted, path.clone());
            }
            Operation::Update {
                path,
                move_to,
                chunks,
                ..
            } => {
                let resolved = self.resolve(path)?;
                let destination = match move_to {
                    Some(dest) => Some((dest, self.resolve(dest)?)),
                    None => None,
                };
                let moving = destination
                    .as_ref()
                    .is_some_and(|(_, d)| d.entry != resolved.entry && d.target != resolved.target);
                let key = if moving {
                    resolved.entry.clone()
                } else {
                    resolved.target.clone()
                };
                let action = if moving { "move" } else { "update" };
                let current = self.current_bytes(&key, path, action)?;
                let file = TextFile::parse(&current);
                let updated = apply_chunks(&file, chunks, path, &mut self.report.fuzzy)
                    .map_err(ApplyPatchError::NoMatch)?;
                let bytes = updated.to_bytes();
                match destination {
                    Some((dest_path, dest)) if moving => {
                        let attrs = self.attrs_of(&key);
                        self.slot(&key).now = None;
                        let dest_slot = self.slot(&dest.entry);
                        // Like Codex and `mv`, a move replaces an existing file.
                        if let (OnDisk::NotAFile, Some(_)) = (&dest_slot.on_disk, &dest_slot.now) {
                            return not_a_file(dest_path, "move here");
                        }
                        dest_slot.now = Some(Some(bytes));
                        dest_slot.attrs = attrs;
                        self.report.record(ChangeKind::Modified, dest_path.clone());
                    }
                    _ => {
                        self.slot(&key).now = Some(Some(bytes));
                        let shown = move_to.as_ref().unwrap_or(path);
                        self.report.record(ChangeKind::Modified, shown.clone());
                    }
                }
            }
        }
        Ok(())
    }

    /// The contents at `key` as the patch has left them so far.
    fn current_bytes(
        &mut self,
        key: &Path,
        path: &Path,
        action: &'static str,
    ) -> Result<Vec<u8>, ApplyPatchError> {
        let slot = self.slot(key);
        match (&slot.on_disk, &slot.now) {
            (_, None) => missing(path, action),
            (_, Some(Some(bytes))) => Ok(bytes.clone()),
            (OnDisk::NotAFile, Some(None)) => not_a_file(path, action),
            (_, Some(None)) => std::fs::read(key).map_err(|source| ApplyPatchError::Read {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    fn attrs_of(&self, key: &Path) -> Option<FileAttrs> {
        let slot = self.slots.get(key)?;
        slot.attrs.or_else(|| match &slot.on_disk {
            OnDisk::File(attrs, _) => Some(*attrs),
            _ => std::fs::metadata(key).ok().map(|m| FileAttrs::from(&m)),
        })
    }

    fn finish(self) -> Plan {
        let mut writes = Vec::new();
        for key in &self.order {
            let Some(slot) = self.slots.get(key) else {
                continue;
            };
            let stamp = slot.on_disk.stamp();
            match (&slot.now, stamp) {
                (None, Some(stamp)) => writes.push(FileWrite::Remove {
                    path: key.clone(),
                    stamp,
                }),
                (None, None) | (Some(None), _) => {}
                (Some(Some(bytes)), _) => writes.push(FileWrite::Put {
                    path: key.clone(),
                    bytes: bytes.clone(),
                    attrs: slot.attrs.or(match &slot.on_disk {
                        OnDisk::File(attrs, _) => Some(*attrs),
                        _ => None,
                    }),
                    replaces: stamp,
                }),
            }
        }
        Plan {
            writes,
            report: self.report,
        }
    }
}

fn missing<T>(path: &Path, action: &'static str) -> Result<T, ApplyPatchError> {
    Err(ApplyPatchError::Missing {
        path: path.to_path_buf(),
        action,
    })
}

fn not_a_file<T>(path: &Path, action: &'static str) -> Result<T, ApplyPatchError> {
    Err(ApplyPatchError::NotAFile {
        path: path.to_path_buf(),
        action,
    })
}
