//! The gate: what every request to a network door passes before the door's
//! own code runs, one tower layer ([`layer::GateLayer`]) in front of every
//! HTTP and gRPC listener, served by one accept loop ([`conn`]) that bounds
//! the connections themselves.
//!
//! - `Host` (or HTTP/2's `:authority`) must name a loopback address, an
//!   address the listener is bound to, or an `--allowed-host`; else 403
//!   (DNS rebinding).
//! - A browser's `Origin` must name one of the same hosts; else 403
//!   (cross-site requests, "simple requests" included).
//! - The token, where the door's clients put it ([`auth::Credential`]);
//!   else 401 (the door's shape), but on the door's public health routes.
//! - A request that carries a body must say it is one of the types the
//!   door parses; `text/plain`, `application/x-www-form-urlencoded` or no
//!   type at all is 415, so no cross-site form or `fetch` without a
//!   preflight reaches a parser.
//! - A body over the door's limit is 413 before the door runs (its
//!   `Content-Length`), or cut where it grows over it (a chunked body).
//!
//! Admitted, the request carries its [`Caller`], made here and only here.
//! A door declares only what differs ([`DoorRules`]); it cannot skip the
//! gate, since the listener serves its router only through it.

pub(crate) mod auth;
pub(crate) mod caller;
pub(crate) mod conn;
pub(crate) mod hosts;
pub(crate) mod layer;

pub(crate) use caller::Caller;
pub(crate) use conn::Limits;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use auth::{Auth, Credential};

/// The largest request body any listener reads (an upload included),
/// unless its door declares less.
pub(crate) const MAX_BODY_BYTES: usize = 256 * 1024 * 1024;
/// The largest JSON body any door reads: JSON is parsed whole in memory,
/// so past this it is refused with 413 whatever the door's own limit.
pub(crate) const MAX_JSON_BODY_BYTES: usize = 16 * 1024 * 1024;

/// The body types every HTTP door may parse; a door's client that sends
/// another one declares it in [`DoorRules::extra_types`].
pub(crate) const BODY_TYPES: &[&str] = &[
    "application/json",
    "multipart/form-data",
    "application/octet-stream",
];

/// What one door adds to the gate's rules; [`DoorRules::new`] gives the
/// defaults, a door changes what differs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DoorRules {
    /// The door's protocol name, as its callers are counted (`swerex`, ...).
    pub(crate) door: &'static str,
    /// Where its clients put the token.
    pub(crate) credential: Credential,
    /// Paths that need no token (health checks); every other check holds.
    pub(crate) public: &'static [&'static str],
    /// The media types of the bodies it parses (`type/*` or `prefix*`
    /// match a family).
    pub(crate) body_types: &'static [&'static str],
    /// The largest body it reads.
    pub(crate) body_limit: usize,
    /// Its answer to a refused request, in its protocol's error shape.
    pub(crate) reply: fn(&Refusal) -> Response,
}

impl DoorRules {
    /// The defaults: a bearer token on every route, the common body types,
    /// [`MAX_BODY_BYTES`], JSON refusals ([`json_reply`]).
    pub(crate) const fn new(door: &'static str) -> Self {
        Self {
            door,
            credential: Credential::Bearer,
            public: &[],
            body_types: BODY_TYPES,
            body_limit: MAX_BODY_BYTES,
            reply: json_reply,
        }
    }
}

/// The admission of one listener: the hosts it answers to, the token and
/// its door's rules.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    hosts: Arc<Vec<String>>,
    /// The port the listener is bound to: without a token, a browser page
    /// is let in only from the listener's own origin.
    port: u16,
    auth: Auth,
    rules: DoorRules,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("Host {0:?} is not a name this listener answers to; add it with --allowed-host")]
    Host(String),
    #[error("Origin {0:?} is not allowed: cross-site requests are refused")]
    Origin(String),
    #[error("this server needs {}", .0.describe())]
    MissingCredential(Credential),
    #[error("this server needs {}; the one given is wrong", .0.describe())]
    WrongCredential(Credential),
    #[error("a request body must be one of {expected}; got {got:?}")]
    ContentType { expected: String, got: String },
    #[error("the request body ({length} bytes) is over this door's limit of {limit} bytes")]
    TooLarge { length: u64, limit: usize },
}

impl Refusal {
    /// The HTTP status of the refusal.
    pub(crate) fn status(&self) -> StatusCode {
        match self {
            Refusal::Host(_) | Refusal::Origin(_) => StatusCode::FORBIDDEN,
            Refusal::MissingCredential(_) | Refusal::WrongCredential(_) => StatusCode::UNAUTHORIZED,
            Refusal::ContentType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Refusal::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// A short name of the refusal, for error fields.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Refusal::Host(_) => "forbidden_host",
            Refusal::Origin(_) => "forbidden_origin",
            Refusal::MissingCredential(_) | Refusal::WrongCredential(_) => "unauthorized",
            Refusal::ContentType { .. } => "unsupported_media_type",
            Refusal::TooLarge { .. } => "payload_too_large",
        }
    }

    /// `WWW-Authenticate: Bearer` on a 401 of a bearer door.
    pub(crate) fn challenge(&self) -> Option<(header::HeaderName, &'static str)> {
        matches!(
            self,
            Refusal::MissingCredential(Credential::Bearer)
                | Refusal::WrongCredential(Credential::Bearer)
        )
        .then_some((header::WWW_AUTHENTICATE, "Bearer"))
    }
}

/// The default refusal: its status and `{"error", "message", "detail"}`.
pub(crate) fn json_reply(refusal: &Refusal) -> Response {
    let body = axum::Json(serde_json::json!({
        "error": refusal.kind(),
        "message": refusal.to_string(),
        "detail": refusal.to_string(),
    }));
    let mut response = (refusal.status(), body).into_response();
    if let Some((name, value)) = refusal.challenge() {
        response
            .headers_mut()
            .insert(name, header::HeaderValue::from_static(value));
    }
    response
}

impl Gate {
    /// The gate of a listener bound to `local`, with the operator's extra hosts.
    pub(crate) fn new(
        local: SocketAddr,
        extra_hosts: &[String],
        auth: Auth,
        rules: DoorRules,
    ) -> Self {
        let interfaces = if local.ip().is_unspecified() {
            hosts::interface_addresses()
        } else {
            Vec::new()
        };
        Self {
            hosts: Arc::new(hosts::allowed_hosts(local, &interfaces, extra_hosts)),
            port: local.port(),
            auth,
            rules,
        }
    }

    /// The door's rules.
    pub(crate) fn rules(&self) -> &DoorRules {
        &self.rules
    }

    /// Whether a `method` request for `uri` with `headers` may pass, its
    /// body (`more_body`: one may follow its headers) unread; the digest of
    /// the credential it presented when a token is required.
    pub(crate) fn check(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        more_body: bool,
    ) -> Result<Option<u64>, Refusal> {
        let host = headers
            .get(header::HOST)
            .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
            .or_else(|| uri.authority().map(|a| a.as_str().to_owned()));
        if let Some(host) = host
            && !self.names_us(&host)
        {
            return Err(Refusal::Host(host));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
            // With a token, a page must also hold it; without one, only a
            // page this listener served itself may call it (another local
            // port is another site).
            let allowed = origin_authority(&origin).is_some_and(|(authority, port)| {
                self.names_us(authority) && (self.auth.is_required() || port == self.port)
            });
            if !allowed {
                return Err(Refusal::Origin(origin));
            }
        }
        let digest = self.check_credential(uri, headers)?;
        let length = content_length(headers);
        if *method == Method::POST
            && (length.is_some_and(|n| n > 0) || (length.is_none() && more_body))
        {
            self.check_type(headers)?;
        }
        let limit = self.body_limit(headers);
        if let Some(length) = length
            && length > limit as u64
        {
            return Err(Refusal::TooLarge { length, limit });
        }
        Ok(digest)
    }

    /// The most body bytes a request with `headers` may send: the door's
    /// limit, and [`MAX_JSON_BODY_BYTES`] for a JSON body.
    pub(crate) fn body_limit(&self, headers: &HeaderMap) -> usize {
        let essence = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .unwrap_or_default();
        if essence == "application/json" || essence.ends_with("+json") {
            self.rules.body_limit.min(MAX_JSON_BODY_BYTES)
        } else {
            self.rules.body_limit
        }
    }

    /// The token check: none on a public route or without a token.
    fn check_credential(&self, uri: &Uri, headers: &HeaderMap) -> Result<Option<u64>, Refusal> {
        if !self.auth.is_required() || self.rules.public.contains(&uri.path()) {
            return Ok(None);
        }
        let credential = self.rules.credential;
        match credential.presented(headers) {
            None => Err(Refusal::MissingCredential(credential)),
            Some(presented) if self.auth.accepts(Some(presented)) => {
                Ok(Some(auth::digest(presented)))
            }
            Some(_) => Err(Refusal::WrongCredential(credential)),
        }
    }

    /// Whether the body is of a type the door parses.
    fn check_type(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let got = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let essence = got
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let accepted = self.rules.body_types.iter().any(|t| {
            *t == essence
                || (t.ends_with("/*") && essence.starts_with(&t[..t.len() - 1]))
                || t.strip_suffix('*')
                    .is_some_and(|prefix| !prefix.ends_with('/') && essence.starts_with(prefix))
        });
        if accepted {
            return Ok(());
        }
        Err(Refusal::ContentType {
            expected: self.rules.body_types.join(", "),
            got,
        })
    }

    /// Whether `authority` (`host` or `host:port`) names this listener.
    fn names_us(&self, authority: &str) -> bool {
        let host = host_of(authority);
        self.hosts.iter().any(|allowed| {
            let allowed_host = host_of(allowed);
            if allowed_host.eq_ignore_ascii_case(host) {
                // `name:port` given with --allowed-host pins the port too.
                return !allowed.contains(':')
                    || allowed.parse::<IpAddr>().is_ok()
                    || allowed.eq_ignore_ascii_case(authority);
            }
            false
        }) || host.eq_ignore_ascii_case("localhost")
            || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }
}

/// Serves `app` on `listener` behind `gate` (one [`layer::GateLayer`] in
/// front of every route), within `limits`, until `shutdown`; returns once
/// every connection has ended.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    gate: Gate,
    app: axum::Router,
    limits: Limits,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let service = tower::ServiceBuilder::new()
        .layer(layer::GateLayer::new(gate))
        .service(app);
    conn::serve(listener, service, limits, shutdown).await;
}

/// Whether `authority` (a `Host` header) names this machine's loopback:
/// `localhost` or a loopback address, any port (what a loopback-only
/// listener such as `--metrics-addr` answers to; a DNS-rebinding page
/// sends its own name).
pub(crate) fn names_loopback(authority: &str) -> bool {
    let host = host_of(authority.trim());
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The host part of `host`, `host:port`, `[v6]` or `[v6]:port`.
fn host_of(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    if authority.parse::<IpAddr>().is_ok() {
        return authority;
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    }
}

/// `host[:port]` of an `Origin` (`scheme://host[:port]`); `None` for `null`.
fn origin_authority(origin: &str) -> Option<(&str, u16)> {
    let (scheme, rest) = origin.split_once("://")?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.trim_end_matches('/');
    let port = if let Some(bracketed) = authority.strip_prefix('[') {
        bracketed.split_once("]:").map(|(_, port)| port)
    } else {
        authority.rsplit_once(':').map(|(_, port)| port)
    };
    let port = match port {
        Some(port) => port.parse().ok()?,
        None => default_port,
    };
    Some((authority, port))
}

/// The request's `Content-Length`, if it gives one.
fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

#[cfg(test)]
mod tests {
    use super::auth::Token;
    use super::*;

    const RULES: DoorRules = DoorRules {
        public: &["/health"],
        ..DoorRules::new("test")
    };

    fn gate_with(token: Option<&str>, rules: DoorRules) -> Gate {
        Gate::new(
            "127.0.0.1:8000".parse().unwrap(),
            &["box.example".to_owned()],
            Auth::new(token.and_then(Token::new)),
            rules,
        )
    }

    fn gate() -> Gate {
        gate_with(None, RULES)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn check(g: &Gate, method: &Method, pairs: &[(&'static str, &str)]) -> Result<(), Refusal> {
        g.check(method, &Uri::from_static("/x"), &headers(pairs), false)
            .map(|_| ())
    }

    #[test]
    fn loopback_and_allowed_hosts_pass_and_others_are_refused() {
        let g = gate();
        for host in [
            "127.0.0.1:8000",
            "localhost:8000",
            "[::1]:8000",
            "box.example",
            "127.0.0.1",
        ] {
            assert!(check(&g, &Method::GET, &[("host", host)]).is_ok(), "{host}");
        }
        for host in ["evil.example", "evil.example:8000", "10.0.0.1:8000"] {
            assert_eq!(
                check(&g, &Method::GET, &[("host", host)]),
                Err(Refusal::Host(host.to_owned())),
            );
        }
    }

    #[test]
    fn an_http2_authority_is_checked_as_a_host() {
        let g = gate();
        let foreign = Uri::from_static("http://evil.example/process.v1.ProcessService/Start");
        assert_eq!(
            g.check(&Method::POST, &foreign, &HeaderMap::new(), false),
            Err(Refusal::Host("evil.example".to_owned()))
        );
        let ours = Uri::from_static("http://127.0.0.1:8000/x");
        assert!(
            g.check(&Method::GET, &ours, &HeaderMap::new(), false)
                .is_ok()
        );
    }

    #[test]
    fn a_foreign_origin_is_refused_and_ours_passes() {
        let g = gate();
        let ok = [
            ("host", "127.0.0.1:8000"),
            ("origin", "http://localhost:8000"),
        ];
        assert!(check(&g, &Method::GET, &ok).is_ok());
        for origin in ["http://evil.example", "null", "file://x"] {
            let bad = [("host", "127.0.0.1:8000"), ("origin", origin)];
            assert!(
                matches!(check(&g, &Method::POST, &bad), Err(Refusal::Origin(_))),
                "{origin}"
            );
        }
    }

    #[test]
    fn a_body_must_be_of_a_type_the_door_parses() {
        let g = gate();
        let post = |ct: Option<&str>| {
            let mut h = vec![("host", "127.0.0.1:8000"), ("content-length", "5")];
            if let Some(ct) = ct {
                h.push(("content-type", ct));
            }
            check(&g, &Method::POST, &h)
        };
        assert!(post(Some("application/json")).is_ok());
        assert!(post(Some("application/json; charset=utf-8")).is_ok());
        assert!(post(Some("multipart/form-data; boundary=x")).is_ok());
        for bad in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            assert!(
                matches!(post(bad), Err(Refusal::ContentType { .. })),
                "{bad:?}"
            );
        }
        assert!(
            check(&g, &Method::POST, &[("host", "127.0.0.1:8000")]).is_ok(),
            "no body, nothing to parse"
        );
        let streamed = g.check(
            &Method::POST,
            &Uri::from_static("/x"),
            &HeaderMap::new(),
            true,
        );
        assert!(
            matches!(streamed, Err(Refusal::ContentType { .. })),
            "a body without a length (HTTP/2, chunked) is checked too"
        );
    }

    #[test]
    fn a_family_of_types_matches_by_its_prefix() {
        let g = gate_with(
            None,
            DoorRules {
                body_types: &["application/grpc*"],
                ..RULES
            },
        );
        let post = |ct: &str| {
            check(
                &g,
                &Method::POST,
                &[("content-length", "5"), ("content-type", ct)],
            )
        };
        assert!(post("application/grpc").is_ok());
        assert!(post("application/grpc+proto").is_ok());
        assert!(matches!(
            post("application/json"),
            Err(Refusal::ContentType { .. })
        ));
    }

    #[test]
    fn the_token_is_required_but_on_public_routes() {
        let g = gate_with(Some("s3cret"), RULES);
        let at = |path: &'static str, pairs: &[(&'static str, &str)]| {
            g.check(
                &Method::GET,
                &Uri::from_static(path),
                &headers(pairs),
                false,
            )
        };
        assert_eq!(
            at("/x", &[]),
            Err(Refusal::MissingCredential(Credential::Bearer))
        );
        assert_eq!(
            at("/x", &[("authorization", "Bearer nope")]),
            Err(Refusal::WrongCredential(Credential::Bearer))
        );
        let digest = at("/x", &[("authorization", "Bearer s3cret")]).unwrap();
        assert_eq!(digest, Some(auth::digest(b"s3cret")));
        assert_eq!(at("/health", &[]), Ok(None));
        assert!(
            matches!(
                at("/health", &[("host", "evil.example")]),
                Err(Refusal::Host(_))
            ),
            "a public route still checks the host"
        );
    }

    #[test]
    fn a_body_over_the_limit_is_refused_by_its_length() {
        let g = gate_with(
            None,
            DoorRules {
                body_limit: 10,
                ..RULES
            },
        );
        let post = |length: &str| {
            check(
                &g,
                &Method::PUT,
                &[("content-length", length), ("content-type", "text/plain")],
            )
        };
        assert!(post("10").is_ok());
        assert_eq!(
            post("11"),
            Err(Refusal::TooLarge {
                length: 11,
                limit: 10
            })
        );
    }

    #[test]
    fn refusals_answer_with_their_status_and_a_bearer_challenge() {
        let unauthorized = json_reply(&Refusal::MissingCredential(Credential::Bearer));
        assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(unauthorized.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let keyed = json_reply(&Refusal::WrongCredential(Credential::Header("x-api-key")));
        assert!(!keyed.headers().contains_key(header::WWW_AUTHENTICATE));
        assert_eq!(
            json_reply(&Refusal::TooLarge {
                length: 2,
                limit: 1
            })
            .status(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
    }
}
