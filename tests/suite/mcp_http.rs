//! `agent-reach serve --listen mcp=127.0.0.1:0` driven over HTTP: rmcp's
//! streamable HTTP client for the MCP side, raw requests (reqwest) for the
//! HTTP side (tokens, origins, `DELETE`, a connection dropped mid-call).
//! The real binary, a cleared environment, loopback only, every wait bounded.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ProgressNotificationParam, Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use crate::common::{TestEnv, bin, listening_addrs};

/// The longest any single test may take.
const TEST_LIMIT: Duration = Duration::from_secs(90);
/// The token every test server requires.
const TOKEN: &str = "t0ken-of-the-tests";

#[derive(Clone, Default)]
struct Counter {
    progress: Arc<AtomicUsize>,
}

impl ClientHandler for Counter {
    async fn on_progress(
        &self,
        _params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.fetch_add(1, Ordering::SeqCst);
    }
}

type Client = RunningService<RoleClient, Counter>;

/// A running `serve --listen mcp=...` and where it listens.
struct Listener {
    env: TestEnv,
    child: Child,
    pid: u32,
    addr: SocketAddr,
    _known: agent_reach::exec::KnownChildGuard,
}

async fn listen(extra: &[&str]) -> Listener {
    let env = TestEnv::new();
    let log = env.root.path().join("serve.log");
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .arg("--root")
        .arg(env.work())
        .arg("--log-file")
        .arg(&log)
        .args(["--listen", "mcp=127.0.0.1:0"])
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.root.path().join("home"))
        .env("AGENT_REACH_HOME", env.ar_home())
        .env("AGENT_REACH_TOKEN", TOKEN)
        .env("SHELL", "/bin/bash")
        .env("LANG", "C.UTF-8")
        .current_dir(env.work())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let child = cmd.spawn().unwrap();
    let pid = child.id().unwrap();
    let known = agent_reach::exec::KnownChildGuard::register(pid as i32);
    let addr = wait_listening(&log).await;
    Listener {
        env,
        child,
        pid,
        addr,
        _known: known,
    }
}

/// The address of the `listening` line of the server's log.
async fn wait_listening(log: &Path) -> SocketAddr {
    let started = Instant::now();
    loop {
        if let Some(addr) = listening_addrs(log).remove("mcp") {
            return addr;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the server did not listen within 30 s; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl Listener {
    fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// A new MCP client (one MCP session) with the token.
    async fn client(&self) -> (Client, Arc<AtomicUsize>) {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url()).auth_header(TOKEN);
        let transport = StreamableHttpClientTransport::from_config(config);
        let handler = Counter::default();
        let progress = handler.progress.clone();
        (handler.serve(transport).await.unwrap(), progress)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.env.root.path().join("serve.log")).unwrap_or_default()
    }

    /// SIGTERM; the server must exit 0 having killed everything.
    async fn stop(mut self) -> TestEnv {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the server did not exit within 20 s of SIGTERM")
            .unwrap();
        assert_eq!(status.code(), Some(0), "log:\n{}", self.log());
        self.env
    }
}

async fn call(client: &Client, tool: &str, args: Value) -> CallToolResult {
    let params = CallToolRequestParams::new(tool.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default());
    tokio::time::timeout(Duration::from_secs(40), client.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{tool} {args} did not answer in time"))
        .unwrap_or_else(|e| panic!("{tool} {args} failed at the protocol level: {e}"))
}

/// A call that must succeed: (text, structured content).
async fn ok(client: &Client, tool: &str, args: Value) -> (String, Value) {
    let result = call(client, tool, args.clone()).await;
    let text = text_of(&result);
    assert_ne!(result.is_error, Some(true), "{tool} {args} failed: {text}");
    (text, result.structured_content.unwrap_or(Value::Null))
}

/// A call that must fail: its message.
async fn err(client: &Client, tool: &str, args: Value) -> String {
    let result = call(client, tool, args.clone()).await;
    let text = text_of(&result);
    assert_eq!(
        result.is_error,
        Some(true),
        "{tool} {args} should fail: {text}"
    );
    text
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Starts `sleep N` as a session and returns (session id, pid).
async fn sleeper(client: &Client, seconds: u32) -> (u64, i32) {
    let (_, v) = ok(
        client,
        "exec_command",
        json!({"cmd": format!("exec sleep {seconds}"), "yield_time_ms": 250}),
    )
    .await;
    let id = v["session_id"].as_u64().unwrap_or_else(|| panic!("{v}"));
    let (_, list) = ok(client, "list_sessions", json!({})).await;
    let pid = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["session_id"] == id)
        .and_then(|r| r["pid"].as_i64())
        .unwrap_or_else(|| panic!("session {id} not listed: {list}"));
    (id, pid as i32)
}

/// A process that runs (not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

async fn wait_dead(pid: i32, limit: Duration, why: &str) {
    let started = Instant::now();
    while alive(pid) {
        assert!(
            started.elapsed() < limit,
            "process {pid} still runs {limit:?} after {why}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One MCP session spoken by hand, to control the HTTP side of it.
struct Raw {
    http: reqwest::Client,
    url: String,
    session: String,
    next: AtomicU64,
}

fn mcp_post(http: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
    http.post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

impl Raw {
    async fn open(l: &Listener) -> Raw {
        let http = reqwest::Client::new();
        let url = l.url();
        let response = mcp_post(&http, &url)
            .bearer_auth(TOKEN)
            .body(INITIALIZE)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let session = response.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        let _ = response.text().await;
        let raw = Raw {
            http,
            url,
            session,
            next: AtomicU64::new(1),
        };
        let ack = raw
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert_eq!(ack.status(), 202);
        raw
    }

    fn post(&self, message: Value) -> reqwest::RequestBuilder {
        mcp_post(&self.http, &self.url)
            .bearer_auth(TOKEN)
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", "2025-06-18")
            .body(message.to_string())
    }

    /// A request's `result` (from the JSON answer or the SSE stream).
    async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let response = self.post(message).send().await.unwrap();
        assert_eq!(response.status(), 200, "{method}");
        typed_answer_of(response, id)
            .await
            .1
            .unwrap_or_else(|body| panic!("no answer to {method} in {body}"))["result"]
            .clone()
    }

    async fn tool(&self, name: &str, args: Value) -> Value {
        let result = self
            .request("tools/call", json!({"name": name, "arguments": args}))
            .await;
        assert_ne!(result["isError"], true, "{name}: {result}");
        result["structuredContent"].clone()
    }

    async fn delete(&self) -> reqwest::StatusCode {
        self.http
            .delete(&self.url)
            .bearer_auth(TOKEN)
            .header("mcp-session-id", &self.session)
            .send()
            .await
            .unwrap()
            .status()
    }
}

/// The content type of an answer and the answer to request `id` in it
/// (the whole body when JSON, the matching `data:` line of an SSE stream);
/// the body when it holds none.
async fn typed_answer_of(response: reqwest::Response, id: u64) -> (String, Result<Value, String>) {
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = response.text().await.unwrap();
    let answer = if kind.starts_with("application/json") {
        serde_json::from_str::<Value>(&body).ok()
    } else {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m["id"] == id)
    };
    (kind, answer.filter(|m| m["id"] == id).ok_or(body))
}

fn run<F: std::future::Future<Output = ()>>(test: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(TEST_LIMIT, test)
                .await
                .expect("the test took longer than its limit");
        });
}

#[test]
fn an_http_client_lists_the_tools_and_runs_a_command() {
    run(async {
        let l = listen(&[]).await;
        let (client, _) = l.client().await;
        let tools = client.list_all_tools().await.unwrap();
        let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
        for name in [
            "exec_command",
            "write_stdin",
            "list_sessions",
            "kill_session",
            "apply_patch",
        ] {
            assert!(
                names.iter().any(|n| n == name),
                "missing {name} in {names:?}"
            );
        }
        let (text, v) = ok(
            &client,
            "exec_command",
            json!({"cmd": "echo hello; exit 3"}),
        )
        .await;
        assert!(text.contains("Process exited with code 3"), "{text}");
        assert_eq!(v["output"], "hello\n");
        let _ = client.cancel().await;
        l.stop().await;
    });
}

#[test]
fn a_call_answered_at_once_comes_back_as_json_and_a_slow_one_as_a_stream() {
    run(async {
        let l = listen(&[]).await;
        let raw = Raw::open(&l).await;
        let call = |id: u64, args: Value, meta: Value| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "exec_command", "arguments": args, "_meta": meta}})
        };
        let quick = raw.post(call(1, json!({"cmd": "echo quick"}), json!({})));
        let (kind, answer) = typed_answer_of(quick.send().await.unwrap(), 1).await;
        assert_eq!(kind, "application/json");
        let answer = answer.unwrap();
        assert_eq!(
            answer["result"]["structuredContent"]["output"], "quick\n",
            "{answer}"
        );
        // Slower than the JSON wait (1 s): a stream, open from the start.
        let slow = call(
            2,
            json!({"cmd": "sleep 1.5; echo slow", "yield_time_ms": 10000}),
            json!({}),
        );
        let (kind, answer) = typed_answer_of(raw.post(slow).send().await.unwrap(), 2).await;
        assert!(kind.starts_with("text/event-stream"), "{kind}");
        assert_eq!(
            answer.unwrap()["result"]["structuredContent"]["output"],
            "slow\n"
        );
        l.stop().await;
    });
}

#[test]
fn the_health_check_needs_no_token_and_everything_else_the_right_one() {
    run(async {
        let l = listen(&[]).await;
        let http = reqwest::Client::new();
        let health = http
            .get(format!("http://{}/healthz", l.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), 200);
        assert_eq!(
            health.json::<Value>().await.unwrap(),
            json!({"status": "ok"})
        );
        for token in [None, Some("wrong"), Some("t0ken-of-the-test")] {
            let mut post = mcp_post(&http, &l.url()).body(INITIALIZE);
            if let Some(token) = token {
                post = post.bearer_auth(token);
            }
            let response = post.send().await.unwrap();
            assert_eq!(response.status(), 401, "token {token:?}");
            assert_eq!(response.headers()["www-authenticate"], "Bearer");
        }
        let elsewhere = http
            .get(format!("http://{}/anything", l.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(elsewhere.status(), 401);
        let right = mcp_post(&http, &l.url())
            .bearer_auth(TOKEN)
            .body(INITIALIZE)
            .send()
            .await
            .unwrap();
        assert_eq!(right.status(), 200);
        assert!(!l.log().contains(TOKEN), "the token was logged");
        l.stop().await;
    });
}

#[test]
fn a_foreign_origin_or_host_is_refused_and_the_listeners_own_is_not() {
    run(async {
        let l = listen(&[]).await;
        let http = reqwest::Client::new();
        let send = |origin: Option<String>, host: Option<&'static str>| {
            let mut post = mcp_post(&http, &l.url())
                .bearer_auth(TOKEN)
                .body(INITIALIZE);
            if let Some(origin) = origin {
                post = post.header("origin", origin);
            }
            if let Some(host) = host {
                post = post.header("host", host);
            }
            post.send()
        };
        let foreign = send(Some("http://evil.example".into()), None)
            .await
            .unwrap();
        assert_eq!(foreign.status(), 403);
        let rebound = send(None, Some("evil.example")).await.unwrap();
        assert_eq!(rebound.status(), 403);
        let own = send(Some(format!("http://localhost:{}", l.addr.port())), None)
            .await
            .unwrap();
        assert_eq!(own.status(), 200);
        let none = send(None, None).await.unwrap();
        assert_eq!(none.status(), 200);
        l.stop().await;
    });
}

#[test]
fn an_allowed_host_widens_the_host_list() {
    run(async {
        let l = listen(&["--allowed-host", "agents.example.com"]).await;
        let http = reqwest::Client::new();
        let response = mcp_post(&http, &l.url())
            .bearer_auth(TOKEN)
            .header("host", "agents.example.com")
            .header("origin", "https://agents.example.com")
            .body(INITIALIZE)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        l.stop().await;
    });
}

#[test]
fn a_listener_off_loopback_without_a_token_refuses_to_start() {
    let env = TestEnv::new();
    env.cmd()
        .args(["serve", "--listen", "mcp=0.0.0.0:0"])
        .run()
        .code_is(2)
        .stderr_contains("--no-auth");
}

#[test]
fn one_client_cannot_see_or_touch_another_clients_session() {
    run(async {
        let l = listen(&[]).await;
        let (a, _) = l.client().await;
        let (b, _) = l.client().await;
        let (id, pid) = sleeper(&a, 300).await;
        assert!(alive(pid));
        let (text, v) = ok(&b, "list_sessions", json!({})).await;
        assert_eq!(v["sessions"], json!([]), "{text}");
        let unknown = 999_999;
        let as_b = err(&b, "write_stdin", json!({"session_id": id, "chars": "x"})).await;
        let never = err(
            &b,
            "write_stdin",
            json!({"session_id": unknown, "chars": "x"}),
        )
        .await;
        assert_eq!(
            as_b.replace(&id.to_string(), "N"),
            never.replace(&unknown.to_string(), "N")
        );
        let poll = err(&b, "write_stdin", json!({"session_id": id})).await;
        assert!(poll.contains(&format!("no session {id}")), "{poll}");
        let kill = err(&b, "kill_session", json!({"session_id": id})).await;
        assert!(kill.contains(&format!("no session {id}")), "{kill}");
        assert!(alive(pid), "client B's calls touched A's process");
        let (_, mine) = ok(&a, "list_sessions", json!({})).await;
        assert_eq!(mine["sessions"][0]["session_id"], id);
        ok(&a, "kill_session", json!({"session_id": id})).await;
        wait_dead(pid, Duration::from_secs(10), "kill_session").await;
        let _ = a.cancel().await;
        let _ = b.cancel().await;
        l.stop().await;
    });
}

#[test]
fn deleting_an_mcp_session_kills_its_processes_and_no_others() {
    run(async {
        let l = listen(&[]).await;
        let a = Raw::open(&l).await;
        let (b, _) = l.client().await;
        let started = a
            .tool(
                "exec_command",
                json!({"cmd": "exec sleep 300", "yield_time_ms": 250}),
            )
            .await;
        let id = started["session_id"].as_u64().unwrap();
        let rows = a.tool("list_sessions", json!({})).await;
        let a_pid = rows["sessions"][0]["pid"].as_i64().unwrap() as i32;
        assert_eq!(rows["sessions"][0]["session_id"], id);
        let (_, b_pid) = sleeper(&b, 301).await;
        assert!(alive(a_pid) && alive(b_pid));
        let status = a.delete().await;
        assert_eq!(status, 200, "DELETE answered {status}");
        wait_dead(a_pid, Duration::from_secs(15), "DELETE of its MCP session").await;
        assert!(alive(b_pid), "B's process died with A's MCP session");
        let (_, v) = ok(&b, "list_sessions", json!({})).await;
        assert_eq!(v["sessions"].as_array().unwrap().len(), 1, "{v}");
        let _ = b.cancel().await;
        l.stop().await;
        wait_dead(b_pid, Duration::from_secs(5), "the server stopped").await;
    });
}

#[test]
fn deleting_an_unknown_mcp_session_is_404_and_ends_nothing() {
    run(async {
        let l = listen(&[]).await;
        let a = Raw::open(&l).await;
        let (b, _) = l.client().await;
        let (_, b_pid) = sleeper(&b, 61).await;
        assert_eq!(a.delete().await, 200);
        assert_eq!(a.delete().await, 404, "a second DELETE of the same session");
        let made_up = Raw {
            http: reqwest::Client::new(),
            url: l.url(),
            session: "no-such-session".to_owned(),
            next: AtomicU64::new(1),
        };
        assert_eq!(made_up.delete().await, 404);
        assert!(alive(b_pid), "another client's process died");
        let _ = b.cancel().await;
        l.stop().await;
    });
}

#[test]
fn a_client_idle_past_the_timeout_loses_its_sessions() {
    run(async {
        let l = listen(&["--client-idle-timeout", "2"]).await;
        let (a, _) = l.client().await;
        let (_, pid) = sleeper(&a, 300).await;
        assert!(alive(pid));
        wait_dead(pid, Duration::from_secs(30), "its client went silent").await;
        drop(a);
        l.stop().await;
    });
}

#[test]
fn progress_flows_while_waiting_and_a_cancel_keeps_the_process() {
    run(async {
        let l = listen(&[]).await;
        let (client, progress) = l.client().await;
        let request = ClientRequest::CallToolRequest(Request::new(
            CallToolRequestParams::new("exec_command").with_arguments(
                json!({"cmd": "echo started; sleep 60", "yield_time_ms": 30000})
                    .as_object()
                    .cloned()
                    .unwrap(),
            ),
        ));
        let handle = client
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .unwrap();
        let started = Instant::now();
        while progress.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no progress notification in 10 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        handle.cancel(Some("test".into())).await.unwrap();
        let (_, v) = ok(&client, "list_sessions", json!({})).await;
        let rows = v["sessions"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{v}\nlog:\n{}", l.log());
        let id = rows[0]["session_id"].as_u64().unwrap();
        let (_, polled) = ok(
            &client,
            "write_stdin",
            json!({"session_id": id, "yield_time_ms": 5000}),
        )
        .await;
        assert!(
            polled["output"].as_str().unwrap().contains("started"),
            "the cancelled call ate the output: {polled}"
        );
        let _ = client.cancel().await;
        l.stop().await;
    });
}

#[test]
fn a_call_whose_connection_drops_loses_no_output() {
    run(async {
        let l = listen(&[]).await;
        let raw = Raw::open(&l).await;
        let started = raw
            .tool(
                "exec_command",
                json!({"cmd": "sleep 2; echo done", "yield_time_ms": 250}),
            )
            .await;
        let id = started["session_id"].as_u64().unwrap();
        let poll = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call",
            "params": {"name": "write_stdin", "arguments": {"session_id": id, "yield_time_ms": 10000}}});
        // The client hangs up half a second into a ten-second poll.
        let dropped = tokio::time::timeout(Duration::from_millis(500), async {
            raw.post(poll).send().await?.text().await
        })
        .await;
        assert!(dropped.is_err(), "the poll answered early: {dropped:?}");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let polled = raw
            .tool(
                "write_stdin",
                json!({"session_id": id, "yield_time_ms": 5000}),
            )
            .await;
        assert_eq!(polled["exit_code"], 0, "{polled}\nlog:\n{}", l.log());
        assert!(
            polled["output"].as_str().unwrap().contains("done"),
            "{polled}"
        );
        l.stop().await;
    });
}

#[test]
fn the_metrics_count_sessions_by_client() {
    run(async {
        let l = listen(&[]).await;
        let raw = Raw::open(&l).await;
        raw.tool(
            "exec_command",
            json!({"cmd": "exec sleep 300", "yield_time_ms": 250}),
        )
        .await;
        let read = raw
            .request("resources/read", json!({"uri": "agent-reach://metrics"}))
            .await;
        let metrics: Value =
            serde_json::from_str(read["contents"][0]["text"].as_str().unwrap()).unwrap();
        assert!(metrics["clients"].as_u64().unwrap() >= 1, "{metrics}");
        let by_client = metrics["live_sessions_by_client"].as_object().unwrap();
        assert_eq!(by_client.len(), 1, "{metrics}");
        assert!(by_client.keys().all(|k| k.starts_with("mcp-")), "{metrics}");
        assert_eq!(by_client.values().next().unwrap(), 1);
        l.stop().await;
    });
}

#[test]
fn sigterm_kills_the_sessions_of_every_client_and_exits_0() {
    run(async {
        let l = listen(&[]).await;
        let (a, _) = l.client().await;
        let (b, _) = l.client().await;
        let (_, a_pid) = sleeper(&a, 300).await;
        let (_, b_pid) = sleeper(&b, 301).await;
        assert!(alive(a_pid) && alive(b_pid));
        assert_eq!(l.env.path_dirs().len(), 1);
        let env = l.stop().await;
        assert!(!alive(a_pid) && !alive(b_pid));
        assert!(env.path_dirs().is_empty(), "{:?}", env.path_dirs());
        drop((a, b));
    });
}
