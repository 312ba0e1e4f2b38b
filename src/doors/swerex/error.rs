//! The errors of the SWE-ReX listener, shaped the way its published client
//! (`swerex.runtime.remote.RemoteRuntime`) re-raises them: HTTP 511 with
//! `{"swerexception": {message, class_path, traceback, extra_info}}`, where
//! `class_path` names the Python exception the client imports and raises
//! (`swerex.exceptions.CommandTimeoutError`, `builtins.FileNotFoundError`,
//! ...). Request bodies the original's FastAPI would refuse get its 422
//! `{"detail": [...]}`; a listener policy refusal is a 403.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The status the original answers every runtime exception with.
pub(crate) const SWEREX_EXCEPTION_STATUS: u16 = 511;

/// A Python exception class the client knows, by its import path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PyClass {
    SwerexException,
    SessionExists,
    SessionDoesNotExist,
    NonZeroExitCode,
    CommandTimeout,
    BashIncorrectSyntax,
    NoExitCode,
    /// pexpect's timeout: what the original raises when a shell does not
    /// start in time or an interrupt fails.
    PexpectTimeout,
    /// pexpect's end of file: the shell exited.
    PexpectEof,
    FileNotFound,
    IsADirectory,
    NotADirectory,
    Permission,
    FileExists,
    Os,
    UnicodeDecode,
    Lookup,
    Value,
}

impl PyClass {
    /// The `module.Name` the client imports.
    pub(crate) fn path(self) -> &'static str {
        match self {
            PyClass::SwerexException => "swerex.exceptions.SwerexException",
            PyClass::SessionExists => "swerex.exceptions.SessionExistsError",
            PyClass::SessionDoesNotExist => "swerex.exceptions.SessionDoesNotExistError",
            PyClass::NonZeroExitCode => "swerex.exceptions.NonZeroExitCodeError",
            PyClass::CommandTimeout => "swerex.exceptions.CommandTimeoutError",
            PyClass::BashIncorrectSyntax => "swerex.exceptions.BashIncorrectSyntaxError",
            PyClass::NoExitCode => "swerex.exceptions.NoExitCodeError",
            PyClass::PexpectTimeout => "pexpect.exceptions.TIMEOUT",
            PyClass::PexpectEof => "pexpect.exceptions.EOF",
            PyClass::FileNotFound => "builtins.FileNotFoundError",
            PyClass::IsADirectory => "builtins.IsADirectoryError",
            PyClass::NotADirectory => "builtins.NotADirectoryError",
            PyClass::Permission => "builtins.PermissionError",
            PyClass::FileExists => "builtins.FileExistsError",
            PyClass::Os => "builtins.OSError",
            PyClass::UnicodeDecode => "builtins.UnicodeDecodeError",
            PyClass::Lookup => "builtins.LookupError",
            PyClass::Value => "builtins.ValueError",
        }
    }
}

/// What a route can answer instead of its result.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SwerexError {
    /// A runtime exception the client re-raises (HTTP 511).
    #[error("{message}")]
    Raise {
        class: PyClass,
        message: String,
        extra_info: serde_json::Map<String, Value>,
    },
    /// A body the original's request models refuse (HTTP 422).
    #[error("invalid request body: {}", .0)]
    Invalid(Value),
    /// The operator's policy refuses the request (HTTP 403).
    #[error("{message}")]
    Refused { kind: &'static str, message: String },
    /// Something of ours failed (HTTP 500).
    #[error("{0}")]
    Internal(String),
}

impl SwerexError {
    pub(crate) fn raise(class: PyClass, message: impl Into<String>) -> Self {
        SwerexError::Raise {
            class,
            message: message.into(),
            extra_info: serde_json::Map::new(),
        }
    }

    /// The Python `OSError` subclass (and its message) for an I/O error on
    /// `path`, as `open()` and `Path.read_text()` word it.
    pub(crate) fn io(err: &std::io::Error, path: &str) -> Self {
        let class = match err.raw_os_error() {
            Some(libc::ENOENT) => PyClass::FileNotFound,
            Some(libc::EISDIR) => PyClass::IsADirectory,
            Some(libc::ENOTDIR) => PyClass::NotADirectory,
            Some(libc::EACCES | libc::EPERM) => PyClass::Permission,
            Some(libc::EEXIST) => PyClass::FileExists,
            _ => PyClass::Os,
        };
        let errno = err.raw_os_error().unwrap_or(0);
        let text = errno_text(err);
        SwerexError::raise(
            class,
            format!("[Errno {errno}] {text}: {}", super::pyrepr::string(path)),
        )
    }
}

/// The C library's wording of an errno, as Python prints it.
fn errno_text(err: &std::io::Error) -> String {
    let full = err.to_string();
    // std formats "No such file or directory (os error 2)".
    match full.rfind(" (os error") {
        Some(at) => full[..at].to_owned(),
        None => full,
    }
}

impl IntoResponse for SwerexError {
    fn into_response(self) -> Response {
        match self {
            SwerexError::Raise {
                class,
                message,
                extra_info,
            } => {
                let status = StatusCode::from_u16(SWEREX_EXCEPTION_STATUS)
                    .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let body = json!({"swerexception": {
                    "message": message,
                    "class_path": class.path(),
                    "traceback": "",
                    "extra_info": extra_info,
                }});
                (status, axum::Json(body)).into_response()
            }
            SwerexError::Invalid(detail) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                axum::Json(json!({ "detail": detail })),
            )
                .into_response(),
            SwerexError::Refused { kind, message } => (
                // A bad request is what FastAPI answers for bad input (422);
                // a refusal by the policy is 403.
                match kind {
                    crate::registry::kinds::INVALID_PARAMS
                    | crate::registry::kinds::MALFORMED_REQUEST => StatusCode::UNPROCESSABLE_ENTITY,
                    _ => StatusCode::FORBIDDEN,
                },
                axum::Json(json!({
                    "detail": message,
                    "error": {"kind": kind, "message": message},
                })),
            )
                .into_response(),
            SwerexError::Internal(message) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({ "detail": message })),
            )
                .into_response(),
        }
    }
}

/// One entry of a 422 `detail` list, as pydantic words it.
pub(crate) fn invalid(kind: &str, loc: &[&str], msg: &str, input: &Value) -> SwerexError {
    SwerexError::Invalid(json!([{
        "type": kind,
        "loc": loc,
        "msg": msg,
        "input": input,
    }]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_become_the_python_os_error_of_their_errno() {
        let err = std::io::Error::from_raw_os_error(libc::ENOENT);
        let SwerexError::Raise { class, message, .. } = SwerexError::io(&err, "/x/y") else {
            panic!("not a raise");
        };
        assert_eq!(class, PyClass::FileNotFound);
        assert_eq!(message, "[Errno 2] No such file or directory: '/x/y'");
        let err = std::io::Error::from_raw_os_error(libc::EISDIR);
        let SwerexError::Raise { class, .. } = SwerexError::io(&err, "/x") else {
            panic!("not a raise");
        };
        assert_eq!(class.path(), "builtins.IsADirectoryError");
    }

    #[test]
    fn a_raise_is_a_511_with_the_transfer_fields() {
        let response = SwerexError::raise(PyClass::CommandTimeout, "late").into_response();
        assert_eq!(response.status().as_u16(), 511);
    }
}
