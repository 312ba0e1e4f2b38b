//! Who may talk to a listener: the bearer token of the contract, read from
//! `--token-file` (mode 0600, first line) or `$AGENT_REACH_TOKEN`, compared
//! in constant time, never logged; and the start-up rule that a listener
//! reachable from other machines needs a token or the operator's explicit
//! `--no-auth`.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::ListenSpec;

/// The environment variable holding the token when no `--token-file` is given.
pub(crate) const TOKEN_VAR: &str = "AGENT_REACH_TOKEN";

/// A secret every request must present. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(Vec<u8>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token([REDACTED])")
    }
}

/// Why the token could not be had, or why the listeners may not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    #[error("--token-file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--token-file {} is readable by others (mode {mode:o}); chmod 600 it", path.display())]
    Mode { path: PathBuf, mode: u32 },
    #[error("--token-file {} holds no token on its first line", path.display())]
    Empty { path: PathBuf },
    #[error(
        "{spec} listens on {addr}, which other machines can reach, without a token: give --token-file FILE or ${TOKEN_VAR}, or --no-auth to serve without one (e.g. in a pod behind a NetworkPolicy)"
    )]
    Exposed {
        spec: String,
        addr: std::net::SocketAddr,
    },
}

impl Token {
    /// A token from its text (surrounding whitespace dropped); `None` if empty.
    pub(crate) fn new(text: &str) -> Option<Token> {
        let text = text.trim();
        (!text.is_empty()).then(|| Token(text.as_bytes().to_vec()))
    }

    /// The first line of `path`, which must not be readable or writable by
    /// group or others.
    pub(crate) fn from_file(path: &Path) -> Result<Token, AuthError> {
        let read = |source| AuthError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(AuthError::Mode {
                path: path.to_path_buf(),
                mode,
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Token::new(text.lines().next().unwrap_or_default()).ok_or_else(|| AuthError::Empty {
            path: path.to_path_buf(),
        })
    }

    /// Whether `presented` is this token, in time independent of where
    /// they differ.
    pub(crate) fn matches(&self, presented: &[u8]) -> bool {
        self.0.len() == presented.len() && bool::from(self.0.ct_eq(presented))
    }
}

/// The token check of every listener: `None` lets every request through.
#[derive(Debug, Clone, Default)]
pub(crate) struct Auth {
    token: Option<Arc<Token>>,
}

impl Auth {
    /// Checks for `token` (or nothing, when `None`).
    pub(crate) fn new(token: Option<Token>) -> Self {
        Self {
            token: token.map(Arc::new),
        }
    }

    /// Whether a token is required at all.
    pub(crate) fn is_required(&self) -> bool {
        self.token.is_some()
    }

    /// Whether `presented` (the raw credential) is accepted.
    pub(crate) fn accepts(&self, presented: Option<&[u8]>) -> bool {
        match (&self.token, presented) {
            (None, _) => true,
            (Some(token), Some(presented)) => token.matches(presented),
            (Some(_), None) => false,
        }
    }

    /// Whether the headers carry `Authorization: Bearer TOKEN`.
    pub(crate) fn accepts_bearer(&self, headers: &HeaderMap) -> bool {
        self.accepts(bearer(headers))
    }

    /// Whether the headers carry the token in header `name` (`X-API-Key`).
    pub(crate) fn accepts_header(&self, headers: &HeaderMap, name: &str) -> bool {
        self.accepts(headers.get(name).map(HeaderValue::as_bytes))
    }
}

/// The credential of `Authorization: Bearer X` (scheme case-insensitive).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    bearer_credential(headers.get(header::AUTHORIZATION)?.as_bytes())
}

/// The credential of one `Bearer X` value (gRPC metadata included).
pub(crate) fn bearer_credential(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

/// The token of a `serve` process: `--token-file`, else `$AGENT_REACH_TOKEN`.
pub(crate) fn load_token(
    token_file: Option<&Path>,
    env_token: Option<&str>,
) -> Result<Option<Token>, AuthError> {
    match token_file {
        Some(path) => Token::from_file(path).map(Some),
        None => Ok(env_token.and_then(Token::new)),
    }
}

/// The start-up rule: a listener off loopback needs a token or `--no-auth`.
pub(crate) fn check_exposure(
    specs: &[ListenSpec],
    auth: &Auth,
    no_auth: bool,
) -> Result<(), AuthError> {
    if auth.is_required() || no_auth {
        return Ok(());
    }
    match specs.iter().find(|s| !s.is_loopback()) {
        Some(spec) => Err(AuthError::Exposed {
            spec: spec.protocol.to_string(),
            addr: spec.addr,
        }),
        None => Ok(()),
    }
}

/// The 401 of an HTTP listener: `WWW-Authenticate: Bearer` and a JSON body.
pub(crate) fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        axum::Json(serde_json::json!({
            "error": "unauthorized",
            "message": "this server needs Authorization: Bearer <token>"
        })),
    )
        .into_response()
}

/// axum middleware: requests without the bearer token get [`unauthorized`].
/// Routes that need no token (health checks) are mounted outside it.
pub(crate) async fn require_bearer(
    State(auth): State<Auth>,
    request: Request,
    next: Next,
) -> Response {
    if auth.accepts_bearer(request.headers()) {
        next.run(request).await
    } else {
        unauthorized()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_the_exact_token_is_accepted() {
        let auth = Auth::new(Token::new("s3cret"));
        assert!(auth.accepts_bearer(&headers(&[("authorization", "Bearer s3cret")])));
        assert!(auth.accepts_bearer(&headers(&[("authorization", "bearer s3cret")])));
        assert!(!auth.accepts_bearer(&headers(&[("authorization", "Bearer s3cre")])));
        assert!(!auth.accepts_bearer(&headers(&[("authorization", "Bearer s3crett")])));
        assert!(!auth.accepts_bearer(&headers(&[("authorization", "Basic s3cret")])));
        assert!(!auth.accepts_bearer(&headers(&[])));
        assert!(auth.accepts_header(&headers(&[("x-api-key", "s3cret")]), "x-api-key"));
        assert!(!auth.accepts_header(&headers(&[("x-api-key", "nope")]), "x-api-key"));
    }

    #[test]
    fn without_a_token_everything_is_accepted() {
        let auth = Auth::new(None);
        assert!(!auth.is_required());
        assert!(auth.accepts_bearer(&headers(&[])));
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let token = Token::new("s3cret").unwrap();
        assert!(!format!("{token:?}").contains("s3cret"));
    }

    #[test]
    fn a_token_file_must_be_private_and_not_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "abc\nignored\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Token::from_file(&file),
            Err(AuthError::Mode { .. })
        ));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Token::from_file(&file).unwrap().matches(b"abc"));
        std::fs::write(&file, "\n").unwrap();
        assert!(matches!(
            Token::from_file(&file),
            Err(AuthError::Empty { .. })
        ));
        let missing = dir.path().join("missing");
        assert!(matches!(
            Token::from_file(&missing),
            Err(AuthError::Read { .. })
        ));
    }

    #[test]
    fn a_listener_off_loopback_needs_a_token_or_no_auth() {
        let open: Vec<ListenSpec> = vec!["mcp=:8765".parse().unwrap()];
        let local: Vec<ListenSpec> = vec!["mcp=127.0.0.1:8765".parse().unwrap()];
        let none = Auth::new(None);
        let some = Auth::new(Token::new("t"));
        assert!(matches!(
            check_exposure(&open, &none, false),
            Err(AuthError::Exposed { .. })
        ));
        assert!(check_exposure(&open, &none, true).is_ok());
        assert!(check_exposure(&open, &some, false).is_ok());
        assert!(check_exposure(&local, &none, false).is_ok());
    }
}
