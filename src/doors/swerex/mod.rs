//! `serve --listen swerex=ADDR` (the `swerex-remote` personality is
//! `crate::serve::swerex_remote`): the
//! SWE-ReX remote runtime API, so every SWE-ReX deployment (Docker, Modal,
//! Fargate, Daytona, a plain host) drives agent-reach through its published
//! `RemoteRuntime` client.
//!
//! Routes, field names, defaults and status codes are the original's
//! (`swerex.server`): `GET /`, `/is_alive`, `POST /create_session`,
//! `/run_in_session`, `/close_session`, `/execute`, `/read_file`,
//! `/write_file`, `/upload`, `/close`. Every route needs `X-API-Key` when a
//! token is set (403 without one, 401 for a wrong one, as the original's
//! tests expect); runtime failures are the 511 transfers of [`error`]; a
//! retry of the last request (its `X-Request-ID`, from the same caller to
//! the same route with the same body) gets the last answer again, as the
//! original's retry cache does. The file routes are planned like commands
//! and confined to `--root` ([`files`]; archives within [`unzip`]'s bounds). Sessions are bash on our engine ([`session`]); one-shot
//! commands go through the same seam ([`engine`]).

mod engine;
mod error;
mod files;
mod model;
mod protocol;
mod pyrepr;
mod session;
mod unzip;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Multipart, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use self::error::{PyClass, SwerexError, invalid};
use self::model::{Action, CommandLine};
use self::session::BashSession;
use crate::broker::Broker;
use crate::doors::DoorContext;
use crate::exec::Execution;
use crate::gate::Caller;
use crate::gate::MAX_BODY_BYTES;
use crate::gate::auth::Credential;
use crate::gate::{DoorRules, Refusal};
use crate::plan::FileOp;

/// The header carrying the token.
const API_KEY_HEADER: &str = "x-api-key";
/// The header naming a request for the retry cache.
const REQUEST_ID_HEADER: &str = "x-request-id";
/// How long requests still running at shutdown may take once every
/// session is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// The shell a `shell=True` command runs under, as `subprocess.run`.
const SHELL: &str = "/bin/sh";

/// One named session: the shell handle (for an interrupt while a command
/// runs) and the session, one action at a time.
struct Entry {
    exec: Execution,
    session: tokio::sync::Mutex<Option<BashSession>>,
}

/// The last answer, for a retry of the same request: same `X-Request-ID`,
/// from the same caller (the key it presented), to the same route with the
/// same body. Another client reusing an id never gets this one's answer.
struct Replay {
    id: String,
    key: u64,
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Bytes,
}

/// What every request of the listener shares.
struct SwerexState {
    broker: Broker,
    /// Where relative paths and commands without a `cwd` start.
    base: std::path::PathBuf,
    /// Keys the fingerprints of replayed requests (random per process).
    replay_keys: std::hash::RandomState,
    /// Sessions by their caller and name: another caller's session of the
    /// same name is another session, and never this caller's to use or close.
    sessions: Mutex<HashMap<SessionKey, Arc<Entry>>>,
    last: Mutex<Option<Replay>>,
}

/// A session's key: its caller (`Caller`'s text) and the name it gave.
type SessionKey = (String, String);

fn key_of(caller: &Caller, name: &str) -> SessionKey {
    (caller.to_string(), name.to_owned())
}

type Answer = Result<axum::Json<Value>, SwerexError>;

impl SwerexState {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<SessionKey, Arc<Entry>>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The broker's word on a file operation, and where to do it.
    fn files(
        &self,
        caller: &Caller,
        op: FileOp,
        paths: &[&str],
    ) -> Result<files::Files, SwerexError> {
        files::Files::granted(&self.broker, caller, &self.base, op, paths)
    }

    fn entry(&self, key: &SessionKey) -> Result<Arc<Entry>, SwerexError> {
        let name = &key.1;
        self.sessions().get(key).cloned().ok_or_else(|| {
            SwerexError::raise(
                PyClass::SessionDoesNotExist,
                format!("session {} does not exist", pyrepr::string(name)),
            )
        })
    }

    /// Kills every session (and everything each started).
    async fn close_all(&self) {
        let entries: Vec<Arc<Entry>> = self.sessions().drain().map(|(_, e)| e).collect();
        for entry in entries {
            close_entry(&entry).await;
        }
    }
}

async fn close_entry(entry: &Entry) {
    // A command still running in it is ended with the shell.
    entry.exec.terminate().await;
    if let Some(session) = entry.session.lock().await.take() {
        session.close().await;
    }
}

/// Serves the SWE-ReX API on `listener` until `shared.shutdown`; every
/// session is killed before it returns.
pub(crate) async fn serve(listener: TcpListener, shared: DoorContext) -> Result<(), String> {
    session::sweep_stale_dirs(&shared.broker);
    let state = Arc::new(SwerexState {
        base: files::base_dir(shared.broker.root()),
        replay_keys: std::hash::RandomState::new(),
        broker: shared.broker.clone(),
        sessions: Mutex::new(HashMap::new()),
        last: Mutex::new(None),
    });
    // Every session is killed as soon as the server stops, so a request
    // waiting on one ends and its connection with it.
    let closing = state.clone();
    let shutdown = shared.shutdown.clone();
    let server = async {
        let (served, ()) = tokio::join!(
            crate::doors::serve_door(listener, &shared, RULES, router(state.clone())),
            async move {
                shutdown.cancelled().await;
                closing.close_all().await;
            }
        );
        served
    };
    let shutdown = shared.shutdown.clone();
    let outcome = tokio::select! {
        served = server => served,
        () = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => Ok(()),
    };
    state.close_all().await;
    outcome
}

/// What the gate holds SWE-ReX to: the token in `X-API-Key` on every
/// route, refusals as the original's `{"detail": ...}`.
pub(crate) const RULES: DoorRules = DoorRules {
    credential: Credential::Header(API_KEY_HEADER),
    reply: refusal,
    ..DoorRules::new("swerex")
};

/// A refusal of the gate as the original answers: 403 without a key and
/// 401 for a wrong one (FastAPI's `APIKeyHeader` and its check).
fn refusal(refusal: &Refusal) -> Response {
    match refusal {
        Refusal::MissingCredential(_) => detail(StatusCode::FORBIDDEN, "Not authenticated"),
        Refusal::WrongCredential(_) => detail(StatusCode::UNAUTHORIZED, "Invalid API Key"),
        other => detail(other.status(), &other.to_string()),
    }
}

fn router(state: Arc<SwerexState>) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/is_alive", get(is_alive))
        .route("/create_session", post(create_session))
        .route("/run_in_session", post(run_in_session))
        .route("/close_session", post(close_session))
        .route("/execute", post(execute))
        .route("/read_file", post(read_file))
        .route("/write_file", post(write_file))
        .route("/upload", post(upload))
        .route("/close", post(close))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(state.clone(), replay))
        .with_state(state)
}

/// The largest request body the retry cache reads to fingerprint it;
/// larger ones (uploads) run again on a retry instead of being buffered.
const REPLAY_MAX_BODY_BYTES: usize = 1024 * 1024;

/// A retry of the last request (same `X-Request-ID`, same caller, route and
/// body) gets its answer again instead of running twice. As in the
/// original, exception answers (511) are not kept.
async fn replay(State(state): State<Arc<SwerexState>>, request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let small = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(request.method() == axum::http::Method::GET, |n| {
            n <= REPLAY_MAX_BODY_BYTES
        });
    let (Some(id), true) = (id, small) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, REPLAY_MAX_BODY_BYTES).await else {
        return detail(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is too large",
        );
    };
    let key = {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut hasher = state.replay_keys.build_hasher();
        parts
            .headers
            .get(API_KEY_HEADER)
            .map(HeaderValue::as_bytes)
            .hash(&mut hasher);
        parts.method.as_str().hash(&mut hasher);
        parts.uri.path().hash(&mut hasher);
        parts.uri.query().hash(&mut hasher);
        body.hash(&mut hasher);
        hasher.finish()
    };
    {
        let last = state
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(replay) = last.as_ref().filter(|r| r.id == id && r.key == key) {
            let mut response = (replay.status, replay.body.clone()).into_response();
            if let Some(ct) = &replay.content_type {
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, ct.clone());
            }
            return response;
        }
    }
    let response = next
        .run(Request::from_parts(parts, axum::body::Body::from(body)))
        .await;
    if response.status().as_u16() == error::SWEREX_EXCEPTION_STATUS {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return detail(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the answer could not be buffered",
        );
    };
    *state
        .last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Replay {
        id,
        key,
        status: parts.status,
        content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
        body: body.clone(),
    });
    Response::from_parts(parts, axum::body::Body::from(body))
}

fn detail(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({ "detail": message }))).into_response()
}

async fn not_found() -> Response {
    detail(StatusCode::NOT_FOUND, "Not Found")
}

async fn method_not_allowed() -> Response {
    detail(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

async fn root() -> axum::Json<Value> {
    axum::Json(json!({"message": "hello world"}))
}

async fn is_alive() -> axum::Json<Value> {
    axum::Json(json!({"is_alive": true, "message": ""}))
}

async fn create_session(
    State(state): State<Arc<SwerexState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Answer {
    engine::check_raw_commands(&state.broker)?;
    let request: model::CreateSession = model::parse_session_request(&body)?;
    let exists = || {
        SwerexError::raise(
            PyClass::SessionExists,
            format!("session {} already exists", request.session),
        )
    };
    let key = key_of(&caller, &request.session);
    if state.sessions().contains_key(&key) {
        return Err(exists());
    }
    let (session, output) = BashSession::start(&state.broker, &caller, &request).await?;
    let entry = Arc::new(Entry {
        exec: session.execution(),
        session: tokio::sync::Mutex::new(Some(session)),
    });
    let raced = {
        let mut sessions = state.sessions();
        match sessions.entry(key) {
            std::collections::hash_map::Entry::Occupied(_) => true,
            std::collections::hash_map::Entry::Vacant(seat) => {
                seat.insert(entry.clone());
                false
            }
        }
    };
    if raced {
        close_entry(&entry).await;
        return Err(exists());
    }
    Ok(axum::Json(
        json!({"output": output, "session_type": model::BASH}),
    ))
}

async fn run_in_session(
    State(state): State<Arc<SwerexState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Answer {
    engine::check_raw_commands(&state.broker)?;
    let action = model::parse_action(&body)?;
    let name = match &action {
        Action::Bash(a) => a.session.clone(),
        Action::Interrupt(i) => i.session.clone(),
    };
    let key = key_of(&caller, &name);
    let entry = state.entry(&key)?;
    let mut guard = match entry.session.try_lock() {
        Ok(guard) => guard,
        Err(_) => {
            if matches!(action, Action::Interrupt(_)) {
                // A command is running: ^C reaches it now, not after it.
                let _ = entry.exec.write_stdin(b"\x03");
            }
            entry.session.lock().await
        }
    };
    let Some(session) = guard.as_mut() else {
        // Closed while this request waited for it.
        return Err(SwerexError::raise(
            PyClass::SessionDoesNotExist,
            format!("session {} does not exist", pyrepr::string(&name)),
        ));
    };
    let outcome = match &action {
        Action::Bash(a) => session.run(a).await,
        Action::Interrupt(i) => session.interrupt(i).await,
    };
    if session.is_dead() {
        guard.take();
        drop(guard);
        let mut sessions = state.sessions();
        if sessions.get(&key).is_some_and(|e| Arc::ptr_eq(e, &entry)) {
            sessions.remove(&key);
        }
    }
    let observation = outcome?;
    serde_json::to_value(observation)
        .map(axum::Json)
        .map_err(|e| SwerexError::Internal(e.to_string()))
}

async fn close_session(
    State(state): State<Arc<SwerexState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Answer {
    let request: model::CloseSession = model::parse_session_request(&body)?;
    let entry = state.sessions().remove(&key_of(&caller, &request.session));
    let Some(entry) = entry else {
        return Err(SwerexError::raise(
            PyClass::SessionDoesNotExist,
            format!(
                "session {} does not exist",
                pyrepr::string(&request.session)
            ),
        ));
    };
    close_entry(&entry).await;
    Ok(axum::Json(json!({"session_type": model::BASH})))
}

async fn execute(
    State(state): State<Arc<SwerexState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Answer {
    let command: model::Command = model::parse(&body, None)?;
    let argv: Vec<std::ffi::OsString> = match (&command.command, command.shell) {
        (CommandLine::Line(line), true) => vec![SHELL.into(), "-c".into(), line.into()],
        (CommandLine::Argv(args), true) => [SHELL.to_owned(), "-c".to_owned()]
            .into_iter()
            .chain(args.iter().cloned())
            .map(Into::into)
            .collect(),
        (CommandLine::Line(line), false) => vec![line.into()],
        (CommandLine::Argv(args), false) => args.iter().map(Into::into).collect(),
    };
    if argv.is_empty() {
        return Err(SwerexError::raise(
            PyClass::Value,
            "list index out of range",
        ));
    }
    let (done, capped) = engine::run_once(
        &state.broker,
        &caller,
        &state.base,
        engine::OneShot {
            argv,
            cwd: command.cwd.as_ref().map(Into::into),
            env: command.env.clone(),
            timeout: command
                .timeout
                .map(|t| Duration::from_secs_f64(t.clamp(0.0, 1e9))),
            merge_output: command.merge_output_streams,
        },
    )
    .await?;
    if done.exit.timed_out {
        let timeout = command
            .timeout
            .map_or_else(|| "None".to_owned(), pyrepr::float);
        return Err(SwerexError::raise(
            PyClass::CommandTimeout,
            format!("Timeout ({timeout}s) exceeded while running command"),
        ));
    }
    let exit_code = match (done.exit.code, done.exit.signal) {
        (Some(code), _) => code,
        (None, Some(signal)) => -signal,
        (None, None) => -1,
    };
    let stdout = done.stdout.text;
    let stderr = done.stderr.text;
    if command.check && exit_code != 0 {
        let mut message = format!(
            "Command {} failed with exit code {exit_code}. Stdout:\n{}\nStderr:\n{}",
            engine::command_repr(&command.command),
            pyrepr::string(&stdout),
            pyrepr::string(&stderr)
        );
        if !command.error_msg.is_empty() {
            message = format!("{}: {message}", command.error_msg);
        }
        return Err(SwerexError::raise(PyClass::NonZeroExitCode, message));
    }
    let mut answer = json!({"stdout": stdout, "stderr": stderr, "exit_code": exit_code});
    if !capped.is_empty() {
        // The operator's [limits] cut what was asked; the client ignores
        // fields it does not know.
        answer["capped"] = json!(capped);
    }
    Ok(axum::Json(answer))
}

async fn read_file(
    State(state): State<Arc<SwerexState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Answer {
    let request: model::ReadFile = model::parse(&body, None)?;
    let files = state.files(&caller, FileOp::Read, &[&request.path])?;
    let content = files::read_file(files, request).await?;
    Ok(axum::Json(json!({ "content": content })))
}

async fn write_file(
    State(state): State<Arc<SwerexState>>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Answer {
    let request: model::WriteFile = model::parse(&body, None)?;
    let files = state.files(&caller, FileOp::Write, &[&request.path])?;
    files::write_file(files, request).await?;
    Ok(axum::Json(json!({})))
}

/// `/upload`: the `file` part spooled to disk as it arrives (never held in
/// memory), then saved or unzipped at `target_path`. The policy is asked
/// before the body is read.
async fn upload(
    State(state): State<Arc<SwerexState>>,
    Extension(caller): Extension<Caller>,
    mut form: Multipart,
) -> Answer {
    state.files(&caller, FileOp::Upload, &[])?;
    let mut file: Option<(Option<String>, files::Spool)> = None;
    let mut target_path = None;
    let mut unzip = false;
    let bad_form = |e: axum::extract::multipart::MultipartError| {
        invalid("value_error", &["body"], &e.to_string(), &Value::Null)
    };
    while let Some(field) = form.next_field().await.map_err(bad_form)? {
        match field.name() {
            Some("file") => {
                let name = field.file_name().map(str::to_owned);
                file = Some((name, files::spool(field, MAX_BODY_BYTES).await?));
            }
            Some("target_path") => target_path = Some(field.text().await.map_err(bad_form)?),
            Some("unzip") => {
                let text = field.text().await.map_err(bad_form)?;
                unzip = matches!(
                    text.trim().to_ascii_lowercase().as_str(),
                    "true" | "1" | "yes" | "on" | "t" | "y"
                );
            }
            _ => {}
        }
    }
    let missing =
        |field: &str| invalid("missing", &["body", field], "Field required", &Value::Null);
    let (name, spool) = file.ok_or_else(|| missing("file"))?;
    let target_path = target_path.ok_or_else(|| missing("target_path"))?;
    let op = if unzip { FileOp::Unzip } else { FileOp::Upload };
    let mut names = vec![target_path.as_str()];
    names.extend(name.as_deref());
    let files = state.files(&caller, op, &names)?;
    files::upload(files, target_path, name, spool, unzip).await?;
    Ok(axum::Json(json!({})))
}

/// `/close`: every session of the caller closed (another caller's live
/// on); the server keeps serving.
async fn close(
    State(state): State<Arc<SwerexState>>,
    Extension(caller): Extension<Caller>,
) -> Answer {
    let mine = caller.to_string();
    let entries: Vec<Arc<Entry>> = {
        let mut sessions = state.sessions();
        let keys: Vec<SessionKey> = sessions
            .keys()
            .filter(|(c, _)| *c == mine)
            .cloned()
            .collect();
        keys.iter().filter_map(|k| sessions.remove(k)).collect()
    };
    for entry in entries {
        close_entry(&entry).await;
    }
    Ok(axum::Json(json!({})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderMap;

    #[test]
    fn header_names_are_lowercase_for_the_header_map() {
        let mut headers = HeaderMap::new();
        headers.insert(API_KEY_HEADER, HeaderValue::from_static("k"));
        assert!(headers.contains_key("X-API-Key"));
        assert_eq!(REQUEST_ID_HEADER, REQUEST_ID_HEADER.to_ascii_lowercase());
    }
}
