//! What stands in front of tonic's `ProcessService` (behind the gate):
//! `Start` answered below tonic, so a stream's output goes out without a
//! copy.
//!
//! tonic encodes each message into a buffer of its own: prost copies the
//! `bytes` field in, which for a flood is a copy of every byte on the
//! server's busiest threads (a sixth of its CPU on a `Start` stream of
//! `yes`). This route answers `/process.v1.ProcessService/Start` itself:
//! it reads the one request message as tonic would,
//! opens the stream through the same [`Service::open_start`], and frames
//! each event by hand: the gRPC message prefix, the field's tag and length
//! in a few bytes of their own, then the chunk of output as the pump read
//! it, handed to HTTP/2 as it is. The trailers carry `grpc-status` (and
//! `grpc-message`) as tonic's would. Every other method goes to tonic.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::Frame;
use http_body_util::BodyExt;
use prost::Message;
use tokio_stream::Stream;
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Bytes, Service as TowerService, http};
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;

use super::proto::process_v1::start_response::Event;
use super::proto::process_v1::{StartRequest, StartResponse};
use super::stream::EventStream;
use super::{Service, execute};

/// The method this route answers.
const START_PATH: &str = "/process.v1.ProcessService/Start";
/// The largest `Start` request read (tonic's default decoding limit).
const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
/// The protobuf field numbers of `StartResponse.stdout` and `.stderr`.
const STDOUT_FIELD: u8 = 2;
const STDERR_FIELD: u8 = 3;

/// tonic's `ProcessService`, with `Start` taken out in front of it.
#[derive(Clone)]
pub(crate) struct Front<S> {
    pub(crate) tonic: S,
    pub(crate) service: Service,
}

impl<S> NamedService for Front<S> {
    const NAME: &'static str = "process.v1.ProcessService";
}

impl<S, B> TowerService<http::Request<Body>> for Front<S>
where
    S: TowerService<http::Request<Body>, Response = http::Response<B>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.tonic.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != START_PATH {
            let answer = self.tonic.call(request);
            return Box::pin(async move { answer.await.map(|r| r.map(Body::new)) });
        }
        let service = self.service.clone();
        Box::pin(async move {
            Ok(match start(&service, request).await {
                Ok(response) => response,
                Err(status) => status.into_http(),
            })
        })
    }
}

async fn start(
    service: &Service,
    request: http::Request<Body>,
) -> Result<http::Response<Body>, Status> {
    let (parts, body) = request.into_parts();
    if parts
        .headers
        .get("grpc-encoding")
        .is_some_and(|e| e.as_bytes() != b"identity")
    {
        return Err(Status::unimplemented(
            "compressed requests are not supported (grpc-encoding identity only)",
        ));
    }
    let metadata = MetadataMap::from_headers(parts.headers);
    let deadline = execute::deadline_of(&metadata, Instant::now());
    let bytes = http_body_util::Limited::new(body, MAX_REQUEST_BYTES + 5)
        .collect()
        .await
        .map_err(|e| Status::invalid_argument(format!("cannot read the request: {e}")))?
        .to_bytes();
    let request = StartRequest::decode(one_message(&bytes)?)
        .map_err(|e| Status::internal(format!("failed to decode the StartRequest: {e}")))?;
    let caller = parts
        .extensions
        .get::<crate::gate::Caller>()
        .cloned()
        .ok_or_else(|| Status::internal("the call reached the service without passing the gate"))?;
    let events = service.open_start(&caller, request, deadline).await?;
    let body = http_body_util::StreamBody::new(Frames {
        events,
        queued: None,
        done: false,
    });
    http::Response::builder()
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .body(Body::new(body))
        .map_err(|e| Status::internal(e.to_string()))
}

/// The message of a unary request body: one uncompressed gRPC frame.
fn one_message(body: &[u8]) -> Result<&[u8], Status> {
    let bad = |why: &str| Status::internal(format!("malformed request frame: {why}"));
    let (prefix, rest) = body
        .split_at_checked(5)
        .ok_or_else(|| bad("shorter than its prefix"))?;
    if prefix[0] != 0 {
        return Err(Status::unimplemented(
            "compressed messages are not supported",
        ));
    }
    let length = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if length != rest.len() {
        return Err(bad("not exactly one message"));
    }
    Ok(rest)
}

/// A stream's events as HTTP/2 body frames, then its trailers.
struct Frames {
    events: EventStream,
    /// The output chunk that follows the head just sent.
    queued: Option<Frame<Bytes>>,
    done: bool,
}

impl Stream for Frames {
    type Item = Result<Frame<Bytes>, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(frame) = self.queued.take() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let next = match Pin::new(&mut self.events).poll_next(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(next) => next,
        };
        let status = match next {
            Some(Ok(event)) => {
                let (head, chunk) = framed(event);
                self.queued = chunk.map(Frame::data);
                return Poll::Ready(Some(Ok(Frame::data(head))));
            }
            Some(Err(status)) => status,
            None => Status::ok(""),
        };
        self.done = true;
        Poll::Ready(Some(Ok(Frame::trailers(trailers(&status)))))
    }
}

/// The trailers of a finished call.
fn trailers(status: &Status) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    if status.add_header(&mut map).is_err() {
        map.insert("grpc-status", http::HeaderValue::from_static("13"));
    }
    map
}

/// One event as a gRPC message: the prefix (and, for output, the field's
/// tag and length) and the output chunk itself, uncopied.
fn framed(event: StartResponse) -> (Bytes, Option<Bytes>) {
    let (field, bytes) = match event.event {
        Some(Event::Stdout(bytes)) => (STDOUT_FIELD, bytes),
        Some(Event::Stderr(bytes)) => (STDERR_FIELD, bytes),
        other => {
            let message = StartResponse { event: other }.encode_to_vec();
            let mut head = prefix(message.len());
            head.extend_from_slice(&message);
            return (head.into(), None);
        }
    };
    let mut key = Vec::with_capacity(11);
    key.push(field << 3 | 2);
    prost::encoding::encode_varint(bytes.len() as u64, &mut key);
    let mut head = prefix(key.len() + bytes.len());
    head.extend_from_slice(&key);
    (head.into(), (!bytes.is_empty()).then(|| bytes.into()))
}

/// The 5-byte prefix of an uncompressed gRPC message of `length` bytes.
fn prefix(length: usize) -> Vec<u8> {
    let mut head = Vec::with_capacity(5 + 11);
    head.push(0);
    head.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes());
    head
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doors::sandboxd_grpc::proto::process_v1::{ExitEvent, InitEvent};

    /// What tonic would send: the prefix and prost's encoding.
    fn tonic_framing(event: &StartResponse) -> Vec<u8> {
        let message = event.encode_to_vec();
        let mut out = prefix(message.len());
        out.extend_from_slice(&message);
        out
    }

    #[test]
    fn the_hand_framing_is_byte_for_byte_what_tonic_sends() {
        let events = [
            Event::Stdout(b"hello\n".to_vec()),
            Event::Stderr(vec![0xff; 300]),
            Event::Stdout(vec![b'y'; 512 * 1024]),
            Event::Stdout(Vec::new()),
            Event::Init(InitEvent { process_id: 7 }),
            Event::Exit(ExitEvent { exit_code: -1 }),
        ];
        for event in events {
            let event = StartResponse { event: Some(event) };
            let expected = tonic_framing(&event);
            let (head, chunk) = framed(event.clone());
            let mut got = head.to_vec();
            got.extend_from_slice(chunk.as_deref().unwrap_or_default());
            assert_eq!(
                got,
                expected,
                "{:?}",
                event.event.map(|e| format!("{e:?}").len())
            );
        }
    }

    #[test]
    fn a_request_body_is_exactly_one_uncompressed_message() {
        assert_eq!(one_message(&[0, 0, 0, 0, 2, 8, 1]).unwrap(), &[8, 1]);
        assert_eq!(one_message(&[0, 0, 0, 0, 0]).unwrap(), &[] as &[u8]);
        let short = one_message(&[0, 0, 0]).unwrap_err();
        assert_eq!(short.code(), tonic::Code::Internal);
        let two = one_message(&[0, 0, 0, 0, 1, 8, 1]).unwrap_err();
        assert_eq!(two.code(), tonic::Code::Internal);
        let compressed = one_message(&[1, 0, 0, 0, 1, 8]).unwrap_err();
        assert_eq!(compressed.code(), tonic::Code::Unimplemented);
    }

    #[test]
    fn trailers_carry_the_status() {
        let ok = trailers(&Status::ok(""));
        assert_eq!(ok["grpc-status"], "0");
        let cut = trailers(&Status::deadline_exceeded("the call's deadline passed"));
        assert_eq!(cut["grpc-status"], "4");
        assert!(cut["grpc-message"].to_str().unwrap().contains("deadline"));
    }
}
