//! `SIGHUP` reloads the registry and profile: `serve` lists the new tools
//! and tells its MCP clients (`notifications/tools/list_changed`), `exec
//! --jsonl` answers its next lines from the new registry, and a file that
//! does not load leaves the old registry in place with the process alive.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::CallToolRequestParams;
use rmcp::service::NotificationContext;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::exec_json::Stream;
use super::serve::server_command;
use crate::common::TestEnv;

/// The longest a reload may take to show.
const RELOAD_LIMIT: Duration = Duration::from_secs(20);

/// A registry of one tool, `name`, echoing its name.
fn registry_of(name: &str) -> String {
    format!(
        "allow_raw_commands = true\n[[tools]]\nname = \"{name}\"\ndescription = \"Says {name}\"\ncommand = [\"echo\", \"{name} ran\"]\ncwd = \"project_root\"\nrisk = \"low\"\n"
    )
}

/// Writes the registry file outside the workspace.
fn write_registry(env: &TestEnv, text: &str) -> PathBuf {
    let path = env.root.path().join("registry.toml");
    // Written beside, then renamed: the server never reads half a file.
    let next = env.root.path().join("registry.toml.next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, &path).unwrap();
    path
}

fn hang_up(pid: u32) {
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0);
}

#[derive(Clone, Default)]
struct Watcher {
    tools_changed: Arc<AtomicUsize>,
}

impl ClientHandler for Watcher {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.fetch_add(1, Ordering::SeqCst);
    }
}

async fn tool_names(client: &rmcp::service::RunningService<RoleClient, Watcher>) -> Vec<String> {
    let tools = tokio::time::timeout(RELOAD_LIMIT, client.list_all_tools())
        .await
        .expect("tools/list answered")
        .expect("tools/list succeeded");
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

#[test]
fn sighup_reloads_the_registry_and_mcp_clients_are_told() {
    crate::suite::sandboxd_rest::run(async {
        let env = TestEnv::new();
        let config = write_registry(&env, &registry_of("first"));
        let config_arg = config.display().to_string();
        let command = server_command(&env, &["--config", &config_arg]);
        let (transport, _stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = transport.id().unwrap();
        let _known = agent_reach::exec::KnownChildGuard::register(pid as i32);
        let watcher = Watcher::default();
        let changed = watcher.tools_changed.clone();
        let client = watcher.serve(transport).await.unwrap();
        assert!(
            client
                .peer_info()
                .and_then(|info| info.capabilities.tools.clone())
                .and_then(|tools| tools.list_changed)
                == Some(true),
            "the server declares tools.listChanged"
        );
        let names = tool_names(&client).await;
        assert!(names.contains(&"first".to_owned()), "{names:?}");

        write_registry(&env, &registry_of("second"));
        hang_up(pid);
        let started = Instant::now();
        while changed.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < RELOAD_LIMIT,
                "no tools/list_changed after SIGHUP"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let names = tool_names(&client).await;
        assert!(
            names.contains(&"second".to_owned()) && !names.contains(&"first".to_owned()),
            "{names:?}"
        );
        let result = client
            .call_tool(CallToolRequestParams::new("second"))
            .await
            .unwrap();
        let text = serde_json::to_string(&result.content).unwrap();
        assert!(text.contains("second ran"), "{text}");

        // A file that does not load: refused, the old registry stays, the
        // server lives on.
        write_registry(&env, "[[tools]]\nname = \n");
        hang_up(pid);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let names = tool_names(&client).await;
        assert!(names.contains(&"second".to_owned()), "{names:?}");
        assert_eq!(
            changed.load(Ordering::SeqCst),
            1,
            "a refused reload told the clients"
        );
        client.cancel().await.unwrap();
    });
}

#[test]
fn sighup_reloads_the_registry_of_an_exec_jsonl_stream() {
    let env = TestEnv::new();
    let config = write_registry(&env, &registry_of("first"));
    let mut stream = Stream::start(&env, &config);
    let pid = stream.pid();
    let mut ask = |line: Value| {
        stream.send(&line);
        stream.next(RELOAD_LIMIT)
    };
    let answer = ask(json!({"id": 1, "tool": "first"}));
    assert_eq!(answer["status"], "success", "{answer}");

    write_registry(&env, &registry_of("second"));
    hang_up(pid);
    let started = Instant::now();
    loop {
        let answer = ask(json!({"id": 2, "tool": "second"}));
        if answer["status"] == "success" {
            assert!(
                answer["stdout"]
                    .as_str()
                    .unwrap_or("")
                    .contains("second ran"),
                "{answer}"
            );
            break;
        }
        assert!(
            started.elapsed() < RELOAD_LIMIT,
            "the stream never served the reloaded tool: {answer}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let answer = ask(json!({"id": 3, "tool": "first"}));
    assert_eq!(answer["status"], "rejected", "{answer}");

    write_registry(&env, "not a registry [");
    hang_up(pid);
    std::thread::sleep(Duration::from_millis(300));
    let answer = ask(json!({"id": 4, "tool": "second"}));
    assert_eq!(
        answer["status"], "success",
        "the old registry stays: {answer}"
    );
    assert_eq!(stream.close(), 0);
}

/// Registry `name`: tool `t` says `name` after a short nap; `with_slow`
/// adds `slow`, which naps a second.
fn loaded_registry(name: &str, with_slow: bool) -> String {
    let mut text = format!(
        "[scheduler]\nglobal = 2\nqueue = 100\n[[tools]]\nname = \"t\"\ncommand = [\"sh\", \"-c\", \"sleep 0.02; echo {name}\"]\ncwd = \"project_root\"\nrisk = \"low\"\n"
    );
    if with_slow {
        text.push_str("[[tools]]\nname = \"slow\"\ncommand = [\"sh\", \"-c\", \"sleep 1; echo slow done\"]\ncwd = \"project_root\"\nrisk = \"low\"\n");
    }
    text
}

#[test]
fn reloads_under_load_lose_no_request_and_running_commands_keep_their_registry() {
    let env = TestEnv::new();
    let config = write_registry(&env, &loaded_registry("A", true));
    let mut stream = Stream::start(&env, &config);
    let pid = stream.pid();
    // Started under A; A's successors lack it.
    stream.send(&json!({"id": "slow", "tool": "slow"}));
    std::thread::sleep(Duration::from_millis(100));
    let versions = [
        loaded_registry("B", false),
        "not a registry [".to_owned(),
        loaded_registry("A", false),
        loaded_registry("B", false),
    ];
    let requests = 60;
    for i in 0..requests {
        if i % 6 == 0 {
            write_registry(&env, &versions[(i / 6) % versions.len()]);
            hang_up(pid);
        }
        stream.send(&json!({"id": i, "tool": "t"}));
        std::thread::sleep(Duration::from_millis(15));
    }
    let mut answered = std::collections::BTreeMap::new();
    for _ in 0..=requests {
        let answer = stream.next(RELOAD_LIMIT);
        let id = answer["id"].to_string();
        assert!(
            answered.insert(id, answer.clone()).is_none(),
            "answered twice: {answer}"
        );
    }
    let slow = &answered["\"slow\""];
    assert_eq!(slow["status"], "success", "{slow}");
    assert_eq!(slow["stdout"], "slow done\n");
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..requests {
        let answer = &answered[&i.to_string()];
        assert_eq!(answer["status"], "success", "{answer}");
        let said = answer["stdout"].as_str().unwrap().trim().to_owned();
        assert!(said == "A" || said == "B", "{answer}");
        seen.insert(said);
    }
    assert_eq!(seen.len(), 2, "both registries served: {seen:?}");
    let after = {
        stream.send(&json!({"id": "after", "tool": "slow"}));
        stream.next(RELOAD_LIMIT)
    };
    assert_eq!(after["status"], "rejected", "slow is gone now: {after}");
    assert_eq!(stream.close(), 0);
}
