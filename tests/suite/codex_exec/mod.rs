//! `serve --listen codex-exec=ADDR` and `serve --stdio codex-exec`: Codex's
//! exec-server protocol spoken over a raw WebSocket and over stdio, in the
//! shape of the traffic the real Codex 0.171.0 exchanged with its own
//! server (shared/protocols/codex-exec-0.171.0/): the handshake, an
//! `exec_command` turn (output, exit code, an escapee gone), the `fs/*`
//! calls of `apply_patch` (a write into a missing directory is `-32004`,
//! then Codex creates it), stdin, the token, the gate's idle timeout, and
//! the connection's end killing what its processes started. The real Codex
//! drives the door in tests/codex/run.sh.

pub(crate) mod client;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::{ServerProcess, TestEnv, gone_within, pids, serve_listening};
use crate::suite::listeners::listening;
use client::Wire;
pub(crate) use client::{Client, decode, uri};

const TOKEN: &str = "codex-t0ken";
/// The bound on any one wait for the server.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);

/// A `serve` process with a `codex-exec` listener; killed and reaped on drop.
struct Door {
    _process: ServerProcess,
    _known: agent_reach::exec::KnownChildGuard,
    env: TestEnv,
    addr: std::net::SocketAddr,
}

impl Door {
    fn start(extra_env: &[(&str, &str)]) -> Self {
        Self::start_with(extra_env, None)
    }

    /// A server with `extra_env` and, if given, the registry `registry`.
    fn start_with(extra_env: &[(&str, &str)], registry: Option<&str>) -> Self {
        let env = TestEnv::new();
        let log = env.root.path().join("serve.log");
        let mut cmd = serve_listening(&env, &log, &["codex-exec=127.0.0.1:0".to_owned()], TOKEN);
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        if let Some(registry) = registry {
            let config = env.root.path().join("registry.toml");
            std::fs::write(&config, registry).unwrap();
            cmd.arg("--config").arg(config);
        }
        let child = cmd.spawn().unwrap();
        let known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
        let addr = listening(&log, 1)["codex-exec"];
        Self {
            _process: ServerProcess::new(child),
            _known: known,
            env,
            addr,
        }
    }

    async fn client(&self) -> Client {
        let mut client = Client::connect(self.addr, Some(TOKEN)).await.unwrap();
        client.handshake().await;
        client
    }

    fn work(&self) -> std::path::PathBuf {
        self.env.work().canonicalize().unwrap()
    }
}

/// A `serve --stdio codex-exec` child, as a Codex environment starts it.
fn stdio_door(env: &TestEnv) -> (tokio::process::Child, Client) {
    let mut child = tokio::process::Command::new(crate::common::bin())
        .args(["serve", "--stdio", "codex-exec", "--root"])
        .arg(env.work())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", env.root.path().join("home"))
        .env("AGENT_REACH_HOME", env.ar_home())
        .env("LANG", "C.UTF-8")
        .current_dir(env.work())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    (child, Client::over(Wire::Stdio { stdin, stdout }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_describes_this_environment_honestly() {
    let door = Door::start(&[]);
    let mut client = Client::connect(door.addr, Some(TOKEN)).await.unwrap();
    let reply = client.handshake().await;
    let info = &reply["result"]["environmentInfo"];
    assert_eq!(reply["result"]["sessionId"].as_str().unwrap().len(), 36);
    assert!(
        ["bash", "zsh", "sh"].contains(&info["shell"]["name"].as_str().unwrap()),
        "{info}"
    );
    assert_eq!(info["cwd"], uri(&door.work()));
    assert_eq!(info["executorVersion"], "0.171.0");
    assert_eq!(info["capabilities"]["fsWatchMissing"], false, "{info}");
    assert_eq!(
        info["capabilities"]["environmentConfigRead"], false,
        "{info}"
    );
    assert_eq!(
        client.call("environment/info", json!({})).await["result"],
        *info
    );
    let watch = client
        .call(
            "fs/watchMissing",
            json!({"watchId": 1, "missing": [], "present": null}),
        )
        .await;
    assert_eq!(watch["error"]["code"], -32601, "{watch}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_command_turn_streams_output_then_exit_then_close() {
    let door = Door::start(&[]);
    let mut client = door.client().await;
    let work = door.work();
    for probe in [work.join(".git"), "/.git".into(), "/tmp/.git".into()] {
        let missing = client
            .call(
                "fs/getMetadata",
                json!({"path": uri(&probe), "sandbox": null}),
            )
            .await;
        assert_eq!(missing["error"]["code"], -32004, "{probe:?}: {missing}");
    }
    let started = client
        .start(
            "p1",
            &[
                "/bin/bash",
                "-lc",
                "echo via-reach; echo S=$AGENT_REACH_SESSION; echo V=$CODEX_VERSION; pwd",
            ],
            &work,
            json!({}),
        )
        .await;
    assert_eq!(started["result"]["processId"], "p1", "{started}");
    let ran = client.until_closed("p1").await;
    assert_eq!(ran.exit_code, 0, "{ran:?}");
    assert!(ran.output.starts_with("via-reach\nS=ar-"), "{ran:?}");
    assert!(ran.output.contains("V=0.171.0\n"), "{ran:?}");
    assert!(
        ran.output.ends_with(&format!("{}\n", work.display())),
        "{ran:?}"
    );
    let seqs: Vec<u64> = ran
        .events
        .iter()
        .map(|e| e["params"]["seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1) && seqs[0] == 1,
        "{seqs:?}"
    );
    let kinds: Vec<&str> = ran
        .events
        .iter()
        .rev()
        .take(2)
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["process/closed", "process/exited"]);
    let gone = client
        .call("process/terminate", json!({"processId": "p1"}))
        .await;
    assert_eq!(gone["result"], json!({"running": false}));

    client
        .start(
            "p2",
            &["/bin/bash", "-lc", "echo hi; exit 3"],
            &work,
            json!({}),
        )
        .await;
    let ran = client.until_closed("p2").await;
    assert_eq!((ran.output.as_str(), ran.exit_code), ("hi\n", 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setsid_escapee_is_gone_from_proc_when_its_process_closes() {
    let door = Door::start(&[]);
    let mut client = door.client().await;
    let marker = ["sleep", "777.125"];
    client
        .start(
            "bg",
            &["/bin/bash", "-lc", "setsid sleep 777.125 & echo bg"],
            &door.work(),
            json!({}),
        )
        .await;
    let ran = client.until_closed("bg").await;
    assert_eq!((ran.output.as_str(), ran.exit_code), ("bg\n", 0));
    assert_eq!(
        pids::running(&marker),
        0,
        "the escapee outlived its process"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_s_end_kills_everything_its_processes_started() {
    let door = Door::start(&[]);
    let mut client = door.client().await;
    let pid_file = door.work().join("pid");
    let line = format!(
        "setsid sleep 778.5 & echo $! > {}; sleep 779.5",
        pid_file.display()
    );
    let started = client
        .start(
            "long",
            &["/bin/bash", "-lc", &line],
            &door.work(),
            json!({}),
        )
        .await;
    assert!(started["result"].is_object(), "{started}");
    let began = Instant::now();
    while !pid_file.exists()
        || std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .is_empty()
    {
        assert!(began.elapsed() < LIMIT, "the process never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let escapee: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    client.close().await;
    assert!(
        gone_within(escapee, Duration::from_secs(10)),
        "the escapee outlived the connection"
    );
    assert_eq!(pids::running(&["sleep", "779.5"]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_patch_s_fs_calls_work_and_a_missing_directory_is_not_found_first() {
    let door = Door::start(&[]);
    let mut client = door.client().await;
    let work = door.work();
    let inner = uri(&work.join("sub/dir/inner.txt"));
    let data = STANDARD.encode("inner\n");
    let first = client
        .call(
            "fs/writeFile",
            json!({"path": inner, "dataBase64": data, "sandbox": null}),
        )
        .await;
    assert_eq!(first["error"]["code"], -32004, "{first}");
    assert!(
        !work.join("sub").exists(),
        "the refused write made directories"
    );
    let made = client
        .call(
            "fs/createDirectory",
            json!({"path": uri(&work.join("sub/dir")), "recursive": true, "sandbox": null}),
        )
        .await;
    assert_eq!(made["result"], json!({}), "{made}");
    let wrote = client
        .call(
            "fs/writeFile",
            json!({"path": inner, "dataBase64": data, "sandbox": null}),
        )
        .await;
    assert_eq!(wrote["result"], json!({}), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(work.join("sub/dir/inner.txt")).unwrap(),
        "inner\n"
    );
    let read = client
        .call("fs/readFile", json!({"path": inner, "sandbox": null}))
        .await;
    assert_eq!(decode(&read["result"]["dataBase64"]), b"inner\n");
    let meta = client
        .call("fs/getMetadata", json!({"path": inner, "sandbox": null}))
        .await;
    assert_eq!(meta["result"]["isFile"], true, "{meta}");
    assert_eq!(meta["result"]["size"], 6);
    assert!(meta["result"]["modifiedAtMs"].as_i64().unwrap() > 0);
    let listed = client
        .call(
            "fs/readDirectory",
            json!({"path": uri(&work.join("sub")), "sandbox": null}),
        )
        .await;
    assert_eq!(
        listed["result"]["entries"],
        json!([{"fileName": "dir", "isDirectory": true, "isFile": false}])
    );
    let removed = client
        .call(
            "fs/remove",
            json!({"path": inner, "recursive": false, "force": false, "sandbox": null}),
        )
        .await;
    assert_eq!(removed["result"], json!({}), "{removed}");
    assert!(!work.join("sub/dir/inner.txt").exists());
    let again = client
        .call("fs/readFile", json!({"path": inner, "sandbox": null}))
        .await;
    assert_eq!(again["error"]["code"], -32004, "{again}");
    let outside = client
        .call(
            "fs/writeFile",
            json!({"path": "file:///tmp/codex-exec-planted", "dataBase64": data, "sandbox": null}),
        )
        .await;
    assert_eq!(outside["error"]["code"], -32600, "{outside}");
    assert!(
        outside["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--root"),
        "{outside}"
    );
    assert!(!Path::new("/tmp/codex-exec-planted").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_reaches_a_process_and_its_output_can_be_read_back() {
    let door = Door::start(&[]);
    let mut client = door.client().await;
    let started = client
        .start(
            "cat",
            &["/bin/bash", "-lc", "head -n1"],
            &door.work(),
            json!({"pipeStdin": true}),
        )
        .await;
    assert!(started["result"].is_object(), "{started}");
    let wrote = client
        .call(
            "process/write",
            json!({"processId": "cat", "chunk": STANDARD.encode("hello\n"), "writeId": "w1"}),
        )
        .await;
    assert_eq!(wrote["result"]["status"], "accepted", "{wrote}");
    let ran = client.until_closed("cat").await;
    assert_eq!((ran.output.as_str(), ran.exit_code), ("hello\n", 0));
    let read = client
        .call(
            "process/read",
            json!({"processId": "cat", "afterSeq": 0, "maxBytes": null, "waitMs": 0}),
        )
        .await;
    let r = &read["result"];
    assert_eq!(
        (
            r["exited"].clone(),
            r["exitCode"].clone(),
            r["closed"].clone()
        ),
        (json!(true), json!(0), json!(true)),
        "{read}"
    );
    assert_eq!(decode(&r["chunks"][0]["chunk"]), b"hello\n", "{read}");
    let unknown = client
        .call(
            "process/write",
            json!({"processId": "nope", "chunk": "", "writeId": "w2"}),
        )
        .await;
    assert_eq!(unknown["result"]["status"], "unknownProcess");
    let outside = client
        .start("x", &["true"], Path::new("/"), json!({}))
        .await;
    assert_eq!(outside["error"]["code"], -32602, "{outside}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_passes_the_gate_only_with_the_token_and_then_outlives_its_idle_timeout() {
    let door = Door::start(&[("AGENT_REACH_GATE_IDLE_TIMEOUT_MS", "300")]);
    let refused = Client::connect(door.addr, None)
        .await
        .err()
        .expect("no token, no WebSocket");
    assert!(refused.to_string().contains("401"), "{refused}");
    let wrong = Client::connect(door.addr, Some("wrong"))
        .await
        .err()
        .expect("a wrong token");
    assert!(wrong.to_string().contains("401"), "{wrong}");
    for header in [("host", "evil.example"), ("origin", "http://evil.example")] {
        let refused = Client::connect_with(door.addr, Some(TOKEN), &[header])
            .await
            .err()
            .expect("a foreign Host or Origin");
        assert!(refused.to_string().contains("403"), "{header:?}: {refused}");
    }
    let mut client = door.client().await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let still = client.call("environment/info", json!({})).await;
    assert!(still["result"]["shell"].is_object(), "{still}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_speaks_the_same_protocol_one_message_per_line() {
    let env = TestEnv::new();
    let (mut child, mut client) = stdio_door(&env);
    let work = env.work().canonicalize().unwrap();
    let reply = client.handshake().await;
    assert_eq!(
        reply["result"]["environmentInfo"]["cwd"],
        uri(&work),
        "{reply}"
    );
    client
        .start(
            "s1",
            &["/bin/bash", "-lc", "echo one; echo two >&2; exit 4"],
            &work,
            json!({}),
        )
        .await;
    let ran = client.until_closed("s1").await;
    assert_eq!(ran.exit_code, 4, "{ran:?}");
    assert!(
        ran.output.contains("one\n") && ran.output.contains("two\n"),
        "{ran:?}"
    );
    let streams: Vec<&str> = ran
        .events
        .iter()
        .filter_map(|e| e["params"]["stream"].as_str())
        .collect();
    assert!(streams.contains(&"stderr"), "{streams:?}");
    let wrote = client
        .call("fs/writeFile", json!({"path": uri(&work.join("hello.txt")), "dataBase64": STANDARD.encode("hello two\n"), "sandbox": null}))
        .await;
    assert_eq!(wrote["result"], json!({}), "{wrote}");
    assert_eq!(
        std::fs::read_to_string(work.join("hello.txt")).unwrap(),
        "hello two\n"
    );
    client
        .start(
            "long",
            &["/bin/bash", "-lc", "sleep 780.25"],
            &work,
            json!({}),
        )
        .await;
    client.close().await;
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(
        pids::running(&["sleep", "780.25"]),
        0,
        "stdin's end left a process running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_reaches_codex_redacted() {
    let door = Door::start_with(
        &[("DEPLOY_TOKEN", "tok-7f3a9c2e51")],
        Some(
            "allow_raw_commands = true\n[[tools]]\nname = \"deploy\"\ncommand = [\"true\"]\ncwd = \"project_root\"\nrisk = \"low\"\nsecrets = [\"DEPLOY_TOKEN\"]\n",
        ),
    );
    let mut client = door.client().await;
    client
        .start(
            "leak",
            &["/bin/sh", "-c", "echo token=tok-7f3a9c2e51"],
            &door.work(),
            json!({}),
        )
        .await;
    let ran = client.until_closed("leak").await;
    assert_eq!(ran.output, "token=[REDACTED:DEPLOY_TOKEN]\n", "{ran:?}");
}

#[test]
fn stdio_codex_exec_and_listen_together_are_a_usage_error() {
    let env = TestEnv::new();
    env.cmd()
        .args([
            "serve",
            "--stdio",
            "codex-exec",
            "--listen",
            "codex-exec=127.0.0.1:0",
        ])
        .run()
        .code_is(2)
        .stderr_contains("--stdio codex-exec");
}
