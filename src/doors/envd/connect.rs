//! The Connect protocol (connectrpc.com/docs/protocol) as E2B's SDKs speak
//! it to envd: unary calls as `application/json` or `application/proto`
//! bodies, streams as enveloped messages (`application/connect+json` or
//! `application/connect+proto`: a flag byte, a 4-byte big-endian length,
//! the message), a stream's end as a flagged envelope holding `{}` or
//! `{"error": {...}}`, a unary error as a JSON `{"code", "message"}` body
//! with its HTTP status, and `Connect-Timeout-Ms` as the call's deadline.
//!
//! Messages are prost's; the JSON codec is the proto3 JSON mapping, read
//! and written through the descriptors of `proto/envd/` (prost-reflect),
//! unknown fields ignored as the SDK's own codec does.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};
use tokio::sync::mpsc;

/// The descriptor set build.rs wrote for `proto/envd/`.
static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/envd_descriptors.bin"));

/// Envelopes queued for the client before a stream's producer waits.
pub(crate) const STREAM_QUEUE: usize = 8;
/// The flag of a stream's last envelope (its end, with any error).
const END_STREAM: u8 = 0x02;
/// The flag of a compressed envelope (compression is not negotiated here).
const COMPRESSED: u8 = 0x01;
/// The request header carrying a call's deadline, in milliseconds.
pub(crate) const TIMEOUT_HEADER: &str = "connect-timeout-ms";
/// The request header naming the keepalive interval, in seconds.
const KEEPALIVE_HEADER: &str = "keepalive-ping-interval";
/// The shortest keepalive interval honoured.
const MIN_KEEPALIVE: Duration = Duration::from_secs(1);

/// The descriptors of `proto/envd/`.
fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        #[expect(
            clippy::expect_used,
            reason = "the descriptor set is built from proto/envd/ by build.rs: it always decodes"
        )]
        DescriptorPool::decode(DESCRIPTORS).expect("the envd descriptors build.rs wrote")
    })
}

/// A message type of `proto/envd/` by its full name (`process.StartRequest`).
pub(crate) fn message(name: &str) -> Option<MessageDescriptor> {
    pool().get_message_by_name(name)
}

/// Connect's error codes, by the names its JSON uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Unimplemented,
    Internal,
    Unavailable,
    Unauthenticated,
}

impl Code {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// The HTTP status of a unary error with this code (the protocol's table).
    pub(crate) fn http_status(self) -> StatusCode {
        match self {
            Code::InvalidArgument | Code::FailedPrecondition => StatusCode::BAD_REQUEST,
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists => StatusCode::CONFLICT,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }
}

/// A Connect error: its code and message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.name())]
pub(crate) struct ConnectError {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl ConnectError {
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code.name(), "message": self.message})
    }
}

/// How a call's messages are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Codec {
    Json,
    Proto,
}

/// A unary call (`application/json`, `application/proto`) or a stream
/// (`application/connect+json`, `application/connect+proto`), by its
/// content type; `None` for anything else.
pub(crate) fn codec_of(headers: &HeaderMap, streaming: bool) -> Option<Codec> {
    let essence = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())?;
    match (streaming, essence.as_str()) {
        (false, "application/json") | (true, "application/connect+json") => Some(Codec::Json),
        (false, "application/proto") | (true, "application/connect+proto") => Some(Codec::Proto),
        _ => None,
    }
}

/// The content type of a reply in `codec`.
fn content_type(codec: Codec, streaming: bool) -> &'static str {
    match (streaming, codec) {
        (false, Codec::Json) => "application/json",
        (false, Codec::Proto) => "application/proto",
        (true, Codec::Json) => "application/connect+json",
        (true, Codec::Proto) => "application/connect+proto",
    }
}

/// The deadline `Connect-Timeout-Ms` asks for, from `now`; none without it.
pub(crate) fn deadline_of(headers: &HeaderMap, now: Instant) -> Option<Instant> {
    let ms: u64 = headers
        .get(TIMEOUT_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(now + Duration::from_millis(ms))
}

/// Reads a `T` written in `codec` (its type named by `name`).
pub(crate) fn decode<T: prost::Message + Default>(
    codec: Codec,
    name: &str,
    bytes: &[u8],
) -> Result<T, ConnectError> {
    let invalid = |e: &dyn std::fmt::Display| {
        ConnectError::new(Code::InvalidArgument, format!("cannot read {name}: {e}"))
    };
    match codec {
        Codec::Proto => T::decode(bytes).map_err(|e| invalid(&e)),
        Codec::Json => {
            let desc = message(name).ok_or_else(|| {
                ConnectError::new(Code::Internal, format!("no definition of {name}"))
            })?;
            let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
                b"{}".as_slice()
            } else {
                bytes
            };
            let mut de = serde_json::Deserializer::from_slice(bytes);
            let options = DeserializeOptions::new().deny_unknown_fields(false);
            let dynamic = DynamicMessage::deserialize_with_options(desc, &mut de, &options)
                .map_err(|e| invalid(&e))?;
            T::decode(prost::Message::encode_to_vec(&dynamic).as_slice()).map_err(|e| invalid(&e))
        }
    }
}

/// Writes `msg` (its type named by `name`) in `codec`.
pub(crate) fn encode<T: prost::Message>(codec: Codec, name: &str, msg: &T) -> Vec<u8> {
    let binary = msg.encode_to_vec();
    match codec {
        Codec::Proto => binary,
        Codec::Json => message(name)
            .and_then(|desc| DynamicMessage::decode(desc, binary.as_slice()).ok())
            .and_then(|dynamic| serde_json::to_vec(&dynamic).ok())
            .unwrap_or_else(|| b"{}".to_vec()),
    }
}

/// One envelope: `flags`, the length, `payload`.
fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.push(flags);
    out.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(payload);
    Bytes::from(out)
}

/// The messages of an enveloped request body, in order; a compressed or
/// cut envelope is an error.
pub(crate) fn envelopes(mut body: &[u8]) -> Result<Vec<&[u8]>, ConnectError> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let cut = || ConnectError::new(Code::InvalidArgument, "a request envelope is cut short");
        let (head, rest) = body.split_at_checked(5).ok_or_else(cut)?;
        if head[0] & COMPRESSED != 0 {
            return Err(ConnectError::new(
                Code::Unimplemented,
                "compressed messages are not supported; send them uncompressed",
            ));
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let (payload, rest) = rest.split_at_checked(len).ok_or_else(cut)?;
        if head[0] & END_STREAM == 0 {
            out.push(payload);
        }
        body = rest;
    }
    Ok(out)
}

/// The reply of a unary call: `msg`, or the error with its HTTP status.
pub(crate) fn unary_reply<T: prost::Message>(
    codec: Codec,
    name: &str,
    result: Result<T, ConnectError>,
) -> Response {
    match result {
        Ok(msg) => (
            [(header::CONTENT_TYPE, content_type(codec, false))],
            encode(codec, name, &msg),
        )
            .into_response(),
        Err(err) => unary_error(&err),
    }
}

/// A unary error: its HTTP status and `{"code", "message"}`.
pub(crate) fn unary_error(err: &ConnectError) -> Response {
    (
        err.code.http_status(),
        [(header::CONTENT_TYPE, "application/json")],
        err.json().to_string(),
    )
        .into_response()
}

/// The producer's end of a stream reply.
#[derive(Debug)]
pub(crate) struct StreamOut {
    codec: Codec,
    name: &'static str,
    tx: mpsc::Sender<Result<Bytes, std::convert::Infallible>>,
}

impl StreamOut {
    /// Sends one message; `false` once the client went away.
    pub(crate) async fn send<T: prost::Message>(&self, msg: &T) -> bool {
        let payload = encode(self.codec, self.name, msg);
        self.tx.send(Ok(envelope(0, &payload))).await.is_ok()
    }

    /// Resolves when the client went away.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Ends the stream, with `error` or cleanly.
    pub(crate) async fn end(self, error: Option<ConnectError>) {
        let last = match error {
            Some(err) => serde_json::json!({"error": err.json()}),
            None => serde_json::json!({}),
        };
        let _ = self
            .tx
            .send(Ok(envelope(END_STREAM, last.to_string().as_bytes())))
            .await;
    }
}

/// A stream reply whose messages (of type `name`) `StreamOut` sends.
pub(crate) fn stream_reply(codec: Codec, name: &'static str) -> (StreamOut, Response) {
    let (tx, rx) = mpsc::channel(STREAM_QUEUE);
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(codec, true)),
    );
    (StreamOut { codec, name, tx }, response)
}

/// A stream that fails before its first message: status 200 and an end
/// envelope holding the error, as Connect answers streams.
pub(crate) fn stream_error(codec: Codec, err: &ConnectError) -> Response {
    let body = envelope(
        END_STREAM,
        serde_json::json!({"error": err.json()})
            .to_string()
            .as_bytes(),
    );
    ([(header::CONTENT_TYPE, content_type(codec, true))], body).into_response()
}

/// The one message of a server stream's request body.
pub(crate) fn one_message<T: prost::Message + Default>(
    codec: Codec,
    name: &str,
    body: &[u8],
) -> Result<T, ConnectError> {
    let messages = envelopes(body)?;
    let [payload] = messages.as_slice() else {
        return Err(ConnectError::new(
            Code::InvalidArgument,
            format!("a stream request carries exactly one {name}"),
        ));
    };
    decode(codec, name, payload)
}

/// The keepalive interval the client asks for (`Keepalive-Ping-Interval`, seconds).
pub(crate) fn keepalive_of(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get(KEEPALIVE_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs).max(MIN_KEEPALIVE))
}

/// A stream call whose body type is not one of Connect's stream codecs.
pub(crate) fn bad_content_type() -> Response {
    unary_error(&ConnectError::new(
        Code::InvalidArgument,
        "a stream call's body must be application/connect+json or application/connect+proto",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keepalive_interval_is_read_in_seconds_and_never_below_one() {
        let mut headers = HeaderMap::new();
        assert_eq!(keepalive_of(&headers), None);
        headers.insert(KEEPALIVE_HEADER, HeaderValue::from_static("50"));
        assert_eq!(keepalive_of(&headers), Some(Duration::from_secs(50)));
        headers.insert(KEEPALIVE_HEADER, HeaderValue::from_static("0"));
        assert_eq!(keepalive_of(&headers), Some(MIN_KEEPALIVE));
    }
    use crate::doors::envd::proto::process::{
        ProcessEvent, StartResponse, process_event, process_event::data_event,
    };

    #[test]
    fn bytes_travel_as_base64_and_fields_in_camel_case_in_json() {
        let msg = StartResponse {
            event: Some(ProcessEvent {
                event: Some(process_event::Event::Data(process_event::DataEvent {
                    output: Some(data_event::Output::Stdout(b"hi\n".to_vec())),
                })),
            }),
        };
        let json = encode(Codec::Json, "process.StartResponse", &msg);
        assert_eq!(
            String::from_utf8(json.clone()).unwrap(),
            r#"{"event":{"data":{"stdout":"aGkK"}}}"#
        );
        let back: StartResponse = decode(Codec::Json, "process.StartResponse", &json).unwrap();
        assert_eq!(back, msg);
    }

    #[test]
    fn unknown_json_fields_are_ignored_and_an_empty_body_is_the_empty_message() {
        let req: crate::doors::envd::proto::process::ListRequest =
            decode(Codec::Json, "process.ListRequest", br#"{"future":1}"#).unwrap();
        assert_eq!(req, Default::default());
        let req: crate::doors::envd::proto::process::ListRequest =
            decode(Codec::Json, "process.ListRequest", b"").unwrap();
        assert_eq!(req, Default::default());
    }

    #[test]
    fn envelopes_are_read_in_order_and_a_cut_one_is_refused() {
        let mut body = envelope(0, b"one").to_vec();
        body.extend_from_slice(&envelope(0, b"two"));
        assert_eq!(envelopes(&body).unwrap(), vec![&b"one"[..], &b"two"[..]]);
        assert_eq!(
            envelopes(&body[..body.len() - 1]).unwrap_err().code,
            Code::InvalidArgument
        );
    }

    #[test]
    fn the_deadline_is_the_header_in_milliseconds() {
        let mut headers = HeaderMap::new();
        let now = Instant::now();
        assert_eq!(deadline_of(&headers, now), None);
        headers.insert(TIMEOUT_HEADER, HeaderValue::from_static("1500"));
        assert_eq!(
            deadline_of(&headers, now),
            Some(now + Duration::from_millis(1500))
        );
    }
}
