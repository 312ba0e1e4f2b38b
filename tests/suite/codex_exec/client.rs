//! The suite's client of the codex-exec door, as Codex is one: requests by
//! number, notifications kept aside until asked for, over a WebSocket or a
//! child's stdin and stdout. The matrix's codex-exec row uses it too.

use std::collections::VecDeque;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use super::LIMIT;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How the messages travel: a WebSocket, or a child's stdin and stdout.
pub(crate) enum Wire {
    Ws(Box<Ws>),
    Stdio {
        stdin: tokio::process::ChildStdin,
        stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    },
}

/// A client of the door, as Codex is: requests by number, notifications
/// kept aside until asked for.
pub(crate) struct Client {
    wire: Wire,
    next_id: u64,
    notes: VecDeque<Value>,
}

/// What a process told until it closed.
#[derive(Debug)]
pub(crate) struct Ran {
    pub(crate) output: String,
    pub(crate) exit_code: i64,
    pub(crate) events: Vec<Value>,
}

impl Client {
    /// A WebSocket to `addr`'s `/`, with `token` as a bearer token.
    pub(crate) async fn connect(
        addr: std::net::SocketAddr,
        token: Option<&str>,
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        Self::connect_with(addr, token, &[]).await
    }

    /// [`Client::connect`] with more headers on the upgrade request.
    pub(crate) async fn connect_with(
        addr: std::net::SocketAddr,
        token: Option<&str>,
        headers: &[(&'static str, &str)],
    ) -> Result<Self, tokio_tungstenite::tungstenite::Error> {
        let mut request = format!("ws://{addr}/").into_client_request()?;
        if let Some(token) = token {
            request
                .headers_mut()
                .insert("authorization", format!("Bearer {token}").parse().unwrap());
        }
        for (name, value) in headers {
            request.headers_mut().insert(*name, value.parse().unwrap());
        }
        let (ws, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(Self::over(Wire::Ws(Box::new(ws))))
    }

    pub(crate) fn over(wire: Wire) -> Self {
        Self {
            wire,
            next_id: 0,
            notes: VecDeque::new(),
        }
    }

    async fn send(&mut self, message: Value) {
        let text = message.to_string();
        match &mut self.wire {
            Wire::Ws(ws) => ws.send(Message::Text(text.into())).await.unwrap(),
            Wire::Stdio { stdin, .. } => {
                stdin
                    .write_all(format!("{text}\n").as_bytes())
                    .await
                    .unwrap();
                stdin.flush().await.unwrap();
            }
        }
    }

    /// The next message from the server; `None` when the wire closed.
    async fn recv(&mut self) -> Option<Value> {
        let text = match &mut self.wire {
            Wire::Ws(ws) => loop {
                match tokio::time::timeout(LIMIT, ws.next()).await.ok()?? {
                    Ok(Message::Text(text)) => break text.to_string(),
                    Ok(Message::Close(_)) | Err(_) => return None,
                    Ok(_) => {}
                }
            },
            Wire::Stdio { stdout, .. } => tokio::time::timeout(LIMIT, stdout.next_line())
                .await
                .ok()?
                .ok()??,
        };
        let message: Value = serde_json::from_str(&text).unwrap();
        assert!(message.get("jsonrpc").is_none(), "{message}");
        Some(message)
    }

    /// Sends a request and returns its whole reply (`result` or `error`).
    pub(crate) async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"id": id, "method": method, "params": params}))
            .await;
        loop {
            let message = self
                .recv()
                .await
                .unwrap_or_else(|| panic!("no reply to {method}"));
            if message["id"] == id {
                return message;
            }
            self.notes.push_back(message);
        }
    }

    async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"method": method, "params": params})).await;
    }

    async fn next_note(&mut self) -> Option<Value> {
        match self.notes.pop_front() {
            Some(note) => Some(note),
            None => self.recv().await,
        }
    }

    /// `initialize` then `initialized`, as Codex opens a connection.
    pub(crate) async fn handshake(&mut self) -> Value {
        let reply = self
            .call(
                "initialize",
                json!({"clientName": "codex-environment", "resumeSessionId": null}),
            )
            .await;
        self.notify("initialized", json!({})).await;
        reply
    }

    /// `process/start` of `argv` in `cwd` (a path), as Codex sends it.
    pub(crate) async fn start(
        &mut self,
        id: &str,
        argv: &[&str],
        cwd: &Path,
        extra: Value,
    ) -> Value {
        let mut params = json!({
            "processId": id,
            "metadata": {"threadId": "t", "toolCallId": "call0"},
            "argv": argv,
            "cwd": format!("file://{}", cwd.display()),
            "envPolicy": {"inherit": "all", "ignoreDefaultExcludes": true,
                "exclude": ["CODEX_VERSION"], "set": {}, "includeOnly": []},
            "env": {"TERM": "dumb", "CODEX_VERSION": "0.171.0", "NO_COLOR": "1"},
            "tty": false, "pipeStdin": false, "arg0": null, "sandbox": null,
            "enforceManagedNetwork": false, "managedNetwork": null
        });
        if let (Some(params), Some(extra)) = (params.as_object_mut(), extra.as_object()) {
            params.extend(extra.clone());
        }
        self.call("process/start", params).await
    }

    /// The notifications of process `id` until `process/closed`.
    pub(crate) async fn until_closed(&mut self, id: &str) -> Ran {
        let mut ran = Ran {
            output: String::new(),
            exit_code: i64::MIN,
            events: Vec::new(),
        };
        loop {
            let note = self
                .next_note()
                .await
                .unwrap_or_else(|| panic!("process {id} never closed: {ran:?}"));
            if note["params"]["processId"] != id {
                continue;
            }
            match note["method"].as_str() {
                Some("process/output") => {
                    ran.output
                        .push_str(&String::from_utf8_lossy(&decode(&note["params"]["chunk"])));
                }
                Some("process/exited") => {
                    ran.exit_code = note["params"]["exitCode"].as_i64().unwrap();
                }
                Some("process/closed") => {
                    ran.events.push(note);
                    return ran;
                }
                _ => {}
            }
            ran.events.push(note);
        }
    }

    pub(crate) async fn close(self) {
        match self.wire {
            Wire::Ws(mut ws) => {
                let _ = ws.send(Message::Close(None)).await;
                let _ = SinkExt::close(&mut ws).await;
            }
            Wire::Stdio { stdin, .. } => drop(stdin),
        }
    }
}

pub(crate) fn decode(b64: &Value) -> Vec<u8> {
    STANDARD.decode(b64.as_str().unwrap()).unwrap()
}

pub(crate) fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}
