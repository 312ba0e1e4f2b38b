//! Daytona's PTY sessions: a terminal shell started by the broker on a PTY
//! and seated in its one session table under its caller, reached over a
//! WebSocket as Daytona's SDK reaches it:
//!
//! - `GET .../process/pty/create-connect?id=&cols=&rows=[&cwd=]` (a
//!   WebSocket) starts it and connects at once; its variables arrive as the
//!   subprotocol `X-Daytona-Pty-Envs~<base64url of a JSON object>`. The
//!   server first sends the text frame `{"type":"control","status":"connected"}`,
//!   then the terminal's output as binary frames; the client's frames are
//!   the terminal's input. When the shell ends: `{"type":"control",
//!   "status":"exited","exitCode":N}`, then a close 1000 whose reason is
//!   `{"exitCode":N}`.
//! - `POST .../process/pty` starts one without connecting; `GET
//!   .../process/pty/{id}/connect` connects to a running one (the newest
//!   connection gets the output; with none, output is dropped, as in
//!   Daytona); `POST .../{id}/resize {cols, rows}`, `DELETE .../{id}` (the
//!   whole tree killed), `GET .../process/pty` and `GET .../{id}`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex};

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::process::{env_of, shell, workdir};
use super::{ApiError, DaytonaState};
use crate::broker::Live;
use crate::exec::{Attach, TapReceiver};
use crate::gate::Caller;
use crate::plan::Request;

/// The subprotocol the SDK offers for exit reporting; chosen when offered.
const EXIT_CONTROL_PROTOCOL: &str = "X-Daytona-Pty-Exit-Control";
/// The prefix of the subprotocol carrying the variables.
const ENVS_PROTOCOL_PREFIX: &str = "X-Daytona-Pty-Envs~";
/// The terminal size when none is asked (the SDK's default).
const DEFAULT_SIZE: (u16, u16) = (80, 24);
/// The largest side of a terminal (the SDK's bound).
const MAX_SIDE: u16 = 1000;
/// Output chunks queued for a connection before the owner waits for it.
const OUTPUT_QUEUE: usize = 16;

/// What the owner of a PTY tells its connection.
#[derive(Debug)]
enum PtyOut {
    Data(Vec<u8>),
    Exited(i32),
}

/// One PTY session.
#[derive(Debug)]
pub(crate) struct Pty {
    id: String,
    caller: Caller,
    live: Live,
    cwd: String,
    envs: BTreeMap<String, String>,
    size: Mutex<(u16, u16)>,
    created_at: String,
    /// The connection that gets the output now.
    attached: Mutex<Option<mpsc::Sender<PtyOut>>>,
}

impl Pty {
    fn info(&self) -> Value {
        let (cols, rows) = *crate::sync::lock(&self.size);
        json!({
            "id": self.id,
            "active": self.live.exec.exit_info().is_none(),
            "cols": cols,
            "rows": rows,
            "cwd": self.cwd,
            "envs": self.envs,
            "createdAt": self.created_at,
            "lazyStart": false,
        })
    }
}

/// The door's PTYs by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct PtyTable {
    inner: Arc<Mutex<BTreeMap<String, Arc<Pty>>>>,
}

impl PtyTable {
    fn find(&self, caller: &Caller, id: &str) -> Result<Arc<Pty>, ApiError> {
        crate::sync::lock(&self.inner)
            .get(id)
            .filter(|p| &p.caller == caller)
            .cloned()
            .ok_or_else(|| ApiError::not_found(format!("PTY session {id} not found")))
    }
}

/// The value of one base64url digit (either alphabet; no padding).
fn digit(c: u8) -> Option<u32> {
    Some(u32::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'-' | b'+' => 62,
        b'_' | b'/' => 63,
        _ => return None,
    }))
}

/// `text` decoded from base64url (padding optional).
fn base64url(text: &str) -> Option<Vec<u8>> {
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in bytes {
        acc = (acc << 6) | digit(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).ok()?);
        }
    }
    Some(out)
}

/// The variables the client sent as a subprotocol, if any.
fn envs_of(headers: &HeaderMap) -> Result<BTreeMap<String, String>, ApiError> {
    let offered = headers
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim);
    for protocol in offered {
        if let Some(encoded) = protocol.strip_prefix(ENVS_PROTOCOL_PREFIX) {
            let json = base64url(encoded)
                .ok_or_else(|| ApiError::bad_request("the PTY's variables are not base64url"))?;
            return serde_json::from_slice(&json).map_err(|e| {
                ApiError::bad_request(format!("the PTY's variables are not a JSON object: {e}"))
            });
        }
    }
    Ok(BTreeMap::new())
}

fn side(value: Option<u16>, default: u16) -> u16 {
    value.filter(|v| *v > 0).unwrap_or(default).min(MAX_SIDE)
}

/// What starting a PTY needs.
struct Spec {
    id: String,
    cols: Option<u16>,
    rows: Option<u16>,
    cwd: Option<String>,
    envs: BTreeMap<String, String>,
}

/// Starts the PTY `spec` for `caller` and its owner task.
async fn start(state: &DaytonaState, caller: &Caller, spec: Spec) -> Result<Arc<Pty>, ApiError> {
    if spec.id.is_empty() {
        return Err(ApiError::bad_request("id is required"));
    }
    if crate::sync::lock(&state.ptys.inner).contains_key(&spec.id) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("PTY session {} already exists", spec.id),
        ));
    }
    let size = (
        side(spec.cols, DEFAULT_SIZE.0),
        side(spec.rows, DEFAULT_SIZE.1),
    );
    let dir = workdir(&state.broker, spec.cwd.as_deref())?;
    let cwd = dir
        .clone()
        .unwrap_or_else(|| state.broker.root().to_path_buf())
        .to_string_lossy()
        .into_owned();
    let mut request = Request::command(vec![OsString::from(shell())]);
    request.workdir = dir;
    request.env = env_of(Some(spec.envs.clone()))?;
    request.env.push(("TERM".into(), "xterm-256color".into()));
    request.tty = Some(true);
    request.session = true;
    request.timeout_ms = Some(0);
    let (tap, receiver) =
        crate::exec::output_tap(crate::exec::DEFAULT_TAP_CHUNKS).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot open the terminal's output: {e}"),
            )
        })?;
    let attach = Attach {
        tap: Some(tap),
        stdin_pipe: false,
        pty_size: Some(size),
    };
    let live = state
        .broker
        .start_counted(
            caller,
            &request,
            &format!("daytona pty {}", spec.id),
            Some(attach),
        )
        .await
        .map_err(|e| super::sessions::broker_error(&e))?;
    let pty = Arc::new(Pty {
        id: spec.id.clone(),
        caller: caller.clone(),
        live,
        cwd,
        envs: spec.envs,
        size: Mutex::new(size),
        created_at: chrono::Utc::now().to_rfc3339(),
        attached: Mutex::new(None),
    });
    crate::sync::lock(&state.ptys.inner).insert(spec.id, Arc::clone(&pty));
    tokio::spawn(own(state.ptys.clone(), Arc::clone(&pty), receiver));
    Ok(pty)
}

/// Hands the terminal's output to the attached connection until the shell
/// ends, then tells it the exit code and takes the PTY out of the table.
async fn own(table: PtyTable, pty: Arc<Pty>, mut tap: TapReceiver) {
    while let Some(chunk) = tap.recv().await {
        let attached = crate::sync::lock(&pty.attached).clone();
        if let Some(out) = attached
            && out.send(PtyOut::Data(chunk.bytes)).await.is_err()
        {
            let mut slot = crate::sync::lock(&pty.attached);
            if slot.as_ref().is_some_and(|s| s.same_channel(&out)) {
                *slot = None;
            }
        }
    }
    pty.live.exec.settle().await;
    let code = pty
        .live
        .exec
        .exit_info()
        .map_or(-1, |e| e.code.unwrap_or(-1));
    {
        let mut inner = crate::sync::lock(&table.inner);
        if inner.get(&pty.id).is_some_and(|p| Arc::ptr_eq(p, &pty)) {
            inner.remove(&pty.id);
        }
    }
    let attached = crate::sync::lock(&pty.attached).take();
    if let Some(out) = attached {
        let _ = out.send(PtyOut::Exited(code)).await;
    }
}

/// Serves one connection to `pty` on `socket`.
async fn connection(mut socket: WebSocket, pty: Arc<Pty>) {
    let (tx, mut rx) = mpsc::channel(OUTPUT_QUEUE);
    *crate::sync::lock(&pty.attached) = Some(tx);
    let connected = json!({"type": "control", "status": "connected"}).to_string();
    if socket.send(Message::Text(connected.into())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(PtyOut::Data(bytes)) => {
                    if socket.send(Message::Binary(bytes.into())).await.is_err() {
                        return;
                    }
                }
                Some(PtyOut::Exited(code)) => {
                    let exited = json!({"type": "control", "status": "exited", "exitCode": code});
                    let _ = socket.send(Message::Text(exited.to_string().into())).await;
                    let close = CloseFrame {
                        code: close_code::NORMAL,
                        reason: json!({"exitCode": code}).to_string().into(),
                    };
                    let _ = socket.send(Message::Close(Some(close))).await;
                    return;
                }
                None => return,
            },
            incoming = socket.recv() => {
                let input = match incoming {
                    Some(Ok(Message::Binary(bytes))) => bytes.to_vec(),
                    Some(Ok(Message::Text(text))) => text.as_bytes().to_vec(),
                    Some(Ok(_)) => continue,
                    // The client went away: the PTY lives on, as in Daytona.
                    Some(Err(_)) | None => return,
                };
                let exec = pty.live.exec.clone();
                let written = tokio::task::spawn_blocking(move || exec.write_stdin(&input)).await;
                if !matches!(written, Ok(Ok(()))) {
                    tracing::debug!(pty = %pty.id, "input to an ended PTY dropped");
                }
            }
        }
    }
}

/// The query of `create-connect`.
#[derive(Debug, Deserialize)]
pub(crate) struct CreateConnectQuery {
    id: Option<String>,
    cols: Option<u16>,
    rows: Option<u16>,
    cwd: Option<String>,
}

/// `GET .../process/pty/create-connect`: start and connect (a WebSocket).
pub(crate) async fn create_connect(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<CreateConnectQuery>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade
        .map_err(|e| ApiError::bad_request(format!("create-connect is a WebSocket: {e}")))?;
    let spec = Spec {
        id: query.id.unwrap_or_default(),
        cols: query.cols,
        rows: query.rows,
        cwd: query.cwd,
        envs: envs_of(&headers)?,
    };
    let pty = start(&state, &caller, spec).await?;
    Ok(upgrade
        .protocols([EXIT_CONTROL_PROTOCOL])
        .on_upgrade(move |socket| connection(socket, pty)))
}

/// `GET .../process/pty/{id}/connect`: connect to a running one.
pub(crate) async fn connect(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade =
        upgrade.map_err(|e| ApiError::bad_request(format!("connect is a WebSocket: {e}")))?;
    let pty = state.ptys.find(&caller, &id)?;
    Ok(upgrade
        .protocols([EXIT_CONTROL_PROTOCOL])
        .on_upgrade(move |socket| connection(socket, pty)))
}

/// The body of `POST .../process/pty`.
#[derive(Debug, Deserialize)]
pub(crate) struct CreateRequest {
    id: Option<String>,
    cols: Option<u16>,
    rows: Option<u16>,
    cwd: Option<String>,
    envs: Option<BTreeMap<String, String>>,
}

/// `POST .../process/pty`: 201 `{sessionId}`.
pub(crate) async fn create(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<CreateRequest>,
) -> Result<Response, ApiError> {
    let spec = Spec {
        id: body.id.unwrap_or_default(),
        cols: body.cols,
        rows: body.rows,
        cwd: body.cwd,
        envs: body.envs.unwrap_or_default(),
    };
    let pty = start(&state, &caller, spec).await?;
    Ok((StatusCode::CREATED, Json(json!({"sessionId": pty.id}))).into_response())
}

/// `GET .../process/pty`: the caller's PTYs.
pub(crate) async fn list(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
) -> Json<Value> {
    let ptys: Vec<Arc<Pty>> = crate::sync::lock(&state.ptys.inner)
        .values()
        .filter(|p| p.caller == caller)
        .cloned()
        .collect();
    Json(json!({"sessions": ptys.iter().map(|p| p.info()).collect::<Vec<_>>()}))
}

/// `GET .../process/pty/{id}`.
pub(crate) async fn get(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(state.ptys.find(&caller, &id)?.info()))
}

/// The body of `…/resize`.
#[derive(Debug, Deserialize)]
pub(crate) struct ResizeRequest {
    cols: u16,
    rows: u16,
}

/// `POST .../process/pty/{id}/resize`: the new size; the session's info.
pub(crate) async fn resize(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Json(body): Json<ResizeRequest>,
) -> Result<Json<Value>, ApiError> {
    let pty = state.ptys.find(&caller, &id)?;
    if body.cols == 0 || body.rows == 0 || body.cols > MAX_SIDE || body.rows > MAX_SIDE {
        return Err(ApiError::bad_request(format!(
            "cols and rows must be between 1 and {MAX_SIDE}"
        )));
    }
    pty.live
        .exec
        .resize(body.cols, body.rows)
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, e.to_string()))?;
    *crate::sync::lock(&pty.size) = (body.cols, body.rows);
    Ok(Json(pty.info()))
}

/// `DELETE .../process/pty/{id}`: the whole tree killed.
pub(crate) async fn kill(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let pty = state.ptys.find(&caller, &id)?;
    let report = pty.live.exec.terminate().await;
    if !report.survivors.is_empty() {
        tracing::warn!(pty = %id, survivors = ?report.survivors, "a daytona PTY left survivors");
    }
    Ok(Json(json!({"message": format!("PTY session {id} killed")})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_subprotocol_is_base64url_of_a_json_object() {
        // base64url('{"A": "1"}') without padding, as the SDK sends it.
        assert_eq!(base64url("eyJBIjogIjEifQ").unwrap(), br#"{"A": "1"}"#);
        let mut headers = HeaderMap::new();
        headers.insert(
            "sec-websocket-protocol",
            "X-Daytona-Pty-Exit-Control, X-Daytona-Pty-Envs~eyJBIjogIjEifQ"
                .parse()
                .unwrap(),
        );
        assert_eq!(envs_of(&headers).unwrap()["A"], "1");
        assert!(base64url("a*b").is_none());
    }

    #[test]
    fn a_terminal_side_is_the_default_when_zero_and_never_past_the_bound() {
        assert_eq!(side(None, 80), 80);
        assert_eq!(side(Some(0), 24), 24);
        assert_eq!(side(Some(5000), 24), MAX_SIDE);
    }
}
