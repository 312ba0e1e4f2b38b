//! One client of the codex-exec door, whatever carries it (a WebSocket or
//! stdio): its messages in, its replies and notifications out through one
//! [`Outbox`], the method table, and its processes. A request is served on
//! a task of its own (Codex sends several `fs/getMetadata` at once); its
//! reply goes out when it is done. When the transport ends, [`Connection::end`]
//! kills every process the connection started, and whatever they started.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::procs::ProcTable;
use super::protocol::{self as p, RpcError, codes};
use super::{environment, fs, process};
use crate::broker::Broker;
use crate::gate::Caller;

/// Messages queued for the transport before a sender waits (a flood's
/// output then waits for the client, and the command for its pipe).
pub(crate) const OUTBOX_QUEUE: usize = 64;

/// The connection's way out: one JSON message per send.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    tx: mpsc::Sender<String>,
}

impl Outbox {
    /// An outbox and the transport's end of it.
    pub(crate) fn new() -> (Self, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(OUTBOX_QUEUE);
        (Self { tx }, rx)
    }

    /// Queues `message`; a transport that is gone drops it.
    pub(crate) async fn send(&self, message: Value) {
        let _ = self.tx.send(message.to_string()).await;
    }
}

/// What the handlers of one connection share.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) broker: Broker,
    /// The gate's caller: `--max-sessions-per-client` counts its processes
    /// across all its connections; each connection reaches only its own
    /// (its [`ProcTable`]).
    pub(crate) caller: Caller,
    pub(crate) session_id: String,
    pub(crate) out: Outbox,
    pub(crate) procs: ProcTable,
    /// Cancelled when the transport ends or the server stops.
    pub(crate) ended: CancellationToken,
}

impl Connection {
    /// A connection of `caller`, ended with `shutdown` at the latest.
    pub(crate) fn new(
        broker: Broker,
        caller: &Caller,
        out: Outbox,
        shutdown: &CancellationToken,
    ) -> Arc<Self> {
        let session_id = new_session_id();
        Arc::new(Self {
            broker,
            caller: caller.clone(),
            session_id,
            out,
            procs: ProcTable::default(),
            ended: shutdown.child_token(),
        })
    }

    /// Serves one message from the client.
    pub(crate) fn receive(self: &Arc<Self>, text: &str) {
        let message: p::Incoming = match serde_json::from_str(text) {
            Ok(m) => m,
            Err(e) => {
                let conn = Arc::clone(self);
                let error = RpcError::new(
                    codes::INVALID_REQUEST,
                    format!("not a JSON-RPC message: {e}"),
                );
                tokio::spawn(async move {
                    conn.out.send(p::response(&Value::Null, Err(error))).await;
                });
                return;
            }
        };
        let Some(method) = message.method else {
            // A reply to a request of ours: this server sends none.
            return;
        };
        let params = message.params.unwrap_or(Value::Null);
        let Some(id) = message.id else {
            // `initialized` and any other notification need no answer.
            if method != p::INITIALIZED_METHOD {
                tracing::debug!(method, "codex-exec notification ignored");
            }
            return;
        };
        let conn = Arc::clone(self);
        tokio::spawn(async move {
            conn.serve(&id, &method, params).await;
        });
    }

    async fn serve(self: &Arc<Self>, id: &Value, method: &str, params: Value) {
        if method == p::EXEC_METHOD {
            // Its reply must reach the client before the first output.
            return process::start(self, id, params).await;
        }
        let result = self.call(method, params).await;
        self.out.send(p::response(id, result)).await;
    }

    /// The method table (but `process/start`, which answers itself).
    async fn call(self: &Arc<Self>, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            p::INITIALIZE_METHOD => environment::initialize(self, params),
            p::ENVIRONMENT_INFO_METHOD => to_value(&environment::info(&self.broker)),
            p::EXEC_READ_METHOD => process::read(self, params).await,
            p::EXEC_WRITE_METHOD => process::write(self, params).await,
            p::EXEC_SIGNAL_METHOD => process::signal(self, params),
            p::EXEC_TERMINATE_METHOD => process::terminate(self, params).await,
            p::FS_GET_METADATA_METHOD => fs::get_metadata(self, params).await,
            p::FS_READ_FILE_METHOD => fs::read_file(self, params).await,
            p::FS_WRITE_FILE_METHOD => fs::write_file(self, params).await,
            p::FS_CREATE_DIRECTORY_METHOD => fs::create_directory(self, params).await,
            p::FS_READ_DIRECTORY_METHOD => fs::read_directory(self, params).await,
            p::FS_REMOVE_METHOD => fs::remove(self, params).await,
            other => Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!(
                    "{other} is not served by agent-reach's codex-exec door (it speaks the exec-server of {}; see docs/DOORS.md)",
                    super::CODEX_PACKAGE
                ),
            )),
        }
    }

    /// Ends the connection: every process it started is killed, with
    /// whatever it started; returns once they are gone.
    pub(crate) async fn end(&self) {
        self.ended.cancel();
        for proc in self.procs.all() {
            let report = proc.exec.terminate().await;
            if !report.survivors.is_empty() {
                tracing::warn!(survivors = ?report.survivors, process = %proc.id, "a codex-exec process left survivors");
            }
        }
        tracing::debug!(session = %self.session_id, "codex-exec connection ended");
    }
}

/// The params of a call, or `invalid params` naming what is wrong.
pub(crate) fn params<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| RpcError::invalid_params(e.to_string()))
}

/// A reply's result.
pub(crate) fn to_value(value: &impl serde::Serialize) -> Result<Value, RpcError> {
    serde_json::to_value(value).map_err(|e| RpcError::internal(e.to_string()))
}

/// A session id of the same shape as Codex's own (a UUID v4), from the
/// standard library's randomly keyed hasher and the clock.
fn new_session_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut halves = [0u64; 2];
    for half in &mut halves {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(nanos);
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        *half = hasher.finish();
    }
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&halves[0].to_le_bytes());
    bytes[8..].copy_from_slice(&halves[1].to_le_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_look_like_uuids_and_differ() {
        let a = new_session_id();
        let b = new_session_id();
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, b);
    }
}
