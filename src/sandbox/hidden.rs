//! What a sandboxed command must not read: agent-reach's secrets and its own
//! processes. Landlock leaves every file readable and, on the kernels we
//! measured (6.18), lets a confined command read `/proc/<pid>/environ`,
//! `cmdline` and `maps` of any process of the same user, the server's
//! included (which holds `$AGENT_REACH_TOKEN` when the token came from the
//! environment); only the ptrace-mode checks that go through the
//! `ptrace_access_check` hook with fs credentials (`exe`, `cwd`, `root`,
//! `fd/*` links, `mem`) are refused by its scoping.
//!
//! So, in the wrapper's private mount namespace (made by
//! [`super::read_only_mounts`]), before Landlock:
//!
//! - every path named with the hidden `--hide` flag (the listeners' token
//!   file, the registry's secrets file) is covered: a file by `/dev/null`
//!   bound onto it, a directory by an empty read-only tmpfs;
//! - `/proc` is replaced by a fresh procfs mounted `hidepid=invisible` with a
//!   `gid=` the wrapper is not in (the default, 0, would exempt root). A
//!   process then sees only the processes it may ptrace, and Landlock's
//!   scoping forbids ptracing anything outside the sandbox's domain: the
//!   command sees itself and what it starts, and not the server, the engine,
//!   other commands or anything else on the machine. The old `/proc`'s own
//!   submounts (a container runtime's masks over `/proc/kcore`, `/proc/sys`
//!   read-only) are cloned before and put back on top, so nothing they mask
//!   comes back.
//!
//! Where no mount namespace can be had, nothing is hidden: `--hide` is then
//! an error (exit 125) unless the paths are hidden already (a nested
//! sandbox) or `--best-effort` says what is not enforced; `/proc` follows the
//! read-only mount layer and stays as it is (said under `--best-effort`).
//! A non-root user's mount namespace lives in a user namespace that does not
//! own the PID namespace, so the kernel refuses the fresh procfs there; the
//! command is then in a child user namespace, and (measured on 6.18) the
//! server's `environ` and `maps` are refused to it anyway, its `cmdline`,
//! `status` and `fd/` listing are not.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

use super::mount_api;
use super::read_only_mounts::unescape_octal;

/// The first group tried as the procfs `gid=` exemption (the overflow gid,
/// `nogroup`); lower ones are tried when we are in it.
const FIRST_EXEMPT_GID: u32 = 65534;
/// How many groups below [`FIRST_EXEMPT_GID`] are tried.
const EXEMPT_GID_TRIES: u32 = 64;
/// What covers a hidden directory.
const EMPTY_DIR_FS: &str = "tmpfs";
/// Its size: nothing is ever written there (it is read-only).
const EMPTY_DIR_OPTIONS: &str = "size=4k,mode=0555";
/// What covers a hidden file.
const EMPTY_FILE: &str = "/dev/null";
/// `/dev/null`'s device number (major 1, minor 3).
const DEV_NULL_RDEV: (u32, u32) = (1, 3);

/// Why something could not be hidden.
#[derive(Debug, thiserror::Error)]
pub enum HideError {
    #[error("no private mount namespace: {0}")]
    Namespace(nix::Error),
    #[error("cannot cover {path}: {source}")]
    Cover { path: PathBuf, source: nix::Error },
    #[error("cannot keep the mount {path} of /proc: {source}")]
    Submount {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot mount a private /proc: {0}")]
    Proc(nix::Error),
    #[error("every group from {first} down is ours; none can be the /proc exemption")]
    NoFreeGroup { first: u32 },
}

/// What was asked to be hidden and was not.
#[derive(Debug, Default)]
pub(crate) struct HideOutcome {
    /// The first `--hide` path that stays readable, and why.
    pub(crate) files: Option<HideError>,
    /// Why `/proc` still shows processes outside the sandbox.
    pub(crate) proc: Option<HideError>,
}

/// Hides `paths` and agent-reach's processes. `in_namespace` says whether
/// this process is already in its private mount namespace; if not, one is
/// made here when the kernel allows (root).
pub(crate) fn hide(paths: &[PathBuf], in_namespace: bool) -> HideOutcome {
    if !in_namespace && let Err(errno) = private_namespace() {
        return HideOutcome {
            files: hide_files_already(paths)
                .err()
                .map(|path| HideError::Cover {
                    path,
                    source: errno,
                }),
            proc: (!proc_already_private()).then_some(HideError::Namespace(errno)),
        };
    }
    HideOutcome {
        files: hide_files(paths).err(),
        proc: private_proc().err().filter(|_| !proc_already_private()),
    }
}

/// A mount namespace of our own, its mounts slaves of the host's.
fn private_namespace() -> Result<(), nix::Error> {
    unshare(CloneFlags::CLONE_NEWNS)?;
    super::read_only_mounts::keep_mounts_private()
}

/// Covers each path that exists and is not covered already.
fn hide_files(paths: &[PathBuf]) -> Result<(), HideError> {
    for path in paths {
        let Ok(path) = path.canonicalize() else {
            continue; // nothing there to read
        };
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if is_dev_null(&meta) {
            continue;
        }
        let cover = |source| HideError::Cover {
            path: path.clone(),
            source,
        };
        if meta.is_dir() {
            mount(
                Some("agent-reach-hidden"),
                &path,
                Some(EMPTY_DIR_FS),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                Some(EMPTY_DIR_OPTIONS),
            )
            .map_err(cover)?;
        } else {
            mount(
                Some(EMPTY_FILE),
                &path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .map_err(cover)?;
            // Read-only too where the kernel lets us (writes to /dev/null are
            // harmless either way).
            let _ = mount_api::set_read_only(&path);
        }
    }
    Ok(())
}

/// Whether every path is absent or covered already (a nested sandbox).
fn hide_files_already(paths: &[PathBuf]) -> Result<(), PathBuf> {
    for path in paths {
        if let Ok(meta) = std::fs::metadata(path)
            && !is_dev_null(&meta)
        {
            return Err(path.clone());
        }
    }
    Ok(())
}

fn is_dev_null(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    meta.file_type().is_char_device()
        && (
            nix::sys::stat::major(rdev) as u32,
            nix::sys::stat::minor(rdev) as u32,
        ) == DEV_NULL_RDEV
}

/// A fresh `/proc` showing only what we may ptrace, the old one's
/// submounts kept on top.
fn private_proc() -> Result<(), HideError> {
    let mountinfo = crate::kernel_file::read_small("/proc/self/mountinfo").unwrap_or_default();
    let gid = exempt_gid(&held_groups()).ok_or(HideError::NoFreeGroup {
        first: FIRST_EXEMPT_GID,
    })?;
    let mut kept = Vec::new();
    for path in proc_submounts(&mount_points(&mountinfo)) {
        let tree = mount_api::clone_tree(&path).map_err(|source| HideError::Submount {
            path: path.clone(),
            source,
        })?;
        kept.push((path, tree));
    }
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(proc_options(gid).as_str()),
    )
    .map_err(HideError::Proc)?;
    for (path, tree) in kept {
        if let Err(source) = mount_api::move_onto(&tree, &path) {
            // Without one of its masks the new /proc would show more than
            // the old: back to the old one.
            let _ = nix::mount::umount2("/proc", nix::mount::MntFlags::MNT_DETACH);
            return Err(HideError::Submount { path, source });
        }
    }
    Ok(())
}

/// Whether `/proc` is already a private one (a nested sandbox).
fn proc_already_private() -> bool {
    let mountinfo = crate::kernel_file::read_small("/proc/self/mountinfo").unwrap_or_default();
    proc_is_private(&mountinfo, &held_groups())
}

/// Our groups: effective, filesystem and supplementary.
fn held_groups() -> Vec<u32> {
    let mut held = vec![nix::unistd::getegid().as_raw()];
    if let Ok(groups) = nix::unistd::getgroups() {
        held.extend(groups.into_iter().map(|g| g.as_raw()));
    }
    held
}

/// The procfs options: only ptrace-able processes visible, and no group of
/// ours exempt.
pub(crate) fn proc_options(gid: u32) -> String {
    format!("hidepid=invisible,gid={gid}")
}

/// A group none of `held` is, for the procfs exemption.
pub(crate) fn exempt_gid(held: &[u32]) -> Option<u32> {
    (0..EXEMPT_GID_TRIES)
        .map(|i| FIRST_EXEMPT_GID - i)
        .find(|gid| !held.contains(gid))
}

/// Mount points and the super options of each line of a mountinfo text:
/// `(point, fstype, super_options)`.
pub(crate) fn mount_points(mountinfo: &str) -> Vec<(PathBuf, String, String)> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let point = head.split(' ').nth(4)?;
            let mut tail = tail.split(' ');
            let fstype = tail.next()?.to_owned();
            let super_options = tail.nth(1).unwrap_or_default().to_owned();
            Some((PathBuf::from(unescape_octal(point)), fstype, super_options))
        })
        .collect()
}

/// The mounts beneath `/proc` to keep on top of a fresh one: each outermost
/// one once (a recursive clone brings what is beneath it), in mount order.
pub(crate) fn proc_submounts(mounts: &[(PathBuf, String, String)]) -> Vec<PathBuf> {
    let proc = Path::new("/proc");
    let mut chosen: Vec<PathBuf> = Vec::new();
    for (point, _, _) in mounts {
        if point == proc || !point.starts_with(proc) {
            continue;
        }
        if chosen.iter().any(|outer| point.starts_with(outer)) {
            continue;
        }
        chosen.push(point.clone());
    }
    chosen
}

/// Whether the topmost `/proc` hides processes from us: `hidepid=invisible`
/// (or 2) with an exempt group that is not ours.
pub(crate) fn proc_is_private(mountinfo: &str, held: &[u32]) -> bool {
    let Some((_, fstype, options)) = mount_points(mountinfo)
        .into_iter()
        .rfind(|(point, _, _)| point == Path::new("/proc"))
    else {
        return false;
    };
    let options: Vec<&str> = options.split(',').collect();
    let hides = options
        .iter()
        .any(|o| *o == "hidepid=invisible" || *o == "hidepid=2");
    let exempt = options
        .iter()
        .find_map(|o| o.strip_prefix("gid="))
        .and_then(|gid| gid.parse::<u32>().ok())
        .unwrap_or(0);
    fstype == "proc" && hides && !held.contains(&exempt)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
        30 22 0:21 / /proc rw,nosuid,nodev,noexec - proc proc rw\n\
        31 30 0:22 / /proc/sys ro - proc proc rw\n\
        32 31 0:23 / /proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw\n\
        33 30 0:5 /null /proc/kcore rw - devtmpfs udev rw,mode=755\n\
        34 22 0:24 / /proc2 rw - tmpfs none rw\n";

    #[test]
    fn the_exemption_group_is_one_we_are_not_in() {
        assert_eq!(exempt_gid(&[0]), Some(65534));
        assert_eq!(exempt_gid(&[0, 65534, 65533]), Some(65532));
        let all: Vec<u32> = (0..EXEMPT_GID_TRIES).map(|i| 65534 - i).collect();
        assert_eq!(exempt_gid(&all), None);
        assert_eq!(proc_options(65534), "hidepid=invisible,gid=65534");
    }

    #[test]
    fn mount_points_carry_their_type_and_super_options() {
        let mounts = mount_points(MOUNTINFO);
        assert_eq!(mounts.len(), 6);
        assert_eq!(
            mounts[1],
            (PathBuf::from("/proc"), "proc".to_owned(), "rw".to_owned())
        );
        assert_eq!(mounts[4].1, "devtmpfs");
        assert_eq!(mounts[4].2, "rw,mode=755");
    }

    #[test]
    fn only_the_outermost_mounts_beneath_proc_are_kept() {
        let kept = proc_submounts(&mount_points(MOUNTINFO));
        assert_eq!(
            kept,
            vec![PathBuf::from("/proc/sys"), PathBuf::from("/proc/kcore")]
        );
    }

    #[test]
    fn a_secret_left_readable_stops_the_wrapper_with_125_naming_it() {
        let err = super::super::error::SandboxError::Hide(HideError::Cover {
            path: PathBuf::from("/etc/agent-reach/token"),
            source: nix::Error::EPERM,
        });
        assert_eq!(err.exit_code(), 125);
        let message = err.to_string();
        assert!(message.contains("/etc/agent-reach/token"), "{message}");
        assert!(message.contains("--best-effort"), "{message}");
    }

    #[test]
    fn a_proc_is_private_only_when_it_hides_from_us() {
        let host = "30 22 0:21 / /proc rw - proc proc rw\n";
        assert!(!proc_is_private(host, &[0]));
        let ours =
            format!("{host}40 30 0:30 / /proc ro - proc proc rw,hidepid=invisible,gid=65534\n");
        assert!(proc_is_private(&ours, &[0]));
        // An exemption we hold hides nothing from us.
        assert!(!proc_is_private(&ours, &[0, 65534]));
        let root_exempt = "30 22 0:21 / /proc rw - proc proc rw,hidepid=2\n";
        assert!(!proc_is_private(root_exempt, &[0]));
        assert!(proc_is_private(root_exempt, &[1000]));
        assert!(!proc_is_private("", &[0]));
    }
}
