//! The session PATH entry on Windows: a directory first on the PATH of
//! every command, holding `apply_patch.exe`, `applypatch.exe` and
//! `agent-reach-exec.exe` (hard links of this executable, copies where a
//! link cannot be made: dispatch strips the `.exe`) and a `.cmd` shim per
//! personality name (from `shims/personality.cmd`), gone when we are.
//!
//! Windows file locking is the lock: the guard holds `.lock` open with no
//! sharing, so nobody can remove it while we live. A process that died
//! without dropping the guard left a directory whose `.lock` can be
//! removed: the next start sweeps those.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::windows::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::process::env_var;
use crate::context::ProcessContext;
use crate::personality::PERSONALITY_NAMES;

/// The lock file held inside each entry.
const LOCK_FILE_NAME: &str = ".lock";
/// The `.cmd` shim template.
const SHIM_TEMPLATE: &str = include_str!("../../shims/personality.cmd");

/// Why the entry could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathEntryError {
    #[error("cannot create session PATH directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
    #[error("cannot place {dest} (from {src}): {source}")]
    Link {
        src: PathBuf,
        dest: PathBuf,
        source: io::Error,
    },
}

/// Owns one entry; dropping it removes the directory.
#[derive(Debug)]
pub(crate) struct PathEntryGuard {
    dir: PathBuf,
    lock: Option<File>,
}

impl PathEntryGuard {
    /// Sweeps stale siblings under `root`, then makes and fills a fresh
    /// directory for `exe`.
    pub(crate) fn create(root: &Path, exe: &Path) -> Result<Self, PathEntryError> {
        fs::create_dir_all(root).map_err(|source| PathEntryError::CreateDir {
            path: root.to_path_buf(),
            source,
        })?;
        sweep_stale(root);
        let dir = tempfile::Builder::new()
            .prefix("session-")
            .tempdir_in(root)
            .map_err(|source| PathEntryError::CreateDir {
                path: root.to_path_buf(),
                source,
            })?
            .keep();
        let lock_path = dir.join(LOCK_FILE_NAME);
        let lock = OpenOptions::new()
            .write(true)
            .create_new(true)
            .share_mode(0)
            .open(&lock_path)
            .map_err(|source| PathEntryError::Lock {
                path: lock_path,
                source,
            })?;
        let guard = Self {
            dir,
            lock: Some(lock),
        };
        for (name, _) in PERSONALITY_NAMES {
            let exe_dest = guard.dir.join(format!("{name}.exe"));
            fs::hard_link(exe, &exe_dest)
                .or_else(|_| fs::copy(exe, &exe_dest).map(drop))
                .map_err(|source| PathEntryError::Link {
                    src: exe.to_path_buf(),
                    dest: exe_dest.clone(),
                    source,
                })?;
            let shim_dest = guard.dir.join(format!("{name}.cmd"));
            let body = SHIM_TEMPLATE
                .replace("{exe}", &exe.display().to_string())
                .replace("{name}", name)
                .replace('\n', "\r\n");
            fs::write(&shim_dest, body).map_err(|source| PathEntryError::Link {
                src: exe.to_path_buf(),
                dest: shim_dest,
                source,
            })?;
        }
        Ok(guard)
    }

    /// `path` with the entry first.
    pub(crate) fn prepend_to(&self, path: Option<&std::ffi::OsStr>) -> OsString {
        let mut joined = self.dir.clone().into_os_string();
        if let Some(rest) = path.filter(|p| !p.is_empty()) {
            joined.push(";");
            joined.push(rest);
        }
        joined
    }
}

impl Drop for PathEntryGuard {
    fn drop(&mut self) {
        drop(self.lock.take());
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The session PATH entry for a process that runs commands for others
/// (`run`, `exec`, `serve`), and its context with the entry first on PATH.
pub(crate) fn session_context(
    ctx: &ProcessContext,
) -> Result<(PathEntryGuard, ProcessContext), PathEntryError> {
    let root = ctx.agent_reach_home().join("tmp").join("path");
    let entry = PathEntryGuard::create(&root, &ctx.exe)?;
    let mut ctx = ctx.clone();
    let old_path = env_var(&ctx.env, "PATH").map(ToOwned::to_owned);
    ctx.env.retain(|k, _| !k.eq_ignore_ascii_case("PATH"));
    ctx.env
        .insert("PATH".into(), entry.prepend_to(old_path.as_deref()));
    Ok((entry, ctx))
}

/// Removes the entries under `root` whose `.lock` nobody holds.
fn sweep_stale(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        // A held lock cannot be removed (no sharing): the entry is live.
        if fs::remove_file(dir.join(LOCK_FILE_NAME)).is_ok() {
            let _ = fs::remove_dir_all(&dir);
        }
    }
}
