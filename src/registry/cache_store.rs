//! The cache's file store under `$AGENT_REACH_HOME/cache/results/`: what
//! one process keeps, every process sharing the home finds, so side-by-side
//! one-shot `exec --json` calls hit the cache as a long-lived server does.
//!
//! One file a result, named by a hash of its key and holding the whole key
//! (compared on reading: a hash collision is a miss, not a wrong answer),
//! when it was stored, when it expires, and the result. A file is written
//! beside its place and renamed into it, so a reader sees a whole entry or
//! none. The directory is private to the user (0700, files 0600): results
//! hold command output, redacted as every result is. At most
//! [`MAX_FILES`] are kept; expired entries go first, then the oldest.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use super::cache::CacheKey;
use crate::result::NormalizedResult;

/// The store's directory under `$AGENT_REACH_HOME`.
pub(crate) const STORE_DIR: &str = "cache/results";

/// At most this many stored results (a process sweeps every
/// [`SWEEP_EVERY`] writes, down to room for as many more).
const MAX_FILES: usize = 1024;

/// How many writes of a process go between two sweeps.
const SWEEP_EVERY: u64 = 64;

/// A stored entry; the key's bytes travel as base64 (argv and paths need
/// not be UTF-8).
#[derive(Serialize, Deserialize)]
struct Entry {
    tool: String,
    argv: Vec<String>,
    cwd: String,
    tty: bool,
    stored_ms: u64,
    expires_ms: u64,
    result: NormalizedResult,
}

fn encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

impl Entry {
    fn matches(&self, key: &CacheKey) -> bool {
        self.tool == key.tool
            && self.tty == key.tty
            && self.cwd == encode(key.cwd.as_os_str().as_bytes())
            && self.argv.len() == key.argv.len()
            && self
                .argv
                .iter()
                .zip(&key.argv)
                .all(|(stored, arg)| *stored == encode(arg.as_bytes()))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The file store of one home.
#[derive(Debug)]
pub(crate) struct FileStore {
    dir: PathBuf,
    writes: AtomicU64,
}

impl FileStore {
    /// The store under `home` (made, private, now); `None` with a warning
    /// when it cannot be made: the cache is then this process's alone.
    pub(crate) fn open(home: &Path) -> Option<Self> {
        let dir = home.join(STORE_DIR);
        match crate::output::make_private_dir(&dir) {
            Ok(()) => Some(Self {
                dir,
                writes: AtomicU64::new(0),
            }),
            Err(err) => {
                tracing::warn!(path = %dir.display(), error = %err, "the result cache is this process's alone");
                None
            }
        }
    }

    fn path_of(&self, key: &CacheKey) -> PathBuf {
        // Every process sharing the store runs the same hasher with the
        // same (zero) keys; another build's names only miss.
        let mut hasher = std::hash::DefaultHasher::new();
        key.hash(&mut hasher);
        self.dir.join(format!("{:016x}.json", hasher.finish()))
    }

    /// A stored result for `key` no older than `ttl` and not expired.
    pub(crate) fn get(&self, key: &CacheKey, ttl: Duration) -> Option<NormalizedResult> {
        let text = std::fs::read(self.path_of(key)).ok()?;
        let entry: Entry = serde_json::from_slice(&text).ok()?;
        let now = now_ms();
        let fresh = now < entry.expires_ms && now.saturating_sub(entry.stored_ms) < millis(ttl);
        (fresh && entry.matches(key)).then_some(entry.result)
    }

    /// Stores `result` for `key` for `ttl`; a failure to write only costs
    /// other processes a hit.
    pub(crate) fn put(&self, key: &CacheKey, ttl: Duration, result: &NormalizedResult) {
        let now = now_ms();
        let entry = Entry {
            tool: key.tool.clone(),
            argv: key.argv.iter().map(|a| encode(a.as_bytes())).collect(),
            cwd: encode(key.cwd.as_os_str().as_bytes()),
            tty: key.tty,
            stored_ms: now,
            expires_ms: now.saturating_add(millis(ttl)),
            result: result.clone(),
        };
        let n = self.writes.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(SWEEP_EVERY) {
            self.sweep(now);
        }
        let path = self.path_of(key);
        let fresh = self.dir.join(format!(".new-{}-{n}", std::process::id()));
        let written = serde_json::to_vec(&entry)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                let mut file = std::fs::OpenOptions::new()
                    .create_new(true)
                    .write(true)
                    .mode(0o600)
                    .open(&fresh)?;
                file.write_all(&bytes)
            })
            .and_then(|()| std::fs::rename(&fresh, &path));
        if let Err(err) = written {
            let _ = std::fs::remove_file(&fresh);
            tracing::debug!(path = %path.display(), error = %err, "cannot store a result");
        }
    }

    /// Removes every stored result (the registry was reloaded).
    pub(crate) fn clear(&self) {
        for (path, _) in self.files() {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The stored files with their modification times.
    fn files(&self) -> Vec<(PathBuf, SystemTime)> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| {
                let modified = e.metadata().ok()?.modified().ok()?;
                Some((e.path(), modified))
            })
            .collect()
    }

    /// Keeps the store under [`MAX_FILES`] until the next sweep: expired
    /// entries go, then the oldest; a writer's leftover older than a minute
    /// goes too.
    fn sweep(&self, now: u64) {
        #[expect(clippy::cast_possible_truncation, reason = "SWEEP_EVERY is 64")]
        let keep = MAX_FILES - SWEEP_EVERY as usize;
        let mut files = self.files();
        if files.len() < keep {
            return;
        }
        files.retain(|(path, modified)| {
            let stale_leftover = path
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b".new-"))
                && modified
                    .elapsed()
                    .is_ok_and(|age| age > Duration::from_secs(60));
            let expired = std::fs::read(path)
                .ok()
                .and_then(|text| serde_json::from_slice::<Entry>(&text).ok())
                .is_some_and(|entry| entry.expires_ms <= now);
            if stale_leftover || expired {
                let _ = std::fs::remove_file(path);
                false
            } else {
                true
            }
        });
        files.sort_by_key(|(_, modified)| *modified);
        let excess = files.len().saturating_sub(keep - 1);
        for (path, _) in files.into_iter().take(excess) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    use crate::result::Status;

    fn key(tool: &str, argv: &[&str]) -> CacheKey {
        CacheKey {
            tool: tool.to_owned(),
            argv: argv.iter().map(OsString::from).collect(),
            cwd: PathBuf::from("/work"),
            tty: false,
        }
    }

    fn result(text: &str) -> NormalizedResult {
        let mut result = NormalizedResult::refused(None, None, Status::Success, "", "");
        result.stdout = text.to_owned();
        result
    }

    #[test]
    fn another_process_finds_a_stored_result_until_it_expires() {
        let home = tempfile::tempdir().unwrap();
        let one = FileStore::open(home.path()).unwrap();
        let other = FileStore::open(home.path()).unwrap();
        let k = key("ls", &["ls", "-l"]);
        assert!(other.get(&k, Duration::from_secs(60)).is_none());
        one.put(&k, Duration::from_secs(60), &result("a\n"));
        assert_eq!(
            other.get(&k, Duration::from_secs(60)).unwrap().stdout,
            "a\n"
        );
        assert!(
            other
                .get(&key("ls", &["ls", "-a"]), Duration::from_secs(60))
                .is_none(),
            "another argv is another entry"
        );
        one.put(&k, Duration::ZERO, &result("b\n"));
        assert!(other.get(&k, Duration::from_secs(60)).is_none(), "expired");
        one.put(&k, Duration::from_secs(60), &result("c\n"));
        other.clear();
        assert!(one.get(&k, Duration::from_secs(60)).is_none(), "cleared");
    }

    #[test]
    fn a_colliding_file_is_a_miss_and_bytes_that_are_not_utf8_are_kept_apart() {
        let home = tempfile::tempdir().unwrap();
        let store = FileStore::open(home.path()).unwrap();
        let a = CacheKey {
            argv: vec![OsString::from_vec(vec![b'x', 0xff])],
            ..key("t", &[])
        };
        let b = CacheKey {
            argv: vec![OsString::from_vec(vec![b'x', 0xfe])],
            ..key("t", &[])
        };
        store.put(&a, Duration::from_secs(60), &result("a"));
        // B's file holds A's entry: the key inside does not match.
        std::fs::copy(store.path_of(&a), store.path_of(&b)).unwrap();
        assert!(store.get(&b, Duration::from_secs(60)).is_none());
        assert_eq!(store.get(&a, Duration::from_secs(60)).unwrap().stdout, "a");
    }

    #[test]
    fn the_store_is_private_and_bounded() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().unwrap();
        let store = FileStore::open(home.path()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&home.path().join(STORE_DIR)), 0o700);
        let k = key("t", &["1"]);
        store.put(&k, Duration::from_secs(60), &result("x"));
        assert_eq!(mode(&store.path_of(&k)), 0o600);
        for i in 0..(MAX_FILES + 70) {
            let arg = i.to_string();
            store.put(
                &key("t", &[arg.as_str()]),
                Duration::from_secs(60),
                &result("x"),
            );
        }
        assert!(store.files().len() <= MAX_FILES, "{}", store.files().len());
    }
}
