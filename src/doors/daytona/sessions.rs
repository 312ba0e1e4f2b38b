//! Daytona's sessions: a named, long-lived shell whose state (the working
//! directory, exported variables) carries from one command to the next.
//! Each is one `bash` started by the broker and seated in its one session
//! table under its caller (`--max-sessions`, `--max-sessions-per-client`
//! count it; the server's stop kills it); here it is known by its name, for
//! its caller only (another caller's session reads as 404).
//!
//! A command is written to the shell's stdin as `{ CMD\n}` followed by a
//! marker printed on stdout (with `$?`) and on stderr; the owner task reads
//! the output tap, hands each stream's bytes to the running command until
//! its marker, and then takes the next. Commands of one session run one
//! after another, as in Daytona's daemon; `runAsync` only answers at once
//! (202, `{cmdId}`). A running command reads the session's stdin, which
//! `…/input` writes to. `…/logs?follow=true` is a WebSocket of the output
//! as it comes (Daytona's stream prefixes). Logs are kept per command up to
//! [`MAX_LOG_BYTES`] per stream. Deleting a session kills its whole tree.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{ApiError, DaytonaState};
use crate::broker::scratch::nonce;
use crate::broker::{BrokerError, Live};
use crate::exec::state::StreamKind;
use crate::exec::{Attach, TapReceiver};
use crate::gate::Caller;
use crate::plan::Request;

/// The most bytes of each stream kept for one command.
pub(crate) const MAX_LOG_BYTES: usize = 16 * 1024 * 1024;

/// One command of a session.
#[derive(Debug)]
pub(crate) struct CommandRec {
    id: String,
    command: String,
    logs: Mutex<Logs>,
    /// `Some(code)` once it is over.
    done: watch::Sender<Option<i32>>,
    /// Bumped at each output, for the log followers.
    tick: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Logs {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    output: Vec<u8>,
    /// Each piece kept, in the order it came: its stream and length.
    order: Vec<(StreamKind, usize)>,
}

impl CommandRec {
    fn push(&self, kind: StreamKind, bytes: &[u8]) {
        let mut logs = crate::sync::lock(&self.logs);
        let stream = match kind {
            StreamKind::Stdout => &mut logs.stdout,
            StreamKind::Stderr => &mut logs.stderr,
        };
        let room = MAX_LOG_BYTES.saturating_sub(stream.len());
        let kept = &bytes[..bytes.len().min(room)];
        stream.extend_from_slice(kept);
        logs.output.extend_from_slice(kept);
        if !kept.is_empty() {
            logs.order.push((kind, kept.len()));
            drop(logs);
            self.tick.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// The pieces kept after the first `from` of them, each with its stream.
    fn pieces_from(&self, from: usize) -> Vec<(StreamKind, Vec<u8>)> {
        let logs = crate::sync::lock(&self.logs);
        let (mut out_at, mut err_at) = (0, 0);
        let mut pieces = Vec::new();
        for (n, (kind, len)) in logs.order.iter().enumerate() {
            let (stream, at) = match kind {
                StreamKind::Stdout => (&logs.stdout, &mut out_at),
                StreamKind::Stderr => (&logs.stderr, &mut err_at),
            };
            if n >= from {
                pieces.push((*kind, stream[*at..*at + len].to_vec()));
            }
            *at += len;
        }
        pieces
    }

    fn exit_code(&self) -> Option<i32> {
        *self.done.borrow()
    }

    fn logs(&self) -> Value {
        let logs = crate::sync::lock(&self.logs);
        json!({
            "output": String::from_utf8_lossy(&logs.output),
            "stdout": String::from_utf8_lossy(&logs.stdout),
            "stderr": String::from_utf8_lossy(&logs.stderr),
        })
    }

    fn info(&self) -> Value {
        json!({"id": self.id, "command": self.command, "exitCode": self.exit_code()})
    }
}

/// One session: its shell, its commands, and the one running now.
#[derive(Debug)]
pub(crate) struct Session {
    name: String,
    caller: Caller,
    live: Live,
    nonce: String,
    commands: Mutex<Vec<Arc<CommandRec>>>,
    current: Mutex<Option<Arc<CommandRec>>>,
    /// Held while a command runs: commands take turns.
    turn: tokio::sync::Mutex<()>,
}

/// The door's sessions by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionTable {
    inner: Arc<Mutex<BTreeMap<String, Arc<Session>>>>,
}

impl SessionTable {
    fn find(&self, caller: &Caller, name: &str) -> Result<Arc<Session>, ApiError> {
        crate::sync::lock(&self.inner)
            .get(name)
            .filter(|s| &s.caller == caller)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("session {name} not found")))
    }
}

/// The marker ending a command's output on each stream.
fn marker(nonce: &str) -> Vec<u8> {
    format!("\x1e__AR_END_{nonce}__").into_bytes()
}

/// What is written to the shell for `command`.
fn script(nonce: &str, command: &str) -> String {
    format!(
        "{{ {command}\n}} ; __ar_rc=$?; printf '\\036__AR_END_{nonce}__%d\\n' \"$__ar_rc\"; printf '\\036__AR_END_{nonce}__\\n' >&2\n"
    )
}

/// One stream's bytes not yet handed on, and whether its marker was seen.
#[derive(Debug, Default)]
struct Splitter {
    pending: Vec<u8>,
    ended: bool,
    code: Option<i32>,
}

impl Splitter {
    /// Takes `bytes`; returns what belongs to the running command. After
    /// the marker (and, on stdout, its code and newline), `ended` is set.
    fn feed(&mut self, marker: &[u8], bytes: &[u8], with_code: bool) -> Vec<u8> {
        self.pending.extend_from_slice(bytes);
        if let Some(at) = find(&self.pending, marker) {
            let tail = &self.pending[at + marker.len()..];
            let Some(nl) = tail.iter().position(|b| *b == b'\n') else {
                return self.pending.drain(..at).collect();
            };
            if with_code {
                self.code = std::str::from_utf8(&tail[..nl])
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
            }
            let out: Vec<u8> = self.pending[..at].to_vec();
            let rest = at + marker.len() + nl + 1;
            self.pending.drain(..rest);
            self.ended = true;
            return out;
        }
        // Hold back a tail that could be the marker's beginning.
        let keep = (1..marker.len().min(self.pending.len()) + 1)
            .rev()
            .find(|n| marker.starts_with(&self.pending[self.pending.len() - n..]))
            .unwrap_or(0);
        let cut = self.pending.len() - keep;
        self.pending.drain(..cut).collect()
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// Reads the session's output tap and hands it to its running command.
async fn own(session: Arc<Session>, mut tap: TapReceiver) {
    let marker = marker(&session.nonce);
    let mut out = Splitter::default();
    let mut err = Splitter::default();
    while let Some(chunk) = tap.recv().await {
        let current = crate::sync::lock(&session.current).clone();
        let Some(command) = current else { continue };
        let (splitter, with_code) = match chunk.kind {
            StreamKind::Stdout => (&mut out, true),
            StreamKind::Stderr => (&mut err, false),
        };
        let bytes = splitter.feed(&marker, &chunk.bytes, with_code);
        command.push(chunk.kind, &bytes);
        if out.ended && err.ended {
            let code = out.code.unwrap_or(-1);
            *crate::sync::lock(&session.current) = None;
            command.done.send_replace(Some(code));
            out = Splitter::default();
            err = Splitter::default();
        }
    }
    // The shell is gone: the running command ends with it.
    if let Some(command) = crate::sync::lock(&session.current).take() {
        let code = session
            .live
            .exec
            .exit_info()
            .and_then(|e| e.code)
            .unwrap_or(-1);
        command.done.send_replace(Some(code));
    }
}

/// The body of `POST /process/session`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateRequest {
    session_id: String,
}

pub(crate) fn broker_error(err: &BrokerError) -> ApiError {
    match err {
        BrokerError::Refused(r) => ApiError::forbidden(r.message.clone()),
        BrokerError::Full(full) => ApiError::new(StatusCode::TOO_MANY_REQUESTS, full.to_string()),
        BrokerError::Start(e) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        BrokerError::Busy(busy) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, busy.to_string()),
    }
}

/// `POST .../process/session {sessionId}`: 201.
pub(crate) async fn create(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<CreateRequest>,
) -> Result<StatusCode, ApiError> {
    let name = body.session_id;
    if name.is_empty() {
        return Err(ApiError::bad_request("sessionId is required"));
    }
    if crate::sync::lock(&state.sessions.inner).contains_key(&name) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("session {name} already exists"),
        ));
    }
    let mut request = Request::command(vec![
        OsString::from(super::process::shell()),
        OsString::from("-s"),
    ]);
    request.session = true;
    request.tty = Some(false);
    request.timeout_ms = Some(0);
    let (tap, receiver) =
        crate::exec::output_tap(crate::exec::DEFAULT_TAP_CHUNKS).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot open the output stream: {e}"),
            )
        })?;
    let attach = Attach {
        tap: Some(tap),
        stdin_pipe: true,
        pty_size: None,
    };
    let live = state
        .broker
        .start_counted(
            &caller,
            &request,
            &format!("daytona session {name}"),
            Some(attach),
        )
        .await
        .map_err(|e| broker_error(&e))?;
    let session = Arc::new(Session {
        name: name.clone(),
        caller,
        live,
        nonce: nonce(),
        commands: Mutex::new(Vec::new()),
        current: Mutex::new(None),
        turn: tokio::sync::Mutex::new(()),
    });
    crate::sync::lock(&state.sessions.inner).insert(name, Arc::clone(&session));
    tokio::spawn(own(session, receiver));
    Ok(StatusCode::CREATED)
}

fn session_json(session: &Session) -> Value {
    let commands: Vec<Value> = crate::sync::lock(&session.commands)
        .iter()
        .map(|c| c.info())
        .collect();
    json!({"sessionId": session.name, "commands": commands})
}

/// `GET .../process/session`: the caller's sessions.
pub(crate) async fn list(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
) -> Json<Vec<Value>> {
    let sessions: Vec<Arc<Session>> = crate::sync::lock(&state.sessions.inner)
        .values()
        .filter(|s| s.caller == caller)
        .cloned()
        .collect();
    Json(sessions.iter().map(|s| session_json(s)).collect())
}

/// `GET .../process/session/{session}`.
pub(crate) async fn get(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let session = state.sessions.find(&caller, &name)?;
    Ok(Json(session_json(&session)))
}

/// `DELETE .../process/session/{session}`: its whole tree killed; 204.
pub(crate) async fn delete(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let session = state.sessions.find(&caller, &name)?;
    crate::sync::lock(&state.sessions.inner).remove(&name);
    let report = session.live.exec.terminate().await;
    if !report.survivors.is_empty() {
        tracing::warn!(session = %name, survivors = ?report.survivors, "a daytona session left survivors");
    }
    Ok(StatusCode::NO_CONTENT)
}

/// The body of `…/exec`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ExecRequest {
    command: String,
    #[serde(default)]
    run_async: Option<bool>,
    #[serde(default, rename = "async")]
    legacy_async: Option<bool>,
}

/// `POST .../process/session/{session}/exec`: 200 with the output when
/// the command ends, or 202 with its id at once (`runAsync`).
pub(crate) async fn exec(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Json(body): Json<ExecRequest>,
) -> Result<Response, ApiError> {
    let session = state.sessions.find(&caller, &name)?;
    if body.command.trim().is_empty() {
        return Err(ApiError::bad_request("command is required"));
    }
    let (done, mut finished) = watch::channel(None);
    let command = Arc::new(CommandRec {
        id: format!("cmd-{}", nonce()),
        command: body.command.clone(),
        logs: Mutex::new(Logs::default()),
        done,
        tick: watch::channel(0).0,
    });
    crate::sync::lock(&session.commands).push(Arc::clone(&command));
    let runner = {
        let session = Arc::clone(&session);
        let command = Arc::clone(&command);
        async move {
            let _turn = session.turn.lock().await;
            *crate::sync::lock(&session.current) = Some(Arc::clone(&command));
            let text = script(&session.nonce, &command.command);
            let exec = session.live.exec.clone();
            let written =
                tokio::task::spawn_blocking(move || exec.write_stdin(text.as_bytes())).await;
            if !matches!(written, Ok(Ok(()))) {
                *crate::sync::lock(&session.current) = None;
                command.done.send_replace(Some(-1));
                return;
            }
            let mut finished = command.done.subscribe();
            let _ = finished.wait_for(Option::is_some).await;
        }
    };
    tokio::spawn(runner);
    if body.run_async.or(body.legacy_async).unwrap_or(false) {
        return Ok((StatusCode::ACCEPTED, Json(json!({"cmdId": command.id}))).into_response());
    }
    let code = tokio::select! {
        got = finished.wait_for(Option::is_some) => got.ok().and_then(|c| *c),
        () = state.shutdown.cancelled() => None,
    };
    let mut answer = command.logs();
    answer["cmdId"] = json!(command.id);
    answer["exitCode"] = json!(code);
    Ok(Json(answer).into_response())
}

fn command_of(session: &Session, id: &str) -> Result<Arc<CommandRec>, ApiError> {
    crate::sync::lock(&session.commands)
        .iter()
        .find(|c| c.id == id)
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("command {id} not found")))
}

/// `GET .../process/session/{session}/command/{command}`.
pub(crate) async fn command(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let session = state.sessions.find(&caller, &name)?;
    Ok(Json(command_of(&session, &id)?.info()))
}

/// The query of `…/logs`.
#[derive(Debug, Deserialize)]
pub(crate) struct LogsQuery {
    follow: Option<bool>,
}

/// `GET .../command/{command}/logs`: `{output, stdout, stderr}` so far;
/// with `follow=true`, a WebSocket of the output from the start, each
/// piece a frame prefixed by its stream's [`STDOUT_PREFIX`] or
/// [`STDERR_PREFIX`], closed with 1000 once the command is over.
pub(crate) async fn logs(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path((name, id)): Path<(String, String)>,
    Query(query): Query<LogsQuery>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let session = state.sessions.find(&caller, &name)?;
    let command = command_of(&session, &id)?;
    if query.follow != Some(true) {
        return Ok(Json(command.logs()).into_response());
    }
    let upgrade = upgrade.map_err(|e| {
        ApiError::bad_request(format!("follow=true needs a WebSocket request: {e}"))
    })?;
    let shutdown = state.shutdown.clone();
    Ok(upgrade.on_upgrade(move |socket| follow(socket, command, shutdown)))
}

/// The prefix of a stdout frame of a followed log (Daytona's).
pub(crate) const STDOUT_PREFIX: &[u8] = b"\x01\x01\x01";
/// The prefix of a stderr frame.
pub(crate) const STDERR_PREFIX: &[u8] = b"\x02\x02\x02";

/// Sends `command`'s output on `socket` as it comes, then closes it.
async fn follow(mut socket: WebSocket, command: Arc<CommandRec>, shutdown: CancellationToken) {
    let mut sent = 0;
    let mut ticks = command.tick.subscribe();
    let mut done = command.done.subscribe();
    loop {
        // Read `over` before the pieces: what came before the end is sent.
        let over = done.borrow_and_update().is_some();
        ticks.borrow_and_update();
        let pieces = command.pieces_from(sent);
        sent += pieces.len();
        for (kind, bytes) in pieces {
            let mut frame = match kind {
                StreamKind::Stdout => STDOUT_PREFIX.to_vec(),
                StreamKind::Stderr => STDERR_PREFIX.to_vec(),
            };
            frame.extend_from_slice(&bytes);
            let message = match String::from_utf8(frame) {
                Ok(text) => Message::Text(text.into()),
                Err(e) => Message::Binary(e.into_bytes().into()),
            };
            if socket.send(message).await.is_err() {
                return;
            }
        }
        if over {
            break;
        }
        tokio::select! {
            _ = ticks.changed() => {}
            _ = done.changed() => {}
            () = shutdown.cancelled() => break,
            incoming = socket.recv() => match incoming {
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
    let close = CloseFrame {
        code: close_code::NORMAL,
        reason: "".into(),
    };
    let _ = socket.send(Message::Close(Some(close))).await;
}

/// The body of `…/input`.
#[derive(Debug, Deserialize)]
pub(crate) struct InputRequest {
    data: String,
}

/// `POST .../command/{command}/input`: to the running command's stdin; 204.
pub(crate) async fn input(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path((name, id)): Path<(String, String)>,
    Json(body): Json<InputRequest>,
) -> Result<StatusCode, ApiError> {
    let session = state.sessions.find(&caller, &name)?;
    let command = command_of(&session, &id)?;
    let running = crate::sync::lock(&session.current)
        .as_ref()
        .is_some_and(|c| c.id == command.id);
    if !running {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("command {id} is not running"),
        ));
    }
    let exec = session.live.exec.clone();
    tokio::task::spawn_blocking(move || exec.write_stdin(body.data.as_bytes()))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, e.to_string()))?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_split_at_the_marker_and_the_code_read() {
        let m = marker("n1");
        let mut s = Splitter::default();
        assert_eq!(s.feed(&m, b"hello\n", true), b"hello\n");
        let mut tail = b"no newline".to_vec();
        tail.extend_from_slice(&m[..4]);
        assert_eq!(s.feed(&m, &tail, true), b"no newline");
        let mut rest = m[4..].to_vec();
        rest.extend_from_slice(b"3\n");
        assert_eq!(s.feed(&m, &rest, true), b"");
        assert!(s.ended);
        assert_eq!(s.code, Some(3));
    }

    #[test]
    fn the_script_runs_the_command_in_the_shell_itself() {
        let text = script("n1", "cd /tmp");
        assert!(text.starts_with("{ cd /tmp\n}"), "{text}");
        assert!(text.ends_with(">&2\n"));
    }
}
