//! The spill store: the full (redacted, terminal-cleaned) output of each run
//! and stream, in a file under `$AGENT_REACH_HOME/spill/`, so that a fold
//! marker can name a file and a line range that really exist.
//!
//! The store is capped (default 64 MiB in total, at most
//! [`MAX_SPILL_FILES`] files): when it grows past the cap the oldest files
//! are removed first. A writer holds an exclusive `flock` on
//! its file while it is open, so a concurrent run never removes a file that
//! is still being written. A single run larger than the whole cap stops
//! writing at the cap and remembers how many lines made it to disk.
//!
//! Writing never fails the command: an I/O error only marks the writer
//! incomplete, exactly like reaching the cap.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::spill_lock::{self, LockedFile};

/// The default cap of the whole store.
pub const DEFAULT_SPILL_CAP_BYTES: u64 = 64 * 1024 * 1024;

/// The store keeps at most this many files (oldest removed first), so that
/// checking the cap stays cheap even when every run wrote a few bytes.
pub const MAX_SPILL_FILES: usize = 256;

/// A new or closed file checks the cap only if no check ran this recently,
/// so a run that prints a line does not pay for a directory scan; the cap
/// can be exceeded by what runs wrote within this interval.
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(1);

/// Marks the time of the last scan (its modification time); it sits next
/// to the spill directory, which then holds only spill files.
const SCAN_MARKER: &str = "spill.last-scan";

/// What this process knows of one store directory's file count, shared by
/// every [`SpillStore`] opened on that directory (a server opens one per
/// run); two directories never share counts.
#[derive(Debug, Default)]
struct FileCount {
    /// Spill files this process made since its last scan of the store.
    created_since_scan: AtomicUsize,
    /// How many files the last scan left (the new one counted).
    left_at_scan: AtomicUsize,
}

/// The directories this process made (or found), with their counts; past
/// [`KNOWN_DIRS`] a directory gets counts of its own per open.
static KNOWN: std::sync::Mutex<Vec<(PathBuf, Arc<FileCount>)>> = std::sync::Mutex::new(Vec::new());
const KNOWN_DIRS: usize = 16;

/// How often (in bytes written by one writer) the store cap is re-checked.
const CAP_CHECK_INTERVAL: u64 = 4 * 1024 * 1024;

/// The longest label kept in a file name.
const MAX_LABEL_LEN: usize = 48;

/// Why the spill store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    #[error("cannot create the spill directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The directory of spill files and its cap. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SpillStore {
    inner: Arc<StoreInner>,
}

#[derive(Debug)]
struct StoreInner {
    dir: PathBuf,
    cap_bytes: u64,
    /// A new file skips the directory scan when one ran this recently.
    scan_interval: Duration,
    /// This directory's file count as this process knows it.
    count: Arc<FileCount>,
}

impl SpillStore {
    /// Opens (creating, mode 0700) `home/spill`.
    pub fn open(home: &Path, total_cap_bytes: u64) -> Result<Self, SpillError> {
        let dir = home.join("spill");
        // Once made, a directory is taken as there (a writer makes it again
        // if someone removed it meanwhile): saves a mkdir per run of a
        // server that runs thousands.
        let mut known = crate::sync::lock(&KNOWN);
        let count = match known.iter().find(|(made, _)| *made == dir) {
            Some((_, count)) => Arc::clone(count),
            None => {
                make_store_dir(&dir).map_err(|source| SpillError::CreateDir {
                    path: dir.clone(),
                    source,
                })?;
                let count = Arc::new(FileCount::default());
                if known.len() < KNOWN_DIRS {
                    known.push((dir.clone(), Arc::clone(&count)));
                }
                count
            }
        };
        drop(known);
        Ok(Self {
            inner: Arc::new(StoreInner {
                dir,
                cap_bytes: total_cap_bytes,
                scan_interval: DEFAULT_SCAN_INTERVAL,
                count,
            }),
        })
    }

    /// The same store, scanning its directory for every new file at most
    /// once per `interval` (zero: always).
    pub fn with_scan_interval(self, interval: Duration) -> Self {
        Self {
            inner: Arc::new(StoreInner {
                dir: self.inner.dir.clone(),
                cap_bytes: self.inner.cap_bytes,
                scan_interval: interval,
                count: Arc::clone(&self.inner.count),
            }),
        }
    }

    /// Enforces the cap for a file being created or closed, unless a scan
    /// ran within the scan interval (by any process: the time is the
    /// modification time of a marker file in the store).
    fn enforce_cap_if_due(&self, reserve: u64) {
        // The file count holds whatever the interval: files this process
        // made since its last scan, on top of what that scan left, force
        // the next scan once they could pass [`MAX_SPILL_FILES`].
        let count = &self.inner.count;
        let made = count.created_since_scan.fetch_add(1, Ordering::Relaxed) + 1;
        if made + count.left_at_scan.load(Ordering::Relaxed) >= MAX_SPILL_FILES {
            let _ = File::create(self.inner.dir.with_file_name(SCAN_MARKER));
            self.enforce_cap(reserve);
            return;
        }
        let marker = self.inner.dir.with_file_name(SCAN_MARKER);
        let recent = fs::metadata(&marker)
            .and_then(|meta| meta.modified())
            .ok()
            .and_then(|at| at.elapsed().ok())
            .is_some_and(|age| age < self.inner.scan_interval);
        if recent {
            return;
        }
        // Touch first: concurrent runs then skip instead of scanning too.
        let _ = File::create(&marker);
        self.enforce_cap(reserve);
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The cap of the whole store, in bytes.
    pub fn cap_bytes(&self) -> u64 {
        self.inner.cap_bytes
    }

    /// A writer for one run and stream. The file is created on the first
    /// byte written, so silent runs leave nothing behind.
    pub fn create(&self, label: &str) -> SpillWriter {
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{millis}-{pid}-{sequence}-{label}.log",
            pid = std::process::id(),
            label = sanitize_label(label)
        );
        SpillWriter {
            store: self.clone(),
            path: self.inner.dir.join(name),
            state: WriterState::NotCreated,
            written_bytes: 0,
            written_lines: 0,
            next_cap_check: CAP_CHECK_INTERVAL,
        }
    }

    /// Removes the oldest unlocked files until the store, plus `reserve`
    /// bytes about to be written, fits its cap. Returns the bytes it holds.
    pub fn enforce_cap(&self, reserve: u64) -> u64 {
        let Ok(entries) = fs::read_dir(&self.inner.dir) else {
            return 0;
        };
        let mut files: Vec<(SystemTime, u64, PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let meta = entry.metadata().ok()?;
                meta.is_file().then(|| {
                    let modified = meta.modified().unwrap_or(UNIX_EPOCH);
                    (modified, meta.len(), entry.path())
                })
            })
            .collect();
        let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
        // Room for the file about to be created.
        let mut count = files.len() + 1;
        self.inner
            .count
            .created_since_scan
            .store(0, Ordering::Relaxed);
        files.sort();
        for (_, len, path) in files {
            if total.saturating_add(reserve) <= self.inner.cap_bytes && count <= MAX_SPILL_FILES {
                break;
            }
            if remove_if_unlocked(&path) {
                total = total.saturating_sub(len);
                count -= 1;
            }
        }
        self.inner
            .count
            .left_at_scan
            .store(count, Ordering::Relaxed);
        total
    }
}

/// Removes `path` unless a writer still holds its lock.
fn remove_if_unlocked(path: &Path) -> bool {
    spill_lock::remove_if_unlocked(path)
}

/// Keeps a label usable in a file name: ASCII letters, digits, `.`, `_`, `-`.
fn sanitize_label(label: &str) -> String {
    let cleaned: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_LABEL_LEN)
        .collect();
    if cleaned.is_empty() {
        "output".to_owned()
    } else {
        cleaned
    }
}

#[derive(Debug)]
enum WriterState {
    NotCreated,
    Open(LockedFile),
    /// The cap was reached or an I/O error happened: nothing more is written.
    Stopped {
        reason: String,
    },
}

/// Appends one stream's output to its spill file.
#[derive(Debug)]
pub struct SpillWriter {
    store: SpillStore,
    path: PathBuf,
    state: WriterState,
    written_bytes: u64,
    written_lines: u64,
    next_cap_check: u64,
}

impl SpillWriter {
    /// The file, once something was written to it.
    pub fn path(&self) -> Option<&Path> {
        match self.state {
            WriterState::NotCreated => None,
            WriterState::Open(_) => Some(&self.path),
            WriterState::Stopped { .. } if self.written_bytes > 0 => Some(&self.path),
            WriterState::Stopped { .. } => None,
        }
    }

    /// Bytes on disk.
    pub fn written_bytes(&self) -> u64 {
        self.written_bytes
    }

    /// Newlines on disk: every line up to this number is complete in the file.
    pub fn written_lines(&self) -> u64 {
        self.written_lines
    }

    /// Why the file stopped growing, when it did (cap reached, I/O error).
    pub fn stopped_reason(&self) -> Option<&str> {
        match &self.state {
            WriterState::Stopped { reason } => Some(reason),
            _ => None,
        }
    }

    /// Appends `bytes`; never fails, at worst stops the file.
    pub fn write(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if matches!(self.state, WriterState::NotCreated) {
            self.store.enforce_cap_if_due(bytes.len() as u64);
            self.state = self.create_file();
        }
        let WriterState::Open(file) = &mut self.state else {
            return;
        };
        let room = self.store.cap_bytes().saturating_sub(self.written_bytes);
        let (now, stop) = if (bytes.len() as u64) > room {
            (&bytes[..usize::try_from(room).unwrap_or(0)], true)
        } else {
            (bytes, false)
        };
        if let Err(error) = file.write_all(now) {
            self.state = WriterState::Stopped {
                reason: format!("write failed: {error}"),
            };
            return;
        }
        self.written_bytes += now.len() as u64;
        self.written_lines += memchr::memchr_iter(b'\n', now).count() as u64;
        if stop {
            self.state = WriterState::Stopped {
                reason: format!(
                    "the spill store is capped at {} bytes",
                    self.store.cap_bytes()
                ),
            };
        } else if self.written_bytes >= self.next_cap_check {
            self.next_cap_check = self.written_bytes + CAP_CHECK_INTERVAL;
            self.store.enforce_cap(0);
        }
    }

    fn create_file(&self) -> WriterState {
        let opened = spill_lock::create_locked(&self.path).or_else(|error| {
            // The store's directory was removed since it was made (someone
            // cleaned up under a long-lived server): make it again.
            if self.store.inner.dir.exists() {
                return Err(error);
            }
            make_store_dir(&self.store.inner.dir).map_err(|e| e.to_string())?;
            spill_lock::create_locked(&self.path)
        });
        match opened {
            Ok(locked) => WriterState::Open(locked),
            Err(error) => WriterState::Stopped {
                reason: format!("cannot create {}: {error}", self.path.display()),
            },
        }
    }
}

impl Drop for SpillWriter {
    fn drop(&mut self) {
        if self.written_bytes > 0 {
            // Our own file is still locked here, so only older ones can go.
            self.store.enforce_cap_if_due(0);
        }
    }
}

/// Makes the store's directory (and its parents), private to the user.
fn make_store_dir(dir: &Path) -> std::io::Result<()> {
    spill_lock::make_private_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(cap: u64) -> (tempfile::TempDir, SpillStore) {
        let home = tempfile::tempdir().unwrap();
        let store = SpillStore::open(home.path(), cap)
            .unwrap()
            .with_scan_interval(Duration::ZERO);
        (home, store)
    }

    #[test]
    fn a_removed_store_directory_is_made_again_by_the_next_file() {
        let (_home, store) = store(1024);
        fs::remove_dir_all(store.dir()).unwrap();
        let again = SpillStore::open(_home.path(), 1024).unwrap();
        let mut writer = again.create("after cleanup");
        writer.write(b"still kept\n");
        let path = writer.path().expect("the file was made").to_owned();
        assert_eq!(fs::read(&path).unwrap(), b"still kept\n");
    }

    #[test]
    fn creates_the_file_on_the_first_byte_only() {
        let (_home, store) = store(1024);
        let mut writer = store.create("run 1/stdout");
        assert!(writer.path().is_none());
        writer.write(b"");
        assert!(writer.path().is_none());
        writer.write(b"one\ntwo\n");
        let path = writer.path().unwrap().to_owned();
        assert!(path.starts_with(store.dir()));
        assert!(path.to_string_lossy().ends_with("run_1_stdout.log"));
        assert_eq!(fs::read(&path).unwrap(), b"one\ntwo\n");
        assert_eq!(writer.written_lines(), 2);
    }

    // Modes are Unix's.
    #[cfg(unix)]
    #[test]
    fn directory_and_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let (_home, store) = store(1024);
        let mut writer = store.create("x");
        writer.write(b"secret-ish\n");
        let dir_mode = fs::metadata(store.dir()).unwrap().permissions().mode();
        let file_mode = fs::metadata(writer.path().unwrap())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dir_mode & 0o777, 0o700);
        assert_eq!(file_mode & 0o777, 0o600);
    }

    #[test]
    fn removes_the_oldest_finished_files_first_when_over_the_cap() {
        let (_home, store) = store(100);
        let mut paths = Vec::new();
        for i in 0..3 {
            let mut writer = store.create(&format!("old{i}"));
            writer.write(&[b'x'; 40]);
            paths.push(writer.path().unwrap().to_owned());
            drop(writer);
            std::thread::sleep(std::time::Duration::from_millis(15));
        }
        // 120 bytes > 100: the oldest goes, the two newer stay.
        assert!(!paths[0].exists());
        assert!(paths[1].exists() && paths[2].exists());
    }

    #[test]
    fn keeps_at_most_the_file_count_cap() {
        let (_home, store) = store(u64::MAX);
        for i in 0..(MAX_SPILL_FILES + 5) {
            let mut writer = store.create(&format!("f{i}"));
            writer.write(b"x");
        }
        let files = fs::read_dir(store.dir()).unwrap().count();
        assert!(files <= MAX_SPILL_FILES, "{files} files");
    }

    #[test]
    fn the_file_count_cap_holds_within_the_scan_interval() {
        let home = tempfile::tempdir().unwrap();
        let store = SpillStore::open(home.path(), u64::MAX)
            .unwrap()
            .with_scan_interval(Duration::from_secs(3600));
        for i in 0..(MAX_SPILL_FILES * 2) {
            let mut writer = store.create(&format!("f{i}"));
            writer.write(b"x");
        }
        let files = fs::read_dir(store.dir()).unwrap().count();
        assert!(files <= MAX_SPILL_FILES, "{files} files");
    }

    #[test]
    fn a_recent_scan_spares_the_next_files_the_scan() {
        let home = tempfile::tempdir().unwrap();
        let store = SpillStore::open(home.path(), 100).unwrap();
        let mut first = store.create("first");
        first.write(&[b'x'; 80]);
        drop(first);
        // Over the cap, but a scan just ran: the older file stays for now.
        let mut second = store.create("second");
        second.write(&[b'y'; 80]);
        assert_eq!(fs::read_dir(store.dir()).unwrap().count(), 2);
        let prompt = store.with_scan_interval(Duration::ZERO);
        let mut third = prompt.create("third");
        third.write(b"z");
        assert_eq!(
            fs::read_dir(prompt.dir()).unwrap().count(),
            2,
            "scanned again"
        );
    }

    #[test]
    fn never_removes_a_file_that_is_still_being_written() {
        let (_home, store) = store(100);
        let mut open = store.create("open");
        open.write(&[b'x'; 60]);
        std::thread::sleep(std::time::Duration::from_millis(15));
        let mut newer = store.create("newer");
        newer.write(&[b'y'; 60]);
        assert!(open.path().unwrap().exists());
        assert!(newer.path().unwrap().exists());
    }

    #[test]
    fn a_run_larger_than_the_cap_stops_at_the_cap_and_counts_complete_lines() {
        let (_home, store) = store(10);
        let mut writer = store.create("big");
        writer.write(b"1234\n5678\nabcdef\n");
        assert_eq!(writer.written_bytes(), 10);
        assert_eq!(writer.written_lines(), 2);
        assert!(writer.stopped_reason().unwrap().contains("capped"));
        writer.write(b"more\n");
        assert_eq!(fs::read(writer.path().unwrap()).unwrap(), b"1234\n5678\n");
    }

    #[test]
    fn an_unwritable_store_only_stops_the_writer() {
        let (home, store) = store(1024);
        // A file where the directory was: neither the file nor the
        // directory can be made.
        fs::remove_dir_all(home.path().join("spill")).unwrap();
        fs::write(home.path().join("spill"), "not a directory").unwrap();
        let mut writer = store.create("gone");
        writer.write(b"data\n");
        assert!(writer.path().is_none());
        assert!(writer.stopped_reason().unwrap().contains("cannot create"));
    }
}
