//! What `/proc` says about a session's processes: which belong to it and
//! which TCP ports they listen on (MCP's `list_sessions` shows them). (Whether one waits at a prompt is the
//! engine's [`crate::exec::Execution::awaiting_input`].)
//!
//! Parsing is pure (unit-tested on sample text); reading is a thin edge that
//! treats any unreadable file as "nothing to say", since processes come and go
//! between two reads.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use crate::exec::procfs::ProcStat;

/// A listening socket from `/proc/net/tcp{,6}`: its inode and port.
pub(crate) fn parse_listening(table: &str) -> Vec<(u64, u16)> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let local = cols.get(1)?;
            if *cols.get(3)? != LISTEN {
                return None;
            }
            let port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            let inode = cols.get(9)?.parse().ok()?;
            Some((inode, port))
        })
        .collect()
}

/// The socket inode of an fd link target like `socket:[12345]`.
pub(crate) fn socket_inode(link: &Path) -> Option<u64> {
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The pids in `stats` that belong to a command: descendants of `root` or
/// members of its process group, plus `tagged` (found by environment tag,
/// which catches daemons that double-forked away from both).
pub(crate) fn family(stats: &[ProcStat], root: i32, tagged: &BTreeSet<i32>) -> BTreeSet<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for s in stats {
        children.entry(s.ppid).or_default().push(s.pid);
    }
    let mut found: BTreeSet<i32> = stats
        .iter()
        .filter(|s| s.pid == root || s.pgrp == root || tagged.contains(&s.pid))
        .map(|s| s.pid)
        .collect();
    let mut todo: Vec<i32> = found.iter().copied().collect();
    while let Some(pid) = todo.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if found.insert(child) {
                todo.push(child);
            }
        }
    }
    found
}

/// The listening sockets of each network namespace met, each read once:
/// a read of `/proc/PID/net/tcp` walks the kernel's whole socket hash
/// (6 ms here with ten sockets), so reading it per session cost
/// `list_sessions` 12 ms a session.
#[derive(Debug, Default)]
pub(crate) struct ListeningTables {
    by_netns: HashMap<PathBuf, BTreeMap<u64, u16>>,
}

impl ListeningTables {
    /// Socket inode to port, for the network namespace `pid` is in.
    fn of(&mut self, pid: i32) -> &BTreeMap<u64, u16> {
        let proc_dir = Path::new("/proc").join(pid.to_string());
        // A namespace that cannot be named is read under the pid's own key.
        let key = fs::read_link(proc_dir.join("ns/net")).unwrap_or_else(|_| proc_dir.clone());
        self.by_netns.entry(key).or_insert_with(|| {
            let mut by_inode = BTreeMap::new();
            for table in ["tcp", "tcp6"] {
                let text = crate::exec::procfs::read_small(proc_dir.join("net").join(table))
                    .unwrap_or_default();
                by_inode.extend(parse_listening(&text));
            }
            by_inode
        })
    }
}

/// The TCP ports (v4 and v6) that any of `pids` listens on, sorted (the
/// sockets of the first one's network namespace).
pub(crate) fn listening_ports(tables: &mut ListeningTables, pids: &BTreeSet<i32>) -> Vec<u16> {
    let Some(first) = pids.first() else {
        return Vec::new();
    };
    let by_inode = tables.of(*first);
    if by_inode.is_empty() {
        return Vec::new();
    }
    let mut ports = BTreeSet::new();
    for pid in pids {
        let Ok(fds) = fs::read_dir(Path::new("/proc").join(pid.to_string()).join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Some(port) = fs::read_link(fd.path())
                .ok()
                .and_then(|l| socket_inode(&l))
                .and_then(|i| by_inode.get(&i))
            {
                ports.insert(*port);
            }
        }
    }
    ports.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_read_from_the_tcp_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:0BB8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5551 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:0BB9 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 5552 1 0000000000000000 100 0 0 10 0\n";
        assert_eq!(parse_listening(table), vec![(5551, 3000)]);
        assert_eq!(socket_inode(Path::new("socket:[5551]")), Some(5551));
        assert_eq!(socket_inode(Path::new("pipe:[5551]")), None);
    }

    fn st(pid: i32, ppid: i32, pgrp: i32) -> ProcStat {
        ProcStat {
            pid,
            state: b'S',
            ppid,
            pgrp,
            session: 1,
        }
    }

    #[test]
    fn family_follows_children_group_and_tags() {
        let stats = [
            st(10, 1, 10),
            st(11, 10, 10),
            st(12, 11, 12),
            st(13, 1, 13),
            st(14, 13, 13),
            st(20, 1, 20),
        ];
        let tagged = BTreeSet::from([13]);
        let fam = family(&stats, 10, &tagged);
        assert_eq!(fam, BTreeSet::from([10, 11, 12, 13, 14]));
    }

    #[test]
    fn our_own_listening_socket_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let me = BTreeSet::from([std::process::id() as i32]);
        let mut tables = ListeningTables::default();
        assert!(listening_ports(&mut tables, &me).contains(&port));
    }

    #[test]
    fn processes_of_one_network_namespace_share_one_read_of_its_tables() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let mut tables = ListeningTables::default();
        let child_only = BTreeSet::from([child.id() as i32]);
        assert!(!listening_ports(&mut tables, &child_only).contains(&port));
        let me = BTreeSet::from([std::process::id() as i32]);
        assert!(listening_ports(&mut tables, &me).contains(&port));
        assert_eq!(tables.by_netns.len(), 1);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
