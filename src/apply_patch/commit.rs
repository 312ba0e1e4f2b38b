//! Carrying out a plan so that a failure half way leaves the tree as it was.
//!
//! First every new content is written to a temporary file beside its target
//! (missing parent directories are created and remembered). Then each file
//! about to be replaced or removed gets a hard-linked backup, and the
//! temporary files are renamed over their targets. If any step fails, a
//! [`RollbackGuard`] undoes the steps already taken, in reverse: backups go
//! back, new files and directories go away. On success the backups are
//! dropped. Readers never see a half-written file: every write is a rename.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tempfile::{NamedTempFile, TempPath};

use super::error::{ApplyPatchError, Rollback};
use super::plan::{FileAttrs, FileWrite, Stamp};

/// Permissions of a new file before the umask: what `touch` would make.
const NEW_FILE_MODE: u32 = 0o666;

/// Writes every change of a plan, all or nothing.
pub(crate) fn commit(writes: &[FileWrite]) -> Result<(), ApplyPatchError> {
    let mut transaction = RollbackGuard::default();
    let result = transaction.run(writes);
    match result {
        Ok(()) => {
            transaction.finish();
            Ok(())
        }
        Err((path, source)) => Err(ApplyPatchError::Write {
            path,
            source,
            rollback: transaction.rollback(),
        }),
    }
}

struct Staged {
    /// Closed after writing: a patch may touch more files than we may hold open.
    temp: TempPath,
    target: PathBuf,
    replaces: Option<Stamp>,
}

/// The steps taken so far, undone on drop unless finished.
#[derive(Default)]
struct RollbackGuard {
    created_dirs: Vec<PathBuf>,
    backups: Vec<(TempPath, PathBuf)>,
    created_files: Vec<PathBuf>,
    done: bool,
}

type StepError = (PathBuf, io::Error);

impl RollbackGuard {
    fn run(&mut self, writes: &[FileWrite]) -> Result<(), StepError> {
        let mut staged = Vec::new();
        for write in writes {
            if let FileWrite::Put {
                path,
                bytes,
                attrs,
                replaces,
            } = write
            {
                staged.push(self.stage(path, bytes, attrs.as_ref(), *replaces)?);
            }
        }
        // Everything is staged: now make sure nobody changed a file since
        // it was read, so that the patch never clobbers a newer edit.
        for write in writes {
            let (path, expected) = match write {
                FileWrite::Put {
                    path,
                    replaces: Some(stamp),
                    ..
                } => (path, stamp),
                FileWrite::Remove { path, stamp } => (path, stamp),
                FileWrite::Put { replaces: None, .. } => continue,
            };
            if Stamp::of(path).ok().as_ref() != Some(expected) {
                return Err((
                    path.clone(),
                    io::Error::other("the file changed on disk while the patch was being applied"),
                ));
            }
        }
        for write in writes {
            if let FileWrite::Remove { path, .. } = write {
                let backup = backup_of(path).map_err(|e| (path.clone(), e))?;
                fs::remove_file(path).map_err(|e| (path.clone(), e))?;
                self.backups.push((backup, path.clone()));
            }
        }
        for Staged {
            temp,
            target,
            replaces,
        } in staged
        {
            if replaces.is_some() {
                let backup = backup_of(&target).map_err(|e| (target.clone(), e))?;
                self.backups.push((backup, target.clone()));
                temp.persist(&target)
                    .map_err(|e| (target.clone(), e.error))?;
            } else {
                temp.persist_noclobber(&target)
                    .map_err(|e| (target.clone(), e.error))?;
                self.created_files.push(target);
            }
        }
        Ok(())
    }

    fn stage(
        &mut self,
        target: &Path,
        bytes: &[u8],
        attrs: Option<&FileAttrs>,
        replaces: Option<Stamp>,
    ) -> Result<Staged, StepError> {
        let fail = |e: io::Error| (target.to_path_buf(), e);
        let dir = target
            .parent()
            .ok_or_else(|| fail(io::Error::other("has no parent directory")))?;
        self.create_dirs(dir).map_err(fail)?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mode = super::file_meta::permissions(attrs.map_or(NEW_FILE_MODE, |a| a.mode));
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".apply_patch.tmp");
        if let Some(mode) = &mode {
            builder.permissions(mode.clone());
        }
        let mut temp = builder.tempfile_in(dir).map_err(fail)?;
        temp.write_all(bytes).map_err(fail)?;
        temp.flush().map_err(fail)?;
        if let Some(attrs) = attrs {
            // The replacement keeps the owner where we may set it (root, or
            // a group of ours); failing that it is ours, as with any editor.
            super::file_meta::set_owner(temp.as_file(), attrs.uid, attrs.gid);
            // After chown, which clears set-id bits; and the umask applied
            // at creation: an existing file keeps its exact bits.
            if let Some(mode) = mode {
                temp.as_file().set_permissions(mode).map_err(fail)?;
            }
        }
        Ok(Staged {
            temp: temp.into_temp_path(),
            target: target.to_path_buf(),
            replaces,
        })
    }

    /// Creates `dir` and its missing ancestors, remembering each.
    fn create_dirs(&mut self, dir: &Path) -> io::Result<()> {
        let mut missing = Vec::new();
        let mut current = Some(dir);
        while let Some(path) = current {
            if fs::symlink_metadata(path).is_ok() {
                break;
            }
            missing.push(path.to_path_buf());
            current = path.parent();
        }
        for path in missing.into_iter().rev() {
            fs::create_dir(&path)?;
            self.created_dirs.push(path);
        }
        Ok(())
    }

    fn finish(&mut self) {
        self.done = true;
        // Dropping the backups removes them.
        self.backups.clear();
    }

    /// Undoes every step; returns which paths could not be restored.
    fn rollback(&mut self) -> Rollback {
        self.done = true;
        let mut failed = Vec::new();
        for path in self.created_files.drain(..).rev() {
            if fs::remove_file(&path).is_err() {
                failed.push(path);
            }
        }
        for (backup, original) in self.backups.drain(..).rev() {
            if backup.persist(&original).is_err() {
                failed.push(original);
            }
        }
        for dir in self.created_dirs.drain(..).rev() {
            let _ = fs::remove_dir(&dir);
        }
        if failed.is_empty() {
            Rollback::Complete
        } else {
            Rollback::Incomplete(failed)
        }
    }
}

impl Drop for RollbackGuard {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.rollback();
        }
    }
}

/// A second name for `path` in its directory, removed when dropped.
fn backup_of(path: &Path) -> io::Result<TempPath> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".apply_patch.orig");
    match builder.make_in(dir, |backup| fs::hard_link(path, backup)) {
        Ok(named) => Ok(named.into_temp_path()),
        // Some file systems have no hard links: copy instead.
        Err(_) => builder
            .make_in(dir, |backup| fs::copy(path, backup).map(drop))
            .map(NamedTempFile::into_temp_path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use std::fs::Permissions;
    #[cfg(unix)]
    use std::os::unix::fs::PermissionsExt;

    fn stamp_of(path: &Path) -> Stamp {
        Stamp::of(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn read(path: &Path) -> String {
        fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = walk(dir)
            .into_iter()
            .map(|p| {
                p.strip_prefix(dir)
                    .map(|r| r.display().to_string())
                    .unwrap_or_default()
            })
            .collect();
        names.sort();
        names
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            out.push(path.clone());
            if path.is_dir() {
                out.extend(walk(&path));
            }
        }
        out
    }

    // Modes are Unix's.
    #[cfg(unix)]
    #[test]
    fn writes_replaces_removes_and_keeps_modes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let keep = dir.path().join("script.sh");
        let gone = dir.path().join("gone.txt");
        fs::write(&keep, "old\n").unwrap_or_else(|e| panic!("{e}"));
        fs::set_permissions(&keep, Permissions::from_mode(0o751)).unwrap_or_else(|e| panic!("{e}"));
        fs::write(&gone, "bye\n").unwrap_or_else(|e| panic!("{e}"));
        let writes = vec![
            FileWrite::Put {
                path: keep.clone(),
                bytes: b"new\n".to_vec(),
                attrs: Some(FileAttrs {
                    mode: 0o751,
                    ..fs::metadata(&keep)
                        .map(|m| FileAttrs::from(&m))
                        .unwrap_or_else(|e| panic!("{e}"))
                }),
                replaces: Some(stamp_of(&keep)),
            },
            FileWrite::Put {
                path: dir.path().join("a/b/new.txt"),
                bytes: b"hi\n".to_vec(),
                attrs: None,
                replaces: None,
            },
            FileWrite::Remove {
                path: gone.clone(),
                stamp: stamp_of(&gone),
            },
        ];
        assert!(commit(&writes).is_ok());
        assert_eq!(read(&keep), "new\n");
        let mode = fs::metadata(&keep)
            .map(|m| m.permissions().mode() & 0o777)
            .ok();
        assert_eq!(mode, Some(0o751));
        assert_eq!(
            listing(dir.path()),
            ["a", "a/b", "a/b/new.txt", "script.sh"]
        );
    }

    #[test]
    fn a_failing_write_rolls_everything_back() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let first = dir.path().join("first.txt");
        let gone = dir.path().join("gone.txt");
        fs::write(&first, "original\n").unwrap_or_else(|e| panic!("{e}"));
        fs::write(&gone, "still here\n").unwrap_or_else(|e| panic!("{e}"));
        let blocker = dir.path().join("blocker");
        fs::write(&blocker, "").unwrap_or_else(|e| panic!("{e}"));
        let writes = vec![
            FileWrite::Put {
                path: first.clone(),
                bytes: b"changed\n".to_vec(),
                attrs: None,
                replaces: Some(stamp_of(&first)),
            },
            FileWrite::Put {
                path: dir.path().join("newdir/x.txt"),
                bytes: b"x\n".to_vec(),
                attrs: None,
                replaces: None,
            },
            FileWrite::Remove {
                path: gone.clone(),
                stamp: stamp_of(&gone),
            },
            // A file where a directory must be: staging fails.
            FileWrite::Put {
                path: blocker.join("inner.txt"),
                bytes: b"never\n".to_vec(),
                attrs: None,
                replaces: None,
            },
        ];
        let Err(ApplyPatchError::Write { rollback, .. }) = commit(&writes) else {
            panic!("commit did not fail");
        };
        assert_eq!(rollback, Rollback::Complete);
        assert_eq!(read(&first), "original\n");
        assert_eq!(read(&gone), "still here\n");
        assert_eq!(listing(dir.path()), ["blocker", "first.txt", "gone.txt"]);
    }

    #[test]
    fn a_failing_rename_after_earlier_renames_restores_them() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let first = dir.path().join("first.txt");
        let gone = dir.path().join("gone.txt");
        let appeared = dir.path().join("appeared.txt");
        fs::write(&first, "original\n").unwrap_or_else(|e| panic!("{e}"));
        fs::write(&gone, "still here\n").unwrap_or_else(|e| panic!("{e}"));
        fs::write(&appeared, "someone else's\n").unwrap_or_else(|e| panic!("{e}"));
        let writes = vec![
            FileWrite::Put {
                path: first.clone(),
                bytes: b"changed\n".to_vec(),
                attrs: None,
                replaces: Some(stamp_of(&first)),
            },
            FileWrite::Remove {
                path: gone.clone(),
                stamp: stamp_of(&gone),
            },
            // Planned as new, but a file appeared there since: never clobbered.
            FileWrite::Put {
                path: appeared.clone(),
                bytes: b"ours\n".to_vec(),
                attrs: None,
                replaces: None,
            },
        ];
        let Err(ApplyPatchError::Write { rollback, path, .. }) = commit(&writes) else {
            panic!("commit did not fail");
        };
        assert_eq!(path, appeared);
        assert_eq!(rollback, Rollback::Complete);
        assert_eq!(read(&first), "original\n");
        assert_eq!(read(&gone), "still here\n");
        assert_eq!(read(&appeared), "someone else's\n");
        assert_eq!(
            listing(dir.path()),
            ["appeared.txt", "first.txt", "gone.txt"]
        );
    }

    #[test]
    fn a_file_changed_since_it_was_read_is_not_clobbered() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("edited.txt");
        fs::write(&file, "as read\n").unwrap_or_else(|e| panic!("{e}"));
        let stamp = stamp_of(&file);
        fs::write(&file, "someone else's newer edit\n").unwrap_or_else(|e| panic!("{e}"));
        let writes = vec![FileWrite::Put {
            path: file.clone(),
            bytes: b"ours\n".to_vec(),
            attrs: None,
            replaces: Some(stamp),
        }];
        let Err(ApplyPatchError::Write {
            source, rollback, ..
        }) = commit(&writes)
        else {
            panic!("commit did not fail");
        };
        assert!(source.to_string().contains("changed on disk"), "{source}");
        assert_eq!(rollback, Rollback::Complete);
        assert_eq!(read(&file), "someone else's newer edit\n");
        assert_eq!(listing(dir.path()), ["edited.txt"]);
    }
}
