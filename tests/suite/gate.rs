//! The gate, attacked as a web page would: every HTTP door of one `serve`
//! process, without a token (normal on loopback), gets a cross-site
//! "simple request" (foreign `Origin`, `text/plain` body), a request with
//! no `Origin` but a `text/plain` body, and a DNS-rebinding `Host`; none
//! may reach the door, and a command in the body must never run. A
//! request as the door's own client sends it still passes. A new door adds
//! a row to `DOORS` and gets every column.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::listeners::listening;
use crate::common::{ServerProcess, TestEnv, serve_listening};

const LIMIT: Duration = Duration::from_secs(30);

/// One attack: what it is, the headers it sends, the status the gate gives.
type Attack<'a> = (&'static str, Vec<(&'static str, &'a str)>, u16);

/// A door: its protocol, the route that parses a body, and the body that
/// would run a command writing `{marker}`.
struct Door {
    protocol: &'static str,
    path: &'static str,
    body: &'static str,
}

const DOORS: &[Door] = &[
    Door {
        protocol: "python-runtime",
        path: "/execute",
        body: r#"{"command":"touch {marker}"}"#,
    },
    Door {
        protocol: "swerex",
        path: "/execute",
        body: r#"{"command":"touch {marker}","shell":true}"#,
    },
    Door {
        protocol: "sandboxd-rest",
        path: "/v1/files/x",
        body: r#"{"command":"touch {marker}"}"#,
    },
    Door {
        protocol: "mcp",
        path: "/mcp",
        body: r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#,
    },
];

/// Sends one raw HTTP/1.1 POST; returns the status code.
fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status from {path}: {answer:?}"))
}

#[test]
fn no_cross_site_or_rebinding_request_reaches_any_door() {
    let env = TestEnv::new();
    let log = env.root.path().join("serve.log");
    let listens: Vec<String> = DOORS
        .iter()
        .map(|door| format!("{}=127.0.0.1:0", door.protocol))
        .collect();
    let child = serve_listening(&env, &log, &listens, "").spawn().unwrap();
    let _known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
    let _server = ServerProcess::new(child);
    let addrs = listening(&log, DOORS.len());
    for door in DOORS {
        let addr = addrs[door.protocol];
        let marker = env.work().join(format!("pwned-{}", door.protocol));
        let body = door.body.replace("{marker}", &marker.to_string_lossy());
        let cases: [Attack<'_>; 4] = [
            (
                "a foreign Origin with a text/plain body",
                vec![
                    ("Origin", "http://evil.example"),
                    ("Content-Type", "text/plain"),
                ],
                403,
            ),
            (
                "a foreign Origin with a JSON body",
                vec![
                    ("Origin", "http://evil.example"),
                    ("Content-Type", "application/json"),
                ],
                403,
            ),
            (
                "a text/plain body without Origin",
                vec![("Content-Type", "text/plain")],
                415,
            ),
            (
                "a rebinding Host",
                vec![
                    ("Host", "evil.example:80"),
                    ("Content-Type", "application/json"),
                ],
                403,
            ),
        ];
        for (what, headers, expected) in cases {
            let status = post(addr, door.path, &headers, &body);
            assert_eq!(status, expected, "{}: {what}", door.protocol);
        }
        assert!(
            !marker.exists(),
            "{}: a refused request ran its command",
            door.protocol
        );
        let ours = post(
            addr,
            door.path,
            &[
                ("Origin", &format!("http://{addr}")),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ],
            &body,
        );
        assert!(
            ![403, 415].contains(&ours),
            "{}: a same-origin JSON request was refused with {ours}",
            door.protocol
        );
    }
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log_text.contains("no token"),
        "a listener without a token says so at start; log:\n{log_text}"
    );
}
