//! Processes the tests count: whether this machine has a `pids` cgroup
//! controller agent-reach can use, and how many processes run a given
//! command line (a marker such as `sleep 3171` that nothing else runs).

/// Whether this machine has a `pids` controller agent-reach can use: the
/// cgroup v1 `pids` hierarchy, or cgroup2 offering `pids`.
pub fn has_pids_controller() -> bool {
    let v1 = std::fs::read_to_string("/proc/self/cgroup")
        .is_ok_and(|text| text.lines().any(|l| l.split(':').nth(1) == Some("pids")));
    let v2 = [
        "/sys/fs/cgroup/cgroup.controllers",
        "/sys/fs/cgroup/unified/cgroup.controllers",
    ]
    .iter()
    .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.split_whitespace().any(|c| c == "pids")));
    v1 || v2
}

/// Processes whose command line is exactly `argv`.
pub fn running(argv: &[&str]) -> usize {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| a.bytes().chain(std::iter::once(0)))
        .collect();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == wanted))
        .count()
}
