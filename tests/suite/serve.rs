//! `agent-reach serve` driven over stdio by rmcp's own client: the real
//! binary, a cleared environment, and every call bounded in time.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientRequest, ProgressNotificationParam, Request,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::process::Command;

use crate::common::{TestEnv, bin};

mod highlights;
mod tty;

/// The longest any single test may take.
const TEST_LIMIT: Duration = Duration::from_secs(60);

#[derive(Clone, Default)]
struct Client {
    progress: Arc<AtomicUsize>,
}

impl ClientHandler for Client {
    async fn on_progress(
        &self,
        _params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.fetch_add(1, Ordering::SeqCst);
    }
}

/// A running server and the client connected to it.
struct Served {
    env: TestEnv,
    client: RunningService<RoleClient, Client>,
    pid: u32,
    progress: Arc<AtomicUsize>,
    /// The engine's tests run executions inside this test process, and an
    /// execution's kill takes every unregistered child of the process for an
    /// orphan of its command: registering the server keeps it (and its
    /// sessions) out of their reach.
    _known: agent_reach::exec::KnownChildGuard,
}

pub(super) fn server_command(env: &TestEnv, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .arg("--root")
        .arg(env.work())
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.root.path().join("home"))
        .env("AGENT_REACH_HOME", env.ar_home())
        .env("SHELL", "/bin/bash")
        .env("LANG", "C.UTF-8")
        .current_dir(env.work());
    cmd
}

async fn serve_with(extra: &[&str]) -> Served {
    serve_in(TestEnv::new(), extra).await
}

async fn serve_in(env: TestEnv, extra: &[&str]) -> Served {
    serve_in_env(env, extra, &[]).await
}

async fn serve_in_env(env: TestEnv, extra: &[&str], vars: &[(&str, &str)]) -> Served {
    let log = env.root.path().join("serve.log");
    let mut args = vec!["--log-file", log.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut command = server_command(&env, &args);
    command.envs(vars.iter().copied());
    let (transport, _stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = transport.id().unwrap();
    let known = agent_reach::exec::KnownChildGuard::register(pid as i32);
    let handler = Client::default();
    let progress = handler.progress.clone();
    let client = handler.serve(transport).await.unwrap();
    Served {
        env,
        client,
        pid,
        progress,
        _known: known,
    }
}

async fn serve() -> Served {
    serve_with(&[]).await
}

impl Served {
    async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        let params = CallToolRequestParams::new(tool.to_owned())
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        tokio::time::timeout(TEST_LIMIT, self.client.call_tool(params))
            .await
            .unwrap_or_else(|_| panic!("{tool} {args} did not answer in time"))
            .unwrap_or_else(|e| panic!("{tool} {args} failed at the protocol level: {e}"))
    }

    /// Calls a tool that must succeed; returns (text, structured content).
    async fn ok(&self, tool: &str, args: Value) -> (String, Value) {
        let result = self.call(tool, args.clone()).await;
        let text = text_of(&result);
        assert_ne!(result.is_error, Some(true), "{tool} {args} failed: {text}");
        (text, result.structured_content.unwrap_or(Value::Null))
    }

    /// Calls a tool that must fail; returns its message.
    async fn err(&self, tool: &str, args: Value) -> String {
        let result = self.call(tool, args.clone()).await;
        let text = text_of(&result);
        assert_eq!(
            result.is_error,
            Some(true),
            "{tool} {args} should fail: {text}"
        );
        text
    }

    /// The tag prefix every child of this server carries.
    fn tag_prefix(&self) -> String {
        format!("AGENT_REACH_SESSION=ar-{}-", self.pid)
    }

    /// Closes the client and waits for the server to exit.
    async fn close(self) -> TestEnv {
        let pid = self.pid;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.cancel()).await;
        wait_gone(pid, Duration::from_secs(15)).await;
        self.env
    }
}

pub(super) fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

async fn wait_gone(pid: u32, limit: Duration) {
    let start = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true);
        if zombie {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "process {pid} still runs after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Pids whose environment holds a variable starting with `prefix`.
fn tagged_pids(prefix: &str) -> BTreeSet<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let env = std::fs::read(e.path().join("environ")).ok()?;
            env.split(|&b| b == 0)
                .any(|v| v.starts_with(prefix.as_bytes()))
                .then_some(pid)
        })
        .collect()
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
fn exec_command_asking_for_more_output_than_the_limit_says_it_was_capped() {
    run(async {
        let s = serve().await;
        let (text, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "echo hi", "max_output_tokens": 100_000_000u64}),
            )
            .await;
        assert!(
            text.contains("Capped: max_output_tokens (asked 100000000, limit 100000)"),
            "{text}"
        );
        assert_eq!(
            v["capped"][0],
            "max_output_tokens (asked 100000000, limit 100000)"
        );
        let (text, _) = s.ok("exec_command", json!({"cmd": "echo hi"})).await;
        assert!(!text.contains("Capped"), "{text}");
        s.close().await;
    });
}

#[test]
fn lists_the_contract_tools() {
    run(async {
        let s = serve().await;
        let tools = s.client.list_all_tools().await.unwrap();
        let names: BTreeSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
        for name in [
            "exec_command",
            "write_stdin",
            "list_sessions",
            "kill_session",
            "apply_patch",
        ] {
            assert!(names.contains(name), "missing {name} in {names:?}");
        }
        s.close().await;
    });
}

#[test]
fn a_command_that_ends_answers_with_the_contract_block() {
    run(async {
        let s = serve().await;
        let (text, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "echo hello; echo oops >&2; exit 3"}),
            )
            .await;
        assert!(text.starts_with("Wall time: "), "{text}");
        assert!(
            text.contains(" seconds\nProcess exited with code 3\nOriginal token count: "),
            "{text}"
        );
        assert!(text.contains("\nOutput:\nhello\noops\n"), "{text}");
        assert_eq!(v["exit_code"], 3);
        assert_eq!(v["state"], "exited");
        assert!(v["session_id"].is_null());
        assert_eq!(v["output"], "hello\noops\n");
        assert_eq!(v["truncated"], false);
        s.close().await;
    });
}

#[test]
fn commands_run_in_the_root_or_the_given_workdir() {
    run(async {
        let s = serve().await;
        std::fs::create_dir(s.env.work().join("sub")).unwrap();
        let (_, v) = s.ok("exec_command", json!({"cmd": "pwd"})).await;
        assert_eq!(
            v["output"].as_str().unwrap().trim(),
            s.env.work().canonicalize().unwrap().to_str().unwrap()
        );
        let (_, v) = s
            .ok("exec_command", json!({"cmd": "pwd", "workdir": "sub"}))
            .await;
        assert!(
            v["output"].as_str().unwrap().trim().ends_with("/work/sub"),
            "{v}"
        );
        let msg = s
            .err("exec_command", json!({"cmd": "pwd", "workdir": "missing"}))
            .await;
        assert!(msg.contains("missing"), "{msg}");
        s.close().await;
    });
}

#[test]
fn a_slow_command_becomes_a_session_and_a_poll_returns_only_new_output() {
    run(async {
        let s = serve().await;
        let (text, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "echo first; sleep 1; echo second", "yield_time_ms": 250}),
            )
            .await;
        assert_eq!(v["state"], "running", "{text}");
        let id = v["session_id"].as_u64().unwrap();
        assert!(
            text.contains(&format!("Process running with session ID {id}\n")),
            "{text}"
        );
        assert_eq!(v["output"], "first\n");
        let started = Instant::now();
        let (_, v) = s.ok("write_stdin", json!({"session_id": id})).await;
        assert_eq!(v["state"], "exited");
        assert_eq!(v["exit_code"], 0);
        assert_eq!(v["output"], "second\n");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "the poll did not end at the exit"
        );
        let msg = s.err("write_stdin", json!({"session_id": id})).await;
        assert_eq!(msg, format!("session {id} ended with code 0"));
        let msg = s.err("write_stdin", json!({"session_id": 999})).await;
        assert!(msg.starts_with("no session 999"), "{msg}");
        s.close().await;
    });
}

#[test]
fn wait_for_returns_at_the_ready_line() {
    run(async {
        let s = serve().await;
        let started = Instant::now();
        let (text, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "echo booting; sleep 0.5; echo 'listening on 3000'; sleep 60", "wait_for": "listening on \\d+", "yield_time_ms": 20000}),
            )
            .await;
        assert_eq!(v["state"], "matched", "{text}");
        assert!(
            v["output"].as_str().unwrap().contains("listening on 3000"),
            "{v}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        let id = v["session_id"].as_u64().unwrap();
        let (text, _) = s.ok("kill_session", json!({"session_id": id})).await;
        assert!(text.contains(&format!("session {id} was killed")), "{text}");
        let msg = s
            .err("write_stdin", json!({"session_id": id, "chars": "x"}))
            .await;
        assert!(
            msg.starts_with(&format!("session {id} was killed")),
            "{msg}"
        );
        s.close().await;
    });
}

#[test]
fn cat_on_a_tty_is_written_to_and_ended_with_ctrl_d() {
    run(async {
        let s = serve().await;
        let (text, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "cat", "tty": true, "yield_time_ms": 5000}),
            )
            .await;
        assert_eq!(v["state"], "awaiting_input", "{text}");
        assert!(text.contains("Process is waiting for input\n"), "{text}");
        let id = v["session_id"].as_u64().unwrap();
        let (_, v) = s
            .ok(
                "write_stdin",
                json!({"session_id": id, "chars": "hello tty\n", "yield_time_ms": 1000}),
            )
            .await;
        assert!(v["output"].as_str().unwrap().contains("hello tty"), "{v}");
        let (_, v) = s
            .ok(
                "write_stdin",
                json!({"session_id": id, "chars": "\u{4}", "yield_time_ms": 3000}),
            )
            .await;
        assert_eq!(v["state"], "exited", "{v}");
        assert_eq!(v["exit_code"], 0);
        s.close().await;
    });
}

#[test]
fn a_password_prompt_is_answered_after_awaiting_input() {
    run(async {
        let s = serve().await;
        let started = Instant::now();
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "read -s -p 'Password: ' pw; echo; echo \"got ${#pw} chars\"", "tty": true, "yield_time_ms": 20000}),
            )
            .await;
        assert_eq!(v["state"], "awaiting_input", "{v}");
        assert!(v["output"].as_str().unwrap().contains("Password:"), "{v}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the prompt was not noticed"
        );
        let id = v["session_id"].as_u64().unwrap();
        let (_, v) = s
            .ok(
                "write_stdin",
                json!({"session_id": id, "chars": "hunter22\n", "yield_time_ms": 5000}),
            )
            .await;
        assert_eq!(v["state"], "exited", "{v}");
        let out = v["output"].as_str().unwrap();
        assert!(out.contains("got 8 chars"), "{out}");
        assert!(!out.contains("hunter22"), "the password was echoed: {out}");
        s.close().await;
    });
}

#[test]
fn writing_to_a_pipe_session_says_to_use_tty() {
    run(async {
        let s = serve().await;
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "sleep 30", "yield_time_ms": 250}),
            )
            .await;
        let id = v["session_id"].as_u64().unwrap();
        let msg = s
            .err("write_stdin", json!({"session_id": id, "chars": "y\n"}))
            .await;
        assert!(msg.contains("tty"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
        s.close().await;
    });
}

#[test]
fn timeout_kills_with_124_and_yield_does_not() {
    run(async {
        let s = serve().await;
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "sleep 30", "timeout_ms": 300, "yield_time_ms": 10000}),
            )
            .await;
        assert_eq!(v["exit_code"], 124, "{v}");
        s.close().await;
    });
}

#[test]
fn bad_arguments_are_one_line_tool_errors() {
    run(async {
        let s = serve().await;
        let msg = s
            .err("exec_command", json!({"cmd": "true", "wait_for": "("}))
            .await;
        assert!(msg.contains("wait_for"), "{msg}");
        let msg = s
            .err("exec_command", json!({"cmd": "true", "sandbox": "nope"}))
            .await;
        assert!(msg.contains("sandbox"), "{msg}");
        let msg = s.err("exec_command", json!({"command": "true"})).await;
        assert!(msg.contains("bad arguments"), "{msg}");
        // The server still answers.
        s.ok("exec_command", json!({"cmd": "true"})).await;
        s.close().await;
    });
}

#[test]
fn list_sessions_shows_listening_ports() {
    run(async {
        let s = serve().await;
        let script = "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen()\nprint('port',s.getsockname()[1],flush=True)\ntime.sleep(60)";
        std::fs::write(s.env.work().join("srv.py"), script).unwrap();
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "python3 srv.py", "wait_for": "port \\d+", "yield_time_ms": 10000}),
            )
            .await;
        assert_eq!(v["state"], "matched", "{v}");
        let port: u64 = v["output"]
            .as_str()
            .unwrap()
            .trim()
            .trim_start_matches("port ")
            .parse()
            .unwrap();
        let id = v["session_id"].as_u64().unwrap();
        let (text, v) = s.ok("list_sessions", json!({})).await;
        let row = v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["session_id"] == id)
            .cloned()
            .unwrap();
        assert_eq!(row["ports"], json!([port]), "{text}");
        assert_eq!(row["command"], "python3 srv.py");
        s.close().await;
    });
}

#[test]
fn a_full_table_prunes_and_says_so() {
    run(async {
        // Every running session holds a slot of the scheduler: room for ten.
        let env = TestEnv::new();
        let config = env.write(
            "registry.toml",
            "allow_raw_commands = true\n[scheduler]\nglobal = 10\n",
        );
        let s = serve_in(
            env,
            &["--max-sessions", "9", "--config", config.to_str().unwrap()],
        )
        .await;
        for _ in 0..9 {
            let (_, v) = s
                .ok(
                    "exec_command",
                    json!({"cmd": "sleep 60", "yield_time_ms": 250}),
                )
                .await;
            assert_eq!(v["state"], "running");
        }
        let (text, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "sleep 60", "yield_time_ms": 250}),
            )
            .await;
        assert!(
            text.contains("Note: session 1 (sleep 60) was killed to make room"),
            "{text}"
        );
        assert_eq!(v["session_id"], 10);
        let msg = s.err("write_stdin", json!({"session_id": 1})).await;
        assert!(
            msg.starts_with("session 1 was killed to make room"),
            "{msg}"
        );
        let (_, v) = s.ok("list_sessions", json!({})).await;
        assert_eq!(v["sessions"].as_array().unwrap().len(), 9);
        s.close().await;
    });
}

#[test]
fn apply_patch_edits_the_root_and_refuses_a_bad_patch() {
    run(async {
        let s = serve().await;
        let patch = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n";
        let (text, _) = s.ok("apply_patch", json!({"input": patch})).await;
        assert!(text.contains("A hello.txt"), "{text}");
        assert_eq!(
            std::fs::read_to_string(s.env.work().join("hello.txt")).unwrap(),
            "hi\n"
        );
        s.err("apply_patch", json!({"input": "not a patch"})).await;
        s.close().await;
    });
}

#[test]
fn apply_patch_never_writes_the_state_directory_even_under_danger_full_access() {
    run(async {
        let env = TestEnv::new();
        let home = env.work().join(".agent-reach");
        let home_text = home.to_str().unwrap().to_owned();
        let s = serve_in_env(
            env,
            &["--sandbox", "danger-full-access"],
            &[("AGENT_REACH_HOME", home_text.as_str())],
        )
        .await;
        for path in [".agent-reach/planted", "./sub/../.agent-reach/planted"] {
            let patch = format!("*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch\n");
            let text = s.err("apply_patch", json!({"input": patch})).await;
            assert!(
                text.contains("denied_by_policy") || text.contains("refused"),
                "{text}"
            );
        }
        assert!(!home.join("planted").exists());
        // The control: elsewhere in the root the patch applies.
        let patch = "*** Begin Patch\n*** Add File: fine.txt\n+ok\n*** End Patch\n";
        s.ok("apply_patch", json!({"input": patch})).await;
        assert!(s.env.work().join("fine.txt").exists());
        s.close().await;
    });
}

#[test]
fn apply_patch_stays_in_the_root_whatever_its_workdir_or_paths_say() {
    run(async {
        let env = TestEnv::new();
        let outside = env.root.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, env.work().join("lnk_out")).unwrap();
        let s = serve_in(env, &[]).await;
        let add = "*** Begin Patch\n*** Add File: x.txt\n+x\n*** End Patch\n";
        let outside_text = outside.to_string_lossy().into_owned();
        for workdir in ["..", "lnk_out", "nope/../lnk_out", outside_text.as_str()] {
            let msg = s
                .err("apply_patch", json!({"input": add, "workdir": workdir}))
                .await;
            assert!(msg.contains("workdir"), "{workdir}: {msg}");
        }
        for path in [
            "missing/../lnk_out/x.txt",
            "lnk_out/x.txt",
            "../outside/x.txt",
        ] {
            let patch = format!("*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch\n");
            s.err("apply_patch", json!({"input": patch})).await;
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        s.close().await;
    });
}

#[test]
fn progress_is_sent_while_waiting_and_cancel_leaves_a_session() {
    run(async {
        let s = serve().await;
        let request = ClientRequest::CallToolRequest(Request::new(
            CallToolRequestParams::new("exec_command").with_arguments(
                json!({"cmd": "echo started; sleep 30", "yield_time_ms": 30000})
                    .as_object()
                    .cloned()
                    .unwrap(),
            ),
        ));
        let handle = s
            .client
            .send_cancellable_request(request, PeerRequestOptions::no_options())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(4500)).await;
        assert!(
            s.progress.load(Ordering::SeqCst) >= 1,
            "no progress notification in 4.5 s"
        );
        handle.cancel(Some("test".into())).await.unwrap();
        let (_, v) = s.ok("list_sessions", json!({})).await;
        let rows = v["sessions"].as_array().unwrap();
        let log = std::fs::read_to_string(s.env.root.path().join("serve.log")).unwrap_or_default();
        assert_eq!(rows.len(), 1, "{v}\nserver log:\n{log}");
        assert_eq!(rows[0]["command"], "echo started; sleep 30");
        s.close().await;
    });
}

#[test]
fn closing_the_client_kills_every_session_and_escapee() {
    run(async {
        let s = serve().await;
        s.ok(
            "exec_command",
            json!({"cmd": "sleep 300", "yield_time_ms": 250}),
        )
        .await;
        s.ok(
            "exec_command",
            json!({"cmd": "setsid sleep 301 & sleep 302", "yield_time_ms": 250}),
        )
        .await;
        s.ok(
            "exec_command",
            json!({"cmd": "cat", "tty": true, "yield_time_ms": 500}),
        )
        .await;
        let prefix = s.tag_prefix();
        assert!(
            tagged_pids(&prefix).len() >= 4,
            "the sessions are not running"
        );
        let env = s.close().await;
        let left = tagged_pids(&prefix);
        assert!(left.is_empty(), "processes left behind: {left:?}");
        assert!(
            env.path_dirs().is_empty(),
            "PATH dir left: {:?}",
            env.path_dirs()
        );
    });
}

#[test]
fn sigterm_kills_every_session() {
    run(async {
        let s = serve().await;
        s.ok(
            "exec_command",
            json!({"cmd": "sleep 300", "yield_time_ms": 250}),
        )
        .await;
        let prefix = s.tag_prefix();
        assert!(!tagged_pids(&prefix).is_empty());
        unsafe { libc::kill(s.pid as i32, libc::SIGTERM) };
        wait_gone(s.pid, Duration::from_secs(15)).await;
        let left = tagged_pids(&prefix);
        assert!(left.is_empty(), "processes left behind: {left:?}");
    });
}

#[test]
fn logs_one_json_event_per_execution() {
    run(async {
        let s = serve().await;
        s.ok("exec_command", json!({"cmd": "echo logged"})).await;
        let env = s.close().await;
        let log = std::fs::read_to_string(env.root.path().join("serve.log")).unwrap();
        let event: Value = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["tool"] == "exec_command")
            .unwrap_or_else(|| panic!("no execution event in\n{log}"));
        let f = &event;
        assert_eq!(f["exit_code"], 0, "{event}");
        assert_eq!(f["status"], "success");
        assert_eq!(f["door"], "mcp");
        assert!(f["argv"].to_string().contains("echo logged"), "{event}");
        assert!(
            f.get("duration_ms").is_some()
                && f.get("cwd").is_some()
                && f.get("bytes_out").is_some()
        );
    });
}

#[test]
fn registry_tools_are_served_with_their_schema_and_normalized_results() {
    run(async {
        let env = TestEnv::new();
        let config = env.write(
            "registry.toml",
            "allow_raw_commands = true\n[[tools]]\nname = \"greet\"\ndescription = \"Say hello\"\ncommand = [\"echo\", \"hello\", \"{who}\"]\ncwd = \"project_root\"\nrisk = \"low\"\nparams = [{ name = \"who\", type = \"string\", required = true }]\n\n[[tools]]\nname = \"exec_command\"\ncommand = [\"false\"]\ncwd = \"project_root\"\nrisk = \"low\"\n",
        );
        let s = serve_in(env, &["--config", config.to_str().unwrap()]).await;
        let tools = s.client.list_all_tools().await.unwrap();
        let greet = tools
            .iter()
            .find(|t| t.name == "greet")
            .expect("greet is listed");
        let description = greet.description.as_deref().unwrap_or_default();
        assert!(
            description.starts_with("Say hello")
                && description.contains("Timeout: 600 s; no network."),
            "{description}"
        );
        assert_eq!(greet.input_schema["required"], json!(["who"]));
        assert_eq!(tools.iter().filter(|t| t.name == "exec_command").count(), 1);
        let (_, v) = s.ok("greet", json!({"who": "world"})).await;
        assert_eq!(v["status"], "success", "{v}");
        assert_eq!(v["stdout"], "hello world\n");
        assert_eq!(v["tool"], "greet");
        let msg = s.err("greet", json!({})).await;
        assert!(msg.contains("rejected"), "{msg}");
        s.close().await;
    });
}

#[test]
fn writing_to_a_session_that_exited_returns_its_last_output_and_code() {
    run(async {
        let s = serve().await;
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "sleep 0.5; echo bye; exit 7", "tty": true, "yield_time_ms": 250}),
            )
            .await;
        let id = v["session_id"].as_u64().expect("a session");
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let (text, v) = s
            .ok(
                "write_stdin",
                json!({"session_id": id, "chars": "too late\n"}),
            )
            .await;
        assert_eq!(v["state"], "exited", "{text}");
        assert_eq!(v["exit_code"], 7);
        assert!(v["output"].as_str().unwrap().contains("bye"), "{text}");
        assert!(text.contains("nothing was written"), "{text}");
        s.close().await;
    });
}

#[test]
fn read_only_sandbox_refuses_writes() {
    run(async {
        let s = serve().await;
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "touch made-here && echo wrote", "sandbox": "read-only"}),
            )
            .await;
        let landlock = !v["output"].as_str().unwrap_or("").contains("Landlock");
        crate::skip_unless!(
            landlock && v["exit_code"] != 125,
            "Landlock is not available here"
        );
        assert_ne!(v["exit_code"], 0, "{v}");
        assert!(!s.env.work().join("made-here").exists());
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "touch made-here && echo wrote", "sandbox": "workspace-write"}),
            )
            .await;
        assert_eq!(v["exit_code"], 0, "{v}");
        assert!(s.env.work().join("made-here").exists());
        s.close().await;
    });
}

/// A port nobody listens on now (bound and released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The body of `GET /metrics` on `addr`.
async fn http_metrics(addr: String) -> String {
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).unwrap();
        body
    })
    .await
    .unwrap()
}

/// The metrics resource, read over MCP.
async fn metrics_resource(s: &Served) -> Value {
    let read = s
        .client
        .read_resource(rmcp::model::ReadResourceRequestParams::new(
            "agent-reach://metrics",
        ))
        .await
        .unwrap();
    let [
        rmcp::model::ResourceContents::TextResourceContents {
            text, mime_type, ..
        },
    ] = read.contents.as_slice()
    else {
        panic!("not one text content: {read:?}");
    };
    assert_eq!(mime_type.as_deref(), Some("application/json"));
    serde_json::from_str(text).unwrap()
}

#[test]
fn one_set_of_metrics_is_a_resource_and_prometheus_text() {
    run(async {
        let env = TestEnv::new();
        let config = env.write(
            "registry.toml",
            "allow_raw_commands = true\n[[tools]]\nname = \"greet\"\ncommand = [\"echo\", \"hello\"]\ncwd = \"project_root\"\nrisk = \"low\"\n",
        );
        let addr = format!("127.0.0.1:{}", free_port());
        let s = serve_in(
            env,
            &[
                "--config",
                config.to_str().unwrap(),
                "--metrics-addr",
                &addr,
            ],
        )
        .await;
        let resources = s.client.list_all_resources().await.unwrap();
        assert_eq!(resources.len(), 1, "{resources:?}");
        assert_eq!(resources[0].uri, "agent-reach://metrics");
        assert_eq!(resources[0].mime_type.as_deref(), Some("application/json"));
        let unknown = s
            .client
            .read_resource(rmcp::model::ReadResourceRequestParams::new(
                "agent-reach://nope",
            ))
            .await;
        assert!(unknown.is_err(), "{unknown:?}");

        s.ok("exec_command", json!({"cmd": "true"})).await;
        s.ok("exec_command", json!({"cmd": "exit 3"})).await;
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "sleep 30", "yield_time_ms": 200}),
            )
            .await;
        let id = v["session_id"].as_u64().unwrap();
        s.err("write_stdin", json!({"session_id": 999})).await;
        s.ok("greet", json!({})).await;
        s.ok(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Add File: new.txt\n+hi\n*** End Patch\n"}),
        )
        .await;

        let m = metrics_resource(&s).await;
        let exec = &m["tools"]["exec_command"];
        assert_eq!(exec["calls"], 3, "{m}");
        assert_eq!(exec["runs"], 2, "the session still runs: {m}");
        assert_eq!(
            (&exec["successes"], &exec["failures"]),
            (&json!(1), &json!(1)),
            "{m}"
        );
        assert_eq!(m["tools"]["write_stdin"]["rejected"], 1, "{m}");
        assert_eq!(
            m["tools"]["greet"]["runs"], 1,
            "registry tools in the same metrics: {m}"
        );
        assert_eq!(m["tools"]["apply_patch"]["successes"], 1, "{m}");
        assert_eq!(m["live_sessions"], 1, "{m}");

        s.ok("kill_session", json!({"session_id": id})).await;
        let m = metrics_resource(&s).await;
        assert_eq!(
            m["tools"]["exec_command"]["runs"], 3,
            "the killed session ran: {m}"
        );
        assert_eq!(m["live_sessions"], 0, "{m}");

        let body = http_metrics(addr).await;
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        for line in [
            "agent_reach_tool_calls_total{tool=\"exec_command\"} 3\n",
            "agent_reach_tool_runs_total{tool=\"exec_command\"} 3\n",
            "agent_reach_tool_runs_total{tool=\"greet\"} 1\n",
            "agent_reach_tool_rejected_total{tool=\"write_stdin\"} 1\n",
            "agent_reach_tool_duration_seconds_count{tool=\"exec_command\"} 3\n",
            "agent_reach_sessions 0\n",
        ] {
            assert!(body.contains(line), "no {line:?} in {body}");
        }
        s.close().await;
    });
}

#[test]
fn a_metrics_address_off_loopback_is_refused() {
    run(async {
        let env = TestEnv::new();
        let addr = format!("0.0.0.0:{}", free_port());
        let mut cmd = server_command(&env, &["--metrics-addr", &addr]);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let child = cmd.spawn().unwrap();
        let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
            .await
            .expect("serve kept running with a metrics address off loopback")
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("not a loopback address"), "{stderr}");
    });
}

#[test]
fn a_folded_reply_names_the_file_with_everything_and_pending_bytes_are_listed() {
    run(async {
        let s = serve().await;
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "seq 1 200000", "max_output_tokens": 100}),
            )
            .await;
        assert_eq!(v["truncated"], true, "{v}");
        assert!(
            v["output"].as_str().unwrap().len() < 2000,
            "not folded: {v}"
        );
        let path = v["full_output_path"]
            .as_str()
            .unwrap_or_else(|| panic!("no full_output_path: {v}"));
        let full = std::fs::read_to_string(path).unwrap();
        assert!(
            full.ends_with("199999\n200000\n"),
            "the spill file lacks the end"
        );
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "echo a; sleep 0.5; seq 1 1000; sleep 60", "yield_time_ms": 250}),
            )
            .await;
        let id = v["session_id"].as_u64().unwrap();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let (_, v) = s.ok("list_sessions", json!({})).await;
        let pending = v["sessions"][0]["bytes_pending"].as_u64().unwrap();
        assert!((3000..5000).contains(&pending), "pending {pending}: {v}");
        s.ok(
            "write_stdin",
            json!({"session_id": id, "wait_for": "\\n1000\\n"}),
        )
        .await;
        let (_, v) = s.ok("list_sessions", json!({})).await;
        assert_eq!(v["sessions"][0]["bytes_pending"], 0, "{v}");
        s.close().await;
    });
}

#[test]
fn a_server_killed_with_sigkill_leaves_no_process_behind() {
    run(async {
        let s = serve().await;
        s.ok(
            "exec_command",
            json!({"cmd": "sleep 300; echo never", "yield_time_ms": 250}),
        )
        .await;
        s.ok(
            "exec_command",
            json!({"cmd": "setsid sh -c 'sleep 301; echo' & sleep 302; echo", "yield_time_ms": 250}),
        )
        .await;
        let prefix = s.tag_prefix();
        assert!(
            tagged_pids(&prefix).len() >= 4,
            "the sessions are not running"
        );
        unsafe { libc::kill(s.pid as i32, libc::SIGKILL) };
        wait_gone(s.pid, Duration::from_secs(5)).await;
        let start = Instant::now();
        let mut left = tagged_pids(&prefix);
        while !left.is_empty() && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            left = tagged_pids(&prefix);
        }
        assert!(left.is_empty(), "processes left behind: {left:?}");
        let mut dirs = s.env.path_dirs();
        while !dirs.is_empty() && start.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            dirs = s.env.path_dirs();
        }
        assert!(dirs.is_empty(), "PATH dir left: {dirs:?}");
    });
}

#[test]
fn a_python_dev_server_on_pipes_is_seen_at_its_ready_line() {
    run(async {
        let s = serve().await;
        let (text, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "python3 -c \"import time; print('Serving on 8000'); time.sleep(60)\"", "wait_for": "Serving on", "yield_time_ms": 10000}),
            )
            .await;
        assert_eq!(v["state"], "matched", "{text}");
        s.close().await;
    });
}

#[test]
fn the_log_never_holds_a_registry_secret() {
    run(async {
        let env = TestEnv::new();
        let config = env.write(
            "registry.toml",
            "allow_raw_commands = true\n[[tools]]\nname = \"deploy\"\ncommand = [\"true\"]\ncwd = \"project_root\"\nrisk = \"low\"\nsecrets = [\"DEPLOY_TOKEN\"]\n",
        );
        let s = serve_in_env(
            env,
            &["--config", config.to_str().unwrap()],
            &[("DEPLOY_TOKEN", "tok-7f3a9c2e51")],
        )
        .await;
        s.ok(
            "exec_command",
            json!({"cmd": "echo tok-7f3a9c2e51 > /dev/null"}),
        )
        .await;
        let env = s.close().await;
        let log = std::fs::read_to_string(env.root.path().join("serve.log")).unwrap();
        assert!(log.contains("[REDACTED:DEPLOY_TOKEN]"), "{log}");
        assert!(!log.contains("tok-7f3a9c2e51"), "{log}");
    });
}

/// Pids running exactly `sleep <seconds>`.
fn sleeping(seconds: &str) -> BTreeSet<u32> {
    let want = format!("sleep\0{seconds}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            (cmdline == want.as_bytes()).then_some(pid)
        })
        .collect()
}

/// Waits until `sleep <seconds>` runs; returns its pids.
async fn wait_sleeping(seconds: &str) -> BTreeSet<u32> {
    let start = Instant::now();
    loop {
        let pids = sleeping(seconds);
        if !pids.is_empty() {
            return pids;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sleep {seconds} never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until none of `pids` exists, zombies included (killed and reaped).
async fn wait_reaped(pids: &BTreeSet<u32>, what: &str) {
    let start = Instant::now();
    loop {
        let left: Vec<_> = pids
            .iter()
            .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what}: still there (or not reaped): {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Escapees that clear their environment (so no session tag finds them)
/// and leave the process group are killed and reaped when their command
/// ends, when their session is killed, and when the client goes; with a
/// cgroup per command or without.
async fn escapees_without_a_tag_are_killed(vars: &[(&str, &str)]) {
    let mark = |n: u32| format!("7{n}.{}{}", std::process::id(), vars.len());
    let escape = |seconds: &str| format!("env -i setsid sleep {seconds} &");
    let s = serve_in_env(TestEnv::new(), &[], vars).await;

    let (ended, killed) = (mark(1), mark(2));
    let (_, v) = s
        .ok(
            "exec_command",
            json!({"cmd": format!("{} echo started", escape(&ended))}),
        )
        .await;
    assert_eq!(v["exit_code"], 0, "{v}");
    assert!(
        sleeping(&ended).is_empty(),
        "the escapee of an ended command runs on: {:?}",
        sleeping(&ended)
    );

    let (_, v) = s
        .ok(
            "exec_command",
            json!({"cmd": format!("{} sleep 300", escape(&killed)), "yield_time_ms": 300}),
        )
        .await;
    let id = v["session_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("not a session: {v}"));
    let escapee = wait_sleeping(&killed).await;
    s.ok("kill_session", json!({"session_id": id})).await;
    wait_reaped(&escapee, "the escapee of a killed session").await;

    let (first, second) = (mark(3), mark(4));
    for seconds in [&first, &second] {
        s.ok(
            "exec_command",
            json!({"cmd": format!("{} sleep 300", escape(seconds)), "yield_time_ms": 300}),
        )
        .await;
    }
    let mut escapees = wait_sleeping(&first).await;
    escapees.extend(wait_sleeping(&second).await);
    s.close().await;
    wait_reaped(&escapees, "escapees after the client closed").await;
}

#[test]
fn escapees_without_a_tag_are_killed_with_cgroups_where_available() {
    run(escapees_without_a_tag_are_killed(&[]));
}

#[test]
fn escapees_without_a_tag_are_killed_without_cgroups() {
    run(escapees_without_a_tag_are_killed(&[(
        "AGENT_REACH_NO_CGROUP",
        "1",
    )]));
}

#[test]
fn full_output_path_is_the_engines_spill_file_not_a_look_alike() {
    run(async {
        let s = serve().await;
        let spill = s.env.ar_home().join("spill");
        // The command knows its session tag: it can plant files that look
        // like its spill file by name. The reply must name the real one.
        // (The store's directory is made when a first output spills, which
        // may come after the decoys: the command makes it.)
        let cmd = format!(
            "mkdir -p \"{0}\"; for i in $(seq 1 100); do echo decoy > \"{0}/$i-$AGENT_REACH_SESSION-output.log\"; done; seq 1 200000",
            spill.display()
        );
        let (_, v) = s
            .ok(
                "exec_command",
                // A loaded machine may need more than the default yield to
                // write 200000 lines; the spill is whole only once it ends.
                json!({"cmd": cmd, "max_output_tokens": 100, "yield_time_ms": 30000}),
            )
            .await;
        assert_eq!(v["truncated"], true, "{v}");
        assert!(v["exit_code"] == 0, "the command had not ended: {v}");
        let path = v["full_output_path"]
            .as_str()
            .unwrap_or_else(|| panic!("no full_output_path: {v}"));
        let full = std::fs::read_to_string(path).unwrap();
        assert!(
            full.starts_with("1\n2\n") && full.ends_with("199999\n200000\n"),
            "{path} is not the output: {} bytes, {:?} .. {:?}",
            full.len(),
            &full[..full.len().min(300)],
            &full[full.len().saturating_sub(40)..]
        );
        s.close().await;
    });
}

#[test]
fn bytes_pending_counts_what_the_command_wrote_and_no_reply_took() {
    run(async {
        let s = serve().await;
        // 13 bytes of a colored line and 7 of a prompt without a newline:
        // the cleaned text is shorter, and the prompt is no line yet.
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "sleep 0.5; printf '\\033[1mbold\\033[0m\\n'; printf partial; sleep 60", "yield_time_ms": 100}),
            )
            .await;
        let id = v["session_id"].as_u64().unwrap();
        let start = Instant::now();
        let pending = loop {
            let (_, v) = s.ok("list_sessions", json!({})).await;
            let pending = v["sessions"][0]["bytes_pending"].as_u64().unwrap();
            if pending >= 20 || start.elapsed() > Duration::from_secs(10) {
                break pending;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(pending, 20);
        let (_, v) = s.ok("write_stdin", json!({"session_id": id})).await;
        assert!(v["output"].as_str().unwrap().contains("bold"), "{v}");
        let (_, v) = s.ok("list_sessions", json!({})).await;
        assert_eq!(v["sessions"][0]["bytes_pending"], 0, "{v}");
        s.close().await;
    });
}

#[test]
fn exec_command_sessions_take_a_machine_wide_slot_while_their_command_runs() {
    run(async {
        let env = TestEnv::new();
        let log = env.work().join("stamps.log");
        let config = env.write(
            "registry.toml",
            format!(
                "allow_raw_commands = true\n[scheduler]\nglobal = 1\n[[tools]]\nname = \"stamp\"\ncommand = [\"sh\", \"-c\", \"echo \\\"exec start $(date +%s%N)\\\" >> {}\"]\ncwd = \"project_root\"\nrisk = \"low\"\n",
                log.display()
            ),
        );
        let s = serve_in(env, &["--config", config.to_str().unwrap()]).await;
        let cmd = format!(
            "echo \"session start $(date +%s%N)\" >> {0}; sleep 1; echo \"session end $(date +%s%N)\" >> {0}",
            log.display()
        );
        let (text, _) = s
            .ok("exec_command", json!({"cmd": cmd, "yield_time_ms": 200}))
            .await;
        assert!(text.contains("session"), "still running: {text}");
        // Another process sharing the home waits for the session's slot.
        let mut exec = Command::new(bin());
        exec.args(["exec", "--json", "--config"])
            .arg(&config)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", s.env.root.path().join("home"))
            .env("AGENT_REACH_HOME", s.env.ar_home())
            .current_dir(s.env.work())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = exec.spawn().unwrap();
        {
            use tokio::io::AsyncWriteExt;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(b"{\"tool\": \"stamp\"}\n").await.unwrap();
        }
        let out = child.wait_with_output().await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let stamps = std::fs::read_to_string(&log).unwrap();
        let at = |what: &str| -> u128 {
            stamps
                .lines()
                .find(|l| l.starts_with(what))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no {what:?} in\n{stamps}"))
        };
        assert!(
            at("exec start") >= at("session end"),
            "the one-shot command ran beside the session:\n{stamps}"
        );
        s.close().await;
    });
}
