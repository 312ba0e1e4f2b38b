//! The gate: what every request to an HTTP door passes before the door's
//! own code runs, applied once per listener as one layer ([`admit`]).
//!
//! - `Host` must name a loopback address, an address the listener is bound
//!   to, or an `--allowed-host`; else 403 (DNS rebinding).
//! - A browser's `Origin` must name one of the same hosts; else 403
//!   (cross-site requests, "simple requests" included).
//! - A request that carries a body must say it is one of the types the
//!   door parses; `text/plain`, `application/x-www-form-urlencoded` or no
//!   type at all is 415, so no cross-site form or `fetch` without a
//!   preflight reaches a parser.
//!
//! A door declares only what differs ([`DoorRules`]); it cannot skip the
//! gate, since the listener wraps its router (see `serve::listen`).

pub(crate) mod caller;
pub(crate) mod hosts;

pub(crate) use caller::Caller;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The body types every HTTP door may parse; a door's client that sends
/// another one declares it in [`DoorRules::extra_types`].
pub(crate) const BODY_TYPES: &[&str] = &[
    "application/json",
    "multipart/form-data",
    "application/octet-stream",
];

/// What one door adds to the gate's rules.
#[derive(Debug, Clone, Default)]
pub(crate) struct DoorRules {
    /// Media types beyond [`BODY_TYPES`] its published client sends.
    pub(crate) extra_types: &'static [&'static str],
}

/// The admission of one listener: the hosts it answers to and its door's rules.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    hosts: Arc<Vec<String>>,
    rules: DoorRules,
}

/// Why a request was not admitted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    #[error("Host {0:?} is not a name this listener answers to; add it with --allowed-host")]
    Host(String),
    #[error("Origin {0:?} is not allowed: cross-site requests are refused")]
    Origin(String),
    #[error("a request body must be one of {expected}; got {got:?}")]
    ContentType { expected: String, got: String },
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Refusal::Host(_) | Refusal::Origin(_) => StatusCode::FORBIDDEN,
            Refusal::ContentType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let kind = match self {
            Refusal::Host(_) => "forbidden_host",
            Refusal::Origin(_) => "forbidden_origin",
            Refusal::ContentType { .. } => "unsupported_media_type",
        };
        (
            self.status(),
            axum::Json(serde_json::json!({
                "error": kind,
                "message": self.to_string(),
                "detail": self.to_string(),
            })),
        )
            .into_response()
    }
}

impl Gate {
    /// The gate of a listener bound to `local`, with the operator's extra hosts.
    pub(crate) fn new(local: SocketAddr, extra_hosts: &[String], rules: DoorRules) -> Self {
        let interfaces = if local.ip().is_unspecified() {
            hosts::interface_addresses()
        } else {
            Vec::new()
        };
        Self {
            hosts: Arc::new(hosts::allowed_hosts(local, &interfaces, extra_hosts)),
            rules,
        }
    }

    /// Whether `headers` of a `method` request may pass.
    pub(crate) fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        if let Some(host) = headers.get(header::HOST) {
            let host = String::from_utf8_lossy(host.as_bytes()).into_owned();
            if !self.names_us(&host) {
                return Err(Refusal::Host(host));
            }
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
            let allowed = origin_authority(&origin).is_some_and(|a| self.names_us(a));
            if !allowed {
                return Err(Refusal::Origin(origin));
            }
        }
        if carries_body(method, headers) {
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
            let accepted = BODY_TYPES.iter().chain(self.rules.extra_types).any(|t| {
                *t == essence || (t.ends_with("/*") && essence.starts_with(&t[..t.len() - 1]))
            });
            if !accepted {
                let expected = BODY_TYPES
                    .iter()
                    .chain(self.rules.extra_types)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(Refusal::ContentType { expected, got });
            }
        }
        Ok(())
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
fn origin_authority(origin: &str) -> Option<&str> {
    let (scheme, rest) = origin.split_once("://")?;
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return None;
    }
    Some(rest.trim_end_matches('/'))
}

/// Whether the request is a `POST` with a body to parse (a length above
/// zero or a chunked body): the one method a browser sends cross-site
/// without a preflight. Other methods need a preflight this server never
/// grants, and the `Origin` check stops them besides.
fn carries_body(method: &Method, headers: &HeaderMap) -> bool {
    if *method != Method::POST {
        return false;
    }
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    chunked || length > 0
}

/// The gate as axum middleware: every request of the listener passes it
/// before routing.
pub(crate) async fn admit(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    match gate.check(request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::warn!(reason = %refusal, path = %request.uri().path(), "request refused at the gate");
            refusal.into_response()
        }
    }
}

/// `router` with the gate in front of every route.
pub(crate) fn guard(router: axum::Router, gate: Gate) -> axum::Router {
    router.layer(axum::middleware::from_fn_with_state(gate, admit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Gate {
        Gate::new(
            "127.0.0.1:8000".parse().unwrap(),
            &["box.example".to_owned()],
            DoorRules::default(),
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
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
            assert!(
                g.check(&Method::GET, &headers(&[("host", host)])).is_ok(),
                "{host}"
            );
        }
        for host in ["evil.example", "evil.example:8000", "10.0.0.1:8000"] {
            assert_eq!(
                g.check(&Method::GET, &headers(&[("host", host)])),
                Err(Refusal::Host(host.to_owned())),
            );
        }
    }

    #[test]
    fn a_foreign_origin_is_refused_and_ours_passes() {
        let g = gate();
        let ok = headers(&[
            ("host", "127.0.0.1:8000"),
            ("origin", "http://localhost:8000"),
        ]);
        assert!(g.check(&Method::GET, &ok).is_ok());
        for origin in ["http://evil.example", "null", "file://x"] {
            let bad = headers(&[("host", "127.0.0.1:8000"), ("origin", origin)]);
            assert!(
                matches!(g.check(&Method::POST, &bad), Err(Refusal::Origin(_))),
                "{origin}"
            );
        }
    }

    #[test]
    fn a_body_must_be_of_a_type_the_door_parses() {
        let g = gate();
        let post = |ct: Option<&str>| {
            let mut h = headers(&[("host", "127.0.0.1:8000"), ("content-length", "5")]);
            if let Some(ct) = ct {
                h.insert("content-type", ct.parse().unwrap());
            }
            g.check(&Method::POST, &h)
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
        let empty = headers(&[("host", "127.0.0.1:8000")]);
        assert!(
            g.check(&Method::POST, &empty).is_ok(),
            "no body, nothing to parse"
        );
    }
}
