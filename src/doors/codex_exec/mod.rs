//! `serve --listen codex-exec=ADDR` and `serve --stdio codex-exec`:
//! agent-reach as Codex's exec-server, so every command and file operation
//! of a Codex session (`CODEX_EXEC_SERVER_URL=ws://HOST:PORT`, or an
//! environment in `$CODEX_HOME/environments.toml` that starts
//! `agent-reach serve --stdio codex-exec --root DIR`) runs here, with
//! agent-reach's guarantees: whole-tree kill, the operator's policy and
//! sandbox, redaction, confinement to `--root`.
//!
//! The protocol is JSON-RPC without the `"jsonrpc"` field, one message per
//! WebSocket text frame (at `/`, behind the gate: `Authorization: Bearer`)
//! or per line on stdio; its messages are [`protocol`], pinned to the Codex
//! of [`CODEX_PACKAGE`] (the tests run that release: upgrading Codex is
//! this constant and what CI says about it). As in Codex's own server the
//! transports ([`serve`], [`serve_stdio`]), the method table
//! ([`connection`]) and the handlers ([`environment`], [`process`] with
//! [`procs`], [`fs`]) are apart. Served: `initialize`, `environment/info`,
//! `process/{start,read,write,signal,terminate}` with the `process/output`,
//! `process/exited` and `process/closed` notifications, and
//! `fs/{getMetadata,readFile,writeFile,createDirectory,readDirectory,remove}`.
//! Not served (`-32601`, and not advertised, so the pinned Codex does not
//! call them): `fs/watchMissing`, `environmentConfig/read`, `http/request`,
//! `fs/copy`, `fs/canonicalize`, the streamed file handles.

pub(crate) mod connection;
pub(crate) mod env;
pub(crate) mod environment;
pub(crate) mod fs;
pub(crate) mod process;
pub(crate) mod procs;
pub(crate) mod protocol;
pub(crate) mod sandbox;
pub(crate) mod uri;

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use axum::routing::get;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::doors::DoorContext;
use crate::gate::{Caller, DoorRules};
use crate::serve::transport::{ProtocolReader, ProtocolWriter};
use connection::{Connection, Outbox};

/// The Codex release whose exec-server protocol this door speaks; the
/// real-Codex tests (`tests/codex/run.sh`) download exactly this package.
pub(crate) const CODEX_PACKAGE: &str = "@openai/codex@0.171.0";
/// Its version, as `environmentInfo.executorVersion` reports it.
pub(crate) const CODEX_VERSION: &str = "0.171.0";

/// What the gate holds the door to: the defaults (a bearer token; a
/// WebSocket upgrade is a `GET` with no body).
pub(crate) const RULES: DoorRules = DoorRules::new("codex-exec");

/// What the WebSocket handler needs.
#[derive(Clone)]
pub(crate) struct CodexExecState {
    pub(crate) broker: Broker,
    pub(crate) shutdown: CancellationToken,
}

/// Serves the WebSocket at `/` on `listener` until `shared.shutdown`; an
/// upgraded connection lives while its client is connected.
pub(crate) async fn serve(listener: TcpListener, shared: DoorContext) -> Result<(), String> {
    let state = CodexExecState {
        broker: shared.broker.clone(),
        shutdown: shared.shutdown.clone(),
    };
    crate::doors::serve_door(listener, &shared, RULES, router(state)).await
}

/// The one route.
pub(crate) fn router(state: CodexExecState) -> Router {
    Router::new().route("/", get(upgrade)).with_state(state)
}

async fn upgrade(
    State(state): State<CodexExecState>,
    Extension(caller): Extension<Caller>,
    ws: WebSocketUpgrade,
) -> Response {
    ws.on_upgrade(move |socket| run_socket(state, caller, socket))
}

/// One WebSocket connection: text frames in, the outbox out, until either
/// side closes; then its processes are killed.
async fn run_socket(state: CodexExecState, caller: Caller, mut socket: WebSocket) {
    let (out, mut outgoing) = Outbox::new();
    let conn = Connection::new(state.broker, &caller, out, &state.shutdown);
    loop {
        tokio::select! {
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Text(text))) => conn.receive(text.as_str()),
                Some(Ok(Message::Binary(bytes))) => conn.receive(&String::from_utf8_lossy(&bytes)),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
            },
            Some(text) = outgoing.recv() => {
                if socket.send(Message::Text(text.into())).await.is_err() {
                    break;
                }
            }
            () = conn.ended.cancelled() => {
                let _ = socket.send(Message::Close(None)).await;
                break;
            }
        }
    }
    // Nothing more goes out: a handler or an owner waiting to send gives up.
    drop(outgoing);
    conn.end().await;
}

/// `serve --stdio codex-exec`: one message per line on `reader` and
/// `writer` until the client closes stdin or `shutdown`; then every
/// process is killed.
pub(crate) async fn serve_stdio(
    broker: Broker,
    (reader, mut writer): (ProtocolReader, ProtocolWriter),
    shutdown: &CancellationToken,
) {
    let (out, mut outgoing) = Outbox::new();
    let conn: Arc<Connection> =
        Connection::new(broker, &Caller::local("codex-exec"), out, shutdown);
    let ended = conn.ended.clone();
    let write = tokio::spawn(async move {
        loop {
            let text = tokio::select! {
                text = outgoing.recv() => text,
                () = ended.cancelled() => None,
            };
            let Some(mut text) = text else { break };
            text.push('\n');
            if writer.write_all(text.as_bytes()).await.is_err() || writer.flush().await.is_err() {
                break;
            }
        }
    });
    let mut lines = BufReader::new(reader).lines();
    loop {
        tokio::select! {
            line = lines.next_line() => match line {
                Ok(Some(line)) if line.trim().is_empty() => {}
                Ok(Some(line)) => conn.receive(&line),
                Ok(None) | Err(_) => break,
            },
            () = conn.ended.cancelled() => break,
        }
    }
    tracing::info!("codex-exec client closed stdin");
    conn.end().await;
    let _ = write.await;
}
