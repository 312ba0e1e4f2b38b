//! `Start`: one live process and its event stream. The process is spawned
//! attached (a tap of its output, a stdin pipe or a PTY of the asked size)
//! by the broker, seated in its session table under a fresh id, announced with an `InitEvent`, then its
//! output is forwarded chunk by chunk as the client takes it, and last its
//! `ExitEvent`, once nothing of it is left.
//!
//! Memory stays flat under any flood: the tap holds a few chunks, the
//! event channel a few events, and when the client reads slowly both fill
//! and the command's own writes wait (see [`crate::exec::tap`]). The
//! stream ends early, with everything the command started killed, when the
//! client goes away, when the call's deadline passes (`DEADLINE_EXCEEDED`)
//! or when the server stops (`UNAVAILABLE`).

use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::proto::process_v1::{ExitEvent, InitEvent, StartResponse, start_response::Event};
use crate::broker::Live;
use crate::exec::TapReceiver;
use crate::exec::state::StreamKind;

/// Events queued for the client before the forwarding waits for it.
pub(crate) const EVENT_QUEUE: usize = 4;

/// The stream a `Start` call answers with.
pub(crate) type EventStream = tokio_stream::wrappers::ReceiverStream<Result<StartResponse, Status>>;

/// Why the forwarding stopped early.
enum Cut {
    ClientGone,
    Deadline,
    Shutdown,
}

/// Everything one stream's forwarding owns.
pub(crate) struct Forward {
    /// The process, its sandbox report and its seat, kept as long as it.
    pub(crate) live: Live,
    pub(crate) tap: TapReceiver,
    pub(crate) deadline: Option<Instant>,
    pub(crate) shutdown: CancellationToken,
}

/// Starts forwarding on a task of its own; the stream begins with the
/// `InitEvent`.
pub(crate) fn open(forward: Forward) -> EventStream {
    let (events, stream) = mpsc::channel(EVENT_QUEUE);
    let init = StartResponse {
        event: Some(Event::Init(InitEvent {
            process_id: i32::try_from(forward.live.ticket.id()).unwrap_or(i32::MAX),
        })),
    };
    // The queue is empty: the first event always fits.
    let _ = events.try_send(Ok(init));
    tokio::spawn(run(forward, events));
    tokio_stream::wrappers::ReceiverStream::new(stream)
}

async fn run(forward: Forward, events: mpsc::Sender<Result<StartResponse, Status>>) {
    let Forward {
        live:
            Live {
                exec,
                report,
                ticket: registration,
                slot: _slot,
            },
        mut tap,
        deadline,
        shutdown,
    } = forward;
    let deadline_passed = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline_passed);
    // The exit, then the clean-up of what the command left (which is what
    // closes a pipe a grandchild still holds): alongside the forwarding.
    let settle = exec.settle();
    tokio::pin!(settle);
    let mut settled = false;
    let cut = loop {
        let chunk = tokio::select! {
            chunk = tap.recv() => chunk,
            () = &mut settle, if !settled => { settled = true; continue; }
            () = &mut deadline_passed => break Some(Cut::Deadline),
            () = shutdown.cancelled() => break Some(Cut::Shutdown),
            () = events.closed() => break Some(Cut::ClientGone),
        };
        let Some(chunk) = chunk else { break None };
        let event = match chunk.kind {
            StreamKind::Stdout => Event::Stdout(chunk.bytes),
            StreamKind::Stderr => Event::Stderr(chunk.bytes),
        };
        tokio::select! {
            sent = events.send(Ok(StartResponse { event: Some(event) })) => {
                if sent.is_err() { break Some(Cut::ClientGone); }
            }
            () = &mut deadline_passed => break Some(Cut::Deadline),
            () = shutdown.cancelled() => break Some(Cut::Shutdown),
        }
    };
    let cut = match cut {
        Some(cut) => Some(cut),
        None if settled => None,
        None => tokio::select! {
            () = &mut settle => None,
            () = &mut deadline_passed => Some(Cut::Deadline),
            () = shutdown.cancelled() => Some(Cut::Shutdown),
            () = events.closed() => Some(Cut::ClientGone),
        },
    };
    let last = match cut {
        None => {
            let code = exec.exit_info().map_or(-1, |exit| exit.exit_code());
            Ok(StartResponse {
                event: Some(Event::Exit(ExitEvent { exit_code: code })),
            })
        }
        Some(cut) => {
            let report = exec.terminate().await;
            if !report.survivors.is_empty() {
                tracing::warn!(survivors = ?report.survivors, "a Start process left survivors");
            }
            Err(match cut {
                Cut::Deadline => {
                    Status::deadline_exceeded("the call's deadline passed; the process was killed")
                }
                Cut::Shutdown => {
                    Status::unavailable("the server is stopping; the process was killed")
                }
                Cut::ClientGone => Status::cancelled("the client went away"),
            })
        }
    };
    // Out of the table before the last event: a client that saw the exit
    // finds the process gone.
    drop(registration);
    drop(report);
    let _ = events.send(last).await;
}
