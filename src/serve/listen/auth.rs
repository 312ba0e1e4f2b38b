//! Where the listeners' token comes from: `--token-file` (mode 0600, first
//! line) or `$AGENT_REACH_TOKEN`; and the start-up rule that a listener
//! reachable from other machines needs a token or the operator's explicit
//! `--no-auth`. The gate checks it ([`crate::gate::auth`]).

#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::ListenSpec;
pub(crate) use crate::gate::auth::{Auth, Token};

/// The environment variable holding the token when no `--token-file` is given.
pub(crate) const TOKEN_VAR: &str = "AGENT_REACH_TOKEN";

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
    /// Windows: no owner-only mode to check the file against.
    #[cfg(windows)]
    #[error("--token-file {}: on Windows agent-reach cannot check that only you can read a file; give the token in ${TOKEN_VAR} instead", path.display())]
    Unprotectable { path: PathBuf },
    #[error(
        "{spec} listens on {addr}, which other machines can reach, without a token: give --token-file FILE or ${TOKEN_VAR}, or --no-auth to serve without one (e.g. in a pod behind a NetworkPolicy)"
    )]
    Exposed {
        spec: String,
        addr: std::net::SocketAddr,
    },
}

/// Windows refuses a token file: there is no owner-only mode to check.
#[cfg(windows)]
pub(crate) fn token_from_file(path: &Path) -> Result<Token, AuthError> {
    Err(AuthError::Unprotectable {
        path: path.to_path_buf(),
    })
}

/// The first line of `path`, which must not be readable or writable by
/// group or others.
#[cfg(unix)]
pub(crate) fn token_from_file(path: &Path) -> Result<Token, AuthError> {
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

/// The token of a `serve` process: `--token-file`, else `$AGENT_REACH_TOKEN`.
pub(crate) fn load_token(
    token_file: Option<&Path>,
    env_token: Option<&str>,
) -> Result<Option<Token>, AuthError> {
    match token_file {
        Some(path) => token_from_file(path).map(Some),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_token_file_must_be_private_and_not_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "abc\nignored\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            token_from_file(&file),
            Err(AuthError::Mode { .. })
        ));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(token_from_file(&file).unwrap().matches(b"abc"));
        std::fs::write(&file, "\n").unwrap();
        assert!(matches!(
            token_from_file(&file),
            Err(AuthError::Empty { .. })
        ));
        let missing = dir.path().join("missing");
        assert!(matches!(
            token_from_file(&missing),
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
