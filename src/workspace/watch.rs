//! Watching a directory beneath the root for changes (inotify), for the
//! envd door's `WatchDir` and polled watchers.
//!
//! The directory is resolved beneath the root by the kernel like every
//! other path ([`super::beneath`]) and the watch is put on the handle that
//! resolution gave (through its `/proc/self/fd` link), never on the path
//! again; a recursive watch opens each subdirectory beneath the watched
//! one, without following a final link, and watches it the same way, new
//! ones as they appear. Changes are named relative to the watched
//! directory (`sub/file.txt`), as E2B's envd names them; a watch on the
//! watched directory itself reports its own removal or move as `.`.
//!
//! Bounded: at most [`MAX_WATCHED_DIRS`] directories per watch (more are
//! left unwatched, and counted), the kernel's queue bounded by the system
//! (`fs.inotify.max_queued_events`); when it overflows the lost events are
//! counted in [`DirWatch::overflows`].

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use nix::sys::stat::{Mode, SFlag, fstat};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::{Workspace, WorkspaceError, beneath};

/// The most directories one watch follows (the watched one included).
pub(crate) const MAX_WATCHED_DIRS: usize = 4096;

/// What happened to an entry, as E2B's envd names it (fsnotify's ops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Create,
    Write,
    Remove,
    Rename,
    Chmod,
}

/// One change: the entry, relative to the watched directory, and what
/// happened to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) name: PathBuf,
    pub(crate) kind: ChangeKind,
}

/// What each watched directory is told about.
fn watch_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// The inotify instance, as tokio polls it.
#[derive(Debug)]
struct Queue(Inotify);

impl AsRawFd for Queue {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A watch on one directory (and, when recursive, the directories beneath
/// it). Dropping it ends every watch it holds.
#[derive(Debug)]
pub(crate) struct DirWatch {
    queue: AsyncFd<Queue>,
    /// The watched directory's handle, where new subdirectories are opened.
    top: OwnedFd,
    /// Each watched directory, relative to the watched one.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    recursive: bool,
    /// The server's fence: sealed directories are not watched.
    fence: std::sync::Arc<super::Fence>,
    overflows: u64,
    unwatched: u64,
}

impl Workspace {
    /// Starts watching the directory `path` (a client path, resolved
    /// beneath the root by the kernel): `NotFound` when it does not exist,
    /// `Invalid` when it is not a directory. Must run within a tokio
    /// runtime; with `recursive`, walks the tree (a blocking call).
    pub(crate) fn watch_dir(
        &self,
        path: &str,
        recursive: bool,
    ) -> Result<DirWatch, WorkspaceError> {
        let target = self.target(path)?;
        let shown = target.shown.as_str();
        let root = self.open_root()?;
        let top = beneath::open_beneath(root.as_fd(), &target.rel, OFlag::O_PATH)
            .map_err(|e| WorkspaceError::from_errno(shown, e))?;
        self.fence
            .check_fd(top.as_fd(), shown, super::Access::Read)?;
        let stat = fstat(top.as_fd()).map_err(|e| WorkspaceError::from_errno(shown, e))?;
        if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
            return Err(WorkspaceError::Invalid {
                path: shown.to_owned(),
                why: "it is not a directory".to_owned(),
            });
        }
        let io = |e: Errno| WorkspaceError::Io {
            path: shown.to_owned(),
            source: std::io::Error::from(e),
        };
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(io)?;
        // SAFETY: `Queue` owns the inotify descriptor and hands out that one
        // descriptor until the `AsyncFd` holding it is dropped.
        let queue = unsafe { AsyncFd::register_with_interest(Queue(inotify), Interest::READABLE) }
            .map_err(|e| WorkspaceError::Io {
                path: shown.to_owned(),
                source: std::io::Error::other(e.to_string()),
            })?;
        let mut watch = DirWatch {
            queue,
            top,
            dirs: HashMap::new(),
            recursive,
            fence: self.fence.clone(),
            overflows: 0,
            unwatched: 0,
        };
        let top = watch.top.try_clone().map_err(|e| WorkspaceError::Io {
            path: shown.to_owned(),
            source: e,
        })?;
        watch.add(top.as_fd(), PathBuf::new()).map_err(io)?;
        if recursive {
            watch.add_beneath(top, Path::new(""));
        }
        Ok(watch)
    }
}

impl DirWatch {
    /// The next changes, at least one; waits for them. An error of the
    /// inotify queue ends the watch.
    pub(crate) async fn next(&mut self) -> Result<Vec<Change>, std::io::Error> {
        loop {
            let mut ready = self.queue.readable().await?;
            match ready.try_io(|queue| queue.get_ref().0.read_events().map_err(Into::into)) {
                Ok(Ok(events)) => {
                    let changes = self.translate(events);
                    if !changes.is_empty() {
                        return Ok(changes);
                    }
                }
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
    }

    /// How many times the kernel's queue overflowed (its events lost).
    pub(crate) fn overflows(&self) -> u64 {
        self.overflows
    }

    /// How many directories were left unwatched ([`MAX_WATCHED_DIRS`], or
    /// gone before they could be watched).
    pub(crate) fn unwatched(&self) -> u64 {
        self.unwatched
    }

    /// Watches the directory `dir` (a handle), known as `rel`.
    fn add(&mut self, dir: BorrowedFd<'_>, rel: PathBuf) -> nix::Result<()> {
        if self.dirs.len() >= MAX_WATCHED_DIRS {
            self.unwatched += 1;
            return Ok(());
        }
        // The handle's link is followed to the directory the handle holds:
        // the watch is on what the resolution beneath the root found.
        let link = format!("/proc/self/fd/{}", dir.as_raw_fd());
        let wd = self
            .queue
            .get_ref()
            .0
            .add_watch(link.as_str(), watch_mask())?;
        self.dirs.insert(wd, rel);
        Ok(())
    }

    /// Watches every directory beneath `dir` (known as `rel`), links not
    /// followed.
    fn add_beneath(&mut self, dir: OwnedFd, rel: &Path) {
        let Ok(readable) = openat(
            dir.as_fd(),
            ".",
            beneath::dir_flags() | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            self.unwatched += 1;
            return;
        };
        let Ok(mut listing) = nix::dir::Dir::from_fd(readable) else {
            self.unwatched += 1;
            return;
        };
        let names: Vec<PathBuf> = listing
            .iter()
            .filter_map(Result::ok)
            .filter(|e| matches!(e.file_type(), Some(nix::dir::Type::Directory) | None))
            .map(|e| PathBuf::from(OsStr::from_bytes(e.file_name().to_bytes())))
            .filter(|n| n.as_os_str() != "." && n.as_os_str() != "..")
            .collect();
        drop(listing);
        for name in names {
            self.add_subdir(dir.as_fd(), &name, &rel.join(&name));
        }
    }

    /// Watches `name` in `parent` (known as `rel`) and what lies beneath
    /// it, when it is a directory and not a link.
    fn add_subdir(&mut self, parent: BorrowedFd<'_>, name: &Path, rel: &Path) {
        if self.dirs.len() >= MAX_WATCHED_DIRS {
            self.unwatched += 1;
            return;
        }
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(sub) = openat(parent, name, flags, Mode::empty()) else {
            // Not a directory, a link, or gone meanwhile.
            return;
        };
        if beneath::path_of(sub.as_fd()).is_ok_and(|path| self.fence.seals(&path)) {
            // agent-reach's own state is not watched for anyone.
            return;
        }
        if self.add(sub.as_fd(), rel.to_path_buf()).is_err() {
            self.unwatched += 1;
            return;
        }
        self.add_beneath(sub, rel);
    }

    /// A new directory `rel` appeared in the watched tree: watched with
    /// what it already holds.
    fn add_new(&mut self, rel: &Path) {
        let Some(name) = rel.file_name() else {
            return;
        };
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let Ok(parent) = beneath::open_beneath(self.top.as_fd(), parent_rel, flags) else {
            self.unwatched += 1;
            return;
        };
        self.add_subdir(parent.as_fd(), Path::new(name), rel);
    }

    /// Forgets the watches on `rel` and beneath it (it was moved away).
    fn forget(&mut self, rel: &Path) {
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, dir)| dir.starts_with(rel))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = self.queue.get_ref().0.rm_watch(wd);
        }
    }

    /// The kernel's events as changes, E2B's way: one change per kind an
    /// event carries, in fsnotify's order.
    fn translate(&mut self, events: Vec<InotifyEvent>) -> Vec<Change> {
        let mut out = Vec::new();
        for event in events {
            let mask = event.mask;
            if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                self.overflows += 1;
                continue;
            }
            if mask.contains(AddWatchFlags::IN_IGNORED) {
                self.dirs.remove(&event.wd);
                continue;
            }
            let Some(base) = self.dirs.get(&event.wd).cloned() else {
                continue;
            };
            let name = match &event.name {
                Some(name) => base.join(name),
                // An event on a watched directory itself: only the watched
                // one is told (a subdirectory's parent already was).
                None if base.as_os_str().is_empty() => PathBuf::from("."),
                None => continue,
            };
            let is_dir = mask.contains(AddWatchFlags::IN_ISDIR);
            if self.recursive && is_dir && event.name.is_some() {
                if mask.contains(AddWatchFlags::IN_MOVED_FROM) {
                    self.forget(&name);
                }
                if mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
                    self.add_new(&name);
                }
            }
            for kind in kinds(mask) {
                out.push(Change {
                    name: name.clone(),
                    kind,
                });
            }
        }
        out
    }
}

/// The kinds an event's mask carries, in the order E2B's envd sends them.
fn kinds(mask: AddWatchFlags) -> Vec<ChangeKind> {
    let table = [
        (
            AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO,
            ChangeKind::Create,
        ),
        (
            AddWatchFlags::IN_MOVE_SELF | AddWatchFlags::IN_MOVED_FROM,
            ChangeKind::Rename,
        ),
        (AddWatchFlags::IN_ATTRIB, ChangeKind::Chmod),
        (AddWatchFlags::IN_MODIFY, ChangeKind::Write),
        (
            AddWatchFlags::IN_DELETE | AddWatchFlags::IN_DELETE_SELF,
            ChangeKind::Remove,
        ),
    ];
    table
        .into_iter()
        .filter(|(bits, _)| mask.intersects(*bits))
        .map(|(_, kind)| kind)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Changes until `want` is among them (or two seconds passed).
    async fn until(watch: &mut DirWatch, want: &Change) -> Vec<Change> {
        let mut seen = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while !seen.contains(want) {
                seen.extend(watch.next().await.unwrap());
            }
        })
        .await;
        seen
    }

    fn change(name: &str, kind: ChangeKind) -> Change {
        Change {
            name: PathBuf::from(name),
            kind,
        }
    }

    #[test]
    fn an_event_carrying_two_kinds_gives_both_in_e2bs_order() {
        let mask = AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE;
        assert_eq!(kinds(mask), vec![ChangeKind::Create, ChangeKind::Write]);
        assert!(kinds(AddWatchFlags::IN_ACCESS).is_empty());
    }

    #[tokio::test]
    async fn files_made_written_and_removed_are_named_relative_to_the_watched_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("w")).unwrap();
        let ws = Workspace::new(dir.path());
        let mut watch = ws.watch_dir("w", false).unwrap();
        std::fs::write(dir.path().join("w/a.txt"), "x").unwrap();
        let seen = until(&mut watch, &change("a.txt", ChangeKind::Write)).await;
        assert_eq!(
            seen.first(),
            Some(&change("a.txt", ChangeKind::Create)),
            "{seen:?}"
        );
        std::fs::remove_file(dir.path().join("w/a.txt")).unwrap();
        let seen = until(&mut watch, &change("a.txt", ChangeKind::Remove)).await;
        assert!(
            seen.contains(&change("a.txt", ChangeKind::Remove)),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn a_recursive_watch_follows_new_directories_and_what_they_already_hold() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("old/deep")).unwrap();
        let ws = Workspace::new(dir.path());
        let mut watch = ws.watch_dir("/", true).unwrap();
        std::fs::write(dir.path().join("old/deep/f"), "x").unwrap();
        let want = change("old/deep/f", ChangeKind::Create);
        assert!(until(&mut watch, &want).await.contains(&want));
        std::fs::create_dir_all(dir.path().join("new/a")).unwrap();
        let want = change("new", ChangeKind::Create);
        assert!(until(&mut watch, &want).await.contains(&want));
        // `new/a` was made before `new` was watched: it is watched all the same.
        std::fs::write(dir.path().join("new/a/g"), "y").unwrap();
        let want = change("new/a/g", ChangeKind::Create);
        assert!(until(&mut watch, &want).await.contains(&want));
    }

    #[tokio::test]
    async fn a_plain_watch_does_not_see_beneath_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let ws = Workspace::new(dir.path());
        let mut watch = ws.watch_dir("", false).unwrap();
        std::fs::write(dir.path().join("sub/hidden"), "x").unwrap();
        std::fs::write(dir.path().join("top"), "x").unwrap();
        let want = change("top", ChangeKind::Create);
        let seen = until(&mut watch, &want).await;
        assert!(seen.contains(&want), "{seen:?}");
        assert!(!seen.iter().any(|c| c.name.starts_with("sub/")), "{seen:?}");
    }

    #[tokio::test]
    async fn a_missing_directory_a_file_and_a_way_out_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("file"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("out")).unwrap();
        let ws = Workspace::new(dir.path());
        assert!(matches!(
            ws.watch_dir("nope", false).unwrap_err(),
            WorkspaceError::NotFound { .. }
        ));
        assert!(matches!(
            ws.watch_dir("file", false).unwrap_err(),
            WorkspaceError::Invalid { .. }
        ));
        assert!(matches!(
            ws.watch_dir("out", false).unwrap_err(),
            WorkspaceError::Escapes { .. }
        ));
        assert!(matches!(
            ws.watch_dir("../", false).unwrap_err(),
            WorkspaceError::Escapes { .. }
        ));
    }
}
