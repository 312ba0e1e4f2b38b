//! The agent session docs/GUIDE.md shows is replayed call by call against
//! the binary under test, over MCP on stdio, in a copy of the demo project
//! `scripts/agent_session/`; every reply must be the text the page shows,
//! up to what differs per run (wall times, spill file names, the web
//! server's log dates, and the port when 8000 is taken).

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::Value;

use super::markdown::Doc;
use super::repo;
use crate::common::TestEnv;

/// One `>>> tool {args}` line of the page and the reply shown under it.
#[derive(Debug)]
struct Call {
    tool: String,
    args: Value,
    reply: String,
}

/// The calls of the page's "An agent session", in order.
fn calls(guide: &Doc) -> Vec<Call> {
    let (_, fences) = guide.section("An agent session");
    let mut calls: Vec<Call> = Vec::new();
    for fence in fences.iter().filter(|f| f.lang == "text") {
        for line in fence.body.lines() {
            if let Some(call) = line.strip_prefix(">>> ") {
                let (tool, args) = call.split_once(' ').unwrap_or((call, "{}"));
                let args = serde_json::from_str(args)
                    .unwrap_or_else(|e| panic!("the arguments of `{line}` are not JSON: {e}"));
                calls.push(Call {
                    tool: tool.to_owned(),
                    args,
                    reply: String::new(),
                });
            } else if let Some(call) = calls.last_mut() {
                call.reply.push_str(line);
                call.reply.push('\n');
            }
        }
    }
    calls
}

/// The first port from 8000 up that nothing listens on: the page's 8000
/// stands for it (four digits, so the byte counts stay the same).
fn demo_port() -> u16 {
    (8000..9000)
        .find(|port| TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("no free port between 8000 and 9000")
}

/// What differs from one run to the next, made the same.
fn comparable(text: &str, port: u16) -> String {
    let mut text = text.trim_end().to_owned();
    if port != 8000 {
        text = text
            .replace(&format!(":{port}"), ":8000")
            .replace(&format!("port {port}"), "port 8000");
    }
    for (pattern, with) in [
        (r"Wall time: [0-9.]+ seconds", "Wall time: T seconds"),
        (r"\S*/spill/\S+\.log", "SPILL"),
        (r"\[\d\d/\w{3}/\d{4} \d\d:\d\d:\d\d\]", "[DATE]"),
    ] {
        text = regex::Regex::new(pattern)
            .unwrap()
            .replace_all(&text, with)
            .into_owned();
    }
    text
}

/// The demo project, copied into `dir` with the port in place of 8000.
fn demo_project(dir: &Path, port: u16) {
    for name in ["app.py", "build.sh"] {
        let text =
            std::fs::read_to_string(repo().join("scripts/agent_session").join(name)).unwrap();
        std::fs::write(dir.join(name), text.replace("8000", &port.to_string())).unwrap();
    }
}

#[test]
fn the_agent_session_in_the_guide_is_what_the_server_answers() {
    crate::skip_unless!(
        ["python3", "curl"].iter().all(|p| which(p)),
        "the session needs python3 and curl on PATH"
    );
    let guide = Doc::read(&repo().join("docs/GUIDE.md"));
    let calls = calls(&guide);
    assert!(
        calls.len() >= 5,
        "the page shows only {} calls",
        calls.len()
    );
    // A loaded machine can make one run differ (a server slow to start
    // past its yield); the same difference twice is the page's.
    if let Err(first) = replay(&calls) {
        eprintln!("the agent session's first replay differed, replaying again:\n{first}");
        if let Err(second) = replay(&calls) {
            panic!("{second}");
        }
    }
}

/// Runs `calls` against a fresh server in a fresh copy of the demo
/// project; the first reply that is not the page's, as a message.
fn replay(calls: &[Call]) -> Result<(), String> {
    let env = TestEnv::new();
    let port = demo_port();
    demo_project(&env.work(), port);
    let command = super::super::serve::server_command(&env, &[]);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let limit = Duration::from_secs(60);
            let (client, _known) = crate::common::mcp_stdio_client(command, "the server").await;
            let mut outcome = Ok(());
            for call in calls {
                let args = serde_json::to_string(&call.args)
                    .unwrap()
                    .replace(":8000", &format!(":{port}"));
                let args: Value = serde_json::from_str(&args).unwrap();
                let params = CallToolRequestParams::new(call.tool.clone())
                    .with_arguments(args.as_object().cloned().unwrap_or_default());
                let result = tokio::time::timeout(limit, client.call_tool(params))
                    .await
                    .unwrap_or_else(|_| panic!("{} did not answer", call.tool))
                    .unwrap_or_else(|e| panic!("{} failed: {e}", call.tool));
                let answered = comparable(&super::super::serve::text_of(&result), port);
                let shown = comparable(&call.reply, port);
                if answered != shown {
                    outcome = Err(format!(
                        "docs/GUIDE.md shows another reply to `{} {}`:\n--- shown\n{shown}\n--- answered\n{answered}",
                        call.tool, call.args
                    ));
                    break;
                }
            }
            let _ = tokio::time::timeout(Duration::from_secs(10), client.cancel()).await;
            outcome
        })
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[test]
fn replies_differ_only_in_what_changes_per_run() {
    let shown = "Wall time: 0.1007 seconds\nServing HTTP on 127.0.0.1 port 8000 (http://127.0.0.1:8000/) ...\n[… print them with: sed -n '10,2395p' /tmp/demo/home/.agent-reach/spill/1796-x-output.log …]\n127.0.0.1 - - [01/Dec/2026 14:22:48] \"GET / HTTP/1.1\" 200 -\n";
    let now = "Wall time: 0.0500 seconds\nServing HTTP on 127.0.0.1 port 8001 (http://127.0.0.1:8001/) ...\n[… print them with: sed -n '10,2395p' /tmp/ar-test1/home/.agent-reach/spill/1797-y-output.log …]\n127.0.0.1 - - [03/Dec/2026 07:02:37] \"GET / HTTP/1.1\" 200 -";
    assert_eq!(comparable(shown, 8001), comparable(now, 8001));
    assert_ne!(
        comparable(shown, 8001),
        comparable(&now.replace("2395p", "2396p"), 8001)
    );
}
