//! The processes of one codex-exec connection, by Codex's own process id.
//! Each is a live session of the broker (its [`Live`] held by the task that
//! owns it, [`own`]); the owner forwards every output chunk (redacted by
//! the engine's pump) as a `process/output` notification and keeps it for
//! `process/read`, then, once the command has exited and whatever it left
//! behind was killed (the engine's settle: an escapee holding the pipe is
//! killed, not waited for), sends `process/exited` and `process/closed`.
//! When the connection ends, every owner kills its whole tree.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::connection::Outbox;
use super::protocol::{
    ByteChunk, EXEC_CLOSED_METHOD, EXEC_EXITED_METHOD, EXEC_OUTPUT_DELTA_METHOD,
    ExecClosedNotification, ExecExitedNotification, ExecOutputDeltaNotification, ExecOutputStream,
    ProcessOutputChunk, notification,
};
use crate::broker::Live;
use crate::exec::state::StreamKind;
use crate::exec::{Execution, TapReceiver};

/// Output bytes kept per process for `process/read`; older chunks go first.
pub(crate) const RETAINED_OUTPUT_BYTES: usize = 1024 * 1024;

/// What one process has told so far.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) chunks: VecDeque<ProcessOutputChunk>,
    retained: usize,
    /// The last seq given (output, exit and close share one count).
    pub(crate) next_seq: u64,
    pub(crate) exit_code: Option<i32>,
    pub(crate) closed: bool,
    /// `process/terminate` asked for its end: it leaves the table once closed.
    terminated: bool,
}

impl Progress {
    fn take_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }
}

/// One process, as the connection knows it.
#[derive(Debug)]
pub(crate) struct Proc {
    pub(crate) id: String,
    pub(crate) exec: Execution,
    pub(crate) tty: bool,
    pub(crate) stdin_pipe: bool,
    pub(crate) progress: Mutex<Progress>,
    /// Bumped at every event, for `process/read`'s wait.
    pub(crate) changed: watch::Sender<u64>,
}

/// The connection's processes.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcTable {
    inner: Arc<Mutex<BTreeMap<String, Arc<Proc>>>>,
}

impl ProcTable {
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Proc>> {
        crate::sync::lock(&self.inner).get(id).cloned()
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        crate::sync::lock(&self.inner).contains_key(id)
    }

    pub(crate) fn all(&self) -> Vec<Arc<Proc>> {
        crate::sync::lock(&self.inner).values().cloned().collect()
    }

    /// Marks `id` terminated; it leaves the table now if it is closed, else
    /// when its owner closes it.
    pub(crate) fn terminated(&self, id: &str) {
        let mut table = crate::sync::lock(&self.inner);
        let Some(proc) = table.get(id) else { return };
        let closed = {
            let mut progress = crate::sync::lock(&proc.progress);
            progress.terminated = true;
            progress.closed
        };
        if closed {
            table.remove(id);
        }
    }

    fn remove(&self, id: &str) {
        crate::sync::lock(&self.inner).remove(id);
    }
}

/// A process just started, before its owner runs.
pub(crate) struct Started {
    pub(crate) id: String,
    pub(crate) live: Live,
    pub(crate) tap: TapReceiver,
    pub(crate) tty: bool,
    pub(crate) stdin_pipe: bool,
}

/// Enters `started` in `table` and owns it on a task of its own; the task
/// forwards nothing before `go` fires (the `process/start` reply is sent
/// first) and kills the tree when `ended` is cancelled.
pub(crate) fn own(
    table: &ProcTable,
    started: Started,
    out: Outbox,
    ended: CancellationToken,
    go: oneshot::Receiver<()>,
) -> Arc<Proc> {
    let (changed, _) = watch::channel(0);
    let proc = Arc::new(Proc {
        id: started.id.clone(),
        exec: started.live.exec.clone(),
        tty: started.tty,
        stdin_pipe: started.stdin_pipe,
        progress: Mutex::new(Progress::default()),
        changed,
    });
    crate::sync::lock(&table.inner).insert(started.id.clone(), Arc::clone(&proc));
    tokio::spawn(run(
        table.clone(),
        Arc::clone(&proc),
        started,
        out,
        ended,
        go,
    ));
    proc
}

async fn run(
    table: ProcTable,
    proc: Arc<Proc>,
    started: Started,
    out: Outbox,
    ended: CancellationToken,
    go: oneshot::Receiver<()>,
) {
    let Started { live, mut tap, .. } = started;
    tokio::select! {
        _ = go => {}
        () = ended.cancelled() => {}
    }
    let exec = live.exec.clone();
    let settle = exec.settle();
    tokio::pin!(settle);
    let mut settled = false;
    let mut cut = false;
    loop {
        tokio::select! {
            chunk = tap.recv() => {
                let Some(chunk) = chunk else { break };
                let stream = stream_of(proc.tty, chunk.kind);
                let note = record(&proc, stream, chunk.bytes);
                tokio::select! {
                    () = out.send(note) => {}
                    () = ended.cancelled() => { cut = true; break; }
                }
            }
            () = &mut settle, if !settled => settled = true,
            () = ended.cancelled() => { cut = true; break; }
        }
    }
    if !cut && !settled {
        tokio::select! {
            () = &mut settle => {}
            () = ended.cancelled() => cut = true,
        }
    }
    if cut {
        let report = exec.terminate().await;
        if !report.survivors.is_empty() {
            tracing::warn!(survivors = ?report.survivors, process = %proc.id, "a codex-exec process left survivors");
        }
        table.remove(&proc.id);
        return;
    }
    let code = exec.exit_info().map_or(-1, |e| e.exit_code());
    let (exited, closed, terminated) = {
        let mut progress = crate::sync::lock(&proc.progress);
        progress.exit_code = Some(code);
        let exited = progress.take_seq();
        progress.closed = true;
        (exited, progress.take_seq(), progress.terminated)
    };
    proc.changed.send_modify(|n| *n += 1);
    // Its seat in the session table is free once it is over.
    drop(live);
    let id = proc.id.clone();
    out.send(notification(
        EXEC_EXITED_METHOD,
        &ExecExitedNotification {
            process_id: id.clone(),
            seq: exited,
            exit_code: code,
            sandbox_denied: false,
        },
    ))
    .await;
    out.send(notification(
        EXEC_CLOSED_METHOD,
        &ExecClosedNotification {
            process_id: id,
            seq: closed,
        },
    ))
    .await;
    if terminated {
        table.remove(&proc.id);
    }
}

/// Keeps `bytes` for `process/read` and returns its notification.
fn record(proc: &Proc, stream: ExecOutputStream, bytes: Vec<u8>) -> serde_json::Value {
    let seq = {
        let mut progress = crate::sync::lock(&proc.progress);
        let seq = progress.take_seq();
        progress.retained += bytes.len();
        progress.chunks.push_back(ProcessOutputChunk {
            seq,
            stream,
            chunk: ByteChunk(bytes.clone()),
        });
        while progress.retained > RETAINED_OUTPUT_BYTES && progress.chunks.len() > 1 {
            if let Some(old) = progress.chunks.pop_front() {
                progress.retained -= old.chunk.0.len();
            }
        }
        seq
    };
    proc.changed.send_modify(|n| *n += 1);
    notification(
        EXEC_OUTPUT_DELTA_METHOD,
        &ExecOutputDeltaNotification {
            process_id: proc.id.clone(),
            seq,
            stream,
            chunk: ByteChunk(bytes),
        },
    )
}

fn stream_of(tty: bool, kind: StreamKind) -> ExecOutputStream {
    match (tty, kind) {
        (true, _) => ExecOutputStream::Pty,
        (false, StreamKind::Stdout) => ExecOutputStream::Stdout,
        (false, StreamKind::Stderr) => ExecOutputStream::Stderr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_s_output_is_the_pty_stream_and_pipes_keep_theirs() {
        assert_eq!(stream_of(true, StreamKind::Stderr), ExecOutputStream::Pty);
        assert_eq!(
            stream_of(false, StreamKind::Stderr),
            ExecOutputStream::Stderr
        );
        assert_eq!(
            stream_of(false, StreamKind::Stdout),
            ExecOutputStream::Stdout
        );
    }
}
