//! The envd door's live processes, as E2B's envd keeps them: a process
//! started by `Start` lives on its own, whether or not a client is
//! streaming its output, until it exits, is killed (`SendSignal`), its
//! timeout (the `Connect-Timeout-Ms` of its `Start`) passes, or the server
//! stops; `Connect` attaches one more stream to it, `List` shows it.
//!
//! Each process is seated in the broker's one session table (its
//! [`Live`] is held by the task that owns it, [`own`]), and is known here
//! by its pid, for its caller only. The owning task reads the output tap
//! and hands each chunk to every attached stream, waiting for the slowest
//! (back-pressure reaches the command through the tap, memory stays
//! bounded); with no stream attached, output is dropped, as envd does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::proto::process::{ProcessConfig, process_event::EndEvent};
use crate::broker::Live;
use crate::exec::state::StreamKind;
use crate::exec::{Execution, TapReceiver};
use crate::gate::Caller;

/// Events queued for one attached stream before the owner waits for it.
pub(crate) const SUBSCRIBER_QUEUE: usize = 4;

/// What an attached stream is told.
#[derive(Debug, Clone)]
pub(crate) enum ProcEvent {
    /// Output, from the PTY when the process has one.
    Output(StreamKind, Vec<u8>),
    /// The process is over.
    End(EndEvent),
    /// Its `Start` deadline passed: the tree was killed.
    Deadline,
    /// The server stops: the tree was killed.
    Shutdown,
}

/// One process, as the door knows it.
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) pid: u32,
    pub(crate) tag: Option<String>,
    pub(crate) config: ProcessConfig,
    pub(crate) caller: Caller,
    pub(crate) exec: Execution,
    pub(crate) tty: bool,
    subscribers: Mutex<Vec<mpsc::Sender<ProcEvent>>>,
}

impl Proc {
    /// A new stream attached to it, from the next output on.
    pub(crate) fn subscribe(&self) -> mpsc::Receiver<ProcEvent> {
        let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE);
        crate::sync::lock(&self.subscribers).push(tx);
        rx
    }

    fn subscribers(&self) -> Vec<mpsc::Sender<ProcEvent>> {
        let mut subs = crate::sync::lock(&self.subscribers);
        subs.retain(|s| !s.is_closed());
        subs.clone()
    }
}

/// The door's processes by pid.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcTable {
    inner: Arc<Mutex<BTreeMap<u32, Arc<Proc>>>>,
}

/// Which process a call names (E2B's `ProcessSelector`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selector {
    Pid(u32),
    Tag(String),
}

impl ProcTable {
    /// `caller`'s process named by `selector`; another caller's reads as unknown.
    pub(crate) fn find(&self, caller: &Caller, selector: &Selector) -> Option<Arc<Proc>> {
        let table = crate::sync::lock(&self.inner);
        let found = match selector {
            Selector::Pid(pid) => table.get(pid).cloned(),
            Selector::Tag(tag) => table
                .values()
                .find(|p| p.tag.as_deref() == Some(tag.as_str()))
                .cloned(),
        };
        found.filter(|p| &p.caller == caller)
    }

    /// `caller`'s processes, by pid.
    pub(crate) fn of(&self, caller: &Caller) -> Vec<Arc<Proc>> {
        crate::sync::lock(&self.inner)
            .values()
            .filter(|p| &p.caller == caller)
            .cloned()
            .collect()
    }

    fn remove(&self, pid: u32) {
        crate::sync::lock(&self.inner).remove(&pid);
    }
}

/// A process just started, before its owner runs.
pub(crate) struct Started {
    pub(crate) live: Live,
    pub(crate) tap: TapReceiver,
    pub(crate) tag: Option<String>,
    pub(crate) config: ProcessConfig,
    pub(crate) caller: Caller,
    pub(crate) tty: bool,
    pub(crate) deadline: Option<Instant>,
    pub(crate) shutdown: CancellationToken,
}

/// Enters `started` in `table` with one stream attached (the `Start`
/// call's), then owns it on a task of its own until it is over.
pub(crate) fn own(table: &ProcTable, started: Started) -> (Arc<Proc>, mpsc::Receiver<ProcEvent>) {
    let Started {
        live,
        tap,
        tag,
        config,
        caller,
        tty,
        deadline,
        shutdown,
    } = started;
    let proc = Arc::new(Proc {
        pid: live.exec.pid(),
        tag,
        config,
        caller,
        exec: live.exec.clone(),
        tty,
        subscribers: Mutex::new(Vec::new()),
    });
    let first = proc.subscribe();
    crate::sync::lock(&table.inner).insert(proc.pid, Arc::clone(&proc));
    tokio::spawn(run(
        table.clone(),
        Arc::clone(&proc),
        live,
        tap,
        deadline,
        shutdown,
    ));
    (proc, first)
}

/// Why the owner stopped before the process ended by itself.
enum Cut {
    Deadline,
    Shutdown,
}

async fn run(
    table: ProcTable,
    proc: Arc<Proc>,
    live: Live,
    mut tap: TapReceiver,
    deadline: Option<Instant>,
    shutdown: CancellationToken,
) {
    let deadline_passed = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline_passed);
    let exec = live.exec.clone();
    // E2B's way: what the command leaves running in the background lives
    // on after its end (see `hold_background` below).
    let settle = exec.settle_leaving_background();
    tokio::pin!(settle);
    let mut left: Option<bool> = None;
    let cut = 'forward: loop {
        let chunk = tokio::select! {
            chunk = tap.recv() => chunk,
            now_left = &mut settle, if left.is_none() => { left = Some(now_left); continue; }
            () = &mut deadline_passed => break Some(Cut::Deadline),
            () = shutdown.cancelled() => break Some(Cut::Shutdown),
        };
        let Some(chunk) = chunk else { break None };
        let event = ProcEvent::Output(chunk.kind, chunk.bytes);
        for sub in proc.subscribers() {
            tokio::select! {
                _ = sub.send(event.clone()) => {}
                () = &mut deadline_passed => break 'forward Some(Cut::Deadline),
                () = shutdown.cancelled() => break 'forward Some(Cut::Shutdown),
            }
        }
    };
    let cut = match cut {
        Some(cut) => Some(cut),
        None if left.is_some() => None,
        None => tokio::select! {
            now_left = &mut settle => { left = Some(now_left); None }
            () = &mut deadline_passed => Some(Cut::Deadline),
            () = shutdown.cancelled() => Some(Cut::Shutdown),
        },
    };
    let ended_by_itself = cut.is_none();
    let last = match cut {
        None => ProcEvent::End(end_event(&exec)),
        Some(cut) => {
            let report = exec.terminate().await;
            if !report.survivors.is_empty() {
                tracing::warn!(survivors = ?report.survivors, "an envd process left survivors");
            }
            match cut {
                Cut::Deadline => ProcEvent::Deadline,
                Cut::Shutdown => ProcEvent::Shutdown,
            }
        }
    };
    let Live {
        exec: _,
        report,
        ticket,
        slot,
    } = live;
    // Its slot of the scheduler goes with the command; what it left in
    // the background keeps only its seat.
    drop(slot);
    drop(report);
    if !ended_by_itself || left != Some(true) {
        // Out of both tables before the last event: a client that saw the
        // end finds the process gone.
        table.remove(proc.pid);
        drop(ticket);
        tell_end(&proc, &last).await;
        return;
    }
    // The command ended and left something running: the client hears the
    // end; the process stays listed (and killable by its pid) and keeps
    // its seat until what it left is gone, killed, or the server stops.
    tell_end(&proc, &last).await;
    crate::broker::hold_background(proc.exec.clone(), ticket).await;
    table.remove(proc.pid);
    tell_end(&proc, &last).await;
}

/// Sends the last event to every attached stream, then detaches them.
async fn tell_end(proc: &Proc, last: &ProcEvent) {
    for sub in proc.subscribers() {
        let _ = sub.send(last.clone()).await;
    }
    crate::sync::lock(&proc.subscribers).clear();
}

/// The end of `exec` as Go's `os.ProcessState` tells it (what envd sends):
/// its code and `exit status N`, or -1 and `signal: NAME` when killed.
pub(crate) fn end_event(exec: &Execution) -> EndEvent {
    let Some(exit) = exec.exit_info() else {
        return EndEvent {
            exit_code: -1,
            exited: false,
            status: "unknown".to_owned(),
            error: None,
        };
    };
    match (exit.code, exit.signal) {
        (Some(code), _) => EndEvent {
            exit_code: code,
            exited: true,
            status: format!("exit status {code}"),
            error: None,
        },
        (None, signal) => EndEvent {
            exit_code: -1,
            exited: false,
            status: format!("signal: {}", signal_name(signal.unwrap_or(0))),
            error: None,
        },
    }
}

/// The name Go gives a signal in `signal: NAME`.
fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGKILL => "killed".to_owned(),
        libc::SIGTERM => "terminated".to_owned(),
        libc::SIGINT => "interrupt".to_owned(),
        libc::SIGHUP => "hangup".to_owned(),
        libc::SIGPIPE => "broken pipe".to_owned(),
        libc::SIGSEGV => "segmentation fault".to_owned(),
        libc::SIGABRT => "aborted".to_owned(),
        other => format!("signal {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_as_go_names_them() {
        assert_eq!(signal_name(libc::SIGKILL), "killed");
        assert_eq!(signal_name(libc::SIGTERM), "terminated");
        assert_eq!(signal_name(64), "signal 64");
    }
}
