//! The `envd` row: E2B's envd spoken as its SDK speaks it — a command is a
//! `process.Process/Start` server stream (Connect, JSON codec), a session
//! a `Start` whose process lives on its own, files `POST`/`GET /files`.
//!
//! On envd what a command leaves in the background lives on (the platform's
//! way, see the contract); a caller that runs a command to its end here
//! also kills what it left, by the command's pid, as an E2B program
//! cleaning up would (`commands.kill(pid)`), so the columns see what the
//! door started and what the kill ended.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::doors::{HTTP, content, encode, http_refusal, send, wrote};
use super::{Cmd, Outcome, Refusal, Server, Session, block};

/// `envd`: commands, sessions (processes living on their own) and files.
pub(crate) struct Envd;

/// A Connect error `{code, message}` as a refusal.
fn connect_refusal(error: &Value) -> Outcome {
    let kind = match error["code"].as_str().unwrap_or("") {
        "invalid_argument" => Refusal::Invalid,
        "permission_denied" | "unauthenticated" => Refusal::Denied,
        "resource_exhausted" => Refusal::Full,
        _ => Refusal::Other,
    };
    Outcome::Refused {
        kind,
        said: error.to_string(),
    }
}

fn envelope(payload: &Value) -> Vec<u8> {
    let bytes = payload.to_string().into_bytes();
    let mut out = vec![0u8];
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&bytes);
    out
}

/// The whole frames at the start of `buf` (flags, JSON), consumed.
fn take_frames(buf: &mut Vec<u8>) -> Vec<(u8, Value)> {
    let mut out = Vec::new();
    while buf.len() >= 5 {
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if buf.len() < 5 + len {
            break;
        }
        let frame: Vec<u8> = buf.drain(..5 + len).collect();
        out.push((
            frame[0],
            serde_json::from_slice(&frame[5..]).unwrap_or(Value::Null),
        ));
    }
    out
}

fn decoded(b64: &Value) -> Vec<u8> {
    crate::common::base64_decode(b64.as_str().unwrap_or(""))
}

fn start_body(cmd: &Cmd) -> Value {
    let envs: serde_json::Map<String, Value> = cmd
        .env
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let mut process = json!({"cmd": "/bin/sh", "args": ["-c", cmd.line], "envs": envs});
    if let Some(cwd) = &cmd.cwd {
        process["cwd"] = Value::String(cwd.clone());
    }
    json!({"process": process})
}

/// A `Start` stream, open: its response, what is buffered, the pid.
struct Started {
    response: reqwest::Response,
    buf: Vec<u8>,
    pid: u64,
}

/// Starts `cmd` and reads up to its `start` event.
async fn start(at: &Server, cmd: &Cmd) -> Result<Started, Outcome> {
    let mut request = HTTP
        .post(at.url("envd", "/process.Process/Start"))
        .header("content-type", "application/connect+json")
        .body(envelope(&start_body(cmd)));
    if cmd.timeout_s > 0 {
        request = request.header("connect-timeout-ms", (cmd.timeout_s * 1000).to_string());
    }
    let response = request
        .send()
        .await
        .map_err(|e| Outcome::Unexpected(e.to_string()))?;
    if response.status() != StatusCode::OK {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        return Err(match serde_json::from_str::<Value>(&body) {
            Ok(error) if error["code"].is_string() => connect_refusal(&error),
            _ => http_refusal(status, &body),
        });
    }
    let mut started = Started {
        response,
        buf: Vec::new(),
        pid: 0,
    };
    loop {
        for (flags, frame) in take_frames(&mut started.buf) {
            if flags & 2 != 0 {
                return Err(connect_refusal(&frame["error"]));
            }
            if let Some(pid) = frame["event"]["start"]["pid"].as_u64() {
                started.pid = pid;
                return Ok(started);
            }
        }
        match started.response.chunk().await {
            Ok(Some(chunk)) => started.buf.extend_from_slice(&chunk),
            Ok(None) => return Err(Outcome::Unexpected("the stream ended before start".into())),
            Err(e) => return Err(Outcome::Unexpected(e.to_string())),
        }
    }
}

/// Reads the stream to its end: the output and the exit code.
async fn to_end(mut started: Started) -> Outcome {
    let mut output = Vec::new();
    let mut exit = None;
    loop {
        for (flags, frame) in take_frames(&mut started.buf) {
            if flags & 2 != 0 {
                if frame["error"].is_object() {
                    return connect_refusal(&frame["error"]);
                }
                return match exit {
                    Some(exit) => Outcome::Done {
                        output: String::from_utf8_lossy(&output).into_owned(),
                        exit,
                    },
                    None => Outcome::Unexpected(format!("no end event before {frame}")),
                };
            }
            let event = &frame["event"];
            for stream in ["stdout", "stderr", "pty"] {
                if event["data"][stream].is_string() {
                    output.extend(decoded(&event["data"][stream]));
                }
            }
            if event["end"].is_object() {
                // proto3 JSON leaves a zero out.
                exit = Some(event["end"]["exitCode"].as_i64().unwrap_or(0) as i32);
            }
        }
        match started.response.chunk().await {
            Ok(Some(chunk)) => started.buf.extend_from_slice(&chunk),
            Ok(None) => {
                return Outcome::Unexpected("the stream ended without its end frame".into());
            }
            Err(e) => return Outcome::Unexpected(e.to_string()),
        }
    }
}

/// `SendSignal` SIGKILL to `pid`: the whole tree, or what it left.
async fn kill(at: &Server, pid: u64) {
    let _ = HTTP
        .post(at.url("envd", "/process.Process/SendSignal"))
        .header("content-type", "application/json")
        .body(json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}).to_string())
        .timeout(Duration::from_secs(10))
        .send()
        .await;
}

struct EnvdSession {
    started: Started,
}

impl Session for EnvdSession {
    fn close(self: Box<Self>, at: &Server) {
        block(async move {
            kill(at, self.started.pid).await;
            drop(self.started);
        });
    }
}

impl super::Wire for Envd {
    fn protocol(&self) -> &'static str {
        "envd"
    }

    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome {
        let answer = block(async {
            let started = match start(at, cmd).await {
                Ok(started) => started,
                Err(refused) => return refused,
            };
            let pid = started.pid;
            let outcome = to_end(started).await;
            kill(at, pid).await;
            outcome
        });
        answer.unwrap_or_else(|| Outcome::Unexpected("no answer in time".into()))
    }

    fn open_session(&self, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome> {
        let cmd = Cmd::line(line).timeout(0);
        match block(start(at, &cmd)) {
            None => Err(Outcome::Unexpected("no answer in time".into())),
            Some(started) => started.map(|started| Box::new(EnvdSession { started }) as _),
        }
    }

    fn write(&self, at: &Server, path: &str, body: &str) -> Outcome {
        let url = at.url("envd", &format!("/files?path={}", encode(path)));
        send(
            HTTP.post(url)
                .header("content-type", "application/octet-stream")
                .body(body.to_owned()),
            wrote,
        )
    }

    fn read(&self, at: &Server, path: &str) -> Outcome {
        let url = at.url("envd", &format!("/files?path={}", encode(path)));
        send(HTTP.get(url), content)
    }
}
