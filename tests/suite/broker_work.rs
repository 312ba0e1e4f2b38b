//! The broker does the work (issue 39), tried from outside as the attack
//! did, each finding beside a control that shows the door works: a walk
//! through a link loop, SWE-ReX sessions under `read-only`, keyed by their
//! caller and fed from where no command writes, a token-less door and
//! another local port's `Origin`, a JSON body past 16 MiB, `/v1/metadata`,
//! and a one-shot request while live processes hold every slot.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::listeners::listening;
use crate::common::{ServerProcess, TestEnv, serve_listening};

/// A `serve` listening with `protocols` on loopback (no token), with the
/// registry `registry`; killed when dropped.
struct Server {
    _process: ServerProcess,
    env: TestEnv,
    addrs: BTreeMap<String, SocketAddr>,
}

impl Server {
    fn start(registry: &str, protocols: &[&str], extra: &[&str]) -> Self {
        Self::start_in(TestEnv::new(), registry, protocols, extra, &[])
    }

    fn start_in(
        env: TestEnv,
        registry: &str,
        protocols: &[&str],
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Self {
        let log = env.root.path().join("serve.log");
        let config = env.root.path().join("registry.toml");
        std::fs::write(&config, registry).unwrap();
        let listens: Vec<String> = protocols
            .iter()
            .map(|p| format!("{p}=127.0.0.1:0"))
            .collect();
        let child = serve_listening(&env, &log, &listens, "")
            .arg("--config")
            .arg(&config)
            .args(extra)
            .envs(vars.iter().copied())
            .spawn()
            .unwrap();
        let process = ServerProcess::new(child);
        let addrs = listening(&log, protocols.len());
        Self {
            _process: process,
            env,
            addrs,
        }
    }

    fn url(&self, protocol: &str, path: &str) -> String {
        format!("http://{}{path}", self.addrs[protocol])
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A client whose connections come from `source` (another loopback
/// address is another caller).
fn client_from(source: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(Some(source.parse().unwrap()))
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

async fn post(client: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let response = client.post(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[test]
fn envd_list_dir_through_a_link_loop_lists_each_link_once() {
    let server = Server::start("allow_raw_commands = true\n", &["envd"], &[]);
    let dir = server.env.work().join("loop");
    std::fs::create_dir_all(dir.join("d")).unwrap();
    std::fs::write(dir.join("d/f"), "x").unwrap();
    for n in 0..10 {
        std::os::unix::fs::symlink("..", dir.join(format!("d/l{n}"))).unwrap();
    }
    runtime().block_on(async {
        let (status, body) = post(
            &reqwest::Client::new(),
            server.url("envd", "/filesystem.Filesystem/ListDir"),
            json!({"path": dir.to_str().unwrap(), "depth": 10}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let entries = body["entries"].as_array().unwrap();
        // d, d/f and the ten links: never what lies behind a link.
        assert_eq!(entries.len(), 12, "{body}");
    });
}

#[test]
fn envd_list_dir_past_max_walk_entries_says_so() {
    let server = Server::start(
        "allow_raw_commands = true\n[limits]\nmax_walk_entries = 50\n",
        &["envd"],
        &[],
    );
    let dir = server.env.work().join("many");
    std::fs::create_dir_all(&dir).unwrap();
    for n in 0..60 {
        std::fs::write(dir.join(format!("f{n}")), "").unwrap();
    }
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let url = server.url("envd", "/filesystem.Filesystem/ListDir");
        let (status, body) = post(
            &client,
            url.clone(),
            json!({"path": dir.to_str().unwrap(), "depth": 1}),
        )
        .await;
        assert_eq!(status, 429, "{body}");
        assert_eq!(body["code"], "resource_exhausted", "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("max_walk_entries"),
            "{body}"
        );
        std::fs::remove_file(dir.join("f0")).unwrap();
        for n in 1..=10 {
            std::fs::remove_file(dir.join(format!("f{n}"))).unwrap();
        }
        let (status, body) = post(
            &client,
            url,
            json!({"path": dir.to_str().unwrap(), "depth": 1}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["entries"].as_array().unwrap().len(), 49);
    });
}

/// SWE-ReX: `create_session`, one command, and its answer.
async fn swerex_session(client: &reqwest::Client, server: &Server, name: &str) -> (u16, Value) {
    post(
        client,
        server.url("swerex", "/create_session"),
        json!({"session_type": "bash", "session": name}),
    )
    .await
}

async fn swerex_run(
    client: &reqwest::Client,
    server: &Server,
    name: &str,
    command: &str,
) -> (u16, Value) {
    post(
        client,
        server.url("swerex", "/run_in_session"),
        json!({"action_type": "bash", "session": name, "command": command, "timeout": 30}),
    )
    .await
}

#[test]
fn a_swerex_session_works_under_read_only_and_its_state_is_out_of_reach() {
    let server = Server::start(
        "allow_raw_commands = true\n[sandbox]\ndefault = \"read-only\"\n",
        &["swerex"],
        &[],
    );
    runtime().block_on(async {
        let client = reqwest::Client::new();
        let (status, body) = swerex_session(&client, &server, "ro").await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = swerex_run(&client, &server, "ro", "x=41; echo $((x+1))").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["output"].as_str().unwrap().trim(), "42", "{body}");
        assert_eq!(body["exit_code"], 0, "{body}");
        let (status, body) = swerex_run(&client, &server, "ro", "false").await;
        assert_eq!(status, 511, "{body}");
        assert!(body.to_string().contains("exit code 1"), "{body}");
        let (status, body) = swerex_run(&client, &server, "ro", "echo 'unclosed").await;
        assert_eq!(status, 511, "{body}");
        assert!(
            body["swerexception"]["class_path"]
                .as_str()
                .unwrap()
                .contains("BashIncorrectSyntaxError"),
            "{body}"
        );
        // The session's own files: readable by its shell, writable by no
        // command (its own included).
        let scratch = server.env.ar_home().join("run/scratch");
        let line = format!(
            "for f in {}/*/command; do echo pwned > \"$f\" && echo wrote; done; echo done",
            scratch.display()
        );
        let (_, body) = swerex_run(&client, &server, "ro", &line).await;
        let output = body["output"].as_str().unwrap_or_default();
        assert!(
            output.contains("done") && !output.contains("wrote"),
            "{body}"
        );
    });
}

#[test]
fn another_caller_cannot_use_or_close_a_swerex_session() {
    let server = Server::start("allow_raw_commands = true\n", &["swerex"], &[]);
    runtime().block_on(async {
        let owner = client_from("127.0.0.1");
        let other = client_from("127.0.0.2");
        let (status, body) = swerex_session(&owner, &server, "mine").await;
        assert_eq!(status, 200, "{body}");
        swerex_run(&owner, &server, "mine", "export SECRET_OF_OWNER=yes").await;
        let (status, body) =
            swerex_run(&other, &server, "mine", "echo \"seen=$SECRET_OF_OWNER\"").await;
        assert_eq!(status, 511, "{body}");
        assert!(
            body["swerexception"]["class_path"]
                .as_str()
                .unwrap()
                .contains("SessionDoesNotExist"),
            "{body}"
        );
        let (status, _) = post(
            &other,
            server.url("swerex", "/close_session"),
            json!({"session_type": "bash", "session": "mine"}),
        )
        .await;
        assert_eq!(status, 511);
        // The owner's session lives on, and the other caller may have its
        // own of the same name.
        let (status, body) =
            swerex_run(&owner, &server, "mine", "echo \"seen=$SECRET_OF_OWNER\"").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["output"].as_str().unwrap().trim(), "seen=yes");
        let (status, body) = swerex_session(&other, &server, "mine").await;
        assert_eq!(status, 200, "{body}");
        // The other caller's `/close` ends its own sessions only.
        let response = other
            .post(server.url("swerex", "/close"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let (status, body) = swerex_run(&owner, &server, "mine", "echo alive").await;
        assert_eq!(status, 200, "{body}");
        let (status, _) = swerex_run(&other, &server, "mine", "echo alive").await;
        assert_eq!(status, 511, "the other caller's session was not closed");
    });
}

#[test]
fn a_token_less_door_refuses_another_local_ports_origin() {
    let server = Server::start("allow_raw_commands = true\n", &["python-runtime"], &[]);
    let own = format!("http://{}", server.addrs["python-runtime"]);
    runtime().block_on(async {
        let client = reqwest::Client::new();
        for (origin, want) in [
            ("http://localhost:3000".to_owned(), 403),
            ("http://127.0.0.1:8080".to_owned(), 403),
            (own, 200),
        ] {
            let response = client
                .post(server.url("python-runtime", "/execute"))
                .header("Origin", &origin)
                .json(&json!({"command": "echo hi"}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), want, "Origin {origin}");
        }
        // No Origin (a CLI or SDK client): served.
        let (status, body) = post(
            &client,
            server.url("python-runtime", "/execute"),
            json!({"command": "echo hi"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    });
}

#[test]
fn a_json_body_over_16_mib_is_413_and_a_smaller_one_is_served() {
    let server = Server::start("allow_raw_commands = true\n", &["python-runtime"], &[]);
    runtime().block_on(async {
        let client = reqwest::Client::new();
        // The gate answers from the headers, before a byte of the body.
        let head = format!(
            "POST /execute HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            server.addrs["python-runtime"],
            17 * 1024 * 1024
        );
        let mut stream = tokio::net::TcpStream::connect(server.addrs["python-runtime"])
            .await
            .unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut stream, head.as_bytes())
            .await
            .unwrap();
        let mut answer = vec![0u8; 512];
        let n = tokio::io::AsyncReadExt::read(&mut stream, &mut answer)
            .await
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
        let (status, body) = post(
            &client,
            server.url("python-runtime", "/execute"),
            json!({"command": format!("echo {} | wc -c", "a".repeat(100 * 1024))}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        // One argument past the kernel's limit is the caller's mistake.
        let (status, body) = post(
            &client,
            server.url("python-runtime", "/execute"),
            json!({"command": format!("echo {}", "a".repeat(1024 * 1024))}),
        )
        .await;
        assert_eq!(status, 400, "{body}");
    });
}

#[test]
fn metadata_shows_only_the_variables_the_operator_names() {
    let server = Server::start_in(
        TestEnv::new(),
        "allow_raw_commands = true\n",
        &["sandboxd-rest"],
        &["--metadata-env", "SANDBOX_REGION"],
        &[
            ("SANDBOX_ID", "sb-1"),
            ("SANDBOX_REGION", "eu"),
            ("SANDBOX_DSN", "postgres://u:pw@db/x"),
        ],
    );
    runtime().block_on(async {
        let meta: Value = reqwest::get(server.url("sandboxd-rest", "/v1/metadata"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(meta["env"], json!({"SANDBOX_REGION": "eu"}));
    });
}

#[test]
fn a_one_shot_request_is_answered_busy_while_live_processes_hold_every_slot() {
    let server = Server::start(
        "allow_raw_commands = true\n[scheduler]\nglobal = 1\nqueue = 4\n",
        &["envd", "python-runtime"],
        &[],
    );
    runtime().block_on(async {
        let client = reqwest::Client::new();
        // A live envd process holds the one slot (a server stream, read
        // on a task of its own).
        let start = client
            .post(server.url("envd", "/process.Process/Start"))
            .header("Content-Type", "application/connect+json")
            .body(envelope(
                &json!({"process": {"cmd": "sleep", "args": ["30"]}}),
            ))
            .send();
        let holder = tokio::spawn(async move {
            let response = start.await.unwrap();
            let mut response = response;
            while let Ok(Some(_)) = response.chunk().await {}
        });
        tokio::time::sleep(Duration::from_millis(800)).await;
        let asked = Instant::now();
        let (status, body) = post(
            &client,
            server.url("python-runtime", "/execute"),
            json!({"command": "echo late"}),
        )
        .await;
        let waited = asked.elapsed();
        assert!(
            waited < Duration::from_secs(20),
            "unanswered for {waited:?}"
        );
        assert_ne!(status, 200, "ran although every slot was held: {body}");
        assert_eq!(status, 503, "{body}");
        assert!(body["retry_after_ms"].as_u64().is_some(), "{body}");
        assert!(
            waited >= Duration::from_secs(9),
            "answered after {waited:?}, before the door's wait: {body}"
        );
        holder.abort();
    });
}

/// One Connect envelope (flags 0, big-endian length) around `message`.
fn envelope(message: &Value) -> Vec<u8> {
    let payload = serde_json::to_vec(message).unwrap();
    let mut out = vec![0u8];
    out.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    out.extend_from_slice(&payload);
    out
}

#[test]
fn codex_exec_fs_reaches_the_writable_roots_as_every_door_does() {
    let env = TestEnv::new();
    let cache = env.root.path().join("cache");
    let elsewhere = env.root.path().join("elsewhere");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let registry = format!(
        "allow_raw_commands = true\n[sandbox]\ndefault = \"workspace-write\"\nwritable_roots = [{:?}]\n",
        cache.display().to_string()
    );
    let server = Server::start_in(env, &registry, &["codex-exec"], &[], &[]);
    runtime().block_on(async {
        use super::codex_exec::client::Client;
        let mut client = Client::connect(server.addrs["codex-exec"], None)
            .await
            .unwrap();
        client.handshake().await;
        let data = "Y2FjaGVk"; // "cached"
        let uri = |p: &std::path::Path| format!("file://{}", p.display());
        let wrote = client
            .call(
                "fs/writeFile",
                json!({"path": uri(&cache.join("made.txt")), "dataBase64": data, "sandbox": null}),
            )
            .await;
        assert_eq!(wrote["result"], json!({}), "{wrote}");
        assert_eq!(
            std::fs::read_to_string(cache.join("made.txt")).unwrap(),
            "cached"
        );
        let outside = client
            .call(
                "fs/writeFile",
                json!({"path": uri(&elsewhere.join("x")), "dataBase64": data, "sandbox": null}),
            )
            .await;
        assert_eq!(outside["error"]["code"], -32600, "{outside}");
        assert!(!elsewhere.join("x").exists());
        client.close().await;
    });
}

/// Sends `head` then `body` on a new connection to `addr` (with `shut`,
/// the write side shut after it: the body ends there) and reads the first
/// part of the answer.
async fn raw_exchange(addr: SocketAddr, head: &str, body: &[u8], shut: bool) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    if shut {
        stream.shutdown().await.unwrap();
    }
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut answer))
        .await
        .map_or(0, |read| read.unwrap_or(0));
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

#[test]
fn mcp_answers_malformed_json_and_a_short_body_with_a_json_rpc_parse_error() {
    let server = Server::start("allow_raw_commands = true\n", &["mcp"], &[]);
    let addr = server.addrs["mcp"];
    let head = |length: usize| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
        )
    };
    runtime().block_on(async {
        let broken = b"{\"jsonrpc\":\"2.0\",";
        let answer = raw_exchange(addr, &head(broken.len()), broken, false).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("-32700"), "{answer}");
        let short = b"{\"a\":1}";
        let answer = raw_exchange(addr, &head(100), short, true).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("-32700"), "{answer}");
        // The control: a well-formed initialize is served.
        let hello = serde_json::to_vec(&json!({
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}
        }))
        .unwrap();
        let answer = raw_exchange(addr, &head(hello.len()), &hello, false).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    });
}

#[test]
fn envd_watchers_from_many_addresses_stop_at_the_servers_bound() {
    let server = Server::start("allow_raw_commands = true\n", &["envd"], &[]);
    let dir = server.env.work();
    let url = server.url("envd", "/filesystem.Filesystem/CreateWatcher");
    runtime().block_on(async {
        let mut ids = Vec::new();
        // Two callers at their own cap of 32 fill the server's 64.
        for source in ["127.0.0.1", "127.0.0.2"] {
            let client = client_from(source);
            for _ in 0..32 {
                let (status, body) = post(
                    &client,
                    url.clone(),
                    json!({"path": dir.to_str().unwrap(), "recursive": false}),
                )
                .await;
                assert_eq!(status, 200, "{source}: {body}");
                ids.push((source, body["watcherId"].as_str().unwrap().to_owned()));
            }
        }
        let third = client_from("127.0.0.3");
        let (status, body) = post(
            &third,
            url.clone(),
            json!({"path": dir.to_str().unwrap(), "recursive": false}),
        )
        .await;
        assert_eq!(status, 429, "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("across every caller"),
            "{body}"
        );
        // One given back: the third caller gets it.
        let (source, id) = ids.pop().unwrap();
        let (status, body) = post(
            &client_from(source),
            server.url("envd", "/filesystem.Filesystem/RemoveWatcher"),
            json!({"watcherId": id}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let (status, body) = post(
            &third,
            url,
            json!({"path": dir.to_str().unwrap(), "recursive": false}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    });
}

#[test]
fn an_open_websocket_keeps_its_place_under_max_connections() {
    let server = Server::start(
        "allow_raw_commands = true\n",
        &["codex-exec"],
        &["--max-connections", "2"],
    );
    let addr = server.addrs["codex-exec"];
    runtime().block_on(async {
        use super::codex_exec::client::Client;
        let mut first = Client::connect(addr, None).await.unwrap();
        first.handshake().await;
        let mut second = Client::connect(addr, None).await.unwrap();
        second.handshake().await;
        // Both places are held by upgraded sockets: a third connection is
        // not served while they are open.
        let third =
            tokio::time::timeout(Duration::from_millis(1500), Client::connect(addr, None)).await;
        assert!(
            third.is_err(),
            "a third connection was served past --max-connections 2"
        );
        first.close().await;
        let mut again = None;
        for _ in 0..50 {
            if let Ok(Ok(client)) =
                tokio::time::timeout(Duration::from_millis(500), Client::connect(addr, None)).await
            {
                again = Some(client);
                break;
            }
        }
        let mut again = again.expect("a closed socket freed its place");
        again.handshake().await;
        again.close().await;
        second.close().await;
    });
}
