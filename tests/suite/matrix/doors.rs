//! The rows of the matrix: each door's wire helpers, spoken as its own
//! clients speak it (rmcp's streamable HTTP client for MCP, tonic for
//! gRPC, raw JSON and multipart HTTP for the others), each answer mapped
//! to one [`Outcome`]. What a door cannot do at all is said here, once.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use agent_reach::doors::sandboxd_grpc::proto::process_v1::{
    ExecuteRequest, ProcessConfig, StartRequest, StartResponse,
    process_service_client::ProcessServiceClient, start_response::Event,
};
use reqwest::StatusCode;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::{Cmd, Outcome, REQUEST_LIMIT, Refusal, Server, Session, block};

/// One HTTP client for every HTTP row.
pub(super) static HTTP: LazyLock<reqwest::Client> = LazyLock::new(|| {
    reqwest::Client::builder()
        .timeout(REQUEST_LIMIT)
        .build()
        .unwrap()
});

/// A name no other session of this test run has.
fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `path` with every byte but the unreserved ones percent-encoded, `/`
/// included: one path parameter.
pub(super) fn encode(path: &str) -> String {
    path.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An HTTP refusal by its status; SWE-ReX's 511 by the exception class.
pub(super) fn http_refusal(status: StatusCode, body: &str) -> Outcome {
    let kind = match status.as_u16() {
        400 | 422 => Refusal::Invalid,
        401 | 403 => Refusal::Denied,
        429 | 503 => Refusal::Full,
        511 => {
            let answer: Value = serde_json::from_str(body).unwrap_or(Value::Null);
            let class = answer["swerexception"]["class_path"].as_str().unwrap_or("");
            let message = answer["swerexception"]["message"].as_str().unwrap_or("");
            if class.ends_with("ValueError") {
                Refusal::Invalid
            } else if class.ends_with("PermissionError") {
                Refusal::Denied
            } else if message.contains("--max-sessions") {
                Refusal::Full
            } else {
                Refusal::Other
            }
        }
        _ => Refusal::Other,
    };
    Outcome::Refused {
        kind,
        said: format!("{status} {}", body.chars().take(300).collect::<String>()),
    }
}

/// Sends `request`; a 2xx answer is handed to `done`, any other is a refusal.
pub(super) fn send(
    request: reqwest::RequestBuilder,
    done: impl FnOnce(String) -> Outcome,
) -> Outcome {
    let answer = block(async {
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body = response.text().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body))
    });
    match answer {
        None => Outcome::Unexpected("no answer in time".into()),
        Some(Err(e)) => Outcome::Unexpected(e),
        Some(Ok((status, body))) if status.is_success() => done(body),
        Some(Ok((status, body))) => http_refusal(status, &body),
    }
}

/// A command's JSON answer `{stdout, stderr, exit_code}`.
fn ran(body: &str) -> Outcome {
    let answer: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    match answer["exit_code"].as_i64() {
        Some(exit) => Outcome::Done {
            output: format!(
                "{}{}",
                answer["stdout"].as_str().unwrap_or(""),
                answer["stderr"].as_str().unwrap_or("")
            ),
            exit: exit as i32,
        },
        None => Outcome::Unexpected(format!("no exit code in {body}")),
    }
}

pub(super) fn wrote(_: String) -> Outcome {
    Outcome::Done {
        output: String::new(),
        exit: 0,
    }
}

pub(super) fn content(body: String) -> Outcome {
    Outcome::Done {
        output: body,
        exit: 0,
    }
}

// ---- MCP over streamable HTTP ------------------------------------------

/// `mcp`: `exec_command` runs and starts, `apply_patch` writes.
pub(crate) struct Mcp;

/// The shell MCP runs a line with: the one the other doors' lines run
/// under (bash would retry a refused fork for 15 s).
const SHELL: &str = "/bin/sh";

type McpClient = RunningService<RoleClient, ()>;

async fn mcp_client(at: &Server) -> Result<McpClient, String> {
    let config = StreamableHttpClientTransportConfig::with_uri(at.url("mcp", "/mcp"));
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| format!("initialize: {e}"))
}

/// A tool call: its structured content, or the refusal (a tool error, or
/// a JSON-RPC error) mapped by the kind named in its text.
async fn mcp_call(client: &McpClient, tool: &str, args: Value) -> Result<Value, Outcome> {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    let result = client
        .call_tool(params)
        .await
        .map_err(|e| Outcome::Refused {
            kind: Refusal::Invalid,
            said: format!("JSON-RPC error: {e}"),
        })?;
    if result.is_error == Some(true) {
        let said: String = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n");
        let kind = if said.contains("invalid_params") {
            Refusal::Invalid
        } else if said.contains("--max-sessions") {
            Refusal::Full
        } else if ["denied", "policy", "root", "ermission"]
            .iter()
            .any(|w| said.contains(w))
        {
            Refusal::Denied
        } else {
            Refusal::Other
        };
        return Err(Outcome::Refused {
            kind,
            said: format!("tool error: {said}"),
        });
    }
    Ok(result.structured_content.unwrap_or(Value::Null))
}

/// One call on a client of its own (one MCP session, ended after).
fn mcp_once(at: &Server, tool: &str, args: Value) -> Outcome {
    let answer = block(async {
        let client = mcp_client(at).await.map_err(Outcome::Unexpected)?;
        let answer = mcp_call(&client, tool, args).await;
        let _ = client.cancel().await;
        answer
    });
    match answer {
        None => Outcome::Unexpected("no answer in time".into()),
        Some(Err(outcome)) => outcome,
        Some(Ok(reply)) => match reply["exit_code"].as_i64() {
            Some(exit) => Outcome::Done {
                output: reply["output"].as_str().unwrap_or("").to_owned(),
                exit: exit as i32,
            },
            None if tool == "apply_patch" => wrote(String::new()),
            None => Outcome::Unexpected(format!("no exit code: {reply}")),
        },
    }
}

struct McpSession {
    client: McpClient,
    id: u64,
}

impl Session for McpSession {
    fn close(self: Box<Self>, _at: &Server) {
        block(async move {
            let _ = mcp_call(&self.client, "kill_session", json!({"session_id": self.id})).await;
            let _ = self.client.cancel().await;
        });
    }
}

impl super::Wire for Mcp {
    fn protocol(&self) -> &'static str {
        "mcp"
    }

    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome {
        let mut args = json!({
            "cmd": cmd.line,
            "shell": SHELL,
            "timeout_ms": cmd.timeout_s * 1000,
            "yield_time_ms": (cmd.timeout_s + 10) * 1000,
        });
        if let Some(cwd) = &cmd.cwd {
            args["workdir"] = json!(cwd);
        }
        if cmd.env.is_empty() {
            return mcp_once(at, "exec_command", args);
        }
        // Asked anyway: an `env` argument must be refused, not ignored.
        args["env"] = json!(
            cmd.env
                .iter()
                .cloned()
                .collect::<std::collections::BTreeMap<_, _>>()
        );
        match mcp_once(at, "exec_command", args) {
            Outcome::Refused { said, .. } if said.contains("unknown field `env`") => {
                Outcome::NotOffered(
                    "exec_command takes no environment (an env argument is refused)",
                )
            }
            other => other,
        }
    }

    fn open_session(&self, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome> {
        let opened = block(async {
            let client = mcp_client(at).await.map_err(Outcome::Unexpected)?;
            let args = json!({"cmd": line, "shell": SHELL, "yield_time_ms": 300});
            match mcp_call(&client, "exec_command", args).await {
                Ok(reply) => match reply["session_id"].as_u64() {
                    Some(id) => Ok(McpSession { client, id }),
                    None => {
                        let _ = client.cancel().await;
                        Err(Outcome::Unexpected(format!("no session: {reply}")))
                    }
                },
                Err(refused) => {
                    let _ = client.cancel().await;
                    Err(refused)
                }
            }
        });
        match opened {
            None => Err(Outcome::Unexpected("no answer in time".into())),
            Some(opened) => opened.map(|s| Box::new(s) as Box<dyn Session>),
        }
    }

    fn write(&self, at: &Server, path: &str, content: &str) -> Outcome {
        let patch = format!("*** Begin Patch\n*** Add File: {path}\n+{content}\n*** End Patch\n");
        mcp_once(at, "apply_patch", json!({"input": patch}))
    }

    fn read(&self, _at: &Server, _path: &str) -> Outcome {
        Outcome::NotOffered("MCP has no file-read tool (apply_patch only writes)")
    }
}

// ---- sandboxd gRPC -----------------------------------------------------

/// `sandboxd-grpc`: `Execute` runs, a `Start` stream is a session; no files.
pub(crate) struct Grpc;

type GrpcClient = ProcessServiceClient<tonic::transport::Channel>;

fn grpc_config(cmd: &Cmd) -> ProcessConfig {
    ProcessConfig {
        command: vec!["/bin/sh".into(), "-c".into(), cmd.line.clone()],
        env_vars: cmd.env.iter().cloned().collect(),
        cwd: cmd.cwd.clone(),
    }
}

fn grpc_refusal(status: &tonic::Status) -> Outcome {
    let kind = match status.code() {
        tonic::Code::InvalidArgument => Refusal::Invalid,
        tonic::Code::PermissionDenied => Refusal::Denied,
        tonic::Code::ResourceExhausted => Refusal::Full,
        _ => Refusal::Other,
    };
    Outcome::Refused {
        kind,
        said: format!("{:?} {}", status.code(), status.message()),
    }
}

async fn grpc_client(at: &Server) -> Result<GrpcClient, Outcome> {
    ProcessServiceClient::connect(format!("http://{}", at.addr("sandboxd-grpc")))
        .await
        .map_err(|e| Outcome::Unexpected(format!("connect: {e}")))
}

struct GrpcSession {
    stream: tonic::Streaming<StartResponse>,
}

impl Session for GrpcSession {
    fn close(self: Box<Self>, _at: &Server) {
        // The stream dropped is the caller gone: the server ends the process.
        block(async move { drop(self.stream) });
    }
}

impl super::Wire for Grpc {
    fn protocol(&self) -> &'static str {
        "sandboxd-grpc"
    }

    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome {
        let answer = block(async {
            let mut client = grpc_client(at).await?;
            let request = ExecuteRequest {
                config: Some(grpc_config(cmd)),
            };
            client
                .execute(request)
                .await
                .map(|r| r.into_inner())
                .map_err(|status| grpc_refusal(&status))
        });
        match answer {
            None => Outcome::Unexpected("no answer in time".into()),
            Some(Err(outcome)) => outcome,
            Some(Ok(done)) => Outcome::Done {
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&done.stdout),
                    String::from_utf8_lossy(&done.stderr)
                ),
                exit: done.exit_code,
            },
        }
    }

    fn open_session(&self, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome> {
        let opened = block(async {
            let mut client = grpc_client(at).await?;
            let request = StartRequest {
                config: Some(grpc_config(&Cmd::line(line))),
                pty: None,
            };
            let mut stream = client
                .start(request)
                .await
                .map_err(|status| grpc_refusal(&status))?
                .into_inner();
            match stream.message().await {
                Ok(Some(StartResponse {
                    event: Some(Event::Init(_)),
                })) => Ok(GrpcSession { stream }),
                Ok(other) => Err(Outcome::Unexpected(format!("began with {other:?}"))),
                Err(status) => Err(grpc_refusal(&status)),
            }
        });
        match opened {
            None => Err(Outcome::Unexpected("no answer in time".into())),
            Some(opened) => opened.map(|s| Box::new(s) as Box<dyn Session>),
        }
    }

    fn write(&self, _at: &Server, _path: &str, _content: &str) -> Outcome {
        Outcome::NotOffered("process.v1 has no file service")
    }

    fn read(&self, _at: &Server, _path: &str) -> Outcome {
        Outcome::NotOffered("process.v1 has no file service")
    }
}

// ---- sandboxd REST -----------------------------------------------------

/// `sandboxd-rest`: files only.
pub(crate) struct Rest;

impl super::Wire for Rest {
    fn protocol(&self) -> &'static str {
        "sandboxd-rest"
    }

    /// None: checked by asking for the routes a command would need.
    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome {
        for route in ["/v1/execute", "/v1/process", "/execute"] {
            let request = HTTP
                .post(at.url("sandboxd-rest", route))
                .json(&json!({"command": cmd.line}));
            match send(request, content) {
                Outcome::Refused { said, .. }
                    if said.starts_with("404") || said.starts_with("405") => {}
                other => return Outcome::Unexpected(format!("POST {route}: {other:?}")),
            }
        }
        Outcome::NotOffered("sandboxd REST runs no commands (no execute route answers)")
    }

    fn open_session(&self, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome> {
        match self.run(at, &Cmd::line(line)) {
            Outcome::NotOffered(_) => Err(Outcome::NotOffered("sandboxd REST has no sessions")),
            other => Err(other),
        }
    }

    fn write(&self, at: &Server, path: &str, content: &str) -> Outcome {
        let url = at.url("sandboxd-rest", &format!("/v1/files/{}", encode(path)));
        send(HTTP.put(url).body(content.to_owned()), wrote)
    }

    fn read(&self, at: &Server, path: &str) -> Outcome {
        let url = at.url("sandboxd-rest", &format!("/v1/files/{}", encode(path)));
        send(HTTP.get(url), self::content)
    }
}

// ---- python-runtime ----------------------------------------------------

/// `python-runtime`: `/execute` of a line (no cwd, no env), files; no sessions.
pub(crate) struct PythonRuntime;

impl super::Wire for PythonRuntime {
    fn protocol(&self) -> &'static str {
        "python-runtime"
    }

    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome {
        if cmd.cwd.is_some() {
            return Outcome::NotOffered("/execute takes no working directory");
        }
        if !cmd.env.is_empty() {
            return Outcome::NotOffered("/execute takes no environment");
        }
        let body = json!({"command": cmd.line, "timeout_seconds": cmd.timeout_s});
        send(
            HTTP.post(at.url("python-runtime", "/execute")).json(&body),
            |b| ran(&b),
        )
    }

    fn open_session(&self, _at: &Server, _line: &str) -> Result<Box<dyn Session>, Outcome> {
        Err(Outcome::NotOffered(
            "the runtime API has no sessions (each /execute ends with its command)",
        ))
    }

    fn write(&self, at: &Server, path: &str, content: &str) -> Outcome {
        let part =
            reqwest::multipart::Part::bytes(content.as_bytes().to_vec()).file_name(path.to_owned());
        let form = reqwest::multipart::Form::new().part("file", part);
        send(
            HTTP.post(at.url("python-runtime", "/upload"))
                .multipart(form),
            wrote,
        )
    }

    fn read(&self, at: &Server, path: &str) -> Outcome {
        let url = at.url("python-runtime", &format!("/download/{}", encode(path)));
        send(HTTP.get(url), content)
    }
}

// ---- SWE-ReX -----------------------------------------------------------

/// `swerex`: `/execute`, bash sessions, `/read_file`, `/write_file`.
pub(crate) struct Swerex;

struct SwerexSession {
    name: String,
}

impl Session for SwerexSession {
    fn close(self: Box<Self>, at: &Server) {
        let body = json!({"session": self.name, "session_type": "bash"});
        let _ = send(
            HTTP.post(at.url("swerex", "/close_session")).json(&body),
            wrote,
        );
    }
}

impl super::Wire for Swerex {
    fn protocol(&self) -> &'static str {
        "swerex"
    }

    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome {
        let mut body = json!({"command": cmd.line, "shell": true, "timeout": cmd.timeout_s});
        if let Some(cwd) = &cmd.cwd {
            body["cwd"] = json!(cwd);
        }
        if !cmd.env.is_empty() {
            body["env"] = json!(
                cmd.env
                    .iter()
                    .cloned()
                    .collect::<std::collections::BTreeMap<_, _>>()
            );
        }
        send(HTTP.post(at.url("swerex", "/execute")).json(&body), |b| {
            ran(&b)
        })
    }

    /// A bash session, `line` left running in its background (the
    /// session's shell is the live process; what it started dies with it).
    fn open_session(&self, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome> {
        let name = unique("matrix");
        let body = json!({"session": name, "session_type": "bash", "startup_source": []});
        match send(
            HTTP.post(at.url("swerex", "/create_session")).json(&body),
            wrote,
        ) {
            Outcome::Done { .. } => {}
            other => return Err(other),
        }
        if !line.is_empty() {
            let body = json!({
                "action_type": "bash", "session": name, "timeout": 10,
                "command": format!("( {line} ) >/dev/null 2>&1 &"),
            });
            let _ = send(
                HTTP.post(at.url("swerex", "/run_in_session")).json(&body),
                wrote,
            );
        }
        Ok(Box::new(SwerexSession { name }))
    }

    fn write(&self, at: &Server, path: &str, content: &str) -> Outcome {
        let body = json!({"path": path, "content": content});
        send(
            HTTP.post(at.url("swerex", "/write_file")).json(&body),
            wrote,
        )
    }

    fn read(&self, at: &Server, path: &str) -> Outcome {
        let body = json!({"path": path});
        send(HTTP.post(at.url("swerex", "/read_file")).json(&body), |b| {
            let answer: Value = serde_json::from_str(&b).unwrap_or(Value::Null);
            content(answer["content"].as_str().unwrap_or(&b).to_owned())
        })
    }
}

// ---- Daytona's toolbox -------------------------------------------------

/// `daytona`: `process/execute`, sessions (a shell whose commands may run
/// async), `files/bulk-upload` and `files/download`, as Daytona's SDK
/// calls them.
pub(crate) struct Daytona;

/// The toolbox of the one sandbox: `path` under it.
fn toolbox(at: &Server, path: &str) -> String {
    at.url("daytona", &format!("/toolbox/agent-reach{path}"))
}

/// The variable the daytona row's commands carry, to find what they left.
const RUN_TAG: &str = "MATRIX_DAYTONA_RUN";

/// SIGKILLs every process whose environment holds `entry` (`NAME=VALUE`).
fn kill_tagged(entry: &str) {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for proc in dir.flatten() {
        let Ok(pid) = proc.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(proc.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|e| e == entry.as_bytes()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// `process/execute` of `cmd`, as the SDK sends it.
fn daytona_execute(at: &Server, cmd: &Cmd) -> Outcome {
    let mut body = json!({"command": cmd.line, "timeout": cmd.timeout_s});
    if let Some(cwd) = &cmd.cwd {
        body["cwd"] = json!(cwd);
    }
    if !cmd.env.is_empty() {
        body["envs"] = json!(
            cmd.env
                .iter()
                .cloned()
                .collect::<std::collections::BTreeMap<_, _>>()
        );
    }
    send(
        HTTP.post(toolbox(at, "/process/execute")).json(&body),
        |b| {
            let answer: Value = serde_json::from_str(&b).unwrap_or(Value::Null);
            match answer["exitCode"].as_i64() {
                Some(exit) => Outcome::Done {
                    output: answer["result"].as_str().unwrap_or("").to_owned(),
                    exit: exit as i32,
                },
                None => Outcome::Unexpected(format!("no exitCode in {b}")),
            }
        },
    )
}

struct DaytonaSession {
    name: String,
}

impl Session for DaytonaSession {
    fn close(self: Box<Self>, at: &Server) {
        let url = toolbox(at, &format!("/process/session/{}", self.name));
        let _ = send(HTTP.delete(url), wrote);
    }
}

impl super::Wire for Daytona {
    fn protocol(&self) -> &'static str {
        "daytona"
    }

    /// What a command leaves in the background lives on (Daytona's way,
    /// see the contract). A Daytona program ends it with `kill` in another
    /// `process.exec`, which here runs in a sandbox of its own (its own
    /// PID namespace) that cannot see it; so the caller here ends what the
    /// command left from outside, by a variable it and its children carry,
    /// as the operator would, and the columns see what the door started.
    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome {
        let tag = unique("daytona-run");
        let mut tagged = cmd.clone();
        tagged.env.push((RUN_TAG.to_owned(), tag.clone()));
        let outcome = daytona_execute(at, &tagged);
        kill_tagged(&format!("{RUN_TAG}={tag}"));
        outcome
    }

    fn open_session(&self, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome> {
        let name = unique("matrix");
        let create = HTTP
            .post(toolbox(at, "/process/session"))
            .json(&json!({"sessionId": name}));
        match send(create, wrote) {
            Outcome::Done { .. } => {}
            other => return Err(other),
        }
        let session = DaytonaSession { name };
        let exec = HTTP
            .post(toolbox(
                at,
                &format!("/process/session/{}/exec", session.name),
            ))
            .json(&json!({"command": line, "runAsync": true}));
        match send(exec, wrote) {
            Outcome::Done { .. } => Ok(Box::new(session)),
            other => {
                Box::new(session).close(at);
                Err(other)
            }
        }
    }

    fn write(&self, at: &Server, path: &str, content: &str) -> Outcome {
        let part =
            reqwest::multipart::Part::bytes(content.as_bytes().to_vec()).file_name(path.to_owned());
        let form = reqwest::multipart::Form::new()
            .text("files[0].path", path.to_owned())
            .part("files[0].file", part);
        send(
            HTTP.post(toolbox(at, "/files/bulk-upload")).multipart(form),
            wrote,
        )
    }

    fn read(&self, at: &Server, path: &str) -> Outcome {
        let url = toolbox(at, &format!("/files/download?path={}", encode(path)));
        send(HTTP.get(url), content)
    }
}
