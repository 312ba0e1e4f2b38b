//! `process.Process`: E2B's commands and PTYs. `Start` plans a command
//! through the broker (the operator's policy, the default sandbox, risk),
//! starts it attached to an output tap and seats it in the session table
//! ([`super::procs`]), then streams its `start`, `data` and `end` events,
//! with a `keepalive` at the interval the client asks
//! (`Keepalive-Ping-Interval`). `Connect` streams a running one again;
//! `List`, `SendInput`, `StreamInput`, `CloseStdin`, `SendSignal` and
//! `Update` reach it by pid or tag, for its caller only.
//!
//! At the `Start` call's deadline (`Connect-Timeout-Ms`, capped by
//! `[limits] max_timeout_ms`) the whole tree is killed and the stream ends
//! with `deadline_exceeded`, which the SDK raises as its
//! `TimeoutException`. `SendSignal` SIGKILL ends the whole tree too.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use tokio::sync::mpsc;

use super::EnvdState;
use super::connect::{
    self, Code, ConnectError, StreamOut, bad_content_type, keepalive_of, one_message,
};
use super::procs::{self, Proc, ProcEvent, Selector, Started};
use super::proto::process::{
    CloseStdinRequest, CloseStdinResponse, ConnectRequest, ListRequest, ListResponse, ProcessEvent,
    ProcessInfo, ProcessInput, ProcessSelector, SendInputRequest, SendInputResponse,
    SendSignalRequest, SendSignalResponse, Signal, StartRequest, StartResponse, StreamInputRequest,
    StreamInputResponse, UpdateRequest, UpdateResponse, process_event, process_input,
    process_selector, stream_input_request,
};
use crate::broker::BrokerError;
use crate::exec::state::StreamKind;
use crate::exec::{Attach, ExecError};
use crate::gate::Caller;
use crate::plan::{Request, Target};

/// `POST /process.Process/Start`.
pub(crate) async fn start(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(codec) = connect::codec_of(&headers, true) else {
        return bad_content_type();
    };
    let now = Instant::now();
    let deadline = capped_deadline(&state, connect::deadline_of(&headers, now), now);
    let request: StartRequest = match one_message(codec, "process.StartRequest", &body) {
        Ok(r) => r,
        Err(e) => return connect::stream_error(codec, &e),
    };
    let (proc, events) = match start_process(&state, &caller, request, deadline).await {
        Ok(started) => started,
        Err(e) => return connect::stream_error(codec, &e),
    };
    let (out, response) = connect::stream_reply(codec, "process.StartResponse");
    let keepalive = keepalive_of(&headers);
    tokio::spawn(async move {
        let wrap = |event: ProcessEvent| StartResponse { event: Some(event) };
        // The process's owner keeps this deadline: it kills the tree, takes
        // it out of the tables, then tells this stream, which ends with
        // `deadline_exceeded` once the process is gone.
        stream_events(out, (proc.pid, proc.tty), events, None, keepalive, wrap).await;
    });
    response
}

/// `POST /process.Process/Connect`.
pub(crate) async fn connect(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(codec) = connect::codec_of(&headers, true) else {
        return bad_content_type();
    };
    let deadline = connect::deadline_of(&headers, Instant::now());
    let request: ConnectRequest = match one_message(codec, "process.ConnectRequest", &body) {
        Ok(r) => r,
        Err(e) => return connect::stream_error(codec, &e),
    };
    let proc = match find(&state, &caller, request.process.as_ref()) {
        Ok(p) => p,
        Err(e) => return connect::stream_error(codec, &e),
    };
    let events = proc.subscribe();
    let (out, response) = connect::stream_reply(codec, "process.ConnectResponse");
    let keepalive = keepalive_of(&headers);
    tokio::spawn(async move {
        let wrap =
            |event: ProcessEvent| super::proto::process::ConnectResponse { event: Some(event) };
        stream_events(out, (proc.pid, proc.tty), events, deadline, keepalive, wrap).await;
    });
    response
}

/// `POST /process.Process/List`.
pub(crate) async fn list(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "process.ListRequest",
        "process.ListResponse",
        |_: ListRequest| async move {
            let processes = state
                .procs
                .of(&caller)
                .iter()
                .map(|p| ProcessInfo {
                    config: Some(p.config.clone()),
                    pid: p.pid,
                    tag: p.tag.clone(),
                })
                .collect();
            Ok(ListResponse { processes })
        },
    )
    .await
}

/// `POST /process.Process/SendInput`.
pub(crate) async fn send_input(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "process.SendInputRequest",
        "process.SendInputResponse",
        |r: SendInputRequest| async move {
            let proc = find(&state, &caller, r.process.as_ref())?;
            write_input(&proc, r.input).await?;
            Ok(SendInputResponse {})
        },
    )
    .await
}

/// `POST /process.Process/StreamInput`: a client stream whose first
/// message selects the process and whose data messages are its input, in
/// order.
pub(crate) async fn stream_input(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(codec) = connect::codec_of(&headers, true) else {
        return bad_content_type();
    };
    let result = async {
        let mut proc: Option<Arc<Proc>> = None;
        for payload in connect::envelopes(&body)? {
            let msg: StreamInputRequest =
                connect::decode(codec, "process.StreamInputRequest", payload)?;
            match msg.event {
                Some(stream_input_request::Event::Start(start)) => {
                    proc = Some(find(&state, &caller, start.process.as_ref())?);
                }
                Some(stream_input_request::Event::Data(data)) => {
                    let target = proc.as_ref().ok_or_else(|| {
                        ConnectError::new(
                            Code::FailedPrecondition,
                            "the stream's first message must select the process",
                        )
                    })?;
                    write_input(target, data.input).await?;
                }
                Some(stream_input_request::Event::Keepalive(_)) | None => {}
            }
        }
        Ok::<_, ConnectError>(StreamInputResponse {})
    }
    .await;
    let (out, response) = connect::stream_reply(codec, "process.StreamInputResponse");
    tokio::spawn(async move {
        match result {
            Ok(msg) => {
                out.send(&msg).await;
                out.end(None).await;
            }
            Err(e) => out.end(Some(e)).await,
        }
    });
    response
}

/// `POST /process.Process/CloseStdin`.
pub(crate) async fn close_stdin(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "process.CloseStdinRequest",
        "process.CloseStdinResponse",
        |r: CloseStdinRequest| async move {
            let proc = find(&state, &caller, r.process.as_ref())?;
            if proc.tty {
                return Err(ConnectError::new(
                    Code::FailedPrecondition,
                    "a PTY has no stdin to close; send Ctrl-D (0x04) as input",
                ));
            }
            proc.exec
                .close_stdin()
                .map_err(|e| exec_error(proc.pid, &e))?;
            Ok(CloseStdinResponse {})
        },
    )
    .await
}

/// `POST /process.Process/SendSignal`: SIGKILL ends the whole tree,
/// SIGTERM goes to the process group.
pub(crate) async fn send_signal(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "process.SendSignalRequest",
        "process.SendSignalResponse",
        |r: SendSignalRequest| async move {
            let proc = find(&state, &caller, r.process.as_ref())?;
            match Signal::try_from(r.signal) {
                Ok(Signal::Sigkill) => {
                    let report = proc.exec.terminate().await;
                    if !report.survivors.is_empty() {
                        tracing::warn!(survivors = ?report.survivors, "SIGKILL left survivors");
                    }
                }
                Ok(Signal::Sigterm) => {
                    let _ = proc.exec.signal_group(libc::SIGTERM);
                }
                Ok(Signal::Unspecified) | Err(_) => {
                    return Err(ConnectError::new(
                        Code::InvalidArgument,
                        format!("unsupported or unspecified signal {}", r.signal),
                    ));
                }
            }
            Ok(SendSignalResponse {})
        },
    )
    .await
}

/// `POST /process.Process/Update`: a PTY's new size.
pub(crate) async fn update(
    State(state): State<EnvdState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    super::unary(
        &headers,
        &body,
        "process.UpdateRequest",
        "process.UpdateResponse",
        |r: UpdateRequest| async move {
            let proc = find(&state, &caller, r.process.as_ref())?;
            if let Some(size) = r.pty.and_then(|p| p.size) {
                proc.exec
                    .resize(clamp_u16(size.cols), clamp_u16(size.rows))
                    .map_err(|e| exec_error(proc.pid, &e))?;
            }
            Ok(UpdateResponse {})
        },
    )
    .await
}

/// Plans, starts and seats the process of `request`.
async fn start_process(
    state: &EnvdState,
    caller: &Caller,
    request: StartRequest,
    deadline: Option<Instant>,
) -> Result<(Arc<Proc>, mpsc::Receiver<ProcEvent>), ConnectError> {
    let config = request.process.unwrap_or_default();
    if config.cmd.is_empty() {
        return Err(ConnectError::new(
            Code::InvalidArgument,
            "process.cmd is required",
        ));
    }
    let tty = request.pty.is_some();
    let mut argv = vec![OsString::from(&config.cmd)];
    argv.extend(config.args.iter().map(OsString::from));
    let mut plan = Request::new(Target::Command(argv));
    let cwd = config
        .cwd
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| state.init.default_workdir());
    plan.workdir = match cwd {
        None => None,
        Some(dir) => Some(workdir(state, &dir)?),
    };
    // The variables of `POST /init`, then the call's own over them.
    let mut vars = state.init.env();
    vars.extend(config.envs.clone());
    let env: Vec<(OsString, OsString)> = vars
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    plan.env = env;
    plan.tty = Some(tty);
    plan.session = true;
    let (tap, receiver) =
        crate::exec::output_tap(crate::exec::DEFAULT_TAP_CHUNKS).map_err(|e| {
            ConnectError::new(
                Code::Internal,
                format!("cannot open the output stream: {e}"),
            )
        })?;
    let pty_size = request
        .pty
        .and_then(|p| p.size)
        .filter(|s| s.cols > 0 && s.rows > 0)
        .map(|s| (clamp_u16(s.cols), clamp_u16(s.rows)));
    let attach = Attach {
        tap: Some(tap),
        stdin_pipe: !tty && request.stdin.unwrap_or(true),
        pty_size,
    };
    let live = state
        .broker
        .start_counted(caller, &plan, "envd process", Some(attach))
        .await
        .map_err(|e| broker_error(&e))?;
    Ok(procs::own(
        &state.procs,
        Started {
            live,
            tap: receiver,
            tag: request.tag,
            config,
            caller: caller.clone(),
            tty,
            deadline,
            shutdown: state.shutdown.clone(),
        },
    ))
}

/// A command's working directory: an E2B path, confined beneath the root.
fn workdir(state: &EnvdState, dir: &str) -> Result<PathBuf, ConnectError> {
    state
        .broker
        .locate(std::path::Path::new(dir))
        .map_err(|e| ConnectError::new(Code::PermissionDenied, format!("cwd: {e}")))
}

/// Forwards a process's events to one stream: `start`, then `data` as it
/// comes with a `keepalive` when idle, then `end`; cut at the call's
/// deadline or when the client goes away.
async fn stream_events<R: prost::Message>(
    out: StreamOut,
    (pid, tty): (u32, bool),
    mut events: mpsc::Receiver<ProcEvent>,
    deadline: Option<Instant>,
    keepalive: Option<Duration>,
    wrap: impl Fn(ProcessEvent) -> R,
) {
    let event = |e| wrap(ProcessEvent { event: Some(e) });
    if !out
        .send(&event(process_event::Event::Start(
            process_event::StartEvent { pid },
        )))
        .await
    {
        return;
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
    let ending = loop {
        tokio::select! {
            got = events.recv() => match got {
                Some(ProcEvent::Output(kind, bytes)) => {
                    let output = output_of(tty, kind, bytes);
                    let data = process_event::DataEvent { output: Some(output) };
                    if !out.send(&event(process_event::Event::Data(data))).await {
                        return;
                    }
                    ticker.reset();
                }
                Some(ProcEvent::End(end)) => {
                    out.send(&event(process_event::Event::End(end))).await;
                    break None;
                }
                Some(ProcEvent::Deadline) => break Some(deadline_error()),
                Some(ProcEvent::Shutdown) => break Some(ConnectError::new(
                    Code::Unavailable,
                    "the server is stopping; the process was killed",
                )),
                None => break None,
            },
            _ = ticker.tick(), if keepalive.is_some() => {
                let ping = process_event::Event::Keepalive(process_event::KeepAlive {});
                if !out.send(&event(ping)).await {
                    return;
                }
            }
            () = &mut deadline_passed => break Some(deadline_error()),
            () = out.closed() => return,
        }
    };
    out.end(ending).await;
}

fn output_of(tty: bool, kind: StreamKind, bytes: Vec<u8>) -> process_event::data_event::Output {
    use process_event::data_event::Output;
    if tty {
        return Output::Pty(bytes);
    }
    match kind {
        StreamKind::Stdout => Output::Stdout(bytes),
        StreamKind::Stderr => Output::Stderr(bytes),
    }
}

fn deadline_error() -> ConnectError {
    ConnectError::new(
        Code::DeadlineExceeded,
        "the call's deadline passed; the process was killed",
    )
}

/// The process `selector` names, for `caller`.
fn find(
    state: &EnvdState,
    caller: &Caller,
    selector: Option<&ProcessSelector>,
) -> Result<Arc<Proc>, ConnectError> {
    let selector = match selector.and_then(|s| s.selector.clone()) {
        Some(process_selector::Selector::Pid(pid)) => Selector::Pid(pid),
        Some(process_selector::Selector::Tag(tag)) => Selector::Tag(tag),
        None => {
            return Err(ConnectError::new(
                Code::InvalidArgument,
                "process selector (pid or tag) is required",
            ));
        }
    };
    state.procs.find(caller, &selector).ok_or_else(|| {
        let named = match &selector {
            Selector::Pid(pid) => format!("pid {pid}"),
            Selector::Tag(tag) => format!("tag {tag:?}"),
        };
        ConnectError::new(Code::NotFound, format!("process with {named} not found"))
    })
}

/// Writes `input` to the process's stdin or PTY, off the async threads.
async fn write_input(proc: &Arc<Proc>, input: Option<ProcessInput>) -> Result<(), ConnectError> {
    let bytes = match input.and_then(|i| i.input) {
        Some(process_input::Input::Stdin(b) | process_input::Input::Pty(b)) => b,
        None => return Ok(()),
    };
    let target = Arc::clone(proc);
    tokio::task::spawn_blocking(move || target.exec.write_stdin(&bytes))
        .await
        .map_err(|e| ConnectError::new(Code::Internal, e.to_string()))?
        .map_err(|e| exec_error(proc.pid, &e))
}

/// The Connect error of a failed call on a live process.
fn exec_error(pid: u32, err: &ExecError) -> ConnectError {
    match err {
        ExecError::StdinClosed { .. } | ExecError::Exited { .. } | ExecError::NoTerminal { .. } => {
            ConnectError::new(Code::FailedPrecondition, format!("process {pid}: {err}"))
        }
        _ => ConnectError::new(Code::Internal, format!("process {pid}: {err}")),
    }
}

/// The Connect error of what the broker refused or could not start.
fn broker_error(err: &BrokerError) -> ConnectError {
    match err {
        BrokerError::Refused(rejection) => ConnectError::new(
            match rejection.kind {
                crate::registry::kinds::MALFORMED_REQUEST
                | crate::registry::kinds::INVALID_PARAMS => Code::InvalidArgument,
                _ => Code::PermissionDenied,
            },
            format!("{} (error kind {})", rejection.message, rejection.kind),
        ),
        BrokerError::Start(e) => match e {
            ExecError::NotFound { .. }
            | ExecError::WorkdirMissing { .. }
            | ExecError::WorkdirNotDirectory { .. } => {
                ConnectError::new(Code::NotFound, e.to_string())
            }
            ExecError::NotExecutable { .. } => {
                ConnectError::new(Code::PermissionDenied, e.to_string())
            }
            _ => ConnectError::new(Code::Internal, e.to_string()),
        },
        BrokerError::Full(full) => ConnectError::new(Code::ResourceExhausted, full.to_string()),
        BrokerError::Busy(busy) => ConnectError::new(Code::ResourceExhausted, busy.to_string()),
    }
}

/// The `Start` deadline, capped by `[limits] max_timeout_ms`.
fn capped_deadline(state: &EnvdState, asked: Option<Instant>, now: Instant) -> Option<Instant> {
    let cap = now + Duration::from_millis(state.broker.limits().max_timeout_ms);
    asked.map(|at| at.min(cap))
}

fn clamp_u16(value: u32) -> u16 {
    u16::try_from(value).unwrap_or(u16::MAX)
}
