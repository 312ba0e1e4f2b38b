//! The last step: find the command on `PATH` and exec it in place, with the
//! shell's exit codes for failure (127 not found, 126 found but not runnable).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::SandboxError;

/// The search path when the environment has no `PATH` (what execvp uses).
pub(crate) const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Where `command` would be found: itself when it names a path, else the
/// first executable match on `path_var`, else the first non-executable match
/// (to report 126), else `None` (127).
pub(crate) fn resolve(command: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    if command.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(command));
    }
    if command.is_empty() {
        return None;
    }
    let search = path_var.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut not_executable = None;
    for dir in std::env::split_paths(search) {
        // An empty PATH entry means the current directory.
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(command);
        let Ok(meta) = std::fs::metadata(&candidate) else {
            continue;
        };
        if meta.is_dir() {
            continue;
        }
        if meta.permissions().mode() & 0o111 != 0 {
            return Some(candidate);
        }
        not_executable.get_or_insert(candidate);
    }
    not_executable
}

/// Execs `argv` with exactly `env`. Only returns on failure.
pub(crate) fn exec(argv: &[OsString], env: &[(OsString, OsString)]) -> SandboxError {
    let Some((command, args)) = argv.split_first() else {
        return SandboxError::CommandNotFound {
            command: OsString::new(),
        };
    };
    let path_var = env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_os_str());
    let Some(program) = resolve(command, path_var) else {
        return SandboxError::CommandNotFound {
            command: command.clone(),
        };
    };
    let err = exec_program(&program, command, args, env);
    match err.raw_os_error() {
        // A file without a `#!` line: run it with sh, as execvp does.
        Some(libc::ENOEXEC) => {
            let mut sh_args = vec![program.clone().into_os_string()];
            sh_args.extend(args.iter().cloned());
            let err = exec_program(Path::new("/bin/sh"), command, &sh_args, env);
            SandboxError::CannotExecute {
                command: command.clone(),
                source: err,
            }
        }
        Some(libc::ENOENT) if !program.exists() => SandboxError::CommandNotFound {
            command: command.clone(),
        },
        _ => SandboxError::CannotExecute {
            command: command.clone(),
            source: err,
        },
    }
}

fn exec_program(
    program: &Path,
    argv0: &OsStr,
    args: &[OsString],
    env: &[(OsString, OsString)],
) -> std::io::Error {
    // std's exec also restores SIGPIPE (ignored by the Rust runtime) and the
    // signal mask to their defaults, so the command starts as from a shell.
    Command::new(program)
        .arg0(argv0)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_commands_are_taken_as_given() {
        assert_eq!(
            resolve(OsStr::new("./x"), Some(OsStr::new("/nowhere"))),
            Some(PathBuf::from("./x"))
        );
    }

    #[test]
    fn search_prefers_executables_and_reports_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        let exe = dir.path().join("exe");
        std::fs::create_dir(&plain).unwrap();
        std::fs::create_dir(&exe).unwrap();
        std::fs::write(plain.join("tool"), b"").unwrap();
        std::fs::write(exe.join("tool"), b"").unwrap();
        std::fs::set_permissions(exe.join("tool"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let both = std::env::join_paths([&plain, &exe]).unwrap();
        assert_eq!(
            resolve(OsStr::new("tool"), Some(&both)),
            Some(exe.join("tool"))
        );
        assert_eq!(
            resolve(OsStr::new("tool"), Some(plain.as_os_str())),
            Some(plain.join("tool"))
        );
        assert_eq!(resolve(OsStr::new("absent"), Some(&both)), None);
        assert_eq!(resolve(OsStr::new(""), Some(&both)), None);
    }
}
