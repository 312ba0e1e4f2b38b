//! A call answered at once goes back as one JSON body instead of an SSE
//! stream of one event.
//!
//! rmcp answers every POST of a session with `text/event-stream`, even a
//! call whose only event is its answer; JSON answers are its stateless
//! mode's alone. The streamable HTTP transport lets a server pick either
//! per request, and the difference costs clients: the Python SDK (and so
//! LangChain's adapters and the OpenAI Agents SDK) closes an SSE response
//! as soon as it has the answer, before the end of the body, which throws
//! the connection away, so every call paid a new TCP connection, where a
//! JSON body is read whole and the connection kept.
//!
//! So a POST whose SSE answer starts with the call's result (after the
//! priming event, if any) within [`JSON_WAIT`] is sent as
//! `application/json` with the same status and headers. Anything else
//! stays the stream it was, nothing lost: a progress notification or a
//! server request (elicitation) first, an answer slower than
//! [`JSON_WAIT`] (the stream then starts with what was read, and its
//! keep-alive comments reach the client before any read timeout), a
//! stream that ends or fails without an answer.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio_stream::StreamExt;

/// How long an answer may take and still go back as JSON: well under any
/// client's read timeout (the Python SDK's is 30 s), so a client waiting
/// for the headers never sees a silence longer than this, and under the
/// 2 s between progress notifications, so a long wait's stream is open
/// before its first one, as it always was.
pub(crate) const JSON_WAIT: Duration = Duration::from_secs(1);

const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";

/// The middleware on the MCP route.
pub(crate) async fn single_answer_as_json(request: Request, next: Next) -> Response {
    let candidate = request.method() == Method::POST && accepts_json(request.headers());
    let response = next.run(request).await;
    if !candidate || response.status() != StatusCode::OK || !is_event_stream(&response) {
        return response;
    }
    let deadline = tokio::time::Instant::now() + JSON_WAIT;
    let (mut parts, body) = response.into_parts();
    let mut rest = body.into_data_stream();
    let mut read: Vec<Bytes> = Vec::new();
    let mut scan = SseScan::default();
    loop {
        let next = match tokio::time::timeout_at(deadline, rest.next()).await {
            Err(_slow) => return stream_on(parts, read, rest),
            Ok(next) => next,
        };
        let bytes = match next {
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => {
                let failed = tokio_stream::once(Err::<Bytes, _>(e)).chain(rest);
                return stream_on(parts, read, failed);
            }
            None => return stream_on(parts, read, tokio_stream::empty()),
        };
        for data in scan.push(&bytes) {
            if data.is_empty() {
                // The priming event: no message yet.
                continue;
            }
            if !is_answer(&data) {
                read.push(bytes);
                return stream_on(parts, read, rest);
            }
            parts
                .headers
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
            parts.headers.remove(header::CONTENT_LENGTH);
            // The rest of the stream (nothing follows an answer) is dropped.
            return Response::from_parts(parts, Body::from(data));
        }
        read.push(bytes);
    }
}

/// The stream as it was: what was read of it, then the rest.
fn stream_on(
    parts: axum::http::response::Parts,
    read: Vec<Bytes>,
    rest: impl tokio_stream::Stream<Item = Result<Bytes, axum::Error>> + Send + 'static,
) -> Response {
    let head = tokio_stream::iter(read.into_iter().map(Ok::<_, axum::Error>));
    Response::from_parts(parts, Body::from_stream(head.chain(rest)))
}

fn accepts_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.split(';').next().unwrap_or("").trim())
        .any(|v| v.eq_ignore_ascii_case(JSON) || v == "*/*" || v == "application/*")
}

fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(EVENT_STREAM))
}

/// Whether an event's data is a JSON-RPC answer (a result or an error
/// for a request id), not a notification or a request of the server's.
fn is_answer(data: &str) -> bool {
    use serde::de::IgnoredAny;
    #[derive(serde::Deserialize)]
    struct Probe {
        id: Option<IgnoredAny>,
        method: Option<IgnoredAny>,
        result: Option<IgnoredAny>,
        error: Option<IgnoredAny>,
    }
    serde_json::from_str::<Probe>(data).is_ok_and(|p| {
        p.id.is_some() && p.method.is_none() && (p.result.is_some() || p.error.is_some())
    })
}

/// The `data` of the events of an SSE byte stream, as they complete.
#[derive(Debug, Default)]
struct SseScan {
    pending: Vec<u8>,
}

impl SseScan {
    /// Takes the next bytes; returns the data of each event they complete
    /// (its `data:` lines joined by `\n`; an event without one, such as a
    /// comment, gives nothing).
    fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut data: Option<String> = None;
        let mut consumed = 0;
        let mut start = 0;
        while let Some(at) = memchr::memchr(b'\n', &self.pending[start..]) {
            let line = &self.pending[start..start + at];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            start += at + 1;
            if line.is_empty() {
                events.extend(data.take());
                consumed = start;
                continue;
            }
            if let Some(value) = line.strip_prefix(b"data:") {
                let value = value.strip_prefix(b" ").unwrap_or(value);
                let text = String::from_utf8_lossy(value);
                match data.as_mut() {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(&text);
                    }
                    None => data = Some(text.into_owned()),
                }
            }
        }
        self.pending.drain(..consumed);
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_found_across_pushes_and_comments_give_nothing() {
        let mut scan = SseScan::default();
        assert!(scan.push(b"data:\nid: 0\nretry: 3000\n").is_empty());
        assert_eq!(scan.push(b"\n: ping\n\ndata: {\"a\"").as_slice(), [""]);
        assert!(scan.push(b":1}\r\nid: 1\r").is_empty());
        assert_eq!(scan.push(b"\n\r\n").as_slice(), ["{\"a\":1}"]);
        assert_eq!(scan.push(b"data: x\ndata: y\n\n").as_slice(), ["x\ny"]);
    }

    #[test]
    fn only_a_result_or_an_error_for_an_id_is_an_answer() {
        assert!(is_answer(
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#
        ));
        assert!(is_answer(
            r#"{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"m"}}"#
        ));
        assert!(!is_answer(
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#
        ));
        assert!(!is_answer(
            r#"{"jsonrpc":"2.0","id":9,"method":"elicitation/create","params":{}}"#
        ));
        assert!(!is_answer("not json"));
    }

    #[test]
    fn json_must_be_acceptable() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static(EVENT_STREAM));
        assert!(!accepts_json(&headers));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json;q=0.9, text/event-stream"),
        );
        assert!(accepts_json(&headers));
    }
}
