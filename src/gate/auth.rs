//! The token check of the gate: the one secret every listener's requests
//! carry (or none, `--no-auth` or loopback), where each door's clients put
//! it ([`Credential`]), compared in constant time and never logged; and the
//! digest of a presented credential that names the caller
//! ([`crate::gate::Caller`]) without holding the secret.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, OnceLock};

use axum::http::{HeaderMap, HeaderValue, header};
use subtle::ConstantTimeEq;

/// A secret every request must present. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Token(Vec<u8>);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token([REDACTED])")
    }
}

impl Token {
    /// A token from its text (surrounding whitespace dropped); `None` if empty.
    pub(crate) fn new(text: &str) -> Option<Token> {
        let text = text.trim();
        (!text.is_empty()).then(|| Token(text.as_bytes().to_vec()))
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
}

/// Where a door's clients put the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Credential {
    /// `Authorization: Bearer TOKEN` (gRPC metadata included).
    Bearer,
    /// The whole value of one header (`X-API-Key`, envd's `X-Access-Token`).
    Header(&'static str),
}

impl Credential {
    /// The credential the request presents, if any.
    pub(crate) fn presented(self, headers: &HeaderMap) -> Option<&[u8]> {
        match self {
            Credential::Bearer => bearer_credential(headers.get(header::AUTHORIZATION)?.as_bytes()),
            Credential::Header(name) => headers.get(name).map(HeaderValue::as_bytes),
        }
    }

    /// How a refusal names what is missing.
    pub(crate) fn describe(self) -> String {
        match self {
            Credential::Bearer => "Authorization: Bearer <token>".to_owned(),
            Credential::Header(name) => format!("{name}: <token>"),
        }
    }
}

/// The credential of one `Bearer X` value (scheme case-insensitive).
pub(crate) fn bearer_credential(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
}

/// A digest of a presented credential, keyed per process: equal for equal
/// credentials within one server, useless to anyone who sees it.
pub(crate) fn digest(credential: &[u8]) -> u64 {
    static KEY: OnceLock<std::hash::RandomState> = OnceLock::new();
    let mut hasher = KEY.get_or_init(std::hash::RandomState::new).build_hasher();
    hasher.write(credential);
    hasher.finish()
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

    fn accepts(auth: &Auth, credential: Credential, pairs: &[(&'static str, &str)]) -> bool {
        auth.accepts(credential.presented(&headers(pairs)))
    }

    #[test]
    fn only_the_exact_token_is_accepted_where_the_door_wants_it() {
        let auth = Auth::new(Token::new("s3cret"));
        let bearer = Credential::Bearer;
        assert!(accepts(
            &auth,
            bearer,
            &[("authorization", "Bearer s3cret")]
        ));
        assert!(accepts(
            &auth,
            bearer,
            &[("authorization", "bearer s3cret")]
        ));
        assert!(!accepts(
            &auth,
            bearer,
            &[("authorization", "Bearer s3cre")]
        ));
        assert!(!accepts(
            &auth,
            bearer,
            &[("authorization", "Bearer s3crett")]
        ));
        assert!(!accepts(
            &auth,
            bearer,
            &[("authorization", "Basic s3cret")]
        ));
        assert!(!accepts(&auth, bearer, &[]));
        let key = Credential::Header("x-api-key");
        assert!(accepts(&auth, key, &[("x-api-key", "s3cret")]));
        assert!(!accepts(&auth, key, &[("x-api-key", "nope")]));
        assert!(!accepts(&auth, key, &[("authorization", "Bearer s3cret")]));
    }

    #[test]
    fn without_a_token_everything_is_accepted() {
        let auth = Auth::new(None);
        assert!(!auth.is_required());
        assert!(accepts(&auth, Credential::Bearer, &[]));
    }

    #[test]
    fn the_token_never_shows_in_debug_output() {
        let token = Token::new("s3cret").unwrap();
        assert!(!format!("{token:?}").contains("s3cret"));
    }

    #[test]
    fn a_digest_tells_credentials_apart_without_showing_them() {
        assert_eq!(digest(b"s3cret"), digest(b"s3cret"));
        assert_ne!(digest(b"s3cret"), digest(b"s3cre"));
        assert!(!format!("{:016x}", digest(b"s3cret")).contains("s3cret"));
    }
}
