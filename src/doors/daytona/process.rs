//! `POST /toolbox/{id}/process/execute` and `process/code-run`: one-shot
//! commands through the broker (the operator's policy, the scheduler, the
//! engine, redaction), answered as Daytona answers them. What a command
//! leaves running in the background (`server > log 2>&1 &`, as Daytona's
//! docs tell users to start a server) lives on, seated in the session
//! table under its caller (`Broker::run_leaving_background`).
//!
//! - `execute {command, cwd?, envs?, timeout?}` → `{exitCode, result}`:
//!   `command` is a shell script (`bash`, as Daytona's daemon runs it, or
//!   `sh` where there is none); stdout and stderr arrive together in
//!   `result`, interleaved as written (the shell's stderr is its stdout).
//! - `code-run {code, language, argv?, envs?, timeout?}` →
//!   `{exitCode, result, artifacts: {charts: []}}`: `python` runs
//!   `python3 -c CODE ARGV...`, `javascript` runs `node -e CODE ARGV...`.
//!
//! `timeout` is in seconds (none when absent or 0, the operator's
//! `[limits] max_timeout_ms` still applying); past it the whole tree is
//! killed and the answer is HTTP 408, which the SDK raises as its
//! `DaytonaTimeoutError`. `cwd` is confined beneath `--root`: a relative
//! path is from the root, an absolute one must lie beneath it, none means
//! the root. Refused by the policy: 403; killed by a signal: `exitCode`
//! -1, as Go reports it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, DaytonaState};
use crate::broker::Broker;
use crate::gate::Caller;
use crate::plan::Request;
use crate::registry::kinds;
use crate::result::{NormalizedResult, Status};

/// The shell Daytona's daemon runs a command with, when the machine has it.
const PREFERRED_SHELL: &str = "/bin/bash";
/// The shell otherwise.
const FALLBACK_SHELL: &str = "/bin/sh";
/// What the merging wrapper runs its argv under: stderr joins stdout, then
/// the argv replaces the wrapper (`sh -c 'exec 2>&1; exec "$@"' sh ARGV`).
const MERGE_SCRIPT: &str = "exec 2>&1; exec \"$@\"";
/// How the session table names what a command left in the background.
const BACKGROUND_WHAT: &str = "daytona process/execute background";
/// The exit code of a command killed by a signal, as Go's `ExitCode()`.
const SIGNALLED_EXIT: i32 = -1;

/// The body of `process/execute`.
#[derive(Debug, Deserialize)]
pub(crate) struct ExecuteRequest {
    command: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    envs: Option<BTreeMap<String, String>>,
    #[serde(default)]
    timeout: Option<u64>,
}

/// The body of `process/code-run`.
#[derive(Debug, Deserialize)]
pub(crate) struct CodeRunRequest {
    code: String,
    language: String,
    #[serde(default)]
    argv: Option<Vec<String>>,
    #[serde(default)]
    envs: Option<BTreeMap<String, String>>,
    #[serde(default)]
    timeout: Option<u64>,
}

/// The shell a command line runs under.
pub(crate) fn shell() -> &'static str {
    // A look at the machine's own /bin, not at a caller's path.
    if std::path::Path::new(PREFERRED_SHELL).is_file() {
        PREFERRED_SHELL
    } else {
        FALLBACK_SHELL
    }
}

/// `argv` run with its stderr joined to its stdout.
fn merged(argv: Vec<OsString>) -> Vec<OsString> {
    let mut out = vec![
        OsString::from(FALLBACK_SHELL),
        OsString::from("-c"),
        OsString::from(MERGE_SCRIPT),
        OsString::from("sh"),
    ];
    out.extend(argv);
    out
}

/// A caller's working directory, confined beneath the root; none or empty
/// is the root.
pub(crate) fn workdir(broker: &Broker, cwd: Option<&str>) -> Result<Option<PathBuf>, ApiError> {
    let Some(dir) = cwd.filter(|d| !d.trim().is_empty()) else {
        return Ok(None);
    };
    broker
        .locate(std::path::Path::new(dir))
        .map(Some)
        .map_err(|e| ApiError::forbidden(format!("cwd: {e}")))
}

/// The caller's variables, refusing agent-reach's own.
pub(crate) fn env_of(
    envs: Option<BTreeMap<String, String>>,
) -> Result<Vec<(OsString, OsString)>, ApiError> {
    let envs = envs.unwrap_or_default();
    if let Some(bad) = envs
        .keys()
        .find(|k| k.is_empty() || k.contains('=') || k.contains('\0'))
    {
        return Err(ApiError::bad_request(format!(
            "invalid environment variable name {bad:?}"
        )));
    }
    if let Some(reserved) = envs
        .keys()
        .find(|k| k.starts_with(crate::plan::RESERVED_ENV_PREFIX))
    {
        return Err(ApiError::bad_request(format!(
            "variable {reserved} is reserved by agent-reach"
        )));
    }
    Ok(envs
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect())
}

/// The one-shot request of `argv` with stderr joined to stdout.
fn one_shot(
    argv: Vec<OsString>,
    workdir: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    timeout_secs: Option<u64>,
) -> Request {
    let mut request = Request::command(merged(argv));
    request.workdir = workdir;
    request.env = env;
    request.tty = Some(false);
    request.keep_blanks = true;
    // Daytona: no timeout unless asked; 0 is "none" to the plan stage too.
    request.timeout_ms = Some(timeout_secs.unwrap_or(0).saturating_mul(1000));
    request
}

/// `POST .../process/execute`.
pub(crate) async fn execute(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<ExecuteRequest>,
) -> Result<Json<Value>, ApiError> {
    if body.command.trim().is_empty() {
        return Err(ApiError::bad_request(
            "command cannot be empty or whitespace-only",
        ));
    }
    let workdir = workdir(&state.broker, body.cwd.as_deref())?;
    let env = env_of(body.envs)?;
    let argv = vec![
        OsString::from(shell()),
        OsString::from("-c"),
        OsString::from(body.command),
    ];
    let request = one_shot(argv, workdir, env, body.timeout);
    let result = state
        .broker
        .run_leaving_background(&caller, request, BACKGROUND_WHAT)
        .await;
    let (exit_code, output) = answer(&result)?;
    Ok(Json(json!({"exitCode": exit_code, "result": output})))
}

/// `POST .../process/code-run`.
pub(crate) async fn code_run(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<CodeRunRequest>,
) -> Result<Json<Value>, ApiError> {
    let mut argv: Vec<OsString> = match body.language.as_str() {
        "python" | "" => vec!["python3".into(), "-c".into()],
        "javascript" => vec!["node".into(), "-e".into()],
        other => {
            return Err(ApiError::bad_request(format!(
                "unsupported language {other:?}: this server runs python and javascript"
            )));
        }
    };
    argv.push(OsString::from(body.code));
    argv.extend(
        body.argv
            .unwrap_or_default()
            .into_iter()
            .map(OsString::from),
    );
    let env = env_of(body.envs)?;
    let request = one_shot(argv, None, env, body.timeout);
    let result = state
        .broker
        .run_leaving_background(&caller, request, BACKGROUND_WHAT)
        .await;
    let (exit_code, output) = answer(&result)?;
    Ok(Json(json!({
        "exitCode": exit_code,
        "result": output,
        "artifacts": {"charts": []},
    })))
}

/// A run's exit code and output, or the error Daytona answers with.
fn answer(result: &NormalizedResult) -> Result<(i32, String), ApiError> {
    let message = || {
        result
            .error
            .as_ref()
            .map_or_else(|| "refused".to_owned(), |e| e.message.clone())
    };
    let kind = result.error.as_ref().map(|e| e.kind.as_str());
    match result.status {
        Status::Success | Status::Failure => {
            let code = result.exit_code.unwrap_or(SIGNALLED_EXIT);
            let mut output = result.stdout.clone();
            output.push_str(&result.stderr);
            Ok((code, output))
        }
        Status::Timeout => Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "command execution timeout; the whole process tree was killed",
        )),
        Status::Rejected if kind.is_some_and(kinds::is_policy_refusal) => {
            Err(ApiError::forbidden(message()))
        }
        Status::Busy => Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message())),
        Status::Rejected => Err(ApiError::bad_request(message())),
        Status::Error if kind.is_some_and(kinds::is_missing) => {
            Err(ApiError::bad_request(message()))
        }
        Status::Error => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_merging_wrapper_hands_the_argv_on_whole() {
        let argv = merged(vec!["python3".into(), "-c".into(), "print(1)".into()]);
        assert_eq!(argv[2], MERGE_SCRIPT);
        assert_eq!(argv[3], "sh");
        assert_eq!(&argv[4..], &["python3", "-c", "print(1)"]);
    }

    #[test]
    fn agent_reach_variables_and_bad_names_are_refused() {
        let reserved = BTreeMap::from([(
            format!("{}X", crate::plan::RESERVED_ENV_PREFIX),
            "1".to_owned(),
        )]);
        assert!(env_of(Some(reserved)).is_err());
        assert!(env_of(Some(BTreeMap::from([("A=B".to_owned(), "1".to_owned())]))).is_err());
        assert_eq!(
            env_of(Some(BTreeMap::from([("FOO".to_owned(), "1".to_owned())])))
                .unwrap()
                .len(),
            1
        );
    }
}
