//! The machine-wide queue: one ticket file per waiting request under
//! `$AGENT_REACH_HOME/run/queue/`, so arrival order and the queue bound hold
//! across every process sharing the home, as the slots do ([`super::slots`]).
//!
//! A ticket's name is its place: `R-NANOS-PID-N`, with `R` the priority's
//! rank (0 high, 1 normal, 2 low), `NANOS` the arrival time on the
//! machine's monotonic clock (one clock for every process of one kernel),
//! zero-padded so that names sort in the order the queue is served. Its
//! content lists what it waits for beyond a global slot, one line per
//! resource (its group's slot files, or its exclusive key's file),
//! alternatives separated by spaces: another process can tell that a ticket
//! is blocked on its own group or key (every alternative of a line locked)
//! and pass it, as a waiter of this process would be passed.
//!
//! A ticket is locked (`flock`) by its owner from before it has its name
//! (written as `.new-…`, locked, then renamed) until after the name is gone
//! (unlinked, then closed): a named ticket that can be locked belongs to a
//! process that died, and whoever sees it removes it.
//!
//! Admitting a request and granting waiters happen under `queue.lock`, an
//! exclusive `flock` held for a few system calls: a newcomer sees every
//! earlier ticket, so it never passes one, and the tickets it counts are the
//! machine-wide queue.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{Flock, FlockArg};

use super::Priority;
use super::slots::SlotsError;

/// The directory under `$AGENT_REACH_HOME` that holds the tickets.
pub(crate) const QUEUE_DIR: &str = "run/queue";

/// The lock file admissions and grants are made under.
const LOCK_FILE: &str = "run/queue.lock";

/// A request's place in the machine-wide queue; earlier places are served
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Place {
    rank: u8,
    nanos: u64,
    pid: u32,
    n: u64,
}

impl Place {
    /// The place of a request of `priority` arriving now, this process's
    /// `n`-th.
    pub(crate) fn now(priority: Priority, n: u64) -> Self {
        let rank = match priority {
            Priority::High => 0,
            Priority::Normal => 1,
            Priority::Low => 2,
        };
        Self {
            rank,
            nanos: monotonic_nanos(),
            pid: this_pid(),
            n,
        }
    }

    fn name(&self) -> String {
        format!(
            "{}-{:020}-{:010}-{:020}",
            self.rank, self.nanos, self.pid, self.n
        )
    }

    fn parse(name: &str) -> Option<Self> {
        let mut parts = name.split('-');
        let place = Self {
            rank: parts.next()?.parse().ok()?,
            nanos: parts.next()?.parse().ok()?,
            pid: parts.next()?.parse().ok()?,
            n: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(place)
    }
}

/// This process's id, asked of the kernel once.
fn this_pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// Nanoseconds on the monotonic clock, shared by every process of the
/// kernel (0 if it cannot be read, which never happens on Linux).
fn monotonic_nanos() -> u64 {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        u64::try_from(t.tv_sec())
            .unwrap_or(0)
            .saturating_mul(1_000_000_000)
            .saturating_add(u64::try_from(t.tv_nsec()).unwrap_or(0))
    })
}

/// One waiting request's ticket; dropping it leaves the queue (the name
/// goes first, then the lock).
#[derive(Debug)]
pub(crate) struct Ticket {
    path: PathBuf,
    _lock: Flock<File>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // The lock is released after this, when the field drops.
        if let Err(err) = std::fs::remove_file(&self.path)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!(path = %self.path.display(), error = %err, "cannot remove a ticket");
        }
    }
}

/// Another process's live ticket, as seen now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Other {
    pub(crate) place: Place,
    /// Every alternative of one of its resources is held: it cannot start
    /// now whatever the global slots, so it holds nobody back.
    pub(crate) blocked_on_own: bool,
}

/// Holding the queue lock; dropping it lets the next process in.
#[derive(Debug)]
pub(crate) struct QueueGuard {
    file: Arc<File>,
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor the Arc keeps open.
        unsafe { libc::flock(self.file.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The queue directory of one process.
#[derive(Debug)]
pub(crate) struct Queue {
    dir: PathBuf,
    slots_dir: PathBuf,
    lock: Arc<File>,
}

impl Queue {
    /// The queue under `home` (the directory is made now); slot files are
    /// looked for in `slots_dir`.
    pub(crate) fn open(home: &Path, slots_dir: &Path) -> Result<Self, SlotsError> {
        let dir = home.join(QUEUE_DIR);
        std::fs::create_dir_all(&dir).map_err(|source| SlotsError::new(&dir, source))?;
        let lock_path = home.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|source| SlotsError::new(&lock_path, source))?;
        Ok(Self {
            dir,
            slots_dir: slots_dir.to_owned(),
            lock: Arc::new(lock),
        })
    }

    /// Takes the queue lock, waiting for another process that holds it (for
    /// a few system calls). `None` when it cannot be taken: the queue is
    /// then this process's alone for this step.
    pub(crate) fn hold(&self) -> Option<QueueGuard> {
        // The one descriptor this process keeps open (no dup and close per
        // step): the lock belongs to the open file, and this process's own
        // steps are already one at a time under the scheduler's mutex.
        loop {
            // SAFETY: flock on a descriptor the Arc keeps open.
            if unsafe { libc::flock(self.lock.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Some(QueueGuard {
                    file: self.lock.clone(),
                });
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                tracing::debug!(error = %err, "cannot take the queue lock");
                return None;
            }
        }
    }

    /// Puts a ticket at `place` in the queue, waiting for `needs` (lines of
    /// slot file names, alternatives of one resource on one line).
    pub(crate) fn issue(&self, place: Place, needs: &[Vec<String>]) -> std::io::Result<Ticket> {
        let name = place.name();
        let fresh = self.dir.join(format!(".new-{name}"));
        let path = self.dir.join(&name);
        let mut file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&fresh)?;
        let content: String = needs.iter().map(|line| line.join(" ") + "\n").collect();
        let locked = file.write_all(content.as_bytes()).and_then(|()| {
            Flock::lock(file, FlockArg::LockExclusiveNonblock)
                .map_err(|(_, errno)| std::io::Error::from(errno))
        });
        let lock = match locked {
            Ok(lock) => lock,
            Err(err) => {
                let _ = std::fs::remove_file(&fresh);
                return Err(err);
            }
        };
        if let Err(err) = std::fs::rename(&fresh, &path) {
            let _ = std::fs::remove_file(&fresh);
            return Err(err);
        }
        Ok(Ticket { path, _lock: lock })
    }

    /// Every live ticket of another process, in queue order; tickets of
    /// processes that died are removed on the way.
    pub(crate) fn others(&self, own: &BTreeSet<Place>) -> Vec<Other> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut others = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(place) = name.to_str().and_then(Place::parse) else {
                continue;
            };
            if own.contains(&place) {
                continue;
            }
            if let Some(needs) = self.live_needs(&entry.path()) {
                others.push(Other {
                    place,
                    blocked_on_own: needs.iter().any(|line| self.all_held(line)),
                });
            }
        }
        others.sort_by_key(|other| other.place);
        others
    }

    /// What a ticket waits for, if its owner is alive; a dead owner's
    /// ticket is removed.
    fn live_needs(&self, path: &Path) -> Option<Vec<Vec<String>>> {
        let mut file = File::open(path).ok()?;
        let mut content = String::new();
        file.read_to_string(&mut content).ok()?;
        match Flock::lock(file, FlockArg::LockSharedNonblock) {
            // Nobody holds it: its owner is gone.
            Ok(_stale) => {
                let _ = std::fs::remove_file(path);
                None
            }
            Err(_) => Some(
                content
                    .lines()
                    .map(|line| line.split(' ').map(str::to_owned).collect())
                    .filter(|line: &Vec<String>| !line.is_empty())
                    .collect(),
            ),
        }
    }

    /// Whether every slot file of `alternatives` is held by someone now.
    fn all_held(&self, alternatives: &[String]) -> bool {
        alternatives.iter().all(|name| {
            // A name that leaves the directory is not one of ours.
            if name.is_empty() || name.contains('/') || name.starts_with('.') {
                return false;
            }
            match File::open(self.slots_dir.join(name)) {
                Ok(file) => Flock::lock(file, FlockArg::LockSharedNonblock).is_err(),
                Err(_) => false,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(home: &Path) -> Queue {
        let slots = home.join("run/slots");
        std::fs::create_dir_all(&slots).unwrap();
        Queue::open(home, &slots).unwrap()
    }

    #[test]
    fn names_sort_as_the_queue_is_served_and_parse_back() {
        let high = Place::now(Priority::High, 7);
        let normal = Place::now(Priority::Normal, 1);
        let later = Place::now(Priority::Normal, 2);
        let low = Place::now(Priority::Low, 0);
        let mut names = [low.name(), later.name(), high.name(), normal.name()];
        names.sort();
        let places: Vec<Place> = names.iter().map(|n| Place::parse(n).unwrap()).collect();
        assert_eq!(places, [high, normal, later, low]);
        assert_eq!(Place::parse("1-2-3"), None);
        assert_eq!(Place::parse("x-1-2-3"), None);
        assert_eq!(Place::parse(".new-1-2-3-4"), None);
    }

    #[test]
    fn another_process_sees_live_tickets_in_order_and_removes_dead_ones() {
        let home = tempfile::tempdir().unwrap();
        let mine = queue(home.path());
        let theirs = queue(home.path());
        let (one, two) = (
            Place::now(Priority::Normal, 0),
            Place::now(Priority::Normal, 1),
        );
        let first = mine.issue(one, &[]).unwrap();
        let second = mine.issue(two, &[]).unwrap();
        let seen = theirs.others(&BTreeSet::new());
        assert_eq!(seen.iter().map(|o| o.place).collect::<Vec<_>>(), [one, two]);
        let own: BTreeSet<Place> = [one].into();
        assert_eq!(mine.others(&own).len(), 1, "its own tickets are skipped");
        // A ticket whose owner died: the name stays, nobody holds the lock.
        let dead = home
            .path()
            .join(QUEUE_DIR)
            .join(Place::now(Priority::High, 9).name());
        std::fs::write(&dead, "").unwrap();
        assert_eq!(theirs.others(&BTreeSet::new()).len(), 2);
        assert!(!dead.exists(), "a dead process's ticket is removed");
        drop(first);
        assert_eq!(
            theirs
                .others(&BTreeSet::new())
                .iter()
                .map(|o| o.place)
                .collect::<Vec<_>>(),
            [two]
        );
        drop(second);
        assert!(theirs.others(&BTreeSet::new()).is_empty());
        let left: Vec<_> = std::fs::read_dir(home.path().join(QUEUE_DIR))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "nothing is left behind: {left:?}");
    }

    #[test]
    fn a_ticket_whose_group_is_all_held_is_blocked_on_its_own() {
        let home = tempfile::tempdir().unwrap();
        let mine = queue(home.path());
        let theirs = queue(home.path());
        let slot = home.path().join("run/slots/group-gpu.0");
        let holder = Flock::lock(File::create(&slot).unwrap(), FlockArg::LockExclusive).unwrap();
        let _ticket = mine
            .issue(
                Place::now(Priority::Normal, 0),
                &[vec!["group-gpu.0".to_owned()]],
            )
            .unwrap();
        assert!(theirs.others(&BTreeSet::new())[0].blocked_on_own);
        drop(holder);
        assert!(!theirs.others(&BTreeSet::new())[0].blocked_on_own);
    }

    #[test]
    fn the_queue_lock_is_exclusive_between_processes() {
        let home = tempfile::tempdir().unwrap();
        let mine = queue(home.path());
        let held = mine.hold().unwrap();
        // Another open of the file stands for another process.
        let other = File::open(home.path().join(LOCK_FILE)).unwrap();
        assert!(Flock::lock(other, FlockArg::LockExclusiveNonblock).is_err());
        drop(held);
        let other = File::open(home.path().join(LOCK_FILE)).unwrap();
        assert!(Flock::lock(other, FlockArg::LockExclusiveNonblock).is_ok());
    }
}
