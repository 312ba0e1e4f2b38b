//! Whole-process benchmark of `agent-reach serve --listen mcp=...`, with its
//! baselines measured in the same run:
//! - the round trip of `exec_command` for `true` over streamable HTTP,
//!   interleaved call by call with the same over stdio (a second server
//!   process) and with a bare fork+exec of `bash -c true`;
//! - the same round trip with two bare clients of this file (HTTP/1.1
//!   keep-alive on one socket, JSON lines on a pipe), so the server's own
//!   share shows apart from rmcp's client;
//! - 64 concurrent HTTP clients (one MCP session each) making 100 calls
//!   each: errors, median and p99 latency; once of `exec_command true`,
//!   against 64 threads each doing 100 bare fork+exec+waits of the same
//!   shell (the floor under any server that runs the command), and once of
//!   `list_sessions`, which spawns nothing (the server's own share);
//! - the server's RSS per idle MCP session (clients connected, no calls) and
//!   per idle exec session (`sleep` left running), from `/proc/PID/status`.
//!
//! Prints medians; asserts nothing. `AGENT_REACH_BIN=PATH` measures
//! another build of the server (the static one `install.sh` ships, or an
//! older commit's) against the same baselines. `cargo bench --bench mcp_http`.

#![expect(clippy::expect_used, reason = "a benchmark stops at a failed setup")]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};

/// The command the bare baseline forks and execs (the shell the server runs `true` with).
const BARE: &[&str] = &["/bin/bash", "-c", "true"];

const TOKEN: &str = "bench-token";
const ROUND_TRIPS: usize = 300;
const CLIENTS: usize = 64;
const CALLS_PER_CLIENT: usize = 100;
const IDLE_CLIENTS: usize = 100;
const IDLE_SESSIONS: usize = 100;

type Client = RunningService<RoleClient, ()>;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// (median, p90, p99) in milliseconds.
fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort_unstable();
    let at = |q: f64| ms(v[((v.len() as f64 * q) as usize).min(v.len() - 1)]);
    (at(0.5), at(0.9), at(0.99))
}

fn exec(cmd: &str) -> CallToolRequestParams {
    let args = serde_json::json!({"cmd": cmd, "yield_time_ms": 250});
    CallToolRequestParams::new("exec_command")
        .with_arguments(args.as_object().cloned().unwrap_or_default())
}

async fn timed_call(client: &Client) -> Result<Duration, String> {
    timed(client, exec("true")).await
}

async fn timed(client: &Client, params: CallToolRequestParams) -> Result<Duration, String> {
    let start = Instant::now();
    let result = client.call_tool(params).await.map_err(|e| e.to_string())?;
    if result.is_error == Some(true) {
        return Err(format!("{:?}", result.content));
    }
    Ok(start.elapsed())
}

/// [`CLIENTS`] clients (an MCP session each) making [`CALLS_PER_CLIENT`]
/// calls of `params` each, all at once: (answered, errors, calls per
/// second, latency stats).
async fn concurrent(
    url: &str,
    params: CallToolRequestParams,
) -> (usize, usize, f64, (f64, f64, f64)) {
    let mut clients = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        clients.push(http_client(url).await);
    }
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for client in clients {
        let params = params.clone();
        tasks.spawn(async move {
            let mut times = Vec::with_capacity(CALLS_PER_CLIENT);
            let mut errors = 0usize;
            for _ in 0..CALLS_PER_CLIENT {
                match timed(&client, params.clone()).await {
                    Ok(t) => times.push(t),
                    Err(_) => errors += 1,
                }
            }
            let _ = client.cancel().await;
            (times, errors)
        });
    }
    let (mut times, mut errors) = (Vec::new(), 0);
    while let Some(joined) = tasks.join_next().await {
        let (t, e) = joined.expect("client task");
        times.extend(t);
        errors += e;
    }
    let rate = times.len() as f64 / start.elapsed().as_secs_f64();
    (times.len(), errors, rate, stats(times))
}

/// The floor under the concurrent figure: [`CLIENTS`] threads each doing
/// [`CALLS_PER_CLIENT`] bare fork+exec+waits of [`BARE`], no server at
/// all: (per second, latency stats).
fn concurrent_bare() -> (f64, (f64, f64, f64)) {
    let start = Instant::now();
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            std::thread::spawn(|| {
                (0..CALLS_PER_CLIENT)
                    .map(|_| common::fork_exec(BARE))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let times: Vec<Duration> = threads
        .into_iter()
        .flat_map(|t| t.join().expect("bare thread"))
        .collect();
    let rate = times.len() as f64 / start.elapsed().as_secs_f64();
    (rate, stats(times))
}

fn server(home: &std::path::Path, extra: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::from(server_std(home, extra));
    cmd.kill_on_drop(true);
    cmd
}

fn server_std(home: &std::path::Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(common::server_bin());
    cmd.arg("serve")
        .arg("--root")
        .arg(home)
        .args(extra)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("AGENT_REACH_HOME", home.join("ar"))
        .env("AGENT_REACH_TOKEN", TOKEN)
        .env("SHELL", "/bin/bash")
        .env("AGENT_REACH_LOG", "warn");
    cmd
}

async fn http_client(url: &str) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(TOKEN);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("HTTP handshake")
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

const RAW_INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const RAW_INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn raw_call(id: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"exec_command","arguments":{{"cmd":"true","yield_time_ms":250}}}}}}"#
    )
}

/// An MCP client on one keep-alive HTTP/1.1 connection: a POST per
/// message, the SSE body read to the end of its chunked encoding.
struct RawHttp {
    stream: TcpStream,
    port: u16,
    session: Option<String>,
    buf: Vec<u8>,
}

impl RawHttp {
    fn connect(port: u16) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let mut raw = Self {
            stream,
            port,
            session: None,
            buf: Vec::new(),
        };
        assert_eq!(raw.post(RAW_INIT).0, 200);
        assert_eq!(raw.post(RAW_INITIALIZED).0, 202);
        raw
    }

    fn fill(&mut self) {
        let mut chunk = [0u8; 16384];
        let n = self.stream.read(&mut chunk).expect("read");
        assert!(n > 0, "the server closed the connection");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    fn take_line(&mut self) -> String {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buf[..at]).into_owned();
                self.buf.drain(..at + 2);
                return line;
            }
            self.fill();
        }
    }

    /// (status, body).
    fn post(&mut self, body: &str) -> (u16, String) {
        let session = self
            .session
            .as_ref()
            .map(|s| format!("Mcp-Session-Id: {s}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: Bearer {TOKEN}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2025-06-18\r\n{session}Content-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        self.stream.write_all(request.as_bytes()).expect("write");
        let status = self.take_line();
        let status: u16 = status
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("status");
        let (mut chunked, mut length) = (false, 0usize);
        loop {
            let line = self.take_line();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').expect("header");
            let (name, value) = (name.to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "mcp-session-id" => self.session = Some(value.to_owned()),
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "content-length" => length = value.parse().expect("length"),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let size = usize::from_str_radix(&self.take_line(), 16).expect("chunk size");
                while self.buf.len() < size + 2 {
                    self.fill();
                }
                body.extend(self.buf.drain(..size));
                self.buf.drain(..2);
                if size == 0 {
                    break;
                }
            }
        } else {
            while self.buf.len() < length {
                self.fill();
            }
            body.extend(self.buf.drain(..length));
        }
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

/// An MCP client writing and reading JSON lines on a server's stdio; the
/// server is killed with it.
struct RawStdio {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl RawStdio {
    fn start(home: &std::path::Path) -> Self {
        let mut child = server_std(home, &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the raw stdio server");
        let input = child.stdin.take().expect("stdin");
        let output = BufReader::new(child.stdout.take().expect("stdout"));
        let mut raw = Self {
            child,
            input,
            output,
        };
        raw.send(RAW_INIT);
        raw.input
            .write_all(RAW_INITIALIZED.as_bytes())
            .expect("write");
        raw.input.write_all(b"\n").expect("write");
        raw
    }

    fn send(&mut self, message: &str) -> String {
        self.input.write_all(message.as_bytes()).expect("write");
        self.input.write_all(b"\n").expect("write");
        self.input.flush().expect("flush");
        let mut line = String::new();
        self.output.read_line(&mut line).expect("read");
        line
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn raw_timed(call: impl FnOnce(&str) -> String, id: usize) -> Duration {
    let start = Instant::now();
    let answer = call(&raw_call(id));
    let elapsed = start.elapsed();
    assert!(answer.contains(r#""isError":false"#), "{answer}");
    elapsed
}

/// A free loopback port (the listener binds it right after).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let home = tempfile::tempdir().expect("tempdir");
        let (stdio_transport, _) = TokioChildProcess::builder(server(home.path(), &[]))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the stdio server");
        let stdio = ().serve(stdio_transport).await.expect("stdio handshake");

        let port = free_port();
        let listen = format!("mcp=127.0.0.1:{port}");
        let http_home = tempfile::tempdir().expect("tempdir");
        let mut http_server = server(
            http_home.path(),
            &[
                "--listen",
                &listen,
                "--max-sessions",
                "4096",
                "--max-sessions-per-client",
                "4096",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the HTTP server");
        let pid = http_server.id().expect("pid");
        let url = format!("http://127.0.0.1:{port}/mcp");
        let health = format!("http://127.0.0.1:{port}/healthz");
        let probe = reqwest::Client::new();
        let up = Instant::now();
        while probe.get(&health).send().await.is_err() {
            assert!(up.elapsed() < Duration::from_secs(30), "the HTTP server did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let http = http_client(&url).await;

        for _ in 0..20 {
            common::fork_exec(BARE);
            timed_call(&stdio).await.expect("stdio warm-up");
            timed_call(&http).await.expect("HTTP warm-up");
        }
        let (mut bare, mut over_stdio, mut over_http) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUND_TRIPS {
            bare.push(common::fork_exec(BARE));
            over_stdio.push(timed_call(&stdio).await.expect("stdio call"));
            over_http.push(timed_call(&http).await.expect("HTTP call"));
        }
        let raw_home = tempfile::tempdir().expect("tempdir");
        let (mut raw_http, mut raw_stdio) = (RawHttp::connect(port), RawStdio::start(raw_home.path()));
        let (mut raw_over_http, mut raw_over_stdio) = (Vec::new(), Vec::new());
        tokio::task::block_in_place(|| {
            for id in 1..=ROUND_TRIPS + 20 {
                let s = raw_timed(|m| raw_stdio.send(m), id);
                let h = raw_timed(|m| raw_http.post(m).1, id);
                if id > 20 {
                    raw_over_stdio.push(s);
                    raw_over_http.push(h);
                }
            }
        });
        let (raw_over_stdio, raw_over_http) = (stats(raw_over_stdio), stats(raw_over_http));
        let (bare, over_stdio, over_http) = (stats(bare), stats(over_stdio), stats(over_http));
        println!("round trip of exec_command `true` (bash -c true), {ROUND_TRIPS} calls each, interleaved, ms:");
        println!("  bare fork+exec+wait : median {:>7.3}  p90 {:>7.3}  p99 {:>7.3}", bare.0, bare.1, bare.2);
        println!("  MCP over stdio      : median {:>7.3}  p90 {:>7.3}  p99 {:>7.3}", over_stdio.0, over_stdio.1, over_stdio.2);
        println!("  MCP over HTTP       : median {:>7.3}  p90 {:>7.3}  p99 {:>7.3}", over_http.0, over_http.1, over_http.2);
        println!(
            "  HTTP minus stdio    : median {:>7.3}  (HTTP minus bare {:.3})",
            over_http.0 - over_stdio.0,
            over_http.0 - bare.0
        );
        println!("the same with this file's bare clients (keep-alive HTTP/1.1, JSON lines), interleaved:");
        println!("  bare stdio client   : median {:>7.3}  p90 {:>7.3}  p99 {:>7.3}", raw_over_stdio.0, raw_over_stdio.1, raw_over_stdio.2);
        println!("  bare HTTP client    : median {:>7.3}  p90 {:>7.3}  p99 {:>7.3}", raw_over_http.0, raw_over_http.1, raw_over_http.2);
        println!("  HTTP minus stdio    : median {:>7.3}", raw_over_http.0 - raw_over_stdio.0);

        let bare = tokio::task::block_in_place(concurrent_bare);
        let (median, p90, p99) = bare.1;
        println!(
            "{CLIENTS} threads x {CALLS_PER_CLIENT} bare fork+exec+wait of bash -c true, no server: {:.0} per s; median {median:.3} ms, p90 {p90:.3} ms, p99 {p99:.3} ms",
            bare.0
        );
        for (what, params) in [
            ("exec_command `true`", exec("true")),
            ("list_sessions (no spawn)", CallToolRequestParams::new("list_sessions")),
        ] {
            let (calls, errors, rate, (median, p90, p99)) = concurrent(&url, params).await;
            println!(
                "{CLIENTS} HTTP clients x {CALLS_PER_CLIENT} calls of {what}: {calls} answered, {errors} errors, {rate:.0} calls/s; median {median:.3} ms, p90 {p90:.3} ms, p99 {p99:.3} ms"
            );
        }

        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = rss_kib(pid);
        let mut idle = Vec::with_capacity(IDLE_CLIENTS);
        for _ in 0..IDLE_CLIENTS {
            idle.push(http_client(&url).await);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let with_clients = rss_kib(pid);
        for _ in 0..IDLE_SESSIONS {
            let r = http.call_tool(exec("exec sleep 600")).await.expect("sleep session");
            assert_ne!(r.is_error, Some(true), "{:?}", r.content);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let with_sessions = rss_kib(pid);
        println!(
            "server RSS: {before} KiB; +{IDLE_CLIENTS} idle MCP sessions {with_clients} KiB ({:.1} KiB each); +{IDLE_SESSIONS} idle exec sessions {with_sessions} KiB ({:.1} KiB each)",
            with_clients.saturating_sub(before) as f64 / IDLE_CLIENTS as f64,
            with_sessions.saturating_sub(with_clients) as f64 / IDLE_SESSIONS as f64
        );
        for client in idle {
            let _ = client.cancel().await;
        }
        let _ = http.cancel().await;
        let _ = stdio.cancel().await;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = tokio::time::timeout(Duration::from_secs(20), http_server.wait()).await;
    });
}
