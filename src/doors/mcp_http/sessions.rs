//! rmcp's in-memory session manager, with one thing added: a request whose
//! HTTP connection drops before its answer is cancelled, as if the client
//! had sent `notifications/cancelled`.
//!
//! Without it the call would run on and its answer (the output of a poll,
//! read once and gone from the session) would wait in a cache the client
//! never asks for. Cancelled, the wait ends having read nothing, the process
//! goes on, and the client's next `write_stdin` gets the output.
//!
//! And a `DELETE` naming a session this server does not hold is 404, as
//! the transport answers every other request naming one (rmcp would close
//! nothing and say it did).
//!
//! At most `--max-clients` MCP sessions live at once: a new one past it ends
//! the session idle longest (its processes die with its client seat), so
//! a flood of `initialize` calls holds a bounded amount of memory.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use rmcp::model::{ClientJsonRpcMessage, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId,
};
use tokio_stream::Stream;

/// [`LocalSessionManager`], cancelling the requests whose stream is dropped.
#[derive(Debug)]
pub(crate) struct Sessions {
    local: Arc<LocalSessionManager>,
    /// `--max-clients`.
    max_clients: usize,
    /// When each live session was last used.
    last_used: Mutex<HashMap<SessionId, Instant>>,
}

impl Sessions {
    pub(crate) fn new(local: LocalSessionManager, max_clients: usize) -> Self {
        Self {
            local: Arc::new(local),
            max_clients: max_clients.max(1),
            last_used: Mutex::new(HashMap::new()),
        }
    }

    fn touch(&self, id: &SessionId) {
        if let Some(at) = crate::sync::lock(&self.last_used).get_mut(id) {
            *at = Instant::now();
        }
    }

    /// Ends sessions idle longest until one more fits under `--max-clients`
    /// (forgetting those rmcp already ended at its idle timeout).
    async fn make_room(&self) {
        loop {
            let oldest = {
                let used = crate::sync::lock(&self.last_used);
                if used.len() < self.max_clients {
                    return;
                }
                used.iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(id, _)| id.clone())
            };
            let Some(oldest) = oldest else { return };
            crate::sync::lock(&self.last_used).remove(&oldest);
            if self.local.has_session(&oldest).await.unwrap_or(false) {
                tracing::info!(session = %oldest, max_clients = self.max_clients, "MCP client limit reached: ending the session idle longest");
                let _ = self.local.close_session(&oldest).await;
            }
        }
    }
}

type Local = LocalSessionManager;

impl SessionManager for Sessions {
    type Error = <Local as SessionManager>::Error;
    type Transport = <Local as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        self.make_room().await;
        let created = self.local.create_session().await?;
        crate::sync::lock(&self.last_used).insert(created.0.clone(), Instant::now());
        Ok(created)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.local.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.local.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        crate::sync::lock(&self.last_used).remove(id);
        self.local.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let request = match &message {
            ClientJsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        self.touch(id);
        let stream = self.local.create_stream(id, message).await?;
        Ok(CancelOnDisconnect {
            inner: Box::pin(stream),
            guard: request.map(|request| Unanswered {
                sessions: self.local.clone(),
                session: id.clone(),
                request,
            }),
        })
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.local.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.local.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.local.restore_session(id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.local.event_store()
    }
}

/// The header naming the MCP session of a request.
const SESSION_HEADER: &str = "mcp-session-id";

/// `DELETE /mcp` with an `Mcp-Session-Id` that names no live session: 404
/// (the MCP transport's answer for an unknown session), nothing closed.
pub(crate) async fn unknown_session_delete_is_404(
    axum::extract::State(sessions): axum::extract::State<Arc<Sessions>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if request.method() == axum::http::Method::DELETE
        && let Some(id) = request
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        let id: SessionId = id.to_owned().into();
        if !sessions.has_session(&id).await.unwrap_or(true) {
            return (
                axum::http::StatusCode::NOT_FOUND,
                "Not Found: Session not found",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// A request not answered yet.
struct Unanswered {
    sessions: Arc<LocalSessionManager>,
    session: SessionId,
    request: RequestId,
}

impl Unanswered {
    /// Tells the session the client cancelled the request.
    fn cancel(self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let notification = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": self.request, "reason": "the HTTP connection closed"},
        });
        let Ok(message) = serde_json::from_value::<ClientJsonRpcMessage>(notification) else {
            return;
        };
        tracing::debug!(session = %self.session, request = %self.request, "connection closed before the answer; cancelling the call");
        runtime.spawn(async move {
            // The session may be gone already (DELETE): nothing to cancel.
            let _ = self.sessions.accept_message(&self.session, message).await;
        });
    }
}

/// The SSE stream of one request: dropped before the answer went out (the
/// client hung up), it cancels the request.
struct CancelOnDisconnect {
    inner: Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>,
    guard: Option<Unanswered>,
}

impl Stream for CancelOnDisconnect {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        let answered = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(event)) => event.message.as_deref().is_some_and(|m| {
                matches!(
                    m,
                    ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
                )
            }),
            Poll::Pending => false,
        };
        if answered {
            self.guard = None;
        }
        polled
    }
}

impl Drop for CancelOnDisconnect {
    fn drop(&mut self) {
        if let Some(unanswered) = self.guard.take() {
            unanswered.cancel();
        }
    }
}
