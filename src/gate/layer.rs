//! The gate as one tower [`Layer`]: every door's router, axum's and tonic's
//! alike (tonic's routes are an axum router), is served wrapped in it, so
//! each request is checked ([`Gate::check`]), refused in its door's shape,
//! or handed on with its [`Caller`] and its body bounded by the door's limit:
//! a body without a length that grows over it is cut there, and whatever
//! the door answers then, the caller gets the door's 413.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, header};
use axum::response::Response;
use http_body::Body as _;
use tower::{Layer, Service};

use super::{Caller, Gate, Refusal};

/// Puts the gate in front of a service.
#[derive(Debug, Clone)]
pub(crate) struct GateLayer {
    gate: Arc<Gate>,
}

impl GateLayer {
    pub(crate) fn new(gate: Gate) -> Self {
        Self {
            gate: Arc::new(gate),
        }
    }
}

impl<S> Layer<S> for GateLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Admit<S> {
        Admit {
            gate: self.gate.clone(),
            inner,
        }
    }
}

/// A service behind the gate.
#[derive(Debug, Clone)]
pub(crate) struct Admit<S> {
    gate: Arc<Gate>,
    inner: S,
}

type Answer = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<S> Service<Request<Body>> for Admit<S>
where
    S: Service<Request<Body>, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Answer {
        match admit(&self.gate, request) {
            Ok((request, None)) => Box::pin(self.inner.call(request)),
            Ok((request, Some((over, limit)))) => {
                let answer = self.inner.call(request);
                let gate = self.gate.clone();
                Box::pin(async move {
                    let response = answer.await?;
                    if !over.load(Ordering::Acquire) {
                        return Ok(response);
                    }
                    let refusal = Refusal::TooLarge {
                        length: u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1),
                        limit,
                    };
                    tracing::warn!(door = gate.rules().door, reason = %refusal, "request body cut at the gate");
                    Ok((gate.rules().reply)(&refusal))
                })
            }
            Err(refusal) => {
                let refused = (self.gate.rules().reply)(&refusal);
                Box::pin(std::future::ready(Ok(refused)))
            }
        }
    }
}

/// A body without a length, counted as it comes: the flag it raises past
/// its limit, and that limit.
type Streamed = (Arc<AtomicBool>, usize);

/// `request` admitted, with its caller and its body bounded (and the flag
/// its body raises if it grows over the limit); or why not.
fn admit(
    gate: &Gate,
    request: Request<Body>,
) -> Result<(Request<Body>, Option<Streamed>), Refusal> {
    let more_body = !request.body().is_end_stream();
    let digest = gate
        .check(
            request.method(),
            request.uri(),
            request.headers(),
            more_body,
        )
        .map_err(|refusal| {
            tracing::warn!(
                door = gate.rules().door,
                reason = %refusal,
                path = %request.uri().path(),
                "request refused at the gate"
            );
            refusal
        })?;
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    let mut request = request;
    request
        .extensions_mut()
        .insert(Caller::remote(gate.rules().door, peer, digest));
    // A body with a length was measured against the limit already (and
    // hyper holds it to that length); one without is counted as it comes.
    if more_body && !request.headers().contains_key(header::CONTENT_LENGTH) {
        let over = Arc::new(AtomicBool::new(false));
        let limit = gate.body_limit(request.headers());
        let capped = Capped {
            left: limit,
            over: over.clone(),
        };
        let request = request.map(|inner| Body::new(capped.around(inner)));
        return Ok((request, Some((over, limit))));
    }
    Ok((request, None))
}

/// A body counted as it arrives ([`http_body_util::Limited`]): past `left`
/// bytes it ends with `LengthLimitError` (which axum's extractors answer
/// with 413) and raises `over`.
struct Capped {
    left: usize,
    over: Arc<AtomicBool>,
}

impl Capped {
    fn around(self, inner: Body) -> CappedBody {
        CappedBody {
            inner: http_body_util::Limited::new(inner, self.left),
            over: self.over,
        }
    }
}

struct CappedBody {
    inner: http_body_util::Limited<Body>,
    over: Arc<AtomicBool>,
}

impl http_body::Body for CappedBody {
    type Data = axum::body::Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Err(e)) = &polled
            && e.is::<http_body_util::LengthLimitError>()
        {
            self.over.store(true, Ordering::Release);
        }
        Poll::Ready(polled)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use axum::Extension;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::*;
    use crate::gate::DoorRules;
    use crate::gate::auth::{Auth, Token};

    fn gated(token: Option<&str>, rules: DoorRules) -> Admit<axum::Router> {
        let app = axum::Router::new().route(
            "/who",
            post(
                |Extension(caller): Extension<Caller>, body: axum::body::Bytes| async move {
                    format!("{caller} read {}", body.len())
                },
            ),
        );
        let gate = Gate::new(
            "127.0.0.1:8000".parse().unwrap(),
            &[],
            Auth::new(token.and_then(Token::new)),
            rules,
        );
        GateLayer::new(gate).layer(app)
    }

    fn request(token: Option<&str>, body: Body) -> Request<Body> {
        let mut builder = Request::post("/who")
            .header("host", "127.0.0.1:8000")
            .header("content-type", "application/json");
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        let mut request = builder.body(body).unwrap();
        request
            .extensions_mut()
            .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 7], 4000))));
        request
    }

    async fn text(response: Response) -> (u16, String) {
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn an_admitted_request_carries_its_caller_and_never_the_token() {
        let service = gated(Some("s3cret"), DoorRules::new("test"));
        let response = service
            .oneshot(request(Some("s3cret"), Body::from("{}")))
            .await
            .unwrap();
        let (status, text) = text(response).await;
        assert_eq!(status, 200, "{text}");
        let digest = crate::gate::auth::digest(b"s3cret");
        assert_eq!(text, format!("test:127.0.0.7/{digest:016x} read 2"));
        assert!(!text.contains("s3cret"));
    }

    #[tokio::test]
    async fn a_request_without_the_token_never_reaches_the_door() {
        let service = gated(Some("s3cret"), DoorRules::new("test"));
        let response = service
            .oneshot(request(None, Body::from("{}")))
            .await
            .unwrap();
        assert_eq!(response.status(), 401);
    }

    #[tokio::test]
    async fn a_streamed_body_over_the_limit_gets_the_doors_413() {
        let rules = DoorRules {
            body_limit: 4,
            ..DoorRules::new("test")
        };
        let chunks = futures_chunks(&["ab", "cd", "e"]);
        let response = gated(None, rules)
            .oneshot(request(None, chunks))
            .await
            .unwrap();
        let (status, text) = text(response).await;
        assert_eq!(status, 413, "{text}");
        assert!(text.contains("payload_too_large"), "{text}");
        let fits = gated(None, rules)
            .oneshot(request(None, futures_chunks(&["ab", "cd"])))
            .await
            .unwrap();
        assert_eq!(text_status(fits).await, 200);
    }

    async fn text_status(response: Response) -> u16 {
        text(response).await.0
    }

    /// A body of `chunks` with no length, as a chunked or HTTP/2 one.
    fn futures_chunks(chunks: &[&'static str]) -> Body {
        let frames: Vec<Result<axum::body::Bytes, Infallible>> = chunks
            .iter()
            .map(|c| Ok(axum::body::Bytes::from_static(c.as_bytes())))
            .collect();
        Body::from_stream(tokio_stream::iter(frames))
    }
}
