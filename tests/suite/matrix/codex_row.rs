//! The `codex-exec` row: Codex's exec-server protocol over a WebSocket, as
//! the suite's client (`suite::codex_exec::Client`) speaks it: a command is
//! a `process/start` followed to its `process/closed` (terminated at its
//! timeout), a session a process whose connection stays open (closing the
//! connection ends it), files are `fs/writeFile` and `fs/readFile`.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::{Cmd, Outcome, Refusal, Server, Session, Wire, block};
use crate::suite::codex_exec::{Client, decode, uri};

const PROTOCOL: &str = "codex-exec";

pub(crate) struct CodexExec;

struct CodexSession {
    client: Client,
}

impl Session for CodexSession {
    fn close(self: Box<Self>, _at: &Server) {
        let _ = block(self.client.close());
    }
}

/// Runs `work` on its own task, so that a client's panic (a broken wire)
/// is an unexpected answer, not the end of the matrix.
fn guarded<F>(work: F) -> Outcome
where
    F: std::future::Future<Output = Outcome> + Send + 'static,
{
    match block(async { tokio::spawn(work).await }) {
        Some(Ok(outcome)) => outcome,
        Some(Err(e)) => Outcome::Unexpected(format!("the client failed: {e}")),
        None => Outcome::Unexpected("no answer in time".to_owned()),
    }
}

/// The door's errors, normalized.
fn refusal(error: &Value) -> Outcome {
    let said = error.to_string();
    let message = error["message"].as_str().unwrap_or_default();
    let kind = match error["code"].as_i64() {
        Some(-32602) => Refusal::Invalid,
        Some(-32600) if message.contains("--max-sessions") => Refusal::Full,
        Some(-32600) => Refusal::Denied,
        _ => Refusal::Other,
    };
    Outcome::Refused { kind, said }
}

/// The workspace's absolute path of `rel` (the root as the server resolved it).
fn path_of(at: &Server, rel: &str) -> PathBuf {
    at.env.work().canonicalize().unwrap().join(rel)
}

async fn connect(at_addr: std::net::SocketAddr) -> Client {
    let mut client = Client::connect(at_addr, None).await.unwrap();
    client.handshake().await;
    client
}

/// Starts `line` in a fresh connection: the client, or the refusal.
async fn start(
    addr: std::net::SocketAddr,
    cwd: PathBuf,
    line: String,
    env: Vec<(String, String)>,
) -> Result<Client, Outcome> {
    let mut client = connect(addr).await;
    let env: serde_json::Map<String, Value> =
        env.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
    let reply = client
        .start(
            "m",
            &["/bin/sh", "-c", &line],
            &cwd,
            json!({"env": env, "envPolicy": null}),
        )
        .await;
    if reply.get("error").is_some() {
        return Err(refusal(&reply["error"]));
    }
    Ok(client)
}

impl Wire for CodexExec {
    fn protocol(&self) -> &'static str {
        PROTOCOL
    }

    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome {
        let addr = at.addr(PROTOCOL);
        let cwd = path_of(at, cmd.cwd.as_deref().unwrap_or(""));
        let (line, env, limit) = (
            cmd.line.clone(),
            cmd.env.clone(),
            Duration::from_secs(cmd.timeout_s),
        );
        guarded(async move {
            let mut client = match start(addr, cwd, line, env).await {
                Ok(client) => client,
                Err(refused) => return refused,
            };
            let ran = match tokio::time::timeout(limit, client.until_closed("m")).await {
                Ok(ran) => ran,
                Err(_) => {
                    client
                        .call("process/terminate", json!({"processId": "m"}))
                        .await;
                    client.until_closed("m").await
                }
            };
            client.close().await;
            Outcome::Done {
                output: ran.output,
                exit: i32::try_from(ran.exit_code).unwrap_or(-1),
            }
        })
    }

    fn open_session(&self, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome> {
        let addr = at.addr(PROTOCOL);
        let cwd = path_of(at, "");
        let line = line.to_owned();
        match block(async move { tokio::spawn(start(addr, cwd, line, Vec::new())).await }) {
            Some(Ok(Ok(client))) => Ok(Box::new(CodexSession { client })),
            Some(Ok(Err(refused))) => Err(refused),
            Some(Err(e)) => Err(Outcome::Unexpected(format!("the client failed: {e}"))),
            None => Err(Outcome::Unexpected("no answer in time".to_owned())),
        }
    }

    fn write(&self, at: &Server, path: &str, content: &str) -> Outcome {
        let addr = at.addr(PROTOCOL);
        let (target, data) = (uri(&path_of(at, path)), STANDARD.encode(content));
        guarded(async move {
            let mut client = connect(addr).await;
            let reply = client
                .call(
                    "fs/writeFile",
                    json!({"path": target, "dataBase64": data, "sandbox": null}),
                )
                .await;
            client.close().await;
            match reply.get("error") {
                Some(error) => refusal(error),
                None => Outcome::Done {
                    output: String::new(),
                    exit: 0,
                },
            }
        })
    }

    fn read(&self, at: &Server, path: &str) -> Outcome {
        let addr = at.addr(PROTOCOL);
        let target = uri(&path_of(at, path));
        guarded(async move {
            let mut client = connect(addr).await;
            let reply = client
                .call("fs/readFile", json!({"path": target, "sandbox": null}))
                .await;
            client.close().await;
            match reply.get("error") {
                Some(error) => refusal(error),
                None => Outcome::Done {
                    output: String::from_utf8_lossy(&decode(&reply["result"]["dataBase64"]))
                        .into_owned(),
                    exit: 0,
                },
            }
        })
    }
}
