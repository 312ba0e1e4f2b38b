//! Ending an execution so that nothing it started survives: SIGTERM to
//! everything that belongs to it, a grace period, SIGKILL, repeated until
//! nothing is left or a bound runs out; then a bounded drain of the output.
//!
//! What belongs to an execution: its process group (the command is a session
//! leader), its cgroup when it has one (escapes by `setsid` or double forks
//! stay inside), and every live process whose environment carries its
//! session tag (the fallback that also works without cgroups). A process
//! that is still there after the last SIGKILL is reported as a survivor.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::env::SESSION_VAR;
use super::procfs;
use super::spawner;
use super::state::Shared;

/// How often we look again whether everything is gone.
const POLL: Duration = Duration::from_millis(10);
/// How long SIGKILL is repeated (for processes forked while we kill, and
/// for the kernel to finish the ones that got it) before giving up.
const KILL_CONFIRM: Duration = Duration::from_secs(1);

/// What a termination did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillReport {
    /// Processes it signalled (the command and what it started).
    pub signalled: Vec<u32>,
    /// SIGKILL was needed: something outlived the grace period.
    pub escalated: bool,
    /// Processes still alive after the last SIGKILL.
    pub survivors: Vec<u32>,
}

/// Cheap test: whether anything of the execution may still be alive. When
/// the command has exited and nothing it started is in its cgroup or among
/// our unregistered children, nothing of it is left: every descendant that
/// outlives its parent is re-parented to us, the subreaper (or to a
/// subreaper below us, which is itself such a descendant). Only sound in a
/// subreaper; elsewhere it always says yes.
pub(crate) fn may_have_members(shared: &Shared) -> bool {
    if shared.lock().exit.is_none() {
        return true;
    }
    if let Some(cgroup) = &shared.cgroup
        && cgroup.members().into_iter().any(procfs::is_alive)
    {
        return true;
    }
    // Without the subreaper, orphans go to init: only a full scan can tell.
    !procfs::is_child_subreaper()
        || spawner::unknown_children()
            .into_iter()
            .any(procfs::is_alive)
}

/// Live processes that belong to the execution: its process group, its
/// cgroup, its session tag, and, when it is the only execution in this
/// process, every orphan re-parented to us and their descendants.
pub(crate) fn members(shared: &Shared) -> BTreeSet<i32> {
    let mut pids = BTreeSet::new();
    if !may_have_members(shared) {
        return pids;
    }
    if shared.lock().exit.is_none() && procfs::is_alive(shared.pid) {
        pids.insert(shared.pid);
    }
    if let Some(cgroup) = &shared.cgroup {
        pids.extend(
            cgroup
                .members()
                .into_iter()
                .filter(|pid| procfs::is_alive(*pid)),
        );
    }
    let processes = procfs::live_processes(SESSION_VAR, &shared.tag);
    let group_is_ours = shared.main_unreaped();
    for process in &processes {
        if process.tagged || (group_is_ours && process.stat.pgrp == shared.pid) {
            pids.insert(process.stat.pid);
        }
    }
    let mut roots = pids.clone();
    if spawner::claims_all_children() && live_executions() <= 1 {
        roots.extend(spawner::unknown_children());
    }
    pids.extend(descendants(&processes, &roots));
    pids.remove(&(std::process::id() as i32));
    pids
}

/// `roots` and every live process below them.
fn descendants(processes: &[procfs::LiveProcess], roots: &BTreeSet<i32>) -> BTreeSet<i32> {
    let mut found: BTreeSet<i32> = roots
        .iter()
        .copied()
        .filter(|pid| processes.iter().any(|p| p.stat.pid == *pid))
        .collect();
    loop {
        let before = found.len();
        for process in processes {
            if found.contains(&process.stat.ppid) {
                found.insert(process.stat.pid);
            }
        }
        if found.len() == before {
            return found;
        }
    }
}

static LIVE_EXECUTIONS: AtomicUsize = AtomicUsize::new(0);

/// Executions in this process whose clean-up has not finished.
pub(crate) fn live_executions() -> usize {
    LIVE_EXECUTIONS.load(Ordering::Relaxed)
}

/// Counts one execution as live until dropped.
#[derive(Debug)]
pub(crate) struct LiveExecutionGuard(());

impl LiveExecutionGuard {
    pub(crate) fn new() -> Self {
        LIVE_EXECUTIONS.fetch_add(1, Ordering::Relaxed);
        Self(())
    }
}

impl Default for LiveExecutionGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for LiveExecutionGuard {
    fn drop(&mut self) {
        LIVE_EXECUTIONS.fetch_sub(1, Ordering::Relaxed);
    }
}

fn signal_all(shared: &Shared, pids: &BTreeSet<i32>, signal: i32) {
    // After the reap a stranger could have the group id: the group is then
    // left to the scan.
    shared.signal_group(signal);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        for pid in pids {
            libc::kill(*pid, signal);
            if signal == libc::SIGTERM {
                // A stopped process would hold SIGTERM pending forever.
                libc::kill(*pid, libc::SIGCONT);
            }
        }
    }
    if signal == libc::SIGKILL
        && let Some(cgroup) = &shared.cgroup
    {
        cgroup.kill_all();
    }
}

/// SIGTERM, grace, SIGKILL until nothing that belongs to the execution is
/// left; records survivors in the shared state. Blocking.
pub(crate) fn kill_everything(shared: &Shared) -> KillReport {
    let _one_at_a_time = crate::sync::lock(&shared.kill_lock);
    let mut report = KillReport::default();
    let mut targets = members(shared);
    if targets.is_empty() {
        return report;
    }
    report.signalled = targets.iter().map(|p| *p as u32).collect();
    signal_all(shared, &targets, libc::SIGTERM);
    let grace_end = Instant::now() + shared.kill_grace;
    loop {
        std::thread::sleep(POLL);
        targets = members(shared);
        if targets.is_empty() || Instant::now() >= grace_end {
            break;
        }
    }
    let confirm_end = Instant::now() + KILL_CONFIRM;
    targets = members(shared);
    while !targets.is_empty() {
        report.escalated = true;
        signal_all(shared, &targets, libc::SIGKILL);
        for pid in &targets {
            let pid = *pid as u32;
            if !report.signalled.contains(&pid) {
                report.signalled.push(pid);
            }
        }
        if Instant::now() >= confirm_end {
            break;
        }
        std::thread::sleep(POLL);
        targets = members(shared);
    }
    report.survivors = targets.iter().map(|p| *p as u32).collect();
    let signalled: Vec<i32> = report.signalled.iter().map(|p| *p as i32).collect();
    spawner::reap_these(&signalled);
    spawner::reap_orphans();
    shared.lock().survivors = report.survivors.clone();
    report
}

/// SIGKILL to everything of the execution at once, without grace (the last
/// handle went away, or no thread could wait out the grace).
pub(crate) fn kill_now(shared: &Shared) {
    shared.signal_group(libc::SIGKILL);
    let targets = members(shared);
    signal_all(shared, &targets, libc::SIGKILL);
}

/// The last clean-up of a process that [claims all its
/// children](spawner::claim_all_children), once its executions are ended:
/// SIGKILLs every unregistered child (an orphan of one of its commands,
/// however it hid: `setsid`, a cleared environment) and everything below
/// it, repeated for a bound, and reaps them. [`members`] leaves such
/// orphans alone while several executions run, since it cannot tell whose
/// they are; at the end that no longer matters. Does nothing in a process
/// that does not claim its children. Blocking; returns what it signalled.
pub(crate) fn kill_orphans() -> Vec<i32> {
    let mut signalled = BTreeSet::new();
    if !spawner::claims_all_children() {
        return Vec::new();
    }
    let confirm_end = Instant::now() + KILL_CONFIRM;
    loop {
        let roots: BTreeSet<i32> = spawner::unknown_children()
            .into_iter()
            .filter(|pid| procfs::is_alive(*pid))
            .collect();
        if roots.is_empty() {
            break;
        }
        let processes: Vec<procfs::LiveProcess> = procfs::all_pids()
            .into_iter()
            .filter_map(procfs::stat)
            .filter(procfs::ProcStat::is_alive)
            .map(|stat| procfs::LiveProcess {
                stat,
                tagged: false,
            })
            .collect();
        let mut targets = descendants(&processes, &roots);
        targets.extend(&roots);
        targets.remove(&(std::process::id() as i32));
        for pid in &targets {
            // SAFETY: kill has no memory-safety preconditions; each pid is
            // our child or below one, alive a moment ago.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        signalled.extend(targets);
        spawner::reap_orphans();
        if Instant::now() >= confirm_end {
            break;
        }
        std::thread::sleep(POLL);
    }
    spawner::reap_orphans();
    signalled.into_iter().collect()
}

/// Waits up to the drain bound for the output to close, then stops reading.
pub(crate) fn drain(shared: &Shared) {
    let deadline = Instant::now() + shared.drain;
    if !shared.wait_blocking(deadline, |s| s.output_done) {
        shared.stop_reading();
        // The pump only has to notice the flag: a short, bounded wait.
        let _ = shared.wait_blocking(Instant::now() + Duration::from_millis(500), |s| {
            s.output_done
        });
    }
}

/// The whole explicit termination: kill everything, then drain.
pub(crate) fn terminate(shared: &Shared) -> KillReport {
    let report = kill_everything(shared);
    // The command itself is gone or unkillable; its exit shows shortly.
    let _ = shared.wait_blocking(Instant::now() + Duration::from_millis(500), |s| {
        s.exit.is_some()
    });
    drain(shared);
    reap_and_release(shared);
    report
}

/// The last step of every clean-up, once nothing of the command runs: reap
/// it and the orphans it left, and let its cgroup go.
pub(crate) fn reap_and_release(shared: &Shared) {
    shared.reap_main();
    spawner::reap_orphans();
    if let Some(cgroup) = &shared.cgroup {
        cgroup.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::procfs::{LiveProcess, ProcStat};

    fn process(pid: i32, ppid: i32) -> LiveProcess {
        LiveProcess {
            stat: ProcStat {
                pid,
                state: b'S',
                ppid,
                pgrp: pid,
                session: pid,
            },
            tagged: false,
        }
    }

    #[test]
    fn descendants_follow_parents_to_any_depth_and_skip_the_rest() {
        let processes = vec![
            process(10, 1),
            process(11, 10),
            process(12, 11),
            process(13, 12),
            process(20, 1),
            process(21, 20),
        ];
        let found = descendants(&processes, &[11].into());
        assert_eq!(found, [11, 12, 13].into());
        let none = descendants(&processes, &[99].into());
        assert!(none.is_empty(), "a dead root brings nothing");
    }

    #[test]
    fn live_executions_are_counted_while_guarded() {
        let before = live_executions();
        let guard = LiveExecutionGuard::new();
        assert!(live_executions() > before);
        drop(guard);
        assert_eq!(live_executions(), before);
    }
}
