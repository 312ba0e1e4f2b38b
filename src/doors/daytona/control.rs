//! The few control-plane routes Daytona's SDK reads for one sandbox: its
//! record (`GET /api/sandbox/{id}`, what `Daytona.get` reads), the page of
//! sandboxes (`GET /api/sandbox`, what `Daytona.list` reads: this one), and
//! its toolbox address. The record's `toolboxProxyUrl` points back at this
//! listener, by the `Host` the client reached it at (the gate has checked
//! it), so the SDK's toolbox calls come here too. Also the toolbox's own
//! `work-dir`, `user-home-dir` (both `--root`) and `version`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

use super::{ApiError, DAEMON_VERSION, DaytonaState};

/// The organization, user, target and region the record shows.
const ORGANIZATION: &str = "agent-reach";
const TARGET: &str = "local";
/// The language label the SDK reads to pick `code_run`'s language.
const LANGUAGE_LABEL: &str = "code-toolbox-language";
const LANGUAGE: &str = "python";

/// Where the toolbox is, as the client reached this listener.
fn toolbox_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}/toolbox")
}

/// The sandbox's record with the fields the SDK's model requires.
fn record(state: &DaytonaState, headers: &HeaderMap) -> Value {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let user = std::env::var("USER").unwrap_or_else(|_| "agent-reach".to_owned());
    let now = chrono::Utc::now().to_rfc3339();
    json!({
        "id": &*state.sandbox_id,
        "organizationId": ORGANIZATION,
        "name": &*state.sandbox_id,
        "user": user,
        "env": {},
        "labels": {LANGUAGE_LABEL: LANGUAGE},
        "public": false,
        "networkBlockAll": false,
        "kvm": false,
        "target": TARGET,
        "cpu": cpus,
        "gpu": 0,
        "memory": 0,
        "disk": 0,
        "state": "started",
        "desiredState": "started",
        "toolboxProxyUrl": toolbox_url(headers),
        "createdAt": now,
        "updatedAt": now,
    })
}

fn check_id(state: &DaytonaState, id: &str) -> Result<(), ApiError> {
    if id == &*state.sandbox_id {
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "sandbox {id} not found (this server is sandbox {})",
            state.sandbox_id
        )))
    }
}

/// `GET /api/sandbox/{id}`.
pub(crate) async fn sandbox(
    State(state): State<DaytonaState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    check_id(&state, &id)?;
    Ok(Json(record(&state, &headers)))
}

/// `GET /api/sandbox`: one page holding the one sandbox.
pub(crate) async fn list(State(state): State<DaytonaState>, headers: HeaderMap) -> Json<Value> {
    Json(json!({"items": [record(&state, &headers)], "nextCursor": null}))
}

/// `GET /api/sandbox/{id}/toolbox-proxy-url`.
pub(crate) async fn toolbox_proxy_url(
    State(state): State<DaytonaState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    check_id(&state, &id)?;
    Ok(Json(json!({"url": toolbox_url(&headers)})))
}

/// `GET /toolbox/{id}/work-dir` and `user-home-dir`: `--root`.
pub(crate) async fn work_dir(State(state): State<DaytonaState>) -> Json<Value> {
    Json(json!({"dir": state.broker.root().to_string_lossy()}))
}

/// `GET /toolbox/{id}/version`.
pub(crate) async fn version() -> Json<Value> {
    Json(json!({"version": DAEMON_VERSION}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn the_toolbox_url_points_back_at_the_host_the_client_used() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:3000"));
        assert_eq!(toolbox_url(&headers), "http://127.0.0.1:3000/toolbox");
    }
}
