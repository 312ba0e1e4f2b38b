//! `filesystem.Filesystem`'s directory watchers: `WatchDir` (a server
//! stream of `FilesystemEvent`s) and the polled ones (`CreateWatcher`,
//! `GetWatcherEvents`, `RemoveWatcher`), as E2B's envd answers them: the
//! directory must exist (`not_found`) and be one (`invalid_argument`);
//! events are named relative to it (`sub/file.txt` when `recursive`), one
//! per kind of change (`CREATE`, `WRITE`, `REMOVE`, `RENAME`, `CHMOD`),
//! with the entry's `EntryInfo` when `include_entry` asks and the change
//! leaves one (create, write, chmod).
//!
//! The directory is planned by the broker (a listing) and watched beneath
//! the root by the workspace ([`crate::broker::files::surface::watch`]). Watchers are
//! the caller's: at most [`MAX_WATCHERS_PER_CALLER`] at once (streams and
//! polled ones together; one more is `resource_exhausted`), a polled
//! watcher holds at most [`MAX_QUEUED_EVENTS`] events between two polls
//! (later ones are dropped and counted: the next `GetWatcherEvents` says
//! how many in its [`DROPPED_HEADER`] header, and the log says it too),
//! and every watcher ends when the server stops. A stream waits for its
//! client (the kernel's queue holds meanwhile; what it loses is logged).

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use tokio_util::sync::CancellationToken;

use super::EnvdState;
use super::connect::{self, Code, ConnectError, StreamOut};
use super::connect::{bad_content_type, keepalive_of, one_message};
use super::filesystem::{entry_info, fs_error, workspace_for};
use super::proto::filesystem::{
    CreateWatcherRequest, CreateWatcherResponse, EventType, FilesystemEvent,
    GetWatcherEventsRequest, GetWatcherEventsResponse, RemoveWatcherRequest, RemoveWatcherResponse,
    WatchDirRequest, WatchDirResponse, watch_dir_response,
};
use crate::broker::files::surface::Workspace;
use crate::broker::files::surface::upload::blocking;
use crate::broker::files::surface::watch::{Change, ChangeKind, DirWatch};
use crate::gate::Caller;
use crate::plan::FileOp;

/// The most watchers (streams and polled ones) one caller holds at once.
pub(crate) const MAX_WATCHERS_PER_CALLER: usize = 32;
/// The most watchers the door holds across every caller.
pub(crate) const MAX_WATCHERS: usize = 64;
/// The most events a polled watcher holds between two polls.
pub(crate) const MAX_QUEUED_EVENTS: usize = 4096;
/// The reply header of `GetWatcherEvents` saying how many events were
/// dropped since the previous poll (absent when none were).
pub(crate) const DROPPED_HEADER: &str = "x-agent-reach-dropped-events";

/// The door's watchers: how many each caller holds, and the polled ones by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct WatchTable {
    inner: Arc<Mutex<Table>>,
}

#[derive(Debug, Default)]
struct Table {
    held: BTreeMap<Caller, usize>,
    polled: BTreeMap<String, Arc<Polled>>,
    next_id: u64,
}

/// One watcher counted against its caller's cap; given back when dropped.
#[derive(Debug)]
struct SeatGuard {
    table: WatchTable,
    caller: Caller,
}

impl Drop for SeatGuard {
    fn drop(&mut self) {
        let mut table = crate::sync::lock(&self.table.inner);
        if let Some(held) = table.held.get_mut(&self.caller) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                table.held.remove(&self.caller);
            }
        }
    }
}

impl WatchTable {
    /// A seat for one more watcher of `caller`, within the cap.
    fn seat(&self, caller: &Caller) -> Result<SeatGuard, ConnectError> {
        let mut table = crate::sync::lock(&self.inner);
        // Beside each caller's cap, one for the server: many addresses
        // (all of 127.0.0.0/8 is loopback) cannot add up past what the
        // machine has (inotify instances, 128 per user by default).
        let total: usize = table.held.values().sum();
        if total >= MAX_WATCHERS {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!(
                    "the server holds its limit of {MAX_WATCHERS} directory watchers across every caller; try again once one ends"
                ),
            ));
        }
        let held = table.held.entry(caller.clone()).or_default();
        if *held >= MAX_WATCHERS_PER_CALLER {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!(
                    "this caller already holds {MAX_WATCHERS_PER_CALLER} directory watchers; remove one (RemoveWatcher, or end a WatchDir stream) first"
                ),
            ));
        }
        *held += 1;
        Ok(SeatGuard {
            table: self.clone(),
            caller: caller.clone(),
        })
    }

    /// Seats `polled` under a new id.
    fn insert(&self, polled: Arc<Polled>) -> String {
        let mut table = crate::sync::lock(&self.inner);
        table.next_id += 1;
        let id = format!("w{}", table.next_id);
        table.polled.insert(id.clone(), polled);
        id
    }

    /// The polled watcher `id` of `caller`.
    fn get(&self, caller: &Caller, id: &str) -> Result<Arc<Polled>, ConnectError> {
        crate::sync::lock(&self.inner)
            .polled
            .get(id)
            .filter(|p| &p.caller == caller)
            .cloned()
            .ok_or_else(|| not_found(id))
    }

    /// Takes the polled watcher `id` of `caller` out of the table.
    fn take(&self, caller: &Caller, id: &str) -> Result<Arc<Polled>, ConnectError> {
        let mut table = crate::sync::lock(&self.inner);
        match table.polled.get(id) {
            Some(p) if &p.caller == caller => table.polled.remove(id).ok_or_else(|| not_found(id)),
            _ => Err(not_found(id)),
        }
    }

    /// Forgets `id` (its watch ended).
    fn forget(&self, id: &str) {
        crate::sync::lock(&self.inner).polled.remove(id);
    }

    /// How many watchers `caller` holds.
    #[cfg(test)]
    fn held_by(&self, caller: &Caller) -> usize {
        crate::sync::lock(&self.inner)
            .held
            .get(caller)
            .copied()
            .unwrap_or(0)
    }
}

fn not_found(id: &str) -> ConnectError {
    ConnectError::new(Code::NotFound, format!("watcher with id {id} not found"))
}

/// A polled watcher: its events since the last poll.
#[derive(Debug)]
struct Polled {
    caller: Caller,
    /// Ends its watch (cancelled by `RemoveWatcher`; a child of the
    /// server's shutdown).
    stop: CancellationToken,
    /// Cancelled once the watch's task has ended and let go of the watch
    /// (its inotify instance) and of this watcher.
    ended: CancellationToken,
    queued: Mutex<Queued>,
    _seat: SeatGuard,
}

#[derive(Debug, Default)]
struct Queued {
    events: VecDeque<FilesystemEvent>,
    dropped: u64,
    error: Option<ConnectError>,
}

impl Polled {
    fn new(caller: Caller, stop: CancellationToken, seat: SeatGuard) -> Self {
        Polled {
            caller,
            stop,
            ended: CancellationToken::new(),
            queued: Mutex::new(Queued::default()),
            _seat: seat,
        }
    }

    /// Queues `events`, dropping (and counting) what exceeds the cap, and
    /// `lost` events the kernel's queue lost.
    fn push(&self, events: Vec<FilesystemEvent>, lost: u64) {
        let mut queued = crate::sync::lock(&self.queued);
        let room = MAX_QUEUED_EVENTS.saturating_sub(queued.events.len());
        let over = events.len().saturating_sub(room);
        queued.events.extend(events.into_iter().take(room));
        queued.dropped += u64::try_from(over).unwrap_or(u64::MAX) + lost;
    }

    fn fail(&self, error: ConnectError) {
        crate::sync::lock(&self.queued).error = Some(error);
    }

    /// The queued events and how many were dropped, or the error that
    /// ended the watch.
    fn drain(&self) -> Result<(Vec<FilesystemEvent>, u64), ConnectError> {
        let mut queued = crate::sync::lock(&self.queued);
        if let Some(err) = &queued.error {
            return Err(err.clone());
        }
        let dropped = std::mem::take(&mut queued.dropped);
        Ok((queued.events.drain(..).collect(), dropped))
    }
}

/// A started watch: the directory's workspace and path, the watch.
struct Opened {
    ws: Workspace,
    rel: String,
    watch: DirWatch,
    include_entry: bool,
}

/// Plans `path` with the broker (a listing) and watches it for `caller`,
/// in a seat of the caller's.
async fn open(
    state: &EnvdState,
    caller: &Caller,
    path: &str,
    recursive: bool,
    include_entry: bool,
) -> Result<(Opened, SeatGuard), ConnectError> {
    let seat = state.watchers.seat(caller)?;
    let (ws, rel) = workspace_for(state, caller, FileOp::List, path)?;
    let (watched, at) = (ws.clone(), rel.clone());
    let watch = blocking(move || watched.watch_dir(&at, recursive))
        .await
        .map_err(|e| fs_error(&e))?;
    if watch.unwatched() > 0 {
        tracing::warn!(dir = %path, unwatched = watch.unwatched(), "a directory watch left directories unwatched (over its cap, or unreadable)");
    }
    let opened = Opened {
        ws,
        rel,
        watch,
        include_entry,
    };
    Ok((opened, seat))
}

impl Opened {
    /// The next changes as E2B's events (with their entries when asked);
    /// an error ends the watch.
    async fn next(&mut self) -> Result<Vec<FilesystemEvent>, ConnectError> {
        let changes = self.watch.next().await.map_err(|e| {
            ConnectError::new(Code::Internal, format!("watching {}: {e}", self.rel))
        })?;
        if !self.include_entry {
            return Ok(changes.iter().map(|c| event(c, None)).collect());
        }
        let (ws, rel) = (self.ws.clone(), self.rel.clone());
        let events = blocking(move || Ok(with_entries(&ws, &rel, &changes))).await;
        events.map_err(|e| fs_error(&e))
    }

    /// Events the kernel lost so far (its queue overflowed).
    fn lost(&self) -> u64 {
        self.watch.overflows()
    }
}

/// `changes` in `rel` as events, each creation, write and mode change with
/// the entry it left (none when it is gone already).
fn with_entries(ws: &Workspace, rel: &str, changes: &[Change]) -> Vec<FilesystemEvent> {
    changes
        .iter()
        .map(|change| {
            let carries = matches!(
                change.kind,
                ChangeKind::Create | ChangeKind::Write | ChangeKind::Chmod
            );
            let entry = carries
                .then(|| {
                    let at = Path::new(rel).join(&change.name);
                    let at = at.to_string_lossy();
                    let target = ws.resolve_entry(&at).ok()?;
                    let stat = ws.stat(&target).ok()?;
                    Some(entry_info(ws.root(), &at, &stat))
                })
                .flatten();
            event(change, entry)
        })
        .collect()
}

/// E2B's event of `change`.
fn event(change: &Change, entry: Option<super::proto::filesystem::EntryInfo>) -> FilesystemEvent {
    let r#type = match change.kind {
        ChangeKind::Create => EventType::Create,
        ChangeKind::Write => EventType::Write,
        ChangeKind::Remove => EventType::Remove,
        ChangeKind::Rename => EventType::Rename,
        ChangeKind::Chmod => EventType::Chmod,
    };
    FilesystemEvent {
        name: change.name.to_string_lossy().into_owned(),
        r#type: r#type as i32,
        entry,
    }
}

/// `POST /filesystem.Filesystem/WatchDir`: a `start` event once the watch
/// is in place, then the events, a `keepalive` when idle at the interval
/// the client asks; ends at the call's deadline (`deadline_exceeded`), when
/// the client goes away, or when the server stops (`unavailable`).
pub(crate) async fn watch_dir(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(codec) = connect::codec_of(&headers, true) else {
        return bad_content_type();
    };
    let deadline = connect::deadline_of(&headers, Instant::now());
    let request: WatchDirRequest = match one_message(codec, "filesystem.WatchDirRequest", &body) {
        Ok(r) => r,
        Err(e) => return connect::stream_error(codec, &e),
    };
    let (opened, seat) = match open(
        &state,
        &caller,
        &request.path,
        request.recursive,
        request.include_entry,
    )
    .await
    {
        Ok(o) => o,
        Err(e) => return connect::stream_error(codec, &e),
    };
    let (out, response) = connect::stream_reply(codec, "filesystem.WatchDirResponse");
    let keepalive = keepalive_of(&headers);
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        let ending = stream_events(&out, opened, deadline, keepalive, shutdown).await;
        if let Some(error) = ending {
            out.end(error).await;
        }
        drop(seat);
    });
    response
}

/// Streams `opened`'s events to `out`: `None` when the client went away,
/// else how the stream ends.
async fn stream_events(
    out: &StreamOut,
    mut opened: Opened,
    deadline: Option<Instant>,
    keepalive: Option<Duration>,
    shutdown: CancellationToken,
) -> Option<Option<ConnectError>> {
    let wrap = |event| WatchDirResponse { event: Some(event) };
    let start = watch_dir_response::Event::Start(watch_dir_response::StartEvent {});
    if !out.send(&wrap(start)).await {
        return None;
    }
    let deadline_passed = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline_passed);
    let period = keepalive.unwrap_or(Duration::from_secs(u64::from(u32::MAX)));
    let mut ticker = tokio::time::interval_at((Instant::now() + period).into(), period);
    let mut lost = 0;
    loop {
        tokio::select! {
            got = opened.next() => {
                let events = match got {
                    Ok(events) => events,
                    Err(e) => return Some(Some(e)),
                };
                for event in events {
                    if !out.send(&wrap(watch_dir_response::Event::Filesystem(event))).await {
                        return None;
                    }
                }
                ticker.reset();
                if opened.lost() > lost {
                    lost = opened.lost();
                    tracing::warn!(dir = %opened.rel, overflows = lost, "a WatchDir stream lost events: the kernel's queue overflowed");
                }
            }
            _ = ticker.tick(), if keepalive.is_some() => {
                let ping = watch_dir_response::Event::Keepalive(watch_dir_response::KeepAlive {});
                if !out.send(&wrap(ping)).await {
                    return None;
                }
            }
            () = &mut deadline_passed => {
                return Some(Some(ConnectError::new(
                    Code::DeadlineExceeded,
                    "the watch's deadline passed",
                )));
            }
            () = out.closed() => return None,
            () = shutdown.cancelled() => {
                return Some(Some(ConnectError::new(
                    Code::Unavailable,
                    "the server is stopping; the watch ended",
                )));
            }
        }
    }
}

/// `POST /filesystem.Filesystem/CreateWatcher`: a watcher whose events
/// `GetWatcherEvents` collects.
pub(crate) async fn create_watcher(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "filesystem.CreateWatcherRequest",
        "filesystem.CreateWatcherResponse",
        |r: CreateWatcherRequest| async move {
            let (mut opened, seat) =
                open(&state, &caller, &r.path, r.recursive, r.include_entry).await?;
            let polled = Arc::new(Polled::new(
                caller.clone(),
                state.shutdown.child_token(),
                seat,
            ));
            let id = state.watchers.insert(Arc::clone(&polled));
            let table = state.watchers.clone();
            let watcher_id = id.clone();
            tokio::spawn(async move {
                let ended = polled.ended.clone().drop_guard();
                let mut lost = 0;
                loop {
                    tokio::select! {
                        () = polled.stop.cancelled() => break,
                        got = opened.next() => match got {
                            Ok(events) => {
                                let now_lost = opened.lost();
                                polled.push(events, now_lost.saturating_sub(lost));
                                lost = now_lost;
                            }
                            Err(e) => {
                                polled.fail(e);
                                break;
                            }
                        },
                    }
                }
                // A failed watch stays until polled (its error) or removed.
                if polled.stop.is_cancelled() {
                    table.forget(&id);
                }
                drop((opened, polled));
                drop(ended);
            });
            Ok(CreateWatcherResponse { watcher_id })
        },
    )
    .await
}

/// `POST /filesystem.Filesystem/GetWatcherEvents`: the events since the
/// previous call (or the error that ended the watch).
pub(crate) async fn get_watcher_events(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let dropped = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&dropped);
    let mut response = super::unary(
        &headers,
        &body,
        "filesystem.GetWatcherEventsRequest",
        "filesystem.GetWatcherEventsResponse",
        |r: GetWatcherEventsRequest| async move {
            let polled = state.watchers.get(&caller, &r.watcher_id)?;
            let (events, dropped) = polled.drain()?;
            if dropped > 0 {
                tracing::warn!(watcher = %r.watcher_id, dropped, "a polled watcher dropped events between two polls");
            }
            counted.store(dropped, Ordering::Relaxed);
            Ok(GetWatcherEventsResponse { events })
        },
    )
    .await;
    let dropped = dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        response
            .headers_mut()
            .insert(DROPPED_HEADER, HeaderValue::from(dropped));
    }
    response
}

/// `POST /filesystem.Filesystem/RemoveWatcher`: answers once the watch
/// has ended and its seat is free.
pub(crate) async fn remove_watcher(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "filesystem.RemoveWatcherRequest",
        "filesystem.RemoveWatcherResponse",
        |r: RemoveWatcherRequest| async move {
            let polled = state.watchers.take(&caller, &r.watcher_id)?;
            polled.stop.cancel();
            let ended = polled.ended.clone();
            drop(polled);
            // The watch and its seat are given back before the reply, so a
            // caller at its cap may watch again at once.
            ended.cancelled().await;
            Ok(RemoveWatcherResponse {})
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::path::PathBuf;

    use super::*;

    fn caller(last: u8) -> Caller {
        Caller::remote("envd", IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)), None)
    }

    #[test]
    fn a_caller_holds_at_most_the_cap_and_a_seat_given_back_frees_one() {
        let table = WatchTable::default();
        let seats: Vec<SeatGuard> = (0..MAX_WATCHERS_PER_CALLER)
            .map(|_| table.seat(&caller(1)).unwrap())
            .collect();
        assert_eq!(
            table.seat(&caller(1)).unwrap_err().code,
            Code::ResourceExhausted
        );
        assert!(
            table.seat(&caller(2)).is_ok(),
            "another caller has its own cap"
        );
        drop(seats);
        assert_eq!(table.held_by(&caller(1)), 0);
        assert!(table.seat(&caller(1)).is_ok());
    }

    #[test]
    fn a_polled_watcher_keeps_the_cap_and_counts_what_it_dropped() {
        let table = WatchTable::default();
        let polled = Polled::new(
            caller(1),
            CancellationToken::new(),
            table.seat(&caller(1)).unwrap(),
        );
        let change = Change {
            name: PathBuf::from("f"),
            kind: ChangeKind::Write,
        };
        let many = vec![event(&change, None); MAX_QUEUED_EVENTS + 5];
        polled.push(many, 2);
        let (events, dropped) = polled.drain().unwrap();
        assert_eq!(events.len(), MAX_QUEUED_EVENTS);
        assert_eq!(dropped, 7);
        assert_eq!(polled.drain().unwrap(), (Vec::new(), 0));
    }

    #[test]
    fn a_watcher_is_found_only_by_its_own_caller() {
        let table = WatchTable::default();
        let polled = Arc::new(Polled::new(
            caller(1),
            CancellationToken::new(),
            table.seat(&caller(1)).unwrap(),
        ));
        let id = table.insert(polled);
        assert!(table.get(&caller(1), &id).is_ok());
        assert_eq!(table.get(&caller(2), &id).unwrap_err().code, Code::NotFound);
        assert_eq!(
            table.take(&caller(2), &id).unwrap_err().code,
            Code::NotFound
        );
        assert!(table.take(&caller(1), &id).is_ok());
        assert_eq!(table.get(&caller(1), &id).unwrap_err().code, Code::NotFound);
    }
}
