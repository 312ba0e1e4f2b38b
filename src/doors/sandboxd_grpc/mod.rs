//! `serve --listen sandboxd-grpc=ADDR`: the `process.v1.ProcessService` of
//! kubernetes-sigs/agent-sandbox's sandboxd (KEP-539.2), so agent-reach can
//! be the in-pod runtime its clients (`k8s-agent-sandbox`'s
//! `commands.run`, the Go client, grpcurl) talk to.
//!
//! An adapter: every command goes through the plan stage ([`plan`]) and the
//! exec engine, like every other door. `Execute` is a one-shot command
//! ([`execute`]); `Start` a live process with its event stream ([`stream`]),
//! which `WriteStdin`, `SendSignal` and `ResizeTTY` reach by its id (its
//! seat in the broker's one session table, which only its caller reaches). Status codes follow the reference server: `NOT_FOUND` for
//! an unknown id or program, `PERMISSION_DENIED` for a cwd leaving the root
//! (and, here, raw commands off), `FAILED_PRECONDITION` for a resize
//! without a PTY, `INVALID_ARGUMENT` for an empty command or an unknown
//! signal; a missing or wrong token is `UNAUTHENTICATED`.

pub(crate) mod execute;
pub(crate) mod plan;
pub mod proto;
mod start_route;
pub(crate) mod stream;

use std::time::Instant;

use tonic::{Request, Response, Status};

use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::doors::DoorContext;
use crate::exec::{Attach, ExecError, Execution};
use crate::gate::{Caller, DoorRules, Refusal};
use plan::{ProcessRequest, broker_status};
use proto::process_v1::process_service_server::{ProcessService, ProcessServiceServer};
use proto::process_v1::{
    ExecuteRequest, ExecuteResponse, ResizeTtyRequest, ResizeTtyResponse, SendSignalRequest,
    SendSignalResponse, Signal, StartRequest, WriteStdinRequest, WriteStdinResponse,
    write_stdin_request::Payload,
};

/// The service of one listener.
#[derive(Clone)]
pub(crate) struct Service {
    broker: Broker,
    shutdown: CancellationToken,
}

/// The caller the listener's front made for this call.
fn caller_of<T>(request: &Request<T>) -> Result<Caller, Status> {
    request
        .extensions()
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("the call reached the service without passing the gate"))
}

/// Serves the listener until `shared.shutdown`, then kills every process
/// its streams still run and returns.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    shared: DoorContext,
) -> Result<(), String> {
    let service = Service {
        broker: shared.broker.clone(),
        shutdown: shared.shutdown.clone(),
    };
    // `Start` is answered in front of tonic ([`start_route`]); the gate
    // stands in front of both, as of every door (tonic's routes are an
    // axum router).
    let front = start_route::Front {
        tonic: ProcessServiceServer::new(service.clone()),
        service,
    };
    let app = tonic::service::Routes::new(front)
        .prepare()
        .into_axum_router();
    let served = crate::doors::serve_door(listener, &shared, RULES, app).await;
    // Streams end on the shutdown themselves; whatever a task had not
    // seen yet ends with the broker's table when the server stops.
    served
}

/// The largest request the gate lets through: one message of tonic's
/// default decoding limit (`Start`'s too) with its 5-byte prefix.
pub(crate) const MAX_REQUEST_BODY_BYTES: usize = 4 * 1024 * 1024 + 5;

/// What the gate holds gRPC to: the bearer token in the metadata, gRPC
/// bodies, refusals as gRPC statuses ([`refusal`]).
pub(crate) const RULES: DoorRules = DoorRules {
    body_types: &["application/grpc*"],
    body_limit: MAX_REQUEST_BODY_BYTES,
    reply: refusal,
    ..DoorRules::new("sandboxd-grpc")
};

/// A refusal of the gate as a gRPC client reads it: a trailers-only
/// answer with `UNAUTHENTICATED` (16), `PERMISSION_DENIED` (7) or
/// `RESOURCE_EXHAUSTED` (8); a body that is not gRPC gets HTTP 415, as
/// the gRPC spec has it.
fn refusal(refusal: &Refusal) -> axum::response::Response {
    let status = match refusal {
        Refusal::MissingCredential(_) | Refusal::WrongCredential(_) => unauthenticated(),
        Refusal::Host(_) | Refusal::Origin(_) => Status::permission_denied(refusal.to_string()),
        Refusal::TooLarge { .. } => Status::resource_exhausted(refusal.to_string()),
        Refusal::ContentType { .. } => {
            return crate::gate::json_reply(refusal);
        }
    };
    status.into_http::<axum::body::Body>()
}

#[tonic::async_trait]
impl ProcessService for Service {
    type StartStream = stream::EventStream;

    async fn start(
        &self,
        request: Request<StartRequest>,
    ) -> Result<Response<Self::StartStream>, Status> {
        let deadline = execute::deadline_of(request.metadata(), Instant::now());
        let caller = caller_of(&request)?;
        self.open_start(&caller, request.into_inner(), deadline)
            .await
            .map(Response::new)
    }

    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let deadline = execute::deadline_of(request.metadata(), Instant::now());
        let caller = caller_of(&request)?;
        let req = ProcessRequest::from_config(request.into_inner().config, false, false)?;
        execute::execute(&self.broker, &caller, &self.shutdown, req, deadline)
            .await
            .map(Response::new)
    }

    async fn write_stdin(
        &self,
        request: Request<WriteStdinRequest>,
    ) -> Result<Response<WriteStdinResponse>, Status> {
        let caller = caller_of(&request)?;
        let WriteStdinRequest {
            process_id,
            payload,
        } = request.into_inner();
        let exec = self.process(&caller, process_id)?;
        let written = tokio::task::spawn_blocking(move || match payload {
            Some(Payload::Eof(())) => exec.close_stdin(),
            Some(Payload::Input(bytes)) => exec.write_stdin(&bytes),
            None => Ok(()),
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        written.map_err(|e| process_error(process_id, &e))?;
        Ok(Response::new(WriteStdinResponse {}))
    }

    async fn send_signal(
        &self,
        request: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        let caller = caller_of(&request)?;
        let SendSignalRequest { process_id, signal } = request.into_inner();
        let exec = self.process(&caller, process_id)?;
        let number = match Signal::try_from(signal) {
            Ok(Signal::Sigint) => libc::SIGINT,
            Ok(Signal::Sigterm) => libc::SIGTERM,
            Ok(Signal::Sigkill) => libc::SIGKILL,
            Ok(Signal::Unspecified) | Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "unsupported or unspecified signal {signal}"
                )));
            }
        };
        // Once the command is reaped its group is gone: a no-op, as in the
        // reference server.
        let _ = exec.signal_group(number);
        Ok(Response::new(SendSignalResponse {}))
    }

    async fn resize_tty(
        &self,
        request: Request<ResizeTtyRequest>,
    ) -> Result<Response<ResizeTtyResponse>, Status> {
        let caller = caller_of(&request)?;
        let ResizeTtyRequest {
            process_id,
            cols,
            rows,
        } = request.into_inner();
        let exec = self.process(&caller, process_id)?;
        exec.resize(clamp_u16(cols), clamp_u16(rows))
            .map_err(|e| process_error(process_id, &e))?;
        Ok(Response::new(ResizeTtyResponse {}))
    }
}

impl Service {
    /// Starts a process and opens its event stream (tonic's `start` and
    /// the route in front of it, [`start_route`], both come here).
    async fn open_start(
        &self,
        caller: &Caller,
        request: StartRequest,
        deadline: Option<Instant>,
    ) -> Result<stream::EventStream, Status> {
        let StartRequest { config, pty } = request;
        let req = ProcessRequest::from_config(config, pty.is_some(), true)?;
        let request = req.to_request(&self.broker)?;
        let (tap, receiver) = crate::exec::output_tap(crate::exec::DEFAULT_TAP_CHUNKS)
            .map_err(|e| Status::internal(format!("cannot open the output stream: {e}")))?;
        let pty_size = pty
            .filter(|p| p.cols > 0 && p.rows > 0)
            .map(|p| (clamp_u16(p.cols), clamp_u16(p.rows)));
        let attach = Attach {
            tap: Some(tap),
            stdin_pipe: !req.tty,
            pty_size,
        };
        let live = self
            .broker
            .start_counted(caller, &request, "Start", Some(attach))
            .await
            .map_err(|e| broker_status(&e))?;
        Ok(stream::open(stream::Forward {
            live,
            tap: receiver,
            deadline,
            shutdown: self.shutdown.clone(),
        }))
    }

    fn process(&self, caller: &Caller, id: i32) -> Result<Execution, Status> {
        u64::try_from(id)
            .ok()
            .and_then(|id| self.broker.sessions().process_of(caller, id))
            .ok_or_else(|| Status::not_found(format!("process {id} not found")))
    }
}

/// The status of a call without the right token.
fn unauthenticated() -> Status {
    Status::unauthenticated("this server needs metadata authorization: Bearer <token>")
}

/// The status of a failed call on a live process.
fn process_error(id: i32, err: &ExecError) -> Status {
    match err {
        ExecError::StdinClosed { .. } | ExecError::Exited { .. } | ExecError::NoTerminal { .. } => {
            Status::failed_precondition(format!("process {id}: {err}"))
        }
        _ => Status::internal(format!("process {id}: {err}")),
    }
}

fn clamp_u16(value: u32) -> u16 {
    u16::try_from(value).unwrap_or(u16::MAX)
}
