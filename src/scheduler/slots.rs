//! Machine-wide slots: the limits of `[scheduler]` held across every
//! agent-reach process that shares one `AGENT_REACH_HOME`, with no daemon.
//!
//! A slot is an exclusive `flock` on one file under `$AGENT_REACH_HOME/run/slots/`:
//! `global.0` … `global.{N-1}` for the global limit, `group-NAME.0` … for a
//! group's limit, `exclusive-KEY` for an exclusive key. A process takes a
//! slot by locking the first free file without blocking and gives it back by
//! unlocking it. The kernel drops a lock with the last descriptor of its
//! open file description, so a holder that dies (`kill -9` included) leaks
//! nothing. A file is open only while its slot is held (close-on-exec, so
//! no child inherits a lock): taking a slot is an `open` and a `flock`,
//! giving it back a `close`.
//!
//! Two descriptors of one file conflict even within one process, so the
//! slots a process holds are also seen by its own other requests; the
//! in-process state ([`super::state`]) still decides who of this process's
//! waiters goes first.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::tickets::Queue;
use super::{Demand, Limits};

/// The directory under `$AGENT_REACH_HOME` that holds the slot files.
pub(crate) const SLOTS_DIR: &str = "run/slots";

/// Why the slot directory could not be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot use the scheduler's slot directory {path}: {source}")]
pub(crate) struct SlotsError {
    path: PathBuf,
    source: std::io::Error,
}

impl SlotsError {
    pub(super) fn new(path: &Path, source: std::io::Error) -> Self {
        Self {
            path: path.to_owned(),
            source,
        }
    }
}

/// One lock file, open only while held: a process keeps no descriptor for
/// a slot it does not hold (descriptors are what a busy server runs out of).
#[derive(Debug)]
struct SlotFile {
    path: PathBuf,
    held: Option<Flock<File>>,
}

impl SlotFile {
    fn new(path: PathBuf) -> Self {
        Self { path, held: None }
    }

    /// Locks the file without blocking; false when another holder has it
    /// (or it cannot be opened, which counts as taken: descriptors ran out,
    /// or the directory went away, and a later try may succeed).
    fn try_take(&mut self) -> bool {
        if self.held.is_some() {
            return false;
        }
        let file = match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)
        {
            Ok(file) => file,
            Err(err) => {
                tracing::debug!(path = %self.path.display(), error = %err, "cannot open a slot file");
                return false;
            }
        };
        // A file that is not locked is closed at once (the `Err` drops it).
        self.held = Flock::lock(file, FlockArg::LockExclusiveNonblock).ok();
        self.held.is_some()
    }

    /// The file's name in the slot directory.
    fn name(&self) -> Option<String> {
        self.path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
    }

    /// Closing the descriptor drops the lock.
    fn give_back(&mut self) {
        self.held = None;
    }
}

/// What one running request holds machine-wide (indices into the files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Hold {
    global: usize,
    group: Option<(String, usize)>,
    exclusive: Option<String>,
}

/// Why a demand could not be taken machine-wide now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// Every global slot is held: nobody of this process can start.
    Global,
    /// Its group or exclusive key is held: others may still start.
    Own,
}

/// The slot files of one process.
#[derive(Debug)]
pub(crate) struct MachineSlots {
    dir: PathBuf,
    /// The machine-wide queue beside the slots.
    pub(super) queue: Queue,
    global: Vec<SlotFile>,
    groups: BTreeMap<String, Vec<SlotFile>>,
    exclusive: BTreeMap<String, SlotFile>,
}

impl MachineSlots {
    /// The slots of `limits` under `home` (the directory is made now).
    pub(crate) fn open(home: &Path, limits: &Limits) -> Result<Self, SlotsError> {
        let dir = home.join(SLOTS_DIR);
        std::fs::create_dir_all(&dir).map_err(|source| SlotsError::new(&dir, source))?;
        let queue = Queue::open(home, &dir)?;
        let files = |prefix: &str, count: usize| -> Vec<SlotFile> {
            (0..count)
                .map(|i| SlotFile::new(dir.join(format!("{prefix}.{i}"))))
                .collect()
        };
        let global = files("global", limits.global);
        let groups = limits
            .groups
            .iter()
            .map(|(name, limit)| {
                (
                    name.clone(),
                    files(&format!("group-{}", file_name(name)), *limit),
                )
            })
            .collect();
        Ok(Self {
            dir,
            queue,
            global,
            groups,
            exclusive: BTreeMap::new(),
        })
    }

    /// Takes everything `demand` needs machine-wide, all or nothing.
    pub(crate) fn try_take(&mut self, demand: &Demand) -> Result<Hold, Blocked> {
        let global = self
            .global
            .iter_mut()
            .position(SlotFile::try_take)
            .ok_or(Blocked::Global)?;
        let mut hold = Hold {
            global,
            ..Hold::default()
        };
        if let Some(group) = &demand.group
            && let Some(files) = self.groups.get_mut(group)
        {
            match files.iter_mut().position(SlotFile::try_take) {
                Some(i) => hold.group = Some((group.clone(), i)),
                None => {
                    self.give_back(&hold);
                    return Err(Blocked::Own);
                }
            }
        }
        if let Some(key) = &demand.exclusive {
            let dir = &self.dir;
            let file = self.exclusive.entry(key.clone()).or_insert_with(|| {
                SlotFile::new(dir.join(format!("exclusive-{}", file_name(key))))
            });
            if !file.try_take() {
                self.give_back(&hold);
                return Err(Blocked::Own);
            }
            hold.exclusive = Some(key.clone());
        }
        Ok(hold)
    }

    /// What `demand` waits for beyond a global slot, as a ticket says it:
    /// its group's slot files (any one will do), its exclusive key's file.
    pub(crate) fn needs(&self, demand: &Demand) -> Vec<Vec<String>> {
        let mut needs = Vec::new();
        if let Some(group) = &demand.group
            && let Some(files) = self.groups.get(group)
        {
            needs.push(files.iter().filter_map(SlotFile::name).collect());
        }
        if let Some(key) = &demand.exclusive {
            needs.push(vec![format!("exclusive-{}", file_name(key))]);
        }
        needs
    }

    /// Gives back what `hold` took.
    pub(crate) fn give_back(&mut self, hold: &Hold) {
        if let Some(file) = self.global.get_mut(hold.global) {
            file.give_back();
        }
        if let Some((group, i)) = &hold.group
            && let Some(file) = self.groups.get_mut(group).and_then(|f| f.get_mut(*i))
        {
            file.give_back();
        }
        if let Some(key) = &hold.exclusive
            && let Some(file) = self.exclusive.get_mut(key)
        {
            file.give_back();
        }
    }
}

/// A group name or exclusive key as a file name: letters, digits, `-` and
/// `_` kept, every other byte as `%XX`, so distinct keys stay distinct.
fn file_name(key: &str) -> String {
    let mut name = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("%{byte:02X}"));
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::Priority;

    fn limits(global: usize) -> Limits {
        Limits {
            global,
            queue: 8,
            groups: [("cpu".to_owned(), 1)].into(),
            per_caller: None,
        }
    }

    fn demand(group: Option<&str>, exclusive: Option<&str>) -> Demand {
        Demand {
            group: group.map(str::to_owned),
            exclusive: exclusive.map(str::to_owned),
            priority: Priority::Normal,
            caller: super::super::LOCAL_CALLER.to_owned(),
        }
    }

    #[test]
    fn two_processes_sharing_a_home_share_the_global_slots() {
        let home = tempfile::tempdir().unwrap();
        let mut one = MachineSlots::open(home.path(), &limits(2)).unwrap();
        let mut other = MachineSlots::open(home.path(), &limits(2)).unwrap();
        let a = one.try_take(&demand(None, None)).unwrap();
        let b = other.try_take(&demand(None, None)).unwrap();
        assert_eq!(
            other.try_take(&demand(None, None)),
            Err(Blocked::Global),
            "two of two global slots are held"
        );
        one.give_back(&a);
        let c = other.try_take(&demand(None, None)).unwrap();
        other.give_back(&b);
        other.give_back(&c);
    }

    #[test]
    fn groups_and_exclusive_keys_hold_across_holders_and_take_all_or_nothing() {
        let home = tempfile::tempdir().unwrap();
        let mut one = MachineSlots::open(home.path(), &limits(4)).unwrap();
        let mut other = MachineSlots::open(home.path(), &limits(4)).unwrap();
        let cpu = one.try_take(&demand(Some("cpu"), None)).unwrap();
        assert_eq!(
            other.try_take(&demand(Some("cpu"), None)),
            Err(Blocked::Own)
        );
        let db = one.try_take(&demand(None, Some("db/main"))).unwrap();
        assert_eq!(
            other.try_take(&demand(None, Some("db/main"))),
            Err(Blocked::Own)
        );
        // The failed attempts gave their global slots back: 2 held, 2 free.
        let x = other.try_take(&demand(None, None)).unwrap();
        let y = other.try_take(&demand(None, None)).unwrap();
        assert_eq!(other.try_take(&demand(None, None)), Err(Blocked::Global));
        for hold in [x, y] {
            other.give_back(&hold);
        }
        one.give_back(&cpu);
        one.give_back(&db);
        assert!(
            other
                .try_take(&demand(Some("cpu"), Some("db/main")))
                .is_ok()
        );
    }

    #[test]
    fn a_holder_that_goes_away_frees_its_slot() {
        let home = tempfile::tempdir().unwrap();
        let mut one = MachineSlots::open(home.path(), &limits(1)).unwrap();
        let _held = one.try_take(&demand(None, None)).unwrap();
        let mut other = MachineSlots::open(home.path(), &limits(1)).unwrap();
        assert_eq!(other.try_take(&demand(None, None)), Err(Blocked::Global));
        drop(one);
        assert!(other.try_take(&demand(None, None)).is_ok());
    }

    #[test]
    fn keys_become_distinct_file_names() {
        assert_eq!(file_name("db"), "db");
        assert_eq!(file_name("a/b"), "a%2Fb");
        assert_ne!(file_name("a/b"), file_name("a%2Fb"));
    }
}
