//! Reading `/proc`: which processes carry an execution's session tag, which
//! are still alive (a zombie is dead for our purposes), who our children are.
//!
//! Every read tolerates processes vanishing under it: a process that is gone
//! between listing and reading simply is not reported.

use std::collections::HashMap;
use std::fs;
use std::io::Read;

/// The state letter and parent, process group and session of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub(crate) pid: i32,
    pub(crate) state: u8,
    pub(crate) ppid: i32,
    pub(crate) pgrp: i32,
    pub(crate) session: i32,
}

impl ProcStat {
    /// Whether the process still runs code (not a zombie, not being reaped).
    pub(crate) fn is_alive(&self) -> bool {
        !matches!(self.state, b'Z' | b'X' | b'x')
    }
}

/// Parses the contents of `/proc/PID/stat`. The command name may hold spaces
/// and parentheses, so the fields are counted from the last `)`.
pub(crate) fn parse_stat(pid: i32, text: &str) -> Option<ProcStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        state,
        ppid,
        pgrp,
        session,
    })
}

pub(crate) use crate::kernel_file::read_small;

/// The stat of one process, `None` when it is gone.
pub(crate) fn stat(pid: i32) -> Option<ProcStat> {
    let text = read_small(format!("/proc/{pid}/stat"))?;
    parse_stat(pid, &text)
}

/// Whether `pid` exists and is not a zombie.
pub(crate) fn is_alive(pid: i32) -> bool {
    stat(pid).is_some_and(|s| s.is_alive())
}

/// Whether this process is a child subreaper (`ProcessSession::start` makes it
/// one): then orphans of the commands we run come back to us.
pub(crate) fn is_child_subreaper() -> bool {
    let mut flag: libc::c_int = 0;
    // SAFETY: PR_GET_CHILD_SUBREAPER writes one int through the pointer.
    let rc = unsafe {
        libc::prctl(
            libc::PR_GET_CHILD_SUBREAPER,
            &mut flag as *mut libc::c_int,
            0,
            0,
            0,
        )
    };
    rc == 0 && flag != 0
}

/// Every pid in `/proc` except our own.
pub(crate) fn all_pids() -> Vec<i32> {
    let own = std::process::id() as i32;
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| *pid != own)
        .collect()
}

/// Whether a raw `environ` block holds exactly `NAME=VALUE` as one entry.
pub(crate) fn environ_has(environ: &[u8], entry: &[u8]) -> bool {
    environ.split(|b| *b == 0).any(|e| e == entry)
}

/// Reads `/proc/PID/environ` into `buf` (cleared first); false when the
/// process is gone or its environment unreadable.
fn read_environ(pid: i32, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    fs::File::open(format!("/proc/{pid}/environ"))
        .and_then(|mut f| f.read_to_end(buf))
        .is_ok()
}

/// The value a raw `environ` block gives `name`, if it sets it.
pub(crate) fn environ_value<'a>(environ: &'a [u8], name: &str) -> Option<&'a [u8]> {
    environ
        .split(|b| *b == 0)
        .find_map(|e| e.strip_prefix(name.as_bytes())?.strip_prefix(b"="))
}

/// The live processes among `stats` whose environment sets `name`, by the
/// value they give it: each environment read once, however many values
/// are looked up (one scan per session was sessions times processes).
pub(crate) fn pids_by_value(name: &str, stats: &[ProcStat]) -> HashMap<Vec<u8>, Vec<i32>> {
    let mut buf = Vec::with_capacity(8192);
    let mut by_value: HashMap<Vec<u8>, Vec<i32>> = HashMap::new();
    for stat in stats.iter().filter(|s| s.is_alive()) {
        if !read_environ(stat.pid, &mut buf) {
            continue;
        }
        if let Some(value) = environ_value(&buf, name) {
            by_value.entry(value.to_vec()).or_default().push(stat.pid);
        }
    }
    by_value
}

/// One live process as a membership test needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LiveProcess {
    pub(crate) stat: ProcStat,
    /// Its environment carries the tag looked for.
    pub(crate) tagged: bool,
}

/// Every live process (not us), with whether its environment carries
/// `name=tag`: one pass over `/proc` for all membership rules.
pub(crate) fn live_processes(name: &str, tag: &str) -> Vec<LiveProcess> {
    let entry = format!("{name}={tag}").into_bytes();
    let mut buf = Vec::with_capacity(8192);
    all_pids()
        .into_iter()
        .filter_map(stat)
        .filter(ProcStat::is_alive)
        .map(|stat| LiveProcess {
            stat,
            tagged: read_environ(stat.pid, &mut buf) && environ_has(&buf, &entry),
        })
        .collect()
}

/// Live processes in process group `pgrp`.
pub(crate) fn group_members(pgrp: i32) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter_map(stat)
        .filter(|s| s.pgrp == pgrp && s.is_alive())
        .map(|s| s.pid)
        .collect()
}

/// Our children that orphans can be among: those of the main thread. The
/// kernel re-parents an orphan to the first live thread of its subreaper,
/// which is our main thread (it lives as long as we do), and children of a
/// thread that exited move there too; children of a live thread belong to
/// whoever forked them there. Reading one `children` file instead of one
/// per thread matters with a pump thread per running command.
pub(crate) fn own_children() -> Vec<i32> {
    let own = std::process::id() as i32;
    let mut children = match children_of_task(own) {
        Some(children) => children,
        None => all_pids()
            .into_iter()
            .filter_map(stat)
            .filter(|s| s.ppid == own)
            .map(|s| s.pid)
            .collect(),
    };
    children.sort_unstable();
    children.dedup();
    children
}

/// The children of one of our threads, from its `children` file (`None`
/// where the kernel has none: CONFIG_PROC_CHILDREN is off).
pub(crate) fn children_of_task(tid: i32) -> Option<Vec<i32>> {
    let text = read_small(format!("/proc/self/task/{tid}/children"))?;
    Some(
        text.split_ascii_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_survives_odd_command_names() {
        let s = parse_stat(42, "42 (a) b (c)) S 1 42 40 0 -1").unwrap();
        assert_eq!(s.state, b'S');
        assert_eq!((s.ppid, s.pgrp, s.session), (1, 42, 40));
        assert!(s.is_alive());
        let z = parse_stat(43, "43 (x) Z 1 43 43 0").unwrap();
        assert!(!z.is_alive());
        assert!(parse_stat(1, "garbage").is_none());
    }

    #[test]
    fn environ_match_is_whole_entries_only() {
        let env = b"A=1\0AGENT_REACH_SESSION=ar-1-2\0B=2\0";
        assert!(environ_has(env, b"AGENT_REACH_SESSION=ar-1-2"));
        assert!(!environ_has(env, b"AGENT_REACH_SESSION=ar-1"));
        assert!(!environ_has(env, b"AGENT_REACH_SESSION=ar-1-22"));
    }

    #[test]
    fn an_environ_value_is_that_of_the_whole_name() {
        let env = b"A=1\0AGENT_REACH_SESSION_X=no\0AGENT_REACH_SESSION=ar-1-2\0B=\0";
        assert_eq!(
            environ_value(env, "AGENT_REACH_SESSION"),
            Some(&b"ar-1-2"[..])
        );
        assert_eq!(environ_value(env, "B"), Some(&b""[..]));
        assert_eq!(environ_value(env, "AGENT"), None);
        assert_eq!(environ_value(b"", "A"), None);
    }

    #[test]
    fn processes_are_found_by_the_value_their_environment_gives() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .env("AR_PROCFS_TEST_TAG", "tag-7")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Polled, bounded: under a loaded parallel run one pass may miss
        // the child (its stat or environ not readable yet).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let found = loop {
            let stats: Vec<_> = all_pids().into_iter().filter_map(stat).collect();
            let by_value = pids_by_value("AR_PROCFS_TEST_TAG", &stats);
            let found = by_value.get(&b"tag-7"[..]).cloned();
            if found.is_some() || std::time::Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert_eq!(found, Some(vec![pid]));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn our_own_process_is_alive_and_a_child_shows_up() {
        assert!(is_alive(std::process::id() as i32));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        assert!(children_of_task(tid).unwrap().contains(&pid));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!is_alive(pid));
    }
}
