//! The gate as one tower [`Layer`]: every door's router, axum's and tonic's
//! alike (tonic's routes are an axum router), is served wrapped in it, so
//! each request is checked ([`Gate::check`]), refused in its door's shape,
//! or handed on with its [`Caller`] and its body bounded by the door's limit.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, header};
use axum::response::Response;
use http_body::Body as _;
use tower::{Layer, Service};

use super::{Caller, Gate};

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
            Ok(request) => Box::pin(self.inner.call(request)),
            Err(refused) => Box::pin(std::future::ready(Ok(refused))),
        }
    }
}

/// `request` admitted, with its caller and its body bounded; or the
/// door's refusal.
fn admit(gate: &Gate, request: Request<Body>) -> Result<Request<Body>, Response> {
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
            (gate.rules().reply)(&refusal)
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
        let limit = gate.rules().body_limit;
        request = request.map(|body| Body::new(http_body_util::Limited::new(body, limit)));
    }
    Ok(request)
}
