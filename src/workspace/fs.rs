//! The workspace operations: each resolves its [`Target`] beneath the root
//! once, by the kernel ([`super::beneath`]), then works on the handle it got
//! (`*at` calls), never on the path again. A write opens (or makes) its
//! parent directory that way, creates a temporary file in it with
//! `O_EXCL | O_NOFOLLOW` and renames it onto the final name in the same
//! directory.
//!
//! Blocking: the HTTP handlers call these on `spawn_blocking`.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::{Access, Target, Workspace, WorkspaceError, beneath};

/// The mode of a directory made for a write's parents.
pub(super) const NEW_DIR_MODE: u32 = 0o755;
/// How the temporary file of a write is named, before its random part.
const TEMP_PREFIX: &str = ".agent-reach-tmp-";

/// File or directory, as both protocols name entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    File,
    Directory,
}

/// One entry of a directory listing (links shown as what they point to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) size: u64,
    pub(crate) kind: EntryKind,
    pub(crate) modified: SystemTime,
    /// The permission bits.
    pub(crate) mode: u32,
    /// The entry is a link (to what `kind` says): a walk never descends
    /// through it.
    pub(crate) link: bool,
}

/// What a path is, without following a final link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Node {
    File {
        size: u64,
    },
    Directory,
    /// A link, a socket, a device...: neither served nor listed as a file.
    Other,
}

/// A file being written: the temporary file beside its destination,
/// removed on drop unless [`PendingWrite::commit`] renamed it into place.
#[derive(Debug)]
pub(crate) struct PendingWrite {
    dir: OwnedFd,
    temp: OsString,
    name: OsString,
    shown: String,
    file: Option<std::fs::File>,
}

impl PendingWrite {
    /// The temporary file to write the contents to.
    pub(crate) fn take_file(&mut self) -> Option<std::fs::File> {
        self.file.take()
    }

    /// Renames the (synced, closed) temporary file onto its destination.
    pub(crate) fn commit(mut self) -> Result<(), WorkspaceError> {
        self.file = None;
        renameat(
            &self.dir,
            self.temp.as_os_str(),
            &self.dir,
            self.name.as_os_str(),
        )
        .map_err(|e| WorkspaceError::from_errno(&self.shown, e))?;
        self.temp.clear();
        Ok(())
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if !self.temp.is_empty() {
            let _ = unlinkat(&self.dir, self.temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

pub(super) fn open_dir_at<Fd: AsFd>(dir: Fd, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

pub(super) fn node_of(stat: &FileStat) -> Node {
    match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFREG => Node::File {
            size: u64::try_from(stat.st_size).unwrap_or(0),
        },
        SFlag::S_IFDIR => Node::Directory,
        _ => Node::Other,
    }
}

pub(super) fn modified_of(stat: &FileStat) -> SystemTime {
    let secs = u64::try_from(stat.st_mtime).unwrap_or(0);
    let nanos = u32::try_from(stat.st_mtime_nsec).unwrap_or(0);
    UNIX_EPOCH + Duration::new(secs, nanos)
}

impl Workspace {
    /// Opens `target` beneath the root with `flags` (links inside followed),
    /// for `access` as the fence allows it.
    pub(super) fn open_target(
        &self,
        target: &Target,
        flags: OFlag,
        access: Access,
    ) -> Result<OwnedFd, WorkspaceError> {
        let root = self.open_root()?;
        let fd = beneath::open_beneath(root.as_fd(), &target.rel, flags)
            .map_err(|e| WorkspaceError::from_errno(&target.shown, e))?;
        self.fence.check_fd(fd.as_fd(), &target.shown, access)?;
        Ok(fd)
    }

    /// Opens the directory `rel` beneath the root; with `create`, missing
    /// directories at its end are made on the way.
    pub(super) fn open_dir(
        &self,
        rel: &Path,
        create: bool,
        shown: &str,
    ) -> Result<OwnedFd, WorkspaceError> {
        let root = self.open_root()?;
        let error = |e| match e {
            Errno::ENOTDIR if create => WorkspaceError::Invalid {
                path: shown.to_owned(),
                why: "a parent of the path is a file".to_owned(),
            },
            e => WorkspaceError::from_errno(shown, e),
        };
        let opened = match beneath::open_beneath(root.as_fd(), rel, beneath::dir_flags()) {
            Err(Errno::ENOENT) if create => {
                // What would be made is checked before anything is.
                let (deepest, depth) =
                    beneath::deepest_existing(root.as_fd(), rel, beneath::dir_flags())
                        .map_err(error)?;
                let mut made =
                    beneath::path_of(deepest.as_fd()).map_err(|source| WorkspaceError::Io {
                        path: shown.to_owned(),
                        source,
                    })?;
                made.extend(beneath::missing_names(rel, depth).map_err(error)?);
                if !self.fence.allows(&made, Access::Write) {
                    return Err(WorkspaceError::Protected {
                        path: shown.to_owned(),
                    });
                }
                beneath::open_or_make_dir(root.as_fd(), rel, NEW_DIR_MODE)
            }
            other => other,
        };
        let dir = opened.map_err(error)?;
        self.fence.check_fd(dir.as_fd(), shown, Access::Read)?;
        Ok(dir)
    }

    /// What `target` is (a final link is reported as [`Node::Other`]).
    pub(crate) fn node(&self, target: &Target) -> Result<Node, WorkspaceError> {
        let shown = target.shown.as_str();
        let Some((parent, name)) = target.split() else {
            let dir = self.open_target(target, OFlag::O_PATH, Access::Read)?;
            return fstat(&dir)
                .map(|s| node_of(&s))
                .map_err(|e| WorkspaceError::from_errno(shown, e));
        };
        let dir = self.open_dir(parent, false, shown)?;
        self.fence
            .check_child(dir.as_fd(), &name, shown, Access::Read)?;
        fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|s| node_of(&s))
            .map_err(|e| WorkspaceError::from_errno(shown, e))
    }

    /// Opens a regular file for reading; returns it with its size and
    /// modification time.
    pub(crate) fn open_file(
        &self,
        target: &Target,
    ) -> Result<(std::fs::File, u64, SystemTime), WorkspaceError> {
        let shown = target.shown.as_str();
        // O_NONBLOCK: a FIFO planted here must not hang the reader; it has
        // no effect on a regular file.
        let fd = self.open_target(target, OFlag::O_RDONLY | OFlag::O_NONBLOCK, Access::Read)?;
        let stat = fstat(&fd).map_err(|e| WorkspaceError::from_errno(shown, e))?;
        match node_of(&stat) {
            Node::File { size } => Ok((std::fs::File::from(fd), size, modified_of(&stat))),
            Node::Directory => Err(WorkspaceError::IsDirectory {
                path: shown.to_owned(),
            }),
            Node::Other => Err(WorkspaceError::Invalid {
                path: shown.to_owned(),
                why: "not a regular file".to_owned(),
            }),
        }
    }

    /// The entries of the directory `target`, sorted by name. Links are
    /// shown as what they point to; links leaving the workspace, broken
    /// links and special files are left out.
    pub(crate) fn list(&self, target: &Target) -> Result<Vec<Entry>, WorkspaceError> {
        let shown = target.shown.as_str();
        let fd = self.open_dir(&target.rel, false, shown)?;
        // Where the listed directory is, for the fence; no lookup unfenced.
        let here = if self.fence.is_empty() {
            std::path::PathBuf::new()
        } else {
            beneath::path_of(fd.as_fd()).unwrap_or_default()
        };
        let root = self.open_root()?;
        let mut dir =
            nix::dir::Dir::from_fd(fd).map_err(|e| WorkspaceError::from_errno(shown, e))?;
        let names: Vec<OsString> = dir
            .iter()
            .filter_map(Result::ok)
            .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
            .filter(|n| n != "." && n != "..")
            .collect();
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            let Ok(mut stat) = fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) else {
                continue;
            };
            if self
                .fence
                .hides_child(&here, &name, (stat.st_dev, stat.st_ino))
            {
                continue;
            }
            let link = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK;
            if link {
                // What the link names, resolved beneath the root like any
                // path: a link out is left out.
                let linked = target.rel.join(&name);
                let Ok(found) = beneath::open_beneath(root.as_fd(), &linked, OFlag::O_PATH)
                    .and_then(|fd| fstat(&fd))
                else {
                    continue;
                };
                if self
                    .fence
                    .hides_child(&here, &name, (found.st_dev, found.st_ino))
                {
                    continue;
                }
                stat = found;
            }
            let kind = match node_of(&stat) {
                Node::File { .. } => EntryKind::File,
                Node::Directory => EntryKind::Directory,
                Node::Other => continue,
            };
            entries.push(Entry {
                name: name.to_string_lossy().into_owned(),
                size: u64::try_from(stat.st_size).unwrap_or(0),
                kind,
                modified: modified_of(&stat),
                mode: stat.st_mode & 0o7777,
                link,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    /// Starts writing `target` with permission bits `mode`: its parents are
    /// made, a temporary file is created beside it.
    pub(crate) fn begin_write(
        &self,
        target: &Target,
        mode: u32,
    ) -> Result<PendingWrite, WorkspaceError> {
        let shown = target.shown.as_str();
        let Some((parent, name)) = target.split() else {
            return Err(WorkspaceError::IsDirectory {
                path: shown.to_owned(),
            });
        };
        let dir = self.open_dir(parent, true, shown)?;
        self.fence
            .check_child(dir.as_fd(), &name, shown, Access::Write)?;
        if let Ok(stat) = fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            && node_of(&stat) == Node::Directory
        {
            return Err(WorkspaceError::IsDirectory {
                path: shown.to_owned(),
            });
        }
        let temp = temp_name();
        let fd = openat(
            &dir,
            temp.as_os_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| WorkspaceError::from_errno(shown, e))?;
        let mut pending = PendingWrite {
            dir,
            temp,
            name,
            shown: shown.to_owned(),
            file: None,
        };
        // The umask does not apply to fchmod: the bits are exactly `mode`.
        fchmod(&fd, Mode::from_bits_truncate(mode & 0o7777))
            .map_err(|e| WorkspaceError::from_errno(shown, e))?;
        pending.file = Some(std::fs::File::from(fd));
        Ok(pending)
    }

    /// Removes `target` (resolved with [`Workspace::resolve_entry`]): a
    /// file or link, an empty directory, or with `recursive` a whole tree
    /// (links inside are removed, never followed). The root itself is only
    /// cleared, and only with `recursive`.
    pub(crate) fn remove(&self, target: &Target, recursive: bool) -> Result<(), WorkspaceError> {
        let shown = target.shown.as_str();
        let errno = |e| WorkspaceError::from_errno(shown, e);
        let Some((parent, name)) = target.split() else {
            let dir = self.open_dir(&target.rel, false, shown)?;
            let root = self.open_root()?;
            if !same_file(&dir, &root).map_err(errno)? {
                return Err(WorkspaceError::Invalid {
                    path: shown.to_owned(),
                    why: "a path ending in `..` names a directory, not an entry to remove"
                        .to_owned(),
                });
            }
            if !recursive {
                return Err(WorkspaceError::Root);
            }
            self.fence.check_fd(dir.as_fd(), shown, Access::Destroy)?;
            return clear_dir(&dir).map_err(errno);
        };
        let dir = self.open_dir(parent, false, shown)?;
        let stat = fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW).map_err(errno)?;
        self.fence
            .check_child(dir.as_fd(), &name, shown, Access::Destroy)?;
        if node_of(&stat) != Node::Directory {
            return unlinkat(&dir, name.as_os_str(), UnlinkatFlags::NoRemoveDir).map_err(errno);
        }
        if recursive {
            clear_dir(&open_dir_at(&dir, &name).map_err(errno)?).map_err(errno)?;
        }
        unlinkat(&dir, name.as_os_str(), UnlinkatFlags::RemoveDir).map_err(errno)
    }
}

/// A name for a write's temporary file no other write of this process
/// uses at once (the create is `O_EXCL` anyway).
fn temp_name() -> OsString {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    OsString::from(format!(
        "{TEMP_PREFIX}{}-{n}-{nanos:08x}",
        std::process::id()
    ))
}

/// Whether two handles are one file (device and inode).
fn same_file(a: &OwnedFd, b: &OwnedFd) -> nix::Result<bool> {
    let (a, b) = (fstat(a)?, fstat(b)?);
    Ok(a.st_dev == b.st_dev && a.st_ino == b.st_ino)
}

/// Removes everything inside the directory `dir`, depth first, never
/// following a link (a link is an entry like any other).
fn clear_dir(dir: &OwnedFd) -> nix::Result<()> {
    let listing = nix::dir::Dir::from_fd(dir.try_clone().map_err(|_| Errno::EMFILE)?)?;
    let names: Vec<OsString> = listing
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
        .filter(|n| n != "." && n != "..")
        .collect();
    for name in names {
        let stat = match fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        if node_of(&stat) == Node::Directory {
            clear_dir(&open_dir_at(dir, &name)?)?;
            unlinkat(dir, name.as_os_str(), UnlinkatFlags::RemoveDir)?;
        } else {
            match unlinkat(dir, name.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::write(root.join("d/e/f.txt"), "f").unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("d/out")).unwrap();
        std::os::unix::fs::symlink("e/f.txt", root.join("d/in")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("d/broken")).unwrap();
        (dir, Workspace::new(&root))
    }

    /// What a read of `path` gives: the contents, or the error's name.
    fn read_of(ws: &Workspace, path: &str) -> Result<String, String> {
        let short = |e: WorkspaceError| {
            format!("{e:?}")
                .split([' ', '{'])
                .next()
                .unwrap()
                .to_owned()
        };
        let target = ws.resolve(path).map_err(short)?;
        let (mut file, _, _) = ws.open_file(&target).map_err(short)?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).unwrap();
        Ok(text)
    }

    /// What a write of `path` gives: `Ok` once it landed, or the error's name.
    fn write_of(ws: &Workspace, path: &str) -> Result<(), String> {
        let short = |e: WorkspaceError| {
            format!("{e:?}")
                .split([' ', '{'])
                .next()
                .unwrap()
                .to_owned()
        };
        let target = ws.resolve(path).map_err(short)?;
        let mut pending = ws.begin_write(&target, 0o644).map_err(short)?;
        pending.take_file().unwrap().write_all(b"written").unwrap();
        pending.commit().map_err(short)
    }

    #[test]
    fn no_read_or_write_leaves_the_root_whatever_comes_before_the_link() {
        let (dir, ws) = setup();
        std::fs::create_dir(ws.root().join("up")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), ws.root().join("up/shadow")).unwrap();
        std::os::unix::fs::symlink(dir.path(), ws.root().join("up/escape")).unwrap();
        std::os::unix::fs::symlink("../../secret", ws.root().join("up/relative")).unwrap();
        let refused_reads = [
            ("nope/../up/shadow", "NotFound"),
            ("up/shadow", "Escapes"),
            ("up/relative", "Escapes"),
            ("up/escape/secret", "Escapes"),
            ("d/out", "Escapes"),
            ("../secret", "Escapes"),
            ("d/../../secret", "Escapes"),
            ("d/e/../../../secret", "Escapes"),
            ("nope/../../secret", "Escapes"),
        ];
        for (path, refusal) in refused_reads {
            assert_eq!(read_of(&ws, path), Err(refusal.to_owned()), "read {path}");
        }
        let refused_writes = [
            ("nope/../up/escape/f", "NotFound"),
            ("up/escape/f", "Escapes"),
            ("up/escape/new/f", "Escapes"),
            ("../f", "Escapes"),
            ("d/e/../../../f", "Escapes"),
        ];
        for (path, refusal) in refused_writes {
            assert_eq!(write_of(&ws, path), Err(refusal.to_owned()), "write {path}");
        }
        assert!(!dir.path().join("f").exists());
        assert!(!dir.path().join("new").exists());
        assert!(
            !ws.root().join("nope").exists(),
            "a refused write made no directory"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("secret")).unwrap(),
            "s"
        );
    }

    #[test]
    fn links_that_stay_inside_are_followed_for_reads_and_writes() {
        let (_dir, ws) = setup();
        std::os::unix::fs::symlink("d/e", ws.root().join("e_link")).unwrap();
        assert_eq!(read_of(&ws, "d/in"), Ok("f".to_owned()));
        assert_eq!(read_of(&ws, "e_link/f.txt"), Ok("f".to_owned()));
        assert_eq!(read_of(&ws, "d/e/../e/./f.txt"), Ok("f".to_owned()));
        assert_eq!(write_of(&ws, "e_link/new.txt"), Ok(()));
        assert_eq!(
            std::fs::read_to_string(ws.root().join("d/e/new.txt")).unwrap(),
            "written"
        );
        assert_eq!(write_of(&ws, "d/../made/x"), Ok(()));
        assert!(ws.root().join("made/x").is_file());
    }

    #[test]
    fn a_write_lands_atomically_with_its_mode_and_parents() {
        let (_dir, ws) = setup();
        let target = ws.resolve("new/sub/x.sh").unwrap();
        let mut pending = ws.begin_write(&target, 0o755).unwrap();
        let mut file = pending.take_file().unwrap();
        file.write_all(b"echo hi").unwrap();
        drop(file);
        assert!(!ws.root().join("new/sub/x.sh").exists());
        pending.commit().unwrap();
        let meta = std::fs::metadata(ws.root().join("new/sub/x.sh")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o755
        );
        let leftovers: Vec<_> = std::fs::read_dir(ws.root().join("new/sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![OsString::from("x.sh")]);
    }

    #[test]
    fn an_abandoned_write_leaves_nothing() {
        let (_dir, ws) = setup();
        let target = ws.resolve("d/g.txt").unwrap();
        drop(ws.begin_write(&target, 0o644).unwrap());
        let names: Vec<_> = std::fs::read_dir(ws.root().join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with(TEMP_PREFIX)),
            "{names:?}"
        );
    }

    #[test]
    fn a_listing_shows_links_inside_and_hides_the_others() {
        let (_dir, ws) = setup();
        let entries = ws.list(&ws.resolve("d").unwrap()).unwrap();
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["e", "in"]);
        assert_eq!(entries[0].kind, EntryKind::Directory);
        assert_eq!(entries[1].kind, EntryKind::File);
        assert_eq!(entries[1].size, 1);
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_the_check_is_refused() {
        let (dir, ws) = setup();
        let target = ws.resolve("d/e/f.txt").unwrap();
        std::fs::rename(ws.root().join("d/e"), ws.root().join("d/e2")).unwrap();
        std::fs::create_dir(dir.path().join("evil")).unwrap();
        std::fs::write(dir.path().join("evil/f.txt"), "leak").unwrap();
        std::os::unix::fs::symlink(dir.path().join("evil"), ws.root().join("d/e")).unwrap();
        assert!(matches!(
            ws.open_file(&target),
            Err(WorkspaceError::Escapes { .. })
        ));
        assert!(matches!(
            ws.begin_write(&target, 0o644),
            Err(WorkspaceError::Escapes { .. })
        ));
    }

    #[test]
    fn removal_needs_recursive_for_a_full_directory_and_never_follows_links() {
        let (dir, ws) = setup();
        std::os::unix::fs::symlink(dir.path(), ws.root().join("d/e/up")).unwrap();
        let d = ws.resolve_entry("d").unwrap();
        assert!(matches!(
            ws.remove(&d, false),
            Err(WorkspaceError::NotEmpty { .. })
        ));
        ws.remove(&d, true).unwrap();
        assert!(!ws.root().join("d").exists());
        assert!(dir.path().join("secret").exists());
        let root = ws.resolve_entry("").unwrap();
        assert!(matches!(ws.remove(&root, false), Err(WorkspaceError::Root)));
        std::fs::write(ws.root().join("top"), "t").unwrap();
        ws.remove(&root, true).unwrap();
        assert!(ws.root().is_dir());
        assert_eq!(std::fs::read_dir(ws.root()).unwrap().count(), 0);
    }
}
