//! `process/start`, `process/read`, `process/write`, `process/signal` and
//! `process/terminate`. A process is planned by the broker like every raw
//! command of a listener (the operator's policy, the sandbox, the reserved
//! names), in Codex's `cwd` confined to `--root`, with Codex's `envPolicy`
//! ([`super::env`]) and under the narrower of Codex's sandbox and the
//! operator's ([`super::sandbox`]); it is seated in the broker's one
//! session table under the connection's caller and owned by
//! [`super::procs`]. Unsupported asks fail plainly: an `arg0` other than
//! `argv[0]`, `enforceManagedNetwork` (Codex's managed network proxy).

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;

use super::connection::{Connection, params, to_value};
use super::procs::{self, Started};
use super::protocol::{
    self as p, ExecParams, ExecResponse, ProcessSandboxType, ReadParams, ReadResponse, RpcError,
    SignalParams, TerminateParams, TerminateResponse, WriteParams, WriteResponse, WriteStatus,
    codes,
};
use crate::broker::BrokerError;
use crate::exec::{Attach, ExecError};
use crate::plan::{Request, Target};

/// `process/read`'s longest wait, whatever Codex asks.
pub(crate) const MAX_READ_WAIT: Duration = Duration::from_secs(30);

/// `process/start`: answers itself, so that its reply goes out before the
/// process's first output.
pub(crate) async fn start(conn: &Arc<Connection>, id: &Value, raw: Value) {
    let (go, ready) = oneshot::channel();
    let result = start_process(conn, raw, ready).await;
    conn.out.send(p::response(id, result)).await;
    let _ = go.send(());
}

async fn start_process(
    conn: &Arc<Connection>,
    raw: Value,
    ready: oneshot::Receiver<()>,
) -> Result<Value, RpcError> {
    let exec: ExecParams = params(raw)?;
    if exec.argv.is_empty() {
        return Err(RpcError::invalid_params("argv is empty"));
    }
    if conn.procs.contains(&exec.process_id) {
        return Err(RpcError::invalid_params(format!(
            "process id {:?} is already in use on this connection",
            exec.process_id
        )));
    }
    if let Some(arg0) = exec.arg0.as_deref()
        && Some(arg0) != exec.argv.first().map(String::as_str)
    {
        return Err(RpcError::invalid_params(format!(
            "arg0 {arg0:?} differs from argv[0]: agent-reach runs argv as given and cannot rename a program"
        )));
    }
    if exec.enforce_managed_network {
        return Err(RpcError::invalid_params(
            "enforceManagedNetwork: agent-reach does not run Codex's managed network proxy; the operator's [sandbox] network setting applies to every command",
        ));
    }
    let mut request = Request::new(Target::Command(
        exec.argv.iter().map(OsString::from).collect(),
    ));
    request.workdir = Some(workdir(conn, &exec.cwd)?);
    super::env::apply(
        &mut request,
        exec.env_policy.as_ref(),
        conn.broker.server_env(),
        &exec.env,
    );
    request.tty = Some(exec.tty);
    request.session = true;
    let asked = super::sandbox::asked(exec.sandbox.as_ref());
    request.sandbox = super::sandbox::narrowest(asked, conn.broker.operator_sandbox());
    tracing::debug!(
        process = %exec.process_id,
        codex_sandbox = %exec.sandbox.as_ref().map_or_else(String::new, |v| v.to_string()),
        ?asked,
        applied = ?request.sandbox,
        "codex-exec sandbox"
    );
    let (tap, receiver) = crate::exec::output_tap(crate::exec::DEFAULT_TAP_CHUNKS)
        .map_err(|e| RpcError::internal(format!("cannot open the output stream: {e}")))?;
    let stdin_pipe = !exec.tty && exec.pipe_stdin;
    let attach = Attach {
        tap: Some(tap),
        stdin_pipe,
        pty_size: None,
    };
    let live = conn
        .broker
        .start_counted(&conn.caller, &request, "codex-exec process", Some(attach))
        .await
        .map_err(|e| broker_error(&e))?;
    let sandbox_type = if live.exec.spec().wrapper.is_empty() {
        ProcessSandboxType::None
    } else {
        ProcessSandboxType::LinuxSeccomp
    };
    tracing::debug!(process = %exec.process_id, pid = live.exec.pid(), "codex-exec process started");
    procs::own(
        &conn.procs,
        Started {
            id: exec.process_id.clone(),
            live,
            tap: receiver,
            tty: exec.tty,
            stdin_pipe,
        },
        conn.out.clone(),
        conn.ended.clone(),
        ready,
    );
    to_value(&ExecResponse {
        process_id: exec.process_id,
        sandbox_type,
    })
}

/// Codex's working directory URI, confined beneath the root.
fn workdir(conn: &Connection, cwd: &str) -> Result<std::path::PathBuf, RpcError> {
    let path =
        super::uri::to_path(cwd).map_err(|e| RpcError::invalid_params(format!("cwd: {e}")))?;
    conn.broker
        .locate(&path)
        .map_err(|e| RpcError::invalid_params(format!("cwd: {e}")))
}

/// `process/read`: the output kept after `afterSeq`, at most `maxBytes`
/// of it (always one chunk), waiting up to `waitMs` for some.
pub(crate) async fn read(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: ReadParams = params(raw)?;
    let proc = conn
        .procs
        .get(&ask.process_id)
        .ok_or_else(|| unknown(&ask.process_id))?;
    let after = ask.after_seq.unwrap_or(0);
    let wait = Duration::from_millis(ask.wait_ms.unwrap_or(0)).min(MAX_READ_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    let mut changed = proc.changed.subscribe();
    loop {
        changed.borrow_and_update();
        let reply = {
            let progress = crate::sync::lock(&proc.progress);
            let mut chunks = Vec::new();
            let mut bytes = 0usize;
            for chunk in progress.chunks.iter().filter(|c| c.seq > after) {
                if !chunks.is_empty()
                    && ask
                        .max_bytes
                        .is_some_and(|m| bytes + chunk.chunk.0.len() > m)
                {
                    break;
                }
                bytes += chunk.chunk.0.len();
                chunks.push(chunk.clone());
            }
            let next_seq = chunks
                .last()
                .map_or(progress.next_seq.max(after) + 1, |c| c.seq + 1);
            ReadResponse {
                chunks,
                next_seq,
                exited: progress.exit_code.is_some(),
                exit_code: progress.exit_code,
                closed: progress.closed,
                failure: None,
                sandbox_denied: false,
            }
        };
        let done = !reply.chunks.is_empty() || reply.closed;
        if done || tokio::time::Instant::now() >= deadline {
            return to_value(&reply);
        }
        if tokio::time::timeout_at(deadline, changed.changed())
            .await
            .is_err()
        {
            continue;
        }
    }
}

/// `process/write`: bytes to its stdin pipe or terminal.
pub(crate) async fn write(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: WriteParams = params(raw)?;
    let status = match conn.procs.get(&ask.process_id) {
        None => WriteStatus::UnknownProcess,
        Some(proc) if !proc.tty && !proc.stdin_pipe => WriteStatus::StdinClosed,
        Some(proc) => {
            tracing::trace!(process = %proc.id, write = ?ask.write_id, bytes = ask.chunk.0.len(), "process/write");
            let bytes = ask.chunk.0;
            let exec = proc.exec.clone();
            let written = tokio::task::spawn_blocking(move || exec.write_stdin(&bytes))
                .await
                .map_err(|e| RpcError::internal(e.to_string()))?;
            match written {
                Ok(()) => WriteStatus::Accepted,
                Err(ExecError::StdinClosed { .. } | ExecError::Exited { .. }) => {
                    WriteStatus::StdinClosed
                }
                Err(e) => return Err(RpcError::internal(format!("process {}: {e}", proc.id))),
            }
        }
    };
    to_value(&WriteResponse { status })
}

/// `process/signal`: `interrupt` is SIGINT to its process group.
pub(crate) fn signal(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: SignalParams = params(raw)?;
    let proc = conn
        .procs
        .get(&ask.process_id)
        .ok_or_else(|| unknown(&ask.process_id))?;
    let p::ProcessSignal::Interrupt = ask.signal;
    if proc.exec.exit_info().is_none() {
        proc.exec
            .signal_group(libc::SIGINT)
            .map_err(|e| RpcError::internal(format!("process {}: {e}", proc.id)))?;
    }
    Ok(serde_json::json!({}))
}

/// `process/terminate`: kills the whole tree if it still runs; `running`
/// says whether it did. The process leaves the table once closed.
pub(crate) async fn terminate(conn: &Connection, raw: Value) -> Result<Value, RpcError> {
    let ask: TerminateParams = params(raw)?;
    let Some(proc) = conn.procs.get(&ask.process_id) else {
        return to_value(&TerminateResponse { running: false });
    };
    let running = proc.exec.exit_info().is_none();
    conn.procs.terminated(&proc.id);
    if running {
        let report = proc.exec.terminate().await;
        if !report.survivors.is_empty() {
            tracing::warn!(survivors = ?report.survivors, process = %proc.id, "process/terminate left survivors");
        }
    }
    to_value(&TerminateResponse { running })
}

fn unknown(id: &str) -> RpcError {
    RpcError::new(
        codes::INVALID_PARAMS,
        format!("unknown process id {id:?} on this connection"),
    )
}

/// The JSON-RPC error of what the broker refused or could not start.
fn broker_error(err: &BrokerError) -> RpcError {
    match err {
        BrokerError::Refused(rejection) => RpcError::new(
            match rejection.kind {
                crate::registry::kinds::MALFORMED_REQUEST
                | crate::registry::kinds::INVALID_PARAMS => codes::INVALID_PARAMS,
                _ => codes::INVALID_REQUEST,
            },
            format!("{} (error kind {})", rejection.message, rejection.kind),
        ),
        BrokerError::Start(e) => match e {
            ExecError::NotFound { .. }
            | ExecError::WorkdirMissing { .. }
            | ExecError::WorkdirNotDirectory { .. } => {
                RpcError::new(codes::NOT_FOUND, e.to_string())
            }
            _ => RpcError::internal(e.to_string()),
        },
        BrokerError::Full(full) => RpcError::new(codes::INVALID_REQUEST, full.to_string()),
        BrokerError::Busy(busy) => RpcError::new(codes::INVALID_REQUEST, busy.to_string()),
    }
}
