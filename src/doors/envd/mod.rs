//! `serve --listen envd=ADDR`: agent-reach as E2B's in-sandbox daemon
//! (envd), so programs written for E2B's SDKs (`e2b` on PyPI and npm, in
//! their local mode: `Sandbox.create(debug=True)` with `sandbox_url=` or
//! `E2B_SANDBOX_URL`) drive this machine, with agent-reach's guarantees.
//!
//! An adapter on the broker: Connect-RPC `process.Process` ([`process`],
//! its live processes in [`procs`]) and `filesystem.Filesystem`
//! ([`filesystem`]) framed by [`connect`], and envd's HTTP routes
//! ([`http`]): `GET /health` (no token, as in E2B's envd), `GET`/`POST
//! /files`, `POST /init`, `GET /envs`, `GET /metrics`. Every route but
//! `/health` needs the token in `X-Access-Token` (when the server has
//! one). E2B's `user` (`root`, `user`: the `Authorization: Basic` header,
//! the `username` parameter) is accepted; every command runs as the
//! server's own user, in its sandbox. Directory watchers (`WatchDir`, the
//! polled ones) are [`watch`]'s. Not served: file metadata (xattrs),
//! signed URLs.

pub(crate) mod connect;
pub(crate) mod filesystem;
pub(crate) mod http;
pub(crate) mod paths;
pub(crate) mod process;
pub(crate) mod procs;
pub(crate) mod proto;
pub(crate) mod watch;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::doors::DoorContext;
use crate::gate::MAX_BODY_BYTES;
use crate::gate::auth::Credential;
use crate::gate::{DoorRules, Refusal};
use connect::{Code, ConnectError};

/// The header carrying envd's access token.
pub(crate) const TOKEN_HEADER: &str = "x-access-token";

/// The body types E2B's clients send: Connect's codecs, and the files'.
const BODY_TYPES: &[&str] = &[
    "application/json",
    "application/connect+json",
    "application/connect+proto",
    "application/proto",
    "multipart/form-data",
    "application/octet-stream",
];

/// What the gate holds envd to: `X-Access-Token` but on `GET /health` (as
/// E2B's own envd), Connect's and the files' body types, refusals in
/// Connect's error shape (which envd's HTTP routes answer too).
pub(crate) const RULES: DoorRules = DoorRules {
    credential: Credential::Header(TOKEN_HEADER),
    public: &["/health"],
    body_types: BODY_TYPES,
    reply: connect_refusal,
    ..DoorRules::new("envd")
};

/// A refusal of the gate as a Connect error, so both SDK paths raise their
/// exception (authentication for 401).
fn connect_refusal(refusal: &Refusal) -> Response {
    let status = refusal.status();
    let code = match status {
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::PAYLOAD_TOO_LARGE => Code::ResourceExhausted,
        _ => Code::InvalidArgument,
    };
    (
        status,
        axum::Json(serde_json::json!({
            "code": code.name(),
            "message": refusal.to_string(),
        })),
    )
        .into_response()
}

/// What `POST /init` set: variables for every command, the default
/// working directory.
#[derive(Debug, Clone, Default)]
pub(crate) struct InitState {
    inner: Arc<Mutex<InitVars>>,
}

#[derive(Debug, Default)]
struct InitVars {
    env: BTreeMap<String, String>,
    workdir: Option<String>,
}

impl InitState {
    /// The variables `POST /init` set.
    pub(crate) fn env(&self) -> BTreeMap<String, String> {
        crate::sync::lock(&self.inner).env.clone()
    }

    /// The working directory `POST /init` set, if any.
    pub(crate) fn default_workdir(&self) -> Option<String> {
        crate::sync::lock(&self.inner).workdir.clone()
    }

    /// Adds `env` to the variables; sets the working directory if given.
    pub(crate) fn set(&self, env: BTreeMap<String, String>, workdir: Option<String>) {
        let mut vars = crate::sync::lock(&self.inner);
        vars.env.extend(env);
        if workdir.is_some() {
            vars.workdir = workdir;
        }
    }
}

/// What the handlers share.
#[derive(Clone)]
pub(crate) struct EnvdState {
    pub(crate) broker: Broker,
    pub(crate) shutdown: CancellationToken,
    pub(crate) procs: procs::ProcTable,
    pub(crate) init: InitState,
    pub(crate) watchers: watch::WatchTable,
}

/// Serves envd on `listener` until `shared.shutdown`; the processes it
/// started end with the broker's session table when the server stops.
pub(crate) async fn serve(listener: TcpListener, shared: DoorContext) -> Result<(), String> {
    let state = EnvdState {
        broker: shared.broker.clone(),
        shutdown: shared.shutdown.clone(),
        procs: procs::ProcTable::default(),
        init: InitState::default(),
        watchers: watch::WatchTable::default(),
    };
    crate::doors::serve_door(listener, &shared, RULES, router(state)).await
}

/// The routes (the gate lets `/health` through without the token).
pub(crate) fn router(state: EnvdState) -> Router {
    let guarded = Router::new()
        .route("/files", get(http::get_file).post(http::post_file))
        .route("/init", post(http::init))
        .route("/envs", get(http::envs))
        .route("/metrics", get(http::metrics))
        .route("/process.Process/Start", post(process::start))
        .route("/process.Process/Connect", post(process::connect))
        .route("/process.Process/List", post(process::list))
        .route("/process.Process/SendInput", post(process::send_input))
        .route("/process.Process/StreamInput", post(process::stream_input))
        .route("/process.Process/SendSignal", post(process::send_signal))
        .route("/process.Process/CloseStdin", post(process::close_stdin))
        .route("/process.Process/Update", post(process::update))
        .route("/filesystem.Filesystem/Stat", post(filesystem::stat))
        .route("/filesystem.Filesystem/ListDir", post(filesystem::list_dir))
        .route("/filesystem.Filesystem/MakeDir", post(filesystem::make_dir))
        .route("/filesystem.Filesystem/Move", post(filesystem::move_entry))
        .route("/filesystem.Filesystem/Remove", post(filesystem::remove))
        .route("/filesystem.Filesystem/WatchDir", post(watch::watch_dir))
        .route(
            "/filesystem.Filesystem/CreateWatcher",
            post(watch::create_watcher),
        )
        .route(
            "/filesystem.Filesystem/GetWatcherEvents",
            post(watch::get_watcher_events),
        )
        .route(
            "/filesystem.Filesystem/RemoveWatcher",
            post(watch::remove_watcher),
        );
    Router::new()
        .route("/health", get(http::health))
        .merge(guarded)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serves one unary Connect call: reads the `Req` (type `req`), runs it
/// within the call's deadline, writes the `Res` (type `res`) or the error.
pub(crate) async fn unary<Req, Res, F, Fut>(
    headers: &HeaderMap,
    body: &[u8],
    req: &str,
    res: &str,
    run: F,
) -> Response
where
    Req: prost::Message + Default,
    Res: prost::Message,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Res, ConnectError>>,
{
    let Some(codec) = connect::codec_of(headers, false) else {
        return connect::unary_error(&ConnectError::new(
            Code::InvalidArgument,
            "a unary call's body must be application/json or application/proto",
        ));
    };
    let deadline = connect::deadline_of(headers, Instant::now());
    let request = match connect::decode::<Req>(codec, req, body) {
        Ok(r) => r,
        Err(e) => return connect::unary_error(&e),
    };
    let work = run(request);
    let result = match deadline {
        Some(at) => tokio::time::timeout_at(at.into(), work)
            .await
            .unwrap_or_else(|_| {
                Err(ConnectError::new(
                    Code::DeadlineExceeded,
                    "the call's deadline passed",
                ))
            }),
        None => work.await,
    };
    connect::unary_reply(codec, res, result)
}
