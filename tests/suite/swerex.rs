//! The SWE-ReX listener through the `swerex-remote` link, spoken to over
//! HTTP as its published client does: route shapes, status codes, the 511
//! exception transfers, the key, the request-id replay, sessions and their
//! timeouts, uploads.

use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{ServerProcess, TestEnv, gone_within, pid_in};

const KEY: &str = "suite-key";

/// A running `swerex-remote` on a loopback port; killed when dropped.
struct ServerGuard {
    _process: ServerProcess,
    base: String,
}

fn start(env: &TestEnv) -> ServerGuard {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let link = env.link("swerex-remote");
    let child = Command::new(&link)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--auth-token",
            KEY,
        ])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", env.root.path().join("home"))
        .env("AGENT_REACH_HOME", env.ar_home())
        .env("LANG", "C.UTF-8")
        .current_dir(env.work())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let guard = ServerGuard {
        _process: ServerProcess::new(child),
        base: format!("http://127.0.0.1:{port}"),
    };
    for _ in 0..400 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return guard;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("swerex-remote did not listen on {port}");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// POSTs `body` with the key; returns the status and the JSON answer.
async fn post(server: &ServerGuard, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.base))
        .header("X-API-Key", KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn run(server: &ServerGuard, command: &str, extra: Value) -> (u16, Value) {
    let mut body = json!({"action_type": "bash", "command": command, "timeout": 30});
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        body[k] = v;
    }
    post(server, "/run_in_session", body).await
}

fn class_of(answer: &Value) -> &str {
    answer["swerexception"]["class_path"].as_str().unwrap_or("")
}

#[test]
fn swerex_remote_needs_a_token_off_loopback() {
    let env = TestEnv::new();
    let link = env.link("swerex-remote");
    env.cmd_at(&link)
        .args(["--host", "0.0.0.0", "--port", "1"])
        .run()
        .code_is(2)
        .stderr_contains("--auth-token");
}

#[test]
fn every_route_needs_the_key_as_the_original_answers() {
    let env = TestEnv::new();
    let server = start(&env);
    runtime().block_on(async {
        let client = reqwest::Client::new();
        for (path, key, status) in [
            ("/", None, 403),
            ("/is_alive", Some("wrong"), 401),
            ("/", Some(KEY), 200),
            ("/nope", Some(KEY), 404),
            ("/nope", None, 403),
        ] {
            let mut request = client.get(format!("{}{path}", server.base));
            if let Some(key) = key {
                request = request.header("X-API-Key", key);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response.status().as_u16(),
                status,
                "GET {path} with {key:?}"
            );
        }
        let alive: Value = client
            .get(format!("{}/is_alive", server.base))
            .header("X-API-Key", KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(alive, json!({"is_alive": true, "message": ""}));
    });
}

#[test]
fn a_session_carries_state_and_raises_what_the_client_reraises() {
    let env = TestEnv::new();
    let server = start(&env);
    runtime().block_on(async {
        let (status, created) =
            post(&server, "/create_session", json!({"session_type": "bash"})).await;
        assert_eq!(
            (status, created["session_type"].as_str()),
            (200, Some("bash"))
        );
        let (status, again) =
            post(&server, "/create_session", json!({"session_type": "bash"})).await;
        assert_eq!(
            (status, class_of(&again)),
            (511, "swerex.exceptions.SessionExistsError")
        );
        run(
            &server,
            "cd /tmp; N=41; inc() { echo $((N+1)); }",
            json!({}),
        )
        .await;
        let (status, obs) = run(&server, "pwd; inc", json!({})).await;
        assert_eq!(status, 200, "{obs}");
        assert_eq!(obs["output"], "/tmp\n42\n");
        assert_eq!(obs["exit_code"], 0);
        assert_eq!(obs["session_type"], "bash");
        let (status, failed) =
            run(&server, "exit_with() { return 7; }; exit_with", json!({})).await;
        assert_eq!(
            (status, class_of(&failed)),
            (511, "swerex.exceptions.NonZeroExitCodeError")
        );
        assert!(
            failed["swerexception"]["message"]
                .as_str()
                .unwrap()
                .contains("exit code 7")
        );
        let (_, silent) = run(&server, "false", json!({"check": "silent"})).await;
        assert_eq!(silent["exit_code"], 1);
        let (status, syntax) = run(&server, "(a", json!({})).await;
        assert_eq!(
            (status, class_of(&syntax)),
            (511, "swerex.exceptions.BashIncorrectSyntaxError")
        );
        assert!(
            syntax["swerexception"]["extra_info"]["bash_stderr"]
                .as_str()
                .unwrap()
                .contains("syntax error")
        );
        let (status, missing) = run(&server, "true", json!({"session": "other"})).await;
        assert_eq!(
            (status, class_of(&missing)),
            (511, "swerex.exceptions.SessionDoesNotExistError")
        );
        let (status, untagged) = post(&server, "/run_in_session", json!({"command": "true"})).await;
        assert_eq!(
            (status, untagged["detail"][0]["type"].as_str()),
            (422, Some("union_tag_not_found"))
        );
        let (status, _) = post(&server, "/close_session", json!({"session_type": "bash"})).await;
        assert_eq!(status, 200);
    });
}

#[test]
fn a_timeout_kills_the_command_and_the_shell_comes_back() {
    let env = TestEnv::new();
    let server = start(&env);
    let pid_file = env.work().join("pid");
    runtime().block_on(async {
        post(&server, "/create_session", json!({"session_type": "bash"})).await;
        let command = format!("sh -c 'echo $$ > {}; exec sleep 300'", pid_file.display());
        let (status, timed_out) = run(&server, &command, json!({"timeout": 1})).await;
        assert_eq!(
            (status, class_of(&timed_out)),
            (511, "swerex.exceptions.CommandTimeoutError")
        );
        let pid = pid_in(&pid_file);
        assert!(
            gone_within(pid, Duration::from_secs(5)),
            "process {pid} outlived its timeout"
        );
        let (status, interrupt) = post(
            &server,
            "/run_in_session",
            json!({"action_type": "bash_interrupt"}),
        )
        .await;
        assert_eq!(
            (status, interrupt["exit_code"].as_i64()),
            (200, Some(0)),
            "{interrupt}"
        );
        let (_, obs) = run(&server, "echo back", json!({})).await;
        assert_eq!(obs["output"], "back\n");
    });
}

#[test]
fn a_retried_request_id_gets_the_last_answer_again() {
    let env = TestEnv::new();
    let server = start(&env);
    runtime().block_on(async {
        post(&server, "/create_session", json!({"session_type": "bash"})).await;
        let client = reqwest::Client::new();
        let send = |id: &'static str| {
            client
                .post(format!("{}/run_in_session", server.base))
                .header("X-API-Key", KEY)
                .header("X-Request-ID", id)
                .json(&json!({"action_type": "bash", "command": "echo $RANDOM$RANDOM$RANDOM"}))
                .send()
        };
        let first = send("r-1").await.unwrap().text().await.unwrap();
        let replayed = send("r-1").await.unwrap().text().await.unwrap();
        let fresh = send("r-2").await.unwrap().text().await.unwrap();
        assert_eq!(first, replayed);
        assert_ne!(first, fresh);
    });
}

#[test]
fn execute_and_the_file_routes_answer_as_subprocess_and_pathlib() {
    let env = TestEnv::new();
    let server = start(&env);
    let work = env.work();
    runtime().block_on(async {
        let (status, ran) = post(
            &server,
            "/execute",
            json!({"command": ["sh", "-c", "echo $ONLY; pwd; env | wc -l"], "env": {"ONLY": "x"}, "cwd": "/tmp"}),
        )
        .await;
        assert_eq!(status, 200, "{ran}");
        let lines: Vec<&str> = ran["stdout"].as_str().unwrap().lines().collect();
        assert_eq!(&lines[..2], ["x", "/tmp"]);
        assert!(lines[2].trim().parse::<u32>().unwrap() <= 4, "env not replaced: {ran}");
        let (status, missing) = post(&server, "/execute", json!({"command": ["no-such-program-x"]})).await;
        assert_eq!((status, class_of(&missing)), (511, "builtins.FileNotFoundError"));
        let (status, late) = post(&server, "/execute", json!({"command": ["sleep", "30"], "timeout": 0.3})).await;
        assert_eq!((status, class_of(&late)), (511, "swerex.exceptions.CommandTimeoutError"));
        let path = work.join("deep/dir/f.txt");
        let (status, _) = post(&server, "/write_file", json!({"path": path, "content": "hi\n"})).await;
        assert_eq!(status, 200);
        let (_, read) = post(&server, "/read_file", json!({"path": path})).await;
        assert_eq!(read["content"], "hi\n");
        let zip = zip_of(&[("pkg/a.txt", "A"), ("b.txt", "B")]);
        let form = reqwest::multipart::Form::new()
            .part("file", reqwest::multipart::Part::bytes(zip).file_name("t.zip"))
            .text("target_path", work.join("unzipped").display().to_string())
            .text("unzip", "true");
        let response = reqwest::Client::new()
            .post(format!("{}/upload", server.base))
            .header("X-API-Key", KEY)
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        assert_eq!(std::fs::read_to_string(work.join("unzipped/pkg/a.txt")).unwrap(), "A");
        assert_eq!(std::fs::read_to_string(work.join("unzipped/b.txt")).unwrap(), "B");
    });
}

#[test]
fn execute_env_reaches_the_command_and_reserved_names_are_refused_422() {
    let env = TestEnv::new();
    let server = start(&env);
    let garbage = env.work().join("uploaded.so");
    std::fs::write(&garbage, "not an ELF object").unwrap();
    runtime().block_on(async {
        let (status, ran) = post(
            &server,
            "/execute",
            json!({"command": ["/bin/sh", "-c", "echo \"$X|$LD_PRELOAD\""],
                   "env": {"X": "from-request", "LD_PRELOAD": garbage}}),
        )
        .await;
        assert_eq!(status, 200, "{ran}");
        assert_eq!(
            ran["stdout"].as_str().unwrap(),
            format!("from-request|{}\n", garbage.display())
        );
        let stderr = ran["stderr"].as_str().unwrap_or("");
        assert_eq!(stderr.matches("cannot be preloaded").count(), 1, "{ran}");
        let (status, refused) = post(
            &server,
            "/execute",
            json!({"command": ["/bin/true"], "env": {"AGENT_REACH_HOME": "/nonexistent"}}),
        )
        .await;
        assert_eq!(status, 422, "{refused}");
        assert_eq!(refused["error"]["kind"], "invalid_params", "{refused}");
        assert!(
            refused["detail"]
                .as_str()
                .unwrap()
                .contains("AGENT_REACH_HOME")
        );
    });
}

#[test]
fn an_execute_timeout_past_the_limit_is_capped_and_the_answer_says_so() {
    let env = TestEnv::new();
    let server = start(&env);
    runtime().block_on(async {
        let (status, ran) = post(
            &server,
            "/execute",
            json!({"command": ["true"], "timeout": 1e6}),
        )
        .await;
        assert_eq!(status, 200, "{ran}");
        assert_eq!(ran["capped"], json!(["max_timeout_ms"]), "{ran}");
        let (_, fair) = post(
            &server,
            "/execute",
            json!({"command": ["true"], "timeout": 5}),
        )
        .await;
        assert!(fair.get("capped").is_none(), "{fair}");
    });
}

fn zip_of(files: &[(&str, &str)]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, text) in files {
        writer
            .start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        writer.write_all(text.as_bytes()).unwrap();
    }
    writer.finish().unwrap().into_inner()
}
