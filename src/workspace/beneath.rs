//! A caller's path resolved beneath a directory handle by the kernel, and
//! the handle, not the path, handed on.
//!
//! `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` (Linux 5.6):
//! the kernel walks the path from the root handle, follows the links that
//! stay beneath it and fails with `EXDEV` on anything leading out (`..`
//! above the root, an absolute link, a link climbing out), whatever came
//! before it. A missing component followed by `..` is `ENOENT`, as for any
//! path: nothing is cancelled lexically. Between this check and the use
//! there is no window, because the use is the descriptor it returns.
//!
//! Where the kernel lacks `openat2` (`ENOSYS`: before 5.6, or a seccomp
//! filter refusing it), [`Resolver::Walk`] does the same in user space: one
//! `openat(O_NOFOLLOW)` per component from the root handle, each link read
//! with `readlinkat` and spliced into the rest of the path (absolute ones
//! refused), and `..` taken from the stack of handles already opened rather
//! than from the kernel, so a directory renamed or swapped meanwhile cannot
//! lead the walk out either.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};

/// The most links one resolution follows (the kernel's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;
/// How often an `openat2` interrupted by a concurrent rename (`EAGAIN`,
/// only with `..` in the path) is tried again before giving up.
const EAGAIN_RETRIES: usize = 64;

/// `struct open_how` of `openat2(2)` (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Who resolves the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolver {
    /// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`.
    Kernel,
    /// The `O_NOFOLLOW` walk, where the kernel has no `openat2`.
    Walk,
}

/// 0: not known yet, 1: the kernel has `openat2`, 2: it does not.
static KERNEL_HAS_OPENAT2: AtomicU8 = AtomicU8::new(0);

/// The resolver this kernel offers (the walk once `openat2` said ENOSYS).
pub(crate) fn resolver() -> Resolver {
    if KERNEL_HAS_OPENAT2.load(Ordering::Relaxed) == 2 {
        Resolver::Walk
    } else {
        Resolver::Kernel
    }
}

/// Opens `rel` beneath `root` with `flags` (plus `O_CLOEXEC`); with
/// `O_NOFOLLOW` a final link is not followed. `EXDEV` (or `ELOOP`) means the
/// path leads out of `root`.
pub(crate) fn open_beneath(root: BorrowedFd<'_>, rel: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
    open_with(resolver(), root, rel, flags)
}

/// [`open_beneath`] with a chosen resolver (the tests run both).
pub(crate) fn open_with(
    resolver: Resolver,
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
) -> nix::Result<OwnedFd> {
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if resolver == Resolver::Kernel {
        match openat2(root, rel, flags) {
            Err(Errno::ENOSYS) => KERNEL_HAS_OPENAT2.store(2, Ordering::Relaxed),
            other => {
                KERNEL_HAS_OPENAT2.store(1, Ordering::Relaxed);
                return other;
            }
        }
    }
    walk_open(root, rel, flags)
}

fn openat2(root: BorrowedFd<'_>, rel: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
    let path = CString::new(rel.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    let how = OpenHow {
        flags: u64::from((flags | OFlag::O_CLOEXEC).bits().cast_unsigned()),
        mode: 0,
        resolve: libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS,
    };
    for _ in 0..EAGAIN_RETRIES {
        // SAFETY: a NUL-terminated path, an `open_how` of the size passed;
        // a non-negative result is a new descriptor we own.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                path.as_ptr(),
                &raw const how,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if ret >= 0 {
            let fd = RawFd::try_from(ret).map_err(|_| Errno::EBADF)?;
            // SAFETY: the kernel just returned this descriptor to us.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        match Errno::last() {
            Errno::EAGAIN | Errno::EINTR => continue,
            other => return Err(other),
        }
    }
    Err(Errno::EAGAIN)
}

/// The walk's result: the directory holding the final name (`None`: the
/// root itself) and that name (`None`: the directory is what was named).
struct Walked {
    dir: Option<OwnedFd>,
    name: Option<OsString>,
}

fn walk_open(root: BorrowedFd<'_>, rel: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
    let follow_final = !flags.contains(OFlag::O_NOFOLLOW);
    let walked = walk(root, rel, follow_final)?;
    let dir = walked.dir.as_ref().map_or(root, AsFd::as_fd);
    match walked.name {
        None => openat(dir, ".", flags | OFlag::O_CLOEXEC, Mode::empty()),
        // The walk saw no link here; one planted since is refused.
        Some(name) => openat(
            dir,
            name.as_os_str(),
            flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ),
    }
}

/// The parts of a relative path, as names (`..` and `.` kept as such).
fn parts(rel: &Path) -> nix::Result<VecDeque<OsString>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(name) => Ok(name.to_os_string()),
            Component::ParentDir => Ok(OsString::from("..")),
            Component::CurDir => Ok(OsString::from(".")),
            Component::RootDir | Component::Prefix(_) => Err(Errno::EXDEV),
        })
        .collect()
}

fn walk(root: BorrowedFd<'_>, rel: &Path, follow_final: bool) -> nix::Result<Walked> {
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut rest = parts(rel)?;
    let mut links = 0;
    while let Some(part) = rest.pop_front() {
        let last = rest.is_empty();
        if part == "." {
            continue;
        }
        if part == ".." {
            stack.pop().ok_or(Errno::EXDEV)?;
            continue;
        }
        let dir = stack.last().map_or(root, AsFd::as_fd);
        let stat = match fstatat(dir, part.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) if last => {
                return Ok(Walked {
                    dir: stack.pop(),
                    name: Some(part),
                });
            }
            other => other?,
        };
        let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        if kind == SFlag::S_IFLNK && (follow_final || !last) {
            links += 1;
            if links > MAX_LINKS {
                return Err(Errno::ELOOP);
            }
            let target = readlinkat(dir, part.as_os_str())?;
            let target = Path::new(&target);
            if target.is_absolute() {
                return Err(Errno::EXDEV);
            }
            if target.as_os_str().is_empty() {
                return Err(Errno::ENOENT);
            }
            for spliced in parts(target)?.into_iter().rev() {
                rest.push_front(spliced);
            }
        } else if last {
            return Ok(Walked {
                dir: stack.pop(),
                name: Some(part),
            });
        } else if kind == SFlag::S_IFDIR {
            let next = openat(
                dir,
                part.as_os_str(),
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            stack.push(next);
        } else {
            return Err(Errno::ENOTDIR);
        }
    }
    Ok(Walked {
        dir: stack.pop(),
        name: None,
    })
}

/// The flags every directory handle here is opened with.
pub(crate) fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY
}

/// The deepest existing directory on the way to `rel` and how many of
/// `rel`'s components it stands for: each prefix of `rel` is opened beneath
/// `root` by the kernel in turn, until one does not exist.
pub(crate) fn deepest_existing(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlag,
) -> nix::Result<(OwnedFd, usize)> {
    let components: Vec<Component<'_>> = rel.components().collect();
    let mut found = (open_beneath(root, Path::new("."), flags)?, 0);
    for depth in 1..=components.len() {
        let prefix: PathBuf = components[..depth].iter().collect();
        match open_beneath(root, &prefix, flags) {
            Ok(fd) => found = (fd, depth),
            Err(Errno::ENOENT) => break,
            Err(e) => return Err(e),
        }
    }
    Ok(found)
}

/// The components of `rel` from `depth` on, which must all be plain names
/// (a missing directory followed by `..` or `.` is `ENOENT`, as the kernel
/// would say).
pub(crate) fn missing_names(rel: &Path, depth: usize) -> nix::Result<Vec<&OsStr>> {
    rel.components()
        .skip(depth)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(Errno::ENOENT),
        })
        .collect()
}

/// Opens the directory `rel` beneath `root`, making the missing directories
/// at its end one at a time (`mkdirat` on the handle of the one before,
/// then `openat(O_NOFOLLOW)`), with permission bits `mode`.
pub(crate) fn open_or_make_dir(
    root: BorrowedFd<'_>,
    rel: &Path,
    mode: u32,
) -> nix::Result<OwnedFd> {
    match open_beneath(root, rel, dir_flags()) {
        Err(Errno::ENOENT) => {}
        other => return other,
    }
    let (mut dir, depth) = deepest_existing(root, rel, dir_flags())?;
    for name in missing_names(rel, depth)? {
        match mkdirat(&dir, name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e),
        }
        dir = openat(
            &dir,
            name,
            dir_flags() | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
    }
    Ok(dir)
}

/// Where the descriptor `fd` is, as the kernel names it (`/proc/self/fd`).
pub(crate) fn path_of(fd: BorrowedFd<'_>) -> std::io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// A root `ws` beside a directory `outside` holding `secret`, with links
    /// out (absolute, relative, through a missing part) and in.
    fn setup() -> (tempfile::TempDir, OwnedFd) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(root.join("src/sub")).unwrap();
        std::fs::write(root.join("src/sub/file"), "inside").unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        std::fs::write(dir.path().join("outside/secret"), "secret").unwrap();
        std::fs::create_dir_all(root.join("up")).unwrap();
        symlink(dir.path().join("outside/secret"), root.join("up/shadow")).unwrap();
        symlink(dir.path().join("outside"), root.join("up/escape")).unwrap();
        symlink("../../outside", root.join("up/relative_out")).unwrap();
        symlink(dir.path().join("outside"), root.join("lnk_out")).unwrap();
        symlink("src/sub", root.join("inner")).unwrap();
        symlink("../src/sub/file", root.join("up/inside_file")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        let fd = OwnedFd::from(std::fs::File::open(&root).unwrap());
        (dir, fd)
    }

    fn read(resolver: Resolver, root: &OwnedFd, rel: &str) -> nix::Result<String> {
        let fd = open_with(resolver, root.as_fd(), Path::new(rel), OFlag::O_RDONLY)?;
        Ok(std::fs::read_to_string(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap())
    }

    const BOTH: [Resolver; 2] = [Resolver::Kernel, Resolver::Walk];

    #[test]
    fn links_that_stay_inside_are_followed_by_both_resolvers() {
        let (_dir, root) = setup();
        for resolver in BOTH {
            for rel in [
                "src/sub/file",
                "inner/file",
                "up/inside_file",
                "src/../src/sub/./file",
                "inner/../sub/file",
            ] {
                assert_eq!(
                    read(resolver, &root, rel),
                    Ok("inside".into()),
                    "{resolver:?} {rel}"
                );
            }
        }
    }

    #[test]
    fn every_way_out_is_refused_by_both_resolvers() {
        let (_dir, root) = setup();
        for resolver in BOTH {
            for rel in [
                "up/shadow",
                "up/escape/secret",
                "up/relative_out/secret",
                "lnk_out",
                "..",
                "../outside/secret",
                "src/../../outside/secret",
                "src/sub/../../../outside/secret",
                "/etc/passwd",
            ] {
                let got = read(resolver, &root, rel);
                assert!(
                    matches!(got, Err(Errno::EXDEV)),
                    "{resolver:?} {rel}: {got:?}"
                );
            }
        }
    }

    #[test]
    fn a_missing_part_followed_by_dot_dot_is_not_cancelled() {
        let (_dir, root) = setup();
        for resolver in BOTH {
            for rel in [
                "nope/../up/shadow",
                "nope/../src/sub/file",
                "nope/../lnk_out",
            ] {
                let got = read(resolver, &root, rel);
                assert_eq!(got, Err(Errno::ENOENT), "{resolver:?} {rel}");
            }
        }
    }

    #[test]
    fn a_link_loop_ends_in_eloop_and_a_final_link_can_be_kept() {
        let (_dir, root) = setup();
        for resolver in BOTH {
            assert_eq!(
                read(resolver, &root, "loop"),
                Err(Errno::ELOOP),
                "{resolver:?}"
            );
            let link = open_with(
                resolver,
                root.as_fd(),
                Path::new("up/shadow"),
                OFlag::O_PATH | OFlag::O_NOFOLLOW,
            );
            assert!(link.is_ok(), "{resolver:?}: {link:?}");
        }
    }

    #[test]
    fn missing_directories_are_made_but_never_after_a_missing_dot_dot() {
        let (dir, root) = setup();
        let made = open_or_make_dir(root.as_fd(), Path::new("new/deeper"), 0o755).unwrap();
        assert_eq!(
            path_of(made.as_fd()).unwrap(),
            dir.path().canonicalize().unwrap().join("ws/new/deeper")
        );
        assert_eq!(
            open_or_make_dir(root.as_fd(), Path::new("nope/../up/escape"), 0o755).unwrap_err(),
            Errno::ENOENT
        );
        assert!(!dir.path().join("ws/nope").exists());
        assert_eq!(
            open_or_make_dir(root.as_fd(), Path::new("up/escape/f"), 0o755).unwrap_err(),
            Errno::EXDEV
        );
        assert!(!dir.path().join("outside/f").exists());
    }
}
