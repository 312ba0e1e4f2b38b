//! The gate's accept loop, for every listener: what `axum::serve` does,
//! plus the bounds on connections themselves.
//!
//! - A request's headers must arrive within [`HEADER_TIMEOUT`] of its
//!   first byte (of the connection, for the first request): a client that
//!   connects and sends half a request line is cut off, HTTP/1 or HTTP/2.
//! - A connection with no request in flight closes after [`IDLE_TIMEOUT`];
//!   a request still running or a reply still streaming keeps it open, and
//!   an upgraded connection (a WebSocket) is the door's, no longer watched.
//! - At most `--max-connections` connections are open across every
//!   listener of the process ([`DEFAULT_MAX_CONNECTIONS`]); past it a new
//!   connection is not accepted (it waits in the kernel's backlog) until
//!   one closes.
//!
//! Each connection's requests carry `ConnectInfo<SocketAddr>` (the peer,
//! from which the gate makes the caller). When the shutdown token is
//! cancelled the loop stops accepting and every connection ends gracefully
//! (requests in flight finish); the loop returns once all have.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderValue, Request, Response, Version, header};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tower::{Service, ServiceExt};

/// `--max-connections` when not given.
pub(crate) const DEFAULT_MAX_CONNECTIONS: u32 = 1024;
/// How long a request's headers may take to arrive.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a connection with no request in flight stays open.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Test only: [`HEADER_TIMEOUT`] in milliseconds, so the suite need not
/// wait 10 s for a half-open connection to be cut. Not for operators.
pub(crate) const HEADER_TIMEOUT_VAR: &str = "AGENT_REACH_GATE_HEADER_TIMEOUT_MS";
/// Test only: [`IDLE_TIMEOUT`] in milliseconds. Not for operators.
pub(crate) const IDLE_TIMEOUT_VAR: &str = "AGENT_REACH_GATE_IDLE_TIMEOUT_MS";
/// How long the loop pauses after an accept error that is not the
/// client's (out of descriptors), as `axum::serve` does.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The connection bounds of one process, shared by all its listeners.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    header_timeout: Duration,
    idle_timeout: Duration,
    connections: Arc<Semaphore>,
}

impl Default for Limits {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_CONNECTIONS, HEADER_TIMEOUT, IDLE_TIMEOUT)
    }
}

impl Limits {
    /// At most `max_connections` open at once (at least one).
    pub(crate) fn new(
        max_connections: u32,
        header_timeout: Duration,
        idle_timeout: Duration,
    ) -> Self {
        Self {
            header_timeout,
            idle_timeout,
            connections: Arc::new(Semaphore::new(
                usize::try_from(max_connections)
                    .unwrap_or(Semaphore::MAX_PERMITS)
                    .clamp(1, Semaphore::MAX_PERMITS),
            )),
        }
    }

    /// `max_connections` with the timeouts, or the test-only overrides of
    /// [`HEADER_TIMEOUT_VAR`] and [`IDLE_TIMEOUT_VAR`] that `var` returns.
    pub(crate) fn from_env(max_connections: u32, var: impl Fn(&str) -> Option<String>) -> Self {
        let millis = |name: &str, default: Duration| {
            var(name)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map_or(default, Duration::from_millis)
        };
        Self::new(
            max_connections,
            millis(HEADER_TIMEOUT_VAR, HEADER_TIMEOUT),
            millis(IDLE_TIMEOUT_VAR, IDLE_TIMEOUT),
        )
    }
}

/// Serves `service` on `listener` within `limits` until `shutdown`, then
/// waits for the open connections to end.
pub(crate) async fn serve<S>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    shutdown: CancellationToken,
) where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    // Every connection holds a receiver; the loop waits for all to drop.
    let (open_tx, open_rx) = watch::channel(());
    loop {
        let permit = tokio::select! {
            permit = limits.connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = shutdown.cancelled() => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection; pausing");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
        }
        let open = open_rx.clone();
        let connection = Connection {
            service: service.clone(),
            limits: limits.clone(),
            shutdown: shutdown.clone(),
            permit,
        };
        tokio::spawn(async move {
            connection.run(stream, peer).await;
            drop(open);
        });
    }
    drop(open_rx);
    open_tx.closed().await;
}

/// Errors of one client's connection, not of the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// One accepted connection and what it holds.
struct Connection<S> {
    service: S,
    limits: Limits,
    shutdown: CancellationToken,
    /// Its place under `--max-connections`, handed to its socket.
    permit: OwnedSemaphorePermit,
}

impl<S> Connection<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    async fn run(self, stream: TcpStream, peer: SocketAddr) {
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            inner: stream,
            activity: activity.clone(),
            _permit: self.permit,
        });
        let service = self.service;
        let tracking = activity.clone();
        let per_request = tower::service_fn(move |request: Request<Incoming>| {
            let in_flight = InFlight::start(tracking.clone());
            let http1 = request.version() < Version::HTTP_2;
            let read = Arc::new(AtomicBool::new(request.body().is_end_stream()));
            let mut request = request.map(|inner| {
                Body::new(ReadToEnd {
                    inner,
                    read: read.clone(),
                })
            });
            request.extensions_mut().insert(ConnectInfo(peer));
            let answer = service.clone().oneshot(request);
            async move {
                let mut response = answer.await?;
                if http1 && !read.load(Ordering::Acquire) {
                    // hyper closes a connection whose request body was not
                    // read to its end (a refusal at the gate, a door's
                    // early error); saying so keeps a client from sending
                    // its next request on it as the close arrives.
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(response.map(|body| {
                    Body::new(Tracked {
                        inner: body,
                        _in_flight: in_flight,
                    })
                }))
            }
        });
        let mut builder = Builder::new(TokioExecutor::new());
        builder.http2().enable_connect_protocol();
        let mut conn =
            pin!(builder.serve_connection_with_upgrades(io, TowerToHyperService::new(per_request)));
        let mut closing = false;
        loop {
            let deadline = activity.deadline(&self.limits);
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        tracing::trace!(error = %e, %peer, "connection ended with an error");
                    }
                    break;
                }
                () = self.shutdown.cancelled(), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                () = activity.changed.notified() => {}
                () = sleep_until(deadline) => {
                    if activity.deadline(&self.limits).is_some_and(|d| d <= Instant::now()) {
                        tracing::debug!(%peer, "closing a connection: headers too slow or idle too long");
                        break;
                    }
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// What the watchdog of one connection sees: requests in flight, when the
/// last one ended, when the head of the next began to arrive.
struct Activity {
    epoch: Instant,
    in_flight: AtomicUsize,
    /// Whether any request has reached the service.
    served: AtomicBool,
    /// Whether the client speaks HTTP/2 (its bytes while idle are pings and
    /// window updates, not the head of a request).
    http2: AtomicBool,
    /// Whether the first bytes have been seen.
    read_any: AtomicBool,
    /// Milliseconds after `epoch` plus one when bytes of a request head
    /// began to arrive with nothing in flight; 0 when none.
    head_since: AtomicU64,
    /// Milliseconds after `epoch` when the last request ended.
    idle_since: AtomicU64,
    changed: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            http2: AtomicBool::new(false),
            read_any: AtomicBool::new(false),
            head_since: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// Bytes arrived: the head of a request, if nothing is in flight.
    fn on_read(&self, first: &[u8]) {
        if !self.read_any.swap(true, Ordering::Relaxed) {
            self.http2
                .store(first.starts_with(b"PRI "), Ordering::Relaxed);
        }
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.served.load(Ordering::Relaxed)
            && !self.http2.load(Ordering::Relaxed)
            && self.head_since.load(Ordering::Relaxed) == 0
        {
            self.head_since.store(self.now_ms() + 1, Ordering::Relaxed);
            self.changed.notify_one();
        }
    }

    /// When the connection is to be closed, if nothing happens before;
    /// `None` while a request is in flight.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        if !self.served.load(Ordering::Acquire) {
            return Some(self.epoch + limits.header_timeout);
        }
        match self.head_since.load(Ordering::Acquire) {
            0 => Some(self.at(self.idle_since.load(Ordering::Acquire)) + limits.idle_timeout),
            since => Some(self.at(since - 1) + limits.header_timeout),
        }
    }
}

/// One request in flight, from its head to the end of its reply.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        activity.served.store(true, Ordering::Release);
        activity.head_since.store(0, Ordering::Release);
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        activity
            .idle_since
            .store(activity.now_ms(), Ordering::Release);
        if activity.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            activity.changed.notify_one();
        }
    }
}

/// A reply's body, keeping its request in flight until it is sent.
struct Tracked {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A request's body, raising `read` once it has been read to its end.
struct ReadToEnd {
    inner: Incoming,
    read: Arc<AtomicBool>,
}

impl http_body::Body for ReadToEnd {
    type Data = axum::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The connection's socket, telling its [`Activity`] when bytes arrive.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// Its place under `--max-connections`: held by the socket itself, so
    /// a connection upgraded to a WebSocket (which outlives the HTTP
    /// connection's task) counts until the socket closes.
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_read(&buf.filled()[before..]);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::new(2, Duration::from_secs(10), Duration::from_secs(60))
    }

    #[test]
    fn a_connection_waits_for_its_first_head_then_idles_between_requests() {
        let activity = Arc::new(Activity::new());
        let limits = limits();
        assert_eq!(
            activity.deadline(&limits),
            Some(activity.epoch + Duration::from_secs(10)),
            "the first request's head is due within the header timeout"
        );
        let request = InFlight::start(activity.clone());
        assert_eq!(
            activity.deadline(&limits),
            None,
            "a request in flight is not idle"
        );
        activity.on_read(b"more of the body");
        assert_eq!(activity.deadline(&limits), None);
        drop(request);
        let idle = activity.deadline(&limits).unwrap();
        assert!(idle >= activity.epoch + Duration::from_secs(60), "{idle:?}");
        activity.on_read(b"GET / HT");
        let head = activity.deadline(&limits).unwrap();
        assert!(
            head < idle && head >= activity.epoch + Duration::from_secs(10),
            "the next head is due within the header timeout of its first byte"
        );
    }

    #[test]
    fn bytes_of_an_idle_http2_connection_are_not_a_request_head() {
        let activity = Arc::new(Activity::new());
        activity.on_read(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        drop(InFlight::start(activity.clone()));
        let idle = activity.deadline(&limits());
        activity.on_read(b"a ping frame");
        assert_eq!(activity.deadline(&limits()), idle);
    }

    #[test]
    fn the_test_only_variables_set_the_timeouts() {
        let limits = Limits::from_env(3, |name| {
            (name == HEADER_TIMEOUT_VAR).then(|| "250".to_owned())
        });
        assert_eq!(limits.header_timeout, Duration::from_millis(250));
        assert_eq!(limits.idle_timeout, IDLE_TIMEOUT);
        assert_eq!(limits.connections.available_permits(), 3);
        assert_eq!(Limits::default().header_timeout, HEADER_TIMEOUT);
    }
}
