//! The gate, attacked from outside through the real binary on loopback:
//! every door of one `serve` process (HTTP and gRPC), as a web page would
//! without a token (a cross-site "simple request", a rebinding `Host`), and
//! with a token as any client could (none, a wrong one, a body one byte over
//! the door's limit, half a request line and then nothing), and the
//! connection cap. None may reach the door, a command in the body never
//! runs, every refusal comes in the door's own shape, and a request as the
//! door's own client sends it still passes. A new door adds a row to
//! `DOORS` and gets every column.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::listeners::listening;
use crate::common::{ServerProcess, TestEnv, serve_listening};

const LIMIT: Duration = Duration::from_secs(30);

/// One attack: what it is, the headers it sends, the status the gate gives.
type Attack<'a> = (&'static str, Vec<(&'static str, &'a str)>, u16);

/// A door: its protocol, the route that parses a body, the body that
/// would run a command writing `{marker}` and its type, where its clients
/// put the token, the status it answers a request without one, its body
/// limit, and what its refusals always carry (its error shape).
struct Door {
    protocol: &'static str,
    path: &'static str,
    body: &'static str,
    content_type: &'static str,
    credential: fn(&str) -> (&'static str, String),
    missing_token: u16,
    body_limit: usize,
    shape: &'static str,
}

fn bearer(token: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {token}"))
}

fn api_key(token: &str) -> (&'static str, String) {
    ("X-API-Key", token.to_owned())
}

fn access_token(token: &str) -> (&'static str, String) {
    ("X-Access-Token", token.to_owned())
}

const MIB: usize = 1024 * 1024;

const DOORS: &[Door] = &[
    Door {
        protocol: "python-runtime",
        path: "/execute",
        body: r#"{"command":"touch {marker}"}"#,
        content_type: "application/json",
        credential: bearer,
        missing_token: 401,
        body_limit: 256 * MIB,
        shape: r#""message""#,
    },
    Door {
        protocol: "swerex",
        path: "/execute",
        body: r#"{"command":"touch {marker}","shell":true}"#,
        content_type: "application/json",
        credential: api_key,
        missing_token: 403,
        body_limit: 256 * MIB,
        shape: r#""detail""#,
    },
    Door {
        protocol: "sandboxd-rest",
        path: "/v1/files/x",
        body: r#"{"command":"touch {marker}"}"#,
        content_type: "application/json",
        credential: bearer,
        missing_token: 401,
        body_limit: 256 * MIB,
        shape: r#""code""#,
    },
    Door {
        protocol: "mcp",
        path: "/mcp",
        body: r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}"#,
        content_type: "application/json",
        credential: bearer,
        missing_token: 401,
        body_limit: 16 * MIB,
        shape: r#""jsonrpc""#,
    },
    Door {
        protocol: "envd",
        path: "/process.Process/Start",
        body: r#"{"process":{"cmd":"/bin/sh","args":["-c","touch {marker}"]}}"#,
        content_type: "application/json",
        credential: access_token,
        missing_token: 401,
        body_limit: 256 * MIB,
        shape: r#""code""#,
    },
    Door {
        protocol: "sandboxd-grpc",
        path: "/process.v1.ProcessService/Execute",
        body: r#"{"command":"touch {marker}"}"#,
        content_type: "application/grpc",
        credential: bearer,
        missing_token: 401,
        body_limit: 4 * MIB + 5,
        shape: "grpc-status",
    },
];

/// One raw HTTP/1.1 answer.
struct Answer {
    status: u16,
    /// The head and body as text, header names lowercased.
    text: String,
    grpc_status: Option<u16>,
}

impl Answer {
    /// The HTTP status the answer means: a gRPC refusal is a 200 whose
    /// `grpc-status` says it (16 is 401, 7 is 403, 8 is 413).
    fn meaning(&self) -> u16 {
        match self.grpc_status {
            Some(16) => 401,
            Some(7) => 403,
            Some(8) => 413,
            Some(0) | None => self.status,
            Some(_) => 500,
        }
    }
}

/// Sends `head` (its lines, without the blank line) and `body` on a new
/// connection and reads the whole answer.
fn exchange(addr: SocketAddr, head: &str, body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    stream
        .write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())
        .unwrap();
    // A refused body may be cut off unread: a write error is the gate's.
    let _ = stream.write_all(body);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let head = head.to_ascii_lowercase();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status: {answer:?}"));
    let grpc_status = head
        .lines()
        .find_map(|l| l.strip_prefix("grpc-status:"))
        .and_then(|v| v.trim().parse().ok());
    Answer {
        status,
        text: format!("{head}\r\n\r\n{rest}"),
        grpc_status,
    }
}

/// Sends one raw HTTP/1.1 POST; returns the status it means.
fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> u16 {
    let mut head = format!("POST {path} HTTP/1.1\r\nContent-Length: {}\r\n", body.len());
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    exchange(addr, &head, body.as_bytes()).meaning()
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
                    ("Content-Type", door.content_type),
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
                    ("Content-Type", door.content_type),
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
                ("Content-Type", door.content_type),
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

/// The token of the servers that require one.
const TOKEN: &str = "t0ken-of-the-gate";
/// The header timeout the tests give the gate (test-only variable).
const HEADER_TIMEOUT_MS: u64 = 500;

/// One `serve` process with every door, the token required and a short
/// header timeout; its log and each door's address.
fn serve_every_door(
    env: &TestEnv,
    extra_env: &[(&str, String)],
) -> (
    ServerProcess,
    std::collections::BTreeMap<String, SocketAddr>,
) {
    let log = env.root.path().join("serve.log");
    let listens: Vec<String> = DOORS
        .iter()
        .map(|door| format!("{}=127.0.0.1:0", door.protocol))
        .collect();
    let mut command = serve_listening(env, &log, &listens, TOKEN);
    for (name, value) in extra_env {
        command.env(name, value);
    }
    let child = command.spawn().unwrap();
    let _known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
    let server = ServerProcess::new(child);
    (server, listening(&log, DOORS.len()))
}

#[test]
fn every_door_refuses_in_its_own_shape_before_its_code_runs() {
    let env = TestEnv::new();
    let (_server, addrs) = serve_every_door(
        &env,
        &[(
            "AGENT_REACH_GATE_HEADER_TIMEOUT_MS",
            HEADER_TIMEOUT_MS.to_string(),
        )],
    );
    for door in DOORS {
        let addr = addrs[door.protocol];
        let marker = env.work().join(format!("pwned-{}", door.protocol));
        let body = door.body.replace("{marker}", &marker.to_string_lossy());
        let (key_name, right) = (door.credential)(TOKEN);
        let (_, wrong) = (door.credential)("not-the-token");
        let over = (door.body_limit + 1).to_string();
        let cases: Vec<Attack<'_>> = vec![
            (
                "no token",
                vec![("Content-Type", door.content_type)],
                door.missing_token,
            ),
            (
                "a wrong token",
                vec![(key_name, &wrong), ("Content-Type", door.content_type)],
                401,
            ),
            (
                "a foreign Host with the token",
                vec![
                    (key_name, &right),
                    ("Host", "evil.example"),
                    ("Content-Type", door.content_type),
                ],
                403,
            ),
            (
                "a foreign Origin and a text/plain body with the token",
                vec![
                    (key_name, &right),
                    ("Origin", "http://evil.example"),
                    ("Content-Type", "text/plain"),
                ],
                403,
            ),
            (
                "a text/plain body with the token",
                vec![(key_name, &right), ("Content-Type", "text/plain")],
                415,
            ),
        ];
        for (what, headers, expected) in cases {
            let mut head = format!(
                "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
                door.path,
                body.len()
            );
            for (name, value) in &headers {
                if name.eq_ignore_ascii_case("host") {
                    head = head.replace(&format!("Host: {addr}"), &format!("Host: {value}"));
                } else {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
            }
            let answer = exchange(addr, &head, body.as_bytes());
            assert_eq!(
                answer.meaning(),
                expected,
                "{}: {what}: {}",
                door.protocol,
                answer.text
            );
            if expected != 415 || door.protocol != "sandboxd-grpc" {
                assert!(
                    answer.text.contains(door.shape),
                    "{}: {what}: not in the door's shape ({}): {}",
                    door.protocol,
                    door.shape,
                    answer.text
                );
            }
        }
        // One byte over the door's limit: refused on its length, before a
        // byte of it is read or anything written.
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {addr}\r\n{key_name}: {right}\r\nContent-Type: {}\r\nContent-Length: {over}\r\n",
            door.path, door.content_type
        );
        let answer = exchange(addr, &head, body.as_bytes());
        assert_eq!(
            answer.meaning(),
            413,
            "{}: a body one byte over: {}",
            door.protocol,
            answer.text
        );
        assert!(
            answer.text.contains(door.shape),
            "{}: 413 not in the door's shape: {}",
            door.protocol,
            answer.text
        );
        assert!(
            !marker.exists(),
            "{}: a refused request ran its command",
            door.protocol
        );
        half_open_is_cut(door.protocol, addr);
    }
}

/// A client that sends half a request line and then nothing is cut off
/// once the header timeout passes.
fn half_open_is_cut(protocol: &str, addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    stream.write_all(b"POST /execute HT").unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 256];
    let ended = match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => true,
        Err(e) => e.kind() == ErrorKind::ConnectionReset,
    };
    let waited = started.elapsed();
    assert!(ended, "{protocol}: a half-open connection was never closed");
    assert!(
        waited >= Duration::from_millis(HEADER_TIMEOUT_MS / 2) && waited < Duration::from_secs(5),
        "{protocol}: a half-open connection closed after {waited:?}, not the header timeout"
    );
}

#[test]
fn a_grpc_client_naming_a_foreign_authority_or_no_token_is_refused() {
    use agent_reach::doors::sandboxd_grpc::proto::process_v1::process_service_client::ProcessServiceClient;
    use agent_reach::doors::sandboxd_grpc::proto::process_v1::{ExecuteRequest, ProcessConfig};
    let env = TestEnv::new();
    let (_server, addrs) = serve_every_door(&env, &[]);
    let addr = addrs["sandboxd-grpc"];
    let runtime = super::sandboxd_grpc::runtime();
    runtime.block_on(async {
        let call = |origin: &'static str, token: Option<&'static str>| async move {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
                .unwrap()
                .origin(origin.parse().unwrap())
                .connect()
                .await
                .unwrap();
            let mut client = ProcessServiceClient::with_interceptor(
                channel,
                move |mut request: tonic::Request<()>| {
                    if let Some(token) = token {
                        request
                            .metadata_mut()
                            .insert("authorization", format!("Bearer {token}").parse().unwrap());
                    }
                    Ok(request)
                },
            );
            client
                .execute(ExecuteRequest {
                    config: Some(ProcessConfig {
                        command: vec!["/bin/true".to_owned()],
                        ..Default::default()
                    }),
                })
                .await
        };
        let own = format!("http://{addr}").leak() as &'static str;
        let foreign = call("http://evil.example", Some(TOKEN)).await.unwrap_err();
        assert_eq!(foreign.code(), tonic::Code::PermissionDenied, "{foreign:?}");
        let none = call(own, None).await.unwrap_err();
        assert_eq!(none.code(), tonic::Code::Unauthenticated, "{none:?}");
        let ours = call(own, Some(TOKEN)).await;
        assert!(
            !matches!(
                ours.as_ref().map_err(tonic::Status::code),
                Err(tonic::Code::PermissionDenied | tonic::Code::Unauthenticated)
            ),
            "the door's own client with the token was refused: {ours:?}"
        );
    });
}

/// Opens a connection and sends half a request head, so the server holds
/// it open (until the header timeout, 10 s by default).
fn hold(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\n").unwrap();
    stream
}

#[test]
fn past_max_connections_a_new_connection_waits_until_one_closes() {
    let env = TestEnv::new();
    let log = env.root.path().join("serve.log");
    let mut command = serve_listening(&env, &log, &["python-runtime=127.0.0.1:0".to_owned()], "");
    command.args(["--max-connections", "2"]);
    let child = command.spawn().unwrap();
    let _known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
    let _server = ServerProcess::new(child);
    let addr = listening(&log, 1)["python-runtime"];
    let first = hold(addr);
    let _second = hold(addr);
    let mut third = TcpStream::connect(addr).unwrap();
    third
        .write_all(
            format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(1000)))
        .unwrap();
    let mut buf = [0u8; 64];
    match third.read(&mut buf) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("a third connection past --max-connections 2 was answered: {other:?}"),
    }
    drop(first);
    third.set_read_timeout(Some(LIMIT)).unwrap();
    let mut answer = Vec::new();
    let _ = third.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "once a connection closed, the waiting one is served: {answer:?}"
    );
}

#[test]
fn an_idle_connection_closes_but_a_long_request_is_not_idle() {
    let env = TestEnv::new();
    let log = env.root.path().join("serve.log");
    let mut command = serve_listening(&env, &log, &["python-runtime=127.0.0.1:0".to_owned()], "");
    let config = env.write("registry.toml", "allow_raw_commands = true\n");
    command.arg("--config").arg(&config);
    command.env("AGENT_REACH_GATE_IDLE_TIMEOUT_MS", "400");
    let child = command.spawn().unwrap();
    let _known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
    let _server = ServerProcess::new(child);
    let addr = listening(&log, 1)["python-runtime"];
    // A request that takes longer than the idle timeout still gets its
    // answer on the same connection.
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    let body = r#"{"command":"sleep 1.2; echo slept"}"#;
    stream
        .write_all(
            format!(
                "POST /execute HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Read the answer (keep-alive: the server then closes it when idle).
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading the answer: {e}"),
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 "), "{answer:?}");
    assert!(
        !answer.is_empty() && started.elapsed() >= Duration::from_millis(1200),
        "answered after {:?}: {answer:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the idle connection was not closed after the answer"
    );
}

#[test]
fn a_chunked_body_growing_over_the_limit_is_cut_with_413() {
    let env = TestEnv::new();
    let (_server, addrs) = serve_every_door(&env, &[]);
    for door in DOORS.iter().filter(|d| d.protocol == "mcp") {
        let addr = addrs[door.protocol];
        let (key_name, right) = (door.credential)(TOKEN);
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(LIMIT)).unwrap();
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {addr}\r\n{key_name}: {right}\r\nContent-Type: {}\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
            door.path, door.content_type
        );
        let mut writer = stream.try_clone().unwrap();
        let limit = door.body_limit;
        let sending = std::thread::spawn(move || {
            writer.write_all(head.as_bytes())?;
            let chunk = vec![b' '; MIB];
            let mut sent = 0;
            while sent <= limit {
                let n = chunk.len().min(limit + 1 - sent);
                writer.write_all(format!("{n:x}\r\n").as_bytes())?;
                writer.write_all(&chunk[..n])?;
                writer.write_all(b"\r\n")?;
                sent += n;
            }
            writer.write_all(b"0\r\n\r\n")
        });
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let _ = sending.join();
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with("HTTP/1.1 413") && answer.contains(door.shape),
            "{}: a chunked body one byte over {limit}: {answer:?}",
            door.protocol
        );
    }
}

/// A refusal that leaves the request's body unread ends the connection, and
/// says so (`Connection: close`): a client keeping the connection for its
/// next request would otherwise send it as the close arrives (the `mcp`
/// SDK 2.x's client did, "Server disconnected without sending a response").
#[test]
fn a_refusal_before_the_body_says_the_connection_closes() {
    let env = TestEnv::new();
    let (_server, addrs) = serve_every_door(&env, &[]);
    for door in DOORS {
        let addr = addrs[door.protocol];
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(LIMIT)).unwrap();
        // The head only: the body it announces is never sent.
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {}\r\nContent-Length: 100000\r\n\r\n",
            door.path, door.content_type
        );
        stream.write_all(head.as_bytes()).unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
        let (head, _) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        assert!(
            head.lines().any(|l| l.trim() == "connection: close"),
            "{}: a refusal with its body unread does not say the connection closes: {head:?}",
            door.protocol
        );
    }
}
