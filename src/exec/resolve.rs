//! Checks before a start that turn the usual failures into clear errors with
//! the right exit code: the working directory (never silently replaced by
//! another), and the program looked up on the child's PATH, relative to the
//! child's working directory, with "not found" (127) told apart from "found
//! but not executable" (126).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::error::ExecError;

/// Opens the working directory as the handle the child enters (`fchdir`):
/// beneath `beneath` by the kernel when that is set (whatever was swapped
/// in since the plan, it cannot lead out of it), else as given. Checks that
/// it is a directory we may enter, so the usual failures get clear errors.
pub(crate) fn open_workdir(cwd: &Path, beneath: Option<&Path>) -> Result<OwnedFd, ExecError> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let unusable = |source| ExecError::WorkdirUnusable {
        path: cwd.to_owned(),
        source,
    };
    let outside = |root: &Path| {
        unusable(std::io::Error::other(format!(
            "it leads outside {}",
            root.display()
        )))
    };
    let opened = match beneath {
        None => nix::fcntl::open(cwd, flags, Mode::empty()),
        Some(root) => {
            let rel = cwd.strip_prefix(root).map_err(|_| outside(root))?;
            let root_fd =
                nix::fcntl::open(root, flags, Mode::empty()).map_err(|e| unusable(e.into()))?;
            match crate::workspace::beneath::open_beneath(root_fd.as_fd(), rel, flags) {
                Err(Errno::EXDEV | Errno::ELOOP) => return Err(outside(root)),
                other => other,
            }
        }
    };
    let fd = opened.map_err(|errno| match errno {
        Errno::ENOENT => ExecError::WorkdirMissing {
            path: cwd.to_owned(),
        },
        Errno::ENOTDIR => ExecError::WorkdirNotDirectory {
            path: cwd.to_owned(),
        },
        other => unusable(other.into()),
    })?;
    // Search permission is what fchdir needs; reading the listing is not.
    // SAFETY: a descriptor we hold and a NUL-terminated path.
    if unsafe { libc::faccessat(fd.as_raw_fd(), c".".as_ptr(), libc::X_OK, 0) } != 0 {
        return Err(unusable(std::io::Error::last_os_error()));
    }
    // Above the standard descriptors, which the child replaces before it
    // enters the directory (a server started with stdin closed would get 0).
    if fd.as_raw_fd() <= libc::STDERR_FILENO {
        let above = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3))
            .map_err(|e| unusable(e.into()))?;
        // SAFETY: fcntl just returned this new descriptor to us.
        return Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(above) });
    }
    Ok(fd)
}

/// How long a `PATH` lookup is reused before it is done again (as a shell's
/// command hash, but bounded): a registry tool run a thousand times a second
/// would otherwise stat every `PATH` entry before its own for each run.
const LOOKUP_TTL: Duration = Duration::from_secs(2);
/// Lookups remembered at most (cleared whole when full).
const LOOKUP_CACHE_MAX: usize = 256;

type LookupKey = (OsString, OsString, PathBuf);
static LOOKUPS: Mutex<Option<HashMap<LookupKey, (PathBuf, Instant)>>> = Mutex::new(None);

/// The file `program` names for a child with environment `env` in `cwd`.
/// A `PATH` search found within the last [`LOOKUP_TTL`] is reused after
/// one check that its file is still executable.
pub(crate) fn resolve_program(
    program: &OsStr,
    cwd: &Path,
    env: &BTreeMap<OsString, OsString>,
) -> Result<PathBuf, ExecError> {
    if program.as_bytes().contains(&b'/') || program.is_empty() {
        return search(program, cwd, env);
    }
    let path_var = env.get(OsStr::new("PATH")).cloned().unwrap_or_default();
    let key = (program.to_owned(), path_var, cwd.to_path_buf());
    let cached = lookups()
        .as_ref()
        .and_then(|map| map.get(&key))
        .filter(|(_, at)| at.elapsed() < LOOKUP_TTL)
        .map(|(path, _)| path.clone());
    if let Some(path) = cached
        && matches!(candidate(&path), Candidate::Executable)
    {
        return Ok(path);
    }
    let found = search(program, cwd, env)?;
    let mut map = lookups();
    let map = map.get_or_insert_with(HashMap::new);
    if map.len() >= LOOKUP_CACHE_MAX {
        map.clear();
    }
    map.insert(key, (found.clone(), Instant::now()));
    Ok(found)
}

fn lookups() -> std::sync::MutexGuard<'static, Option<HashMap<LookupKey, (PathBuf, Instant)>>> {
    crate::sync::lock(&LOOKUPS)
}

/// The search itself, every time.
fn search(
    program: &OsStr,
    cwd: &Path,
    env: &BTreeMap<OsString, OsString>,
) -> Result<PathBuf, ExecError> {
    if program.is_empty() {
        return Err(ExecError::NotFound {
            program: program.to_owned(),
        });
    }
    if program.as_bytes().contains(&b'/') {
        let path = cwd.join(program);
        return match candidate(&path) {
            Candidate::Executable => Ok(path),
            Candidate::Missing => Err(ExecError::NotFound {
                program: program.to_owned(),
            }),
            Candidate::NotExecutable(source) => Err(ExecError::NotExecutable {
                program: program.to_owned(),
                source,
            }),
        };
    }
    let path_var = env
        .get(OsStr::new("PATH"))
        .map(OsString::as_os_str)
        .unwrap_or_default();
    let mut refused = None;
    for dir in std::env::split_paths(path_var) {
        // An empty entry means the working directory, as in execvp.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let path = cwd.join(dir).join(program);
        match candidate(&path) {
            Candidate::Executable => return Ok(path),
            Candidate::Missing => {}
            Candidate::NotExecutable(source) => {
                refused.get_or_insert(source);
            }
        }
    }
    match refused {
        Some(source) => Err(ExecError::NotExecutable {
            program: program.to_owned(),
            source,
        }),
        None => Err(ExecError::NotFound {
            program: program.to_owned(),
        }),
    }
}

enum Candidate {
    Executable,
    Missing,
    NotExecutable(std::io::Error),
}

fn candidate(path: &Path) -> Candidate {
    match std::fs::metadata(path) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Candidate::Missing,
        Err(err) if err.raw_os_error() == Some(libc::ENOTDIR) => Candidate::Missing,
        Err(err) => Candidate::NotExecutable(err),
        Ok(meta) if meta.is_dir() => Candidate::NotExecutable(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory",
        )),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => Candidate::NotExecutable(
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied"),
        ),
        Ok(_) => match nix::unistd::access(path, nix::unistd::AccessFlags::X_OK) {
            Ok(()) => Candidate::Executable,
            Err(errno) => Candidate::NotExecutable(errno.into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with_path(path: &str) -> BTreeMap<OsString, OsString> {
        [(OsString::from("PATH"), OsString::from(path))].into()
    }

    fn make_file(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_remembered_lookup_is_checked_again_before_use() {
        let dir = tempfile::tempdir().unwrap();
        let tool = make_file(dir.path(), "cached-tool", 0o755);
        let env = env_with_path(&dir.path().display().to_string());
        let find = || resolve_program(OsStr::new("cached-tool"), Path::new("/"), &env);
        assert_eq!(find().unwrap(), tool);
        assert_eq!(find().unwrap(), tool, "from the cache");
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            matches!(find(), Err(ExecError::NotExecutable { .. })),
            "a file that is no longer executable is not taken from the cache"
        );
        std::fs::remove_file(&tool).unwrap();
        assert!(matches!(find(), Err(ExecError::NotFound { .. })));
    }

    #[test]
    fn finds_a_program_on_the_childs_path() {
        let dir = tempfile::tempdir().unwrap();
        let tool = make_file(dir.path(), "tool", 0o755);
        let env = env_with_path(&format!("/nonexistent:{}", dir.path().display()));
        assert_eq!(
            resolve_program(OsStr::new("tool"), Path::new("/"), &env).unwrap(),
            tool
        );
    }

    #[test]
    fn missing_is_not_found_and_unexecutable_is_126() {
        let dir = tempfile::tempdir().unwrap();
        make_file(dir.path(), "plain", 0o644);
        let env = env_with_path(&dir.path().display().to_string());
        let err = resolve_program(OsStr::new("nope"), Path::new("/"), &env).unwrap_err();
        assert_eq!(err.exit_code(), 127);
        let err = resolve_program(OsStr::new("plain"), Path::new("/"), &env).unwrap_err();
        assert_eq!(err.exit_code(), 126);
        let err = resolve_program(dir.path().as_os_str(), Path::new("/"), &env).unwrap_err();
        assert_eq!(err.exit_code(), 126, "a directory cannot be executed");
    }

    #[test]
    fn relative_paths_resolve_against_the_childs_workdir() {
        let dir = tempfile::tempdir().unwrap();
        let script = make_file(dir.path(), "run.sh", 0o755);
        let env = env_with_path("/usr/bin");
        assert_eq!(
            resolve_program(OsStr::new("./run.sh"), dir.path(), &env).unwrap(),
            dir.path().join("./run.sh")
        );
        assert!(script.exists());
        let err = resolve_program(OsStr::new("./run.sh"), Path::new("/"), &env).unwrap_err();
        assert_eq!(err.exit_code(), 127);
    }

    #[test]
    fn workdir_checks_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        assert!(open_workdir(dir.path(), None).is_ok());
        let missing = dir.path().join("gone");
        assert!(matches!(
            open_workdir(&missing, None),
            Err(ExecError::WorkdirMissing { .. })
        ));
        let file = make_file(dir.path(), "f", 0o644);
        assert!(matches!(
            open_workdir(&file, None),
            Err(ExecError::WorkdirNotDirectory { .. })
        ));
    }

    #[test]
    fn a_workdir_beneath_a_root_is_opened_by_the_kernel_and_never_leads_out() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir(base.join("outside")).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), root.join("lnk_out")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("lnk_in")).unwrap();
        let entered = open_workdir(&root.join("lnk_in"), Some(&root)).unwrap();
        let named = std::fs::read_link(format!("/proc/self/fd/{}", entered.as_raw_fd())).unwrap();
        assert_eq!(named, root.join("sub"));
        for outside in [
            root.join("lnk_out"),
            base.join("outside"),
            root.join("sub/../.."),
        ] {
            let err = open_workdir(&outside, Some(&root)).unwrap_err();
            assert!(
                err.to_string().contains("leads outside"),
                "{}: {err}",
                outside.display()
            );
        }
    }
}
